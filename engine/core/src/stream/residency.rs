//! The residency manager: decides, without a GPU, which tiles to request, which to
//! upload into which pool slot and which to evict, and keeps the page table in step.
//!
//! Each frame the renderer feeds it the decoded feedback ([`Residency::on_feedback`],
//! which returns the loader requests), the loader's results ([`Residency::on_loaded`],
//! [`Residency::on_failed`], [`Residency::on_cancelled`]), then applies
//! [`Residency::plan_uploads`] (texture writes) and the page table's dirty ranges.
//!
//! Eviction never touches a tile of the latest feedback (or an ancestor of one), nor a
//! pinned coarse mip. When nothing can be evicted the plan stops uploading: a visible
//! set larger than the pool settles with its coarsest tiles resident and no uploads,
//! instead of thrashing.
//!
//! Tiles the view does not need yet can be asked for with [`Residency::prefetch`]: they
//! are requested at a low priority, do not count as misses, are uploaded after every
//! needed tile and only into free slots or slots of tiles that are not needed, and are
//! forgotten after [`PREFETCH_TTL_FRAMES`] frames unless the view comes to need them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::format::tile::{TextureLayout, TileId, TileMap, TileSet};
use crate::stream::feedback::FeedbackLayout;
use crate::stream::lru::Lru;
use crate::stream::page_table::{MAX_SLOTS_PER_SIDE, PageTable, SlotCoord};
use crate::stream::stats::VramCounters;

/// Frames a prefetched tile is kept (requested or loaded) without being needed before
/// it is dropped; see [`Residency::set_prefetch_ttl`].
pub const PREFETCH_TTL_FRAMES: u64 = 60;

/// Size of the pool and per-frame budgets of a [`Residency`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResidencyConfig {
    /// Slots across the physical pool (at most [`MAX_SLOTS_PER_SIDE`]).
    pub slots_x: u16,
    /// Slots down the physical pool (at most [`MAX_SLOTS_PER_SIDE`]).
    pub slots_y: u16,
    /// Most tiles uploaded per frame (at least one is always allowed).
    pub max_uploads_per_frame: usize,
    /// Most bytes uploaded per frame (the first upload of a frame is always allowed).
    pub max_upload_bytes_per_frame: u64,
    /// How many of each layer's coarsest mips are pinned once resident (never evicted,
    /// not even by [`Residency::flush`]). 1 pins the single coarsest mip, 0 nothing.
    pub pin_coarsest_mips: u32,
    /// Keep a complete page table ([`PageTable::complete`]: every entry valid at any
    /// depth, updated by GPU jobs) instead of one with fallbacks a few mips deep.
    pub complete_page_table: bool,
}

impl Default for ResidencyConfig {
    fn default() -> Self {
        Self {
            slots_x: 32,
            slots_y: 32,
            max_uploads_per_frame: 256,
            max_upload_bytes_per_frame: 32 << 20,
            pin_coarsest_mips: 1,
            complete_page_table: false,
        }
    }
}

/// Where a resident (unpinned) tile lives and when feedback last asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotState {
    /// The pool slot holding the tile.
    pub slot: SlotCoord,
    /// The last frame whose feedback needed the tile (or the frame it was uploaded).
    pub last_used_frame: u64,
}

/// One texture write for the renderer: put `bytes` (a padded tile) into `slot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// The tile being uploaded.
    pub tile: TileId,
    /// The destination slot.
    pub slot: SlotCoord,
    /// The tile's GPU-ready bytes.
    pub bytes: Arc<[u8]>,
    /// The tile that held `slot` before and was evicted for this upload, if any.
    pub evicted: Option<TileId>,
    /// The same bytes in staging memory, written by a loader thread (set by the
    /// [`crate::stream::streamer::Streamer`] when it streams through a staging ring):
    /// the renderer copies from there instead of copying `bytes`.
    pub staged: Option<crate::stream::staging::StagedTile>,
}

/// What the renderer does this frame, from [`Residency::plan_uploads`]. The page-table
/// changes are already applied to [`Residency::page_table`]; upload its dirty ranges
/// after the texture writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UploadPlan {
    /// Texture writes: needed tiles coarse mips first, then prefetched tiles coarse
    /// mips first (from [`Residency::plan_uploads_staged`]: the staged ones first, in
    /// staging order, then the others in that order).
    pub uploads: Vec<Upload>,
    /// How many of `uploads` are prefetched tiles no feedback needed yet (at their end,
    /// unless staging reordered them).
    pub prefetched: usize,
    /// Ready tiles discarded because the latest feedback no longer needs them (or,
    /// for prefetched tiles, because their prefetch expired).
    pub dropped: usize,
    /// Ready tiles left for a later frame (budget spent or no slot).
    pub deferred: usize,
    /// Whether uploading stopped because no slot could be freed: the needed set does
    /// not fit in the pool (a signal to raise the mip bias).
    pub pool_full: bool,
    /// The level-1 copies to make after the uploads on the hardware trilinear path
    /// ([`crate::stream::level_one::plan`]): each uploaded slot's, and those of resident
    /// children of uploaded tiles.
    pub level_ones: Vec<crate::stream::level_one::LevelOne>,
}

/// Running totals of a [`Residency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResidencyCounters {
    /// Tiles written into the pool.
    pub uploads: u64,
    /// Tiles evicted from the pool (to make room, or by [`Residency::flush`]).
    pub evictions: u64,
    /// Needed tiles (ancestors included) that were not resident, summed over feedbacks.
    pub misses: u64,
    /// Loads that failed.
    pub failed: u64,
}

/// Decides what lives in the GPU pool; see the module documentation.
#[derive(Debug)]
pub struct Residency {
    config: ResidencyConfig,
    table: PageTable,
    /// Slots holding nothing.
    free: Vec<SlotCoord>,
    /// Resident tiles that may be evicted, least recently needed first.
    lru: Lru<TileId, SlotState>,
    /// Resident tiles that are never evicted (coarsest mips).
    pinned: TileMap<SlotCoord>,
    /// Asked of the loader, no result yet.
    requested: TileSet,
    /// Loaded and waiting for a slot; ordered coarse first.
    ready: BTreeMap<TileId, Arc<[u8]>>,
    /// Failed loads, not requested again until [`Residency::forget_failures`].
    failed: TileSet,
    /// The latest feedback with its ancestors.
    needed: TileSet,
    /// The same, coarse first.
    needed_sorted: Vec<TileId>,
    /// Tiles asked for by [`Residency::prefetch`] and not needed since, with the frame
    /// of their latest prefetch. Each is requested or ready, never resident.
    prefetched: TileMap<u64>,
    /// Resident tiles uploaded by a prefetch and not needed since: prefetches never
    /// evict them, so two prefetched tiles cannot take turns in one slot.
    speculative: TileSet,
    /// Frames a prefetch entry lives without being renewed.
    prefetch_ttl: u64,
    counters: ResidencyCounters,
}

impl Residency {
    /// A manager for an atlas whose layers have `layouts` (laid out consecutively), with
    /// an empty pool. Slot counts above [`MAX_SLOTS_PER_SIDE`] are clamped to it.
    pub fn new(layouts: &[TextureLayout], config: ResidencyConfig) -> Self {
        Self::with_layout(FeedbackLayout::new(layouts), config)
    }

