//! An O(1) least-recently-used map: a hash index into a slab of intrusively linked nodes.
//!
//! [`Lru`] only orders entries; it never evicts on its own. Callers (the host cache,
//! the GPU slot pool) decide when to pop, by count, by bytes or by a predicate.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

/// Index meaning "no node".
const NIL: usize = usize::MAX;

/// One live entry of the slab, linked to its neighbours in recency order.
struct Node<K, V> {
    key: K,
    value: V,
    /// Next more recently used node, or [`NIL`] for the most recent one.
    newer: usize,
    /// Next less recently used node, or [`NIL`] for the least recent one.
    older: usize,
}

/// A map that remembers the order in which its keys were last used.
///
/// Insertion, lookup with touch ([`Lru::get`]), lookup without touch ([`Lru::peek`]),
/// removal and popping the least recently used entry are all O(1). Nodes live in a
/// slab `Vec`; freed slots are kept on a free list and reused, so a long-lived map
/// does not allocate in steady state.
pub struct Lru<K: Hash + Eq + Copy, V> {
    index: HashMap<K, usize, rustc_hash::FxBuildHasher>,
    slots: Vec<Option<Node<K, V>>>,
    free: Vec<usize>,
    /// Most recently used node.
    mru: usize,
    /// Least recently used node.
    lru: usize,
}

impl<K: Hash + Eq + Copy, V> Default for Lru<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Copy, V> Lru<K, V> {
    /// Makes an empty map.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Makes an empty map with room for `capacity` entries before reallocating.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            index: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            slots: Vec::with_capacity(capacity),
            free: Vec::new(),
            mru: NIL,
            lru: NIL,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the map holds no entry.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `key` is present. Does not change its recency.
    pub fn contains_key(&self, key: K) -> bool {
        self.index.contains_key(&key)
    }

