//! `tessera-viewer`: open an atlas, an image or a glTF scene (baked on first open), a
//! named scene or the built-in demo texture, fly through it and watch tiles stream
//! through VRAM, host cache and disk.

mod app;
mod bake;
mod camera;
mod gfx;
mod input;
mod outcome;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tessera_egui::{DebugView, FEEDBACK_STRIDES};

/// Interactive Tessera viewer with the tier-residency overlay.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub(crate) struct Args {
    /// An atlas (.tsa), an image or a glTF scene (.gltf, .glb; baked on first open into
    /// the cache folder), a scene name (dungeon, globe, stress; prepared from the data
    /// folder of assets/fetch-data.sh), or nothing for the built-in 8192x4096 labelled
    /// texture.
    input: Option<PathBuf>,
    /// Render `--frames` frames, write the last one (overlay included) as PNG, exit.
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// Frames to render before the screenshot.
    #[arg(long, default_value_t = 120)]
    frames: u32,
    /// Camera: a preset (built-in meshes: static, flyover, orbit, cut; glTF and named
    /// material scenes: overview, walk, fly, cut) or a camera-path JSON file; with
    /// `--screenshot` the path is followed frame by frame. Default: static, or overview
    /// for a material scene.
    #[arg(long)]
    camera: Option<String>,
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
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = parse_finite)]
    mip_bias: f32,
    /// Start without vsync (V toggles it).
    #[arg(long)]
    no_vsync: bool,
    /// Feedback resolution: one pixel in every N×N block writes feedback each frame
    /// (1, 2, 4 or 8).
    #[arg(long, default_value_t = 2, value_parser = parse_stride)]
    feedback_stride: u32,
    /// Debug view to start with (M cycles them): off, mip, fallback, borders (or 0-3).
    #[arg(long, default_value = "off", value_parser = parse_debug_view)]
    debug_view: DebugView,
    /// Testing aid: destroy the GPU device before this scene frame, to check that the
    /// viewer then exits with one message.
    #[arg(long, hide = true)]
    lose_device_at: Option<u64>,
}

fn parse_stride(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .ok()
        .filter(|v| FEEDBACK_STRIDES.contains(v))
        .ok_or_else(|| format!("'{s}' is not a feedback stride (1, 2, 4 or 8)"))
}

fn parse_finite(s: &str) -> Result<f32, String> {
    s.trim()
        .parse::<f32>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("'{s}' is not a finite number"))
}

fn parse_debug_view(s: &str) -> Result<DebugView, String> {
    DebugView::parse(s).ok_or_else(|| {
        let names: Vec<_> = DebugView::ALL.iter().map(|v| v.short_name()).collect();
        format!("'{s}' is not a debug view ({}, or 0-3)", names.join(", "))
    })
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let args = Args::parse();
    match app::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", tessera::core::error_text::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
