//! Tessera in the browser: the viewer built for `wasm32-unknown-unknown` and WebGPU.
//! `scripts/web` builds it, runs wasm-bindgen and serves `web/index.html`, which calls
//! `start` (wasm32 only) with the id of its `<canvas>`.
//!
//! Until the browser can stream an atlas (fetched with `Range` requests into the core's
//! ranged store), the page draws [`pattern`]: a procedural virtual texture, fully
//! resident, through the engine's pool, page table, feedback and `vt.wgsl`. That part
//! is target-independent and is what compiles (and is tested headless) natively; the
//! page's side, `web.rs`, is wasm32 only.

pub mod pattern;

#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::start;
