//! Headless frame capture: renders the built-in scene along a camera path through the
//! virtual texture (and optionally the fully resident reference), writes PNG frames
//! and per-frame statistics. Used by `tessera capture`, `tessera demo` and the tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tessera::core::Atlas;
use tessera::core::compare::{compare, count_colour};
use tessera::core::scene::camera::CameraPath;
use tessera::core::scene::material_scene::MaterialScene;
use tessera::core::scene::terrain::TerrainScene;
use tessera::core::stream::stats::{StatsSnapshot, StreamFrame};

use crate::open_drawn;
use crate::scene::OffscreenTarget;
use tessera::GpuContext;
use tessera::RenderError;
use tessera::UNWRITTEN;
use tessera::VtConfig;

/// What to capture.
#[derive(Clone, Debug)]
pub struct CaptureConfig {
    /// The atlas to stream from.
    pub atlas: PathBuf,
    /// Camera path (a preset or loaded from JSON).
    pub camera: CameraPath,
    /// Frames to render.
    pub frames: u32,
    /// Frame size in pixels.
    pub size: (u32, u32),
    /// Write every `every`-th frame as PNG (0: only the last); the last frame is always written.
    pub every: u32,
    /// Output folder for PNGs and `stats.json` (none: keep in memory only).
    pub out: Option<PathBuf>,
    /// Also render the fully resident reference and record PSNR per frame.
    pub reference: bool,
    /// Build the reference from this atlas instead of the streamed one (the lossless
    /// bake of the same source, so PSNR includes the codec's loss).
    pub reference_atlas: Option<PathBuf>,
    /// Virtual-texture settings.
    pub vt: VtConfig,
    /// A material scene (glTF or globe) baked into `atlas` with its manifest beside it
    /// (`SceneManifest::path_for`); `None`: the built-in scene.
    pub scene: Option<Arc<MaterialScene>>,
    /// Prefetch along the known camera path, this many frames ahead (0: off): every
    /// 4th frame, and on every frame with a cut coming within the window, the view the
    /// path will show then is drawn into a hidden target first, so its tiles are
    /// requested through the ordinary feedback before they are on screen.
    pub prefetch: u32,
    /// Before these frames, evict everything from the VRAM pool (the host cache keeps
    /// its tiles): with a path that cuts back to a view seen before, it measures a cut
    /// served from the host cache.
    pub flush_vram_before: Vec<u32>,
    /// Disk cache and other settings for an `s3://` or `http(s)://` atlas
    /// (`RemoteOptions::default()` reads them from the environment).
    pub remote: tessera::core::format::atlas::RemoteOptions,
    /// Pace the frames like a display: each frame starts at least this long after the
    /// previous one started (`None`: as fast as the GPU goes). Streaming is measured in
    /// frames, so a fast GPU without pacing sees a network round trip as many frames.
    pub frame_interval: Option<std::time::Duration>,
    /// Render each frame again (same camera, not recorded) until everything its view
    /// wants is resident at its wanted resolution, or this long has passed, before
    /// recording it: frames that do not depend on disk or network timing, for remote
    /// captures and regression images (`None`: record every frame as rendered).
    pub wait_resident: Option<std::time::Duration>,
    /// The runtime-virtual-texture terrain: drawn through its produced virtual texture
    /// (`atlas` is then only its name); the reference is the composite evaluated per
    /// pixel. `None`: an atlas from `atlas`.
    pub terrain: Option<Arc<TerrainScene>>,
    /// Predict along the known camera path, this many frames ahead (0: off): each
    /// frame also draws the view the path shows then as a predicted view
    /// ([`crate::drawer::Drawer::draw_predicted`], half size, requests only; turns
    /// [`VtConfig::prediction`] on), whose tiles stream at the lowest priority.
    pub predict: u32,
}

