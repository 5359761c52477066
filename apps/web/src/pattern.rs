//! A stand-in for a streamed atlas until the browser can fetch one: a procedural
//! virtual texture, every tile made resident at start, drawn on a ground plane through
//! the engine's own tile pool, page table, feedback ring and `vt.wgsl`. Everything but
//! the streamer runs as it does for an atlas, so a frame here proves the engine's GPU
//! side on the adapter at hand (WebGPU in a browser, any wgpu backend natively).

use glam::{Mat4, Vec3};
use tessera::core::format::atlas::{ColorSpace, LayerInfo, Wrap};
use tessera::core::format::codec::{Codec, TargetFormat};
use tessera::core::format::tile::{TextureLayout, TileId};
use tessera::core::scene::camera::Camera;
use tessera::core::stream::feedback::FeedbackLayout;
use tessera::core::stream::page_table::{PageTable, SlotCoord};
use tessera::core::stream::streamer::{PageTableWrite, ShaderParams};
use tessera::feedback::Feedback;
use tessera::page_table::{PageTableBuffer, PageTableStorage};
use tessera::params::{LayerBinding, Resources, VtParams, bind_group_layout, pool_sampler};
use tessera::pool::{TilePool, UNWRITTEN};
use tessera::{GpuContext, RenderError};

use crate::gpu::{Uniform, scene_pipeline};

/// Side of the virtual texture, texels.
pub const SIDE: u32 = 1024;
/// Tile payload side and border, texels (the atlas defaults).
const TILE: u32 = 128;
const BORDER: u32 = 4;
/// Readback buffers in the feedback ring, as the engine's virtual textures use.
const FEEDBACK_RING: usize = 3;
/// Feedback from one pixel in 4×4, rotated every frame (the engine's default stride).
const FEEDBACK_STRIDE: u32 = 4;
/// Half the ground plane's side, and how often the texture repeats across it.
const PLANE_HALF: f32 = 4.0;
const REPEATS: f32 = 3.0;

/// The clear colour behind the plane (linear).
pub const SKY: wgpu::Color = wgpu::Color { r: 0.012, g: 0.02, b: 0.04, a: 1.0 };

/// Colours of the mips (sRGB), so that the mip each pixel samples shows.
const MIP_TINTS: [[u8; 3]; 8] = [
    [235, 95, 70],
    [240, 200, 70],
    [95, 200, 105],
    [80, 150, 235],
    [175, 105, 215],
    [230, 120, 180],
    [120, 210, 210],
    [200, 200, 200],
];

/// The camera's uniform block, laid out as `Frame` in `pattern.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FrameUniform {
    view_proj: [[f32; 4]; 4],
    plane: [f32; 4],
}

/// What the newest feedback readback asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedbackSummary {
    /// The frame that recorded it.
    pub frame: u64,
    /// Tiles requested.
    pub tiles: usize,
    /// Tiles requested per mip, finest first.
    pub per_mip: Vec<usize>,
}

/// The pattern's virtual texture and the pipeline that draws it.
pub struct PatternScene {
    /// Kept alive for the bind group; written once.
    _pool: TilePool,
    _page_table: PageTableBuffer,
    feedback: Feedback,
    layout: FeedbackLayout,
    binding: LayerBinding,
    frame_buffer: wgpu::Buffer,
    frame_group: wgpu::BindGroup,
    pipeline: wgpu::RenderPipeline,
    frame: u64,
    tiles: usize,
    mips: usize,
    latest: Option<FeedbackSummary>,
    feedback_frames: u64,
}

