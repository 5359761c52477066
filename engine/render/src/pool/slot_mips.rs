//! Level 1 of the tile pool on the hardware trilinear path: each uploaded slot's 2×
//! downsample, rendered for RGBA8 pools, encoded into BC1 / BC7 blocks by a compute pass
//! for block-compressed ones.

use super::*;

/// Level 1 of a two-level pool.
pub(super) enum SlotMips {
    /// Uncompressed pools: rendered.
    Rendered(RenderedMips),
    /// BC1 and BC7 pools: encoded by a compute pass, then copied.
    Encoded(EncodedMips),
}

/// Level 1 of a two-level uncompressed pool: one instanced draw that downsamples each
/// uploaded slot whose parent is out, and one that copies each other slot's parent
/// quadrant. The copies read and write the pool through its plain (`Unorm`) views, so
/// an sRGB pool's bytes move unconverted, bit for bit, as a texture copy would; one
/// draw instead of a copy command per slot, which on a hardware GPU waits for the one
/// before it (each copy into the pool is a transfer barrier: 347 slots of a burst took
/// 3.3 ms on an H100, issue 45).
pub(super) struct RenderedMips {
    /// Downsamples (step 2), in the pool's own format (sRGB: averaged in linear light).
    pipeline: wgpu::RenderPipeline,
    bind_group: wgpu::BindGroup,
    level1: wgpu::TextureView,
    /// Parent quadrant copies (step 1), through the plain views.
    copy_pipeline: wgpu::RenderPipeline,
    copy_bind_group: wgpu::BindGroup,
    copy_level1: wgpu::TextureView,
    /// The slots of one batch (`[u32; 2]` each) and how many the buffer holds.
    instances: Mutex<(wgpu::Buffer, u64)>,
}

/// One level-1 slot to make: the slot, the level-0 texel its level-1 texel 0 reads, and
/// the step between the texels read (1: a copy of the parent's quadrant, 2: a 2×
/// downsample); the instance of the rendered pass and the job of the encoding pass.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct SlotMipJob {
    pub(super) dst: [u32; 2],
    pub(super) src: [u32; 2],
    pub(super) step: u32,
    pub(super) _pad: u32,
}

impl SlotMipJob {
    /// The 2× downsample of `slot` (x, y) itself, for `slot_texels²` slots.
    pub(super) fn downsample(slot: [u32; 2], slot_texels: u32) -> Self {
        Self { dst: slot, src: [slot[0] * slot_texels, slot[1] * slot_texels], step: 2, _pad: 0 }
    }
}

/// Bytes of one instance of the level-1 pass: a [`SlotMipJob`].
pub(super) const SLOT_INSTANCE_BYTES: u64 = std::mem::size_of::<SlotMipJob>() as u64;

