//! Image sources the baker reads row by row: decoded image files, a procedural
//! labelled texture of any size, and mip levels kept in memory or in a scratch file.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::format::atlas::{ColorSpace, LayerMeta};
use crate::format::tile::MAX_VIRTUAL_SIDE;
use crate::temp_files::{self, TempPath};

/// Bytes per RGBA8 texel.
pub const TEXEL_BYTES: usize = 4;

/// Largest decoded image accepted from a file, in bytes (RGBA8).
pub const MAX_DECODED_BYTES: u64 = 8 << 30;

/// Where `assets/fetch-data.sh` puts the real test images: `$TESSERA_DATA`, else
/// `$XDG_CACHE_HOME/tessera/data`, else `~/.cache/tessera/data` (the script's own rule).
pub fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_DATA") {
        return d.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir).join(".cache")
    });
    cache.join("tessera/data")
}

/// A `width × height` RGBA8 image that can be read in bands of whole rows.
pub trait RowSource: Send + Sync {
    /// Width and height in texels.
    fn size(&self) -> (u32, u32);
    /// Fills `out` with rows `y0..y0 + out.len() / (width * 4)`; all must lie inside.
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()>;
    /// The source's own mip level `mip` (≥ 1) for a layer of colour space `color`, when it
    /// has one: the baker then reads that level instead of filtering the one above it,
    /// which saves the time and scratch space of huge levels. It must be byte for byte
    /// what the baker's filter (`docs/atlas-format.md`, "Mip pyramid filtering") makes of
    /// level `mip − 1`, and of the size the layout gives mip `mip`. Default: none.
    fn mip_level(&self, mip: u32, color: ColorSpace) -> Option<&dyn RowSource> {
        let _ = (mip, color);
        None
    }
    /// A key for tile `(tx, ty)` of mip level `mip` cut in tiles of `tile` payload
    /// texels with `border` border texels on each side, when the source knows that
    /// tiles repeat: two tiles of one mip with the same key have the same texels,
    /// border included (in a bake with the layer's clamped edges, or the source's own
    /// regions). The baker reads and encodes one tile per key and stores the others as
    /// copies of it; it checks the promise by encoding a second tile of every key and
    /// fails the bake when the two differ. Default: `None`, every tile is read.
    fn tile_key(&self, mip: u32, tile: u32, border: u32, tx: u32, ty: u32) -> Option<u64> {
        let _ = (mip, tile, border, tx, ty);
        None
    }
    /// What the source knows about its texels beyond their values, for the atlas'
    /// metadata record ([`LayerMeta`]): a GeoTIFF's georeferencing. Default: nothing.
    fn layer_meta(&self) -> LayerMeta {
        LayerMeta::default()
    }
    /// Where the texels come from, for the bake cache
    /// ([`bake_if_stale`](crate::bake::bake_if_stale)): the file they are decoded from, or a
    /// description of generated texels. Default: `None`, unknown, so a bake of this source
    /// is never reused.
    fn origin(&self) -> Option<SourceOrigin> {
        None
    }
    /// The colour space the file itself tags its texels with, when it says (a KTX2's data
    /// format descriptor, a DDS's DX10 format): a bake takes it as the layer's colour
    /// space and refuses a different one asked for. Default: `None`, the file does not
    /// say (PNG, JPEG, TIFF), and the layer is sRGB colour unless told otherwise.
    fn color_space(&self) -> Option<ColorSpace> {
        None
    }
    /// For a data raster (elevations, measurements: one band of 16-bit or floating-point
    /// samples), how its values were mapped onto the 8-bit texels it reads as; the bake
    /// keeps it in the atlas so that values can be read back. Default: `None`, the texels
    /// are colours.
    fn data_scale(&self) -> Option<DataScale> {
        None
    }
    /// For a data raster, spreads the values `min..=max` over its texels instead of its own
    /// range (which that range must lie in), so that the images of a mosaic share one
    /// scale; called before any row is read. Returns whether it did; default: `false`.
    fn set_data_range(&mut self, min: f64, max: f64) -> bool {
        let _ = (min, max);
        false
    }
}

