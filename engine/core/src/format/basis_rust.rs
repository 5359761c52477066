//! The pure-Rust Basis Universal transcoder (the `basisu` crate) behind the same contract
//! as the C++ one in [`crate::format::basis`]: one `.basis` tile of one image, checked,
//! transcoded to a pool format. Measured against the C++ transcoder tile for tile before
//! it may replace it (issue 28); a panic inside it is a corrupt tile, never a crash.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::format::basis::{BasisMode, DataCheck, check_structure, data_crc_matches};
use crate::format::codec::{CodecError, TargetFormat};

fn target_format(target: TargetFormat) -> basisu::TargetFormat {
    match target {
        TargetFormat::Rgba8 => basisu::TargetFormat::Rgba32,
        TargetFormat::Bc7 => basisu::TargetFormat::Bc7Rgba,
        TargetFormat::Bc1 => basisu::TargetFormat::Bc1Rgb,
        TargetFormat::Astc4x4 => basisu::TargetFormat::Astc4x4Rgba,
        TargetFormat::Etc2Rgba => basisu::TargetFormat::Etc2Rgba,
    }
}

/// Transcodes a `.basis` tile of `mode` that must hold one `side × side` image into
/// `target` ([`TargetFormat::bytes_per_tile`] bytes) with the pure-Rust transcoder, after
/// the same structure and checksum checks as [`crate::format::basis::transcode`]. The
/// decode flags are those of the C++ path (opaque BC1 blocks, no later-version filters),
/// so both give the same bytes.
pub fn transcode(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![0u8; target.bytes_per_tile(side)];
    transcode_into(blob, mode, side, target, check, &mut out)?;
    Ok(out)
}

/// [`transcode`] into `out`, which must hold [`TargetFormat::bytes_per_tile`] bytes
/// (e.g. a slot of mapped staging memory).
pub fn transcode_into(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
    out: &mut [u8],
) -> Result<(), CodecError> {
    let corrupt = |what: &str| CodecError::Corrupt(format!("{} tile: {what}", mode.name()));
    let expected = target.bytes_per_tile(side);
    if out.len() != expected {
        return Err(CodecError::Length { expected, found: out.len() });
    }
    check_structure(blob, mode, side).map_err(|e| corrupt(&e))?;
    if check == DataCheck::Crc16 && !data_crc_matches(blob) {
        return Err(corrupt(".basis data checksum mismatch"));
    }
    let mut flags = basisu::DecodeFlags::NO_ETC1S_CHROMA_FILTERING.bits()
        | basisu::DecodeFlags::NO_DEBLOCK_FILTERING.bits();
    if target == TargetFormat::Bc1 {
        // Opaque BC1 only, as on the C++ path (see `basis::transcode`).
        flags |= basisu::DecodeFlags::BC1_FORBID_THREE_COLOR_BLOCKS.bits();
    }
    let run = || -> Result<(), String> {
        let tex = basisu::Transcoder::new(blob).map_err(|e| format!("{e:?}"))?;
        if tex.level_count() != 1 || tex.base_dimensions() != (side, side) {
            let (w, h) = tex.base_dimensions();
            return Err(format!(
                "holds {} level(s) of {w}×{h}, expected one {side}×{side} image",
                tex.level_count()
            ));
        }
        tex.transcode_into(0, target_format(target), basisu::DecodeFlags::from_bits(flags), out)
            .map_err(|e| format!("transcoding to {target} failed: {e:?}"))
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(result) => result.map_err(|e| corrupt(&e)),
        Err(_) => Err(corrupt("the Rust transcoder panicked on its contents")),
    }
}
