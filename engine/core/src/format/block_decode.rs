//! Block-compressed tiles back to RGBA8 on the CPU: what a GPU pool in BC1, BC7, ASTC
//! 4×4 or ETC2 shows of a tile, for references built from the pool's own texels (the
//! fully resident reference of a capture through a block pool) and for tests.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::format::codec_types::{CodecError, TargetFormat};

/// Decodes `blocks` (a `side × side` tile in `target`, [`TargetFormat::bytes_per_tile`]
/// bytes, rows of 4×4 blocks) into `side × side × 4` bytes of RGBA8. RGBA8 input is
/// returned as it is. A wrong length or a block the decoder rejects is a
/// [`CodecError`].
pub fn decode_blocks(target: TargetFormat, blocks: &[u8], side: u32) -> Result<Vec<u8>, CodecError> {
    let expected = target.bytes_per_tile(side);
    if blocks.len() != expected {
        return Err(CodecError::Length { expected, found: blocks.len() });
    }
    let decode: fn(&[u8], &mut [u32]) = match target {
        TargetFormat::Rgba8 => return Ok(blocks.to_vec()),
        TargetFormat::Bc1 => texture2ddecoder::decode_bc1_block,
        TargetFormat::Bc7 => texture2ddecoder::decode_bc7_block,
        TargetFormat::Etc2Rgba => texture2ddecoder::decode_etc2_rgba8_block,
        TargetFormat::Astc4x4 => {
            |b: &[u8], out: &mut [u32]| texture2ddecoder::decode_astc_block(b, 4, 4, out)
        }
    };
    let block_bytes = target.bytes_per_block();
    let across = side.div_ceil(4) as usize;
    let side = side as usize;
    let mut out = vec![0u8; side * side * 4];
    let run = || {
        let mut px = [0u32; 16];
        for (i, block) in blocks.chunks_exact(block_bytes).enumerate() {
            decode(block, &mut px);
            let (bx, by) = ((i % across) * 4, (i / across) * 4);
            for (j, p) in px.iter().enumerate() {
                let (x, y) = (bx + (j & 3), by + (j >> 2));
                if x < side && y < side {
                    // texture2ddecoder packs BGRA into a little-endian u32.
                    let [b, g, r, a] = p.to_le_bytes();
                    out[(y * side + x) * 4..][..4].copy_from_slice(&[r, g, b, a]);
                }
            }
        }
    };
    catch_unwind(AssertUnwindSafe(run))
        .map_err(|_| CodecError::Corrupt(format!("a {} block the decoder does not take", target.name())))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn solid_bc7_and_bc1_blocks_decode_to_their_colour() {
        // BC7 mode 6 with both endpoints (254, 254, 254, 254) + p-bits 0, indices 0:
        // grey 254 everywhere. Built bit by bit: mode 6 is bit 6 set.
        let mut bc7 = [0u8; 16];
        let mut bits: u128 = 1 << 6;
        let mut pos = 7;
        for _ in 0..8 {
            bits |= 127u128 << pos;
            pos += 7;
        }
        bc7.copy_from_slice(&bits.to_le_bytes());
        let tile: Vec<u8> = bc7.repeat(4);
        let rgba = decode_blocks(TargetFormat::Bc7, &tile, 8).unwrap();
        assert!(rgba.chunks_exact(4).all(|p| p == [254, 254, 254, 254]), "{:?}", &rgba[..8]);
        // BC1: colour0 = colour1 = pure red in 565, indices 0.
        let bc1 = [0x00, 0xf8, 0x00, 0xf8, 0, 0, 0, 0];
        let rgba = decode_blocks(TargetFormat::Bc1, &bc1.repeat(4), 8).unwrap();
        assert!(rgba.chunks_exact(4).all(|p| p == [255, 0, 0, 255]), "{:?}", &rgba[..8]);
    }

    #[test]
    fn wrong_lengths_are_errors() {
        assert!(matches!(decode_blocks(TargetFormat::Bc7, &[0; 15], 4), Err(CodecError::Length { .. })));
        assert_eq!(decode_blocks(TargetFormat::Rgba8, &[7; 64], 4).unwrap(), vec![7; 64]);
    }
}
