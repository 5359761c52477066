//! The staging ring against a model of the renderer: records are never reused before
//! the copy that reads them completes, released tiles give their staging back, and
//! loader threads writing concurrently never corrupt a record being copied.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use proptest::prelude::*;
use tessera_core::stream::staging::{ChunkState, Seal, StagedTile, StagingLayout, StagingRing};

/// Memory for the ring's chunks, owned by the "renderer" (stable addresses).
struct Memory {
    chunks: Vec<Box<[u8]>>,
}

impl Memory {
    fn new(ring: &StagingRing) -> Self {
        let n = ring.chunk_count();
        Self { chunks: (0..n).map(|_| vec![0u8; ring.chunk_bytes() as usize].into_boxed_slice()).collect() }
    }

    /// Maps chunk `c` again: its memory is whatever the driver hands back (garbage here).
    fn attach(&mut self, ring: &StagingRing, c: usize) {
        self.chunks[c].fill(0xAA);
        // SAFETY: the box lives as long as `self`, which outlives the ring's writers in
        // every test (they are joined, or the ring is closed, before `self` drops), and
        // it is only read by this thread for chunks that were sealed.
        assert!(unsafe { ring.attach(c, self.chunks[c].as_mut_ptr()) });
    }

    /// The tile as read back from its record with the layout's pitches.
    fn read(&self, ring: &StagingRing, t: &StagedTile) -> Vec<u8> {
        let mem = &self.chunks[t.chunk()];
        let mut out = Vec::new();
        for p in ring.layout().parts() {
            for r in 0..p.rows {
                let at = (t.offset() + p.row_offset(r)) as usize;
                out.extend_from_slice(&mem[at..at + p.row_bytes as usize]);
            }
        }
        out
    }
}

fn tile(layout: &StagingLayout, seed: u32) -> Vec<u8> {
    (0..layout.tile_bytes()).map(|i| (seed as usize * 31 + i * 7 + (i >> 8)) as u8).collect()
}

#[derive(Clone, Debug)]
enum Op {
    /// A loader thread stages a tile.
    Stage(u32),
    /// A waiting tile is cancelled or no longer needed.
    Drop(usize),
    /// The renderer copies a waiting tile (seals its chunk first).
    Upload(usize),
    /// The oldest in-flight copy completes on the GPU.
    Complete,
    /// The renderer maps the chunks that may be mapped again.
    Remap,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u32>().prop_map(Op::Stage),
        1 => any::<usize>().prop_map(Op::Drop),
        3 => any::<usize>().prop_map(Op::Upload),
        2 => Just(Op::Complete),
        1 => Just(Op::Remap),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any interleaving of stages, cancellations, copies, completions and remaps:
    /// every copy reads exactly the tile staged, at submission and at completion; live
    /// records never overlap; a chunk is remapped only with nothing live in it.
    #[test]
    fn records_are_never_reused_before_their_copy_completes(ops in proptest::collection::vec(op(), 1..300)) {
        // Two parts (as a stack of an RGBA8 and a BC7 pool would have, margin rows
        // around the second), small chunks.
        let layout = StagingLayout::with_margins(&[(40, 6, 0), (24, 3, 1)], 64);
        let ring = StagingRing::new(layout.clone(), 3, layout.record_bytes() * 4);
        let mut mem = Memory::new(&ring);
        for c in 0..3 {
            mem.attach(&ring, c);
        }
        let mut waiting: Vec<(u32, StagedTile)> = Vec::new();
        let mut in_flight: VecDeque<(u32, StagedTile)> = VecDeque::new();
        for op in ops {
            match op {
                Op::Stage(seed) => {
                    if let Some(t) = ring.stage(&tile(&layout, seed)) {
                        prop_assert_eq!(ring.state(t.chunk()), Some(ChunkState::Open));
                        waiting.push((seed, t));
                    }
                }
                Op::Drop(i) if !waiting.is_empty() => {
                    waiting.swap_remove(i % waiting.len());
                }
                Op::Upload(i) if !waiting.is_empty() => {
                    let (seed, t) = waiting.swap_remove(i % waiting.len());
                    let seal = ring.seal(t.chunk());
                    prop_assert!(matches!(seal, Seal::Unmap | Seal::Ready));
                    prop_assert_eq!(ring.state(t.chunk()), Some(ChunkState::Unmapped));
                    prop_assert_eq!(mem.read(&ring, &t), tile(&layout, seed), "record changed before its copy");
                    in_flight.push_back((seed, t));
                }
                Op::Complete => {
                    if let Some((seed, t)) = in_flight.pop_front() {
                        prop_assert_eq!(mem.read(&ring, &t), tile(&layout, seed), "record overwritten during its copy");
                    }
                }
                Op::Remap => {
                    for c in ring.take_remappable() {
                        prop_assert_eq!(ring.live(c), 0);
                        prop_assert!(waiting.iter().chain(in_flight.iter()).all(|(_, t)| t.chunk() != c));
                        mem.attach(&ring, c);
                    }
                }
                _ => {}
            }
            let live: Vec<(usize, u64)> =
                waiting.iter().chain(in_flight.iter()).map(|(_, t)| (t.chunk(), t.offset())).collect();
            let unique: HashSet<_> = live.iter().copied().collect();
            prop_assert_eq!(unique.len(), live.len(), "two live tiles share a record");
            for c in 0..3 {
                let held = live.iter().filter(|(chunk, _)| *chunk == c).count() as u32;
                prop_assert_eq!(ring.live(c), held);
            }
        }
        // Every waiting tile is still intact, whatever happened around it.
        for (seed, t) in &waiting {
            prop_assert_eq!(mem.read(&ring, t), tile(&layout, *seed));
        }
    }
}

