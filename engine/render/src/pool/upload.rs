//! Uploads into the pool: single tiles, batches through the staging belt, and a frame's
//! mix of staged and belt tiles, merged into one copy per run of vertically adjacent slots.

use super::*;

/// Batches at least this large are copied into staging memory by several threads.
pub(super) const PARALLEL_COPY_TILES: usize = 32;

/// Copies `tiles` into `dst`, tile `i` at `i × stride`, each tile's rows of
/// `rows.0` bytes at a pitch of `rows.1` bytes (`rows.1 ≥ rows.0`) after `margin` rows
/// of zeros, and `margin` rows of zeros after them ([`TilePool::margin_rows`]); the
/// padding is left as it is. Large batches are split over rayon's threads, each writing
/// its own tiles.
pub(super) fn write_padded(
    mut dst: wgpu::WriteOnly<'_, [u8]>,
    tiles: &[&[u8]],
    stride: usize,
    rows: (usize, usize),
    margin: usize,
) {
    let (row_len, pitch) = rows;
    let fits = tiles.iter().all(|t| {
        let n = t.len() / row_len.max(1);
        t.len() % row_len.max(1) == 0
            && (n + 2 * margin == 0 || (n + 2 * margin - 1) * pitch + row_len <= stride)
    }) && tiles.len() * stride <= dst.len();
    if !fits || row_len == 0 {
        tracing::warn!("tile staging skipped: tiles do not fit their staging range");
        return;
    }
    if margin > 0 {
        let zeros = vec![0u8; row_len];
        for (i, tile) in tiles.iter().enumerate() {
            let n = tile.len() / row_len;
            for r in (0..margin).chain(margin + n..n + 2 * margin) {
                let at = i * stride + r * pitch;
                dst.slice(at..at + row_len).copy_from_slice(&zeros);
            }
        }
    }
    let first_row = margin * pitch;
    if tiles.len() < PARALLEL_COPY_TILES {
        for (i, tile) in tiles.iter().enumerate() {
            for (r, row) in tile.chunks_exact(row_len).enumerate() {
                let at = i * stride + first_row + r * pitch;
                dst.slice(at..at + row_len).copy_from_slice(row);
            }
        }
        return;
    }
    /// The staging memory's address, handed to the copying threads.
    #[derive(Clone, Copy)]
    struct Staging(*mut u8);
    // SAFETY: the pointer is only used below, by threads that each write a disjoint
    // range inside the mapped view, all joined before `dst` goes out of scope.
    unsafe impl Send for Staging {}
    unsafe impl Sync for Staging {}
    let base = Staging(dst.as_raw_element_ptr().as_ptr());
    rayon::scope(|scope| {
        for (chunk_index, chunk) in
            tiles.chunks(tiles.len().div_ceil(rayon::current_num_threads())).enumerate()
        {
            let first = chunk_index * tiles.len().div_ceil(rayon::current_num_threads());
            scope.spawn(move |_| {
                let base = base;
                for (k, tile) in chunk.iter().enumerate() {
                    for (r, row) in tile.chunks_exact(row_len).enumerate() {
                        let at = (first + k) * stride + first_row + r * pitch;
                        // SAFETY: `fits` checked above that every row lies inside `dst`
                        // (at + row_len ≤ tiles.len() × stride ≤ dst.len()); tiles are
                        // disjoint ranges, so no two threads write the same byte; the
                        // mapping outlives the scope, which joins every thread; writes
                        // only, as write-combined memory wants.
                        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), base.0.add(at), row_len) };
                    }
                }
            });
        }
    });
}

/// Stages `group`'s tiles in `belt`, tile `i` at `i × stride` ([`write_padded`]: rows of
/// `rows.0` bytes at a pitch of `rows.1` bytes, `rows.2` rows of zeros above and below),
/// and returns the staging range with the tiles as laid out in it (offsets from its
/// start). `None`, with a warning that `what` was skipped, where it could not be mapped.
fn stage_in_belt<'b>(
    belt: &'b mut wgpu::util::StagingBelt,
    group: &[(SlotCoord, &[u8])],
    stride: u64,
    rows: (usize, usize, usize),
    what: &str,
) -> Option<(wgpu::BufferSlice<'b>, Vec<TileCopy>)> {
    let size = wgpu::BufferSize::new(stride * group.len() as u64)?;
    let align = wgpu::BufferSize::new(u64::from(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT)).unwrap_or(size);
    let staged = belt.allocate(size, align);
    match staged.get_mapped_range_mut() {
        Ok(mut view) => {
            let tiles: Vec<&[u8]> = group.iter().map(|(_, t)| *t).collect();
            write_padded(view.slice(..), &tiles, stride as usize, (rows.0, rows.1), rows.2);
        }
        Err(e) => {
            tracing::warn!("{} {what} skipped: staging not mapped: {e}", group.len());
            return None;
        }
    }
    let laid = group
        .iter()
        .enumerate()
        .map(|(i, (slot, _))| TileCopy { slot: *slot, source: 0, offset: i as u64 * stride })
        .collect();
    Some((staged, laid))
}

