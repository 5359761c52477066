//! How an atlas is read with range requests, with no network code: how much to read at
//! open, and which neighbouring blobs share one request. The remote store (the `remote`
//! feature's URLs) and the ranged byte cache ([`ranged`](super::ranged)) both follow
//! these rules.

use std::ops::Range;

/// Bytes read from the start of the object when it is opened: the header, the layer
/// table and, for an atlas of up to about 2,700 tiles, the whole index; a larger index
/// takes one more request. Kept small so a slow link opens within the request timeout
/// (4 s at 16 KiB/s).
pub const OPEN_PREFIX: u64 = 64 << 10;

/// The longest range one request asks for when neighbouring blobs are coalesced.
pub const MAX_RANGE_BYTES: u64 = 1 << 20;

/// Neighbouring blobs at most this far apart share a request (the gap is read and
/// thrown away: cheaper than another round trip).
pub const MAX_GAP_BYTES: u64 = 64 << 10;

/// Groups the blobs `(offset, length)` into ranges to request: sorted by offset, a blob
/// joins the current range when it starts at most [`MAX_GAP_BYTES`] after its end and
/// the range stays within [`MAX_RANGE_BYTES`] (a larger blob gets a range of its own;
/// blobs shared by several tiles, at one offset, are read once). Returns each range
/// and the indices (into `blobs`) of the blobs it holds.
pub fn coalesce(blobs: &[(u64, u32)]) -> Vec<(Range<u64>, Vec<usize>)> {
    let mut order: Vec<usize> = (0..blobs.len()).collect();
    order.sort_by_key(|&i| (blobs[i].0, blobs[i].1));
    let mut out: Vec<(Range<u64>, Vec<usize>)> = Vec::new();
    for i in order {
        let (start, len) = blobs[i];
        let end = start + u64::from(len);
        match out.last_mut() {
            Some((r, members))
                if start <= r.end.saturating_add(MAX_GAP_BYTES)
                    && end.max(r.end) - r.start <= MAX_RANGE_BYTES =>
            {
                r.end = r.end.max(end);
                members.push(i);
            }
            _ => out.push((start..end, vec![i])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn neighbouring_blobs_share_ranges_of_at_most_a_mebibyte() {
        // Two runs of adjacent 10 KiB blobs (given out of order), a far one, a shared one.
        let k = 10 << 10;
        let blobs = [(2 * k, k as u32), (0, k as u32), (k, k as u32), (10 << 20, 100), (k, k as u32)];
        let r = coalesce(&blobs);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[0].0, 0..3 * k);
        assert_eq!(r[0].1.len(), 4, "the shared blob rides along");
        assert_eq!(r[1], ((10 << 20)..(10 << 20) + 100, vec![3]));
        // A gap above the limit splits.
        let r = coalesce(&[(0, 16), (16 + MAX_GAP_BYTES + 1, 16)]);
        assert_eq!(r.len(), 2);
        // No range exceeds 1 MiB; a blob larger than that stands alone.
        let many: Vec<(u64, u32)> = (0..300).map(|i| (i * 16384, 16000)).collect();
        for (range, _) in coalesce(&many) {
            assert!(range.end - range.start <= MAX_RANGE_BYTES);
        }
        assert_eq!(coalesce(&many).iter().map(|(_, m)| m.len()).sum::<usize>(), 300);
        let big = coalesce(&[(0, 2 << 20), (2 << 20, 16)]);
        assert_eq!(big.len(), 2);
        assert!(coalesce(&[]).is_empty());
    }
}
