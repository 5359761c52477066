//! Frame time and GPU memory of the `gltf_scene` level, headless: its textures streamed
//! through the plugin, or the same texels fully resident in Bevy's `StandardMaterial`.
//!
//! ```text
//! cargo run --release -p bevy_tessera --example scene_bench -- \
//!     [--textures streamed|resident] [--camera walk|still] [--frames 600] \
//!     [--size 1920x1080] [--pool-mib 64] [--gltf LEVEL.gltf] [--prepass] [--png FRAME.png]
//! ```
//!
//! `--prepass` gives the camera a `DepthPrepass`: streamed materials then record their
//! feedback there, and their main pass, without side effects, is depth tested before
//! shading (resident materials get the same prepass, for a like-for-like ratio).
//!
//! Renders into an image (no window), after a warm-up (pipelines compiled and, for a
//! still camera, the view fully resident), then `--frames` measured frames; with
//! `--camera walk` the camera loops Tessera's walk preset of the level, so streaming
//! keeps working. Prints one JSON object: medians and 95th percentiles of the wall
//! time per frame and of the GPU time of Bevy's passes (timestamp queries, where the
//! adapter has them), and the GPU memory of the textures. `--png` also writes the last
//! frame, to see what was measured.

use std::time::Instant;

use bevy::camera::RenderTarget;
use bevy::core_pipeline::prepass::DepthPrepass;
use bevy::core_pipeline::tonemapping::Tonemapping;
use bevy::diagnostic::DiagnosticsStore;
use bevy::prelude::*;
use bevy::render::diagnostic::RenderDiagnosticsPlugin;
use bevy::render::render_resource::TextureFormat;
use bevy::render::view::screenshot::Screenshot;
use bevy_tessera::scene::{
    BakedScene, camera_transform, resident_bytes, resident_materials, scene_mesh, streamed_materials, sun,
};
use bevy_tessera::{TesseraPlugin, TesseraStats};
use tessera::VtConfig;
use tessera::core::format::codec::Codec;
use tessera::core::progress::NoProgress;
use tessera::core::scene::camera::{CameraPath, Shot};
use tessera::core::scene::catalog;

/// What to measure.
struct Options {
    streamed: bool,
    walk: bool,
    frames: usize,
    size: (u32, u32),
    pool_mib: u32,
    gltf: Option<String>,
    prepass: bool,
    png: Option<std::path::PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        streamed: true,
        walk: true,
        frames: 600,
        size: (1920, 1080),
        pool_mib: 64,
        gltf: None,
        prepass: false,
        png: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--textures" => {
                o.streamed = match value()?.as_str() {
                    "streamed" => true,
                    "resident" => false,
                    v => return Err(format!("--textures {v}: use streamed or resident")),
                }
            }
            "--camera" => {
                o.walk = match value()?.as_str() {
                    "walk" => true,
                    "still" => false,
                    v => return Err(format!("--camera {v}: use walk or still")),
                }
            }
            "--frames" => o.frames = value()?.parse().map_err(|e| format!("--frames: {e}"))?,
            "--pool-mib" => o.pool_mib = value()?.parse().map_err(|e| format!("--pool-mib: {e}"))?,
            "--size" => {
                let v = value()?;
                let parsed = v.split_once('x').and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)));
                o.size = parsed.filter(|&(w, h)| w > 0 && h > 0).ok_or(format!("--size {v}: use WxH"))?;
            }
            "--gltf" => o.gltf = Some(value()?),
            "--prepass" => o.prepass = true,
            "--png" => o.png = Some(value()?.into()),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if o.frames == 0 {
        return Err("--frames must be at least 1".into());
    }
    Ok(o)
}

fn main() -> AppExit {
    match run() {
        Ok(()) => AppExit::Success,
        Err(e) => {
            eprintln!("scene_bench: {e}");
            AppExit::error()
        }
    }
}

/// A JSON number, or `null` for a figure that was not measured.
fn num(v: f64) -> String {
    if v.is_finite() { format!("{v:.4}") } else { "null".into() }
}

