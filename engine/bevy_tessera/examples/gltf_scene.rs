//! A glTF level loaded by Bevy's own glTF loader (hierarchy, lights, cameras and
//! animations as Bevy gives them), its textures streamed from the stacked atlas (albedo,
//! normal, roughness-metal) the plugin bakes in the background, through a 64 MiB pool.
//!
//! `cargo run -p bevy_tessera --example gltf_scene [-- LEVEL.gltf]`: without a file,
//! the dungeon level that `assets/fetch-data.sh --dungeon` downloads. The asset server
//! reads the level's folder; `StreamedLevel` bakes the atlas once into Tessera's cache
//! folder (the log shows the progress; until it is ready the level shows Bevy's own
//! materials) and swaps the level's materials. Fly with WASD, Q/E and the right mouse
//! button; Shift is faster. R switches between the streamed textures and the same
//! texels fully resident in Bevy's own `StandardMaterial`, to compare.

mod common;

use std::path::PathBuf;

use bevy::core_pipeline::prepass::DepthPrepass;
use bevy::gltf::GltfAssetLabel;
use bevy::prelude::*;
use bevy::world_serialization::WorldAssetRoot;
use bevy_tessera::level::StreamedLevel;
use bevy_tessera::scene::{camera_transform, sun};
use bevy_tessera::{CameraPath, Shot, TesseraPlugin, VtConfig};
use tessera::core::scene::material_scene::{MaterialScene, load_gltf};

/// The level's glTF file and its meshes as Tessera reads them (for the camera start).
#[derive(Resource)]
struct Level {
    gltf: PathBuf,
    scene: MaterialScene,
}

fn main() -> AppExit {
    let gltf = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => tessera::core::bake::source::data_dir().join("dungeon/level-dungeon.gltf"),
    };
    let gltf = std::path::absolute(&gltf).unwrap_or(gltf);
    let scene = match load_gltf(&gltf) {
        Ok(scene) => scene,
        Err(e) => {
            eprintln!("gltf_scene: {e} (the dungeon: assets/fetch-data.sh --dungeon)");
            return AppExit::error();
        }
    };
    let folder = gltf.parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    App::new()
        .add_plugins(DefaultPlugins.set(AssetPlugin { file_path: folder, ..default() }))
        .add_plugins(TesseraPlugin {
            config: VtConfig { pool_mib: 64, ..VtConfig::default() },
            unattended: bevy_tessera::Unattended::from_env(),
        })
        .insert_resource(Level { gltf, scene })
        .add_systems(Startup, (setup, common::spawn_panel))
        .add_systems(Update, (common::fly, common::show_stats, switch))
        .run()
}

fn setup(mut commands: Commands, level: Res<Level>, assets: Res<AssetServer>) {
    let file = level.gltf.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    commands.spawn((
        WorldAssetRoot(assets.load(GltfAssetLabel::Scene(0).from_asset(file))),
        StreamedLevel::new(&level.gltf),
    ));
    // Bevy's loader spawns the level's own lights; a level without a sun gets one.
    if level.scene.sun_direction.is_none() {
        commands.spawn(sun(&level.scene, true));
    }
    commands.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });
    // The start of Tessera's `walk` preset for the level (eye height above the floor,
    // along its longer axis).
    let start = CameraPath::for_scene(None, Some(&level.scene), Shot::Tour)
        .map(|p| p.camera_at(0))
        .unwrap_or_default();
    let (transform, projection) = camera_transform(&start);
    let size = Vec3::from_array((level.scene.bounds_max - level.scene.bounds_min).to_array());
    commands.spawn((
        Camera3d::default(),
        // Streamed materials record their feedback in the depth prepass; their main
        // pass is then depth tested before shading.
        DepthPrepass,
        transform,
        projection,
        common::Fly::new((size.length() * 0.05).max(1.0), &transform),
    ));
}

/// R shows the other copy of the level's textures.
fn switch(keys: Res<ButtonInput<KeyCode>>, mut levels: Query<&mut StreamedLevel>) {
    if keys.just_pressed(KeyCode::KeyR) {
        for mut level in &mut levels {
            level.resident = !level.resident;
        }
    }
}
