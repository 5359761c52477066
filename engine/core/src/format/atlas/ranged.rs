//! A bounded, sparse cache of byte ranges of one atlas object whose bytes arrive from
//! elsewhere: the store behind [`Atlas::open_ranged`], read synchronously by the
//! ordinary parsers and filled by an asynchronous driver (in the browser, `fetch()` with
//! `Range` headers), so no read ever blocks.
//!
//! A read of bytes not held fails with [`AtlasError::NeedBytes`], which names the range
//! to fetch; the driver fetches it, [`RangedBytes::insert`]s it and tries again:
//!
//! 1. Fetch [`first_range`] (its response's `Content-Range` also gives the object's
//!    length), make a [`RangedBytes`] and insert the bytes.
//! 2. Loop: [`Atlas::open_ranged`]; on `NeedBytes` fetch [`AtlasError::need_bytes`] and
//!    insert it. A small atlas opens after the first fetch, a large version-1 index takes
//!    one more.
//! 3. Before a [`Streamer`](crate::stream::streamer::Streamer) starts: fetch
//!    [`Atlas::ranges_to_fetch`] of [`Atlas::coarsest_tiles`] (loop until it is empty:
//!    index pages first, then blobs).
//! 4. Per loader job ([`LoaderThreads::take_job`](crate::stream::loader::LoaderThreads::take_job)):
//!    fetch [`ExternalJob::fetch_ranges`](crate::stream::loader::ExternalJob::fetch_ranges)
//!    until it is empty, then run the job.
//!
//! Every fetch the helpers ask for is coalesced by the remote store's rules
//! ([`ranges::coalesce`](super::ranges::coalesce)). The bytes at the head of the object
//! (header, layer table, a version-1 index, a version-2 root directory) are pinned
//! once [`Atlas::open_ranged`] knows where they end; the others (tile blobs, index
//! pages, which the atlas keeps parsed in its own page cache) are evicted least
//! recently used first beyond the byte budget.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use super::ranges::OPEN_PREFIX;
#[cfg(doc)]
use super::{Atlas, AtlasError};

/// A byte budget for a [`RangedBytes`] when the embedder has no better figure: the
/// blobs of about 50 loader jobs of 64 UASTC tiles of 136² texels, or 250 of ETC1S ones.
pub const DEFAULT_RANGED_BUDGET: u64 = 64 << 20;

/// The first range to fetch of an atlas of `object_len` bytes (`None`: not known yet,
/// before the first response): its first [`OPEN_PREFIX`] bytes, which hold the header,
/// the layer table and, for up to about 2,700 tiles, the whole index.
pub fn first_range(object_len: Option<u64>) -> Range<u64> {
    0..object_len.map_or(OPEN_PREFIX, |n| n.min(OPEN_PREFIX))
}

/// Why [`RangedBytes::insert`] refused bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangedError {
    /// The bytes reach past the end of the object (a response for another object, or
    /// the wrong offset).
    #[error("{len} bytes at offset {offset} reach past the end of the {object_len}-byte object")]
    OutOfBounds {
        /// Where the bytes were to go.
        offset: u64,
        /// How many there were.
        len: u64,
        /// The object's length.
        object_len: u64,
    },
}

/// Counters of a [`RangedBytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangedStats {
    /// Bytes held now, pinned ones included.
    pub bytes_held: u64,
    /// Bytes held in the pinned head of the object.
    pub pinned_bytes: u64,
    /// Calls to [`RangedBytes::insert`] that kept bytes (one per fetched range).
    pub inserts: u64,
    /// Bytes inserted.
    pub inserted_bytes: u64,
    /// Bytes evicted beyond the budget.
    pub evicted_bytes: u64,
    /// Reads that found bytes missing.
    pub misses: u64,
}

