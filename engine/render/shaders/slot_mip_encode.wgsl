// Level 1 of a block-compressed tile pool (BC7 or BC1): each uploaded slot's parent
// quadrant (or, while the parent is not resident, its own 2x downsample), border
// included, encoded on the GPU into a buffer that the pool then
// copies into level 1. A level-1 slot is half a slot (68 texels for 136² slots), a
// whole number of 4x4 blocks, so every copy is block-aligned.
//
// One invocation per 4x4 block of level 1: it reads the 8x8 level-0 texels under the
// block (textureLoad decodes the pool's blocks, into linear light for an sRGB pool),
// averages each 2x2 (in linear light, as the baker's mips), and encodes the 16 averages:
// BC7 in mode 6 (one subset, RGBA endpoints of 7 bits plus a p-bit, 4-bit indices),
// BC1 in its four-colour mode (never transparent). Endpoints lie on the colours'
// principal axis, each texel takes its nearest interpolated colour, and BC7 refits the
// endpoints to those indices once by least squares. Level 1 is only ever seen as the
// blend of hardware trilinear towards the coarser mip, never as the resident mip itself.

struct EncodeParams {
    slot_texels: u32, // side of a slot at level 0
    blocks: u32,      // blocks across a level-1 slot
    row_words: u32,   // u32 words per row of blocks in `out_blocks` (bytes_per_row / 4)
    count: u32,       // slots in this batch
    srgb: u32,        // 1: the pool is sRGB (encode sRGB-encoded values)
    bc1: u32,         // 1: BC1, 0: BC7
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var level0: texture_2d<f32>;
@group(0) @binding(1) var<uniform> ep: EncodeParams;
// One level-1 slot to make: where it goes (a slot of the grid), the level-0 texel its
// texels start at, and the step between them (1: a copy of the parent's quadrant, 2: a
// 2x downsample of the slot itself).
struct Job {
    dst: vec2<u32>,
    src: vec2<u32>,
    step: u32,
    _pad: u32,
}

@group(0) @binding(2) var<storage, read> jobs: array<Job>;
@group(0) @binding(3) var<storage, read_write> out_blocks: array<u32>;

fn to_srgb(c: vec3<f32>) -> vec3<f32> {
    let lo = c * 12.92;
    let hi = 1.055 * pow(max(c, vec3<f32>(0.0031308)), vec3<f32>(1.0 / 2.4)) - 0.055;
    return select(hi, lo, c <= vec3<f32>(0.0031308));
}

// Appends the low `bits` of `value` to the 128-bit block at bit `*pos`.
fn put(w: ptr<function, array<u32, 4>>, pos: ptr<function, u32>, value: u32, bits: u32) {
    let p = *pos;
    let word = p >> 5u;
    let shift = p & 31u;
    (*w)[word] = (*w)[word] | (value << shift);
    if shift + bits > 32u {
        (*w)[word + 1u] = (*w)[word + 1u] | (value >> (32u - shift));
    }
    *pos = p + bits;
}

// A BC7 endpoint: 7 bits per channel and the p-bit shared by its channels, chosen to
// come closest to `c` (0..255).
struct Endpoint {
    v: vec4<u32>,
    p: u32,
}

fn endpoint(c: vec4<f32>) -> Endpoint {
    var best: Endpoint;
    var best_err = 1e30;
    for (var p = 0u; p < 2u; p = p + 1u) {
        let v = vec4<u32>(clamp(round((c - f32(p)) * 0.5), vec4<f32>(0.0), vec4<f32>(127.0)));
        let d = vec4<f32>(v * 2u + p) - c;
        let err = dot(d, d);
        if err < best_err {
            best_err = err;
            best = Endpoint(v, p);
        }
    }
    return best;
}

fn value(e: Endpoint) -> vec4<f32> {
    return vec4<f32>(e.v * 2u + e.p);
}

// The principal axis of the 16 colours (power iteration on their covariance) and the
// extremes along it: endpoints on the line that fits the block, in either direction
// per channel (a bounding box's diagonal fits only blocks whose channels rise together).
struct Line {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn fit_line(px: ptr<function, array<vec4<f32>, 16>>) -> Line {
    var mean = vec4<f32>(0.0);
    var lo = vec4<f32>(255.0);
    var hi = vec4<f32>(0.0);
    for (var i = 0u; i < 16u; i = i + 1u) {
        mean = mean + (*px)[i];
        lo = min(lo, (*px)[i]);
        hi = max(hi, (*px)[i]);
    }
    mean = mean / 16.0;
    var cov = mat4x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var i = 0u; i < 16u; i = i + 1u) {
        let d = (*px)[i] - mean;
        cov = cov + mat4x4<f32>(d * d.x, d * d.y, d * d.z, d * d.w);
    }
    var axis = hi - lo;
    for (var k = 0u; k < 8u; k = k + 1u) {
        let next = cov * axis;
        let len = length(next);
        if len < 1e-6 {
            break;
        }
        axis = next / len;
    }
    let len = length(axis);
    if len < 1e-6 {
        return Line(mean, mean);
    }
    axis = axis / len;
    var tmin = 1e30;
    var tmax = -1e30;
    for (var i = 0u; i < 16u; i = i + 1u) {
        let t = dot((*px)[i] - mean, axis);
        tmin = min(tmin, t);
        tmax = max(tmax, t);
    }
    let clamp_c = vec4<f32>(255.0);
    return Line(clamp(mean + axis * tmin, vec4<f32>(0.0), clamp_c), clamp(mean + axis * tmax, vec4<f32>(0.0), clamp_c));
}

// BC7's 4-bit interpolation weights (of 64).
const bc7_weights = array<f32, 16>(0.0, 4.0, 9.0, 13.0, 17.0, 21.0, 26.0, 30.0, 34.0, 38.0, 43.0, 47.0, 51.0, 55.0, 60.0, 64.0);

// For endpoints e0, e1: each texel's nearest of the 16 interpolated colours; returns the
// squared error, the indices in `idx`.
fn bc7_indices(px: ptr<function, array<vec4<f32>, 16>>, a: vec4<f32>, b: vec4<f32>, idx: ptr<function, array<u32, 16>>) -> f32 {
    var total = 0.0;
    for (var i = 0u; i < 16u; i = i + 1u) {
        var best = 0u;
        var best_err = 1e30;
        for (var k = 0u; k < 16u; k = k + 1u) {
            let w = bc7_weights[k] / 64.0;
            let d = mix(a, b, w) - (*px)[i];
            let err = dot(d, d);
            if err < best_err {
                best_err = err;
                best = k;
            }
        }
        (*idx)[i] = best;
        total = total + best_err;
    }
    return total;
}

fn bc7_mode6(px: ptr<function, array<vec4<f32>, 16>>) -> array<u32, 4> {
    let line = fit_line(px);
    var e0 = endpoint(line.lo);
    var e1 = endpoint(line.hi);
    var idx: array<u32, 16>;
    var err = bc7_indices(px, value(e0), value(e1), &idx);
    // One least-squares refit of the endpoints to those indices, kept if it helps.
    var a = 0.0;
    var b = 0.0;
    var c = 0.0;
    var r0 = vec4<f32>(0.0);
    var r1 = vec4<f32>(0.0);
    for (var i = 0u; i < 16u; i = i + 1u) {
        let w = bc7_weights[idx[i]] / 64.0;
        a = a + (1.0 - w) * (1.0 - w);
        b = b + (1.0 - w) * w;
        c = c + w * w;
        r0 = r0 + (1.0 - w) * (*px)[i];
        r1 = r1 + w * (*px)[i];
    }
    let det = a * c - b * b;
    if abs(det) > 1e-6 {
        let lim = vec4<f32>(255.0);
        let f0 = endpoint(clamp((c * r0 - b * r1) / det, vec4<f32>(0.0), lim));
        let f1 = endpoint(clamp((a * r1 - b * r0) / det, vec4<f32>(0.0), lim));
        var refit: array<u32, 16>;
        let refit_err = bc7_indices(px, value(f0), value(f1), &refit);
        if refit_err < err {
            e0 = f0;
            e1 = f1;
            idx = refit;
            err = refit_err;
        }
    }
    // Texel 0's index is stored with its top bit implied 0: swap the endpoints if not.
    if idx[0] >= 8u {
        let t = e0;
        e0 = e1;
        e1 = t;
        for (var i = 0u; i < 16u; i = i + 1u) {
            idx[i] = 15u - idx[i];
        }
    }
    var w = array<u32, 4>(0u, 0u, 0u, 0u);
    var pos = 0u;
    put(&w, &pos, 1u << 6u, 7u); // mode 6
    for (var ch = 0u; ch < 4u; ch = ch + 1u) {
        put(&w, &pos, e0.v[ch], 7u);
        put(&w, &pos, e1.v[ch], 7u);
    }
    put(&w, &pos, e0.p, 1u);
    put(&w, &pos, e1.p, 1u);
    put(&w, &pos, idx[0], 3u);
    for (var i = 1u; i < 16u; i = i + 1u) {
        put(&w, &pos, idx[i], 4u);
    }
    return w;
}

fn rgb565(c: vec3<f32>) -> u32 {
    let q = vec3<u32>(clamp(round(c * vec3<f32>(31.0, 63.0, 31.0) / 255.0), vec3<f32>(0.0), vec3<f32>(31.0, 63.0, 31.0)));
    return (q.x << 11u) | (q.y << 5u) | q.z;
}

fn from565(v: u32) -> vec3<f32> {
    let q = vec3<f32>(f32(v >> 11u), f32((v >> 5u) & 63u), f32(v & 31u));
    return q * 255.0 / vec3<f32>(31.0, 63.0, 31.0);
}

fn bc1(px: ptr<function, array<vec4<f32>, 16>>) -> vec2<u32> {
    // The line through the colours (alpha is 255 in an opaque BC1 pool).
    let line = fit_line(px);
    var c0 = rgb565(line.hi.rgb);
    var c1 = rgb565(line.lo.rgb);
    if c0 < c1 {
        let t = c0;
        c0 = c1;
        c1 = t;
    }
    var bits = 0u;
    if c0 != c1 {
        // Four-colour mode (c0 > c1): palette c0, c1, 2/3 c0 + 1/3 c1, 1/3 c0 + 2/3 c1.
        let a = from565(c0);
        let b = from565(c1);
        let palette = array<vec3<f32>, 4>(a, b, (2.0 * a + b) / 3.0, (a + 2.0 * b) / 3.0);
        for (var i = 0u; i < 16u; i = i + 1u) {
            var best = 0u;
            var best_err = 1e30;
            for (var k = 0u; k < 4u; k = k + 1u) {
                let d = palette[k] - (*px)[i].rgb;
                let err = dot(d, d);
                if err < best_err {
                    best_err = err;
                    best = k;
                }
            }
            bits = bits | (best << (2u * i));
        }
    }
    // Equal endpoints: every index 0, the one colour (never the transparent index 3).
    return vec2<u32>(c0 | (c1 << 16u), bits);
}

@compute @workgroup_size(64)
fn encode(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let per_slot = ep.blocks * ep.blocks;
    let n = id.y * groups.x * 64u + id.x;
    let s = n / per_slot;
    if s >= ep.count {
        return;
    }
    let b = n % per_slot;
    let block = vec2<u32>(b % ep.blocks, b / ep.blocks);
    let job = jobs[s];
    let origin = job.src + block * 4u * job.step;
    var px: array<vec4<f32>, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) {
        let p = origin + job.step * vec2<u32>(i & 3u, i >> 2u);
        var c = textureLoad(level0, p, 0);
        if job.step == 2u {
            c = 0.25 * (c + textureLoad(level0, p + vec2<u32>(1u, 0u), 0)
                + textureLoad(level0, p + vec2<u32>(0u, 1u), 0) + textureLoad(level0, p + vec2<u32>(1u, 1u), 0));
        }
        if ep.srgb == 1u {
            c = vec4<f32>(to_srgb(c.rgb), c.a);
        }
        px[i] = clamp(c, vec4<f32>(0.0), vec4<f32>(1.0)) * 255.0;
    }
    let at = s * ep.blocks * ep.row_words + block.y * ep.row_words;
    if ep.bc1 == 1u {
        let w = bc1(&px);
        out_blocks[at + block.x * 2u] = w.x;
        out_blocks[at + block.x * 2u + 1u] = w.y;
    } else {
        let w = bc7_mode6(&px);
        for (var i = 0u; i < 4u; i = i + 1u) {
            out_blocks[at + block.x * 4u + i] = w[i];
        }
    }
}
