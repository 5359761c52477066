//! Atlases read from fetched byte ranges (the browser's path), natively: a simulated
//! driver serves the ranges that `NeedBytes` and `ranges_to_fetch` name from a baked
//! file, counting round trips and bytes; every tile must come back as `Atlas::open` of
//! the file gives it, damaged bytes must give the usual errors, and the streamer must
//! run on external loader threads.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use tessera_core::bake::source::Generated;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::order::StorageOrder;
use tessera_core::format::atlas::ranged::{DEFAULT_RANGED_BUDGET, FetchRange, RangedBytes, first_range};
use tessera_core::format::atlas::ranges::OPEN_PREFIX;
use tessera_core::format::atlas::{Atlas, AtlasError, ENTRY_BYTES, HEADER_BYTES};
use tessera_core::format::codec::{Codec, TargetFormat};
use tessera_core::format::pool_format::FormatSupport;
use tessera_core::stream::feedback::compact;
use tessera_core::stream::pool_layout::{GpuLimits, PoolLayout, Trilinear};
use tessera_core::stream::streamer::{FrameInput, SharedStreaming, SparseFeedback, Streamer, StreamerConfig};
use tessera_core::{AtlasLoader, HostCache, NoProgress, TileId, TileLoader};

/// Round trips a driver allows itself before it gives up (every loop here must end
/// well within it).
const MAX_ROUND_TRIPS: usize = 8;

const NAME: &str = "https://cdn.example/atlas.tsa?sig=secret";

fn bake_atlas(dir: &Path, version: u32, codec: Codec, size: u32) -> Vec<u8> {
    let path = dir.join(format!("v{version}-{codec:?}-{size}.tsa"));
    let opts =
        BakeOptions { tile_size: 32, border: 4, codec, format_version: version, ..BakeOptions::default() };
    bake(vec![BakeInput::new("albedo", Generated::with_cell(size, size, 32))], &path, &opts, &NoProgress)
        .unwrap();
    std::fs::read(&path).unwrap()
}

/// A web server holding one object, answering range requests, and what was asked of it.
struct Server {
    object: Vec<u8>,
    round_trips: usize,
    requests: usize,
    bytes: u64,
}

impl Server {
    fn new(object: Vec<u8>) -> Self {
        Self { object, round_trips: 0, requests: 0, bytes: 0 }
    }

    /// The bytes of `range` that the object has (a server clips a range past its end).
    fn body(&mut self, range: Range<u64>) -> Vec<u8> {
        let end = (range.end as usize).min(self.object.len());
        let body = self.object.get(range.start as usize..end).unwrap_or_default().to_vec();
        self.requests += 1;
        self.bytes += body.len() as u64;
        body
    }

    /// One round trip: every range requested at once, each inserted where it belongs.
    fn fetch(&mut self, store: &RangedBytes, ranges: &[Range<u64>]) {
        self.round_trips += 1;
        for r in ranges {
            let body = self.body(r.clone());
            store.insert(r.start, body).unwrap();
        }
    }

    /// The driver's open loop: the first range (which tells the object's length), then
    /// whatever `NeedBytes` names, at most [`MAX_ROUND_TRIPS`].
    fn open(&mut self, budget: u64) -> Result<(Atlas, Arc<RangedBytes>), AtlasError> {
        self.round_trips += 1;
        let head = self.body(first_range(None));
        let store = Arc::new(RangedBytes::new(self.object.len() as u64, budget));
        store.insert(0, head).unwrap();
        let mut last = None;
        while self.round_trips <= MAX_ROUND_TRIPS {
            match Atlas::open_ranged(NAME, store.clone()) {
                Ok(atlas) => return Ok((atlas, store)),
                Err(e) => match e.need_bytes() {
                    Some(range) => {
                        assert!(!range.is_empty() && range.end <= store.object_len(), "{e}");
                        self.fetch(&store, &[range]);
                        last = Some(e);
                    }
                    None => return Err(e),
                },
            }
        }
        Err(last.unwrap())
    }

    /// Fetches what `tiles` need, round trip after round trip, until nothing is missing.
    fn fetch_tiles(&mut self, atlas: &Atlas, store: &RangedBytes, tiles: &[TileId]) {
        for _ in 0..MAX_ROUND_TRIPS {
            let ranges = atlas.ranges_to_fetch(tiles);
            if ranges.is_empty() {
                return;
            }
            self.fetch(store, &ranges);
        }
        panic!("the tiles' ranges did not converge: {:?}", atlas.ranges_to_fetch(tiles));
    }

