//! A 65536x65536 texture (the stress mosaic of real photographs, 4 GiB of RGBA8 at
//! mip 0, 21 GiB with its mips) on a plane, streamed through a 64 MiB VRAM pool.
//!
//! `cargo run -p bevy_tessera --example huge_plane [-- ATLAS]`: without an atlas, the
//! mosaic is baked once from the images `assets/fetch-data.sh` downloads (or, when they
//! are missing, a generated 16384x16384 texture) into Tessera's cache folder. Fly
//! with WASD, Q/E and the right mouse button; Shift is faster.

mod common;

use bevy::core_pipeline::prepass::DepthPrepass;
use bevy::prelude::*;
use bevy_tessera::Codec;
use bevy_tessera::VtConfig;
use bevy_tessera::{TesseraMaterial, TesseraPlugin, VirtualTexture};
use tessera::core::bake::source::data_dir;
use tessera::core::scene::catalog;

#[derive(Resource)]
struct AtlasPath(String);

fn main() -> AppExit {
    let atlas = match std::env::args().nth(1) {
        Some(a) => a,
        None => match prepare() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("huge_plane: {e}");
                return AppExit::error();
            }
        },
    };
    App::new()
        .add_plugins(DefaultPlugins)
        .add_plugins(TesseraPlugin {
            config: VtConfig { pool_mib: 64, ..VtConfig::default() },
            unattended: bevy_tessera::Unattended::from_env(),
        })
        .insert_resource(AtlasPath(atlas))
        .add_systems(Startup, (setup, common::spawn_panel))
        .add_systems(Update, (common::fly, common::show_stats))
        .run()
}

/// The stress mosaic's atlas, baked on first use (the generated texture when the
/// photographs are not there).
fn prepare() -> Result<String, Box<dyn std::error::Error>> {
    let data = data_dir();
    let cache = catalog::cache_dir();
    let progress = common::Percent::default();
    let missing = tessera::core::bake::mosaic::Mosaic::stress_files(&data).into_iter().find(|p| !p.is_file());
    let prepared = match missing {
        None => catalog::prepare("stress", &data, &cache, Codec::Lz4, false, &progress)?,
        Some(p) => {
            eprintln!(
                "{} is missing (assets/fetch-data.sh fetches it): a generated 16384x16384 texture instead",
                p.display()
            );
            catalog::prepare_builtin(&cache, (16384, 16384), false, &progress)?
        }
    };
    Ok(prepared.atlas.to_string_lossy().into_owned())
}

fn setup(
    mut commands: Commands,
    atlas: Res<AtlasPath>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<TesseraMaterial>>,
) {
    commands.spawn((
        Mesh3d(meshes.add(Plane3d::default().mesh().size(100.0, 100.0))),
        MeshMaterial3d(materials.add(VirtualTexture::material(atlas.0.clone()))),
    ));
    commands.spawn((
        DirectionalLight { illuminance: 10_000.0, ..default() },
        Transform::from_xyz(3.0, 10.0, 4.0).looking_at(Vec3::ZERO, Vec3::Y),
    ));
    let transform = Transform::from_xyz(0.0, 4.0, 30.0).looking_at(Vec3::new(0.0, 0.0, 10.0), Vec3::Y);
    commands.spawn((Camera3d::default(), DepthPrepass, transform, common::Fly::new(8.0, &transform)));
}
