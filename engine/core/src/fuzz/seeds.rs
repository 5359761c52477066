//! Seed corpora for the fuzz targets, made with the engine's own writers: tiny atlases in
//! every codec, Basis tiles, glTF and GLB scenes, camera paths and PNG and JPEG images of
//! every pixel layout the baker accepts (and TIFFs of each compression, some written in
//! `tiff_codec_seeds`). Each seed is valid and small (under 20 KB), so
//! a fuzzer starts deep inside each reader and runs fast.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::{
    ATLAS_REPAIR_HEADER, ATLAS_REPAIR_TILES, ATLAS_SPLIT, BASIS_REPAIR, BASIS_UASTC, BASIS_VERIFIED, Target,
};
use crate::NoProgress;
use crate::bake::shard::{MergeForm, Shard, merge_shards};
use crate::bake::source::{Generated, ImageSource, RowSource};
use crate::bake::{BakeInput, BakeOptions, bake};
use crate::format::atlas::{ColorSpace, GeoReference, LayerMeta, Wrap};
use crate::format::basis::{self, BasisMode};
use crate::format::codec::{Codec, EncodeOptions};
use crate::scene::camera::{CameraPath, PRESETS, SCENE_PRESETS};

/// One seed: a file name (unique within its target) and its bytes.
pub type Seed = (String, Vec<u8>);

/// The seed corpus of `target`. Building the atlas and Basis seeds encodes a few tiny
/// Basis tiles (well under a second in all).
pub fn seeds(target: Target) -> std::io::Result<Vec<Seed>> {
    match target {
        Target::Atlas => atlas_seeds(),
        Target::Basis => basis_seeds(),
        Target::Gltf => Ok(gltf_seeds()),
        Target::Camera => Ok(camera_seeds()),
        Target::Image => Ok(image_seeds()),
    }
}

/// Writes the seed corpus of `target` into `dir` (created if needed); returns how many
/// files were written.
pub fn write_seeds(target: Target, dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let seeds = seeds(target)?;
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(seeds.len())
}

/// Writes the files the glTF seeds refer to beside the scene: `buffer.bin` (a quad's
/// vertices and indices), `tex.png` and `tex.jpg`.
pub fn write_gltf_siblings(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("buffer.bin"), quad_buffer())?;
    std::fs::write(dir.join("tex.png"), png_rgba8(8, 8))?;
    std::fs::write(dir.join("tex.jpg"), jpeg(&gradient_rgb(8, 8)))?;
    Ok(())
}

/// A folder of its own under the system temporary folder, deleted on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tessera-seeds-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// RGBA8 texels of a `w × h` pattern with varied colour and alpha.
fn pattern(w: u32, h: u32, opaque: bool) -> Vec<u8> {
    (0..w * h)
        .flat_map(|i| {
            let (x, y) = (i % w, i / w);
            let a = if opaque { 255 } else { (x * 255 / w.max(1)) as u8 };
            [(x * 37 + y * 11) as u8, (y * 23) as u8, ((x ^ y) * 16) as u8, a]
        })
        .collect()
}

/// A generated texture that says where it lies, as a GeoTIFF does: its bake writes a
/// metadata record.
struct Georeferenced(Generated);

impl RowSource for Georeferenced {
    fn size(&self) -> (u32, u32) {
        self.0.size()
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_rows(y0, out)
    }
    fn layer_meta(&self) -> LayerMeta {
        let geo = GeoReference {
            geotransform: Some([500_000.0, 0.5, 0.0, 4_000_000.0, 0.0, -0.5]),
            epsg: Some(32631),
            ..GeoReference::default()
        };
        LayerMeta { geo: Some(geo), ..LayerMeta::default() }
    }
}

