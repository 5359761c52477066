//! glTF import (transforms, default material, lights, missing and broken textures) and
//! the scene bake into one stacked atlas with its manifest, on small generated glTFs.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::{Path, PathBuf};

use glam::Vec3;
use image::GenericImageView as _;
use serde_json::{Value, json};
use tessera_core::NoProgress;
use tessera_core::bake::BakeOptions;
use tessera_core::compare::compare;
use tessera_core::format::atlas::{Atlas, Wrap};
use tessera_core::format::codec::Codec;
use tessera_core::format::tile::TileId;
use tessera_core::scene::material_scene::{
    ImageRef, MaterialScene, SceneError, ScenePaths, globe_scene, load_gltf, load_gltf_with,
};
use tessera_core::scene::scene_bake::{SCENE_LAYERS, SceneManifest, bake_scene};

/// A unit quad in the XY plane (z = 0) facing +Z, uv (0,0) top-left.
fn quad_buffer() -> Vec<u8> {
    let mut b = Vec::new();
    for p in [[0.0f32, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]] {
        p.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
    }
    for uv in [[0.0f32, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]] {
        uv.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
    }
    for i in [0u16, 1, 2, 0, 2, 3] {
        b.extend_from_slice(&i.to_le_bytes());
    }
    b
}

/// A glTF with the quad mesh used by `nodes`, the given materials, images and samplers;
/// the buffer in `quad.bin` beside it. Mesh 0 uses material 0, mesh 1 has no material.
fn write_gltf(
    dir: &Path,
    nodes: Value,
    materials: Value,
    images: Value,
    textures: Value,
    samplers: Value,
) -> PathBuf {
    std::fs::write(dir.join("quad.bin"), quad_buffer()).unwrap();
    let node_count = nodes.as_array().unwrap().len();
    let prim = |material: Option<usize>| {
        let mut p = json!({"attributes": {"POSITION": 0, "TEXCOORD_0": 1}, "indices": 2});
        if let Some(m) = material {
            p["material"] = json!(m);
        }
        p
    };
    let gltf = json!({
        "asset": {"version": "2.0"},
        "extensionsUsed": ["KHR_lights_punctual"],
        "extensionsRequired": ["KHR_lights_punctual"],
        "extensions": {"KHR_lights_punctual": {"lights": [{"type": "directional", "name": "Sun"}]}},
        "scene": 0,
        "scenes": [{"nodes": (0..node_count).filter(|&i| i != 1).collect::<Vec<_>>()}],
        "nodes": nodes,
        "meshes": [{"name": "quad", "primitives": [prim(Some(0))]}, {"name": "plain", "primitives": [prim(None)]}],
        "materials": materials,
        "images": images,
        "textures": textures,
        "samplers": samplers,
        "buffers": [{"uri": "quad.bin", "byteLength": 92}],
        "bufferViews": [
            {"buffer": 0, "byteOffset": 0, "byteLength": 48},
            {"buffer": 0, "byteOffset": 48, "byteLength": 32},
            {"buffer": 0, "byteOffset": 80, "byteLength": 12}
        ],
        "accessors": [
            {"bufferView": 0, "componentType": 5126, "count": 4, "type": "VEC3",
             "min": [0.0, 0.0, 0.0], "max": [1.0, 1.0, 0.0]},
            {"bufferView": 1, "componentType": 5126, "count": 4, "type": "VEC2"},
            {"bufferView": 2, "componentType": 5123, "count": 6, "type": "SCALAR"}
        ]
    });
    let path = dir.join("scene.gltf");
    std::fs::write(&path, serde_json::to_vec_pretty(&gltf).unwrap()).unwrap();
    path
}

fn texel_of(x: u32, y: u32, seed: u32) -> [u8; 4] {
    [(x * 7 + seed) as u8, (y * 13 + seed) as u8, ((x ^ y) * 3) as u8, 255]
}

