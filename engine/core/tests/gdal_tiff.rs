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

/// Georeferencing kept and used (issue 44 item 2), on files GDAL writes at test time from
/// a 300×200 image: four GeoTIFFs cut from it with `gdal_translate -srcwin`, given in
/// shuffled order, bake to the very tiles of GDAL's own mosaic (`gdalbuildvrt` +
/// `gdal_translate`), and so does the VRT; the atlas keeps GDAL's geotransform and EPSG
/// code; mismatches and VRTs this reader does not support are errors naming the file.
///
/// Needs GDAL's command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh`
/// installs): without them these tests fail saying so.
mod geotiff_grid {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use tessera_core::NoProgress;
    use tessera_core::bake::grid::open_grid;
    use tessera_core::bake::open::open_image;
    use tessera_core::bake::source::RowSource;
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::atlas::{Atlas, GeoReference, RasterType};
    use tessera_core::format::codec::Codec;

    /// Runs a GDAL tool in `dir`, failing with the install instruction when it is missing;
    /// returns its standard output.
    fn gdal(dir: &Path, tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool).args(args).current_dir(dir).output().unwrap_or_else(|e| {
            panic!("cannot run {tool} ({e}): these tests need GDAL's tools: apt-get install gdal-bin")
        });
        assert!(out.status.success(), "{tool} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// `gdal_translate -q ARGS… from to` in `dir`.
    fn translate(dir: &Path, from: &str, to: &str, args: &[&str]) -> PathBuf {
        let mut all = vec!["-q"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[from, to]);
        gdal(dir, "gdal_translate", &all);
        dir.join(to)
    }

    /// Pieces of the 300×200 image: name, then x, y, width, height (cut off the 32-texel
    /// tile grid of the bakes).
    const PIECES: [(&str, [u32; 4]); 4] = [
        ("a.tif", [0, 0, 137, 91]),
        ("b.tif", [137, 0, 163, 91]),
        ("c.tif", [0, 91, 137, 109]),
        ("d.tif", [137, 91, 163, 109]),
    ];

    /// In `dir`: `whole.tif`, a noisy 300×200 RGB GeoTIFF in EPSG:4326 covering 10..13 E,
    /// 48..50 N (0.01° texels), and its four pieces.
    fn fixture(dir: &Path) {
        let mut s = 0x1234_5678u32;
        let image = image::RgbImage::from_fn(300, 200, |x, y| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            image::Rgb([(x * 5) as u8 ^ (s as u8 & 31), (y * 3) as u8, (x ^ y) as u8 ^ (s >> 27) as u8])
        });
        image.save(dir.join("src.png")).unwrap();
        translate(dir, "src.png", "whole.tif", &["-a_srs", "EPSG:4326", "-a_ullr", "10", "50", "13", "48"]);
        for (name, [x, y, w, h]) in PIECES {
            translate(
                dir,
                "whole.tif",
                name,
                &["-srcwin", &x.to_string(), &y.to_string(), &w.to_string(), &h.to_string()],
            );
        }
    }

