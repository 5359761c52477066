//! The tile index: entries read from the paged index on demand, its pages cached and
//! checked, and read ahead for a batch of tiles.

use super::*;

impl Atlas {
    /// The entry at storage position `position` of a version-2 atlas (for `tile`,
    /// which errors name), through the page cache; `forget_bad` as for [`Atlas::page`].
    pub(super) fn paged_entry(
        &self,
        paged: &Paged,
        tile: TileId,
        position: u64,
        forget_bad: bool,
    ) -> Result<TileEntry, AtlasError> {
        let per = u64::from(paged.page_entries);
        let page = self.page(paged, position / per, tile, forget_bad)?;
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
    /// directory and entry by entry, and cached. With `forget_bad`, a ranged store
    /// drops a page that fails its CRC-32, so that a later read fetches it again.
    pub(super) fn page(
        &self,
        paged: &Paged,
        p: u64,
        tile: TileId,
        forget_bad: bool,
    ) -> Result<Arc<[u8]>, AtlasError> {
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
        let page_len = entries * ENTRY_BYTES as u64;
        let mut bytes =
            store.read_page(offset, page_len as u32, crc).map_err(|e| e.for_tile(&self.path, tile))?;
        if crc32fast::hash(&bytes) != crc {
            if self.is_remote() {
                if forget_bad {
                    store.forget(offset, page_len);
                }
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
    pub(super) fn page_holder(&self, p: u64) -> Option<&DataStore> {
        self.data.iter().rposition(|d| u64::from(d.object.first_page) <= p).map(|k| &self.data[k])
    }

    /// Where index page `p` lies: its store, offset and length in bytes. A split atlas'
    /// page lies in the data object holding it, its entries' offsets relative to that
    /// object.
    pub(super) fn page_location(&self, paged: &Paged, p: u64) -> (&Store, u64, u64) {
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
    pub(super) fn entry_in_data(&self, e: &TileEntry, expect_raw: u64) -> bool {
        let Some(end) = e.offset.checked_add(u64::from(e.length)) else { return false };
        e.offset >= self.data_offset
            && e.offset.is_multiple_of(BLOB_ALIGN)
            && end <= self.data_end
            && u64::from(e.raw_length) == expect_raw
            // In a split atlas, inside one data object.
            && self.data_at(e.offset).is_none_or(|d| end <= d.base + d.object.size)
    }

    /// `tile`'s index entry if it is known without reading: version 1 (the index was
    /// read at open), or a version-2 page in the page cache.
    pub(super) fn entry_if_cached(&self, tile: TileId) -> Option<TileEntry> {
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
                Store::Ranged(r) => r.contains(offset, len),
                Store::File(_) => {
                    let _ = (offset, len);
                    true
                }
                Store::Empty => false,
            };
            if !at_hand {
                return None;
            }
        }
        self.paged_entry(paged, tile, position, true).ok()
    }

    /// Version 2: reads the index pages of `tiles` not in the page cache, all at once
    /// (one thread each), so a batch waits one round trip for its pages, not one per
    /// page. Errors are left for the entries' own reads to report.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(super) fn load_pages_for(&self, tiles: &[TileId]) {
        // Only a remote store's reads are worth making concurrently (a ranged store's
        // bytes are at hand or missing).
        let Some(paged) = self.paged.as_ref().filter(|_| self.is_remote_store()) else { return };
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
                    let _ = self.page(paged, p, t, true);
                });
            }
        });
    }
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
