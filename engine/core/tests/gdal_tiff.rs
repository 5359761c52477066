//! GeoTIFFs written by GDAL (issue 44), made at test time from a 600×400 crop of the Blue
//! Marble (`assets/fetch-data.sh`): JPEG (YCbCr, RGB), Zstandard, WebP and LERC
//! compressions decode like GDAL's own decode (lossless ones exactly, lossy ones within a
//! stated PSNR); 16-bit and float data rasters keep their range through their scale and
//! offset, alone and in mosaics; nodata and alpha bands become transparent texels.
//!
//! Needs GDAL's command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh`
//! installs): without them these tests fail saying so.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_core::bake::source::{RowSource, data_dir};
use tessera_core::bake::tiff::TiffSource;
use tessera_core::format::atlas::ColorSpace;

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

/// A 600×400 RGB crop of the Blue Marble (land, coast and sea), as an uncompressed TIFF.
fn crop(dir: &Path) -> PathBuf {
    crop_at(dir, "crop.tif", 2600)
}

/// The 600×400 crop of the Blue Marble at column `x`, row 500, into `dir/name` (GDAL
/// fills what lies past the image's right edge with zeros).
fn crop_at(dir: &Path, name: &str, x: u32) -> PathBuf {
    let bmng = data_dir().join("bmng.jpg");
    assert!(bmng.exists(), "{} is missing: run assets/fetch-data.sh", bmng.display());
    translate(dir, &bmng, name, &["-srcwin", &x.to_string(), "500", "600", "400"])
}

/// Every texel of a TIFF as this reader decodes it, RGBA8.
fn texels(path: &Path) -> Vec<u8> {
    let src = TiffSource::open(path).unwrap_or_else(|e| panic!("{e}"));
    let (w, h) = src.size();
    let mut out = vec![0; w as usize * h as usize * 4];
    src.read_rows(0, &mut out).unwrap_or_else(|e| panic!("{e}"));
    out
}

/// GDAL's own decode of `path`: the file rewritten uncompressed (which this reader reads
/// through the `tiff` crate, with no code of the compressions under test).
fn gdal_decode(dir: &Path, path: &Path) -> Vec<u8> {
    let name = format!("{}-plain.tif", path.file_stem().unwrap().to_string_lossy());
    texels(&translate(dir, path, &name, &["-co", "COMPRESS=NONE"]))
}

/// PSNR of the colour channels of two RGBA8 images, dB.
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
fn lossless_zstd_and_webp_decode_like_gdal() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let want = texels(&crop);
    let cases: [(&str, &[&str]); 6] = [
        ("zstd-tiles", &["-co", "TILED=YES", "-co", "COMPRESS=ZSTD"]),
        ("zstd-tiles-pred2", &["-co", "TILED=YES", "-co", "COMPRESS=ZSTD", "-co", "PREDICTOR=2"]),
        ("zstd-strips-pred2", &["-co", "COMPRESS=ZSTD", "-co", "PREDICTOR=2", "-co", "BLOCKYSIZE=48"]),
        (
            "zstd-edge-tiles",
            &["-co", "TILED=YES", "-co", "BLOCKXSIZE=256", "-co", "BLOCKYSIZE=128", "-co", "COMPRESS=ZSTD"],
        ),
        ("webp-lossless-tiles", &["-co", "TILED=YES", "-co", "COMPRESS=WEBP", "-co", "WEBP_LOSSLESS=TRUE"]),
        (
            "webp-lossless-strips",
            &["-co", "COMPRESS=WEBP", "-co", "WEBP_LOSSLESS=TRUE", "-co", "BLOCKYSIZE=64"],
        ),
    ];
    for (name, args) in cases {
        let path = translate(dir.path(), &crop, &format!("{name}.tif"), args);
        let got = texels(&path);
        assert!(got == gdal_decode(dir.path(), &path), "{name}: differs from GDAL's decode");
        assert!(got == want, "{name}: differs from the uncompressed crop");
    }
}

