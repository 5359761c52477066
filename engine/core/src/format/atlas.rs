//! The `.tsa` atlas file, version 1: a memory-mapped, validated reader and an
//! atomic streaming writer. The byte layout is specified in `docs/atlas-format.md`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde::{Deserialize, Serialize};

use crate::format::codec::{Codec, CodecError};
pub use crate::format::color::ColorSpace;
use crate::format::tile::{LayoutError, MAX_LAYERS, TextureLayout, TileId};

/// The eight bytes every atlas starts with.
pub const MAGIC: [u8; 8] = *b"TSRATLAS";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_BYTES: usize = 64;
/// Size of one layer record in bytes.
pub const LAYER_BYTES: usize = 64;
/// Size of one tile index entry in bytes.
pub const ENTRY_BYTES: usize = 24;
/// Alignment of every tile blob in the file.
pub const BLOB_ALIGN: u64 = 16;
/// Longest layer name in bytes.
pub const MAX_NAME_BYTES: usize = 32;
/// Header flag bit 0: the layers are *stacked*. Every layer has the same
/// [`TextureLayout`] and they share tile ids: tile (mip, x, y) of every layer is
/// streamed, made resident and evicted together, and layer 0 is the one the page
/// table and feedback index (albedo, normal, ORM of one material atlas).
pub const FLAG_STACKED: u32 = 1;
/// Every header flag bit this build understands; a reader rejects any other bit.
pub const KNOWN_FLAGS: u32 = FLAG_STACKED;

/// How texels outside a texture are found when building borders (and sampling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Wrap {
    /// Repeat the edge texel.
    Clamp = 0,
    /// Continue from the opposite edge.
    Repeat = 1,
}

/// One layer (independent virtual texture) of an atlas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerInfo {
    /// Name given at bake time (usually the input file's stem).
    pub name: String,
    /// Size, tiles and mips.
    pub layout: TextureLayout,
    /// The codec tiles were baked with (a tile may still be stored raw when that is smaller).
    pub codec: Codec,
    /// Border and sampling behaviour at the edges.
    pub wrap: Wrap,
    /// How texels are encoded.
    pub color: ColorSpace,
    /// Index of this layer's first entry in the atlas tile index.
    pub first_tile: u64,
}

/// Where one tile is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileEntry {
    /// Byte offset of the blob in the file.
    pub offset: u64,
    /// Blob length in bytes.
    pub length: u32,
    /// Decoded length in bytes.
    pub raw_length: u32,
    /// CRC-32 (IEEE) of the blob.
    pub crc32: u32,
    /// Codec the blob is stored with.
    pub codec: Codec,
}

/// Everything that can be wrong with an atlas file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AtlasError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The atlas path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file does not start with the atlas magic.
    #[error("{path}: not a Tessera atlas (bad magic bytes)")]
    BadMagic {
        /// The atlas path.
        path: PathBuf,
    },
    /// The file is of a format version this build does not read.
    #[error("{path}: unsupported atlas version {found} (this build reads version {VERSION})")]
    UnsupportedVersion {
        /// The atlas path.
        path: PathBuf,
        /// Version found in the file.
        found: u32,
    },
    /// The file is shorter (or longer) than its header says.
    #[error("{path}: truncated or extended: header says {expected} bytes, file has {found}")]
    Truncated {
        /// The atlas path.
        path: PathBuf,
        /// Size the header records.
        expected: u64,
        /// Actual size.
        found: u64,
    },
    /// A checksum over the header or the index does not match.
    #[error("{path}: {what} checksum mismatch (file corrupted)")]
    Checksum {
        /// The atlas path.
        path: PathBuf,
        /// Which part.
        what: &'static str,
    },
    /// A header, layer or index field is out of range.
    #[error("{path}: invalid {what}")]
    Invalid {
        /// The atlas path.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A tile id outside every layer was asked for.
    #[error("{path}: {tile} does not exist in this atlas")]
    NoSuchTile {
        /// The atlas path.
        path: PathBuf,
        /// The tile asked for.
        tile: TileId,
    },
    /// A tile's data does not match its CRC.
    #[error("{path}: {tile}: data checksum mismatch (corrupted tile)")]
    TileChecksum {
        /// The atlas path.
        path: PathBuf,
        /// The bad tile.
        tile: TileId,
    },
    /// A tile's data passed its CRC but cannot be decoded.
    #[error("{path}: {tile}: {source}")]
    TileDecode {
        /// The atlas path.
        path: PathBuf,
        /// The bad tile.
        tile: TileId,
        /// The codec's complaint.
        source: CodecError,
    },
    /// A layout could not be built (writer side).
    #[error("{path}: {source}")]
    Layout {
        /// The atlas path.
        path: PathBuf,
        /// The layout problem.
        source: LayoutError,
    },
}

