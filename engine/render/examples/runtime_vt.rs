//! A runtime virtual texture in your own wgpu app: tiles drawn on the GPU when the
//! feedback asks for them, instead of read from an atlas file.
//!
//! The texture is a procedural "terrain material": four patterns blended by a splat
//! function, with disc decals on top. A [`TileProducer`] evaluates it once per texel of
//! each tile the view needs (at the tile's mip, so with that mip's footprint), and the
//! view samples the result like any virtual texture: one lookup instead of the whole
//! composite per pixel. The same WGSL function, evaluated directly in the fragment
//! shader, is the reference the test suite compares with (`tests/embed.rs`, module
//! `runtime_vt`), and a decal placed mid-flight is shown after `invalidate`.
//!
//! The Tessera-specific lines are marked `// [T]`.
//!
//! Run: `cargo run -p tessera-vt --example runtime_vt` (writes `target/runtime_vt.png`).

use std::sync::Arc;

use anyhow::Context;
use bytemuck::{Pod, Zeroable};
use tessera::core::Atlas;
use tessera::core::format::atlas::ColorSpace;
use tessera::core::format::tile::TextureLayout;
use tessera::produce::{ProduceBatch, TileProducer};
use tessera::{GpuContext, VirtualTextures, VtConfig, wgpu}; // [T]

/// Frame size.
pub const SIZE: (u32, u32) = (640, 360);

/// Side of the virtual texture in texels (tiles of 128 texels and a border of 4).
pub const VIRTUAL: u32 = 16384;

/// Most decals.
pub const MAX_DECALS: usize = 128;

/// The material, shared by the producer and the direct evaluation: `material(uv, fp)`
/// with `fp` the footprint of one texel (or pixel) in texture coordinates. Patterns
/// fade out as their frequency nears the footprint's, and decal edges are as soft as
/// one footprint, so each evaluation is its own prefiltered average. `GROUP` is the
/// bind group of the decals.
const MATERIAL_WGSL: &str = r#"
struct Decal {
    // Centre (u, v) and radius in texture coordinates, unused.
    disc: vec4<f32>,
    // Linear RGB and opacity.
    colour: vec4<f32>,
}
struct Decals {
    count: vec4<u32>,
    items: array<Decal, MAX_DECALS>,
}
@group(GROUP) @binding(0) var<uniform> decals: Decals;

const TAU: f32 = 6.2831853;

// A sine pattern of `freq` cycles per unit, faded out towards the footprint's Nyquist.
fn band(uv: vec2<f32>, freq: vec2<f32>, fp: vec2<f32>) -> f32 {
    let fade = clamp(1.0 - 2.0 * max(freq.x * fp.x, freq.y * fp.y), 0.0, 1.0);
    return 0.5 + 0.5 * fade * sin(TAU * freq.x * uv.x) * sin(TAU * freq.y * uv.y);
}

fn material(uv: vec2<f32>, fp: vec2<f32>) -> vec4<f32> {
    // Four layers: grass, rock, sand, snow, each a colour and a pattern of its own scale.
    let l0 = mix(vec3<f32>(0.05, 0.20, 0.03), vec3<f32>(0.12, 0.35, 0.06), band(uv, vec2<f32>(900.0, 700.0), fp));
    let l1 = mix(vec3<f32>(0.18, 0.16, 0.15), vec3<f32>(0.40, 0.38, 0.36), band(uv, vec2<f32>(2300.0, 2100.0), fp));
    let l2 = mix(vec3<f32>(0.55, 0.45, 0.25), vec3<f32>(0.75, 0.62, 0.38), band(uv, vec2<f32>(5200.0, 4800.0), fp));
    let l3 = mix(vec3<f32>(0.80, 0.82, 0.85), vec3<f32>(0.95, 0.96, 1.00), band(uv, vec2<f32>(300.0, 350.0), fp));
    // The splat map: smooth weights over the texture (low frequencies only).
    var w = vec4<f32>(
        0.6 + 0.5 * sin(TAU * 3.0 * uv.x) * sin(TAU * 2.0 * uv.y),
        0.5 + 0.5 * sin(TAU * 5.0 * uv.y + 1.0),
        0.5 + 0.5 * cos(TAU * 4.0 * uv.x + 2.0 * uv.y),
        0.4 + 0.6 * sin(TAU * 1.5 * (uv.x + uv.y)),
    );
    w = max(w, vec4<f32>(0.0));
    w = w * w * w;
    let rgb = (l0 * w.x + l1 * w.y + l2 * w.z + l3 * w.w) / max(dot(w, vec4<f32>(1.0)), 1e-4);
    var c = rgb;
    // Decals over it, soft over one footprint at their edge.
    let edge = max(length(fp), 1e-7);
    for (var i = 0u; i < decals.count.x; i++) {
        let d = decals.items[i];
        let cover = clamp(0.5 - (distance(uv, d.disc.xy) - d.disc.z) / edge, 0.0, 1.0);
        c = mix(c, d.colour.rgb, cover * d.colour.a);
    }
    return vec4<f32>(c, 1.0);
}
"#;

