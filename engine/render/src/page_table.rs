//! The page table on the GPU, mirrored by `tessera_core::stream::page_table` and read by
//! `shaders/vt.wgsl` (`vt_entry`); the streamer's plan says which ranges to write.
//!
//! Three storages hold the same `u32` entries, indexed like the atlas tile index
//! ([`PageTableStorage`]): a complete storage buffer (the default: every entry valid at
//! any depth, rewritten by a compute pass, [`crate::page_table_update`]), a storage
//! buffer whose fallback entries reach a few mips deep (written from the CPU mirror;
//! the shader climbs past them), or an `R32Uint` texture [`PAGE_TABLE_ROW`] entries wide
//! laid out like that buffer (one `textureLoad` per lookup, through the texture cache).
//! All are measured by `tessera bench --page-table`.

use serde::Serialize;
use tessera_core::stream::streamer::PageTableWrite;

/// Entries per row of the texture storage: entry `i` is texel `(i % ROW, i / ROW)`.
pub const PAGE_TABLE_ROW: u32 = 4096;

/// The page table's GPU resource ([`PageTableStorage`] says which).
#[derive(Clone, Debug)]
pub enum PageTableResource {
    /// A read-only storage buffer of `u32`.
    Buffer(wgpu::Buffer),
    /// A view of the `R32Uint` texture.
    Texture(wgpu::TextureView),
}

/// Where the page table lives on the GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum PageTableStorage {
    /// A storage buffer of `u32` in which every entry names the tile itself or its
    /// nearest resident ancestor, at any depth: the shader does one load and never
    /// climbs. Residency changes are rewritten on the GPU (the default).
    #[default]
    Complete,
    /// A storage buffer of `u32` whose fallback entries reach
    /// `tessera_core::stream::page_table::FALLBACK_DEPTH` mips below a resident tile,
    /// written from the CPU mirror; the shader climbs past unmapped entries.
    Buffer,
    /// An `R32Uint` texture [`PAGE_TABLE_ROW`] texels wide, read with `textureLoad`.
    Texture,
}

impl PageTableStorage {
    /// The binding type of the page table in the `vt.wgsl` bind group.
    pub fn binding_type(self) -> wgpu::BindingType {
        match self {
            Self::Buffer | Self::Complete => wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: true },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            Self::Texture => wgpu::BindingType::Texture {
                sample_type: wgpu::TextureSampleType::Uint,
                view_dimension: wgpu::TextureViewDimension::D2,
                multisampled: false,
            },
        }
    }

    /// The texture storage's size for `entries` entries: [`PAGE_TABLE_ROW`] wide, as
    /// many rows as needed (at least one).
    pub fn texture_extent(entries: usize) -> (u32, u32) {
        let rows = entries.max(1).div_ceil(PAGE_TABLE_ROW as usize);
        (PAGE_TABLE_ROW, u32::try_from(rows).unwrap_or(u32::MAX))
    }
}

enum Store {
    Buffer(wgpu::Buffer),
    Texture(wgpu::Texture, wgpu::TextureView),
}

/// The page table's GPU memory.
pub struct PageTableBuffer {
    store: Store,
    entries: usize,
    storage: PageTableStorage,
}

