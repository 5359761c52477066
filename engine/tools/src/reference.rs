//! The reference renderer's texture: the atlas' own mip pyramid, fully resident as an
//! ordinary mip-mapped texture sampled by the hardware. Ground truth for convergence.
//!
//! Built from the texels the streamed pool holds: a tile of a Basis layer streamed
//! into a block-compressed pool (BC7, BC1, ASTC, ETC2) is transcoded to that format and
//! decoded back on the CPU, so a fully resident frame matches its reference whatever
//! the pool's format; the codec's own loss is measured against the lossless bake of
//! the same source (`tessera capture --reference-atlas`).

use bytemuck::{Pod, Zeroable};
use tessera::core::bake::edge;
use tessera::core::format::atlas::{Atlas, ColorSpace, LayerInfo, Wrap};
use tessera::core::format::codec::TargetFormat;

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
    let align = 1u32 << (lay.mip_count() - 1);
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
/// decoded tiles). The base size is padded up to a multiple of `2^(mips-1)` so every
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
    let params = ReferenceParams {
        uv_scale: [lay.width() as f32 / bw as f32, lay.height() as f32 / bh as f32],
        size: [lay.width() as f32, lay.height() as f32],
        max_lod: (mips - 1) as f32,
        explicit_lod: 1.0,
        _pad: [0.0; 2],
    };
    Ok(ReferenceTexture { texture, view, params, bytes })
}
