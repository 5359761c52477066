//! Virtual textures on the GPU: the tile pools, the page-table buffer, the feedback
//! bitset and one parameter block per layer. The decisions of each frame come from
//! the core's [`Streamer`] as a [`FramePlan`]; this file only executes plans.
//!
//! One frame: [`VirtualTextures::begin`] (before the passes that sample virtual
//! textures), then [`VtFrame::finish`] (after them; it submits the encoder, and fails
//! once the device is lost).
//!
//! By concern: this file holds the type and what it answers (layers, bind groups,
//! statistics, settings changed between frames); `config.rs` its settings
//! ([`VtConfig`]); `build.rs` making pools, page table, staging and bindings (at
//! [`VirtualTextures::new`] and [`VirtualTextures::set_pool_mib`]); `execute.rs` a
//! frame's start and the execution of the streamer's plan; `frame.rs` the frame guard
//! ([`VtFrame`], [`DetachedFrame`]) and the end of a frame.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use web_time::Instant;

use tessera_core::format::codec::TargetFormat;
use tessera_core::format::color::ColorSpace;
use tessera_core::stream::pool_layout::{GpuLimits, PoolLayout, Trilinear};
use tessera_core::stream::residency::Residency;
use tessera_core::stream::staging::{StagedTile, StagingCounters, StagingLayout};
use tessera_core::stream::stats::{StatsSnapshot, StreamFrame};
use tessera_core::stream::streamer::{
    FrameInput, FramePlan, SharedStreaming, SparseFeedback, Streamer, StreamerConfig,
};
use tessera_core::{Atlas, HostCache};

use crate::context::GpuContext;
use crate::error::RenderError;
use crate::feedback::Feedback;
use crate::feedback_target::{FeedbackAttachment, FeedbackTargets};
use crate::page_table::{PageTableBuffer, PageTableStorage};
use crate::page_table_update::TableUpdater;
use crate::params::{LayerBinding, Resources, ShaderProbe, VtParams, bind_group_layout, pool_sampler};
use crate::pool::{LevelOnes, TilePool, format_support};
use crate::prediction::Prediction;
use crate::produce::{Production, TileProducer};
use crate::staging::GpuStaging;
use crate::upload_timer::UploadTimer;

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

mod build;
mod config;
mod execute;
mod frame;
mod inputs;

pub use config::{DEFAULT_UPLOAD_SLICE_MS, UploadSlicing, VtConfig};
pub use frame::{DetachedFrame, VtFrame};

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
    /// The benchmark's upload timestamps ([`VirtualTextures::time_uploads`]).
    upload_timestamps: Option<(wgpu::QuerySet, u32)>,
    /// The GPU time of each frame's uploads, for the burst slice
    /// ([`VtConfig::upload_slicing`]).
    upload_timer: Option<UploadTimer>,
    /// The producer of a produced atlas ([`VirtualTextures::with_producer`]).
    production: Option<Production>,
    /// The tiles the last executed plan made resident or drew again
    /// ([`VirtualTextures::arrived`]).
    arrived: Vec<tessera_core::format::tile::TileId>,
    /// Tiles of an input (layer of this atlas, the input's tile) that tiles drawn from
    /// its fallback wait for ([`VirtualTextures::invalidate_arrivals`]).
    waiting: std::collections::HashSet<(u16, tessera_core::format::tile::TileId)>,
    /// The layout of that input's first layer.
    input_layout: Option<tessera_core::format::tile::TextureLayout>,
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
    /// Why the pool is not in the adapter's best format, when so.
    format_note: Option<String>,
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
    /// group of its own (a material's), laid out by [`crate::shaders::vt_layout_entries`]
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

    /// The format of every pool (one, or one per layer of a stack): what a reference
    /// built from the pools' own texels decodes tiles as.
    pub fn pool_targets(&self) -> Vec<tessera_core::format::codec::TargetFormat> {
        self.pools.iter().map(TilePool::target).collect()
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
        self.config.streaming.mip_bias = bias;
        self.streamer.set_mip_bias(bias);
    }

    /// The automatic oversubscription bias in effect (see `VtConfig::streaming`, `auto_mip_bias`).
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

    /// Runtime virtual textures ([`VirtualTextures::with_producer`]): marks the resident
    /// tiles of `layer` that cover `rect` (x, y, width, height in mip-0 texels) stale at
    /// every mip, after the application changed what its producer draws there (a decal
    /// placed, the terrain edited). Those the view needs are drawn again in place
    /// within a bounded number of frames, the stale texels shown until then (never a
    /// hole or a coarser mip); the others are evicted. Returns how many were marked;
    /// 0 for an atlas read from a file.
    pub fn invalidate(&mut self, layer: u16, rect: [u32; 4]) -> usize {
        self.streamer.invalidate(layer, rect)
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
        self.config.streaming.feedback_stride = stride;
        Ok(())
    }

    /// Changes the most tiles uploaded per frame; with an adaptive budget
    /// (`VtConfig::streaming`, `target_frame_ms`) this is its ceiling.
    pub fn set_upload_budget(&mut self, tiles: usize) {
        self.config.streaming.max_uploads_per_frame = tiles.max(1);
        self.streamer.set_upload_budget(tiles);
    }

    /// Changes the host cache budget, evicting least recently used tiles until it fits.
    pub fn set_host_budget_mib(&mut self, mib: u32) {
        self.config.streaming.host_cache_mib = mib;
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

    /// Why the pool's format is not the adapter's best, when that is so (Basis atlases
    /// on a software adapter get an RGBA8 pool): a line for report headers.
    pub fn pool_format_note(&self) -> Option<&str> {
        self.format_note.as_deref()
    }

    /// Whether drawers should force early depth tests on `device` (see
    /// [`VtConfig::early_depth`]).
    pub fn early_depth_on(&self, device: &wgpu::Device) -> bool {
        self.config.early_depth && device.features().contains(wgpu::Features::SHADER_EARLY_DEPTH_TEST)
    }

    /// Whether the built-in scene drawers write feedback to the colour target on `ctx`'s
    /// device (else to the storage bitset, with early depth forced where
    /// [`VirtualTextures::early_depth_on`]): [`VtConfig::feedback_target`], except on a
    /// hardware GPU that can force early depth, unless
    /// [`VtConfig::feedback_target_with_early_depth`].
    pub fn builtin_feedback_target(&self, ctx: &crate::GpuContext) -> bool {
        let c = &self.config;
        let software = ctx.info.device_type == wgpu::DeviceType::Cpu;
        c.feedback_target
            && (software || c.feedback_target_with_early_depth || !self.early_depth_on(&ctx.device))
    }

    /// Adapts the upload budget to this frame time (ms between [`VirtualTextures::begin`]
    /// calls) from the next frame on, or uses the fixed budget with `None`: set `None`
    /// while frames are paced by vsync, where the time between frames is the display's
    /// and says nothing about the room uploads have. Fails with [`RenderError::Config`]
    /// for a time that is not a positive number of milliseconds.
    pub fn set_target_frame_ms(&mut self, target: Option<f64>) -> Result<(), RenderError> {
        self.streamer.set_target_frame_ms(target).map_err(|e| RenderError::Config(e.to_string()))?;
        self.config.streaming.target_frame_ms = target;
        Ok(())
    }

    /// The settings in use.
    pub fn config(&self) -> &VtConfig {
        &self.config
    }
}
