//! The streaming loop of one frame, without a GPU: the [`Streamer`] takes the frame's
//! read-back feedback and timings and returns a [`FramePlan`] (texture uploads,
//! page-table writes, shader parameters, statistics) for the renderer to execute.
//!
//! It owns every decision: the needed set over the feedback window, residency and the
//! page-table mirror, loader requests and their renewal and cancellation (one
//! [`Staleness`] policy), neighbour and region prefetch, the oversubscription mip bias,
//! the adaptive upload budget, request-to-resident timing and the fully-resident signal.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::format::atlas::Atlas;
use crate::format::tile::{TileId, TileMap, TileSet};
use crate::stream::atlas_loader::{AtlasLoader, StackedLoader};
use crate::stream::feedback::FeedbackLayout;
use crate::stream::host_cache::HostCache;
use crate::stream::loader::{
    LoadError, LoadOutcome, LoaderConfig, LoaderPool, LoaderThreads, TileLoader, default_loader_threads,
};
use crate::stream::pool_layout::PoolLayout;
use crate::stream::residency::{Residency, ResidencyConfig, Upload};
use crate::stream::schedule::{
    BiasConfig, BiasInput, BudgetConfig, MipBiasController, UploadBudgetController, neighbours, region_tiles,
};
use crate::stream::staging::{StagedTile, StagingRing};
use crate::stream::stats::{StatsSnapshot, StreamFrame, TierStats};

/// Feedback strides the shader supports: one pixel in every `n × n` block writes.
pub const FEEDBACK_STRIDES: [u32; 4] = [1, 2, 4, 8];

/// When an outstanding request stops being worth its work. The one place these rules
/// live: the streamer renews what the view still wants each frame and cancels the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staleness {
    /// A queued load that no feedback asked for in more than this many frames is
    /// cancelled before a loader thread spends time on it.
    pub request_frames: u64,
    /// A prefetch (neighbour or region) that nothing renewed and no feedback needed for
    /// this many frames is forgotten: cancelled if queued, dropped if loaded.
    pub prefetch_frames: u64,
}

impl Default for Staleness {
    fn default() -> Self {
        Self { request_frames: 8, prefetch_frames: 60 }
    }
}

/// Settings of a [`Streamer`].
#[derive(Clone, Debug, PartialEq)]
pub struct StreamerConfig {
    /// Host page cache budget in MiB (ignored by [`Streamer::new_shared`], whose cache
    /// is the shared one's).
    pub host_cache_mib: u32,
    /// Loader threads (0 = one per core but one, at least 1; ignored by [`Streamer::new_shared`], whose
    /// threads are the shared ones).
    pub loader_threads: usize,
    /// Most tiles uploaded per frame; with `target_frame_ms`, the ceiling of the
    /// adaptive budget.
    pub max_uploads_per_frame: usize,
    /// Most bytes uploaded per frame.
    pub max_upload_bytes_per_frame: u64,
    /// One pixel in every `n × n` block writes feedback each frame (one of
    /// [`FEEDBACK_STRIDES`]).
    pub feedback_stride: u32,
    /// Added to every level of detail (positive = blurrier, fewer tiles).
    pub mip_bias: f32,
    /// Raise a global mip bias with hysteresis while the view needs more tiles than
    /// the pool holds, and lower it when room comes back.
    pub auto_mip_bias: bool,
    /// Adapt the per-frame upload budget to this frame time (ms); `None`: the fixed
    /// `max_uploads_per_frame`.
    pub target_frame_ms: Option<f64>,
    /// Also request the same-mip neighbours of requested tiles, at the lowest priority,
    /// into free or unneeded slots only.
    pub prefetch_neighbours: bool,
    /// When outstanding requests are cancelled.
    pub staleness: Staleness,
    /// Stack size of each loader thread in bytes (`None`: the platform's default;
    /// ignored by [`Streamer::new_shared`]).
    pub loader_stack_bytes: Option<usize>,
    /// How long the coarsest tiles (loaded before the first frame) are waited for while
    /// their reads are unavailable for now (a remote atlas' server briefly unreachable
    /// or failing): tried again every [`COARSEST_RETRY`] within it, then an error.
    pub coarsest_patience: std::time::Duration,
    /// Keep a complete page table (every entry valid at any depth), updated by the GPU
    /// from [`FramePlan::page_table_jobs`], instead of uploading entries with shallow
    /// fallbacks ([`FramePlan::page_table_writes`]).
    pub complete_page_table: bool,
}

