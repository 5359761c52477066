//! A glTF scene baked into one stacked atlas (`tessera bake --gltf`), as Bevy meshes and
//! materials: streamed through [`TesseraMaterial`], or drawn by Bevy's own
//! `StandardMaterial` with the same texels fully resident (a reference to compare
//! against, for tests, benchmarks and an A/B switch in a viewer).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bevy::asset::RenderAssetUsages;
use bevy::image::{ImageAddressMode, ImageFilterMode, ImageSampler, ImageSamplerDescriptor};
use bevy::mesh::{Indices, PrimitiveTopology};
use bevy::prelude::*;
use bevy::render::render_resource::{Extent3d, TextureDimension, TextureFormat};
use tessera::core::Atlas;
use tessera::core::bake::BakeOptions;
use tessera::core::bake::cache::{BakeCache, BakeKind};
use tessera::core::format::atlas::{AtlasError, Wrap};
use tessera::core::format::codec::Codec;
use tessera::core::progress::Progress;
use tessera::core::scene::Mesh as SceneMeshData;
use tessera::core::scene::camera::Camera as SceneCamera;
use tessera::core::scene::catalog::{self, CatalogError};
use tessera::core::scene::material_scene::{ImageRef, MaterialScene, SceneError, load_gltf, scene_images};
use tessera::core::scene::scene_bake::{PackedMaterial, SceneManifest, bake_scene, scene_bake_key};

use crate::{TesseraMaterial, scene_material};

/// The atlas layers of a scene atlas, in order: albedo, normal, roughness-metal.
const LAYERS: usize = 3;

/// A glTF scene, the stacked atlas it was baked into and the manifest that says where
/// each material lies in it.
pub struct BakedScene {
    /// Meshes (world space) and materials.
    pub scene: MaterialScene,
    /// The atlas file.
    pub atlas: PathBuf,
    /// Each material's rectangle of the atlas and its constant factors.
    pub manifest: SceneManifest,
    /// The files the bake read: the glTF, its external buffers and image files. One
    /// that changes makes the bake stale (what [`crate::level::StreamedLevel`] watches).
    pub inputs: Vec<PathBuf>,
}

/// Why a scene could not be loaded or baked.
#[derive(Debug)]
#[non_exhaustive]
pub enum BakedSceneError {
    /// Loading, fetching or baking failed (the message says what to do).
    Catalog(CatalogError),
    /// The catalog entry is a texture, not a glTF scene.
    NotAScene(String),
}

impl std::fmt::Display for BakedSceneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Catalog(e) => e.fmt(f),
            Self::NotAScene(name) => write!(f, "the catalog entry '{name}' is a texture, not a glTF scene"),
        }
    }
}

impl std::error::Error for BakedSceneError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Catalog(e) => Some(e),
            Self::NotAScene(_) => None,
        }
    }
}

impl From<CatalogError> for BakedSceneError {
    fn from(e: CatalogError) -> Self {
        Self::Catalog(e)
    }
}

impl From<SceneError> for BakedSceneError {
    fn from(e: SceneError) -> Self {
        Self::Catalog(e.into())
    }
}

impl BakedScene {
    /// Scene `name` of Tessera's catalog (`dungeon`) from Tessera's data folder
    /// (`TESSERA_DATA`, or what `assets/fetch-data.sh` downloads), baked with `codec` into
    /// Tessera's cache folder unless a current bake is there, as `tessera demo` does.
    pub fn catalog(name: &str, codec: Codec, progress: &dyn Progress) -> Result<Self, BakedSceneError> {
        let data = tessera::core::bake::source::data_dir();
        let prepared = catalog::prepare(name, &data, &catalog::cache_dir(), codec, false, progress)?;
        let scene = prepared.scene.ok_or_else(|| BakedSceneError::NotAScene(name.to_owned()))?;
        let manifest = SceneManifest::load(&SceneManifest::path_for(&prepared.atlas))?;
        let inputs = scene_inputs(&scene);
        Ok(Self { scene, atlas: prepared.atlas, manifest, inputs })
    }

