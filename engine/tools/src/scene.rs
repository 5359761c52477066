//! The built-in scene (ground plane, globe, cube) drawn through the virtual texture,
//! and the same scene drawn through fully resident reference textures.

use bytemuck::{Pod, Zeroable};
use glam::{Mat4, Vec3};
use tessera::core::format::atlas::Atlas;
use tessera::core::scene::camera::Camera;
use tessera::core::scene::{Mesh, Vertex};
use wgpu::util::DeviceExt;

use crate::drawer::Drawer;
use crate::reference::{self, ReferenceTexture};
use crate::shaders;
use tessera::FeedbackAttachment;
use tessera::GpuContext;
use tessera::RenderError;
use tessera::VirtualTextures;

/// Depth buffer format.
pub const DEPTH_FORMAT: wgpu::TextureFormat = tessera::PREDICTED_DEPTH_FORMAT;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct FrameUniform {
    view_proj: [[f32; 4]; 4],
    light_dir: [f32; 4],
}

struct GpuMesh {
    vertices: wgpu::Buffer,
    indices: wgpu::Buffer,
    count: u32,
    layer: usize,
}

struct ReferencePass {
    pipeline: wgpu::RenderPipeline,
    groups: Vec<wgpu::BindGroup>,
    bytes: u64,
}

/// Meshes, camera uniform and pipelines of the built-in scene.
pub struct SceneRenderer {
    meshes: Vec<GpuMesh>,
    frame_buffer: wgpu::Buffer,
    frame_group: wgpu::BindGroup,
    frame_layout: wgpu::BindGroupLayout,
    vt_pipeline: wgpu::RenderPipeline,
    /// Whether `vt_pipeline` writes feedback to the colour target (its pass attaches it).
    feedback_target: bool,
    predicted: Option<PredictedPass>,
    reference: Option<ReferencePass>,
    color_format: wgpu::TextureFormat,
}

fn vertex_layout() -> wgpu::VertexBufferLayout<'static> {
    const ATTRS: [wgpu::VertexAttribute; 3] =
        wgpu::vertex_attr_array![0 => Float32x3, 1 => Float32x3, 2 => Float32x2];
    wgpu::VertexBufferLayout {
        array_stride: std::mem::size_of::<Vertex>() as u64,
        step_mode: wgpu::VertexStepMode::Vertex,
        attributes: &ATTRS,
    }
}

fn pipeline(
    device: &wgpu::Device,
    label: &str,
    source: String,
    layouts: &[Option<&wgpu::BindGroupLayout>],
    color_format: wgpu::TextureFormat,
    outputs: Outputs,
) -> wgpu::RenderPipeline {
    mesh_pipeline(device, label, source, layouts, color_format, Some(wgpu::Face::Back), outputs)
}

/// What a mesh pipeline's fragment stage writes, and from which entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outputs {
    /// `fs_main`: the colour.
    Colour,
    /// `fs_main_feedback`: the colour, then the request for the feedback target.
    ColourAndFeedback,
    /// `fs_request`: only the request, into the prediction's feedback target.
    Feedback,
    /// A translucent surface: the colour blended over what is behind by its alpha,
    /// depth tested but not written. In a pass with a feedback target (`fs_main_feedback`,
    /// the target declared but never written, so the opaque surface behind keeps its
    /// request) the shader must request through the storage bitset.
    Translucent {
        /// Whether the pass has the feedback target.
        feedback: bool,
    },
}

impl Outputs {
    /// The colour outputs of a virtual-texture pass, with the feedback target or not.
    pub(crate) fn colour(feedback_target: bool) -> Self {
        if feedback_target { Self::ColourAndFeedback } else { Self::Colour }
    }
}

/// A built-in drawer's virtual-texture shader from `src`: reading the page table `vt`
/// keeps, and writing feedback the way its configuration says (to the feedback target,
/// or to the storage bitset with the depth test forced early where `early` allows it
/// and the device can). Returns the source and whether it writes the feedback target
/// (entry point `fs_main_feedback`, see [`mesh_pipeline`]).
pub(crate) fn vt_shader(
    device: &wgpu::Device,
    vt: &VirtualTextures,
    src: &str,
    early: bool,
    target: bool,
) -> (String, bool) {
    let src = shaders::with_page_table(src, vt.page_table_storage());
    if target {
        (shaders::with_feedback_target(&src), true)
    } else if early && vt.early_depth_on(device) {
        (shaders::with_early_depth_test(&src), false)
    } else {
        (src, false)
    }
}

