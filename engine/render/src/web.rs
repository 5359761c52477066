//! The browser's fetch edge (wasm32 only): an atlas opened from HTTP `Range` replies
//! into the core's [`RangedBytes`] ([`open_atlas`]), and the streamer's external loader
//! jobs fetched with `fetch()` (a few requests at once) and decoded on the main thread
//! within a per-frame budget ([`StreamDriver`]).
//!
//! ```ignore
//! let fetcher = RangeFetcher::new(url);
//! let atlas = open_atlas(&fetcher).await?;                 // first range, open loop, coarsest tiles
//! let shared = SharedStreaming::external(256);
//! let mut driver = StreamDriver::new(shared.loader_threads().clone(), fetcher);
//! let mut vt = VirtualTextures::new(&ctx, atlas, VtConfig { shared: Some(shared), ..VtConfig::default() })?;
//! // each animation frame:
//! driver.pump();                                           // take jobs, fetch, decode within the budget
//! let frame = vt.begin(&ctx, &mut encoder); /* passes */ frame.finish(&ctx, encoder)?;
//! ```
//!
//! The disk tier is the page's Cache Storage ([`DiskTierStats`]): the atlas' bytes in
//! fixed blocks, kept across visits under a byte budget ([`DEFAULT_DISK_TIER_BYTES`];
//! [`RangeFetcher::with_disk_budget`]), one cache per version of the atlas (its ETag,
//! else Last-Modified and length; a server that sends neither gets no disk tier).
//!
//! No Web Workers: `wasm32-unknown-unknown` has no threads without the atomics target
//! feature and a cross-origin-isolated page (COOP + COEP headers), which a static
//! server would have to send; decoding on the main thread within
//! [`DECODE_BUDGET_MS`] a frame keeps the page responsive instead.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

use tessera_core::format::atlas::NetworkStats;
use tessera_core::format::atlas::blocks::{BlockGrid, WEB_BLOCK_BYTES, object_identity};
use tessera_core::format::atlas::disk_cache::DiskCacheStats;
use tessera_core::format::atlas::ranged::{DEFAULT_RANGED_BUDGET, FetchRange, RangedBytes, first_range};
use tessera_core::stream::loader::{ExternalJob, LoaderThreads};
use tessera_core::{Atlas, AtlasError, TileId};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

mod disk_tier;
use disk_tier::DiskTier;
pub use disk_tier::DiskTierStats;

/// The disk tier's default byte budget (per atlas).
pub const DEFAULT_DISK_TIER_BYTES: u64 = 256 << 20;

/// Round trips the open loop (and each job) may take before giving up.
const MAX_ROUND_TRIPS: u32 = 8;
/// Requests in flight at once (what browsers allow per HTTP/1.1 host).
pub const MAX_IN_FLIGHT: usize = 6;
/// Loader jobs held at once (fetching, or fetched and waiting to decode).
const MAX_JOBS: usize = 8;
/// Tiles per loader job: neighbours in storage order, fetched together (usually one
/// range), then decoded a tile at a time within [`DECODE_BUDGET_MS`].
const JOB_TILES: usize = 8;
/// Milliseconds of tile decoding each frame may spend on the main thread.
pub const DECODE_BUDGET_MS: f64 = 4.0;

/// What the network did: requests and bytes, shared with the requests in flight.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetStats {
    /// Requests answered (or failed): the network's only, not the disk tier's.
    pub requests: u64,
    /// Body bytes received from the network.
    pub bytes: u64,
    /// Requests not answered yet.
    pub in_flight: usize,
    /// Requests that failed.
    pub failures: u64,
    /// Tile blobs the requests brought (as the driver counts them).
    pub blobs: u64,
}

/// Latencies kept for the percentiles (the native store's window).
const LATENCY_WINDOW: usize = 1024;