/// Measured against GDAL's own decode (GDAL 3.6, libjpeg-turbo and libwebp of Debian 12,
/// this crop): JPEG YCbCr tiles 53.5 dB and strips 53.6 dB (the chroma upsampling
/// differs; the colour conversion is libjpeg's), RGB JPEG 71.1 dB, gray JPEG 71.4 dB,
/// lossy WebP identical (∞). Bounds are about 3 dB under (60 dB for WebP).
#[test]
fn jpeg_and_lossy_webp_decode_within_a_psnr_of_gdal() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let original = texels(&crop);
    let cases: [(&str, &[&str], f64); 5] = [
        ("jpeg-ycbcr-tiles", &["-co", "TILED=YES", "-co", "COMPRESS=JPEG", "-co", "PHOTOMETRIC=YCBCR"], 50.0),
        (
            "jpeg-ycbcr-strips",
            &["-co", "COMPRESS=JPEG", "-co", "PHOTOMETRIC=YCBCR", "-co", "BLOCKYSIZE=64"],
            50.0,
        ),
        ("jpeg-rgb-tiles", &["-co", "TILED=YES", "-co", "COMPRESS=JPEG", "-co", "PHOTOMETRIC=RGB"], 68.0),
        ("jpeg-gray-tiles", &["-b", "2", "-co", "TILED=YES", "-co", "COMPRESS=JPEG"], 68.0),
        ("webp-lossy-tiles", &["-co", "TILED=YES", "-co", "COMPRESS=WEBP", "-co", "WEBP_LEVEL=75"], 60.0),
    ];
    for (name, args, bound) in cases {
        let path = translate(dir.path(), &crop, &format!("{name}.tif"), args);
        let got = texels(&path);
        let gdal = gdal_decode(dir.path(), &path);
        let db = psnr(&got, &gdal);
        let vs_original = if name.contains("gray") { f64::NAN } else { psnr(&got, &original) };
        eprintln!("{name}: {db:.1} dB against GDAL's decode, {vs_original:.1} dB against the original");
        assert!(db >= bound, "{name}: {db:.1} dB against GDAL's decode, bound {bound} dB");
        assert!(got.chunks_exact(4).all(|t| t[3] == 255), "{name}: opaque");
    }
}

/// The raw values GDAL reads from band 1 of `path` (an ENVI file: its samples as stored,
/// little-endian), as f64.
fn gdal_values(dir: &Path, path: &Path, sample: &str) -> Vec<f64> {
    let name = format!("{}.envi", path.file_stem().unwrap().to_string_lossy());
    let raw = std::fs::read(translate(dir, path, &name, &["-of", "ENVI", "-b", "1"])).unwrap();
    match sample {
        "UInt16" => raw.chunks_exact(2).map(|b| f64::from(u16::from_le_bytes([b[0], b[1]]))).collect(),
        "Int16" => raw.chunks_exact(2).map(|b| f64::from(i16::from_le_bytes([b[0], b[1]]))).collect(),
        "Float32" => {
            raw.chunks_exact(4).map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect()
        }
        other => panic!("{other}"),
    }
}

