//! The runtime-virtual-texture terrain (issue 43) without a GPU: what the `terrain`
//! scene is made of, computed from real data, for the renderers in `tessera-tools` and
//! `bevy_tessera` to upload.
//!
//! - **Heights** from the Earth relief image `etopo1.jpg` (a hypsometric colour map with
//!   hill shading): each colour is mapped back to an elevation band, sea is flat at 0.
//!   The mesh and the normal map are made from them.
//! - **Materials**: K tiling texture pairs (albedo + normal map) from the CC0 art of
//!   `castle-game-engine-doc` (the dungeon and the castle), 4 or 8 of them.
//! - **A splat map**: K weights per texel from elevation, slope and noise, packed
//!   four to an RGBA8 layer.
//! - **Decals**: a road network near the start of the walk (asphalt, a dashed centre
//!   line and crossing stripes per segment), looked up through a grid of cells.
//! - **A virtual texture** of [`TERRAIN_VIRTUAL`] texels over the whole terrain: about
//!   0.5 texel per centimetre at the scale of the walk.
//!
//! Both ways of drawing it use these: through a produced virtual texture (the composite
//! drawn once per texel, when feedback asks), and directly (the composite evaluated
//! for every pixel), so the two can be compared.

use std::path::{Path, PathBuf};

use glam::{Vec2, Vec3};

use crate::format::atlas::ColorSpace;
use crate::format::tile::TextureLayout;
use crate::scene::camera::{Camera, CameraPath, Keyframe};
use crate::scene::{Mesh, Vertex};

/// Size of the terrain in world units (x, z): the whole Earth, equirectangular.
pub const TERRAIN_WORLD: Vec2 = Vec2::new(2048.0, 1024.0);

/// The produced virtual texture's size in texels: 512 texels per world unit.
pub const TERRAIN_VIRTUAL: (u32, u32) = (1 << 20, 1 << 19);

/// Tile size and border of the produced virtual texture: 256-texel tiles keep its
/// complete page table (11.2 M entries, 43 MiB) under the 128 MiB storage binding of
/// WebGPU and lavapipe; 128-texel tiles would need 170 MiB.
pub const TERRAIN_TILE: (u32, u32) = (256, 4);

/// Height-field samples (x, z): the relief image averaged down.
pub const HEIGHT_SAMPLES: (u32, u32) = (2048, 1024);

/// Height of the highest land, world units (about 25× the true relief at this scale).
pub const MAX_HEIGHT: f32 = 8.0;

/// World units a material texture covers before it repeats.
pub const MATERIAL_REPEAT: f32 = 0.5;

/// Side of a decal-grid cell, world units.
pub const DECAL_CELL: f32 = 8.0;

/// Height samples per mesh quad along each axis ([`TerrainScene::mesh`]): quads of 2
/// world units.
pub const MESH_STEP: u32 = 2;

/// How far past its band a decal is listed in the grid's cells, world units: the
/// footprint of a texel at mip 7 (128 texels of mip 0), past which its antialiased edge
/// adds less than 1/256.
const DECAL_MARGIN: f32 = 0.25;

/// Splat-map texels per height sample along each axis.
const SPLAT_PER_HEIGHT: u32 = 1;

/// The tiling materials, in splat order: (albedo, normal map) under the data folder,
/// and what each stands for. The first four make K = 4.
pub const MATERIALS: [(&str, &str, &str); 8] = [
    ("castle/textures/grassfull.png", "castle/textures/grassfull_normalmap.png", "grass"),
    ("dungeon/textures/ground-1.png", "dungeon/textures/ground-1_norm.png", "earth"),
    ("dungeon/textures/concrete01_diff.png", "dungeon/textures/concrete01_norm.png", "rock"),
    ("castle/textures/water2.png", "castle/textures/water2_normalmap.png", "water"),
    ("dungeon/textures/tile-ground2.png", "dungeon/textures/tile-ground2-norm.png", "paving"),
    ("castle/textures/waterwall.png", "castle/textures/waterwall_normalmap.png", "cliff"),
    ("dungeon/textures/tile_tantiles.png", "dungeon/textures/tile_tantiles_norm.png", "tiles"),
    ("dungeon/textures/decorative.png", "dungeon/textures/decorative_norm.png", "mosaic"),
];

/// Index of the water material (sea).
const WATER: usize = 3;

/// Where the walk starts: the Alps (10° E, 46.3° N).
pub const START: Vec2 = Vec2::new((190.0 / 360.0) * 2048.0, (43.7 / 180.0) * 1024.0);

/// Road segments of the decal network (three decals each).
const ROAD_SEGMENTS: usize = 40;

/// What can go wrong loading the terrain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TerrainError {
    /// A data file is missing.
    #[error("{what} is missing ({path}); fetch it with: {fetch}")]
    Missing {
        /// What is missing.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The command that fetches it.
        fetch: &'static str,
    },
    /// A data file could not be decoded.
    #[error("{path}: {message}")]
    Image {
        /// The file.
        path: PathBuf,
        /// The decoder's complaint.
        message: String,
    },
    /// A height field whose sample lists do not fill its grid (of at least 2 × 2).
    #[error("a height field of {width}x{height} samples has {heights} heights and {sea} sea flags")]
    HeightField {
        /// Heights given.
        heights: usize,
        /// Sea flags given.
        sea: usize,
        /// Samples along x.
        width: u32,
        /// Samples along z.
        height: u32,
    },
    /// A material count other than 1 to 8.
    #[error("the terrain has 1 to {max} materials, not {0}", max = MATERIALS.len())]
    Materials(usize),
}

