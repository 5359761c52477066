//! A TIFF's bytes read from wherever they are: a local file, or an object on a server read
//! by range (a Cloud Optimized GeoTIFF streamed without a bake). The `tiff` crate wants
//! `Read + Seek`; [`TiffReader`] gives it that over positioned reads, serving its many
//! small reads of image directories and tag arrays from blocks fetched once and shared by
//! every reader of the same file, and a chunk's compressed bytes from one read of the
//! whole chunk ([`TiffReader::prefetch`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, ErrorKind, Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex, PoisonError};

/// Positioned reads of one file or object. Implemented by local files and by the atlas
/// reader's stores (remote objects); errors are I/O errors, a network failure among them
/// marked with [`Unavailable`].
pub trait TiffBytes: Send + Sync {
    /// The length in bytes.
    fn len(&self) -> u64;

    /// Whether it holds no bytes at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`; an error when they do not all exist.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// [`TiffBytes::read_at`] of one chunk's compressed bytes: a source that counts what
    /// it reads (a remote object's statistics) counts them as one tile's blob.
    fn read_chunk_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_at(buf, offset)
    }
}

/// The error inside an [`io::Error`] for bytes that a later read may get: a network or
/// server failure after retries. [`is_unavailable`] tells it from a damaged file.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unavailable {}

/// Whether `e` (or an error it wraps) is an [`Unavailable`] read.
pub fn is_unavailable(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Unavailable>())
}

impl TiffBytes for File {
    fn len(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        crate::local_file::FileExt::read_exact_at(self, buf, offset)
    }
}

/// Bytes of a file's directories and tag arrays, fetched in aligned blocks and kept for
/// every reader of the file (each level of a streamed COG has its own decoders, all
/// reading the same image directories).
pub struct BlockCache {
    src: Arc<dyn TiffBytes>,
    len: u64,
    blocks: Mutex<Blocks>,
}

#[derive(Default)]
struct Blocks {
    map: HashMap<u64, (Arc<[u8]>, u64)>,
    bytes: usize,
    tick: u64,
}

/// Bytes per block of [`BlockCache`]: large enough that a directory and its tag arrays
/// take a request or two, small enough that a chunk read past them costs little.
pub const BLOCK_BYTES: u64 = 64 * 1024;

/// Most bytes a [`BlockCache`] keeps; the least recently used blocks go first.
const CACHE_BYTES: usize = 16 << 20;

impl BlockCache {
    /// A cache over `src`.
    pub fn new(src: Arc<dyn TiffBytes>) -> Arc<Self> {
        let len = src.len();
        Arc::new(Self { src, len, blocks: Mutex::new(Blocks::default()) })
    }

    /// The source's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the source is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The source read through.
    pub fn source(&self) -> &Arc<dyn TiffBytes> {
        &self.src
    }

    /// Block `k` (the last one may be short), fetched when not held.
    fn block(&self, k: u64) -> io::Result<Arc<[u8]>> {
        {
            let mut b = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
            b.tick += 1;
            let tick = b.tick;
            if let Some((bytes, used)) = b.map.get_mut(&k) {
                *used = tick;
                return Ok(bytes.clone());
            }
        }
        let start = k * BLOCK_BYTES;
        let end = (start + BLOCK_BYTES).min(self.len);
        if start >= end {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("no byte {start} in {} bytes", self.len),
            ));
        }
        let mut buf = vec![0u8; (end - start) as usize];
        self.src.read_at(&mut buf, start)?;
        let bytes: Arc<[u8]> = buf.into();
        let mut b = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        b.tick += 1;
        let tick = b.tick;
        if b.map.insert(k, (bytes.clone(), tick)).is_none() {
            b.bytes += bytes.len();
        }
        while b.bytes > CACHE_BYTES && b.map.len() > 1 {
            let Some(oldest) = b.map.iter().min_by_key(|(_, (_, used))| *used).map(|(&k, _)| k) else {
                break;
            };
            if let Some((gone, _)) = b.map.remove(&oldest) {
                b.bytes -= gone.len();
            }
        }
        Ok(bytes)
    }

    /// Copies the bytes at `offset` into `buf` from cached blocks (fetching the missing
    /// ones); fewer than asked only at the end of the source.
    fn read_into(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            if at >= self.len {
                break;
            }
            let block = self.block(at / BLOCK_BYTES)?;
            let from = (at % BLOCK_BYTES) as usize;
            let Some(src) = block.get(from..) else { break };
            let n = src.len().min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&src[..n]);
            done += n;
        }
        Ok(done)
    }
}

/// `Read + Seek` for the `tiff` crate's decoder: over a local file directly, or over a
/// [`BlockCache`], where reads inside the prefetched range come from it and others from
/// the shared blocks.
pub struct TiffReader {
    via: Via,
    pos: u64,
    /// Bytes read ahead for a chunk: its first byte's offset and the bytes.
    ahead: Option<(u64, Vec<u8>)>,
}

