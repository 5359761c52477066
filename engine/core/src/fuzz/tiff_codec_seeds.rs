//! Image seeds of the TIFF chunks the reader decodes itself (Zstandard with the
//! horizontal predictor, JPEG YCbCr, lossless WebP, LERC of a float data raster): tiled
//! TIFFs written by hand around each codec's own encoder, two 16² tiles across, the
//! second a padded edge tile, so that a fuzzer starts inside each decoder.

use super::seeds::Seed;

/// Image size and tile side.
const W: u32 = 24;
const H: u32 = 16;
const T: u32 = 16;

/// TIFF field types.
const SHORT: u16 = 3;
const LONG: u16 = 4;

/// What [`tiff`] writes besides the tiles.
struct Layout {
    samples: u16,
    bits: u16,
    /// SampleFormat: 1 unsigned, 3 floating point.
    format: u16,
    photometric: u16,
    compression: u16,
    predictor: u16,
}

/// The seeds; a codec whose encoder fails (it never should) is left out.
pub(super) fn seeds() -> Vec<Seed> {
    let rgb: Vec<u8> = (0..H)
        .flat_map(|y| (0..W).flat_map(move |x| [(x * 10) as u8, (y * 15) as u8, ((x + y) * 5) as u8]))
        .collect();
    let rgb_tiles = [tile(&rgb, 0, 3), tile(&rgb, 1, 3)];
    let rgb8 = |compression, photometric, predictor| Layout {
        samples: 3,
        bits: 8,
        format: 1,
        photometric,
        compression,
        predictor,
    };
    let mut out = Vec::new();

    let zstd: Vec<Vec<u8>> = rgb_tiles
        .iter()
        .map(|t| {
            let mut d = t.clone();
            // Horizontal differencing, row by row, from the right.
            for row in d.chunks_exact_mut(T as usize * 3) {
                for i in (3..row.len()).rev() {
                    row[i] = row[i].wrapping_sub(row[i - 3]);
                }
            }
            crate::bake::ktx2::zstd_raw_frame(&d)
        })
        .collect();
    out.push(("rgb8-zstd-tiles.tif".into(), tiff(&rgb8(50000, 2, 2), &zstd)));

    let jpeg: Option<Vec<Vec<u8>>> = rgb_tiles
        .iter()
        .map(|t| {
            let mut buf = Vec::new();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, 80)
                .encode(t, T, T, image::ExtendedColorType::Rgb8)
                .ok()
                .map(|()| buf)
        })
        .collect();
    if let Some(jpeg) = jpeg {
        out.push(("ycbcr8-jpeg-tiles.tif".into(), tiff(&rgb8(7, 6, 1), &jpeg)));
    }

    let webp: Option<Vec<Vec<u8>>> = rgb_tiles
        .iter()
        .map(|t| {
            let mut buf = Vec::new();
            image_webp::WebPEncoder::new(&mut buf)
                .encode(t, T, T, image_webp::ColorType::Rgb8)
                .ok()
                .map(|()| buf)
        })
        .collect();
    if let Some(webp) = webp {
        out.push(("rgb8-webp-tiles.tif".into(), tiff(&rgb8(50001, 2, 1), &webp)));
    }

    // A float DEM: heights from -12.5 up, bare LERC (no LercParameters: no outer compression).
    let heights: Vec<f32> =
        (0..W * H).map(|i| -12.5 + (i % W) as f32 * 3.25 + (i / W) as f32 * 7.0).collect();
    let bytes: Vec<u8> = heights.iter().flat_map(|v| v.to_le_bytes()).collect();
    let lerc: Option<Vec<Vec<u8>>> = (0..2)
        .map(|tx| {
            let values: Vec<f32> = tile(&bytes, tx, 4)
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            lerc::encode_slice(T, T, &values, lerc::Precision::Lossless).ok()
        })
        .collect();
    if let Some(lerc) = lerc {
        let dem =
            Layout { samples: 1, bits: 32, format: 3, photometric: 1, compression: 34887, predictor: 1 };
        out.push(("f32-lerc-tiles.tif".into(), tiff(&dem, &lerc)));
    }
    out
}

