//! Basis Universal tiles: each tile (border included) is one small `.basis` file, in
//! ETC1S or UASTC mode, encoded with the `basis-universal` crate's C++ compressor (at bake
//! time only) and transcoded on loader threads to the GPU pool's format by the pure-Rust
//! transcoder ([`transcode`], [`crate::format::basis_rust`]). No C or C++ runs at run time.
//!
//! Before a blob is transcoded, `check_structure` reads the file header and every slice
//! descriptor, overflow-safe: signature, version, sizes, the header's CRC-16, counts (one
//! image of one level), the mode and flags, the tile's size in texels and blocks, and that
//! the slice table, codebooks, Huffman tables and slices lie inside the file without
//! overlapping. Then the data's CRC-16 is checked (unless the caller has verified the blob
//! already, see [`DataCheck`]), and for ETC1S the slice streams are walked
//! (`basis_rust::check_etc1s_streams`). A damaged or forged tile is a [`CodecError`],
//! never a crash.
//!
//! The C++ transcoder of the same crate is only compiled with the `cpp-transcoder`
//! feature (`basis::cpp`), for tests and benchmarks that compare the two.

use crate::format::codec_types::{CodecError, TargetFormat};

#[cfg(feature = "cpp-transcoder")]
pub mod cpp;
// The C++ encoder is native only: the browser build (wasm32) links no C or C++.
#[cfg(not(target_arch = "wasm32"))]
mod encoder;
pub use encoder::{encode, encode_image, init};

/// The browser build's stand-in for the C++ encoder: encoding is an error there (tiles
/// are baked natively; the browser only transcodes).
#[cfg(target_arch = "wasm32")]
mod encoder {
    use super::BasisMode;
    use crate::format::codec_types::{CodecError, EncodeOptions};

    /// Does nothing: there is no encoder to initialise on wasm32.
    pub fn init() {}

    /// Fails: the wasm32 build has no Basis Universal encoder.
    pub fn encode(
        _rgba: &[u8],
        _side: u32,
        mode: BasisMode,
        _opts: &EncodeOptions,
    ) -> Result<Vec<u8>, CodecError> {
        Err(unavailable(mode))
    }

    /// Fails: the wasm32 build has no Basis Universal encoder.
    pub fn encode_image(
        _rgba: &[u8],
        _width: u32,
        _height: u32,
        mode: BasisMode,
        _opts: &EncodeOptions,
    ) -> Result<Vec<u8>, CodecError> {
        Err(unavailable(mode))
    }

    fn unavailable(mode: BasisMode) -> CodecError {
        CodecError::Encode(format!(
            "{} encoding needs the C++ Basis Universal encoder, which wasm32 builds lack",
            mode.name()
        ))
    }
}

/// The two Basis Universal modes a tile can be stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BasisMode {
    /// ETC1S: lossy, a per-file codebook, typically 0.5–2 bits per texel.
    Etc1s,
    /// UASTC 4×4: near-lossless, 8 bits per texel before supercompression.
    Uastc,
}

impl BasisMode {
    /// The `basis_tex_format` code stored in a `.basis` header (`cETC1S`, `cUASTC4x4`).
    fn header_code(self) -> i32 {
        match self {
            BasisMode::Etc1s => 0,
            BasisMode::Uastc => 1,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            BasisMode::Etc1s => "etc1s",
            BasisMode::Uastc => "uastc",
        }
    }
}

/// Whether [`transcode`] checks the CRC-16 over a `.basis` file's data.
///
/// A transcoder cannot tell every damaged block from a good one: damaged compressed
/// contents can decode to garbage texels. So a blob's integrity must be known before it
/// is transcoded, by this CRC-16 or by a stronger check the caller made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataCheck {
    /// Check it: for blobs of unknown integrity. Costs about 2.4 ns per byte (6 µs for
    /// an ETC1S tile, 45 µs for a UASTC tile of 136², a fifth of its BC7 transcode).
    Crc16,
    /// The caller has verified the blob byte for byte already (an atlas tile's CRC-32
    /// against the index), so only the header's own checks and CRC-16 run.
    AlreadyVerified,
}

/// Transcodes a `.basis` tile of `mode` that must hold one `side × side` image into
/// `target` ([`TargetFormat::bytes_per_tile`] bytes), after validating it: the run-time
/// transcoder, [`crate::format::basis_rust::transcode`].
pub fn transcode(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    crate::format::basis_rust::transcode(blob, mode, side, target, check)
}

/// Whether the CRC-16 over a `.basis` file's data (after the header) matches the header's.
pub(crate) fn data_crc_matches(blob: &[u8]) -> bool {
    let len = HEADER_LEN as usize;
    blob.len() >= len && read_le(blob, field::DATA_CRC16) == Some(u32::from(crc16(&blob[len..])))
}

