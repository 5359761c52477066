//! Sharded bakes (issue 27): one bake spread over the tasks of a batch engine
//! (Kubernetes Indexed Jobs, Slurm job arrays, AWS Batch array jobs), each of which is
//! given only an index.
//!
//! Shard `I` of `N` encodes the tiles of one contiguous range of the version-2 storage
//! order ([`crate::format::atlas::order::StorageOrder`]: coarse mips first, then each mip
//! along a Morton curve), the `I`-th of `N` ranges of equal tile counts, so every task
//! encodes the same number of tiles. Every shard reads and filters the whole pyramid from
//! the source (reading and filtering cost a few percent of encoding; see BENCHMARKS.md
//! "Sharded bakes") and encodes only its own tiles. It writes them, atomically, to a
//! *part* file `OUT.shards/I-of-N.part` ([`part_path`]); a rerun of the same shard
//! replaces that file and nothing else.
//!
//! The output may also be an `s3://` URL: the part is staged locally and uploaded, and
//! the merge reads and writes the objects under that prefix.
//!
//! [`merge_shards`] then writes the atlas from the parts without decoding or encoding a
//! tile, in one of two forms ([`MergeForm`]):
//! - a *split atlas* (the default): an index object naming the parts as its data objects
//!   ([`crate::format::atlas::split`]). The merge reads only the parts' records and
//!   writes 24 bytes per tile, so at any scale it moves a fraction of a percent of the
//!   atlas; every tile has the single-process bake's entry and bytes.
//! - *one file*: every blob copied once, checked against its CRC-32, in tile order into
//!   an [`AtlasWriter`], which deduplicates and lays the file out exactly as a
//!   single-process bake does: byte for byte the same file.
//!
//! The part format (2) is specified in `docs/atlas-format.md`, "Shard parts": blobs in
//! storage order, each at a multiple of 16; entries (tile number, offset, length, raw
//! length, CRC-32, codec) in tile order; a JSON manifest ([`PartManifest`]); a 32-byte
//! trailer (magic `TSRSHRD1`, offsets, CRC-32 of entries and manifest).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Progress;
use crate::format::atlas::order::StorageOrder;
use crate::format::atlas::split::{self, DataObject};
use crate::format::atlas::{
    AtlasError, AtlasWriter, BLOB_ALIGN, ENTRY_BYTES, LayerInfo, TileEntry, blob_hash, decode_entry,
    encode_entry, page_entries_for,
};
use crate::format::codec::Codec;
use crate::format::tile::TextureLayout;
use crate::temp_files::{TempPath, temp_name};

/// The environment variables batch engines give each task its index in, in the order
/// they are looked up: Kubernetes Indexed Jobs, Slurm job arrays, AWS Batch array jobs.
pub const INDEX_VARIABLES: [&str; 3] =
    ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AWS_BATCH_JOB_ARRAY_INDEX"];

const TRAILER_MAGIC: &[u8; 8] = b"TSRSHRD2";
const TRAILER_BYTES: usize = 32;
/// The part format this code writes and reads (2: blobs in storage order, each at a
/// multiple of 16, so that a part can serve as a split atlas' data object).
pub const PART_FORMAT: u32 = 2;
/// Largest manifest read back (a layer table of thousands of layers fits).
const MANIFEST_MAX: u64 = 16 << 20;

/// One shard of a bake: `index` of `count`, from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    /// Which shard, `0..count`.
    pub index: u32,
    /// How many shards the bake is cut into, at least 1.
    pub count: u32,
}