/// The producer's shader: `PRODUCE_WGSL`'s vertex stage, the material at each texel.
const PRODUCER_WGSL: &str = r#"
@vertex
fn vs_produce(@builtin(vertex_index) vi: u32, @builtin(instance_index) ii: u32) -> VtProduced {
    return vt_produce_vertex(vi, ii);
}

@fragment
fn fs_produce(in: VtProduced) -> @location(0) vec4<f32> {
    return material(vt_produce_uv(in), in.texel.xy);
}
"#;

/// The view: a screen-aligned window onto the texture, `uv = origin + pixel · step`.
const VIEW_WGSL: &str = r#"
struct View {
    origin: vec2<f32>,
    step: vec2<f32>,
}
@group(0) @binding(1) var<uniform> view: View;

struct VsOut {
    @builtin(position) pos: vec4<f32>,
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    // One triangle over the whole target.
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    var out: VsOut;
    out.pos = vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
    return out;
}

fn uv_at(pos: vec4<f32>) -> vec2<f32> {
    return view.origin + pos.xy * view.step;
}

// Through the virtual texture: the composite made once per texel by the producer.
@fragment
fn fs_vt(in: VsOut) -> @location(0) vec4<f32> {
    return vt_sample(uv_at(in.pos), in.pos);
}

// The reference: the composite evaluated for every pixel.
@fragment
fn fs_direct(in: VsOut) -> @location(0) vec4<f32> {
    return material(uv_at(in.pos), view.step);
}
"#;

/// Matches `Decal` in the material.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Decal {
    /// Centre (u, v) and radius in texture coordinates, unused.
    pub disc: [f32; 4],
    /// Linear RGB and opacity.
    pub colour: [f32; 4],
}

impl Decal {
    /// The rectangle it covers in mip-0 texels of a `side²` texture (x, y, w, h), for
    /// `invalidate`.
    pub fn rect(&self, side: u32) -> [u32; 4] {
        let s = side as f32;
        let [cx, cy, r, _] = self.disc;
        let x0 = ((cx - r) * s).floor().max(0.0) as u32;
        let y0 = ((cy - r) * s).floor().max(0.0) as u32;
        let x1 = ((cx + r) * s).ceil().clamp(0.0, s) as u32;
        let y1 = ((cy + r) * s).ceil().clamp(0.0, s) as u32;
        [x0, y0, x1.saturating_sub(x0), y1.saturating_sub(y0)]
    }
}

/// `count` decals scattered deterministically over the texture.
pub fn scatter(count: usize) -> Vec<Decal> {
    let mut state = 0x9E37_79B9u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        f32::from(u16::try_from(state >> 16).unwrap_or(0)) / 65535.0
    };
    (0..count)
        .map(|_| Decal {
            disc: [next(), next(), 0.0005 + 0.004 * next(), 0.0],
            colour: [next(), next() * 0.5, next() * 0.2, 0.9],
        })
        .collect()
}

/// The decals' uniform: a count, then [`MAX_DECALS`] items.
fn decal_bytes(decals: &[Decal]) -> Vec<u8> {
    let n = decals.len().min(MAX_DECALS);
    let mut items = vec![Decal::default(); MAX_DECALS];
    items[..n].copy_from_slice(&decals[..n]);
    let mut bytes = bytemuck::cast_slice(&[n as u32, 0, 0, 0]).to_vec();
    bytes.extend_from_slice(bytemuck::cast_slice(&items));
    bytes
}

fn material(group: u32) -> String {
    MATERIAL_WGSL.replace("GROUP", &group.to_string()).replace("MAX_DECALS", &MAX_DECALS.to_string())
}

/// The decals, on the GPU, shared by the producer and the view.
pub struct Decals {
    buffer: wgpu::Buffer,
    list: Vec<Decal>,
}

impl Decals {
    /// A uniform buffer holding `list`.
    pub fn new(device: &wgpu::Device, list: Vec<Decal>) -> Self {
        let buffer = wgpu::util::DeviceExt::create_buffer_init(
            device,
            &wgpu::util::BufferInitDescriptor {
                label: Some("decals"),
                contents: &decal_bytes(&list),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            },
        );
        Self { buffer, list }
    }

