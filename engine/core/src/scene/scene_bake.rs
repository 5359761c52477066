//! Bakes a glTF scene's material textures into one stacked virtual atlas (albedo, normal,
//! ORM layers sharing tile ids), packed rectangle by rectangle, plus a JSON manifest that
//! tells the renderer where each material's texture lies.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bake::cache::{BakeKey, BakeKind};
use crate::bake::pack::{owned_mips, pack};
use crate::bake::source::{RowSource, TEXEL_BYTES};
use crate::bake::{BakeInput, BakeOptions, BakeReport, Region, bake};
use crate::format::atlas::{ColorSpace, Wrap};
use crate::format::codec::Codec;
use crate::format::tile::TextureLayout;
use crate::progress::Progress;
use crate::scene::material_scene::{
    ImageRef, MaterialScene, SceneError, check_image_path, embedded_image_bytes, image_size,
};

/// The layers of a scene atlas, in order: base colour (sRGB), tangent-space normal map
/// (linear), glTF metallic-roughness texture (linear: G roughness, B metallic).
pub const SCENE_LAYERS: [&str; 3] = ["albedo", "normal", "orm"];

/// What the glTF texture of each of [`SCENE_LAYERS`] is, for messages.
const LAYER_ROLES: [&str; 3] = ["base colour", "normal map", "metallic-roughness"];

/// Version of the manifest format written by [`bake_scene`].
pub const MANIFEST_VERSION: u32 = 1;

/// Texel of the albedo layer outside every rectangle.
const ALBEDO_BACKGROUND: [u8; 4] = [0, 0, 0, 255];
/// The normal that does not bend the surface.
const FLAT_NORMAL: [u8; 4] = [128, 128, 255, 255];
/// White: a factor of one.
const WHITE: [u8; 4] = [255; 4];

/// Where one material's textures lie in the scene atlas, and its constant factors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PackedMaterial {
    /// The material name.
    pub name: String,
    /// `[x, y, width, height]` in mip-0 texels of the virtual texture; `None`: untextured.
    pub rect: Option<[u32; 4]>,
    /// Edge rule along u and v inside the rectangle.
    pub wrap: [Wrap; 2],
    /// Coarsest mip at which the rectangle still owns whole tiles (so its own wrap holds at
    /// the borders); coarser mips mix neighbours and should not be sampled for it.
    pub max_mip: u32,
    /// Linear RGBA multiplier of the base colour.
    pub base_color_factor: [f32; 4],
    /// Metalness multiplier.
    pub metallic_factor: f32,
    /// Roughness multiplier.
    pub roughness_factor: f32,
    /// Scale of the normal map's X and Y.
    pub normal_scale: f32,
    /// Alpha-test threshold when alpha-masked.
    pub alpha_cutoff: Option<f32>,
    /// Whether the material blends by its alpha (glTF's `BLEND`); absent in manifests
    /// written before blending was kept, which read as opaque.
    #[serde(default)]
    pub blend: bool,
    /// Whether the normal layer holds a real normal map in this rectangle.
    pub has_normal_map: bool,
}

/// What the renderer needs besides the atlas: the virtual size, the layers and each
/// material's rectangle. Saved next to the atlas ([`SceneManifest::path_for`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SceneManifest {
    /// [`MANIFEST_VERSION`].
    pub version: u32,
    /// Virtual texture width, mip-0 texels.
    pub width: u32,
    /// Virtual texture height, mip-0 texels.
    pub height: u32,
    /// Layer names, atlas order ([`SCENE_LAYERS`]).
    pub layers: Vec<String>,
    /// One entry per material, same indices as [`MaterialScene::materials`].
    pub materials: Vec<PackedMaterial>,
    /// File name of the glTF the scene came from.
    pub gltf: Option<String>,
}

impl SceneManifest {
    /// The manifest path beside an atlas: `SCENE.tsa` → `SCENE.scene.json`.
    pub fn path_for(atlas: &Path) -> PathBuf {
        atlas.with_extension("scene.json")
    }

    /// Reads and checks a manifest.
    pub fn load(path: &Path) -> Result<Self, SceneError> {
        let bytes =
            std::fs::read(path).map_err(|source| SceneError::Io { path: path.to_path_buf(), source })?;
        let m: Self = serde_json::from_slice(&bytes)
            .map_err(|e| SceneError::Manifest { path: path.to_path_buf(), reason: e.to_string() })?;
        if m.version != MANIFEST_VERSION {
            return Err(SceneError::Manifest {
                path: path.to_path_buf(),
                reason: format!("version {} (this build reads {MANIFEST_VERSION})", m.version),
            });
        }
        Ok(m)
    }

