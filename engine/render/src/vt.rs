//! Virtual textures on the GPU: the tile pools, the page-table buffer, the feedback
//! bitset and one parameter block per layer. The decisions of each frame come from
//! the core's [`Streamer`] as a [`FramePlan`]; this file only executes plans.
//!
//! One frame: [`VirtualTextures::begin`] (before the passes that sample virtual
//! textures), then [`VtFrame::finish`] (after them; it submits the encoder, and fails
//! once the device is lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tessera_core::format::codec::TargetFormat;
use tessera_core::format::color::ColorSpace;
use tessera_core::stream::pool_layout::{GpuLimits, PoolLayout, Trilinear};
use tessera_core::stream::residency::Residency;
use tessera_core::stream::staging::{StagedTile, StagingCounters, StagingLayout};
use tessera_core::stream::stats::{StatsSnapshot, StreamFrame};
use tessera_core::stream::streamer::{
    FEEDBACK_STRIDES, FrameInput, FramePlan, SharedStreaming, SparseFeedback, Staleness, Streamer,
    StreamerConfig,
};
use tessera_core::{Atlas, HostCache};

use crate::context::GpuContext;
use crate::error::RenderError;
use crate::feedback::Feedback;
use crate::feedback_target::{FeedbackAttachment, FeedbackTargets};
use crate::page_table::{PageTableBuffer, PageTableStorage};
use crate::page_table_update::TableUpdater;
use crate::params::{LayerBinding, Resources, ShaderProbe, VtParams, bind_group_layout, pool_sampler};
use crate::pool::{TilePool, format_support};
use crate::prediction::Prediction;
use crate::staging::GpuStaging;

pub use crate::params::MAX_ANISOTROPY;

/// Readback buffers in the feedback ring: frame N's feedback is acted on at N+1..N+3.
const FEEDBACK_RING: usize = 3;

/// Frames without any feedback arriving after which [`VirtualTextures::begin`] warns
/// (once per stall): feedback normally arrives one to three frames after it is recorded.
pub const FEEDBACK_STALL_FRAMES: u64 = 60;

/// Debug views, [`VtConfig::debug_view`]: 0 off, 1 mip colours, 2 fallback depth,
/// 3 tile borders.
pub const DEBUG_VIEWS: u32 = 4;

/// Identifies each [`VirtualTextures`], so that a [`VtLayer`] of one is never bound
/// for another.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Settings of the virtual-texture system.
#[derive(Clone, Debug)]
pub struct VtConfig {
    /// GPU tile pool size in MiB.
    pub pool_mib: u32,
    /// Host page cache budget in MiB.
    pub host_cache_mib: u32,
    /// Loader threads (0 = one per core but one, at least 1: the render thread keeps a core).
    pub loader_threads: usize,
    /// Most tiles uploaded per frame (with `target_frame_ms`: the adaptive budget's
    /// ceiling).
    pub max_uploads_per_frame: usize,
    /// Most bytes uploaded per frame.
    pub max_upload_bytes_per_frame: u64,
    /// Feedback is written by one pixel in every `n × n` block (1, 2, 4 or 8), rotating.
    pub feedback_stride: u32,
    /// Anisotropy limit: 1 (the default) is trilinear only, cheapest but blurry at
    /// grazing angles (a floor or a road seen from eye height); up to
    /// [`MAX_ANISOTROPY`] taps along the axis of elongation keep such views sharp at
    /// the cost of more fetches where a pixel's footprint is stretched.
    pub max_anisotropy: u16,
    /// Added to every level of detail (positive = blurrier, fewer tiles).
    pub mip_bias: f32,
    /// Debug view: 0 off, 1 mip colours, 2 fallback depth, 3 tile borders.
    pub debug_view: u32,
    /// Force the pool's texel format (default: the best the adapter and the atlas allow).
    pub pool_format: Option<TargetFormat>,
    /// Raise a global mip bias (on top of `mip_bias`), with hysteresis, while the view
    /// needs more tiles than the pool holds, and lower it when room comes back, so an
    /// oversubscribed pool settles at a coarser level instead of thrashing.
    pub auto_mip_bias: bool,
    /// Adapt the per-frame upload budget to this frame time (ms, measured between
    /// [`VirtualTextures::begin`] calls); `None`: the fixed `max_uploads_per_frame`.
    pub target_frame_ms: Option<f64>,
    /// Also request the same-mip neighbours of requested tiles, at the lowest priority,
    /// into free or unneeded slots only.
    pub prefetch_neighbours: bool,
    /// How samples blend mips: [`Trilinear::Hardware`] (the default) where the pool
    /// format allows it, else the software path; [`Trilinear::Software`] forces the
    /// software path. [`VirtualTextures::trilinear`] says which one runs.
    pub trilinear: Trilinear,
    /// Let the built-in drawers force the depth test before their virtual-texture
    /// fragment shaders (where the device has `SHADER_EARLY_DEPTH_TEST` and the
    /// material never discards), so hidden fragments cost nothing and request no tiles.
    pub early_depth: bool,
    /// One host cache and one set of loader threads shared with other virtual
    /// textures (make it once with [`SharedStreaming::new`] and clone it into each
    /// config); `None` (the default): these virtual textures have their own, sized by
    /// `host_cache_mib` and `loader_threads` (which a shared one ignores).
    pub shared: Option<SharedStreaming>,
    /// MiB of host-visible staging memory the loader threads write tiles into, so that
    /// the render thread only records copies (0: none; the render thread then copies
    /// every uploaded tile into a staging belt itself, as it also does for a tile that
    /// finds the staging memory full).
    pub staging_mib: u32,
    /// Where the page table lives on the GPU: a complete storage buffer updated on the
    /// GPU (the default), one written from the CPU with shallow fallbacks, or an
    /// `R32Uint` texture. With the texture, shaders must read it that way: pass their
    /// source through [`crate::shaders::with_page_table`] (the built-in drawers do).
    pub page_table: PageTableStorage,
    /// Let the built-in drawers write feedback to a colour target
    /// ([`crate::shaders::with_feedback_target`], the default) instead of the storage
    /// bitset: their fragment shaders then have no side effect, so early depth holds
    /// without `SHADER_EARLY_DEPTH_TEST`. Your own pipelines choose by their shader;
    /// the virtual textures take feedback from both paths in the same frame.
    pub feedback_target: bool,
    /// Take a predicted view's feedback each frame: passes drawn where the camera is
    /// going write it to [`VirtualTextures::predicted_attachment`] (the built-in
    /// drawers' `draw_predicted`), and its tiles stream at the lowest priority, never
    /// evicting what the current view needs (`FrameInput::predicted`). Costs a second
    /// request bitset and its readback; off by default.
    pub prediction: bool,
    /// Copy a run of uploaded tiles bound for slots one below the other, whose bytes
    /// follow each other in staging memory, with one copy command (the default; free
    /// slots are handed out down the columns and a frame's uploads ordered by their
    /// staging records, so a burst is a few copies); off: one copy per tile, to
    /// compare. [`StreamFrame::upload_copies`] counts them.
    pub merged_copies: bool,
}

