//! KTX2 inputs for a bake (issue 28): Basis Universal payloads (ETC1S / BasisLZ, UASTC,
//! UASTC + Zstandard) transcoded to RGBA8 by the pure-Rust `basisu` transcoder, and
//! uncompressed RGBA8 levels. The top mip level is read; the baker filters its own
//! pyramid. The whole level is decoded once, on the first read, under the memory limit
//! ([`memory_limit`]): game textures are small beside the images the row sources serve.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::bake::input_file::read_input;
use crate::bake::source::{
    RowSource, SourceError, SourceOrigin, TEXEL_BYTES, check_size, memory_limit, out_of_range,
};
use crate::format::atlas::ColorSpace;

/// The KTX2 file identifier.
pub(crate) const IDENTIFIER: [u8; 12] =
    [0xAB, 0x4B, 0x54, 0x58, 0x20, 0x32, 0x30, 0xBB, 0x0D, 0x0A, 0x1A, 0x0A];
/// `VK_FORMAT_R8G8B8A8_UNORM` and `VK_FORMAT_R8G8B8A8_SRGB`.
const VK_RGBA8: [u32; 2] = [37, 43];
/// DFD transfer function `KHR_DF_TRANSFER_SRGB`.
const TRANSFER_SRGB: u8 = 2;

/// A KTX2 texture whose header has been read; its top level is decoded on the first read.
pub struct Ktx2Source {
    path: PathBuf,
    width: u32,
    height: u32,
    srgb: bool,
    decoded: OnceLock<Result<Vec<u8>, String>>,
}

impl Ktx2Source {
    /// Reads and checks the header of the KTX2 file at `path`: a 2D texture (no cube map,
    /// array or volume), of a size the engine takes, whose RGBA8 top level fits the memory
    /// limit. Its payload is decoded at the first read.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let head = read_head(path)?;
        let Header { width, height, srgb } = Header::parse(path, &head)?;
        Ok(Self { path: path.to_path_buf(), width, height, srgb, decoded: OnceLock::new() })
    }

    /// Whether the texels are sRGB-encoded colour (the data format descriptor's transfer
    /// function, or the vkFormat), rather than linear data such as a normal map.
    pub fn srgb(&self) -> bool {
        self.srgb
    }

    /// The top level as RGBA8, decoding it on the first call.
    fn texels(&self) -> std::io::Result<&[u8]> {
        let decoded = self.decoded.get_or_init(|| {
            let bytes = read_input(&self.path, memory_limit()).map_err(|e| e.to_string())?;
            decode(&self.path, &bytes, self.width, self.height)
        });
        match decoded {
            Ok(texels) => Ok(texels),
            Err(message) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message.clone())),
        }
    }
}

/// What a KTX2 header says of the texture a bake reads.
pub(crate) struct Header {
    /// Width of the top level.
    pub(crate) width: u32,
    /// Height of the top level.
    pub(crate) height: u32,
    /// Whether the texels are tagged sRGB colour.
    pub(crate) srgb: bool,
}

impl Header {
    /// Reads and checks the header at the start of `head` (the file's first bytes, its data
    /// format descriptor included), `path` naming it in errors.
    pub(crate) fn parse(path: &Path, head: &[u8]) -> Result<Self, SourceError> {
        let p = path.to_path_buf();
        let unsupported = |reason: String| SourceError::Unsupported { path: p.clone(), reason };
        if head.len() < 80 || head[..12] != IDENTIFIER {
            return Err(unsupported("not a KTX2 file (identifier)".into()));
        }
        // vkFormat, typeSize, pixelWidth, pixelHeight, pixelDepth, layerCount, faceCount,
        // levelCount, supercompressionScheme.
        let field = |i: usize| le32(head, 12 + 4 * i);
        let (vk_format, width, height, depth) = (field(0), field(2), field(3), field(4));
        let (layers, faces, scheme) = (field(5), field(6), field(8));
        if depth > 0 || layers > 1 || faces != 1 {
            return Err(unsupported(format!(
                "a KTX2 texture of depth {depth}, {layers} layers and {faces} faces; only 2D textures bake"
            )));
        }
        if vk_format != 0 && !(VK_RGBA8.contains(&vk_format) && scheme == 0) {
            return Err(unsupported(format!(
                "KTX2 vkFormat {vk_format} with supercompression {scheme} (supported: Basis ETC1S / UASTC, \
                 uncompressed RGBA8)"
            )));
        }
        check_size(path, width, height)?;
        let needed = u64::from(width) * u64::from(height) * TEXEL_BYTES as u64;
        if needed > memory_limit() {
            return Err(SourceError::OverMemory { path: p, width, height, needed, limit: memory_limit() });
        }
        let dfd = le32(head, 48) as usize;
        let transfer = head.get(dfd + 14).copied();
        let srgb = if vk_format == 0 { transfer == Some(TRANSFER_SRGB) } else { vk_format == VK_RGBA8[1] };
        Ok(Self { width, height, srgb })
    }
}

