//! Atlas round trips, borders, corruption detection and bad-input handling, and the
//! metadata record (module `metadata_record`), without a GPU.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tessera_core::NoProgress;
use tessera_core::bake::source::{Generated, ImageSource, RowSource, SourceError};
use tessera_core::bake::{BakeInput, BakeOptions, bake, edge};
use tessera_core::format::atlas::{
    Atlas, AtlasError, ColorSpace, ENTRY_BYTES, HEADER_BYTES, LAYER_BYTES, ROOT_FIXED_BYTES, ROOT_LIMIT,
    VERSION, Wrap,
};
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

fn bake_to(dir: &Path, inputs: Vec<BakeInput>, tile: u32, border: u32, codec: Codec) -> PathBuf {
    bake_version(dir, inputs, tile, border, codec, VERSION)
}

fn bake_version(
    dir: &Path,
    inputs: Vec<BakeInput>,
    tile: u32,
    border: u32,
    codec: Codec,
    format_version: u32,
) -> PathBuf {
    let path = dir.join(format!("a{format_version}.tsa"));
    let opts = BakeOptions { tile_size: tile, border, codec, format_version, ..BakeOptions::default() };
    bake(inputs, &path, &opts, &NoProgress).expect("bake");
    path
}

fn input(name: &str, src: impl RowSource + 'static, wrap: Wrap) -> BakeInput {
    BakeInput {
        name: name.into(),
        source: Box::new(src),
        wrap,
        color: ColorSpace::Srgb,
        codec: None,
        regions: Vec::new(),
    }
}

fn texel(tile: &[u8], p: u32, x: u32, y: u32) -> [u8; 4] {
    let i = ((y * p + x) * 4) as usize;
    [tile[i], tile[i + 1], tile[i + 2], tile[i + 3]]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Mip 0 of every layer comes back texel for texel, borders included, for any
    /// size (non-square, non-power-of-two) and both edge rules and codecs.
    #[test]
    fn round_trip_random_images(
        w in 1u32..150, h in 1u32..150, w2 in 1u32..90, h2 in 1u32..90, seed in any::<u64>(),
        repeat in any::<bool>(), lz4 in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let wrap = if repeat { Wrap::Repeat } else { Wrap::Clamp };
        let codec = if lz4 { Codec::Lz4 } else { Codec::Raw };
        let a = random_image(w, h, seed);
        let b = random_image(w2, h2, seed ^ 0xabcdef);
        let src = [a.texels().to_vec(), b.texels().to_vec()];
        let path = bake_to(dir.path(), vec![input("a", a, wrap), input("b", b, wrap)], 16, 3, codec);
        let atlas = Atlas::open(&path).unwrap();
        prop_assert_eq!(atlas.layers().len(), 2);
        for (li, layer) in atlas.layers().iter().enumerate() {
            let lay = layer.layout;
            let (sw, sh) = (lay.width(), lay.height());
            let p = lay.padded_tile_size();
            let (tx, ty) = lay.tiles_at(0);
            for y in 0..ty {
                for x in 0..tx {
                    let tile = atlas.decode_tile(TileId::new(li as u16, 0, x, y)).unwrap();
                    for py in 0..p {
                        for px in 0..p {
                            let gx = edge(i64::from(x * 16 + px) - 3, sw, wrap);
                            let gy = edge(i64::from(y * 16 + py) - 3, sh, wrap);
                            let i = ((gy * sw + gx) * 4) as usize;
                            prop_assert_eq!(&texel(&tile, p, px, py)[..], &src[li][i..i + 4]);
                        }
                    }
                }
            }
            // Every mip decodes.
            for t in lay.tiles(li as u16) {
                prop_assert_eq!(atlas.decode_tile(t).unwrap().len(), (p * p * 4) as usize);
            }
        }
        prop_assert!(atlas.verify(&NoProgress).is_empty());
    }
}

