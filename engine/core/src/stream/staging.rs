//! Staging memory that loader threads write GPU-ready tiles into, so the render thread
//! only records copies.
//!
//! A [`StagingRing`] is a fixed set of equal chunks of memory the renderer provides
//! (persistently mapped, host-visible GPU buffers in `tessera`; plain vectors in tests).
//! A loader thread that has a tile's bytes reserves one record in an open chunk,
//! writes the tile there in the layout a buffer-to-texture copy reads (each part's rows
//! at a pitch aligned for the copy, see [`StagingLayout`]) and gets a [`StagedTile`].
//! The render thread seals a chunk before copying from it ([`StagingRing::seal`]): no
//! record is handed out there any more, the writers still inside it are waited for,
//! and the renderer unmaps it. A chunk is mapped again ([`StagingRing::take_remappable`],
//! then [`StagingRing::attach`]) only once every tile staged in it is released: a
//! `StagedTile` is released when its last clone is dropped, which the renderer does
//! after the GPU copy that reads it has completed, and which happens at once for a tile
//! that is cancelled, fails its checks or is no longer needed. So a record is never
//! written while a copy may still read it, and a cancelled or failed load gives its
//! staging back.
//!
//! An open chunk whose tiles were all released before it was ever sealed starts over
//! without a round trip through the GPU. When no open chunk has room the ring says so
//! (`stage` returns `None`, counted in [`StagingCounters::exhausted`]) and the tile
//! goes the old way: the render thread copies it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Where one part of a tile (the share of one pool of a stack) goes in a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedPart {
    /// Offset of the part in the tile's bytes.
    pub src_offset: usize,
    /// Bytes of one row (a row of 4×4 blocks in a block format).
    pub row_bytes: u32,
    /// Rows of the part.
    pub rows: u32,
    /// Offset of the part's first row in the record: its first margin row where it
    /// has a margin ([`StagedPart::margin_rows`]), which is where its copy starts.
    pub record_offset: u64,
    /// Distance between rows in the record: `row_bytes` rounded up to the alignment.
    pub pitch: u32,
    /// Rows of zeros above the tile's rows and below them, in the record: the margin
    /// of a pool whose slots leave one around each tile, written with the tile so
    /// that tiles bound for slots one below the other copy in one command.
    pub margin_rows: u32,
}

impl StagedPart {
    /// Offset in the record of the tile's row `r`.
    pub fn row_offset(&self, r: u32) -> u64 {
        self.record_offset + u64::from(self.margin_rows + r) * u64::from(self.pitch)
    }

    /// Rows a copy of the part moves: the tile's and its margin rows.
    pub fn copy_rows(&self) -> u32 {
        self.rows + 2 * self.margin_rows
    }
}

/// How a tile's bytes (its parts one after the other, each `rows × row_bytes`) are laid
/// out in a staging record: each part's rows at a pitch that is a multiple of the copy
/// alignment, each part starting at a multiple of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagingLayout {
    parts: Vec<StagedPart>,
    tile_bytes: usize,
    record_bytes: u64,
}

impl StagingLayout {
    /// The layout of tiles made of `parts` (`(row_bytes, rows)` each, in order) with
    /// rows and parts aligned to `align` bytes (256 for wgpu's buffer-to-texture
    /// copies); `align` 0 is taken as 1.
    pub fn new(parts: &[(u32, u32)], align: u32) -> Self {
        let parts: Vec<(u32, u32, u32)> =
            parts.iter().map(|&(row_bytes, rows)| (row_bytes, rows, 0)).collect();
        Self::with_margins(&parts, align)
    }