/// How often the coarsest tiles are tried again within
/// [`StreamerConfig::coarsest_patience`].
pub const COARSEST_RETRY: std::time::Duration = std::time::Duration::from_millis(1100);

impl StreamerConfig {
    /// Checks every setting's range: `Err` names the setting and its allowed range.
    /// [`Streamer::new`] and [`Streamer::new_shared`] refuse a configuration that
    /// fails this.
    pub fn validate(&self) -> Result<(), String> {
        if !FEEDBACK_STRIDES.contains(&self.feedback_stride) {
            return Err(format!(
                "feedback_stride {} is not one of {FEEDBACK_STRIDES:?}",
                self.feedback_stride
            ));
        }
        if !self.mip_bias.is_finite() || self.mip_bias.abs() > 16.0 {
            return Err(format!("mip_bias {} is outside -16..=16", self.mip_bias));
        }
        if self.max_uploads_per_frame == 0 || self.max_upload_bytes_per_frame == 0 {
            return Err("max_uploads_per_frame and max_upload_bytes_per_frame must be at least 1".into());
        }
        if let Some(ms) = self.target_frame_ms.filter(|ms| !(ms.is_finite() && *ms > 0.0)) {
            return Err(format!("target_frame_ms {ms} must be a positive number of milliseconds"));
        }
        Ok(())
    }
}

impl Default for StreamerConfig {
    fn default() -> Self {
        Self {
            host_cache_mib: 256,
            loader_threads: 0,
            max_uploads_per_frame: 256,
            max_upload_bytes_per_frame: 64 << 20,
            feedback_stride: 2,
            mip_bias: 0.0,
            auto_mip_bias: true,
            target_frame_ms: None,
            prefetch_neighbours: true,
            staleness: Staleness::default(),
            loader_stack_bytes: None,
            coarsest_patience: std::time::Duration::from_secs(10),
            complete_page_table: false,
        }
    }
}

/// Why a [`Streamer`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamerError {
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
    /// The operating system refused a loader thread.
    #[error("cannot start the tile loader threads: {0}")]
    LoaderThreads(#[source] std::io::Error),
    /// The coarsest tile of a layer cannot be read, so nothing could be shown.
    #[error("{}: the coarsest tile of a layer cannot be read, so nothing could be shown: {source}", atlas.display())]
    CoarsestTile {
        /// The atlas file.
        atlas: std::path::PathBuf,
        /// What the loader said.
        #[source]
        source: LoadError,
    },
}

/// Frames a loaded tile keeps its staging record while it waits for a slot (see
/// [`Streamer::set_staging`]).
pub const STAGED_WAIT_FRAMES: u64 = 2;

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

/// Everything the renderer does for one frame, in order: write `uploads` into the pool
/// (each tile's bytes split by [`Streamer::part_lengths`] over the pools of a stack),
/// then `page_table_writes`, then set `shader`.
#[derive(Clone, Debug)]
pub struct FramePlan {
    /// Texture writes, coarse mips first.
    pub uploads: Vec<Upload>,
    /// Page-table ranges changed by this plan's uploads and evictions (none with a
    /// complete page table).
    pub page_table_writes: Vec<PageTableWrite>,
    /// With a complete page table ([`StreamerConfig::complete_page_table`]): the
    /// rectangles of entries the GPU rewrites for this plan's uploads and evictions,
    /// run after the uploads and before drawing.
    pub page_table_jobs: crate::stream::complete_table::TableJobs,
    /// Shader parameters for this frame.
    pub shader: ShaderParams,
    /// What streaming did this frame (`upload_ms` is the renderer's to fill in).
    pub stats: StreamFrame,
}

