//! `tessera demo`: the README's main job. Prepares a texture far larger than the tile
//! pool (the 65536² stress mosaic of real images when the data of
//! `assets/fetch-data.sh` is present, else a generated 32768² labelled texture; baked
//! once into a cache folder), captures a camera path headless through the virtual
//! texture (and against the fully resident reference where one fits the GPU), and
//! writes frames plus a report that leads with the pool's share of the resident size.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tessera::GpuContext;
use tessera_core::bake::mosaic::Mosaic;
use tessera_core::format::atlas::Atlas;
use tessera_core::format::codec::TargetFormat;
use tessera_core::scene::camera::Shot;
use tessera_tools::capture::{CaptureConfig, CaptureReport, capture};

/// Arguments of `tessera demo`.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Where frames and the report go.
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
    /// Size of the built-in texture.
    #[arg(long, default_value = "32768x32768", value_parser = crate::parse_size)]
    texture: (u32, u32),
    /// Scene: auto (stress when its real images are present, else builtin), builtin (a
    /// generated labelled texture on a plane, globe and cube), or a scene from real
    /// data: stress (a 65536² mosaic), mosaic16k, dungeon (glTF), globe, or terrain (a
    /// runtime virtual texture drawn on the GPU; docs/scenes.md lists them all).
    #[arg(long, default_value = "auto")]
    scene: String,
    /// Codec for baking a real-data scene (raw, lz4, etc1s, uastc, uastc+lz4).
    #[arg(long, default_value = "lz4")]
    codec: tessera_core::Codec,
    /// Camera path: a preset (built-in scene: static, flyover, orbit, cut; real-data
    /// scenes: overview, walk, fly, cut) or a JSON file. Default: flyover, or walk for
    /// the dungeon and fly for the globe.
    #[arg(long)]
    camera: Option<String>,
    /// Predict along the camera path this many frames ahead (0: off): each frame also
    /// draws the view the path shows then, at half size and without shading, as a
    /// predicted view whose tiles stream at the lowest priority, never evicting what is
    /// on screen, and are dropped when the path turns elsewhere.
    #[arg(long, default_value_t = crate::capture::PREDICT_FRAMES)]
    predict_frames: u32,
    /// Frames to render.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..))]
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
    let name = match args.scene.as_str() {
        "auto" => {
            let data = tessera_core::bake::source::data_dir();
            let missing = Mosaic::stress_files(&data).into_iter().find(|p| !p.is_file());
            match missing {
                None => "stress",
                Some(p) => {
                    println!(
                        "the stress mosaic's images are not in {} ({} is missing; assets/fetch-data.sh fetches \
                         them): showing the generated {}x{} texture",
                        data.display(),
                        p.display(),
                        args.texture.0,
                        args.texture.1
                    );
                    "builtin"
                }
            }
        }
        other => other,
    };
    let opened = crate::scene::open(name, args.texture, args.codec, args.rebake)?;
    let camera_name = opened.camera_name(args.camera.as_deref(), Shot::Tour);
    let atlas = match &opened.terrain {
        Some(terrain) => tessera_tools::terrain::terrain_atlas(terrain)?,
        None => Atlas::open(&opened.atlas)?,
    };
    print!("{}", crate::inspect::table(&atlas.summary()));
    let ctx = GpuContext::headless()?;
    println!("adapter: {}", ctx.describe());
    println!("basis transcoder: {}", tessera::core::format::codec::basis_transcoder().label());
    // A reference only where one fits the GPU: the point of the demo is a texture that does not.
    // The terrain's reference is its composite evaluated per pixel: it always fits.
    let no_reference = opened
        .terrain
        .is_none()
        .then(|| {
            (0..atlas.layers().len()).find_map(|l| tessera_tools::reference::fits(&ctx, &atlas, l).err())
        })
        .flatten();
    if let Some(why) = &no_reference {
        println!("no fully resident reference: {why}");
    }
    let cfg = CaptureConfig {
        atlas: opened.atlas.clone(),
        camera: opened.camera(Some(&camera_name), Shot::Tour)?,
        frames: args.frames.max(1),
        size: args.size,
        every: args.every,
        out: Some(args.out.join("frames")),
        reference: no_reference.is_none(),
        reference_atlas: None,
        vt: args.vt.config(),
        scene: opened.scene.clone(),
        prefetch: 0,
        flush_vram_before: Vec::new(),
        remote: Default::default(),
        frame_interval: None,
        wait_resident: None,
        predict: args.predict_frames,
        terrain: opened.terrain.clone(),
    };
    println!(
        "capturing {} frames of '{}' at {}x{} ({})",
        cfg.frames,
        camera_name,
        cfg.size.0,
        cfg.size.1,
        if cfg.reference { "virtual texture and reference" } else { "virtual texture" }
    );
    let report = capture(&ctx, &cfg)?;
    println!("{}", report.pool_line());
    let scale = Scale::of(&atlas, &report, no_reference.map(|e| e.to_string()));
    std::fs::write(args.out.join("scale.json"), serde_json::to_string_pretty(&scale)?)
        .with_context(|| format!("writing {}", args.out.join("scale.json").display()))?;
    let text = report_text(&report, &camera_name, &scale);
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

