//! Opening an atlas (reading and validating header, layer table and index) and reading,
//! decoding and verifying its tiles.
//!
//! Tiles are read with positioned reads (`pread`) into owned buffers, not through a
//! memory map: a file truncated or overwritten in place while in use then gives a read
//! error or a CRC mismatch for the affected tiles (reported; the renderer shows their
//! ancestors) instead of a SIGBUS that kills the process.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::header::{
    BLOB_ALIGN, ENTRY_BYTES, FLAG_SPLIT, FLAG_STACKED, HEADER_BYTES, Header, KNOWN_FLAGS, LAYER_BYTES, MAGIC,
    MAX_NAME_BYTES, OLDEST_VERSION, ROOT_FIXED_BYTES, ROOT_LIMIT, Root, VERSION, rd_u32, rd_u64,
};
use super::order::StorageOrder;
use super::split::{self, DataObject};
use super::{AtlasError, ColorSpace, LayerInfo, TileEntry, Wrap, stacked_mismatch};
use crate::format::codec::Codec;
use crate::format::tile::{MAX_LAYERS, TextureLayout, TileId};

/// Sorts blob spans `(start, end)`, merges identical ones (a shared blob) and returns
/// the bytes of the distinct blobs, or the first two spans that overlap without being
/// identical.
#[allow(clippy::type_complexity)]
fn shared_spans(spans: &mut Vec<(u64, u64)>) -> Result<u64, ((u64, u64), (u64, u64))> {
    spans.sort_unstable();
    spans.dedup();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err((w[0], w[1]));
        }
    }
    Ok(spans.iter().map(|(a, b)| b - a).sum())
}

/// Where an atlas' bytes come from: a local file, or an object on a server.
enum Store {
    File(File),
    #[cfg(feature = "remote")]
    Remote(Box<super::remote::RemoteObject>),
}

/// Why a positioned read failed: an I/O error, or a remote read that may work later.
enum ReadError {
    Io(std::io::Error),
    /// Network or server failure (after retries).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Unavailable(String),
    /// A remote atlas was replaced on the server since it was opened.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Replaced,
}

impl Store {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), ReadError> {
        match self {
            Self::File(f) => f.read_exact_at(buf, offset).map_err(ReadError::Io),
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_exact_at(buf, offset).map_err(ReadError::from_remote),
        }
    }

    /// A tile blob (the remote store goes through its disk cache).
    fn read_blob(&self, offset: u64, len: u32, crc: u32) -> Result<Vec<u8>, ReadError> {
        match self {
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_blob(offset, len, crc).map_err(ReadError::from_remote),
            _ => {
                let _ = crc;
                let mut blob = vec![0u8; len as usize];
                self.read_exact_at(&mut blob, offset)?;
                Ok(blob)
            }
        }
    }

    /// A version-2 index page (the remote store serves it from the bytes read at open
    /// when they cover it, else like a blob).
    fn read_page(&self, offset: u64, len: u32, crc: u32) -> Result<Vec<u8>, ReadError> {
        match self {
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_page(offset, len, crc).map_err(ReadError::from_remote),
            _ => self.read_blob(offset, len, crc),
        }
    }

    fn len(&self) -> std::io::Result<u64> {
        match self {
            Self::File(f) => Ok(f.metadata()?.len()),
            #[cfg(feature = "remote")]
            Self::Remote(r) => Ok(r.size()),
        }
    }
}

impl ReadError {
    #[cfg(feature = "remote")]
    fn from_remote(e: super::remote::RemoteError) -> Self {
        if e.is_transient() {
            Self::Unavailable(e.to_string())
        } else if matches!(e, super::remote::RemoteError::Replaced) {
            Self::Replaced
        } else {
            Self::Io(std::io::Error::other(e.to_string()))
        }
    }

