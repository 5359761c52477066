//! Baking: source images → mip pyramid filtered in linear light → bordered tiles →
//! per-tile codec → atlas file. Works in bands of one tile row so that memory stays
//! bounded whatever the input size; coarse levels that do not fit the in-memory
//! budget spill to a scratch file beside the output.
//!
//! By concern: this file holds the inputs, options, reports and errors of a bake and
//! the bake of a whole atlas; `pipeline.rs` the pipeline that bakes one layer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use serde::{Deserialize, Serialize};

use crate::bake::filter::downsample;
use crate::bake::shard::{PartManifest, ShardWriter, TileSink, fingerprint};
use crate::bake::source::{LevelStore, RowSource, SourceError, TEXEL_BYTES};
use crate::format::atlas::order::StorageOrder;
use crate::format::atlas::{AtlasError, AtlasMeta, AtlasWriter, ColorSpace, LayerInfo, LayerMeta, Wrap};
use crate::format::codec::{Codec, CodecError, EncodeOptions, Encoded, QUALITY_DEFAULT};
use crate::format::tile::{LayoutError, TextureLayout};
use crate::progress::Progress;

mod pipeline;

use pipeline::*;

/// One input of a bake: becomes one layer of the atlas.
pub struct BakeInput {
    /// Layer name (at most 32 bytes are stored).
    pub name: String,
    /// The mip-0 texels.
    pub source: Box<dyn RowSource>,
    /// Edge behaviour for borders.
    pub wrap: Wrap,
    /// How the texels are encoded (sRGB colour is filtered in linear light).
    pub color: ColorSpace,
    /// Codec of this layer's tiles; `None` takes [`BakeOptions::codec`].
    pub codec: Option<Codec>,
    /// Sub-rectangles (e.g. packed material textures) whose tiles take their borders
    /// from inside the rectangle by its own wrap rule; see [`Region`].
    pub regions: Vec<Region>,
}

impl BakeInput {
    /// A layer named `name` from `source`, with the defaults of an image: clamped at the
    /// edges, the colour space the source tags ([`RowSource::color_space`]) or else sRGB
    /// colour, the bake's codec, no regions. Change a field to change one.
    pub fn new(name: impl Into<String>, source: impl RowSource + 'static) -> Self {
        Self::boxed(name, Box::new(source))
    }

    /// [`BakeInput::new`] for a source already boxed (e.g. by
    /// [`open_image`](crate::bake::open::open_image)).
    pub fn boxed(name: impl Into<String>, source: Box<dyn RowSource>) -> Self {
        Self {
            name: name.into(),
            wrap: Wrap::Clamp,
            color: source.color_space().unwrap_or(ColorSpace::Srgb),
            source,
            codec: None,
            regions: Vec::new(),
        }
    }

    /// A layer from the image file at `path` ([`open_image`](crate::bake::open::open_image)),
    /// named after its file stem, with the defaults of [`BakeInput::new`]. Only the header
    /// is read now; the texels are read when the bake reads them, so
    /// [`bake_if_stale`](crate::bake::bake_if_stale) of a current bake never decodes it.
    pub fn from_image(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let name = path.file_stem().map_or_else(|| "image".into(), |s| s.to_string_lossy().into_owned());
        Ok(Self::boxed(name, crate::bake::open::open_image(path)?))
    }
}

/// A rectangle of a layer, in mip-0 texels, that behaves as a texture of its own at the
/// tile borders. On every mip `m` where no other region touches the tiles it touches
/// ([`crate::bake::pack::owned_mips`]: for rectangles at multiples of `tile_size · 2^m` at
/// least down to that mip, for a lone rectangle on every mip), a tile whose origin lies in
/// the rectangle scaled to mip `m` (start rounded down, end up) takes its border texels
/// from inside the rectangle, clamped to its edge or repeated within it per axis, rather
/// than from the neighbouring texels of the whole layer; texels of such a tile outside
/// the rectangle are filler. Other tiles keep the layer's rule. When regions overlap, the
/// first one listed wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Region {
    /// Left edge, mip-0 texels.
    pub x: u32,
    /// Top edge, mip-0 texels.
    pub y: u32,
    /// Width, mip-0 texels.
    pub width: u32,
    /// Height, mip-0 texels.
    pub height: u32,
    /// Edge rule along u (columns) and v (rows).
    pub wrap: [Wrap; 2],
}

