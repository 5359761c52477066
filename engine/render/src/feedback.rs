//! GPU feedback: the request bitset the shaders write, a compute pass that compacts it
//! into a short list of its non-zero words, and the ring of staging buffers the list is
//! read back through without ever stalling the frame.
//!
//! Reading back the whole bitset costs one bit per atlas tile every frame (a 256K²
//! atlas: 5.6 M tiles, 700 KB), however few tiles are on screen. Instead, after the
//! frame's passes, `shaders/feedback_compact.wgsl` appends each non-zero word as a
//! `(word index, bits)` pair to a list buffer with a counter, and only the counter and
//! the first `window` pairs are copied to the staging buffer. `window` adapts to the
//! counts seen lately (twice the largest of the last [`HISTORY`] frames, a power of two
//! between [`MIN_WINDOW`] and the list's capacity), so the readback follows the tiles
//! on screen.
//!
//! A frame whose counter exceeds the pairs copied (the GPU list overflowed, or the
//! window was too small) is incomplete: it is still delivered
//! ([`FeedbackFrame::complete`] false), and the next frame reads back the full bitset
//! instead, so no request is lost for more than that. Full readbacks continue while the
//! full bitset has more non-zero words than the list holds. When the full bitset is no
//! larger than the sparse readback (small atlases), the bitset is always copied whole.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use wgpu::util::DeviceExt;

use tessera_core::stream::streamer::SparseFeedback;

use crate::feedback_target::COUNTS_BYTES;
use crate::shaders::FEEDBACK_COMPACT_WGSL;

const FREE: u8 = 0;
const COPIED: u8 = 1;
const MAPPING: u8 = 2;
const MAPPED: u8 = 3;
const FAILED: u8 = 4;

/// Pairs the GPU list holds by default: 8192 × 8 bytes = 64 KiB.
pub const DEFAULT_CAPACITY: u32 = 8192;

/// Smallest number of pairs copied per sparse readback.
pub const MIN_WINDOW: u32 = 256;

/// Pairs copied per sparse readback before any readback has arrived.
pub const INITIAL_WINDOW: u32 = 1024;

/// Frames of non-zero word counts the copy window is sized from.
pub const HISTORY: usize = 32;

/// Bytes before the pairs in the list buffer: the counter and padding.
const HEADER_BYTES: u64 = 16;

/// Invocations per workgroup of the compaction pass (`@workgroup_size` in the shader).
const WORKGROUP: u32 = 256;

/// What a staging buffer of the ring holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    /// The counter and the first `pairs` pairs of the compacted list.
    Sparse { pairs: u32 },
    /// The whole bitset.
    Full,
}

struct Slot {
    buffer: wgpu::Buffer,
    state: Arc<AtomicU8>,
    frame: u64,
    content: Content,
    /// Bytes copied into `buffer` (and mapped).
    bytes: u64,
    /// Where the feedback target's pixel counters were copied, if they were.
    counts_at: Option<u64>,
}

/// The feedback bitset (one bit per tile of the atlas), its compaction pass and its
/// readback ring.
pub struct Feedback {
    bitset: wgpu::Buffer,
    words: usize,
    /// Counter (16-byte header) and `capacity` pairs, written by the compaction pass.
    list: wgpu::Buffer,
    capacity: u32,
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    /// Workgroups of the compaction dispatch along x and y.
    groups: (u32, u32),
    ring: Vec<Slot>,
    skipped: u64,
    /// Pairs copied per sparse readback.
    window: u32,
    /// Non-zero word counts of the latest readbacks, newest last.
    recent: VecDeque<u32>,
    /// The next frame reads back the full bitset (the last one was incomplete).
    want_full: bool,
    /// Bytes of the latest queued readback.
    last_bytes: u64,
    incomplete: u64,
    full_frames: u64,
    total_bytes: u64,
    frames: u64,
}

