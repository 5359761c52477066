//! Where each tile sits in a version-2 atlas: its *storage position*, the place of its
//! index entry and of its blob.
//!
//! Version 2 stores tiles coarse mips first and, within a mip, along the Morton
//! (Z-order) curve, so that tiles close together on screen are close together in the
//! file: a camera's working set is a few contiguous byte ranges, and the coarsest mips
//! (what a first frame needs) are one range at the start of the data.
//!
//! - Plain layers follow each other: layer 0's tiles (coarsest mip first), then layer
//!   1's...
//! - Stacked layers (one layout, shared tile ids) are interleaved tile by tile: tile
//!   `(m, x, y)` of every layer, layer 0 first, then the next tile on the curve, so a
//!   stacked tile is one range.
//!
//! The *canonical index* of a tile is its version-1 position (`first_tile` +
//! [`TextureLayout::tile_index`]): page tables and feedback keep using it.

use crate::format::tile::TextureLayout;

/// The Morton code of `(x, y)`: the bits of `x` in the even positions, `y` in the odd ones.
pub fn morton(x: u32, y: u32) -> u64 {
    fn spread(v: u32) -> u64 {
        let mut v = u64::from(v);
        v = (v | (v << 16)) & 0x0000_FFFF_0000_FFFF;
        v = (v | (v << 8)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v << 2)) & 0x3333_3333_3333_3333;
        (v | (v << 1)) & 0x5555_5555_5555_5555
    }
    spread(x) | (spread(y) << 1)
}

/// How many cells of the `w × h` grid come before `(x, y)` in Morton order (the cells
/// outside the grid skipped): the position of `(x, y)` on the curve through the grid.
/// `O(log max(w, h))`: walks down the quadtree, adding the cells of the grid that lie
/// in the quadrants visited before the one holding `(x, y)`.
pub fn morton_rank(w: u32, h: u32, x: u32, y: u32) -> u64 {
    let (w, h, x, y) = (u64::from(w), u64::from(h), u64::from(x), u64::from(y));
    let inside = |x0: u64, y0: u64, side: u64| {
        (x0 + side).min(w).saturating_sub(x0) * (y0 + side).min(h).saturating_sub(y0)
    };
    let mut side = w.max(h).next_power_of_two();
    let (mut ox, mut oy, mut rank) = (0u64, 0u64, 0u64);
    while side > 1 {
        let half = side / 2;
        let qx = u64::from(x >= ox + half);
        let qy = u64::from(y >= oy + half);
        // Z order of the quadrants: (0,0), (1,0), (0,1), (1,1).
        for q in 0..qy * 2 + qx {
            rank += inside(ox + (q & 1) * half, oy + (q >> 1) * half, half);
        }
        ox += qx * half;
        oy += qy * half;
        side = half;
    }
    rank
}

/// The version-2 order of an atlas' tiles.
#[derive(Clone, Debug)]
pub struct StorageOrder {
    layouts: Vec<TextureLayout>,
    stacked: bool,
    /// Plain layers: the storage position of each layer's first tile.
    layer_start: Vec<u64>,
    /// Canonical index of each layer's first tile.
    first_tile: Vec<u64>,
}

impl StorageOrder {
    /// The order of layers with these layouts (stacked: all equal, interleaved).
    pub fn new(layouts: Vec<TextureLayout>, stacked: bool) -> Self {
        let mut layer_start = Vec::with_capacity(layouts.len());
        let mut at = 0;
        for l in &layouts {
            layer_start.push(at);
            at += l.tile_count();
        }
        let first_tile = layer_start.clone();
        Self { layouts, stacked, layer_start, first_tile }
    }

    /// Tiles at mips coarser than `mip`.
    fn coarser_than(layout: &TextureLayout, mip: u32) -> u64 {
        (mip + 1..layout.mip_count()).map(|m| layout.tile_count_at(m)).sum()
    }

    /// The storage position of tile `(mip, x, y)` of `layer` (which must exist).
    pub fn position(&self, layer: usize, mip: u32, x: u32, y: u32) -> u64 {
        let l = &self.layouts[layer];
        let (tx, ty) = l.tiles_at(mip);
        let along = Self::coarser_than(l, mip) + morton_rank(tx, ty, x, y);
        if self.stacked {
            along * self.layouts.len() as u64 + layer as u64
        } else {
            self.layer_start[layer] + along
        }
    }

