//! Finding what to draw for an input: an atlas itself, or the cached bake of an image,
//! a glTF scene, a named scene or the built-in texture, baked once on a background
//! thread while the window shows the progress.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use tessera::core::bake::cache::{BakeCache, BakeKey, BakeKind};
use tessera::core::bake::source::ImageSource;
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::format::atlas::{ColorSpace, Wrap};
use tessera::core::scene::catalog;
use tessera::core::scene::material_scene::{self, MaterialScene};
use tessera::core::scene::scene_bake::{bake_scene, scene_bake_key};
use tessera::core::scene::terrain::TerrainScene;
use tessera::core::{Codec, Progress, ProgressCounter};
use tessera_egui::BakeProgress;

use crate::input::Input;

/// Codec of the scenes the viewer bakes: lossless and quick to bake and to decode.
const SCENE_CODEC: Codec = Codec::Lz4;

/// Size of the built-in labelled texture.
const BUILTIN_SIZE: (u32, u32) = (8192, 4096);

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
    /// The runtime-virtual-texture terrain (`atlas` is then only its name).
    pub(crate) terrain: Option<Arc<TerrainScene>>,
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

/// Decides what to open for `input`: an atlas as it is, the cached bake of an image or of
/// the built-in texture when it is current ([`BakeCache`]), else a job for the background
/// thread (any bake, and every scene, whose meshes load there). Cheap: nothing is decoded
/// or baked here.
pub(crate) fn resolve(input: &Input) -> Result<Resolved> {
    let cache = catalog::cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating cache folder {}", cache.display()))?;
    let name = input.display_name();
    let ready = |atlas: PathBuf| {
        Resolved::Ready(Opened { name: name.clone(), atlas, scene: None, baked: false, terrain: None })
    };
    let job = |source, out| Resolved::Bake(BakeJob { name: name.clone(), source, out });
    Ok(match input {
        Input::Builtin => {
            let (stamp, key) = catalog::builtin_bake(&cache, BUILTIN_SIZE);
            let out = stamp.atlas().to_path_buf();
            if stamp.is_current(&key) { ready(out) } else { job(Source::Builtin, out) }
        }
        Input::Atlas(path) => ready(path.clone()),
        Input::Image(path) => {
            let out = cached_bake_path(&cache, path, "image");
            if BakeCache::new(&out).is_current(&image_key(path)) {
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

/// What decides the viewer's bake of the image `path`: the default options, one clamped
/// sRGB layer.
fn image_key(path: &Path) -> BakeKey {
    BakeKey::new(BakeKind::Layers)
        .bake_options(&BakeOptions::default())
        .option("wrap", "clamp")
        .option("color", "srgb")
        .input(path)
}

/// Writes the stamp of a finished bake; a failure only costs a bake at the next open.
fn record(stamp: &BakeCache, key: &BakeKey) {
    if let Err(e) = stamp.record(key) {
        eprintln!("warning: {e}; the next open bakes {} again", stamp.atlas().display());
    }
}

impl BakeJob {
    /// Does the job: bakes an image or the built-in texture into `self.out` (atomically,
    /// so an interrupted bake never leaves a broken atlas), loads a glTF scene and bakes it
    /// unless its bake is current, or prepares a named scene; counts tiles on `progress`.
    pub(crate) fn run(self, progress: &dyn Progress) -> Result<Opened> {
        match self.source {
            Source::Builtin => {
                let cache = self.out.parent().map_or_else(catalog::cache_dir, Path::to_path_buf);
                let prepared = catalog::prepare_builtin(&cache, BUILTIN_SIZE, false, progress)
                    .with_context(|| format!("baking {} into {}", self.name, self.out.display()))?;
                Ok(Opened {
                    name: self.name,
                    atlas: prepared.atlas,
                    scene: None,
                    baked: prepared.baked,
                    terrain: None,
                })
            }
            Source::Image(path) => {
                let stamp = BakeCache::stamp_path(&self.out);
                tessera::core::bake::overwrite::check_outputs([&path], [&self.out, &stamp])?;
                let source = ImageSource::open(&path).with_context(|| {
                    format!("{} is neither a Tessera atlas nor a readable image", path.display())
                })?;
                let layer = path.file_stem().map_or("image".into(), |s| s.to_string_lossy().into_owned());
                let input = BakeInput {
                    name: layer,
                    source: Box::new(source),
                    wrap: Wrap::Clamp,
                    color: ColorSpace::Srgb,
                    codec: None,
                    regions: Vec::new(),
                };
                bake(vec![input], &self.out, &BakeOptions::default(), progress)
                    .with_context(|| format!("baking {} into {}", self.name, self.out.display()))?;
                record(&BakeCache::new(&self.out), &image_key(&path));
                Ok(Opened { name: self.name, atlas: self.out, scene: None, baked: true, terrain: None })
            }
            Source::Gltf(path) => {
                let stamp = BakeCache::stamp_path(&self.out);
                tessera::core::bake::overwrite::check_outputs([&path], [&self.out, &stamp])?;
                progress.set_message("loading the glTF");
                let scene = material_scene::load_gltf(&path)
                    .with_context(|| format!("loading the glTF scene {}", path.display()))?;
                let opts = BakeOptions { codec: SCENE_CODEC, ..BakeOptions::default() };
                let stamp = BakeCache::new(&self.out);
                let key = scene_bake_key(BakeKind::Gltf, &scene, &self.out, &opts);
                let current = stamp.is_current(&key);
                if !current {
                    progress.set_message("");
                    bake_scene(&scene, &self.out, &opts, progress)
                        .with_context(|| format!("baking {} into {}", self.name, self.out.display()))?;
                    record(&stamp, &key);
                }
                Ok(Opened {
                    name: self.name,
                    atlas: self.out,
                    scene: Some(Arc::new(scene)),
                    baked: !current,
                    terrain: None,
                })
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
                    terrain: prepared.terrain,
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
        let progress = Arc::new(ProgressCounter::new());
        let model = BakeProgress::new(self.name.clone());
        let counter = Arc::clone(&progress);
        let handle = std::thread::Builder::new()
            .name("tessera-viewer bake".into())
            .spawn(move || self.run(counter.as_ref()))
            .context("starting the bake thread")?;
        Ok(BakeTask { progress, model, started: Instant::now(), handle: Some(handle) })
    }
}

/// A job running on a background thread; the window polls it every frame.
pub(crate) struct BakeTask {
    /// The baker's tile counter, shared with the bake thread.
    progress: Arc<ProgressCounter>,
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
        let total = self.progress.length();
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
    fn an_image_bake_is_current_until_the_image_changes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let image = dir.path().join("photo.png");
        image::RgbaImage::from_pixel(300, 200, image::Rgba([20, 90, 160, 255])).save(&image).expect("png");
        let cache = dir.path().join("cache");
        std::fs::create_dir_all(&cache).expect("cache folder");
        let out = cached_bake_path(&cache, &image, "image");
        assert!(!BakeCache::new(&out).is_current(&image_key(&image)), "no bake yet");
        let job =
            BakeJob { name: "photo.png".into(), source: Source::Image(image.clone()), out: out.clone() };
        let counter = ProgressCounter::new();
        let opened = job.run(&counter).expect("bake");
        assert!(opened.baked && opened.atlas == out);
        assert!(counter.length() > 0 && counter.position() == counter.length(), "every tile counted");
        assert!(BakeCache::new(&out).is_current(&image_key(&image)));
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&image).and_then(|f| f.set_modified(later)).expect("touch");
        assert!(!BakeCache::new(&out).is_current(&image_key(&image)), "touched image");
        let leftovers: Vec<_> = std::fs::read_dir(&cache)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
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