/// Size of the packed `.basis` file header.
const HEADER_LEN: u64 = 77;
/// Size of one packed `.basis` slice descriptor.
const SLICE_DESC_LEN: u64 = 23;
/// `'B' << 8 | 's'`.
const SIGNATURE: u32 = 0x4273;
/// The one file version the vendored transcoder reads.
const VERSION: u32 = 0x13;
/// Header flag: ETC1S file (never set for UASTC).
const FLAG_ETC1S: u32 = 1;
/// Header flag: ETC1S alpha in every second slice.
const FLAG_ALPHA_SLICES: u32 = 4;
/// Header flag: the codebooks come from another file (never for a tile).
const FLAG_GLOBAL_CODEBOOK: u32 = 8;
/// Slice flag: the slice holds alpha.
const SLICE_HAS_ALPHA: u32 = 1;
/// Bytes of one UASTC 4×4 block.
const UASTC_BLOCK_BYTES: u64 = 16;

/// Byte offsets and sizes of the `.basis` file header fields (little-endian, packed).
mod field {
    pub(super) const SIG: (usize, usize) = (0, 2);
    pub(super) const VER: (usize, usize) = (2, 2);
    pub(super) const HEADER_SIZE: (usize, usize) = (4, 2);
    pub(super) const HEADER_CRC16: (usize, usize) = (6, 2);
    pub(super) const DATA_SIZE: (usize, usize) = (8, 4);
    pub(super) const DATA_CRC16: (usize, usize) = (12, 2);
    pub(super) const TOTAL_SLICES: (usize, usize) = (14, 3);
    pub(super) const TOTAL_IMAGES: (usize, usize) = (17, 3);
    pub(super) const TEX_FORMAT: (usize, usize) = (20, 1);
    pub(super) const FLAGS: (usize, usize) = (21, 2);
    pub(super) const TEX_TYPE: (usize, usize) = (23, 1);
    pub(super) const TOTAL_ENDPOINTS: (usize, usize) = (39, 2);
    pub(super) const ENDPOINT_CB_OFS: (usize, usize) = (41, 4);
    pub(super) const ENDPOINT_CB_SIZE: (usize, usize) = (45, 3);
    pub(super) const TOTAL_SELECTORS: (usize, usize) = (48, 2);
    pub(super) const SELECTOR_CB_OFS: (usize, usize) = (50, 4);
    pub(super) const SELECTOR_CB_SIZE: (usize, usize) = (54, 3);
    pub(super) const TABLES_OFS: (usize, usize) = (57, 4);
    pub(super) const TABLES_SIZE: (usize, usize) = (61, 4);
    pub(super) const SLICE_DESC_OFS: (usize, usize) = (65, 4);
    pub(super) const EXTENDED_OFS: (usize, usize) = (69, 4);
    pub(super) const EXTENDED_SIZE: (usize, usize) = (73, 4);

    // Within one slice descriptor.
    pub(super) const SLICE_IMAGE: (usize, usize) = (0, 3);
    pub(super) const SLICE_LEVEL: (usize, usize) = (3, 1);
    pub(super) const SLICE_FLAGS: (usize, usize) = (4, 1);
    pub(super) const SLICE_WIDTH: (usize, usize) = (5, 2);
    pub(super) const SLICE_HEIGHT: (usize, usize) = (7, 2);
    pub(super) const SLICE_BLOCKS_X: (usize, usize) = (9, 2);
    pub(super) const SLICE_BLOCKS_Y: (usize, usize) = (11, 2);
    pub(super) const SLICE_FILE_OFS: (usize, usize) = (13, 4);
    pub(super) const SLICE_FILE_SIZE: (usize, usize) = (17, 4);
}

/// The parts of a one-image `.basis` file a KTX2 holds: the ETC1S codebooks and Huffman
/// tables (empty for UASTC) and the colour and alpha slices' data.
pub(crate) struct BasisParts<'a> {
    /// Number of ETC1S endpoints and selectors.
    pub(crate) counts: (u16, u16),
    /// ETC1S endpoint codebook, selector codebook and Huffman tables.
    pub(crate) codebooks: [&'a [u8]; 3],
    /// The colour slice's data, then the alpha slice's (ETC1S with alpha only).
    pub(crate) slices: Vec<&'a [u8]>,
}

