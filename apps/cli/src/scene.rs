//! Opening a scene by name for `capture`, `demo` and `bench`: the catalog prepares it (baking
//! when its cached bake is stale), this module shows the progress and says what it did.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use tessera_core::Codec;
use tessera_core::scene::catalog::{self, PreparedScene};
use tessera_core::scene::material_scene::MaterialScene;

use crate::progress::Bar;

/// The atlas and (for real-data scenes) meshes of scene `name`: `builtin` (the generated
/// labelled texture of size `builtin`) or a scene of the catalog baked with `codec`;
/// baked when its cached bake is stale or `rebake` asks for it.
pub(crate) fn open(
    name: &str,
    builtin: (u32, u32),
    codec: Codec,
    rebake: bool,
) -> Result<(PathBuf, Option<Arc<MaterialScene>>)> {
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
    println!(
        "{} scene '{name}': {}",
        if prepared.baked { "baked" } else { "using the cached bake of" },
        prepared.atlas.display()
    );
    Ok((prepared.atlas, prepared.scene.map(Arc::new)))
}