impl Default for VtConfig {
    fn default() -> Self {
        let s = StreamerConfig::default();
        Self {
            pool_mib: 128,
            host_cache_mib: s.host_cache_mib,
            loader_threads: s.loader_threads,
            max_uploads_per_frame: s.max_uploads_per_frame,
            max_upload_bytes_per_frame: s.max_upload_bytes_per_frame,
            feedback_stride: s.feedback_stride,
            max_anisotropy: 1,
            mip_bias: s.mip_bias,
            debug_view: 0,
            pool_format: None,
            auto_mip_bias: s.auto_mip_bias,
            target_frame_ms: s.target_frame_ms,
            prefetch_neighbours: s.prefetch_neighbours,
            trilinear: Trilinear::default(),
            early_depth: true,
            shared: None,
            staging_mib: crate::staging::DEFAULT_STAGING_MIB,
            page_table: PageTableStorage::default(),
            feedback_target: true,
            prediction: false,
            merged_copies: true,
        }
    }
}

impl VtConfig {
    /// Checks every setting's range; [`VirtualTextures::new`] refuses a configuration
    /// that fails this with [`RenderError::Config`] naming the setting, instead of
    /// clamping it silently.
    pub fn validate(&self) -> Result<(), RenderError> {
        let bad = |what: String| Err(RenderError::Config(format!("VtConfig: {what}")));
        if self.pool_mib == 0 {
            return bad("pool_mib is 0: the tile pool needs at least 1 MiB".into());
        }
        if !(1..=MAX_ANISOTROPY).contains(&self.max_anisotropy) {
            return bad(format!("max_anisotropy {} is outside 1..={MAX_ANISOTROPY}", self.max_anisotropy));
        }
        if !FEEDBACK_STRIDES.contains(&self.feedback_stride) {
            return bad(format!(
                "feedback_stride {} is not one of {FEEDBACK_STRIDES:?}",
                self.feedback_stride
            ));
        }
        if !self.mip_bias.is_finite() || self.mip_bias.abs() > 16.0 {
            return bad(format!("mip_bias {} is outside -16..=16", self.mip_bias));
        }
        if self.debug_view >= DEBUG_VIEWS {
            return bad(format!("debug_view {} is outside 0..{DEBUG_VIEWS}", self.debug_view));
        }
        if self.max_uploads_per_frame == 0 || self.max_upload_bytes_per_frame == 0 {
            return bad("max_uploads_per_frame and max_upload_bytes_per_frame must be at least 1".into());
        }
        if let Some(ms) = self.target_frame_ms.filter(|ms| !(ms.is_finite() && *ms > 0.0)) {
            return bad(format!("target_frame_ms {ms} must be a positive number of milliseconds"));
        }
        Ok(())
    }

    /// The streaming part of these settings.
    pub fn streamer(&self) -> StreamerConfig {
        StreamerConfig {
            host_cache_mib: self.host_cache_mib,
            loader_threads: self.loader_threads,
            max_uploads_per_frame: self.max_uploads_per_frame,
            max_upload_bytes_per_frame: self.max_upload_bytes_per_frame,
            feedback_stride: self.feedback_stride,
            mip_bias: self.mip_bias,
            auto_mip_bias: self.auto_mip_bias,
            target_frame_ms: self.target_frame_ms,
            prefetch_neighbours: self.prefetch_neighbours,
            staleness: Staleness::default(),
            complete_page_table: self.page_table == PageTableStorage::Complete,
            ..StreamerConfig::default()
        }
    }
}

/// A layer of one [`VirtualTextures`] that can be bound: from
/// [`VirtualTextures::layer`] or [`VirtualTextures::layer_named`]. It only binds for
/// the virtual textures that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VtLayer {
    owner: u64,
    index: usize,
}

impl VtLayer {
    /// The layer's index in the atlas.
    pub fn index(self) -> usize {
        self.index
    }
}

/// The GPU side of an atlas' virtual textures, fed by a [`Streamer`].
pub struct VirtualTextures {
    /// Unique per instance (see [`VtLayer`]).
    id: u64,
    atlas: Arc<Atlas>,
    streamer: Streamer,
    /// One pool, or one per layer of a stack (same slot grid).
    pools: Vec<TilePool>,
    page_table: PageTableBuffer,
    /// The compute pass that keeps a complete page table complete.
    table_updater: Option<TableUpdater>,
    /// The page-table jobs of the plans executed since the last frame began (usually
    /// one; two after `new` or `set_pool_mib`), recorded in order at the start of the
    /// next frame's encoder, before its draws.
    pending_jobs: Vec<tessera_core::stream::complete_table::TableJobs>,
    /// Jobs were recorded into a frame's encoder that has not been confirmed submitted
    /// ([`VtFrame::finish`], [`VirtualTextures::submitted`]): if the next frame begins
    /// first, they may never have run, and the table is rebuilt.
    table_unconfirmed: bool,
    /// Where the update pass writes its begin and end timestamps (benchmarks).
    update_timestamps: Option<(wgpu::QuerySet, u32)>,
    feedback: Feedback,
    /// The colour-target feedback path: its target and resolve pass.
    feedback_targets: FeedbackTargets,
    /// The predicted view's feedback ([`VtConfig::prediction`]).
    prediction: Option<Prediction>,
    layout_bgl: wgpu::BindGroupLayout,
    /// One per sampled layer (a stack is sampled through layer 0's).
    layers: Vec<LayerBinding>,
    config: VtConfig,
    stacked: bool,
    trilinear: (Trilinear, String),
    /// The number the next [`VirtualTextures::begin`] gives its frame.
    next_frame: u64,
    last_begin: Option<Instant>,
    last_upload_ms: f64,
    /// The latest feedback that arrived ([`VirtualTextures::last_feedback`]).
    last_feedback: Option<SparseFeedback>,
    /// The frame at which feedback last arrived (or the first frame), for the stall warning.
    last_feedback_frame: u64,
    stall_warned: bool,
    /// The benchmark probe in effect ([`VirtualTextures::set_shader_probe`]).
    probe: ShaderProbe,
    /// Staging memory the loader threads write tiles into (`VtConfig::staging_mib`).
    staging: Option<GpuStaging>,
}

