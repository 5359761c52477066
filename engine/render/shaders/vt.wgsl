// Tessera virtual-texture lookup: the API user shaders include.
//
// Prepend this file to your shader source: tessera::shaders::VT_WGSL as it is (bind
// group 1, names starting with `vt`), or tessera::shaders::vt_module(group, name) for
// any bind group and a name of your own, so one shader can sample several virtual
// textures (`vt_sample` becomes `NAME_sample`, `VtLayers` becomes `NameLayers`...).
// Bind the group with `VirtualTextures::bind_group(layer)`. The functions:
//
//   vt_sample(uv, frag_coord) -> vec4<f32>
//       Filtered texel of the virtual texture at `uv` (0..1 over the whole texture),
//       trilinear across mips with anisotropy, and records which tile the pixel needs
//       (GPU feedback). Call it in uniform control flow: it takes derivatives of uv.
//   vt_sample_grad(uv, ddx_uv, ddy_uv, frag_coord) -> vec4<f32>
//       The same with explicit derivatives, usable anywhere.
//   vt_sample_layers(uv, ddx_uv, ddy_uv, frag_coord, max_lod) -> VtLayers
//       For a stacked atlas (albedo, normal, roughness-metal... sharing one page table):
//       one page-table lookup, then the same texel of every layer's pool (l0, l1, l2;
//       a layer the atlas lacks repeats layer 0). The level of detail is limited to
//       `max_lod`, e.g. the coarsest mip at which a packed texture still owns whole tiles.
//
//   vt_request_at(uv, ddx_uv, ddy_uv, max_lod) -> u32
//       The request a sample would make, without sampling: for feedback-only passes.
//   vt_record(uv, ddx_uv, ddy_uv, frag_coord, max_lod)
//       Records that request as a sample would, without sampling: for a depth prepass
//       that writes the feedback of a main pass left without side effects.
//   vt_request() -> u32
//       With a feedback target (tessera::shaders::with_feedback_target), the value to
//       write to the R32Uint feedback attachment after sampling; the main pass then has
//       no side effect and keeps early depth on every driver.
//
// Page-table entry (one u32 per tile, indexed like the atlas' tile index):
//   bits 0..11 slot x, 12..23 slot y, 24..28 mip of the tile held in that slot
//   (the tile itself or its nearest resident ancestor), bit 31 valid; all ones is
//   unmapped too. In the complete table (the default) every entry is valid once the
//   coarsest mip is resident, at any depth, and the search below never climbs; in the
//   shallow one, entries more than a few mips below a resident tile are unmapped.

struct VtParams {
    size: vec2<f32>,          // mip-0 size in texels
    pool_texels: vec2<f32>,   // physical pool texture size in texels
    tile: f32,                // payload side of a tile
    border: f32,              // border texels on each side
    max_aniso: f32,           // anisotropic taps limit (1 = trilinear only, at most 4)
    mip_bias: f32,            // added to the computed level of detail
    mip_count: u32,
    first_tile: u32,          // this texture's first entry in page table and feedback
    feedback_mask: u32,       // a pixel records feedback when (xy & mask) == phase
    feedback_phase: u32,      // phase x | phase y << 8, rotated every frame
    wrap: u32,                // 0 clamp, 1 repeat
    debug: u32,               // 0 off, 1 mip colours, 2 fallback depth, 3 tile borders
    slot_mips: u32,           // 1: the pool's level 1 holds each slot's 2x downsample
    probe: u32,               // benchmark cost probes: 0 off (see vt_probe)
    mips: array<vec4<u32>, 20>, // per mip: (first entry, tiles across, tiles down, 0)
    // Per mip, precomputed on the CPU: xy = size / (tile * 2^m) (uv to tile coordinates
    // at mip m), zw = size / 2^m (uv to texels at mip m).
    mip_scale: array<vec4<f32>, 20>,
    inv_pool: vec2<f32>,      // 1 / pool_texels
    slot_pitch: vec2<f32>,    // (tile + 2 border) / pool_texels: one slot in pool uv
    border_uv: vec2<f32>,     // border / pool_texels
    tile_uv: vec2<f32>,       // tile / pool_texels
}

@group(1) @binding(0) var<uniform> vt: VtParams;
@group(1) @binding(1) var<storage, read> vt_page_table: array<u32>;
// The page-table entry `i` (see tessera::page_table for the storage).
fn vt_entry(i: u32) -> u32 { return vt_page_table[i]; }
@group(1) @binding(2) var<storage, read_write> vt_feedback: array<atomic<u32>>;
@group(1) @binding(3) var vt_pool: texture_2d<f32>;
@group(1) @binding(4) var vt_pool_sampler: sampler;
@group(1) @binding(5) var vt_pool1: texture_2d<f32>;
@group(1) @binding(6) var vt_pool2: texture_2d<f32>;

