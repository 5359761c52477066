// The terrain evaluated directly (needs terrain.wgsl and terrain_view.wgsl): the whole
// composite for every pixel, with the pixel's footprint. The reference the produced
// virtual texture is compared with, and the cost it saves.

@fragment
fn fs_main(v: TerrainOut) -> @location(0) vec4<f32> {
    let p = v.world.xz;
    let s = terrain_composite(p, dpdx(p), dpdy(p));
    return terrain_shade(s.albedo, s.normal, v.world);
}
