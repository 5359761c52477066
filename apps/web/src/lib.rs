//! Tessera in the browser: the viewer built for `wasm32-unknown-unknown` and WebGPU.
//! `scripts/web` builds it, runs wasm-bindgen and serves `web/index.html`, which calls
//! `start` (wasm32 only) with the id of its `<canvas>`.
//!
//! The page streams a baked atlas over `fetch()` with HTTP `Range` requests into the
//! core's ranged store (the engine's `tessera::web`, wasm32 only: the open loop, then
//! the loader jobs of the streamer's external threads, fetched concurrently and decoded
//! on the main thread within a per-frame budget) and draws its first layer on a plane
//! under a camera path ([`plane`]). With `?scene=pattern` it draws [`pattern`] instead: a procedural
//! virtual texture, fully resident, through the engine's pool, page table, feedback
//! and `vt.wgsl`. Over the atlas the page runs egui (fed from DOM events by
//! [`input`], not egui-winit: the page keeps its own `requestAnimationFrame` loop and
//! leaves winit out of the module) with the native viewer's tier-residency overlay
//! ([`overlay`]), and `?camera=free` (the default) moves [`free_camera`] with the
//! pointer, the wheel and keys. Those modules are target-independent and compile (and
//! are tested headless) natively; the page's side, `web.rs` and `dom_input.rs`, is
//! wasm32 only.

pub mod frame_stats;
pub mod free_camera;
mod gpu;
pub mod input;
pub mod overlay;
pub mod pattern;
pub mod plane;

#[cfg(target_arch = "wasm32")]
mod dom_input;
#[cfg(target_arch = "wasm32")]
mod query;
#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::start;
