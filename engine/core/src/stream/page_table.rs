//! CPU mirror of the GPU page table: one `u32` per atlas-global tile pointing at the pool
//! slot of the tile or of its nearest resident ancestor, with dirty tracking for uploads.
//!
//! The renderer keeps one storage buffer `array<u32>` for the whole atlas, indexed by
//! `gidx = layer.first_tile + layout.tile_index(mip, x, y)` (see
//! [`FeedbackLayout::global_index`]). Each entry is decoded by the shader as described
//! at [`encode_entry`], so one load gives the slot to sample and the mip the slot holds
//! (from which the shader derives the fallback's scale and offset).

use std::ops::Range;

use crate::format::tile::{TextureLayout, TileId};
use crate::stream::complete_table::{ChangeLog, TableJobs, UNMAPPED, subtree_jobs};
use crate::stream::feedback::FeedbackLayout;

/// Bits of a slot coordinate in an entry (bits 0..11 hold x, 12..23 hold y).
pub const SLOT_BITS: u32 = 12;
/// Largest slot coordinate an entry can hold, plus one: pools are at most
/// `MAX_SLOTS_PER_SIDE × MAX_SLOTS_PER_SIDE` slots.
pub const MAX_SLOTS_PER_SIDE: u16 = 1 << SLOT_BITS;
/// Shift of the resident-mip field (bits 24..28).
pub const MIP_SHIFT: u32 = 24;
/// Mask of the resident-mip field once shifted down (5 bits).
pub const MIP_MASK: u32 = 0x1f;
/// The valid bit (bit 31). An entry without it means "nothing resident, not even the
/// coarsest mip"; such entries are 0.
pub const VALID_BIT: u32 = 1 << 31;
/// Entries per dirty-tracking chunk: a dirty range is a union of such chunks.
pub const DIRTY_CHUNK: usize = 1024;

const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

/// Position of a slot in the physical pool's grid of `slots_x × slots_y` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotCoord {
    /// Column in the pool grid.
    pub x: u16,
    /// Row in the pool grid.
    pub y: u16,
}

impl SlotCoord {
    /// Makes a slot coordinate.
    pub const fn new(x: u16, y: u16) -> Self {
        Self { x, y }
    }
}

/// Encodes a page-table entry pointing at `slot`, which holds a tile of mip `mip`.
///
/// Layout (what `vt.wgsl` decodes): bits 0..11 slot x, bits 12..23 slot y, bits 24..28
/// the mip of the tile stored in the slot, bit 31 valid. Bits 29..30 are zero. Slot
/// coordinates must be below [`MAX_SLOTS_PER_SIDE`] and `mip` below 32; higher bits
/// are dropped.
pub fn encode_entry(slot: SlotCoord, mip: u8) -> u32 {
    debug_assert!(slot.x < MAX_SLOTS_PER_SIDE && slot.y < MAX_SLOTS_PER_SIDE && u32::from(mip) <= MIP_MASK);
    VALID_BIT
        | (u32::from(slot.x) & SLOT_MASK)
        | ((u32::from(slot.y) & SLOT_MASK) << SLOT_BITS)
        | ((u32::from(mip) & MIP_MASK) << MIP_SHIFT)
}

/// Decodes an entry made by [`encode_entry`]: the slot and the mip it holds, or `None`
/// when the valid bit is clear.
pub fn decode_entry(entry: u32) -> Option<(SlotCoord, u8)> {
    (entry & VALID_BIT != 0).then(|| {
        let x = (entry & SLOT_MASK) as u16;
        let y = ((entry >> SLOT_BITS) & SLOT_MASK) as u16;
        (SlotCoord { x, y }, ((entry >> MIP_SHIFT) & MIP_MASK) as u8)
    })
}

/// The mip an entry points at, or `None` when invalid.
fn entry_mip(entry: u32) -> Option<u8> {
    decode_entry(entry).map(|(_, m)| m)
}