    /// The layer whose tile is stored at `position`.
    pub fn layer_at(&self, position: u64) -> usize {
        if self.stacked {
            (position % self.layouts.len().max(1) as u64) as usize
        } else {
            self.layer_start.partition_point(|&s| s <= position).saturating_sub(1)
        }
    }

    /// The canonical index of the tile at each storage position (the inverse of
    /// [`StorageOrder::position`]).
    pub fn sequence(&self) -> Vec<u64> {
        let total: u64 = self.layouts.iter().map(TextureLayout::tile_count).sum();
        let mut out = Vec::with_capacity(total as usize);
        let curve = |l: &TextureLayout, mip: u32| {
            let (tx, ty) = l.tiles_at(mip);
            let mut cells: Vec<(u64, u64)> = (0..ty)
                .flat_map(|y| {
                    (0..tx).map(move |x| (morton(x, y), u64::from(y) * u64::from(tx) + u64::from(x)))
                })
                .collect();
            cells.sort_unstable();
            cells.into_iter().map(|(_, i)| i)
        };
        if self.stacked {
            let Some(l) = self.layouts.first() else { return out };
            for mip in (0..l.mip_count()).rev() {
                let base = l.mip_tile_offset(mip);
                for i in curve(l, mip) {
                    out.extend(self.first_tile.iter().map(|f| f + base + i));
                }
            }
        } else {
            for (li, l) in self.layouts.iter().enumerate() {
                for mip in (0..l.mip_count()).rev() {
                    let base = self.first_tile[li] + l.mip_tile_offset(mip);
                    out.extend(curve(l, mip).map(|i| base + i));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn morton_interleaves() {
        assert_eq!(morton(0, 0), 0);
        assert_eq!(morton(1, 0), 1);
        assert_eq!(morton(0, 1), 2);
        assert_eq!(morton(3, 3), 15);
        assert_eq!(morton(u32::MAX, 0), 0x5555_5555_5555_5555);
    }

    proptest! {
        /// The rank is the place in the sorted order of the grid's Morton codes.
        #[test]
        fn rank_is_the_place_on_the_curve(w in 1u32..40, h in 1u32..40) {
            let mut cells: Vec<(u64, u32, u32)> =
                (0..h).flat_map(|y| (0..w).map(move |x| (morton(x, y), x, y))).collect();
            cells.sort_unstable();
            for (i, &(_, x, y)) in cells.iter().enumerate() {
                prop_assert_eq!(morton_rank(w, h, x, y), i as u64);
            }
        }

        /// `position` and `sequence` are inverses, plain and stacked.
        #[test]
        fn positions_match_the_sequence(
            sizes in proptest::collection::vec((1u32..700, 1u32..700), 1..4),
            stacked in any::<bool>(),
        ) {
            let mut layouts: Vec<TextureLayout> =
                sizes.iter().map(|&(w, h)| TextureLayout::new(w, h, 32, 2).unwrap()).collect();
            if stacked {
                layouts = vec![layouts[0]; layouts.len()];
            }
            let order = StorageOrder::new(layouts.clone(), stacked);
            let seq = order.sequence();
            let total: u64 = layouts.iter().map(TextureLayout::tile_count).sum();
            prop_assert_eq!(seq.len() as u64, total);
            let mut first = 0;
            for (li, l) in layouts.iter().enumerate() {
                for i in 0..l.tile_count() {
                    let (m, x, y) = l.tile_at_index(i).unwrap();
                    let p = order.position(li, m, x, y);
                    prop_assert_eq!(seq[p as usize], first + i);
                    prop_assert_eq!(order.layer_at(p), li);
                }
                first += l.tile_count();
            }
        }
    }

    /// The first positions hold the coarsest mip: one tile per layer.
    #[test]
    fn coarse_mips_come_first() {
        let l = TextureLayout::new(1000, 600, 64, 4).unwrap();
        let order = StorageOrder::new(vec![l, l], true);
        let c = u32::from(l.coarsest_mip());
        assert_eq!(order.position(0, c, 0, 0), 0);
        assert_eq!(order.position(1, c, 0, 0), 1);
        assert_eq!(order.position(0, c - 1, 0, 0), 2);
        let plain = StorageOrder::new(vec![l, l], false);
        assert_eq!(plain.position(1, c, 0, 0), l.tile_count());
    }
}
