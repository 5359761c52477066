// Fragment stage of material scenes through fully resident reference textures sampled
// by the hardware (needs material.wgsl). The level of detail is computed as vt.wgsl
// does (isotropic) and limited the same way, so the two paths stay comparable.

struct MaterialReference {
    uv_scale: vec2<f32>,   // virtual size / padded texture size
    size: vec2<f32>,       // virtual size in texels
}

@group(1) @binding(0) var<uniform> reference: MaterialReference;
@group(1) @binding(1) var reference_albedo: texture_2d<f32>;
@group(1) @binding(2) var reference_sampler: sampler;
@group(1) @binding(3) var reference_normal: texture_2d<f32>;
@group(1) @binding(4) var reference_orm: texture_2d<f32>;

@fragment
fn fs_main(v: MeshOut, @builtin(front_facing) front: bool) -> @location(0) vec4<f32> {
    let gx = dpdx(v.uv) * material.rect.zw * reference.size;
    let gy = dpdy(v.uv) * material.rect.zw * reference.size;
    let lod = clamp(log2(max(max(length(gx), length(gy)), 1e-8)), 0.0, material.max_lod);
    let uv = material_uv(v.uv) * reference.uv_scale;
    var base = vec4<f32>(1.0);
    var nrm = vec3<f32>(0.5, 0.5, 1.0);
    var orm = vec4<f32>(1.0);
    let a = textureSampleLevel(reference_albedo, reference_sampler, uv, lod);
    let b = textureSampleLevel(reference_normal, reference_sampler, uv, lod);
    let c = textureSampleLevel(reference_orm, reference_sampler, uv, lod);
    if material.textured > 0.5 {
        base = a;
        nrm = b.xyz;
        orm = c;
    }
    return finish_material(v, front, base, nrm, orm);
}
