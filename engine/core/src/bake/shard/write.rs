//! Writing a shard's part: where a bake's tiles go (one atlas, or one part of a sharded
//! bake), and the part file with its manifest and trailer.

use super::*;

/// Where a bake's tiles go: an [`AtlasWriter`] or a [`ShardWriter`]. `tile` is the
/// tile's number in the atlas' tile order; `index` numbers the tiles pushed so far.
pub(crate) trait TileSink: Send {
    /// Tiles pushed so far.
    fn tiles_written(&self) -> usize;
    /// The entry of pushed tile `index`.
    fn entry(&self, index: usize) -> Option<TileEntry>;
    /// Pushes tile `tile` as a copy of pushed tile `index`.
    fn push_copy(&mut self, tile: u64, index: usize) -> Result<(), AtlasError>;
    /// Pushes tile `tile` with its encoded blob.
    fn push_tile(&mut self, tile: u64, blob: &[u8], codec: Codec, raw_length: u32) -> Result<(), AtlasError>;
    /// Tiles whose blob was found already stored.
    fn shared_tiles(&self) -> u64;
}

impl TileSink for AtlasWriter {
    fn tiles_written(&self) -> usize {
        AtlasWriter::tiles_written(self)
    }
    fn entry(&self, index: usize) -> Option<TileEntry> {
        AtlasWriter::entry(self, index)
    }
    fn push_copy(&mut self, tile: u64, index: usize) -> Result<(), AtlasError> {
        debug_assert_eq!(tile, AtlasWriter::tiles_written(self) as u64);
        AtlasWriter::push_copy(self, index)
    }
    fn push_tile(&mut self, tile: u64, blob: &[u8], codec: Codec, raw_length: u32) -> Result<(), AtlasError> {
        debug_assert_eq!(tile, AtlasWriter::tiles_written(self) as u64);
        AtlasWriter::push_tile(self, blob, codec, raw_length)
    }
    fn shared_tiles(&self) -> u64 {
        AtlasWriter::shared_tiles(self)
    }
}

/// Writes one shard's part file: blobs spooled as they come (a blob identical to one
/// already spooled is kept once), then on [`finish`](Self::finish) the part itself (the
/// blobs in storage order, each at a multiple of 16; the entries; the manifest), an fsync
/// and a rename into place. Dropped unfinished, it leaves nothing.
pub(crate) struct ShardWriter {
    dest: PathBuf,
    spool: TempPath,
    out: BufWriter<File>,
    pos: u64,
    /// `(tile, entry)` as pushed, offsets in the spool.
    entries: Vec<(u64, TileEntry)>,
    /// Spooled blobs by codec, decoded length, length, CRC-32 and hash: their offset.
    seen: HashMap<(u8, u32, u32, u32, u64), u64>,
    shared: u64,
    manifest: PartManifest,
}

impl ShardWriter {
    /// Starts the part `manifest` describes for the atlas `out`, in `OUT.shards/` (made if
    /// missing).
    pub(crate) fn create(out: &Path, manifest: PartManifest) -> Result<Self, ShardError> {
        let dir = shard_dir(out);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ShardError::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let dest = part_path(out, manifest.shard);
        // Parts of this shard's killed runs (never another shard's).
        crate::temp_files::sweep(&dir, &Self::temp_prefix(manifest.shard));
        let spool = TempPath::new(dir.join(temp_name(&Self::temp_prefix(manifest.shard), "-spool")));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(spool.path())
            .map_err(io(spool.path()))?;
        Ok(Self {
            dest,
            spool,
            out: BufWriter::with_capacity(1 << 20, file),
            pos: 0,
            entries: Vec::new(),
            seen: HashMap::new(),
            shared: 0,
            manifest,
        })
    }

    fn temp_prefix(shard: Shard) -> String {
        format!(".{}-of-{}.", shard.index, shard.count)
    }

