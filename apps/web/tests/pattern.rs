//! The browser's stand-in scene rendered natively and headless (lavapipe in CI): the
//! frame shows the pattern and feedback comes back, as the page checks in a browser.

use tessera::GpuContext;
use tessera_web::pattern::{FrameCheck, PatternScene};

const SIZE: (u32, u32) = (320, 240);
const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

#[test]
fn the_pattern_renders_and_its_feedback_arrives() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = GpuContext::headless().map_err(|e| {
        format!(
            "{e}\nThis test needs a GPU adapter: on Debian, `apt-get install mesa-vulkan-drivers libvulkan1`"
        )
    })?;
    let mut scene = PatternScene::new(&ctx, FORMAT)?;
    let target = ctx.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("pattern test"),
        size: wgpu::Extent3d { width: SIZE.0, height: SIZE.1, depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: FORMAT,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let view = target.create_view(&wgpu::TextureViewDescriptor::default());
    for frame in 0..8 {
        scene.render(&ctx, &view, SIZE, f64::from(frame) / 30.0)?;
        ctx.wait_idle()?;
    }
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    let check = FrameCheck::record(&ctx.device, &mut encoder, &target);
    ctx.queue.submit([encoder.finish()]);
    ctx.map_read(check.buffer())?;
    let pixels = check.pixels()?;
    let out =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-output/web-pattern.png");
    std::fs::create_dir_all(out.parent().ok_or("no parent")?)?;
    image::save_buffer(&out, &pixels, SIZE.0, SIZE.1, image::ExtendedColorType::Rgba8)?;
    let summary = FrameCheck::summarize(&pixels);
    assert!(summary.ok(), "{summary:?} on {} (frame written to {})", ctx.describe(), out.display());
    let feedback = scene.feedback().ok_or("no feedback arrived in 8 frames")?;
    assert!(feedback.tiles > 0 && feedback.tiles <= scene.tiles(), "{feedback:?}");
    // The grazing view samples several mips.
    assert!(feedback.per_mip.iter().filter(|&&n| n > 0).count() >= 2, "{feedback:?}");
    Ok(())
}
