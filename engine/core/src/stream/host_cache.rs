//! The host (RAM) tier: a thread-safe LRU cache of decoded, GPU-ready tiles bounded by bytes.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::format::tile::TileId;
use crate::stream::lru::Lru;

/// Counters and occupancy of a [`HostCache`], as reported in statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCacheCounters {
    /// [`HostCache::get`] calls that found the tile.
    pub hits: u64,
    /// [`HostCache::get`] calls that did not find the tile.
    pub misses: u64,
    /// Entries stored by [`HostCache::insert`] (replacements included, rejected
    /// oversized entries excluded).
    pub inserts: u64,
    /// Entries dropped to stay within the budget (by `insert` or `set_budget`).
    /// Explicit `remove` and `clear` are not evictions.
    pub evictions: u64,
    /// Bytes currently held.
    pub bytes: u64,
    /// Tiles currently held.
    pub tiles: u64,
    /// Current budget in bytes.
    pub budget_bytes: u64,
}

impl HostCacheCounters {
    /// Fraction of lookups that hit, or 0 when there was no lookup.
    pub fn hit_rate(&self) -> f64 {
        let lookups = self.hits + self.misses;
        if lookups == 0 { 0.0 } else { self.hits as f64 / lookups as f64 }
    }
}

/// State behind the cache's mutex.
struct Inner {
    lru: Lru<TileId, Arc<[u8]>>,
    budget: u64,
    bytes: u64,
    hits: u64,
    misses: u64,
    inserts: u64,
    evictions: u64,
}

impl Inner {
    /// Evicts least recently used entries until `bytes + incoming <= budget`.
    fn make_room(&mut self, incoming: u64) {
        while self.bytes + incoming > self.budget {
            let Some((_, data)) = self.lru.pop_lru() else { break };
            self.bytes -= len_u64(&data);
            self.evictions += 1;
        }
    }
}

fn len_u64(data: &[u8]) -> u64 {
    data.len() as u64
}

/// Decoded tiles kept in host memory, shared between the loader threads and the
/// renderer.
///
/// Entries are `Arc<[u8]>`, so a hit costs a reference-count increment and the bytes
/// stay valid for the holder even if the cache evicts them meanwhile. The total size
/// of the stored entries never exceeds the budget; when an insertion would exceed it,
/// least recently used entries are evicted first. All methods take `&self` and lock
/// one internal mutex for a short, allocation-free critical section (except
/// [`HostCache::resident_tiles`]).
pub struct HostCache {
    inner: Mutex<Inner>,
}