    /// Inserts `key` as the most recently used entry.
    ///
    /// If the key was already present its value is replaced, it becomes the most
    /// recently used entry and the old value is returned.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(&i) = self.index.get(&key) {
            self.move_to_front(i);
            let node = self.node_mut(i);
            return Some(std::mem::replace(&mut node.value, value));
        }
        let node = Node { key, value, newer: NIL, older: NIL };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(node);
                i
            }
            None => {
                self.slots.push(Some(node));
                self.slots.len() - 1
            }
        };
        self.link_front(i);
        self.index.insert(key, i);
        None
    }

    /// Returns the value of `key` and marks it most recently used.
    pub fn get(&mut self, key: K) -> Option<&V> {
        let i = *self.index.get(&key)?;
        self.move_to_front(i);
        Some(&self.node(i).value)
    }

    /// Returns the value of `key` mutably and marks it most recently used.
    pub fn get_mut(&mut self, key: K) -> Option<&mut V> {
        let i = *self.index.get(&key)?;
        self.move_to_front(i);
        Some(&mut self.node_mut(i).value)
    }

    /// Returns the value of `key` without changing its recency.
    pub fn peek(&self, key: K) -> Option<&V> {
        let i = *self.index.get(&key)?;
        Some(&self.node(i).value)
    }

    /// Returns the value of `key` mutably without changing its recency.
    pub fn peek_mut(&mut self, key: K) -> Option<&mut V> {
        let i = *self.index.get(&key)?;
        Some(&mut self.node_mut(i).value)
    }

    /// Marks `key` most recently used; returns whether it was present.
    pub fn touch(&mut self, key: K) -> bool {
        match self.index.get(&key) {
            Some(&i) => {
                self.move_to_front(i);
                true
            }
            None => false,
        }
    }

    /// Removes `key` and returns its value.
    pub fn remove(&mut self, key: K) -> Option<V> {
        let i = self.index.remove(&key)?;
        Some(self.free_node(i).1)
    }

    /// The least recently used entry, without removing or touching it.
    pub fn peek_lru(&self) -> Option<(&K, &V)> {
        (self.lru != NIL).then(|| {
            let n = self.node(self.lru);
            (&n.key, &n.value)
        })
    }

    /// Removes and returns the least recently used entry.
    pub fn pop_lru(&mut self) -> Option<(K, V)> {
        if self.lru == NIL {
            return None;
        }
        let i = self.lru;
        let (key, value) = self.free_node(i);
        self.index.remove(&key);
        Some((key, value))
    }

    /// Removes and returns the least recently used entry for which `pred` holds.
    ///
    /// Entries are visited from the least recently used one and `pred` is called on
    /// each until it returns `true`, so this costs O(entries skipped). Entries that
    /// are skipped keep their place in the order.
    pub fn pop_lru_where(&mut self, mut pred: impl FnMut(&K, &V) -> bool) -> Option<(K, V)> {
        let mut i = self.lru;
        while i != NIL {
            let n = self.node(i);
            if pred(&n.key, &n.value) {
                let (key, value) = self.free_node(i);
                self.index.remove(&key);
                return Some((key, value));
            }
            i = n.newer;
        }
        None
    }

    /// Keeps only the entries for which `pred` holds, visiting them from the least to
    /// the most recently used; the kept entries keep their order. O(entries).
    pub fn retain(&mut self, mut pred: impl FnMut(&K, &V) -> bool) {
        let mut i = self.lru;
        while i != NIL {
            let n = self.node(i);
            let next = n.newer;
            if !pred(&n.key, &n.value) {
                let (key, _) = self.free_node(i);
                self.index.remove(&key);
            }
            i = next;
        }
    }

    /// Removes every entry (the slab's memory is kept for reuse).
    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.free.clear();
        self.mru = NIL;
        self.lru = NIL;
    }

    /// Iterates over the entries from the least to the most recently used, without
    /// touching them. The iterator is double-ended: `.rev()` goes from the most recent.
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter { lru: self, front: self.lru, back: self.mru, remaining: self.len() }
    }

    /// Iterates over the keys from the least to the most recently used.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + '_ {
        self.iter().map(|(k, _)| k)
    }

    fn node(&self, i: usize) -> &Node<K, V> {
        match &self.slots[i] {
            Some(n) => n,
            None => unreachable!("lru: index points at a free slot"),
        }
    }

    fn node_mut(&mut self, i: usize) -> &mut Node<K, V> {
        match &mut self.slots[i] {
            Some(n) => n,
            None => unreachable!("lru: index points at a free slot"),
        }
    }

    /// Links the (unlinked) node `i` as the most recently used.
    fn link_front(&mut self, i: usize) {
        let old_mru = self.mru;
        {
            let n = self.node_mut(i);
            n.newer = NIL;
            n.older = old_mru;
        }
        if old_mru == NIL {
            self.lru = i;
        } else {
            self.node_mut(old_mru).newer = i;
        }
        self.mru = i;
    }

    /// Takes node `i` out of the recency list (its slot stays occupied).
    fn unlink(&mut self, i: usize) {
        let (newer, older) = {
            let n = self.node(i);
            (n.newer, n.older)
        };
        if newer == NIL {
            self.mru = older;
        } else {
            self.node_mut(newer).older = older;
        }
        if older == NIL {
            self.lru = newer;
        } else {
            self.node_mut(older).newer = newer;
        }
    }

    fn move_to_front(&mut self, i: usize) {
        if self.mru != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    /// Unlinks node `i`, frees its slot and returns its contents. The caller removes
    /// the key from the index.
    fn free_node(&mut self, i: usize) -> (K, V) {
        self.unlink(i);
        let node = match self.slots[i].take() {
            Some(n) => n,
            None => unreachable!("lru: freeing a free slot"),
        };
        self.free.push(i);
        (node.key, node.value)
    }
}

impl<K: Hash + Eq + Copy + fmt::Debug, V: fmt::Debug> fmt::Debug for Lru<K, V> {
    /// Formats as a map in least-to-most recently used order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a, K: Hash + Eq + Copy, V> IntoIterator for &'a Lru<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over an [`Lru`] from the least to the most recently used entry; see
/// [`Lru::iter`].
pub struct Iter<'a, K: Hash + Eq + Copy, V> {
    lru: &'a Lru<K, V>,
    front: usize,
    back: usize,
    remaining: usize,
}

