//! The complete page table: every entry of every mip names a resident tile (the tile
//! itself or its nearest resident ancestor), so the shader does exactly one load and
//! never climbs. Keeping it so on the CPU would mean rewriting whole subtrees (a
//! 524288² atlas's coarsest tile covers 22 M entries), so the CPU only says what
//! changed, as rectangles of entries per mip ([`TableJob`]), and a compute pass on the
//! GPU rewrites them (`shaders/page_table_update.wgsl`). [`apply_jobs`] is that pass on
//! the CPU: the model the tests check against brute force, and the spec of the shader.
//!
//! A frame's changes are reduced to their net effect per tile (a tile made resident and
//! evicted within one frame changes nothing) and run in two phases:
//!
//! 1. **Evictions**: in the evicted tile's subtree, every entry still naming it (its
//!    exact entry value: slot and mip) takes the entry of the tile's nearest ancestor
//!    resident now, or [`UNMAPPED`]. No two evictions match the same entry, so the
//!    entries of one phase can be rewritten in any order, in parallel.
//! 2. **Insertions**: in the new tile's subtree, every entry becomes the minimum of itself
//!    and the new tile's entry (`atomicMin` on the GPU). Entries order by mip first
//!    (bits 24..28 above the slot bits, bit 31 set in all), so the minimum is the finest
//!    resident tile covering the entry: insertions commute.
//!
//! Evictions go first so that a slot freed and reused in the same frame (the same entry
//! value for the new tile, when it is of the same mip) is never wiped by the eviction.

use std::collections::HashMap;

use crate::format::tile::TileId;
use crate::stream::feedback::FeedbackLayout;

/// The value of an entry no resident tile covers (not even the coarsest mip): larger
/// than every valid entry, so insertions replace it, and with the mip field at 31,
/// which the shader reads as unmapped.
pub const UNMAPPED: u32 = u32::MAX;

/// One rectangle of one mip of the page table to rewrite: entries
/// `base + y * pitch + x` for `x0 <= x < x0 + w`, `y0 <= y < y0 + h`. The layout is what
/// the GPU reads (8 × `u32`, 32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TableJob {
    /// Index of the mip's first entry (its tile (0, 0)) in the whole table.
    pub base: u32,
    /// Tiles across the mip: entries per row.
    pub pitch: u32,
    /// First column of the rectangle.
    pub x0: u32,
    /// First row of the rectangle.
    pub y0: u32,
    /// Columns.
    pub w: u32,
    /// Rows.
    pub h: u32,
    /// Evictions: the entry value to replace (the evicted tile's); insertions: the new
    /// tile's entry, kept where it is smaller.
    pub value: u32,
    /// Evictions: what replaces `value` (the nearest resident ancestor's entry, or
    /// [`UNMAPPED`]); unused by insertions.
    pub target: u32,
}

impl TableJob {
    /// Entries in the rectangle.
    pub fn len(&self) -> u64 {
        u64::from(self.w) * u64::from(self.h)
    }

    /// Whether the rectangle is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A frame's page-table rewrites, in the order they must run: every reset (only when
/// the table is rebuilt), every eviction, then every insertion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableJobs {
    /// Phase 0: entries become `value` ([`UNMAPPED`]), whatever they held: a rebuild
    /// ([`PageTable::rebuild_jobs`](crate::stream::page_table::PageTable::rebuild_jobs)).
    pub reset: Vec<TableJob>,
    /// Phase 1: entries equal to `value` become `target`.
    pub evict: Vec<TableJob>,
    /// Phase 2: entries become `min(entry, value)`.
    pub insert: Vec<TableJob>,
}

impl TableJobs {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.reset.is_empty() && self.evict.is_empty() && self.insert.is_empty()
    }

    /// Rectangles of every phase.
    pub fn len(&self) -> usize {
        self.reset.len() + self.evict.len() + self.insert.len()
    }

    /// Entries the jobs cover (what the GPU pass touches).
    pub fn entries(&self) -> u64 {
        self.reset.iter().chain(&self.evict).chain(&self.insert).map(TableJob::len).sum()
    }

    /// The largest rectangle, in entries (what one job's dispatch must cover).
    pub fn largest(&self) -> u64 {
        self.reset.iter().chain(&self.evict).chain(&self.insert).map(TableJob::len).max().unwrap_or(0)
    }
}

/// The rectangles of `tile`'s subtree, one per mip from the tile's own down to mip 0
/// (clipped to each mip's tile grid), with `value` and `target` set.
pub fn subtree_jobs(layout: &FeedbackLayout, tile: TileId, value: u32, target: u32) -> Vec<TableJob> {
    let mut out = Vec::with_capacity(usize::from(tile.mip) + 1);
    for mip in (0..=tile.mip).rev() {
        let (Some((across, down)), Some(base)) =
            (layout.tiles_at(tile.layer, mip), layout.global_index(TileId::new(tile.layer, mip, 0, 0)))
        else {
            continue;
        };
        let shift = u32::from(tile.mip - mip);
        let (x0, y0) = (tile.x << shift, tile.y << shift);
        if x0 >= across || y0 >= down {
            continue;
        }
        let side = 1u32 << shift;
        out.push(TableJob {
            base: base as u32,
            pitch: across,
            x0,
            y0,
            w: side.min(across - x0),
            h: side.min(down - y0),
            value,
            target,
        });
    }
    out
}

