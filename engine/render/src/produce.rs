//! Runtime virtual textures on the GPU: a [`TileProducer`] draws the tiles of a produced
//! atlas ([`tessera_core::Atlas::produced`]) into their pool slots when the feedback
//! asks for them, scheduled by the streamer like loads ([`tessera_core::stream::produce`]).
//!
//! Each frame, [`crate::VirtualTextures::begin`] hands the producer a [`ProduceBatch`]:
//! the tiles to draw, one instance each, with the virtual rectangle (border included)
//! each covers, and a render pass whose colour attachments are level 0 of the pools
//! (one per layer of a stack, so albedo, normal and roughness are drawn together). The
//! vertex shader of `shaders/produce.wgsl` ([`crate::shaders::PRODUCE_WGSL`]) places
//! each instance over its slot; the producer's fragment shader evaluates its material
//! at the texel's virtual coordinates. Level 1 and the page table are made after it,
//! as for uploaded tiles, so no frame samples a slot before it is drawn.

use std::sync::Mutex;

use tessera_core::format::atlas::Atlas;
use tessera_core::stream::produce::ProduceJob;

use crate::GpuContext;
use crate::pool::TilePool;

/// Draws produced tiles; see the module documentation and `docs/runtime-vt.md`.
pub trait TileProducer: wgpu::WasmNotSendSync {
    /// Records the drawing of every tile of `batch` into `encoder`: usually one
    /// [`ProduceBatch::begin_pass`], a pipeline whose vertex stage is
    /// `vt_produce_vertex` with [`ProduceBatch::bind_group`] at group 0 (layout
    /// [`ProduceBatch::layout`], targets [`ProduceBatch::formats`]), and
    /// `draw(0..4, 0..batch.len())`.
    /// Every texel of every tile's rectangle must be written (the slot's border too).
    fn produce(&mut self, ctx: &GpuContext, encoder: &mut wgpu::CommandEncoder, batch: &ProduceBatch<'_>);
}

/// One tile to draw, as `shaders/produce.wgsl` reads it (`VtProduceTile`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ProducedTile {
    /// The slot's rectangle in level 0 of the pool, border included: x0, y0, x1, y1 in
    /// texels.
    pub dst: [f32; 4],
    /// The virtual texture coordinates (0..1 over the layer) at the rectangle's edges:
    /// u0, v0, u1, v1. A texel's centre maps to the centre of its texel at the tile's
    /// mip; border texels fall outside the tile (and outside 0..1 at the layer's edge).
    pub uv: [f32; 4],
    /// Layer, mip, tile x, tile y.
    pub info: [u32; 4],
    /// The size of one texel of the tile's mip in texture coordinates (x, y), and 1 when
    /// the tile is drawn again after an invalidation (else 0), then padding.
    pub texel: [f32; 4],
}

impl ProducedTile {
    /// The instance for `job` in a pool of `pitch²` slots with `margin` unused texels
    /// around a tile of `tile` texels and `border` border texels, for a layer of
    /// `size` mip-0 texels.
    pub fn new(job: &ProduceJob, pitch: u32, margin: u32, tile: u32, border: u32, size: (u32, u32)) -> Self {
        let t = job.tile;
        let x0 = f32::from(job.slot.x) * pitch as f32 + margin as f32;
        let y0 = f32::from(job.slot.y) * pitch as f32 + margin as f32;
        let side = (tile + 2 * border) as f32;
        let scale = (1u64 << t.mip) as f64;
        let (w, h) = (f64::from(size.0), f64::from(size.1));
        let edge = |i: u32, b: f64, len: f64| ((f64::from(i) * f64::from(tile) + b) * scale / len) as f32;
        let b = f64::from(border);
        Self {
            dst: [x0, y0, x0 + side, y0 + side],
            uv: [
                edge(t.x, -b, w),
                edge(t.y, -b, h),
                edge(t.x, f64::from(tile) + b, w),
                edge(t.y, f64::from(tile) + b, h),
            ],
            info: [u32::from(t.layer), u32::from(t.mip), t.x, t.y],
            texel: [(scale / w) as f32, (scale / h) as f32, if job.refresh { 1.0 } else { 0.0 }, 0.0],
        }
    }
}