impl RenderedMips {
    /// Level 1 of `texture` in `format`, whose plain variant `raw` (the same for a
    /// linear pool) is among its view formats.
    pub(super) fn new(
        device: &wgpu::Device,
        texture: &wgpu::Texture,
        format: wgpu::TextureFormat,
        raw: wgpu::TextureFormat,
        slot_texels: u32,
    ) -> Self {
        let level = |base, format| {
            texture.create_view(&wgpu::TextureViewDescriptor {
                label: Some("tessera pool level"),
                format: Some(format),
                base_mip_level: base,
                mip_level_count: Some(1),
                ..Default::default()
            })
        };
        let (level0, level1) = (level(0, format), level(1, format));
        let (raw0, copy_level1) = (level(0, raw), level(1, raw));
        let size = texture.size().mip_level_size(1, wgpu::TextureDimension::D2);
        let params: [f32; 4] = [(slot_texels / 2) as f32, 0.0, size.width as f32, size.height as f32];
        let uniform = wgpu::util::DeviceExt::create_buffer_init(
            device,
            &wgpu::util::BufferInitDescriptor {
                label: Some("tessera slot mip params"),
                contents: bytemuck::cast_slice(&params),
                usage: wgpu::BufferUsages::UNIFORM,
            },
        );
        let sampler = device.create_sampler(&wgpu::SamplerDescriptor {
            label: Some("tessera slot mip sampler"),
            mag_filter: wgpu::FilterMode::Linear,
            min_filter: wgpu::FilterMode::Linear,
            ..Default::default()
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tessera slot mip"),
            source: wgpu::ShaderSource::Wgsl(crate::shaders::SLOT_MIP_WGSL.into()),
        });
        let frag = wgpu::ShaderStages::FRAGMENT;
        let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tessera slot mip"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: frag,
                    ty: wgpu::BindingType::Texture {
                        sample_type: wgpu::TextureSampleType::Float { filterable: true },
                        view_dimension: wgpu::TextureViewDimension::D2,
                        multisampled: false,
                    },
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 1,
                    visibility: frag,
                    ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
            ],
        });
        let bind = |view: &wgpu::TextureView| {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("tessera slot mip"),
                layout: &bgl,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::TextureView(view) },
                    wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::Sampler(&sampler) },
                    wgpu::BindGroupEntry { binding: 2, resource: uniform.as_entire_binding() },
                ],
            })
        };
        let (bind_group, copy_bind_group) = (bind(&level0), bind(&raw0));
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera slot mip"),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        let pipeline_for = |format| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some("tessera slot mip"),
                layout: Some(&layout),
                vertex: wgpu::VertexState {
                    module: &module,
                    entry_point: Some("vs_slot"),
                    compilation_options: Default::default(),
                    buffers: &[Some(wgpu::VertexBufferLayout {
                        array_stride: SLOT_INSTANCE_BYTES,
                        step_mode: wgpu::VertexStepMode::Instance,
                        attributes: &wgpu::vertex_attr_array![0 => Uint32x2, 1 => Uint32x2, 2 => Uint32],
                    })],
                },
                fragment: Some(wgpu::FragmentState {
                    module: &module,
                    entry_point: Some("fs_slot"),
                    compilation_options: Default::default(),
                    targets: &[Some(wgpu::ColorTargetState {
                        format,
                        blend: None,
                        write_mask: wgpu::ColorWrites::ALL,
                    })],
                }),
                primitive: wgpu::PrimitiveState {
                    topology: wgpu::PrimitiveTopology::TriangleStrip,
                    ..Default::default()
                },
                depth_stencil: None,
                multisample: wgpu::MultisampleState::default(),
                multiview_mask: None,
                cache: None,
            })
        };
        let (pipeline, copy_pipeline) = (pipeline_for(format), pipeline_for(raw));
        let instances = Mutex::new((Self::instance_buffer(device, 256), 256));
        Self { pipeline, bind_group, level1, copy_pipeline, copy_bind_group, copy_level1, instances }
    }

    fn instance_buffer(device: &wgpu::Device, slots: u64) -> wgpu::Buffer {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera slot mip instances"),
            size: slots * SLOT_INSTANCE_BYTES,
            usage: wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Records the level-1 passes over `slots` into `encoder` (after their uploads):
    /// one draw of the parent quadrant copies (step 1), one of the downsamples.
    pub(super) fn record(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        slots: &[SlotMipJob],
    ) {
        if slots.is_empty() {
            return;
        }
        let mut instances = self.instances.lock().unwrap_or_else(PoisonError::into_inner);
        let n = slots.len() as u64;
        if n > instances.1 {
            let capacity = n.next_power_of_two();
            *instances = (Self::instance_buffer(device, capacity), capacity);
        }
        let (copies, downsamples): (Vec<SlotMipJob>, Vec<SlotMipJob>) =
            slots.iter().partition(|j| j.step == 1);
        let ordered = [copies.as_slice(), downsamples.as_slice()].concat();
        queue.write_buffer(&instances.0, 0, bytemuck::cast_slice(&ordered));
        let copied = copies.len() as u64;
        let passes = [
            (&self.copy_level1, &self.copy_pipeline, &self.copy_bind_group, 0..copied),
            (&self.level1, &self.pipeline, &self.bind_group, copied..n),
        ];
        for (view, pipeline, bind_group, range) in passes {
            if range.is_empty() {
                continue;
            }
            let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("tessera slot mips"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations { load: wgpu::LoadOp::Load, store: wgpu::StoreOp::Store },
                })],
                depth_stencil_attachment: None,
                timestamp_writes: None,
                occlusion_query_set: None,
                multiview_mask: None,
            });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, bind_group, &[]);
            let count = (range.end - range.start) as u32;
            pass.set_vertex_buffer(
                0,
                instances.0.slice(range.start * SLOT_INSTANCE_BYTES..range.end * SLOT_INSTANCE_BYTES),
            );
            pass.draw(0..4, 0..count);
        }
    }
}

/// Level 1 of a two-level BC1 or BC7 pool: a compute pass downsamples each uploaded
/// slot and encodes it (`shaders/slot_mip_encode.wgsl`) into a buffer, copied into the
/// slot's place in level 1 (block-compressed textures cannot be rendered to).
pub(super) struct EncodedMips {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    level0: wgpu::TextureView,
    /// Side of a level-1 slot in texels (a whole number of blocks).
    half: u32,
    /// Blocks across a level-1 slot.
    blocks: u32,
    /// Bytes per row of blocks in the output buffer (aligned for the copy).
    row_bytes: u32,
    slot_texels: u32,
    srgb: bool,
    bc1: bool,
    /// The encoded blocks of [`ENCODE_CHUNK`] slots, reused by every chunk (commands run
    /// in order, so a later chunk only overwrites it after the earlier one's copies).
    out: wgpu::Buffer,
}

/// Slots encoded per dispatch: the scratch buffer holds this many level-1 slots (2.2 MiB
/// for BC7 136² slots), whatever the batch (filling a new pool uploads every slot).
pub(super) const ENCODE_CHUNK: usize = 256;

/// Invocations per workgroup of the encoding pass (`@workgroup_size` in the shader).
pub(super) const ENCODE_WORKGROUP: u32 = 64;

