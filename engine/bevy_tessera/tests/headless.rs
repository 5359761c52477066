//! The plugin in a headless Bevy app on the test machine's GPU (lavapipe in CI): a
//! plane streamed through `TesseraMaterial` converges to Bevy's own `StandardMaterial`
//! with the whole texture resident, and an atlas that cannot be opened leaves its
//! mesh in the material's colour; the `gltf_scene` level converges to the same level
//! drawn by `StandardMaterial`; a user's level with uv-less meshes and its own camera,
//! loaded by Bevy's glTF loader, streams what it shows resident, and bakes again when
//! its files change; the terrain of issue 43 is produced on Bevy's device, tile by tile,
//! and drawn again where a decal is added.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bevy::camera::RenderTarget;
use bevy::camera::visibility::RenderLayers;
use bevy::core_pipeline::prepass::DepthPrepass;
use bevy::core_pipeline::tonemapping::Tonemapping;
use bevy::gltf::GltfAssetLabel;
use bevy::prelude::*;
use bevy::render::gpu_readback::{Readback, ReadbackComplete};
use bevy::render::render_resource::{TextureFormat, TextureUsages};
use bevy::world_serialization::WorldAssetRoot;
use bevy_tessera::level::{LevelState, StreamedLevel};
use bevy_tessera::scene::{
    BakedScene, camera_transform, resident_materials, scene_mesh, streamed_materials, sun,
};
use bevy_tessera::{FullyResident, TesseraMaterial, TesseraPlugin, TesseraStats, VirtualTexture};
use tessera::VtConfig;
use tessera::core::bake::source::ImageSource;
use tessera::core::bake::{BakeInput, BakeOptions, bake};
use tessera::core::format::codec::Codec;
use tessera::core::progress::NoProgress;
use tessera::core::scene::camera::{Camera as SceneCamera, CameraPath, Shot};

#[path = "../examples/common/terrain.rs"]
mod terrain;

/// The render target's side in pixels.
const SIZE: u32 = 256;
/// The texture's side in texels: the camera shows a quarter of the plane's width, so
/// one texel per pixel (mip 0, which only streaming brings).
const TEXTURE: u32 = 1024;

/// A texture with detail at every scale: rings, a checker of 16-texel cells and a
/// colour ramp, so a blurry mip or a misplaced tile shows.
fn texture() -> Vec<u8> {
    let mut rgba = Vec::with_capacity((TEXTURE * TEXTURE * 4) as usize);
    for y in 0..TEXTURE {
        for x in 0..TEXTURE {
            let (fx, fy) = (x as f32 / TEXTURE as f32, y as f32 / TEXTURE as f32);
            let r = ((fx - 0.5).hypot(fy - 0.5) * 60.0).sin() * 0.5 + 0.5;
            let check = ((x / 16) + (y / 16)) % 2;
            rgba.extend_from_slice(&[
                (r * 255.0) as u8,
                (fx * 200.0) as u8 + 40 * check as u8,
                (fy * 255.0) as u8,
                255,
            ]);
        }
    }
    rgba
}

fn bake_texture(dir: &Path) -> PathBuf {
    let atlas = dir.join("texture.tsa");
    let input = BakeInput::new("texture", ImageSource::from_rgba(TEXTURE, TEXTURE, texture()));
    bake(vec![input], &atlas, &BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() }, &NoProgress)
        .unwrap();
    atlas
}

/// One frame read back: the render layer of its camera and its RGBA8 pixels.
type Frame = (usize, Vec<u8>);

/// Frames read back by the cameras, in order.
#[derive(Resource, Clone, Default)]
struct Captured(Arc<Mutex<Vec<Frame>>>);

/// An app with the plugin and nothing on screen yet; `finish` and `cleanup` done.
fn app() -> App {
    app_with(VtConfig { pool_mib: 16, ..VtConfig::default() })
}

/// [`app`] with the plugin's configuration `config`.
fn app_with(config: VtConfig) -> App {
    app_in(config, None)
}

/// [`app_with`], its asset server reading `assets` (default: `assets/`).
fn app_in(config: VtConfig, assets: Option<&Path>) -> App {
    app_of(TesseraPlugin { config, unattended: None }, assets)
}

/// An app with `plugin`, its asset server reading `assets` (default: `assets/`).
fn app_of(plugin: TesseraPlugin, assets: Option<&Path>) -> App {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join("tessera-xdg");
        let _ = std::fs::create_dir_all(&dir);
        // SAFETY: set before Bevy starts any thread of this test.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
    let mut app = App::new();
    let mut plugins = DefaultPlugins.build().disable::<bevy::log::LogPlugin>();
    if let Some(dir) = assets {
        plugins = plugins.set(AssetPlugin { file_path: dir.to_string_lossy().into_owned(), ..default() });
    }
    app.add_plugins(plugins)
        .add_plugins(plugin)
        .insert_resource(ClearColor(Color::BLACK))
        .init_resource::<Captured>();
    app.finish();
    app.cleanup();
    app
}

/// A camera looking straight down at the plane's centre, showing a quarter of its
/// width, into an image of its own, on render layer `layer`.
fn camera(world: &mut World, layer: usize) -> Handle<Image> {
    let mut image = Image::new_target_texture(SIZE, SIZE, TextureFormat::Rgba8UnormSrgb, None);
    image.texture_descriptor.usage |= TextureUsages::COPY_SRC;
    let handle = world.resource_mut::<Assets<Image>>().add(image);
    world.spawn((
        Camera3d::default(),
        RenderTarget::Image(handle.clone().into()),
        Tonemapping::None,
        Projection::Orthographic(OrthographicProjection {
            scaling_mode: bevy::camera::ScalingMode::Fixed { width: 1.0, height: 1.0 },
            ..OrthographicProjection::default_3d()
        }),
        Transform::from_xyz(0.0, 5.0, 0.0).looking_at(Vec3::ZERO, Vec3::NEG_Z),
        RenderLayers::layer(layer),
    ));
    handle
}

fn light(world: &mut World) {
    world.spawn((
        DirectionalLight { illuminance: 8000.0, shadow_maps_enabled: false, ..default() },
        Transform::from_xyz(1.0, 3.0, 2.0).looking_at(Vec3::ZERO, Vec3::Y),
        RenderLayers::from_layers(&[1, 2]),
    ));
}

/// A 4x4 plane at the origin.
fn plane(world: &mut World) -> Handle<Mesh> {
    world.resource_mut::<Assets<Mesh>>().add(Plane3d::default().mesh().size(4.0, 4.0))
}

/// The lit plane twice: streamed from `atlas` on render layer 1, and drawn by Bevy's
/// `StandardMaterial` with the `TEXTURE`² RGBA8 image `reference` on layer 2; returns
/// the two cameras' images.
fn plane_pair(world: &mut World, atlas: &Path, reference: Vec<u8>) -> (Handle<Image>, Handle<Image>) {
    plane_pair_of(world, VirtualTexture::material(atlas.to_string_lossy()), reference)
}

/// [`plane_pair`] with the streamed plane's material `streamed`.
fn plane_pair_of(
    world: &mut World,
    streamed: TesseraMaterial,
    reference: Vec<u8>,
) -> (Handle<Image>, Handle<Image>) {
    let streamed_image = camera(world, 1);
    let reference_image = camera(world, 2);
    light(world);
    let mesh = plane(world);
    let vt = world.resource_mut::<Assets<TesseraMaterial>>().add(streamed);
    world.spawn((Mesh3d(mesh.clone()), MeshMaterial3d(vt), RenderLayers::layer(1)));
    let standard = plane_reference(world, reference);
    world.spawn((Mesh3d(mesh), MeshMaterial3d(standard), RenderLayers::layer(2)));
    (streamed_image, reference_image)
}

/// Bevy's own `StandardMaterial` with the `TEXTURE`² RGBA8 image `rgba` (sRGB,
/// trilinear), the reference a streamed plane is compared with.
fn plane_reference(world: &mut World, rgba: Vec<u8>) -> Handle<StandardMaterial> {
    let mut reference = Image::new(
        bevy::render::render_resource::Extent3d { width: TEXTURE, height: TEXTURE, depth_or_array_layers: 1 },
        bevy::render::render_resource::TextureDimension::D2,
        rgba,
        TextureFormat::Rgba8UnormSrgb,
        bevy::asset::RenderAssetUsages::RENDER_WORLD,
    );
    reference.sampler = bevy::image::ImageSampler::linear();
    let reference = world.resource_mut::<Assets<Image>>().add(reference);
    world.resource_mut::<Assets<StandardMaterial>>().add(StandardMaterial {
        base_color_texture: Some(reference),
        perceptual_roughness: 1.0,
        ..default()
    })
}

/// Reads `image` back (after the next frames) into [`Captured`] under `layer`.
fn read_back(world: &mut World, image: Handle<Image>, layer: usize) {
    let captured = world.resource::<Captured>().clone();
    world.spawn(Readback::texture(image)).observe(move |event: On<ReadbackComplete>| {
        captured.0.lock().unwrap().push((layer, event.data.clone()));
    });
}

/// The last frame read back from `layer`.
fn frame_of(app: &App, layer: usize) -> Option<Vec<u8>> {
    let frames = app.world().resource::<Captured>().0.lock().unwrap();
    frames.iter().rev().find(|(l, _)| *l == layer).map(|(_, f)| f.clone())
}

/// The first frame read back from `layer` that shows anything (pipelines compile in
/// the background: the first frames are the clear colour only).
fn first_drawn(app: &App, layer: usize) -> Option<Vec<u8>> {
    let frames = app.world().resource::<Captured>().0.lock().unwrap();
    frames
        .iter()
        .find(|(l, f)| *l == layer && f.chunks(4).any(|p| p[..3] != [0, 0, 0]))
        .map(|(_, f)| f.clone())
}

