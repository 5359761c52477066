//! The viewer in a real window under Xvfb: 120 frames along a camera path on a small
//! baked atlas, a screenshot with and without the overlay; the scene and the overlay
//! must both be drawn and the process must exit 0.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::core::atlas::{ColorSpace, Wrap};
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::source::Generated;

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
    bake(vec![input], &out, &BakeOptions::default(), &indicatif::ProgressBar::hidden())
        .expect("baking the test atlas");
    out
}

/// Runs the viewer for 120 frames and returns the screenshot's RGBA pixels.
fn screenshot(dir: &Path, atlas: &Path, name: &str, extra: &[&str]) -> image::RgbaImage {
    let png = dir.join(name);
    let runtime = dir.join("xdg-runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let size = format!("{}x{}", SIZE.0, SIZE.1);
    let mut cmd = Command::new("xvfb-run");
    cmd.args(["-a", "-s", "-screen 0 1280x1024x24"])
        .arg(env!("CARGO_BIN_EXE_tessera-viewer"))
        .arg(atlas)
        .args(["--size", &size, "--frames", "120", "--camera", "flyover", "--no-vsync", "--screenshot"])
        .arg(&png)
        .args(extra)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("TESSERA_CACHE", dir.join("cache"));
    // Lavapipe's GL path drops fragment storage writes; Vulkan is the one to test.
    if std::env::var_os("WGPU_BACKEND").is_none() {
        cmd.env("WGPU_BACKEND", "vulkan");
    }
    let out = cmd.output().expect("running xvfb-run");
    assert!(
        out.status.success(),
        "tessera-viewer {extra:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let img = image::open(&png).unwrap_or_else(|e| panic!("reading {}: {e}", png.display())).to_rgba8();
    assert_eq!(img.dimensions(), SIZE, "the screenshot has the window's size");
    img
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

#[test]
fn viewer_draws_scene_and_overlay_under_xvfb() {
    require_xvfb();
    let dir = tempfile::tempdir().expect("temp dir");
    let atlas = small_atlas(dir.path());
    let with = screenshot(dir.path(), &atlas, "with.png", &[]);
    let without = screenshot(dir.path(), &atlas, "without.png", &["--no-overlay"]);
    let (w, h) = SIZE;

    // The overlay is a panel on the right.
    let overlay = mean_diff(&with, &without, w - 300, w);
    assert!(overlay > 10.0, "the overlay region barely differs with and without the overlay ({overlay:.2})");

    // The scene, left of the panel, is drawn (not one flat colour) in both.
    for (name, img) in [("with overlay", &with), ("without overlay", &without)] {
        let mut colours = std::collections::HashSet::new();
        let (mut lo, mut hi) = (255u8, 0u8);
        for y in 0..h {
            for x in 0..w - 360 {
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
}
