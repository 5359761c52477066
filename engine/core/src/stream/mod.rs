//! Streaming at run time, without a GPU: the [`Streamer`](streamer::Streamer) that runs
//! a frame's decisions, and the parts it owns (feedback decoding, residency and the
//! page-table mirror, LRU, loader threads, host cache, schedulers, statistics).

pub mod atlas_loader;
pub mod complete_table;
pub mod copy_runs;
pub mod feedback;
pub mod feedback_window;
pub mod host_cache;
pub mod level_one;
pub mod loader;
pub(crate) mod lru;
pub mod page_table;
pub mod pool_layout;
pub mod produce;
pub mod residency;
pub mod schedule;
pub mod simulate;
pub mod staging;
pub mod stats;
pub mod streamer;
pub mod upload_slice;
