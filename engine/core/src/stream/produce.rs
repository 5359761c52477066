//! Runtime virtual textures, GPU-free: tiles that are not read from an atlas file but
//! produced on the GPU by the application when the feedback asks for them (terrain
//! layers, splat maps, decals). The streamer schedules them as it schedules loads:
//! coarse first, within a per-frame production budget, through the same residency, LRU
//! and page table; a [`FramePlan`](crate::stream::streamer::FramePlan) lists the tiles
//! to produce this frame and the renderer has its producer draw them into their slots
//! before level 1 and the page table are made.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::format::tile::{TileId, TileMap};
use crate::stream::page_table::SlotCoord;

/// One tile to produce this frame, into its pool slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProduceJob {
    /// The tile (layer, mip, x, y).
    pub tile: TileId,
    /// The slot it is drawn into (with its border; the same slot in every pool of a
    /// stack).
    pub slot: SlotCoord,
    /// Whether the tile is already resident there and is produced again after an
    /// invalidation (its page-table entry does not change: the stale texels show
    /// until the new ones are drawn).
    pub refresh: bool,
}

/// Settings of the production of a produced atlas' tiles (part of
/// [`StreamerConfig`](crate::stream::streamer::StreamerConfig)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductionConfig {
    /// Most tiles produced per frame, new and refreshed together (below the upload
    /// budget, which also caps it).
    pub max_tiles_per_frame: usize,
    /// Frames within which a tile the view still needs is produced again after an
    /// invalidation ([`Streamer::invalidate`](crate::stream::streamer::Streamer::invalidate)),
    /// as long as the budget allows (at most this many frames' budget of stale tiles).
    pub max_stale_frames: u32,
}

impl Default for ProductionConfig {
    fn default() -> Self {
        Self { max_tiles_per_frame: 64, max_stale_frames: 8 }
    }
}

impl ProductionConfig {
    /// Checks the ranges: `Err` names the setting and its allowed range.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_tiles_per_frame == 0 {
            return Err("production.max_tiles_per_frame must be at least 1".into());
        }
        if self.max_stale_frames == 0 {
            return Err("production.max_stale_frames must be at least 1".into());
        }
        Ok(())
    }
}

/// Where production stands, for overlays and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProductionStats {
    /// Tiles waiting in the production queue (not counting those waiting for a slot).
    pub queued: usize,
    /// Resident tiles invalidated and not yet produced again.
    pub stale: usize,
    /// Frames since the oldest of them was invalidated (0 without any).
    pub oldest_stale_frames: u64,
    /// Tiles produced into a new slot so far.
    pub produced: u64,
    /// Tiles produced again in place after an invalidation so far.
    pub refreshed: u64,
    /// The latest frame's production budget (tiles).
    pub budget: usize,
}

/// The order of the queue: wanted tiles before speculative ones (priority 0), then
/// coarse mips first, then higher priority (coverage), then [`TileId`] order.
type QueueKey = (bool, std::cmp::Reverse<u8>, std::cmp::Reverse<u32>, TileId);

/// One queued tile: its place in the queue and the last frame that wanted it.
#[derive(Clone, Copy, Debug)]
struct Queued {
    key: QueueKey,
    frame: u64,
}

/// The production queue of a produced atlas and its stale (invalidated) resident
/// tiles: the GPU-free scheduling a [`Streamer`](crate::stream::streamer::Streamer)
/// does in place of loader threads. Requests are ordered as the loader orders them
/// (coarse first, then coverage), renewed while the view wants them and cancelled
/// after as many frames as loads are; stale tiles are produced again oldest first,
/// with at least half the budget while any wait, and all of it when their deadline
/// ([`ProductionConfig::max_stale_frames`]) would pass otherwise.
#[derive(Clone, Debug, Default)]
pub struct Production {
    config: ProductionConfig,
    queue: BTreeSet<QueueKey>,
    queued: TileMap<Queued>,
    /// Resident tiles to produce again, with the frame they were invalidated at.
    stale: TileMap<u64>,
    /// Tiles placed before the first frame (the coarsest of each layer), produced by
    /// the first plan whatever its budget.
    pending: Vec<(TileId, SlotCoord)>,
    /// Tiles evicted by invalidations since the last frame (counted in its statistics).
    evicted: usize,
    stats: ProductionStats,
}

