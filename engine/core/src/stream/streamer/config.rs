//! The streamer's settings ([`StreamerConfig`], validated once), its staleness policy,
//! its errors, and the host cache and loader threads several streamers can share.

use super::*;

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
    /// Spread bursts over frames: at most as many uploads a frame as fit this many
    /// milliseconds of upload work, CPU and GPU together, at the measured price of a
    /// tile ([`crate::stream::upload_slice`]), below the upload budget; `None` (the
    /// default here; the renderer turns it on where it can time the GPU's share): no
    /// cap beyond the budget.
    pub upload_slice_ms: Option<f64>,
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
    /// or failing): tried again every [`COARSEST_RETRY`] within it, then an error. Not
    /// on [`LoaderThreads::external`] threads, where nothing arrives while it waits.
    pub coarsest_patience: std::time::Duration,
    /// Keep a complete page table (every entry valid at any depth), updated by the GPU
    /// from [`FramePlan::page_table_jobs`], instead of uploading entries with shallow
    /// fallbacks ([`FramePlan::page_table_writes`]).
    pub complete_page_table: bool,
    /// How a produced atlas' tiles are scheduled ([`crate::stream::produce`]): the
    /// per-frame production budget and the bound on stale tiles. Ignored for an atlas
    /// read from a file.
    pub production: ProductionConfig,
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
        if let Some(ms) = self.upload_slice_ms.filter(|ms| !(ms.is_finite() && *ms > 0.0)) {
            return Err(format!("upload_slice_ms {ms} must be a positive number of milliseconds"));
        }
        self.production.validate()
    }
}

impl StreamerConfig {
    /// [`StreamerConfig::validate`] as the streamer's error.
    pub(super) fn check(&self) -> Result<(), StreamerError> {
        self.validate().map_err(|what| StreamerError::Config(format!("StreamerConfig: {what}")))
    }

    /// The adaptive upload budget these settings ask for (with `target_frame_ms`), for
    /// tiles of `tile_bytes` over every stacked pool; `None`: the fixed budget.
    pub(super) fn budget_controller(&self, tile_bytes: u64) -> Option<UploadBudgetController> {
        let max = self.max_uploads_per_frame.max(1);
        self.target_frame_ms.map(|target_frame_ms| {
            UploadBudgetController::new(BudgetConfig {
                target_frame_ms,
                start_tiles: max,
                max_tiles: max,
                bytes_per_tile: tile_bytes,
                ..BudgetConfig::default()
            })
        })
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
            upload_slice_ms: None,
            prefetch_neighbours: true,
            staleness: Staleness::default(),
            loader_stack_bytes: None,
            coarsest_patience: std::time::Duration::from_secs(10),
            complete_page_table: false,
            production: ProductionConfig::default(),
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

    /// A host cache of `host_cache_mib` MiB and [`LoaderThreads::external`] threads: no
    /// thread is started, and the embedder runs the loads
    /// ([`LoaderThreads::take_job`]). The browser's path.
    pub fn external(host_cache_mib: u32) -> Self {
        let cache = Arc::new(HostCache::new(u64::from(host_cache_mib) << 20));
        Self::from_parts(cache, LoaderThreads::external(LoaderConfig::default()))
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

/// `stride` when it is one of [`FEEDBACK_STRIDES`].
pub(super) fn checked_stride(stride: u32) -> Result<u32, StreamerError> {
    if FEEDBACK_STRIDES.contains(&stride) {
        Ok(stride)
    } else {
        Err(StreamerError::Config(format!("feedback stride {stride} is not one of {FEEDBACK_STRIDES:?}")))
    }
}

/// Frames after a bias change during which the needed set still describes the old
/// bias: the union of stride² readbacks, which lag about 2 frames.
pub(super) fn settle_frames(stride: u32) -> u32 {
    stride * stride + 2
}
