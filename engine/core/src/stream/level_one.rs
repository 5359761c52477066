//! Level 1 of the pool's slots on the hardware trilinear path: which texels each slot's
//! half-size copy is made from. A slot's level 1 is what hardware trilinear blends
//! towards, so it should hold the next coarser mip of the atlas exactly, as the fully
//! resident reference does: the quadrant of the parent tile over the slot's tile,
//! copied texel for texel from the parent's slot. Only while the parent is not resident
//! is it the slot's own 2× downsample, which differs from the atlas' coarser mip by the
//! codec's loss (that mip was encoded from the lossless pyramid, not from this one).
//!
//! With 136² slots (128² payload and a border of 4), level 1 is 68²: the 64² quadrant
//! and a border of 2, all inside the parent's padded tile (offset 2 or 66).

use crate::format::tile::TileId;
use crate::stream::feedback::FeedbackLayout;
use crate::stream::page_table::SlotCoord;
use crate::stream::residency::Upload;

/// Where one slot's level 1 comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LevelOneSource {
    /// The slot's own 2× downsample (its parent is not resident, or it has none).
    Downsample,
    /// The quadrant (`quadrant.0` across, `quadrant.1` down, each 0 or 1) of the parent
    /// tile in `slot`, at full resolution.
    Parent {
        /// The parent tile.
        tile: TileId,
        /// The parent's slot.
        slot: SlotCoord,
        /// Which quadrant of the parent the slot's tile covers.
        quadrant: (u8, u8),
    },
}

/// One level-1 copy to make after a frame's uploads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelOne {
    /// The slot whose level 1 is written.
    pub slot: SlotCoord,
    /// Where its texels come from.
    pub source: LevelOneSource,
}

impl LevelOne {
    /// Top-left texel (at level 0 of the pool) and step (1: a copy, 2: a 2× average)
    /// of the texels behind this slot's level 1, for slots of `pitch²` texels holding
    /// a tile with `border` `margin` texels in from the slot's corner (level-1 texel `i`
    /// reads level-0 texels `origin + step·i` .. `+ step − 1`). A parent's quadrant
    /// lines up with level-1 texels only when `margin + border` is even.
    pub fn source_texels(&self, pitch: u32, margin: u32, border: u32) -> ([u32; 2], u32) {
        match self.source {
            LevelOneSource::Downsample => {
                ([u32::from(self.slot.x) * pitch, u32::from(self.slot.y) * pitch], 2)
            }
            LevelOneSource::Parent { slot, quadrant, .. } => {
                // Level-1 texel i covers the slot's level-0 texels 2i, 2i + 1: payload
                // texels 2i − margin − border, …, which the parent holds at half
                // resolution from its own margin and border on, the quadrant half a
                // payload in.
                let payload = pitch - 2 * (margin + border);
                let at = |s: u16, q: u8| {
                    u32::from(s) * pitch + margin + border + u32::from(q) * (payload / 2)
                        - (margin + border) / 2
                };
                ([at(slot.x, quadrant.0), at(slot.y, quadrant.1)], 1)
            }
        }
    }
}

/// The `side`² texels at `at` (texels from the tile's top-left corner) of a tile stored
/// as `rows.1` rows of `rows.0` bytes, in units of `unit.0`² texels of `unit.1` bytes
/// (4×4 blocks of 16 bytes for BC7, texels of 4 bytes for RGBA8): the region's rows one
/// after the other. This is a parent's quadrant cut on the CPU from the parent's bytes,
/// as the GPU would copy it from the parent's slot. `None` where the region is not on
/// whole units, or not inside the tile, or the bytes are not the tile's.
pub fn cut_region(
    tile: &[u8],
    rows: (u32, u32),
    unit: (u32, u32),
    at: [u32; 2],
    side: u32,
) -> Option<Vec<u8>> {
    let ((row_bytes, row_count), (texels, unit_bytes)) = (rows, unit);
    let (row_bytes, unit_bytes) = (row_bytes as usize, unit_bytes as usize);
    if texels == 0 || tile.len() != row_bytes * row_count as usize {
        return None;
    }
    if !(at[0].is_multiple_of(texels) && at[1].is_multiple_of(texels) && side.is_multiple_of(texels)) {
        return None;
    }
    let (x, y, n) = ((at[0] / texels) as usize, (at[1] / texels) as usize, (side / texels) as usize);
    if (x + n) * unit_bytes > row_bytes || y + n > row_count as usize {
        return None;
    }
    let mut out = Vec::with_capacity(n * n * unit_bytes);
    for row in tile.chunks_exact(row_bytes).skip(y).take(n) {
        out.extend_from_slice(&row[x * unit_bytes..(x + n) * unit_bytes]);
    }
    Some(out)
}

