//! The on-disk records of an atlas: format constants, the fixed header, layer records
//! and tile index entries, and their little-endian byte encodings.

use super::{LayerInfo, TileEntry};

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
/// [`TextureLayout`](crate::format::tile::TextureLayout) and they share tile ids: tile (mip, x, y) of every layer is
/// streamed, made resident and evicted together, and layer 0 is the one the page
/// table and feedback index (albedo, normal, ORM of one material atlas).
pub const FLAG_STACKED: u32 = 1;
/// Every header flag bit this build understands; a reader rejects any other bit.
pub const KNOWN_FLAGS: u32 = FLAG_STACKED;

/// The little-endian `u32` at byte `at` of `b`.
pub(super) fn rd_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// The little-endian `u64` at byte `at` of `b`.
pub(super) fn rd_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The fixed header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) layer_count: u32,
    pub(super) flags: u32,
    pub(super) tile_count: u64,
    pub(super) index_offset: u64,
    pub(super) data_offset: u64,
    pub(super) file_size: u64,
    pub(super) meta_crc: u32,
}

impl Header {
    /// The fields of a header whose magic, version and checksum were already checked.
    pub(super) fn decode(h: &[u8]) -> Self {
        Header {
            layer_count: rd_u32(h, 16),
            flags: rd_u32(h, 20),
            tile_count: rd_u64(h, 24),
            index_offset: rd_u64(h, 32),
            data_offset: rd_u64(h, 40),
            file_size: rd_u64(h, 48),
            meta_crc: rd_u32(h, 56),
        }
    }

    /// The 64 header bytes, magic, version and header checksum included.
    pub(super) fn encode(&self) -> [u8; HEADER_BYTES] {
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

/// The 64-byte record of one layer.
pub(super) fn encode_layer(l: &LayerInfo) -> [u8; LAYER_BYTES] {
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

/// The 24-byte index entry of one tile.
pub(super) fn encode_entry(e: &TileEntry) -> [u8; ENTRY_BYTES] {
    let mut b = [0u8; ENTRY_BYTES];
    b[0..8].copy_from_slice(&e.offset.to_le_bytes());
    b[8..12].copy_from_slice(&e.length.to_le_bytes());
    b[12..16].copy_from_slice(&e.raw_length.to_le_bytes());
    b[16..20].copy_from_slice(&e.crc32.to_le_bytes());
    b[20] = e.codec as u8;
    b
}
