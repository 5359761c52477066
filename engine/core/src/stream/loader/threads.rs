//! The loader threads: shared by every pool on them, each taking the next job from the
//! hub, loading tiles (in batches where the loader reads them together) and catching a
//! loader's panic as a failed tile; or, without threads (the browser), the same jobs
//! taken and run by an external executor ([`ExternalJob`]).

use super::*;

/// Worker threads that serve the requests of several [`LoaderPool`]s.
///
/// Each pool made with [`LoaderPool::on_threads`] is a client with its own queue,
/// results channel, counters and cancellation. A free worker takes the client at the
/// front of a ring of clients with queued work, starts that client's best request (by
/// the pool's usual order) and moves the client to the back of the ring, so clients
/// take turns request by request: a client with a long backlog delays another's
/// request by at most one load per worker per client ahead of it.
///
/// The threads stop and are joined when the last `Arc<LoaderThreads>` is dropped; each
/// client holds one, so that happens once every client pool is gone as well.
///
/// [`LoaderThreads::external`] makes the same scheduler without threads: the embedder
/// takes each job ([`LoaderThreads::take_job`]) and runs it when it likes (in the
/// browser, after fetching its bytes, on the main thread within a per-frame budget).
pub struct LoaderThreads {
    pub(super) hub: Arc<Hub>,
    pub(super) workers: Vec<JoinHandle<()>>,
    pub(super) config: LoaderConfig,
    /// No workers: jobs are taken with [`LoaderThreads::take_job`].
    pub(super) external: bool,
}

/// Loader threads when none are asked for: one per core but one, at least one. The
/// core left over is the render thread's (plan, staging copies, submission): on the
/// H200's 16 cores, 15 loader threads streamed 15% more ETC1S and 7% more UASTC tiles
/// per second to VRAM than 16 did (BENCHMARKS.md, issue 13).
pub fn default_loader_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1).max(1)
}

impl LoaderThreads {
    /// Starts `threads` workers (0: [`default_loader_threads`]), named `tessera-loader-{i}`, each with
    /// `config.stack_bytes` of stack; `config.cancel_after_frames` is the default of
    /// the client pools. When the operating system refuses a thread, the workers
    /// already started are stopped and joined, and the error is returned: always so in
    /// the browser (wasm32 without threads), whose path is [`LoaderThreads::external`].
    pub fn new(threads: usize, config: LoaderConfig) -> std::io::Result<Arc<Self>> {
        let threads = match threads {
            0 => default_loader_threads(),
            n => n,
        };
        let mut this =
            Self { hub: Arc::default(), workers: Vec::with_capacity(threads), config, external: false };
        for i in 0..threads {
            let hub = Arc::clone(&this.hub);
            let mut builder = std::thread::Builder::new().name(format!("tessera-loader-{i}"));
            if let Some(bytes) = config.stack_bytes {
                builder = builder.stack_size(bytes);
            }
            // On error, dropping `this` stops and joins the workers started so far.
            this.workers.push(builder.spawn(move || worker(&hub))?);
        }
        Ok(Arc::new(this))
    }

    /// The scheduler of [`LoaderThreads::new`] without any thread, for an executor of
    /// the embedder's: the web path (wasm32 has no threads, and bytes arrive through
    /// asynchronous `fetch()` calls). Pools join it with [`LoaderPool::on_threads`] as
    /// usual; their requests wait until [`LoaderThreads::take_job`] hands them out, in
    /// the order a worker thread would take them. `config.stack_bytes` is unused.
    pub fn external(config: LoaderConfig) -> Arc<Self> {
        Arc::new(Self { hub: Arc::default(), workers: Vec::new(), config, external: true })
    }

    /// Whether these are [`LoaderThreads::external`]: no worker threads, jobs taken by
    /// the embedder.
    pub fn is_external(&self) -> bool {
        self.external
    }

    /// The next job of [`LoaderThreads::external`] threads, without blocking: the next
    /// client in the ring of clients with queued requests, and its best requests by the
    /// pool's usual order (at most `max_tiles`, and at most its loader's
    /// [`TileLoader::batch_size`]), now in flight, exactly as a worker thread takes
    /// them. `None` when no request is queued, and always for threads of
    /// [`LoaderThreads::new`] (their workers take the jobs).
    pub fn take_job(&self, max_tiles: usize) -> Option<ExternalJob> {
        if !self.external {
            return None;
        }
        // Each client in the ring has work or leaves it when asked.
        let clients = self.hub.lock().ready.len();
        for _ in 0..clients {
            let client = self.hub.try_next_client()?;
            if let Some(job) = client.start_next(&self.hub, max_tiles) {
                return Some(ExternalJob { client, job: Some(job) });
            }
        }
        None
    }