/// How a data raster's values map onto its 8-bit texels (kept in the atlas' metadata).
pub use crate::format::atlas::meta::DataScale;

/// Where a [`RowSource`]'s texels come from, as far as the bake cache needs to know to
/// tell whether an earlier bake of the same source is still current.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceOrigin {
    /// Decoded from this file: any change to the file makes the bake stale.
    File(PathBuf),
    /// Computed from parameters, all of which this description names (e.g.
    /// `labelled 256x128, 128-texel cells`): the same description, the same texels.
    Generated(String),
}

/// Why an input image could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The path does not exist.
    #[error("{path}: no such file")]
    Missing {
        /// The input path.
        path: PathBuf,
    },
    /// The input is a URL (`s3://`, `gs://`, `az://`, `http(s)://`…), which a bake does
    /// not read.
    #[error("{path}: URL inputs are not read by bake: download the file first")]
    Url {
        /// The input as given.
        path: PathBuf,
    },
    /// A GDAL VRT this build does not read as a mosaic: the reason names the element or
    /// attribute that is not supported.
    #[error("{path}: GDAL VRT not read: {reason}")]
    Vrt {
        /// The VRT.
        path: PathBuf,
        /// What is not supported.
        reason: String,
    },
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The input path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not an image format this build reads.
    #[error(
        "{path}: unsupported image format ({reason}); read: PNG, JPEG, DDS, KTX2 and TIFF / BigTIFF \
         (uncompressed, LZW, Deflate, PackBits, Zstandard, JPEG, WebP or LERC)"
    )]
    Unsupported {
        /// The input path.
        path: PathBuf,
        /// What the decoder said.
        reason: String,
    },
    /// The image has no texels.
    #[error("{path}: image is empty ({width}x{height})")]
    Empty {
        /// The input path.
        path: PathBuf,
        /// Width found.
        width: u32,
        /// Height found.
        height: u32,
    },
    /// The image is larger than the engine accepts.
    #[error(
        "{path}: image {width}x{height} is too large (limit {max_side} texels a side, {max_mib} MiB decoded)"
    )]
    TooLarge {
        /// The input path.
        path: PathBuf,
        /// Width found.
        width: u32,
        /// Height found.
        height: u32,
        /// Largest side accepted.
        max_side: u32,
        /// Largest decoded size accepted, MiB.
        max_mib: u64,
    },
    /// The image header was readable but its data is not.
    #[error("{path}: cannot decode image: {reason}")]
    Decode {
        /// The input path.
        path: PathBuf,
        /// What the decoder said.
        reason: String,
    },
    /// The path is a folder.
    #[error("{path}: is a directory, not an image")]
    Directory {
        /// The input path.
        path: PathBuf,
    },
    /// The path is neither a regular file nor a folder (a FIFO, a socket, a device): it is
    /// refused from its metadata, without being opened.
    #[error("{path}: is {kind}, not a regular file")]
    NotRegular {
        /// The input path.
        path: PathBuf,
        /// What it is instead ("a FIFO (named pipe)", "a character device").
        kind: &'static str,
    },
    /// The file is longer than the memory that reading it may take.
    #[error(
        "{path}: reading this file of {size} needs more memory than the limit of {limit} \
         (raise the limit to read it, e.g. `tessera bake --max-memory`)",
        size = if *bytes > *limit { format!("over {}", human_bytes(*limit)) } else { human_bytes(*bytes) },
        limit = human_bytes(*limit)
    )]
    FileOverMemory {
        /// The input path.
        path: PathBuf,
        /// Its length as found (when it grew while being read, the bytes read so far).
        bytes: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The file ends before its image data does.
    #[error("{path}: truncated or corrupt image: {reason}")]
    Truncated {
        /// The input path.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// Decoding the image would take more memory than allowed.
    #[error(
        "{path}: decoding this {width}x{height} image needs {needed} of memory, over the limit of {limit} \
         (raise the limit to decode it, e.g. `tessera bake --max-memory`)",
        needed = human_bytes(*needed),
        limit = human_bytes(*limit)
    )]
    OverMemory {
        /// The input path.
        path: PathBuf,
        /// Width found.
        width: u32,
        /// Height found.
        height: u32,
        /// Bytes the decode would need at its peak.
        needed: u64,
        /// The limit in force.
        limit: u64,
    },
}

