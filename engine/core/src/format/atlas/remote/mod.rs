//! Atlases read over the network: `s3://bucket/key` (any S3-compatible store),
//! `gs://bucket/key` (Google Cloud Storage), `az://container/key` (Azure Blob Storage)
//! and `http://` / `https://` (a web server or CDN that answers range requests), through
//! the `object_store` crate (range requests, timeouts, retries with backoff).
//!
//! The object's identity (ETag, else its size) is taken when it is opened, and every
//! range read asks for that same ETag (`If-Match`): an atlas replaced on the server
//! while in use gives [`RemoteError::Replaced`] for every later read, never a mix of old
//! and new bytes. Reads block the calling thread (a loader thread, never the render
//! thread) on a small runtime owned by the object.
//!
//! Credentials, regions and endpoints come from each store's standard environment
//! variables: S3's `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_REGION`, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`...; GCS's `GOOGLE_SERVICE_ACCOUNT` (a
//! service-account JSON file), `GOOGLE_APPLICATION_CREDENTIALS`...; Azure's
//! `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_KEY`,
//! `AZURE_STORAGE_USE_EMULATOR`... They are never logged or shown in errors.
//!
//! By concern: this file holds [`RemoteObject`] (opening, range reads, coalescing,
//! read-ahead, statistics); `store.rs` the object store behind a URL; `errors.rs` what
//! a failure says.

use std::ops::Range;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;

use super::RemoteOptions;
use super::disk_cache::DiskCache;

pub use super::NetworkStats;
use object_store::{BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig};

pub use super::REMOTE_SCHEMES;
// The opening read and the coalescing rules, shared with the ranged byte cache.
pub use super::ranges::{MAX_GAP_BYTES, MAX_RANGE_BYTES, OPEN_PREFIX, coalesce};

mod errors;
mod store;
pub(crate) mod upload;

pub(crate) use errors::map_error;
use errors::*;
pub(crate) use store::{built_for, store_for};

/// Whether `location` names a remote atlas (one of [`REMOTE_SCHEMES`]).
pub fn is_remote(location: &str) -> bool {
    super::is_remote_location(std::path::Path::new(location))
}

/// The longest an index page read waits for a read-ahead in flight that will bring
/// it (past that, the page is asked for on its own).
const AHEAD_WAIT: Duration = Duration::from_secs(10);

/// How long one request may take before it is retried.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Retries of a failed request (connection errors, timeouts, 5xx), with exponential
/// backoff from 50 ms, all within [`RETRY_WINDOW`].
pub const MAX_RETRIES: usize = 3;
/// The longest a read keeps retrying before it reports the tile unavailable.
pub const RETRY_WINDOW: Duration = Duration::from_secs(8);

/// Requests in flight at once on one object, over all loader threads.
pub const MAX_IN_FLIGHT: usize = 32;
/// How often an in-flight range checks whether its tiles are still wanted.
pub const CANCEL_POLL: Duration = Duration::from_millis(10);

/// Why a remote read failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RemoteError {
    /// The location could not be understood or the store could not be set up.
    #[error("{0}")]
    Config(String),
    /// The object is not there.
    #[error("not found on the server (no object at that key or path)")]
    NotFound,
    /// The object changed on the server since it was opened (another ETag).
    #[error("the atlas was replaced on the server since it was opened")]
    Replaced,
    /// The server answered with fewer bytes than asked for.
    #[error("short read: {got} bytes of {want} at offset {offset}")]
    Short {
        /// Offset asked for.
        offset: u64,
        /// Bytes asked for.
        want: u64,
        /// Bytes received.
        got: u64,
    },
    /// The network or the server failed (after retries); trying again later may work.
    #[error("{0}")]
    Unavailable(String),
    /// The server refused the credentials (401) or the access (403): never retried, and
    /// never answered from the disk cache unless asked to ([`RemoteOptions::offline`]).
    #[error("{0}")]
    Denied(String),
    /// Nothing wanted the bytes any more: the request was abandoned.
    #[error("cancelled: no longer wanted")]
    Cancelled,
}

impl RemoteError {
    /// Whether trying again later may succeed (a network or server failure).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Short { .. })
    }
}