/// A whole KTX2 file held in memory (e.g. a glTF's embedded `image/ktx2`), `path` naming
/// it in errors: its header, and its top level decoded to RGBA8.
pub(crate) fn decode_bytes(path: &Path, bytes: &[u8]) -> Result<(Header, Vec<u8>), SourceError> {
    let header = Header::parse(path, bytes)?;
    let texels = decode(path, bytes, header.width, header.height)
        .map_err(|reason| SourceError::Unsupported { path: path.to_path_buf(), reason })?;
    Ok((header, texels))
}

/// The first 4 KiB of the file (header, level index and data format descriptor).
pub(crate) fn read_head(path: &Path) -> Result<Vec<u8>, SourceError> {
    use std::io::Read as _;
    let io = |source| SourceError::Io { path: path.to_path_buf(), source };
    let mut head = Vec::new();
    std::fs::File::open(path).map_err(io)?.take(4096).read_to_end(&mut head).map_err(io)?;
    Ok(head)
}

/// Decodes the top level of the KTX2 file `bytes` (read from `path`) to `width × height`
/// RGBA8.
fn decode(path: &Path, bytes: &[u8], width: u32, height: u32) -> Result<Vec<u8>, String> {
    let name = path.display();
    let vk_format = le32(bytes, 12);
    let expected = width as usize * height as usize * TEXEL_BYTES;
    // Every level's byte range inside the file, checked here: basisu 0.1.0 adds offset and
    // length unchecked (an overflow panic on a forged index, found by fuzzing).
    let levels = le32(bytes, 40).max(1) as usize;
    for level in 0..levels {
        let at = 80 + 24 * level;
        let end = le64(bytes, at).checked_add(le64(bytes, at + 8));
        if at + 24 > bytes.len() || end.is_none_or(|e| e > bytes.len() as u64) {
            return Err(format!("{name}: truncated or corrupt: level {level} lies outside the file"));
        }
    }
    if vk_format != 0 {
        // Uncompressed RGBA8: level 0's byte range from the level index.
        let (offset, length) = (le64(bytes, 80), le64(bytes, 88));
        let range = usize::try_from(offset).ok().zip(usize::try_from(length).ok());
        return match range.and_then(|(o, l)| bytes.get(o..o.checked_add(l)?)) {
            Some(level) if level.len() == expected => Ok(level.to_vec()),
            Some(level) => Err(format!(
                "{name}: level 0 holds {} bytes, a {width}x{height} RGBA8 level {expected}",
                level.len()
            )),
            None => Err(format!("{name}: truncated: level 0 lies outside the file")),
        };
    }
    let run = || -> Result<Vec<u8>, String> {
        let tex = basisu::Transcoder::new(bytes)
            .map_err(|e| format!("{name}: not a readable Basis KTX2: {e:?}"))?;
        if tex.base_dimensions() != (width, height) {
            return Err(format!(
                "{name}: the transcoder reads {:?}, the header says {width}x{height}",
                tex.base_dimensions()
            ));
        }
        let out = tex
            .transcode(0, basisu::TargetFormat::Rgba32, basisu::DecodeFlags::NONE)
            .map_err(|e| format!("{name}: cannot transcode level 0: {e:?}"))?;
        if out.len() != expected {
            return Err(format!("{name}: level 0 transcoded to {} bytes, expected {expected}", out.len()));
        }
        Ok(out)
    };
    catch_unwind(AssertUnwindSafe(run))
        .unwrap_or_else(|_| Err(format!("{name}: the transcoder failed on its contents")))
}