/// Fallback entries are filled at most this many mips below a resident tile: a tile
/// whose nearest resident ancestor is further up has an invalid entry, and the shader
/// looks again [`FALLBACK_DEPTH`]` + 1` mips up (`vt_fallback_step` in `vt.wgsl`; see
/// [`PageTable::lookup`]). A residency change thus rewrites at most
/// `(4^(FALLBACK_DEPTH + 1) − 1) / 3` = 341 entries, whatever the texture's size.
pub const FALLBACK_DEPTH: u8 = 4;

/// CPU copy of the page table of a whole atlas, kept consistent with residency
/// changes: every entry points at the tile's own slot when it is resident, else at its
/// nearest resident ancestor's when that is at most [`FALLBACK_DEPTH`] mips up, else is
/// invalid (0); [`PageTable::lookup`] resolves any tile as the shader does.
///
/// Changes are tracked in chunks of [`DIRTY_CHUNK`] entries; the renderer uploads
/// [`PageTable::take_dirty_ranges`] of [`PageTable::entries`] each frame. A new table is
/// all zeros and clean, matching a zero-initialised GPU buffer.
#[derive(Clone, Debug)]
pub struct PageTable {
    layout: FeedbackLayout,
    entries: Vec<u32>,
    /// One bit per entry: whether that tile itself is resident.
    resident: Vec<u64>,
    /// One bit per chunk of [`DIRTY_CHUNK`] entries.
    dirty: Vec<u64>,
    /// A complete table ([`PageTable::complete`]): the frame's changes, turned into
    /// GPU jobs by [`PageTable::take_jobs`]; `entries` then hold only resident tiles'
    /// own entries (0 elsewhere), and nothing is uploaded.
    complete: Option<ChangeLog>,
}

impl PageTable {
    /// An all-invalid table for layers laid out one after the other (as in the atlas).
    pub fn new(layouts: &[TextureLayout]) -> Self {
        Self::with_layout(FeedbackLayout::new(layouts))
    }

    /// An all-invalid table over an existing index mapping.
    pub fn with_layout(layout: FeedbackLayout) -> Self {
        let n = layout.total_tiles();
        Self {
            layout,
            entries: vec![0; n],
            resident: vec![0; n.div_ceil(64)],
            dirty: vec![0; n.div_ceil(DIRTY_CHUNK).div_ceil(64)],
            complete: None,
        }
    }

    /// A complete table over `layout` (see `complete_table`): every GPU entry names
    /// the tile itself or its nearest resident ancestor, at any depth, kept so by the
    /// GPU running [`PageTable::take_jobs`]; the GPU buffer starts all [`UNMAPPED`].
    pub fn complete(layout: FeedbackLayout) -> Self {
        Self { complete: Some(ChangeLog::default()), ..Self::with_layout(layout) }
    }

    /// Whether this is a complete table (updated by jobs on the GPU, not uploads).
    pub fn is_complete(&self) -> bool {
        self.complete.is_some()
    }

    /// A complete table's jobs for the changes since the last call (evictions, then
    /// insertions); empty for a table of the other kind.
    pub fn take_jobs(&mut self) -> TableJobs {
        let Some(mut log) = self.complete.take() else { return TableJobs::default() };
        let jobs = log.take(&self.layout, |g| self.own_entry(g), |t| self.nearest_resident(t, false));
        self.complete = Some(log);
        jobs
    }

    /// Jobs that rebuild a complete table whatever the GPU buffer holds (after a frame
    /// whose jobs may never have run, say): every mip of every layer reset to
    /// [`UNMAPPED`], then an insertion for every resident tile. Clears pending changes.
    pub fn rebuild_jobs(&mut self) -> TableJobs {
        if let Some(log) = self.complete.as_mut() {
            *log = ChangeLog::default();
        }
        let mut jobs = TableJobs::default();
        // The subtrees of the coarsest mip's tiles cover every entry of the layer.
        for layer in 0..self.layout.layer_count() as u16 {
            let Some(top) = self.layout.coarsest_mip(layer) else { continue };
            let (w, h) = self.layout.tiles_at(layer, top).unwrap_or((0, 0));
            for (x, y) in (0..h).flat_map(|y| (0..w).map(move |x| (x, y))) {
                jobs.reset.extend(subtree_jobs(
                    &self.layout,
                    TileId::new(layer, top, x, y),
                    UNMAPPED,
                    UNMAPPED,
                ));
            }
        }
        for g in 0..self.entries.len() {
            if self.is_resident_at(g)
                && let Some(t) = self.layout.tile_at(g)
            {
                jobs.insert.extend(subtree_jobs(&self.layout, t, self.entries[g], UNMAPPED));
            }
        }
        jobs
    }

