//! glTF 2.0 scenes as Tessera sees them: world-space meshes, PBR materials and the image
//! files behind their textures, ready to be packed into one stacked virtual atlas.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use glam::{Mat3, Mat4, Vec3, Vec4};

use crate::bake::BakeError;
use crate::format::atlas::{AtlasError, Wrap};
use crate::scene::{Mesh, Vertex};

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

/// `node 3 'name'`, for messages.
fn node_label(node: &gltf::Node) -> String {
    match node.name() {
        Some(name) => format!("node {} '{name}'", node.index()),
        None => format!("node {}", node.index()),
    }
}

/// Checks that the nodes form disjoint strict trees, as glTF requires: no node is its
/// own descendant and none has two parents. Unreached nodes are checked too.
fn check_node_forest(path: &Path, doc: &gltf::Document) -> Result<(), SceneError> {
    let bad = |reason: String| SceneError::NodeHierarchy { path: path.to_path_buf(), reason };
    let nodes: Vec<gltf::Node> = doc.nodes().collect();
    let mut parent: Vec<Option<usize>> = vec![None; nodes.len()];
    for node in &nodes {
        for child in node.children() {
            if child.index() == node.index() {
                return Err(bad(format!("{} is its own child", node_label(node))));
            }
            if let Some(p) = parent[child.index()] {
                return Err(bad(format!(
                    "{} has two parents, {} and {}",
                    node_label(&child),
                    node_label(&nodes[p]),
                    node_label(node)
                )));
            }
            parent[child.index()] = Some(node.index());
        }
    }
    // With one parent at most, following parents from any node ends at a root or loops.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnChain,
        Done,
    }
    let mut mark = vec![Mark::New; nodes.len()];
    let mut chain = Vec::new();
    for start in 0..nodes.len() {
        let mut i = start;
        loop {
            match mark[i] {
                Mark::Done => break,
                Mark::OnChain => {
                    return Err(bad(format!("{} is its own ancestor (a cycle)", node_label(&nodes[i]))));
                }
                Mark::New => {}
            }
            mark[i] = Mark::OnChain;
            chain.push(i);
            match parent[i] {
                Some(p) => i = p,
                None => break,
            }
        }
        for j in chain.drain(..) {
            mark[j] = Mark::Done;
        }
    }
    Ok(())
}

/// The encoded bytes of glTF image `index` of `gltf` (buffer view or data URI), reading
/// its buffers under `paths`.
pub(crate) fn embedded_image_bytes(
    gltf: &Path,
    index: usize,
    paths: ScenePaths,
) -> Result<Vec<u8>, SceneError> {
    let (doc, buffers) = open_document(gltf, paths)?;
    let bad = |reason: String| SceneError::Gltf { path: gltf.to_path_buf(), reason };
    let image = doc.images().nth(index).ok_or_else(|| bad(format!("no image {index}")))?;
    match image.source() {
        gltf::image::Source::View { view, .. } => {
            let data = &buffers[view.buffer().index()];
            view.offset()
                .checked_add(view.length())
                .and_then(|end| data.get(view.offset()..end))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| bad(format!("image {index}: buffer view outside its buffer")))
        }
        gltf::image::Source::Uri { uri, .. } => {
            data_uri(uri).ok_or_else(|| bad(format!("image {index}: bad data URI")))
        }
    }
}

/// Checks that an image file exists and that its header can be read.
pub(crate) fn check_image_file(file: &Path, material: &str) -> Result<(), SceneError> {
    match crate::bake::input_file::check_input(file) {
        Ok(_) => {}
        // Refused unopened: a FIFO would block the header read, a device never end it.
        Err(crate::bake::source::SourceError::NotRegular { kind, .. }) => {
            return Err(SceneError::BadTexture {
                image: file.display().to_string(),
                material: material.into(),
                reason: format!("it is {kind}, not an image file"),
            });
        }
        Err(_) => {
            return Err(SceneError::MissingTexture { image: file.to_path_buf(), material: material.into() });
        }
    }
    image_size(file, material).map(|_| ())
}