/// Memory a decode may take by default: the file, the decoded pixels and their RGBA8 copy.
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

/// The limit in force for [`ImageSource::open`] and every other decode of an image file.
static MEMORY_LIMIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(DEFAULT_MEMORY_LIMIT);

/// Sets the memory that decoding one image file may take, for this whole process (default
/// [`DEFAULT_MEMORY_LIMIT`]). Images that would need more are refused before decoding.
pub fn set_memory_limit(bytes: u64) {
    MEMORY_LIMIT.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// The memory that decoding one image file may take (see [`set_memory_limit`]).
pub fn memory_limit() -> u64 {
    MEMORY_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// `bytes` as a short human-readable size: "812 MiB", "5.9 GiB".
pub fn human_bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / GIB)
    } else if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// A decoded image held in memory as RGBA8.
pub struct ImageSource {
    width: u32,
    height: u32,
    texels: Vec<u8>,
    /// The file it was decoded from, if any.
    path: Option<PathBuf>,
}

impl ImageSource {
    /// Wraps RGBA8 texels (`width * height * 4` bytes).
    pub fn from_rgba(width: u32, height: u32, texels: Vec<u8>) -> Self {
        assert_eq!(texels.len(), width as usize * height as usize * TEXEL_BYTES, "texel buffer size");
        Self { width, height, texels, path: None }
    }

    /// Decodes an image file (PNG or JPEG) whole, checking first its size against the
    /// engine's limits and the memory the decode needs against [`memory_limit`]; truncated
    /// or corrupt data is an error.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        Self::open_with_limit(path, memory_limit())
    }

    /// [`ImageSource::open`] with a memory limit of `max_bytes` for this decode.
    pub fn open_with_limit(path: &Path, max_bytes: u64) -> Result<Self, SourceError> {
        let img = decode_with_limit(path, max_bytes)?;
        let (width, height) = (img.width(), img.height());
        Ok(Self { width, height, texels: img.into_rgba8().into_raw(), path: Some(path.to_path_buf()) })
    }

    /// The texels, RGBA8 row-major.
    pub fn texels(&self) -> &[u8] {
        &self.texels
    }
}

/// Decodes an image file (PNG or JPEG) in its own pixel format, checking its size and the
/// memory it needs ([`memory_limit`]) first.
pub(crate) fn decode_image(path: &Path) -> Result<image::DynamicImage, SourceError> {
    decode_with_limit(path, memory_limit())
}

fn decode_with_limit(path: &Path, max_bytes: u64) -> Result<image::DynamicImage, SourceError> {
    let p = path.to_path_buf();
    let meta = crate::bake::input_file::check_input(path)?;
    // The compressed file is read whole: it is small beside the pixels it decodes to.
    let file_bytes = meta.len();
    if file_bytes > max_bytes {
        // Its decoded pixels need more still; the header says how many.
        let (width, height) = image::ImageReader::open(path)
            .and_then(|r| r.with_guessed_format())
            .ok()
            .and_then(|r| r.into_dimensions().ok())
            .unwrap_or((0, 0));
        return Err(SourceError::OverMemory { path: p, width, height, needed: file_bytes, limit: max_bytes });
    }
    let bytes = crate::bake::input_file::read_input(path, max_bytes)?;
    decode_bytes_with_limit(path, &bytes, max_bytes)
}

/// Decodes an image already in memory (`bytes`, named `path` in errors) under the
/// process's memory limit ([`memory_limit`]): the same checks as a file, for images
/// embedded in or referenced by glTF scenes.
pub(crate) fn decode_bytes(path: &Path, bytes: &[u8]) -> Result<image::DynamicImage, SourceError> {
    decode_bytes_with_limit(path, bytes, memory_limit())
}

