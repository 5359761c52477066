//! The GPU side of [`StagingRing`]: one persistently mapped, host-visible buffer per
//! chunk. Loader threads write tiles into the mapped memory; the render thread unmaps a
//! chunk before copying from it, keeps the copied tiles alive until the GPU has done
//! the copies, and maps a chunk again once nothing in it is live.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tessera_core::stream::page_table::SlotCoord;
use tessera_core::stream::staging::{Seal, StagedTile, StagingLayout, StagingRing};

use crate::pool::StagedCopy;

/// Default size of the staging memory of one [`crate::VirtualTextures`], MiB.
pub const DEFAULT_STAGING_MIB: u32 = 64;

/// Most staging memory one [`crate::VirtualTextures`] takes, MiB; a larger
/// [`crate::VtConfig::staging_mib`] is clamped to this (and to twice the size of its pools).
pub const MAX_STAGING_MIB: u32 = 2048;

/// Whether a buffer's mapping outlives the view that gave its address, so that loader
/// threads may write into it: on native backends, not in a browser (wasm32), where a
/// mapped view is a copy in the module's memory that goes back to the GPU buffer when
/// the view is dropped. Without it, [`crate::VirtualTextures`] makes no staging memory
/// and the render thread copies tiles into a staging belt itself.
pub const PERSISTENT_MAPPING: bool = cfg!(not(target_arch = "wasm32"));

/// Size of one chunk (one buffer) of staging memory.
pub const STAGING_CHUNK_MIB: u32 = 4;

/// A chunk's mapping: idle, requested, done, failed.
const MAP_IDLE: u8 = 0;
const MAP_PENDING: u8 = 1;
const MAP_DONE: u8 = 2;
const MAP_FAILED: u8 = 3;

/// Staging buffers shared with the loader threads through a [`StagingRing`].
pub struct GpuStaging {
    ring: Arc<StagingRing>,
    buffers: Vec<wgpu::Buffer>,
    /// Per chunk: the state of its `map_async`, set by the callback.
    mapping: Vec<Arc<AtomicU8>>,
    /// Tiles whose copies were submitted, with the flag the queue sets once the GPU
    /// has done that submission's work.
    in_flight: VecDeque<(Arc<AtomicBool>, Vec<StagedTile>)>,
}

