//! Shared tile blobs (writer deduplication, reader rules, verify) and the mosaic source
//! whose repeated cells produce them, without a GPU and without the real images.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::{Path, PathBuf};

use tessera_core::NoProgress;
use tessera_core::bake::mosaic::{Mosaic, MosaicCrop, MosaicError, crop_at};
use tessera_core::bake::source::{ImageSource, RowSource};
use tessera_core::bake::{BakeInput, BakeOptions, BakeReport, bake};
use tessera_core::format::atlas::{
    Atlas, AtlasError, AtlasWriter, ColorSpace, ENTRY_BYTES, HEADER_BYTES, LAYER_BYTES, Wrap,
};
use tessera_core::format::codec::Codec;
use tessera_core::format::tile::TileId;

const TILE: u32 = 16;
const BORDER: u32 = 2;
const CELL: u32 = 64;
const CELLS: u32 = 4;

fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Opaque, so that alpha weighting plays no part in the comparisons.
            if i % 4 == 3 { 255 } else { (s >> 24) as u8 }
        })
        .collect()
}

/// Three crops: one at full size, two enlarged twice (nearest texel).
fn crops() -> Vec<MosaicCrop> {
    vec![
        MosaicCrop::new("a", CELL, 1, noise((CELL * CELL * 4) as usize, 1)).unwrap(),
        MosaicCrop::new("b", CELL / 2, 2, noise((CELL * CELL) as usize, 2)).unwrap(),
        MosaicCrop::new("c", CELL / 2, 2, noise((CELL * CELL) as usize, 3)).unwrap(),
    ]
}

fn mosaic() -> Mosaic {
    Mosaic::with_grid(CELL, CELLS, crops()).unwrap()
}

fn opts() -> BakeOptions {
    BakeOptions { tile_size: TILE, border: BORDER, codec: Codec::Lz4, ..BakeOptions::default() }
}

fn bake_source(
    path: &Path,
    source: Box<dyn RowSource>,
    regions: Vec<tessera_core::bake::Region>,
) -> BakeReport {
    bake_source_with(path, source, regions, &opts())
}

fn bake_source_with(
    path: &Path,
    source: Box<dyn RowSource>,
    regions: Vec<tessera_core::bake::Region>,
    opts: &BakeOptions,
) -> BakeReport {
    let input = BakeInput {
        name: "m".into(),
        source,
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
        regions,
    };
    bake(vec![input], path, opts, &NoProgress).unwrap()
}

fn bake_mosaic(dir: &Path) -> (PathBuf, BakeReport) {
    let path = dir.join("mosaic.tsa");
    let m = mosaic();
    let regions = m.regions();
    let report = bake_source(&path, Box::new(m), regions);
    (path, report)
}

/// The mosaic without its own mip levels: the baker filters every level itself.
struct Plain(Mosaic);

impl RowSource for Plain {
    fn size(&self) -> (u32, u32) {
        self.0.size()
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_rows(y0, out)
    }
}

/// Every tile of an atlas, in tile order.
fn tiles(atlas: &Atlas) -> Vec<TileId> {
    atlas.layers()[0].layout.tiles(0).collect()
}

/// A copy of `src` written tile by tile with deduplication off.
fn copy_without_dedup(src: &Atlas, dest: &Path) -> u64 {
    let mut w = AtlasWriter::create(dest, src.layers().to_vec()).unwrap();
    w.set_dedup(false);
    for t in tiles(src) {
        let e = src.entry(t).unwrap();
        w.push_tile(&src.read_tile(t).unwrap(), e.codec, e.raw_length).unwrap();
    }
    assert_eq!(w.shared_tiles(), 0);
    w.finish().unwrap()
}

#[test]
fn mosaic_rows_equal_the_crop_texels() {
    let m = mosaic();
    let c = crops();
    assert_eq!(m.size(), (CELL * CELLS, CELL * CELLS));
    let row_bytes = (CELL * CELLS * 4) as usize;
    let mut rows = vec![0u8; 3 * row_bytes];
    for y0 in [0, CELL - 1, 2 * CELL + 17, CELL * CELLS - 3] {
        m.read_rows(y0, &mut rows).unwrap();
        for (i, row) in rows.chunks_exact(row_bytes).enumerate() {
            let y = y0 + i as u32;
            for x in [0, 1, CELL - 1, CELL, CELL + 5, 3 * CELL + 40, CELL * CELLS - 1] {
                let crop = crop_at(x / CELL, y / CELL, c.len());
                let (side, scale) = if crop == 0 { (CELL, 1) } else { (CELL / 2, 2) };
                let texels = noise((side * side * 4) as usize, crop as u64 + 1);
                let s = (((y % CELL) / scale * side + (x % CELL) / scale) * 4) as usize;
                let at = (x * 4) as usize;
                assert_eq!(&row[at..at + 4], &texels[s..s + 4], "texel ({x}, {y})");
                assert_eq!(m.texel(x, y), <[u8; 4]>::try_from(&texels[s..s + 4]).unwrap());
            }
        }
    }
    assert!(m.read_rows(CELL * CELLS - 2, &mut rows).is_err(), "rows past the bottom");
}