impl Production {
    /// An empty queue with `config`.
    pub fn new(config: ProductionConfig) -> Self {
        Self { config, ..Self::default() }
    }

    /// The settings in use.
    pub fn config(&self) -> ProductionConfig {
        self.config
    }

    /// Changes the settings from the next frame on.
    pub fn set_config(&mut self, config: ProductionConfig) {
        self.config = config;
    }

    /// Queues each `(tile, priority)` not queued yet as wanted at `frame`; a queued
    /// one is renewed and its priority raised. Returns how many were newly queued.
    pub fn request_many(&mut self, requests: &[(TileId, u32)], frame: u64) -> usize {
        let mut queued = 0;
        for &(tile, priority) in requests {
            if self.queued.contains_key(&tile) {
                self.renew(tile, priority, frame);
                continue;
            }
            let key = key(tile, priority);
            self.queue.insert(key);
            self.queued.insert(tile, Queued { key, frame });
            queued += 1;
        }
        queued
    }

    /// Renews the queued tiles among `tiles` as wanted at `frame`, raising their
    /// priority to at least `priority`; returns how many were queued.
    pub fn renew_many(&mut self, tiles: &[TileId], priority: u32, frame: u64) -> usize {
        tiles.iter().filter(|&&t| self.renew(t, priority, frame)).count()
    }

    fn renew(&mut self, tile: TileId, priority: u32, frame: u64) -> bool {
        let Some(q) = self.queued.get_mut(&tile) else { return false };
        q.frame = q.frame.max(frame);
        let raised = key(tile, priority);
        if raised < q.key {
            self.queue.remove(&q.key);
            self.queue.insert(raised);
            q.key = raised;
        }
        true
    }

    /// Removes `tile` from the queue; returns whether it was queued.
    pub fn cancel(&mut self, tile: TileId) -> bool {
        match self.queued.remove(&tile) {
            Some(q) => self.queue.remove(&q.key),
            None => false,
        }
    }

    /// Cancels the queued tiles no frame wanted in more than `after` frames before
    /// `frame` (the loader's staleness rule); returns them, coarse first.
    pub fn cancel_stale(&mut self, frame: u64, after: u64) -> Vec<TileId> {
        let mut stale: Vec<TileId> = self
            .queued
            .iter()
            .filter(|(_, q)| q.frame.saturating_add(after) < frame)
            .map(|(&t, _)| t)
            .collect();
        stale.sort_unstable();
        for &t in &stale {
            self.cancel(t);
        }
        stale
    }

    /// Takes up to `n` tiles from the head of the queue.
    pub fn pop(&mut self, n: usize) -> Vec<TileId> {
        self.pop_where(n, |_| true).0
    }

    /// Takes up to `n` tiles for which `wanted` holds from the head of the queue, and
    /// drops the unwanted ones met on the way (the view moved on: no budget is spent
    /// on them); returns both, in queue order.
    pub fn pop_where(&mut self, n: usize, wanted: impl Fn(TileId) -> bool) -> (Vec<TileId>, Vec<TileId>) {
        let (mut taken, mut dropped) = (Vec::with_capacity(n.min(self.queue.len())), Vec::new());
        while taken.len() < n {
            let Some(key) = self.queue.pop_first() else { break };
            self.queued.remove(&key.3);
            if wanted(key.3) { taken.push(key.3) } else { dropped.push(key.3) }
        }
        (taken, dropped)
    }

    /// Tiles in the queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether `tile` is in the queue.
    pub fn is_queued(&self, tile: TileId) -> bool {
        self.queued.contains_key(&tile)
    }

    /// Marks resident `tile` stale as of `frame` (a tile already stale keeps its
    /// earlier frame, and with it its deadline).
    pub fn mark_stale(&mut self, tile: TileId, frame: u64) {
        self.stale.entry(tile).or_insert(frame);
    }

    /// Forgets that `tile` is stale (it left the pool); returns whether it was.
    pub fn forget_stale(&mut self, tile: TileId) -> bool {
        self.stale.remove(&tile).is_some()
    }

