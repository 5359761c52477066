//! The browser's disk tier: the atlas' bytes kept across visits in the page's Cache
//! Storage, in fixed blocks ([`tessera_core::format::atlas::blocks`]), under a byte
//! budget.
//!
//! - **Cache Storage, not OPFS.** Cache Storage is on the main thread with promises and
//!   in every browser with WebGPU; OPFS's synchronous handles, the fast path, exist only
//!   in workers, and this viewer has none (see the module above).
//! - **One cache per version of the atlas**, named after its URL and identity (ETag, or
//!   Last-Modified and length): opening a new version deletes the old one's cache.
//! - **Budget**: the oldest written blocks go first (Cache Storage lists keys in the
//!   order they were written) once the blocks held pass the budget. A hit is not
//!   written again to refresh its age: that would cost a write for every read.
//! - **Checked**: a block whose length is not the one its place in the object gives is
//!   deleted and fetched again; the tile checks its CRC when it is decoded, as for any
//!   other source.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use tessera_core::format::atlas::blocks::{
    BlockGrid, block_key, block_of_key, cache_name, stale_cache_names,
};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::js_message;

/// What the disk tier has done (see [`super::RangeFetcher::disk_tier`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskTierStats {
    /// Blocks read from Cache Storage.
    pub hits: u64,
    /// Bytes of those blocks.
    pub hit_bytes: u64,
    /// Blocks looked up and not found (fetched from the network).
    pub misses: u64,
    /// Blocks written.
    pub writes: u64,
    /// Writes the browser refused (a full quota, say).
    pub write_failures: u64,
    /// Blocks deleted for the budget.
    pub evictions: u64,
    /// Blocks that had the wrong length and were deleted.
    pub rejected: u64,
    /// Bytes held now (this atlas' blocks).
    pub bytes_held: u64,
    /// The byte budget.
    pub budget: u64,
}

struct Inner {
    cache: web_sys::Cache,
    grid: BlockGrid,
    url: String,
    identity: String,
    stats: RefCell<DiskTierStats>,
    trimming: RefCell<bool>,
}

/// The disk tier of one atlas version (cheap to clone: shared).
#[derive(Clone)]
pub(super) struct DiskTier(Rc<Inner>);

impl DiskTier {
    /// Opens (or creates) the cache of `url` at `identity`, deleting its other
    /// versions' caches, and trims it to `budget` bytes. An error says why there is no
    /// disk tier (Cache Storage missing or refused).
    pub(super) async fn open(
        url: &str,
        identity: &str,
        object_len: u64,
        block: u64,
        budget: u64,
    ) -> Result<Self, String> {
        let window = web_sys::window().ok_or("no window")?;
        let caches =
            window.caches().map_err(|e| format!("Cache Storage is not available: {}", js_message(&e)))?;
        let names = await_value(caches.keys()).await?;
        let names: Vec<String> = js_sys::Array::from(&names).iter().filter_map(|n| n.as_string()).collect();
        for stale in stale_cache_names(&names, url, identity) {
            await_value(caches.delete(stale)).await?;
        }
        let name = cache_name(url, identity);
        let cache: web_sys::Cache =
            await_value(caches.open(&name)).await?.dyn_into().map_err(|_| "caches.open gave no Cache")?;
        let grid = BlockGrid::new(block, object_len);
        let held: u64 = js_sys::Array::from(&await_value(cache.keys()).await?)
            .iter()
            .filter_map(|r| r.dyn_into::<web_sys::Request>().ok())
            .filter_map(|r| block_of_key(&r.url()))
            .map(|k| grid.bytes_of(k).end - grid.bytes_of(k).start)
            .sum();
        let tier = Self(Rc::new(Inner {
            cache,
            grid,
            url: url.to_owned(),
            identity: identity.to_owned(),
            stats: RefCell::new(DiskTierStats { bytes_held: held, budget, ..DiskTierStats::default() }),
            trimming: RefCell::new(false),
        }));
        if held > budget {
            tier.trim().await;
        }
        Ok(tier)
    }

    /// The blocks of the object.
    pub(super) fn grid(&self) -> BlockGrid {
        self.0.grid
    }

    /// The version the tier holds.
    pub(super) fn identity(&self) -> &str {
        &self.0.identity
    }

    /// What it has done.
    pub(super) fn stats(&self) -> DiskTierStats {
        *self.0.stats.borrow()
    }

