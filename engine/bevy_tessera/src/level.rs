//! A glTF level loaded the Bevy way, its textures streamed.
//!
//! Spawn the level with Bevy's own loader and add [`StreamedLevel`] beside it:
//!
//! ```no_run
//! use bevy::prelude::*;
//! use bevy::gltf::GltfAssetLabel;
//! use bevy::world_serialization::WorldAssetRoot;
//! use bevy_tessera::level::StreamedLevel;
//!
//! fn setup(mut commands: Commands, assets: Res<AssetServer>) {
//!     commands.spawn((
//!         WorldAssetRoot(assets.load(GltfAssetLabel::Scene(0).from_asset("level.gltf"))),
//!         // The same file on disk, for the bake.
//!         StreamedLevel::new("assets/level.gltf"),
//!     ));
//! }
//! ```
//!
//! Bevy's loader gives the level everything it reads from the glTF: the hierarchy,
//! `KHR_lights_punctual` lamps, cameras, animations, and a `StandardMaterial` per glTF
//! material. Meanwhile the plugin bakes the level's materials into one stacked atlas on
//! Bevy's `AsyncComputeTaskPool` (a current bake in the cache folder is reused),
//! reporting progress in [`LevelState`]. Once the atlas is ready, every mesh under the
//! level gets the [`TesseraMaterial`] of its glTF material in place of its
//! `StandardMaterial` (matched by the material's glTF index, from the label Bevy's
//! loader gives it); until then the level shows Bevy's own materials. Meshes spawned
//! later under the level (a scene still spawning) are swapped as they appear.
//!
//! Any mesh takes its streamed material: one without uvs (a helper volume) draws in
//! its material's constant factors, as Bevy's `StandardMaterial` does without uvs, and
//! one without a glTF material gets the baked glTF default material. Cameras the level
//! spawns get a `DepthPrepass` ([`StreamedLevel::depth_prepass`]). When a file the bake
//! read changes (the glTF, its buffers or images; looked at every 30 frames, and at
//! once on an asset server `Modified` event), the level is baked again and its meshes
//! take the new materials.
//!
//! Bevy's loader still reads the glTF's images for its own materials; to keep them off
//! the GPU, load the level with `GltfLoaderSettings` that skip materials' images if
//! your Bevy release offers it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bevy::core_pipeline::prepass::DepthPrepass;
use bevy::ecs::message::MessageCursor;
use bevy::ecs::relationship::Relationship;
use bevy::gltf::Gltf;
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
use bevy::world_serialization::WorldAssetRoot;
use tessera::core::format::codec::Codec;
use tessera::core::progress::{LogProgress, Progress, ProgressCounter};
use tessera::core::scene::catalog;

use crate::TesseraMaterial;
use crate::scene::{BakedScene, resident_materials, streamed_materials};

/// Streams the textures of the glTF level spawned on the same entity (a
/// `WorldAssetRoot` of Bevy's glTF loader); see the [module documentation](self).
#[derive(Component, Clone, Debug)]
#[require(LevelState)]
pub struct StreamedLevel {
    /// The glTF file on disk (the one the asset server loads), for the bake.
    pub gltf: PathBuf,
    /// Codec of the bake.
    pub codec: Codec,
    /// Where the atlas is baked. Default: a folder of Tessera's user cache of its own
    /// for this glTF (`scenes/<stem>-<hash of its absolute path>`), so levels of the same
    /// name in other games never share a bake; set it to keep the bake elsewhere (beside
    /// the game's assets, say).
    pub cache: PathBuf,
    /// Draw the atlas' texels fully resident through Bevy's `StandardMaterial` instead
    /// of streaming them: the A/B switch to compare against (tests, viewers). The bake
    /// is the same; changing it on a ready level swaps every mesh's material (the
    /// resident copy is made on the first switch).
    pub resident: bool,
    /// Give the cameras the level spawns (glTF camera nodes) a `DepthPrepass`, where the
    /// streamed materials then record their feedback (default: on).
    pub depth_prepass: bool,
}

impl StreamedLevel {
    /// The level whose glTF file is at `gltf`, baked with LZ4 (lossless) into a folder
    /// of Tessera's cache of its own, streamed; its cameras get a `DepthPrepass`.
    pub fn new(gltf: impl Into<PathBuf>) -> Self {
        let gltf = gltf.into();
        let cache = default_cache(&gltf);
        Self { gltf, codec: Codec::Lz4, cache, resident: false, depth_prepass: true }
    }
}