    /// Writes the manifest atomically: a temporary file beside it, fsync, rename.
    pub fn save(&self, path: &Path) -> Result<(), SceneError> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| SceneError::Manifest { path: path.to_path_buf(), reason: e.to_string() })?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let prefix = format!(".{name}.");
        if let Some(dir) = path.parent() {
            crate::temp_files::sweep(dir, &prefix);
        }
        // Listed while it lives (a signal handler deletes it), deleted on any error.
        let mut tmp =
            crate::temp_files::TempPath::new(path.with_file_name(crate::temp_files::temp_name(&prefix, "")));
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| SceneError::Io { path: p, source }
        };
        let t = tmp.path().to_path_buf();
        let mut f = std::fs::File::create(&t).map_err(io(&t))?;
        f.write_all(&json).map_err(io(&t))?;
        f.write_all(b"\n").map_err(io(&t))?;
        f.sync_all().map_err(io(&t))?;
        std::fs::rename(&t, path).map_err(io(path))?;
        tmp.keep();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && let Ok(d) = std::fs::File::open(dir)
        {
            // Persist the rename itself; not every filesystem supports this.
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// What decides the output of [`bake_scene`] for `scene` into `out`, as a cache key: the
/// bake `kind` ([`BakeKind::Gltf`] or [`BakeKind::Globe`]), `opts`, the scene's source file
/// and image files; the manifest beside `out` counts as an output.
pub fn scene_bake_key(kind: BakeKind, scene: &MaterialScene, out: &Path, opts: &BakeOptions) -> BakeKey {
    let images = crate::scene::material_scene::scene_images(scene).into_iter().filter_map(|i| match i {
        ImageRef::File(p) => Some(p),
        ImageRef::Embedded { .. } => None,
    });
    BakeKey::new(kind)
        .bake_options(opts)
        .input(&scene.source)
        .inputs(images)
        .output(SceneManifest::path_for(out))
}

/// The images of one packed rectangle, one per layer, and its wrap.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RectKey {
    images: [Option<ImageRef>; 3],
    wrap: [Wrap; 2],
}

