//! The streaming loop of one frame, without a GPU: the [`Streamer`] takes the frame's
//! read-back feedback and timings and returns a [`FramePlan`] (texture uploads,
//! page-table writes, shader parameters, statistics) for the renderer to execute.
//!
//! It owns every decision: the needed set over the feedback window, residency and the
//! page-table mirror, loader requests and their renewal and cancellation (one
//! [`Staleness`] policy), neighbour and region prefetch, the oversubscription mip bias,
//! the adaptive upload budget, request-to-resident timing and the fully-resident signal.
//!
//! By concern: this file holds the [`Streamer`] type, the plan's types and the settings
//! changed between frames; `config.rs` its settings, errors and shared streaming;
//! `build.rs` starting one; `frame.rs` one frame's decisions; `production.rs` those of
//! a produced atlas (runtime virtual textures), whose misses are drawn, not loaded.

use std::sync::Arc;

// std's `Instant` panics in the browser; this one is std's on native.
use web_time::Instant;

use crate::format::atlas::Atlas;
use crate::format::tile::{TileId, TileMap, TileSet};
use crate::stream::atlas_loader::{AtlasLoader, StackedLoader};
use crate::stream::feedback::FeedbackLayout;
use crate::stream::host_cache::HostCache;
use crate::stream::loader::{
    LoadError, LoadOutcome, LoaderConfig, LoaderPool, LoaderThreads, TileLoader, default_loader_threads,
};
use crate::stream::pool_layout::PoolLayout;
use crate::stream::produce::{ProduceJob, Production, ProductionConfig, ProductionStats};
use crate::stream::residency::{Residency, ResidencyConfig, Upload};
use crate::stream::schedule::{
    BiasConfig, BiasInput, BudgetConfig, MipBiasController, UploadBudgetController, neighbours, region_tiles,
};
use crate::stream::staging::{StagedTile, StagingRing};
use crate::stream::stats::{StatsSnapshot, StreamFrame, TierStats};

mod build;
mod config;
mod frame;
mod production;

use config::*;
pub use config::{
    COARSEST_RETRY, FEEDBACK_STRIDES, SharedStreaming, Staleness, StreamerConfig, StreamerError,
};
use frame::*;

/// Frames a loaded tile keeps its staging record while it waits for a slot (see
/// [`Streamer::set_staging`]).
pub const STAGED_WAIT_FRAMES: u64 = 2;

/// [`STAGED_WAIT_FRAMES`] while a burst slice caps the uploads
/// ([`StreamerConfig::upload_slice_ms`]): a burst then waits for its slots by design,
/// for as many frames as it has slices. A tile that lost its record is copied from its
/// bytes on the render thread, about 15 µs more per 136² RGBA8 tile on an H100 than a
/// staged one (BENCHMARKS.md, issue 45), and the slice's price follows.
pub const SLICED_STAGED_WAIT_FRAMES: u64 = 16;

/// A tile that was unavailable for now (see [`Streamer`]'s retries).
#[derive(Clone, Copy, Debug)]
struct Unavailable {
    /// The frame from which it may be asked for again; `None` once it may be.
    retry_at: Option<u64>,
    /// Transient failures in a row.
    failures: u32,
    /// The frame of the last one.
    failed_at: u64,
}

/// Loader threads of a remote atlas when none are asked for (at least one per core but
/// one): each blocks on one range request, so this is the number of requests in flight.
pub const REMOTE_LOADER_THREADS: usize = 16;

/// Frames a tile that was unavailable (a remote atlas' network or server failed) waits
/// before it is asked for again; doubled with each failure in a row.
pub const RETRY_FRAMES: u64 = 8;

/// The longest such wait, frames.
pub const MAX_RETRY_FRAMES: u64 = 240;

/// One frame's feedback as read back from the GPU: the bitset's non-zero words.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseFeedback {
    /// The frame that recorded it.
    pub frame: u64,
    /// `(word index, word bits)` of the non-zero words, in any order.
    pub pairs: Vec<(u32, u32)>,
}

/// What one frame hands the streamer.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameInput<'a> {
    /// This frame's number: one more than the previous call's.
    pub frame: u64,
    /// The newest feedback that arrived since the last call, if any.
    pub feedback: Option<&'a SparseFeedback>,
    /// Feedback of a view the caller predicts for the coming frames (a camera
    /// extrapolated along its motion, or the next stretch of a known path), if any.
    /// Its tiles are requested at the lowest priority, as prefetches: they take only
    /// free slots or slots of tiles the current view does not need, and a prediction
    /// not repeated goes stale and is cancelled like any prefetch.
    pub predicted: Option<&'a SparseFeedback>,
    /// Wall time of the previous frame, ms (for the adaptive upload budget).
    pub last_frame_ms: Option<f64>,
    /// Time the renderer spent executing the previous plan's uploads, ms.
    pub last_upload_ms: f64,
    /// GPU time of an earlier frame's uploads that arrived since the last call
    /// (milliseconds, tiles), for [`StreamerConfig::upload_slice_ms`].
    pub upload_gpu: Option<(f64, usize)>,
}

