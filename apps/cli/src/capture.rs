//! `tessera capture`: render a camera path headless through the virtual texture and
//! write PNG frames plus `stats.json`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use std::sync::Arc;
use tessera::PageTableStorage;
use tessera_tools::capture::{CaptureConfig, capture};

use tessera::core::scene::camera::{CameraPath, Shot};
use tessera::core::scene::material_scene::{self, MaterialScene};
use tessera::core::stream::pool_layout::Trilinear;
use tessera::{GpuContext, VtConfig};

/// Options shared by `capture`, `demo` and `bench`: streaming and sampling settings.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct VtArgs {
    /// GPU tile pool size in MiB.
    #[arg(long, default_value_t = 128)]
    pub(crate) pool_mib: u32,
    /// Host page cache budget in MiB.
    #[arg(long, default_value_t = 256)]
    pub(crate) host_cache_mib: u32,
    /// Most tiles uploaded to the GPU per frame.
    #[arg(long, default_value_t = 256)]
    pub(crate) upload_budget: usize,
    /// Anisotropic taps, 1 to 4 (1 = trilinear, which matches any GPU's reference
    /// sampler exactly; hardware anisotropy differs between vendors).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=4))]
    pub(crate) aniso: u16,
    /// Added to every level of detail (positive = blurrier, fewer tiles).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = crate::args::finite_f32)]
    pub(crate) mip_bias: f32,
    /// Feedback is written by one pixel in every N×N block (1, 2, 4, 8).
    #[arg(long, default_value_t = 2, value_parser = parse_stride)]
    pub(crate) feedback_stride: u32,
    /// Loader threads (0 = one per core but one; at most 256).
    #[arg(long, default_value_t = 0, value_parser = crate::args::loader_threads)]
    pub(crate) loader_threads: usize,
    /// Force the VRAM pool's format: rgba8, bc7, bc1, astc, etc2 (default: the best the GPU
    /// and the atlas allow; block formats need Basis layers).
    #[arg(long)]
    pub(crate) pool_format: Option<tessera::core::format::codec::TargetFormat>,
    /// Adapt the upload budget to this frame time in ms (default: the fixed --upload-budget).
    #[arg(long, value_parser = crate::args::positive_f64)]
    pub(crate) target_frame_ms: Option<f64>,
    /// Keep the mip bias fixed even when the view needs more tiles than the pool holds.
    #[arg(long)]
    pub(crate) no_auto_mip_bias: bool,
    /// Do not prefetch the neighbours of requested tiles.
    #[arg(long)]
    pub(crate) no_prefetch: bool,
    /// How samples blend mips: hardware (one lookup and one hardware-trilinear fetch
    /// inside a slot, where the pool format allows it) or software (two lookups and
    /// two bilinear fetches blended in the shader).
    #[arg(long, default_value = "hardware", value_parser = parse_trilinear)]
    pub(crate) trilinear: Trilinear,
    /// With --feedback storage: do not force the depth test before the virtual-texture
    /// fragment shaders (they write feedback, which otherwise makes many drivers shade
    /// hidden fragments too). Feedback through the target needs no forcing.
    #[arg(long)]
    pub(crate) no_early_depth: bool,
    /// MiB of staging memory the loader threads write tiles into for the GPU copies
    /// (0: the render thread copies every tile into staging itself).
    #[arg(long, default_value_t = tessera::staging::DEFAULT_STAGING_MIB,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(tessera::staging::MAX_STAGING_MIB)))]
    pub(crate) staging_mib: u32,
    /// The page table on the GPU: complete (a storage buffer whose every entry names a
    /// resident tile at any depth, rewritten by a compute pass: one load, no climb),
    /// buffer (a storage buffer written from the CPU, fallbacks 4 mips deep, the shader
    /// climbing past them) or texture (the same in an R32Uint texture).
    #[arg(long, default_value = "complete", value_parser = parse_page_table)]
    pub(crate) page_table: PageTableStorage,
    /// Where the built-in drawers write feedback: target (each pixel's request into an
    /// R32Uint colour target that a compute pass reads after the frame, so the main
    /// pass has no side effect and keeps early depth) or storage (atomics into the
    /// request bitset from the fragment shader, the depth test forced early where the
    /// device allows).
    /// Default: storage on a hardware GPU that can force early depth (cheaper there),
    /// else target; on a software adapter (llvmpipe) the material drawer uses storage.
    #[arg(long, value_parser = parse_feedback_path)]
    pub(crate) feedback: Option<bool>,
    /// Record one copy command per uploaded tile instead of one per run of tiles bound
    /// for slots one below the other, and copy a block pool's level-1 quadrants on the
    /// GPU one by one (to compare; the default merges both).
    #[arg(long)]
    pub(crate) per_tile_copies: bool,
    /// Spread upload bursts over frames: `auto` (the default: 0.35 ms of upload work a
    /// frame on the CPU and on the GPU each, on a hardware GPU that can time its
    /// uploads; off on software adapters), `off` (a burst takes one frame), or a number
    /// of milliseconds. With a slice, a camera cut that nothing predicted shows coarser
    /// tiles for a few frames longer (on an H100: 3 frames instead of 2 for RGBA8, 6
    /// for BC7).
    #[arg(long, default_value = "auto", value_parser = parse_slicing)]
    pub(crate) upload_slice_ms: tessera::UploadSlicing,
}

