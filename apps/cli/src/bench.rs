//! `tessera bench`: virtual texturing against the fully resident reference on the same scene and
//! camera path; prints a table and writes the full report as JSON.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::gpu_bench::{BenchConfig, BenchReport, ModeStats, PROBE_FEEDBACK_STRIDE, Stat};
use anyhow::{Context, Result};
use tessera::GpuContext;
use tessera::core::scene::camera::Shot;
use tessera::params::ShaderProbe;

/// Arguments of `tessera bench`.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// The atlas to render (default: the demo's built-in labelled texture, baked once and cached).
    #[arg(long)]
    atlas: Option<PathBuf>,
    /// Size of the built-in texture used when --atlas is not given.
    #[arg(long, default_value = "8192x4096", value_parser = crate::parse_size)]
    texture: (u32, u32),
    /// A named real-data scene (dungeon, globe, …) instead of --atlas, baked when needed;
    /// `terrain` / `terrain8`: the runtime virtual texture, against its composite per pixel.
    #[arg(long, conflicts_with = "atlas")]
    scene: Option<String>,
    /// Codec for baking --scene.
    #[arg(long, default_value = "lz4")]
    codec: tessera::core::Codec,
    /// Camera path: a preset (built-in scene: static, flyover, orbit, cut; --scene:
    /// overview, walk, fly, cut) or a JSON file. Default: flyover, or for a material scene walk
    /// through a level (dungeon) and fly around an object (globe).
    #[arg(long)]
    camera: Option<String>,
    /// Measured frames (frame i shows the camera path at frame i).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..))]
    frames: u32,
    /// Warm-up frames on the path's first camera, excluded from the statistics.
    #[arg(long, default_value_t = 30)]
    warmup: u32,
    /// Frame size.
    #[arg(long, default_value = "1920x1080", value_parser = crate::args::frame_size)]
    size: (u32, u32),
    /// Where to write the JSON report.
    #[arg(long, default_value = "out/bench/bench.json")]
    json: PathBuf,
    /// Evict the whole VRAM pool every N measured frames (host cache kept), so frames
    /// upload in bursts: the table then shows what a frame of 256+ uploads costs.
    #[arg(long, default_value_t = 0)]
    flush_every: u32,
    /// Skip the third variant (feedback stride 8) that estimates the cost of feedback writes.
    #[arg(long)]
    no_feedback_probe: bool,
    /// Drop part of the virtual-texture sampling chain to price the rest (the image is
    /// then wrong): lod-only (level of detail and feedback), lookup-only (plus the
    /// page-table lookup, no fetch), no-lookup (one fetch from a fixed slot), software
    /// (the two-lookup software trilinear on the same pool).
    #[arg(long, default_value = "off", value_parser = parse_probe)]
    shader_probe: ShaderProbe,
    #[command(flatten)]
    vt: crate::capture::VtArgs,
}

fn parse_probe(s: &str) -> Result<ShaderProbe, String> {
    Ok(match s {
        "off" => ShaderProbe::Off,
        "lod-only" => ShaderProbe::LodOnly,
        "lookup-only" => ShaderProbe::LookupOnly,
        "no-lookup" => ShaderProbe::NoLookup,
        "software" => ShaderProbe::Software,
        _ => {
            return Err(format!(
                "'{s}' is not a probe: use off, lod-only, lookup-only, no-lookup or software"
            ));
        }
    })
}

/// Runs `tessera bench`.
pub(crate) fn run(args: &BenchArgs) -> Result<ExitCode> {
    if let Some(atlas) = &args.atlas {
        crate::args::atlas_file(atlas)?;
    }
    let opened = match (&args.atlas, &args.scene) {
        (Some(a), _) => crate::scene::Opened::file(a.clone(), None),
        (None, Some(name)) => crate::scene::open(name, args.texture, args.codec, false)?,
        (None, None) => crate::scene::open("builtin", args.texture, args.codec, false)?,
    };
    let atlas = opened.atlas.clone();
    let camera = opened.camera_name(args.camera.as_deref(), Shot::Tour);
    let cfg = BenchConfig {
        atlas: atlas.clone(),
        camera: opened.camera(Some(&camera), Shot::Tour)?,
        scene: opened.scene.clone(),
        terrain: opened.terrain.clone(),
        frames: args.frames.max(1),
        warmup: args.warmup,
        size: args.size,
        vt: args.vt.config(),
        feedback_probe: !args.no_feedback_probe,
        flush_every: args.flush_every,
        shader_probe: args.shader_probe,
    };
    let ctx = GpuContext::headless()?;
    println!(
        "benchmarking '{}' at {}x{}: {} warm-up + {} measured frames on {}",
        camera,
        cfg.size.0,
        cfg.size.1,
        cfg.warmup,
        cfg.frames,
        ctx.describe()
    );
    println!("basis transcoder: {}", tessera::core::format::codec::basis_transcoder().label());
    let report = crate::gpu_bench::run(&ctx, &cfg).with_context(|| {
        format!("benchmarking {}", tessera::core::format::atlas::display_location(&atlas).display())
    })?;
    print!("{}", table(&report, &camera));
    if let Some(dir) = args.json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(&report).context("serialising the bench report")?;
    std::fs::write(&args.json, json + "\n").with_context(|| format!("writing {}", args.json.display()))?;
    println!("report written to {}", args.json.display());
    Ok(ExitCode::SUCCESS)
}