/// One host page cache and one set of loader threads for several [`Streamer`]s, made
/// with [`Streamer::new_shared`].
///
/// Each streamer gets its own partition of the cache (its tile ids never collide with
/// another atlas's) and its own loader queue on the shared threads (which take turns
/// between streamers); the partitions compete for the one budget, least recently used
/// tile first. Clones share the same cache and threads.
#[derive(Clone, Debug)]
pub struct SharedStreaming {
    cache: Arc<HostCache>,
    threads: Arc<LoaderThreads>,
}

impl SharedStreaming {
    /// A host cache of `host_cache_mib` MiB and `loader_threads` loader threads (0 = one
    /// per core).
    pub fn new(host_cache_mib: u32, loader_threads: usize) -> Result<Self, StreamerError> {
        let threads = LoaderThreads::new(loader_threads, LoaderConfig::default())
            .map_err(StreamerError::LoaderThreads)?;
        Ok(Self::from_parts(Arc::new(HostCache::new(u64::from(host_cache_mib) << 20)), threads))
    }

    /// Shares `cache`'s store and `threads` (made with their own settings, such as a
    /// stack size).
    pub fn from_parts(cache: Arc<HostCache>, threads: Arc<LoaderThreads>) -> Self {
        Self { cache, threads }
    }

    /// The root view of the shared cache: its budget and counters are every
    /// streamer's; streamers cache their tiles in partitions of their own.
    pub fn host_cache(&self) -> &Arc<HostCache> {
        &self.cache
    }

    /// The shared loader threads.
    pub fn loader_threads(&self) -> &Arc<LoaderThreads> {
        &self.threads
    }
}

/// Where a streamer's loader threads come from.
#[derive(Clone, Copy)]
enum Threads<'a> {
    /// Its own, as [`StreamerConfig::loader_threads`] and `loader_stack_bytes` say.
    Own,
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
    recent_feedback: VecDeque<Vec<TileId>>,
    /// The tiles the view wants (the feedback window), for the resident fraction.
    wanted: Vec<TileId>,
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
    frame: u64,
    frozen: bool,
}

impl Streamer {
    /// Starts streaming `atlas` into a pool shaped as `pool`: host cache, loader
    /// threads, residency. The coarsest tile of every layer is loaded before this
    /// returns; the first [`Streamer::frame`] uploads it (nothing is ever missing).
    pub fn new(atlas: Arc<Atlas>, pool: &PoolLayout, config: StreamerConfig) -> Result<Self, StreamerError> {
        let cache = Arc::new(HostCache::new(u64::from(config.host_cache_mib) << 20));
        // A remote atlas waits on round trips, not on the CPU: by default it gets enough
        // loader threads to keep REMOTE_LOADER_THREADS requests in flight.
        let config = if config.loader_threads == 0 && atlas.is_remote() {
            StreamerConfig { loader_threads: REMOTE_LOADER_THREADS.max(default_loader_threads()), ..config }
        } else {
            config
        };
        Self::open(atlas, pool, config, cache, Threads::Own)
    }

    /// As [`Streamer::new`], with the host cache and loader threads of `shared`: the
    /// tiles go into a new partition of the shared cache, and the requests into a queue
    /// of this streamer's on the shared threads. `config.host_cache_mib`,
    /// `config.loader_threads` and `config.loader_stack_bytes` are ignored (and kept
    /// as given in [`Streamer::config`]); the streamer's requests are cancelled after
    /// its own [`Staleness::request_frames`]. Dropping the streamer drops its
    /// partition's tiles and its queue; the shared parts go with their last user.
    pub fn new_shared(
        atlas: Arc<Atlas>,
        pool: &PoolLayout,
        config: StreamerConfig,
        shared: &SharedStreaming,
    ) -> Result<Self, StreamerError> {
        let cache = Arc::new(shared.host_cache().new_partition());
        Self::open(atlas, pool, config, cache, Threads::Shared(shared.loader_threads()))
    }