fn write_png(path: &Path, w: u32, h: u32, seed: u32) {
    image::RgbaImage::from_fn(w, h, |x, y| image::Rgba(texel_of(x, y, seed))).save(path).unwrap();
}

fn one_material(texture: Option<usize>) -> Value {
    let mut pbr = json!({"metallicFactor": 0.25, "roughnessFactor": 0.75});
    if let Some(t) = texture {
        pbr["baseColorTexture"] = json!({"index": t});
    }
    json!([{"name": "painted", "pbrMetallicRoughness": pbr, "alphaMode": "MASK", "doubleSided": true}])
}

#[test]
fn transforms_lights_and_default_material() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = json!([
        // Parent: translate (10, 0, 0), scale 2; child 1 moves up by 1 (in parent units).
        {"name": "parent", "translation": [10.0, 0.0, 0.0], "scale": [2.0, 2.0, 2.0], "children": [1]},
        {"name": "child", "translation": [0.0, 1.0, 0.0], "mesh": 0},
        // Mirrored: the winding must flip so the face still points outwards.
        {"name": "mirror", "scale": [-1.0, 1.0, 1.0], "mesh": 1},
        // The sun, turned 90° about X: local -Z becomes world -Y (light shining down).
        {"name": "sun", "rotation": [-0.70710677, 0.0, 0.0, 0.70710677],
         "extensions": {"KHR_lights_punctual": {"light": 0}}}
    ]);
    let path = write_gltf(dir.path(), nodes, one_material(None), json!([]), json!([]), json!([]));
    let scene = load_gltf(&path).unwrap();
    assert_eq!(scene.meshes.len(), 2);
    let quad = &scene.meshes[0];
    assert_eq!(quad.name, "quad");
    // Vertex 2 (1, 1, 0) → child (1, 2, 0) → parent (12, 4, 0).
    assert_eq!(quad.mesh.vertices[2].position, [12.0, 4.0, 0.0]);
    assert_eq!(quad.mesh.vertices[2].uv, [1.0, 0.0]);
    assert_eq!(quad.mesh.vertices[0].normal, [0.0, 0.0, 1.0], "missing normals computed");
    assert_eq!(quad.material, 0);
    let mirror = &scene.meshes[1];
    assert_eq!(mirror.mesh.vertices[1].position, [-1.0, 0.0, 0.0]);
    assert_eq!(mirror.mesh.indices[..3], [0, 2, 1], "winding flipped under a negative determinant");
    assert_eq!(mirror.mesh.vertices[0].normal, [0.0, 0.0, 1.0]);
    // The primitive without a material gets a default one, appended.
    assert_eq!(scene.materials.len(), 2);
    assert_eq!(mirror.material, 1);
    assert_eq!(scene.materials[1].name, "default");
    let m = &scene.materials[0];
    assert_eq!((m.name.as_str(), m.metallic_factor, m.roughness_factor), ("painted", 0.25, 0.75));
    assert_eq!((m.alpha_cutoff, m.double_sided), (Some(0.5), true));
    assert_eq!(scene.bounds_min, Vec3::new(-1.0, 0.0, 0.0));
    assert_eq!(scene.bounds_max, Vec3::new(12.0, 4.0, 0.0));
    let sun = scene.sun_direction.unwrap();
    assert!((sun - Vec3::NEG_Y).length() < 1e-5, "{sun}");
}

fn textured(dir: &Path, uri: &str) -> PathBuf {
    let nodes = json!([{"mesh": 0}, {"name": "unused"}]);
    write_gltf(
        dir,
        nodes,
        one_material(Some(0)),
        json!([{"uri": uri}]),
        json!([{"source": 0, "sampler": 0}]),
        json!([{"wrapS": 33648, "wrapT": 33071}]),
    )
}