/// Why an atlas could not be opened or a range fetched in a browser. Every message
/// names the URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// The server answered 200 (the whole object) to a `Range` request.
    #[error(
        "the server does not support HTTP range requests (it answered 200 to a Range request for {url}): \
         serve the atlas with a server that does (nginx, or tests/web/range_server.py)"
    )]
    NoRangeSupport {
        /// The atlas' URL.
        url: String,
    },
    /// 404.
    #[error("no atlas at {url} (404)")]
    NotFound {
        /// The atlas' URL.
        url: String,
    },
    /// `fetch()` rejected: a network error, which is what a CORS refusal looks like.
    #[error(
        "fetching {url} was refused (a network error: likely CORS, as a server on another origin must \
         allow this page, or the server is down): {reason}"
    )]
    Refused {
        /// The atlas' URL.
        url: String,
        /// What the browser said.
        reason: String,
    },
    /// Another HTTP status.
    #[error("{url}: HTTP {status} {text}")]
    Status {
        /// The atlas' URL.
        url: String,
        /// The status code.
        status: u16,
        /// Its text.
        text: String,
    },
    /// A reply that does not fit the request (length, `Content-Range`), or a
    /// browser API that failed.
    #[error("{url}: {message}")]
    BadReply {
        /// The atlas' URL.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// The bytes are not an atlas that can be read (the core's error names the URL).
    #[error("{0}")]
    Atlas(#[from] AtlasError),
}

/// One reply to a range request.
struct Reply {
    body: Vec<u8>,
    /// The object's length, from `Content-Range`.
    total: Option<u64>,
    /// The object's version (ETag, else Last-Modified and length), when the server
    /// names one.
    identity: Option<String>,
}

/// Whether the disk tier is on, and what it has done.
#[derive(Clone, Debug, Default)]
pub struct DiskTierReport {
    /// On: the blocks come from the page's Cache Storage first.
    pub on: bool,
    /// Why it is off, or the version it holds.
    pub note: String,
    /// Its counters (zero while off).
    pub stats: DiskTierStats,
}

/// Fetches byte ranges of one URL, counting them.
#[derive(Clone)]
pub struct RangeFetcher {
    url: String,
    net: Rc<RefCell<NetStats>>,
    disk_budget: u64,
    tier: Rc<RefCell<Option<DiskTier>>>,
    tier_note: Rc<RefCell<String>>,
    /// The last [`LATENCY_WINDOW`] requests' round trips, ms.
    latencies: Rc<RefCell<VecDeque<f64>>>,
    /// The atlas' store, told the network's figures after each request.
    store: Rc<RefCell<Option<Arc<RangedBytes>>>>,
}

impl RangeFetcher {
    /// A fetcher of `url` (absolute, as the messages name it).
    /// Its disk tier is on with [`DEFAULT_DISK_TIER_BYTES`] once [`open_atlas`] has
    /// learnt the atlas' version.
    pub fn new(url: String) -> Self {
        Self {
            url,
            net: Rc::new(RefCell::new(NetStats::default())),
            disk_budget: DEFAULT_DISK_TIER_BYTES,
            tier: Rc::new(RefCell::new(None)),
            tier_note: Rc::new(RefCell::new("not opened yet".to_owned())),
            latencies: Rc::new(RefCell::new(VecDeque::new())),
            store: Rc::new(RefCell::new(None)),
        }
    }

    /// The network's figures in the core's terms (what the overlay's Network panel and
    /// `Atlas::network_stats` show): requests, bytes, blobs, latencies, and the disk
    /// tier as the disk cache.
    pub fn network_stats(&self) -> NetworkStats {
        let net = self.stats();
        let mut sorted: Vec<f64> = self.latencies.borrow().iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let pct =
            |p: f64| sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);
        let tier = self.tier.borrow().as_ref().map(DiskTier::stats);
        NetworkStats {
            offline: false,
            disk_cache: tier.map(|t| DiskCacheStats {
                hits: t.hits,
                misses: t.misses,
                hit_bytes: t.hit_bytes,
                writes: t.writes,
                evictions: t.evictions,
                rejected: t.rejected,
                bytes: t.bytes_held,
            }),
            requests: net.requests,
            failures: net.failures,
            cancelled: 0,
            bytes: net.bytes,
            blobs: net.blobs,
            blob_bytes: 0,
            in_flight: net.in_flight as u64,
            latency_p50_ms: pct(0.5),
            latency_p95_ms: pct(0.95),
        }
    }

    /// Tells the atlas' store the network's figures (after each request, and when the
    /// driver counts blobs).
    fn publish(&self) {
        if let Some(store) = self.store.borrow().as_ref() {
            store.report_network(self.network_stats());
        }
    }

    /// The disk tier's byte budget (0: no disk tier, every byte from the network).
    pub fn with_disk_budget(mut self, bytes: u64) -> Self {
        self.disk_budget = bytes;
        self
    }

    /// The disk tier: on or off (and why), and its counters.
    pub fn disk_tier(&self) -> DiskTierReport {
        let tier = self.tier.borrow();
        DiskTierReport {
            on: tier.is_some(),
            note: self.tier_note.borrow().clone(),
            stats: tier.as_ref().map(DiskTier::stats).unwrap_or_default(),
        }
    }

    /// Opens the disk tier for the version `identity` of an object of `total` bytes.
    async fn attach_disk_tier(&self, identity: Option<&str>, total: u64) {
        let note = if self.disk_budget == 0 {
            "off (budget 0)".to_owned()
        } else if let Some(identity) = identity {
            match DiskTier::open(&self.url, identity, total, WEB_BLOCK_BYTES, self.disk_budget).await {
                Ok(tier) => {
                    *self.tier.borrow_mut() = Some(tier);
                    format!("on: Cache Storage, {identity}")
                }
                Err(e) => format!("off: {e}"),
            }
        } else {
            "off: the server sends neither ETag nor Last-Modified, so a replaced atlas could not be told apart"
                .to_owned()
        };
        *self.tier_note.borrow_mut() = note;
    }

    /// `range`'s bytes: through the disk tier when it is on, else from the network.
    async fn get(&self, range: Range<u64>, exact: bool) -> Result<Reply, WebError> {
        let tier = self.tier.borrow().clone();
        match tier {
            Some(tier) => self.get_through(&tier, range, exact).await,
            None => self.get_network(range, exact).await,
        }
    }

    /// `range` rounded out to whole blocks: those in Cache Storage from there, each run
    /// of missing ones one request (then written to the cache).
    async fn get_through(&self, tier: &DiskTier, range: Range<u64>, exact: bool) -> Result<Reply, WebError> {
        let grid: BlockGrid = tier.grid();
        let covering = grid.covering(&range);
        if covering.is_empty() {
            return self.get_network(range, exact).await;
        }
        let mut blocks = tier.lookup(covering.clone()).await;
        let have: Vec<bool> = blocks.iter().map(Option::is_some).collect();
        for run in BlockGrid::missing_runs(&covering, &have) {
            let span = grid.bytes_of_run(&run);
            let reply = self.get_network(span, true).await?;
            if let Some(now) = reply.identity.as_deref().filter(|now| *now != tier.identity()) {
                return Err(self.bad(format!(
                    "the atlas changed on the server while it streamed ({now}, not {}): reload the page",
                    tier.identity()
                )));
            }
            let parts = grid.split_run(&run, &reply.body).map_err(|e| self.bad(e.to_string()))?;
            tier.store(run.clone(), &parts);
            for (index, part) in run.zip(parts) {
                blocks[(index - covering.start) as usize] = Some(part);
            }
        }
        let blocks: Vec<Vec<u8>> = blocks
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| self.bad("a block was neither cached nor fetched"))?;
        let body = grid.assemble(&range, &blocks).map_err(|e| self.bad(e.to_string()))?;
        if exact && body.len() as u64 != range.end - range.start {
            return Err(self.bad(format!(
                "bytes {}-{} lie past the atlas' end ({} bytes)",
                range.start,
                range.end,
                grid.object_len()
            )));
        }
        Ok(Reply { body, total: Some(grid.object_len()), identity: None })
    }

    /// The URL fetched.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Requests and bytes so far.
    pub fn stats(&self) -> NetStats {
        *self.net.borrow()
    }

    /// `GET` of `range` with a `Range` header; the reply must be 206. With `exact`,
    /// its body must be the whole range.
    async fn get_network(&self, range: Range<u64>, exact: bool) -> Result<Reply, WebError> {
        self.net.borrow_mut().in_flight += 1;
        let started = now_ms();
        let result = self.get_inner(range, exact).await;
        {
            let mut latencies = self.latencies.borrow_mut();
            if latencies.len() == LATENCY_WINDOW {
                latencies.pop_front();
            }
            latencies.push_back(now_ms() - started);
            let mut net = self.net.borrow_mut();
            net.in_flight -= 1;
            net.requests += 1;
            match &result {
                Ok(reply) => net.bytes += reply.body.len() as u64,
                Err(_) => net.failures += 1,
            }
        }
        self.publish();
        result
    }

    fn bad(&self, message: impl Into<String>) -> WebError {
        WebError::BadReply { url: self.url.clone(), message: message.into() }
    }

    async fn get_inner(&self, range: Range<u64>, exact: bool) -> Result<Reply, WebError> {
        let url = &self.url;
        let window = web_sys::window().ok_or_else(|| self.bad("no window to fetch from"))?;
        let headers = web_sys::Headers::new().map_err(|e| self.bad(js_message(&e)))?;
        let end = range.end.saturating_sub(1).max(range.start);
        headers
            .set("Range", &format!("bytes={}-{end}", range.start))
            .map_err(|e| self.bad(js_message(&e)))?;
        let init = web_sys::RequestInit::new();
        init.set_method("GET");
        init.set_headers(&headers);
        // The ranged store is the cache; the browser's would only hide round trips.
        init.set_cache(web_sys::RequestCache::NoStore);
        let response = JsFuture::from(window.fetch_with_str_and_init(url, &init))
            .await
            .map_err(|e| WebError::Refused { url: url.clone(), reason: js_message(&e) })?;
        let response: web_sys::Response =
            response.dyn_into().map_err(|_| self.bad("fetch gave no Response"))?;
        match response.status() {
            206 => {}
            200 => return Err(WebError::NoRangeSupport { url: url.clone() }),
            404 => return Err(WebError::NotFound { url: url.clone() }),
            416 => return Err(self.bad("the server cannot serve its first bytes (416): is it empty?")),
            status => {
                return Err(WebError::Status { url: url.clone(), status, text: response.status_text() });
            }
        }
        let content_range = response.headers().get("Content-Range").ok().flatten();
        let total = content_range.as_deref().and_then(|v| v.rsplit('/').next()).and_then(|t| t.parse().ok());
        let header = |name: &str| response.headers().get(name).ok().flatten();
        let identity = total.and_then(|total| {
            object_identity(header("ETag").as_deref(), header("Last-Modified").as_deref(), total)
        });
        let reading = |e: JsValue| {
            self.bad(format!("reading the reply to bytes {}-{end}: {}", range.start, js_message(&e)))
        };
        let buffer = JsFuture::from(response.array_buffer().map_err(reading)?).await.map_err(reading)?;
        let body = js_sys::Uint8Array::new(&buffer).to_vec();
        let want = range.end - range.start;
        if (exact && body.len() as u64 != want) || body.len() as u64 > want {
            return Err(self.bad(format!(
                "bytes {}-{end} came back as {} bytes, not {want} (was the file changed or truncated?)",
                range.start,
                body.len()
            )));
        }
        Ok(Reply { body, total, identity })
    }
}