/// Statistics of one captured frame (one entry of `stats.json`'s `frames`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FrameStats {
    /// Frame index.
    pub frame: u32,
    /// What streaming did before this frame (its fields read through `FrameStats`).
    #[serde(flatten)]
    pub stream: StreamFrame,
    /// Wall time of the whole frame including readback, ms.
    pub frame_ms: f64,
    /// Wall time from the start of the capture's first frame to the end of this one, ms.
    #[serde(default)]
    pub at_ms: f64,
    /// PSNR against the reference frame, dB (with `reference`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psnr_db: Option<f64>,
    /// Pixels showing the pool's never-written colour (must stay 0).
    pub unwritten_pixels: usize,
    /// Renders of this frame before the recorded one, while waiting for residency
    /// ([`CaptureConfig::wait_resident`]; 0 without it).
    #[serde(default)]
    pub settle_renders: u32,
    /// Waiting for residency ran out of time on this frame: it was recorded with
    /// tiles still missing (a pool too small for the view, tiles unavailable).
    #[serde(default)]
    pub settle_timed_out: bool,
}

impl std::ops::Deref for FrameStats {
    type Target = StreamFrame;

    fn deref(&self) -> &StreamFrame {
        &self.stream
    }
}

/// The result of a capture.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaptureReport {
    /// Adapter description.
    pub adapter: String,
    /// The atlas.
    pub atlas: PathBuf,
    /// Frame size.
    pub size: (u32, u32),
    /// Pool slots.
    pub pool_slots: u32,
    /// Pool bytes.
    pub pool_bytes: u64,
    /// Pool texel format.
    pub pool_format: String,
    /// Why the pool is not in the adapter's best format, when so (a Basis atlas on a
    /// software adapter gets an RGBA8 pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_note: Option<String>,
    /// The sampling path and why (hardware trilinear inside a slot, or the software
    /// blend of two lookups).
    #[serde(default)]
    pub sampling: String,
    /// Bytes the fully resident reference textures take (with `reference`).
    pub reference_bytes: Option<u64>,
    /// Per-frame statistics.
    pub frames: Vec<FrameStats>,
    /// Tier statistics after the last frame.
    pub final_stats: StatsSnapshot,
    /// The last frame, RGBA8 (not serialised).
    #[serde(skip)]
    pub last_frame: Vec<u8>,
    /// The last reference frame, RGBA8 (not serialised).
    #[serde(skip)]
    pub last_reference: Option<Vec<u8>>,
}

impl CaptureReport {
    /// Frames from the cut at `cut` until everything the new view wants is resident: the
    /// first frame whose decisions used feedback rendered at or after the cut and whose
    /// resident fraction is 1, minus `cut`; `None` if that never happened.
    pub fn frames_to_resident_after(&self, cut: u32) -> Option<u32> {
        let mut seen = false;
        for f in self.frames.iter().filter(|f| f.frame >= cut) {
            seen |= f.feedback_frame.is_some_and(|fb| fb >= u64::from(cut));
            if seen && f.resident_fraction >= 1.0 {
                return Some(f.frame - cut);
            }
        }
        None
    }

    /// How the run looked in motion, one line each: frames fully resident, the share of
    /// pixels shown through a coarser tile than they wanted (median, p95, max), and how
    /// many frames late feedback arrived.
    pub fn motion_lines(&self) -> [String; 3] {
        let full = self.frames.iter().filter(|f| f.resident_fraction >= 1.0).count();
        let lowest = self.frames.iter().map(|f| f.resident_fraction).fold(1.0, f64::min);
        let resident = format!(
            "fully resident (every wanted tile at its wanted mip): {full} of {} frames; lowest resident fraction {:.1}%",
            self.frames.len(),
            100.0 * lowest
        );
        [resident, self.coarse_pixels_line(), self.feedback_age_line()]
    }

