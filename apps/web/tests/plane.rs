//! The streamed atlas' scene rendered natively and headless (lavapipe in CI): a baked
//! atlas on the plane, seen from where each camera path stands still, becomes fully
//! resident and shows a picture, as the page checks in a browser.

use std::sync::Arc;

use tessera::core::bake::source::Generated;
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::{Atlas, NoProgress};
use tessera::{GpuContext, VirtualTextures, VtConfig};
use tessera_web::pattern::FrameCheck;
use tessera_web::plane::{CameraPath, ImageStats, PlaneScene};

const SIZE: (u32, u32) = (320, 200);
const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

#[test]
fn the_plane_shows_the_atlas_fully_resident() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = GpuContext::headless().map_err(|e| {
        format!(
            "{e}\nThis test needs a GPU adapter: on Debian, `apt-get install mesa-vulkan-drivers libvulkan1`"
        )
    })?;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-output");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("web-plane.tsa");
    let opts = BakeOptions { tile_size: 64, ..BakeOptions::default() };
    bake(vec![BakeInput::new("generated", Generated::new(2048, 1024))], &path, &opts, &NoProgress)?;
    let atlas = Arc::new(Atlas::open(&path)?);
    let target = ctx.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("plane test"),
        size: wgpu::Extent3d { width: SIZE.0, height: SIZE.1, depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: FORMAT,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let view = target.create_view(&wgpu::TextureViewDescriptor::default());
    for path in [CameraPath::Static, CameraPath::Fly] {
        let mut vt = VirtualTextures::new(&ctx, atlas.clone(), VtConfig::default())?;
        let plane = PlaneScene::new(&ctx, &vt, FORMAT)?;
        assert_eq!(plane.half_width(), 2.0);
        let camera = path.camera(path.still_from(), plane.half_width());
        let mut check = None;
        for _ in 0..60 {
            let resident = vt.fully_resident();
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            let frame = vt.begin(&ctx, &mut encoder);
            plane.draw(&ctx, &frame, &mut encoder, &view, SIZE, &camera);
            let copy = resident.then(|| FrameCheck::record(&ctx.device, &mut encoder, &target));
            frame.finish(&ctx, encoder)?;
            ctx.wait_idle()?;
            if copy.is_some() {
                check = copy;
                break;
            }
        }
        let check = check.ok_or_else(|| format!("{path:?}: not fully resident in 60 frames"))?;
        ctx.map_read(check.buffer())?;
        let pixels = check.pixels()?;
        let out = dir.join(format!("web-plane-{}.png", path.name()));
        image::save_buffer(&out, &pixels, SIZE.0, SIZE.1, image::ExtendedColorType::Rgba8)?;
        let stats = ImageStats::of(&pixels);
        assert!(
            stats.non_trivial(),
            "{path:?}: {stats:?} on {} (frame written to {})",
            ctx.describe(),
            out.display()
        );
    }
    Ok(())
}
