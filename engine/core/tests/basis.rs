//! Basis Universal layers end to end without a GPU: bake, open, verify, decode against
//! the source, load through the atlas loader in block formats, and corruption.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::PathBuf;
use std::sync::Arc;

use tessera_core::AtlasLoader;
use tessera_core::NoProgress;
use tessera_core::bake::source::ImageSource;
use tessera_core::bake::{BakeError, BakeInput, BakeOptions, bake, edge};
use tessera_core::compare::compare;
use tessera_core::format::atlas::{Atlas, AtlasError, ColorSpace, Wrap};
use tessera_core::format::codec::{Codec, TargetFormat};
use tessera_core::format::tile::TileId;
use tessera_core::stream::host_cache::HostCache;
use tessera_core::stream::loader::TileLoader;

const W: u32 = 300;
const H: u32 = 200;
const TILE: u32 = 64;
const BORDER: u32 = 4;

/// A 300×200 crop of the Blue Marble fetched by `assets/fetch-data.sh` (Western Europe).
fn real_crop() -> Vec<u8> {
    let dir = tessera_core::bake::source::data_dir();
    let path = dir.join("bmng.jpg");
    assert!(path.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", path.display());
    let img = ImageSource::open(&path).unwrap();
    let (iw, x0, y0) = (5400usize, 2650usize, 600usize);
    (y0..y0 + H as usize)
        .flat_map(|y| img.texels()[(y * iw + x0) * 4..(y * iw + x0 + W as usize) * 4].to_vec())
        .collect()
}

fn bake_codec(dir: &std::path::Path, texels: &[u8], codec: Codec) -> PathBuf {
    let path = dir.join(format!("{}.tsa", codec.name()));
    let input = BakeInput {
        name: "earth".into(),
        source: Box::new(ImageSource::from_rgba(W, H, texels.to_vec())),
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
        regions: Vec::new(),
    };
    let opts = BakeOptions { tile_size: TILE, border: BORDER, codec, ..BakeOptions::default() };
    bake(vec![input], &path, &opts, &NoProgress).unwrap();
    path
}

/// The stored texels of mip-0 tile `(x, y)` cut from the source, border included.
fn source_tile(src: &[u8], x: u32, y: u32, p: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity((p * p * 4) as usize);
    for j in 0..p {
        for i in 0..p {
            let gx = edge(i64::from(x * TILE + i) - i64::from(BORDER), W, Wrap::Clamp);
            let gy = edge(i64::from(y * TILE + j) - i64::from(BORDER), H, Wrap::Clamp);
            let k = ((gy * W + gx) * 4) as usize;
            out.extend_from_slice(&src[k..k + 4]);
        }
    }
    out
}

#[test]
fn basis_layers_bake_open_verify_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let src = real_crop();
    // (codec, the codecs its tiles may be stored with, PSNR floors of all mip-0 tiles
    // together and of the worst one against the source). Measured: ETC1S 32.3 dB over
    // mip 0, worst tile 29.7 dB, 1.80 bits/texel over all mips; UASTC 43.6 dB, worst
    // tile 40.6 dB, 5.74 bits/texel (LZ4 on top).
    for (codec, stored, floor, worst_floor) in [
        (Codec::Etc1s, &[Codec::Etc1s][..], 30.0, 28.0),
        (Codec::Uastc, &[Codec::Uastc, Codec::UastcLz4][..], 40.0, 38.0),
    ] {
        let path = bake_codec(dir.path(), &src, codec);
        let atlas = Arc::new(Atlas::open(&path).unwrap());
        assert!(atlas.verify(&NoProgress).is_empty(), "{codec}: verify");
        let layer = &atlas.layers()[0];
        assert_eq!(layer.codec, codec);
        let lay = layer.layout;
        let p = lay.padded_tile_size();
        for t in lay.tiles(0) {
            let e = atlas.entry(t).unwrap();
            assert!(stored.contains(&e.codec), "{codec}: {t} stored as {}", e.codec);
            assert_eq!(e.raw_length, p * p * 4);
        }
        let summary = atlas.summary();
        let bpt = summary.layers[0].stored_bytes as f64 * 8.0 / (lay.tile_count() * u64::from(p * p)) as f64;
        let (tx, ty) = lay.tiles_at(0);
        let (mut worst, mut all, mut all_src) = (f64::INFINITY, Vec::new(), Vec::new());
        for y in 0..ty {
            for x in 0..tx {
                let tile = atlas.decode_tile(TileId::new(0, 0, x, y)).unwrap();
                let want = source_tile(&src, x, y, p);
                worst = worst.min(compare(&tile, &want).psnr_db);
                all.extend_from_slice(&tile);
                all_src.extend_from_slice(&want);
            }
        }
        let overall = compare(&all, &all_src).psnr_db;
        eprintln!("{codec}: {bpt:.2} bits/texel on disk, mip 0 {overall:.2} dB, worst tile {worst:.2} dB");
        assert!(overall >= floor, "{codec}: mip 0 {overall:.2} dB < {floor} dB");
        assert!(worst >= worst_floor, "{codec}: worst mip-0 tile {worst:.2} dB < {worst_floor} dB");

        // Each pool format: every tile loads with its exact size, and is cached transcoded.
        for target in TargetFormat::ALL {
            let cache = Arc::new(HostCache::new(1 << 26));
            let loader = AtlasLoader::with_target(Arc::clone(&atlas), Arc::clone(&cache), target);
            assert_eq!(loader.target(), target);
            for t in lay.tiles(0) {
                let bytes = loader.load(t).unwrap();
                assert_eq!(bytes.len(), target.bytes_per_tile(p), "{codec} → {target}");
                assert!(Arc::ptr_eq(&bytes, &loader.load(t).unwrap()), "served from the host cache");
            }
            assert_eq!(cache.bytes(), lay.tile_count() * target.bytes_per_tile(p) as u64);
        }
    }
}

