//! Material scenes (glTF meshes with albedo, normal and roughness-metal maps) drawn
//! through one stacked virtual texture, and the same scene through fully resident
//! reference textures. The GPU-free side (import, packing, the manifest that maps each
//! material to its rectangle) lives in `tessera::core::scene::material_scene` and
//! `tessera::core::scene::scene_bake`.

use bytemuck::{Pod, Zeroable};
use glam::Vec3;
use tessera::core::format::atlas::{Atlas, Wrap};
use tessera::core::scene::camera::Camera;
use tessera::core::scene::material_scene::MaterialScene;
use tessera::core::scene::scene_bake::SceneManifest;
use wgpu::util::DeviceExt;

use crate::drawer::Drawer;
use crate::reference;
use crate::scene::{
    Outputs, PredictedPass, SceneRenderer, feedback_for, frame_uniform, mesh_pipeline, vt_shader,
};
use crate::shaders;
use tessera::GpuContext;
use tessera::RenderError;
use tessera::VirtualTextures;

/// Direction the light travels when the scene has no directional light of its own.
pub const DEFAULT_SUN: Vec3 = Vec3::new(-0.35, -1.0, -0.45);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct FrameUniform {
    view_proj: [[f32; 4]; 4],
    camera_pos: [f32; 4],
    light_dir: [f32; 4],
    light_colour: [f32; 4],
}

/// `Material` in `shaders/material.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct MaterialUniform {
    base_colour: [f32; 4],
    rect: [f32; 4],
    rect_texels: [f32; 2],
    wrap: [f32; 2],
    metallic: f32,
    roughness: f32,
    normal_scale: f32,
    alpha_cutoff: f32,
    max_lod: f32,
    textured: f32,
    has_normal_map: f32,
    blend: f32,
}

/// Dynamic-offset stride of the material buffer (the WebGPU minimum alignment).
const MATERIAL_STRIDE: u64 = 256;

struct GpuMesh {
    vertices: wgpu::Buffer,
    indices: wgpu::Buffer,
    count: u32,
    material: u32,
    /// Its material discards below an alpha cutoff (drawn without forced early depth).
    masked: bool,
    /// Its material blends by its alpha: drawn after the others, far to near.
    blend: bool,
    /// The centre of its bounds, for that order.
    centre: Vec3,
}

struct ReferencePass {
    pipeline: wgpu::RenderPipeline,
    /// For blended materials, when the scene has any.
    blend: Option<wgpu::RenderPipeline>,
    group: wgpu::BindGroup,
    bytes: u64,
}

/// The pipelines of one pass, by how a material treats alpha.
#[derive(Clone, Copy)]
struct Pipelines<'a> {
    opaque: &'a wgpu::RenderPipeline,
    masked: &'a wgpu::RenderPipeline,
    /// `None` only when the scene has no blended material.
    blend: Option<&'a wgpu::RenderPipeline>,
}

/// The meshes, materials and pipelines of a baked material scene.
pub struct MaterialRenderer {
    /// Opaque and masked meshes first, then blended ones from `first_blend` on.
    meshes: Vec<GpuMesh>,
    first_blend: usize,
    frame_buffer: wgpu::Buffer,
    frame_group: wgpu::BindGroup,
    frame_layout: wgpu::BindGroupLayout,
    material_layout: wgpu::BindGroupLayout,
    material_group: wgpu::BindGroup,
    vt_pipeline: wgpu::RenderPipeline,
    /// The VT pipeline with forced early depth, for opaque materials (when available).
    vt_pipeline_early: Option<wgpu::RenderPipeline>,
    /// The VT pipeline of blended materials: feedback through the storage bitset
    /// (a request in the feedback target would replace the request of the surface
    /// behind), the depth test forced early where the device allows (valid: such a
    /// shader never discards nor writes depth). Built when the scene has blended
    /// materials.
    vt_pipeline_blend: Option<wgpu::RenderPipeline>,
    /// Whether the VT pipelines write feedback to the colour target (else the storage
    /// bitset: also on a software adapter, see `VtConfig::feedback_target_on_software`).
    feedback_target: bool,
    /// Where the camera of the next draws is (blended meshes are drawn far to near).
    eye: std::sync::Mutex<Vec3>,
    /// The predicted view's pass, when the virtual textures take predictions.
    predicted: Option<PredictedPass>,
    reference: Option<ReferencePass>,
    color_format: wgpu::TextureFormat,
    sun: Vec3,
    triangles: usize,
}

