//! Whether a bake on disk is up to date: a stamp beside the atlas records what the bake
//! was made from (kind, options, inputs) and what it wrote, so a later bake with the
//! same key can reuse it and any other bake, edit or replacement makes it stale.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::bake::source::SourceOrigin;
use crate::bake::{BakeError, BakeInput, BakeOptions, BakeReport};
use crate::progress::Progress;

/// First line of every stamp; a file starting otherwise is not ours (or is outdated).
const STAMP_MAGIC: &str = "tessera bake stamp 1";

/// A stamp larger than this is not one we wrote.
const STAMP_MAX_BYTES: u64 = 1 << 20;

/// Files up to this size are identified by a CRC-32 of their contents as well as by
/// length and modification time.
const HASH_MAX_BYTES: u64 = 8 << 20;

/// What kind of bake produced an atlas: two bakes of different kinds never share a stamp,
/// even from the same inputs and options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BakeKind {
    /// Images and generated textures, one layer each (`tessera bake INPUT…`, the built-in
    /// labelled texture).
    Layers,
    /// The materials of a glTF scene, stacked (`tessera bake --gltf`).
    Gltf,
    /// An equirectangular image as a globe scene (`tessera bake --globe`).
    Globe,
    /// A mosaic of image crops (the stress scenes).
    Mosaic,
}

impl BakeKind {
    fn name(self) -> &'static str {
        match self {
            Self::Layers => "layers",
            Self::Gltf => "gltf",
            Self::Globe => "globe",
            Self::Mosaic => "mosaic",
        }
    }
}

/// Everything that decides a bake's output: its kind, its options (as name = value pairs)
/// and its input files. Build one per bake and hand it to [`BakeCache`].
#[derive(Clone, Debug, PartialEq)]
pub struct BakeKey {
    kind: BakeKind,
    options: Vec<(String, String)>,
    inputs: Vec<PathBuf>,
    outputs: Vec<PathBuf>,
}

impl BakeKey {
    /// A key for a bake of `kind` with no options or inputs yet.
    pub fn new(kind: BakeKind) -> Self {
        Self { kind, options: Vec::new(), inputs: Vec::new(), outputs: Vec::new() }
    }

