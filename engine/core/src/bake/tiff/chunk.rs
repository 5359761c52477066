//! TIFF chunks this reader decodes itself rather than through the `tiff` crate: LZW tiles
//! (see [`super::lzw`]), Zstandard, JPEG, WebP and LERC chunks. Each is decoded into at
//! most its stored size, checked before anything is decoded (a JPEG's, WebP's or LERC
//! blob's declared size, a Zstandard block's output), then its predictor is undone and its
//! visible part cut out.

use std::io::{self, BufRead, ErrorKind, Read as _, Seek, SeekFrom};
use std::path::Path;

use ::tiff::decoder::{Decoder, DecodingResult};

use ::tiff::tags::Tag;

use super::texels::{Sample, Texels};
use super::{Grid, Reader, header_error, lzw, tag_u16s, ycbcr};
use crate::bake::source::SourceError;

/// How a chunk's bytes are compressed.
#[derive(Clone, Debug)]
pub(super) enum Codec {
    /// LZW (compression 5): tiles only, strips go through the crate.
    Lzw,
    /// Zstandard (compression 50000), decoded by the capped decoder of KTX2 levels.
    Zstd,
    /// JPEG (compression 7): `tables` is the JPEGTables tag (quantisation and Huffman
    /// tables shared by every chunk); `ycbcr` when the samples are YCbCr (photometric 6),
    /// converted to RGB here.
    Jpeg { tables: Option<Vec<u8>>, ycbcr: bool },
    /// WebP (compression 50001), lossless or lossy.
    WebP,
    /// LERC (compression 34887): a LERC 2 blob, itself compressed as `outer` says (the
    /// LercParameters tag: GDAL's LERC, LERC_DEFLATE or LERC_ZSTD).
    Lerc { outer: LercOuter },
}

/// The compression around a LERC blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LercOuter {
    None,
    Deflate,
    Zstd,
}

impl Codec {
    /// The compression's name, for errors.
    fn name(&self) -> &'static str {
        match self {
            Codec::Lzw => "LZW",
            Codec::Zstd => "Zstandard",
            Codec::Jpeg { .. } => "JPEG",
            Codec::WebP => "WebP",
            Codec::Lerc { .. } => "LERC",
        }
    }
}

/// The TIFF predictor applied before compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Predictor {
    /// 1: none.
    None,
    /// 2: horizontal differencing of samples.
    Horizontal,
    /// 3: floating point (bytes of each row split into planes, then differenced).
    Float,
}

/// What decoding a chunk needs beyond its place in the file.
#[derive(Clone, Debug)]
pub(super) struct ChunkFormat {
    pub(super) codec: Codec,
    /// Tiles (stored at their full size, edge tiles too) or strips (the last one only as
    /// tall as the rows left).
    pub(super) tiled: bool,
    /// Chunk size in texels: the tile size, or the image width and rows per strip.
    pub(super) chunk_w: usize,
    pub(super) chunk_h: usize,
    /// Samples per texel.
    pub(super) samples: usize,
    pub(super) sample: Sample,
    /// Multi-byte samples stored big-endian.
    pub(super) big_endian: bool,
    pub(super) predictor: Predictor,
    /// One sample of gray where 0 is white (photometric interpretation 0): inverted.
    pub(super) invert: bool,
    /// What texels a LERC blob's mask leaves out read as: the file's nodata value, else 0
    /// (as GDAL fills them).
    pub(super) fill: f64,
}

impl ChunkFormat {
    /// Rows stored for a chunk whose visible part is `h` rows high.
    fn stored_rows(&self, h: usize) -> usize {
        if self.tiled { self.chunk_h } else { h }
    }
}

/// GDAL's LercParameters tag: the LERC version and the compression around each blob.
const LERC_PARAMETERS: u16 = 50674;