    /// Number of worker threads (0 for [`LoaderThreads::external`]).
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// The configuration the threads were made with.
    pub fn config(&self) -> LoaderConfig {
        self.config
    }

    /// Number of client pools served now.
    pub fn clients(&self) -> usize {
        self.hub.lock().clients
    }
}

impl Drop for LoaderThreads {
    /// Stops and joins the workers. No client is left (each holds an `Arc` on the
    /// threads), so no request is lost.
    fn drop(&mut self) {
        self.hub.lock().shutdown = true;
        self.hub.work.notify_all();
        let me = std::thread::current().id();
        for handle in self.workers.drain(..) {
            // A worker cannot join itself; it exits on its own once this returns.
            if handle.thread().id() == me {
                continue;
            }
            let name = handle.thread().name().unwrap_or("tessera-loader").to_owned();
            if handle.join().is_err() {
                tracing::error!(thread = %name, "loader worker panicked outside a load");
            }
        }
    }
}

impl std::fmt::Debug for LoaderThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoaderThreads")
            .field("threads", &self.workers.len())
            .field("external", &self.external)
            .field("clients", &self.clients())
            .field("config", &self.config)
            .finish()
    }
}

/// The requests a worker has taken (one, or a batch for a batch loader), the
/// client's loader and staging.
pub(super) struct Job {
    pub(super) tiles: Vec<TileId>,
    pub(super) loader: Arc<dyn TileLoader>,
    pub(super) staging: Option<Arc<StagingRing>>,
}

/// A worker: one request of one client at a time, taking turns between clients.
pub(super) fn worker(hub: &Hub) {
    while let Some(client) = hub.next_client() {
        let Some(job) = client.start_next(hub, usize::MAX) else { continue };
        job.run(&client);
    }
}

impl Job {
    /// Loads the job's tiles and reports them to `client`: a batch's tiles at hand
    /// (cache hits) at once, not once its slow reads are done; the others through the
    /// loader, checking `client`'s wishes while a batch loads.
    pub(super) fn run(self, client: &Client) {
        let Job { tiles, loader, staging } = self;
        let tiles = if tiles.len() > 1 {
            let (early, rest) = split_ready(loader.as_ref(), tiles);
            if rest.is_empty() {
                // The whole batch: reported below like any other.
                deliver(client, early, loader, staging);
                return;
            }
            for (tile, outcome) in early {
                let staged = stage(&outcome, staging.as_ref());
                client.finish(tile, outcome, staged);
            }
            rest
        } else {
            tiles
        };
        let outcomes = load_tiles(loader.as_ref(), &tiles, &|t| client.lock().still_wanted(t));
        deliver(client, tiles.into_iter().zip(outcomes).collect(), loader, staging);
    }
}

/// The outcomes of `tiles` that `loader` has at hand ([`TileLoader::ready_now`]), and
/// the tiles left to load (a panic there leaves them all).
fn split_ready(loader: &dyn TileLoader, tiles: Vec<TileId>) -> (Vec<(TileId, LoadOutcome)>, Vec<TileId>) {
    let ready = catch_unwind(AssertUnwindSafe(|| loader.ready_now(&tiles))).unwrap_or_default();
    let mut rest = Vec::with_capacity(tiles.len());
    let mut early = Vec::new();
    for (i, tile) in tiles.into_iter().enumerate() {
        match ready.get(i).cloned().flatten() {
            Some(Ok(bytes)) => early.push((tile, LoadOutcome::Ready(bytes))),
            _ => rest.push(tile),
        }
    }
    (early, rest)
}

/// Loads `tiles`: one through [`TileLoader::load`], several as a batch.
fn load_tiles(
    loader: &dyn TileLoader,
    tiles: &[TileId],
    wanted: &dyn Fn(TileId) -> bool,
) -> Vec<LoadOutcome> {
    match tiles {
        [tile] => vec![load_caught(loader, *tile)],
        _ => load_batch_caught(loader, tiles, wanted),
    }
}

/// A loaded tile's bytes written into `staging`, when there is one and a record is free.
fn stage(outcome: &LoadOutcome, staging: Option<&Arc<StagingRing>>) -> Option<StagedTile> {
    match (outcome, staging) {
        (LoadOutcome::Ready(bytes), Some(ring)) => ring.stage(bytes),
        _ => None,
    }
}

