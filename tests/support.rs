//! Shared helpers of the GPU integration tests: a device that fails with an install
//! hint, atlas baking, and image comparison that writes actual/expected/diff PNGs.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)] // Test support fails loudly by design.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tessera::GpuContext;
use tessera::capture::write_png;
use tessera_core::NoProgress;
use tessera_core::bake::source::RowSource;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::compare::{compare, diff_image};
use tessera_core::format::atlas::{ColorSpace, Wrap};
use tessera_core::format::codec::Codec;

/// The headless GPU context, or a panic that says how to install a Vulkan driver.
pub fn gpu() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir = std::env::temp_dir().join("tessera-xdg");
            let _ = std::fs::create_dir_all(&dir);
            // SAFETY: set once, before any thread of this test binary reads the environment.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
        match GpuContext::headless() {
            Ok(ctx) => ctx,
            Err(e) => panic!(
                "GPU tests need a Vulkan driver and none was found: {e}\n\
                 On Debian: sudo apt-get install mesa-vulkan-drivers libvulkan1 (scripts/test does this)"
            ),
        }
    })
}

/// Where tests write their output images.
pub fn output_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-output").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Bakes `source` into `dir/name.tsa` with lz4 (lossless).
pub fn bake_source(dir: &Path, name: &str, source: impl RowSource + 'static) -> PathBuf {
    let path = dir.join(format!("{name}.tsa"));
    let input = BakeInput {
        name: name.into(),
        source: Box::new(source),
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
        regions: Vec::new(),
    };
    bake(vec![input], &path, &BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() }, &NoProgress)
        .unwrap();
    path
}

/// The real photograph fetched by `assets/fetch-data.sh` (Blue Marble, 5400x2700).
pub fn real_jpeg() -> PathBuf {
    let dir = tessera_core::bake::source::data_dir();
    let p = dir.join("bmng.jpg");
    assert!(p.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", p.display());
    p
}

/// Writes actual, expected and diff PNGs for a failed comparison; returns the folder.
pub fn write_failure(test: &str, size: (u32, u32), actual: &[u8], expected: &[u8]) -> PathBuf {
    let dir = output_dir(test);
    write_png(&dir.join("actual.png"), size, actual).unwrap();
    write_png(&dir.join("expected.png"), size, expected).unwrap();
    write_png(&dir.join("diff.png"), size, &diff_image(actual, expected)).unwrap();
    dir
}

/// Compares `actual` with the committed golden image `tests/golden/{name}.png` (PSNR
/// at least `min_psnr_db`). `TESSERA_UPDATE_GOLDEN=1` rewrites the golden instead.
pub fn check_golden(name: &str, size: (u32, u32), actual: &[u8], min_psnr_db: f64) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(format!("{name}.png"));
    if std::env::var_os("TESSERA_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        write_png(&golden, size, actual).unwrap();
        return;
    }
    assert!(
        golden.exists(),
        "golden image {} is missing; create it with TESSERA_UPDATE_GOLDEN=1 and review it",
        golden.display()
    );
    let expected = image::open(&golden).unwrap().into_rgba8();
    assert_eq!(expected.dimensions(), size, "golden {name} has another size");
    let d = compare(actual, expected.as_raw());
    if d.psnr_db < min_psnr_db {
        let dir = write_failure(&format!("golden-{name}"), size, actual, expected.as_raw());
        panic!(
            "{name}: PSNR {:.2} dB < {min_psnr_db} dB (max error {}); actual/expected/diff PNGs in {}",
            d.psnr_db,
            d.max_error,
            dir.display()
        );
    }
}
