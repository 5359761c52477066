//! Stacked atlases (header flag STACKED), per-input codecs and bake regions whose tile
//! borders follow the region's own wrap rule.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::Path;

use tessera_core::NoProgress;
use tessera_core::bake::source::ImageSource;
use tessera_core::bake::{BakeError, BakeInput, BakeOptions, Region, bake, edge};
use tessera_core::format::atlas::{Atlas, AtlasError, ColorSpace, FLAG_STACKED, Wrap};
use tessera_core::format::codec::Codec;
use tessera_core::format::tile::TileId;

fn random_image(w: u32, h: u32, seed: u64) -> ImageSource {
    let mut s = seed | 1;
    let texels = (0..w * h * 4)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect();
    ImageSource::from_rgba(w, h, texels)
}

fn input(name: &str, src: ImageSource, wrap: Wrap, regions: Vec<Region>) -> BakeInput {
    BakeInput {
        name: name.into(),
        source: Box::new(src),
        wrap,
        color: ColorSpace::Srgb,
        codec: None,
        regions,
    }
}

fn opts(stacked: bool) -> BakeOptions {
    BakeOptions { tile_size: 16, border: 2, codec: Codec::Raw, stacked, ..BakeOptions::default() }
}

/// Rewrites the header flags of an atlas file and fixes the header CRC.
fn set_flags(path: &Path, flags: u32) {
    let mut b = std::fs::read(path).unwrap();
    b[20..24].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32fast::hash(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, b).unwrap();
}

#[test]
fn stacked_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (random_image(40, 24, 1), random_image(40, 24, 2));
    let src = [a.texels().to_vec(), b.texels().to_vec()];
    let path = dir.path().join("s.tsa");
    let inputs = vec![input("a", a, Wrap::Clamp, vec![]), input("b", b, Wrap::Clamp, vec![])];
    bake(inputs, &path, &opts(true), &NoProgress).unwrap();
    let atlas = Atlas::open(&path).unwrap();
    assert!(atlas.is_stacked());
    assert_eq!(atlas.flags(), FLAG_STACKED);
    assert!(atlas.summary().stacked);
    assert_eq!(atlas.layers()[0].layout, atlas.layers()[1].layout);
    // Same tile id in both layers: the same footprint of each source.
    for li in 0..2u16 {
        let tile = atlas.decode_tile(TileId::new(li, 0, 1, 0)).unwrap();
        let p = 20;
        let (px, py) = (5u32, 7u32);
        let (gx, gy) = (16 + px - 2, py - 2);
        let i = ((gy * 40 + gx) * 4) as usize;
        let t = ((py * p + px) * 4) as usize;
        assert_eq!(&tile[t..t + 4], &src[li as usize][i..i + 4]);
    }
    // A plain bake of the same inputs is not stacked.
    let plain = dir.path().join("p.tsa");
    let inputs = vec![input("a", random_image(40, 24, 1), Wrap::Clamp, vec![])];
    bake(inputs, &plain, &opts(false), &NoProgress).unwrap();
    assert!(!Atlas::open(&plain).unwrap().is_stacked());
}

#[test]
fn unknown_flag_bits_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.tsa");
    bake(vec![input("a", random_image(20, 20, 3), Wrap::Clamp, vec![])], &path, &opts(false), &NoProgress)
        .unwrap();
    set_flags(&path, 0b1_1000);
    let err = Atlas::open(&path).unwrap_err();
    assert!(matches!(err, AtlasError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("unknown flag bits 0x18"), "{err}");
    assert!(err.to_string().contains("f.tsa"), "{err}");
}

