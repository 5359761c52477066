//! `tessera`: bake images into virtual-texture atlases, inspect and verify them,
//! and run the demo.

mod args;
mod bake_bench;
mod bench;
mod capture;
mod codecs;
mod demo;
mod gpu_bench;
mod inspect;
mod out;
mod progress;
mod scene;
mod shards;
mod signals;
mod soak;
mod stream_bench;

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use tessera_core::bake::cache::{BakeCache, BakeKey, BakeKind};
use tessera_core::bake::grid::open_grid;
use tessera_core::bake::source::Generated;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::{Atlas, ColorSpace, Wrap};
use tessera_core::format::codec::Codec;
use tessera_core::scene::material_scene::{SceneError, ScenePaths, load_gltf_with};
use tessera_core::scene::scene_bake::{SceneManifest, bake_scene, scene_bake_key};

use crate::progress::Bar;

/// Tessera: streaming virtual textures far larger than VRAM.
#[derive(Parser)]
#[command(name = "tessera", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bake images into a tiled, mip-mapped atlas (.tsa).
    ///
    /// Every INPUT becomes one layer of the atlas: an independent virtual texture with
    /// its own size, mip chain and tiles, addressed as layer 0, 1, … in the order given.
    /// `--generate WxH` adds a procedural labelled texture as a further layer.
    Bake(BakeArgs),
    /// Describe an atlas: sizes, tiles per mip, codec, bytes on disk, compression ratio.
    Inspect {
        /// The atlas file or URL (s3://, gs://, az://, http(s)://), or a tiled TIFF (a COG).
        atlas: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Print one line per tile instead: layer, mip, x, y, codec, stored length and
        /// CRC-32 (what two bakes of the same inputs and options agree on).
        #[arg(long, conflicts_with = "json")]
        tiles: bool,
    },
    /// Read, checksum and decode every tile; exit 1 naming each bad tile.
    Verify {
        /// The atlas file or URL (s3://, gs://, az://, http(s)://), or a tiled TIFF (a COG).
        atlas: PathBuf,
        /// For a URL: check the copy in the local disk cache instead of the server's
        /// (the default reads every tile from the server, in coalesced ranges).
        #[arg(long)]
        cache: bool,
    },
    /// Upload an atlas to object storage (s3://, gs://, az://; a split atlas with its data
    /// objects), then check the copy there against the local file and print the URL to
    /// open. An object already at the URL is replaced only with --force, unless it is this
    /// very atlas.
    Publish {
        /// The local atlas file.
        atlas: PathBuf,
        /// Where to put it: s3://bucket/key, gs://bucket/key or az://container/key (AWS_*,
        /// GOOGLE_* or AZURE_* variables for credentials and endpoint).
        url: String,
        /// Replace whatever is at the URL.
        #[arg(long)]
        force: bool,
    },
    /// Render a camera path headless through the virtual texture: PNG frames + stats.json.
    Capture(capture::CaptureArgs),
    /// The main job: bake the built-in labelled texture (once, cached), capture a camera
    /// path headless against the reference, and write frames plus a report.
    Demo(demo::DemoArgs),
    /// Benchmark virtual texturing against the fully resident reference on the same scene and
    /// camera path: GPU pass and wall times, their ratio, feedback and upload costs (table + JSON).
    Bench(bench::BenchArgs),
    /// Measure every codec on real images: bits per texel, PSNR, transcode and streaming throughput.
    Codecs(codecs::CodecsArgs),
    /// Measure the baker against its ceiling: the encoder alone on the same tiles, and
    /// the whole bake, for each codec and thread count (tiles/s, efficiency).
    BakeBench(bake_bench::BakeBenchArgs),
    /// Soak: many frames of random camera cuts through the renderer with a small pool;
    /// prints memory, pool occupancy, loader queue and host cache as a series, exits 1
    /// when one kept rising after the warm-up.
    Soak(soak::SoakArgs),
}

