//! The physical tile pool: one fixed-size texture divided into a grid of bordered
//! tile slots. Which tile lives in which slot is decided by `tessera_core::stream::residency`.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::codec::{Codec, EncodeOptions, TargetFormat, transcode};
use tessera_core::stream::copy_runs::{TileCopy, vertical_runs};
use tessera_core::stream::page_table::SlotCoord;
use tessera_core::stream::pool_layout::level_one_possible;

use crate::error::RenderError;

/// Texture format of an RGBA8 pool and of the reference textures (sRGB colour).
pub const POOL_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

/// Texture format of an RGBA8 pool and reference texture holding linear data (normals,
/// roughness): sampled as stored, without the sRGB decode.
pub const POOL_FORMAT_LINEAR: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

/// The wgpu texture format (sRGB colour) for a tile target format.
pub fn wgpu_format(target: TargetFormat) -> wgpu::TextureFormat {
    wgpu_format_for(target, ColorSpace::Srgb)
}

/// The wgpu texture format for a tile target format holding texels of `color`: the
/// sRGB variant for colour, the plain one for linear data.
pub fn wgpu_format_for(target: TargetFormat, color: ColorSpace) -> wgpu::TextureFormat {
    let srgb = color == ColorSpace::Srgb;
    let channel = if srgb { wgpu::AstcChannel::UnormSrgb } else { wgpu::AstcChannel::Unorm };
    match (target, srgb) {
        (TargetFormat::Bc7, true) => wgpu::TextureFormat::Bc7RgbaUnormSrgb,
        (TargetFormat::Bc7, false) => wgpu::TextureFormat::Bc7RgbaUnorm,
        (TargetFormat::Bc1, true) => wgpu::TextureFormat::Bc1RgbaUnormSrgb,
        (TargetFormat::Bc1, false) => wgpu::TextureFormat::Bc1RgbaUnorm,
        (TargetFormat::Astc4x4, _) => wgpu::TextureFormat::Astc { block: wgpu::AstcBlock::B4x4, channel },
        (TargetFormat::Etc2Rgba, true) => wgpu::TextureFormat::Etc2Rgba8UnormSrgb,
        (TargetFormat::Etc2Rgba, false) => wgpu::TextureFormat::Etc2Rgba8Unorm,
        (_, true) => POOL_FORMAT,
        (_, false) => POOL_FORMAT_LINEAR,
    }
}

pub use tessera_core::stream::pool_layout::slot_grid;

/// What the adapter's device can sample, for [`tessera_core::format::pool_format::select`].
pub fn format_support(device: &wgpu::Device) -> tessera_core::format::pool_format::FormatSupport {
    let f = device.features();
    tessera_core::format::pool_format::FormatSupport {
        bc: f.contains(wgpu::Features::TEXTURE_COMPRESSION_BC),
        astc: f.contains(wgpu::Features::TEXTURE_COMPRESSION_ASTC),
        etc2: f.contains(wgpu::Features::TEXTURE_COMPRESSION_ETC2),
    }
}

/// Colour the pool is cleared to before any tile is written, so tests can prove that
/// no frame ever shows an unwritten texel.
pub const UNWRITTEN: [u8; 4] = [255, 0, 255, 255];

/// Size of the staging buffers [`TilePool::upload_batch`] sub-allocates tiles from
/// (a [`wgpu::util::StagingBelt`]: persistently re-mapped, so no allocation per frame).
pub const STAGING_CHUNK_BYTES: u64 = 8 << 20;

/// Most bytes of one staging range of [`TilePool::upload_batch`] (one mapping).
pub const STAGING_GROUP_BYTES: u64 = 32 << 20;

/// Batches at least this large are copied into staging memory by several threads.
const PARALLEL_COPY_TILES: usize = 32;

