//! The local disk tier between host RAM and the network: stored tile blobs of one
//! remote atlas, exactly as the atlas holds them (compressed), in files under a byte
//! budget, least recently used first out.
//!
//! - **Keyed by the object's identity.** Each remote object (URL) has a directory, and
//!   each identity of it (ETag, or size and modification time when there is no ETag)
//!   a subdirectory: an atlas replaced on the server starts a new one (and the old one
//!   is deleted), so old and new tiles are never mixed and folders do not pile up.
//!   `current` in the URL's directory names the identity last seen, which lets an
//!   atlas open from the cache while its server is down.
//! - **Crash-safe.** An entry is written to a temporary file and renamed into place;
//!   temporary files left by a killed process are deleted when the cache opens and
//!   never read. Every read is checked against the CRC-32 and length the atlas index
//!   gives for that blob; an entry that fails (a torn write after a power cut, a
//!   damaged disk) is deleted and counted, and the tile comes from the network.
//! - **Why not a cache crate**: cacache has no byte budget or eviction, and foyer's
//!   hybrid cache brings its own async runtime and on-disk format for what is here a
//!   few hundred lines whose every rule (identity directories, CRC from the index, a
//!   pinned index entry) is specific to atlases.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The cache's counters (see [`DiskCache::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DiskCacheStats {
    /// Reads served from disk.
    pub hits: u64,
    /// Reads not found on disk.
    pub misses: u64,
    /// Bytes served from disk.
    pub hit_bytes: u64,
    /// Entries written.
    pub writes: u64,
    /// Entries evicted for the budget.
    pub evictions: u64,
    /// Entries that failed their CRC or length check and were deleted.
    pub rejected: u64,
    /// Bytes held now (tile entries; the pinned index entry not included).
    pub bytes: u64,
}

/// Name of the pinned entry holding header, layer table and tile index.
const META: &str = "meta";
/// Suffix of files being written.
const TEMP_SUFFIX: &str = ".tmp";

struct Entry {
    bytes: u64,
    last_use: u64,
}

struct State {
    entries: HashMap<u64, Entry>,
    bytes: u64,
    tick: u64,
}

/// One remote object identity's disk cache.
pub struct DiskCache {
    dir: PathBuf,
    budget: u64,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    writes: AtomicU64,
    evictions: AtomicU64,
    rejected: AtomicU64,
    temp_seq: AtomicU64,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache").field("dir", &self.dir).field("budget", &self.budget).finish()
    }
}