    fn into_io(self) -> std::io::Error {
        match self {
            Self::Io(e) => e,
            Self::Unavailable(m) => std::io::Error::other(m),
            Self::Replaced => {
                std::io::Error::other("the atlas was replaced on the server since it was opened")
            }
        }
    }
}

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
    /// Opens and validates an atlas: header, checksums, every layer and every
    /// index entry. Tile data is checked by [`Atlas::read_tile`] and [`Atlas::verify`].
    ///
    /// `path` may also be a URL (with the `remote` feature, on by default):
    /// `s3://bucket/key`, `http://host/path` or `https://...`; see
    /// [`super::remote`] for credentials, retries and what happens when the object
    /// changes on the server.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AtlasError> {
        Self::open_with(path, &super::RemoteOptions::from_env())
    }

    /// [`Atlas::open`] with the disk cache (and other remote settings) of `remote` for
    /// a URL; a local path ignores them.
    pub fn open_with(path: impl AsRef<Path>, remote: &super::RemoteOptions) -> Result<Self, AtlasError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| AtlasError::Io { path: path.clone(), source };
        let file = Self::open_store(&path, remote).map_err(io)?;
        let len = file.len().map_err(io)?;
        let io = |e: ReadError| AtlasError::Io { path: path.clone(), source: e.into_io() };
        let invalid = |what: String| AtlasError::Invalid { path: path.clone(), what };
        if len < HEADER_BYTES as u64 {
            if len >= 8 && !Self::starts_with_magic(&file) {
                return Err(AtlasError::BadMagic { path });
            }
            return Err(AtlasError::Truncated { path, expected: HEADER_BYTES as u64, found: len });
        }
        let mut head = [0u8; HEADER_BYTES];
        file.read_exact_at(&mut head, 0).map_err(io)?;
        let header = read_header(&head, &path, len)?;
        let table_end = HEADER_BYTES as u64 + u64::from(header.layer_count) * LAYER_BYTES as u64;
        let v2 = header.version >= 2;
        let split = header.flags & FLAG_SPLIT != 0;
        if split && !v2 {
            return Err(invalid("split flag on a version-1 file".into()));
        }
        // A split atlas' index pages lie in its data objects: its index object ends where
        // its index would start.
        let index_bytes = if split { Some(0) } else { header.tile_count.checked_mul(ENTRY_BYTES as u64) };
        let index_end = index_bytes
            .and_then(|n| n.checked_add(header.index_offset))
            .filter(|&end| end <= header.data_offset && header.data_offset <= len)
            .ok_or_else(|| invalid("index or data offsets".into()))?;
        // A split atlas' object table follows the root directory.
        let table_limit = if split { split::MAX_TABLE_BYTES } else { 0 };
        let meta_end = if v2 {
            // The root directory within 16 KiB after the layer table (the whole head
            // within the first 16 KiB unless there are hundreds of layers).
            if header.index_offset > table_end + ROOT_LIMIT as u64 + table_limit
                || header.index_offset < table_end + ROOT_FIXED_BYTES as u64
                || header.data_offset != index_end.next_multiple_of(BLOB_ALIGN)
            {
                return Err(invalid("index or data offsets".into()));
            }
            header.index_offset
        } else {
            if header.index_offset != table_end {
                return Err(invalid("index or data offsets".into()));
            }
            index_end
        };
        let meta_len =
            usize::try_from(meta_end).map_err(|_| invalid("tile index larger than memory".into()))?;
        let mut meta = vec![0u8; meta_len];
        file.read_exact_at(&mut meta, 0).map_err(io)?;
        let mut objects = Vec::new();
        let (crc_end, root) = if v2 {
            let root = Root::decode(&meta[table_end as usize..]).map_err(invalid)?;
            let pages = root.page_crcs.len() as u64;
            let root_end = table_end + Root::encoded_len(pages);
            let mut head_end = root_end;
            if split {
                let (table, table_len) =
                    split::decode_table(meta.get(root_end as usize..).unwrap_or_default())
                        .map_err(invalid)?;
                objects = table;
                head_end += table_len as u64;
            }
            if pages != header.tile_count.div_ceil(u64::from(root.page_entries))
                || header.index_offset != head_end.next_multiple_of(BLOB_ALIGN)
            {
                return Err(invalid(format!(
                    "root directory: {pages} index pages of {} entries for {} tiles",
                    root.page_entries, header.tile_count
                )));
            }
            (head_end as usize, Some(root))
        } else {
            (meta.len(), None)
        };
        if crc32fast::hash(&meta[HEADER_BYTES..crc_end]) != header.meta_crc {
            let what = if v2 { "layer table and root directory" } else { "layer table and tile index" };
            return Err(AtlasError::Checksum { path, what });
        }
        let layers = read_layers(&meta, &header, &path)?;
        let (data, data_end) = if split {
            if header.data_offset != len {
                return Err(invalid("a split atlas' index object holds blobs".into()));
            }
            let per = root.as_ref().map_or(1, |r| u64::from(r.page_entries));
            Self::open_data(&path, remote, header.data_offset, objects, header.tile_count, per)?
        } else {
            (Vec::new(), len)
        };
        if root.as_ref().is_some_and(|r| r.stored_bytes > data_end) {
            return Err(invalid("root directory: more blob bytes than the file holds".into()));
        }
        let paged = root.as_ref().map(|r| Paged {
            order: StorageOrder::new(
                layers.iter().map(|l| l.layout).collect(),
                header.flags & FLAG_STACKED != 0,
            ),
            page_entries: r.page_entries,
            page_crcs: r.page_crcs.clone(),
            cache: Mutex::new(PageCache::default()),
        });
        let mut atlas = Atlas {
            path,
            file,
            len,
            meta,
            layers,
            index_offset: header.index_offset,
            tile_count: header.tile_count,
            data_offset: header.data_offset,
            stored_bytes: root.map_or(0, |r| r.stored_bytes),
            flags: header.flags,
            version: header.version,
            paged,
            data,
            data_end,
        };
        if !v2 {
            atlas.stored_bytes = atlas.check_index()?;
        }
        #[cfg(feature = "remote")]
        if let Store::Remote(r) = &atlas.file {
            r.remember_meta(&atlas.meta);
            // A small paged index is read ahead whole in the background: later camera
            // moves then need no round trip for index pages.
            let index_end = atlas.index_offset + atlas.tile_count * ENTRY_BYTES as u64;
            if let Some(paged) = &atlas.paged {
                // From the first page the opening bytes do not hold whole.
                let page_bytes = u64::from(paged.page_entries) * ENTRY_BYTES as u64;
                let held = r.prefix_len().saturating_sub(atlas.index_offset) / page_bytes;
                let start = atlas.index_offset + held * page_bytes;
                if start < index_end && index_end - start <= INDEX_READ_AHEAD_BYTES {
                    let crcs = paged.page_crcs.get(held as usize..).unwrap_or_default().to_vec();
                    r.read_ahead(start..index_end, page_bytes, crcs);
                }
            }
        }
        Ok(atlas)
    }

    /// Checks that every index entry points at an aligned blob inside the data and of
    /// the decoded size its layer implies, and that blobs are identical or disjoint;
    /// returns the bytes of the distinct blobs.
    fn check_index(&self) -> Result<u64, AtlasError> {
        let mut stored_bytes = 0u64;
        // Blobs in ascending, disjoint order need no sort; shared or reordered ones do.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let (mut in_order, mut prev_end) = (true, 0u64);
        for (li, layer) in self.layers.iter().enumerate() {
            let expect_raw = u64::from(layer.layout.padded_tile_size()).pow(2) * 4;
            for i in 0..layer.layout.tile_count() {
                let e = self.entry_at(layer.first_tile + i)?;
                stored_bytes += u64::from(e.length);
                let bad = !self.entry_in_data(&e, expect_raw);
                if bad {
                    let (m, x, y) = layer.layout.tile_at_index(i).unwrap_or_default();
                    let tile = TileId::new(li as u16, m as u8, x, y);
                    return Err(AtlasError::Invalid {
                        path: self.path.clone(),
                        what: format!("index entry for {tile} (points outside the data)"),
                    });
                }
                let end = e.offset + u64::from(e.length);
                in_order &= e.offset >= prev_end;
                prev_end = prev_end.max(end);
                spans.push((e.offset, end));
            }
        }
        if !in_order {
            stored_bytes = shared_spans(&mut spans).map_err(|(a, b)| AtlasError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "tile index: blobs [{}, {}) and [{}, {}) partially overlap \
                     (blobs must be identical or disjoint)",
                    a.0, a.1, b.0, b.1
                ),
            })?;
        }
        Ok(stored_bytes)
    }

    /// The store behind `path`: a remote object for an `s3://` or `http(s)://` URL,
    /// else the local file.
    fn open_store(path: &Path, options: &super::RemoteOptions) -> std::io::Result<Store> {
        #[cfg(feature = "remote")]
        if let Some(url) = path.to_str().filter(|p| super::remote::is_remote(p)) {
            let remote = super::remote::RemoteObject::open(url, options).map_err(|e| match e {
                super::remote::RemoteError::NotFound => {
                    std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
                }
                other => std::io::Error::other(other.to_string()),
            })?;
            return Ok(Store::Remote(Box::new(remote)));
        }
        #[cfg(not(feature = "remote"))]
        if super::is_remote_location(path) {
            let _ = options;
            return Err(std::io::Error::other("remote atlases need tessera-vt-core's `remote` feature"));
        }
        if let Some(scheme) = super::url_scheme(path) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "unsupported URL scheme {scheme}:// (Tessera reads s3://, gs://, az://, http:// and https://)"
                ),
            ));
        }
        File::open(path).map(Store::File)
    }

    /// Opens the data objects of a split atlas at `path` (beside it, or under the same
    /// URL prefix; remote ones concurrently) and checks that each has the size its
    /// index object says. Returns them and the end of the virtual file.
    fn open_data(
        path: &Path,
        remote: &super::RemoteOptions,
        data_offset: u64,
        objects: Vec<DataObject>,
        tiles: u64,
        per: u64,
    ) -> Result<(Vec<DataStore>, u64), AtlasError> {
        let invalid = |what: String| AtlasError::Invalid { path: path.to_path_buf(), what };
        let bases =
            split::bases(data_offset, &objects).ok_or_else(|| invalid("data objects too large".into()))?;
        // The objects hold the index pages in order, each its run of them after its blobs.
        let mut next_page = 0u64;
        for o in &objects {
            let first = u64::from(o.first_page);
            let entries = (first * per).min(tiles)..((first + u64::from(o.pages)) * per).min(tiles);
            let index_end = o.index_offset.checked_add((entries.end - entries.start) * ENTRY_BYTES as u64);
            if first != next_page || index_end.is_none_or(|e| e > o.size) {
                return Err(invalid(format!(
                    "object table: data object {:?} holds index pages {first}..{} at {} of its {} bytes",
                    o.name,
                    first + u64::from(o.pages),
                    o.index_offset,
                    o.size
                )));
            }
            next_page = first + u64::from(o.pages);
        }
        if next_page != tiles.div_ceil(per) {
            return Err(invalid(format!("object table: {next_page} index pages of {}", tiles.div_ceil(per))));
        }
        let end = bases.last().zip(objects.last()).map_or(data_offset, |(b, o)| b + o.size);
        let open = |o: &DataObject| {
            let location = split::resolve(path, &o.name);
            let opened = Self::open_store(&location, remote).and_then(|s| Ok((s.len()?, s)));
            (location, opened)
        };
        let opened: Vec<_> = if objects.len() > 1 && super::is_remote_location(path) {
            std::thread::scope(|s| {
                let handles: Vec<_> = objects.iter().map(|o| s.spawn(move || open(o))).collect();
                handles.into_iter().zip(&objects).map(|(h, o)| h.join().unwrap_or_else(|_| open(o))).collect()
            })
        } else {
            objects.iter().map(open).collect()
        };
        let mut data = Vec::with_capacity(objects.len());
        for ((object, base), (location, opened)) in objects.into_iter().zip(bases).zip(opened) {
            let (len, store) = opened.map_err(|source| AtlasError::Io {
                path: location.clone(),
                source: std::io::Error::new(
                    source.kind(),
                    format!("data object of split atlas {}: {source}", path.display()),
                ),
            })?;
            if len != object.size {
                return Err(AtlasError::Invalid {
                    path: location,
                    what: format!(
                        "data object of split atlas {} is {len} bytes, its index says {} \
                         (replaced or damaged since the merge: rerun the merge, or the shard)",
                        path.display(),
                        object.size
                    ),
                });
            }
            data.push(DataStore { base, object, location, store });
        }
        Ok((data, end))
    }

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
                Store::File(_) => None,
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

    /// Whether the atlas is read over the network.
    pub fn is_remote(&self) -> bool {
        !matches!(self.file, Store::File(_))
    }

    fn starts_with_magic(file: &Store) -> bool {
        let mut b = [0u8; 8];
        file.read_exact_at(&mut b, 0).is_ok() && b == MAGIC
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
        self.paged_entry(paged, tile, paged.order.position(li, m, x, y))
    }

    /// The entry at storage position `position` of a version-2 atlas (for `tile`,
    /// which errors name), through the page cache.
    fn paged_entry(&self, paged: &Paged, tile: TileId, position: u64) -> Result<TileEntry, AtlasError> {
        let per = u64::from(paged.page_entries);
        let page = self.page(paged, position / per, tile)?;
        let at = (position % per) as usize * ENTRY_BYTES;
        let b = page.get(at..at + ENTRY_BYTES).ok_or_else(|| AtlasError::Invalid {
            path: self.path.clone(),
            what: format!("index entry of {tile} (past its page)"),
        })?;
        // The page was checked when it was read.
        decode_entry(b).map_err(|code| AtlasError::Invalid {
            path: self.path.clone(),
            what: format!("codec {code} in the index entry of {tile}"),
        })
    }

    /// Index page `p` of a version-2 atlas: from the page cache, else read (from the
    /// file, or the network and disk cache), checked against its CRC-32 in the root
    /// directory and entry by entry, and cached.
    fn page(&self, paged: &Paged, p: u64, tile: TileId) -> Result<Arc<[u8]>, AtlasError> {
        {
            let mut c = paged.cache.lock().unwrap_or_else(|e| e.into_inner());
            c.tick += 1;
            let tick = c.tick;
            if let Some((bytes, used)) = c.pages.get_mut(&p) {
                *used = tick;
                return Ok(bytes.clone());
            }
        }
        let per = u64::from(paged.page_entries);
        let crc = *paged.page_crcs.get(p as usize).ok_or_else(|| AtlasError::Invalid {
            path: self.path.clone(),
            what: format!("index page {p} of {tile} (past the root directory)"),
        })?;
        let entries = per.min(self.tile_count - p * per);
        let holder = self.page_holder(p);
        let (store, offset, _) = self.page_location(paged, p);
        let mut bytes =
            store.read_page(offset, (entries * ENTRY_BYTES as u64) as u32, crc).map_err(|e| match e {
                ReadError::Io(source) => AtlasError::Changed { path: self.path.clone(), tile, source },
                ReadError::Unavailable(reason) => {
                    AtlasError::Unavailable { path: self.path.clone(), tile, reason }
                }
                ReadError::Replaced => AtlasError::Replaced { path: self.path.clone(), tile },
            })?;
        if crc32fast::hash(&bytes) != crc {
            if self.is_remote() {
                return Err(AtlasError::Unavailable {
                    path: self.path.clone(),
                    tile,
                    reason: format!("index page {p} failed its CRC-32 (damaged in transit or on the server)"),
                });
            }
            return Err(AtlasError::Checksum { path: self.path.clone(), what: "tile index page" });
        }
        for (j, b) in bytes.chunks_exact_mut(ENTRY_BYTES).enumerate() {
            let position = p * per + j as u64;
            let layer = &self.layers[paged.order.layer_at(position)];
            let expect_raw = u64::from(layer.layout.padded_tile_size()).pow(2) * 4;
            let bad = match (decode_entry(b), holder) {
                // Blobs lie before the object's index pages; kept as virtual offsets.
                (Ok(e), Some(d)) => {
                    let fits = e.offset.is_multiple_of(BLOB_ALIGN)
                        && e.offset
                            .checked_add(u64::from(e.length))
                            .is_some_and(|end| end <= d.object.index_offset);
                    // Checked: a forged offset must not overflow (bases fit, see open).
                    let at = d.base.checked_add(e.offset).filter(|_| fits);
                    if let Some(at) = at {
                        b[0..8].copy_from_slice(&at.to_le_bytes());
                    }
                    at.is_none() || u64::from(e.raw_length) != expect_raw
                }
                (Ok(e), None) => !self.entry_in_data(&e, expect_raw),
                (Err(_), _) => true,
            };
            if bad {
                return Err(AtlasError::Invalid {
                    path: self.path.clone(),
                    what: format!(
                        "index page {p}, entry {j} (points outside the data or has a bad codec), read for {tile}"
                    ),
                });
            }
        }
        let bytes: Arc<[u8]> = bytes.into();
        let mut c = paged.cache.lock().unwrap_or_else(|e| e.into_inner());
        c.tick += 1;
        let tick = c.tick;
        if c.pages.insert(p, (bytes.clone(), tick)).is_none() {
            c.bytes += bytes.len();
        }
        while c.bytes > PAGE_CACHE_BYTES && c.pages.len() > 1 {
            let Some((&oldest, _)) = c.pages.iter().filter(|e| *e.0 != p).min_by_key(|e| e.1.1) else {
                break;
            };
            if let Some((b, _)) = c.pages.remove(&oldest) {
                c.bytes -= b.len();
            }
        }
        Ok(bytes)
    }

    /// The data object of a split atlas holding index page `p` (`None`: the file itself).
    fn page_holder(&self, p: u64) -> Option<&DataStore> {
        self.data.iter().rposition(|d| u64::from(d.object.first_page) <= p).map(|k| &self.data[k])
    }

    /// Where index page `p` lies: its store, offset and length in bytes. A split atlas'
    /// page lies in the data object holding it, its entries' offsets relative to that
    /// object.
    fn page_location(&self, paged: &Paged, p: u64) -> (&Store, u64, u64) {
        let per = u64::from(paged.page_entries);
        let len = per.min(self.tile_count.saturating_sub(p * per)) * ENTRY_BYTES as u64;
        match self.page_holder(p) {
            Some(d) => {
                let within = (p - u64::from(d.object.first_page)) * per * ENTRY_BYTES as u64;
                (&d.store, d.object.index_offset + within, len)
            }
            None => (&self.file, self.index_offset + p * per * ENTRY_BYTES as u64, len),
        }
    }

    /// Whether `e` points at an aligned blob inside the data, of the decoded size
    /// `expect_raw`.
    fn entry_in_data(&self, e: &TileEntry, expect_raw: u64) -> bool {
        let Some(end) = e.offset.checked_add(u64::from(e.length)) else { return false };
        e.offset >= self.data_offset
            && e.offset.is_multiple_of(BLOB_ALIGN)
            && end <= self.data_end
            && u64::from(e.raw_length) == expect_raw
            // In a split atlas, inside one data object.
            && self.data_at(e.offset).is_none_or(|d| end <= d.base + d.object.size)
    }

    /// The file's first bytes as read at open: header, layer table and root directory
    /// (version 2, with a split atlas' object table) or the whole index (version 1). Two
    /// atlases with equal bytes here have equal indexes (version 2 through the page
    /// checksums).
    pub fn meta_bytes(&self) -> &[u8] {
        &self.meta
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

    /// The file this atlas was opened from.
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
        let no = || AtlasError::NoSuchTile { path: self.path.clone(), tile };
        let layer = self.layers.get(usize::from(tile.layer)).ok_or_else(no)?;
        let i = layer.layout.tile_index(u32::from(tile.mip), tile.x, tile.y).ok_or_else(no)?;
        match &self.paged {
            Some(paged) => {
                let position =
                    paged.order.position(usize::from(tile.layer), u32::from(tile.mip), tile.x, tile.y);
                self.paged_entry(paged, tile, position)
            }
            None => self.entry_at(layer.first_tile + i),
        }
    }

    /// The stored bytes of `tile`, after checking their CRC. A file that shrank or
    /// changed since it was opened gives [`AtlasError::Changed`] or
    /// [`AtlasError::TileChecksum`], never a crash.
    pub fn read_tile(&self, tile: TileId) -> Result<Vec<u8>, AtlasError> {
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
        #[cfg(feature = "remote")]
        if self.is_remote() {
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
        if !self.is_remote() {
            return vec![None; tiles.len()];
        }
        tiles
            .iter()
            .map(|&t| {
                let e = self.entry_if_cached(t)?;
                let (store, at) = self.blob_store(e.offset);
                #[cfg(feature = "remote")]
                if let Store::Remote(r) = store {
                    return r.cached_blob(at, e.length, e.crc32);
                }
                let _ = (store, at);
                None
            })
            .collect()
    }

    /// `tile`'s index entry if it is known without reading: version 1 (the index was
    /// read at open), or a version-2 page in the page cache.
    fn entry_if_cached(&self, tile: TileId) -> Option<TileEntry> {
        let Some(paged) = &self.paged else { return self.entry(tile).ok() };
        let layer = self.layers.get(usize::from(tile.layer))?;
        if !layer.layout.contains(tile) {
            return None;
        }
        let position = paged.order.position(usize::from(tile.layer), u32::from(tile.mip), tile.x, tile.y);
        let per = u64::from(paged.page_entries);
        let p = position / per;
        let cached = paged.cache.lock().unwrap_or_else(|e| e.into_inner()).pages.contains_key(&p);
        if !cached {
            // A page the opening bytes, the read-ahead or the disk cache hold is read now.
            let (store, offset, len) = self.page_location(paged, p);
            let at_hand = match store {
                #[cfg(feature = "remote")]
                Store::Remote(r) => r.at_hand(offset, len),
                Store::File(_) => {
                    let _ = (offset, len);
                    true
                }
            };
            if !at_hand {
                return None;
            }
        }
        self.paged_entry(paged, tile, position).ok()
    }

    /// Version 2: reads the index pages of `tiles` not in the page cache, all at once
    /// (one thread each), so a batch waits one round trip for its pages, not one per
    /// page. Errors are left for the entries' own reads to report.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    fn load_pages_for(&self, tiles: &[TileId]) {
        let Some(paged) = &self.paged else { return };
        let per = u64::from(paged.page_entries);
        let mut missing: Vec<(u64, TileId)> = Vec::new();
        {
            let c = paged.cache.lock().unwrap_or_else(|e| e.into_inner());
            for &t in tiles {
                let Some(layer) = self.layers.get(usize::from(t.layer)) else { continue };
                if !layer.layout.contains(t) {
                    continue;
                }
                let p = paged.order.position(usize::from(t.layer), u32::from(t.mip), t.x, t.y) / per;
                if !c.pages.contains_key(&p) && !missing.iter().any(|m| m.0 == p) {
                    missing.push((p, t));
                }
            }
        }
        if missing.len() < 2 {
            return;
        }
        // At most 16 at once; any others are read when their entries are.
        missing.truncate(16);
        std::thread::scope(|s| {
            for &(p, t) in &missing {
                s.spawn(move || {
                    let _ = self.page(paged, p, t);
                });
            }
        });
    }

    /// `blob` as read for `tile` (entry `e`), with read errors mapped and its CRC checked.
    fn checked_blob(
        &self,
        tile: TileId,
        e: &TileEntry,
        blob: Result<Vec<u8>, ReadError>,
    ) -> Result<Vec<u8>, AtlasError> {
        let blob = blob.map_err(|err| match err {
            ReadError::Io(source) => AtlasError::Changed { path: self.path.clone(), tile, source },
            ReadError::Unavailable(reason) => {
                AtlasError::Unavailable { path: self.path.clone(), tile, reason }
            }
            ReadError::Replaced => AtlasError::Replaced { path: self.path.clone(), tile },
        })?;
        if crc32fast::hash(&blob) != e.crc32 {
            if self.is_remote() {
                // Damaged in transit as likely as on the server: asked for again later
                // (the disk cache only ever keeps blobs that passed).
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

    /// The payload texels (RGBA8, tile borders left out) of the rectangle `[x, y, w, h]`
    /// of mip `mip` of layer `layer`, decoded from the tiles covering it: `w × h × 4`
    /// bytes, row after row.
    pub fn read_texels(&self, layer: u16, mip: u32, rect: [u32; 4]) -> Result<Vec<u8>, AtlasError> {
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
                let tile = self.decode_tile(TileId::new(layer, mip as u8, tx, ty))?;
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

    /// Reads, checks and decodes every tile (in parallel); returns one error per bad
    /// tile, in tile order, and also any non-zero byte in the padding between blobs.
    pub fn verify(&self, progress: &dyn crate::progress::Progress) -> Vec<AtlasError> {
        use rayon::prelude::*;
        let tiles: Vec<TileId> =
            self.layers.iter().enumerate().flat_map(|(i, l)| l.layout.tiles(i as u16)).collect();
        progress.set_length(tiles.len() as u64);
        // Tiles sharing one blob (a deduplicated or copied tile) share one index entry:
        // each distinct entry is read and decoded once, and a bad one is then reported
        // for every tile that has it.
        // A remote atlas reads its index pages in batches first (one request each, at most
        // 16 at once), not one round trip per page as entries are asked for.
        if self.is_remote() {
            for chunk in tiles.chunks(4096) {
                self.load_pages_for(chunk);
            }
        }
        let entries: Vec<Option<TileEntry>> = tiles.par_iter().map(|&t| self.entry(t).ok()).collect();
        // Everything decoding a blob depends on.
        let blob = |e: &TileEntry| (e.offset, e.length, e.raw_length, e.crc32, e.codec as u8);
        let mut first_of: HashMap<(u64, u32, u32, u32, u8), usize> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            if let Some(e) = e {
                first_of.entry(blob(e)).or_insert(i);
            }
        }
        let mut firsts: Vec<usize> = first_of.values().copied().collect();
        let decodes = |i: usize, stored: Result<Vec<u8>, AtlasError>| {
            let e = entries[i]?;
            let good = stored.is_ok_and(|b| e.codec.decode(&b, e.raw_length as usize).is_ok());
            (!good).then_some(blob(&e))
        };
        let bad: std::collections::HashSet<(u64, u32, u32, u32, u8)> = if self.is_remote() {
            // Blobs in storage order, read in batches: neighbours share coalesced ranges.
            firsts.sort_unstable_by_key(|&i| entries[i].map_or(0, |e| e.offset));
            firsts
                .chunks(REMOTE_VERIFY_BATCH)
                .flat_map(|chunk| {
                    let batch: Vec<TileId> = chunk.iter().map(|&i| tiles[i]).collect();
                    let stored = self.read_tiles(&batch, &|_| true);
                    chunk.par_iter().zip(stored).filter_map(|(&i, b)| decodes(i, b)).collect::<Vec<_>>()
                })
                .collect()
        } else {
            firsts.par_iter().filter_map(|&i| decodes(i, self.read_tile(tiles[i]))).collect()
        };
        let mut errors: Vec<AtlasError> = tiles
            .par_iter()
            .zip(entries.par_iter())
            .filter_map(|(&t, e)| {
                let r = match e {
                    // The error names this tile: decoded again, only for bad blobs.
                    Some(e) if !bad.contains(&blob(e)) => None,
                    _ => self.decode_tile(t).err().map(|err| match err {
                        // A damaged page's error, named for each of its tiles.
                        AtlasError::Checksum { .. } | AtlasError::Invalid { .. } => AtlasError::TileIndex {
                            path: self.path.clone(),
                            tile: t,
                            reason: err.to_string(),
                        },
                        // A remote body that failed its CRC-32 twice (the batch, then
                        // this read): damaged on the server, not in transit.
                        AtlasError::Unavailable { ref reason, .. } if reason.contains(CRC_FAILED) => {
                            AtlasError::TileChecksum { path: self.path.clone(), tile: t }
                        }
                        other => other,
                    }),
                };
                progress.inc(1);
                r
            })
            .collect();
        // A split atlas' data objects hold their parts' own records between the blobs, and
        // a remote atlas' padding is not worth a request per gap: blobs are checked there.
        let index_read = entries.iter().all(Option::is_some);
        let structure = if !index_read {
            None
        } else if self.is_split() || self.is_remote() {
            self.check_overlap().err()
        } else {
            self.check_padding()
        };
        errors.extend(structure);
        errors
    }

    /// Blobs are identical or disjoint, and (version 2) add up to the root directory's
    /// stored bytes. Returns the blobs' spans, sorted.
    fn check_overlap(&self) -> Result<Vec<(u64, u64)>, AtlasError> {
        let mut spans: Vec<(u64, u64)> = (0..self.tile_count)
            .filter_map(|i| self.entry_at(i).ok())
            .map(|e| (e.offset, e.offset + u64::from(e.length)))
            .collect();
        // Version 2 checks this here rather than when opening (its index is not read whole).
        match shared_spans(&mut spans) {
            Err((a, b)) => Err(AtlasError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "tile index: blobs [{}, {}) and [{}, {}) partially overlap \
                     (blobs must be identical or disjoint)",
                    a.0, a.1, b.0, b.1
                ),
            }),
            Ok(stored) if stored != self.stored_bytes => Err(AtlasError::Invalid {
                path: self.path.clone(),
                what: format!("root directory says {} bytes of blobs, the index {stored}", self.stored_bytes),
            }),
            Ok(_) => Ok(spans),
        }
    }

    /// Every byte between the index and the end of the file belongs to a blob or is zero padding.
    fn check_padding(&self) -> Option<AtlasError> {
        let spans = match self.check_overlap() {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let index_end = self.index_offset + self.tile_count * ENTRY_BYTES as u64;
        let mut pos = index_end;
        let end_of_file = (self.len, self.len);
        for (start, end) in spans.into_iter().chain(std::iter::once(end_of_file)) {
            if start > pos {
                match self.first_nonzero(pos, start) {
                    Ok(None) => {}
                    Ok(Some(at)) => {
                        return Some(AtlasError::Invalid {
                            path: self.path.clone(),
                            what: format!("padding byte at offset {at} is not zero (file corrupted)"),
                        });
                    }
                    Err(source) => return Some(AtlasError::Io { path: self.path.clone(), source }),
                }
            }
            pos = pos.max(end);
        }
        None
    }
}

impl Atlas {
    /// The offset of the first non-zero byte in `[start, end)` of the file, read in chunks.
    fn first_nonzero(&self, start: u64, end: u64) -> std::io::Result<Option<u64>> {
        let mut buf = vec![0u8; 1 << 16];
        let mut pos = start;
        while pos < end {
            let n = ((end - pos) as usize).min(buf.len());
            self.file.read_exact_at(&mut buf[..n], pos).map_err(ReadError::into_io)?;
            if let Some(k) = buf[..n].iter().position(|&v| v != 0) {
                return Ok(Some(pos + k as u64));
            }
            pos += n as u64;
        }
        Ok(None)
    }
}

/// Checks the fixed header `h` of a file of `len` bytes at `path` (magic, version,
/// checksum, size, flags, file size, layer count) and decodes it.
fn read_header(h: &[u8], path: &Path, len: u64) -> Result<Header, AtlasError> {
    let path = path.to_path_buf();
    if h[0..8] != MAGIC {
        return Err(AtlasError::BadMagic { path });
    }
    let version = rd_u32(h, 8);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(AtlasError::UnsupportedVersion { path, found: version });
    }
    if rd_u32(h, 60) != crc32fast::hash(&h[0..60]) {
        return Err(AtlasError::Checksum { path, what: "header" });
    }
    let header = Header::decode(h);
    let invalid = |what: String| AtlasError::Invalid { path: path.clone(), what };
    if rd_u32(h, 12) != HEADER_BYTES as u32 {
        return Err(invalid(format!("header size {}", rd_u32(h, 12))));
    }
    if header.flags & !KNOWN_FLAGS != 0 {
        return Err(invalid(format!(
            "header flags {:#x}: unknown flag bits {:#x} (this build knows {KNOWN_FLAGS:#x})",
            header.flags,
            header.flags & !KNOWN_FLAGS
        )));
    }
    if header.file_size != len {
        return Err(AtlasError::Truncated { path, expected: header.file_size, found: len });
    }
    if header.layer_count == 0 || header.layer_count > MAX_LAYERS {
        return Err(invalid(format!("layer count {}", header.layer_count)));
    }
    Ok(header)
}