    /// Adds `decal` (ignored past [`MAX_DECALS`]) and returns the rectangle to
    /// invalidate.
    pub fn add(&mut self, queue: &wgpu::Queue, decal: Decal) -> [u32; 4] {
        self.list.push(decal);
        queue.write_buffer(&self.buffer, 0, &decal_bytes(&self.list));
        decal.rect(VIRTUAL)
    }
}

/// The producer: its pipeline is made on the first batch, from the batch's layout and
/// target formats.
pub struct Procedural {
    decals: wgpu::Buffer,
    pipeline: Option<(wgpu::RenderPipeline, wgpu::BindGroup)>,
}

impl Procedural {
    /// A producer drawing the material with `decals`.
    pub fn new(decals: &Decals) -> Self {
        Self { decals: decals.buffer.clone(), pipeline: None }
    }
}

impl TileProducer for Procedural {
    fn produce(&mut self, ctx: &GpuContext, encoder: &mut wgpu::CommandEncoder, batch: &ProduceBatch<'_>) {
        let device = &ctx.device;
        let (pipeline, decals) = self.pipeline.get_or_insert_with(|| {
            let decal_layout = uniform_layout(device, 0);
            let source = format!("{}\n{PRODUCER_WGSL}", material(1));
            let pipeline = batch.pipeline(device, &source, "vs_produce", "fs_produce", &[&decal_layout]); // [T]
            let decals = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("producer decals"),
                layout: &decal_layout,
                entries: &[wgpu::BindGroupEntry { binding: 0, resource: self.decals.as_entire_binding() }],
            });
            (pipeline, decals)
        });
        let mut pass = batch.begin_pass(encoder); // [T]
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, batch.bind_group(), &[]); // [T]
        pass.set_bind_group(1, &*decals, &[]);
        pass.draw(0..4, 0..batch.len()); // [T]
    }
}

/// A bind group layout of uniform buffers at bindings `0..=last`.
fn uniform_layout(device: &wgpu::Device, last: u32) -> wgpu::BindGroupLayout {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..=last)
        .map(|binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("uniforms"),
        entries: &entries,
    })
}

/// The produced atlas: one sRGB layer of [`VIRTUAL`]² texels.
pub fn atlas() -> anyhow::Result<Atlas> {
    let layout = TextureLayout::new(VIRTUAL, VIRTUAL, 128, 4).context("layout")?;
    Ok(Atlas::produced("procedural", &[("albedo".into(), ColorSpace::Srgb)], layout, false)?) // [T]
}

/// What the view shows: the window of the texture at `origin` (texture coordinates),
/// one texel of `mip` per pixel.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Texture coordinates of the top-left pixel's corner (snapped to the nearest texel
    /// corner of `mip`).
    pub origin: [f32; 2],
    /// The mip shown 1:1.
    pub mip: u32,
}

impl Window {
    /// The view uniform: the origin snapped to a texel corner of the mip, so each
    /// pixel's centre is a texel's centre.
    fn bytes(&self) -> [f32; 4] {
        let step = (1u32 << self.mip) as f32 / VIRTUAL as f32;
        let snap = |o: f32| (o / step).round() * step;
        [snap(self.origin[0]), snap(self.origin[1]), step, step]
    }
}

/// The app: virtual textures with the producer, the view's two pipelines (through the
/// virtual texture, and direct), and an offscreen target.
pub struct App {
    /// The virtual textures.
    pub vt: VirtualTextures,
    /// The decals (add one, then `vt.invalidate` its rectangle).
    pub decals: Decals,
    screen: Screen,
}

/// The view's pipelines, uniforms and target.
struct Screen {
    view: wgpu::Buffer,
    group: wgpu::BindGroup,
    vt_pipeline: wgpu::RenderPipeline,
    direct_pipeline: wgpu::RenderPipeline,
    target: wgpu::Texture,
    readback: wgpu::Buffer,
}

/// The colour format the app renders to.
const TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

/// Bytes per row of the readback (aligned for the copy).
const PADDED_ROW: u32 =
    (SIZE.0 * 4).div_ceil(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT) * wgpu::COPY_BYTES_PER_ROW_ALIGNMENT;

