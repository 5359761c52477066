//! Runtime virtual textures in Bevy (issue 43): the Earth's relief as a terrain whose
//! texture (4 tiling materials blended by a splat map, the relief's normals and 120
//! road decals) is a 1048576x524288 virtual texture that nothing stores: Tessera's
//! `TerrainProducer` draws each 256-texel tile on Bevy's render device when the view
//! first asks for it, and Bevy's PBR lights the albedo and world-space normal it wrote.
//!
//! `cargo run -p bevy_tessera --example terrain [-- walk|fly|cut|overview]` (the
//! camera path, `walk` by default; the data: `assets/fetch-data.sh --dungeon --castle`).
//! P stops following the path (then fly with WASD, Q/E and the right mouse button,
//! Shift faster); Space paints a yellow marking on the ground ahead, whose tiles are
//! invalidated and produced again.

mod common;
#[path = "common/terrain.rs"]
mod terrain;

use std::sync::Arc;

use bevy::pbr::{DistanceFog, FogFalloff};
use bevy::prelude::*;
use bevy::render::renderer::RenderQueue;
use bevy_tessera::scene::camera_transform;
use bevy_tessera::{CameraPath, TesseraAtlas, TesseraMaterial, TesseraPlugin, VtConfig};
use tessera::core::scene::terrain::{TERRAIN_PATHS, TerrainScene};

/// The sky: the clear colour and the haze of Tessera's own terrain view.
const SKY: Color = Color::linear_rgb(0.55, 0.65, 0.8);

/// Path frames per second.
const PATH_FPS: f32 = 30.0;

/// The terrain's atlas asset, its textures on the GPU and the camera path.
#[derive(Resource)]
struct Terrain {
    atlas: Handle<TesseraAtlas>,
    gpu: terrain::SharedGpu,
    path: CameraPath,
    following: bool,
}

fn main() -> AppExit {
    let name = std::env::args().nth(1).unwrap_or_else(|| "walk".to_owned());
    let scene = match terrain::load() {
        Ok(scene) => Arc::new(scene),
        Err(e) => {
            eprintln!("terrain: {e}");
            return AppExit::error();
        }
    };
    let Some(path) = scene.camera_path(&name) else {
        eprintln!("terrain: no camera path '{name}' (one of {})", TERRAIN_PATHS.join(", "));
        return AppExit::error();
    };
    App::new()
        .add_plugins(DefaultPlugins)
        .add_plugins(TesseraPlugin {
            config: VtConfig { pool_mib: 128, ..VtConfig::default() },
            unattended: bevy_tessera::Unattended::from_env(),
        })
        .insert_resource(ClearColor(SKY))
        .insert_resource(PendingTerrain(Some((scene, path))))
        .add_systems(Startup, (setup, common::spawn_panel))
        .add_systems(Update, (follow_path, common::fly, common::show_stats, paint))
        .run()
}

/// The terrain until `setup` spawns it.
#[derive(Resource)]
struct PendingTerrain(Option<(Arc<TerrainScene>, CameraPath)>);

fn setup(
    mut commands: Commands,
    mut pending: ResMut<PendingTerrain>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut atlases: ResMut<Assets<TesseraAtlas>>,
    mut materials: ResMut<Assets<TesseraMaterial>>,
    mut exit: MessageWriter<AppExit>,
) {
    let Some((scene, path)) = pending.0.take() else { return };
    let gpu = terrain::SharedGpu::default();
    let atlas = match terrain::atlas(scene.clone(), gpu.clone()) {
        Ok(atlas) => atlases.add(atlas),
        Err(e) => {
            error!("terrain: its produced atlas: {e}");
            exit.write(AppExit::error());
            return;
        }
    };
    commands.spawn((
        Mesh3d(meshes.add(terrain::mesh(&scene))),
        MeshMaterial3d(materials.add(terrain::material(atlas.clone(), false))),
    ));
    // The sun of Tessera's terrain view (towards 0.5, 0.8, 0.35), and the sky's light.
    commands.spawn((
        DirectionalLight { illuminance: 8_000.0, ..default() },
        Transform::default().looking_to(-Vec3::new(0.5, 0.8, 0.35), Vec3::Y),
    ));
    commands.insert_resource(GlobalAmbientLight { color: SKY, brightness: 600.0, ..default() });
    let (transform, projection) = camera_transform(&path.camera_at(0));
    commands.spawn((
        Camera3d::default(),
        transform,
        projection,
        // The haze of Tessera's terrain view: 1 - exp(-0.004 distance) towards the sky.
        DistanceFog { color: SKY, falloff: FogFalloff::Exponential { density: 0.004 }, ..default() },
        common::Fly::new(2.0, &transform),
    ));
    commands.insert_resource(Terrain { atlas, gpu, path, following: true });
}

/// Moves the camera along the path (looping), until P hands it to the fly controls.
fn follow_path(
    time: Res<Time>,
    keys: Res<ButtonInput<KeyCode>>,
    terrain: Option<ResMut<Terrain>>,
    mut cameras: Query<(&mut Transform, &mut common::Fly), With<Camera3d>>,
) {
    let Some(mut terrain) = terrain else { return };
    if keys.just_pressed(KeyCode::KeyP) {
        terrain.following = !terrain.following;
    }
    if !terrain.following {
        return;
    }
    let last = terrain.path.keyframes.last().map_or(0.0, |k| k.frame).max(1.0);
    let frame = (time.elapsed_secs() * PATH_FPS) % last;
    let (transform, _) = camera_transform(&terrain.path.camera_at(frame as u32));
    for (mut t, mut fly) in &mut cameras {
        *t = transform;
        *fly = common::Fly::new(fly.speed, &transform);
    }
}

/// Space: a yellow marking on the ground 3 units ahead of the camera; its rectangle of
/// the virtual texture is invalidated, so the tiles there are produced again.
fn paint(
    keys: Res<ButtonInput<KeyCode>>,
    terrain: Option<Res<Terrain>>,
    queue: Res<RenderQueue>,
    atlases: Res<Assets<TesseraAtlas>>,
    cameras: Query<&Transform, With<Camera3d>>,
) {
    let Some(terrain) = terrain else { return };
    if !keys.just_pressed(KeyCode::Space) {
        return;
    }
    let (Ok(camera), Some(atlas)) = (cameras.single(), atlases.get(&terrain.atlas)) else { return };
    let ahead = camera.translation + (*camera.forward()).with_y(0.0).normalize_or_zero() * 3.0;
    let decal = TerrainScene::marking_at(ahead.x, ahead.z, 0.6);
    let mut gpu = terrain.gpu.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu.as_mut() else {
        warn!("terrain: not drawn yet, no marking");
        return;
    };
    match gpu.add_decal(&queue, decal) {
        // The stack's layers share their tiles: layer 0 names them all.
        Ok(rect) => atlas.invalidate(0, rect),
        Err(e) => warn!("terrain: no marking: {e}"),
    }
}