    /// The entry of the tile at `g` when it is resident, else [`UNMAPPED`].
    fn own_entry(&self, g: usize) -> u32 {
        if self.is_resident_at(g) { self.entries[g] } else { UNMAPPED }
    }

    /// The entry of `tile`'s nearest resident ancestor (or of the tile itself when
    /// `inclusive` and it is resident), by the resident bits; [`UNMAPPED`] when none.
    fn nearest_resident(&self, tile: TileId, inclusive: bool) -> u32 {
        let coarsest = self.layout.coarsest_mip(tile.layer).unwrap_or(tile.mip);
        let mut at = if inclusive { Some(tile) } else { tile.parent(coarsest) };
        while let Some(t) = at {
            if let Some(g) = self.global_index(t).filter(|&g| self.is_resident_at(g)) {
                return self.entries[g];
            }
            at = t.parent(coarsest);
        }
        UNMAPPED
    }

    /// The mapping between tile ids and entry indices.
    pub fn layout(&self) -> &FeedbackLayout {
        &self.layout
    }

    /// Number of entries (tiles over every layer).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entry (no layer).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries, in global index order: what the GPU buffer holds.
    pub fn entries(&self) -> &[u32] {
        &self.entries
    }

    /// The entry index of `tile`, or `None` outside the atlas.
    pub fn global_index(&self, tile: TileId) -> Option<usize> {
        self.layout.global_index(tile)
    }

    /// The entry of `tile` (0 for tiles outside the atlas).
    pub fn entry(&self, tile: TileId) -> u32 {
        self.global_index(tile).map_or(0, |g| self.entries[g])
    }

    /// Whether `tile` itself is resident (as opposed to served by an ancestor).
    pub fn resident(&self, tile: TileId) -> bool {
        self.global_index(tile).is_some_and(|g| self.is_resident_at(g))
    }

    /// What the shader finds for `tile`: its entry, or when that is invalid the entry
    /// [`FALLBACK_DEPTH`]` + 1` mips up, and so on up to the coarsest mip. This is the
    /// nearest resident ancestor (or the tile itself) as a full fallback table would
    /// hold it; 0 when nothing above the tile is resident.
    pub fn lookup(&self, tile: TileId) -> u32 {
        if self.is_complete() {
            return match self.nearest_resident(tile, true) {
                UNMAPPED => 0,
                e => e,
            };
        }
        let Some(coarsest) = self.layout.coarsest_mip(tile.layer) else { return 0 };
        let mut t = tile;
        loop {
            let e = self.entry(t);
            if e != 0 || t.mip >= coarsest {
                return e;
            }
            let up = (t.mip + FALLBACK_DEPTH + 1).min(coarsest) - t.mip;
            t = TileId::new(t.layer, t.mip + up, t.x >> up, t.y >> up);
        }
    }

    /// Records that `tile` now lives in `slot`: its entry and those of the descendants
    /// up to [`FALLBACK_DEPTH`] mips below it that fell back to a coarser tile (or had
    /// nothing) now point at `slot`.
    ///
    /// Re-setting a resident tile to another slot moves it. Returns `false` (and changes
    /// nothing) for a tile outside the atlas.
    pub fn set_resident(&mut self, tile: TileId, slot: SlotCoord) -> bool {
        let Some(g) = self.global_index(tile) else { return false };
        let e = encode_entry(slot, tile.mip);
        if self.complete.is_some() {
            let was = self.own_entry(g);
            if let Some(log) = self.complete.as_mut() {
                log.touch(g, was);
            }
            self.resident[g / 64] |= 1 << (g % 64);
            self.entries[g] = e;
            return true;
        }
        self.resident[g / 64] |= 1 << (g % 64);
        self.write(g, e);
        // A descendant that points at a mip finer than `tile.mip` has a closer resident
        // ancestor (or is resident), and so has its whole subtree: prune there.
        self.update_subtree(tile, |_| e, |cur| entry_mip(cur).is_none_or(|m| m >= tile.mip));
        true
    }

