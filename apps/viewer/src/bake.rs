//! Finding the atlas to open: an atlas itself, or the cached bake of an image (or of
//! the built-in texture), baked once on a background thread while the window shows
//! the progress.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use indicatif::ProgressBar;
use tessera::core::atlas::{Atlas, ColorSpace, Wrap};
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::source::{Generated, ImageSource};
use tessera_egui::BakeProgress;

/// Folder for cached bakes: `$TESSERA_CACHE`, else `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tessera");
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir).join(".cache/tessera")
}

/// What a bake reads.
#[derive(Debug)]
enum Source {
    /// The built-in 8192×4096 labelled texture.
    Builtin,
    /// An image file, decoded on the bake thread.
    Image(PathBuf),
}

/// An atlas that must be baked before it can be opened.
#[derive(Debug)]
pub(crate) struct BakeJob {
    /// The input's file name, as shown to the user.
    pub(crate) name: String,
    /// Layer name stored in the atlas.
    layer: String,
    source: Source,
    /// Where the atlas goes (in the cache folder).
    pub(crate) out: PathBuf,
}

/// The atlas to open for an input.
#[derive(Debug)]
pub(crate) enum Resolved {
    /// An atlas that opens as it is (the input, or a fresh cached bake).
    Ready(PathBuf),
    /// The input has to be baked first.
    Bake(BakeJob),
}

/// Decides what to open for `input`: itself when it is an atlas, the cached bake of an
/// image when it is newer than the image, else a bake of the image; with no input the
/// built-in texture. Cheap: nothing is decoded or baked here.
pub(crate) fn resolve(input: Option<&Path>) -> Result<Resolved> {
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating cache folder {}", cache.display()))?;
    let Some(input) = input else {
        let out = cache.join("demo-8192x4096.tsa");
        if Atlas::open(&out).is_ok() {
            return Ok(Resolved::Ready(out));
        }
        return Ok(Resolved::Bake(BakeJob {
            name: "the built-in 8192x4096 labelled texture".into(),
            layer: "demo".into(),
            source: Source::Builtin,
            out,
        }));
    };
    if Atlas::open(input).is_ok() {
        return Ok(Resolved::Ready(input.to_path_buf()));
    }
    let meta = std::fs::metadata(input).with_context(|| format!("opening {}", input.display()))?;
    anyhow::ensure!(meta.is_file(), "{} is not a file", input.display());
    let canonical = input.canonicalize().unwrap_or_else(|_| input.to_path_buf());
    let stem = input.file_stem().map_or("image".into(), |s| s.to_string_lossy().into_owned());
    let key = crc32fast::hash(canonical.to_string_lossy().as_bytes());
    let out = cache.join(format!("{stem}-{key:08x}.tsa"));
    let fresh = std::fs::metadata(&out).and_then(|m| Ok(m.modified()? >= meta.modified()?)).unwrap_or(false);
    if fresh && Atlas::open(&out).is_ok() {
        return Ok(Resolved::Ready(out));
    }
    let name = input.file_name().map_or(stem.clone(), |s| s.to_string_lossy().into_owned());
    Ok(Resolved::Bake(BakeJob { name, layer: stem, source: Source::Image(input.to_path_buf()), out }))
}

impl BakeJob {
    /// Reads the input and bakes it into `self.out` (through a temporary file, so an
    /// interrupted bake never leaves a broken atlas), counting tiles on `progress`.
    pub(crate) fn run(self, progress: &ProgressBar) -> Result<PathBuf> {
        let source: Box<dyn tessera::core::source::RowSource> = match &self.source {
            Source::Builtin => Box::new(Generated::new(8192, 4096)),
            Source::Image(path) => Box::new(ImageSource::open(path).with_context(|| {
                format!("{} is neither a Tessera atlas nor a readable image", path.display())
            })?),
        };
        let input = BakeInput {
            name: self.layer,
            source,
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
            codec: None,
            regions: Vec::new(),
        };
        let tmp = self.out.with_extension("tsa.partial");
        bake(vec![input], &tmp, &BakeOptions::default(), progress)
            .with_context(|| format!("baking {} into {}", self.name, self.out.display()))?;
        std::fs::rename(&tmp, &self.out)
            .with_context(|| format!("moving the bake to {}", self.out.display()))?;
        Ok(self.out)
    }

    /// Starts the bake on a background thread.
    pub(crate) fn spawn(self) -> Result<BakeTask> {
        println!("baking {} into {} (once; later opens reuse it)", self.name, self.out.display());
        let progress = ProgressBar::hidden();
        let model = BakeProgress::new(self.name.clone());
        let counter = progress.clone();
        let handle = std::thread::Builder::new()
            .name("tessera-viewer bake".into())
            .spawn(move || self.run(&counter))
            .context("starting the bake thread")?;
        Ok(BakeTask { progress, model, started: Instant::now(), handle: Some(handle) })
    }
}

/// A bake running on a background thread; the window polls it every frame.
pub(crate) struct BakeTask {
    /// The baker's tile counter, shared with the bake thread.
    progress: ProgressBar,
    model: BakeProgress,
    started: Instant,
    handle: Option<JoinHandle<Result<PathBuf>>>,
}

impl BakeTask {
    /// The input's file name, as shown to the user.
    pub(crate) fn name(&self) -> &str {
        &self.model.name
    }

    /// How far the bake has got, read from the shared counter now.
    pub(crate) fn progress(&mut self) -> &BakeProgress {
        let total = self.progress.length().unwrap_or(0);
        let stage = self.progress.message();
        self.model.update(self.started.elapsed().as_secs_f64(), self.progress.position(), total, stage);
        &self.model
    }

    /// The atlas, or why the bake failed, once the thread has finished; `None` while
    /// it runs (and after the result was taken).
    pub(crate) fn finished(&mut self) -> Option<Result<PathBuf>> {
        if !self.handle.as_ref()?.is_finished() {
            return None;
        }
        let handle = self.handle.take()?;
        Some(handle.join().unwrap_or_else(|_| Err(anyhow!("the bake of {} panicked", self.model.name))))
    }
}
