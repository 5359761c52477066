// Fragment stage of the scene sampling the virtual texture (needs vt.wgsl and scene.wgsl).

@fragment
fn fs_main(v: VertexOut) -> @location(0) vec4<f32> {
    return shade(vt_sample(v.uv, v.clip), v.normal);
}
