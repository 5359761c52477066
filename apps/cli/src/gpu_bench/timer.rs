//! Timestamp queries of the benchmark: which passes and brackets each frame writes,
//! and reading them back.

use tessera::{GpuContext, RenderError, wgpu};

// Query indices: pass begin/end per mode, then the feedback clear and copy brackets, which start
// at a second resolve block (resolve offsets must be 256-byte aligned).
pub(super) const Q_VT: u32 = 0;
pub(super) const Q_REF: u32 = 2;
pub(super) const Q_PROBE: u32 = 4;
pub(super) const Q_PASSES: u32 = 6;
pub(super) const Q_CLEAR: u32 = 8;
pub(super) const Q_COPY: u32 = 10;
/// End of the queries written inside encoders (the clear and copy brackets).
pub(super) const Q_ENCODER_END: u32 = 12;
/// The complete page table's update pass (pass timestamps), resolved into a third block,
/// and only for frames that ran it.
pub(super) const Q_UPDATE: u32 = 12;
/// The pass without feedback (with the probe), resolved into a fourth block.
pub(super) const Q_FLOOR: u32 = 14;
/// The frame's tile uploads (inside encoders), resolved into a fifth block, and only
/// for frames that uploaded.
pub(super) const Q_UPLOAD: u32 = 16;
pub(super) const Q_COUNT: u32 = 18;
pub(super) const ENCODER_BLOCK: u64 = wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
pub(super) const UPDATE_BLOCK: u64 = 2 * wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
pub(super) const FLOOR_BLOCK: u64 = 3 * wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
pub(super) const UPLOAD_BLOCK: u64 = 4 * wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;

/// Timestamp queries of one frame: a query set, its resolve buffer and a mappable copy.
pub(super) struct Timer {
    pub(super) set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    pub(super) inside_encoders: bool,
    period_ns: f64,
}

impl Timer {
    pub(super) fn new(ctx: &GpuContext) -> Option<Self> {
        if !ctx.timestamps {
            return None;
        }
        let inside_encoders = ctx.device.features().contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("tessera bench timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: Q_COUNT,
        });
        let size = 5 * ENCODER_BLOCK;
        let resolve = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera bench timestamps resolve"),
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera bench timestamps readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let period_ns = f64::from(ctx.queue.get_timestamp_period());
        Some(Self { set, resolve, readback, inside_encoders, period_ns })
    }

    pub(super) fn pass(&self, first: u32) -> wgpu::RenderPassTimestampWrites<'_> {
        wgpu::RenderPassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(first),
            end_of_pass_write_index: Some(first + 1),
        }
    }

    pub(super) fn mark(&self, encoder: &mut wgpu::CommandEncoder, index: u32) {
        if self.inside_encoders {
            encoder.write_timestamp(&self.set, index);
        }
    }

    /// Resolves the queries written this frame and reads them back (blocking; outside the timed
    /// regions). Index `i` of the result is query `i`; unwritten queries read 0.
    pub(super) fn read(&self, ctx: &GpuContext, written: Written) -> Result<Vec<u64>, RenderError> {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera bench resolve") });
        let passes = if written.probe { Q_PASSES } else { Q_PROBE };
        // (first query, count, resolve offset) of each block written this frame.
        let mut blocks = vec![(0, passes, 0)];
        if self.inside_encoders {
            blocks.push((Q_CLEAR, Q_ENCODER_END - Q_CLEAR, ENCODER_BLOCK));
        }
        if written.updated {
            blocks.push((Q_UPDATE, 2, UPDATE_BLOCK));
        }
        if written.probe {
            blocks.push((Q_FLOOR, 2, FLOOR_BLOCK));
        }
        if written.uploaded && self.inside_encoders {
            blocks.push((Q_UPLOAD, 2, UPLOAD_BLOCK));
        }
        for &(first, count, offset) in &blocks {
            encoder.resolve_query_set(&self.set, first..first + count, &self.resolve, offset);
        }
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, None);
        ctx.queue.submit([encoder.finish()]);
        ctx.map_read(&self.readback)?;
        let mut ticks = vec![0u64; Q_COUNT as usize];
        {
            let view = self
                .readback
                .get_mapped_range(..)
                .map_err(|e| RenderError::Readback(format!("timestamps: {e}")))?;
            let words: &[u64] = bytemuck::cast_slice(&view);
            for &(first, count, offset) in &blocks {
                let (first, count, at) = (first as usize, count as usize, (offset / 8) as usize);
                ticks[first..first + count].copy_from_slice(&words[at..at + count]);
            }
        }
        self.readback.unmap();
        Ok(ticks)
    }

    /// Milliseconds between queries `first` and `first + 1`; `None` when the pair is unwritten
    /// or out of order.
    pub(super) fn span_ms(&self, ticks: &[u64], first: u32) -> Option<f64> {
        let (a, b) = (ticks[first as usize], ticks[first as usize + 1]);
        (a != 0 && b >= a).then(|| (b - a) as f64 * self.period_ns * 1e-6)
    }
}

/// Which optional queries a frame wrote.
#[derive(Clone, Copy)]
pub(super) struct Written {
    /// The sparse-feedback probe and the pass without feedback.
    pub(super) probe: bool,
    /// The page table's update pass.
    pub(super) updated: bool,
    /// Tile uploads.
    pub(super) uploaded: bool,
}