impl RowSource for Ktx2Source {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let start = y0 as usize * self.width as usize * TEXEL_BYTES;
        let texels = self.texels()?;
        let src = start
            .checked_add(out.len())
            .and_then(|end| texels.get(start..end))
            .ok_or_else(|| out_of_range(y0))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::File(self.path.clone()))
    }

    fn color_space(&self) -> Option<ColorSpace> {
        Some(if self.srgb { ColorSpace::Srgb } else { ColorSpace::Linear })
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
}

fn le64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or([0; 8])))
}

/// Encodes `width × height` RGBA8 texels into a KTX2 file of one level with the Basis
/// Universal encoder: ETC1S in BasisLZ supercompression, or UASTC without
/// supercompression, the data format descriptor tagging `opts.color` (sRGB colour or
/// linear data). Such a file bakes like any image ([`Ktx2Source`]) and is what glTF's
/// `KHR_texture_basisu` references.
pub fn encode_ktx2(
    rgba: &[u8],
    width: u32,
    height: u32,
    mode: crate::format::basis::BasisMode,
    opts: &crate::format::codec::EncodeOptions,
) -> Result<Vec<u8>, crate::format::codec::CodecError> {
    use crate::format::basis::{BasisMode, basis_parts, encode_image};
    let file = encode_image(rgba, width, height, mode, opts)?;
    let broken =
        || crate::format::codec::CodecError::Encode("the encoder's .basis file does not parse".into());
    let parts = basis_parts(&file).ok_or_else(broken)?;
    let transfer = match opts.color {
        ColorSpace::Srgb => TRANSFER_SRGB,
        ColorSpace::Linear => 1,
    };
    Ok(match mode {
        BasisMode::Uastc => {
            ktx2_file(width, height, 0, transfer, 1, parts.slices.first().ok_or_else(broken)?)
        }
        BasisMode::Etc1s => etc1s_ktx2(width, height, transfer, &parts),
    })
}

/// A BasisLZ (ETC1S) KTX2 of one level from the parts of a `.basis` file.
fn etc1s_ktx2(w: u32, h: u32, transfer: u8, parts: &crate::format::basis::BasisParts<'_>) -> Vec<u8> {
    let words = |f: &mut Vec<u8>, vs: &[u32]| vs.iter().for_each(|v| f.extend_from_slice(&v.to_le_bytes()));
    let alpha = parts.slices.len() > 1;
    // Data format descriptor: ETC1S colour model 163, BT.709 primaries, one sample of 64
    // bits for colour (channel 0: RGB), one for alpha (channel 15: AAA) when present.
    let samples: &[u32] = if alpha { &[0, 15] } else { &[0] };
    let dfd_len = 4 + 24 + 16 * samples.len() as u32;
    let mut dfd = Vec::new();
    let model = 163 | 1 << 8 | u32::from(transfer) << 16;
    words(&mut dfd, &[dfd_len, 0, 2 | (dfd_len - 4) << 16, model, 3 | 3 << 8, 0, 0]);
    for (i, &channel) in samples.iter().enumerate() {
        words(&mut dfd, &[(64 * i as u32) | 63 << 16 | channel << 24, 0, 0, u32::MAX]);
    }
    // Supercompression global data: counts and lengths, one image descriptor (the slices'
    // places in the level), then the codebooks and tables.
    let [endpoints, selectors, tables] = parts.codebooks;
    let rgb_len = parts.slices[0].len() as u32;
    let alpha_len = parts.slices.get(1).map_or(0, |s| s.len() as u32);
    let mut sgd = Vec::new();
    sgd.extend_from_slice(&parts.counts.0.to_le_bytes());
    sgd.extend_from_slice(&parts.counts.1.to_le_bytes());
    words(&mut sgd, &[endpoints.len() as u32, selectors.len() as u32, tables.len() as u32, 0]);
    words(&mut sgd, &[0, 0, rgb_len, if alpha { rgb_len } else { 0 }, alpha_len]);
    for part in [endpoints, selectors, tables] {
        sgd.extend_from_slice(part);
    }
    let level: Vec<u8> = parts.slices.concat();
    let dfd_offset = 80 + 24u32;
    let sgd_offset = u64::from(dfd_offset + dfd_len).next_multiple_of(8);
    let level_offset = sgd_offset + sgd.len() as u64;
    let mut f = IDENTIFIER.to_vec();
    words(&mut f, &[0, 1, w, h, 0, 0, 1, 1, 1]);
    words(&mut f, &[dfd_offset, dfd_len, 0, 0]);
    for v in [sgd_offset, sgd.len() as u64, level_offset, level.len() as u64, 0] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(&dfd);
    f.resize(sgd_offset as usize, 0);
    f.extend_from_slice(&sgd);
    f.extend_from_slice(&level);
    f
}

