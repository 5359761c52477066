//! Atlases read from byte ranges an embedder fetches ([`RangedBytes`]): opening, with
//! generous read-ahead so that the open loop converges in one or two round trips, and
//! the coalesced ranges a set of tiles still needs.

use std::ops::Range;

use super::open::read_header;
use super::*;
use crate::format::atlas::ranged::first_range;
use crate::format::atlas::ranges::coalesce;

impl Atlas {
    /// Opens and validates the atlas whose bytes `bytes` holds, in part; `name` is what
    /// errors and [`Atlas::path`] show (its URL; query values are redacted as for
    /// [`Atlas::open`]). Reads never block: bytes not held give
    /// [`AtlasError::NeedBytes`], naming the range to fetch next (the header, layer
    /// table and index as far as they are known, and a small version-2 index whole),
    /// after which the caller inserts it and calls this again. Every other error is the
    /// one [`Atlas::open`] gives for the same bytes. Split atlases are refused.
    ///
    /// Once the header is read, the object's head up to the end of its layer table and
    /// root directory (version 2) or index (version 1) is pinned in `bytes`.
    pub fn open_ranged(name: impl AsRef<Path>, bytes: Arc<RangedBytes>) -> Result<Self, AtlasError> {
        let path = crate::format::atlas::display_location(name.as_ref());
        match Self::from_store(Store::Ranged(bytes.clone()), path.clone(), None) {
            Ok(atlas) => {
                bytes.pin_prefix(atlas.meta.len() as u64);
                Ok(atlas)
            }
            Err(AtlasError::NeedBytes { offset, len, .. }) => {
                let asked = offset..offset.saturating_add(len);
                let ahead = Self::open_read_ahead(&bytes, &path);
                let wide = asked.start.min(ahead.start)..asked.end.max(ahead.end);
                // Bytes already held at either end are not asked for again.
                let need = bytes.missing(wide.start, wide.end - wide.start).unwrap_or(asked);
                Err(AtlasError::NeedBytes { path, offset: need.start, len: need.end - need.start })
            }
            Err(e) => Err(e),
        }
    }

    /// What is worth fetching while opening from `bytes`: with the header held, the
    /// head up to the end of the index (version 1) or root directory (version 2, and a
    /// whole index of at most [`INDEX_READ_AHEAD_BYTES`]), which is then pinned; else
    /// the opening prefix.
    fn open_read_ahead(bytes: &RangedBytes, path: &Path) -> Range<u64> {
        let len = bytes.object_len();
        let fallback = first_range(Some(len));
        let Some(head) = bytes.get(0, HEADER_BYTES as u64) else { return fallback };
        let Ok(header) = read_header(&head, path, len) else { return fallback };
        let index_bytes = header.tile_count.checked_mul(ENTRY_BYTES as u64);
        let index_end = index_bytes.and_then(|n| n.checked_add(header.index_offset));
        let Some(index_end) = index_end.filter(|&e| e <= len) else { return fallback };
        let meta_end = if header.version >= 2 { header.index_offset } else { index_end };
        bytes.pin_prefix(meta_end);
        let small_index = index_end - header.index_offset <= INDEX_READ_AHEAD_BYTES;
        let split = header.flags & FLAG_SPLIT != 0;
        let end = if header.version >= 2 && small_index && !split { index_end } else { meta_end };
        0..end.max(fallback.end)
    }

    /// The byte ranges to fetch into this atlas' [`RangedBytes`] before `tiles` can be
    /// read without a miss, coalesced as the remote store coalesces its requests
    /// ([`crate::format::atlas::ranges::coalesce`]); empty when every tile can be read
    /// now, and for an atlas not opened with [`Atlas::open_ranged`]. A version-2 index
    /// page not yet read comes first (a small index whole); once it is fetched, the
    /// next call names the blobs. Tiles whose index entry is bad are left to the read
    /// that reports them (and, when a page failed its checksum, drops it from the store
    /// so that a later try fetches it again).
    pub fn ranges_to_fetch(&self, tiles: &[TileId]) -> Vec<Range<u64>> {
        let Store::Ranged(bytes) = &self.file else { return Vec::new() };
        let mut spans: Vec<(u64, u32)> = Vec::new();
        let mut pages_missing = false;
        let span = |offset: u64, len: u64| (offset, u32::try_from(len).unwrap_or(u32::MAX));
        for &tile in tiles {
            // A bad page is kept here, for the load to report (and drop).
            match self.entry_with(tile, false) {
                Ok(e) => {
                    if let Some(m) = bytes.missing(e.offset, u64::from(e.length)) {
                        spans.push(span(m.start, m.end - m.start));
                    }
                }
                Err(AtlasError::NeedBytes { offset, len, .. }) => {
                    pages_missing = true;
                    spans.push(span(offset, len));
                }
                Err(_) => {}
            }
        }
        let index_bytes = self.tile_count * ENTRY_BYTES as u64;
        if pages_missing && self.paged.is_some() && index_bytes <= INDEX_READ_AHEAD_BYTES {
            // A small index is read whole, as a remote atlas reads it ahead: later tiles'
            // entries then need no round trip of their own.
            let index = self.index_offset..self.index_offset + index_bytes;
            spans.retain(|&(offset, _)| !index.contains(&offset));
            if let Some(m) = bytes.missing(index.start, index_bytes) {
                spans.push(span(m.start, m.end - m.start));
            }
        }
        coalesce(&spans).into_iter().filter_map(|(r, _)| bytes.missing(r.start, r.end - r.start)).collect()
    }

    /// The coarsest tile of every layer: what a [`Streamer`](crate::stream::streamer::Streamer)
    /// loads before its first frame, so a ranged atlas' driver fetches
    /// [`Atlas::ranges_to_fetch`] of these before starting one.
    pub fn coarsest_tiles(&self) -> Vec<TileId> {
        self.layers
            .iter()
            .enumerate()
            .map(|(i, l)| TileId::new(i as u16, l.layout.coarsest_mip(), 0, 0))
            .collect()
    }

    /// The byte store of an atlas opened with [`Atlas::open_ranged`].
    pub fn ranged_bytes(&self) -> Option<&Arc<RangedBytes>> {
        match &self.file {
            Store::Ranged(bytes) => Some(bytes),
            _ => None,
        }
    }
}
