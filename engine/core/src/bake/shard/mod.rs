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
//!
//! By concern: this file holds shard specs, part paths and manifests; `write.rs` writing
//! a part (and the sink a bake writes tiles to); `merge.rs` merging the parts;
//! `clean.rs` removing what a bake wrote (merged parts, staging folders of killed shards).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Progress;
use crate::format::atlas::order::StorageOrder;
use crate::format::atlas::split::{self, DataObject};
use crate::format::atlas::{
    AtlasError, AtlasMeta, AtlasWriter, BLOB_ALIGN, ENTRY_BYTES, LayerInfo, TileEntry, blob_hash,
    decode_entry, encode_entry, page_entries_for,
};
use crate::format::codec::Codec;
use crate::format::tile::TextureLayout;
use crate::local_file::FileExt;
use crate::temp_files::{TempPath, temp_name};

mod clean;
mod merge;
mod write;

#[cfg(feature = "remote")]
pub(crate) use clean::stage_folder;
pub use clean::{PartsRemoved, STAGE_PREFIX, remove_parts, sweep_stages};
pub use merge::{MergeForm, MergeReport, merge_shards, merge_shards_with};
pub(crate) use merge::{parts_present, read_part};
use write::tile_position;
pub(crate) use write::{ShardWriter, TileSink};

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
/// Most shards one bake may be cut into (`--shard I/N`, `--plan N`, `--status N`); a part
/// name of a larger count is not a part. (A split atlas names at most
/// [`split::MAX_DATA_OBJECTS`] parts: more shards merge into one file.)
pub const MAX_SHARDS: u32 = 65536;

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
    /// `--shard` was not `I/N` or `N` with `I < N <= MAX_SHARDS`.
    #[error(
        "shard '{0}': expected I/N (0 <= I < N <= 65536, e.g. 3/16) or N with the index in $JOB_COMPLETION_INDEX, $SLURM_ARRAY_TASK_ID or $AWS_BATCH_JOB_ARRAY_INDEX"
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
    /// Shard `index` of `count`; `None` unless `index < count <=` [`MAX_SHARDS`].
    pub fn new(index: u32, count: u32) -> Option<Self> {
        (index < count && count <= MAX_SHARDS).then_some(Self { index, count })
    }

    /// The shard a part file name `I-of-N.part` stands for: `None` for any other name,
    /// including one whose numbers are not written as a bake writes them (`01-of-2`) or
    /// are out of range (`0-of-4294967295`).
    pub fn from_part_name(name: &str) -> Option<Self> {
        let (i, n) = name.strip_suffix(".part")?.split_once("-of-")?;
        let number = |t: &str| t.parse::<u32>().ok().filter(|v| v.to_string() == t);
        Self::new(number(i)?, number(n)?)
    }

    /// Shard of `count` whose index the first set of [`INDEX_VARIABLES`] gives (`var`
    /// reads a variable).
    pub fn from_env(count: u32, var: impl Fn(&str) -> Option<String>) -> Result<Self, ShardError> {
        if count == 0 || count > MAX_SHARDS {
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

/// `indices` (ascending, distinct) of a bake of `count` shards as part names, runs of
/// consecutive ones collapsed ([`runs_text`]).
pub fn part_runs(indices: &[u32], count: u32) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &i in indices {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(i) => *last = i,
            _ => runs.push((i, i)),
        }
    }
    runs_text(&runs, |i| format!("{i}-of-{count}.part"))
}

/// Runs of shard indices (`(first, last)`, ascending) as text, `name` naming one index:
/// `name(3) … name(6)` for a run, adjacent runs joined, at most 8 runs named and the rest
/// counted, so the line has a bounded length however many shards it stands for.
pub fn runs_text(runs: &[(u32, u32)], name: impl Fn(u32) -> String) -> String {
    let mut merged: Vec<(u32, u32)> = Vec::new();
    for &(a, b) in runs {
        match merged.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(a) => *last = b,
            _ => merged.push((a, b)),
        }
    }
    let mut text: Vec<String> = merged
        .iter()
        .take(8)
        .map(|&(a, b)| if a == b { name(a) } else { format!("{} … {}", name(a), name(b)) })
        .collect();
    if merged.len() > 8 {
        text.push(format!("and {} more runs", merged.len() - 8));
    }
    text.join(", ")
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
    /// The atlas' metadata record (absent when it says nothing): the merge writes it.
    #[serde(default, skip_serializing_if = "AtlasMeta::is_empty")]
    pub meta: AtlasMeta,
}

/// The bake's identity, for [`PartManifest::fingerprint`]: the layers and flags, and the
/// options that change tiles (codec quality and rate-distortion setting).
pub(crate) fn fingerprint(
    layers: &[LayerInfo],
    flags: u32,
    quality: u32,
    uastc_rdo: Option<f32>,
    meta: &AtlasMeta,
) -> String {
    let mut value = serde_json::json!({
        "layers": layers, "flags": flags, "quality": quality, "uastc_rdo": uastc_rdo.map(f32::to_bits),
        "tessera": env!("CARGO_PKG_VERSION"),
    });
    // Only a bake with a metadata record hashes it: other fingerprints stay as they were.
    if !meta.is_empty()
        && let Some(map) = value.as_object_mut()
    {
        map.insert("meta".into(), serde_json::to_value(meta).unwrap_or_default());
    }
    let text = value.to_string();
    format!("{:08x}{:08x}", crc32fast::hash(text.as_bytes()), text.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
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
        // Counts past MAX_SHARDS, and part names that are not written as a bake writes them.
        assert!("0/65537".parse::<Shard>().is_err() && "65535/65536".parse::<Shard>().is_ok());
        assert!(Shard::from_env(u32::MAX, env(&[("SLURM_ARRAY_TASK_ID", "0")])).is_err());
        assert_eq!(Shard::from_part_name("3-of-8.part"), Shard::new(3, 8));
        for bad in
            ["0-of-4294967295.part", "0-of-50000000.part", "03-of-8.part", "8-of-8.part", "+1-of-2.part"]
        {
            assert_eq!(Shard::from_part_name(bad), None, "{bad}");
        }
        assert_eq!(
            part_runs(&[0, 2, 3, 4, 9], 10),
            "0-of-10.part, 2-of-10.part … 4-of-10.part, 9-of-10.part"
        );
        let many: Vec<u32> = (0..40_000).filter(|i| i % 2 == 0).collect();
        let text = part_runs(&many, 40_000);
        assert!(text.len() < 300 && text.ends_with("and 19992 more runs"), "{text}");
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