impl PatternScene {
    /// Makes every tile of the pattern resident and builds the pipeline that renders
    /// into `color_format` targets.
    pub fn new(ctx: &GpuContext, color_format: wgpu::TextureFormat) -> Result<Self, RenderError> {
        let device = &ctx.device;
        let layout =
            TextureLayout::new(SIDE, SIDE, TILE, BORDER).map_err(|e| RenderError::Config(e.to_string()))?;
        let layer = LayerInfo {
            name: "pattern".into(),
            layout,
            codec: Codec::Raw,
            wrap: Wrap::Repeat,
            color: ColorSpace::Srgb,
            first_tile: 0,
        };
        let tiles: Vec<TileId> = (0..layout.mip_count())
            .flat_map(|m| {
                let (tx, ty) = layout.tiles_at(m);
                (0..ty).flat_map(move |y| (0..tx).map(move |x| TileId::new(0, m as u8, x, y)))
            })
            .collect();
        let padded = layout.padded_tile_size();
        let across = (tiles.len() as f64).sqrt().ceil() as u32;
        let grid = (across, (tiles.len() as u32).div_ceil(across));
        let pool = TilePool::with_grid(
            device,
            &ctx.queue,
            grid,
            (padded, 0),
            TargetFormat::Rgba8,
            &[ColorSpace::Srgb],
            1,
        )?;
        let mut table = PageTable::new(&[layout]);
        let texels: Vec<(SlotCoord, Vec<u8>)> = tiles
            .iter()
            .enumerate()
            .map(|(i, &tile)| {
                let slot = SlotCoord::new((i as u32 % grid.0) as u16, (i as u32 / grid.0) as u16);
                table.set_resident(tile, slot);
                (slot, tile_texels(&layout, tile))
            })
            .collect();
        let items: Vec<(SlotCoord, &[u8])> = texels.iter().map(|(s, t)| (*s, t.as_slice())).collect();
        pool.upload_batch(device, &ctx.queue, &items);

        let page_table = PageTableBuffer::new(
            device,
            table.len(),
            PageTableStorage::Buffer,
            device.limits().max_texture_dimension_2d,
        )
        .map_err(RenderError::Config)?;
        page_table.write(&ctx.queue, &[PageTableWrite { first: 0, entries: table.entries().to_vec() }]);
        let feedback_layout = table.layout().clone();
        let feedback = Feedback::new(device, feedback_layout.words(), FEEDBACK_RING);

        let vt_layout = bind_group_layout(device, PageTableStorage::Buffer);
        let sampler = pool_sampler(device);
        let params = VtParams::new(&layer, pool.texels(), tessera::vt::MAX_ANISOTROPY, 0);
        let resources = Resources {
            pools: std::slice::from_ref(&pool),
            page_table: &page_table,
            feedback: feedback.bitset(),
            sampler: &sampler,
            color: layer.color,
        };
        let binding = LayerBinding::new(device, &vt_layout, params, &layer.name, &resources);
        binding.write(&ctx.queue);

        let frame_uniform = Uniform::new(
            device,
            "pattern frame",
            wgpu::ShaderStages::VERTEX,
            size_of::<FrameUniform>() as u64,
        );
        let layouts = [Some(&frame_uniform.layout), Some(&vt_layout)];
        let pipeline =
            scene_pipeline(device, "pattern", include_str!("pattern.wgsl"), &layouts, color_format);
        let Uniform { buffer: frame_buffer, group: frame_group, .. } = frame_uniform;
        Ok(Self {
            _pool: pool,
            _page_table: page_table,
            feedback,
            layout: feedback_layout,
            binding,
            frame_buffer,
            frame_group,
            pipeline,
            frame: 0,
            tiles: tiles.len(),
            mips: layout.mip_count() as usize,
            latest: None,
            feedback_frames: 0,
        })
    }

