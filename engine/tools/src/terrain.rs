//! The runtime-virtual-texture terrain (issue 43) on the GPU: its textures and decals
//! ([`TerrainGpu`]), the [`TerrainProducer`] that draws its tiles into a produced
//! virtual texture, and the [`TerrainRenderer`] that draws the terrain through that
//! virtual texture, or evaluates the whole composite for every pixel (its reference,
//! and the cost the virtual texture saves). The data is GPU-free in
//! `tessera::core::scene::terrain`.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use glam::{Mat4, Vec3};
use tessera::core::Atlas;
use tessera::core::scene::camera::Camera;
use tessera::core::scene::terrain::{
    DECAL_CELL, Decal, DecalGrid, GpuDecal, MATERIAL_REPEAT, TERRAIN_WORLD, TerrainScene,
};
use tessera::produce::{ProduceBatch, TileProducer};
use tessera::{GpuContext, RenderError, VirtualTextures, VtConfig};
use wgpu::util::DeviceExt;

use crate::drawer::Drawer;
use crate::scene::{
    Outputs, PredictedPass, SceneRenderer, feedback_for, frame_uniform, mesh_pipeline, vt_shader,
};
use crate::shaders;

/// Side of the material textures on the GPU (each is resized to it).
pub const MATERIAL_SIDE: u32 = 512;

/// Most decals the GPU buffers hold (the scene's plus those added at run time).
pub const MAX_DECALS: usize = 4096;

/// Most decal references over all grid cells.
const MAX_DECAL_REFS: usize = 1 << 16;

/// Direction towards the sun.
const SUN: Vec3 = Vec3::new(0.5, 0.8, 0.35);

/// The sky: the clear colour and the haze of `shaders/terrain_view.wgsl` (`SKY`).
pub const SKY: wgpu::Color = wgpu::Color { r: 0.55, g: 0.65, b: 0.8, a: 1.0 };

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct FrameUniform {
    view_proj: [[f32; 4]; 4],
    light_dir: [f32; 4],
    eye: [f32; 4],
}

/// `TerrainParams` in `shaders/terrain.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ParamsUniform {
    world: [f32; 2],
    repeat: f32,
    materials: u32,
    cells: [u32; 2],
    cell: f32,
    splat_layers: u32,
}

/// The terrain's textures and decal buffers on the GPU, with the bind group (group 1
/// of `shaders/terrain.wgsl`) that the producer and the direct path share.
pub struct TerrainGpu {
    layout: wgpu::BindGroupLayout,
    group: wgpu::BindGroup,
    decals: wgpu::Buffer,
    cells: wgpu::Buffer,
    indices: wgpu::Buffer,
    list: Vec<Decal>,
    bytes: u64,
}

/// An RGBA8 image and its mip chain (each level half the previous, box-filtered by
/// the `image` crate's triangle filter), as bytes, level after level.
fn with_mips(image: image::RgbaImage) -> (Vec<u8>, u32) {
    let mut levels = 1;
    let mut bytes = image.as_raw().clone();
    let mut level = image;
    while level.width() > 1 || level.height() > 1 {
        let (w, h) = ((level.width() / 2).max(1), (level.height() / 2).max(1));
        level = image::imageops::resize(&level, w, h, image::imageops::FilterType::Triangle);
        bytes.extend_from_slice(level.as_raw());
        levels += 1;
    }
    (bytes, levels)
}

/// A 2D array texture of `layers` (same size) with full mip chains.
fn array_texture(
    ctx: &GpuContext,
    label: &str,
    format: wgpu::TextureFormat,
    layers: Vec<image::RgbaImage>,
    dimension: wgpu::TextureViewDimension,
) -> (wgpu::TextureView, u64) {
    let (w, h) = layers.first().map_or((1, 1), |l| l.dimensions());
    let count = layers.len().max(1) as u32;
    let mut data = Vec::new();
    let mut mips = 1;
    for layer in layers {
        let (bytes, levels) = with_mips(layer);
        data.extend_from_slice(&bytes);
        mips = levels;
    }
    let texture = ctx.device.create_texture_with_data(
        &ctx.queue,
        &wgpu::TextureDescriptor {
            label: Some(label),
            size: wgpu::Extent3d { width: w, height: h, depth_or_array_layers: count },
            mip_level_count: mips,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        },
        wgpu::util::TextureDataOrder::LayerMajor,
        &data,
    );
    let view = texture
        .create_view(&wgpu::TextureViewDescriptor { dimension: Some(dimension), ..Default::default() });
    (view, data.len() as u64)
}