#[derive(clap::Args)]
struct BakeArgs {
    /// Input images (PNG, JPEG, TIFF / BigTIFF, DDS, KTX2); each becomes one layer, in order (with --grid, all
    /// together one).
    inputs: Vec<PathBuf>,
    /// Bake the materials of a glTF scene into one stacked atlas (albedo, normal, ORM
    /// layers) and write SCENE.scene.json, the material rectangles, beside it.
    #[arg(long, value_name = "SCENE.gltf", conflicts_with_all = ["inputs", "generate", "globe"])]
    gltf: Option<PathBuf>,
    /// Let the --gltf scene's buffer and image URIs name files outside its folder
    /// (`..`, absolute paths, file:// URLs, links leading out); refused by default.
    #[arg(long)]
    allow_outside_paths: bool,
    /// Bake an equirectangular image as a globe scene (one material, repeating in u),
    /// like --gltf.
    #[arg(long, value_name = "IMAGE", conflicts_with_all = ["inputs", "generate"])]
    globe: Option<PathBuf>,
    /// Output atlas path (written atomically).
    #[arg(short, long)]
    output: PathBuf,
    /// Add a procedural labelled texture of this size (e.g. 32768x32768) as a layer.
    #[arg(long, value_name = "WxH", value_parser = parse_size)]
    generate: Vec<(u32, u32)>,
    /// Tile payload side in texels (multiple of 4).
    #[arg(long, default_value_t = 128)]
    tile_size: u32,
    /// Border texels copied from neighbouring tiles on each side (1 to tile size / 2; at
    /// least 4 for seamless anisotropic filtering; Basis codecs need tile + 2 x border to be
    /// a multiple of 4).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=512))]
    border: u32,
    /// Tile codec: raw (RGBA8), lz4 (lossless), etc1s (Basis, ~1–2 bits/texel, lossy) or
    /// uastc (Basis, ~5–8 bits/texel, near-lossless; LZ4 on top where it shrinks).
    /// Basis tiles are transcoded at load time to the GPU's own block format (BC7 on desktop).
    #[arg(long, default_value = "lz4", value_parser = parse_codec)]
    codec: Codec,
    /// Basis quality 1–255: the ETC1S quality level; for UASTC, higher is a slower, better pack level.
    #[arg(long, default_value_t = tessera_core::format::codec::QUALITY_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..=255))]
    quality: u32,
    /// UASTC rate-distortion optimisation (e.g. 1.0: smaller after LZ4, slightly lossier).
    #[arg(long, value_parser = args::non_negative_f32)]
    uastc_rdo: Option<f32>,
    /// What lies beyond the texture's edges: borders repeat the edge or wrap around.
    #[arg(long, value_enum, default_value_t = WrapArg::Clamp)]
    wrap: WrapArg,
    /// How input texels are encoded: sRGB colour (filtered in linear light) or linear data.
    /// Default: what the file tags (a KTX2's data format descriptor, a DDS's DX10 format),
    /// else sRGB. Asking for the other space than a file tags is refused.
    #[arg(long, value_enum)]
    color: Option<ColorArg>,
    /// Folder for large intermediate mip levels (default: the output's folder).
    #[arg(long)]
    scratch_dir: Option<PathBuf>,
    /// Memory one input image may take while it is decoded (e.g. 8GiB, 512MiB); larger
    /// images are refused before decoding.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = args::byte_size)]
    max_memory: u64,
    /// Atlas format version: 2 (paged index, tiles coarse mips first along a Morton
    /// curve, for range reads from a server) or 1 (the original layout).
    #[arg(long, value_name = "N", default_value_t = tessera_core::format::atlas::VERSION,
          value_parser = clap::value_parser!(u32).range(1..=2))]
    format_version: u32,
    /// Encoding threads (0: one per core this process may run on).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Stitch the INPUT images into one layer, COLSxROWS of them given row by row (e.g.
    /// `--grid 4x2 A1.png B1.png C1.png D1.png A2.png B2.png C2.png D2.png`): the images
    /// of a grid row must be equally high, those of a column equally wide. GeoTIFFs given
    /// so must be in the order their geotransforms say. `--grid geo` places GeoTIFFs by
    /// their geotransforms, in any order: one CRS and resolution, north up, origins on one
    /// texel grid; gaps are transparent. The layer is named after the first image.
    #[arg(long, value_name = "COLSxROWS|geo", value_parser = parse_grid, conflicts_with_all = ["gltf", "globe"])]
    grid: Option<GridShape>,
    /// Bake only shard I of N (from 0) of the tiles, into OUTPUT.shards/I-of-N.part, for
    /// a bake spread over the tasks of a batch engine; given as N alone, I comes from
    /// $JOB_COMPLETION_INDEX (Kubernetes), $SLURM_ARRAY_TASK_ID (Slurm) or
    /// $AWS_BATCH_JOB_ARRAY_INDEX (AWS Batch). Every shard needs the same inputs and
    /// options; a rerun replaces its own part. Then `--merge` writes the atlas.
    #[arg(long, value_name = "I/N", conflicts_with_all = ["gltf", "globe", "merge"])]
    shard: Option<tessera_core::bake::shard::Shard>,
    /// Write OUTPUT from the complete set of shard parts in OUTPUT.shards/, decoding no
    /// tile. By default a split atlas: OUTPUT is an index naming the parts as its data
    /// (only the parts' records are read; keep OUTPUT.shards/ beside it, or upload both).
    /// With --one-file, every tile is copied into one file, byte for byte the
    /// single-process bake, and the parts are deleted. With the bake's inputs and options
    /// given too, the bake stamp is recorded as for a single bake.
    #[arg(long, conflicts_with_all = ["gltf", "globe"])]
    merge: bool,
    /// Print how a sharded bake of these inputs and options would split into N shards:
    /// tiles and an estimated time per shard (from a few tiles encoded here), then exit.
    #[arg(long, value_name = "N", conflicts_with_all = ["gltf", "globe", "merge", "shard", "status"],
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    plan: Option<u32>,
    /// List the shard parts of OUTPUT (a folder or an s3:// prefix): done, missing, stale
    /// (another bake's, when the inputs and options are given too) or damaged, and the
    /// shards to rerun; exits with 1 unless every part is done. With N, the shards of an
    /// N-shard bake are listed even if none has run.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0",
          conflicts_with_all = ["gltf", "globe", "merge", "shard"])]
    status: Option<u32>,
    /// With --merge: copy the tiles into one self-contained file.
    #[arg(long, requires = "merge")]
    one_file: bool,
    /// Keep OUTPUT.shards/ after --merge --one-file.
    #[arg(long, requires = "one_file")]
    keep_shards: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum WrapArg {
    Clamp,
    Repeat,
}