/// A sparse cache of byte ranges of one object of known length, within a byte budget.
///
/// Pieces of any size are inserted at any offset (a later insert replaces the bytes it
/// overlaps); a read may span several pieces. Beyond the budget, the least recently
/// used pieces are evicted, never those in the pinned head of the object ([`Self::pin_prefix`]).
/// Shared between the [`Atlas`] that reads it and the driver that fills it.
pub struct RangedBytes {
    len: u64,
    budget: u64,
    inner: Mutex<Pieces>,
    /// What the embedder's fetcher reports of its network ([`Self::report_network`]).
    network: Mutex<Option<super::NetworkStats>>,
}

/// Everything behind the mutex. Pieces never overlap, and none straddles `pinned`.
#[derive(Default)]
struct Pieces {
    /// Start offset → piece.
    map: BTreeMap<u64, Piece>,
    /// `(last use, start)` of every unpinned piece: the eviction order.
    lru: BTreeSet<(u64, u64)>,
    /// Bytes `[0, pinned)` are never evicted.
    pinned: u64,
    held: u64,
    held_pinned: u64,
    tick: u64,
    stats: RangedStats,
}

struct Piece {
    bytes: Vec<u8>,
    used: u64,
}

impl Piece {
    fn end(&self, start: u64) -> u64 {
        start + self.bytes.len() as u64
    }
}

impl RangedBytes {
    /// An empty cache of the object of `object_len` bytes, evicting beyond
    /// `budget_bytes` (pinned bytes not counted). The object's first [`OPEN_PREFIX`]
    /// bytes are pinned from the start, so the first fetch survives until the atlas is
    /// opened. Give a budget of at least a few MiB: a job's fetched blobs must fit in it
    /// until the job has run (a piece larger than the whole budget is not kept).
    pub fn new(object_len: u64, budget_bytes: u64) -> Self {
        let pieces = Pieces { pinned: object_len.min(OPEN_PREFIX), ..Pieces::default() };
        Self { len: object_len, budget: budget_bytes, inner: Mutex::new(pieces), network: Mutex::new(None) }
    }

    /// Records what the fetcher that fills this cache has done (requests, bytes,
    /// latencies, its own disk tier): [`Atlas::network_stats`] then reports it instead of
    /// counting inserts, which know nothing of requests, latencies or caches.
    pub fn report_network(&self, stats: super::NetworkStats) {
        *self.network.lock().unwrap_or_else(|e| e.into_inner()) = Some(stats);
    }