/// Splits a `.basis` file made by [`encode_image`] into [`BasisParts`]; `None` when a
/// region lies outside the file.
pub(crate) fn basis_parts(file: &[u8]) -> Option<BasisParts<'_>> {
    let h = |f| read_le(file, f).map(|v| v as usize);
    let region = |ofs: usize, size: usize| file.get(ofs..ofs.checked_add(size)?);
    let codebooks = [
        region(h(field::ENDPOINT_CB_OFS)?, h(field::ENDPOINT_CB_SIZE)?)?,
        region(h(field::SELECTOR_CB_OFS)?, h(field::SELECTOR_CB_SIZE)?)?,
        region(h(field::TABLES_OFS)?, h(field::TABLES_SIZE)?)?,
    ];
    let desc_ofs = h(field::SLICE_DESC_OFS)?;
    let slices = (0..h(field::TOTAL_SLICES)?)
        .map(|k| {
            let desc = region(desc_ofs + k * SLICE_DESC_LEN as usize, SLICE_DESC_LEN as usize)?;
            let d = |f| read_le(desc, f).map(|v| v as usize);
            region(d(field::SLICE_FILE_OFS)?, d(field::SLICE_FILE_SIZE)?)
        })
        .collect::<Option<Vec<_>>>()?;
    let counts = (h(field::TOTAL_ENDPOINTS)? as u16, h(field::TOTAL_SELECTORS)? as u16);
    Some(BasisParts { counts, codebooks, slices })
}

/// A little-endian field of 1 to 4 bytes at `(offset, size)` of `bytes`; `None` when
/// `bytes` is too short.
fn read_le(bytes: &[u8], (at, size): (usize, usize)) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(size)?)?;
    Some(b.iter().rev().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
}

/// The CRC-16 `.basis` files use (CCITT polynomial, inverted in and out).
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = !0;
    for &b in bytes {
        let q = u16::from(b) ^ (crc >> 8);
        let k = (q >> 4) ^ q;
        crc = (crc << 8) ^ k ^ (k << 5) ^ (k << 12);
    }
    !crc
}

/// Rewrites both CRC-16s of a `.basis` blob (the data's, then the header's, which covers
/// it) so that a forged or mutated blob passes the checksum checks and reaches the
/// structure checks and the transcoder. Blobs too short for a header are left alone.
pub(crate) fn repair_crcs(blob: &mut [u8]) {
    if blob.len() < HEADER_LEN as usize {
        return;
    }
    let data = crc16(&blob[HEADER_LEN as usize..]);
    blob[12..14].copy_from_slice(&data.to_le_bytes());
    let header = crc16(&blob[8..HEADER_LEN as usize]);
    blob[6..8].copy_from_slice(&header.to_le_bytes());
}