impl VirtualTextures {
    /// Sets up pools, page table and feedback for `atlas`, and makes the coarsest mip
    /// of every layer resident (pinned) before returning, so nothing is ever missing.
    /// Fails with [`RenderError::Config`] for a setting out of range
    /// ([`VtConfig::validate`]) or a pool that does not fit the device, and with
    /// [`RenderError::DeviceLost`] on a lost device.
    pub fn new(ctx: &GpuContext, atlas: Arc<Atlas>, config: VtConfig) -> Result<Self, RenderError> {
        config.validate()?;
        // wgpu's buffer helpers panic on a lost device instead of failing.
        ctx.check()?;
        let device = &ctx.device;
        let (plan, pools) = Self::make_pools(ctx, &atlas, &config)?;
        let mut streamer = match &config.shared {
            Some(shared) => Streamer::new_shared(atlas.clone(), &plan, config.streamer(), shared),
            None => Streamer::new(atlas.clone(), &plan, config.streamer()),
        }
        .map_err(|e| RenderError::Config(e.to_string()))?;
        let staging = Self::make_staging(ctx, &pools, &mut streamer, config.staging_mib);
        let page_table = Self::make_page_table(ctx, &config, &plan)?;
        if (config.feedback_target || config.prediction) && streamer.layout().words() as u64 * 32 >= 1 << 31 {
            // A request is the entry + 1 in 31 bits (bit 31 flags a coarser sample).
            return Err(RenderError::Config(format!(
                "a bitset of {} tiles is too large for feedback through a colour target or a predicted \
                 view (under 2^31): set feedback_target and prediction to false",
                streamer.layout().words() * 32
            )));
        }
        let feedback = Feedback::new(device, streamer.layout().words(), FEEDBACK_RING);
        let layout_bgl = bind_group_layout(device, config.page_table);
        let bindings =
            Self::make_bindings(ctx, &atlas, &config, &plan, &pools, &page_table, &feedback, &layout_bgl);
        let mut vt = Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            atlas,
            streamer,
            pools,
            table_updater: Self::make_updater(ctx, &page_table),
            page_table,
            feedback_targets: FeedbackTargets::new(device, feedback.bitset(), false),
            prediction: config.prediction.then(|| Prediction::new(device, feedback.words())),
            feedback,
            layout_bgl,
            layers: bindings,
            config,
            stacked: plan.stacked,
            trilinear: (plan.trilinear, plan.trilinear_reason.clone()),
            next_frame: 0,
            last_begin: None,
            last_upload_ms: 0.0,
            last_feedback: None,
            last_feedback_frame: 0,
            stall_warned: false,
            probe: ShaderProbe::Off,
            staging,
            pending_jobs: Vec::new(),
            table_unconfirmed: false,
            update_timestamps: None,
        };
        // Uploads the coarsest tiles the streamer loaded, and writes every parameter block.
        let plan = vt.streamer.frame(FrameInput::default());
        vt.execute(ctx, plan);
        Ok(vt)
    }

    /// Plans the pool for `config` on `ctx`'s device and creates its textures.
    fn make_pools(
        ctx: &GpuContext,
        atlas: &Atlas,
        config: &VtConfig,
    ) -> Result<(PoolLayout, Vec<TilePool>), RenderError> {
        let device = &ctx.device;
        let limits = GpuLimits {
            support: format_support(device),
            max_texture_side: device.limits().max_texture_dimension_2d,
            max_storage_binding: device.limits().max_storage_buffer_binding_size,
        };
        let plan = PoolLayout::plan(atlas, config.pool_mib, config.pool_format, limits, config.trilinear)
            .map_err(|e| RenderError::Config(e.to_string()))?;
        let layers = atlas.layers();
        let pools: Vec<TilePool> = plan
            .targets
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let color = if plan.stacked { layers[i].color } else { ColorSpace::Srgb };
                let mut pool = TilePool::with_grid(
                    device,
                    &ctx.queue,
                    (plan.slots_x, plan.slots_y),
                    plan.slot_texels,
                    t,
                    color,
                    plan.pool_levels(),
                )?;
                pool.set_merged_copies(config.merged_copies);
                Ok::<_, RenderError>(pool)
            })
            .collect::<Result<_, _>>()?;
        tracing::info!(
            formats = ?plan.targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
            slots = plan.slot_count(),
            stacked = plan.stacked,
            sampling = %plan.trilinear_reason,
            "tile pool"
        );
        Ok((plan, pools))
    }

    /// The update pass of a complete page table (`None` for the other storages).
    fn make_updater(ctx: &GpuContext, page_table: &PageTableBuffer) -> Option<TableUpdater> {
        if page_table.storage() != PageTableStorage::Complete {
            return None;
        }
        page_table.buffer().map(|b| TableUpdater::new(&ctx.device, b, page_table.len()))
    }

    /// The page table of `plan` in the configured storage.
    fn make_page_table(
        ctx: &GpuContext,
        config: &VtConfig,
        plan: &PoolLayout,
    ) -> Result<PageTableBuffer, RenderError> {
        let max_side = ctx.device.limits().max_texture_dimension_2d;
        PageTableBuffer::new(&ctx.device, plan.page_table_entries(), config.page_table, max_side)
            .map_err(RenderError::Config)
    }

    /// `mib` MiB of staging memory laid out for `pools`' copies, handed to `streamer`'s
    /// loader threads (`None` for 0 MiB).
    fn make_staging(
        ctx: &GpuContext,
        pools: &[TilePool],
        streamer: &mut Streamer,
        mib: u32,
    ) -> Option<GpuStaging> {
        if mib == 0 {
            streamer.set_staging(None);
            return None;
        }
        let parts: Vec<(u32, u32)> = pools.iter().map(TilePool::tile_rows).collect();
        let layout = StagingLayout::new(&parts, wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let expected: usize = streamer.part_lengths().iter().sum();
        if layout.tile_bytes() != expected {
            tracing::warn!(
                staged = layout.tile_bytes(),
                expected,
                "staging layout does not match the tile size; uploads are copied by the render thread"
            );
            streamer.set_staging(None);
            return None;
        }
        // Never more than twice what the pools hold (tiles in flight while the pool is
        // refilled after a cut), nor [`crate::staging::MAX_STAGING_MIB`].
        let pool_mib = 2 * pools.iter().map(TilePool::bytes).sum::<u64>().div_ceil(1 << 20);
        let chunk = u64::from(crate::staging::STAGING_CHUNK_MIB);
        let cap = pool_mib.next_multiple_of(chunk).max(chunk).min(u64::from(crate::staging::MAX_STAGING_MIB));
        let mib = u32::try_from(u64::from(mib).min(cap)).unwrap_or(crate::staging::MAX_STAGING_MIB);
        let staging = GpuStaging::new(&ctx.device, layout, mib);
        streamer.set_staging(Some(Arc::clone(staging.ring())));
        Some(staging)
    }

    /// One parameter block and bind group per sampled layer (a stack: layer 0's).
    #[allow(clippy::too_many_arguments)]
    fn make_bindings(
        ctx: &GpuContext,
        atlas: &Atlas,
        config: &VtConfig,
        plan: &PoolLayout,
        pools: &[TilePool],
        page_table: &PageTableBuffer,
        feedback: &Feedback,
        layout_bgl: &wgpu::BindGroupLayout,
    ) -> Vec<LayerBinding> {
        let sampler = pool_sampler(&ctx.device);
        let resources = Resources { pools, page_table, feedback: feedback.bitset(), sampler: &sampler };
        let texels = pools[0].texels();
        let layers = atlas.layers();
        let sampled = if plan.stacked { &layers[..1] } else { layers };
        sampled
            .iter()
            .map(|l| {
                let mut params = VtParams::new(l, texels, config.max_anisotropy, config.debug_view);
                params.set_trilinear(plan.trilinear);
                LayerBinding::new(&ctx.device, layout_bgl, params, &l.name, &resources)
            })
            .collect()
    }

    /// Resizes the tile pool to about `mib` MiB between frames, keeping the host cache
    /// (tiles already decoded are uploaded again from RAM, not read or transcoded), the
    /// loader threads, the feedback buffers, the bind group layout (pipelines made with
    /// [`VirtualTextures::bind_group_layout`] stay valid) and every setting. The pool
    /// starts over from the coarsest mips: the view is blurry for a few frames while
    /// its tiles stream in again. On an error (a pool that does not fit the device, a
    /// lost device) the virtual textures keep their old pool.
    pub fn set_pool_mib(&mut self, ctx: &GpuContext, mib: u32) -> Result<(), RenderError> {
        let config = VtConfig { pool_mib: mib, ..self.config.clone() };
        config.validate()?;
        ctx.check()?;
        let (plan, pools) = Self::make_pools(ctx, &self.atlas, &config)?;
        let mut streamer = self.streamer.reshaped(&plan).map_err(|e| RenderError::Config(e.to_string()))?;
        streamer.set_mip_bias(config.mip_bias);
        let staging = Self::make_staging(ctx, &pools, &mut streamer, config.staging_mib);
        let page_table = Self::make_page_table(ctx, &config, &plan)?;
        let mut layers = Self::make_bindings(
            ctx,
            &self.atlas,
            &config,
            &plan,
            &pools,
            &page_table,
            &self.feedback,
            &self.layout_bgl,
        );
        for layer in &mut layers {
            layer.params.set_probe(self.probe);
        }
        self.streamer = streamer;
        self.staging = staging;
        self.pools = pools;
        self.table_updater = Self::make_updater(ctx, &page_table);
        // The old table's jobs mean nothing to the new one, which starts unmapped.
        self.pending_jobs.clear();
        self.table_unconfirmed = false;
        self.page_table = page_table;
        self.layers = layers;
        self.trilinear = (plan.trilinear, plan.trilinear_reason.clone());
        self.config = config;
        // Uploads the coarsest tiles and writes the whole page table and every parameter block.
        let first = self.streamer.frame(FrameInput { frame: self.next_frame, ..FrameInput::default() });
        self.execute(ctx, first);
        Ok(())
    }

    /// Starts frame number [`VirtualTextures::frame_number`]: collects the feedback
    /// that arrived (never waits), runs the streamer's decisions, executes its plan
    /// (uploads, page-table writes, shader parameters) and records the feedback clear
    /// into `encoder`. Record the passes that sample virtual textures after this, into
    /// `encoder` or later submissions, then call [`VtFrame::finish`].
    pub fn begin(&mut self, ctx: &GpuContext, encoder: &mut wgpu::CommandEncoder) -> VtFrame<'_> {
        let now = Instant::now();
        let last_frame_ms = self.last_begin.map(|t| now.duration_since(t).as_secs_f64() * 1e3);
        self.last_begin = Some(now);
        let frame = self.next_frame;
        self.next_frame += 1;
        // A lost device is recorded here and reported by `finish`; its readbacks are gone.
        ctx.poll_quietly();
        if let Some(staging) = self.staging.as_mut() {
            staging.maintain();
        }
        let (arrived, pixels) = match ctx.lost().map_or_else(|| self.feedback.collect(), |_| None) {
            Some(f) => {
                let pixels = f.pixels.map(|p| (f.frame, p));
                (Some(SparseFeedback::from(f)), pixels)
            }
            None => (None, None),
        };
        self.watch_feedback(frame, arrived.is_some());
        let predicted =
            self.prediction.as_mut().filter(|_| ctx.lost().is_none()).and_then(Prediction::collect);
        let plan = self.streamer.frame(FrameInput {
            frame,
            feedback: arrived.as_ref(),
            last_frame_ms,
            last_upload_ms: self.last_upload_ms,
            predicted: predicted.as_ref(),
        });
        let mut stats = self.execute(ctx, plan);
        if let Some((recorded, pixels)) = pixels.filter(|(_, p)| p.sampled > 0) {
            stats.coarse_pixel_share = Some(pixels.coarse_share());
            stats.coarse_pixel_frame = Some(recorded);
        }
        if arrived.is_some() {
            self.last_feedback = arrived;
        }
        if self.table_unconfirmed && self.table_updater.is_some() {
            // The last frame's encoder may never have been submitted (a frame dropped
            // without `finish`): its jobs may not have run, so rebuild the whole table
            // from the residency, which already holds this plan's changes too.
            tracing::debug!(frame, "the previous frame was not finished: rebuilding the page table");
            self.pending_jobs = vec![self.streamer.rebuild_page_table_jobs()];
        }
        if let Some(updater) = self.table_updater.as_ref().filter(|_| !self.pending_jobs.is_empty()) {
            // Into this frame's encoder, ahead of its draws, one pass per plan in order;
            // each recording's jobs live in buffers of its own, so the encoder may be
            // submitted with others in any grouping.
            self.table_unconfirmed = true;
            let last = self.pending_jobs.len() - 1;
            for (i, jobs) in self.pending_jobs.drain(..).enumerate() {
                // The benchmark times this frame's own plan.
                let timestamps = self.update_timestamps.as_ref().filter(|_| i == last).map(|(set, first)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: Some(*first),
                        end_of_pass_write_index: Some(first + 1),
                    }
                });
                updater.record(&ctx.device, encoder, &jobs, timestamps);
            }
        }
        self.feedback.begin(encoder);
        let shader = self.streamer.shader_params(frame);
        self.feedback_targets.begin(&ctx.queue, encoder, &shader);
        if let Some(prediction) = &self.prediction {
            prediction.begin(&ctx.queue, encoder, &shader);
        }
        VtFrame { vt: self, stats, number: frame, readback_recorded: false, finished: false }
    }

    /// Warns once when no feedback has arrived for [`FEEDBACK_STALL_FRAMES`] frames
    /// (frames begun but never finished, or a device that is never polled).
    fn watch_feedback(&mut self, frame: u64, arrived: bool) {
        if arrived {
            self.last_feedback_frame = frame;
            self.stall_warned = false;
        } else if frame >= self.last_feedback_frame + FEEDBACK_STALL_FRAMES && !self.streamer.frozen() {
            if !self.stall_warned {
                tracing::warn!(
                    frame,
                    since = self.last_feedback_frame,
                    "no GPU feedback arrived for {FEEDBACK_STALL_FRAMES} frames, so nothing new streams in: \
                     finish every frame with VtFrame::finish (it submits and maps the readback)"
                );
            }
            self.stall_warned = true;
        }
    }

    /// Whether [`FEEDBACK_STALL_FRAMES`] frames went by without feedback arriving (the
    /// condition [`VirtualTextures::begin`] warns about); cleared when feedback arrives.
    pub fn feedback_stalled(&self) -> bool {
        self.stall_warned
    }

    /// Applies a plan: each pool's part of the uploaded tiles in one batch, then the
    /// page-table ranges, then the parameter blocks. Returns the plan's statistics
    /// with the time this took.
    fn execute(&mut self, ctx: &GpuContext, mut plan: FramePlan) -> StreamFrame {
        let t0 = Instant::now();
        let lengths = self.streamer.part_lengths();
        // Tiles a loader thread wrote into this ring are copied from there (their chunks
        // sealed and unmapped first); the others from their bytes.
        let staged: Vec<(usize, &StagedTile)> = match &self.staging {
            Some(staging) => plan
                .uploads
                .iter()
                .enumerate()
                .filter_map(|(i, u)| {
                    Some((i, u.staged.as_ref().filter(|t| Arc::ptr_eq(t.ring(), staging.ring()))?))
                })
                .collect(),
            None => Vec::new(),
        };
        let mut is_staged = vec![false; plan.uploads.len()];
        for &(i, _) in &staged {
            is_staged[i] = true;
        }
        let to_slots: Vec<_> = staged.iter().map(|&(i, t)| (plan.uploads[i].slot, t)).collect();
        let (mut offset, mut upload_copies) = (0, 0);
        for (part, (pool, &len)) in self.pools.iter().zip(lengths).enumerate() {
            // The streamer only hands out tiles of exactly the summed part lengths.
            let batch: Vec<_> = plan
                .uploads
                .iter()
                .zip(&is_staged)
                .filter(|(_, staged)| !**staged)
                .filter_map(|(u, _)| Some((u.slot, u.bytes.get(offset..offset + len)?)))
                .collect();
            let copies = self.staging.as_ref().map(|s| s.copies(part, &to_slots)).unwrap_or_default();
            upload_copies += pool.upload_mixed(&ctx.device, &ctx.queue, &batch, &copies);
            offset += len;
        }
        let staged_tiles: Vec<StagedTile> = staged.into_iter().map(|(_, t)| t.clone()).collect();
        let staged_count = staged_tiles.len();
        if let Some(staging) = self.staging.as_mut() {
            staging.retire(&ctx.queue, staged_tiles);
        }
        self.page_table.write(&ctx.queue, &plan.page_table_writes);
        if !plan.page_table_jobs.is_empty() && self.table_updater.is_some() {
            self.pending_jobs.push(std::mem::take(&mut plan.page_table_jobs));
        }
        for layer in &mut self.layers {
            layer.params.set_frame(&plan.shader);
            layer.write(&ctx.queue);
        }
        let mut stats = plan.stats;
        stats.uploads_staged = staged_count;
        stats.upload_copies = upload_copies;
        stats.upload_ms = t0.elapsed().as_secs_f64() * 1e3;
        self.last_upload_ms = stats.upload_ms;
        stats
    }

    /// Times the complete page table's update pass: when a frame's
    /// [`VirtualTextures::begin`] records one, it writes timestamps `first` (beginning)
    /// and `first + 1` (end) of `set` (a `Timestamp` query set on a device with
    /// `TIMESTAMP_QUERY`); frames without changes write none. `None` stops it.
    pub fn time_page_table_updates(&mut self, timestamps: Option<(wgpu::QuerySet, u32)>) {
        self.update_timestamps = timestamps;
    }

    /// The number the next [`VirtualTextures::begin`] gives its frame: frames are
    /// counted from 0 by the virtual textures themselves, one per `begin`, and feedback
    /// recorded in frame N is acted on one to three frames later.
    pub fn frame_number(&self) -> u64 {
        self.next_frame
    }

    /// The bind group layout of the virtual-texture group of `vt.wgsl` (group 1 of
    /// [`crate::shaders::VT_WGSL`], or the group given to [`crate::shaders::vt_module`]),
    /// for user pipelines. The same for every layer, and it stays valid across
    /// [`VirtualTextures::set_pool_mib`].
    pub fn bind_group_layout(&self) -> &wgpu::BindGroupLayout {
        &self.layout_bgl
    }

    /// The bindable layer `index`, or `None` when there is no such layer. A stacked
    /// atlas has one bindable layer, 0, which samples every layer of the stack
    /// (`vt_sample_layers`).
    pub fn layer(&self, index: usize) -> Option<VtLayer> {
        (index < self.layers.len()).then_some(VtLayer { owner: self.id, index })
    }

    /// The bindable layer named `name` in the atlas (as given to the baker), if any.
    pub fn layer_named(&self, name: &str) -> Option<VtLayer> {
        let index = self.atlas.layers().iter().position(|l| l.name == name)?;
        self.layer(index)
    }

    /// Every bindable layer, in atlas order.
    pub fn layers(&self) -> impl Iterator<Item = VtLayer> + '_ {
        (0..self.layers.len()).map(|index| VtLayer { owner: self.id, index })
    }

    /// The bind group that samples `layer` through `vt.wgsl`.
    ///
    /// # Panics
    /// When `layer` belongs to other virtual textures (a programming error, like an
    /// index out of bounds).
    pub fn bind_group(&self, layer: VtLayer) -> &wgpu::BindGroup {
        assert!(
            layer.owner == self.id,
            "VtLayer {} belongs to other virtual textures than the ones asked to bind it",
            layer.index
        );
        &self.layers[layer.index].bind_group
    }

    /// The resources behind `layer`'s bindings, for an engine that binds them in a bind
    /// group of its own (a material's), laid out by [`crate::params::layout_entries`]
    /// for the shader of [`crate::shaders::vt_bindings_at`]. They change when the pool
    /// is resized ([`VirtualTextures::set_pool_mib`]): build such bind groups again then.
    ///
    /// # Panics
    /// Like [`VirtualTextures::bind_group`], for a layer of other virtual textures.
    pub fn binding_resources(&self, layer: VtLayer) -> &crate::params::BindingResources {
        assert!(layer.owner == self.id, "VtLayer {} belongs to other virtual textures", layer.index);
        &self.layers[layer.index].resources
    }

    /// Whether the atlas is stacked: its layers share tile ids, residency and one
    /// page table, each in its own pool.
    pub fn is_stacked(&self) -> bool {
        self.stacked
    }

    /// The atlas being streamed.
    pub fn atlas(&self) -> &Arc<Atlas> {
        &self.atlas
    }

    /// The tile pool (of a stack: layer 0's).
    pub fn pool(&self) -> &TilePool {
        &self.pools[0]
    }

    /// Every pool: one, or one per layer of a stack.
    pub fn pools(&self) -> &[TilePool] {
        &self.pools
    }

    /// Running totals of the staging memory the loader threads write tiles into
    /// (`None` with [`VtConfig::staging_mib`] 0): tiles staged, tiles that found it
    /// full, chunks sealed and mapped again.
    pub fn staging_counters(&self) -> Option<StagingCounters> {
        self.staging.as_ref().map(|s| s.ring().counters())
    }

    /// The streamer that makes this atlas' decisions.
    pub fn streamer(&self) -> &Streamer {
        &self.streamer
    }

    /// The residency manager (page-table mirror, slots, counters).
    pub fn residency(&self) -> &Residency {
        self.streamer.residency()
    }

    /// The host page cache.
    pub fn host_cache(&self) -> &Arc<HostCache> {
        self.streamer.host_cache()
    }

    /// The feedback target for a render pass of `width × height` pixels whose
    /// fragment shaders write feedback to a colour target
    /// ([`crate::shaders::with_feedback_target`]): add
    /// [`FeedbackAttachment::attachment`] to the pass at the `@location` the shader
    /// writes `vt_request()` to, format [`crate::FEEDBACK_TARGET_FORMAT`].
    ///
    /// Ask for it while recording the frame's passes (after [`VirtualTextures::begin`]),
    /// and only for a pass that attaches it: the resolve reads the target whether a pass
    /// drew into it or not. The first attachment of a frame clears the target, later
    /// ones (more passes) keep it, and [`VtFrame::finish`] (or
    /// [`VirtualTextures::end_detached`]) reads one pixel per feedback block of it into
    /// the frame's feedback. The target is made here, or remade when the size changes.
    /// Single-sampled passes only.
    pub fn feedback_attachment(&self, width: u32, height: u32) -> FeedbackAttachment {
        self.feedback_targets.attachment(width, height)
    }

    /// The feedback target of a predicted view of `width × height` pixels, with its
    /// depth buffer ([`FeedbackAttachment::depth_attachment`], format
    /// [`crate::PREDICTED_DEPTH_FORMAT`]); `None` unless [`VtConfig::prediction`] is on.
    /// Draw the view where the camera is going (an extrapolated camera, or a known path
    /// a few frames ahead) with a fragment shader writing `vt_request_at(...)` (no
    /// shading needed; a smaller size with derivatives scaled to match is cheaper) while
    /// recording the frame's passes; [`VtFrame::finish`] reads it back, and the next
    /// frames stream its tiles at the lowest priority.
    pub fn predicted_attachment(&self, width: u32, height: u32) -> Option<FeedbackAttachment> {
        self.prediction.as_ref().map(|p| p.attachment(width, height))
    }

    /// Reads what the passes since the last resolve wrote to the feedback target into
    /// this frame's feedback, now (recorded into `encoder`, after those passes): call it
    /// between passes that draw different views into the target (a prefetch view, then
    /// the visible one), which would otherwise overwrite each other's requests;
    /// [`VtFrame::finish`] does it for the last. Nothing happens when no attachment was
    /// handed out since the last resolve. The pixels resolved here are requested but not
    /// counted in [`StreamFrame::coarse_pixel_share`], which describes the view the
    /// frame shows: draw that one last.
    pub fn resolve_feedback(&self, encoder: &mut wgpu::CommandEncoder) {
        self.feedback_targets.resolve(encoder, false);
    }

    /// The latest feedback read back (by the last [`VirtualTextures::begin`] that found
    /// one): the frame that recorded it and the non-zero words of its request bitset
    /// (decode with [`Streamer::layout`]'s `decode_sparse`). `None` before any arrives.
    pub fn last_feedback(&self) -> Option<&SparseFeedback> {
        self.last_feedback.as_ref()
    }

    /// Bytes of feedback read back per frame.
    pub fn feedback_bytes(&self) -> u64 {
        self.feedback.bytes()
    }

    /// Bytes of GPU memory these virtual textures take: the tile pools, the page table
    /// and the feedback buffers (bitset and readback ring). What a fully resident
    /// texture's mip chain is compared against.
    pub fn gpu_bytes(&self) -> u64 {
        self.pools.iter().map(|p| p.bytes() + p.scratch_bytes()).sum::<u64>()
            + self.page_table.bytes()
            + self.feedback.gpu_bytes()
            + self.feedback_targets.gpu_bytes()
            + self.prediction.as_ref().map_or(0, Prediction::gpu_bytes)
    }

    /// Fraction (0 to 1) of the tiles the latest feedback window wants that are resident
    /// themselves (see [`StreamFrame::resident_fraction`]); `None` until the first
    /// feedback arrives (usually two frames after the first [`VtFrame::finish`]): until
    /// then nothing is known to be visible.
    pub fn resident_fraction(&self) -> Option<f64> {
        self.streamer.resident_fraction()
    }

    /// Whether feedback has arrived and everything it wants is resident at its wanted
    /// resolution (false before the first feedback).
    pub fn fully_resident(&self) -> bool {
        self.streamer.fully_resident()
    }

    /// Changes the mip bias (positive = blurrier, fewer tiles) from the next frame on.
    /// A bias outside -16..=16 is clamped (and NaN is 0); [`VirtualTextures::config`]
    /// reports the bias in effect.
    pub fn set_mip_bias(&mut self, bias: f32) {
        let bias = if bias.is_nan() { 0.0 } else { bias.clamp(-16.0, 16.0) };
        self.config.mip_bias = bias;
        self.streamer.set_mip_bias(bias);
    }

    /// The automatic oversubscription bias in effect (see [`VtConfig::auto_mip_bias`]).
    pub fn auto_mip_bias(&self) -> f32 {
        self.streamer.auto_mip_bias()
    }

    /// Warms a region before it is seen (e.g. the destination of a coming cut): requests
    /// the tiles covering `rect` (`[x, y, width, height]` in mip-0 texels of layer
    /// `layer`) at `mip`, with their ancestors, at the lowest priority. They go into free
    /// or unneeded pool slots only, never displacing what the view needs, and are
    /// forgotten if nothing asks for them within a minute of frames. Returns the number
    /// of tiles requested.
    pub fn prefetch_region(&mut self, layer: u16, rect: [u32; 4], mip: u8) -> usize {
        self.streamer.prefetch_region(layer, rect, mip)
    }

    /// Changes the debug view (0 off, 1 mip colours, 2 fallback depth, 3 tile borders;
    /// a larger number means off) from the next frame on.
    pub fn set_debug_view(&mut self, view: u32) {
        let view = if view < DEBUG_VIEWS { view } else { 0 };
        self.config.debug_view = view;
        for l in &mut self.layers {
            l.params.set_debug(view);
        }
    }

    /// Sets a benchmark cost probe: drops part of the sampling chain (the image is then
    /// wrong) or switches to the software path on the same pool, so that `tessera bench`
    /// can price each part. [`ShaderProbe::Off`] restores normal sampling.
    pub fn set_shader_probe(&mut self, probe: ShaderProbe) {
        self.probe = probe;
        for l in &mut self.layers {
            l.params.set_trilinear(self.trilinear.0);
            l.params.set_probe(probe);
        }
    }

    /// Changes the feedback resolution: one pixel in every `stride × stride` block
    /// writes feedback each frame (1, 2, 4 or 8; anything else is refused). Larger
    /// strides cost less GPU time and see small tiles later.
    pub fn set_feedback_stride(&mut self, stride: u32) -> Result<(), RenderError> {
        self.streamer.set_feedback_stride(stride).map_err(|e| RenderError::Config(e.to_string()))?;
        self.config.feedback_stride = stride;
        Ok(())
    }

    /// Changes the most tiles uploaded per frame; with an adaptive budget
    /// ([`VtConfig::target_frame_ms`]) this is its ceiling.
    pub fn set_upload_budget(&mut self, tiles: usize) {
        self.config.max_uploads_per_frame = tiles.max(1);
        self.streamer.set_upload_budget(tiles);
    }

    /// Changes the host cache budget, evicting least recently used tiles until it fits.
    pub fn set_host_budget_mib(&mut self, mib: u32) {
        self.config.host_cache_mib = mib;
        self.streamer.set_host_budget_mib(mib);
    }

    /// While frozen, arriving feedback is dropped: nothing new is requested, so the
    /// resident set stays as it is while the camera moves (a debugging aid).
    pub fn set_feedback_frozen(&mut self, frozen: bool) {
        self.streamer.set_frozen(frozen);
    }

    /// Whether feedback is frozen.
    pub fn feedback_frozen(&self) -> bool {
        self.streamer.frozen()
    }

    /// Evicts every unpinned tile from the VRAM pool; they stream in again.
    pub fn flush_vram(&mut self) {
        self.streamer.flush_vram();
    }

    /// Empties the host cache; tiles are read from disk again.
    pub fn flush_host_cache(&self) {
        self.streamer.flush_host_cache();
    }

    /// Statistics of every tier.
    pub fn stats(&self) -> StatsSnapshot {
        self.streamer.stats(self.pools.iter().map(TilePool::slot_bytes).sum())
    }

    /// Where the page table lives ([`VtConfig::page_table`]): shaders bound to these
    /// virtual textures must come through [`crate::shaders::with_page_table`] with it.
    pub fn page_table_storage(&self) -> PageTableStorage {
        self.config.page_table
    }

    /// The sampling path in use and why (hardware trilinear inside a slot, or the
    /// software blend of two lookups).
    pub fn trilinear(&self) -> (Trilinear, &str) {
        (self.trilinear.0, &self.trilinear.1)
    }

    /// Whether drawers should force early depth tests on `device` (see
    /// [`VtConfig::early_depth`]).
    pub fn early_depth_on(&self, device: &wgpu::Device) -> bool {
        self.config.early_depth && device.features().contains(wgpu::Features::SHADER_EARLY_DEPTH_TEST)
    }

    /// The settings in use.
    pub fn config(&self) -> &VtConfig {
        &self.config
    }
}