    /// The blocks `blocks` that the cache holds (all looked up at once), `None` for the
    /// others.
    pub(super) async fn lookup(&self, blocks: Range<u64>) -> Vec<Option<Vec<u8>>> {
        let inner = &self.0;
        let keys: Vec<String> = blocks.clone().map(|k| block_key(&inner.url, k)).collect();
        let matches = js_sys::Array::new();
        for key in &keys {
            matches.push(&inner.cache.match_with_str(key));
        }
        let Ok(found) = await_value(js_sys::Promise::all(&matches)).await else {
            inner.stats.borrow_mut().misses += keys.len() as u64;
            return vec![None; keys.len()];
        };
        let found = js_sys::Array::from(&found);
        // The bodies of the hits, read at once too.
        let mut bodies = js_sys::Array::new();
        let mut hit_at = Vec::new();
        for (i, value) in found.iter().enumerate() {
            if let Ok(response) = value.dyn_into::<web_sys::Response>()
                && let Ok(promise) = response.array_buffer()
            {
                bodies.push(&promise);
                hit_at.push(i);
            }
        }
        let mut out = vec![None; keys.len()];
        if !hit_at.is_empty() {
            match await_value(js_sys::Promise::all(&bodies)).await {
                Ok(read) => bodies = js_sys::Array::from(&read),
                Err(_) => hit_at.clear(),
            }
        }
        let mut stats = inner.stats.borrow_mut();
        for (j, &i) in hit_at.iter().enumerate() {
            let index = blocks.start + i as u64;
            let span = inner.grid.bytes_of(index);
            let data = js_sys::Uint8Array::new(&bodies.get(j as u32)).to_vec();
            if data.len() as u64 == span.end - span.start {
                stats.hits += 1;
                stats.hit_bytes += data.len() as u64;
                out[i] = Some(data);
            } else {
                stats.rejected += 1;
                stats.bytes_held = stats.bytes_held.saturating_sub(span.end - span.start);
                let _ = inner.cache.delete_with_str(&keys[i]);
            }
        }
        stats.misses += out.iter().filter(|b| b.is_none()).count() as u64;
        out
    }

    /// Writes the blocks `blocks` (their bytes in `parts`) in the background, then trims
    /// to the budget when it is passed.
    pub(super) fn store(&self, blocks: Range<u64>, parts: &[Vec<u8>]) {
        for (index, part) in blocks.zip(parts) {
            let mut body = part.clone();
            let Ok(response) = web_sys::Response::new_with_opt_u8_array(Some(&mut body)) else {
                self.0.stats.borrow_mut().write_failures += 1;
                continue;
            };
            let put = self.0.cache.put_with_str(&block_key(&self.0.url, index), &response);
            let tier = self.clone();
            let len = part.len() as u64;
            wasm_bindgen_futures::spawn_local(async move {
                let ok = JsFuture::from(put).await.is_ok();
                let over = {
                    let mut s = tier.0.stats.borrow_mut();
                    if ok {
                        s.writes += 1;
                        s.bytes_held += len;
                    } else {
                        s.write_failures += 1;
                    }
                    s.bytes_held > s.budget
                };
                if over && !*tier.0.trimming.borrow() {
                    tier.trim().await;
                }
            });
        }
    }

    /// Deletes the oldest blocks until 90% of the budget is held.
    async fn trim(&self) {
        *self.0.trimming.borrow_mut() = true;
        if let Ok(keys) = await_value(self.0.cache.keys()).await {
            let target = self.0.stats.borrow().budget / 10 * 9;
            for request in
                js_sys::Array::from(&keys).iter().filter_map(|r| r.dyn_into::<web_sys::Request>().ok())
            {
                if self.0.stats.borrow().bytes_held <= target {
                    break;
                }
                let Some(index) = block_of_key(&request.url()) else { continue };
                if await_value(self.0.cache.delete_with_request(&request)).await.is_ok() {
                    let span = self.0.grid.bytes_of(index);
                    let mut s = self.0.stats.borrow_mut();
                    s.evictions += 1;
                    s.bytes_held = s.bytes_held.saturating_sub(span.end - span.start);
                }
            }
        }
        *self.0.trimming.borrow_mut() = false;
    }
}

/// Awaits a promise, its rejection as a message.
async fn await_value(promise: js_sys::Promise) -> Result<JsValue, String> {
    JsFuture::from(promise).await.map_err(|e| js_message(&e))
}
