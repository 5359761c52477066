//! Georeferencing kept and used (issue 44 item 2), on files GDAL writes at test time from
//! a 300×200 image: four GeoTIFFs cut from it with `gdal_translate -srcwin`, given in
//! shuffled order, bake to the very tiles of GDAL's own mosaic (`gdalbuildvrt` +
//! `gdal_translate`), and so does the VRT; the atlas keeps GDAL's geotransform and EPSG
//! code; mismatches and VRTs this reader does not support are errors naming the file.
//!
//! Needs GDAL's command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh`
//! installs): without them these tests fail saying so.

#![allow(clippy::unwrap_used)]

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
    let gt: Vec<f64> = info["geoTransform"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
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
        assert!(bounds.iter().zip([10.0, 48.0, 13.0, 50.0]).all(|(a, b)| (a - b).abs() < 1e-9), "{bounds:?}");
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
    let err =
        open_grid(Some((2, 2)), open(d, &["b.tif", "a.tif", "c.tif", "d.tif"])).err().unwrap().to_string();
    assert!(err.contains("b.tif: given at grid column 1, row 1") && err.contains("--grid geo"), "{err}");
    let err =
        open_grid(Some((4, 1)), open(d, &["a.tif", "b.tif", "c.tif", "d.tif"])).err().unwrap().to_string();
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
    let dem =
        ["-ot", "Int16", "-scale", "0", "255", "-500", "2500", "-a_srs", "EPSG:4326", "-a_nodata", "-500"];
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