/// The format of the image's chunks when this reader decodes them itself (this module):
/// LZW tiles, Zstandard, JPEG and WebP; `None` for the others (read by the `tiff` crate).
pub(super) fn own_chunks(
    path: &Path,
    decoder: &mut Decoder<Reader>,
    g: &Grid,
) -> Result<Option<ChunkFormat>, SourceError> {
    let unsupported = |reason: String| SourceError::Unsupported { path: path.to_path_buf(), reason };
    let first = |v: Option<Vec<u16>>| v.and_then(|v| v.first().copied());
    let compression = first(tag_u16s(path, decoder, Tag::Compression)?).unwrap_or(1);
    let photometric = first(tag_u16s(path, decoder, Tag::PhotometricInterpretation)?);
    let codec = match compression {
        5 if g.tiled => Codec::Lzw,
        50000 => Codec::Zstd,
        7 => {
            let tables = match decoder.find_tag(Tag::JPEGTables).map_err(|e| header_error(path, e))? {
                Some(v) => Some(v.into_u8_vec().map_err(|e| header_error(path, e))?),
                None => None,
            };
            Codec::Jpeg { tables, ycbcr: photometric == Some(6) }
        }
        50001 => Codec::WebP,
        34887 => {
            let params = decoder
                .find_tag_unsigned_vec::<u32>(Tag::Unknown(LERC_PARAMETERS))
                .map_err(|e| header_error(path, e))?
                .unwrap_or_default();
            let outer = match params.get(1).copied().unwrap_or(0) {
                0 => LercOuter::None,
                1 => LercOuter::Deflate,
                2 => LercOuter::Zstd,
                n => return Err(unsupported(format!("TIFF LERC blobs in compression {n} (LercParameters)"))),
            };
            Codec::Lerc { outer }
        }
        _ => return Ok(None),
    };
    let predictor = match (first(tag_u16s(path, decoder, Tag::Predictor)?).unwrap_or(1), g.sample) {
        (1, _) => Predictor::None,
        (2, Sample::U8 | Sample::U16 | Sample::I16) => Predictor::Horizontal,
        (3, Sample::F32) => Predictor::Float,
        (p, s) => {
            return Err(unsupported(format!(
                "TIFF predictor {p} on {} samples; only none (1), horizontal (2) on integers and floating \
                 point (3) on floats",
                s.name()
            )));
        }
    };
    if predictor != Predictor::None && matches!(codec, Codec::Jpeg { .. } | Codec::WebP | Codec::Lerc { .. })
    {
        return Err(unsupported(format!("TIFF predictor with {compression} compression")));
    }
    Ok(Some(ChunkFormat {
        codec,
        tiled: g.tiled,
        chunk_w: g.chunk_w as usize,
        chunk_h: g.chunk_h as usize,
        samples: g.samples,
        sample: g.sample,
        big_endian: decoder.byte_order() == ::tiff::tags::ByteOrder::BigEndian,
        predictor,
        // As the crate does: gray of one sample only.
        invert: photometric == Some(0) && g.texels == Texels::Gray && g.samples == 1,
        fill: 0.0,
    }))
}

/// The most compressed bytes a chunk of `raw` decoded bytes may take: its raw size twice
/// (a JPEG of noise at quality 100, a WebP that failed to compress) plus headers and
/// tables. A larger chunk is refused before it is read.
fn max_compressed(raw: usize) -> u64 {
    raw as u64 * 2 + (1 << 20)
}

