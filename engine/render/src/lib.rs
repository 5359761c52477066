//! Tessera's renderer: streams virtual textures far larger than VRAM through a fixed
//! GPU tile pool, driven by GPU feedback, on any wgpu device. The GPU-free core
//! (atlas format, baking, streaming decisions) is re-exported as [`core`], and the wgpu
//! it is built against as [`wgpu`].
//!
//! # The embedding loop
//!
//! Three things come from Tessera: a [`GpuContext`] around your device, the
//! [`VirtualTextures`] of an atlas (two calls per frame: [`VirtualTextures::begin`]
//! before your passes, [`VtFrame::finish`] after them), and [`shaders::VT_WGSL`] to put
//! in front of your WGSL, which gives it `vt_sample(uv, frag_coord)`. Everything else
//! is your own wgpu code.
//!
//! ```no_run
//! use std::sync::Arc;
//! use tessera::{GpuContext, VirtualTextures, VtConfig, core::Atlas, wgpu};
//!
//! # fn run(adapter: wgpu::Adapter, device: wgpu::Device, queue: wgpu::Queue,
//! #        my_layout: wgpu::BindGroupLayout, my_group: wgpu::BindGroup,
//! #        target: wgpu::TextureView,
//! #        make_pipeline: impl Fn(&wgpu::ShaderModule, &wgpu::PipelineLayout) -> wgpu::RenderPipeline)
//! #        -> Result<(), Box<dyn std::error::Error>> {
//! // Your device (created with `adapter.features() & tessera::OPTIONAL_FEATURES` to let
//! // compressed atlases stay compressed in VRAM), wrapped.
//! let ctx = GpuContext::from_parts(&adapter, &device, &queue)?;
//! let atlas = Arc::new(Atlas::open("photo.tsa")?);         // `tessera bake photo.jpg -o photo.tsa`
//! let mut vt = VirtualTextures::new(&ctx, atlas, VtConfig::default())?;
//! let layer = vt.layer(0).ok_or("the atlas has no layer")?;
//!
//! // Your shader calls vt_sample(uv, frag_coord); the virtual texture is bind group 1.
//! let source = format!("{}\n{}", tessera::shaders::VT_WGSL, "/* your WGSL */");
//! let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
//!     label: None,
//!     source: wgpu::ShaderSource::Wgsl(source.into()),
//! });
//! let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
//!     label: None,
//!     bind_group_layouts: &[Some(&my_layout), Some(vt.bind_group_layout())],
//!     immediate_size: 0,
//! });
//! let pipeline = make_pipeline(&module, &pipeline_layout); // your render pipeline
//!
//! loop {
//!     let mut encoder = device.create_command_encoder(&Default::default());
//!     let frame = vt.begin(&ctx, &mut encoder); // feedback in, decisions, uploads
//!     {
//!         let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
//!             color_attachments: &[Some(wgpu::RenderPassColorAttachment {
//!                 view: &target,
//!                 depth_slice: None,
//!                 resolve_target: None,
//!                 ops: wgpu::Operations::default(),
//!             })],
//!             ..Default::default()
//!         });
//!         pass.set_pipeline(&pipeline);
//!         pass.set_bind_group(0, &my_group, &[]);
//!         pass.set_bind_group(1, frame.bind_group(layer), &[]);
//!         pass.draw(0..6, 0..1);
//!     }
//!     let stats = frame.finish(&ctx, encoder)?; // submits; the feedback readback is never waited on
//!     if vt.resident_fraction() == Some(1.0) { /* everything visible is sharp */ }
//! #   let _ = stats; break;
//! }
//! # Ok(()) }
//! ```
//!
//! `examples/embed.rs` is the same program complete (a pipeline, a camera, a render
//! target), run by the test suite against a golden image.
//!
//! # Frames
//!
//! [`VtFrame`] borrows the virtual textures from `begin` to `finish`, so the steps
//! cannot be reordered or skipped by accident: reconfiguring during a frame, finishing
//! twice or keeping a bind group past `finish` do not compile. A frame dropped without
//! `finish` loses its feedback with a warning, and when no feedback arrives for
//! [`vt::FEEDBACK_STALL_FRAMES`] frames `begin` warns again
//! ([`VirtualTextures::feedback_stalled`]). Frames are numbered by the virtual textures
//! (0 first, one per `begin`); feedback recorded in frame N is acted on in frames N+1
//! to N+3. `begin` polls the device without waiting, so map callbacks run even in a
//! headless loop that never presents; a headless loop that renders faster than the GPU
//! should still wait now and then ([`GpuContext::wait_idle`]) so work does not pile up.
//! [`VirtualTextures::resident_fraction`] is `None` until the first feedback has arrived.
//!
//! # Using your own device
//!
//! [`GpuContext::from_parts`] takes your adapter, device and queue. No feature is
//! required; Tessera uses those of [`OPTIONAL_FEATURES`] your device has:
//!
//! | feature | what it gives |
//! |---|---|
//! | `TEXTURE_COMPRESSION_BC` | BC7 (and BC1) pools for Basis atlases on desktop GPUs: 4× (8×) the tiles of RGBA8 per MiB |
//! | `TEXTURE_COMPRESSION_ASTC` / `TEXTURE_COMPRESSION_ETC2` | the same on mobile GPUs (ASTC 4×4 preferred) |
//! | `SHADER_EARLY_DEPTH_TEST` | the built-in drawers skip hidden fragments (your own pipelines can use [`shaders::with_early_depth_test`]) |
//! | `TIMESTAMP_QUERY` (+ `_INSIDE_ENCODERS`) | GPU timings in `tessera bench` only |
//!
//! Raw and LZ4 atlases always use RGBA8 pools. Limits: the pool texture must fit
//! `max_texture_dimension_2d` and the page table `max_storage_buffer_binding_size`, so
//! request `adapter.limits()` (as [`GpuContext::device_descriptor`] does) for large
//! pools and atlases; [`VirtualTextures::new`] says which limit a configuration
//! exceeds. Fragment shaders must be able to write storage buffers (Vulkan, Metal,
//! DX12; not WebGL2). Tessera installs the device's lost callback and uncaptured-error
//! handler; a lost device is then [`RenderError::DeviceLost`] from `finish`, never a
//! hang, and [`GpuContext::lost`] says why.
//!
//! # Quality and cost
//!
//! [`VtConfig::default`] filters trilinearly: cheapest, and blurry where a surface is
//! seen at a grazing angle. Set `max_anisotropy` (up to [`vt::MAX_ANISOTROPY`]) for
//! sharp floors and roads. Out-of-range settings are refused by
//! [`VirtualTextures::new`] ([`VtConfig::validate`]), not clamped.
//!
//! # Several virtual textures in one shader
//!
//! [`shaders::vt_module`] declares the same API at any bind group under your own name
//! (`vt_module(2, "detail")` gives `detail_sample` at `@group(2)`); bind each
//! texture's [`VirtualTextures::bind_group`] at its group. All [`VirtualTextures`] share
//! one bind group layout shape, so one pipeline layout can take several. Give them one
//! host cache and one set of loader threads with [`VtConfig::shared`]
//! ([`core::stream::streamer::SharedStreaming`]): tiles of all of them compete for one
//! RAM budget, and the machine runs one set of loader threads, not one per
//! texture.
//!
//! # Changing the pool at run time
//!
//! [`VirtualTextures::set_pool_mib`] resizes the VRAM pool between frames and keeps the
//! host cache, the loader threads and the bind group layout (your pipelines stay
//! valid); the other `set_*` methods change budgets, bias, feedback resolution and
//! debug views from the next frame on.

