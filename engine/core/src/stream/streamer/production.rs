//! A produced atlas' frame ([`crate::stream::produce`]): requests routed to the
//! production queue instead of the loader, the frame's new and refreshed tiles within
//! the production budget, invalidation, and the accessors renderer and overlay use.

use super::*;
use crate::stream::page_table::SlotCoord;
use crate::stream::residency::UploadPlan;

impl Streamer {
    /// Whether this streamer's atlas is produced at run time: its plans list tiles to
    /// draw ([`FramePlan::produce`]) instead of uploads.
    pub fn is_producing(&self) -> bool {
        self.production.is_some()
    }

    /// Where production stands (`None` for an atlas read from a file).
    pub fn production_stats(&self) -> Option<ProductionStats> {
        self.production.as_ref().map(|p| p.stats(self.frame))
    }

    /// Changes the production settings from the next frame on; fails for settings out
    /// of range (see [`ProductionConfig::validate`]).
    pub fn set_production(&mut self, config: ProductionConfig) -> Result<(), StreamerError> {
        config.validate().map_err(|what| StreamerError::Config(format!("StreamerConfig: {what}")))?;
        self.config.production = config;
        if let Some(p) = self.production.as_mut() {
            p.set_config(config);
        }
        Ok(())
    }

    /// Marks every resident tile covering `rect` (`[x, y, width, height]` in mip-0
    /// texels of `layer`; any layer of a stacked atlas stands for all) at every mip
    /// stale, because what the producer draws there changed. A stale tile the view
    /// still needs (or a pinned coarsest tile) stays mapped, showing its old texels,
    /// and is produced again in place ([`ProduceJob::refresh`]) within
    /// [`ProductionConfig::max_stale_frames`] frames as the budget allows; one it does
    /// not need is evicted now, so that a later miss produces it afresh. Tiles queued
    /// or waiting for a slot need nothing: they are drawn from the new state. Returns
    /// the resident tiles touched (marked stale or evicted); 0 for an atlas read from
    /// a file, an unknown layer or an empty rectangle.
    pub fn invalidate(&mut self, layer: u16, rect: [u32; 4]) -> usize {
        self.invalidate_mips(layer, rect, u8::MAX)
    }

    /// [`Streamer::invalidate`] for the tiles at mips `0..=finest_changed` only: what a
    /// producer drew from an input whose mip `finest_changed` (and coarser mips'
    /// fallbacks) just changed there; coarser tiles read coarser input and stand.
    pub fn invalidate_mips(&mut self, layer: u16, rect: [u32; 4], finest_changed: u8) -> usize {
        let Some(production) = self.production.as_mut() else { return 0 };
        let owner = if self.stacked { 0 } else { layer };
        let Some(l) = self.layout.layout(owner).copied() else { return 0 };
        let [x, y, w, h] = rect.map(u64::from);
        let (x1, y1) = ((x + w).min(u64::from(l.width())), (y + h).min(u64::from(l.height())));
        if x >= x1 || y >= y1 {
            return 0;
        }
        let ts = u64::from(l.tile_size());
        let b = u64::from(l.border());
        let max_mip = finest_changed.min(l.coarsest_mip());
        // A tile's border repeats its neighbours' texels: a tile whose slot (border
        // included, `border << mip` mip-0 texels) overlaps the rectangle holds some.
        let covers = |t: &TileId| {
            let (span, pad) = (ts << t.mip, b << t.mip);
            let (tx, ty) = (u64::from(t.x) * span, u64::from(t.y) * span);
            t.layer == owner
                && t.mip <= max_mip
                && tx < x1 + pad
                && tx + span + pad > x
                && ty < y1 + pad
                && ty + span + pad > y
        };
        let region = ((x1 - 1 + b) / ts - x.saturating_sub(b) / ts + 1)
            .saturating_mul((y1 - 1 + b) / ts - y.saturating_sub(b) / ts + 1);
        let residency = &mut self.residency;
        // The region's tiles at each mip (rectangle grown by that mip's border), or the
        // resident tiles overlapping it when those are fewer.
        let covering: Vec<TileId> = if region <= residency.resident_count() as u64 {
            let mut found = std::collections::HashSet::new();
            for mip in 0..=max_mip {
                let pad = u32::try_from(b << mip).unwrap_or(u32::MAX);
                let grown = [
                    rect[0].saturating_sub(pad),
                    rect[1].saturating_sub(pad),
                    rect[2].saturating_add(pad.saturating_mul(2)),
                    rect[3].saturating_add(pad.saturating_mul(2)),
                ];
                found.extend(
                    region_tiles(&self.layout, owner, grown, mip)
                        .into_iter()
                        .filter(|t| covers(t) && residency.is_resident(*t)),
                );
            }
            found.into_iter().collect()
        } else {
            residency.resident_tiles().map(|(t, _)| t).filter(covers).collect()
        };
        let (keep, evict): (Vec<TileId>, Vec<TileId>) =
            covering.iter().partition(|&&t| residency.is_needed(t) || residency.is_pinned(t));
        for &t in &keep {
            production.mark_stale(t, self.frame);
        }
        for &t in &evict {
            production.forget_stale(t);
        }
        production.note_evicted(residency.evict(&evict));
        covering.len()
    }