#[derive(Clone, Copy, ValueEnum)]
enum ColorArg {
    Srgb,
    Linear,
}

fn parse_codec(s: &str) -> Result<Codec, String> {
    s.parse()
}

/// Parses `WxH`.
/// How `--grid` lays out its images: `Some((cols, rows))` in row order, `None` by
/// their geotransforms (`--grid geo`).
type GridShape = Option<(u32, u32)>;

/// `--grid`'s value: `COLSxROWS`, or `geo`.
fn parse_grid(s: &str) -> Result<GridShape, String> {
    if s.trim().eq_ignore_ascii_case("geo") {
        return Ok(None);
    }
    parse_size(s).map(Some).map_err(|_| format!("'{s}' is neither COLSxROWS nor geo"))
}

pub(crate) fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(|| format!("'{s}' is not WxH"))?;
    let p = |v: &str| v.trim().parse::<u32>().map_err(|_| format!("'{s}' is not WxH"));
    Ok((p(w)?, p(h)?))
}

/// Mesa's Vulkan drivers complain on stderr ("XDG_RUNTIME_DIR is invalid or not set")
/// when a headless session (a container, CI, ssh) has no runtime folder: give them a
/// private one under the temporary folder.
fn ensure_runtime_dir() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_some() {
        return;
    }
    let user = std::env::var("USER").unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("tessera-runtime-{user}"));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    if builder.create(&dir).is_ok() || dir.is_dir() {
        // SAFETY: called first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}

fn main() -> ExitCode {
    ensure_runtime_dir();
    let cli = Cli::parse();
    // Engine logs (adapter choice, corrupted tiles) go to stderr; RUST_LOG overrides the level.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    signals::install();
    if let Err(e) = tessera_core::format::codec::BasisTranscoder::from_env() {
        eprintln!("tessera: error: {e}");
        return ExitCode::from(2);
    }
    // A listing piped into `head` ends quietly when `head` has read enough.
    let result = out::guard(|| match cli.command {
        Command::Bake(args) => run_bake(&args),
        Command::Inspect { atlas, json, tiles } => inspect::run(&atlas, json, tiles),
        Command::Verify { atlas, cache } => run_verify(&atlas, cache),
        Command::Publish { atlas, url, force } => run_publish(&atlas, &url, force),
        Command::Capture(args) => capture::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Codecs(args) => codecs::run(&args),
        Command::BakeBench(args) => bake_bench::run(&args),
        Command::Soak(args) => soak::run(&args),
    });
    match result {
        Ok(code) => code,
        Err(e) if out::is_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera: error: {}", tessera_core::error_text::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn run_bake(args: &BakeArgs) -> Result<ExitCode> {
    if args.allow_outside_paths && args.gltf.is_none() {
        bail!("--allow-outside-paths applies to --gltf scenes only");
    }
    if args.gltf.is_some() || args.globe.is_some() {
        return run_scene_bake(args);
    }
    if args.merge {
        return shards::run_merge(args);
    }
    let no_inputs = args.inputs.is_empty() && args.generate.is_empty();
    if no_inputs && let Some(count) = args.status {
        return shards::run_status(args, count, None);
    }
    if no_inputs {
        bail!("nothing to bake: give at least one INPUT image, --generate WxH, --gltf or --globe");
    }
    let wrap = match args.wrap {
        WrapArg::Clamp => Wrap::Clamp,
        WrapArg::Repeat => Wrap::Repeat,
    };
    let asked = args.color.map(|c| match c {
        ColorArg::Srgb => ColorSpace::Srgb,
        ColorArg::Linear => ColorSpace::Linear,
    });
    let color_of = |source: &dyn tessera_core::bake::source::RowSource, what: &Path| {
        if let Some(note) = data_raster_note(source, what) {
            eprintln!("{note}");
        }
        layer_color(asked, source.color_space(), what)
    };
    tessera_core::bake::source::set_memory_limit(args.max_memory);
    // A shard of a bake in object storage stages its part locally and uploads it.
    let remote = tessera_core::format::atlas::is_remote_location(&args.output);
    if !remote {
        check_output(&args.output, args.inputs.iter().map(PathBuf::as_path))?;
    }
    let stamp = BakeCache::new(&args.output);
    let key = bake_key(args);
    let bake_now = args.plan.is_none() && args.status.is_none();
    if bake_now && args.shard.is_none() && !remote && stamp.is_current(&key) {
        return Ok(up_to_date(&args.output));
    }
    let mut inputs = Vec::new();
    if let Some(shape) = args.grid {
        let images =
            args.inputs.iter().map(|p| tessera_core::bake::open::open_image(p)).collect::<Result<_, _>>();
        let grid = open_grid(shape, images?).context("--grid")?;
        let color = color_of(grid.as_ref(), Path::new("the grid"))?;
        inputs.push(BakeInput {
            name: args.inputs.first().map_or_else(|| "grid".into(), |p| layer_name(p)),
            source: grid,
            wrap,
            color,
            codec: None,
            regions: Vec::new(),
        });
    }
    for path in args.inputs.iter().filter(|_| args.grid.is_none()) {
        let source = tessera_core::bake::open::open_image(path)?;
        let color = color_of(source.as_ref(), path)?;
        inputs.push(BakeInput {
            name: layer_name(path),
            source,
            wrap,
            color,
            codec: None,
            regions: Vec::new(),
        });
    }
    for &(w, h) in &args.generate {
        inputs.push(BakeInput {
            name: format!("generated-{w}x{h}"),
            source: Box::new(Generated::new(w, h)),
            wrap,
            color: asked.unwrap_or(ColorSpace::Srgb),
            codec: None,
            regions: Vec::new(),
        });
    }
    let opts = bake_options(args);
    if let Some(count) = args.plan {
        return run_plan(args, &inputs, &opts, count);
    }
    if let Some(count) = args.status {
        let expected = tessera_core::bake::bake_fingerprint(&inputs, &opts)?;
        return shards::run_status(args, count, Some(&expected));
    }
    let bar = Bar::new("bake", 0);
    let report = bake(inputs, &args.output, &opts, &bar)
        .with_context(|| format!("baking {}", args.output.display()))?;
    bar.clear();
    let tiles: u64 = report.layers.iter().map(|l| l.tiles).sum();
    if let Some(shard) = args.shard {
        let part = tessera_core::bake::shard::part_path(&args.output, shard);
        println!(
            "baked shard {shard}: {tiles} tiles into {} ({:.1} MiB) in {:.2} s; once all {} shards are done, \
             run the same command with --merge instead of --shard",
            part.display(),
            report.file_bytes as f64 / (1 << 20) as f64,
            report.seconds,
            shard.count
        );
        return Ok(ExitCode::SUCCESS);
    }
    record(&stamp, &key);
    let raw: u64 = report.layers.iter().map(|l| l.raw_bytes).sum();
    let shared: u64 = report.layers.iter().map(|l| l.shared_tiles).sum();
    println!(
        "baked {} layer(s), {tiles} tiles{} into {} ({:.1} MiB, {:.2}x smaller than raw) in {:.2} s",
        report.layers.len(),
        if shared > 0 { format!(" ({shared} deduplicated)") } else { String::new() },
        args.output.display(),
        report.file_bytes as f64 / (1 << 20) as f64,
        raw as f64 / report.file_bytes.max(1) as f64,
        report.seconds
    );
    Ok(ExitCode::SUCCESS)
}

/// `tessera bake … --plan N`: the shards of a bake and their estimated times.
fn run_plan(args: &BakeArgs, inputs: &[BakeInput], opts: &BakeOptions, count: u32) -> Result<ExitCode> {
    let plan = tessera_core::bake::shard_plan::plan(inputs, opts, count)?;
    let longest = plan.shards.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let total: f64 = plan.shards.iter().map(|s| s.seconds).sum();
    println!(
        "plan for {}: {} tiles in {count} shard(s) of about {} tiles; {} encoding threads per shard",
        args.output.display(),
        plan.tiles,
        plan.tiles / u64::from(count),
        plan.threads
    );
    for (i, (spt, real)) in plan.seconds_per_tile.iter().zip(&plan.sampled_source).enumerate() {
        println!(
            "  layer {i}: {:.1} ms per tile on one core ({} sample tiles of {})",
            spt * 1e3,
            tessera_core::bake::shard_plan::SAMPLE_TILES,
            if *real { "its own texels" } else { "a generated pattern (source too wide to sample)" }
        );
    }
    println!("  {:>9}  {:>21}  {:>10}  estimated", "shard", "storage positions", "tiles");
    for s in &plan.shards {
        println!(
            "  {:>9}  {:>21}  {:>10}  {}",
            s.shard.to_string(),
            format!("{}..{}", s.range[0], s.range[1]),
            s.range[1] - s.range[0],
            human_seconds(s.seconds)
        );
    }
    println!(
        "estimated: {} per shard on {count} machine(s), {} of machine time in all (each shard also reads and filters \
         the whole input, about {} on one thread beside its encoders)",
        human_seconds(longest),
        human_seconds(total),
        human_seconds(plan.read_seconds.iter().sum())
    );
    Ok(ExitCode::SUCCESS)
}

/// Seconds as `1h 02m`, `3m 20s` or `4.2 s`.
fn human_seconds(s: f64) -> String {
    let whole = s.round() as u64;
    if whole >= 3600 {
        format!("{}h {:02}m", whole / 3600, whole % 3600 / 60)
    } else if whole >= 60 {
        format!("{}m {:02}s", whole / 60, whole % 60)
    } else {
        format!("{s:.1} s")
    }
}

fn bake_options(args: &BakeArgs) -> BakeOptions {
    BakeOptions {
        tile_size: args.tile_size,
        border: args.border,
        codec: args.codec,
        quality: args.quality,
        uastc_rdo: args.uastc_rdo,
        scratch_dir: args.scratch_dir.clone(),
        stacked: false,
        format_version: args.format_version,
        threads: args.threads,
        shard: args.shard,
        s3: Vec::new(),
    }
}

/// `bake --gltf` / `bake --globe`: the scene's materials into one stacked atlas + manifest.
fn run_scene_bake(args: &BakeArgs) -> Result<ExitCode> {
    let (scene, kind) = match (&args.gltf, &args.globe) {
        (Some(gltf), _) => {
            let paths = if args.allow_outside_paths { ScenePaths::Anywhere } else { ScenePaths::Confined };
            let scene = load_gltf_with(gltf, paths).map_err(|e| match e {
                SceneError::OutsidePath { .. } => anyhow::Error::new(e)
                    .context("refusing a file outside the scene's folder (--allow-outside-paths allows it for trusted scenes)"),
                e => e.into(),
            })?;
            (scene, BakeKind::Gltf)
        }
        (None, Some(image)) => (tessera_core::scene::catalog::globe(image)?, BakeKind::Globe),
        (None, None) => bail!("nothing to bake: give --gltf SCENE or --globe IMAGE"),
    };
    let images = tessera_core::scene::material_scene::scene_images(&scene);
    let files = images.iter().filter_map(|i| match i {
        tessera_core::scene::material_scene::ImageRef::File(p) => Some(p.as_path()),
        _ => None,
    });
    check_output(&args.output, args.gltf.iter().chain(&args.globe).map(PathBuf::as_path).chain(files))?;
    let opts = bake_options(args);
    let stamp = BakeCache::new(&args.output);
    let key = scene_bake_key(kind, &scene, &args.output, &opts);
    if stamp.is_current(&key) {
        return Ok(up_to_date(&args.output));
    }
    let bar = Bar::new("bake", 0);
    let (report, manifest) = bake_scene(&scene, &args.output, &opts, &bar)
        .with_context(|| format!("baking {}", args.output.display()))?;
    bar.clear();
    record(&stamp, &key);
    let tiles: u64 = report.layers.iter().map(|l| l.tiles).sum();
    let rects = manifest.materials.iter().filter_map(|m| m.rect).collect::<std::collections::HashSet<_>>();
    println!(
        "baked {} material(s) in {} rectangle(s) into {} stacked layers, {}x{} virtual, {tiles} tiles, {} \
         ({:.1} MiB) in {:.2} s",
        manifest.materials.len(),
        rects.len(),
        report.layers.len(),
        manifest.width,
        manifest.height,
        args.output.display(),
        report.file_bytes as f64 / (1 << 20) as f64,
        report.seconds
    );
    println!("manifest: {}", SceneManifest::path_for(&args.output).display());
    Ok(ExitCode::SUCCESS)
}

/// Refuses an output that is a folder, a device, a FIFO or a socket, or any of `inputs`,
/// or whose stamp or scene manifest would be: a bake never writes over what it reads.
fn check_output<'a>(output: &Path, inputs: impl Iterator<Item = &'a Path>) -> Result<()> {
    if output.is_dir() {
        bail!(
            "{}: is a directory; give the atlas file to write (e.g. {}/atlas.tsa)",
            output.display(),
            output.display()
        );
    }
    let outputs = [output.to_path_buf(), BakeCache::stamp_path(output), SceneManifest::path_for(output)];
    for out in &outputs {
        tessera_core::bake::overwrite::check_output_file(out)?;
    }
    tessera_core::bake::overwrite::check_outputs(inputs, &outputs)?;
    Ok(())
}

/// Says that `atlas` is reused.
fn up_to_date(atlas: &Path) -> ExitCode {
    println!("{} is up to date (same inputs and options): reusing the previous bake", atlas.display());
    ExitCode::SUCCESS
}

/// Writes the stamp of a finished bake; without it the next bake simply runs again.
fn record(stamp: &BakeCache, key: &BakeKey) {
    if let Err(e) = stamp.record(key) {
        eprintln!("tessera: warning: {e}; the next bake of {} runs again", stamp.atlas().display());
    }
}

/// What decides the output of `tessera bake INPUT…`: every option, the input images in
/// order and the generated layers.
fn bake_key(args: &BakeArgs) -> BakeKey {
    let mut key = BakeKey::new(BakeKind::Layers)
        .bake_options(&bake_options(args))
        .option("wrap", args.wrap as u8)
        // The file's own tag when none is asked for: the inputs' contents are in the key.
        .option("color", args.color.map_or(u8::MAX, |c| c as u8))
        .inputs(&args.inputs)
        // A GDAL VRT's sources are inputs too.
        .inputs(args.inputs.iter().filter_map(|p| tessera_core::bake::vrt::source_files(p)).flatten());
    for (w, h) in &args.generate {
        key = key.option("generated", format!("{w}x{h}"));
    }
    match args.grid {
        Some(Some((cols, rows))) => key = key.option("grid", format!("{cols}x{rows}")),
        Some(None) => key = key.option("grid", "geo"),
        None => {}
    }
    key
}

/// The colour space of a layer read from `what`: the one `asked` for, which must agree with
/// the one the file tags (`tagged`) where it tags one; else the tag; else sRGB.
fn layer_color(asked: Option<ColorSpace>, tagged: Option<ColorSpace>, what: &Path) -> Result<ColorSpace> {
    let name = |c: ColorSpace| match c {
        ColorSpace::Srgb => "srgb",
        ColorSpace::Linear => "linear",
    };
    match (asked, tagged) {
        (Some(a), Some(t)) if a != t => bail!(
            "{}: --color {} asked for, but the file tags its texels {}: a {} texture baked as {} would \
             be filtered and sampled wrongly (leave --color out to take the file's tag)",
            what.display(),
            name(a),
            name(t),
            name(t),
            name(a)
        ),
        (Some(c), _) | (None, Some(c)) => Ok(c),
        (None, None) => Ok(ColorSpace::Srgb),
    }
}

/// The note a bake prints for a data raster (a DEM): how its values became 8-bit texels
/// of a linear layer, and where the scale is kept.
fn data_raster_note(source: &dyn tessera_core::bake::source::RowSource, what: &Path) -> Option<String> {
    let d = source.data_scale()?;
    let nodata = d.nodata.map_or_else(String::new, |n| format!("; nodata {n} is transparent (alpha 0)"));
    Some(format!(
        "note: {}: a {} data raster (values {} to {}): baked as a linear layer of 8-bit texels spread over \
         that range, value = {} + {} × texel (one step {}){nodata}; the scale is kept in the atlas' metadata",
        what.display(),
        d.sample,
        d.min,
        d.max,
        d.offset,
        d.scale,
        d.scale
    ))
}

/// The layer name for an input path: its file stem.
fn layer_name(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "layer".into())
}