/// One frame's feedback as read back: the bitset's non-zero words.
#[derive(Clone, Debug)]
pub struct FeedbackFrame {
    /// The frame that recorded it.
    pub frame: u64,
    /// `(word index, word bits)` of the non-zero words of the bitset, by increasing
    /// word index (decode with `FeedbackLayout::decode_sparse`).
    pub sparse: Vec<(u32, u32)>,
    /// False when the compacted list held more words than were read back: `sparse` is
    /// then a subset of the frame's requests (the next frames read back the full bitset).
    pub complete: bool,
    /// With feedback through a colour target: the pixels its resolve read that requested
    /// a tile, and how many of them were shown through a coarser tile than they wanted.
    pub pixels: Option<PixelCounts>,
}

impl From<FeedbackFrame> for SparseFeedback {
    /// What the streamer takes of a read-back frame.
    fn from(f: FeedbackFrame) -> Self {
        SparseFeedback { frame: f.frame, pairs: f.sparse }
    }
}

/// Pixels a frame's feedback-target resolve read (one per feedback block).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PixelCounts {
    /// Pixels that requested a tile.
    pub sampled: u32,
    /// Of those, pixels shown through a coarser tile than the one they wanted.
    pub coarse: u32,
}

impl PixelCounts {
    /// `coarse / sampled` (0 when nothing was sampled).
    pub fn coarse_share(self) -> f64 {
        if self.sampled == 0 { 0.0 } else { f64::from(self.coarse) / f64::from(self.sampled) }
    }
}

impl Feedback {
    /// A bitset of `words` u32 words, its compaction pass with a list of
    /// [`DEFAULT_CAPACITY`] pairs, and a ring of `ring` (at least 2) staging buffers.
    pub fn new(device: &wgpu::Device, words: usize, ring: usize) -> Self {
        Self::with_capacity(device, words, ring, DEFAULT_CAPACITY)
    }

    /// As [`Feedback::new`] with a list of `capacity` pairs (at least 1; more than
    /// `words` is never needed, so it is capped there).
    pub fn with_capacity(device: &wgpu::Device, words: usize, ring: usize, capacity: u32) -> Self {
        let words = words.max(1);
        let word_count = u32::try_from(words).unwrap_or(u32::MAX);
        let capacity = capacity.clamp(1, word_count);
        let bitset_bytes = (words * 4) as u64;
        let list_bytes = HEADER_BYTES + 8 * u64::from(capacity);
        let bitset = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera feedback bitset"),
            size: bitset_bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let list = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera feedback list"),
            size: list_bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let groups = dispatch_grid(word_count, device.limits().max_compute_workgroups_per_dimension);
        let groups_x = groups.0;
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("tessera feedback compaction params"),
            contents: bytemuck::cast_slice(&[word_count, capacity, groups_x, 0u32]),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let (pipeline, bind_group) = compaction_pipeline(device, &params, &bitset, &list);
        // Each staging buffer holds either readback, then (8-byte aligned) the pixel counters.
        let slot_bytes = list_bytes.max(bitset_bytes).next_multiple_of(8) + COUNTS_BYTES;
        let ring = (0..ring.max(2))
            .map(|i| Slot {
                buffer: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(&format!("tessera feedback readback {i}")),
                    size: slot_bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                state: Arc::new(AtomicU8::new(FREE)),
                frame: 0,
                content: Content::Full,
                bytes: 0,
                counts_at: None,
            })
            .collect();
        let mut me = Self {
            bitset,
            words,
            list,
            capacity,
            pipeline,
            bind_group,
            groups,
            ring,
            skipped: 0,
            window: INITIAL_WINDOW.min(capacity),
            recent: VecDeque::with_capacity(HISTORY + 1),
            want_full: false,
            last_bytes: 0,
            incomplete: 0,
            full_frames: 0,
            total_bytes: 0,
            frames: 0,
        };
        me.last_bytes = me.next_readback().1;
        me
    }

    /// The storage buffer the shaders write (binding 2 of the virtual-texture group).
    pub fn bitset(&self) -> &wgpu::Buffer {
        &self.bitset
    }

    /// Words of the bitset.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Pairs the compacted list holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Bytes read back per frame: those of the latest queued readback (the counter and
    /// the pairs of the copy window, or the whole bitset after an incomplete frame or
    /// when the bitset is the smaller of the two), before any frame: the next one's.
    pub fn bytes(&self) -> u64 {
        self.last_bytes
    }

