//! A Cloud Optimized GeoTIFF (or any tiled TIFF with overviews) streamed as a virtual
//! texture without a bake: its full-resolution image and overviews are the mips, its
//! internal tiles are read by range when a virtual-texture tile needs them, decoded, and
//! assembled with their borders into pool tiles by the loader threads.
//!
//! - **Levels**: image directory 0 is mip 0; each reduced-resolution directory (the
//!   overviews, `NewSubfileType` bit 0) must be the next mip, `ceil(size / 2^k)` on both
//!   sides, as `gdaladdo` and GDAL's COG driver write them. Transparency masks
//!   (`NewSubfileType` bit 2) are skipped.
//! - **Mips past the coarsest overview** (a COG stops at about one internal tile) are
//!   built at open from that overview, read whole and halved with the bake's filter: the
//!   stated cost is one read of a level of at most [`MAX_BUILT_SIDE`]² texels. A TIFF
//!   whose smallest level is larger (no overviews) is refused: add overviews with
//!   `gdaladdo`, or bake it.
//! - **Decoded internal tiles are cached** ([`CHUNK_CACHE_BYTES`], least recently used
//!   out) and decoded once even when several loader threads ask at the same time, so a
//!   512² COG tile serves the sixteen 128² pool tiles (and the borders of their
//!   neighbours) it covers with one request.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::bake::edge;
use crate::bake::source::RowSource as _;
use crate::bake::source::TEXEL_BYTES;
use crate::bake::tiff::TiffSource;
use crate::bake::tiff::bytes::{BlockCache, TiffBytes, is_unavailable};
use crate::format::atlas::meta::LayerMeta;
use crate::format::atlas::{ColorSpace, Wrap};
use crate::format::tile::{TextureLayout, TileId};

/// Payload side of the virtual texture's tiles when a COG is streamed: the bake's default,
/// so a COG and its baked atlas share pool layouts.
pub const COG_TILE_SIZE: u32 = 128;

/// Border texels of those tiles (the bake's default).
pub const COG_BORDER: u32 = 4;

/// Largest side of the coarsest stored level from which the remaining mips are built at
/// open (read whole): 4096, one 64 MiB read at worst.
pub const MAX_BUILT_SIDE: u32 = 4096;

/// Bytes of decoded internal tiles kept (RGBA8).
pub const CHUNK_CACHE_BYTES: usize = 96 << 20;

/// Whether `head` (a file's first bytes) starts like a TIFF or BigTIFF.
pub fn is_tiff(head: &[u8]) -> bool {
    matches!(head.get(..4), Some(b"II*\0" | b"MM\0*" | b"II+\0" | b"MM\0+"))
}

/// Why a TIFF cannot be streamed unbaked.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot stream this TIFF without a bake: {reason}")]
pub struct CogError {
    /// The file or URL.
    pub path: PathBuf,
    /// What is wrong, and what to do.
    pub reason: String,
}

/// One stored level (image directory) of the TIFF.
struct Level {
    /// Image directory index in the file.
    image: usize,
    width: u32,
    height: u32,
    chunk: (u32, u32),
    /// Decoders of this directory, opened on first use; loader threads take them in turn.
    readers: Vec<OnceLock<Result<TiffSource, String>>>,
}

/// Counters of a streamed COG.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CogStats {
    /// Internal tiles decoded (each read with one request).
    pub chunks_decoded: u64,
    /// Internal tiles found decoded in the cache.
    pub chunk_hits: u64,
    /// Bytes of decoded internal tiles held.
    pub cached_bytes: u64,
}

type ChunkKey = (u8, u32, u32);
type ChunkSlot = Arc<OnceLock<Result<Arc<[u8]>, (bool, String)>>>;

#[derive(Default)]
struct ChunkCache {
    slots: HashMap<ChunkKey, (ChunkSlot, u64)>,
    bytes: usize,
    tick: u64,
}