/// On every mip, each border texel equals the texel its neighbouring tile holds in
/// its payload at the same position.
#[test]
fn borders_equal_neighbour_texels_on_every_mip() {
    let dir = tempfile::tempdir().unwrap();
    let path = bake_to(
        dir.path(),
        vec![input("g", Generated::with_cell(700, 530, 32), Wrap::Repeat)],
        32,
        4,
        Codec::Lz4,
    );
    let atlas = Atlas::open(&path).unwrap();
    let lay = atlas.layers()[0].layout;
    let (t, b, p) = (lay.tile_size(), lay.border(), lay.padded_tile_size());
    for mip in 0..lay.mip_count() {
        let (tx, ty) = lay.tiles_at(mip);
        let (mw, mh) = lay.mip_size(mip);
        let tiles: Vec<Vec<Vec<u8>>> = (0..ty)
            .map(|y| (0..tx).map(|x| atlas.decode_tile(TileId::new(0, mip as u8, x, y)).unwrap()).collect())
            .collect();
        // The texel at global mip coordinates (gx, gy), read from the payload of the tile that owns it.
        let global = |gx: u32, gy: u32| {
            let (ox, oy) = (gx / t, gy / t);
            texel(&tiles[oy as usize][ox as usize], p, gx % t + b, gy % t + b)
        };
        for y in 0..ty {
            for x in 0..tx {
                for py in 0..p {
                    for px in 0..p {
                        let gx = edge(i64::from(x * t + px) - i64::from(b), mw, Wrap::Repeat);
                        let gy = edge(i64::from(y * t + py) - i64::from(b), mh, Wrap::Repeat);
                        assert_eq!(
                            texel(&tiles[y as usize][x as usize], p, px, py),
                            global(gx, gy),
                            "mip {mip} tile ({x}, {y}) texel ({px}, {py})"
                        );
                    }
                }
            }
        }
    }
}

/// Coarser mips average their children in linear light.
#[test]
fn mips_are_filtered_in_linear_light() {
    let dir = tempfile::tempdir().unwrap();
    // A 32x32 black/white checker of single texels: every coarser mip is sRGB 188.
    let texels: Vec<u8> = (0..32 * 32)
        .flat_map(|i| {
            let v = if (i % 32 + i / 32) % 2 == 0 { 0 } else { 255 };
            [v, v, v, 255]
        })
        .collect();
    let path = bake_to(
        dir.path(),
        vec![input("c", ImageSource::from_rgba(32, 32, texels), Wrap::Clamp)],
        16,
        2,
        Codec::Raw,
    );
    let atlas = Atlas::open(&path).unwrap();
    let tile = atlas.decode_tile(TileId::new(0, 1, 0, 0)).unwrap();
    assert_eq!(texel(&tile, 20, 5, 5), [188, 188, 188, 255]);
}

fn baked_sample(dir: &Path) -> (PathBuf, Vec<u8>) {
    baked_sample_version(dir, VERSION)
}

/// The sample in format version 1, whose index lies whole after the layer table.
fn baked_sample_v1(dir: &Path) -> (PathBuf, Vec<u8>) {
    baked_sample_version(dir, 1)
}