    /// Records that `tile` left the pool: it and every descendant that pointed at it now
    /// point at its nearest resident ancestor when that is at most [`FALLBACK_DEPTH`]
    /// mips up from them, and are invalid otherwise.
    ///
    /// Returns whether the tile was resident (nothing changes otherwise).
    pub fn set_evicted(&mut self, tile: TileId) -> bool {
        let Some(g) = self.global_index(tile) else { return false };
        if !self.is_resident_at(g) {
            return false;
        }
        if let Some(log) = self.complete.as_mut() {
            log.touch(g, self.entries[g]);
            self.resident[g / 64] &= !(1 << (g % 64));
            self.entries[g] = 0;
            return true;
        }
        self.resident[g / 64] &= !(1 << (g % 64));
        let coarsest = self.layout.coarsest_mip(tile.layer).unwrap_or(tile.mip);
        // The nearest resident ancestor, by the resident bits (at most the mip count).
        let mut up = tile.parent(coarsest);
        while let Some(p) = up.filter(|&p| !self.resident(p)) {
            up = p.parent(coarsest);
        }
        let fallback = |mip: u8| match up {
            Some(a) if a.mip - mip <= FALLBACK_DEPTH => self.entry(a),
            _ => 0,
        };
        let (own, values): (u32, Vec<u32>) = (
            fallback(tile.mip),
            (0..=FALLBACK_DEPTH).map(|d| fallback(tile.mip.saturating_sub(d))).collect(),
        );
        self.write(g, own);
        // Inside the subtree, an entry at `tile.mip` can only point at `tile`.
        let at = |mip: u8| values[usize::from(tile.mip - mip)];
        self.update_subtree(tile, at, |cur| entry_mip(cur) == Some(tile.mip));
        true
    }

