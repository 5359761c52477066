//! One client's request queue (priorities, renewals, cancellation) and the hub that
//! hands the loader threads the next client with work.

use super::*;

/// Per-tile state of the queue.
#[derive(Clone, Copy, Debug)]
pub(super) enum TileState {
    /// Waiting for a worker. `seq` identifies this queuing; heap entries with another
    /// `seq` or a lower `priority` are stale.
    Queued { last_requested_frame: u64, priority: u32, seq: u64 },
    /// A worker is loading it; renewed requests still move `last_requested_frame`.
    InFlight { last_requested_frame: u64 },
}

/// A heap entry; the greatest is served first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QueueEntry {
    pub(super) mip: u8,
    pub(super) priority: u32,
    pub(super) seq: u64,
    pub(super) tile: TileId,
}

impl Ord for QueueEntry {
    /// Wanted (priority above 0) before speculative (priority 0), then coarser mip
    /// first, then higher priority, then lower sequence number (FIFO).
    fn cmp(&self, other: &Self) -> Ordering {
        (self.priority > 0)
            .cmp(&(other.priority > 0))
            .then(self.mip.cmp(&other.mip))
            .then(self.priority.cmp(&other.priority))
            .then(other.seq.cmp(&self.seq))
            .then(self.tile.cmp(&other.tile))
    }
}

impl PartialOrd for QueueEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Everything behind a client's queue mutex.
#[derive(Default)]
pub(super) struct Queue {
    /// May hold stale entries (cancelled tiles, superseded priorities); they are
    /// skipped when popped and dropped when the heap is compacted.
    pub(super) heap: BinaryHeap<QueueEntry>,
    pub(super) states: TileMap<TileState>,
    pub(super) next_seq: u64,
    pub(super) queued: usize,
    pub(super) in_flight: usize,
    pub(super) counters: LoaderCounters,
    /// The client's loader; taken when the client stops and nothing is in flight.
    pub(super) loader: Option<Arc<dyn TileLoader>>,
    /// Where results go; taken with `loader`, which disconnects the results channel.
    pub(super) results: Option<Sender<LoadResult>>,
    /// Where loaded tiles are written for the renderer, if anywhere.
    pub(super) staging: Option<Arc<StagingRing>>,
    /// Whether the client is in the threads' ready ring or a worker has just taken
    /// it from there and will put it back if work is left.
    pub(super) scheduled: bool,
    /// Set once by [`LoaderPool::shutdown`] or drop: no new request is accepted.
    pub(super) closed: bool,
    /// The frame last given to [`LoaderPool::cancel_stale`], and its `K`: an in-flight
    /// tile not renewed since `frame - K` is no longer wanted.
    pub(super) frame: u64,
    pub(super) cancel_after: u64,
}

impl Queue {
    fn is_live(&self, e: &QueueEntry) -> bool {
        matches!(
            self.states.get(&e.tile),
            Some(TileState::Queued { priority, seq, .. }) if *seq == e.seq && *priority == e.priority
        )
    }

    /// Pops the best live entry and marks it in flight.
    fn pop_next(&mut self) -> Option<TileId> {
        while let Some(e) = self.heap.pop() {
            if let Some(&TileState::Queued { last_requested_frame, .. }) = self.states.get(&e.tile)
                && self.is_live(&e)
            {
                self.states.insert(e.tile, TileState::InFlight { last_requested_frame });
                self.queued -= 1;
                self.in_flight += 1;
                return Some(e.tile);
            }
        }
        None
    }

    /// Drops stale heap entries once they outnumber live ones, keeping the heap
    /// O(queued) at amortised O(1) cost per push.
    pub(super) fn maybe_compact(&mut self) {
        if self.heap.len() > 2 * self.queued + 64 {
            let heap = std::mem::take(&mut self.heap);
            let mut live = heap.into_vec();
            live.retain(|e| self.is_live(e));
            self.heap = BinaryHeap::from(live);
        }
    }

    /// Sends a result to the client's channel. The client's pool owns the receiver
    /// until the sender is taken, so this cannot fail; if it ever did, nobody is
    /// listening anyway.
    fn report(&self, result: LoadResult) {
        if let Some(results) = &self.results {
            let _ = results.send(result);
        }
    }

    /// Whether an in-flight `tile` is still wanted: renewed within `cancel_after`
    /// frames of the last frame given to `cancel_stale`.
    pub(super) fn still_wanted(&self, tile: TileId) -> bool {
        // A pool shutting down wants nothing more: batch loads in flight (a remote
        // atlas' range requests) are abandoned instead of waited for.
        if self.closed {
            return false;
        }
        match self.states.get(&tile) {
            Some(TileState::InFlight { last_requested_frame }) => {
                last_requested_frame.saturating_add(self.cancel_after) >= self.frame
            }
            _ => true,
        }
    }