fn atlas_seeds() -> std::io::Result<Vec<Seed>> {
    let dir = TempDir::new()?;
    let layer = |name: &str, w: u32, h: u32, codec: Codec, wrap: Wrap, color: ColorSpace| BakeInput {
        name: name.into(),
        source: if codec == Codec::Raw {
            Box::new(ImageSource::from_rgba(w, h, pattern(w, h, false)))
        } else {
            Box::new(Generated::with_cell(w, h, 8))
        },
        wrap,
        color,
        codec: Some(codec),
        regions: Vec::new(),
    };
    let srgb = ColorSpace::Srgb;
    // 40×28 texels in 16² tiles with a 2-texel border: 6 + 2 + 1 tiles of 20².
    let mut bakes: Vec<(&str, Vec<BakeInput>, bool)> = Vec::new();
    // Codec::UastcLz4 bakes as Codec::Uastc does: the UASTC seed holds both kinds of tile.
    for codec in [Codec::Raw, Codec::Lz4, Codec::Etc1s, Codec::Uastc] {
        let name = format!("layer-{codec}");
        bakes.push((codec.name(), vec![layer(&name, 40, 28, codec, Wrap::Clamp, srgb)], false));
    }
    bakes.push((
        "stacked",
        vec![
            layer("albedo", 24, 20, Codec::Lz4, Wrap::Repeat, srgb),
            layer("normal", 24, 20, Codec::Raw, Wrap::Clamp, ColorSpace::Linear),
        ],
        true,
    ));
    bakes.push((
        "two-layers",
        vec![
            layer("a", 17, 33, Codec::Lz4, Wrap::Repeat, srgb),
            layer("b", 20, 9, Codec::Etc1s, Wrap::Clamp, ColorSpace::Linear),
        ],
        false,
    ));
    let mut seeds = Vec::new();
    // A georeferenced layer: the metadata record (flag META), in both format versions.
    for version in [1, 2] {
        let path = dir.0.join(format!("geo-v{version}.tsa"));
        let opts =
            BakeOptions { tile_size: 16, border: 2, format_version: version, ..BakeOptions::default() };
        let input = BakeInput::new("geo", Georeferenced(Generated::with_cell(40, 28, 8)));
        bake(vec![input], &path, &opts, &NoProgress).map_err(std::io::Error::other)?;
        let control = ATLAS_REPAIR_HEADER | ATLAS_REPAIR_TILES;
        seeds.push((format!("geo-v{version}.tsa"), [&[control], std::fs::read(&path)?.as_slice()].concat()));
    }
    // A split atlas (a one-shard bake merged): its index object, then its data object.
    let split = dir.0.join("split");
    std::fs::create_dir_all(&split)?;
    let index = split.join("input.tsa");
    let opts = BakeOptions { tile_size: 16, border: 2, shard: Shard::new(0, 1), ..BakeOptions::default() };
    let inputs = vec![
        layer("a", 40, 28, Codec::Lz4, Wrap::Clamp, srgb),
        layer("b", 20, 9, Codec::Etc1s, Wrap::Repeat, ColorSpace::Linear),
    ];
    bake(inputs, &index, &opts, &NoProgress).map_err(std::io::Error::other)?;
    merge_shards(&index, MergeForm::Split, &NoProgress).map_err(std::io::Error::other)?;
    let part = std::fs::read(split.join("input.tsa.shards/0-of-1.part"))?;
    let control = ATLAS_REPAIR_HEADER | ATLAS_REPAIR_TILES | ATLAS_SPLIT;
    seeds.push((
        "split.tsa".into(),
        [&[control], std::fs::read(&index)?.as_slice(), part.as_slice()].concat(),
    ));
    for (name, inputs, stacked) in bakes {
        let path = dir.0.join(format!("{name}.tsa"));
        // RDO makes UASTC tiles compressible, so that some are stored as `uastc+lz4`.
        let uastc_rdo = (name == "uastc").then_some(4.0);
        let opts = BakeOptions { tile_size: 16, border: 2, stacked, uastc_rdo, ..BakeOptions::default() };
        bake(inputs, &path, &opts, &NoProgress).map_err(std::io::Error::other)?;
        let file = std::fs::read(&path)?;
        let control = ATLAS_REPAIR_HEADER | ATLAS_REPAIR_TILES;
        seeds.push((format!("{name}.tsa"), [&[control], file.as_slice()].concat()));
        if name == "lz4" {
            // The same file taken as it is: mutations then meet the checksum checks.
            seeds.push(("lz4-no-repair.tsa".into(), [&[0], file.as_slice()].concat()));
        }
        if name == "lz4" || name == "stacked" {
            // Format version 1 too, which stays readable.
            let v1 = dir.0.join(format!("{name}-v1.tsa"));
            let opts = BakeOptions { format_version: 1, ..opts };
            let inputs = if stacked {
                vec![
                    layer("albedo", 24, 20, Codec::Lz4, Wrap::Repeat, srgb),
                    layer("normal", 24, 20, Codec::Raw, Wrap::Clamp, ColorSpace::Linear),
                ]
            } else {
                vec![layer("layer-lz4", 40, 28, Codec::Lz4, Wrap::Clamp, srgb)]
            };
            bake(inputs, &v1, &opts, &NoProgress).map_err(std::io::Error::other)?;
            seeds.push((format!("{name}-v1.tsa"), [&[control], std::fs::read(&v1)?.as_slice()].concat()));
        }
    }
    Ok(seeds)
}

