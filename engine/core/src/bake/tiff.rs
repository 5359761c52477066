//! TIFF and BigTIFF inputs (GeoTIFF rasters included) read strip by strip or tile by tile,
//! so that a bake holds one row of chunks of a huge scan at a time, never the whole image.

pub mod bytes;
mod chunk;
mod geo;
mod lzw;
mod stream;
mod texels;
mod ycbcr;

use std::fs::File;
use std::io::{self, BufReader, ErrorKind};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ::tiff::decoder::{ChunkType, Decoder, DecodingResult, Limits};
use ::tiff::tags::Tag;
use ::tiff::{ColorType, TiffError};

use self::chunk::{ChunkFormat, own_chunks};
use self::texels::{Conversion, Sample, Texels};
use crate::bake::source::{
    DataScale, RowSource, SourceError, SourceOrigin, TEXEL_BYTES, check_size, human_bytes, memory_limit,
};
use crate::format::atlas::{ColorSpace, GeoReference, LayerMeta};

/// Rows of the previous row of chunks kept when the next one is decoded: bands that overlap
/// across a chunk boundary (the baker's tile borders) then find their first rows here
/// instead of decoding that row of chunks again.
const KEEP_ROWS: u32 = 32;

type Reader = BufReader<bytes::TiffReader>;

/// A TIFF or BigTIFF image whose header and first image directory were read at open and
/// whose strips or tiles are decoded only when a bake reads rows they cover.
///
/// Memory stays within one row of chunks (the image width times the strip or tile height,
/// as RGBA8) plus 32 rows and one decoded chunk, checked at open against
/// [`memory_limit`].
///
/// Reads: gray, gray + alpha, RGB and RGBA (`WhiteIsZero` inverted) of 8- or 16-bit
/// unsigned samples (16-bit colours rounded to 8); JPEG's YCbCr (converted to RGB as
/// libjpeg does); compressed with none, LZW, Deflate, PackBits, Zstandard (predictors
/// none, horizontal and, for floats, floating point), JPEG (YCbCr with any chroma
/// subsampling, RGB or gray), WebP (lossless or lossy, RGB or RGBA) or LERC (lossless
/// or lossy, bare or in Deflate or Zstandard, as GDAL's LERC, LERC_DEFLATE and LERC_ZSTD).
///
/// *Data rasters*, one band of 16-bit unsigned, 16-bit signed or 32-bit float samples
/// (a DEM), read as gray texels rescaled from the raster's range (GDAL's exact
/// statistics when the file holds them, else a first pass over every chunk at open):
/// [`RowSource::data_scale`] says how, and [`RowSource::color_space`] says linear.
/// GDAL's nodata value (texels whose colour samples all equal it, and NaN in floats) and
/// an alpha band of 0 read as transparent texels (alpha 0).
///
/// Refused at open, saying why: other sample formats and depths, palette, CMYK and Lab
/// colour, YCbCr not in JPEG, separate colour planes (planar configuration 2), other
/// compressions (old-style JPEG, LZMA, fax), sizes over the engine's limits and chunks
/// that lie past the end of the file. A corrupt chunk fails the read that needs it, with
/// an error naming the file and the chunk.
pub struct TiffSource {
    path: PathBuf,
    width: u32,
    height: u32,
    grid: Grid,
    /// Compressed bytes of each chunk; 0 marks a chunk the file leaves out (sparse GDAL
    /// files), read as zero samples.
    byte_counts: Vec<u64>,
    /// Where each chunk's compressed bytes start (read ahead whole for a remote file).
    offsets: Vec<u64>,
    /// Chunks decoded by [`chunk`] rather than the `tiff` crate (LZW tiles, on which the
    /// crate fails at some edges; Zstandard, JPEG and WebP): their format and each
    /// chunk's offset in the file.
    own_chunks: Option<(ChunkFormat, Vec<u64>)>,
    /// GDAL's nodata value, as a value of the samples' type.
    nodata: Option<f64>,
    /// A data raster's rescaling ([`Texels::Data`]).
    data: Option<DataScale>,
    /// The GeoTIFF georeferencing of the image ([`geo`]).
    geo: Option<GeoReference>,
    /// The decoder needs `&mut` to read; a [`RowSource`] is shared.
    state: Mutex<State>,
}

/// How the image is cut into chunks and what a decoded chunk holds.
#[derive(Clone, Copy, Debug)]
struct Grid {
    tiled: bool,
    /// Chunk size; a strip is as wide as the image and never taller than it.
    chunk_w: u32,
    chunk_h: u32,
    /// Chunks in one row of chunks.
    across: u32,
    /// Samples per texel in a decoded chunk.
    samples: usize,
    sample: Sample,
    texels: Texels,
}

struct State {
    decoder: Decoder<Reader>,
    window: Window,
    #[cfg(test)]
    stats: Stats,
}

/// Decoded RGBA8 rows `first..first + rows` (the last row of chunks decoded, and up to
/// [`KEEP_ROWS`] rows above it).
struct Window {
    first: u32,
    rows: u32,
    texels: Vec<u8>,
}

/// What a source has done, for tests that check it decodes each chunk once and within its
/// memory bound.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    chunks_decoded: u64,
    /// Most bytes held at once: the window's allocation and one decoded chunk.
    peak_bytes: usize,
}