    /// Ranges of entries changed since the last call (whole chunks of [`DIRTY_CHUNK`],
    /// consecutive chunks merged, the last clipped to [`PageTable::len`]), and marks
    /// everything clean.
    pub fn take_dirty_ranges(&mut self) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        let len = self.entries.len();
        for (wi, word) in self.dirty.iter_mut().enumerate() {
            let mut w = std::mem::take(word);
            while w != 0 {
                let chunk = wi * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                let start = chunk * DIRTY_CHUNK;
                let end = ((chunk + 1) * DIRTY_CHUNK).min(len);
                match out.last_mut() {
                    Some(r) if r.end == start => r.end = end,
                    _ => out.push(start..end),
                }
            }
        }
        out
    }

    /// Whether any entry changed since the last [`PageTable::take_dirty_ranges`].
    pub fn is_dirty(&self) -> bool {
        self.dirty.iter().any(|&w| w != 0)
    }

    /// Marks every entry dirty, e.g. after the GPU buffer was re-created.
    pub fn mark_all_dirty(&mut self) {
        let chunks = self.entries.len().div_ceil(DIRTY_CHUNK);
        for (i, w) in self.dirty.iter_mut().enumerate() {
            let n = chunks.saturating_sub(i * 64).min(64);
            *w = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        }
    }

    fn is_resident_at(&self, g: usize) -> bool {
        self.resident[g / 64] & (1 << (g % 64)) != 0
    }

    fn write(&mut self, g: usize, e: u32) {
        if self.entries[g] != e {
            self.entries[g] = e;
            let chunk = g / DIRTY_CHUNK;
            self.dirty[chunk / 64] |= 1 << (chunk % 64);
        }
    }

    /// Sets every strict descendant `c` of `root` at most [`FALLBACK_DEPTH`] mips below
    /// it for which `changes(entry)` holds to `value(c.mip)`, descending only below those
    /// that changed.
    fn update_subtree(&mut self, root: TileId, value: impl Fn(u8) -> u32, changes: impl Fn(u32) -> bool) {
        let mut stack = vec![root];
        while let Some(t) = stack.pop() {
            if t.mip == 0 || root.mip - t.mip >= FALLBACK_DEPTH {
                continue;
            }
            let k = t.mip - 1;
            let Some((tx, ty)) = self.layout.tiles_at(t.layer, k) else { continue };
            for y in (t.y * 2)..(t.y * 2 + 2).min(ty) {
                for x in (t.x * 2)..(t.x * 2 + 2).min(tx) {
                    let c = TileId::new(t.layer, k, x, y);
                    let Some(g) = self.global_index(c) else { continue };
                    if changes(self.entries[g]) {
                        self.write(g, value(k));
                        stack.push(c);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn entry_round_trip() {
        assert_eq!(decode_entry(0), None);
        let s = SlotCoord::new(4095, 17);
        let e = encode_entry(s, 31);
        assert_eq!(e, VALID_BIT | 4095 | (17 << 12) | (31 << 24));
        assert_eq!(decode_entry(e), Some((s, 31)));
        assert_eq!(decode_entry(encode_entry(SlotCoord::new(0, 0), 0)), Some((SlotCoord::new(0, 0), 0)));
    }

    #[test]
    fn fallback_follows_residency() {
        let l = TextureLayout::new(1024, 1024, 128, 4).unwrap();
        let mut pt = PageTable::new(&[l]);
        assert_eq!(pt.len(), 85);
        assert!(pt.entries().iter().all(|&e| e == 0));
        assert!(pt.take_dirty_ranges().is_empty());
        let root = TileId::new(0, 3, 0, 0);
        let s0 = SlotCoord::new(0, 0);
        assert!(pt.set_resident(root, s0));
        assert!(pt.entries().iter().all(|&e| e == encode_entry(s0, 3)));
        let t = TileId::new(0, 1, 1, 2);
        assert!(pt.set_resident(t, SlotCoord::new(1, 0)));
        assert_eq!(pt.entry(TileId::new(0, 0, 3, 5)), encode_entry(SlotCoord::new(1, 0), 1));
        assert_eq!(pt.entry(TileId::new(0, 0, 4, 5)), encode_entry(s0, 3));
        assert_eq!(pt.entry(TileId::new(0, 2, 0, 1)), encode_entry(s0, 3));
        assert!(pt.resident(t) && !pt.resident(TileId::new(0, 0, 3, 5)));
        assert!(pt.set_evicted(root));
        assert!(!pt.set_evicted(root));
        assert_eq!(pt.entry(TileId::new(0, 0, 3, 5)), encode_entry(SlotCoord::new(1, 0), 1));
        assert_eq!(pt.entry(TileId::new(0, 0, 4, 5)), 0);
        assert!(!pt.set_resident(TileId::new(0, 0, 8, 0), s0));
        assert_eq!(pt.take_dirty_ranges(), vec![0..85]);
        assert!(!pt.is_dirty());
    }

    #[test]
    fn dirty_ranges_coalesce_and_clip() {
        // 2500 x 3 tiles at mip 0 of a 64-px tiled texture, plus coarser mips.
        let l = TextureLayout::new(160_000, 64 * 3, 64, 4).unwrap();
        let mut pt = PageTable::new(&[l]);
        let n = pt.len();
        assert!(n > 3 * DIRTY_CHUNK);
        pt.mark_all_dirty();
        assert_eq!(pt.take_dirty_ranges(), vec![0..n]);
        let root = TileId::new(0, l.coarsest_mip(), 0, 0);
        assert_eq!(pt.global_index(root), Some(n - 1));
        // The root serves the tiles up to FALLBACK_DEPTH mips below it: the end of the
        // table changes, mip 0 (the first 7,500 entries) does not.
        pt.set_resident(root, SlotCoord::new(0, 2));
        let ranges = pt.take_dirty_ranges();
        assert_eq!(ranges.last().map(|r| r.end), Some(n));
        assert!(ranges[0].start >= 7500 / DIRTY_CHUNK * DIRTY_CHUNK, "{ranges:?}");
        // Two mip-0 tiles: index 0 and 2 * 2500 + 2400 = 7400 (chunk 7).
        pt.set_resident(TileId::new(0, 0, 0, 0), SlotCoord::new(0, 0));
        pt.set_resident(TileId::new(0, 0, 2400, 2), SlotCoord::new(0, 1));
        assert_eq!(pt.take_dirty_ranges(), vec![0..DIRTY_CHUNK, 7 * DIRTY_CHUNK..8 * DIRTY_CHUNK]);
        // The last chunk is clipped.
        pt.set_evicted(root);
        let ranges = pt.take_dirty_ranges();
        assert_eq!(ranges.last().map(|r| r.end), Some(n));
        assert!(pt.take_dirty_ranges().is_empty());
    }

    /// Nearest resident ancestor (or the tile itself), by walking up: `(entry, mips up)`.
    fn nearest(pt: &PageTable, slots: &HashMap<TileId, SlotCoord>, tile: TileId) -> (u32, u8) {
        let coarsest = pt.layout().coarsest_mip(tile.layer).unwrap();
        let mut cur = Some(tile);
        while let Some(t) = cur {
            if let Some(&s) = slots.get(&t) {
                return (encode_entry(s, t.mip), t.mip - tile.mip);
            }
            cur = t.parent(coarsest);
        }
        (0, 0)
    }

    /// The entry the table must hold: the nearest resident ancestor within
    /// [`FALLBACK_DEPTH`] mips, else invalid.
    fn brute_force(pt: &PageTable, slots: &HashMap<TileId, SlotCoord>, tile: TileId) -> u32 {
        match nearest(pt, slots, tile) {
            (e, up) if up <= FALLBACK_DEPTH => e,
            _ => 0,
        }
    }

    fn small_layouts() -> impl Strategy<Value = Vec<TextureLayout>> {
        proptest::collection::vec((1u32..400, 1u32..400), 1..=2)
            .prop_map(|v| v.into_iter().map(|(w, h)| TextureLayout::new(w, h, 16, 2).unwrap()).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn matches_brute_force(
            layouts in small_layouts(),
            ops in proptest::collection::vec((any::<bool>(), any::<usize>(), 0u16..64), 1..120),
        ) {
            let mut pt = PageTable::new(&layouts);
            let n = pt.len();
            let all: Vec<TileId> = (0..n).map(|g| pt.layout().tile_at(g).unwrap()).collect();
            let mut slots: HashMap<TileId, SlotCoord> = HashMap::new();
            for (evict, pick, s) in ops {
                let before = pt.entries().to_vec();
                // Bias picks towards coarse tiles (they sit at the end of each layer).
                let t = all[if pick % 3 == 0 { n - 1 - (pick / 3) % n.min(8) } else { pick % n }];
                if evict {
                    prop_assert_eq!(pt.set_evicted(t), slots.remove(&t).is_some());
                } else {
                    let slot = SlotCoord::new(s, s / 3);
                    prop_assert!(pt.set_resident(t, slot));
                    slots.insert(t, slot);
                }
                for (g, &tile) in all.iter().enumerate() {
                    prop_assert_eq!(pt.entries()[g], brute_force(&pt, &slots, tile), "tile {}", tile);
                    prop_assert_eq!(pt.lookup(tile), nearest(&pt, &slots, tile).0, "lookup of {}", tile);
                    prop_assert_eq!(pt.resident(tile), slots.contains_key(&tile));
                }
                let ranges = pt.take_dirty_ranges();
                prop_assert!(ranges.windows(2).all(|w| w[0].end < w[1].start));
                for (g, (old, new)) in before.iter().zip(pt.entries()).enumerate() {
                    if old != new {
                        prop_assert!(ranges.iter().any(|r| r.contains(&g)), "entry {} changed but is clean", g);
                    }
                }
                prop_assert!(ranges.iter().all(|r| r.start % DIRTY_CHUNK == 0 && r.end <= n && r.start < r.end));
            }
        }
    }
}