    /// Same as [`Residency::new`] over an existing index mapping.
    pub fn with_layout(layout: FeedbackLayout, mut config: ResidencyConfig) -> Self {
        if config.slots_x > MAX_SLOTS_PER_SIDE || config.slots_y > MAX_SLOTS_PER_SIDE {
            tracing::warn!(
                slots_x = config.slots_x,
                slots_y = config.slots_y,
                "pool larger than the page-table entry can address; clamped to {MAX_SLOTS_PER_SIDE} per side"
            );
            config.slots_x = config.slots_x.min(MAX_SLOTS_PER_SIDE);
            config.slots_y = config.slots_y.min(MAX_SLOTS_PER_SIDE);
        }
        // In the order of `order_free`, built so (popped from the back: down the columns).
        let free: Vec<SlotCoord> = (0..config.slots_x)
            .rev()
            .flat_map(|x| (0..config.slots_y).rev().map(move |y| SlotCoord::new(x, y)))
            .collect();
        Self {
            config,
            table: if config.complete_page_table {
                PageTable::complete(layout)
            } else {
                PageTable::with_layout(layout)
            },
            lru: Lru::with_capacity(free.len()),
            free,
            pinned: TileMap::default(),
            requested: TileSet::default(),
            ready: BTreeMap::new(),
            failed: TileSet::default(),
            needed: TileSet::default(),
            needed_sorted: Vec::new(),
            prefetched: TileMap::default(),
            speculative: TileSet::default(),
            prefetch_ttl: PREFETCH_TTL_FRAMES,
            counters: ResidencyCounters::default(),
        }
    }

    /// The configuration in use (slot counts after clamping).
    pub fn config(&self) -> ResidencyConfig {
        self.config
    }

    /// Takes in the decoded feedback of `frame` (without ancestors) and returns the
    /// tiles to request from the loader with their priority, coarse first.
    ///
    /// Needed tiles and their ancestors that are resident are marked used at `frame`;
    /// they will not be evicted while they are in the latest feedback. A tile is
    /// requested when it is not resident, not already requested, not waiting in the
    /// ready queue and has not failed. Its priority is the number of `needed` tiles it
    /// covers (itself and its descendants), a stand-in for screen coverage; it is at
    /// least 1, above the priority prefetches should use (0).
    ///
    /// A prefetched tile that becomes needed is upgraded: it is not requested again,
    /// and from then on it is uploaded and kept like any needed tile.
    pub fn on_feedback(&mut self, frame: u64, needed: &[TileId]) -> Vec<(TileId, u32)> {
        let all = self.table.layout().with_ancestors(needed);
        let mut coverage: TileMap<u32> = TileMap::with_capacity_and_hasher(all.len(), Default::default());
        for &t in needed {
            *coverage.entry(t).or_default() += 1;
        }
        self.needed.clear();
        self.needed.extend(all.iter().copied());
        self.needed_sorted.clone_from(&all);

        let mut requests = Vec::new();
        // Finest first: children pass their coverage up before their parent is read,
        // and coarse tiles are touched last, so among tiles that stop being needed the
        // fine ones are evicted first.
        for &t in all.iter().rev() {
            let cov = coverage.get(&t).copied().unwrap_or(0);
            let coarsest = self.table.layout().coarsest_mip(t.layer).unwrap_or(t.mip);
            if let Some(p) = t.parent(coarsest) {
                let e = coverage.entry(p).or_default();
                *e = e.saturating_add(cov);
            }
            self.prefetched.remove(&t);
            if let Some(s) = self.lru.get_mut(t) {
                s.last_used_frame = frame;
                self.speculative.remove(&t);
                continue;
            }
            if self.pinned.contains_key(&t) {
                continue;
            }
            self.counters.misses += 1;
            if self.requested.contains(&t) || self.ready.contains_key(&t) || self.failed.contains(&t) {
                continue;
            }
            self.requested.insert(t);
            requests.push((t, cov));
        }
        requests.reverse();
        requests
    }

    /// The loader delivered `tile`; it waits in the ready queue for
    /// [`Residency::plan_uploads`]. Tiles outside the atlas or already resident are
    /// ignored.
    pub fn on_loaded(&mut self, tile: TileId, bytes: Arc<[u8]>) {
        self.requested.remove(&tile);
        if self.table.global_index(tile).is_none() || self.is_resident(tile) {
            self.prefetched.remove(&tile);
            return;
        }
        self.failed.remove(&tile);
        self.ready.insert(tile, bytes);
    }

    /// `tile` of a produced atlas is to be drawn by the renderer
    /// ([`crate::stream::produce`]): it waits in the ready queue like a loaded tile,
    /// with no bytes (so it costs nothing of the byte budget).
    pub fn on_produced(&mut self, tile: TileId) {
        self.on_loaded(tile, Arc::from(Vec::new()));
    }

    /// Evicts the resident, unpinned tiles among `tiles` now (invalidated tiles the
    /// view no longer needs), freeing their slots and updating the page table; returns
    /// how many were evicted.
    pub fn evict(&mut self, tiles: &[TileId]) -> usize {
        let mut evicted = 0;
        for &tile in tiles {
            let Some(state) = self.lru.remove(tile) else { continue };
            self.speculative.remove(&tile);
            self.table.set_evicted(tile);
            self.free.push(state.slot);
            self.counters.evictions += 1;
            evicted += 1;
        }
        if evicted > 0 {
            order_free(&mut self.free);
        }
        evicted
    }

    /// Whether `tile` is one of the coarsest mips of its layer that are pinned once
    /// resident ([`ResidencyConfig::pin_coarsest_mips`]), resident or not.
    pub fn is_pinned_mip(&self, tile: TileId) -> bool {
        is_pinned(self.table.layout(), self.config.pin_coarsest_mips, tile)
    }

    /// Whether `tile` is in the latest needed set (ancestors included).
    pub fn is_needed(&self, tile: TileId) -> bool {
        self.needed.contains(&tile)
    }

    /// The loader could not produce `tile`: it keeps showing its nearest resident
    /// ancestor and is not requested again until [`Residency::forget_failures`].
    pub fn on_failed(&mut self, tile: TileId) {
        self.requested.remove(&tile);
        self.prefetched.remove(&tile);
        self.failed.insert(tile);
        self.counters.failed += 1;
    }

    /// The loader dropped the request for `tile` (stale); it may be requested again.
    pub fn on_cancelled(&mut self, tile: TileId) {
        self.requested.remove(&tile);
        self.prefetched.remove(&tile);
    }

    /// Allows one tile that failed to be requested again (a transient failure whose
    /// wait is over); false when it had not failed.
    pub fn retry(&mut self, tile: TileId) -> bool {
        self.failed.remove(&tile)
    }

    /// Allows tiles that failed to be requested again (e.g. after the atlas changed).
    pub fn forget_failures(&mut self) {
        self.failed.clear();
    }