impl TiffSource {
    /// Reads the header and first image directory of the TIFF or BigTIFF at `path`: fails
    /// now when the file is missing, a folder, not a TIFF, of a kind this reader refuses
    /// (see [`TiffSource`]), too large, cut short, or when one row of its chunks needs more
    /// memory than [`memory_limit`]; a corrupt chunk fails the read that needs it.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        Self::open_with_limit(path, memory_limit())
    }

    /// [`TiffSource::open`] with a memory limit of `max_bytes` for this source.
    pub fn open_with_limit(path: &Path, max_bytes: u64) -> Result<Self, SourceError> {
        let p = path.to_path_buf();
        let meta = std::fs::metadata(path).map_err(|source| match source.kind() {
            ErrorKind::NotFound => SourceError::Missing { path: p.clone() },
            _ => SourceError::Io { path: p.clone(), source },
        })?;
        if meta.is_dir() {
            return Err(SourceError::Directory { path: p });
        }
        let file = File::open(path).map_err(|source| SourceError::Io { path: p.clone(), source })?;
        Self::from_reader(path, bytes::TiffReader::of_file(file), meta.len(), max_bytes, 0, (None, true))
    }

    /// Opens image directory `image` of the TIFF that `reader` reads (`file_len` bytes),
    /// shown as `path`, within `max_bytes`. `range`: a data raster's value range when
    /// known (an overview takes its image's), and whether one without it or GDAL's
    /// statistics finds it by reading every chunk at open; otherwise such a raster is
    /// refused (a streamed COG cannot read its whole image first).
    fn from_reader(
        path: &Path,
        reader: bytes::TiffReader,
        file_len: u64,
        max_bytes: u64,
        image: usize,
        range: (Option<(f64, f64)>, bool),
    ) -> Result<Self, SourceError> {
        let p = path.to_path_buf();
        let mut decoder =
            guarded(|| Decoder::new(BufReader::new(reader))).map_err(|e| header_error(path, e))?;
        if image > 0 {
            guarded(|| decoder.seek_to_image(image)).map_err(|e| header_error(path, e))?;
        }
        let (width, height) = decoder.dimensions().map_err(|e| header_error(path, e))?;
        check_size(path, width, height)?;
        let grid = grid(path, &mut decoder, width, height)?;
        let (offsets, byte_counts) = chunk_extents(path, &mut decoder, &grid, width, height, file_len)?;
        let mut own_chunks = own_chunks(path, &mut decoder, &grid)?.map(|format| (format, offsets.clone()));
        let geo =
            geo::read(&mut decoder).map_err(|reason| SourceError::Decode { path: p.clone(), reason })?;
        let nodata = match decoder.find_tag(Tag::GdalNodata).map_err(|e| header_error(path, e))? {
            Some(v) => v.into_string().ok().and_then(|t| texels::nodata_value(&t, grid.sample)),
            None => None,
        };
        if let Some((format, _)) = &mut own_chunks {
            format.fill = nodata.unwrap_or(0.0);
        }

        let statistics = match grid.texels {
            Texels::Data { .. } => decoder
                .find_tag(Tag::Unknown(GDAL_METADATA))
                .ok()
                .flatten()
                .and_then(|v| v.into_string().ok())
                .and_then(|xml| texels::gdal_statistics(&xml)),
            _ => None,
        };
        let row_bytes = u64::from(width) * TEXEL_BYTES as u64;
        let chunk_bytes =
            u64::from(grid.chunk_w) * u64::from(grid.chunk_h) * (grid.samples * grid.sample.bytes()) as u64;
        // One decoded chunk; a chunk decoded here is decoded whole (with its compressed
        // bytes), then its visible part copied out.
        let chunks = if own_chunks.is_some() { 3 } else { 1 };
        let needed = window_rows(&grid, height) as u64 * row_bytes + chunks * chunk_bytes;
        if needed > max_bytes {
            return Err(SourceError::OverMemory { path: p, width, height, needed, limit: max_bytes });
        }
        // The crate's default limits (256 MiB a decoded chunk) would refuse the strips of a
        // wide image; one chunk is all it ever decodes at once.
        let mut limits = Limits::default();
        limits.decoding_buffer_size = usize::try_from(chunk_bytes).unwrap_or(usize::MAX);
        // Compared with a chunk's compressed size only: the compressed bytes are streamed.
        let largest = byte_counts.iter().copied().max().unwrap_or(0);
        limits.intermediate_buffer_size = usize::try_from(largest).unwrap_or(usize::MAX);
        let decoder = decoder.with_limits(limits);

        tracing::debug!(
            path = %path.display(),
            width,
            height,
            tiled = grid.tiled,
            chunk = ?(grid.chunk_w, grid.chunk_h),
            memory = %human_bytes(needed),
            "TIFF opened for windowed reads"
        );
        let mut source = Self {
            path: p,
            width,
            height,
            grid,
            byte_counts,
            offsets,
            own_chunks,
            nodata,
            data: None,
            geo,
            state: Mutex::new(State {
                decoder,
                window: Window { first: 0, rows: 0, texels: Vec::new() },
                #[cfg(test)]
                stats: Stats::default(),
            }),
        };
        if let Texels::Data { .. } = grid.texels {
            let (min, max) = match range.0.or(statistics) {
                Some(range) => range,
                None if range.1 => source.value_range()?,
                None => {
                    return Err(SourceError::Unsupported {
                        path: source.path,
                        reason: "a data raster without GDAL's statistics cannot be streamed (its range is \
                                 unknown until every texel is read): add them with `gdalinfo -stats`, or \
                                 bake the file"
                            .into(),
                    });
                }
            };
            let file_nodata = match source.nodata {
                Some(v) if v.is_nan() => None,
                other => other,
            };
            source.data = Some(DataScale::spanning(grid.sample.name(), min, max, file_nodata));
        }
        Ok(source)
    }

    /// The smallest and largest value of a data raster, read from every chunk (one at a
    /// time) at open; `(0, 0)` when every texel is nodata.
    fn value_range(&self) -> Result<(f64, f64), SourceError> {
        let g = self.grid;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let conversion = self.conversion();
        let mut range = None;
        for cy in 0..self.height.div_ceil(g.chunk_h) {
            let h = g.chunk_h.min(self.height - cy * g.chunk_h) as usize;
            for cx in 0..g.across {
                let w = g.chunk_w.min(self.width - cx * g.chunk_w) as usize;
                let chunk = self
                    .read_chunk(&mut state.decoder, cy * g.across + cx, w, h)
                    .map_err(|e| SourceError::Decode { path: self.path.clone(), reason: e.to_string() })?;
                texels::fold_range(&chunk, &conversion, (w * g.samples, h), &mut range);
            }
        }
        Ok(range.unwrap_or((0.0, 0.0)))
    }

    /// How this image's decoded samples become texels.
    fn conversion(&self) -> Conversion<'_> {
        Conversion {
            texels: self.grid.texels,
            samples: self.grid.samples,
            nodata: self.nodata,
            data: self.data.as_ref(),
        }
    }

    /// The image file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GeoTIFF georeferencing of the image (tags, geotransform, EPSG code); `None`
    /// for a TIFF without GeoTIFF tags.
    pub fn georeference(&self) -> Option<&GeoReference> {
        self.geo.as_ref()
    }

    #[cfg(test)]
    fn stats(&self) -> Stats {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).stats
    }

    /// Decodes row of chunks `cy` into the window, keeping the window's last rows when
    /// they lie just above it.
    fn decode_chunk_row(&self, state: &mut State, cy: u32) -> io::Result<()> {
        let g = &self.grid;
        let row_bytes = self.width as usize * TEXEL_BYTES;
        let start = cy * g.chunk_h;
        let n = g.chunk_h.min(self.height - start);
        let State {
            decoder,
            window,
            #[cfg(test)]
            stats,
        } = state;
        let keep = if window.rows > 0 && window.first + window.rows == start {
            window.rows.min(KEEP_ROWS)
        } else {
            0
        };
        let from = (window.rows - keep) as usize * row_bytes;
        window.texels.copy_within(from..from + keep as usize * row_bytes, 0);
        // Invalid until every chunk of the row is in: a failed decode leaves nothing stale.
        window.rows = 0;
        if window.texels.capacity() == 0 {
            // Allocated once, at its largest, so that it never grows past the bound.
            window.texels.reserve_exact(window_rows(g, self.height) as usize * row_bytes);
        }
        window.texels.resize((keep + n) as usize * row_bytes, 0);
        #[cfg(test)]
        let capacity = window.texels.capacity();
        let rows = &mut window.texels[keep as usize * row_bytes..];
        let conversion = self.conversion();
        for cx in 0..g.across {
            let index = cy * g.across + cx;
            let x0 = cx * g.chunk_w;
            let w = g.chunk_w.min(self.width - x0) as usize;
            let chunk = self.read_chunk(decoder, index, w, n as usize)?;
            #[cfg(test)]
            count_chunk(stats, capacity, &chunk);
            let line = w * g.samples;
            for (r, out) in rows.chunks_exact_mut(row_bytes).enumerate() {
                let out = &mut out[x0 as usize * TEXEL_BYTES..(x0 as usize + w) * TEXEL_BYTES];
                texels::to_rgba(&chunk, r * line, line, &conversion, out)
                    .map_err(|e| self.chunk_error(ErrorKind::InvalidData, index, &e))?;
            }
        }
        window.first = start - keep;
        window.rows = keep + n;
        Ok(())
    }

    /// Chunk `index`, `w × h` texels, decoded; its samples checked to be as many as that.
    fn read_chunk(
        &self,
        decoder: &mut Decoder<Reader>,
        index: u32,
        w: usize,
        h: usize,
    ) -> io::Result<DecodingResult> {
        let len = w * h * self.grid.samples;
        if self.byte_counts.get(index as usize) == Some(&0) {
            return Ok(match self.grid.sample {
                Sample::U8 => DecodingResult::U8(vec![0; len]),
                Sample::U16 => DecodingResult::U16(vec![0; len]),
                Sample::I16 => DecodingResult::I16(vec![0; len]),
                Sample::F32 => DecodingResult::F32(vec![0.0; len]),
            });
        }
        let count = self.byte_counts.get(index as usize).copied().unwrap_or(0);
        if let Some(&offset) = self.offsets.get(index as usize) {
            // One read of the whole chunk where reads are requests (a remote COG).
            decoder
                .inner()
                .get_mut()
                .prefetch(offset, count)
                .map_err(|e| self.chunk_error(e.kind(), index, &e.to_string()))?;
        }
        let decoded = if let Some((format, offsets)) = &self.own_chunks {
            let offset = offsets.get(index as usize).copied().unwrap_or(0);
            guarded_io(|| chunk::read_chunk(decoder.inner(), offset, count, format, w, h))
                .map_err(|e| self.chunk_error(e.kind(), index, &e.to_string()))?
        } else {
            self.read_chunk_with_crate(decoder, index)?
        };
        let found = match (&decoded, self.grid.sample) {
            (DecodingResult::U8(v), Sample::U8) => v.len(),
            (DecodingResult::U16(v), Sample::U16) => v.len(),
            (DecodingResult::I16(v), Sample::I16) => v.len(),
            (DecodingResult::F32(v), Sample::F32) => v.len(),
            _ => return Err(self.chunk_error(ErrorKind::InvalidData, index, "unexpected sample type")),
        };
        if found < len {
            let reason = format!("decoded to {found} samples, {len} expected");
            return Err(self.chunk_error(ErrorKind::InvalidData, index, &reason));
        }
        Ok(decoded)
    }

    /// Chunk `index` decoded by the `tiff` crate.
    fn read_chunk_with_crate(&self, decoder: &mut Decoder<Reader>, index: u32) -> io::Result<DecodingResult> {
        guarded(|| decoder.read_chunk(index)).map_err(|e| {
            let kind = match &e {
                TiffError::IoError(io) if io.kind() == ErrorKind::UnexpectedEof => ErrorKind::UnexpectedEof,
                TiffError::IoError(io) => io.kind(),
                _ => ErrorKind::InvalidData,
            };
            self.chunk_error(kind, index, &e.to_string())
        })
    }

    /// An error reading chunk `index`, naming the file, the chunk and the texels it holds.
    fn chunk_error(&self, kind: ErrorKind, index: u32, reason: &str) -> io::Error {
        let g = &self.grid;
        let (cx, cy) = (index % g.across, index / g.across);
        let (x0, y0) = (cx * g.chunk_w, cy * g.chunk_h);
        let (x1, y1) = ((x0 + g.chunk_w).min(self.width), (y0 + g.chunk_h).min(self.height));
        let chunk = if g.tiled {
            format!("tile {index} (columns {x0}..{x1}, rows {y0}..{y1})")
        } else {
            format!("strip {index} (rows {y0}..{y1})")
        };
        io::Error::new(kind, format!("{}: cannot decode {chunk}: {reason}", self.path.display()))
    }
}