/// Copies `tiles` into `dst`, tile `i` at `i × stride`, each tile's rows of
/// `rows.0` bytes at a pitch of `rows.1` bytes (`rows.1 ≥ rows.0`); the padding is left
/// as it is. Large batches are split over rayon's threads, each writing its own tiles.
fn write_padded(mut dst: wgpu::WriteOnly<'_, [u8]>, tiles: &[&[u8]], stride: usize, rows: (usize, usize)) {
    let (row_len, pitch) = rows;
    let fits = tiles.iter().all(|t| {
        let n = t.len() / row_len.max(1);
        t.len() % row_len.max(1) == 0 && (n == 0 || (n - 1) * pitch + row_len <= stride)
    }) && tiles.len() * stride <= dst.len();
    if !fits || row_len == 0 {
        tracing::warn!("tile staging skipped: tiles do not fit their staging range");
        return;
    }
    if tiles.len() < PARALLEL_COPY_TILES {
        for (i, tile) in tiles.iter().enumerate() {
            for (r, row) in tile.chunks_exact(row_len).enumerate() {
                let at = i * stride + r * pitch;
                dst.slice(at..at + row_len).copy_from_slice(row);
            }
        }
        return;
    }
    /// The staging memory's address, handed to the copying threads.
    #[derive(Clone, Copy)]
    struct Staging(*mut u8);
    // SAFETY: the pointer is only used below, by threads that each write a disjoint
    // range inside the mapped view, all joined before `dst` goes out of scope.
    unsafe impl Send for Staging {}
    unsafe impl Sync for Staging {}
    let base = Staging(dst.as_raw_element_ptr().as_ptr());
    rayon::scope(|scope| {
        for (chunk_index, chunk) in
            tiles.chunks(tiles.len().div_ceil(rayon::current_num_threads())).enumerate()
        {
            let first = chunk_index * tiles.len().div_ceil(rayon::current_num_threads());
            scope.spawn(move |_| {
                let base = base;
                for (k, tile) in chunk.iter().enumerate() {
                    for (r, row) in tile.chunks_exact(row_len).enumerate() {
                        let at = (first + k) * stride + r * pitch;
                        // SAFETY: `fits` checked above that every row lies inside `dst`
                        // (at + row_len ≤ tiles.len() × stride ≤ dst.len()); tiles are
                        // disjoint ranges, so no two threads write the same byte; the
                        // mapping outlives the scope, which joins every thread; writes
                        // only, as write-combined memory wants.
                        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), base.0.add(at), row_len) };
                    }
                }
            });
        }
    });
}

/// A tile already in staging memory, to copy into `slot`: its rows start at `offset`
/// in `buffer`, `pitch` bytes apart (a multiple of [`wgpu::COPY_BYTES_PER_ROW_ALIGNMENT`]).
#[derive(Clone, Copy, Debug)]
pub struct StagedCopy<'a> {
    /// Destination slot.
    pub slot: SlotCoord,
    /// The staging buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Offset of the tile's first row.
    pub offset: u64,
    /// Bytes from one row to the next.
    pub pitch: u32,
}

/// The pool texture and its slot grid.
pub struct TilePool {
    target: TargetFormat,
    texture: wgpu::Texture,
    view: wgpu::TextureView,
    slot_texels: u32,
    slots_x: u32,
    slots_y: u32,
    /// The staging belt of [`TilePool::upload_batch`].
    staging: Mutex<wgpu::util::StagingBelt>,
    /// With hardware trilinear: what makes level 1 of each uploaded slot.
    slot_mips: Option<SlotMips>,
    /// Whether runs of tiles go in one copy ([`TilePool::set_merged_copies`]).
    merged_copies: bool,
}

/// Level 1 of a two-level pool.
enum SlotMips {
    /// Uncompressed pools: rendered.
    Rendered(RenderedMips),
    /// BC1 and BC7 pools: encoded by a compute pass, then copied.
    Encoded(EncodedMips),
}

/// Level 1 of a two-level uncompressed pool: a render pass that downsamples each
/// uploaded slot.
struct RenderedMips {
    pipeline: wgpu::RenderPipeline,
    bind_group: wgpu::BindGroup,
    level1: wgpu::TextureView,
    /// The slots of one batch (`[u32; 2]` each) and how many the buffer holds.
    instances: Mutex<(wgpu::Buffer, u64)>,
}

/// Bytes of one instance of the level-1 pass: a slot's (x, y).
const SLOT_INSTANCE_BYTES: u64 = 8;

