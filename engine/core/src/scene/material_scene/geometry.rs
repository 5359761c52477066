//! Meshes and materials of glTF primitives: accessors checked against their buffers,
//! vertices in world space, face normals where the file has none, material factors
//! and texture references.

use super::*;

pub(super) fn material(
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

pub(super) fn texture_ref(
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
pub(super) fn check_primitive_accessors(prim: &gltf::Primitive, buffers: &[Vec<u8>]) -> Result<(), String> {
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
pub(super) fn check_accessor(
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
pub(super) fn check_span(
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
pub(super) fn primitive_mesh(prim: &gltf::Primitive, buffers: &[Vec<u8>], world: Mat4) -> Option<Mesh> {
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
pub(super) fn face_normals(positions: &[Vec3], indices: &[u32]) -> Vec<Vec3> {
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
