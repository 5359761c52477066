//! LZW tiles decoded here, whole, rather than by the `tiff` crate. The crate (0.11) reads
//! a partial edge tile row by row, the visible part then the padding; when the decoder
//! took the stream's last codes in during one of those reads, the next read (with no input
//! left) gets no progress from `weezl` and fails with "no lzw end code found", though
//! libtiff reads the same tile. Decoding the tile in one call, as libtiff does, never
//! asks for more input once every byte is out; a stream that ends without its end code
//! is accepted once the tile's bytes are all produced (libtiff's tolerance), and output
//! never grows past the tile's size.

use std::io::{self, BufRead, ErrorKind, Read as _, Seek, SeekFrom};

use ::tiff::decoder::DecodingResult;
use weezl::{BitOrder, LzwStatus, decode::Configuration};

/// What decoding an LZW tile needs beyond its place in the file.
#[derive(Clone, Copy, Debug)]
pub(super) struct TileFormat {
    /// Tile size in texels (edge tiles are stored at this size too).
    pub(super) tile_w: usize,
    pub(super) tile_h: usize,
    /// Samples per texel, bytes per sample (1 or 2).
    pub(super) samples: usize,
    pub(super) sample_bytes: usize,
    /// 16-bit samples stored big-endian.
    pub(super) big_endian: bool,
    /// Horizontal differencing (TIFF predictor 2).
    pub(super) horizontal: bool,
    /// One sample of gray where 0 is white (photometric interpretation 0): inverted.
    pub(super) invert: bool,
}

/// Decodes the LZW tile of `count` bytes at `offset` in `reader`, and returns its top-left
/// `w × h` texels (the rest is padding) as the `tiff` crate would: 8- or 16-bit samples,
/// the predictor undone, in native byte order.
pub(super) fn read_tile<R: BufRead + Seek>(
    reader: &mut R,
    offset: u64,
    count: u64,
    f: &TileFormat,
    w: usize,
    h: usize,
) -> io::Result<DecodingResult> {
    let invalid = |reason: String| io::Error::new(ErrorKind::InvalidData, reason);
    let row = f.tile_w * f.samples * f.sample_bytes;
    let full = row * f.tile_h;
    let mut raw = vec![0u8; full];
    reader.seek(SeekFrom::Start(offset))?;
    let mut src = reader.take(count);
    let mut decoder = Configuration::with_tiff_size_switch(BitOrder::Msb, 8).build();
    let mut filled = 0;
    while filled < full {
        let input = src.fill_buf()?;
        let step = decoder.decode_bytes(input, &mut raw[filled..]);
        let used = step.consumed_in;
        src.consume(used);
        filled += step.consumed_out;
        match step.status {
            Ok(LzwStatus::Ok) => {}
            // The end code, or the stream's end without one: what was produced is all.
            Ok(LzwStatus::Done | LzwStatus::NoProgress) => break,
            Err(e) => return Err(invalid(format!("bad LZW data after {filled} bytes ({e})"))),
        }
    }
    if filled < full {
        return Err(invalid(format!("LZW data ends after {filled} of the tile's {full} bytes")));
    }
    let line = w * f.samples;
    Ok(if f.sample_bytes == 1 {
        let mut out = Vec::with_capacity(line * h);
        for r in raw.chunks_exact_mut(row).take(h) {
            if f.horizontal {
                for i in f.samples..r.len() {
                    r[i] = r[i].wrapping_add(r[i - f.samples]);
                }
            }
            out.extend_from_slice(&r[..line]);
        }
        if f.invert {
            out.iter_mut().for_each(|v| *v = !*v);
        }
        DecodingResult::U8(out)
    } else {
        let mut out = Vec::with_capacity(line * h);
        let mut values = vec![0u16; row / 2];
        for r in raw.chunks_exact(row).take(h) {
            for (v, b) in values.iter_mut().zip(r.chunks_exact(2)) {
                let pair = [b[0], b[1]];
                *v = if f.big_endian { u16::from_be_bytes(pair) } else { u16::from_le_bytes(pair) };
            }
            if f.horizontal {
                for i in f.samples..values.len() {
                    values[i] = values[i].wrapping_add(values[i - f.samples]);
                }
            }
            out.extend_from_slice(&values[..line]);
        }
        if f.invert {
            out.iter_mut().for_each(|v| *v = u16::MAX - *v);
        }
        DecodingResult::U16(out)
    })
}
