//! The `tessera` binary's bake messages that issue 44 found wrong ("Smaller defects"):
//! a plan of LZ4 shards that took no time, URL inputs called missing files; and GeoTIFF
//! grids placed by their geotransforms, shown by `inspect` (module `geotiff`).

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::process::Output;

fn tessera(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_plan_of_lz4_shards_counts_reading_and_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.tsa");
    let o = tessera(&[
        "bake",
        "--generate",
        "4096x4096",
        "--codec",
        "lz4",
        "-o",
        out.to_str().unwrap(),
        "--plan",
        "16",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // 16.8 M texels at 15 ns: about 0.25 s a shard, whatever the encoding costs.
    let shards: Vec<&str> = t.lines().filter(|l| l.contains("/16 ")).collect();
    assert_eq!(shards.len(), 16, "{t}");
    assert!(shards.iter().all(|l| !l.ends_with(" 0.0 s")), "{t}");
    assert!(t.contains("reads and filters the whole input"), "{t}");
}

#[test]
fn a_url_input_is_refused_as_a_url_not_as_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u.tsa");
    for url in ["s3://bucket/x.tif", "gs://bucket/x.tif", "az://container/x.tif", "https://example.com/x.png"]
    {
        let o = tessera(&["bake", url, "-o", out.to_str().unwrap()]);
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        assert!(
            t.contains(&format!("{url}: URL inputs are not read by bake: download the file first")),
            "{t}"
        );
        assert!(!t.contains("no such file") && !out.exists(), "{t}");
    }
}

/// Bakes a generated 512² image in 4 LZ4 shards into `dir/s.tsa`; returns the bake's
/// arguments (before `--shard` or `--merge`).
fn shards(dir: &std::path::Path) -> Vec<String> {
    let out = dir.join("s.tsa").to_str().unwrap().to_string();
    let args: Vec<String> =
        ["bake", "--generate", "512x512", "--tile-size", "64", "--codec", "lz4", "-o", &out]
            .map(String::from)
            .to_vec();
    for i in 0..4 {
        let shard = format!("{i}/4");
        let o =
            tessera(&[args.iter().map(String::as_str).collect::<Vec<_>>(), vec!["--shard", &shard]].concat());
        assert!(o.status.success(), "{}", text(&o));
    }
    args
}

fn with(args: &[String], extra: &[&str]) -> Output {
    tessera(&[args.iter().map(String::as_str).collect::<Vec<_>>(), extra.to_vec()].concat())
}

#[test]
fn a_split_merge_counts_parts_not_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let args = shards(dir.path());
    let o = with(&args, &["--merge"]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("merge: 4/4 parts (100.0%)"), "{t}");
    assert!(!t.contains("4/4 tiles"), "{t}");
}

#[test]
fn inspect_of_a_split_atlas_gives_its_whole_size() {
    let dir = tempfile::tempdir().unwrap();
    let args = shards(dir.path());
    assert!(with(&args, &["--merge"]).status.success());
    let parts: u64 = std::fs::read_dir(dir.path().join("s.tsa.shards"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let index = std::fs::metadata(dir.path().join("s.tsa")).unwrap().len();
    let o = tessera(&["inspect", dir.path().join("s.tsa").to_str().unwrap()]);
    let t = text(&o);
    let mib = (parts + index) as f64 / f64::from(1u32 << 20);
    assert!(o.status.success() && mib > 0.01, "{t}");
    // Issue 44: the first line said "0.00 MiB", the index object's size.
    let first = t.lines().next().unwrap();
    assert!(first.ends_with(&format!("tiles, {mib:.2} MiB")), "{first} (expected {mib:.2} MiB)");
    assert!(t.contains("split atlas: a ") && t.contains("KiB index naming 4 data object(s)"), "{t}");
}

#[test]
fn status_after_a_merge_says_merged() {
    let dir = tempfile::tempdir().unwrap();
    let args = shards(dir.path());
    let status = || text(&with(&args, &["--status"]));
    assert!(status().contains("all 4 parts done: run the same command with --merge"), "{}", status());
    assert!(with(&args, &["--merge"]).status.success());
    // Issue 44: this still said "run … with --merge".
    let t = status();
    assert!(
        t.contains("all 4 parts done and merged: ") && t.contains("s.tsa is a split atlas of them"),
        "{t}"
    );
    assert!(!t.contains("--merge"), "{t}");
    assert!(with(&args, &["--merge", "--one-file", "--keep-shards"]).status.success());
    let t = status();
    assert!(t.contains("all 4 parts done and merged into one file: "), "{t}");
}

/// A UInt16 DEM made by GDAL (`apt-get install gdal-bin`) bakes with a note saying it is a
/// data raster, its range, its scale and its nodata; `--color srgb` is refused for it.
#[test]
fn a_dem_bakes_with_a_note_on_its_scale() {
    let dir = tempfile::tempdir().unwrap();
    let bmng = tessera_core::bake::source::data_dir().join("bmng.jpg");
    assert!(bmng.exists(), "{} is missing: run assets/fetch-data.sh", bmng.display());
    let dem = dir.path().join("dem.tif");
    let args = [
        "-q", "-srcwin", "2600", "500", "300", "200", "-b", "1", "-ot", "UInt16", "-scale", "0", "255", "0",
        "3000",
    ];
    let made = std::process::Command::new("gdal_translate")
        .args(args)
        .args(["-a_nodata", "0"])
        .arg(&bmng)
        .arg(&dem)
        .status()
        .unwrap_or_else(|e| panic!("cannot run gdal_translate ({e}): apt-get install gdal-bin"));
    assert!(made.success());
    let out = dir.path().join("dem.tsa");
    let o = tessera(&["bake", dem.to_str().unwrap(), "--codec", "lz4", "-o", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("note: ") && t.contains("dem.tif: a UInt16 data raster") && t.contains("linear layer"),
        "{t}"
    );
    assert!(t.contains("nodata 0 is transparent") && t.contains("value = "), "{t}");
    let o = tessera(&["inspect", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("data raster: UInt16 values ") && t.contains("nodata 0 (alpha 0)"),
        "{t}"
    );
    let o = tessera(&["inspect", "--json", out.to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let data = &json["layers"][0]["data"];
    assert_eq!(data["sample"], "UInt16", "{json}");
    assert!(data["scale"].as_f64().unwrap() > 1.0 && data["nodata"] == 0.0, "{json}");
    let o = tessera(&["bake", dem.to_str().unwrap(), "--color", "srgb", "-o", out.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o).contains("--color srgb asked for"), "{}", text(&o));
}

/// `tessera bake --grid` of GeoTIFFs and `tessera inspect` of the atlas (issue 44 item
/// 2): two GeoTIFFs written by GDAL, placed by their geotransforms whatever their order;
/// `inspect --json` shows the CRS, geotransform, pixel size and bounds, the table too; an
/// order their geotransforms contradict is an error naming the file. Needs GDAL's
/// command-line tools (`apt-get install gdal-bin`, which `scripts/setup.sh` installs):
/// without them it fails saying so.
mod geotiff {
    use std::path::Path;
    use std::process::Output;

    fn tessera(dir: &Path, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
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
            &[
                "-a_srs",
                "EPSG:32631",
                "-a_ullr",
                "500000",
                "4000000",
                "506000",
                "3998000",
                "src.png",
                "w.tif",
            ],
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
}
