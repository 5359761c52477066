//! Benchmark of virtual texturing against the fully resident reference: the same scene and camera
//! path rendered both ways, frame by frame, with GPU pass times, wall times, feedback and upload costs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tessera_core::Atlas;
use tessera_core::scene::camera::{Camera, CameraPath};

use tessera::GpuContext;
use tessera::RenderError;
use tessera::params::ShaderProbe;
use tessera::{StreamFrame, VirtualTextures, VtConfig};
use tessera_core::scene::material_scene::MaterialScene;
use tessera_tools::drawer::Drawer;
use tessera_tools::open_drawn;
use tessera_tools::scene::OffscreenTarget;

/// Feedback stride of the sparse-feedback probe: one pixel in 8×8 writes feedback, the fewest the
/// shaders allow, so the difference to the configured stride is the cost of the feedback writes.
pub(crate) const PROBE_FEEDBACK_STRIDE: u32 = 8;

/// What to benchmark.
#[derive(Clone, Debug)]
pub(crate) struct BenchConfig {
    /// The atlas to stream from (and to build the reference textures from).
    pub atlas: PathBuf,
    /// Camera path; frame `i` of the measurement shows its camera at frame `i`.
    pub camera: CameraPath,
    /// Measured frames.
    pub frames: u32,
    /// Warm-up frames before the measurement, on the path's first camera, so streaming converges;
    /// they are rendered in every mode but excluded from the statistics.
    pub warmup: u32,
    /// Frame size in pixels.
    pub size: (u32, u32),
    /// Virtual-texture settings.
    pub vt: VtConfig,
    /// Also render a third variant each frame: virtual texturing with
    /// [`PROBE_FEEDBACK_STRIDE`], to estimate what the feedback writes cost in the scene pass.
    /// Skipped when the configured stride already is that.
    pub feedback_probe: bool,
    /// A material scene baked into `atlas` (manifest beside it); `None`: the built-in scene.
    pub scene: Option<Arc<MaterialScene>>,
    /// The runtime-virtual-texture terrain (then `atlas` is only its name), its
    /// reference the composite evaluated per pixel.
    pub terrain: Option<Arc<tessera::core::scene::terrain::TerrainScene>>,
    /// Every this many measured frames, evict everything from the VRAM pool (the host
    /// cache keeps its tiles) so the next frames upload in bursts: measures how many
    /// uploads a frame sustains and what they cost (0: never).
    pub flush_every: u32,
    /// A cost probe on the virtual-texture pass (see [`ShaderProbe`]).
    pub shader_probe: ShaderProbe,
}

/// Median, 95th percentile, maximum and mean of one measure over the measured frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Stat {
    /// Median.
    pub median: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Number of samples.
    pub samples: usize,
}

impl Stat {
    /// Statistics of `values` (`None` when empty). NaNs sort last.
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let rank = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Self {
            median: if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) },
            p95: rank(0.95),
            max: v[n - 1],
            mean: v.iter().sum::<f64>() / n as f64,
            samples: n,
        })
    }
}

/// The timings of one rendering mode (virtual texturing, reference, sparse-feedback probe).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ModeStats {
    /// GPU time of the scene render pass from timestamp queries, ms (`None` without `TIMESTAMP_QUERY`).
    pub gpu_pass_ms: Option<Stat>,
    /// Wall time from `queue.submit` until the device is idle again, ms: the GPU work of the
    /// frame including queued uploads and copies, as the CPU sees it.
    pub wall_ms: Stat,
    /// CPU time before the submit, ms: `prepare` (streaming) plus command encoding.
    pub cpu_ms: Stat,
    /// The whole frame, `cpu_ms` plus `wall_ms` (frames do not overlap), ms.
    pub frame_ms: Stat,
}

/// Virtual texturing divided by the reference, of the medians.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Ratios {
    /// Of the GPU scene pass (with timestamp queries).
    pub gpu_pass: Option<f64>,
    /// Of the submit-to-idle wall time.
    pub wall: f64,
    /// Of the whole frame (CPU before submit plus wall).
    pub frame: f64,
}

