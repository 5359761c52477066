//! LZW tiles decoded here, whole, rather than by the `tiff` crate. The crate (0.11) reads
//! a partial edge tile row by row, the visible part then the padding; when the decoder
//! took the stream's last codes in during one of those reads, the next read (with no input
//! left) gets no progress from `weezl` and fails with "no lzw end code found", though
//! libtiff reads the same tile. Decoding the tile in one call, as libtiff does, never
//! asks for more input once every byte is out; a stream that ends without its end code
//! is accepted once the tile's bytes are all produced (libtiff's tolerance), and output
//! never grows past the tile's size.

use std::io::{self, BufRead, ErrorKind, Read as _};

use weezl::{BitOrder, LzwStatus, decode::Configuration};

/// Inflates the LZW stream of `count` bytes at `reader`'s position into the chunk's `full`
/// stored bytes (never more); the predictor and cropping are [`super::chunk`]'s.
pub(super) fn inflate<R: BufRead>(reader: &mut R, count: u64, full: usize) -> io::Result<Vec<u8>> {
    let invalid = |reason: String| io::Error::new(ErrorKind::InvalidData, reason);
    let mut raw = vec![0u8; full];
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
    Ok(raw)
}
