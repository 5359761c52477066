//! The reference renderer's texture: the atlas' own mip pyramid, fully resident as an
//! ordinary mip-mapped texture sampled by the hardware. Ground truth for convergence.
//!
//! Built from the texels the streamed pool holds: a Basis layer streamed into a
//! block-compressed pool (BC7, BC1, ASTC, ETC2) gets a reference texture in that very
//! format, each tile transcoded as the loaders do and its payload blocks laid side by
//! side, so the GPU decodes the pool and the reference alike (BC1's interpolated colours
//! round differently from one decoder to the next: a CPU decode cost 1–2 dB at 1080p).
//! Where that cannot be done (a border that is not a whole number of blocks, a tile
//! that is not Basis), tiles are transcoded and decoded back on the CPU. Either way a
//! fully resident frame matches its reference whatever the pool's format; the codec's
//! own loss is measured against the lossless bake of the same source
//! (`tessera capture --reference-atlas`).

use bytemuck::{Pod, Zeroable};
use tessera::core::bake::edge;
use tessera::core::format::atlas::{Atlas, ColorSpace, LayerInfo, Wrap};
use tessera::core::format::codec::{Codec, TargetFormat, transcode_verified};
use tessera::core::format::tile::TileId;

use tessera::GpuContext;
use tessera::RenderError;
use tessera::{POOL_FORMAT, POOL_FORMAT_LINEAR};

/// The pool format of `layer` among a streamed atlas' pool formats `pools` (one for a
/// single pool, one per layer for a stack; none: the decoded tiles).
pub fn pool_of(pools: &[TargetFormat], layer: usize) -> TargetFormat {
    pools.get(layer).or(pools.first()).copied().unwrap_or(TargetFormat::Rgba8)
}

/// Uniform of `scene_reference.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ReferenceParams {
    /// Virtual size divided by the padded texture size.
    pub uv_scale: [f32; 2],
    /// Virtual size in texels.
    pub size: [f32; 2],
    /// The coarsest mip.
    pub max_lod: f32,
    /// 1: compute the level of detail in the shader as `vt.wgsl` does and sample that
    /// level (the hardware's own level of detail is an approximation that differs by
    /// GPU); 0: the hardware sampler's, for anisotropic filtering.
    pub explicit_lod: f32,
    _pad: [f32; 2],
}

impl ReferenceParams {
    /// The parameters of a reference of a layer laid out as `lay` in a texture padded to
    /// `(bw, bh)` at its base, sampled at the level of detail the virtual textures compute.
    fn of(lay: tessera::core::format::tile::TextureLayout, (bw, bh): (u32, u32)) -> Self {
        Self {
            uv_scale: [lay.width() as f32 / bw as f32, lay.height() as f32 / bh as f32],
            size: [lay.width() as f32, lay.height() as f32],
            max_lod: (lay.mip_count() - 1) as f32,
            explicit_lod: 1.0,
            _pad: [0.0; 2],
        }
    }

    /// Samples with the hardware's anisotropic filtering (`max_anisotropy` > 1) rather
    /// than at the level of detail the virtual textures compute.
    pub fn set_anisotropic(&mut self, max_anisotropy: u16) {
        self.explicit_lod = if max_anisotropy > 1 { 0.0 } else { 1.0 };
    }
}

/// One layer fully resident, with its sampler parameters.
pub struct ReferenceTexture {
    /// The mip-mapped texture.
    pub texture: wgpu::Texture,
    /// Its view.
    pub view: wgpu::TextureView,
    /// Shader parameters.
    pub params: ReferenceParams,
    /// Bytes of GPU memory it takes.
    pub bytes: u64,
}

/// Biggest fully resident reference worth building: mip 0 alone of a 16K² RGBA8 texture
/// is 1 GiB.
pub const MAX_REFERENCE_BYTES: u64 = 4 << 30;