pub(crate) fn decode_bytes_with_limit(
    path: &Path,
    bytes: &[u8],
    max_bytes: u64,
) -> Result<image::DynamicImage, SourceError> {
    use image::ImageDecoder as _;
    let p = path.to_path_buf();
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|source| SourceError::Io { path: p.clone(), source })?;
    let Some(format) = reader.format() else {
        return Err(SourceError::Unsupported { path: p, reason: "unrecognised file contents".into() });
    };
    let mut decoder = reader.into_decoder().map_err(|e| classify(&p, e))?;
    let (width, height) = decoder.dimensions();
    check_size(&p, width, height)?;
    let rgba = u64::from(width) * u64::from(height) * TEXEL_BYTES as u64;
    let native = decoder.total_bytes();
    // Peak: the file, the decoded pixels and (unless they are RGBA8 already) their RGBA8 copy.
    let needed =
        bytes.len() as u64 + native + if decoder.color_type() == image::ColorType::Rgba8 { 0 } else { rgba };
    if needed > max_bytes {
        return Err(SourceError::OverMemory { path: p, width, height, needed, limit: max_bytes });
    }
    if format == image::ImageFormat::Jpeg
        && let Err(reason) = jpeg_complete(bytes)
    {
        return Err(SourceError::Truncated { path: p, reason });
    }
    if format == image::ImageFormat::Png
        && let Err(reason) = png_palette_valid(bytes)
    {
        return Err(SourceError::Decode { path: p, reason });
    }
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_bytes);
    decoder.set_limits(limits).map_err(|e| classify(&p, e))?;
    image::DynamicImage::from_decoder(decoder).map_err(|e| match e {
        image::ImageError::Limits(_) => {
            SourceError::OverMemory { path: p.clone(), width, height, needed, limit: max_bytes }
        }
        e => classify(&p, e),
    })
}

/// Whether a JPEG stream is whole: its segments, the entropy-coded data of every scan and
/// the end-of-image marker are all there. The decoder fills what is missing with grey
/// and reports nothing, so a cut file is found here. Bytes after the end marker are allowed.
pub(crate) fn jpeg_complete(b: &[u8]) -> Result<(), String> {
    const CUT: &str = "the file ends before the end-of-image marker (cut short?)";
    if !b.starts_with(&[0xFF, 0xD8]) {
        return Err("no start-of-image marker".into());
    }
    let mut i = 2;
    let mut in_scan = false;
    loop {
        if in_scan {
            // Entropy-coded data: 0xFF is followed by 0x00 (a stuffed byte), a restart
            // marker or the next marker.
            let Some(off) = b.get(i..).and_then(|r| r.iter().position(|&x| x == 0xFF)) else {
                return Err(CUT.into());
            };
            i += off + 1;
            match b.get(i) {
                None => return Err(CUT.into()),
                Some(0x00 | 0xD0..=0xD7 | 0xFF) => {
                    if b[i] != 0xFF {
                        i += 1;
                    }
                    continue;
                }
                Some(_) => in_scan = false,
            }
        } else {
            // Between segments: fill bytes, then a marker.
            if b.get(i) != Some(&0xFF) {
                return Err(format!("no marker at byte {i}"));
            }
            while b.get(i) == Some(&0xFF) {
                i += 1;
            }
        }
        let Some(&marker) = b.get(i) else { return Err(CUT.into()) };
        i += 1;
        match marker {
            0xD9 => return Ok(()),
            0x01 | 0xD0..=0xD7 => {}
            _ => {
                let len = b.get(i..i + 2).map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])));
                let Some(len) = len.filter(|&l| l >= 2 && i + l <= b.len()) else {
                    return Err(CUT.into());
                };
                i += len;
                in_scan = marker == 0xDA;
            }
        }
    }
}

/// Whether a PNG in memory has a palette the `png` decoder takes without panicking
/// ([`palette_valid`](crate::bake::png_rows::palette_valid)).
fn png_palette_valid(b: &[u8]) -> Result<(), String> {
    crate::bake::png_rows::palette_valid(&mut std::io::Cursor::new(b))
}

