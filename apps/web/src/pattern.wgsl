// The pattern scene: a ground plane sampled through vt.wgsl (group 1, put in front of
// this file by pattern.rs). Group 0: the camera.

struct Frame {
    view_proj: mat4x4<f32>,
    // x: half the plane's side, y: texture repeats across the plane.
    plane: vec4<f32>,
}

@group(0) @binding(0) var<uniform> frame: Frame;

struct VsOut {
    @builtin(position) pos: vec4<f32>,
    @location(0) uv: vec2<f32>,
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    var corners = array<vec2<f32>, 6>(
        vec2<f32>(-1.0, -1.0), vec2<f32>(1.0, -1.0), vec2<f32>(1.0, 1.0),
        vec2<f32>(-1.0, -1.0), vec2<f32>(1.0, 1.0), vec2<f32>(-1.0, 1.0),
    );
    let c = corners[i];
    var out: VsOut;
    out.pos = frame.view_proj * vec4<f32>(c.x * frame.plane.x, 0.0, c.y * frame.plane.x, 1.0);
    out.uv = (c * 0.5 + 0.5) * frame.plane.y;
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    return vec4<f32>(vt_sample(in.uv, in.pos).rgb, 1.0);
}
