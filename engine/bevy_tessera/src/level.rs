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
//! Bevy's loader still reads the glTF's images for its own materials; to keep them off
//! the GPU, load the level with `GltfLoaderSettings` that skip materials' images if
//! your Bevy release offers it.

use std::path::PathBuf;
use std::sync::Arc;

use bevy::ecs::relationship::Relationship;
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
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
    /// Where the atlas is baked (default: Tessera's cache folder, `scenes/`).
    pub cache: PathBuf,
    /// Draw the atlas' texels fully resident through Bevy's `StandardMaterial` instead
    /// of streaming them: the A/B switch to compare against (tests, viewers). The bake
    /// is the same.
    pub resident: bool,
}

impl StreamedLevel {
    /// The level whose glTF file is at `gltf`, baked with LZ4 (lossless) into Tessera's
    /// cache folder, streamed.
    pub fn new(gltf: impl Into<PathBuf>) -> Self {
        Self {
            gltf: gltf.into(),
            codec: Codec::Lz4,
            cache: catalog::cache_dir().join("scenes"),
            resident: false,
        }
    }
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
    task: Task<Result<BakedScene, String>>,
    progress: Arc<ProgressCounter>,
}

/// The materials a ready level's meshes get, by glTF material index (glTF's default
/// material, when some mesh has none, is the last one).
#[derive(Component, Clone)]
struct LevelMaterials {
    by_index: Vec<LevelMaterial>,
}

#[derive(Clone)]
enum LevelMaterial {
    Streamed(Handle<TesseraMaterial>),
    Resident(Handle<StandardMaterial>),
}

/// How far a level's bake is, 0 to 1 (`None` before it announced its size or once it
/// is over).
#[derive(Component, Clone, Copy, Debug, Default, PartialEq)]
pub struct LevelBakeProgress(pub Option<f32>);

/// Adds the systems of [`StreamedLevel`] (part of [`crate::TesseraPlugin`]).
pub(crate) fn register(app: &mut App) {
    app.add_systems(Update, (start_bakes, finish_bakes, swap_materials).chain());
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
        let progress = Arc::new(ProgressCounter::new());
        let (counter, level) = (Arc::clone(&progress), level.clone());
        let task = AsyncComputeTaskPool::get().spawn(async move {
            let report = Report { counter: &counter, log: LogProgress::new("tessera level bake") };
            BakedScene::gltf(&level.gltf, &level.cache, level.codec, &report)
                .map_err(|e| format!("{}: {e}", level.gltf.display()))
        });
        commands.entity(entity).insert((LevelBake { task, progress }, LevelBakeProgress(Some(0.0))));
    }
}

fn finish_bakes(
    mut commands: Commands,
    mut bakes: Query<(Entity, &StreamedLevel, &mut LevelBake, &mut LevelState, &mut LevelBakeProgress)>,
    mut streamed: ResMut<Assets<TesseraMaterial>>,
    mut standard: ResMut<Assets<StandardMaterial>>,
    mut images: ResMut<Assets<Image>>,
) {
    for (entity, level, mut bake, mut state, mut progress) in &mut bakes {
        let Some(result) = check_ready(&mut bake.task) else {
            let (pos, len) = (bake.progress.position(), bake.progress.length());
            progress.0 = (len > 0).then(|| (pos as f64 / len as f64) as f32);
            continue;
        };
        commands.entity(entity).remove::<LevelBake>();
        progress.0 = None;
        let baked = match result {
            Ok(baked) => baked,
            Err(e) => {
                error!("the level's textures stay Bevy's own: {e}");
                *state = LevelState::Failed(e);
                continue;
            }
        };
        let by_index = if level.resident {
            let atlas = match tessera::core::Atlas::open(&baked.atlas) {
                Ok(a) => a,
                Err(e) => {
                    error!("{e}");
                    *state = LevelState::Failed(e.to_string());
                    continue;
                }
            };
            match resident_materials(&atlas, &baked.manifest, &baked.scene, &mut images) {
                Ok(m) => m.into_iter().map(|m| LevelMaterial::Resident(standard.add(m))).collect(),
                Err(e) => {
                    error!("{e}");
                    *state = LevelState::Failed(e.to_string());
                    continue;
                }
            }
        } else {
            streamed_materials(&baked.location(), &baked.manifest, &baked.scene)
                .into_iter()
                .map(|m| LevelMaterial::Streamed(streamed.add(m)))
                .collect()
        };
        info!("level {} streams from {}", level.gltf.display(), baked.atlas.display());
        commands.entity(entity).insert(LevelMaterials { by_index });
        *state = LevelState::Ready { atlas: baked.atlas, swapped: 0 };
    }
}

