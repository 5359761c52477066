//! The `alpha` scene: glTF's three alpha modes on the Earth images, written as a glTF
//! file with its PNG textures (so any glTF loader reads it, Bevy's included).
//!
//! - an opaque floor, 8 × 8 units, textured with a 2048² crop of the ETOPO1 relief;
//! - a pane of tinted glass in front of the camera (`BLEND`, alpha 0.47), a 1024² crop
//!   of Blue Marble;
//! - a fence behind it with diamond holes (`MASK`, cutoff 0.5), a 1024 × 256 strip of
//!   the shaded relief;
//! - a thin post without any material (a helper mesh: glTF's default material);
//! - a directional sun and a point lamp (`KHR_lights_punctual`).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::scene::catalog::CatalogError;

/// Where each texture comes from: the file in the data folder, the crop `[x, y, w, h]`.
const CROPS: [(&str, &str, [u32; 4]); 3] = [
    ("floor.png", "etopo1.jpg", [1600, 300, 2048, 2048]),
    ("glass.png", "bmng.jpg", [2000, 800, 1024, 1024]),
    ("fence.png", "shadedrelief.jpg", [3000, 1500, 1024, 256]),
];

/// Name of the glTF file [`write()`] makes.
pub const GLTF_NAME: &str = "alpha.gltf";

/// Writes the scene into `dir` (created if needed) from the images in `data`: the glTF
/// ([`GLTF_NAME`]), its buffer and three PNG textures. PNGs already there are kept, and
/// the glTF and its buffer are rewritten only when their content changes, so a bake
/// cache keyed on them stays current. Every file appears whole (written beside, then
/// renamed), also when several processes write the same folder.
pub fn write(data: &Path, dir: &Path) -> Result<PathBuf, CatalogError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CatalogError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (name, source, [x, y, w, h]) in CROPS {
        let from = data.join(source);
        if !from.is_file() {
            return Err(CatalogError::MissingData {
                what: "an Earth image of the alpha scene",
                path: from,
                fetch: "assets/fetch-data.sh",
            });
        }
        let to = dir.join(name);
        if to.is_file() {
            continue;
        }
        let image = image::open(&from)
            .map_err(|e| CatalogError::Image { path: from.clone(), message: e.to_string() })?;
        let mut crop = image.crop_imm(x, y, w, h).to_rgba8();
        if name == "fence.png" {
            // Diamond holes, 64 texels apart: alpha 0 inside, 255 on the lattice.
            for (px, py, p) in crop.enumerate_pixels_mut() {
                let (u, v) = ((px % 64) as i32 - 32, (py % 64) as i32 - 32);
                p.0[3] = if u.abs() + v.abs() < 22 { 0 } else { 255 };
            }
        }
        let tmp = temp_beside(&to);
        let saved = crop
            .save_with_format(&tmp, image::ImageFormat::Png)
            .map_err(|e| CatalogError::Image { path: tmp.clone(), message: e.to_string() });
        if let Err(e) = saved.and_then(|()| std::fs::rename(&tmp, &to).map_err(io(&to))) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    }
    let bin = quad_buffer();
    write_if_changed(&dir.join("alpha.bin"), &bin).map_err(io(&dir.join("alpha.bin")))?;
    let gltf = gltf_json(bin.len());
    let path = dir.join(GLTF_NAME);
    let text = serde_json::to_vec_pretty(&gltf).unwrap_or_default();
    write_if_changed(&path, &text).map_err(io(&path))?;
    Ok(path)
}