impl RowSource for TiffSource {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> io::Result<()> {
        let row_bytes = self.width as usize * TEXEL_BYTES;
        let rows = out.len() / row_bytes;
        if !out.len().is_multiple_of(row_bytes) || y0 as usize + rows > self.height as usize {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: {} bytes from row {y0} are not whole rows of the {}x{} image",
                    self.path.display(),
                    out.len(),
                    self.width,
                    self.height
                ),
            ));
        }
        // The window is emptied before each decode, so a panic elsewhere leaves it valid.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let end = y0 + rows as u32;
        let mut y = y0;
        while y < end {
            let w = &state.window;
            if (w.first..w.first + w.rows).contains(&y) {
                let n = (w.first + w.rows).min(end) - y;
                let src = (y - w.first) as usize * row_bytes;
                let dst = (y - y0) as usize * row_bytes;
                let len = n as usize * row_bytes;
                out[dst..dst + len].copy_from_slice(&w.texels[src..src + len]);
                y += n;
            } else {
                self.decode_chunk_row(&mut state, y / self.grid.chunk_h)?;
            }
        }
        Ok(())
    }

    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::File(self.path.clone()))
    }

    fn color_space(&self) -> Option<ColorSpace> {
        // Values, not colours: filtered and sampled as they are.
        self.data.as_ref().map(|_| ColorSpace::Linear)
    }

    fn data_scale(&self) -> Option<DataScale> {
        self.data.clone()
    }

    fn set_data_range(&mut self, min: f64, max: f64) -> bool {
        let Some(d) = &self.data else { return false };
        self.data = Some(DataScale::spanning(&d.sample, min, max, d.nodata));
        // Rows decoded with the old scale are gone.
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        state.window.rows = 0;
        true
    }

    fn layer_meta(&self) -> LayerMeta {
        LayerMeta { geo: self.geo.clone(), ..LayerMeta::default() }
    }
}

/// Rows the window holds at most.
fn window_rows(g: &Grid, height: u32) -> u32 {
    g.chunk_h.saturating_add(KEEP_ROWS).min(height)
}

#[cfg(test)]
fn count_chunk(stats: &mut Stats, window_bytes: usize, chunk: &DecodingResult) {
    let chunk_bytes = match chunk {
        DecodingResult::U8(v) => v.len(),
        DecodingResult::U16(v) => v.len() * 2,
        DecodingResult::I16(v) => v.len() * 2,
        DecodingResult::F32(v) => v.len() * 4,
        _ => 0,
    };
    stats.chunks_decoded += 1;
    stats.peak_bytes = stats.peak_bytes.max(window_bytes + chunk_bytes);
}

/// Runs a decode of ours (through `zune-jpeg`, `image-webp`, `ruzstd`), turning a panic on
/// malformed input into an error.
fn guarded_io<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| Err(panic_error(panic.as_ref())))
}

/// Runs a call into the `tiff` crate, turning a panic on malformed input into an error:
/// a bad file must fail its bake, never abort the process.
fn guarded<T>(f: impl FnOnce() -> Result<T, TiffError>) -> Result<T, TiffError> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|panic| Err(TiffError::IoError(panic_error(panic.as_ref()))))
}

/// A decoder's panic as an I/O error of malformed data, with its message.
fn panic_error(panic: &(dyn std::any::Any + Send)) -> io::Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "malformed data".into());
    io::Error::new(ErrorKind::InvalidData, format!("decoder failed: {what}"))
}

fn header_error(path: &Path, e: TiffError) -> SourceError {
    let p = path.to_path_buf();
    match e {
        TiffError::UnsupportedError(u) => SourceError::Unsupported { path: p, reason: u.to_string() },
        TiffError::IoError(source) if source.kind() == ErrorKind::UnexpectedEof => SourceError::Truncated {
            path: p,
            reason: format!("the file ends inside its header or image directory ({source})"),
        },
        TiffError::IoError(source) => SourceError::Io { path: p, source },
        other => SourceError::Decode { path: p, reason: other.to_string() },
    }
}

/// A tag of the image directory, as unsigned 16-bit values.
fn tag_u16s(path: &Path, decoder: &mut Decoder<Reader>, tag: Tag) -> Result<Option<Vec<u16>>, SourceError> {
    decoder.find_tag_unsigned_vec::<u16>(tag).map_err(|e| header_error(path, e))
}

/// The GDAL_METADATA tag: an XML document of dataset and band metadata (statistics).
const GDAL_METADATA: u16 = 42112;

/// TIFF compression codes this reader decodes.
const COMPRESSIONS: [u16; 9] = [1, 5, 7, 8, 32946, 32773, 34887, 50000, 50001];