    /// How blurry the flight was: the share of feedback pixels shown through a coarser
    /// tile than they wanted, over the frames that measured it.
    fn coarse_pixels_line(&self) -> String {
        let mut shares: Vec<f64> = self.frames.iter().filter_map(|f| f.coarse_pixel_share).collect();
        if shares.is_empty() {
            return "pixels shown coarser than wanted: not measured (feedback through the storage bitset)"
                .into();
        }
        shares.sort_by(f64::total_cmp);
        let at = |q: f64| shares[((shares.len() - 1) as f64 * q).round() as usize] * 100.0;
        format!(
            "pixels shown coarser than wanted (one per feedback block, by the frame that drew them): \
             median {:.2}%, p95 {:.2}%, max {:.2}% over {} frames; {} frames at 0%",
            at(0.5),
            at(0.95),
            at(1.0),
            shares.len(),
            shares.iter().filter(|&&s| s == 0.0).count()
        )
    }

    /// How late feedback arrives: frames between drawing it and deciding from it.
    fn feedback_age_line(&self) -> String {
        let mut ages: Vec<u64> = self.frames.iter().filter_map(|f| f.feedback_age).collect();
        if ages.is_empty() {
            return "feedback: none arrived".into();
        }
        ages.sort_unstable();
        let at = |q: f64| ages[((ages.len() - 1) as f64 * q).round() as usize];
        format!(
            "feedback read back {} frame(s) after it was drawn (median; p95 {}, max {}) in {} of {} frames",
            at(0.5),
            at(0.95),
            at(1.0),
            ages.len(),
            self.frames.len()
        )
    }

    /// The pool's format, size and sampling path, and why the format is not the
    /// adapter's best when so: a header line for reports.
    pub fn pool_line(&self) -> String {
        let note = self.pool_note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
        format!(
            "pool: {} slots of {}, {:.1} MiB{note}; {}",
            self.pool_slots,
            self.pool_format,
            self.pool_bytes as f64 / f64::from(1u32 << 20),
            self.sampling
        )
    }

    /// A one-line summary ending with the last frame's PSNR when there is one.
    pub fn summary(&self) -> String {
        let last = self.frames.last();
        let uploads: usize = self.frames.iter().map(|f| f.uploads).sum();
        let psnr = last
            .and_then(|f| f.psnr_db)
            .map(|p| {
                if p.is_finite() {
                    format!(", last frame PSNR {p:.2} dB")
                } else {
                    ", last frame identical to reference".into()
                }
            })
            .unwrap_or_default();
        format!(
            "{} frames at {}x{}: {} uploads, {} tiles in VRAM, {} in host cache, {} needed, {:.1}% resident{}",
            self.frames.len(),
            self.size.0,
            self.size.1,
            uploads,
            last.map_or(0, |f| f.resident_vram),
            last.map_or(0, |f| f.resident_host),
            last.map_or(0, |f| f.tiles_needed),
            100.0 * last.map_or(1.0, |f| f.resident_fraction),
            psnr
        ) + &last.and_then(|f| f.network).map(|n| network_summary(&n)).unwrap_or_default()
    }
}

/// The network and disk-cache line of a remote atlas' summary.
fn network_summary(n: &tessera::core::format::atlas::NetworkStats) -> String {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let disk = n.disk_cache.map_or_else(
        || "no disk cache".to_owned(),
        |d| {
            format!(
                "disk cache {} hits ({:.1} MiB), {} written, {:.1} MiB held",
                d.hits,
                mib(d.hit_bytes),
                d.writes,
                mib(d.bytes)
            )
        },
    );
    format!(
        "\nnetwork{}: {} requests for {} blobs ({:.1} blobs/request), {:.1} MiB ({:.0}% of it blobs), {} failed, {} cancelled, latency p50 {:.1} ms, p95 {:.1} ms; {disk}",
        if n.offline { " (offline: opened from the disk cache)" } else { "" },
        n.requests,
        n.blobs,
        n.blobs as f64 / n.requests.max(1) as f64,
        mib(n.bytes),
        100.0 * n.blob_bytes as f64 / n.bytes.max(1) as f64,
        n.failures,
        n.cancelled,
        n.latency_p50_ms,
        n.latency_p95_ms
    )
}