/// A temporary name beside `path`, unique to this process and call.
fn temp_beside(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = temp_beside(path);
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A unit quad in the XY plane (0..1) facing +Z: positions, normals, uvs (v down the
/// image), then six `u16` indices.
fn quad_buffer() -> Vec<u8> {
    let mut b = Vec::with_capacity(140);
    let floats: [&[f32]; 3] = [
        &[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        &[0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0],
        &[0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
    ];
    for v in floats.into_iter().flatten() {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for i in [0u16, 1, 2, 0, 2, 3] {
        b.extend_from_slice(&i.to_le_bytes());
    }
    b
}

fn gltf_json(bin_len: usize) -> serde_json::Value {
    let textured = |texture: usize| json!({"attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2}, "indices": 3, "material": texture});
    let plain = json!({"attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2}, "indices": 3});
    // Rotation of -90° about X: the quad's +Z normal turns up.
    let flat = [-std::f32::consts::FRAC_1_SQRT_2, 0.0, 0.0, std::f32::consts::FRAC_1_SQRT_2];
    json!({
        "asset": {"version": "2.0", "generator": "tessera alpha scene"},
        "extensionsUsed": ["KHR_lights_punctual"],
        "extensions": {"KHR_lights_punctual": {"lights": [
            {"type": "directional", "name": "Sun", "intensity": 3.0},
            {"type": "point", "name": "Lamp", "color": [1.0, 0.85, 0.6], "intensity": 40.0, "range": 12.0}
        ]}},
        "scene": 0,
        "scenes": [{"name": "alpha", "nodes": [0, 1, 2, 3, 4, 5]}],
        "nodes": [
            {"name": "floor", "mesh": 0, "rotation": flat, "scale": [8.0, 8.0, 1.0], "translation": [-4.0, 0.0, 4.0]},
            {"name": "glass", "mesh": 1, "scale": [3.0, 2.0, 1.0], "translation": [-1.5, 0.0, 0.5]},
            {"name": "fence", "mesh": 2, "scale": [6.0, 1.5, 1.0], "translation": [-3.0, 0.0, -1.5]},
            {"name": "helper post", "mesh": 3, "scale": [0.2, 2.5, 1.0], "translation": [2.4, 0.0, -0.5]},
            {"name": "sun", "rotation": [-0.369_643_8, 0.239_117_6, 0.099_045_8, 0.892_399_1],
             "extensions": {"KHR_lights_punctual": {"light": 0}}},
            {"name": "lamp", "translation": [0.0, 2.5, 1.5], "extensions": {"KHR_lights_punctual": {"light": 1}}}
        ],
        "meshes": [
            {"name": "floor", "primitives": [textured(0)]},
            {"name": "glass", "primitives": [textured(1)]},
            {"name": "fence", "primitives": [textured(2)]},
            {"name": "helper post", "primitives": [plain]}
        ],
        "materials": [
            {"name": "relief floor", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0},
             "metallicFactor": 0.0, "roughnessFactor": 0.8}},
            {"name": "tinted glass", "alphaMode": "BLEND", "doubleSided": true,
             "pbrMetallicRoughness": {"baseColorTexture": {"index": 1}, "baseColorFactor": [0.7, 0.85, 1.0, 0.47],
              "metallicFactor": 0.0, "roughnessFactor": 0.2}},
            {"name": "fence", "alphaMode": "MASK", "alphaCutoff": 0.5, "doubleSided": true,
             "pbrMetallicRoughness": {"baseColorTexture": {"index": 2}, "metallicFactor": 0.0, "roughnessFactor": 0.6}}
        ],
        "images": [{"uri": "floor.png"}, {"uri": "glass.png"}, {"uri": "fence.png"}],
        "textures": [{"source": 0}, {"source": 1}, {"source": 2}],
        "buffers": [{"uri": "alpha.bin", "byteLength": bin_len}],
        "bufferViews": [
            {"buffer": 0, "byteOffset": 0, "byteLength": 48},
            {"buffer": 0, "byteOffset": 48, "byteLength": 48},
            {"buffer": 0, "byteOffset": 96, "byteLength": 32},
            {"buffer": 0, "byteOffset": 128, "byteLength": 12}
        ],
        "accessors": [
            {"bufferView": 0, "componentType": 5126, "count": 4, "type": "VEC3", "min": [0.0, 0.0, 0.0], "max": [1.0, 1.0, 0.0]},
            {"bufferView": 1, "componentType": 5126, "count": 4, "type": "VEC3"},
            {"bufferView": 2, "componentType": 5126, "count": 4, "type": "VEC2"},
            {"bufferView": 3, "componentType": 5123, "count": 6, "type": "SCALAR"}
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn the_quad_buffer_matches_its_accessors() {
        assert_eq!(quad_buffer().len(), 140);
        let g = gltf_json(140);
        let views = g["bufferViews"].as_array().map_or(0, Vec::len);
        assert_eq!(views, 4);
        let end = g["bufferViews"][3]["byteOffset"].as_u64().unwrap_or(0) + 12;
        assert_eq!(end, 140);
    }
}