/// Reads an image file as RGBA8 at `MATERIAL_SIDE²`.
fn material_image(path: &std::path::Path) -> Result<image::RgbaImage, RenderError> {
    let image = image::open(path)
        .map_err(|e| RenderError::Io { path: path.to_path_buf(), source: std::io::Error::other(e) })?
        .into_rgba8();
    Ok(image::imageops::resize(&image, MATERIAL_SIDE, MATERIAL_SIDE, image::imageops::FilterType::Triangle))
}

impl TerrainGpu {
    /// Uploads `scene`'s materials, splat map, relief normals and decals.
    pub fn new(ctx: &GpuContext, scene: &TerrainScene) -> Result<Self, RenderError> {
        ctx.check()?;
        let device = &ctx.device;
        let albedo: Vec<image::RgbaImage> =
            scene.materials.iter().map(|m| material_image(&m.albedo)).collect::<Result<_, _>>()?;
        let normals: Vec<image::RgbaImage> =
            scene.materials.iter().map(|m| material_image(&m.normal)).collect::<Result<_, _>>()?;
        let array = wgpu::TextureViewDimension::D2Array;
        let (albedo, b0) =
            array_texture(ctx, "terrain albedo", wgpu::TextureFormat::Rgba8UnormSrgb, albedo, array);
        let (normals, b1) =
            array_texture(ctx, "terrain normals", wgpu::TextureFormat::Rgba8Unorm, normals, array);
        let (sw, sh) = (scene.splat.width, scene.splat.height);
        let splat: Vec<image::RgbaImage> = scene
            .splat
            .layers
            .iter()
            .map(|l| {
                image::RgbaImage::from_raw(sw, sh, l.clone()).ok_or_else(|| {
                    RenderError::Config(format!("a terrain splat layer is not {sw}x{sh} RGBA8"))
                })
            })
            .collect::<Result<_, _>>()?;
        let (splat, b2) = array_texture(ctx, "terrain splat", wgpu::TextureFormat::Rgba8Unorm, splat, array);
        let (hw, hh) = (scene.heights.width, scene.heights.height);
        let relief = image::RgbaImage::from_raw(hw, hh, scene.normal_map())
            .ok_or_else(|| RenderError::Config("terrain normal map of the wrong size".into()))?;
        let (relief, b3) = array_texture(
            ctx,
            "terrain relief",
            wgpu::TextureFormat::Rgba8Unorm,
            vec![relief],
            wgpu::TextureViewDimension::D2,
        );
        let sampler = |label, mode| {
            device.create_sampler(&wgpu::SamplerDescriptor {
                label: Some(label),
                address_mode_u: mode,
                address_mode_v: mode,
                mag_filter: wgpu::FilterMode::Linear,
                min_filter: wgpu::FilterMode::Linear,
                mipmap_filter: wgpu::MipmapFilterMode::Linear,
                ..Default::default()
            })
        };
        let repeat = sampler("terrain repeat", wgpu::AddressMode::Repeat);
        let clamp = sampler("terrain clamp", wgpu::AddressMode::ClampToEdge);
        let storage = |label, size: usize| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: size.max(16) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let grid = DecalGrid::new(&scene.decals);
        let decals = storage("terrain decals", MAX_DECALS * std::mem::size_of::<GpuDecal>());
        let cells = storage("terrain decal cells", grid.ranges.len() * 8);
        let indices = storage("terrain decal indices", MAX_DECAL_REFS * 4);
        let params = ParamsUniform {
            world: TERRAIN_WORLD.to_array(),
            repeat: MATERIAL_REPEAT,
            materials: scene.materials.len() as u32,
            cells: [grid.cells.0, grid.cells.1],
            cell: DECAL_CELL,
            splat_layers: scene.splat.layers.len() as u32,
        };
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("terrain params"),
            contents: bytemuck::bytes_of(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let layout = group_layout(device);
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("terrain"),
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::TextureView(&albedo) },
                wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::TextureView(&normals) },
                wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(&splat) },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&relief) },
                wgpu::BindGroupEntry { binding: 4, resource: wgpu::BindingResource::Sampler(&repeat) },
                wgpu::BindGroupEntry { binding: 5, resource: wgpu::BindingResource::Sampler(&clamp) },
                wgpu::BindGroupEntry { binding: 6, resource: decals.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 7, resource: cells.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 8, resource: indices.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 9, resource: params.as_entire_binding() },
            ],
        });
        let bytes = b0 + b1 + b2 + b3 + decals.size() + cells.size() + indices.size();
        let mut gpu = Self { layout, group, decals, cells, indices, list: Vec::new(), bytes };
        gpu.set_decals(&ctx.queue, scene.decals.clone())?;
        Ok(gpu)
    }

    /// Replaces the decals (and their grid) on the GPU.
    fn set_decals(&mut self, queue: &wgpu::Queue, list: Vec<Decal>) -> Result<(), RenderError> {
        let grid = DecalGrid::new(&list);
        if list.len() > MAX_DECALS || grid.indices.len() > MAX_DECAL_REFS {
            return Err(RenderError::Config(format!(
                "{} terrain decals in {} cell references: at most {MAX_DECALS} and {MAX_DECAL_REFS}",
                list.len(),
                grid.indices.len()
            )));
        }
        let gpu: Vec<GpuDecal> = list.iter().map(Decal::gpu).collect();
        if !gpu.is_empty() {
            queue.write_buffer(&self.decals, 0, bytemuck::cast_slice(&gpu));
        }
        queue.write_buffer(&self.cells, 0, bytemuck::cast_slice(&grid.ranges));
        if !grid.indices.is_empty() {
            queue.write_buffer(&self.indices, 0, bytemuck::cast_slice(&grid.indices));
        }
        self.list = list;
        Ok(())
    }

    /// Adds `decal`; returns the rectangle (mip-0 texels) to invalidate.
    pub fn add_decal(&mut self, queue: &wgpu::Queue, decal: Decal) -> Result<[u32; 4], RenderError> {
        let mut list = self.list.clone();
        list.push(decal);
        self.set_decals(queue, list)?;
        Ok(decal.rect())
    }

    /// The decals on the GPU.
    pub fn decals(&self) -> &[Decal] {
        &self.list
    }

    /// Bytes of the textures and buffers (what the direct path keeps resident).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Group 1 of `shaders/terrain.wgsl`.
