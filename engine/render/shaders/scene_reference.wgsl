// Fragment stage of the scene sampling the fully resident reference texture with the
// hardware trilinear/anisotropic sampler (needs scene.wgsl).

struct Reference {
    uv_scale: vec2<f32>,   // virtual size / padded texture size
    _pad: vec2<f32>,
}

@group(1) @binding(0) var<uniform> reference: Reference;
@group(1) @binding(1) var reference_texture: texture_2d<f32>;
@group(1) @binding(2) var reference_sampler: sampler;

@fragment
fn fs_main(v: VertexOut) -> @location(0) vec4<f32> {
    let uv = clamp(v.uv, vec2<f32>(0.0), vec2<f32>(1.0)) * reference.uv_scale;
    return shade(textureSample(reference_texture, reference_sampler, uv), v.normal);
}