/// One tiling material: its texture files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerrainMaterial {
    /// What it stands for (grass, rock…).
    pub name: &'static str,
    /// The albedo image (sRGB).
    pub albedo: PathBuf,
    /// The tangent-space normal map (linear).
    pub normal: PathBuf,
}

/// Kind of decal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DecalKind {
    /// Asphalt: a band of its colour, flat (the material's normal is dropped).
    Road = 0,
    /// A dashed line along the segment.
    Dashes = 1,
    /// Stripes across the segment (a crossing).
    Stripes = 2,
}

/// A decal: a band along the segment `a`–`b` (world x, z) of half-width `half_width`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decal {
    /// Start, world (x, z).
    pub a: Vec2,
    /// End, world (x, z).
    pub b: Vec2,
    /// Half the band's width, world units.
    pub half_width: f32,
    /// Its kind.
    pub kind: DecalKind,
    /// Linear RGB and opacity.
    pub colour: [f32; 4],
}

/// A decal as the terrain shader reads it (`TerrainDecal` in `shaders/terrain.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuDecal {
    /// a.x, a.z, b.x, b.z in world units.
    pub segment: [f32; 4],
    /// Half-width, kind, dash period (world units), unused.
    pub params: [f32; 4],
    /// Linear RGB and opacity.
    pub colour: [f32; 4],
}

impl Decal {
    /// The rectangle it covers, with one texel to spare, in mip-0 texels of the
    /// virtual texture (x, y, width, height): what to invalidate.
    pub fn rect(&self) -> [u32; 4] {
        let scale = Vec2::new(TERRAIN_VIRTUAL.0 as f32, TERRAIN_VIRTUAL.1 as f32) / TERRAIN_WORLD;
        let (lo, hi) = self.bounds();
        let lo = (lo * scale).floor() - Vec2::ONE;
        let hi = (hi * scale).ceil() + Vec2::ONE;
        let max = Vec2::new(TERRAIN_VIRTUAL.0 as f32, TERRAIN_VIRTUAL.1 as f32);
        let lo = lo.clamp(Vec2::ZERO, max);
        let hi = hi.clamp(Vec2::ZERO, max);
        [lo.x as u32, lo.y as u32, (hi.x - lo.x) as u32, (hi.y - lo.y) as u32]
    }

    /// World-space bounding box (min, max) of the band.
    pub fn bounds(&self) -> (Vec2, Vec2) {
        let r = Vec2::splat(self.half_width);
        (self.a.min(self.b) - r, self.a.max(self.b) + r)
    }

    /// The GPU form.
    pub fn gpu(&self) -> GpuDecal {
        GpuDecal {
            segment: [self.a.x, self.a.y, self.b.x, self.b.y],
            params: [self.half_width, self.kind as u32 as f32, 0.25, 0.0],
            colour: self.colour,
        }
    }
}

/// Decals by grid cell, for the shader: cell `i` lists `indices[ranges[i][0]..][..ranges[i][1]]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecalGrid {
    /// Cells along x and z ([`DECAL_CELL`] world units each).
    pub cells: (u32, u32),
    /// Per cell (row-major): first index, count.
    pub ranges: Vec<[u32; 2]>,
    /// Decal indices, cell after cell.
    pub indices: Vec<u32>,
}

impl DecalGrid {
    /// The grid of `decals` over the terrain.
    pub fn new(decals: &[Decal]) -> Self {
        let cells = ((TERRAIN_WORLD.x / DECAL_CELL) as u32, (TERRAIN_WORLD.y / DECAL_CELL) as u32);
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); (cells.0 * cells.1) as usize];
        for (i, d) in decals.iter().enumerate() {
            // A footprint wider than the band still covers a little of it past its edge.
            let (lo, hi) = d.bounds();
            let (lo, hi) = (lo - Vec2::splat(DECAL_MARGIN), hi + Vec2::splat(DECAL_MARGIN));
            let cell = |at: f32, n: u32| ((at / DECAL_CELL).floor().max(0.0) as u32).min(n - 1);
            let (x0, x1) = (cell(lo.x, cells.0), cell(hi.x, cells.0));
            let (z0, z1) = (cell(lo.y, cells.1), cell(hi.y, cells.1));
            for z in z0..=z1 {
                for x in x0..=x1 {
                    lists[(z * cells.0 + x) as usize].push(i as u32);
                }
            }
        }
        let mut ranges = Vec::with_capacity(lists.len());
        let mut indices = Vec::new();
        for list in lists {
            ranges.push([indices.len() as u32, list.len() as u32]);
            indices.extend(list);
        }
        Self { cells, ranges, indices }
    }

    /// The most decals one cell holds (what a pixel may have to test).
    pub fn max_per_cell(&self) -> u32 {
        self.ranges.iter().map(|r| r[1]).max().unwrap_or(0)
    }
}

/// A grid of samples over the terrain, row-major, first row at z = 0.
#[derive(Clone, Debug, PartialEq)]
pub struct HeightField {
    /// Samples along x.
    pub width: u32,
    /// Samples along z.
    pub height: u32,
    /// Heights in world units.
    pub heights: Vec<f32>,
    /// Whether each sample is sea.
    pub sea: Vec<bool>,
}

