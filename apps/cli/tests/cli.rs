//! End-to-end tests of the `tessera` binary: bake, inspect, verify on a real JPEG,
//! and one-line errors (never a panic) on bad input.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean failure: non-zero exit, one error line naming `name` and saying `what`, no panic.
fn assert_clean_failure(o: &Output, name: &str, what: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want one error line, got: {err}");
    assert!(lines[0].contains(name), "error does not name {name}: {err}");
    assert!(lines[0].to_lowercase().contains(what), "error does not say '{what}': {err}");
}

/// The real photograph fetched by `assets/fetch-data.sh` (Blue Marble, 5400x2700 JPEG).
fn real_jpeg() -> PathBuf {
    let dir = tessera_core::bake::source::data_dir();
    let p = dir.join("bmng.jpg");
    assert!(
        p.exists(),
        "{} is missing: run assets/fetch-data.sh (scripts/test does) to fetch the real test images",
        p.display()
    );
    p
}

fn bake(input: &Path, out: &Path, codec: &str) {
    let o = tessera(&["bake", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--codec", codec]);
    assert!(o.status.success(), "bake failed: {}", stderr(&o));
    assert!(stdout(&o).contains("baked 1 layer(s)"), "{}", stdout(&o));
}

#[test]
fn real_jpeg_bakes_inspects_and_verifies_with_both_codecs() {
    let jpeg = real_jpeg();
    let dir = tempfile::tempdir().unwrap();
    for codec in ["raw", "lz4"] {
        let atlas = dir.path().join(format!("earth-{codec}.tsa"));
        bake(&jpeg, &atlas, codec);
        let o = tessera(&["inspect", atlas.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let layer = &j["layers"][0];
        assert_eq!(layer["width"], 5400);
        assert_eq!(layer["height"], 2700);
        assert_eq!(layer["codec"], codec);
        // 5400 / 128 = 42.2 -> 43 tiles across; the chain ends at 5400 / 64 = 84.4 <= 128.
        assert_eq!(layer["mip_count"], 7);
        let tiles: Vec<(u64, u64)> = layer["mips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["tiles_x"].as_u64().unwrap(), m["tiles_y"].as_u64().unwrap()))
            .collect();
        assert_eq!(tiles, vec![(43, 22), (22, 11), (11, 6), (6, 3), (3, 2), (2, 1), (1, 1)]);
        assert_eq!(layer["tiles"], 946 + 242 + 66 + 18 + 6 + 2 + 1);
        let ratio = layer["compression_ratio"].as_f64().unwrap();
        if codec == "raw" {
            assert!((ratio - 1.0).abs() < 1e-9);
        } else {
            assert!(ratio > 1.0, "lz4 should shrink RGBA8 with an opaque alpha channel: {ratio}");
        }
        let o = tessera(&["verify", atlas.to_str().unwrap()]);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("all 1281 tiles good"), "{}", stdout(&o));
        let o = tessera(&["inspect", atlas.to_str().unwrap()]);
        assert!(stdout(&o).contains("5400x2700 texels"), "{}", stdout(&o));
    }
}

/// Offset and length of a tile's blob, from the atlas index.
fn blob_of(atlas: &std::path::Path, tile: tessera::core::format::tile::TileId) -> (usize, usize) {
    let e = tessera::core::Atlas::open(atlas).unwrap().entry(tile).unwrap();
    (e.offset as usize, e.length as usize)
}

#[test]
fn verify_names_the_flipped_tile_and_truncation_is_clear() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = dir.path().join("g.tsa");
    let o = tessera(&["bake", "--generate", "1000x600", "-o", atlas.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let good = std::fs::read(&atlas).unwrap();
    // Mip 0 is 8x5 tiles.
    let (off, len) = blob_of(&atlas, tessera::core::format::tile::TileId::new(0, 0, 5, 1));
    let mut bad = good.clone();
    bad[off + len / 2] ^= 0x01;
    let flipped = dir.path().join("flipped.tsa");
    std::fs::write(&flipped, &bad).unwrap();
    let o = tessera(&["verify", flipped.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("bad tile: layer 0 mip 0 x 5 y 1"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("bad tile")).count(), 1, "{out}");

    let truncated = dir.path().join("truncated.tsa");
    std::fs::write(&truncated, &good[..good.len() - 100]).unwrap();
    for cmd in ["verify", "inspect"] {
        assert_clean_failure(&tessera(&[cmd, truncated.to_str().unwrap()]), "truncated.tsa", "truncated");
    }
}

#[test]
fn bad_input_gives_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let out = d("out.tsa");

    assert_clean_failure(&tessera(&["bake", &d("missing.jpg"), "-o", &out]), "missing.jpg", "no such file");
    std::fs::write(d("notes.txt"), "plain text").unwrap();
    assert_clean_failure(&tessera(&["bake", &d("notes.txt"), "-o", &out]), "notes.txt", "unsupported");
    let o = tessera(&["bake", "--generate", "0x100", "-o", &out]);
    assert_clean_failure(&o, "out.tsa", "empty");
    let o = tessera(&["bake", "--generate", "2000000x10", "-o", &out]);
    assert_clean_failure(&o, "out.tsa", "exceeds");
    assert!(!Path::new(&out).exists(), "no atlas is left behind by a failed bake");

    std::fs::write(d("garbage.tsa"), vec![0x5au8; 4000]).unwrap();
    assert_clean_failure(&tessera(&["inspect", &d("garbage.tsa")]), "garbage.tsa", "not a tessera atlas");
    assert_clean_failure(&tessera(&["verify", &d("absent.tsa")]), "absent.tsa", "no such file");

    let o = tessera(&["bake", "--generate", "300x200", "-o", &d("v.tsa")]);
    assert!(o.status.success());
    let mut bytes = std::fs::read(d("v.tsa")).unwrap();
    bytes[8] = 9;
    std::fs::write(d("v9.tsa"), &bytes).unwrap();
    assert_clean_failure(&tessera(&["verify", &d("v9.tsa")]), "v9.tsa", "version 9");
}

/// A one-triangle glTF whose material's base colour is `texture` (relative to the glTF).
fn triangle_gltf(dir: &Path, texture: &str) -> PathBuf {
    let mut bin = Vec::new();
    for v in [0.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0] {
        bin.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(dir.join("tri.bin"), bin).unwrap();
    let gltf = serde_json::json!({
        "asset": {"version": "2.0"},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0}, "material": 0}]}],
        "materials": [{"name": "stone", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}],
        "textures": [{"source": 0}],
        "images": [{"uri": texture}],
        "buffers": [{"uri": "tri.bin", "byteLength": 36}],
        "bufferViews": [{"buffer": 0, "byteLength": 36}],
        "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                       "min": [0.0, 0.0, 0.0], "max": [1.0, 1.0, 0.0]}]
    });
    let path = dir.join("tri.gltf");
    std::fs::write(&path, serde_json::to_vec(&gltf).unwrap()).unwrap();
    path
}

#[test]
fn gltf_bake_writes_a_stacked_atlas_and_names_a_missing_texture() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scene.tsa");
    let gltf = triangle_gltf(dir.path(), "stone_albedo.png");
    let o = tessera(&["bake", "--gltf", gltf.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_clean_failure(&o, "stone_albedo.png", "not found");
    assert!(stderr(&o).contains("stone"), "names the material: {}", stderr(&o));
    assert!(!out.exists(), "no atlas is left behind");

    image::RgbaImage::from_pixel(64, 32, image::Rgba([90, 120, 30, 255]))
        .save(dir.path().join("stone_albedo.png"))
        .unwrap();
    let o = tessera(&["bake", "--gltf", gltf.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("baked 1 material(s) in 1 rectangle(s)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("scene.scene.json"), "{}", stdout(&o));
    let o = tessera(&["inspect", out.to_str().unwrap(), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["stacked"], true);
    assert_eq!(j["layers"].as_array().unwrap().len(), 3);
}

/// Whether the atlas at `out` is stacked, and its layer count, from `inspect --json`.
fn stacked_layers(out: &Path) -> (bool, usize) {
    let o = tessera(&["inspect", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (j["stacked"] == true, j["layers"].as_array().unwrap().len())
}

#[test]
fn a_bake_is_reused_only_over_its_own_output() {
    let dir = tempfile::tempdir().unwrap();
    let crop = dir.path().join("crop.png");
    image::RgbaImage::from_fn(200, 100, |x, y| image::Rgba([x as u8, y as u8, 80, 255])).save(&crop).unwrap();
    image::RgbaImage::from_pixel(64, 32, image::Rgba([90, 120, 30, 255]))
        .save(dir.path().join("stone_albedo.png"))
        .unwrap();
    let gltf = triangle_gltf(dir.path(), "stone_albedo.png");
    let out = dir.path().join("out.tsa");
    let o_path = out.to_str().unwrap();
    let image_bake = || tessera(&["bake", crop.to_str().unwrap(), "-o", o_path]);
    let gltf_bake = || tessera(&["bake", "--gltf", gltf.to_str().unwrap(), "-o", o_path]);
    let reused = |o: &Output| {
        assert!(o.status.success(), "{}", stderr(o));
        stdout(o).contains("up to date")
    };

    let o = image_bake();
    assert!(!reused(&o) && stdout(&o).contains("baked 1 layer(s)"), "{}", stdout(&o));
    assert!(reused(&image_bake()), "same image, same options");
    assert_eq!(stacked_layers(&out), (false, 1));

    let o = gltf_bake();
    assert!(!reused(&o) && stdout(&o).contains("baked 1 material(s)"), "{}", stdout(&o));
    assert_eq!(stacked_layers(&out), (true, 3));

    // The glTF bake replaced the image's atlas: baking the image again must bake.
    let o = image_bake();
    assert!(!reused(&o), "the glTF atlas was taken for the image's bake: {}", stdout(&o));
    assert!(stdout(&o).contains("baked 1 layer(s)"), "{}", stdout(&o));
    assert_eq!(stacked_layers(&out), (false, 1));

    // And the other way round; a scene bake is reused over its own output too.
    assert!(!reused(&gltf_bake()));
    assert!(reused(&gltf_bake()));
    assert_eq!(stacked_layers(&out), (true, 3));

    // Another option, or an atlas replaced by another program, bakes again.
    let o = tessera(&["bake", crop.to_str().unwrap(), "-o", o_path, "--tile-size", "64"]);
    assert!(!reused(&o));
    assert!(reused(&tessera(&["bake", crop.to_str().unwrap(), "-o", o_path, "--tile-size", "64"])));
    std::fs::copy(dir.path().join("stone_albedo.png"), &out).unwrap();
    assert!(!reused(&tessera(&["bake", crop.to_str().unwrap(), "-o", o_path, "--tile-size", "64"])));
    // A corrupt stamp is a stale one, not an error.
    std::fs::write(dir.path().join("out.tsa.bake"), b"\xff\x00 not a stamp").unwrap();
    assert!(!reused(&tessera(&["bake", crop.to_str().unwrap(), "-o", o_path, "--tile-size", "64"])));
}

/// `tessera demo` (small here: a generated 4096² texture, 64×64 frames) measures and
/// reports the pool's share of the fully resident size first, in the report and in
/// `scale.json`, and says why there is no reference when none is built.
#[test]
fn demo_report_leads_with_the_pool_share_of_the_resident_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .env("TESSERA_CACHE", dir.path().join("cache"))
        .args(["demo", "--scene", "builtin", "--texture", "4096x4096", "--pool-mib", "4"])
        .args(["--frames", "4", "--size", "96x64", "--every", "100", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let scale: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scale.json")).unwrap()).unwrap();
    // 4096² RGBA8 with its 6 mips: 4096² × 4 × (1 + 1/4 + … + 1/1024) bytes.
    let resident: u64 = (0..6).map(|m| (4096u64 >> m) * (4096u64 >> m) * 4).sum();
    assert_eq!(scale["resident_rgba8_bytes"], resident, "{scale}");
    let pool = scale["pool_bytes"].as_u64().unwrap();
    assert!(pool > 0 && pool <= 4 << 20, "{scale}");
    let ratio = scale["ratio"].as_f64().unwrap();
    assert!((ratio - resident as f64 / pool as f64).abs() < 1e-6 && ratio > 16.0, "{scale}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let first = report.lines().find(|l| l.starts_with("**")).unwrap();
    assert!(first.contains(&format!("1/{:.0}", ratio)) && first.contains("4096x4096"), "{report}");
    assert!(scale["no_reference"].is_null(), "a 4096² reference fits every GPU: {scale}");
    assert!(report.contains("PSNR"), "{report}");
    // The motion figures: blurry pixels (feedback through the colour target) and latency.
    assert!(report.contains("pixels shown coarser than wanted") && report.contains("% over "), "{report}");
    assert!(report.contains("feedback read back "), "{report}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("frames/stats.json")).unwrap()).unwrap();
    let shares: Vec<f64> =
        stats["frames"].as_array().unwrap().iter().filter_map(|f| f["coarse_pixel_share"].as_f64()).collect();
    assert!(!shares.is_empty() && shares.iter().all(|s| (0.0..=1.0).contains(s)), "{shares:?}");
}

/// The `job: done/total tiles` counts of the progress lines of `job` in `err`.
fn progress_counts(err: &str, job: &str) -> Vec<(u64, u64)> {
    err.lines()
        .filter_map(|l| l.strip_prefix(&format!("{job}: ")))
        .filter_map(|rest| {
            let (done, total) = rest.split(' ').next()?.split_once('/')?;
            Some((done.parse().ok()?, total.parse().ok()?))
        })
        .collect()
}

/// A bake whose stderr is not a terminal still says how far it is: lines of progress whose
/// counts never go down, the last at 100%; and so does `verify`.
#[test]
fn a_piped_bake_prints_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = dir.path().join("g.tsa");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .env("TESSERA_PROGRESS_SECONDS", "0.01")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    for (job, err) in [
        ("bake", run(&["bake", "--generate", "4096x4096", "-o", atlas.to_str().unwrap()])),
        ("verify", run(&["verify", atlas.to_str().unwrap()])),
    ] {
        let counts = progress_counts(&err, job);
        assert!(counts.len() >= 2, "want progress lines of {job}, got: {err}");
        assert!(counts.windows(2).all(|w| w[0].0 <= w[1].0), "{job}: counts go down: {counts:?}");
        let (done, total) = *counts.last().unwrap();
        assert!(done == total && total > 0, "{job}: last line short of the total: {counts:?}");
        let last = err.lines().rfind(|l| l.starts_with(&format!("{job}: "))).unwrap();
        assert!(last.contains("(100.0%)") && last.contains("tiles/s"), "{last}");
        assert_eq!(err.matches("(100.0%)").count(), 1, "one line at 100%: {err}");
        assert!(!err.contains('\u{1b}'), "terminal codes in a piped log: {err:?}");
    }
}

/// `bake --grid 2x2` stitches four PNGs into one layer of their joint size; a wrong count
/// or mismatched sizes are one-line errors naming what is wrong.
#[test]
fn grid_of_pngs_bakes_as_one_layer() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    // Columns 150 and 90 wide, rows 100 and 70 high.
    let names = ["A1.png", "B1.png", "A2.png", "B2.png"];
    for (name, (w, h)) in names.iter().zip([(150, 100), (90, 100), (150, 70), (90, 70)]) {
        image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, name.as_bytes()[0]]))
            .save(d(name))
            .unwrap();
    }
    let out = d("grid.tsa");
    let mut args = vec!["bake".to_string(), "--grid".into(), "2x2".into()];
    args.extend(names.iter().map(|n| d(n)));
    args.extend(["-o".into(), out.clone()]);
    let o = tessera(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("baked 1 layer(s)"), "{}", stdout(&o));
    let o = tessera(&["inspect", &out, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["layers"].as_array().unwrap().len(), 1);
    assert_eq!((j["layers"][0]["width"].as_u64(), j["layers"][0]["height"].as_u64()), (Some(240), Some(170)));
    assert_eq!(j["layers"][0]["name"], "A1");
    assert!(tessera(&["verify", &out]).status.success());

    let o =
        tessera(&["bake", "--grid", "2x2", &d("A1.png"), &d("B1.png"), &d("A2.png"), "-o", &d("three.tsa")]);
    assert_clean_failure(&o, "2x2 grid", "needs 4 images, 3 given");
    let o = tessera(&["bake", "--grid", "2x1", &d("A1.png"), &d("A2.png"), "-o", &d("bad.tsa")]);
    assert_clean_failure(&o, "A2.png", "equal heights");
}

#[test]
fn bake_bench_reports_the_bake_against_the_encoder_alone() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let o = tessera(&[
        "bake-bench",
        "--generate",
        "600x300",
        "--codecs",
        "lz4,raw",
        "--threads",
        "1,2",
        "--json",
        json.to_str().unwrap(),
        "--work-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = j["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "two codecs x two thread counts: {j}");
    // 600x300 in 128-texel tiles: 5x3 + 3x2 + 2x1 + 1 over four mips.
    assert_eq!(j["tiles"], 24);
    for run in runs {
        let (enc, bake) =
            (run["encode_only_tiles_per_s"].as_f64().unwrap(), run["bake_tiles_per_s"].as_f64().unwrap());
        assert!(enc > 0.0 && bake > 0.0, "{run}");
        let of_ceiling = run["bake_of_ceiling"].as_f64().unwrap();
        assert!((of_ceiling - bake / enc).abs() < 1e-9, "{run}");
    }
    assert!(stdout(&o).contains("of ceiling"), "{}", stdout(&o));
    let o = tessera(&["bake-bench", "--generate", "64x64", "--threads", "0"]);
    assert!(!o.status.success() && stderr(&o).contains("thread counts start at 1"), "{}", stderr(&o));
}

#[test]
fn a_ktx2_bakes_in_the_colour_space_it_tags() {
    use tessera_core::format::atlas::ColorSpace;
    use tessera_core::format::basis::BasisMode;
    use tessera_core::format::codec::EncodeOptions;
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let texels: Vec<u8> = (0..64u32 * 64 * 4).map(|i| (i * 7 % 251) as u8 | 1).collect();
    let opts = EncodeOptions { color: ColorSpace::Linear, ..EncodeOptions::default() };
    let ktx2 = tessera_core::bake::ktx2::encode_ktx2(&texels, 64, 64, BasisMode::Uastc, &opts).unwrap();
    std::fs::write(d("normal.ktx2"), ktx2).unwrap();
    let o = tessera(&["bake", &d("normal.ktx2"), "-o", &d("n.tsa")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tessera(&["inspect", &d("n.tsa"), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["layers"][0]["color"], "linear", "{j}");
    let o = tessera(&["bake", &d("normal.ktx2"), "--color", "srgb", "-o", &d("wrong.tsa")]);
    assert_clean_failure(&o, "normal.ktx2", "tags its texels linear");
    assert!(!dir.path().join("wrong.tsa").exists());
}

#[test]
fn a_sharded_bake_merges_into_the_single_bake() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let img = d("in.png");
    image::RgbaImage::from_fn(700, 300, |x, y| image::Rgba([x as u8, y as u8, (x ^ y) as u8, 255]))
        .save(&img)
        .unwrap();
    let common = ["--tile-size", "64", "--codec", "lz4"];
    let run = |extra: &[&str], env: Option<(&str, &str)>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
        c.arg("bake").arg(&img).args(common).args(extra);
        for v in ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AWS_BATCH_JOB_ARRAY_INDEX"] {
            c.env_remove(v);
        }
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let o = run(&["-o", &d("whole.tsa")], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = d("sharded.tsa");
    let o = run(&["-o", &out, "--shard", "0/3"], None);
    assert!(o.status.success() && stdout(&o).contains("baked shard 0/3"), "{}", stderr(&o));
    let o = run(&["-o", &out, "--shard", "3"], Some(("SLURM_ARRAY_TASK_ID", "1")));
    assert!(o.status.success() && stdout(&o).contains("baked shard 1/3"), "{}", stderr(&o));
    let o = run(&["-o", &out, "--merge"], None);
    assert_clean_failure(&o, "sharded.tsa.shards", "1 of 3 parts missing: 2-of-3.part");
    // What is left to run, and a plan.
    let o = run(&["-o", &out, "--status"], None);
    let text = stdout(&o);
    assert!(o.status.code() == Some(1) && text.contains("2/3  missing"), "{text}");
    assert!(text.contains("0/3  done") && text.contains("to (re)run: --shard 2/3"), "{text}");
    let o = run(&["-o", &out, "--status", "--quality", "64"], None);
    assert!(stdout(&o).contains("0/3  stale    baked from other inputs"), "{}", stdout(&o));
    let o = run(&["-o", &out, "--plan", "3"], None);
    let text = stdout(&o);
    assert!(o.status.success() && text.contains("2/3") && text.contains("per tile on one core"), "{text}");
    let o = run(&["-o", &out, "--shard", "3"], None);
    assert!(!o.status.success() && stderr(&o).contains("--shard 3: no shard index"), "{}", stderr(&o));
    let o = run(&["-o", &out, "--shard", "3"], Some(("JOB_COMPLETION_INDEX", "2")));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["-o", &out, "--status"], None);
    assert!(o.status.success() && stdout(&o).contains("all 3 parts done"), "{}", stdout(&o));
    // The default merge: a split atlas, tile for tile the single bake.
    let o = run(&["-o", &out, "--merge"], None);
    assert!(o.status.success() && stdout(&o).contains("into split atlas"), "{}", stderr(&o));
    assert_same_tiles(&d("whole.tsa"), &out);
    assert!(dir.path().join("sharded.tsa.shards").exists(), "a split atlas keeps its parts");
    let o = tessera(&["verify", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    // One file: byte for byte the single bake; the parts go.
    let o = run(&["-o", &out, "--merge", "--one-file"], None);
    assert!(o.status.success() && stdout(&o).contains("merged 3 shard parts"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(d("whole.tsa")).unwrap());
    assert!(!dir.path().join("sharded.tsa.shards").exists(), "parts deleted after the merge");
    // The merge recorded the stamp: the same bake is now up to date.
    let o = run(&["-o", &out], None);
    assert!(stdout(&o).contains("up to date"), "{}", stdout(&o));
}

/// Every tile of the atlases `a` and `b` has the same codec, length, CRC-32 and bytes.
fn assert_same_tiles(a: &str, b: &str) {
    let (a, b) = (tessera::core::Atlas::open(a).unwrap(), tessera::core::Atlas::open(b).unwrap());
    assert_eq!(a.layers(), b.layers());
    for (i, layer) in a.layers().iter().enumerate() {
        for t in layer.layout.tiles(i as u16) {
            let (ea, eb) = (a.entry(t).unwrap(), b.entry(t).unwrap());
            assert_eq!((ea.codec, ea.length, ea.crc32), (eb.codec, eb.length, eb.crc32), "{t}");
            assert_eq!(a.read_tile(t).unwrap(), b.read_tile(t).unwrap(), "{t}");
        }
    }
}

#[test]
fn a_killed_shard_rerun_alone_gives_the_same_atlas() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let common = ["--generate", "2048x2048", "--tile-size", "128", "--codec", "etc1s"];
    let bake = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
        c.arg("bake").args(common).args(extra);
        c
    };
    let o = bake(&["-o", &d("whole.tsa")]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = d("farm.tsa");
    for i in [0, 1, 2] {
        let o = bake(&["-o", &out, "--shard", &format!("{i}/4")]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // Shard 3 killed (SIGKILL: no handler runs) while it encodes into its spool.
    let shards = dir.path().join("farm.tsa.shards");
    let mut child = bake(&["-o", &out, "--shard", "3/4", "--threads", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let spooling = || {
        std::fs::read_dir(&shards)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".3-of-4."))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !spooling() {
        assert!(child.try_wait().unwrap().is_none(), "shard 3 ended before it could be killed");
        assert!(std::time::Instant::now() < deadline, "shard 3 never started its part");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!shards.join("3-of-4.part").exists() && spooling(), "a killed shard leaves only its spool");
    let o = bake(&["-o", &out, "--merge"]).output().unwrap();
    assert_clean_failure(&o, "farm.tsa.shards", "1 of 4 parts missing: 3-of-4.part");
    // Rerun alone: it sweeps its own leftovers and writes its part.
    let o = bake(&["-o", &out, "--shard", "3/4"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!spooling(), "the rerun removed the killed run's spool");
    let o = bake(&["-o", &out, "--merge"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tiles(&d("whole.tsa"), &out);
    let o = bake(&["-o", &out, "--merge", "--one-file"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(d("whole.tsa")).unwrap());
}

/// Values outside what a command can do are refused by the argument parser, naming the
/// range, instead of aborting (staging memory), being ignored (frames) or contradicting
/// `--help` (border).
#[test]
fn out_of_range_limits_are_refused_with_their_range() {
    for (args, what) in [
        (&["capture", "--frames", "0"][..], "0 is not in 1.."),
        (&["demo", "--frames", "0"][..], "0 is not in 1.."),
        (
            &["bake", "--generate", "64x64", "--border", "0", "-o", "/nonexistent/x.tsa"][..],
            "0 is not in 1..=512",
        ),
        (&["capture", "--staging-mib", "99999999"][..], "99999999 is not in 0..=2048"),
    ] {
        let o = tessera(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(what), "{args:?}: {}", stderr(&o));
    }
}

/// A damaged index page: `inspect` says its sizes leave tiles out and exits 1 (it printed
/// "0.00 MiB on disk" and exited 0), and `verify` counts bad tiles out of the atlas'
/// tiles (it said 342 of 341).
#[test]
fn a_damaged_index_fails_inspect_and_verify_counts_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.tsa");
    let p = path.to_str().unwrap();
    let o = tessera(&["bake", "--generate", "2048x2048", "-o", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut bytes = std::fs::read(&path).unwrap();
    let index_offset = u64::from_le_bytes(bytes[32..40].try_into().unwrap()) as usize;
    bytes[index_offset + 30] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let o = tessera(&["inspect", p]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("341 of 341 tiles' index entries could not be read"), "{}", stderr(&o));
    let o = tessera(&["verify", p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("341 bad tile(s) of 341"), "{}", stderr(&o));
}
