//! Device loss on lavapipe: after `Device::destroy`, the next frame, readback, wait and
//! capture return `RenderError::DeviceLost` promptly (no hang, no panic), and
//! `GpuContext::lost` says why; validation errors still panic before a loss.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera::lost::LostCause;
use tessera::{GpuContext, RenderError, VirtualTextures, VtConfig};
use tessera_core::Atlas;
use tessera_core::bake::source::Generated;
use tessera_core::scene::camera::CameraPath;
use tessera_tests::{bake_source, own_gpu};
use tessera_tools::capture::{CaptureConfig, capture};
use tessera_tools::drawer::Drawer;
use tessera_tools::drawer_for;
use tessera_tools::scene::OffscreenTarget;

/// Everything after the loss must be over within this (a hang fails the test).
const PROMPT: Duration = Duration::from_secs(30);

/// Runs `test` on its own thread, which calls its argument right after destroying the
/// device; fails if the test has not returned within [`PROMPT`] of that (a hang).
fn watched(test: impl FnOnce(&dyn Fn()) + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let done = tx.clone();
    let worker = std::thread::spawn(move || {
        test(&|| {
            let _ = tx.send(false);
        });
        let _ = done.send(true);
    });
    // Setup (baking, the device) is not what is watched.
    let mut destroyed = false;
    loop {
        let wait = if destroyed { PROMPT } else { Duration::from_secs(600) };
        match rx.recv_timeout(wait) {
            Ok(true) => break,
            Ok(false) => destroyed = true,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!("no answer within {wait:?} (destroyed: {destroyed}): {e}"),
        }
    }
    if let Err(panic) = worker.join() {
        std::panic::resume_unwind(panic);
    }
}

struct Frames {
    vt: VirtualTextures,
    drawer: Box<dyn Drawer>,
    target: OffscreenTarget,
    camera: CameraPath,
}

impl Frames {
    fn new(ctx: &GpuContext, atlas: &Path) -> Self {
        let atlas = Arc::new(Atlas::open(atlas).unwrap());
        let vt = VirtualTextures::new(ctx, atlas, VtConfig { pool_mib: 8, ..VtConfig::default() }).unwrap();
        let drawer = drawer_for(ctx, &vt, None).unwrap();
        let target = OffscreenTarget::new(&ctx.device, 160, 90);
        Self { vt, drawer, target, camera: CameraPath::preset("orbit").unwrap() }
    }

    /// One frame: begin, draw, copy out, finish (submits); no wait.
    fn frame(&mut self, ctx: &GpuContext) -> Result<(), RenderError> {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let n = self.vt.frame_number() as u32;
        self.drawer.set_camera(&ctx.queue, &self.camera.camera_at(n), 16.0 / 9.0);
        let f = self.vt.begin(ctx, &mut encoder);
        self.drawer.draw_vt(&mut encoder, &self.target.color_view, &self.target.depth_view, f.vt(), None);
        self.target.copy_out(&mut encoder);
        f.finish(ctx, encoder).map(|_| ())
    }
}

fn assert_lost(what: &str, r: Result<impl std::fmt::Debug, RenderError>) {
    match r {
        Err(RenderError::DeviceLost(lost)) => {
            assert_eq!(lost.cause, LostCause::Destroyed, "{what}: {lost}");
            assert!(
                lost.to_string()
                    .starts_with("the GPU device was lost (destroyed): Device::destroy was called"),
                "{what}: {lost}"
            );
        }
        other => panic!("{what}: expected DeviceLost, got {other:?}"),
    }
}

fn atlas(dir: &Path, name: &str) -> std::path::PathBuf {
    bake_source(dir, name, Generated::new(1024, 512))
}

#[test]
fn a_destroyed_device_fails_the_next_frame_readback_wait_and_capture() {
    watched(|destroyed| {
        let dir = tempfile::tempdir().unwrap();
        let atlas = atlas(dir.path(), "lost");
        let ctx = own_gpu();
        let mut frames = Frames::new(&ctx, &atlas);
        for _ in 0..4 {
            frames.frame(&ctx).unwrap();
            frames.target.read(&ctx).unwrap();
        }
        assert_eq!(ctx.lost(), None);
        ctx.device.destroy();
        destroyed();
        let t0 = Instant::now();
        // Nothing was in flight: the first poll after the destroy (the frame's `begin`)
        // sees the loss, so this very frame reports it.
        assert_lost("the next frame", frames.frame(&ctx));
        assert_eq!(ctx.lost().map(|l| l.cause), Some(LostCause::Destroyed));
        assert_lost("the readback", frames.target.read(&ctx));
        assert_lost("wait_idle", ctx.wait_idle());
        assert_lost("check", ctx.check());
        // Frames keep failing, one message each, never a panic.
        for _ in 0..3 {
            assert_lost("a later frame", frames.frame(&ctx));
        }
        let cfg = CaptureConfig {
            atlas,
            camera: CameraPath::preset("static").unwrap(),
            frames: 4,
            size: (64, 36),
            every: 0,
            out: None,
            reference: true,
            reference_atlas: None,
            vt: VtConfig { pool_mib: 8, ..VtConfig::default() },
            scene: None,
            prefetch: 0,
            flush_vram_before: Vec::new(),
            remote: Default::default(),
            frame_interval: None,
            wait_resident: None,
            predict: 0,
            terrain: None,
        };
        assert_lost("a capture", capture(&ctx, &cfg).map(|r| r.frames.len()));
        println!("everything failed with DeviceLost within {:?}", t0.elapsed());
    });
}

#[test]
fn a_device_destroyed_with_frames_in_flight_fails_within_a_few_frames() {
    watched(|destroyed| {
        let dir = tempfile::tempdir().unwrap();
        let atlas = atlas(dir.path(), "lost-in-flight");
        let ctx = own_gpu();
        let mut frames = Frames::new(&ctx, &atlas);
        for _ in 0..3 {
            frames.frame(&ctx).unwrap();
        }
        // Frames still running on the GPU: the loss shows once they are done.
        ctx.device.destroy();
        destroyed();
        let started = Instant::now();
        let mut n = 0;
        let err = loop {
            n += 1;
            match frames.frame(&ctx) {
                Err(e) => break e,
                Ok(()) => {
                    assert!(started.elapsed() < Duration::from_secs(10), "{n} frames and no DeviceLost");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        };
        assert_lost(&format!("frame {n} after the destroy"), Err::<(), _>(err));
        assert!(ctx.lost().is_some());
        assert_lost("wait_idle", ctx.wait_idle());
    });
}

#[test]
fn validation_errors_panic_until_the_device_is_lost() {
    let ctx = own_gpu();
    let bad = |ctx: &GpuContext| {
        // MAP_READ may only be combined with COPY_DST: a validation error.
        ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("invalid on purpose"),
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let panicked = catch_unwind(AssertUnwindSafe(|| bad(&ctx))).expect_err("a validation error must panic");
    let text = panicked
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panicked.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(text.starts_with("wgpu validation error"), "{text}");
    assert_eq!(ctx.lost(), None, "a validation error is not a loss");
    ctx.device.destroy();
    assert_lost("wait_idle", ctx.wait_idle());
    // On a lost device every call is expected to fail: nothing panics.
    let _ = bad(&ctx);
    assert_lost("check", ctx.check());
}