    /// The glTF file at `gltf`, baked with `codec` into `dir` (`<stem>-<codec>.tsa` and its
    /// manifest) unless a current bake of the same file and options is there: same
    /// options, and the glTF, its external buffers (images may live in them) and its image
    /// files unchanged (length, modification time and, for small files, CRC-32).
    pub fn gltf(
        gltf: &Path,
        dir: &Path,
        codec: Codec,
        progress: &dyn Progress,
    ) -> Result<Self, BakedSceneError> {
        let scene = load_gltf(gltf)?;
        let stem = gltf.file_stem().map_or_else(|| "scene".into(), |s| s.to_string_lossy().into_owned());
        std::fs::create_dir_all(dir)
            .map_err(|source| CatalogError::Io { path: dir.to_path_buf(), source })?;
        let atlas = dir.join(format!("{stem}-{codec}.tsa"));
        let opts = BakeOptions { codec, ..BakeOptions::default() };
        let buffers = buffer_files(gltf);
        let key = scene_bake_key(BakeKind::Gltf, &scene, &atlas, &opts).inputs(buffers.iter().cloned());
        let stamp = BakeCache::new(&atlas);
        if !stamp.is_current(&key) || !SceneManifest::path_for(&atlas).is_file() {
            bake_scene(&scene, &atlas, &opts, progress)?;
            if let Err(e) = stamp.record(&key) {
                warn!("{e}; the next run bakes {} again", atlas.display());
            }
        }
        let manifest = SceneManifest::load(&SceneManifest::path_for(&atlas))?;
        let mut inputs = scene_inputs(&scene);
        inputs.extend(buffers);
        Ok(Self { scene, atlas, manifest, inputs })
    }

    /// The atlas location as [`crate::VirtualTexture`] takes it.
    pub fn location(&self) -> String {
        self.atlas.to_string_lossy().into_owned()
    }
}

/// The scene's own file and the image files of its materials.
fn scene_inputs(scene: &MaterialScene) -> Vec<PathBuf> {
    let images = scene_images(scene).into_iter().filter_map(|i| match i {
        ImageRef::File(path) => Some(path),
        ImageRef::Embedded { .. } => None,
    });
    std::iter::once(scene.source.clone()).chain(images).collect()
}

/// The external buffer files of the JSON glTF at `gltf` (relative URIs that name an
/// existing file; `data:` and other schemes are not files). A binary `.glb`, or a file
/// that does not parse (the scene loader said why already), has none.
fn buffer_files(gltf: &Path) -> Vec<PathBuf> {
    let is_json = gltf.extension().is_some_and(|e| e.eq_ignore_ascii_case("gltf"));
    let Some(document) = is_json
        .then(|| std::fs::read(gltf).ok())
        .flatten()
        .and_then(|bytes| bevy::gltf::gltf::Gltf::from_slice_without_validation(&bytes).ok())
    else {
        return Vec::new();
    };
    let folder = gltf.parent().unwrap_or(Path::new(""));
    document
        .buffers()
        .filter_map(|b| match b.source() {
            bevy::gltf::gltf::buffer::Source::Uri(uri) => Some(uri.to_owned()),
            bevy::gltf::gltf::buffer::Source::Bin => None,
        })
        // A scheme (`data:`, `file:`...) comes before any slash.
        .filter(|uri| uri.split('/').next().is_none_or(|first| !first.contains(':')))
        .map(|uri| folder.join(percent_decoded(&uri)))
        .filter(|path| path.is_file())
        .collect()
}

