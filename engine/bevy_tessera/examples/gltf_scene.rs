//! A glTF level lit by Bevy, its textures streamed from the stacked atlas (albedo,
//! normal, roughness-metal) that `tessera bake --gltf` writes, through a 64 MiB pool.
//!
//! `cargo run -p bevy_tessera --example gltf_scene [-- LEVEL.gltf]`: without a file,
//! the dungeon level that `assets/fetch-data.sh --dungeon` downloads. The atlas and
//! its manifest (which rectangle of the atlas each material uses) are baked once into
//! Tessera's cache folder. Fly with WASD, Q/E and the right mouse button; Shift is
//! faster. R switches between the streamed textures and the same texels fully resident
//! in Bevy's own `StandardMaterial`, to compare.

mod common;

use bevy::prelude::*;
use bevy_tessera::Codec;
use bevy_tessera::TesseraPlugin;
use bevy_tessera::VtConfig;
use bevy_tessera::scene::{
    BakedScene, camera_transform, resident_bytes, resident_materials, scene_mesh, streamed_materials, sun,
};
use bevy_tessera::{CameraPath, Shot};
use tessera::core::scene::catalog;

/// The level, its atlas and its manifest.
#[derive(Resource)]
struct Level(BakedScene);

/// Which copy of the level an entity belongs to.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
enum LevelCopy {
    /// Textures streamed through the plugin.
    Streamed,
    /// The same texels fully resident in `StandardMaterial`s.
    Resident,
}

fn main() -> AppExit {
    let progress = common::Percent::default();
    let level = match std::env::args_os().nth(1) {
        None => BakedScene::catalog("dungeon", Codec::Lz4, &progress),
        Some(path) => BakedScene::gltf(
            std::path::Path::new(&path),
            &catalog::cache_dir().join("scenes"),
            Codec::Lz4,
            &progress,
        ),
    };
    let level = match level {
        Ok(level) => level,
        Err(e) => {
            eprintln!("gltf_scene: {e}");
            return AppExit::error();
        }
    };
    App::new()
        .add_plugins(DefaultPlugins)
        .add_plugins(TesseraPlugin { config: VtConfig { pool_mib: 64, ..VtConfig::default() } })
        .insert_resource(Level(level))
        .add_systems(Startup, (setup, common::spawn_panel))
        .add_systems(Update, (common::fly, common::show_stats, common::unattended, switch))
        .run()
}

fn setup(
    mut commands: Commands,
    level: Res<Level>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut streamed: ResMut<Assets<bevy_tessera::TesseraMaterial>>,
    mut standard: ResMut<Assets<StandardMaterial>>,
    mut images: ResMut<Assets<Image>>,
) {
    let level = &level.0;
    let vt: Vec<_> = streamed_materials(&level.location(), &level.manifest, &level.scene)
        .into_iter()
        .map(|m| streamed.add(m))
        .collect();
    // The resident copy, hidden until R: the atlas' own texels in Bevy images.
    let resident = tessera::core::Atlas::open(&level.atlas)
        .and_then(|atlas| resident_materials(&atlas, &level.manifest, &level.scene, &mut images));
    let resident: Vec<_> = match resident {
        Ok(r) => {
            let mib = resident_bytes(&r, &images) as f64 / (1 << 20) as f64;
            info!("resident copy (R): {mib:.1} MiB of textures in StandardMaterials");
            r.into_iter().map(|m| standard.add(m)).collect()
        }
        Err(e) => {
            warn!("no resident copy to compare with: {e}");
            Vec::new()
        }
    };
    for part in &level.scene.meshes {
        let mesh = scene_mesh(&part.mesh);
        if let Some(m) = vt.get(part.material) {
            commands.spawn((
                Mesh3d(meshes.add(mesh.clone())),
                MeshMaterial3d(m.clone()),
                LevelCopy::Streamed,
            ));
        }
        if let Some(m) = resident.get(part.material) {
            // Bevy's normal maps need tangents.
            let mesh = mesh.with_generated_tangents().unwrap_or_else(|e| {
                warn!("{}: no tangents ({e}); its normal map is not applied", part.name);
                scene_mesh(&part.mesh)
            });
            commands.spawn((
                Mesh3d(meshes.add(mesh)),
                MeshMaterial3d(m.clone()),
                LevelCopy::Resident,
                Visibility::Hidden,
            ));
        }
    }
    commands.spawn(sun(&level.scene, true));
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
        transform,
        projection,
        common::Fly::new((size.length() * 0.05).max(1.0), &transform),
    ));
}

/// R shows the other copy of the level.
fn switch(keys: Res<ButtonInput<KeyCode>>, mut parts: Query<(&LevelCopy, &mut Visibility)>) {
    if !keys.just_pressed(KeyCode::KeyR) {
        return;
    }
    let mut shown = None;
    for (copy, mut visibility) in &mut parts {
        *visibility =
            if *visibility == Visibility::Hidden { Visibility::Inherited } else { Visibility::Hidden };
        if *visibility == Visibility::Inherited {
            shown = Some(*copy);
        }
    }
    match shown {
        Some(LevelCopy::Streamed) => info!("textures streamed through Tessera"),
        Some(LevelCopy::Resident) => info!("textures fully resident in Bevy's StandardMaterial"),
        None => {}
    }
}