    /// Renders one frame into `target` (`size` texels) with the camera at `seconds`
    /// along its orbit, and submits it. Collects the feedback that arrived since the
    /// last frame first (never waits for any). Fails once the device is lost.
    pub fn render(
        &mut self,
        ctx: &GpuContext,
        target: &wgpu::TextureView,
        size: (u32, u32),
        seconds: f64,
    ) -> Result<(), RenderError> {
        ctx.check()?;
        if let Some(arrived) = self.feedback.collect() {
            let mut per_mip = vec![0; self.mips];
            let requested = self.layout.decode_sparse(&arrived.sparse);
            for tile in &requested {
                if let Some(n) = per_mip.get_mut(usize::from(tile.mip)) {
                    *n += 1;
                }
            }
            self.latest = Some(FeedbackSummary { frame: arrived.frame, tiles: requested.len(), per_mip });
            self.feedback_frames += 1;
        }
        let stride = FEEDBACK_STRIDE as u64;
        let phase = self.frame % (stride * stride);
        self.binding.params.set_frame(&ShaderParams {
            mip_bias: 0.0,
            feedback_mask: FEEDBACK_STRIDE - 1,
            feedback_phase: (phase % stride) as u32 | (((phase / stride) as u32) << 8),
        });
        self.binding.write(&ctx.queue);
        let uniform = FrameUniform {
            view_proj: camera(size, seconds).to_cols_array_2d(),
            plane: [PLANE_HALF, REPEATS, 0.0, 0.0],
        };
        ctx.queue.write_buffer(&self.frame_buffer, 0, bytemuck::bytes_of(&uniform));

        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("pattern") });
        self.feedback.begin(&mut encoder);
        {
            let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("pattern"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: target,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations { load: wgpu::LoadOp::Clear(SKY), store: wgpu::StoreOp::Store },
                })],
                depth_stencil_attachment: None,
                timestamp_writes: None,
                occlusion_query_set: None,
                multiview_mask: None,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.frame_group, &[]);
            pass.set_bind_group(1, &self.binding.bind_group, &[]);
            pass.draw(0..6, 0..1);
        }
        self.feedback.end(&mut encoder, self.frame, None);
        ctx.queue.submit([encoder.finish()]);
        self.feedback.after_submit();
        self.frame += 1;
        Ok(())
    }

    /// Frames rendered.
    pub fn frames(&self) -> u64 {
        self.frame
    }

    /// Tiles of the virtual texture (all resident).
    pub fn tiles(&self) -> usize {
        self.tiles
    }

    /// The newest feedback that arrived, if any has.
    pub fn feedback(&self) -> Option<&FeedbackSummary> {
        self.latest.as_ref()
    }

    /// Feedback readbacks that arrived so far.
    pub fn feedback_frames(&self) -> u64 {
        self.feedback_frames
    }
}

/// The camera at `seconds`: a slow orbit above the plane, looking at it at a grazing
/// angle so that the far side samples coarser mips.
fn camera(size: (u32, u32), seconds: f64) -> Mat4 {
    let angle = (seconds * 0.15) as f32;
    let eye = Vec3::new(angle.cos() * 2.2, 0.9, angle.sin() * 2.2);
    let target = Vec3::new(-eye.x * 0.3, 0.0, -eye.z * 0.3);
    let aspect = size.0.max(1) as f32 / size.1.max(1) as f32;
    Camera { fov_y_degrees: 50.0, ..Camera::look_at(eye, target) }.view_projection(aspect)
}

/// The stored texels of `tile` (payload and border, RGBA8 sRGB): a checkerboard in
/// the colour of its mip, with the tile's payload outlined. Every texel is a function
/// of its position in the mip (wrapping around), so borders match their neighbours.
fn tile_texels(layout: &TextureLayout, tile: TileId) -> Vec<u8> {
    let mip = u32::from(tile.mip);
    let (w, h) = layout.mip_size(mip);
    let padded = layout.padded_tile_size();
    let tint = MIP_TINTS[(mip as usize).min(MIP_TINTS.len() - 1)];
    let mut out = Vec::with_capacity((padded * padded * 4) as usize);
    for row in 0..padded {
        for col in 0..padded {
            let x = (i64::from(tile.x * TILE + col) - i64::from(BORDER)).rem_euclid(i64::from(w)) as u32;
            let y = (i64::from(tile.y * TILE + row) - i64::from(BORDER)).rem_euclid(i64::from(h)) as u32;
            // 16 checks across the texture at every mip.
            let check = (x * 16 / w + y * 16 / h).is_multiple_of(2);
            let edge = x % TILE < 2 || y % TILE < 2;
            let texel = if edge {
                [250, 250, 250]
            } else if check {
                tint
            } else {
                tint.map(|c| (u32::from(c) * 9 / 20) as u8)
            };
            out.extend_from_slice(&texel);
            out.push(255);
        }
    }
    out
}

/// A frame copied back from the GPU, to check that it shows the pattern.
pub struct FrameCheck {
    buffer: wgpu::Buffer,
    size: (u32, u32),
    row_bytes: u32,
    bgra: bool,
}

/// What [`FrameCheck::summarize`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameSummary {
    /// Share of the pixels that show something other than the sky.
    pub covered: f64,
    /// Share of the pixels that show the pool's unwritten colour: slots sampled that
    /// no tile was uploaded to (a page table or upload fault).
    pub unwritten: f64,
}

impl FrameSummary {
    /// Whether the frame shows the pattern: a good part of it covered, almost nothing
    /// unwritten.
    pub fn ok(&self) -> bool {
        self.covered > 0.2 && self.unwritten < 0.001
    }
}