/// Latencies kept for the percentiles ([`NetworkStats::latency_p50_ms`]).
pub const LATENCY_WINDOW: usize = 1024;

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    failures: AtomicU64,
    cancelled: AtomicU64,
    bytes: AtomicU64,
    /// Bytes of the blobs asked for (without the gaps read with them).
    useful_bytes: AtomicU64,
    /// Blobs received from the server.
    blobs: AtomicU64,
    in_flight: AtomicU64,
    /// Ring of the last latencies (ms) and the next slot.
    latencies: Mutex<(Vec<f32>, usize)>,
}

/// One object in a store, opened for range reads.
pub struct RemoteObject {
    store: Arc<dyn ObjectStore>,
    /// Who answers, for what a refusal means.
    access: Access,
    path: ObjectPath,
    runtime: tokio::runtime::Runtime,
    size: u64,
    etag: Option<String>,
    counters: Arc<Counters>,
    /// Bytes read ahead in the background ([`RemoteObject::read_ahead`]).
    ahead: Arc<Ahead>,
    cache: Option<Arc<DiskCache>>,
    /// Header, layer table and index from the disk cache (served without requests).
    cached_meta: Option<Vec<u8>>,
    /// The object's first bytes, read when it was opened.
    prefix: Vec<u8>,
    /// Opened from the disk cache while the server could not be reached.
    offline: bool,
    /// Bounds the requests in flight at once ([`MAX_IN_FLIGHT`]).
    permits: tokio::sync::Semaphore,
    /// After a request that could not reach the server: until when no request is made
    /// (reads fail at once with the reason), so that a stopped server costs one failed
    /// request per [`UNREACHABLE_PAUSE`], not one (with its retries) per tile.
    unreachable: Mutex<Option<(Instant, String)>>,
    /// Opened with [`RemoteOptions::offline`]: no request is ever made.
    forced_offline: bool,
}

/// How long a remote object makes no request after one could not reach the server.
pub const UNREACHABLE_PAUSE: Duration = Duration::from_secs(1);

/// The background read of a small index ([`RemoteObject::read_ahead`]): the range
/// while its request is in flight, then its bytes once they arrived.
#[derive(Default)]
struct Ahead {
    /// Offset and bytes, once read.
    bytes: std::sync::OnceLock<(u64, Vec<u8>)>,
    /// The range being read; `None` once the request ended (read, failed or dropped).
    pending: Mutex<Option<Range<u64>>>,
    /// Signalled when `pending` is cleared.
    ended: std::sync::Condvar,
}

impl Ahead {
    /// Waits (at most `limit`) for an in-flight read-ahead that covers `offset..end`,
    /// so a page it is about to bring is not asked for a second time.
    fn wait_for(&self, offset: u64, end: u64, limit: Duration) {
        let Ok(pending) = self.pending.lock() else { return };
        let covers = |p: &Option<Range<u64>>| p.as_ref().is_some_and(|r| r.start <= offset && end <= r.end);
        let _ = self.ended.wait_timeout_while(pending, limit, |p| covers(p));
    }
}

/// Clears [`Ahead::pending`] and wakes the waiters when dropped, however the
/// read-ahead ended (its task may also be dropped with the runtime).
struct AheadEnded(Arc<Ahead>);

impl Drop for AheadEnded {
    fn drop(&mut self) {
        if let Ok(mut p) = self.0.pending.lock() {
            *p = None;
        }
        self.0.ended.notify_all();
    }
}

/// Counts a request in flight until dropped (finished, failed or abandoned).
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteObject").field("path", &self.path).field("size", &self.size).finish()
    }
}

