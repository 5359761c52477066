//! The GPU set-up both scenes share: one uniform buffer in a bind group of its own, and a
//! pipeline that draws a vertex-less mesh (positions made in the vertex shader) with
//! `vt.wgsl` and the scene's WGSL in one module.

use tessera::wgpu;

/// A uniform buffer of `size` bytes at binding 0 of a group of its own.
pub(crate) struct Uniform {
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) group: wgpu::BindGroup,
}

impl Uniform {
    /// The buffer, its layout (seen by `visibility`) and its group, all labelled `label`.
    pub(crate) fn new(device: &wgpu::Device, label: &str, visibility: wgpu::ShaderStages, size: u64) -> Self {
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(label),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility,
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
        Self { layout, buffer, group }
    }
}

/// A pipeline of `vt.wgsl` followed by `scene_wgsl` (entry points `vs_main` with no vertex
/// buffer, `fs_main`), bind groups `layouts`, drawing into one `color_format` target.
pub(crate) fn scene_pipeline(
    device: &wgpu::Device,
    label: &str,
    scene_wgsl: &str,
    layouts: &[Option<&wgpu::BindGroupLayout>],
    color_format: wgpu::TextureFormat,
) -> wgpu::RenderPipeline {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(format!("{}\n{}", tessera::shaders::VT_WGSL, scene_wgsl).into()),
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(label),
        bind_group_layouts: layouts,
        immediate_size: 0,
    });
    device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some(label),
        layout: Some(&pipeline_layout),
        vertex: wgpu::VertexState {
            module: &module,
            entry_point: Some("vs_main"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        primitive: wgpu::PrimitiveState::default(),
        depth_stencil: None,
        multisample: wgpu::MultisampleState::default(),
        fragment: Some(wgpu::FragmentState {
            module: &module,
            entry_point: Some("fs_main"),
            compilation_options: Default::default(),
            targets: &[Some(color_format.into())],
        }),
        multiview_mask: None,
        cache: None,
    })
}
