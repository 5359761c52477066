//! A PNG file decoded row by row as a bake asks for its rows, so that an image larger
//! than memory bakes while only a few hundred of its rows are held.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::bake::rgba::{self, Layout};
use crate::bake::source::{
    RowSource, SourceError, SourceOrigin, TEXEL_BYTES, check_size, memory_limit, open_input, out_of_range,
};

/// Rows the ring of decoded rows holds at least: two bands of the default tile (128
/// payload rows and 4 border rows on each side). It grows to the largest band asked.
pub const RING_ROWS: u32 = 2 * (128 + 2 * 4);

/// Rows kept at each end of the image once decoded: the rows a repeating layer's
/// borders wrap around to, so that they are not decoded again.
pub const EDGE_ROWS: u32 = 64;

/// Bytes of the file read ahead of the decoder.
const READ_AHEAD: usize = 256 << 10;

/// A non-interlaced PNG file read row by row: only its header is read when opened;
/// rows are decoded in order as they are asked for and kept in a ring, so consecutive
/// overlapping bands decode each row once. A row from before the ring restarts the
/// decode from the top of the file; the first and last [`EDGE_ROWS`] rows stay once
/// decoded. Texels equal those of a whole decode ([`ImageSource::open`](crate::bake::source::ImageSource::open)).
pub struct PngRows {
    path: PathBuf,
    width: u32,
    height: u32,
    state: Mutex<State>,
}

/// What the decode has reached, behind the source's lock.
struct State {
    /// The decoder, positioned at row `next`; `None` before the first read, after the
    /// last row and after an error.
    decoder: Option<Decoder>,
    /// Rows `first..next`, row `y` at slot `y % ring_rows`.
    ring: Vec<u8>,
    ring_rows: u32,
    first: u32,
    next: u32,
    /// Rows `0..` as far as decoded, up to [`EDGE_ROWS`].
    head: Vec<u8>,
    /// Rows `height - EDGE_ROWS..` as far as decoded.
    tail: Vec<u8>,
    /// The most bytes of rows held at once.
    peak: usize,
    /// Decodes started from the top of the file.
    decodes: u32,
}

/// The `png` reader and the layout of the rows it gives.
struct Decoder {
    reader: png::Reader<BufReader<File>>,
    layout: Layout,
}

impl PngRows {
    /// Reads the header of the PNG at `path` and checks its size against the engine's
    /// limits: `Ok(None)` when it is interlaced (Adam7 rows cannot be read in order: decode
    /// it whole). A corrupt or truncated body fails when its rows are read.
    pub fn open(path: impl AsRef<Path>) -> Result<Option<Self>, SourceError> {
        let path = path.as_ref();
        let p = path.to_path_buf();
        let mut file = open_input(path)?;
        // The `png` decoder panics on some palettes: refuse those before decoding.
        palette_valid(&mut file).map_err(|reason| SourceError::Decode { path: p.clone(), reason })?;
        file.rewind().map_err(|source| SourceError::Io { path: p.clone(), source })?;
        let decoder = start(path, file)?;
        let info = decoder.reader.info();
        let (width, height, interlaced) = (info.width, info.height, info.interlaced);
        check_size(path, width, height)?;
        if interlaced {
            return Ok(None);
        }
        let row_bytes = u64::from(width) * TEXEL_BYTES as u64;
        let needed = u64::from(RING_ROWS + 2 * EDGE_ROWS) * row_bytes;
        if needed > memory_limit() {
            return Err(SourceError::OverMemory { path: p, width, height, needed, limit: memory_limit() });
        }
        let state = State {
            decoder: None,
            ring: Vec::new(),
            ring_rows: 0,
            first: 0,
            next: 0,
            head: Vec::new(),
            tail: Vec::new(),
            peak: 0,
            decodes: 0,
        };
        Ok(Some(Self { path: p, width, height, state: Mutex::new(state) }))
    }