fn uniform_entry(binding: u32, dynamic: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: dynamic,
            min_binding_size: None,
        },
        count: None,
    }
}

fn material_uniform(
    m: &tessera::core::scene::scene_bake::PackedMaterial,
    size: (f32, f32),
) -> MaterialUniform {
    let (rect, texels) = match m.rect {
        Some([x, y, w, h]) => (
            [x as f32 / size.0, y as f32 / size.1, w as f32 / size.0, h as f32 / size.1],
            [w as f32, h as f32],
        ),
        None => ([0.0, 0.0, 1.0 / size.0, 1.0 / size.1], [1.0, 1.0]),
    };
    let wrap = |w: Wrap| if w == Wrap::Repeat { 1.0 } else { 0.0 };
    MaterialUniform {
        base_colour: m.base_color_factor,
        rect,
        rect_texels: texels,
        wrap: [wrap(m.wrap[0]), wrap(m.wrap[1])],
        metallic: m.metallic_factor,
        roughness: m.roughness_factor,
        normal_scale: m.normal_scale,
        alpha_cutoff: m.alpha_cutoff.unwrap_or(-1.0),
        max_lod: m.max_mip as f32,
        textured: if m.rect.is_some() { 1.0 } else { 0.0 },
        has_normal_map: if m.has_normal_map && m.rect.is_some() { 1.0 } else { 0.0 },
        blend: if m.blend { 1.0 } else { 0.0 },
    }
}

