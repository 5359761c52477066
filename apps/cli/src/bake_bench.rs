//! `tessera bake-bench`: the baker against its ceiling. For each codec and thread count it
//! times the encoder alone on the bake's own tiles (independent tiles, one per thread at
//! a time: the most the machine can encode) and the whole bake of the same texels, and
//! reports tiles/s, the bake's share of the ceiling and the parallel efficiency of both.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tessera_core::bake::source::{Generated, ImageSource, RowSource};
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::{Atlas, ColorSpace};
use tessera_core::format::codec::{Codec, EncodeOptions, QUALITY_DEFAULT};
use tessera_core::format::tile::TileId;
use tessera_core::progress::NoProgress;

use crate::codecs::crop_centre;

/// Arguments of `tessera bake-bench`.
#[derive(clap::Args)]
pub(crate) struct BakeBenchArgs {
    /// The image to bake (decoded once before timing; `tessera bake` adds its decode).
    #[arg(required_unless_present = "generate", conflicts_with = "generate")]
    image: Option<PathBuf>,
    /// Bake the procedural labelled texture of this size instead (unique tiles).
    #[arg(long, value_name = "WxH", value_parser = crate::parse_size)]
    generate: Option<(u32, u32)>,
    /// Bake only the centred WxH part of the image.
    #[arg(long, value_name = "WxH", value_parser = crate::parse_size)]
    crop: Option<(u32, u32)>,
    /// Codecs, comma-separated: raw, lz4, etc1s, uastc.
    #[arg(long, value_delimiter = ',', default_value = "lz4,etc1s,uastc")]
    codecs: Vec<Codec>,
    /// Thread counts, comma-separated (default: 1 and every core).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Basis quality 1–255.
    #[arg(long, default_value_t = QUALITY_DEFAULT, value_parser = clap::value_parser!(u32).range(1..=255))]
    quality: u32,
    /// Time the encoder alone on every Nth tile only (1: all tiles; the rate is per tile).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    ceiling_every: u64,
    /// Skip the whole bake with 1 thread (the slowest run); its efficiency is then
    /// taken against the encoder's own 1-thread rate.
    #[arg(long)]
    skip_single_bake: bool,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Folder for the atlases (default: a new folder in the system's temporary folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    command: String,
    cores: usize,
    source: String,
    size: (u32, u32),
    tiles: u64,
    decode_s: f64,
    runs: Vec<Run>,
}

#[derive(Serialize)]
struct Run {
    codec: String,
    threads: usize,
    /// The encoder alone on the bake's tiles, tiles/s.
    encode_only_tiles_per_s: f64,
    /// The whole bake, tiles/s (absent when skipped).
    bake_tiles_per_s: Option<f64>,
    bake_s: Option<f64>,
    /// Bake rate / encode-only rate at the same thread count.
    bake_of_ceiling: Option<f64>,
    /// Encode-only rate / (threads × its 1-thread rate).
    encode_only_efficiency: Option<f64>,
    /// Bake rate / (threads × the bake's 1-thread rate, or the encoder's when skipped).
    bake_efficiency: Option<f64>,
    file_bytes: Option<u64>,
}

/// A decoded image shared between bakes.
struct Shared(Arc<ImageSource>);

impl RowSource for Shared {
    fn size(&self) -> (u32, u32) {
        self.0.size()
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_rows(y0, out)
    }
}

/// Runs `tessera bake-bench`.
pub(crate) fn run(args: &BakeBenchArgs) -> Result<ExitCode> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = if args.threads.is_empty() { vec![1, cores] } else { args.threads.clone() };
    if threads.contains(&0) {
        bail!("--threads: thread counts start at 1");
    }
    let dir = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            tempfile::tempdir_in(d)
        }
        None => tempfile::tempdir(),
    }
    .context("creating the work folder")?;
    let start = Instant::now();
    let (label, source): (String, Box<dyn Fn() -> Box<dyn RowSource> + Send + Sync>) =
        match (&args.image, args.generate) {
            (Some(path), _) => {
                let full = ImageSource::open(path)?;
                let image = match args.crop {
                    Some((w, h)) => crop_centre(&full, w, h).with_context(|| path.display().to_string())?,
                    None => full,
                };
                let image = Arc::new(image);
                (path.display().to_string(), Box::new(move || Box::new(Shared(Arc::clone(&image)))))
            }
            (None, Some((w, h))) => {
                (format!("generated {w}x{h}"), Box::new(move || Box::new(Generated::new(w, h))))
            }
            (None, None) => bail!("give an IMAGE or --generate WxH"),
        };
    let decode_s = start.elapsed().as_secs_f64();
    let size = source().size();
    let base = BakeOptions { quality: args.quality, ..BakeOptions::default() };
    let input = |codec| BakeInput { codec: Some(codec), ..BakeInput::boxed("bench", source()) };
    // The bake's own tiles, bordered, as the encoder sees them: a raw bake read back.
    let raw_path = dir.path().join("raw.tsa");
    bake(vec![input(Codec::Raw)], &raw_path, &BakeOptions { codec: Codec::Raw, ..base.clone() }, &NoProgress)
        .context("baking the raw tiles")?;
    let tiles = read_all_tiles(&raw_path, args.ceiling_every)?;
    let total_tiles = Atlas::open(&raw_path)?.tile_count();
    let side = (tiles.first().map_or(0, Vec::len) / 4).isqrt() as u32;
    println!(
        "{label}: {}x{}, {total_tiles} tiles ({} timed alone), decoded in {decode_s:.2} s; {cores} cores",
        size.0,
        size.1,
        tiles.len()
    );
    println!(
        "{:<6} {:>7} {:>14} {:>12} {:>9} {:>10} {:>10}",
        "codec", "threads", "encode tiles/s", "bake tiles/s", "bake s", "of ceiling", "bake eff."
    );
    let mut runs = Vec::new();
    for &codec in &args.codecs {
        let opts =
            EncodeOptions { quality: args.quality, color: ColorSpace::Srgb, ..EncodeOptions::default() };
        let (mut encode_1, mut bake_1) = (None::<f64>, None::<f64>);
        for &n in &threads {
            let encode_rate = encode_only(&tiles, side, codec, &opts, n)?;
            if n == 1 {
                encode_1 = Some(encode_rate);
            }
            let skip = n == 1 && args.skip_single_bake;
            let (bake_s, file_bytes) = if skip {
                (None, None)
            } else {
                let out = dir.path().join(format!("{codec}-{n}.tsa"));
                let opts = BakeOptions { codec, threads: n, ..base.clone() };
                let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build().context("thread pool")?;
                let t = Instant::now();
                let report = pool.install(|| bake(vec![input(codec)], &out, &opts, &NoProgress))?;
                let s = t.elapsed().as_secs_f64();
                std::fs::remove_file(&out).ok();
                (Some(s), Some(report.file_bytes))
            };
            let bake_rate = bake_s.map(|s| total_tiles as f64 / s);
            if n == 1 {
                bake_1 = bake_rate;
            }
            let run = Run {
                codec: codec.to_string(),
                threads: n,
                encode_only_tiles_per_s: encode_rate,
                bake_tiles_per_s: bake_rate,
                bake_s,
                bake_of_ceiling: bake_rate.map(|b| b / encode_rate),
                encode_only_efficiency: encode_1.map(|one| encode_rate / (n as f64 * one)),
                bake_efficiency: bake_rate.zip(bake_1.or(encode_1)).map(|(b, one)| b / (n as f64 * one)),
                file_bytes,
            };
            let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0));
            println!(
                "{:<6} {:>7} {:>14.1} {:>12} {:>9} {:>10} {:>10}",
                run.codec,
                n,
                encode_rate,
                bake_rate.map_or("-".into(), |r| format!("{r:.1}")),
                bake_s.map_or("-".into(), |s| format!("{s:.2}")),
                pct(run.bake_of_ceiling),
                pct(run.bake_efficiency),
            );
            runs.push(run);
        }
    }
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        cores,
        source: label,
        size,
        tiles: total_tiles,
        decode_s,
        runs,
    };
    if let Some(json) = &args.json {
        write_json(json, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_json(path: &Path, report: &Report) -> Result<()> {
    let text = serde_json::to_string_pretty(report).context("serialising the report")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    println!("report written to {}", path.display());
    Ok(())
}

/// Every `every`-th tile of the raw atlas at `path`, in storage order, decoded.
fn read_all_tiles(path: &Path, every: u64) -> Result<Vec<Vec<u8>>> {
    let atlas = Atlas::open(path)?;
    let mut out = Vec::new();
    let mut k = 0u64;
    for (layer, info) in atlas.layers().iter().enumerate() {
        let layout = info.layout;
        for mip in 0..layout.mip_count() {
            let (tx, ty) = layout.tiles_at(mip);
            for y in 0..ty {
                for x in 0..tx {
                    if k.is_multiple_of(every) {
                        let id = TileId { layer: layer as u16, mip: mip as u8, x, y };
                        out.push(atlas.decode_tile(id)?);
                    }
                    k += 1;
                }
            }
        }
    }
    Ok(out)
}

/// Tiles/s of the encoder alone on `tiles` with `threads` threads, each taking the next
/// tile as soon as it is free: the ceiling of any bake on this machine.
fn encode_only(
    tiles: &[Vec<u8>],
    side: u32,
    codec: Codec,
    opts: &EncodeOptions,
    threads: usize,
) -> Result<f64> {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(tile) = tiles.get(i) else { return Ok(()) };
                        std::hint::black_box(codec.encode(tile, side, opts)?);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("an encoding thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(tiles.len() as f64 / start.elapsed().as_secs_f64())
}
