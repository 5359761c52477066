//! The disk → host path end to end: a baked atlas served by the loader pool through
//! the host cache, with statistics, and corrupted tiles reported instead of served.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::sync::Arc;
use std::time::Duration;

use tessera_core::NoProgress;
use tessera_core::bake::source::Generated;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::{Atlas, ColorSpace, Wrap};
use tessera_core::format::codec::Codec;
use tessera_core::stream::loader::{LoadOutcome, LoaderConfig, LoaderPool};
use tessera_core::{AtlasLoader, HostCache, StatsSnapshot, TileId};

fn baked(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("s.tsa");
    let input = BakeInput {
        name: "s".into(),
        source: Box::new(Generated::new(700, 400)),
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
        regions: Vec::new(),
    };
    let opts = BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() };
    bake(vec![input], &path, &opts, &NoProgress).unwrap();
    path
}

fn drain(pool: &LoaderPool, n: usize) -> Vec<tessera_core::LoadResult> {
    (0..n).map(|_| pool.results().recv_timeout(Duration::from_secs(30)).expect("a result")).collect()
}

#[test]
fn loader_pool_serves_every_tile_through_the_host_cache() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = Arc::new(Atlas::open(baked(dir.path())).unwrap());
    let tiles: Vec<TileId> = atlas.layers()[0].layout.tiles(0).collect();
    let tile_bytes = 136 * 136 * 4;
    let cache = Arc::new(HostCache::new((tiles.len() * tile_bytes) as u64));
    let pool =
        LoaderPool::new(Arc::new(AtlasLoader::new(atlas.clone(), cache.clone())), 2, LoaderConfig::default())
            .unwrap();
    for &t in &tiles {
        assert!(pool.request(t, 0, 1));
    }
    let results = drain(&pool, tiles.len());
    for r in &results {
        match &r.outcome {
            LoadOutcome::Ready(bytes) => assert_eq!(&bytes[..], &atlas.decode_tile(r.tile).unwrap()[..]),
            other => panic!("{}: {other:?}", r.tile),
        }
    }
    let stats = StatsSnapshot::gather(&atlas, &cache, Some(&pool));
    assert_eq!(stats.host.tiles, tiles.len() as u64);
    assert_eq!(stats.host.bytes, (tiles.len() * tile_bytes) as u64);
    assert_eq!(stats.disk.tiles, atlas.tile_count());
    assert!(stats.disk.bytes < stats.host.bytes, "lz4 shrinks the generated texture");
    assert_eq!(stats.loader.completed, tiles.len() as u64);
    assert_eq!(stats.host_cache.misses, tiles.len() as u64);

    // A second round is served from the host cache alone.
    for &t in &tiles {
        assert!(pool.request(t, 0, 2));
    }
    drain(&pool, tiles.len());
    let stats = StatsSnapshot::gather(&atlas, &cache, Some(&pool));
    assert_eq!(stats.host_cache.hits, tiles.len() as u64);
    assert_eq!(stats.host_hit_rate(), 0.5);
    assert!(pool.shutdown().is_empty());
}

#[test]
fn corrupted_tile_is_reported_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = baked(dir.path());
    let bad = TileId::new(0, 0, 2, 1);
    let e = Atlas::open(&path).unwrap().entry(bad).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[e.offset as usize + 7] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let atlas = Arc::new(Atlas::open(&path).unwrap());
    let cache = Arc::new(HostCache::new(1 << 24));
    let pool = LoaderPool::new(Arc::new(AtlasLoader::new(atlas, cache.clone())), 1, LoaderConfig::default())
        .unwrap();
    pool.request(bad, 0, 1);
    pool.request(TileId::new(0, 0, 0, 0), 0, 1);
    let results = drain(&pool, 2);
    let failed = results.iter().find(|r| r.tile == bad).unwrap();
    match &failed.outcome {
        LoadOutcome::Failed(err) => assert!(err.to_string().contains("checksum"), "{err}"),
        other => panic!("{other:?}"),
    }
    assert!(!cache.contains(bad));
    assert!(cache.contains(TileId::new(0, 0, 0, 0)));
}