/// Decodes and checks the layer table that follows the header in `map`: every layout,
/// codec, wrap mode and colour space, first tiles that follow each other, the header's
/// tile count and, for stacked atlases, one shared layout.
fn read_layers(meta: &[u8], header: &Header, path: &Path) -> Result<Vec<LayerInfo>, AtlasError> {
    let invalid = |what: String| AtlasError::Invalid { path: path.to_path_buf(), what };
    let mut layers = Vec::with_capacity(header.layer_count as usize);
    let mut next_tile = 0u64;
    for i in 0..header.layer_count as usize {
        let b = &meta[HEADER_BYTES + i * LAYER_BYTES..HEADER_BYTES + (i + 1) * LAYER_BYTES];
        let layer = read_layer(b, i).map_err(invalid)?;
        if layer.first_tile != next_tile {
            return Err(invalid(format!("layer {i} first tile {} (expected {next_tile})", layer.first_tile)));
        }
        next_tile += layer.layout.tile_count();
        layers.push(layer);
    }
    if next_tile != header.tile_count {
        return Err(invalid(format!("tile count {} (layers hold {next_tile})", header.tile_count)));
    }
    if header.flags & FLAG_STACKED != 0
        && let Some(what) = stacked_mismatch(&layers)
    {
        return Err(invalid(what));
    }
    Ok(layers)
}

