//! Opening an atlas (reading and validating header, layer table and index) and reading,
//! decoding and verifying its tiles.
//!
//! Tiles are read with positioned reads (`pread`) into owned buffers, not through a
//! memory map: a file truncated or overwritten in place while in use then gives a read
//! error or a CRC mismatch for the affected tiles (reported; the renderer shows their
//! ancestors) instead of a SIGBUS that kills the process.
//!
//! By concern: this file holds the [`Atlas`] type and reading tiles; `open.rs` opening
//! (store, header, layer table, data objects); `index.rs` the paged tile index;
//! `verify.rs` checking a whole atlas; `store.rs` file, remote and ranged reads;
//! `ranged.rs` opening from fetched byte ranges and saying which ranges to fetch.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::header::{
    BLOB_ALIGN, ENTRY_BYTES, FLAG_META, FLAG_SPLIT, FLAG_STACKED, HEADER_BYTES, Header, KNOWN_FLAGS,
    LAYER_BYTES, MAGIC, MAX_NAME_BYTES, OLDEST_VERSION, ROOT_FIXED_BYTES, ROOT_LIMIT, Root, VERSION, rd_u32,
    rd_u64,
};
use super::meta::{self, AtlasMeta, MAX_META_BYTES, META_LEN_BYTES};
use super::order::StorageOrder;
use super::ranged::RangedBytes;
use super::split::{self, DataObject};
use super::{AtlasError, ColorSpace, LayerInfo, TileEntry, Wrap, stacked_mismatch};
use crate::format::codec::{Codec, TargetFormat};
use crate::format::tile::{MAX_LAYERS, TextureLayout, TileId};
use crate::local_file::FileExt;

mod cog;
mod index;
mod open;
mod produced;
mod ranged;
mod store;
mod verify;

pub(crate) use index::decode_entry;
use store::{ReadError, Store};
use verify::shared_spans;

/// How a remote blob that failed its CRC-32 is described.
const CRC_FAILED: &str = "the body failed its CRC-32";

/// Tiles a remote [`Atlas::verify`] reads at once (their blobs in coalesced ranges).
pub const REMOTE_VERIFY_BATCH: usize = 512;

/// Bytes of version-2 index pages an atlas keeps in memory (least recently used out).
pub const PAGE_CACHE_BYTES: usize = 64 << 20;

/// A remote version-2 atlas whose index beyond the opening bytes is at most this long
/// (about 87,000 tiles: a 32768² texture of 128-texel tiles) reads it ahead whole, in
/// one background request right after opening; a larger one reads its pages on demand.
pub const INDEX_READ_AHEAD_BYTES: u64 = 2 << 20;

/// A version-2 atlas' paged index: where pages are, their checksums, and the pages
/// read so far.
struct Paged {
    order: StorageOrder,
    page_entries: u32,
    page_crcs: Vec<u32>,
    cache: Mutex<PageCache>,
}

/// Checked index pages by number, with a use tick each.
#[derive(Default)]
struct PageCache {
    pages: HashMap<u64, (Arc<[u8]>, u64)>,
    bytes: usize,
    tick: u64,
}

/// A validated atlas: header and layer table in memory, and the tile index (read
/// whole at open for version 1; read in checked pages on demand, and cached, for
/// version 2); tiles read on demand. Cheap to share between loader threads.
pub struct Atlas {
    path: PathBuf,
    file: Store,
    /// The file's length when it was opened.
    len: u64,
    /// The file's first bytes: header, layer table and (version 1) the whole tile
    /// index, or (version 2) the root directory.
    meta: Vec<u8>,
    /// The metadata record (empty without one).
    info: AtlasMeta,
    layers: Vec<LayerInfo>,
    index_offset: u64,
    tile_count: u64,
    data_offset: u64,
    stored_bytes: u64,
    flags: u32,
    version: u32,
    paged: Option<Paged>,
    /// A split atlas' data objects (empty for a single file), in table order.
    data: Vec<DataStore>,
    /// End of the blob address space: the file's length, or for a split atlas the end
    /// of its last data object in the virtual file.
    data_end: u64,
    /// A TIFF streamed unbaked instead of an atlas file ([`Atlas::cog`]).
    cog: Option<Arc<crate::format::cog::Cog>>,
}

/// One data object of a split atlas, opened.
struct DataStore {
    /// Its first byte's offset in the virtual file.
    base: u64,
    object: DataObject,
    location: PathBuf,
    store: Store,
}