/// Why a shard could not be chosen, written or merged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// `--shard` was not `I/N` or `N` with `I < N`.
    #[error(
        "shard '{0}': expected I/N (0 <= I < N, e.g. 3/16) or N with the index in $JOB_COMPLETION_INDEX, $SLURM_ARRAY_TASK_ID or $AWS_BATCH_JOB_ARRAY_INDEX"
    )]
    Spec(String),
    /// Only the count was given and no batch engine's index variable is set.
    #[error(
        "--shard {count}: no shard index: none of $JOB_COMPLETION_INDEX, $SLURM_ARRAY_TASK_ID, $AWS_BATCH_JOB_ARRAY_INDEX is set (or give --shard I/{count})"
    )]
    NoIndex {
        /// The shard count given.
        count: u32,
    },
    /// An index variable holds something other than an index below the count.
    #[error("${variable}={value}: not a shard index below {count}")]
    BadIndex {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// The shard count.
        count: u32,
    },
    /// Reading or writing a part failed.
    #[error("{path}: {source}")]
    Io {
        /// The part or the folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A part is missing, damaged, or from another bake.
    #[error("{path}: {reason}")]
    Part {
        /// The part.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No parts to merge.
    #[error("{0}: no shard parts (I-of-N.part) to merge; run the shards first (tessera bake … --shard I/N)")]
    NoParts(PathBuf),
    /// Writing the atlas failed.
    #[error(transparent)]
    Atlas(#[from] AtlasError),
}

impl std::str::FromStr for Shard {
    type Err = ShardError;

    /// `I/N`; or `N` alone, the index taken from the first of [`INDEX_VARIABLES`] set.
    fn from_str(s: &str) -> Result<Self, ShardError> {
        let bad = || ShardError::Spec(s.to_string());
        let number = |t: &str| t.trim().parse::<u32>().map_err(|_| bad());
        match s.split_once('/') {
            Some((i, n)) => Shard::new(number(i)?, number(n)?).ok_or_else(bad),
            None => Shard::from_env(number(s)?, |v| std::env::var(v).ok()),
        }
    }
}

impl Shard {
    /// Shard `index` of `count`; `None` unless `index < count`.
    pub fn new(index: u32, count: u32) -> Option<Self> {
        (index < count).then_some(Self { index, count })
    }

    /// Shard of `count` whose index the first set of [`INDEX_VARIABLES`] gives (`var`
    /// reads a variable).
    pub fn from_env(count: u32, var: impl Fn(&str) -> Option<String>) -> Result<Self, ShardError> {
        if count == 0 {
            return Err(ShardError::Spec(count.to_string()));
        }
        let (variable, value) = INDEX_VARIABLES
            .iter()
            .find_map(|&v| var(v).map(|value| (v, value)))
            .ok_or(ShardError::NoIndex { count })?;
        value.trim().parse::<u32>().ok().and_then(|i| Shard::new(i, count)).ok_or(ShardError::BadIndex {
            variable,
            value,
            count,
        })
    }

    /// The storage positions of the tiles this shard encodes, out of `tiles` indexed in
    /// pages of `page_entries`: the `index`-th of `count` contiguous runs of whole index
    /// pages whose page counts differ by at most one (so every shard writes whole pages
    /// of the atlas' index, and a split merge moves none of them). A shard of an atlas
    /// with fewer pages than shards may have no tiles.
    pub fn range(&self, tiles: u64, page_entries: u32) -> Range<u64> {
        let per = u64::from(page_entries.max(1));
        let pages = tiles.div_ceil(per);
        let at =
            |i: u32| ((u128::from(pages) * u128::from(i) / u128::from(self.count)) as u64 * per).min(tiles);
        at(self.index)..at(self.index + 1)
    }

    /// [`Shard::range`] of an atlas of `layers`, in the pages of [`shard_page_entries`].
    pub fn range_of(&self, layers: &[LayerInfo]) -> Range<u64> {
        let tiles: u64 = layers.iter().map(|l| l.layout.tile_count()).sum();
        self.range(tiles, shard_page_entries(layers.len(), tiles, self.count))
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Index entries per page of an atlas of `tiles` tiles in `layer_count` layers baked as
/// `count` shards: what a single bake uses, but at most `⌈tiles / count⌉`, so that every
/// shard has pages of its own even when the atlas has fewer pages than shards.
pub fn shard_page_entries(layer_count: usize, tiles: u64, count: u32) -> u32 {
    let share = tiles.div_ceil(u64::from(count.max(1))).max(1);
    page_entries_for(layer_count, tiles).min(u32::try_from(share).unwrap_or(u32::MAX))
}

/// The folder of the parts of the atlas `out`: `OUT.shards` beside it.
pub fn shard_dir(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".shards");
    out.with_file_name(name)
}

/// The part file shard `shard` of the atlas `out` writes: `OUT.shards/I-of-N.part`.
pub fn part_path(out: &Path, shard: Shard) -> PathBuf {
    shard_dir(out).join(format!("{}-of-{}.part", shard.index, shard.count))
}

/// What a part says of itself and of the bake it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartManifest {
    /// [`PART_FORMAT`].
    pub format: u32,
    /// The shard that wrote it.
    pub shard: Shard,
    /// Identifies the bake: the layer table and every option that changes a tile. Parts
    /// of one atlas must agree on it.
    pub fingerprint: String,
    /// The atlas' layers (`first_tile` set).
    pub layers: Vec<LayerInfo>,
    /// The atlas header flags (stacked).
    pub flags: u32,
    /// The atlas format version the merge writes.
    pub format_version: u32,
    /// Storage positions of the tiles in the part: it holds one entry for each.
    pub range: [u64; 2],
    /// Index entries per page of the atlas (the range starts on a page boundary).
    pub page_entries: u32,
    /// Where the part's index pages start in it.
    pub index_offset: u64,
    /// CRC-32 of each of its index pages.
    pub page_crcs: Vec<u32>,
    /// Bytes of its distinct blobs.
    pub stored_bytes: u64,
}

/// The bake's identity, for [`PartManifest::fingerprint`]: the layers and flags, and the
/// options that change tiles (codec quality and rate-distortion setting).
pub(crate) fn fingerprint(layers: &[LayerInfo], flags: u32, quality: u32, uastc_rdo: Option<f32>) -> String {
    let text = serde_json::json!({
        "layers": layers, "flags": flags, "quality": quality, "uastc_rdo": uastc_rdo.map(f32::to_bits),
        "tessera": env!("CARGO_PKG_VERSION"),
    })
    .to_string();
    format!("{:08x}{:08x}", crc32fast::hash(text.as_bytes()), text.len())
}

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
fn tile_position(layers: &[LayerInfo], order: &StorageOrder, tile: u64) -> Option<u64> {
    let layer = layers.iter().rposition(|l| l.first_tile <= tile)?;
    let (mip, x, y) = layers[layer].layout.tile_at_index(tile - layers[layer].first_tile)?;
    Some(order.position(layer, mip, x, y))
}

/// One part opened for merging.
pub(crate) struct Part {
    path: PathBuf,
    file: PartFile,
    /// The part's size in bytes.
    pub(crate) len: u64,
    pub(crate) manifest: PartManifest,
}

/// Where a part's bytes are read from: a local file, or an object in a store.
enum PartFile {
    Local(File),
    #[cfg(feature = "remote")]
    Remote(super::shard_remote::Remote),
}

impl PartFile {
    /// Opens the part at `path` (a path or an `s3://` URL); returns it and its size.
    fn open(path: &Path, s3: &[(String, String)]) -> Result<(Self, u64), ShardError> {
        #[cfg(not(feature = "remote"))]
        let _ = s3;
        let io = |source| ShardError::Io { path: path.to_path_buf(), source };
        #[cfg(feature = "remote")]
        if crate::format::atlas::is_remote_location(path) {
            let r = super::shard_remote::Remote::new(path, s3).map_err(|e| io(remote_io(e)))?;
            let len = r.size().map_err(|e| io(remote_io(e)))?;
            return Ok((Self::Remote(r), len));
        }
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok((Self::Local(file), len))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Self::Local(f) => f.read_exact_at(buf, offset),
            #[cfg(feature = "remote")]
            Self::Remote(r) => {
                let bytes = r.read(offset..offset + buf.len() as u64).map_err(remote_io)?;
                buf.copy_from_slice(&bytes);
                Ok(())
            }
        }
    }
}

/// A remote error as an I/O error (not found stays not found).
#[cfg(feature = "remote")]
fn remote_io(e: crate::format::atlas::remote::RemoteError) -> std::io::Error {
    match e {
        crate::format::atlas::remote::RemoteError::NotFound => {
            std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
        }
        other => std::io::Error::other(other.to_string()),
    }
}

pub(crate) fn read_part(path: &Path, s3: &[(String, String)]) -> Result<Part, ShardError> {
    let bad = |reason: String| ShardError::Part { path: path.to_path_buf(), reason };
    let io = |source| ShardError::Io { path: path.to_path_buf(), source };
    let (file, len) = PartFile::open(path, s3)?;
    if len < TRAILER_BYTES as u64 {
        return Err(bad(format!("{len} bytes, shorter than a part's trailer: truncated")));
    }
    let mut trailer = [0u8; TRAILER_BYTES];
    file.read_exact_at(&mut trailer, len - TRAILER_BYTES as u64).map_err(io)?;
    if &trailer[..8] != TRAILER_MAGIC {
        return Err(
            bad("not a Tessera shard part of this format (or truncated): no TSRSHRD2 trailer".into()),
        );
    }
    let u64_at = |at: usize| u64::from_le_bytes(trailer[at..at + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |at: usize| u32::from_le_bytes(trailer[at..at + 4].try_into().unwrap_or([0; 4]));
    let (index_offset, manifest_offset, manifest_len, crc) = (u64_at(8), u64_at(16), u32_at(24), u32_at(28));
    let tail_end = len - TRAILER_BYTES as u64;
    if index_offset > manifest_offset
        || manifest_offset.checked_add(u64::from(manifest_len)) != Some(tail_end)
        || u64::from(manifest_len) > MANIFEST_MAX
    {
        return Err(bad("its trailer's offsets do not fit the file: damaged".into()));
    }
    let mut manifest = vec![0u8; manifest_len as usize];
    file.read_exact_at(&mut manifest, manifest_offset).map_err(io)?;
    if crc32fast::hash(&manifest) != crc {
        return Err(bad("checksum mismatch over its manifest: damaged".into()));
    }
    let manifest: PartManifest =
        serde_json::from_slice(&manifest).map_err(|e| bad(format!("unreadable manifest: {e}")))?;
    if manifest.format != PART_FORMAT {
        return Err(bad(format!(
            "part format {}, this tessera reads {PART_FORMAT}: rerun the shard",
            manifest.format
        )));
    }
    let [first, last] = manifest.range;
    let tiles = last.checked_sub(first).ok_or_else(|| bad(format!("range {:?}", manifest.range)))?;
    let per = u64::from(manifest.page_entries.max(1));
    if manifest.index_offset != index_offset
        || !index_offset.is_multiple_of(BLOB_ALIGN)
        || tiles.checked_mul(ENTRY_BYTES as u64).and_then(|n| n.checked_add(index_offset))
            != Some(manifest_offset)
        || manifest.page_crcs.len() as u64 != tiles.div_ceil(per)
        || manifest.stored_bytes > index_offset
    {
        return Err(bad(format!("its index does not fit its range {:?}: damaged", manifest.range)));
    }
    Ok(Part { path: path.to_path_buf(), file, len, manifest })
}

impl Part {
    /// The part's index entries, one per storage position of its range, each page
    /// checked against its CRC-32 and each blob against the part's bounds.
    fn entries(&self) -> Result<Vec<TileEntry>, ShardError> {
        let bad = |reason: String| ShardError::Part { path: self.path.clone(), reason };
        let m = &self.manifest;
        let mut index = vec![0u8; ((m.range[1] - m.range[0]) as usize) * ENTRY_BYTES];
        self.file
            .read_exact_at(&mut index, m.index_offset)
            .map_err(|source| ShardError::Io { path: self.path.clone(), source })?;
        let per = m.page_entries.max(1) as usize * ENTRY_BYTES;
        for (p, (page, &crc)) in index.chunks(per).zip(&m.page_crcs).enumerate() {
            if crc32fast::hash(page) != crc {
                return Err(bad(format!(
                    "index page {p} fails its CRC-32: damaged, rerun shard {}",
                    m.shard
                )));
            }
        }
        index
            .chunks_exact(ENTRY_BYTES)
            .enumerate()
            .map(|(i, b)| {
                let e = decode_entry(b).map_err(|code| bad(format!("entry {i}: unknown codec {code}")))?;
                if e.offset.checked_add(u64::from(e.length)).is_none_or(|end| end > m.index_offset)
                    || !e.offset.is_multiple_of(BLOB_ALIGN)
                {
                    return Err(bad(format!("entry {i}: its blob lies outside the part or is not aligned")));
                }
                Ok(e)
            })
            .collect()
    }
}

/// The shard counts of the parts in `OUT.shards/` and their indices, from the file names.
fn parts_present(dir: &Path, s3: &[(String, String)]) -> Result<BTreeMap<u32, Vec<u32>>, ShardError> {
    let mut found: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for name in list_dir(dir, s3)? {
        let Some((i, n)) = name.strip_suffix(".part").and_then(|s| s.split_once("-of-")) else { continue };
        if let (Ok(i), Ok(n)) = (i.parse::<u32>(), n.parse::<u32>()) {
            found.entry(n).or_default().push(i);
        }
    }
    Ok(found)
}

/// The names of the files in `dir` (a folder, or the objects under an `s3://` prefix);
/// [`ShardError::NoParts`] when there is no such folder.
pub(crate) fn list_dir(dir: &Path, s3: &[(String, String)]) -> Result<Vec<String>, ShardError> {
    #[cfg(not(feature = "remote"))]
    let _ = s3;
    #[cfg(feature = "remote")]
    if crate::format::atlas::is_remote_location(dir) {
        let r = super::shard_remote::Remote::new(dir, s3)
            .and_then(|r| r.list())
            .map_err(|e| ShardError::Io { path: dir.to_path_buf(), source: remote_io(e) })?;
        return Ok(r.into_iter().map(|(name, _)| name).collect());
    }
    match std::fs::read_dir(dir) {
        Ok(e) => Ok(e.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ShardError::NoParts(dir.to_path_buf())),
        Err(source) => Err(ShardError::Io { path: dir.to_path_buf(), source }),
    }
}

/// What [`merge_shards`] did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MergeReport {
    /// Parts merged.
    pub parts: u32,
    /// Tiles in the atlas.
    pub tiles: u64,
    /// Bytes of blobs read from the parts (0 for a split atlas: none is read).
    pub blob_bytes: u64,
    /// Bytes of the parts' entries and manifests read.
    pub record_bytes: u64,
    /// Size of the atlas written (the index object of a split atlas).
    pub file_bytes: u64,
    /// Size of the atlas' tile data: the blobs of a single file, the data objects of a
    /// split atlas.
    pub data_bytes: u64,
    /// Whether a split atlas was written.
    pub split: bool,
}

/// Which atlas [`merge_shards`] writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MergeForm {
    /// A split atlas: an index object naming the parts as its data objects. Only the
    /// parts' records are read and only the index is written; the parts must stay.
    /// Needs format version 2.
    #[default]
    Split,
    /// One file: every blob copied, byte for byte the file of a single-process bake.
    OneFile,
}

/// The complete, consistent set of parts of `out`, checked against each other, with the
/// atlas' layers (`first_tile` set) and storage order.
struct Parts {
    dir: PathBuf,
    parts: Vec<Part>,
    layers: Vec<LayerInfo>,
    order: StorageOrder,
    total: u64,
}

impl Parts {
    fn open(out: &Path, s3: &[(String, String)]) -> Result<Self, ShardError> {
        let dir = shard_dir(out);
        let present = parts_present(&dir, s3)?;
        let (&count, indices) = match present.len() {
            0 => return Err(ShardError::NoParts(dir)),
            1 => present.iter().next().ok_or_else(|| ShardError::NoParts(dir.clone()))?,
            _ => {
                let counts: Vec<String> = present.keys().map(|n| format!("{n}")).collect();
                return Err(ShardError::Part {
                    path: dir,
                    reason: format!(
                        "parts of bakes cut into {} shards are mixed here; remove the stale ones",
                        counts.join(" and ")
                    ),
                });
            }
        };
        let missing: Vec<String> =
            (0..count).filter(|i| !indices.contains(i)).map(|i| format!("{i}-of-{count}.part")).collect();
        if !missing.is_empty() {
            return Err(ShardError::Part {
                path: dir,
                reason: format!("{} of {count} parts missing: {}", missing.len(), missing.join(", ")),
            });
        }
        let mut parts: Vec<Part> = Vec::with_capacity(count as usize);
        for i in 0..count {
            let shard = Shard { index: i, count };
            let part = read_part(&part_path(out, shard), s3)?;
            let bad = |reason: String| ShardError::Part { path: part.path.clone(), reason };
            if part.manifest.shard != shard {
                return Err(bad(format!("holds shard {}, its name says {shard}", part.manifest.shard)));
            }
            if let Some(first) = parts.first() {
                let m = &part.manifest;
                if (m.fingerprint.as_str(), &m.layers, m.flags, m.format_version)
                    != (
                        first.manifest.fingerprint.as_str(),
                        &first.manifest.layers,
                        first.manifest.flags,
                        first.manifest.format_version,
                    )
                {
                    return Err(bad(format!(
                        "from another bake than {} (other inputs or options): rerun it",
                        first.path.display()
                    )));
                }
            }
            parts.push(part);
        }
        let manifest = &parts[0].manifest;
        let layers = manifest.layers.clone();
        let mut first = 0;
        for l in &layers {
            // The layout as the reader would derive it: a forged manifest cannot smuggle one in.
            let y = l.layout;
            let valid = TextureLayout::new(y.width(), y.height(), y.tile_size(), y.border()).ok();
            if valid != Some(y) || l.first_tile != first {
                return Err(ShardError::Part {
                    path: parts[0].path.clone(),
                    reason: format!("layer '{}': invalid layout", l.name),
                });
            }
            first += y.tile_count();
        }
        let order = StorageOrder::new(
            layers.iter().map(|l| l.layout).collect(),
            manifest.flags & crate::format::atlas::FLAG_STACKED != 0,
        );
        let total = first;
        let per = shard_page_entries(layers.len(), total, count);
        let mut expect = 0;
        for p in &parts {
            let want = Shard { index: p.manifest.shard.index, count }.range(total, per);
            if p.manifest.range != [want.start, want.end]
                || want.start != expect
                || p.manifest.page_entries != per
            {
                return Err(ShardError::Part {
                    path: p.path.clone(),
                    reason: format!(
                        "covers storage positions {:?}, its shard's are {want:?}",
                        p.manifest.range
                    ),
                });
            }
            expect = want.end;
        }
        Ok(Self { dir, parts, layers, order, total })
    }

    /// The part holding storage position `pos`, and its number.
    fn holding(&self, pos: u64) -> Option<(usize, &Part)> {
        let k = self.parts.partition_point(|p| p.manifest.range[1] <= pos);
        self.parts.get(k).map(|p| (k, p))
    }

    /// Bytes of the parts' manifests and trailers (what a split merge reads).
    fn record_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| {
                p.len
                    - p.manifest.index_offset
                    - (p.manifest.range[1] - p.manifest.range[0]) * ENTRY_BYTES as u64
            })
            .sum()
    }
}