fn basis_seeds() -> std::io::Result<Vec<Seed>> {
    let opts = EncodeOptions::default();
    let encode = |side: u32, mode: BasisMode, opaque: bool| {
        basis::encode(&pattern(side, side, opaque), side, mode, &opts).map_err(std::io::Error::other)
    };
    let mut seeds = Vec::new();
    let tiles = [
        ("etc1s-opaque", 32, BasisMode::Etc1s, true),
        ("etc1s-alpha", 32, BasisMode::Etc1s, false),
        ("etc1s-20", 20, BasisMode::Etc1s, true),
        ("uastc", 32, BasisMode::Uastc, false),
        ("uastc-20", 20, BasisMode::Uastc, true),
    ];
    for (name, side, mode, opaque) in tiles {
        let blob = encode(side, mode, opaque)?;
        let uastc = if mode == BasisMode::Uastc { BASIS_UASTC } else { 0 };
        let side_byte = side as u8;
        seeds.push((format!("{name}.basis"), [&[BASIS_REPAIR | uastc, side_byte], blob.as_slice()].concat()));
        if side == 32 {
            let control = BASIS_REPAIR | BASIS_VERIFIED | uastc;
            seeds.push((format!("{name}-verified.basis"), [&[control, side_byte], blob.as_slice()].concat()));
        }
    }
    Ok(seeds)
}

/// Standard base64 with padding, for data URIs.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * k)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Vertices and indices of a unit quad: positions (48 bytes), normals (48), UVs (32),
/// then six `u16` indices (12): 140 bytes, the layout [`gltf_json`] describes.
fn quad_buffer() -> Vec<u8> {
    let positions = [[0.0f32, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, -1.0], [0.0, 0.0, -1.0]];
    let normals = [[0.0f32, 1.0, 0.0]; 4];
    let uvs = [[0.0f32, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]];
    let mut out = Vec::with_capacity(140);
    for v in positions.iter().chain(&normals).flatten().chain(uvs.iter().flatten()) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for i in [0u16, 1, 2, 0, 2, 3] {
        out.extend_from_slice(&i.to_le_bytes());
    }
    out
}

/// Where a glTF seed's buffer and second image come from.
enum Storage {
    /// `buffer.bin` beside the scene; images `tex.png` and `tex.jpg`.
    Files,
    /// Base64 data URIs.
    DataUris,
    /// The GLB binary chunk, the image in a buffer view.
    Glb,
}

