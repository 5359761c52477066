// Level 1 of the tile pool: each slot's 2x downsample, border included, made right
// after its tile is uploaded. One instance per slot; each level-1 texel is the
// bilinear sample of level 0 at the corner its four source texels share, so the
// hardware averages them (in linear light for an sRGB pool, as the baker's mips are).

struct SlotMipParams {
    // Side of a slot at level 1, in texels.
    half_slot: f32,
    _pad: f32,
    // Size of level 1, in texels.
    level1: vec2<f32>,
}

@group(0) @binding(0) var level0: texture_2d<f32>;
@group(0) @binding(1) var level0_sampler: sampler;
@group(0) @binding(2) var<uniform> params: SlotMipParams;

@vertex
fn vs_slot(@builtin(vertex_index) vi: u32, @location(0) slot: vec2<u32>) -> @builtin(position) vec4<f32> {
    // A triangle strip over the slot's rectangle at level 1.
    let corner = vec2<f32>(f32(vi & 1u), f32(vi >> 1u));
    let px = (vec2<f32>(slot) + corner) * params.half_slot;
    let ndc = px / params.level1 * 2.0 - 1.0;
    return vec4<f32>(ndc.x, -ndc.y, 0.0, 1.0);
}

@fragment
fn fs_slot(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    // Level-1 texel i (centre i + 0.5) covers level-0 texels 2i and 2i + 1, whose
    // shared corner is 2i + 1 = 2 * (i + 0.5).
    let level0_size = params.level1 * 2.0;
    return textureSampleLevel(level0, level0_sampler, pos.xy * 2.0 / level0_size, 0.0);
}