/// Whether the fully resident reference of `layer` fits `ctx`'s device (its texture
/// limit, and [`MAX_REFERENCE_BYTES`]): its padded base size, or why not.
pub fn fits(ctx: &GpuContext, atlas: &Atlas, layer: usize) -> Result<(u32, u32), RenderError> {
    let info: &LayerInfo = atlas
        .layers()
        .get(layer)
        .ok_or_else(|| RenderError::Config(format!("the atlas has no layer {layer}")))?;
    let lay = info.layout;
    // Halving exactly down the mips, and whole 4×4 blocks at the base (a reference in
    // the pool's block format).
    let align = (1u32 << (lay.mip_count() - 1)).max(4);
    let (bw, bh) = (lay.width().div_ceil(align) * align, lay.height().div_ceil(align) * align);
    let max = ctx.device.limits().max_texture_dimension_2d;
    if u64::from(bw) * u64::from(bh) * 4 > MAX_REFERENCE_BYTES {
        return Err(RenderError::Config(format!(
            "layer '{}' ({}x{}) is too large for a fully resident reference (over {} GiB)",
            info.name,
            lay.width(),
            lay.height(),
            MAX_REFERENCE_BYTES >> 30
        )));
    }
    if bw > max || bh > max {
        return Err(RenderError::Config(format!(
            "layer '{}' ({}x{}) does not fit the adapter's {max}² texture limit, so it has no fully resident reference",
            info.name,
            lay.width(),
            lay.height()
        )));
    }
    Ok((bw, bh))
}

/// Builds the reference texture of `layer` from the atlas tiles (mip by mip, payload
/// texels only) as a pool in `pool` format holds them ([`TargetFormat::Rgba8`]: the
/// decoded tiles). The base size is padded up to a multiple of `2^(mips-1)` (and of 4) so every
/// hardware mip covers exactly the same texels as the atlas' mip.
pub fn build(
    ctx: &GpuContext,
    atlas: &Atlas,
    layer: usize,
    pool: TargetFormat,
) -> Result<ReferenceTexture, RenderError> {
    let info: &LayerInfo = atlas
        .layers()
        .get(layer)
        .ok_or_else(|| RenderError::Config(format!("the atlas has no layer {layer}")))?;
    let (bw, bh) = fits(ctx, atlas, layer)?;
    if let Some(r) = build_blocks(ctx, atlas, layer, pool, (bw, bh))? {
        return Ok(r);
    }
    let lay = info.layout;
    let mips = lay.mip_count();
    let texture = ctx.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("tessera reference"),
        size: wgpu::Extent3d { width: bw, height: bh, depth_or_array_layers: 1 },
        mip_level_count: mips,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: if info.color == ColorSpace::Linear { POOL_FORMAT_LINEAR } else { POOL_FORMAT },
        usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    });
    let mut bytes = 0u64;
    for m in 0..mips {
        let (mw, mh) = lay.mip_size(m);
        let (lw, lh) = (bw >> m, bh >> m);
        let img = atlas.read_texels_as(layer as u16, m, [0, 0, mw, mh], pool)?;
        // Extend to the padded level size by the layer's edge rule (what the atlas'
        // partial edge tiles hold too).
        let mut level = vec![0u8; lw as usize * lh as usize * 4];
        let wrap = if info.wrap == Wrap::Repeat { Wrap::Repeat } else { Wrap::Clamp };
        for yy in 0..lh {
            let sy = edge(i64::from(yy), mh, wrap);
            for xx in 0..lw {
                let sx = edge(i64::from(xx), mw, wrap);
                let s = (sy as usize * mw as usize + sx as usize) * 4;
                let d = (yy as usize * lw as usize + xx as usize) * 4;
                level[d..d + 4].copy_from_slice(&img[s..s + 4]);
            }
        }
        ctx.queue.write_texture(
            wgpu::TexelCopyTextureInfo {
                texture: &texture,
                mip_level: m,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            &level,
            wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(lw * 4), rows_per_image: Some(lh) },
            wgpu::Extent3d { width: lw, height: lh, depth_or_array_layers: 1 },
        );
        bytes += level.len() as u64;
    }
    let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
    let params = ReferenceParams::of(lay, (bw, bh));
    Ok(ReferenceTexture { texture, view, params, bytes })
}