/// The predicted view's pass of a built-in drawer: a pipeline writing requests only
/// (`fs_request`, into [`VirtualTextures::predicted_attachment`]) and the camera
/// uniform it draws with (group 0, the drawer's frame layout).
pub(crate) struct PredictedPass {
    pipeline: wgpu::RenderPipeline,
    buffer: wgpu::Buffer,
    group: wgpu::BindGroup,
}

impl PredictedPass {
    /// The pass for a drawer whose virtual-texture shader is `src`, with `layouts` (the
    /// frame layout first) and a frame uniform of `size` bytes; `None` unless `vt`
    /// takes predictions.
    pub(crate) fn new(
        device: &wgpu::Device,
        vt: &VirtualTextures,
        src: &str,
        layouts: &[Option<&wgpu::BindGroupLayout>],
        size: u64,
        cull_mode: Option<wgpu::Face>,
    ) -> Option<Self> {
        if !vt.config().prediction {
            return None;
        }
        let frame_layout = layouts.first().copied().flatten()?;
        let source = shaders::with_page_table(src, vt.page_table_storage());
        let pipeline = mesh_pipeline(
            device,
            "predicted view",
            source,
            layouts,
            tessera::FEEDBACK_TARGET_FORMAT,
            cull_mode,
            Outputs::Feedback,
        );
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("predicted view camera"),
            size,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("predicted view camera"),
            layout: frame_layout,
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() }],
        });
        Some(Self { pipeline, buffer, group })
    }

    /// Sets the predicted view's frame uniform.
    pub(crate) fn write(&self, queue: &wgpu::Queue, bytes: &[u8]) {
        queue.write_buffer(&self.buffer, 0, bytes);
    }

    /// Begins the predicted view's pass into `target` (with its depth), pipeline and
    /// camera set.
    pub(crate) fn begin<'a>(
        &'a self,
        encoder: &'a mut wgpu::CommandEncoder,
        target: &'a FeedbackAttachment,
    ) -> wgpu::RenderPass<'a> {
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("predicted view"),
            color_attachments: &[Some(target.attachment())],
            depth_stencil_attachment: target.depth_attachment(),
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.group, &[]);
        pass
    }
}

/// The feedback attachment for a pass drawing into `color` through `vt`, when the
/// drawers write feedback to a target.
pub(crate) fn feedback_for(
    vt: &VirtualTextures,
    color: &wgpu::TextureView,
    target: bool,
) -> Option<FeedbackAttachment> {
    target.then(|| {
        let size = color.texture().size();
        vt.feedback_attachment(size.width, size.height)
    })
}

/// The per-frame uniform of a scene: a bind group layout with one uniform buffer at
/// binding 0 (vertex and fragment stages), a writable buffer of `size` bytes and its group.
pub(crate) fn frame_uniform(
    device: &wgpu::Device,
    label: &str,
    size: u64,
) -> (wgpu::BindGroupLayout, wgpu::Buffer, wgpu::BindGroup) {
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(label),
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
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout: &layout,
        entries: &[wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() }],
    });
    (layout, buffer, group)
}

/// A pipeline drawing [`Vertex`] meshes with depth, from a WGSL source with `vs_main`
/// and the fragment entry point of `outputs`, into `color_format` and / or a target of
/// [`tessera::FEEDBACK_TARGET_FORMAT`].
pub(crate) fn mesh_pipeline(
    device: &wgpu::Device,
    label: &str,
    source: String,
    layouts: &[Option<&wgpu::BindGroupLayout>],
    color_format: wgpu::TextureFormat,
    cull_mode: Option<wgpu::Face>,
    outputs: Outputs,
) -> wgpu::RenderPipeline {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(label),
        bind_group_layouts: layouts,
        immediate_size: 0,
    });
    let colour = Some(color_format.into());
    let feedback = Some(tessera::FEEDBACK_TARGET_FORMAT.into());
    let blended = Some(wgpu::ColorTargetState {
        format: color_format,
        blend: Some(wgpu::BlendState::ALPHA_BLENDING),
        write_mask: wgpu::ColorWrites::ALL,
    });
    let unwritten = Some(wgpu::ColorTargetState {
        format: tessera::FEEDBACK_TARGET_FORMAT,
        blend: None,
        write_mask: wgpu::ColorWrites::empty(),
    });
    let (entry, targets) = match outputs {
        Outputs::Colour => ("fs_main", vec![colour]),
        Outputs::ColourAndFeedback => ("fs_main_feedback", vec![colour, feedback]),
        Outputs::Feedback => ("fs_request", vec![feedback]),
        Outputs::Translucent { feedback: false } => ("fs_main", vec![blended]),
        Outputs::Translucent { feedback: true } => ("fs_main_feedback", vec![blended, unwritten]),
    };
    let translucent = matches!(outputs, Outputs::Translucent { .. });
    device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some(label),
        layout: Some(&layout),
        vertex: wgpu::VertexState {
            module: &module,
            entry_point: Some("vs_main"),
            compilation_options: Default::default(),
            buffers: &[Some(vertex_layout())],
        },
        primitive: wgpu::PrimitiveState { cull_mode, ..Default::default() },
        depth_stencil: Some(wgpu::DepthStencilState {
            format: DEPTH_FORMAT,
            depth_write_enabled: Some(!translucent),
            depth_compare: Some(wgpu::CompareFunction::Less),
            stencil: Default::default(),
            bias: Default::default(),
        }),
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            targets: &targets,
        }),
        multiview_mask: None,
        cache: None,
    })
}

