// Feedback compaction: turns the request bitset (one bit per atlas tile, written by
// `vt_mark` in vt.wgsl) into a short list of its non-zero words, so the CPU reads back
// and decodes a list proportional to the tiles on screen, not to the atlas.
//
// One invocation per bitset word. A non-zero word is appended as (word index, bits) to
// `fb_list.pairs`; `fb_list.count` ends as the number of non-zero words, even when it
// exceeds `fb_params.capacity` (then only the first `capacity` pairs were stored and the
// CPU knows the list is incomplete). The order of the pairs is unspecified.
//
// Appends are aggregated per workgroup: one workgroup atomic per non-zero word, then a
// single global atomicAdd per workgroup, so the global counter sees at most one atomic
// per 256 words. The counter must be zeroed before the dispatch.
//
// Dispatch: ceil(words / 256) workgroups, split over x and y when they exceed the
// per-dimension limit; `groups_x` is the x size of that grid.

struct FbParams {
    words: u32,     // words of the bitset
    capacity: u32,  // pairs that fit in fb_list.pairs
    groups_x: u32,  // workgroups along x of the dispatch
    _pad: u32,
}

struct FbList {
    count: atomic<u32>, // non-zero words found (may exceed capacity)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    pairs: array<vec2<u32>>, // (word index, word bits)
}

@group(0) @binding(0) var<uniform> fb_params: FbParams;
@group(0) @binding(1) var<storage, read> fb_bitset: array<u32>;
@group(0) @binding(2) var<storage, read_write> fb_list: FbList;

var<workgroup> fb_group_count: atomic<u32>;
var<workgroup> fb_group_base: u32;

@compute @workgroup_size(256)
fn compact(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let i = (group.y * fb_params.groups_x + group.x) * 256u + local;
    var bits = 0u;
    if i < fb_params.words {
        bits = fb_bitset[i];
    }
    var rank = 0u;
    if bits != 0u {
        rank = atomicAdd(&fb_group_count, 1u);
    }
    workgroupBarrier();
    if local == 0u {
        fb_group_base = atomicAdd(&fb_list.count, atomicLoad(&fb_group_count));
    }
    let base = workgroupUniformLoad(&fb_group_base);
    let slot = base + rank;
    if bits != 0u && slot < fb_params.capacity {
        fb_list.pairs[slot] = vec2<u32>(i, bits);
    }
}