/// The glTF material index of a `StandardMaterial` that Bevy's glTF loader labelled
/// `label` (`Material3/std`, `Material3 (inverted)/std`), or `default` for glTF's
/// default material (`DefaultMaterial/std`); `None` for any other label.
fn gltf_index(label: &str, default: usize) -> Option<usize> {
    let name = label.strip_suffix("/std")?;
    if name == "DefaultMaterial" {
        return Some(default);
    }
    let digits = name.strip_prefix("Material")?;
    let digits = digits.strip_suffix(" (inverted)").unwrap_or(digits);
    digits.parse().ok()
}

fn swap_materials(
    mut commands: Commands,
    mut levels: Query<(Entity, &LevelMaterials, &mut LevelState)>,
    meshes: Query<&MeshMaterial3d<StandardMaterial>>,
    fresh: Query<Entity, Added<MeshMaterial3d<StandardMaterial>>>,
    ready: Query<(), Added<LevelMaterials>>,
    children: Query<&Children>,
    parents: Query<&ChildOf>,
) {
    let mut swap = |materials: &LevelMaterials, state: &mut LevelState, mesh: Entity| {
        let Ok(material) = meshes.get(mesh) else { return };
        let default = materials.by_index.len().saturating_sub(1);
        let label = material.0.path().and_then(|p| p.label());
        let Some(m) = label.and_then(|l| gltf_index(l, default)).and_then(|i| materials.by_index.get(i))
        else {
            return;
        };
        let mut e = commands.entity(mesh);
        e.remove::<MeshMaterial3d<StandardMaterial>>();
        match m {
            LevelMaterial::Streamed(h) => e.insert(MeshMaterial3d(h.clone())),
            LevelMaterial::Resident(h) => e.insert(MeshMaterial3d(h.clone())),
        };
        if let LevelState::Ready { swapped, .. } = state {
            *swapped += 1;
        }
    };
    for (level, materials, mut state) in &mut levels {
        if ready.get(level).is_ok() {
            // Just ready: everything spawned under the level so far.
            for mesh in children.iter_descendants(level) {
                swap(materials, &mut state, mesh);
            }
        }
    }
    // Meshes that appeared since (a scene instance spawning after the bake).
    for mesh in &fresh {
        let mut up = parents.get(mesh).ok().map(Relationship::get);
        while let Some(node) = up {
            if let Ok((level, materials, mut state)) = levels.get_mut(node) {
                if ready.get(level).is_err() {
                    swap(materials, &mut state, mesh);
                }
                break;
            }
            up = parents.get(node).ok().map(Relationship::get);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::gltf_index;

    #[test]
    fn labels_of_bevys_gltf_materials_name_their_index() {
        assert_eq!(gltf_index("Material3/std", 9), Some(3));
        assert_eq!(gltf_index("Material12 (inverted)/std", 9), Some(12));
        assert_eq!(gltf_index("DefaultMaterial/std", 9), Some(9));
        for other in ["Material3", "Texture2/std", "Materialx/std", "Mesh0/Primitive0", ""] {
            assert_eq!(gltf_index(other, 9), None, "{other}");
        }
    }
}