/// Writes the atlas `out` from the complete set of parts in `OUT.shards/` (all `N` parts
/// of one shard count, from one bake: same fingerprint, layers, flags and format
/// version, ranges covering every tile once), without decoding or encoding a tile.
///
/// [`MergeForm::Split`] writes only an index object at `out`, naming the parts as its
/// data objects: the merge reads the parts' records and writes about 24 bytes per tile.
/// Every tile has the entry (codec, length, CRC-32) of the single-process bake; the
/// parts must stay where they are. [`MergeForm::OneFile`] copies every blob, checked
/// against its CRC-32, in tile order into an [`AtlasWriter`], so the atlas is byte for
/// byte the file of a single-process bake; the parts may be deleted afterwards.
pub fn merge_shards(out: &Path, form: MergeForm, progress: &dyn Progress) -> Result<MergeReport, ShardError> {
    merge_shards_with(out, form, &[], progress)
}

/// [`merge_shards`] with S3 settings for an `s3://` destination, on top of the `AWS_*`
/// environment (as [`RemoteOptions::s3`](crate::format::atlas::RemoteOptions::s3)).
pub fn merge_shards_with(
    out: &Path,
    form: MergeForm,
    s3: &[(String, String)],
    progress: &dyn Progress,
) -> Result<MergeReport, ShardError> {
    let parts = Parts::open(out, s3)?;
    let version = parts.parts[0].manifest.format_version;
    match form {
        MergeForm::Split if version < 2 => Err(ShardError::Part {
            path: parts.dir,
            reason: format!(
                "a split atlas needs format version 2, these parts were baked for version {version}: \
                 merge them into one file (--one-file)"
            ),
        }),
        MergeForm::Split => merge_split(out, &parts, s3, progress),
        MergeForm::OneFile if crate::format::atlas::is_remote_location(out) => Err(ShardError::Part {
            path: out.to_path_buf(),
            reason: "a one-file merge writes a local file; merge a remote bake as a split atlas \
                     (the default), which moves no tile"
                .into(),
        }),
        MergeForm::OneFile => merge_one_file(out, &parts, progress),
    }
}

