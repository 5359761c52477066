//! Fixed-size, aligned blocks of a remote atlas, the unit of a persistent byte cache that
//! can only look entries up by exact key (the browser's Cache Storage).
//!
//! A range read is rounded out to whole blocks: the blocks already cached are used as
//! they are, each run of consecutive missing blocks is one range request, and every
//! fetched block is stored under its own key. A later visit that needs any of those
//! bytes again, in whatever grouping, finds them, which caching the requests themselves
//! would not (the streamer's ranges depend on which tiles were wanted together).
//!
//! Entries are keyed by the object's identity ([`object_identity`]): an atlas replaced
//! on its server gets new keys, so old and new bytes are never mixed.

use std::ops::Range;

/// Block size of the browser's disk tier: small enough that rounding a range out to
/// whole blocks costs little (on average one block a request: 16 KiB blocks cost 13%
/// more bytes on the Blue Marble flyover), large enough that a flyover's few megabytes
/// are a few thousand entries at most.
pub const WEB_BLOCK_BYTES: u64 = 8 << 10;

/// The blocks of one object of known length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockGrid {
    block: u64,
    object_len: u64,
}

/// A block's bytes did not have the length the grid gives it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("block {index} holds {got} bytes, not {want}")]
pub struct BlockLengthError {
    /// The block.
    pub index: u64,
    /// Bytes it held.
    pub got: u64,
    /// Bytes it should hold.
    pub want: u64,
}

impl BlockGrid {
    /// Blocks of `block` bytes (at least 1) over an object of `object_len` bytes.
    pub fn new(block: u64, object_len: u64) -> Self {
        Self { block: block.max(1), object_len }
    }

    /// The block size.
    pub fn block_bytes(&self) -> u64 {
        self.block
    }

    /// The object's length.
    pub fn object_len(&self) -> u64 {
        self.object_len
    }

    /// The indices of the blocks that cover `range` (clamped to the object; empty when
    /// nothing of it lies inside).
    pub fn covering(&self, range: &Range<u64>) -> Range<u64> {
        let end = range.end.min(self.object_len);
        if range.start >= end {
            return 0..0;
        }
        range.start / self.block..end.div_ceil(self.block)
    }

    /// The bytes of block `index` (the last block is short; past the end, empty).
    pub fn bytes_of(&self, index: u64) -> Range<u64> {
        let start = index.saturating_mul(self.block).min(self.object_len);
        start..start.saturating_add(self.block).min(self.object_len)
    }

    /// The byte range of the blocks `blocks`, for one request.
    pub fn bytes_of_run(&self, blocks: &Range<u64>) -> Range<u64> {
        if blocks.is_empty() {
            return 0..0;
        }
        self.bytes_of(blocks.start).start..self.bytes_of(blocks.end - 1).end
    }

    /// The runs of consecutive blocks of `blocks` that `have` marks missing (`have[i]`
    /// is block `blocks.start + i`; blocks past its end count as missing).
    pub fn missing_runs(blocks: &Range<u64>, have: &[bool]) -> Vec<Range<u64>> {
        let mut runs: Vec<Range<u64>> = Vec::new();
        for (i, index) in blocks.clone().enumerate() {
            if have.get(i).copied().unwrap_or(false) {
                continue;
            }
            match runs.last_mut() {
                Some(run) if run.end == index => run.end += 1,
                _ => runs.push(index..index + 1),
            }
        }
        runs
    }

    /// `range`'s bytes cut from the blocks covering it (`blocks[i]` is block
    /// `covering(range).start + i`, each of the length the grid gives it).
    pub fn assemble(&self, range: &Range<u64>, blocks: &[Vec<u8>]) -> Result<Vec<u8>, BlockLengthError> {
        let covering = self.covering(range);
        let end = range.end.min(self.object_len);
        let mut out = Vec::with_capacity(end.saturating_sub(range.start) as usize);
        for (index, data) in covering.zip(blocks) {
            let span = self.bytes_of(index);
            let want = span.end - span.start;
            if data.len() as u64 != want {
                return Err(BlockLengthError { index, got: data.len() as u64, want });
            }
            let from = range.start.max(span.start) - span.start;
            let to = end.min(span.end) - span.start;
            out.extend_from_slice(&data[from as usize..to as usize]);
        }
        if (out.len() as u64) < end.saturating_sub(range.start) {
            let index = self.covering(range).start + blocks.len() as u64;
            let span = self.bytes_of(index);
            return Err(BlockLengthError { index, got: 0, want: span.end - span.start });
        }
        Ok(out)
    }