impl GpuStaging {
    /// `mib` MiB of staging memory in chunks of [`STAGING_CHUNK_MIB`] (at least one
    /// tile each) for tiles laid out as `layout`, every chunk mapped and open.
    pub fn new(device: &wgpu::Device, layout: StagingLayout, mib: u32) -> Self {
        let chunk_bytes = (u64::from(STAGING_CHUNK_MIB) << 20).max(layout.record_bytes());
        let chunks = ((u64::from(mib) << 20) / chunk_bytes).max(1) as usize;
        let ring = StagingRing::new(layout, chunks, chunk_bytes);
        let chunk_bytes = ring.chunk_bytes();
        let buffers: Vec<wgpu::Buffer> = (0..chunks)
            .map(|_| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tessera tile staging"),
                    size: chunk_bytes,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                })
            })
            .collect();
        let staging = Self {
            ring,
            mapping: (0..chunks).map(|_| Arc::new(AtomicU8::new(MAP_DONE))).collect(),
            buffers,
            in_flight: VecDeque::new(),
        };
        for chunk in 0..chunks {
            staging.attach(chunk);
        }
        staging
    }

    /// The ring the loader threads write into.
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.ring
    }

    /// Total bytes of staging memory.
    pub fn bytes(&self) -> u64 {
        self.buffers.len() as u64 * self.ring.chunk_bytes()
    }

    /// Hands chunk `chunk`'s mapped memory to the ring (never without
    /// [`PERSISTENT_MAPPING`]: the chunk then stays out of use).
    fn attach(&self, chunk: usize) {
        if !PERSISTENT_MAPPING {
            tracing::warn!(
                chunk,
                "staging chunk left unused: mapped memory does not persist on this platform"
            );
            return;
        }
        let buffer = &self.buffers[chunk];
        self.mapping[chunk].store(MAP_IDLE, Ordering::Relaxed);
        match buffer.get_mapped_range_mut(..) {
            Ok(mut view) => {
                let base = view.slice(..).as_raw_element_ptr().as_ptr();
                // The view only tracks the range for wgpu's overlap checks; the mapping
                // itself lasts until `unmap`, which `prepare` calls only after the ring
                // has sealed the chunk (every writer gone, none admitted).
                drop(view);
                // SAFETY: `base` is the start of the whole mapped buffer, `chunk_bytes`
                // long, writable from any thread on native backends until the unmap in
                // `prepare` (after `seal` returned `Unmap`) or the ring is closed in
                // `Drop`, before the buffer goes; nothing else in this crate touches it.
                if !unsafe { self.ring.attach(chunk, base) } {
                    tracing::warn!(chunk, "staging chunk refused by the ring");
                }
            }
            Err(e) => {
                tracing::warn!(chunk, "staging chunk not mapped: {e}");
                self.ring.map_failed(chunk);
            }
        }
    }

    /// Once per frame, after the device was polled: releases the tiles whose copies the
    /// GPU has done, maps again the chunks with nothing live, and hands the chunks whose
    /// mapping completed back to the ring.
    pub fn maintain(&mut self) {
        while self.in_flight.front().is_some_and(|(done, _)| done.load(Ordering::Acquire)) {
            self.in_flight.pop_front();
        }
        for chunk in self.ring.take_remappable() {
            let flag = Arc::clone(&self.mapping[chunk]);
            flag.store(MAP_PENDING, Ordering::Relaxed);
            self.buffers[chunk].map_async(wgpu::MapMode::Write, .., move |r| {
                flag.store(if r.is_ok() { MAP_DONE } else { MAP_FAILED }, Ordering::Release);
            });
        }
        for chunk in 0..self.buffers.len() {
            match self.mapping[chunk].load(Ordering::Acquire) {
                MAP_DONE => self.attach(chunk),
                MAP_FAILED => {
                    self.mapping[chunk].store(MAP_IDLE, Ordering::Relaxed);
                    self.ring.map_failed(chunk);
                }
                _ => {}
            }
        }
    }

    /// Makes chunk `chunk` ready to be copied from: seals it in the ring and unmaps it.
    pub fn prepare(&self, chunk: usize) {
        if self.ring.seal(chunk) == Seal::Unmap {
            self.buffers[chunk].unmap();
        }
    }

    /// Prepares the chunks of `tiles` (each once) and returns the copies of part `part`
    /// (the share of one pool of a stack) of each tile into its slot.
    pub fn copies(&self, part: usize, tiles: &[(SlotCoord, &StagedTile)]) -> Vec<StagedCopy<'_>> {
        let mut chunks: Vec<usize> = tiles.iter().map(|(_, t)| t.chunk()).collect();
        chunks.sort_unstable();
        chunks.dedup();
        for chunk in chunks {
            self.prepare(chunk);
        }
        let Some(p) = self.ring.layout().parts().get(part).copied() else { return Vec::new() };
        tiles
            .iter()
            .map(|&(slot, t)| StagedCopy {
                slot,
                buffer: &self.buffers[t.chunk()],
                offset: t.offset() + p.record_offset,
                pitch: p.pitch,
            })
            .collect()
    }

    /// The buffer of chunk `chunk`.
    pub fn buffer(&self, chunk: usize) -> &wgpu::Buffer {
        &self.buffers[chunk]
    }

    /// Keeps `tiles` (whose copies were just submitted) alive until the GPU has done
    /// the work submitted so far.
    pub fn retire(&mut self, queue: &wgpu::Queue, tiles: Vec<StagedTile>) {
        if tiles.is_empty() {
            return;
        }
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        queue.on_submitted_work_done(move || flag.store(true, Ordering::Release));
        self.in_flight.push_back((done, tiles));
    }

    /// Tiles whose copies are submitted and not known to be done.
    pub fn in_flight(&self) -> usize {
        self.in_flight.iter().map(|(_, t)| t.len()).sum()
    }
}

impl Drop for GpuStaging {
    /// Closes the ring (waiting for the loader threads writing into it) before the
    /// buffers, and the memory they map, go.
    fn drop(&mut self) {
        self.ring.close();
    }
}

impl std::fmt::Debug for GpuStaging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuStaging")
            .field("chunks", &self.buffers.len())
            .field("chunk_bytes", &self.ring.chunk_bytes())
            .field("counters", &self.ring.counters())
            .finish()
    }
}
