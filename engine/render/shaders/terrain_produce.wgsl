// The terrain's tile producer (needs tessera's produce.wgsl and terrain.wgsl): the
// composite at each texel of a produced tile, with one texel's footprint, into the
// albedo (sRGB pool: linear values) and normal (n · 0.5 + 0.5) layers of the stack.

@vertex
fn vs_produce(@builtin(vertex_index) vi: u32, @builtin(instance_index) ii: u32) -> VtProduced {
    return vt_produce_vertex(vi, ii);
}

struct TerrainTexel {
    @location(0) albedo: vec4<f32>,
    @location(1) normal: vec4<f32>,
}

@fragment
fn fs_produce(t: VtProduced) -> TerrainTexel {
    let p = vt_produce_uv(t) * terrain.world;
    let fp = t.texel.xy * terrain.world;
    let s = terrain_composite(p, vec2<f32>(fp.x, 0.0), vec2<f32>(0.0, fp.y));
    return TerrainTexel(vec4<f32>(s.albedo, 1.0), vec4<f32>(s.normal * 0.5 + 0.5, 1.0));
}