fn baked_sample_version(dir: &Path, version: u32) -> (PathBuf, Vec<u8>) {
    let path = bake_version(
        dir,
        vec![input("s", Generated::with_cell(300, 200, 32), Wrap::Clamp)],
        32,
        4,
        Codec::Lz4,
        version,
    );
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Version 2: (index offset, entries per page, page count, where the root starts).
fn v2_layout(b: &[u8]) -> (usize, usize, usize, usize) {
    let root = HEADER_BYTES + u32_at(b, 16) as usize * LAYER_BYTES;
    (u64_at(b, 32) as usize, u32_at(b, root) as usize, u32_at(b, root + 4) as usize, root)
}

/// Version 2: rewrites every page checksum in the root directory, then the meta and
/// header checksums, after a deliberate edit of the index.
fn fix_checksums_v2(b: &mut [u8]) {
    let (index, per, pages, root) = v2_layout(b);
    let tiles = u64_at(b, 24) as usize;
    for p in 0..pages {
        let start = index + p * per * ENTRY_BYTES;
        let end = index + tiles.min((p + 1) * per) * ENTRY_BYTES;
        let crc = crc32fast::hash(&b[start..end]);
        let at = root + ROOT_FIXED_BYTES + 4 * p;
        b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let meta = crc32fast::hash(&b[HEADER_BYTES..root + ROOT_FIXED_BYTES + 4 * pages]);
    b[56..60].copy_from_slice(&meta.to_le_bytes());
    let h = crc32fast::hash(&b[0..60]);
    b[60..64].copy_from_slice(&h.to_le_bytes());
}

fn open_bytes(dir: &Path, bytes: &[u8]) -> Result<Atlas, AtlasError> {
    let p = dir.join("mutated.tsa");
    std::fs::write(&p, bytes).unwrap();
    Atlas::open(&p)
}

/// Rewrites the header and meta checksums after a deliberate edit, so that the
/// edit itself is what validation sees.
fn fix_checksums(bytes: &mut [u8]) {
    let layers = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let tiles = u64::from_le_bytes(bytes[24..32].try_into().unwrap()) as usize;
    let meta_end = HEADER_BYTES + layers * LAYER_BYTES + tiles * ENTRY_BYTES;
    let meta = crc32fast::hash(&bytes[HEADER_BYTES..meta_end]);
    bytes[56..60].copy_from_slice(&meta.to_le_bytes());
    let h = crc32fast::hash(&bytes[0..60]);
    bytes[60..64].copy_from_slice(&h.to_le_bytes());
}

#[test]
fn verify_catches_every_flipped_tile_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = baked_sample(dir.path());
    let atlas = open_bytes(dir.path(), &bytes).unwrap();
    let tiles: Vec<TileId> = atlas.layers()[0].layout.tiles(0).collect();
    let entries: Vec<_> = tiles.iter().map(|&t| (t, atlas.entry(t).unwrap())).collect();
    drop(atlas);
    // Every tile, several positions in each (first, last, and a stride through the middle).
    for (tile, e) in entries {
        let len = u64::from(e.length);
        for k in [0, len / 3, len / 2, len - 1] {
            let mut m = bytes.clone();
            m[(e.offset + k) as usize] ^= 0x40;
            let atlas = open_bytes(dir.path(), &m).expect("tile data is not checked on open");
            let errors = atlas.verify(&NoProgress);
            assert_eq!(errors.len(), 1, "{tile} byte {k}");
            assert_eq!(errors[0].tile(), Some(tile));
            assert!(matches!(atlas.read_tile(tile), Err(AtlasError::TileChecksum { .. })));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A single flipped byte anywhere in the file is caught: on open, or by verify.
    #[test]
    fn any_flipped_byte_is_detected(pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let dir = tempfile::tempdir().unwrap();
        let (_, bytes) = baked_sample(dir.path());
        let mut m = bytes.clone();
        let i = pos.index(m.len());
        m[i] ^= 1 << bit;
        match open_bytes(dir.path(), &m) {
            Err(_) => {}
            Ok(atlas) => prop_assert!(!atlas.verify(&NoProgress).is_empty(), "byte {} undetected", i),
        }
    }
}

#[test]
fn truncated_files_fail_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = baked_sample(dir.path());
    for len in [0, 7, 40, HEADER_BYTES, 500, bytes.len() / 2, bytes.len() - 1] {
        let err = open_bytes(dir.path(), &bytes[..len]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("mutated.tsa"), "{msg}");
        assert!(matches!(err, AtlasError::Truncated { .. }), "len {len}: {msg}");
    }
}

#[test]
fn garbage_and_wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    let garbage: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    assert!(matches!(open_bytes(dir.path(), &garbage), Err(AtlasError::BadMagic { .. })));
    let (_, mut bytes) = baked_sample(dir.path());
    bytes[0] = b'X';
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    assert!(matches!(err, AtlasError::BadMagic { .. }));
    assert!(err.to_string().contains("not a Tessera atlas"));
    // What the file is instead: a format to bake first, a page a server sent, or hex.
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.resize(5000, 0);
    let said = |bytes: &[u8]| open_bytes(dir.path(), bytes).unwrap_err().to_string();
    assert!(said(&png).contains("a PNG image: bake it first"), "{}", said(&png));
    let mut html = b"  <!DOCTYPE html><html><body>Not found</body></html>".to_vec();
    html.resize(5000, b' ');
    assert!(said(&html).contains("an HTML or XML page"), "{}", said(&html));
    assert!(said(&html[..30]).contains("an HTML or XML page"), "a short file: {}", said(&html[..30]));
    assert!(
        said(&garbage).contains(&format!("it starts with bytes {:02x}", garbage[0])),
        "{}",
        said(&garbage)
    );
}

#[test]
fn wrong_version() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample_v1(dir.path());
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    fix_checksums(&mut bytes);
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    assert!(matches!(err, AtlasError::UnsupportedVersion { found: 3, .. }), "{err}");
    assert!(err.to_string().contains("unsupported atlas version 3"));
}

