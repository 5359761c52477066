//! The atlas metadata record (header flag `FLAG_META`, issue 44): kept by both format
//! versions, bakes, shard merges (split and one file) and ranged readers; damaged,
//! forged or oversized records refused with a clear error.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

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