    /// The PNG file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The most bytes of decoded rows this source has held at once (ring and edge rows).
    pub fn peak_held_bytes(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).peak
    }

    /// How many times the decode has started from the top of the file.
    pub fn decodes(&self) -> u32 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).decodes
    }

    fn row_bytes(&self) -> usize {
        self.width as usize * TEXEL_BYTES
    }

    /// A read error naming the file.
    fn read_error(&self, e: png::DecodingError) -> std::io::Error {
        let kind = match &e {
            png::DecodingError::IoError(io) => io.kind(),
            _ => std::io::ErrorKind::InvalidData,
        };
        let path = self.path.clone();
        let source = match e {
            png::DecodingError::IoError(io) if io.kind() != std::io::ErrorKind::UnexpectedEof => {
                SourceError::Io { path, source: io }
            }
            e => SourceError::Truncated { path, reason: e.to_string() },
        };
        std::io::Error::new(kind, source)
    }

    /// A row the decoder did not give: the image data ended early.
    fn cut_short(&self, y: u32) -> std::io::Error {
        let reason = format!("the image data ends before row {y} of {}", self.height);
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            SourceError::Truncated { path: self.path.clone(), reason },
        )
    }
}

impl State {
    /// Row `y` if it is held: in the ring or among the edge rows.
    fn held(&self, y: u32, height: u32, row_bytes: usize) -> Option<&[u8]> {
        fn at(rows: &[u8], i: usize, row_bytes: usize) -> Option<&[u8]> {
            rows.get(i * row_bytes..(i + 1) * row_bytes)
        }
        if (self.first..self.next).contains(&y) {
            let slot = (y % self.ring_rows) as usize;
            return at(&self.ring, slot, row_bytes);
        }
        let tail_start = height - EDGE_ROWS.min(height);
        at(&self.head, y as usize, row_bytes)
            .or_else(|| y.checked_sub(tail_start).and_then(|i| at(&self.tail, i as usize, row_bytes)))
    }

    /// Makes the ring hold at least `rows` rows, keeping those it holds.
    fn reserve(&mut self, rows: u32, row_bytes: usize) {
        let want = rows.max(RING_ROWS);
        if want <= self.ring_rows {
            return;
        }
        let mut ring = vec![0u8; want as usize * row_bytes];
        for y in self.first..self.next {
            let (from, to) = ((y % self.ring_rows) as usize * row_bytes, (y % want) as usize * row_bytes);
            ring[to..to + row_bytes].copy_from_slice(&self.ring[from..from + row_bytes]);
        }
        self.ring = ring;
        self.ring_rows = want;
        self.note_held();
    }

    fn note_held(&mut self) {
        self.peak = self.peak.max(self.ring.len() + self.head.len() + self.tail.len());
    }

    /// Decodes rows until row `y` is in the ring, from the top of the file when `y` is
    /// behind the decoder.
    fn decode_to(&mut self, src: &PngRows, y: u32) -> std::io::Result<()> {
        if y < self.first || self.decoder.is_none() {
            let file = File::open(&src.path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", src.path.display())))?;
            let decoder = start(&src.path, file)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            self.decoder = Some(decoder);
            self.first = 0;
            self.next = 0;
            self.decodes += 1;
        }
        let row_bytes = src.row_bytes();
        let tail_start = src.height - EDGE_ROWS.min(src.height);
        while self.next <= y {
            let Some(decoder) = self.decoder.as_mut() else { return Err(src.cut_short(self.next)) };
            let layout = decoder.layout;
            let row = match decoder.reader.next_row() {
                Ok(Some(row)) => row,
                Ok(None) => {
                    self.decoder = None;
                    return Err(src.cut_short(self.next));
                }
                Err(e) => {
                    self.decoder = None;
                    return Err(src.read_error(e));
                }
            };
            let data = row.data();
            if data.len() != src.width as usize * layout.texel_bytes() {
                self.decoder = None;
                return Err(src.cut_short(self.next));
            }
            let n = self.next;
            let slot = (n % self.ring_rows) as usize * row_bytes;
            let dst = &mut self.ring[slot..slot + row_bytes];
            rgba::expand(layout, data, dst);
            if n < EDGE_ROWS && self.head.len() == n as usize * row_bytes {
                self.head.extend_from_slice(dst);
            }
            if n >= tail_start && self.tail.len() == (n - tail_start) as usize * row_bytes {
                self.tail.extend_from_slice(dst);
            }
            self.next += 1;
            self.first = self.first.max(self.next.saturating_sub(self.ring_rows));
            if self.next == src.height {
                // The last row: the reader and its buffers are no longer needed.
                self.decoder = None;
            }
        }
        self.note_held();
        Ok(())
    }
}

impl RowSource for PngRows {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row_bytes = self.row_bytes();
        let rows = out.len() / row_bytes;
        if !out.len().is_multiple_of(row_bytes) || y0 as usize + rows > self.height as usize {
            return Err(out_of_range(y0));
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.reserve(rows as u32, row_bytes);
        for (y, dst) in (y0..).zip(out.chunks_exact_mut(row_bytes)) {
            if state.held(y, self.height, row_bytes).is_none() {
                state.decode_to(self, y)?;
            }
            let row = state.held(y, self.height, row_bytes).ok_or_else(|| self.cut_short(y))?;
            dst.copy_from_slice(row);
        }
        Ok(())
    }