    /// The figures last given to [`Self::report_network`].
    pub fn reported_network(&self) -> Option<super::NetworkStats> {
        *self.network.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object's length in bytes.
    pub fn object_len(&self) -> u64 {
        self.len
    }

    /// The budget for unpinned bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes held now, pinned ones included.
    pub fn bytes_held(&self) -> u64 {
        self.lock().held
    }

    /// The counters.
    pub fn stats(&self) -> RangedStats {
        let p = self.lock();
        RangedStats { bytes_held: p.held, pinned_bytes: p.held_pinned, ..p.stats }
    }

    /// Where the pinned head of the object ends (bytes before it are never evicted).
    pub fn pinned_prefix(&self) -> u64 {
        self.lock().pinned
    }

    fn lock(&self) -> MutexGuard<'_, Pieces> {
        // Every critical section leaves the pieces consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pins the object's first `end` bytes (never shrinks the pinned head): bytes held
    /// there, and bytes inserted there later, are never evicted.
    pub fn pin_prefix(&self, end: u64) {
        let end = end.min(self.len);
        let mut p = self.lock();
        if end <= p.pinned {
            return;
        }
        let old = p.pinned;
        p.pinned = end;
        // Pieces in [old, end) move to the pinned side; one straddling `end` is split.
        let starts: Vec<u64> = p.map.range(old..end).map(|(&s, _)| s).collect();
        for start in starts {
            let Some(piece) = p.map.remove(&start) else { continue };
            p.lru.remove(&(piece.used, start));
            p.held -= piece.bytes.len() as u64;
            p.put(start, piece.bytes, piece.used);
        }
    }

    /// Keeps `bytes` as the object's bytes at `offset` (replacing any held there), then
    /// evicts least recently used unpinned pieces beyond the budget. Bytes past the
    /// object's end are refused.
    pub fn insert(&self, offset: u64, bytes: impl Into<Vec<u8>>) -> Result<(), RangedError> {
        let mut bytes = bytes.into();
        let len = bytes.len() as u64;
        let end = offset.checked_add(len).filter(|&e| e <= self.len);
        let Some(mut end) = end else {
            return Err(RangedError::OutOfBounds { offset, len, object_len: self.len });
        };
        let mut p = self.lock();
        if end.saturating_sub(offset.max(p.pinned)) > self.budget {
            // Larger than the whole budget: only its pinned part is kept, and nothing
            // is evicted for the rest.
            tracing::warn!(
                offset,
                len,
                budget = self.budget,
                "a fetched range larger than the ranged store's budget is not kept"
            );
            end = end.min(p.pinned.max(offset));
            bytes.truncate((end - offset) as usize);
        }
        if bytes.is_empty() {
            return Ok(());
        }
        p.cut(offset, end);
        p.tick += 1;
        let tick = p.tick;
        p.put(offset, bytes, tick);
        p.stats.inserts += 1;
        p.stats.inserted_bytes += end - offset;
        p.evict(self.budget);
        Ok(())
    }

    /// The `len` bytes at `offset`, when every one of them is held (they may span
    /// several inserted pieces); `None` otherwise. Marks the pieces read as used.
    pub fn get(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        if self.missing(offset, len).is_some() {
            return None;
        }
        let mut out = vec![0u8; usize::try_from(len).ok()?];
        self.read_into(&mut out, offset).ok()?;
        Some(out)
    }

    /// Fills `buf` with the bytes at `offset`, or says which bytes are missing: the
    /// range from the first missing byte to the last one (inside the read).
    pub fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), Range<u64>> {
        let want = buf.len() as u64;
        let Some(end) = offset.checked_add(want).filter(|&e| e <= self.len) else {
            return Err(offset..offset.saturating_add(want));
        };
        let mut p = self.lock();
        if let Some(missing) = p.missing(offset, end) {
            p.stats.misses += 1;
            return Err(missing);
        }
        p.tick += 1;
        let tick = p.tick;
        let mut at = offset;
        let mut used = Vec::new();
        while at < end {
            // Held, so a piece starts at or before `at` and covers it.
            let Some((&start, piece)) = p.map.range(..=at).next_back() else { break };
            let from = (at - start) as usize;
            let take = (piece.end(start).min(end) - at) as usize;
            let dst = (at - offset) as usize;
            buf[dst..dst + take].copy_from_slice(&piece.bytes[from..from + take]);
            used.push(start);
            at += take as u64;
        }
        for start in used {
            p.touch(start, tick);
        }
        Ok(())
    }

    /// Whether every byte of `len` bytes at `offset` is held.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        self.missing(offset, len).is_none()
    }

    /// The bytes of `len` bytes at `offset` that are not held: from the first missing
    /// byte to the last one; `None` when all are held. A range past the object's end is
    /// missing as a whole.
    pub fn missing(&self, offset: u64, len: u64) -> Option<Range<u64>> {
        let Some(end) = offset.checked_add(len).filter(|&e| e <= self.len) else {
            return Some(offset..offset.saturating_add(len));
        };
        self.lock().missing(offset, end)
    }

    /// Drops every byte held in `range`, pinned or not (bytes that failed a checksum, to
    /// be fetched again).
    pub fn forget(&self, range: Range<u64>) {
        if range.start < range.end {
            self.lock().cut(range.start, range.end);
        }
    }
}

