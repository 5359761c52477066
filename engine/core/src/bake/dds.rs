//! DDS inputs for a bake (issue 28): block-compressed BC1–BC5 and BC7 and uncompressed
//! 32-bit textures, read one row of 4×4 blocks at a time by positioned reads and decoded
//! to RGBA8 in Rust (`texture2ddecoder`), so memory grows with the width only. The top
//! mip level is read; the baker filters its own pyramid (a DDS's own mips come from an
//! unknown filter, often not in linear light).

use std::fs::File;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use crate::bake::source::{RowSource, SourceError, SourceOrigin, TEXEL_BYTES, check_size, out_of_range};
use crate::format::atlas::ColorSpace;
use crate::local_file::FileExt;

/// `"DDS "`.
const MAGIC: &[u8; 4] = b"DDS ";
/// The magic and the `DDS_HEADER`.
const HEADER_LEN: u64 = 4 + 124;
/// The `DDS_HEADER_DXT10` after the header when the pixel format's FourCC is `DX10`.
const DX10_LEN: u64 = 20;

/// How the texels of a DDS are stored.
#[derive(Clone, Copy)]
enum Format {
    /// 4×4 blocks of `bytes` bytes, decoded by `decode`.
    Blocks { name: &'static str, bytes: usize, decode: fn(&[u8], &mut [u32]) },
    /// 32-bit texels with the byte offsets of R, G, B and A (`None`: opaque).
    Texels { order: [usize; 3], alpha: Option<usize> },
}

/// A DDS texture read row of blocks by row of blocks.
pub struct DdsSource {
    path: PathBuf,
    file: File,
    width: u32,
    height: u32,
    format: Format,
    /// Where the top level's texels start.
    data_offset: u64,
    /// Whether the format is tagged sRGB (DX10 `_SRGB` formats); `None` when the file does
    /// not say (legacy FourCC and bit-mask formats).
    srgb: Option<bool>,
}

impl DdsSource {
    /// Reads and checks the header of the DDS at `path`: 2D textures only (no cube maps,
    /// arrays or volumes), BC1–BC5, BC7 or 32-bit RGBA / BGRA texels, the top level wholly
    /// inside the file. Other formats (BC6H, 16-bit, float, YUV) are refused by name.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let p = path.to_path_buf();
        let io = |source| SourceError::Io { path: p.clone(), source };
        let unsupported = |reason: String| SourceError::Unsupported { path: p.clone(), reason };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut head = [0u8; (HEADER_LEN + DX10_LEN) as usize];
        let have = usize::try_from(len).unwrap_or(usize::MAX).min(head.len());
        file.read_exact_at(&mut head[..have], 0).map_err(io)?;
        let truncated = |reason: &str| SourceError::Truncated { path: p.clone(), reason: reason.into() };
        if have < HEADER_LEN as usize {
            return Err(truncated("the file ends inside the DDS header"));
        }
        if &head[..4] != MAGIC || le(&head, 4) != 124 || le(&head, 76) != 32 {
            return Err(unsupported("not a DDS header (magic, header or pixel-format size)".into()));
        }
        let (height, width) = (le(&head, 12), le(&head, 16));
        let (depth, caps2) = (le(&head, 24), le(&head, 112));
        const DDSCAPS2_CUBEMAP: u32 = 0x200;
        const DDSCAPS2_VOLUME: u32 = 0x20_0000;
        if caps2 & (DDSCAPS2_CUBEMAP | DDSCAPS2_VOLUME) != 0 || depth > 1 {
            return Err(unsupported("a cube map or volume texture; only 2D textures bake".into()));
        }
        let (pf_flags, four_cc) = (le(&head, 80), &head[84..88]);
        const DDPF_ALPHAPIXELS: u32 = 0x1;
        const DDPF_FOURCC: u32 = 0x4;
        const DDPF_RGB: u32 = 0x40;
        let mut data_offset = HEADER_LEN;
        let mut srgb = None;
        let format = if pf_flags & DDPF_FOURCC != 0 && four_cc == b"DX10" {
            if have < (HEADER_LEN + DX10_LEN) as usize {
                return Err(truncated("the file ends inside the DX10 header"));
            }
            data_offset += DX10_LEN;
            let dx = &head[HEADER_LEN as usize..];
            let (dxgi, dimension, array) = (le(dx, 0), le(dx, 4), le(dx, 12));
            const DIMENSION_TEXTURE2D: u32 = 3;
            if dimension != DIMENSION_TEXTURE2D || array > 1 {
                return Err(unsupported(format!(
                    "a DX10 resource of dimension {dimension} with {array} array layers; only one 2D texture bakes"
                )));
            }
            srgb = Some(matches!(dxgi, 29 | 72 | 75 | 78 | 91 | 99));
            dxgi_format(dxgi).ok_or_else(|| {
                unsupported(format!("DXGI format {dxgi} (supported: BC1-BC5, BC7, RGBA8, BGRA8)"))
            })?
        } else if pf_flags & DDPF_FOURCC != 0 {
            match four_cc {
                b"DXT1" => BC1,
                b"DXT2" | b"DXT3" => BC2,
                b"DXT4" | b"DXT5" => BC3,
                b"ATI1" | b"BC4U" => BC4,
                b"ATI2" | b"BC5U" => BC5,
                other => {
                    return Err(unsupported(format!(
                        "FourCC '{}' (supported: DXT1-DXT5, ATI1/ATI2, BC4U/BC5U, DX10)",
                        String::from_utf8_lossy(other)
                    )));
                }
            }
        } else if pf_flags & DDPF_RGB != 0 && le(&head, 88) == 32 {
            let masks = [le(&head, 92), le(&head, 96), le(&head, 100), le(&head, 104)];
            let byte = |m: u32| [0xFF, 0xFF00, 0xFF_0000, 0xFF00_0000].iter().position(|&b| b == m);
            let alpha = if pf_flags & DDPF_ALPHAPIXELS != 0 { byte(masks[3]) } else { None };
            match (byte(masks[0]), byte(masks[1]), byte(masks[2])) {
                (Some(r), Some(g), Some(b)) => Format::Texels { order: [r, g, b], alpha },
                _ => return Err(unsupported(format!("32-bit texels with channel masks {masks:08x?}"))),
            }
        } else {
            return Err(unsupported(format!(
                "pixel format flags {pf_flags:#x} with {} bits per texel (supported: BC1-BC5, BC7, 32-bit RGB(A))",
                le(&head, 88)
            )));
        };
        check_size(path, width, height)?;
        let source = Self { path: p.clone(), file, width, height, format, data_offset, srgb };
        let end = source.data_offset + source.row_bytes() as u64 * u64::from(source.block_rows());
        if end > len {
            return Err(truncated(&format!("the top level needs {end} bytes, the file has {len}")));
        }
        Ok(source)
    }