/// Version 1 stays readable, and both versions hold exactly the same tiles.
#[test]
fn versions_1_and_2_hold_the_same_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = || {
        vec![
            input("a", Generated::with_cell(700, 300, 32), Wrap::Clamp),
            input("b", random_image(90, 260, 5), Wrap::Repeat),
        ]
    };
    let v1 = Atlas::open(bake_version(dir.path(), inputs(), 32, 4, Codec::Lz4, 1)).unwrap();
    let v2 = Atlas::open(bake_version(dir.path(), inputs(), 32, 4, Codec::Lz4, 2)).unwrap();
    assert_eq!((v1.version(), v2.version()), (1, 2));
    assert_eq!(v1.layers(), v2.layers());
    assert_eq!(v1.stored_bytes(), v2.stored_bytes());
    for (li, l) in v1.layers().iter().enumerate() {
        for t in l.layout.tiles(li as u16) {
            assert_eq!(v1.decode_tile(t).unwrap(), v2.decode_tile(t).unwrap(), "{t}");
        }
    }
    assert!(v1.verify(&NoProgress).is_empty());
    assert!(v2.verify(&NoProgress).is_empty());
    let layers = |a: &Atlas| serde_json::to_value(&a.summary().layers).unwrap();
    assert_eq!(layers(&v1), layers(&v2));
}

/// Version 2 layout: header, layers and root directory within 16 KiB; the coarsest
/// tile is the first blob; neighbours at mip 0 are neighbours in the file.
#[test]
fn version_2_puts_coarse_tiles_first_and_neighbours_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = bake_to(
        dir.path(),
        vec![input("g", Generated::with_cell(512, 512, 32), Wrap::Clamp)],
        32,
        4,
        Codec::Raw,
    );
    let bytes = std::fs::read(&path).unwrap();
    let (index, _, _, _) = v2_layout(&bytes);
    assert!(index <= ROOT_LIMIT, "{index}");
    let a = Atlas::open(&path).unwrap();
    let data = u64_at(&bytes, 40);
    let c = a.layers()[0].layout.coarsest_mip();
    assert_eq!(a.entry(TileId::new(0, c, 0, 0)).unwrap().offset, data);
    // Raw blobs all have one length: the Morton quad (0,0) (1,0) (0,1) (1,1) is contiguous.
    let offs: Vec<u64> = [(0, 0), (1, 0), (0, 1), (1, 1)]
        .iter()
        .map(|&(x, y)| a.entry(TileId::new(0, 0, x, y)).unwrap().offset)
        .collect();
    let len = u64::from(a.entry(TileId::new(0, 0, 0, 0)).unwrap().length).next_multiple_of(16);
    assert_eq!(offs, vec![offs[0], offs[0] + len, offs[0] + 2 * len, offs[0] + 3 * len]);
    // Every coarser mip lies before mip 0.
    assert!(a.entry(TileId::new(0, 1, 7, 7)).unwrap().offset < offs[0]);
}

#[test]
fn version_2_damaged_root_is_a_checksum_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample(dir.path());
    let (_, _, _, root) = v2_layout(&bytes);
    bytes[root + ROOT_FIXED_BYTES] ^= 1;
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    assert!(matches!(err, AtlasError::Checksum { .. }), "{err}");
    assert!(err.to_string().contains("root directory"), "{err}");
}

/// A damaged index page opens (pages are read on demand) but every tile of that page
/// is an error, never garbage, and verify reports them.
#[test]
fn version_2_damaged_index_page_fails_its_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample(dir.path());
    let (index, _, _, _) = v2_layout(&bytes);
    bytes[index + 5] ^= 1;
    let a = open_bytes(dir.path(), &bytes).unwrap();
    let t = TileId::new(0, 0, 0, 0);
    let err = a.decode_tile(t).unwrap_err();
    assert!(matches!(err, AtlasError::Checksum { what: "tile index page", .. }), "{err}");
    assert!(!a.verify(&NoProgress).is_empty());
}

/// Version 2 does not read its index whole at open: blobs that partially overlap are
/// found by `verify`.
#[test]
fn version_2_overlapping_blobs_fail_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample(dir.path());
    let (index, _, _, _) = v2_layout(&bytes);
    let first = u64_at(&bytes, index);
    let second = index + ENTRY_BYTES;
    bytes[second..second + 8].copy_from_slice(&(first + 16).to_le_bytes());
    fix_checksums_v2(&mut bytes);
    let a = open_bytes(dir.path(), &bytes).unwrap();
    let errors = a.verify(&NoProgress);
    assert!(errors.iter().any(|e| e.to_string().contains("partially overlap")), "{errors:?}");
}

