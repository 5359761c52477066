//! GPU-free mesh data for the built-in scene (ground plane, globe, cube) that the renderer uploads.

use glam::Vec3;

/// Half-extents (x, z) of the ground for a 2:1 virtual texture, which the camera presets assume.
pub const PRESET_GROUND_HALF_EXTENTS: (f32, f32) = (1.0, 0.5);
/// Centre of the built-in globe.
pub const GLOBE_CENTER: Vec3 = Vec3::new(-0.45, 0.3, 0.0);
/// Radius of the built-in globe.
pub const GLOBE_RADIUS: f32 = 0.25;
/// Centre of the built-in cube.
pub const CUBE_CENTER: Vec3 = Vec3::new(0.45, 0.2, 0.0);
/// Edge length of the built-in cube.
pub const CUBE_SIDE: f32 = 0.3;

/// Ground quads along each side in [`builtin_scene`].
const GROUND_SUBDIVISIONS: u32 = 16;
/// Globe longitude segments in [`builtin_scene`].
const GLOBE_SEGMENTS: u32 = 64;
/// Globe latitude rings in [`builtin_scene`].
const GLOBE_RINGS: u32 = 32;

/// One mesh vertex as the renderer's vertex buffer lays it out (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Vertex {
    /// World-space position.
    pub position: [f32; 3],
    /// Outward unit normal.
    pub normal: [f32; 3],
    /// Virtual-texture coordinate, in `[0, 1]²` with v = 0 at the top row of the texture.
    pub uv: [f32; 2],
}

impl Vertex {
    fn new(position: Vec3, normal: Vec3, uv: [f32; 2]) -> Self {
        Self { position: position.to_array(), normal: normal.to_array(), uv }
    }
}

/// An indexed triangle list whose triangles are wound counter-clockwise seen from outside.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mesh {
    /// The vertices.
    pub vertices: Vec<Vertex>,
    /// Three indices into `vertices` per triangle.
    pub indices: Vec<u32>,
}

impl Mesh {
    /// Number of triangles.
    pub fn triangle_count(&self) -> usize {
        self.indices.len() / 3
    }

    /// The vertices as bytes, ready for a vertex buffer.
    pub fn vertex_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.vertices)
    }

    /// The indices as bytes, ready for a `u32` index buffer.
    pub fn index_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.indices)
    }
}

/// The height of the floor of `meshes`: the median height, weighted by area, of the
/// triangles facing up (normal within about 37° of +Y); `None` when none face up.
pub fn floor_level<'a>(meshes: impl IntoIterator<Item = &'a Mesh>) -> Option<f32> {
    let mut samples: Vec<(f32, f32)> = Vec::new();
    for m in meshes {
        for t in m.indices.chunks_exact(3) {
            let p = |i: u32| m.vertices.get(i as usize).map(|v| Vec3::from(v.position));
            let (Some(a), Some(b), Some(c)) = (p(t[0]), p(t[1]), p(t[2])) else { continue };
            let n = (b - a).cross(c - a);
            let area = n.length() * 0.5;
            if area > 0.0 && n.y / (2.0 * area) > 0.8 {
                samples.push(((a.y + b.y + c.y) / 3.0, area));
            }
        }
    }
    samples.retain(|s| s.0.is_finite());
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f32 = samples.iter().map(|s| s.1).sum();
    let mut acc = 0.0;
    samples
        .into_iter()
        .find(|s| {
            acc += s.1;
            acc >= total * 0.5
        })
        .map(|s| s.0)
}

/// A ground plane on y = 0 spanning `[-half_x, half_x] × [-half_z, half_z]`, facing +Y, split
/// into `subdivisions` × `subdivisions` quads (at least one).
///
/// The texture maps once over it: uv (0, 0) at (-half_x, -half_z), (1, 1) at (+half_x, +half_z).
pub fn plane(half_x: f32, half_z: f32, subdivisions: u32) -> Mesh {
    let n = subdivisions.max(1);
    let row = n + 1;
    let mut vertices = Vec::with_capacity((row * row) as usize);
    for j in 0..=n {
        let v = j as f32 / n as f32;
        for i in 0..=n {
            let u = i as f32 / n as f32;
            let position = Vec3::new(half_x * (2.0 * u - 1.0), 0.0, half_z * (2.0 * v - 1.0));
            vertices.push(Vertex::new(position, Vec3::Y, [u, v]));
        }
    }
    let mut indices = Vec::with_capacity((n * n * 6) as usize);
    for j in 0..n {
        for i in 0..n {
            let a = j * row + i;
            let (right, down, diagonal) = (a + 1, a + row, a + row + 1);
            indices.extend_from_slice(&[a, down, right, right, down, diagonal]);
        }
    }
    Mesh { vertices, indices }
}