impl RemoteObject {
    /// Opens `location` (`s3://bucket/key`, `gs://bucket/key`, `az://container/key`,
    /// `http(s)://host[:port]/path`): sets up the
    /// store and asks for the object's size and identity, with the disk cache of
    /// `options`. When the server cannot be reached and the disk cache holds this
    /// URL's index, the object opens offline from the cache (tiles not cached are
    /// unavailable until the server is back, and are then checked against the same
    /// identity).
    pub fn open(location: &str, options: &RemoteOptions) -> Result<Self, RemoteError> {
        let (store, path) = store_for(location, &options.s3)?;
        let access = Access::with(location, &options.s3);
        // Logs and errors name the location without its query values (credentials).
        let shown = crate::error_text::redact_url(location);
        let cache_key = store::cache_key(location, &options.s3);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tessera-net")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Config(format!("starting the network runtime: {e}")))?;
        let cache_dir = options.disk_cache_dir.as_deref();
        // One request for the identity and the first bytes (header, layer table and
        // usually the whole index), instead of a HEAD and then reads.
        let first = if options.offline {
            // Stands for "not reached": the disk cache answers, or nothing does.
            Err(RemoteError::Unavailable(
                "offline (--offline / TESSERA_OFFLINE): the server is not asked".into(),
            ))
        } else {
            runtime
                .block_on(async {
                    let got = store
                        .get_opts(
                            &path,
                            GetOptions {
                                range: Some(GetRange::Bounded(0..OPEN_PREFIX)),
                                ..Default::default()
                            },
                        )
                        .await?;
                    let meta = got.meta.clone();
                    let start = got.range.start;
                    got.bytes().await.map(|b| (meta, start, b))
                })
                .map_err(|e| map_error_at(e, access))
        };
        let first = match first {
            Err(RemoteError::NotFound) if matches!(access, Access::Cloud | Access::CloudGiven) => {
                Err(runtime.block_on(not_found(&*store, &path)))
            }
            other => other,
        };
        let mut prefix = Vec::new();
        let (identity, size, etag, offline) = match first {
            Ok((meta, start, bytes)) => {
                if start == 0 {
                    prefix = bytes.to_vec();
                }
                let id = identity(meta.e_tag.as_deref(), meta.size, meta.last_modified.timestamp());
                (id, meta.size, meta.e_tag, false)
            }
            Err(e) if e.is_transient() => {
                let cached = cache_dir.and_then(|d| DiskCache::current_identity(d, &cache_key));
                let Some((id, size, etag)) =
                    cached.and_then(|id| parse_identity(&id).map(|(s, e)| (id, s, e)))
                else {
                    return Err(e);
                };
                if !options.offline {
                    tracing::warn!("{shown}: {e}; opening from the disk cache");
                }
                (id, size, etag, true)
            }
            Err(e) => return Err(e),
        };
        let cache = cache_dir.and_then(|d| {
            match DiskCache::open(d, &cache_key, &identity, options.disk_cache_bytes) {
                Ok(c) => Some(Arc::new(c)),
                Err(e) => {
                    tracing::warn!(dir = %d.display(), "disk cache unavailable: {e}");
                    None
                }
            }
        });
        let cached_meta = cache.as_deref().and_then(DiskCache::meta);
        if offline && cached_meta.is_none() {
            return Err(RemoteError::Unavailable(format!(
                "{shown}: the server cannot be reached and the disk cache has no index for it"
            )));
        }
        let counters = Arc::new(Counters::default());
        if !offline {
            // The opening request.
            counters.requests.store(1, Ordering::Relaxed);
            counters.bytes.store(prefix.len() as u64, Ordering::Relaxed);
        }
        let permits = tokio::sync::Semaphore::new(MAX_IN_FLIGHT);
        let ahead = Arc::new(Ahead::default());
        Ok(Self {
            store,
            access,
            path,
            runtime,
            size,
            etag,
            counters,
            ahead,
            cache,
            cached_meta,
            prefix,
            offline,
            permits,
            forced_offline: options.offline,
            unreachable: Mutex::new(offline.then(|| {
                (
                    Instant::now() + UNREACHABLE_PAUSE,
                    "the server could not be reached when the atlas was opened".into(),
                )
            })),
        })
    }

    /// Whether the object was opened from the disk cache without reaching the server.
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// Keeps the atlas' checked header, layer table and index in the disk cache, so
    /// the next open needs no request for them (and works while the server is down).
    pub fn remember_meta(&self, meta: &[u8]) {
        if let Some(c) = &self.cache
            && self.cached_meta.as_deref() != Some(meta)
        {
            c.put_meta(meta);
        }
    }

    /// Whether `len` bytes at `offset` can be had without a request: in the bytes read
    /// at open or ahead, or (as one entry) in the disk cache.
    pub fn at_hand(&self, offset: u64, len: u64) -> bool {
        self.known(offset, len).is_some() || self.cache.as_ref().is_some_and(|c| c.contains(offset))
    }

    /// The blob of `len` bytes at `offset` (CRC-32 `crc`) if the disk cache holds it:
    /// never a request.
    pub fn cached_blob(&self, offset: u64, len: u32, crc: u32) -> Option<Vec<u8>> {
        let cache = self.cache.as_ref().filter(|c| c.contains(offset))?;
        cache.get(offset, len, crc)
    }