/// Compares `actual` with `tests/golden/{name}.png` (PSNR at least `min_db`), writing
/// actual, expected and diff PNGs when it differs; `TESSERA_UPDATE_GOLDEN=1` rewrites
/// the golden image instead.
fn golden(name: &str, actual: &[u8], min_db: f64) {
    golden_sized(name, actual, (SIZE, SIZE), min_db);
}

/// [`golden`] for a frame of `size` pixels.
fn golden_sized(name: &str, actual: &[u8], size: (u32, u32), min_db: f64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.png"));
    if std::env::var_os("TESSERA_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::RgbaImage::from_raw(size.0, size.1, actual.to_vec()).unwrap().save(&path).unwrap();
        return;
    }
    let expected = image::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (TESSERA_UPDATE_GOLDEN=1 writes it)", path.display()))
        .into_rgba8()
        .into_raw();
    let db = psnr(actual, &expected);
    if db < min_db {
        let dir = write_failure_sized(name, actual, &expected, size);
        panic!("{name}: PSNR {db:.1} dB < {min_db} against {}; PNGs in {}", path.display(), dir.display());
    }
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    tessera::core::compare::compare(a, b).psnr_db
}

fn write_failure(name: &str, actual: &[u8], expected: &[u8]) -> PathBuf {
    write_failure_sized(name, actual, expected, (SIZE, SIZE))
}

/// Writes actual, expected and diff PNGs of frames of `size` pixels; returns their folder.
fn write_failure_sized(name: &str, actual: &[u8], expected: &[u8], size: (u32, u32)) -> PathBuf {
    let dir = std::env::temp_dir().join("bevy_tessera-failures").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let save = |file: &str, px: Vec<u8>| {
        image::RgbaImage::from_raw(size.0, size.1, px).unwrap().save(dir.join(file)).unwrap()
    };
    save("actual.png", actual.to_vec());
    save("expected.png", expected.to_vec());
    let diff = actual
        .chunks(4)
        .zip(expected.chunks(4))
        .flat_map(|(a, e)| {
            let d = |i: usize| ((a[i] as i32 - e[i] as i32).unsigned_abs() * 4).min(255) as u8;
            [d(0), d(1), d(2), 255]
        })
        .collect();
    save("diff.png", diff);
    dir
}

/// The streamed plane converges to the same plane drawn by `StandardMaterial` with the
/// texture fully resident (PSNR at least 35 dB), after a first frame that is blurry
/// (only the coarse mips are resident), and `FullyResident` and the statistics say so.
#[test]
fn streamed_plane_converges_to_the_standard_material() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_texture(dir.path());
    let mut app = app();
    let (streamed_image, reference_image) = plane_pair(app.world_mut(), &atlas, texture());

    // Every frame is read back from the start: the first one that shows the plane
    // has only the coarse mips (feedback comes from drawing).
    read_back(app.world_mut(), streamed_image, 1);
    read_back(app.world_mut(), reference_image, 2);
    let mut resident_at = None;
    let mut messages = Vec::new();
    for frame in 0..200 {
        app.update();
        let world = app.world_mut();
        messages.extend(world.resource_mut::<Messages<FullyResident>>().drain());
        let stats = app.world().resource::<TesseraStats>();
        assert!(stats.failed.is_empty(), "{:?}", stats.failed);
        let fraction = stats.atlases.values().next().and_then(|s| s.resident_fraction);
        if fraction == Some(1.0) && resident_at.is_none() {
            resident_at = Some(frame);
        }
        if resident_at.is_some_and(|r| frame > r + 4) {
            break;
        }
    }
    let resident_at = resident_at.expect("the plane never became fully resident in 200 frames");
    let stats = app.world().resource::<TesseraStats>().clone();
    let atlas_stats = stats.atlases.values().next().unwrap();
    assert!(atlas_stats.vram_slots.0 > 8, "few tiles resident: {:?}", atlas_stats.vram_slots);
    assert_eq!(messages.len(), 1, "one FullyResident: {messages:?}");
    // Two more frames for the last readbacks.
    for _ in 0..3 {
        app.update();
    }
    let streamed = frame_of(&app, 1).expect("no streamed frame read back");
    let expected = frame_of(&app, 2).expect("no reference frame read back");
    assert_eq!(streamed.len(), (SIZE * SIZE * 4) as usize);
    let db = psnr(&streamed, &expected);
    if db < 35.0 {
        let dir = write_failure("converged", &streamed, &expected);
        panic!(
            "converged frame {resident_at}: PSNR {db:.1} dB < 35 against StandardMaterial; PNGs in {}",
            dir.display()
        );
    }
    // Not vacuous: the view is textured, and the first frame was blurrier.
    let distinct: std::collections::HashSet<&[u8]> = streamed.chunks(4).collect();
    assert!(distinct.len() > 500, "a nearly uniform frame: {} colours", distinct.len());
    let first = first_drawn(&app, 1).expect("the plane was never drawn");
    let first_db = psnr(&first, &expected);
    eprintln!(
        "fully resident at frame {resident_at}: PSNR {db:.1} dB against StandardMaterial (first drawn frame {first_db:.1} dB)"
    );
    if std::env::var_os("BEVY_TESSERA_KEEP").is_some() {
        eprintln!("frames kept in {}", write_failure("kept", &streamed, &expected).display());
        write_failure("kept-first", &first, &expected);
    }
    assert!(first_db < db - 3.0, "the first frame was already sharp");
    golden("plane-first", &first, 35.0);
    golden("plane-converged", &streamed, 40.0);
}

/// Hot reload: the streamed plane's atlas file replaced by a new bake (written beside
/// and renamed over it, as `tessera bake` does) is opened again, and the plane
/// converges to the new texture (its channels swapped) drawn by `StandardMaterial`.
#[test]
fn a_replaced_atlas_file_is_opened_again() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_texture(dir.path());
    let swapped: Vec<u8> = texture().chunks(4).flat_map(|p| [p[2], p[0], p[1], p[3]]).collect();
    let mut app = app();
    let (streamed_image, reference_image) = plane_pair(app.world_mut(), &atlas, swapped.clone());
    read_back(app.world_mut(), streamed_image, 1);
    read_back(app.world_mut(), reference_image, 2);
    let settled = |app: &App| {
        let stats = app.world().resource::<TesseraStats>();
        stats
            .atlases
            .values()
            .next()
            .is_some_and(|s| s.resident_fraction == Some(1.0) && s.stream.uploads == 0)
    };
    for _ in 0..200 {
        app.update();
        if settled(&app) {
            break;
        }
    }
    assert!(settled(&app), "the first atlas never settled");
    for _ in 0..3 {
        app.update();
    }
    let before = frame_of(&app, 1).expect("no streamed frame read back");
    // The new bake, renamed over the old file.
    let next = dir.path().join("next");
    std::fs::create_dir_all(&next).unwrap();
    let input = BakeInput::new("texture", ImageSource::from_rgba(TEXTURE, TEXTURE, swapped));
    let new_atlas = next.join("texture.tsa");
    bake(vec![input], &new_atlas, &BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() }, &NoProgress)
        .unwrap();
    std::fs::rename(&new_atlas, &atlas).unwrap();
    // The plugin looks for replaced files every 30 frames.
    for _ in 0..60 {
        app.update();
    }
    let reopened: Vec<u64> = app.world().resource::<TesseraStats>().reopened.values().copied().collect();
    assert_eq!(reopened, [1], "opened again once");
    let mut quiet = 0;
    for _ in 0..300 {
        app.update();
        quiet = if settled(&app) { quiet + 1 } else { 0 };
        if quiet >= 8 {
            break;
        }
    }
    assert!(quiet >= 8, "the replaced atlas never settled");
    for _ in 0..3 {
        app.update();
    }
    let stats = app.world().resource::<TesseraStats>();
    assert!(stats.failed.is_empty(), "{:?}", stats.failed);
    let after = frame_of(&app, 1).expect("no streamed frame read back");
    let expected = frame_of(&app, 2).expect("no reference frame read back");
    let (db, before_db) = (psnr(&after, &expected), psnr(&before, &expected));
    eprintln!("replaced atlas: {db:.1} dB against the new texture (the old one {before_db:.1} dB)");
    if db < 35.0 || before_db > 25.0 {
        let dir = write_failure("reloaded", &after, &expected);
        panic!(
            "after the reload {db:.1} dB (want >= 35), before {before_db:.1} dB (want < 25); PNGs in {}",
            dir.display()
        );
    }
}

/// Whether every one of `count` atlases is fully resident with nothing uploaded.
fn all_settled(app: &App, count: usize) -> bool {
    let stats = app.world().resource::<TesseraStats>();
    stats.atlases.len() == count
        && stats.atlases.values().all(|s| s.resident_fraction == Some(1.0) && s.stream.uploads == 0)
}

/// Updates `app` until its `count` atlases stay settled for 8 frames (at most
/// `frames`), then 3 more frames for the last readbacks.
fn settle(app: &mut App, count: usize, frames: u32) {
    let mut quiet = 0;
    for _ in 0..frames {
        app.update();
        quiet = if all_settled(app, count) { quiet + 1 } else { 0 };
        if quiet >= 8 {
            break;
        }
    }
    let stats = app.world().resource::<TesseraStats>();
    assert!(
        quiet >= 8,
        "the atlases never settled: {:?} failed, {} streaming",
        stats.failed,
        stats.atlases.len()
    );
    for _ in 0..3 {
        app.update();
    }
}