pub(crate) fn check_size(path: &Path, width: u32, height: u32) -> Result<(), SourceError> {
    if width == 0 || height == 0 {
        return Err(SourceError::Empty { path: path.to_path_buf(), width, height });
    }
    // Saturating: a forged header's sides near 2^32 overflow even a u64 (found by fuzzing).
    let bytes = (u64::from(width) * u64::from(height)).saturating_mul(TEXEL_BYTES as u64);
    if width > MAX_VIRTUAL_SIDE || height > MAX_VIRTUAL_SIDE || bytes > MAX_DECODED_BYTES {
        return Err(SourceError::TooLarge {
            path: path.to_path_buf(),
            width,
            height,
            max_side: MAX_VIRTUAL_SIDE,
            max_mib: MAX_DECODED_BYTES >> 20,
        });
    }
    Ok(())
}

/// Opens the input file at `path` for reading, once
/// [`check_input`](crate::bake::input_file::check_input) says it is a regular file.
pub(crate) fn open_input(path: &Path) -> Result<File, SourceError> {
    crate::bake::input_file::check_input(path)?;
    File::open(path).map_err(|source| SourceError::Io { path: path.to_path_buf(), source })
}

pub(crate) fn classify(path: &Path, e: image::ImageError) -> SourceError {
    let p = path.to_path_buf();
    match e {
        image::ImageError::Unsupported(u) => SourceError::Unsupported { path: p, reason: u.to_string() },
        image::ImageError::IoError(source) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            SourceError::Truncated { path: p, reason: source.to_string() }
        }
        image::ImageError::IoError(source) => SourceError::Io { path: p, source },
        other => SourceError::Decode { path: p, reason: other.to_string() },
    }
}

impl RowSource for ImageSource {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let start = y0 as usize * self.width as usize * TEXEL_BYTES;
        let src = self.texels.get(start..start + out.len()).ok_or_else(|| out_of_range(y0))?;
        out.copy_from_slice(src);
        Ok(())
    }
    fn origin(&self) -> Option<SourceOrigin> {
        self.path.clone().map(SourceOrigin::File)
    }
}

/// An image file (PNG or JPEG) whose header has been read but whose texels are decoded
/// only when a bake first reads them: so a bake found current by the bake cache never
/// decodes it. The decode applies the same checks as [`ImageSource::open`].
pub struct ImageFile {
    path: PathBuf,
    width: u32,
    height: u32,
    decoded: std::sync::OnceLock<Result<ImageSource, String>>,
}

impl ImageFile {
    /// Reads the header of the image at `path`: fails now when the file is missing, a
    /// folder, not a supported image or too large; a corrupt body fails at the bake.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let p = path.to_path_buf();
        crate::bake::input_file::check_input(path)?;
        let reader = image::ImageReader::open(path)
            .and_then(|r| r.with_guessed_format())
            .map_err(|source| SourceError::Io { path: p.clone(), source })?;
        if reader.format().is_none() {
            return Err(SourceError::Unsupported { path: p, reason: "unrecognised file contents".into() });
        }
        let (width, height) = reader.into_dimensions().map_err(|e| classify(path, e))?;
        check_size(path, width, height)?;
        Ok(Self { path: p, width, height, decoded: std::sync::OnceLock::new() })
    }

    /// The image file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decoded image, decoding it on the first call.
    fn decoded(&self) -> std::io::Result<&ImageSource> {
        let decoded = self.decoded.get_or_init(|| ImageSource::open(&self.path).map_err(|e| e.to_string()));
        match decoded {
            Ok(image) if image.size() == (self.width, self.height) => Ok(image),
            Ok(image) => Err(std::io::Error::other(format!(
                "{}: decoded to {}x{} but its header said {}x{}",
                self.path.display(),
                image.width,
                image.height,
                self.width,
                self.height
            ))),
            Err(message) => Err(std::io::Error::other(message.clone())),
        }
    }
}

impl RowSource for ImageFile {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.decoded()?.read_rows(y0, out)
    }
    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::File(self.path.clone()))
    }
}

pub(crate) fn out_of_range(y0: u32) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("rows from {y0} lie outside the image"))
}

