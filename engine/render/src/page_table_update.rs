//! The compute pass that keeps the complete page table ([`PageTableStorage::Complete`])
//! complete: a frame's [`TableJobs`] (rectangles of entries per mip, from
//! `tessera_core::stream::complete_table`) rewritten on the GPU, evictions in one
//! dispatch, then insertions in another (`shaders/page_table_update.wgsl`).
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
/// Bytes between the two parameter blocks (the dynamic-offset alignment wgpu requires
/// at most).
const PARAMS_STRIDE: u64 = 256;

/// Runs [`TableJobs`] on a complete page table.
pub struct TableUpdater {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    table: wgpu::Buffer,
    entries: u32,
    params: wgpu::Buffer,
    jobs: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
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
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera page table update params"),
            size: 2 * PARAMS_STRIDE,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let jobs = Self::jobs_buffer(device, 256);
        let entries = u32::try_from(entries).unwrap_or(u32::MAX);
        let bind_group = Self::bind(device, &layout, table, &jobs, &params);
        Self { pipeline, layout, table: table.clone(), entries, params, jobs, bind_group }
    }

    fn jobs_buffer(device: &wgpu::Device, jobs: u64) -> wgpu::Buffer {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera page table jobs"),
            size: jobs * std::mem::size_of::<TableJob>() as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn bind(
        device: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
        table: &wgpu::Buffer,
        jobs: &wgpu::Buffer,
        params: &wgpu::Buffer,
    ) -> wgpu::BindGroup {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera page table update"),
            layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: table.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: jobs.as_entire_binding() },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: params,
                        offset: 0,
                        size: wgpu::BufferSize::new(16),
                    }),
                },
            ],
        })
    }

    /// Records `jobs` (evictions, then insertions) into `encoder`; their data is
    /// written through `queue`, so the encoder must be submitted after this call's
    /// writes (any later submission is). Nothing is recorded for no jobs.
    pub fn record(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        jobs: &TableJobs,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        if jobs.is_empty() {
            return;
        }
        let all: Vec<TableJob> = jobs.evict.iter().chain(&jobs.insert).copied().collect();
        let need = all.len() as u64;
        if need * std::mem::size_of::<TableJob>() as u64 > self.jobs.size() {
            self.jobs = Self::jobs_buffer(device, need.next_power_of_two());
            self.bind_group = Self::bind(device, &self.layout, &self.table, &self.jobs, &self.params);
        }
        queue.write_buffer(&self.jobs, 0, bytemuck::cast_slice(&all));
        let phases = [(0u32, &jobs.evict, 1u32), (jobs.evict.len() as u32, &jobs.insert, 0u32)];
        for (i, (first, list, evict)) in phases.iter().enumerate() {
            let block = [*first, list.len() as u32, *evict, self.entries];
            queue.write_buffer(&self.params, i as u64 * PARAMS_STRIDE, bytemuck::cast_slice(&block));
        }
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
            pass.set_bind_group(0, &self.bind_group, &[(i as u64 * PARAMS_STRIDE) as u32]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}
