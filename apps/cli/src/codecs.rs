//! `tessera codecs`: bakes each image with each codec and measures bits per texel, PSNR
//! against the source, bake and transcode throughput, and (with `--gpu`) disk → VRAM
//! streaming against the transcode limit; prints a table per image and writes JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::stream_bench::{StreamBenchConfig, StreamReport, stream};
use anyhow::{Context, Result};
use serde::Serialize;
use tessera::GpuContext;
use tessera_core::bake::source::{ImageSource, RowSource};
use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::codec::{Codec, QUALITY_DEFAULT, TargetFormat};

pub(crate) use measure::crop_centre;
use measure::{CodecBenchOptions, CodecMeasurement, atlas_path, measure, sample_mip0};

mod measure;

/// Arguments of `tessera codecs`.
#[derive(clap::Args)]
pub(crate) struct CodecsArgs {
    /// Images to measure (PNG or JPEG). Names containing "norm" (normal maps) are baked as
    /// linear data, everything else as sRGB colour.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// Codecs to measure, comma-separated: raw, lz4, etc1s, uastc.
    #[arg(long, value_delimiter = ',', default_value = "raw,lz4,etc1s,uastc")]
    codecs: Vec<Codec>,
    /// Basis quality 1–255 (ETC1S quality level; UASTC pack level).
    #[arg(long, default_value_t = QUALITY_DEFAULT, value_parser = clap::value_parser!(u32).range(1..=255))]
    quality: u32,
    /// Mip-0 tiles, evenly spread over the image, that transcoding and streaming are timed on.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    tiles: u64,
    /// Measure the centred WxH part of each image instead (for quicker bakes of huge images).
    #[arg(long, value_name = "WxH", value_parser = crate::parse_size)]
    crop: Option<(u32, u32)>,
    /// Also measure end-to-end disk → VRAM streaming on the GPU (one loader thread per core).
    #[arg(long)]
    gpu: bool,
    /// Loader threads of the `--gpu` measurement (0: one per core). The limit it is
    /// compared with stays every core × the 1-core rate.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=256))]
    loader_threads: u64,
    /// MiB of staging memory the loader threads of the `--gpu` measurement write tiles
    /// into (0: the measuring thread copies every tile into staging itself).
    #[arg(long, default_value_t = tessera::staging::DEFAULT_STAGING_MIB,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(tessera::staging::MAX_STAGING_MIB)))]
    staging_mib: u32,
    /// Write the full report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Folder for the temporary atlases (default: a new folder in the system's temp folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// The JSON report.
#[derive(Serialize)]
struct Report {
    /// The command line.
    command: String,
    /// Cores (rayon threads, loader threads).
    cores: usize,
    /// The GPU, with `--gpu`.
    adapter: Option<String>,
    /// Basis quality.
    quality: u32,
    /// The Basis transcoder the transcode rates are of (`TESSERA_TRANSCODER`), e.g.
    /// `rust (basisu 0.1.0)`; `cpp` needs a build with the `cpp-transcoder` feature.
    transcoder: String,
    images: Vec<ImageReport>,
}

#[derive(Serialize)]
struct ImageReport {
    path: PathBuf,
    /// Size of the image file's pixels.
    source_size: (u32, u32),
    /// Size measured (the crop, when given).
    size: (u32, u32),
    color: ColorSpace,
    codecs: Vec<CodecReport>,
}

#[derive(Serialize)]
struct CodecReport {
    #[serde(flatten)]
    measurement: CodecMeasurement,
    /// Disk → VRAM streaming, with `--gpu`.
    stream: Option<StreamResult>,
}

#[derive(Serialize)]
struct StreamResult {
    #[serde(flatten)]
    report: StreamReport,
    /// `cores ×` the single-core transcode rate to the pool's format, measured in this run.
    limit_tiles_per_s: Option<f64>,
    /// `tiles_per_s / limit_tiles_per_s`.
    fraction_of_limit: Option<f64>,
}

/// Removes the temporary atlas folder when it was made here.
struct WorkDir {
    path: PathBuf,
    owned: bool,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs `tessera codecs`.
pub(crate) fn run(args: &CodecsArgs) -> Result<ExitCode> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let ctx = if args.gpu { Some(GpuContext::headless()?) } else { None };
    if let Some(ctx) = &ctx {
        println!("adapter: {}", ctx.describe());
    }
    let transcoder = tessera_core::format::codec::basis_transcoder().label();
    let choice = if cfg!(feature = "cpp-transcoder") {
        "TESSERA_TRANSCODER=rust or cpp"
    } else {
        "the C++ one needs a build with --features cpp-transcoder"
    };
    println!("basis transcoder: {transcoder} ({choice})");
    let work = match &args.work_dir {
        Some(p) => WorkDir { path: p.clone(), owned: false },
        None => WorkDir {
            path: std::env::temp_dir().join(format!("tessera-codecs-{}", std::process::id())),
            owned: true,
        },
    };
    std::fs::create_dir_all(&work.path).with_context(|| format!("creating {}", work.path.display()))?;
    let opts = CodecBenchOptions {
        quality: args.quality,
        sample_tiles: usize::try_from(args.tiles).unwrap_or(usize::MAX),
        ..CodecBenchOptions::default()
    };
    let mut report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        cores,
        adapter: ctx.as_ref().map(GpuContext::describe),
        quality: args.quality,
        transcoder,
        images: Vec::new(),
    };
    for path in &args.images {
        let image = measure_image(path, args, &opts, ctx.as_ref(), &work.path)?;
        print!("{}", table(&image, cores, ctx.is_some()));
        report.images.push(image);
    }
    println!("{}", legend(cores));
    if let Some(json) = &args.json {
        if let Some(dir) = json.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(&report).context("serialising the codec report")?;
        std::fs::write(json, text + "\n").with_context(|| format!("writing {}", json.display()))?;
        println!("report written to {}", json.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Bakes and measures one image with every codec.
fn measure_image(
    path: &Path,
    args: &CodecsArgs,
    opts: &CodecBenchOptions,
    ctx: Option<&GpuContext>,
    dir: &Path,
) -> Result<ImageReport> {
    let full = ImageSource::open(path)?;
    let source_size = full.size();
    let image = match args.crop {
        Some((w, h)) => crop_centre(&full, w, h).with_context(|| format!("{}", path.display()))?,
        None => full,
    };
    let size = image.size();
    let image = Arc::new(image);
    let name = crate::layer_name(path);
    let color =
        if name.to_ascii_lowercase().contains("norm") { ColorSpace::Linear } else { ColorSpace::Srgb };
    let mut codecs = Vec::new();
    for &codec in &args.codecs {
        eprintln!("{name} ({}x{}): baking with {codec} and measuring…", size.0, size.1);
        let file = atlas_path(dir, &name, codec);
        let (measurement, atlas) = measure(&image, &name, color, codec, &file, opts)
            .with_context(|| format!("measuring {} with {codec}", path.display()))?;
        let stream = match ctx {
            Some(ctx) => {
                let cfg = StreamBenchConfig {
                    tiles: sample_mip0(&atlas, opts.sample_tiles),
                    min_duration: Duration::from_millis(500),
                    threads: args.loader_threads as usize,
                    staging_mib: args.staging_mib,
                    ..StreamBenchConfig::default()
                };
                let report = stream(ctx, atlas.clone(), &cfg)
                    .with_context(|| format!("streaming {} baked with {codec}", path.display()))?;
                let limit = measurement
                    .rate(report.target)
                    .map(|r| measurement.cores as f64 * r.single_core_tiles_per_s);
                let fraction = limit.map(|l| report.tiles_per_s / l);
                Some(StreamResult { report, limit_tiles_per_s: limit, fraction_of_limit: fraction })
            }
            None => None,
        };
        drop(atlas);
        std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
        codecs.push(CodecReport { measurement, stream });
    }
    Ok(ImageReport { path: path.to_path_buf(), source_size, size, color, codecs })
}

fn rate(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or("-".into(), |v| format!("{v:.0}"))
}

fn pct(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

/// The table of one image: a row per codec.
fn table(img: &ImageReport, cores: usize, gpu: bool) -> String {
    let mut o = String::new();
    let crop = if img.size == img.source_size {
        String::new()
    } else {
        format!(" (centre crop of {}x{})", img.source_size.0, img.source_size.1)
    };
    let first = img.codecs.first().map(|c| &c.measurement);
    let _ = writeln!(
        o,
        "\n{}: {}x{}{crop}, {}, {} mip-0 tiles of {}² stored, {} sampled, {cores} cores",
        img.path.display(),
        img.size.0,
        img.size.1,
        match img.color {
            ColorSpace::Srgb => "sRGB",
            ColorSpace::Linear => "linear",
        },
        first.map_or(0, |m| m.mip0_tiles),
        first.map_or(0, |m| m.padded_tile_size),
        first.map_or(0, |m| m.sample_tiles),
    );
    let targets = TargetFormat::ALL;
    let mut h1 = format!("{:<10} {:>6} {:>8} {:>8}  ", "", "bits/", "PSNR", "bake");
    let mut h2 = format!("{:<10} {:>6} {:>8} {:>8}  ", "codec", "texel", "dB", "tiles/s");
    let _ = write!(h1, "{:^40}", "transcode, 1 core, tiles/s");
    for t in targets {
        let _ = write!(h2, "{:>7} ", format!("→{t}"));
    }
    let _ = write!(h1, " {:>5} {:>9} {:>7} {:>7}", "pool", "all cores", "", "VRAM");
    let _ = write!(h2, " {:>5} {:>9} {:>7} {:>7}", "fmt", "tiles/s", "%limit", "B/tile");
    if gpu {
        let _ = write!(h1, "  {:>9} {:>7} {:>7}", "disk→VRAM", "", "");
        let _ = write!(h2, "  {:>9} {:>7} {:>7}", "tiles/s", "%limit", "staged");
    }
    let _ = writeln!(o, "{}\n{}", h1.trim_end(), h2.trim_end());
    for c in &img.codecs {
        let m = &c.measurement;
        let psnr = m.psnr_db.map_or("lossless".into(), |db| format!("{db:.2}"));
        let _ = write!(
            o,
            "{:<10} {:>6.2} {psnr:>8} {:>8}  ",
            m.codec.name(),
            m.bits_per_texel,
            rate(Some(m.bake_tiles_per_s))
        );
        for t in targets {
            let _ = write!(o, "{:>7} ", rate(m.rate(t).map(|r| r.single_core_tiles_per_s)));
        }
        // The all-cores and VRAM columns follow the pool the GPU stream used, else the default.
        let pool = c.stream.as_ref().map_or(m.default_target, |s| s.report.target);
        let r = m.rate(pool);
        let _ = write!(
            o,
            " {:>5} {:>9} {:>7} {:>7}",
            pool.name(),
            rate(r.map(|r| r.all_cores_tiles_per_s)),
            pct(r.map(|r| r.all_cores_fraction_of_limit)),
            pool.bytes_per_tile(m.padded_tile_size)
        );
        if let Some(s) = &c.stream {
            let staged = (s.report.tiles > 0).then(|| s.report.staged as f64 / s.report.tiles as f64);
            let _ = write!(
                o,
                "  {:>9} {:>7} {:>7}",
                rate(Some(s.report.tiles_per_s)),
                pct(s.fraction_of_limit),
                pct(staged)
            );
        }
        o.push('\n');
    }
    o
}

/// What the columns mean.
fn legend(cores: usize) -> String {
    let mpix = 136.0 * 136.0 / 1e6;
    format!(
        "\nbits/texel: on disk over all mips, borders included. PSNR: mip 0 reassembled from its tiles \
         against the source (RGB).\nbake: tiles (all mips) per second of the whole bake (mips, encode, \
         write) on {cores} cores. transcode: read + CRC + transcode of one\ntile on one thread \
         (1k tiles/s = {:.1} Mpix/s of 136² tiles). all cores: the same on {cores} rayon threads; %limit \
         = of {cores} × the\n1-core rate to the pool format. disk→VRAM: --loader-threads loader threads \
         (0: {cores}), host cache cold, every tile uploaded to its own pool slot, until the GPU is idle; staged: tiles the loader\nthreads wrote into \
         staging memory themselves (--staging-mib).",
        1000.0 * mpix
    )
}
