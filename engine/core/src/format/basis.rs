//! Basis Universal tiles: each tile (border included) is one small `.basis` file, in
//! ETC1S or UASTC mode, encoded with the `basis-universal` crate's compressor and
//! transcoded on loader threads to the GPU pool's format.
//!
//! The C++ transcoder trusts much of what a `.basis` header says, so every blob is
//! checked before it is transcoded: header fields and sizes, the header's CRC-16, the
//! data's CRC-16 (unless the caller has verified the blob already, see [`DataCheck`]),
//! the mode, one image of one level, and the tile's size. A corrupted blob is a
//! [`CodecError`], never a crash. (A deliberately forged file with valid checksums is
//! outside this defence: damaged block data can trip the C++ transcoder's assertions.)

use std::cell::RefCell;
use std::sync::Once;

use basis_universal::{
    BasisTextureFormat, Compressor, CompressorParams, DecodeFlags, TranscodeParameters, Transcoder,
    TranscoderTextureFormat, sys,
};

use crate::format::codec_types::{CodecError, EncodeOptions, TargetFormat};
use crate::format::color::ColorSpace;

/// The two Basis Universal modes a tile can be stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BasisMode {
    /// ETC1S: lossy, a per-file codebook, typically 0.5–2 bits per texel.
    Etc1s,
    /// UASTC 4×4: near-lossless, 8 bits per texel before supercompression.
    Uastc,
}

impl BasisMode {
    fn format(self) -> BasisTextureFormat {
        match self {
            BasisMode::Etc1s => BasisTextureFormat::ETC1S,
            BasisMode::Uastc => BasisTextureFormat::UASTC4x4,
        }
    }

    /// The `basis_tex_format` code stored in a `.basis` header.
    fn header_code(self) -> i32 {
        match self {
            BasisMode::Etc1s => sys::basist_basis_tex_format_cETC1S,
            BasisMode::Uastc => sys::basist_basis_tex_format_cUASTC4x4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            BasisMode::Etc1s => "etc1s",
            BasisMode::Uastc => "uastc",
        }
    }
}

/// Initialises the Basis Universal encoder and transcoder tables, once per process.
/// [`encode`] and [`transcode`] call it; calling it early moves the cost (a few ms)
/// out of the first tile.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        basis_universal::encoder_init();
        basis_universal::transcoder_init();
    });
}

/// Encodes a `side × side` RGBA8 tile (`rgba`) into one `.basis` file with one image
/// and no mipmaps, on the calling thread only.
pub fn encode(rgba: &[u8], side: u32, mode: BasisMode, opts: &EncodeOptions) -> Result<Vec<u8>, CodecError> {
    let expected = side as usize * side as usize * 4;
    if side == 0 || rgba.len() != expected {
        return Err(CodecError::Length { expected, found: rgba.len() });
    }
    if side > basis_universal::IMAGE_DIMENSION_MAX {
        return Err(CodecError::Options(format!(
            "tile side {side} exceeds Basis's {}",
            basis_universal::IMAGE_DIMENSION_MAX
        )));
    }
    opts.validate()?;
    init();
    let mut params = CompressorParams::new();
    params.set_basis_format(mode.format());
    params.set_color_space(match opts.color {
        ColorSpace::Srgb => basis_universal::ColorSpace::Srgb,
        ColorSpace::Linear => basis_universal::ColorSpace::Linear,
    });
    params.set_generate_mipmaps(false);
    params.set_print_status_to_stdout(false);
    match mode {
        BasisMode::Etc1s => params.set_etc1s_quality_level(opts.quality),
        BasisMode::Uastc => {
            // The crate's set_uastc_quality_level ORs the level into the flags, which
            // already hold the default level; replace the level bits instead.
            // SAFETY: params.0 is the live parameter object CompressorParams::new made.
            unsafe {
                let flags = sys::compressor_params_get_pack_uastc_flags(params.0);
                let level = opts.uastc_level() as sys::UastcPackFlags;
                sys::compressor_params_set_pack_uastc_flags(
                    params.0,
                    (flags & !sys::UastcPackFlags_PackUASTCLevelMask) | level,
                );
            }
            params.set_rdo_uastc(opts.uastc_rdo);
        }
    }
    params.source_image_mut(0).init(rgba, side, side, 4);
    // One job-pool thread in total: the caller's. Tiles are parallelised by the caller.
    let mut compressor = Compressor::new(1);
    // SAFETY: the parameters are all set through the crate's setters with values in
    // their documented ranges (quality and RDO λ checked by `opts.validate()`, the
    // image size checked above); `init` copies them, so `params` may drop afterwards.
    if !unsafe { compressor.init(&params) } {
        return Err(CodecError::Encode(format!("the {} compressor rejected its parameters", mode.name())));
    }
    // SAFETY: `init` succeeded with the parameters above.
    unsafe { compressor.process() }
        .map_err(|code| CodecError::Encode(format!("{} encoding failed: {code:?}", mode.name())))?;
    let file = compressor.basis_file();
    if file.is_empty() {
        return Err(CodecError::Encode(format!("{} encoding produced no data", mode.name())));
    }
    Ok(file.to_vec())
}