impl std::fmt::Debug for Atlas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Atlas").field("path", &self.path).field("layers", &self.layers).finish()
    }
}

impl Atlas {
    /// The data object of a split atlas that holds virtual offset `offset` (`None` for
    /// a single file).
    fn data_at(&self, offset: u64) -> Option<&DataStore> {
        let k = self.data.partition_point(|d| d.base <= offset).checked_sub(1)?;
        self.data.get(k)
    }

    /// Where the blob at `offset` is read: the store and the offset in it.
    fn blob_store(&self, offset: u64) -> (&Store, u64) {
        match self.data_at(offset) {
            Some(d) => (&d.store, offset - d.base),
            None => (&self.file, offset),
        }
    }

    /// A split atlas' data objects, as its index object names them, and where they were
    /// opened from (empty for a single-file atlas).
    pub fn data_objects(&self) -> Vec<(DataObject, PathBuf)> {
        self.data.iter().map(|d| (d.object.clone(), d.location.clone())).collect()
    }

    /// Whether this is a split atlas: an index object naming data objects.
    pub fn is_split(&self) -> bool {
        !self.data.is_empty()
    }

    /// The network counters of a remote atlas (`None` for a local file): for a split
    /// atlas, its index object's and data objects' requests together (latencies: those
    /// of the object that made the most requests).
    pub fn network_stats(&self) -> Option<super::NetworkStats> {
        let stats = |s: &Store| -> Option<super::NetworkStats> {
            match s {
                #[cfg(feature = "remote")]
                Store::Remote(r) => Some(r.stats()),
                Store::Ranged(r) => {
                    if let Some(reported) = r.reported_network() {
                        return Some(reported);
                    }
                    let s = r.stats();
                    Some(super::NetworkStats {
                        requests: s.inserts,
                        bytes: s.inserted_bytes,
                        ..Default::default()
                    })
                }
                Store::File(_) | Store::Empty => None,
            }
        };
        let mut total = stats(&self.file)?;
        let mut most = total.requests;
        for d in &self.data {
            let Some(n) = stats(&d.store) else { continue };
            if n.requests > most {
                most = n.requests;
                (total.latency_p50_ms, total.latency_p95_ms) = (n.latency_p50_ms, n.latency_p95_ms);
            }
            let (offline, in_flight) = (total.offline | n.offline, total.in_flight + n.in_flight);
            let held = total.disk_cache.map(|c| c.bytes + n.disk_cache.map_or(0, |d| d.bytes));
            total = total.zip_counts(&n, u64::saturating_add);
            (total.offline, total.in_flight) = (offline, in_flight);
            if let (Some(c), Some(bytes)) = (&mut total.disk_cache, held) {
                c.bytes = bytes;
            }
        }
        Some(total)
    }

    /// Whether the atlas is read from an object store (the `remote` feature's URLs).
    fn is_remote_store(&self) -> bool {
        #[cfg(feature = "remote")]
        if matches!(self.file, Store::Remote(_)) {
            return true;
        }
        false
    }

    /// Whether the atlas is read over the network: from a URL, or from byte ranges an
    /// embedder fetches ([`Atlas::open_ranged`]).
    pub fn is_remote(&self) -> bool {
        !matches!(self.file, Store::File(_) | Store::Empty)
    }

    /// The index entry of the tile with canonical index `i` (layer by layer, each in
    /// [`TextureLayout::tile_index`] order), whatever the file's storage order.
    pub(super) fn entry_at(&self, i: u64) -> Result<TileEntry, AtlasError> {
        let past = || AtlasError::Invalid {
            path: self.path.clone(),
            what: format!("tile index entry {i} (past the index)"),
        };
        let Some(paged) = &self.paged else {
            let at = usize::try_from(self.index_offset + i * ENTRY_BYTES as u64).map_err(|_| past())?;
            let b = self.meta.get(at..at + ENTRY_BYTES).ok_or_else(past)?;
            return decode_entry(b).map_err(|code| AtlasError::Invalid {
                path: self.path.clone(),
                what: format!("codec {code} in tile index entry {i}"),
            });
        };
        let li = self.layers.partition_point(|l| l.first_tile <= i).checked_sub(1).ok_or_else(past)?;
        let layer = &self.layers[li];
        let (m, x, y) = layer.layout.tile_at_index(i - layer.first_tile).ok_or_else(past)?;
        let tile = TileId::new(li as u16, m as u8, x, y);
        self.paged_entry(paged, tile, paged.order.position(li, m, x, y), true)
    }

