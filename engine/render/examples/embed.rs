//! Embedding Tessera in your own wgpu app: the whole public API a renderer needs.
//!
//! This example is "the user's app". It owns its pipeline, its shader and its
//! uniforms; Tessera only contributes three things:
//!
//! * [`GpuContext`] — a wrapper around the app's own wgpu device and queue
//!   ([`GpuContext::from_parts`]; `main` creates them the way any wgpu app does),
//! * [`VirtualTextures`] — the tile pool, page table, GPU feedback and streaming,
//!   driven by two calls per frame (`begin` before the passes, `finish` after them)
//!   and bound as bind group 1 of the user's pipeline,
//! * [`tessera::shaders::VT_WGSL`] — WGSL prepended to the user's shader, giving it
//!   `vt_sample(uv, frag_coord)`.
//!
//! The Tessera-specific lines are marked `// [T]`: 14 of them.
//!
//! It draws a perspective-tilted plane (no vertex buffers: the vertex shader builds
//! it from `vertex_index`), tinted and vignetted by the user's fragment shader, into
//! an offscreen texture for 20 frames while the camera dollies in, prints what
//! streaming did each frame, and saves the last frame as `target/embed.png`.
//!
//! Run: `cargo run -p tessera-vt --example embed [ATLAS.tsa]` (without an atlas, a 4096²
//! labelled test texture is baked into a temporary folder first). The test suite runs
//! it too (`tests/embed.rs`) and compares its last frame with a golden image.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use bytemuck::{Pod, Zeroable};
use glam::Vec3;
use tessera::core::Atlas;
use tessera::core::bake::source::Generated;
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::scene::camera::Camera;
use tessera::core::{NoProgress, StatsSnapshot};
use tessera::{GpuContext, VirtualTextures, VtConfig, wgpu}; // [T]

const FRAMES: u64 = 20;
const SIZE: (u32, u32) = (640, 360);

/// The user's own shader. `vt_sample` comes from `VT_WGSL`, prepended at load time;
/// the virtual texture occupies bind group 1, so the user's own uniforms use group 0.
const USER_WGSL: &str = r#"
struct Look {
    view_proj: mat4x4<f32>,
    tint: vec4<f32>,
    screen: vec4<f32>, // width, height, vignette strength, unused
}
@group(0) @binding(0) var<uniform> look: Look;

struct VsOut {
    @builtin(position) pos: vec4<f32>,
    @location(0) uv: vec2<f32>,
}

// Two triangles of a 2×2 plane on y = 0, built from the vertex index.
@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    let corners = array<vec2<f32>, 6>(
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0),
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 1.0), vec2<f32>(0.0, 1.0),
    );
    let uv = corners[i];
    var out: VsOut;
    out.pos = look.view_proj * vec4<f32>(uv.x * 2.0 - 1.0, 0.0, uv.y * 2.0 - 1.0, 1.0);
    out.uv = uv;
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    // One call streams and filters the virtual texture (and records GPU feedback).
    let texel = vt_sample(in.uv, in.pos);
    // The user's own look on top: a tint and a vignette.
    let p = in.pos.xy / look.screen.xy * 2.0 - 1.0;
    let vignette = clamp(1.0 - look.screen.z * dot(p, p), 0.0, 1.0);
    return vec4<f32>(texel.rgb * look.tint.rgb * vignette, 1.0);
}
"#;

/// Matches `Look` in `USER_WGSL`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Look {
    view_proj: [[f32; 4]; 4],
    tint: [f32; 4],
    screen: [f32; 4],
}

fn main() -> anyhow::Result<()> {
    // 1. An atlas: the one given on the command line, or a freshly baked test texture.
    let scratch = tempfile::tempdir().context("creating a temporary folder")?;
    let atlas_path = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => bake_test_atlas(scratch.path())?,
    };
    let ctx = own_device()?;
    println!("adapter: {}", ctx.describe());
    let (pixels, stats) = run(&ctx, &atlas_path)?;
    let png = Path::new("target/embed.png");
    std::fs::create_dir_all("target").context("creating target/")?;
    image::save_buffer(png, &pixels, SIZE.0, SIZE.1, image::ExtendedColorType::Rgba8)
        .with_context(|| format!("writing {}", png.display()))?;
    println!("wrote {}", png.display());
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}

/// The application's own device, created the way any wgpu app creates it (here headless;
/// a windowed app passes its surface as `compatible_surface`), then handed to Tessera.
/// Asking for the adapter's compression features lets Tessera keep Basis atlases
/// block-compressed in VRAM (4× the tiles per MiB); none of them is required.
pub fn own_device() -> anyhow::Result<GpuContext> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
        .context("no GPU adapter: on Debian, `apt-get install mesa-vulkan-drivers libvulkan1`")?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("the app's device"),
        required_features: adapter.features() & tessera::OPTIONAL_FEATURES, // [T]
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    Ok(GpuContext::from_parts(&adapter, &device, &queue)?) // [T]
}