/// Stages and reports `results`. The copy into staging memory happens here, on the
/// loader thread (or the external executor), so the render thread only records the GPU
/// copy; the job's handles on the loader and staging are dropped before reporting, so
/// that a pool that sees its last load end holds the last handle on its loader.
fn deliver(
    client: &Client,
    results: Vec<(TileId, LoadOutcome)>,
    loader: Arc<dyn TileLoader>,
    staging: Option<Arc<StagingRing>>,
) {
    let staged: Vec<Option<StagedTile>> = results.iter().map(|(_, o)| stage(o, staging.as_ref())).collect();
    drop(loader);
    drop(staging);
    for ((tile, outcome), staged) in results.into_iter().zip(staged) {
        client.finish(tile, outcome, staged);
    }
}

/// Requests taken from [`LoaderThreads::external`] threads, in flight until the job is
/// finished ([`ExternalJob::run`] or [`ExternalJob::finish`]); a job dropped unfinished
/// reports its tiles [`LoadOutcome::Cancelled`], so every request still ends with
/// exactly one result.
///
/// The web driver's round: [`ExternalJob::fetch_ranges`] (fetch and insert them, and
/// ask again until it is empty), then [`ExternalJob::run`], which loads through the
/// client's ordinary [`TileLoader`] (now hitting the fetched bytes), stages and reports
/// exactly as a worker thread does.
pub struct ExternalJob {
    client: Arc<Client>,
    /// Taken when the job is finished.
    job: Option<Job>,
}

impl ExternalJob {
    /// The tiles of the job, in the order taken (best first).
    pub fn tiles(&self) -> &[TileId] {
        self.job.as_ref().map_or(&[], |j| j.tiles.as_slice())
    }

    /// Whether the client still wants `tile`: renewed within its `cancel_after_frames`
    /// of the frame last given to [`LoaderPool::cancel_stale`], and the pool not shut
    /// down. A driver skips fetching for tiles no longer wanted; [`ExternalJob::load`]
    /// reports them cancelled.
    pub fn still_wanted(&self, tile: TileId) -> bool {
        self.client.lock().still_wanted(tile)
    }

    /// The client's loader, for a driver that runs [`TileLoader::load_batch`] itself and
    /// hands the outcomes to [`ExternalJob::finish`].
    pub fn loader(&self) -> Option<&Arc<dyn TileLoader>> {
        self.job.as_ref().map(|j| &j.loader)
    }

    /// What to fetch before the job's still-wanted tiles load without waiting on bytes
    /// ([`TileLoader::fetch_ranges`]); empty once everything is at hand, or for a loader
    /// that fetches nothing. Call again after inserting: a version-2 atlas names its
    /// index pages first, then the blobs they point at.
    pub fn fetch_ranges(&self) -> Vec<FetchRange> {
        let Some(job) = &self.job else { return Vec::new() };
        let wanted: Vec<TileId> = job.tiles.iter().copied().filter(|&t| self.still_wanted(t)).collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        catch_unwind(AssertUnwindSafe(|| job.loader.fetch_ranges(&wanted))).unwrap_or_default()
    }

    /// Loads the job's tiles as a worker thread would (tiles at hand first, the others
    /// through [`TileLoader::load`] or [`TileLoader::load_batch`], a panic caught as a
    /// failure); tiles no longer wanted are not loaded and come back
    /// [`LoadOutcome::Cancelled`]. One outcome per tile of [`ExternalJob::tiles`], for
    /// [`ExternalJob::finish`].
    pub fn load(&self) -> Vec<LoadOutcome> {
        let Some(job) = &self.job else { return Vec::new() };
        let wanted: Vec<bool> = job.tiles.iter().map(|&t| self.still_wanted(t)).collect();
        let todo: Vec<TileId> = job.tiles.iter().zip(&wanted).filter(|(_, w)| **w).map(|(t, _)| *t).collect();
        let (early, rest) =
            if todo.len() > 1 { split_ready(job.loader.as_ref(), todo) } else { (Vec::new(), todo) };
        let loaded = if rest.is_empty() {
            Vec::new()
        } else {
            load_tiles(job.loader.as_ref(), &rest, &|t| self.still_wanted(t))
        };
        let mut found: TileMap<LoadOutcome> = early.into_iter().chain(rest.into_iter().zip(loaded)).collect();
        job.tiles.iter().map(|t| found.remove(t).unwrap_or(LoadOutcome::Cancelled)).collect()
    }