/// Tile `tx` (of the one row) of an image of `W × H` texels of `bytes` bytes each, padded
/// with zeros past the image.
fn tile(image: &[u8], tx: u32, bytes: usize) -> Vec<u8> {
    let mut t = vec![0u8; (T * T) as usize * bytes];
    for y in 0..H.min(T) as usize {
        for x in 0..T as usize {
            let ix = tx as usize * T as usize + x;
            if ix < W as usize {
                let src = (y * W as usize + ix) * bytes;
                let dst = (y * T as usize + x) * bytes;
                t[dst..dst + bytes].copy_from_slice(&image[src..src + bytes]);
            }
        }
    }
    t
}

/// A little-endian classic TIFF of `W × H` texels in `T²` tiles: the header, one image
/// directory (tags sorted, long values after it), then the tiles.
fn tiff(l: &Layout, tiles: &[Vec<u8>]) -> Vec<u8> {
    let n = tiles.len() as u32;
    let mut entries: Vec<(u16, u16, Vec<u32>)> = vec![
        (256, LONG, vec![W]),
        (257, LONG, vec![H]),
        (258, SHORT, vec![u32::from(l.bits); usize::from(l.samples)]),
        (259, SHORT, vec![u32::from(l.compression)]),
        (262, SHORT, vec![u32::from(l.photometric)]),
        (277, SHORT, vec![u32::from(l.samples)]),
        (284, SHORT, vec![1]),
        (317, SHORT, vec![u32::from(l.predictor)]),
        (322, LONG, vec![T]),
        (323, LONG, vec![T]),
        (324, LONG, vec![0; n as usize]),
        (325, LONG, tiles.iter().map(|t| t.len() as u32).collect()),
        (339, SHORT, vec![u32::from(l.format); usize::from(l.samples)]),
    ];
    let size = |ty: u16, count: usize| if ty == SHORT { 2 * count } else { 4 * count };
    let ifd_bytes = 2 + entries.len() * 12 + 4;
    let extra: usize = entries.iter().map(|(_, ty, v)| size(*ty, v.len())).filter(|&s| s > 4).sum();
    let mut at = (8 + ifd_bytes + extra) as u32;
    if let Some((_, _, offsets)) = entries.iter_mut().find(|(tag, ..)| *tag == 324) {
        for (o, t) in offsets.iter_mut().zip(tiles) {
            *o = at;
            at += t.len() as u32;
        }
    }
    let mut out = b"II*\0".to_vec();
    out.extend_from_slice(&8u32.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut values = Vec::new();
    let value_bytes = |ty: u16, v: &[u32]| -> Vec<u8> {
        v.iter()
            .flat_map(
                |&x| if ty == SHORT { (x as u16).to_le_bytes().to_vec() } else { x.to_le_bytes().to_vec() },
            )
            .collect()
    };
    for (tag, ty, v) in &entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        let mut b = value_bytes(*ty, v);
        if b.len() > 4 {
            let offset = (8 + ifd_bytes + values.len()) as u32;
            values.append(&mut b);
            out.extend_from_slice(&offset.to_le_bytes());
        } else {
            b.resize(4, 0);
            out.extend_from_slice(&b);
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&values);
    for t in tiles {
        out.extend_from_slice(t);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::bake::source::RowSource;
    use crate::bake::tiff::TiffSource;

    /// The seeds read back as what was written: the Zstandard and WebP tiles exactly, the
    /// JPEG within its quality's loss, the LERC heights through the data scale.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn seeds_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let want: Vec<u8> = (0..H)
            .flat_map(|y| {
                (0..W).flat_map(move |x| [(x * 10) as u8, (y * 15) as u8, ((x + y) * 5) as u8, 255])
            })
            .collect();
        let seeds = seeds();
        assert_eq!(seeds.len(), 4);
        for (name, bytes) in seeds {
            let path = dir.path().join(&name);
            std::fs::write(&path, &bytes).unwrap();
            let src = TiffSource::open(&path).unwrap();
            let mut got = vec![0u8; (W * H * 4) as usize];
            src.read_rows(0, &mut got).unwrap();
            match name.as_str() {
                "ycbcr8-jpeg-tiles.tif" => {
                    let worst = got.iter().zip(&want).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
                    assert!(worst <= 24, "{name}: off by {worst}");
                }
                "f32-lerc-tiles.tif" => {
                    let scale = src.data_scale().unwrap();
                    assert_eq!((scale.min, scale.max), (-12.5, -12.5 + 23.0 * 3.25 + 15.0 * 7.0), "{name}");
                    assert_eq!(got[..4], [0, 0, 0, 255], "{name}: the lowest height is texel 0");
                }
                _ => assert!(got == want, "{name}"),
            }
        }
    }
}
