//! glTF 2.0 scenes as Tessera sees them: world-space meshes, PBR materials and the image
//! files behind their textures, ready to be packed into one stacked virtual atlas.
//!
//! By concern: this file holds the scene's types and the walk over a glTF's nodes;
//! `document.rs` reading the file safely; `paths.rs` where its files may come from;
//! `geometry.rs` meshes and materials of its primitives.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use glam::{Mat3, Mat4, Vec3, Vec4};

use crate::bake::BakeError;
use crate::format::atlas::{AtlasError, Wrap};
use crate::scene::{Mesh, Vertex};

mod document;
mod geometry;
mod paths;

use document::*;
use geometry::*;
use paths::*;
pub(crate) use paths::{check_image_file, check_image_path, embedded_image_bytes, image_size, resolve_uri};

/// A scene loaded from glTF: meshes in world space and the materials they use.
#[derive(Clone, Debug)]
pub struct MaterialScene {
    /// Every triangle primitive of the default scene, transformed to world space.
    pub meshes: Vec<SceneMesh>,
    /// The materials; a default one is appended when a primitive has none.
    pub materials: Vec<Material>,
    /// The index of that appended default material, if any.
    pub default_material: Option<usize>,
    /// Smallest world-space corner of all vertices (zero when there are none).
    pub bounds_min: Vec3,
    /// Largest world-space corner of all vertices (zero when there are none).
    pub bounds_max: Vec3,
    /// Direction the light of the first `KHR_lights_punctual` directional light travels,
    /// world space, unit length.
    pub sun_direction: Option<Vec3>,
    /// The file the scene came from (the image itself for [`globe_scene`]).
    pub source: PathBuf,
    /// Which files the scene may read besides `source`; the bake checks image files again.
    pub paths: ScenePaths,
}

/// Which files a glTF's buffer and image URIs may name.
///
/// A glTF is often downloaded, so by default its URIs are confined to its own folder: a
/// URI may not climb out with `..` (also percent-encoded), be an absolute path or a
/// `file://` URL, or lead out through a symbolic link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScenePaths {
    /// Only files inside the glTF's folder (the default).
    #[default]
    Confined,
    /// Any file, absolute paths and `file://` URLs included: for trusted scenes whose
    /// assets live elsewhere.
    Anywhere,
}

/// One triangle primitive of a scene, in world space.
#[derive(Clone, Debug)]
pub struct SceneMesh {
    /// The glTF mesh name (or node name), with `#i` for the i-th primitive after the first.
    pub name: String,
    /// World-space vertices; `uv` is glTF `TEXCOORD_0` unchanged.
    pub mesh: Mesh,
    /// Index into [`MaterialScene::materials`].
    pub material: usize,
}

/// A glTF metallic-roughness material.
#[derive(Clone, Debug, PartialEq)]
pub struct Material {
    /// The material name (`material N` when the glTF has none).
    pub name: String,
    /// Linear RGBA multiplier of the base colour.
    pub base_color_factor: [f32; 4],
    /// Metalness multiplier.
    pub metallic_factor: f32,
    /// Roughness multiplier.
    pub roughness_factor: f32,
    /// Scale of the normal map's X and Y.
    pub normal_scale: f32,
    /// Alpha-test threshold when the material is alpha-masked.
    pub alpha_cutoff: Option<f32>,
    /// Whether the material blends over what lies behind it by its alpha (glTF's
    /// `alphaMode: BLEND`).
    pub blend: bool,
    /// Whether back faces are drawn.
    pub double_sided: bool,
    /// Base colour texture (sRGB).
    pub base_color: Option<TextureRef>,
    /// Tangent-space normal map (linear).
    pub normal: Option<TextureRef>,
    /// Metallic-roughness texture: G roughness, B metallic (linear).
    pub metallic_roughness: Option<TextureRef>,
}

impl Default for Material {
    /// glTF's default material: white, fully metallic, fully rough, no textures.
    fn default() -> Self {
        Self {
            name: "default".into(),
            base_color_factor: [1.0; 4],
            metallic_factor: 1.0,
            roughness_factor: 1.0,
            normal_scale: 1.0,
            alpha_cutoff: None,
            blend: false,
            double_sided: false,
            base_color: None,
            normal: None,
            metallic_roughness: None,
        }
    }
}

/// An image and how it is sampled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TextureRef {
    /// Where the texels are.
    pub image: ImageRef,
    /// Edge rule along u and v (glTF mirrored repeat becomes repeat).
    pub wrap: [Wrap; 2],
}