/// One frame of a [`VirtualTextures`], from [`VirtualTextures::begin`] to
/// [`VtFrame::finish`]. While it lives the virtual textures can be sampled (through
/// [`VtFrame::vt`] or [`VtFrame::bind_group`]) but not reconfigured.
///
/// Misuse does not compile. Reconfiguring during a frame:
/// ```compile_fail,E0499
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder) {
/// let frame = vt.begin(ctx, &mut encoder);
/// vt.set_mip_bias(1.0); // error: `vt` is borrowed by `frame`
/// let _ = frame.finish(ctx, encoder);
/// # }
/// ```
/// Finishing twice:
/// ```compile_fail,E0382
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder, again: tessera::wgpu::CommandEncoder) {
/// let frame = vt.begin(ctx, &mut encoder);
/// let _ = frame.finish(ctx, encoder);
/// let _ = frame.finish(ctx, again); // error: `frame` was moved by the first `finish`
/// # }
/// ```
/// Starting a second frame before finishing the first:
/// ```compile_fail,E0499
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder) {
/// let first = vt.begin(ctx, &mut encoder);
/// let second = vt.begin(ctx, &mut encoder); // error: `vt` is still borrowed by `first`
/// let _ = first.finish(ctx, encoder);
/// # }
/// ```
/// Keeping a frame's bind group past `finish`:
/// ```compile_fail,E0505
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder, layer: tessera::VtLayer) {
/// let frame = vt.begin(ctx, &mut encoder);
/// let group = frame.bind_group(layer);
/// let _ = frame.finish(ctx, encoder); // error: `frame` is borrowed by `group`
/// let _ = group;
/// # }
/// ```
#[must_use = "call VtFrame::finish after the passes, or this frame's feedback is lost"]
pub struct VtFrame<'a> {
    vt: &'a mut VirtualTextures,
    stats: StreamFrame,
    number: u64,
    readback_recorded: bool,
    finished: bool,
}