/// What the demo is about: how much texture, how much it would take resident, and the
/// pool that shows it.
#[derive(Debug, serde::Serialize)]
struct Scale {
    /// Texels of every layer's mip 0.
    virtual_texels: u64,
    /// Layer sizes, `WxH`.
    layers: Vec<String>,
    /// Bytes every mip of every layer takes fully resident in RGBA8.
    resident_rgba8_bytes: u64,
    /// The same in the pool's texel format (what a resident copy in the pool's format would need).
    resident_pool_format_bytes: u64,
    /// The pool's texel format.
    pool_format: String,
    /// Bytes of the tile pool (every level and pool).
    pool_bytes: u64,
    /// `resident_pool_format_bytes / pool_bytes`: the pool is 1/this of the resident size.
    ratio: f64,
    /// Why there is no reference (none fits the GPU), if there is none.
    no_reference: Option<String>,
}

impl Scale {
    fn of(atlas: &Atlas, r: &CaptureReport, no_reference: Option<String>) -> Self {
        let format = TargetFormat::ALL.into_iter().find(|t| t.name() == r.pool_format);
        let (mut texels, mut rgba8, mut pooled) = (0u64, 0u64, 0u64);
        let mut layers = Vec::new();
        for l in atlas.layers() {
            let lay = l.layout;
            layers.push(format!("{}x{}", lay.width(), lay.height()));
            texels += u64::from(lay.width()) * u64::from(lay.height());
            for m in 0..lay.mip_count() {
                let (w, h) = (u64::from((lay.width() >> m).max(1)), u64::from((lay.height() >> m).max(1)));
                rgba8 += w * h * 4;
                pooled += match format {
                    Some(t) if t.is_block_compressed() => {
                        w.div_ceil(4) * h.div_ceil(4) * t.bytes_per_block() as u64
                    }
                    _ => w * h * 4,
                };
            }
        }
        Self {
            virtual_texels: texels,
            layers,
            resident_rgba8_bytes: rgba8,
            resident_pool_format_bytes: pooled,
            pool_format: r.pool_format.clone(),
            pool_bytes: r.pool_bytes,
            ratio: pooled as f64 / r.pool_bytes.max(1) as f64,
            no_reference,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The short human report: scale, convergence, tier residency, timings.
fn report_text(r: &CaptureReport, camera: &str, scale: &Scale) -> String {
    let mut o = String::new();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let _ = writeln!(
        o,
        "# Tessera demo\n\n**The tile pool is 1/{:.0} of the texture's fully resident size**: a {} virtual texture \
         ({:.2} gigatexels) would take {:.2} GiB resident in {} with its mips{}; \
         it is shown through a {:.0} MiB pool.\n",
        scale.ratio,
        scale.layers.join(" + "),
        scale.virtual_texels as f64 / 1e9,
        gib(scale.resident_pool_format_bytes),
        scale.pool_format,
        if scale.resident_rgba8_bytes == scale.resident_pool_format_bytes {
            String::new()
        } else {
            format!(" ({:.2} GiB in RGBA8)", gib(scale.resident_rgba8_bytes))
        },
        scale.pool_bytes as f64 / (1u64 << 20) as f64,
    );
    if let Some(why) = &scale.no_reference {
        let _ = writeln!(o, "No fully resident reference to compare with: {why}.\n");
    }
    let _ = writeln!(
        o,
        "adapter: {}\ncamera: {camera}, {} frames at {}x{}\n",
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
    for line in r.motion_lines() {
        let _ = writeln!(o, "{line}\n");
    }
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
        "frame {:.2} ms ({}), feedback decode + decisions {:.3} ms, uploads {:.3} ms, uploads per frame max {}",
        median(r.frames.iter().map(|f| f.frame_ms).collect()),
        if r.reference_bytes.is_some() {
            "includes the reference render and two readbacks"
        } else {
            "includes the frame's readback"
        },
        median(r.frames.iter().map(|f| f.feedback_ms).collect()),
        median(r.frames.iter().map(|f| f.upload_ms).collect()),
        r.frames.iter().map(|f| f.uploads).max().unwrap_or(0)
    );
    let _ = writeln!(o, "\n{}", r.summary());
    o
}
