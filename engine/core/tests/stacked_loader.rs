//! The stacked loader delivers a tile of every layer at once, each in its own format,
//! and fails as a whole when one layer's tile is corrupt.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tessera_core::NoProgress;
use tessera_core::bake::source::Generated;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::{Atlas, ColorSpace, Wrap};
use tessera_core::format::codec::{Codec, TargetFormat};
use tessera_core::{HostCache, StackedLoader, TileId, TileLoader};

fn stacked_atlas(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("stack.tsa");
    let input = |name: &str, cell, codec, color| BakeInput {
        name: name.into(),
        source: Box::new(Generated::with_cell(300, 200, cell)),
        wrap: Wrap::Clamp,
        color,
        codec,
        regions: Vec::new(),
    };
    let inputs = vec![
        input("albedo", 16, None, ColorSpace::Srgb),
        input("normal", 40, Some(Codec::Raw), ColorSpace::Linear),
    ];
    let opts = BakeOptions { codec: Codec::Lz4, stacked: true, ..BakeOptions::default() };
    bake(inputs, &path, &opts, &NoProgress).unwrap();
    path
}

#[test]
fn one_request_loads_every_layer_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = Arc::new(Atlas::open(stacked_atlas(dir.path())).unwrap());
    assert!(atlas.is_stacked());
    let cache = Arc::new(HostCache::new(64 << 20));
    let loader =
        StackedLoader::new(atlas.clone(), cache.clone(), &[TargetFormat::Rgba8, TargetFormat::Rgba8]);
    let side = atlas.layers()[0].layout.padded_tile_size();
    for (mip, x, y) in [(0u8, 0u32, 0u32), (0, 2, 1), (1, 1, 0), (2, 0, 0)] {
        let bytes = loader.load(TileId::new(0, mip, x, y)).unwrap();
        let a = atlas.decode_tile(TileId::new(0, mip, x, y)).unwrap();
        let b = atlas.decode_tile(TileId::new(1, mip, x, y)).unwrap();
        assert_ne!(a, b, "the layers differ");
        assert_eq!(&bytes[..a.len()], &a[..]);
        assert_eq!(&bytes[a.len()..], &b[..]);
        assert_eq!(bytes.len(), 2 * (side * side * 4) as usize, "one RGBA8 part per layer");
    }
    // Cached under the layer-0 id, whole.
    assert_eq!(cache.len(), 4);
    let again = loader.load(TileId::new(0, 0, 2, 1)).unwrap();
    assert_eq!(again.len(), 2 * (side * side * 4) as usize);
}

#[test]
fn a_corrupt_tile_in_any_layer_fails_the_whole_tile() {
    let dir = tempfile::tempdir().unwrap();
    let path = stacked_atlas(dir.path());
    let atlas = Atlas::open(&path).unwrap();
    // Flip a byte inside layer 1's tile (0, 1, 0).
    let entry = atlas.entry(TileId::new(1, 0, 1, 0)).unwrap();
    drop(atlas);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[entry.offset as usize + 7] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let atlas = Arc::new(Atlas::open(&path).unwrap());
    let cache = Arc::new(HostCache::new(64 << 20));
    let loader = StackedLoader::new(atlas, cache.clone(), &[TargetFormat::Rgba8, TargetFormat::Rgba8]);
    let err = loader.load(TileId::new(0, 0, 1, 0)).unwrap_err();
    assert!(
        err.to_string().contains("layer 1 mip 0 tile (1, 0)") && err.to_string().contains("checksum"),
        "{err}"
    );
    assert_eq!(cache.len(), 0, "nothing half-loaded is cached");
    assert!(loader.load(TileId::new(0, 0, 0, 0)).is_ok(), "other tiles still load");
}