    /// The file's first bytes as read at open: header, layer table and root directory
    /// (version 2, with a split atlas' object table) or the whole index (version 1). Two
    /// atlases with equal bytes here have equal indexes (version 2 through the page
    /// checksums).
    pub fn meta_bytes(&self) -> &[u8] {
        &self.meta
    }

    /// The metadata record (header flag [`FLAG_META`]): georeferencing and other facts
    /// about the layers; empty when the file has none.
    pub fn metadata(&self) -> &AtlasMeta {
        &self.info
    }

    /// The format version of the file (1 or 2).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The header flags (see [`FLAG_STACKED`]).
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// Whether the layers are stacked: one layout, shared tile ids (see [`FLAG_STACKED`]).
    pub fn is_stacked(&self) -> bool {
        self.flags & FLAG_STACKED != 0
    }

    /// The file or URL this atlas was opened from, as it may be shown: a URL's query
    /// values (a presigned URL's credentials) redacted
    /// ([`display_location`](crate::format::atlas::display_location)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All layers, in file order; the index is the tile id's `layer`.
    pub fn layers(&self) -> &[LayerInfo] {
        &self.layers
    }

    /// Total tiles over all layers and mips.
    pub fn tile_count(&self) -> u64 {
        self.tile_count
    }

    /// Bytes of tile data over all tiles (blobs only, without index and padding; a blob
    /// shared by several tiles counts once).
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// Size of the file in bytes, when it was opened.
    pub fn file_size(&self) -> u64 {
        self.len
    }

    /// Where `tile` is stored.
    pub fn entry(&self, tile: TileId) -> Result<TileEntry, AtlasError> {
        self.entry_with(tile, true)
    }

    /// [`Atlas::entry`]; `forget_bad` as for [`Atlas::page`].
    pub(super) fn entry_with(&self, tile: TileId, forget_bad: bool) -> Result<TileEntry, AtlasError> {
        if self.is_produced() {
            return Err(self.produced_tile(tile));
        }
        if self.cog.is_some() {
            return self.cog_entry(tile);
        }
        let no = || AtlasError::NoSuchTile { path: self.path.clone(), tile };
        let layer = self.layers.get(usize::from(tile.layer)).ok_or_else(no)?;
        let i = layer.layout.tile_index(u32::from(tile.mip), tile.x, tile.y).ok_or_else(no)?;
        match &self.paged {
            Some(paged) => {
                let position =
                    paged.order.position(usize::from(tile.layer), u32::from(tile.mip), tile.x, tile.y);
                self.paged_entry(paged, tile, position, forget_bad)
            }
            None => self.entry_at(layer.first_tile + i),
        }
    }

    /// The stored bytes of `tile`, after checking their CRC. A file that shrank or
    /// changed since it was opened gives [`AtlasError::Changed`] or
    /// [`AtlasError::TileChecksum`], never a crash.
    pub fn read_tile(&self, tile: TileId) -> Result<Vec<u8>, AtlasError> {
        if let Some(cog) = &self.cog {
            return self.cog_tile(cog, tile);
        }
        let e = self.entry(tile)?;
        let (store, at) = self.blob_store(e.offset);
        let blob = store.read_blob(at, e.length, e.crc32);
        self.checked_blob(tile, &e, blob)
    }

