// Fragment stage of the scene sampling the fully resident reference texture with the
// hardware trilinear/anisotropic sampler (needs scene.wgsl).

struct Reference {
    uv_scale: vec2<f32>,   // virtual size / padded texture size
    size: vec2<f32>,       // virtual size in texels
    max_lod: f32,          // the coarsest mip
    explicit_lod: f32,     // 1: the level of detail computed as vt.wgsl does; 0: the hardware's
    _pad: vec2<f32>,
}

@group(1) @binding(0) var<uniform> reference: Reference;
@group(1) @binding(1) var reference_texture: texture_2d<f32>;
@group(1) @binding(2) var reference_sampler: sampler;

@fragment
fn fs_main(v: VertexOut) -> @location(0) vec4<f32> {
    // The isotropic level of detail of vt_lod (vt.wgsl): the hardware's own is an
    // approximation that differs between GPUs, which would set a floor under the PSNR
    // of a fully resident frame against this reference.
    let ax = dpdx(v.uv) * reference.size;
    let ay = dpdy(v.uv) * reference.size;
    let major2 = max(max(dot(ax, ax), dot(ay, ay)), 1e-16);
    let lod = clamp(0.5 * log2(major2), 0.0, reference.max_lod);
    let uv = clamp(v.uv, vec2<f32>(0.0), vec2<f32>(1.0)) * reference.uv_scale;
    // One sample either way (the reference is also the denominator of bench's ratios);
    // the branch is on a uniform, so the implicit-derivative sample stays valid.
    if reference.explicit_lod > 0.5 {
        return shade(textureSampleLevel(reference_texture, reference_sampler, uv, lod), v.normal);
    }
    return shade(textureSample(reference_texture, reference_sampler, uv), v.normal);
}
