// Fragment stage of material scenes through the stacked virtual texture (needs vt.wgsl
// and material.wgsl): one page-table lookup serves albedo, normal and roughness-metal.

fn material_vt_colour(v: MeshOut, front: bool) -> vec4<f32> {
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

@fragment
fn fs_main(v: MeshOut, @builtin(front_facing) front: bool) -> @location(0) vec4<f32> {
    return material_vt_colour(v, front);
}

// With a feedback target (tessera::shaders::with_feedback_target): the colour, and the
// tile its sample wanted. A fragment the material discards requests nothing.
struct FeedbackOut {
    @location(0) colour: vec4<f32>,
    @location(1) request: u32,
}

@fragment
fn fs_main_feedback(v: MeshOut, @builtin(front_facing) front: bool) -> FeedbackOut {
    let colour = material_vt_colour(v, front);
    return FeedbackOut(colour, vt_request());
}

// A predicted view's feedback only (no shading, no alpha test), drawn at half the
// view's size: half the derivatives ask for the mips the full-size view will want.
@fragment
fn fs_request(v: MeshOut) -> @location(0) u32 {
    if material.textured < 0.5 {
        return 0u;
    }
    let gx = 0.5 * dpdx(v.uv) * material.rect.zw;
    let gy = 0.5 * dpdy(v.uv) * material.rect.zw;
    return vt_request_at(material_uv(v.uv), gx, gy, material.max_lod);
}