    /// Keeps only the stale tiles for which `keep` holds.
    pub fn retain_stale(&mut self, mut keep: impl FnMut(TileId) -> bool) {
        self.stale.retain(|&t, _| keep(t));
    }

    /// Whether `tile` is stale.
    pub fn is_stale(&self, tile: TileId) -> bool {
        self.stale.contains_key(&tile)
    }

    /// The stale tiles, in no particular order.
    pub fn stale_tiles(&self) -> impl Iterator<Item = TileId> + '_ {
        self.stale.keys().copied()
    }

    /// Stale tiles.
    pub fn stale_count(&self) -> usize {
        self.stale.len()
    }

    /// Frames since the oldest stale tile was invalidated, at `frame` (0 without one).
    pub fn oldest_stale_frames(&self, frame: u64) -> u64 {
        self.stale.values().min().map_or(0, |&since| frame.saturating_sub(since))
    }

    /// Splits a frame's `budget` into (refreshes, new tiles) when `new_wanted` new
    /// tiles wait: refreshes get at least half of it while any tile is stale, as many
    /// as every stale tile needs to meet its deadline if later frames gave them the
    /// whole budget (all of it once a deadline is here or past), and whatever new
    /// tiles leave; never more than there are stale tiles.
    pub fn split_budget(&self, frame: u64, budget: usize, new_wanted: usize) -> (usize, usize) {
        if self.stale.is_empty() || budget == 0 {
            return (0, budget);
        }
        let k = u64::from(self.config.max_stale_frames);
        let mut since: Vec<u64> = self.stale.values().copied().collect();
        since.sort_unstable();
        // Tiles due by frame d, less what the frames after this one up to d can
        // refresh at the full budget: what this frame must do.
        let mut must = 0usize;
        let mut i = 0;
        while i < since.len() {
            let s = since[i];
            while i < since.len() && since[i] == s {
                i += 1;
            }
            let deadline = s.saturating_add(k);
            let later = deadline.saturating_sub(frame) as u128 * budget as u128;
            let behind = if deadline < frame {
                usize::MAX
            } else {
                i.saturating_sub(later.min(usize::MAX as u128) as usize)
            };
            must = must.max(behind);
        }
        let refresh = budget
            .div_ceil(2)
            .max(must)
            .max(budget.saturating_sub(new_wanted))
            .min(budget)
            .min(self.stale.len());
        (refresh, budget - refresh)
    }

    /// Takes up to `n` stale tiles to produce again, earliest deadline first (then
    /// coarse first), and counts them refreshed.
    pub fn take_stale(&mut self, n: usize) -> Vec<TileId> {
        if n == 0 {
            return Vec::new();
        }
        let mut all: Vec<(u64, TileId)> = self.stale.iter().map(|(&t, &s)| (s, t)).collect();
        all.sort_unstable();
        all.truncate(n);
        for (_, t) in &all {
            self.stale.remove(t);
        }
        self.stats.refreshed += all.len() as u64;
        all.into_iter().map(|(_, t)| t).collect()
    }

    /// Tiles placed before the first frame, to produce in the next plan.
    pub fn set_pending(&mut self, placed: Vec<(TileId, SlotCoord)>) {
        self.pending = placed;
    }

    /// Takes the tiles placed before the first frame.
    pub fn take_pending(&mut self) -> Vec<(TileId, SlotCoord)> {
        std::mem::take(&mut self.pending)
    }

    /// Counts `n` tiles evicted by an invalidation, for the next frame's statistics.
    pub fn note_evicted(&mut self, n: usize) {
        self.evicted += n;
    }

    /// Takes the count of [`Production::note_evicted`].
    pub fn take_evicted(&mut self) -> usize {
        std::mem::take(&mut self.evicted)
    }

    /// Counts `n` tiles produced into new slots and records the frame's budget.
    pub fn note_frame(&mut self, produced: usize, budget: usize) {
        self.stats.produced += produced as u64;
        self.stats.budget = budget;
    }

    /// Where production stands at `frame`.
    pub fn stats(&self, frame: u64) -> ProductionStats {
        ProductionStats {
            queued: self.queue.len(),
            stale: self.stale.len(),
            oldest_stale_frames: self.oldest_stale_frames(frame),
            ..self.stats
        }
    }
}