impl App {
    /// Sets the app up on `ctx` with `decals`.
    pub fn new(ctx: &GpuContext, decals: Vec<Decal>, config: VtConfig) -> anyhow::Result<Self> {
        let device = &ctx.device;
        let decals = Decals::new(device, decals);
        let producer = Box::new(Procedural::new(&decals));
        let vt = VirtualTextures::with_producer(ctx, Arc::new(atlas()?), config, producer)?; // [T]
        let view = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("view"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let layout0 = uniform_layout(device, 1);
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("view"),
            layout: &layout0,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: decals.buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: view.as_entire_binding() },
            ],
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("view"),
            source: wgpu::ShaderSource::Wgsl(
                format!("{}\n{}\n{VIEW_WGSL}", tessera::shaders::VT_WGSL, material(0)).into(),
            ),
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("view"),
            bind_group_layouts: &[Some(&layout0), Some(vt.bind_group_layout())], // [T]
            immediate_size: 0,
        });
        let pipeline = |fs: &str| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(fs),
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
                    entry_point: Some(fs),
                    compilation_options: Default::default(),
                    targets: &[Some(TARGET_FORMAT.into())],
                }),
                multiview_mask: None,
                cache: None,
            })
        };
        let (vt_pipeline, direct_pipeline) = (pipeline("fs_vt"), pipeline("fs_direct"));
        let target = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("target"),
            size: wgpu::Extent3d { width: SIZE.0, height: SIZE.1, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: TARGET_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: u64::from(PADDED_ROW * SIZE.1),
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let screen = Screen { view, group, vt_pipeline, direct_pipeline, target, readback };
        Ok(Self { vt, decals, screen })
    }

    /// One frame through the virtual texture (streaming and producing as it goes);
    /// returns its pixels and what streaming did.
    pub fn frame(
        &mut self,
        ctx: &GpuContext,
        window: Window,
    ) -> anyhow::Result<(Vec<u8>, tessera::StreamFrame)> {
        let screen = &self.screen;
        ctx.queue.write_buffer(&screen.view, 0, bytemuck::cast_slice(&window.bytes()));
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let frame = self.vt.begin(ctx, &mut encoder); // [T]
        let layer = frame.vt().layer(0).context("no layer")?;
        screen.draw(&mut encoder, &screen.vt_pipeline, frame.bind_group(layer)); // [T]
        screen.copy_out(&mut encoder);
        let stats = frame.finish(ctx, encoder)?; // [T]
        Ok((screen.read(ctx)?, stats))
    }

    /// The same window with the material evaluated for every pixel.
    pub fn direct(&mut self, ctx: &GpuContext, window: Window) -> anyhow::Result<Vec<u8>> {
        let screen = &self.screen;
        ctx.queue.write_buffer(&screen.view, 0, bytemuck::cast_slice(&window.bytes()));
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        // The pipelines share a layout: the virtual texture's group is bound, unused.
        let layer = self.vt.layer(0).context("no layer")?;
        screen.draw(&mut encoder, &screen.direct_pipeline, self.vt.bind_group(layer));
        screen.copy_out(&mut encoder);
        ctx.queue.submit([encoder.finish()]);
        screen.read(ctx)
    }
}

impl Screen {
    fn draw(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::RenderPipeline,
        vt: &wgpu::BindGroup,
    ) {
        let view = self.target.create_view(&Default::default());
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("view"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &self.group, &[]);
        pass.set_bind_group(1, vt, &[]);
        pass.draw(0..3, 0..1);
    }

    fn copy_out(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.copy_texture_to_buffer(
            self.target.as_image_copy(),
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

    fn read(&self, ctx: &GpuContext) -> anyhow::Result<Vec<u8>> {
        ctx.map_read(&self.readback)?;
        let view = self.readback.get_mapped_range(..).context("mapping the readback")?;
        let pixels = view
            .chunks(PADDED_ROW as usize)
            .take(SIZE.1 as usize)
            .flat_map(|r| &r[..(SIZE.0 * 4) as usize])
            .copied()
            .collect();
        drop(view);
        self.readback.unmap();
        Ok(pixels)
    }
}

fn main() -> anyhow::Result<()> {
    let ctx = GpuContext::headless()?;
    println!("adapter: {}", ctx.describe());
    let mut app = App::new(&ctx, scatter(100), VtConfig::default())?;
    let window = Window { origin: [0.25, 0.25], mip: 2 };
    let mut pixels = Vec::new();
    for frame in 0..30 {
        let (p, stats) = app.frame(&ctx, window)?;
        pixels = p;
        println!(
            "frame {frame:2}: {:3} tiles produced, {:4} resident, fully resident: {}",
            stats.produced,
            stats.resident_vram,
            app.vt.fully_resident()
        );
        if frame == 15 {
            let rect = app
                .decals
                .add(&ctx.queue, Decal { disc: [0.28, 0.27, 0.01, 0.0], colour: [0.9, 0.9, 0.1, 1.0] });
            println!("decal added: {} tiles invalidated", app.vt.invalidate(0, rect)); // [T]
        }
    }
    std::fs::create_dir_all("target").context("creating target/")?;
    image::save_buffer("target/runtime_vt.png", &pixels, SIZE.0, SIZE.1, image::ExtendedColorType::Rgba8)
        .context("writing target/runtime_vt.png")?;
    println!("wrote target/runtime_vt.png");
    Ok(())
}