impl Region {
    fn rect(&self) -> [u32; 4] {
        [self.x, self.y, self.width, self.height]
    }

    /// The region on mip `mip` in texels `[x, y, w, h]` (its start rounded down, its end
    /// up), when on that mip it shares no tile with another of `all` (see
    /// [`crate::bake::pack::owned_mips`]); `None` otherwise.
    fn at_mip(&self, all: &[[u32; 4]], index: usize, mip: u32, tile: u32) -> Option<[u32; 4]> {
        if crate::bake::pack::owned_mips(all, index, tile, mip) < mip {
            return None;
        }
        let (x0, y0) = (self.x >> mip, self.y >> mip);
        let x1 = (u64::from(self.x) + u64::from(self.width)).div_ceil(1 << mip) as u32;
        let y1 = (u64::from(self.y) + u64::from(self.height)).div_ceil(1 << mip) as u32;
        Some([x0, y0, x1 - x0, y1 - y0])
    }
}

/// Settings shared by every layer of a bake.
#[derive(Clone, Debug)]
pub struct BakeOptions {
    /// Tile payload side in texels.
    pub tile_size: u32,
    /// Border texels on each side of a tile.
    pub border: u32,
    /// Codec for every tile (an LZ4 tile is stored raw when LZ4 does not shrink it, a
    /// UASTC tile LZ4-supercompressed when that shrinks it; see [`Codec::encode`]).
    pub codec: Codec,
    /// Basis quality, 1..=255 (ETC1S quality level; UASTC pack level, see
    /// [`EncodeOptions::quality`]); raw and LZ4 ignore it.
    pub quality: u32,
    /// UASTC rate-distortion optimisation λ (`None`: off), see [`EncodeOptions::uastc_rdo`].
    pub uastc_rdo: Option<f32>,
    /// Where large intermediate mip levels are spilled; default: the output's folder.
    pub scratch_dir: Option<PathBuf>,
    /// Write a stacked atlas ([`crate::format::atlas::FLAG_STACKED`]): every input must have the
    /// same size, and the layers share tile ids.
    pub stacked: bool,
    /// The atlas format version written: [`crate::format::atlas::VERSION`] (2: paged
    /// index, tiles coarse mips first along a Morton curve, made for range reads) or 1.
    pub format_version: u32,
    /// Encoding threads; 0 (the default) takes one per core this process may run on.
    /// Reading, filtering and writing run on two more threads that mostly wait.
    pub threads: usize,
    /// Bake only this shard's tiles into its part file `OUT.shards/I-of-N.part` instead
    /// of the atlas ([`crate::bake::shard`]); [`crate::bake::shard::merge_shards`] then
    /// writes the atlas from all parts. `None` (the default): the whole atlas.
    pub shard: Option<crate::bake::shard::Shard>,
    /// S3 settings for a shard whose atlas lies in object storage (`s3://…`), on top of
    /// the `AWS_*` environment: object_store's keys and values, as
    /// [`RemoteOptions::s3`](crate::format::atlas::RemoteOptions::s3). Never logged.
    pub s3: Vec<(String, String)>,
}

impl Default for BakeOptions {
    fn default() -> Self {
        Self {
            tile_size: 128,
            border: 4,
            codec: Codec::Lz4,
            quality: QUALITY_DEFAULT,
            uastc_rdo: None,
            scratch_dir: None,
            stacked: false,
            format_version: crate::format::atlas::VERSION,
            threads: 0,
            shard: None,
            s3: Vec::new(),
        }
    }
}

/// What a bake produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BakeReport {
    /// One entry per layer.
    pub layers: Vec<LayerReport>,
    /// Size of the atlas file.
    pub file_bytes: u64,
    /// Wall-clock time of the bake.
    pub seconds: f64,
}