    /// Asks for `tiles` that the view does not need yet (neighbours of requested tiles,
    /// a region about to come into view) and returns the loader requests, coarse first,
    /// all at `priority` (pass 0 to rank below every needed tile, whose priority is at
    /// least 1).
    ///
    /// A tile is requested when it is inside the atlas and neither needed, resident,
    /// requested, ready nor failed. Prefetching does not count misses and does not mark
    /// tiles as needed: a prefetched tile never keeps a needed tile out of the pool
    /// (see [`Residency::plan_uploads`]). Tiles that are already requested or ready and
    /// not needed (including earlier prefetches) are adopted or renewed at `frame`
    /// without a new request. A prefetch expires [`PREFETCH_TTL_FRAMES`] frames after
    /// its latest renewal unless a feedback needs the tile first.
    pub fn prefetch(&mut self, frame: u64, tiles: &[TileId], priority: u32) -> Vec<(TileId, u32)> {
        let mut requests = Vec::new();
        for &t in tiles {
            if self.table.global_index(t).is_none()
                || self.needed.contains(&t)
                || self.is_resident(t)
                || self.failed.contains(&t)
            {
                continue;
            }
            let in_flight = self.requested.contains(&t) || self.ready.contains_key(&t);
            let at = self.prefetched.entry(t).or_insert(frame);
            *at = (*at).max(frame);
            if !in_flight {
                self.requested.insert(t);
                requests.push((t, priority));
            }
        }
        requests.sort_unstable_by_key(|r| r.0);
        requests
    }

    /// Forgets prefetches not renewed for [`PREFETCH_TTL_FRAMES`] frames (not renewed
    /// since `frame − ttl` or earlier) and that no feedback needed: their loaded bytes
    /// are dropped. Returns the forgotten tiles still with the loader, coarse first, for
    /// the caller to cancel; a result that arrives anyway is dropped unless needed.
    pub fn drop_stale_prefetch(&mut self, frame: u64) -> Vec<TileId> {
        let ttl = self.prefetch_ttl;
        let stale: Vec<TileId> = self
            .prefetched
            .iter()
            .filter(|&(_, &at)| at.saturating_add(ttl) <= frame)
            .map(|(&t, _)| t)
            .collect();
        let mut pending = Vec::new();
        for t in stale {
            self.prefetched.remove(&t);
            self.ready.remove(&t);
            if self.requested.contains(&t) {
                pending.push(t);
            }
        }
        pending.sort_unstable();
        pending
    }

    /// Changes how many frames a prefetch lives without renewal (default
    /// [`PREFETCH_TTL_FRAMES`]).
    pub fn set_prefetch_ttl(&mut self, frames: u64) {
        self.prefetch_ttl = frames;
    }

    /// Prefetched tiles not needed yet and not resident (requested or ready).
    pub fn prefetched_count(&self) -> usize {
        self.prefetched.len()
    }

    /// Whether `tile` is a pending prefetch (requested or ready, not needed yet).
    pub fn is_prefetched(&self, tile: TileId) -> bool {
        self.prefetched.contains_key(&tile)
    }

    /// Moves ready tiles into the pool for `frame` within the per-frame budget: first
    /// the needed ones (and pinnable coarse mips), coarse mips first, evicting least
    /// recently needed tiles that are neither in the latest feedback nor pinned; then
    /// prefetched ones, coarse first, only into free slots or slots of such tiles that
    /// were not themselves prefetched (so prefetches never thrash each other), and only
    /// while every needed ready tile found a slot. Updates the page table
    /// (eviction, then residency) and the counters. Ready tiles the latest feedback no
    /// longer needs are dropped, except pinnable coarse mips and prefetches younger than
    /// the prefetch lifetime.
    pub fn plan_uploads(&mut self, frame: u64) -> UploadPlan {
        self.plan_uploads_staged(frame, |_| None)
    }

