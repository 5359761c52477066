// Material scenes (glTF): camera, vertex stage, material parameters and lighting shared
// by the virtual-texture and reference pipelines (material_vt.wgsl and
// material_reference.wgsl add the fragment stage).

struct MaterialFrame {
    view_proj: mat4x4<f32>,
    camera_pos: vec4<f32>,
    light_dir: vec4<f32>,     // xyz: direction the light travels; w: intensity
    light_colour: vec4<f32>,  // rgb; a: ambient strength
}

@group(0) @binding(0) var<uniform> frame: MaterialFrame;

// One material: where its textures sit in the virtual texture and its factors.
struct Material {
    base_colour: vec4<f32>,
    rect: vec4<f32>,          // xy: offset, zw: size of its rectangle, in virtual uv
    rect_texels: vec2<f32>,   // size of the rectangle in mip-0 texels
    wrap: vec2<f32>,          // per axis: 1 repeat, 0 clamp
    metallic: f32,
    roughness: f32,
    normal_scale: f32,
    alpha_cutoff: f32,        // < 0: opaque
    max_lod: f32,             // coarsest mip at which the rectangle owns whole tiles
    textured: f32,            // 0: factors only
    has_normal_map: f32,
    blend: f32,               // 1: blended by its alpha (glTF BLEND), else opaque
}

@group(2) @binding(0) var<uniform> material: Material;

struct MeshIn {
    @location(0) position: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) uv: vec2<f32>,
}

struct MeshOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) uv: vec2<f32>,
}

@vertex
fn vs_main(v: MeshIn) -> MeshOut {
    var o: MeshOut;
    o.clip = frame.view_proj * vec4<f32>(v.position, 1.0);
    o.world = v.position;
    o.normal = v.normal;
    o.uv = v.uv;
    return o;
}

// The material's texture coordinate mapped into the virtual texture: wrapped or clamped
// (to texel centres) inside its rectangle, so filtering never reaches a neighbour.
fn material_uv(uv: vec2<f32>) -> vec2<f32> {
    let half = vec2<f32>(0.5) / max(material.rect_texels, vec2<f32>(1.0));
    let repeated = fract(uv);
    let clamped = clamp(uv, half, vec2<f32>(1.0) - half);
    let local = select(clamped, repeated, material.wrap > vec2<f32>(0.5));
    return material.rect.xy + local * material.rect.zw;
}

// Tangent frame from screen-space derivatives of position and uv (no tangent
// attribute needed). glTF's v axis points down the image, normal maps' +Y up.
fn perturb_normal(n: vec3<f32>, world: vec3<f32>, uv: vec2<f32>, texel: vec3<f32>) -> vec3<f32> {
    let dp1 = dpdx(world);
    // The frame below is built for a window y that grows upwards; WGSL's grows
    // downwards, which would mirror the whole frame (both axes of the normal map).
    let dp2 = -dpdy(world);
    let duv1 = dpdx(uv);
    let duv2 = -dpdy(uv);
    let dp2perp = cross(dp2, n);
    let dp1perp = cross(n, dp1);
    let t = dp2perp * duv1.x + dp1perp * duv2.x;
    let b = dp2perp * duv1.y + dp1perp * duv2.y;
    let scale = inverseSqrt(max(max(dot(t, t), dot(b, b)), 1e-20));
    let m = texel * 2.0 - vec3<f32>(1.0);
    let tn = vec3<f32>(m.xy * material.normal_scale, m.z);
    let p = normalize(t * scale * tn.x - b * scale * tn.y + n * tn.z);
    return select(n, p, all(p == p));
}

// A directional light with Lambert diffuse and a GGX-style specular lobe, plus a
// hemisphere ambient term, in linear light.
fn shade_material(albedo_in: vec4<f32>, n: vec3<f32>, world: vec3<f32>, metallic: f32, roughness: f32) -> vec4<f32> {
    let albedo = albedo_in.rgb;
    let l = normalize(-frame.light_dir.xyz);
    let v = normalize(frame.camera_pos.xyz - world);
    let h = normalize(l + v);
    let ndl = max(dot(n, l), 0.0);
    let ndv = max(dot(n, v), 1e-3);
    let ndh = max(dot(n, h), 0.0);
    let a = max(roughness * roughness, 0.02);
    let a2 = a * a;
    let d = a2 / (3.14159265 * pow(ndh * ndh * (a2 - 1.0) + 1.0, 2.0));
    let k = a * 0.5;
    let g = (ndl / (ndl * (1.0 - k) + k)) * (ndv / (ndv * (1.0 - k) + k));
    let f0 = mix(vec3<f32>(0.04), albedo, metallic);
    let f = f0 + (vec3<f32>(1.0) - f0) * pow(1.0 - max(dot(h, v), 0.0), 5.0);
    let spec = f * (d * g / max(4.0 * ndl * ndv, 1e-3));
    let diffuse = (vec3<f32>(1.0) - f) * (1.0 - metallic) * albedo;
    let direct = (diffuse + spec * 3.14159265) * ndl * frame.light_colour.rgb * frame.light_dir.w;
    let sky = mix(0.55, 1.0, n.y * 0.5 + 0.5);
    let ambient = albedo * frame.light_colour.a * sky * (1.0 - 0.5 * metallic);
    return vec4<f32>(direct + ambient, albedo_in.a);
}

// Everything after the texture reads: factors, alpha test, normal map, lighting.
fn finish_material(v: MeshOut, front: bool, base: vec4<f32>, normal_texel: vec3<f32>, orm: vec4<f32>) -> vec4<f32> {
    let albedo = base * material.base_colour;
    if material.alpha_cutoff >= 0.0 && albedo.a < material.alpha_cutoff {
        discard;
    }
    var n = normalize(v.normal);
    if !front {
        n = -n;
    }
    if material.has_normal_map > 0.5 {
        n = perturb_normal(n, v.world, v.uv, normal_texel);
    }
    let roughness = clamp(material.roughness * orm.g, 0.03, 1.0);
    let metallic = clamp(material.metallic * orm.b, 0.0, 1.0);
    let alpha = select(1.0, albedo.a, material.blend > 0.5);
    return vec4<f32>(shade_material(albedo, n, v.world, metallic, roughness).rgb, alpha);
}
