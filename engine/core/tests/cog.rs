//! Cloud Optimized GeoTIFFs streamed without a bake (issue 44 item 4): a COG written by
//! GDAL opens as a one-layer atlas whose mip-0 tiles equal those of the same file baked,
//! whose overviews are its next mips and whose last mips are built at open; each internal
//! tile is read and decoded once however many virtual tiles it serves; TIFFs that cannot
//! be streamed are refused saying why.
//!
//! Needs GDAL's command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh`
//! installs) and the Blue Marble (`assets/fetch-data.sh`): without them these tests fail
//! saying so.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_core::bake::source::data_dir;
use tessera_core::bake::tiff::TiffSource;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::cog::COG_TILE_SIZE;
use tessera_core::{Atlas, AtlasError, NoProgress, TileId};

/// Runs a GDAL tool, failing with the install instruction when it is missing.
fn gdal(tool: &str, args: &[&str]) {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool} ({e}): these tests need GDAL's tools: apt-get install gdal-bin")
    });
    assert!(out.status.success(), "{tool} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// `gdal_translate -q ARGS… from to` into `dir`; returns the new file.
fn translate(dir: &Path, from: &Path, to: &str, args: &[&str]) -> PathBuf {
    let out = dir.join(to);
    let mut all = vec!["-q"];
    all.extend_from_slice(args);
    all.push(from.to_str().unwrap());
    all.push(out.to_str().unwrap());
    gdal("gdal_translate", &all);
    out
}

/// A 1000×700 crop of the Blue Marble (land, coast and sea), uncompressed.
fn crop(dir: &Path) -> PathBuf {
    let bmng = data_dir().join("bmng.jpg");
    assert!(bmng.exists(), "{} is missing: run assets/fetch-data.sh", bmng.display());
    translate(dir, &bmng, "crop.tif", &["-srcwin", "2400", "400", "1000", "700"])
}

/// PSNR of two RGBA8 buffers' colour channels, dB.
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut sum, mut n) = (0f64, 0u64);
    for (x, y) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
        for c in 0..3 {
            let d = f64::from(x[c]) - f64::from(y[c]);
            sum += d * d;
            n += 1;
        }
    }
    if sum == 0.0 { f64::INFINITY } else { 10.0 * (255.0 * 255.0 / (sum / n as f64)).log10() }
}

#[test]
fn a_cog_streams_as_an_atlas_equal_to_its_bake_at_mip_0() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let cog = translate(
        dir.path(),
        &crop,
        "crop-cog.tif",
        &[
            "-of",
            "COG",
            "-co",
            "COMPRESS=DEFLATE",
            "-co",
            "BLOCKSIZE=256",
            "-co",
            "OVERVIEW_RESAMPLING=AVERAGE",
            "-a_srs",
            "EPSG:4326",
            "-a_ullr",
            "-10",
            "60",
            "10",
            "46",
        ],
    );
    let streamed = Atlas::open(&cog).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(streamed.version(), 0, "a TIFF opened as an atlas says so");
    let c = streamed.cog().expect("opened as a COG").clone();
    let layout = streamed.layers()[0].layout;
    assert_eq!((layout.width(), layout.height(), layout.tile_size()), (1000, 700, COG_TILE_SIZE));
    // 1000×700 and overviews 500×350 and 250×175 (GDAL stops under one 256² block); the
    // 125×88 mip fits a tile and is built at open.
    assert_eq!(c.level_counts(), (3, 1));
    assert_eq!(layout.mip_count(), 4);
    // Its georeferencing is the atlas' metadata, as a bake of the file keeps it.
    let geo = streamed.metadata().layers[0].geo.clone().expect("the COG's georeferencing");
    assert_eq!(geo.epsg, Some(4326));
    assert_eq!(geo.geotransform, Some([-10.0, 0.02, 0.0, 60.0, 0.0, -0.02]));

    let baked = dir.path().join("crop.tsa");
    bake(
        vec![BakeInput::new("crop", TiffSource::open(&cog).unwrap())],
        &baked,
        &BakeOptions::default(),
        &NoProgress,
    )
    .unwrap();
    let baked = Atlas::open(&baked).unwrap();
    assert_eq!(baked.layers()[0].layout, layout, "the same virtual texture");
    assert_eq!(baked.metadata().layers[0].geo, Some(geo));

    let (across, down) = layout.tiles_at(0);
    for y in 0..down {
        for x in 0..across {
            let t = TileId::new(0, 0, x, y);
            assert!(
                streamed.decode_tile(t).unwrap() == baked.decode_tile(t).unwrap(),
                "mip-0 {t}, borders included"
            );
        }
    }
    // 4×3 internal tiles of 256² cover mip 0: each read and decoded once for its 48 tiles
    // and their borders.
    let s = c.stats();
    assert_eq!(s.chunks_decoded, 1 + 4 * 3, "the opening read the 250x175 overview (1), then mip 0 (12)");
    assert!(s.chunk_hits > 0);

    // The overviews are GDAL's (averaged in sRGB values), the bake's mips its own filter
    // (in linear light): close, not equal. Measured: 49.1, 44.0 and 45.6 dB (mip 3 built here).
    for mip in 1..layout.mip_count() {
        let (w, h) = layout.mip_size(mip);
        let a = streamed.read_texels(0, mip, [0, 0, w, h]).unwrap();
        let b = baked.read_texels(0, mip, [0, 0, w, h]).unwrap();
        let db = psnr(&a, &b);
        eprintln!("mip {mip}: {db:.2} dB");
        assert!(db > 40.0, "mip {mip}: {db:.1} dB against the bake's own filter");
    }
    assert!(streamed.verify(&NoProgress).is_empty());
}