#[test]
fn stacked_layers_with_different_layouts_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    // The baker refuses to stack inputs of different sizes, naming both.
    let inputs = vec![
        input("big", random_image(40, 24, 1), Wrap::Clamp, vec![]),
        input("small", random_image(20, 24, 2), Wrap::Clamp, vec![]),
    ];
    let err = bake(inputs, &dir.path().join("x.tsa"), &opts(true), &NoProgress).unwrap_err();
    assert!(matches!(err, BakeError::StackedSize { .. }), "{err}");
    assert!(err.to_string().contains("'small' is 20x24") && err.to_string().contains("'big'"), "{err}");
    // A reader refuses a file whose header claims STACKED over differing layouts.
    let path = dir.path().join("m.tsa");
    let inputs = vec![
        input("big", random_image(40, 24, 1), Wrap::Clamp, vec![]),
        input("small", random_image(20, 24, 2), Wrap::Clamp, vec![]),
    ];
    bake(inputs, &path, &opts(false), &NoProgress).unwrap();
    set_flags(&path, FLAG_STACKED);
    let err = Atlas::open(&path).unwrap_err();
    assert!(matches!(err, AtlasError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("stacked layers") && err.to_string().contains("'small'"), "{err}");
}

#[test]
fn per_input_codec_overrides_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.tsa");
    let mut a = input("a", random_image(20, 20, 1), Wrap::Clamp, vec![]);
    a.codec = Some(Codec::Lz4);
    let b = input("b", random_image(20, 20, 2), Wrap::Clamp, vec![]);
    bake(vec![a, b], &path, &opts(false), &NoProgress).unwrap();
    let atlas = Atlas::open(&path).unwrap();
    assert_eq!(atlas.layers()[0].codec, Codec::Lz4);
    assert_eq!(atlas.layers()[1].codec, Codec::Raw);
}

/// The mip-`m` image rebuilt from the payloads of the atlas's tiles.
fn mip_image(atlas: &Atlas, mip: u32) -> (u32, u32, Vec<[u8; 4]>) {
    let lay = atlas.layers()[0].layout;
    let (w, h) = lay.mip_size(mip);
    let (t, b, p) = (lay.tile_size(), lay.border(), lay.padded_tile_size());
    let mut img = vec![[0u8; 4]; (w * h) as usize];
    let (tx, ty) = lay.tiles_at(mip);
    for y in 0..ty {
        for x in 0..tx {
            let tile = atlas.decode_tile(TileId::new(0, mip as u8, x, y)).unwrap();
            for j in 0..t {
                for i in 0..t {
                    let (gx, gy) = (x * t + i, y * t + j);
                    if gx < w && gy < h {
                        let s = (((j + b) * p + i + b) * 4) as usize;
                        img[(gy * w + gx) as usize] = [tile[s], tile[s + 1], tile[s + 2], tile[s + 3]];
                    }
                }
            }
        }
    }
    (w, h, img)
}

