//! Tessera's renderer: streams virtual textures far larger than VRAM through a fixed
//! GPU tile pool, driven by GPU feedback. Re-exports the GPU-free core as `core`.
//!
//! The small public API: [`GpuContext`] (device), [`VirtualTextures`] (pools, page
//! table, feedback; [`VirtualTextures::begin`] before your passes and
//! [`VtFrame::finish`] after them each frame, `bind_group` for your pipeline), and
//! [`shaders::VT_WGSL`] to prepend to your WGSL. See `examples/embed.rs`. Every
//! streaming decision is made by the core's `Streamer`; this crate executes its plans.

#![warn(missing_docs)]

pub mod capture;
pub mod context;
pub mod drawer;
pub mod error;
pub mod feedback;
pub mod lost;
pub mod material;
pub mod page_table;
pub mod params;
pub mod pool;
pub mod reference;
pub mod scene;
pub mod shaders;
pub mod soak;
pub mod vt;

pub use context::{GpuContext, OPTIONAL_FEATURES};
pub use error::RenderError;
pub use lost::DeviceLost;
pub use tessera_core as core;
pub use tessera_core::stream::stats::StreamFrame;
pub use vt::{VirtualTextures, VtConfig, VtFrame, VtLayer};
/// The wgpu this crate is built against: use it for your own device and pipelines, so
/// that the versions always match.
pub use wgpu;
