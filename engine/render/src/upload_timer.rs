//! The GPU time of each frame's tile uploads (copies and level 1), measured with
//! timestamps written between the upload submissions and read back a few frames
//! later without waiting, for the burst slice
//! ([`tessera_core::stream::upload_slice`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Frames of upload timings in flight at once; a frame that finds every one still
/// pending goes untimed.
const RING: usize = 4;

/// The states of one ring entry.
const FREE: u8 = 0;
const PENDING: u8 = 1;
const MAPPED: u8 = 2;
const FAILED: u8 = 3;

/// One frame's pair of timestamps on its way back.
struct Entry {
    readback: wgpu::Buffer,
    state: Arc<AtomicU8>,
    tiles: usize,
}

/// Timestamps around each frame's uploads and their readbacks; see the module
/// documentation.
pub(crate) struct UploadTimer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    entries: Vec<Entry>,
    /// The entry the frame being recorded uses, between [`UploadTimer::start`] and
    /// [`UploadTimer::end`].
    open: Option<usize>,
    period_ns: f64,
}

impl UploadTimer {
    /// A timer, where the device can write timestamps between commands
    /// (`TIMESTAMP_QUERY_INSIDE_ENCODERS`); `None` elsewhere.
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Option<Self> {
        if !device.features().contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS) {
            return None;
        }
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("tessera upload timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * RING as u32,
        });
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera upload timestamps resolve"),
            size: RING as u64 * wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let entries = (0..RING)
            .map(|_| Entry {
                readback: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tessera upload timestamps readback"),
                    size: 16,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                state: Arc::new(AtomicU8::new(FREE)),
                tiles: 0,
            })
            .collect();
        Some(Self { set, resolve, entries, open: None, period_ns: f64::from(queue.get_timestamp_period()) })
    }

    /// Before a frame's first upload: its first timestamp, in a submission of its own,
    /// when a ring entry is free.
    pub(crate) fn start(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, tiles: usize) {
        self.open = self.entries.iter().position(|e| e.state.load(Ordering::Acquire) == FREE);
        let Some(i) = self.open else { return };
        self.entries[i].tiles = tiles;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("tessera upload timer start"),
        });
        encoder.write_timestamp(&self.set, 2 * i as u32);
        queue.submit([encoder.finish()]);
    }

    /// After the frame's last upload: the second timestamp, resolved and copied into the
    /// entry's readback, which is then mapped (read by a later [`UploadTimer::collect`]).
    pub(crate) fn end(&mut self, device: &wgpu::Device, queue: &wgpu::Queue) {
        let Some(i) = self.open.take() else { return };
        let offset = i as u64 * wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("tessera upload timer end"),
        });
        let first = 2 * i as u32;
        encoder.write_timestamp(&self.set, first + 1);
        encoder.resolve_query_set(&self.set, first..first + 2, &self.resolve, offset);
        let entry = &self.entries[i];
        encoder.copy_buffer_to_buffer(&self.resolve, offset, &entry.readback, 0, Some(16));
        queue.submit([encoder.finish()]);
        entry.state.store(PENDING, Ordering::Release);
        let state = entry.state.clone();
        entry.readback.slice(..).map_async(wgpu::MapMode::Read, move |result| {
            state.store(if result.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
        });
    }

    /// The newest timing that came back since the last call (milliseconds, tiles),
    /// freeing every entry that came back (the device must have been polled).
    pub(crate) fn collect(&mut self) -> Option<(f64, usize)> {
        let mut newest = None;
        for entry in &mut self.entries {
            match entry.state.load(Ordering::Acquire) {
                MAPPED => {
                    let ticks = entry.readback.get_mapped_range(..).ok().map(|view| {
                        let words: &[u64] = bytemuck::cast_slice(&view);
                        (words[0], words[1])
                    });
                    entry.readback.unmap();
                    if let Some((a, b)) = ticks.filter(|(a, b)| *a != 0 && b >= a) {
                        newest = Some(((b - a) as f64 * self.period_ns * 1e-6, entry.tiles));
                    }
                    entry.state.store(FREE, Ordering::Release);
                }
                FAILED => entry.state.store(FREE, Ordering::Release),
                _ => {}
            }
        }
        newest
    }
}