    /// Writes the part from the spool (blobs in storage order, aligned; entries, manifest
    /// and trailer), fsyncs it and renames it over `OUT.shards/I-of-N.part`. Returns the
    /// part's path and size.
    pub(crate) fn finish(mut self) -> Result<(PathBuf, u64), ShardError> {
        let spool_path = self.spool.path().to_path_buf();
        let spool_io = |source| ShardError::Io { path: spool_path.clone(), source };
        self.out.flush().map_err(spool_io)?;
        let m = &self.manifest;
        let order = StorageOrder::new(
            m.layers.iter().map(|l| l.layout).collect(),
            m.flags & crate::format::atlas::FLAG_STACKED != 0,
        );
        let [first, last] = m.range;
        if self.entries.len() as u64 != last - first {
            return Err(ShardError::Part {
                path: self.dest.clone(),
                reason: format!(
                    "{} tiles for the {} storage positions of its range",
                    self.entries.len(),
                    last - first
                ),
            });
        }
        // Each tile's storage position, which must lie in the shard's range.
        let positions = self
            .entries
            .iter()
            .map(|&(tile, _)| {
                tile_position(&m.layers, &order, tile).filter(|p| (first..last).contains(p)).ok_or_else(
                    || ShardError::Part {
                        path: self.dest.clone(),
                        reason: format!("tile {tile} is not this shard's"),
                    },
                )
            })
            .collect::<Result<Vec<u64>, ShardError>>()?;
        // Distinct spooled blobs (offset, length), by the storage position of their first tile.
        let mut firsts: HashMap<u64, (u64, u32)> = HashMap::new();
        for (&pos, (_, e)) in positions.iter().zip(&self.entries) {
            let first = firsts.entry(e.offset).or_insert((pos, e.length));
            first.0 = first.0.min(pos);
        }
        let mut blobs: Vec<(u64, u64, u32)> =
            firsts.into_iter().map(|(offset, (pos, len))| (pos, offset, len)).collect();
        blobs.sort_unstable();
        let tmp_path = self.dest.with_file_name(temp_name(&Self::temp_prefix(m.shard), ""));
        let mut tmp = TempPath::new(tmp_path);
        let path = tmp.path().to_path_buf();
        let io = |source| ShardError::Io { path: path.clone(), source };
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&path).map_err(io)?);
        let spool = self.out.get_ref();
        let mut moved: HashMap<u64, u64> = HashMap::with_capacity(blobs.len());
        let (mut at, mut blob, mut stored_bytes) = (0u64, Vec::new(), 0u64);
        for &(_, offset, len) in &blobs {
            let aligned = at.next_multiple_of(BLOB_ALIGN);
            out.write_all(&[0u8; BLOB_ALIGN as usize][..(aligned - at) as usize]).map_err(io)?;
            blob.resize(len as usize, 0);
            spool.read_exact_at(&mut blob, offset).map_err(spool_io)?;
            out.write_all(&blob).map_err(io)?;
            moved.insert(offset, aligned);
            at = aligned + u64::from(len);
            stored_bytes += u64::from(len);
        }
        // The index: one entry per storage position of the range, in pages.
        let mut index = vec![0u8; ((last - first) as usize) * ENTRY_BYTES];
        for (&pos, &(_, e)) in positions.iter().zip(&self.entries) {
            let offset = moved.get(&e.offset).copied().unwrap_or(e.offset);
            let at = (pos - first) as usize * ENTRY_BYTES;
            index[at..at + ENTRY_BYTES].copy_from_slice(&encode_entry(&TileEntry { offset, ..e }));
        }
        let index_offset = at.next_multiple_of(BLOB_ALIGN);
        out.write_all(&[0u8; BLOB_ALIGN as usize][..(index_offset - at) as usize]).map_err(io)?;
        out.write_all(&index).map_err(io)?;
        let per = self.manifest.page_entries as usize * ENTRY_BYTES;
        self.manifest.page_crcs = index.chunks(per.max(ENTRY_BYTES)).map(crc32fast::hash).collect();
        self.manifest.index_offset = index_offset;
        self.manifest.stored_bytes = stored_bytes;
        let manifest = serde_json::to_vec(&self.manifest).map_err(|e| io(std::io::Error::other(e)))?;
        let manifest_offset = index_offset + index.len() as u64;
        let mut tail = manifest;
        let crc = crc32fast::hash(&tail);
        let manifest_len = tail.len() as u32;
        tail.extend_from_slice(TRAILER_MAGIC);
        tail.extend_from_slice(&index_offset.to_le_bytes());
        tail.extend_from_slice(&manifest_offset.to_le_bytes());
        tail.extend_from_slice(&manifest_len.to_le_bytes());
        tail.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&tail).map_err(io)?;
        out.flush().map_err(io)?;
        let size = manifest_offset + tail.len() as u64;
        out.get_ref().sync_all().map_err(io)?;
        drop(out);
        AtlasWriter::publish(&mut tmp, &self.dest)?;
        Ok((self.dest.clone(), size))
    }
}

impl TileSink for ShardWriter {
    fn tiles_written(&self) -> usize {
        self.entries.len()
    }
    fn entry(&self, index: usize) -> Option<TileEntry> {
        self.entries.get(index).map(|(_, e)| *e)
    }
    fn push_copy(&mut self, tile: u64, index: usize) -> Result<(), AtlasError> {
        let e = TileSink::entry(self, index).ok_or_else(|| AtlasError::Io {
            path: self.dest.clone(),
            source: std::io::Error::other(format!("copy of tile {index}, which was not written")),
        })?;
        self.entries.push((tile, e));
        self.shared += 1;
        Ok(())
    }
    fn push_tile(&mut self, tile: u64, blob: &[u8], codec: Codec, raw_length: u32) -> Result<(), AtlasError> {
        let io = |source| AtlasError::Io { path: self.spool.path().to_path_buf(), source };
        let crc32 = crc32fast::hash(blob);
        let key = (codec as u8, raw_length, blob.len() as u32, crc32, blob_hash(blob));
        if let Some(&offset) = self.seen.get(&key) {
            // Confirmed byte for byte: a hash collision costs a read, never a wrong tile.
            self.out.flush().map_err(io)?;
            let mut earlier = vec![0u8; blob.len()];
            self.out.get_ref().read_exact_at(&mut earlier, offset).map_err(io)?;
            if earlier == blob {
                let e = TileEntry { offset, length: blob.len() as u32, raw_length, crc32, codec };
                self.entries.push((tile, e));
                self.shared += 1;
                return Ok(());
            }
        }
        self.out.write_all(blob).map_err(io)?;
        let entry = TileEntry { offset: self.pos, length: blob.len() as u32, raw_length, crc32, codec };
        self.seen.entry(key).or_insert(self.pos);
        self.pos += blob.len() as u64;
        self.entries.push((tile, entry));
        Ok(())
    }
    fn shared_tiles(&self) -> u64 {
        self.shared
    }
}

/// The storage position of tile number `tile` (atlas tile order) of an atlas with
/// `layers` (`first_tile` set) laid out by `order`.
pub(super) fn tile_position(layers: &[LayerInfo], order: &StorageOrder, tile: u64) -> Option<u64> {
    let layer = layers.iter().rposition(|l| l.first_tile <= tile)?;
    let (mip, x, y) = layers[layer].layout.tile_at_index(tile - layers[layer].first_tile)?;
    Some(order.position(layer, mip, x, y))
}