impl VtFrame<'_> {
    /// This frame's number (0 for the first frame of the virtual textures).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// What streaming did before this frame (uploads, misses, residency...).
    pub fn stats(&self) -> &StreamFrame {
        &self.stats
    }

    /// The virtual textures, to sample in this frame's passes.
    pub fn vt(&self) -> &VirtualTextures {
        self.vt
    }

    /// See [`VirtualTextures::bind_group`].
    pub fn bind_group(&self, layer: VtLayer) -> &wgpu::BindGroup {
        self.vt.bind_group(layer)
    }

    /// See [`VirtualTextures::feedback_attachment`].
    pub fn feedback_attachment(&self, width: u32, height: u32) -> FeedbackAttachment {
        self.vt.feedback_attachment(width, height)
    }

    /// See [`VirtualTextures::predicted_attachment`].
    pub fn predicted_attachment(&self, width: u32, height: u32) -> Option<FeedbackAttachment> {
        self.vt.predicted_attachment(width, height)
    }

    /// See [`VirtualTextures::resolve_feedback`].
    pub fn resolve_feedback(&self, encoder: &mut wgpu::CommandEncoder) {
        self.vt.resolve_feedback(encoder);
    }

    /// Records the feedback readback into `encoder` now, so that commands recorded
    /// after it (a timestamp, say) come after it. Optional: [`VtFrame::finish`] does it
    /// when this was not called.
    pub fn record_readback(&mut self, encoder: &mut wgpu::CommandEncoder) {
        if !self.readback_recorded {
            self.vt.end_feedback(encoder, self.number);
            self.readback_recorded = true;
        }
    }

    /// Ends the frame after its passes: records the feedback readback into `encoder`,
    /// submits `encoder`, and starts mapping the readback (never waited on). Returns
    /// the frame's streaming statistics, or [`RenderError::DeviceLost`] once the device
    /// is lost (nothing submitted runs any more: stop the frame loop).
    pub fn finish(
        mut self,
        ctx: &GpuContext,
        mut encoder: wgpu::CommandEncoder,
    ) -> Result<StreamFrame, RenderError> {
        self.record_readback(&mut encoder);
        ctx.queue.submit([encoder.finish()]);
        self.vt.submitted();
        self.finished = true;
        match ctx.lost() {
            Some(lost) => Err(lost.into()),
            None => Ok(self.stats),
        }
    }
}

