//! Two streamers over two atlases on one `SharedStreaming`: one host cache (a partition
//! each) and one set of loader threads. Both views must become fully resident with each
//! atlas's own bytes, though the two atlases use the same tile ids.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tessera_core::bake::source::Generated;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::Atlas;
use tessera_core::format::codec::{Codec, TargetFormat};
use tessera_core::stream::feedback::{FeedbackLayout, compact};
use tessera_core::stream::pool_layout::{PoolLayout, Trilinear};
use tessera_core::stream::streamer::{FrameInput, SparseFeedback, Streamer, StreamerConfig};
use tessera_core::{NoProgress, SharedStreaming, TileId};

/// Bakes a generated `width × height` texture with `cell`-texel labels into `dir/name.tsa`.
fn baked(dir: &Path, name: &str, width: u32, height: u32, cell: u32) -> Arc<Atlas> {
    let path: PathBuf = dir.join(format!("{name}.tsa"));
    let input = BakeInput::new(name, Generated::with_cell(width, height, cell));
    let opts = BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() };
    bake(vec![input], &path, &opts, &NoProgress).unwrap();
    Arc::new(Atlas::open(&path).unwrap())
}

/// A streamer on the shared parts, with the application's frame counter and every byte
/// it was told to upload.
struct Driver {
    atlas: Arc<Atlas>,
    streamer: Streamer,
    layout: FeedbackLayout,
    view: Vec<TileId>,
    frame: u64,
    uploaded: HashMap<TileId, Arc<[u8]>>,
}

impl Driver {
    fn new(atlas: Arc<Atlas>, shared: &SharedStreaming) -> Self {
        let layout = atlas.layers()[0].layout;
        let pool = PoolLayout::from_parts(
            vec![TargetFormat::Rgba8],
            vec![layout],
            (8, 8),
            false,
            Trilinear::Software,
        );
        // The per-streamer cache and thread settings are ignored on shared parts.
        let config = StreamerConfig { host_cache_mib: 1, loader_threads: 7, ..StreamerConfig::default() };
        let streamer = Streamer::new_shared(atlas.clone(), &pool, config, shared).unwrap();
        // Every tile of layer 0, from mip 0 up to the coarsest.
        let view = layout.tiles(0).collect();
        let feedback_layout = FeedbackLayout::new(&pool.owners);
        Self { atlas, streamer, layout: feedback_layout, view, frame: 0, uploaded: HashMap::new() }
    }

    /// One frame whose feedback asks for every tile of every mip.
    fn step(&mut self) {
        let mut words = vec![0u32; self.layout.words()];
        for &t in &self.view {
            self.layout.mark_tile(&mut words, t);
        }
        let feedback = SparseFeedback { frame: self.frame.saturating_sub(1), pairs: compact(&words) };
        let plan = self.streamer.frame(FrameInput {
            frame: self.frame,
            feedback: Some(&feedback),
            last_frame_ms: None,
            last_upload_ms: 0.0,
            upload_gpu: None,
            predicted: None,
        });
        for u in plan.uploads {
            self.uploaded.insert(u.tile, u.bytes);
        }
        self.frame += 1;
    }

    fn decoded(&self, tile: TileId) -> Vec<u8> {
        self.atlas.decode_tile(tile).unwrap()
    }
}