/// A KTX2 file of one `w × h` level, for tests and fuzz seeds: `vk_format` 0 with a UASTC data format
/// descriptor (transfer function `transfer`), or an RGBA8 vkFormat; `faces` faces.
pub(crate) fn ktx2_file(w: u32, h: u32, vk_format: u32, transfer: u8, faces: u32, level: &[u8]) -> Vec<u8> {
    let mut f = IDENTIFIER.to_vec();
    let words = |f: &mut Vec<u8>, vs: &[u32]| vs.iter().for_each(|v| f.extend_from_slice(&v.to_le_bytes()));
    let (dfd_offset, dfd_len) = (80 + 24, 44u32);
    let level_offset = u64::from(dfd_offset + dfd_len).next_multiple_of(16);
    words(&mut f, &[vk_format, 1, w, h, 0, 0, faces, 1, 0]);
    words(&mut f, &[dfd_offset, dfd_len, 0, 0]);
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    for v in [level_offset, level.len() as u64, level.len() as u64] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    // Data format descriptor: total size, block header (version 2, 40 bytes), UASTC
    // colour model 166, BT.709 primaries, the transfer function, 4×4 blocks of 16 bytes,
    // one RGBA sample of 128 bits.
    let model = u32::from(166u8) | 1 << 8 | u32::from(transfer) << 16;
    words(&mut f, &[44, 0, 2 | 40 << 16, model, 3 | 3 << 8, 16, 0, 127 << 16 | 3 << 24, 0, 0, u32::MAX]);
    f.resize(level_offset as usize, 0);
    f.extend_from_slice(level);
    f
}