/// Renders [`FRAMES`] frames of the atlas at `atlas_path` on `ctx`'s device and returns
/// the last frame's RGBA8 pixels ([`SIZE`]) and the statistics of every tier.
pub fn run(ctx: &GpuContext, atlas_path: &Path) -> anyhow::Result<(Vec<u8>, StatsSnapshot)> {
    // 2. Tessera's side: the virtual textures of the atlas on the app's device.
    let atlas = Atlas::open(atlas_path).with_context(|| format!("opening {}", atlas_path.display()))?; // [T]
    let mut vt = VirtualTextures::new(ctx, Arc::new(atlas), VtConfig::default())?; // [T]
    let layer = vt.layer(0).context("the atlas has no layer")?; // [T]
    let device = &ctx.device;

    // 3. The user's side: uniforms (group 0), pipeline, and a render target.
    let look_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("look"),
        entries: &[wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }],
    });
    let look_buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("look"),
        size: std::mem::size_of::<Look>() as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let look_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("look"),
        layout: &look_layout,
        entries: &[wgpu::BindGroupEntry { binding: 0, resource: look_buffer.as_entire_binding() }],
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("user shader"),
        source: wgpu::ShaderSource::Wgsl(format!("{}\n{}", tessera::shaders::VT_WGSL, USER_WGSL).into()), // [T]
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("user pipeline"),
        bind_group_layouts: &[Some(&look_layout), Some(vt.bind_group_layout())], // [T]
        immediate_size: 0,
    });
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("user pipeline"),
        layout: Some(&layout),
        vertex: wgpu::VertexState {
            module: &module,
            entry_point: Some("vs_main"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        primitive: wgpu::PrimitiveState::default(),
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module: &module,
            entry_point: Some("fs_main"),
            compilation_options: Default::default(),
            targets: &[Some(TARGET_FORMAT.into())],
        }),
        multiview_mask: None,
        cache: None,
    });
    let target = Target::new(device);

    // 4. The frame loop the embedder writes.
    for frame in 0..FRAMES {
        ctx.queue.write_buffer(&look_buffer, 0, bytemuck::bytes_of(&look_at(frame)));
        let mut encoder = device.create_command_encoder(&Default::default());
        // Before the passes: streaming decisions and uploads, and the feedback clear.
        let vt_frame = vt.begin(ctx, &mut encoder); // [T]
        {
            let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("user pass"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &target.color_view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(wgpu::Color { r: 0.45, g: 0.6, b: 0.8, a: 1.0 }),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                depth_stencil_attachment: None,
                timestamp_writes: None,
                occlusion_query_set: None,
                multiview_mask: None,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &look_group, &[]);
            pass.set_bind_group(1, vt_frame.bind_group(layer), &[]); // [T]
            pass.draw(0..6, 0..1);
        }
        if frame + 1 == FRAMES {
            target.copy_out(&mut encoder); // keep the last frame for reading back
        }
        // After the passes: queues the feedback readback and submits the encoder.
        let stats = vt_frame.finish(ctx, encoder)?; // [T]
        // A windowed app is paced by presenting; headless, wait for the GPU instead.
        ctx.wait_idle()?; // [T]
        println!(
            "frame {frame:2}: {:4} uploads, {:4} tiles resident in VRAM, {:4} needed, {:4} requested",
            stats.uploads, stats.resident_vram, stats.tiles_needed, stats.requests
        );
    }
    Ok((target.read(ctx)?, vt.stats()))
}

/// The colour format the app renders to.
const TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

/// The app's offscreen colour target and a buffer to read the last frame back into.
struct Target {
    color: wgpu::Texture,
    color_view: wgpu::TextureView,
    readback: wgpu::Buffer,
}

/// Bytes per row of the readback buffer: wgpu wants rows aligned to 256 bytes.
const PADDED_ROW: u32 =
    (SIZE.0 * 4).div_ceil(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT) * wgpu::COPY_BYTES_PER_ROW_ALIGNMENT;

impl Target {
    fn new(device: &wgpu::Device) -> Self {
        let color = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("user target"),
            size: wgpu::Extent3d { width: SIZE.0, height: SIZE.1, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: TARGET_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("user readback"),
            size: u64::from(PADDED_ROW * SIZE.1),
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let color_view = color.create_view(&Default::default());
        Self { color, color_view, readback }
    }

    fn copy_out(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.copy_texture_to_buffer(
            self.color.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &self.readback,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(PADDED_ROW),
                    rows_per_image: Some(SIZE.1),
                },
            },
            wgpu::Extent3d { width: SIZE.0, height: SIZE.1, depth_or_array_layers: 1 },
        );
    }

    /// The last frame's RGBA8 rows, once the GPU is done with it.
    fn read(&self, ctx: &GpuContext) -> anyhow::Result<Vec<u8>> {
        ctx.map_read(&self.readback)?; // [T] waits for the map, or fails on a lost device
        let view = self.readback.get_mapped_range(..).context("mapping the readback")?;
        let rows = view.chunks(PADDED_ROW as usize).take(SIZE.1 as usize);
        let pixels = rows.flat_map(|row| &row[..(SIZE.0 * 4) as usize]).copied().collect();
        drop(view);
        self.readback.unmap();
        Ok(pixels)
    }
}

/// Bakes a 4096² labelled test texture (128² tiles, 6 mips) into `dir`.
pub fn bake_test_atlas(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("embed.tsa");
    let input = BakeInput::new("generated", Generated::new(4096, 4096));
    let report = bake(vec![input], &path, &BakeOptions::default(), &NoProgress)?;
    println!("baked {} ({} bytes) in {:.2} s", path.display(), report.file_bytes, report.seconds);
    Ok(path)
}

/// The user's uniforms at `frame`: a camera dollying in low over the plane (still for
/// the last five frames so streaming catches up), and a warm tint.
fn look_at(frame: u64) -> Look {
    let t = (frame as f32 / (FRAMES - 6) as f32).min(1.0);
    let eye = Vec3::new(0.3 * t, 1.4 - 1.28 * t, 1.5 - 1.3 * t);
    let target = Vec3::new(0.3 * t, 0.0, 0.2 - 0.3 * t);
    let camera = Camera { fov_y_degrees: 50.0, ..Camera::look_at(eye, target) };
    Look {
        view_proj: camera.view_projection(SIZE.0 as f32 / SIZE.1 as f32).to_cols_array_2d(),
        tint: [1.0, 0.93, 0.8, 1.0],
        screen: [SIZE.0 as f32, SIZE.1 as f32, 0.25, 0.0],
    }
}
