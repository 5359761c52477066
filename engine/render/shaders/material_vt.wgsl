// Fragment stage of material scenes through the stacked virtual texture (needs vt.wgsl
// and material.wgsl): one page-table lookup serves albedo, normal and roughness-metal.

@fragment
fn fs_main(v: MeshOut, @builtin(front_facing) front: bool) -> @location(0) vec4<f32> {
    var base = vec4<f32>(1.0);
    var nrm = vec3<f32>(0.5, 0.5, 1.0);
    var orm = vec4<f32>(1.0);
    // Derivatives of the unwrapped coordinate: continuous across the wrap.
    let gx = dpdx(v.uv) * material.rect.zw;
    let gy = dpdy(v.uv) * material.rect.zw;
    let layers = vt_sample_layers(material_uv(v.uv), gx, gy, v.clip, material.max_lod);
    if material.textured > 0.5 {
        base = layers.l0;
        nrm = layers.l1.xyz;
        orm = layers.l2;
    }
    return finish_material(v, front, base, nrm, orm);
}