/// The colour behind every scene; the built-in scene's shader (`scene.wgsl`, `BACKGROUND`)
/// shows it through transparent texels, so that a raster's nodata and alpha look like
/// holes in the surface.
pub const BACKGROUND: wgpu::Color = wgpu::Color { r: 0.05, g: 0.06, b: 0.08, a: 1.0 };

impl SceneRenderer {
    /// Uploads `meshes` (name, mesh, layer sampled) and builds the virtual-texture pipeline.
    pub fn new(
        ctx: &GpuContext,
        vt: &VirtualTextures,
        meshes: &[(String, Mesh, usize)],
        color_format: wgpu::TextureFormat,
    ) -> Self {
        let device = &ctx.device;
        let meshes = meshes
            .iter()
            .map(|(name, m, layer)| GpuMesh {
                vertices: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some(name),
                    contents: bytemuck::cast_slice(&m.vertices),
                    usage: wgpu::BufferUsages::VERTEX,
                }),
                indices: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some(name),
                    contents: bytemuck::cast_slice(&m.indices),
                    usage: wgpu::BufferUsages::INDEX,
                }),
                count: m.indices.len() as u32,
                layer: *layer,
            })
            .collect();
        let (frame_layout, frame_buffer, frame_group) =
            frame_uniform(device, "frame", std::mem::size_of::<FrameUniform>() as u64);
        let (source, feedback_target) =
            vt_shader(device, vt, &shaders::scene_vt_source(), true, vt.builtin_feedback_target(ctx));
        let vt_pipeline = pipeline(
            device,
            "scene vt",
            source,
            &[Some(&frame_layout), Some(vt.bind_group_layout())],
            color_format,
            Outputs::colour(feedback_target),
        );
        let predicted = PredictedPass::new(
            device,
            vt,
            &shaders::scene_vt_source(),
            &[Some(&frame_layout), Some(vt.bind_group_layout())],
            std::mem::size_of::<FrameUniform>() as u64,
            Some(wgpu::Face::Back),
        );
        Self {
            meshes,
            frame_buffer,
            frame_group,
            frame_layout,
            vt_pipeline,
            feedback_target,
            predicted,
            reference: None,
            color_format,
        }
    }

    /// The frame uniform of `camera`.
    fn frame_uniform(camera: &Camera, aspect: f32) -> FrameUniform {
        let vp: Mat4 = camera.view_projection(aspect);
        let light = Vec3::new(0.4, 1.0, 0.3).normalize();
        FrameUniform { view_proj: vp.to_cols_array_2d(), light_dir: [light.x, light.y, light.z, 0.0] }
    }

    /// Draws every mesh through the virtual textures, each with its layer's group.
    fn draw_meshes(&self, pass: &mut wgpu::RenderPass<'_>, vt: &VirtualTextures) {
        for m in &self.meshes {
            // A mesh whose layer the atlas lacks (or a stacked atlas, sampled through
            // layer 0's group) uses layer 0.
            let Some(layer) = vt.layer(m.layer).or_else(|| vt.layer(0)) else { continue };
            pass.set_bind_group(1, vt.bind_group(layer), &[]);
            pass.set_vertex_buffer(0, m.vertices.slice(..));
            pass.set_index_buffer(m.indices.slice(..), wgpu::IndexFormat::Uint32);
            pass.draw_indexed(0..m.count, 0, 0..1);
        }
    }

    /// A render pass clearing `color` and `depth`, for drawing a scene, with the
    /// feedback target as its second colour attachment when given.
    pub(crate) fn pass<'a>(
        encoder: &'a mut wgpu::CommandEncoder,
        color: &'a wgpu::TextureView,
        depth: &'a wgpu::TextureView,
        feedback: Option<&'a FeedbackAttachment>,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'a>>,
    ) -> wgpu::RenderPass<'a> {
        Self::pass_cleared(encoder, color, depth, feedback, timestamps, BACKGROUND)
    }

    /// [`SceneRenderer::pass`] clearing `color` to `clear`.
    pub(crate) fn pass_cleared<'a>(
        encoder: &'a mut wgpu::CommandEncoder,
        color: &'a wgpu::TextureView,
        depth: &'a wgpu::TextureView,
        feedback: Option<&'a FeedbackAttachment>,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'a>>,
        clear: wgpu::Color,
    ) -> wgpu::RenderPass<'a> {
        let attachments = [
            Some(wgpu::RenderPassColorAttachment {
                view: color,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(clear), store: wgpu::StoreOp::Store },
            }),
            feedback.map(FeedbackAttachment::attachment),
        ];
        // A trailing `None` would not match a one-target pipeline.
        let count = if feedback.is_some() { 2 } else { 1 };
        encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("scene"),
            color_attachments: &attachments[..count],
            depth_stencil_attachment: Some(wgpu::RenderPassDepthStencilAttachment {
                view: depth,
                depth_ops: Some(wgpu::Operations {
                    load: wgpu::LoadOp::Clear(1.0),
                    store: wgpu::StoreOp::Discard,
                }),
                stencil_ops: None,
            }),
            timestamp_writes: timestamps,
            occlusion_query_set: None,
            multiview_mask: None,
        })
    }
}