#[test]
fn data_rasters_keep_their_range_and_nodata() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    // Band 1 of the crop (0..228) scaled by GDAL into each type; the sea's darkest
    // texels become nodata.
    let types: [(&str, &[&str], f64); 3] = [
        ("UInt16", &["-ot", "UInt16", "-scale", "0", "255", "0", "3000", "-a_nodata", "0"], 0.0),
        ("Int16", &["-ot", "Int16", "-scale", "0", "255", "-500", "2500", "-a_nodata", "-500"], -500.0),
        (
            "Float32",
            &["-ot", "Float32", "-scale", "0", "255", "-10.5", "1234.25", "-a_nodata", "-10.5"],
            -10.5,
        ),
    ];
    for (sample, make, nodata) in types {
        let mut base = vec!["-b", "1"];
        base.extend_from_slice(make);
        let predictor = if sample == "Float32" { "PREDICTOR=3" } else { "PREDICTOR=2" };
        let variants: [(&str, Vec<&str>); 4] = [
            ("none", vec![]),
            ("deflate", vec!["-co", "COMPRESS=DEFLATE", "-co", predictor]),
            ("zstd-tiles", vec!["-co", "TILED=YES", "-co", "COMPRESS=ZSTD", "-co", predictor]),
            ("lzw-tiles-stats", vec!["-stats", "-co", "TILED=YES", "-co", "COMPRESS=LZW", "-co", predictor]),
        ];
        for (variant, extra) in variants {
            let name = format!("{sample}-{variant}");
            let mut args = base.clone();
            args.extend_from_slice(&extra);
            let path = translate(dir.path(), &crop, &format!("{name}.tif"), &args);
            let values = gdal_values(dir.path(), &path, sample);
            let src = TiffSource::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(src.color_space(), Some(ColorSpace::Linear), "{name}");
            let scale = src.data_scale().unwrap_or_else(|| panic!("{name}: no data scale"));
            assert_eq!(scale.sample, sample, "{name}");
            assert_eq!(scale.nodata, Some(nodata), "{name}");
            let kept: Vec<f64> = values.iter().copied().filter(|&v| v != nodata).collect();
            let min = kept.iter().copied().fold(f64::INFINITY, f64::min);
            let max = kept.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            // GDAL's statistics (the `-stats` files) are stored to 14 digits.
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * (1.0 + b.abs());
            assert!(close(scale.min, min) && close(scale.max, max), "{name}: {scale:?}, range {min}..{max}");
            assert!(
                close(scale.scale, (max - min) / 255.0) && scale.offset == scale.min,
                "{name}: {scale:?}"
            );
            let got = texels(&path);
            let (mut hidden, mut worst) = (0, 0f64);
            for (t, &v) in got.chunks_exact(4).zip(&values) {
                if v == nodata {
                    assert_eq!(t, [0, 0, 0, 0], "{name}: nodata is transparent");
                    hidden += 1;
                } else {
                    assert!(t[3] == 255 && t[0] == t[1] && t[1] == t[2], "{name}: {t:?}");
                    worst = worst.max((scale.value(t[0]) - v).abs());
                }
            }
            assert!(hidden > 100, "{name}: {hidden} nodata texels");
            assert!(
                worst <= scale.scale * 0.5 + 1e-6,
                "{name}: a value is {worst} off, a step is {}",
                scale.scale
            );
        }
    }
}

#[test]
fn nodata_and_alpha_bands_become_transparent() {
    let dir = tempfile::tempdir().unwrap();
    // A crop across the image's right edge: GDAL fills its right half with zeros.
    let crop = crop_at(dir.path(), "edge.tif", 5100);
    // RGB with nodata 0 (texels whose three bands are all 0), then as gdalwarp makes it:
    // an alpha band (ExtraSamples 2, unassociated) that is 0 there.
    // (gdalwarp needs a geotransform: one texel a unit.)
    let nodata = translate(
        dir.path(),
        &crop,
        "nodata.tif",
        &["-a_nodata", "0", "-a_ullr", "0", "400", "600", "0", "-co", "TILED=YES", "-co", "COMPRESS=ZSTD"],
    );
    let alpha = dir.path().join("alpha.tif");
    gdal(
        "gdalwarp",
        &[
            "-q",
            "-dstalpha",
            "-co",
            "TILED=YES",
            "-co",
            "COMPRESS=DEFLATE",
            nodata.to_str().unwrap(),
            alpha.to_str().unwrap(),
        ],
    );
    let plain = texels(&crop);
    let black: Vec<bool> = plain.chunks_exact(4).map(|t| t[..3] == [0, 0, 0]).collect();
    assert!(black.iter().filter(|&&b| b).count() > 100, "the crop has black texels");
    for path in [&nodata, &alpha] {
        let got = texels(path);
        for ((t, p), &b) in got.chunks_exact(4).zip(plain.chunks_exact(4)).zip(&black) {
            if b {
                assert_eq!(t, [0, 0, 0, 0], "{}", path.display());
            } else {
                assert_eq!(t, p, "{}", path.display());
            }
        }
    }
}