    /// A streamer for the same atlas into a pool of another shape (the renderer resized
    /// its pool), with the same settings, on the same loader threads and, when the pool
    /// formats are unchanged, the same host cache: tiles decoded before are uploaded
    /// again from RAM, neither read nor transcoded. Residency starts over (only the
    /// coarsest tiles are resident); this streamer's queued loads are cancelled when it
    /// is dropped. Fails for a streamer without an atlas ([`Streamer::with_loader`]).
    pub fn reshaped(&self, pool: &PoolLayout) -> Result<Self, StreamerError> {
        let atlas = self.atlas.clone().ok_or_else(|| {
            StreamerError::Config("a streamer without an atlas file cannot move to another pool".into())
        })?;
        // A cache of another format's tiles would hand out wrongly sized bytes.
        let cache = if pool.targets == self.targets {
            self.cache.clone()
        } else {
            Arc::new(self.cache.new_partition())
        };
        let threads = self.loader.loader_threads().clone();
        let mut next = Self::open(atlas, pool, self.config.clone(), cache, Threads::Shared(&threads))?;
        next.set_frozen(self.frozen);
        Ok(next)
    }

    /// [`Streamer::new`] and [`Streamer::new_shared`] once the cache is chosen.
    fn open(
        atlas: Arc<Atlas>,
        pool: &PoolLayout,
        config: StreamerConfig,
        cache: Arc<HostCache>,
        threads: Threads<'_>,
    ) -> Result<Self, StreamerError> {
        config.validate().map_err(|what| StreamerError::Config(format!("StreamerConfig: {what}")))?;
        let tile_loader: Arc<dyn TileLoader> = if pool.stacked {
            Arc::new(StackedLoader::new(atlas.clone(), cache.clone(), &pool.targets))
        } else {
            Arc::new(AtlasLoader::with_target(atlas.clone(), cache.clone(), pool.targets[0]))
        };
        let mut streamer = Self::build(pool, config, cache, tile_loader, threads).map_err(|e| match e {
            StreamerError::CoarsestTile { source, .. } => {
                StreamerError::CoarsestTile { atlas: atlas.path().to_path_buf(), source }
            }
            other => other,
        })?;
        streamer.atlas = Some(atlas);
        Ok(streamer)
    }

    /// As [`Streamer::new`] with a tile loader of the caller's and no atlas file (tests
    /// and simulations inject corrupt, slow or synthetic tiles this way); `cache` is
    /// what [`Streamer::host_cache`] reports, and the disk tier of [`Streamer::stats`]
    /// stays empty.
    pub fn with_loader(
        pool: &PoolLayout,
        config: StreamerConfig,
        cache: Arc<HostCache>,
        tile_loader: Arc<dyn TileLoader>,
    ) -> Result<Self, StreamerError> {
        Self::build(pool, config, cache, tile_loader, Threads::Own)
    }