fn run_publish(path: &Path, url: &str, force: bool) -> Result<ExitCode> {
    args::atlas_file(path)?;
    let bar = Bar::bytes("publish");
    let report = tessera_core::format::atlas::publish::publish(path, url, force, &[], &bar)?;
    bar.clear();
    if report.already_there {
        println!("{url} already holds this atlas: nothing uploaded");
    } else {
        println!(
            "uploaded {} object(s), {:.1} MiB",
            report.uploaded.len(),
            report.bytes as f64 / (1 << 20) as f64
        );
    }
    if !report.kept.is_empty() {
        println!("kept {} data object(s) an earlier publish had uploaded whole", report.kept.len());
    }
    println!(
        "checked the copy: {} index entries and {} tiles read back equal the local atlas",
        report.entries_checked, report.blobs_checked
    );
    println!("open it as: {}", report.url);
    Ok(ExitCode::SUCCESS)
}

fn run_verify(path: &Path, cache: bool) -> Result<ExitCode> {
    use tessera_core::format::atlas::{AtlasError, RemoteOptions, is_remote_location};
    args::atlas_file(path)?;
    let remote = is_remote_location(path);
    if cache && !remote {
        bail!("--cache checks a remote atlas' disk cache; {} is a local file", path.display());
    }
    let env = RemoteOptions::from_env();
    // The server's copy unless --cache: then only the disk cache, no request.
    let options = if cache {
        RemoteOptions { offline: true, ..env }
    } else {
        RemoteOptions { disk_cache_dir: None, ..env }
    };
    let atlas = Atlas::open_with(path, &options)?;
    let total = atlas.tile_count();
    let bar = Bar::new("verify", total);
    tessera_core::Progress::set_message(&bar, "verifying");
    let errors = atlas.verify(&bar);
    bar.clear();
    if let Some(n) = atlas.network_stats().filter(|_| !cache) {
        println!(
            "read from the server with {} requests, {:.1} MiB ({} tiles per request)",
            n.requests,
            n.bytes as f64 / (1 << 20) as f64,
            total / n.requests.max(1)
        );
    }
    if errors.is_empty() {
        let from = if cache {
            " (the disk cache's copy)"
        } else if remote {
            " (read from the server)"
        } else {
            ""
        };
        println!("{}: all {total} tiles good{from}", atlas.path().display());
        return Ok(ExitCode::SUCCESS);
    }
    // Tiles that could not be read (server unreachable, not cached) were not checked:
    // counted apart from the bad ones.
    let (unchecked, errors): (Vec<&AtlasError>, Vec<&AtlasError>) =
        errors.iter().partition(|e| matches!(e, AtlasError::Unavailable { .. }));
    // Cache entries that failed their check were deleted (and their tiles read as absent).
    let damaged = atlas.network_stats().and_then(|n| n.disk_cache).map_or(0, |d| d.rejected);
    if cache && errors.is_empty() && damaged == 0 {
        // A partly filled cache is not a broken one: what it holds is good.
        let held = total - unchecked.len() as u64;
        println!(
            "{}: the {held} tiles in the disk cache are good; {} of {total} are not in it (not checked)",
            atlas.path().display(),
            unchecked.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut bad_tiles = 0;
    for e in &errors {
        match e.tile() {
            Some(t) => {
                bad_tiles += 1;
                println!("bad tile: layer {} mip {} x {} y {}: {e}", t.layer, t.mip, t.x, t.y);
            }
            None => println!("bad: {e}"),
        }
    }
    if let Some(first) = unchecked.first() {
        println!("could not check {} of {total} tiles, e.g. {first}", unchecked.len());
    }
    let mut summary = Vec::new();
    if bad_tiles > 0 {
        summary.push(format!("{bad_tiles} bad tile(s) of {total}"));
    }
    if errors.len() > bad_tiles {
        summary.push("a damaged index or padding".to_string());
    }
    if damaged > 0 {
        summary.push(format!("{damaged} damaged disk-cache entries (deleted)"));
    }
    if !unchecked.is_empty() {
        summary.push(format!("{} of {total} tiles not checked", unchecked.len()));
    }
    eprintln!("tessera: error: {}: {}", atlas.path().display(), summary.join("; "));
    Ok(ExitCode::FAILURE)
}
