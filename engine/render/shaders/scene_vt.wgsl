// Fragment stage of the scene sampling the virtual texture (needs vt.wgsl and scene.wgsl).

@fragment
fn fs_main(v: VertexOut) -> @location(0) vec4<f32> {
    return shade(vt_sample(v.uv, v.clip), v.normal);
}

// With a feedback target (tessera::shaders::with_feedback_target): the colour, and the
// tile its sample wanted.
struct FeedbackOut {
    @location(0) colour: vec4<f32>,
    @location(1) request: u32,
}

@fragment
fn fs_main_feedback(v: VertexOut) -> FeedbackOut {
    let colour = shade(vt_sample(v.uv, v.clip), v.normal);
    return FeedbackOut(colour, vt_request());
}

// A predicted view's feedback only (no shading), drawn at half the view's size: half
// the derivatives ask for the mips the full-size view will want.
@fragment
fn fs_request(v: VertexOut) -> @location(0) u32 {
    return vt_request_at(v.uv, 0.5 * dpdx(v.uv), 0.5 * dpdy(v.uv), f32(vt.mip_count));
}
