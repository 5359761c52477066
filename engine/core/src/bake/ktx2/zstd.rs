//! A Zstandard decoder for supercompressed KTX2 levels (and Zstandard TIFF chunks) that
//! never produces more than the level's (or chunk's) size: each block's output is counted before it is written, so a small file
//! that inflates to gigabytes (a "Zstandard bomb") is refused once it passes that size,
//! whatever its frame header declares.

use ruzstd::blocks::block::BlockType;
use ruzstd::blocks::literals_section::{LiteralsSection, LiteralsSectionType};
use ruzstd::blocks::sequence_section::SequencesHeader;
use ruzstd::decoding::block_decoder;
use ruzstd::decoding::literals_section_decoder::decode_literals;
use ruzstd::decoding::scratch::DecoderScratch;
use ruzstd::decoding::sequence_execution::execute_sequences;
use ruzstd::decoding::sequence_section_decoder::decode_sequences;
use ruzstd::frame::read_frame_header;

/// The most a Zstandard block may decode to (the format's `Block_Maximum_Size`).
const MAX_BLOCK_OUTPUT: u64 = 128 << 10;

/// Inflates the Zstandard frame `comp` to exactly `want` bytes, or says why not: a bad
/// stream, a frame that needs a dictionary, a declared content size other than `want`,
/// output past `want` (refused before the block that would pass it is written), or
/// fewer bytes than `want`. Holds at most `want` bytes of output and one block. `unit`
/// names what the bytes are in errors ("level", "chunk").
pub(in crate::bake) fn inflate_exact(comp: &[u8], want: usize, unit: &str) -> Result<Vec<u8>, String> {
    let mut src = comp;
    let (frame, _) = read_frame_header(&mut src).map_err(|e| format!("not a Zstandard frame ({e})"))?;
    if frame.header.dictionary_id().is_some() {
        return Err("the Zstandard frame needs a dictionary".into());
    }
    // 0 when the header declares no size (a declared empty frame is refused below).
    let declared = frame.header.frame_content_size();
    if declared != 0 && declared != want as u64 {
        return Err(format!("its Zstandard frame declares {declared} bytes, the {unit} holds {want}"));
    }
    let mut scratch = DecoderScratch::new(want);
    let mut blocks = block_decoder::new();
    let mut produced = 0u64;
    let want64 = want as u64;
    loop {
        let (block, _) =
            blocks.read_block_header(&mut src).map_err(|e| format!("bad Zstandard block header ({e})"))?;
        let room = want64 - produced;
        let n = match block.block_type {
            BlockType::Compressed => {
                compressed_block(&mut scratch, &mut src, block.content_size, room, unit)?
            }
            _ => {
                let n = u64::from(block.decompressed_size);
                if n > room {
                    return Err(past(want, produced + n, unit));
                }
                blocks
                    .decode_block_content(&block, &mut scratch, &mut src)
                    .map_err(|e| format!("bad Zstandard block ({e})"))?;
                n
            }
        };
        produced += n;
        if block.last_block {
            break;
        }
    }
    if produced != want64 {
        return Err(format!("its Zstandard stream inflates to {produced} bytes, the {unit} holds {want}"));
    }
    let out = scratch.buffer.drain();
    if out.len() != want {
        return Err(format!("its Zstandard stream inflates to {} bytes, the {unit} holds {want}", out.len()));
    }
    Ok(out)
}

fn past(want: usize, at_least: u64, unit: &str) -> String {
    format!("its Zstandard stream inflates past the {unit}'s {want} bytes (to {at_least} or more)")
}