impl HostCache {
    /// Makes an empty cache holding at most `budget_bytes` bytes of tile data.
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                lru: Lru::new(),
                budget: budget_bytes,
                bytes: 0,
                hits: 0,
                misses: 0,
                inserts: 0,
                evictions: 0,
            }),
        }
    }

    /// Locks the state. A panic while holding the lock cannot leave it inconsistent
    /// in a way that matters more than losing the cache, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns the tile's bytes and marks it most recently used; counts a hit or a miss.
    pub fn get(&self, tile: TileId) -> Option<Arc<[u8]>> {
        let mut g = self.lock();
        match g.lru.get(tile).cloned() {
            Some(data) => {
                g.hits += 1;
                Some(data)
            }
            None => {
                g.misses += 1;
                None
            }
        }
    }

    /// Whether the tile is cached. Neither counts as a lookup nor changes recency.
    pub fn contains(&self, tile: TileId) -> bool {
        self.lock().lru.contains_key(tile)
    }

    /// Stores the tile's bytes as the most recently used entry, evicting least
    /// recently used entries until everything fits in the budget.
    ///
    /// Replacing an existing tile first releases the old bytes. An entry larger than
    /// the whole budget is not stored (and any older entry for that tile is dropped,
    /// so stale bytes are never served); the return value says whether it was stored.
    pub fn insert(&self, tile: TileId, data: Arc<[u8]>) -> bool {
        let mut g = self.lock();
        if let Some(old) = g.lru.remove(tile) {
            g.bytes -= len_u64(&old);
        }
        let size = len_u64(&data);
        if size > g.budget {
            return false;
        }
        g.make_room(size);
        g.lru.insert(tile, data);
        g.bytes += size;
        g.inserts += 1;
        true
    }

    /// Removes the tile and returns its bytes (not counted as an eviction).
    pub fn remove(&self, tile: TileId) -> Option<Arc<[u8]>> {
        let mut g = self.lock();
        let data = g.lru.remove(tile)?;
        g.bytes -= len_u64(&data);
        Some(data)
    }

    /// Drops every entry (a flush; not counted as evictions). Counters are kept.
    pub fn clear(&self) {
        let mut g = self.lock();
        g.lru.clear();
        g.bytes = 0;
    }

    /// Changes the budget, evicting least recently used entries until the cache fits.
    pub fn set_budget(&self, budget_bytes: u64) {
        let mut g = self.lock();
        g.budget = budget_bytes;
        g.make_room(0);
    }

    /// Current budget in bytes.
    pub fn budget(&self) -> u64 {
        self.lock().budget
    }

    /// Number of cached tiles.
    pub fn len(&self) -> usize {
        self.lock().lru.len()
    }

    /// Whether the cache holds no tile.
    pub fn is_empty(&self) -> bool {
        self.lock().lru.is_empty()
    }

    /// Total bytes of the cached tiles.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The cached tiles, from the least to the most recently used.
    pub fn resident_tiles(&self) -> Vec<TileId> {
        self.lock().lru.keys().copied().collect()
    }

    /// Snapshot of the counters and occupancy.
    pub fn counters(&self) -> HostCacheCounters {
        let g = self.lock();
        HostCacheCounters {
            hits: g.hits,
            misses: g.misses,
            inserts: g.inserts,
            evictions: g.evictions,
            bytes: g.bytes,
            tiles: g.lru.len() as u64,
            budget_bytes: g.budget,
        }
    }
}

