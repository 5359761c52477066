// The built-in scene: camera, vertex stage and shading shared by the virtual-texture
// and reference pipelines (scene_vt.wgsl / scene_reference.wgsl add the fragment stage).

struct Frame {
    view_proj: mat4x4<f32>,
    light_dir: vec4<f32>,
}

@group(0) @binding(0) var<uniform> frame: Frame;

struct VertexIn {
    @location(0) position: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) uv: vec2<f32>,
}

struct VertexOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) normal: vec3<f32>,
    @location(1) uv: vec2<f32>,
}

@vertex
fn vs_main(v: VertexIn) -> VertexOut {
    var o: VertexOut;
    o.clip = frame.view_proj * vec4<f32>(v.position, 1.0);
    o.normal = v.normal;
    o.uv = v.uv;
    return o;
}

// The pass's clear colour (tessera_tools::scene::BACKGROUND): transparent texels (an
// alpha band, a raster's nodata) show it, as if the surface were not there.
const BACKGROUND = vec3<f32>(0.05, 0.06, 0.08);

fn shade(albedo: vec4<f32>, normal: vec3<f32>) -> vec4<f32> {
    let n = normalize(normal);
    let diffuse = max(dot(n, normalize(frame.light_dir.xyz)), 0.0);
    // Blended here, not by the pipeline: the plane stays opaque to depth and feedback.
    let lit = albedo.rgb * (0.45 + 0.55 * diffuse);
    return vec4<f32>(mix(BACKGROUND, lit, albedo.a), 1.0);
}