fn merge_one_file(out: &Path, parts: &Parts, progress: &dyn Progress) -> Result<MergeReport, ShardError> {
    let manifest = &parts.parts[0].manifest;
    let mut writer = AtlasWriter::create_with_flags(out, parts.layers.clone(), manifest.flags)?;
    writer.set_format_version(manifest.format_version)?;
    progress.set_length(parts.total);
    progress.set_message("merging shard parts");
    let entries: Vec<Vec<TileEntry>> = parts.parts.iter().map(Part::entries).collect::<Result<_, _>>()?;
    let (mut blob, mut blob_bytes) = (Vec::new(), 0u64);
    for tile in 0..parts.total {
        let no_place =
            || ShardError::Part { path: parts.dir.clone(), reason: format!("tile {tile}: no part holds it") };
        let pos = tile_position(&parts.layers, &parts.order, tile).ok_or_else(no_place)?;
        let (k, part) = parts.holding(pos).ok_or_else(no_place)?;
        let e = *entries[k].get((pos - part.manifest.range[0]) as usize).ok_or_else(no_place)?;
        blob.resize(e.length as usize, 0);
        part.file
            .read_exact_at(&mut blob, e.offset)
            .map_err(|source| ShardError::Io { path: part.path.clone(), source })?;
        if crc32fast::hash(&blob) != e.crc32 {
            return Err(ShardError::Part {
                path: part.path.clone(),
                reason: format!(
                    "tile {tile}: its blob fails its CRC-32: damaged, rerun shard {}",
                    part.manifest.shard
                ),
            });
        }
        writer.push_tile(&blob, e.codec, e.raw_length)?;
        blob_bytes += u64::from(e.length);
        progress.inc(1);
    }
    let file_bytes = writer.finish()?;
    let index_bytes: u64 = entries.iter().map(|e| e.len() as u64 * ENTRY_BYTES as u64).sum();
    Ok(MergeReport {
        parts: parts.parts.len() as u32,
        tiles: parts.total,
        blob_bytes,
        record_bytes: parts.record_bytes() + index_bytes,
        file_bytes,
        data_bytes: file_bytes,
        split: false,
    })
}

