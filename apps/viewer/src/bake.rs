//! Finding what to draw for an input: an atlas itself, or the cached bake of an image,
//! a glTF scene, a named scene or the built-in texture, baked once on a background
//! thread while the window shows the progress.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result, anyhow};
use indicatif::ProgressBar;
use tessera::core::Codec;
use tessera::core::bake::source::{Generated, ImageSource};
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::format::atlas::{Atlas, ColorSpace, Wrap};
use tessera::core::scene::catalog;
use tessera::core::scene::material_scene::{self, ImageRef, MaterialScene};
use tessera::core::scene::scene_bake::{SceneManifest, bake_scene};
use tessera_egui::BakeProgress;

use crate::input::Input;

/// Codec of the scenes the viewer bakes: lossless and quick to bake and to decode.
const SCENE_CODEC: Codec = Codec::Lz4;

/// An atlas ready to stream, and what to draw with it.
#[derive(Clone, Debug)]
pub(crate) struct Opened {
    /// The input's name as shown to the user (scene name or file name).
    pub(crate) name: String,
    /// The atlas (the input itself, or its bake in the cache folder).
    pub(crate) atlas: PathBuf,
    /// The meshes and materials of a material scene (its manifest lies beside the
    /// atlas); `None`: the built-in plane, globe and cube.
    pub(crate) scene: Option<Arc<MaterialScene>>,
    /// Whether the atlas was baked just now (false: it was there and current).
    pub(crate) baked: bool,
}

/// What a background job reads.
#[derive(Debug)]
enum Source {
    /// The built-in 8192×4096 labelled texture.
    Builtin,
    /// An image file, decoded on the bake thread.
    Image(PathBuf),
    /// A glTF scene, loaded (and baked unless its bake is current) on the bake thread.
    Gltf(PathBuf),
    /// A named scene of the catalog, prepared on the bake thread.
    Named(String),
}

/// Work that must run before an input can be opened: loading a scene, baking.
#[derive(Debug)]
pub(crate) struct BakeJob {
    /// The input's name, as shown to the user.
    pub(crate) name: String,
    source: Source,
    /// Where the atlas goes (in the cache folder); for a named scene, the catalog decides.
    out: PathBuf,
}

/// What to do to open an input.
#[derive(Debug)]
pub(crate) enum Resolved {
    /// An atlas that opens as it is (the input, or a fresh cached bake of an image).
    Ready(Opened),
    /// Work for the background thread first.
    Bake(BakeJob),
}

/// Decides what to open for `input`: an atlas as it is, the cached bake of an image when
/// it is newer than the image, else a job for the background thread (any bake, and every
/// scene, whose meshes load there). Cheap: nothing is decoded or baked here.
pub(crate) fn resolve(input: &Input) -> Result<Resolved> {
    let cache = catalog::cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating cache folder {}", cache.display()))?;
    let name = input.display_name();
    let ready =
        |atlas: PathBuf| Resolved::Ready(Opened { name: name.clone(), atlas, scene: None, baked: false });
    let job = |source, out| Resolved::Bake(BakeJob { name: name.clone(), source, out });
    Ok(match input {
        Input::Builtin => {
            let out = cache.join("demo-8192x4096.tsa");
            if Atlas::open(&out).is_ok() { ready(out) } else { job(Source::Builtin, out) }
        }
        Input::Atlas(path) => ready(path.clone()),
        Input::Image(path) => {
            let out = cached_bake_path(&cache, path, "image");
            if is_current(&out, std::slice::from_ref(path)) && Atlas::open(&out).is_ok() {
                ready(out)
            } else {
                job(Source::Image(path.clone()), out)
            }
        }
        Input::Gltf(path) => job(Source::Gltf(path.clone()), cached_bake_path(&cache, path, "scene")),
        Input::Named(scene) => job(Source::Named(scene.clone()), cache.join("scenes")),
    })
}

/// `CACHE/STEM-KEY.tsa`, the key a hash of the input's canonical path, so two inputs of
/// the same name in different folders get different bakes.
fn cached_bake_path(cache: &Path, input: &Path, fallback_stem: &str) -> PathBuf {
    let canonical = input.canonicalize().unwrap_or_else(|_| input.to_path_buf());
    let stem = input.file_stem().map_or(fallback_stem.into(), |s| s.to_string_lossy().into_owned());
    let key = crc32fast::hash(canonical.to_string_lossy().as_bytes());
    cache.join(format!("{stem}-{key:08x}.tsa"))
}

/// Whether `out` exists and is at least as new as every file of `sources` (a source
/// that cannot be read counts as changed).
fn is_current(out: &Path, sources: &[PathBuf]) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(baked) = modified(out) else { return false };
    sources.iter().all(|s| modified(s).is_some_and(|t: SystemTime| baked >= t))
}

