//! A frame's start: feedback collected, the streamer's decisions, and the execution
//! of its plan (uploads, page-table writes, parameter blocks).

use super::*;

impl VirtualTextures {
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
            upload_gpu: self.upload_timer.as_mut().and_then(UploadTimer::collect),
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
        VtFrame::started(self, stats, frame)
    }

    /// Warns once when no feedback has arrived for [`FEEDBACK_STALL_FRAMES`] frames
    /// (frames begun but never finished, or a device that is never polled).
    pub(super) fn watch_feedback(&mut self, frame: u64, arrived: bool) {
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
    pub(super) fn execute(&mut self, ctx: &GpuContext, mut plan: FramePlan) -> StreamFrame {
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
        // Level-1 copies from a parent need one border for every layer of the pool (an
        // odd value makes every slot downsample itself instead).
        let layers = self.atlas.layers();
        let border = layers.first().map_or(1, |l| l.layout.border());
        let border = if layers.iter().all(|l| l.layout.border() == border) { border } else { 1 };
        // Tiles drawn (produced) and uploaded are timed together: the burst slice and
        // the budget price them alike.
        let timed = !plan.uploads.is_empty() || !plan.produce.is_empty();
        if timed {
            self.mark_uploads(ctx, 0);
            if let Some(timer) = self.upload_timer.as_mut() {
                timer.start(&ctx.device, &ctx.queue, plan.uploads.len() + plan.produce.len());
            }
        }
        self.arrived.clear();
        self.arrived.extend(plan.uploads.iter().map(|u| u.tile).chain(plan.produce.iter().map(|j| j.tile)));
        // Produced tiles are drawn first: the level-1 work below reads them.
        if let Some(production) = self.production.as_mut().filter(|_| !plan.produce.is_empty()) {
            production.run(ctx, &self.atlas, &self.pools, &plan.produce);
        }
        // A parent's bytes for its children's level 1, where the host cache holds them
        // (block pools stage the quadrants from there instead of copying each one).
        let cache = Arc::clone(self.streamer.host_cache());
        let parent_bytes = move |tile: tessera_core::format::tile::TileId| cache.peek(tile);
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
            let level_ones =
                LevelOnes { jobs: &plan.level_ones, border, parents: Some((&parent_bytes, offset)) };
            upload_copies += pool.upload_frame(&ctx.device, &ctx.queue, &batch, &copies, Some(level_ones));
            offset += len;
        }
        if timed {
            if let Some(timer) = self.upload_timer.as_mut() {
                timer.end(&ctx.device, &ctx.queue);
            }
            self.mark_uploads(ctx, 1);
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

    /// Times each frame's tile uploads and produced tiles (the producer's pass, copies,
    /// level 1 and their submissions): a frame of [`VirtualTextures::begin`] that uploads
    /// or produces writes timestamps `first` before that work and `first + 1` after it,
    /// each in a command buffer of its own submitted in order around them (`set` is a
    /// `Timestamp` query set on a device with `TIMESTAMP_QUERY_INSIDE_ENCODERS`); other
    /// frames write none. `None` stops it.
    pub fn time_uploads(&mut self, timestamps: Option<(wgpu::QuerySet, u32)>) {
        self.upload_timestamps = timestamps;
    }

    /// Benchmarks: the parameter blocks with feedback off until the next
    /// [`VirtualTextures::begin`], so that a pass drawn now with [`VirtualTextures::bind_group`]
    /// prices sampling without feedback (the storage path writes nothing; a colour
    /// target, where a drawer attaches one, is still written).
    pub fn suppress_feedback_until_next_frame(&self, queue: &wgpu::Queue) {
        for layer in &self.layers {
            layer.write_without_feedback(queue);
        }
    }

    /// Writes timestamp `index` of the upload queries in a command buffer of its own.
    fn mark_uploads(&self, ctx: &GpuContext, index: u32) {
        if let Some((set, first)) = &self.upload_timestamps {
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tessera upload timestamp"),
            });
            encoder.write_timestamp(set, first + index);
            ctx.queue.submit([encoder.finish()]);
        }
    }
}
