//! A JPEG file decoded once, when a bake first reads it, into its own pixel layout (grey
//! or RGB, not RGBA8), kept in memory when small and otherwise in an unnamed scratch
//! file, and widened to RGBA8 row by row as the bake reads it.

use std::fs::File;
use std::io::{BufReader, Read, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::bake::input_file::{check_input, read_input};
use crate::bake::rgba::{self, Layout};
use crate::bake::source::{
    RowSource, SourceError, SourceOrigin, TEXEL_BYTES, check_size, classify, jpeg_complete, memory_limit,
    open_input, out_of_range,
};
use crate::local_file::FileExt as _;
use crate::temp_files::{self, TempPath};

/// Decoded pixels all JPEG sources of this process may keep in memory together; a JPEG
/// that would take them past it is written to a scratch file once decoded.
pub const IN_MEMORY_BYTES: u64 = 512 << 20;

/// Name prefix of the scratch files of decoded JPEGs, in the temporary folder
/// (`TMPDIR`). Each is deleted as soon as it is created and lives on as an open file.
pub const SPILL_PREFIX: &str = ".tessera-jpeg-";

/// Held while a JPEG is decoded: one decode at a time, whatever the number of sources,
/// so that a grid of JPEGs peaks at the memory of one decode.
static DECODING: Mutex<()> = Mutex::new(());

/// Bytes of decoded pixels JPEG sources keep in memory now.
static IN_MEMORY: AtomicU64 = AtomicU64::new(0);

static SPILL_SEQ: AtomicU64 = AtomicU64::new(0);

/// A JPEG file whose header has been read and whose pixels are decoded when a bake
/// first reads them (so a bake found current never decodes it). The decode checks what
/// [`ImageSource::open`](crate::bake::source::ImageSource::open) checks and gives the same
/// texels; it needs the file and the decoded pixels in memory at once, within
/// [`memory_limit`]. Afterwards only pixels within [`IN_MEMORY_BYTES`] stay in memory.
pub struct JpegFile {
    path: PathBuf,
    width: u32,
    height: u32,
    /// Channels the decode gives, by the frame header: grey, else RGB.
    channels: u64,
    /// Decoded pixels up to this many bytes (and [`IN_MEMORY_BYTES`] for all sources
    /// together) stay in memory.
    keep_in_memory: u64,
    pixels: OnceLock<Result<Pixels, String>>,
}

/// Decoded pixels in the JPEG's own layout, row-major.
struct Pixels {
    layout: Layout,
    store: Store,
}

enum Store {
    Memory(Held),
    /// An unnamed file: deleted when created, freed when closed.
    File(File),
}

/// Pixels counted in [`IN_MEMORY`] while they live.
struct Held(Vec<u8>);

impl Drop for Held {
    fn drop(&mut self) {
        IN_MEMORY.fetch_sub(self.0.len() as u64, Ordering::Relaxed);
    }
}

impl JpegFile {
    /// Reads the frame header of the JPEG at `path`: fails now when the file is missing,
    /// a folder, not a JPEG or too large; a corrupt or truncated body fails at the bake.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let file = open_input(path)?;
        let (width, height, components) = frame_size(&mut BufReader::new(file)).map_err(|e| match e {
            Header::Cut => SourceError::Truncated {
                path: path.to_path_buf(),
                reason: "the file ends before the frame header".into(),
            },
            Header::Bad(reason) => SourceError::Decode { path: path.to_path_buf(), reason },
        })?;
        check_size(path, width, height)?;
        Ok(Self {
            path: path.to_path_buf(),
            width,
            height,
            channels: if components == 1 { 1 } else { 3 },
            keep_in_memory: IN_MEMORY_BYTES,
            pixels: OnceLock::new(),
        })
    }

    /// The JPEG file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decoded pixels, decoding them on the first call.
    fn pixels(&self) -> std::io::Result<&Pixels> {
        match self.pixels.get_or_init(|| self.decode().map_err(|e| e.to_string())) {
            Ok(pixels) => Ok(pixels),
            Err(message) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message.clone())),
        }
    }

    fn decode(&self) -> Result<Pixels, SourceError> {
        use image::ImageDecoder as _;
        let _one = DECODING.lock().unwrap_or_else(PoisonError::into_inner);
        let p = self.path.clone();
        let (width, height) = (self.width, self.height);
        let limit = memory_limit();
        let file_bytes = check_input(&p)?.len();
        // Refused before anything is read: the file and the pixels its frame header promises.
        let promised = file_bytes + u64::from(width) * u64::from(height) * self.channels;
        if promised > limit {
            return Err(SourceError::OverMemory { path: p, width, height, needed: promised, limit });
        }
        let bytes = read_input(&p, limit)?;
        // The decoder fills a cut file with grey and says nothing: find it here.
        jpeg_complete(&bytes).map_err(|reason| SourceError::Truncated { path: p.clone(), reason })?;
        // The decoder copies the bytes and drops these.
        let mut decoder = image::codecs::jpeg::JpegDecoder::new(std::io::Cursor::new(bytes))
            .map_err(|e| classify(&p, e))?;
        if decoder.dimensions() != (width, height) {
            let (w, h) = decoder.dimensions();
            let reason = format!("the frame header says {width}x{height}, the decoder {w}x{h}");
            return Err(SourceError::Decode { path: p, reason });
        }
        let channels = match decoder.color_type() {
            image::ColorType::L8 => 1,
            image::ColorType::La8 => 2,
            image::ColorType::Rgb8 => 3,
            image::ColorType::Rgba8 => 4,
            other => {
                return Err(SourceError::Unsupported {
                    path: p,
                    reason: format!("JPEG decoded to {other:?}"),
                });
            }
        };
        let native = decoder.total_bytes();
        let needed = file_bytes + native;
        if needed > limit {
            return Err(SourceError::OverMemory { path: p, width, height, needed, limit });
        }
        let mut limits = image::Limits::default();
        limits.max_alloc = Some(limit);
        decoder.set_limits(limits).map_err(|e| classify(&p, e))?;
        let mut pixels = vec![0u8; native as usize];
        decoder.read_image(&mut pixels).map_err(|e| match e {
            image::ImageError::Limits(_) => {
                SourceError::OverMemory { path: p.clone(), width, height, needed, limit }
            }
            e => classify(&p, e),
        })?;
        let layout = Layout { channels, sixteen: false };
        let held = IN_MEMORY.fetch_add(native, Ordering::Relaxed) + native;
        if native <= self.keep_in_memory && held <= IN_MEMORY_BYTES {
            return Ok(Pixels { layout, store: Store::Memory(Held(pixels)) });
        }
        IN_MEMORY.fetch_sub(native, Ordering::Relaxed);
        let file = spill(&pixels).map_err(|e| SourceError::Io {
            path: p,
            source: std::io::Error::new(
                e.kind(),
                format!(
                    "writing its decoded pixels to a scratch file in {}: {e}",
                    std::env::temp_dir().display()
                ),
            ),
        })?;
        Ok(Pixels { layout, store: Store::File(file) })
    }
}