/// The level-1 copies after `uploads` (already resident; `slot_of` answers for the
/// residency after them): each uploaded tile's own, from its parent where that is
/// resident; and each resident child of an uploaded tile that was not uploaded with
/// it, made again from the new parent (it had only a downsample, or a parent that
/// was since evicted and came back). Every slot appears at most once.
pub fn plan(
    layout: &FeedbackLayout,
    uploads: &[Upload],
    slot_of: impl Fn(TileId) -> Option<SlotCoord>,
) -> Vec<LevelOne> {
    let written: Vec<(TileId, SlotCoord)> = uploads.iter().map(|u| (u.tile, u.slot)).collect();
    plan_tiles(layout, &written, slot_of)
}

/// [`plan`] for slots written by any means, `(tile, slot)` each: uploaded, or drawn by
/// a producer ([`crate::stream::produce`]), new or produced again in place (whose
/// resident children then copy their quadrant of the new texels).
pub fn plan_tiles(
    layout: &FeedbackLayout,
    written: &[(TileId, SlotCoord)],
    slot_of: impl Fn(TileId) -> Option<SlotCoord>,
) -> Vec<LevelOne> {
    let mut jobs: Vec<LevelOne> = Vec::with_capacity(written.len());
    let source = |tile: TileId| -> LevelOneSource {
        let Some(coarsest) = layout.coarsest_mip(tile.layer) else { return LevelOneSource::Downsample };
        let Some(parent) = tile.parent(coarsest) else { return LevelOneSource::Downsample };
        match slot_of(parent) {
            Some(slot) => LevelOneSource::Parent {
                tile: parent,
                slot,
                quadrant: ((tile.x & 1) as u8, (tile.y & 1) as u8),
            },
            None => LevelOneSource::Downsample,
        }
    };
    for &(tile, slot) in written {
        jobs.push(LevelOne { slot, source: source(tile) });
    }
    let uploaded: rustc_hash::FxHashSet<TileId> = written.iter().map(|w| w.0).collect();
    for &(t, parent_slot) in written {
        if t.mip == 0 {
            continue;
        }
        let Some((cols, rows)) = layout.tiles_at(t.layer, t.mip - 1) else { continue };
        for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let (x, y) = (t.x * 2 + dx, t.y * 2 + dy);
            if x >= cols || y >= rows {
                continue;
            }
            let child = TileId::new(t.layer, t.mip - 1, x, y);
            if uploaded.contains(&child) {
                continue;
            }
            if let Some(slot) = slot_of(child) {
                jobs.push(LevelOne {
                    slot,
                    source: LevelOneSource::Parent {
                        tile: t,
                        slot: parent_slot,
                        quadrant: (dx as u8, dy as u8),
                    },
                });
            }
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tile::TextureLayout;
    use std::collections::HashMap;
    use std::sync::Arc;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn upload(tile: TileId, slot: (u16, u16)) -> Upload {
        Upload {
            tile,
            slot: SlotCoord { x: slot.0, y: slot.1 },
            bytes: Arc::from(Vec::new()),
            evicted: None,
            staged: None,
        }
    }

    fn layout() -> FeedbackLayout {
        // 512² with 128² tiles: mips of 4², 2², 1² tiles.
        FeedbackLayout::new(&[TextureLayout::new(512, 512, 128, 4).unwrap()])
    }

    #[test]
    fn a_tile_copies_its_parents_quadrant_when_the_parent_is_resident() {
        let layout = layout();
        let parent = TileId::new(0, 1, 1, 0);
        let child = TileId::new(0, 0, 3, 1);
        let resident: HashMap<TileId, SlotCoord> =
            [(parent, SlotCoord { x: 5, y: 2 }), (child, SlotCoord { x: 0, y: 0 })].into();
        let jobs = plan(&layout, &[upload(child, (0, 0))], |t| resident.get(&t).copied());
        assert_eq!(
            jobs,
            vec![LevelOne {
                slot: SlotCoord { x: 0, y: 0 },
                source: LevelOneSource::Parent {
                    tile: parent,
                    slot: SlotCoord { x: 5, y: 2 },
                    quadrant: (1, 1)
                }
            }]
        );
        // Quadrant (1, 1) of the parent's slot (5, 2): border 4, a half payload of 64 in,
        // a level-1 border of 2 out.
        assert_eq!(jobs[0].source_texels(136, 0, 4), ([5 * 136 + 66, 2 * 136 + 66], 1));
        // With a margin of 4 (144² slots), whole 4×4 blocks: the parent's tile starts 4
        // texels into its slot and the quadrant 64 texels further.
        assert_eq!(jobs[0].source_texels(144, 4, 4), ([5 * 144 + 68, 2 * 144 + 68], 1));
    }

    #[test]
    fn a_quadrant_is_cut_on_whole_blocks_inside_the_tile() {
        // A 136² BC7 tile: 34 rows of 34 blocks, block (bx, by) holding bytes bx + 34 by.
        let tile: Vec<u8> = (0..34 * 34u32).flat_map(|b| [(b % 256) as u8; 16]).collect();
        let rows = (34 * 16, 34);
        // The quadrant (1, 1) of a 144² slot's level 1: 72 texels from texel 64.
        let cut = cut_region(&tile, rows, (4, 16), [64, 64], 72).unwrap();
        assert_eq!(cut.len(), 18 * 18 * 16);
        for (i, block) in cut.chunks_exact(16).enumerate() {
            let (bx, by) = (16 + i as u32 % 18, 16 + i as u32 / 18);
            assert_eq!(u32::from(block[0]), (bx + 34 * by) % 256, "block {i}");
        }
        assert!(cut_region(&tile, rows, (4, 16), [66, 64], 72).is_none(), "not on a block");
        assert!(cut_region(&tile, rows, (4, 16), [68, 64], 72).is_none(), "past the right edge");
        assert!(cut_region(&tile[16..], rows, (4, 16), [0, 0], 72).is_none(), "not the tile's bytes");
        // RGBA8 texels cut at any offset.
        let rgba: Vec<u8> = (0..8 * 8 * 4u32).map(|i| i as u8).collect();
        assert_eq!(cut_region(&rgba, (32, 8), (1, 4), [7, 7], 1).unwrap(), rgba[252..256].to_vec());
    }

    #[test]
    fn without_a_resident_parent_a_slot_downsamples_itself() {
        let layout = layout();
        let child = TileId::new(0, 0, 0, 0);
        let coarsest = TileId::new(0, 2, 0, 0);
        let jobs = plan(&layout, &[upload(child, (3, 1)), upload(coarsest, (0, 0))], |_| None);
        assert!(jobs.iter().all(|j| j.source == LevelOneSource::Downsample));
        assert_eq!(jobs[0].source_texels(136, 0, 4), ([3 * 136, 136], 2));
    }

    #[test]
    fn resident_children_are_made_again_from_a_new_parent() {
        let layout = layout();
        let parent = TileId::new(0, 1, 0, 0);
        let kids = [TileId::new(0, 0, 0, 0), TileId::new(0, 0, 1, 1)];
        let mut resident: HashMap<TileId, SlotCoord> = HashMap::new();
        resident.insert(parent, SlotCoord { x: 9, y: 9 });
        resident.insert(kids[0], SlotCoord { x: 1, y: 0 });
        resident.insert(kids[1], SlotCoord { x: 2, y: 0 });
        // The parent arrives with one child; the other child was resident already.
        let jobs =
            plan(&layout, &[upload(parent, (9, 9)), upload(kids[0], (1, 0))], |t| resident.get(&t).copied());
        let of = |x| jobs.iter().filter(|j| j.slot == SlotCoord { x, y: 0 }).collect::<Vec<_>>();
        assert_eq!(of(1).len(), 1, "an uploaded child appears once: {jobs:?}");
        assert_eq!(
            of(2)[0].source,
            LevelOneSource::Parent { tile: parent, slot: SlotCoord { x: 9, y: 9 }, quadrant: (1, 1) }
        );
        assert_eq!(jobs.len(), 3, "the parent (downsample: its own parent is out), two children");
    }
}