#[test]
fn textures_resolve_next_to_the_gltf() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tex")).unwrap();
    write_png(&dir.path().join("tex/my wall.png"), 4, 4, 0);
    let scene = load_gltf(&textured(dir.path(), "tex/my%20wall.png")).unwrap();
    let t = scene.materials[0].base_color.as_ref().unwrap();
    assert_eq!(t.image, ImageRef::File(dir.path().join("tex/my wall.png")));
    assert_eq!(t.wrap, [Wrap::Repeat, Wrap::Clamp], "mirrored repeat → repeat, clamp to edge → clamp");
}

#[test]
fn a_missing_texture_names_the_file_and_the_material() {
    let dir = tempfile::tempdir().unwrap();
    let err = load_gltf(&textured(dir.path(), "gone.png")).unwrap_err();
    assert!(matches!(err, SceneError::MissingTexture { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("gone.png") && msg.contains("'painted'"), "{msg}");
}

#[test]
fn a_broken_png_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("broken.png"), b"\x89PNG\r\n\x1a\nthis is not a png").unwrap();
    let err = load_gltf(&textured(dir.path(), "broken.png")).unwrap_err();
    assert!(matches!(err, SceneError::BadTexture { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("broken.png") && msg.contains("'painted'"), "{msg}");
}

#[test]
fn a_missing_bin_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path =
        write_gltf(dir.path(), json!([{"mesh": 0}, {}]), one_material(None), json!([]), json!([]), json!([]));
    std::fs::remove_file(dir.path().join("quad.bin")).unwrap();
    let err = load_gltf(&path).unwrap_err();
    assert!(err.to_string().contains("quad.bin") && err.to_string().contains("not found"), "{err}");
}

#[test]
fn a_two_material_scene_bakes_into_one_stacked_atlas() {
    let dir = tempfile::tempdir().unwrap();
    // Material 0: 32² repeat texture + 16² normal map (resampled to 32²); material 1:
    // 16x48 clamp texture; material 2 shares material 0's images (and rectangle); 3: none.
    write_png(&dir.path().join("a.png"), 32, 32, 1);
    write_png(&dir.path().join("a_n.png"), 16, 16, 2);
    write_png(&dir.path().join("b.png"), 16, 48, 3);
    let materials = json!([
        {"name": "a", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}, "normalTexture": {"index": 1}},
        {"name": "b", "pbrMetallicRoughness": {"baseColorTexture": {"index": 2}}, "alphaMode": "BLEND"},
        {"name": "a2", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}, "normalTexture": {"index": 1}},
        {"name": "plain", "pbrMetallicRoughness": {"baseColorFactor": [1.0, 0.0, 0.0, 1.0]}}
    ]);
    let path = write_gltf(
        dir.path(),
        json!([{"mesh": 0}, {}]),
        materials,
        json!([{"uri": "a.png"}, {"uri": "a_n.png"}, {"uri": "b.png"}]),
        json!([{"source": 0, "sampler": 0}, {"source": 1, "sampler": 0}, {"source": 2, "sampler": 1}]),
        json!([{"wrapS": 10497, "wrapT": 10497}, {"wrapS": 33071, "wrapT": 33071}]),
    );
    let scene = load_gltf(&path).unwrap();
    let out = dir.path().join("scene.tsa");
    let opts = BakeOptions { tile_size: 16, border: 2, codec: Codec::Raw, ..BakeOptions::default() };
    let (report, manifest) = bake_scene(&scene, &out, &opts, &NoProgress).unwrap();
    assert_eq!(report.layers.len(), 3);
    let atlas = Atlas::open(&out).unwrap();
    assert!(atlas.is_stacked());
    let names: Vec<_> = atlas.layers().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, SCENE_LAYERS);
    // The manifest was written beside the atlas and reads back the same.
    assert_eq!(SceneManifest::path_for(&out), dir.path().join("scene.scene.json"));
    assert_eq!(SceneManifest::load(&SceneManifest::path_for(&out)).unwrap(), manifest);
    assert_eq!(manifest.gltf.as_deref(), Some("scene.gltf"));
    assert_eq!(
        (manifest.width, manifest.height),
        (atlas.layers()[0].layout.width(), atlas.layers()[0].layout.height())
    );
    let [ra, rb, ra2, rp] = [0, 1, 2, 3].map(|i| manifest.materials[i].rect);
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra2, Some(ra), "same images share a rectangle");
    assert_eq!(rp, None);
    assert_eq!(manifest.materials[3].base_color_factor, [1.0, 0.0, 0.0, 1.0]);
    assert_eq!([ra[2], ra[3], rb[2], rb[3]], [32, 32, 16, 48]);
    let overlap =
        ra[0] < rb[0] + rb[2] && rb[0] < ra[0] + ra[2] && ra[1] < rb[1] + rb[3] && rb[1] < ra[1] + ra[3];
    assert!(!overlap, "{ra:?} {rb:?}");
    assert_eq!(manifest.materials[0].wrap, [Wrap::Repeat; 2]);
    assert_eq!(manifest.materials[1].wrap, [Wrap::Clamp; 2]);
    assert!(manifest.materials[0].has_normal_map && !manifest.materials[1].has_normal_map);
    let modes: Vec<_> = manifest.materials.iter().map(|m| (m.blend, m.alpha_cutoff)).collect();
    assert_eq!(modes, [(false, None), (true, None), (false, None), (false, None)], "alpha modes kept");
    assert_eq!(manifest.materials[0].max_mip, 1, "32² at a multiple of 32 owns whole tiles down to mip 1");

    // The top-left tile of rectangle a: payload = a.png, left border wraps to a.png's right edge.
    let p = 20u32;
    let tile = atlas.decode_tile(TileId::new(0, 0, ra[0] / 16, ra[1] / 16)).unwrap();
    let at = |i: u32, j: u32| {
        let s = ((j * p + i) * 4) as usize;
        [tile[s], tile[s + 1], tile[s + 2], tile[s + 3]]
    };
    assert_eq!(at(2 + 5, 2 + 3), texel_of(5, 3, 1));
    assert_eq!(at(0, 2 + 3), texel_of(30, 3, 1), "repeat border wraps inside the rectangle");
    assert_eq!(at(2 + 5, 0), texel_of(5, 30, 1));
    // Rectangle b clamps: its top border repeats its first row.
    let tile_b = atlas.decode_tile(TileId::new(0, 0, rb[0] / 16, rb[1] / 16)).unwrap();
    let s = ((2 + 4) * 4) as usize; // stored (4 + 2, 0)
    assert_eq!(tile_b[s..s + 4], texel_of(4, 0, 3));
    // The untextured parts of the normal layer are flat; rectangle b has no normal map.
    let n = atlas.decode_tile(TileId::new(1, 0, rb[0] / 16, rb[1] / 16)).unwrap();
    assert_eq!(n[0..4], [128, 128, 255, 255]);
    let orm = atlas.decode_tile(TileId::new(2, 0, ra[0] / 16, ra[1] / 16)).unwrap();
    assert!(orm.iter().all(|&v| v == 255), "no metallic-roughness texture: white");
}

