//! The host (RAM) tier: a thread-safe LRU cache of decoded, GPU-ready tiles bounded by
//! bytes, which several atlases can share through partitions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::format::tile::TileId;
use crate::stream::lru::Lru;

/// Counters and occupancy of a [`HostCache`]'s store (every partition together), as
/// reported in statistics.
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

/// Identifies one partition (one key space) of a shared store.
type PartitionId = u32;

/// What one partition holds right now.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    tiles: u64,
    bytes: u64,
}

/// State behind the store's mutex: one LRU and one budget for every partition.
struct Store {
    lru: Lru<(PartitionId, TileId), Arc<[u8]>>,
    /// One entry per live view, made when the view is, so that the critical sections
    /// only update existing entries and never allocate.
    partitions: HashMap<PartitionId, Usage>,
    next_partition: PartitionId,
    budget: u64,
    bytes: u64,
    hits: u64,
    misses: u64,
    inserts: u64,
    evictions: u64,
}

impl Store {
    /// Books an entry of `partition` of `size` bytes coming in (`coming_in`) or going out.
    fn account(&mut self, partition: PartitionId, size: u64, coming_in: bool) {
        let usage = self.partitions.get_mut(&partition);
        if coming_in {
            self.bytes += size;
            if let Some(u) = usage {
                u.tiles += 1;
                u.bytes += size;
            }
        } else {
            self.bytes -= size;
            if let Some(u) = usage {
                u.tiles -= 1;
                u.bytes -= size;
            }
        }
    }

    /// Removes one entry and books it out.
    fn take(&mut self, key: (PartitionId, TileId)) -> Option<Arc<[u8]>> {
        let data = self.lru.remove(key)?;
        self.account(key.0, len_u64(&data), false);
        Some(data)
    }

    /// Evicts least recently used entries, of any partition, until
    /// `bytes + incoming <= budget`.
    fn make_room(&mut self, incoming: u64) {
        while self.bytes + incoming > self.budget {
            let Some(((partition, _), data)) = self.lru.pop_lru() else { break };
            self.account(partition, len_u64(&data), false);
            self.evictions += 1;
        }
    }