/// Values the shaders need this frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShaderParams {
    /// Mip bias in effect: the configured bias plus the automatic one.
    pub mip_bias: f32,
    /// `stride − 1`: a pixel writes feedback when `(x & mask, y & mask)` equals the phase.
    pub feedback_mask: u32,
    /// Which pixel of each block writes this frame: `x | (y << 8)`.
    pub feedback_phase: u32,
}

/// One entry range of the page table to copy to the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageTableWrite {
    /// Index of the first entry.
    pub first: usize,
    /// The entries from `first` on.
    pub entries: Vec<u32>,
}

/// Everything the renderer does for one frame, in order: draw `produce` into their
/// slots (a produced atlas; level 0 of every pool of a stack), write `uploads` into the
/// pool (each tile's bytes split by [`Streamer::part_lengths`] over the pools of a
/// stack), make `level_ones`, then apply `page_table_writes` or `page_table_jobs`, then
/// set `shader`.
#[derive(Clone, Debug)]
pub struct FramePlan {
    /// Texture writes, coarse mips first.
    pub uploads: Vec<Upload>,
    /// The level-1 copies of the hardware trilinear path, made after the uploads
    /// ([`crate::stream::level_one`]).
    pub level_ones: Vec<crate::stream::level_one::LevelOne>,
    /// Page-table ranges changed by this plan's uploads and evictions (none with a
    /// complete page table).
    pub page_table_writes: Vec<PageTableWrite>,
    /// With a complete page table ([`StreamerConfig::complete_page_table`]): the
    /// rectangles of entries the GPU rewrites for this plan's uploads and evictions,
    /// run after the uploads and before drawing.
    pub page_table_jobs: crate::stream::complete_table::TableJobs,
    /// Tiles of a produced atlas to draw this frame ([`crate::stream::produce`]),
    /// before level 1 is made (`level_ones` holds theirs and their resident children's)
    /// and before the page table is written (new tiles are resident in it from this
    /// plan on; refreshed ones keep their entry and show their old texels until
    /// drawn); empty for an atlas read from a file. Within
    /// [`StreamFrame::production_budget`], but for the first plan, which draws the
    /// coarsest tile of every layer whatever the budget.
    pub produce: Vec<crate::stream::produce::ProduceJob>,
    /// Shader parameters for this frame.
    pub shader: ShaderParams,
    /// What streaming did this frame (`upload_ms` is the renderer's to fill in).
    pub stats: StreamFrame,
}

/// Where a streamer's loader threads come from.
#[derive(Clone, Copy)]
enum Threads<'a> {
    /// Its own, as [`StreamerConfig::loader_threads`] and `loader_stack_bytes` say.
    Own,
    /// None: a produced atlas loads nothing (its pool runs on external threads that
    /// no job ever reaches).
    None,
    /// Shared with other streamers.
    Shared(&'a Arc<LoaderThreads>),
}

/// The whole streaming loop for one atlas; see the module documentation.
pub struct Streamer {
    /// The atlas streamed from, when there is one (not in simulations).
    atlas: Option<Arc<Atlas>>,
    layout: FeedbackLayout,
    residency: Residency,
    loader: LoaderPool,
    cache: Arc<HostCache>,
    part_lengths: Vec<usize>,
    /// The pool formats the loader hands out (and the host cache holds).
    targets: Vec<crate::format::codec::TargetFormat>,
    stacked: bool,
    config: StreamerConfig,
    bias: MipBiasController,
    budget: Option<UploadBudgetController>,
    /// The cap that spreads bursts ([`StreamerConfig::upload_slice_ms`]).
    slice: Option<crate::stream::upload_slice::UploadSlice>,
    /// Bytes of one tile over every stacked pool, for the byte budget.
    tile_bytes: u64,
    /// The last stride² readbacks: their union is what the view wants (requests, the
    /// resident fraction).
    recent_feedback: crate::stream::feedback_window::FeedbackWindow,
    /// Whether any feedback was taken in yet.
    seen_feedback: bool,
    last_fraction: f64,
    last_pool_full: bool,
    last_uploads: usize,
    /// When each outstanding request was made: feedback frame and CPU time.
    request_times: TileMap<(u64, Instant)>,
    /// Loaded tiles waiting for a slot whose bytes a loader thread also wrote into
    /// staging memory ([`Streamer::set_staging`]).
    staged: TileMap<(StagedTile, u64)>,
    reported_failures: TileSet,
    /// Tiles that were unavailable for now (a remote atlas' network failed).
    retry_at: TileMap<Unavailable>,
    /// Whether an unavailable tile was logged since the last delivered one.
    unavailable_logged: bool,
    /// Whether the atlas' replacement on its server was logged (once).
    replaced_logged: bool,
    /// The network counters of the previous frame (per-frame figures are the difference).
    last_network: Option<crate::format::atlas::NetworkStats>,
    /// A produced atlas' production queue and stale tiles (`None`: tiles are loaded).
    production: Option<Production>,
    frame: u64,
    frozen: bool,
}