/// Decodes the chunk of `count` bytes at `offset` in `reader`, and returns its top-left
/// `w × h` texels (the rest is padding) as the `tiff` crate would: samples of the file's
/// type, the predictor undone, in native byte order; YCbCr JPEG converted to RGB.
pub(super) fn read_chunk<R: BufRead + Seek>(
    reader: &mut R,
    offset: u64,
    count: u64,
    f: &ChunkFormat,
    w: usize,
    h: usize,
) -> io::Result<DecodingResult> {
    let rows = f.stored_rows(h);
    let row = f.chunk_w * f.samples * f.sample.bytes();
    let full = row * rows;
    if count > max_compressed(full) {
        return Err(invalid(format!(
            "its {} bytes of {} data are far more than its {full} bytes of samples",
            count,
            f.codec.name()
        )));
    }
    reader.seek(SeekFrom::Start(offset))?;
    match &f.codec {
        Codec::Lzw => {
            let raw = lzw::inflate(reader, count, full)?;
            Ok(samples(raw, row, f, w, h))
        }
        Codec::Zstd => {
            let comp = read_bytes(reader, count)?;
            let raw = crate::bake::ktx2::zstd::inflate_exact(&comp, full, "chunk").map_err(invalid)?;
            Ok(samples(raw, row, f, w, h))
        }
        Codec::Jpeg { tables, ycbcr } => {
            let comp = read_bytes(reader, count)?;
            jpeg(&comp, tables.as_deref(), *ycbcr, f, w, h)
        }
        Codec::WebP => {
            let comp = read_bytes(reader, count)?;
            webp(comp, f, w, h)
        }
        Codec::Lerc { outer } => {
            let comp = read_bytes(reader, count)?;
            // The blob holds the samples (4 to 8 bytes a texel at most for the types read
            // here) plus headers, masks and Huffman tables: a larger one is refused.
            let limit = max_compressed(full);
            let blob = match outer {
                LercOuter::None => comp,
                LercOuter::Deflate => inflate_limited(&comp, limit)?,
                LercOuter::Zstd => {
                    let mut src = &comp[..];
                    let declared = ruzstd::frame::read_frame_header(&mut src)
                        .map(|(frame, _)| frame.header.frame_content_size())
                        .map_err(|e| invalid(format!("not a Zstandard frame around its LERC blob ({e})")))?;
                    if declared == 0 || declared > limit {
                        return Err(invalid(format!(
                            "its Zstandard frame declares a LERC blob of {declared} bytes (1 to {limit})"
                        )));
                    }
                    crate::bake::ktx2::zstd::inflate_exact(&comp, declared as usize, "LERC blob")
                        .map_err(invalid)?
                }
            };
            lerc(&blob, f, w, h)
        }
    }
}

/// A Deflate (zlib) stream inflated to at most `limit` bytes.
fn inflate_limited(comp: &[u8], limit: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(comp)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| invalid(format!("bad Deflate data around its LERC blob ({e})")))?;
    if out.len() as u64 > limit {
        return Err(invalid(format!("its Deflate stream inflates past {limit} bytes")));
    }
    Ok(out)
}

/// A LERC 2 blob: its size, depth (samples a texel) and type checked against the chunk's
/// before it is decoded; texels its mask leaves out read as [`ChunkFormat::fill`].
fn lerc(blob: &[u8], f: &ChunkFormat, w: usize, h: usize) -> io::Result<DecodingResult> {
    let bad = |e: lerc::LercError| invalid(format!("bad LERC data ({e})"));
    let info = lerc::decode_info(blob).map_err(bad)?;
    let rows = f.stored_rows(h);
    let (lw, lh) = (info.width as usize, info.height as usize);
    if lw != f.chunk_w || lh < h || lh > rows || info.bands != 1 || info.depth as usize != f.samples {
        return Err(invalid(format!(
            "its LERC blob is {lw}x{lh} texels of {} values in {} band(s), the chunk {}x{rows} of {}",
            info.depth, info.bands, f.chunk_w, f.samples
        )));
    }
    let n = lw * lh * f.samples;
    let line = w * f.samples;
    fn crop<T: Copy>(v: &[T], row: usize, line: usize, h: usize) -> Vec<T> {
        v.chunks_exact(row).take(h).flat_map(|r| r[..line].iter().copied()).collect()
    }
    let row = lw * f.samples;
    let mismatch =
        || invalid(format!("its LERC blob holds {:?} values, the file {}", info.data_type, f.sample.name()));
    Ok(match (f.sample, info.data_type) {
        (Sample::U8, lerc::DataType::Byte) => {
            let mut v = vec![0u8; n];
            lerc::decode_into_with_nodata(blob, &mut v, f.fill as u8).map_err(bad)?;
            DecodingResult::U8(crop(&v, row, line, h))
        }
        (Sample::U16, lerc::DataType::UShort) => {
            let mut v = vec![0u16; n];
            lerc::decode_into_with_nodata(blob, &mut v, f.fill as u16).map_err(bad)?;
            DecodingResult::U16(crop(&v, row, line, h))
        }
        (Sample::I16, lerc::DataType::Short) => {
            let mut v = vec![0i16; n];
            lerc::decode_into_with_nodata(blob, &mut v, f.fill as i16).map_err(bad)?;
            DecodingResult::I16(crop(&v, row, line, h))
        }
        (Sample::F32, lerc::DataType::Float) => {
            let mut v = vec![0f32; n];
            lerc::decode_into_with_nodata(blob, &mut v, f.fill as f32).map_err(bad)?;
            DecodingResult::F32(crop(&v, row, line, h))
        }
        _ => return Err(mismatch()),
    })
}