    /// [`Server::fetch`] of what a loader job names.
    fn fetch_job(&mut self, ranges: &[FetchRange]) {
        self.round_trips += 1;
        for r in ranges {
            let body = self.body(r.range.clone());
            r.store.insert(r.range.start, body).unwrap();
        }
    }
}

fn all_tiles(atlas: &Atlas) -> Vec<TileId> {
    atlas.layers().iter().enumerate().flat_map(|(i, l)| l.layout.tiles(i as u16)).collect()
}

/// Every tile of atlases of both index versions and of LZ4 and ETC1S tiles decodes
/// through a ranged store (with a budget far below the file's size) to the bytes
/// `Atlas::open` of the file gives, in few round trips.
#[test]
fn every_tile_decodes_as_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // 2048² in 32-texel tiles: 5,461 tiles, an index of 131 KiB (past the opening
    // prefix); 512²: 341 tiles.
    for (version, codec, size) in
        [(1, Codec::Lz4, 2048), (2, Codec::Lz4, 2048), (1, Codec::Etc1s, 512), (2, Codec::Etc1s, 512)]
    {
        let bytes = bake_atlas(dir.path(), version, codec, size);
        let path = dir.path().join(format!("v{version}-{codec:?}-{size}.tsa"));
        let file = Atlas::open(&path).unwrap();
        assert_eq!(file.version(), version);
        let file_len = bytes.len() as u64;
        let budget = 1 << 20;
        let mut server = Server::new(bytes);
        let (atlas, store) = server.open(budget).unwrap();
        let (open_trips, open_bytes) = (server.round_trips, server.bytes);
        assert!(atlas.is_remote() && atlas.ranged_bytes().is_some());
        assert_eq!(atlas.meta_bytes(), file.meta_bytes());
        assert_eq!(atlas.path(), Path::new("https://cdn.example/atlas.tsa?sig=REDACTED"));
        // The coarsest tiles, as a streamer needs them before it starts.
        let coarsest = atlas.coarsest_tiles();
        server.fetch_tiles(&atlas, &store, &coarsest);
        let coarsest_trips = server.round_trips - open_trips;
        // Then every tile, in jobs of 64 in storage order as a loader would take them.
        let tiles = all_tiles(&atlas);
        let mut worst_job = 0;
        for job in tiles.chunks(64) {
            let before = server.round_trips;
            server.fetch_tiles(&atlas, &store, job);
            worst_job = worst_job.max(server.round_trips - before);
            for &t in job {
                let got = atlas.decode_tile(t).unwrap_or_else(|e| panic!("v{version} {codec:?} {t}: {e}"));
                assert_eq!(got, file.decode_tile(t).unwrap(), "v{version} {codec:?} {t}");
                if codec == Codec::Etc1s {
                    let bc7 = atlas.decode_tile_as(t, TargetFormat::Bc7).unwrap();
                    assert_eq!(bc7, file.decode_tile_as(t, TargetFormat::Bc7).unwrap());
                }
                assert_eq!(atlas.entry(t).unwrap(), file.entry(t).unwrap());
            }
            let s = store.stats();
            assert!(s.bytes_held - s.pinned_bytes <= budget, "{s:?}");
        }
        let s = store.stats();
        eprintln!(
            "v{version} {codec:?} {size}² ({} tiles, {file_len} bytes): open {open_trips} round trip(s), \
             {open_bytes} bytes; coarsest tiles +{coarsest_trips}; every tile: {} round trips, \
             {} requests, {} bytes, at most {worst_job} per job of 64; held {} (pinned {}), evicted {}",
            tiles.len(),
            server.round_trips,
            server.requests,
            server.bytes,
            s.bytes_held,
            s.pinned_bytes,
            s.evicted_bytes,
        );
        // One round trip when the header, layer table and index (version 1) or root
        // directory (version 2) lie in the opening prefix, two otherwise.
        let meta = file.meta_bytes().len() as u64;
        assert_eq!(open_trips, if meta <= OPEN_PREFIX { 1 } else { 2 }, "v{version} {codec:?}");
        assert!(open_bytes <= meta.max(OPEN_PREFIX) + (2 << 20));
        // Index pages (version 2, when not already held) and then blobs.
        assert!(coarsest_trips <= 2 && worst_job <= 2, "{coarsest_trips} {worst_job}");
        assert_eq!(store.pinned_prefix(), meta.max(OPEN_PREFIX.min(file_len)));
    }
}