/// A procedural debugging texture of any size, computed on demand so that even a
/// 256K² texture never sits in memory.
///
/// Each 128² tile shows its mip-0 column and row as digits, a one-texel dark line
/// on its top and left edges, a 16-texel checker, and a colour ramp across the
/// whole texture so that coarse mips stay recognisable.
#[derive(Clone, Copy, Debug)]
pub struct Generated {
    width: u32,
    height: u32,
    cell: u32,
}

impl Generated {
    /// A generated texture with labelled 128-texel cells.
    pub fn new(width: u32, height: u32) -> Self {
        Self::with_cell(width, height, 128)
    }

    /// A generated texture whose labelled cells are `cell` texels wide.
    pub fn with_cell(width: u32, height: u32, cell: u32) -> Self {
        Self { width, height, cell: cell.max(8) }
    }

    /// The RGBA8 texel at `(x, y)`.
    pub fn texel(&self, x: u32, y: u32) -> [u8; 4] {
        let (cx, cy) = (x / self.cell, y / self.cell);
        let (lx, ly) = (x % self.cell, y % self.cell);
        if lx == 0 || ly == 0 {
            return [24, 24, 32, 255];
        }
        if let Some(on) = label_pixel(cx, cy, lx, ly) {
            return if on { [255, 255, 255, 255] } else { [0, 0, 0, 255] };
        }
        let u = x as f32 / self.width as f32;
        let v = y as f32 / self.height as f32;
        let check = if ((x / 16) + (y / 16)).is_multiple_of(2) { 24.0 } else { -24.0 };
        let r = 60.0 + 150.0 * u + check;
        let g = 60.0 + 150.0 * v + check;
        let b = 200.0 - 110.0 * (u + v) * 0.5 + check;
        [r as u8, g as u8, b as u8, 255]
    }
}

impl RowSource for Generated {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }
    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::Generated(format!(
            "labelled {}x{}, {}-texel cells",
            self.width, self.height, self.cell
        )))
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row_bytes = self.width as usize * TEXEL_BYTES;
        if y0 as usize + out.len() / row_bytes > self.height as usize {
            return Err(out_of_range(y0));
        }
        out.par_chunks_mut(row_bytes).enumerate().for_each(|(i, row)| {
            let y = y0 + i as u32;
            for (x, px) in row.chunks_exact_mut(TEXEL_BYTES).enumerate() {
                px.copy_from_slice(&self.texel(x as u32, y));
            }
        });
        Ok(())
    }
}

/// 3×5 bitmaps of the digits 0–9, one row of three bits per entry.
const DIGITS: [[u8; 5]; 10] = [
    [7, 5, 5, 5, 7],
    [2, 6, 2, 2, 7],
    [7, 1, 7, 4, 7],
    [7, 1, 7, 1, 7],
    [5, 5, 7, 1, 1],
    [7, 4, 7, 1, 7],
    [7, 4, 7, 5, 7],
    [7, 1, 2, 2, 2],
    [7, 5, 7, 5, 7],
    [7, 5, 7, 1, 7],
];

/// Whether local texel `(lx, ly)` of cell `(cx, cy)` is in the label box, and if so
/// whether it is ink. The label is the column on one line and the row below it.
fn label_pixel(cx: u32, cy: u32, lx: u32, ly: u32) -> Option<bool> {
    const SCALE: u32 = 3;
    const ORIGIN: u32 = 6;
    const ADV: u32 = 4 * SCALE;
    const LINE: u32 = 6 * SCALE;
    if lx < ORIGIN || !(ORIGIN..ORIGIN + 2 * LINE).contains(&ly) {
        return None;
    }
    let (line, fy) = ((ly - ORIGIN) / LINE, (ly - ORIGIN) % LINE);
    let value = if line == 0 { cx } else { cy };
    let digits = value.checked_ilog10().unwrap_or(0) + 1;
    let col = (lx - ORIGIN) / ADV;
    if col >= digits {
        return None;
    }
    let (fx, gy) = (((lx - ORIGIN) % ADV) / SCALE, fy / SCALE);
    if fx >= 3 || gy >= 5 {
        return Some(false);
    }
    let digit = (value / 10u32.pow(digits - 1 - col)) % 10;
    Some(DIGITS[digit as usize][gy as usize] & (4 >> fx) != 0)
}

