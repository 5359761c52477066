//! Tessera's own tools on top of the engine (`tessera`): what the `tessera` command, the
//! viewer, the GPU tests and the benchmarks draw with, none of which an embedder needs.
//!
//! - [`drawer`]: one interface over the two drawers below, chosen from an atlas (a
//!   scene manifest beside it means a glTF material scene).
//! - [`scene`]: the built-in scene (a ground plane, a globe and a cube) drawn through a
//!   virtual texture, with its fully resident reference, and offscreen targets.
//! - [`material`]: glTF material scenes (stacked albedo, normal and roughness-metal
//!   layers, lights, alpha modes), streamed and fully resident.
//! - [`reference`](mod@reference): fully resident reference textures built from an atlas' own tiles.
//! - [`capture`]: headless frame capture along a camera path, with per-frame statistics
//!   and PSNR against the reference.
//! - [`terrain`]: the runtime-virtual-texture terrain: its tile producer, and the
//!   terrain drawn through the produced virtual texture or evaluated per pixel.
//! - [`soak`]: long runs of random camera cuts that watch memory, pool and queues.
//! - [`shaders`]: the WGSL of those drawers.
//!
//! The crate is not published: its types change with the tools. Embedders use `tessera`
//! (published as `tessera-vt`) and write their own passes.

#![warn(missing_docs)]

use std::sync::Arc;

use tessera::core::Atlas;
use tessera::core::scene::material_scene::MaterialScene;
use tessera::core::scene::scene_bake::SceneManifest;
use tessera::core::scene::terrain::TerrainScene;
use tessera::{GpuContext, RenderError, VirtualTextures, VtConfig};

use crate::drawer::Drawer;
use crate::material::MaterialRenderer;
use crate::scene::{SceneRenderer, TARGET_FORMAT, builtin_meshes};

pub mod capture;
pub mod drawer;
pub mod material;
pub mod reference;
pub mod scene;
pub mod shaders;
pub mod soak;
pub mod terrain;

/// The built-in scene over `vt`'s atlas, or `scene` with the manifest beside the atlas.
/// Fails with [`RenderError::DeviceLost`] on a lost device.
pub fn drawer_for(
    ctx: &GpuContext,
    vt: &VirtualTextures,
    scene: Option<&MaterialScene>,
) -> Result<Box<dyn Drawer>, RenderError> {
    // wgpu's buffer helpers panic on a lost device instead of failing.
    ctx.check()?;
    match scene {
        None => Ok(Box::new(SceneRenderer::new(ctx, vt, &builtin_meshes(vt.atlas()), TARGET_FORMAT))),
        Some(scene) => {
            let path = SceneManifest::path_for(vt.atlas().path());
            let manifest = SceneManifest::load(&path)
                .map_err(|e| RenderError::Config(format!("{e} (bake the scene with tessera bake --gltf)")))?;
            Ok(Box::new(MaterialRenderer::new(ctx, vt, scene, &manifest, TARGET_FORMAT)?))
        }
    }
}

/// The virtual textures and the drawer of what a capture, bench or soak shows: the
/// runtime-virtual-texture `terrain` (its produced virtual texture and renderer) when
/// given, else the atlas `open` returns with the built-in scene or `scene`.
pub fn open_drawn(
    ctx: &GpuContext,
    config: VtConfig,
    terrain: Option<&TerrainScene>,
    scene: Option<&MaterialScene>,
    open: impl FnOnce() -> Result<Atlas, RenderError>,
) -> Result<(VirtualTextures, Box<dyn Drawer>), RenderError> {
    if let Some(terrain) = terrain {
        let (vt, renderer) = terrain::open_terrain(ctx, terrain, config, TARGET_FORMAT)?;
        return Ok((vt, Box::new(renderer)));
    }
    let vt = VirtualTextures::new(ctx, Arc::new(open()?), config)?;
    let drawer = drawer_for(ctx, &vt, scene)?;
    Ok((vt, drawer))
}