impl HeightField {
    /// The height at world (x, z), bilinear between samples (sample centres at
    /// `(i + 0.5) · world / samples`), clamped at the edges.
    pub fn at(&self, x: f32, z: f32) -> f32 {
        let fx = (x / TERRAIN_WORLD.x * self.width as f32 - 0.5).clamp(0.0, (self.width - 1) as f32);
        let fz = (z / TERRAIN_WORLD.y * self.height as f32 - 0.5).clamp(0.0, (self.height - 1) as f32);
        let (x0, z0) = (fx.floor() as u32, fz.floor() as u32);
        let (x1, z1) = ((x0 + 1).min(self.width - 1), (z0 + 1).min(self.height - 1));
        let (tx, tz) = (fx - x0 as f32, fz - z0 as f32);
        let h = |x: u32, z: u32| self.heights[(z * self.width + x) as usize];
        let top = h(x0, z0) * (1.0 - tx) + h(x1, z0) * tx;
        let bottom = h(x0, z1) * (1.0 - tx) + h(x1, z1) * tx;
        top * (1.0 - tz) + bottom * tz
    }

    /// The surface normal at sample (x, z), from central differences.
    pub fn normal(&self, x: u32, z: u32) -> Vec3 {
        let h = |x: i64, z: i64| {
            let x = x.clamp(0, i64::from(self.width) - 1) as u32;
            let z = z.clamp(0, i64::from(self.height) - 1) as u32;
            self.heights[(z * self.width + x) as usize]
        };
        let (x, z) = (i64::from(x), i64::from(z));
        let step = TERRAIN_WORLD / Vec2::new(self.width as f32, self.height as f32);
        let dx = (h(x + 1, z) - h(x - 1, z)) / (2.0 * step.x);
        let dz = (h(x, z + 1) - h(x, z - 1)) / (2.0 * step.y);
        Vec3::new(-dx, 1.0, -dz).normalize()
    }
}

/// Elevation (0 = sea level, 1 = the highest band) of a colour of the ETOPO1
/// hypsometric map, or `None` for sea. The palette runs from green (lowlands) through
/// yellow, tan and brown to grey (the highest plateaus); ice is near white. Hill
/// shading changes the brightness, not the hue, so the hue carries the band.
pub fn elevation_of(rgb: [u8; 3]) -> Option<f32> {
    let [r, g, b] = rgb.map(|c| f32::from(c) / 255.0);
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let s = if max > 0.0 { (max - min) / max } else { 0.0 };
    let hue = if max == min {
        0.0
    } else if max == r {
        60.0 * ((g - b) / (max - min)).rem_euclid(6.0)
    } else if max == g {
        60.0 * ((b - r) / (max - min) + 2.0)
    } else {
        60.0 * ((r - g) / (max - min) + 4.0)
    };
    if (165.0..265.0).contains(&hue) && s > 0.15 {
        return None;
    }
    if s < 0.15 {
        // Grey: the high plateaus, or ice when near white.
        return Some(if max > 0.84 { 0.45 } else { 0.9 });
    }
    Some(match hue {
        // Purple-red, past the blues: the top of the palette.
        h if h >= 265.0 => 0.8,
        h if h >= 80.0 => 0.02 + 0.1 * ((165.0 - h) / 85.0).clamp(0.0, 1.0),
        h if h >= 40.0 => 0.12 + 0.23 * (80.0 - h) / 40.0,
        h if h >= 20.0 => 0.35 + 0.2 * (40.0 - h) / 20.0,
        h => 0.55 + 0.2 * (20.0 - h) / 20.0,
    })
}

/// Smooth value noise in about 0..1, `cell` samples per lattice step, seeded.
fn noise(x: f32, z: f32, cell: f32, seed: u32) -> f32 {
    let hash = |i: i32, j: i32| {
        let mut h = (i as u32).wrapping_mul(0x8da6_b343)
            ^ (j as u32).wrapping_mul(0xd816_3841)
            ^ seed.wrapping_mul(0xcb1a_b31f);
        h ^= h >> 13;
        h = h.wrapping_mul(0x5bd1_e995);
        h ^= h >> 15;
        (h & 0xffff) as f32 / 65535.0
    };
    let (fx, fz) = (x / cell, z / cell);
    let (i, j) = (fx.floor() as i32, fz.floor() as i32);
    let (tx, tz) = (fx - fx.floor(), fz - fz.floor());
    let (sx, sz) = (tx * tx * (3.0 - 2.0 * tx), tz * tz * (3.0 - 2.0 * tz));
    let top = hash(i, j) * (1.0 - sx) + hash(i + 1, j) * sx;
    let bottom = hash(i, j + 1) * (1.0 - sx) + hash(i + 1, j + 1) * sx;
    top * (1.0 - sz) + bottom * sz
}

/// The weights of splat-map layers: K per texel, four to an RGBA8 layer.
#[derive(Clone, Debug, PartialEq)]
pub struct SplatMap {
    /// Texels along x.
    pub width: u32,
    /// Texels along z.
    pub height: u32,
    /// RGBA8 layers (`⌈K / 4⌉`), each `width × height × 4` bytes, one after the other.
    pub layers: Vec<Vec<u8>>,
}

