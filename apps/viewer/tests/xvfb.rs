//! The viewer in a real window under Xvfb: 120 frames along a camera path on a small
//! baked atlas, a screenshot with and without the overlay and one with the tile-border
//! debug view; the scene and the overlay must both be drawn and the process must exit 0.
//! A second test opens an image, which the viewer bakes on its background thread
//! before the first scene frame; a third opens the CC0 dungeon by name, baked fresh
//! into an empty cache and drawn along its walk.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::core::NoProgress;
use tessera::core::bake::source::Generated;
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::format::atlas::{ColorSpace, Wrap};

const SIZE: (u32, u32) = (800, 500);

fn require_xvfb() {
    let found = Command::new("xvfb-run").arg("--help").output().is_ok();
    assert!(
        found,
        "xvfb-run is missing, so the viewer cannot open a window: install it with \
         `sudo apt-get install xvfb xauth` (scripts/test installs it)"
    );
}

fn small_atlas(dir: &Path) -> PathBuf {
    let out = dir.join("small.tsa");
    let input = BakeInput {
        name: "demo".into(),
        source: Box::new(Generated::new(2048, 1024)),
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
        regions: Vec::new(),
    };
    bake(vec![input], &out, &BakeOptions::default(), &NoProgress).expect("baking the test atlas");
    out
}

/// Runs the viewer on `input` under Xvfb, screenshot mode, 120 frames along `flyover`
/// at [`SIZE`], writing `png`.
fn run_viewer(dir: &Path, input: &Path, png: &Path, extra: &[&str]) -> std::process::Output {
    let size = format!("{}x{}", SIZE.0, SIZE.1);
    let mut args = vec!["--size", &size, "--frames", "120", "--camera", "flyover"];
    args.extend_from_slice(extra);
    run_viewer_with(dir, input.as_os_str(), png, &args)
}