#[test]
fn neighbouring_cells_show_different_crops() {
    for cy in 0..16u32 {
        for cx in 0..16u32 {
            for (dx, dy) in [(1, 0), (0, 1), (1, 1), (1, -1)] {
                let (nx, ny) = (cx as i32 + dx, cy as i32 + dy);
                if (0..16).contains(&nx) && (0..16).contains(&ny) {
                    assert_ne!(crop_at(cx, cy, 6), crop_at(nx as u32, ny as u32, 6), "({cx}, {cy})");
                }
            }
        }
    }
}

#[test]
fn bad_grids_and_crops_are_errors() {
    assert!(MosaicCrop::new("x", 4, 1, vec![0; 10]).is_err());
    let e = Mosaic::with_grid(CELL + 1, CELLS, crops()).err().unwrap();
    assert!(e.to_string().contains("crop 'a'"), "{e}");
    assert!(Mosaic::with_grid(CELL, CELLS, Vec::new()).is_err());
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("small.png");
    image::RgbaImage::new(40, 30).save(&png).unwrap();
    let e = MosaicCrop::from_file(&png, 20, 0, 32, 1).err().unwrap();
    assert!(matches!(e, MosaicError::CropOutside { .. }), "{e}");
    assert!(e.to_string().contains("small.png") && e.to_string().contains("40x30"), "{e}");
    let ok = MosaicCrop::from_file(&png, 8, 0, 30, 2).unwrap();
    assert_eq!(ok.cell_side(), 60);
    let e = MosaicCrop::from_file(&dir.path().join("none.png"), 0, 0, 1, 1).err().unwrap();
    assert!(e.to_string().contains("none.png"), "{e}");
}

/// The mosaic's own mip levels are exactly what the baker's filter makes: the atlas
/// is the same, byte for byte, whether the baker reads them or filters every level.
#[test]
fn supplied_mip_levels_equal_the_bakers_filter() {
    let dir = tempfile::tempdir().unwrap();
    let (own, _) = bake_mosaic(dir.path());
    let plain = dir.path().join("plain.tsa");
    let regions = mosaic().regions();
    bake_source(&plain, Box::new(Plain(mosaic())), regions);
    assert!(std::fs::read(&own).unwrap() == std::fs::read(&plain).unwrap(), "atlases differ");
}

/// With a region per cell, every tile of a cell (borders included) is the tile of its crop
/// baked alone with repeat wrapping, on every mip where a cell still owns whole tiles.
#[test]
fn mosaic_tiles_equal_their_crop_baked_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = bake_mosaic(dir.path());
    let atlas = Atlas::open(&path).unwrap();
    let alone: Vec<Atlas> = crops()
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let p = dir.path().join(format!("crop{i}.tsa"));
            let one = Mosaic::with_grid(CELL, 1, vec![c]).unwrap();
            let input = BakeInput {
                name: "c".into(),
                source: Box::new(one),
                wrap: Wrap::Repeat,
                color: ColorSpace::Srgb,
                codec: None,
                regions: Vec::new(),
            };
            bake(vec![input], &p, &opts(), &NoProgress).unwrap();
            Atlas::open(&p).unwrap()
        })
        .collect();
    let per_cell = CELL / TILE;
    let mut checked = 0;
    for mip in 0..per_cell.trailing_zeros() + 1 {
        let n = per_cell >> mip;
        for y in 0..CELLS * n {
            for x in 0..CELLS * n {
                let crop = crop_at(x / n, y / n, 3);
                let got = atlas.decode_tile(TileId::new(0, mip as u8, x, y)).unwrap();
                let want = alone[crop].decode_tile(TileId::new(0, mip as u8, x % n, y % n)).unwrap();
                assert!(got == want, "mip {mip} tile ({x}, {y})");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 16 * 16 + 8 * 8 + 4 * 4);
}

#[test]
fn dedup_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (path, report) = bake_mosaic(dir.path());
    let atlas = Atlas::open(&path).unwrap();
    assert!(atlas.verify(&NoProgress).is_empty());
    // 16 cells of 3 crops: on mips 0..=2 only 3 × (16 + 4 + 1) tiles are distinct.
    let layer = &report.layers[0];
    assert_eq!(layer.tiles, 16 * 16 + 8 * 8 + 4 * 4 + 2 * 2 + 1);
    assert!(layer.shared_tiles >= layer.tiles - 3 * 21 - 5, "{} shared", layer.shared_tiles);
    let summary = atlas.summary();
    assert_eq!(summary.layers[0].shared_tiles, layer.shared_tiles);
    assert_eq!(summary.layers[0].stored_bytes, layer.stored_bytes);
    assert_eq!(atlas.stored_bytes(), layer.stored_bytes);
    let full = dir.path().join("full.tsa");
    let full_bytes = copy_without_dedup(&atlas, &full);
    assert!(report.file_bytes * 4 < full_bytes, "{} vs {full_bytes} bytes", report.file_bytes);
    let full = Atlas::open(&full).unwrap();
    assert_eq!(full.summary().layers[0].shared_tiles, 0);
    assert!(full.verify(&NoProgress).is_empty());
    for t in tiles(&atlas) {
        assert_eq!(atlas.decode_tile(t).unwrap(), full.decode_tile(t).unwrap(), "{t}");
    }
}