/// Where a [`TiffReader`]'s bytes come from.
enum Via {
    /// A local file and its length: positioned reads, nothing cached (the OS does).
    File(File, u64),
    Cached(Arc<BlockCache>),
}

impl TiffReader {
    /// A reader at offset 0.
    pub fn new(cache: Arc<BlockCache>) -> Self {
        Self { via: Via::Cached(cache), pos: 0, ahead: None }
    }

    /// A reader of a local file: positioned reads of what the decoder asks for.
    pub fn of_file(file: File) -> Self {
        let len = TiffBytes::len(&file);
        Self { via: Via::File(file, len), pos: 0, ahead: None }
    }

    fn len(&self) -> u64 {
        match &self.via {
            Via::File(_, len) => *len,
            Via::Cached(c) => c.len(),
        }
    }

    /// Reads `len` bytes at `offset` at once (a chunk's compressed bytes: one request for
    /// a remote file), so that the decoder's reads of them need no further request. The
    /// bytes read ahead before are dropped; a read right after them finds the end of the
    /// file, so that no decoder reads past its chunk. A local file reads nothing ahead.
    pub fn prefetch(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.ahead = None;
        let Via::Cached(cache) = &self.via else { return Ok(()) };
        let end = offset.checked_add(len).filter(|&e| e <= cache.len()).ok_or_else(|| {
            io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("bytes {offset}..+{len} lie past the end of the file ({} bytes)", cache.len()),
            )
        })?;
        let mut buf = vec![0u8; (end - offset) as usize];
        cache.source().read_chunk_at(&mut buf, offset)?;
        self.ahead = Some((offset, buf));
        Ok(())
    }
}

impl Read for TiffReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((start, bytes)) = &self.ahead
            && self.pos >= *start
            && self.pos < start + bytes.len() as u64
        {
            let from = (self.pos - start) as usize;
            let n = (bytes.len() - from).min(buf.len());
            buf[..n].copy_from_slice(&bytes[from..from + n]);
            self.pos += n as u64;
            return Ok(n);
        }
        if let Some((start, bytes)) = &self.ahead
            && self.pos == start + bytes.len() as u64
        {
            // The end of a prefetched chunk: all a chunk's decoder may use (Deflate reads
            // on past its stream to fill a buffer, which would cost a request for nothing).
            return Ok(0);
        }
        let n = match &self.via {
            Via::File(file, len) => {
                let n = buf.len().min(len.saturating_sub(self.pos) as usize);
                TiffBytes::read_at(file, &mut buf[..n], self.pos)?;
                n
            }
            Via::Cached(cache) => cache.read_into(buf, self.pos)?,
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for TiffReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len().checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Bytes in memory that count the reads made of them.
    struct Counted(Vec<u8>, std::sync::atomic::AtomicU64);

    impl TiffBytes for Counted {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let src =
                self.0.get(offset as usize..offset as usize + buf.len()).ok_or(ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
    }

    #[test]
    fn reads_and_seeks_match_the_bytes_and_blocks_are_fetched_once() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let src = Arc::new(Counted(data.clone(), Default::default()));
        let cache = BlockCache::new(src.clone());
        let (mut a, mut b) = (TiffReader::new(cache.clone()), TiffReader::new(cache));
        for (at, len) in [(0u64, 10usize), (65_530, 20), (150_000, 50_000), (199_990, 100)] {
            for r in [&mut a, &mut b] {
                r.seek(SeekFrom::Start(at)).unwrap();
                let mut got = Vec::new();
                r.by_ref().take(len as u64).read_to_end(&mut got).unwrap();
                let end = (at as usize + len).min(data.len());
                assert_eq!(got, &data[at as usize..end], "{at}+{len}");
            }
        }
        // Blocks 0, 1, 2 and 3 (the last, short), each fetched by one reader only.
        assert_eq!(src.1.load(std::sync::atomic::Ordering::Relaxed), 4);
        a.prefetch(100_000, 1_000).unwrap();
        a.seek(SeekFrom::Start(100_500)).unwrap();
        let mut got = [0u8; 500];
        a.read_exact(&mut got).unwrap();
        assert_eq!(got[..], data[100_500..101_000]);
        // A chunk's decoder reads nothing past its bytes, even to fill a buffer.
        assert_eq!(a.read(&mut [0u8; 64]).unwrap(), 0);
        a.seek(SeekFrom::Start(101_100)).unwrap();
        a.read_exact(&mut got).unwrap();
        assert_eq!(got[..], data[101_100..101_600]);
        assert!(a.prefetch(199_999, 2).is_err(), "past the end");
        assert_eq!(a.seek(SeekFrom::End(-1)).unwrap(), 199_999);
        assert!(a.seek(SeekFrom::Current(-200_000)).is_err());
    }

    #[test]
    fn unavailable_reads_are_told_apart() {
        let e = io::Error::other(Unavailable("HTTP 503".into()));
        assert!(is_unavailable(&e));
        assert!(!is_unavailable(&io::Error::new(ErrorKind::InvalidData, "bad")));
    }
}
