// Feedback target resolve: turns the requests a frame's passes wrote to the R32Uint
// feedback target (one per pixel: the wanted tile's entry + 1, 0 for none; see
// `vt_request` in vt.wgsl) into bits of the request bitset, which the compaction pass
// then lists as usual.
//
// Only the pixels of this frame's phase are read: one in every stride × stride block
// (stride = mask + 1), the same pixels the storage path lets write, so both paths
// request the same tiles for the same view. One invocation per pixel read; dispatch
// ceil(ceil(width / stride) / 8) × ceil(ceil(height / stride) / 8) workgroups.

struct ResolveParams {
    mask: u32,   // stride - 1
    phase: u32,  // phase x | phase y << 8
    words: u32,  // words of the bitset (requests past it are ignored)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> rp: ResolveParams;
@group(0) @binding(1) var fb_target: texture_2d<u32>;
@group(0) @binding(2) var<storage, read_write> fb_bits: array<atomic<u32>>;

@compute @workgroup_size(8, 8)
fn resolve(@builtin(global_invocation_id) id: vec3<u32>) {
    let phase = vec2<u32>(rp.phase & 0xffu, rp.phase >> 8u);
    let p = id.xy * (rp.mask + 1u) + phase;
    if any(p >= textureDimensions(fb_target)) {
        return;
    }
    let v = textureLoad(fb_target, p, 0).x;
    if v == 0u {
        return;
    }
    let idx = v - 1u;
    let word = idx >> 5u;
    if word >= rp.words {
        return;
    }
    let bit = 1u << (idx & 31u);
    // Neighbouring pixels mostly want the same tile: load before the atomic.
    if (atomicLoad(&fb_bits[word]) & bit) == 0u {
        atomicOr(&fb_bits[word], bit);
    }
}