/// What one layer of a bake produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerReport {
    /// Layer name.
    pub name: String,
    /// Mip-0 size.
    pub width: u32,
    /// Mip-0 size.
    pub height: u32,
    /// Mip levels.
    pub mips: u32,
    /// Tiles over all mips.
    pub tiles: u64,
    /// Tiles whose encoded blob was identical to one already in the atlas and is
    /// stored once (see [`AtlasWriter`]); they add no bytes to the file.
    #[serde(default)]
    pub shared_tiles: u64,
    /// Bytes of tile data stored (shared blobs count once).
    pub stored_bytes: u64,
    /// Bytes the tiles take decoded.
    pub raw_bytes: u64,
}

/// Why a bake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BakeError {
    /// An input's size cannot be laid out.
    #[error("input '{name}': {source}")]
    Layout {
        /// The input's layer name.
        name: String,
        /// The problem.
        source: LayoutError,
    },
    /// Reading an input or a scratch level failed.
    #[error("input '{name}': {source}")]
    Read {
        /// The input's layer name.
        name: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing the atlas failed.
    #[error(transparent)]
    Atlas(#[from] AtlasError),
    /// A shard's part could not be written.
    #[error(transparent)]
    Shard(#[from] crate::bake::shard::ShardError),
    /// A tile could not be encoded.
    #[error("input '{name}': encoding a tile: {source}")]
    Encode {
        /// The input's layer name.
        name: String,
        /// The codec's complaint.
        source: CodecError,
    },
    /// The bake options are out of range.
    #[error("bake options: {0}")]
    Options(CodecError),
    /// Tile geometry that the chosen codec cannot store.
    #[error("bake options: {0}")]
    Geometry(String),
    /// Nothing to bake.
    #[error("no inputs to bake")]
    NoInputs,
    /// The output is one of the inputs ([`bake_if_stale`](crate::bake::bake_if_stale)).
    #[error(transparent)]
    Overwrite(#[from] crate::bake::overwrite::OverwriteError),
    /// A stacked bake whose inputs do not all have the first input's size.
    #[error(
        "stacked bake: input '{name}' is {width}x{height} but input '{first}' is \
         {first_width}x{first_height} (stacked layers need one size)"
    )]
    StackedSize {
        /// The input whose size differs.
        name: String,
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
        /// The first input's name.
        first: String,
        /// The first input's width.
        first_width: u32,
        /// The first input's height.
        first_height: u32,
    },
    /// A region that is empty or reaches outside its input.
    #[error("input '{name}': region {region:?} is empty or outside the {width}x{height} texture")]
    Region {
        /// The input's layer name.
        name: String,
        /// The bad region.
        region: Region,
        /// The input's width.
        width: u32,
        /// The input's height.
        height: u32,
    },
}

/// The layer table a bake of `inputs` with `opts` writes (`first_tile` set), after
/// checking the inputs against the options (sizes, regions, Basis block geometry).
pub fn layer_table(inputs: &[BakeInput], opts: &BakeOptions) -> Result<Vec<LayerInfo>, BakeError> {
    let encode_opts =
        EncodeOptions { quality: opts.quality, uastc_rdo: opts.uastc_rdo, ..EncodeOptions::default() };
    let codecs: Vec<Codec> = inputs.iter().map(|i| i.codec.unwrap_or(opts.codec)).collect();
    if let Some(basis) = codecs.iter().find(|c| c.is_basis()) {
        encode_opts.validate().map_err(BakeError::Options)?;
        if !(opts.tile_size + 2 * opts.border).is_multiple_of(4) {
            return Err(BakeError::Geometry(format!(
                "codec {basis} needs tiles whose stored side (tile size + 2 x border = {}) is a multiple of 4 \
                 (4x4 GPU blocks); use an even border",
                opts.tile_size + 2 * opts.border
            )));
        }
    }
    let mut layers = Vec::with_capacity(inputs.len());
    for (input, &codec) in inputs.iter().zip(&codecs) {
        let (w, h) = input.source.size();
        if opts.stacked {
            let (fw, fh) = inputs[0].source.size();
            if (w, h) != (fw, fh) {
                return Err(BakeError::StackedSize {
                    name: input.name.clone(),
                    width: w,
                    height: h,
                    first: inputs[0].name.clone(),
                    first_width: fw,
                    first_height: fh,
                });
            }
        }
        for r in &input.regions {
            let fits = |o: u32, s: u32, n: u32| s > 0 && o.checked_add(s).is_some_and(|e| e <= n);
            if !fits(r.x, r.width, w) || !fits(r.y, r.height, h) {
                return Err(BakeError::Region { name: input.name.clone(), region: *r, width: w, height: h });
            }
        }
        let layout = TextureLayout::new(w, h, opts.tile_size, opts.border)
            .map_err(|source| BakeError::Layout { name: input.name.clone(), source })?;
        layers.push(LayerInfo {
            name: crate::format::atlas::truncate_name(&input.name).to_string(),
            layout,
            codec,
            wrap: input.wrap,
            color: input.color,
            first_tile: 0,
        });
    }
    let mut first_tile = 0;
    for l in &mut layers {
        l.first_tile = first_tile;
        first_tile += l.layout.tile_count();
    }
    Ok(layers)
}

/// The fingerprint the parts of a sharded bake of `inputs` with `opts` carry
/// ([`crate::bake::shard::PartManifest::fingerprint`]): what `tessera bake --status`
/// compares parts against.
pub fn bake_fingerprint(inputs: &[BakeInput], opts: &BakeOptions) -> Result<String, BakeError> {
    let flags = if opts.stacked { crate::format::atlas::FLAG_STACKED } else { 0 };
    Ok(fingerprint(&layer_table(inputs, opts)?, flags, opts.quality, opts.uastc_rdo, &bake_meta(inputs)))
}

/// The metadata record a bake of `inputs` writes: what each source knows of its texels
/// ([`RowSource::layer_meta`]: a GeoTIFF's georeferencing; [`RowSource::data_scale`]: a
/// data raster's value scale and nodata), one entry per layer, or an empty record when no
/// source knows anything.
pub fn bake_meta(inputs: &[BakeInput]) -> AtlasMeta {
    let layers: Vec<LayerMeta> = inputs
        .iter()
        .map(|i| {
            let mut meta = i.source.layer_meta();
            meta.data = meta.data.or_else(|| i.source.data_scale());
            meta
        })
        .collect();
    if layers.iter().all(LayerMeta::is_empty) {
        return AtlasMeta::default();
    }
    AtlasMeta { layers, ..AtlasMeta::default() }
}

/// Bakes `inputs` into the atlas `out` (written atomically). Temporary files that killed
/// bakes left beside `out` or in the scratch folder are removed first
/// ([`crate::temp_files::sweep`]).
pub fn bake(
    inputs: Vec<BakeInput>,
    out: &Path,
    opts: &BakeOptions,
    progress: &dyn Progress,
) -> Result<BakeReport, BakeError> {
    if inputs.is_empty() {
        return Err(BakeError::NoInputs);
    }
    #[cfg(feature = "remote")]
    if crate::format::atlas::is_remote_location(out) {
        return bake_shard_to_store(inputs, out, opts, progress);
    }
    let encode_opts =
        EncodeOptions { quality: opts.quality, uastc_rdo: opts.uastc_rdo, ..EncodeOptions::default() };
    let start = Instant::now();
    let layers = layer_table(&inputs, opts)?;
    let total: u64 = layers.iter().map(|l| l.layout.tile_count()).sum();
    let order = StorageOrder::new(layers.iter().map(|l| l.layout).collect(), opts.stacked);
    let range = opts.shard.map_or(0..total, |s| s.range_of(&layers));
    progress.set_length(range.end - range.start);
    let scratch = match &opts.scratch_dir {
        Some(d) => d.clone(),
        None => out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(),
    };
    // Spilled levels of bakes that were killed would otherwise stay forever.
    crate::temp_files::sweep(&scratch, crate::bake::source::SCRATCH_PREFIX);
    let flags = if opts.stacked { crate::format::atlas::FLAG_STACKED } else { 0 };
    let meta = bake_meta(&inputs);
    let mut output = match opts.shard {
        None => {
            let mut writer = AtlasWriter::create_with_flags(out, layers.clone(), flags)?;
            writer.set_format_version(opts.format_version)?;
            writer.set_meta(&meta)?;
            Output::Atlas(writer)
        }
        Some(shard) => {
            AtlasWriter::check_version(out, opts.format_version)?;
            let manifest = PartManifest {
                format: crate::bake::shard::PART_FORMAT,
                shard,
                fingerprint: fingerprint(&layers, flags, opts.quality, opts.uastc_rdo, &meta),
                layers: layers.clone(),
                flags,
                format_version: opts.format_version,
                range: [range.start, range.end],
                page_entries: crate::bake::shard::shard_page_entries(layers.len(), total, shard.count),
                index_offset: 0,
                page_crcs: Vec::new(),
                stored_bytes: 0,
                meta: meta.clone(),
            };
            Output::Part(ShardWriter::create(out, manifest)?)
        }
    };
    let threads = bake_threads(opts);
    let mut reports = Vec::with_capacity(inputs.len());
    for (i, (input, layer)) in inputs.iter().zip(&layers).enumerate() {
        let encode = EncodeOptions { color: layer.color, ..encode_opts };
        // A whole bake keeps every tile without asking where it is stored.
        let keep =
            |mip: u32, x: u32, y: u32| opts.shard.is_none() || range.contains(&order.position(i, mip, x, y));
        let stage = Stage { input, layer, codec: layer.codec, encode: &encode, scratch: &scratch, threads };
        reports.push(bake_layer(&stage, &keep, output.sink(), progress)?);
    }
    let file_bytes = match output {
        Output::Atlas(writer) => writer.finish()?,
        Output::Part(part) => part.finish()?.1,
    };
    Ok(BakeReport { layers: reports, file_bytes, seconds: start.elapsed().as_secs_f64() })
}

/// A shard of a bake whose atlas lies in object storage (`s3://…`): the part is baked
/// into a local staging folder (the scratch folder, else the system's temporary one),
/// then uploaded to `OUT.shards/I-of-N.part` in one multipart upload, which replaces the
/// object whole or not at all.
#[cfg(feature = "remote")]
fn bake_shard_to_store(
    inputs: Vec<BakeInput>,
    out: &Path,
    opts: &BakeOptions,
    progress: &dyn Progress,
) -> Result<BakeReport, BakeError> {
    use crate::bake::shard::{ShardError, part_path};
    let Some(shard) = opts.shard else {
        return Err(BakeError::Shard(ShardError::Part {
            path: out.to_path_buf(),
            reason: "only a sharded bake (--shard) writes to object storage; bake the atlas locally \
                     and upload it, or shard the bake and merge it there"
                .into(),
        }));
    };
    let name = out.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "atlas.tsa".into());
    let root = opts.scratch_dir.clone().unwrap_or_else(std::env::temp_dir);
    // Deleted when dropped or on a signal; killed shards' stages are swept first.
    let stage = crate::bake::shard::stage_folder(&root, shard)?;
    let local = stage.path().join(name);
    let mut report = bake(inputs, &local, opts, progress)?;
    let (from, to) = (part_path(&local, shard), part_path(out, shard));
    let start = Instant::now();
    crate::bake::shard_remote::Remote::new(&to, &opts.s3)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r.upload(&from, &crate::NoProgress))
        .map_err(|source| BakeError::Shard(ShardError::Io { path: to.clone(), source }))?;
    report.seconds += start.elapsed().as_secs_f64();
    Ok(report)
}

