//! The per-layer parameter block of `shaders/vt.wgsl` (`VtParams`), the bind group
//! layout of its group and the bind groups that tie pool, page table and feedback
//! together for user pipelines.

use bytemuck::{Pod, Zeroable};
use tessera_core::format::atlas::LayerInfo;
use tessera_core::stream::pool_layout::MAX_SHADER_MIPS;
use tessera_core::stream::streamer::ShaderParams;

use crate::pool::TilePool;

/// Most anisotropic taps: with a 4-texel border, more would reach past the border.
pub const MAX_ANISOTROPY: u16 = 4;

/// The per-layer parameter block, laid out as `VtParams` in `shaders/vt.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct VtParams {
    size: [f32; 2],
    pool_texels: [f32; 2],
    tile: f32,
    border: f32,
    max_aniso: f32,
    mip_bias: f32,
    mip_count: u32,
    first_tile: u32,
    feedback_mask: u32,
    feedback_phase: u32,
    wrap: u32,
    debug: u32,
    slot_mips: u32,
    probe: u32,
    mips: [[u32; 4]; MAX_SHADER_MIPS],
    mip_scale: [[f32; 4]; MAX_SHADER_MIPS],
    inv_pool: [f32; 2],
    slot_pitch: [f32; 2],
    border_uv: [f32; 2],
    tile_uv: [f32; 2],
}

impl VtParams {
    /// The block of `layer` sampled from a pool of `pool_texels` with at most
    /// `max_aniso` taps (clamped to [`MAX_ANISOTROPY`]) and debug view `debug`.
    pub fn new(layer: &LayerInfo, pool_texels: (u32, u32), max_aniso: u16, debug: u32) -> Self {
        let lay = layer.layout;
        let mut p = Self {
            size: [lay.width() as f32, lay.height() as f32],
            pool_texels: [pool_texels.0 as f32, pool_texels.1 as f32],
            tile: lay.tile_size() as f32,
            border: lay.border() as f32,
            max_aniso: f32::from(max_aniso.clamp(1, MAX_ANISOTROPY)),
            mip_bias: 0.0,
            mip_count: lay.mip_count(),
            first_tile: layer.first_tile as u32,
            feedback_mask: 0,
            feedback_phase: 0,
            wrap: layer.wrap as u32,
            debug,
            slot_mips: 0,
            probe: 0,
            mips: [[0; 4]; MAX_SHADER_MIPS],
            mip_scale: [[0.0; 4]; MAX_SHADER_MIPS],
            inv_pool: [1.0 / pool_texels.0 as f32, 1.0 / pool_texels.1 as f32],
            slot_pitch: [0.0; 2],
            border_uv: [0.0; 2],
            tile_uv: [0.0; 2],
        };
        let (tile, border) = (lay.tile_size() as f32, lay.border() as f32);
        for i in 0..2 {
            p.slot_pitch[i] = (tile + 2.0 * border) * p.inv_pool[i];
            p.border_uv[i] = border * p.inv_pool[i];
            p.tile_uv[i] = tile * p.inv_pool[i];
        }
        for m in 0..lay.mip_count().min(MAX_SHADER_MIPS as u32) {
            let (tx, ty) = lay.tiles_at(m);
            p.mips[m as usize] = [lay.mip_tile_offset(m) as u32, tx, ty, 0];
            // Powers of two: exact, so the shader finds the same tile as `size * 2^-m / tile`.
            let texels = [p.size[0] / (1u64 << m) as f32, p.size[1] / (1u64 << m) as f32];
            p.mip_scale[m as usize] = [texels[0] / tile, texels[1] / tile, texels[0], texels[1]];
        }
        p
    }

    /// Takes this frame's streaming values (mip bias, feedback pixel).
    pub fn set_frame(&mut self, s: &ShaderParams) {
        self.mip_bias = s.mip_bias;
        self.feedback_mask = s.feedback_mask;
        self.feedback_phase = s.feedback_phase;
    }

    /// Slots whose tile sits `margin` texels in from the slot's corner (a block pool on
    /// the hardware trilinear path, [`tessera_core::stream::pool_layout::slot_margin`]):
    /// one slot is the tile and twice the margin.
    pub fn set_slot_margin(&mut self, margin: u32) {
        let m = margin as f32;
        for i in 0..2 {
            self.slot_pitch[i] = (self.tile + 2.0 * self.border + 2.0 * m) * self.inv_pool[i];
            self.border_uv[i] = (self.border + m) * self.inv_pool[i];
        }
    }

    /// Selects the sampling path: hardware trilinear reads level 1 of the pool's slots.
    pub fn set_trilinear(&mut self, t: tessera_core::stream::pool_layout::Trilinear) {
        self.slot_mips = u32::from(t == tessera_core::stream::pool_layout::Trilinear::Hardware);
    }

    /// Sets the benchmark cost probe (see [`ShaderProbe`]).
    pub fn set_probe(&mut self, probe: ShaderProbe) {
        self.probe = probe as u32;
        if probe == ShaderProbe::Software {
            self.probe = 0;
            self.slot_mips = 0;
        }
    }

    /// Sets the debug view (0 off, 1 mip colours, 2 fallback depth, 3 tile borders).
    pub fn set_debug(&mut self, view: u32) {
        self.debug = view;
    }
}

