//! Decoding the GPU feedback bitset (one bit per atlas-global tile index) into tile ids.
//!
//! Every tile of every layer has an atlas-global index `gidx = first_tile + tile_index`,
//! with layers laid out one after the other in the order of the atlas (mip 0 first,
//! row-major inside a mip, see [`TextureLayout::tile_index`]). The feedback shader sets
//! bit `gidx & 31` of word `gidx >> 5` for every tile it sampled; [`mark`] is its CPU
//! twin, and [`FeedbackLayout::decode`] turns a read-back bitset into tile ids;
//! [`FeedbackLayout::decode_sparse`] does the same for the bitset's non-zero words as
//! `(word index, bits)` pairs, which is what the GPU compaction pass reads back.

use crate::format::atlas::LayerInfo;
use crate::format::tile::{TextureLayout, TileId, TileSet};

/// Geometry of one layer, cached for index arithmetic.
#[derive(Clone, Debug)]
struct LayerGeom {
    layout: TextureLayout,
    /// Atlas-global index of the layer's first tile.
    first: usize,
    /// Layer-local index of the first tile of each mip, plus the layer's tile count at the end.
    mip_offsets: Vec<usize>,
    /// Tiles across and down at each mip.
    tiles: Vec<(u32, u32)>,
}

/// Maps atlas-global tile indices to tile ids and back, for the feedback bitset and
/// the page table (both are indexed by the same global index).
#[derive(Clone, Debug)]
pub struct FeedbackLayout {
    layers: Vec<LayerGeom>,
    /// `layers[i].first`, for binary search.
    firsts: Vec<usize>,
    total: usize,
}

impl FeedbackLayout {
    /// Lays the layers out one after the other, as the atlas does: layer `i` starts
    /// where layer `i - 1` ends.
    pub fn new(layouts: &[TextureLayout]) -> Self {
        let mut layers = Vec::with_capacity(layouts.len());
        let mut first = 0usize;
        for layout in layouts {
            let mips = layout.mip_count();
            let tiles: Vec<(u32, u32)> = (0..mips).map(|m| layout.tiles_at(m)).collect();
            let mut mip_offsets = Vec::with_capacity(tiles.len() + 1);
            let mut off = 0usize;
            mip_offsets.push(0);
            for &(tx, ty) in &tiles {
                // Tile counts of a valid layout stay far below 2^40; usize is 64-bit here.
                off += tx as usize * ty as usize;
                mip_offsets.push(off);
            }
            layers.push(LayerGeom { layout: *layout, first, mip_offsets, tiles });
            first += off;
        }
        let firsts = layers.iter().map(|l| l.first).collect();
        Self { layers, firsts, total: first }
    }

    /// The layout of an atlas's layers. Their `first_tile` values are consecutive
    /// (checked when the atlas is opened), which is what [`FeedbackLayout::new`] assumes.
    pub fn from_layers(layers: &[LayerInfo]) -> Self {
        let layouts: Vec<TextureLayout> = layers.iter().map(|l| l.layout).collect();
        let me = Self::new(&layouts);
        debug_assert!(
            layers.iter().zip(&me.firsts).all(|(l, &f)| l.first_tile as usize == f),
            "atlas layers are not consecutive"
        );
        me
    }

    /// Number of tiles over every layer: the length of the page table.
    pub fn total_tiles(&self) -> usize {
        self.total
    }

    /// Number of `u32` words of the feedback bitset: `ceil(total_tiles / 32)`.
    pub fn words(&self) -> usize {
        self.total.div_ceil(32)
    }

    /// Number of layers.
    pub fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// Layout of layer `layer`.
    pub fn layout(&self, layer: u16) -> Option<&TextureLayout> {
        self.layers.get(usize::from(layer)).map(|l| &l.layout)
    }

    /// Atlas-global index of the first tile of layer `layer`.
    pub fn first_tile(&self, layer: u16) -> Option<usize> {
        self.layers.get(usize::from(layer)).map(|l| l.first)
    }

