//! A 524288² virtual texture (4096² tiles at mip 0, 13 mips, 22,369,621 tiles): the
//! layout, feedback and page-table arithmetic against brute force on sampled tiles,
//! and the sizes of the buffers a renderer allocates for it. GPU-free.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use proptest::prelude::*;
use tessera_core::TextureLayout;
use tessera_core::TileId;
use tessera_core::stream::feedback::FeedbackLayout;
use tessera_core::stream::page_table::{FALLBACK_DEPTH, PageTable, SlotCoord, encode_entry};

const SIDE: u32 = 524_288;

fn layout() -> TextureLayout {
    TextureLayout::new(SIDE, SIDE, 128, 4).unwrap()
}

/// Tiles of every mip of a 4096²-tile square, summed by hand: (4^13 − 1) / 3.
const TILES: u64 = 22_369_621;

/// Index of `t` counted the long way: every tile of every finer mip, then the rows above.
fn brute_index(t: TileId) -> usize {
    let finer: u64 = (0..u32::from(t.mip)).map(|m| (4096u64 >> m) * (4096u64 >> m)).sum();
    (finer + u64::from(t.y) * (4096u64 >> t.mip) + u64::from(t.x)) as usize
}

fn any_tile() -> impl Strategy<Value = TileId> {
    (0u8..13).prop_flat_map(|mip| {
        let n = 4096u32 >> mip;
        (Just(mip), 0..n, 0..n).prop_map(|(mip, x, y)| TileId::new(0, mip, x, y))
    })
}

#[test]
fn sizes_of_a_524288_squared_texture() {
    let tl = layout();
    assert_eq!(tl.mip_count(), 13);
    assert_eq!(tl.tile_count(), TILES);
    let fb = FeedbackLayout::new(&[tl]);
    assert_eq!(fb.words(), TILES.div_ceil(32) as usize, "one feedback bit per tile");
    // The page table is one u32 per tile: 89.5 MB, inside wgpu's default
    // `max_storage_buffer_binding_size` (128 MiB), which the pool planner checks.
    let bytes = TILES * 4;
    assert_eq!(bytes, 89_478_484);
    assert!(bytes <= 128 << 20);
    let coarsest = TileId::new(0, 12, 0, 0);
    assert_eq!(fb.global_index(coarsest), Some(TILES as usize - 1));
    assert_eq!(fb.global_index(TileId::new(0, 0, 4096, 0)), None, "past the right edge");
    assert_eq!(fb.global_index(TileId::new(0, 13, 0, 0)), None, "past the coarsest mip");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Global index, its inverse and the parent chain agree with counting by hand.
    #[test]
    fn index_arithmetic_matches_brute_force(t in any_tile()) {
        let fb = FeedbackLayout::new(&[layout()]);
        let g = fb.global_index(t).unwrap();
        prop_assert_eq!(g, brute_index(t));
        prop_assert_eq!(fb.tile_at(g), Some(t));
        if let Some(p) = t.parent(12) {
            prop_assert_eq!(p, TileId::new(0, t.mip + 1, t.x / 2, t.y / 2));
        } else {
            prop_assert_eq!(t.mip, 12);
        }
    }
}

/// The page-table mirror of all 22 M tiles: a few resident tiles at several mips, and
/// every sampled tile resolves to its nearest resident ancestor, found by walking up
/// (its own entry holds it when it is at most `FALLBACK_DEPTH` mips up).
#[test]
fn page_table_fallback_matches_brute_force_on_sampled_tiles() {
    let tl = layout();
    let mut pt = PageTable::new(&[tl]);
    assert_eq!(pt.len() as u64, TILES);
    let mut slots: HashMap<TileId, SlotCoord> = HashMap::new();
    let resident = [
        TileId::new(0, 12, 0, 0),
        TileId::new(0, 9, 3, 5),
        TileId::new(0, 6, 40, 17),
        TileId::new(0, 0, 4095, 4095),
        TileId::new(0, 0, 2600, 1111),
        TileId::new(0, 3, 325, 138),
    ];
    for (i, &t) in resident.iter().enumerate() {
        let slot = SlotCoord::new(i as u16, 1);
        assert!(pt.set_resident(t, slot));
        slots.insert(t, slot);
    }
    // The nearest resident ancestor (what the shader finds) and how many mips up it is.
    let brute = |slots: &HashMap<TileId, SlotCoord>, t: TileId| {
        let mut cur = Some(t);
        while let Some(c) = cur {
            if let Some(&s) = slots.get(&c) {
                return (encode_entry(s, c.mip), c.mip - t.mip);
            }
            cur = c.parent(12);
        }
        (0, 0)
    };
    let fb = FeedbackLayout::new(&[tl]);
    // Deterministic samples: near each resident tile's subtree, and spread everywhere.
    let mut samples: Vec<TileId> = Vec::new();
    for &t in &resident {
        let scale = 1u32 << t.mip;
        for (dx, dy) in [(0, 0), (scale - 1, scale - 1), (scale / 2, 0), (scale, scale)] {
            let (x, y) = (t.x * scale + dx, t.y * scale + dy);
            if x < 4096 && y < 4096 {
                samples.push(TileId::new(0, 0, x, y));
            }
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mip = (state % 13) as u8;
        let n = 4096u64 >> mip;
        samples.push(TileId::new(0, mip, ((state >> 8) % n) as u32, ((state >> 32) % n) as u32));
    }
    for t in samples {
        let g = fb.global_index(t).unwrap();
        let (want, up) = brute(&slots, t);
        assert_eq!(pt.lookup(t), want, "{t}");
        // The table itself holds fallbacks only FALLBACK_DEPTH mips deep.
        assert_eq!(pt.entries()[g], if up <= FALLBACK_DEPTH { want } else { 0 }, "entry of {t}");
    }
    // Evicting the fine tile falls back to its ancestor again.
    let fine = TileId::new(0, 0, 2600, 1111);
    assert!(pt.set_evicted(fine));
    slots.remove(&fine);
    assert_eq!(pt.lookup(fine), brute(&slots, fine).0);
    assert_eq!(pt.entries()[fb.global_index(fine).unwrap()], encode_entry(SlotCoord::new(5, 1), 3));
}