impl<'a> VtFrame<'a> {
    /// Releases the borrow of the virtual textures, for engines that record the frame's
    /// passes in one stage and submit them in another (a render graph, Bevy's render
    /// world): the feedback clear recorded by `begin` must be submitted before the
    /// passes that sample, and [`VirtualTextures::end_detached`] recorded and submitted
    /// after them, then [`VirtualTextures::submitted`] called. The returned token
    /// pairs the two ends: dropping it without `end_detached` warns like a dropped
    /// frame.
    pub fn detach(mut self) -> DetachedFrame {
        self.finished = true;
        DetachedFrame { number: self.number, stats: std::mem::take(&mut self.stats), ended: false }
    }
}

/// A frame begun by [`VirtualTextures::begin`] and [`VtFrame::detach`]ed: the
/// virtual textures are free to use until [`VirtualTextures::end_detached`] takes it
/// back after the frame's passes.
#[must_use = "pass it to VirtualTextures::end_detached after the passes, or this frame's feedback is lost"]
#[derive(Debug)]
pub struct DetachedFrame {
    number: u64,
    stats: StreamFrame,
    ended: bool,
}

impl DetachedFrame {
    /// This frame's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// What streaming did before this frame.
    pub fn stats(&self) -> &StreamFrame {
        &self.stats
    }
}