    fn origin(&self) -> Option<SourceOrigin> {
        Some(SourceOrigin::File(self.path.clone()))
    }
}

/// A `png` reader at the first row of the PNG in `file` (named `path` in errors), set to
/// widen every colour type and bit depth to 8- or 16-bit grey, grey + alpha, RGB or RGBA,
/// as `image`'s PNG decoder does.
fn start(path: &Path, file: File) -> Result<Decoder, SourceError> {
    let p = path.to_path_buf();
    let limits = png::Limits { bytes: usize::try_from(memory_limit()).unwrap_or(usize::MAX) };
    let mut decoder = png::Decoder::new_with_limits(BufReader::with_capacity(READ_AHEAD, file), limits);
    decoder.set_transformations(png::Transformations::EXPAND);
    let reader = decoder.read_info().map_err(|e| match e {
        png::DecodingError::IoError(source) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            SourceError::Truncated { path: p.clone(), reason: source.to_string() }
        }
        png::DecodingError::IoError(source) => SourceError::Io { path: p.clone(), source },
        e => SourceError::Decode { path: p.clone(), reason: e.to_string() },
    })?;
    let (color, depth) = reader.output_color_type();
    let channels = match color {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => 0,
    };
    let sixteen = match depth {
        png::BitDepth::Eight => false,
        png::BitDepth::Sixteen => true,
        _ => {
            return Err(SourceError::Unsupported { path: p, reason: format!("{color:?} at {depth:?} bits") });
        }
    };
    if channels == 0 {
        return Err(SourceError::Unsupported { path: p, reason: "palette left unexpanded".into() });
    }
    Ok(Decoder { reader, layout: Layout { channels, sixteen } })
}