/// A read of bytes not held names exactly what to fetch, and after that fetch the same
/// call succeeds; the version-2 index page comes first, then the blob.
#[test]
fn need_bytes_names_the_missing_range() {
    let dir = tempfile::tempdir().unwrap();
    for version in [1, 2] {
        let mut server = Server::new(bake_atlas(dir.path(), version, Codec::Lz4, 2048));
        let (atlas, store) = server.open(64 << 20).unwrap();
        let far = TileId::new(0, 0, 63, 63);
        let mut needs = Vec::new();
        let got = loop {
            match atlas.read_tile(far) {
                Err(e @ AtlasError::NeedBytes { .. }) => {
                    assert!(e.to_string().contains("not fetched yet"), "{e}");
                    assert_eq!(e.tile(), None, "not an error of the tile's");
                    let range = e.need_bytes().unwrap();
                    needs.push(range.clone());
                    assert!(needs.len() <= 2, "{needs:?}");
                    server.fetch(&store, &[range]);
                }
                other => break other.unwrap(),
            }
        };
        assert_eq!(
            got,
            Atlas::open(dir.path().join(format!("v{version}-Lz4-2048.tsa"))).unwrap().read_tile(far).unwrap()
        );
        assert_eq!(needs.len(), version as usize, "v{version}: {needs:?}");
    }
}

/// Damaged or truncated objects give the errors `Atlas::open` gives for them, within
/// the driver's round trips; damaged tile bytes are reported unavailable (as a remote
/// atlas' are) and dropped from the store, to be fetched again.
#[test]
fn damaged_bytes_give_the_usual_errors() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = bake_atlas(dir.path(), 1, Codec::Lz4, 2048);
    let v2 = bake_atlas(dir.path(), 2, Codec::Lz4, 2048);
    // Each damaged object gives the error `Atlas::open` gives for the same bytes.
    let open = |object: Vec<u8>| {
        let path = dir.path().join("damaged.tsa");
        std::fs::write(&path, &object).unwrap();
        let from_file = Atlas::open(&path).unwrap_err();
        let e = Server::new(object).open(64 << 20).map(|_| ()).unwrap_err();
        assert_eq!(std::mem::discriminant(&e), std::mem::discriminant(&from_file), "{e} / {from_file}");
        let shown = path.display().to_string();
        assert_eq!(
            e.to_string().replace("https://cdn.example/atlas.tsa?sig=REDACTED", &shown),
            from_file.to_string()
        );
        e
    };
    let truncated = open(v2[..v2.len() - 100].to_vec());
    assert!(matches!(truncated, AtlasError::Truncated { .. }), "{truncated}");
    let tiny = open(v2[..40].to_vec());
    assert!(matches!(tiny, AtlasError::Truncated { .. }), "{tiny}");
    let mut garbage = vec![0u8; 100_000];
    garbage.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 31 % 251) as u8);
    assert!(matches!(open(garbage.clone()), AtlasError::BadMagic { .. }));
    assert!(matches!(open(garbage[..20].to_vec()), AtlasError::BadMagic { .. }));
    for (object, at, what) in
        [(&v1, HEADER_BYTES + 5, "layer"), (&v1, 100_000, "index"), (&v2, HEADER_BYTES + 5, "layer")]
    {
        let mut bad = object.clone();
        bad[at] ^= 0x40;
        let e = open(bad);
        assert!(matches!(e, AtlasError::Checksum { .. }), "{what}: {e}");
        assert!(e.to_string().contains("cdn.example"), "{e}");
    }
    let mut header = v1.clone();
    header[8] = 99;
    assert!(matches!(open(header), AtlasError::UnsupportedVersion { found: 99, .. }));
    let mut header = v1.clone();
    header[20] ^= 1;
    assert!(matches!(open(header), AtlasError::Checksum { what: "header", .. }));

    // A damaged version-2 index page (its last: past the opening prefix), and a
    // damaged blob of a tile whose page is sound.
    let file = Atlas::open(dir.path().join("v2-Lz4-2048.tsa")).unwrap();
    let order = StorageOrder::new(vec![file.layers()[0].layout], false);
    let page_of = |t: TileId| order.position(0, u32::from(t.mip), t.x, t.y) / 1024;
    let tiles = all_tiles(&file);
    let last_page = (file.tile_count() - 1) / 1024;
    let index_at = file.meta_bytes().len() as u64;
    let page_at = index_at + last_page * 1024 * ENTRY_BYTES as u64 + 7;
    assert!(page_at > OPEN_PREFIX);
    let in_damaged_page = *tiles.iter().find(|&&t| page_of(t) == last_page).unwrap();
    let sound = *tiles.iter().find(|&&t| page_of(t) == 1 && t.mip == 0).unwrap();
    let blob = file.entry(sound).unwrap();
    let mut bad = v2.clone();
    bad[page_at as usize] ^= 1;
    bad[blob.offset as usize + 3] ^= 1;
    let mut server = Server::new(bad);
    let (atlas, store) = server.open(64 << 20).unwrap();
    server.fetch_tiles(&atlas, &store, &[in_damaged_page]);
    let e = atlas.read_tile(in_damaged_page).unwrap_err();
    assert!(matches!(e, AtlasError::Unavailable { .. }) && e.to_string().contains("CRC-32"), "{e}");
    assert!(!atlas.ranges_to_fetch(&[in_damaged_page]).is_empty(), "the damaged page is fetched again");
    server.fetch_tiles(&atlas, &store, &[sound]);
    let e = atlas.read_tile(sound).unwrap_err();
    assert!(matches!(e, AtlasError::Unavailable { .. }) && e.to_string().contains("CRC-32"), "{e}");
    assert!(store.missing(blob.offset, u64::from(blob.length)).is_some(), "dropped from the store");
    let loader = AtlasLoader::new(Arc::new(atlas), Arc::new(HostCache::new(1 << 20)));
    let e = loader.load(sound).unwrap_err();
    assert!(e.is_transient(), "{e}");
}