#[test]
fn etc1s_scenes_store_normals_and_orm_as_uastc() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("earth.png");
    write_png(&img, 64, 32, 5);
    let scene = globe_scene(&img, 1.0, 16, 8).unwrap();
    assert_eq!(scene.materials[0].base_color.as_ref().unwrap().wrap, [Wrap::Repeat, Wrap::Clamp]);
    let out = dir.path().join("globe.tsa");
    let opts = BakeOptions { tile_size: 16, border: 2, codec: Codec::Etc1s, ..BakeOptions::default() };
    let (_, manifest) = bake_scene(&scene, &out, &opts, &NoProgress).unwrap();
    assert_eq!(manifest.gltf, None);
    assert_eq!(manifest.materials[0].rect, Some([0, 0, 64, 32]));
    let atlas = Atlas::open(&out).unwrap();
    let codecs: Vec<_> = atlas.layers().iter().map(|l| l.codec).collect();
    assert_eq!(codecs, [Codec::Etc1s, Codec::Uastc, Codec::Uastc]);
}

/// Loads `path` on a thread and waits at most ten seconds, so that a hang fails the test
/// instead of stalling the run.
fn load_within_timeout(path: &Path, paths: ScenePaths) -> Result<MaterialScene, SceneError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(load_gltf_with(&path, paths));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("glTF import hung (over 10 s)")
}

