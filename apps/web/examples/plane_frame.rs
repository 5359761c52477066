//! The web viewer's streamed view rendered natively (lavapipe, say): the same
//! `PlaneScene` and camera path over an atlas, flown frame by frame as the page does
//! (frame `n` shows the path's camera at `n`) until the camera stands still and the view
//! is fully resident; that frame is written for `tests/web/stream.py` to compare with the
//! page's own (PSNR).
//!
//! `cargo run -p tessera-web --example plane_frame -- ATLAS CAMERA WIDTH HEIGHT OUT [--json]`
//!
//! ATLAS is a file or an `http://`/`https://` URL, read through the engine's native HTTP
//! store (range requests, no disk cache). OUT: a PNG when it ends in `.png`, else raw
//! RGBA8 rows. `--json` prints the run's figures as one JSON line (for `stream.py
//! --bench`): range requests and bytes, tiles uploaded, milliseconds from the start to the
//! atlas being open and to fully resident, frames, and the median and 90th percentile
//! frame time (CPU wall time of one frame, recording, submitting and waiting for the GPU).

use std::sync::Arc;
use std::time::Instant;

use tessera::core::Atlas;
use tessera::core::format::atlas::RemoteOptions;
use tessera::{GpuContext, VirtualTextures, VtConfig};
use tessera_web::plane::{CameraPath, PlaneScene};

const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;
/// Frames rendered at most while waiting for full residency.
const MAX_FRAMES: u64 = 2000;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let started = Instant::now();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().position(|a| a == "--json").map(|i| args.remove(i)).is_some();
    let [atlas_path, camera, width, height, out] = args.as_slice() else {
        return Err(
            "usage: plane_frame ATLAS(file|http://...) CAMERA(static|fly) WIDTH HEIGHT OUT(.png|.rgba) [--json]"
                .into(),
        );
    };
    let camera = CameraPath::parse(camera)?;
    let size: (u32, u32) = (width.parse()?, height.parse()?);
    let ctx = GpuContext::headless().map_err(|e| {
        format!("{e}: no GPU adapter (on Debian, `apt-get install mesa-vulkan-drivers libvulkan1`)")
    })?;
    let open_start = Instant::now();
    // Every tile from the server, as in the browser: no disk cache.
    let atlas = Atlas::open_with(atlas_path, &RemoteOptions::without_disk_cache())
        .map_err(|e| format!("opening {atlas_path}: {e}"))?;
    let opened_ms = ms_since(started);
    let open_ms = ms_since(open_start);
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
    let mut frame_ms = Vec::new();
    let mut uploads = 0;
    let mut network = None;
    let mut frame_index = 0;
    let check = loop {
        let frame_start = Instant::now();
        // The page's rule: the camera still and everything it wants resident.
        let resident = frame_index >= camera.still_from() && vt.fully_resident();
        let eye = camera.camera(frame_index, plane.half_width());
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        let frame = vt.begin(&ctx, &mut encoder);
        plane.draw(&ctx, &frame, &mut encoder, &view, size, &eye);
        let check =
            resident.then(|| tessera_web::pattern::FrameCheck::record(&ctx.device, &mut encoder, &target));
        let stats = frame.finish(&ctx, encoder)?;
        ctx.wait_idle()?;
        frame_ms.push(ms_since(frame_start));
        uploads += stats.uploads;
        network = stats.network.or(network);
        frame_index += 1;
        if let Some(check) = check {
            break check;
        }
        if frame_index >= MAX_FRAMES {
            return Err(format!("not fully resident after {MAX_FRAMES} frames").into());
        }
    };
    let resident_ms = ms_since(started);
    ctx.map_read(check.buffer())?;
    let pixels = check.pixels()?;
    if out.ends_with(".png") {
        image::save_buffer(out, &pixels, size.0, size.1, image::ExtendedColorType::Rgba8)
            .map_err(|e| format!("writing {out}: {e}"))?;
    } else {
        std::fs::write(out, &pixels).map_err(|e| format!("writing {out}: {e}"))?;
    }
    let (requests, bytes) = network.map_or((0, 0), |n| (n.requests, n.bytes));
    let median = percentile(&frame_ms, 0.5);
    if json {
        println!(
            "{{\"requests\":{requests},\"bytes_fetched\":{bytes},\"tiles_uploaded\":{uploads},\
             \"opened_ms\":{opened_ms:.1},\"open_ms\":{open_ms:.1},\"resident_ms\":{resident_ms:.1},\
             \"frames\":{frame_index},\"frame_ms_median\":{median:.3},\"frame_ms_p90\":{:.3},\
             \"adapter\":\"{}\",\"profile\":\"{}\"}}",
            percentile(&frame_ms, 0.9),
            ctx.describe().replace(['"', '\\'], "'"),
            if cfg!(debug_assertions) { "dev" } else { "release" },
        );
    }
    println!(
        "{}: {}×{} after {frame_index} frames ({requests} requests, {bytes} bytes, {uploads} tiles uploaded, \
         median frame {median:.2} ms) on {}",
        out,
        size.0,
        size.1,
        ctx.describe()
    );
    Ok(())
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The `q` quantile (0 to 1, nearest rank) of `values`; 0 for none.
fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(rank).copied().unwrap_or(0.0)
}