/// Where an image's encoded bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ImageRef {
    /// An image file (path resolved against the glTF's folder).
    File(PathBuf),
    /// An image inside the glTF (buffer view or data URI): glTF image `index`.
    Embedded {
        /// The glTF image index.
        index: usize,
        /// The image name, for messages.
        name: String,
    },
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageRef::File(p) => write!(f, "{}", p.display()),
            ImageRef::Embedded { index, name } => write!(f, "embedded image {index} '{name}'"),
        }
    }
}

/// Why a scene could not be loaded or baked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SceneError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The glTF itself is malformed or uses something unsupported.
    #[error("{path}: not a usable glTF 2.0 file: {reason}")]
    Gltf {
        /// The glTF file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A buffer (`.bin`) the glTF refers to is missing, unreadable or too short.
    #[error("{path}: buffer {index} of {gltf}: {reason}")]
    Buffer {
        /// The buffer file (or the glTF for embedded buffers).
        path: PathBuf,
        /// The glTF file.
        gltf: PathBuf,
        /// The glTF buffer index.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A texture image does not exist.
    #[error("{image}: texture of material '{material}' not found")]
    MissingTexture {
        /// The image file.
        image: PathBuf,
        /// The material using it.
        material: String,
    },
    /// A texture image exists but cannot be decoded.
    #[error("{image}: cannot decode texture of material '{material}': {reason}")]
    BadTexture {
        /// The image (a file path, or `embedded image N 'name'`).
        image: String,
        /// The material using it.
        material: String,
        /// What the decoder said.
        reason: String,
    },
    /// A buffer or image URI names a file outside the glTF's folder, and
    /// [`ScenePaths::Confined`] forbids that. The file itself is never opened.
    #[error("{gltf}: {what} URI '{uri}' {reason}: refused, files outside the scene's folder are not read")]
    OutsidePath {
        /// The glTF file.
        gltf: PathBuf,
        /// What the URI is for (`buffer 0`, `image 2`).
        what: String,
        /// The URI as the glTF writes it.
        uri: String,
        /// How it leaves the folder.
        reason: String,
    },
    /// The glTF's node hierarchy is not a forest of strict trees (a cycle, or a node
    /// with two parents), which glTF forbids; walking it would never end.
    #[error("{path}: bad node hierarchy: {reason}")]
    NodeHierarchy {
        /// The glTF file.
        path: PathBuf,
        /// Which node is wrong and how.
        reason: String,
    },
    /// An input file is not a regular file, or is longer than the memory limit
    /// ([`memory_limit`](crate::bake::source::memory_limit)).
    #[error(transparent)]
    Input(#[from] crate::bake::source::SourceError),
    /// Baking the atlas failed.
    #[error(transparent)]
    Bake(#[from] BakeError),
    /// The baked atlas could not be read back.
    #[error(transparent)]
    Atlas(#[from] AtlasError),
    /// A scene manifest is malformed.
    #[error("{path}: bad scene manifest: {reason}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Loads the default scene (else the first) of a `.gltf` or `.glb` file: every triangle
/// primitive of every node, recursively, transformed to world space, and the materials.
/// Buffer and image files must lie in the glTF's folder ([`ScenePaths::Confined`]).
///
/// Texture files are checked to exist and to have a readable image header, so that a
/// missing or broken texture is reported here, naming the file and the material.
pub fn load_gltf(path: &Path) -> Result<MaterialScene, SceneError> {
    load_gltf_with(path, ScenePaths::Confined)
}

/// [`load_gltf`], with `paths` deciding which files the glTF's URIs may name.
pub fn load_gltf_with(path: &Path, paths: ScenePaths) -> Result<MaterialScene, SceneError> {
    let (doc, buffers) = open_document(path, paths)?;
    check_node_forest(path, &doc)?;
    let mut materials = Vec::with_capacity(doc.materials().len());
    for (i, m) in doc.materials().enumerate() {
        materials.push(material(path, paths, &doc, i, &m)?);
    }
    for m in &materials {
        for t in [&m.base_color, &m.normal, &m.metallic_roughness].into_iter().flatten() {
            if let ImageRef::File(file) = &t.image {
                check_image_file(file, &m.name)?;
            }
        }
    }
    let mut out = MaterialScene {
        meshes: Vec::new(),
        materials: Vec::new(),
        default_material: None,
        bounds_min: Vec3::ZERO,
        bounds_max: Vec3::ZERO,
        sun_direction: None,
        source: path.to_path_buf(),
        paths,
    };
    let mut default_material = None;
    let scene = doc.default_scene().or_else(|| doc.scenes().next());
    let mut stack: Vec<(gltf::Node, Mat4)> =
        scene.iter().flat_map(|s| s.nodes()).map(|n| (n, Mat4::IDENTITY)).collect();
    stack.reverse();
    // Each node is instanced at most once, so the walk ends after at most `nodes` steps
    // even if a hierarchy slipped past `check_node_forest` (a root listed twice).
    let mut visited = vec![false; doc.nodes().len()];
    while let Some((node, parent)) = stack.pop() {
        if std::mem::replace(&mut visited[node.index()], true) {
            return Err(SceneError::NodeHierarchy {
                path: path.to_path_buf(),
                reason: format!("{} is reached twice from the scene", node_label(&node)),
            });
        }
        let world = parent * Mat4::from_cols_array_2d(&node.transform().matrix());
        if let Some(light) = node.light()
            && matches!(light.kind(), gltf::khr_lights_punctual::Kind::Directional)
            && out.sun_direction.is_none()
        {
            // A glTF light shines along its node's local -Z.
            let d = (world * Vec4::new(0.0, 0.0, -1.0, 0.0)).truncate();
            out.sun_direction = Some(d.normalize_or_zero()).filter(|d| *d != Vec3::ZERO);
        }
        if let Some(mesh) = node.mesh() {
            let name = mesh
                .name()
                .or(node.name())
                .map(str::to_string)
                .unwrap_or_else(|| format!("mesh {}", mesh.index()));
            for (k, prim) in mesh.primitives().enumerate() {
                let prim_name = if k == 0 { name.clone() } else { format!("{name}#{k}") };
                if prim.mode() != gltf::mesh::Mode::Triangles {
                    tracing::warn!(
                        "{}: skipping primitive '{prim_name}': mode {:?}",
                        path.display(),
                        prim.mode()
                    );
                    continue;
                }
                check_primitive_accessors(&prim, &buffers).map_err(|reason| SceneError::Gltf {
                    path: path.to_path_buf(),
                    reason: format!("primitive '{prim_name}': {reason}"),
                })?;
                let Some(mesh) = primitive_mesh(&prim, &buffers, world) else {
                    tracing::warn!("{}: skipping primitive '{prim_name}': no positions", path.display());
                    continue;
                };
                let material = match prim.material().index() {
                    Some(i) => i,
                    None => *default_material.get_or_insert(materials.len()),
                };
                out.meshes.push(SceneMesh { name: prim_name, mesh, material });
            }
        }
        let children: Vec<_> = node.children().map(|c| (c, world)).collect();
        stack.extend(children.into_iter().rev());
    }
    if default_material.is_some() {
        materials.push(Material::default());
    }
    out.materials = materials;
    out.default_material = default_material;
    let mut points = out.meshes.iter().flat_map(|m| m.mesh.vertices.iter()).map(|v| Vec3::from(v.position));
    if let Some(first) = points.next() {
        let (lo, hi) = points.fold((first, first), |(lo, hi), p| (lo.min(p), hi.max(p)));
        out.bounds_min = lo;
        out.bounds_max = hi;
    }
    Ok(out)
}

/// A UV sphere of `radius` at the origin textured with `image` (equirectangular, repeating
/// in u, clamped in v): the globe as a one-material scene.
pub fn globe_scene(
    image: &Path,
    radius: f32,
    segments: u32,
    rings: u32,
) -> Result<MaterialScene, SceneError> {
    let name = image.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "globe".into());
    check_image_file(image, &name)?;
    let mesh = crate::scene::uv_sphere(Vec3::ZERO, radius, segments, rings);
    let material = Material {
        name: name.clone(),
        metallic_factor: 0.0,
        base_color: Some(TextureRef {
            image: ImageRef::File(image.to_path_buf()),
            wrap: [Wrap::Repeat, Wrap::Clamp],
        }),
        ..Material::default()
    };
    Ok(MaterialScene {
        meshes: vec![SceneMesh { name, mesh, material: 0 }],
        materials: vec![material],
        default_material: None,
        bounds_min: Vec3::splat(-radius),
        bounds_max: Vec3::splat(radius),
        sun_direction: None,
        source: image.to_path_buf(),
        // The caller named the image itself.
        paths: ScenePaths::Anywhere,
    })
}

/// The glTF extension that gives a texture a KTX2 (Basis Universal) image.
pub const KHR_TEXTURE_BASISU: &str = "KHR_texture_basisu";

/// The distinct images a scene's materials use, in first-use order.
pub fn scene_images(scene: &MaterialScene) -> Vec<ImageRef> {
    let mut seen = HashSet::new();
    scene
        .materials
        .iter()
        .flat_map(|m| [&m.base_color, &m.normal, &m.metallic_roughness])
        .flatten()
        .filter(|t| seen.insert(t.image.clone()))
        .map(|t| t.image.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn base64_and_percent() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("AAECAw==").unwrap(), [0, 1, 2, 3]);
        assert_eq!(percent_decode("a%20b.png"), "a b.png");
        assert_eq!(data_uri("data:application/octet-stream;base64,AAEC").unwrap(), [0, 1, 2]);
    }
}