// Mips the search for a resident ancestor climbs per step: FALLBACK_DEPTH + 1 of the
// CPU page table (tessera_core::stream::page_table).
const vt_fallback_step: u32 = 5u;

// Filtered texels of up to three stacked layers at one virtual position.
struct VtLayers {
    l0: vec4<f32>,
    l1: vec4<f32>,
    l2: vec4<f32>,
}

// Where one filtered sample reads the pool: the tap centre in pool uv, the
// anisotropic axis (in pool uv, zero without anisotropy) and the tap count; `valid` is false for an
// unmapped page-table entry; `rm` is the mip of the tile found (the one asked for, or
// a resident ancestor).
struct VtTap {
    centre: vec2<f32>,
    axis: vec2<f32>,
    n: f32,
    valid: bool,
    rm: u32,
}

// `uv` wrapped or clamped into [0, 1): kept below 1 (by the largest f32 under 1), so
// `uv * vt.mip_scale[m].xy` always falls inside mip m's tile grid and needs no clamp.
fn vt_address(uv: vec2<f32>) -> vec2<f32> {
    var a = max(uv, vec2<f32>(0.0));
    if vt.wrap == 1u {
        a = fract(uv);
    }
    return min(a, vec2<f32>(0.99999994));
}

// Tile coordinates of `uv` (from vt_address) at mip `m`.
fn vt_tile_at(uv: vec2<f32>, m: u32) -> vec2<u32> {
    return vec2<u32>(uv * vt.mip_scale[m].xy);
}

fn vt_entry_index(uv: vec2<f32>, m: u32) -> u32 {
    let t = vt_tile_at(uv, m);
    let info = vt.mips[m];
    return vt.first_tile + info.x + t.y * info.y + t.x;
}

// Level of detail and anisotropic tap count, as the Vulkan specification describes
// anisotropic filtering: n = min(ceil(major / minor), max_aniso), lod = log2(major / n).
// Squared lengths save the square roots: one sqrt for the ratio, one log2 for the level.
fn vt_lod(gx: vec2<f32>, gy: vec2<f32>, max_lod: f32) -> vec2<f32> {
    let ax = gx * vt.size;
    let ay = gy * vt.size;
    let lx2 = dot(ax, ax);
    let ly2 = dot(ay, ay);
    var major2 = max(max(lx2, ly2), 1e-16);
    var n = 1.0;
    if vt.max_aniso > 1.0 {
        let minor2 = max(min(lx2, ly2), 1e-16);
        n = clamp(ceil(sqrt(major2 / minor2)), 1.0, vt.max_aniso);
        major2 = major2 / (n * n);
    }
    let lod = 0.5 * log2(major2) + vt.mip_bias;
    return vec2<f32>(clamp(lod, 0.0, min(f32(vt.mip_count - 1u), max_lod)), n);
}

// The tile the last sample of this invocation wants (its entry + 1; 0: no sample yet),
// bit 31 set when that sample was shown through a coarser tile, kept for a shader that
// writes feedback to a colour target (see vt_request).
var<private> vt_request_value: u32;

// Feedback for a colour target: the value to write to the R32Uint attachment of
// `VtFrame::feedback_attachment`, after sampling (the last sample's tile wins; bit 31
// flags a sample shown through a coarser tile than it wanted). Only a
// source passed through `tessera::shaders::with_feedback_target` sets it; without,
// feedback goes to the storage buffer and this is 0 (no request).
fn vt_request() -> u32 {
    return vt_request_value;
}

// The request (entry + 1) of a pixel that would sample `uv` with derivatives gx, gy,
// without sampling or side effects: for passes that only write feedback, such as a
// predicted view drawn ahead of the camera (scale the derivatives for a pass drawn at
// another size than the view it stands for).
fn vt_request_at(uv_in: vec2<f32>, gx: vec2<f32>, gy: vec2<f32>, max_lod: f32) -> u32 {
    let uv = vt_address(uv_in);
    let lod = vt_lod(gx, gy, max_lod).x;
    return vt_entry_index(uv, u32(lod)) + 1u;
}