impl RenderedMips {
    fn new(
        device: &wgpu::Device,
        texture: &wgpu::Texture,
        format: wgpu::TextureFormat,
        slot_texels: u32,
    ) -> Self {
        let level = |base| {
            texture.create_view(&wgpu::TextureViewDescriptor {
                label: Some("tessera pool level"),
                base_mip_level: base,
                mip_level_count: Some(1),
                ..Default::default()
            })
        };
        let (level0, level1) = (level(0), level(1));
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
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera slot mip"),
            layout: &bgl,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::TextureView(&level0) },
                wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::Sampler(&sampler) },
                wgpu::BindGroupEntry { binding: 2, resource: uniform.as_entire_binding() },
            ],
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera slot mip"),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("tessera slot mip"),
            layout: Some(&layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs_slot"),
                compilation_options: Default::default(),
                buffers: &[Some(wgpu::VertexBufferLayout {
                    array_stride: SLOT_INSTANCE_BYTES,
                    step_mode: wgpu::VertexStepMode::Instance,
                    attributes: &wgpu::vertex_attr_array![0 => Uint32x2],
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
        });
        let instances = Mutex::new((Self::instance_buffer(device, 256), 256));
        Self { pipeline, bind_group, level1, instances }
    }

    fn instance_buffer(device: &wgpu::Device, slots: u64) -> wgpu::Buffer {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera slot mip instances"),
            size: slots * SLOT_INSTANCE_BYTES,
            usage: wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Records the level-1 pass over `slots` into `encoder` (after their uploads).
    fn record(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        slots: &[[u32; 2]],
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
        queue.write_buffer(&instances.0, 0, bytemuck::cast_slice(slots));
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("tessera slot mips"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &self.level1,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Load, store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.set_vertex_buffer(0, instances.0.slice(..n * SLOT_INSTANCE_BYTES));
        pass.draw(0..4, 0..n as u32);
    }
}

/// Level 1 of a two-level BC1 or BC7 pool: a compute pass downsamples each uploaded
/// slot and encodes it (`shaders/slot_mip_encode.wgsl`) into a buffer, copied into the
/// slot's place in level 1 (block-compressed textures cannot be rendered to).
struct EncodedMips {
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
const ENCODE_CHUNK: usize = 256;

/// Invocations per workgroup of the encoding pass (`@workgroup_size` in the shader).
const ENCODE_WORKGROUP: u32 = 64;

impl EncodedMips {
    fn new(
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
    fn record(
        &self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        texture: &wgpu::Texture,
        slots: &[[u32; 2]],
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
        slots: &[[u32; 2]],
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
                    origin: wgpu::Origin3d { x: slot[0] * self.half, y: slot[1] * self.half, z: 0 },
                    aspect: wgpu::TextureAspect::All,
                },
                extent,
            );
        }
    }

    /// Bytes of the scratch buffer.
    fn bytes(&self) -> u64 {
        self.out.size()
    }
}

impl TilePool {
    /// A pool of about `mib` MiB of `slot_texels²` slots in `target` format, as square
    /// as the adapter's texture limit allows, every slot filled with [`UNWRITTEN`].
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        mib: u32,
        slot_texels: u32,
        target: TargetFormat,
    ) -> Result<Self, RenderError> {
        let slot_bytes = target.bytes_per_tile(slot_texels) as u64;
        let (slots_x, slots_y) = Self::grid_for(device, mib, slot_bytes, slot_texels)?;
        Self::with_grid(device, queue, (slots_x, slots_y), slot_texels, target, ColorSpace::Srgb, 1)
    }

    /// The slot grid of a `mib` MiB pool whose slots (all layers of a stack together)
    /// take `slot_bytes` each; an error when fewer than 2 slots fit.
    pub fn grid_for(
        device: &wgpu::Device,
        mib: u32,
        slot_bytes: u64,
        slot_texels: u32,
    ) -> Result<(u32, u32), RenderError> {
        let wanted = (u64::from(mib) << 20) / slot_bytes.max(1);
        let max_side = device.limits().max_texture_dimension_2d / slot_texels;
        if wanted < 2 {
            return Err(RenderError::Config(format!(
                "a {mib} MiB pool holds fewer than 2 tiles of {slot_texels}² texels; give at least {} MiB",
                (2 * slot_bytes).div_ceil(1 << 20)
            )));
        }
        Ok(slot_grid(mib, slot_bytes, max_side))
    }

    /// A pool of exactly `grid` (across, down) slots of `slot_texels²` texels in
    /// `target` format, sampled as `color`, every slot filled with [`UNWRITTEN`].
    /// With `levels` 2 (hardware trilinear; an uncompressed `target` and an even slot
    /// side) the texture has a level 1 where every uploaded slot's 2× downsample is
    /// rendered.
    pub fn with_grid(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        grid: (u32, u32),
        slot_texels: u32,
        target: TargetFormat,
        color: ColorSpace,
        levels: u32,
    ) -> Result<Self, RenderError> {
        let (slots_x, slots_y) = grid;
        if levels == 2 && !level_one_possible(target, slot_texels) {
            return Err(RenderError::Config(format!(
                "a two-level pool needs an uncompressed, BC1 or BC7 format and a slot side whose half is a \
                 whole number of blocks, not {} with {slot_texels}² slots",
                target.name()
            )));
        }
        let levels = levels.clamp(1, 2);
        let size = wgpu::Extent3d {
            width: slots_x * slot_texels,
            height: slots_y * slot_texels,
            depth_or_array_layers: 1,
        };
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("tessera tile pool"),
            size,
            mip_level_count: levels,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu_format_for(target, color),
            usage: if target.is_block_compressed() {
                wgpu::TextureUsages::TEXTURE_BINDING
                    | wgpu::TextureUsages::COPY_DST
                    | wgpu::TextureUsages::COPY_SRC
            } else {
                wgpu::TextureUsages::TEXTURE_BINDING
                    | wgpu::TextureUsages::COPY_DST
                    | wgpu::TextureUsages::COPY_SRC
                    | wgpu::TextureUsages::RENDER_ATTACHMENT
            },
            view_formats: &[],
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        let slot_mips = (levels == 2).then(|| {
            if target.is_block_compressed() {
                SlotMips::Encoded(EncodedMips::new(
                    device,
                    &texture,
                    target,
                    color == ColorSpace::Srgb,
                    slot_texels,
                ))
            } else {
                SlotMips::Rendered(RenderedMips::new(
                    device,
                    &texture,
                    wgpu_format_for(target, color),
                    slot_texels,
                ))
            }
        });
        let pool = Self {
            target,
            texture,
            view,
            slot_texels,
            slots_x,
            slots_y,
            staging: Mutex::new(wgpu::util::StagingBelt::new(device.clone(), STAGING_CHUNK_BYTES)),
            slot_mips,
            merged_copies: true,
        };
        if target.is_block_compressed() {
            pool.fill_unwritten(device, queue)?;
        } else {
            pool.clear_unwritten(device, queue);
        }
        Ok(pool)
    }

    /// Block-compressed pools cannot be render targets: write a magenta tile, encoded
    /// and transcoded like any other, into every slot.
    fn fill_unwritten(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<(), RenderError> {
        let s = self.slot_texels;
        let rgba: Vec<u8> = UNWRITTEN.iter().copied().cycle().take((s * s * 4) as usize).collect();
        let fail =
            |e: tessera_core::format::codec::CodecError| RenderError::Config(format!("pool fill tile: {e}"));
        let enc = Codec::Uastc.encode(&rgba, s, &EncodeOptions::default()).map_err(fail)?;
        let bytes = transcode(enc.codec, &enc.data, rgba.len(), s, self.target).map_err(fail)?;
        let items: Vec<(SlotCoord, &[u8])> = (0..self.slots_y)
            .flat_map(|y| (0..self.slots_x).map(move |x| SlotCoord { x: x as u16, y: y as u16 }))
            .map(|slot| (slot, bytes.as_slice()))
            .collect();
        self.upload_batch(device, queue, &items);
        // The fill staged the whole pool at once; a fresh belt lets those buffers go
        // instead of keeping them for frames that upload a few tiles.
        *self.staging.lock().unwrap_or_else(PoisonError::into_inner) =
            wgpu::util::StagingBelt::new(device.clone(), STAGING_CHUNK_BYTES);
        Ok(())
    }

    fn clear_unwritten(&self, device: &wgpu::Device, queue: &wgpu::Queue) {
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("pool clear") });
        for level in 0..self.levels() {
            let view = &self.texture.create_view(&wgpu::TextureViewDescriptor {
                base_mip_level: level,
                mip_level_count: Some(1),
                ..Default::default()
            });
            let c = |v: u8| f64::from(v) / 255.0;
            let _pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("pool clear"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(wgpu::Color {
                            r: c(UNWRITTEN[0]),
                            g: c(UNWRITTEN[1]),
                            b: c(UNWRITTEN[2]),
                            a: 1.0,
                        }),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                depth_stencil_attachment: None,
                timestamp_writes: None,
                occlusion_query_set: None,
                multiview_mask: None,
            });
        }
        queue.submit([encoder.finish()]);
    }

    /// The format tiles are stored in.
    pub fn target(&self) -> TargetFormat {
        self.target
    }

    /// Slots across.
    pub fn slots_x(&self) -> u32 {
        self.slots_x
    }
    /// Slots down.
    pub fn slots_y(&self) -> u32 {
        self.slots_y
    }
    /// Total slots.
    pub fn slot_count(&self) -> u32 {
        self.slots_x * self.slots_y
    }
    /// Side of a slot in texels (tile payload plus borders).
    pub fn slot_texels(&self) -> u32 {
        self.slot_texels
    }
    /// Mip levels of the pool texture: 2 with hardware trilinear (level 1 holds each
    /// slot's 2× downsample), else 1.
    pub fn levels(&self) -> u32 {
        if self.slot_mips.is_some() { 2 } else { 1 }
    }
    /// Bytes of one tile as uploaded (level 0 of a slot).
    pub fn tile_bytes(&self) -> u64 {
        self.target.bytes_per_tile(self.slot_texels) as u64
    }
    /// Bytes of GPU memory one slot takes, its level-1 copy included.
    pub fn slot_bytes(&self) -> u64 {
        let level1 =
            if self.slot_mips.is_some() { self.target.bytes_per_tile(self.slot_texels / 2) } else { 0 };
        self.tile_bytes() + level1 as u64
    }
    /// Bytes of GPU memory the pool takes.
    pub fn bytes(&self) -> u64 {
        u64::from(self.slot_count()) * self.slot_bytes()
    }
    /// Bytes of GPU memory besides the texture: the scratch buffer a BC1 / BC7 pool
    /// encodes its level-1 copies through (0 for other pools).
    pub fn scratch_bytes(&self) -> u64 {
        match &self.slot_mips {
            Some(SlotMips::Encoded(mips)) => mips.bytes(),
            _ => 0,
        }
    }

    /// Size of the pool texture in texels.
    pub fn texels(&self) -> (u32, u32) {
        (self.slots_x * self.slot_texels, self.slots_y * self.slot_texels)
    }
    /// The pool texture.
    pub fn texture(&self) -> &wgpu::Texture {
        &self.texture
    }
    /// A view of the pool texture.
    pub fn view(&self) -> &wgpu::TextureView {
        &self.view
    }

    /// Bytes of one row of a tile (a row of 4×4 blocks in a block format) and the rows
    /// of a tile.
    pub fn tile_rows(&self) -> (u32, u32) {
        let s = self.slot_texels;
        if self.target.is_block_compressed() {
            (s.div_ceil(4) * self.target.bytes_per_block() as u32, s.div_ceil(4))
        } else {
            (s * 4, s)
        }
    }

    /// The texture region of `slot`.
    fn slot_region(&self, slot: SlotCoord) -> wgpu::TexelCopyTextureInfo<'_> {
        let s = self.slot_texels;
        wgpu::TexelCopyTextureInfo {
            texture: &self.texture,
            mip_level: 0,
            origin: wgpu::Origin3d { x: u32::from(slot.x) * s, y: u32::from(slot.y) * s, z: 0 },
            aspect: wgpu::TextureAspect::All,
        }
    }

    /// Copies one tile in the pool's format (`target().bytes_per_tile(slot_texels)` bytes) into `slot`.
    /// For many tiles, [`TilePool::upload_batch`] is much faster.
    pub fn upload(&self, queue: &wgpu::Queue, slot: SlotCoord, texels: &[u8]) {
        let s = self.slot_texels;
        let (bytes_per_row, rows) = self.tile_rows();
        queue.write_texture(
            self.slot_region(slot),
            texels,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(bytes_per_row),
                rows_per_image: Some(rows),
            },
            wgpu::Extent3d { width: s, height: s, depth_or_array_layers: 1 },
        );
    }

    /// Copies many tiles (each `slot_bytes()` bytes in the pool's format) into their
    /// slots with one submission: every tile is written into staging memory (rows padded
    /// to [`wgpu::COPY_BYTES_PER_ROW_ALIGNMENT`]; block formats: rows of 4×4 blocks)
    /// sub-allocated from a few large, persistently re-mapped buffers, then one command
    /// encoder with one `copy_buffer_to_texture` per tile is submitted before returning
    /// (so before the caller's frame).
    ///
    /// One `write_texture` per tile costs a fixed overhead per call, which caps
    /// streaming at tens of thousands of tiles per second; this costs one submission per
    /// batch. The staging buffers come back for reuse once the GPU is done with them
    /// and the device is polled (as every frame's feedback poll does).
    ///
    /// Items of the wrong length or outside the slot grid are skipped with a warning.
    /// A slot named twice ends with the later tile, as with [`TilePool::upload`].
    pub fn upload_batch(&self, device: &wgpu::Device, queue: &wgpu::Queue, items: &[(SlotCoord, &[u8])]) {
        self.upload_mixed(device, queue, items, &[]);
    }

    /// [`TilePool::upload_batch`] for `items`, plus `staged` tiles that a loader
    /// thread already wrote into staging memory (each copied straight from its buffer),
    /// in one submission with one level-1 pass over every slot written. Returns the
    /// copy commands recorded: one per run of tiles bound for slots one below the
    /// other whose bytes follow each other (in `staged` as given, and in `items`).
    pub fn upload_mixed(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        items: &[(SlotCoord, &[u8])],
        staged: &[StagedCopy<'_>],
    ) -> usize {
        let want = self.tile_bytes() as usize;
        let (row_bytes, rows) = self.tile_rows();
        let padded_row = row_bytes.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let stride = u64::from(padded_row) * u64::from(rows);
        let valid: Vec<(SlotCoord, &[u8])> = items
            .iter()
            .filter(|(slot, texels)| {
                let ok = texels.len() == want
                    && u32::from(slot.x) < self.slots_x
                    && u32::from(slot.y) < self.slots_y;
                if !ok {
                    tracing::warn!(
                        "tile upload to slot ({}, {}) skipped: {} bytes, expected {want} inside {}×{} slots",
                        slot.x,
                        slot.y,
                        texels.len(),
                        self.slots_x,
                        self.slots_y
                    );
                }
                ok
            })
            .copied()
            .collect();
        let mut belt = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        let mut encoder = device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera tile uploads") });
        let mut copied: Vec<[u32; 2]> = Vec::with_capacity(valid.len() + staged.len());
        let mut commands = 0;
        let staged: Vec<&StagedCopy<'_>> = staged
            .iter()
            .filter(|c| {
                let ok = u32::from(c.slot.x) < self.slots_x
                    && u32::from(c.slot.y) < self.slots_y
                    && c.pitch >= row_bytes
                    && c.pitch.is_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
                if !ok {
                    tracing::warn!(slot = ?c.slot, pitch = c.pitch, "staged tile copy skipped: outside the pool or misaligned");
                }
                ok
            })
            .collect();
        // Staged copies of one pitch (every pool's part has one) in runs: a record that
        // starts where the previous one's rows end, bound for the slot below it.
        let tiles: Vec<TileCopy> = staged
            .iter()
            .map(|c| TileCopy {
                slot: c.slot,
                source: std::ptr::from_ref(c.buffer) as usize,
                offset: c.offset,
            })
            .collect();
        let span = staged.first().map_or(0, |c| u64::from(c.pitch) * u64::from(rows));
        let uniform = staged.iter().all(|c| u64::from(c.pitch) * u64::from(rows) == span);
        for run in self.runs(&tiles, if uniform { span } else { 0 }) {
            let first = staged[run.start];
            self.copy_run(
                &mut encoder,
                first.buffer,
                first.offset,
                first.pitch,
                first.slot,
                run.len() as u32,
            );
            commands += 1;
            copied.extend(staged[run].iter().map(|c| [u32::from(c.slot.x), u32::from(c.slot.y)]));
        }
        // One staging range (and one mapping) per group of tiles instead of one per
        // tile: each mapping is tracked and checked against the buffer's others.
        let per_group = (STAGING_GROUP_BYTES / stride).max(1) as usize;
        for group in valid.chunks(per_group) {
            let Some(size) = wgpu::BufferSize::new(stride * group.len() as u64) else { continue };
            let align = wgpu::BufferSize::new(u64::from(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT)).unwrap_or(size);
            let staged = belt.allocate(size, align);
            match staged.get_mapped_range_mut() {
                Ok(mut view) => {
                    let rows = (row_bytes as usize, padded_row as usize);
                    let tiles: Vec<&[u8]> = group.iter().map(|(_, t)| *t).collect();
                    write_padded(view.slice(..), &tiles, stride as usize, rows);
                }
                Err(e) => {
                    tracing::warn!("{} tile uploads skipped: staging not mapped: {e}", group.len());
                    continue;
                }
            }
            let laid: Vec<TileCopy> = group
                .iter()
                .enumerate()
                .map(|(i, (slot, _))| TileCopy { slot: *slot, source: 0, offset: i as u64 * stride })
                .collect();
            for run in self.runs(&laid, stride) {
                let offset = staged.offset() + laid[run.start].offset;
                self.copy_run(
                    &mut encoder,
                    staged.buffer(),
                    offset,
                    padded_row,
                    laid[run.start].slot,
                    run.len() as u32,
                );
                commands += 1;
            }
            copied.extend(group.iter().map(|(slot, _)| [u32::from(slot.x), u32::from(slot.y)]));
        }
        belt.finish();
        match &self.slot_mips {
            Some(SlotMips::Rendered(mips)) => mips.record(device, queue, &mut encoder, &copied),
            Some(SlotMips::Encoded(mips)) => mips.record(device, &mut encoder, &self.texture, &copied),
            None => {}
        }
        if !copied.is_empty() {
            queue.submit([encoder.finish()]);
        }
        belt.recall();
        commands
    }

    /// The copies that move `tiles` (laid out `span` bytes apart where contiguous):
    /// runs one below the other merged ([`TilePool::set_merged_copies`]), else one each.
    fn runs(&self, tiles: &[TileCopy], span: u64) -> Vec<Range<usize>> {
        if self.merged_copies {
            vertical_runs(tiles, span)
        } else {
            (0..tiles.len()).map(|i| i..i + 1).collect()
        }
    }

    /// Records one copy of `count` tiles, one below the other from `slot` down, whose
    /// rows follow each other at `pitch` from `offset` in `buffer`.
    fn copy_run(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        buffer: &wgpu::Buffer,
        offset: u64,
        pitch: u32,
        slot: SlotCoord,
        count: u32,
    ) {
        let s = self.slot_texels;
        let (_, rows) = self.tile_rows();
        encoder.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset,
                    bytes_per_row: Some(pitch),
                    rows_per_image: Some(rows * count),
                },
            },
            self.slot_region(slot),
            wgpu::Extent3d { width: s, height: s * count, depth_or_array_layers: 1 },
        );
    }

    /// Whether uploads copy runs of tiles bound for slots one below the other (whose
    /// bytes follow each other in staging memory) with one copy each (the default), or
    /// every tile with its own copy (to compare).
    pub fn set_merged_copies(&mut self, merged: bool) {
        self.merged_copies = merged;
    }
}