/// Checks that the image is of a kind this reader converts, and how it is cut into chunks.
fn grid(path: &Path, decoder: &mut Decoder<Reader>, width: u32, height: u32) -> Result<Grid, SourceError> {
    let unsupported = |reason: String| SourceError::Unsupported { path: path.to_path_buf(), reason };
    let first = |v: Option<Vec<u16>>| v.and_then(|v| v.first().copied());

    if let Some(planar @ 2..) = first(tag_u16s(path, decoder, Tag::PlanarConfiguration)?) {
        return Err(unsupported(format!(
            "TIFF planar configuration {planar} (colour planes stored apart); only interleaved samples"
        )));
    }
    let compression = first(tag_u16s(path, decoder, Tag::Compression)?).unwrap_or(1);
    if !COMPRESSIONS.contains(&compression) {
        let name = match compression {
            2..=4 => "CCITT fax".to_string(),
            6 => "old-style JPEG (6)".to_string(),
            34925 => "LZMA".to_string(),
            n => format!("code {n}"),
        };
        return Err(unsupported(format!(
            "TIFF compression {name}; only none, LZW, Deflate, PackBits, Zstandard, JPEG, WebP and LERC"
        )));
    }
    let formats = tag_u16s(path, decoder, Tag::SampleFormat)?.unwrap_or_default();
    let format = formats.first().copied().unwrap_or(1);
    if let Some(&f) = formats.iter().find(|&&f| f != format) {
        return Err(unsupported(format!("TIFF sample formats {format} and {f} mixed in one texel")));
    }
    let photometric = first(tag_u16s(path, decoder, Tag::PhotometricInterpretation)?);
    let ycbcr = photometric == Some(6);
    if ycbcr && compression != 7 {
        return Err(unsupported(
            "TIFF YCbCr colour outside JPEG compression; only gray, gray + alpha, RGB and RGBA".into(),
        ));
    }
    if let Some(pi @ 3..) = photometric.filter(|_| !ycbcr) {
        let name = match pi {
            3 => "palette".to_string(),
            4 => "transparency mask".to_string(),
            5 => "CMYK".to_string(),
            8..=10 => "Lab".to_string(),
            n => format!("photometric interpretation {n}"),
        };
        return Err(unsupported(format!(
            "TIFF {name} colour; only gray, gray + alpha, RGB, RGBA and JPEG's YCbCr"
        )));
    }
    let color = decoder.colortype().map_err(|e| header_error(path, e))?;
    let depth = color.bit_depth();
    let sample = match (format, depth) {
        (1, 8) => Sample::U8,
        (1, 16) => Sample::U16,
        (2, 16) => Sample::I16,
        (3, 32) => Sample::F32,
        (1 | 2, _) | (3, _) => {
            let kind = match format {
                1 => "unsigned integer",
                2 => "signed integer",
                _ => "floating-point",
            };
            return Err(unsupported(format!(
                "TIFF {depth}-bit {kind} samples; only 8- and 16-bit unsigned, 16-bit signed and 32-bit \
                 floating-point"
            )));
        }
        (f, _) => {
            let name = if f == 4 { "undefined".to_string() } else { format!("code {f}") };
            return Err(unsupported(format!("TIFF {name} samples (sample format {f})")));
        }
    };
    let wide = sample != Sample::U8;
    let (texels, samples) = match color {
        ColorType::Gray(_) if wide => (Texels::Data { alpha: false }, 1),
        ColorType::Gray(_) => (Texels::Gray, 1),
        ColorType::Multiband { num_samples, .. } if photometric.is_some_and(|pi| pi <= 1) => {
            // Gray and extra samples: the first is alpha when the file says so.
            let extra = first(tag_u16s(path, decoder, Tag::ExtraSamples)?);
            let alpha = matches!(extra, Some(1 | 2)) && num_samples == 2;
            let texels = match (wide, alpha) {
                (true, alpha) => Texels::Data { alpha },
                (false, true) => Texels::GrayAlpha,
                (false, false) => Texels::Gray,
            };
            (texels, usize::from(num_samples))
        }
        ColorType::RGB(_) | ColorType::YCbCr(_) => (Texels::Rgb, 3),
        ColorType::RGBA(_) => (Texels::Rgba, 4),
        other => return Err(unsupported(format!("TIFF colour type {other:?}"))),
    };
    if matches!(sample, Sample::I16 | Sample::F32) && !matches!(texels, Texels::Data { .. }) {
        return Err(unsupported(format!(
            "TIFF {} colour samples; signed and floating-point samples only in one band (a data raster)",
            sample.name()
        )));
    }
    let tiled = decoder.get_chunk_type() == ChunkType::Tile;
    let (chunk_w, chunk_h) = decoder.chunk_dimensions();
    let (chunk_w, chunk_h) = if tiled { (chunk_w, chunk_h) } else { (width, chunk_h.min(height)) };
    if chunk_w == 0 || chunk_h == 0 {
        return Err(SourceError::Decode {
            path: path.to_path_buf(),
            reason: format!("chunks of {chunk_w}x{chunk_h} texels"),
        });
    }
    Ok(Grid { tiled, chunk_w, chunk_h, across: width.div_ceil(chunk_w), samples, sample, texels })
}