// Records the tile a sample at `uv` with derivatives gx, gy would want, as a sample
// would (storage bitset or feedback target), without sampling: for a depth prepass that
// carries a material's feedback so that its main pass has no side effect (bevy_tessera).
fn vt_record(uv_in: vec2<f32>, gx: vec2<f32>, gy: vec2<f32>, frag: vec4<f32>, max_lod: f32) {
    let uv = vt_address(uv_in);
    vt_mark(uv, u32(vt_lod(gx, gy, max_lod).x), frag);
}

// With a feedback target: flags the request when the tile found (mip `rm`) is coarser
// than the mip `m` wanted, so the resolve pass counts the pixels shown blurry.
fn vt_note_found(rm: u32, m: u32) {
    if rm > m {
        vt_request_value = vt_request_value | 0x80000000u;
    }
}

// Records that the pixel at `frag` wants tile (uv, m): into the storage bitset (pixels
// of this frame's phase only), or, with a feedback target, into `vt_request_value`
// (every pixel; the resolve pass reads the phase's pixels), which has no side effect.
fn vt_mark(uv: vec2<f32>, m: u32, frag: vec4<f32>) {
    // feedback target: vt_request_value = vt_entry_index(uv, m) + 1u;
    // feedback storage: begin
    let px = vec2<u32>(frag.xy);
    let phase = vec2<u32>(vt.feedback_phase & 0xffu, vt.feedback_phase >> 8u);
    if any((px & vec2<u32>(vt.feedback_mask)) != phase) {
        return;
    }
    let idx = vt_entry_index(uv, m);
    let word = idx >> 5u;
    let bit = 1u << (idx & 31u);
    // Check before write: most pixels find their bit already set, and a plain load
    // is far cheaper than a contended atomic.
    if (atomicLoad(&vt_feedback[word]) & bit) == 0u {
        atomicOr(&vt_feedback[word], bit);
    }
    // feedback storage: end
}

// Where mip `m` (or its nearest resident ancestor) is read for `uv`: bilinear, or `n`
// bilinear taps along the footprint's major axis for anisotropic filtering. The pool
// sampler is plain bilinear; doing anisotropy here keeps every tap inside the tile's
// border (with n <= 4 the taps stay within half the footprint, under 4 texels of the
// centre) and is fast on software rasterisers too.
fn vt_locate(uv: vec2<f32>, m: u32, gx: vec2<f32>, gy: vec2<f32>, n: f32) -> VtTap {
    var tap: VtTap;
    // Fallback entries reach vt_fallback_step - 1 mips below a resident tile; past that
    // an entry is unmapped and the search goes on that many mips further up (the
    // coarsest mip is always resident, so this ends within a few steps).
    // The complete table never needs the climb: with_page_table(.., Complete) drops
    // the lines between the markers.
    var mm = m;
    var e = vt_entry(vt_entry_index(uv, mm));
    // climb: begin
    for (var i = 0u; i < 8u && (e & 0x80000000u) == 0u && mm + 1u < vt.mip_count; i = i + 1u) {
        mm = min(mm + vt_fallback_step, vt.mip_count - 1u);
        e = vt_entry(vt_entry_index(uv, mm));
    }
    // climb: end
    // Unmapped: bit 31 clear (the shallow table's 0), or all ones (the complete
    // table's initial value, mip field 31).
    tap.valid = (e & 0x80000000u) != 0u && (e >> 24u) != 0xffu;
    tap.n = n;
    let slot = vec2<f32>(f32(e & 0xfffu), f32((e >> 12u) & 0xfffu));
    let rm = (e >> 24u) & 0x1fu;
    tap.rm = rm;
    // Mip rm's scale is mip m's halved rm - m times: multiplying by 2^(m - rm) (made
    // from its exponent bits) is exact, and reuses the tile position of the lookup, so
    // after the load only a few instructions stand between the entry and the fetch.
    let halve = bitcast<f32>((127u - (max(rm, m) - m)) << 23u);
    let local = fract(uv * vt.mip_scale[m].xy * halve);
    tap.centre = slot * vt.slot_pitch + vt.border_uv + local * vt.tile_uv;
    if n > 1.0 {
        // Major axis of the footprint in texels of the resident mip, limited to the border.
        let scale = vt.mip_scale[m].zw * halve;
        var axis = gx * scale;
        let ay = gy * scale;
        if dot(ay, ay) > dot(axis, axis) {
            axis = ay;
        }
        let len = length(axis);
        let limit = 2.0 * vt.border;
        if len > limit {
            axis = axis * (limit / len);
        }
        tap.axis = axis * vt.inv_pool;
    }
    return tap;
}