/// LERC as GDAL writes it (COMPRESS=LERC, LERC_DEFLATE, LERC_ZSTD), lossless and lossy,
/// in colour and in data rasters with nodata: the texels of GDAL's own decode.
#[test]
fn lerc_decodes_like_gdal() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let dem_i16 = ["-b", "1", "-ot", "Int16", "-scale", "0", "255", "-500", "2500", "-a_nodata", "-500"];
    let dem_f32 =
        ["-b", "1", "-ot", "Float32", "-scale", "0", "255", "-10.5", "1234.25", "-a_nodata", "-10.5"];
    let cases: [(&str, Vec<&str>); 5] = [
        ("lerc-rgb", vec!["-co", "TILED=YES", "-co", "COMPRESS=LERC", "-co", "MAX_Z_ERROR=0"]),
        (
            "lerc-rgb-strips",
            vec!["-co", "COMPRESS=LERC_DEFLATE", "-co", "MAX_Z_ERROR=0", "-co", "BLOCKYSIZE=64"],
        ),
        ("lerc-i16-deflate", [&dem_i16[..], &["-co", "TILED=YES", "-co", "COMPRESS=LERC_DEFLATE"]].concat()),
        (
            "lerc-f32-zstd",
            [&dem_f32[..], &["-co", "TILED=YES", "-co", "COMPRESS=LERC_ZSTD", "-co", "MAX_Z_ERROR=0"]]
                .concat(),
        ),
        (
            "lerc-f32-lossy",
            [&dem_f32[..], &["-co", "TILED=YES", "-co", "COMPRESS=LERC", "-co", "MAX_Z_ERROR=0.5"]].concat(),
        ),
    ];
    for (name, args) in cases {
        let path = translate(dir.path(), &crop, &format!("{name}.tif"), &args);
        let got = texels(&path);
        assert!(got == gdal_decode(dir.path(), &path), "{name}: differs from GDAL's decode");
        if name.contains("f32") || name.contains("i16") {
            assert!(got.chunks_exact(4).any(|t| t[3] == 0), "{name}: nodata is transparent");
        }
    }
}

/// An Int16 DEM bakes to a linear layer whose metadata record keeps the value scale and
/// nodata, so that a texel of the atlas reads back as its elevation.
#[test]
fn a_dem_bakes_to_a_linear_layer_keeping_its_scale() {
    use tessera_core::NoProgress;
    use tessera_core::bake::open::open_image;
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::atlas::Atlas;
    use tessera_core::format::codec::Codec;

    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let args = ["-b", "1", "-ot", "Int16", "-scale", "0", "255", "-500", "2500", "-a_nodata", "-500"];
    let dem = translate(dir.path(), &crop, "dem.tif", &args);
    let want = TiffSource::open(&dem).unwrap().data_scale().unwrap();
    let input = BakeInput::boxed("dem", open_image(&dem).unwrap());
    assert_eq!(input.color, ColorSpace::Linear, "a data raster is a linear layer by default");
    let out = dir.path().join("dem.tsa");
    let opts = BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() };
    bake(vec![input], &out, &opts, &NoProgress).unwrap();
    let atlas = Atlas::open(&out).unwrap();
    assert_eq!(atlas.layers()[0].color, ColorSpace::Linear);
    let meta = atlas.metadata();
    let got = meta.layers.first().and_then(|l| l.data.clone()).expect("the layer's data scale is kept");
    assert_eq!(got, want);
    assert_eq!(got.nodata, Some(-500.0));
    assert!(got.min > -500.0 && got.max <= 2500.0 && got.scale > 0.0, "{got:?}");
}

/// A JPEG tile that declares itself 65535×65535 is refused before it is decoded (its size is
/// checked against the tile's), and random damage to Zstandard, JPEG, WebP and LERC files
/// is an error or a read, never a panic.
#[test]
fn forged_and_damaged_chunks_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let jpeg = translate(
        dir.path(),
        &crop,
        "j.tif",
        &["-co", "TILED=YES", "-co", "COMPRESS=JPEG", "-co", "PHOTOMETRIC=YCBCR"],
    );
    let mut bytes = std::fs::read(&jpeg).unwrap();
    let sof = bytes.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline JPEG frame header");
    bytes[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    let forged = dir.path().join("forged.tif");
    std::fs::write(&forged, &bytes).unwrap();
    let src = TiffSource::open(&forged).unwrap();
    let mut out = vec![0; 600 * 400 * 4];
    let err = src.read_rows(0, &mut out).unwrap_err().to_string();
    assert!(err.contains("forged.tif") && err.contains("tile 0") && err.contains("JPEG"), "{err}");

    let files: Vec<Vec<u8>> = [
        jpeg.clone(),
        translate(
            dir.path(),
            &crop,
            "z.tif",
            &["-co", "TILED=YES", "-co", "COMPRESS=ZSTD", "-co", "PREDICTOR=2"],
        ),
        translate(dir.path(), &crop, "w.tif", &["-co", "TILED=YES", "-co", "COMPRESS=WEBP"]),
        translate(dir.path(), &crop, "wl.tif", &["-co", "COMPRESS=WEBP", "-co", "WEBP_LOSSLESS=TRUE"]),
        translate(dir.path(), &crop, "l.tif", &["-co", "TILED=YES", "-co", "COMPRESS=LERC_DEFLATE"]),
    ]
    .iter()
    .map(|p| std::fs::read(p).unwrap())
    .collect();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let damaged = dir.path().join("damaged.tif");
    let (mut opened, mut failed) = (0, 0);
    for round in 0..75 {
        let mut bytes = files[round % files.len()].clone();
        for _ in 0..1 + next() % 8 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        std::fs::write(&damaged, &bytes).unwrap();
        if let Ok(src) = TiffSource::open(&damaged) {
            opened += 1;
            let (w, h) = src.size();
            let mut out = vec![0; w as usize * h as usize * 4];
            failed += usize::from(src.read_rows(0, &mut out).is_err());
        }
    }
    eprintln!("{opened} of 75 damaged files opened, {failed} of them failed to read");
    assert!(opened > 30 && failed > 5, "{opened} opened, {failed} failed to read");
}