    /// The stored bytes of several tiles, each CRC-checked, in the order asked. A remote
    /// atlas reads the blobs the disk cache lacks with few requests: blobs close
    /// together in the file (version 2 stores neighbours together) share one range of
    /// at most 1 MiB, and the ranges are fetched concurrently. `keep(i)` says whether
    /// `tiles[i]` is still wanted: a range none of whose tiles is wanted any more is
    /// abandoned mid-flight, and its tiles come back [`AtlasError::Cancelled`]. A
    /// local atlas reads each tile in turn (`keep` is not asked).
    pub fn read_tiles(
        &self,
        tiles: &[TileId],
        keep: &dyn Fn(usize) -> bool,
    ) -> Vec<Result<Vec<u8>, AtlasError>> {
        if self.cog.is_some() {
            return tiles.iter().map(|&t| self.read_tile(t)).collect();
        }
        #[cfg(feature = "remote")]
        if self.is_remote_store() {
            self.load_pages_for(tiles);
            let entries: Vec<Result<TileEntry, AtlasError>> = tiles.iter().map(|&t| self.entry(t)).collect();
            // The tiles found, grouped by the object holding them (one group for a
            // single file): each object's ranges are coalesced and fetched on their own.
            let mut groups: std::collections::BTreeMap<usize, Vec<(usize, TileEntry)>> = Default::default();
            for (i, e) in entries.iter().enumerate() {
                if let Ok(e) = e {
                    let k = self.data.partition_point(|d| d.base <= e.offset);
                    groups.entry(k).or_default().push((i, *e));
                }
            }
            let mut out: Vec<Result<Vec<u8>, AtlasError>> =
                entries.into_iter().map(|e| e.map(|_| Vec::new())).collect();
            let read_group = |k: usize, found: &[(usize, TileEntry)]| -> Vec<Result<Vec<u8>, AtlasError>> {
                let (store, base) = match k.checked_sub(1).and_then(|j| self.data.get(j)) {
                    Some(d) => (&d.store, d.base),
                    None => (&self.file, 0),
                };
                let Store::Remote(r) = store else {
                    return found.iter().map(|(i, _)| self.read_tile(tiles[*i])).collect();
                };
                let blobs: Vec<(u64, u32, u32)> =
                    found.iter().map(|(_, e)| (e.offset - base, e.length, e.crc32)).collect();
                let mut got = r.read_blobs(&blobs, &|j| keep(found[j].0)).into_iter();
                found
                    .iter()
                    .map(|(i, e)| {
                        let tile = tiles[*i];
                        match got.next() {
                            Some(Err(super::remote::RemoteError::Cancelled)) | None => {
                                Err(AtlasError::Cancelled { path: self.path.clone(), tile })
                            }
                            Some(r) => self.checked_blob(tile, e, r.map_err(ReadError::from_remote)),
                        }
                    })
                    .collect()
            };
            // One object after the other (a batch of neighbouring tiles rarely spans two
            // shards' data objects); each object's ranges are fetched concurrently.
            let results: Vec<_> = groups.iter().map(|(&k, found)| (found, read_group(k, found))).collect();
            for (found, got) in results {
                let mut got = got.into_iter();
                for (i, _) in found {
                    out[*i] = got.next().unwrap_or_else(|| {
                        Err(AtlasError::Cancelled { path: self.path.clone(), tile: tiles[*i] })
                    });
                }
            }
            return out;
        }
        let _ = keep;
        tiles.iter().map(|&t| self.read_tile(t)).collect()
    }

    /// The stored bytes of those of `tiles` that can be had without a network request
    /// (a remote atlas: index entry in the page cache, blob in the disk cache; each
    /// checked against its CRC-32); `None` for the others, and for every tile of a local
    /// atlas (whose reads need no batching). The loader delivers these at once instead
    /// of with the network part of their batch.
    pub fn read_tiles_cached(&self, tiles: &[TileId]) -> Vec<Option<Vec<u8>>> {
        if !self.is_remote() || self.cog.is_some() {
            return vec![None; tiles.len()];
        }
        tiles
            .iter()
            .map(|&t| {
                let e = self.entry_if_cached(t)?;
                let (store, at) = self.blob_store(e.offset);
                match store {
                    #[cfg(feature = "remote")]
                    Store::Remote(r) => r.cached_blob(at, e.length, e.crc32),
                    Store::Ranged(r) => {
                        r.get(at, u64::from(e.length)).filter(|b| crc32fast::hash(b) == e.crc32)
                    }
                    Store::File(_) | Store::Empty => None,
                }
            })
            .collect()
    }

    /// `blob` as read for `tile` (entry `e`), with read errors mapped and its CRC checked.
    fn checked_blob(
        &self,
        tile: TileId,
        e: &TileEntry,
        blob: Result<Vec<u8>, ReadError>,
    ) -> Result<Vec<u8>, AtlasError> {
        let blob = blob.map_err(|err| err.for_tile(&self.path, tile))?;
        if crc32fast::hash(&blob) != e.crc32 {
            if self.is_remote() {
                // Damaged in transit as likely as on the server: asked for again later
                // (the disk cache only ever keeps blobs that passed; a ranged store
                // drops the bytes, to be fetched again).
                let (store, at) = self.blob_store(e.offset);
                store.forget(at, u64::from(e.length));
                return Err(AtlasError::Unavailable {
                    path: self.path.clone(),
                    tile,
                    reason: format!("{CRC_FAILED} (damaged in transit or on the server)"),
                });
            }
            return Err(AtlasError::TileChecksum { path: self.path.clone(), tile });
        }
        Ok(blob)
    }