fn merge_split(
    out: &Path,
    parts: &Parts,
    s3: &[(String, String)],
    progress: &dyn Progress,
) -> Result<MergeReport, ShardError> {
    progress.set_length(parts.parts.len() as u64);
    progress.set_message("indexing shard parts");
    let file_name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (mut objects, mut page_crcs, mut stored_bytes) = (Vec::new(), Vec::new(), 0u64);
    for p in &parts.parts {
        let m = &p.manifest;
        let name = format!("{file_name}.shards/{}-of-{}.part", m.shard.index, m.shard.count);
        split::check_name(&name).map_err(|why| ShardError::Part {
            path: out.to_path_buf(),
            reason: format!("cannot name data object {name:?}: {why}"),
        })?;
        objects.push(DataObject {
            name,
            size: p.len,
            index_offset: m.index_offset,
            first_page: page_crcs.len() as u32,
            pages: m.page_crcs.len() as u32,
        });
        page_crcs.extend_from_slice(&m.page_crcs);
        stored_bytes += m.stored_bytes;
        progress.inc(1);
    }
    let manifest = &parts.parts[0].manifest;
    let per = manifest.page_entries;
    let index = split::index_object(
        &parts.layers,
        manifest.flags,
        parts.total,
        per,
        page_crcs,
        stored_bytes,
        &objects,
    );
    write_atomically(out, &index, s3)?;
    Ok(MergeReport {
        parts: parts.parts.len() as u32,
        tiles: parts.total,
        blob_bytes: 0,
        record_bytes: parts.record_bytes(),
        file_bytes: index.len() as u64,
        data_bytes: objects.iter().map(|o| o.size).sum(),
        split: true,
    })
}