/// An offscreen colour + depth target that can be read back.
pub struct OffscreenTarget {
    /// Colour texture (sRGB RGBA8).
    pub color: wgpu::Texture,
    /// Its view.
    pub color_view: wgpu::TextureView,
    /// Depth view.
    pub depth_view: wgpu::TextureView,
    /// Size in pixels.
    pub size: (u32, u32),
    readback: wgpu::Buffer,
    padded_row: u32,
}

/// Colour format of offscreen targets.
pub const TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

impl OffscreenTarget {
    /// A `width × height` target.
    pub fn new(device: &wgpu::Device, width: u32, height: u32) -> Self {
        let size = wgpu::Extent3d { width, height, depth_or_array_layers: 1 };
        let color = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("offscreen colour"),
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: TARGET_FORMAT,
            // TEXTURE_BINDING: a window can blit the target to its surface.
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT
                | wgpu::TextureUsages::COPY_SRC
                | wgpu::TextureUsages::TEXTURE_BINDING,
            view_formats: &[],
        });
        let depth = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("offscreen depth"),
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: DEPTH_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
            view_formats: &[],
        });
        let padded_row = (width * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("offscreen readback"),
            size: u64::from(padded_row) * u64::from(height),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Self {
            color_view: color.create_view(&Default::default()),
            depth_view: depth.create_view(&Default::default()),
            color,
            size: (width, height),
            readback,
            padded_row,
        }
    }

    /// Records a copy of the colour texture into the readback buffer.
    pub fn copy_out(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.copy_texture_to_buffer(
            self.color.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &self.readback,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(self.padded_row),
                    rows_per_image: Some(self.size.1),
                },
            },
            wgpu::Extent3d { width: self.size.0, height: self.size.1, depth_or_array_layers: 1 },
        );
    }

    /// Waits for the copy recorded by [`OffscreenTarget::copy_out`] and returns RGBA8
    /// rows (sRGB). Blocks: for captures and tests, not for the interactive loop. Fails
    /// with [`RenderError::DeviceLost`] on a lost device (never waits forever).
    pub fn read(&self, ctx: &GpuContext) -> Result<Vec<u8>, RenderError> {
        ctx.map_read(&self.readback)?;
        let (w, h) = self.size;
        let mut out = Vec::with_capacity((w * h * 4) as usize);
        {
            let view =
                self.readback.get_mapped_range(..).map_err(|e| RenderError::Readback(e.to_string()))?;
            for row in view.chunks(self.padded_row as usize).take(h as usize) {
                out.extend_from_slice(&row[..(w * 4) as usize]);
            }
        }
        self.readback.unmap();
        Ok(out)
    }
}