//!
//! # In a browser
//!
//! Built for `wasm32-unknown-unknown` without default features, the crate renders
//! through WebGPU. No thread may block there, so make the context with
//! [`GpuContext::with_instance_async`] (the surface of a `<canvas>`) or
//! [`GpuContext::headless_async`]; the blocking helpers ([`GpuContext::headless`],
//! [`GpuContext::wait_idle`], [`GpuContext::map_read`]) fail with
//! [`RenderError::WouldBlock`] and name their `async` twins ([`wait`]). The frame loop
//! never blocks anywhere: feedback is read back through `map_async` callbacks. Atlases
//! stream over `fetch()` with HTTP `Range` requests through the `web` module (wasm32
//! only): `web::open_atlas` opens one from a `web::RangeFetcher`, and a
//! `web::StreamDriver` runs the loader jobs of `SharedStreaming::external` each frame.

#![warn(missing_docs)]

/// The guide's Rust blocks (docs/embedding.md, docs/baking.md, docs/runtime-vt.md), compiled as doctests so
/// that the guide cannot drift from the API; the README's blocks are copies of these
/// (checked by `apps/cli/tests/docs.rs`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/embedding.md")]
#[doc = include_str!("../../../docs/baking.md")]
#[doc = include_str!("../../../docs/runtime-vt.md")]
struct Guide;

pub mod context;
pub mod error;
pub mod lost;
pub mod shaders;
pub mod vt;
pub mod wait;
#[cfg(target_arch = "wasm32")]
pub mod web;

// The machinery behind `VirtualTextures`, public and documented for what looks inside
// it: the GPU integration tests, the benchmarks, the viewer's pool view and engines
// that bind the virtual textures themselves (Bevy). An embedder's frame loop needs none
// of it.
pub mod feedback;
mod feedback_target;
pub mod page_table;
pub mod page_table_update;
pub mod params;
pub mod pool;
mod prediction;
pub mod produce;
pub mod staging;
mod upload_timer;

pub use context::{GpuContext, OPTIONAL_FEATURES};
pub use error::RenderError;
pub use feedback_target::{FEEDBACK_TARGET_FORMAT, FeedbackAttachment, PREDICTED_DEPTH_FORMAT};
pub use lost::DeviceLost;
pub use page_table::{PageTableResource, PageTableStorage};
pub use params::BindingResources;
pub use pool::{POOL_FORMAT, POOL_FORMAT_LINEAR, UNWRITTEN};
pub use produce::{ProduceBatch, ProducedTile, TileProducer};
pub use tessera_core as core;
pub use tessera_core::stream::stats::StreamFrame;
pub use tessera_core::stream::streamer::StreamerConfig;
pub use vt::{DetachedFrame, UploadSlicing, VirtualTextures, VtConfig, VtFrame, VtLayer};
/// The wgpu this crate is built against: use it for your own device and pipelines, so
/// that the versions always match.
pub use wgpu;
