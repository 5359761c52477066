//! `tessera bake --grid` of GeoTIFFs and `tessera inspect` of the atlas (issue 44 item
//! 2): two GeoTIFFs written by GDAL, placed by their geotransforms whatever their order;
//! `inspect --json` shows the CRS, geotransform, pixel size and bounds, the table too;
//! an order their geotransforms contradict is an error naming the file.
//!
//! Needs GDAL's command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh`
//! installs): without them these tests fail saying so.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::Path;
use std::process::Output;

fn tessera(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).current_dir(dir).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn gdal_translate(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("gdal_translate").arg("-q").args(args).current_dir(dir).output();
    let o = o.unwrap_or_else(|e| {
        panic!("cannot run gdal_translate ({e}): these tests need GDAL's tools: apt-get install gdal-bin")
    });
    assert!(o.status.success(), "gdal_translate {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_grid_of_geotiffs_bakes_in_any_order_and_inspect_shows_its_georeference() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    image::RgbImage::from_fn(120, 40, |x, y| image::Rgb([x as u8, (y * 6) as u8, (x * y) as u8]))
        .save(d.join("src.png"))
        .unwrap();
    gdal_translate(
        d,
        &["-a_srs", "EPSG:32631", "-a_ullr", "500000", "4000000", "506000", "3998000", "src.png", "w.tif"],
    );
    gdal_translate(d, &["-srcwin", "0", "0", "50", "40", "w.tif", "west.tif"]);
    gdal_translate(d, &["-srcwin", "50", "0", "70", "40", "w.tif", "east.tif"]);
    let o = tessera(d, &["bake", "--grid", "geo", "east.tif", "west.tif", "-o", "g.tsa"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = tessera(d, &["inspect", "--json", "g.tsa"]);
    assert!(o.status.success(), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let layer = &json["layers"][0];
    assert_eq!((layer["width"].as_u64(), layer["height"].as_u64()), (Some(120), Some(40)));
    let geo = &layer["geo"];
    assert_eq!(geo["crs"], "EPSG:32631");
    assert_eq!(geo["epsg"], 32631);
    assert_eq!(geo["geotransform"], serde_json::json!([500000.0, 50.0, 0.0, 4000000.0, 0.0, -50.0]));
    assert_eq!(geo["pixel_size"], serde_json::json!([50.0, 50.0]));
    assert_eq!(geo["bounds"], serde_json::json!([500000.0, 3998000.0, 506000.0, 4000000.0]));
    let table = text(&tessera(d, &["inspect", "g.tsa"]));
    assert!(table.contains("georeferenced: EPSG:32631"), "{table}");
    assert!(table.contains("geotransform: [500000, 50, 0, 4000000, 0, -50]"), "{table}");
    // COLSxROWS in the wrong order: refused, naming the file out of place.
    let o = tessera(d, &["bake", "--grid", "2x1", "east.tif", "west.tif", "-o", "bad.tsa"]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("east.tif: given at grid column 1, row 1"), "{t}");
    assert!(!d.join("bad.tsa").exists());
}