impl TilePool {
    /// The texture region of `slot`, `above` texel rows above its tile.
    pub(super) fn slot_region(&self, slot: SlotCoord, above: u32) -> wgpu::TexelCopyTextureInfo<'_> {
        let (p, m) = (self.pitch(), self.margin);
        wgpu::TexelCopyTextureInfo {
            texture: &self.texture,
            mip_level: 0,
            origin: wgpu::Origin3d {
                x: u32::from(slot.x) * p + m,
                y: u32::from(slot.y) * p + m - above,
                z: 0,
            },
            aspect: wgpu::TextureAspect::All,
        }
    }

    /// Texel rows in one row of the format: 4 for 4×4 blocks, else 1.
    fn block_rows(&self) -> u32 {
        if self.target.is_block_compressed() { 4 } else { 1 }
    }

    /// Rows of zeros a batch upload writes above a tile and below it (rows of 4×4
    /// blocks in a block format): the slot's margin, so that the copies of tiles bound
    /// for slots one below the other are one copy, margins and all. 0 without a margin
    /// (or with one that is not whole rows, which then copies tile by tile).
    pub fn margin_rows(&self) -> u32 {
        if self.margin.is_multiple_of(self.block_rows()) { self.margin / self.block_rows() } else { 0 }
    }

    /// A tile as staging memory lays it out for this pool: bytes of a row, the tile's
    /// rows and the margin rows above and below them
    /// ([`tessera_core::stream::staging::StagingLayout::with_margins`]).
    pub fn staged_rows(&self) -> (u32, u32, u32) {
        let (row_bytes, rows) = self.tile_rows();
        (row_bytes, rows, self.margin_rows())
    }

    /// Copies one tile in the pool's format (`target().bytes_per_tile(slot_texels)` bytes) into `slot`.
    /// For many tiles, [`TilePool::upload_batch`] is much faster.
    pub fn upload(&self, queue: &wgpu::Queue, slot: SlotCoord, texels: &[u8]) {
        let s = self.slot_texels;
        let (bytes_per_row, rows) = self.tile_rows();
        queue.write_texture(
            self.slot_region(slot, 0),
            texels,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(bytes_per_row),
                rows_per_image: Some(rows),
            },
            wgpu::Extent3d { width: s, height: s, depth_or_array_layers: 1 },
        );
    }

    /// Copies many tiles (each `slot_bytes()` bytes in the pool's format) into their
    /// slots with one submission: every tile is written into staging memory (rows padded
    /// to [`wgpu::COPY_BYTES_PER_ROW_ALIGNMENT`]; block formats: rows of 4×4 blocks)
    /// sub-allocated from a few large, persistently re-mapped buffers, then one command
    /// encoder with one `copy_buffer_to_texture` per tile is submitted before returning
    /// (so before the caller's frame).
    ///
    /// One `write_texture` per tile costs a fixed overhead per call, which caps
    /// streaming at tens of thousands of tiles per second; this costs one submission per
    /// batch. The staging buffers come back for reuse once the GPU is done with them
    /// and the device is polled (as every frame's feedback poll does).
    ///
    /// Items of the wrong length or outside the slot grid are skipped with a warning.
    /// A slot named twice ends with the later tile, as with [`TilePool::upload`].
    pub fn upload_batch(&self, device: &wgpu::Device, queue: &wgpu::Queue, items: &[(SlotCoord, &[u8])]) {
        self.upload_mixed(device, queue, items, &[]);
    }

    /// [`TilePool::upload_batch`] for `items`, plus `staged` tiles that a loader
    /// thread already wrote into staging memory (each copied straight from its buffer),
    /// in one submission with one level-1 pass over every slot written. Returns the
    /// copy commands recorded: one per run of tiles bound for slots one below the
    /// other whose bytes follow each other (in `staged` as given, and in `items`).
    pub fn upload_mixed(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        items: &[(SlotCoord, &[u8])],
        staged: &[StagedCopy<'_>],
    ) -> usize {
        self.upload_frame(device, queue, items, staged, None)
    }

    /// [`TilePool::upload_mixed`], then the level-1 copies of `level_ones` (each slot's
    /// parent quadrant or its own downsample, [`tessera_core::stream::level_one`]),
    /// instead of a downsample of every slot written (`None`). A pool without a level 1
    /// ignores them. Returns the copy commands recorded, level 0's and level 1's.
    pub fn upload_frame(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        items: &[(SlotCoord, &[u8])],
        staged: &[StagedCopy<'_>],
        level_ones: Option<LevelOnes<'_>>,
    ) -> usize {
        let want = self.tile_bytes() as usize;
        let (row_bytes, rows, margin) = self.staged_rows();
        let copy_rows = rows + 2 * margin;
        let padded_row = row_bytes.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let stride = u64::from(padded_row) * u64::from(copy_rows);
        let valid: Vec<(SlotCoord, &[u8])> = items
            .iter()
            .filter(|(slot, texels)| {
                let ok = texels.len() == want
                    && u32::from(slot.x) < self.slots_x
                    && u32::from(slot.y) < self.slots_y;
                if !ok {
                    tracing::warn!(
                        "tile upload to slot ({}, {}) skipped: {} bytes, expected {want} inside {}×{} slots",
                        slot.x,
                        slot.y,
                        texels.len(),
                        self.slots_x,
                        self.slots_y
                    );
                }
                ok
            })
            .copied()
            .collect();
        let mut belt = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        let mut encoder = device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera tile uploads") });
        let mut copied: Vec<[u32; 2]> = Vec::with_capacity(valid.len() + staged.len());
        let mut commands = 0;
        let staged: Vec<&StagedCopy<'_>> = staged
            .iter()
            .filter(|c| {
                let ok = u32::from(c.slot.x) < self.slots_x
                    && u32::from(c.slot.y) < self.slots_y
                    && c.pitch >= row_bytes
                    && c.pitch.is_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
                if !ok {
                    tracing::warn!(slot = ?c.slot, pitch = c.pitch, "staged tile copy skipped: outside the pool or misaligned");
                }
                ok
            })
            .collect();
        // Staged copies of one pitch (every pool's part has one) in runs: a record that
        // starts where the previous one's rows (margins included) end, bound for the
        // slot below it.
        let tiles: Vec<TileCopy> = staged
            .iter()
            .map(|c| TileCopy {
                slot: c.slot,
                source: std::ptr::from_ref(c.buffer) as usize,
                offset: c.offset,
            })
            .collect();
        let span = staged.first().map_or(0, |c| u64::from(c.pitch) * u64::from(copy_rows));
        let uniform = staged.iter().all(|c| u64::from(c.pitch) * u64::from(copy_rows) == span);
        for run in self.runs(&tiles, if uniform { span } else { 0 }) {
            let first = staged[run.start];
            self.copy_run(
                &mut encoder,
                first.buffer,
                first.offset,
                first.pitch,
                first.slot,
                run.len() as u32,
            );
            commands += 1;
            copied.extend(staged[run].iter().map(|c| [u32::from(c.slot.x), u32::from(c.slot.y)]));
        }
        // One staging range (and one mapping) per group of tiles instead of one per
        // tile: each mapping is tracked and checked against the buffer's others.
        let per_group = (STAGING_GROUP_BYTES / stride).max(1) as usize;
        for group in valid.chunks(per_group) {
            let layout = (row_bytes as usize, padded_row as usize, margin as usize);
            let Some((staged, laid)) = stage_in_belt(&mut belt, group, stride, layout, "tile uploads") else {
                continue;
            };
            for run in self.runs(&laid, stride) {
                let offset = staged.offset() + laid[run.start].offset;
                self.copy_run(
                    &mut encoder,
                    staged.buffer(),
                    offset,
                    padded_row,
                    laid[run.start].slot,
                    run.len() as u32,
                );
                commands += 1;
            }
            copied.extend(group.iter().map(|(slot, _)| [u32::from(slot.x), u32::from(slot.y)]));
        }
        let (jobs, level_copies) = self.slot_mip_jobs(&mut encoder, &mut belt, &copied, level_ones);
        commands += level_copies;
        belt.finish();
        match &self.slot_mips {
            Some(SlotMips::Rendered(mips)) => mips.record(device, queue, &mut encoder, &jobs),
            Some(SlotMips::Encoded(mips)) => mips.record(device, &mut encoder, &self.texture, &jobs),
            None => {}
        }
        if !copied.is_empty() || !jobs.is_empty() || level_copies > 0 {
            queue.submit([encoder.finish()]);
        }
        belt.recall();
        commands
    }

    /// The level-1 work after a batch that wrote `copied`: with `level_ones`, each
    /// slot whose parent is resident gets the parent's quadrant, copied texel for texel
    /// into `encoder` where the format allows the copy (any offset for RGBA8, whole
    /// blocks for block formats: pools with a margin), else made by the level-1 pass
    /// from it (returned, with the number of copies recorded); the other slots, or
    /// every slot written without `level_ones`, are downsampled by that pass. A block
    /// pool's quadrants whose parent bytes the CPU holds are cut from them and staged in
    /// `belt` instead, runs of slots one below the other in one copy (counted with the
    /// others). Nothing for a pool without level 1.
    fn slot_mip_jobs(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        belt: &mut wgpu::util::StagingBelt,
        copied: &[[u32; 2]],
        level_ones: Option<LevelOnes<'_>>,
    ) -> (Vec<SlotMipJob>, usize) {
        if self.slot_mips.is_none() {
            return (Vec::new(), 0);
        }
        let pitch = self.pitch();
        let Some(LevelOnes { jobs: ones, border, parents }) = level_ones else {
            return (copied.iter().map(|&slot| SlotMipJob::downsample(slot, pitch)).collect(), 0);
        };
        // Per-tile copies (to compare) copy every quadrant on the GPU, as before.
        let parents = parents.filter(|_| self.merged_copies);
        let mut copies = 0;
        let mut cut: Vec<(SlotCoord, Vec<u8>)> = Vec::new();
        let unit = (self.block_rows(), self.target.bytes_per_block() as u32);
        // The quadrant behind level 1 of `j` (at level-0 texel `src`), cut from the
        // parent's bytes where the CPU holds them.
        let cut_from_parent = |j: &LevelOne, src: [u32; 2]| -> Option<Vec<u8>> {
            let (bytes_of, offset) = parents?;
            let LevelOneSource::Parent { tile, slot, .. } = j.source else { return None };
            let bytes = bytes_of(tile)?;
            let part = bytes.get(offset..offset + self.tile_bytes() as usize)?;
            let corner = |s: u16| u32::from(s) * pitch + self.margin;
            let at = [src[0].checked_sub(corner(slot.x))?, src[1].checked_sub(corner(slot.y))?];
            cut_region(part, self.tile_rows(), unit, at, pitch / 2)
        };
        let inside = |c: SlotCoord| u32::from(c.x) < self.slots_x && u32::from(c.y) < self.slots_y;
        let half = pitch / 2;
        let mut jobs = Vec::new();
        for j in ones.iter().filter(|j| inside(j.slot)) {
            let dst = [u32::from(j.slot.x), u32::from(j.slot.y)];
            let parent = match j.source {
                LevelOneSource::Parent { slot, .. }
                    if inside(slot) && (self.margin + border).is_multiple_of(2) =>
                {
                    Some(j.source_texels(pitch, self.margin, border).0)
                }
                _ => None,
            };
            match parent {
                // Block pools copy whole blocks; uncompressed ones draw their copies
                // all at once ([`RenderedMips`]).
                Some(src)
                    if self.target.is_block_compressed()
                        && src[0].is_multiple_of(4)
                        && src[1].is_multiple_of(4) =>
                {
                    if let Some(rows) = cut_from_parent(j, src) {
                        cut.push((j.slot, rows));
                        continue;
                    }
                    encoder.copy_texture_to_texture(
                        wgpu::TexelCopyTextureInfo {
                            texture: &self.texture,
                            mip_level: 0,
                            origin: wgpu::Origin3d { x: src[0], y: src[1], z: 0 },
                            aspect: wgpu::TextureAspect::All,
                        },
                        wgpu::TexelCopyTextureInfo {
                            texture: &self.texture,
                            mip_level: 1,
                            origin: wgpu::Origin3d { x: dst[0] * half, y: dst[1] * half, z: 0 },
                            aspect: wgpu::TextureAspect::All,
                        },
                        wgpu::Extent3d { width: half, height: half, depth_or_array_layers: 1 },
                    );
                    copies += 1;
                }
                Some(src) => jobs.push(SlotMipJob { dst, src, step: 1, _pad: 0 }),
                None => jobs.push(SlotMipJob::downsample(dst, pitch)),
            }
        }
        copies += self.copy_level_one_rows(encoder, belt, &mut cut);
        (jobs, copies)
    }

    /// Stages level 1 of each slot of `cut` (its rows of `pitch / 2` texels, cut on the
    /// CPU) and records its copies: runs of slots one below the other, in one copy each.
    /// Returns the copies recorded.
    fn copy_level_one_rows(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        belt: &mut wgpu::util::StagingBelt,
        cut: &mut [(SlotCoord, Vec<u8>)],
    ) -> usize {
        let Some(first) = cut.first() else { return 0 };
        let half = self.pitch() / 2;
        let rows = half / self.block_rows();
        let row_bytes = first.1.len() as u32 / rows.max(1);
        let pitch = row_bytes.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let stride = u64::from(pitch) * u64::from(rows);
        // Down the columns, so that slots one below the other follow each other.
        cut.sort_unstable_by_key(|(slot, _)| (slot.x, slot.y));
        let mut commands = 0;
        let per_group = (STAGING_GROUP_BYTES / stride.max(1)).max(1) as usize;
        let cut: Vec<(SlotCoord, &[u8])> = cut.iter().map(|(slot, rows)| (*slot, rows.as_slice())).collect();
        for group in cut.chunks(per_group) {
            let layout = (row_bytes as usize, pitch as usize, 0);
            let Some((staged, laid)) = stage_in_belt(belt, group, stride, layout, "level-1 copies") else {
                continue;
            };
            for run in vertical_runs(&laid, stride) {
                let (slot, count) = (laid[run.start].slot, run.len() as u32);
                encoder.copy_buffer_to_texture(
                    wgpu::TexelCopyBufferInfo {
                        buffer: staged.buffer(),
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: staged.offset() + laid[run.start].offset,
                            bytes_per_row: Some(pitch),
                            rows_per_image: Some(rows * count),
                        },
                    },
                    wgpu::TexelCopyTextureInfo {
                        texture: &self.texture,
                        mip_level: 1,
                        origin: wgpu::Origin3d {
                            x: u32::from(slot.x) * half,
                            y: u32::from(slot.y) * half,
                            z: 0,
                        },
                        aspect: wgpu::TextureAspect::All,
                    },
                    wgpu::Extent3d { width: half, height: half * count, depth_or_array_layers: 1 },
                );
                commands += 1;
            }
        }
        commands
    }

    /// The copies that move `tiles` (laid out `span` bytes apart where contiguous):
    /// runs one below the other merged ([`TilePool::set_merged_copies`]), else one each.
    pub(super) fn runs(&self, tiles: &[TileCopy], span: u64) -> Vec<Range<usize>> {
        // A slot's tile follows the one above it only with the margin between them
        // staged too: else one copy each.
        if self.merged_copies && self.margin_rows() * self.block_rows() == self.margin {
            vertical_runs(tiles, span)
        } else {
            (0..tiles.len()).map(|i| i..i + 1).collect()
        }
    }

    /// Records one copy of `count` tiles, one below the other from `slot` down, whose
    /// rows (each tile's margin rows above and below its own, [`TilePool::margin_rows`])
    /// follow each other at `pitch` from `offset` in `buffer`.
    pub(super) fn copy_run(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        buffer: &wgpu::Buffer,
        offset: u64,
        pitch: u32,
        slot: SlotCoord,
        count: u32,
    ) {
        let s = self.slot_texels;
        let (_, rows, margin) = self.staged_rows();
        let above = margin * self.block_rows();
        encoder.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset,
                    bytes_per_row: Some(pitch),
                    rows_per_image: Some((rows + 2 * margin) * count),
                },
            },
            self.slot_region(slot, above),
            wgpu::Extent3d { width: s, height: (s + 2 * above) * count, depth_or_array_layers: 1 },
        );
    }

    /// Whether uploads copy runs of tiles bound for slots one below the other (whose
    /// bytes follow each other in staging memory) with one copy each, and a block
    /// pool's level 1 cut from the parents' bytes likewise (the default), or every tile
    /// with its own copy and every quadrant copied on the GPU (to compare).
    pub fn set_merged_copies(&mut self, merged: bool) {
        self.merged_copies = merged;
    }
}