impl FrameCheck {
    /// Records the copy of `texture` (RGBA8 or BGRA8, `COPY_SRC`) into `encoder`.
    pub fn record(
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        texture: &wgpu::Texture,
    ) -> Self {
        let size = (texture.width(), texture.height());
        let row_bytes = (size.0 * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("frame check"),
            size: u64::from(row_bytes) * u64::from(size.1),
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        encoder.copy_texture_to_buffer(
            texture.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(row_bytes),
                    rows_per_image: Some(size.1),
                },
            },
            texture.size(),
        );
        let bgra =
            matches!(texture.format(), wgpu::TextureFormat::Bgra8Unorm | wgpu::TextureFormat::Bgra8UnormSrgb);
        Self { buffer, size, row_bytes, bgra }
    }

    /// The buffer to map for reading once the copy is submitted
    /// ([`GpuContext::map_read`], or [`GpuContext::map_read_async`] in a browser).
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The frame's RGBA8 pixels, row by row, from the mapped buffer (which it unmaps).
    pub fn pixels(&self) -> Result<Vec<u8>, RenderError> {
        let mut pixels = Vec::with_capacity((self.size.0 * self.size.1 * 4) as usize);
        {
            let view = self.buffer.get_mapped_range(..).map_err(|e| RenderError::Readback(e.to_string()))?;
            for row in view.chunks_exact(self.row_bytes as usize) {
                for px in row[..(self.size.0 * 4) as usize].chunks_exact(4) {
                    let rgba =
                        if self.bgra { [px[2], px[1], px[0], px[3]] } else { [px[0], px[1], px[2], px[3]] };
                    pixels.extend_from_slice(&rgba);
                }
            }
        }
        self.buffer.unmap();
        Ok(pixels)
    }

    /// Sums up the frame's pixels (RGBA8, from [`FrameCheck::pixels`]) on an sRGB
    /// target cleared to [`SKY`].
    pub fn summarize(pixels: &[u8]) -> FrameSummary {
        let sky = [SKY.r, SKY.g, SKY.b].map(|c| (srgb_encode(c) * 255.0).round() as i32);
        let near = |px: &[u8], c: [i32; 3], tolerance: i32| {
            (0..3).all(|i| (i32::from(px[i]) - c[i]).abs() <= tolerance)
        };
        let unwritten_colour = [0, 1, 2].map(|i| i32::from(UNWRITTEN[i]));
        let (mut covered, mut unwritten, mut total) = (0usize, 0usize, 0usize);
        for px in pixels.chunks_exact(4) {
            total += 1;
            if !near(px, sky, 3) {
                covered += 1;
            }
            if near(px, unwritten_colour, 8) {
                unwritten += 1;
            }
        }
        let share = |n: usize| n as f64 / total.max(1) as f64;
        FrameSummary { covered: share(covered), unwritten: share(unwritten) }
    }
}

/// The sRGB encoding of linear `c` (0–1).
fn srgb_encode(c: f64) -> f64 {
    if c <= 0.003_130_8 { c * 12.92 } else { 1.055 * c.powf(1.0 / 2.4) - 0.055 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borders_repeat_the_neighbouring_tiles_texels() {
        let layout = TextureLayout::new(SIDE, SIDE, TILE, BORDER).expect("layout");
        let padded = layout.padded_tile_size() as usize;
        let a = tile_texels(&layout, TileId::new(0, 0, 0, 0));
        let b = tile_texels(&layout, TileId::new(0, 0, 1, 0));
        // The right border of tile 0 is the first payload columns of tile 1.
        for row in 0..padded {
            for k in 0..BORDER as usize {
                let left = (row * padded + BORDER as usize + TILE as usize + k) * 4;
                let right = (row * padded + BORDER as usize + k) * 4;
                assert_eq!(a[left..left + 4], b[right..right + 4], "row {row}, border column {k}");
            }
        }
    }

    #[test]
    fn a_sky_only_frame_is_not_covered() {
        let sky = [SKY.r, SKY.g, SKY.b].map(|c| (srgb_encode(c) * 255.0).round() as u8);
        let pixels: Vec<u8> = (0..100).flat_map(|_| [sky[0], sky[1], sky[2], 255]).collect();
        let summary = FrameCheck::summarize(&pixels);
        assert_eq!(summary.covered, 0.0);
        assert!(!summary.ok());
    }
}