#[test]
fn cancelled_and_failed_loads_give_their_staging_back() {
    let layout = StagingLayout::new(&[(32, 4)], 32);
    let ring = StagingRing::new(layout.clone(), 1, layout.record_bytes() * 2);
    let mut mem = Memory::new(&ring);
    mem.attach(&ring, 0);
    let a = ring.stage(&tile(&layout, 1)).expect("room for a");
    let b = ring.stage(&tile(&layout, 2)).expect("room for b");
    assert!(ring.stage(&tile(&layout, 3)).is_none(), "the chunk holds two");
    assert_eq!(ring.counters().exhausted, 1);
    // A tile of the wrong length (a failed check) is never staged.
    assert!(ring.stage(&[0u8; 5]).is_none());
    assert_eq!(ring.counters().wrong_length, 1);
    // Both cancelled before any copy: the open chunk starts over without a remap.
    drop((a, b));
    assert_eq!(ring.live(0), 0);
    let c = ring.stage(&tile(&layout, 4)).expect("the chunk was recycled");
    assert_eq!(c.offset(), 0);
    assert_eq!(ring.counters().recycled, 1);
    assert_eq!(ring.generation(0), 1, "no remap was needed");
    // A copied tile pins its chunk until released, then the chunk is remapped.
    assert_eq!(ring.seal(0), Seal::Unmap);
    assert!(ring.take_remappable().is_empty());
    drop(c);
    assert_eq!(ring.take_remappable(), vec![0]);
    mem.attach(&ring, 0);
    assert_eq!(ring.generation(0), 2);
    assert!(ring.stage(&tile(&layout, 5)).is_some());
}

#[test]
fn close_stops_every_writer_and_refuses_memory() {
    let layout = StagingLayout::new(&[(32, 4)], 32);
    let ring = StagingRing::new(layout.clone(), 2, layout.record_bytes() * 2);
    let mut mem = Memory::new(&ring);
    mem.attach(&ring, 0);
    ring.close();
    assert!(ring.stage(&tile(&layout, 1)).is_none());
    assert_eq!(ring.state(0), Some(ChunkState::Unmapped));
    // SAFETY: refused, so the pointer is never used.
    assert!(!unsafe { ring.attach(1, mem.chunks[1].as_mut_ptr()) });
}

/// Loader threads stage while the render thread seals, copies, completes and remaps:
/// every tile read back at "copy" time and at completion is the one staged.
#[test]
fn concurrent_writers_never_corrupt_a_sealed_record() {
    let layout = StagingLayout::new(&[(256, 16), (64, 4)], 64);
    let ring = StagingRing::new(layout.clone(), 4, layout.record_bytes() * 8);
    let mut mem = Memory::new(&ring);
    for c in 0..4 {
        mem.attach(&ring, c);
    }
    let (tx, rx) = crossbeam_channel::unbounded::<(u32, StagedTile)>();
    let per_thread = 3000u32;
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let (ring, tx, layout) = (Arc::clone(&ring), tx.clone(), layout.clone());
            std::thread::spawn(move || {
                let mut staged = 0;
                for i in 0..per_thread {
                    let seed = w * per_thread + i;
                    if let Some(t) = ring.stage(&tile(&layout, seed)) {
                        staged += 1;
                        let _ = tx.send((seed, t));
                    } else {
                        std::thread::yield_now();
                    }
                }
                staged
            })
        })
        .collect();
    drop(tx);
    let mut in_flight: VecDeque<(u32, StagedTile)> = VecDeque::new();
    let mut copied = 0u32;
    for (seed, t) in rx.iter() {
        ring.seal(t.chunk());
        assert_eq!(mem.read(&ring, &t), tile(&layout, seed));
        in_flight.push_back((seed, t));
        // Copies complete two "frames" later.
        while in_flight.len() > 2 {
            let (seed, t) = in_flight.pop_front().expect("non-empty");
            assert_eq!(mem.read(&ring, &t), tile(&layout, seed));
            copied += 1;
        }
        for c in ring.take_remappable() {
            mem.attach(&ring, c);
        }
    }
    let staged: u32 = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    assert_eq!(copied + in_flight.len() as u32, staged);
    assert!(staged > 100, "too few tiles staged ({staged}) to exercise the ring");
}