impl std::fmt::Debug for HostCache {
    /// Shows the counters, not the cached bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCache").field("counters", &self.counters()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(i: u32) -> TileId {
        TileId::new(0, 0, i, 0)
    }

    fn bytes(n: usize) -> Arc<[u8]> {
        vec![n as u8; n].into()
    }

    #[test]
    fn evicts_least_recently_used_first() {
        let c = HostCache::new(300);
        assert!(c.insert(t(1), bytes(100)));
        assert!(c.insert(t(2), bytes(100)));
        assert!(c.insert(t(3), bytes(100)));
        assert_eq!(c.bytes(), 300);
        // Touch 1 so that 2 becomes the least recently used.
        assert!(c.get(t(1)).is_some());
        // `contains` must not touch: 2 stays the LRU.
        assert!(c.contains(t(2)));
        assert!(c.insert(t(4), bytes(100)));
        assert_eq!(c.resident_tiles(), vec![t(3), t(1), t(4)]);
        // A 200-byte entry evicts two: 3 then 1.
        assert!(c.insert(t(5), bytes(200)));
        assert_eq!(c.resident_tiles(), vec![t(4), t(5)]);
        assert_eq!(c.counters().evictions, 3);
        assert_eq!(c.bytes(), 300);
    }

    #[test]
    fn oversized_and_replacement() {
        let c = HostCache::new(100);
        assert!(c.insert(t(1), bytes(60)));
        assert!(!c.insert(t(2), bytes(101)));
        assert_eq!(c.resident_tiles(), vec![t(1)]);
        // Replacing adjusts the byte count and does not evict anything else.
        assert!(c.insert(t(3), bytes(40)));
        assert!(c.insert(t(1), bytes(10)));
        assert_eq!(c.bytes(), 50);
        assert_eq!(c.resident_tiles(), vec![t(3), t(1)]);
        assert_eq!(c.get(t(1)).as_deref(), Some(&[10u8; 10][..]));
        // An oversized replacement drops the stale entry.
        assert!(!c.insert(t(1), bytes(200)));
        assert!(!c.contains(t(1)));
        assert_eq!(c.bytes(), 40);
        assert_eq!(c.counters().evictions, 0);
        // An entry exactly the size of the budget fits, alone.
        assert!(c.insert(t(9), bytes(100)));
        assert_eq!(c.resident_tiles(), vec![t(9)]);
        assert_eq!(c.counters().evictions, 1);
    }

    #[test]
    fn counters_budget_remove_clear() {
        let c = HostCache::new(1000);
        assert!(c.is_empty());
        for i in 0..5 {
            c.insert(t(i), bytes(100));
        }
        assert!(c.get(t(0)).is_some());
        assert!(c.get(t(1)).is_some());
        assert!(c.get(t(42)).is_none());
        assert!(!c.contains(t(42)));
        assert_eq!(c.remove(t(4)).map(|d| d.len()), Some(100));
        assert_eq!(c.remove(t(4)), None);
        // LRU order now: 2, 3, 0, 1. Shrinking to 250 bytes keeps 0 and 1.
        c.set_budget(250);
        assert_eq!(c.budget(), 250);
        assert_eq!(c.resident_tiles(), vec![t(0), t(1)]);
        let want = HostCacheCounters {
            hits: 2,
            misses: 1,
            inserts: 5,
            evictions: 2,
            bytes: 200,
            tiles: 2,
            budget_bytes: 250,
        };
        assert_eq!(c.counters(), want);
        assert!((c.counters().hit_rate() - 2.0 / 3.0).abs() < 1e-12);
        c.clear();
        assert_eq!(c.len(), 0);
        assert_eq!(c.bytes(), 0);
        assert_eq!(c.counters(), HostCacheCounters { bytes: 0, tiles: 0, ..want });
        assert!(format!("{c:?}").contains("hits: 2"));
    }

    #[test]
    fn shared_between_threads() {
        let c = Arc::new(HostCache::new(64 * 50));
        let handles: Vec<_> = (0..4u32)
            .map(|w| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for i in 0..500u32 {
                        let tile = t((i * 7 + w) % 97);
                        if c.get(tile).is_none() {
                            c.insert(tile, bytes(64));
                        }
                        assert!(c.bytes() <= c.budget());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let k = c.counters();
        assert_eq!(k.hits + k.misses, 2000);
        assert!(k.bytes <= 64 * 50);
        assert_eq!(k.bytes, k.tiles * 64);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32, usize),
        Get(u32),
        Remove(u32),
        SetBudget(u64),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u32..24, 0usize..400).prop_map(|(k, n)| Op::Insert(k, n)),
            3 => (0u32..24).prop_map(Op::Get),
            1 => (0u32..24).prop_map(Op::Remove),
            1 => (0u64..2000).prop_map(Op::SetBudget),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn budget_never_exceeded(budget in 0u64..2000, ops in proptest::collection::vec(op(), 0..150)) {
            let c = HostCache::new(budget);
            let (mut hits, mut misses) = (0u64, 0u64);
            for op in ops {
                match op {
                    Op::Insert(k, n) => {
                        let stored = c.insert(t(k), bytes(n));
                        prop_assert_eq!(stored, n as u64 <= c.budget());
                        prop_assert_eq!(c.contains(t(k)), stored);
                        if stored {
                            prop_assert_eq!(c.resident_tiles().last().copied(), Some(t(k)));
                        }
                    }
                    Op::Get(k) => {
                        let present = c.contains(t(k));
                        let got = c.get(t(k));
                        prop_assert_eq!(got.is_some(), present);
                        if present { hits += 1 } else { misses += 1 }
                    }
                    Op::Remove(k) => {
                        let present = c.contains(t(k));
                        prop_assert_eq!(c.remove(t(k)).is_some(), present);
                    }
                    Op::SetBudget(b) => c.set_budget(b),
                    Op::Clear => c.clear(),
                }
                let k = c.counters();
                prop_assert!(k.bytes <= k.budget_bytes, "{:?}", k);
                let resident = c.resident_tiles();
                let sum: u64 = resident.iter().map(|&tile| c.lru_peek_len(tile)).sum();
                prop_assert_eq!(sum, k.bytes);
                prop_assert_eq!(resident.len() as u64, k.tiles);
                prop_assert_eq!((k.hits, k.misses), (hits, misses));
            }
        }
    }

    impl HostCache {
        /// Size of a cached entry, without touching it.
        fn lru_peek_len(&self, tile: TileId) -> u64 {
            self.lock().lru.peek(tile).map_or(0, |d| d.len() as u64)
        }
    }
}