#[test]
fn tiffs_that_cannot_be_streamed_are_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let refused = |path: &Path| match Atlas::open(path) {
        Err(e @ AtlasError::Cog(_)) => e.to_string(),
        other => panic!("{}: expected a COG refusal, got {other:?}", path.display()),
    };
    // Strips, as gdal_translate writes by default.
    let e = refused(&crop);
    assert!(e.contains("strips") && e.contains("gdal_translate -of COG"), "{e}");
    // Tiled, no overviews, too large to build the coarse mips from.
    let wide = translate(dir.path(), &crop, "wide.tif", &["-co", "TILED=YES", "-outsize", "4200", "64"]);
    let e = refused(&wide);
    assert!(e.contains("4200x64") && e.contains("gdaladdo"), "{e}");
    // Overviews that do not halve.
    let thirds = translate(dir.path(), &crop, "thirds.tif", &["-co", "TILED=YES"]);
    gdal("gdaladdo", &["-q", "-r", "average", thirds.to_str().unwrap(), "3"]);
    let e = refused(&thirds);
    assert!(e.contains("must halve") && e.contains("334x234"), "{e}");
    // A small tiled TIFF without overviews streams: its mips are built at open.
    let small = translate(dir.path(), &crop, "small.tif", &["-co", "TILED=YES", "-co", "COMPRESS=LZW"]);
    let a = Atlas::open(&small).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.cog().unwrap().level_counts(), (1, 3));
    assert!(a.verify(&NoProgress).is_empty());
}

/// Sets the value of `tag` in the first image directory of a little-endian classic TIFF.
fn patch_tag(bytes: &mut [u8], tag: u16, value: u32) {
    assert_eq!(&bytes[..4], b"II*\0", "a little-endian classic TIFF");
    let ifd = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let n = u16::from_le_bytes(bytes[ifd..ifd + 2].try_into().unwrap()) as usize;
    for e in (0..n).map(|i| ifd + 2 + 12 * i) {
        if u16::from_le_bytes(bytes[e..e + 2].try_into().unwrap()) == tag {
            let kind = u16::from_le_bytes(bytes[e + 2..e + 4].try_into().unwrap());
            match kind {
                3 => bytes[e + 8..e + 10].copy_from_slice(&(value as u16).to_le_bytes()),
                _ => bytes[e + 8..e + 12].copy_from_slice(&value.to_le_bytes()),
            }
            return;
        }
    }
    panic!("tag {tag} not found");
}

#[test]
fn damaged_cogs_fail_with_errors_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let cog = translate(
        dir.path(),
        &crop,
        "ok.tif",
        &["-of", "COG", "-co", "BLOCKSIZE=256", "-co", "COMPRESS=DEFLATE"],
    );
    let good = std::fs::read(&cog).unwrap();
    // Internal tiles of zero width, or wider than streamed: refused at open.
    for (tag, value) in [(322u16, 0u32), (322, 1 << 20), (323, 0)] {
        let mut bytes = good.clone();
        patch_tag(&mut bytes, tag, value);
        let path = dir.path().join(format!("tag{tag}-{value}.tif"));
        std::fs::write(&path, &bytes).unwrap();
        let e = Atlas::open(&path).expect_err("a damaged directory");
        assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
    }
    // Cut short in the middle of its tiles: opens (the directories come first), then the
    // tiles past the end fail with errors naming them, and verify lists them.
    let cut = dir.path().join("cut.tif");
    std::fs::write(&cut, &good[..good.len() * 2 / 3]).unwrap();
    if let Ok(a) = Atlas::open(&cut) {
        let errors = a.verify(&NoProgress);
        assert!(!errors.is_empty(), "the missing tiles are reported");
        assert!(errors.iter().all(|e| matches!(e, AtlasError::CogTile { .. })), "{errors:?}");
    }
    // The zlib header of mip 0's first internal tile damaged: the tiles it covers fail,
    // the others still read.
    let mut decoder = tiff::decoder::Decoder::new(std::io::Cursor::new(good.clone())).unwrap();
    let offsets = decoder.get_tag_u64_vec(tiff::tags::Tag::TileOffsets).unwrap();
    let mut bytes = good.clone();
    let at = offsets[0] as usize;
    bytes[at..at + 2].copy_from_slice(&[0x00, 0x00]);
    let damaged = dir.path().join("damaged.tif");
    std::fs::write(&damaged, &bytes).unwrap();
    let a = Atlas::open(&damaged).unwrap();
    let errors = a.verify(&NoProgress);
    let tiles = a.layers()[0].layout.tile_count() as usize;
    assert!(!errors.is_empty() && errors.len() < tiles, "{} of {tiles} tiles bad", errors.len());
}