#[test]
fn region_borders_follow_the_region_wrap_on_every_clean_mip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.tsa");
    // 64² texels, tile 16: regions aligned to 32 stay clean down to mip 1.
    let repeat = Region { x: 32, y: 0, width: 32, height: 64, wrap: [Wrap::Repeat, Wrap::Repeat] };
    let clamp = Region { x: 0, y: 32, width: 32, height: 32, wrap: [Wrap::Clamp, Wrap::Clamp] };
    let mixed_u = Region { x: 0, y: 0, width: 16, height: 16, wrap: [Wrap::Repeat, Wrap::Clamp] };
    let regions = vec![repeat, clamp, mixed_u];
    let src = random_image(64, 64, 9);
    bake(vec![input("r", src, Wrap::Repeat, regions.clone())], &path, &opts(false), &NoProgress).unwrap();
    let atlas = Atlas::open(&path).unwrap();
    let lay = atlas.layers()[0].layout;
    let (t, b, p) = (16u32, 2u32, 20u32);
    let mut checked_region_tiles = [0usize; 3];
    for mip in 0..lay.mip_count() {
        let (w, h, img) = mip_image(&atlas, mip);
        let (tx, ty) = lay.tiles_at(mip);
        for y in 0..ty {
            for x in 0..tx {
                let tile = atlas.decode_tile(TileId::new(0, mip as u8, x, y)).unwrap();
                let (x0, y0) = (x * t, y * t);
                // The region that owns this tile at this mip, if any: on this mip no other
                // region touches the tiles it touches, and its extent (start rounded
                // down, end up) holds the tile's origin.
                let span = |r: &Region| {
                    let unit = t << mip;
                    [r.x / unit, r.y / unit, (r.x + r.width).div_ceil(unit), (r.y + r.height).div_ceil(unit)]
                };
                let owner = regions.iter().enumerate().find_map(|(k, r)| {
                    let a = span(r);
                    let alone = regions.iter().enumerate().all(|(j, o)| {
                        let c = span(o);
                        j == k || !(a[0] < c[2] && c[0] < a[2] && a[1] < c[3] && c[1] < a[3])
                    });
                    let (rx, ry) = (r.x >> mip, r.y >> mip);
                    let (rw, rh) =
                        ((r.x + r.width).div_ceil(1 << mip) - rx, (r.y + r.height).div_ceil(1 << mip) - ry);
                    (alone && (rx..rx + rw).contains(&x0) && (ry..ry + rh).contains(&y0)).then_some((
                        k,
                        [rx, ry, rw, rh],
                        r.wrap,
                    ))
                });
                if let Some((k, _, _)) = owner {
                    checked_region_tiles[k] += 1;
                }
                for j in 0..p {
                    for i in 0..p {
                        let (cx, cy) = (i64::from(x0 + i) - i64::from(b), i64::from(y0 + j) - i64::from(b));
                        let (gx, gy) = match owner {
                            Some((_, [rx, ry, rw, rh], wrap)) => (
                                rx + edge(cx - i64::from(rx), rw, wrap[0]),
                                ry + edge(cy - i64::from(ry), rh, wrap[1]),
                            ),
                            None => (edge(cx, w, Wrap::Repeat), edge(cy, h, Wrap::Repeat)),
                        };
                        let s = ((j * p + i) * 4) as usize;
                        assert_eq!(
                            tile[s..s + 4],
                            img[(gy * w + gx) as usize],
                            "mip {mip} tile ({x}, {y}) texel ({i}, {j}) owner {owner:?}"
                        );
                    }
                }
            }
        }
    }
    // Mip 0 and mip 1 of the two big regions; mips 0 and 1 of the small one (no other
    // region touches its tile on mip 1 either).
    assert_eq!(checked_region_tiles, [8 + 2, 4 + 1, 2]);
    // Spot check against the source: the left border of the repeat region's top-left tile
    // at mip 0 is the region's right edge column.
    let src = random_image(64, 64, 9);
    let tile = atlas.decode_tile(TileId::new(0, 0, 2, 0)).unwrap();
    let s = ((5 * p + 1) * 4) as usize; // stored (1, 5): texel (32 - 1, 3) wraps to (63, 3).
    let i = ((3 * 64 + 63) * 4) as usize;
    assert_eq!(tile[s..s + 4], src.texels()[i..i + 4]);
    // The clamp region's top border repeats its top row (y = 32), not row 31.
    let tile = atlas.decode_tile(TileId::new(0, 0, 0, 2)).unwrap();
    let s = (7 * 4) as usize; // stored (7, 0): texel (5, 30) clamps to (5, 32).
    let i = ((32 * 64 + 5) * 4) as usize;
    assert_eq!(tile[s..s + 4], src.texels()[i..i + 4]);
}

#[test]
fn a_region_outside_the_texture_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = Region { x: 16, y: 0, width: 32, height: 16, wrap: [Wrap::Repeat; 2] };
    let err = bake(
        vec![input("r", random_image(32, 32, 1), Wrap::Clamp, vec![r])],
        &dir.path().join("r.tsa"),
        &opts(false),
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(err, BakeError::Region { .. }) && err.to_string().contains("'r'"), "{err}");
}
