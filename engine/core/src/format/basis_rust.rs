//! The run-time Basis Universal transcoder: the pure-Rust `basisu` crate behind the
//! engine's tile contract (one `.basis` tile of one image, checked, transcoded to a pool
//! format). Loader threads, `verify` and every other run-time path use it; the C++
//! transcoder is only built for comparisons (`basis::cpp`, feature `cpp-transcoder`).
//!
//! # What is checked before `basisu` decodes a tile
//!
//! 1. The file structure (`basis::check_structure`): header, sizes, CRC-16s, counts,
//!    mode and flags, every slice descriptor, and that the slice table, codebooks, Huffman
//!    tables and slices lie inside the file without overlapping.
//! 2. For ETC1S, the codebooks and Huffman tables decode (once: they then serve the
//!    transcode), and each slice's symbol stream (`check_etc1s_streams`) is walked as the
//!    C++ transcoder walks it, with the
//!    checks it makes and `basisu` 0.1.0 skips: an endpoint-prediction run must end inside
//!    the slice (the C++ `endpoint_pred_repeat_count != 0` failure), and a run-length code
//!    must fit 32 bits (a C++ assertion in `decode_vlc`; `basisu` stops reading it and, in
//!    a build without overflow checks, wraps the count). Tiles failing them are
//!    [`CodecError::Corrupt`] here as they are for the C++ transcoder.
//! 3. Whatever `basisu` checks itself; a panic inside it is a corrupt tile, never a crash.
//!
//! # Where the two transcoders still differ on damaged tiles, harmlessly
//!
//! - A UASTC block whose ETC2 hint has an alpha multiplier of 0 trips the assertion
//!   `multiplier >= 1` in the C++ transcoder (compiled with assertions) on the way to
//!   ETC2. `basisu` writes the EAC alpha block with multiplier 0, which is what the C++
//!   code writes without assertions: a well-formed 16-byte block whose alpha is the base
//!   value. Nothing is read or written outside the tile.
//! - A slice descriptor flagged as a video frame was ignored by the C++ transcoder and
//!   refused by `basisu` (`VideoRequiresState`); the structure check now refuses any slice
//!   flag but the alpha one, for both.
//! - The Rust path is stricter in one way: it walks an ETC1S tile's alpha slice for every
//!   target, where the C++ transcoder reads it only for targets with alpha, so a tile with
//!   a damaged alpha slice is corrupt even when transcoded to BC1.

use std::panic::{AssertUnwindSafe, catch_unwind};

use basisu::basislz::decoder::BitwiseDecoder;
use basisu::basislz::etc1s::Etc1sTranscoder;

use crate::format::basis::{BasisMode, DataCheck, basis_parts, check_structure, data_crc_matches};
use crate::format::codec_types::{CodecError, TargetFormat};

/// The `basisu` release this transcoder is (kept equal to Cargo.lock's by a test).
pub const BASISU_VERSION: &str = "0.1.0";

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
/// `target` ([`TargetFormat::bytes_per_tile`] bytes), after the checks of the module
/// documentation. The decode flags are those the C++ path used (opaque BC1 blocks, no
/// later-version filters), so both give the same bytes.
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
        // Opaque BC1 only: a three-colour block's fourth index is transparent black when
        // the pool samples it as BC1 RGBA (the only BC1 wgpu has).
        flags |= basisu::DecodeFlags::BC1_FORBID_THREE_COLOR_BLOCKS.bits();
    }
    let run = || -> Result<(), String> {
        if mode == BasisMode::Etc1s {
            return transcode_etc1s(blob, side, target, flags, out);
        }
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

// Constants of the ETC1S slice stream (the BasisLZ format).
/// Endpoint-prediction symbol meaning "repeat the previous symbol, count follows".
const PRED_REPEAT_LAST_SYMBOL: u32 = 4 * 4 * 4 * 4;
/// Shortest endpoint-prediction run.
const PRED_MIN_REPEAT: u32 = 3;
/// Payload bits per chunk of an endpoint-prediction run length.
const PRED_COUNT_VLC_BITS: u32 = 4;
/// Selector-history run-length symbols; the last one escapes to a variable-length count.
const SELECTOR_RLE_SYMBOLS: u32 = 64;
/// Shortest selector-history run.
const SELECTOR_RLE_MIN: u32 = 3;
/// Payload bits per chunk of a long selector-history run length.
const SELECTOR_RLE_VLC_BITS: u32 = 7;

/// An ETC1S tile through `basisu`'s parts rather than its `Transcoder`: the codebooks
/// and Huffman tables are decoded once, serve [`check_etc1s_streams`] and then the
/// transcode itself (`basisu::dispatch::transcode_etc1s`, what `Transcoder` calls for a
/// `.basis` file). May panic inside `basisu` on malformed contents: callers catch it.
fn transcode_etc1s(
    blob: &[u8],
    side: u32,
    target: TargetFormat,
    flags: u32,
    out: &mut [u8],
) -> Result<(), String> {
    let parts = basis_parts(blob).ok_or("a region lies outside the file")?;
    let [endpoint_cb, selector_cb, tables] = parts.codebooks;
    let (endpoints, selectors) = (u32::from(parts.counts.0), u32::from(parts.counts.1));
    let mut models = Etc1sTranscoder::new();
    if !models.decode_palettes(endpoints, endpoint_cb, selectors, selector_cb) {
        return Err("the endpoint or selector codebook does not decode".into());
    }
    if !models.decode_tables(tables) {
        return Err("the Huffman tables do not decode".into());
    }
    check_etc1s_streams(&models, &parts.slices, side, selectors)?;
    // check_structure has made sure of one colour slice, then one alpha slice or none.
    let (rgb, alpha) = (parts.slices[0], parts.slices.get(1).copied());
    let blocks = side.div_ceil(4);
    let format = target_format(target).as_i32();
    basisu::dispatch::transcode_etc1s(
        &models, rgb, alpha, blocks, blocks, side, side, format, flags, None, out,
    )
    .ok_or_else(|| format!("transcoding to {target} failed"))
}

/// Walks every slice's symbol stream of an ETC1S tile (see the module documentation):
/// `models` holds the tile's decoded Huffman tables, `selectors` its selector count.
fn check_etc1s_streams(
    models: &Etc1sTranscoder,
    slices: &[&[u8]],
    side: u32,
    selectors: u32,
) -> Result<(), String> {
    let blocks = side.div_ceil(4);
    for (k, slice) in slices.iter().enumerate() {
        walk_slice(models, slice, blocks, selectors).map_err(|e| format!("slice {k}: {e}"))?;
    }
    Ok(())
}

/// A variable-length count of `chunk_bits`-bit chunks, each followed by a continuation
/// bit; more than 32 bits of payload is an error (as the C++ decoder asserts).
fn read_vlc(bits: &mut BitwiseDecoder<'_>, chunk_bits: u32) -> Result<u32, String> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let chunk = bits.get_bits(chunk_bits + 1);
        value |= u64::from(chunk & ((1 << chunk_bits) - 1)) << shift;
        shift += chunk_bits;
        if chunk & (1 << chunk_bits) == 0 {
            break;
        }
        if shift >= 32 {
            return Err("a run length longer than 32 bits".into());
        }
    }
    u32::try_from(value).map_err(|_| format!("a run length of {value}"))
}