/// A scene of two quads under a transformed parent (one mirrored), a directional light,
/// one textured material and one primitive with the default material.
fn gltf_json(storage: &Storage) -> serde_json::Value {
    let buffer = quad_buffer();
    let png = png_rgba8(4, 4);
    let (buffer_json, images, extra_view) = match storage {
        Storage::Files => (
            json!({ "uri": "buffer.bin", "byteLength": buffer.len() }),
            json!([{ "uri": "tex.png" }, { "uri": "tex.jpg" }]),
            None,
        ),
        Storage::DataUris => (
            json!({
                "uri": format!("data:application/octet-stream;base64,{}", base64(&buffer)),
                "byteLength": buffer.len(),
            }),
            json!([
                { "uri": "tex.png" },
                { "uri": format!("data:image/png;base64,{}", base64(&png)), "name": "embedded" },
            ]),
            None,
        ),
        Storage::Glb => (
            json!({ "byteLength": buffer.len() + png.len() }),
            json!([{ "uri": "tex.png" }, { "bufferView": 2, "mimeType": "image/png" }]),
            Some(json!({ "buffer": 0, "byteOffset": buffer.len(), "byteLength": png.len() })),
        ),
    };
    let mut views = vec![
        json!({ "buffer": 0, "byteOffset": 0, "byteLength": 128, "target": 34962 }),
        json!({ "buffer": 0, "byteOffset": 128, "byteLength": 12, "target": 34963 }),
    ];
    views.extend(extra_view);
    json!({
        "asset": { "version": "2.0", "generator": "tessera fuzz seeds" },
        "extensionsUsed": ["KHR_lights_punctual"],
        "extensions": { "KHR_lights_punctual": { "lights": [
            { "type": "directional", "color": [1.0, 0.9, 0.8], "intensity": 3.0 },
            { "type": "point", "range": 4.0 },
        ] } },
        "scene": 0,
        "scenes": [{ "nodes": [0, 3] }],
        "nodes": [
            { "name": "root", "translation": [0.0, 1.0, 0.0], "rotation": [0.0, 0.383, 0.0, 0.924],
              "scale": [2.0, 2.0, 2.0], "children": [1, 2] },
            { "mesh": 0 },
            { "name": "mirrored", "mesh": 1,
              "matrix": [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 3.0, 0.0, 0.0, 1.0] },
            { "name": "sun", "rotation": [-0.5, 0.0, 0.0, 0.866],
              "extensions": { "KHR_lights_punctual": { "light": 0 } } },
        ],
        "meshes": [
            { "name": "quad", "primitives": [
                { "attributes": { "POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2 }, "indices": 3, "material": 0 },
                { "attributes": { "POSITION": 0 }, "mode": 1 },
            ] },
            { "primitives": [{ "attributes": { "POSITION": 0, "TEXCOORD_0": 2 } }] },
        ],
        "materials": [{
            "name": "tiles",
            "pbrMetallicRoughness": {
                "baseColorTexture": { "index": 0 },
                "metallicRoughnessTexture": { "index": 1, "texCoord": 1 },
                "baseColorFactor": [1.0, 0.8, 0.6, 1.0], "metallicFactor": 0.0, "roughnessFactor": 0.7,
            },
            "normalTexture": { "index": 1, "scale": 0.5 },
            "alphaMode": "MASK", "alphaCutoff": 0.4, "doubleSided": true,
        }],
        "textures": [{ "source": 0, "sampler": 0 }, { "source": 1 }],
        "samplers": [{ "wrapS": 33648, "wrapT": 33071 }],
        "images": images,
        "buffers": [buffer_json],
        "bufferViews": views,
        "accessors": [
            { "bufferView": 0, "byteOffset": 0, "componentType": 5126, "count": 4, "type": "VEC3",
              "min": [0.0, 0.0, -1.0], "max": [1.0, 0.0, 0.0] },
            { "bufferView": 0, "byteOffset": 48, "componentType": 5126, "count": 4, "type": "VEC3" },
            { "bufferView": 0, "byteOffset": 96, "componentType": 5126, "count": 4, "type": "VEC2" },
            { "bufferView": 1, "byteOffset": 0, "componentType": 5123, "count": 6, "type": "SCALAR" },
        ],
    })
}

/// A GLB container: the JSON chunk, then the binary chunk (each padded to 4 bytes).
fn glb(json: &str, bin: &[u8]) -> Vec<u8> {
    let pad = |n: usize| n.next_multiple_of(4);
    let (json_len, bin_len) = (pad(json.len()), pad(bin.len()));
    let total = 12 + 8 + json_len + 8 + bin_len;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"glTF");
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&(json_len as u32).to_le_bytes());
    out.extend_from_slice(b"JSON");
    out.extend_from_slice(json.as_bytes());
    out.resize(20 + json_len, b' ');
    out.extend_from_slice(&(bin_len as u32).to_le_bytes());
    out.extend_from_slice(b"BIN\0");
    out.extend_from_slice(bin);
    out.resize(total, 0);
    out
}

