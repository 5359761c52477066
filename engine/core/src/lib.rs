//! GPU-free core of Tessera: tile layout, the `.tsa` atlas format, baking, the host
//! page cache, the loader pool and the statistics every tier reports.
//!
//! Nothing here depends on wgpu: decisions are made and tested here, and the
//! renderer crate turns them into GPU work.

#![warn(missing_docs)]

pub mod atlas;
pub mod atlas_loader;
pub mod bake;
pub mod basis;
pub mod camera;
pub mod catalog;
pub mod codec;
pub mod codec_bench;
pub mod feedback;
pub mod host_cache;
pub mod loader;
pub mod lru;
pub mod material_scene;
pub mod mosaic;
pub mod pack;
pub mod page_table;
pub mod residency;
pub mod scene;
pub mod scene_bake;
pub mod schedule;
pub mod source;
pub mod stats;
pub mod tile;

pub use atlas::{Atlas, AtlasError, LayerInfo};
pub use atlas_loader::{AtlasLoader, StackedLoader};
pub use codec::Codec;
pub use host_cache::HostCache;
pub use loader::{LoadOutcome, LoadResult, LoaderPool, TileLoader};
pub use stats::StatsSnapshot;
pub use tile::{TextureLayout, TileId};
pub mod compare;
pub mod pool_format;
