// The terrain's camera, vertex stage and lighting, shared by its virtual-texture and
// direct pipelines (terrain_vt.wgsl / terrain_direct.wgsl add the fragment stage).

struct TerrainFrame {
    view_proj: mat4x4<f32>,
    light_dir: vec4<f32>,
    eye: vec4<f32>,
}

@group(0) @binding(0) var<uniform> frame: TerrainFrame;

struct VertexIn {
    @location(0) position: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) uv: vec2<f32>,
}

struct TerrainOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) uv: vec2<f32>,
}

@vertex
fn vs_main(v: VertexIn) -> TerrainOut {
    var o: TerrainOut;
    o.clip = frame.view_proj * vec4<f32>(v.position, 1.0);
    o.world = v.position;
    o.uv = v.uv;
    return o;
}

// The sky: the pass's clear colour (tessera_tools::terrain::SKY) and the haze.
const SKY = vec3<f32>(0.55, 0.65, 0.8);

// Sun and sky light on the composite, with distance haze.
fn terrain_shade(albedo: vec3<f32>, normal: vec3<f32>, world: vec3<f32>) -> vec4<f32> {
    let n = normalize(normal);
    let sun = max(dot(n, normalize(frame.light_dir.xyz)), 0.0);
    let sky = 0.5 + 0.5 * n.y;
    let lit = albedo * (0.85 * sun + 0.3 * sky);
    let haze = 1.0 - exp(-distance(world, frame.eye.xyz) * 0.004);
    return vec4<f32>(mix(lit, SKY, haze), 1.0);
}