/// Offsets of the blobs shared by more than one tile, with the tiles sharing each.
fn shared_blobs(atlas: &Atlas) -> Vec<(u64, Vec<TileId>)> {
    let mut by_offset = std::collections::BTreeMap::<u64, Vec<TileId>>::new();
    for t in tiles(atlas) {
        by_offset.entry(atlas.entry(t).unwrap().offset).or_default().push(t);
    }
    by_offset.into_iter().filter(|(_, ts)| ts.len() > 1).collect()
}

#[test]
fn a_flipped_byte_in_a_shared_blob_is_reported_for_every_tile_sharing_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = bake_mosaic(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let shared = shared_blobs(&Atlas::open(&path).unwrap());
    assert!(!shared.is_empty());
    for (offset, sharers) in shared.iter().take(4) {
        let mut m = bytes.clone();
        m[*offset as usize + 5] ^= 0x10;
        let bad = dir.path().join("bad.tsa");
        std::fs::write(&bad, &m).unwrap();
        let atlas = Atlas::open(&bad).expect("tile data is not checked on open");
        let errors = atlas.verify(&NoProgress);
        let reported: Vec<TileId> = errors.iter().filter_map(AtlasError::tile).collect();
        assert_eq!(&reported, sharers, "blob at {offset}");
        assert!(errors.iter().all(|e| matches!(e, AtlasError::TileChecksum { .. })));
    }
}

/// Rewrites the header and meta checksums after a deliberate edit of the index.
fn fix_checksums(bytes: &mut [u8]) {
    let layers = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let tiles = u64::from_le_bytes(bytes[24..32].try_into().unwrap()) as usize;
    let meta_end = HEADER_BYTES + layers * LAYER_BYTES + tiles * ENTRY_BYTES;
    let meta = crc32fast::hash(&bytes[HEADER_BYTES..meta_end]);
    bytes[56..60].copy_from_slice(&meta.to_le_bytes());
    let h = crc32fast::hash(&bytes[0..60]);
    bytes[60..64].copy_from_slice(&h.to_le_bytes());
}

/// Index entry `i`'s offset and length fields.
fn set_entry(bytes: &mut [u8], i: usize, offset: u64, length: u32) {
    let at = HEADER_BYTES + LAYER_BYTES + i * ENTRY_BYTES;
    bytes[at..at + 8].copy_from_slice(&offset.to_le_bytes());
    bytes[at + 8..at + 12].copy_from_slice(&length.to_le_bytes());
}