/// A driver whose server answers with nothing makes no progress: the open loop ends
/// at the driver's limit with the same `NeedBytes`, never a panic or a wrong atlas.
#[test]
fn a_server_that_sends_nothing_stops_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = bake_atlas(dir.path(), 1, Codec::Lz4, 2048);
    let store = Arc::new(RangedBytes::new(v1.len() as u64, 1 << 20));
    store.insert(0, &v1[..1000]).unwrap();
    let mut asked = Vec::new();
    for _ in 0..MAX_ROUND_TRIPS {
        let e = Atlas::open_ranged(NAME, store.clone()).unwrap_err();
        asked.push(e.need_bytes().unwrap());
        store.insert(asked.last().unwrap().start, Vec::new()).unwrap();
    }
    assert!(asked.windows(2).all(|w| w[0] == w[1]), "{asked:?}");
    assert_eq!(asked[0].start, 1000, "held bytes are not asked for again");
}

/// The web path end to end, natively: a streamer on external loader threads over a
/// ranged atlas, its jobs taken, fetched and run by a driver loop; every tile the
/// feedback asks for becomes resident with the file's bytes.
#[test]
fn a_streamer_on_external_threads_streams_a_ranged_atlas() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = bake_atlas(dir.path(), 2, Codec::Lz4, 2048);
    let mut server = Server::new(bytes);
    let (atlas, store) = server.open(DEFAULT_RANGED_BUDGET).unwrap();
    let atlas = Arc::new(atlas);
    let limits =
        GpuLimits { support: FormatSupport::default(), max_texture_side: 8192, max_storage_binding: 1 << 27 };
    let pool = PoolLayout::plan(&atlas, 16, None, limits, Trilinear::Software).unwrap();
    let shared = SharedStreaming::external(64);
    let threads = shared.loader_threads().clone();
    assert!(threads.is_external() && threads.threads() == 0);
    // Without the coarsest tiles' bytes the streamer cannot start, and says why at once.
    let e = Streamer::new_shared(atlas.clone(), &pool, StreamerConfig::default(), &shared).unwrap_err();
    assert!(e.to_string().contains("not fetched yet"), "{e}");
    server.fetch_tiles(&atlas, &store, &atlas.coarsest_tiles());
    let mut streamer =
        Streamer::new_shared(atlas.clone(), &pool, StreamerConfig::default(), &shared).unwrap();
    // The feedback of a view of 4×4 tiles of mip 0 and their ancestors.
    let layout = streamer.layout().clone();
    let view: Vec<TileId> = (0..4).flat_map(|y| (0..4).map(move |x| TileId::new(0, 0, x, y))).collect();
    let mut words = vec![0u32; layout.words()];
    for &t in &layout.with_ancestors(&view) {
        layout.mark_tile(&mut words, t);
    }
    let feedback = SparseFeedback { frame: 0, pairs: compact(&words) };
    let (mut jobs, mut frames) = (0, 0);
    for frame in 1..60 {
        frames = frame;
        let fb = (frame <= 2).then_some(&feedback);
        streamer.frame(FrameInput { frame, feedback: fb, ..FrameInput::default() });
        if streamer.fully_resident() {
            break;
        }
        // The driver: each job's ranges fetched (a version-2 atlas: pages, then blobs),
        // then run within the frame.
        while let Some(job) = threads.take_job(64) {
            jobs += 1;
            for _ in 0..MAX_ROUND_TRIPS {
                let ranges = job.fetch_ranges();
                if ranges.is_empty() {
                    break;
                }
                server.fetch_job(&ranges);
            }
            assert!(job.fetch_ranges().is_empty());
            job.run();
        }
    }
    assert!(streamer.fully_resident(), "after {frames} frames: {streamer:?}");
    for t in layout.with_ancestors(&view) {
        let bytes = streamer.host_cache().get(t).unwrap();
        assert_eq!(&bytes[..], &atlas.decode_tile(t).unwrap()[..], "{t}");
    }
    let net = atlas.network_stats().unwrap();
    eprintln!(
        "streamer: {jobs} jobs, {frames} frames, {} round trips, {} requests, {} bytes (store: {} requests, {} bytes)",
        server.round_trips, server.requests, server.bytes, net.requests, net.bytes
    );
    assert_eq!(net.bytes, server.bytes);
    // A fetcher that reports its own figures (the browser's: latencies, its disk tier)
    // is what the atlas shows from then on.
    let reported = tessera_core::format::atlas::NetworkStats {
        requests: 3,
        bytes: 7,
        latency_p50_ms: 12.5,
        disk_cache: Some(Default::default()),
        ..Default::default()
    };
    store.report_network(reported);
    assert_eq!(atlas.network_stats(), Some(reported));
    drop(streamer);
    assert_eq!(threads.clients(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random inserts (of the object's bytes, or of other bytes that replace them),
    /// reads, pins and drops never return bytes other than the last inserted at each
    /// offset, never keep more unpinned bytes than the budget, and never evict pinned
    /// bytes.
    #[test]
    fn ranged_bytes_never_return_wrong_bytes(
        len in 1u64..4000,
        budget in 0u64..1500,
        ops in prop::collection::vec((0u8..5, 0u64..4000, 0u64..700, any::<u8>()), 1..60),
    ) {
        let store = RangedBytes::new(len, budget);
        // The model: what each byte should read as if it is held.
        let mut model: Vec<Option<u8>> = vec![None; len as usize];
        let mut pinned_end = store.pinned_prefix();
        for (op, at, n, salt) in ops {
            let at = at % len;
            let n = n.min(len - at);
            match op {
                0 | 1 => {
                    let bytes: Vec<u8> = (at..at + n).map(|i| (i as u8).wrapping_mul(3).wrapping_add(salt)).collect();
                    store.insert(at, bytes.clone()).unwrap();
                    // An insert past the budget may keep only its pinned part: the model
                    // learns the new bytes; eviction only ever makes bytes absent.
                    for (k, b) in bytes.into_iter().enumerate() {
                        model[(at as usize) + k] = Some(b);
                    }
                }
                2 => {
                    if let Some(got) = store.get(at, n) {
                        for (k, b) in got.into_iter().enumerate() {
                            prop_assert_eq!(Some(b), model[at as usize + k], "byte {}", at as usize + k);
                        }
                    }
                }
                3 => {
                    store.pin_prefix(at + n);
                    pinned_end = pinned_end.max((at + n).min(len));
                    prop_assert_eq!(store.pinned_prefix(), pinned_end);
                }
                _ => {
                    store.forget(at..at + n);
                    prop_assert!(store.missing(at, n).is_none() == (n == 0));
                    for m in &mut model[at as usize..(at + n) as usize] {
                        *m = None;
                    }
                }
            }
            let s = store.stats();
            prop_assert!(s.bytes_held - s.pinned_bytes <= budget, "{:?} budget {}", s, budget);
            prop_assert!(s.bytes_held <= len);
            // Pinned bytes that were inserted and not dropped are all still held.
            for (i, m) in model.iter().enumerate().take(pinned_end as usize) {
                if let Some(b) = m {
                    prop_assert_eq!(store.get(i as u64, 1), Some(vec![*b]), "pinned byte {}", i);
                }
            }
        }
    }
}