impl Streamer {
    /// Has the loader threads write each loaded tile into `staging` (laid out for the
    /// pools' copies; see [`StagingRing`]), so that the uploads of a plan carry
    /// [`Upload::staged`] and the renderer only records copies. `None` stops it and
    /// releases what is staged.
    pub fn set_staging(&mut self, staging: Option<Arc<StagingRing>>) {
        self.loader.set_staging(staging);
        self.staged.clear();
    }

    /// Tiles waiting for a slot that are held in staging memory.
    pub fn staged_waiting(&self) -> usize {
        self.staged.len()
    }

    /// The shader parameters of `frame`: mip bias and the rotating feedback pixel.
    pub fn shader_params(&self, frame: u64) -> ShaderParams {
        let stride = self.config.feedback_stride;
        let k = (frame % u64::from(stride * stride)) as u32;
        ShaderParams {
            mip_bias: self.mip_bias(),
            feedback_mask: stride - 1,
            feedback_phase: (k % stride) | ((k / stride) << 8),
        }
    }

    /// The mip bias in effect: the configured one plus the automatic one.
    pub fn mip_bias(&self) -> f32 {
        self.config.mip_bias + if self.config.auto_mip_bias { self.bias.bias() } else { 0.0 }
    }

    /// The automatic oversubscription bias (see [`StreamerConfig::auto_mip_bias`]).
    pub fn auto_mip_bias(&self) -> f32 {
        self.bias.bias()
    }

    /// Changes the configured mip bias from the next frame on.
    pub fn set_mip_bias(&mut self, bias: f32) {
        self.config.mip_bias = bias;
    }

    /// Changes the feedback resolution (one of [`FEEDBACK_STRIDES`]) and the bias
    /// controller's settle window with it, so a lagging needed set cannot raise the
    /// bias twice.
    pub fn set_feedback_stride(&mut self, stride: u32) -> Result<(), StreamerError> {
        let stride = checked_stride(stride)?;
        self.config.feedback_stride = stride;
        self.bias.set_settle_frames(settle_frames(stride));
        Ok(())
    }

    /// Changes the most tiles uploaded per frame. With an adaptive budget this is its
    /// ceiling: the budget adapts below it.
    pub fn set_upload_budget(&mut self, tiles: usize) {
        let tiles = tiles.max(1);
        self.config.max_uploads_per_frame = tiles;
        match self.budget.as_mut() {
            Some(b) => {
                b.set_max_tiles(tiles);
                let now = b.budget();
                self.residency.set_upload_budget(now.tiles, now.bytes.max(1));
            }
            None => self.residency.set_upload_budget(tiles, self.config.max_upload_bytes_per_frame),
        }
    }

    /// Adapts the upload budget to this frame time from the next frame on, or, with
    /// `None`, uses the fixed `max_uploads_per_frame`: for a caller whose frame time
    /// stops meaning anything, such as a loop paced by vsync (the time between frames
    /// is the display's, whatever the work). Fails for a time that is not a positive
    /// number of milliseconds.
    pub fn set_target_frame_ms(&mut self, target: Option<f64>) -> Result<(), StreamerError> {
        let config = StreamerConfig { target_frame_ms: target, ..self.config.clone() };
        config.check()?;
        if config.target_frame_ms == self.config.target_frame_ms {
            return Ok(());
        }
        self.budget = config.budget_controller(self.tile_bytes);
        self.config = config;
        self.set_upload_budget(self.config.max_uploads_per_frame);
        Ok(())
    }

    /// The upload budget (tiles) the next frame starts from.
    pub fn upload_budget(&self) -> usize {
        self.residency.config().max_uploads_per_frame
    }

    /// Changes the host cache budget, evicting least recently used tiles until it fits.
    ///
    /// With a [`SharedStreaming`] cache this is the shared budget: it changes for every
    /// streamer on it (whose [`Streamer::config`] does not show it).
    pub fn set_host_budget_mib(&mut self, mib: u32) {
        self.config.host_cache_mib = mib;
        self.cache.set_budget(u64::from(mib) << 20);
    }