/// One frame's tiles to produce, handed to [`TileProducer::produce`].
pub struct ProduceBatch<'a> {
    tiles: &'a [ProducedTile],
    jobs: &'a [ProduceJob],
    bind_group: &'a wgpu::BindGroup,
    layout: &'a wgpu::BindGroupLayout,
    targets: &'a [wgpu::TextureView],
    formats: &'a [wgpu::TextureFormat],
}

impl ProduceBatch<'_> {
    /// The tiles, in instance order.
    pub fn tiles(&self) -> &[ProducedTile] {
        self.tiles
    }

    /// The streamer's jobs behind them, in the same order.
    pub fn jobs(&self) -> &[ProduceJob] {
        self.jobs
    }

    /// Number of tiles (instances).
    pub fn len(&self) -> u32 {
        self.tiles.len() as u32
    }

    /// Whether there is nothing to draw.
    pub fn is_empty(&self) -> bool {
        self.tiles.is_empty()
    }

    /// The instances (binding 0) and the pool size (binding 1), for group 0 of a
    /// producer's pipeline.
    pub fn bind_group(&self) -> &wgpu::BindGroup {
        self.bind_group
    }

    /// The layout of [`ProduceBatch::bind_group`] (the same in every batch), for a
    /// producer that makes its pipeline on its first batch.
    pub fn layout(&self) -> &wgpu::BindGroupLayout {
        self.layout
    }

    /// Level 0 of each pool, in layer order: the colour attachments.
    pub fn targets(&self) -> &[wgpu::TextureView] {
        self.targets
    }

    /// The formats of [`ProduceBatch::targets`], for the producer's pipeline: the sRGB
    /// variant for a colour layer (write linear values; the pool encodes them), the
    /// plain one for data.
    pub fn formats(&self) -> &[wgpu::TextureFormat] {
        self.formats
    }

    /// A producer's render pipeline for these batches: WGSL `source` (written after
    /// `shaders/produce.wgsl`, which this prepends) with vertex entry point `vs` (usually
    /// returning `vt_produce_vertex(vertex_index, instance_index)`) and fragment entry
    /// point `fs` (one output per layer of a stack); group 0 is
    /// [`ProduceBatch::bind_group`], then `groups` (the producer's own, from group 1),
    /// drawn as the triangle strips `vt_produce_vertex` makes, into
    /// [`ProduceBatch::formats`].
    pub fn pipeline(
        &self,
        device: &wgpu::Device,
        source: &str,
        vs: &str,
        fs: &str,
        groups: &[&wgpu::BindGroupLayout],
    ) -> wgpu::RenderPipeline {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tessera producer"),
            source: wgpu::ShaderSource::Wgsl(format!("{}\n{source}", crate::shaders::PRODUCE_WGSL).into()),
        });
        let layouts: Vec<Option<&wgpu::BindGroupLayout>> =
            std::iter::once(Some(self.layout)).chain(groups.iter().map(|g| Some(*g))).collect();
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera producer"),
            bind_group_layouts: &layouts,
            immediate_size: 0,
        });
        let targets: Vec<Option<wgpu::ColorTargetState>> =
            self.formats.iter().map(|&f| Some(f.into())).collect();
        device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("tessera producer"),
            layout: Some(&layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some(vs),
                compilation_options: Default::default(),
                buffers: &[],
            },
            primitive: wgpu::PrimitiveState {
                topology: wgpu::PrimitiveTopology::TriangleStrip,
                ..Default::default()
            },
            depth_stencil: None,
            multisample: Default::default(),
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some(fs),
                compilation_options: Default::default(),
                targets: &targets,
            }),
            multiview_mask: None,
            cache: None,
        })
    }

    /// A render pass over level 0 of every pool (attachment `i` is layer `i` of a stack),
    /// loading what is there: only the instances' rectangles are drawn.
    pub fn begin_pass<'e>(&self, encoder: &'e mut wgpu::CommandEncoder) -> wgpu::RenderPass<'e> {
        let attachments: Vec<Option<wgpu::RenderPassColorAttachment<'_>>> = self
            .targets
            .iter()
            .map(|view| {
                Some(wgpu::RenderPassColorAttachment {
                    view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations { load: wgpu::LoadOp::Load, store: wgpu::StoreOp::Store },
                })
            })
            .collect();
        encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("tessera produce tiles"),
            color_attachments: &attachments,
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        })
    }
}

