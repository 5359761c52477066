//! The loader threads: shared by every pool on them, each taking the next job from the
//! hub, loading tiles (in batches where the loader reads them together) and catching a
//! loader's panic as a failed tile.

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
pub struct LoaderThreads {
    pub(super) hub: Arc<Hub>,
    pub(super) workers: Vec<JoinHandle<()>>,
    pub(super) config: LoaderConfig,
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
    /// already started are stopped and joined, and the error is returned.
    pub fn new(threads: usize, config: LoaderConfig) -> std::io::Result<Arc<Self>> {
        let threads = match threads {
            0 => default_loader_threads(),
            n => n,
        };
        let mut this = Self { hub: Arc::default(), workers: Vec::with_capacity(threads), config };
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

    /// Number of worker threads.
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
        let Some(Job { tiles, loader, staging }) = client.start_next(hub) else { continue };
        let stage = |outcome: &LoadOutcome| match (outcome, &staging) {
            (LoadOutcome::Ready(bytes), Some(ring)) => ring.stage(bytes),
            _ => None,
        };
        // A batch's tiles at hand (cache hits) are delivered now, not once its slow
        // reads are done; the others go on to the batch load.
        let tiles = if tiles.len() > 1 {
            let ready = catch_unwind(AssertUnwindSafe(|| loader.ready_now(&tiles))).unwrap_or_default();
            let mut rest = Vec::with_capacity(tiles.len());
            let mut early = Vec::new();
            for (i, tile) in tiles.into_iter().enumerate() {
                match ready.get(i).cloned().flatten() {
                    Some(Ok(bytes)) => early.push((tile, LoadOutcome::Ready(bytes))),
                    _ => rest.push(tile),
                }
            }
            if rest.is_empty() {
                // The whole batch: reported below like any other.
                let (tiles, outcomes): (Vec<TileId>, Vec<LoadOutcome>) = early.into_iter().unzip();
                let staged: Vec<Option<StagedTile>> = outcomes.iter().map(stage).collect();
                drop(loader);
                drop(staging);
                for ((tile, outcome), staged) in tiles.into_iter().zip(outcomes).zip(staged) {
                    client.finish(tile, outcome, staged);
                }
                continue;
            }
            for (tile, outcome) in early {
                let staged = stage(&outcome);
                client.finish(tile, outcome, staged);
            }
            rest
        } else {
            tiles
        };
        let outcomes = match tiles.as_slice() {
            [tile] => vec![load_caught(loader.as_ref(), *tile)],
            _ => load_batch_caught(loader.as_ref(), &tiles, &|t| client.lock().still_wanted(t)),
        };
        // The copy into staging memory happens here, on the loader thread, so the
        // render thread only records the GPU copy.
        let staged: Vec<Option<StagedTile>> = outcomes.iter().map(stage).collect();
        // Dropped before reporting, so that a pool that sees its last load end holds
        // the last handle on its loader.
        drop(loader);
        drop(staging);
        for ((tile, outcome), staged) in tiles.into_iter().zip(outcomes).zip(staged) {
            client.finish(tile, outcome, staged);
        }
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
