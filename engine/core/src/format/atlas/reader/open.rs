//! Opening an atlas: the store (a file, or an object behind a URL), header, layer table,
//! the index's root, and the data objects of a split atlas.

use super::*;
use crate::format::atlas::what_the_bytes_are;

impl Atlas {
    /// Opens and validates an atlas: header, checksums, every layer and every
    /// index entry. Tile data is checked by [`Atlas::read_tile`] and [`Atlas::verify`].
    ///
    /// `path` may also be a URL (with the `remote` feature, on by default):
    /// `s3://bucket/key`, `http://host/path` or `https://...`; see
    /// [`crate::format::atlas::remote`] for credentials, retries and what happens when the object
    /// changes on the server.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AtlasError> {
        Self::open_with(path, &crate::format::atlas::RemoteOptions::from_env())
    }

    /// [`Atlas::open`] with the disk cache (and other remote settings) of `remote` for
    /// a URL; a local path ignores them.
    pub fn open_with(
        path: impl AsRef<Path>,
        remote: &crate::format::atlas::RemoteOptions,
    ) -> Result<Self, AtlasError> {
        let location = path.as_ref();
        // Errors and `Atlas::path` show the location without a URL's query values (the
        // credentials of a presigned URL).
        let path = crate::format::atlas::display_location(location);
        let file = Self::open_store(location, remote)
            .map_err(|source| AtlasError::Io { path: path.clone(), source })?;
        Self::from_store(file, path, Some((location, remote)))
    }

    /// Reads and validates the atlas in `file`, shown as `path`. A split atlas' data
    /// objects are opened beside `location` with `remote`'s settings; without a
    /// location (a ranged store) a split atlas is refused.
    pub(super) fn from_store(
        file: Store,
        path: PathBuf,
        location: Option<(&Path, &crate::format::atlas::RemoteOptions)>,
    ) -> Result<Self, AtlasError> {
        let len = file.len().map_err(|source| AtlasError::Io { path: path.clone(), source })?;
        let io = |e: ReadError| e.at_open(&path);
        let invalid = |what: String| AtlasError::Invalid { path: path.clone(), what };
        if len < HEADER_BYTES as u64 {
            // Up to 64 bytes: enough to tell what the file is instead (an HTML page...).
            let mut first = vec![0u8; len.min(64) as usize];
            if len >= 8 {
                match file.read_exact_at(&mut first, 0) {
                    Ok(()) if first[..8] != MAGIC => {
                        return Err(AtlasError::BadMagic { path, found: what_the_bytes_are(&first) });
                    }
                    Err(missing @ ReadError::Missing(..)) => return Err(io(missing)),
                    _ => {}
                }
            }
            return Err(AtlasError::Truncated { path, expected: HEADER_BYTES as u64, found: len });
        }
        let mut head = [0u8; HEADER_BYTES];
        file.read_exact_at(&mut head, 0).map_err(io)?;
        if crate::format::cog::is_tiff(&head) {
            // A TIFF (a Cloud Optimized GeoTIFF): streamed without a bake.
            return Self::from_cog(file, path, len);
        }
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
        // A split atlas' object table follows the root directory, and the metadata
        // record comes last.
        let has_record = header.flags & FLAG_META != 0;
        let record_limit = if has_record { (META_LEN_BYTES + MAX_META_BYTES) as u64 } else { 0 };
        let table_limit = if split { split::MAX_TABLE_BYTES } else { 0 } + record_limit;
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
            // Version 1: the index follows the layer table, or the metadata record after it.
            let record = header.index_offset.checked_sub(table_end);
            if record.is_none_or(|r| r > record_limit || (r == 0) == has_record) {
                return Err(invalid("index or data offsets".into()));
            }
            index_end
        };
        let meta_len =
            usize::try_from(meta_end).map_err(|_| invalid("tile index larger than memory".into()))?;
        let mut meta = vec![0u8; meta_len];
        file.read_exact_at(&mut meta, 0).map_err(io)?;
        let mut objects = Vec::new();
        // Where the metadata record lies, once the regions before it are known.
        let mut record_at = None;
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
            if has_record {
                let at = head_end as usize;
                let len = meta::record_len(meta.get(at..).unwrap_or_default()).map_err(invalid)?;
                record_at = Some(at..at + len);
                head_end += len as u64;
            }
            if pages != header.tile_count.div_ceil(u64::from(root.page_entries))
                || header.index_offset != head_end.next_multiple_of(BLOB_ALIGN)
            {
                return Err(invalid(format!(
                    "root directory: {pages} index pages of {} entries for {} tiles",
                    root.page_entries, header.tile_count
                )));
            }
            // No checksum covers the padding up to the index: it must be zero.
            if meta[head_end as usize..].iter().any(|&b| b != 0) {
                return Err(invalid(format!(
                    "padding bytes {head_end}..{} before the index are not zero",
                    header.index_offset
                )));
            }
            (head_end as usize, Some(root))
        } else {
            if has_record {
                let at = table_end as usize;
                let len = meta::record_len(&meta[at..header.index_offset as usize]).map_err(invalid)?;
                if at + len != header.index_offset as usize {
                    return Err(invalid(format!(
                        "metadata record of {len} bytes, the index starts {} bytes after the layer table",
                        header.index_offset - table_end
                    )));
                }
                record_at = Some(at..at + len);
            }
            (meta.len(), None)
        };
        if crc32fast::hash(&meta[HEADER_BYTES..crc_end]) != header.meta_crc {
            let what = if v2 { "layer table and root directory" } else { "layer table and tile index" };
            return Err(AtlasError::Checksum { path, what });
        }
        let layers = read_layers(&meta, &header, &path)?;
        let info = match record_at {
            Some(r) => {
                AtlasMeta::decode(&meta[r.start + META_LEN_BYTES..r.end], layers.len()).map_err(invalid)?
            }
            None => AtlasMeta::default(),
        };
        let (data, data_end) = if split {
            if header.data_offset != len {
                return Err(invalid("a split atlas' index object holds blobs".into()));
            }
            let Some((location, remote)) = location else {
                return Err(invalid(
                    "a split atlas (index object and data objects) cannot be read from fetched byte ranges: merge it into one file"
                        .into(),
                ));
            };
            let per = root.as_ref().map_or(1, |r| u64::from(r.page_entries));
            Self::open_data(location, remote, header.data_offset, objects, header.tile_count, per)?
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
            info,
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
            cog: None,
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
    pub(super) fn check_index(&self) -> Result<u64, AtlasError> {
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
    pub(super) fn open_store(
        path: &Path,
        options: &crate::format::atlas::RemoteOptions,
    ) -> std::io::Result<Store> {
        #[cfg(feature = "remote")]
        if let Some(url) = path.to_str().filter(|p| crate::format::atlas::remote::is_remote(p)) {
            let remote =
                crate::format::atlas::remote::RemoteObject::open(url, options).map_err(|e| match e {
                    crate::format::atlas::remote::RemoteError::NotFound => {
                        std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
                    }
                    other => std::io::Error::other(other.to_string()),
                })?;
            return Ok(Store::Remote(Arc::new(remote)));
        }
        #[cfg(not(feature = "remote"))]
        if crate::format::atlas::is_remote_location(path) {
            let _ = options;
            return Err(std::io::Error::other("remote atlases need tessera-vt-core's `remote` feature"));
        }
        if let Some(scheme) = crate::format::atlas::url_scheme(path) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "unsupported URL scheme {scheme}:// (Tessera reads s3://, gs://, az://, http:// and https://)"
                ),
            ));
        }
        // Never `File::open`: a FIFO in place of an atlas or part would block forever.
        crate::local_file::open_regular(path).map(Store::File)
    }

    /// Opens the data objects of a split atlas at `path` (beside it, or under the same
    /// URL prefix; remote ones concurrently) and checks that each has the size its
    /// index object says. Returns them and the end of the virtual file.
    pub(super) fn open_data(
        path: &Path,
        remote: &crate::format::atlas::RemoteOptions,
        data_offset: u64,
        objects: Vec<DataObject>,
        tiles: u64,
        per: u64,
    ) -> Result<(Vec<DataStore>, u64), AtlasError> {
        let shown = crate::format::atlas::display_location(path);
        let invalid = |what: String| AtlasError::Invalid { path: shown.clone(), what };
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
        let local = !crate::format::atlas::is_remote_location(path);
        let open = |o: &DataObject| {
            let location = split::resolve(path, &o.name);
            let opened = if local {
                // The same rule as a glTF's files: nothing outside the atlas' folder.
                crate::local_file::open_confined(crate::local_file::folder_of(path), &location)
                    .map(Store::File)
            } else {
                Self::open_store(&location, remote)
            };
            (location, opened.and_then(|s| Ok((s.len()?, s))))
        };
        let opened: Vec<_> = if objects.len() > 1 && crate::format::atlas::is_remote_location(path) {
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
                    format!("data object of split atlas {}: {source}", shown.display()),
                ),
            })?;
            if len != object.size {
                return Err(AtlasError::Invalid {
                    path: location,
                    what: format!(
                        "data object of split atlas {} is {len} bytes, its index says {} \
                         (replaced or damaged since the merge: rerun the merge, or the shard)",
                        shown.display(),
                        object.size
                    ),
                });
            }
            data.push(DataStore { base, object, location, store });
        }
        Ok((data, end))
    }
}

/// Checks the fixed header `h` of a file of `len` bytes at `path` (magic, version,
/// checksum, size, flags, file size, layer count) and decodes it.
pub(super) fn read_header(h: &[u8], path: &Path, len: u64) -> Result<Header, AtlasError> {
    let path = path.to_path_buf();
    if h[0..8] != MAGIC {
        return Err(AtlasError::BadMagic { path, found: what_the_bytes_are(h) });
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
pub(super) fn read_layers(meta: &[u8], header: &Header, path: &Path) -> Result<Vec<LayerInfo>, AtlasError> {
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
pub(super) fn read_layer(b: &[u8], i: usize) -> Result<LayerInfo, String> {
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
