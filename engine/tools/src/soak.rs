//! A soak through the whole renderer: many frames of random camera cuts over one atlas,
//! drawn headless through the virtual textures with a small pool, sampling memory, pool
//! occupancy, the loader queue and the host cache as it goes. A leak, a queue that
//! grows or a pool that overfills shows as a rising series; texels the pool never wrote
//! showing on screen end the run with an error. Used by `tessera soak` and the tests.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use glam::Vec3;
use serde::Serialize;
use tessera::core::Atlas;
use tessera::core::compare::count_colour;
use tessera::core::scene::camera::CameraPath;
use tessera::core::scene::material_scene::MaterialScene;
use tessera::core::stream::simulate::{percentile, rss_bytes};

use crate::drawer_for;
use crate::scene::OffscreenTarget;
use tessera::GpuContext;
use tessera::RenderError;
use tessera::UNWRITTEN;
use tessera::{VirtualTextures, VtConfig};

/// What to soak.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// The atlas to stream from.
    pub atlas: PathBuf,
    /// A material scene baked into `atlas` (`None`: the built-in meshes).
    pub scene: Option<Arc<MaterialScene>>,
    /// Frames to render.
    pub frames: u64,
    /// A camera cut to a new random view every this many frames.
    pub cut_every: u32,
    /// Seed of the random views.
    pub seed: u64,
    /// Frame size in pixels.
    pub size: (u32, u32),
    /// A point of the series every this many frames.
    pub sample_every: u64,
    /// Read the frame back and count never-written texels every this many frames (0:
    /// only at samples).
    pub check_every: u64,
    /// Virtual-texture settings (a small pool makes the soak meaningful).
    pub vt: VtConfig,
}

/// One point of a soak series.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SoakPoint {
    /// The frame sampled (frames counted from 1).
    pub frame: u64,
    /// Resident set size of the process, MiB (0 where it cannot be read).
    pub rss_mib: f64,
    /// Tiles in the VRAM pool(s).
    pub pool_resident: usize,
    /// Slots of the pool.
    pub pool_slots: u32,
    /// Requests with the loader threads (queued and being loaded).
    pub loader_queue: usize,
    /// Loaded tiles waiting for a slot.
    pub ready: usize,
    /// Bytes in the host cache, MiB.
    pub host_mib: f64,
    /// GPU memory the wgpu allocator holds, MiB, where the backend reports it.
    pub gpu_allocated_mib: Option<f64>,
    /// Uploads since the previous point.
    pub uploads: u64,
    /// Evictions since the previous point.
    pub evictions: u64,
    /// Median frame time since the previous point (CPU, submit and the checks), ms.
    pub median_frame_ms: f64,
    /// Frames read back since the previous point.
    pub checked_frames: u64,
}

/// The result of a soak.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    /// Adapter description.
    pub adapter: String,
    /// The atlas.
    pub atlas: PathBuf,
    /// Virtual size of the atlas's first layer.
    pub virtual_size: (u32, u32),
    /// Frames rendered.
    pub frames: u64,
    /// Camera cuts made.
    pub cuts: u64,
    /// Wall time of the whole run, s.
    pub seconds: f64,
    /// The series.
    pub points: Vec<SoakPoint>,
}

impl SoakReport {
    /// The largest rise of `f` over the series after its first quarter (the warm-up,
    /// while caches fill), relative to the value at the end of that quarter.
    pub fn rise_after_warmup(&self, f: impl Fn(&SoakPoint) -> f64) -> f64 {
        let start = self.points.len() / 4;
        let Some(base) = self.points.get(start).map(&f) else { return 0.0 };
        let peak = self.points[start..].iter().map(&f).fold(base, f64::max);
        peak - base
    }
}

