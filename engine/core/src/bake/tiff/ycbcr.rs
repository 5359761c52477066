//! YCbCr to RGB as libjpeg converts JPEG-in-TIFF (JFIF: full-range BT.601), in its
//! fixed-point arithmetic, so that a decode matches GDAL's texel for texel where the
//! upsampled chroma does.

/// Fractional bits of libjpeg's fixed-point coefficients.
const SCALE_BITS: i32 = 16;
const ONE_HALF: i32 = 1 << (SCALE_BITS - 1);

/// libjpeg's `FIX(x)`.
const fn fix(x: f64) -> i32 {
    (x * (1 << SCALE_BITS) as f64 + 0.5) as i32
}

/// Converts interleaved YCbCr texels (three bytes each) to RGB in place.
pub(super) fn to_rgb(texels: &mut [u8]) {
    for px in texels.chunks_exact_mut(3) {
        let y = i32::from(px[0]);
        let cb = i32::from(px[1]) - 128;
        let cr = i32::from(px[2]) - 128;
        let r = y + ((fix(1.40200) * cr + ONE_HALF) >> SCALE_BITS);
        let g = y + ((-fix(0.34414) * cb - fix(0.71414) * cr + ONE_HALF) >> SCALE_BITS);
        let b = y + ((fix(1.77200) * cb + ONE_HALF) >> SCALE_BITS);
        px[0] = r.clamp(0, 255) as u8;
        px[1] = g.clamp(0, 255) as u8;
        px[2] = b.clamp(0, 255) as u8;
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn matches_the_jfif_equations() {
        // Gray stays gray; the primaries come back from their JFIF YCbCr.
        let mut t = [
            128, 128, 128, //
            76, 85, 255, // red
            150, 44, 21, // green
            29, 255, 107, // blue
            0, 0, 0,
        ];
        to_rgb(&mut t);
        assert_eq!(t[..3], [128, 128, 128]);
        for (px, want) in t[3..12].chunks(3).zip([[255, 0, 0], [0, 255, 0], [0, 0, 255]]) {
            for (a, b) in px.iter().zip(want) {
                assert!((i32::from(*a) - b).abs() <= 1, "{px:?} for {want:?}");
            }
        }
        // Clamped, never wrapped: Y 0 with Cb = Cr = 0 asks for negative red and blue.
        assert_eq!(t[12..], [0, 135, 0]);
    }
}