impl EncodedMips {
    pub(super) fn new(
        device: &wgpu::Device,
        texture: &wgpu::Texture,
        target: TargetFormat,
        srgb: bool,
        slot_texels: u32,
    ) -> Self {
        let level0 = texture.create_view(&wgpu::TextureViewDescriptor {
            label: Some("tessera pool level 0"),
            base_mip_level: 0,
            mip_level_count: Some(1),
            ..Default::default()
        });
        let half = slot_texels / 2;
        let blocks = half / 4;
        let block_bytes = if target == TargetFormat::Bc1 { 8 } else { 16 };
        let row_bytes = (blocks * block_bytes).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tessera slot mip encode"),
            source: wgpu::ShaderSource::Wgsl(crate::shaders::SLOT_MIP_ENCODE_WGSL.into()),
        });
        let compute = wgpu::ShaderStages::COMPUTE;
        let buffer = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: compute,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tessera slot mip encode"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: compute,
                    ty: wgpu::BindingType::Texture {
                        sample_type: wgpu::TextureSampleType::Float { filterable: true },
                        view_dimension: wgpu::TextureViewDimension::D2,
                        multisampled: false,
                    },
                    count: None,
                },
                buffer(1, wgpu::BufferBindingType::Uniform),
                buffer(2, wgpu::BufferBindingType::Storage { read_only: true }),
                buffer(3, wgpu::BufferBindingType::Storage { read_only: false }),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera slot mip encode"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("tessera slot mip encode"),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("encode"),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        let slot_out = u64::from(blocks) * u64::from(row_bytes);
        let out = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera slot mip blocks"),
            size: ENCODE_CHUNK as u64 * slot_out,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Self {
            pipeline,
            layout,
            level0,
            half,
            blocks,
            row_bytes,
            slot_texels,
            srgb,
            bc1: target == TargetFormat::Bc1,
            out,
        }
    }

    /// Records the encoding pass over `slots` and their copies into level 1 of
    /// `texture` into `encoder` (after their uploads), [`ENCODE_CHUNK`] slots at a time
    /// through the one scratch buffer (commands run in order, so each chunk's copies
    /// read it before the next chunk's pass writes it).
    pub(super) fn record(
        &self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        texture: &wgpu::Texture,
        slots: &[SlotMipJob],
    ) {
        for chunk in slots.chunks(ENCODE_CHUNK) {
            self.record_chunk(device, encoder, texture, chunk);
        }
    }

    fn record_chunk(
        &self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        texture: &wgpu::Texture,
        slots: &[SlotMipJob],
    ) {
        if slots.is_empty() {
            return;
        }
        let n = slots.len() as u64;
        let slot_out = u64::from(self.blocks) * u64::from(self.row_bytes);
        let params: [u32; 8] = [
            self.slot_texels,
            self.blocks,
            self.row_bytes / 4,
            slots.len() as u32,
            u32::from(self.srgb),
            u32::from(self.bc1),
            0,
            0,
        ];
        // Buffers of this chunk's own: a later batch in the same submission cannot
        // overwrite them before this pass runs.
        let init = |label, contents: &[u8], usage| {
            wgpu::util::DeviceExt::create_buffer_init(
                device,
                &wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage },
            )
        };
        let params = init(
            "tessera slot mip encode params",
            bytemuck::cast_slice(&params),
            wgpu::BufferUsages::UNIFORM,
        );
        let slot_list =
            init("tessera slot mip encode slots", bytemuck::cast_slice(slots), wgpu::BufferUsages::STORAGE);
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera slot mip encode"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&self.level0),
                },
                wgpu::BindGroupEntry { binding: 1, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: slot_list.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: self.out.as_entire_binding() },
            ],
        });
        let blocks = n * u64::from(self.blocks) * u64::from(self.blocks);
        let groups = u32::try_from(blocks.div_ceil(u64::from(ENCODE_WORKGROUP))).unwrap_or(u32::MAX);
        let max = device.limits().max_compute_workgroups_per_dimension.max(1);
        let (x, y) = (groups.min(max), groups.div_ceil(max));
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("tessera slot mip encode"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(x, y, 1);
        }
        let extent = wgpu::Extent3d { width: self.half, height: self.half, depth_or_array_layers: 1 };
        for (i, slot) in slots.iter().enumerate() {
            encoder.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer: &self.out,
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: i as u64 * slot_out,
                        bytes_per_row: Some(self.row_bytes),
                        rows_per_image: Some(self.blocks),
                    },
                },
                wgpu::TexelCopyTextureInfo {
                    texture,
                    mip_level: 1,
                    origin: wgpu::Origin3d { x: slot.dst[0] * self.half, y: slot.dst[1] * self.half, z: 0 },
                    aspect: wgpu::TextureAspect::All,
                },
                extent,
            );
        }
    }

    /// Bytes of the scratch buffer.
    pub(super) fn bytes(&self) -> u64 {
        self.out.size()
    }
}