    /// [`Residency::plan_uploads`], with the uploads ordered for merged copies: tiles
    /// whose bytes are staged (`staged_at` gives their staging chunk and offset) first,
    /// in staging order, then the others in plan order; and the frame's slots handed
    /// to them in column order (x, then y). Consecutive staging records bound for
    /// slots one below the other are then one copy
    /// ([`vertical_runs`](crate::stream::copy_runs::vertical_runs)). Which tiles
    /// are uploaded, and which slots they take, is the same as without staging.
    pub fn plan_uploads_staged(
        &mut self,
        frame: u64,
        staged_at: impl Fn(TileId) -> Option<(usize, u64)>,
    ) -> UploadPlan {
        let mut plan = UploadPlan::default();
        let before = self.ready.len();
        let (needed, layout, pin) = (&self.needed, self.table.layout(), self.config.pin_coarsest_mips);
        let (prefetched, ttl) = (&self.prefetched, self.prefetch_ttl);
        self.ready.retain(|t, _| {
            needed.contains(t)
                || is_pinned(layout, pin, *t)
                || prefetched.get(t).is_some_and(|&at| frame < at.saturating_add(ttl))
        });
        plan.dropped = before - self.ready.len();
        let (ready, requested) = (&self.ready, &self.requested);
        self.prefetched.retain(|t, _| ready.contains_key(t) || requested.contains(t));

        let (urgent, spare): (Vec<TileId>, Vec<TileId>) =
            self.ready.keys().copied().partition(|t| !self.prefetched.contains_key(t));
        let max_uploads = self.config.max_uploads_per_frame.max(1);
        let mut bytes = 0u64;
        'phases: for (is_prefetch, tiles) in [(false, urgent), (true, spare)] {
            for tile in tiles {
                if self.is_resident(tile) {
                    self.ready.remove(&tile);
                    continue;
                }
                let Some(data) = self.ready.get(&tile).cloned() else { continue };
                let len = data.len() as u64;
                if !plan.uploads.is_empty()
                    && (plan.uploads.len() >= max_uploads
                        || bytes.saturating_add(len) > self.config.max_upload_bytes_per_frame)
                {
                    break 'phases;
                }
                let (slot, evicted) = match self.free.pop() {
                    Some(s) => (s, None),
                    None => {
                        let (needed, speculative) = (&self.needed, &self.speculative);
                        let victim = self.lru.pop_lru_where(|t, s| {
                            s.last_used_frame < frame
                                && !needed.contains(t)
                                && !(is_prefetch && speculative.contains(t))
                        });
                        let Some((victim, state)) = victim else {
                            // Prefetches find no victim either: they have fewer.
                            plan.pool_full |= !is_prefetch;
                            break 'phases;
                        };
                        self.speculative.remove(&victim);
                        self.table.set_evicted(victim);
                        self.counters.evictions += 1;
                        (state.slot, Some(victim))
                    }
                };
                self.ready.remove(&tile);
                self.prefetched.remove(&tile);
                if is_prefetch && !is_pinned(self.table.layout(), self.config.pin_coarsest_mips, tile) {
                    self.speculative.insert(tile);
                }
                bytes = bytes.saturating_add(len);
                plan.prefetched += usize::from(is_prefetch);
                plan.uploads.push(Upload { tile, slot, bytes: data, evicted, staged: None });
            }
        }
        self.assign_slots(frame, &mut plan.uploads, staged_at);
        plan.level_ones =
            crate::stream::level_one::plan(self.table.layout(), &plan.uploads, |t| self.slot_of(t));
        plan.deferred = self.ready.len();
        plan
    }

    /// Orders `uploads` (staged first, in staging order, then the rest as planned),
    /// hands them their slots in column order (each slot keeping the tile it evicted)
    /// and makes them resident.
    fn assign_slots(
        &mut self,
        frame: u64,
        uploads: &mut [Upload],
        staged_at: impl Fn(TileId) -> Option<(usize, u64)>,
    ) {
        let mut slots: Vec<(SlotCoord, Option<TileId>)> =
            uploads.iter().map(|u| (u.slot, u.evicted)).collect();
        slots.sort_unstable_by_key(|(s, _)| (s.x, s.y));
        uploads.sort_by_cached_key(|u| staged_at(u.tile).map_or((1, 0, 0), |(c, o)| (0, c, o)));
        for (u, (slot, evicted)) in uploads.iter_mut().zip(slots) {
            (u.slot, u.evicted) = (slot, evicted);
            self.table.set_resident(u.tile, slot);
            if is_pinned(self.table.layout(), self.config.pin_coarsest_mips, u.tile) {
                self.pinned.insert(u.tile, slot);
            } else {
                self.lru.insert(u.tile, SlotState { slot, last_used_frame: frame });
            }
            self.counters.uploads += 1;
        }
    }

    /// Evicts every resident tile that is not pinned (a debugging aid: everything
    /// streams again). The ready queue and pending requests are kept.
    pub fn flush(&mut self) {
        self.speculative.clear();
        while let Some((tile, state)) = self.lru.pop_lru() {
            self.table.set_evicted(tile);
            self.free.push(state.slot);
            self.counters.evictions += 1;
        }
        order_free(&mut self.free);
    }

    /// The page table mirror (entries for the GPU buffer).
    pub fn page_table(&self) -> &PageTable {
        &self.table
    }

    /// The page table mirror, mutably: for [`PageTable::take_dirty_ranges`].
    pub fn page_table_mut(&mut self) -> &mut PageTable {
        &mut self.table
    }

    /// Running totals.
    pub fn counters(&self) -> ResidencyCounters {
        self.counters
    }

    /// The counters in the form of the stats snapshot's VRAM tier.
    pub fn vram_counters(&self) -> VramCounters {
        VramCounters {
            uploads: self.counters.uploads,
            evictions: self.counters.evictions,
            slots_used: self.resident_count() as u64,
            slots_total: self.slot_count() as u64,
        }
    }

    /// Tiles in the pool, pinned ones included.
    pub fn resident_count(&self) -> usize {
        self.lru.len() + self.pinned.len()
    }

    /// Slots in the pool.
    pub fn slot_count(&self) -> usize {
        usize::from(self.config.slots_x) * usize::from(self.config.slots_y)
    }

    /// Whether `tile` is in the pool.
    pub fn is_resident(&self, tile: TileId) -> bool {
        self.lru.contains_key(tile) || self.pinned.contains_key(&tile)
    }

    /// Whether `tile` is in the pool and pinned.
    pub fn is_pinned(&self, tile: TileId) -> bool {
        self.pinned.contains_key(&tile)
    }

    /// The slot holding `tile`, when resident.
    pub fn slot_of(&self, tile: TileId) -> Option<SlotCoord> {
        self.lru.peek(tile).map(|s| s.slot).or_else(|| self.pinned.get(&tile).copied())
    }

    /// Every resident tile with its slot (unpinned ones least recently needed first,
    /// then pinned ones in no particular order).
    pub fn resident_tiles(&self) -> impl Iterator<Item = (TileId, SlotCoord)> + '_ {
        self.lru.iter().map(|(t, s)| (*t, s.slot)).chain(self.pinned.iter().map(|(t, s)| (*t, *s)))
    }

    /// Tiles asked of the loader without a result yet, and loaded tiles waiting for a
    /// slot: the "in flight" tiles of residency maps, in no particular order.
    pub fn requested_tiles(&self) -> impl Iterator<Item = TileId> + '_ {
        self.requested.iter().copied().chain(self.ready.keys().copied())
    }

    /// Changes the per-frame upload budget (tiles and bytes; each at least 1).
    pub fn set_upload_budget(&mut self, tiles: usize, bytes: u64) {
        self.config.max_uploads_per_frame = tiles.max(1);
        self.config.max_upload_bytes_per_frame = bytes.max(1);
    }

    /// Requests sent to the loader without a result yet.
    pub fn requested_count(&self) -> usize {
        self.requested.len()
    }

    /// Loaded tiles waiting for a slot.
    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// Whether `tile` is loaded and waiting for a slot.
    pub fn is_ready(&self, tile: TileId) -> bool {
        self.ready.contains_key(&tile)
    }

    /// Tiles whose load failed and that are not requested again.
    pub fn failed_count(&self) -> usize {
        self.failed.len()
    }

    /// The tiles of the latest feedback with their ancestors, coarse first (what
    /// [`Residency::on_feedback`] worked on).
    pub fn needed_sorted(&self) -> &[TileId] {
        &self.needed_sorted
    }

    /// Size of the latest needed set, ancestors included.
    pub fn needed_count(&self) -> usize {
        self.needed.len()
    }

    /// Whether the latest needed set (ancestors included) is in the pool: the "fully
    /// resident" signal. Tiles that failed to load count as missing.
    pub fn all_needed_resident(&self) -> bool {
        self.needed.iter().all(|&t| self.is_resident(t))
    }

    /// The fraction of `needed` (the tiles the view wants at the mip it wants them,
    /// without ancestors, e.g. the decoded feedback) that are resident themselves
    /// rather than shown through a coarser fallback: a progress signal from 0 to 1, 1
    /// for an empty set. Every entry weighs the same (per tile, not per screen pixel);
    /// duplicates count once per occurrence and tiles outside the atlas as missing.
    pub fn resident_fraction(&self, needed: &[TileId]) -> f64 {
        if needed.is_empty() {
            return 1.0;
        }
        let resident = needed.iter().filter(|&&t| self.is_resident(t)).count();
        resident as f64 / needed.len() as f64
    }
}

/// Orders free slots so that they are handed out (popped from the back) down the
/// columns: (0, 0), (0, 1), … then (1, 0), …, so a burst of uploads fills runs of
/// slots one below the other.
fn order_free(free: &mut [SlotCoord]) {
    free.sort_unstable_by_key(|s| std::cmp::Reverse((s.x, s.y)));
}