    /// [`StagingLayout::new`] for parts `(row_bytes, rows, margin_rows)`: each part's
    /// tile rows with `margin_rows` rows of zeros above and below them.
    pub fn with_margins(parts: &[(u32, u32, u32)], align: u32) -> Self {
        let align = align.max(1);
        let (mut src, mut dst) = (0usize, 0u64);
        let parts = parts
            .iter()
            .map(|&(row_bytes, rows, margin_rows)| {
                let pitch = row_bytes.next_multiple_of(align);
                let part =
                    StagedPart { src_offset: src, row_bytes, rows, record_offset: dst, pitch, margin_rows };
                src += row_bytes as usize * rows as usize;
                dst =
                    (dst + u64::from(pitch) * u64::from(part.copy_rows())).next_multiple_of(u64::from(align));
                part
            })
            .collect();
        Self { parts, tile_bytes: src, record_bytes: dst.max(u64::from(align)) }
    }

    /// The parts, in the order of the tile's bytes.
    pub fn parts(&self) -> &[StagedPart] {
        &self.parts
    }

    /// Bytes of a tile as loaded (the parts' unpadded sizes summed).
    pub fn tile_bytes(&self) -> usize {
        self.tile_bytes
    }

    /// Bytes of one staging record.
    pub fn record_bytes(&self) -> u64 {
        self.record_bytes
    }

    /// Writes `tile` (exactly [`StagingLayout::tile_bytes`] long) into the record at
    /// `dst`, and zeros into each part's margin rows.
    ///
    /// # Safety
    /// `dst` must be valid for writes of [`StagingLayout::record_bytes`] bytes, and no
    /// other thread may read or write that range meanwhile.
    unsafe fn write(&self, tile: &[u8], dst: *mut u8) {
        for p in &self.parts {
            let (row, pitch) = (p.row_bytes as usize, p.pitch as usize);
            let src = &tile[p.src_offset..p.src_offset + row * p.rows as usize];
            let margin = p.margin_rows as usize;
            for r in (0..margin).chain(margin + p.rows as usize..p.copy_rows() as usize) {
                // SAFETY: the margin rows lie inside the part's copy_rows × pitch bytes
                // from record_offset, inside record_bytes.
                unsafe { std::ptr::write_bytes(dst.add(p.record_offset as usize + r * pitch), 0, row) };
            }
            for (r, bytes) in src.chunks_exact(row.max(1)).enumerate() {
                let at = p.row_offset(r as u32) as usize;
                // SAFETY: at + row ≤ record_offset + copy_rows × pitch ≤ record_bytes,
                // which the caller guarantees writable and unshared.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.add(at), row) };
            }
        }
    }
}

/// What a chunk of the ring is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkState {
    /// No memory yet: waiting for [`StagingRing::attach`].
    Detached,
    /// Mapped: loader threads reserve records in it.
    Open,
    /// Being sealed: no new records; the render thread waits for the writers inside.
    Sealing,
    /// Unmapped: the GPU may copy from it; mapped again once every tile in it is released.
    Unmapped,
    /// Handed to the renderer by [`StagingRing::take_remappable`] to be mapped again.
    Remapping,
}

/// The base address of a chunk's memory while it is mapped.
#[derive(Clone, Copy, Debug)]
struct Base(*mut u8);

// SAFETY: the address is only dereferenced by `StagingRing::stage`, inside a record
// reserved under the ring's lock for that one writer, while the chunk is mapped (the
// renderer unmaps only after `seal`, which waits for every writer to leave).
unsafe impl Send for Base {}

/// One chunk's bookkeeping.
#[derive(Debug)]
struct Chunk {
    state: ChunkState,
    base: Option<Base>,
    /// The next free record.
    next: u32,
    /// Writers between reserving a record and finishing it.
    writers: u32,
    /// Staged tiles not yet released.
    live: u32,
    /// Times the chunk was attached (for the model test).
    generation: u64,
}

/// Running totals of a [`StagingRing`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingCounters {
    /// Tiles written into staging by loader threads.
    pub staged: u64,
    /// Tiles that found no open chunk with room (the render thread copied them).
    pub exhausted: u64,
    /// Tiles of the wrong length (not staged).
    pub wrong_length: u64,
    /// Chunks sealed for copies.
    pub sealed: u64,
    /// Chunks that started over without a GPU round trip.
    pub recycled: u64,
    /// Times a chunk was given memory ([`StagingRing::attach`]): the chunks at first,
    /// then once per remap.
    pub attached: u64,
}