#[test]
fn version_2_entry_pointing_outside_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample(dir.path());
    let (index, _, _, _) = v2_layout(&bytes);
    let past_end = bytes.len() as u64 + 4096;
    bytes[index + 3 * ENTRY_BYTES..index + 3 * ENTRY_BYTES + 8].copy_from_slice(&past_end.to_le_bytes());
    fix_checksums_v2(&mut bytes);
    let a = open_bytes(dir.path(), &bytes).unwrap();
    let err = a.read_tile(TileId::new(0, 0, 0, 0)).unwrap_err();
    assert!(matches!(err, AtlasError::Invalid { .. }) && err.to_string().contains("outside"), "{err}");
    // A root directory that lies about the page count is refused at open.
    let (_, _, _, root) = v2_layout(&bytes);
    bytes[root + 4] += 1;
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    assert!(matches!(err, AtlasError::Invalid { .. }), "{err}");
}

#[test]
fn index_pointing_outside_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample_v1(dir.path());
    let entry = HEADER_BYTES + LAYER_BYTES + 3 * ENTRY_BYTES;
    let past_end = bytes.len() as u64 + 4096;
    bytes[entry..entry + 8].copy_from_slice(&past_end.to_le_bytes());
    fix_checksums(&mut bytes);
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, AtlasError::Invalid { .. }), "{msg}");
    assert!(msg.contains("mip 0 tile (3, 0)") && msg.contains("outside"), "{msg}");
}

#[test]
fn index_offset_that_overflows_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample_v1(dir.path());
    let entry = HEADER_BYTES + LAYER_BYTES + 2 * ENTRY_BYTES;
    bytes[entry..entry + 8].copy_from_slice(&(u64::MAX - 15).to_le_bytes());
    bytes[entry + 8..entry + 12].copy_from_slice(&0x20u32.to_le_bytes());
    fix_checksums(&mut bytes);
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    assert!(err.to_string().contains("outside"), "{err}");
}

#[test]
fn a_failed_finish_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    // The destination is an existing folder, so the final rename fails.
    let dest = dir.path().join("taken");
    std::fs::create_dir(&dest).unwrap();
    let input = input("g", Generated::with_cell(40, 40, 16), Wrap::Clamp);
    let opts = BakeOptions { tile_size: 16, border: 2, codec: Codec::Lz4, ..BakeOptions::default() };
    assert!(bake(vec![input], &dest, &opts, &NoProgress).is_err());
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("taken")]);
}

#[test]
fn corrupted_index_is_a_checksum_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes) = baked_sample_v1(dir.path());
    bytes[HEADER_BYTES + LAYER_BYTES + 5] ^= 1;
    let err = open_bytes(dir.path(), &bytes).unwrap_err();
    assert!(matches!(err, AtlasError::Checksum { .. }), "{err}");
}

#[test]
fn writes_are_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = baked_sample(dir.path());
    // A bake that fails part-way leaves the previous atlas untouched and no temp file.
    struct Failing;
    impl RowSource for Failing {
        fn size(&self) -> (u32, u32) {
            (300, 300)
        }
        fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
            if y0 > 100 {
                return Err(std::io::Error::other("disk on fire"));
            }
            out.fill(7);
            Ok(())
        }
    }
    let opts = BakeOptions { tile_size: 32, border: 4, codec: Codec::Lz4, ..BakeOptions::default() };
    let err = bake(vec![input("f", Failing, Wrap::Clamp)], &path, &opts, &NoProgress).unwrap_err();
    assert!(err.to_string().contains("disk on fire"));
    assert_eq!(std::fs::read(&path).unwrap(), first);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

fn write_png_header(path: &Path, w: u32, h: u32) {
    // A PNG signature and an IHDR chunk with the given size, then a truncated file.
    let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    b.extend_from_slice(&13u32.to_be_bytes());
    b.extend_from_slice(&ihdr);
    b.extend_from_slice(&crc32fast::hash(&ihdr).to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(b"IDAT");
    b.extend_from_slice(&crc32fast::hash(b"IDAT").to_be_bytes());
    std::fs::write(path, b).unwrap();
}

#[test]
fn bad_images_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.png");
    let err = ImageSource::open(&missing).err().unwrap();
    assert!(matches!(err, SourceError::Missing { .. }) && err.to_string().contains("nope.png"), "{err}");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello, not an image").unwrap();
    let err = ImageSource::open(&text).err().unwrap();
    assert!(matches!(err, SourceError::Unsupported { .. }) && err.to_string().contains("notes.txt"), "{err}");

    let huge = dir.path().join("huge.png");
    write_png_header(&huge, 2_000_000, 1_000_000);
    let err = ImageSource::open(&huge).err().unwrap();
    assert!(err.to_string().contains("huge.png") && err.to_string().contains("too large"), "{err}");

    let zero = dir.path().join("zero.png");
    write_png_header(&zero, 0, 16);
    let err = ImageSource::open(&zero).err().unwrap();
    assert!(err.to_string().contains("zero.png"), "{err}");

    let cut = dir.path().join("cut.png");
    write_png_header(&cut, 64, 64);
    let err = ImageSource::open(&cut).err().unwrap();
    assert!(err.to_string().contains("cut.png"), "{err}");
}