/// The meshes of the built-in scene and which layer each samples: the globe takes
/// layer 1 when the atlas has one (and is not stacked).
pub fn builtin_meshes(atlas: &Atlas) -> Vec<(String, tessera::core::scene::Mesh, usize)> {
    let l = &atlas.layers()[0].layout;
    let aspect = l.width() as f32 / l.height() as f32;
    tessera::core::scene::builtin_scene(aspect)
        .into_iter()
        .map(|(name, mesh)| {
            // A stacked atlas's layers are one texture's maps, sampled together.
            let layer =
                if name == "globe" && atlas.layers().len() > 1 && !atlas.is_stacked() { 1 } else { 0 };
            (name, mesh, layer)
        })
        .collect()
}

impl Drawer for SceneRenderer {
    /// Builds the fully resident reference textures of every layer the meshes use.
    fn enable_reference(
        &mut self,
        ctx: &GpuContext,
        atlas: &Atlas,
        max_anisotropy: u16,
        pools: &[tessera::core::format::codec::TargetFormat],
    ) -> Result<(), RenderError> {
        let device = &ctx.device;
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("reference"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 1,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Texture {
                        sample_type: wgpu::TextureSampleType::Float { filterable: true },
                        view_dimension: wgpu::TextureViewDimension::D2,
                        multisampled: false,
                    },
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
                    count: None,
                },
            ],
        });
        let sampler = device.create_sampler(&wgpu::SamplerDescriptor {
            label: Some("reference"),
            mag_filter: wgpu::FilterMode::Linear,
            min_filter: wgpu::FilterMode::Linear,
            mipmap_filter: wgpu::MipmapFilterMode::Linear,
            anisotropy_clamp: max_anisotropy.clamp(1, 16),
            ..Default::default()
        });
        let layers = self.meshes.iter().map(|m| m.layer).max().unwrap_or(0) + 1;
        let mut groups = Vec::new();
        let mut bytes = 0;
        for layer in 0..layers.min(atlas.layers().len()) {
            let ReferenceTexture { view, mut params, bytes: b, .. } =
                reference::build(ctx, atlas, layer, reference::pool_of(pools, layer))?;
            params.set_anisotropic(max_anisotropy);
            bytes += b;
            let ubuf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("reference params"),
                contents: bytemuck::bytes_of(&params),
                usage: wgpu::BufferUsages::UNIFORM,
            });
            groups.push(device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("reference"),
                layout: &layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: ubuf.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::TextureView(&view) },
                    wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::Sampler(&sampler) },
                ],
            }));
        }
        let pipeline = pipeline(
            device,
            "scene reference",
            shaders::scene_reference_source(),
            &[Some(&self.frame_layout), Some(&layout)],
            self.color_format,
            Outputs::Colour,
        );
        self.reference = Some(ReferencePass { pipeline, groups, bytes });
        Ok(())
    }

    /// GPU bytes of the reference textures, when enabled.
    fn reference_bytes(&self) -> Option<u64> {
        self.reference.as_ref().map(|r| r.bytes)
    }

    /// Sets the camera for the next draws.
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
        let mut pass = p.begin(encoder, &target);
        self.draw_meshes(&mut pass, vt);
    }

    /// Draws the scene through the virtual textures.
    fn draw_vt(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        vt: &VirtualTextures,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    ) {
        // As the pipeline was built (VirtualTextures::builtin_feedback_target).
        let feedback = feedback_for(vt, color, self.feedback_target);
        let mut pass = Self::pass(encoder, color, depth, feedback.as_ref(), timestamps);
        pass.set_pipeline(&self.vt_pipeline);
        pass.set_bind_group(0, &self.frame_group, &[]);
        self.draw_meshes(&mut pass, vt);
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
        let mut pass = Self::pass(encoder, color, depth, None, timestamps);
        pass.set_pipeline(&r.pipeline);
        pass.set_bind_group(0, &self.frame_group, &[]);
        for m in &self.meshes {
            pass.set_bind_group(1, &r.groups[m.layer.min(r.groups.len() - 1)], &[]);
            pass.set_vertex_buffer(0, m.vertices.slice(..));
            pass.set_index_buffer(m.indices.slice(..), wgpu::IndexFormat::Uint32);
            pass.draw_indexed(0..m.count, 0, 0..1);
        }
    }
}