impl BakeJob {
    /// Does the job: bakes an image or the built-in texture into `self.out` (through a
    /// temporary file, so an interrupted bake never leaves a broken atlas), loads a glTF
    /// scene and bakes it unless its bake is current, or prepares a named scene; counts
    /// tiles on `progress`.
    pub(crate) fn run(self, progress: &ProgressBar) -> Result<Opened> {
        match self.source {
            Source::Builtin => {
                bake_texture(&self.name, "demo", Box::new(Generated::new(8192, 4096)), &self.out, progress)?;
                Ok(Opened { name: self.name, atlas: self.out, scene: None, baked: true })
            }
            Source::Image(path) => {
                let source = ImageSource::open(&path).with_context(|| {
                    format!("{} is neither a Tessera atlas nor a readable image", path.display())
                })?;
                let layer = path.file_stem().map_or("image".into(), |s| s.to_string_lossy().into_owned());
                bake_texture(&self.name, &layer, Box::new(source), &self.out, progress)?;
                Ok(Opened { name: self.name, atlas: self.out, scene: None, baked: true })
            }
            Source::Gltf(path) => {
                progress.set_message("loading the glTF");
                let scene = material_scene::load_gltf(&path)
                    .with_context(|| format!("loading the glTF scene {}", path.display()))?;
                let manifest = SceneManifest::path_for(&self.out);
                let mut sources = vec![path.clone()];
                sources.extend(material_scene::scene_images(&scene).into_iter().filter_map(|i| match i {
                    ImageRef::File(p) => Some(p),
                    ImageRef::Embedded { .. } => None,
                }));
                let current = is_current(&self.out, &sources)
                    && is_current(&manifest, &sources)
                    && Atlas::open(&self.out).is_ok()
                    && SceneManifest::load(&manifest).is_ok();
                if !current {
                    progress.set_message("");
                    let opts = BakeOptions { codec: SCENE_CODEC, ..BakeOptions::default() };
                    bake_scene(&scene, &self.out, &opts, progress)
                        .with_context(|| format!("baking {} into {}", self.name, self.out.display()))?;
                }
                Ok(Opened { name: self.name, atlas: self.out, scene: Some(Arc::new(scene)), baked: !current })
            }
            Source::Named(name) => {
                let data = tessera::core::bake::source::data_dir();
                let cache = catalog::cache_dir();
                let prepared = catalog::prepare(&name, &data, &cache, SCENE_CODEC, false, progress)
                    .with_context(|| format!("preparing the scene '{name}'"))?;
                Ok(Opened {
                    name: self.name,
                    atlas: prepared.atlas,
                    scene: prepared.scene.map(Arc::new),
                    baked: prepared.baked,
                })
            }
        }
    }

    /// Starts the job on a background thread.
    pub(crate) fn spawn(self) -> Result<BakeTask> {
        match self.source {
            Source::Builtin | Source::Image(_) => {
                println!("baking {} into {} (once; later opens reuse it)", self.name, self.out.display());
            }
            Source::Gltf(_) | Source::Named(_) => {
                println!(
                    "opening {} (baked into {} once; later opens reuse it)",
                    self.name,
                    self.out.display()
                );
            }
        }
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

/// Bakes one texture layer named `layer` from `source` into `out`, atomically.
fn bake_texture(
    name: &str,
    layer: &str,
    source: Box<dyn tessera::core::bake::source::RowSource>,
    out: &Path,
    progress: &ProgressBar,
) -> Result<()> {
    let input = BakeInput {
        name: layer.to_owned(),
        source,
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
        regions: Vec::new(),
    };
    let tmp = out.with_extension("tsa.partial");
    bake(vec![input], &tmp, &BakeOptions::default(), progress)
        .with_context(|| format!("baking {name} into {}", out.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("moving the bake to {}", out.display()))
}

/// A job running on a background thread; the window polls it every frame.
pub(crate) struct BakeTask {
    /// The baker's tile counter, shared with the bake thread.
    progress: ProgressBar,
    model: BakeProgress,
    started: Instant,
    handle: Option<JoinHandle<Result<Opened>>>,
}

impl BakeTask {
    /// The input's name, as shown to the user.
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

    /// What to open, or why the job failed, once the thread has finished; `None` while
    /// it runs (and after the result was taken).
    pub(crate) fn finished(&mut self) -> Option<Result<Opened>> {
        if !self.handle.as_ref()?.is_finished() {
            return None;
        }
        let handle = self.handle.take()?;
        Some(handle.join().unwrap_or_else(|_| Err(anyhow!("the bake of {} panicked", self.model.name))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bakes_are_current_only_when_newer_than_every_source() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b, out) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("out"));
        std::fs::write(&a, b"a").expect("write");
        std::fs::write(&b, b"b").expect("write");
        assert!(!is_current(&out, std::slice::from_ref(&a)), "no bake yet");
        std::fs::write(&out, b"baked").expect("write");
        let past = SystemTime::now() - std::time::Duration::from_secs(60);
        for p in [&a, &b] {
            std::fs::File::options().write(true).open(p).and_then(|f| f.set_modified(past)).expect("mtime");
        }
        assert!(is_current(&out, &[a.clone(), b.clone()]));
        let future = SystemTime::now() + std::time::Duration::from_secs(60);
        std::fs::File::options().write(true).open(&b).and_then(|f| f.set_modified(future)).expect("mtime");
        assert!(!is_current(&out, &[a.clone(), b.clone()]), "b changed after the bake");
        assert!(!is_current(&out, &[a, dir.path().join("gone")]), "a missing source counts as changed");
    }

    #[test]
    fn cached_bakes_are_keyed_by_the_inputs_folder() {
        let cache = Path::new("/cache");
        let one = cached_bake_path(cache, Path::new("/x/level.gltf"), "scene");
        let two = cached_bake_path(cache, Path::new("/y/level.gltf"), "scene");
        assert_ne!(one, two);
        assert!(one.file_name().is_some_and(|n| n.to_string_lossy().starts_with("level-")), "{one:?}");
        assert_eq!(one.extension().and_then(|e| e.to_str()), Some("tsa"));
    }
}