/// Runs a soak; `on_point` sees each point as it is taken (for progress output).
pub fn soak(
    ctx: &GpuContext,
    cfg: &SoakConfig,
    mut on_point: impl FnMut(&SoakPoint),
) -> Result<SoakReport, RenderError> {
    let (w, h) = cfg.size;
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        return Err(RenderError::Config(format!("frame size {w}x{h} is out of range (1..=16384)")));
    }
    let atlas = Arc::new(Atlas::open(&cfg.atlas)?);
    let mut vt = VirtualTextures::new(ctx, atlas.clone(), cfg.vt.clone())?;
    let scene = drawer_for(ctx, &vt, cfg.scene.as_deref())?;
    let target = OffscreenTarget::new(&ctx.device, w, h);
    let (min, max) = match &cfg.scene {
        Some(s) => (s.bounds_min, s.bounds_max),
        // The built-in ground plane.
        None => (Vec3::new(-1.0, 0.0, -0.5), Vec3::new(1.0, 0.0, 0.5)),
    };
    let every = cfg.cut_every.max(1);
    let cuts = u32::try_from(cfg.frames.div_ceil(u64::from(every)))
        .map_err(|_| RenderError::Config(format!("{} frames is too many for a soak", cfg.frames)))?;
    let path = CameraPath::random_cuts(cfg.seed, cuts.max(1), every, min, max);
    let aspect = w as f32 / h as f32;
    let sample_every = cfg.sample_every.max(1);
    let slots = vt.pool().slot_count();
    let started = Instant::now();
    let mut points = Vec::new();
    let (mut times, mut uploads, mut evictions, mut checked) = (Vec::new(), 0u64, 0u64, 0u64);
    for frame in 1..=cfg.frames {
        let t0 = Instant::now();
        let check = frame % sample_every == 0 || (cfg.check_every > 0 && frame % cfg.check_every == 0);
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let vt_frame = vt.begin(ctx, &mut encoder);
        // The path's frame 0 is the first view; `frame` counts from 1.
        scene.set_camera(&ctx.queue, &path.camera_at((frame - 1) as u32), aspect);
        scene.draw_vt(&mut encoder, &target.color_view, &target.depth_view, vt_frame.vt(), None);
        if check {
            target.copy_out(&mut encoder);
        }
        let stream = vt_frame.finish(ctx, encoder)?;
        uploads += stream.uploads as u64;
        evictions += stream.evictions as u64;
        if check {
            let pixels = target.read(ctx)?;
            let unwritten = count_colour(&pixels, UNWRITTEN, 2);
            if unwritten > 0 {
                return Err(RenderError::Config(format!(
                    "soak frame {frame}: {unwritten} pixels show texels the pool never wrote"
                )));
            }
            checked += 1;
        } else {
            // Keep the CPU at most a frame ahead, as a presenting application would be.
            ctx.wait_idle()?;
        }
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        if frame % sample_every == 0 || frame == cfg.frames {
            let streamer = vt.streamer();
            let residency = streamer.residency();
            let point = SoakPoint {
                frame,
                rss_mib: rss_bytes() as f64 / (1 << 20) as f64,
                pool_resident: residency.resident_count(),
                pool_slots: slots,
                loader_queue: streamer.loader().pending() + streamer.loader().in_flight(),
                ready: residency.ready_count(),
                host_mib: streamer.host_cache().bytes() as f64 / (1 << 20) as f64,
                gpu_allocated_mib: ctx
                    .device
                    .generate_allocator_report()
                    .map(|r| r.total_allocated_bytes as f64 / (1 << 20) as f64),
                uploads: std::mem::take(&mut uploads),
                evictions: std::mem::take(&mut evictions),
                median_frame_ms: percentile(&mut times, 0.5),
                checked_frames: std::mem::take(&mut checked),
            };
            times.clear();
            on_point(&point);
            points.push(point);
        }
    }
    Ok(SoakReport {
        adapter: ctx.describe(),
        atlas: tessera::core::format::atlas::display_location(&cfg.atlas),
        virtual_size: atlas.layers().first().map_or((0, 0), |l| (l.layout.width(), l.layout.height())),
        frames: cfg.frames,
        cuts: u64::from(cuts.saturating_sub(1)),
        seconds: started.elapsed().as_secs_f64(),
        points,
    })
}