/// The message of a JavaScript error value.
fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>().map_or_else(|| format!("{e:?}"), |e| String::from(e.message()))
}

/// Opens the atlas at `fetcher`'s URL from range requests: the first range (which
/// tells the object's length), the ranges the open names, then the coarsest tiles' (a
/// streamer needs them before it starts).
pub async fn open_atlas(fetcher: &RangeFetcher) -> Result<Arc<Atlas>, WebError> {
    let url = fetcher.url();
    let head = fetcher.get_network(first_range(None), false).await?;
    let total = head.total.ok_or_else(|| {
        fetcher.bad(
            "the 206 reply names no object length in Content-Range (a server on another origin must expose \
             the header with Access-Control-Expose-Headers)",
        )
    })?;
    let expected = first_range(Some(total));
    if head.body.len() as u64 != expected.end {
        return Err(fetcher.bad(format!(
            "the first {} bytes came back as {}",
            expected.end,
            head.body.len()
        )));
    }
    fetcher.attach_disk_tier(head.identity.as_deref(), total).await;
    let store = Arc::new(RangedBytes::new(total, DEFAULT_RANGED_BUDGET));
    store.insert(0, head.body).map_err(|e| fetcher.bad(e.to_string()))?;
    *fetcher.store.borrow_mut() = Some(store.clone());
    fetcher.publish();
    let mut trips = 1;
    let atlas = loop {
        match Atlas::open_ranged(url, store.clone()) {
            Ok(atlas) => break atlas,
            Err(e) => match e.need_bytes() {
                Some(range) if trips < MAX_ROUND_TRIPS => {
                    trips += 1;
                    let reply = fetcher.get(range.clone(), true).await?;
                    store.insert(range.start, reply.body).map_err(|e| fetcher.bad(e.to_string()))?;
                }
                _ => return Err(WebError::Atlas(e)),
            },
        }
    };
    let coarsest = atlas.coarsest_tiles();
    fetch_tiles(fetcher, &atlas, &store, &coarsest).await?;
    fetcher.net.borrow_mut().blobs += coarsest.len() as u64;
    fetcher.publish();
    Ok(Arc::new(atlas))
}