/// Writes `bytes` to a new file in the temporary folder that is deleted at once: it lives
/// as long as the returned handle, and nothing is left behind by a killed process.
fn spill(bytes: &[u8]) -> std::io::Result<File> {
    let seq = SPILL_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = temp_files::temp_name(SPILL_PREFIX, &format!("-{seq}"));
    let path = TempPath::new(std::env::temp_dir().join(name));
    let mut file = File::options().read(true).write(true).create_new(true).open(path.path())?;
    drop(path);
    file.write_all(bytes)?;
    Ok(file)
}

impl RowSource for JpegFile {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row_texels = self.width as usize;
        let rows = out.len() / (row_texels * TEXEL_BYTES);
        if !out.len().is_multiple_of(row_texels * TEXEL_BYTES) || y0 as usize + rows > self.height as usize {
            return Err(out_of_range(y0));
        }
        let pixels = self.pixels()?;
        let row_bytes = row_texels * pixels.layout.texel_bytes();
        let (start, len) = (y0 as usize * row_bytes, rows * row_bytes);
        match &pixels.store {
            Store::Memory(Held(v)) => {
                let src = v.get(start..start + len).ok_or_else(|| out_of_range(y0))?;
                rgba::expand(pixels.layout, src, out);
            }
            Store::File(file) => {
                let mut src = vec![0u8; len];
                file.read_exact_at(&mut src, start as u64)?;
                rgba::expand(pixels.layout, &src, out);
            }
        }
        Ok(())
    }

    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::File(self.path.clone()))
    }
}

/// Why a JPEG's frame header could not be read.
enum Header {
    /// The file ends first.
    Cut,
    /// The bytes are not a JPEG's.
    Bad(String),
}

