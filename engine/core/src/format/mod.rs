//! What is stored and how: tile ids and virtual layouts, the `.tsa` atlas file, the
//! per-tile codecs (Basis Universal, LZ4, raw) and the GPU pool formats they become.

pub mod atlas;
pub mod basis;
pub mod basis_rust;
pub mod block_decode;
pub mod codec;
pub mod codec_types;
pub mod cog;
pub mod color;
pub mod pool_format;
pub mod tile;
