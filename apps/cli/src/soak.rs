//! `tessera soak`: many frames of random camera cuts through the renderer with a small
//! pool; prints the series of memory, pool, queue and cache figures and writes it as
//! JSON. Exits 1 when a figure kept rising after the warm-up.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tessera::GpuContext;
use tessera::VtConfig;
use tessera_tools::soak::{SoakConfig, SoakPoint, SoakReport, soak};

/// Arguments of `tessera soak`.
#[derive(clap::Args)]
pub(crate) struct SoakArgs {
    /// A named scene (stress: the 65536² mosaic; mosaic16k, dungeon, globe, builtin).
    #[arg(long, default_value = "stress")]
    scene: String,
    /// Frames to render.
    #[arg(long, default_value_t = 100_000)]
    frames: u64,
    /// A camera cut to a new random view every N frames.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..))]
    cut_every: u32,
    /// Seed of the random views.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Frame size.
    #[arg(long, default_value = "640x360", value_parser = crate::args::frame_size)]
    size: (u32, u32),
    /// A point of the series every N frames.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    sample_every: u64,
    /// Also read back every N-th frame and check it shows no unwritten texel (0: only at
    /// the points of the series).
    #[arg(long, default_value_t = 50)]
    check_every: u64,
    /// GPU tile pool size in MiB (small, so the pool churns).
    #[arg(long, default_value_t = 16)]
    pool_mib: u32,
    /// Host page cache budget in MiB.
    #[arg(long, default_value_t = 64)]
    host_cache_mib: u32,
    /// Loader threads (0 = one per core; at most 256).
    #[arg(long, default_value_t = 0, value_parser = crate::args::loader_threads)]
    loader_threads: usize,
    /// Largest rise of the resident set size after the warm-up (the first quarter) that
    /// still passes, MiB.
    #[arg(long, default_value_t = 32.0, value_parser = crate::args::positive_f64)]
    max_rss_rise_mib: f64,
    /// Where to write the JSON report.
    #[arg(long, default_value = "out/soak/soak.json")]
    json: PathBuf,
}

/// Runs `tessera soak`.
pub(crate) fn run(args: &SoakArgs) -> Result<ExitCode> {
    let opened = crate::scene::open(&args.scene, (8192, 4096), tessera::core::Codec::Lz4, false)?;
    if opened.terrain.is_some() {
        anyhow::bail!(
            "soak runs streamed atlases (random cuts over a scene's bounds); the terrain's tiles are \
             produced on the GPU: use `tessera capture --scene {}` or `tessera bench --scene {}`",
            args.scene,
            args.scene
        );
    }
    let (atlas, scene) = (opened.atlas, opened.scene);
    let cfg = SoakConfig {
        atlas: atlas.clone(),
        scene,
        frames: args.frames.max(1),
        cut_every: args.cut_every,
        seed: args.seed,
        size: args.size,
        sample_every: args.sample_every,
        check_every: args.check_every,
        vt: VtConfig {
            pool_mib: args.pool_mib,
            streaming: tessera::StreamerConfig {
                host_cache_mib: args.host_cache_mib,
                loader_threads: args.loader_threads,
                ..tessera::StreamerConfig::default()
            },
            ..VtConfig::default()
        },
    };
    let ctx = GpuContext::headless()?;
    println!(
        "soak of '{}': {} frames, a cut every {}, {}x{}, pool {} MiB, host cache {} MiB on {}",
        args.scene,
        cfg.frames,
        cfg.cut_every,
        cfg.size.0,
        cfg.size.1,
        args.pool_mib,
        args.host_cache_mib,
        ctx.describe()
    );
    println!("{}", header());
    let report = soak(&ctx, &cfg, |p| println!("{}", line(p))).with_context(|| {
        format!("soaking {}", tessera::core::format::atlas::display_location(&atlas).display())
    })?;
    if let Some(dir) = args.json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(&report).context("serialising the soak report")?;
    std::fs::write(&args.json, json + "\n").with_context(|| format!("writing {}", args.json.display()))?;
    let verdict = verdict(&report, args.max_rss_rise_mib);
    println!(
        "{} frames ({} cuts) in {:.1} s; report written to {}",
        report.frames,
        report.cuts,
        report.seconds,
        args.json.display()
    );
    for line in &verdict.lines {
        println!("{line}");
    }
    Ok(if verdict.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn header() -> String {
    format!(
        "{:>8} {:>9} {:>11} {:>7} {:>6} {:>9} {:>9} {:>8} {:>8} {:>9}",
        "frame", "RSS MiB", "pool", "queue", "ready", "host MiB", "GPU MiB", "uploads", "evicts", "median ms"
    )
}

fn line(p: &SoakPoint) -> String {
    format!(
        "{:>8} {:>9.1} {:>5}/{:<5} {:>7} {:>6} {:>9.1} {:>9} {:>8} {:>8} {:>9.3}",
        p.frame,
        p.rss_mib,
        p.pool_resident,
        p.pool_slots,
        p.loader_queue,
        p.ready,
        p.host_mib,
        p.gpu_allocated_mib.map_or("n/a".into(), |m| format!("{m:.1}")),
        p.uploads,
        p.evictions,
        p.median_frame_ms
    )
}

/// Whether the series stayed flat, with one line per figure.
struct Verdict {
    ok: bool,
    lines: Vec<String>,
}

fn verdict(r: &SoakReport, max_rss_rise_mib: f64) -> Verdict {
    let mut lines = Vec::new();
    let mut ok = true;
    let mut check = |name: &str, rise: f64, limit: f64, unit: &str| {
        let pass = rise <= limit;
        ok &= pass;
        lines.push(format!(
            "{} {name} rose {rise:.1} {unit} after the warm-up (limit {limit:.1})",
            if pass { "ok:  " } else { "FAIL:" }
        ));
    };
    check("resident set size", r.rise_after_warmup(|p| p.rss_mib), max_rss_rise_mib, "MiB");
    if r.points.iter().all(|p| p.gpu_allocated_mib.is_some()) {
        check("GPU allocation", r.rise_after_warmup(|p| p.gpu_allocated_mib.unwrap_or(0.0)), 1.0, "MiB");
    }
    let slots = r.points.first().map_or(0, |p| p.pool_slots);
    let over = r.points.iter().filter(|p| p.pool_resident > p.pool_slots as usize).count();
    ok &= over == 0;
    lines.push(format!(
        "{} pool occupancy stayed within its {slots} slots at {} of {} points",
        if over == 0 { "ok:  " } else { "FAIL:" },
        r.points.len() - over,
        r.points.len()
    ));
    // The loader queue is bounded by what one view asks for; it must not grow with time.
    let queue_peak = r.points.iter().map(|p| p.loader_queue).max().unwrap_or(0);
    let half = r.points.len() / 2;
    let first_half_peak = r.points[..half].iter().map(|p| p.loader_queue).max().unwrap_or(0);
    let queue_ok = queue_peak <= first_half_peak.max(1) * 2;
    ok &= queue_ok;
    lines.push(format!(
        "{} loader queue peaked at {queue_peak} (first half {first_half_peak})",
        if queue_ok { "ok:  " } else { "FAIL:" }
    ));
    Verdict { ok, lines }
}