    /// Everything but the atlas: residency, the loader pool on `threads` and the
    /// coarsest tiles.
    fn build(
        pool: &PoolLayout,
        config: StreamerConfig,
        cache: Arc<HostCache>,
        tile_loader: Arc<dyn TileLoader>,
        threads: Threads<'_>,
    ) -> Result<Self, StreamerError> {
        let stride = checked_stride(config.feedback_stride)?;
        let layout = FeedbackLayout::new(&pool.owners);
        let mut residency = Residency::with_layout(
            layout.clone(),
            ResidencyConfig {
                slots_x: u16::try_from(pool.slots_x).unwrap_or(u16::MAX),
                slots_y: u16::try_from(pool.slots_y).unwrap_or(u16::MAX),
                max_uploads_per_frame: config.max_uploads_per_frame.max(1),
                max_upload_bytes_per_frame: config.max_upload_bytes_per_frame.max(1),
                complete_page_table: config.complete_page_table,
                ..ResidencyConfig::default()
            },
        );
        residency.set_prefetch_ttl(config.staleness.prefetch_frames);
        let loader = match threads {
            Threads::Own => {
                let loader_config = LoaderConfig {
                    cancel_after_frames: config.staleness.request_frames,
                    stack_bytes: config.loader_stack_bytes,
                };
                // 0 threads: one per core but one.
                let threads = LoaderThreads::new(config.loader_threads, loader_config)
                    .map_err(StreamerError::LoaderThreads)?;
                LoaderPool::on_threads(&threads, tile_loader.clone())
            }
            Threads::Shared(threads) => LoaderPool::on_threads(threads, tile_loader.clone())
                .with_cancel_after_frames(config.staleness.request_frames),
        };
        // The coarsest tile of every owning layer, loaded now so that it is never missing.
        let roots: Vec<TileId> = pool
            .owners
            .iter()
            .enumerate()
            .map(|(i, l)| TileId::new(i as u16, l.coarsest_mip(), 0, 0))
            .collect();
        let part_lengths = pool.part_lengths();
        let tile_bytes: usize = part_lengths.iter().sum();
        for (tile, _) in residency.on_feedback(0, &roots) {
            let start = Instant::now();
            let bytes = loop {
                match tile_loader.load(tile).and_then(|b| check_length(tile, b, tile_bytes)) {
                    // Unavailable for now: asked again, as every other tile would be.
                    Err(LoadError::Unavailable { reason, .. })
                        if start.elapsed() + COARSEST_RETRY <= config.coarsest_patience =>
                    {
                        tracing::warn!(
                            "{tile}, the coarsest tile, is unavailable for now ({reason}); trying again"
                        );
                        std::thread::sleep(COARSEST_RETRY);
                    }
                    other => {
                        break other.map_err(|source| StreamerError::CoarsestTile {
                            atlas: std::path::PathBuf::new(),
                            source,
                        })?;
                    }
                }
            };
            residency.on_loaded(tile, bytes);
        }
        let budget = config.target_frame_ms.map(|target| {
            UploadBudgetController::new(BudgetConfig {
                target_frame_ms: target,
                start_tiles: config.max_uploads_per_frame.max(1),
                max_tiles: config.max_uploads_per_frame.max(1),
                bytes_per_tile: tile_bytes as u64,
                ..BudgetConfig::default()
            })
        });
        Ok(Self {
            atlas: None,
            layout,
            residency,
            loader,
            cache,
            part_lengths,
            targets: pool.targets.clone(),
            stacked: pool.stacked,
            bias: MipBiasController::new(BiasConfig {
                settle_frames: settle_frames(stride),
                ..BiasConfig::default()
            }),
            budget,
            config: StreamerConfig { feedback_stride: stride, ..config },
            recent_feedback: VecDeque::new(),
            wanted: Vec::new(),
            seen_feedback: false,
            last_fraction: 1.0,
            last_pool_full: false,
            last_uploads: 0,
            request_times: TileMap::default(),
            staged: TileMap::default(),
            reported_failures: TileSet::default(),
            retry_at: TileMap::default(),
            unavailable_logged: false,
            replaced_logged: false,
            last_network: None,
            frame: 0,
            frozen: false,
        })
    }