/// `uri` with its `%XX` escapes decoded (an invalid escape is kept as written).
fn percent_decoded(uri: &str) -> String {
    let bytes = uri.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A Tessera scene camera as a Bevy transform and perspective projection.
pub fn camera_transform(camera: &SceneCamera) -> (Transform, Projection) {
    // Tessera's glam and Bevy's may be different releases: through arrays.
    let (position, target, up) = (camera.position.to_array(), camera.target.to_array(), camera.up.to_array());
    let transform = Transform::from_translation(Vec3::from_array(position))
        .looking_at(Vec3::from_array(target), Vec3::from_array(up));
    let projection = Projection::Perspective(PerspectiveProjection {
        fov: camera.fov_y_degrees.to_radians(),
        near: camera.near,
        far: camera.far,
        ..default()
    });
    (transform, projection)
}

/// The transform of a directional light shining along the scene's sun direction (the
/// one `tessera bake --gltf` recorded, else from above at a slant), with the sun's
/// illuminance these examples and tests use (6000 lux) and shadows as asked.
pub fn sun(scene: &MaterialScene, shadows: bool) -> (DirectionalLight, Transform) {
    // Tessera's glam and Bevy's may be different releases: through arrays.
    let direction = scene
        .sun_direction
        .map_or(Vec3::new(-0.4, -1.0, -0.3).normalize(), |d| Vec3::from_array(d.to_array()));
    (
        DirectionalLight { illuminance: 6_000.0, shadow_maps_enabled: shadows, ..default() },
        Transform::default().looking_to(direction, Vec3::Y),
    )
}

/// A Bevy mesh of a scene primitive: positions, normals and glTF uvs, indexed.
pub fn scene_mesh(mesh: &SceneMeshData) -> Mesh {
    let v = &mesh.vertices;
    let mut out = Mesh::new(PrimitiveTopology::TriangleList, RenderAssetUsages::RENDER_WORLD);
    out.insert_attribute(Mesh::ATTRIBUTE_POSITION, v.iter().map(|v| v.position).collect::<Vec<_>>());
    out.insert_attribute(Mesh::ATTRIBUTE_NORMAL, v.iter().map(|v| v.normal).collect::<Vec<_>>());
    out.insert_attribute(Mesh::ATTRIBUTE_UV_0, v.iter().map(|v| v.uv).collect::<Vec<_>>());
    out.insert_indices(Indices::U32(mesh.indices.clone()));
    out
}

/// One [`TesseraMaterial`] per material of `scene`, streamed from the scene atlas at
/// `atlas` described by `manifest`. Both faces are drawn (like Tessera's own scene
/// renderer), lit from the side seen where the glTF says the material is double-sided.
pub fn streamed_materials(
    atlas: &str,
    manifest: &SceneManifest,
    scene: &MaterialScene,
) -> Vec<TesseraMaterial> {
    let size = (manifest.width, manifest.height);
    manifest
        .materials
        .iter()
        .zip(&scene.materials)
        .map(|(packed, gltf)| {
            let mut m = scene_material(atlas, packed, size);
            m.base.cull_mode = None;
            m.base.double_sided = gltf.double_sided;
            m
        })
        .collect()
}

/// One `StandardMaterial` per material of `scene` with its textures fully resident: each
/// material's rectangle of every layer cut out of the atlas' own mips (down to the
/// coarsest mip at which the rectangle owns whole tiles, where [`TesseraMaterial`]
/// stops too) into a mip-mapped Bevy image, sampled trilinearly with the material's
/// edge rule. What Bevy draws without Tessera, from the very same texels.
///
/// Meshes drawn with these need tangents for the normal maps
/// (`Mesh::generate_tangents`). Reads and decodes every tile the rectangles cover: a
/// scene atlas is small (a few thousand texels a side).
pub fn resident_materials(
    atlas: &Atlas,
    manifest: &SceneManifest,
    scene: &MaterialScene,
    images: &mut Assets<Image>,
) -> Result<Vec<StandardMaterial>, AtlasError> {
    if atlas.layers().len() < LAYERS {
        return Err(AtlasError::Invalid {
            path: atlas.path().to_path_buf(),
            what: format!(
                "layer count for a scene atlas: {} where {LAYERS} are needed (albedo, normal, roughness-metal)",
                atlas.layers().len()
            ),
        });
    }
    // Materials sharing a rectangle share its images.
    let mut cut: HashMap<[u32; 4], [Handle<Image>; LAYERS]> = HashMap::new();
    let mut out = Vec::with_capacity(manifest.materials.len());
    for (packed, gltf) in manifest.materials.iter().zip(&scene.materials) {
        let [r, g, b, a] = packed.base_color_factor;
        let mut m = StandardMaterial {
            base_color: Color::linear_rgba(r, g, b, a),
            metallic: packed.metallic_factor,
            perceptual_roughness: packed.roughness_factor,
            alpha_mode: crate::alpha_mode(packed),
            cull_mode: None,
            double_sided: gltf.double_sided,
            ..default()
        };
        if let Some(rect) = packed.rect {
            let handles = match cut.get(&rect) {
                Some(h) => h.clone(),
                None => {
                    let mut layer_image = |layer: usize| -> Result<Handle<Image>, AtlasError> {
                        Ok(images.add(rectangle_image(atlas, layer, rect, packed)?))
                    };
                    let h = [layer_image(0)?, layer_image(1)?, layer_image(2)?];
                    cut.insert(rect, h.clone());
                    h
                }
            };
            let [albedo, normal, orm] = handles;
            m.base_color_texture = Some(albedo);
            m.metallic_roughness_texture = Some(orm);
            if packed.has_normal_map {
                m.normal_map_texture = Some(normal);
            }
        }
        out.push(m);
    }
    Ok(out)
}

/// Layer `layer` of the atlas inside `rect` (mip-0 texels), mips 0 to the material's
/// `max_mip`, as a Bevy image.
fn rectangle_image(
    atlas: &Atlas,
    layer: usize,
    rect: [u32; 4],
    m: &PackedMaterial,
) -> Result<Image, AtlasError> {
    let lay = atlas.layers()[layer].layout;
    let [x0, y0, w0, h0] = rect;
    let levels = (m.max_mip + 1).min(lay.mip_count()).min(32 - w0.max(h0).max(1).leading_zeros());
    let mut data = Vec::new();
    for mip in 0..levels {
        let level = [x0 >> mip, y0 >> mip, (w0 >> mip).max(1), (h0 >> mip).max(1)];
        data.extend_from_slice(&atlas.read_texels(layer as u16, mip, level)?);
    }
    let format = if layer == 0 { TextureFormat::Rgba8UnormSrgb } else { TextureFormat::Rgba8Unorm };
    let mut image = Image::new_uninit(
        Extent3d { width: w0, height: h0, depth_or_array_layers: 1 },
        TextureDimension::D2,
        format,
        RenderAssetUsages::RENDER_WORLD,
    );
    image.data = Some(data);
    image.texture_descriptor.mip_level_count = levels;
    let address = |wrap: Wrap| {
        if wrap == Wrap::Repeat { ImageAddressMode::Repeat } else { ImageAddressMode::ClampToEdge }
    };
    image.sampler = ImageSampler::Descriptor(ImageSamplerDescriptor {
        label: Some(format!("tessera resident {} layer {layer}", m.name)),
        address_mode_u: address(m.wrap[0]),
        address_mode_v: address(m.wrap[1]),
        mag_filter: ImageFilterMode::Linear,
        min_filter: ImageFilterMode::Linear,
        mipmap_filter: ImageFilterMode::Linear,
        ..default()
    });
    Ok(image)
}

/// Bytes of GPU memory the images of `materials` take (each image once, all its mips).
pub fn resident_bytes(materials: &[StandardMaterial], images: &Assets<Image>) -> u64 {
    let mut seen = std::collections::HashSet::new();
    materials
        .iter()
        .flat_map(|m| [&m.base_color_texture, &m.normal_map_texture, &m.metallic_roughness_texture])
        .flatten()
        .filter(|h| seen.insert(h.id()))
        .filter_map(|h| images.get(h))
        .map(|i| i.data.as_ref().map_or(0, |d| d.len() as u64))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_percent_decoded() {
        assert_eq!(percent_decoded("level%20one.bin"), "level one.bin");
        assert_eq!(percent_decoded("a%2"), "a%2");
        assert_eq!(percent_decoded("a%+1b%zz"), "a%+1b%zz");
        assert_eq!(percent_decoded("%C3%A9t%C3%A9.bin"), "été.bin");
    }

    #[test]
    fn a_gltf_s_external_buffers_are_its_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("geo metry.bin"), [0u8; 4]).expect("buffer");
        let gltf = dir.path().join("level.gltf");
        let json = r#"{"asset":{"version":"2.0"},"buffers":[
            {"uri":"geo%20metry.bin","byteLength":4},
            {"uri":"data:application/octet-stream;base64,AAAAAA==","byteLength":4},
            {"uri":"missing.bin","byteLength":4},
            {"uri":"file:///etc/passwd","byteLength":4}]}"#;
        std::fs::write(&gltf, json).expect("gltf");
        assert_eq!(buffer_files(&gltf), [dir.path().join("geo metry.bin")]);
        assert!(buffer_files(&dir.path().join("nothing.gltf")).is_empty());
    }
}
