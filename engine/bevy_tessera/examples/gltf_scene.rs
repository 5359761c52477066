//! A glTF level lit by Bevy, its textures streamed from the stacked atlas (albedo,
//! normal, roughness-metal) that `tessera bake --gltf` writes, through a 64 MiB pool.
//!
//! `cargo run -p bevy_tessera --example gltf_scene [-- LEVEL.gltf]`: without a file,
//! the dungeon level that `assets/fetch-data.sh --dungeon` downloads. The atlas and
//! its manifest (which rectangle of the atlas each material uses) are baked once into
//! Tessera's cache folder. Fly with WASD, Q/E and the right mouse button; Shift is
//! faster.

mod common;

use std::path::{Path, PathBuf};

use bevy::asset::RenderAssetUsages;
use bevy::core_pipeline::tonemapping::Tonemapping;
use bevy::mesh::{Indices, PrimitiveTopology};
use bevy::prelude::*;
use bevy_tessera::{TesseraPlugin, scene_material};
use tessera::VtConfig;
use tessera::core::bake::BakeOptions;
use tessera::core::format::codec::Codec;
use tessera::core::scene::camera::{CameraPath, Shot};
use tessera::core::scene::catalog;
use tessera::core::scene::material_scene::{MaterialScene, load_gltf};
use tessera::core::scene::scene_bake::{SceneManifest, bake_scene};

/// The level, its atlas and its manifest.
#[derive(Resource)]
struct Level {
    scene: MaterialScene,
    atlas: PathBuf,
    manifest: SceneManifest,
}

fn main() -> AppExit {
    let level = match prepare(std::env::args().nth(1).map(PathBuf::from)) {
        Ok(level) => level,
        Err(e) => {
            eprintln!("gltf_scene: {e}");
            return AppExit::error();
        }
    };
    App::new()
        .add_plugins(DefaultPlugins)
        .add_plugins(TesseraPlugin { config: VtConfig { pool_mib: 64, ..VtConfig::default() } })
        .insert_resource(level)
        .add_systems(Startup, (setup, common::spawn_panel))
        .add_systems(Update, (common::fly, common::show_stats, common::unattended))
        .run()
}

/// Loads the level and bakes its atlas when there is none or it is stale.
fn prepare(gltf: Option<PathBuf>) -> Result<Level, Box<dyn std::error::Error>> {
    let progress = common::Percent::default();
    let cache = catalog::cache_dir();
    let (scene, atlas) = match gltf {
        None => {
            let data = tessera::core::bake::source::data_dir();
            let prepared = catalog::prepare("dungeon", &data, &cache, Codec::Lz4, false, &progress)?;
            let scene = prepared.scene.ok_or("the dungeon catalog entry has no scene")?;
            (scene, prepared.atlas)
        }
        Some(path) => {
            let scene = load_gltf(&path)?;
            let stem =
                path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "scene".into());
            let atlas = cache.join("scenes").join(format!("{stem}-bevy.tsa"));
            if !is_baked(&atlas) {
                std::fs::create_dir_all(cache.join("scenes"))?;
                bake_scene(
                    &scene,
                    &atlas,
                    &BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() },
                    &progress,
                )?;
            }
            (scene, atlas)
        }
    };
    let manifest = SceneManifest::load(&SceneManifest::path_for(&atlas))?;
    Ok(Level { scene, atlas, manifest })
}

fn is_baked(atlas: &Path) -> bool {
    atlas.is_file() && SceneManifest::path_for(atlas).is_file()
}

fn setup(
    mut commands: Commands,
    level: Res<Level>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<bevy_tessera::TesseraMaterial>>,
) {
    let atlas = level.atlas.to_string_lossy().into_owned();
    let size = (level.manifest.width, level.manifest.height);
    let handles: Vec<_> = level
        .manifest
        .materials
        .iter()
        .zip(&level.scene.materials)
        .map(|(packed, gltf)| {
            let mut m = scene_material(&atlas, packed, size);
            // Drawn from both sides like Tessera's own scene renderer; lit from the
            // side seen when the glTF says so.
            m.base.cull_mode = None;
            m.base.double_sided = gltf.double_sided;
            materials.add(m)
        })
        .collect();
    for part in &level.scene.meshes {
        let v = &part.mesh.vertices;
        let mut mesh = Mesh::new(PrimitiveTopology::TriangleList, RenderAssetUsages::RENDER_WORLD);
        mesh.insert_attribute(Mesh::ATTRIBUTE_POSITION, v.iter().map(|v| v.position).collect::<Vec<_>>());
        mesh.insert_attribute(Mesh::ATTRIBUTE_NORMAL, v.iter().map(|v| v.normal).collect::<Vec<_>>());
        mesh.insert_attribute(Mesh::ATTRIBUTE_UV_0, v.iter().map(|v| v.uv).collect::<Vec<_>>());
        mesh.insert_indices(Indices::U32(part.mesh.indices.clone()));
        let Some(material) = handles.get(part.material) else { continue };
        commands.spawn((Mesh3d(meshes.add(mesh)), MeshMaterial3d(material.clone())));
    }
    // Tessera's glam and Bevy's may be different releases: convert through arrays.
    let sun = level
        .scene
        .sun_direction
        .map_or(Vec3::new(-0.4, -1.0, -0.3).normalize(), |d| Vec3::from_array(d.to_array()));
    commands.spawn((
        DirectionalLight { illuminance: 6_000.0, shadow_maps_enabled: true, ..default() },
        Transform::default().looking_to(sun, Vec3::Y),
    ));
    commands.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });
    // The start of Tessera's `walk` preset for the level (eye height above the floor,
    // along its longer axis).
    let (min, max) = (
        Vec3::from_array(level.scene.bounds_min.to_array()),
        Vec3::from_array(level.scene.bounds_max.to_array()),
    );
    let start = CameraPath::for_scene(None, Some(&level.scene), Shot::Tour)
        .map(|p| p.camera_at(0))
        .unwrap_or_default();
    let eye = Vec3::from_array(start.position.to_array());
    let transform =
        Transform::from_translation(eye).looking_at(Vec3::from_array(start.target.to_array()), Vec3::Y);
    let speed = (max - min).length() * 0.05;
    commands.spawn((
        Camera3d::default(),
        Tonemapping::AcesFitted,
        transform,
        common::Fly::new(speed.max(1.0), &transform),
    ));
}