    /// The tile decoded to RGBA8 (`padded_tile_size² × 4` bytes), CRC checked.
    pub fn decode_tile(&self, tile: TileId) -> Result<Vec<u8>, AtlasError> {
        let blob = self.read_tile(tile)?;
        let e = self.entry(tile)?;
        e.codec.decode(&blob, e.raw_length as usize).map_err(|source| AtlasError::TileDecode {
            path: self.path.clone(),
            tile,
            source,
        })
    }

    /// The tile as a GPU pool in `target` holds it, decoded back to RGBA8
    /// (`padded_tile_size² × 4` bytes; CRC checked): transcoded to `target`, then its
    /// blocks decoded on the CPU ([`crate::format::block_decode`]). For
    /// [`TargetFormat::Rgba8`] this is [`Atlas::decode_tile`].
    pub fn decode_tile_as(&self, tile: TileId, target: TargetFormat) -> Result<Vec<u8>, AtlasError> {
        if target == TargetFormat::Rgba8 {
            return self.decode_tile(tile);
        }
        let blob = self.read_tile(tile)?;
        let e = self.entry(tile)?;
        let raw = e.raw_length as usize;
        let side = (raw / 4).isqrt() as u32;
        crate::format::codec::transcode_verified(e.codec, &blob, raw, side, target)
            .and_then(|blocks| crate::format::block_decode::decode_blocks(target, &blocks, side))
            .map_err(|source| AtlasError::TileDecode { path: self.path.clone(), tile, source })
    }

    /// [`Atlas::read_texels`] as a GPU pool in `target` holds them: each tile through
    /// [`Atlas::decode_tile_as`].
    pub fn read_texels_as(
        &self,
        layer: u16,
        mip: u32,
        rect: [u32; 4],
        target: TargetFormat,
    ) -> Result<Vec<u8>, AtlasError> {
        self.read_texels_with(layer, mip, rect, |t| self.decode_tile_as(t, target))
    }

    /// The payload texels (RGBA8, tile borders left out) of the rectangle `[x, y, w, h]`
    /// of mip `mip` of layer `layer`, decoded from the tiles covering it: `w × h × 4`
    /// bytes, row after row.
    pub fn read_texels(&self, layer: u16, mip: u32, rect: [u32; 4]) -> Result<Vec<u8>, AtlasError> {
        self.read_texels_with(layer, mip, rect, |t| self.decode_tile(t))
    }

    fn read_texels_with(
        &self,
        layer: u16,
        mip: u32,
        rect: [u32; 4],
        decode: impl Fn(TileId) -> Result<Vec<u8>, AtlasError>,
    ) -> Result<Vec<u8>, AtlasError> {
        let invalid = |what: String| AtlasError::Invalid { path: self.path.clone(), what };
        let lay = self
            .layers
            .get(usize::from(layer))
            .ok_or_else(|| invalid(format!("layer {layer} asked for: the atlas has {}", self.layers.len())))?
            .layout;
        let [x, y, w, h] = rect;
        let (mw, mh) = lay.mip_size(mip);
        if mip >= lay.mip_count()
            || x.checked_add(w).is_none_or(|r| r > mw)
            || y.checked_add(h).is_none_or(|b| b > mh)
        {
            return Err(invalid(format!(
                "texels {w}x{h} at {x},{y} of mip {mip} asked for: layer {layer} has {} mips, this one {mw}x{mh}",
                lay.mip_count()
            )));
        }
        let (t, b, p) = (lay.tile_size(), lay.border(), lay.padded_tile_size());
        let mut out = vec![0u8; w as usize * h as usize * 4];
        if w == 0 || h == 0 {
            return Ok(out);
        }
        for ty in y / t..(y + h).div_ceil(t) {
            for tx in x / t..(x + w).div_ceil(t) {
                let tile = decode(TileId::new(layer, mip as u8, tx, ty))?;
                // The tile's interior columns and rows inside the rectangle.
                let (cx0, cx1) = ((tx * t).max(x), ((tx + 1) * t).min(x + w));
                let (cy0, cy1) = ((ty * t).max(y), ((ty + 1) * t).min(y + h));
                let len = ((cx1 - cx0) * 4) as usize;
                for row in cy0..cy1 {
                    let src = (((row - ty * t + b) * p + (cx0 - tx * t + b)) * 4) as usize;
                    let dst = (((row - y) * w + (cx0 - x)) * 4) as usize;
                    out[dst..dst + len].copy_from_slice(&tile[src..src + len]);
                }
            }
        }
        Ok(out)
    }
}