    /// Tiles across and down at `mip` of `layer`, or `None` outside the layout.
    pub fn tiles_at(&self, layer: u16, mip: u8) -> Option<(u32, u32)> {
        self.layers.get(usize::from(layer))?.tiles.get(usize::from(mip)).copied()
    }

    /// The atlas-global index of `tile`, or `None` when it lies outside every layer.
    pub fn global_index(&self, tile: TileId) -> Option<usize> {
        let l = self.layers.get(usize::from(tile.layer))?;
        let m = usize::from(tile.mip);
        let &(tx, ty) = l.tiles.get(m)?;
        (tile.x < tx && tile.y < ty)
            .then(|| l.first + l.mip_offsets[m] + tile.y as usize * tx as usize + tile.x as usize)
    }

    /// The tile at atlas-global index `gidx`, or `None` past the end.
    pub fn tile_at(&self, gidx: usize) -> Option<TileId> {
        if gidx >= self.total {
            return None;
        }
        // `firsts[0] == 0 <= gidx`, so the partition point is at least 1.
        let li = self.firsts.partition_point(|&f| f <= gidx) - 1;
        let l = &self.layers[li];
        let local = gidx - l.first;
        let m = l.mip_offsets.partition_point(|&o| o <= local) - 1;
        let within = local - l.mip_offsets[m];
        let tx = l.tiles[m].0 as usize;
        Some(TileId::new(li as u16, m as u8, (within % tx) as u32, (within / tx) as u32))
    }

    /// The coarsest mip of `layer`, or `None` for an unknown layer.
    pub fn coarsest_mip(&self, layer: u16) -> Option<u8> {
        self.layout(layer).map(TextureLayout::coarsest_mip)
    }

    /// Sets the bit of `tile` in `words`; returns whether it was newly set (see [`mark`]).
    pub fn mark_tile(&self, words: &mut [u32], tile: TileId) -> bool {
        self.global_index(tile).is_some_and(|g| mark(words, g))
    }

    /// Every tile whose bit is set, in increasing global index (layer by layer, mip 0
    /// first). Zero words are skipped; bits past the last tile are ignored.
    pub fn decode(&self, words: &[u32]) -> Vec<TileId> {
        let mut out = Vec::new();
        let used = words.len().min(self.words());
        for (wi, &word) in words[..used].iter().enumerate() {
            self.push_word(wi, word, &mut out);
        }
        out
    }

    /// The tiles of a compacted bitset: `(word index, word bits)` pairs as the GPU
    /// compaction pass writes them, in any order. Returns exactly what [`decode`]
    /// returns for the bitset holding those words (pairs naming the same word are
    /// OR-ed together; words past the end and bits past the last tile are ignored),
    /// in the same order: increasing global index.
    ///
    /// [`decode`]: FeedbackLayout::decode
    pub fn decode_sparse(&self, pairs: &[(u32, u32)]) -> Vec<TileId> {
        let words = self.words();
        let mut sorted: Vec<(u32, u32)> =
            pairs.iter().copied().filter(|&(wi, bits)| bits != 0 && (wi as usize) < words).collect();
        sorted.sort_unstable_by_key(|&(wi, _)| wi);
        let mut out = Vec::with_capacity(sorted.len() * 2);
        let mut i = 0;
        while i < sorted.len() {
            let (wi, mut bits) = sorted[i];
            i += 1;
            while let Some(&(_, more)) = sorted.get(i).filter(|p| p.0 == wi) {
                bits |= more;
                i += 1;
            }
            self.push_word(wi as usize, bits, &mut out);
        }
        out
    }

    /// Appends the tiles of the set bits of word `wi` (value `word`) to `out`, lowest
    /// bit first; bits past the last tile are ignored.
    fn push_word(&self, wi: usize, word: u32, out: &mut Vec<TileId>) {
        let mut w = word;
        while w != 0 {
            let bit = w.trailing_zeros() as usize;
            w &= w - 1;
            match self.tile_at(wi * 32 + bit) {
                Some(t) => out.push(t),
                // Only the last word can hold bits past the end, and they are higher.
                None => break,
            }
        }
    }