impl MaterialRenderer {
    /// Uploads `scene`'s meshes and the materials of `manifest` (which must describe
    /// the atlas `vt` streams) and builds the virtual-texture pipeline.
    pub fn new(
        ctx: &GpuContext,
        vt: &VirtualTextures,
        scene: &MaterialScene,
        manifest: &SceneManifest,
        color_format: wgpu::TextureFormat,
    ) -> Result<Self, RenderError> {
        let atlas = vt.atlas();
        let lay = atlas.layers()[0].layout;
        if (lay.width(), lay.height()) != (manifest.width, manifest.height) {
            return Err(RenderError::Config(format!(
                "{}: the scene manifest describes a {}x{} virtual texture but the atlas is {}x{}; bake them together",
                atlas.path().display(),
                manifest.width,
                manifest.height,
                lay.width(),
                lay.height()
            )));
        }
        if manifest.materials.len() < scene.materials.len() {
            return Err(RenderError::Config(format!(
                "{}: the scene has {} materials but the manifest only {}; bake the atlas from this scene",
                atlas.path().display(),
                scene.materials.len(),
                manifest.materials.len()
            )));
        }
        if let Some(m) = scene.meshes.iter().find(|m| m.material >= manifest.materials.len()) {
            return Err(RenderError::Config(format!(
                "mesh '{}' uses material {} which the manifest lacks",
                m.name, m.material
            )));
        }
        let device = &ctx.device;
        let mut triangles = 0;
        let mut meshes: Vec<GpuMesh> =
            scene
                .meshes
                .iter()
                .filter(|m| !m.mesh.indices.is_empty())
                .map(|m| {
                    triangles += m.mesh.triangle_count();
                    let (lo, hi) =
                        m.mesh.vertices.iter().fold(
                            (Vec3::splat(f32::INFINITY), Vec3::splat(f32::NEG_INFINITY)),
                            |(lo, hi), v| (lo.min(v.position.into()), hi.max(v.position.into())),
                        );
                    let packed = manifest.materials.get(m.material);
                    GpuMesh {
                        vertices: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                            label: Some(&m.name),
                            contents: m.mesh.vertex_bytes(),
                            usage: wgpu::BufferUsages::VERTEX,
                        }),
                        indices: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                            label: Some(&m.name),
                            contents: m.mesh.index_bytes(),
                            usage: wgpu::BufferUsages::INDEX,
                        }),
                        count: m.mesh.indices.len() as u32,
                        material: m.material as u32,
                        masked: packed.is_some_and(|p| p.alpha_cutoff.is_some()),
                        blend: packed.is_some_and(|p| p.blend),
                        centre: (lo + hi) * 0.5,
                    }
                })
                .collect();
        meshes.sort_by_key(|m| m.blend);
        let first_blend = meshes.iter().position(|m| m.blend).unwrap_or(meshes.len());
        let size = (manifest.width as f32, manifest.height as f32);
        let mut material_bytes = vec![0u8; manifest.materials.len().max(1) * MATERIAL_STRIDE as usize];
        for (i, m) in manifest.materials.iter().enumerate() {
            let u = material_uniform(m, size);
            let at = i * MATERIAL_STRIDE as usize;
            material_bytes[at..at + std::mem::size_of::<MaterialUniform>()]
                .copy_from_slice(bytemuck::bytes_of(&u));
        }
        let material_buffer = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("materials"),
            contents: &material_bytes,
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let material_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("material"),
            entries: &[uniform_entry(0, true)],
        });
        let material_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("material"),
            layout: &material_layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &material_buffer,
                    offset: 0,
                    size: wgpu::BufferSize::new(std::mem::size_of::<MaterialUniform>() as u64),
                }),
            }],
        });
        let (frame_layout, frame_buffer, frame_group) =
            frame_uniform(device, "material frame", std::mem::size_of::<FrameUniform>() as u64);
        let layouts = [Some(&frame_layout), Some(vt.bind_group_layout()), Some(&material_layout)];
        // See VtConfig::feedback_target_on_software.
        let software = ctx.info.device_type == wgpu::DeviceType::Cpu;
        let target = if software {
            vt.config().feedback_target && vt.config().feedback_target_on_software
        } else {
            vt.builtin_feedback_target(ctx)
        };
        let (source, feedback_target) = vt_shader(device, vt, &shaders::material_vt_source(), false, target);
        let vt_pipeline = mesh_pipeline(
            device,
            "material vt",
            source,
            &layouts,
            color_format,
            None,
            Outputs::colour(feedback_target),
        );
        let predicted = PredictedPass::new(
            device,
            vt,
            &shaders::material_vt_source(),
            &layouts,
            std::mem::size_of::<FrameUniform>() as u64,
            None,
        );
        // Opaque materials with forced early depth where feedback goes to the storage
        // bitset (with a feedback target the shader has no side effect and the depth test
        // runs early anyway); alpha-tested ones keep the pipeline above, since their
        // fragments may be discarded after the test.
        let vt_pipeline_early = (!feedback_target && vt.early_depth_on(device)).then(|| {
            let (early, _) = vt_shader(device, vt, &shaders::material_vt_source(), true, false);
            mesh_pipeline(
                device,
                "material vt early depth",
                early,
                &layouts,
                color_format,
                None,
                Outputs::Colour,
            )
        });
        let vt_pipeline_blend = (first_blend < meshes.len()).then(|| {
            let src = shaders::with_page_table(&shaders::material_vt_source(), vt.page_table_storage());
            let src = if vt.early_depth_on(device) { shaders::with_early_depth_test(&src) } else { src };
            mesh_pipeline(
                device,
                "material vt blend",
                src,
                &layouts,
                color_format,
                None,
                Outputs::Translucent { feedback: feedback_target },
            )
        });
        Ok(Self {
            meshes,
            first_blend,
            frame_buffer,
            frame_group,
            frame_layout,
            material_layout,
            material_group,
            vt_pipeline,
            vt_pipeline_early,
            vt_pipeline_blend,
            feedback_target,
            eye: std::sync::Mutex::new(Vec3::ZERO),
            predicted,
            reference: None,
            color_format,
            sun: scene.sun_direction.unwrap_or(DEFAULT_SUN).normalize_or(DEFAULT_SUN.normalize()),
            triangles,
        })
    }

    /// Triangles drawn per frame.
    pub fn triangle_count(&self) -> usize {
        self.triangles
    }

    /// The frame uniform of `camera`, with the scene's sun.
    fn frame_uniform(&self, camera: &Camera, aspect: f32) -> FrameUniform {
        let vp = camera.view_projection(aspect);
        let p = camera.position;
        FrameUniform {
            view_proj: vp.to_cols_array_2d(),
            camera_pos: [p.x, p.y, p.z, 1.0],
            light_dir: [self.sun.x, self.sun.y, self.sun.z, 2.2],
            light_colour: [1.0, 0.97, 0.92, 0.35],
        }
    }

    /// Draws every mesh, blended ones last and far to near from the camera of
    /// [`Drawer::set_camera`]; with `pipelines`, each mesh with the pipeline of its
    /// material's alpha, else (the predicted view, which writes depth) the opaque and
    /// masked ones only, so a pane does not hide the requests of what lies behind it.
    /// Only the blended meshes are sorted, per draw.
    fn draw(&self, pass: &mut wgpu::RenderPass<'_>, pipelines: Option<Pipelines<'_>>) {
        let (solid, blended) = self.meshes.split_at(self.first_blend);
        for m in solid {
            if let Some(p) = pipelines {
                pass.set_pipeline(if m.masked { p.masked } else { p.opaque });
            }
            self.draw_mesh(pass, m);
        }
        let Some(blend) = pipelines.and_then(|p| p.blend).filter(|_| !blended.is_empty()) else { return };
        let eye = *self.eye.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut far_first: Vec<&GpuMesh> = blended.iter().collect();
        far_first.sort_by(|a, b| b.centre.distance_squared(eye).total_cmp(&a.centre.distance_squared(eye)));
        pass.set_pipeline(blend);
        for m in far_first {
            self.draw_mesh(pass, m);
        }
    }

    fn draw_mesh(&self, pass: &mut wgpu::RenderPass<'_>, m: &GpuMesh) {
        pass.set_bind_group(2, &self.material_group, &[m.material * MATERIAL_STRIDE as u32]);
        pass.set_vertex_buffer(0, m.vertices.slice(..));
        pass.set_index_buffer(m.indices.slice(..), wgpu::IndexFormat::Uint32);
        pass.draw_indexed(0..m.count, 0, 0..1);
    }
}

