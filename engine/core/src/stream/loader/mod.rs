//! The loader pool: worker threads that load requested tiles in priority order.
//!
//! Each [`LoaderPool`] has its own priority queue (wanted requests, priority above 0,
//! before speculative ones at priority 0 such as prefetches; then coarser mips first,
//! then caller priority, then first come first served) and its own results channel on
//! which [`LoadResult`]s come back. The worker threads ([`LoaderThreads`]) are the
//! pool's own or shared by several pools, which then take turns request by request; or
//! there are none, and the embedder takes and runs the same jobs
//! ([`LoaderThreads::external`], the browser's path).
//!
//! Guarantee: every [`LoaderPool::request`] that returned `true` yields exactly one
//! [`LoadResult`] for that tile — [`LoadOutcome::Ready`], [`LoadOutcome::Failed`] or
//! [`LoadOutcome::Cancelled`] — including when the pool shuts down. Results of
//! successive requests for the same tile arrive in request order.
//!
//! By concern: this file holds the loader API (errors, `TileLoader`, outcomes) and the
//! [`LoaderPool`] of one client; `queue.rs` the request queue and the hub; `threads.rs`
//! the shared loader threads and the jobs of external ones.

use std::cmp::Ordering;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BinaryHeap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use serde::{Deserialize, Serialize};

use crate::format::atlas::ranged::FetchRange;
use crate::format::tile::{TileId, TileMap};
use crate::stream::staging::{StagedTile, StagingRing};

mod queue;
mod threads;

use queue::*;
use threads::*;
pub use threads::{ExternalJob, LoaderThreads, default_loader_threads};

/// Why a tile could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The loader reported an error.
    #[error("tile {tile}: {reason}")]
    Failed {
        /// The tile that failed.
        tile: TileId,
        /// What went wrong.
        reason: String,
    },
    /// The tile could not be read just now (a remote atlas' network or server failed
    /// after retries): its ancestor is shown and it is asked for again later.
    #[error("tile {tile}: unavailable for now: {reason}")]
    Unavailable {
        /// The tile that failed.
        tile: TileId,
        /// What went wrong.
        reason: String,
    },
    /// The loader panicked; the worker survived and reports it here.
    #[error("tile {tile}: loader panicked: {message}")]
    Panicked {
        /// The tile being loaded.
        tile: TileId,
        /// The panic message, when it was a string.
        message: String,
    },
}

impl LoadError {
    /// Shorthand for [`LoadError::Failed`].
    pub fn failed(tile: TileId, reason: impl Into<String>) -> Self {
        Self::Failed { tile, reason: reason.into() }
    }

    /// The tile the error is about.
    pub fn tile(&self) -> TileId {
        match self {
            Self::Failed { tile, .. } | Self::Unavailable { tile, .. } | Self::Panicked { tile, .. } => *tile,
        }
    }

    /// Whether loading the tile again later may succeed ([`LoadError::Unavailable`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// Something that turns a tile id into GPU-ready bytes (read, decompress, decode).
///
/// Called concurrently from every worker thread. Closures
/// `Fn(TileId) -> Result<Arc<[u8]>, LoadError>` implement it.
pub trait TileLoader: Send + Sync + 'static {
    /// Loads one tile.
    fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError>;

    /// How many queued tiles a worker hands to [`TileLoader::load_batch`] at once
    /// (1, the default: one [`TileLoader::load`] per tile). A loader whose reads cost a
    /// round trip (a remote atlas) asks for more, to coalesce them.
    fn batch_size(&self) -> usize {
        1
    }

    /// The results of those of `tiles` this loader has at hand without slow reads (a
    /// remote atlas' host- and disk-cache hits), one per tile in the order given, `None`
    /// for the others: a worker delivers these at once, and hands only the others to
    /// [`TileLoader::load_batch`]. The default has none.
    fn ready_now(&self, tiles: &[TileId]) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
        vec![None; tiles.len()]
    }

    /// Loads several tiles, one result per tile in the order given; `None` for a tile
    /// it gave up on because `wanted(tile)` said it is no longer wanted (the request
    /// then ends [`LoadOutcome::Cancelled`]). The default loads each tile in turn.
    fn load_batch(
        &self,
        tiles: &[TileId],
        wanted: &dyn Fn(TileId) -> bool,
    ) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
        let _ = wanted;
        tiles.iter().map(|&t| Some(self.load(t))).collect()
    }

    /// The byte ranges to fetch before `tiles` load without waiting on bytes: a loader
    /// over an atlas opened with
    /// [`Atlas::open_ranged`](crate::format::atlas::Atlas::open_ranged) names the index
    /// pages and blobs its store lacks; the default needs none. An external executor
    /// ([`ExternalJob::fetch_ranges`]) fetches them before running the job.
    fn fetch_ranges(&self, tiles: &[TileId]) -> Vec<FetchRange> {
        let _ = tiles;
        Vec::new()
    }
}

impl<F> TileLoader for F
where
    F: Fn(TileId) -> Result<Arc<[u8]>, LoadError> + Send + Sync + 'static,
{
    fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
        self(tile)
    }
}

/// Tuning of a [`LoaderPool`] or of [`LoaderThreads`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderConfig {
    /// `K`: a queued request not renewed for more than this many frames is dropped by
    /// [`LoaderPool::cancel_stale`] (when `last_requested_frame + K < current_frame`).
    pub cancel_after_frames: u64,
    /// Stack size of each worker thread in bytes (`None`: the platform's default).
    pub stack_bytes: Option<usize>,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self { cancel_after_frames: 8, stack_bytes: None }
    }
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadOutcome {
    /// The tile's bytes.
    Ready(Arc<[u8]>),
    /// The loader failed (or panicked).
    Failed(LoadError),
    /// The request was cancelled before a worker picked it up (by
    /// [`LoaderPool::cancel`], [`LoaderPool::cancel_stale`] or shutdown), or a batch
    /// loader gave up on it in flight because it was no longer wanted (not renewed
    /// within `cancel_after_frames` of the frame last given to
    /// [`LoaderPool::cancel_stale`]).
    Cancelled,
}

/// The end of one request, sent on [`LoaderPool::results`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadResult {
    /// The requested tile.
    pub tile: TileId,
    /// What happened.
    pub outcome: LoadOutcome,
    /// With a [`StagingRing`] set ([`LoaderPool::set_staging`]): the tile's bytes as
    /// written into staging memory by the loader thread, when a record was free.
    pub staged: Option<StagedTile>,
}

/// Running totals of a [`LoaderPool`].
///
/// At any time `requested == completed + failed + cancelled + pending + in_flight`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderCounters {
    /// Requests that were queued (calls to `request` that returned `true`).
    pub requested: u64,
    /// Loads that produced bytes.
    pub completed: u64,
    /// Loads that failed or panicked.
    pub failed: u64,
    /// Requests cancelled before loading (including at shutdown), or given up in
    /// flight by a batch loader because they were no longer wanted.
    pub cancelled: u64,
}