    /// Splits the bytes of the run `blocks` (as one reply brought them) into its blocks.
    pub fn split_run(&self, blocks: &Range<u64>, data: &[u8]) -> Result<Vec<Vec<u8>>, BlockLengthError> {
        let span = self.bytes_of_run(blocks);
        let want = span.end - span.start;
        if data.len() as u64 != want {
            return Err(BlockLengthError { index: blocks.start, got: data.len() as u64, want });
        }
        Ok(blocks
            .clone()
            .map(|index| {
                let b = self.bytes_of(index);
                data[(b.start - span.start) as usize..(b.end - span.start) as usize].to_vec()
            })
            .collect())
    }
}

/// What identifies one version of a remote object: its `ETag`, else its
/// `Last-Modified` with its length. `None` when the server sends neither, and a
/// persistent cache cannot tell a replaced object from the one it holds.
pub fn object_identity(etag: Option<&str>, last_modified: Option<&str>, object_len: u64) -> Option<String> {
    let clean = |s: &str| s.trim().to_owned();
    match (etag.map(clean).filter(|e| !e.is_empty()), last_modified.map(clean).filter(|m| !m.is_empty())) {
        (Some(etag), _) => Some(format!("etag {etag}")),
        (None, Some(modified)) => Some(format!("modified {modified}, {object_len} bytes")),
        (None, None) => None,
    }
}

/// The cache name holding `url`'s blocks at `identity`: one per version, so a replaced
/// object's cache is dropped whole ([`stale_cache_names`]).
pub fn cache_name(url: &str, identity: &str) -> String {
    format!("{}{identity}", cache_prefix(url))
}

/// The start every cache name of `url` shares, whatever its version.
pub fn cache_prefix(url: &str) -> String {
    format!("tessera-blocks-v1 {url} | ")
}

/// Of `names` (a browser's cache names), those of `url` at another version than
/// `identity`: what a newly opened version deletes.
pub fn stale_cache_names<'a>(names: &'a [String], url: &str, identity: &str) -> Vec<&'a str> {
    let prefix = cache_prefix(url);
    let current = cache_name(url, identity);
    names.iter().filter(|n| n.starts_with(&prefix) && **n != current).map(String::as_str).collect()
}

/// The key of block `index` of `url`: the URL itself with a query parameter (Cache
/// Storage keys are http(s) requests, and it ignores fragments).
pub fn block_key(url: &str, index: u64) -> String {
    let base = url.split('#').next().unwrap_or(url);
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}tessera-block={index}")
}