    /// A tile blob of `len` bytes at `offset` whose CRC-32 should be `crc`: from the
    /// disk cache when it holds it, else from the server (then cached when the CRC
    /// matches; a mismatch is returned as read, for the caller to report).
    pub fn read_blob(&self, offset: u64, len: u32, crc: u32) -> Result<Vec<u8>, RemoteError> {
        self.read_blobs(&[(offset, len, crc)], &|_| true).pop().unwrap_or(Err(RemoteError::Cancelled))
    }

    /// An index page of `len` bytes at `offset` (CRC-32 `crc`): from the bytes read at
    /// open when they hold it (the same identity; then also written to the disk cache),
    /// else like a blob (disk cache, then the server).
    pub fn read_page(&self, offset: u64, len: u32, crc: u32) -> Result<Vec<u8>, RemoteError> {
        if self.known(offset, u64::from(len)).is_none() {
            // A read-ahead on its way with this page: wait for it rather than ask twice.
            self.ahead.wait_for(offset, offset + u64::from(len), AHEAD_WAIT);
        }
        if let Some(bytes) = self.known(offset, u64::from(len)) {
            // Kept in the disk cache as well, for an open while the server is down.
            if let Some(c) = &self.cache
                && crc32fast::hash(bytes) == crc
            {
                c.put(offset, bytes);
            }
            return Ok(bytes.to_vec());
        }
        self.read_blob(offset, len, crc)
    }

    /// The `len` bytes at `offset` when they are already here: in the index kept by the
    /// disk cache, the bytes read at open, or those read ahead (all of the opened
    /// identity).
    fn known(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        let ahead = self.ahead.bytes.get().and_then(|(at, b)| slice_at(b, *at, offset, end));
        self.cached_meta
            .as_deref()
            .and_then(|m| slice_at(m, 0, offset, end))
            .or_else(|| slice_at(&self.prefix, 0, offset, end))
            .or(ahead)
    }