fn invalid(reason: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, reason)
}

/// `count` bytes from `reader`; fewer is an error.
fn read_bytes<R: BufRead>(reader: &mut R, count: u64) -> io::Result<Vec<u8>> {
    let mut comp = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    reader.take(count).read_to_end(&mut comp)?;
    if (comp.len() as u64) < count {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            format!("the file ends after {} of the chunk's {count} bytes", comp.len()),
        ));
    }
    Ok(comp)
}

/// The chunk's stored bytes `raw` (rows of `row` bytes) as samples: byte order, predictor,
/// the visible `w × h` texels, inversion.
fn samples(mut raw: Vec<u8>, row: usize, f: &ChunkFormat, w: usize, h: usize) -> DecodingResult {
    let line = w * f.samples;
    let spp = f.samples;
    match f.sample {
        Sample::U8 => {
            let mut out = Vec::with_capacity(line * h);
            for r in raw.chunks_exact_mut(row).take(h) {
                if f.predictor == Predictor::Horizontal {
                    for i in spp..r.len() {
                        r[i] = r[i].wrapping_add(r[i - spp]);
                    }
                }
                out.extend_from_slice(&r[..line]);
            }
            if f.invert {
                out.iter_mut().for_each(|v| *v = !*v);
            }
            DecodingResult::U8(out)
        }
        Sample::U16 | Sample::I16 => {
            let mut out = Vec::with_capacity(line * h);
            let mut values = vec![0u16; row / 2];
            for r in raw.chunks_exact(row).take(h) {
                for (v, b) in values.iter_mut().zip(r.chunks_exact(2)) {
                    let pair = [b[0], b[1]];
                    *v = if f.big_endian { u16::from_be_bytes(pair) } else { u16::from_le_bytes(pair) };
                }
                if f.predictor == Predictor::Horizontal {
                    for i in spp..values.len() {
                        values[i] = values[i].wrapping_add(values[i - spp]);
                    }
                }
                out.extend_from_slice(&values[..line]);
            }
            if f.invert {
                out.iter_mut().for_each(|v| *v = u16::MAX - *v);
            }
            if f.sample == Sample::I16 {
                DecodingResult::I16(out.into_iter().map(|v| v as i16).collect())
            } else {
                DecodingResult::U16(out)
            }
        }
        Sample::F32 => {
            let mut out = Vec::with_capacity(line * h);
            let words = row / 4;
            let mut planes = vec![0u8; row];
            for r in raw.chunks_exact_mut(row).take(h) {
                if f.predictor == Predictor::Float {
                    // libtiff's fpAcc: bytes differenced across the row, then each word's
                    // bytes gathered from planes, most significant first.
                    for i in spp..r.len() {
                        r[i] = r[i].wrapping_add(r[i - spp]);
                    }
                    planes.copy_from_slice(r);
                    for v in 0..line.min(words) {
                        let b = [planes[v], planes[words + v], planes[2 * words + v], planes[3 * words + v]];
                        out.push(f32::from_be_bytes(b));
                    }
                } else {
                    for b in r.chunks_exact(4).take(line) {
                        let b = [b[0], b[1], b[2], b[3]];
                        out.push(if f.big_endian { f32::from_be_bytes(b) } else { f32::from_le_bytes(b) });
                    }
                }
            }
            DecodingResult::F32(out)
        }
    }
}