/// Rewrites the glTF at `path` with `edit` applied to its JSON.
fn edit_gltf(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn node_cycles_and_shared_nodes_are_prompt_errors() {
    // (nodes, what the message must say); node 1 is never a scene root (see write_gltf).
    let cases = [
        (json!([{"name": "loop", "mesh": 0, "children": [0]}, {}]), "node 0 'loop' is its own child"),
        (json!([{"children": [1]}, {"mesh": 0, "children": [0]}]), "is its own ancestor"),
        (json!([{"mesh": 0, "children": [2]}, {}, {"mesh": 1, "children": [0]}]), "is its own ancestor"),
        (json!([{"children": [3]}, {}, {"children": [3]}, {"mesh": 0}]), "node 3 has two parents"),
        // A cycle the scene never reaches is still a broken file.
        (json!([{"mesh": 0}, {"name": "stray", "children": [1]}]), "node 1 'stray' is its own child"),
    ];
    for (nodes, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = write_gltf(dir.path(), nodes.clone(), one_material(None), json!([]), json!([]), json!([]));
        let err = load_within_timeout(&path, ScenePaths::Confined).unwrap_err();
        assert!(matches!(err, SceneError::NodeHierarchy { .. }), "{nodes}: {err}");
        assert!(err.to_string().contains(expected), "{nodes}: {err}");
    }
    // A root listed twice would instance its subtree twice.
    let dir = tempfile::tempdir().unwrap();
    let path =
        write_gltf(dir.path(), json!([{"mesh": 0}, {}]), one_material(None), json!([]), json!([]), json!([]));
    edit_gltf(&path, |v| v["scenes"][0]["nodes"] = json!([0, 0]));
    let err = load_within_timeout(&path, ScenePaths::Confined).unwrap_err();
    assert!(err.to_string().contains("node 0 is reached twice"), "{err}");
}

/// `root/scene/` holds the glTF (with `quad.bin` and `textures/a.png`); `root/outside/`
/// holds `secret.bin` (a copy of the quad buffer) and `secret.png`. Returns the glTF.
fn confined_layout(root: &Path, image_uri: &str) -> PathBuf {
    let scene = root.join("scene");
    let outside = root.join("outside");
    std::fs::create_dir_all(scene.join("textures")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.bin"), quad_buffer()).unwrap();
    write_png(&outside.join("secret.png"), 4, 4, 9);
    write_png(&scene.join("textures/a.png"), 4, 4, 1);
    let nodes = json!([{"mesh": 0}, {}]);
    write_gltf(
        &scene,
        nodes,
        one_material(Some(0)),
        json!([{"uri": image_uri}]),
        json!([{"source": 0}]),
        json!([]),
    )
}

#[test]
fn uris_outside_the_scene_folder_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("outside");
    let abs = |name: &str| outside.join(name).display().to_string();
    // Every way out, for a buffer and for an image.
    let escapes = |name: &str| {
        vec![
            format!("../outside/{name}"),
            format!("%2e%2e/outside/{name}"),
            format!("%2E%2E%2Foutside%2F{name}"),
            format!("textures/../../outside/{name}"),
            abs(name),
            format!("file://{}", abs(name)),
            format!("file://localhost{}", abs(name)),
            format!("FILE:{}", abs(name)),
            "link_dir/".to_string() + name,
            format!("link_{name}"),
        ]
    };
    for (kind, name) in [("buffer", "secret.bin"), ("image", "secret.png")] {
        for uri in escapes(name) {
            let gltf = confined_layout(root.path(), "textures/a.png");
            let scene = gltf.parent().unwrap();
            let _ = std::fs::remove_file(scene.join("link_dir"));
            let _ = std::fs::remove_file(scene.join(format!("link_{name}")));
            std::os::unix::fs::symlink(&outside, scene.join("link_dir")).unwrap();
            std::os::unix::fs::symlink(outside.join(name), scene.join(format!("link_{name}"))).unwrap();
            edit_gltf(&gltf, |v| match kind {
                "buffer" => v["buffers"][0]["uri"] = json!(uri),
                _ => v["images"][0]["uri"] = json!(uri),
            });
            let err = load_within_timeout(&gltf, ScenePaths::Confined).unwrap_err();
            assert!(matches!(err, SceneError::OutsidePath { .. }), "{kind} '{uri}': {err}");
            let msg = err.to_string();
            assert!(msg.contains(&uri) && msg.contains(kind), "{msg}");
            // Nothing about the refused file: not its size, not its contents.
            let size = std::fs::metadata(outside.join(name)).unwrap().len().to_string();
            assert!(!msg.contains(&size) && !msg.contains("bytes"), "{msg}");
            // Allowed explicitly, the same URIs load.
            let loaded = load_within_timeout(&gltf, ScenePaths::Anywhere);
            assert!(loaded.is_ok(), "{kind} '{uri}' with ScenePaths::Anywhere: {:?}", loaded.err());
        }
    }
    // Other schemes are never read.
    let gltf = confined_layout(root.path(), "textures/a.png");
    edit_gltf(&gltf, |v| v["buffers"][0]["uri"] = json!("https://example.com/quad.bin"));
    let err = load_within_timeout(&gltf, ScenePaths::Anywhere).unwrap_err();
    assert!(err.to_string().contains("not supported"), "{err}");
}

#[test]
fn subfolders_data_uris_and_inner_links_stay_allowed() {
    let root = tempfile::tempdir().unwrap();
    let gltf = confined_layout(root.path(), "textures/a.png");
    let scene_dir = gltf.parent().unwrap().to_path_buf();
    let scene = load_within_timeout(&gltf, ScenePaths::Confined).unwrap();
    let t = scene.materials[0].base_color.as_ref().unwrap();
    assert_eq!(t.image, ImageRef::File(scene_dir.join("textures/a.png")));
    // A data: buffer, `./`, a `..` that stays inside, and a link within the folder.
    let b64 = {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bytes = quad_buffer();
        let mut s = String::new();
        for c in bytes.chunks(3) {
            let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for k in 0..=c.len() {
                s.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            }
        }
        s
    };
    std::os::unix::fs::symlink(scene_dir.join("textures/a.png"), scene_dir.join("inner.png")).unwrap();
    for image_uri in ["./textures/a.png", "textures/../textures/a.png", "inner.png"] {
        edit_gltf(&gltf, |v| {
            v["buffers"][0]["uri"] = json!(format!("data:application/octet-stream;base64,{b64}"));
            v["images"][0]["uri"] = json!(image_uri);
        });
        let scene = load_within_timeout(&gltf, ScenePaths::Confined).unwrap();
        assert_eq!(scene.meshes[0].mesh.vertices.len(), 4, "{image_uri}");
    }
}

#[test]
fn the_bake_refuses_an_image_swapped_for_an_outside_link() {
    let root = tempfile::tempdir().unwrap();
    let gltf = confined_layout(root.path(), "textures/a.png");
    let scene = load_gltf(&gltf).unwrap();
    let image = gltf.parent().unwrap().join("textures/a.png");
    std::fs::remove_file(&image).unwrap();
    std::os::unix::fs::symlink(root.path().join("outside/secret.png"), &image).unwrap();
    let opts = BakeOptions { tile_size: 16, border: 2, codec: Codec::Raw, ..BakeOptions::default() };
    let err = bake_scene(&scene, &root.path().join("out.tsa"), &opts, &NoProgress).unwrap_err();
    assert!(matches!(err, SceneError::OutsidePath { .. }), "{err}");
}

/// A scene texture gets the same checks as a baked image file: a JPEG cut short is an
/// error naming it, never grey texels in the atlas.
#[test]
fn a_cut_jpeg_texture_fails_the_scene_bake() {
    let dir = tempfile::tempdir().unwrap();
    let img = image::RgbImage::from_fn(64, 64, |x, y| image::Rgb([(x * 4) as u8, (y * 4) as u8, 90]));
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90).encode_image(&img).unwrap();
    std::fs::write(dir.path().join("cut.jpg"), &jpeg[..jpeg.len() / 2]).unwrap();
    let scene = load_gltf(&textured(dir.path(), "cut.jpg")).unwrap();
    let out = dir.path().join("scene.tsa");
    let opts = BakeOptions { tile_size: 16, border: 2, ..BakeOptions::default() };
    let err = bake_scene(&scene, &out, &opts, &NoProgress).unwrap_err().to_string();
    assert!(err.contains("cut.jpg") && err.contains("truncated"), "{err}");
    assert!(!out.exists(), "no atlas is written from a cut texture");
}