    fn open(dir: &Path, names: &[&str]) -> Vec<Box<dyn RowSource>> {
        names.iter().map(|n| open_image(&dir.join(n)).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    /// Bakes `source` as one layer (32-texel tiles, LZ4) into `dir/name`.
    fn bake_one(dir: &Path, name: &str, source: Box<dyn RowSource>) -> Atlas {
        let path = dir.join(name);
        let opts =
            BakeOptions { tile_size: 32, border: 4, codec: Codec::Lz4, threads: 1, ..BakeOptions::default() };
        bake(vec![BakeInput::boxed("layer", source)], &path, &opts, &NoProgress)
            .unwrap_or_else(|e| panic!("{e}"));
        Atlas::open(&path).unwrap()
    }

    /// GDAL's geotransform of `file` (`gdalinfo -json`).
    fn gdal_geotransform(dir: &Path, file: &str) -> [f64; 6] {
        let info: serde_json::Value = serde_json::from_str(&gdal(dir, "gdalinfo", &["-json", file])).unwrap();
        let gt: Vec<f64> =
            info["geoTransform"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        gt.try_into().unwrap()
    }

    fn close(a: [f64; 6], b: [f64; 6]) -> bool {
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-9 * x.abs().max(1.0))
    }

    fn geo(atlas: &Atlas) -> GeoReference {
        atlas.metadata().layers[0].geo.clone().expect("the atlas keeps the georeference")
    }

    #[test]
    fn a_shuffled_grid_of_geotiffs_and_the_vrt_bake_to_gdals_mosaic() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fixture(d);
        gdal(d, "gdalbuildvrt", &["-q", "m.vrt", "d.tif", "a.tif", "c.tif", "b.tif"]);
        translate(d, "m.vrt", "mosaic.tif", &[]);
        let mosaic = bake_one(d, "mosaic.tsa", open(d, &["mosaic.tif"]).remove(0));
        let shuffled = open_grid(None, open(d, &["d.tif", "b.tif", "a.tif", "c.tif"])).unwrap();
        let grid = bake_one(d, "grid.tsa", shuffled);
        let vrt = bake_one(d, "vrt.tsa", open(d, &["m.vrt"]).remove(0));
        let layout = mosaic.layers()[0].layout;
        assert_eq!((layout.width(), layout.height()), (300, 200));
        for atlas in [&grid, &vrt] {
            assert_eq!(atlas.layers()[0].layout, layout);
            for m in 0..layout.mip_count() {
                for t in layout.tiles(0).filter(|t| u32::from(t.mip) == m) {
                    assert_eq!(
                        atlas.decode_tile(t).unwrap(),
                        mosaic.decode_tile(t).unwrap(),
                        "{:?} tile {t}",
                        atlas.path()
                    );
                }
            }
        }
        // The georeference GDAL gives the mosaic, kept by all three.
        let expected = gdal_geotransform(d, "mosaic.tif");
        assert!(close(expected, [10.0, 0.01, 0.0, 50.0, 0.0, -0.01]), "{expected:?}");
        for atlas in [&mosaic, &grid, &vrt] {
            let g = geo(atlas);
            assert!(close(g.geotransform.unwrap(), expected), "{:?}: {:?}", atlas.path(), g.geotransform);
            assert_eq!(g.epsg, Some(4326), "{:?}", atlas.path());
            let bounds = g.bounds(300, 200).unwrap();
            assert!(
                bounds.iter().zip([10.0, 48.0, 13.0, 50.0]).all(|(a, b)| (a - b).abs() < 1e-9),
                "{bounds:?}"
            );
        }
        assert_eq!(geo(&mosaic).raster_type, Some(RasterType::PixelIsArea));
        assert!(geo(&mosaic).tags.geo_key_directory.is_some(), "the raw GeoKeys are kept");
        assert_eq!(geo(&grid).tags.model_tiepoint, Some(vec![0.0, 0.0, 0.0, 10.0, 50.0, 0.0]));
    }

    #[test]
    fn a_grid_order_contradicting_the_geotransforms_and_mismatched_tiles_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fixture(d);
        // In row order: accepted; in another order: the first image out of place is named.
        assert!(open_grid(Some((2, 2)), open(d, &["a.tif", "b.tif", "c.tif", "d.tif"])).is_ok());
        let err = open_grid(Some((2, 2)), open(d, &["b.tif", "a.tif", "c.tif", "d.tif"]))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("b.tif: given at grid column 1, row 1") && err.contains("--grid geo"), "{err}");
        let err = open_grid(Some((4, 1)), open(d, &["a.tif", "b.tif", "c.tif", "d.tif"]))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("2 column(s) and 2 row(s), not 4x1"), "{err}");
        // Another CRS, another resolution, an origin half a texel off the grid.
        translate(d, "b.tif", "b-3857.tif", &["-a_srs", "EPSG:3857"]);
        translate(d, "b.tif", "b-coarse.tif", &["-outsize", "50%", "50%"]);
        translate(d, "b.tif", "b-shifted.tif", &["-a_ullr", "11.375", "50", "13.005", "49.09"]);
        for (file, says) in [
            ("b-3857.tif", "is in EPSG:3857, but"),
            ("b-coarse.tif", "share one resolution"),
            ("b-shifted.tif", "not on the texel grid"),
        ] {
            let err = open_grid(None, open(d, &["a.tif", file, "c.tif", "d.tif"])).err().unwrap().to_string();
            assert!(err.contains(file) && err.contains(says), "{file}: {err}");
        }
        // A plain image among GeoTIFFs.
        let err = open_grid(None, open(d, &["a.tif", "src.png"])).err().unwrap().to_string();
        assert!(err.contains("src.png: not georeferenced"), "{err}");
    }

    #[test]
    fn point_rasters_keep_gdals_geotransform_and_unsupported_vrts_are_refused_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fixture(d);
        // RasterPixelIsPoint: the tiepoint names a texel centre; the geotransform stays GDAL's.
        translate(d, "whole.tif", "point.tif", &["-mo", "AREA_OR_POINT=Point"]);
        let point = open(d, &["point.tif"]).remove(0).layer_meta().geo.unwrap();
        assert_eq!(point.raster_type, Some(RasterType::PixelIsPoint));
        assert!(close(point.geotransform.unwrap(), gdal_geotransform(d, "point.tif")), "{point:?}");
        for (args, says) in [
            (&["-srcnodata", "0"][..], "a.tif: the VRT's nodata 0 on a colour image is not read"),
            (&["-tr", "0.02", "0.02"][..], "(resampled)"),
            (&["-separate"][..], "band 2 does not take the same sources"),
        ] {
            let mut all = vec!["-q", "x.vrt"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["a.tif", "b.tif"]);
            gdal(d, "gdalbuildvrt", &all);
            let err = open_image(&d.join("x.vrt")).err().expect("refused").to_string();
            assert!(err.contains("x.vrt") && err.contains(says), "{args:?}: {err}");
        }
    }

    /// A VRT of DEM tiles (Int16, each half of its own range, with nodata) bakes like the
    /// whole DEM: its sources share one value scale, as a grid's do, and their nodata is the
    /// VRT's.
    #[test]
    fn a_vrt_of_dem_tiles_bakes_like_the_whole_dem() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Heights rising west to east: the halves' ranges differ.
        image::GrayImage::from_fn(300, 200, |x, y| image::Luma([(x * 255 / 299) as u8 ^ (y as u8 & 3)]))
            .save(d.join("dem.png"))
            .unwrap();
        // Its lowest value is nodata, which gdalbuildvrt carries into the VRT (NoDataValue, NODATA).
        let dem = [
            "-ot",
            "Int16",
            "-scale",
            "0",
            "255",
            "-500",
            "2500",
            "-a_srs",
            "EPSG:4326",
            "-a_nodata",
            "-500",
        ];
        translate(d, "dem.png", "dem.tif", &[&dem[..], &["-a_ullr", "10", "50", "13", "48"]].concat());
        translate(d, "dem.tif", "dem-w.tif", &["-srcwin", "0", "0", "150", "200"]);
        translate(d, "dem.tif", "dem-e.tif", &["-srcwin", "150", "0", "150", "200"]);
        gdal(d, "gdalbuildvrt", &["-q", "dem.vrt", "dem-e.tif", "dem-w.tif"]);
        let text = std::fs::read_to_string(d.join("dem.vrt")).unwrap();
        assert!(
            text.contains("<NoDataValue>-500</NoDataValue>") && text.contains("<NODATA>-500</NODATA>"),
            "{text}"
        );
        let whole = bake_one(d, "dem.tsa", open(d, &["dem.tif"]).remove(0));
        let vrt = bake_one(d, "dem-vrt.tsa", open(d, &["dem.vrt"]).remove(0));
        let half = |f: &str| open(d, &[f]).remove(0).data_scale().unwrap();
        let (w, e) = (half("dem-w.tif"), half("dem-e.tif"));
        assert!(w.max < e.max && w.min < e.min, "the halves' ranges differ: {w:?} {e:?}");
        let (a, b) = (&whole.metadata().layers[0], &vrt.metadata().layers[0]);
        assert!(a.data.is_some() && a.data == b.data, "{:?} against {:?}", a.data, b.data);
        let layout = whole.layers()[0].layout;
        for t in layout.tiles(0) {
            assert_eq!(vrt.decode_tile(t).unwrap(), whole.decode_tile(t).unwrap(), "tile {t}");
        }
    }
}

/// Cloud Optimized GeoTIFFs streamed without a bake (issue 44 item 4): a COG written by
/// GDAL opens as a one-layer atlas whose mip-0 tiles equal those of the same file baked,
/// whose overviews are its next mips and whose last mips are built at open; each internal
/// tile is read and decoded once however many virtual tiles it serves; TIFFs that cannot
/// be streamed are refused saying why.
///
/// Needs GDAL's command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh`
/// installs) and the Blue Marble (`assets/fetch-data.sh`): without them these tests fail
/// saying so.
mod cog {
    use std::path::{Path, PathBuf};

    use super::{gdal, psnr, translate};
    use tessera_core::bake::source::data_dir;
    use tessera_core::bake::tiff::TiffSource;
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::cog::COG_TILE_SIZE;
    use tessera_core::{Atlas, AtlasError, NoProgress, TileId};

    /// A 1000×700 crop of the Blue Marble (land, coast and sea), uncompressed.
    fn crop(dir: &Path) -> PathBuf {
        let bmng = data_dir().join("bmng.jpg");
        assert!(bmng.exists(), "{} is missing: run assets/fetch-data.sh", bmng.display());
        translate(dir, &bmng, "crop.tif", &["-srcwin", "2400", "400", "1000", "700"])
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
}
