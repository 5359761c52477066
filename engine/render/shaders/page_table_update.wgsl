// Rewrites rectangles of the complete page table (tessera_core::stream::complete_table):
// a dispatch for a rebuild's resets (rare), then one for a frame's evictions, then one
// for its insertions. Workgroup z picks
// the job; the workgroups along x stride over the job's rectangle, so a rectangle of any
// size is covered whatever the dispatch's width.

struct Job {
    base: u32,   // index of the mip's tile (0, 0)
    pitch: u32,  // entries per row of the mip
    x0: u32,
    y0: u32,
    w: u32,
    h: u32,
    value: u32,  // evictions: the entry to replace; insertions: the entry to keep if smaller
    swap: u32,   // evictions: what replaces it
}

struct Params {
    first: u32,  // first job of this dispatch
    count: u32,  // jobs of this dispatch
    mode: u32,   // 0: insertions (minimum), 1: evictions (compare, store), 2: resets (store)
    entries: u32, // entries in the table (indices at or past it are skipped)
}

@group(0) @binding(0) var<storage, read_write> table: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read> jobs: array<Job>;
@group(0) @binding(2) var<uniform> params: Params;

const GROUP: u32 = 64u;

@compute @workgroup_size(64)
fn update(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let j = group.z + group.y * 65535u;
    if j >= params.count {
        return;
    }
    let job = jobs[params.first + j];
    let n = job.w * job.h;
    let stride = groups.x * GROUP;
    for (var i = group.x * GROUP + lane; i < n; i = i + stride) {
        let x = job.x0 + i % job.w;
        let y = job.y0 + i / job.w;
        let at = job.base + y * job.pitch + x;
        if at >= params.entries {
            continue;
        }
        if params.mode == 2u {
            atomicStore(&table[at], job.value);
        } else if params.mode == 1u {
            // Only entries naming the evicted tile match, inside its own subtree; no
            // other job of this phase writes there, so load and store do not race.
            if atomicLoad(&table[at]) == job.value {
                atomicStore(&table[at], job.swap);
            }
        } else {
            atomicMin(&table[at], job.value);
        }
    }
}
