// Level 1 of the tile pool on the hardware trilinear path, border included, made right
// after uploads (stream/level_one.rs in tessera-core says which): one instance per
// level-1 slot, either a copy of the quadrant of the parent tile's slot that the slot's
// tile covers (step 1: the atlas' own coarser mip, as the reference samples it) or,
// while the parent is not resident, the slot's 2x downsample (step 2: each level-1 texel
// the mean of its four level-0 texels, in linear light for an sRGB pool, as the baker's
// mips are).

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

struct SlotOut {
    @builtin(position) pos: vec4<f32>,
    // Level-0 texel under the slot's level-1 texel 0, and the step between texels.
    @location(0) @interpolate(flat) src: vec2<u32>,
    @location(1) @interpolate(flat) step: u32,
    // The slot's top-left texel at level 1.
    @location(2) @interpolate(flat) dst: vec2<u32>,
}

@vertex
fn vs_slot(
    @builtin(vertex_index) vi: u32,
    @location(0) slot: vec2<u32>,
    @location(1) src: vec2<u32>,
    @location(2) step: u32,
) -> SlotOut {
    // A triangle strip over the slot's rectangle at level 1.
    let corner = vec2<f32>(f32(vi & 1u), f32(vi >> 1u));
    let px = (vec2<f32>(slot) + corner) * params.half_slot;
    let ndc = px / params.level1 * 2.0 - 1.0;
    let dst = slot * u32(params.half_slot);
    return SlotOut(vec4<f32>(ndc.x, -ndc.y, 0.0, 1.0), src, step, dst);
}

@fragment
fn fs_slot(in: SlotOut) -> @location(0) vec4<f32> {
    let i = vec2<u32>(in.pos.xy) - in.dst;
    let p = in.src + in.step * i;
    var c = textureLoad(level0, p, 0);
    if in.step == 2u {
        c = 0.25 * (c + textureLoad(level0, p + vec2<u32>(1u, 0u), 0)
            + textureLoad(level0, p + vec2<u32>(0u, 1u), 0) + textureLoad(level0, p + vec2<u32>(1u, 1u), 0));
    }
    return c;
}
