// Fragment stage of material scenes through fully resident reference textures sampled
// by the hardware (needs material.wgsl). The level of detail is computed as vt.wgsl
// does (isotropic) and limited the same way, so the two paths stay comparable.
//
// The bake gives a material's tiles border texels from inside its rectangle (repeated or
// clamped per axis, `tessera_core::bake::Region`), so the virtual texture filters across
// a repeating material's wrap as a texture of its own would. A plain texture of the layer
// holds the neighbouring material there instead: where a bilinear footprint leaves the
// tile it starts in at the rectangle's edge, the texels are loaded one by one under the
// same rule and filtered here; everywhere else the hardware samples as before.

struct MaterialReference {
    uv_scale: vec2<f32>,   // virtual size / padded texture size
    size: vec2<f32>,       // virtual size in texels
    tile: f32,             // payload side of a tile in texels
    _pad0: f32,
    _pad1: vec2<f32>,
}

@group(1) @binding(0) var<uniform> reference: MaterialReference;
@group(1) @binding(1) var reference_albedo: texture_2d<f32>;
@group(1) @binding(2) var reference_sampler: sampler;
@group(1) @binding(3) var reference_normal: texture_2d<f32>;
@group(1) @binding(4) var reference_orm: texture_2d<f32>;

// One axis of a bilinear footprint at mip `m`: the two texel columns (or rows) it reads,
// after the bake's border rule, and the weight of the second.
struct RefAxis {
    t0: i32,
    t1: i32,
    w: f32,
    moved: bool,
}

fn reference_wrap(i: f32, start: f32, n: f32, repeat: bool) -> f32 {
    let r = i - start;
    if repeat {
        return start + r - n * floor(r / n);
    }
    return start + clamp(r, 0.0, n - 1.0);
}

fn reference_axis(uv: f32, size: f32, rect_start: f32, rect_len: f32, repeat: bool, m: u32) -> RefAxis {
    let scale = exp2(-f32(m));
    let p = uv * size * scale;
    let q = p - 0.5;
    let t0 = floor(q);
    // The tile the sample lies in, and the rectangle on this mip (start down, end up).
    let k0 = floor(p / reference.tile) * reference.tile;
    let k1 = k0 + reference.tile;
    let rs = floor(rect_start * scale);
    let re = ceil((rect_start + rect_len) * scale);
    let owned = k0 >= rs && k0 < re;
    var a: RefAxis;
    a.w = q - t0;
    var x0 = t0;
    var x1 = t0 + 1.0;
    if owned && x0 < k0 {
        x0 = reference_wrap(x0, rs, re - rs, repeat);
    }
    if owned && x1 >= k1 {
        x1 = reference_wrap(x1, rs, re - rs, repeat);
    }
    a.moved = x0 != t0 || x1 != t0 + 1.0;
    a.t0 = i32(x0);
    a.t1 = i32(x1);
    return a;
}

struct RefFootprint {
    x: RefAxis,
    y: RefAxis,
}

fn reference_footprint(uv: vec2<f32>, m: u32) -> RefFootprint {
    let start = material.rect.xy * reference.size;
    let len = material.rect_texels;
    let repeat = material.wrap > vec2<f32>(0.5);
    return RefFootprint(
        reference_axis(uv.x, reference.size.x, round(start.x), len.x, repeat.x, m),
        reference_axis(uv.y, reference.size.y, round(start.y), len.y, repeat.y, m),
    );
}

// Mip `m` of `tex` at `uv`, bilinear: the hardware's, or texel by texel where the
// footprint takes border texels from inside the rectangle.
fn reference_level(tex: texture_2d<f32>, uv: vec2<f32>, m: u32, f: RefFootprint) -> vec4<f32> {
    if !(f.x.moved || f.y.moved) {
        return textureSampleLevel(tex, reference_sampler, uv * reference.uv_scale, f32(m));
    }
    let l = i32(m);
    let a = textureLoad(tex, vec2<i32>(f.x.t0, f.y.t0), l);
    let b = textureLoad(tex, vec2<i32>(f.x.t1, f.y.t0), l);
    let c = textureLoad(tex, vec2<i32>(f.x.t0, f.y.t1), l);
    let d = textureLoad(tex, vec2<i32>(f.x.t1, f.y.t1), l);
    return mix(mix(a, b, f.x.w), mix(c, d, f.x.w), f.y.w);
}

// Where one sample reads: its level of detail, the two mips it blends and their
// footprints (the same for every layer: computed once per fragment).
struct RefSample {
    uv: vec2<f32>,
    lod: f32,
    m0: u32,
    frac: f32,
    f0: RefFootprint,
    f1: RefFootprint,
    edge: bool,
}

fn reference_at(uv: vec2<f32>, lod: f32) -> RefSample {
    let m0 = u32(lod); // lod >= 0: truncation is floor
    let frac = lod - f32(m0);
    let f0 = reference_footprint(uv, m0);
    let f1 = reference_footprint(uv, m0 + 1u);
    let edge = f0.x.moved || f0.y.moved || (frac > 0.0 && (f1.x.moved || f1.y.moved));
    return RefSample(uv, lod, m0, frac, f0, f1, edge);
}

// `tex` at the sample `s` (virtual uv inside the material's rectangle, level of detail).
fn reference_sample(tex: texture_2d<f32>, s: RefSample) -> vec4<f32> {
    if !s.edge {
        return textureSampleLevel(tex, reference_sampler, s.uv * reference.uv_scale, s.lod);
    }
    let a = reference_level(tex, s.uv, s.m0, s.f0);
    if s.frac <= 0.0 {
        return a;
    }
    return mix(a, reference_level(tex, s.uv, s.m0 + 1u, s.f1), s.frac);
}

@fragment
fn fs_main(v: MeshOut, @builtin(front_facing) front: bool) -> @location(0) vec4<f32> {
    let gx = dpdx(v.uv) * material.rect.zw * reference.size;
    let gy = dpdy(v.uv) * material.rect.zw * reference.size;
    let lod = clamp(log2(max(max(length(gx), length(gy)), 1e-8)), 0.0, material.max_lod);
    let at = reference_at(material_uv(v.uv), lod);
    var base = vec4<f32>(1.0);
    var nrm = vec3<f32>(0.5, 0.5, 1.0);
    var orm = vec4<f32>(1.0);
    let a = reference_sample(reference_albedo, at);
    let b = reference_sample(reference_normal, at);
    let c = reference_sample(reference_orm, at);
    if material.textured > 0.5 {
        base = a;
        nrm = b.xyz;
        orm = c;
    }
    return finish_material(v, front, base, nrm, orm);
}
