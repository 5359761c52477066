//! `tessera demo`: the README's main job. Bakes the built-in labelled texture once into
//! a cache folder, captures a camera path headless through the virtual texture and
//! against the fully resident reference, and writes frames plus a short report.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tessera::GpuContext;
use tessera::capture::{CaptureConfig, CaptureReport, capture};
use tessera_core::format::atlas::Atlas;
use tessera_core::scene::camera::{CameraPath, Shot};

/// Arguments of `tessera demo`.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Where frames and the report go.
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
    /// Size of the built-in texture.
    #[arg(long, default_value = "8192x4096", value_parser = crate::parse_size)]
    texture: (u32, u32),
    /// Scene: builtin (a generated labelled texture on a plane, globe and cube), or a
    /// scene from real data: dungeon (glTF) or globe (see `tessera scenes`).
    #[arg(long, default_value = "builtin")]
    scene: String,
    /// Codec for baking a real-data scene (raw, lz4, etc1s, uastc, uastc+lz4).
    #[arg(long, default_value = "lz4")]
    codec: tessera_core::Codec,
    /// Camera path: a preset (built-in scene: static, flyover, orbit, cut; real-data
    /// scenes: overview, walk, fly, cut) or a JSON file. Default: flyover, or walk for
    /// the dungeon and fly for the globe.
    #[arg(long)]
    camera: Option<String>,
    /// Frames to render.
    #[arg(long, default_value_t = 120)]
    frames: u32,
    /// Frame size.
    #[arg(long, default_value = "1280x720", value_parser = crate::args::frame_size)]
    size: (u32, u32),
    /// Write every K-th frame as PNG.
    #[arg(long, default_value_t = 20)]
    every: u32,
    /// Bake again even when a cached atlas exists.
    #[arg(long)]
    rebake: bool,
    #[command(flatten)]
    vt: crate::capture::VtArgs,
}

/// Runs `tessera demo`.
pub(crate) fn run(args: &DemoArgs) -> Result<ExitCode> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let (atlas_path, scene) = crate::scene::open(&args.scene, args.texture, args.codec, args.rebake)?;
    let camera_name = args
        .camera
        .clone()
        .unwrap_or_else(|| CameraPath::default_preset(scene.as_deref(), Shot::Tour).to_string());
    print!("{}", crate::inspect::table(&Atlas::open(&atlas_path)?.summary()));
    let ctx = GpuContext::headless()?;
    println!("adapter: {}", ctx.describe());
    let cfg = CaptureConfig {
        atlas: atlas_path.clone(),
        camera: CameraPath::for_scene(Some(&camera_name), scene.as_deref(), Shot::Tour)?,
        frames: args.frames.max(1),
        size: args.size,
        every: args.every,
        out: Some(args.out.join("frames")),
        reference: true,
        reference_atlas: None,
        vt: args.vt.config(),
        scene,
        prefetch: 0,
        flush_vram_before: Vec::new(),
    };
    println!(
        "capturing {} frames of '{}' at {}x{} (virtual texture and reference)",
        cfg.frames, camera_name, cfg.size.0, cfg.size.1
    );
    let report = capture(&ctx, &cfg)?;
    let text = report_text(&report, &camera_name);
    let md = args.out.join("report.md");
    std::fs::write(&md, &text).with_context(|| format!("writing {}", md.display()))?;
    print!("{text}");
    println!(
        "frames in {}, statistics in {}, report in {}",
        args.out.join("frames").display(),
        args.out.join("frames/stats.json").display(),
        md.display()
    );
    let unwritten: usize = report.frames.iter().map(|f| f.unwritten_pixels).sum();
    Ok(if unwritten == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The short human report: convergence, tier residency, timings.
fn report_text(r: &CaptureReport, camera: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Tessera demo\n\nadapter: {}\ncamera: {camera}, {} frames at {}x{}\n",
        r.adapter,
        r.frames.len(),
        r.size.0,
        r.size.1
    );
    let psnr: Vec<(u32, f64)> =
        r.frames.iter().filter_map(|f| f.psnr_db.map(|p| (f.frame, p.min(99.0)))).collect();
    if let (Some(first), Some(last)) = (psnr.first(), psnr.last()) {
        let min = psnr.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let reach =
            psnr.iter().find(|p| p.1 >= 40.0).map_or("never".to_string(), |p| format!("frame {}", p.0));
        let _ = writeln!(o, "## Convergence (PSNR against the fully resident reference)\n");
        let _ = writeln!(
            o,
            "first frame {:.1} dB, last frame {:.1} dB, lowest {min:.1} dB; first at or above 40 dB: {reach}",
            first.1, last.1
        );
        let marks: Vec<String> =
            psnr.iter().step_by((psnr.len() / 12).max(1)).map(|(f, p)| format!("{f}:{p:.1}")).collect();
        let _ = writeln!(o, "frame:dB  {}\n", marks.join("  "));
    }
    let full = r.frames.iter().filter(|f| f.resident_fraction >= 1.0).count();
    let lowest = r.frames.iter().map(|f| f.resident_fraction).fold(1.0, f64::min);
    let _ = writeln!(
        o,
        "fully resident (every wanted tile at its wanted mip): {full} of {} frames; lowest resident fraction {:.1}%\n",
        r.frames.len(),
        100.0 * lowest
    );
    let s = &r.final_stats;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let _ = writeln!(o, "## Tier residency after the last frame\n");
    let _ = writeln!(
        o,
        "VRAM pool: {} of {} slots ({:.1} MiB of {:.1} MiB), {} uploads, {} evictions",
        s.vram.tiles,
        s.vram_counters.slots_total,
        mib(s.vram.bytes),
        mib(r.pool_bytes),
        s.vram_counters.uploads,
        s.vram_counters.evictions
    );
    let _ = writeln!(
        o,
        "host cache: {} tiles, {:.1} MiB of {:.1} MiB budget, hit rate {:.1}%",
        s.host.tiles,
        mib(s.host.bytes),
        mib(s.host_cache.budget_bytes),
        100.0 * s.host_hit_rate()
    );
    let _ = writeln!(
        o,
        "disk: {} tiles, {:.1} MiB in the atlas; loader: {} requested, {} loaded, {} failed, {} cancelled",
        s.disk.tiles,
        mib(s.disk.bytes),
        s.loader.requested,
        s.loader.completed,
        s.loader.failed,
        s.loader.cancelled
    );
    if let Some(b) = r.reference_bytes {
        let _ = writeln!(
            o,
            "fully resident reference texture: {:.1} MiB (VT pool is {:.1}% of it)",
            mib(b),
            100.0 * r.pool_bytes as f64 / b as f64
        );
    }
    let _ = writeln!(o, "\n## Timings (median over frames)\n");
    let _ = writeln!(
        o,
        "frame {:.2} ms (includes reference render and two readbacks), feedback decode + decisions {:.3} ms, uploads {:.3} ms, uploads per frame max {}",
        median(r.frames.iter().map(|f| f.frame_ms).collect()),
        median(r.frames.iter().map(|f| f.feedback_ms).collect()),
        median(r.frames.iter().map(|f| f.upload_ms).collect()),
        r.frames.iter().map(|f| f.uploads).max().unwrap_or(0)
    );
    let _ = writeln!(o, "\n{}", r.summary());
    o
}
