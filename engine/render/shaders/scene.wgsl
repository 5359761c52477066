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

fn shade(albedo: vec4<f32>, normal: vec3<f32>) -> vec4<f32> {
    let n = normalize(normal);
    let diffuse = max(dot(n, normalize(frame.light_dir.xyz)), 0.0);
    return vec4<f32>(albedo.rgb * (0.45 + 0.55 * diffuse), 1.0);
}