    /// Runs one frame's decisions: takes in the feedback, requests missing tiles,
    /// renews still-wanted loads and cancels stale ones, takes finished loads, adjusts
    /// the mip bias and upload budget, and plans this frame's uploads. Never blocks on
    /// the disk or the loader threads.
    pub fn frame(&mut self, input: FrameInput<'_>) -> FramePlan {
        let t0 = Instant::now();
        let frame = input.frame;
        self.frame = frame;
        let mut out = StreamFrame::default();
        if let (Some(budget), Some(frame_ms)) = (self.budget.as_mut(), input.last_frame_ms) {
            let b = budget.update(frame_ms, input.last_upload_ms, self.last_uploads);
            self.residency.set_upload_budget(b.tiles, b.bytes.max(1));
        }
        out.upload_budget = self.residency.config().max_uploads_per_frame;
        match input.feedback.filter(|_| !self.frozen) {
            Some(fb) => self.take_feedback(frame, fb, &mut out),
            None => out.tiles_needed = self.residency.needed_count(),
        }
        if let Some(p) = input.predicted.filter(|_| !self.frozen) {
            out.predicted = self.take_prediction(frame, p);
        }
        for tile in self.residency.drop_stale_prefetch(frame) {
            self.loader.cancel(tile);
        }
        self.loader.cancel_stale(frame);
        self.take_results();
        self.retry_unavailable(frame);
        out.tiles_unavailable = self.retry_at.values().filter(|u| u.retry_at.is_some()).count();
        out.network = self.atlas.as_ref().and_then(|a| a.network_stats());
        out.network_frame = out.network.map(|now| now.since(&self.last_network.unwrap_or_default()));
        self.last_network = out.network;
        let staged = &self.staged;
        let mut plan = self
            .residency
            .plan_uploads_staged(frame, |t| staged.get(&t).map(|(s, _)| (s.chunk(), s.offset())));
        self.attach_staged(&mut plan.uploads);
        self.last_pool_full = plan.pool_full;
        self.note_uploads(frame, &plan.uploads, &mut out);
        let page_table_writes = self.page_table_writes();
        out.resident_vram = self.residency.resident_count();
        out.resident_host = self.cache.len();
        out.resident_fraction = self.residency.resident_fraction(&self.wanted);
        out.auto_mip_bias = self.bias.bias();
        // Something was missing (last frame, or in this frame's feedback) and now nothing is:
        // a loader fast enough to deliver within the frame still fires the event.
        out.became_fully_resident =
            out.resident_fraction >= 1.0 && (self.last_fraction < 1.0 || out.misses > 0);
        self.last_fraction = out.resident_fraction;
        self.last_uploads = out.uploads;
        out.feedback_ms = t0.elapsed().as_secs_f64() * 1e3;
        let page_table_jobs = self.residency.page_table_mut().take_jobs();
        out.table_jobs = page_table_jobs.len();
        out.table_entries = page_table_jobs.entries();
        FramePlan {
            uploads: plan.uploads,
            page_table_writes,
            page_table_jobs,
            shader: self.shader_params(frame),
            stats: out,
        }
    }

    /// The feedback window, residency, requests, neighbour prefetch, the mip bias and
    /// the renewal of still-wanted loads.
    fn take_feedback(&mut self, frame: u64, fb: &SparseFeedback, out: &mut StreamFrame) {
        // Each frame only one pixel per stride² block writes feedback, so a tile that
        // covers a few pixels shows up in some frames only: the needed set is the union
        // of the last stride² readbacks, so such tiles are neither dropped nor evicted.
        let window = (self.config.feedback_stride * self.config.feedback_stride) as usize;
        self.recent_feedback.push_back(self.layout.decode_sparse(&fb.pairs));
        while self.recent_feedback.len() > window {
            self.recent_feedback.pop_front();
        }
        let mut needed: Vec<TileId> = self.recent_feedback.iter().flatten().copied().collect();
        needed.sort_unstable_by_key(|t| t.order_key());
        needed.dedup();
        let misses_before = self.residency.counters().misses;
        let requests = self.residency.on_feedback(frame, &needed);
        out.tiles_needed = self.residency.needed_count();
        out.misses = (self.residency.counters().misses - misses_before) as usize;
        out.feedback_frame = Some(fb.frame);
        out.feedback_age = Some(frame.saturating_sub(fb.frame));
        let now = Instant::now();
        for &(tile, _) in &requests {
            self.request_times.entry(tile).or_insert((fb.frame, now));
        }
        out.requests = self.loader.request_many(&requests, frame);
        if self.config.prefetch_neighbours && !requests.is_empty() {
            let mut around: Vec<TileId> =
                requests.iter().flat_map(|&(t, _)| neighbours(&self.layout, t)).collect();
            around.sort_unstable();
            around.dedup();
            let prefetches = self.residency.prefetch(frame, &around, 0);
            out.prefetches = self.loader.request_many(&prefetches, frame);
        }
        if self.config.auto_mip_bias {
            self.bias.update(BiasInput {
                needed: out.tiles_needed,
                capacity: self.residency.slot_count(),
                pool_full: self.last_pool_full,
                misses: out.misses,
            });
        }
        // Renew queued loads the view still wants, so that staleness cancels only what
        // the feedback no longer asks for; priority 1 lifts a prefetch the view now
        // needs out of the speculative class.
        self.loader.renew_many(self.residency.needed_sorted(), 1, frame);
        self.wanted = needed;
        self.seen_feedback = true;
    }