    /// The unique set of `tiles` and all their ancestors up to each layer's coarsest
    /// mip, sorted coarse first ([`TileId`]'s order). Tiles outside the layout are dropped.
    pub fn with_ancestors(&self, tiles: &[TileId]) -> Vec<TileId> {
        let mut seen = TileSet::with_capacity_and_hasher(tiles.len() * 2, Default::default());
        for &t in tiles {
            let Some(coarsest) = self.coarsest_mip(t.layer) else { continue };
            if self.global_index(t).is_none() {
                continue;
            }
            let mut cur = Some(t);
            while let Some(c) = cur {
                // Once a tile is known, so are all its ancestors.
                if !seen.insert(c) {
                    break;
                }
                cur = c.parent(coarsest);
            }
        }
        let mut out: Vec<TileId> = seen.into_iter().collect();
        out.sort_unstable_by_key(|t| t.order_key());
        out
    }
}

/// Sets bit `gidx` of the bitset `words` the way the feedback shader does: read first,
/// write only when the bit is clear (cheap on contended words). Returns whether the bit
/// was newly set; indices past the end of `words` are ignored.
pub fn mark(words: &mut [u32], gidx: usize) -> bool {
    let bit = 1u32 << (gidx & 31);
    match words.get_mut(gidx >> 5) {
        Some(w) if *w & bit == 0 => {
            *w |= bit;
            true
        }
        _ => false,
    }
}

