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

/// Misuse of the frame API that compiles is a clear error or state, never silence:
/// `resident_fraction` is `None` before feedback, frames dropped unfinished stop the
/// feedback and `feedback_stalled` says so (with a warning), finishing again clears it,
/// and out-of-range settings are refused by `new`. (Misuse that does not compile is
/// tested by the `compile_fail` examples on `VtFrame`.)
#[test]
fn frame_api_misuse_is_reported() {
    use std::sync::Arc;
    use tessera::{VirtualTextures, VtConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = tessera_tests::bake_source(
        dir.path(),
        "small",
        tessera::core::bake::source::Generated::new(512, 512),
    );
    let atlas = Arc::new(tessera::core::Atlas::open(&path).unwrap());
    let ctx = gpu();
    for (bad, what) in [
        (VtConfig { max_anisotropy: 16, ..VtConfig::default() }, "max_anisotropy 16"),
        (VtConfig { feedback_stride: 3, ..VtConfig::default() }, "feedback_stride 3"),
        (VtConfig { mip_bias: f32::NAN, ..VtConfig::default() }, "mip_bias NaN"),
        (VtConfig { debug_view: 9, ..VtConfig::default() }, "debug_view 9"),
        (VtConfig { pool_mib: 0, ..VtConfig::default() }, "pool_mib is 0"),
    ] {
        let e = VirtualTextures::new(ctx, atlas.clone(), bad).err().expect(what).to_string();
        assert!(e.contains(what), "{what}: {e}");
    }
    let mut vt = VirtualTextures::new(ctx, atlas, VtConfig { pool_mib: 4, ..VtConfig::default() }).unwrap();
    assert_eq!(vt.resident_fraction(), None, "no feedback yet");
    assert!(!vt.fully_resident());
    let frames = tessera::vt::FEEDBACK_STALL_FRAMES + 2;
    for _ in 0..frames {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let frame = vt.begin(ctx, &mut encoder);
        drop(frame); // never finished: its feedback is lost
    }
    assert!(vt.feedback_stalled(), "{frames} frames without feedback went unnoticed");
    assert_eq!(vt.resident_fraction(), None);
    for _ in 0..4 {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let frame = vt.begin(ctx, &mut encoder);
        frame.finish(ctx, encoder).unwrap();
        ctx.wait_idle().unwrap();
    }
    assert!(!vt.feedback_stalled(), "feedback arrives again once frames are finished");
    assert!(vt.resident_fraction().is_some());
}

/// A layer handle binds only for the virtual textures that made it: another one's is a
/// panic naming the mistake, not a wrong texture.
#[test]
#[should_panic(expected = "belongs to other virtual textures")]
fn a_layer_of_other_virtual_textures_is_refused() {
    use std::sync::Arc;
    use tessera::{VirtualTextures, VtConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = tessera_tests::bake_source(
        dir.path(),
        "small",
        tessera::core::bake::source::Generated::new(256, 256),
    );
    let atlas = Arc::new(tessera::core::Atlas::open(&path).unwrap());
    let config = VtConfig { pool_mib: 2, loader_threads: 1, ..VtConfig::default() };
    let a = VirtualTextures::new(gpu(), atlas.clone(), config.clone()).unwrap();
    let b = VirtualTextures::new(gpu(), atlas, config).unwrap();
    assert!(a.layer(1).is_none() && a.layer_named("nope").is_none());
    let layer = b.layer(0).unwrap();
    let _ = a.bind_group(layer);
}