/// Loads tiles through a [`TileLoader`] on worker threads, in priority order.
///
/// The threads are either the pool's own ([`LoaderPool::new`]) or shared with other
/// pools ([`LoaderPool::on_threads`]); either way the pool has its own queue, results,
/// counters and cancellation. Dropping the pool (or calling [`LoaderPool::shutdown`])
/// cancels its queued requests and waits for its in-flight loads to finish (their
/// results go to this pool's channel only); its own threads are then joined, shared
/// ones keep serving the other pools. On [`LoaderThreads::external`] threads the jobs
/// the executor holds are not waited for: they end when it finishes them, and their
/// results are dropped with the pool.
pub struct LoaderPool {
    client: Arc<Client>,
    threads: Arc<LoaderThreads>,
    results: Receiver<LoadResult>,
    cancel_after_frames: u64,
}

impl LoaderPool {
    /// Starts `threads` workers of its own (at least one), named `tessera-loader-{i}`.
    /// When the operating system refuses a thread, the workers already started are
    /// shut down and joined, and the error is returned.
    pub fn new(loader: Arc<dyn TileLoader>, threads: usize, config: LoaderConfig) -> std::io::Result<Self> {
        let threads = LoaderThreads::new(threads.max(1), config)?;
        Ok(Self::on_threads(&threads, loader))
    }

    /// A pool served by shared `threads`, with its own queue, results channel and
    /// counters; requests are cancelled as stale after the threads'
    /// [`LoaderConfig::cancel_after_frames`] unless
    /// [`LoaderPool::with_cancel_after_frames`] says otherwise.
    pub fn on_threads(threads: &Arc<LoaderThreads>, loader: Arc<dyn TileLoader>) -> Self {
        let (results_tx, results_rx) = crossbeam_channel::unbounded();
        let queue = Queue { loader: Some(loader), results: Some(results_tx), ..Queue::default() };
        let client = Arc::new(Client { queue: Mutex::new(queue), idle: Condvar::new() });
        threads.hub.lock().clients += 1;
        Self {
            client,
            threads: Arc::clone(threads),
            results: results_rx,
            cancel_after_frames: threads.config.cancel_after_frames,
        }
    }

    /// Has the loader threads write every tile this pool loads into `staging` (when a
    /// record is free; see [`LoadResult::staged`]), or stops that with `None`.
    pub fn set_staging(&self, staging: Option<Arc<StagingRing>>) {
        self.client.lock().staging = staging;
    }

    /// The staging ring loads are written into, if any.
    pub fn staging(&self) -> Option<Arc<StagingRing>> {
        self.client.lock().staging.clone()
    }

    /// This pool with `frames` as its [`LoaderConfig::cancel_after_frames`].
    #[must_use]
    pub fn with_cancel_after_frames(mut self, frames: u64) -> Self {
        self.cancel_after_frames = frames;
        self
    }

    /// Asks for `tile` to be loaded, as wanted at `frame` with `priority` (higher
    /// first, among tiles of the same mip).
    ///
    /// Returns `true` when the tile was newly queued: exactly one [`LoadResult`] will
    /// follow. If the tile is already queued, its last-requested frame is renewed and
    /// its priority raised if `priority` is higher, and `false` is returned; if it is
    /// being loaded, `false` is returned.
    pub fn request(&self, tile: TileId, priority: u32, frame: u64) -> bool {
        self.request_many(&[(tile, priority)], frame) == 1
    }

    /// [`LoaderPool::request`] for each `(tile, priority)` under one lock; returns how
    /// many were newly queued.
    pub fn request_many(&self, requests: &[(TileId, u32)], frame: u64) -> usize {
        if requests.is_empty() {
            return 0;
        }
        let mut guard = self.client.lock();
        let q = &mut *guard;
        if q.closed {
            return 0;
        }
        let mut queued = 0;
        for &(tile, priority) in requests {
            match q.states.entry(tile) {
                MapEntry::Occupied(mut o) => {
                    if let TileState::InFlight { last_requested_frame } = o.get_mut() {
                        *last_requested_frame = (*last_requested_frame).max(frame);
                    }
                    if let TileState::Queued { last_requested_frame, priority: p, seq } = o.get_mut() {
                        *last_requested_frame = (*last_requested_frame).max(frame);
                        if priority > *p {
                            *p = priority;
                            // Keep the original sequence number: raising the priority does
                            // not lose the request's place among equals. The old entry
                            // goes stale.
                            q.heap.push(QueueEntry { mip: tile.mip, priority, seq: *seq, tile });
                        }
                    }
                }
                MapEntry::Vacant(v) => {
                    let seq = q.next_seq;
                    q.next_seq += 1;
                    v.insert(TileState::Queued { last_requested_frame: frame, priority, seq });
                    q.heap.push(QueueEntry { mip: tile.mip, priority, seq, tile });
                    q.queued += 1;
                    q.counters.requested += 1;
                    queued += 1;
                }
            }
        }
        if queued > 0 {
            let wake = queued.min(self.threads.threads());
            if q.scheduled {
                self.threads.hub.wake(wake);
            } else {
                q.scheduled = true;
                // Lock order: a client's queue, then the hub.
                self.threads.hub.schedule(Arc::clone(&self.client), wake);
            }
        }
        q.maybe_compact();
        queued
    }

    /// Renews the queued requests among `tiles` as wanted at `frame`, raising their
    /// priority to at least `priority`, under one lock; tiles that are not queued
    /// (being loaded, or never requested) are left alone. Returns how many were renewed.
    pub fn renew_many(&self, tiles: &[TileId], priority: u32, frame: u64) -> usize {
        let mut guard = self.client.lock();
        let q = &mut *guard;
        let mut renewed = 0;
        for &tile in tiles {
            if let Some(TileState::InFlight { last_requested_frame }) = q.states.get_mut(&tile) {
                *last_requested_frame = (*last_requested_frame).max(frame);
            }
            if let Some(TileState::Queued { last_requested_frame, priority: p, seq }) =
                q.states.get_mut(&tile)
            {
                *last_requested_frame = (*last_requested_frame).max(frame);
                if priority > *p {
                    *p = priority;
                    q.heap.push(QueueEntry { mip: tile.mip, priority, seq: *seq, tile });
                }
                renewed += 1;
            }
        }
        q.maybe_compact();
        renewed
    }

    /// Cancels queued (not in-flight) requests whose last-requested frame is older
    /// than `current_frame` by more than `cancel_after_frames`; each gets a
    /// [`LoadOutcome::Cancelled`] result. Returns how many were cancelled.
    pub fn cancel_stale(&self, current_frame: u64) -> usize {
        let k = self.cancel_after_frames;
        let mut q = self.client.lock();
        // In-flight loads of a batch loader check against these (see LoadOutcome::Cancelled).
        q.frame = current_frame;
        q.cancel_after = k;
        let stale: Vec<TileId> = q
            .states
            .iter()
            .filter_map(|(&tile, s)| match *s {
                TileState::Queued { last_requested_frame, .. }
                    if last_requested_frame.saturating_add(k) < current_frame =>
                {
                    Some(tile)
                }
                _ => None,
            })
            .collect();
        for &tile in &stale {
            q.cancel_queued(tile);
        }
        q.maybe_compact();
        stale.len()
    }