#[test]
fn lz4_layers_load_only_as_rgba8() {
    let dir = tempfile::tempdir().unwrap();
    let src: Vec<u8> = (0..W * H * 4).map(|i| (i % 97) as u8).collect();
    let atlas = Arc::new(Atlas::open(bake_codec(dir.path(), &src, Codec::Lz4)).unwrap());
    let cache = Arc::new(HostCache::new(1 << 24));
    let t = TileId::new(0, 0, 0, 0);
    let rgba = AtlasLoader::new(Arc::clone(&atlas), Arc::clone(&cache)).load(t).unwrap();
    assert_eq!(&rgba[..], &atlas.decode_tile(t).unwrap()[..]);
    let bc7 = AtlasLoader::with_target(atlas, Arc::new(HostCache::new(1 << 24)), TargetFormat::Bc7);
    let err = bc7.load(t).unwrap_err().to_string();
    assert!(err.contains("lz4") && err.contains("bc7"), "{err}");
}

#[test]
fn corrupted_basis_tile_is_reported_not_crashed() {
    let dir = tempfile::tempdir().unwrap();
    let src = real_crop();
    let path = bake_codec(dir.path(), &src, Codec::Etc1s);
    let bad = TileId::new(0, 0, 1, 1);
    let e = Atlas::open(&path).unwrap().entry(bad).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[e.offset as usize + e.length as usize / 2] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let atlas = Arc::new(Atlas::open(&path).unwrap());
    let errors = atlas.verify(&NoProgress);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(errors[0], AtlasError::TileChecksum { tile, .. } if tile == bad));
    let loader = AtlasLoader::with_target(atlas, Arc::new(HostCache::new(1 << 24)), TargetFormat::Bc7);
    assert_eq!(loader.load(bad).unwrap_err().tile(), bad);
    assert!(loader.load(TileId::new(0, 0, 0, 0)).is_ok());
}

#[test]
fn out_of_range_quality_is_a_bake_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = BakeInput {
        name: "q".into(),
        source: Box::new(ImageSource::from_rgba(8, 8, vec![9; 8 * 8 * 4])),
        wrap: Wrap::Clamp,
        color: ColorSpace::Linear,
        codec: None,
        regions: Vec::new(),
    };
    let opts = BakeOptions { codec: Codec::Etc1s, quality: 0, ..BakeOptions::default() };
    let err = bake(vec![input], &dir.path().join("q.tsa"), &opts, &NoProgress).unwrap_err();
    assert!(matches!(err, BakeError::Options(_)), "{err}");
    assert!(err.to_string().contains("quality 0"), "{err}");
}
