// The terrain's material composite (issue 43): K tiling materials blended by a splat
// map, the height field's normal, and decals (roads, dashes, stripes) looked up
// through a grid of cells. One function, `terrain_composite`, serves both ways of
// drawing the terrain: the tile producer evaluates it once per texel of a produced
// tile (the footprint of one texel of that mip), the direct path once per pixel (the
// pixel's footprint). Data: tessera_core::scene::terrain. Bind group 1.

struct TerrainDecal {
    segment: vec4<f32>, // a.x, a.z, b.x, b.z (world)
    params: vec4<f32>,  // half-width, kind (0 road, 1 dashes, 2 stripes), dash period, unused
    colour: vec4<f32>,  // linear RGB, opacity
}

struct TerrainParams {
    world: vec2<f32>,    // terrain size, world units (x, z)
    repeat: f32,         // world units per material repeat
    materials: u32,      // K
    cells: vec2<u32>,    // decal grid cells (x, z)
    cell: f32,           // side of a cell, world units
    splat_layers: u32,   // ceil(K / 4)
}

@group(1) @binding(0) var terrain_albedo: texture_2d_array<f32>;
@group(1) @binding(1) var terrain_normals: texture_2d_array<f32>;
@group(1) @binding(2) var terrain_splat: texture_2d_array<f32>;
@group(1) @binding(3) var terrain_relief: texture_2d<f32>;
@group(1) @binding(4) var terrain_repeat: sampler;
@group(1) @binding(5) var terrain_clamp: sampler;
@group(1) @binding(6) var<storage, read> terrain_decals: array<TerrainDecal>;
@group(1) @binding(7) var<storage, read> terrain_cells: array<vec2<u32>>;
@group(1) @binding(8) var<storage, read> terrain_indices: array<u32>;
@group(1) @binding(9) var<uniform> terrain: TerrainParams;

struct TerrainSample {
    albedo: vec3<f32>,
    normal: vec3<f32>,
}

// Coverage of a band of `period` whose on-part is its first half, at position `t`,
// for a footprint `fw`: the footprint's share over the nearest edge, sharp when the
// period is many footprints, its average (0.5) when the footprint spans a period.
fn terrain_dashes(t: f32, period: f32, fw: f32) -> f32 {
    // Signed distance to the nearest edge of the on-part, negative inside.
    let d = (abs(fract(t / period + 0.25) - 0.5) - 0.25) * period;
    let sharp = clamp(0.5 - d / fw, 0.0, 1.0);
    return mix(sharp, 0.5, clamp(2.0 * fw / period - 0.5, 0.0, 1.0));
}

// The share of a footprint of width `fw` centred at `c` that falls inside [lo, hi].
fn terrain_overlap(c: f32, lo: f32, hi: f32, fw: f32) -> f32 {
    return clamp((min(hi, c + 0.5 * fw) - max(lo, c - 0.5 * fw)) / fw, 0.0, 1.0);
}

// The decal `d`'s coverage at world `p` for a footprint `fw`: the share of the
// footprint (a box, per axis of the band) inside the band, so a band narrower than the
// footprint fades with its width instead of staying half covered.
fn terrain_decal_cover(d: TerrainDecal, p: vec2<f32>, fw: f32) -> f32 {
    let a = d.segment.xy;
    let ab = d.segment.zw - a;
    let len = max(length(ab), 1e-6);
    let dir = ab / len;
    let ap = p - a;
    let along = dot(ap, dir);
    let across = dot(ap, vec2<f32>(-dir.y, dir.x));
    let hw = d.params.x;
    var cover = terrain_overlap(across, -hw, hw, fw) * terrain_overlap(along, 0.0, len, fw);
    let kind = u32(d.params.y + 0.5);
    if kind == 1u {
        cover *= terrain_dashes(along, d.params.z, fw);
    } else if kind == 2u {
        cover *= terrain_dashes(across + hw, 0.4 * hw, fw);
    }
    return cover;
}

// The composite at world position `p` (x, z) with derivatives `dpx`, `dpy` (world
// units per pixel, or per texel of a produced tile).
fn terrain_composite(p: vec2<f32>, dpx: vec2<f32>, dpy: vec2<f32>) -> TerrainSample {
    let uv = p / terrain.world;
    let ux = dpx / terrain.world;
    let uy = dpy / terrain.world;
    let m = p / terrain.repeat;
    let mx = dpx / terrain.repeat;
    let my = dpy / terrain.repeat;
    var albedo = vec3<f32>(0.0);
    var tangent = vec2<f32>(0.0);
    var total = 0.0;
    for (var l = 0u; l < terrain.splat_layers; l++) {
        let w4 = textureSampleGrad(terrain_splat, terrain_clamp, uv, l, ux, uy);
        for (var c = 0u; c < 4u; c++) {
            let i = l * 4u + c;
            if i >= terrain.materials {
                break;
            }
            let w = w4[c];
            albedo += w * textureSampleGrad(terrain_albedo, terrain_repeat, m, i, mx, my).rgb;
            tangent += w * (textureSampleGrad(terrain_normals, terrain_repeat, m, i, mx, my).xy * 2.0 - 1.0);
            total += w;
        }
    }
    albedo /= max(total, 1e-4);
    tangent /= max(total, 1e-4);
    let relief = textureSampleGrad(terrain_relief, terrain_clamp, uv, ux, uy).xyz * 2.0 - 1.0;
    // The material's tangent frame on the height field: u along +x, v along +z.
    var normal = normalize(relief + vec3<f32>(tangent.x, 0.0, tangent.y) * 0.6);
    let fw = max(max(length(dpx), length(dpy)), 1e-6);
    let cell = min(vec2<u32>(max(p / terrain.cell, vec2<f32>(0.0))), terrain.cells - vec2<u32>(1u));
    let range = terrain_cells[cell.y * terrain.cells.x + cell.x];
    for (var k = 0u; k < range.y; k++) {
        let d = terrain_decals[terrain_indices[range.x + k]];
        let cover = terrain_decal_cover(d, p, fw) * d.colour.a;
        albedo = mix(albedo, d.colour.rgb, cover);
        if u32(d.params.y + 0.5) == 0u {
            // Asphalt is smooth: the relief's normal without the material's.
            normal = normalize(mix(normal, normalize(relief), cover));
        }
    }
    return TerrainSample(albedo, normal);
}
