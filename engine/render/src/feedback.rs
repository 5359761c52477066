//! GPU feedback: the request bitset the shaders write, and the ring of staging
//! buffers it is read back through without ever stalling the frame.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

const FREE: u8 = 0;
const COPIED: u8 = 1;
const MAPPING: u8 = 2;
const MAPPED: u8 = 3;
const FAILED: u8 = 4;

struct Slot {
    buffer: wgpu::Buffer,
    state: Arc<AtomicU8>,
    frame: u64,
}

/// The feedback bitset (one bit per tile of the atlas) and its readback ring.
pub struct Feedback {
    bitset: wgpu::Buffer,
    words: usize,
    ring: Vec<Slot>,
    skipped: u64,
}

/// One frame's feedback as read back.
#[derive(Clone, Debug)]
pub struct FeedbackFrame {
    /// The frame that recorded it.
    pub frame: u64,
    /// The bitset words.
    pub words: Vec<u32>,
}

impl Feedback {
    /// A bitset of `words` u32 words and a ring of `ring` staging buffers.
    pub fn new(device: &wgpu::Device, words: usize, ring: usize) -> Self {
        let bytes = (words.max(1) * 4) as u64;
        let bitset = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera feedback bitset"),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let ring = (0..ring.max(2))
            .map(|i| Slot {
                buffer: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(&format!("tessera feedback readback {i}")),
                    size: bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                state: Arc::new(AtomicU8::new(FREE)),
                frame: 0,
            })
            .collect();
        Self { bitset, words: words.max(1), ring, skipped: 0 }
    }

    /// The storage buffer the shaders write (binding 2 of the virtual-texture group).
    pub fn bitset(&self) -> &wgpu::Buffer {
        &self.bitset
    }

    /// Bytes read back per frame.
    pub fn bytes(&self) -> u64 {
        (self.words * 4) as u64
    }

    /// Frames whose feedback was dropped because every staging buffer was busy.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Clears the bitset before the frame's passes.
    pub fn begin(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.clear_buffer(&self.bitset, 0, None);
    }

    /// Copies the bitset into a free staging buffer after the frame's passes; when
    /// every buffer is still in flight, this frame's feedback is skipped.
    pub fn end(&mut self, encoder: &mut wgpu::CommandEncoder, frame: u64) {
        let Some(slot) = self.ring.iter_mut().find(|s| s.state.load(Ordering::Acquire) == FREE) else {
            self.skipped += 1;
            return;
        };
        encoder.copy_buffer_to_buffer(&self.bitset, 0, &slot.buffer, 0, None);
        slot.frame = frame;
        slot.state.store(COPIED, Ordering::Release);
    }

    /// Starts mapping the buffers copied into by the last submission.
    pub fn after_submit(&mut self) {
        for slot in &mut self.ring {
            if slot.state.load(Ordering::Acquire) == COPIED {
                slot.state.store(MAPPING, Ordering::Release);
                let state = slot.state.clone();
                slot.buffer.map_async(wgpu::MapMode::Read, .., move |r| {
                    state.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
                });
            }
        }
    }

    /// Collects every readback that has arrived (never waits) and returns the newest.
    pub fn poll(&mut self, device: &wgpu::Device) -> Option<FeedbackFrame> {
        let _ = device.poll(wgpu::PollType::Poll);
        let mut newest: Option<FeedbackFrame> = None;
        for slot in &mut self.ring {
            match slot.state.load(Ordering::Acquire) {
                MAPPED => {
                    let words = match slot.buffer.get_mapped_range(..) {
                        Ok(view) => Some(bytemuck::cast_slice::<u8, u32>(&view).to_vec()),
                        Err(e) => {
                            tracing::warn!("feedback readback could not be read: {e}");
                            None
                        }
                    };
                    slot.buffer.unmap();
                    slot.state.store(FREE, Ordering::Release);
                    if let Some(words) = words
                        && newest.as_ref().is_none_or(|n| n.frame < slot.frame)
                    {
                        newest = Some(FeedbackFrame { frame: slot.frame, words });
                    }
                }
                FAILED => {
                    slot.state.store(FREE, Ordering::Release);
                }
                _ => {}
            }
        }
        newest
    }
}