#[test]
fn two_streamers_share_one_cache_and_one_set_of_loader_threads() {
    let dir = tempfile::tempdir().unwrap();
    let atlas_a = baked(dir.path(), "a", 700, 400, 128);
    let atlas_b = baked(dir.path(), "b", 520, 300, 64);
    let origin = TileId::new(0, 0, 0, 0);
    assert_ne!(atlas_a.decode_tile(origin).unwrap(), atlas_b.decode_tile(origin).unwrap());

    let shared = SharedStreaming::new(64, 2).unwrap();
    let mut a = Driver::new(atlas_a, &shared);
    let mut b = Driver::new(atlas_b, &shared.clone());
    let threads = shared.loader_threads();
    assert_eq!((threads.threads(), threads.clients()), (2, 2));
    assert_eq!((a.streamer.loader().threads(), b.streamer.loader().threads()), (2, 2));
    assert_eq!(shared.host_cache().partitions(), 3, "the root view and one partition per streamer");
    assert!(a.streamer.host_cache().shares_store_with(b.streamer.host_cache()));

    let mut frames = 0;
    while !(a.streamer.fully_resident() && b.streamer.fully_resident()) {
        assert!(frames < 2000, "not fully resident: {:?} / {:?}", a.streamer, b.streamer);
        a.step();
        b.step();
        frames += 1;
        // Loader threads deliver between frames.
        std::thread::sleep(Duration::from_millis(1));
    }

    for d in [&a, &b] {
        let loader = d.streamer.loader();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while loader.pending() + loader.in_flight() > 0 {
            assert!(std::time::Instant::now() < deadline, "loader never idle: {loader:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for d in [&a, &b] {
        for &tile in &d.view {
            assert!(d.streamer.residency().is_resident(tile), "{tile} of {}", d.atlas.path().display());
        }
        // Every upload carried this atlas's own bytes, whichever streamer cached first.
        assert!(d.uploaded.len() >= d.view.len());
        for (&tile, bytes) in &d.uploaded {
            assert_eq!(&bytes[..], &d.decoded(tile)[..], "{tile} of {}", d.atlas.path().display());
        }
        // So does each partition of the cache.
        let cache = d.streamer.host_cache();
        let cached = cache.resident_tiles();
        assert!(d.view.iter().all(|t| cached.contains(t)), "the 64 MiB cache keeps every loaded tile");
        for tile in cached {
            assert_eq!(&cache.get(tile).unwrap()[..], &d.decoded(tile)[..], "{tile}");
        }
    }

    // Both partitions hold the same tile id, each with its own bytes; the store holds
    // exactly the two partitions' tiles.
    let (cache_a, cache_b) = (a.streamer.host_cache().clone(), b.streamer.host_cache().clone());
    assert_eq!(&cache_a.get(origin).unwrap()[..], &a.decoded(origin)[..]);
    assert_eq!(&cache_b.get(origin).unwrap()[..], &b.decoded(origin)[..]);
    let store = shared.host_cache().counters();
    assert!(shared.host_cache().is_empty());
    assert_eq!(store.tiles, (cache_a.len() + cache_b.len()) as u64);
    assert_eq!(store.bytes, cache_a.bytes() + cache_b.bytes());
    assert_eq!(store.evictions, 0);
    // Statistics report the shared store.
    assert_eq!(a.streamer.stats(1).host_cache, b.streamer.stats(1).host_cache);

    // A flush empties one streamer's partition only.
    b.streamer.flush_host_cache();
    assert!(cache_b.is_empty());
    assert_eq!(shared.host_cache().counters().tiles, cache_a.len() as u64);

    // Dropping a streamer takes its partition and its loader queue with it; the other
    // keeps streaming on the same threads.
    let tiles_a = cache_a.len() as u64;
    assert!(tiles_a > 0);
    drop(cache_a);
    drop(a);
    assert_eq!(threads.clients(), 1);
    assert_eq!(shared.host_cache().partitions(), 2);
    assert_eq!(shared.host_cache().counters().tiles, cache_b.len() as u64);
    b.uploaded.clear();
    b.streamer.flush_vram();
    let mut frames = 0;
    while !b.streamer.fully_resident() || b.streamer.residency().resident_count() < b.view.len() {
        assert!(frames < 2000, "b did not stream back in: {:?}", b.streamer);
        b.step();
        frames += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    // Everything but the pinned coarsest tile, which a VRAM flush keeps, came again.
    for &tile in b.view.iter().filter(|&&t| !b.streamer.residency().is_pinned(t)) {
        assert_eq!(&b.uploaded[&tile][..], &b.decoded(tile)[..], "{tile}");
    }
    for tile in cache_b.resident_tiles() {
        assert_eq!(&cache_b.get(tile).unwrap()[..], &b.decoded(tile)[..], "{tile}");
    }

    // The budget is the shared one: setting it from a streamer changes it for all.
    b.streamer.set_host_budget_mib(0);
    assert_eq!(shared.host_cache().budget(), 0);
    assert!(cache_b.is_empty());
}