fn gltf_seeds() -> Vec<Seed> {
    let text = |v: &serde_json::Value| serde_json::to_string(v).unwrap_or_default().into_bytes();
    let glb_json = serde_json::to_string(&gltf_json(&Storage::Glb)).unwrap_or_default();
    let bin = [quad_buffer(), png_rgba8(4, 4)].concat();
    let minimal = json!({
        "asset": { "version": "2.0" },
        "nodes": [{ "mesh": 0, "children": [1] }, { "name": "child", "translation": [0.0, 0.5, 0.0] }],
        "scenes": [{ "nodes": [0] }],
        "meshes": [{ "primitives": [{ "attributes": { "POSITION": 0 } }] }],
        "buffers": [{ "uri": "buffer.bin", "byteLength": 140 }],
        "bufferViews": [{ "buffer": 0, "byteLength": 48 }],
        "accessors": [{ "bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                        "min": [0.0, 0.0, -1.0], "max": [1.0, 0.0, 0.0] }],
    });
    vec![
        ("files.gltf".into(), text(&gltf_json(&Storage::Files))),
        ("data-uris.gltf".into(), text(&gltf_json(&Storage::DataUris))),
        ("scene.glb".into(), glb(&glb_json, &bin)),
        ("minimal.gltf".into(), text(&minimal)),
    ]
}

fn camera_seeds() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = PRESETS
        .iter()
        .filter_map(|&name| {
            CameraPath::preset(name).map(|p| (format!("{name}.json"), p.to_json().into_bytes()))
        })
        .collect();
    let (min, max) = (glam::Vec3::new(-4.0, 0.0, -3.0), glam::Vec3::new(5.0, 2.5, 3.5));
    for &name in SCENE_PRESETS {
        if let Some(p) = CameraPath::scene_preset(name, min, max, Some(0.0)) {
            seeds.push((format!("scene-{name}.json"), p.to_json().into_bytes()));
        }
    }
    // The schema's own example: defaults, a cut and a custom near plane.
    let example = r#"{
  "keyframes": [
    { "frame": 0, "camera": { "position": [0, 1.2, 1.0], "target": [0, 0, 0] } },
    { "frame": 60, "camera": { "position": [0, 0.6, 0.5], "target": [0, 0, 0], "fov_y_degrees": 40 } },
    { "frame": 61, "cut": true,
      "camera": { "position": [0.7, 0.06, -0.2], "target": [0.75, 0, -0.3], "near": 0.002, "up": [0, 0, 1] } }
  ]
}"#;
    seeds.push(("example.json".into(), example.as_bytes().to_vec()));
    seeds
}

/// RGB texels of a `w × h` gradient.
fn gradient_rgb(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 255 / w) as u8, (y * 255 / h) as u8, 128]))
}

fn encode(img: image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    // Encoding a small in-memory image into a Vec cannot fail for these formats.
    let _ = img.write_to(&mut out, format);
    out.into_inner()
}

fn png_rgba8(w: u32, h: u32) -> Vec<u8> {
    let rgba = image::RgbaImage::from_raw(w, h, pattern(w, h, false)).unwrap_or_default();
    encode(rgba.into(), image::ImageFormat::Png)
}

fn jpeg(img: &image::RgbImage) -> Vec<u8> {
    encode(img.clone().into(), image::ImageFormat::Jpeg)
}

/// Appends a PNG chunk to `out`: length, type, data, CRC (for seeds and tests).
pub(crate) fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A PNG written by hand, for the layouts the `image` encoder does not write: palette
/// and sub-byte bit depths. `rows` are the unfiltered scanlines, packed.
fn png_raw(
    w: u32,
    h: u32,
    bit_depth: u8,
    color_type: u8,
    rows: &[Vec<u8>],
    extra: &[(&[u8; 4], Vec<u8>)],
) -> Vec<u8> {
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[bit_depth, color_type, 0, 0, 0]);
    // Scanlines with filter type 0, in one stored (uncompressed) deflate block.
    let raw: Vec<u8> = rows.iter().flat_map(|r| std::iter::once(0).chain(r.iter().copied())).collect();
    let len = raw.len() as u16;
    let mut zlib = vec![0x78, 0x01, 0x01];
    zlib.extend_from_slice(&len.to_le_bytes());
    zlib.extend_from_slice(&(!len).to_le_bytes());
    zlib.extend_from_slice(&raw);
    let (a, b) = raw.iter().fold((1u32, 0u32), |(a, b), &x| {
        let a = (a + u32::from(x)) % 65521;
        (a, (b + a) % 65521)
    });
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    png_chunk(&mut out, b"IHDR", &ihdr);
    for (kind, data) in extra {
        png_chunk(&mut out, kind, data);
    }
    png_chunk(&mut out, b"IDAT", &zlib);
    png_chunk(&mut out, b"IEND", &[]);
    out
}