/// What the GPU pass does, on the CPU: the resets, the evictions, then the insertions,
/// on `entries` (indices out of range are skipped, as the shader does).
pub fn apply_jobs(entries: &mut [u32], jobs: &TableJobs) {
    let mut each = |job: &TableJob, f: &mut dyn FnMut(&mut u32)| {
        for y in job.y0..job.y0 + job.h {
            for x in job.x0..job.x0 + job.w {
                let i = u64::from(job.base) + u64::from(y) * u64::from(job.pitch) + u64::from(x);
                if let Some(e) = usize::try_from(i).ok().and_then(|i| entries.get_mut(i)) {
                    f(e);
                }
            }
        }
    };
    for job in &jobs.reset {
        each(job, &mut |e| *e = job.value);
    }
    for job in &jobs.evict {
        each(job, &mut |e| {
            if *e == job.value {
                *e = job.target;
            }
        });
    }
    for job in &jobs.insert {
        each(job, &mut |e| *e = (*e).min(job.value));
    }
}

/// The net changes of a frame: for each tile touched since the last
/// [`ChangeLog::take`], its entry when the frame began ([`UNMAPPED`]: not resident).
#[derive(Clone, Debug, Default)]
pub(crate) struct ChangeLog {
    before: HashMap<usize, u32>,
}

impl ChangeLog {
    /// Notes that the tile at entry `g`, whose entry is `was` (or [`UNMAPPED`]), is about
    /// to change; only the first note of a frame counts.
    pub(crate) fn touch(&mut self, g: usize, was: u32) {
        self.before.entry(g).or_insert(was);
    }