fn parse_slicing(s: &str) -> Result<tessera::UploadSlicing, String> {
    match s {
        "auto" => Ok(tessera::UploadSlicing::Auto),
        "off" => Ok(tessera::UploadSlicing::Off),
        _ => match s.parse::<f64>() {
            Ok(ms) if ms.is_finite() && ms > 0.0 => Ok(tessera::UploadSlicing::Ms(ms)),
            _ => Err(format!("'{s}' is not auto, off or a positive number of milliseconds")),
        },
    }
}

impl VtArgs {
    pub(crate) fn config(&self) -> VtConfig {
        VtConfig {
            pool_mib: self.pool_mib,
            max_anisotropy: self.aniso,
            pool_format: self.pool_format,
            trilinear: self.trilinear,
            early_depth: !self.no_early_depth,
            staging_mib: self.staging_mib,
            page_table: self.page_table,
            feedback_target: self.feedback.unwrap_or(true),
            feedback_target_on_software: self.feedback.is_some(),
            // `--feedback target` asked for: the target on every device.
            feedback_target_with_early_depth: self.feedback == Some(true),
            merged_copies: !self.per_tile_copies,
            upload_slicing: self.upload_slice_ms,
            streaming: tessera::StreamerConfig {
                host_cache_mib: self.host_cache_mib,
                loader_threads: self.loader_threads,
                max_uploads_per_frame: self.upload_budget.max(1),
                mip_bias: self.mip_bias,
                feedback_stride: self.feedback_stride,
                target_frame_ms: self.target_frame_ms,
                auto_mip_bias: !self.no_auto_mip_bias,
                prefetch_neighbours: !self.no_prefetch,
                ..tessera::StreamerConfig::default()
            },
            ..VtConfig::default()
        }
    }
}

/// Frames ahead of the camera path that `capture` and `demo` predict by default: the
/// demo flyover on lavapipe was fully resident in 115 of 120 frames with 4 and with 8,
/// 110–113 with 16, 25–26 without (BENCHMARKS.md); 8 leaves room for faster frames.
pub(crate) const PREDICT_FRAMES: u32 = 8;

