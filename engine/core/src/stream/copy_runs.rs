//! Runs of tile copies that one buffer-to-texture copy can do.
//!
//! A tile's bytes in staging memory are its rows at a fixed pitch. When the next tile
//! to copy starts exactly where the previous one's rows end (the same buffer, offset
//! `+ span`) and goes into the slot just below it (same column, next row), the two are
//! one image of twice the height: one copy of `s × 2s` texels moves both. A burst of
//! uploads into free slots handed out down the columns ([`Residency`] allocates so,
//! and orders a frame's uploads by where their bytes are staged) then needs one copy
//! per column run instead of one per tile; each copy recorded costs validation on the
//! CPU and a command on the GPU.
//!
//! [`Residency`]: crate::stream::residency::Residency

use std::ops::Range;

use crate::stream::page_table::SlotCoord;

/// One tile to copy: where it goes and where its bytes start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileCopy {
    /// The destination slot.
    pub slot: SlotCoord,
    /// Which source buffer holds the bytes (any identifier the caller compares by).
    pub source: usize,
    /// Offset of the tile's first row in the source.
    pub offset: u64,
}

/// Splits `copies`, in their order, into maximal runs that one copy can do: each next
/// tile in the same source at `offset + span` and in the slot below the previous one.
/// `span` is the bytes a tile's rows take in the source (pitch × rows); a source that
/// lays tiles out at a larger stride never forms runs. The ranges cover `copies` in
/// order, each index once; none is empty.
pub fn vertical_runs(copies: &[TileCopy], span: u64) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=copies.len() {
        let joins = copies.get(i).is_some_and(|c| {
            let prev = &copies[i - 1];
            span > 0
                && c.source == prev.source
                && prev.offset.checked_add(span) == Some(c.offset)
                && c.slot.x == prev.slot.x
                && prev.slot.y.checked_add(1) == Some(c.slot.y)
        });
        if !joins {
            runs.push(start..i);
            start = i;
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn copy(x: u16, y: u16, source: usize, offset: u64) -> TileCopy {
        TileCopy { slot: SlotCoord::new(x, y), source, offset }
    }

    #[test]
    fn a_column_of_contiguous_tiles_is_one_run() {
        let copies: Vec<_> = (0..5).map(|i| copy(3, 10 + i, 0, 100 + u64::from(i) * 64)).collect();
        assert_eq!(vertical_runs(&copies, 64), vec![0..5]);
    }

    #[test]
    fn a_gap_in_slots_source_or_bytes_starts_a_new_run() {
        let copies = [
            copy(0, 0, 0, 0),
            copy(0, 1, 0, 64),
            copy(0, 3, 0, 128), // slot gap
            copy(0, 4, 1, 192), // other buffer
            copy(0, 5, 1, 256),
            copy(0, 6, 1, 384), // byte gap
            copy(1, 7, 1, 448), // other column
        ];
        assert_eq!(vertical_runs(&copies, 64), vec![0..2, 2..3, 3..5, 5..6, 6..7]);
    }

    #[test]
    fn nothing_to_copy_is_no_run_and_a_zero_span_never_joins() {
        assert!(vertical_runs(&[], 64).is_empty());
        let copies = [copy(0, 0, 0, 0), copy(0, 1, 0, 0)];
        assert_eq!(vertical_runs(&copies, 0), vec![0..1, 1..2]);
    }

    proptest! {
        /// Runs cover every copy once, in order; inside a run each tile continues the
        /// previous one; between runs it does not (maximal).
        #[test]
        fn runs_partition_and_are_maximal(
            raw in proptest::collection::vec((0u16..3, 0u16..6, 0usize..2, 0u64..8), 0..40),
        ) {
            let span = 16;
            let copies: Vec<_> = raw.iter().map(|&(x, y, s, o)| copy(x, y, s, o * span)).collect();
            let runs = vertical_runs(&copies, span);
            let continues = |a: &TileCopy, b: &TileCopy| {
                a.source == b.source && a.offset + span == b.offset
                    && a.slot.x == b.slot.x && a.slot.y + 1 == b.slot.y
            };
            let mut next = 0;
            for r in &runs {
                prop_assert_eq!(r.start, next);
                prop_assert!(r.end > r.start);
                for i in r.start + 1..r.end {
                    prop_assert!(continues(&copies[i - 1], &copies[i]));
                }
                if r.end < copies.len() {
                    prop_assert!(!continues(&copies[r.end - 1], &copies[r.end]));
                }
                next = r.end;
            }
            prop_assert_eq!(next, copies.len());
        }
    }
}
