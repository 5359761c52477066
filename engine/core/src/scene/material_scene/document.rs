//! Reading a glTF or GLB document safely: the GLB header, the JSON root (with its
//! `KHR_texture_basisu` sources), checks before the gltf crate validates it, buffers,
//! and a node hierarchy that must be a forest.

use super::*;

pub(super) fn open_document(
    path: &Path,
    paths: ScenePaths,
) -> Result<(gltf::Document, Vec<Vec<u8>>), SceneError> {
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
pub(super) fn check_glb_header(bytes: &[u8]) -> Result<(), String> {
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
pub(super) fn parse_root(bytes: &[u8]) -> Result<(gltf::json::Root, Option<Vec<u8>>), String> {
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

pub(super) fn check_before_validation(json: &gltf::json::Root) -> Result<(), String> {
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

/// The image index a texture's `KHR_texture_basisu` extension names (`None` without the
/// extension; an error when it is there without a whole-number `source`).
pub(super) fn basisu_source(
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

/// `node 3 'name'`, for messages.
pub(super) fn node_label(node: &gltf::Node) -> String {
    match node.name() {
        Some(name) => format!("node {} '{name}'", node.index()),
        None => format!("node {}", node.index()),
    }
}

/// Checks that the nodes form disjoint strict trees, as glTF requires: no node is its
/// own descendant and none has two parents. Unreached nodes are checked too.
pub(super) fn check_node_forest(path: &Path, doc: &gltf::Document) -> Result<(), SceneError> {
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