/// The offset and compressed size of every chunk, checked to lie inside the file of
/// `file_len` bytes.
fn chunk_extents(
    path: &Path,
    decoder: &mut Decoder<Reader>,
    g: &Grid,
    width: u32,
    height: u32,
    file_len: u64,
) -> Result<(Vec<u64>, Vec<u64>), SourceError> {
    let (offsets, counts, kind) = if g.tiled {
        (Tag::TileOffsets, Tag::TileByteCounts, "tile")
    } else {
        (Tag::StripOffsets, Tag::StripByteCounts, "strip")
    };
    let offsets = decoder.get_tag_u64_vec(offsets).map_err(|e| header_error(path, e))?;
    let counts = decoder.get_tag_u64_vec(counts).map_err(|e| header_error(path, e))?;
    let chunks = u64::from(g.across) * u64::from(height.div_ceil(g.chunk_h));
    if offsets.len() as u64 != chunks || counts.len() as u64 != chunks {
        return Err(SourceError::Decode {
            path: path.to_path_buf(),
            reason: format!(
                "{} {kind} offsets and {} sizes for a {width}x{height} image in {chunks} {kind}s",
                offsets.len(),
                counts.len()
            ),
        });
    }
    for (i, (&at, &len)) in offsets.iter().zip(&counts).enumerate() {
        let end = at.checked_add(len);
        if len > 0 && end.is_none_or(|end| end > file_len) {
            return Err(SourceError::Truncated {
                path: path.to_path_buf(),
                reason: format!(
                    "{kind} {i} lies at bytes {at}..{} but the file ends at byte {file_len} (cut short?)",
                    end.map_or_else(|| "?".to_string(), |e| e.to_string())
                ),
            });
        }
    }
    Ok((offsets, counts))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use ::tiff::encoder::colortype::{self, ColorType as EncodedColor};
    use ::tiff::encoder::{Compression, DeflateLevel, TiffEncoder, TiffKind, TiffValue};
    use ::tiff::tags::Predictor;

    /// A pixel format the tests write: samples per texel, bits per sample, and whether
    /// the last sample of gray + alpha is alpha.
    #[derive(Clone, Copy, Debug)]
    struct Format {
        samples: u16,
        bits: u16,
        photometric: u16,
    }

    const GRAY: u16 = 1;
    const RGB: u16 = 2;
    const FORMATS: [Format; 8] = [
        Format { samples: 1, bits: 8, photometric: GRAY },
        Format { samples: 2, bits: 8, photometric: GRAY },
        Format { samples: 3, bits: 8, photometric: RGB },
        Format { samples: 4, bits: 8, photometric: RGB },
        Format { samples: 1, bits: 16, photometric: GRAY },
        Format { samples: 2, bits: 16, photometric: GRAY },
        Format { samples: 3, bits: 16, photometric: RGB },
        Format { samples: 4, bits: 16, photometric: RGB },
    ];

    /// How a hand-written file cuts its image into chunks.
    #[derive(Clone, Copy, Debug)]
    enum Chunks {
        /// Strips of this many rows.
        Strips(u32),
        /// Tiles of this width and height, padded with zeros past the image's edges.
        Tiles(u32, u32),
    }

    /// What [`write_tiff`] writes.
    #[derive(Clone, Debug)]
    struct Spec {
        width: u32,
        height: u32,
        format: Format,
        chunks: Chunks,
        /// BigTIFF (version 43, 8-byte offsets) instead of classic TIFF.
        big: bool,
        /// `MM` (big-endian) instead of `II`.
        big_endian: bool,
        /// Samples stored plane by plane (planar configuration 2).
        planar: bool,
        /// Further tags, `(tag, type, values)`: values are written in the type's size
        /// (type 12, DOUBLE, takes `f64::to_bits`).
        extra: Vec<(u16, u16, Vec<u64>)>,
        /// LZW compression (`Some`), with the horizontal predictor (`Some(true)`).
        lzw: Option<bool>,
        /// Zero bytes each LZW chunk's stream holds after its samples.
        lzw_trailing: usize,
    }

    impl Spec {
        fn new(width: u32, height: u32, format: Format, chunks: Chunks) -> Self {
            Self {
                width,
                height,
                format,
                chunks,
                big: false,
                big_endian: false,
                planar: false,
                extra: Vec::new(),
                lzw: None,
                lzw_trailing: 0,
            }
        }
    }

    /// Writes an uncompressed TIFF (or BigTIFF) by hand, for the layouts the `tiff` crate's
    /// encoder does not write (tiles, gray + alpha, planes, big-endian, refused kinds).
    ///
    /// `samples` holds the image's samples row by row, interleaved, each below
    /// `1 << bits`. The file is the header, the chunks in order (each row of a tile padded
    /// to the tile width, the last row of tiles to the tile height; the last strip only as
    /// tall as the rows left), then one image directory: ImageWidth, ImageLength,
    /// BitsPerSample, Compression (1), PhotometricInterpretation, Strip- or TileOffsets,
    /// SamplesPerPixel, RowsPerStrip, Strip- or TileByteCounts, PlanarConfiguration,
    /// TileWidth and TileLength, ExtraSamples (alpha, for gray + alpha and RGBA) and the
    /// `extra` tags, sorted by tag, values that do not fit in the entry stored after it.
    /// Returns the file's bytes and the offset of each chunk's data.
    fn write_tiff(path: &Path, spec: &Spec, samples: &[u16]) -> (Vec<u8>, Vec<u64>) {
        const SHORT: u16 = 3;
        const LONG: u16 = 4;
        const LONG8: u16 = 16;
        let Spec { width, height, format, chunks, big, big_endian, planar, .. } = spec.clone();
        let spp = usize::from(format.samples);
        assert_eq!(samples.len(), (width * height) as usize * spp);
        let put = |b: &mut Vec<u8>, v: u64, size: usize| {
            let le = v.to_le_bytes();
            if big_endian {
                b.extend(le[..size].iter().rev());
            } else {
                b.extend_from_slice(&le[..size]);
            }
        };
        let type_size = |ty: u16| match ty {
            SHORT => 2,
            LONG => 4,
            _ => 8,
        };

        let mut b: Vec<u8> = if big_endian { b"MM".to_vec() } else { b"II".to_vec() };
        put(&mut b, if big { 43 } else { 42 }, 2);
        if big {
            put(&mut b, 8, 2);
            put(&mut b, 0, 2);
        }
        let ifd_pointer = b.len();
        put(&mut b, 0, if big { 8 } else { 4 });

        let (cw, ch, tiled) = match chunks {
            Chunks::Strips(rows) => (width, rows, false),
            Chunks::Tiles(tw, th) => (tw, th, true),
        };
        let planes = if planar { spp } else { 1 };
        let (across, down) = (width.div_ceil(cw), height.div_ceil(ch));
        let (mut offsets, mut counts) = (Vec::new(), Vec::new());
        for plane in 0..planes {
            for cy in 0..down {
                for cx in 0..across {
                    let start = b.len();
                    offsets.push(start as u64);
                    let rows = if tiled { ch } else { ch.min(height - cy * ch) };
                    let mut chunk = Vec::new();
                    for y in cy * ch..cy * ch + rows {
                        let mut row = Vec::new();
                        for x in cx * cw..cx * cw + cw {
                            let inside = x < width && y < height;
                            let texel = (y as usize * width as usize + x as usize) * spp;
                            let range = if planar { plane..plane + 1 } else { 0..spp };
                            for s in range {
                                row.push(if inside { samples[texel + s] } else { 0 });
                            }
                        }
                        if spec.lzw == Some(true) {
                            let mask = if format.bits == 8 { 0xFF } else { 0xFFFF };
                            for i in (spp..row.len()).rev() {
                                row[i] = row[i].wrapping_sub(row[i - spp]) & mask;
                            }
                        }
                        for v in row {
                            put(&mut chunk, u64::from(v), usize::from(format.bits / 8));
                        }
                    }
                    if spec.lzw.is_some() {
                        chunk.resize(chunk.len() + spec.lzw_trailing, 0);
                        let mut encoder =
                            weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
                        chunk = encoder.encode(&chunk).unwrap();
                    }
                    b.extend_from_slice(&chunk);
                    counts.push((b.len() - start) as u64);
                }
            }
        }
        if b.len() % 2 == 1 {
            b.push(0);
        }

        let offset_type = if big { LONG8 } else { LONG };
        let mut tags: Vec<(u16, u16, Vec<u64>)> = vec![
            (256, LONG, vec![u64::from(width)]),
            (257, LONG, vec![u64::from(height)]),
            (258, SHORT, vec![u64::from(format.bits); spp]),
            (259, SHORT, vec![if spec.lzw.is_some() { 5 } else { 1 }]),
            (262, SHORT, vec![u64::from(format.photometric)]),
            (277, SHORT, vec![spp as u64]),
            (284, SHORT, vec![if planar { 2 } else { 1 }]),
        ];
        if tiled {
            tags.push((322, LONG, vec![u64::from(cw)]));
            tags.push((323, LONG, vec![u64::from(ch)]));
            tags.push((324, offset_type, offsets.clone()));
            tags.push((325, offset_type, counts));
        } else {
            tags.push((273, offset_type, offsets.clone()));
            tags.push((278, LONG, vec![u64::from(ch)]));
            tags.push((279, offset_type, counts));
        }
        let alpha = (format.photometric == GRAY && spp == 2) || (format.photometric == RGB && spp == 4);
        if alpha {
            tags.push((338, SHORT, vec![2]));
        }
        if spec.lzw == Some(true) {
            tags.push((317, SHORT, vec![2]));
        }
        tags.extend(spec.extra.iter().cloned());
        tags.sort_by_key(|t| t.0);

        let ifd = b.len() as u64;
        let (inline, entry) = if big { (8, 20) } else { (4, 12) };
        let mut spill = ifd + if big { 8 + 8 } else { 2 + 4 } + (tags.len() * entry) as u64;
        let mut out_of_line = Vec::new();
        put(&mut b, tags.len() as u64, if big { 8 } else { 2 });
        for (tag, ty, values) in &tags {
            let mut data = Vec::new();
            for &v in values {
                put(&mut data, v, type_size(*ty));
            }
            put(&mut b, u64::from(*tag), 2);
            put(&mut b, u64::from(*ty), 2);
            put(&mut b, values.len() as u64, inline);
            if data.len() <= inline {
                data.resize(inline, 0);
                b.extend_from_slice(&data);
            } else {
                put(&mut b, spill, inline);
                spill += data.len() as u64;
                out_of_line.extend_from_slice(&data);
            }
        }
        put(&mut b, 0, inline);
        b.extend_from_slice(&out_of_line);
        let mut pointer = Vec::new();
        put(&mut pointer, ifd, if big { 8 } else { 4 });
        b[ifd_pointer..ifd_pointer + pointer.len()].copy_from_slice(&pointer);
        std::fs::write(path, &b).unwrap();
        (b, offsets)
    }

    /// `n` noisy samples below `1 << bits`.
    fn noise(n: usize, bits: u16, seed: u64) -> Vec<u16> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 20) & ((1 << bits) - 1)) as u16
            })
            .collect()
    }

    /// The RGBA8 texels a reader must make of `samples`, computed independently of it.
    fn expected(samples: &[u16], format: Format) -> Vec<u8> {
        if format.bits == 16 && format.photometric == GRAY {
            return expected_data(samples, format);
        }
        let to8 =
            |v: u16| if format.bits == 8 { v as u8 } else { ((u32::from(v) * 255 + 32767) / 65535) as u8 };
        samples
            .chunks_exact(usize::from(format.samples))
            .flat_map(|px| {
                let s: Vec<u8> = px.iter().map(|&v| to8(v)).collect();
                match s.len() {
                    1 => [s[0], s[0], s[0], 255],
                    2 => [s[0], s[0], s[0], s[1]],
                    3 => [s[0], s[1], s[2], 255],
                    _ => [s[0], s[1], s[2], s[3]],
                }
            })
            .collect()
    }

    /// The texels of a 16-bit gray (+ alpha) image, a data raster: values spread from
    /// their range (texels whose alpha is 0 left out) over 0..=255, alpha 0 transparent.
    fn expected_data(samples: &[u16], format: Format) -> Vec<u8> {
        let n = usize::from(format.samples);
        let shown = |px: &[u16]| n == 1 || px[n - 1] != 0;
        let values = samples.chunks_exact(n).filter(|px| shown(px)).map(|px| f64::from(px[0]));
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
        let scale = DataScale::spanning("UInt16", lo, hi, None);
        samples
            .chunks_exact(n)
            .flat_map(|px| {
                if !shown(px) {
                    return [0; 4];
                }
                let t = scale.texel(f64::from(px[0]));
                [t, t, t, 255]
            })
            .collect()
    }

    /// Reads `src` whole, in overlapping bands from the top, from the bottom up, and in
    /// random windows, and checks every read against `want`.
    fn check_windows(src: &TiffSource, want: &[u8], seed: u64) {
        let (w, h) = src.size();
        let rb = w as usize * TEXEL_BYTES;
        let read = |y0: u32, n: u32| {
            let mut out = vec![0u8; n as usize * rb];
            src.read_rows(y0, &mut out).unwrap();
            assert!(
                out[..] == want[y0 as usize * rb..(y0 + n) as usize * rb],
                "{}: rows {y0}..{} differ",
                src.path().display(),
                y0 + n
            );
        };
        read(0, h);
        for (band, step) in [(13, 10), (9, 8), (40, 32)] {
            let mut y = 0;
            while y < h {
                read(y, band.min(h - y));
                y += step;
            }
            let mut y = h;
            while y > 0 {
                let y0 = y.saturating_sub(band);
                read(y0, y - y0);
                y -= step.min(y);
            }
        }
        let mut s = seed | 1;
        for _ in 0..40 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let y0 = (s % u64::from(h)) as u32;
            let n = 1 + ((s >> 32) % u64::from(h - y0)) as u32;
            read(y0, n);
        }
        read(h - 1, 1);
        read(0, 1);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn hand_written_strips_and_tiles_read_window_by_window() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (75, 53);
        let mut n = 0;
        for (fi, &format) in FORMATS.iter().enumerate() {
            let samples = noise((w * h) as usize * usize::from(format.samples), format.bits, fi as u64);
            let want = expected(&samples, format);
            for chunks in [
                Chunks::Strips(7),
                Chunks::Strips(1),
                Chunks::Strips(53),
                Chunks::Tiles(16, 16),
                Chunks::Tiles(32, 48),
            ] {
                for big in [false, true] {
                    n += 1;
                    let mut spec = Spec::new(w, h, format, chunks);
                    spec.big = big;
                    spec.big_endian = n % 3 == 0;
                    let path = dir.path().join(format!("f{n}.tif"));
                    write_tiff(&path, &spec, &samples);
                    let src = TiffSource::open(&path).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
                    assert_eq!(src.size(), (w, h));
                    check_windows(&src, &want, n);
                    assert_eq!(src.origin(), Some(SourceOrigin::File(path.clone())));
                    // Every file is found by its first bytes and opened by the dispatcher.
                    let opened = crate::bake::open::open_image(&path).unwrap();
                    let mut all = vec![0; want.len()];
                    opened.read_rows(0, &mut all).unwrap();
                    assert!(all == want, "{spec:?}");
                }
            }
        }
    }

    /// Hostile case 10 of issue 41: LZW tiles (decoded by [`lzw`]) with partial tiles on
    /// the right and bottom edges read as the samples they hold, in every format, both byte
    /// orders, with and without the horizontal predictor; strips stay with the crate.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn lzw_tiles_read_like_their_samples_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (45, 21);
        let mut n = 0;
        for (fi, &format) in FORMATS.iter().enumerate() {
            let samples = noise((w * h) as usize * usize::from(format.samples), format.bits, fi as u64 + 9);
            let want = expected(&samples, format);
            for (big_endian, predictor, chunks) in [
                (false, false, Chunks::Tiles(16, 16)),
                (false, true, Chunks::Tiles(16, 16)),
                (true, true, Chunks::Tiles(32, 16)),
                (true, false, Chunks::Strips(4)),
            ] {
                n += 1;
                let mut spec = Spec::new(w, h, format, chunks);
                spec.big_endian = big_endian;
                spec.lzw = Some(predictor);
                let path = dir.path().join(format!("lzw{n}.tif"));
                write_tiff(&path, &spec, &samples);
                let src = TiffSource::open(&path).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
                assert_eq!(src.own_chunks.is_some(), matches!(chunks, Chunks::Tiles(..)), "{spec:?}");
                check_windows(&src, &want, n);
            }
        }
    }

    /// `--max-memory` holds for what an LZW tile inflates to: a stream that goes on far past
    /// its tile is cut at the tile's size, and a stream that stops short is an error
    /// naming the tile.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn lzw_tiles_inflate_to_their_size_and_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (40, 40);
        let format = FORMATS[2];
        let samples = noise((w * h * 3) as usize, 8, 5);
        let mut spec = Spec::new(w, h, format, Chunks::Tiles(16, 16));
        spec.lzw = Some(false);
        // 8 MiB of zeros after each 768-byte tile: some 20 KiB of codes each.
        spec.lzw_trailing = 8 << 20;
        let path = dir.path().join("long.tif");
        write_tiff(&path, &spec, &samples);
        let src = TiffSource::open(&path).unwrap();
        check_windows(&src, &expected(&samples, format), 3);
        let g = src.grid;
        let chunk = (g.chunk_w * g.chunk_h * 3) as usize;
        let bound = window_rows(&g, h) as usize * w as usize * TEXEL_BYTES + 2 * chunk;
        assert!(src.stats().peak_bytes <= bound, "held {} bytes, bound {bound}", src.stats().peak_bytes);
        // Cut short: the first tile's stream is half its bytes.
        let (mut file, offsets) = write_tiff(&path, &Spec { lzw_trailing: 0, ..spec }, &samples);
        let first = offsets[0] as usize;
        let count = (offsets[1] - offsets[0]) as usize;
        let mut encoder = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
        let short = encoder.encode(&vec![3u8; chunk / 2]).unwrap();
        assert!(short.len() <= count);
        file[first..first + short.len()].copy_from_slice(&short);
        file[first + short.len()..first + count].fill(0);
        std::fs::write(&path, &file).unwrap();
        let src = TiffSource::open(&path).unwrap();
        let mut out = vec![0u8; w as usize * 4 * 16];
        let e = src.read_rows(0, &mut out).unwrap_err().to_string();
        assert!(e.contains("long.tif") && e.contains("tile 0"), "{e}");
    }

    /// Writes `samples` with the `tiff` crate's encoder: strips of 5 rows (PackBits: its
    /// own one-row strips), classic or BigTIFF. Through `write_data`: the encoder (0.11.3)
    /// compresses only there, `write_strip` alone stores strips raw under the compression tag.
    fn encode<C: EncodedColor, K: TiffKind>(
        mut enc: TiffEncoder<std::io::BufWriter<File>, K>,
        w: u32,
        h: u32,
        data: &[C::Inner],
        packbits: bool,
    ) where
        [C::Inner]: TiffValue,
    {
        let mut img = enc.new_image::<C>(w, h).unwrap();
        if !packbits {
            img.rows_per_strip(5).unwrap();
        }
        img.write_data(data).unwrap();
    }

    fn encode_any<K: TiffKind>(
        enc: TiffEncoder<std::io::BufWriter<File>, K>,
        format: Format,
        w: u32,
        h: u32,
        s: &[u16],
        packbits: bool,
    ) {
        let bytes: Vec<u8> = s.iter().map(|&v| v as u8).collect();
        match (format.samples, format.bits) {
            (1, 8) => encode::<colortype::Gray8, K>(enc, w, h, &bytes, packbits),
            (3, 8) => encode::<colortype::RGB8, K>(enc, w, h, &bytes, packbits),
            (4, 8) => encode::<colortype::RGBA8, K>(enc, w, h, &bytes, packbits),
            (1, 16) => encode::<colortype::Gray16, K>(enc, w, h, s, packbits),
            (3, 16) => encode::<colortype::RGB16, K>(enc, w, h, s, packbits),
            (4, 16) => encode::<colortype::RGBA16, K>(enc, w, h, s, packbits),
            other => panic!("no encoder colour type for {other:?}"),
        }
    }

    fn create(path: &Path) -> std::io::BufWriter<File> {
        std::io::BufWriter::new(File::create(path).unwrap())
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn encoder_written_strips_read_window_by_window_with_every_compression() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (61, 47);
        let (none, horizontal) = (Predictor::None, Predictor::Horizontal);
        let compressions = [
            ("none", Compression::Uncompressed, none),
            ("lzw", Compression::Lzw, none),
            ("lzw-predictor", Compression::Lzw, horizontal),
            ("deflate", Compression::Deflate(DeflateLevel::Balanced), none),
            ("deflate-predictor", Compression::Deflate(DeflateLevel::Balanced), horizontal),
            ("packbits", Compression::Packbits, none),
        ];
        let mut n = 0;
        for &format in FORMATS.iter().filter(|f| f.samples != 2) {
            // Smooth samples with a little noise, so that every codec has runs to find.
            let noisy = noise((w * h) as usize * usize::from(format.samples), 3, n);
            let samples: Vec<u16> = noisy
                .iter()
                .enumerate()
                .map(|(i, &v)| ((i / 97) as u16 * 7 + v) & ((1u32 << format.bits) - 1) as u16)
                .collect();
            let want = expected(&samples, format);
            for (name, compression, predictor) in compressions {
                for big in [false, true] {
                    n += 1;
                    let path = dir.path().join(format!("{name}-{n}.tif"));
                    let packbits = name == "packbits";
                    if big {
                        let enc = TiffEncoder::new_big(create(&path))
                            .unwrap()
                            .with_compression(compression)
                            .with_predictor(predictor);
                        encode_any(enc, format, w, h, &samples, packbits);
                    } else {
                        let enc = TiffEncoder::new(create(&path))
                            .unwrap()
                            .with_compression(compression)
                            .with_predictor(predictor);
                        encode_any(enc, format, w, h, &samples, packbits);
                    }
                    if name.starts_with("deflate") {
                        let raw = samples.len() as u64 * u64::from(format.bits / 8);
                        assert!(std::fs::metadata(&path).unwrap().len() < raw, "{name}: not compressed");
                    }
                    let src = TiffSource::open(&path).unwrap_or_else(|e| panic!("{name} {format:?}: {e}"));
                    check_windows(&src, &want, n);
                }
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn geotiff_tags_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let format = FORMATS[4];
        let samples = noise(40 * 30, 16, 9);
        let mut spec = Spec::new(40, 30, format, Chunks::Tiles(16, 16));
        spec.extra = vec![
            // ModelPixelScale, ModelTiepoint, GeoKeyDirectory.
            (33550, 12, [30.0f64, 30.0, 0.0].map(f64::to_bits).to_vec()),
            (33922, 12, [0.0f64, 0.0, 0.0, 440720.0, 3751320.0, 0.0].map(f64::to_bits).to_vec()),
            (34735, 3, vec![1, 1, 0, 2, 1024, 0, 1, 1, 3072, 0, 1, 26711]),
        ];
        let path = dir.path().join("dem.tif");
        write_tiff(&path, &spec, &samples);
        check_windows(&TiffSource::open(&path).unwrap(), &expected(&samples, format), 3);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn unsupported_kinds_are_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let rgb8 = FORMATS[2];
        let cases: Vec<(&str, Spec, &str)> = vec![
            (
                "float",
                {
                    let mut s = Spec::new(8, 8, FORMATS[4], Chunks::Strips(4));
                    s.extra = vec![(339, 3, vec![3])];
                    s
                },
                "floating-point",
            ),
            (
                "signed",
                {
                    let mut s = Spec::new(8, 8, FORMATS[0], Chunks::Strips(4));
                    s.extra = vec![(339, 3, vec![2])];
                    s
                },
                "signed integer",
            ),
            (
                "palette",
                Spec::new(8, 8, Format { samples: 1, bits: 8, photometric: 3 }, Chunks::Strips(4)),
                "palette",
            ),
            (
                "cmyk",
                Spec::new(8, 8, Format { samples: 4, bits: 8, photometric: 5 }, Chunks::Strips(4)),
                "CMYK",
            ),
            (
                "planar",
                {
                    let mut s = Spec::new(8, 8, rgb8, Chunks::Tiles(16, 16));
                    s.planar = true;
                    s
                },
                "planar configuration 2",
            ),
        ];
        for (name, spec, says) in cases {
            let path = dir.path().join(format!("{name}.tif"));
            let n = (spec.width * spec.height) as usize * usize::from(spec.format.samples);
            write_tiff(&path, &spec, &noise(n, spec.format.bits, 1));
            let err = TiffSource::open(&path).err().unwrap_or_else(|| panic!("{name} opened"));
            let text = err.to_string();
            assert!(matches!(err, SourceError::Unsupported { .. }), "{name}: {text}");
            assert!(
                text.contains(says) && text.contains(&format!("{name}.tif")) && text.contains("TIFF"),
                "{text}"
            );
        }

        // Old-style JPEG and LZMA compression: the Compression tag is read before any chunk.
        for (code, says) in [(6u16, "old-style JPEG"), (34925, "LZMA")] {
            let path = dir.path().join(format!("compression-{code}.tif"));
            let (mut bytes, _) =
                write_tiff(&path, &Spec::new(8, 8, rgb8, Chunks::Strips(8)), &noise(192, 8, 2));
            // Compression is the fourth entry of the directory (tags sorted): its value at +8.
            let ifd = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
            let entry = ifd + 2 + 3 * 12;
            assert_eq!(u16::from_le_bytes([bytes[entry], bytes[entry + 1]]), 259);
            bytes[entry + 8..entry + 10].copy_from_slice(&code.to_le_bytes());
            std::fs::write(&path, &bytes).unwrap();
            let err = TiffSource::open(&path).err().unwrap();
            let text = err.to_string();
            assert!(matches!(err, SourceError::Unsupported { .. }) && text.contains(says), "{text}");
            assert!(text.contains("Zstandard, JPEG, WebP and LERC"), "{text}");
            assert!(text.contains("read: PNG, JPEG, DDS, KTX2 and TIFF"), "{text}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn sizes_over_the_limits_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let gray = FORMATS[0];
        let wide = crate::format::tile::MAX_VIRTUAL_SIDE + 1;
        let path = dir.path().join("wide.tif");
        write_tiff(&path, &Spec::new(wide, 1, gray, Chunks::Strips(1)), &vec![7; wide as usize]);
        let err = TiffSource::open(&path).err().unwrap();
        assert!(matches!(err, SourceError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("wide.tif"), "{err}");

        // One strip of 512 rows: a row of chunks is the whole image, over a 1 MiB limit.
        let path = dir.path().join("one-strip.tif");
        write_tiff(&path, &Spec::new(512, 512, gray, Chunks::Strips(512)), &vec![1; 512 * 512]);
        let err = TiffSource::open_with_limit(&path, 1 << 20).err().unwrap();
        assert!(matches!(err, SourceError::OverMemory { needed, .. } if needed > 1 << 20), "{err}");
        assert!(TiffSource::open_with_limit(&path, 4 << 20).is_ok());
        // The same texels in strips of 16 rows fit.
        let path = dir.path().join("strips.tif");
        write_tiff(&path, &Spec::new(512, 512, gray, Chunks::Strips(16)), &vec![1; 512 * 512]);
        assert!(TiffSource::open_with_limit(&path, 1 << 20).is_ok());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn truncated_and_corrupt_chunks_are_errors_naming_file_and_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let format = FORMATS[2];
        let (w, h) = (64, 40);
        let samples: Vec<u16> = (0..w * h * 3).map(|i| ((i / 50) % 256) as u16).collect();

        // Cut short inside the chunks: the directory (written last) is gone with them.
        let mut spec = Spec::new(w, h, format, Chunks::Tiles(16, 16));
        let path = dir.path().join("tiles.tif");
        let (bytes, offsets) = write_tiff(&path, &spec, &samples);
        let cut = dir.path().join("cut.tif");
        std::fs::write(&cut, &bytes[..offsets[5] as usize + 10]).unwrap();
        let err = TiffSource::open(&cut).err().unwrap();
        assert!(err.to_string().contains("cut.tif"), "{err}");

        // A chunk whose offset lies past the end of the file.
        spec.big = true;
        let (mut bytes, offsets) = write_tiff(&path, &spec, &samples);
        let at = bytes.windows(8).position(|x| x == offsets[3].to_le_bytes()).unwrap();
        bytes[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let past = dir.path().join("past.tif");
        std::fs::write(&past, &bytes).unwrap();
        let err = TiffSource::open(&past).err().unwrap();
        assert!(matches!(err, SourceError::Truncated { .. }), "{err}");
        assert!(err.to_string().contains("past.tif") && err.to_string().contains("tile 3"), "{err}");

        // Deflate and LZW strips with garbage in them, and a strip cut in half.
        for (name, compression) in
            [("deflate", Compression::Deflate(DeflateLevel::Balanced)), ("lzw", Compression::Lzw)]
        {
            let path = dir.path().join(format!("{name}.tif"));
            encode_any(
                TiffEncoder::new(create(&path)).unwrap().with_compression(compression),
                format,
                w,
                h,
                &samples,
                false,
            );
            let mut decoder = Decoder::new(File::open(&path).unwrap()).unwrap();
            let offsets = decoder.get_tag_u64_vec(Tag::StripOffsets).unwrap();
            let counts = decoder.get_tag_u64_vec(Tag::StripByteCounts).unwrap();
            drop(decoder);
            let mut bytes = std::fs::read(&path).unwrap();
            let (at, len) = (offsets[2] as usize, counts[2] as usize);
            bytes[at..at + len]
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = 0xFF ^ (i as u8).wrapping_mul(37));
            let bad = dir.path().join(format!("bad-{name}.tif"));
            std::fs::write(&bad, &bytes).unwrap();
            let src = TiffSource::open(&bad).unwrap();
            let rb = w as usize * 4;
            let mut out = vec![0; 20 * rb];
            // Strips of 5 rows: strip 2 holds rows 10..15.
            let err = src.read_rows(8, &mut out).err().unwrap_or_else(|| panic!("{name}: garbage decoded"));
            let text = err.to_string();
            assert!(
                text.contains(&format!("bad-{name}.tif")) && text.contains("strip 2 (rows 10..15)"),
                "{text}"
            );
            // Rows of other strips still read, and the bad strip fails again.
            let want = expected(&samples, format);
            src.read_rows(0, &mut out[..10 * rb]).unwrap();
            assert!(out[..10 * rb] == want[..10 * rb]);
            src.read_rows(15, &mut out).unwrap();
            assert!(out[..] == want[15 * rb..35 * rb]);
            assert!(src.read_rows(12, &mut out[..rb]).is_err());

            // The strip's compressed stream cut in half (its size says so, too).
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.truncate(at + len / 2);
            let short = dir.path().join(format!("short-{name}.tif"));
            std::fs::write(&short, &bytes).unwrap();
            match TiffSource::open(&short) {
                Err(e) => assert!(e.to_string().contains(&format!("short-{name}.tif")), "{e}"),
                Ok(src) => {
                    let err = src.read_rows(10, &mut out[..rb]).err().unwrap();
                    assert!(err.to_string().contains("strip 2"), "{err}");
                }
            }
        }
    }

    /// Random byte damage anywhere in small files: opening and reading fail or succeed,
    /// never panic.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn damaged_files_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let format = FORMATS[7];
        let samples = noise(20 * 13 * 4, 16, 5);
        let mut files = Vec::new();
        for (i, chunks) in [Chunks::Strips(3), Chunks::Tiles(16, 16)].into_iter().enumerate() {
            let mut spec = Spec::new(20, 13, format, chunks);
            spec.big = i == 1;
            files.push(write_tiff(&dir.path().join("x.tif"), &spec, &samples).0);
        }
        let path = dir.path().join("lzw.tif");
        encode_any(
            TiffEncoder::new(create(&path)).unwrap().with_compression(Compression::Lzw),
            format,
            20,
            13,
            &samples,
            false,
        );
        files.push(std::fs::read(&path).unwrap());
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let damaged = dir.path().join("damaged.tif");
        for round in 0..600 {
            let mut bytes = files[round % files.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            if round % 7 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            std::fs::write(&damaged, &bytes).unwrap();
            if let Ok(src) = TiffSource::open(&damaged) {
                let (w, h) = src.size();
                if u64::from(w) * u64::from(h) <= 1 << 20 {
                    let mut out = vec![0; w as usize * h as usize * 4];
                    let _ = src.read_rows(0, &mut out);
                }
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn bake_of_a_tiff_equals_bake_of_its_texels() {
        use crate::NoProgress;
        use crate::bake::{BakeInput, BakeOptions, bake};
        use crate::format::atlas::{Atlas, Wrap};

        let dir = tempfile::tempdir().unwrap();
        let format = FORMATS[3];
        let (w, h) = (100, 70);
        let samples = noise((w * h * 4) as usize, 8, 11);
        let texels = expected(&samples, format);
        for (i, (wrap, chunks)) in
            [(Wrap::Clamp, Chunks::Strips(9)), (Wrap::Repeat, Chunks::Tiles(32, 16))].into_iter().enumerate()
        {
            let path = dir.path().join(format!("in{i}.tif"));
            write_tiff(&path, &Spec::new(w, h, format, chunks), &samples);
            let opts = BakeOptions { tile_size: 32, ..BakeOptions::default() };
            let mut from_tiff = BakeInput::new("layer", TiffSource::open(&path).unwrap());
            from_tiff.wrap = wrap;
            let mut from_memory =
                BakeInput::new("layer", crate::bake::source::ImageSource::from_rgba(w, h, texels.clone()));
            from_memory.wrap = wrap;
            let (a, b) = (dir.path().join(format!("tiff{i}.tsa")), dir.path().join(format!("mem{i}.tsa")));
            bake(vec![from_tiff], &a, &opts, &NoProgress).unwrap();
            bake(vec![from_memory], &b, &opts, &NoProgress).unwrap();
            let (a, b) = (Atlas::open(&a).unwrap(), Atlas::open(&b).unwrap());
            let layout = a.layers()[0].layout;
            assert!(layout.mip_count() > 1);
            let mut tiles = 0;
            for t in layout.tiles(0) {
                assert_eq!(a.entry(t).unwrap().crc32, b.entry(t).unwrap().crc32, "{wrap:?} tile {t:?}");
                tiles += 1;
            }
            assert_eq!(tiles, b.layers()[0].layout.tiles(0).count());
        }
    }

    /// A 8192² RGB image in deflate-compressed strips is read in the baker's bands while
    /// the source holds one row of strips (and the rows it keeps) at most, and decodes each
    /// strip once.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn large_image_is_read_band_by_band_in_bounded_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("large.tif");
        let side = 8192u32;
        // Mostly constant; each row's first texel says which row it is. (The encoder
        // compresses only a whole image, so the test holds one for a moment.)
        let mut texels = vec![90u8; side as usize * side as usize * 3];
        for (y, row) in texels.chunks_exact_mut(side as usize * 3).enumerate() {
            row[..3].copy_from_slice(&[y as u8, (y >> 8) as u8, 7]);
        }
        let mut enc = TiffEncoder::new(create(&path))
            .unwrap()
            .with_compression(Compression::Deflate(DeflateLevel::Fast));
        enc.write_image::<colortype::RGB8>(side, side, &texels).unwrap();
        drop((enc, texels));
        assert!(std::fs::metadata(&path).unwrap().len() < 8 << 20, "the test file should be small");

        let src = TiffSource::open(&path).unwrap();
        let g = src.grid;
        assert!(!g.tiled && g.chunk_h < 100, "{g:?}");
        let rb = side as usize * 4;
        let (tile, border) = (128u32, 4u32);
        let mut band = vec![0u8; (tile + 2 * border) as usize * rb];
        let mut ty = 0;
        while ty * tile < side {
            let y0 = (ty * tile).saturating_sub(border);
            let y1 = ((ty + 1) * tile + border).min(side);
            let out = &mut band[..(y1 - y0) as usize * rb];
            src.read_rows(y0, out).unwrap();
            for (r, row) in out.chunks_exact(rb).enumerate() {
                let v = y0 + r as u32;
                assert_eq!(row[..4], [v as u8, (v >> 8) as u8, 7, 255], "row {v}");
                assert_eq!(row[rb - 4..], [90, 90, 90, 255], "row {v}");
            }
            ty += 1;
        }
        let stats = src.stats();
        let strips = u64::from(side.div_ceil(g.chunk_h));
        assert_eq!(stats.chunks_decoded, strips, "each strip decoded once");
        let one_row_of_chunks = g.chunk_h as usize * rb;
        let bound = one_row_of_chunks + KEEP_ROWS as usize * rb + g.chunk_h as usize * side as usize * 3;
        assert!(stats.peak_bytes <= bound, "held {} bytes, bound {bound}", stats.peak_bytes);
        let whole = side as usize * side as usize * 4;
        assert!(stats.peak_bytes * 20 < whole, "held {} bytes of a {whole}-byte image", stats.peak_bytes);
    }
}