/// An atlas loaded by Bevy's `AssetServer` (`asset_server.load("texture.tsa")` in an
/// asset folder of its own) draws the same plane as the same file named by its path:
/// PSNR at least 40 dB between the two, both converged; the statistics name it by its
/// asset path.
#[test]
fn an_atlas_asset_renders_like_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_texture(dir.path());
    let mut app = app_in(VtConfig { pool_mib: 16, ..VtConfig::default() }, Some(dir.path()));
    let handle = app.world().resource::<AssetServer>().load("texture.tsa");
    let world = app.world_mut();
    let asset_image = camera(world, 1);
    let path_image = camera(world, 2);
    light(world);
    let mesh = plane(world);
    let mut materials = world.resource_mut::<Assets<TesseraMaterial>>();
    let (by_asset, by_path) = (
        materials.add(VirtualTexture::material(handle)),
        materials.add(VirtualTexture::material(atlas.to_string_lossy())),
    );
    world.spawn((Mesh3d(mesh.clone()), MeshMaterial3d(by_asset), RenderLayers::layer(1)));
    world.spawn((Mesh3d(mesh), MeshMaterial3d(by_path), RenderLayers::layer(2)));
    read_back(world, asset_image, 1);
    read_back(world, path_image, 2);
    settle(&mut app, 2, 200);
    let stats = app.world().resource::<TesseraStats>();
    assert!(stats.failed.is_empty(), "{:?}", stats.failed);
    assert!(stats.atlases.contains_key("texture.tsa"), "{:?}", stats.atlases.keys());
    let by_asset = frame_of(&app, 1).expect("no frame of the asset's plane");
    let by_path = frame_of(&app, 2).expect("no frame of the path's plane");
    let distinct: std::collections::HashSet<&[u8]> = by_asset.chunks(4).collect();
    assert!(distinct.len() > 500, "a nearly uniform frame: {} colours", distinct.len());
    let db = psnr(&by_asset, &by_path);
    if db < 40.0 {
        let dir = write_failure("atlas-asset", &by_asset, &by_path);
        panic!("the asset's plane: PSNR {db:.1} dB < 40 against the path's; PNGs in {}", dir.display());
    }
}

/// A `.tsa` asset that is not an atlas fails to load with an error naming the file
/// (Bevy's load state), without a panic; its mesh keeps the material's colour and the
/// statistics list it by its asset path.
#[test]
fn an_atlas_asset_that_is_not_an_atlas_fails_to_load_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("not-an-atlas.tsa"), b"TSA1 only a few bytes, no atlas").unwrap();
    let mut app = app_in(VtConfig { pool_mib: 16, ..VtConfig::default() }, Some(dir.path()));
    let handle: Handle<bevy_tessera::TesseraAtlas> =
        app.world().resource::<AssetServer>().load("not-an-atlas.tsa");
    let world = app.world_mut();
    let image = camera(world, 1);
    light(world);
    let mesh = plane(world);
    let mut m = VirtualTexture::material(handle.clone());
    m.base.base_color = Color::srgb(1.0, 0.0, 0.0);
    m.base.unlit = true;
    let m = world.resource_mut::<Assets<TesseraMaterial>>().add(m);
    world.spawn((Mesh3d(mesh), MeshMaterial3d(m), RenderLayers::layer(1)));
    read_back(world, image, 1);
    for _ in 0..20 {
        app.update();
        if !app.world().resource::<TesseraStats>().failed.is_empty() {
            break;
        }
    }
    for _ in 0..3 {
        app.update();
    }
    let state = app.world().resource::<AssetServer>().load_state(&handle);
    let bevy::asset::LoadState::Failed(error) = state else { panic!("not failed: {state:?}") };
    let error = error.to_string();
    assert!(error.contains("not-an-atlas.tsa") && error.contains("not a Tessera atlas"), "{error}");
    let stats = app.world().resource::<TesseraStats>();
    let why = stats.failed.get("not-an-atlas.tsa").unwrap_or_else(|| panic!("{:?}", stats.failed));
    assert!(why.contains("not-an-atlas.tsa"), "{why}");
    let frame = frame_of(&app, 1).expect("no frame read back");
    let centre = &frame[((SIZE / 2 * SIZE + SIZE / 2) * 4) as usize..][..4];
    assert!(centre[0] > 200 && centre[1] < 40 && centre[2] < 40, "not the material's red: {centre:?}");
}

/// Hot reload of an atlas asset: its file replaced by a new bake and the asset reloaded
/// (`AssetServer::reload`, what Bevy's `file_watcher` feature does on the change, which
/// the tests leave off: it would rebuild Bevy multi-threaded) opens the atlas again
/// once, and the plane converges to the new texture drawn by `StandardMaterial`.
#[test]
fn a_reloaded_atlas_asset_is_opened_again() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_texture(dir.path());
    let swapped: Vec<u8> = texture().chunks(4).flat_map(|p| [p[2], p[0], p[1], p[3]]).collect();
    let mut app = app_in(VtConfig { pool_mib: 16, ..VtConfig::default() }, Some(dir.path()));
    let handle = app.world().resource::<AssetServer>().load("texture.tsa");
    let (streamed_image, reference_image) =
        plane_pair_of(app.world_mut(), VirtualTexture::material(handle), swapped.clone());
    read_back(app.world_mut(), streamed_image, 1);
    read_back(app.world_mut(), reference_image, 2);
    settle(&mut app, 1, 200);
    let before = frame_of(&app, 1).expect("no streamed frame read back");
    let next = dir.path().join("next");
    std::fs::create_dir_all(&next).unwrap();
    let input = BakeInput::new("texture", ImageSource::from_rgba(TEXTURE, TEXTURE, swapped));
    let new_atlas = next.join("texture.tsa");
    bake(vec![input], &new_atlas, &BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() }, &NoProgress)
        .unwrap();
    std::fs::rename(&new_atlas, &atlas).unwrap();
    app.world().resource::<AssetServer>().reload("texture.tsa");
    // Past a polling check of replaced files too (every 30 frames), which leaves
    // assets to Bevy: opened again once.
    for _ in 0..40 {
        app.update();
    }
    let reopened = app.world().resource::<TesseraStats>().reopened.clone();
    assert_eq!(reopened.get("texture.tsa"), Some(&1), "{reopened:?}");
    assert_eq!(reopened.len(), 1, "{reopened:?}");
    settle(&mut app, 1, 300);
    let after = frame_of(&app, 1).expect("no streamed frame read back");
    let expected = frame_of(&app, 2).expect("no reference frame read back");
    let (db, before_db) = (psnr(&after, &expected), psnr(&before, &expected));
    eprintln!("reloaded atlas asset: {db:.1} dB against the new texture (the old one {before_db:.1} dB)");
    if db < 35.0 || before_db > 25.0 {
        let dir = write_failure("asset-reloaded", &after, &expected);
        panic!(
            "after the reload {db:.1} dB (want >= 35), before {before_db:.1} dB (want < 25); PNGs in {}",
            dir.display()
        );
    }
}

/// An atlas that does not exist, and one whose bytes are not an atlas: the app keeps
/// running, the meshes show their material colour (red), and the statistics name both.
#[test]
fn a_missing_or_corrupted_atlas_leaves_the_material_colour() {
    let dir = tempfile::tempdir().unwrap();
    let corrupted = dir.path().join("corrupted.tsa");
    std::fs::write(&corrupted, b"TSA1 this is not an atlas at all, only bytes").unwrap();
    let missing = dir.path().join("missing.tsa");
    let mut app = app();
    let world = app.world_mut();
    let image = camera(world, 1);
    light(world);
    let mesh = plane(world);
    // Two quads 0.4 wide at x = -0.25 and 0.25, in a view 1 wide.
    for (atlas, x) in [(&missing, -0.25), (&corrupted, 0.25)] {
        let mut m = VirtualTexture::material(atlas.to_string_lossy());
        m.base.base_color = Color::srgb(1.0, 0.0, 0.0);
        m.base.unlit = true;
        let m = world.resource_mut::<Assets<TesseraMaterial>>().add(m);
        world.spawn((
            Mesh3d(mesh.clone()),
            MeshMaterial3d(m),
            Transform::from_xyz(x, 0.0, 0.0).with_scale(Vec3::new(0.1, 1.0, 0.1)),
            RenderLayers::layer(1),
        ));
    }
    for _ in 0..3 {
        app.update();
    }
    read_back(app.world_mut(), image, 1);
    for _ in 0..5 {
        app.update();
    }
    let stats = app.world().resource::<TesseraStats>();
    assert_eq!(stats.failed.len(), 2, "{:?}", stats.failed);
    let why = &stats.failed[&missing.to_string_lossy().to_string()];
    assert!(why.contains("missing.tsa"), "{why}");
    assert!(stats.failed.contains_key(&corrupted.to_string_lossy().to_string()));
    let frame = frame_of(&app, 1).expect("no frame read back");
    let pixel = |x: u32, y: u32| &frame[((y * SIZE + x) * 4) as usize..][..4];
    let is_red = |p: &[u8]| p[0] > 200 && p[1] < 40 && p[2] < 40;
    // The quads' centres are at a quarter and three quarters of the width.
    let (left, right, middle) =
        (pixel(SIZE / 4, SIZE / 2), pixel(3 * SIZE / 4, SIZE / 2), pixel(SIZE / 2, SIZE / 2));
    assert!(is_red(left) && is_red(right), "the quads are not red: {left:?} {right:?}");
    assert_eq!(&middle[..3], &[0, 0, 0], "between the quads: the clear colour");
}