/// A UV sphere with `segments` longitude divisions (at least 3) and `rings` latitude divisions
/// (at least 2).
///
/// Equirectangular uv: u runs with longitude from -180° at u = 0 to +180° at u = 1 (u = 0.5
/// faces +Z, east to the right seen from outside), v from 0 at the north pole (+Y) to 1 at the
/// south pole. The seam and poles have duplicated vertices so uvs do not wrap.
pub fn uv_sphere(center: Vec3, radius: f32, segments: u32, rings: u32) -> Mesh {
    let segments = segments.max(3);
    let rings = rings.max(2);
    let row = segments + 1;
    let mut vertices = Vec::with_capacity((row * (rings + 1)) as usize);
    for r in 0..=rings {
        let v = r as f32 / rings as f32;
        let polar = std::f32::consts::PI * v;
        let pole = r == 0 || r == rings;
        for s in 0..=segments {
            // Pole vertices sit mid-segment so each pole triangle samples its own column.
            let u =
                if pole { ((s as f32 + 0.5) / segments as f32).min(1.0) } else { s as f32 / segments as f32 };
            let longitude = std::f32::consts::TAU * u - std::f32::consts::PI;
            let normal = if pole {
                if r == 0 { Vec3::Y } else { Vec3::NEG_Y }
            } else {
                Vec3::new(polar.sin() * longitude.sin(), polar.cos(), polar.sin() * longitude.cos())
                    .normalize()
            };
            vertices.push(Vertex::new(center + normal * radius, normal, [u, v]));
        }
    }
    let mut indices = Vec::with_capacity((segments * (rings - 1) * 6) as usize);
    for r in 0..rings {
        for s in 0..segments {
            let a = r * row + s;
            let (east, south, south_east) = (a + 1, a + row, a + row + 1);
            // The northern triangle collapses at the north pole, the southern one at the south pole.
            if r + 1 < rings {
                indices.extend_from_slice(&[a, south, south_east]);
            }
            if r > 0 {
                indices.extend_from_slice(&[a, south_east, east]);
            }
        }
    }
    Mesh { vertices, indices }
}

/// An axis-aligned cube of edge `side` with 4 vertices per face and flat normals.
///
/// Faces +X, -X, +Y, -Y, +Z, -Z map the cells of a 3 × 2 grid over the uv square, left to
/// right then top to bottom, each upright seen from outside (the top and bottom faces with
/// their texture top towards -Z and +Z respectively), so the cube shows six texture regions.
pub fn cube(center: Vec3, side: f32) -> Mesh {
    // (outward normal, face right, face up) with right × up = normal.
    let faces = [
        (Vec3::X, Vec3::NEG_Z, Vec3::Y),
        (Vec3::NEG_X, Vec3::Z, Vec3::Y),
        (Vec3::Y, Vec3::X, Vec3::NEG_Z),
        (Vec3::NEG_Y, Vec3::X, Vec3::Z),
        (Vec3::Z, Vec3::X, Vec3::Y),
        (Vec3::NEG_Z, Vec3::NEG_X, Vec3::Y),
    ];
    // Corners as (right, up) signs and their uv within the face's cell: top-left, bottom-left,
    // bottom-right, top-right.
    let corners =
        [(-1.0, 1.0, 0.0, 0.0), (-1.0, -1.0, 0.0, 1.0), (1.0, -1.0, 1.0, 1.0), (1.0, 1.0, 1.0, 0.0)];
    let half = side / 2.0;
    let mut vertices = Vec::with_capacity(24);
    let mut indices = Vec::with_capacity(36);
    for (face, (normal, right, up)) in faces.into_iter().enumerate() {
        let (col, row) = ((face % 3) as f32, (face / 3) as f32);
        let base = vertices.len() as u32;
        for (sr, su, cu, cv) in corners {
            let position = center + (normal + right * sr + up * su) * half;
            vertices.push(Vertex::new(position, normal, [(col + cu) / 3.0, (row + cv) / 2.0]));
        }
        indices.extend_from_slice(&[base, base + 1, base + 2, base, base + 2, base + 3]);
    }
    Mesh { vertices, indices }
}

