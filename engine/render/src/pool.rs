//! The physical tile pool: one fixed-size texture divided into a grid of bordered
//! tile slots. Which tile lives in which slot is decided by `tessera_core::stream::residency`.

use std::sync::{Mutex, PoisonError};

use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::codec::{Codec, EncodeOptions, TargetFormat, transcode};
use tessera_core::stream::page_table::SlotCoord;

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
        Self::with_grid(device, queue, (slots_x, slots_y), slot_texels, target, ColorSpace::Srgb)
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
    pub fn with_grid(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        grid: (u32, u32),
        slot_texels: u32,
        target: TargetFormat,
        color: ColorSpace,
    ) -> Result<Self, RenderError> {
        let (slots_x, slots_y) = grid;
        let size = wgpu::Extent3d {
            width: slots_x * slot_texels,
            height: slots_y * slot_texels,
            depth_or_array_layers: 1,
        };
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("tessera tile pool"),
            size,
            mip_level_count: 1,
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
        let pool = Self {
            target,
            texture,
            view,
            slot_texels,
            slots_x,
            slots_y,
            staging: Mutex::new(wgpu::util::StagingBelt::new(device.clone(), STAGING_CHUNK_BYTES)),
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
        let view = &self.view;
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("pool clear") });
        {
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
    /// Bytes of one slot.
    pub fn slot_bytes(&self) -> u64 {
        self.target.bytes_per_tile(self.slot_texels) as u64
    }
    /// Bytes of GPU memory the pool takes.
    pub fn bytes(&self) -> u64 {
        u64::from(self.slot_count()) * self.slot_bytes()
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
    fn tile_rows(&self) -> (u32, u32) {
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
        let want = self.slot_bytes() as usize;
        let (row_bytes, rows) = self.tile_rows();
        let padded_row = row_bytes.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let Some(stride) = wgpu::BufferSize::new(u64::from(padded_row) * u64::from(rows)) else { return };
        let align = wgpu::BufferSize::new(u64::from(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT)).unwrap_or(stride);
        let s = self.slot_texels;
        let extent = wgpu::Extent3d { width: s, height: s, depth_or_array_layers: 1 };
        let (row_len, padded_len) = (row_bytes as usize, padded_row as usize);
        let mut belt = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        let mut encoder = device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera tile uploads") });
        let mut copies = 0usize;
        for (slot, texels) in items {
            if texels.len() != want || u32::from(slot.x) >= self.slots_x || u32::from(slot.y) >= self.slots_y
            {
                tracing::warn!(
                    "tile upload to slot ({}, {}) skipped: {} bytes, expected {want} inside {}×{} slots",
                    slot.x,
                    slot.y,
                    texels.len(),
                    self.slots_x,
                    self.slots_y
                );
                continue;
            }
            let staged = belt.allocate(stride, align);
            match staged.get_mapped_range_mut() {
                Ok(mut view) => {
                    for (r, row) in texels.chunks_exact(row_len).enumerate() {
                        let at = r * padded_len;
                        view.slice(at..at + row_len).copy_from_slice(row);
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "tile upload to slot ({}, {}) skipped: staging not mapped: {e}",
                        slot.x,
                        slot.y
                    );
                    continue;
                }
            }
            encoder.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer: staged.buffer(),
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: staged.offset(),
                        bytes_per_row: Some(padded_row),
                        rows_per_image: Some(rows),
                    },
                },
                self.slot_region(*slot),
                extent,
            );
            copies += 1;
        }
        belt.finish();
        if copies > 0 {
            queue.submit([encoder.finish()]);
        }
        belt.recall();
    }
}