/// Tessera's cache folder for the level at `gltf`: `scenes/<stem>-<16 hex digits>`, the
/// digits an FNV-1a hash of its absolute path (stable across runs and Rust releases).
fn default_cache(gltf: &Path) -> PathBuf {
    let absolute = std::path::absolute(gltf).unwrap_or_else(|_| gltf.to_path_buf());
    let hash = absolute
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let stem = gltf.file_stem().map_or_else(|| "level".into(), |s| s.to_string_lossy().into_owned());
    catalog::cache_dir().join("scenes").join(format!("{stem}-{hash:016x}"))
}

/// Where a [`StreamedLevel`] stands.
#[derive(Component, Clone, Debug, Default, PartialEq)]
pub enum LevelState {
    /// Baking (or checking the cached bake): the fraction done, 0 to 1 (0 before the
    /// bake announced its size); the level shows Bevy's own materials.
    #[default]
    Baking,
    /// The atlas is ready and the level's meshes draw from it.
    Ready {
        /// The atlas file.
        atlas: PathBuf,
        /// Meshes whose material was swapped so far.
        swapped: usize,
    },
    /// The bake failed (also logged); the level keeps Bevy's own materials.
    Failed(String),
}

/// The bake in flight and how far it got.
#[derive(Component)]
struct LevelBake {
    task: Task<(Result<BakedScene, String>, LevelInputs)>,
    progress: Arc<ProgressCounter>,
}

/// A file's length and modification time: what tells that it changed.
type FileIdentity = Option<(u64, SystemTime)>;

fn identity(path: &Path) -> FileIdentity {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// The files a level's last bake read (the glTF, its buffers and image files; the glTF
/// alone when the bake failed) as they were then: one that changes starts a new bake.
#[derive(Component, Clone, Debug, Default)]
struct LevelInputs(Vec<(PathBuf, FileIdentity)>);

impl LevelInputs {
    /// The first input that changed since, if any.
    fn changed(&self) -> Option<&Path> {
        self.0.iter().find(|(path, seen)| identity(path) != *seen).map(|(path, _)| path.as_path())
    }
}

/// Frames between two looks at whether a ready or failed level's glTF changed (a
/// `Modified` event of Bevy's asset server for it looks at once).
const WATCH_FRAMES: u32 = 30;

/// The materials a ready level's meshes get, by glTF material index (glTF's default
/// material, when some mesh has none, is the last one): streamed, and the resident
/// copy once asked for.
#[derive(Component)]
struct LevelMaterials {
    baked: Arc<BakedScene>,
    streamed: Vec<Handle<TesseraMaterial>>,
    resident: Option<Vec<Handle<StandardMaterial>>>,
    /// Whether the meshes were last given the resident copy.
    shown_resident: bool,
}

/// A mesh of a ready level: which level, and its glTF material.
#[derive(Component, Clone, Copy, Debug)]
struct LevelMesh {
    level: Entity,
    material: usize,
}

/// How far a level's bake is, 0 to 1 (`None` before it announced its size or once it
/// is over).
#[derive(Component, Clone, Copy, Debug, Default, PartialEq)]
pub struct LevelBakeProgress(pub Option<f32>);

/// Adds the systems of [`StreamedLevel`] (part of [`crate::TesseraPlugin`]).
pub(crate) fn register(app: &mut App) {
    app.add_systems(
        Update,
        (start_bakes, watch_inputs, finish_bakes, swap_materials, switch_copies, prepass_cameras).chain(),
    );
}

/// Both the bake's own log lines and the counter the level's state reads.
struct Report<'a> {
    counter: &'a ProgressCounter,
    log: LogProgress,
}

impl Progress for Report<'_> {
    fn set_length(&self, n: u64) {
        self.counter.set_length(n);
        self.log.set_length(n);
    }
    fn inc(&self, n: u64) {
        self.counter.inc(n);
        self.log.inc(n);
    }
    fn set_message(&self, message: &str) {
        self.counter.set_message(message);
        self.log.set_message(message);
    }
    fn finish(&self) {
        self.counter.finish();
        self.log.finish();
    }
}

fn start_bakes(mut commands: Commands, levels: Query<(Entity, &StreamedLevel), Added<StreamedLevel>>) {
    for (entity, level) in &levels {
        commands.entity(entity).insert((bake(level, Vec::new()), LevelBakeProgress(Some(0.0))));
    }
}