fn group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let stages = wgpu::ShaderStages::FRAGMENT;
    let texture = |binding, view_dimension| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: stages,
        ty: wgpu::BindingType::Texture {
            sample_type: wgpu::TextureSampleType::Float { filterable: true },
            view_dimension,
            multisampled: false,
        },
        count: None,
    };
    let sampler = |binding| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: stages,
        ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
        count: None,
    };
    let storage = |binding| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: stages,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only: true },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let array = wgpu::TextureViewDimension::D2Array;
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("terrain"),
        entries: &[
            texture(0, array),
            texture(1, array),
            texture(2, array),
            texture(3, wgpu::TextureViewDimension::D2),
            sampler(4),
            sampler(5),
            storage(6),
            storage(7),
            storage(8),
            wgpu::BindGroupLayoutEntry {
                binding: 9,
                visibility: stages,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            },
        ],
    })
}

/// Draws the terrain's tiles: the composite at each texel, albedo and normal in one
/// pass (`shaders/terrain_produce.wgsl`).
pub struct TerrainProducer {
    layout: wgpu::BindGroupLayout,
    group: wgpu::BindGroup,
    pipeline: Option<wgpu::RenderPipeline>,
}

impl TerrainProducer {
    /// A producer drawing with `gpu`'s textures and decals.
    pub fn new(gpu: &TerrainGpu) -> Self {
        Self { layout: gpu.layout.clone(), group: gpu.group.clone(), pipeline: None }
    }
}