/// An atlas truncated or overwritten in place while open (the process keeps reading it)
/// gives per-tile errors, never a SIGBUS: tiles are read with positioned reads.
#[test]
fn an_atlas_changed_in_place_while_open_gives_errors_not_a_crash() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path =
        bake_to(dir.path(), vec![input("g", Generated::new(1024, 1024), Wrap::Clamp)], 128, 4, Codec::Raw);
    let atlas = Atlas::open(&path).unwrap();
    let last = TileId::new(0, 0, 7, 7);
    let first = TileId::new(0, 0, 0, 0);
    assert!(atlas.read_tile(last).is_ok());
    // Overwrite the first tile's bytes in place: its CRC no longer matches.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let e = atlas.entry(first).unwrap();
    file.write_all_at(&vec![0x5a; e.length as usize], e.offset).unwrap();
    assert!(matches!(atlas.read_tile(first), Err(AtlasError::TileChecksum { .. })));
    // Truncate to half: tiles past the end fail with a clear error, the rest still read.
    file.set_len(atlas.file_size() / 2).unwrap();
    let err = atlas.read_tile(last).unwrap_err();
    assert!(matches!(err, AtlasError::Changed { .. }), "{err}");
    assert!(err.to_string().contains("changed while in use"), "{err}");
    let errors = atlas.verify(&NoProgress);
    assert!(errors.iter().any(|e| matches!(e, AtlasError::Changed { .. })), "{errors:?}");
    assert!(errors.iter().any(|e| matches!(e, AtlasError::TileChecksum { .. })), "{errors:?}");
}

/// The atlas metadata record (header flag `FLAG_META`, issue 44): kept by both format
/// versions, bakes, shard merges (split and one file) and ranged readers; damaged,
/// forged or oversized records refused with a clear error.
mod metadata_record {
    use std::path::Path;
    use std::sync::Arc;

    use proptest::prelude::*;
    use tessera_core::NoProgress;
    use tessera_core::bake::shard::{MergeForm, Shard, merge_shards};
    use tessera_core::bake::source::{Generated, RowSource};
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::atlas::ranged::RangedBytes;
    use tessera_core::format::atlas::{
        Atlas, AtlasError, AtlasMeta, AtlasWriter, ColorSpace, FLAG_META, GeoReference, GeoTiffTags,
        HEADER_BYTES, LAYER_BYTES, LayerInfo, LayerMeta, MAX_META_BYTES, RasterType, Wrap,
    };
    use tessera_core::format::codec::Codec;
    use tessera_core::format::tile::{TextureLayout, TileId};

    /// A georeference with numbers that need every digit (a third of a degree).
    fn geo() -> GeoReference {
        GeoReference {
            geotransform: Some([-10.5, 1.0 / 3.0, 0.0, 60.25, 0.0, -1.0 / 3.0]),
            epsg: Some(4326),
            raster_type: Some(RasterType::PixelIsArea),
            tags: GeoTiffTags {
                model_pixel_scale: Some(vec![1.0 / 3.0, 1.0 / 3.0, 0.0]),
                model_tiepoint: Some(vec![0.0, 0.0, 0.0, -10.5, 60.25, 0.0]),
                geo_key_directory: Some(vec![1, 1, 0, 2, 1025, 0, 1, 1, 2048, 0, 1, 4326]),
                geo_ascii_params: Some("WGS 84|".into()),
                ..GeoTiffTags::default()
            },
            ..GeoReference::default()
        }
    }

    fn meta(layers: usize) -> AtlasMeta {
        let mut m = AtlasMeta {
            layers: (0..layers).map(|_| LayerMeta { geo: Some(geo()), ..LayerMeta::default() }).collect(),
            ..AtlasMeta::default()
        };
        m.other.insert("written_by_a_newer_tool".into(), serde_json::json!({"kept": true}));
        m
    }

