//! The physical tile pool: one fixed-size texture divided into a grid of bordered
//! tile slots. Which tile lives in which slot is decided by `tessera_core::residency`.

use tessera_core::page_table::SlotCoord;

use crate::error::RenderError;

/// Texture format of the pool (RGBA8, sRGB-encoded colour).
pub const POOL_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;

/// Colour the pool is cleared to before any tile is written, so tests can prove that
/// no frame ever shows an unwritten texel.
pub const UNWRITTEN: [u8; 4] = [255, 0, 255, 255];

/// The pool texture and its slot grid.
pub struct TilePool {
    texture: wgpu::Texture,
    view: wgpu::TextureView,
    slot_texels: u32,
    slots_x: u32,
    slots_y: u32,
}

impl TilePool {
    /// A pool of about `mib` MiB of `slot_texels²` RGBA8 slots, as square as the
    /// adapter's texture limit allows, cleared to [`UNWRITTEN`].
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        mib: u32,
        slot_texels: u32,
    ) -> Result<Self, RenderError> {
        let slot_bytes = u64::from(slot_texels).pow(2) * 4;
        let wanted = (u64::from(mib) << 20) / slot_bytes;
        let max_side = device.limits().max_texture_dimension_2d / slot_texels;
        let max_slots = u64::from(max_side).pow(2).min(1 << 24);
        if wanted < 2 {
            return Err(RenderError::Config(format!(
                "a {mib} MiB pool holds fewer than 2 tiles of {slot_texels}² texels; give at least {} MiB",
                (2 * slot_bytes).div_ceil(1 << 20)
            )));
        }
        let n = wanted.min(max_slots);
        let slots_x = ((n as f64).sqrt().ceil() as u32).clamp(1, max_side);
        let slots_y = ((n / u64::from(slots_x)) as u32).clamp(1, max_side);
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
            format: POOL_FORMAT,
            usage: wgpu::TextureUsages::TEXTURE_BINDING
                | wgpu::TextureUsages::COPY_DST
                | wgpu::TextureUsages::COPY_SRC
                | wgpu::TextureUsages::RENDER_ATTACHMENT,
            view_formats: &[],
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("pool clear") });
        {
            let c = |v: u8| f64::from(v) / 255.0;
            let _pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("pool clear"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
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
        Ok(Self { texture, view, slot_texels, slots_x, slots_y })
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
    /// Bytes of GPU memory the pool takes.
    pub fn bytes(&self) -> u64 {
        u64::from(self.slot_count()) * u64::from(self.slot_texels).pow(2) * 4
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

    /// Copies one decoded tile (`slot_texels² × 4` bytes, RGBA8) into `slot`.
    pub fn upload(&self, queue: &wgpu::Queue, slot: SlotCoord, texels: &[u8]) {
        let s = self.slot_texels;
        queue.write_texture(
            wgpu::TexelCopyTextureInfo {
                texture: &self.texture,
                mip_level: 0,
                origin: wgpu::Origin3d { x: u32::from(slot.x) * s, y: u32::from(slot.y) * s, z: 0 },
                aspect: wgpu::TextureAspect::All,
            },
            texels,
            wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(s * 4), rows_per_image: Some(s) },
            wgpu::Extent3d { width: s, height: s, depth_or_array_layers: 1 },
        );
    }
}
