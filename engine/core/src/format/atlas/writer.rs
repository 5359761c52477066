//! Writing an atlas: tiles streamed to a temporary file, identical blobs stored once,
//! then index and header written, fsynced and renamed into place. A version-2 atlas
//! (the default) is then rewritten in its storage order (coarse mips first, Morton
//! order within a mip) into a second temporary file, which is the one renamed. Temporary files that
//! killed writers left beside the destination are swept first.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::header::{
    BLOB_ALIGN, ENTRY_BYTES, FLAG_META, FLAG_SPLIT, FLAG_STACKED, HEADER_BYTES, Header, KNOWN_FLAGS,
    LAYER_BYTES, OLDEST_VERSION, Root, VERSION, encode_entry, encode_layer, page_entries_for,
};
use super::meta::{AtlasMeta, record_bytes};
use super::order::StorageOrder;
use super::{AtlasError, LayerInfo, TileEntry, stacked_mismatch};
use crate::format::codec::Codec;
use crate::format::tile::MAX_LAYERS;
use crate::local_file::FileExt;
use crate::temp_files::{self, TempPath};

/// Writes an atlas to a temporary file next to its destination and renames it into
/// place on [`AtlasWriter::finish`]; dropping an unfinished writer deletes the file.
/// The temporary file is `.NAME.PID.tmp` ([`temp_files::temp_name`]): listed for
/// [`temp_files::remove_all`] while it lives, and swept by the next writer of the same
/// destination once its process is gone.
///
/// Blobs are deduplicated (unless [`AtlasWriter::set_dedup`] turns it off): a pushed
/// blob byte-identical to one already written, with the same codec and decoded length,
/// is not written again; its index entry points at the earlier copy. Candidates are found
/// by length, CRC-32 and a 64-bit hash, and confirmed by reading the earlier copy back,
/// so a hash collision can only cost a comparison, never a wrong tile.
pub struct AtlasWriter {
    dest: PathBuf,
    tmp: TempPath,
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
    version: u32,
    /// The metadata record (length and JSON text), when one is written.
    record: Vec<u8>,
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
pub(crate) fn blob_hash(bytes: &[u8]) -> u64 {
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

impl AtlasWriter {
    /// Starts an atlas with the given layers (their `first_tile` is recomputed) and no flags.
    pub fn create(dest: impl AsRef<Path>, layers: Vec<LayerInfo>) -> Result<Self, AtlasError> {
        Self::create_with_flags(dest, layers, 0)
    }

    /// Starts an atlas with header `flags` (e.g. [`FLAG_STACKED`]); unknown flag bits and
    /// stacked layers whose layouts differ are rejected, and so is a destination that
    /// exists and is not a regular file (see
    /// [`check_output_file`](crate::bake::overwrite::check_output_file)).
    pub fn create_with_flags(
        dest: impl AsRef<Path>,
        mut layers: Vec<LayerInfo>,
        flags: u32,
    ) -> Result<Self, AtlasError> {
        let dest = dest.as_ref().to_path_buf();
        crate::bake::overwrite::check_output_file(&dest)
            .map_err(|e| AtlasError::NotAFile { path: e.path, kind: e.kind })?;
        if layers.is_empty() || layers.len() > MAX_LAYERS as usize {
            return Err(AtlasError::Invalid { path: dest, what: format!("layer count {}", layers.len()) });
        }
        // A split atlas is written by a merge of shard parts, never blob by blob; the
        // metadata flag follows `set_meta`.
        let writable = KNOWN_FLAGS & !FLAG_SPLIT & !FLAG_META;
        if flags & !writable != 0 {
            return Err(AtlasError::Invalid {
                path: dest,
                what: format!(
                    "header flags {flags:#x}: bits {:#x} cannot be written blob by blob",
                    flags & !writable
                ),
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
        let prefix = format!(".{file_name}.");
        temp_files::sweep(dest.parent().unwrap_or(Path::new(".")), &prefix);
        let tmp = TempPath::new(dest.with_file_name(temp_files::temp_name(&prefix, "")));
        let io = |source| AtlasError::Io { path: tmp.path().to_path_buf(), source };
        // Readable too: duplicate candidates are compared with the copy already written.
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp.path())
            .map_err(io)?;
        file.seek(SeekFrom::Start(data_offset)).map_err(io)?;
        Ok(Self {
            dest,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            tmp,
            entries: Vec::with_capacity(first as usize),
            layers,
            pos: data_offset,
            data_offset,
            flags,
            dedup: true,
            blobs: HashMap::new(),
            shared: 0,
            readback: Vec::new(),
            version: VERSION,
            record: Vec::new(),
        })
    }

    /// Writes `meta` as the atlas' metadata record (header flag [`FLAG_META`]); an empty
    /// one writes none. Must come before the first tile (a version-1 index follows the
    /// record). Refused: a record over [`MAX_META_BYTES`](super::MAX_META_BYTES), one
    /// whose `layers` does not have one entry per layer, or one JSON cannot carry.
    pub fn set_meta(&mut self, meta: &AtlasMeta) -> Result<(), AtlasError> {
        let invalid = |what: String| AtlasError::Invalid { path: self.dest.clone(), what };
        if !self.entries.is_empty() {
            return Err(invalid("the metadata record is set after tiles were written".into()));
        }
        self.record = if meta.is_empty() {
            Vec::new()
        } else {
            record_bytes(&meta.encode(self.layers.len()).map_err(invalid)?)
        };
        self.flags = if self.record.is_empty() { self.flags & !FLAG_META } else { self.flags | FLAG_META };
        let tiles: u64 = self.layers.iter().map(|l| l.layout.tile_count()).sum();
        self.data_offset = (self.v1_index_offset() + tiles * ENTRY_BYTES as u64).next_multiple_of(BLOB_ALIGN);
        let io = |source| AtlasError::Io { path: self.tmp.path().to_path_buf(), source };
        let out = self.out.as_mut().ok_or_else(|| io(std::io::Error::other("writer already finished")))?;
        out.seek(SeekFrom::Start(self.data_offset)).map_err(io)?;
        self.pos = self.data_offset;
        Ok(())
    }

    /// Where a version-1 index starts: after the layer table and the metadata record.
    fn v1_index_offset(&self) -> u64 {
        (HEADER_BYTES + self.layers.len() * LAYER_BYTES + self.record.len()) as u64
    }

    /// Writes format `version` instead of [`VERSION`]: 1 (the original layout: one
    /// index read whole, tiles in canonical order) or 2. Other versions are rejected.
    pub fn set_format_version(&mut self, version: u32) -> Result<(), AtlasError> {
        Self::check_version(&self.dest, version)?;
        self.version = version;
        Ok(())
    }

    /// Whether this build writes format `version`; the error names `dest`.
    pub(crate) fn check_version(dest: &Path, version: u32) -> Result<(), AtlasError> {
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(AtlasError::Invalid {
                path: dest.to_path_buf(),
                what: format!("format version {version} (this build writes {OLDEST_VERSION} to {VERSION})"),
            });
        }
        Ok(())
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

    /// Tiles appended so far.
    pub fn tiles_written(&self) -> usize {
        self.entries.len()
    }

    /// Where tile `index` (in storage order) was stored, once appended.
    pub fn entry(&self, index: usize) -> Option<TileEntry> {
        self.entries.get(index).copied()
    }

    /// Appends the next tile as a copy of tile `index` (an earlier one, by its number
    /// in storage order): the same blob, stored once, without hashing it again. Fails
    /// when there is no such tile yet.
    pub fn push_copy(&mut self, index: usize) -> Result<(), AtlasError> {
        let Some(&entry) = self.entries.get(index) else {
            return Err(AtlasError::Invalid {
                path: self.dest.clone(),
                what: format!("tile {} copies tile {index}, which is not written yet", self.entries.len()),
            });
        };
        self.entries.push(entry);
        self.shared += 1;
        Ok(())
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
        let io = |source| AtlasError::Io { path: self.tmp.path().to_path_buf(), source };
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
        let io = |source| AtlasError::Io { path: self.tmp.path().to_path_buf(), source };
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
        let io = |source| AtlasError::Io { path: self.tmp.path().to_path_buf(), source };
        let out = self.out.take().ok_or_else(|| io(std::io::Error::other("writer already finished")))?;
        let mut file = out.into_inner().map_err(|e| io(e.into_error()))?;
        if self.version >= 2 {
            return self.finish_v2(file, expected);
        }
        let mut meta = Vec::with_capacity((self.data_offset - HEADER_BYTES as u64) as usize);
        for l in &self.layers {
            meta.extend_from_slice(&encode_layer(l));
        }
        meta.extend_from_slice(&self.record);
        for e in &self.entries {
            meta.extend_from_slice(&encode_entry(e));
        }
        let header = Header {
            version: self.version,
            layer_count: self.layers.len() as u32,
            flags: self.flags,
            tile_count: expected,
            index_offset: self.v1_index_offset(),
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
        Self::publish(&mut self.tmp, &self.dest)?;
        Ok(self.pos)
    }

    /// Renames the finished temporary file `tmp` into place and persists the rename.
    pub(crate) fn publish(tmp: &mut TempPath, dest: &Path) -> Result<(), AtlasError> {
        std::fs::rename(tmp.path(), dest)
            .map_err(|source| AtlasError::Io { path: dest.to_path_buf(), source })?;
        tmp.keep();
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Persist the rename itself; not every filesystem supports this.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// Writes the version-2 file from the spooled blobs in `spool` (canonical order,
    /// at the offsets of `self.entries`): the blobs copied in storage order (a shared
    /// blob once, where its first tile falls), the paged index, the root directory and
    /// the header, into a second temporary file that replaces the destination.
    fn finish_v2(&mut self, spool: File, tiles: u64) -> Result<u64, AtlasError> {
        let order =
            StorageOrder::new(self.layers.iter().map(|l| l.layout).collect(), self.flags & FLAG_STACKED != 0);
        let sequence = order.sequence();
        let per = page_entries_for(self.layers.len(), tiles);
        let pages = tiles.div_ceil(u64::from(per));
        let head_end = (HEADER_BYTES + self.layers.len() * LAYER_BYTES + self.record.len()) as u64
            + Root::encoded_len(pages);
        let index_offset = head_end.next_multiple_of(BLOB_ALIGN);
        let data_offset = (index_offset + tiles * ENTRY_BYTES as u64).next_multiple_of(BLOB_ALIGN);
        let file_name = self.dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut tmp =
            TempPath::new(self.dest.with_file_name(temp_files::temp_name(&format!(".{file_name}."), "-v2")));
        let io = |source| AtlasError::Io { path: tmp.path().to_path_buf(), source };
        let file = File::options().write(true).create(true).truncate(true).open(tmp.path()).map_err(io)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.seek(SeekFrom::Start(data_offset)).map_err(io)?;
        let mut moved: HashMap<u64, u64> = HashMap::new();
        let mut index = Vec::with_capacity(sequence.len() * ENTRY_BYTES);
        let (mut pos, mut stored_bytes) = (data_offset, 0u64);
        let mut blob = Vec::new();
        for &canonical in &sequence {
            let e = self.entries[canonical as usize];
            let offset = match moved.get(&e.offset) {
                Some(&o) => o,
                None => {
                    let aligned = pos.next_multiple_of(BLOB_ALIGN);
                    out.write_all(&[0u8; BLOB_ALIGN as usize][..(aligned - pos) as usize]).map_err(io)?;
                    blob.resize(e.length as usize, 0);
                    spool.read_exact_at(&mut blob, e.offset).map_err(io)?;
                    out.write_all(&blob).map_err(io)?;
                    moved.insert(e.offset, aligned);
                    pos = aligned + u64::from(e.length);
                    stored_bytes += u64::from(e.length);
                    aligned
                }
            };
            index.extend_from_slice(&encode_entry(&TileEntry { offset, ..e }));
        }
        let page_crcs = index.chunks(per as usize * ENTRY_BYTES).map(crc32fast::hash).collect();
        let mut meta = Vec::with_capacity((index_offset - HEADER_BYTES as u64) as usize);
        for l in &self.layers {
            meta.extend_from_slice(&encode_layer(l));
        }
        meta.extend_from_slice(&Root { page_entries: per, stored_bytes, page_crcs }.encode());
        meta.extend_from_slice(&self.record);
        let header = Header {
            version: 2,
            layer_count: self.layers.len() as u32,
            flags: self.flags,
            tile_count: tiles,
            index_offset,
            data_offset,
            file_size: pos,
            meta_crc: crc32fast::hash(&meta),
        };
        let mut file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&header.encode()).map_err(io)?;
        file.write_all(&meta).map_err(io)?;
        file.write_all(&vec![0u8; (index_offset - head_end) as usize]).map_err(io)?;
        file.write_all(&index).map_err(io)?;
        file.set_len(pos).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        drop(spool);
        Self::publish(&mut tmp, &self.dest)?;
        self.pos = pos;
        Ok(pos)
    }
}

impl Drop for AtlasWriter {
    /// An unfinished or failed write leaves nothing behind.
    fn drop(&mut self) {
        // Close the file before `tmp` deletes it.
        self.out = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::atlas::{Atlas, ColorSpace, Wrap};
    use crate::format::tile::{TextureLayout, TileId};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A key collision (forced here) costs a comparison, never a wrong tile.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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

    /// Renaming the finished atlas over a device node or a FIFO would replace it.
    // Devices, FIFOs and links: native only.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn only_a_regular_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let layer = LayerInfo {
            name: "c".into(),
            layout: TextureLayout::new(16, 16, 16, 0).unwrap(),
            codec: Codec::Raw,
            wrap: Wrap::Clamp,
            color: ColorSpace::Linear,
            first_tile: 0,
        };
        let fifo = dir.path().join("pipe.tsa");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for dest in [Path::new("/dev/null"), &fifo, dir.path()] {
            let err = AtlasWriter::create(dest, vec![layer.clone()]).err().expect("not a regular file");
            assert!(matches!(err, AtlasError::NotAFile { .. }), "{err}");
            assert!(err.to_string().contains(&*dest.to_string_lossy()), "{err}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file");
        let link = dir.path().join("link.tsa");
        std::fs::write(dir.path().join("old.tsa"), b"old").unwrap();
        std::os::unix::fs::symlink(dir.path().join("old.tsa"), &link).unwrap();
        assert!(AtlasWriter::create(&link, vec![layer]).is_ok());
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