impl Pieces {
    /// The missing part of `[offset, end)` (inside the object), if any.
    fn missing(&self, offset: u64, end: u64) -> Option<Range<u64>> {
        if offset >= end {
            return None;
        }
        let (mut first, mut last) = (None, None);
        let mut at = offset;
        // The piece covering `offset`, if one starts before it.
        if let Some((&s, piece)) = self.map.range(..offset).next_back()
            && piece.end(s) > offset
        {
            at = piece.end(s).min(end);
        }
        for (&s, piece) in self.map.range(at..end) {
            if s > at {
                first.get_or_insert(at);
                last = Some(s);
            }
            at = piece.end(s).min(end);
        }
        if at < end {
            first.get_or_insert(at);
            last = Some(end);
        }
        first.zip(last).map(|(a, b)| a..b)
    }

    /// Removes the bytes of `[offset, end)`, keeping the parts of pieces outside it.
    fn cut(&mut self, offset: u64, end: u64) {
        let mut starts: Vec<u64> = self.map.range(offset..end).map(|(&s, _)| s).collect();
        if let Some((&s, piece)) = self.map.range(..offset).next_back()
            && piece.end(s) > offset
        {
            starts.push(s);
        }
        for start in starts {
            let Some(mut piece) = self.map.remove(&start) else { continue };
            self.unaccount(start, &piece);
            let piece_end = piece.end(start);
            if piece_end > end {
                let tail = piece.bytes.split_off((end - start) as usize);
                self.put(end, tail, piece.used);
            }
            if start < offset {
                piece.bytes.truncate((offset - start) as usize);
                self.put(start, piece.bytes, piece.used);
            }
        }
    }

    /// Adds a piece (over no other), split at the pinned boundary.
    fn put(&mut self, start: u64, mut bytes: Vec<u8>, used: u64) {
        let end = start + bytes.len() as u64;
        if start < self.pinned && end > self.pinned {
            let tail = bytes.split_off((self.pinned - start) as usize);
            let pinned = self.pinned;
            self.put(pinned, tail, used);
        }
        if bytes.is_empty() {
            return;
        }
        let n = bytes.len() as u64;
        self.held += n;
        if start < self.pinned {
            self.held_pinned += n;
        } else {
            self.lru.insert((used, start));
        }
        self.map.insert(start, Piece { bytes, used });
    }

    /// Takes a removed piece out of the counts and the eviction order.
    fn unaccount(&mut self, start: u64, piece: &Piece) {
        let n = piece.bytes.len() as u64;
        self.held -= n;
        if start < self.pinned {
            self.held_pinned -= n;
        } else {
            self.lru.remove(&(piece.used, start));
        }
    }

    fn touch(&mut self, start: u64, tick: u64) {
        let pinned = start < self.pinned;
        let Some(piece) = self.map.get_mut(&start) else { return };
        let old = std::mem::replace(&mut piece.used, tick);
        if !pinned {
            self.lru.remove(&(old, start));
            self.lru.insert((tick, start));
        }
    }

    /// Evicts least recently used unpinned pieces until they fit `budget`.
    fn evict(&mut self, budget: u64) {
        while self.held - self.held_pinned > budget {
            let Some((_, start)) = self.lru.pop_first() else { break };
            if let Some(piece) = self.map.remove(&start) {
                let n = piece.bytes.len() as u64;
                self.held -= n;
                self.stats.evicted_bytes += n;
            }
        }
    }
}

impl std::fmt::Debug for RangedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.lock();
        f.debug_struct("RangedBytes")
            .field("object_len", &self.len)
            .field("budget", &self.budget)
            .field("pieces", &p.map.len())
            .field("bytes_held", &p.held)
            .field("pinned_prefix", &p.pinned)
            .finish()
    }
}