    /// Removes a queued (not in-flight) tile and reports it cancelled.
    pub(super) fn cancel_queued(&mut self, tile: TileId) {
        self.states.remove(&tile);
        self.queued -= 1;
        self.counters.cancelled += 1;
        self.report(LoadResult { tile, outcome: LoadOutcome::Cancelled, staged: None });
    }
}

/// One [`LoaderPool`]'s state, shared with the worker threads that serve it.
pub(super) struct Client {
    pub(super) queue: Mutex<Queue>,
    /// Signalled when the last in-flight load of a closed client has reported.
    pub(super) idle: Condvar,
}

impl Client {
    /// Locks the queue. Loader panics are caught outside the lock and every critical
    /// section leaves the queue consistent, so a poisoned lock is safe to reuse.
    pub(super) fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the client's best requests (as many as its loader batches, at most
    /// `max_tiles`) and marks them in flight; puts the client back at the end of the
    /// ready ring if more is queued. Called by a worker (or [`LoaderThreads::take_job`])
    /// that has just taken the client from the ring.
    pub(super) fn start_next(self: &Arc<Self>, hub: &Hub, max_tiles: usize) -> Option<Job> {
        let mut q = self.lock();
        let staging = q.staging.clone();
        let job = match q.loader.clone() {
            Some(loader) if !q.closed => {
                let want = loader.batch_size().min(max_tiles).max(1);
                let tiles: Vec<TileId> = std::iter::from_fn(|| q.pop_next()).take(want).collect();
                (!tiles.is_empty()).then_some(Job { tiles, loader, staging })
            }
            _ => None,
        };
        if q.queued > 0 && !q.closed {
            // Lock order: a client's queue, then the hub.
            hub.schedule(Arc::clone(self), 1);
        } else {
            q.scheduled = false;
        }
        job
    }

    /// Books and reports the end of an in-flight load.
    pub(super) fn finish(&self, tile: TileId, outcome: LoadOutcome, staged: Option<StagedTile>) {
        let mut q = self.lock();
        q.states.remove(&tile);
        q.in_flight -= 1;
        match outcome {
            LoadOutcome::Ready(_) => q.counters.completed += 1,
            LoadOutcome::Failed(_) => q.counters.failed += 1,
            LoadOutcome::Cancelled => q.counters.cancelled += 1,
        }
        // Sent under the lock so that a new request for this tile, which can only be
        // made once the state is gone, reports after this result.
        q.report(LoadResult { tile, outcome, staged });
        if q.closed && q.in_flight == 0 {
            self.idle.notify_all();
        }
    }
}

/// The scheduler the worker threads share: a ring of clients with queued work.
#[derive(Default)]
pub(super) struct Hub {
    pub(super) state: Mutex<HubState>,
    /// Signalled when a client joins the ring, and at shutdown.
    pub(super) work: Condvar,
}

/// Everything behind the hub's mutex.
#[derive(Default)]
pub(super) struct HubState {
    /// Clients that have (or just had) queued requests, served from the front; a
    /// client appears at most once.
    pub(super) ready: VecDeque<Arc<Client>>,
    /// Registered clients (for reports).
    pub(super) clients: usize,
    /// Set when the last handle on the threads is gone: workers exit.
    pub(super) shutdown: bool,
}

impl Hub {
    pub(super) fn lock(&self) -> MutexGuard<'_, HubState> {
        // Nothing under this lock can panic half-way.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `client` to the ready ring and wakes up to `wake` idle workers. The
    /// caller holds the client's queue lock and has set its `scheduled` flag.
    pub(super) fn schedule(&self, client: Arc<Client>, wake: usize) {
        self.lock().ready.push_back(client);
        for _ in 0..wake {
            self.work.notify_one();
        }
    }

    /// Wakes up to `n` idle workers (the client is already in the ring).
    pub(super) fn wake(&self, n: usize) {
        for _ in 0..n {
            self.work.notify_one();
        }
    }

    /// Takes `client` out of the ring and the registry.
    pub(super) fn unregister(&self, client: &Arc<Client>) {
        let mut h = self.lock();
        h.ready.retain(|c| !Arc::ptr_eq(c, client));
        h.clients = h.clients.saturating_sub(1);
    }

    /// Takes the client at the front of the ring without waiting (`None`: none is
    /// ready, or shutdown).
    pub(super) fn try_next_client(&self) -> Option<Arc<Client>> {
        let mut h = self.lock();
        if h.shutdown { None } else { h.ready.pop_front() }
    }

    /// Blocks until a client is ready and takes it from the front of the ring, or
    /// returns `None` at shutdown.
    pub(super) fn next_client(&self) -> Option<Arc<Client>> {
        let mut h = self.lock();
        loop {
            if h.shutdown {
                return None;
            }
            if let Some(client) = h.ready.pop_front() {
                return Some(client);
            }
            h = self.work.wait(h).unwrap_or_else(|e| e.into_inner());
        }
    }
}