impl AtlasError {
    /// The tile the error is about, when it is about one tile.
    pub fn tile(&self) -> Option<TileId> {
        match self {
            AtlasError::TileChecksum { tile, .. }
            | AtlasError::TileDecode { tile, .. }
            | AtlasError::NoSuchTile { tile, .. } => Some(*tile),
            _ => None,
        }
    }
}

fn rd_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn rd_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

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

/// The fixed header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    layer_count: u32,
    flags: u32,
    tile_count: u64,
    index_offset: u64,
    data_offset: u64,
    file_size: u64,
    meta_crc: u32,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.layer_count.to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..32].copy_from_slice(&self.tile_count.to_le_bytes());
        b[32..40].copy_from_slice(&self.index_offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.data_offset.to_le_bytes());
        b[48..56].copy_from_slice(&self.file_size.to_le_bytes());
        b[56..60].copy_from_slice(&self.meta_crc.to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

fn encode_layer(l: &LayerInfo) -> [u8; LAYER_BYTES] {
    let mut b = [0u8; LAYER_BYTES];
    let name = truncate_name(&l.name);
    b[..name.len()].copy_from_slice(name.as_bytes());
    let lay = &l.layout;
    for (i, v) in
        [lay.width(), lay.height(), lay.tile_size(), lay.border(), lay.mip_count()].into_iter().enumerate()
    {
        b[32 + 4 * i..36 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    b[52] = l.codec as u8;
    b[53] = l.wrap as u8;
    b[54] = l.color as u8;
    b[56..64].copy_from_slice(&l.first_tile.to_le_bytes());
    b
}

/// Cuts a name to at most [`MAX_NAME_BYTES`] on a character boundary.
pub fn truncate_name(name: &str) -> &str {
    let mut end = name.len().min(MAX_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

fn encode_entry(e: &TileEntry) -> [u8; ENTRY_BYTES] {
    let mut b = [0u8; ENTRY_BYTES];
    b[0..8].copy_from_slice(&e.offset.to_le_bytes());
    b[8..12].copy_from_slice(&e.length.to_le_bytes());
    b[12..16].copy_from_slice(&e.raw_length.to_le_bytes());
    b[16..20].copy_from_slice(&e.crc32.to_le_bytes());
    b[20] = e.codec as u8;
    b
}

/// A validated, memory-mapped atlas. Cheap to share between loader threads.
pub struct Atlas {
    path: PathBuf,
    map: Mmap,
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
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AtlasError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| AtlasError::Io { path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let invalid = |what: String| AtlasError::Invalid { path: path.clone(), what };
        if len < HEADER_BYTES as u64 {
            if len >= 8 && !Self::starts_with_magic(&file) {
                return Err(AtlasError::BadMagic { path });
            }
            return Err(AtlasError::Truncated { path, expected: HEADER_BYTES as u64, found: len });
        }
        // SAFETY: the map is read-only; atlases are replaced by rename, never
        // rewritten in place, so the mapped bytes do not change under us.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let h = &map[..HEADER_BYTES];
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
        let header = Header {
            layer_count: rd_u32(h, 16),
            flags: rd_u32(h, 20),
            tile_count: rd_u64(h, 24),
            index_offset: rd_u64(h, 32),
            data_offset: rd_u64(h, 40),
            file_size: rd_u64(h, 48),
            meta_crc: rd_u32(h, 56),
        };
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
        let table_end = HEADER_BYTES as u64 + u64::from(header.layer_count) * LAYER_BYTES as u64;
        let index_end = header
            .tile_count
            .checked_mul(ENTRY_BYTES as u64)
            .and_then(|n| n.checked_add(header.index_offset))
            .filter(|&end| {
                header.index_offset == table_end && end <= header.data_offset && header.data_offset <= len
            })
            .ok_or_else(|| invalid("index or data offsets".into()))?;
        let meta = &map[HEADER_BYTES..index_end as usize];
        if crc32fast::hash(meta) != header.meta_crc {
            return Err(AtlasError::Checksum { path, what: "layer table and tile index" });
        }
        let mut layers = Vec::with_capacity(header.layer_count as usize);
        let mut next_tile = 0u64;
        for i in 0..header.layer_count as usize {
            let b = &map[HEADER_BYTES + i * LAYER_BYTES..HEADER_BYTES + (i + 1) * LAYER_BYTES];
            let name_len = b[..MAX_NAME_BYTES].iter().position(|&c| c == 0).unwrap_or(MAX_NAME_BYTES);
            let name = std::str::from_utf8(&b[..name_len])
                .map_err(|_| invalid(format!("layer {i} name (not UTF-8)")))?
                .to_string();
            let f = |k: usize| rd_u32(b, 32 + 4 * k);
            let layout = TextureLayout::new(f(0), f(1), f(2), f(3))
                .map_err(|e| invalid(format!("layer {i} layout: {e}")))?;
            if layout.mip_count() != f(4) {
                return Err(invalid(format!(
                    "layer {i} mip count {} (expected {})",
                    f(4),
                    layout.mip_count()
                )));
            }
            let codec =
                Codec::from_code(b[52]).ok_or_else(|| invalid(format!("layer {i} codec {}", b[52])))?;
            let wrap = match b[53] {
                0 => Wrap::Clamp,
                1 => Wrap::Repeat,
                w => return Err(invalid(format!("layer {i} wrap mode {w}"))),
            };
            let color = match b[54] {
                0 => ColorSpace::Srgb,
                1 => ColorSpace::Linear,
                c => return Err(invalid(format!("layer {i} colour space {c}"))),
            };
            let first_tile = rd_u64(b, 56);
            if first_tile != next_tile {
                return Err(invalid(format!("layer {i} first tile {first_tile} (expected {next_tile})")));
            }
            next_tile += layout.tile_count();
            layers.push(LayerInfo { name, layout, codec, wrap, color, first_tile });
        }
        if next_tile != header.tile_count {
            return Err(invalid(format!("tile count {} (layers hold {next_tile})", header.tile_count)));
        }
        if header.flags & FLAG_STACKED != 0
            && let Some(what) = stacked_mismatch(&layers)
        {
            return Err(invalid(what));
        }
        let atlas = Atlas {
            path,
            map,
            layers,
            index_offset: header.index_offset as usize,
            tile_count: header.tile_count,
            data_offset: header.data_offset,
            stored_bytes: 0,
            flags: header.flags,
        };
        let mut atlas = atlas;
        let mut stored_bytes = 0u64;
        // Blobs in ascending, disjoint order need no sort; shared or reordered ones do.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let (mut in_order, mut prev_end) = (true, 0u64);
        for (li, layer) in atlas.layers.iter().enumerate() {
            let expect_raw = u64::from(layer.layout.padded_tile_size()).pow(2) * 4;
            for i in 0..layer.layout.tile_count() {
                let e = atlas.entry_at(layer.first_tile + i)?;
                stored_bytes += u64::from(e.length);
                let bad = e.offset < atlas.data_offset
                    || e.offset % BLOB_ALIGN != 0
                    || e.offset.checked_add(u64::from(e.length)).is_none_or(|end| end > len)
                    || u64::from(e.raw_length) != expect_raw;
                if bad {
                    let (m, x, y) = layer.layout.tile_at_index(i).unwrap_or_default();
                    let tile = TileId::new(li as u16, m as u8, x, y);
                    return Err(AtlasError::Invalid {
                        path: atlas.path.clone(),
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
                path: atlas.path.clone(),
                what: format!(
                    "tile index: blobs [{}, {}) and [{}, {}) partially overlap \
                     (blobs must be identical or disjoint)",
                    a.0, a.1, b.0, b.1
                ),
            })?;
        }
        atlas.stored_bytes = stored_bytes;
        Ok(atlas)
    }

    fn starts_with_magic(file: &File) -> bool {
        let mut b = [0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut b, 0).is_ok() && b == MAGIC
    }

    fn entry_at(&self, i: u64) -> Result<TileEntry, AtlasError> {
        let at = self.index_offset + i as usize * ENTRY_BYTES;
        let b = &self.map[at..at + ENTRY_BYTES];
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

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }

    /// Where `tile` is stored.
    pub fn entry(&self, tile: TileId) -> Result<TileEntry, AtlasError> {
        let no = || AtlasError::NoSuchTile { path: self.path.clone(), tile };
        let layer = self.layers.get(usize::from(tile.layer)).ok_or_else(no)?;
        let i = layer.layout.tile_index(u32::from(tile.mip), tile.x, tile.y).ok_or_else(no)?;
        self.entry_at(layer.first_tile + i)
    }

    /// The stored bytes of `tile`, after checking their CRC.
    pub fn read_tile(&self, tile: TileId) -> Result<&[u8], AtlasError> {
        let e = self.entry(tile)?;
        // Offsets were checked on open; `get` keeps a bad one from panicking all the same.
        let blob = usize::try_from(e.offset)
            .ok()
            .and_then(|start| self.map.get(start..start.checked_add(e.length as usize)?))
            .ok_or_else(|| AtlasError::Invalid {
                path: self.path.clone(),
                what: format!("index entry for {tile} (points outside the data)"),
            })?;
        if crc32fast::hash(blob) != e.crc32 {
            return Err(AtlasError::TileChecksum { path: self.path.clone(), tile });
        }
        Ok(blob)
    }

    /// The tile decoded to RGBA8 (`padded_tile_size² × 4` bytes), CRC checked.
    pub fn decode_tile(&self, tile: TileId) -> Result<Vec<u8>, AtlasError> {
        let blob = self.read_tile(tile)?;
        let e = self.entry(tile)?;
        e.codec.decode(blob, e.raw_length as usize).map_err(|source| AtlasError::TileDecode {
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
        let mut errors: Vec<AtlasError> = tiles
            .par_iter()
            .filter_map(|&t| {
                let r = self.decode_tile(t).err();
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
        let nonzero = |a: u64, b: u64| self.map[a as usize..b as usize].iter().position(|&v| v != 0);
        for (start, end) in spans.into_iter().chain(std::iter::once((self.file_size(), self.file_size()))) {
            if start > pos
                && let Some(k) = nonzero(pos, start)
            {
                return Some(AtlasError::Invalid {
                    path: self.path.clone(),
                    what: format!("padding byte at offset {} is not zero (file corrupted)", pos + k as u64),
                });
            }
            pos = pos.max(end);
        }
        None
    }
}

/// Writes an atlas to a temporary file next to its destination and renames it into
/// place on [`AtlasWriter::finish`]; dropping an unfinished writer deletes the file.
///
/// Blobs are deduplicated (unless [`AtlasWriter::set_dedup`] turns it off): a pushed
/// blob byte-identical to one already written, with the same codec and decoded length,
/// is not written again; its index entry points at the earlier copy. Candidates are found
/// by length, CRC-32 and a 64-bit hash, and confirmed by reading the earlier copy back,
/// so a hash collision can only cost a comparison, never a wrong tile.
pub struct AtlasWriter {
    dest: PathBuf,
    tmp: PathBuf,
    renamed: bool,
    out: Option<BufWriter<File>>,
    layers: Vec<LayerInfo>,
    entries: Vec<TileEntry>,
    pos: u64,
    data_offset: u64,
    flags: u32,
    dedup: bool,
    blobs: HashMap<BlobKey, u64>,
    shared: u64,
    readback: Vec<u8>,
}

/// What identifies a candidate duplicate blob; equality is confirmed byte by byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct BlobKey {
    codec: u8,
    length: u32,
    raw_length: u32,
    crc32: u32,
    hash: u64,
}

/// A fast 64-bit hash of a blob (four independent multiply-xorshift lanes over 8-byte
/// words, then a splitmix64 finish). Not cryptographic: matches are confirmed by comparing bytes.
fn blob_hash(bytes: &[u8]) -> u64 {
    const K: [u64; 4] =
        [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x85EB_CA77_C2B2_AE63];
    let mix = |acc: u64, w: u64, k: u64| {
        let x = (acc ^ w).wrapping_mul(k);
        x ^ (x >> 29)
    };
    let mut lanes = K;
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&block[8 * i..8 * i + 8]);
            *lane = mix(*lane, u64::from_le_bytes(w), K[i]);
        }
    }
    let mut h = bytes.len() as u64;
    for (i, lane) in lanes.iter().enumerate() {
        h = mix(h, *lane, K[i]);
    }
    for (i, chunk) in blocks.remainder().chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix(h, u64::from_le_bytes(w), K[i % 4]);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// Why a set of layers cannot be stacked: the first layer whose layout differs from layer 0's.
fn stacked_mismatch(layers: &[LayerInfo]) -> Option<String> {
    let first = layers.first()?;
    layers.iter().enumerate().skip(1).find(|(_, l)| l.layout != first.layout).map(|(i, l)| {
        let d = |l: &LayerInfo| {
            let y = l.layout;
            format!(
                "{}x{} tile {} border {} mips {}",
                y.width(),
                y.height(),
                y.tile_size(),
                y.border(),
                y.mip_count()
            )
        };
        format!(
            "stacked layers: layer {i} '{}' is {}, layer 0 '{}' is {} (stacked layers share one layout)",
            l.name,
            d(l),
            first.name,
            d(first)
        )
    })
}

impl AtlasWriter {
    /// Starts an atlas with the given layers (their `first_tile` is recomputed) and no flags.
    pub fn create(dest: impl AsRef<Path>, layers: Vec<LayerInfo>) -> Result<Self, AtlasError> {
        Self::create_with_flags(dest, layers, 0)
    }

    /// Starts an atlas with header `flags` (e.g. [`FLAG_STACKED`]); unknown flag bits and
    /// stacked layers whose layouts differ are rejected.
    pub fn create_with_flags(
        dest: impl AsRef<Path>,
        mut layers: Vec<LayerInfo>,
        flags: u32,
    ) -> Result<Self, AtlasError> {
        let dest = dest.as_ref().to_path_buf();
        if layers.is_empty() || layers.len() > MAX_LAYERS as usize {
            return Err(AtlasError::Invalid { path: dest, what: format!("layer count {}", layers.len()) });
        }
        if flags & !KNOWN_FLAGS != 0 {
            return Err(AtlasError::Invalid {
                path: dest,
                what: format!("header flags {flags:#x}: unknown flag bits {:#x}", flags & !KNOWN_FLAGS),
            });
        }
        if flags & FLAG_STACKED != 0
            && let Some(what) = stacked_mismatch(&layers)
        {
            return Err(AtlasError::Invalid { path: dest, what });
        }
        let mut first = 0;
        for l in &mut layers {
            l.first_tile = first;
            first += l.layout.tile_count();
        }
        let index_offset = (HEADER_BYTES + layers.len() * LAYER_BYTES) as u64;
        let data_offset = (index_offset + first * ENTRY_BYTES as u64).next_multiple_of(BLOB_ALIGN);
        let file_name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dest.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
        let io = |source| AtlasError::Io { path: tmp.clone(), source };
        // Readable too: duplicate candidates are compared with the copy already written.
        let mut file =
            File::options().read(true).write(true).create(true).truncate(true).open(&tmp).map_err(io)?;
        file.seek(SeekFrom::Start(data_offset)).map_err(io)?;
        Ok(Self {
            dest,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            tmp,
            renamed: false,
            entries: Vec::with_capacity(first as usize),
            layers,
            pos: data_offset,
            data_offset,
            flags,
            dedup: true,
            blobs: HashMap::new(),
            shared: 0,
            readback: Vec::new(),
        })
    }

    /// Turns blob deduplication on (the default) or off for the tiles pushed from now on.
    pub fn set_dedup(&mut self, on: bool) {
        self.dedup = on;
    }

    /// How many tiles pushed so far share a blob written for an earlier tile.
    pub fn shared_tiles(&self) -> u64 {
        self.shared
    }

    /// The layers as they will be written.
    pub fn layers(&self) -> &[LayerInfo] {
        &self.layers
    }

    /// Appends the next tile in storage order (layer by layer, mip 0 first, rows
    /// top to bottom): its encoded blob and the codec it is encoded with. A blob identical
    /// to one already written is stored once (see [`AtlasWriter`]).
    pub fn push_tile(&mut self, blob: &[u8], codec: Codec, raw_length: u32) -> Result<(), AtlasError> {
        let length = u32::try_from(blob.len()).map_err(|_| AtlasError::Invalid {
            path: self.dest.clone(),
            what: format!("tile {} blob of {} bytes (limit 4 GiB)", self.entries.len(), blob.len()),
        })?;
        let crc32 = crc32fast::hash(blob);
        let key = self.dedup.then(|| BlobKey {
            codec: codec as u8,
            length,
            raw_length,
            crc32,
            hash: blob_hash(blob),
        });
        if let Some(offset) = key.and_then(|k| self.blobs.get(&k).copied())
            && self.written_equals(offset, blob)?
        {
            self.entries.push(TileEntry { offset, length, raw_length, crc32, codec });
            self.shared += 1;
            return Ok(());
        }
        let io = |source| AtlasError::Io { path: self.tmp.clone(), source };
        let out = self.out.as_mut().ok_or_else(|| io(std::io::Error::other("writer already finished")))?;
        let aligned = self.pos.next_multiple_of(BLOB_ALIGN);
        out.write_all(&[0u8; BLOB_ALIGN as usize][..(aligned - self.pos) as usize]).map_err(io)?;
        out.write_all(blob).map_err(io)?;
        self.entries.push(TileEntry { offset: aligned, length, raw_length, crc32, codec });
        self.pos = aligned + blob.len() as u64;
        if let Some(k) = key {
            // On a (confirmed false) collision the first blob keeps the key.
            self.blobs.entry(k).or_insert(aligned);
        }
        Ok(())
    }

    /// Whether the blob written at `offset` has exactly the bytes `blob`.
    fn written_equals(&mut self, offset: u64, blob: &[u8]) -> Result<bool, AtlasError> {
        let io = |source| AtlasError::Io { path: self.tmp.clone(), source };
        let out = self.out.as_mut().ok_or_else(|| io(std::io::Error::other("writer already finished")))?;
        let on_disk = self.pos - out.buffer().len() as u64;
        if offset + blob.len() as u64 > on_disk {
            out.flush().map_err(io)?;
        }
        self.readback.resize(blob.len(), 0);
        out.get_ref().read_exact_at(&mut self.readback, offset).map_err(io)?;
        Ok(self.readback == blob)
    }

    /// Writes the index and header, fsyncs, and renames the file into place.
    pub fn finish(mut self) -> Result<u64, AtlasError> {
        let expected: u64 = self.layers.iter().map(|l| l.layout.tile_count()).sum();
        if self.entries.len() as u64 != expected {
            return Err(AtlasError::Invalid {
                path: self.dest.clone(),
                what: format!("{} tiles written, layout has {expected}", self.entries.len()),
            });
        }
        let io = |source| AtlasError::Io { path: self.tmp.clone(), source };
        let out = self.out.take().ok_or_else(|| io(std::io::Error::other("writer already finished")))?;
        let mut file = out.into_inner().map_err(|e| io(e.into_error()))?;
        let mut meta = Vec::with_capacity((self.data_offset - HEADER_BYTES as u64) as usize);
        for l in &self.layers {
            meta.extend_from_slice(&encode_layer(l));
        }
        for e in &self.entries {
            meta.extend_from_slice(&encode_entry(e));
        }
        let header = Header {
            layer_count: self.layers.len() as u32,
            flags: self.flags,
            tile_count: expected,
            index_offset: (HEADER_BYTES + self.layers.len() * LAYER_BYTES) as u64,
            data_offset: self.data_offset,
            file_size: self.pos,
            meta_crc: crc32fast::hash(&meta),
        };
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&header.encode()).map_err(io)?;
        file.write_all(&meta).map_err(io)?;
        file.set_len(self.pos).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|source| AtlasError::Io { path: self.dest.clone(), source })?;
        if let Some(dir) = self.dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Persist the rename itself; not every filesystem supports this.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(self.pos)
    }
}

impl Drop for AtlasWriter {
    /// An unfinished or failed write leaves nothing behind.
    fn drop(&mut self) {
        if !self.renamed {
            self.out = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// What `tessera inspect` reports about an atlas.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AtlasSummary {
    /// The atlas path.
    pub path: PathBuf,
    /// Format version.
    pub version: u32,
    /// Whether the layers are stacked (header flag [`FLAG_STACKED`]).
    #[serde(default)]
    pub stacked: bool,
    /// File size in bytes.
    pub file_bytes: u64,
    /// Tiles over all layers.
    pub tiles: u64,
    /// One entry per layer.
    pub layers: Vec<LayerSummary>,
}

/// One layer in an [`AtlasSummary`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerSummary {
    /// Layer index (the tile id's `layer`).
    pub index: u16,
    /// Layer name.
    pub name: String,
    /// Mip-0 width.
    pub width: u32,
    /// Mip-0 height.
    pub height: u32,
    /// Tile payload side.
    pub tile_size: u32,
    /// Border texels per side.
    pub border: u32,
    /// Mip levels.
    pub mip_count: u32,
    /// Codec the layer was baked with.
    pub codec: Codec,
    /// Edge rule.
    pub wrap: Wrap,
    /// Texel encoding.
    pub color: ColorSpace,
    /// Tiles over all mips.
    pub tiles: u64,
    /// Tiles whose blob is shared with an earlier tile of the atlas (tile order), so
    /// they take no bytes of their own on disk.
    #[serde(default)]
    pub shared_tiles: u64,
    /// Bytes of tile data on disk (a shared blob counts once, for its first tile).
    pub stored_bytes: u64,
    /// Bytes of the tiles decoded.
    pub raw_bytes: u64,
    /// `raw_bytes / stored_bytes`.
    pub compression_ratio: f64,
    /// Bits per stored texel on disk (tile borders included).
    pub bits_per_texel: f64,
    /// GPU bytes per tile for each pool format this layer can be loaded into.
    pub vram_bytes_per_tile: Vec<(crate::format::codec::TargetFormat, usize)>,
    /// Per mip, finest first.
    pub mips: Vec<MipSummary>,
}

/// One mip level in a [`LayerSummary`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MipSummary {
    /// Mip level.
    pub mip: u32,
    /// Size in texels.
    pub width: u32,
    /// Size in texels.
    pub height: u32,
    /// Tiles across.
    pub tiles_x: u32,
    /// Tiles down.
    pub tiles_y: u32,
    /// Tiles whose blob is shared with an earlier tile (see [`LayerSummary::shared_tiles`]).
    #[serde(default)]
    pub shared_tiles: u64,
    /// Bytes of tile data on disk (a shared blob counts once, for its first tile).
    pub stored_bytes: u64,
    /// Bytes decoded.
    pub raw_bytes: u64,
}

impl Atlas {
    /// Sizes, tile counts and bytes per layer and mip (reads only the index).
    pub fn summary(&self) -> AtlasSummary {
        let mut seen = std::collections::HashSet::new();
        let layers = self
            .layers
            .iter()
            .enumerate()
            .map(|(li, l)| {
                let lay = l.layout;
                let mips: Vec<MipSummary> = (0..lay.mip_count())
                    .map(|m| {
                        let (w, h) = lay.mip_size(m);
                        let (tx, ty) = lay.tiles_at(m);
                        let first = l.first_tile + lay.mip_tile_offset(m);
                        let (mut stored, mut raw, mut shared) = (0u64, 0u64, 0u64);
                        for i in first..first + lay.tile_count_at(m) {
                            if let Ok(e) = self.entry_at(i) {
                                if seen.insert((e.offset, e.length)) {
                                    stored += u64::from(e.length);
                                } else {
                                    shared += 1;
                                }
                                raw += u64::from(e.raw_length);
                            }
                        }
                        MipSummary {
                            mip: m,
                            width: w,
                            height: h,
                            tiles_x: tx,
                            tiles_y: ty,
                            shared_tiles: shared,
                            stored_bytes: stored,
                            raw_bytes: raw,
                        }
                    })
                    .collect();
                let stored_bytes = mips.iter().map(|m| m.stored_bytes).sum::<u64>();
                let raw_bytes = mips.iter().map(|m| m.raw_bytes).sum::<u64>();
                LayerSummary {
                    index: li as u16,
                    name: l.name.clone(),
                    width: lay.width(),
                    height: lay.height(),
                    tile_size: lay.tile_size(),
                    border: lay.border(),
                    mip_count: lay.mip_count(),
                    codec: l.codec,
                    wrap: l.wrap,
                    color: l.color,
                    tiles: lay.tile_count(),
                    shared_tiles: mips.iter().map(|m| m.shared_tiles).sum(),
                    stored_bytes,
                    raw_bytes,
                    compression_ratio: raw_bytes as f64 / stored_bytes.max(1) as f64,
                    bits_per_texel: stored_bytes as f64 * 8.0 / (raw_bytes.max(1) as f64 / 4.0),
                    vram_bytes_per_tile: crate::format::codec::TargetFormat::ALL
                        .into_iter()
                        .filter(|t| l.codec.is_basis() || !t.is_block_compressed())
                        .map(|t| (t, t.bytes_per_tile(lay.padded_tile_size())))
                        .collect(),
                    mips,
                }
            })
            .collect();
        AtlasSummary {
            path: self.path.clone(),
            version: VERSION,
            stacked: self.is_stacked(),
            file_bytes: self.file_size(),
            tiles: self.tile_count,
            layers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key collision (forced here) costs a comparison, never a wrong tile.
    #[test]
    fn a_hash_collision_does_not_share_a_blob() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.tsa");
        let layout = TextureLayout::new(32, 16, 16, 0).unwrap();
        let layer = LayerInfo {
            name: "c".into(),
            layout,
            codec: Codec::Raw,
            wrap: Wrap::Clamp,
            color: ColorSpace::Linear,
            first_tile: 0,
        };
        let (a, b) = (vec![1u8; 1024], vec![2u8; 1024]);
        let mut w = AtlasWriter::create(&path, vec![layer]).unwrap();
        w.push_tile(&a, Codec::Raw, 1024).unwrap();
        let key = BlobKey {
            codec: Codec::Raw as u8,
            length: 1024,
            raw_length: 1024,
            crc32: crc32fast::hash(&b),
            hash: blob_hash(&b),
        };
        w.blobs.insert(key, w.entries[0].offset);
        w.push_tile(&b, Codec::Raw, 1024).unwrap();
        w.push_tile(&a, Codec::Raw, 1024).unwrap();
        assert_eq!(w.shared_tiles(), 1, "only the true duplicate is shared");
        w.finish().unwrap();
        let atlas = Atlas::open(&path).unwrap();
        assert_eq!(atlas.read_tile(TileId::new(0, 0, 1, 0)).unwrap(), &b[..]);
        assert_eq!(atlas.entry(TileId::new(0, 1, 0, 0)).unwrap().offset, atlas.entry_at(0).unwrap().offset);
        assert!(atlas.verify(&crate::progress::NoProgress).is_empty());
        assert_eq!(atlas.stored_bytes(), 2048);
    }

    #[test]
    fn blob_hash_sees_every_byte() {
        let base: Vec<u8> = (0..100u32).map(|i| i as u8).collect();
        let h = blob_hash(&base);
        for i in 0..base.len() {
            let mut m = base.clone();
            m[i] ^= 1;
            assert_ne!(blob_hash(&m), h, "byte {i}");
        }
        assert_ne!(blob_hash(&base[..99]), h);
    }
}