/// The CPU twin of the GPU compaction pass (`shaders/feedback_compact.wgsl`): the
/// `(word index, bits)` pairs of the non-zero words of `words`, by increasing index.
/// The GPU writes the same set in any order; [`FeedbackLayout::decode_sparse`] reads
/// either.
pub fn compact(words: &[u32]) -> Vec<(u32, u32)> {
    words.iter().enumerate().filter(|(_, w)| **w != 0).map(|(i, w)| (i as u32, *w)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn layouts(sizes: &[(u32, u32)], tile: u32) -> Vec<TextureLayout> {
        sizes.iter().map(|&(w, h)| TextureLayout::new(w, h, tile, 4).unwrap()).collect()
    }

    #[test]
    fn index_matches_atlas_order() {
        let ls = layouts(&[(1000, 300), (64, 64), (17, 900)], 64);
        let f = FeedbackLayout::new(&ls);
        let mut g = 0usize;
        for (li, l) in ls.iter().enumerate() {
            assert_eq!(f.first_tile(li as u16), Some(g));
            for (i, t) in l.tiles(li as u16).enumerate() {
                assert_eq!(l.tile_index(u32::from(t.mip), t.x, t.y), Some(i as u64));
                assert_eq!(f.global_index(t), Some(g));
                assert_eq!(f.tile_at(g), Some(t));
                g += 1;
            }
        }
        assert_eq!(f.total_tiles(), g);
        assert_eq!(f.words(), g.div_ceil(32));
        assert_eq!(f.tile_at(g), None);
        assert_eq!(f.global_index(TileId::new(3, 0, 0, 0)), None);
        assert_eq!(f.global_index(TileId::new(0, 0, 16, 0)), None);
        assert_eq!(f.global_index(TileId::new(0, 9, 0, 0)), None);
    }

    #[test]
    fn mark_checks_before_setting_and_ignores_out_of_range() {
        let mut w = [0u32; 2];
        assert!(mark(&mut w, 33));
        assert!(!mark(&mut w, 33));
        assert!(!mark(&mut w, 64));
        assert_eq!(w, [0, 2]);
    }

    #[test]
    fn decode_ignores_bits_past_the_end() {
        let f = FeedbackLayout::new(&layouts(&[(100, 100)], 64));
        // 4 + 1 tiles: bits 5.. are padding.
        assert_eq!(f.total_tiles(), 5);
        let tiles = f.decode(&[u32::MAX, u32::MAX]);
        assert_eq!(tiles.len(), 5);
        assert_eq!(tiles[4], TileId::new(0, 1, 0, 0));
        let empty = FeedbackLayout::new(&[]);
        assert_eq!(empty.words(), 0);
        assert!(empty.decode(&[1]).is_empty());
        assert!(empty.with_ancestors(&[TileId::new(0, 0, 0, 0)]).is_empty());
    }

    #[test]
    fn ancestors_of_one_tile() {
        let f = FeedbackLayout::new(&layouts(&[(64, 64), (1024, 512)], 128));
        let got =
            f.with_ancestors(&[TileId::new(1, 0, 5, 3), TileId::new(1, 0, 4, 2), TileId::new(0, 0, 0, 0)]);
        let want = vec![
            TileId::new(1, 3, 0, 0),
            TileId::new(1, 2, 1, 0),
            TileId::new(1, 1, 2, 1),
            TileId::new(0, 0, 0, 0),
            TileId::new(1, 0, 4, 2),
            TileId::new(1, 0, 5, 3),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn decode_sparse_matches_decode() {
        let f = FeedbackLayout::new(&layouts(&[(100, 100), (300, 64)], 32));
        let mut words = vec![0u32; f.words()];
        words[0] = 0b1011;
        words[1] = 1 << 31;
        let last = f.words() - 1;
        words[last] = u32::MAX;
        let want = f.decode(&words);
        // Out of order, a duplicate word split in two, a zero word and one past the end.
        let pairs = [(last as u32, u32::MAX), (1, 1 << 31), (0, 0b0011), (0, 0b1000), (2, 0), (9999, 7)];
        assert_eq!(f.decode_sparse(&pairs), want);
        assert!(f.decode_sparse(&[]).is_empty());
        assert!(FeedbackLayout::new(&[]).decode_sparse(&[(0, 1)]).is_empty());
    }

    fn sizes() -> impl Strategy<Value = Vec<(u32, u32)>> {
        proptest::collection::vec((1u32..700, 1u32..700), 1..4)
    }

    proptest! {
        #[test]
        fn mark_decode_round_trip(sizes in sizes(), picks in proptest::collection::vec(any::<usize>(), 0..200)) {
            let f = FeedbackLayout::new(&layouts(&sizes, 32));
            let mut words = vec![0u32; f.words()];
            let mut want: Vec<TileId> = Vec::new();
            for p in picks {
                let t = f.tile_at(p % f.total_tiles()).unwrap();
                if f.mark_tile(&mut words, t) {
                    want.push(t);
                }
            }
            want.sort_by_key(|t| f.global_index(*t));
            prop_assert_eq!(f.decode(&words), want);
        }

        #[test]
        fn decode_sparse_equals_decode(
            sizes in sizes(),
            picks in proptest::collection::vec((any::<usize>(), any::<u32>()), 0..200),
        ) {
            let f = FeedbackLayout::new(&layouts(&sizes, 32));
            // Random words (including padding bits of the last word) as pairs in random
            // order, some words split over two pairs.
            let mut words = vec![0u32; f.words()];
            let mut pairs = Vec::new();
            for (p, bits) in picks {
                let wi = p % f.words();
                words[wi] |= bits;
                if p % 3 == 0 {
                    pairs.push((wi as u32, bits & 0xffff));
                    pairs.push((wi as u32, bits & !0xffff));
                } else {
                    pairs.push((wi as u32, bits));
                }
            }
            prop_assert_eq!(f.decode_sparse(&pairs), f.decode(&words));
        }

        #[test]
        fn ancestors_complete_and_unique(sizes in sizes(), picks in proptest::collection::vec(any::<usize>(), 0..100)) {
            let f = FeedbackLayout::new(&layouts(&sizes, 32));
            let tiles: Vec<TileId> = picks.iter().map(|p| f.tile_at(p % f.total_tiles()).unwrap()).collect();
            let got = f.with_ancestors(&tiles);
            // Sorted strictly (hence unique) coarse first.
            prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
            let set: HashSet<TileId> = got.iter().copied().collect();
            // Brute force: the closure of the input under `parent`.
            let mut want = HashSet::new();
            for &t in &tiles {
                let c = f.coarsest_mip(t.layer).unwrap();
                let mut cur = Some(t);
                while let Some(x) = cur {
                    prop_assert!(f.global_index(x).is_some());
                    want.insert(x);
                    cur = x.parent(c);
                }
            }
            prop_assert_eq!(set, want);
        }
    }
}