    /// Whether the file tags its texels as sRGB (`Some(true)`) or linear (`Some(false)`):
    /// only DX10 headers say; legacy formats give `None`.
    pub fn srgb(&self) -> Option<bool> {
        self.srgb
    }

    /// Texel rows per stored row: 4 for block formats, 1 for texels.
    fn rows_per_unit(&self) -> u32 {
        match self.format {
            Format::Blocks { .. } => 4,
            Format::Texels { .. } => 1,
        }
    }

    /// Stored rows (of blocks, or of texels).
    fn block_rows(&self) -> u32 {
        self.height.div_ceil(self.rows_per_unit())
    }

    /// Bytes of one stored row.
    fn row_bytes(&self) -> usize {
        match self.format {
            Format::Blocks { bytes, .. } => self.width.div_ceil(4) as usize * bytes,
            Format::Texels { .. } => self.width as usize * 4,
        }
    }

    /// Decodes stored row `unit` into `rows_per_unit` RGBA8 texel rows of `out`.
    fn decode_unit(&self, unit: u32, out: &mut [u8]) -> std::io::Result<()> {
        let mut stored = vec![0u8; self.row_bytes()];
        let at = self.data_offset + u64::from(unit) * stored.len() as u64;
        self.file.read_exact_at(&mut stored, at)?;
        let w = self.width as usize;
        match self.format {
            Format::Texels { order: [r, g, b], alpha } => {
                for (src, dst) in stored.chunks_exact(4).zip(out.chunks_exact_mut(TEXEL_BYTES)) {
                    dst.copy_from_slice(&[src[r], src[g], src[b], alpha.map_or(255, |a| src[a])]);
                }
            }
            Format::Blocks { name, bytes, decode } => {
                let decoded = catch_unwind(AssertUnwindSafe(|| {
                    let mut px = [0u32; 16];
                    for (bx, block) in stored.chunks_exact(bytes).enumerate() {
                        // Opaque black first: BC4 and BC5 write only red (and green).
                        px.fill(u32::from_le_bytes([0, 0, 0, 255]));
                        decode(block, &mut px);
                        for (k, p) in px.iter().enumerate() {
                            let (x, y) = (bx * 4 + k % 4, k / 4);
                            let at = (y * w + x) * TEXEL_BYTES;
                            if x < w && at < out.len() {
                                // texture2ddecoder packs BGRA in a little-endian u32.
                                let [b, g, r, a] = p.to_le_bytes();
                                out[at..at + TEXEL_BYTES].copy_from_slice(&[r, g, b, a]);
                            }
                        }
                    }
                }));
                decoded.map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: {name} block row {unit} does not decode", self.path.display()),
                    )
                })?;
            }
        }
        Ok(())
    }
}