    /// Cancels one queued request; returns whether it was queued (an in-flight load
    /// cannot be cancelled and will report its own result).
    pub fn cancel(&self, tile: TileId) -> bool {
        let mut q = self.client.lock();
        if !matches!(q.states.get(&tile), Some(TileState::Queued { .. })) {
            return false;
        }
        q.cancel_queued(tile);
        q.maybe_compact();
        true
    }

    /// The channel on which results arrive. It can be cloned to receive elsewhere; it
    /// disconnects once the pool is shut down and every result has been received.
    pub fn results(&self) -> &Receiver<LoadResult> {
        &self.results
    }

    /// Every result available now, without blocking.
    pub fn try_results(&self) -> Vec<LoadResult> {
        self.results.try_iter().collect()
    }

    /// Number of queued requests not yet picked up by a worker.
    pub fn pending(&self) -> usize {
        self.client.lock().queued
    }

    /// Number of tiles being loaded right now.
    pub fn in_flight(&self) -> usize {
        self.client.lock().in_flight
    }

    /// Whether `tile` is queued or being loaded.
    pub fn is_requested(&self, tile: TileId) -> bool {
        self.client.lock().states.contains_key(&tile)
    }

    /// Running totals.
    pub fn counters(&self) -> LoaderCounters {
        self.client.lock().counters
    }

    /// The pool's configuration: its own `cancel_after_frames` and its threads'
    /// `stack_bytes`.
    pub fn config(&self) -> LoaderConfig {
        LoaderConfig {
            cancel_after_frames: self.cancel_after_frames,
            stack_bytes: self.threads.config.stack_bytes,
        }
    }

    /// Number of worker threads serving the pool (shared ones included).
    pub fn threads(&self) -> usize {
        self.threads.threads()
    }

    /// The worker threads serving the pool.
    pub fn loader_threads(&self) -> &Arc<LoaderThreads> {
        &self.threads
    }

    /// Stops the pool: queued requests are dropped and reported
    /// [`LoadOutcome::Cancelled`], in-flight loads finish and report their outcome
    /// (not waited for on [`LoaderThreads::external`] threads: those results are lost),
    /// and the pool's own workers are joined (shared ones keep serving other pools;
    /// they are joined with the last handle on them).
    ///
    /// Returns every result not yet received from [`LoaderPool::results`] (so none
    /// is lost). If a clone of the receiver is being read concurrently, results may
    /// go to either; after this returns, that clone sees the channel disconnected once
    /// it is empty.
    pub fn shutdown(mut self) -> Vec<LoadResult> {
        self.stop();
        self.try_results()
    }

    fn stop(&mut self) {
        let mut q = self.client.lock();
        if q.closed {
            return;
        }
        q.closed = true;
        let queued: Vec<TileId> = q
            .states
            .iter()
            .filter_map(|(&t, s)| matches!(s, TileState::Queued { .. }).then_some(t))
            .collect();
        for tile in queued {
            q.cancel_queued(tile);
        }
        q.heap.clear();
        // Lock order: a client's queue, then the hub.
        self.threads.hub.unregister(&self.client);
        // Workers never hold the queue lock while loading, so this wait ends when the
        // in-flight loads do. Jobs of external threads end when their executor gets to
        // them (in the browser never while this thread waits): not waited for, their
        // results go nowhere.
        while q.in_flight > 0 && !self.threads.is_external() {
            q = self.client.idle.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        // Workers dropped their handles on the loader before reporting; these are the
        // last ones the threads could reach.
        q.loader = None;
        q.results = None;
        q.staging = None;
    }
}

impl Drop for LoaderPool {
    /// Same as [`LoaderPool::shutdown`], discarding the results left in the channel;
    /// the pool's own threads are joined when its handle on them goes.
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for LoaderPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.client.lock();
        f.debug_struct("LoaderPool")
            .field("threads", &self.threads.threads())
            .field("cancel_after_frames", &self.cancel_after_frames)
            .field("pending", &q.queued)
            .field("in_flight", &q.in_flight)
            .field("counters", &q.counters)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
    use std::time::{Duration, Instant};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn t(mip: u8, x: u32) -> TileId {
        TileId::new(0, mip, x, 0)
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// A loader that blocks on `gate_tile` until the gate channel is released.
    struct Gated {
        gate_tile: TileId,
        gate: Mutex<Receiver<()>>,
    }

    impl TileLoader for Gated {
        fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
            if tile == self.gate_tile {
                let _ = self.gate.lock().unwrap().recv();
            }
            Ok(Arc::from(vec![tile.mip; 4]))
        }
    }

    /// A single-worker pool whose worker is held busy on `gate_tile`; drop or send on
    /// the returned sender to release it.
    fn gated_pool(config: LoaderConfig) -> (LoaderPool, Sender<()>, TileId) {
        let gate_tile = t(20, 0);
        let (tx, rx) = crossbeam_channel::unbounded();
        let loader = Arc::new(Gated { gate_tile, gate: Mutex::new(rx) });
        let pool = LoaderPool::new(loader, 1, config).unwrap();
        assert!(pool.request(gate_tile, 0, 0));
        wait_until("gate tile in flight", || pool.in_flight() == 1);
        (pool, tx, gate_tile)
    }

    fn collect(pool: &LoaderPool, n: usize) -> Vec<LoadResult> {
        (0..n).map(|_| pool.results().recv_timeout(Duration::from_secs(20)).unwrap()).collect()
    }

    /// Loads in batches of 4 after a gate opens, giving up the tiles no longer wanted.
    struct Batcher {
        gate: Mutex<Receiver<()>>,
        batches: Mutex<Vec<usize>>,
    }

