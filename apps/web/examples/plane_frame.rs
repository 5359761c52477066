//! The web viewer's streamed view rendered natively (lavapipe, say): the same
//! `PlaneScene` and camera path over an atlas file, rendered until fully resident with
//! the camera still, written as a PNG that `tests/web/stream.py --reference` compares
//! with the page's own frame (PSNR).
//!
//! `cargo run -p tessera-web --example plane_frame -- ATLAS CAMERA WIDTH HEIGHT OUT` (OUT: a
//! PNG when it ends in `.png`, else raw RGBA8 rows).

use std::sync::Arc;

use tessera::core::Atlas;
use tessera::{GpuContext, VirtualTextures, VtConfig};
use tessera_web::plane::{CameraPath, PlaneScene};

const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;
/// Frames rendered at most while waiting for full residency.
const MAX_FRAMES: u64 = 400;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [atlas_path, camera, width, height, out] = args.as_slice() else {
        return Err("usage: plane_frame ATLAS CAMERA(static|fly) WIDTH HEIGHT OUT(.png|.rgba)".into());
    };
    let camera = CameraPath::parse(camera)?;
    let size: (u32, u32) = (width.parse()?, height.parse()?);
    let ctx = GpuContext::headless().map_err(|e| {
        format!("{e}: no GPU adapter (on Debian, `apt-get install mesa-vulkan-drivers libvulkan1`)")
    })?;
    let atlas = Atlas::open(atlas_path).map_err(|e| format!("opening {atlas_path}: {e}"))?;
    let mut vt =
        VirtualTextures::new(&ctx, Arc::new(atlas), VtConfig { pool_mib: 128, ..VtConfig::default() })?;
    let plane = PlaneScene::new(&ctx, &vt, FORMAT)?;
    let target = ctx.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("plane frame"),
        size: wgpu::Extent3d { width: size.0, height: size.1, depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: FORMAT,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let view = target.create_view(&wgpu::TextureViewDescriptor::default());
    // The view the page checks: the camera where the path stands still.
    let eye = camera.camera(camera.still_from(), plane.half_width());
    let mut frames = 0;
    let check = loop {
        frames += 1;
        let resident = vt.fully_resident();
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        let frame = vt.begin(&ctx, &mut encoder);
        plane.draw(&ctx, &frame, &mut encoder, &view, size, &eye);
        let check =
            resident.then(|| tessera_web::pattern::FrameCheck::record(&ctx.device, &mut encoder, &target));
        frame.finish(&ctx, encoder)?;
        ctx.wait_idle()?;
        if let Some(check) = check {
            break check;
        }
        if frames >= MAX_FRAMES {
            return Err(format!("not fully resident after {MAX_FRAMES} frames").into());
        }
    };
    ctx.map_read(check.buffer())?;
    let pixels = check.pixels()?;
    if out.ends_with(".png") {
        image::save_buffer(out, &pixels, size.0, size.1, image::ExtendedColorType::Rgba8)
            .map_err(|e| format!("writing {out}: {e}"))?;
    } else {
        std::fs::write(out, &pixels).map_err(|e| format!("writing {out}: {e}"))?;
    }
    println!("{}: {}×{} after {frames} frames on {}", out, size.0, size.1, ctx.describe());
    Ok(())
}