/// Decodes the 64-byte record `b` of layer `i`, or says which field is invalid.
fn read_layer(b: &[u8], i: usize) -> Result<LayerInfo, String> {
    let name_len = b[..MAX_NAME_BYTES].iter().position(|&c| c == 0).unwrap_or(MAX_NAME_BYTES);
    let name =
        std::str::from_utf8(&b[..name_len]).map_err(|_| format!("layer {i} name (not UTF-8)"))?.to_string();
    let f = |k: usize| rd_u32(b, 32 + 4 * k);
    let layout = TextureLayout::new(f(0), f(1), f(2), f(3)).map_err(|e| format!("layer {i} layout: {e}"))?;
    if layout.mip_count() != f(4) {
        return Err(format!("layer {i} mip count {} (expected {})", f(4), layout.mip_count()));
    }
    let codec = Codec::from_code(b[52]).ok_or_else(|| format!("layer {i} codec {}", b[52]))?;
    let wrap = match b[53] {
        0 => Wrap::Clamp,
        1 => Wrap::Repeat,
        w => return Err(format!("layer {i} wrap mode {w}")),
    };
    let color = match b[54] {
        0 => ColorSpace::Srgb,
        1 => ColorSpace::Linear,
        c => return Err(format!("layer {i} colour space {c}")),
    };
    Ok(LayerInfo { name, layout, codec, wrap, color, first_tile: rd_u64(b, 56) })
}

/// The tile index entry encoded in `b` (24 bytes), or the unknown codec byte.
pub(crate) fn decode_entry(b: &[u8]) -> Result<TileEntry, u8> {
    let codec = Codec::from_code(b[20]).ok_or(b[20])?;
    Ok(TileEntry {
        offset: rd_u64(b, 0),
        length: rd_u32(b, 8),
        raw_length: rd_u32(b, 12),
        crc32: rd_u32(b, 16),
        codec,
    })
}