/// A plugin shader that does not compile is named: the material shader replaced by one
/// that reads a field its input lacks (as the shader without a uv guard did on meshes
/// without uvs) leaves one entry in `TesseraStats::shader_errors` that names the file,
/// the pipeline's features and naga's message; wgpu's own names no shader.
#[test]
fn a_shader_that_does_not_compile_is_named_by_its_file() {
    let mut app = app();
    let world = app.world_mut();
    camera(world, 1);
    light(world);
    let mesh = plane(world);
    let m = world.resource_mut::<Assets<TesseraMaterial>>().add(VirtualTexture::material("missing.tsa"));
    world.spawn((Mesh3d(mesh), MeshMaterial3d(m), RenderLayers::layer(1)));
    let broken = "import bevy_pbr::render::forward_io::VertexOutput;\n\
        @fragment fn fragment(in: VertexOutput) -> @location(0) vec4<f32> {\n\
        return vec4<f32>(in.no_such_field, 0.0, 0.0, 1.0);\n}\n";
    let shader = bevy::shader::Shader::from_wesl(broken, "embedded://bevy_tessera/material.wesl");
    let _ = world
        .resource_mut::<Assets<bevy::shader::Shader>>()
        .insert(bevy_tessera::MATERIAL_SHADER.id(), shader);
    for _ in 0..60 {
        app.update();
        if !app.world().resource::<TesseraStats>().shader_errors.is_empty() {
            break;
        }
    }
    for _ in 0..5 {
        app.update();
    }
    let errors = &app.world().resource::<TesseraStats>().shader_errors;
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = &errors[0];
    for part in
        ["shader embedded://bevy_tessera/material.wesl", "features ", "MESH_PIPELINE", "no_such_field"]
    {
        assert!(e.contains(part), "no '{part}' in: {e}");
    }
}

/// The dungeon view's frame size: 16:9.
const SCENE_SIZE: (u32, u32) = (320, 180);

/// A perspective camera at `start`, into an image of its own, on render layer `layer`;
/// with a depth prepass when `prepass` (streamed materials then record their feedback
/// there and their main pass has no side effect).
fn scene_camera(world: &mut World, start: &SceneCamera, layer: usize, prepass: bool) -> Handle<Image> {
    let mut image =
        Image::new_target_texture(SCENE_SIZE.0, SCENE_SIZE.1, TextureFormat::Rgba8UnormSrgb, None);
    image.texture_descriptor.usage |= TextureUsages::COPY_SRC;
    let handle = world.resource_mut::<Assets<Image>>().add(image);
    let (transform, projection) = camera_transform(start);
    let mut camera = world.spawn((
        Camera3d::default(),
        RenderTarget::Image(handle.clone().into()),
        Tonemapping::None,
        transform,
        projection,
        RenderLayers::layer(layer),
    ));
    if prepass {
        camera.insert(DepthPrepass);
    }
    handle
}

/// The `gltf_scene` example's view of the real dungeon level (CC0, fetched by
/// `assets/fetch-data.sh --dungeon`; `scripts/test` sets `TESSERA_DATA`), streamed from
/// its stacked atlas (albedo, normal and roughness-metal, LZ4), converges to the same
/// level drawn by Bevy's own `StandardMaterial` (normal maps on generated tangents)
/// with the atlas' texels fully resident: PSNR at least 35 dB, golden images of the
/// first drawn frame (visibly blurrier) and the converged one.
#[test]
fn gltf_scene_converges_to_the_standard_material() {
    let level = BakedScene::catalog("dungeon", Codec::Lz4, &NoProgress)
        .unwrap_or_else(|e| panic!("the dungeon level: {e}"));
    // Tessera's walk start (what the `gltf_scene` example opens on).
    let start = CameraPath::for_scene(None, Some(&level.scene), Shot::Tour).unwrap().camera_at(0);
    let c = converge(&level, &start, "dungeon", false);
    assert!(c.tiles > 20, "few tiles resident: {}", c.tiles);
    let distinct: std::collections::HashSet<&[u8]> = c.expected.chunks(4).collect();
    assert!(distinct.len() > 2000, "a nearly uniform reference: {} colours", distinct.len());
    let (db, first_db) = (psnr(&c.streamed, &c.expected), psnr(&c.first, &c.expected));
    if db < 35.0 || std::env::var_os("BEVY_TESSERA_KEEP").is_some() {
        let dir = write_failure_sized("dungeon-converged", &c.streamed, &c.expected, SCENE_SIZE);
        write_failure_sized("dungeon-first", &c.first, &c.expected, SCENE_SIZE);
        assert!(db >= 35.0, "PSNR {db:.1} dB < 35 against StandardMaterial; PNGs in {}", dir.display());
    }
    assert!(first_db < db - 3.0, "the first frame was already sharp ({first_db:.1} dB)");
    golden_sized("dungeon-first", &c.first, SCENE_SIZE, 40.0);
    golden_sized("dungeon-converged", &c.streamed, SCENE_SIZE, 40.0);
}

/// With a `DepthPrepass` on the camera, the streamed materials record their feedback in
/// the prepass and their main pass has none (so the driver culls hidden fragments before
/// shading them): the dungeon view still streams in and converges to the same picture,
/// at least 35 dB against `StandardMaterial` and 40 dB against the converged golden of
/// the test above, with as many tiles resident as without the prepass (20 of 47 when the
/// prepass records nothing: the coarsest mips alone).
#[test]
fn gltf_scene_with_a_depth_prepass_records_feedback_in_the_prepass() {
    let level = BakedScene::catalog("dungeon", Codec::Lz4, &NoProgress)
        .unwrap_or_else(|e| panic!("the dungeon level: {e}"));
    let start = CameraPath::for_scene(None, Some(&level.scene), Shot::Tour).unwrap().camera_at(0);
    let c = converge(&level, &start, "dungeon (depth prepass)", true);
    let without = converge(&level, &start, "dungeon (no prepass)", false);
    assert_eq!(c.tiles, without.tiles, "the prepass' feedback asked for other tiles than the main pass'");
    let (db, first_db) = (psnr(&c.streamed, &c.expected), psnr(&c.first, &c.expected));
    if db < 35.0 || std::env::var_os("BEVY_TESSERA_KEEP").is_some() {
        let dir = write_failure_sized("dungeon-prepass-converged", &c.streamed, &c.expected, SCENE_SIZE);
        assert!(db >= 35.0, "PSNR {db:.1} dB < 35 against StandardMaterial; PNGs in {}", dir.display());
    }
    assert!(first_db < db - 3.0, "the first frame was already sharp ({first_db:.1} dB)");
    golden_sized("dungeon-converged", &c.streamed, SCENE_SIZE, 40.0);
}

/// The prepass shader forces early depth exactly where the render device can (where it
/// cannot, the attribute would not compile): the shader the plugin left in the assets
/// after `finish` matches the device's `SHADER_EARLY_DEPTH_TEST`.
#[test]
fn the_prepass_forces_early_depth_where_the_device_can() {
    let app = app();
    let render = app.get_sub_app(bevy::render::RenderApp).expect("a render app");
    let device = render.world().resource::<bevy::render::renderer::RenderDevice>();
    let early = device.features().contains(tessera::wgpu::Features::SHADER_EARLY_DEPTH_TEST);
    let shaders = app.world().resource::<Assets<Shader>>();
    let prepass = shaders.get(bevy_tessera::PREPASS_SHADER.id()).expect("the prepass shader");
    let src = prepass.source.as_str();
    // The attribute on its own line (the file header names it in a comment).
    assert_eq!(
        src.contains("\n@early_depth_test(force)\n"),
        early,
        "device SHADER_EARLY_DEPTH_TEST: {early}"
    );
    assert!(src.contains("fn fragment("));
    eprintln!("this device forces early depth: {early}");
}

/// glTF's alpha modes through the plugin (the `alpha` scene, generated from the Earth
/// images): a `BLEND` glass pane, a `MASK` fence with holes and the floor behind them,
/// streamed, converge to Bevy's own `StandardMaterial` drawing of the same level with
/// the atlas resident (so the pane is as translucent as Bevy makes it, and the holes
/// are where Bevy cuts them): PSNR at least 35 dB; and the view through the pane is
/// not the pane alone.
#[test]
fn alpha_modes_converge_to_the_standard_material() {
    let level = BakedScene::catalog("alpha", Codec::Lz4, &NoProgress)
        .unwrap_or_else(|e| panic!("the alpha scene: {e}"));
    let modes: Vec<AlphaMode> = level.manifest.materials.iter().map(bevy_tessera::alpha_mode).collect();
    // The helper mesh has no material: glTF's default, opaque.
    assert_eq!(modes, [AlphaMode::Opaque, AlphaMode::Blend, AlphaMode::Mask(0.5), AlphaMode::Opaque]);
    let start = tessera::core::scene::camera::Camera::look_at(
        tessera::core::glam::Vec3::new(0.3, 1.1, 2.4),
        tessera::core::glam::Vec3::new(0.0, 0.8, 0.0),
    );
    let c = converge(&level, &start, "alpha", false);
    let db = psnr(&c.streamed, &c.expected);
    if db < 35.0 || std::env::var_os("BEVY_TESSERA_KEEP").is_some() {
        let dir = write_failure_sized("alpha-converged", &c.streamed, &c.expected, SCENE_SIZE);
        assert!(db >= 35.0, "PSNR {db:.1} dB < 35 against StandardMaterial; PNGs in {}", dir.display());
    }
    golden_sized("alpha-converged", &c.streamed, SCENE_SIZE, 40.0);
}