    fn layer() -> LayerInfo {
        LayerInfo {
            name: "geo".into(),
            layout: TextureLayout::new(96, 64, 32, 0).unwrap(),
            codec: Codec::Raw,
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
            first_tile: 0,
        }
    }

    /// A small atlas of raw tiles (tile `i` filled with byte `i`) with `meta`.
    fn write(path: &Path, version: u32, meta: &AtlasMeta) -> Vec<u8> {
        let mut w = AtlasWriter::create(path, vec![layer()]).unwrap();
        w.set_format_version(version).unwrap();
        w.set_meta(meta).unwrap();
        for i in 0..layer().layout.tile_count() {
            w.push_tile(&vec![i as u8; 32 * 32 * 4], Codec::Raw, 32 * 32 * 4).unwrap();
        }
        w.finish().unwrap();
        std::fs::read(path).unwrap()
    }

    fn open_bytes(dir: &Path, bytes: &[u8]) -> Result<Atlas, AtlasError> {
        let p = dir.join("mutated.tsa");
        std::fs::write(&p, bytes).unwrap();
        Atlas::open(&p)
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Where the record starts: after the layer table (version 1) or the root directory (2).
    fn record_at(b: &[u8]) -> usize {
        let table_end = HEADER_BYTES + u32_at(b, 16) as usize * LAYER_BYTES;
        if u32_at(b, 8) == 1 { table_end } else { table_end + 16 + 4 * u32_at(b, table_end + 4) as usize }
    }

    /// Rewrites `meta_crc` (over the layer table, root and record, or the version-1 index
    /// too) and the header checksum after a deliberate edit.
    fn fix_checksums(b: &mut [u8]) {
        let start = record_at(b);
        let len = u32_at(b, start) as usize;
        let end = if u32_at(b, 8) == 1 {
            let tiles = u64::from_le_bytes(b[24..32].try_into().unwrap()) as usize;
            start + 4 + len + 24 * tiles
        } else {
            start + 4 + len
        };
        let crc = crc32fast::hash(&b[HEADER_BYTES..end.min(b.len())]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        let h = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&h.to_le_bytes());
    }

    #[test]
    fn both_versions_keep_the_record_and_their_tiles() {
        let dir = tempfile::tempdir().unwrap();
        for version in [1, 2] {
            let path = dir.path().join(format!("v{version}.tsa"));
            let bytes = write(&path, version, &meta(1));
            assert_eq!(u32_at(&bytes, 20) & FLAG_META, FLAG_META);
            let atlas = Atlas::open(&path).unwrap();
            assert_eq!(atlas.metadata(), &meta(1), "version {version}");
            assert_eq!(atlas.read_tile(TileId::new(0, 0, 2, 1)).unwrap()[0], 5);
            assert!(atlas.verify(&NoProgress).is_empty());
            // An empty record writes nothing: the file is the one without a record.
            let plain = dir.path().join(format!("plain{version}.tsa"));
            let empty = write(&plain, version, &AtlasMeta::default());
            assert_eq!(u32_at(&empty, 20) & FLAG_META, 0);
            assert_eq!(Atlas::open(&plain).unwrap().metadata(), &AtlasMeta::default());
            assert!(empty.len() < bytes.len());
        }
    }

    #[test]
    fn writers_refuse_a_late_an_oversized_or_a_mismatched_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.tsa");
        let mut w = AtlasWriter::create(&path, vec![layer()]).unwrap();
        let mut big = AtlasMeta::default();
        big.other.insert("blob".into(), serde_json::json!("x".repeat(MAX_META_BYTES)));
        let err = w.set_meta(&big).unwrap_err().to_string();
        assert!(err.contains("w.tsa") && err.contains("limit 16384"), "{err}");
        let err = w.set_meta(&meta(2)).unwrap_err().to_string();
        assert!(err.contains("2 layer entries for 1 layers"), "{err}");
        w.push_tile(&[0; 4096], Codec::Raw, 4096).unwrap();
        let err = w.set_meta(&meta(1)).unwrap_err().to_string();
        assert!(err.contains("after tiles were written"), "{err}");
    }