/// The number of encoding threads a bake with `opts` uses.
pub fn bake_threads(opts: &BakeOptions) -> usize {
    match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Maps a possibly out-of-range coordinate into `[0, n)` by clamping or wrapping.
pub fn edge(i: i64, n: u32, wrap: Wrap) -> u32 {
    match wrap {
        Wrap::Clamp => i.clamp(0, i64::from(n) - 1) as u32,
        Wrap::Repeat => i.rem_euclid(i64::from(n)) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    // Processes and files: native only.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_bake_sweeps_temporary_files_of_dead_processes_only() {
        use crate::bake::source::Generated;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.tsa");
        let dead = crate::temp_files::dead_pid();
        let live = std::os::unix::process::parent_id();
        let stale_atlas = dir.path().join(format!(".out.tsa.{dead}.tmp"));
        let stale_level = dir.path().join(format!(".tessera-level-{dead}-8192x8192-0.tmp"));
        let live_atlas = dir.path().join(format!(".out.tsa.{live}.tmp"));
        let other = dir.path().join(format!(".other.tsa.{dead}.tmp"));
        for p in [&stale_atlas, &stale_level, &live_atlas, &other] {
            std::fs::write(p, b"left behind").unwrap();
        }
        let input = BakeInput {
            name: "g".into(),
            source: Box::new(Generated::new(64, 64)),
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
            codec: None,
            regions: Vec::new(),
        };
        let opts = BakeOptions { tile_size: 32, ..BakeOptions::default() };
        bake(vec![input], &out, &opts, &crate::progress::NoProgress).unwrap();
        assert!(out.exists());
        assert!(!stale_atlas.exists() && !stale_level.exists(), "a dead process's files are swept");
        assert!(live_atlas.exists(), "a live process's temporary file stays");
        assert!(other.exists(), "another output's temporary file stays");
    }

    /// Every position a bake reported, in order.
    #[derive(Default)]
    struct Recorder {
        length: std::sync::atomic::AtomicU64,
        seen: std::sync::Mutex<Vec<u64>>,
    }

    impl Progress for Recorder {
        fn set_length(&self, n: u64) {
            self.length.store(n, std::sync::atomic::Ordering::Relaxed);
        }
        fn inc(&self, n: u64) {
            let mut seen = self.seen.lock().unwrap();
            let last = seen.last().copied().unwrap_or(0);
            seen.push(last + n);
        }
    }

    fn generated(w: u32, h: u32) -> BakeInput {
        BakeInput::new("g", crate::bake::source::Generated::with_cell(w, h, 32))
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn the_pipeline_writes_the_same_atlas_whatever_the_thread_count() {
        let dir = tempfile::tempdir().unwrap();
        for (codec, (w, h)) in [(Codec::Lz4, (700, 450)), (Codec::Etc1s, (200, 140))] {
            let mut files = Vec::new();
            for threads in [1, 3, 8] {
                let out = dir.path().join(format!("{codec}-{threads}.tsa"));
                let opts = BakeOptions { tile_size: 32, codec, threads, ..BakeOptions::default() };
                let progress = Recorder::default();
                let report = bake(vec![generated(w, h)], &out, &opts, &progress).unwrap();
                let seen = progress.seen.lock().unwrap().clone();
                let total = progress.length.load(std::sync::atomic::Ordering::Relaxed);
                assert_eq!(total, report.layers[0].tiles);
                assert!(seen.windows(2).all(|p| p[0] < p[1]), "progress is monotone");
                assert_eq!(seen.last().copied(), Some(total), "progress reaches every tile");
                files.push(std::fs::read(&out).unwrap());
            }
            assert!(
                files.windows(2).all(|f| f[0] == f[1]),
                "{codec}: the atlases differ between thread counts"
            );
        }
    }

    /// A source whose rows from `fail_from` on cannot be read.
    struct Failing {
        inner: crate::bake::source::Generated,
        fail_from: u32,
    }

    impl RowSource for Failing {
        fn size(&self) -> (u32, u32) {
            self.inner.size()
        }
        fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
            let rows = (out.len() / (self.size().0 as usize * TEXEL_BYTES)) as u32;
            if y0 + rows > self.fail_from {
                return Err(std::io::Error::other(format!("row {} is unreadable", self.fail_from)));
            }
            self.inner.read_rows(y0, out)
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_read_error_midway_stops_every_stage_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("failed.tsa");
        let source = Failing { inner: crate::bake::source::Generated::new(512, 512), fail_from: 300 };
        let opts = BakeOptions { tile_size: 32, threads: 4, ..BakeOptions::default() };
        let err = bake(vec![BakeInput::new("f", source)], &out, &opts, &crate::progress::NoProgress)
            .expect_err("the bake fails");
        assert!(err.to_string().contains("row 300 is unreadable"), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "nothing is left behind: {left:?}");
    }

    #[test]
    fn edge_rules() {
        assert_eq!(edge(-1, 10, Wrap::Clamp), 0);
        assert_eq!(edge(-1, 10, Wrap::Repeat), 9);
        assert_eq!(edge(12, 10, Wrap::Clamp), 9);
        assert_eq!(edge(12, 10, Wrap::Repeat), 2);
    }
}