/// Fetches what `tiles` need into `store`, round trip after round trip.
async fn fetch_tiles(
    fetcher: &RangeFetcher,
    atlas: &Atlas,
    store: &RangedBytes,
    tiles: &[TileId],
) -> Result<(), WebError> {
    for _ in 0..MAX_ROUND_TRIPS {
        let ranges = atlas.ranges_to_fetch(tiles);
        if ranges.is_empty() {
            return Ok(());
        }
        for range in ranges {
            let reply = fetcher.get(range.clone(), true).await?;
            store.insert(range.start, reply.body).map_err(|e| fetcher.bad(e.to_string()))?;
        }
    }
    Err(fetcher.bad(format!("the coarsest tiles' bytes did not arrive in {MAX_ROUND_TRIPS} round trips")))
}

/// A loader job between taking and running: its fetches in flight, or an error.
struct Pending {
    job: Option<ExternalJob>,
    outstanding: usize,
    error: Option<String>,
    rounds: u32,
}

/// What the driver has done.
#[derive(Clone, Copy, Debug, Default)]
pub struct DriverStats {
    /// Loader jobs taken.
    pub jobs: u64,
    /// Jobs ended unavailable (a fetch failed).
    pub jobs_unavailable: u64,
    /// Tiles of the jobs run.
    pub tiles_decoded: u64,
    /// The longest decode step of a frame, in milliseconds.
    pub worst_decode_ms: f64,
}