/// The reference of `layer` in `pool`'s own block format: each tile transcoded as the
/// loaders transcode it, its payload blocks copied side by side, so the GPU decodes the
/// reference as it decodes the pool. `None` when `pool` is RGBA8, the border is not a
/// whole number of blocks, or a tile is not Basis (the caller decodes on the CPU then).
fn build_blocks(
    ctx: &GpuContext,
    atlas: &Atlas,
    layer: usize,
    pool: TargetFormat,
    (bw, bh): (u32, u32),
) -> Result<Option<ReferenceTexture>, RenderError> {
    let info: &LayerInfo = &atlas.layers()[layer];
    let lay = info.layout;
    if !pool.is_block_compressed() || !lay.border().is_multiple_of(4) {
        return Ok(None);
    }
    let mips = lay.mip_count();
    let bpb = pool.bytes_per_block();
    let (tb, bb) = ((lay.tile_size() / 4) as usize, (lay.border() / 4) as usize);
    let mut levels = Vec::with_capacity(mips as usize);
    for m in 0..mips {
        // Blocks of this level (the last levels are smaller than a block: one block).
        let (cw, ch) = (((bw >> m).max(1)).div_ceil(4) as usize, ((bh >> m).max(1)).div_ceil(4) as usize);
        let mut level = vec![0u8; cw * ch * bpb];
        let (tx_n, ty_n) = lay.tiles_at(m);
        for ty in 0..ty_n {
            for tx in 0..tx_n {
                let tile = TileId::new(layer as u16, m as u8, tx, ty);
                let e = atlas.entry(tile)?;
                if matches!(e.codec, Codec::Raw | Codec::Lz4) {
                    return Ok(None);
                }
                let blob = atlas.read_tile(tile)?;
                let side = (e.raw_length as usize / 4).isqrt() as u32;
                let blocks = transcode_verified(e.codec, &blob, e.raw_length as usize, side, pool)
                    .map_err(|err| RenderError::Config(format!("tile {tile}: {err}")))?;
                let src_row = side.div_ceil(4) as usize;
                for by in 0..tb {
                    let dy = ty as usize * tb + by;
                    if dy >= ch {
                        break;
                    }
                    let x0 = tx as usize * tb;
                    if x0 >= cw {
                        break;
                    }
                    let n = tb.min(cw - x0);
                    let src = ((by + bb) * src_row + bb) * bpb;
                    let dst = (dy * cw + x0) * bpb;
                    let run = blocks.get(src..src + n * bpb).ok_or_else(|| {
                        RenderError::Config(format!("tile {tile}: {} bytes of blocks, too few", blocks.len()))
                    })?;
                    level[dst..dst + n * bpb].copy_from_slice(run);
                }
            }
        }
        // Blocks past the tiles (none for the layouts the baker makes): the nearest one.
        let (cov_w, cov_h) = ((tx_n as usize * tb).min(cw), (ty_n as usize * tb).min(ch));
        for dy in 0..ch {
            for dx in 0..cw {
                if dx < cov_w && dy < cov_h {
                    continue;
                }
                let (sx, sy) = (dx.min(cov_w - 1), dy.min(cov_h - 1));
                level.copy_within((sy * cw + sx) * bpb..(sy * cw + sx + 1) * bpb, (dy * cw + dx) * bpb);
            }
        }
        levels.push((cw, ch, level));
    }
    let texture = ctx.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("tessera reference (pool format)"),
        size: wgpu::Extent3d { width: bw, height: bh, depth_or_array_layers: 1 },
        mip_level_count: mips,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: tessera::pool::wgpu_format_for(pool, info.color),
        usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    });
    let mut bytes = 0u64;
    for (m, (cw, ch, level)) in levels.iter().enumerate() {
        ctx.queue.write_texture(
            wgpu::TexelCopyTextureInfo {
                texture: &texture,
                mip_level: m as u32,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            level,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some((cw * bpb) as u32),
                rows_per_image: Some(*ch as u32),
            },
            wgpu::Extent3d { width: *cw as u32 * 4, height: *ch as u32 * 4, depth_or_array_layers: 1 },
        );
        bytes += level.len() as u64;
    }
    let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
    let params = ReferenceParams::of(lay, (bw, bh));
    Ok(Some(ReferenceTexture { texture, view, params, bytes }))
}
