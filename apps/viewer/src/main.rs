//! `tessera-viewer`: open an atlas, an image (baked on first open) or the built-in demo
//! texture, fly over it and watch tiles stream through VRAM, host cache and disk.

mod app;
mod camera;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use tessera::core::atlas::{Atlas, ColorSpace, Wrap};
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::camera::{CameraPath, PRESETS};
use tessera::core::source::{Generated, ImageSource};

/// Interactive Tessera viewer with the tier-residency overlay.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub(crate) struct Args {
    /// An atlas (.tsa), an image (baked on first open into the cache folder), or
    /// nothing for the built-in 8192x4096 labelled texture.
    input: Option<PathBuf>,
    /// Render `--frames` frames, write the last one (overlay included) as PNG, exit.
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// Frames to render before the screenshot.
    #[arg(long, default_value_t = 120)]
    frames: u32,
    /// Camera: a preset (static, flyover, orbit, cut) or a camera-path JSON file; with
    /// `--screenshot` the path is followed frame by frame.
    #[arg(long, default_value = "static")]
    camera: String,
    /// Hide the overlay (H toggles it).
    #[arg(long)]
    no_overlay: bool,
    /// Window size.
    #[arg(long, default_value = "1280x720", value_parser = parse_size)]
    size: (u32, u32),
    /// GPU tile pool size in MiB.
    #[arg(long, default_value_t = 64)]
    pool_mib: u32,
    /// Host page cache budget in MiB.
    #[arg(long, default_value_t = 256)]
    host_cache_mib: u32,
    /// Most tiles uploaded per frame.
    #[arg(long, default_value_t = 64)]
    upload_budget: usize,
    /// Added to every level of detail.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    mip_bias: f32,
    /// Start without vsync (V toggles it).
    #[arg(long)]
    no_vsync: bool,
}

fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s.split_once('x').ok_or_else(|| format!("'{s}' is not WxH"))?;
    let p = |v: &str| v.parse::<u32>().map_err(|e| format!("'{s}': {e}"));
    let (w, h) = (p(w)?, p(h)?);
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        return Err(format!("'{s}': sizes go from 1 to 16384"));
    }
    Ok((w, h))
}

/// A preset name or a camera JSON file.
pub(crate) fn camera_path(spec: &str) -> Result<CameraPath> {
    if let Some(p) = CameraPath::preset(spec) {
        return Ok(p);
    }
    let path = PathBuf::from(spec);
    anyhow::ensure!(
        path.exists(),
        "camera '{spec}' is neither a preset ({}) nor an existing JSON file",
        PRESETS.join(", ")
    );
    CameraPath::load(&path).with_context(|| format!("reading camera path {}", path.display()))
}

/// Folder for cached bakes: `$TESSERA_CACHE`, else `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tessera");
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir).join(".cache/tessera")
}

fn bake_into(input: BakeInput, out: &Path) -> Result<()> {
    let pb = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("baking {msg} [{bar:40}] {pos}/{len} tiles")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_message(input.name.clone());
    let tmp = out.with_extension("tsa.partial");
    bake(vec![input], &tmp, &BakeOptions::default(), &pb)
        .with_context(|| format!("baking {}", out.display()))?;
    pb.finish_and_clear();
    std::fs::rename(&tmp, out).with_context(|| format!("moving the bake to {}", out.display()))?;
    Ok(())
}

/// The atlas to open for `input`: itself when it is an atlas, the cached bake of an
/// image (baked now when missing or older than the image), or the built-in texture.
pub(crate) fn resolve_atlas(input: Option<&Path>) -> Result<PathBuf> {
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating cache folder {}", cache.display()))?;
    let Some(input) = input else {
        let out = cache.join("demo-8192x4096.tsa");
        if Atlas::open(&out).is_err() {
            println!("baking the built-in 8192x4096 labelled texture into {}", out.display());
            let source = Box::new(Generated::new(8192, 4096));
            let input = BakeInput { name: "demo".into(), source, wrap: Wrap::Clamp, color: ColorSpace::Srgb };
            bake_into(input, &out)?;
        }
        return Ok(out);
    };
    if Atlas::open(input).is_ok() {
        return Ok(input.to_path_buf());
    }
    let meta = std::fs::metadata(input).with_context(|| format!("opening {}", input.display()))?;
    let canonical = input.canonicalize().unwrap_or_else(|_| input.to_path_buf());
    let stem = input.file_stem().map_or("image".into(), |s| s.to_string_lossy().into_owned());
    let key = crc32fast::hash(canonical.to_string_lossy().as_bytes());
    let out = cache.join(format!("{stem}-{key:08x}.tsa"));
    let fresh = std::fs::metadata(&out).and_then(|m| Ok(m.modified()? >= meta.modified()?)).unwrap_or(false);
    if !fresh || Atlas::open(&out).is_err() {
        println!("baking {} into {} (once; later opens reuse it)", input.display(), out.display());
        let source = ImageSource::open(input).with_context(|| {
            format!("{} is neither a Tessera atlas nor a readable image", input.display())
        })?;
        bake_into(
            BakeInput { name: stem, source: Box::new(source), wrap: Wrap::Clamp, color: ColorSpace::Srgb },
            &out,
        )?;
    }
    Ok(out)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = Args::parse();
    match app::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
