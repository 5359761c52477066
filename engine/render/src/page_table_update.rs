//! The compute pass that keeps the complete page table ([`PageTableStorage::Complete`])
//! complete: a frame's [`TableJobs`] (rectangles of entries per mip, from
//! `tessera_core::stream::complete_table`) rewritten on the GPU: resets (a rebuild),
//! evictions and insertions, a dispatch each, in that order
//! (`shaders/page_table_update.wgsl`).
//!
//! [`PageTableStorage::Complete`]: crate::page_table::PageTableStorage::Complete

use tessera_core::stream::complete_table::{TableJob, TableJobs};

use crate::shaders::PAGE_TABLE_UPDATE_WGSL;

/// Threads per workgroup of the update shader.
const GROUP: u64 = 64;
/// The most workgroups one job spreads over (each thread then strides over the rest):
/// 64 Ki threads, enough to fill a large GPU with one coarse tile's 16 M entries.
const MAX_GROUPS_PER_JOB: u64 = 1024;
/// Jobs per dispatch row (the z dimension's limit); more go to further rows (y).
const JOBS_PER_ROW: u32 = 65535;
/// Bytes between the phases' parameter blocks (the dynamic-offset alignment wgpu
/// requires at most).
const PARAMS_STRIDE: u64 = 256;
/// Phase modes of the shader: entries set to the job's value (resets), entries equal
/// to `value` set to `swap` (evictions), the minimum kept (insertions).
const MODE_INSERT: u32 = 0;
const MODE_EVICT: u32 = 1;
const MODE_SET: u32 = 2;

/// Runs [`TableJobs`] on a complete page table.
pub struct TableUpdater {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    table: wgpu::Buffer,
    entries: u32,
}

impl TableUpdater {
    /// An updater for `table`, a storage buffer of `entries` entries.
    pub fn new(device: &wgpu::Device, table: &wgpu::Buffer, entries: usize) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tessera page table update"),
            source: wgpu::ShaderSource::Wgsl(PAGE_TABLE_UPDATE_WGSL.into()),
        });
        let storage = |read_only| wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        };
        let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty,
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tessera page table update"),
            entries: &[
                entry(0, storage(false)),
                entry(1, storage(true)),
                entry(
                    2,
                    wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: wgpu::BufferSize::new(16),
                    },
                ),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera page table update"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("tessera page table update"),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("update"),
            compilation_options: Default::default(),
            cache: None,
        });
        let entries = u32::try_from(entries).unwrap_or(u32::MAX);
        Self { pipeline, layout, table: table.clone(), entries }
    }

    /// Records `jobs` (resets, evictions, then insertions) into `encoder`. The jobs and
    /// their parameters go into buffers of this call's own, filled when created, so any
    /// number of calls may be recorded and submitted in any grouping, in order. Nothing
    /// is recorded for no jobs.
    pub fn record(
        &self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        jobs: &TableJobs,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        if jobs.is_empty() {
            return;
        }
        let all: Vec<TableJob> = jobs.reset.iter().chain(&jobs.evict).chain(&jobs.insert).copied().collect();
        let phases = [
            (0u32, &jobs.reset, MODE_SET),
            (jobs.reset.len() as u32, &jobs.evict, MODE_EVICT),
            ((jobs.reset.len() + jobs.evict.len()) as u32, &jobs.insert, MODE_INSERT),
        ];
        let mut params = vec![0u8; phases.len() * PARAMS_STRIDE as usize];
        for (i, (first, list, mode)) in phases.iter().enumerate() {
            let block = [*first, list.len() as u32, *mode, self.entries];
            let at = i * PARAMS_STRIDE as usize;
            params[at..at + 16].copy_from_slice(bytemuck::cast_slice(&block));
        }
        // A lost device cannot map them: nothing it ran would show anyway.
        let Some(params) =
            filled(device, "tessera page table update params", &params, wgpu::BufferUsages::UNIFORM)
        else {
            return;
        };
        let Some(list) = filled(
            device,
            "tessera page table jobs",
            bytemuck::cast_slice(&all),
            wgpu::BufferUsages::STORAGE,
        ) else {
            return;
        };
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera page table update"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: self.table.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: list.as_entire_binding() },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params,
                        offset: 0,
                        size: wgpu::BufferSize::new(16),
                    }),
                },
            ],
        });
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("tessera page table update"),
            timestamp_writes: timestamps,
        });
        pass.set_pipeline(&self.pipeline);
        for (i, (_, list, _)) in phases.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let largest = list.iter().map(TableJob::len).max().unwrap_or(0);
            let x = largest.div_ceil(GROUP).clamp(1, MAX_GROUPS_PER_JOB) as u32;
            let count = list.len() as u32;
            let (y, z) = (count.div_ceil(JOBS_PER_ROW), count.min(JOBS_PER_ROW));
            pass.set_bind_group(0, &bind_group, &[(i as u64 * PARAMS_STRIDE) as u32]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}

/// A buffer holding `contents` from its creation (mapped at creation, then unmapped),
/// or `None` when it cannot be mapped (a lost device).
fn filled(
    device: &wgpu::Device,
    label: &str,
    contents: &[u8],
    usage: wgpu::BufferUsages,
) -> Option<wgpu::Buffer> {
    let size = (contents.len() as u64)
        .next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        .max(wgpu::COPY_BUFFER_ALIGNMENT);
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: true,
    });
    match buffer.get_mapped_range_mut(..) {
        Ok(mut view) => view.slice(..contents.len()).copy_from_slice(contents),
        Err(e) => {
            tracing::debug!("{label} not written: {e}");
            return None;
        }
    }
    buffer.unmap();
    Some(buffer)
}