    /// Stages and reports `outcomes` (one per tile of [`ExternalJob::tiles`], in order),
    /// exactly as a worker thread does; a tile without an outcome fails.
    pub fn finish(mut self, outcomes: Vec<LoadOutcome>) {
        let Some(Job { tiles, loader, staging }) = self.job.take() else { return };
        let mut outcomes = outcomes.into_iter();
        let results = tiles
            .into_iter()
            .map(|tile| {
                let outcome = outcomes.next().unwrap_or_else(|| {
                    LoadOutcome::Failed(LoadError::failed(tile, "the external loader gave no result"))
                });
                (tile, outcome)
            })
            .collect();
        deliver(&self.client, results, loader, staging);
    }

    /// Splits the tiles from `at` on into a job of their own (fetched together, decoded
    /// apart: a driver with a time budget runs a job a few tiles at a time). `None`
    /// when `at` leaves one side empty.
    pub fn split_off(&mut self, at: usize) -> Option<ExternalJob> {
        let job = self.job.as_mut()?;
        if at == 0 || at >= job.tiles.len() {
            return None;
        }
        let tiles = job.tiles.split_off(at);
        Some(ExternalJob {
            client: Arc::clone(&self.client),
            job: Some(Job { tiles, loader: Arc::clone(&job.loader), staging: job.staging.clone() }),
        })
    }

    /// [`ExternalJob::load`], then [`ExternalJob::finish`].
    pub fn run(self) {
        let outcomes = self.load();
        self.finish(outcomes);
    }

    /// Ends the job with every tile [`LoadError::Unavailable`] for `reason` (its bytes
    /// could not be fetched: the network or the server failed): the streamer shows
    /// their ancestors and asks for them again later, as for a remote atlas.
    pub fn finish_unavailable(self, reason: &str) {
        let outcomes = self
            .tiles()
            .iter()
            .map(|&tile| LoadOutcome::Failed(LoadError::Unavailable { tile, reason: reason.to_owned() }))
            .collect();
        self.finish(outcomes);
    }
}

impl Drop for ExternalJob {
    /// An unfinished job's tiles end [`LoadOutcome::Cancelled`].
    fn drop(&mut self) {
        if let Some(Job { tiles, loader, staging }) = self.job.take() {
            let results = tiles.into_iter().map(|t| (t, LoadOutcome::Cancelled)).collect();
            deliver(&self.client, results, loader, staging);
        }
    }
}

impl std::fmt::Debug for ExternalJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalJob").field("tiles", &self.tiles()).finish()
    }
}

/// Runs one batch load: one outcome per tile (a missing result fails its tile); a
/// panic fails every tile of the batch with [`LoadError::Panicked`].
pub(super) fn load_batch_caught(
    loader: &dyn TileLoader,
    tiles: &[TileId],
    wanted: &dyn Fn(TileId) -> bool,
) -> Vec<LoadOutcome> {
    match catch_unwind(AssertUnwindSafe(|| loader.load_batch(tiles, wanted))) {
        Ok(results) => {
            let mut results = results.into_iter();
            tiles
                .iter()
                .map(|&tile| match results.next() {
                    Some(Some(Ok(data))) => LoadOutcome::Ready(data),
                    Some(Some(Err(e))) => LoadOutcome::Failed(e),
                    Some(None) => LoadOutcome::Cancelled,
                    None => LoadOutcome::Failed(LoadError::failed(tile, "the batch loader gave no result")),
                })
                .collect()
        }
        Err(panic) => {
            let message = panic_message(&panic);
            tracing::error!(tiles = tiles.len(), %message, "batch tile loader panicked");
            tiles
                .iter()
                .map(|&tile| LoadOutcome::Failed(LoadError::Panicked { tile, message: message.clone() }))
                .collect()
        }
    }
}

/// Runs one load, turning a panic into [`LoadError::Panicked`].
pub(super) fn load_caught(loader: &dyn TileLoader, tile: TileId) -> LoadOutcome {
    match catch_unwind(AssertUnwindSafe(|| loader.load(tile))) {
        Ok(Ok(data)) => LoadOutcome::Ready(data),
        Ok(Err(e)) => LoadOutcome::Failed(e),
        Err(panic) => {
            let message = panic_message(&panic);
            tracing::error!(%tile, %message, "tile loader panicked");
            LoadOutcome::Failed(LoadError::Panicked { tile, message })
        }
    }
}

/// The message of a caught panic, when it was a string.
pub(super) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}