// The filtered texel of one pool at a located sample, read at pool level `level`
// (0: the tile itself; up to 1 with slot mips: blended towards its 2x downsample).
fn vt_fetch(pool: texture_2d<f32>, tap: VtTap, level: f32) -> vec4<f32> {
    if !tap.valid {
        return vec4<f32>(0.0, 0.0, 0.0, 1.0);
    }
    if tap.n <= 1.0 {
        return textureSampleLevel(pool, vt_pool_sampler, tap.centre, level);
    }
    var sum = vec4<f32>(0.0);
    let taps = u32(tap.n);
    for (var i = 0u; i < taps; i = i + 1u) {
        let t = (f32(i) + 0.5) / tap.n - 0.5;
        sum = sum + textureSampleLevel(pool, vt_pool_sampler, tap.centre + tap.axis * t, level);
    }
    return sum / tap.n;
}

fn vt_sample_level(uv: vec2<f32>, m: u32, gx: vec2<f32>, gy: vec2<f32>, n: f32) -> vec4<f32> {
    return vt_fetch(vt_pool, vt_locate(uv, m, gx, gy, n), 0.0);
}

// With slot mips, the pool level that blends a tap towards mip m0 + 1 by `f`: the
// hardware trilinear filter does the blend when the tile found is mip m0 itself; an
// ancestor is already coarser than both mips, so it is read at its own level 0.
fn vt_slot_level(tap: VtTap, m0: u32, f: f32) -> f32 {
    return select(0.0, f, tap.rm == m0);
}

fn vt_debug_colour(m: u32) -> vec3<f32> {
    let palette = array<vec3<f32>, 8>(
        vec3<f32>(1.0, 0.2, 0.2), vec3<f32>(1.0, 0.6, 0.1), vec3<f32>(1.0, 1.0, 0.2), vec3<f32>(0.3, 1.0, 0.3),
        vec3<f32>(0.2, 0.9, 1.0), vec3<f32>(0.3, 0.4, 1.0), vec3<f32>(0.8, 0.3, 1.0), vec3<f32>(0.9, 0.9, 0.9),
    );
    return palette[m % 8u];
}

// The debug views applied to a filtered colour (see VtParams::debug).
fn vt_debug(c: vec4<f32>, uv: vec2<f32>, m0: u32, gx: vec2<f32>, gy: vec2<f32>) -> vec4<f32> {
    if vt.debug == 1u {
        return vec4<f32>(mix(c.rgb, vt_debug_colour(m0), 0.5), c.a);
    } else if vt.debug == 2u {
        let rm = (vt_entry(vt_entry_index(uv, m0)) >> 24u) & 0x1fu;
        return vec4<f32>(mix(c.rgb, vt_debug_colour(rm - m0), 0.6), c.a);
    } else if vt.debug == 3u {
        // Payload edges of the tiles of mip m0, about one pixel wide whatever the zoom,
        // coloured by how many mips the page table had to fall back.
        let scale = exp2(-f32(m0));
        let p = uv * vt.size * scale / vt.tile;
        let d = min(fract(p), vec2<f32>(1.0) - fract(p));
        let per_pixel = max(length(gx * vt.size * scale), length(gy * vt.size * scale)) / vt.tile;
        if min(d.x, d.y) < max(per_pixel, 1e-6) {
            let rm = (vt_entry(vt_entry_index(uv, m0)) >> 24u) & 0x1fu;
            return vec4<f32>(vt_debug_colour(rm - m0), c.a);
        }
    }
    return c;
}

// Benchmark cost probes (`tessera bench --shader-probe`), each dropping one part of
// the sampling chain: 1 level of detail and feedback only; 2 also the page-table
// lookup (the colour shows the entry); 3 the lookup replaced by a fixed slot, then one
// fetch as usual. Never set outside benchmarks.
fn vt_probe(uv: vec2<f32>, m0: u32, f: f32, gx: vec2<f32>, gy: vec2<f32>, n: f32) -> vec4<f32> {
    if vt.probe == 1u {
        return vec4<f32>(f32(m0) * 0.1, f, 0.0, 1.0);
    }
    if vt.probe == 2u {
        let e = vt_entry(vt_entry_index(uv, m0));
        return vec4<f32>(f32(e & 0xffu) / 255.0, f32((e >> 12u) & 0xffu) / 255.0, f, 1.0);
    }
    return vt_fetch(vt_pool, vt_locate_fixed(uv, m0, n), select(0.0, f, vt.slot_mips != 0u));
}