/// The block index a key of [`block_key`] names, if it is one.
pub fn block_of_key(key: &str) -> Option<u64> {
    let (_, tail) = key.rsplit_once("tessera-block=")?;
    tail.split(['&', '#']).next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn covering_blocks_are_clamped_to_the_object() {
        let g = BlockGrid::new(10, 35);
        assert_eq!(g.covering(&(0..1)), 0..1);
        assert_eq!(g.covering(&(9..11)), 0..2);
        assert_eq!(g.covering(&(10..20)), 1..2);
        assert_eq!(g.covering(&(30..100)), 3..4);
        assert_eq!(g.covering(&(35..40)), 0..0);
        assert_eq!(g.bytes_of(3), 30..35);
        assert_eq!(g.bytes_of(4), 35..35);
        assert_eq!(g.bytes_of_run(&(1..4)), 10..35);
    }

    #[test]
    fn missing_runs_join_neighbours() {
        let runs = BlockGrid::missing_runs(&(4..10), &[true, false, false, true, false, true]);
        assert_eq!(runs, vec![5..7, 8..9]);
        assert_eq!(BlockGrid::missing_runs(&(0..3), &[]), vec![0..3]);
        assert!(BlockGrid::missing_runs(&(0..2), &[true, true]).is_empty());
    }

    #[test]
    fn a_short_block_is_an_error_not_wrong_bytes() {
        let g = BlockGrid::new(4, 10);
        let err = g.assemble(&(2..9), &[vec![0; 4], vec![1; 3]]).unwrap_err();
        assert_eq!(err, BlockLengthError { index: 1, got: 3, want: 4 });
        let err = g.assemble(&(2..9), &[vec![0; 4], vec![1; 4]]).unwrap_err();
        assert_eq!(err.index, 2, "a block left out is named");
        assert!(g.split_run(&(0..2), &[0; 7]).is_err());
    }

    #[test]
    fn identity_prefers_the_etag_and_needs_one_of_the_two() {
        assert_eq!(object_identity(Some("\"abc\""), Some("x"), 9).as_deref(), Some("etag \"abc\""));
        assert_eq!(
            object_identity(None, Some("Sun, 06 Dec 2026 05:00:00 GMT"), 9).as_deref(),
            Some("modified Sun, 06 Dec 2026 05:00:00 GMT, 9 bytes")
        );
        assert_eq!(object_identity(Some(" "), None, 9), None);
        assert_eq!(object_identity(None, None, 9), None);
    }

    #[test]
    fn keys_and_cache_names() {
        assert_eq!(block_key("http://h/a.tsa", 7), "http://h/a.tsa?tessera-block=7");
        assert_eq!(block_key("http://h/a.tsa?sig=1#x", 7), "http://h/a.tsa?sig=1&tessera-block=7");
        assert_eq!(block_of_key("http://h/a.tsa?sig=1&tessera-block=12"), Some(12));
        assert_eq!(block_of_key("http://h/a.tsa"), None);
        let names = vec![
            cache_name("http://h/a.tsa", "etag 1"),
            cache_name("http://h/a.tsa", "etag 2"),
            cache_name("http://h/b.tsa", "etag 1"),
            "other".to_owned(),
        ];
        assert_eq!(stale_cache_names(&names, "http://h/a.tsa", "etag 2"), vec![names[0].as_str()]);
    }

    proptest! {
        /// Any range, any cached subset: fetching the missing runs and assembling gives
        /// exactly the object's bytes.
        #[test]
        fn blocks_reassemble_any_range(
            len in 1u64..300,
            block in 1u64..40,
            a in 0u64..300,
            b in 0u64..300,
            cached in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let object: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let g = BlockGrid::new(block, len);
            let range = a.min(b)..a.max(b).max(a.min(b) + 1);
            let covering = g.covering(&range);
            let have: Vec<bool> = covering.clone().enumerate().map(|(i, _)| cached.get(i).copied().unwrap_or(false)).collect();
            let mut blocks: Vec<Option<Vec<u8>>> = covering
                .clone()
                .zip(&have)
                .map(|(k, h)| h.then(|| { let s = g.bytes_of(k); object[s.start as usize..s.end as usize].to_vec() }))
                .collect();
            for run in BlockGrid::missing_runs(&covering, &have) {
                let span = g.bytes_of_run(&run);
                let parts = g.split_run(&run, &object[span.start as usize..span.end as usize]).unwrap();
                for (k, part) in run.zip(parts) {
                    blocks[(k - covering.start) as usize] = Some(part);
                }
            }
            let blocks: Vec<Vec<u8>> = blocks.into_iter().map(|b| b.unwrap()).collect();
            let got = g.assemble(&range, &blocks).unwrap();
            let end = range.end.min(len);
            let want = if range.start >= end { Vec::new() } else { object[range.start as usize..end as usize].to_vec() };
            prop_assert_eq!(got, want);
        }
    }
}