impl RowSource for DdsSource {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row = self.width as usize * TEXEL_BYTES;
        let n = (out.len() / row) as u32;
        if y0.checked_add(n).is_none_or(|end| end > self.height) || !out.len().is_multiple_of(row) {
            return Err(out_of_range(y0));
        }
        let per = self.rows_per_unit();
        let mut unit_texels = vec![0u8; row * per as usize];
        let mut unit = u32::MAX;
        for y in y0..y0 + n {
            if y / per != unit {
                unit = y / per;
                self.decode_unit(unit, &mut unit_texels)?;
            }
            let from = (y % per) as usize * row;
            let to = (y - y0) as usize * row;
            out[to..to + row].copy_from_slice(&unit_texels[from..from + row]);
        }
        Ok(())
    }

    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::File(self.path.clone()))
    }

    fn color_space(&self) -> Option<ColorSpace> {
        self.srgb.map(|s| if s { ColorSpace::Srgb } else { ColorSpace::Linear })
    }
}

const BC1: Format = Format::Blocks { name: "BC1", bytes: 8, decode: texture2ddecoder::decode_bc1a_block };
const BC2: Format = Format::Blocks { name: "BC2", bytes: 16, decode: texture2ddecoder::decode_bc2_block };
const BC3: Format = Format::Blocks { name: "BC3", bytes: 16, decode: texture2ddecoder::decode_bc3_block };
const BC4: Format = Format::Blocks { name: "BC4", bytes: 8, decode: texture2ddecoder::decode_bc4_block };
const BC5: Format = Format::Blocks { name: "BC5", bytes: 16, decode: texture2ddecoder::decode_bc5_block };
const BC7: Format = Format::Blocks { name: "BC7", bytes: 16, decode: texture2ddecoder::decode_bc7_block };

/// The formats of the DXGI codes this reader takes.
fn dxgi_format(code: u32) -> Option<Format> {
    Some(match code {
        71 | 72 => BC1,
        74 | 75 => BC2,
        77 | 78 => BC3,
        80 => BC4,
        83 => BC5,
        98 | 99 => BC7,
        28 | 29 => Format::Texels { order: [0, 1, 2], alpha: Some(3) },
        87 | 91 => Format::Texels { order: [2, 1, 0], alpha: Some(3) },
        _ => return None,
    })
}

