//! KTX2 inputs for a bake (issue 28): Basis Universal payloads (ETC1S / BasisLZ, UASTC,
//! UASTC + Zstandard) transcoded to RGBA8 by the pure-Rust `basisu` transcoder, and
//! uncompressed RGBA8 levels. The top mip level is read; the baker filters its own
//! pyramid. The whole level is decoded once, on the first read, under the memory limit
//! ([`memory_limit`]): game textures are small beside the images the row sources serve.
//!
//! Every offset and length of the header (data format descriptor, key/value data,
//! supercompression global data, level index) is checked against the file, and every
//! level's length against what the texture's size and format imply, before anything is
//! allocated or handed to the transcoder; a Zstandard level is inflated here, capped at
//! that length (`ktx2/zstd.rs`).

pub(super) mod zstd;

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
/// DFD colour models `KHR_DF_MODEL_ETC1S` and `KHR_DF_MODEL_UASTC`.
const MODEL_ETC1S: u8 = 163;
const MODEL_UASTC: u8 = 166;
/// Supercompression schemes: none, BasisLZ, Zstandard.
const SCHEME_NONE: u32 = 0;
const SCHEME_BASISLZ: u32 = 1;
const SCHEME_ZSTD: u32 = 2;
/// Where the level index starts, and its entries' size.
const INDEX_AT: usize = 80;
const INDEX_ENTRY: usize = 24;
/// Bytes of the file [`read_head`] reads: the header, level index and data format
/// descriptor, which the format places first.
const HEAD_BYTES: u64 = 4096;

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
    ///
    /// Offsets and lengths in the header and level index are checked against the file's
    /// length and the texture's size now, and the memory the decode needs (the file, an
    /// inflated Zstandard level and the RGBA8 texels) against [`memory_limit`].
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let io = |source| SourceError::Io { path: path.to_path_buf(), source };
        let file_len = std::fs::metadata(path).map_err(io)?.len();
        let head = read_head(path)?;
        let Header { width, height, srgb } = Header::parse(path, &head)?;
        let layout = Layout::check(path, &head, file_len, width, height)?;
        let texels = u64::from(width) * u64::from(height) * TEXEL_BYTES as u64;
        let inflated = zstd_level_bytes(&layout);
        let needed = file_len.saturating_add(inflated).saturating_add(texels);
        if needed > memory_limit() {
            let limit = memory_limit();
            return Err(SourceError::OverMemory { path: path.to_path_buf(), width, height, needed, limit });
        }
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
    std::fs::File::open(path).map_err(io)?.take(HEAD_BYTES).read_to_end(&mut head).map_err(io)?;
    Ok(head)
}

/// What a KTX2 file's levels hold, by its vkFormat, colour model and supercompression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    /// Uncompressed RGBA8 texels.
    Rgba8,
    /// Basis ETC1S in BasisLZ supercompression.
    Etc1s,
    /// UASTC blocks, uncompressed.
    Uastc,
    /// UASTC blocks, each level a Zstandard frame.
    UastcZstd,
}

/// A KTX2 file's header and level index, checked against the file and the texture's size.
struct Layout {
    payload: Payload,
    /// Level 0: byte offset and length in the file, and its size once inflated.
    level0: (u64, u64, u64),
    /// The data format descriptor's offset and length (inside the head).
    dfd: (usize, usize),
}

/// The bytes a Zstandard level 0 inflates to (0 for other payloads).
fn zstd_level_bytes(layout: &Layout) -> u64 {
    if layout.payload == Payload::UastcZstd { layout.level0.2 } else { 0 }
}