/// The chunks of staging memory loader threads write tiles into; see the module
/// documentation.
#[derive(Debug)]
pub struct StagingRing {
    layout: StagingLayout,
    chunk_bytes: u64,
    records_per_chunk: u32,
    chunks: Mutex<Vec<Chunk>>,
    /// Set by [`StagingRing::close`]: nothing is attached any more.
    closed: std::sync::atomic::AtomicBool,
    /// Signalled when a chunk's last writer leaves.
    drained: Condvar,
    staged: AtomicU64,
    exhausted: AtomicU64,
    wrong_length: AtomicU64,
    sealed: AtomicU64,
    recycled: AtomicU64,
    attached: AtomicU64,
}

/// What the renderer does after [`StagingRing::seal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seal {
    /// The chunk was mapped: unmap it, then copy from it.
    Unmap,
    /// The chunk is already unmapped: copy from it.
    Ready,
}

impl StagingRing {
    /// A ring of `chunks` chunks of `chunk_bytes` bytes each, all
    /// [`ChunkState::Detached`], for tiles laid out as `layout`. A chunk holds
    /// `chunk_bytes / record_bytes` tiles (at least one: a smaller chunk is grown).
    pub fn new(layout: StagingLayout, chunks: usize, chunk_bytes: u64) -> Arc<Self> {
        let chunk_bytes = chunk_bytes.max(layout.record_bytes());
        let records_per_chunk = u32::try_from(chunk_bytes / layout.record_bytes()).unwrap_or(u32::MAX);
        let chunks = (0..chunks)
            .map(|_| Chunk {
                state: ChunkState::Detached,
                base: None,
                next: 0,
                writers: 0,
                live: 0,
                generation: 0,
            })
            .collect();
        Arc::new(Self {
            layout,
            chunk_bytes,
            records_per_chunk,
            chunks: Mutex::new(chunks),
            closed: std::sync::atomic::AtomicBool::new(false),
            drained: Condvar::new(),
            staged: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            wrong_length: AtomicU64::new(0),
            sealed: AtomicU64::new(0),
            recycled: AtomicU64::new(0),
            attached: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Chunk>> {
        // Every critical section leaves the chunks consistent and cannot panic half-way.
        self.chunks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The layout records are written in.
    pub fn layout(&self) -> &StagingLayout {
        &self.layout
    }

    /// Bytes of one chunk (what the renderer allocates per chunk).
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.lock().len()
    }

    /// Tiles one chunk holds.
    pub fn records_per_chunk(&self) -> u32 {
        self.records_per_chunk
    }

    /// The state of chunk `chunk`, `None` outside the ring.
    pub fn state(&self, chunk: usize) -> Option<ChunkState> {
        self.lock().get(chunk).map(|c| c.state)
    }

    /// Tiles staged in `chunk` and not yet released.
    pub fn live(&self, chunk: usize) -> u32 {
        self.lock().get(chunk).map_or(0, |c| c.live)
    }

    /// Running totals.
    pub fn counters(&self) -> StagingCounters {
        StagingCounters {
            staged: self.staged.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
            wrong_length: self.wrong_length.load(Ordering::Relaxed),
            sealed: self.sealed.load(Ordering::Relaxed),
            recycled: self.recycled.load(Ordering::Relaxed),
            attached: self.attached.load(Ordering::Relaxed),
        }
    }

    /// Gives chunk `chunk` (detached or handed out by [`StagingRing::take_remappable`])
    /// its memory and opens it for records. Returns `false` (and changes nothing) for a
    /// chunk outside the ring or in another state.
    ///
    /// # Safety
    /// `base` must be valid for writes of [`StagingRing::chunk_bytes`] bytes from any
    /// thread until the renderer unmaps it after [`StagingRing::seal`] returned
    /// [`Seal::Unmap`] for this chunk (or drops the ring), and nothing else may access
    /// that memory meanwhile.
    pub unsafe fn attach(&self, chunk: usize, base: *mut u8) -> bool {
        let mut chunks = self.lock();
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let Some(c) = chunks.get_mut(chunk) else { return false };
        if !matches!(c.state, ChunkState::Detached | ChunkState::Remapping) || base.is_null() {
            return false;
        }
        *c = Chunk {
            state: ChunkState::Open,
            base: Some(Base(base)),
            next: 0,
            writers: 0,
            live: 0,
            generation: c.generation + 1,
        };
        self.attached.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Writes `tile` into a free record of an open chunk and returns its handle, or
    /// `None` when the tile has the wrong length or no open chunk has room. Called by
    /// loader threads; the copy happens outside the ring's lock.
    pub fn stage(self: &Arc<Self>, tile: &[u8]) -> Option<StagedTile> {
        if tile.len() != self.layout.tile_bytes() {
            self.wrong_length.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let (chunk, record, base) = {
            let mut chunks = self.lock();
            let mut found = None;
            for (i, c) in chunks.iter_mut().enumerate() {
                if c.state != ChunkState::Open {
                    continue;
                }
                if c.next >= self.records_per_chunk && c.live == 0 && c.writers == 0 {
                    // Every tile staged here was released before any copy: start over.
                    c.next = 0;
                    self.recycled.fetch_add(1, Ordering::Relaxed);
                }
                if c.next < self.records_per_chunk
                    && let Some(base) = c.base
                {
                    found = Some((i, c.next, base));
                    c.next += 1;
                    c.writers += 1;
                    break;
                }
            }
            match found {
                Some(f) => f,
                None => {
                    self.exhausted.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        };
        let offset = u64::from(record) * self.layout.record_bytes();
        // SAFETY: the record [offset, offset + record_bytes) lies inside the chunk
        // (record < records_per_chunk = chunk_bytes / record_bytes), which `attach`'s
        // contract keeps mapped and writable while this writer is counted in `writers`
        // (`seal` waits for it); the record was reserved for this writer alone under the
        // lock, and the chunk is not reused before every tile in it is released.
        unsafe { self.layout.write(tile, base.0.add(offset as usize)) };
        let mut chunks = self.lock();
        let c = &mut chunks[chunk];
        c.writers -= 1;
        c.live += 1;
        if c.writers == 0 {
            self.drained.notify_all();
        }
        drop(chunks);
        self.staged.fetch_add(1, Ordering::Relaxed);
        Some(StagedTile { inner: Arc::new(Staged { ring: Arc::clone(self), chunk, offset }) })
    }

    /// Prepares chunk `chunk` for copies from it: closes it to new records, waits for
    /// the writers inside it, and says whether the renderer must unmap it first. Called
    /// by the render thread for the chunk of a tile it is about to copy.
    pub fn seal(&self, chunk: usize) -> Seal {
        let mut chunks = self.lock();
        let Some(c) = chunks.get_mut(chunk) else { return Seal::Ready };
        if c.state != ChunkState::Open {
            return Seal::Ready;
        }
        c.state = ChunkState::Sealing;
        while chunks[chunk].writers > 0 {
            chunks = self.drained.wait(chunks).unwrap_or_else(|e| e.into_inner());
        }
        let c = &mut chunks[chunk];
        c.state = ChunkState::Unmapped;
        c.base = None;
        self.sealed.fetch_add(1, Ordering::Relaxed);
        Seal::Unmap
    }

    /// The unmapped chunks whose tiles are all released, now
    /// [`ChunkState::Remapping`]: the renderer maps each and calls
    /// [`StagingRing::attach`] when the mapping is ready.
    pub fn take_remappable(&self) -> Vec<usize> {
        let mut chunks = self.lock();
        let mut out = Vec::new();
        for (i, c) in chunks.iter_mut().enumerate() {
            if c.state == ChunkState::Unmapped && c.live == 0 {
                c.state = ChunkState::Remapping;
                out.push(i);
            }
        }
        out
    }

    /// Stops the ring before the renderer frees its memory: every open chunk is sealed
    /// (its writers waited for) and nothing is attached again, so no loader thread
    /// writes staging memory after this returns; later loads are simply not staged.
    pub fn close(&self) {
        let n = {
            let _chunks = self.lock();
            self.closed.store(true, Ordering::Relaxed);
            _chunks.len()
        };
        for chunk in 0..n {
            self.seal(chunk);
        }
    }

    /// A chunk handed out by [`StagingRing::take_remappable`] whose mapping failed:
    /// it stays out of use until attached again.
    pub fn map_failed(&self, chunk: usize) {
        if let Some(c) = self.lock().get_mut(chunk).filter(|c| c.state == ChunkState::Remapping) {
            c.state = ChunkState::Detached;
        }
    }

    /// Times chunk `chunk` was attached.
    pub fn generation(&self, chunk: usize) -> u64 {
        self.lock().get(chunk).map_or(0, |c| c.generation)
    }

    fn release(&self, chunk: usize) {
        let mut chunks = self.lock();
        if let Some(c) = chunks.get_mut(chunk) {
            c.live = c.live.saturating_sub(1);
        }
    }
}

/// A tile written into a [`StagingRing`]: where its record is. Clones share the record,
/// which is released when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct StagedTile {
    inner: Arc<Staged>,
}

#[derive(Debug)]
struct Staged {
    ring: Arc<StagingRing>,
    chunk: usize,
    offset: u64,
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.ring.release(self.chunk);
    }
}

impl StagedTile {
    /// The chunk holding the record.
    pub fn chunk(&self) -> usize {
        self.inner.chunk
    }

    /// Offset of the record in its chunk.
    pub fn offset(&self) -> u64 {
        self.inner.offset
    }

    /// The ring the record belongs to.
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.inner.ring
    }
}

impl PartialEq for StagedTile {
    /// The same record.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for StagedTile {}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn layout_pads_rows_and_parts_to_the_alignment() {
        // An RGBA8 136² part (544-byte rows) and a BC7 one (34 rows of 544 bytes).
        let l = StagingLayout::new(&[(544, 136), (544, 34)], 256);
        assert_eq!(l.tile_bytes(), 544 * 136 + 544 * 34);
        assert_eq!(l.parts()[0].pitch, 768);
        assert_eq!(l.parts()[1].record_offset, 768 * 136);
        assert_eq!(l.parts()[1].src_offset, 544 * 136);
        assert_eq!(l.record_bytes(), 768 * 136 + 768 * 34);
        assert_eq!(StagingLayout::new(&[(16, 1)], 256).record_bytes(), 256);
    }

    #[test]
    fn margin_rows_surround_each_part_with_zeros() {
        // A BC7 136² tile in a 144² slot: one block row above and one below.
        let l = StagingLayout::with_margins(&[(544, 34, 1), (32, 2, 1)], 256);
        let (a, b) = (l.parts()[0], l.parts()[1]);
        assert_eq!((a.copy_rows(), a.row_offset(0), a.row_offset(33)), (36, 768, 768 * 34));
        assert_eq!(b.record_offset, 768 * 36);
        assert_eq!(l.record_bytes(), 768 * 36 + 256 * 4);
        let tile: Vec<u8> = (0..l.tile_bytes()).map(|i| (i % 251) as u8 + 1).collect();
        let mut record = vec![0xAAu8; l.record_bytes() as usize];
        // SAFETY: the record is record_bytes long and only this thread uses it.
        unsafe { l.write(&tile, record.as_mut_ptr()) };
        for p in [a, b] {
            let row = |r: u32| {
                let at = (p.record_offset + u64::from(r) * u64::from(p.pitch)) as usize;
                &record[at..at + p.row_bytes as usize]
            };
            assert!(row(0).iter().chain(row(p.copy_rows() - 1)).all(|&v| v == 0), "margin rows are zeros");
            for r in 0..p.rows {
                let src = p.src_offset + (r * p.row_bytes) as usize;
                assert_eq!(row(r + 1), &tile[src..src + p.row_bytes as usize]);
            }
        }
    }
}
