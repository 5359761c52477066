//! The runtime-virtual-texture terrain of issue 43 in Bevy, shared by the `terrain`
//! example and its headless test: the scene's mesh as a Bevy mesh, its produced atlas
//! (albedo and world-space normal, stacked) as a `TesseraAtlas` whose tiles Tessera's
//! own `TerrainProducer` draws on Bevy's render device, and the material sampling it.

use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use bevy_tessera::scene::scene_mesh;
use bevy_tessera::{Region, TesseraAtlas, TesseraMaterial, VirtualTexture};
use tessera::RenderError;
use tessera::core::scene::terrain::TerrainScene;
use tessera_tools::terrain::{TerrainGpu, TerrainProducer, terrain_atlas};

/// Materials the terrain blends: the first 4 of its 8 (the dungeon's and the castle's).
pub(crate) const MATERIALS: usize = 4;

/// The terrain's textures and decals on Bevy's device, once the render world has made
/// its producer: where a decal is added before its rectangle is invalidated.
pub(crate) type SharedGpu = Arc<Mutex<Option<TerrainGpu>>>;

/// The terrain read from Tessera's data folder (`TESSERA_DATA`, or what
/// `assets/fetch-data.sh` downloads); the error names the missing file and the fetch.
pub(crate) fn load() -> Result<TerrainScene, String> {
    let data = tessera::core::bake::source::data_dir();
    TerrainScene::load(&data, MATERIALS).map_err(|e| format!("the terrain in {}: {e}", data.display()))
}

/// The terrain's produced atlas: its producer, made on Bevy's render device when a
/// material first shows the atlas, uploads the scene's materials, splat map, relief and
/// decals and draws the composite into each tile the view asks for. Those textures and
/// decals land in `gpu`.
pub(crate) fn atlas(scene: Arc<TerrainScene>, gpu: SharedGpu) -> Result<TesseraAtlas, RenderError> {
    let atlas = terrain_atlas(&scene)?;
    Ok(TesseraAtlas::produced(atlas, move |ctx| {
        let terrain = TerrainGpu::new(ctx, &scene)?;
        let producer = TerrainProducer::new(&terrain);
        *gpu.lock().unwrap_or_else(|e| e.into_inner()) = Some(terrain);
        Ok::<_, RenderError>(producer)
    }))
}

/// The terrain mesh (world units, uv = x, z over the world) as a Bevy mesh.
pub(crate) fn mesh(scene: &TerrainScene) -> Mesh {
    scene_mesh(&scene.mesh())
}

/// Bevy's `StandardMaterial` (rough, not metallic) with the terrain's albedo and
/// world-space normal from the produced atlas; `unlit` shows the albedo alone.
pub(crate) fn material(atlas: Handle<TesseraAtlas>, unlit: bool) -> TesseraMaterial {
    let mut m = VirtualTexture::material(atlas);
    m.base.unlit = unlit;
    m.extension.region = Region { world_normal: true, ..Region::default() };
    m
}