/// The terrain scene: everything both renderers need, GPU-free.
#[derive(Clone, Debug)]
pub struct TerrainScene {
    /// The heights.
    pub heights: HeightField,
    /// The materials, in splat order.
    pub materials: Vec<TerrainMaterial>,
    /// The splat map.
    pub splat: SplatMap,
    /// The decals.
    pub decals: Vec<Decal>,
    /// The produced virtual texture's layout.
    pub layout: TextureLayout,
}

impl TerrainScene {
    /// Loads the terrain with the first `materials` materials of [`MATERIALS`] from the
    /// data folder `data` (`etopo1.jpg`, `dungeon/`, `castle/`).
    pub fn load(data: &Path, materials: usize) -> Result<Self, TerrainError> {
        if materials == 0 || materials > MATERIALS.len() {
            return Err(TerrainError::Materials(materials));
        }
        let relief = data.join("etopo1.jpg");
        if !relief.is_file() {
            return Err(TerrainError::Missing {
                what: "the Earth relief image",
                path: relief,
                fetch: "assets/fetch-data.sh",
            });
        }
        let materials: Vec<TerrainMaterial> = MATERIALS[..materials]
            .iter()
            .map(|&(albedo, normal, name)| TerrainMaterial {
                name,
                albedo: data.join(albedo),
                normal: data.join(normal),
            })
            .collect();
        for m in &materials {
            for path in [&m.albedo, &m.normal] {
                if !path.is_file() {
                    return Err(TerrainError::Missing {
                        what: "a terrain material texture",
                        path: path.clone(),
                        fetch: "assets/fetch-data.sh --dungeon --castle",
                    });
                }
            }
        }
        let image = image::open(&relief)
            .map_err(|e| TerrainError::Image { path: relief.clone(), message: e.to_string() })?
            .into_rgb8();
        Self::from_field(height_field(&image, HEIGHT_SAMPLES), materials)
    }

    /// The terrain of `heights` with `materials` (1 to 8): the splat map, the road from
    /// [`START`] and the layout are made here.
    pub fn from_field(heights: HeightField, materials: Vec<TerrainMaterial>) -> Result<Self, TerrainError> {
        if materials.is_empty() || materials.len() > MATERIALS.len() {
            return Err(TerrainError::Materials(materials.len()));
        }
        let samples = heights.width as usize * heights.height as usize;
        if heights.width < 2
            || heights.height < 2
            || heights.heights.len() != samples
            || heights.sea.len() != samples
        {
            return Err(TerrainError::HeightField {
                heights: heights.heights.len(),
                sea: heights.sea.len(),
                width: heights.width,
                height: heights.height,
            });
        }
        let splat = splat_map(&heights, materials.len());
        let (w, h) = TERRAIN_VIRTUAL;
        let layout = TextureLayout::new(w, h, TERRAIN_TILE.0, TERRAIN_TILE.1)
            .expect("TERRAIN_VIRTUAL and TERRAIN_TILE make a valid layout (tested)");
        Ok(Self { heights, materials, splat, decals: roads(ROAD_SEGMENTS, START), layout })
    }

    /// The layers of the produced atlas: albedo (sRGB) and a world-space normal
    /// (linear, `n · 0.5 + 0.5`), stacked.
    pub fn layers() -> Vec<(String, ColorSpace)> {
        vec![("albedo".into(), ColorSpace::Srgb), ("normal".into(), ColorSpace::Linear)]
    }

    /// Vertices of the mesh along x and z.
    fn grid(&self) -> (u32, u32) {
        (self.heights.width.div_ceil(MESH_STEP) + 1, self.heights.height.div_ceil(MESH_STEP) + 1)
    }

    /// The height of the mesh's surface at world (x, z): its triangles', so that a
    /// camera kept above it never ends up under a triangle.
    pub fn height_at(&self, x: f32, z: f32) -> f32 {
        let (cols, rows) = self.grid();
        let fx = (x / TERRAIN_WORLD.x * (cols - 1) as f32).clamp(0.0, (cols - 1) as f32);
        let fz = (z / TERRAIN_WORLD.y * (rows - 1) as f32).clamp(0.0, (rows - 1) as f32);
        let (i, j) = ((fx as u32).min(cols - 2), (fz as u32).min(rows - 2));
        let (tx, tz) = (fx - i as f32, fz - j as f32);
        let vertex = |i: u32, j: u32| {
            let u = i as f32 / (cols - 1) as f32;
            let v = j as f32 / (rows - 1) as f32;
            self.heights.at(u * TERRAIN_WORLD.x, v * TERRAIN_WORLD.y)
        };
        let (a, b, c, d) = (vertex(i, j), vertex(i + 1, j), vertex(i, j + 1), vertex(i + 1, j + 1));
        // The quad's two triangles share the diagonal from b to c (see `mesh`).
        if tx + tz <= 1.0 {
            a + (b - a) * tx + (c - a) * tz
        } else {
            d + (c - d) * (1.0 - tx) + (b - d) * (1.0 - tz)
        }
    }