/// The built-in scene for a virtual texture of the given width / height: a ground plane of
/// half-extents (1, 1 / aspect) named `"ground"`, a globe named `"globe"` and a cube named
/// `"cube"` (see the constants in this module). A non-positive or non-finite aspect is treated
/// as 2, the ratio the camera presets assume.
pub fn builtin_scene(aspect: f32) -> Vec<(String, Mesh)> {
    let aspect = if aspect.is_finite() && aspect > 0.0 { aspect } else { 2.0 };
    let half_x = PRESET_GROUND_HALF_EXTENTS.0;
    vec![
        ("ground".to_owned(), plane(half_x, half_x / aspect, GROUND_SUBDIVISIONS)),
        ("globe".to_owned(), uv_sphere(GLOBE_CENTER, GLOBE_RADIUS, GLOBE_SEGMENTS, GLOBE_RINGS)),
        ("cube".to_owned(), cube(CUBE_CENTER, CUBE_SIDE)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn floor_is_the_largest_upward_area() {
        let ground = plane(5.0, 5.0, 4);
        let mut table = plane(0.5, 0.5, 1);
        for v in &mut table.vertices {
            v.position[1] = 0.8;
        }
        let cube = cube(Vec3::new(2.0, 3.0, 0.0), 1.0);
        assert_eq!(floor_level([&ground, &table, &cube]), Some(0.0));
        assert_eq!(floor_level([&table]), Some(0.8));
        let wall = Mesh {
            vertices: vec![
                Vertex::new(Vec3::ZERO, Vec3::X, [0.0; 2]),
                Vertex::new(Vec3::Y, Vec3::X, [0.0; 2]),
                Vertex::new(Vec3::Z, Vec3::X, [0.0; 2]),
            ],
            indices: vec![0, 1, 2],
        };
        assert_eq!(floor_level([&wall]), None);
    }

    fn meshes() -> Vec<(String, Mesh)> {
        let mut all = builtin_scene(2.0);
        all.push(("plane 1x1".into(), plane(0.3, 0.7, 0)));
        all.push(("small sphere".into(), uv_sphere(Vec3::new(1.0, 2.0, 3.0), 0.5, 3, 2)));
        all.push(("unit cube".into(), cube(Vec3::ZERO, 1.0)));
        all
    }

    #[test]
    fn indices_in_bounds_and_whole_triangles() {
        for (name, mesh) in meshes() {
            assert!(!mesh.indices.is_empty(), "{name}");
            assert_eq!(mesh.indices.len() % 3, 0, "{name}");
            let n = mesh.vertices.len() as u32;
            assert!(mesh.indices.iter().all(|&i| i < n), "{name}");
            assert_eq!(mesh.vertex_bytes().len(), mesh.vertices.len() * 32);
            assert_eq!(mesh.index_bytes().len(), mesh.indices.len() * 4);
        }
    }

    #[test]
    fn normals_unit_and_uvs_in_range() {
        for (name, mesh) in meshes() {
            for v in &mesh.vertices {
                let len = Vec3::from(v.normal).length();
                assert!((len - 1.0).abs() < 1e-5, "{name}: normal {:?}", v.normal);
                assert!(v.uv.iter().all(|c| (0.0..=1.0).contains(c)), "{name}: uv {:?}", v.uv);
                assert!(v.position.iter().all(|c| c.is_finite()), "{name}");
            }
        }
    }

    #[test]
    fn winding_agrees_with_normals() {
        for (name, mesh) in meshes() {
            for tri in mesh.indices.chunks_exact(3) {
                let [a, b, c] = [0, 1, 2].map(|k| mesh.vertices[tri[k] as usize]);
                let (pa, pb, pc) = (Vec3::from(a.position), Vec3::from(b.position), Vec3::from(c.position));
                let face = (pb - pa).cross(pc - pa);
                assert!(face.length() > 1e-9, "{name}: degenerate triangle {tri:?}");
                for v in [a, b, c] {
                    assert!(
                        face.dot(Vec3::from(v.normal)) > 0.0,
                        "{name}: triangle {tri:?} wound against normals"
                    );
                }
            }
        }
    }

    #[test]
    fn normals_point_outward() {
        let sphere = uv_sphere(GLOBE_CENTER, GLOBE_RADIUS, 16, 8);
        let cube = cube(CUBE_CENTER, CUBE_SIDE);
        for (mesh, center) in [(sphere, GLOBE_CENTER), (cube, CUBE_CENTER)] {
            for v in &mesh.vertices {
                assert!((Vec3::from(v.position) - center).dot(Vec3::from(v.normal)) > 0.0);
            }
        }
        let ground = plane(1.0, 0.5, 4);
        assert!(ground.vertices.iter().all(|v| v.normal == [0.0, 1.0, 0.0] && v.position[1] == 0.0));
    }

    #[test]
    fn plane_uv_corners() {
        let mesh = plane(1.0, 0.5, 8);
        let uv_at =
            |x: f32, z: f32| mesh.vertices.iter().find(|v| v.position == [x, 0.0, z]).map(|v| v.uv).unwrap();
        assert_eq!(uv_at(-1.0, -0.5), [0.0, 0.0]);
        assert_eq!(uv_at(1.0, -0.5), [1.0, 0.0]);
        assert_eq!(uv_at(-1.0, 0.5), [0.0, 1.0]);
        assert_eq!(uv_at(1.0, 0.5), [1.0, 1.0]);
        assert_eq!(mesh.vertices.len(), 81);
        assert_eq!(mesh.triangle_count(), 128);
    }

    #[test]
    fn sphere_uv_follows_latitude_and_longitude() {
        let mesh = uv_sphere(Vec3::ZERO, 1.0, 8, 4);
        for v in &mesh.vertices {
            let n = Vec3::from(v.normal);
            // v: 0 at the north pole, 1 at the south pole.
            assert!((n.y - (std::f32::consts::PI * v.uv[1]).cos()).abs() < 1e-5, "{v:?}");
            if n.y.abs() < 0.999 {
                let longitude = n.x.atan2(n.z);
                let expected = std::f32::consts::TAU * v.uv[0] - std::f32::consts::PI;
                let diff = (longitude - expected).rem_euclid(std::f32::consts::TAU);
                assert!(!(1e-4..=std::f32::consts::TAU - 1e-4).contains(&diff), "{v:?}");
            }
        }
        // The seam is duplicated: both u = 0 and u = 1 exist on the equator.
        let equator: Vec<_> = mesh.vertices.iter().filter(|v| v.uv[1] == 0.5).map(|v| v.uv[0]).collect();
        assert!(equator.contains(&0.0) && equator.contains(&1.0));
    }

    #[test]
    fn cube_faces_cover_a_3x2_grid() {
        let mesh = cube(Vec3::ZERO, 2.0);
        let mut cells: Vec<(u32, u32)> = mesh
            .vertices
            .chunks_exact(4)
            .map(|face| {
                let (u, v) = face.iter().fold((0.0, 0.0), |(u, v), x| (u + x.uv[0] / 4.0, v + x.uv[1] / 4.0));
                ((u * 3.0).floor() as u32, (v * 2.0).floor() as u32)
            })
            .collect();
        cells.sort();
        assert_eq!(cells, vec![(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
        for v in &mesh.vertices {
            assert!(v.position.iter().all(|c| c.abs() == 1.0));
        }
    }

    #[test]
    fn builtin_scene_matches_presets() {
        let scene = builtin_scene(2.0);
        let names: Vec<_> = scene.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ground", "globe", "cube"]);
        let ground = &scene[0].1;
        let max = |k: usize| ground.vertices.iter().map(|v| v.position[k]).fold(f32::MIN, f32::max);
        assert_eq!((max(0), max(2)), PRESET_GROUND_HALF_EXTENTS);
        let wide = builtin_scene(4.0);
        assert!(wide[0].1.vertices.iter().all(|v| v.position[2].abs() <= 0.25));
        assert_eq!(builtin_scene(f32::NAN)[0].1, scene[0].1);
    }
}