/// Reads one slice's symbols in the order the transcoders do, without producing blocks:
/// `blocks × blocks` blocks, `selectors` entries in the selector codebook. Endpoint
/// indices are not followed (`basisu` range-checks them itself); the symbols that carry
/// them are read all the same.
fn walk_slice(models: &Etc1sTranscoder, slice: &[u8], blocks: u32, selectors: u32) -> Result<(), String> {
    let mut bits = BitwiseDecoder::new(slice);
    let history = models.selector_history_buf_size;
    let rle_symbol = selectors + history;
    let total = blocks * blocks;
    // Prediction symbols are per 2×2 block group: the even rows read them and keep their
    // upper bits for the odd row below.
    let mut row_preds = vec![0u32; blocks as usize];
    let (mut pred_bits, mut repeat, mut prev_symbol, mut selector_run) = (0u32, 0u32, 0u32, 0u32);
    for y in 0..blocks {
        for x in 0..blocks {
            if x % 2 == 0 {
                if y % 2 == 0 {
                    if repeat > 0 {
                        repeat -= 1;
                        pred_bits = prev_symbol;
                    } else {
                        pred_bits = bits.decode_huffman(&models.endpoint_pred_model);
                        if pred_bits == PRED_REPEAT_LAST_SYMBOL {
                            repeat = read_vlc(&mut bits, PRED_COUNT_VLC_BITS)?
                                .checked_add(PRED_MIN_REPEAT - 1)
                                .ok_or("an endpoint-prediction run overflows")?;
                            pred_bits = prev_symbol;
                        } else {
                            prev_symbol = pred_bits;
                        }
                    }
                    row_preds[x as usize] = pred_bits >> 4;
                } else {
                    pred_bits = row_preds[x as usize];
                }
            }
            let pred = pred_bits & 3;
            pred_bits >>= 2;
            match pred {
                0 if x == 0 => return Err(format!("block ({x}, {y}) predicts from the left edge")),
                1 if y == 0 => return Err(format!("block ({x}, {y}) predicts from above the top")),
                2 if x == 0 || y == 0 => return Err(format!("block ({x}, {y}) predicts from outside")),
                0..=2 => {}
                _ => {
                    bits.decode_huffman(&models.delta_endpoint_model);
                }
            }
            let selector = if selector_run > 0 {
                selector_run -= 1;
                selectors
            } else {
                let mut symbol = bits.decode_huffman(&models.selector_model);
                if symbol == rle_symbol {
                    let run = bits.decode_huffman(&models.selector_history_buf_rle_model);
                    selector_run = if run == SELECTOR_RLE_SYMBOLS - 1 {
                        read_vlc(&mut bits, SELECTOR_RLE_VLC_BITS)?
                            .checked_add(SELECTOR_RLE_MIN)
                            .ok_or("a selector run overflows")?
                    } else {
                        run + SELECTOR_RLE_MIN
                    };
                    if selector_run > total {
                        return Err(format!("a selector run of {selector_run} in {total} blocks"));
                    }
                    symbol = selectors;
                    selector_run -= 1;
                }
                symbol
            };
            if selector >= selectors && selector - selectors >= history {
                return Err(format!("selector history index {} of {history}", selector - selectors));
            }
        }
    }
    if repeat != 0 {
        return Err(format!("an endpoint-prediction run goes {repeat} block group(s) past the slice"));
    }
    Ok(())
}