impl TileProducer for TerrainProducer {
    fn produce(&mut self, ctx: &GpuContext, encoder: &mut wgpu::CommandEncoder, batch: &ProduceBatch<'_>) {
        let device = &ctx.device;
        let layout = &self.layout;
        let pipeline = self.pipeline.get_or_insert_with(|| {
            batch.pipeline(device, &shaders::terrain_produce_source(), "vs_produce", "fs_produce", &[layout])
        });
        let mut pass = batch.begin_pass(encoder);
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, batch.bind_group(), &[]);
        pass.set_bind_group(1, &self.group, &[]);
        pass.draw(0..4, 0..batch.len());
    }
}

/// The produced atlas of the terrain: albedo and normal, stacked, at the scene's layout.
pub fn terrain_atlas(scene: &TerrainScene) -> Result<Atlas, RenderError> {
    Ok(Atlas::produced("terrain", &TerrainScene::layers(), scene.layout, true)?)
}

/// Virtual textures for `scene` with its producer, and the renderer drawing through
/// them: the one call capture, bench and the viewer make for the terrain.
pub fn open_terrain(
    ctx: &GpuContext,
    scene: &TerrainScene,
    config: VtConfig,
    color_format: wgpu::TextureFormat,
) -> Result<(VirtualTextures, TerrainRenderer), RenderError> {
    let gpu = TerrainGpu::new(ctx, scene)?;
    let producer = Box::new(TerrainProducer::new(&gpu));
    let vt = VirtualTextures::with_producer(ctx, Arc::new(terrain_atlas(scene)?), config, producer)?;
    let renderer = TerrainRenderer::new(ctx, &vt, scene, gpu, color_format);
    Ok((vt, renderer))
}

struct GpuMesh {
    vertices: wgpu::Buffer,
    indices: wgpu::Buffer,
    count: u32,
}

/// The terrain mesh drawn through the produced virtual texture, or with the composite
/// evaluated per pixel (the reference, enabled by [`Drawer::enable_reference`]).
pub struct TerrainRenderer {
    mesh: GpuMesh,
    frame_buffer: wgpu::Buffer,
    frame_group: wgpu::BindGroup,
    vt_pipeline: wgpu::RenderPipeline,
    feedback_target: bool,
    predicted: Option<PredictedPass>,
    direct: wgpu::RenderPipeline,
    direct_on: bool,
    gpu: TerrainGpu,
}

impl TerrainRenderer {
    /// The renderer of `scene` through `vt` (made by [`open_terrain`]), with `gpu`.
    pub fn new(
        ctx: &GpuContext,
        vt: &VirtualTextures,
        scene: &TerrainScene,
        gpu: TerrainGpu,
        color_format: wgpu::TextureFormat,
    ) -> Self {
        let device = &ctx.device;
        let m = scene.mesh();
        let mesh = GpuMesh {
            vertices: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("terrain"),
                contents: bytemuck::cast_slice(&m.vertices),
                usage: wgpu::BufferUsages::VERTEX,
            }),
            indices: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("terrain"),
                contents: bytemuck::cast_slice(&m.indices),
                usage: wgpu::BufferUsages::INDEX,
            }),
            count: m.indices.len() as u32,
        };
        let size = std::mem::size_of::<FrameUniform>() as u64;
        let (frame_layout, frame_buffer, frame_group) = frame_uniform(device, "terrain frame", size);
        let vt_src = shaders::terrain_vt_source();
        let (source, feedback_target) = vt_shader(device, vt, &vt_src, true, vt.builtin_feedback_target(ctx));
        let cull = Some(wgpu::Face::Back);
        let layouts = [Some(&frame_layout), Some(vt.bind_group_layout())];
        let vt_pipeline = mesh_pipeline(
            device,
            "terrain vt",
            source,
            &layouts,
            color_format,
            cull,
            Outputs::colour(feedback_target),
        );
        let predicted = PredictedPass::new(device, vt, &vt_src, &layouts, size, cull);
        let direct = mesh_pipeline(
            device,
            "terrain direct",
            shaders::terrain_direct_source(),
            &[Some(&frame_layout), Some(&gpu.layout)],
            color_format,
            cull,
            Outputs::Colour,
        );
        Self {
            mesh,
            frame_buffer,
            frame_group,
            vt_pipeline,
            feedback_target,
            predicted,
            direct,
            direct_on: false,
            gpu,
        }
    }

    /// The textures and decals (add a decal here, then invalidate its rectangle).
    pub fn gpu_mut(&mut self) -> &mut TerrainGpu {
        &mut self.gpu
    }

    /// Draws the direct evaluation into `color` whether or not the reference is enabled
    /// (what `tessera bench` times against the virtual texture).
    pub fn draw_direct(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    ) {
        let mut pass = SceneRenderer::pass_cleared(encoder, color, depth, None, timestamps, SKY);
        pass.set_pipeline(&self.direct);
        pass.set_bind_group(0, &self.frame_group, &[]);
        pass.set_bind_group(1, &self.gpu.group, &[]);
        self.draw_mesh(&mut pass);
    }

    fn draw_mesh(&self, pass: &mut wgpu::RenderPass<'_>) {
        pass.set_vertex_buffer(0, self.mesh.vertices.slice(..));
        pass.set_index_buffer(self.mesh.indices.slice(..), wgpu::IndexFormat::Uint32);
        pass.draw_indexed(0..self.mesh.count, 0, 0..1);
    }

    fn frame_uniform(camera: &Camera, aspect: f32) -> FrameUniform {
        let vp: Mat4 = camera.view_projection(aspect);
        let sun = SUN.normalize();
        FrameUniform {
            view_proj: vp.to_cols_array_2d(),
            light_dir: [sun.x, sun.y, sun.z, 0.0],
            eye: [camera.position.x, camera.position.y, camera.position.z, 1.0],
        }
    }
}