/// A mip level produced while baking: in memory when small, otherwise in a
/// scratch file next to the output whose name is deleted as soon as it is open, so the
/// space comes back when the level is dropped or the process ends, however it ends (where
/// the file system cannot delete an open file, the name stays, listed in
/// [`crate::temp_files`], until the level is dropped).
pub struct LevelStore {
    width: u32,
    height: u32,
    backing: Backing,
}

enum Backing {
    Memory(Vec<u8>),
    /// `_path`, when the name could not be deleted at once, deletes it on drop.
    File {
        file: File,
        _path: Option<TempPath>,
        written: u64,
    },
}

/// Name prefix of the scratch files of spilled levels, `{prefix}{pid}-{w}x{h}-{seq}.tmp`.
pub const SCRATCH_PREFIX: &str = ".tessera-level-";

/// Levels up to this size stay in memory while baking.
pub const IN_MEMORY_LEVEL_BYTES: u64 = 64 << 20;

impl LevelStore {
    /// An empty level of `width × height`, filled by [`LevelStore::append_rows`].
    pub fn new(width: u32, height: u32, scratch_dir: &Path) -> std::io::Result<Self> {
        let bytes = u64::from(width) * u64::from(height) * TEXEL_BYTES as u64;
        let backing = if bytes <= IN_MEMORY_LEVEL_BYTES {
            Backing::Memory(Vec::with_capacity(bytes as usize))
        } else {
            let seq = SCRATCH_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = temp_files::temp_name(SCRATCH_PREFIX, &format!("-{width}x{height}-{seq}"));
            let mut path = TempPath::new(scratch_dir.join(name));
            let file = File::options().read(true).write(true).create_new(true).open(path.path())?;
            // The level is reached through `file` only: without a name, even a killed
            // process leaves nothing behind.
            let path = match std::fs::remove_file(path.path()) {
                Ok(()) => {
                    path.keep();
                    None
                }
                Err(_) => Some(path),
            };
            Backing::File { file, _path: path, written: 0 }
        };
        Ok(Self { width, height, backing })
    }

    /// Appends whole rows below those already written.
    pub fn append_rows(&mut self, rows: &[u8]) -> std::io::Result<()> {
        match &mut self.backing {
            Backing::Memory(v) => v.extend_from_slice(rows),
            Backing::File { file, written, .. } => {
                file.write_all(rows)?;
                *written += rows.len() as u64;
            }
        }
        Ok(())
    }
}