/// A short stable hex name for `text` (FNV-1a, 64 bits): directory names for URLs and
/// identities, which may hold characters a file name cannot.
pub fn hex_name(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl DiskCache {
    /// The cache of `url` at `identity` under `root`, holding at most `budget` bytes of
    /// tiles: creates the directories, records `identity` as the URL's current one,
    /// deletes temporary files left by a killed process and takes in the entries found.
    pub fn open(root: &Path, url: &str, identity: &str, budget: u64) -> std::io::Result<Self> {
        let object_dir = root.join(hex_name(url));
        let dir = object_dir.join(hex_name(identity));
        fs::create_dir_all(&dir)?;
        write_atomic(&object_dir, "current", identity.as_bytes(), 0)?;
        // The URL's other identities are earlier versions of the object (or the answers
        // of a server whose ETag changes on every response): never read again, so they
        // go now, instead of piling up one folder per run.
        for item in fs::read_dir(&object_dir)?.flatten() {
            if item.file_name() != dir.file_name().unwrap_or_default()
                && item.file_type().is_ok_and(|t| t.is_dir())
            {
                let _ = fs::remove_dir_all(item.path());
            }
        }
        let mut entries = HashMap::new();
        let mut bytes = 0;
        let mut found: Vec<(u64, u64, std::time::SystemTime)> = Vec::new();
        for item in fs::read_dir(&dir)? {
            let item = item?;
            let name = item.file_name().to_string_lossy().into_owned();
            if name.ends_with(TEMP_SUFFIX) {
                // A write a killed process never finished: never served.
                let _ = fs::remove_file(item.path());
                continue;
            }
            let Ok(key) = u64::from_str_radix(&name, 16) else { continue };
            let meta = item.metadata()?;
            found.push((key, meta.len(), meta.modified().unwrap_or(std::time::UNIX_EPOCH)));
        }
        // Oldest first, so the last used ones get the highest ticks.
        found.sort_by_key(|f| f.2);
        for (tick, (key, len, _)) in found.into_iter().enumerate() {
            bytes += len;
            entries.insert(key, Entry { bytes: len, last_use: tick as u64 });
        }
        let tick = entries.len() as u64;
        let cache = Self {
            dir,
            budget,
            state: Mutex::new(State { entries, bytes, tick }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            temp_seq: AtomicU64::new(0),
        };
        cache.evict_to(budget);
        Ok(cache)
    }

    /// The identity last recorded for `url` under `root` (by [`DiskCache::open`]).
    pub fn current_identity(root: &Path, url: &str) -> Option<String> {
        fs::read_to_string(root.join(hex_name(url)).join("current")).ok().filter(|s| !s.is_empty())
    }

    /// The directory of this identity's entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether an entry is stored under `key` (not read, not checked, not counted).
    pub fn contains(&self, key: u64) -> bool {
        self.state.lock().ok().is_some_and(|s| s.entries.contains_key(&key))
    }

    /// The blob stored under `key` if it is there and has `len` bytes of CRC-32 `crc`;
    /// an entry that fails the check is deleted.
    pub fn get(&self, key: u64, len: u32, crc: u32) -> Option<Vec<u8>> {
        let known = self.state.lock().ok().is_some_and(|s| s.entries.contains_key(&key));
        let data = known.then(|| fs::read(self.path_of(key)).ok()).flatten();
        let Some(data) = data else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if data.len() != len as usize || crc32fast::hash(&data) != crc {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            self.misses.fetch_add(1, Ordering::Relaxed);
            self.remove(key);
            tracing::warn!(dir = %self.dir.display(), key, "disk cache entry failed its check; deleted");
            return None;
        }
        if let Ok(mut s) = self.state.lock() {
            s.tick += 1;
            let tick = s.tick;
            if let Some(e) = s.entries.get_mut(&key) {
                e.last_use = tick;
            }
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.hit_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        Some(data)
    }

    /// Stores `data` under `key` (atomically: a reader sees the whole entry or none),
    /// then evicts least recently used entries past the budget. Failures to write are
    /// logged and otherwise ignored: the cache is an optimisation.
    pub fn put(&self, key: u64, data: &[u8]) {
        if data.len() as u64 > self.budget {
            return;
        }
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = write_atomic(&self.dir, &format!("{key:016x}"), data, seq) {
            tracing::warn!(dir = %self.dir.display(), "disk cache write failed: {e}");
            return;
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut s) = self.state.lock() {
            s.tick += 1;
            let tick = s.tick;
            let old = s.entries.insert(key, Entry { bytes: data.len() as u64, last_use: tick });
            s.bytes = s.bytes - old.map_or(0, |o| o.bytes) + data.len() as u64;
        }
        self.evict_to(self.budget);
    }

    /// The pinned copy of the atlas' header, layer table and index, if stored.
    pub fn meta(&self) -> Option<Vec<u8>> {
        fs::read(self.dir.join(META)).ok()
    }

    /// Stores the atlas' header, layer table and index (pinned: not counted in the
    /// budget, never evicted; checked by the atlas' own checksum when read).
    pub fn put_meta(&self, data: &[u8]) {
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = write_atomic(&self.dir, META, data, seq) {
            tracing::warn!(dir = %self.dir.display(), "disk cache write failed: {e}");
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> DiskCacheStats {
        DiskCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            bytes: self.state.lock().map_or(0, |s| s.bytes),
        }
    }

    fn path_of(&self, key: u64) -> PathBuf {
        self.dir.join(format!("{key:016x}"))
    }

    fn remove(&self, key: u64) {
        if let Ok(mut s) = self.state.lock()
            && let Some(e) = s.entries.remove(&key)
        {
            s.bytes -= e.bytes;
        }
        let _ = fs::remove_file(self.path_of(key));
    }

    fn evict_to(&self, budget: u64) {
        let victims: Vec<u64> = {
            let Ok(mut s) = self.state.lock() else { return };
            if s.bytes <= budget {
                return;
            }
            let mut order: Vec<(u64, u64, u64)> =
                s.entries.iter().map(|(&k, e)| (e.last_use, k, e.bytes)).collect();
            order.sort_unstable();
            let mut out = Vec::new();
            for (_, key, bytes) in order {
                if s.bytes <= budget {
                    break;
                }
                s.entries.remove(&key);
                s.bytes -= bytes;
                out.push(key);
            }
            out
        };
        self.evictions.fetch_add(victims.len() as u64, Ordering::Relaxed);
        for key in victims {
            let _ = fs::remove_file(self.path_of(key));
        }
    }
}

/// Writes `data` to `dir/name` through a temporary file renamed into place.
fn write_atomic(dir: &Path, name: &str, data: &[u8], seq: u64) -> std::io::Result<()> {
    let temp = dir.join(format!("{name}.{}.{seq}{TEMP_SUFFIX}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&temp)?;
        f.write_all(data)?;
        drop(f);
        fs::rename(&temp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn blob(key: u64, n: usize) -> Vec<u8> {
        (0..n).map(|i| (i as u64 ^ key) as u8).collect()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn entries_round_trip_and_survive_a_reopen() {
        let root = tempfile::tempdir().unwrap();
        let c = DiskCache::open(root.path(), "http://h/a.tsa", "etag-1", 1 << 20).unwrap();
        let b = blob(7, 1000);
        assert!(c.get(7, 1000, crc32fast::hash(&b)).is_none());
        c.put(7, &b);
        assert_eq!(c.get(7, 1000, crc32fast::hash(&b)).unwrap(), b);
        c.put_meta(b"index bytes");
        drop(c);
        let c = DiskCache::open(root.path(), "http://h/a.tsa", "etag-1", 1 << 20).unwrap();
        assert_eq!(c.get(7, 1000, crc32fast::hash(&b)).unwrap(), b);
        assert_eq!(c.meta().unwrap(), b"index bytes");
        assert_eq!(DiskCache::current_identity(root.path(), "http://h/a.tsa").unwrap(), "etag-1");
        let s = c.stats();
        assert_eq!((s.hits, s.bytes), (1, 1000));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn another_identity_never_sees_the_old_tiles() {
        let root = tempfile::tempdir().unwrap();
        let b = blob(1, 64);
        DiskCache::open(root.path(), "s3://b/k", "v1", 1 << 20).unwrap().put(1, &b);
        let c = DiskCache::open(root.path(), "s3://b/k", "v2", 1 << 20).unwrap();
        assert!(c.get(1, 64, crc32fast::hash(&b)).is_none());
        assert!(c.meta().is_none());
        assert_eq!(DiskCache::current_identity(root.path(), "s3://b/k").unwrap(), "v2");
        let other = DiskCache::open(root.path(), "s3://b/other", "v1", 1 << 20).unwrap();
        assert!(other.get(1, 64, crc32fast::hash(&b)).is_none());
        // The old identity's folder is gone: one per URL, however often the ETag changes.
        for v in ["v3", "v4", "v5"] {
            DiskCache::open(root.path(), "s3://b/k", v, 1 << 20).unwrap().put(1, &b);
        }
        let folders = fs::read_dir(root.path().join(hex_name("s3://b/k")))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_dir())
            .count();
        assert_eq!(folders, 1);
        assert!(c.dir().parent().unwrap().join(hex_name("v5")).is_dir() && !c.dir().exists());
    }

    /// A killed writer leaves a temporary file (deleted at open, never served); a torn
    /// or damaged entry fails the index CRC and is deleted.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn torn_and_leftover_writes_are_never_served() {
        let root = tempfile::tempdir().unwrap();
        let b = blob(3, 500);
        let crc = crc32fast::hash(&b);
        let c = DiskCache::open(root.path(), "http://h/a", "e", 1 << 20).unwrap();
        c.put(3, &b);
        c.put(4, &b);
        let dir = c.dir().to_path_buf();
        drop(c);
        // A write killed before its rename, for key 5.
        fs::write(dir.join(format!("{:016x}.999.0{TEMP_SUFFIX}", 5u64)), &b[..100]).unwrap();
        // Key 3 torn (a power cut after the rename), key 4 flipped.
        fs::write(dir.join(format!("{:016x}", 3u64)), &b[..250]).unwrap();
        let mut flipped = b.clone();
        flipped[10] ^= 1;
        fs::write(dir.join(format!("{:016x}", 4u64)), &flipped).unwrap();
        let c = DiskCache::open(root.path(), "http://h/a", "e", 1 << 20).unwrap();
        assert!(
            fs::read_dir(&dir).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(TEMP_SUFFIX))
        );
        assert!(c.get(5, 500, crc).is_none());
        assert!(c.get(3, 500, crc).is_none());
        assert!(c.get(4, 500, crc).is_none());
        assert_eq!(c.stats().rejected, 2);
        assert!(!dir.join(format!("{:016x}", 3u64)).exists(), "a rejected entry is deleted");
        c.put(3, &b);
        assert_eq!(c.get(3, 500, crc).unwrap(), b);
    }

    /// The budget holds; the least recently used entries go first.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn the_budget_evicts_least_recently_used_first() {
        let root = tempfile::tempdir().unwrap();
        let c = DiskCache::open(root.path(), "http://h/a", "e", 3000).unwrap();
        let b: Vec<Vec<u8>> = (0..4).map(|k| blob(k, 1000)).collect();
        let crc = |k: usize| crc32fast::hash(&b[k]);
        c.put(0, &b[0]);
        c.put(1, &b[1]);
        c.put(2, &b[2]);
        assert!(c.get(0, 1000, crc(0)).is_some()); // 1 is now the oldest
        c.put(3, &b[3]);
        let s = c.stats();
        assert_eq!((s.bytes, s.evictions), (3000, 1));
        assert!(c.get(1, 1000, crc(1)).is_none());
        for k in [0, 2, 3] {
            assert!(c.get(k as u64, 1000, crc(k)).is_some(), "{k}");
        }
        // A reopen with a smaller budget trims at once.
        drop(c);
        let c = DiskCache::open(root.path(), "http://h/a", "e", 1500).unwrap();
        assert_eq!(c.stats().bytes, 1000);
    }
}