/// Width, height and number of components from a JPEG's frame header (SOF), reading only
/// the segments before it.
fn frame_size(r: &mut impl Read) -> Result<(u32, u32, u8), Header> {
    let byte = |r: &mut dyn Read| {
        let mut b = [0u8];
        r.read_exact(&mut b).map(|()| b[0]).map_err(|_| Header::Cut)
    };
    if (byte(r)?, byte(r)?) != (0xFF, 0xD8) {
        return Err(Header::Bad("no start-of-image marker".into()));
    }
    loop {
        if byte(r)? != 0xFF {
            return Err(Header::Bad("no marker where a segment begins".into()));
        }
        let mut marker = byte(r)?;
        while marker == 0xFF {
            marker = byte(r)?;
        }
        match marker {
            0x01 | 0xD0..=0xD8 => continue,
            0xD9 | 0xDA => return Err(Header::Bad("no frame header before the image data".into())),
            _ => {}
        }
        let len = u16::from_be_bytes([byte(r)?, byte(r)?]);
        if len < 2 {
            return Err(Header::Bad(format!("a segment of length {len}")));
        }
        if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
            let mut sof = [0u8; 6];
            r.read_exact(&mut sof).map_err(|_| Header::Cut)?;
            let height = u32::from(u16::from_be_bytes([sof[1], sof[2]]));
            let width = u32::from(u16::from_be_bytes([sof[3], sof[4]]));
            return Ok((width, height, sof[5]));
        }
        let skip = u64::from(len - 2);
        if std::io::copy(&mut r.by_ref().take(skip), &mut std::io::sink()).map_err(|_| Header::Cut)? != skip {
            return Err(Header::Cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bake::source::ImageSource;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Smooth colour with some noise, `w × h` RGB.
    fn photo(w: u32, h: u32) -> image::RgbImage {
        let mut s = 0x9e37_79b9u32;
        image::RgbImage::from_fn(w, h, |x, y| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            image::Rgb([(x / 80) as u8, (y * 3) as u8, (s & 63) as u8 + ((x + y) % 128) as u8])
        })
    }

    fn save(path: &Path, image: &image::DynamicImage) {
        let mut out = std::io::BufWriter::new(File::create(path).unwrap());
        image.write_with_encoder(image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)).unwrap();
    }

    fn read_all(src: &dyn RowSource) -> Vec<u8> {
        let (w, h) = src.size();
        let mut all = vec![0u8; (w * h * 4) as usize];
        let band = (w * 4 * 10) as usize;
        for (i, rows) in all.chunks_mut(band).enumerate() {
            src.read_rows(i as u32 * 10, rows).unwrap();
        }
        all
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_jpeg_wider_than_16384_decodes_like_the_whole_decode() {
        let dir = tempfile::tempdir().unwrap();
        let wide = dir.path().join("wide.jpg");
        save(&wide, &image::DynamicImage::ImageRgb8(photo(20000, 64)));
        let src = JpegFile::open(&wide).unwrap();
        assert_eq!(src.size(), (20000, 64));
        assert_eq!(read_all(&src), ImageSource::open(&wide).unwrap().texels());
        let Ok(Pixels { layout, store: Store::Memory(_) }) = src.pixels() else { panic!("kept in memory") };
        assert_eq!(*layout, Layout { channels: 3, sixteen: false });
        // Grey stays one byte a texel until it is read.
        let grey = dir.path().join("grey.jpg");
        save(
            &grey,
            &image::DynamicImage::ImageLuma8(image::DynamicImage::ImageRgb8(photo(300, 70)).to_luma8()),
        );
        let src = JpegFile::open(&grey).unwrap();
        assert_eq!(read_all(&src), ImageSource::open(&grey).unwrap().texels());
        assert_eq!(src.pixels().unwrap().layout.channels, 1);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn pixels_over_the_memory_budget_are_read_back_from_an_unnamed_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("photo.jpg");
        save(&path, &image::DynamicImage::ImageRgb8(photo(333, 77)));
        let mut src = JpegFile::open(&path).unwrap();
        src.keep_in_memory = 0;
        assert_eq!(read_all(&src), ImageSource::open(&path).unwrap().texels());
        assert!(matches!(src.pixels().unwrap().store, Store::File(_)));
        // A band in the middle, read twice.
        let mut band = vec![0u8; 333 * 4 * 5];
        src.read_rows(70, &mut band).unwrap();
        let whole = ImageSource::open(&path).unwrap();
        assert_eq!(band, whole.texels()[70 * 333 * 4..75 * 333 * 4]);
        assert!(src.read_rows(73, &mut band).is_err(), "past the last row");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_cut_jpeg_fails_at_the_first_read_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("photo.jpg");
        save(&path, &image::DynamicImage::ImageRgb8(photo(256, 192)));
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut-photo.jpg");
        std::fs::write(&cut, &bytes[..bytes.len() * 3 / 4]).unwrap();
        let src = JpegFile::open(&cut).unwrap();
        let mut out = vec![0u8; 256 * 4];
        let err = src.read_rows(0, &mut out).expect_err("a cut JPEG must not read");
        assert!(err.to_string().contains("cut-photo.jpg") && err.to_string().contains("truncated"), "{err}");
        // Cut inside the header: refused at open.
        std::fs::write(&cut, &bytes[..12]).unwrap();
        let err = JpegFile::open(&cut).err().expect("no frame header");
        assert!(err.to_string().contains("cut-photo.jpg"), "{err}");
    }
}