impl Layout {
    /// Checks the header and level index at the start of `head` (the file's first bytes,
    /// or all of them) of the `file_len`-byte KTX2 `path`, a `width × height` texture whose
    /// header [`Header::parse`] accepted: every offset and length within the file, and every
    /// level's length what its size and format imply. Errors name the file and the field.
    fn check(path: &Path, head: &[u8], file_len: u64, width: u32, height: u32) -> Result<Self, SourceError> {
        let p = || path.to_path_buf();
        let bad = |reason: String| SourceError::Decode { path: p(), reason };
        let past_end = |reason: String| SourceError::Truncated { path: p(), reason };
        let (vk_format, level_count, scheme) = (le32(head, 12), le32(head, 40), le32(head, 44));
        let levels = level_count.max(1) as usize;
        let most = 32 - width.max(height).leading_zeros();
        if levels > most as usize {
            return Err(bad(format!(
                "KTX2 levelCount {level_count}: a {width}x{height} texture has at most {most} levels"
            )));
        }
        let index_end = INDEX_AT + INDEX_ENTRY * levels;
        if index_end as u64 > file_len || index_end > head.len() {
            return Err(past_end(format!("the KTX2 level index ({levels} levels) ends past the file")));
        }
        // The data format descriptor follows the level index, inside the head.
        let (dfd_at, dfd_len) = (le32(head, 48) as usize, le32(head, 52) as usize);
        let in_head = head.len().min(usize::try_from(file_len).unwrap_or(usize::MAX));
        if dfd_len < 44 || dfd_at < index_end || dfd_at.checked_add(dfd_len).is_none_or(|e| e > in_head) {
            return Err(bad(format!(
                "KTX2 dfdByteOffset {dfd_at} and dfdByteLength {dfd_len} do not place a data format \
                 descriptor between the level index (ending at byte {index_end}) and byte {in_head}"
            )));
        }
        let within = |name: &str, at: u64, len: u64| match at.checked_add(len) {
            Some(end) if end <= file_len => Ok(()),
            _ => Err(bad(format!(
                "KTX2 {name}ByteOffset {at} and {name}ByteLength {len} reach past the end of the file \
                 ({file_len} bytes)"
            ))),
        };
        within("kvd", u64::from(le32(head, 56)), u64::from(le32(head, 60)))?;
        let (sgd_at, sgd_len) = (le64(head, 64), le64(head, 72));
        within("sgd", sgd_at, sgd_len)?;
        let model = head[dfd_at + 12];
        let payload = match (vk_format, scheme, model) {
            (v, SCHEME_NONE, _) if VK_RGBA8.contains(&v) => Payload::Rgba8,
            (0, SCHEME_BASISLZ, MODEL_ETC1S) => Payload::Etc1s,
            (0, SCHEME_NONE, MODEL_UASTC) => Payload::Uastc,
            (0, SCHEME_ZSTD, MODEL_UASTC) => Payload::UastcZstd,
            _ => {
                return Err(SourceError::Unsupported {
                    path: p(),
                    reason: format!(
                        "KTX2 vkFormat {vk_format}, colour model {model} and supercompression {scheme} \
                         (supported: ETC1S in BasisLZ, UASTC uncompressed or in Zstandard, uncompressed RGBA8)"
                    ),
                });
            }
        };
        if payload == Payload::Etc1s {
            check_etc1s_sgd(head, sgd_at, sgd_len, levels).map_err(bad)?;
        }
        let mut level0 = (0, 0, 0);
        for i in 0..levels {
            let at = INDEX_AT + INDEX_ENTRY * i;
            let (offset, length, full) = (le64(head, at), le64(head, at + 8), le64(head, at + 16));
            let end = offset.checked_add(length);
            if end.is_none_or(|e| e > file_len) {
                return Err(past_end(format!(
                    "KTX2 level {i} (byteOffset {offset}, byteLength {length}) lies past the end of the file \
                     ({file_len} bytes)"
                )));
            }
            let (lw, lh) = (u64::from((width >> i).max(1)), u64::from((height >> i).max(1)));
            let expected = match payload {
                Payload::Rgba8 => lw * lh * TEXEL_BYTES as u64,
                Payload::Uastc | Payload::UastcZstd => lw.div_ceil(4) * lh.div_ceil(4) * 16,
                Payload::Etc1s => 0,
            };
            let what = match payload {
                Payload::Rgba8 => "RGBA8",
                _ => "UASTC",
            };
            match payload {
                Payload::Etc1s if full != 0 => {
                    return Err(bad(format!(
                        "KTX2 level {i} uncompressedByteLength {full}: a BasisLZ level records 0"
                    )));
                }
                Payload::Rgba8 | Payload::Uastc if length != expected || full != expected => {
                    return Err(bad(format!(
                        "KTX2 level {i} byteLength {length} and uncompressedByteLength {full}: \
                         the {lw}x{lh} {what} level holds {expected} bytes"
                    )));
                }
                Payload::UastcZstd if full != expected => {
                    return Err(bad(format!(
                        "KTX2 level {i} uncompressedByteLength {full}: the {lw}x{lh} UASTC level holds \
                         {expected} bytes"
                    )));
                }
                _ => {}
            }
            if i == 0 {
                level0 = (offset, length, expected);
            }
        }
        Ok(Self { payload, level0, dfd: (dfd_at, dfd_len) })
    }
}