/// The size of an image file (PNG, JPEG, KTX2…), from its header.
pub(crate) fn image_size(file: &Path, material: &str) -> Result<(u32, u32), SceneError> {
    let bad = |reason: String| SceneError::BadTexture {
        image: file.display().to_string(),
        material: material.into(),
        reason,
    };
    let head = crate::bake::ktx2::read_head(file).map_err(|e| bad(e.to_string()))?;
    if head.starts_with(&crate::bake::ktx2::IDENTIFIER) {
        let h = crate::bake::ktx2::Header::parse(file, &head).map_err(|e| bad(e.to_string()))?;
        return Ok((h.width, h.height));
    }
    image::ImageReader::open(file)
        .map_err(|e| bad(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?
        .into_dimensions()
        .map_err(|e| bad(e.to_string()))
}

fn open_document(path: &Path, paths: ScenePaths) -> Result<(gltf::Document, Vec<Vec<u8>>), SceneError> {
    let bytes = crate::bake::input_file::read_input(path, crate::bake::source::memory_limit())?;
    let bad = |reason: String| SceneError::Gltf { path: path.to_path_buf(), reason };
    check_glb_header(&bytes).map_err(bad)?;
    let (mut json, mut blob) = parse_root(&bytes).map_err(bad)?;
    check_before_validation(&json).map_err(bad)?;
    // Required extensions this loader reads; the `gltf` crate refuses any others.
    json.extensions_required.retain(|e| e != KHR_TEXTURE_BASISU);
    let document = gltf::Document::from_json(json).map_err(|e| bad(e.to_string()))?;
    let mut buffers = Vec::new();
    for buffer in document.buffers() {
        let index = buffer.index();
        let err = |file: PathBuf, reason: String| SceneError::Buffer {
            path: file,
            gltf: path.to_path_buf(),
            index,
            reason,
        };
        let data = match buffer.source() {
            gltf::buffer::Source::Bin => {
                blob.take().ok_or_else(|| err(path.to_path_buf(), "no binary chunk".into()))?
            }
            gltf::buffer::Source::Uri(uri) if uri.starts_with("data:") => {
                data_uri(uri).ok_or_else(|| err(path.to_path_buf(), "bad data URI".into()))?
            }
            gltf::buffer::Source::Uri(uri) => {
                let file = resolve_uri(path, uri, &format!("buffer {index}"), paths)?;
                if !file.is_file() {
                    return Err(err(file, "file not found".into()));
                }
                crate::bake::input_file::read_input(&file, crate::bake::source::memory_limit())?
            }
        };
        if data.len() < buffer.length() {
            let file = match buffer.source() {
                gltf::buffer::Source::Uri(uri) if !uri.starts_with("data:") => {
                    resolve_uri(path, uri, &format!("buffer {index}"), paths)?
                }
                _ => path.to_path_buf(),
            };
            return Err(err(file, format!("{} bytes, the glTF says {}", data.len(), buffer.length())));
        }
        buffers.push(data);
    }
    Ok((document, buffers))
}

/// Checks the length in a GLB header: the `gltf` crate subtracts the header's 12 bytes
/// from it unchecked (found by fuzzing, `engine/core/tests/fuzz/gltf/`).
fn check_glb_header(bytes: &[u8]) -> Result<(), String> {
    if let Some(length) = bytes.strip_prefix(b"glTF").and_then(|b| b.get(4..8)) {
        let length = u32::from_le_bytes([length[0], length[1], length[2], length[3]]);
        if length < 12 {
            return Err(format!("GLB header states a length of {length} bytes, shorter than the header"));
        }
    }
    Ok(())
}

/// Checks what the `gltf` crate dereferences without checking, during its validation or
/// later, so that a malformed file is an error rather than a panic (found by fuzzing,
/// `engine/core/tests/fuzz/gltf/`): each primitive's `POSITION` accessor index (its
/// validation reads that accessor before checking indices), and each image's source
/// (a buffer view needs a MIME type; otherwise a URI is required).
/// The glTF JSON of `bytes` (a `.gltf` file or a GLB) and the GLB's binary chunk.
///
/// A texture whose only image is in `KHR_texture_basisu` (no `source` of its own) gets
/// that image as its `source` first: the `gltf` crate then reads it without its
/// `allow_empty_texture` feature, which Bevy's glTF loader (built against the same
/// crate) cannot be compiled with. This loader prefers the Basis image anyway.
fn parse_root(bytes: &[u8]) -> Result<(gltf::json::Root, Option<Vec<u8>>), String> {
    let (json, bin) = if bytes.starts_with(b"glTF") {
        let glb = gltf::binary::Glb::from_slice(bytes).map_err(|e| e.to_string())?;
        (glb.json.into_owned(), glb.bin.map(std::borrow::Cow::into_owned))
    } else {
        (bytes.to_vec(), None)
    };
    let mut value: serde_json::Value = serde_json::from_slice(&json).map_err(|e| e.to_string())?;
    if let Some(textures) = value.get_mut("textures").and_then(serde_json::Value::as_array_mut) {
        for (i, texture) in textures.iter_mut().enumerate() {
            let Some(t) = texture.as_object_mut() else { continue };
            if t.contains_key("source") {
                continue;
            }
            match basisu_source(t.get("extensions").and_then(serde_json::Value::as_object)) {
                Some(Ok(image)) => {
                    t.insert("source".into(), image.into());
                }
                Some(Err(reason)) => return Err(format!("texture {i}: {KHR_TEXTURE_BASISU}: {reason}")),
                None => return Err(format!("texture {i} has no image (no source, no {KHR_TEXTURE_BASISU})")),
            }
        }
    }
    let root = serde_json::from_value(value).map_err(|e| e.to_string())?;
    Ok((root, bin))
}

fn check_before_validation(json: &gltf::json::Root) -> Result<(), String> {
    for (m, mesh) in json.meshes.iter().enumerate() {
        for (p, prim) in mesh.primitives.iter().enumerate() {
            let position = gltf::json::validation::Checked::Valid(gltf::Semantic::Positions);
            if let Some(index) = prim.attributes.get(&position)
                && index.value() >= json.accessors.len()
            {
                return Err(format!(
                    "mesh {m} primitive {p}: POSITION accessor {} does not exist ({} accessors)",
                    index.value(),
                    json.accessors.len()
                ));
            }
        }
    }
    for (i, texture) in json.textures.iter().enumerate() {
        let basisu = basisu_source(texture.extensions.as_ref().map(|e| &e.others));
        let plain = texture.source.value();
        match basisu {
            Some(Err(reason)) => return Err(format!("texture {i}: {KHR_TEXTURE_BASISU}: {reason}")),
            Some(Ok(s)) if s >= json.images.len() => {
                return Err(format!("texture {i}: image {s} does not exist ({} images)", json.images.len()));
            }
            _ if plain >= json.images.len() => {
                return Err(format!(
                    "texture {i}: image {plain} does not exist ({} images)",
                    json.images.len()
                ));
            }
            _ => {}
        }
    }
    for (i, image) in json.images.iter().enumerate() {
        match (&image.buffer_view, &image.mime_type, &image.uri) {
            (Some(view), Some(_), _) if view.value() < json.buffer_views.len() => {}
            (Some(view), _, _) => {
                return Err(format!(
                    "image {i}: buffer view {} needs an existing view ({} views) and a MIME type",
                    view.value(),
                    json.buffer_views.len()
                ));
            }
            (None, _, Some(_)) => {}
            (None, _, None) => return Err(format!("image {i} has neither a URI nor a buffer view")),
        }
    }
    Ok(())
}

/// The glTF extension that gives a texture a KTX2 (Basis Universal) image.
pub const KHR_TEXTURE_BASISU: &str = "KHR_texture_basisu";

/// The image index a texture's `KHR_texture_basisu` extension names (`None` without the
/// extension; an error when it is there without a whole-number `source`).
fn basisu_source(
    extensions: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Option<Result<usize, String>> {
    let ext = extensions?.get(KHR_TEXTURE_BASISU)?;
    Some(
        ext.get("source")
            .and_then(serde_json::Value::as_u64)
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| format!("'source' must be an image index, found {ext}")),
    )
}

/// The folder a glTF's relative URIs are resolved against.
fn scene_folder(gltf: &Path) -> &Path {
    match gltf.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The file a buffer or image URI (not `data:`) of `gltf` names, after percent-decoding.
///
/// Under [`ScenePaths::Confined`] the URI must be relative, must not climb above the
/// glTF's folder, and, where the file exists, its real path (symbolic links followed)
/// must lie in the folder's real path. Nothing outside is opened, so an error says
/// nothing about the refused file. `what` names the URI's use for messages.
pub(crate) fn resolve_uri(
    gltf: &Path,
    uri: &str,
    what: &str,
    paths: ScenePaths,
) -> Result<PathBuf, SceneError> {
    let refuse = |reason: String| SceneError::OutsidePath {
        gltf: gltf.to_path_buf(),
        what: what.to_string(),
        uri: uri.to_string(),
        reason,
    };
    let base = scene_folder(gltf);
    let decoded = match uri_scheme(uri) {
        None => percent_decode(uri),
        Some(scheme) if scheme.eq_ignore_ascii_case("file") => {
            // file:///abs, file://localhost/abs or file:/abs: always an absolute path.
            let rest = &uri[5..];
            let rest = rest.strip_prefix("//").map_or(rest, |r| r.strip_prefix("localhost").unwrap_or(r));
            if !rest.starts_with('/') {
                return Err(SceneError::Gltf {
                    path: gltf.to_path_buf(),
                    reason: format!("{what} URI '{uri}': only local file:// URLs are supported"),
                });
            }
            percent_decode(rest)
        }
        Some(scheme) => {
            return Err(SceneError::Gltf {
                path: gltf.to_path_buf(),
                reason: format!(
                    "{what} URI '{uri}': scheme '{scheme}:' is not supported (only relative paths and data: URIs)"
                ),
            });
        }
    };
    let relative = Path::new(&decoded);
    let file = base.join(relative);
    if paths == ScenePaths::Anywhere {
        return Ok(file);
    }
    let mut depth = 0usize;
    for c in relative.components() {
        match c {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if depth > 0 => depth -= 1,
            std::path::Component::ParentDir => return Err(refuse("climbs out of the scene's folder".into())),
            std::path::Component::RootDir | std::path::Component::Prefix(_) => {
                return Err(refuse("is an absolute path".into()));
            }
        }
    }
    confine(gltf, &file)
        .map_err(|()| refuse("leads out of the scene's folder through a symbolic link".into()))?;
    Ok(file)
}

/// Checks that `file`, if it exists, really lies inside the folder of `gltf` (symbolic
/// links followed). A file that does not exist passes: reading it will say so.
fn confine(gltf: &Path, file: &Path) -> Result<(), ()> {
    let Ok(real) = file.canonicalize() else { return Ok(()) };
    match scene_folder(gltf).canonicalize() {
        Ok(folder) if real.starts_with(&folder) => Ok(()),
        _ => Err(()),
    }
}

/// Checks, just before reading, that an image file of `scene` is still allowed by its
/// [`ScenePaths`] (a symbolic link may have changed since the scene was loaded).
pub(crate) fn check_image_path(scene: &MaterialScene, file: &Path) -> Result<(), SceneError> {
    if scene.paths == ScenePaths::Anywhere {
        return Ok(());
    }
    confine(&scene.source, file).map_err(|()| SceneError::OutsidePath {
        gltf: scene.source.clone(),
        what: "image".into(),
        uri: file.display().to_string(),
        reason: "leads out of the scene's folder through a symbolic link".into(),
    })
}

/// The scheme of an absolute URI (`data`, `file`, `http`), or `None` for a relative one.
fn uri_scheme(uri: &str) -> Option<&str> {
    let (scheme, _) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then_some(scheme)
}

fn material(
    path: &Path,
    paths: ScenePaths,
    doc: &gltf::Document,
    index: usize,
    m: &gltf::Material,
) -> Result<Material, SceneError> {
    let name = m.name().map(str::to_string).unwrap_or_else(|| format!("material {index}"));
    let pbr = m.pbr_metallic_roughness();
    let tex = |t: gltf::Texture, set: u32| {
        if set != 0 {
            tracing::warn!(
                "{}: material '{name}' uses TEXCOORD_{set}; only TEXCOORD_0 is read",
                path.display()
            );
        }
        texture_ref(path, paths, doc, &t)
    };
    Ok(Material {
        name: name.clone(),
        base_color_factor: pbr.base_color_factor(),
        metallic_factor: pbr.metallic_factor(),
        roughness_factor: pbr.roughness_factor(),
        normal_scale: m.normal_texture().map_or(1.0, |n| n.scale()),
        alpha_cutoff: match m.alpha_mode() {
            gltf::material::AlphaMode::Mask => Some(m.alpha_cutoff().unwrap_or(0.5)),
            _ => None,
        },
        blend: m.alpha_mode() == gltf::material::AlphaMode::Blend,
        double_sided: m.double_sided(),
        base_color: pbr.base_color_texture().map(|i| tex(i.texture(), i.tex_coord())).transpose()?,
        normal: m.normal_texture().map(|i| tex(i.texture(), i.tex_coord())).transpose()?,
        metallic_roughness: pbr
            .metallic_roughness_texture()
            .map(|i| tex(i.texture(), i.tex_coord()))
            .transpose()?,
    })
}

fn texture_ref(
    path: &Path,
    paths: ScenePaths,
    doc: &gltf::Document,
    t: &gltf::Texture,
) -> Result<TextureRef, SceneError> {
    static MIRROR_WARNED: AtomicBool = AtomicBool::new(false);
    let wrap = |w: gltf::texture::WrappingMode| match w {
        gltf::texture::WrappingMode::ClampToEdge => Wrap::Clamp,
        gltf::texture::WrappingMode::Repeat => Wrap::Repeat,
        gltf::texture::WrappingMode::MirroredRepeat => {
            if !MIRROR_WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!("{}: mirrored repeat is baked as plain repeat", path.display());
            }
            Wrap::Repeat
        }
    };
    let sampler = t.sampler();
    // A KTX2 image (Basis Universal) when the texture has one: a client that reads
    // KHR_texture_basisu uses it rather than the PNG / JPEG fallback, as the extension
    // asks. Both indices were checked before validation.
    let img = match basisu_source(t.extensions()) {
        Some(Ok(index)) => doc.images().nth(index),
        _ => Some(t.source()),
    }
    .ok_or_else(|| SceneError::Gltf {
        path: path.to_path_buf(),
        reason: format!("texture {} has no usable image", t.index()),
    })?;
    let image = match img.source() {
        gltf::image::Source::Uri { uri, .. } if !uri.starts_with("data:") => {
            ImageRef::File(resolve_uri(path, uri, &format!("image {}", img.index()), paths)?)
        }
        _ => ImageRef::Embedded {
            index: img.index(),
            name: img.name().map(str::to_string).unwrap_or_else(|| format!("image {}", img.index())),
        },
    };
    Ok(TextureRef { image, wrap: [wrap(sampler.wrap_s()), wrap(sampler.wrap_t())] })
}

/// Checks the accessors a triangle primitive is read through (positions, normals, UVs,
/// indices): the element type [`primitive_mesh`] reads, at least one element, strides no
/// shorter than an element, every element inside its buffer view and the view inside its
/// buffer. The `gltf` reader trusts all of this (it asserts, overflows, or reaches
/// `unreachable!` on an index type it does not read), so such files are refused here
/// (found by fuzzing, `engine/core/tests/fuzz/gltf/`).
fn check_primitive_accessors(prim: &gltf::Primitive, buffers: &[Vec<u8>]) -> Result<(), String> {
    use gltf::Semantic;
    use gltf::accessor::{DataType as D, Dimensions};
    let attributes = [
        (Semantic::Positions, "POSITION", Dimensions::Vec3, &[D::F32][..]),
        (Semantic::Normals, "NORMAL", Dimensions::Vec3, &[D::F32][..]),
        (Semantic::TexCoords(0), "TEXCOORD_0", Dimensions::Vec2, &[D::F32, D::U8, D::U16][..]),
    ];
    for (semantic, name, dims, types) in attributes {
        if let Some(a) = prim.get(&semantic) {
            check_accessor(&a, name, dims, types, buffers)?;
        }
    }
    if let Some(a) = prim.indices() {
        check_accessor(&a, "indices", Dimensions::Scalar, &[D::U8, D::U16, D::U32], buffers)?;
    }
    Ok(())
}

/// See [`check_primitive_accessors`]; `what` names the accessor's use in messages.
fn check_accessor(
    a: &gltf::Accessor,
    what: &str,
    dims: gltf::accessor::Dimensions,
    types: &[gltf::accessor::DataType],
    buffers: &[Vec<u8>],
) -> Result<(), String> {
    let label = format!("{what} accessor {}", a.index());
    if a.dimensions() != dims || !types.contains(&a.data_type()) {
        return Err(format!(
            "{label} holds {:?} of {:?}, expected {dims:?} of one of {types:?}",
            a.dimensions(),
            a.data_type()
        ));
    }
    if a.count() == 0 {
        return Err(format!("{label} has no elements"));
    }
    if let Some(view) = a.view() {
        check_span(&view, a.offset(), a.count(), a.size(), buffers).map_err(|e| format!("{label}: {e}"))?;
    }
    if let Some(sparse) = a.sparse() {
        let n = sparse.count();
        if n == 0 {
            return Err(format!("{label} has an empty sparse part"));
        }
        let (indices, values) = (sparse.indices(), sparse.values());
        check_span(&indices.view(), indices.offset(), n, indices.index_type().size(), buffers)
            .map_err(|e| format!("{label} sparse indices: {e}"))?;
        check_span(&values.view(), values.offset(), n, a.size(), buffers)
            .map_err(|e| format!("{label} sparse values: {e}"))?;
    }
    Ok(())
}

/// Whether `count` (≥ 1) elements of `size` bytes from `offset` in `view`, at its stride,
/// lie inside the view, and the view inside its buffer.
fn check_span(
    view: &gltf::buffer::View,
    offset: usize,
    count: usize,
    size: usize,
    buffers: &[Vec<u8>],
) -> Result<(), String> {
    let stride = view.stride().unwrap_or(size);
    if stride < size {
        return Err(format!(
            "buffer view {} has a stride of {stride} for {size}-byte elements",
            view.index()
        ));
    }
    let end =
        stride.checked_mul(count - 1).and_then(|n| n.checked_add(offset)).and_then(|n| n.checked_add(size));
    if end.is_none_or(|end| end > view.length()) {
        return Err(format!(
            "{count} elements of {size} bytes from offset {offset} lie outside buffer view {} ({} bytes)",
            view.index(),
            view.length()
        ));
    }
    let buffer_len = buffers.get(view.buffer().index()).map_or(0, Vec::len);
    if view.offset().checked_add(view.length()).is_none_or(|end| end > buffer_len) {
        return Err(format!("buffer view {} lies outside its {buffer_len}-byte buffer", view.index()));
    }
    Ok(())
}

/// Reads one triangle primitive into world space; `None` without positions.
fn primitive_mesh(prim: &gltf::Primitive, buffers: &[Vec<u8>], world: Mat4) -> Option<Mesh> {
    let reader = prim.reader(|b| buffers.get(b.index()).map(Vec::as_slice));
    let positions: Vec<Vec3> =
        reader.read_positions()?.map(|p| world.transform_point3(Vec3::from(p))).collect();
    let n = positions.len();
    let normal_matrix = Mat3::from_mat4(world).inverse().transpose();
    let normals: Option<Vec<Vec3>> = reader
        .read_normals()
        .map(|it| it.map(|v| (normal_matrix * Vec3::from(v)).normalize_or_zero()).collect());
    let uvs: Vec<[f32; 2]> = reader.read_tex_coords(0).map(|t| t.into_f32().collect()).unwrap_or_default();
    let mut indices: Vec<u32> = match reader.read_indices() {
        Some(i) => i.into_u32().collect(),
        None => (0..n as u32).collect(),
    };
    indices.truncate(indices.len() / 3 * 3);
    indices.retain(|&i| (i as usize) < n);
    indices.truncate(indices.len() / 3 * 3);
    if world.determinant() < 0.0 {
        for tri in indices.chunks_exact_mut(3) {
            tri.swap(1, 2);
        }
    }
    let normals = match normals {
        Some(v) if v.len() == n => v,
        _ => face_normals(&positions, &indices),
    };
    let vertices = (0..n)
        .map(|i| Vertex {
            position: positions[i].to_array(),
            normal: normals[i].to_array(),
            uv: uvs.get(i).copied().unwrap_or([0.0, 0.0]),
        })
        .collect();
    Some(Mesh { vertices, indices })
}

/// Area-weighted vertex normals of counter-clockwise triangles.
fn face_normals(positions: &[Vec3], indices: &[u32]) -> Vec<Vec3> {
    let mut normals = vec![Vec3::ZERO; positions.len()];
    for tri in indices.chunks_exact(3) {
        let [a, b, c] = [tri[0], tri[1], tri[2]].map(|i| i as usize);
        let n = (positions[b] - positions[a]).cross(positions[c] - positions[a]);
        for i in [a, b, c] {
            normals[i] += n;
        }
    }
    normals.into_iter().map(|n| n.try_normalize().unwrap_or(Vec3::Y)).collect()
}

/// Decodes `%XX` escapes of a relative URI.
fn percent_decode(uri: &str) -> String {
    let b = uri.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The bytes of a base64 `data:` URI.
fn data_uri(uri: &str) -> Option<Vec<u8>> {
    let (head, payload) = uri.strip_prefix("data:")?.split_once(',')?;
    if !head.ends_with(";base64") {
        return Some(percent_decode(payload).into_bytes());
    }
    base64_decode(payload)
}

/// Standard-alphabet base64 with optional padding; `None` on a bad character.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s.as_bytes().iter().filter(|c| !c.is_ascii_whitespace() && **c != b'=') {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

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

    #[test]
    fn base64_and_percent() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("AAECAw==").unwrap(), [0, 1, 2, 3]);
        assert_eq!(percent_decode("a%20b.png"), "a b.png");
        assert_eq!(data_uri("data:application/octet-stream;base64,AAEC").unwrap(), [0, 1, 2]);
    }
}