/// The raw UASTC blocks of a one-image `.basis` file (its first slice), for tests and
/// fuzz seeds; `None` when the file is too short for what its header says.
pub(crate) fn uastc_blocks(basis_file: &[u8]) -> Option<Vec<u8>> {
    let desc = le32(basis_file, 65) as usize;
    let (offset, size) = (le32(basis_file, desc + 13) as usize, le32(basis_file, desc + 17) as usize);
    basis_file.get(offset..offset.checked_add(size)?).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::bake::open::open_image;
    use crate::format::basis::{self, BasisMode};
    use crate::format::codec::EncodeOptions;

    fn noisy(side: u32) -> Vec<u8> {
        (0..side * side * 4)
            .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8 / 2 + (i % 97) as u8)
            .collect()
    }

    #[test]
    fn uastc_ktx2_transcodes_to_the_texels_of_its_basis_twin() {
        let dir = tempfile::tempdir().unwrap();
        let side = 64;
        let texels = noisy(side);
        let basis_file = basis::encode(&texels, side, BasisMode::Uastc, &EncodeOptions::default()).unwrap();
        let want = crate::format::basis::transcode(
            &basis_file,
            BasisMode::Uastc,
            side,
            crate::format::codec::TargetFormat::Rgba8,
            crate::format::basis::DataCheck::Crc16,
        )
        .unwrap();
        for (transfer, srgb) in [(2u8, true), (1, false)] {
            let path = dir.path().join(format!("t{transfer}.ktx2"));
            std::fs::write(&path, ktx2_file(side, side, 0, transfer, 1, &uastc_blocks(&basis_file).unwrap()))
                .unwrap();
            let src = crate::bake::open::open_image(&path).unwrap();
            assert_eq!(src.size(), (side, side));
            let mut out = vec![0u8; want.len()];
            src.read_rows(0, &mut out).unwrap();
            assert_eq!(out, want, "the KTX2 UASTC level decodes like the same blocks in a .basis file");
            assert_eq!(Ktx2Source::open(&path).unwrap().srgb(), srgb);
        }
    }

    #[test]
    fn encoded_ktx2_files_decode_like_their_basis_files() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (96u32, 64u32);
        let mut texels: Vec<u8> =
            (0..w * h * 4).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
        for mode in [BasisMode::Etc1s, BasisMode::Uastc] {
            for (alpha, color) in [(false, ColorSpace::Srgb), (true, ColorSpace::Linear)] {
                for (i, t) in texels.chunks_exact_mut(4).enumerate() {
                    t[3] = if alpha { (i % 256) as u8 } else { 255 };
                }
                let opts = EncodeOptions { color, ..EncodeOptions::default() };
                let basis_file = basis::encode_image(&texels, w, h, mode, &opts).unwrap();
                let want = basisu::Transcoder::new(&basis_file)
                    .unwrap()
                    .transcode(0, basisu::TargetFormat::Rgba32, basisu::DecodeFlags::NONE)
                    .unwrap();
                let path = dir.path().join(format!("{}-{alpha}.ktx2", mode.name()));
                std::fs::write(&path, encode_ktx2(&texels, w, h, mode, &opts).unwrap()).unwrap();
                let src = Ktx2Source::open(&path).unwrap();
                assert_eq!(src.size(), (w, h));
                assert_eq!(src.color_space(), Some(color), "{path:?}");
                let mut out = vec![0u8; want.len()];
                src.read_rows(0, &mut out).unwrap();
                assert_eq!(out, want, "{}: the KTX2 holds the .basis file's image", path.display());
            }
        }
        // A square ETC1S one against the C++ transcoder of its .basis twin.
        let side = 64;
        let texels = noisy(side);
        let basis_file = basis::encode(&texels, side, BasisMode::Etc1s, &EncodeOptions::default()).unwrap();
        let want = basis::transcode(
            &basis_file,
            BasisMode::Etc1s,
            side,
            crate::format::codec::TargetFormat::Rgba8,
            basis::DataCheck::Crc16,
        )
        .unwrap();
        let path = dir.path().join("square.ktx2");
        std::fs::write(
            &path,
            encode_ktx2(&texels, side, side, BasisMode::Etc1s, &EncodeOptions::default()).unwrap(),
        )
        .unwrap();
        let mut out = vec![0u8; want.len()];
        open_image(&path).unwrap().read_rows(0, &mut out).unwrap();
        assert_eq!(out, want);
    }

    #[test]
    fn rgba8_ktx2_reads_its_texels() {
        let dir = tempfile::tempdir().unwrap();
        let texels = noisy(16);
        let path = dir.path().join("rgba.ktx2");
        std::fs::write(&path, ktx2_file(16, 16, VK_RGBA8[1], 2, 1, &texels)).unwrap();
        let src = Ktx2Source::open(&path).unwrap();
        assert!(src.srgb());
        let mut out = vec![0u8; texels.len()];
        src.read_rows(0, &mut out).unwrap();
        assert_eq!(out, texels);
    }

    #[test]
    fn bad_ktx2_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.ktx2");
        let blocks = vec![0u8; 16 * 16];
        std::fs::write(&path, ktx2_file(16, 16, 0, 2, 6, &blocks)).unwrap();
        let e = Ktx2Source::open(&path).err().unwrap().to_string();
        assert!(e.contains("bad.ktx2") && e.contains("6 faces"), "{e}");
        std::fs::write(&path, ktx2_file(16, 16, 44, 2, 1, &blocks)).unwrap();
        let e = Ktx2Source::open(&path).err().unwrap().to_string();
        assert!(e.contains("vkFormat 44"), "{e}");
        // Cut short: the header reads, the level does not.
        let whole = ktx2_file(16, 16, 0, 2, 1, &blocks);
        std::fs::write(&path, &whole[..whole.len() - 100]).unwrap();
        let src = Ktx2Source::open(&path).unwrap();
        let mut out = vec![0u8; 16 * 16 * 4];
        let e = src.read_rows(0, &mut out).unwrap_err().to_string();
        assert!(e.contains("bad.ktx2"), "{e}");
        let mut rgba = ktx2_file(16, 16, VK_RGBA8[0], 1, 1, &noisy(16));
        rgba.truncate(rgba.len() - 10);
        std::fs::write(&path, rgba).unwrap();
        let e = Ktx2Source::open(&path).unwrap().read_rows(0, &mut out).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
    }
}
