//! The tiles that the last few feedback readbacks asked for, kept incrementally.
//!
//! With a feedback stride of `s`, each frame only one pixel of each `s × s` block writes
//! feedback, so a tile covering few pixels appears in some frames only: the streamer
//! treats as needed the union of the last `s²` readbacks. Rebuilding that union every
//! frame (concatenating `s²` lists, sorting, deduplicating) cost `s²` times a readback,
//! so the feedback's CPU time rose with the stride (issue 45: 0.58 ms at stride 8
//! against 0.15 ms at stride 2 on the H200) where it should not. [`FeedbackWindow`]
//! counts how many readbacks of the window hold each tile: a readback coming in and the
//! oldest going out cost one counter update per tile they hold, and the sorted union is
//! rebuilt only when a tile enters or leaves it. The streamer reads the union from here
//! (what the view wants) instead of keeping a copy.

use std::collections::VecDeque;

use crate::format::tile::{TileId, TileMap};

/// The union of the last `window` readbacks, kept incrementally; see the module docs.
#[derive(Debug, Default)]
pub struct FeedbackWindow {
    frames: VecDeque<Vec<TileId>>,
    /// Readbacks of the window holding each tile of the union (never 0).
    counts: TileMap<u32>,
    /// The union in [`TileId::order_key`] order.
    union: Vec<TileId>,
    /// Counter updates and union entries rebuilt since creation (what a push costs).
    work: u64,
}

impl FeedbackWindow {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a readback's tiles (each once) and drops the oldest readbacks past `window`
    /// (at least 1); the union is rebuilt when a tile entered or left it.
    pub fn push(&mut self, tiles: Vec<TileId>, window: usize) {
        let mut changed = false;
        for &t in &tiles {
            let c = self.counts.entry(t).or_insert(0);
            *c += 1;
            changed |= *c == 1;
        }
        self.work += tiles.len() as u64;
        self.frames.push_back(tiles);
        while self.frames.len() > window.max(1) {
            let Some(old) = self.frames.pop_front() else { break };
            self.work += old.len() as u64;
            for t in old {
                if let Some(c) = self.counts.get_mut(&t) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&t);
                        changed = true;
                    }
                }
            }
        }
        if changed {
            self.union.clear();
            self.union.extend(self.counts.keys().copied());
            self.union.sort_unstable_by_key(|t| t.order_key());
            self.work += self.union.len() as u64;
        }
    }

    /// The tiles of the window's readbacks, each once, in [`TileId::order_key`] order.
    pub fn tiles(&self) -> &[TileId] {
        &self.union
    }

    /// Readbacks held.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no readback is held.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Tile updates done so far (counters and rebuilt union entries): proportional to
    /// what came in and went out, not to the window's length.
    pub fn work(&self) -> u64 {
        self.work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// What the streamer did before: the union rebuilt from every readback of the window.
    fn naive(frames: &VecDeque<Vec<TileId>>) -> Vec<TileId> {
        let mut all: Vec<TileId> = frames.iter().flatten().copied().collect();
        all.sort_unstable_by_key(|t| t.order_key());
        all.dedup();
        all
    }

    fn tile(i: u32) -> TileId {
        TileId::new((i % 3) as u16, (i % 5) as u8, i % 7, i / 7)
    }

    proptest! {
        #[test]
        fn the_window_is_the_union_of_its_readbacks(
            readbacks in proptest::collection::vec(proptest::collection::btree_set(0u32..60, 0..25), 1..40),
            window in 1usize..10,
        ) {
            let mut w = FeedbackWindow::new();
            let mut model = VecDeque::new();
            for r in readbacks {
                let tiles: Vec<TileId> = r.into_iter().map(tile).collect();
                model.push_back(tiles.clone());
                while model.len() > window {
                    model.pop_front();
                }
                w.push(tiles, window);
                prop_assert_eq!(w.tiles(), &naive(&model)[..]);
                prop_assert_eq!(w.len(), model.len());
            }
        }
    }

    /// A steady view read back at stride 8 (a window of 64 readbacks): each frame costs
    /// what its readback and the one leaving hold, not 64 readbacks' worth as before.
    #[test]
    fn a_frame_costs_its_readback_not_the_window() {
        let view: Vec<TileId> = (0..2000).map(tile).collect();
        for window in [4usize, 64] {
            let mut w = FeedbackWindow::new();
            for _ in 0..window {
                w.push(view.clone(), window);
            }
            let before = w.work();
            for _ in 0..100 {
                w.push(view.clone(), window);
                assert_eq!(w.tiles().len(), view.len());
            }
            let per_frame = (w.work() - before) / 100;
            // In and out, the union unchanged: no rebuild.
            assert_eq!(per_frame, 2 * view.len() as u64, "window {window}");
        }
    }
}