/// Bakes the materials of `scene` into the stacked atlas `out` ([`SCENE_LAYERS`]) and writes
/// its manifest beside it (after the atlas, atomically).
///
/// Materials with the same images and wrap share one rectangle, as large as the largest of
/// its images rounded up to whole tiles (smaller images are resampled to it). Rectangles are
/// placed by [`pack`]; each is a [`Region`] of the bake, so its tile borders follow its own
/// wrap. The albedo layer uses `opts.codec`; the normal and ORM layers use UASTC where
/// `opts.codec` is ETC1S (too lossy for normals), else `opts.codec`.
pub fn bake_scene(
    scene: &MaterialScene,
    out: &Path,
    opts: &BakeOptions,
    progress: &dyn Progress,
) -> Result<(BakeReport, SceneManifest), SceneError> {
    let t = opts.tile_size.max(1);
    // Group materials by their images, remembering a material name for messages.
    let mut keys: Vec<(RectKey, String)> = Vec::new();
    let mut index: HashMap<RectKey, usize> = HashMap::new();
    let mut material_rect: Vec<Option<usize>> = Vec::with_capacity(scene.materials.len());
    for m in &scene.materials {
        let textures = [&m.base_color, &m.normal, &m.metallic_roughness];
        let Some(first) = textures.iter().copied().flatten().next() else {
            material_rect.push(None);
            continue;
        };
        let key = RectKey { images: textures.map(|t| t.as_ref().map(|t| t.image.clone())), wrap: first.wrap };
        let i = *index.entry(key.clone()).or_insert_with(|| {
            keys.push((key, m.name.clone()));
            keys.len() - 1
        });
        material_rect.push(Some(i));
    }
    // Rectangle sizes: the largest image of each set, in whole tiles.
    let mut sizes_texels = Vec::with_capacity(keys.len());
    for (key, material) in &keys {
        let (mut w, mut h) = (1u32, 1u32);
        for image in key.images.iter().flatten() {
            let (iw, ih) = image_dimensions(scene, image, material)?;
            w = w.max(iw);
            h = h.max(ih);
        }
        sizes_texels.push((w.div_ceil(t) * t, h.div_ceil(t) * t));
    }
    let packing = pack(&sizes_texels.iter().map(|&(w, h)| (w / t, h / t)).collect::<Vec<_>>());
    let (width, height) = if keys.is_empty() { (t, t) } else { (packing.width * t, packing.height * t) };
    let rects: Vec<[u32; 4]> =
        packing.positions.iter().zip(&sizes_texels).map(|(&(x, y), &(w, h))| [x * t, y * t, w, h]).collect();

    // Decoded images, shared between rectangles that use the same image at the same size.
    let mut decoded: HashMap<(ImageRef, u32, u32), Arc<Vec<u8>>> = HashMap::new();
    let fills = [WHITE, FLAT_NORMAL, WHITE];
    let backgrounds = [ALBEDO_BACKGROUND, FLAT_NORMAL, WHITE];
    let mut inputs = Vec::with_capacity(SCENE_LAYERS.len());
    for (layer, name) in SCENE_LAYERS.iter().enumerate() {
        let mut parts = Vec::with_capacity(keys.len());
        for ((key, material), rect) in keys.iter().zip(&rects) {
            let fill = match &key.images[layer] {
                Some(image) => {
                    let k = (image.clone(), rect[2], rect[3]);
                    let texels = match decoded.get(&k) {
                        Some(t) => t.clone(),
                        None => {
                            let t =
                                Arc::new(decode_resized(scene, image, material, layer, rect[2], rect[3])?);
                            decoded.insert(k, t.clone());
                            t
                        }
                    };
                    Fill::Image(texels)
                }
                None => Fill::Solid(fills[layer]),
            };
            parts.push(Part { rect: *rect, fill });
        }
        let source = Composed { width, height, background: backgrounds[layer], parts };
        let codec = match (layer, opts.codec) {
            (0, c) => c,
            (_, Codec::Etc1s) => Codec::Uastc,
            (_, c) => c,
        };
        inputs.push(BakeInput {
            name: (*name).to_string(),
            source: Box::new(source),
            wrap: Wrap::Clamp,
            color: if layer == 0 { ColorSpace::Srgb } else { ColorSpace::Linear },
            codec: Some(codec),
            regions: keys
                .iter()
                .zip(&rects)
                .map(|((key, _), r)| Region { x: r[0], y: r[1], width: r[2], height: r[3], wrap: key.wrap })
                .collect(),
        });
    }
    drop(decoded);
    let bake_opts = BakeOptions { stacked: true, ..opts.clone() };
    let report = bake(inputs, out, &bake_opts, progress)?;

    let mip_count = TextureLayout::new(width, height, t, opts.border).map_or(1, |l| l.mip_count());
    let materials = scene
        .materials
        .iter()
        .zip(&material_rect)
        .map(|(m, r)| {
            let rect = r.map(|i| rects[i]);
            PackedMaterial {
                name: m.name.clone(),
                rect,
                wrap: r.map_or([Wrap::Clamp; 2], |i| keys[i].0.wrap),
                max_mip: r.map_or(0, |i| owned_mips(&rects, i, t, mip_count - 1)),
                base_color_factor: m.base_color_factor,
                metallic_factor: m.metallic_factor,
                roughness_factor: m.roughness_factor,
                normal_scale: m.normal_scale,
                alpha_cutoff: m.alpha_cutoff,
                blend: m.blend,
                has_normal_map: m.normal.is_some(),
            }
        })
        .collect();
    let is_gltf = scene
        .source
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gltf") || e.eq_ignore_ascii_case("glb"));
    let manifest = SceneManifest {
        version: MANIFEST_VERSION,
        width,
        height,
        layers: SCENE_LAYERS.iter().map(|s| s.to_string()).collect(),
        materials,
        gltf: scene.source.file_name().filter(|_| is_gltf).map(|n| n.to_string_lossy().into_owned()),
    };
    manifest.save(&SceneManifest::path_for(out))?;
    Ok((report, manifest))
}

fn image_bytes(scene: &MaterialScene, image: &ImageRef) -> Result<Vec<u8>, SceneError> {
    match image {
        ImageRef::Embedded { index, .. } => embedded_image_bytes(&scene.source, *index, scene.paths),
        ImageRef::File(p) => {
            check_image_path(scene, p)?;
            Ok(crate::bake::input_file::read_input(p, crate::bake::source::memory_limit())?)
        }
    }
}

fn bad(image: &ImageRef, material: &str, e: impl std::fmt::Display) -> SceneError {
    SceneError::BadTexture { image: image.to_string(), material: material.to_string(), reason: e.to_string() }
}