fn image_seeds() -> Vec<Seed> {
    use image::{DynamicImage, ImageFormat::Png};
    let (w, h) = (12, 9);
    let rgb = gradient_rgb(w, h);
    let rgba = image::RgbaImage::from_raw(w, h, pattern(w, h, false)).unwrap_or_default();
    let grey = DynamicImage::ImageRgb8(rgb.clone()).into_luma8();
    let mut seeds: Vec<Seed> = vec![
        ("rgba8.png".into(), encode(rgba.clone().into(), Png)),
        ("rgb8.png".into(), encode(rgb.clone().into(), Png)),
        ("grey8.png".into(), encode(grey.clone().into(), Png)),
        (
            "grey-alpha8.png".into(),
            encode(DynamicImage::ImageRgba8(rgba.clone()).into_luma_alpha8().into(), Png),
        ),
        ("grey16.png".into(), encode(DynamicImage::ImageRgb8(rgb.clone()).into_luma16().into(), Png)),
        ("rgb16.png".into(), encode(DynamicImage::ImageRgb8(rgb.clone()).into_rgb16().into(), Png)),
        ("rgba16.png".into(), encode(DynamicImage::ImageRgba8(rgba).into_rgba16().into(), Png)),
        ("rgb.jpg".into(), jpeg(&rgb)),
        ("grey.jpg".into(), encode(grey.into(), image::ImageFormat::Jpeg)),
    ];
    // Palette, 8 and 2 bits per index, with transparency; 1-bit grey.
    let palette: Vec<u8> = (0..16u8).flat_map(|i| [i * 16, 255 - i * 16, i * 8]).collect();
    let trns: Vec<u8> = (0..16u8).map(|i| 255 - i * 8).collect();
    let index_rows: Vec<Vec<u8>> = (0..h).map(|y| (0..w).map(|x| ((x + y) % 16) as u8).collect()).collect();
    let extra = [(b"PLTE", palette.clone()), (b"tRNS", trns)];
    seeds.push(("palette8.png".into(), png_raw(w, h, 8, 3, &index_rows, &extra)));
    let pack = |bits: u32, value: fn(u32, u32) -> u8| -> Vec<Vec<u8>> {
        let per_byte = 8 / bits;
        (0..h)
            .map(|y| {
                (0..w.div_ceil(per_byte))
                    .map(|bx| {
                        (0..per_byte).fold(0u8, |acc, k| {
                            let x = bx * per_byte + k;
                            let v = if x < w { value(x, y) } else { 0 };
                            acc | (v << (8 - bits * (k + 1)))
                        })
                    })
                    .collect()
            })
            .collect()
    };
    let palette4 = [(b"PLTE", palette[..12].to_vec())];
    seeds.push(("palette2.png".into(), png_raw(w, h, 2, 3, &pack(2, |x, y| ((x + y) % 4) as u8), &palette4)));
    seeds.push(("grey1.png".into(), png_raw(w, h, 1, 0, &pack(1, |x, y| ((x ^ y) & 1) as u8), &[])));
    seeds.extend(tiff_seeds(&rgb));
    seeds.extend(super::tiff_codec_seeds::seeds());
    seeds.extend(dds_seeds());
    seeds.extend(ktx2_seeds(&rgb));
    seeds
}

/// KTX2 seeds for the Rust transcoder's reader: the UASTC blocks of an 8×8 crop of `rgb`
/// (sRGB transfer function), uncompressed and in Zstandard, the same crop in ETC1S
/// (BasisLZ) and an uncompressed RGBA8 level of 12×8.
fn ktx2_seeds(rgb: &image::RgbImage) -> Vec<Seed> {
    use crate::bake::ktx2::{encode_ktx2, ktx2_file, uastc_blocks, uastc_zstd_ktx2};
    use crate::format::basis::{BasisMode, encode};
    let texels = |w: u32, h: u32| -> Vec<u8> {
        (0..h)
            .flat_map(|y| {
                (0..w).flat_map(move |x| {
                    let p = rgb.get_pixel(x % rgb.width(), y % rgb.height());
                    [p[0], p[1], p[2], 255]
                })
            })
            .collect()
    };
    let mut out = vec![("rgba8.ktx2".to_string(), ktx2_file(12, 8, 43, 2, 1, &texels(12, 8)))];
    let blocks =
        encode(&texels(8, 8), 8, BasisMode::Uastc, &Default::default()).ok().and_then(|f| uastc_blocks(&f));
    if let Some(blocks) = blocks {
        out.push(("uastc.ktx2".into(), ktx2_file(8, 8, 0, 2, 1, &blocks)));
        out.push(("uastc-zstd.ktx2".into(), uastc_zstd_ktx2(8, 8, &blocks)));
    }
    if let Ok(etc1s) = encode_ktx2(&texels(8, 8), 8, 8, BasisMode::Etc1s, &Default::default()) {
        out.push(("etc1s.ktx2".into(), etc1s));
    }
    out
}