/// A bake of `level` on Bevy's `AsyncComputeTaskPool` (a current bake is reused). Its
/// inputs are watched afterwards: those the bake read, or, when it fails, the glTF and
/// `previous` (the last good bake's), so that restoring a file bakes again too.
fn bake(level: &StreamedLevel, previous: Vec<PathBuf>) -> LevelBake {
    let progress = Arc::new(ProgressCounter::new());
    let (counter, level) = (Arc::clone(&progress), level.clone());
    let task = AsyncComputeTaskPool::get().spawn(async move {
        // The glTF as it was before it was read: an edit during the bake bakes again.
        let mut inputs = LevelInputs(vec![(level.gltf.clone(), identity(&level.gltf))]);
        let report = Report { counter: &counter, log: LogProgress::new("tessera level bake") };
        let result = BakedScene::gltf(&level.gltf, &level.cache, level.codec, &report)
            .map_err(|e| format!("{}: {e}", level.gltf.display()));
        let others = match &result {
            Ok(baked) => baked.inputs.iter().filter(|p| **p != baked.scene.source).cloned().collect(),
            Err(_) => previous,
        };
        let others = others.into_iter().filter(|p| *p != level.gltf);
        inputs.0.extend(others.map(|p| {
            let seen = identity(&p);
            (p, seen)
        }));
        (result, inputs)
    });
    LevelBake { task, progress }
}

