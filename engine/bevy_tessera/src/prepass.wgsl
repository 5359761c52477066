// The depth prepass fragment shader of `TesseraMaterial`: it writes the material's
// feedback (which tile each pixel's sample wants) and nothing else, so that the main
// pass, built without feedback for cameras with a `DepthPrepass`, has no side effect:
// the driver then tests depth before shading and hidden fragments are never lit.
// The plugin uses it only for a camera's depth-only prepass of opaque materials with
// uvs (see `feedback_in_prepass` in binding.rs); shadow views keep Bevy's own prepass.
//
// Plain WGSL, not WESL: its feedback is a side effect too, and only
// `@early_depth_test(force)` (a naga extension that Bevy's WESL parser refuses) has the
// depth test run before it, so that hidden fragments record nothing. Bevy passes plain
// WGSL through untouched (no imports, no features), so the plugin puts the `tessera::vt`
// module and the region block in front of this file, at the material's bind group
// (`binding::prepass_wgsl`).

// The prepass vertex stage's output this shader reads: Bevy's `prepass::io`
// `VertexOutput` puts the mesh's first uv set at location 0.
struct PrepassInput {
    @builtin(position) position: vec4<f32>,
    @location(0) uv: vec2<f32>,
}

@fragment
@early_depth_test(force)
fn fragment(in: PrepassInput) {
    if vt_enabled() && tessera_region.sampled > 0.5 {
        let r = tessera_region;
        // The same derivatives and level-of-detail limit as the main pass' sample.
        let gx = dpdx(in.uv) * r.rect.zw;
        let gy = dpdy(in.uv) * r.rect.zw;
        vt_record(region_uv(in.uv), gx, gy, in.position, r.max_lod);
    }
}