impl Drawer for TerrainRenderer {
    /// The reference is the composite evaluated per pixel: nothing to build from the
    /// atlas (a produced one has no texels to read).
    fn enable_reference(
        &mut self,
        _ctx: &GpuContext,
        _atlas: &Atlas,
        _max_anisotropy: u16,
        _pools: &[tessera::core::format::codec::TargetFormat],
    ) -> Result<(), RenderError> {
        self.direct_on = true;
        Ok(())
    }

    fn reference_bytes(&self) -> Option<u64> {
        self.direct_on.then(|| self.gpu.bytes())
    }

    fn set_camera(&self, queue: &wgpu::Queue, camera: &Camera, aspect: f32) {
        queue.write_buffer(&self.frame_buffer, 0, bytemuck::bytes_of(&Self::frame_uniform(camera, aspect)));
    }

    fn set_predicted_camera(&self, queue: &wgpu::Queue, camera: &Camera, aspect: f32) {
        if let Some(p) = &self.predicted {
            p.write(queue, bytemuck::bytes_of(&Self::frame_uniform(camera, aspect)));
        }
    }

    fn draw_predicted(&self, encoder: &mut wgpu::CommandEncoder, vt: &VirtualTextures, size: (u32, u32)) {
        let Some(p) = &self.predicted else { return };
        let Some(target) = vt.predicted_attachment(size.0, size.1) else { return };
        let Some(layer) = vt.layer(0) else { return };
        let mut pass = p.begin(encoder, &target);
        pass.set_bind_group(1, vt.bind_group(layer), &[]);
        self.draw_mesh(&mut pass);
    }

    fn draw_vt(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        vt: &VirtualTextures,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    ) {
        let feedback = feedback_for(vt, color, self.feedback_target);
        let Some(layer) = vt.layer(0) else { return };
        let mut pass = SceneRenderer::pass_cleared(encoder, color, depth, feedback.as_ref(), timestamps, SKY);
        pass.set_pipeline(&self.vt_pipeline);
        pass.set_bind_group(0, &self.frame_group, &[]);
        pass.set_bind_group(1, vt.bind_group(layer), &[]);
        self.draw_mesh(&mut pass);
    }

    fn draw_reference(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    ) {
        if self.direct_on {
            self.draw_direct(encoder, color, depth, timestamps);
        }
    }

    fn add_terrain_decal(
        &mut self,
        queue: &wgpu::Queue,
        decal: Decal,
    ) -> Result<Option<[u32; 4]>, RenderError> {
        self.gpu.add_decal(queue, decal).map(Some)
    }
}