/// A range of one ranged object to fetch and insert into it: what
/// [`TileLoader::fetch_ranges`](crate::stream::loader::TileLoader::fetch_ranges) and
/// [`ExternalJob::fetch_ranges`](crate::stream::loader::ExternalJob::fetch_ranges) hand
/// a driver, which knows the object behind each store (its URL).
#[derive(Clone, Debug)]
pub struct FetchRange {
    /// Where the bytes go ([`RangedBytes::insert`] at `range.start`).
    pub store: Arc<RangedBytes>,
    /// The bytes to fetch (an HTTP `Range: bytes=start-(end-1)`).
    pub range: Range<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn object(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn reads_span_pieces_and_name_what_is_missing() {
        let obj = object(1000);
        let r = RangedBytes::new(1000, 1 << 20);
        r.insert(100, &obj[100..200]).unwrap();
        r.insert(200, &obj[200..300]).unwrap();
        assert_eq!(r.get(150, 100).unwrap(), &obj[150..250]);
        assert_eq!(r.missing(150, 100), None);
        assert_eq!(r.missing(50, 300), Some(50..350));
        assert_eq!(r.missing(250, 100), Some(300..350));
        r.insert(400, &obj[400..450]).unwrap();
        assert_eq!(r.missing(250, 250), Some(300..500), "first to last missing byte");
        assert!(r.get(0, 1).is_none());
        assert_eq!(r.missing(990, 20), Some(990..1010), "past the end: missing");
        assert_eq!(
            r.insert(990, vec![0u8; 11]),
            Err(RangedError::OutOfBounds { offset: 990, len: 11, object_len: 1000 })
        );
        // A later insert replaces what it overlaps, and keeps the rest.
        r.insert(150, vec![9u8; 10]).unwrap();
        let got = r.get(140, 30).unwrap();
        assert_eq!(&got[..10], &obj[140..150]);
        assert_eq!(&got[10..20], &[9u8; 10]);
        assert_eq!(&got[20..], &obj[160..170]);
        r.forget(145..155);
        assert_eq!(r.missing(100, 100), Some(145..155));
        assert_eq!(r.bytes_held(), 240);
    }

    #[test]
    fn evicts_the_least_recently_used_beyond_the_budget_never_the_pinned_head() {
        let obj = object(1 << 20);
        let r = RangedBytes::new(1 << 20, 300);
        assert_eq!(r.pinned_prefix(), OPEN_PREFIX);
        // The head, pinned, larger than the budget.
        r.insert(0, &obj[..1000]).unwrap();
        let at = |k: u64| OPEN_PREFIX + k * 1000;
        for k in 0..3 {
            r.insert(at(k), &obj[at(k) as usize..at(k) as usize + 100]).unwrap();
        }
        assert!(r.get(at(0), 100).is_some(), "used: now the most recent");
        r.insert(at(3), &obj[at(3) as usize..at(3) as usize + 100]).unwrap();
        assert!(r.contains(at(0), 100) && !r.contains(at(1), 100) && r.contains(at(2), 100));
        let s = r.stats();
        assert_eq!((s.bytes_held, s.pinned_bytes, s.evicted_bytes), (1300, 1000, 100));
        assert_eq!(r.get(0, 1000).unwrap(), &obj[..1000]);
        // Pinning more moves held pieces to the pinned side, splitting one across the end.
        r.pin_prefix(at(2) + 50);
        assert_eq!(r.stats().pinned_bytes, 1000 + 100 + 50);
        assert_eq!(r.get(at(2), 100).unwrap(), &obj[at(2) as usize..at(2) as usize + 100]);
        // A piece larger than the budget is not kept, and evicts nothing.
        r.insert(at(10), &obj[at(10) as usize..at(10) as usize + 400]).unwrap();
        assert!(!r.contains(at(10), 400));
        assert!(r.contains(at(3), 100));
        // Across the pinned end: its pinned part is kept.
        r.insert(at(2) + 40, &obj[at(2) as usize + 40..at(2) as usize + 440]).unwrap();
        assert!(r.contains(at(2), 100) && !r.contains(at(2) + 100, 1));
    }

    #[test]
    fn first_range_is_the_opening_prefix() {
        assert_eq!(first_range(None), 0..OPEN_PREFIX);
        assert_eq!(first_range(Some(1000)), 0..1000);
    }
}