/// Whether a PNG's palette chunk, if any, holds whole RGB entries, 1 to 256 of them. The
/// `png` decoder (0.18) panics expanding a palette of another length (found by fuzzing,
/// `engine/core/tests/fuzz/image/`), so such a file is refused before it is decoded.
/// Only the chunk headers are read; a file cut short is left to the decoder to report.
pub(crate) fn palette_valid(r: &mut (impl Read + Seek)) -> Result<(), String> {
    let mut head = [0u8; 8];
    let mut at = r.seek(SeekFrom::Start(8)).ok();
    while at.is_some() && r.read_exact(&mut head).is_ok() {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        match &head[4..8] {
            b"PLTE" if len == 0 || !len.is_multiple_of(3) || len > 3 * 256 => {
                return Err(format!("palette chunk of {len} bytes (not 1 to 256 RGB entries)"));
            }
            b"IEND" => break,
            _ => {}
        }
        // Past the data and the CRC.
        at = r.seek(SeekFrom::Current(i64::from(len) + 4)).ok();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::bake::source::ImageSource;

    /// Deterministic noise.
    fn noise(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 8) as u8
            })
            .collect()
    }

    /// Writes a `w × h` PNG of `color` and `depth` from raw (packed, filter-less) rows.
    fn write_png(path: &Path, w: u32, h: u32, color: png::ColorType, depth: png::BitDepth, trns: bool) {
        let bits = depth as usize * color.samples();
        let row = (w as usize * bits).div_ceil(8);
        let data = noise(row * h as usize, w ^ (bits as u32) << 8 ^ u32::from(trns));
        let mut enc = png::Encoder::new(std::io::BufWriter::new(File::create(path).unwrap()), w, h);
        enc.set_color(color);
        enc.set_depth(depth);
        if color == png::ColorType::Indexed {
            enc.set_palette(noise(3 << depth as usize, 7));
        }
        if trns {
            // The first texel's value, so that the transparent colour occurs.
            let t = match color {
                png::ColorType::Indexed => noise(1 << depth as usize, 9),
                _ => data[..(bits / 8).max(1)].to_vec(),
            };
            enc.set_trns(t);
        }
        let mut writer = enc.write_header().unwrap();
        writer.write_image_data(&data).unwrap();
        writer.finish().unwrap();
    }

    /// Every row of `src`, read in overlapping bands of `band` rows.
    fn read_all(src: &dyn RowSource, band: u32) -> Vec<u8> {
        let (w, h) = src.size();
        let row = w as usize * 4;
        let mut all = vec![0u8; row * h as usize];
        let mut y = 0;
        while y < h {
            let n = band.min(h - y);
            src.read_rows(y, &mut all[y as usize * row..(y + n) as usize * row]).unwrap();
            y += n.saturating_sub(3).max(1);
        }
        all
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn rows_equal_a_whole_decode_for_every_colour_type_and_depth() {
        use png::BitDepth::*;
        use png::ColorType::*;
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (Grayscale, One, false),
            (Grayscale, Two, false),
            (Grayscale, Four, true),
            (Grayscale, Eight, false),
            (Grayscale, Eight, true),
            (Grayscale, Sixteen, false),
            (Grayscale, Sixteen, true),
            (GrayscaleAlpha, Eight, false),
            (GrayscaleAlpha, Sixteen, false),
            (Rgb, Eight, false),
            (Rgb, Eight, true),
            (Rgb, Sixteen, false),
            (Rgb, Sixteen, true),
            (Rgba, Eight, false),
            (Rgba, Sixteen, false),
            (Indexed, One, false),
            (Indexed, Two, true),
            (Indexed, Four, false),
            (Indexed, Eight, false),
            (Indexed, Eight, true),
        ];
        for (color, depth, trns) in cases {
            let path = dir.path().join(format!("{color:?}-{depth:?}-{trns}.png"));
            write_png(&path, 37, 50, color, depth, trns);
            let rows = PngRows::open(&path).unwrap().expect("not interlaced");
            let whole = ImageSource::open(&path).unwrap();
            assert_eq!(rows.size(), (37, 50));
            assert_eq!(read_all(&rows, 7), whole.texels(), "{color:?} {depth:?} tRNS {trns}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn rows_behind_the_ring_restart_the_decode_and_the_edges_stay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tall.png");
        let h = RING_ROWS + 2 * EDGE_ROWS + 300;
        write_png(&path, 5, h, png::ColorType::Rgb, png::BitDepth::Eight, false);
        let whole = ImageSource::open(&path).unwrap();
        let rows = PngRows::open(&path).unwrap().unwrap();
        let row = |y: u32| &whole.texels()[y as usize * 20..(y as usize + 1) * 20];
        let check = |y0: u32, n: u32| {
            let mut out = vec![0u8; n as usize * 20];
            rows.read_rows(y0, &mut out).unwrap();
            for i in 0..n {
                assert_eq!(&out[i as usize * 20..(i as usize + 1) * 20], row(y0 + i), "row {}", y0 + i);
            }
        };
        // A repeating layer's first band: its top rows, then the last rows above them.
        check(0, 132);
        check(h - 4, 4);
        assert_eq!(rows.decodes(), 1);
        // The next band lies behind the ring, at the bottom now: one restart.
        let mut y = 124;
        while y + 136 < h {
            check(y, 136);
            y += 128;
        }
        check(y, h - y);
        // The last band's wrap to the top, and the bottom again, are held.
        check(0, 4);
        check(h - EDGE_ROWS, EDGE_ROWS);
        assert_eq!(rows.decodes(), 2);
        assert!(rows.read_rows(h - 1, &mut [0u8; 40]).is_err(), "past the last row");
        // A band larger than the ring grows it.
        check(0, h);
        assert!(rows.peak_held_bytes() >= h as usize * 20);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_cut_png_fails_naming_the_file_and_a_bad_palette_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.png");
        write_png(&path, 256, 192, png::ColorType::Rgb, png::BitDepth::Eight, false);
        let bytes = std::fs::read(&path).unwrap();
        for fraction in [0.5, 0.99] {
            let cut = dir.path().join(format!("cut-{fraction}.png"));
            std::fs::write(&cut, &bytes[..(bytes.len() as f64 * fraction) as usize]).unwrap();
            let rows = PngRows::open(&cut).unwrap().unwrap();
            let mut out = vec![0u8; 256 * 4 * 192];
            let err = rows.read_rows(0, &mut out).expect_err("a cut PNG must not read");
            assert!(err.to_string().contains(&*cut.to_string_lossy()), "{err}");
            assert!(err.to_string().contains("truncated or corrupt"), "{err}");
            // Asked again, it fails again (the decode restarts, finds the same end).
            assert!(rows.read_rows(0, &mut out).is_err());
        }
        // A palette of 4 bytes: refused at open, before the decoder sees it.
        let pal = dir.path().join("pal.png");
        write_png(&pal, 8, 8, png::ColorType::Indexed, png::BitDepth::Eight, false);
        let mut b = std::fs::read(&pal).unwrap();
        let at = b.windows(4).position(|w| w == b"PLTE").unwrap() - 4;
        b[at..at + 4].copy_from_slice(&4u32.to_be_bytes());
        std::fs::write(&pal, &b).unwrap();
        let err = PngRows::open(&pal).err().expect("a bad palette is refused");
        assert!(err.to_string().contains("pal.png") && err.to_string().contains("palette"), "{err}");
    }

    use crate::fuzz::seeds::png_chunk as chunk;

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn an_interlaced_png_is_left_to_the_whole_decode() {
        let (w, h) = (13u32, 11u32);
        let rgb = noise((w * h * 3) as usize, 3);
        // Adam7 passes, each row unfiltered, in one stored (uncompressed) deflate block.
        let mut raw = Vec::new();
        for (x0, y0, dx, dy) in
            [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        {
            for y in (y0..h).step_by(dy) {
                if x0 >= w {
                    continue;
                }
                raw.push(0);
                for x in (x0..w).step_by(dx) {
                    let i = ((y * w + x) * 3) as usize;
                    raw.extend_from_slice(&rgb[i..i + 3]);
                }
            }
        }
        let mut zlib = vec![0x78, 0x01, 0x01];
        zlib.extend_from_slice(&(raw.len() as u16).to_le_bytes());
        zlib.extend_from_slice(&(!(raw.len() as u16)).to_le_bytes());
        zlib.extend_from_slice(&raw);
        let (mut a, mut b) = (1u32, 0u32);
        for &v in &raw {
            a = (a + u32::from(v)) % 65521;
            b = (b + a) % 65521;
        }
        zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
        let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 1]);
        chunk(&mut png, b"IHDR", &ihdr);
        chunk(&mut png, b"IDAT", &zlib);
        chunk(&mut png, b"IEND", &[]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("adam7.png");
        std::fs::write(&path, png).unwrap();
        assert!(PngRows::open(&path).unwrap().is_none(), "Adam7 is not read row by row");
        let source = crate::bake::open::open_image(&path).unwrap();
        let want: Vec<u8> = rgb.chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect();
        assert_eq!(read_all(source.as_ref(), 5), want);
    }

    /// The image fuzz seeds (PNG and JPEG of every kind), the committed crashers and
    /// damaged copies, read through [`open_image`](crate::bake::open::open_image): errors
    /// or texels, never a panic; and the texels of a seed the whole decode's.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn fuzz_inputs_read_row_by_row_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let crashers = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/image"))
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                (path.display().to_string(), std::fs::read(path).unwrap())
            });
        // TIFF, DDS and KTX2 seeds have no whole decode to compare with (`fuzz::image` reads them).
        let seeds = crate::fuzz::seeds::seeds(crate::fuzz::Target::Image).unwrap();
        let seeds = seeds.into_iter().filter(|(name, _)| {
            !name.ends_with(".tif") && !name.ends_with(".dds") && !name.ends_with(".ktx2")
        });
        for (name, bytes) in seeds.chain(crashers) {
            let mut flipped = bytes.clone();
            flipped.iter_mut().enumerate().skip(1).filter(|(i, _)| i % 97 == 0).for_each(|(_, b)| *b ^= 0x5a);
            let half = bytes[..bytes.len() / 2].to_vec();
            for (what, input) in [("whole", bytes), ("flipped", flipped), ("half", half)] {
                let path = dir.path().join("input");
                std::fs::write(&path, &input).unwrap();
                let Ok(source) = crate::bake::open::open_image(&path) else { continue };
                let (w, h) = source.size();
                let len = w as usize * h as usize * 4;
                if len > 64 << 20 {
                    continue;
                }
                let mut texels = vec![0u8; len];
                let read = source.read_rows(0, &mut texels);
                // Where the whole decode reads the file too, both give the same texels.
                if what == "whole"
                    && let Ok(img) = ImageSource::open(&path)
                {
                    read.unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(texels, img.texels(), "{name}");
                }
            }
        }
    }

    /// Forwards to a shared [`PngRows`], so the test can look at it after the bake.
    struct Shared(Arc<PngRows>);

    impl RowSource for Shared {
        fn size(&self) -> (u32, u32) {
            self.0.size()
        }
        fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
            self.0.read_rows(y0, out)
        }
    }

    /// A bake of a large PNG holds the ring and the edge rows, never the image.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_bake_holds_a_ring_of_rows_not_the_image() {
        let (w, h) = (8192u32, 4096u32);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.png");
        let mut enc = png::Encoder::new(std::io::BufWriter::new(File::create(&path).unwrap()), w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_compression(png::Compression::Fast);
        let mut writer = enc.write_header().unwrap();
        let mut stream = writer.stream_writer().unwrap();
        let mut row = vec![0u8; w as usize * 3];
        for y in 0..h {
            for (x, px) in row.chunks_exact_mut(3).enumerate() {
                px.copy_from_slice(&[(x >> 5) as u8, (y >> 4) as u8, ((x + y as usize) >> 6) as u8]);
            }
            std::io::Write::write_all(&mut stream, &row).unwrap();
        }
        stream.finish().unwrap();
        drop(writer);
        let rows = Arc::new(PngRows::open(&path).unwrap().unwrap());
        let out = dir.path().join("big.tsa");
        let input = crate::bake::BakeInput::new("big", Shared(rows.clone()));
        let opts = crate::bake::BakeOptions { codec: crate::format::codec::Codec::Lz4, ..Default::default() };
        crate::bake::bake(vec![input], &out, &opts, &crate::progress::NoProgress).unwrap();
        let row_bytes = w as usize * TEXEL_BYTES;
        let bound = (RING_ROWS + 2 * EDGE_ROWS) as usize * row_bytes;
        let image = row_bytes * h as usize;
        let held = rows.peak_held_bytes();
        assert!(held <= bound && held * 8 < image, "held {held} bytes, ring bound {bound}, image {image}");
        assert_eq!(rows.decodes(), 1);
        let atlas = crate::format::atlas::Atlas::open(&out).unwrap();
        assert_eq!((atlas.layers()[0].layout.width(), atlas.layers()[0].layout.height()), (w, h));
    }
}