impl Drawer for MaterialRenderer {
    /// Builds fully resident reference textures of the atlas' first three layers (a
    /// layer the atlas lacks repeats layer 0).
    fn enable_reference(
        &mut self,
        ctx: &GpuContext,
        atlas: &Atlas,
        _max_anisotropy: u16,
        pools: &[tessera::core::format::codec::TargetFormat],
    ) -> Result<(), RenderError> {
        let device = &ctx.device;
        let tex = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::FRAGMENT,
            ty: wgpu::BindingType::Texture {
                sample_type: wgpu::TextureSampleType::Float { filterable: true },
                view_dimension: wgpu::TextureViewDimension::D2,
                multisampled: false,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("material reference"),
            entries: &[
                uniform_entry(0, false),
                tex(1),
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
                    count: None,
                },
                tex(3),
                tex(4),
            ],
        });
        let sampler = device.create_sampler(&wgpu::SamplerDescriptor {
            label: Some("material reference"),
            mag_filter: wgpu::FilterMode::Linear,
            min_filter: wgpu::FilterMode::Linear,
            mipmap_filter: wgpu::MipmapFilterMode::Linear,
            ..Default::default()
        });
        let n = atlas.layers().len().min(3);
        let textures: Vec<_> = (0..n)
            .map(|l| reference::build(ctx, atlas, l, reference::pool_of(pools, l)))
            .collect::<Result<_, _>>()?;
        let bytes = textures.iter().map(|t| t.bytes).sum();
        let view = |i: usize| &textures[i.min(n - 1)].view;
        let lay = atlas.layers()[0].layout;
        // MaterialReference in material_reference.wgsl (the tile's payload side: where the
        // bake's border rule of a material's rectangle applies).
        let params: [f32; 8] = [
            textures[0].params.uv_scale[0],
            textures[0].params.uv_scale[1],
            lay.width() as f32,
            lay.height() as f32,
            lay.tile_size() as f32,
            0.0,
            0.0,
            0.0,
        ];
        let ubuf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("material reference"),
            contents: bytemuck::cast_slice(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("material reference"),
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: ubuf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::TextureView(view(0)) },
                wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::Sampler(&sampler) },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(view(1)) },
                wgpu::BindGroupEntry { binding: 4, resource: wgpu::BindingResource::TextureView(view(2)) },
            ],
        });
        let layouts = [Some(&self.frame_layout), Some(&layout), Some(&self.material_layout)];
        let make = |label, outputs| {
            mesh_pipeline(
                device,
                label,
                shaders::material_reference_source(),
                &layouts,
                self.color_format,
                None,
                outputs,
            )
        };
        let pipeline = make("material reference", Outputs::Colour);
        let blend = (self.first_blend < self.meshes.len())
            .then(|| make("material reference blend", Outputs::Translucent { feedback: false }));
        self.reference = Some(ReferencePass { pipeline, blend, group, bytes });
        Ok(())
    }

    /// GPU bytes of the reference textures, when enabled.
    fn reference_bytes(&self) -> Option<u64> {
        self.reference.as_ref().map(|r| r.bytes)
    }

    /// Sets the camera (and the light) for the next draws.
    fn set_camera(&self, queue: &wgpu::Queue, camera: &Camera, aspect: f32) {
        queue.write_buffer(&self.frame_buffer, 0, bytemuck::bytes_of(&self.frame_uniform(camera, aspect)));
        *self.eye.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = camera.position;
    }

    fn set_predicted_camera(&self, queue: &wgpu::Queue, camera: &Camera, aspect: f32) {
        if let Some(p) = &self.predicted {
            p.write(queue, bytemuck::bytes_of(&self.frame_uniform(camera, aspect)));
        }
    }

    fn draw_predicted(&self, encoder: &mut wgpu::CommandEncoder, vt: &VirtualTextures, size: (u32, u32)) {
        let Some(p) = &self.predicted else { return };
        let Some(layer) = vt.layer(0) else { return };
        let Some(target) = vt.predicted_attachment(size.0, size.1) else { return };
        let mut pass = p.begin(encoder, &target);
        pass.set_bind_group(1, vt.bind_group(layer), &[]);
        self.draw(&mut pass, None);
    }

    /// Draws the scene through the virtual texture.
    fn draw_vt(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        vt: &VirtualTextures,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    ) {
        let Some(layer) = vt.layer(0) else { return };
        let group = vt.bind_group(layer);
        let feedback = feedback_for(vt, color, self.feedback_target);
        let mut pass = SceneRenderer::pass(encoder, color, depth, feedback.as_ref(), timestamps);
        pass.set_bind_group(0, &self.frame_group, &[]);
        pass.set_bind_group(1, group, &[]);
        let opaque = self.vt_pipeline_early.as_ref().unwrap_or(&self.vt_pipeline);
        self.draw(
            &mut pass,
            Some(Pipelines { opaque, masked: &self.vt_pipeline, blend: self.vt_pipeline_blend.as_ref() }),
        );
    }

    /// Draws the scene through the fully resident reference textures (no-op unless enabled).
    fn draw_reference(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    ) {
        let Some(r) = &self.reference else { return };
        let mut pass = SceneRenderer::pass(encoder, color, depth, None, timestamps);
        pass.set_bind_group(0, &self.frame_group, &[]);
        pass.set_bind_group(1, &r.group, &[]);
        self.draw(
            &mut pass,
            Some(Pipelines { opaque: &r.pipeline, masked: &r.pipeline, blend: r.blend.as_ref() }),
        );
    }
}