/// Bytes of one instance.
const TILE_BYTES: u64 = std::mem::size_of::<ProducedTile>() as u64;

/// The producer and what its batches need: the instance buffer (grown as needed), the
/// bind group over it, the level-0 views of the pools.
pub(crate) struct Production {
    producer: Box<dyn TileProducer>,
    layout: wgpu::BindGroupLayout,
    params: wgpu::Buffer,
    instances: Mutex<Option<(wgpu::Buffer, u64, wgpu::BindGroup)>>,
    targets: Vec<wgpu::TextureView>,
    formats: Vec<wgpu::TextureFormat>,
    /// Level 0 of the pools, texels (written into `params` before each batch).
    pool_size: (u32, u32),
}

/// The bind group layout of group 0 of a producer's pipeline (equal to every batch's
/// [`ProduceBatch::layout`], so a pipeline made with it takes their bind groups).
pub fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let stages = wgpu::ShaderStages::VERTEX_FRAGMENT;
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("tessera produce"),
        entries: &[
            wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: stages,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: true },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            },
            wgpu::BindGroupLayoutEntry {
                binding: 1,
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

impl Production {
    /// Production into `pools` (level 0 of each) by `producer`.
    pub(crate) fn new(device: &wgpu::Device, pools: &[TilePool], producer: Box<dyn TileProducer>) -> Self {
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera produce params"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut production = Self {
            producer,
            layout: bind_group_layout(device),
            params,
            instances: Mutex::new(None),
            targets: Vec::new(),
            formats: Vec::new(),
            pool_size: (1, 1),
        };
        production.retarget(pools);
        production
    }

    /// Draws into `pools` from now on (a resized pool).
    pub(crate) fn retarget(&mut self, pools: &[TilePool]) {
        self.targets = pools
            .iter()
            .map(|p| {
                p.texture().create_view(&wgpu::TextureViewDescriptor {
                    label: Some("tessera pool level 0 (produce)"),
                    base_mip_level: 0,
                    mip_level_count: Some(1),
                    ..Default::default()
                })
            })
            .collect();
        self.formats = pools.iter().map(|p| p.texture().format()).collect();
        self.pool_size = pools.first().map_or((1, 1), TilePool::texels);
    }

    /// Has the producer draw `jobs` of `atlas` into `pools` (one submission, before
    /// the frame's level-1 work and page-table jobs are submitted).
    pub(crate) fn run(&mut self, ctx: &GpuContext, atlas: &Atlas, pools: &[TilePool], jobs: &[ProduceJob]) {
        let Some(pool) = pools.first() else { return };
        let (tiles, jobs): (Vec<ProducedTile>, Vec<ProduceJob>) = jobs
            .iter()
            .filter_map(|job| {
                let layer = atlas.layers().get(usize::from(job.tile.layer))?;
                let l = layer.layout;
                let tile = ProducedTile::new(
                    job,
                    pool.pitch(),
                    pool.margin(),
                    l.tile_size(),
                    l.border(),
                    (l.width(), l.height()),
                );
                Some((tile, *job))
            })
            .unzip();
        if tiles.is_empty() {
            return;
        }
        let device = &ctx.device;
        let mut slot = self.instances.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = tiles.len() as u64;
        if slot.as_ref().is_none_or(|(_, capacity, _)| *capacity < n) {
            let capacity = n.next_power_of_two().max(64);
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera produce tiles"),
                size: capacity * TILE_BYTES,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("tessera produce"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: self.params.as_entire_binding() },
                ],
            });
            *slot = Some((buffer, capacity, bind_group));
        }
        let Some((buffer, _, bind_group)) = slot.as_ref() else { return };
        ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&tiles));
        let (w, h) = self.pool_size;
        ctx.queue.write_buffer(&self.params, 0, bytemuck::cast_slice(&[w as f32, h as f32, 0.0, 0.0]));
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera produce") });
        let batch = ProduceBatch {
            tiles: &tiles,
            jobs: &jobs,
            bind_group,
            layout: &self.layout,
            targets: &self.targets,
            formats: &self.formats,
        };
        self.producer.produce(ctx, &mut encoder, &batch);
        ctx.queue.submit([encoder.finish()]);
    }
}
