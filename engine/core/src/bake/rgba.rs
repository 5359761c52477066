//! Decoded pixel layouts (grey, grey + alpha, RGB, RGBA; 8 or 16 bits) widened to the
//! baker's RGBA8, texel for texel as `image`'s `into_rgba8` does it.

/// The layout of one decoded row: channels and bits per channel. 16-bit samples are
/// big-endian (as PNG stores them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA).
    pub(crate) channels: usize,
    /// Whether each sample is 16 bits rather than 8.
    pub(crate) sixteen: bool,
}

impl Layout {
    /// Bytes of one texel.
    pub(crate) fn texel_bytes(self) -> usize {
        self.channels * if self.sixteen { 2 } else { 1 }
    }
}

/// A 16-bit sample rounded to 8 bits: `round(v * 255 / 65535)`, `image`'s rule.
fn to_u8(hi: u8, lo: u8) -> u8 {
    ((u32::from(u16::from_be_bytes([hi, lo])) + 128) / 257) as u8
}

/// Widens `src`, texels of `layout`, into `dst`, RGBA8 texels (as many as `src` holds).
pub(crate) fn expand(layout: Layout, src: &[u8], dst: &mut [u8]) {
    let n = layout.texel_bytes();
    let texels = src.chunks_exact(n).zip(dst.chunks_exact_mut(4));
    match (layout.channels, layout.sixteen) {
        (4, false) => dst[..src.len()].copy_from_slice(src),
        (3, false) => texels.for_each(|(s, d)| d.copy_from_slice(&[s[0], s[1], s[2], 255])),
        (2, false) => texels.for_each(|(s, d)| d.copy_from_slice(&[s[0], s[0], s[0], s[1]])),
        (1, false) => texels.for_each(|(s, d)| d.copy_from_slice(&[s[0], s[0], s[0], 255])),
        (c, true) => texels.for_each(|(s, d)| {
            let v = |i: usize| to_u8(s[2 * i], s[2 * i + 1]);
            let px = match c {
                4 => [v(0), v(1), v(2), v(3)],
                3 => [v(0), v(1), v(2), 255],
                2 => [v(0), v(0), v(0), v(1)],
                _ => [v(0), v(0), v(0), 255],
            };
            d.copy_from_slice(&px);
        }),
        // Zero channels is not a layout any decoder gives.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn sixteen_bits_round_like_image() {
        for v in [0u16, 1, 128, 129, 257, 32767, 32896, 65407, 65535] {
            let want = image::Luma([v]);
            let want =
                image::DynamicImage::ImageLuma16(image::ImageBuffer::from_pixel(1, 1, want)).into_rgba8();
            let mut got = [0u8; 4];
            expand(Layout { channels: 1, sixteen: true }, &v.to_be_bytes(), &mut got);
            assert_eq!(got, want.get_pixel(0, 0).0, "{v}");
        }
    }
}