static SCRATCH_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl RowSource for LevelStore {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let start = y0 as u64 * u64::from(self.width) * TEXEL_BYTES as u64;
        match &self.backing {
            Backing::Memory(v) => {
                let src =
                    v.get(start as usize..start as usize + out.len()).ok_or_else(|| out_of_range(y0))?;
                out.copy_from_slice(src);
                Ok(())
            }
            Backing::File { file, written, .. } => {
                if start + out.len() as u64 > *written {
                    return Err(out_of_range(y0));
                }
                crate::local_file::FileExt::read_exact_at(file, out, start)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn generated_rows_match_texels() {
        let g = Generated::new(300, 200);
        let mut rows = vec![0u8; 300 * 4 * 3];
        g.read_rows(130, &mut rows).unwrap();
        assert_eq!(&rows[300 * 4 + 8..300 * 4 + 12], &g.texel(2, 131));
        assert!(g.read_rows(199, &mut rows).is_err());
        // Cell edges are dark lines, labels have ink.
        assert_eq!(g.texel(128, 50), [24, 24, 32, 255]);
        let ink = (6..18).flat_map(|x| (6..21).map(move |y| (x, y))).any(|(x, y)| g.texel(x, y) == [255; 4]);
        assert!(ink);
    }

    /// A noisy `w × h` RGB image (noise so that encoders cannot shrink it to nothing).
    fn noisy(w: u32, h: u32) -> image::RgbImage {
        let mut x = 0x2545_f491u32;
        image::RgbImage::from_fn(w, h, |_, _| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            image::Rgb([x as u8, (x >> 8) as u8, (x >> 16) as u8])
        })
    }

    /// `path` cut to `fraction` of its length.
    fn cut(path: &Path, fraction: f64) -> PathBuf {
        let bytes = std::fs::read(path).unwrap();
        let name = format!("cut-{}", path.file_name().unwrap().to_string_lossy());
        let out = path.with_file_name(name);
        std::fs::write(&out, &bytes[..(bytes.len() as f64 * fraction) as usize]).unwrap();
        out
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn truncated_jpeg_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let jpg = dir.path().join("photo.jpg");
        let mut out = std::io::BufWriter::new(File::create(&jpg).unwrap());
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
            .encode_image(&noisy(256, 192))
            .unwrap();
        drop(out);
        assert_eq!(ImageSource::open(&jpg).unwrap().size(), (256, 192));
        for fraction in [0.5, 0.9, 0.999] {
            let cut = cut(&jpg, fraction);
            let err = ImageSource::open(&cut).err().expect("a cut JPEG must not decode");
            assert!(matches!(err, SourceError::Truncated { .. }), "{err}");
            assert!(err.to_string().contains("cut-photo.jpg"), "{err}");
        }
        // Bytes after the end-of-image marker are harmless.
        let mut bytes = std::fs::read(&jpg).unwrap();
        bytes.extend_from_slice(b"trailing metadata");
        std::fs::write(&jpg, bytes).unwrap();
        assert!(ImageSource::open(&jpg).is_ok());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn truncated_png_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("scan.png");
        noisy(256, 192).save(&png).unwrap();
        assert!(ImageSource::open(&png).is_ok());
        for fraction in [0.5, 0.99] {
            let err = ImageSource::open(&cut(&png, fraction)).err().expect("a cut PNG must not decode");
            assert!(err.to_string().contains("cut-scan.png"), "{err}");
        }
    }

    /// A PNG signature, an IHDR of `w × h` RGBA8 and an empty IDAT: what the decoder needs
    /// to say how large the image is, in 57 bytes.
    fn png_header(path: &Path, w: u32, h: u32) {
        let chunk = crate::fuzz::seeds::png_chunk;
        let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
        chunk(&mut b, b"IHDR", &ihdr);
        chunk(&mut b, b"IDAT", &[]);
        chunk(&mut b, b"IEND", &[]);
        std::fs::write(path, b).unwrap();
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn the_memory_limit_is_checked_before_decoding() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("vast.png");
        png_header(&png, 20000, 20000);
        let err = ImageSource::open_with_limit(&png, 64 << 20).err().unwrap();
        let text = err.to_string();
        assert!(matches!(err, SourceError::OverMemory { needed, .. } if needed > 1_600_000_000), "{text}");
        assert!(
            text.contains("vast.png") && text.contains("20000x20000") && text.contains("64 MiB"),
            "{text}"
        );
        // Past the limit, the (empty) pixel data is what fails.
        let err = ImageSource::open_with_limit(&png, 8 << 30).err().unwrap();
        assert!(!matches!(err, SourceError::OverMemory { .. }), "{err}");
        assert!(err.to_string().contains("vast.png"), "{err}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_directory_is_not_an_image() {
        let dir = tempfile::tempdir().unwrap();
        let err = ImageSource::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn level_store_spills_to_disk() {
        let dir = tempfile::tempdir().unwrap();
        let w = 4096u32;
        let h = (IN_MEMORY_LEVEL_BYTES / (u64::from(w) * 4) + 1) as u32;
        let mut s = LevelStore::new(w, h, dir.path()).unwrap();
        assert!(matches!(s.backing, Backing::File { .. }));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "scratch file unlinked while open");
        let row: Vec<u8> = (0..w * 4).map(|i| i as u8).collect();
        s.append_rows(&row).unwrap();
        let mut out = vec![0u8; row.len()];
        s.read_rows(0, &mut out).unwrap();
        assert_eq!(out, row);
        assert!(s.read_rows(1, &mut out).is_err());
        drop(s);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "scratch file removed");
    }
}