/// A tiled TIFF whose levels serve a virtual texture's tiles; see the module docs.
pub struct Cog {
    location: PathBuf,
    cache: Arc<BlockCache>,
    layout: TextureLayout,
    color: ColorSpace,
    /// A data raster's value range (its full image's), given to its overviews.
    range: Option<(f64, f64)>,
    /// The full image's georeferencing and data scale, as a bake keeps them.
    meta: LayerMeta,
    levels: Vec<Level>,
    /// Mips past the coarsest stored level, built at open: width, height and RGBA8 texels
    /// row after row (a texel smaller than the layout's mip when the level it was halved
    /// from was rounded down).
    built: Vec<(u32, u32, Vec<u8>)>,
    chunks: Mutex<ChunkCache>,
    next_reader: AtomicUsize,
    decoded: AtomicU64,
    hits: AtomicU64,
}

impl std::fmt::Debug for Cog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cog").field("location", &self.location).field("layout", &self.layout).finish()
    }
}

impl Cog {
    /// Opens the TIFF read through `bytes`, shown as `location`: reads its image
    /// directories, checks that its levels are the mips of one virtual texture, and builds
    /// the mips past its coarsest overview. `readers` decoders per level serve loader
    /// threads concurrently.
    pub fn open(location: &Path, bytes: Arc<dyn TiffBytes>, readers: usize) -> Result<Self, CogError> {
        let fail = |reason: String| CogError { path: location.to_path_buf(), reason };
        let cache = BlockCache::new(bytes);
        let images = TiffSource::image_directories(location, &cache).map_err(|e| fail(e.to_string()))?;
        let Some(first) = images.first() else { return Err(fail("the file holds no image".into())) };
        let layout = TextureLayout::new(first.width, first.height, COG_TILE_SIZE, COG_BORDER)
            .map_err(|e| fail(e.to_string()))?;
        let mut levels = Vec::new();
        for d in images.iter().filter(|d| !d.mask) {
            let mip = levels.len() as u32;
            if mip > 0 && !d.reduced {
                // A second full-resolution page (a multi-page TIFF): not a mip.
                continue;
            }
            if mip >= layout.mip_count() {
                break;
            }
            let want = layout.mip_size(mip);
            // Halved rounding up, or down (GDAL's COG driver): the mip's last row or column
            // then repeats the level's.
            let near = |have: u32, want: u32| have == want || (have + 1 == want && have > 0);
            if !near(d.width, want.0) || !near(d.height, want.1) {
                return Err(fail(format!(
                    "image directory {} is {}x{}, mip {mip} of a {}x{} image is {}x{}: overviews must halve \
                     the image level by level (gdaladdo 2 4 8 ...)",
                    d.image, d.width, d.height, first.width, first.height, want.0, want.1
                )));
            }
            if !d.tiled {
                return Err(fail(format!(
                    "image directory {} is stored in strips: streaming reads internal tiles (write it as a COG: \
                     gdal_translate -of COG)",
                    d.image
                )));
            }
            let (cw, ch) = d.chunk;
            if cw == 0 || ch == 0 || cw > MAX_BUILT_SIDE || ch > MAX_BUILT_SIDE {
                return Err(fail(format!(
                    "image directory {} has internal tiles of {cw}x{ch} texels (1 to {MAX_BUILT_SIDE} a side are \
                     streamed)",
                    d.image
                )));
            }
            let n = readers.max(1);
            levels.push(Level {
                image: d.image,
                width: d.width,
                height: d.height,
                chunk: d.chunk,
                readers: (0..n).map(|_| OnceLock::new()).collect(),
            });
        }
        let mut cog = Self {
            location: location.to_path_buf(),
            cache,
            layout,
            color: ColorSpace::Srgb,
            range: None,
            meta: LayerMeta::default(),
            levels,
            built: Vec::new(),
            chunks: Mutex::new(ChunkCache::default()),
            next_reader: AtomicUsize::new(0),
            decoded: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        };
        let probe = cog.reader(0).map_err(|e| fail(e.to_string()))?;
        let (color, range, meta) = (probe.colour_space(), probe.value_range_known(), probe.layer_meta());
        (cog.color, cog.range, cog.meta) = (color, range, meta);
        cog.build_coarse_mips().map_err(|e| fail(e.to_string()))?;
        tracing::debug!(
            location = %location.display(),
            stored = cog.levels.len(),
            built = cog.built.len(),
            "COG opened for streaming"
        );
        Ok(cog)
    }

