//! The physical tile pool: one fixed-size texture divided into a grid of bordered
//! tile slots. Which tile lives in which slot is decided by `tessera_core::stream::residency`.
//!
//! By concern: this file holds the pool texture and its slot grid; `upload.rs` copying
//! tiles in (merged runs of adjacent slots); `slot_mips.rs` level 1 of each slot for the
//! hardware trilinear path.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::codec::{Codec, EncodeOptions, TargetFormat, transcode};
use tessera_core::format::tile::TileId;
use tessera_core::stream::copy_runs::{TileCopy, vertical_runs};
use tessera_core::stream::level_one::{LevelOne, LevelOneSource, cut_region};
use tessera_core::stream::page_table::SlotCoord;
use tessera_core::stream::pool_layout::level_one_possible;

use crate::error::RenderError;

mod slot_mips;
mod upload;

use slot_mips::*;

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

/// What the context's device can sample, and whether its adapter is a software
/// rasteriser, for [`tessera_core::format::pool_format::select`].
pub fn format_support(ctx: &crate::GpuContext) -> tessera_core::format::pool_format::FormatSupport {
    let f = ctx.device.features();
    tessera_core::format::pool_format::FormatSupport {
        bc: f.contains(wgpu::Features::TEXTURE_COMPRESSION_BC),
        astc: f.contains(wgpu::Features::TEXTURE_COMPRESSION_ASTC),
        etc2: f.contains(wgpu::Features::TEXTURE_COMPRESSION_ETC2),
        software: ctx.info.device_type == wgpu::DeviceType::Cpu,
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

/// A tile already in staging memory, to copy into `slot`: its rows start at `offset`
/// in `buffer`, `pitch` bytes apart (a multiple of [`wgpu::COPY_BYTES_PER_ROW_ALIGNMENT`]).
#[derive(Clone, Copy, Debug)]
pub struct StagedCopy<'a> {
    /// Destination slot.
    pub slot: SlotCoord,
    /// The staging buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Offset of the copy's first row: the tile's, or the first of the margin rows
    /// above it on a pool with a margin ([`TilePool::margin_rows`]).
    pub offset: u64,
    /// Bytes from one row to the next.
    pub pitch: u32,
}

/// A resident tile's bytes where the CPU still holds them (the host cache).
pub type TileBytes<'a> = &'a dyn Fn(TileId) -> Option<std::sync::Arc<[u8]>>;

/// The level-1 work after a frame's uploads ([`TilePool::upload_frame`]).
#[derive(Clone, Copy)]
pub struct LevelOnes<'a> {
    /// Each written slot's source ([`tessera_core::stream::level_one::plan`]).
    pub jobs: &'a [LevelOne],
    /// The border of the stored tiles.
    pub border: u32,
    /// A resident tile's bytes where the CPU still holds them (the host cache), with the
    /// offset of this pool's part in them. A block pool then cuts each parent's
    /// quadrant from those bytes and stages it, so that runs of slots one below the
    /// other get their level 1 in one copy, instead of one GPU copy per slot.
    pub parents: Option<(TileBytes<'a>, usize)>,
}

impl<'a> LevelOnes<'a> {
    /// The level-1 work of `jobs` for tiles with a border of `border` texels, each
    /// parent's quadrant copied on the GPU.
    pub fn new(jobs: &'a [LevelOne], border: u32) -> Self {
        Self { jobs, border, parents: None }
    }
}

/// The pool texture and its slot grid.
pub struct TilePool {
    target: TargetFormat,
    texture: wgpu::Texture,
    view: wgpu::TextureView,
    /// A plain (not sRGB) view of an sRGB pool that also holds linear layers.
    linear_view: Option<wgpu::TextureView>,
    /// Side of a stored tile (what an upload writes).
    slot_texels: u32,
    /// Unused texels around the tile in each slot.
    margin: u32,
    slots_x: u32,
    slots_y: u32,
    /// The staging belt of [`TilePool::upload_batch`].
    staging: Mutex<wgpu::util::StagingBelt>,
    /// With hardware trilinear: what makes level 1 of each uploaded slot.
    slot_mips: Option<SlotMips>,
    /// Whether runs of tiles go in one copy ([`TilePool::set_merged_copies`]).
    merged_copies: bool,
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
        Self::with_grid(device, queue, (slots_x, slots_y), (slot_texels, 0), target, &[ColorSpace::Srgb], 1)
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

    /// A pool of exactly `grid` (across, down) slots of `slot.0²` texels (a stored
    /// tile) with a margin of `slot.1` unused texels on each side
    /// ([`tessera_core::stream::pool_layout::slot_margin`]) in `target` format, every
    /// slot filled with [`UNWRITTEN`], sampled as each of
    /// `colors` (the colour spaces of the layers it holds): the texture is in the sRGB
    /// variant of `target` when any layer is sRGB, else the plain one, and a pool that
    /// holds both kinds also has a view of the other ([`TilePool::view_for`]), so a
    /// linear layer's texels reach the shader unconverted.
    /// With `levels` 2 (hardware trilinear; an uncompressed `target` and an even slot
    /// side) the texture has a level 1 where every uploaded slot's 2× downsample is
    /// rendered.
    pub fn with_grid(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        grid: (u32, u32),
        slot: (u32, u32),
        target: TargetFormat,
        colors: &[ColorSpace],
        levels: u32,
    ) -> Result<Self, RenderError> {
        let (slots_x, slots_y) = grid;
        let (slot_texels, margin) = slot;
        let pitch = slot_texels + 2 * margin;
        let color = if colors.contains(&ColorSpace::Srgb) || colors.is_empty() {
            ColorSpace::Srgb
        } else {
            ColorSpace::Linear
        };
        let format = wgpu_format_for(target, color);
        let other = wgpu_format_for(target, ColorSpace::Linear);
        let mixed = colors.contains(&ColorSpace::Linear) && other != format;
        if levels == 2 && !level_one_possible(target, pitch) {
            return Err(RenderError::Config(format!(
                "a two-level pool needs an uncompressed, BC1 or BC7 format and a slot side whose half is a \
                 whole number of blocks, not {} with {pitch}² slots",
                target.name()
            )));
        }
        let levels = levels.clamp(1, 2);
        let size =
            wgpu::Extent3d { width: slots_x * pitch, height: slots_y * pitch, depth_or_array_layers: 1 };
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("tessera tile pool"),
            size,
            mip_level_count: levels,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
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
            // The plain variant also serves an sRGB pool's level-1 copies.
            view_formats: if other != format && (mixed || (levels == 2 && !target.is_block_compressed())) {
                std::slice::from_ref(&other)
            } else {
                &[]
            },
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        let linear_view = mixed.then(|| {
            texture.create_view(&wgpu::TextureViewDescriptor {
                label: Some("tessera tile pool (linear)"),
                format: Some(other),
                ..Default::default()
            })
        });
        let slot_mips = (levels == 2).then(|| {
            if target.is_block_compressed() {
                SlotMips::Encoded(EncodedMips::new(
                    device,
                    &texture,
                    target,
                    color == ColorSpace::Srgb,
                    pitch,
                ))
            } else {
                SlotMips::Rendered(RenderedMips::new(device, &texture, format, other, slot_texels))
            }
        });
        let pool = Self {
            target,
            texture,
            view,
            linear_view,
            slot_texels,
            margin,
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
    /// Bytes of GPU memory one slot takes, its margin and level-1 copy included.
    pub fn slot_bytes(&self) -> u64 {
        let pitch = self.pitch();
        let level1 = if self.slot_mips.is_some() { self.target.bytes_per_tile(pitch / 2) } else { 0 };
        (self.target.bytes_per_tile(pitch) + level1) as u64
    }
    /// Side of a slot in the pool texture: the stored tile and its margin on each side.
    pub fn pitch(&self) -> u32 {
        self.slot_texels + 2 * self.margin
    }
    /// Unused texels around the tile in each slot.
    pub fn margin(&self) -> u32 {
        self.margin
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
        (self.slots_x * self.pitch(), self.slots_y * self.pitch())
    }
    /// The pool texture.
    pub fn texture(&self) -> &wgpu::Texture {
        &self.texture
    }
    /// A view of the pool texture.
    pub fn view(&self) -> &wgpu::TextureView {
        &self.view
    }
    /// The view through which a layer of `color` samples the pool: texels of a linear
    /// layer are never sRGB-decoded.
    pub fn view_for(&self, color: ColorSpace) -> &wgpu::TextureView {
        match (color, &self.linear_view) {
            (ColorSpace::Linear, Some(linear)) => linear,
            _ => &self.view,
        }
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
}
