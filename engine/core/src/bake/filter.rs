//! Mip pyramid filtering: each level is the one above halved, texels weighted by the
//! mip-0 area they cover (exact for odd sizes), in linear light for sRGB colour, colour
//! weighted by alpha. `docs/atlas-format.md` ("Mip pyramid filtering") specifies it.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::bake::source::TEXEL_BYTES;
use crate::format::atlas::ColorSpace;

/// How many mip-0 texels texel `j` of mip `mip` covers along a side of `full` texels.
fn coverage(j: u32, mip: u32, full: u32) -> f32 {
    let start = u64::from(j) << mip;
    ((u64::from(j + 1) << mip).min(u64::from(full)) - start) as f32
}

fn srgb_to_linear_lut() -> &'static [f32; 256] {
    static LUT: OnceLock<[f32; 256]> = OnceLock::new();
    LUT.get_or_init(|| {
        std::array::from_fn(|i| {
            let c = i as f32 / 255.0;
            if c <= 0.04045 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
        })
    })
}

const LINEAR_STEPS: usize = 1 << 14;

fn linear_to_srgb_lut() -> &'static [u8] {
    static LUT: OnceLock<Vec<u8>> = OnceLock::new();
    LUT.get_or_init(|| {
        (0..LINEAR_STEPS)
            .map(|i| {
                let l = i as f32 / (LINEAR_STEPS - 1) as f32;
                let c = if l <= 0.003_130_8 { l * 12.92 } else { 1.055 * l.powf(1.0 / 2.4) - 0.055 };
                (c * 255.0 + 0.5).clamp(0.0, 255.0) as u8
            })
            .collect()
    })
}

/// Converts one linear-light value in `[0, 1]` to an sRGB byte.
pub fn linear_to_srgb(l: f32) -> u8 {
    linear_to_srgb_lut()[(l.clamp(0.0, 1.0) * (LINEAR_STEPS - 1) as f32 + 0.5) as usize]
}

/// Converts one sRGB byte to linear light.
pub fn srgb_to_linear(c: u8) -> f32 {
    srgb_to_linear_lut()[c as usize]
}

/// Halves a band of rows of mip `mip` (width `w`, first row `y0`) into rows of mip
/// `mip + 1`, weighting each source texel by the mip-0 area it covers (so odd sizes
/// are exact), in linear light for sRGB, colour weighted by alpha.
pub(crate) fn downsample(
    rows: &[u8],
    w: u32,
    mip: u32,
    full_w: u32,
    y0: u32,
    full_h: u32,
    color: ColorSpace,
) -> Vec<u8> {
    let row_bytes = w as usize * TEXEL_BYTES;
    let n_rows = rows.len() / row_bytes;
    let out_w = w.div_ceil(2);
    let out_rows = n_rows.div_ceil(2);
    let mut out = vec![0u8; out_rows * out_w as usize * TEXEL_BYTES];
    let to_lin = |c: u8| match color {
        ColorSpace::Srgb => srgb_to_linear(c),
        ColorSpace::Linear => f32::from(c) / 255.0,
    };
    let from_lin = |l: f32| match color {
        ColorSpace::Srgb => linear_to_srgb(l),
        ColorSpace::Linear => (l * 255.0 + 0.5).clamp(0.0, 255.0) as u8,
    };
    out.par_chunks_mut(out_w as usize * TEXEL_BYTES).enumerate().for_each(|(oy, dst)| {
        let sy = 2 * oy;
        let ys: [(usize, f32); 2] = [
            (sy, coverage(y0 + sy as u32, mip, full_h)),
            (sy + 1, if sy + 1 < n_rows { coverage(y0 + sy as u32 + 1, mip, full_h) } else { 0.0 }),
        ];
        for ox in 0..out_w as usize {
            let sx = 2 * ox;
            let xs: [(usize, f32); 2] = [
                (sx, coverage(sx as u32, mip, full_w)),
                (sx + 1, if sx + 1 < w as usize { coverage(sx as u32 + 1, mip, full_w) } else { 0.0 }),
            ];
            let (mut wsum, mut asum) = (0.0f32, 0.0f32);
            let (mut c_alpha, mut c_plain) = ([0.0f32; 3], [0.0f32; 3]);
            for &(ry, wy) in &ys {
                for &(cx, wx) in &xs {
                    let wgt = wx * wy;
                    if wgt == 0.0 {
                        continue;
                    }
                    let s = ry * row_bytes + cx * TEXEL_BYTES;
                    let a = f32::from(rows[s + 3]) / 255.0;
                    for k in 0..3 {
                        let l = to_lin(rows[s + k]);
                        c_alpha[k] += l * a * wgt;
                        c_plain[k] += l * wgt;
                    }
                    wsum += wgt;
                    asum += a * wgt;
                }
            }
            let px = &mut dst[ox * TEXEL_BYTES..(ox + 1) * TEXEL_BYTES];
            for k in 0..3 {
                px[k] = from_lin(if asum > 0.0 { c_alpha[k] / asum } else { c_plain[k] / wsum });
            }
            px[3] = (asum / wsum * 255.0 + 0.5).clamp(0.0, 255.0) as u8;
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn srgb_round_trip_is_exact() {
        for c in 0..=255u8 {
            assert_eq!(linear_to_srgb(srgb_to_linear(c)), c);
        }
    }

    #[test]
    fn downsample_is_linear_light_and_keeps_alpha() {
        // Black and white average to sRGB 188 in linear light, not 128.
        let rows = [0, 0, 0, 255, 255, 255, 255, 255];
        let out = downsample(&rows, 2, 0, 2, 0, 1, ColorSpace::Srgb);
        assert_eq!(out, vec![188, 188, 188, 255]);
        let out = downsample(&rows, 2, 0, 2, 0, 1, ColorSpace::Linear);
        assert_eq!(out, vec![128, 128, 128, 255]);
        // A transparent texel does not darken its opaque neighbour's colour.
        let rows = [0, 0, 0, 0, 200, 100, 50, 255];
        let out = downsample(&rows, 2, 0, 2, 0, 1, ColorSpace::Srgb);
        assert_eq!(out, vec![200, 100, 50, 128]);
    }

    #[test]
    fn odd_sizes_weight_by_coverage() {
        // Width 3 at mip 0: texel 2 pairs with nothing and maps alone.
        let rows = [10, 10, 10, 255, 10, 10, 10, 255, 90, 90, 90, 255];
        let out = downsample(&rows, 3, 0, 3, 0, 1, ColorSpace::Linear);
        assert_eq!(out, vec![10, 10, 10, 255, 90, 90, 90, 255]);
        // Mip 1 of a width-5 texture: texels cover 2, 2, 1 mip-0 texels.
        assert_eq!(coverage(2, 1, 5), 1.0);
        let rows = [0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255, 255];
        let out = downsample(&rows, 3, 1, 5, 0, 1, ColorSpace::Linear);
        assert_eq!(&out[4..], &[255, 255, 255, 255]);
    }
}