fn image_dimensions(
    scene: &MaterialScene,
    image: &ImageRef,
    material: &str,
) -> Result<(u32, u32), SceneError> {
    match image {
        ImageRef::File(p) => {
            if !p.is_file() {
                return Err(SceneError::MissingTexture { image: p.clone(), material: material.into() });
            }
            check_image_path(scene, p)?;
            image_size(p, material)
        }
        ImageRef::Embedded { .. } => {
            let bytes = image_bytes(scene, image)?;
            if bytes.starts_with(&crate::bake::ktx2::IDENTIFIER) {
                let name = std::path::PathBuf::from(image.to_string());
                let h =
                    crate::bake::ktx2::Header::parse(&name, &bytes).map_err(|e| bad(image, material, e))?;
                return Ok((h.width, h.height));
            }
            image::ImageReader::new(std::io::Cursor::new(bytes))
                .with_guessed_format()
                .map_err(|e| bad(image, material, e))?
                .into_dimensions()
                .map_err(|e| bad(image, material, e))
        }
    }
}

/// Decodes an image of layer `layer` ([`SCENE_LAYERS`]) to RGBA8 at `w × h` (resampled
/// when its own size differs). A KTX2 image must tag the layer's colour space (sRGB base
/// colour; linear normal and metallic-roughness data), as `KHR_texture_basisu` asks.
fn decode_resized(
    scene: &MaterialScene,
    image: &ImageRef,
    material: &str,
    layer: usize,
    w: u32,
    h: u32,
) -> Result<Vec<u8>, SceneError> {
    if let ImageRef::File(p) = image
        && !p.is_file()
    {
        return Err(SceneError::MissingTexture { image: p.clone(), material: material.into() });
    }
    let bytes = image_bytes(scene, image)?;
    // The same memory limit and cut-file checks as a baked image file.
    let name = std::path::PathBuf::from(image.to_string());
    let rgba = if bytes.starts_with(&crate::bake::ktx2::IDENTIFIER) {
        let (header, texels) =
            crate::bake::ktx2::decode_bytes(&name, &bytes).map_err(|e| bad(image, material, e))?;
        // Only the base colour layer holds sRGB colour.
        if header.srgb != (layer == 0) {
            let (tagged, wanted) = if header.srgb { ("sRGB", "linear") } else { ("linear", "sRGB") };
            return Err(bad(
                image,
                material,
                format!(
                    "the KTX2 tags its texels {tagged} (data format descriptor), but a {} texture must be \
                     {wanted} (KHR_texture_basisu); re-encode it with the right transfer function",
                    LAYER_ROLES[layer]
                ),
            ));
        }
        image::RgbaImage::from_raw(header.width, header.height, texels)
            .ok_or_else(|| bad(image, material, "decoded KTX2 level has the wrong size"))?
    } else {
        crate::bake::source::decode_bytes(&name, &bytes).map_err(|e| bad(image, material, e))?.into_rgba8()
    };
    let rgba = if rgba.dimensions() == (w, h) {
        rgba
    } else {
        image::imageops::resize(&rgba, w, h, image::imageops::FilterType::Triangle)
    };
    Ok(rgba.into_raw())
}

/// What fills one rectangle of a composed layer.
enum Fill {
    Solid([u8; 4]),
    /// RGBA8 texels of exactly the rectangle's size.
    Image(Arc<Vec<u8>>),
}

struct Part {
    rect: [u32; 4],
    fill: Fill,
}

/// One layer of the virtual texture, composed on demand from the decoded images.
struct Composed {
    width: u32,
    height: u32,
    background: [u8; 4],
    parts: Vec<Part>,
}

impl RowSource for Composed {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row_bytes = self.width as usize * TEXEL_BYTES;
        let n = out.len() / row_bytes;
        if !out.len().is_multiple_of(row_bytes) || y0 as usize + n > self.height as usize {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("rows from {y0} lie outside the image"),
            ));
        }
        for (i, row) in out.chunks_exact_mut(row_bytes).enumerate() {
            let y = y0 + i as u32;
            for px in row.chunks_exact_mut(TEXEL_BYTES) {
                px.copy_from_slice(&self.background);
            }
            for part in &self.parts {
                let [x, py, w, h] = part.rect;
                if !(py..py + h).contains(&y) {
                    continue;
                }
                let dst = &mut row[x as usize * TEXEL_BYTES..(x + w) as usize * TEXEL_BYTES];
                match &part.fill {
                    Fill::Solid(c) => dst.chunks_exact_mut(TEXEL_BYTES).for_each(|px| px.copy_from_slice(c)),
                    Fill::Image(texels) => {
                        let src_row = w as usize * TEXEL_BYTES;
                        let at = (y - py) as usize * src_row;
                        dst.copy_from_slice(&texels[at..at + src_row]);
                    }
                }
            }
        }
        Ok(())
    }
}
