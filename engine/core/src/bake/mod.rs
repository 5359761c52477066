//! Offline baking: image sources, the streaming baker that writes atlases, mosaics of
//! real images, rectangle packing and the stamp that says whether a bake is up to date.
//! (Baking a glTF scene is `scene::scene_bake`: it builds on the scene import, and
//! keeping it there leaves no import circle.)

mod baker;
pub mod cache;
pub mod dds;
pub(crate) mod filter;
pub mod grid;
pub mod input_file;
pub mod jpeg_file;
pub mod ktx2;
pub mod mosaic;
pub mod open;
pub mod overwrite;
pub mod pack;
pub mod png_rows;
mod rgba;
pub mod shard;
pub mod shard_plan;
#[cfg(feature = "remote")]
pub(crate) mod shard_remote;
pub mod source;
pub mod tiff;
pub mod vrt;

pub use baker::*;
pub use cache::{BakeOutcome, bake_if_stale};
pub use filter::{linear_to_srgb, srgb_to_linear};