    /// Queues `requests` with the loader, or with the production queue of a produced
    /// atlas; returns how many were newly queued.
    pub(super) fn request_many(&mut self, requests: &[(TileId, u32)], frame: u64) -> usize {
        match self.production.as_mut() {
            Some(p) => p.request_many(requests, frame),
            None => self.loader.request_many(requests, frame),
        }
    }

    /// Cancels the queued request for `tile` (a production request at once; a load
    /// reports its cancellation with the loader's results).
    pub(super) fn cancel_request(&mut self, tile: TileId) {
        match self.production.as_mut() {
            Some(p) => {
                p.cancel(tile);
                self.residency.on_cancelled(tile);
            }
            None => {
                self.loader.cancel(tile);
            }
        }
    }

    /// Cancels the requests no feedback renewed for [`Staleness::request_frames`].
    pub(super) fn cancel_stale_requests(&mut self, frame: u64) {
        match self.production.as_mut() {
            Some(p) => {
                for tile in p.cancel_stale(frame, self.config.staleness.request_frames) {
                    self.residency.on_cancelled(tile);
                    self.request_times.remove(&tile);
                }
            }
            None => {
                self.loader.cancel_stale(frame);
            }
        }
    }

    /// A produced atlas' plan for `frame`: stale tiles the view stopped needing
    /// evicted; the budget (the smaller of [`ProductionConfig::max_tiles_per_frame`]
    /// and the upload budget) split between refreshes and new tiles; new tiles given
    /// slots (free, or by LRU eviction) and made resident as uploads are; and the
    /// produce jobs with the level-1 jobs of every slot written. The plan's uploads
    /// are empty: there are no bytes.
    pub(super) fn plan_production(
        &mut self,
        frame: u64,
        out: &mut StreamFrame,
    ) -> (UploadPlan, Vec<ProduceJob>) {
        let Some(production) = self.production.as_mut() else { return (UploadPlan::default(), Vec::new()) };
        let residency = &mut self.residency;
        let limits = residency.config();
        let budget = production.config().max_tiles_per_frame.min(limits.max_uploads_per_frame).max(1);
        production.retain_stale(|t| residency.is_resident(t));
        let unneeded: Vec<TileId> = production
            .stale_tiles()
            .filter(|&t| !residency.is_needed(t) && !residency.is_pinned(t))
            .collect();
        for &t in &unneeded {
            production.forget_stale(t);
        }
        out.evictions += residency.evict(&unneeded) + production.take_evicted();
        // The coarsest tiles placed before the first frame, produced whatever the budget.
        let mut written: Vec<(TileId, SlotCoord)> =
            production.take_pending().into_iter().filter(|&(t, s)| residency.slot_of(t) == Some(s)).collect();
        let left = budget.saturating_sub(written.len());
        let (refresh, new) =
            production.split_budget(frame, left, residency.ready_count() + production.queued());
        // Queued tiles the view stopped wanting are dropped, not drawn (asked for again
        // if it comes back to them).
        let (taken, dropped) = production.pop_where(new.saturating_sub(residency.ready_count()), |t| {
            residency.is_needed(t) || residency.is_prefetched(t) || residency.is_pinned_mip(t)
        });
        for t in dropped {
            residency.on_cancelled(t);
            self.request_times.remove(&t);
        }
        for t in taken {
            residency.on_produced(t);
        }
        let mut plan = if new > 0 {
            residency.set_upload_budget(new, u64::MAX);
            let plan = residency.plan_uploads(frame);
            residency.set_upload_budget(limits.max_uploads_per_frame, limits.max_upload_bytes_per_frame);
            plan
        } else {
            UploadPlan { deferred: residency.ready_count(), ..UploadPlan::default() }
        };
        for u in &plan.uploads {
            if let Some(v) = u.evicted {
                production.forget_stale(v);
            }
        }
        written.extend(plan.uploads.iter().map(|u| (u.tile, u.slot)));
        let produced = written.len();
        let mut jobs: Vec<ProduceJob> =
            written.iter().map(|&(tile, slot)| ProduceJob { tile, slot, refresh: false }).collect();
        for tile in production.take_stale(refresh) {
            if let Some(slot) = residency.slot_of(tile) {
                written.push((tile, slot));
                jobs.push(ProduceJob { tile, slot, refresh: true });
            }
        }
        plan.level_ones =
            crate::stream::level_one::plan_tiles(residency.page_table().layout(), &written, |t| {
                residency.slot_of(t)
            });
        production.note_frame(produced, budget);
        out.produced = produced;
        out.refreshed = jobs.len() - produced;
        out.stale_tiles = production.stale_count();
        out.oldest_stale_frames = production.oldest_stale_frames(frame);
        out.production_budget = budget;
        // Latency and evictions as for uploads; the tiles are drawn, not uploaded.
        self.note_uploads(frame, &plan.uploads, out);
        out.uploads = 0;
        plan.uploads.clear();
        (plan, jobs)
    }
}