impl Drop for DetachedFrame {
    fn drop(&mut self) {
        if !self.ended {
            tracing::warn!(
                frame = self.number,
                "a DetachedFrame was dropped without end_detached: its feedback is lost"
            );
        }
    }
}

impl VirtualTextures {
    /// Ends a [`DetachedFrame`] after its passes were recorded: records the feedback
    /// readback into `encoder`, which the caller submits after those passes and then
    /// calls [`VirtualTextures::submitted`]. Returns the frame's statistics.
    pub fn end_detached(
        &mut self,
        mut frame: DetachedFrame,
        encoder: &mut wgpu::CommandEncoder,
    ) -> StreamFrame {
        self.end_feedback(encoder, frame.number);
        frame.ended = true;
        std::mem::take(&mut frame.stats)
    }

    /// After frame `number`'s passes: resolves the feedback target (the view shown,
    /// counted), compacts and copies the feedback, and the predicted view's.
    fn end_feedback(&mut self, encoder: &mut wgpu::CommandEncoder, number: u64) {
        self.feedback_targets.resolve(encoder, true);
        self.feedback.end(encoder, number, self.feedback_targets.counts());
        if let Some(prediction) = self.prediction.as_mut() {
            prediction.end(encoder, number);
        }
    }

    /// Starts mapping the readback recorded by [`VirtualTextures::end_detached`]
    /// (never waited on): call it once the encoder holding it was submitted.
    pub fn submitted(&mut self) {
        self.feedback.after_submit();
        if let Some(prediction) = self.prediction.as_mut() {
            prediction.after_submit();
        }
        self.table_unconfirmed = false;
    }
}

impl Drop for VtFrame<'_> {
    fn drop(&mut self) {
        if !self.finished {
            tracing::warn!(frame = self.number, "a VtFrame was dropped without finish: its feedback is lost");
        }
    }
}