fn ms(v: f64) -> String {
    if v.is_finite() { format!("{v:.3}") } else { "n/a".into() }
}

fn med_p95(s: Option<&Stat>) -> (String, String) {
    s.map_or(("n/a".into(), "n/a".into()), |s| (ms(s.median), ms(s.p95)))
}

fn times(s: &Stat) -> String {
    format!("median {} ms, p95 {} ms, max {} ms", ms(s.median), ms(s.p95), ms(s.max))
}

fn x(r: Option<f64>) -> String {
    r.filter(|r| r.is_finite()).map_or("n/a".into(), |r| format!("{r:.3}x"))
}

/// The human-readable table.
fn table(r: &BenchReport, camera: &str) -> String {
    let mut o = String::new();
    let sizes: Vec<String> = r.virtual_sizes.iter().map(|(w, h)| format!("{w}x{h}")).collect();
    let _ = writeln!(o, "adapter:   {}", r.adapter);
    let _ = writeln!(o, "atlas:     {} (virtual {})", r.atlas.display(), sizes.join(", "));
    let _ = writeln!(o, "pool:      {}", r.pool_format);
    let _ = writeln!(
        o,
        "sampling:  {}; {}; page table in a {}",
        r.sampling,
        match (r.feedback_target, r.early_depth) {
            (true, _) => "feedback to a colour target (no side effect: early depth as the driver likes)",
            (false, true) => "feedback to storage, early depth test forced",
            (false, false) => "feedback to storage, early depth test off",
        },
        match r.page_table {
            tessera::PageTableStorage::Complete => "complete storage buffer (updated on the GPU)",
            tessera::PageTableStorage::Buffer => "storage buffer (shallow fallbacks)",
            tessera::PageTableStorage::Texture => "texture (shallow fallbacks)",
        }
    );
    if r.shader_probe != ShaderProbe::Off {
        let _ = writeln!(o, "probe:     {:?} (the VT rows price part of the sampling chain)", r.shader_probe);
    }
    let _ = writeln!(
        o,
        "frames:    {} measured after {} warm-up, {}x{}, camera '{camera}'",
        r.frames, r.warmup, r.size.0, r.size.1
    );
    let _ = writeln!(
        o,
        "memory:    VT pool {:.1} MiB, fully resident reference {}",
        r.pool_mib,
        match (&r.reference_mib, &r.reference_unavailable) {
            (Some(m), _) => format!("{m:.1} MiB"),
            (None, Some(why)) => format!("n/a: {why} (reference rows and ratios are NaN)"),
            (None, None) => "n/a".into(),
        }
    );
    let _ = writeln!(
        o,
        "timestamps: TIMESTAMP_QUERY {}, TIMESTAMP_QUERY_INSIDE_ENCODERS {}, {} ns/tick\n",
        yes(r.timestamp_query),
        yes(r.timestamp_query_inside_encoders),
        r.timestamp_period_ns
    );
    let _ = writeln!(
        o,
        "{:<20} {:>21} {:>21} {:>10} {:>21}",
        "ms", "GPU pass", "wall (submit→idle)", "CPU", "frame (CPU+wall)"
    );
    let _ = writeln!(
        o,
        "{:<20} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "median", "p95", "median", "p95", "median", "median", "p95"
    );
    row(&mut o, "virtual texturing", &r.vt);
    row(&mut o, "reference", &r.reference);
    let _ = writeln!(
        o,
        "{:<20} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "ratio VT/reference",
        x(r.ratio.gpu_pass),
        "",
        x(Some(r.ratio.wall)),
        "",
        x(Some(ratio(r.vt.cpu_ms.median, r.reference.cpu_ms.median))),
        x(Some(r.ratio.frame)),
        ""
    );
    if let Some(p) = &r.feedback_probe {
        row(&mut o, &format!("VT, fb stride {PROBE_FEEDBACK_STRIDE}"), p);
    }
    if let Some(p) = &r.no_feedback {
        row(&mut o, "VT, no feedback", p);
        let _ = writeln!(o, "{:<20} {:>10}", "ratio no fb/ref", x(r.no_feedback_ratio));
    }
    o.push('\n');
    let f = &r.feedback;
    let _ = writeln!(o, "feedback CPU (readback, decode, decide): {}", times(&f.cpu_ms));
    let _ = writeln!(
        o,
        "feedback GPU (bitset clear + copy):      {}",
        f.gpu_clear_copy_ms.as_ref().map_or("n/a (needs TIMESTAMP_QUERY_INSIDE_ENCODERS)".into(), times)
    );
    let probe = r.feedback_probe.as_ref().and_then(|p| p.gpu_pass_ms.as_ref());
    let _ = writeln!(
        o,
        "feedback writes in the pass:             {}",
        match (f.shader_writes_ms, probe) {
            (Some(d), Some(p)) => format!(
                "{} ms (GPU pass median at stride {} minus {} ms at stride {PROBE_FEEDBACK_STRIDE})",
                ms(d),
                f.stride,
                ms(p.median)
            ),
            _ if f.stride == PROBE_FEEDBACK_STRIDE => "n/a (stride already 8)".into(),
            _ => "n/a (needs TIMESTAMP_QUERY and the probe)".into(),
        }
    );
    let _ = writeln!(o, "feedback readback:                       {} bytes/frame", f.readback_bytes);
    let u = &r.uploads;
    let _ = writeln!(o, "upload CPU (uploads, page table):        {}", times(&u.cpu_ms));
    let _ = writeln!(
        o,
        "uploads per frame:                       median {}, max {}; {} in measured frames ({} written into staging by loader threads, {} copy commands), {} in warm-up; {} tiles resident at the end",
        u.per_frame.median, u.per_frame.max, u.total, u.staged, u.copies, u.warmup_total, u.resident_at_end
    );
    if r.page_table == tessera::PageTableStorage::Complete {
        let _ = writeln!(
            o,
            "page-table update pass (GPU):            entries per frame median {}, max {}; rectangles median {}, max {}; {}",
            u.table_entries.median,
            u.table_entries.max,
            u.table_jobs.median,
            u.table_jobs.max,
            u.table_gpu_ms.as_ref().map_or("GPU time n/a (no update measured)".into(), |s| format!(
                "GPU {} over {} frames with updates",
                times(s),
                s.samples
            ))
        );
    }
    if let Some(b) = &u.burst {
        let _ = writeln!(
            o,
            "upload bursts ({}):  {} frames, uploads median {} max {}; frame {:.3} ms median, {:.3} max \
             vs {:.3} idle: spike {:.3} ms; upload CPU median {:.3} ms, decisions {:.3} ms, copy commands median {}",
            match b.sliced_frames {
                Some(n) => format!("from each flush until resident, {n:.1} frames a burst"),
                None => ">= 256 tiles".into(),
            },
            b.frames,
            b.uploads.median,
            b.uploads.max,
            b.frame_ms.median,
            b.frame_ms.max,
            b.idle_frame_ms.median,
            b.spike_ms,
            b.upload_cpu_ms.median,
            b.decisions_ms.median,
            b.copies.median
        );
        let _ = writeln!(
            o,
            "  burst frame over the idle median:     median {:.3} ms, p95 {:.3} ms (target < 1 each)",
            b.over_idle_ms.0, b.over_idle_ms.1
        );
        let gpu = |s: &Option<Stat>| {
            s.as_ref().map_or("n/a".into(), |s| format!("{} / {}", ms(s.median), ms(s.p95)))
        };
        let _ = writeln!(
            o,
            "  burst, median / p95 ms:               upload span {}, page-table update (GPU) {}, scene pass (GPU) {}",
            gpu(&b.upload_gpu_ms),
            gpu(&b.table_gpu_ms),
            gpu(&b.pass_gpu_ms)
        );
    }
    if let Some(p) = &r.production {
        o.push_str(&p.lines(r.pool_mib));
    }
    if let Some(s) = &u.gpu_ms {
        let _ = writeln!(
            o,
            "upload span (copies, level 1; CPU recording included when the GPU idles): {} over {} frames that uploaded",
            times(s),
            s.samples
        );
    }
    o
}

/// One row of the timing table.
fn row(o: &mut String, name: &str, m: &ModeStats) {
    let (g50, g95) = med_p95(m.gpu_pass_ms.as_ref());
    let _ = writeln!(
        o,
        "{name:<20} {g50:>10} {g95:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        ms(m.wall_ms.median),
        ms(m.wall_ms.p95),
        ms(m.cpu_ms.median),
        ms(m.frame_ms.median),
        ms(m.frame_ms.p95)
    );
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}