/// A JPEG chunk: its stream after the file's shared tables, decoded without colour
/// conversion (as the components are stored) once its declared size is checked, then
/// YCbCr converted to RGB as libjpeg does for JPEG-in-TIFF.
fn jpeg(
    comp: &[u8],
    tables: Option<&[u8]>,
    ycbcr: bool,
    f: &ChunkFormat,
    w: usize,
    h: usize,
) -> io::Result<DecodingResult> {
    use zune_core::bytestream::ZCursor;
    use zune_core::options::DecoderOptions;
    use zune_jpeg::JpegDecoder;

    if f.sample != Sample::U8 {
        return Err(invalid(format!("JPEG with {} samples; only 8-bit", f.sample.name())));
    }
    // The tables are a stream of their own (SOI, tables, EOI): the chunk's stream goes in
    // place of their EOI, less its own SOI.
    let stream = match tables {
        Some(t) if t.len() >= 4 && comp.len() >= 2 => {
            let mut s = Vec::with_capacity(t.len() + comp.len());
            s.extend_from_slice(&t[..t.len() - 2]);
            s.extend_from_slice(&comp[2..]);
            s
        }
        _ => comp.to_vec(),
    };
    let rows = f.stored_rows(h);
    let options = DecoderOptions::default().set_max_width(f.chunk_w).set_max_height(rows.max(1));
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(&stream[..]), options);
    let bad = |e: zune_jpeg::errors::DecodeErrors| invalid(format!("bad JPEG data ({e:?})"));
    decoder.decode_headers().map_err(bad)?;
    let (jw, jh) = decoder.dimensions().unwrap_or((0, 0));
    let components = decoder.info().map_or(0, |i| usize::from(i.components));
    if jw != f.chunk_w || jh < h || jh > rows {
        return Err(invalid(format!(
            "its JPEG stream is {jw}x{jh} texels, the chunk {}x{rows} ({h} rows seen)",
            f.chunk_w
        )));
    }
    if components != f.samples {
        return Err(invalid(format!(
            "its JPEG stream has {components} components, the file says {} samples a texel",
            f.samples
        )));
    }
    let Some(colorspace) = decoder.input_colorspace() else {
        return Err(invalid("its JPEG stream has no colour space".into()));
    };
    decoder.set_options(options.jpeg_set_out_colorspace(colorspace));
    let pixels = decoder.decode().map_err(bad)?;
    let spp = f.samples;
    if pixels.len() < jw * h * spp {
        return Err(invalid(format!(
            "its JPEG stream decoded to {} bytes, {} expected",
            pixels.len(),
            jw * h * spp
        )));
    }
    let line = w * spp;
    let mut out = Vec::with_capacity(line * h);
    for r in pixels.chunks_exact(jw * spp).take(h) {
        out.extend_from_slice(&r[..line]);
    }
    if ycbcr && spp == 3 {
        ycbcr::to_rgb(&mut out);
    }
    if f.invert {
        out.iter_mut().for_each(|v| *v = !*v);
    }
    Ok(DecodingResult::U8(out))
}

/// A WebP chunk (RGB or RGBA, lossless or lossy), decoded once its declared size is
/// checked.
fn webp(comp: Vec<u8>, f: &ChunkFormat, w: usize, h: usize) -> io::Result<DecodingResult> {
    if f.sample != Sample::U8 || !matches!(f.samples, 3 | 4) {
        return Err(invalid(format!(
            "WebP with {} {} samples a texel; only 8-bit RGB or RGBA",
            f.samples,
            f.sample.name()
        )));
    }
    let bad = |e: image_webp::DecodingError| invalid(format!("bad WebP data ({e})"));
    let mut decoder = image_webp::WebPDecoder::new(io::Cursor::new(comp)).map_err(bad)?;
    let (ww, wh) = decoder.dimensions();
    let (ww, wh) = (ww as usize, wh as usize);
    let rows = f.stored_rows(h);
    if ww != f.chunk_w || wh < h || wh > rows {
        return Err(invalid(format!(
            "its WebP image is {ww}x{wh} texels, the chunk {}x{rows} ({h} rows seen)",
            f.chunk_w
        )));
    }
    let has_alpha = decoder.has_alpha();
    if has_alpha && f.samples == 3 {
        return Err(invalid("its WebP image has alpha, the file says RGB".into()));
    }
    let spp = if has_alpha { 4 } else { 3 };
    let mut pixels = vec![0u8; ww * wh * spp];
    decoder.read_image(&mut pixels).map_err(bad)?;
    let mut out = Vec::with_capacity(w * h * f.samples);
    for r in pixels.chunks_exact(ww * spp).take(h) {
        if spp == f.samples {
            out.extend_from_slice(&r[..w * spp]);
        } else {
            for px in r.chunks_exact(3).take(w) {
                out.extend_from_slice(&[px[0], px[1], px[2], 255]);
            }
        }
    }
    Ok(DecodingResult::U8(out))
}