/// What feedback costs.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct FeedbackStats {
    /// CPU time to collect the readback, decode it and decide (`StreamFrame::feedback_ms`), ms.
    pub cpu_ms: Stat,
    /// GPU time of clearing the feedback bitset plus copying it to the readback ring, ms
    /// (`None` without `TIMESTAMP_QUERY_INSIDE_ENCODERS`).
    pub gpu_clear_copy_ms: Option<Stat>,
    /// Bytes of feedback read back per frame.
    pub readback_bytes: u64,
    /// The configured feedback stride (one pixel in `stride × stride` writes feedback).
    pub stride: u32,
    /// Median GPU pass with the configured stride minus the median with
    /// [`PROBE_FEEDBACK_STRIDE`], ms: the cost of the feedback writes beyond the sparsest
    /// setting (`None` without the probe or timestamps; can be slightly negative from noise).
    pub shader_writes_ms: Option<f64>,
}

/// Tile uploads.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct UploadStats {
    /// CPU time to issue uploads and page-table writes (`StreamFrame::upload_ms`), ms.
    pub cpu_ms: Stat,
    /// Tiles uploaded per measured frame.
    pub per_frame: Stat,
    /// Tiles uploaded over the measured frames.
    pub total: u64,
    /// Copy commands those uploads took, all pools together.
    pub copies: u64,
    /// Of those, tiles copied from staging memory a loader thread wrote
    /// (`--staging-mib`); the render thread copied the rest into staging itself.
    pub staged: u64,
    /// Tiles uploaded during warm-up (not counting the pinned coarsest tiles uploaded at setup).
    pub warmup_total: u64,
    /// Tiles resident in the pool after the last frame.
    pub resident_at_end: usize,
    /// Frames that uploaded at least [`BURST_TILES`] tiles against idle frames (none
    /// when no frame did, or none was idle).
    pub burst: Option<BurstStats>,
    /// Complete page table: entries its update pass rewrote per measured frame.
    pub table_entries: Stat,
    /// Complete page table: rectangles (jobs) of the update pass per measured frame.
    pub table_jobs: Stat,
    /// Complete page table: GPU time of the update pass, ms, over the frames that ran
    /// one (none without `TIMESTAMP_QUERY` or without any update).
    pub table_gpu_ms: Option<Stat>,
    /// Span of the tile uploads (copies, level 1) between timestamps submitted before
    /// and after them, ms, over the frames that uploaded (none without
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS`): GPU time, and the CPU's recording between the
    /// submissions too while the GPU idles, as it does here between frames.
    pub gpu_ms: Option<Stat>,
}

/// One measured frame.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct BenchFrame {
    /// Frame index on the camera path.
    pub frame: u32,
    /// Virtual texturing: GPU scene pass, ms.
    pub vt_gpu_pass_ms: Option<f64>,
    /// Virtual texturing: submit to idle, ms.
    pub vt_wall_ms: f64,
    /// Virtual texturing: CPU before submit, ms.
    pub vt_cpu_ms: f64,
    /// Virtual texturing: GPU clear + copy of the feedback bitset, ms.
    pub vt_feedback_gpu_ms: Option<f64>,
    /// Virtual texturing: the complete page table's update pass, ms (frames that ran one).
    pub vt_table_update_gpu_ms: Option<f64>,
    /// The pool was flushed before this frame (`--flush-every`).
    pub flushed: bool,
    /// From a flush on until the first frame that uploaded nothing: part of a burst.
    pub after_flush: bool,
    /// Reference: GPU scene pass, ms.
    pub reference_gpu_pass_ms: Option<f64>,
    /// Reference: submit to idle, ms.
    pub reference_wall_ms: f64,
    /// Reference: CPU before submit, ms.
    pub reference_cpu_ms: f64,
    /// Sparse-feedback probe: GPU scene pass, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_gpu_pass_ms: Option<f64>,
    /// Sparse-feedback probe: submit to idle, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_wall_ms: Option<f64>,
    /// Sparse-feedback probe: CPU before submit, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_cpu_ms: Option<f64>,
    /// The virtual-texturing pass again with no feedback at all (with the probe): GPU
    /// scene pass, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_feedback_gpu_pass_ms: Option<f64>,
    /// The pass without feedback: submit to idle, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_feedback_wall_ms: Option<f64>,
    /// The pass without feedback: CPU before submit, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_feedback_cpu_ms: Option<f64>,
    /// Virtual texturing: span of the frame's tile uploads (copies and level 1), ms
    /// (frames that uploaded, with `TIMESTAMP_QUERY_INSIDE_ENCODERS`; see
    /// [`UploadStats::gpu_ms`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vt_upload_gpu_ms: Option<f64>,
    /// What streaming did in the virtual-texturing frame.
    pub stream: StreamFrame,
}

/// The result of [`run`]; serialises to the JSON `tessera bench` writes.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BenchReport {
    /// Adapter description ([`GpuContext::describe`]).
    pub adapter: String,
    /// The atlas.
    pub atlas: PathBuf,
    /// Frame size.
    pub size: (u32, u32),
    /// Virtual size of each atlas layer.
    pub virtual_sizes: Vec<(u32, u32)>,
    /// The sampling path and why ([`VirtualTextures::trilinear`]).
    pub sampling: String,
    /// The pool's format, and why it is not the adapter's best when so
    /// ([`VirtualTextures::pool_format_note`]).
    pub pool_format: String,
    /// The cost probe the virtual-texture pass ran with.
    pub shader_probe: ShaderProbe,
    /// Whether the built-in drawers forced early depth tests in the VT pass.
    pub early_depth: bool,
    /// Whether the built-in drawers wrote feedback to a colour target (else the
    /// storage bitset).
    pub feedback_target: bool,
    /// Where the page table lived on the GPU.
    pub page_table: tessera::PageTableStorage,
    /// GPU tile pool size (all pools of a stack), MiB.
    pub pool_mib: f64,
    /// GPU size of the fully resident reference textures, MiB.
    pub reference_mib: Option<f64>,
    /// Why there is no fully resident reference (too large for the adapter), if so.
    pub reference_unavailable: Option<String>,
    /// Measured frames.
    pub frames: u32,
    /// Warm-up frames (excluded).
    pub warmup: u32,
    /// Whether the adapter has `TIMESTAMP_QUERY` (GPU pass times).
    pub timestamp_query: bool,
    /// Whether the adapter has `TIMESTAMP_QUERY_INSIDE_ENCODERS` (GPU feedback clear + copy time).
    pub timestamp_query_inside_encoders: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f32,
    /// Virtual texturing.
    pub vt: ModeStats,
    /// The fully resident reference.
    pub reference: ModeStats,
    /// Virtual texturing with [`PROBE_FEEDBACK_STRIDE`] (when probed).
    pub feedback_probe: Option<ModeStats>,
    /// The virtual-texturing pass drawn again after each frame, on the same residency,
    /// with no feedback at all (when probed): the floor of the design.
    pub no_feedback: Option<ModeStats>,
    /// The pass without feedback / reference, of the GPU pass medians.
    pub no_feedback_ratio: Option<f64>,
    /// Virtual texturing / reference.
    pub ratio: Ratios,
    /// Feedback costs.
    pub feedback: FeedbackStats,
    /// Uploads.
    pub uploads: UploadStats,
    /// Tiles drawn on the GPU (a produced atlas: the runtime-virtual-texture terrain).
    pub production: Option<ProductionBench>,
    /// Every measured frame.
    pub per_frame: Vec<BenchFrame>,
}

mod production;
mod timer;
pub(crate) use production::ProductionBench;
use timer::*;

/// Wall-clock times of one frame of one mode.
#[derive(Clone, Copy, Default)]
struct Times {
    cpu_ms: f64,
    wall_ms: f64,
}

/// Submits `encoder` and waits until the device is idle; `started` is when the frame's CPU work began.
fn submit_and_wait(
    ctx: &GpuContext,
    encoder: wgpu::CommandEncoder,
    started: Instant,
) -> Result<Times, RenderError> {
    let commands = encoder.finish();
    let submitted = Instant::now();
    ctx.queue.submit([commands]);
    ctx.wait_idle()?;
    let done = Instant::now();
    Ok(Times {
        cpu_ms: (submitted - started).as_secs_f64() * 1e3,
        wall_ms: (done - submitted).as_secs_f64() * 1e3,
    })
}

/// Everything the frames of one virtual-texturing variant need.
struct VtMode {
    vt: VirtualTextures,
    scene: Box<dyn Drawer>,
}

impl VtMode {
    /// One virtual-texturing frame: `begin`, encode, `finish` (submits), wait.
    fn frame(
        &mut self,
        ctx: &GpuContext,
        target: &OffscreenTarget,
        camera: &Camera,
        timer: Option<(&Timer, u32, bool)>,
    ) -> Result<(StreamFrame, Times), RenderError> {
        let started = Instant::now();
        let (w, h) = target.size;
        self.scene.set_camera(&ctx.queue, camera, w as f32 / h as f32);
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera bench vt") });
        // Only the main variant brackets the feedback clear and copy.
        let marks = timer.filter(|t| t.2).map(|t| t.0);
        if let Some(t) = marks {
            t.mark(&mut encoder, Q_CLEAR);
        }
        let mut frame = self.vt.begin(ctx, &mut encoder);
        if let Some(t) = marks {
            t.mark(&mut encoder, Q_CLEAR + 1);
        }
        let writes = timer.map(|(t, first, _)| t.pass(first));
        self.scene.draw_vt(&mut encoder, &target.color_view, &target.depth_view, frame.vt(), writes);
        if let Some(t) = marks {
            t.mark(&mut encoder, Q_COPY);
        }
        frame.record_readback(&mut encoder);
        if let Some(t) = marks {
            t.mark(&mut encoder, Q_COPY + 1);
        }
        let submitted = Instant::now();
        let stream = frame.finish(ctx, encoder)?;
        ctx.wait_idle()?;
        let done = Instant::now();
        let times = Times {
            cpu_ms: (submitted - started).as_secs_f64() * 1e3,
            wall_ms: (done - submitted).as_secs_f64() * 1e3,
        };
        Ok((stream, times))
    }
}

impl VtMode {
    /// The last frame's pass drawn again on the same residency with feedback off
    /// (the floor: sampling alone), timed as [`Q_FLOOR`].
    fn no_feedback_frame(
        &self,
        ctx: &GpuContext,
        target: &OffscreenTarget,
        camera: &Camera,
        timer: Option<&Timer>,
    ) -> Result<Times, RenderError> {
        let started = Instant::now();
        let (w, h) = target.size;
        self.scene.set_camera(&ctx.queue, camera, w as f32 / h as f32);
        self.vt.suppress_feedback_until_next_frame(&ctx.queue);
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("tessera bench vt without feedback"),
        });
        let writes = timer.map(|t| t.pass(Q_FLOOR));
        self.scene.draw_vt(&mut encoder, &target.color_view, &target.depth_view, &self.vt, writes);
        submit_and_wait(ctx, encoder, started)
    }

    /// One frame of the fully resident reference, drawn by the same scene.
    fn reference_frame(
        &self,
        ctx: &GpuContext,
        target: &OffscreenTarget,
        camera: &Camera,
        timer: Option<&Timer>,
    ) -> Result<Times, RenderError> {
        let started = Instant::now();
        let (w, h) = target.size;
        self.scene.set_camera(&ctx.queue, camera, w as f32 / h as f32);
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("tessera bench reference"),
        });
        let writes = timer.map(|t| t.pass(Q_REF));
        self.scene.draw_reference(&mut encoder, &target.color_view, &target.depth_view, writes);
        submit_and_wait(ctx, encoder, started)
    }
}

fn mode_stats(
    frames: &[BenchFrame],
    gpu: impl Fn(&BenchFrame) -> Option<f64>,
    wall: impl Fn(&BenchFrame) -> f64,
    cpu: impl Fn(&BenchFrame) -> f64,
) -> ModeStats {
    ModeStats {
        gpu_pass_ms: Stat::of(frames.iter().filter_map(&gpu)),
        wall_ms: Stat::of(frames.iter().map(&wall)).unwrap_or_default(),
        cpu_ms: Stat::of(frames.iter().map(&cpu)).unwrap_or_default(),
        frame_ms: Stat::of(frames.iter().map(|f| cpu(f) + wall(f))).unwrap_or_default(),
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Frame cost of upload bursts against frames that uploaded nothing. With
/// `--flush-every`, a burst is every frame that uploads from a flush on until the
/// first frame that uploads nothing (a burst sliced over frames counts whole);
/// without, the frames that uploaded at least [`BURST_TILES`] tiles.
fn burst_stats(frames: &[BenchFrame], flushed: bool) -> Option<BurstStats> {
    let cost = |f: &BenchFrame| f.vt_cpu_ms + f.vt_wall_ms;
    // Tiles written this frame: uploaded, or drawn by a producer.
    let written = |f: &BenchFrame| f.stream.uploads + f.stream.produced + f.stream.refreshed;
    let in_burst = |f: &BenchFrame| match flushed {
        true => f.after_flush && written(f) > 0,
        false => written(f) >= BURST_TILES,
    };
    let busy: Vec<&BenchFrame> = frames.iter().filter(|f| in_burst(f)).collect();
    let idle = Stat::of(frames.iter().filter(|f| written(f) == 0 && !f.after_flush).map(cost))?;
    let busy_ms = Stat::of(busy.iter().map(|f| cost(f)))?;
    Some(BurstStats {
        frames: busy.len(),
        uploads: Stat::of(busy.iter().map(|f| f.stream.uploads as f64)).unwrap_or_default(),
        frame_ms: busy_ms,
        idle_frame_ms: idle,
        upload_cpu_ms: Stat::of(busy.iter().map(|f| f.stream.upload_ms)).unwrap_or_default(),
        decisions_ms: Stat::of(busy.iter().map(|f| f.stream.feedback_ms)).unwrap_or_default(),
        upload_gpu_ms: Stat::of(busy.iter().filter_map(|f| f.vt_upload_gpu_ms)),
        table_gpu_ms: Stat::of(busy.iter().filter_map(|f| f.vt_table_update_gpu_ms)),
        pass_gpu_ms: Stat::of(busy.iter().filter_map(|f| f.vt_gpu_pass_ms)),
        copies: Stat::of(busy.iter().map(|f| f.stream.upload_copies as f64)).unwrap_or_default(),
        spike_ms: busy_ms.max - idle.median,
        over_idle_ms: (busy_ms.median - idle.median, busy_ms.p95 - idle.median),
        sliced_frames: flushed.then(|| {
            let starts = frames.iter().filter(|f| f.after_flush && f.flushed).count().max(1);
            busy.len() as f64 / starts as f64
        }),
    })
}

/// Uploads a frame must sustain without a frame-time spike (DESIGN.md section 9).
pub(crate) const BURST_TILES: usize = 256;

/// See [`UploadStats::burst`].
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct BurstStats {
    /// Measured frames that uploaded at least [`BURST_TILES`] tiles.
    pub frames: usize,
    /// Their uploads.
    pub uploads: Stat,
    /// Their frame time (CPU + submit to idle), ms.
    pub frame_ms: Stat,
    /// Frame time of the frames that uploaded nothing, ms.
    pub idle_frame_ms: Stat,
    /// CPU time of their uploads and page-table writes, ms.
    pub upload_cpu_ms: Stat,
    /// CPU time of their feedback decode and streaming decisions, ms.
    pub decisions_ms: Stat,
    /// Span of their uploads (copies, level 1), ms (see [`UploadStats::gpu_ms`]).
    pub upload_gpu_ms: Option<Stat>,
    /// GPU time of their page-table update pass, ms.
    pub table_gpu_ms: Option<Stat>,
    /// GPU time of their scene pass, ms.
    pub pass_gpu_ms: Option<Stat>,
    /// Copy commands their uploads took (runs merged, [`VtConfig::merged_copies`]).
    ///
    /// [`VtConfig::merged_copies`]: tessera::VtConfig::merged_copies
    pub copies: Stat,
    /// Worst burst frame minus the median idle frame, ms.
    pub spike_ms: f64,
    /// Median and 95th percentile burst frame minus the median idle frame, ms (issue
    /// 45's target: under 1 ms each).
    pub over_idle_ms: (f64, f64),
    /// With `--flush-every`: frames a burst took, on average.
    pub sliced_frames: Option<f64>,
}

/// Runs the benchmark: sets up the scene as `capture` does (virtual textures, reference textures,
/// offscreen target; no pixel readback), then per frame renders virtual texturing and the
/// reference (and the sparse-feedback probe) one after the other on the same camera, each
/// submitted alone and waited for, so frames never overlap.
pub(crate) fn run(ctx: &GpuContext, cfg: &BenchConfig) -> Result<BenchReport, RenderError> {
    let (w, h) = cfg.size;
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        return Err(RenderError::Config(format!("frame size {w}x{h} is out of range (1..=16384)")));
    }
    if cfg.frames == 0 {
        return Err(RenderError::Config("a benchmark needs at least one measured frame".into()));
    }
    let open = |vt_cfg: VtConfig| {
        open_drawn(ctx, vt_cfg, cfg.terrain.as_deref(), cfg.scene.as_deref(), || Ok(Atlas::open(&cfg.atlas)?))
    };
    let (mut vt, mut scene) = open(cfg.vt.clone())?;
    let atlas = vt.atlas().clone();
    vt.set_shader_probe(cfg.shader_probe);
    // A texture too large for a fully resident reference (the point of a stress scene)
    // is measured alone: the report says why there is no ratio. Its texels are the
    // decoded tiles: only its speed matters here.
    let reference_unavailable = match scene.enable_reference(ctx, &atlas, cfg.vt.max_anisotropy, &[]) {
        Ok(()) => None,
        Err(RenderError::Config(why)) => {
            tracing::warn!("no fully resident reference: {why}");
            Some(why)
        }
        Err(e) => return Err(e),
    };
    let mut main = VtMode { vt, scene };
    let stride = cfg.vt.streaming.feedback_stride;
    let mut probe = if cfg.feedback_probe && stride != PROBE_FEEDBACK_STRIDE {
        let vt_cfg = VtConfig {
            streaming: tessera::StreamerConfig {
                feedback_stride: PROBE_FEEDBACK_STRIDE,
                ..cfg.vt.streaming.clone()
            },
            ..cfg.vt.clone()
        };
        let (vt, scene) = open(vt_cfg)?;
        Some(VtMode { vt, scene })
    } else {
        None
    };
    let target = OffscreenTarget::new(&ctx.device, w, h);
    let timer = Timer::new(ctx);
    if let Some(t) = &timer {
        main.vt.time_page_table_updates(Some((t.set.clone(), Q_UPDATE)));
        if t.inside_encoders {
            main.vt.time_uploads(Some((t.set.clone(), Q_UPLOAD)));
        }
    }

    let mut per_frame = Vec::with_capacity(cfg.frames as usize);
    let mut warmup_uploads = 0u64;
    // From a flush until the first frame without uploads after one with.
    let (mut bursting, mut burst_uploaded) = (false, false);
    for i in 0..cfg.warmup + cfg.frames {
        let measured = i >= cfg.warmup;
        let camera = cfg.camera.camera_at(i.saturating_sub(cfg.warmup));

        let flushed = measured && cfg.flush_every > 0 && (i - cfg.warmup).is_multiple_of(cfg.flush_every);
        if flushed {
            main.vt.flush_vram();
            (bursting, burst_uploaded) = (true, false);
        }
        let (stream, vt_t) = main.frame(ctx, &target, &camera, timer.as_ref().map(|t| (t, Q_VT, true)))?;
        let probe_t = match probe.as_mut() {
            Some(p) => Some(p.frame(ctx, &target, &camera, timer.as_ref().map(|t| (t, Q_PROBE, false)))?.1),
            None => None,
        };
        // The floor: this frame's pass again on the same residency, without feedback.
        let floor_t = match probe {
            Some(_) => Some(main.no_feedback_frame(ctx, &target, &camera, timer.as_ref())?),
            None => None,
        };
        let ref_t = if reference_unavailable.is_none() {
            main.reference_frame(ctx, &target, &camera, timer.as_ref())?
        } else {
            Times { wall_ms: f64::NAN, cpu_ms: f64::NAN }
        };

        if !measured {
            warmup_uploads += stream.uploads as u64;
            continue;
        }
        let mut f = BenchFrame {
            frame: i - cfg.warmup,
            vt_wall_ms: vt_t.wall_ms,
            vt_cpu_ms: vt_t.cpu_ms,
            reference_wall_ms: ref_t.wall_ms,
            reference_cpu_ms: ref_t.cpu_ms,
            probe_wall_ms: probe_t.map(|t| t.wall_ms),
            probe_cpu_ms: probe_t.map(|t| t.cpu_ms),
            no_feedback_wall_ms: floor_t.map(|t| t.wall_ms),
            no_feedback_cpu_ms: floor_t.map(|t| t.cpu_ms),
            stream,
            flushed,
            after_flush: bursting,
            ..BenchFrame::default()
        };
        if stream.uploads + stream.produced + stream.refreshed > 0 {
            burst_uploaded = true;
        } else if burst_uploaded {
            bursting = false;
        }
        if let Some(t) = &timer {
            let written = Written {
                probe: probe.is_some(),
                updated: stream.table_jobs > 0,
                uploaded: stream.uploads + stream.produced + stream.refreshed > 0,
            };
            let ticks = t.read(ctx, written)?;
            f.no_feedback_gpu_pass_ms = probe.as_ref().and_then(|_| t.span_ms(&ticks, Q_FLOOR));
            f.vt_upload_gpu_ms = written.uploaded.then(|| t.span_ms(&ticks, Q_UPLOAD)).flatten();
            f.vt_table_update_gpu_ms = (stream.table_jobs > 0).then(|| t.span_ms(&ticks, Q_UPDATE)).flatten();
            f.vt_gpu_pass_ms = t.span_ms(&ticks, Q_VT);
            f.reference_gpu_pass_ms = t.span_ms(&ticks, Q_REF).filter(|_| reference_unavailable.is_none());
            f.probe_gpu_pass_ms = probe.as_ref().and_then(|_| t.span_ms(&ticks, Q_PROBE));
            if t.inside_encoders {
                // The clear bracket holds `begin`, and so the update pass when one ran.
                let update = f.vt_table_update_gpu_ms.unwrap_or(0.0);
                f.vt_feedback_gpu_ms = t
                    .span_ms(&ticks, Q_CLEAR)
                    .zip(t.span_ms(&ticks, Q_COPY))
                    .map(|(a, b)| (a - update).max(0.0) + b);
            }
        }
        per_frame.push(f);
    }

    let vt_stats = mode_stats(&per_frame, |f| f.vt_gpu_pass_ms, |f| f.vt_wall_ms, |f| f.vt_cpu_ms);
    let ref_stats =
        mode_stats(&per_frame, |f| f.reference_gpu_pass_ms, |f| f.reference_wall_ms, |f| f.reference_cpu_ms);
    let probe_stats = probe.as_ref().map(|_| {
        mode_stats(
            &per_frame,
            |f| f.probe_gpu_pass_ms,
            |f| f.probe_wall_ms.unwrap_or(f64::NAN),
            |f| f.probe_cpu_ms.unwrap_or(f64::NAN),
        )
    });
    let floor_stats = probe.as_ref().map(|_| {
        mode_stats(
            &per_frame,
            |f| f.no_feedback_gpu_pass_ms,
            |f| f.no_feedback_wall_ms.unwrap_or(f64::NAN),
            |f| f.no_feedback_cpu_ms.unwrap_or(f64::NAN),
        )
    });
    let no_feedback_ratio = floor_stats
        .as_ref()
        .and_then(|f| f.gpu_pass_ms)
        .zip(ref_stats.gpu_pass_ms)
        .map(|(f, r)| ratio(f.median, r.median));
    let ratio_gpu = vt_stats.gpu_pass_ms.zip(ref_stats.gpu_pass_ms).map(|(v, r)| ratio(v.median, r.median));
    let shader_writes_ms = vt_stats
        .gpu_pass_ms
        .zip(probe_stats.as_ref().and_then(|p| p.gpu_pass_ms))
        .map(|(v, p)| v.median - p.median);
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let report = BenchReport {
        adapter: ctx.describe(),
        atlas: tessera_core::format::atlas::display_location(&cfg.atlas),
        size: cfg.size,
        virtual_sizes: atlas.layers().iter().map(|l| (l.layout.width(), l.layout.height())).collect(),
        sampling: main.vt.trilinear().1.to_string(),
        pool_format: match main.vt.pool_format_note() {
            Some(note) => format!("{} ({note})", main.vt.pool().target().name()),
            None => main.vt.pool().target().name().to_owned(),
        },
        shader_probe: cfg.shader_probe,
        early_depth: main.vt.early_depth_on(&ctx.device) && !main.vt.builtin_feedback_target(ctx),
        feedback_target: main.vt.builtin_feedback_target(ctx),
        page_table: main.vt.page_table_storage(),
        pool_mib: mib(main.vt.pools().iter().map(|p| p.bytes()).sum()),
        reference_mib: main.scene.reference_bytes().map(mib),
        reference_unavailable,
        frames: cfg.frames,
        warmup: cfg.warmup,
        timestamp_query: timer.is_some(),
        timestamp_query_inside_encoders: timer.as_ref().is_some_and(|t| t.inside_encoders),
        timestamp_period_ns: ctx.queue.get_timestamp_period(),
        ratio: Ratios {
            gpu_pass: ratio_gpu,
            wall: ratio(vt_stats.wall_ms.median, ref_stats.wall_ms.median),
            frame: ratio(vt_stats.frame_ms.median, ref_stats.frame_ms.median),
        },
        feedback: FeedbackStats {
            cpu_ms: Stat::of(per_frame.iter().map(|f| f.stream.feedback_ms)).unwrap_or_default(),
            gpu_clear_copy_ms: Stat::of(per_frame.iter().filter_map(|f| f.vt_feedback_gpu_ms)),
            readback_bytes: main.vt.feedback_bytes(),
            stride,
            shader_writes_ms,
        },
        uploads: UploadStats {
            cpu_ms: Stat::of(per_frame.iter().map(|f| f.stream.upload_ms)).unwrap_or_default(),
            per_frame: Stat::of(per_frame.iter().map(|f| f.stream.uploads as f64)).unwrap_or_default(),
            total: per_frame.iter().map(|f| f.stream.uploads as u64).sum(),
            copies: per_frame.iter().map(|f| f.stream.upload_copies as u64).sum(),
            staged: per_frame.iter().map(|f| f.stream.uploads_staged as u64).sum(),
            warmup_total: warmup_uploads,
            resident_at_end: main.vt.residency().resident_count(),
            burst: burst_stats(&per_frame, cfg.flush_every > 0),
            table_entries: Stat::of(per_frame.iter().map(|f| f.stream.table_entries as f64))
                .unwrap_or_default(),
            table_jobs: Stat::of(per_frame.iter().map(|f| f.stream.table_jobs as f64)).unwrap_or_default(),
            table_gpu_ms: Stat::of(per_frame.iter().filter_map(|f| f.vt_table_update_gpu_ms)),
            gpu_ms: Stat::of(per_frame.iter().filter_map(|f| f.vt_upload_gpu_ms)),
        },
        production: ProductionBench::of(&atlas, &per_frame, ref_stats.gpu_pass_ms.map(|s| s.median)),
        vt: vt_stats,
        reference: ref_stats,
        feedback_probe: probe_stats,
        no_feedback: floor_stats,
        no_feedback_ratio,
        per_frame,
    };
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::Stat;

    #[test]
    fn stat_median_p95_max() {
        let s = Stat::of((1..=100).map(f64::from)).unwrap();
        assert_eq!(s.median, 50.5);
        assert_eq!(s.p95, 95.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.samples, 100);
        assert_eq!(Stat::of([3.0, 1.0, 2.0]).unwrap().median, 2.0);
        assert!(Stat::of(std::iter::empty()).is_none());
    }
}