    /// The terrain mesh: one vertex every [`MESH_STEP`] height samples, with the height
    /// field's normals and uv = (x, z) / world.
    pub fn mesh(&self) -> Mesh {
        let (cols, rows) = self.grid();
        let mut vertices = Vec::with_capacity((cols * rows) as usize);
        for j in 0..rows {
            for i in 0..cols {
                let u = i as f32 / (cols - 1) as f32;
                let v = j as f32 / (rows - 1) as f32;
                let (x, z) = (u * TERRAIN_WORLD.x, v * TERRAIN_WORLD.y);
                let sx = ((u * self.heights.width as f32) as u32).min(self.heights.width - 1);
                let sz = ((v * self.heights.height as f32) as u32).min(self.heights.height - 1);
                let n = self.heights.normal(sx, sz);
                vertices.push(Vertex {
                    position: [x, self.heights.at(x, z), z],
                    normal: n.to_array(),
                    uv: [u, v],
                });
            }
        }
        let mut indices = Vec::with_capacity(((cols - 1) * (rows - 1) * 6) as usize);
        for j in 0..rows - 1 {
            for i in 0..cols - 1 {
                let a = j * cols + i;
                let (b, c, d) = (a + 1, a + cols, a + cols + 1);
                // Counter-clockwise seen from above (+y), with z growing towards the viewer.
                indices.extend_from_slice(&[a, c, b, b, c, d]);
            }
        }
        Mesh { vertices, indices }
    }

    /// The height field's normals as an RGBA8 image (`n · 0.5 + 0.5`, alpha 255), the
    /// size of the height field.
    pub fn normal_map(&self) -> Vec<u8> {
        let (w, h) = (self.heights.width, self.heights.height);
        let mut out = Vec::with_capacity((w * h * 4) as usize);
        for z in 0..h {
            for x in 0..w {
                let n = self.heights.normal(x, z) * 0.5 + Vec3::splat(0.5);
                out.extend(n.to_array().map(|c| (c * 255.0).round() as u8));
                out.push(255);
            }
        }
        out
    }

    /// The decals by grid cell.
    pub fn decal_grid(&self) -> DecalGrid {
        DecalGrid::new(&self.decals)
    }

    /// A decal at world (x, z) for a viewer's key: a square of yellow stripes of side
    /// `side`.
    pub fn marking_at(x: f32, z: f32, side: f32) -> Decal {
        let h = side * 0.5;
        Decal {
            a: Vec2::new(x - h, z),
            b: Vec2::new(x + h, z),
            half_width: h,
            kind: DecalKind::Stripes,
            colour: [0.9, 0.75, 0.05, 1.0],
        }
    }

    /// The camera paths of the terrain: `walk` (along the road at eye height, 150
    /// frames), `fly` (12 units over the ground, 120 frames), `cut` (the fly's start,
    /// then a cut to the road at frame 30) and `overview` (the Alps from high up).
    pub fn camera_path(&self, name: &str) -> Option<CameraPath> {
        let pose = |p: Vec2, ahead: Vec2, eye: f32, look_down: f32| {
            let y = self.height_at(p.x, p.y) + eye;
            let t = p + ahead;
            let ty = self.height_at(t.x, t.y).min(y) + eye - look_down;
            Camera {
                near: (eye * 0.02).max(0.002),
                far: 400.0,
                fov_y_degrees: 60.0,
                ..Camera::look_at(Vec3::new(p.x, y, p.y), Vec3::new(t.x, ty, t.y))
            }
        };
        let road: Vec<Vec2> = self.decals.iter().filter(|d| d.kind == DecalKind::Road).map(|d| d.a).collect();
        let key = |frame: f32, camera: Camera, cut: bool| Keyframe { frame, camera, cut };
        match name {
            "walk" => {
                // Along the road's first two segments, 0.3 units above the ground, a
                // keyframe every 0.25 units so that the camera follows the surface.
                let points: Vec<Vec2> = road.iter().take(3).copied().collect();
                let (a, b, c) = (points[0], points[1.min(points.len() - 1)], points[2.min(points.len() - 1)]);
                let length = (a.distance(b) + b.distance(c)).max(1e-3);
                // `t` runs along the road at constant speed (by length, not by segment).
                let split = a.distance(b) / length;
                let along = |t: f32| {
                    if t <= split {
                        a.lerp(b, t / split.max(1e-6))
                    } else {
                        b.lerp(c, (t - split) / (1.0 - split).max(1e-6))
                    }
                };
                let steps = ((length / 0.25) as usize).max(2);
                let keyframes = (0..=steps)
                    .map(|i| {
                        let t = i as f32 / steps as f32;
                        let p = along(t);
                        let ahead = (along((t + 0.05).min(1.0)) - along((t - 0.05).max(0.0)))
                            .normalize_or(Vec2::X)
                            * 2.0;
                        key(150.0 * t, pose(p, ahead, 0.3, 0.15), false)
                    })
                    .collect();
                Some(CameraPath { keyframes })
            }
            "fly" => {
                let keyframes = (0..=4)
                    .map(|i| {
                        let p = START + Vec2::new(-30.0 + 15.0 * i as f32, 10.0 - 5.0 * i as f32);
                        key(30.0 * i as f32, pose(p, Vec2::new(12.0, -4.0), 12.0, 8.0), false)
                    })
                    .collect();
                Some(CameraPath { keyframes })
            }
            "cut" => {
                let far = pose(START + Vec2::new(-30.0, 10.0), Vec2::new(12.0, -4.0), 12.0, 8.0);
                let p = road.first().copied().unwrap_or(START);
                let near = pose(p, Vec2::new(2.0, 0.0), 0.3, 0.15);
                Some(CameraPath {
                    keyframes: vec![
                        key(0.0, far, false),
                        key(29.0, far, false),
                        key(30.0, near, true),
                        key(120.0, near, false),
                    ],
                })
            }
            "overview" => {
                Some(CameraPath::fixed(pose(START + Vec2::new(0.0, 60.0), Vec2::new(0.0, -60.0), 60.0, 60.0)))
            }
            _ => None,
        }
    }
}