impl PageTableBuffer {
    /// A page table of `entries` entries (at least one) in `storage`, all zero
    /// (nothing resident) until the first writes. Fails with a message when the
    /// texture storage would be taller than `max_side` rows.
    pub fn new(
        device: &wgpu::Device,
        entries: usize,
        storage: PageTableStorage,
        max_side: u32,
    ) -> Result<Self, String> {
        let store = match storage {
            PageTableStorage::Buffer => Store::Buffer(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera page table"),
                size: (entries.max(1) * 4) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })),
            PageTableStorage::Complete => {
                // Every entry starts unmapped (all ones: above every valid entry, so the
                // first insertion covering it wins the atomic minimum).
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tessera page table (complete)"),
                    size: (entries.max(1) * 4) as u64,
                    // COPY_SRC: tests and debugging read it back.
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_DST
                        | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                });
                match buffer.slice(..).get_mapped_range_mut() {
                    Ok(mut view) => view.slice(..).fill(0xff),
                    Err(e) => return Err(format!("the new page table could not be mapped: {e}")),
                }
                buffer.unmap();
                Store::Buffer(buffer)
            }
            PageTableStorage::Texture => {
                let (width, height) = PageTableStorage::texture_extent(entries);
                if height > max_side || width > max_side {
                    return Err(format!(
                        "a page table of {entries} entries needs a {width}×{height} texture; the device allows {max_side}: use the buffer storage"
                    ));
                }
                let texture = device.create_texture(&wgpu::TextureDescriptor {
                    label: Some("tessera page table"),
                    size: wgpu::Extent3d { width, height, depth_or_array_layers: 1 },
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D2,
                    format: wgpu::TextureFormat::R32Uint,
                    usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
                    view_formats: &[],
                });
                let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
                Store::Texture(texture, view)
            }
        };
        Ok(Self { store, entries, storage })
    }

    /// Bytes of GPU memory it takes (4 per entry; the texture storage rounds up to
    /// whole rows).
    pub fn bytes(&self) -> u64 {
        match &self.store {
            Store::Buffer(buffer) => buffer.size(),
            Store::Texture(texture, _) => u64::from(texture.width()) * u64::from(texture.height()) * 4,
        }
    }

    /// Queues the plan's writes; ranges past the end are cut off.
    pub fn write(&self, queue: &wgpu::Queue, writes: &[PageTableWrite]) {
        for w in writes {
            let end = (w.first + w.entries.len()).min(self.entries);
            let Some(data) = w.entries.get(..end.saturating_sub(w.first)).filter(|d| !d.is_empty()) else {
                continue;
            };
            match &self.store {
                Store::Buffer(buffer) => {
                    queue.write_buffer(buffer, (w.first * 4) as u64, bytemuck::cast_slice(data));
                }
                Store::Texture(texture, _) => {
                    for (first, run) in row_runs(w.first, data) {
                        let row = PAGE_TABLE_ROW as usize;
                        queue.write_texture(
                            wgpu::TexelCopyTextureInfo {
                                texture,
                                mip_level: 0,
                                origin: wgpu::Origin3d {
                                    x: (first % row) as u32,
                                    y: (first / row) as u32,
                                    z: 0,
                                },
                                aspect: wgpu::TextureAspect::All,
                            },
                            bytemuck::cast_slice(run),
                            wgpu::TexelCopyBufferLayout {
                                offset: 0,
                                bytes_per_row: None,
                                rows_per_image: None,
                            },
                            wgpu::Extent3d { width: run.len() as u32, height: 1, depth_or_array_layers: 1 },
                        );
                    }
                }
            }
        }
    }

    /// The storage buffer (`None` for the texture storage).
    pub fn buffer(&self) -> Option<&wgpu::Buffer> {
        match &self.store {
            Store::Buffer(buffer) => Some(buffer),
            Store::Texture(..) => None,
        }
    }

    /// Where it lives.
    pub fn storage(&self) -> PageTableStorage {
        self.storage
    }

    /// Entries it holds.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The page table as an owned handle.
    pub fn resource(&self) -> PageTableResource {
        match &self.store {
            Store::Buffer(buffer) => PageTableResource::Buffer(buffer.clone()),
            Store::Texture(_, view) => PageTableResource::Texture(view.clone()),
        }
    }

    /// The page table as a bind-group resource.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        match &self.store {
            Store::Buffer(buffer) => buffer.as_entire_binding(),
            Store::Texture(_, view) => wgpu::BindingResource::TextureView(view),
        }
    }
}

/// `data` (entries from `first` on) cut where texture rows end: (first entry, run).
fn row_runs(first: usize, data: &[u32]) -> impl Iterator<Item = (usize, &[u32])> {
    let row = PAGE_TABLE_ROW as usize;
    let mut at = first;
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let take = (row - at % row).min(rest.len());
        let (run, tail) = rest.split_at(take);
        let out = (at, run);
        at += take;
        rest = tail;
        Some(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs cover the data in order and never cross a row end.
    #[test]
    fn row_runs_split_at_row_ends() {
        let row = PAGE_TABLE_ROW as usize;
        let data: Vec<u32> = (0..(2 * row + 10) as u32).collect();
        for first in [0, 1, row - 3, row, 5 * row + 7] {
            let runs: Vec<_> = row_runs(first, &data).collect();
            let mut at = first;
            let mut joined = Vec::new();
            for (f, run) in &runs {
                assert_eq!(*f, at);
                assert!(f % row + run.len() <= row, "run crosses a row end");
                at += run.len();
                joined.extend_from_slice(run);
            }
            assert_eq!(joined, data);
            assert!(runs.len() <= 4);
        }
        assert_eq!(row_runs(9, &[]).count(), 0);
    }

    /// The texture holds every entry, one row more only when needed.
    #[test]
    fn texture_extent_fits_the_entries() {
        assert_eq!(PageTableStorage::texture_extent(0), (PAGE_TABLE_ROW, 1));
        assert_eq!(PageTableStorage::texture_extent(4096), (PAGE_TABLE_ROW, 1));
        assert_eq!(PageTableStorage::texture_extent(4097), (PAGE_TABLE_ROW, 2));
        // 524288² in 128² tiles, all mips: 22,369,621 entries in 5,462 rows.
        assert_eq!(PageTableStorage::texture_extent(22_369_621), (PAGE_TABLE_ROW, 5462));
    }
}