/// A mosaic of two Int16 DEM halves with different ranges (in a grid, and placed by their
/// geotransforms) bakes on one value scale, the union of theirs: tile for tile what the
/// whole DEM bakes to.
#[test]
fn dem_tiles_of_a_mosaic_share_one_scale() {
    use tessera_core::NoProgress;
    use tessera_core::bake::grid::open_grid;
    use tessera_core::bake::open::open_image;
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::atlas::Atlas;
    use tessera_core::format::codec::Codec;

    let dir = tempfile::tempdir().unwrap();
    let crop = crop(dir.path());
    let make = ["-b", "1", "-ot", "Int16", "-scale", "0", "255", "-500", "2500", "-a_nodata", "-500"];
    let mut geo = make.to_vec();
    geo.extend_from_slice(&["-a_ullr", "0", "400", "600", "0"]);
    let whole = translate(dir.path(), &crop, "whole.tif", &geo);
    let plain = translate(dir.path(), &crop, "plain.tif", &make);
    let halves = |from: &Path, tag: &str| {
        [("w", "0"), ("e", "300")].map(|(side, x)| {
            translate(dir.path(), from, &format!("{tag}-{side}.tif"), &["-srcwin", x, "0", "300", "400"])
        })
    };
    let scales: Vec<_> =
        halves(&plain, "p").iter().map(|p| TiffSource::open(p).unwrap().data_scale().unwrap()).collect();
    assert!(
        scales[0].min != scales[1].min || scales[0].max != scales[1].max,
        "the halves' ranges differ: {scales:?}"
    );

    let opts = BakeOptions { codec: Codec::Lz4, tile_size: 64, ..BakeOptions::default() };
    let bake_one = |name: &str, source: Box<dyn RowSource>| {
        let out = dir.path().join(format!("{name}.tsa"));
        bake(vec![BakeInput::boxed("dem", source)], &out, &opts, &NoProgress).unwrap();
        Atlas::open(&out).unwrap()
    };
    let reference = bake_one("whole", open_image(&whole).unwrap());
    let want = reference.metadata().layers[0].data.clone().unwrap();
    for (name, shape, parts) in
        [("grid", Some((2, 1)), halves(&plain, "p")), ("placed", None, halves(&whole, "g"))]
    {
        let images = parts.iter().map(|p| open_image(p).unwrap()).collect();
        let atlas = bake_one(name, open_grid(shape, images).unwrap());
        let got = atlas.metadata().layers[0].data.clone().unwrap_or_else(|| panic!("{name}: no data scale"));
        assert_eq!(got, want, "{name}");
        let layout = atlas.layers()[0].layout;
        for t in layout.tiles(0) {
            assert_eq!(
                atlas.entry(t).unwrap().crc32,
                reference.entry(t).unwrap().crc32,
                "{name}: tile {t:?}"
            );
        }
    }
    // A colour image among data rasters is refused, naming it.
    let images = vec![open_image(&halves(&plain, "p")[0]).unwrap(), open_image(&crop).unwrap()];
    let err = open_grid(Some((2, 1)), images).err().unwrap().to_string();
    assert!(err.contains("crop.tif") && err.contains("colour image among data rasters"), "{err}");
}