    impl TileLoader for Batcher {
        fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
            Ok(vec![tile.x as u8].into())
        }
        fn batch_size(&self) -> usize {
            4
        }
        fn load_batch(
            &self,
            tiles: &[TileId],
            wanted: &dyn Fn(TileId) -> bool,
        ) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
            self.batches.lock().unwrap().push(tiles.len());
            let _ = self.gate.lock().unwrap().recv_timeout(Duration::from_secs(20));
            tiles.iter().map(|&t| wanted(t).then(|| self.load(t))).collect()
        }
    }

    /// A batch loader gets the queued tiles together; those not renewed while in flight
    /// are given up (cancelled) once `cancel_stale` has moved past them.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn batch_loads_give_up_tiles_no_longer_wanted() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let loader = Arc::new(Batcher { gate: Mutex::new(rx), batches: Mutex::new(Vec::new()) });
        let config = LoaderConfig { cancel_after_frames: 2, ..LoaderConfig::default() };
        let pool = LoaderPool::new(loader.clone(), 1, config).unwrap();
        let tiles: Vec<(TileId, u32)> = (0..4).map(|x| (t(0, x), 1)).collect();
        assert_eq!(pool.request_many(&tiles, 0), 4);
        wait_until("batch in flight", || pool.in_flight() == 4);
        // Tiles 0 and 1 are still wanted at frame 10; 2 and 3 were last wanted at 0.
        assert_eq!(pool.request_many(&tiles[..2], 10), 0, "in flight: renewed, not queued again");
        assert_eq!(pool.cancel_stale(12), 0, "nothing queued to cancel");
        tx.send(()).unwrap();
        let mut got: Vec<(u32, bool)> = collect(&pool, 4)
            .into_iter()
            .map(|r| (r.tile.x, matches!(r.outcome, LoadOutcome::Ready(_))))
            .collect();
        got.sort();
        assert_eq!(got, vec![(0, true), (1, true), (2, false), (3, false)]);
        assert_eq!(*loader.batches.lock().unwrap(), vec![4]);
        let c = pool.counters();
        assert_eq!(c, LoaderCounters { requested: 4, completed: 2, failed: 0, cancelled: 2 });
    }

    /// A batch loader whose even tiles are at hand (cache hits): those arrive while the
    /// batch's slow part still waits on its gate.
    struct HalfCached(Batcher);

    impl TileLoader for HalfCached {
        fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
            self.0.load(tile)
        }
        fn batch_size(&self) -> usize {
            4
        }
        fn ready_now(&self, tiles: &[TileId]) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
            tiles.iter().map(|&t| (t.x % 2 == 0).then(|| self.load(t))).collect()
        }
        fn load_batch(
            &self,
            tiles: &[TileId],
            wanted: &dyn Fn(TileId) -> bool,
        ) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
            self.0.load_batch(tiles, wanted)
        }
    }

    /// Loads in batches, each waiting as long as one of its tiles is still wanted.
    struct Patient;

    impl TileLoader for Patient {
        fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
            Ok(vec![tile.x as u8].into())
        }
        fn batch_size(&self) -> usize {
            4
        }
        fn load_batch(
            &self,
            tiles: &[TileId],
            wanted: &dyn Fn(TileId) -> bool,
        ) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while tiles.iter().any(|&t| wanted(t)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            vec![None; tiles.len()]
        }
    }

    /// Dropping a pool abandons its batch loads in flight (they see nothing wanted any
    /// more) instead of waiting for them to end.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn a_pool_shutting_down_abandons_batches_in_flight() {
        let pool = LoaderPool::new(Arc::new(Patient), 1, LoaderConfig::default()).unwrap();
        let tiles: Vec<(TileId, u32)> = (0..4).map(|x| (t(0, x), 1)).collect();
        assert_eq!(pool.request_many(&tiles, 0), 4);
        wait_until("batch in flight", || pool.in_flight() == 4);
        let (done, ended) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            drop(pool);
            let _ = done.send(());
        });
        // A liveness bound far above the few milliseconds it takes, far below the
        // loader's own 60 s.
        assert!(ended.recv_timeout(Duration::from_secs(20)).is_ok(), "the drop waited for the batch");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn tiles_at_hand_are_delivered_before_the_rest_of_their_batch() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let loader = Arc::new(HalfCached(Batcher { gate: Mutex::new(rx), batches: Mutex::new(Vec::new()) }));
        let pool = LoaderPool::new(loader.clone(), 1, LoaderConfig::default()).unwrap();
        let tiles: Vec<(TileId, u32)> = (0..4).map(|x| (t(0, x), 1)).collect();
        assert_eq!(pool.request_many(&tiles, 0), 4);
        // Before the gate opens: the two cached tiles only.
        let mut early: Vec<u32> = collect(&pool, 2).into_iter().map(|r| r.tile.x).collect();
        early.sort_unstable();
        assert_eq!(early, vec![0, 2]);
        assert!(pool.results().try_recv().is_err(), "the slow tiles wait for the gate");
        tx.send(()).unwrap();
        let mut late: Vec<u32> = collect(&pool, 2).into_iter().map(|r| r.tile.x).collect();
        late.sort_unstable();
        assert_eq!(late, vec![1, 3]);
        assert_eq!(*loader.0.batches.lock().unwrap(), vec![2], "only the uncached tiles went to load_batch");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn coarser_mips_first_then_priority_then_fifo() {
        let (pool, gate, gate_tile) = gated_pool(LoaderConfig::default());
        for (mip, x) in [(0, 0), (2, 0), (1, 0)] {
            assert!(pool.request(t(mip, x), 0, 1));
        }
        assert_eq!(pool.pending(), 3);
        drop(gate);
        let order: Vec<TileId> = collect(&pool, 4).into_iter().map(|r| r.tile).collect();
        assert_eq!(order, vec![gate_tile, t(2, 0), t(1, 0), t(0, 0)]);

        let (pool, gate, gate_tile) = gated_pool(LoaderConfig::default());
        // Same mip: priority decides, then FIFO; a raised priority keeps FIFO rank.
        assert!(pool.request(t(0, 1), 5, 1));
        assert!(pool.request(t(0, 2), 9, 1));
        assert!(pool.request(t(0, 3), 5, 1));
        assert!(pool.request(t(0, 4), 1, 1));
        assert!(pool.request(t(1, 5), 1, 1));
        assert!(!pool.request(t(0, 4), 5, 2), "already queued");
        assert!(!pool.request(t(0, 4), 3, 2), "lower priority does not lower it");
        drop(gate);
        let order: Vec<u32> = collect(&pool, 6).into_iter().skip(1).map(|r| r.tile.x).collect();
        assert_eq!(order, vec![5, 2, 1, 3, 4]);
        assert_eq!(pool.results().try_recv().ok(), None);
        assert_eq!(gate_tile, t(20, 0));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn speculative_requests_wait_for_wanted_ones() {
        let (pool, gate, _) = gated_pool(LoaderConfig::default());
        // A coarse prefetch (priority 0) and fine wanted tiles (priority >= 1).
        assert!(pool.request(t(3, 0), 0, 1));
        assert!(pool.request(t(0, 1), 1, 1));
        assert!(pool.request(t(1, 2), 2, 1));
        // A prefetch that becomes wanted is raised into the wanted class.
        assert!(pool.request(t(4, 3), 0, 1));
        assert!(!pool.request(t(4, 3), 1, 2));
        drop(gate);
        let order: Vec<u32> = collect(&pool, 5).into_iter().skip(1).map(|r| r.tile.x).collect();
        assert_eq!(order, vec![3, 2, 1, 0]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn request_in_flight_and_results() {
        let (pool, gate, gate_tile) = gated_pool(LoaderConfig::default());
        assert!(!pool.request(gate_tile, 0, 1), "in flight");
        assert!(pool.is_requested(gate_tile));
        assert!(!pool.cancel(gate_tile), "in-flight loads cannot be cancelled");
        gate.send(()).unwrap();
        let r = collect(&pool, 1).remove(0);
        assert_eq!(
            r,
            LoadResult {
                tile: gate_tile,
                outcome: LoadOutcome::Ready(Arc::from(vec![20u8; 4])),
                staged: None
            }
        );
        wait_until("idle", || pool.in_flight() == 0);
        assert!(!pool.is_requested(gate_tile));
        // Once done, the same tile can be requested again.
        assert!(pool.request(gate_tile, 0, 2));
        gate.send(()).unwrap();
        assert_eq!(collect(&pool, 1)[0].tile, gate_tile);
        assert!(pool.try_results().is_empty());
        let c = pool.counters();
        assert_eq!(c, LoaderCounters { requested: 2, completed: 2, failed: 0, cancelled: 0 });
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn cancel_and_cancel_stale() {
        let config = LoaderConfig { cancel_after_frames: 2, ..LoaderConfig::default() };
        let (pool, gate, gate_tile) = gated_pool(config);
        assert_eq!(pool.config(), config);
        assert!(pool.request(t(0, 1), 0, 10));
        assert!(pool.request(t(0, 2), 0, 10));
        assert!(pool.request(t(0, 3), 0, 11));
        assert!(pool.request(t(0, 4), 0, 12));
        assert!(!pool.request(t(0, 1), 0, 12), "renews frame to 12");
        assert!(!pool.request(t(0, 1), 0, 3), "frames never go backwards");
        assert!(pool.cancel(t(0, 4)));
        assert!(!pool.cancel(t(0, 4)));
        // 10 + 2 < 13 and 11 + 2 < 14.
        assert_eq!(pool.cancel_stale(12), 0);
        assert_eq!(pool.cancel_stale(13), 1);
        assert_eq!(pool.cancel_stale(14), 1);
        assert_eq!(pool.cancel_stale(14), 0);
        assert_eq!(pool.pending(), 1);
        let mut cancelled: Vec<u32> = pool
            .try_results()
            .into_iter()
            .map(|r| {
                assert_eq!(r.outcome, LoadOutcome::Cancelled);
                r.tile.x
            })
            .collect();
        cancelled.sort();
        assert_eq!(cancelled, vec![2, 3, 4]);
        // The in-flight gate tile is never cancelled as stale.
        assert_eq!(pool.cancel_stale(1000), 1);
        assert_eq!(pool.in_flight(), 1);
        drop(gate);
        let rest = collect(&pool, 2);
        assert_eq!(rest[0], LoadResult { tile: t(0, 1), outcome: LoadOutcome::Cancelled, staged: None });
        assert_eq!(rest[1].tile, gate_tile);
        let c = pool.counters();
        assert_eq!(c, LoaderCounters { requested: 5, completed: 1, failed: 0, cancelled: 4 });
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn failures_and_panics_are_reported() {
        let loader = |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
            match tile.x {
                0 => Ok(Arc::from(&b"ok"[..])),
                1 => Err(LoadError::failed(tile, "corrupt")),
                _ => panic!("boom {}", tile.x),
            }
        };
        let pool = LoaderPool::new(Arc::new(loader), 2, LoaderConfig::default()).unwrap();
        assert_eq!(pool.threads(), 2);
        for x in 0..3 {
            assert!(pool.request(t(0, x), 0, 0));
        }
        let mut results = collect(&pool, 3);
        results.sort_by_key(|r| r.tile.x);
        assert_eq!(results[0].outcome, LoadOutcome::Ready(Arc::from(&b"ok"[..])));
        let LoadOutcome::Failed(e) = &results[1].outcome else { panic!("{:?}", results[1]) };
        assert_eq!(e.to_string(), "tile layer 0 mip 0 tile (1, 0): corrupt");
        assert_eq!(e.tile(), t(0, 1));
        let LoadOutcome::Failed(e) = &results[2].outcome else { panic!("{:?}", results[2]) };
        assert_eq!(*e, LoadError::Panicked { tile: t(0, 2), message: "boom 2".into() });
        // The worker that caught the panic is still serving.
        assert!(pool.request(t(0, 0), 0, 1));
        assert_eq!(collect(&pool, 1)[0].tile, t(0, 0));
        let c = pool.counters();
        assert_eq!(c, LoaderCounters { requested: 4, completed: 2, failed: 2, cancelled: 0 });
        assert!(format!("{pool:?}").contains("threads: 2"));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn shutdown_cancels_queued_and_joins() {
        let gate_tile = t(20, 0);
        let (gate_tx, gate_rx) = crossbeam_channel::unbounded();
        let loader = Arc::new(Gated { gate_tile, gate: Mutex::new(gate_rx) });
        let as_dyn: Arc<dyn TileLoader> = loader.clone();
        let pool = LoaderPool::new(as_dyn, 3, LoaderConfig::default()).unwrap();
        let rx = pool.results().clone();
        assert!(pool.request(gate_tile, 0, 0));
        wait_until("gate tile in flight", || pool.in_flight() == 1);
        // The two other workers race shutdown for this work: whether a tile is loaded
        // or cancelled, every request still ends with exactly one result.
        for x in 0..50 {
            assert!(pool.request(t(0, x), 0, 0));
        }
        // Release the gate only after shutdown has started cancelling.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(gate_tx);
        });
        let mut results = pool.shutdown();
        releaser.join().unwrap();
        // The cloned receiver sees nothing more, then the disconnect.
        results.extend(rx.try_iter());
        assert!(rx.recv().is_err(), "result channel closes after shutdown");
        assert_eq!(results.len(), 51);
        let gate_result = results.iter().find(|r| r.tile == gate_tile).unwrap();
        assert!(matches!(gate_result.outcome, LoadOutcome::Ready(_)));
        let mut seen: Vec<TileId> = results.iter().map(|r| r.tile).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 51);
        // Every worker has exited and released its handle on the loader.
        assert_eq!(Arc::strong_count(&loader), 1);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn drop_joins_workers() {
        let loads = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&loads);
        let loader: Arc<dyn TileLoader> = Arc::new(move |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
            counter.fetch_add(1, AtomicOrdering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
            Ok(Arc::from(vec![tile.mip]))
        });
        let weak = Arc::downgrade(&loader);
        let pool = LoaderPool::new(loader, 4, LoaderConfig::default()).unwrap();
        for x in 0..200 {
            pool.request(t(0, x), 0, 0);
        }
        drop(pool);
        assert_eq!(weak.strong_count(), 0, "workers still hold the loader");
        assert!(loads.load(AtomicOrdering::SeqCst) <= 200);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn heap_stays_compact_under_churn() {
        let (pool, gate, _gate_tile) = gated_pool(LoaderConfig::default());
        for round in 0..200u32 {
            pool.request(t(0, round % 7), 0, 0);
            pool.request(t(0, round % 7), round, 0);
            pool.cancel(t(0, (round + 3) % 7));
        }
        let q = pool.client.lock();
        assert!(q.heap.len() <= 2 * q.queued + 64, "heap {} for {} queued", q.heap.len(), q.queued);
        drop(q);
        drop(gate);
    }

    /// A loader whose bytes say which client loaded the tile: `[client, x as u8]`.
    fn tagged(client: u8) -> Arc<dyn TileLoader> {
        Arc::new(move |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
            std::thread::yield_now();
            Ok(Arc::from(vec![client, tile.x as u8]))
        })
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn clients_on_shared_threads_each_get_one_result_per_request() {
        let threads = LoaderThreads::new(2, LoaderConfig::default()).unwrap();
        let a = LoaderPool::on_threads(&threads, tagged(1));
        let b = LoaderPool::on_threads(&threads, tagged(2));
        assert_eq!((a.threads(), b.threads(), threads.clients()), (2, 2, 2));
        // The same tile ids in both clients: each queue is its own.
        let tiles: Vec<(TileId, u32)> = (0..200).map(|x| (t((x % 3) as u8, x), x % 4)).collect();
        for chunk in tiles.chunks(25) {
            assert_eq!(a.request_many(chunk, 0), chunk.len());
            assert_eq!(b.request_many(chunk, 0), chunk.len());
            assert_eq!(b.request_many(chunk, 1), 0, "already queued or in flight");
        }
        for (pool, tag) in [(&a, 1u8), (&b, 2u8)] {
            let mut seen: Vec<u32> = collect(pool, 200)
                .into_iter()
                .map(|r| {
                    assert_eq!(r.outcome, LoadOutcome::Ready(Arc::from(vec![tag, r.tile.x as u8])));
                    r.tile.x
                })
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..200).collect::<Vec<u32>>());
            wait_until("idle", || pool.in_flight() == 0);
            assert!(pool.try_results().is_empty(), "one result per request");
            assert_eq!(
                pool.counters(),
                LoaderCounters { requested: 200, completed: 200, ..Default::default() }
            );
        }
        assert!(format!("{threads:?}").contains("clients: 2"));
        drop(a);
        assert_eq!(threads.clients(), 1);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn cancelling_in_one_client_leaves_the_other() {
        // One shared thread, held busy by a third client's gated load.
        let threads = LoaderThreads::new(1, LoaderConfig::default()).unwrap();
        let gate_tile = t(20, 0);
        let (gate, gate_rx) = crossbeam_channel::unbounded();
        let g = LoaderPool::on_threads(&threads, Arc::new(Gated { gate_tile, gate: Mutex::new(gate_rx) }));
        assert!(g.request(gate_tile, 0, 0));
        wait_until("gate tile in flight", || g.in_flight() == 1);
        let a = LoaderPool::on_threads(&threads, tagged(1)).with_cancel_after_frames(2);
        let b = LoaderPool::on_threads(&threads, tagged(2));
        assert_eq!(a.config().cancel_after_frames, 2);
        assert_eq!(b.config(), LoaderConfig::default());
        for x in 1..=4 {
            assert!(a.request(t(0, x), 1, 10));
            assert!(b.request(t(0, x), 1, 10));
        }
        assert!(a.cancel(t(0, 2)));
        assert_eq!(a.cancel_stale(13), 3);
        assert_eq!((a.pending(), b.pending()), (0, 4));
        assert!(b.is_requested(t(0, 2)) && !a.is_requested(t(0, 2)));
        assert_eq!(b.cancel_stale(13), 0, "b keeps the default of 8 frames");
        drop(gate);
        let mut got: Vec<u32> = collect(&b, 4)
            .into_iter()
            .map(|r| {
                assert!(matches!(r.outcome, LoadOutcome::Ready(_)), "{r:?}");
                r.tile.x
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![1, 2, 3, 4]);
        let a_results = a.try_results();
        assert_eq!(a_results.len(), 4);
        assert!(a_results.iter().all(|r| r.outcome == LoadOutcome::Cancelled));
        assert_eq!(a.counters(), LoaderCounters { requested: 4, cancelled: 4, ..Default::default() });
        assert_eq!(b.counters(), LoaderCounters { requested: 4, completed: 4, ..Default::default() });
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn dropping_a_client_with_loads_in_flight_leaves_the_other() {
        let threads = LoaderThreads::new(2, LoaderConfig::default()).unwrap();
        let slow: Arc<dyn TileLoader> = Arc::new(|tile: TileId| -> Result<Arc<[u8]>, LoadError> {
            std::thread::sleep(Duration::from_millis(30));
            Ok(Arc::from(vec![1, tile.x as u8]))
        });
        let slow_weak = Arc::downgrade(&slow);
        let a = LoaderPool::on_threads(&threads, slow);
        let a_rx = a.results().clone();
        for x in 0..10 {
            assert!(a.request(t(0, x), 1, 0));
        }
        wait_until("both threads loading for a", || a.in_flight() == 2);
        let b = LoaderPool::on_threads(&threads, tagged(2));
        for x in 0..20 {
            assert!(b.request(t(0, x), 1, 0));
        }
        // Waits for a's two in-flight loads; b's requests are served meanwhile or after.
        drop(a);
        assert_eq!(slow_weak.strong_count(), 0, "the dropped client's loader is released");
        assert_eq!(threads.clients(), 1);
        // a's results went to a's channel only: 8 cancelled, 2 loaded, then the end.
        let a_results: Vec<LoadResult> = a_rx.iter().collect();
        assert_eq!(a_results.len(), 10);
        assert_eq!(a_results.iter().filter(|r| r.outcome == LoadOutcome::Cancelled).count(), 8);
        let mut got: Vec<u32> = collect(&b, 20)
            .into_iter()
            .map(|r| {
                assert_eq!(r.outcome, LoadOutcome::Ready(Arc::from(vec![2, r.tile.x as u8])));
                r.tile.x
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..20).collect::<Vec<u32>>());
        wait_until("b idle", || b.in_flight() == 0);
        assert!(b.try_results().is_empty());
        // The threads keep serving.
        assert!(b.request(t(1, 0), 0, 1));
        assert_eq!(collect(&b, 1)[0].tile, t(1, 0));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn a_long_backlog_does_not_starve_another_client() {
        let threads = LoaderThreads::new(2, LoaderConfig::default()).unwrap();
        let a_loads = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&a_loads);
        let a = LoaderPool::on_threads(
            &threads,
            Arc::new(move |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
                counter.fetch_add(1, AtomicOrdering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
                Ok(Arc::from(vec![tile.mip]))
            }),
        );
        // Coarse mips and high priorities, so that nothing in b's queue would win on
        // priority if the two shared one queue.
        let backlog: Vec<(TileId, u32)> = (0..1000).map(|x| (t(9, x), 100)).collect();
        assert_eq!(a.request_many(&backlog, 0), 1000);
        wait_until("a loading on both threads", || a.in_flight() == 2);
        let seen_by_b = Arc::new(AtomicUsize::new(usize::MAX));
        let (probe, b_counter) = (Arc::clone(&seen_by_b), Arc::clone(&a_loads));
        let b = LoaderPool::on_threads(
            &threads,
            Arc::new(move |_tile: TileId| -> Result<Arc<[u8]>, LoadError> {
                probe.store(b_counter.load(AtomicOrdering::SeqCst), AtomicOrdering::SeqCst);
                Ok(Arc::from(vec![0u8]))
            }),
        );
        let before = a_loads.load(AtomicOrdering::SeqCst);
        assert!(b.request(t(0, 0), 0, 0));
        assert_eq!(collect(&b, 1)[0].tile, t(0, 0));
        let started_meanwhile = seen_by_b.load(AtomicOrdering::SeqCst) - before;
        // Each thread finishes its current load of a's and may start one more before
        // the ring comes round to b.
        assert!(started_meanwhile <= 2 * threads.threads(), "{started_meanwhile} of a's loads went first");
        assert!(a.pending() > 900, "b did not wait for a's backlog");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn shared_threads_are_counted_and_joined_with_the_last_handle() {
        let threads =
            LoaderThreads::new(3, LoaderConfig { stack_bytes: Some(1 << 20), ..Default::default() }).unwrap();
        assert_eq!(threads.threads(), 3);
        assert_eq!(threads.config().stack_bytes, Some(1 << 20));
        let per_core = LoaderThreads::new(0, LoaderConfig::default()).unwrap();
        assert_eq!(per_core.threads(), default_loader_threads());
        drop(per_core);
        let hub = Arc::downgrade(&threads.hub);
        let a = LoaderPool::on_threads(&threads, tagged(1));
        let b = LoaderPool::on_threads(&threads, tagged(2));
        assert!(Arc::ptr_eq(a.loader_threads(), b.loader_threads()));
        assert_eq!((a.threads(), b.threads()), (3, 3));
        assert_eq!(a.config().stack_bytes, Some(1 << 20));
        drop(threads);
        // The clients keep the threads alive.
        assert!(a.request(t(0, 7), 0, 0));
        assert_eq!(collect(&a, 1)[0].outcome, LoadOutcome::Ready(Arc::from(vec![1, 7])));
        drop(a);
        assert!(b.request(t(0, 8), 0, 0));
        assert_eq!(collect(&b, 1)[0].tile, t(0, 8));
        drop(b);
        // Every worker has exited (each held the hub) and been joined.
        assert_eq!(hub.strong_count(), 0);
    }

    /// Many submitters and a canceller race; every `true` from `request` must be
    /// matched by exactly one result for that tile.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn stress_exactly_one_result_per_accepted_request() {
        const TILES: u32 = 64;
        let loader = |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
            if tile.x.is_multiple_of(5) {
                std::thread::sleep(Duration::from_micros(5));
            } else {
                std::thread::yield_now();
            }
            if tile.x.is_multiple_of(11) {
                Err(LoadError::failed(tile, "synthetic failure"))
            } else {
                Ok(Arc::from(vec![tile.mip; 8]))
            }
        };
        let pool = Arc::new(
            LoaderPool::new(
                Arc::new(loader),
                3,
                LoaderConfig { cancel_after_frames: 2, ..LoaderConfig::default() },
            )
            .unwrap(),
        );
        let frame = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let submitters: Vec<_> = (0..4u32)
            .map(|s| {
                let (pool, frame, stop) = (Arc::clone(&pool), Arc::clone(&frame), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut accepted: HashMap<TileId, usize> = HashMap::new();
                    let mut rng = 0x9e37_79b9_u32.wrapping_mul(s + 1);
                    while !stop.load(AtomicOrdering::SeqCst) {
                        rng ^= rng << 13;
                        rng ^= rng >> 17;
                        rng ^= rng << 5;
                        let tile = TileId::new(0, (rng % 4) as u8, (rng >> 8) % TILES, 0);
                        let f = frame.load(AtomicOrdering::SeqCst) as u64;
                        if pool.request(tile, rng >> 28, f) {
                            *accepted.entry(tile).or_default() += 1;
                        }
                        if rng.is_multiple_of(8) {
                            std::thread::sleep(Duration::from_micros(10));
                        }
                    }
                    accepted
                })
            })
            .collect();
        let canceller = {
            let (pool, frame, stop) = (Arc::clone(&pool), Arc::clone(&frame), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut cancelled = 0;
                for i in 0..2000u32 {
                    let f = frame.fetch_add(1, AtomicOrdering::SeqCst) as u64 + 1;
                    cancelled += pool.cancel_stale(f);
                    if pool.cancel(TileId::new(0, (i % 4) as u8, i % TILES, 0)) {
                        cancelled += 1;
                    }
                    std::thread::sleep(Duration::from_micros(20));
                }
                stop.store(true, AtomicOrdering::SeqCst);
                cancelled
            })
        };
        // Drain results concurrently too, as the renderer would.
        let mut results: HashMap<TileId, usize> = HashMap::new();
        let mut outcomes = [0usize; 3];
        let mut tally = |r: LoadResult| {
            *results.entry(r.tile).or_default() += 1;
            outcomes[match r.outcome {
                LoadOutcome::Ready(_) => 0,
                LoadOutcome::Failed(_) => 1,
                LoadOutcome::Cancelled => 2,
            }] += 1;
        };
        let mut accepted: HashMap<TileId, usize> = HashMap::new();
        let mut handles = submitters;
        while !handles.is_empty() {
            pool.try_results().into_iter().for_each(&mut tally);
            if handles.iter().all(|h| h.is_finished()) {
                for h in handles.drain(..) {
                    for (tile, n) in h.join().unwrap() {
                        *accepted.entry(tile).or_default() += n;
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let cancelled_by_canceller = canceller.join().unwrap();
        wait_until("pool drained", || pool.pending() == 0 && pool.in_flight() == 0);
        pool.try_results().into_iter().for_each(&mut tally);

        assert_eq!(results, accepted, "per-tile results differ from accepted requests");
        let c = pool.counters();
        let total: usize = accepted.values().sum();
        assert_eq!(c.requested as usize, total);
        assert_eq!(c.completed as usize, outcomes[0]);
        assert_eq!(c.failed as usize, outcomes[1]);
        assert_eq!(c.cancelled as usize, outcomes[2]);
        assert_eq!(c.cancelled as usize, cancelled_by_canceller);
        assert_eq!(c.requested, c.completed + c.failed + c.cancelled);
        assert!(c.completed > 0 && c.failed > 0 && c.cancelled > 0, "{c:?}");
        assert_eq!(pool.pending(), 0);
        assert_eq!(pool.in_flight(), 0);
        let pool = Arc::try_unwrap(pool).unwrap();
        assert!(pool.shutdown().is_empty());
    }

    /// What external threads hand out: each job's tile, the client whose job it was.
    fn drain_external(threads: &LoaderThreads, clients: &[&LoaderPool]) -> Vec<(usize, TileId)> {
        let mut order = Vec::new();
        while let Some(job) = threads.take_job(1) {
            assert_eq!(job.tiles().len(), 1);
            let tile = job.tiles()[0];
            job.run();
            let who = clients.iter().position(|c| !c.try_results().is_empty()).unwrap();
            order.push((who, tile));
        }
        order
    }

    /// External threads hand out jobs in the order worker threads take them: clients in
    /// turn, each client's wanted tiles coarse mip first, then by priority, then in
    /// request order, speculative ones last; a batch loader's jobs hold up to its batch.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs a clock")]
    fn external_threads_hand_out_jobs_in_the_pools_order() {
        let threads = LoaderThreads::external(LoaderConfig::default());
        assert!(threads.is_external() && threads.threads() == 0);
        assert!(format!("{threads:?}").contains("external: true"));
        let a = LoaderPool::on_threads(&threads, tagged(1));
        let b = LoaderPool::on_threads(&threads, tagged(2));
        assert!(threads.take_job(8).is_none(), "nothing queued");
        assert_eq!(
            a.request_many(&[(t(0, 1), 5), (t(2, 2), 1), (t(1, 3), 9), (t(2, 4), 0), (t(0, 5), 5)], 0),
            5
        );
        assert_eq!(b.request_many(&[(t(0, 9), 1), (t(3, 8), 1)], 0), 2);
        assert_eq!(a.pending(), 5);
        let order = drain_external(&threads, &[&a, &b]);
        let want = [
            (0, t(2, 2)),
            (1, t(3, 8)),
            (0, t(1, 3)),
            (1, t(0, 9)),
            (0, t(0, 1)),
            (0, t(0, 5)),
            (0, t(2, 4)),
        ];
        assert_eq!(order, want);
        assert_eq!((a.pending(), a.in_flight(), b.pending(), b.in_flight()), (0, 0, 0, 0));
        assert_eq!(a.counters(), LoaderCounters { requested: 5, completed: 5, ..Default::default() });

        // A batch loader's job holds its batch (4), or fewer when asked.
        let (tx, rx) = crossbeam_channel::unbounded();
        // The gate open: the batches load at once.
        drop(tx);
        let batcher = Arc::new(Batcher { gate: Mutex::new(rx), batches: Mutex::new(Vec::new()) });
        let c = LoaderPool::on_threads(&threads, batcher);
        let tiles: Vec<(TileId, u32)> = (0..7).map(|x| (t(0, x), 1)).collect();
        assert_eq!(c.request_many(&tiles, 0), 7);
        let first = threads.take_job(3).unwrap();
        assert_eq!(first.tiles(), &[t(0, 0), t(0, 1), t(0, 2)]);
        let second = threads.take_job(64).unwrap();
        assert_eq!(second.tiles(), &[t(0, 3), t(0, 4), t(0, 5), t(0, 6)]);
        assert!(threads.take_job(64).is_none());
        assert_eq!(c.in_flight(), 7);
        // Finished out of order, each reports its own tiles.
        second.run();
        first.run();
        let mut got: Vec<u32> = c.try_results().iter().map(|r| r.tile.x).collect();
        got.sort_unstable();
        assert_eq!(got, (0..7).collect::<Vec<u32>>());

        // Threads with workers hand out nothing: their workers take the jobs.
        let native = LoaderThreads::new(1, LoaderConfig::default()).unwrap();
        assert!(!native.is_external() && native.take_job(1).is_none());
    }

    /// Jobs of tiles no longer wanted finish cancelled without loading, as a batch
    /// loader gives them up on worker threads; a dropped job cancels its tiles, a
    /// missing outcome fails its tile, and a pool dropped with a job out does not wait.
    #[test]
    fn external_jobs_follow_cancellation_and_staleness() {
        let threads =
            LoaderThreads::external(LoaderConfig { cancel_after_frames: 2, ..LoaderConfig::default() });
        let loads = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&loads);
        let loader: Arc<dyn TileLoader> = Arc::new(move |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
            counter.fetch_add(1, AtomicOrdering::SeqCst);
            Ok(Arc::from(vec![tile.x as u8]))
        });
        let pool = LoaderPool::on_threads(&threads, loader);
        assert_eq!(pool.config().cancel_after_frames, 2);
        assert_eq!(pool.request_many(&[(t(0, 1), 1), (t(0, 2), 1)], 10), 2);
        let job = threads.take_job(8).unwrap();
        assert_eq!(job.tiles(), &[t(0, 1)]);
        assert!(job.still_wanted(t(0, 1)) && job.loader().is_some());
        assert!(job.fetch_ranges().is_empty(), "a closure loader fetches nothing");
        assert_eq!((pool.pending(), pool.in_flight()), (1, 1));
        // Frame 13: the queued tile is cancelled, the one in flight no longer wanted.
        assert_eq!(pool.cancel_stale(13), 1);
        assert!(!job.still_wanted(t(0, 1)));
        assert_eq!(job.load(), vec![LoadOutcome::Cancelled]);
        job.run();
        assert_eq!(loads.load(AtomicOrdering::SeqCst), 0, "nothing loaded");
        let results = pool.try_results();
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(|r| r.outcome == LoadOutcome::Cancelled));

        // Renewed while in flight: still wanted, loaded.
        assert!(pool.request(t(0, 3), 1, 20));
        let job = threads.take_job(8).unwrap();
        assert!(!pool.request(t(0, 3), 1, 30), "in flight: renewed");
        assert_eq!(pool.cancel_stale(31), 0);
        assert!(job.still_wanted(t(0, 3)));
        job.run();
        assert_eq!(pool.try_results()[0].outcome, LoadOutcome::Ready(Arc::from(vec![3u8])));

        // Dropped unfinished: cancelled. Finished without an outcome: failed.
        // Unavailable: transient, as a failed fetch is.
        assert_eq!(pool.request_many(&[(t(0, 4), 1), (t(0, 5), 1), (t(0, 6), 1)], 40), 3);
        drop(threads.take_job(1).unwrap());
        threads.take_job(1).unwrap().finish(Vec::new());
        threads.take_job(1).unwrap().finish_unavailable("fetch failed: 503");
        let results = pool.try_results();
        assert_eq!(results[0], LoadResult { tile: t(0, 4), outcome: LoadOutcome::Cancelled, staged: None });
        assert!(matches!(&results[1].outcome, LoadOutcome::Failed(e) if !e.is_transient()), "{results:?}");
        assert!(matches!(&results[2].outcome, LoadOutcome::Failed(e) if e.is_transient()), "{results:?}");
        assert_eq!(pool.counters(), LoaderCounters { requested: 6, completed: 1, failed: 2, cancelled: 3 });

        // A pool dropped with a job out returns at once; the job ends later, unheard.
        assert!(pool.request(t(0, 7), 1, 50));
        let job = threads.take_job(1).unwrap();
        drop(pool);
        assert_eq!(threads.clients(), 0);
        assert!(!job.still_wanted(t(0, 7)), "a closed pool wants nothing");
        job.run();
        assert!(threads.take_job(1).is_none());
    }

    /// A job split for decoding tile by tile reports every tile exactly once, in two
    /// parts that can run in either order; splitting at an end does nothing.
    #[test]
    fn external_jobs_split_into_parts() {
        /// Loads in batches of 8, as the ranged atlas loader does.
        struct Eights;
        impl TileLoader for Eights {
            fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
                Ok(vec![tile.x as u8].into())
            }
            fn batch_size(&self) -> usize {
                8
            }
        }
        let threads = LoaderThreads::external(LoaderConfig::default());
        let pool = LoaderPool::on_threads(&threads, Arc::new(Eights));
        assert_eq!(pool.request_many(&[(t(0, 1), 1), (t(0, 2), 1), (t(0, 3), 1)], 1), 3);
        let mut job = threads.take_job(8).unwrap();
        assert_eq!(job.tiles().len(), 3);
        assert!(job.split_off(0).is_none() && job.split_off(3).is_none());
        let mut tail = job.split_off(1).unwrap();
        let last = tail.split_off(1).unwrap();
        assert_eq!((job.tiles().len(), tail.tiles().len(), last.tiles().len()), (1, 1, 1));
        last.run();
        assert_eq!(pool.try_results().len(), 1, "a part reports its own tiles only");
        drop(tail);
        job.run();
        let results = pool.try_results();
        assert_eq!(results.len(), 2);
        assert_eq!(pool.counters(), LoaderCounters { requested: 3, completed: 2, failed: 0, cancelled: 1 });
        assert_eq!(pool.in_flight(), 0);
    }
}