    /// Mean bytes read back per queued readback so far (0 before the first).
    pub fn mean_bytes(&self) -> f64 {
        if self.frames == 0 { 0.0 } else { self.total_bytes as f64 / self.frames as f64 }
    }

    /// Bytes of the whole bitset (what a full readback copies).
    pub fn bitset_bytes(&self) -> u64 {
        (self.words * 4) as u64
    }

    /// Bytes of GPU memory the feedback takes: the bitset, the compacted list and the
    /// readback ring.
    pub fn gpu_bytes(&self) -> u64 {
        self.bitset.size() + self.list.size() + self.ring.iter().map(|s| s.buffer.size()).sum::<u64>()
    }

    /// Frames whose feedback was dropped because every staging buffer was busy.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Frames read back incomplete (more non-zero words than pairs copied).
    pub fn incomplete_frames(&self) -> u64 {
        self.incomplete
    }

    /// Frames whose whole bitset was read back.
    pub fn full_frames(&self) -> u64 {
        self.full_frames
    }

    /// Clears the bitset before the frame's passes.
    pub fn begin(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.clear_buffer(&self.bitset, 0, None);
    }

    /// What the next readback copies and its size in bytes.
    fn next_readback(&self) -> (Content, u64) {
        let sparse = HEADER_BYTES + 8 * u64::from(self.window);
        let full = self.bitset_bytes();
        if self.want_full || full <= sparse {
            (Content::Full, full)
        } else {
            (Content::Sparse { pairs: self.window }, sparse)
        }
    }

    /// After the frame's passes: compacts the bitset and copies the counter and the
    /// pairs of the copy window (or, after an incomplete frame, the whole bitset) into a
    /// free staging buffer, with the feedback target's pixel counters (`counts`, the
    /// first 8 bytes) when given; when every buffer is still in flight, this frame's
    /// feedback is skipped.
    pub fn end(&mut self, encoder: &mut wgpu::CommandEncoder, frame: u64, counts: Option<&wgpu::Buffer>) {
        let (content, bytes) = self.next_readback();
        let Some(slot) = self.ring.iter_mut().find(|s| s.state.load(Ordering::Acquire) == FREE) else {
            self.skipped += 1;
            return;
        };
        match content {
            Content::Full => {
                encoder.copy_buffer_to_buffer(&self.bitset, 0, &slot.buffer, 0, bytes);
                self.want_full = false;
                self.full_frames += 1;
            }
            Content::Sparse { .. } => {
                encoder.clear_buffer(&self.list, 0, Some(HEADER_BYTES));
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("tessera feedback compaction"),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(&self.pipeline);
                    pass.set_bind_group(0, &self.bind_group, &[]);
                    pass.dispatch_workgroups(self.groups.0, self.groups.1, 1);
                }
                encoder.copy_buffer_to_buffer(&self.list, 0, &slot.buffer, 0, bytes);
            }
        }
        let counts_at = counts.map(|c| {
            let at = bytes.next_multiple_of(8);
            encoder.copy_buffer_to_buffer(c, 0, &slot.buffer, at, 8);
            at
        });
        slot.frame = frame;
        slot.content = content;
        slot.bytes = counts_at.map_or(bytes, |at| at + 8);
        slot.counts_at = counts_at;
        slot.state.store(COPIED, Ordering::Release);
        self.last_bytes = bytes;
        self.total_bytes += bytes;
        self.frames += 1;
    }

    /// Starts mapping the buffers copied into by the last submission.
    pub fn after_submit(&mut self) {
        for slot in &mut self.ring {
            if slot.state.load(Ordering::Acquire) == COPIED {
                slot.state.store(MAPPING, Ordering::Release);
                let state = slot.state.clone();
                slot.buffer.map_async(wgpu::MapMode::Read, 0..slot.bytes, move |r| {
                    state.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
                });
            }
        }
    }

    /// Polls `device` (never waits), then [`Feedback::collect`]s.
    pub fn poll(&mut self, device: &wgpu::Device) -> Option<FeedbackFrame> {
        let _ = device.poll(wgpu::PollType::Poll);
        self.collect()
    }

    /// Collects every readback whose mapping completed by the last device poll and
    /// returns the newest. When the newest is incomplete, the pairs of the others that
    /// arrived with it are merged into it (they are requests of the last few frames too).
    pub fn collect(&mut self) -> Option<FeedbackFrame> {
        let mut arrived: Vec<FeedbackFrame> = Vec::new();
        for i in 0..self.ring.len() {
            let slot = &self.ring[i];
            match slot.state.load(Ordering::Acquire) {
                MAPPED => {
                    let read = match slot.buffer.get_mapped_range(0..slot.bytes) {
                        Ok(view) => Some((
                            read_frame(&view, slot.content, self.words),
                            read_counts(&view, slot.counts_at),
                        )),
                        Err(e) => {
                            tracing::warn!("feedback readback could not be read: {e}");
                            None
                        }
                    };
                    slot.buffer.unmap();
                    slot.state.store(FREE, Ordering::Release);
                    let (frame, content) = (slot.frame, slot.content);
                    if let Some(((sparse, found), pixels)) = read {
                        let complete = match content {
                            Content::Sparse { pairs } => found <= pairs,
                            Content::Full => true,
                        };
                        self.note_readback(found, complete, content);
                        arrived.push(FeedbackFrame { frame, sparse, complete, pixels });
                    }
                }
                FAILED => {
                    self.ring[i].state.store(FREE, Ordering::Release);
                }
                _ => {}
            }
        }
        arrived.sort_by_key(|f| f.frame);
        let mut newest = arrived.pop()?;
        if !newest.complete && !arrived.is_empty() {
            for older in &arrived {
                newest.sparse.extend_from_slice(&older.sparse);
            }
            newest.sparse.sort_unstable();
            newest.sparse.dedup_by(|b, a| {
                // Same word: keep one pair with the union of the bits.
                let same = a.0 == b.0;
                if same {
                    a.1 |= b.1;
                }
                same
            });
        }
        Some(newest)
    }

    /// Updates the copy window and the fallback from one arrived readback that found
    /// `found` non-zero words.
    fn note_readback(&mut self, found: u32, complete: bool, content: Content) {
        self.recent.push_back(found);
        while self.recent.len() > HISTORY {
            self.recent.pop_front();
        }
        let peak = self.recent.iter().copied().max().unwrap_or(0);
        self.window =
            peak.saturating_mul(2).next_power_of_two().clamp(MIN_WINDOW.min(self.capacity), self.capacity);
        if !complete {
            self.incomplete += 1;
            self.want_full = true;
        } else if content == Content::Full && found > self.capacity {
            // The list would overflow again: keep reading the whole bitset.
            self.want_full = true;
        }
    }
}