/// A `side²` crop of the Blue Marble fetched by `assets/fetch-data.sh`.
fn photo(side: u32) -> image::RgbaImage {
    let path = tessera_core::bake::source::data_dir().join("bmng.jpg");
    assert!(path.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", path.display());
    image::open(&path).unwrap().to_rgba8().view(2600, 600, side, side).to_image()
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let v = c.iter().enumerate().fold(0u32, |v, (i, &b)| v | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            s.push(if i <= c.len() { ABC[(v >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    s
}

/// Mip 0 of the albedo layer's first rectangle of the scene glTF at `path`, baked losslessly.
fn baked_albedo(path: &Path, side: u32) -> Result<Vec<u8>, SceneError> {
    let scene = load_gltf(path)?;
    let out = path.with_extension("tsa");
    let opts = BakeOptions { tile_size: 64, codec: Codec::Lz4, ..BakeOptions::default() };
    let (_, manifest) = bake_scene(&scene, &out, &opts, &NoProgress)?;
    let rect = manifest.materials[0].rect.unwrap();
    assert_eq!(rect[2..], [side, side]);
    Ok(Atlas::open(&out).unwrap().read_texels(0, 0, [rect[0], rect[1], side, side]).unwrap())
}

#[test]
fn khr_texture_basisu_scenes_bake_from_their_ktx2_images() {
    use tessera_core::bake::ktx2::encode_ktx2;
    use tessera_core::format::atlas::ColorSpace;
    use tessera_core::format::basis::BasisMode;
    use tessera_core::format::codec::EncodeOptions;

    let dir = tempfile::tempdir().unwrap();
    let side = 128;
    let img = photo(side);
    img.save(dir.path().join("albedo.png")).unwrap();
    let ktx2 = |mode, color| {
        encode_ktx2(img.as_raw(), side, side, mode, &EncodeOptions { color, ..EncodeOptions::default() })
            .unwrap()
    };
    std::fs::write(dir.path().join("albedo-uastc.ktx2"), ktx2(BasisMode::Uastc, ColorSpace::Srgb)).unwrap();
    std::fs::write(dir.path().join("albedo-etc1s.ktx2"), ktx2(BasisMode::Etc1s, ColorSpace::Srgb)).unwrap();
    std::fs::write(dir.path().join("normal.ktx2"), ktx2(BasisMode::Uastc, ColorSpace::Linear)).unwrap();
    let sub = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        for f in ["albedo.png", "albedo-uastc.ktx2", "albedo-etc1s.ktx2", "normal.ktx2"] {
            std::fs::copy(dir.path().join(f), d.join(f)).unwrap();
        }
        d
    };
    let materials = json!([{"name": "m", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}},
                            "normalTexture": {"index": 1}}]);
    let images = json!([{"uri": "albedo.png"}, {"uri": "albedo-uastc.ktx2"}, {"uri": "normal.ktx2"},
                        {"uri": "albedo-etc1s.ktx2"}]);
    let basisu = |source: usize| json!({"KHR_texture_basisu": {"source": source}});
    let write = |d: &Path, textures: Value, required: bool| {
        let path =
            write_gltf(d, json!([{"mesh": 0}, {}]), materials.clone(), images.clone(), textures, json!([]));
        edit_gltf(&path, |v| {
            v["extensionsUsed"].as_array_mut().unwrap().push(json!("KHR_texture_basisu"));
            if required {
                v["extensionsRequired"].as_array_mut().unwrap().push(json!("KHR_texture_basisu"));
            }
        });
        path
    };

    // The PNG alone: the reference.
    let png = write(&sub("png"), json!([{"source": 0}, {"extensions": basisu(2)}]), false);
    let reference = baked_albedo(&png, side).unwrap();
    // With a PNG fallback, the KTX2 image is the one used.
    let d = sub("fallback");
    let fallback =
        write(&d, json!([{"source": 0, "extensions": basisu(1)}, {"extensions": basisu(2)}]), false);
    let scene = load_gltf(&fallback).unwrap();
    let albedo = &scene.materials[0].base_color.as_ref().unwrap().image;
    assert_eq!(*albedo, ImageRef::File(d.join("albedo-uastc.ktx2")));
    let uastc = compare(&baked_albedo(&fallback, side).unwrap(), &reference).psnr_db;
    // KTX2 only, the extension required: UASTC and ETC1S.
    let only = write(&sub("only"), json!([{"extensions": basisu(3)}, {"extensions": basisu(2)}]), true);
    let etc1s = compare(&baked_albedo(&only, side).unwrap(), &reference).psnr_db;
    // Stated floors for this photograph: UASTC 40 dB, ETC1S 30 dB.
    eprintln!("KTX2 albedo against the PNG: UASTC {uastc:.1} dB, ETC1S {etc1s:.1} dB");
    assert!(uastc > 40.0 && etc1s > 30.0, "UASTC {uastc:.1} dB, ETC1S {etc1s:.1} dB against the PNG");

    // Embedded in a data URI.
    let d = sub("embedded");
    let data =
        format!("data:image/ktx2;base64,{}", base64(&std::fs::read(d.join("albedo-uastc.ktx2")).unwrap()));
    let embedded = write(&d, json!([{"extensions": basisu(1)}, {"extensions": basisu(2)}]), true);
    edit_gltf(&embedded, |v| v["images"][1] = json!({"uri": data, "mimeType": "image/ktx2"}));
    let e = compare(&baked_albedo(&embedded, side).unwrap(), &reference).psnr_db;
    assert!((e - uastc).abs() < 1e-9, "the embedded KTX2 bakes like the file: {e} vs {uastc}");

    // Errors: a normal map tagged sRGB, an image index past the list, an unknown
    // required extension.
    let wrong = write(&sub("wrong"), json!([{"extensions": basisu(1)}, {"extensions": basisu(3)}]), true);
    let err = baked_albedo(&wrong, side).unwrap_err().to_string();
    assert!(
        err.contains("albedo-etc1s.ktx2") && err.contains("normal map") && err.contains("linear"),
        "{err}"
    );
    let bad = write(&sub("bad"), json!([{"extensions": basisu(9)}, {"extensions": basisu(2)}]), true);
    let err = load_gltf(&bad).unwrap_err().to_string();
    assert!(err.contains("image 9 does not exist"), "{err}");
    edit_gltf(&only, |v| v["extensionsRequired"].as_array_mut().unwrap().push(json!("EXT_not_known")));
    let err = load_gltf(&only).unwrap_err().to_string();
    assert!(err.contains("EXT_not_known"), "{err}");
}