// Probe 3's tap: where an entry for slot (0, 0) holding mip m0 would send `uv`,
// computed without reading the page table.
fn vt_locate_fixed(uv: vec2<f32>, m0: u32, n: f32) -> VtTap {
    var tap: VtTap;
    tap.valid = true;
    tap.n = n;
    tap.rm = m0;
    let p = uv * vt.mip_scale[m0].xy;
    tap.centre = vt.border_uv + (p - floor(p)) * vt.tile_uv;
    tap.axis = vec2<f32>(0.0);
    return tap;
}

fn vt_sample_grad(uv_in: vec2<f32>, gx: vec2<f32>, gy: vec2<f32>, frag: vec4<f32>) -> vec4<f32> {
    let uv = vt_address(uv_in);
    let lod_n = vt_lod(gx, gy, f32(vt.mip_count));
    let lod = lod_n.x;
    let m0 = u32(lod); // lod >= 0: truncation is floor
    let f = lod - f32(m0);
    vt_mark(uv, m0, frag);
    if vt.probe != 0u {
        return vt_probe(uv, m0, f, gx, gy, lod_n.y);
    }
    if vt.slot_mips != 0u {
        // One lookup and one hardware-trilinear fetch.
        let tap = vt_locate(uv, m0, gx, gy, lod_n.y);
        // feedback target: vt_note_found(tap.rm, m0);
        return vt_debug(vt_fetch(vt_pool, tap, vt_slot_level(tap, m0, f)), uv, m0, gx, gy);
    }
    let a = vt_locate(uv, m0, gx, gy, lod_n.y);
    // feedback target: vt_note_found(a.rm, m0);
    var c = vt_fetch(vt_pool, a, 0.0);
    if f > 0.0 && m0 + 1u < vt.mip_count {
        c = mix(c, vt_sample_level(uv, m0 + 1u, gx, gy, lod_n.y), f);
    }
    return vt_debug(c, uv, m0, gx, gy);
}

fn vt_sample_layers(uv_in: vec2<f32>, gx: vec2<f32>, gy: vec2<f32>, frag: vec4<f32>, max_lod: f32) -> VtLayers {
    let uv = vt_address(uv_in);
    let lod_n = vt_lod(gx, gy, max_lod);
    let lod = lod_n.x;
    let m0 = u32(lod); // lod >= 0: truncation is floor
    let f = lod - f32(m0);
    vt_mark(uv, m0, frag);
    var out: VtLayers;
    if vt.probe != 0u {
        // The probes read layer 0 only for 1 and 2; 3 fetches every layer at one slot.
        out.l0 = vt_probe(uv, m0, f, gx, gy, lod_n.y);
        out.l1 = out.l0;
        out.l2 = out.l0;
        if vt.probe == 3u {
            out.l1 = vt_fetch(vt_pool1, vt_locate_fixed(uv, m0, lod_n.y), select(0.0, f, vt.slot_mips != 0u));
            out.l2 = vt_fetch(vt_pool2, vt_locate_fixed(uv, m0, lod_n.y), select(0.0, f, vt.slot_mips != 0u));
        }
        return out;
    }
    let a = vt_locate(uv, m0, gx, gy, lod_n.y);
    // feedback target: vt_note_found(a.rm, m0);
    if vt.slot_mips != 0u {
        // One lookup, one hardware-trilinear fetch per layer.
        let level = vt_slot_level(a, m0, f);
        out.l0 = vt_fetch(vt_pool, a, level);
        out.l1 = vt_fetch(vt_pool1, a, level);
        out.l2 = vt_fetch(vt_pool2, a, level);
        out.l0 = vt_debug(out.l0, uv, m0, gx, gy);
        return out;
    }
    out.l0 = vt_fetch(vt_pool, a, 0.0);
    out.l1 = vt_fetch(vt_pool1, a, 0.0);
    out.l2 = vt_fetch(vt_pool2, a, 0.0);
    if f > 0.0 && m0 + 1u < vt.mip_count {
        let b = vt_locate(uv, m0 + 1u, gx, gy, lod_n.y);
        out.l0 = mix(out.l0, vt_fetch(vt_pool, b, 0.0), f);
        out.l1 = mix(out.l1, vt_fetch(vt_pool1, b, 0.0), f);
        out.l2 = mix(out.l2, vt_fetch(vt_pool2, b, 0.0), f);
    }
    out.l0 = vt_debug(out.l0, uv, m0, gx, gy);
    return out;
}

fn vt_sample(uv: vec2<f32>, frag: vec4<f32>) -> vec4<f32> {
    return vt_sample_grad(uv, dpdx(uv), dpdy(uv), frag);
}