    /// Reads `range` (the rest of a small atlas index) with one request in the
    /// background, without blocking: once it has arrived, [`RemoteObject::read_page`]
    /// serves the pages inside it without a request, and the disk cache holds each page
    /// of `page_bytes` from `range.start` for the next run. A failure is only logged (the
    /// pages are then read when wanted). Does nothing offline, past the object, or when
    /// the disk cache already holds the page at `range.start`.
    pub fn read_ahead(&self, range: Range<u64>, page_bytes: u64, page_crcs: Vec<u32>) {
        if self.offline || range.end > self.size || range.is_empty() || self.ahead.bytes.get().is_some() {
            return;
        }
        if self.cache.as_ref().is_some_and(|c| c.contains(range.start)) {
            // An earlier run cached the pages (the first of them at least): they come
            // from the disk as they are wanted.
            return;
        }
        let (store, path, etag, access) =
            (self.store.clone(), self.path.clone(), self.etag.clone(), self.access);
        let (counters, ahead, cache) = (self.counters.clone(), self.ahead.clone(), self.cache.clone());
        let start = range.start;
        match self.ahead.pending.lock() {
            Ok(mut p) if p.is_none() => *p = Some(range.clone()),
            // One read-ahead at a time.
            _ => return,
        }
        let ended = AheadEnded(ahead.clone());
        self.runtime.spawn(async move {
            let _ended = ended;
            counters.requests.fetch_add(1, Ordering::Relaxed);
            let options = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                if_match: etag,
                ..Default::default()
            };
            let got = match store.get_opts(&path, options).await {
                Ok(got) => got.bytes().await,
                Err(e) => Err(e),
            };
            match got {
                Ok(bytes) if bytes.len() as u64 == range.end - range.start => {
                    counters.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    if let Some(c) = &cache {
                        // Page by page, for the next run: only the pages that pass their
                        // CRC (a damaged one is asked for again when it is wanted).
                        for (i, page) in bytes.chunks(page_bytes.max(1) as usize).enumerate() {
                            if page_crcs.get(i).is_some_and(|&crc| crc32fast::hash(page) == crc) {
                                c.put(start + i as u64 * page_bytes.max(1), page);
                            }
                        }
                    }
                    let _ = ahead.bytes.set((start, bytes.to_vec()));
                }
                Ok(short) => tracing::warn!(
                    "reading the index ahead: {} of {} bytes",
                    short.len(),
                    range.end - range.start
                ),
                Err(e) => {
                    counters.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("reading the index ahead: {}", map_error_at(e, access));
                }
            }
        });
    }

    /// The length of the bytes read at open (from offset 0).
    pub fn prefix_len(&self) -> u64 {
        self.prefix.len() as u64
    }

    /// Several blobs `(offset, length, crc)` at once, in the order asked: those the
    /// disk cache holds from there, the others with the ranges of [`coalesce`], all
    /// requested concurrently (at most [`MAX_IN_FLIGHT`] per object). `keep(i)` says
    /// whether blob `i` is still wanted: one not wanted before its request is not
    /// asked for, and a range whose blobs are all unwanted is abandoned in flight
    /// (checked every [`CANCEL_POLL`]); those blobs are [`RemoteError::Cancelled`].
    /// Blobs whose bytes pass their CRC are written to the disk cache; the others are
    /// returned as read, for the caller to report.
    pub fn read_blobs(
        &self,
        blobs: &[(u64, u32, u32)],
        keep: &dyn Fn(usize) -> bool,
    ) -> Vec<Result<Vec<u8>, RemoteError>> {
        let mut out: Vec<Result<Vec<u8>, RemoteError>> = vec![Err(RemoteError::Cancelled); blobs.len()];
        let mut misses = Vec::new();
        for (i, &(offset, len, crc)) in blobs.iter().enumerate() {
            if let Some(hit) = self.cache.as_ref().and_then(|c| c.get(offset, len, crc)) {
                out[i] = Ok(hit);
            } else if keep(i) {
                misses.push(i);
            }
        }
        let spans: Vec<(u64, u32)> = misses.iter().map(|&i| (blobs[i].0, blobs[i].1)).collect();
        let ranges = coalesce(&spans);
        let fetched =
            self.runtime.block_on(futures_util::future::join_all(ranges.iter().map(|(range, members)| {
                self.get_unless(range.clone(), || members.iter().all(|&k| !keep(misses[k])))
            })));
        for ((range, members), got) in ranges.iter().zip(fetched) {
            let got = got.and_then(|bytes| {
                let want = range.end - range.start;
                if bytes.len() as u64 == want {
                    Ok(bytes)
                } else {
                    Err(RemoteError::Short { offset: range.start, want, got: bytes.len() as u64 })
                }
            });
            for &k in members {
                let i = misses[k];
                let (offset, len, crc) = blobs[i];
                out[i] = got.clone().map(|bytes| {
                    let at = (offset - range.start) as usize;
                    let blob = bytes[at..at + len as usize].to_vec();
                    self.counters.blobs.fetch_add(1, Ordering::Relaxed);
                    self.counters.useful_bytes.fetch_add(u64::from(len), Ordering::Relaxed);
                    if let Some(c) = &self.cache
                        && crc32fast::hash(&blob) == crc
                    {
                        c.put(offset, &blob);
                    }
                    blob
                });
            }
        }
        out
    }

    /// [`RemoteObject::get_async`], abandoned once `cancelled()` says so (asked every
    /// [`CANCEL_POLL`] while waiting).
    async fn get_unless(
        &self,
        range: Range<u64>,
        cancelled: impl Fn() -> bool,
    ) -> Result<Vec<u8>, RemoteError> {
        let mut request = std::pin::pin!(self.get_async(range));
        loop {
            match tokio::time::timeout(CANCEL_POLL, request.as_mut()).await {
                Ok(result) => return result,
                Err(_) if cancelled() => {
                    self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    return Err(RemoteError::Cancelled);
                }
                Err(_) => {}
            }
        }
    }

    /// Counts `len` bytes read with [`RemoteObject::read_exact_at`] as one tile's blob in
    /// the statistics (a streamed COG's internal tile: the bytes a tile needed).
    pub fn count_blob(&self, len: u64) {
        self.counters.blobs.fetch_add(1, Ordering::Relaxed);
        self.counters.useful_bytes.fetch_add(len, Ordering::Relaxed);
    }

    /// The object's size in bytes when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The object's ETag when it was opened, if the server gives one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// Reads `buf.len()` bytes at `offset`, blocking this thread: from the bytes read at
    /// open or the cached index when they cover the range (the atlas' header and index),
    /// else with one range request.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), RemoteError> {
        if let Some(bytes) = self.known(offset, buf.len() as u64) {
            buf.copy_from_slice(bytes);
            return Ok(());
        }
        self.fetch_exact(buf, offset)
    }

    /// Reads `buf.len()` bytes at `offset` with one range request (tile blobs always
    /// come from the server or the disk cache, checked against the opened identity).
    fn fetch_exact(&self, buf: &mut [u8], offset: u64) -> Result<(), RemoteError> {
        let want = buf.len() as u64;
        let end = offset.checked_add(want).filter(|&e| e <= self.size).ok_or(RemoteError::Short {
            offset,
            want,
            got: self.size.saturating_sub(offset),
        })?;
        if want == 0 {
            return Ok(());
        }
        let bytes = self.get(offset..end)?;
        if bytes.len() as u64 != want {
            return Err(RemoteError::Short { offset, want, got: bytes.len() as u64 });
        }
        buf.copy_from_slice(&bytes);
        Ok(())
    }

    fn get(&self, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        self.runtime.block_on(self.get_async(range))
    }

    /// One range request, counted; waits for a free slot first ([`MAX_IN_FLIGHT`]).
    async fn get_async(&self, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        if self.forced_offline {
            return Err(RemoteError::Unavailable("offline: not in the disk cache".into()));
        }
        if let Ok(down) = self.unreachable.lock()
            && let Some((until, why)) = &*down
            && Instant::now() < *until
        {
            return Err(RemoteError::Unavailable(format!("{why} (not asked again for a moment)")));
        }
        let c = &self.counters;
        let _permit = self.permits.acquire().await.map_err(|e| RemoteError::Unavailable(e.to_string()))?;
        c.requests.fetch_add(1, Ordering::Relaxed);
        c.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&c.in_flight);
        let start = Instant::now();
        let options = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: self.etag.clone(),
            ..Default::default()
        };
        let result = async {
            let got = self.store.get_opts(&self.path, options).await?;
            got.bytes().await
        }
        .await;
        match result {
            Ok(bytes) => {
                if let Ok(mut down) = self.unreachable.lock() {
                    *down = None;
                }
                c.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let ms = start.elapsed().as_secs_f32() * 1000.0;
                if let Ok(mut ring) = c.latencies.lock() {
                    let (lat, next) = &mut *ring;
                    if lat.len() < LATENCY_WINDOW {
                        lat.push(ms);
                    } else {
                        lat[*next] = ms;
                    }
                    *next = (*next + 1) % LATENCY_WINDOW;
                }
                Ok(bytes.to_vec())
            }
            Err(e) => {
                c.failures.fetch_add(1, Ordering::Relaxed);
                let unreachable = unreachable(&e);
                let e = map_error_at(e, self.access);
                if unreachable
                    && let RemoteError::Unavailable(why) = &e
                    && let Ok(mut down) = self.unreachable.lock()
                {
                    *down = Some((Instant::now() + UNREACHABLE_PAUSE, why.clone()));
                }
                Err(e)
            }
        }
    }

    /// The request counters so far.
    pub fn stats(&self) -> NetworkStats {
        let c = &self.counters;
        let (p50, p95) = c.latencies.lock().map(|ring| median_and_p95(&ring.0)).unwrap_or_default();
        NetworkStats {
            offline: self.offline,
            disk_cache: self.cache.as_deref().map(DiskCache::stats),
            requests: c.requests.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            blobs: c.blobs.load(Ordering::Relaxed),
            blob_bytes: c.useful_bytes.load(Ordering::Relaxed),
            in_flight: c.in_flight.load(Ordering::Relaxed),
            latency_p50_ms: p50,
            latency_p95_ms: p95,
        }
    }
}