/// Parts of the sampling chain a benchmark can drop to price the rest (`tessera bench
/// --shader-probe`). The image is wrong under every probe but `Off` and `Software`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[repr(u32)]
pub enum ShaderProbe {
    /// The normal sampling chain.
    #[default]
    Off = 0,
    /// Level of detail and feedback only: no page-table lookup, no fetch.
    LodOnly = 1,
    /// Level of detail, feedback and the page-table lookup, no fetch.
    LookupOnly = 2,
    /// Level of detail, feedback and one fetch from a fixed slot, no lookup.
    NoLookup = 3,
    /// The software trilinear path (two lookups and two bilinear fetches) on the same
    /// pool and residency.
    Software = 4,
}

/// One sampled layer's parameter block, its uniform buffer and its bind group.
pub struct LayerBinding {
    /// The CPU copy of the block.
    pub params: VtParams,
    /// The uniform buffer holding it.
    pub buffer: wgpu::Buffer,
    /// Group 1 of `vt.wgsl` for this layer.
    pub bind_group: wgpu::BindGroup,
    /// What `bind_group` binds, for engines that build bind groups of their own.
    pub resources: BindingResources,
}

/// The resources behind one layer's `vt.wgsl` bindings, in binding order (handles:
/// cloning them is cheap). [`crate::VirtualTextures::binding_resources`] gives them to
/// engines that put the virtual texture into a bind group of their own, such as a
/// material's ([`crate::shaders::vt_layout_entries`] and [`crate::shaders::vt_bindings_at`]).
#[derive(Clone, Debug)]
pub struct BindingResources {
    /// Binding 0: the layer's parameter block (a uniform buffer).
    pub params: wgpu::Buffer,
    /// Binding 1: the page table.
    pub page_table: crate::page_table::PageTableResource,
    /// Binding 2: the feedback bitset (a read-write storage buffer).
    pub feedback: wgpu::Buffer,
    /// Bindings 3, 5 and 6: pools 0, 1 and 2 (a layer the atlas lacks repeats pool 0).
    pub pools: [wgpu::TextureView; 3],
    /// Binding 4: the pool sampler.
    pub sampler: wgpu::Sampler,
}

impl LayerBinding {
    /// Creates the buffer and bind group of `params` over `pools` (one, or up to
    /// three stacked), the page table and the feedback bitset.
    pub fn new(
        device: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
        params: VtParams,
        name: &str,
        resources: &Resources<'_>,
    ) -> Self {
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&format!("tessera vt params {name}")),
            size: std::mem::size_of::<VtParams>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let pools = resources.pools;
        let pool_view = |i: usize| pools.get(i).unwrap_or(&pools[0]).view_for(resources.color);
        let view = |i: usize| wgpu::BindingResource::TextureView(pool_view(i));
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera vt"),
            layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: resources.page_table.binding() },
                wgpu::BindGroupEntry { binding: 2, resource: resources.feedback.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: view(0) },
                wgpu::BindGroupEntry {
                    binding: 4,
                    resource: wgpu::BindingResource::Sampler(resources.sampler),
                },
                wgpu::BindGroupEntry { binding: 5, resource: view(1) },
                wgpu::BindGroupEntry { binding: 6, resource: view(2) },
            ],
        });
        let resources = BindingResources {
            params: buffer.clone(),
            page_table: resources.page_table.resource(),
            feedback: resources.feedback.clone(),
            pools: [0, 1, 2].map(|i| pool_view(i).clone()),
            sampler: resources.sampler.clone(),
        };
        Self { params, buffer, bind_group, resources }
    }

    /// Writes the CPU copy of the block to its buffer.
    pub fn write(&self, queue: &wgpu::Queue) {
        queue.write_buffer(&self.buffer, 0, bytemuck::bytes_of(&self.params));
    }

    /// Writes the block with feedback off: a phase no pixel has (the storage path then
    /// writes nothing), for a benchmark's pass without feedback. The next
    /// [`LayerBinding::write`] restores it.
    pub fn write_without_feedback(&self, queue: &wgpu::Queue) {
        let params = VtParams { feedback_phase: u32::MAX, ..self.params };
        queue.write_buffer(&self.buffer, 0, bytemuck::bytes_of(&params));
    }
}

/// What every layer's bind group points at.
pub struct Resources<'a> {
    /// The pools (one, or one per stacked layer).
    pub pools: &'a [TilePool],
    /// The page table.
    pub page_table: &'a crate::page_table::PageTableBuffer,
    /// The feedback bitset.
    pub feedback: &'a wgpu::Buffer,
    /// The pool sampler.
    pub sampler: &'a wgpu::Sampler,
    /// The colour space of the layer bound: a linear layer in a pool shared with sRGB
    /// layers samples it through its plain view ([`TilePool::view_for`]).
    pub color: tessera_core::format::atlas::ColorSpace,
}

/// The sampler of the pools: bilinear within a slot (the shader blends mips itself).
pub fn pool_sampler(device: &wgpu::Device) -> wgpu::Sampler {
    device.create_sampler(&wgpu::SamplerDescriptor {
        label: Some("tessera pool sampler"),
        address_mode_u: wgpu::AddressMode::ClampToEdge,
        address_mode_v: wgpu::AddressMode::ClampToEdge,
        address_mode_w: wgpu::AddressMode::ClampToEdge,
        mag_filter: wgpu::FilterMode::Linear,
        min_filter: wgpu::FilterMode::Linear,
        mipmap_filter: wgpu::MipmapFilterMode::Linear,
        ..Default::default()
    })
}

/// The layout of group 1 in `vt.wgsl`: parameters, page table (in `page_table`),
/// feedback bitset, pool, sampler and two more pools for stacked layers.
pub fn bind_group_layout(
    device: &wgpu::Device,
    page_table: crate::page_table::PageTableStorage,
) -> wgpu::BindGroupLayout {
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("tessera vt"),
        entries: &crate::shaders::vt_layout_entries(page_table, 0),
    })
}