/// Decodes one compressed block of `size` bytes from `src` into `scratch.buffer`, after
/// checking that its output (every literal and every match) is at most `room` bytes and
/// at most the format's block maximum; returns the bytes written.
fn compressed_block(
    scratch: &mut DecoderScratch,
    src: &mut &[u8],
    size: u32,
    room: u64,
    unit: &str,
) -> Result<u64, String> {
    let truncated = || "the Zstandard stream is cut short".to_string();
    let (content, rest) = src.split_at_checked(size as usize).ok_or_else(truncated)?;
    *src = rest;
    let mut literals = LiteralsSection::new();
    let head = literals.parse_from_header(content).map_err(|e| format!("bad Zstandard literals ({e})"))?;
    let raw = content.get(usize::from(head)..).ok_or_else(truncated)?;
    let literal_bytes = match (literals.compressed_size, &literals.ls_type) {
        (Some(n), _) => n as usize,
        (None, LiteralsSectionType::RLE) => 1,
        (None, LiteralsSectionType::Raw) => literals.regenerated_size as usize,
        (None, _) => return Err("bad Zstandard literals section".into()),
    };
    let regenerated = u64::from(literals.regenerated_size);
    let limit = room.min(MAX_BLOCK_OUTPUT);
    if regenerated > limit {
        return Err(format!(
            "a Zstandard block holds {regenerated} literals, more than the {limit} bytes left"
        ));
    }
    let literal_src = raw.get(..literal_bytes).ok_or_else(truncated)?;
    scratch.literals_buffer.clear();
    let used = decode_literals(&literals, &mut scratch.huf, literal_src, &mut scratch.literals_buffer)
        .map_err(|e| format!("bad Zstandard literals ({e})"))?;
    if scratch.literals_buffer.len() as u64 != regenerated || used as usize != literal_bytes {
        return Err("bad Zstandard literals section (sizes disagree)".into());
    }
    let raw = &raw[literal_bytes..];
    let mut header = SequencesHeader::new();
    let seq_head = header.parse_from_header(raw).map_err(|e| format!("bad Zstandard sequences ({e})"))?;
    let raw = raw.get(usize::from(seq_head)..).ok_or_else(truncated)?;
    if header.num_sequences == 0 {
        scratch.buffer.push(&scratch.literals_buffer);
        scratch.sequences.clear();
        return Ok(regenerated);
    }
    decode_sequences(&header, raw, &mut scratch.fse, &mut scratch.sequences)
        .map_err(|e| format!("bad Zstandard sequences ({e})"))?;
    // What executing them writes: every literal (those the sequences copy and the rest)
    // and every match.
    let (copied, matched) =
        scratch.sequences.iter().fold((0u64, 0u64), |(l, m), s| (l + u64::from(s.ll), m + u64::from(s.ml)));
    if copied > regenerated {
        return Err("Zstandard sequences copy more literals than the block holds".into());
    }
    let total = regenerated + matched;
    if total > room {
        return Err(format!(
            "a Zstandard block inflates to {total} bytes, past the {room} bytes the {unit} has left"
        ));
    }
    if total > MAX_BLOCK_OUTPUT {
        return Err(format!(
            "a Zstandard block inflates to {total} bytes, over the format's {MAX_BLOCK_OUTPUT}-byte block maximum"
        ));
    }
    execute_sequences(scratch).map_err(|e| format!("bad Zstandard sequences ({e})"))?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// One compressed block after a raw one of 16 bytes: no literals, `n` sequences that
    /// each repeat 131,074 bytes from 4 back (match-length code 52 with all 16 extra bits
    /// set; every code in RLE mode, so each sequence is 2 bytes of extra bits).
    fn sequence_bomb(n: u8) -> Vec<u8> {
        assert!(n < 128, "one-byte sequence count");
        let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58];
        f.extend_from_slice(&(16u32 << 3).to_le_bytes()[..3]);
        f.extend_from_slice(&[7; 16]);
        // Literals: raw, none. Sequences: count, modes (literal lengths, offsets and match
        // lengths all RLE), their codes (0, 0, 52), then the bit stream and its end marker.
        let mut block = vec![0x00, n, 0x54, 0, 0, 52];
        block.extend(std::iter::repeat_n(0xFF, 2 * usize::from(n)));
        block.push(0x01);
        let header = 1 | 2 << 1 | (block.len() as u32) << 3;
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.extend_from_slice(&block);
        f
    }

    #[test]
    fn raw_frames_inflate_to_their_bytes() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 / 3) as u8).collect();
        let frame = crate::bake::ktx2::zstd_raw_frame(&data);
        assert_eq!(inflate_exact(&frame, data.len(), "level").unwrap(), data);
        let e = inflate_exact(&frame, data.len() + 1, "level").unwrap_err();
        assert!(e.contains("declares 300000 bytes"), "{e}");
        let e = inflate_exact(&frame[..frame.len() - 5], data.len(), "level").unwrap_err();
        assert!(e.contains("Zstandard"), "{e}");
    }

    #[test]
    fn a_block_of_sequences_is_measured_before_it_runs() {
        let bomb = sequence_bomb(100);
        // What an uncapped decoder makes of it: 13 MB out of 222 bytes.
        let mut all = Vec::new();
        std::io::Read::read_to_end(&mut ruzstd::StreamingDecoder::new(&bomb[..]).unwrap(), &mut all).unwrap();
        assert_eq!(all.len(), 16 + 100 * 131_074, "{} bytes in", bomb.len());
        // Capped: refused before the block runs, whatever room is left.
        let e = inflate_exact(&bomb, 1 << 20, "level").unwrap_err();
        assert!(e.contains("inflates to 13107400 bytes"), "{e}");
        let e = inflate_exact(&bomb, 1 << 30, "level").unwrap_err();
        assert!(e.contains("13107400") && e.contains("131072"), "{e}");
        // One sequence: 2 bytes over the format's block maximum, though the level has room.
        let e = inflate_exact(&sequence_bomb(1), 16 + 131_074, "level").unwrap_err();
        assert!(e.contains("131074 bytes, over the format's 131072-byte block maximum"), "{e}");
    }
}