/// Bytes `[start, end)` of the object out of `bytes`, which hold the object from
/// offset `at`, when they hold all of them.
fn slice_at(bytes: &[u8], at: u64, start: u64, end: u64) -> Option<&[u8]> {
    let from = usize::try_from(start.checked_sub(at)?).ok()?;
    let to = usize::try_from(end.checked_sub(at)?).ok()?;
    bytes.get(from..to)
}

/// The median and 95th percentile of `latencies` (0 when empty). Called every frame
/// (the streamer's stats): two linear selections on a copy, no sort.
fn median_and_p95(latencies: &[f32]) -> (f64, f64) {
    let mut v = latencies.to_vec();
    let mut at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        if i < v.len() { f64::from(*v.select_nth_unstable_by(i, f32::total_cmp).1) } else { 0.0 }
    };
    (at(0.5), at(0.95))
}

/// The identity of an object version: its ETag, or (without one) its modification
/// time; then its size, which an offline open needs.
fn identity(etag: Option<&str>, size: u64, modified: i64) -> String {
    match etag {
        Some(e) => format!("etag {e}|{size}"),
        None => format!("modified {modified}|{size}"),
    }
}

/// Size and ETag back from [`identity`].
fn parse_identity(id: &str) -> Option<(u64, Option<String>)> {
    let (head, size) = id.rsplit_once('|')?;
    let size = size.parse().ok()?;
    Some((size, head.strip_prefix("etag ").map(str::to_owned)))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn remote_locations_are_recognised_by_scheme() {
        for yes in ["s3://b/k.tsa", "http://127.0.0.1:8080/a.tsa", "HTTPS://cdn.example/x/y.tsa"] {
            assert!(is_remote(yes), "{yes}");
        }
        for no in ["a.tsa", "/tmp/http://x", "s3:/b/k", "http://", "file:///tmp/a.tsa", "ftp://h/a"] {
            assert!(!is_remote(no), "{no}");
        }
    }

    #[test]
    fn bad_locations_are_config_errors() {
        for bad in ["http://host", "http:///path", "s3://bucket/", "gopher://h/a"] {
            // The message says what is wrong; the caller names the location.
            assert!(matches!(store_for(bad, &[]), Err(RemoteError::Config(m)) if !m.is_empty()), "{bad}");
        }
        let odd = [("aws_no_such_setting".to_owned(), "1".to_owned())];
        let e = store_for("s3://bucket/key", &odd).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("unknown S3 setting"), "{e}");
    }

    #[test]
    fn refusals_quote_the_server_and_fit_the_location() {
        let body = "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>";
        assert_eq!(server_says(body), " (\"AccessDenied: Request has expired\")");
        assert_eq!(server_says(r#"{"error":{"code":403,"message":"no"}}"#), " (\"no\")");
        assert_eq!(server_says("plain"), "");
        assert_eq!(server_says("<Code>A</Code><Message>two\nlines</Message>"), " (\"A: two lines\")");
        assert_eq!(Access::of("https://h/a.tsa?X-Amz-Signature=1"), Access::Signed);
        assert_eq!(Access::of("HTTP://h/a.tsa"), Access::Web);
        assert_eq!(Access::of("s3://b/a.tsa"), Access::Cloud);
        let given = [("azure_storage_account_key".to_owned(), "k".to_owned())];
        assert_eq!(Access::with("az://c/a.tsa", &given), Access::CloudGiven);
        assert_eq!(Access::with("https://h/a.tsa", &given), Access::Web);
    }

    #[test]
    fn the_disk_cache_key_names_the_endpoint() {
        let at = |endpoint: &str| vec![("aws_endpoint".to_owned(), endpoint.to_owned())];
        let a = store::cache_key("s3://b/k.tsa", &at("http://127.0.0.1:9000"));
        let b = store::cache_key("s3://b/k.tsa", &at("http://127.0.0.1:9001/"));
        assert_ne!(a, b);
        assert!(a.starts_with("s3://b/k.tsa at endpoint=http://127.0.0.1:9000"), "{a}");
        assert_eq!(store::cache_key("https://h/k.tsa?X-Amz-Signature=1", &[]), "https://h/k.tsa");
        let az = |account: &str| vec![("azure_storage_account_name".to_owned(), account.to_owned())];
        assert_ne!(store::cache_key("az://c/k", &az("one")), store::cache_key("az://c/k", &az("two")));
    }

    #[test]
    fn percentiles_of_latencies() {
        assert_eq!(median_and_p95(&[]), (0.0, 0.0));
        let v: Vec<f32> = (1..=100).rev().map(|x| x as f32).collect();
        assert_eq!(median_and_p95(&v), (51.0, 95.0));
        assert_eq!(median_and_p95(&[7.0]), (7.0, 7.0));
    }

    #[test]
    fn identities_round_trip() {
        assert_eq!(parse_identity(&identity(Some("\"65-1a\""), 42, 7)), Some((42, Some("\"65-1a\"".into()))));
        assert_eq!(parse_identity(&identity(None, 9, 1_700_000_000)), Some((9, None)));
        assert_eq!(parse_identity("garbage"), None);
    }

    #[test]
    fn transient_errors_are_the_network_ones() {
        assert!(RemoteError::Unavailable("x".into()).is_transient());
        assert!(RemoteError::Short { offset: 0, want: 2, got: 1 }.is_transient());
        assert!(!RemoteError::Replaced.is_transient());
        assert!(!RemoteError::NotFound.is_transient());
    }
}