/// Checks everything the C++ transcoder would otherwise trust in a `.basis` tile of
/// `mode` holding one `side × side` image: the header's sizes, CRC-16, counts, format and
/// flags, and every slice descriptor's size and position, all against `blob.len()` in
/// 64-bit arithmetic. The message says which field is wrong and its value.
pub(crate) fn check_structure(blob: &[u8], mode: BasisMode, side: u32) -> Result<(), String> {
    let len = blob.len() as u64;
    if len <= HEADER_LEN {
        return Err(format!("{len} bytes is too short for a .basis file"));
    }
    let header = &blob[..HEADER_LEN as usize];
    let h = |f: (usize, usize)| u64::from(read_le(header, f).unwrap_or(0));
    if h(field::SIG) != u64::from(SIGNATURE) || h(field::VER) != u64::from(VERSION) {
        return Err(format!(
            "signature {:#06x} version {:#x}, not a .basis file",
            h(field::SIG),
            h(field::VER)
        ));
    }
    if h(field::HEADER_SIZE) != HEADER_LEN {
        return Err(format!("header size {} (expected {HEADER_LEN})", h(field::HEADER_SIZE)));
    }
    if HEADER_LEN + h(field::DATA_SIZE) != len {
        return Err(format!(
            "data size {} + header {HEADER_LEN} is not the file's {len} bytes",
            h(field::DATA_SIZE)
        ));
    }
    let crc = crc16(&header[field::DATA_SIZE.0..]);
    if u64::from(crc) != h(field::HEADER_CRC16) {
        return Err(format!("header CRC-16 {:#06x}, computed {crc:#06x}", h(field::HEADER_CRC16)));
    }
    if h(field::TEX_FORMAT) != mode.header_code() as u64 {
        return Err(format!("stored as basis format {}, not {}", h(field::TEX_FORMAT), mode.name()));
    }
    let flags = h(field::FLAGS) as u32;
    let etc1s = mode == BasisMode::Etc1s;
    if (flags & FLAG_ETC1S != 0) != etc1s || flags & FLAG_GLOBAL_CODEBOOK != 0 {
        return Err(format!("header flags {flags:#x} do not fit a {} tile", mode.name()));
    }
    if h(field::TEX_TYPE) != 0 {
        return Err(format!("texture type {} (a tile is a plain 2D image)", h(field::TEX_TYPE)));
    }
    let alpha_slices = etc1s && flags & FLAG_ALPHA_SLICES != 0;
    let slices = if alpha_slices { 2 } else { 1 };
    if h(field::TOTAL_IMAGES) != 1 || h(field::TOTAL_SLICES) != slices {
        return Err(format!(
            "{} image(s) in {} slice(s); a tile has one image in {slices}",
            h(field::TOTAL_IMAGES),
            h(field::TOTAL_SLICES)
        ));
    }

    // Every region the transcoder reads, as (what, offset, size): they must lie inside
    // the file after the header and not overlap.
    let mut regions: Vec<(String, u64, u64)> = Vec::with_capacity(8);
    let desc_ofs = h(field::SLICE_DESC_OFS);
    regions.push(("slice table".into(), desc_ofs, slices * SLICE_DESC_LEN));
    let codebooks = [
        ("endpoint codebook", field::ENDPOINT_CB_OFS, field::ENDPOINT_CB_SIZE),
        ("selector codebook", field::SELECTOR_CB_OFS, field::SELECTOR_CB_SIZE),
        ("Huffman tables", field::TABLES_OFS, field::TABLES_SIZE),
    ];
    let (endpoints, selectors) = (h(field::TOTAL_ENDPOINTS), h(field::TOTAL_SELECTORS));
    for (what, ofs, size) in codebooks {
        let (ofs, size) = (h(ofs), h(size));
        if etc1s {
            if size == 0 {
                return Err(format!("empty {what}"));
            }
            regions.push((what.into(), ofs, size));
        } else if size != 0 {
            return Err(format!("a UASTC tile with a {size}-byte {what}"));
        }
    }
    if etc1s && (endpoints == 0 || selectors == 0) {
        return Err(format!("{endpoints} endpoints and {selectors} selectors"));
    }
    if !etc1s && (endpoints != 0 || selectors != 0) {
        return Err(format!("a UASTC tile with {endpoints} endpoints and {selectors} selectors"));
    }
    if h(field::EXTENDED_SIZE) != 0 || h(field::EXTENDED_OFS) > len {
        return Err(format!(
            "extended data of {} bytes at {} (a tile has none)",
            h(field::EXTENDED_SIZE),
            h(field::EXTENDED_OFS)
        ));
    }
    let blocks = u64::from(side.div_ceil(4));
    for k in 0..slices {
        let at = desc_ofs + k * SLICE_DESC_LEN;
        let desc = usize::try_from(at)
            .ok()
            .and_then(|at| blob.get(at..at.checked_add(SLICE_DESC_LEN as usize)?))
            .ok_or_else(|| format!("slice table at {desc_ofs} lies outside the {len}-byte file"))?;
        let d = |f: (usize, usize)| u64::from(read_le(desc, f).unwrap_or(0));
        if d(field::SLICE_IMAGE) != 0 || d(field::SLICE_LEVEL) != 0 {
            return Err(format!(
                "slice {k} is image {} level {}",
                d(field::SLICE_IMAGE),
                d(field::SLICE_LEVEL)
            ));
        }
        // Colour then alpha for ETC1S; UASTC marks its one slice's alpha or not. Any other
        // flag (a video frame's) has no place in a tile.
        let slice_flags = d(field::SLICE_FLAGS) as u32;
        let flags_fit = match (etc1s, alpha_slices && k == 1) {
            (true, true) => slice_flags == SLICE_HAS_ALPHA,
            (true, false) => slice_flags == 0,
            (false, _) => slice_flags & !SLICE_HAS_ALPHA == 0,
        };
        if !flags_fit {
            return Err(format!("slice {k} flags {slice_flags:#x} do not fit a {} tile", mode.name()));
        }
        let dims =
            [field::SLICE_WIDTH, field::SLICE_HEIGHT, field::SLICE_BLOCKS_X, field::SLICE_BLOCKS_Y].map(d);
        if dims != [u64::from(side), u64::from(side), blocks, blocks] {
            return Err(format!(
                "slice {k} is {}×{} texels in {}×{} blocks, expected a {side}×{side} tile",
                dims[0], dims[1], dims[2], dims[3]
            ));
        }
        let (ofs, size) = (d(field::SLICE_FILE_OFS), d(field::SLICE_FILE_SIZE));
        if size == 0 || (!etc1s && size != blocks * blocks * UASTC_BLOCK_BYTES) {
            return Err(format!("slice {k} has {size} bytes of data"));
        }
        regions.push((format!("slice {k}"), ofs, size));
    }
    for (what, ofs, size) in &regions {
        if *ofs < HEADER_LEN || ofs + size > len {
            return Err(format!("{what} of {size} bytes at offset {ofs} lies outside the {len}-byte file"));
        }
    }
    regions.sort_by_key(|r| r.1);
    for pair in regions.windows(2) {
        let ((a, a_ofs, a_size), (b, b_ofs, _)) = (&pair[0], &pair[1]);
        if a_ofs + a_size > *b_ofs {
            return Err(format!("{a} (at {a_ofs}, {a_size} bytes) overlaps {b} (at {b_ofs})"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::bake::source::ImageSource;
    use crate::compare::compare;
    use crate::format::codec::{Codec, transcode as transcode_tile};
    use crate::format::codec_types::EncodeOptions;

    const SIDE: u32 = 136;

    /// The real photograph fetched by `assets/fetch-data.sh` (Blue Marble, 5400×2700).
    fn real_jpeg() -> PathBuf {
        let dir = crate::bake::source::data_dir();
        let p = dir.join("bmng.jpg");
        assert!(p.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", p.display());
        p
    }

    /// A 136² crop with coastlines, cloud and relief: Western Europe and the Alps.
    fn crop() -> Vec<u8> {
        let img = ImageSource::open(&real_jpeg()).unwrap();
        let (w, x0, y0) = (5400usize, 2720usize, 640usize);
        assert_eq!(img.texels().len(), w * 2700 * 4);
        let mut out = Vec::with_capacity((SIDE * SIDE * 4) as usize);
        for y in y0..y0 + SIDE as usize {
            out.extend_from_slice(&img.texels()[(y * w + x0) * 4..(y * w + x0 + SIDE as usize) * 4]);
        }
        out
    }

    /// A software decode of `target` blocks to RGBA8, for checking the transcoder's output.
    fn decode_blocks(target: TargetFormat, data: &[u8], side: u32) -> Vec<u8> {
        let n = side as usize;
        let mut px = vec![0u32; n * n];
        match target {
            TargetFormat::Bc7 => texture2ddecoder::decode_bc7(data, n, n, &mut px),
            TargetFormat::Bc1 => texture2ddecoder::decode_bc1(data, n, n, &mut px),
            TargetFormat::Astc4x4 => texture2ddecoder::decode_astc(data, n, n, 4, 4, &mut px),
            TargetFormat::Etc2Rgba => texture2ddecoder::decode_etc2_rgba8(data, n, n, &mut px),
            TargetFormat::Rgba8 => unreachable!("not a block format"),
        }
        .unwrap();
        // texture2ddecoder packs BGRA in a little-endian u32.
        px.iter()
            .flat_map(|p| {
                let [b, g, r, a] = p.to_le_bytes();
                [r, g, b, a]
            })
            .collect()
    }

    fn psnr(a: &[u8], b: &[u8]) -> f64 {
        compare(a, b).psnr_db
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn real_crop_quality_floors_and_transcodes() {
        let src = crop();
        let raw_len = src.len();
        let opts = EncodeOptions::default();
        // Per codec: PSNR floor against the source (dB), bits-per-texel ceiling, and the
        // PSNR floors of the software-decoded BC7, BC1, ASTC and ETC2 transcodes against
        // the RGBA8 decode. Measured on this crop at the default quality 128:
        //   ETC1S 31.2 dB, 1.45 bpt; BC7 50.9, BC1 48.1, ASTC 51.3 dB, ETC2 exact;
        //   UASTC 42.6 dB, 7.56 bpt (LZ4); BC7 50.5, BC1 35.9, ASTC 55.1, ETC2 35.8 dB.
        let floors = [
            (Codec::Etc1s, 30.0, 2.5, [48.0, 45.0, 48.0, f64::INFINITY]),
            (Codec::Uastc, 40.0, 8.5, [47.0, 33.0, 50.0, 33.0]),
        ];
        for (codec, floor, max_bpt, block_floors) in floors {
            let enc = codec.encode(&src, SIDE, &opts).unwrap();
            let bpt = enc.data.len() as f64 * 8.0 / f64::from(SIDE * SIDE);
            let rgba = enc.codec.decode(&enc.data, raw_len).unwrap();
            let db = psnr(&rgba, &src);
            eprintln!("{codec} stored as {}: {bpt:.2} bits/texel, {db:.2} dB", enc.codec);
            assert!(db >= floor, "{codec}: {db:.2} dB < {floor} dB");
            assert!(bpt < max_bpt, "{codec}: {bpt:.2} bits/texel ≥ {max_bpt}");
            assert_eq!(
                transcode_tile(enc.codec, &enc.data, raw_len, SIDE, TargetFormat::Rgba8).unwrap(),
                rgba
            );
            // Each block format has exactly its size, is deterministic, and decodes
            // (software decoder) close to what the encoder intended (the RGBA8 decode).
            let targets =
                [TargetFormat::Bc7, TargetFormat::Bc1, TargetFormat::Astc4x4, TargetFormat::Etc2Rgba];
            for (target, min_db) in targets.into_iter().zip(block_floors) {
                let blocks = transcode_tile(enc.codec, &enc.data, raw_len, SIDE, target).unwrap();
                assert_eq!(blocks.len(), target.bytes_per_tile(SIDE), "{codec} → {target}");
                assert_eq!(transcode_tile(enc.codec, &enc.data, raw_len, SIDE, target).unwrap(), blocks);
                let decoded = decode_blocks(target, &blocks, SIDE);
                let db = psnr(&decoded, &rgba);
                eprintln!("  {codec} → {target}: {db:.2} dB against the RGBA8 decode");
                assert!(db >= min_db, "{codec} → {target}: {db:.2} dB < {min_db} dB");
                // UASTC → BC7 may use mode-6 blocks whose p-bit caps alpha at 254.
                let min_alpha = decoded.chunks_exact(4).map(|p| p[3]).min();
                assert!(min_alpha >= Some(254), "{codec} → {target}: alpha {min_alpha:?}");
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs the C++ encoder")]
    fn odd_tile_sizes_and_alpha_survive() {
        // 22² (16 + 2·3 border) is not a whole number of blocks; half the texels are translucent.
        let side = 22;
        let src: Vec<u8> = (0..side * side)
            .flat_map(|i| {
                let (x, y) = (i % side, i / side);
                [(x * 11) as u8, (y * 11) as u8, 128, if x < side / 2 { 255 } else { 64 }]
            })
            .collect();
        for codec in [Codec::Etc1s, Codec::Uastc] {
            let enc = codec.encode(&src, side, &EncodeOptions::default()).unwrap();
            let rgba = enc.codec.decode(&enc.data, src.len()).unwrap();
            // A steep synthetic gradient: ETC1S measures 28.4 dB here, UASTC far more.
            assert!(psnr(&rgba, &src) > 26.0, "{codec}: {:?}", compare(&rgba, &src));
            let alpha_err = rgba.chunks_exact(4).zip(src.chunks_exact(4)).map(|(a, b)| a[3].abs_diff(b[3]));
            assert!(alpha_err.max().unwrap() <= 8, "{codec}: alpha lost");
            for target in TargetFormat::ALL {
                let out = transcode_tile(enc.codec, &enc.data, src.len(), side, target).unwrap();
                assert_eq!(out.len(), target.bytes_per_tile(side));
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn uastc_rdo_and_lz4_shrink_the_tile() {
        let src = crop();
        let plain = EncodeOptions { uastc_lz4: false, ..EncodeOptions::default() };
        let a = Codec::Uastc.encode(&src, SIDE, &plain).unwrap();
        assert_eq!(a.codec, Codec::Uastc);
        let rdo = EncodeOptions { uastc_rdo: Some(1.0), ..EncodeOptions::default() };
        let b = Codec::Uastc.encode(&src, SIDE, &rdo).unwrap();
        assert_eq!(b.codec, Codec::UastcLz4);
        assert!(b.data.len() < a.data.len(), "rdo+lz4 {} ≥ plain {}", b.data.len(), a.data.len());
        let rgba = b.codec.decode(&b.data, src.len()).unwrap();
        assert!(psnr(&rgba, &src) >= 36.0, "{:.2} dB", psnr(&rgba, &src));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs the C++ encoder")]
    fn corrupt_blobs_are_errors_not_crashes() {
        let side = 32;
        let src: Vec<u8> = (0..side * side * 4).map(|i| (i * 7 % 256) as u8).collect();
        let raw_len = src.len();
        let no_lz4 = EncodeOptions { uastc_lz4: false, ..EncodeOptions::default() };
        for (codec, opts) in [
            (Codec::Etc1s, EncodeOptions::default()),
            (Codec::Uastc, no_lz4),
            (Codec::UastcLz4, EncodeOptions::default()),
        ] {
            let enc = codec.encode(&src, side, &opts).unwrap();
            let good = enc.data;
            assert_eq!(enc.codec, codec);
            let expected: Vec<_> = TargetFormat::ALL
                .iter()
                .map(|&target| transcode_tile(codec, &good, raw_len, side, target).unwrap())
                .collect();
            // A damaged blob is an error, unless the damage cannot change the result (an
            // LZ4 match offset moved within a run of equal bytes decompresses the same).
            let check = |blob: &[u8], what: &str| {
                for (target, want) in TargetFormat::ALL.into_iter().zip(&expected) {
                    if let Ok(out) = transcode_tile(codec, blob, raw_len, side, target) {
                        assert_eq!(&out, want, "{codec} {what} → {target} was accepted, and differs");
                    }
                }
            };
            // Every single-byte flip anywhere in the file, and every truncation. (Without
            // the data CRC-16, damaged UASTC blocks can trip an assertion in the C++
            // transcoder, e.g. `multiplier >= 1` going to ETC2: hence DataCheck.)
            for i in 0..good.len() {
                for flip in [0x5a, 0xff, 0x01, 0x80] {
                    let mut bad = good.clone();
                    bad[i] ^= flip;
                    check(&bad, &format!("flip {flip:#x} at {i}"));
                }
            }
            for len in (0..good.len()).step_by(7) {
                check(&good[..len], &format!("truncated to {len}"));
            }
            check(&vec![0u8; good.len()], "zeros");
            // A valid file of the wrong size or mode.
            assert!(transcode_tile(codec, &good, 16 * 16 * 4, 16, TargetFormat::Rgba8).is_err());
            let other = if codec == Codec::Etc1s { Codec::Uastc } else { Codec::Etc1s };
            if codec != Codec::UastcLz4 {
                assert!(transcode_tile(other, &good, raw_len, side, TargetFormat::Rgba8).is_err());
            }
            assert!(codec.decode(&good, raw_len + 4).is_err(), "not square");
        }
    }

    /// Small real tiles of side 32: ETC1S opaque, ETC1S with alpha (two slices), UASTC.
    fn small_tiles() -> Vec<(BasisMode, Vec<u8>)> {
        let side = 32;
        let opaque: Vec<u8> =
            (0..side * side * 4).map(|i| if i % 4 == 3 { 255 } else { (i * 7 % 256) as u8 }).collect();
        let alpha: Vec<u8> = (0..side * side * 4).map(|i| (i * 7 % 256) as u8).collect();
        let opts = EncodeOptions::default();
        let tiles = vec![
            (BasisMode::Etc1s, encode(&opaque, side, BasisMode::Etc1s, &opts).unwrap()),
            (BasisMode::Etc1s, encode(&alpha, side, BasisMode::Etc1s, &opts).unwrap()),
            (BasisMode::Uastc, encode(&alpha, side, BasisMode::Uastc, &opts).unwrap()),
        ];
        let slices: Vec<_> = tiles.iter().map(|(_, b)| read_le(b, field::TOTAL_SLICES).unwrap()).collect();
        assert_eq!(slices, [1, 2, 1], "the alpha ETC1S tile has a colour and an alpha slice");
        tiles
    }

    fn set_le(blob: &mut [u8], (at, size): (usize, usize), value: u32) {
        for (i, b) in blob[at..at + size].iter_mut().enumerate() {
            *b = (value >> (8 * i)) as u8;
        }
    }

    /// Transcodes `blob` to every target with and without the data CRC; no panic, no
    /// abort; `Ok` only with the right size. Returns whether any transcode succeeded.
    fn transcode_all(blob: &[u8], mode: BasisMode, side: u32) -> bool {
        let mut any_ok = false;
        for target in TargetFormat::ALL {
            for check in [DataCheck::Crc16, DataCheck::AlreadyVerified] {
                if let Ok(out) = transcode(blob, mode, side, target, check) {
                    assert_eq!(out.len(), target.bytes_per_tile(side));
                    any_ok = true;
                }
            }
        }
        any_ok
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs the C++ encoder")]
    fn real_tiles_pass_the_structure_check() {
        for (mode, blob) in small_tiles() {
            check_structure(&blob, mode, 32).unwrap();
            let mut copy = blob.clone();
            repair_crcs(&mut copy);
            assert_eq!(copy, blob, "the test's CRC-16 is the file's");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs the C++ encoder")]
    fn forged_headers_with_repaired_crcs_are_errors_not_crashes() {
        type Edit = Box<dyn Fn(&mut Vec<u8>)>;
        type Forge = (&'static str, Edit);
        let set = |f: (usize, usize), v: u32| -> Edit { Box::new(move |b| set_le(b, f, v)) };
        let slice = |f: (usize, usize), v: u32| -> Edit {
            Box::new(move |b| {
                let at = read_le(b, field::SLICE_DESC_OFS).unwrap() as usize;
                set_le(b, (at + f.0, f.1), v)
            })
        };
        let forged: Vec<Forge> = vec![
            // 77 + 0xFFFFFFFF wraps to 76 in the transcoder's u32 check (was a SIGSEGV).
            ("data size 0xFFFFFFFF", set(field::DATA_SIZE, u32::MAX)),
            ("data size 0", set(field::DATA_SIZE, 0)),
            (
                "data size one short",
                Box::new(|b| {
                    let n = b.len() as u32 - 78;
                    set_le(b, field::DATA_SIZE, n)
                }),
            ),
            ("header size 0xFFFF", set(field::HEADER_SIZE, 0xFFFF)),
            ("total slices 0xFFFFFF", set(field::TOTAL_SLICES, 0xFF_FFFF)),
            ("total slices 0", set(field::TOTAL_SLICES, 0)),
            ("total slices 3", set(field::TOTAL_SLICES, 3)),
            ("total images 0", set(field::TOTAL_IMAGES, 0)),
            ("total images 0xFFFFFF", set(field::TOTAL_IMAGES, 0xFF_FFFF)),
            ("texture type 2", set(field::TEX_TYPE, 2)),
            ("global codebook flag", Box::new(|b| b[21] |= FLAG_GLOBAL_CODEBOOK as u8)),
            ("ETC1S flag flipped", Box::new(|b| b[21] ^= FLAG_ETC1S as u8)),
            ("format flipped", Box::new(|b| b[20] ^= 1)),
            ("slice table at 0xFFFFFFFF", set(field::SLICE_DESC_OFS, u32::MAX)),
            ("slice table at 0", set(field::SLICE_DESC_OFS, 0)),
            (
                "slice table past the end",
                Box::new(|b| {
                    let n = b.len() as u32 - 5;
                    set_le(b, field::SLICE_DESC_OFS, n)
                }),
            ),
            ("endpoint codebook at 0xFFFFFFFF (ETC1S)", set(field::ENDPOINT_CB_OFS, u32::MAX)),
            ("endpoint codebook of 0xFFFFFF bytes", set(field::ENDPOINT_CB_SIZE, 0xFF_FFFF)),
            ("selector codebook at 0xFFFFFFF0 (ETC1S)", set(field::SELECTOR_CB_OFS, 0xFFFF_FFF0)),
            ("selector codebook of 0xFFFFFF bytes", set(field::SELECTOR_CB_SIZE, 0xFF_FFFF)),
            ("tables at 0xFFFFFFFF (ETC1S)", set(field::TABLES_OFS, u32::MAX)),
            ("tables of 0xFFFFFFFF bytes", set(field::TABLES_SIZE, u32::MAX)),
            ("tables over the header (ETC1S)", set(field::TABLES_OFS, 10)),
            ("extended data of 0xFFFFFFFF bytes", set(field::EXTENDED_SIZE, u32::MAX)),
            ("slice at 0xFFFFFFFF", slice(field::SLICE_FILE_OFS, u32::MAX)),
            ("slice at 0xFFFFFFF0", slice(field::SLICE_FILE_OFS, 0xFFFF_FFF0)),
            ("slice over the header", slice(field::SLICE_FILE_OFS, 3)),
            ("slice of 0xFFFFFFFF bytes", slice(field::SLICE_FILE_SIZE, u32::MAX)),
            ("slice of 0 bytes", slice(field::SLICE_FILE_SIZE, 0)),
            ("slice width 0", slice(field::SLICE_WIDTH, 0)),
            ("slice width 0xFFFF", slice(field::SLICE_WIDTH, 0xFFFF)),
            ("slice blocks 0xFFFF", slice(field::SLICE_BLOCKS_X, 0xFFFF)),
            ("slice blocks 0", slice(field::SLICE_BLOCKS_Y, 0)),
            ("slice of image 1", slice(field::SLICE_IMAGE, 1)),
            ("slice of level 1", slice(field::SLICE_LEVEL, 1)),
            ("slice flagged as a video frame", slice(field::SLICE_FLAGS, 2)),
            ("slice flags 0xFF", slice(field::SLICE_FLAGS, 0xFF)),
        ];
        for (mode, good) in small_tiles() {
            assert!(transcode_all(&good, mode, 32));
            for (what, forge) in &forged {
                let mut bad = good.clone();
                forge(&mut bad);
                repair_crcs(&mut bad);
                if mode == BasisMode::Uastc && what.ends_with("(ETC1S)") {
                    // UASTC has no codebooks or tables: where their empty regions lie is
                    // never read. It must still not crash.
                    transcode_all(&bad, mode, 32);
                    continue;
                }
                let err = check_structure(&bad, mode, 32);
                assert!(err.is_err(), "{} {what}: passed the structure check", mode.name());
                assert!(!transcode_all(&bad, mode, 32), "{} {what}: transcoded", mode.name());
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Random bytes of the header and slice table, CRCs repaired: an error or a
        /// correct-size tile, and the process survives.
        #[test]
        #[cfg_attr(target_arch = "wasm32", ignore = "needs the C++ encoder")]
        fn random_header_edits_never_crash(
            tile in 0usize..3,
            edits in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 1..6),
        ) {
            let tiles = SMALL_TILES.get_or_init(small_tiles);
            let (mode, good) = &tiles[tile];
            let slices = read_le(good, field::TOTAL_SLICES).unwrap() as usize;
            let span = HEADER_LEN as usize + slices * SLICE_DESC_LEN as usize;
            let mut bad = good.clone();
            for (at, value) in edits {
                bad[at % span] = value;
            }
            repair_crcs(&mut bad);
            transcode_all(&bad, *mode, 32);
        }
    }

    static SMALL_TILES: std::sync::OnceLock<Vec<(BasisMode, Vec<u8>)>> = std::sync::OnceLock::new();

    // The C++ encoder is native only.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn header_codes_are_the_encoders() {
        use basis_universal::sys;
        assert_eq!(BasisMode::Etc1s.header_code(), sys::basist_basis_tex_format_cETC1S);
        assert_eq!(BasisMode::Uastc.header_code(), sys::basist_basis_tex_format_cUASTC4x4);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs the C++ encoder")]
    fn bad_options_are_errors() {
        let src = vec![0u8; 16 * 16 * 4];
        let bad = EncodeOptions { quality: 0, ..EncodeOptions::default() };
        assert!(matches!(Codec::Etc1s.encode(&src, 16, &bad), Err(CodecError::Options(_))));
        assert!(matches!(Codec::Uastc.encode(&src[4..], 16, &bad), Err(CodecError::Length { .. })));
    }
}