    #[test]
    fn damaged_forged_and_oversized_records_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for version in [1, 2] {
            let bytes = write(&dir.path().join("m.tsa"), version, &meta(1));
            let at = record_at(&bytes);
            // A changed byte in the JSON text: the checksum over the head says so.
            let mut m = bytes.clone();
            m[at + 4] = b'[';
            let err = open_bytes(dir.path(), &m).unwrap_err();
            assert!(matches!(err, AtlasError::Checksum { .. }), "v{version}: {err}");
            // The same edit with the checksums made right: the record itself is read and refused.
            fix_checksums(&mut m);
            let err = open_bytes(dir.path(), &m).unwrap_err().to_string();
            assert!(err.contains("metadata record"), "v{version}: {err}");
            // A length past the limit, or past what the file holds.
            for len in [MAX_META_BYTES as u32 + 1, 1, u32::MAX] {
                let mut m = bytes.clone();
                m[at..at + 4].copy_from_slice(&len.to_le_bytes());
                fix_checksums(&mut m);
                let err = open_bytes(dir.path(), &m).unwrap_err();
                assert!(matches!(err, AtlasError::Invalid { .. }), "v{version} length {len}: {err}");
            }
            // Without the flag the record is where the index should be: refused, not misread.
            let mut m = bytes.clone();
            m[20] &= !(FLAG_META as u8);
            fix_checksums(&mut m);
            assert!(open_bytes(dir.path(), &m).is_err(), "v{version} flag cleared");
        }
    }

    /// A generated texture that knows where it lies, as a GeoTIFF does.
    struct Placed(Generated);

    impl RowSource for Placed {
        fn size(&self) -> (u32, u32) {
            self.0.size()
        }
        fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
            self.0.read_rows(y0, out)
        }
        fn layer_meta(&self) -> LayerMeta {
            LayerMeta { geo: Some(geo()), ..LayerMeta::default() }
        }
    }

    fn inputs() -> Vec<BakeInput> {
        vec![
            BakeInput::new("placed", Placed(Generated::with_cell(200, 150, 32))),
            BakeInput::new("plain", Generated::with_cell(64, 64, 32)),
        ]
    }

    #[test]
    fn bakes_shard_merges_and_ranged_readers_keep_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let opts =
            BakeOptions { tile_size: 32, border: 4, codec: Codec::Lz4, threads: 1, ..BakeOptions::default() };
        let whole = dir.path().join("whole.tsa");
        bake(inputs(), &whole, &opts, &NoProgress).unwrap();
        let atlas = Atlas::open(&whole).unwrap();
        let expected = atlas.metadata().clone();
        assert_eq!(expected.layers.len(), 2);
        assert_eq!(expected.layers[0].geo, Some(geo()));
        assert!(expected.layers[1].is_empty());
        let whole_bytes = std::fs::read(&whole).unwrap();
        for form in [MergeForm::Split, MergeForm::OneFile] {
            let out = dir.path().join(format!("{form:?}.tsa"));
            for index in 0..2 {
                let shard = Some(Shard::new(index, 2).unwrap());
                bake(inputs(), &out, &BakeOptions { shard, ..opts.clone() }, &NoProgress).unwrap();
            }
            merge_shards(&out, form, &NoProgress).unwrap();
            let merged = Atlas::open(&out).unwrap();
            assert_eq!(merged.metadata(), &expected, "{form:?}");
            assert!(merged.verify(&NoProgress).is_empty(), "{form:?}");
            if form == MergeForm::OneFile {
                assert_eq!(
                    std::fs::read(&out).unwrap(),
                    whole_bytes,
                    "a one-file merge is the bake byte for byte"
                );
            }
        }
        // A reader of fetched byte ranges (the browser's) reads the record with the head.
        let store = Arc::new(RangedBytes::new(whole_bytes.len() as u64, 1 << 20));
        store.insert(0, whole_bytes.clone()).unwrap();
        let ranged = Atlas::open_ranged("whole.tsa", store).unwrap();
        assert_eq!(ranged.metadata(), &expected);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// A single flipped byte anywhere in an atlas with a record is caught: on open, or
        /// by verify.
        #[test]
        fn any_flipped_byte_is_detected_with_a_record(
            v1 in any::<bool>(),
            pos in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut m = write(&dir.path().join("p.tsa"), if v1 { 1 } else { 2 }, &meta(1));
            let i = pos.index(m.len());
            m[i] ^= 1 << bit;
            if let Ok(atlas) = open_bytes(dir.path(), &m) {
                prop_assert!(!atlas.verify(&NoProgress).is_empty(), "byte {} undetected", i);
            }
        }
    }
}