/// Version 1 (its index lies whole after the layer table and is checked at open; version
/// 2 checks overlaps in `verify`, see `version_2_overlapping_blobs_fail_verify`).
#[test]
fn blobs_may_be_shared_but_not_partially_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.tsa");
    // No two tiles of a plain (regionless) noise image are alike: nothing is shared.
    let img = ImageSource::from_rgba(64, 64, noise(64 * 64 * 4, 9));
    let report =
        bake_source_with(&path, Box::new(img), Vec::new(), &BakeOptions { format_version: 1, ..opts() });
    assert_eq!(report.layers[0].shared_tiles, 0);
    let atlas = Atlas::open(&path).unwrap();
    let e0 = atlas.entry(TileId::new(0, 0, 0, 0)).unwrap();
    let e1 = atlas.entry(TileId::new(0, 0, 1, 0)).unwrap();
    assert!(e0.length > 32);
    drop(atlas);
    let bytes = std::fs::read(&path).unwrap();
    let write = |m: &[u8]| {
        let p = dir.path().join("edited.tsa");
        std::fs::write(&p, m).unwrap();
        Atlas::open(&p)
    };
    // Entry 1 sharing entry 0's blob exactly: accepted; its CRC no longer matches.
    let mut m = bytes.clone();
    set_entry(&mut m, 1, e0.offset, e0.length);
    fix_checksums(&mut m);
    let atlas = write(&m).unwrap();
    let errors = atlas.verify(&NoProgress);
    assert_eq!(errors.iter().filter_map(AtlasError::tile).collect::<Vec<_>>(), vec![TileId::new(0, 0, 1, 0)]);
    // Starting inside entry 0's blob, or at its start with another length: rejected.
    for (offset, length) in [(e0.offset + 16, e1.length), (e0.offset, e0.length - 1), (e1.offset - 16, 32)] {
        let mut m = bytes.clone();
        set_entry(&mut m, 1, offset, length);
        fix_checksums(&mut m);
        let e = write(&m).expect_err("partial overlap accepted");
        assert!(matches!(e, AtlasError::Invalid { .. }) && e.to_string().contains("overlap"), "{e}");
        assert!(e.to_string().contains("edited.tsa"), "{e}");
    }
}

/// The mosaic with its own mip levels but no tile keys: every tile read and encoded.
struct NoKeys(Mosaic);

impl RowSource for NoKeys {
    fn size(&self) -> (u32, u32) {
        self.0.size()
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_rows(y0, out)
    }
    fn mip_level(&self, mip: u32, color: ColorSpace) -> Option<&dyn RowSource> {
        self.0.mip_level(mip, color)
    }
}

/// Keys that lie: every other tile of a row claims the key of the first.
struct LyingKeys(Mosaic);

impl RowSource for LyingKeys {
    fn size(&self) -> (u32, u32) {
        self.0.size()
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_rows(y0, out)
    }
    fn tile_key(&self, mip: u32, _tile: u32, _border: u32, tx: u32, ty: u32) -> Option<u64> {
        Some(u64::from(mip) << 40 | u64::from(ty) << 20 | u64::from(tx % 2))
    }
}

/// Tiles the mosaic keys as repeats are copied unread, and the atlas is tile for tile
/// the one a bake reading every tile writes: with the cells' own regions (edges
/// repeated inside each cell) and without (edges from the neighbouring cells).
#[test]
fn keyed_repeats_bake_the_same_tiles_as_reading_every_tile() {
    let dir = tempfile::tempdir().unwrap();
    for with_regions in [true, false] {
        let regions = if with_regions { mosaic().regions() } else { Vec::new() };
        let keyed = dir.path().join(format!("keyed-{with_regions}.tsa"));
        let plain = dir.path().join(format!("plain-{with_regions}.tsa"));
        let rk = bake_source(&keyed, Box::new(mosaic()), regions.clone());
        let rp = bake_source(&plain, Box::new(NoKeys(mosaic())), regions);
        let (a, b) = (Atlas::open(&keyed).unwrap(), Atlas::open(&plain).unwrap());
        for t in tiles(&a) {
            assert_eq!(a.decode_tile(t).unwrap(), b.decode_tile(t).unwrap(), "regions {with_regions}: {t}");
        }
        // Keyed mips 0–2 (cells of 4, 2 and 1 tiles): 3 crops × 16 + 4 + 1 placements
        // × edge cases at most are encoded; the rest are copies.
        assert!(rk.layers[0].shared_tiles >= rp.layers[0].shared_tiles, "{rk:?} vs {rp:?}");
        assert!(rk.layers[0].shared_tiles > 0);
    }
}

/// A source whose keys are wrong fails the bake, naming the tile, instead of writing
/// copies of the wrong tile.
#[test]
fn lying_tile_keys_fail_the_bake() {
    let dir = tempfile::tempdir().unwrap();
    let input = BakeInput::new("m", LyingKeys(mosaic()));
    let e = bake(vec![input], &dir.path().join("x.tsa"), &opts(), &NoProgress).unwrap_err().to_string();
    assert!(e.contains("tile keys are wrong"), "{e}");
    assert!(!dir.path().join("x.tsa").exists(), "a failed bake leaves no atlas");
}