/// Arguments of `tessera capture`.
#[derive(clap::Args)]
pub(crate) struct CaptureArgs {
    /// The atlas to render (or give --scene): a file or URL, or a tiled TIFF such as a
    /// Cloud Optimized GeoTIFF, streamed without a bake.
    #[arg(long, required_unless_present = "scene")]
    atlas: Option<PathBuf>,
    /// A named real-data scene (dungeon, globe, …), baked into the cache when needed,
    /// instead of --atlas with --gltf / --globe; `terrain` / `terrain8` are drawn on the
    /// GPU (a runtime virtual texture, nothing baked).
    #[arg(long, conflicts_with_all = ["atlas", "gltf", "globe"])]
    scene: Option<String>,
    /// Codec for baking --scene.
    #[arg(long, default_value = "lz4")]
    codec: tessera::core::Codec,
    /// Camera path: a preset (built-in scene: static, flyover, orbit, cut; glTF or
    /// globe scene: overview, walk, fly, cut) or a JSON file. Default: static, or
    /// overview (the whole scene) with --gltf / --globe.
    #[arg(long)]
    camera: Option<String>,
    /// Render this glTF scene, baked into --atlas by `tessera bake --gltf`.
    #[arg(long, conflicts_with = "globe")]
    gltf: Option<PathBuf>,
    /// Render a globe textured with this image, baked into --atlas by `tessera bake --globe`.
    #[arg(long)]
    globe: Option<PathBuf>,
    /// Frames to render.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    frames: u32,
    /// Frame size.
    #[arg(long, default_value = "1280x720", value_parser = crate::args::frame_size)]
    size: (u32, u32),
    /// Write every K-th frame as PNG (0: only the last; the last is always written).
    #[arg(long, default_value_t = 0)]
    every: u32,
    /// Output folder.
    #[arg(long, default_value = "out/capture")]
    out: PathBuf,
    /// Also render the fully resident reference and record PSNR per frame.
    #[arg(long)]
    reference: bool,
    /// Build the reference from this atlas instead (e.g. the lossless bake of the same
    /// source, so that PSNR includes the codec's loss).
    #[arg(long, requires = "reference")]
    reference_atlas: Option<PathBuf>,
    /// Prefetch along the camera path this many frames ahead (0: off): the coming view
    /// (and any view after a coming cut) is drawn hidden so its tiles stream in early.
    #[arg(long, default_value_t = 0)]
    prefetch: u32,
    /// Predict along the camera path this many frames ahead (0: off): each frame also
    /// draws the view the path shows then, at half size and without shading, as a
    /// predicted view whose tiles stream at the lowest priority, never evicting what is
    /// on screen, and are dropped when the path turns elsewhere.
    #[arg(long, default_value_t = PREDICT_FRAMES)]
    predict_frames: u32,
    /// Evict the VRAM pool (host cache kept) before these frames, e.g. before cutting
    /// back to a view seen earlier, to measure a cut served from the host cache.
    #[arg(long, value_delimiter = ',')]
    flush_vram_before: Vec<u32>,
    /// Pace frames like a display at this rate (e.g. 60): streaming is counted in
    /// frames, and a fast GPU otherwise renders many frames per network round trip.
    #[arg(long, value_name = "HZ", value_parser = clap::value_parser!(u32).range(1..=1000))]
    fps: Option<u32>,
    /// Before recording each frame, render it again until everything it shows is
    /// resident at full detail, for at most this many seconds per frame: frames that do
    /// not depend on disk or network timing (remote captures, regression images).
    #[arg(long, value_name = "SECONDS", value_parser = parse_wait)]
    wait_resident: Option<std::time::Duration>,
    #[command(flatten)]
    vt: VtArgs,
}

/// Parses `--wait-resident`: seconds, more than 0 and at most an hour.
fn parse_wait(s: &str) -> Result<std::time::Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 3600.0 => Ok(std::time::Duration::from_secs_f64(v)),
        _ => Err(format!("{s:?}: expected seconds, more than 0 and at most 3600")),
    }
}

/// Parses a feedback stride: 1, 2, 4 or 8.
fn parse_trilinear(s: &str) -> Result<Trilinear, String> {
    match s {
        "hardware" => Ok(Trilinear::Hardware),
        "software" => Ok(Trilinear::Software),
        _ => Err(format!("'{s}' is not a trilinear path: use hardware or software")),
    }
}

fn parse_page_table(s: &str) -> Result<PageTableStorage, String> {
    match s {
        "complete" => Ok(PageTableStorage::Complete),
        "buffer" => Ok(PageTableStorage::Buffer),
        "texture" => Ok(PageTableStorage::Texture),
        _ => Err(format!("'{s}' is not a page-table storage: use complete, buffer or texture")),
    }
}