    /// Requests the tiles of a predicted view (and their ancestors) not yet resident,
    /// needed or requested, at priority 0 (below every needed tile), and keeps the ones
    /// already queued wanted; returns the requests handed to the loader.
    fn take_prediction(&mut self, frame: u64, predicted: &SparseFeedback) -> usize {
        let tiles = self.layout.with_ancestors(&self.layout.decode_sparse(&predicted.pairs));
        let requests = self.residency.prefetch(frame, &tiles, 0);
        let queued = self.loader.request_many(&requests, frame);
        self.loader.renew_many(&tiles, 0, frame);
        queued
    }

    /// Lets tiles whose wait after a transient failure is over be asked for again.
    fn retry_unavailable(&mut self, frame: u64) {
        if self.retry_at.is_empty() {
            return;
        }
        // The entry stays (with its count) after its wait, so that the next failure waits
        // longer; it goes when the tile arrives or fails for good, or when the tile was
        // not asked for again for long (no longer in view).
        self.retry_at.retain(|_, u| u.retry_at.is_some() || frame < u.failed_at + 2 * MAX_RETRY_FRAMES);
        for (&t, u) in self.retry_at.iter_mut() {
            if u.retry_at.is_some_and(|at| at <= frame) {
                u.retry_at = None;
                self.residency.retry(t);
            }
        }
    }

    /// Hands finished loads to residency; a failed or malformed tile is reported once
    /// and keeps showing its nearest resident ancestor; a tile that was unavailable for
    /// now (network) is asked for again after [`RETRY_FRAMES`] frames, doubling with each
    /// failure in a row up to [`MAX_RETRY_FRAMES`].
    fn take_results(&mut self) {
        let expected: usize = self.part_lengths.iter().sum();
        for r in self.loader.try_results() {
            let loaded = match r.outcome {
                LoadOutcome::Ready(bytes) => check_length(r.tile, bytes, expected),
                LoadOutcome::Failed(e) => Err(e),
                LoadOutcome::Cancelled => {
                    self.residency.on_cancelled(r.tile);
                    self.request_times.remove(&r.tile);
                    continue;
                }
            };
            match loaded {
                Err(e) if e.is_transient() => {
                    let frame = self.frame;
                    let u = self.retry_at.entry(r.tile).or_insert(Unavailable {
                        retry_at: None,
                        failures: 0,
                        failed_at: 0,
                    });
                    u.failures = u.failures.saturating_add(1);
                    let wait = (RETRY_FRAMES << (u.failures - 1).min(16)).min(MAX_RETRY_FRAMES);
                    u.retry_at = Some(frame + wait);
                    u.failed_at = frame;
                    if !self.unavailable_logged {
                        self.unavailable_logged = true;
                        tracing::warn!(
                            "{e}; showing its ancestor and trying again in {wait} frames (further tiles not logged until one arrives)"
                        );
                    }
                    self.residency.on_failed(r.tile);
                    self.request_times.remove(&r.tile);
                }
                Ok(bytes) => {
                    if self.retry_at.remove(&r.tile).is_some() {
                        self.unavailable_logged = false;
                    }
                    self.residency.on_loaded(r.tile, bytes);
                    if let Some(staged) = r.staged.filter(|_| self.residency.is_ready(r.tile)) {
                        self.staged.insert(r.tile, (staged, self.frame));
                    }
                }
                Err(e) => {
                    self.retry_at.remove(&r.tile);
                    // A replaced atlas fails every tile alike: said once.
                    let replaced = matches!(&e, LoadError::Failed { reason, .. }
                        if reason.contains("was replaced on the server"));
                    if replaced && !self.replaced_logged {
                        self.replaced_logged = true;
                        tracing::error!("{e}; its resident tiles stay, the others show their ancestors");
                    } else if !replaced && self.reported_failures.insert(r.tile) {
                        tracing::error!("{e}; showing its nearest resident ancestor instead");
                    }
                    self.residency.on_failed(r.tile);
                    self.request_times.remove(&r.tile);
                }
            }
        }
    }