/// Runs the viewer on `input` (a path or a scene name) under Xvfb with `args`, screenshot
/// mode, writing `png`, with `dir/cache` as the cache folder.
fn run_viewer_with(dir: &Path, input: &std::ffi::OsStr, png: &Path, args: &[&str]) -> std::process::Output {
    let runtime = dir.join("xdg-runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let mut cmd = Command::new("xvfb-run");
    cmd.args(["-a", "-s", "-screen 0 1280x1024x24"])
        .arg(env!("CARGO_BIN_EXE_tessera-viewer"))
        .arg(input)
        .args(["--no-vsync", "--screenshot"])
        .arg(png)
        .args(args)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("TESSERA_CACHE", dir.join("cache"));
    // Lavapipe's GL path drops fragment storage writes; Vulkan is the one to test.
    if std::env::var_os("WGPU_BACKEND").is_none() {
        cmd.env("WGPU_BACKEND", "vulkan");
    }
    cmd.output().expect("running xvfb-run")
}

/// Runs the viewer on `input` for 120 frames and returns the screenshot's RGBA pixels.
fn screenshot(dir: &Path, input: &Path, name: &str, extra: &[&str]) -> image::RgbaImage {
    let png = dir.join(name);
    let out = run_viewer(dir, input, &png, extra);
    assert!(
        out.status.success(),
        "tessera-viewer {extra:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("screenshot after 120 frames"), "no screenshot line in:\n{stdout}");
    let img = image::open(&png).unwrap_or_else(|e| panic!("reading {}: {e}", png.display())).to_rgba8();
    assert_eq!(img.dimensions(), SIZE, "the screenshot has the window's size");
    img
}

/// The file names in the test's cache folder.
fn cached(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("cache"))
        .expect("the cache folder exists")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// Mean absolute difference per channel over columns `x0..x1`.
fn mean_diff(a: &image::RgbaImage, b: &image::RgbaImage, x0: u32, x1: u32) -> f64 {
    let mut sum = 0u64;
    let mut n = 0u64;
    for y in 0..a.height() {
        for x in x0..x1 {
            let (p, q) = (a.get_pixel(x, y).0, b.get_pixel(x, y).0);
            sum += (0..3).map(|c| u64::from(p[c].abs_diff(q[c]))).sum::<u64>();
            n += 3;
        }
    }
    sum as f64 / n as f64
}

/// Width of the overlay panel on the right, with a margin.
const OVERLAY_WIDTH: u32 = 360;

/// Asserts that the scene region (left of the overlay panel) is drawn: many colours and
/// a wide luminance range, not one flat colour.
fn assert_scene_drawn(name: &str, img: &image::RgbaImage) {
    let (w, h) = img.dimensions();
    let mut colours = std::collections::HashSet::new();
    let (mut lo, mut hi) = (255u8, 0u8);
    for y in 0..h {
        for x in 0..w - OVERLAY_WIDTH {
            let p = img.get_pixel(x, y).0;
            colours.insert([p[0], p[1], p[2]]);
            let l = ((u32::from(p[0]) + u32::from(p[1]) + u32::from(p[2])) / 3) as u8;
            lo = lo.min(l);
            hi = hi.max(l);
        }
    }
    assert!(
        colours.len() > 50 && hi - lo > 64,
        "{name}: the scene region looks uniform ({} colours, luminance {lo}..{hi})",
        colours.len()
    );
}

/// Fraction of the pixels in columns `x0..x1` where some channel differs by more than 64.
fn changed_fraction(a: &image::RgbaImage, b: &image::RgbaImage, x0: u32, x1: u32) -> f64 {
    let mut changed = 0u64;
    for y in 0..a.height() {
        for x in x0..x1 {
            let (p, q) = (a.get_pixel(x, y).0, b.get_pixel(x, y).0);
            changed += u64::from((0..3).any(|c| p[c].abs_diff(q[c]) > 64));
        }
    }
    changed as f64 / (f64::from(a.height()) * f64::from(x1 - x0))
}

#[test]
fn viewer_draws_scene_and_overlay_under_xvfb() {
    require_xvfb();
    let dir = tempfile::tempdir().expect("temp dir");
    let atlas = small_atlas(dir.path());
    let with = screenshot(dir.path(), &atlas, "with.png", &[]);
    let without = screenshot(dir.path(), &atlas, "without.png", &["--no-overlay"]);
    let w = SIZE.0;

    // The overlay is a panel on the right.
    let overlay = mean_diff(&with, &without, w - 300, w);
    assert!(overlay > 10.0, "the overlay region barely differs with and without the overlay ({overlay:.2})");

    // The scene, left of the panel, is drawn (not one flat colour) in both.
    for (name, img) in [("with overlay", &with), ("without overlay", &without)] {
        assert_scene_drawn(name, img);
    }

    // The tile-border debug view draws lines over the scene: many pixels change
    // strongly, while the same view without it changes few between runs.
    let borders = screenshot(dir.path(), &atlas, "borders.png", &["--no-overlay", "--debug-view", "borders"]);
    assert_scene_drawn("tile borders", &borders);
    let scene = w - OVERLAY_WIDTH;
    let lines = changed_fraction(&borders, &without, 0, scene);
    let noise = changed_fraction(&with, &without, 0, scene);
    assert!(
        lines > 0.004 && lines > 4.0 * noise,
        "the tile-border view barely differs from the plain scene ({:.2}% of the pixels changed; {:.2}% between \
         two plain runs)",
        100.0 * lines,
        100.0 * noise
    );
}

#[test]
fn viewer_bakes_an_image_in_the_background_then_shows_it() {
    require_xvfb();
    let dir = tempfile::tempdir().expect("temp dir");
    // A 1536x768 image of coloured 64-texel checks: several mips, bakes in a moment.
    let png = dir.path().join("checks.png");
    let img = image::RgbaImage::from_fn(1536, 768, |x, y| {
        let on = (x / 64 + y / 64) % 2 == 0;
        let (r, g) = ((x * 255 / 1536) as u8, (y * 255 / 768) as u8);
        if on { image::Rgba([r, g, 200, 255]) } else { image::Rgba([40, 40, 40, 255]) }
    });
    img.save(&png).expect("writing the test image");
    let shot = screenshot(dir.path(), &png, "baked.png", &["--feedback-stride", "1"]);
    assert_scene_drawn("baked image", &shot);
    let baked = cached(dir.path());
    assert!(
        baked.iter().any(|n| n.starts_with("checks-") && n.ends_with(".tsa")),
        "no baked atlas in the cache folder: {baked:?}"
    );
    assert!(!baked.iter().any(|n| n.ends_with(".tmp")), "a partial bake was left behind: {baked:?}");
}

#[test]
fn viewer_fails_with_the_bake_error_when_nobody_can_see_the_window() {
    require_xvfb();
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("notes.jpg");
    std::fs::write(&bad, "not an image").expect("writing the bad input");
    let png = dir.path().join("never.png");
    let out = run_viewer(dir.path(), &bad, &png, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a failed bake in screenshot mode must fail the viewer");
    assert!(
        stderr.contains("notes.jpg is neither a Tessera atlas nor a readable image"),
        "the error names the file and the problem:\n{stderr}"
    );
    assert!(!png.exists(), "no screenshot without a scene");
    let left = cached(dir.path());
    assert!(!left.iter().any(|n| n.ends_with(".tsa") || n.ends_with(".tmp")), "bake output left: {left:?}");
}

/// Runs the viewer on the catalog scene `name` in `dir` for 40 frames of its `walk` path
/// at 640×360, checks that it succeeded and that its screenshot shows the scene drawn,
/// and returns its stdout.
fn walk_scene_by_name(dir: &Path, name: &str) -> String {
    let png = dir.join(format!("{name}.png"));
    let size = (640u32, 360u32);
    let size_arg = format!("{}x{}", size.0, size.1);
    let args = ["--size", &size_arg, "--frames", "40", "--camera", "walk"];
    let out = run_viewer_with(dir, name.as_ref(), &png, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tessera-viewer {name} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("screenshot after 40 frames"), "no screenshot line in:\n{stdout}");
    let img = image::open(&png).unwrap_or_else(|e| panic!("reading {}: {e}", png.display())).to_rgba8();
    assert_eq!(img.dimensions(), size, "the screenshot has the window's size");
    assert_scene_drawn(&format!("{name} walk"), &img);
    stdout
}

#[test]
fn viewer_opens_the_dungeon_by_name() {
    require_xvfb();
    let gltf = tessera::core::bake::source::data_dir().join("dungeon/level-dungeon.gltf");
    assert!(
        gltf.is_file(),
        "{} is missing: fetch the CC0 dungeon with `assets/fetch-data.sh --dungeon` (scripts/test does)",
        gltf.display()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let stdout = walk_scene_by_name(dir.path(), "dungeon");
    assert!(stdout.contains("baked dungeon"), "the empty cache did not make it bake:\n{stdout}");
    let scenes = dir.path().join("cache/scenes");
    for name in ["dungeon-lz4.tsa", "dungeon-lz4.scene.json"] {
        assert!(scenes.join(name).is_file(), "{name} is missing from {}", scenes.display());
    }
}

/// The runtime-virtual-texture terrain (issue 43) in the windowed viewer, opened by name:
/// nothing is baked (its layers are produced on the GPU), the camera presets are the
/// terrain's paths, and 40 frames walking show the lit relief.
#[test]
fn viewer_opens_the_terrain_by_name() {
    require_xvfb();
    let data = tessera::core::bake::source::data_dir();
    for need in ["etopo1.jpg", "dungeon", "castle"] {
        assert!(
            data.join(need).exists(),
            "{} is missing: run `assets/fetch-data.sh --dungeon --castle` (scripts/test does)",
            data.join(need).display()
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let stdout = walk_scene_by_name(dir.path(), "terrain");
    assert!(stdout.contains("camera presets (keys 1-4): walk, fly, cut, overview"), "{stdout}");
    let scenes = dir.path().join("cache/scenes");
    let baked: Vec<_> =
        std::fs::read_dir(&scenes).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(
        !baked.iter().any(|n| n.to_string_lossy().ends_with(".tsa")),
        "the terrain baked an atlas: {baked:?}"
    );
}

/// A GPU device lost mid-run (destroyed at frame 30 by a hidden testing flag): the
/// viewer closes its window and exits non-zero with one message naming the loss, no
/// panic and no message per frame.
#[test]
fn a_lost_device_exits_with_one_message() {
    require_xvfb();
    let dir = tempfile::tempdir().expect("tempdir");
    let atlas = small_atlas(dir.path());
    let png = dir.path().join("never.png");
    let out = run_viewer(dir.path(), &atlas, &png, &["--lose-device-at", "30"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must exit non-zero; stderr:\n{stderr}");
    assert!(!png.exists(), "no screenshot after the loss");
    assert!(!stderr.contains("panicked"), "no panic:\n{stderr}");
    let noise: Vec<_> =
        stderr.lines().filter(|l| l.contains(" WARN tessera") || l.contains(" ERROR ")).collect();
    assert!(noise.is_empty(), "nothing else about the loss: {noise:?}");
    let lines: Vec<_> = stderr.lines().filter(|l| l.contains("GPU device was lost")).collect();
    assert_eq!(lines.len(), 1, "one message:\n{stderr}");
    assert!(lines[0].starts_with("error: the GPU device was lost (destroyed)"), "{}", lines[0]);
}
