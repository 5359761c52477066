//! Several glTF levels, each loaded by Bevy's glTF loader and streamed from its own
//! atlas, sharing one host cache and one set of loader threads
//! (`VtConfig::shared`): the dungeon (`assets/fetch-data.sh --dungeon`) and Tessera's
//! `alpha` scene (glass, a fence with holes and a floor from the Earth images) beside
//! it. The panel lists both atlases; the host cache's budget holds for both together.
//!
//! `cargo run -p bevy_tessera --example many_levels`. Fly with WASD, Q/E and the right
//! mouse button; R switches every level between streamed and resident textures.

mod common;

use std::path::{Path, PathBuf};

use bevy::core_pipeline::prepass::DepthPrepass;
use bevy::gltf::GltfAssetLabel;
use bevy::prelude::*;
use bevy::world_serialization::WorldAssetRoot;
use bevy_tessera::level::StreamedLevel;
use bevy_tessera::{TesseraPlugin, Unattended, VtConfig};
use tessera::core::SharedStreaming;
use tessera::core::scene::{alpha_scene, catalog};

/// The levels' glTF files and where each stands, and where the camera starts.
#[derive(Resource)]
struct Levels {
    levels: Vec<(PathBuf, Vec3)>,
    eye: Transform,
}

fn main() -> AppExit {
    let data = tessera::core::bake::source::data_dir();
    let dungeon = data.join("dungeon/level-dungeon.gltf");
    if !dungeon.is_file() {
        eprintln!(
            "many_levels: {} is missing; fetch it with assets/fetch-data.sh --dungeon",
            dungeon.display()
        );
        return AppExit::error();
    }
    let alpha = match alpha_scene::write(&data, &catalog::cache_dir().join("scenes/alpha")) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("many_levels: {e}");
            return AppExit::error();
        }
    };
    // One host cache (256 MiB) and one set of loader threads for every atlas.
    let shared = match SharedStreaming::new(256, 0) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("many_levels: {e}");
            return AppExit::error();
        }
    };
    let config = VtConfig { pool_mib: 64, shared: Some(shared), ..VtConfig::default() };
    // The alpha scene (8 × 8 units) beside the dungeon's +X side, seen from above
    // between the two.
    let bounds = match tessera::core::scene::material_scene::load_gltf(&dungeon) {
        Ok(scene) => (scene.bounds_min.to_array(), scene.bounds_max.to_array()),
        Err(e) => {
            eprintln!("many_levels: {e}");
            return AppExit::error();
        }
    };
    let (lo, hi) = (Vec3::from_array(bounds.0), Vec3::from_array(bounds.1));
    let mid_z = (lo.z + hi.z) * 0.5;
    let alpha_at = Vec3::new(hi.x + 6.0, lo.y, mid_z);
    let eye = Transform::from_xyz(hi.x - 2.0, hi.y + 6.0, mid_z + 9.0)
        .looking_at(Vec3::new(hi.x + 2.0, lo.y, mid_z), Vec3::Y);
    // The asset server reads the whole file system, so both levels load by their paths.
    App::new()
        .add_plugins(DefaultPlugins.set(AssetPlugin { file_path: "/".into(), ..default() }))
        .add_plugins(TesseraPlugin { config, unattended: Unattended::from_env() })
        .insert_resource(Levels { levels: vec![(dungeon, Vec3::ZERO), (alpha, alpha_at)], eye })
        .add_systems(Startup, (setup, common::spawn_panel))
        .add_systems(Update, (common::fly, common::show_stats, switch))
        .run()
}

/// `path` as an asset path under the file system's root.
fn from_root(path: &Path) -> String {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    path.to_string_lossy().trim_start_matches('/').to_owned()
}

fn setup(mut commands: Commands, levels: Res<Levels>, assets: Res<AssetServer>) {
    for (gltf, at) in &levels.levels {
        commands.spawn((
            WorldAssetRoot(assets.load(GltfAssetLabel::Scene(0).from_asset(from_root(gltf)))),
            StreamedLevel::new(gltf),
            Transform::from_translation(*at),
        ));
    }
    commands.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });
    commands.spawn((Camera3d::default(), DepthPrepass, levels.eye, common::Fly::new(4.0, &levels.eye)));
}

/// R switches every level to the other copy of its textures.
fn switch(keys: Res<ButtonInput<KeyCode>>, mut levels: Query<&mut StreamedLevel>) {
    if keys.just_pressed(KeyCode::KeyR) {
        for mut level in &mut levels {
            level.resident = !level.resident;
        }
    }
}