/// `--feedback`: true for the colour target.
fn parse_feedback_path(s: &str) -> Result<bool, String> {
    match s {
        "target" => Ok(true),
        "storage" => Ok(false),
        _ => Err(format!("'{s}' is not a feedback path: use target or storage")),
    }
}

fn parse_stride(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n @ (1 | 2 | 4 | 8)) => Ok(n),
        _ => Err(format!("'{s}' is not a feedback stride: use 1, 2, 4 or 8")),
    }
}

/// The material scene named by `--gltf` or `--globe`, if any.
pub(crate) fn load_scene(
    gltf: Option<&PathBuf>,
    globe: Option<&PathBuf>,
) -> Result<Option<Arc<MaterialScene>>> {
    let scene = match (gltf, globe) {
        (Some(g), _) => Some(material_scene::load_gltf(g)?),
        (None, Some(image)) => Some(tessera::core::scene::catalog::globe(image)?),
        (None, None) => None,
    };
    Ok(scene.map(Arc::new))
}

/// Frames at which `path` cuts.
fn cuts(path: &CameraPath) -> Vec<u32> {
    path.keyframes.iter().filter(|k| k.cut).map(|k| k.frame.ceil() as u32).collect()
}

/// Runs `tessera capture`.
pub(crate) fn run(args: &CaptureArgs) -> Result<ExitCode> {
    for atlas in args.atlas.iter().chain(&args.reference_atlas) {
        crate::args::atlas_file(atlas)?;
    }
    let opened = match (&args.scene, &args.atlas) {
        (Some(name), _) => crate::scene::open(name, (0, 0), args.codec, false)?,
        (None, Some(atlas)) => {
            crate::scene::Opened::file(atlas.clone(), load_scene(args.gltf.as_ref(), args.globe.as_ref())?)
        }
        (None, None) => anyhow::bail!("give --atlas or --scene"),
    };
    let atlas = opened.atlas.clone();
    let cfg = CaptureConfig {
        atlas: atlas.clone(),
        camera: opened.camera(args.camera.as_deref(), Shot::Still)?,
        scene: opened.scene.clone(),
        frames: args.frames.max(1),
        size: args.size,
        every: args.every,
        out: Some(args.out.clone()),
        reference: args.reference,
        reference_atlas: args.reference_atlas.clone(),
        vt: args.vt.config(),
        prefetch: args.prefetch,
        flush_vram_before: args.flush_vram_before.clone(),
        remote: Default::default(),
        frame_interval: args.fps.map(|hz| std::time::Duration::from_secs_f64(1.0 / f64::from(hz))),
        wait_resident: args.wait_resident,
        predict: args.predict_frames,
        terrain: opened.terrain.clone(),
    };
    let ctx = GpuContext::headless()?;
    println!("adapter: {}", ctx.describe());
    println!("basis transcoder: {}", tessera::core::format::codec::basis_transcoder().label());
    let report = capture(&ctx, &cfg).with_context(|| {
        format!("capturing {}", tessera::core::format::atlas::display_location(&atlas).display())
    })?;
    println!("{}", report.pool_line());
    println!("frames and stats.json written to {}", args.out.display());
    println!("{}", report.summary());
    for line in report.motion_lines() {
        println!("{line}");
    }
    if cfg.wait_resident.is_some() {
        let extra: u64 = report.frames.iter().map(|f| u64::from(f.settle_renders)).sum();
        let short = report.frames.iter().filter(|f| f.settle_timed_out).count();
        println!(
            "waited for residency: {extra} extra render(s); {short} frame(s) recorded with tiles still missing"
        );
    }
    for cut in cuts(&cfg.camera) {
        match report.frames_to_resident_after(cut) {
            Some(n) => println!("cut at frame {cut}: fully resident after {n} frame(s)"),
            None => println!("cut at frame {cut}: not fully resident by the last frame"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