    /// While frozen, arriving feedback is ignored: nothing new is requested (a
    /// debugging aid).
    pub fn set_frozen(&mut self, frozen: bool) {
        self.frozen = frozen;
    }

    /// Whether feedback is frozen.
    pub fn frozen(&self) -> bool {
        self.frozen
    }

    /// Warms a region before it is seen: the tiles covering `rect` (`[x, y, width,
    /// height]` in mip-0 texels of `layer`) at `mip`, with their ancestors, at the
    /// lowest priority. They go into free or unneeded slots only and are forgotten
    /// after [`Staleness::prefetch_frames`] unless the view needs them. Returns the
    /// number of tiles requested.
    pub fn prefetch_region(&mut self, layer: u16, rect: [u32; 4], mip: u8) -> usize {
        let owner = if self.stacked { 0 } else { layer };
        let tiles = region_tiles(&self.layout, owner, rect, mip);
        let requests = self.residency.prefetch(self.frame, &tiles, 0);
        self.request_many(&requests, self.frame)
    }

    /// Evicts every unpinned tile from the pool; they stream in again.
    pub fn flush_vram(&mut self) {
        self.residency.flush();
    }

    /// Empties the host cache (this streamer's partition only, with a
    /// [`SharedStreaming`] cache); tiles are read from disk again.
    pub fn flush_host_cache(&self) {
        self.cache.clear();
    }

    /// Fraction (0 to 1) of the tiles the latest feedback window wants that are
    /// resident themselves (see [`StreamFrame::resident_fraction`]); `None` until the
    /// first feedback has been taken in, since until then nothing is known to be visible.
    pub fn resident_fraction(&self) -> Option<f64> {
        self.seen_feedback.then(|| self.residency.resident_fraction(self.recent_feedback.tiles()))
    }

    /// Whether feedback has arrived and everything it wants is resident at its wanted
    /// resolution. False before the first feedback: nothing is known to be visible yet.
    pub fn fully_resident(&self) -> bool {
        self.resident_fraction().is_some_and(|f| f >= 1.0)
    }

    /// Statistics of every tier; `slot_bytes` is one slot over every pool. With a
    /// [`SharedStreaming`] cache the host tier and its counters are the shared
    /// cache's, every streamer's together.
    pub fn stats(&self, slot_bytes: u64) -> StatsSnapshot {
        let mut s = match &self.atlas {
            Some(atlas) => StatsSnapshot::gather(atlas, &self.cache, Some(&self.loader)),
            None => StatsSnapshot::default(),
        };
        if self.production.is_some() {
            // A produced atlas has nothing on disk.
            s.disk = TierStats::default();
        }
        s.vram_counters = self.residency.vram_counters();
        s.vram =
            TierStats { tiles: s.vram_counters.slots_used, bytes: s.vram_counters.slots_used * slot_bytes };
        s
    }

    /// Bytes of each pool's part of a loaded tile, in pool order.
    pub fn part_lengths(&self) -> &[usize] {
        &self.part_lengths
    }

    /// The oversubscription mip-bias controller.
    pub fn bias(&self) -> &MipBiasController {
        &self.bias
    }

    /// The residency manager (page-table mirror, slots, counters).
    pub fn residency(&self) -> &Residency {
        &self.residency
    }

    /// Jobs that rebuild a complete page table from the residency as it is, whatever
    /// the GPU buffer holds: for a renderer whose earlier jobs may never have run (a
    /// frame begun and never submitted). Empty for the shallow table.
    pub fn rebuild_page_table_jobs(&mut self) -> crate::stream::complete_table::TableJobs {
        let table = self.residency.page_table_mut();
        if table.is_complete() { table.rebuild_jobs() } else { Default::default() }
    }

    /// The host page cache: this streamer's partition of it with [`Streamer::new_shared`].
    pub fn host_cache(&self) -> &Arc<HostCache> {
        &self.cache
    }

    /// The loader pool.
    pub fn loader(&self) -> &LoaderPool {
        &self.loader
    }

    /// The tile-index mapping of the owning layers.
    pub fn layout(&self) -> &FeedbackLayout {
        &self.layout
    }

    /// The settings in use (after clamping and changes).
    pub fn config(&self) -> &StreamerConfig {
        &self.config
    }

    /// The number of the latest frame.
    pub fn current_frame(&self) -> u64 {
        self.frame
    }
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamer")
            .field("atlas", &self.atlas.as_ref().map(|a| a.path()))
            .field("frame", &self.frame)
            .field("resident", &self.residency.resident_count())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
