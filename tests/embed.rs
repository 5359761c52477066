//! The embedding example (`engine/render/examples/embed.rs`) run as a test on
//! lavapipe: a user pipeline and WGSL over `vt.wgsl`, driven by `begin` / `finish`,
//! whose last frame must match its golden image.

#[allow(dead_code, unreachable_pub)]
#[path = "../engine/render/examples/embed.rs"]
mod embed;

use tessera_tests::{check_golden, gpu};

#[test]
fn embed_example_last_frame_matches_its_golden() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = embed::bake_test_atlas(dir.path()).unwrap();
    let (pixels, stats) = embed::run(gpu(), &atlas).unwrap();
    assert!(stats.vram_counters.uploads > 0, "nothing streamed: {stats:?}");
    check_golden("embed-19", (640, 360), &pixels, 40.0);
}

/// The same program on a device the application created itself (`own_device`: plain
/// wgpu calls, then `GpuContext::from_parts`) renders the same frame.
#[test]
fn embed_example_on_the_applications_own_device_matches_the_same_golden() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = embed::bake_test_atlas(dir.path()).unwrap();
    let ctx = embed::own_device().unwrap_or_else(|e| {
        panic!(
            "{e:#}\nOn Debian: sudo apt-get install mesa-vulkan-drivers libvulkan1 (scripts/test does this)"
        )
    });
    assert!(ctx.instance.is_none(), "from_parts keeps the app's objects and makes no instance");
    let (pixels, _) = embed::run(&ctx, &atlas).unwrap();
    check_golden("embed-19", (640, 360), &pixels, 40.0);
}