    /// Drops every entry of `partition` (not counted as evictions).
    fn clear_partition(&mut self, partition: PartitionId) {
        let usage = self.partitions.get(&partition).copied().unwrap_or_default();
        if usage.tiles == 0 {
            return;
        }
        if usage.tiles == self.lru.len() as u64 {
            self.lru.clear();
        } else {
            self.lru.retain(|&(p, _), _| p != partition);
        }
        self.bytes -= usage.bytes;
        if let Some(u) = self.partitions.get_mut(&partition) {
            *u = Usage::default();
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
/// [`HostCache::resident_tiles`], [`HostCache::new_partition`] and dropping a view).
///
/// # Partitions
///
/// A `HostCache` is a *view* of a store. [`HostCache::new`] makes a store and its first
/// view; [`HostCache::new_partition`] makes another view of the same store with its
/// own key space, so that several atlases whose [`TileId`]s coincide can share one
/// memory budget without their tiles colliding. The entries of every partition live in
/// one LRU order and compete for the one budget: inserting into one partition may evict
/// the least recently used tile of another.
///
/// Per view (this partition only): [`get`](HostCache::get),
/// [`contains`](HostCache::contains), [`insert`](HostCache::insert),
/// [`remove`](HostCache::remove), [`clear`](HostCache::clear),
/// [`resident_tiles`](HostCache::resident_tiles), [`len`](HostCache::len),
/// [`is_empty`](HostCache::is_empty) and [`bytes`](HostCache::bytes).
///
/// Per store (every partition together): the budget ([`budget`](HostCache::budget),
/// [`set_budget`](HostCache::set_budget)) and every field of
/// [`counters`](HostCache::counters), hits and misses included.
///
/// Dropping a view removes its partition's entries from the store (they could never be
/// read again); dropping the last view frees the store.
pub struct HostCache {
    store: Arc<Mutex<Store>>,
    partition: PartitionId,
}

impl HostCache {
    /// Makes an empty cache holding at most `budget_bytes` bytes of tile data: a new
    /// store and its first partition.
    pub fn new(budget_bytes: u64) -> Self {
        let first: PartitionId = 0;
        let mut partitions = HashMap::new();
        partitions.insert(first, Usage::default());
        Self {
            store: Arc::new(Mutex::new(Store {
                lru: Lru::new(),
                partitions,
                next_partition: first + 1,
                budget: budget_bytes,
                bytes: 0,
                hits: 0,
                misses: 0,
                inserts: 0,
                evictions: 0,
            })),
            partition: first,
        }
    }

    /// Makes a new, empty partition of this cache's store: a view with its own key
    /// space that shares the store's budget, LRU order and counters (see the
    /// [type documentation](HostCache#partitions)).
    pub fn new_partition(&self) -> HostCache {
        let mut g = self.lock();
        let mut id = g.next_partition;
        // Ids are only reused after 2³² partitions, and then only free ones.
        while g.partitions.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        g.next_partition = id.wrapping_add(1);
        g.partitions.insert(id, Usage::default());
        HostCache { store: Arc::clone(&self.store), partition: id }
    }

    /// Whether `other` is a view of the same store (possibly the same partition).
    pub fn shares_store_with(&self, other: &HostCache) -> bool {
        Arc::ptr_eq(&self.store, &other.store)
    }

    /// Number of partitions (live views) of this cache's store.
    pub fn partitions(&self) -> usize {
        self.lock().partitions.len()
    }

    /// Locks the state. A panic while holding the lock cannot leave it inconsistent
    /// in a way that matters more than losing the cache, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key(&self, tile: TileId) -> (PartitionId, TileId) {
        (self.partition, tile)
    }

    /// This partition's bytes for the tile, if held, as they are: neither marked
    /// recently used nor counted as a hit or a miss (for the renderer's own reads of
    /// resident tiles, such as a parent's quadrant for its children's level 1).
    pub fn peek(&self, tile: TileId) -> Option<Arc<[u8]>> {
        self.lock().lru.peek(self.key(tile)).cloned()
    }

    /// Returns this partition's bytes for the tile and marks it most recently used;
    /// counts a hit or a miss (in the store's counters).
    pub fn get(&self, tile: TileId) -> Option<Arc<[u8]>> {
        let mut g = self.lock();
        match g.lru.get(self.key(tile)).cloned() {
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

    /// Whether this partition caches the tile. Neither counts as a lookup nor changes
    /// recency.
    pub fn contains(&self, tile: TileId) -> bool {
        self.lock().lru.contains_key(self.key(tile))
    }

    /// Stores the tile's bytes in this partition as the most recently used entry,
    /// evicting least recently used entries (of any partition) until everything fits
    /// in the budget.
    ///
    /// Replacing an existing tile first releases the old bytes. An entry larger than
    /// the whole budget is not stored (and any older entry for that tile is dropped,
    /// so stale bytes are never served); the return value says whether it was stored.
    pub fn insert(&self, tile: TileId, data: Arc<[u8]>) -> bool {
        let key = self.key(tile);
        let mut g = self.lock();
        g.take(key);
        let size = len_u64(&data);
        if size > g.budget {
            return false;
        }
        g.make_room(size);
        g.lru.insert(key, data);
        g.account(self.partition, size, true);
        g.inserts += 1;
        true
    }

    /// Removes the tile from this partition and returns its bytes (not counted as an
    /// eviction).
    pub fn remove(&self, tile: TileId) -> Option<Arc<[u8]>> {
        self.lock().take(self.key(tile))
    }

    /// Drops every entry of this partition (a flush; not counted as evictions); other
    /// partitions keep theirs. Counters are kept.
    pub fn clear(&self) {
        self.lock().clear_partition(self.partition);
    }

    /// Changes the store's budget (shared by every partition), evicting least recently
    /// used entries until the store fits.
    pub fn set_budget(&self, budget_bytes: u64) {
        let mut g = self.lock();
        g.budget = budget_bytes;
        g.make_room(0);
    }

    /// The store's budget in bytes (shared by every partition).
    pub fn budget(&self) -> u64 {
        self.lock().budget
    }

    fn usage(&self) -> Usage {
        self.lock().partitions.get(&self.partition).copied().unwrap_or_default()
    }

    /// Number of tiles cached in this partition.
    pub fn len(&self) -> usize {
        self.usage().tiles as usize
    }

    /// Whether this partition holds no tile.
    pub fn is_empty(&self) -> bool {
        self.usage().tiles == 0
    }

    /// Total bytes of the tiles cached in this partition.
    pub fn bytes(&self) -> u64 {
        self.usage().bytes
    }

    /// This partition's cached tiles, from the least to the most recently used.
    pub fn resident_tiles(&self) -> Vec<TileId> {
        let g = self.lock();
        g.lru.keys().filter(|(p, _)| *p == self.partition).map(|&(_, tile)| tile).collect()
    }

    /// Snapshot of the store's counters and occupancy: every partition together.
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

impl Drop for HostCache {
    /// Removes this partition's entries, which nothing could read any more, unless this
    /// is the store's last view (then the store itself goes).
    fn drop(&mut self) {
        if Arc::strong_count(&self.store) == 1 {
            return;
        }
        let mut g = self.store.lock().unwrap_or_else(|e| e.into_inner());
        g.clear_partition(self.partition);
        g.partitions.remove(&self.partition);
    }
}

impl std::fmt::Debug for HostCache {
    /// Shows the counters, not the cached bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCache")
            .field("partition", &self.partition)
            .field("counters", &self.counters())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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
    fn peek_neither_counts_nor_touches() {
        let c = HostCache::new(200);
        assert!(c.insert(t(1), bytes(100)));
        assert!(c.insert(t(2), bytes(100)));
        // The renderer reads a parent's bytes: 1 stays the least recently used.
        assert_eq!(c.peek(t(1)).map(|b| b.len()), Some(100));
        assert!(c.peek(t(9)).is_none());
        assert_eq!((c.counters().hits, c.counters().misses), (0, 0));
        assert!(c.insert(t(3), bytes(100)));
        assert_eq!(c.resident_tiles(), vec![t(2), t(3)]);
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
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

    #[test]
    fn partitions_keep_their_own_bytes_for_the_same_tile() {
        let root = HostCache::new(1000);
        let a = root.new_partition();
        let b = root.new_partition();
        assert!(a.shares_store_with(&b) && root.shares_store_with(&a));
        assert!(!a.shares_store_with(&HostCache::new(1000)));
        assert_eq!(root.partitions(), 3);
        assert!(a.insert(t(1), bytes(10)));
        assert!(b.insert(t(1), bytes(20)));
        assert_eq!(a.get(t(1)).as_deref(), Some(&[10u8; 10][..]));
        assert_eq!(b.get(t(1)).as_deref(), Some(&[20u8; 20][..]));
        assert!(root.get(t(1)).is_none(), "the root view is a partition of its own");
        assert!(!root.contains(t(1)));
        assert_eq!((a.len(), a.bytes(), b.len(), b.bytes()), (1, 10, 1, 20));
        assert!(root.is_empty());
        assert_eq!(a.resident_tiles(), vec![t(1)]);
        assert!(root.resident_tiles().is_empty());
        // The store's counters see both partitions.
        let k = root.counters();
        assert_eq!((k.tiles, k.bytes, k.inserts, k.hits, k.misses), (2, 30, 2, 2, 1));
        assert_eq!(a.counters(), k);
        // Replacing and removing in one partition leaves the other alone.
        assert!(a.insert(t(1), bytes(5)));
        assert_eq!(b.get(t(1)).as_deref(), Some(&[20u8; 20][..]));
        assert_eq!(a.remove(t(1)).as_deref(), Some(&[5u8; 5][..]));
        assert!(a.remove(t(1)).is_none());
        assert!(b.contains(t(1)));
        assert_eq!((root.counters().bytes, b.bytes(), a.bytes()), (20, 20, 0));
        assert!(format!("{b:?}").contains("partition: 2"));
    }

    #[test]
    fn partitions_share_one_budget_and_one_lru_order() {
        let root = HostCache::new(300);
        let a = root.new_partition();
        let b = root.new_partition();
        assert!(a.insert(t(1), bytes(100)));
        assert!(b.insert(t(1), bytes(100)));
        assert!(a.insert(t(2), bytes(100)));
        // Touch a's tile 1: b's tile 1 becomes the store's least recently used.
        assert!(a.get(t(1)).is_some());
        assert!(b.insert(t(2), bytes(100)));
        assert!(!b.contains(t(1)), "b's older tile was evicted");
        assert_eq!(a.resident_tiles(), vec![t(2), t(1)]);
        assert_eq!(b.resident_tiles(), vec![t(2)]);
        // Now a's tile 2 is the oldest: b's big insert evicts across the partition line.
        assert!(b.insert(t(3), bytes(200)));
        assert!(a.resident_tiles().is_empty());
        assert_eq!(b.resident_tiles(), vec![t(2), t(3)]);
        assert_eq!((a.len(), a.bytes(), b.len(), b.bytes()), (0, 0, 2, 300));
        let k = root.counters();
        assert_eq!((k.evictions, k.bytes, k.tiles), (3, 300, 2));
        // The budget is the store's: shrinking it from any view evicts from all.
        assert!(a.insert(t(9), bytes(50)));
        a.set_budget(250);
        assert_eq!(b.budget(), 250);
        assert_eq!(b.resident_tiles(), vec![t(3)]);
        assert_eq!(a.resident_tiles(), vec![t(9)]);
        assert!(root.counters().bytes <= 250);
    }

    #[test]
    fn clearing_or_dropping_a_partition_leaves_the_others() {
        let root = HostCache::new(10_000);
        let a = root.new_partition();
        let b = root.new_partition();
        for i in 0..10 {
            a.insert(t(i), bytes(10));
            b.insert(t(i), bytes(20));
            root.insert(t(i), bytes(30));
        }
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a.bytes(), 0);
        assert_eq!((b.len(), b.bytes()), (10, 200));
        assert_eq!(root.counters().bytes, 500);
        assert_eq!(root.counters().evictions, 0);
        // A cleared partition keeps working.
        assert!(a.insert(t(3), bytes(10)));
        assert_eq!(a.get(t(3)).as_deref(), Some(&[10u8; 10][..]));
        // Dropping a view takes its entries with it; the others stay readable.
        drop(b);
        assert_eq!(root.partitions(), 2);
        assert_eq!(root.counters().bytes, 310);
        assert_eq!(root.counters().tiles, 11);
        assert_eq!(root.get(t(9)).as_deref(), Some(&[30u8; 30][..]));
        // A new partition starts empty.
        let c = root.new_partition();
        assert!(c.is_empty() && !c.contains(t(3)));
        root.clear();
        // Now `a` holds every entry: clearing it empties the whole LRU at once.
        a.clear();
        assert_eq!(root.counters().tiles, 0);
        assert_eq!(root.counters().bytes, 0);
        c.insert(t(0), bytes(1));
        drop(root);
        assert_eq!(c.get(t(0)).as_deref(), Some(&[1u8][..]));
        assert_eq!(c.partitions(), 2);
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

    proptest! {
        #[test]
        fn partitions_account_for_the_store(
            budget in 0u64..2000,
            ops in proptest::collection::vec((0usize..3, op()), 0..150),
        ) {
            let root = HostCache::new(budget);
            let views = [root.new_partition(), root.new_partition(), root.new_partition()];
            for (v, op) in ops {
                let c = &views[v];
                match op {
                    Op::Insert(k, n) => {
                        let others: Vec<Option<Arc<[u8]>>> =
                            views.iter().map(|w| w.lru_peek(t(k))).collect();
                        let stored = c.insert(t(k), bytes(n));
                        prop_assert_eq!(c.contains(t(k)), stored);
                        // Another partition's entry for the same tile is evicted or kept
                        // as it was, never replaced.
                        for (w, before) in views.iter().zip(others) {
                            if !std::ptr::eq(w, c) {
                                let now = w.lru_peek(t(k));
                                prop_assert!(now.is_none() || now == before);
                            }
                        }
                    }
                    Op::Get(k) => {
                        let present = c.contains(t(k));
                        prop_assert_eq!(c.get(t(k)).is_some(), present);
                    }
                    Op::Remove(k) => {
                        let present = c.contains(t(k));
                        prop_assert_eq!(c.remove(t(k)).is_some(), present);
                    }
                    Op::SetBudget(b) => c.set_budget(b),
                    Op::Clear => c.clear(),
                }
                let k = root.counters();
                prop_assert!(k.bytes <= k.budget_bytes, "{:?}", k);
                let (mut tiles, mut total) = (0u64, 0u64);
                for w in &views {
                    let resident = w.resident_tiles();
                    let sum: u64 = resident.iter().map(|&tile| w.lru_peek_len(tile)).sum();
                    prop_assert_eq!(sum, w.bytes());
                    prop_assert_eq!(resident.len(), w.len());
                    tiles += w.len() as u64;
                    total += w.bytes();
                }
                prop_assert_eq!((tiles, total), (k.tiles, k.bytes));
            }
        }
    }

    impl HostCache {
        /// A cached entry, without touching it.
        fn lru_peek(&self, tile: TileId) -> Option<Arc<[u8]>> {
            self.lock().lru.peek(self.key(tile)).cloned()
        }

        /// Size of a cached entry, without touching it.
        fn lru_peek_len(&self, tile: TileId) -> u64 {
            self.lock().lru.peek(self.key(tile)).map_or(0, |d| d.len() as u64)
        }
    }
}
