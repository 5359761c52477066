//! Opening a scene by name for `capture`, `demo` and `bench`: the catalog prepares it (baking
//! when its cached bake is stale), this module shows the progress and says what it did.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use tessera_core::Codec;
use tessera_core::scene::camera::{CameraPath, Shot};
use tessera_core::scene::catalog::{self, PreparedScene};
use tessera_core::scene::material_scene::MaterialScene;
use tessera_core::scene::terrain::{TERRAIN_PATHS, TerrainScene};

use crate::progress::Bar;

/// A scene opened by name.
pub(crate) struct Opened {
    /// Its atlas (`produced:NAME` for the terrain).
    pub atlas: PathBuf,
    /// Meshes and materials of a material scene.
    pub scene: Option<Arc<MaterialScene>>,
    /// The runtime-virtual-texture terrain.
    pub terrain: Option<Arc<TerrainScene>>,
}

impl Opened {
    /// The camera path `name` (a preset of the scene, or a JSON file), or the scene's
    /// default for `shot` (the terrain's: `fly` for a tour, `overview` for a still).
    pub(crate) fn camera(&self, name: Option<&str>, shot: Shot) -> Result<CameraPath> {
        let Some(terrain) = &self.terrain else {
            return Ok(CameraPath::for_scene(name, self.scene.as_deref(), shot)?);
        };
        let name = name.unwrap_or(terrain_default(shot));
        match terrain.camera_path(name) {
            Some(path) => Ok(path),
            None if name.ends_with(".json") => Ok(CameraPath::load(name)?),
            None => anyhow::bail!(
                "unknown camera '{name}' for the terrain: its paths are {}, or give a JSON file",
                TERRAIN_PATHS.join(", ")
            ),
        }
    }

    /// The name of the camera path `name`, or of the scene's default for `shot`.
    pub(crate) fn camera_name(&self, name: Option<&str>, shot: Shot) -> String {
        match (name, &self.terrain) {
            (Some(n), _) => n.to_string(),
            (None, Some(_)) => terrain_default(shot).into(),
            (None, None) => CameraPath::default_preset(self.scene.as_deref(), shot).to_string(),
        }
    }

    /// An atlas from a file with the scene given beside it (no terrain).
    pub(crate) fn file(atlas: PathBuf, scene: Option<Arc<MaterialScene>>) -> Self {
        Self { atlas, scene, terrain: None }
    }
}

/// The terrain's camera path when none is named: `fly` for a tour, `overview` for a still.
fn terrain_default(shot: Shot) -> &'static str {
    if shot == Shot::Tour { "fly" } else { "overview" }
}

/// The atlas and (for real-data scenes) meshes of scene `name`: `builtin` (the generated
/// labelled texture of size `builtin`), the terrain (nothing baked: its tiles are drawn
/// on the GPU), or a scene of the catalog baked with `codec`; baked when its cached
/// bake is stale or `rebake` asks for it.
pub(crate) fn open(name: &str, builtin: (u32, u32), codec: Codec, rebake: bool) -> Result<Opened> {
    let cache = catalog::cache_dir();
    let bar = Bar::new("bake", 0);
    let prepared: PreparedScene = if name == "builtin" {
        catalog::prepare_builtin(&cache, builtin, rebake, &bar)
            .with_context(|| format!("preparing the built-in {}x{} texture", builtin.0, builtin.1))?
    } else {
        let data = tessera_core::bake::source::data_dir();
        catalog::prepare(name, &data, &cache, codec, rebake, &bar)
            .with_context(|| format!("preparing the scene '{name}'"))?
    };
    bar.clear();
    if prepared.terrain.is_some() {
        println!(
            "scene '{name}': a runtime virtual texture, its tiles drawn on the GPU as the view needs them"
        );
    } else {
        println!(
            "{} scene '{name}': {}",
            if prepared.baked { "baked" } else { "using the cached bake of" },
            prepared.atlas.display()
        );
    }
    Ok(Opened { atlas: prepared.atlas, scene: prepared.scene.map(Arc::new), terrain: prepared.terrain })
}