/// The camera paths [`TerrainScene::camera_path`] knows.
pub const TERRAIN_PATHS: &[&str] = &["walk", "fly", "cut", "overview"];

/// Heights of `image` (the ETOPO1 colour map) averaged into `size` samples.
fn height_field(image: &image::RgbImage, size: (u32, u32)) -> HeightField {
    let (iw, ih) = image.dimensions();
    let (w, h) = size;
    let mut heights = Vec::with_capacity((w * h) as usize);
    let mut sea = Vec::with_capacity((w * h) as usize);
    for z in 0..h {
        let (y0, y1) = (z * ih / h, ((z + 1) * ih / h).max(z * ih / h + 1));
        for x in 0..w {
            let (x0, x1) = (x * iw / w, ((x + 1) * iw / w).max(x * iw / w + 1));
            let (mut sum, mut n, mut wet) = (0.0f32, 0u32, 0u32);
            for py in y0..y1.min(ih) {
                for px in x0..x1.min(iw) {
                    match elevation_of(image.get_pixel(px, py).0) {
                        Some(e) => sum += e,
                        None => wet += 1,
                    }
                    n += 1;
                }
            }
            let is_sea = wet * 2 > n;
            heights.push(if is_sea { 0.0 } else { MAX_HEIGHT * sum / (n - wet).max(1) as f32 });
            sea.push(is_sea);
        }
    }
    let mut field = HeightField { width: w, height: h, heights, sea };
    smooth(&mut field);
    field
}

/// One pass of a 3×3 box filter over the land (the colour map's bands are steps).
fn smooth(field: &mut HeightField) {
    let (w, h) = (field.width as i64, field.height as i64);
    let src = field.heights.clone();
    for z in 0..h {
        for x in 0..w {
            let i = (z * w + x) as usize;
            if field.sea[i] {
                continue;
            }
            let (mut sum, mut n) = (0.0, 0.0);
            for (dx, dz) in [(-1, -1), (0, -1), (1, -1), (-1, 0), (0, 0), (1, 0), (-1, 1), (0, 1), (1, 1)] {
                let (sx, sz) = ((x + dx).clamp(0, w - 1), (z + dz).clamp(0, h - 1));
                sum += src[(sz * w + sx) as usize];
                n += 1.0;
            }
            field.heights[i] = sum / n;
        }
    }
}

/// Splat weights for `k` materials from elevation, slope and noise: water on the sea;
/// grass low and flat, earth in between, rock high or steep; materials past the fourth
/// in noise patches on land. Weights of a texel sum to 255.
fn splat_map(heights: &HeightField, k: usize) -> SplatMap {
    let (w, h) = (heights.width * SPLAT_PER_HEIGHT, heights.height * SPLAT_PER_HEIGHT);
    let layers = k.div_ceil(4);
    let mut out = vec![vec![0u8; (w * h * 4) as usize]; layers];
    let mut weights = vec![0.0f32; k];
    for z in 0..h {
        for x in 0..w {
            let (sx, sz) = (x / SPLAT_PER_HEIGHT, z / SPLAT_PER_HEIGHT);
            let i = (sz * heights.width + sx) as usize;
            let e = heights.heights[i] / MAX_HEIGHT;
            let slope = (1.0 - heights.normal(sx, sz).y).clamp(0.0, 1.0) * 8.0;
            let (fx, fz) = (x as f32, z as f32);
            weights.iter_mut().for_each(|w| *w = 0.0);
            if heights.sea[i] {
                weights[WATER.min(k - 1)] = 1.0;
            } else {
                let n1 = noise(fx, fz, 6.0, 1);
                let n2 = noise(fx, fz, 3.0, 2);
                weights[0] = (1.0 - 2.5 * e).max(0.0) * (1.0 - slope).max(0.0) * (0.4 + n1);
                if k > 1 {
                    weights[1] = (0.2 + 0.8 * n2) * (1.0 - e).max(0.0) * 0.7;
                }
                if k > 2 {
                    weights[2] = (slope + 1.5 * e - 0.2).clamp(0.0, 1.5);
                }
                for (m, weight) in weights.iter_mut().enumerate().skip(4) {
                    *weight = ((noise(fx, fz, 4.0 + m as f32, 10 + m as u32) - 0.55) * 3.0).max(0.0);
                }
            }
            let total: f32 = weights.iter().sum();
            let total = if total > 0.0 {
                total
            } else {
                weights[0] = 1.0;
                1.0
            };
            for (m, weight) in weights.iter().enumerate() {
                out[m / 4][((z * w + x) * 4) as usize + m % 4] = (255.0 * weight / total).round() as u8;
            }
        }
    }
    SplatMap { width: w, height: h, layers: out }
}

