// The terrain through its produced virtual texture (needs vt.wgsl and
// terrain_view.wgsl): one page-table lookup, albedo and normal from the stack.

fn terrain_vt_colour(v: TerrainOut) -> vec4<f32> {
    let layers = vt_sample_layers(v.uv, dpdx(v.uv), dpdy(v.uv), v.clip, f32(vt.mip_count));
    return terrain_shade(layers.l0.rgb, layers.l1.xyz * 2.0 - 1.0, v.world);
}

@fragment
fn fs_main(v: TerrainOut) -> @location(0) vec4<f32> {
    return terrain_vt_colour(v);
}

// With a feedback target (tessera::shaders::with_feedback_target).
struct FeedbackOut {
    @location(0) colour: vec4<f32>,
    @location(1) request: u32,
}

@fragment
fn fs_main_feedback(v: TerrainOut) -> FeedbackOut {
    let colour = terrain_vt_colour(v);
    return FeedbackOut(colour, vt_request());
}

// A predicted view's feedback only, at half the view's size.
@fragment
fn fs_request(v: TerrainOut) -> @location(0) u32 {
    return vt_request_at(v.uv, 0.5 * dpdx(v.uv), 0.5 * dpdy(v.uv), f32(vt.mip_count));
}
