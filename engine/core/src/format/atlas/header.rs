//! The on-disk records of an atlas: format constants, the fixed header, layer records
//! and tile index entries, and their little-endian byte encodings.

use super::{LayerInfo, TileEntry};

/// The eight bytes every atlas starts with.
pub const MAGIC: [u8; 8] = *b"TSRATLAS";
/// The format version this build writes (it reads this one and [`OLDEST_VERSION`]).
pub const VERSION: u32 = 2;
/// The oldest format version this build reads.
pub const OLDEST_VERSION: u32 = 1;
/// Version 2: the header, layer table and root directory end within this many bytes
/// of the start of the file, so one small range request opens a remote atlas.
pub const ROOT_LIMIT: usize = 16 << 10;
/// Version 2: the fixed part of the root directory (entries per page, page count,
/// stored bytes), before the page checksums.
pub const ROOT_FIXED_BYTES: usize = 16;
/// Version 2: the fewest index entries per page a writer uses (24 KiB pages); more
/// when the atlas has so many tiles that the page checksums would not fit below
/// [`ROOT_LIMIT`].
pub const MIN_PAGE_ENTRIES: u32 = 1024;
/// Version 2: the most index entries per page a reader accepts (24 MiB pages).
pub const MAX_PAGE_ENTRIES: u32 = 1 << 20;
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
/// Header flag bit 1 (version 2 only): a *split* atlas. This file is only the index
/// object; the blobs lie in the data objects its object table names (the parts of a
/// sharded bake). See [`split`](super::split).
pub const FLAG_SPLIT: u32 = 2;
/// Header flag bit 2: the atlas holds a *metadata record* ([`AtlasMeta`](super::AtlasMeta),
/// a bounded JSON object covered by `meta_crc`) after its layer table (version 1) or its
/// root directory and object table (version 2). A reader that does not know the bit
/// refuses the file instead of misreading where its index lies.
pub const FLAG_META: u32 = 4;
/// Every header flag bit this build understands; a reader rejects any other bit.
pub const KNOWN_FLAGS: u32 = FLAG_STACKED | FLAG_SPLIT | FLAG_META;

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
    pub(super) version: u32,
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
            version: rd_u32(h, 8),
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
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
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
pub(crate) fn encode_entry(e: &TileEntry) -> [u8; ENTRY_BYTES] {
    let mut b = [0u8; ENTRY_BYTES];
    b[0..8].copy_from_slice(&e.offset.to_le_bytes());
    b[8..12].copy_from_slice(&e.length.to_le_bytes());
    b[12..16].copy_from_slice(&e.raw_length.to_le_bytes());
    b[16..20].copy_from_slice(&e.crc32.to_le_bytes());
    b[20] = e.codec as u8;
    b
}

/// The version-2 root directory, which follows the layer table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Root {
    /// Index entries per page (the last page may hold fewer).
    pub(super) page_entries: u32,
    /// Bytes of the distinct tile blobs.
    pub(super) stored_bytes: u64,
    /// CRC-32 of each index page.
    pub(super) page_crcs: Vec<u32>,
}

impl Root {
    /// Bytes of the encoded root.
    pub(super) fn encoded_len(pages: u64) -> u64 {
        ROOT_FIXED_BYTES as u64 + 4 * pages
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::encoded_len(self.page_crcs.len() as u64) as usize);
        b.extend_from_slice(&self.page_entries.to_le_bytes());
        b.extend_from_slice(&(self.page_crcs.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.stored_bytes.to_le_bytes());
        for c in &self.page_crcs {
            b.extend_from_slice(&c.to_le_bytes());
        }
        b
    }

    /// Decodes the root at the start of `b`, which must hold [`ROOT_FIXED_BYTES`]; the
    /// page checksums must follow within `b`.
    pub(super) fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() < ROOT_FIXED_BYTES {
            return Err("root directory past the first 16 KiB".into());
        }
        let page_entries = rd_u32(b, 0);
        let pages = rd_u32(b, 4) as usize;
        if !(1..=MAX_PAGE_ENTRIES).contains(&page_entries) {
            return Err(format!("root directory: {page_entries} entries per page"));
        }
        let end = ROOT_FIXED_BYTES + 4 * pages;
        if end > b.len() {
            return Err(format!("root directory: {pages} index pages do not fit in the first 16 KiB"));
        }
        let page_crcs = (0..pages).map(|i| rd_u32(b, ROOT_FIXED_BYTES + 4 * i)).collect();
        Ok(Self { page_entries, stored_bytes: rd_u64(b, 8), page_crcs })
    }
}

/// The entries per index page a writer uses for `tile_count` tiles after a layer table
/// of `layer_count` records: [`MIN_PAGE_ENTRIES`], doubled until the root directory
/// ends below [`ROOT_LIMIT`] (a 524288² atlas of 128-texel tiles, 22.4 M tiles, gets
/// 8,192 entries per page). With more than about 250 layers the layer table alone
/// passes 16 KiB; the root directory then takes at most 4 KiB after it.
pub(crate) fn page_entries_for(layer_count: usize, tile_count: u64) -> u32 {
    let head = (HEADER_BYTES + layer_count * LAYER_BYTES) as u64;
    let limit = (ROOT_LIMIT as u64).max(head + 4096);
    let mut per = MIN_PAGE_ENTRIES;
    while per < MAX_PAGE_ENTRIES && head + Root::encoded_len(tile_count.div_ceil(u64::from(per))) > limit {
        per *= 2;
    }
    per
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The largest atlas (524288², 128-texel tiles: 22,369,621 tiles) keeps its root
    /// directory within 16 KiB; small atlases get the smallest pages.
    #[test]
    fn root_directory_fits_for_the_largest_atlas() {
        let tiles = 22_369_621u64;
        let per = page_entries_for(1, tiles);
        assert_eq!(per, 8192);
        let end = (HEADER_BYTES + LAYER_BYTES) as u64 + Root::encoded_len(tiles.div_ceil(u64::from(per)));
        assert!(end <= ROOT_LIMIT as u64, "{end}");
        assert_eq!(page_entries_for(1, 21_845), MIN_PAGE_ENTRIES);
        assert_eq!(page_entries_for(4096, 10), MIN_PAGE_ENTRIES, "after a long layer table, 4 KiB of root");
        assert_eq!(page_entries_for(4096, 4_000_000), 4096, "977 pages: under 4 KiB of root");
    }

    #[test]
    fn root_round_trips() {
        let r = Root { page_entries: 1024, stored_bytes: 123_456_789, page_crcs: vec![1, 2, 0xFFFF_FFFF] };
        assert_eq!(Root::decode(&r.encode()), Ok(r.clone()));
        assert!(Root::decode(&r.encode()[..20]).is_err());
    }
}