/// The reference atlas must have the streamed atlas' layers, each of the same size.
fn check_same_layers(atlas: &Atlas, other: &Atlas) -> Result<(), RenderError> {
    if other.layers().len() < atlas.layers().len() {
        return Err(RenderError::Config(format!(
            "reference atlas {} has {} layers, the streamed atlas {}",
            other.path().display(),
            other.layers().len(),
            atlas.layers().len()
        )));
    }
    for (a, b) in atlas.layers().iter().zip(other.layers()) {
        let (a, b) = (&a.layout, &b.layout);
        if (a.width(), a.height()) != (b.width(), b.height()) {
            return Err(RenderError::Config(format!(
                "reference atlas {} is {}x{}, the streamed atlas is {}x{}",
                other.path().display(),
                b.width(),
                b.height(),
                a.width(),
                a.height()
            )));
        }
    }
    Ok(())
}

/// Writes RGBA8 pixels as a PNG.
pub fn write_png(path: &Path, size: (u32, u32), rgba: &[u8]) -> Result<(), RenderError> {
    image::save_buffer(path, rgba, size.0, size.1, image::ExtendedColorType::Rgba8)
        .map_err(|e| RenderError::Io { path: path.to_path_buf(), source: std::io::Error::other(e) })
}

/// Runs a capture.
pub fn capture(ctx: &GpuContext, cfg: &CaptureConfig) -> Result<CaptureReport, RenderError> {
    let (w, h) = cfg.size;
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        return Err(RenderError::Config(format!("frame size {w}x{h} is out of range (1..=16384)")));
    }
    if let Some(out) = &cfg.out {
        std::fs::create_dir_all(out).map_err(|source| RenderError::Io { path: out.clone(), source })?;
    }
    let vt_config = VtConfig { prediction: cfg.vt.prediction || cfg.predict > 0, ..cfg.vt.clone() };
    let (mut vt, mut scene) =
        open_drawn(ctx, vt_config, cfg.terrain.as_deref(), cfg.scene.as_deref(), || {
            Ok(Atlas::open_with(&cfg.atlas, &cfg.remote)?)
        })?;
    let atlas = vt.atlas().clone();
    if cfg.reference {
        match &cfg.reference_atlas {
            Some(path) => {
                let other = Atlas::open(path)?;
                check_same_layers(&atlas, &other)?;
                scene.enable_reference(ctx, &other, cfg.vt.max_anisotropy, &[])?;
            }
            None => scene.enable_reference(ctx, &atlas, cfg.vt.max_anisotropy, &vt.pool_targets())?,
        }
    }
    let target = OffscreenTarget::new(&ctx.device, w, h);
    let ref_target = cfg.reference.then(|| OffscreenTarget::new(&ctx.device, w, h));
    let prefetch_target = (cfg.prefetch > 0).then(|| OffscreenTarget::new(&ctx.device, w, h));
    let aspect = w as f32 / h as f32;
    let mut frames = Vec::with_capacity(cfg.frames as usize);
    let mut last_frame = Vec::new();
    let mut last_reference = None;
    let started = Instant::now();
    for frame in 0..cfg.frames {
        let t0 = Instant::now();
        if cfg.flush_vram_before.contains(&frame) {
            vt.flush_vram();
        }
        let prefetch = prefetch_target.as_ref().and_then(|t| {
            let ahead = frame + cfg.prefetch;
            let cut_soon = cfg
                .camera
                .keyframes
                .iter()
                .any(|k| k.cut && k.frame > frame as f32 && k.frame <= ahead as f32);
            (cut_soon || frame % 4 == 0).then(|| (t, cfg.camera.camera_at(ahead)))
        });
        let settle_until = cfg.wait_resident.map(|d| Instant::now() + d);
        let (mut settle_renders, mut settle_timed_out, mut first_number) = (0u32, false, None);
        let (stream, pixels) = loop {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let vt_frame = vt.begin(ctx, &mut encoder);
            let number = *first_number.get_or_insert(vt_frame.number());
            if let Some((t, camera)) = prefetch.as_ref().filter(|_| settle_renders == 0) {
                // Its own submission: the camera uniform is rewritten for the visible
                // view below. Its feedback goes into this frame's bitset.
                scene.set_camera(&ctx.queue, camera, aspect);
                scene.draw_vt(&mut encoder, &t.color_view, &t.depth_view, vt_frame.vt(), None);
                // Before the visible view's pass overwrites the feedback target.
                vt_frame.resolve_feedback(&mut encoder);
                ctx.queue.submit([encoder.finish()]);
                encoder = ctx.device.create_command_encoder(&Default::default());
            }
            if cfg.predict > 0 {
                // A uniform of its own: no submission needed before the visible view.
                scene.set_predicted_camera(&ctx.queue, &cfg.camera.camera_at(frame + cfg.predict), aspect);
                scene.draw_predicted(&mut encoder, vt_frame.vt(), (w.div_ceil(2), h.div_ceil(2)));
            }
            scene.set_camera(&ctx.queue, &cfg.camera.camera_at(frame), aspect);
            scene.draw_vt(&mut encoder, &target.color_view, &target.depth_view, vt_frame.vt(), None);
            target.copy_out(&mut encoder);
            let stream = vt_frame.finish(ctx, encoder)?;
            let pixels = target.read(ctx)?;
            let Some(until) = settle_until else { break (stream, pixels) };
            // Settled once feedback of this very view has come back and everything it
            // wants is resident (feedback of earlier views says nothing about this one).
            let own_feedback = stream.feedback_frame.is_some_and(|f| f >= number);
            if own_feedback && stream.resident_fraction >= 1.0 {
                break (stream, pixels);
            }
            if Instant::now() >= until {
                settle_timed_out = true;
                break (stream, pixels);
            }
            settle_renders += 1;
            // Loader threads and uploads move on between renders; no need to spin.
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        let reference = match &ref_target {
            Some(rt) => {
                let mut encoder = ctx.device.create_command_encoder(&Default::default());
                scene.draw_reference(&mut encoder, &rt.color_view, &rt.depth_view, None);
                rt.copy_out(&mut encoder);
                ctx.queue.submit([encoder.finish()]);
                Some(rt.read(ctx)?)
            }
            None => None,
        };
        let psnr_db = reference.as_ref().map(|r| compare(&pixels, r).psnr_db);
        let last = frame + 1 == cfg.frames;
        if let Some(out) = &cfg.out
            && (last || (cfg.every > 0 && frame % cfg.every == 0))
        {
            write_png(&out.join(format!("frame_{frame:04}.png")), cfg.size, &pixels)?;
            if let Some(r) = &reference {
                write_png(&out.join(format!("reference_{frame:04}.png")), cfg.size, r)?;
            }
        }
        frames.push(FrameStats {
            frame,
            stream,
            frame_ms: t0.elapsed().as_secs_f64() * 1e3,
            at_ms: started.elapsed().as_secs_f64() * 1e3,
            psnr_db,
            unwritten_pixels: count_colour(&pixels, UNWRITTEN, 2),
            settle_renders,
            settle_timed_out,
        });
        if let Some(rest) = cfg.frame_interval.and_then(|i| i.checked_sub(t0.elapsed())) {
            std::thread::sleep(rest);
        }
        if last {
            last_frame = pixels;
            last_reference = reference;
        }
    }
    let report = CaptureReport {
        adapter: ctx.describe(),
        atlas: tessera::core::format::atlas::display_location(&cfg.atlas),
        size: cfg.size,
        pool_slots: vt.pool().slot_count(),
        pool_bytes: vt.pools().iter().map(|p| p.bytes()).sum(),
        pool_format: vt.pool().target().name().to_string(),
        pool_note: vt.pool_format_note().map(str::to_owned),
        sampling: vt.trilinear().1.to_owned(),
        reference_bytes: scene.reference_bytes(),
        frames,
        final_stats: vt.stats(),
        last_frame,
        last_reference,
    };
    if let Some(out) = &cfg.out {
        let path = out.join("stats.json");
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| RenderError::Io { path: path.clone(), source: std::io::Error::other(e) })?;
        std::fs::write(&path, json).map_err(|source| RenderError::Io { path, source })?;
    }
    Ok(report)
}