/// Runs the external loader threads' jobs: takes them, fetches their ranges, decodes
/// them within the frame budget.
pub struct StreamDriver {
    threads: Arc<LoaderThreads>,
    fetcher: RangeFetcher,
    pending: Vec<Rc<RefCell<Pending>>>,
    ready: VecDeque<ExternalJob>,
    stats: DriverStats,
    last_error: Option<String>,
    /// Milliseconds a tile's decode takes (a moving average), to stop before the
    /// budget rather than after it.
    tile_ms: f64,
}

impl StreamDriver {
    /// A driver of `threads` ([`LoaderThreads::external`], e.g. from
    /// `SharedStreaming::external`) fetching from `fetcher`.
    pub fn new(threads: Arc<LoaderThreads>, fetcher: RangeFetcher) -> Self {
        Self {
            threads,
            fetcher,
            pending: Vec::new(),
            ready: VecDeque::new(),
            stats: DriverStats::default(),
            last_error: None,
            tile_ms: 0.0,
        }
    }

    /// What the driver has done.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The latest fetch failure (its tiles were reported unavailable).
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Whether jobs are being fetched or wait to be decoded.
    pub fn busy(&self) -> bool {
        !self.pending.is_empty() || !self.ready.is_empty()
    }

    /// One frame's work: new jobs taken, fetches started for those whose ranges are
    /// known, fetched tiles decoded while the next is expected to fit in
    /// [`DECODE_BUDGET_MS`] (at least one).
    pub fn pump(&mut self) {
        while self.pending.len() + self.ready.len().div_ceil(JOB_TILES) < MAX_JOBS {
            let Some(job) = self.threads.take_job(JOB_TILES) else { break };
            self.stats.jobs += 1;
            self.pending.push(Rc::new(RefCell::new(Pending {
                job: Some(job),
                outstanding: 0,
                error: None,
                rounds: 0,
            })));
        }
        let mut i = 0;
        while i < self.pending.len() {
            let entry = self.pending[i].clone();
            let mut p = entry.borrow_mut();
            if p.outstanding > 0 {
                i += 1;
                continue;
            }
            let Some(job) = p.job.take() else {
                self.pending.swap_remove(i);
                continue;
            };
            if let Some(error) = p.error.take() {
                self.stats.jobs_unavailable += 1;
                job.finish_unavailable(&error);
                self.last_error = Some(error);
                self.pending.swap_remove(i);
                continue;
            }
            let ranges = job.fetch_ranges();
            if ranges.is_empty() {
                if p.rounds > 0 {
                    self.fetcher.net.borrow_mut().blobs += job.tiles().len() as u64;
                    self.fetcher.publish();
                }
                // Fetched together, decoded a tile at a time (the budget's unit).
                let mut rest = Some(job);
                while let Some(mut part) = rest.take() {
                    rest = part.split_off(1);
                    self.ready.push_back(part);
                }
                self.pending.swap_remove(i);
                continue;
            }
            if p.rounds >= MAX_ROUND_TRIPS {
                self.stats.jobs_unavailable += 1;
                job.finish_unavailable("its bytes did not arrive within the round trips allowed");
                self.pending.swap_remove(i);
                continue;
            }
            let in_flight = self.fetcher.stats().in_flight;
            if in_flight > 0 && in_flight + ranges.len() > MAX_IN_FLIGHT {
                p.job = Some(job);
                i += 1;
                continue;
            }
            p.job = Some(job);
            p.rounds += 1;
            p.outstanding = ranges.len();
            drop(p);
            for range in ranges {
                self.spawn_fetch(range, entry.clone());
            }
            i += 1;
        }
        // Tiles while the next one is expected to fit in the budget (at least one a
        // frame, so that streaming always moves).
        let started = now_ms();
        let mut ran = 0;
        while let Some(job) = self.ready.pop_front() {
            if ran > 0 && now_ms() - started + self.tile_ms > DECODE_BUDGET_MS {
                self.ready.push_front(job);
                break;
            }
            let tiles = job.tiles().len().max(1);
            let t0 = now_ms();
            job.run();
            let took = (now_ms() - t0) / tiles as f64;
            self.tile_ms = if self.stats.tiles_decoded == 0 { took } else { 0.8 * self.tile_ms + 0.2 * took };
            self.stats.tiles_decoded += tiles as u64;
            ran += 1;
        }
        self.stats.worst_decode_ms = self.stats.worst_decode_ms.max(now_ms() - started);
    }

    fn spawn_fetch(&self, range: FetchRange, entry: Rc<RefCell<Pending>>) {
        let fetcher = self.fetcher.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let result = fetcher.get(range.range.clone(), true).await.and_then(|reply| {
                range.store.insert(range.range.start, reply.body).map_err(|e| fetcher.bad(e.to_string()))
            });
            let mut p = entry.borrow_mut();
            p.outstanding -= 1;
            if let Err(e) = result {
                p.error.get_or_insert(e.to_string());
            }
        });
    }
}

/// `performance.now()`: milliseconds, sub-millisecond resolution.
fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or_else(js_sys::Date::now, |p| p.now())
}
