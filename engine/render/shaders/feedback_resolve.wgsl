// Feedback target resolve: turns the requests a pass wrote to the R32Uint feedback
// target (one per pixel, see `vt_request` in vt.wgsl: bits 0..30 the wanted tile's
// entry + 1, 0 for none; bit 31 set when the pixel was shown through a coarser tile
// than the one it wanted) into bits of the request bitset, which the compaction pass
// then lists as usual, and counts the pixels read and those shown coarser.
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

// Summed over the frame's resolves; cleared when the frame begins.
struct ResolveCounts {
    sampled: atomic<u32>, // pixels read that requested a tile
    coarse: atomic<u32>,  // of those, pixels shown through a coarser tile than wanted
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> rp: ResolveParams;
@group(0) @binding(1) var fb_target: texture_2d<u32>;
@group(0) @binding(2) var<storage, read_write> fb_bits: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> fb_counts: ResolveCounts;

var<workgroup> group_sampled: atomic<u32>;
var<workgroup> group_coarse: atomic<u32>;

@compute @workgroup_size(8, 8)
fn resolve(@builtin(global_invocation_id) id: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let phase = vec2<u32>(rp.phase & 0xffu, rp.phase >> 8u);
    let p = id.xy * (rp.mask + 1u) + phase;
    var v = 0u;
    if all(p < textureDimensions(fb_target)) {
        v = textureLoad(fb_target, p, 0).x;
    }
    let idx = (v & 0x7fffffffu) - 1u;
    let word = idx >> 5u;
    if (v & 0x7fffffffu) != 0u && word < rp.words {
        let bit = 1u << (idx & 31u);
        // Neighbouring pixels mostly want the same tile: load before the atomic.
        if (atomicLoad(&fb_bits[word]) & bit) == 0u {
            atomicOr(&fb_bits[word], bit);
        }
        atomicAdd(&group_sampled, 1u);
        if (v & 0x80000000u) != 0u {
            atomicAdd(&group_coarse, 1u);
        }
    }
    // One global atomic per counter and workgroup.
    workgroupBarrier();
    if local == 0u {
        let sampled = atomicLoad(&group_sampled);
        if sampled != 0u {
            atomicAdd(&fb_counts.sampled, sampled);
            atomicAdd(&fb_counts.coarse, atomicLoad(&group_coarse));
        }
    }
}