/// A level loaded the Bevy way: the `alpha` scene's glTF (written by Tessera's catalog
/// into a folder the asset server reads) spawned by Bevy's glTF loader as a
/// `WorldAssetRoot`, with [`StreamedLevel`] beside it. Bevy's loader gives the sun and
/// the lamp (`KHR_lights_punctual`) and the helper mesh without a material; the plugin
/// bakes the level in the background and swaps every mesh's `StandardMaterial` for a
/// streamed one (`BLEND` and `MASK` kept). Streamed and settled, the view matches the
/// same level after switching `StreamedLevel::resident` on (the atlas' texels resident
/// in `StandardMaterial`s): at least 35 dB.
#[test]
fn a_level_loaded_by_bevys_gltf_loader_streams_its_textures() {
    let data = tessera::core::bake::source::data_dir();
    let dir = tempfile::tempdir().unwrap();
    let gltf = tessera::core::scene::alpha_scene::write(&data, dir.path())
        .unwrap_or_else(|e| panic!("the alpha scene: {e}"));
    let start = tessera::core::scene::camera::Camera::look_at(
        tessera::core::glam::Vec3::new(0.3, 1.1, 2.4),
        tessera::core::glam::Vec3::new(0.0, 0.8, 0.0),
    );
    let mut app = app_in(VtConfig { pool_mib: 64, ..VtConfig::default() }, Some(dir.path()));
    let world = app.world_mut();
    let image = scene_camera(world, &start, 0, false);
    world.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });
    let scene = world.resource::<AssetServer>().load(GltfAssetLabel::Scene(0).from_asset("alpha.gltf"));
    let level = StreamedLevel { cache: dir.path().join("cache"), ..StreamedLevel::new(&gltf) };
    let root = world.spawn((WorldAssetRoot(scene), level)).id();
    read_back(world, image, 0);
    // Ready (the bake runs on Bevy's task pool), then settled: fully resident with
    // nothing uploaded, for 8 frames in a row.
    let started = std::time::Instant::now();
    let mut quiet = 0;
    while quiet < 8 {
        assert!(started.elapsed().as_secs() < 300, "the level did not settle in 300 s");
        app.update();
        let state = app.world().get::<LevelState>(root).unwrap().clone();
        if let LevelState::Failed(e) = &state {
            panic!("the level's bake failed: {e}");
        }
        let stats = app.world().resource::<TesseraStats>();
        assert!(stats.failed.is_empty(), "{:?}", stats.failed);
        let settled = stats
            .atlases
            .values()
            .next()
            .is_some_and(|s| s.resident_fraction == Some(1.0) && s.stream.uploads == 0);
        let ready = matches!(state, LevelState::Ready { swapped: 4, .. });
        quiet = if ready && settled && first_drawn(&app, 0).is_some() {
            quiet + 1
        } else {
            std::thread::sleep(std::time::Duration::from_millis(5));
            0
        };
    }
    for _ in 0..3 {
        app.update();
    }
    let world = app.world_mut();
    // Bevy's loader spawned the glTF's lights and its helper mesh.
    assert_eq!(world.query::<&DirectionalLight>().iter(world).count(), 1, "the sun");
    assert_eq!(world.query::<&PointLight>().iter(world).count(), 1, "the lamp");
    let mut names = world.query::<(&Name, &Children)>();
    let post = names.iter(world).find(|(n, _)| n.as_str() == "helper post").map(|(_, c)| c[0]);
    let post = post.expect("the helper post node");
    assert!(world.get::<MeshMaterial3d<TesseraMaterial>>(post).is_some(), "the helper post streams");
    let count = |world: &mut World| {
        let standard = world.query::<&MeshMaterial3d<StandardMaterial>>().iter(world).count();
        (standard, world.query::<&MeshMaterial3d<TesseraMaterial>>().iter(world).count())
    };
    assert_eq!(count(world), (0, 4), "every glTF material swapped");
    let modes: Vec<AlphaMode> = world
        .query::<&MeshMaterial3d<TesseraMaterial>>()
        .iter(world)
        .filter_map(|m| world.resource::<Assets<TesseraMaterial>>().get(&m.0))
        .map(|m| m.base.alpha_mode)
        .collect();
    assert!(modes.contains(&AlphaMode::Blend) && modes.contains(&AlphaMode::Mask(0.5)), "{modes:?}");
    let streamed = frame_of(&app, 0).expect("no frame read back");
    // The A/B switch: the same texels resident.
    app.world_mut().get_mut::<StreamedLevel>(root).unwrap().resident = true;
    for _ in 0..12 {
        app.update();
    }
    assert_eq!(count(app.world_mut()), (4, 0), "every mesh on the resident copy");
    let resident = frame_of(&app, 0).expect("no frame read back");
    let db = psnr(&streamed, &resident);
    eprintln!("a level from Bevy's glTF loader: streamed vs resident {db:.1} dB");
    if db < 35.0 {
        let dir = write_failure_sized("level-streamed", &streamed, &resident, SCENE_SIZE);
        panic!("PSNR {db:.1} dB < 35 between the streamed and the resident level; PNGs in {}", dir.display());
    }
}

/// What [`converge`] read back.
struct Converged {
    /// The streamed level once settled.
    streamed: Vec<u8>,
    /// The same frame drawn by `StandardMaterial` with the texels resident.
    expected: Vec<u8>,
    /// The first streamed frame drawn.
    first: Vec<u8>,
    /// Tiles in the pool at the end.
    tiles: u64,
}

/// Draws `level` from `start` streamed (render layer 1) and through Bevy's own
/// `StandardMaterial` with the atlas' texels resident (layer 2, normal maps on
/// generated tangents), lit by the level's sun, until the streamed view is drawn, fully
/// resident and has uploaded nothing for 8 frames in a row; both cameras with a depth
/// prepass when `prepass`.
fn converge(level: &BakedScene, start: &SceneCamera, name: &str, prepass: bool) -> Converged {
    let mut app = app_with(VtConfig { pool_mib: 64, ..VtConfig::default() });
    let world = app.world_mut();
    let streamed_image = scene_camera(world, start, 1, prepass);
    let reference_image = scene_camera(world, start, 2, prepass);
    world.spawn((sun(&level.scene, false), RenderLayers::from_layers(&[1, 2])));
    world.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });
    let streamed: Vec<_> = streamed_materials(&level.location(), &level.manifest, &level.scene)
        .into_iter()
        .map(|m| world.resource_mut::<Assets<TesseraMaterial>>().add(m))
        .collect();
    let atlas = tessera::core::Atlas::open(&level.atlas).unwrap();
    let resident = world
        .resource_scope(|_, mut images: Mut<Assets<Image>>| {
            resident_materials(&atlas, &level.manifest, &level.scene, &mut images)
        })
        .unwrap();
    let resident: Vec<_> =
        resident.into_iter().map(|m| world.resource_mut::<Assets<StandardMaterial>>().add(m)).collect();
    for part in &level.scene.meshes {
        let mesh = scene_mesh(&part.mesh);
        let tangents = mesh.clone().with_generated_tangents().unwrap();
        let (mesh, tangents) = (
            world.resource_mut::<Assets<Mesh>>().add(mesh),
            world.resource_mut::<Assets<Mesh>>().add(tangents),
        );
        world.spawn((Mesh3d(mesh), MeshMaterial3d(streamed[part.material].clone()), RenderLayers::layer(1)));
        world.spawn((
            Mesh3d(tangents),
            MeshMaterial3d(resident[part.material].clone()),
            RenderLayers::layer(2),
        ));
    }
    read_back(app.world_mut(), streamed_image, 1);
    read_back(app.world_mut(), reference_image, 2);
    // Converged: drawn (the pipelines compile in the background, and until the level
    // is drawn its feedback wants nothing), then fully resident with nothing uploaded
    // for 8 frames in a row.
    let (mut resident_at, mut quiet) = (None, 0);
    for frame in 0..400 {
        app.update();
        let stats = app.world().resource::<TesseraStats>();
        assert!(stats.failed.is_empty(), "{:?}", stats.failed);
        let Some(s) = stats.atlases.values().next() else { continue };
        let settled = s.resident_fraction == Some(1.0) && s.stream.uploads == 0;
        quiet = if settled && first_drawn(&app, 1).is_some() { quiet + 1 } else { 0 };
        if quiet == 1 {
            resident_at = Some(frame);
        }
        if quiet >= 8 {
            break;
        }
    }
    assert!(quiet >= 8, "the {name} view did not settle fully resident in 400 frames");
    for _ in 0..3 {
        app.update();
    }
    let stats = app.world().resource::<TesseraStats>().clone();
    let tiles = stats.atlases.values().next().unwrap().vram_slots.0;
    let c = Converged {
        streamed: frame_of(&app, 1).expect("no streamed frame read back"),
        expected: frame_of(&app, 2).expect("no reference frame read back"),
        first: first_drawn(&app, 1).expect("the level was never drawn"),
        tiles,
    };
    eprintln!(
        "{name} fully resident at frame {} ({tiles} tiles): PSNR {:.1} dB against StandardMaterial (first drawn frame {:.1} dB)",
        resident_at.unwrap_or(0),
        psnr(&c.streamed, &c.expected),
        psnr(&c.first, &c.expected)
    );
    c
}

/// An unattended run ends by itself: `TesseraPlugin::unattended` with 6 frames exits
/// (success) after the sixth update and not before.
#[test]
fn an_unattended_run_exits_after_its_frames() {
    let unattended = Some(bevy_tessera::Unattended { frames: 6, screenshot: None });
    let mut app =
        app_of(TesseraPlugin { config: VtConfig { pool_mib: 16, ..VtConfig::default() }, unattended }, None);
    for frame in 1..=6 {
        assert_eq!(app.should_exit(), None, "exited before frame {frame}");
        app.update();
    }
    assert_eq!(app.should_exit(), Some(AppExit::Success));
}

/// Everything logged at ERROR level in this test process (a global subscriber: the
/// tests' apps run without Bevy's LogPlugin).
fn logged_errors() -> &'static std::sync::Mutex<Vec<u8>> {
    static ERRORS: std::sync::OnceLock<std::sync::Mutex<Vec<u8>>> = std::sync::OnceLock::new();
    let errors = ERRORS.get_or_init(|| std::sync::Mutex::new(Vec::new()));
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        struct Sink;
        impl std::io::Write for Sink {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                logged_errors().lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let subscriber = bevy::log::tracing_subscriber::fmt()
            .with_max_level(bevy::log::Level::ERROR)
            .with_writer(|| Sink)
            .finish();
        let _ = bevy::log::tracing::subscriber::set_global_default(subscriber);
    });
    errors
}