/// The median and the 95th percentile of `v`.
fn stats(mut v: Vec<f64>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[(v.len() * 95 / 100).min(v.len() - 1)])
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let o = options()?;
    let level = match &o.gltf {
        None => BakedScene::catalog("dungeon", Codec::Lz4, &NoProgress)?,
        Some(path) => BakedScene::gltf(
            std::path::Path::new(path),
            &catalog::cache_dir().join("scenes"),
            Codec::Lz4,
            &NoProgress,
        )?,
    };
    let plugins = DefaultPlugins.build().disable::<bevy::log::LogPlugin>();
    // Headless: no window, and no event loop of a windowing system.
    #[cfg(feature = "viewer")]
    let plugins = plugins
        .set(WindowPlugin {
            primary_window: None,
            exit_condition: bevy::window::ExitCondition::DontExit,
            ..default()
        })
        .disable::<bevy::winit::WinitPlugin>();
    let mut app = App::new();
    app.add_plugins(plugins).add_plugins(RenderDiagnosticsPlugin).add_plugins(TesseraPlugin {
        config: VtConfig { pool_mib: o.pool_mib, ..VtConfig::default() },
        unattended: None,
    });
    app.finish();
    app.cleanup();

    let world = app.world_mut();
    let mut target = Image::new_target_texture(o.size.0, o.size.1, TextureFormat::Rgba8UnormSrgb, None);
    target.texture_descriptor.label = Some("scene_bench target");
    let target = world.resource_mut::<Assets<Image>>().add(target);
    let frame_image = target.clone();
    let path = CameraPath::for_scene(None, Some(&level.scene), Shot::Tour)?;
    let (transform, projection) = camera_transform(&path.camera_at(0));
    let camera = world
        .spawn((
            Camera3d::default(),
            RenderTarget::Image(target.into()),
            Tonemapping::AcesFitted,
            transform,
            projection,
        ))
        .id();
    if o.prepass {
        world.entity_mut(camera).insert(DepthPrepass);
    }
    world.spawn(sun(&level.scene, true));
    world.insert_resource(GlobalAmbientLight { brightness: 400.0, ..default() });

    let mut resident_texture_bytes = 0;
    if o.streamed {
        let materials = streamed_materials(&level.location(), &level.manifest, &level.scene);
        let handles: Vec<_> = {
            let mut assets = world.resource_mut::<Assets<bevy_tessera::TesseraMaterial>>();
            materials.into_iter().map(|m| assets.add(m)).collect()
        };
        for part in &level.scene.meshes {
            let mesh = world.resource_mut::<Assets<Mesh>>().add(scene_mesh(&part.mesh));
            if let Some(m) = handles.get(part.material) {
                world.spawn((Mesh3d(mesh), MeshMaterial3d(m.clone())));
            }
        }
    } else {
        let atlas = tessera::core::Atlas::open(&level.atlas)?;
        let materials = world.resource_scope(|_, mut images: Mut<Assets<Image>>| {
            resident_materials(&atlas, &level.manifest, &level.scene, &mut images)
        })?;
        resident_texture_bytes = resident_bytes(&materials, world.resource::<Assets<Image>>());
        let handles: Vec<_> = {
            let mut assets = world.resource_mut::<Assets<StandardMaterial>>();
            materials.into_iter().map(|m| assets.add(m)).collect()
        };
        for part in &level.scene.meshes {
            let mesh = scene_mesh(&part.mesh).with_generated_tangents()?;
            let mesh = world.resource_mut::<Assets<Mesh>>().add(mesh);
            if let Some(m) = handles.get(part.material) {
                world.spawn((Mesh3d(mesh), MeshMaterial3d(m.clone())));
            }
        }
    }

    // Warm-up: pipelines compile in the background (the first frames draw nothing);
    // a still camera waits for its view to be fully resident.
    let started = Instant::now();
    let mut warm = 0;
    loop {
        app.update();
        warm += 1;
        let resident =
            app.world().resource::<TesseraStats>().atlases.values().next().and_then(|s| s.resident_fraction);
        let ready = !o.streamed || o.walk || resident == Some(1.0);
        if (warm >= 120 && ready) || warm >= 2000 {
            break;
        }
    }
    let warm_s = started.elapsed().as_secs_f64();

    let mut wall = Vec::with_capacity(o.frames);
    let mut gpu_total = Vec::with_capacity(o.frames);
    let mut gpu_opaque = Vec::with_capacity(o.frames);
    let mut gpu_prepass = Vec::with_capacity(o.frames);
    let mut seen = std::collections::HashMap::new();
    let mut resident_sum = 0.0;
    let mut uploads = 0u64;
    let end = path.end_frame().max(1);
    for frame in 0..o.frames {
        if o.walk {
            let (transform, _) = camera_transform(&path.camera_at(frame as u32 % end));
            if let Some(mut t) = app.world_mut().get_mut::<Transform>(camera) {
                *t = transform;
            }
        }
        let t = Instant::now();
        app.update();
        wall.push(t.elapsed().as_secs_f64() * 1e3);
        // New GPU timings of this update (they arrive a few frames late).
        let store = app.world().resource::<DiagnosticsStore>();
        let (mut total, mut opaque, mut prepass, mut any) = (0.0, 0.0, 0.0, false);
        for d in store.iter() {
            let path = d.path().as_str();
            let Some(m) = d.measurement() else { continue };
            if !path.ends_with("elapsed_gpu") || seen.get(path) == Some(&m.time) {
                continue;
            }
            seen.insert(path.to_owned(), m.time);
            any = true;
            // Top-level spans only: nested ones are inside their parents.
            if path.matches('/').count() == 2 {
                total += m.value;
                if path.contains("prepass") {
                    prepass += m.value;
                }
            }
            if path.contains("main_opaque_pass_3d") {
                opaque += m.value;
            }
        }
        if any {
            gpu_total.push(total);
            gpu_opaque.push(opaque);
            gpu_prepass.push(prepass);
        }
        if let Some(s) = app.world().resource::<TesseraStats>().atlases.values().next() {
            resident_sum += s.resident_fraction.unwrap_or(0.0);
            uploads += s.stream.uploads as u64;
        }
    }
    if let Some(png) = &o.png {
        // An older file would end the wait below before the new one is written.
        let _ = std::fs::remove_file(png);
        app.world_mut()
            .spawn(Screenshot::image(frame_image))
            .observe(bevy::render::view::screenshot::save_to_disk(png.clone()));
        // The screenshot is taken in the next frame and written by a task after it.
        for _ in 0..3 {
            app.update();
        }
        let start = Instant::now();
        while !png.is_file() && start.elapsed().as_secs() < 10 {
            app.update();
        }
    }
    let stats_now = app.world().resource::<TesseraStats>().clone();
    let atlas_stats = stats_now.atlases.values().next();
    if let Some((atlas, why)) = stats_now.failed.iter().next() {
        return Err(format!("{atlas}: {why}").into());
    }
    let texture_bytes =
        if o.streamed { atlas_stats.map_or(0, |s| s.gpu_bytes) } else { resident_texture_bytes };
    let adapter =
        app.world().get_resource::<bevy::render::renderer::RenderAdapterInfo>().map(|i| i.name.clone());
    let spans: Vec<String> = {
        let store = app.world().resource::<DiagnosticsStore>();
        let mut v: Vec<String> = store
            .iter()
            .map(|d| d.path().as_str().to_owned())
            .filter(|p| p.ends_with("elapsed_gpu"))
            .collect();
        v.sort();
        v
    };
    let (wall_median, wall_p95) = stats(wall);
    let (gpu_median, gpu_p95) = stats(gpu_total.clone());
    let (opaque_median, opaque_p95) = stats(gpu_opaque);
    let (prepass_median, _) = stats(gpu_prepass);
    let json = format!(
        concat!(
            "{{\"level\":{:?},\"textures\":\"{}\",\"camera\":\"{}\",\"prepass\":{},\"size\":[{},{}],\"frames\":{},\"warm_up_frames\":{},",
            "\"warm_up_s\":{:.2},\"adapter\":{:?},\"wall_ms_median\":{},\"wall_ms_p95\":{},",
            "\"gpu_ms_median\":{},\"gpu_ms_p95\":{},\"gpu_frames\":{},\"opaque_pass_gpu_ms_median\":{},",
            "\"opaque_pass_gpu_ms_p95\":{},\"prepass_gpu_ms_median\":{},\"texture_bytes\":{},\"pool_mib\":{},\"mean_resident_fraction\":{:.4},",
            "\"uploads\":{},\"gpu_spans\":{:?}}}"
        ),
        o.gltf.as_deref().unwrap_or("dungeon"),
        if o.streamed { "streamed" } else { "resident" },
        if o.walk { "walk" } else { "still" },
        o.prepass,
        o.size.0,
        o.size.1,
        o.frames,
        warm,
        warm_s,
        adapter.unwrap_or_default(),
        num(wall_median),
        num(wall_p95),
        num(gpu_median),
        num(gpu_p95),
        gpu_total.len(),
        num(opaque_median),
        num(opaque_p95),
        num(prepass_median),
        texture_bytes,
        if o.streamed { o.pool_mib } else { 0 },
        if o.streamed { resident_sum / o.frames as f64 } else { 1.0 },
        uploads,
        spans,
    );
    println!("{json}");
    Ok(())
}