    /// Hands this frame's uploads their staged copies, and releases the staging of
    /// tiles that residency dropped (no longer needed, or already resident) or that
    /// waited more than [`STAGED_WAIT_FRAMES`] frames for a slot: a chunk is mapped
    /// again only once every tile in it is released, so a few tiles deferred for long
    /// (a pool too small for the view, prefetches) would keep a whole chunk from the
    /// loader threads. Such a tile is uploaded from its bytes when its turn comes.
    fn attach_staged(&mut self, uploads: &mut [Upload]) {
        if self.staged.is_empty() {
            return;
        }
        for u in uploads.iter_mut() {
            u.staged = self.staged.remove(&u.tile).map(|(t, _)| t);
        }
        let (residency, frame) = (&self.residency, self.frame);
        self.staged.retain(|t, (_, at)| residency.is_ready(*t) && frame <= *at + STAGED_WAIT_FRAMES);
    }

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

    /// Uploads, evictions and the request-to-resident latency of this frame's uploads.
    fn note_uploads(&mut self, frame: u64, uploads: &[Upload], out: &mut StreamFrame) {
        let now = Instant::now();
        let (mut sum_ms, mut sum_frames, mut timed) = (0.0f64, 0.0f64, 0usize);
        for u in uploads {
            out.evictions += usize::from(u.evicted.is_some());
            if let Some((fb_frame, at)) = self.request_times.remove(&u.tile) {
                let ms = now.duration_since(at).as_secs_f64() * 1e3;
                sum_ms += ms;
                out.latency_ms_max = out.latency_ms_max.max(ms);
                sum_frames += frame.saturating_sub(fb_frame) as f64;
                timed += 1;
            }
        }
        out.uploads = uploads.len();
        if timed > 0 {
            out.latency_ms_mean = sum_ms / timed as f64;
            out.latency_frames_mean = sum_frames / timed as f64;
        }
        // Requests whose result was dropped (no longer needed) never upload: forget
        // them once they are neither requested nor waiting.
        if self.request_times.len() > 4 * self.residency.slot_count() {
            let live: TileSet = self.residency.requested_tiles().collect();
            self.request_times.retain(|t, _| live.contains(t));
        }
    }

    fn page_table_writes(&mut self) -> Vec<PageTableWrite> {
        let pt = self.residency.page_table_mut();
        let ranges = pt.take_dirty_ranges();
        ranges
            .into_iter()
            .map(|r| PageTableWrite { first: r.start, entries: pt.entries()[r].to_vec() })
            .collect()
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
        self.loader.request_many(&requests, self.frame)
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
        self.seen_feedback.then(|| self.residency.resident_fraction(&self.wanted))
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

/// `stride` when it is one of [`FEEDBACK_STRIDES`].
fn checked_stride(stride: u32) -> Result<u32, StreamerError> {
    if FEEDBACK_STRIDES.contains(&stride) {
        Ok(stride)
    } else {
        Err(StreamerError::Config(format!("feedback stride {stride} is not one of {FEEDBACK_STRIDES:?}")))
    }
}

/// Frames after a bias change during which the needed set still describes the old
/// bias: the union of stride² readbacks, which lag about 2 frames.
fn settle_frames(stride: u32) -> u32 {
    stride * stride + 2
}

/// `bytes` when they are exactly one tile for the pools; otherwise a failure, so that
/// no pool of a stack is left unwritten while residency counts the tile resident.
fn check_length(tile: TileId, bytes: Arc<[u8]>, expected: usize) -> Result<Arc<[u8]>, LoadError> {
    if bytes.len() == expected {
        Ok(bytes)
    } else {
        Err(LoadError::failed(tile, format!("loaded {} bytes but a pool slot takes {expected}", bytes.len())))
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