/// A plain `Camera3d` (Bevy's default tonemapping, TonyMcMapface) beside a streamed
/// plane logs no error (the crate turns on `tonemapping_luts`), and the plugin's
/// figures are in Bevy's `DiagnosticsStore` with plausible values.
#[test]
fn default_camera_renders_without_errors_and_diagnostics_are_in_the_store() {
    use bevy::diagnostic::DiagnosticsStore;
    use bevy_tessera::diagnostics;
    let errors = logged_errors();
    // The capture works: an error logged here is seen.
    bevy::log::error!("capture check");
    assert!(String::from_utf8_lossy(&errors.lock().unwrap()).contains("capture check"));
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_texture(dir.path());
    let mut app = app();
    let world = app.world_mut();
    let image = Image::new_target_texture(SIZE, SIZE, TextureFormat::Rgba8UnormSrgb, None);
    let image = world.resource_mut::<Assets<Image>>().add(image);
    // No Tonemapping component: Bevy's default.
    world.spawn((
        Camera3d::default(),
        RenderTarget::Image(image.into()),
        // Close enough to want mip 0 of a few tiles.
        Transform::from_xyz(0.0, 0.6, 0.0).looking_at(Vec3::ZERO, Vec3::NEG_Z),
    ));
    light(world);
    let mesh = plane(world);
    let vt = world
        .resource_mut::<Assets<TesseraMaterial>>()
        .add(VirtualTexture::material(atlas.to_string_lossy()));
    world.spawn((Mesh3d(mesh), MeshMaterial3d(vt)));
    let mut resident = false;
    for _ in 0..300 {
        app.update();
        let stats = app.world().resource::<TesseraStats>();
        // Resident once the plane is drawn (its pipeline compiles in the background:
        // the first frames want nothing, which counts as resident).
        resident = stats
            .atlases
            .values()
            .next()
            .is_some_and(|s| s.resident_fraction == Some(1.0) && s.stream.tiles_needed > 1);
        if resident {
            break;
        }
    }
    assert!(resident, "the plane never became fully resident");
    // One more frame for the figures of that frame to reach the store.
    app.update();
    let stats = app.world().resource::<TesseraStats>().atlases.values().next().unwrap().clone();
    let store = app.world().resource::<DiagnosticsStore>();
    let value = |path: &bevy::diagnostic::DiagnosticPath| {
        store.get(path).and_then(|d| d.value()).unwrap_or_else(|| panic!("no measurement of {path}"))
    };
    assert_eq!(value(&diagnostics::RESIDENT_PERCENT), 100.0 * stats.resident_fraction.unwrap_or(0.0));
    let (tiles, slots) = (value(&diagnostics::VRAM_TILES), value(&diagnostics::VRAM_SLOTS));
    assert!(tiles > 1.0 && tiles <= slots, "{tiles} tiles in {slots} slots");
    assert_eq!(slots, stats.vram_slots.1 as f64);
    assert!(value(&diagnostics::HOST_TILES) >= 1.0 && value(&diagnostics::HOST_MIB) > 0.0);
    let gpu = value(&diagnostics::GPU_MIB);
    assert!(gpu > 1.0 && gpu < 64.0, "{gpu} MiB of GPU memory for a 16 MiB pool");
    assert!(value(&diagnostics::UPLOADS) >= 0.0 && value(&diagnostics::MISSES) >= 0.0);
    assert_eq!(value(&diagnostics::NETWORK_MIB), 0.0, "a local atlas fetches nothing");
    let logged = String::from_utf8_lossy(&errors.lock().unwrap_or_else(|e| e.into_inner())).to_string();
    assert!(!logged.to_lowercase().contains("tonemapping"), "{logged}");
}

/// A level written by the test as a user's exporter would: a textured ground and wall
/// with uvs, helper volumes (boxes) without uvs, one of them on the textured material,
/// one primitive without a material (glTF's default material), and a camera node of
/// its own. Folder: `level.gltf`, `level.bin`, `ground.png`.
mod user_level {
    use std::path::{Path, PathBuf};

    /// One primitive: positions, normals, uvs (or none) and its material (or none).
    struct Prim {
        name: &'static str,
        translation: [f32; 3],
        positions: Vec<[f32; 3]>,
        normals: Vec<[f32; 3]>,
        uvs: Option<Vec<[f32; 2]>>,
        indices: Vec<u32>,
        material: Option<usize>,
    }