impl<'a, K: Hash + Eq + Copy, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let n = self.lru.node(self.front);
        self.front = n.newer;
        Some((&n.key, &n.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K: Hash + Eq + Copy, V> DoubleEndedIterator for Iter<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let n = self.lru.node(self.back);
        self.back = n.older;
        Some((&n.key, &n.value))
    }
}

impl<K: Hash + Eq + Copy, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<K: Hash + Eq + Copy, V> std::iter::FusedIterator for Iter<'_, K, V> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn keys(l: &Lru<u32, u32>) -> Vec<u32> {
        l.keys().copied().collect()
    }

    #[test]
    fn retain_keeps_order_and_reuses_slots() {
        let mut l = Lru::new();
        for k in 0..10u32 {
            l.insert(k, k * 10);
        }
        l.get(3);
        l.retain(|&k, &v| k % 2 == 1 && v != 50);
        assert_eq!(keys(&l), vec![1, 7, 9, 3]);
        assert_eq!(l.len(), 4);
        assert!(!l.contains_key(5));
        assert_eq!(l.pop_lru(), Some((1, 10)));
        l.insert(20, 200);
        assert_eq!(keys(&l), vec![7, 9, 3, 20]);
        l.retain(|_, _| false);
        assert!(l.is_empty());
        assert_eq!(l.pop_lru(), None);
    }

    #[test]
    fn basic_order() {
        let mut l = Lru::new();
        assert!(l.is_empty());
        assert_eq!(l.insert(1, 10), None);
        assert_eq!(l.insert(2, 20), None);
        assert_eq!(l.insert(3, 30), None);
        assert_eq!(keys(&l), vec![1, 2, 3]);
        assert_eq!(l.get(1), Some(&10));
        assert_eq!(keys(&l), vec![2, 3, 1]);
        assert_eq!(l.peek(2), Some(&20));
        assert_eq!(keys(&l), vec![2, 3, 1]);
        assert_eq!(l.insert(3, 31), Some(30));
        assert_eq!(keys(&l), vec![2, 1, 3]);
        assert_eq!(l.peek_lru(), Some((&2, &20)));
        assert_eq!(l.pop_lru(), Some((2, 20)));
        assert_eq!(l.remove(3), Some(31));
        assert_eq!(l.remove(3), None);
        assert_eq!(keys(&l), vec![1]);
        assert_eq!(l.len(), 1);
        assert_eq!(l.pop_lru(), Some((1, 10)));
        assert_eq!(l.pop_lru(), None);
        assert!(l.is_empty());
        assert_eq!(l.peek_lru(), None);
    }

    #[test]
    fn slots_are_reused() {
        let mut l = Lru::new();
        for i in 0..100u32 {
            l.insert(i, i);
            if i >= 4 {
                l.pop_lru();
            }
        }
        assert_eq!(l.len(), 4);
        assert!(l.slots.len() <= 5, "slab grew to {}", l.slots.len());
        assert_eq!(keys(&l), vec![96, 97, 98, 99]);
    }

    #[test]
    fn pop_where_skips_and_keeps_order() {
        let mut l = Lru::new();
        for i in 0..6u32 {
            l.insert(i, i * 10);
        }
        // Pin the two least recent entries.
        assert_eq!(l.pop_lru_where(|k, _| *k >= 2), Some((2, 20)));
        assert_eq!(keys(&l), vec![0, 1, 3, 4, 5]);
        assert_eq!(l.pop_lru_where(|_, v| *v == 50), Some((5, 50)));
        assert_eq!(l.pop_lru_where(|_, _| false), None);
        assert_eq!(keys(&l), vec![0, 1, 3, 4]);
        l.insert(9, 90);
        assert_eq!(keys(&l), vec![0, 1, 3, 4, 9]);
    }

    #[test]
    fn iter_both_ends_and_mutation() {
        let mut l = Lru::new();
        for i in 0..5u32 {
            l.insert(i, i);
        }
        *l.get_mut(0).unwrap() = 100;
        *l.peek_mut(1).unwrap() = 101;
        assert!(l.touch(2));
        assert!(!l.touch(42));
        assert!(l.contains_key(4) && !l.contains_key(42));
        let fwd: Vec<_> = l.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(fwd, vec![(1, 101), (3, 3), (4, 4), (0, 100), (2, 2)]);
        let back: Vec<_> = l.iter().rev().map(|(k, _)| *k).collect();
        assert_eq!(back, vec![2, 0, 4, 3, 1]);
        let mut it = l.iter();
        assert_eq!(it.len(), 5);
        assert_eq!(it.next().map(|e| *e.0), Some(1));
        assert_eq!(it.next_back().map(|e| *e.0), Some(2));
        assert_eq!(it.len(), 3);
        assert_eq!(it.map(|e| *e.0).collect::<Vec<_>>(), vec![3, 4, 0]);
        assert_eq!(format!("{l:?}"), "{1: 101, 3: 3, 4: 4, 0: 100, 2: 2}");
        l.clear();
        assert!(l.is_empty());
        assert_eq!(l.iter().next(), None);
        l.insert(7, 7);
        assert_eq!(keys(&l), vec![7]);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32, u32),
        Get(u32),
        Peek(u32),
        Touch(u32),
        Remove(u32),
        PopLru,
        /// Pops the least recent entry whose value is divisible by the argument.
        PopWhere(u32),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0u32..16;
        prop_oneof![
            4 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => k.clone().prop_map(Op::Get),
            1 => k.clone().prop_map(Op::Peek),
            1 => k.clone().prop_map(Op::Touch),
            2 => k.prop_map(Op::Remove),
            2 => Just(Op::PopLru),
            2 => (1u32..4).prop_map(Op::PopWhere),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Compares against a `Vec` kept in recency order (least recent first).
        #[test]
        fn matches_model(ops in proptest::collection::vec(op(), 0..200)) {
            let mut l: Lru<u32, u32> = Lru::new();
            let mut model: Vec<(u32, u32)> = Vec::new();
            let pos = |m: &Vec<(u32, u32)>, k: u32| m.iter().position(|e| e.0 == k);
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let old = pos(&model, k).map(|i| model.remove(i).1);
                        model.push((k, v));
                        prop_assert_eq!(l.insert(k, v), old);
                    }
                    Op::Get(k) => {
                        let want = pos(&model, k).map(|i| {
                            let e = model.remove(i);
                            model.push(e);
                            e.1
                        });
                        prop_assert_eq!(l.get(k).copied(), want);
                    }
                    Op::Peek(k) => {
                        let want = pos(&model, k).map(|i| model[i].1);
                        prop_assert_eq!(l.peek(k).copied(), want);
                    }
                    Op::Touch(k) => {
                        let want = pos(&model, k).map(|i| {
                            let e = model.remove(i);
                            model.push(e);
                        });
                        prop_assert_eq!(l.touch(k), want.is_some());
                    }
                    Op::Remove(k) => {
                        let want = pos(&model, k).map(|i| model.remove(i).1);
                        prop_assert_eq!(l.remove(k), want);
                    }
                    Op::PopLru => {
                        let want = (!model.is_empty()).then(|| model.remove(0));
                        prop_assert_eq!(l.peek_lru().map(|(k, v)| (*k, *v)), want);
                        prop_assert_eq!(l.pop_lru(), want);
                    }
                    Op::PopWhere(d) => {
                        let want = model.iter().position(|e| e.1 % d == 0).map(|i| model.remove(i));
                        prop_assert_eq!(l.pop_lru_where(|_, v| v % d == 0), want);
                    }
                    Op::Clear => {
                        model.clear();
                        l.clear();
                    }
                }
                prop_assert_eq!(l.len(), model.len());
                let got: Vec<(u32, u32)> = l.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(&got, &model);
                let rev: Vec<(u32, u32)> = l.iter().rev().map(|(k, v)| (*k, *v)).collect();
                prop_assert!(rev.iter().eq(model.iter().rev()));
                prop_assert!(l.slots.len() <= 16 + 1, "slab leaked: {}", l.slots.len());
            }
        }
    }
}
