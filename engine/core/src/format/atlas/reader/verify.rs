//! Verifying an atlas: every tile's CRC and decode, overlapping blobs and the padding
//! between them.

use super::*;

impl Atlas {
    /// Reads, checks and decodes every tile (in parallel); returns one error per bad
    /// tile, in tile order, and also any non-zero byte in the padding between blobs.
    pub fn verify(&self, progress: &dyn crate::progress::Progress) -> Vec<AtlasError> {
        use rayon::prelude::*;
        if self.is_produced() {
            // No stored tile to check (and no per-tile list worth building).
            return Vec::new();
        }
        let tiles: Vec<TileId> =
            self.layers.iter().enumerate().flat_map(|(i, l)| l.layout.tiles(i as u16)).collect();
        progress.set_length(tiles.len() as u64);
        if self.cog.is_some() {
            // A streamed TIFF: every tile assembled from its internal tiles.
            let mut errors: Vec<AtlasError> = tiles
                .par_iter()
                .filter_map(|&t| {
                    let r = self.read_tile(t).err();
                    progress.inc(1);
                    r
                })
                .collect();
            errors.sort_by_key(|e| match e {
                AtlasError::CogTile { tile, .. } | AtlasError::Unavailable { tile, .. } => tile.order_key(),
                _ => 0,
            });
            return errors;
        }
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
    pub(super) fn check_overlap(&self) -> Result<Vec<(u64, u64)>, AtlasError> {
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
    pub(super) fn check_padding(&self) -> Option<AtlasError> {
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

    /// The offset of the first non-zero byte in `[start, end)` of the file, read in chunks.
    pub(super) fn first_nonzero(&self, start: u64, end: u64) -> std::io::Result<Option<u64>> {
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

/// Sorts blob spans `(start, end)`, merges identical ones (a shared blob) and returns
/// the bytes of the distinct blobs, or the first two spans that overlap without being
/// identical.
#[allow(clippy::type_complexity)]
pub(super) fn shared_spans(spans: &mut Vec<(u64, u64)>) -> Result<u64, ((u64, u64), (u64, u64))> {
    spans.sort_unstable();
    spans.dedup();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err((w[0], w[1]));
        }
    }
    Ok(spans.iter().map(|(a, b)| b - a).sum())
}