/// Writes `bytes` to `dest` through a temporary file beside it: written, fsynced,
/// renamed into place. An `s3://` destination gets one PUT, atomic too.
fn write_atomically(dest: &Path, bytes: &[u8], s3: &[(String, String)]) -> Result<(), ShardError> {
    #[cfg(not(feature = "remote"))]
    let _ = s3;
    #[cfg(feature = "remote")]
    if crate::format::atlas::is_remote_location(dest) {
        return super::shard_remote::Remote::new(dest, s3)
            .and_then(|r| r.put(bytes.to_vec()))
            .map_err(|e| ShardError::Io { path: dest.to_path_buf(), source: remote_io(e) });
    }
    crate::bake::overwrite::check_output_file(dest)
        .map_err(|e| AtlasError::NotAFile { path: e.path, kind: e.kind })?;
    let file_name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut tmp = TempPath::new(dest.with_file_name(temp_name(&format!(".{file_name}."), "")));
    let io = |source| ShardError::Io { path: dest.to_path_buf(), source };
    let mut f = File::create(tmp.path()).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    AtlasWriter::publish(&mut tmp, dest)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::NoProgress;
    use crate::bake::mosaic::{Mosaic, MosaicCrop};
    use crate::bake::source::Generated;
    use crate::bake::{BakeInput, BakeOptions, bake};
    use crate::format::atlas::Atlas;

    fn inputs() -> Vec<BakeInput> {
        // A plain generated layer and a mosaic whose cells repeat (tile keys: copies).
        let crop = |seed: u8| {
            let texels = (0..16 * 16 * 4).map(|i| (i as u8).wrapping_mul(seed)).collect();
            MosaicCrop::new(format!("c{seed}"), 16, 4, texels).unwrap()
        };
        let mosaic = Mosaic::with_grid(64, 9, vec![crop(3), crop(7)]).unwrap();
        vec![BakeInput::new("g", Generated::with_cell(300, 200, 32)), BakeInput::new("mosaic", mosaic)]
    }

    fn opts(codec: Codec, shard: Option<Shard>) -> BakeOptions {
        BakeOptions { tile_size: 32, border: 2, codec, threads: 2, shard, ..BakeOptions::default() }
    }

    #[test]
    fn merged_shards_equal_the_single_process_bake_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        for (codec, count, version) in
            [(Codec::Lz4, 3, 2), (Codec::Lz4, 1, 2), (Codec::Etc1s, 4, 2), (Codec::Lz4, 5, 1)]
        {
            let whole = dir.path().join(format!("whole-{codec}-{count}-{version}.tsa"));
            let o = BakeOptions { format_version: version, ..opts(codec, None) };
            bake(inputs(), &whole, &o, &NoProgress).unwrap();
            let out = dir.path().join(format!("sharded-{codec}-{count}-{version}.tsa"));
            let mut tiles = 0;
            // Out of order, and one shard twice: a rerun replaces its own part only.
            for (run, i) in (0..count).rev().chain([0]).enumerate() {
                let o = BakeOptions { format_version: version, ..opts(codec, Shard::new(i, count)) };
                let r = bake(inputs(), &out, &o, &NoProgress).unwrap();
                if run < count as usize {
                    tiles += r.layers.iter().map(|l| l.tiles).sum::<u64>();
                }
            }
            assert!(!out.exists(), "a shard writes its part only");
            let report = merge_shards(&out, MergeForm::OneFile, &NoProgress).unwrap();
            assert_eq!((report.parts, report.tiles), (count, tiles));
            assert_eq!(
                std::fs::read(&out).unwrap(),
                std::fs::read(&whole).unwrap(),
                "{codec} {count} shards v{version}"
            );
            assert!(Atlas::open(&out).unwrap().verify(&NoProgress).is_empty());
        }
    }

    #[test]
    fn a_split_merge_reads_only_records_and_equals_the_single_bake_tile_for_tile() {
        let dir = tempfile::tempdir().unwrap();
        for (codec, count) in [(Codec::Lz4, 3), (Codec::Etc1s, 4), (Codec::Raw, 1)] {
            let whole = dir.path().join(format!("whole-{codec}-{count}.tsa"));
            bake(inputs(), &whole, &opts(codec, None), &NoProgress).unwrap();
            let out = dir.path().join(format!("split-{codec}-{count}.tsa"));
            for i in 0..count {
                bake(inputs(), &out, &opts(codec, Shard::new(i, count)), &NoProgress).unwrap();
            }
            let report = merge_shards(&out, MergeForm::Split, &NoProgress).unwrap();
            assert!(report.split && report.blob_bytes == 0);
            let (a, b) = (Atlas::open(&whole).unwrap(), Atlas::open(&out).unwrap());
            assert!(b.is_split() && b.data_objects().len() == count as usize);
            assert_eq!(report.file_bytes, b.file_size());
            // The merge read the parts' records and wrote the index: a few % of the data
            // for these tiny tiles (far below 1% for real tile sizes; BENCHMARKS.md).
            assert!((report.record_bytes + report.file_bytes) * 10 < report.data_bytes, "{report:?}");
            assert!(b.verify(&NoProgress).is_empty(), "{codec} {count}");
            for (i, layer) in a.layers().iter().enumerate() {
                for t in layer.layout.tiles(i as u16) {
                    let (ea, eb) = (a.entry(t).unwrap(), b.entry(t).unwrap());
                    assert_eq!((ea.codec, ea.length, ea.crc32), (eb.codec, eb.length, eb.crc32), "{t}");
                    assert_eq!(a.read_tile(t).unwrap(), b.read_tile(t).unwrap(), "{t}");
                }
            }
            // Repeats are stored once per shard, not once per atlas.
            assert!(
                b.stored_bytes() >= a.stored_bytes() && (count > 1 || b.stored_bytes() == a.stored_bytes())
            );
        }
        // Version 1 cannot be split.
        let out = dir.path().join("v1.tsa");
        let o = BakeOptions { format_version: 1, ..opts(Codec::Lz4, Shard::new(0, 1)) };
        bake(inputs(), &out, &o, &NoProgress).unwrap();
        let e = merge_shards(&out, MergeForm::Split, &NoProgress).unwrap_err().to_string();
        assert!(e.contains("version 2") && e.contains("--one-file"), "{e}");
    }

    #[test]
    fn a_split_atlas_whose_part_changed_is_refused_or_reports_its_tiles() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.tsa");
        for i in 0..2 {
            bake(inputs(), &out, &opts(Codec::Lz4, Shard::new(i, 2)), &NoProgress).unwrap();
        }
        merge_shards(&out, MergeForm::Split, &NoProgress).unwrap();
        let part = part_path(&out, Shard::new(1, 2).unwrap());
        let mut bytes = std::fs::read(&part).unwrap();
        // A flipped blob byte: that tile fails its CRC, the rest read.
        bytes[20] ^= 0xFF;
        std::fs::write(&part, &bytes).unwrap();
        let a = Atlas::open(&out).unwrap();
        let errors = a.verify(&NoProgress);
        assert!(
            !errors.is_empty() && errors.iter().all(|e| matches!(e, AtlasError::TileChecksum { .. })),
            "{errors:?}"
        );
        // A part of another size: refused at open, naming it.
        std::fs::write(&part, &bytes[..bytes.len() - 1]).unwrap();
        let e = Atlas::open(&out).unwrap_err().to_string();
        assert!(e.contains("1-of-2.part") && e.contains("its index says"), "{e}");
        std::fs::remove_file(&part).unwrap();
        let e = Atlas::open(&out).unwrap_err().to_string();
        assert!(e.contains("1-of-2.part"), "{e}");
    }

    #[test]
    fn a_missing_foreign_or_damaged_part_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.tsa");
        for i in [0, 2] {
            bake(inputs(), &out, &opts(Codec::Lz4, Shard::new(i, 3)), &NoProgress).unwrap();
        }
        let e = merge_shards(&out, MergeForm::OneFile, &NoProgress).unwrap_err().to_string();
        assert!(e.contains("1 of 3 parts missing: 1-of-3.part"), "{e}");
        // Shard 1 of another bake (other quality).
        let other = BakeOptions { quality: 64, ..opts(Codec::Lz4, Shard::new(1, 3)) };
        bake(inputs(), &out, &other, &NoProgress).unwrap();
        let e = merge_shards(&out, MergeForm::OneFile, &NoProgress).unwrap_err().to_string();
        assert!(e.contains("1-of-3.part") && e.contains("another bake"), "{e}");
        bake(inputs(), &out, &opts(Codec::Lz4, Shard::new(1, 3)), &NoProgress).unwrap();
        // A flipped byte in a blob, then a cut part.
        let part = part_path(&out, Shard::new(1, 3).unwrap());
        let mut bytes = std::fs::read(&part).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&part, &bytes).unwrap();
        let e = merge_shards(&out, MergeForm::OneFile, &NoProgress).unwrap_err().to_string();
        assert!(e.contains("1-of-3.part") && e.contains("CRC-32"), "{e}");
        std::fs::write(&part, &bytes[..bytes.len() - 5]).unwrap();
        let e = merge_shards(&out, MergeForm::OneFile, &NoProgress).unwrap_err().to_string();
        assert!(e.contains("1-of-3.part") && e.contains("truncated"), "{e}");
        assert!(!out.exists(), "no atlas from a failed merge");
        // Parts of a 2-shard bake beside them.
        bake(inputs(), &out, &opts(Codec::Lz4, Shard::new(0, 2)), &NoProgress).unwrap();
        let e = merge_shards(&out, MergeForm::OneFile, &NoProgress).unwrap_err().to_string();
        assert!(e.contains("2 and 3 shards are mixed"), "{e}");
        let e = merge_shards(&dir.path().join("none.tsa"), MergeForm::OneFile, &NoProgress)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no shard parts"), "{e}");
    }

    #[test]
    fn shard_specs_and_index_variables() {
        assert_eq!("3/16".parse::<Shard>().unwrap(), Shard { index: 3, count: 16 });
        assert!(
            "16/16".parse::<Shard>().is_err()
                && "a/2".parse::<Shard>().is_err()
                && "0/0".parse::<Shard>().is_err()
        );
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |v: &str| pairs.iter().find(|(k, _)| *k == v).map(|(_, x)| x.to_string())
        };
        let s = Shard::from_env(8, env(&[("SLURM_ARRAY_TASK_ID", "5"), ("AWS_BATCH_JOB_ARRAY_INDEX", "1")]));
        assert_eq!(s.unwrap(), Shard { index: 5, count: 8 });
        let s = Shard::from_env(8, env(&[("JOB_COMPLETION_INDEX", "2"), ("SLURM_ARRAY_TASK_ID", "5")]));
        assert_eq!(s.unwrap().index, 2, "Kubernetes first");
        let e = Shard::from_env(8, env(&[("AWS_BATCH_JOB_ARRAY_INDEX", "8")])).unwrap_err().to_string();
        assert!(e.contains("AWS_BATCH_JOB_ARRAY_INDEX=8"), "{e}");
        assert!(matches!(Shard::from_env(8, env(&[])), Err(ShardError::NoIndex { count: 8 })));
        // Ranges cover every tile once, in whole pages, page counts within one.
        for (tiles, count, per) in [(0u64, 3u32, 1024u32), (10, 3, 1), (22_369_621, 7, 8192), (5000, 8, 1024)]
        {
            let ranges: Vec<_> = (0..count).map(|i| Shard { index: i, count }.range(tiles, per)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[count as usize - 1].end, tiles);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            assert!(ranges.iter().all(|r| r.start % u64::from(per) == 0));
            let pages: Vec<u64> = ranges.iter().map(|r| (r.end - r.start).div_ceil(u64::from(per))).collect();
            assert!(pages.iter().max().unwrap() - pages.iter().min().unwrap() <= 1, "{pages:?}");
        }
    }
}