/// Whether `tile` is one of the `pin` coarsest mips of its layer.
fn is_pinned(layout: &FeedbackLayout, pin: u32, tile: TileId) -> bool {
    layout.coarsest_mip(tile.layer).is_some_and(|c| u32::from(tile.mip) + pin > u32::from(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::page_table::encode_entry;
    use proptest::prelude::*;
    use std::collections::HashSet;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn cfg(slots: u16, max_uploads: usize) -> ResidencyConfig {
        ResidencyConfig {
            slots_x: slots,
            slots_y: 1,
            max_uploads_per_frame: max_uploads,
            max_upload_bytes_per_frame: u64::MAX,
            pin_coarsest_mips: 1,
            complete_page_table: false,
        }
    }

    fn bytes() -> Arc<[u8]> {
        Arc::from(vec![0u8; 16])
    }

    /// Checks everything that must hold after a frame; returns the needed set.
    fn check(res: &Residency, frame: u64, needed: &[TileId], plan: &UploadPlan) -> TileSet {
        let layout = res.page_table().layout();
        let needed_all: TileSet = layout.with_ancestors(needed).into_iter().collect();
        for u in &plan.uploads {
            if let Some(v) = u.evicted {
                assert!(!needed_all.contains(&v), "frame {frame}: evicted needed tile {v}");
                assert!(!is_pinned(layout, res.config().pin_coarsest_mips, v), "evicted pinned {v}");
                assert!(!res.is_resident(v) || plan.uploads.iter().any(|w| w.tile == v));
            }
            assert_eq!(res.slot_of(u.tile), Some(u.slot));
        }
        // Slots unique and within the pool.
        let resident: Vec<(TileId, SlotCoord)> = res.resident_tiles().collect();
        assert_eq!(resident.len(), res.resident_count());
        assert!(res.resident_count() <= res.slot_count());
        let slots: HashSet<SlotCoord> = resident.iter().map(|r| r.1).collect();
        assert_eq!(slots.len(), resident.len());
        let cfg = res.config();
        assert!(slots.iter().all(|s| s.x < cfg.slots_x && s.y < cfg.slots_y));
        // Page table equals a recomputation from the resident set.
        let pt = res.page_table();
        for g in 0..pt.len() {
            let tile = layout.tile_at(g).unwrap();
            let coarsest = layout.coarsest_mip(tile.layer).unwrap();
            let mut want = 0;
            let mut cur = Some(tile);
            while let Some(t) = cur {
                if let Some(s) = res.slot_of(t) {
                    want = encode_entry(s, t.mip);
                    break;
                }
                cur = t.parent(coarsest);
            }
            assert_eq!(pt.lookup(tile), want, "frame {frame}: entry of {tile}");
            assert_eq!(pt.resident(tile), res.is_resident(tile));
            if res.is_resident(TileId::new(tile.layer, coarsest, 0, 0)) {
                assert_ne!(pt.lookup(tile), 0, "entry of {tile} invalid under a resident root");
            }
        }
        needed_all
    }

    /// One frame with a loader that answers every request at once (failing `fail`).
    fn frame(
        res: &mut Residency,
        f: u64,
        needed: &[TileId],
        fail: &dyn Fn(TileId) -> bool,
    ) -> (Vec<(TileId, u32)>, UploadPlan) {
        let req = res.on_feedback(f, needed);
        assert!(req.windows(2).all(|w| w[0].0 < w[1].0), "requests not coarse first");
        for &(t, _) in &req {
            if fail(t) { res.on_failed(t) } else { res.on_loaded(t, bytes()) }
        }
        let plan = res.plan_uploads(f);
        let (urgent, spare) = plan.uploads.split_at(plan.uploads.len() - plan.prefetched);
        for part in [urgent, spare] {
            assert!(part.windows(2).all(|w| w[0].tile < w[1].tile), "uploads not coarse first");
        }
        check(res, f, needed, &plan);
        (req, plan)
    }

    fn l1024() -> TextureLayout {
        TextureLayout::new(1024, 1024, 128, 4).unwrap()
    }

    #[test]
    fn fitting_set_converges() {
        let mut res = Residency::new(&[l1024()], cfg(16, 2));
        let needed: Vec<TileId> = (0..2).flat_map(|y| (0..2).map(move |x| TileId::new(0, 0, x, y))).collect();
        let (req, plan) = frame(&mut res, 0, &needed, &|_| false);
        // 4 mip-0 tiles + 1 each of mips 1..3.
        assert_eq!(req.len(), 7);
        assert_eq!(req[0], (TileId::new(0, 3, 0, 0), 4));
        assert_eq!(req[1], (TileId::new(0, 2, 0, 0), 4));
        assert_eq!(plan.uploads.len(), 2);
        assert_eq!(plan.uploads[0].tile, TileId::new(0, 3, 0, 0));
        for f in 1..4 {
            let (req, _) = frame(&mut res, f, &needed, &|_| false);
            assert!(req.is_empty());
        }
        assert!(res.all_needed_resident());
        assert_eq!(res.resident_count(), 7);
        let misses = res.counters().misses;
        for f in 4..10 {
            let (req, plan) = frame(&mut res, f, &needed, &|_| false);
            assert!(req.is_empty() && plan.uploads.is_empty());
        }
        assert_eq!(res.counters().misses, misses);
        assert_eq!(res.counters().uploads, 7);
        assert_eq!(res.counters().evictions, 0);
        assert_eq!(res.requested_count(), 0);
        assert_eq!(res.ready_count(), 0);
        let v = res.vram_counters();
        assert_eq!((v.uploads, v.slots_used, v.slots_total), (7, 7, 16));
    }

    #[test]
    fn requested_tiles_lists_pending_and_ready_and_budget_changes() {
        let mut res = Residency::new(&[l1024()], cfg(16, 1));
        let needed = [TileId::new(0, 0, 1, 1)];
        let req = res.on_feedback(0, &needed);
        assert_eq!(req.len(), 4);
        let mut pending: Vec<TileId> = res.requested_tiles().collect();
        pending.sort();
        assert_eq!(pending, req.iter().map(|r| r.0).collect::<Vec<_>>());
        // Loaded but over the one-per-frame budget: still in flight until uploaded.
        for &(t, _) in &req {
            res.on_loaded(t, bytes());
        }
        assert_eq!(res.plan_uploads(0).uploads.len(), 1);
        assert_eq!(res.requested_tiles().count(), 3);
        res.set_upload_budget(8, 1 << 30);
        assert_eq!(res.config().max_uploads_per_frame, 8);
        assert_eq!(res.plan_uploads(1).uploads.len(), 3);
        assert_eq!(res.requested_tiles().count(), 0);
    }

    #[test]
    fn oversized_set_settles_without_thrashing() {
        let small = TextureLayout::new(512, 512, 128, 4).unwrap();
        let mut res = Residency::new(&[l1024(), small], ResidencyConfig { slots_y: 4, ..cfg(4, 4) });
        assert_eq!(res.slot_count(), 16);
        // Phase A: a corner of layer 1 (4 + 1 + 1 tiles).
        let a: Vec<TileId> = (0..2).flat_map(|y| (0..2).map(move |x| TileId::new(1, 0, x, y))).collect();
        for f in 0..4 {
            frame(&mut res, f, &a, &|_| false);
        }
        assert!(res.all_needed_resident());
        // Phase B: all 64 mip-0 tiles of layer 0 (85 with ancestors) in a 16-slot pool.
        let b: Vec<TileId> = (0..8).flat_map(|y| (0..8).map(move |x| TileId::new(0, 0, x, y))).collect();
        let mut quiet = 0;
        for f in 4..40 {
            let (req, plan) = frame(&mut res, f, &b, &|_| false);
            if plan.uploads.is_empty() && req.is_empty() {
                quiet += 1;
            } else {
                assert!(f < 12 && quiet == 0, "frame {f}: uploads resumed after settling");
            }
            // Tiles of layer 1 other than its pinned root are all that may be evicted.
            assert!(plan.uploads.iter().filter_map(|u| u.evicted).all(|v| v.layer == 1 && v.mip < 2));
        }
        assert!(quiet > 25);
        assert!(!res.all_needed_resident());
        // Both roots pinned; then layer 0 coarse first: mip 3, the 4 of mip 2, 10 of mip 1.
        assert!(res.is_pinned(TileId::new(1, 2, 0, 0)) && res.is_pinned(TileId::new(0, 3, 0, 0)));
        let mips: Vec<u8> = res.resident_tiles().filter(|t| t.0.layer == 0).map(|t| t.0.mip).collect();
        assert_eq!(mips.len(), 15);
        assert_eq!(mips.iter().filter(|&&m| m == 2).count(), 4);
        assert_eq!(mips.iter().filter(|&&m| m == 1).count(), 10);
        let plan = res.plan_uploads(40);
        assert!(plan.pool_full && plan.uploads.is_empty());
        // Flushing keeps the pinned roots and leaves every entry valid.
        res.flush();
        assert_eq!(res.resident_count(), 2);
        check(&res, 41, &b, &UploadPlan::default());
    }

    #[test]
    fn failed_tiles_fall_back_and_are_not_rerequested() {
        let mut res = Residency::new(&[l1024()], cfg(16, 16));
        let bad = TileId::new(0, 0, 1, 1);
        let needed: Vec<TileId> = (0..2).flat_map(|y| (0..2).map(move |x| TileId::new(0, 0, x, y))).collect();
        let (req, _) = frame(&mut res, 0, &needed, &|t| t == bad);
        assert!(req.iter().any(|r| r.0 == bad));
        for f in 1..5 {
            let (req, plan) = frame(&mut res, f, &needed, &|t| t == bad);
            assert!(req.is_empty() && plan.uploads.is_empty());
        }
        assert_eq!(res.counters().failed, 1);
        assert_eq!(res.failed_count(), 1);
        assert!(!res.is_resident(bad));
        let parent = TileId::new(0, 1, 0, 0);
        assert_eq!(res.page_table().lookup(bad), res.page_table().lookup(parent));
        assert_ne!(res.page_table().lookup(bad), 0);
        res.forget_failures();
        let (req, plan) = frame(&mut res, 5, &needed, &|_| false);
        assert_eq!(req, vec![(bad, 1)]);
        assert_eq!(plan.uploads.len(), 1);
        assert!(res.all_needed_resident());
    }

    #[test]
    fn budget_cancel_and_dropping() {
        let mut res =
            Residency::new(&[l1024()], ResidencyConfig { max_upload_bytes_per_frame: 20, ..cfg(16, 100) });
        let needed = [TileId::new(0, 0, 0, 0)];
        let req = res.on_feedback(0, &needed);
        assert_eq!(req.len(), 4);
        assert_eq!(res.requested_count(), 4);
        // Cancelled requests are asked again; they were not lost.
        res.on_cancelled(req[3].0);
        assert_eq!(res.on_feedback(1, &needed), vec![req[3]]);
        for &(t, _) in &req {
            res.on_loaded(t, bytes());
        }
        // 16 bytes a tile, 20 per frame: one upload a frame.
        let plan = res.plan_uploads(1);
        assert_eq!((plan.uploads.len(), plan.deferred, plan.dropped), (1, 3, 0));
        // The feedback moves on: the ready mip-0 tile is dropped, the ancestors stay.
        res.on_feedback(2, &[TileId::new(0, 1, 0, 0)]);
        let plan = res.plan_uploads(2);
        assert_eq!((plan.uploads.len(), plan.deferred, plan.dropped), (1, 1, 1));
        // Already-resident and foreign tiles are ignored on arrival.
        res.on_loaded(TileId::new(0, 3, 0, 0), bytes());
        res.on_loaded(TileId::new(5, 0, 0, 0), bytes());
        assert_eq!(res.ready_count(), 1);
    }

    fn tiles(t: &[(u8, u32, u32)]) -> Vec<TileId> {
        t.iter().map(|&(m, x, y)| TileId::new(0, m, x, y)).collect()
    }

    #[test]
    fn prefetch_ranks_after_needed_and_never_evicts_needed() {
        let mut res = Residency::new(&[l1024()], cfg(5, 100));
        let needed = [TileId::new(0, 0, 0, 0)];
        let req = res.on_feedback(0, &needed);
        assert_eq!(req.len(), 4);
        assert!(req.iter().all(|r| r.1 >= 1), "needed requests rank above prefetches");
        let misses = res.counters().misses;
        // The needed tile, a tile outside the atlas and a duplicate are not requested.
        let pre = tiles(&[(0, 1, 0), (1, 1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 9, 9)]);
        let preq = res.prefetch(0, &pre, 0);
        assert_eq!(
            preq,
            vec![(TileId::new(0, 1, 1, 0), 0), (TileId::new(0, 0, 1, 0), 0), (TileId::new(0, 0, 0, 1), 0)]
        );
        assert_eq!(res.counters().misses, misses, "prefetching counts no miss");
        assert_eq!(res.prefetched_count(), 3);
        assert_eq!(res.requested_count(), 7);
        // Prefetches arrive first, yet upload after every needed tile.
        for &(t, _) in preq.iter().chain(&req) {
            res.on_loaded(t, bytes());
        }
        let plan = res.plan_uploads(0);
        let order: Vec<TileId> = plan.uploads.iter().map(|u| u.tile).collect();
        assert_eq!(order, tiles(&[(3, 0, 0), (2, 0, 0), (1, 0, 0), (0, 0, 0), (1, 1, 0)]));
        assert_eq!(plan.prefetched, 1);
        // The pool is full of needed tiles and a fresh prefetch: the other two wait,
        // and that does not count as a full pool.
        assert!(!plan.pool_full);
        assert_eq!(plan.deferred, 2);
        check(&res, 0, &needed, &plan);
        for f in 1..5 {
            res.on_feedback(f, &needed);
            let plan = res.plan_uploads(f);
            assert!(plan.uploads.is_empty() && !plan.pool_full, "frame {f}: {plan:?}");
            check(&res, f, &needed, &plan);
        }
        // The view moves on: needed tiles take the slots, prefetched ones wait.
        let b = [TileId::new(0, 0, 7, 7)];
        let req = res.on_feedback(5, &b);
        assert_eq!(req.len(), 3);
        for &(t, _) in &req {
            res.on_loaded(t, bytes());
        }
        let plan = res.plan_uploads(5);
        check(&res, 5, &b, &plan);
        // The needed tiles evict the least recently used: the prefetched tile (never
        // needed), then two of the old view; the last old tile goes to a prefetch
        // (`evicted` names each slot's previous tile; slots go out in column order).
        let mut evicted: Vec<TileId> = plan.uploads.iter().filter_map(|u| u.evicted).collect();
        evicted.sort_unstable();
        assert_eq!(evicted, tiles(&[(2, 0, 0), (1, 0, 0), (1, 1, 0), (0, 0, 0)]));
        assert_eq!(plan.uploads.len(), 4);
        assert_eq!(plan.prefetched, 1);
        assert_eq!(plan.uploads[3].tile, TileId::new(0, 0, 1, 0));
        // Nothing left that a prefetch may evict: the last one waits.
        res.on_feedback(6, &b);
        let plan = res.plan_uploads(6);
        check(&res, 6, &b, &plan);
        assert!(plan.uploads.is_empty() && !plan.pool_full);
        assert!(res.is_prefetched(TileId::new(0, 0, 0, 1)));
    }

    /// Uploads into free slots go down the columns in staging order, so one copy per
    /// column moves a burst; which tiles go and the page table stay right.
    #[test]
    fn a_burst_goes_down_the_columns_in_staging_order() {
        use crate::stream::copy_runs::{TileCopy, vertical_runs};
        let mut res = Residency::new(&[l1024()], ResidencyConfig { slots_x: 4, slots_y: 8, ..cfg(1, 100) });
        // 16 mip-0 tiles and their 6 ancestors: 22 uploads.
        let needed: Vec<TileId> = (0..4).flat_map(|y| (0..4).map(move |x| TileId::new(0, 0, x, y))).collect();
        // Loaders finish in a scrambled order; `stage` tiles get consecutive records.
        let burst = |res: &mut Residency, f: u64, stage: &dyn Fn(usize) -> bool| {
            let req = res.on_feedback(f, &needed);
            let mut order: Vec<TileId> = req.iter().map(|r| r.0).collect();
            order.sort_by_key(|t| (t.x * 7 + t.y * 3 + u32::from(t.mip)) % 5);
            for &t in &order {
                res.on_loaded(t, bytes());
            }
            let at = |t: TileId| {
                let i = order.iter().position(|&o| o == t)?;
                let record = (0..i).filter(|&j| stage(j)).count();
                stage(i).then_some((0, record as u64 * 64))
            };
            let plan = res.plan_uploads_staged(f, at);
            check(res, f, &needed, &plan);
            let staged = plan.uploads.iter().take_while(|u| at(u.tile).is_some()).count();
            assert!(plan.uploads[staged..].iter().all(|u| at(u.tile).is_none()), "staged tiles first");
            let keys: Vec<u64> =
                plan.uploads[..staged].iter().filter_map(|u| at(u.tile)).map(|k| k.1).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "staged tiles in staging order");
            // The renderer's two sources: staging records, and the tiles it lays out itself.
            let copies: Vec<TileCopy> = plan
                .uploads
                .iter()
                .enumerate()
                .map(|(i, u)| match at(u.tile) {
                    Some((_, offset)) => TileCopy { slot: u.slot, source: 0, offset },
                    None => TileCopy { slot: u.slot, source: 1, offset: i as u64 * 64 },
                })
                .collect();
            (plan.uploads.len(), vertical_runs(&copies, 64).len())
        };
        // All staged: 22 tiles in 3 columns of 8 slots.
        assert_eq!(burst(&mut res, 0, &|_| true), (22, 3));
        // After a flush (the pinned root keeps its slot), half staged: 21 uploads in
        // three columns, split once more where staging ends and once around the root.
        res.flush();
        let (uploads, runs) = burst(&mut res, 1, &|i| i % 2 == 0);
        assert_eq!(uploads, 21);
        assert!(runs <= 5, "{runs} runs");
        // None staged: the renderer lays the tiles out in plan order, column by column.
        res.flush();
        assert_eq!(burst(&mut res, 2, &|_| false), (21, 4));
    }

    #[test]
    fn prefetches_do_not_take_turns_in_one_slot() {
        let mut res = Residency::new(&[l1024()], cfg(5, 100));
        let needed = [TileId::new(0, 0, 0, 0)];
        let pre = tiles(&[(0, 1, 0), (0, 0, 1)]);
        let mut uploads = 0;
        for f in 0..200 {
            // The renderer asks for the same neighbours every frame.
            let mut req = res.on_feedback(f, &needed);
            req.extend(res.prefetch(f, &pre, 0));
            for &(t, _) in &req {
                res.on_loaded(t, bytes());
            }
            let plan = res.plan_uploads(f);
            check(&res, f, &needed, &plan);
            uploads += plan.uploads.len();
            if f > 2 {
                assert!(plan.uploads.is_empty(), "frame {f}: {plan:?}");
            }
        }
        assert_eq!(uploads, 5);
        // The one that never fit stays a renewed prefetch, ready.
        assert!(res.is_prefetched(TileId::new(0, 0, 0, 1)));
        assert_eq!(res.ready_count(), 1);
    }

    #[test]
    fn prefetched_tile_that_becomes_needed_is_upgraded() {
        let mut res = Residency::new(&[l1024()], cfg(16, 100));
        let t = TileId::new(0, 0, 2, 2);
        // Its ancestors are prefetched too (nothing is needed yet).
        let pre = res.prefetch(0, &[t], 0);
        assert_eq!(pre.len(), 1);
        assert!(res.is_prefetched(t));
        // The feedback now needs it: requested once, not twice.
        let req = res.on_feedback(1, &[t]);
        assert!(req.iter().all(|r| r.0 != t), "{req:?}");
        assert_eq!(req.len(), 3);
        assert!(!res.is_prefetched(t));
        assert_eq!(res.requested_count(), 4);
        // Prefetching it again while needed does nothing.
        assert!(res.prefetch(1, &[t], 0).is_empty());
        for &(r, _) in &req {
            res.on_loaded(r, bytes());
        }
        res.on_loaded(t, bytes());
        let plan = res.plan_uploads(1);
        assert_eq!(plan.uploads.len(), 4);
        assert_eq!(plan.prefetched, 0);
        assert_eq!(plan.uploads[3].tile, t);
        assert!(res.all_needed_resident());
        // Resident tiles are not prefetched.
        assert!(res.prefetch(2, &[t], 0).is_empty());
    }

    #[test]
    fn stale_prefetches_are_dropped_and_forgotten() {
        let mut res = Residency::new(&[l1024()], cfg(16, 1));
        let (a, b, c) = (TileId::new(0, 0, 1, 1), TileId::new(0, 0, 2, 1), TileId::new(0, 1, 1, 1));
        assert_eq!(res.prefetch(10, &[a, b], 0).len(), 2);
        // `a` loads but is held back by the one-tile budget behind a needed tile.
        res.on_loaded(a, bytes());
        let root = TileId::new(0, 3, 0, 0);
        // Kept (not dropped as "not needed") for the lifetime, renewals extend it.
        for f in 10..70 {
            for (t, _) in res.on_feedback(f, &[root]) {
                res.on_loaded(t, bytes());
            }
            if f == 40 {
                assert!(res.prefetch(f, &[b], 0).is_empty(), "renewed, not requested again");
            }
            assert!(res.drop_stale_prefetch(f).is_empty());
            let plan = res.plan_uploads(f);
            assert_eq!(plan.dropped, 0);
            assert_eq!(plan.uploads.len(), usize::from(f < 12), "frame {f}");
        }
        // Frame 11 uploaded `a` once the root was in.
        assert!(res.is_resident(a) && !res.is_prefetched(a));
        // A new prefetch at 70; `b` (renewed at 40) lasts until 100.
        assert_eq!(res.prefetch(70, &[c], 0).len(), 1);
        res.on_loaded(c, bytes());
        assert!(res.drop_stale_prefetch(99).is_empty());
        assert_eq!(res.drop_stale_prefetch(100), vec![b]);
        assert!(!res.is_prefetched(b));
        // Still with the loader: a late result is dropped as unneeded.
        assert_eq!(res.requested_count(), 1);
        res.on_loaded(b, bytes());
        res.on_feedback(100, &[root]);
        let plan = res.plan_uploads(100);
        assert_eq!(plan.uploads.iter().map(|u| u.tile).collect::<Vec<_>>(), vec![c]);
        assert_eq!(plan.dropped, 1);
        // A ready prefetch that expires is dropped by plan_uploads itself.
        assert_eq!(res.prefetch(101, &[b], 0).len(), 1);
        res.on_loaded(b, bytes());
        res.set_upload_budget(1, 1);
        res.on_feedback(101, &[TileId::new(0, 0, 7, 7)]);
        for t in res.requested_tiles().collect::<Vec<_>>() {
            if t != b {
                res.on_loaded(t, bytes());
            }
        }
        let plan = res.plan_uploads(160);
        assert_eq!(plan.prefetched, 0);
        assert!(res.is_prefetched(b));
        let plan = res.plan_uploads(161);
        assert!(!res.is_prefetched(b) && plan.dropped == 1, "{plan:?}");
        // Cancelled or failed prefetches are forgotten too.
        let d = TileId::new(0, 0, 5, 5);
        res.prefetch(162, &[d, c], 0);
        res.on_cancelled(d);
        assert!(!res.is_prefetched(d));
        assert_eq!(res.prefetch(163, &[d], 0).len(), 1);
        res.on_failed(d);
        assert!(!res.is_prefetched(d) && res.prefetch(164, &[d], 0).is_empty());
    }

    proptest! {
        #[test]
        fn resident_fraction_matches_brute_force(
            layouts in small_layouts(),
            slots in 1u16..24,
            frames in proptest::collection::vec(proptest::collection::vec(any::<usize>(), 0..12), 1..8),
            ask in proptest::collection::vec(any::<usize>(), 0..30),
        ) {
            let mut res = Residency::new(&layouts, cfg(slots, 4));
            let layout = res.page_table().layout().clone();
            let n = layout.total_tiles();
            let pick = |p: &[usize]| -> Vec<TileId> { p.iter().map(|i| layout.tile_at(i % n).unwrap()).collect() };
            for (f, p) in frames.iter().enumerate() {
                let needed = pick(p);
                frame(&mut res, f as u64, &needed, &|_| false);
            }
            let mut asked = pick(&ask);
            asked.push(TileId::new(99, 0, 0, 0));
            let count = asked.iter().filter(|&&t| res.resident_tiles().any(|(r, _)| r == t)).count();
            prop_assert_eq!(res.resident_fraction(&asked), count as f64 / asked.len() as f64);
            prop_assert_eq!(res.resident_fraction(&[]), 1.0);
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Fate {
        Now,
        Later,
        Fail,
        Cancel,
    }

    /// What the simulated loader does with a request, by weight.
    const FATES: [Fate; 8] =
        [Fate::Now, Fate::Now, Fate::Now, Fate::Later, Fate::Later, Fate::Fail, Fate::Cancel, Fate::Now];

    fn small_layouts() -> impl Strategy<Value = Vec<TextureLayout>> {
        proptest::collection::vec((1u32..200, 1u32..200), 1..=2)
            .prop_map(|v| v.into_iter().map(|(w, h)| TextureLayout::new(w, h, 16, 2).unwrap()).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random feedback, loader behaviour and budgets keep every invariant, and a
        /// fixed needed set always settles to no uploads and no requests.
        #[test]
        fn random_frames_keep_invariants(
            layouts in small_layouts(),
            slots in 1u16..24,
            max_uploads in 0usize..6,
            max_bytes in 0u64..64,
            frames in proptest::collection::vec(
                (proptest::collection::vec(any::<usize>(), 0..12), proptest::collection::vec(0u8..8, 12)),
                1..25,
            ),
            last in proptest::collection::vec(any::<usize>(), 0..12),
            pre in proptest::collection::vec(proptest::collection::vec(any::<usize>(), 0..6), 25),
            ttl in 1u64..8,
        ) {
            let config = ResidencyConfig {
                slots_x: slots,
                slots_y: 1,
                max_uploads_per_frame: max_uploads,
                max_upload_bytes_per_frame: max_bytes,
                pin_coarsest_mips: 1,
                complete_page_table: false,
            };
            let mut res = Residency::new(&layouts, config);
            res.set_prefetch_ttl(ttl);
            let n = res.page_table().len();
            let pick = |res: &Residency, p: &[usize]| -> Vec<TileId> {
                p.iter().map(|i| res.page_table().layout().tile_at(i % n).unwrap()).collect()
            };
            let mut later: Vec<TileId> = Vec::new();
            let mut f = 0u64;
            for ((p, fates), pre) in frames.iter().zip(&pre) {
                let needed = pick(&res, p);
                let mut req = res.on_feedback(f, &needed);
                let prefetch = pick(&res, pre);
                let preq = res.prefetch(f, &prefetch, 0);
                prop_assert!(preq.iter().all(|&(t, _)| !req.iter().any(|r| r.0 == t)), "requested twice");
                req.extend(preq);
                if f % 3 == 2 {
                    for t in res.drop_stale_prefetch(f) {
                        prop_assert!(res.requested.contains(&t));
                    }
                }
                for t in later.drain(..) {
                    res.on_loaded(t, bytes());
                }
                for (i, &(t, _)) in req.iter().enumerate() {
                    match FATES[usize::from(fates[i % 12])] {
                        Fate::Now => res.on_loaded(t, bytes()),
                        Fate::Later => later.push(t),
                        Fate::Fail => res.on_failed(t),
                        Fate::Cancel => res.on_cancelled(t),
                    }
                }
                let plan = res.plan_uploads(f);
                check(&res, f, &needed, &plan);
                // Prefetched uploads come last; pending prefetches are in flight only.
                prop_assert!(plan.uploads[plan.uploads.len() - plan.prefetched..]
                    .iter()
                    .all(|u| !res.needed.contains(&u.tile)));
                for t in res.prefetched.keys() {
                    prop_assert!(res.requested.contains(t) || res.ready.contains_key(t));
                    prop_assert!(!res.is_resident(*t) && !res.needed.contains(t));
                }
                f += 1;
            }
            for t in later.drain(..) {
                res.on_cancelled(t);
            }
            res.forget_failures();
            let needed = pick(&res, &last);
            let mut quiet = 0;
            for _ in 0..400 {
                let (req, plan) = frame(&mut res, f, &needed, &|_| false);
                f += 1;
                if req.is_empty() && plan.uploads.is_empty() {
                    quiet += 1;
                    if quiet == 3 {
                        break;
                    }
                } else {
                    prop_assert_eq!(quiet, 0, "activity after a quiet frame");
                }
            }
            prop_assert_eq!(quiet, 3);
            prop_assert_eq!(res.requested_count(), 0);
            // Settled: either everything needed is in, or the pool is full.
            prop_assert!(res.all_needed_resident() || res.resident_count() == res.slot_count());
        }
    }
}