/// The little-endian `u32` at `at` of `b` (0 past its end).
fn le(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// A DDS file: header (DX10 when `dxgi` is given, else the legacy `four_cc`) and `data`.
    fn dds(w: u32, h: u32, four_cc: &[u8; 4], dxgi: Option<u32>, data: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        let put = |f: &mut Vec<u8>, v: u32| f.extend_from_slice(&v.to_le_bytes());
        f.extend_from_slice(MAGIC);
        for v in [124, 0x1 | 0x2 | 0x4 | 0x1000, h, w, 0, 1, 1] {
            put(&mut f, v);
        }
        f.extend_from_slice(&[0u8; 44]);
        put(&mut f, 32);
        put(&mut f, 0x4); // DDPF_FOURCC
        f.extend_from_slice(if dxgi.is_some() { b"DX10" } else { four_cc });
        f.extend_from_slice(&[0u8; 20]);
        for v in [0x1000, 0, 0, 0, 0] {
            put(&mut f, v);
        }
        if let Some(code) = dxgi {
            for v in [code, 3, 0, 1, 0] {
                put(&mut f, v);
            }
        }
        f.extend_from_slice(data);
        f
    }

    /// Texels `w × h` decoded from blocks by texture2ddecoder's whole-image decoders.
    fn whole(blocks: &[u8], w: u32, h: u32, bc7: bool) -> Vec<u8> {
        let mut px = vec![0u32; (w * h) as usize];
        if bc7 {
            texture2ddecoder::decode_bc7(blocks, w as usize, h as usize, &mut px).unwrap();
        } else {
            texture2ddecoder::decode_bc1a(blocks, w as usize, h as usize, &mut px).unwrap();
        }
        px.iter()
            .flat_map(|p| {
                let [b, g, r, a] = p.to_le_bytes();
                [r, g, b, a]
            })
            .collect()
    }

    /// Pseudo-random bytes.
    fn noise(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn block_rows_read_in_bands_equal_the_whole_decode() {
        let dir = tempfile::tempdir().unwrap();
        // Sizes not a multiple of 4; BC1 through the legacy header, BC7 through DX10 sRGB.
        for (w, h, bc7) in [(37u32, 23u32, false), (64, 40, true), (5, 9, true)] {
            let bytes = if bc7 { 16 } else { 8 };
            let blocks = noise((w.div_ceil(4) * h.div_ceil(4)) as usize * bytes, w * h);
            let file =
                if bc7 { dds(w, h, b"DX10", Some(99), &blocks) } else { dds(w, h, b"DXT1", None, &blocks) };
            let path = dir.path().join(format!("t{w}.dds"));
            std::fs::write(&path, &file).unwrap();
            let src = crate::bake::open::open_image(&path).unwrap();
            assert_eq!(src.size(), (w, h));
            let want = whole(&blocks, w, h, bc7);
            let row = w as usize * 4;
            let mut all = vec![0u8; want.len()];
            src.read_rows(0, &mut all).unwrap();
            assert_eq!(all, want, "{w}x{h}: whole read");
            // Bands of 7 rows overlapping by 2, as the baker reads.
            let mut y = 0;
            while y < h {
                let n = 7.min(h - y);
                let mut band = vec![0u8; n as usize * row];
                src.read_rows(y, &mut band).unwrap();
                assert_eq!(band, want[y as usize * row..(y + n) as usize * row], "{w}x{h}: rows {y}..");
                y += 5;
            }
            let dds = DdsSource::open(&path).unwrap();
            assert_eq!(dds.srgb(), if bc7 { Some(true) } else { None });
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn uncompressed_bgra_reads_as_rgba() {
        let dir = tempfile::tempdir().unwrap();
        let texels = noise(6 * 3 * 4, 7);
        let path = dir.path().join("bgra.dds");
        std::fs::write(&path, dds(6, 3, b"DX10", Some(87), &texels)).unwrap();
        let src = DdsSource::open(&path).unwrap();
        let mut out = vec![0u8; texels.len()];
        src.read_rows(0, &mut out).unwrap();
        for (s, d) in texels.chunks_exact(4).zip(out.chunks_exact(4)) {
            assert_eq!(d, [s[2], s[1], s[0], s[3]]);
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn bad_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.dds");
        let blocks = noise(16 * 16 / 16 * 8, 3);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("truncated data", dds(16, 16, b"DXT1", None, &blocks[..40]), "truncated"),
            ("truncated header", dds(16, 16, b"DXT1", None, &blocks)[..60].to_vec(), "truncated"),
            ("BC6H", dds(16, 16, b"DX10", Some(95), &blocks), "dxgi format 95"),
            ("unknown FourCC", dds(16, 16, b"ABCD", None, &blocks), "fourcc 'abcd'"),
            ("empty", dds(0, 16, b"DXT1", None, &blocks), "empty"),
        ];
        for (what, bytes, says) in cases {
            std::fs::write(&path, bytes).unwrap();
            let e = DdsSource::open(&path).err().unwrap_or_else(|| panic!("{what}: accepted"));
            let text = e.to_string();
            assert!(text.contains("bad.dds") && text.to_lowercase().contains(says), "{what}: {text}");
        }
        // A cube map.
        let mut cube = dds(16, 16, b"DXT1", None, &blocks);
        cube[4 + 108..4 + 112].copy_from_slice(&0x200u32.to_le_bytes());
        std::fs::write(&path, cube).unwrap();
        assert!(DdsSource::open(&path).err().unwrap().to_string().contains("cube map"));
    }
}