/// Whether [`transcode`] checks the CRC-16 over a `.basis` file's data.
///
/// The C++ transcoder does not validate block contents: damaged UASTC blocks can trip
/// its assertions (an abort) or produce garbage. So a blob's integrity must be known
/// before it is transcoded, by this CRC-16 or by a stronger check the caller made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataCheck {
    /// Check it: for blobs of unknown integrity. Costs about 2.4 ns per byte (6 µs for
    /// an ETC1S tile, 45 µs for a UASTC tile of 136², a fifth of its BC7 transcode).
    Crc16,
    /// The caller has verified the blob byte for byte already (an atlas tile's CRC-32
    /// against the index), so only the header's own checks and CRC-16 run.
    AlreadyVerified,
}

thread_local! {
    /// One transcoder per loader thread: it keeps its buffers between tiles.
    static TRANSCODER: RefCell<Transcoder> = RefCell::new(Transcoder::new());
}

fn target_format(target: TargetFormat) -> TranscoderTextureFormat {
    match target {
        TargetFormat::Rgba8 => TranscoderTextureFormat::RGBA32,
        TargetFormat::Bc7 => TranscoderTextureFormat::BC7_RGBA,
        TargetFormat::Bc1 => TranscoderTextureFormat::BC1_RGB,
        TargetFormat::Astc4x4 => TranscoderTextureFormat::ASTC_4x4_RGBA,
        TargetFormat::Etc2Rgba => TranscoderTextureFormat::ETC2_RGBA,
    }
}

/// Transcodes a `.basis` tile of `mode` that must hold one `side × side` image into
/// `target` ([`TargetFormat::bytes_per_tile`] bytes), after validating it.
pub fn transcode(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    init();
    let corrupt = |what: &str| CodecError::Corrupt(format!("{} tile: {what}", mode.name()));
    TRANSCODER.with(|cell| {
        let mut t = cell.try_borrow_mut().map_err(|_| corrupt("transcoder re-entered"))?;
        if !t.validate_header(blob) {
            return Err(corrupt("not a valid .basis header (signature, version, sizes or flags)"));
        }
        if !t.validate_file_checksums(blob, check == DataCheck::Crc16) {
            return Err(corrupt(".basis header or data checksum mismatch"));
        }
        let info = t.file_info(blob).ok_or_else(|| corrupt("unreadable .basis slice table"))?;
        if info.m_tex_format != mode.header_code() {
            return Err(corrupt(&format!(
                "stored as basis format {}, not {}",
                info.m_tex_format,
                mode.name()
            )));
        }
        if info.m_total_images != 1 || t.image_level_count(blob, 0) != 1 {
            return Err(corrupt("a tile must hold exactly one image of one level"));
        }
        let desc = t.image_level_description(blob, 0, 0).ok_or_else(|| corrupt("missing image level"))?;
        let blocks = side.div_ceil(4);
        if desc.original_width != side || desc.original_height != side || desc.block_count != blocks * blocks
        {
            return Err(corrupt(&format!(
                "image is {}×{} in {} blocks, expected a {side}×{side} tile",
                desc.original_width, desc.original_height, desc.block_count
            )));
        }
        t.prepare_transcoding(blob).map_err(|()| corrupt("codebooks or tables do not decode"))?;
        let params = TranscodeParameters {
            // Opaque BC1 only: a three-colour block's fourth index is transparent black
            // when the pool samples it as BC1 RGBA (the only BC1 wgpu has).
            decode_flags: (target == TargetFormat::Bc1).then_some(DecodeFlags::BC1_FORBID_THREE_COLOR_BLOCKS),
            ..TranscodeParameters::default()
        };
        let out = t.transcode_image_level(blob, target_format(target), params);
        t.end_transcoding();
        let out = out.map_err(|e| corrupt(&format!("transcoding to {target} failed: {e:?}")))?;
        let expected = target.bytes_per_tile(side);
        if out.len() != expected {
            return Err(CodecError::Length { expected, found: out.len() });
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::bake::source::ImageSource;
    use crate::compare::compare;
    use crate::format::codec::{Codec, transcode as transcode_tile};

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

    #[test]
    fn bad_options_are_errors() {
        let src = vec![0u8; 16 * 16 * 4];
        let bad = EncodeOptions { quality: 0, ..EncodeOptions::default() };
        assert!(matches!(Codec::Etc1s.encode(&src, 16, &bad), Err(CodecError::Options(_))));
        assert!(matches!(Codec::Uastc.encode(&src[4..], 16, &bad), Err(CodecError::Length { .. })));
    }
}
