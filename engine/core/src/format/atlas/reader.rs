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

use super::header::{
    BLOB_ALIGN, ENTRY_BYTES, FLAG_STACKED, HEADER_BYTES, Header, KNOWN_FLAGS, LAYER_BYTES, MAGIC,
    MAX_NAME_BYTES, VERSION, rd_u32, rd_u64,
};
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
        } else {
            Self::Io(std::io::Error::other(e.to_string()))
        }
    }

    fn into_io(self) -> std::io::Error {
        match self {
            Self::Io(e) => e,
            Self::Unavailable(m) => std::io::Error::other(m),
        }
    }
}

/// A validated atlas: header, layer table and tile index in memory, tiles read on
/// demand. Cheap to share between loader threads.
pub struct Atlas {
    path: PathBuf,
    file: Store,
    /// The file's length when it was opened.
    len: u64,
    /// Header, layer table and tile index (the file's first bytes, up to the index end).
    meta: Vec<u8>,
    layers: Vec<LayerInfo>,
    index_offset: usize,
    tile_count: u64,
    data_offset: u64,
    stored_bytes: u64,
    flags: u32,
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
        let index_end = header
            .tile_count
            .checked_mul(ENTRY_BYTES as u64)
            .and_then(|n| n.checked_add(header.index_offset))
            .filter(|&end| {
                header.index_offset == table_end && end <= header.data_offset && header.data_offset <= len
            })
            .ok_or_else(|| invalid("index or data offsets".into()))?;
        let meta_len =
            usize::try_from(index_end).map_err(|_| invalid("tile index larger than memory".into()))?;
        let mut meta = vec![0u8; meta_len];
        file.read_exact_at(&mut meta, 0).map_err(io)?;
        if crc32fast::hash(&meta[HEADER_BYTES..]) != header.meta_crc {
            return Err(AtlasError::Checksum { path, what: "layer table and tile index" });
        }
        let layers = read_layers(&meta, &header, &path)?;
        let mut atlas = Atlas {
            path,
            file,
            len,
            meta,
            layers,
            index_offset: header.index_offset as usize,
            tile_count: header.tile_count,
            data_offset: header.data_offset,
            stored_bytes: 0,
            flags: header.flags,
        };
        atlas.stored_bytes = atlas.check_index(len)?;
        #[cfg(feature = "remote")]
        if let Store::Remote(r) = &atlas.file {
            r.remember_meta(&atlas.meta);
        }
        Ok(atlas)
    }

    /// Checks that every index entry points at an aligned blob inside the data and of
    /// the decoded size its layer implies, and that blobs are identical or disjoint;
    /// returns the bytes of the distinct blobs.
    fn check_index(&self, len: u64) -> Result<u64, AtlasError> {
        let mut stored_bytes = 0u64;
        // Blobs in ascending, disjoint order need no sort; shared or reordered ones do.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let (mut in_order, mut prev_end) = (true, 0u64);
        for (li, layer) in self.layers.iter().enumerate() {
            let expect_raw = u64::from(layer.layout.padded_tile_size()).pow(2) * 4;
            for i in 0..layer.layout.tile_count() {
                let e = self.entry_at(layer.first_tile + i)?;
                stored_bytes += u64::from(e.length);
                let bad = e.offset < self.data_offset
                    || e.offset % BLOB_ALIGN != 0
                    || e.offset.checked_add(u64::from(e.length)).is_none_or(|end| end > len)
                    || u64::from(e.raw_length) != expect_raw;
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
        File::open(path).map(Store::File)
    }

    /// The network counters of a remote atlas (`None` for a local file).
    pub fn network_stats(&self) -> Option<super::NetworkStats> {
        match &self.file {
            #[cfg(feature = "remote")]
            Store::Remote(r) => Some(r.stats()),
            Store::File(_) => None,
        }
    }

    /// Whether the atlas is read over the network.
    pub fn is_remote(&self) -> bool {
        !matches!(self.file, Store::File(_))
    }

    fn starts_with_magic(file: &Store) -> bool {
        let mut b = [0u8; 8];
        file.read_exact_at(&mut b, 0).is_ok() && b == MAGIC
    }

    /// The index entry of the `i`-th tile of the atlas (layers in order).
    pub(super) fn entry_at(&self, i: u64) -> Result<TileEntry, AtlasError> {
        let at = self.index_offset + i as usize * ENTRY_BYTES;
        let b = self.meta.get(at..at + ENTRY_BYTES).ok_or_else(|| AtlasError::Invalid {
            path: self.path.clone(),
            what: format!("tile index entry {i} (past the index)"),
        })?;
        let codec = Codec::from_code(b[20]).ok_or_else(|| AtlasError::Invalid {
            path: self.path.clone(),
            what: format!("codec {} in tile index entry {i}", b[20]),
        })?;
        Ok(TileEntry {
            offset: rd_u64(b, 0),
            length: rd_u32(b, 8),
            raw_length: rd_u32(b, 12),
            crc32: rd_u32(b, 16),
            codec,
        })
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
        self.entry_at(layer.first_tile + i)
    }

    /// The stored bytes of `tile`, after checking their CRC. A file that shrank or
    /// changed since it was opened gives [`AtlasError::Changed`] or
    /// [`AtlasError::TileChecksum`], never a crash.
    pub fn read_tile(&self, tile: TileId) -> Result<Vec<u8>, AtlasError> {
        let e = self.entry(tile)?;
        let blob = self.file.read_blob(e.offset, e.length, e.crc32).map_err(|err| match err {
            ReadError::Io(source) => AtlasError::Changed { path: self.path.clone(), tile, source },
            ReadError::Unavailable(reason) => {
                AtlasError::Unavailable { path: self.path.clone(), tile, reason }
            }
        })?;
        if crc32fast::hash(&blob) != e.crc32 {
            if self.is_remote() {
                // Damaged in transit as likely as on the server: asked for again later
                // (the disk cache only ever keeps blobs that passed).
                return Err(AtlasError::Unavailable {
                    path: self.path.clone(),
                    tile,
                    reason: "the body failed its CRC-32 (damaged in transit or on the server)".into(),
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
        let entries: Vec<Option<TileEntry>> = tiles.par_iter().map(|&t| self.entry(t).ok()).collect();
        // Everything decoding a blob depends on.
        let blob = |e: &TileEntry| (e.offset, e.length, e.raw_length, e.crc32, e.codec as u8);
        let mut first_of: HashMap<(u64, u32, u32, u32, u8), usize> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            if let Some(e) = e {
                first_of.entry(blob(e)).or_insert(i);
            }
        }
        let firsts: Vec<usize> = first_of.values().copied().collect();
        let bad: std::collections::HashSet<(u64, u32, u32, u32, u8)> = firsts
            .par_iter()
            .filter_map(|&i| {
                let e = entries[i]?;
                self.decode_tile(tiles[i]).is_err().then_some(blob(&e))
            })
            .collect();
        let mut errors: Vec<AtlasError> = tiles
            .par_iter()
            .zip(entries.par_iter())
            .filter_map(|(&t, e)| {
                let r = match e {
                    // The error names this tile: decoded again, only for bad blobs.
                    Some(e) if !bad.contains(&blob(e)) => None,
                    _ => self.decode_tile(t).err(),
                };
                progress.inc(1);
                r
            })
            .collect();
        if let Some(e) = self.check_padding() {
            errors.push(e);
        }
        errors
    }

    /// Every byte between the index and the end of the file belongs to a blob or is zero padding.
    fn check_padding(&self) -> Option<AtlasError> {
        let mut spans: Vec<(u64, u64)> = (0..self.tile_count)
            .filter_map(|i| self.entry_at(i).ok())
            .map(|e| (e.offset, e.offset + u64::from(e.length)))
            .collect();
        spans.sort_unstable();
        let index_end = self.index_offset as u64 + self.tile_count * ENTRY_BYTES as u64;
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
    if version != VERSION {
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
