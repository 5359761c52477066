//! The page table on the GPU: one storage buffer of `u32` entries indexed like the
//! atlas tile index, mirrored by `tessera_core::stream::page_table` and read by
//! `shaders/vt.wgsl`; the streamer's plan says which ranges to write.

use tessera_core::stream::streamer::PageTableWrite;

/// The page-table buffer.
pub struct PageTableBuffer {
    buffer: wgpu::Buffer,
    entries: usize,
}

impl PageTableBuffer {
    /// A buffer of `entries` entries (at least one), all zero (nothing resident) until
    /// the first writes.
    pub fn new(device: &wgpu::Device, entries: usize) -> Self {
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera page table"),
            size: (entries.max(1) * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Self { buffer, entries }
    }

    /// Queues the plan's writes; ranges past the end are cut off.
    pub fn write(&self, queue: &wgpu::Queue, writes: &[PageTableWrite]) {
        for w in writes {
            let end = (w.first + w.entries.len()).min(self.entries);
            if let Some(data) = w.entries.get(..end.saturating_sub(w.first)).filter(|d| !d.is_empty()) {
                queue.write_buffer(&self.buffer, (w.first * 4) as u64, bytemuck::cast_slice(data));
            }
        }
    }

    /// The buffer, for bind groups.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}