    /// Adds an option that changes the output (a wrap rule, a generated layer's size…).
    #[must_use]
    pub fn option(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        self.options.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds every field of `opts` that changes the output (all but the scratch folder).
    #[must_use]
    pub fn bake_options(self, opts: &BakeOptions) -> Self {
        self.option("tile_size", opts.tile_size)
            .option("border", opts.border)
            .option("codec", opts.codec)
            .option("quality", opts.quality)
            .option("uastc_rdo", format!("{:?}", opts.uastc_rdo))
            .option("stacked", opts.stacked)
            .option("format_version", opts.format_version)
    }

    /// Adds an input file, in order (the order of layers matters).
    #[must_use]
    pub fn input(mut self, path: impl Into<PathBuf>) -> Self {
        self.inputs.push(path.into());
        self
    }

    /// Adds input files, in order.
    #[must_use]
    pub fn inputs(mut self, paths: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.inputs.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Adds a file the bake writes besides the atlas (e.g. a scene manifest): replaced
    /// or missing, it makes the bake stale too.
    #[must_use]
    pub fn output(mut self, path: impl Into<PathBuf>) -> Self {
        self.outputs.push(path.into());
        self
    }
}

/// Why a stamp could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BakeCacheError {
    /// An input or output of the bake could not be read.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing the stamp failed.
    #[error("writing the bake stamp {path}: {source}")]
    Write {
        /// The stamp.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The cached bake at one atlas path and its stamp (`ATLAS.bake`, beside it).
///
/// [`is_current`](Self::is_current) says yes only when the stamp matches the key (kind,
/// options, canonical input paths and each input's length, modification time and, for
/// small files, CRC-32) and the atlas and other outputs are exactly the files the stamp's
/// bake wrote (same length, modification time and small-file CRC). So an edited input,
/// another option, another kind of bake, or an atlas written since by anyone else all
/// make it stale. A missing, corrupt or foreign stamp is stale, never an error.
#[derive(Clone, Debug)]
pub struct BakeCache {
    atlas: PathBuf,
    stamp: PathBuf,
}

impl BakeCache {
    /// The cache of the atlas at `atlas`.
    pub fn new(atlas: impl Into<PathBuf>) -> Self {
        let atlas = atlas.into();
        let stamp = Self::stamp_path(&atlas);
        Self { atlas, stamp }
    }

    /// Where the stamp of `atlas` lives: `ATLAS.bake` beside it.
    pub fn stamp_path(atlas: &Path) -> PathBuf {
        let mut name = atlas.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".bake");
        atlas.with_file_name(name)
    }

    /// The atlas.
    pub fn atlas(&self) -> &Path {
        &self.atlas
    }

    /// The stamp file.
    pub fn stamp(&self) -> &Path {
        &self.stamp
    }

    /// Whether the atlas is the output of a bake with `key` whose inputs have not changed
    /// since. False whenever anything cannot be read.
    pub fn is_current(&self, key: &BakeKey) -> bool {
        let Ok(expected) = self.render(key) else { return false };
        self.read_stamp().is_some_and(|stamp| stamp == expected)
    }

    /// Records that the atlas (and the key's other outputs) were just baked with `key`.
    /// Call after the atlas is in place; the stamp is written atomically (temporary
    /// file, fsync, rename), so a crash leaves the old stamp, which no longer matches.
    pub fn record(&self, key: &BakeKey) -> Result<(), BakeCacheError> {
        let text = self.render(key)?;
        let write_err = |source| BakeCacheError::Write { path: self.stamp.clone(), source };
        let prefix = format!("{}.", self.stamp.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
        crate::temp_files::sweep(self.stamp.parent().unwrap_or(Path::new(".")), &prefix);
        let mut tmp = crate::temp_files::TempPath::new(
            self.stamp.with_file_name(crate::temp_files::temp_name(&prefix, "")),
        );
        let written = (|| {
            let mut file = std::fs::File::create(tmp.path())?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(tmp.path(), &self.stamp)
        })();
        match written {
            Ok(()) => tmp.keep(),
            Err(e) => return Err(write_err(e)),
        }
        if let Some(dir) = self.stamp.parent().filter(|d| !d.as_os_str().is_empty())
            && let Ok(d) = std::fs::File::open(dir)
        {
            // Persist the rename itself; not every filesystem supports this.
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Forgets the bake: removes the stamp (nothing to do when there is none).
    pub fn forget(&self) {
        let _ = std::fs::remove_file(&self.stamp);
    }

    /// The stamp's text, or `None` when it is missing, too large or not text.
    fn read_stamp(&self) -> Option<String> {
        let meta = std::fs::metadata(&self.stamp).ok()?;
        if !meta.is_file() || meta.len() > STAMP_MAX_BYTES {
            return None;
        }
        std::fs::read_to_string(&self.stamp).ok()
    }

    /// The stamp a bake with `key` writes for the files as they are now.
    fn render(&self, key: &BakeKey) -> Result<String, BakeCacheError> {
        let mut s = String::new();
        let _ = writeln!(s, "{STAMP_MAGIC}");
        let _ = writeln!(s, "tessera {}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "kind {}", key.kind.name());
        for (name, value) in &key.options {
            let _ = writeln!(s, "option {name:?} {value:?}");
        }
        for path in &key.inputs {
            let _ = writeln!(s, "input {}", identify(path)?);
        }
        for path in std::iter::once(&self.atlas).chain(&key.outputs) {
            let _ = writeln!(s, "output {}", identify(path)?);
        }
        Ok(s)
    }
}

/// What [`bake_if_stale`] did.
#[derive(Clone, Debug)]
pub enum BakeOutcome {
    /// The atlas was already the bake of these inputs and options; nothing was read.
    Reused,
    /// The atlas was baked (again).
    Baked(BakeReport),
}

impl BakeOutcome {
    /// Whether a bake ran.
    pub fn baked(&self) -> bool {
        matches!(self, Self::Baked(_))
    }
}

/// [`bake`](crate::bake::bake) of `inputs` into the atlas `out`, unless the atlas there is
/// already their bake with `opts`: the stamp beside it ([`BakeCache`]) then says so and
/// no input is decoded. Layers whose source cannot say where its texels come from
/// ([`RowSource::origin`](crate::bake::source::RowSource::origin) is `None`, e.g.
/// [`ImageSource::from_rgba`](crate::bake::source::ImageSource::from_rgba)) are baked
/// every time. A stamp that cannot be written is logged, not an error: it costs a bake
/// next time. `progress` (e.g. [`NoProgress`](crate::NoProgress)) counts tiles.
///
/// ```
/// use tessera_core::bake::{BakeInput, BakeOptions, bake_if_stale, source::Generated};
///
/// let dir = tempfile::tempdir()?;
/// let atlas = dir.path().join("checker.tsa");
/// let layer = || BakeInput::new("checker", Generated::new(512, 256));
/// let opts = BakeOptions::default();
/// let first = bake_if_stale(vec![layer()], &atlas, &opts, &tessera_core::NoProgress)?;
/// assert!(first.baked());
/// let again = bake_if_stale(vec![layer()], &atlas, &opts, &tessera_core::NoProgress)?;
/// assert!(!again.baked(), "the same inputs and options reuse the bake");
/// assert_eq!(tessera_core::Atlas::open(&atlas)?.layers().len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn bake_if_stale(
    inputs: Vec<BakeInput>,
    out: impl AsRef<Path>,
    opts: &BakeOptions,
    progress: &dyn Progress,
) -> Result<BakeOutcome, BakeError> {
    let out = out.as_ref();
    let cache = BakeCache::new(out);
    let files: Vec<PathBuf> = inputs
        .iter()
        .filter_map(|i| match i.source.origin() {
            Some(SourceOrigin::File(path)) => Some(path),
            _ => None,
        })
        .collect();
    crate::bake::overwrite::check_outputs(&files, [out, cache.stamp()])?;
    let key = layers_key(&inputs, opts);
    if key.as_ref().is_some_and(|key| cache.is_current(key)) {
        return Ok(BakeOutcome::Reused);
    }
    let report = crate::bake::bake(inputs, out, opts, progress)?;
    match key {
        Some(key) => {
            if let Err(e) = cache.record(&key) {
                tracing::warn!("{e}; the next bake of {} runs again", out.display());
            }
        }
        None => cache.forget(),
    }
    Ok(BakeOutcome::Baked(report))
}

/// The key of a bake of `inputs` with `opts`, or `None` when a source's origin is unknown.
fn layers_key(inputs: &[BakeInput], opts: &BakeOptions) -> Option<BakeKey> {
    let mut key = BakeKey::new(BakeKind::Layers).bake_options(opts);
    for input in inputs {
        key = key
            .option("layer", &input.name)
            .option("wrap", format!("{:?}", input.wrap))
            .option("color", format!("{:?}", input.color))
            .option("layer codec", format!("{:?}", input.codec))
            .option("regions", format!("{:?}", input.regions));
        key = match input.source.origin()? {
            SourceOrigin::File(path) => key.option("source", "file").input(path),
            SourceOrigin::Generated(description) => key.option("source", description),
        };
    }
    Some(key)
}

/// A file's canonical path, length, modification time (ns) and, when small, CRC-32.
fn identify(path: &Path) -> Result<String, BakeCacheError> {
    let err = |source| BakeCacheError::File { path: path.to_path_buf(), source };
    let canonical = path.canonicalize().map_err(err)?;
    let meta = std::fs::metadata(&canonical).map_err(err)?;
    let mtime = meta.modified().map_err(err)?;
    let ns = mtime.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    // Only a regular file is read (a FIFO would block, a device never end), and never
    // more than the limit, should it grow meanwhile.
    let crc = if meta.is_file() && meta.len() <= HASH_MAX_BYTES {
        let mut bytes = Vec::new();
        let file = std::fs::File::open(&canonical).map_err(err)?;
        std::io::Read::read_to_end(&mut std::io::Read::take(file, HASH_MAX_BYTES + 1), &mut bytes)
            .map_err(err)?;
        format!("{:08x}", crc32fast::hash(&bytes))
    } else {
        "-".to_string()
    };
    Ok(format!("{canonical:?} len {} mtime {ns} crc {crc}", meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bake::source::ImageSource;
    use crate::format::codec::Codec;
    use std::time::{Duration, SystemTime};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    struct Fixture {
        _dir: tempfile::TempDir,
        input: PathBuf,
        atlas: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let input = dir.path().join("crop.png");
        let atlas = dir.path().join("out.tsa");
        std::fs::write(&input, b"pretend image").expect("write input");
        std::fs::write(&atlas, b"pretend atlas").expect("write atlas");
        Fixture { _dir: dir, input, atlas }
    }

    fn set_mtime(path: &Path, t: SystemTime) {
        std::fs::File::options().write(true).open(path).and_then(|f| f.set_modified(t)).expect("set mtime");
    }

    fn key(input: &Path) -> BakeKey {
        BakeKey::new(BakeKind::Layers)
            .bake_options(&BakeOptions::default())
            .option("wrap", "clamp")
            .input(input)
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn same_inputs_and_options_are_current() {
        let f = fixture();
        let cache = BakeCache::new(&f.atlas);
        assert!(!cache.is_current(&key(&f.input)), "no stamp yet");
        cache.record(&key(&f.input)).expect("record");
        assert!(cache.is_current(&key(&f.input)));
        assert_eq!(cache.stamp(), f.atlas.with_file_name("out.tsa.bake"));
        // The same file through another spelling of its path is the same input.
        let dotted = f.input.parent().expect("folder").join(".").join("crop.png");
        assert!(cache.is_current(&key(&dotted)));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_touched_or_edited_input_is_stale() {
        let f = fixture();
        let cache = BakeCache::new(&f.atlas);
        cache.record(&key(&f.input)).expect("record");
        set_mtime(&f.input, SystemTime::now() + Duration::from_secs(5));
        assert!(!cache.is_current(&key(&f.input)), "touched");
        cache.record(&key(&f.input)).expect("record");
        let mtime = std::fs::metadata(&f.input).and_then(|m| m.modified()).expect("mtime");
        std::fs::write(&f.input, b"pretend imagf").expect("edit");
        set_mtime(&f.input, mtime);
        assert!(!cache.is_current(&key(&f.input)), "same length and mtime, other contents");
        std::fs::remove_file(&f.input).expect("remove");
        assert!(!cache.is_current(&key(&f.input)), "missing input");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn another_option_or_kind_or_input_list_is_stale() {
        let f = fixture();
        let cache = BakeCache::new(&f.atlas);
        cache.record(&key(&f.input)).expect("record");
        let lossy = BakeOptions { codec: Codec::Etc1s, ..BakeOptions::default() };
        let other_codec =
            BakeKey::new(BakeKind::Layers).bake_options(&lossy).option("wrap", "clamp").input(&f.input);
        assert!(!cache.is_current(&other_codec));
        let other_wrap = BakeKey::new(BakeKind::Layers)
            .bake_options(&BakeOptions::default())
            .option("wrap", "repeat")
            .input(&f.input);
        assert!(!cache.is_current(&other_wrap));
        let other_tile = BakeOptions { tile_size: 256, ..BakeOptions::default() };
        assert!(!cache.is_current(&BakeKey::new(BakeKind::Layers).bake_options(&other_tile).input(&f.input)));
        let gltf = BakeKey::new(BakeKind::Gltf).bake_options(&BakeOptions::default()).option("wrap", "clamp");
        assert!(!cache.is_current(&gltf.input(&f.input)), "another kind of bake");
        assert!(!cache.is_current(&key(&f.input).input(&f.input)), "the input twice");
        assert!(cache.is_current(&key(&f.input)));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn an_atlas_replaced_by_another_writer_is_stale() {
        let f = fixture();
        let cache = BakeCache::new(&f.atlas);
        cache.record(&key(&f.input)).expect("record");
        // Same length, same modification time, other contents.
        let mtime = std::fs::metadata(&f.atlas).and_then(|m| m.modified()).expect("mtime");
        std::fs::write(&f.atlas, b"another atlas").expect("replace");
        set_mtime(&f.atlas, mtime);
        assert!(!cache.is_current(&key(&f.input)), "same length, other contents");
        cache.record(&key(&f.input)).expect("record");
        set_mtime(&f.atlas, SystemTime::now() + Duration::from_secs(5));
        assert!(!cache.is_current(&key(&f.input)), "rewritten later");
        std::fs::remove_file(&f.atlas).expect("remove");
        assert!(!cache.is_current(&key(&f.input)), "no atlas");
        assert!(cache.record(&key(&f.input)).is_err(), "no atlas to stamp");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn extra_outputs_count_like_the_atlas() {
        let f = fixture();
        let manifest = f.atlas.with_extension("scene.json");
        std::fs::write(&manifest, b"{}").expect("write manifest");
        let cache = BakeCache::new(&f.atlas);
        let k = key(&f.input).output(&manifest);
        cache.record(&k).expect("record");
        assert!(cache.is_current(&k));
        std::fs::write(&manifest, b"[]").expect("rewrite manifest");
        assert!(!cache.is_current(&k));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn corrupt_or_foreign_stamps_are_stale() {
        let f = fixture();
        let cache = BakeCache::new(&f.atlas);
        cache.record(&key(&f.input)).expect("record");
        let good = std::fs::read(cache.stamp()).expect("stamp");
        let mut truncated = good.clone();
        truncated.truncate(good.len() / 2);
        let bad: [&[u8]; 5] =
            [b"", b"\xff\xfe\x00garbage", &truncated, b"tessera bake stamp 1\n", &[b'x'; 4096]];
        for contents in bad {
            std::fs::write(cache.stamp(), contents).expect("corrupt");
            assert!(!cache.is_current(&key(&f.input)));
        }
        // A stamp for another atlas, copied here.
        let other = f.atlas.with_file_name("other.tsa");
        std::fs::copy(&f.atlas, &other).expect("copy");
        let other_cache = BakeCache::new(&other);
        other_cache.record(&key(&f.input)).expect("record");
        std::fs::copy(other_cache.stamp(), cache.stamp()).expect("copy stamp");
        assert!(!cache.is_current(&key(&f.input)));
        // A folder where the stamp should be.
        std::fs::remove_file(cache.stamp()).expect("remove");
        std::fs::create_dir(cache.stamp()).expect("mkdir");
        assert!(!cache.is_current(&key(&f.input)));
        assert!(cache.record(&key(&f.input)).is_err());
    }

    /// Writes a small generated PNG at `path`.
    fn write_png(path: &Path, shade: u8) {
        let img = image::RgbaImage::from_fn(300, 200, |x, y| image::Rgba([x as u8, y as u8, shade, 255]));
        img.save(path).expect("write png");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn bake_if_stale_bakes_an_image_once_and_again_when_it_changes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let png = dir.path().join("gradient.png");
        let atlas = dir.path().join("gradient.tsa");
        write_png(&png, 10);
        let opts = BakeOptions { tile_size: 64, ..BakeOptions::default() };
        let run = || {
            let input = BakeInput::from_image(&png).expect("header");
            bake_if_stale(vec![input], &atlas, &opts, &crate::NoProgress).expect("bake")
        };
        let BakeOutcome::Baked(report) = run() else { panic!("first bake reused nothing") };
        assert_eq!((report.layers[0].name.as_str(), report.layers[0].width), ("gradient", 300));
        let opened = crate::Atlas::open(&atlas).expect("the bake opens");
        let layout = opened.layers()[0].layout;
        assert_eq!((layout.width(), layout.height()), (300, 200));
        assert!(!run().baked(), "same image, same options: reused");
        let other = BakeOptions { tile_size: 32, ..opts.clone() };
        let input = BakeInput::from_image(&png).expect("header");
        assert!(bake_if_stale(vec![input], &atlas, &other, &crate::NoProgress).expect("bake").baked());
        assert!(run().baked(), "back to the first options");
        write_png(&png, 200);
        set_mtime(&png, SystemTime::now() + Duration::from_secs(5));
        assert!(run().baked(), "an edited image is baked again");
        assert!(!run().baked());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn bake_if_stale_always_bakes_sources_of_unknown_origin() {
        let dir = tempfile::tempdir().expect("temp dir");
        let atlas = dir.path().join("memory.tsa");
        let texels = vec![128; 64 * 64 * 4];
        let input = || BakeInput::new("memory", ImageSource::from_rgba(64, 64, texels.clone()));
        let opts = BakeOptions::default();
        assert!(bake_if_stale(vec![input()], &atlas, &opts, &crate::NoProgress).expect("bake").baked());
        assert!(bake_if_stale(vec![input()], &atlas, &opts, &crate::NoProgress).expect("bake").baked());
        assert!(!BakeCache::new(&atlas).stamp().exists());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn images_fail_early_on_a_bad_header_and_at_the_bake_on_a_bad_body() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("missing.png");
        let e = BakeInput::from_image(&missing).err().expect("missing");
        assert!(e.to_string().contains("missing.png"), "{e}");
        let png = dir.path().join("cut.png");
        write_png(&png, 0);
        let bytes = std::fs::read(&png).expect("read");
        std::fs::write(&png, &bytes[..bytes.len() / 2]).expect("cut");
        let input = BakeInput::from_image(&png).expect("the header is whole");
        let atlas = dir.path().join("cut.tsa");
        let e = bake_if_stale(vec![input], &atlas, &BakeOptions::default(), &crate::NoProgress)
            .expect_err("a cut image does not bake");
        assert!(e.to_string().contains("cut.png"), "{e}");
        let e = bake_if_stale(
            vec![BakeInput::from_image(&png).expect("header")],
            &png,
            &BakeOptions::default(),
            &crate::NoProgress,
        )
        .expect_err("the output is the input");
        assert!(e.to_string().contains("refusing to write"), "{e}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn forget_makes_it_stale() {
        let f = fixture();
        let cache = BakeCache::new(&f.atlas);
        cache.record(&key(&f.input)).expect("record");
        cache.forget();
        assert!(!cache.is_current(&key(&f.input)));
        cache.forget();
    }
}
