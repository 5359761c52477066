//! GPU-free core of Tessera: tile layout, the `.tsa` atlas format, baking, the host
//! page cache, the loader pool and the statistics every tier reports.
//!
//! Nothing here depends on wgpu: decisions are made and tested here, and the
//! renderer crate turns them into GPU work.

#![warn(missing_docs)]

pub mod bake;
pub mod compare;
pub mod error_text;
pub mod format;
pub mod fuzz;
pub mod progress;
pub mod scene;
pub mod stream;
pub mod temp_files;

pub use format::atlas::{Atlas, AtlasError, LayerInfo};
pub use format::codec::Codec;
pub use format::tile::{TextureLayout, TileId};
pub use progress::{NoProgress, Progress, ProgressCounter};
pub use stream::atlas_loader::{AtlasLoader, StackedLoader};
pub use stream::host_cache::HostCache;
pub use stream::loader::{LoadOutcome, LoadResult, LoaderPool, LoaderThreads, TileLoader};
pub use stream::stats::StatsSnapshot;
pub use stream::streamer::SharedStreaming;