/// The workgroup grid (x, y) that covers `words` words with one invocation each:
/// `ceil(words / 256)` workgroups, along x up to `max_per_dimension`, then over rows.
pub fn dispatch_grid(words: u32, max_per_dimension: u32) -> (u32, u32) {
    let total = words.div_ceil(WORKGROUP).max(1);
    let x = total.min(max_per_dimension.max(1));
    (x, total.div_ceil(x))
}

/// The pixel counters copied at `at` of a mapped readback, if any.
fn read_counts(bytes: &[u8], at: Option<u64>) -> Option<PixelCounts> {
    let at = usize::try_from(at?).ok()?;
    let word = |i: usize| {
        bytes.get(at + 4 * i..at + 4 * i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    Some(PixelCounts { sampled: word(0)?, coarse: word(1)? })
}

/// The non-zero words of a mapped readback, sorted by word index, and the number of
/// non-zero words the frame had (the GPU counter for a sparse readback).
fn read_frame(bytes: &[u8], content: Content, words: usize) -> (Vec<(u32, u32)>, u32) {
    let u32s = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    match content {
        Content::Full => {
            let pairs: Vec<(u32, u32)> =
                u32s.take(words).enumerate().filter(|&(_, w)| w != 0).map(|(i, w)| (i as u32, w)).collect();
            let found = pairs.len() as u32;
            (pairs, found)
        }
        Content::Sparse { pairs } => {
            let mut it = u32s;
            let found = it.next().unwrap_or(0);
            let take = found.min(pairs) as usize;
            // Skip the header's padding; then (index, bits) pairs.
            let rest: Vec<u32> = it.skip(3).take(2 * take).collect();
            let mut out: Vec<(u32, u32)> = rest
                .chunks_exact(2)
                .map(|p| (p[0], p[1]))
                .filter(|&(i, w)| w != 0 && (i as usize) < words)
                .collect();
            out.sort_unstable();
            (out, found)
        }
    }
}

/// The compaction pipeline and its bind group (params, bitset, list).
fn compaction_pipeline(
    device: &wgpu::Device,
    params: &wgpu::Buffer,
    bitset: &wgpu::Buffer,
    list: &wgpu::Buffer,
) -> (wgpu::ComputePipeline, wgpu::BindGroup) {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("tessera feedback compaction"),
        source: wgpu::ShaderSource::Wgsl(FEEDBACK_COMPACT_WGSL.into()),
    });
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    };
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("tessera feedback compaction"),
        entries: &[
            entry(0, wgpu::BufferBindingType::Uniform),
            entry(1, wgpu::BufferBindingType::Storage { read_only: true }),
            entry(2, wgpu::BufferBindingType::Storage { read_only: false }),
        ],
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("tessera feedback compaction"),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("tessera feedback compaction"),
        layout: Some(&layout),
        module: &module,
        entry_point: Some("compact"),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("tessera feedback compaction"),
        layout: &bgl,
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: bitset.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: list.as_entire_binding() },
        ],
    });
    (pipeline, bind_group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_grid_covers_every_word_within_the_limit() {
        assert_eq!(dispatch_grid(0, 65535), (1, 1));
        assert_eq!(dispatch_grid(256, 65535), (1, 1));
        assert_eq!(dispatch_grid(257, 65535), (2, 1));
        assert_eq!(dispatch_grid(65535 * 256, 65535), (65535, 1));
        assert_eq!(dispatch_grid(65535 * 256 + 1, 65535), (65535, 2));
        for (words, max) in [(1_000_000u32, 7u32), (u32::MAX, 65535), (12_345, 1), (999, 0)] {
            let (x, y) = dispatch_grid(words, max);
            assert!(x <= max.max(1) && y >= 1);
            assert!(u64::from(x) * u64::from(y) * 256 >= u64::from(words));
            // No row more than needed.
            assert!((u64::from(x) * u64::from(y - 1)) * 256 < u64::from(words).max(1));
        }
    }

    /// The pixel counters sit where `end` copied them; a readback without them has none.
    #[test]
    fn pixel_counters_are_read_from_their_offset() {
        let mut bytes = vec![0u8; 24];
        bytes[16..20].copy_from_slice(&400u32.to_le_bytes());
        bytes[20..24].copy_from_slice(&100u32.to_le_bytes());
        let counts = read_counts(&bytes, Some(16)).unwrap();
        assert_eq!(counts, PixelCounts { sampled: 400, coarse: 100 });
        assert_eq!(counts.coarse_share(), 0.25);
        assert_eq!(read_counts(&bytes, None), None);
        assert_eq!(read_counts(&bytes, Some(20)), None, "past the mapped bytes");
        assert_eq!(PixelCounts::default().coarse_share(), 0.0);
    }

    #[test]
    fn sparse_readback_parses_counter_and_pairs() {
        let mut bytes = Vec::new();
        for v in [3u32, 0, 0, 0, 9, 0b101, 2, 1, 7, 8, 5, 5] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        // Three found, four copied (the fourth is stale): sorted, the stale one unused.
        let (pairs, found) = read_frame(&bytes, Content::Sparse { pairs: 4 }, 100);
        assert_eq!((pairs, found), (vec![(2, 1), (7, 8), (9, 0b101)], 3));
        // More found than copied: only the copied ones.
        bytes[0] = 9;
        let (pairs, found) = read_frame(&bytes, Content::Sparse { pairs: 2 }, 100);
        assert_eq!((pairs, found), (vec![(2, 1), (9, 0b101)], 9));
        let full: Vec<u8> = [0u32, 4, 0, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(read_frame(&full, Content::Full, 4), (vec![(1, 4), (3, 1)], 2));
    }
}
