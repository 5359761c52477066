//! GPU-free core of Tessera: tile layout, the `.tsa` atlas format, baking, and every
//! streaming decision (host page cache, loader threads, residency, the page-table
//! mirror, schedulers) with the statistics each tier reports.
//!
//! Nothing here depends on wgpu: decisions are made and tested here, and the renderer
//! crate (`tessera`, published as `tessera-vt`) turns them into GPU work. Use this crate
//! alone to bake atlases from code, to inspect or verify them, or to drive the
//! [`Streamer`](stream::streamer::Streamer) in a simulation or a renderer of your own.
//!
//! # Baking from code, then streaming without a GPU
//!
//! ```
//! use std::sync::Arc;
//! use tessera_core::bake::{BakeInput, BakeOptions, bake_if_stale, source::Generated};
//! use tessera_core::format::pool_format::FormatSupport;
//! use tessera_core::stream::pool_layout::{GpuLimits, PoolLayout, Trilinear};
//! use tessera_core::stream::streamer::{FrameInput, SparseFeedback, Streamer, StreamerConfig};
//! use tessera_core::{Atlas, NoProgress};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let path = dir.path().join("checker.tsa");
//! // One layer; an image file would be `BakeInput::from_image("photo.jpg")?`.
//! let input = BakeInput::new("checker", Generated::new(1024, 1024));
//! let outcome = bake_if_stale(vec![input], &path, &BakeOptions::default(), &NoProgress)?;
//! assert!(outcome.baked()); // a second call with the same input reuses the bake
//!
//! let atlas = Arc::new(Atlas::open(&path)?);
//! // The pool a renderer would allocate: 4 MiB of RGBA8 slots on a GPU with these limits.
//! let limits = GpuLimits { support: FormatSupport::default(), max_texture_side: 8192, max_storage_binding: 1 << 27 };
//! let pool = PoolLayout::plan(&atlas, 4, None, limits, Trilinear::Software)?;
//! let mut streamer = Streamer::new(atlas, &pool, StreamerConfig::default())?;
//!
//! // Each frame: the feedback read back from the GPU in, a plan (uploads, page-table
//! // writes, shader parameters) out. Here the "GPU" asks for every tile of the
//! // feedback bitset's first word.
//! let feedback = SparseFeedback { frame: 0, pairs: vec![(0, u32::MAX)] };
//! let mut uploaded = 0;
//! for frame in 1..200 {
//!     let fb = (frame == 1).then_some(&feedback);
//!     let plan = streamer.frame(FrameInput { frame, feedback: fb, ..FrameInput::default() });
//!     uploaded += plan.uploads.len();
//!     if streamer.fully_resident() { break; }
//!     std::thread::sleep(std::time::Duration::from_millis(2)); // loader threads at work
//! }
//! assert!(uploaded > 0 && streamer.fully_resident());
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
// wasm32's `std::fs::File` holds nothing (no file can be opened there), so closing one
// early with `drop` is dropping a value without `Drop`.
#![cfg_attr(target_arch = "wasm32", allow(clippy::drop_non_drop))]

pub mod bake;
pub mod compare;
pub mod error_text;
pub mod format;
// Public for the fuzz harnesses (`fuzz/`, a crate outside the workspace) and their
// regression tests; hidden from the documentation: entry points for fuzzers, not API.
#[doc(hidden)]
pub mod fuzz;
pub mod local_file;
pub mod progress;
pub mod scene;
pub mod stream;
pub mod temp_files;

pub use format::atlas::{Atlas, AtlasError, LayerInfo};
pub use format::codec::Codec;
pub use format::tile::{TextureLayout, TileId};
/// The glam release of the scene and camera types (a [`Camera`](scene::camera::Camera)'s
/// vectors), for callers whose own glam is another release (Bevy's, say).
pub use glam;
pub use progress::{LogProgress, NoProgress, Progress, ProgressCounter};
pub use stream::atlas_loader::{AtlasLoader, StackedLoader};
pub use stream::host_cache::HostCache;
pub use stream::loader::{LoadOutcome, LoadResult, LoaderPool, LoaderThreads, TileLoader};
pub use stream::stats::StatsSnapshot;
pub use stream::streamer::SharedStreaming;