/// A road of `segments` segments from `start`: a seeded random walk, each segment an
/// asphalt band, a dashed centre line and crossing stripes at its start.
fn roads(segments: usize, start: Vec2) -> Vec<Decal> {
    let mut state = 0x2545_f491u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state >> 8) as f32 / (1u32 << 24) as f32
    };
    let mut decals = Vec::with_capacity(segments * 3);
    let (mut p, mut angle) = (start, 0.3f32);
    for _ in 0..segments {
        angle += (next() - 0.5) * 1.2;
        let len = 3.0 + 6.0 * next();
        let q = p + Vec2::new(angle.cos(), angle.sin()) * len;
        decals.push(Decal {
            a: p,
            b: q,
            half_width: 0.09,
            kind: DecalKind::Road,
            colour: [0.035, 0.035, 0.04, 1.0],
        });
        decals.push(Decal {
            a: p,
            b: q,
            half_width: 0.006,
            kind: DecalKind::Dashes,
            colour: [0.85, 0.85, 0.8, 1.0],
        });
        let dir = (q - p).normalize_or(Vec2::X);
        decals.push(Decal {
            a: p + dir * 0.3,
            b: p + dir * 0.6,
            half_width: 0.085,
            kind: DecalKind::Stripes,
            colour: [0.9, 0.9, 0.9, 1.0],
        });
        p = q;
    }
    decals
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// A height field of `w × h` samples from `f(x, z)` (world units), sea where `f` ≤ 0.
    fn field(w: u32, h: u32, f: impl Fn(f32, f32) -> f32) -> HeightField {
        let mut heights = Vec::new();
        let mut sea = Vec::new();
        for z in 0..h {
            for x in 0..w {
                let p = (Vec2::new(x as f32 + 0.5, z as f32 + 0.5)) / Vec2::new(w as f32, h as f32)
                    * TERRAIN_WORLD;
                let v = f(p.x, p.y);
                heights.push(v.max(0.0));
                sea.push(v <= 0.0);
            }
        }
        HeightField { width: w, height: h, heights, sea }
    }

    fn scene(k: usize) -> TerrainScene {
        let materials = MATERIALS[..k]
            .iter()
            .map(|&(a, n, name)| TerrainMaterial { name, albedo: a.into(), normal: n.into() })
            .collect();
        TerrainScene::from_field(
            field(256, 128, |x, z| (x * 0.01).sin() * 3.0 + (z * 0.02).cos() * 2.0),
            materials,
        )
        .unwrap()
    }

    #[test]
    fn the_palette_maps_back_to_elevation_bands() {
        // Colours sampled from etopo1.jpg (see the module documentation).
        assert_eq!(elevation_of([29, 122, 218]), None, "Pacific");
        assert_eq!(elevation_of([105, 217, 241]), None, "Caspian");
        let amazon = elevation_of([49, 159, 64]).unwrap();
        let alps = elevation_of([94, 78, 19]).unwrap();
        let sahara = elevation_of([216, 175, 121]).unwrap();
        let andes = elevation_of([138, 79, 65]).unwrap();
        let tibet = elevation_of([168, 154, 151]).unwrap();
        assert!(
            amazon < alps && alps < sahara && sahara < andes && andes < tibet,
            "{amazon} {alps} {sahara} {andes} {tibet}"
        );
        assert!(amazon < 0.15 && tibet > 0.8);
        // Ice is high, but below the plateaus.
        let ice = elevation_of([226, 226, 226]).unwrap();
        assert!(ice > amazon && ice < tibet);
    }

    #[test]
    fn the_layout_is_a_million_texels_wide_and_fits_a_128_mib_page_table() {
        let s = scene(4);
        assert_eq!((s.layout.width(), s.layout.height()), TERRAIN_VIRTUAL);
        let entries = s.layout.tile_count();
        assert!(entries * 4 <= 128 << 20, "{entries} page-table entries");
        assert_eq!(TerrainScene::layers().len(), 2);
    }

    #[test]
    fn splat_weights_sum_to_one_and_water_covers_the_sea() {
        for k in [1, 4, 5, 8] {
            let mut f = field(64, 32, |x, _| x - 700.0);
            f.sea[0] = true;
            let s = TerrainScene::from_field(
                f,
                vec![TerrainMaterial { name: "m", albedo: "a".into(), normal: "n".into() }; k],
            )
            .unwrap();
            assert_eq!(s.splat.layers.len(), k.div_ceil(4));
            for i in 0..(s.splat.width * s.splat.height) as usize {
                let sum: u32 = (0..k).map(|m| u32::from(s.splat.layers[m / 4][i * 4 + m % 4])).sum();
                assert!((253..=257).contains(&sum), "k {k} texel {i}: weights sum to {sum}");
            }
            if k >= 4 {
                assert_eq!(s.splat.layers[0][3], 255, "k {k}: the sea is all water");
            }
        }
    }

    #[test]
    fn the_camera_never_goes_under_the_mesh() {
        let s = scene(4);
        let mesh = s.mesh();
        // height_at is the mesh's surface: equal at every vertex.
        for v in mesh.vertices.iter().step_by(97) {
            let h = s.height_at(v.position[0], v.position[2]);
            assert!((h - v.position[1]).abs() < 1e-3, "{v:?}: {h}");
        }
        for name in TERRAIN_PATHS {
            let path = s.camera_path(name).unwrap();
            for frame in 0..=path.end_frame() {
                let c = path.camera_at(frame);
                let ground = s.height_at(c.position.x, c.position.z);
                assert!(
                    c.position.y > ground + 0.1,
                    "{name} frame {frame}: eye {} over ground {ground}",
                    c.position.y
                );
            }
        }
        assert!(s.camera_path("nope").is_none());
    }

    #[test]
    fn the_mesh_covers_the_world_and_faces_up() {
        let s = scene(4);
        let m = s.mesh();
        assert_eq!(m.vertices.len() as u32, (256 / MESH_STEP + 1) * (128 / MESH_STEP + 1));
        let last = m.vertices.last().unwrap().position;
        assert_eq!((last[0], last[2]), (TERRAIN_WORLD.x, TERRAIN_WORLD.y));
        // Counter-clockwise seen from above: the first triangle's normal points up.
        let p = |i: u32| Vec3::from(m.vertices[i as usize].position);
        let (a, b, c) = (p(m.indices[0]), p(m.indices[1]), p(m.indices[2]));
        assert!((b - a).cross(c - a).y > 0.0);
    }

    #[test]
    fn a_roads_decals_are_in_every_cell_they_touch() {
        let s = scene(4);
        assert!(s.decals.len() >= 100, "{} decals", s.decals.len());
        let grid = s.decal_grid();
        for (i, d) in s.decals.iter().enumerate() {
            let (lo, hi) = d.bounds();
            for p in [lo, hi, (lo + hi) * 0.5, d.a, d.b] {
                let cx = ((p.x / DECAL_CELL) as u32).min(grid.cells.0 - 1);
                let cz = ((p.y / DECAL_CELL) as u32).min(grid.cells.1 - 1);
                let [first, count] = grid.ranges[(cz * grid.cells.0 + cx) as usize];
                let list = &grid.indices[first as usize..(first + count) as usize];
                assert!(list.contains(&(i as u32)), "decal {i} missing from cell ({cx}, {cz})");
            }
            let [x, y, w, h] = d.rect();
            assert!(w > 0 && h > 0 && x + w <= TERRAIN_VIRTUAL.0 && y + h <= TERRAIN_VIRTUAL.1);
        }
        assert!(grid.max_per_cell() < 64, "{} decals in one cell", grid.max_per_cell());
    }

    /// Checks that the point at `t` along the band of a decal from `a` by `d`,
    /// `s` half-widths to the side, lies in the decal's rectangle.
    fn band_point_in_rect(a: Vec2, d: Vec2, hw: f32, t: f32, s: f32) -> Result<(), String> {
        let b = (a + d).clamp(Vec2::ZERO, TERRAIN_WORLD);
        let decal = Decal { a, b, half_width: hw, kind: DecalKind::Road, colour: [0.0; 4] };
        let dir = (b - a).normalize_or(Vec2::X);
        let p = a.lerp(b, t) + Vec2::new(-dir.y, dir.x) * hw * s;
        // A band near the edge reaches past the world, where there are no
        // texels: the rectangle is clamped to the texture, so is the point.
        let max = Vec2::new(TERRAIN_VIRTUAL.0 as f32, TERRAIN_VIRTUAL.1 as f32);
        let texel = (p * max / TERRAIN_WORLD).clamp(Vec2::ZERO, max);
        let [x, y, w, h] = decal.rect();
        let inside = |v: f32, lo: u32, len: u32| v >= lo as f32 - 0.01 && v <= (lo + len) as f32 + 0.01;
        if inside(texel.x, x, w) && inside(texel.y, y, h) {
            Ok(())
        } else {
            Err(format!("{texel} outside {x}+{w}, {y}+{h}"))
        }
    }

    #[test]
    fn a_band_past_the_worlds_edge_is_clamped_like_its_rectangle() {
        // The case CI found: a road ending at x = 0, its side reaching x < 0.
        band_point_in_rect(Vec2::ONE, Vec2::new(-7.042535, 11.720165), 0.001, 0.9994023, 0.96911514).unwrap();
    }

    proptest! {
        /// A decal's rectangle holds every texel its band covers.
        #[test]
        fn a_decals_rectangle_holds_its_band(ax in 1.0f32..2040.0, az in 1.0f32..1020.0, dx in -20.0f32..20.0,
                                              dz in -20.0f32..20.0, hw in 0.001f32..1.0, t in 0.0f32..1.0, s in -1.0f32..1.0) {
            let r = band_point_in_rect(Vec2::new(ax, az), Vec2::new(dx, dz), hw, t, s);
            prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        }
    }

    #[test]
    fn missing_data_and_bad_counts_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = TerrainScene::load(dir.path(), 4).unwrap_err().to_string();
        assert!(e.contains("etopo1.jpg") && e.contains("fetch-data.sh"), "{e}");
        assert!(TerrainScene::load(dir.path(), 0).unwrap_err().to_string().contains("1 to 8"));
        assert!(TerrainScene::load(dir.path(), 9).unwrap_err().to_string().contains("not 9"));
        assert!(TerrainScene::from_field(field(8, 4, |_, _| 1.0), Vec::new()).is_err());
        let mut short = field(8, 4, |_, _| 1.0);
        short.heights.pop();
        let m = TerrainMaterial { name: "m", albedo: "a".into(), normal: "n".into() };
        assert!(TerrainScene::from_field(short, vec![m]).unwrap_err().to_string().contains("31 heights"));
        std::fs::write(dir.path().join("etopo1.jpg"), b"not a jpeg").unwrap();
        let e = TerrainScene::load(dir.path(), 4).unwrap_err().to_string();
        assert!(e.contains("--castle"), "{e}");
    }
}