    /// The file or URL, as shown.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// The virtual texture's layout: the full-resolution image in [`COG_TILE_SIZE`] tiles.
    pub fn layout(&self) -> TextureLayout {
        self.layout
    }

    /// How the texels are encoded (sRGB for 8-bit imagery).
    pub fn color(&self) -> ColorSpace {
        self.color
    }

    /// The image's georeferencing and, for a data raster, how values became texels: what a
    /// bake of the file keeps in the atlas' metadata record.
    pub fn layer_meta(&self) -> &LayerMeta {
        &self.meta
    }

    /// Levels read from the file (the image and its overviews), and mips built at open.
    pub fn level_counts(&self) -> (usize, usize) {
        (self.levels.len(), self.built.len())
    }

    /// Sizes of the stored levels' internal tiles, level by level.
    pub fn chunk_sizes(&self) -> Vec<(u32, u32)> {
        self.levels.iter().map(|l| l.chunk).collect()
    }

    /// Compressed bytes of each stored level's internal tiles (opens every level).
    pub fn level_bytes(&self) -> io::Result<Vec<u64>> {
        (0..self.levels.len()).map(|k| self.reader(k).map(|r| r.stored_bytes())).collect()
    }

    /// What `tessera inspect` shows of the TIFF.
    pub fn summary(&self) -> CogSummary {
        let (bytes, error) = match self.level_bytes() {
            Ok(b) => (b, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        CogSummary {
            stored_levels: self.levels.len() as u32,
            built_levels: self.built.len() as u32,
            chunk_sizes: self.chunk_sizes(),
            level_bytes: bytes,
            error,
        }
    }

    /// Counters since open.
    pub fn stats(&self) -> CogStats {
        let bytes = self.chunks.lock().unwrap_or_else(PoisonError::into_inner).bytes;
        CogStats {
            chunks_decoded: self.decoded.load(Ordering::Relaxed),
            chunk_hits: self.hits.load(Ordering::Relaxed),
            cached_bytes: bytes as u64,
        }
    }

    /// A decoder of stored level `k`, opened on first use (the next one in turn).
    fn reader(&self, k: usize) -> io::Result<&TiffSource> {
        let level = &self.levels[k];
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % level.readers.len();
        level.readers[i]
            .get_or_init(|| {
                let range = if k == 0 { None } else { self.range };
                TiffSource::open_image(&self.location, &self.cache, level.image, range)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.clone()))
    }

    /// Internal tile (`cx`, `cy`) of stored level `k`, decoded to RGBA8 (its visible
    /// part), from the cache or read and decoded now (once, whoever else waits for it).
    fn chunk(&self, k: usize, cx: u32, cy: u32) -> io::Result<Arc<[u8]>> {
        let key = (k as u8, cx, cy);
        let slot = {
            let mut c = self.chunks.lock().unwrap_or_else(PoisonError::into_inner);
            c.tick += 1;
            let tick = c.tick;
            let (slot, used) = c.slots.entry(key).or_insert_with(|| (Arc::new(OnceLock::new()), tick));
            *used = tick;
            slot.clone()
        };
        let mut fresh = false;
        let got = slot.get_or_init(|| {
            fresh = true;
            self.decoded.fetch_add(1, Ordering::Relaxed);
            self.reader(k)
                .and_then(|r| r.chunk_rgba(cx, cy))
                .map(Arc::from)
                .map_err(|e| (is_unavailable(&e), e.to_string()))
        });
        match got {
            Ok(texels) => {
                if fresh {
                    self.account(key, texels.len());
                } else {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                }
                Ok(texels.clone())
            }
            Err((unavailable, reason)) => {
                // Not kept: a later read tries again.
                let mut c = self.chunks.lock().unwrap_or_else(PoisonError::into_inner);
                if c.slots.get(&key).is_some_and(|(s, _)| Arc::ptr_eq(s, &slot)) {
                    c.slots.remove(&key);
                }
                Err(if *unavailable {
                    io::Error::other(crate::bake::tiff::bytes::Unavailable(reason.clone()))
                } else {
                    io::Error::new(io::ErrorKind::InvalidData, reason.clone())
                })
            }
        }
    }

    /// Counts a decoded chunk's bytes, dropping the least recently used ones past the budget.
    fn account(&self, key: ChunkKey, len: usize) {
        let mut c = self.chunks.lock().unwrap_or_else(PoisonError::into_inner);
        if !c.slots.contains_key(&key) {
            return;
        }
        c.bytes += len;
        while c.bytes > CHUNK_CACHE_BYTES && c.slots.len() > 1 {
            let oldest = c
                .slots
                .iter()
                .filter(|(k, (s, _))| **k != key && s.get().is_some())
                .min_by_key(|(_, (_, used))| *used)
                .map(|(&k, _)| k);
            let Some(oldest) = oldest else { break };
            if let Some((gone, _)) = c.slots.remove(&oldest)
                && let Some(Ok(t)) = gone.get()
            {
                c.bytes -= t.len();
            }
        }
    }

    /// Stored level `k` read whole (RGBA8), for the mips built from it.
    fn read_level(&self, k: usize) -> io::Result<Vec<u8>> {
        let level = &self.levels[k];
        let (w, h, (cw, ch)) = (level.width as usize, level.height as usize, level.chunk);
        let mut out = vec![0u8; w * h * TEXEL_BYTES];
        for cy in 0..level.height.div_ceil(ch) {
            for cx in 0..level.width.div_ceil(cw) {
                let texels = self.chunk(k, cx, cy)?;
                let (x0, y0) = ((cx * cw) as usize, (cy * ch) as usize);
                let vw = (cw as usize).min(w - x0);
                for (r, src) in texels.chunks_exact(vw * TEXEL_BYTES).enumerate() {
                    let at = ((y0 + r) * w + x0) * TEXEL_BYTES;
                    out[at..at + src.len()].copy_from_slice(src);
                }
            }
        }
        Ok(out)
    }

    /// Builds the mips past the coarsest stored level, halving it with the bake's filter.
    fn build_coarse_mips(&mut self) -> io::Result<()> {
        let stored = self.levels.len() as u32;
        if stored >= self.layout.mip_count() {
            return Ok(());
        }
        let Some(last) = self.levels.last() else { return Ok(()) };
        if last.width.max(last.height) > MAX_BUILT_SIDE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "its smallest level is {}x{} ({} stored levels): streaming needs overviews down to \
                     {MAX_BUILT_SIDE} texels or less (add them with gdaladdo, or bake the file)",
                    last.width, last.height, stored
                ),
            ));
        }
        let (mut w, mut h) = (last.width, last.height);
        let mut texels = self.read_level(self.levels.len() - 1)?;
        let (full_w, full_h) = (self.layout.width(), self.layout.height());
        for mip in stored - 1..self.layout.mip_count() - 1 {
            texels = crate::bake::filter::downsample(&texels, w, mip, full_w, 0, full_h, self.color);
            (w, h) = (w.div_ceil(2), h.div_ceil(2));
            self.built.push((w, h, texels.clone()));
        }
        Ok(())
    }

    /// The texels of virtual-texture tile `tile` with its borders (`padded_tile_size² × 4`
    /// bytes of RGBA8), edges clamped as the bake's are. A network failure is an error
    /// that [`bytes::is_unavailable`](crate::bake::tiff::bytes::is_unavailable) tells.
    pub fn tile(&self, tile: TileId) -> io::Result<Vec<u8>> {
        let l = &self.layout;
        if !l.contains(tile) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{tile} lies outside the image"),
            ));
        }
        let mip = u32::from(tile.mip);
        let (mw, mh) = l.mip_size(mip);
        let (t, b, p) = (l.tile_size(), l.border(), l.padded_tile_size());
        let x0 = i64::from(tile.x * t) - i64::from(b);
        let y0 = i64::from(tile.y * t) - i64::from(b);
        let xs: Vec<u32> = (0..p).map(|i| edge(x0 + i64::from(i), mw, Wrap::Clamp)).collect();
        let mut out = vec![0u8; (p * p) as usize * TEXEL_BYTES];
        let rows = out.chunks_exact_mut(p as usize * TEXEL_BYTES);
        if let Some((bw, bh, built)) =
            (mip as usize).checked_sub(self.levels.len()).and_then(|i| self.built.get(i))
        {
            for (oy, row) in rows.enumerate() {
                let sy = edge(y0 + oy as i64, mh, Wrap::Clamp).min(bh - 1) as usize;
                for (o, &sx) in row.chunks_exact_mut(TEXEL_BYTES).zip(&xs) {
                    let at = (sy * *bw as usize + sx.min(bw - 1) as usize) * TEXEL_BYTES;
                    o.copy_from_slice(&built[at..at + TEXEL_BYTES]);
                }
            }
            return Ok(out);
        }
        let k = mip as usize;
        let (cw, ch) = self.levels[k].chunk;
        // A level rounded down is a texel short of the mip: its last row or column repeats.
        let (lw, lh) = (self.levels[k].width, self.levels[k].height);
        let xs: Vec<u32> = xs.into_iter().map(|x| x.min(lw - 1)).collect();
        let mut held: HashMap<(u32, u32), Arc<[u8]>> = HashMap::new();
        for (oy, row) in rows.enumerate() {
            let sy = edge(y0 + oy as i64, mh, Wrap::Clamp).min(lh - 1);
            let cy = sy / ch;
            let ry = (sy - cy * ch) as usize;
            for (o, &sx) in row.chunks_exact_mut(TEXEL_BYTES).zip(&xs) {
                let cx = sx / cw;
                let chunk = match held.get(&(cx, cy)) {
                    Some(c) => c.clone(),
                    None => {
                        let c = self.chunk(k, cx, cy)?;
                        held.insert((cx, cy), c.clone());
                        c
                    }
                };
                let vw = cw.min(lw - cx * cw) as usize;
                let at = (ry * vw + (sx - cx * cw) as usize) * TEXEL_BYTES;
                let src = chunk.get(at..at + TEXEL_BYTES).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("internal tile {cx},{cy} decoded short"),
                    )
                })?;
                o.copy_from_slice(src);
            }
        }
        Ok(out)
    }
}

/// What `tessera inspect` reports of a TIFF streamed unbaked.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CogSummary {
    /// Levels read from the file: the image and its overviews (mips `0..stored_levels`).
    pub stored_levels: u32,
    /// Coarser mips built at open from the coarsest stored level.
    pub built_levels: u32,
    /// Internal tile size of each stored level.
    pub chunk_sizes: Vec<(u32, u32)>,
    /// Compressed bytes of each stored level.
    pub level_bytes: Vec<u64>,
    /// Why a level could not be opened, if one could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the TIFF reader reports of one image directory when a COG is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageDirectory {
    /// Its index in the file.
    pub image: usize,
    /// Size in texels.
    pub width: u32,
    /// Size in texels.
    pub height: u32,
    /// Stored in tiles (not strips).
    pub tiled: bool,
    /// Chunk size.
    pub chunk: (u32, u32),
    /// A reduced-resolution image (an overview).
    pub reduced: bool,
    /// A transparency mask.
    pub mask: bool,
}