fn key(tile: TileId, priority: u32) -> QueueKey {
    (priority == 0, std::cmp::Reverse(tile.mip), std::cmp::Reverse(priority), tile)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn t(mip: u8, x: u32) -> TileId {
        TileId::new(0, mip, x, 0)
    }

    #[test]
    fn the_queue_is_coarse_first_then_coverage_then_speculative_last() {
        let mut p = Production::new(ProductionConfig::default());
        let n = p.request_many(&[(t(0, 0), 1), (t(0, 1), 5), (t(2, 0), 1), (t(3, 0), 0), (t(1, 0), 2)], 0);
        assert_eq!(n, 5);
        // Asked again: renewed, not queued twice; a raised priority moves it up.
        assert_eq!(p.request_many(&[(t(0, 0), 9)], 1), 0);
        assert_eq!(p.pop(2), vec![t(2, 0), t(1, 0)]);
        assert_eq!(p.pop_where(1, |t| t.x == 1), (vec![t(0, 1)], vec![t(0, 0)]));
        p.request_many(&[(t(0, 0), 9)], 1);
        assert_eq!(p.pop(10), vec![t(0, 0), t(3, 0)]);
        assert_eq!(p.queued(), 0);
        assert!(p.pop(1).is_empty());
    }

    #[test]
    fn unrenewed_requests_are_cancelled_and_renewed_ones_stay() {
        let mut p = Production::new(ProductionConfig::default());
        p.request_many(&[(t(0, 0), 1), (t(0, 1), 1)], 0);
        assert_eq!(p.renew_many(&[t(0, 1), t(0, 7)], 1, 5), 1);
        assert_eq!(p.cancel_stale(8, 8), Vec::<TileId>::new());
        assert_eq!(p.cancel_stale(9, 8), vec![t(0, 0)]);
        assert!(p.is_queued(t(0, 1)) && !p.is_queued(t(0, 0)));
        assert!(p.cancel(t(0, 1)) && !p.cancel(t(0, 1)));
        assert_eq!(p.queued(), 0);
    }

    #[test]
    fn refreshes_get_half_the_budget_and_all_of_it_when_due() {
        let mut p = Production::new(ProductionConfig { max_tiles_per_frame: 8, max_stale_frames: 4 });
        assert_eq!(p.split_budget(0, 8, 100), (0, 8));
        for x in 0..3 {
            p.mark_stale(t(0, x), 10);
        }
        // Few stale tiles: they take what they need, new tiles the rest.
        assert_eq!(p.split_budget(11, 8, 100), (3, 5));
        // Many: at least half, more when new tiles leave room.
        for x in 3..20 {
            p.mark_stale(t(0, x), 10);
        }
        assert_eq!(p.split_budget(11, 8, 100), (4, 4));
        assert_eq!(p.split_budget(11, 8, 2), (6, 2));
        // 20 due by frame 14 with 8 a frame: frame 12 must do 20 - 2·8 = 4, frame 13
        // 20 - 8 = 12 > 8: the whole budget, and so past the deadline.
        assert_eq!(p.split_budget(12, 8, 100), (4, 4));
        assert_eq!(p.split_budget(13, 8, 100), (8, 0));
        assert_eq!(p.split_budget(15, 8, 100), (8, 0));
        // Earliest deadline first, then coarse first; marking again keeps the deadline.
        p.mark_stale(t(3, 0), 11);
        p.mark_stale(t(0, 0), 12);
        let first = p.take_stale(3);
        assert_eq!(first, vec![t(0, 0), t(0, 1), t(0, 2)]);
        assert_eq!(p.oldest_stale_frames(13), 3);
        assert_eq!(p.take_stale(100).last(), Some(&t(3, 0)));
        assert_eq!((p.stale_count(), p.oldest_stale_frames(13)), (0, 0));
        assert_eq!(p.stats(13).refreshed, 21);
    }

    #[test]
    fn config_ranges_are_checked() {
        assert!(ProductionConfig::default().validate().is_ok());
        assert!(ProductionConfig { max_tiles_per_frame: 0, ..Default::default() }.validate().is_err());
        assert!(ProductionConfig { max_stale_frames: 0, ..Default::default() }.validate().is_err());
    }
}
