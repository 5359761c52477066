// Runtime virtual textures: the vertex stage of a tile producer (tessera's
// `TileProducer`, engine/render/src/produce.rs). One instance per tile to draw, a
// triangle strip of 4 vertices over the tile's slot in level 0 of the pool, border
// included; `uv` interpolates to the virtual texture coordinates of each texel's
// centre at the tile's mip. A producer's fragment shader evaluates its material there
// (`vt_produce_uv` clamps to the layer, as a sampler with clamp addressing does).

struct VtProduceTile {
    dst: vec4<f32>,    // slot rectangle in pool texels: x0, y0, x1, y1
    uv: vec4<f32>,     // virtual coordinates at those edges: u0, v0, u1, v1
    info: vec4<u32>,   // layer, mip, tile x, tile y
    texel: vec4<f32>,  // one texel of the mip in uv (x, y), refresh (1 or 0), unused
}

struct VtProduceParams {
    pool_size: vec2<f32>,
    _pad: vec2<f32>,
}

@group(0) @binding(0) var<storage, read> vt_produce_tiles: array<VtProduceTile>;
@group(0) @binding(1) var<uniform> vt_produce: VtProduceParams;

struct VtProduced {
    @builtin(position) pos: vec4<f32>,
    // Virtual texture coordinates of this texel's centre.
    @location(0) uv: vec2<f32>,
    // Layer, mip, tile x, tile y.
    @location(1) @interpolate(flat) info: vec4<u32>,
    // One texel of the tile's mip in uv (x, y), refresh, unused.
    @location(2) @interpolate(flat) texel: vec4<f32>,
}

// The vertex of a producer's pipeline: vertex `vi` (0..4) of instance `ii`.
fn vt_produce_vertex(vi: u32, ii: u32) -> VtProduced {
    let t = vt_produce_tiles[ii];
    let corner = vec2<f32>(f32(vi & 1u), f32(vi >> 1u));
    let px = mix(t.dst.xy, t.dst.zw, corner);
    let ndc = px / vt_produce.pool_size * 2.0 - 1.0;
    var out: VtProduced;
    out.pos = vec4<f32>(ndc.x, -ndc.y, 0.0, 1.0);
    out.uv = mix(t.uv.xy, t.uv.zw, corner);
    out.info = t.info;
    out.texel = t.texel;
    return out;
}

// The texel's coordinates clamped to the centres of the layer's edge texels at its
// mip: border texels past the layer's edge repeat the edge, as the bake's do.
fn vt_produce_uv(p: VtProduced) -> vec2<f32> {
    let half = 0.5 * p.texel.xy;
    return clamp(p.uv, half, vec2<f32>(1.0) - half);
}
