//! One frame's decisions: feedback taken in, predictions, retries of unavailable tiles,
//! finished loads, staged uploads, and the plan handed to the renderer.

use super::*;

impl Streamer {
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
        if let Some(slice) = self.slice.as_mut() {
            slice.observe_cpu(input.last_upload_ms, self.last_uploads);
            if let Some((ms, tiles)) = input.upload_gpu {
                slice.observe_gpu(ms, tiles);
            }
            // The budget in force (the adaptive one's, else the setting), capped.
            let (budget, bytes) = match &self.budget {
                Some(b) => (b.budget().tiles, b.budget().bytes.max(1)),
                None => (self.config.max_uploads_per_frame, self.config.max_upload_bytes_per_frame),
            };
            let cap = slice.tiles();
            self.residency.set_upload_budget(cap.map_or(budget, |cap| cap.min(budget)), bytes);
            out.upload_slice_tiles = cap;
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
            self.cancel_request(tile);
        }
        self.cancel_stale_requests(frame);
        self.take_results();
        self.retry_unavailable(frame);
        out.tiles_unavailable = self.retry_at.values().filter(|u| u.retry_at.is_some()).count();
        out.network = self.atlas.as_ref().and_then(|a| a.network_stats());
        out.network_frame = out.network.map(|now| now.since(&self.last_network.unwrap_or_default()));
        self.last_network = out.network;
        let (plan, produce) = if self.production.is_some() {
            self.plan_production(frame, &mut out)
        } else {
            let staged = &self.staged;
            let mut plan = self
                .residency
                .plan_uploads_staged(frame, |t| staged.get(&t).map(|(s, _)| (s.chunk(), s.offset())));
            self.attach_staged(&mut plan.uploads);
            self.note_uploads(frame, &plan.uploads, &mut out);
            (plan, Vec::new())
        };
        self.last_pool_full = plan.pool_full;
        let page_table_writes = self.page_table_writes();
        out.resident_vram = self.residency.resident_count();
        out.resident_host = self.cache.len();
        out.resident_fraction = self.residency.resident_fraction(self.recent_feedback.tiles());
        out.auto_mip_bias = self.bias.bias();
        // Something was missing (last frame, or in this frame's feedback) and now nothing is:
        // a loader fast enough to deliver within the frame still fires the event.
        out.became_fully_resident =
            out.resident_fraction >= 1.0 && (self.last_fraction < 1.0 || out.misses > 0);
        self.last_fraction = out.resident_fraction;
        self.last_uploads = out.uploads + out.produced + out.refreshed;
        out.feedback_ms = t0.elapsed().as_secs_f64() * 1e3;
        let page_table_jobs = self.residency.page_table_mut().take_jobs();
        out.table_jobs = page_table_jobs.len();
        out.table_entries = page_table_jobs.entries();
        FramePlan {
            uploads: plan.uploads,
            level_ones: plan.level_ones,
            page_table_writes,
            page_table_jobs,
            produce,
            shader: self.shader_params(frame),
            stats: out,
        }
    }

    /// The feedback window, residency, requests, neighbour prefetch, the mip bias and
    /// the renewal of still-wanted loads.
    pub(super) fn take_feedback(&mut self, frame: u64, fb: &SparseFeedback, out: &mut StreamFrame) {
        // Each frame only one pixel per stride² block writes feedback, so a tile that
        // covers a few pixels shows up in some frames only: the needed set is the union
        // of the last stride² readbacks, so such tiles are neither dropped nor evicted.
        // Kept incrementally (FeedbackWindow): rebuilding it from every readback of the
        // window cost stride² readbacks a frame.
        let window = (self.config.feedback_stride * self.config.feedback_stride) as usize;
        self.recent_feedback.push(self.layout.decode_sparse(&fb.pairs), window);
        let misses_before = self.residency.counters().misses;
        let requests = self.residency.on_feedback(frame, self.recent_feedback.tiles());
        out.tiles_needed = self.residency.needed_count();
        out.misses = (self.residency.counters().misses - misses_before) as usize;
        out.feedback_frame = Some(fb.frame);
        out.feedback_age = Some(frame.saturating_sub(fb.frame));
        let now = Instant::now();
        for &(tile, _) in &requests {
            self.request_times.entry(tile).or_insert((fb.frame, now));
        }
        out.requests = self.request_many(&requests, frame);
        if self.config.prefetch_neighbours && !requests.is_empty() {
            let mut around: Vec<TileId> =
                requests.iter().flat_map(|&(t, _)| neighbours(&self.layout, t)).collect();
            around.sort_unstable();
            around.dedup();
            let prefetches = self.residency.prefetch(frame, &around, 0);
            out.prefetches = self.request_many(&prefetches, frame);
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
        match self.production.as_mut() {
            Some(p) => p.renew_many(self.residency.needed_sorted(), 1, frame),
            None => self.loader.renew_many(self.residency.needed_sorted(), 1, frame),
        };
        self.seen_feedback = true;
    }

    /// Requests the tiles of a predicted view (and their ancestors) not yet resident,
    /// needed or requested, at priority 0 (below every needed tile), and keeps the ones
    /// already queued wanted; returns the requests handed to the loader.
    pub(super) fn take_prediction(&mut self, frame: u64, predicted: &SparseFeedback) -> usize {
        let tiles = self.layout.with_ancestors(&self.layout.decode_sparse(&predicted.pairs));
        let requests = self.residency.prefetch(frame, &tiles, 0);
        let queued = self.request_many(&requests, frame);
        match self.production.as_mut() {
            Some(p) => p.renew_many(&tiles, 0, frame),
            None => self.loader.renew_many(&tiles, 0, frame),
        };
        queued
    }

    /// Lets tiles whose wait after a transient failure is over be asked for again.
    pub(super) fn retry_unavailable(&mut self, frame: u64) {
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
    pub(super) fn take_results(&mut self) {
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
    /// waited more than [`STAGED_WAIT_FRAMES`] frames for a slot
    /// ([`SLICED_STAGED_WAIT_FRAMES`] while a burst slice is on): a chunk is mapped
    /// again only once every tile in it is released, so a few tiles deferred for long
    /// (a pool too small for the view, prefetches) would keep a whole chunk from the
    /// loader threads. Such a tile is uploaded from its bytes when its turn comes.
    pub(super) fn attach_staged(&mut self, uploads: &mut [Upload]) {
        if self.staged.is_empty() {
            return;
        }
        for u in uploads.iter_mut() {
            u.staged = self.staged.remove(&u.tile).map(|(t, _)| t);
        }
        let wait = if self.slice.is_some() { SLICED_STAGED_WAIT_FRAMES } else { STAGED_WAIT_FRAMES };
        let (residency, frame) = (&self.residency, self.frame);
        self.staged.retain(|t, (_, at)| residency.is_ready(*t) && frame <= *at + wait);
    }

    /// Uploads, evictions and the request-to-resident latency of this frame's uploads.
    pub(super) fn note_uploads(&mut self, frame: u64, uploads: &[Upload], out: &mut StreamFrame) {
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

    pub(super) fn page_table_writes(&mut self) -> Vec<PageTableWrite> {
        let pt = self.residency.page_table_mut();
        let ranges = pt.take_dirty_ranges();
        ranges
            .into_iter()
            .map(|r| PageTableWrite { first: r.start, entries: pt.entries()[r].to_vec() })
            .collect()
    }
}

/// `bytes` when they are exactly one tile for the pools; otherwise a failure, so that
/// no pool of a stack is left unwritten while residency counts the tile resident.
pub(super) fn check_length(tile: TileId, bytes: Arc<[u8]>, expected: usize) -> Result<Arc<[u8]>, LoadError> {
    if bytes.len() == expected {
        Ok(bytes)
    } else {
        Err(LoadError::failed(tile, format!("loaded {} bytes but a pool slot takes {expected}", bytes.len())))
    }
}