    /// The frame's jobs: `now(g)` is a touched tile's entry now ([`UNMAPPED`]: not
    /// resident), `ancestor(g)` the entry of its nearest resident ancestor now (or
    /// [`UNMAPPED`]). Empties the log.
    pub(crate) fn take(
        &mut self,
        layout: &FeedbackLayout,
        now: impl Fn(usize) -> u32,
        ancestor: impl Fn(TileId) -> u32,
    ) -> TableJobs {
        let mut jobs = TableJobs::default();
        let mut touched: Vec<(usize, u32)> = self.before.drain().collect();
        // Deterministic order (the GPU result does not depend on it).
        touched.sort_unstable();
        for (g, was) in touched {
            let is = now(g);
            let Some(tile) = layout.tile_at(g).filter(|_| was != is) else { continue };
            if was != UNMAPPED {
                jobs.evict.extend(subtree_jobs(layout, tile, was, ancestor(tile)));
            }
            if is != UNMAPPED {
                jobs.insert.extend(subtree_jobs(layout, tile, is, UNMAPPED));
            }
        }
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tile::TextureLayout;
    use crate::stream::page_table::{PageTable, SlotCoord, encode_entry};
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// What every entry must hold: the entry of the tile itself or of its nearest
    /// resident ancestor, [`UNMAPPED`] when none (brute force over the resident set).
    fn expected(layout: &FeedbackLayout, resident: &HashMap<TileId, u32>, g: usize) -> u32 {
        let mut t = layout.tile_at(g);
        let coarsest = t.and_then(|t| layout.coarsest_mip(t.layer)).unwrap_or(0);
        while let Some(tile) = t {
            if let Some(&e) = resident.get(&tile) {
                return e;
            }
            t = tile.parent(coarsest);
        }
        UNMAPPED
    }

    /// Runs `frames` of (resident?, tile pick, slot) operations on a complete table and a
    /// GPU model, checking every entry against brute force after each frame.
    fn check_frames(layouts: &[TextureLayout], frames: &[Vec<(bool, usize, u16)>]) {
        let layout = FeedbackLayout::new(layouts);
        let n = layout.total_tiles();
        let mut table = PageTable::complete(layout.clone());
        let mut gpu = vec![UNMAPPED; n];
        let mut resident: HashMap<TileId, u32> = HashMap::new();
        let mut slot_of: HashMap<u16, TileId> = HashMap::new();
        for ops in frames {
            for &(insert, pick, slot) in ops {
                let tile = layout.tile_at(pick % n).unwrap();
                if insert {
                    // A tile moving to another slot frees its old one.
                    if let Some(e) = resident.get(&tile) {
                        let (s, _) = crate::stream::page_table::decode_entry(*e).unwrap();
                        if s.x != slot {
                            slot_of.remove(&s.x);
                        }
                    }
                    // A slot holds one tile: reusing it evicts the old one first.
                    if let Some(old) = slot_of.get(&slot).copied()
                        && old != tile
                    {
                        table.set_evicted(old);
                        resident.remove(&old);
                    }
                    slot_of.insert(slot, tile);
                    let e = encode_entry(SlotCoord::new(slot, 0), tile.mip);
                    table.set_resident(tile, SlotCoord::new(slot, 0));
                    resident.insert(tile, e);
                } else if resident.remove(&tile).is_some() {
                    table.set_evicted(tile);
                    slot_of.retain(|_, t| *t != tile);
                }
            }
            apply_jobs(&mut gpu, &table.take_jobs());
            for (g, &got) in gpu.iter().enumerate() {
                assert_eq!(got, expected(&layout, &resident, g), "entry {g} ({:?})", layout.tile_at(g));
                let lookup = table.lookup(layout.tile_at(g).unwrap());
                assert_eq!(lookup, if got == UNMAPPED { 0 } else { got });
            }
        }
        // Rebuilding gives the same table, from scratch or over any garbage.
        let jobs = table.rebuild_jobs();
        let mut fresh = vec![UNMAPPED; n];
        apply_jobs(&mut fresh, &jobs);
        assert_eq!(fresh, gpu);
        let mut garbage: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        apply_jobs(&mut garbage, &jobs);
        assert_eq!(garbage, gpu);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Random residency changes over several frames (slots reused within a frame,
        /// tiles inserted and evicted in the same frame, two layers): the GPU model
        /// always equals brute force.
        #[test]
        fn jobs_keep_every_entry_on_its_nearest_resident_tile(
            frames in proptest::collection::vec(
                proptest::collection::vec((any::<bool>(), any::<usize>(), 0u16..12), 0..24), 1..8),
        ) {
            let a = TextureLayout::new(1000, 600, 128, 4).unwrap();
            let b = TextureLayout::new(512, 512, 128, 4).unwrap();
            check_frames(&[a, b], &frames);
        }
    }

    /// A 524288² atlas (22.4 M entries): a coarse tile and finer ones come and go; every
    /// change makes at most one rectangle per mip, and entries sampled over the whole
    /// table equal brute force.
    #[test]
    fn a_524288_atlas_sampled() {
        let l = TextureLayout::new(524_288, 524_288, 128, 4).unwrap();
        let layout = FeedbackLayout::new(&[l]);
        let n = layout.total_tiles();
        assert!(n > 22_000_000);
        let mut table = PageTable::complete(layout.clone());
        let mut gpu = vec![UNMAPPED; n];
        let mut resident = HashMap::new();
        let coarsest = layout.coarsest_mip(0).unwrap();
        let steps: [(TileId, Option<u16>); 6] = [
            (TileId::new(0, coarsest, 0, 0), Some(0)),
            (TileId::new(0, 9, 3, 5), Some(1)),
            (TileId::new(0, 4, 100, 170), Some(2)),
            (TileId::new(0, 0, 1700, 2800), Some(3)),
            (TileId::new(0, 9, 3, 5), None),
            (TileId::new(0, 2, 425, 700), Some(1)),
        ];
        for (tile, slot) in steps {
            match slot {
                Some(s) => {
                    table.set_resident(tile, SlotCoord::new(s, 0));
                    resident.insert(tile, encode_entry(SlotCoord::new(s, 0), tile.mip));
                }
                None => {
                    table.set_evicted(tile);
                    resident.remove(&tile);
                }
            }
            let jobs = table.take_jobs();
            assert!(jobs.evict.len() + jobs.insert.len() <= usize::from(coarsest) + 1, "{jobs:?}");
            apply_jobs(&mut gpu, &jobs);
            let mut g = 0usize;
            while g < n {
                assert_eq!(gpu[g], expected(&layout, &resident, g), "entry {g}");
                g += 7919;
            }
            // And around every tile that changed.
            for (t, _) in &steps {
                let base = layout.global_index(TileId::new(0, 0, t.x << t.mip, t.y << t.mip)).unwrap();
                for d in 0..64 {
                    assert_eq!(gpu[base + d], expected(&layout, &resident, base + d));
                }
            }
        }
    }

    #[test]
    fn subtree_rectangles_clip_to_each_mip() {
        // 1000×600 in 128² tiles: mip 0 is 8×5 tiles, mip 1 4×3, mip 2 2×2, mip 3 1×1.
        let l = TextureLayout::new(1000, 600, 128, 4).unwrap();
        let layout = FeedbackLayout::new(&[l]);
        let jobs = subtree_jobs(&layout, TileId::new(0, 2, 1, 1), 7, 9);
        let rects: Vec<_> = jobs.iter().map(|j| (j.pitch, j.x0, j.y0, j.w, j.h)).collect();
        assert_eq!(rects, vec![(2, 1, 1, 1, 1), (4, 2, 2, 2, 1), (8, 4, 4, 4, 1)]);
        assert!(jobs.iter().all(|j| j.value == 7 && j.target == 9));
        for j in &jobs {
            let first = layout.tile_at(j.base as usize).unwrap();
            assert_eq!((first.x, first.y), (0, 0));
        }
    }
}