/// DDS seeds for the bake's block-row reader: BC1 (legacy `DXT1`, 12×9: partial blocks),
/// BC7 and BGRA8 (DX10 headers).
fn dds_seeds() -> Vec<Seed> {
    let dds = |w: u32, h: u32, four_cc: &[u8; 4], dxgi: Option<u32>, data: &[u8]| -> Vec<u8> {
        let mut f = b"DDS ".to_vec();
        let words =
            |f: &mut Vec<u8>, vs: &[u32]| vs.iter().for_each(|v| f.extend_from_slice(&v.to_le_bytes()));
        words(&mut f, &[124, 0x1 | 0x2 | 0x4 | 0x1000, h, w, 0, 1, 1]);
        words(&mut f, &[0; 11]);
        words(&mut f, &[32, 0x4]);
        f.extend_from_slice(if dxgi.is_some() { b"DX10" } else { four_cc });
        words(&mut f, &[0; 5]);
        words(&mut f, &[0x1000, 0, 0, 0, 0]);
        if let Some(code) = dxgi {
            words(&mut f, &[code, 3, 0, 1, 0]);
        }
        f.extend_from_slice(data);
        f
    };
    let bytes =
        |n: usize, k: u8| -> Vec<u8> { (0..n).map(|i| (i as u8).wrapping_mul(37).wrapping_add(k)).collect() };
    // BC7 blocks in mode 6 (first byte 0x40): one subset, RGBA endpoints.
    let bc7: Vec<u8> = bytes(4 * 16, 5).chunks(16).flat_map(|b| [&[0x40u8][..], &b[1..]].concat()).collect();
    vec![
        ("bc1.dds".into(), dds(12, 9, b"DXT1", None, &bytes(3 * 3 * 8, 1))),
        ("bc7.dds".into(), dds(8, 8, b"DX10", Some(98), &bc7)),
        ("bgra8.dds".into(), dds(5, 3, b"DX10", Some(87), &bytes(5 * 3 * 4, 9))),
    ]
}

/// TIFF seeds for the bake's chunk-by-chunk reader: classic and BigTIFF, 8-bit RGB in
/// strips of 4 rows (LZW, Deflate with the horizontal predictor) and 16-bit grey.
fn tiff_seeds(rgb: &image::RgbImage) -> Vec<Seed> {
    use ::tiff::encoder::{Compression, DeflateLevel, Predictor, TiffEncoder, colortype};
    let (w, h) = rgb.dimensions();
    let grey16: Vec<u16> = rgb.pixels().map(|p| u16::from(p[1]) * 257).collect();
    let mut out = Vec::new();
    for (name, big, compression, predictor) in [
        ("rgb8-lzw.tif", false, Compression::Lzw, Predictor::None),
        ("rgb8-deflate-big.tif", true, Compression::Deflate(DeflateLevel::Fast), Predictor::Horizontal),
    ] {
        let mut file = std::io::Cursor::new(Vec::new());
        let written = if big {
            TiffEncoder::new_big(&mut file).and_then(|e| {
                let mut e = e.with_compression(compression).with_predictor(predictor);
                let mut img = e.new_image::<colortype::RGB8>(w, h)?;
                img.rows_per_strip(4)?;
                img.write_data(rgb.as_raw())
            })
        } else {
            TiffEncoder::new(&mut file).and_then(|e| {
                let mut e = e.with_compression(compression).with_predictor(predictor);
                let mut img = e.new_image::<colortype::RGB8>(w, h)?;
                img.rows_per_strip(4)?;
                img.write_data(rgb.as_raw())
            })
        };
        if written.is_ok() {
            out.push((name.into(), file.into_inner()));
        }
    }
    let mut file = std::io::Cursor::new(Vec::new());
    if TiffEncoder::new(&mut file).and_then(|mut e| e.write_image::<colortype::Gray16>(w, h, &grey16)).is_ok()
    {
        out.push(("grey16.tif".into(), file.into_inner()));
    }
    out
}