/// Bakes a ready or failed level again when a file its last bake read changed: looked at
/// every [`WATCH_FRAMES`] frames, and at once when Bevy's asset server reports the
/// level's glTF modified (its file watcher, where enabled, also respawns the level).
fn watch_inputs(
    mut commands: Commands,
    mut frames: Local<u32>,
    mut cursor: Local<MessageCursor<AssetEvent<Gltf>>>,
    // Optional: an app without Bevy's glTF or asset plugins has no such events.
    events: Option<Res<Messages<AssetEvent<Gltf>>>>,
    assets: Option<Res<AssetServer>>,
    levels: Query<(Entity, &StreamedLevel, &LevelInputs, Option<&WorldAssetRoot>), Without<LevelBake>>,
) {
    let modified: Vec<PathBuf> = match (&events, &assets) {
        (Some(events), Some(assets)) => cursor
            .read(events)
            .filter_map(|e| match e {
                AssetEvent::Modified { id } => assets.get_path(*id).map(|p| p.path().to_path_buf()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    *frames += 1;
    let look = frames.is_multiple_of(WATCH_FRAMES);
    for (entity, level, inputs, root) in &levels {
        let root_path = root.and_then(|r| r.0.path()).map(|p| p.path().to_path_buf());
        if !look && !root_path.is_some_and(|p| modified.contains(&p)) {
            continue;
        }
        let Some(changed) = inputs.changed() else { continue };
        info!("level {}: {} changed, baking it again", level.gltf.display(), changed.display());
        let previous = inputs.0.iter().map(|(path, _)| path.clone()).collect();
        commands.entity(entity).insert((bake(level, previous), LevelBakeProgress(Some(0.0))));
    }
}

/// Gives the cameras a level spawns (glTF camera nodes) a `DepthPrepass`, where the
/// level's [`StreamedLevel::depth_prepass`] asks for it, saying so once per camera.
#[allow(clippy::type_complexity)]
fn prepass_cameras(
    mut commands: Commands,
    cameras: Query<(Entity, Option<&Name>), (Added<Camera3d>, Without<DepthPrepass>)>,
    levels: Query<&StreamedLevel>,
    parents: Query<&ChildOf>,
) {
    for (camera, name) in &cameras {
        let mut up = parents.get(camera).ok().map(Relationship::get);
        while let Some(node) = up {
            if let Ok(level) = levels.get(node) {
                if level.depth_prepass {
                    commands.entity(camera).insert(DepthPrepass);
                    let name = name.map_or_else(|| format!("{camera}"), |n| format!("'{n}'"));
                    info!(
                        "level {}: its camera {name} gets a DepthPrepass (streamed feedback in the prepass)",
                        level.gltf.display()
                    );
                }
                break;
            }
            up = parents.get(node).ok().map(Relationship::get);
        }
    }
}

#[allow(clippy::type_complexity)]
fn finish_bakes(
    mut commands: Commands,
    mut bakes: Query<(
        Entity,
        &StreamedLevel,
        &mut LevelBake,
        &mut LevelState,
        &mut LevelBakeProgress,
        Option<&LevelMaterials>,
    )>,
    meshes: Query<(Entity, &LevelMesh)>,
    mut streamed: ResMut<Assets<TesseraMaterial>>,
    mut standard: ResMut<Assets<StandardMaterial>>,
    mut images: ResMut<Assets<Image>>,
) {
    for (entity, level, mut bake, mut state, mut progress, old) in &mut bakes {
        let Some((result, inputs)) = check_ready(&mut bake.task) else {
            let (pos, len) = (bake.progress.position(), bake.progress.length());
            progress.0 = (len > 0).then(|| (pos as f64 / len as f64) as f32);
            continue;
        };
        commands.entity(entity).remove::<LevelBake>().insert(inputs);
        progress.0 = None;
        let baked = match result {
            Ok(baked) => Arc::new(baked),
            // A level baked before keeps its last good bake.
            Err(e) if old.is_some() => {
                error!("the level's new bake failed, the last one stays: {e}");
                continue;
            }
            Err(e) => {
                error!("the level's textures stay Bevy's own: {e}");
                *state = LevelState::Failed(e);
                continue;
            }
        };
        let streamed_handles = streamed_materials(&baked.location(), &baked.manifest, &baked.scene)
            .into_iter()
            .map(|m| streamed.add(m))
            .collect();
        let mut materials = LevelMaterials {
            baked: Arc::clone(&baked),
            streamed: streamed_handles,
            resident: None,
            shown_resident: false,
        };
        if level.resident {
            // Without a resident copy (logged) the level streams.
            materials.shown_resident = materials.make_resident(&mut standard, &mut images);
        }
        info!("level {} streams from {}", level.gltf.display(), baked.atlas.display());
        // Baked again: the meshes swapped so far take the new materials (the atlas file,
        // rewritten, is opened again by the render world).
        let mut swapped = 0;
        if old.is_some() {
            for (mesh, part) in meshes.iter().filter(|(_, m)| m.level == entity) {
                swapped += usize::from(materials.apply(
                    &mut commands,
                    mesh,
                    part.material,
                    materials.shown_resident,
                ));
            }
        }
        commands.entity(entity).insert(materials);
        *state = LevelState::Ready { atlas: baked.atlas.clone(), swapped };
    }
}

impl LevelMaterials {
    /// Makes the resident copy unless there is one; false (logged) when the atlas
    /// cannot give it.
    fn make_resident(&mut self, standard: &mut Assets<StandardMaterial>, images: &mut Assets<Image>) -> bool {
        if self.resident.is_some() {
            return true;
        }
        let b = &self.baked;
        let made = tessera::core::Atlas::open(&b.atlas)
            .and_then(|atlas| resident_materials(&atlas, &b.manifest, &b.scene, images));
        match made {
            Ok(m) => {
                self.resident = Some(m.into_iter().map(|m| standard.add(m)).collect());
                true
            }
            Err(e) => {
                error!("no resident copy of {}: {e}", b.atlas.display());
                false
            }
        }
    }

    /// Gives `mesh` glTF material `index`, streamed or resident.
    fn apply(&self, commands: &mut Commands, mesh: Entity, index: usize, resident: bool) -> bool {
        let mut e = commands.entity(mesh);
        match (resident, &self.resident) {
            (true, Some(r)) => {
                let Some(h) = r.get(index) else { return false };
                e.remove::<MeshMaterial3d<TesseraMaterial>>().insert(MeshMaterial3d(h.clone()));
            }
            _ => {
                let Some(h) = self.streamed.get(index) else { return false };
                e.remove::<MeshMaterial3d<StandardMaterial>>().insert(MeshMaterial3d(h.clone()));
            }
        }
        true
    }
}

/// The glTF material index of a `StandardMaterial` that Bevy's glTF loader labelled
/// `label` (`Material3/std`, `Material3 (inverted)/std`), or `default` (the baked
/// scene's default material, if it has one) for glTF's default material
/// (`DefaultMaterial/std`); `None` for any other label.
fn gltf_index(label: &str, default: Option<usize>) -> Option<usize> {
    let name = label.strip_suffix("/std")?;
    if name == "DefaultMaterial" {
        return default;
    }
    let digits = name.strip_prefix("Material")?;
    let digits = digits.strip_suffix(" (inverted)").unwrap_or(digits);
    digits.parse().ok()
}

fn swap_materials(
    mut commands: Commands,
    mut levels: Query<(Entity, &StreamedLevel, &LevelMaterials, &mut LevelState, Option<&WorldAssetRoot>)>,
    meshes: Query<&MeshMaterial3d<StandardMaterial>, Without<LevelMesh>>,
    fresh: Query<Entity, (Added<MeshMaterial3d<StandardMaterial>>, Without<LevelMesh>)>,
    // Ready, or baked again: every mesh under the level not swapped yet.
    ready: Query<(), Changed<LevelMaterials>>,
    children: Query<&Children>,
    parents: Query<&ChildOf>,
) {
    let mut swap = |level: Entity,
                    settings: &StreamedLevel,
                    root: Option<&WorldAssetRoot>,
                    materials: &LevelMaterials,
                    state: &mut LevelState,
                    mesh: Entity| {
        let Ok(material) = meshes.get(mesh) else { return };
        let Some(path) = material.0.path() else { return };
        // Only the level's own glTF materials (not those of another glTF spawned under
        // it, such as a prop or a nested level).
        if root.and_then(|r| r.0.path()).is_some_and(|own| own.path() != path.path()) {
            return;
        }
        let default = materials.baked.scene.default_material;
        let Some(index) = path.label().and_then(|l| gltf_index(l, default)) else { return };
        if materials.apply(&mut commands, mesh, index, settings.resident) {
            commands.entity(mesh).insert(LevelMesh { level, material: index });
            if let LevelState::Ready { swapped, .. } = state {
                *swapped += 1;
            }
        }
    };
    for (level, settings, materials, mut state, root) in &mut levels {
        if ready.get(level).is_ok() {
            // Ready or baked again: everything spawned under the level so far.
            for mesh in children.iter_descendants(level) {
                swap(level, settings, root, materials, &mut state, mesh);
            }
        }
    }
    // Meshes that appeared since (a scene instance spawning after the bake).
    for mesh in &fresh {
        let mut up = parents.get(mesh).ok().map(Relationship::get);
        while let Some(node) = up {
            if let Ok((level, settings, materials, mut state, root)) = levels.get_mut(node) {
                if ready.get(level).is_err() {
                    swap(level, settings, root, materials, &mut state, mesh);
                }
                break;
            }
            up = parents.get(node).ok().map(Relationship::get);
        }
    }
}

/// A ready level whose `resident` changed: every mesh to the other copy.
fn switch_copies(
    mut commands: Commands,
    mut levels: Query<(Entity, &StreamedLevel, &mut LevelMaterials), Changed<StreamedLevel>>,
    meshes: Query<(Entity, &LevelMesh)>,
    mut standard: ResMut<Assets<StandardMaterial>>,
    mut images: ResMut<Assets<Image>>,
) {
    for (level, settings, mut materials) in &mut levels {
        let resident = settings.resident && materials.make_resident(&mut standard, &mut images);
        if resident == materials.shown_resident {
            continue;
        }
        materials.shown_resident = resident;
        for (mesh, part) in meshes.iter().filter(|(_, m)| m.level == level) {
            materials.apply(&mut commands, mesh, part.material, resident);
        }
        info!(
            "level textures: {}",
            if resident { "resident in StandardMaterials" } else { "streamed through Tessera" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{default_cache, gltf_index};
    use std::path::Path;

    #[test]
    fn each_level_has_a_cache_folder_of_its_own() {
        let a = default_cache(Path::new("/games/one/assets/level.gltf"));
        let b = default_cache(Path::new("/games/two/assets/level.gltf"));
        assert_ne!(a, b, "two levels of the same name share a bake");
        assert_eq!(a, default_cache(Path::new("/games/one/assets/level.gltf")), "not stable");
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("level-") && name.len() == "level-".len() + 16, "{name}");
        assert!(a.parent().unwrap().ends_with("scenes"), "{}", a.display());
    }

    #[test]
    fn labels_of_bevys_gltf_materials_name_their_index() {
        assert_eq!(gltf_index("Material3/std", Some(9)), Some(3));
        assert_eq!(gltf_index("Material12 (inverted)/std", None), Some(12));
        assert_eq!(gltf_index("DefaultMaterial/std", Some(9)), Some(9));
        assert_eq!(gltf_index("DefaultMaterial/std", None), None, "no default material baked");
        for other in ["Material3", "Texture2/std", "Materialx/std", "Mesh0/Primitive0", ""] {
            assert_eq!(gltf_index(other, Some(9)), None, "{other}");
        }
    }
}