    /// A horizontal (or, rotated, vertical) quad of `w` x `h` with uvs 0..`repeat`.
    fn quad(name: &'static str, translation: [f32; 3], w: f32, h: f32, vertical: bool, repeat: f32) -> Prim {
        let corners = [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)];
        let positions = corners
            .iter()
            .map(|&(x, y)| {
                if vertical {
                    [x * w / 2.0, (y + 1.0) * h / 2.0, 0.0]
                } else {
                    [x * w / 2.0, 0.0, -y * h / 2.0]
                }
            })
            .collect();
        let normal = if vertical { [0.0, 0.0, 1.0] } else { [0.0, 1.0, 0.0] };
        let uvs =
            corners.iter().map(|&(x, y)| [(x + 1.0) / 2.0 * repeat, (1.0 - y) / 2.0 * repeat]).collect();
        Prim {
            name,
            translation,
            positions,
            normals: vec![normal; 4],
            uvs: Some(uvs),
            indices: vec![0, 1, 2, 0, 2, 3],
            material: Some(0),
        }
    }

    /// A box of half-size `half` without uvs.
    fn cube(name: &'static str, translation: [f32; 3], half: [f32; 3], material: Option<usize>) -> Prim {
        let (mut positions, mut normals, mut indices) = (Vec::new(), Vec::new(), Vec::new());
        for axis in 0..3 {
            for sign in [-1.0f32, 1.0] {
                let (u, v) = ((axis + 1) % 3, (axis + 2) % 3);
                let base = positions.len() as u32;
                for (a, b) in [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)] {
                    let mut p = [0.0; 3];
                    p[axis] = sign * half[axis];
                    p[u] = a * half[u];
                    p[v] = b * half[v];
                    positions.push(p);
                    let mut n = [0.0; 3];
                    n[axis] = sign;
                    normals.push(n);
                }
                // Counter-clockwise seen from outside.
                if sign > 0.0 {
                    indices.extend([base, base + 1, base + 2, base, base + 2, base + 3]);
                } else {
                    indices.extend([base, base + 2, base + 1, base, base + 3, base + 2]);
                }
            }
        }
        Prim { name, translation, positions, normals, uvs: None, indices, material }
    }

    /// The ground's texture: rings, a checker and a ramp (detail at every scale).
    pub(super) fn ground_texture(size: u32, swap: bool) -> image::RgbaImage {
        image::RgbaImage::from_fn(size, size, |x, y| {
            let (fx, fy) = (x as f32 / size as f32, y as f32 / size as f32);
            let r = ((fx - 0.5).hypot(fy - 0.5) * 40.0).sin() * 0.5 + 0.5;
            let check = ((x / 8) + (y / 8)) % 2;
            let p = [(r * 255.0) as u8, (fx * 200.0) as u8 + 50 * check as u8, (fy * 255.0) as u8, 255];
            image::Rgba(if swap { [p[2], p[0], p[1], 255] } else { p })
        })
    }

    /// The level's one buffer, its views and accessors (JSON).
    #[derive(Default)]
    struct Buffer {
        bin: Vec<u8>,
        views: Vec<String>,
        accessors: Vec<String>,
    }

    impl Buffer {
        /// Appends `bytes` as a view and an accessor of `count` elements; its index.
        fn push(&mut self, bytes: Vec<u8>, count: usize, kind: &str, component: u32, extra: String) -> usize {
            let view = self.views.len();
            let (offset, length) = (self.bin.len(), bytes.len());
            self.views.push(format!(r#"{{"buffer":0,"byteOffset":{offset},"byteLength":{length}}}"#));
            self.bin.extend(bytes);
            self.accessors.push(format!(
                r#"{{"bufferView":{view},"componentType":{component},"count":{count},"type":"{kind}"{extra}}}"#
            ));
            self.accessors.len() - 1
        }
    }

    /// Meshes in the level, textured or not (what `StreamedLevel` swaps).
    pub(super) const MESHES: usize = 8;

    /// Writes the level into `dir`; returns the glTF's path.
    pub(super) fn write(dir: &Path) -> PathBuf {
        ground_texture(256, false).save(dir.join("ground.png")).unwrap();
        let prims = [
            quad("ground", [0.0, 0.0, 0.0], 6.0, 6.0, false, 3.0),
            quad("wall", [0.0, 0.0, -2.0], 6.0, 2.0, true, 2.0),
            cube("trigger volume", [-1.6, 0.5, 0.0], [0.4, 0.5, 0.4], Some(1)),
            cube("spawn volume", [-0.6, 0.3, 0.8], [0.3, 0.3, 0.3], Some(1)),
            cube("audio volume", [0.6, 0.4, 0.6], [0.3, 0.4, 0.3], Some(2)),
            cube("nav blocker", [1.6, 0.35, 0.0], [0.35, 0.35, 0.35], Some(1)),
            cube("textured without uvs", [0.0, 0.25, -1.0], [0.5, 0.25, 0.25], Some(0)),
            cube("no material", [-0.2, 0.2, 1.8], [0.2, 0.2, 0.2], None),
        ];
        assert_eq!(prims.len(), MESHES);
        let mut buffer = Buffer::default();
        let (mut meshes, mut nodes) = (Vec::new(), Vec::new());
        let floats = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
        for (i, p) in prims.iter().enumerate() {
            let mut min = [f32::MAX; 3];
            let mut max = [f32::MIN; 3];
            for q in &p.positions {
                for k in 0..3 {
                    min[k] = min[k].min(q[k]);
                    max[k] = max[k].max(q[k]);
                }
            }
            let bounds = format!(r#","min":{min:?},"max":{max:?}"#);
            let n = p.positions.len();
            let pos = buffer.push(floats(p.positions.as_flattened()), n, "VEC3", 5126, bounds);
            let nor = buffer.push(floats(p.normals.as_flattened()), n, "VEC3", 5126, String::new());
            let mut attributes = format!(r#""POSITION":{pos},"NORMAL":{nor}"#);
            if let Some(uvs) = &p.uvs {
                let uv = buffer.push(floats(uvs.as_flattened()), n, "VEC2", 5126, String::new());
                attributes += &format!(r#","TEXCOORD_0":{uv}"#);
            }
            let idx = p.indices.iter().flat_map(|i| i.to_le_bytes()).collect();
            let ind = buffer.push(idx, p.indices.len(), "SCALAR", 5125, String::new());
            let material = p.material.map_or(String::new(), |m| format!(r#","material":{m}"#));
            meshes.push(format!(
                r#"{{"name":"{}","primitives":[{{"attributes":{{{attributes}}},"indices":{ind}{material}}}]}}"#,
                p.name
            ));
            nodes.push(format!(r#"{{"name":"{}","mesh":{i},"translation":{:?}}}"#, p.name, p.translation));
        }
        // The camera at (0, 2.5, 5) looking at the origin: pitched down about x.
        let pitch = -(2.5f32).atan2(5.0);
        let q = [(pitch / 2.0).sin(), 0.0, 0.0, (pitch / 2.0).cos()];
        nodes.push(format!(
            r#"{{"name":"level camera","camera":0,"translation":[0.0,2.5,5.0],"rotation":{q:?}}}"#
        ));
        let scene_nodes: Vec<usize> = (0..nodes.len()).collect();
        let json = format!(
            r#"{{"asset":{{"version":"2.0","generator":"bevy_tessera test"}},
"scene":0,"scenes":[{{"nodes":{scene_nodes:?}}}],
"nodes":[{nodes}],
"meshes":[{meshes}],
"cameras":[{{"type":"perspective","perspective":{{"yfov":0.75,"znear":0.1,"zfar":100.0,"aspectRatio":1.7778}}}}],
"materials":[
 {{"name":"ground","pbrMetallicRoughness":{{"baseColorTexture":{{"index":0}},"metallicFactor":0.0,"roughnessFactor":0.8}}}},
 {{"name":"helper","pbrMetallicRoughness":{{"baseColorFactor":[0.8,0.2,0.1,1.0],"metallicFactor":0.0,"roughnessFactor":0.6}}}},
 {{"name":"helper blue","pbrMetallicRoughness":{{"baseColorFactor":[0.1,0.3,0.9,1.0],"metallicFactor":0.0}}}}],
"textures":[{{"source":0,"sampler":0}}],
"samplers":[{{"magFilter":9729,"minFilter":9987,"wrapS":10497,"wrapT":10497}}],
"images":[{{"uri":"ground.png"}}],
"accessors":[{accessors}],
"bufferViews":[{views}],
"buffers":[{{"uri":"level.bin","byteLength":{len}}}]}}"#,
            nodes = nodes.join(","),
            meshes = meshes.join(","),
            accessors = buffer.accessors.join(","),
            views = buffer.views.join(","),
            len = buffer.bin.len(),
        );
        std::fs::write(dir.join("level.bin"), &buffer.bin).unwrap();
        let gltf = dir.join("level.gltf");
        std::fs::write(&gltf, json).unwrap();
        gltf
    }
}

/// A level of [`user_level`] spawned by Bevy's glTF loader with `StreamedLevel`, its own
/// glTF camera drawing into an image read back under layer 0 once it appears.
struct UserLevel {
    app: App,
    root: Entity,
    camera: Entity,
    gltf: PathBuf,
    _dir: tempfile::TempDir,
}

impl UserLevel {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let gltf = user_level::write(dir.path());
        let mut app = app_in(VtConfig { pool_mib: 32, ..VtConfig::default() }, Some(dir.path()));
        let world = app.world_mut();
        world.spawn((
            DirectionalLight { illuminance: 6000.0, shadow_maps_enabled: false, ..default() },
            Transform::from_xyz(1.0, 3.0, 2.0).looking_at(Vec3::ZERO, Vec3::Y),
        ));
        world.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });
        let scene = world.resource::<AssetServer>().load(GltfAssetLabel::Scene(0).from_asset("level.gltf"));
        let level = StreamedLevel { cache: dir.path().join("cache"), ..StreamedLevel::new(&gltf) };
        let root = world.spawn((WorldAssetRoot(scene), level)).id();
        // The level's own camera, once Bevy's loader spawned it: into an image.
        let started = std::time::Instant::now();
        let camera = loop {
            assert!(started.elapsed().as_secs() < 120, "the level's camera never appeared");
            app.update();
            let world = app.world_mut();
            let mut cameras = world.query_filtered::<(Entity, &Name), With<Camera3d>>();
            let found = cameras.iter(world).find(|(_, n)| n.as_str() == "level camera").map(|(e, _)| e);
            if let Some(camera) = found {
                break camera;
            }
        };
        let world = app.world_mut();
        let mut image =
            Image::new_target_texture(SCENE_SIZE.0, SCENE_SIZE.1, TextureFormat::Rgba8UnormSrgb, None);
        image.texture_descriptor.usage |= TextureUsages::COPY_SRC;
        let image = world.resource_mut::<Assets<Image>>().add(image);
        world.entity_mut(camera).insert((RenderTarget::Image(image.clone().into()), Tonemapping::None));
        read_back(world, image, 0);
        Self { app, root, camera, gltf, _dir: dir }
    }

    /// Updates until the level is ready with every mesh swapped, drawn, and fully
    /// resident with nothing uploaded for 8 frames in a row; `reopened` atlases first
    /// when a re-bake is awaited. Fails on a shader error.
    fn settle(&mut self, reopened: u64) {
        let started = std::time::Instant::now();
        let mut quiet = 0;
        while quiet < 8 {
            assert!(started.elapsed().as_secs() < 300, "the level did not settle in 300 s");
            self.app.update();
            let state = self.app.world().get::<LevelState>(self.root).unwrap().clone();
            if let LevelState::Failed(e) = &state {
                panic!("the level's bake failed: {e}");
            }
            let stats = self.app.world().resource::<TesseraStats>();
            assert!(stats.failed.is_empty(), "{:?}", stats.failed);
            assert!(stats.shader_errors.is_empty(), "{:#?}", stats.shader_errors);
            let settled = stats
                .atlases
                .values()
                .next()
                .is_some_and(|s| s.resident_fraction == Some(1.0) && s.stream.uploads == 0);
            let reloaded = stats.reopened.values().sum::<u64>() >= reopened;
            let ready = matches!(state, LevelState::Ready { swapped: user_level::MESHES, .. });
            quiet = if ready && reloaded && settled && first_drawn(&self.app, 0).is_some() {
                quiet + 1
            } else {
                std::thread::sleep(std::time::Duration::from_millis(5));
                0
            };
        }
        for _ in 0..3 {
            self.app.update();
        }
    }

    /// The frame streamed, then with `StreamedLevel::resident` (the same texels
    /// resident in Bevy's `StandardMaterial`s), back to streamed.
    fn streamed_and_resident(&mut self) -> (Vec<u8>, Vec<u8>) {
        let streamed = frame_of(&self.app, 0).expect("no frame read back");
        self.app.world_mut().get_mut::<StreamedLevel>(self.root).unwrap().resident = true;
        for _ in 0..12 {
            self.app.update();
        }
        let resident = frame_of(&self.app, 0).expect("no frame read back");
        self.app.world_mut().get_mut::<StreamedLevel>(self.root).unwrap().resident = false;
        (streamed, resident)
    }
}

/// Issue 41: a user's level loaded by Bevy's glTF loader with `StreamedLevel`, most of
/// whose meshes have no uvs (helper volumes, one on a textured material, one without a
/// material: glTF's default), seen through its own glTF camera (which the plugin gives a
/// `DepthPrepass`). Every mesh is swapped, no shader fails, and the streamed frame
/// matches the same level resident in `StandardMaterial`s at 40 dB or more, the helper
/// volumes drawn in their factors' colours.
#[test]
fn a_users_level_with_uv_less_meshes_and_its_own_camera_streams() {
    let mut level = UserLevel::new();
    level.settle(0);
    let world = level.app.world_mut();
    assert!(world.get::<DepthPrepass>(level.camera).is_some(), "the level's camera has no DepthPrepass");
    let streamed_meshes = world.query::<&MeshMaterial3d<TesseraMaterial>>().iter(world).count();
    assert_eq!(streamed_meshes, user_level::MESHES, "every mesh streams");
    let (streamed, resident) = level.streamed_and_resident();
    let db = psnr(&streamed, &resident);
    eprintln!("a user's level with uv-less meshes: streamed vs resident {db:.1} dB");
    // Not vacuous: the resident frame shows the textured ground and the red helpers.
    let distinct: std::collections::HashSet<&[u8]> = resident.chunks(4).collect();
    let reddish = resident.chunks(4).filter(|p| p[0] > 60 && p[0] / 2 > p[1].max(p[2])).count();
    let cleared = resident.chunks(4).filter(|p| p[..3] == [0, 0, 0]).count();
    assert!(distinct.len() > 1000, "a nearly uniform frame: {} colours", distinct.len());
    assert!(reddish > 200, "the red helper volumes are not in view: {reddish} pixels");
    assert!(cleared < resident.len() / 4 / 4, "{cleared} pixels of clear colour");
    if db < 40.0 || std::env::var_os("BEVY_TESSERA_KEEP").is_some() {
        let dir = write_failure_sized("user-level", &streamed, &resident, SCENE_SIZE);
        assert!(
            db >= 40.0,
            "PSNR {db:.1} dB < 40 between the streamed and the resident level; PNGs in {}",
            dir.display()
        );
    }
}

/// `StreamedLevel` bakes again when a file of its glTF changes: the ground's image
/// rewritten (its channels swapped) while the level streams gives a new bake, the atlas
/// opened again, and the streamed frame then matches the new texels resident (40 dB),
/// no longer the old frame.
#[test]
fn a_streamed_level_bakes_again_when_its_gltf_changes() {
    let mut level = UserLevel::new();
    level.settle(0);
    let before = frame_of(&level.app, 0).expect("no frame read back");
    let folder = level.gltf.parent().unwrap().to_path_buf();
    // Written beside and renamed over, as an editor saving does.
    let next = folder.join("ground.next.png");
    user_level::ground_texture(256, true).save(&next).unwrap();
    std::fs::rename(&next, folder.join("ground.png")).unwrap();
    level.settle(1);
    let (streamed, resident) = level.streamed_and_resident();
    let (db, old_db) = (psnr(&streamed, &resident), psnr(&before, &resident));
    eprintln!("re-baked level: streamed vs resident {db:.1} dB (the frame before the edit {old_db:.1} dB)");
    if db < 40.0 || old_db > 30.0 {
        let dir = write_failure_sized("user-level-rebaked", &streamed, &resident, SCENE_SIZE);
        panic!(
            "after the edit {db:.1} dB (want >= 40), before it {old_db:.1} dB (want < 30); PNGs in {}",
            dir.display()
        );
    }
}

/// The terrain view's frame size: small (lavapipe draws its million triangles twice a
/// frame), 16:9.
const TERRAIN_SIZE: (u32, u32) = (192, 108);

/// A camera at `start` into an image of `TERRAIN_SIZE`, on render layer `layer`.
fn terrain_camera(world: &mut World, start: &SceneCamera, layer: usize) -> Handle<Image> {
    let (w, h) = TERRAIN_SIZE;
    let mut image = Image::new_target_texture(w, h, TextureFormat::Rgba8UnormSrgb, None);
    image.texture_descriptor.usage |= TextureUsages::COPY_SRC;
    let handle = world.resource_mut::<Assets<Image>>().add(image);
    let (transform, projection) = camera_transform(start);
    world.spawn((
        Camera3d::default(),
        RenderTarget::Image(handle.clone().into()),
        Tonemapping::None,
        transform,
        projection,
        RenderLayers::layer(layer),
    ));
    handle
}

/// Pixels of `frame` within 2 of Tessera's never-written pool colour in every channel.
fn unwritten_pixels(frame: &[u8]) -> usize {
    frame
        .chunks(4)
        .filter(|p| p[..3].iter().zip(tessera::UNWRITTEN).all(|(&a, b)| a.abs_diff(b) <= 2))
        .count()
}

/// Runs `app` until the terrain is drawn, fully resident and has produced nothing for 4
/// frames in a row (at most `max` frames); returns the tiles produced and produced
/// again in place meanwhile.
fn settle_terrain(app: &mut App, max: u32, what: &str) -> (usize, usize) {
    let (mut produced, mut refreshed, mut quiet) = (0, 0, 0);
    for _ in 0..max {
        app.update();
        let stats = app.world().resource::<TesseraStats>();
        assert!(stats.failed.is_empty(), "{:?}", stats.failed);
        let Some(s) = stats.atlases.values().next() else { continue };
        produced += s.stream.produced;
        refreshed += s.stream.refreshed;
        let settled = s.resident_fraction == Some(1.0) && s.stream.produced + s.stream.refreshed == 0;
        quiet = if settled && first_drawn(app, 2).is_some() { quiet + 1 } else { 0 };
        if quiet >= 4 {
            // Two more frames for the last readbacks.
            for _ in 0..3 {
                app.update();
            }
            return (produced, refreshed);
        }
    }
    panic!("{what}: the terrain did not settle fully resident in {max} frames ({produced} tiles produced)");
}

/// The terrain of issue 43 (its data: `assets/fetch-data.sh --dungeon --castle`) in a
/// Bevy app: its produced atlas' tiles drawn by Tessera's `TerrainProducer` on Bevy's
/// render device as the view asks for them, until the `walk` start is fully resident;
/// no pixel of the albedo shows the never-written pool colour, the lit view (Bevy's PBR
/// on the produced albedo and world-space normal) matches its golden image, and a
/// marking added with its rectangle invalidated is produced again in place and shows.
#[test]
fn the_terrain_is_produced_on_bevys_device() {
    let scene = Arc::new(terrain::load().unwrap_or_else(|e| panic!("{e}")));
    let start = scene.camera_path("walk").unwrap().camera_at(0);
    let mut app = app_with(VtConfig { pool_mib: 64, ..VtConfig::default() });
    let world = app.world_mut();
    let lit_image = terrain_camera(world, &start, 1);
    let albedo_image = terrain_camera(world, &start, 2);
    world.spawn((
        DirectionalLight { illuminance: 8000.0, shadow_maps_enabled: false, ..default() },
        Transform::default().looking_to(-Vec3::new(0.5, 0.8, 0.35), Vec3::Y),
        RenderLayers::from_layers(&[1, 2]),
    ));
    let gpu = terrain::SharedGpu::default();
    let atlas = terrain::atlas(scene.clone(), gpu.clone()).unwrap();
    assert!(atlas.is_produced());
    let atlas = world.resource_mut::<Assets<bevy_tessera::TesseraAtlas>>().add(atlas);
    let mesh = world.resource_mut::<Assets<Mesh>>().add(terrain::mesh(&scene));
    let (lit, albedo) = {
        let mut materials = world.resource_mut::<Assets<TesseraMaterial>>();
        (
            materials.add(terrain::material(atlas.clone(), false)),
            materials.add(terrain::material(atlas.clone(), true)),
        )
    };
    world.spawn((Mesh3d(mesh.clone()), MeshMaterial3d(lit), RenderLayers::layer(1)));
    world.spawn((Mesh3d(mesh), MeshMaterial3d(albedo), RenderLayers::layer(2)));
    read_back(app.world_mut(), lit_image, 1);
    read_back(app.world_mut(), albedo_image, 2);

    let (produced, _) = settle_terrain(&mut app, 150, "the walk start");
    let lit = frame_of(&app, 1).expect("no lit frame read back");
    let before = frame_of(&app, 2).expect("no albedo frame read back");
    assert!(gpu.lock().unwrap().is_some(), "the producer was never made on Bevy's device");
    assert!(produced >= 16, "{produced} tiles produced");
    assert_eq!(unwritten_pixels(&before), 0, "pixels of never-written pool slots");
    assert_eq!(unwritten_pixels(&lit), 0, "pixels of never-written pool slots (lit)");
    let ground = before.chunks(4).filter(|p| p[..3] != [0, 0, 0]).count();
    let distinct: std::collections::HashSet<&[u8]> = before.chunks(4).collect();
    assert!(ground * 2 > before.len() / 4, "the terrain covers {ground} pixels only");
    assert!(distinct.len() > 1000, "a nearly uniform terrain: {} colours", distinct.len());

    // A marking 1.5 units ahead on the ground, its rectangle invalidated.
    let ahead = start.target - start.position;
    let step = 1.5 / ahead.x.hypot(ahead.z).max(1e-6);
    let (x, z) = (start.position.x + ahead.x * step, start.position.z + ahead.z * step);
    let decal = tessera::core::scene::terrain::TerrainScene::marking_at(x, z, 0.4);
    let queue = app.world().resource::<bevy::render::renderer::RenderQueue>().clone();
    let rect = gpu.lock().unwrap().as_mut().unwrap().add_decal(&queue, decal).unwrap();
    app.world().resource::<Assets<bevy_tessera::TesseraAtlas>>().get(&atlas).unwrap().invalidate(0, rect);
    let (_, refreshed) = settle_terrain(&mut app, 60, "after the marking");
    let after = frame_of(&app, 2).expect("no albedo frame read back");
    let changed = before.chunks(4).zip(after.chunks(4)).filter(|(a, b)| a != b).count();
    let yellow = |f: &[u8]| f.chunks(4).filter(|p| p[0] > 180 && p[1] > 140 && p[2] < 90).count();
    let (yellow_before, yellow_after) = (yellow(&before), yellow(&after));
    eprintln!(
        "terrain: {produced} tiles produced, {ground} ground pixels, {} colours; after the marking {refreshed} tiles produced again, {changed} pixels changed, yellow {yellow_before} -> {yellow_after}",
        distinct.len()
    );
    if std::env::var_os("BEVY_TESSERA_KEEP").is_some() {
        let dir = write_failure_sized("terrain-albedo", &after, &before, TERRAIN_SIZE);
        write_failure_sized("terrain-lit", &lit, &lit, TERRAIN_SIZE);
        eprintln!("frames kept in {}", dir.display());
    }
    assert!(refreshed > 0, "no tile produced again after the invalidation");
    assert_eq!(unwritten_pixels(&after), 0, "pixels of never-written pool slots after the marking");
    assert!(
        yellow_after > yellow_before + 20,
        "the marking does not show: yellow {yellow_before} -> {yellow_after}"
    );
    golden_sized("terrain-walk", &lit, TERRAIN_SIZE, 35.0);
}