/// Checks that the BasisLZ global data of `len` bytes at `at` holds what its own header
/// says (codebooks and tables, and an image descriptor for each of `levels` levels), when
/// it lies inside `head`; the transcoder reads it whole.
fn check_etc1s_sgd(head: &[u8], at: u64, len: u64, levels: usize) -> Result<(), String> {
    if len == 0 {
        return Err("an ETC1S (BasisLZ) KTX2 without supercompression global data (sgdByteLength 0)".into());
    }
    let Some(start) = usize::try_from(at).ok().filter(|&a| a.saturating_add(20) <= head.len()) else {
        // Past the head: checked when the whole file is decoded.
        return Ok(());
    };
    let parts: u64 = (0..4).map(|k| u64::from(le32(head, start + 4 + 4 * k))).sum();
    let needed = 20 + 20 * levels as u64 + parts;
    if needed > len {
        return Err(format!("KTX2 sgdByteLength {len}: its BasisLZ global data describes {needed} bytes"));
    }
    Ok(())
}

/// Decodes the top level of the KTX2 file `bytes` (read from `path`) to `width × height`
/// RGBA8, after checking its layout ([`Layout::check`]).
fn decode(path: &Path, bytes: &[u8], width: u32, height: u32) -> Result<Vec<u8>, String> {
    let name = path.display();
    let layout = Layout::check(path, bytes, bytes.len() as u64, width, height).map_err(|e| e.to_string())?;
    let expected = width as usize * height as usize * TEXEL_BYTES;
    // Inside the file: checked above.
    let (offset, length, full) = layout.level0;
    let level = &bytes[offset as usize..(offset + length) as usize];
    let run = || -> Result<Vec<u8>, String> {
        let inflated;
        let file = match layout.payload {
            Payload::Rgba8 => return Ok(level.to_vec()),
            Payload::UastcZstd => {
                let texels = zstd::inflate_exact(level, full as usize, "level")
                    .map_err(|e| format!("{name}: KTX2 level 0: {e}"))?;
                inflated = uncompressed_uastc(bytes, layout.dfd, &texels);
                &inflated
            }
            Payload::Etc1s | Payload::Uastc => bytes,
        };
        let tex =
            basisu::Transcoder::new(file).map_err(|e| format!("{name}: not a readable Basis KTX2: {e:?}"))?;
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

/// The KTX2 file `file` (UASTC in Zstandard) rewritten with `level`, its level 0 inflated,
/// as its one uncompressed level: the header, the data format descriptor at `dfd`, no
/// key/value or global data. The transcoder then inflates nothing itself.
fn uncompressed_uastc(file: &[u8], dfd: (usize, usize), level: &[u8]) -> Vec<u8> {
    let (dfd_at, dfd_len) = dfd;
    let dfd_offset = INDEX_AT + INDEX_ENTRY;
    let level_offset = (dfd_offset + dfd_len).next_multiple_of(16);
    let mut out = file[..INDEX_AT].to_vec();
    out[40..44].copy_from_slice(&1u32.to_le_bytes());
    out[44..48].copy_from_slice(&SCHEME_NONE.to_le_bytes());
    out[48..52].copy_from_slice(&(dfd_offset as u32).to_le_bytes());
    // Key/value and supercompression global data: none.
    out[56..80].fill(0);
    for v in [level_offset as u64, level.len() as u64, level.len() as u64] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&file[dfd_at..dfd_at + dfd_len]);
    out.resize(level_offset, 0);
    out.extend_from_slice(level);
    out
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

/// A Zstandard frame holding `data` in raw (stored) blocks, its size declared, for tests and
/// fuzz seeds.
pub(crate) fn zstd_raw_frame(data: &[u8]) -> Vec<u8> {
    // Magic number; a single-segment frame with an 8-byte content size.
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
    f.extend_from_slice(&(data.len() as u64).to_le_bytes());
    let blocks: Vec<&[u8]> = if data.is_empty() { vec![&[]] } else { data.chunks(128 << 10).collect() };
    for (i, block) in blocks.iter().enumerate() {
        // Block header: last-block bit, type 0 (raw), size.
        let header = u32::from(i + 1 == blocks.len()) | (block.len() as u32) << 3;
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.extend_from_slice(block);
    }
    f
}

/// A UASTC KTX2 file of one `w × h` level (`blocks`) in Zstandard supercompression, for
/// tests and fuzz seeds.
pub(crate) fn uastc_zstd_ktx2(w: u32, h: u32, blocks: &[u8]) -> Vec<u8> {
    let mut f = ktx2_file(w, h, 0, TRANSFER_SRGB, 1, &zstd_raw_frame(blocks));
    f[44..48].copy_from_slice(&SCHEME_ZSTD.to_le_bytes());
    f[96..104].copy_from_slice(&(blocks.len() as u64).to_le_bytes());
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
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
        // Cut short: refused at open, from the level index.
        let whole = ktx2_file(16, 16, 0, 2, 1, &blocks);
        std::fs::write(&path, &whole[..whole.len() - 100]).unwrap();
        let e = Ktx2Source::open(&path).err().unwrap().to_string();
        assert!(e.contains("bad.ktx2") && e.contains("truncated") && e.contains("level 0"), "{e}");
        let mut rgba = ktx2_file(16, 16, VK_RGBA8[0], 1, 1, &noisy(16));
        rgba.truncate(rgba.len() - 10);
        std::fs::write(&path, &rgba).unwrap();
        let e = Ktx2Source::open(&path).err().unwrap().to_string();
        assert!(e.contains("truncated"), "{e}");
        // The same checks on a file in memory (a glTF's embedded image).
        let e = decode_bytes(&path, &rgba).err().unwrap().to_string();
        assert!(e.contains("bad.ktx2") && e.contains("truncated"), "{e}");
    }

    /// The UASTC blocks of a 64×64 noise image and its RGBA8 texels through the .basis path.
    fn uastc_64() -> (Vec<u8>, Vec<u8>) {
        let basis_file = basis::encode(&noisy(64), 64, BasisMode::Uastc, &EncodeOptions::default()).unwrap();
        let want = basisu::Transcoder::new(&basis_file)
            .unwrap()
            .transcode(0, basisu::TargetFormat::Rgba32, basisu::DecodeFlags::NONE)
            .unwrap();
        (uastc_blocks(&basis_file).unwrap(), want)
    }

    fn read_all(path: &Path) -> Result<Vec<u8>, String> {
        let src = Ktx2Source::open(path).map_err(|e| e.to_string())?;
        let (w, h) = src.size();
        let mut out = vec![0u8; (w * h * 4) as usize];
        src.read_rows(0, &mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn zstd_uastc_ktx2_decodes_like_its_uncompressed_twin() {
        let dir = tempfile::tempdir().unwrap();
        let (blocks, want) = uastc_64();
        let path = dir.path().join("zstd.ktx2");
        std::fs::write(&path, uastc_zstd_ktx2(64, 64, &blocks)).unwrap();
        assert_eq!(read_all(&path).unwrap(), want);
        assert_eq!(decode_bytes(&path, &std::fs::read(&path).unwrap()).unwrap().1, want);
    }

    /// Issue 41, hostile case 1: level 0's `uncompressedByteLength` of 5 GiB aborted the
    /// process on a failed allocation; 2^64 - 1 was a caught capacity-overflow panic.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn level_lengths_that_disagree_with_the_texture_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let (blocks, _) = uastc_64();
        let good = uastc_zstd_ktx2(64, 64, &blocks);
        let plain = ktx2_file(64, 64, 0, 2, 1, &blocks);
        for (name, file, at) in [("zstd", &good, 96), ("plain", &plain, 96), ("plain-length", &plain, 88)] {
            for value in [5u64 << 30, u64::MAX, 0, 4097, 1 << 32] {
                let mut f = file.clone();
                f[at..at + 8].copy_from_slice(&value.to_le_bytes());
                let path = dir.path().join(format!("{name}-{value}.ktx2"));
                std::fs::write(&path, &f).unwrap();
                let e = Ktx2Source::open(&path).err().map(|e| e.to_string()).unwrap_or_default();
                let field = if at == 96 { "uncompressedByteLength" } else { "byteLength" };
                assert!(e.contains(&*path.to_string_lossy()) && e.contains(field), "{name} {value}: {e}");
                let e = decode_bytes(&path, &f).err().unwrap().to_string();
                assert!(e.contains(field) || e.contains("truncated"), "{name} {value}: {e}");
            }
        }
    }

    /// Issue 41, hostile case 2: a small Zstandard level that inflates to 1 GiB baked at a
    /// 2.1 GB peak under `--max-memory 64MiB`. Declared or not, it stops at the level's size.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn zstd_bombs_stop_at_the_level_size() {
        let dir = tempfile::tempdir().unwrap();
        let (blocks, _) = uastc_64();
        // 8192 RLE blocks of 128 KiB: 1 GiB from 32 KiB, no content size declared.
        let mut bomb = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58];
        for i in 0..8192u32 {
            let header = u32::from(i == 8191) | 1 << 1 | (128 << 10) << 3;
            bomb.extend_from_slice(&header.to_le_bytes()[..3]);
            bomb.push(0x55);
        }
        let file = |uncompressed: u64| {
            let mut f = ktx2_file(64, 64, 0, 2, 1, &bomb);
            f[44..48].copy_from_slice(&SCHEME_ZSTD.to_le_bytes());
            f[96..104].copy_from_slice(&uncompressed.to_le_bytes());
            f
        };
        let path = dir.path().join("bomb.ktx2");
        // Declared as 1 GiB: refused at open, before anything is inflated.
        std::fs::write(&path, file(1 << 30)).unwrap();
        let e = Ktx2Source::open(&path).err().unwrap().to_string();
        assert!(e.contains("bomb.ktx2") && e.contains("uncompressedByteLength 1073741824"), "{e}");
        // Declared as the 4096 bytes the level holds: the first block passes them.
        std::fs::write(&path, file(blocks.len() as u64)).unwrap();
        let e = read_all(&path).unwrap_err();
        assert!(
            e.contains("bomb.ktx2") && e.contains("past the level's 4096 bytes (to 131072 or more)"),
            "{e}"
        );
        // A frame whose header declares more than the level.
        let mut declared = zstd_raw_frame(&blocks);
        declared[5..13].copy_from_slice(&(1u64 << 30).to_le_bytes());
        let mut f = ktx2_file(64, 64, 0, 2, 1, &declared);
        f[44..48].copy_from_slice(&SCHEME_ZSTD.to_le_bytes());
        f[96..104].copy_from_slice(&(blocks.len() as u64).to_le_bytes());
        std::fs::write(&path, f).unwrap();
        let e = read_all(&path).unwrap_err();
        assert!(e.contains("declares 1073741824 bytes"), "{e}");
    }

    /// Issue 41, hostile case 3: `sgdByteOffset` = 2^64 - 1 in an ETC1S KTX2 panicked inside
    /// the transcoder. Every offset and length of the header is checked first.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn header_offsets_outside_the_file_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let etc1s = encode_ktx2(&noisy(16), 16, 16, BasisMode::Etc1s, &EncodeOptions::default()).unwrap();
        let at64 = |f: &mut Vec<u8>, at: usize, v: u64| f[at..at + 8].copy_from_slice(&v.to_le_bytes());
        let at32 = |f: &mut Vec<u8>, at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        type Forge<'a> = dyn Fn(&mut Vec<u8>) + 'a;
        let cases: [(&str, &Forge<'_>); 9] = [
            ("sgdByteOffset", &|f| at64(f, 64, u64::MAX)),
            ("sgdByteLength", &|f| at64(f, 72, u64::MAX - 10)),
            ("sgdByteLength 0", &|f| at64(f, 72, 0)),
            ("sgdByteLength 30", &|f| at64(f, 72, 30)),
            ("dfdByteOffset", &|f| at32(f, 48, u32::MAX)),
            ("dfdByteLength", &|f| at32(f, 52, 3)),
            ("kvdByteOffset", &|f| {
                at32(f, 56, u32::MAX);
                at32(f, 60, 1);
            }),
            ("levelCount", &|f| at32(f, 40, 40)),
            ("level 0", &|f| at64(f, 80, u64::MAX)),
        ];
        for (field, forge) in cases {
            let mut f = etc1s.clone();
            forge(&mut f);
            let path = dir.path().join("forged.ktx2");
            std::fs::write(&path, &f).unwrap();
            let e = Ktx2Source::open(&path).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("forged.ktx2") && e.contains(field), "{field}: {e}");
            let e = decode_bytes(&path, &f).err().unwrap().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
