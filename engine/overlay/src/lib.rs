//! Tessera's tier-residency overlay for egui, reusable by anyone who embeds the engine.
//!
//! [`model`] turns the engine's statistics and residency sets into what each panel
//! shows, without a GPU or egui; [`ui`] draws that model with egui and egui_plot and
//! collects the user's changes in [`OverlayControls`] for the application to apply.
//!
//! # Each frame
//!
//! Build an [`OverlayModel`] from the streamer's statistics and residency (with the
//! renderer: `vt.stats()`, `vt.residency()`, `vt.host_cache()` of
//! `tessera::VirtualTextures`), draw it inside any egui panel or window, then apply what
//! the user changed. This runs without a GPU:
//!
//! ```
//! use std::sync::Arc;
//! use tessera_core::bake::{BakeInput, BakeOptions, bake, source::Generated};
//! use tessera_core::format::pool_format::FormatSupport;
//! use tessera_core::stream::pool_layout::{GpuLimits, PoolLayout, Trilinear};
//! use tessera_core::stream::streamer::{FrameInput, Streamer, StreamerConfig};
//! use tessera_core::{Atlas, NoProgress};
//! use tessera_egui::{FrameSample, History, OverlayControls, OverlayModel, ResidencySnapshot, overlay_ui};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("a.tsa");
//! # bake(vec![BakeInput::new("a", Generated::new(512, 512))], &path, &BakeOptions::default(), &NoProgress)?;
//! # let atlas = Arc::new(Atlas::open(&path)?);
//! # let limits = GpuLimits { support: FormatSupport::default(), max_texture_side: 8192, max_storage_binding: 1 << 27 };
//! # let pool = PoolLayout::plan(&atlas, 4, None, limits, Trilinear::Software)?;
//! let mut streamer = Streamer::new(atlas.clone(), &pool, StreamerConfig::default())?;
//! let mut history = History::new(600, 1.0); // ten seconds at 60 Hz, rates over 1 s
//! let mut controls = OverlayControls::default();
//!
//! // Once per frame, after the frame's streaming decisions:
//! let _plan = streamer.frame(FrameInput::default());
//! let stats = streamer.stats(pool.slot_texels as u64 * pool.slot_texels as u64 * 4);
//! history.push(0.016, &stats, FrameSample { frame_ms: 16.0, ..FrameSample::default() });
//! let layer = &atlas.layers()[0];
//! let residency = ResidencySnapshot::build(
//!     &layer.layout,
//!     0,
//!     streamer.residency().resident_tiles().map(|(tile, _)| tile),
//!     streamer.residency().requested_tiles(),
//!     streamer.host_cache().resident_tiles(),
//!     1 << 16, // mips with more tiles than this are not drawn
//! );
//! let model = OverlayModel::from_stats(&stats, residency, &history)
//!     .with_layers(atlas.layers().iter().map(|l| l.name.clone()), atlas.is_stacked());
//! assert!(model.vram_slots_used >= 1, "the coarsest tile is always resident");
//!
//! let egui_ctx = egui::Context::default();
//! let mut out = egui_ctx.run_ui(egui::RawInput::default(), |ui| overlay_ui(ui, &model, &mut controls));
//! assert!(!out.shapes.is_empty());
//! out.textures_delta.clear(); // a real app hands `out` to egui-wgpu to paint
//! // Then apply `controls` (mip bias, budgets, flushes...) to the virtual textures.
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod model;
pub mod ui;

pub use model::{
    BakeProgress, FrameSample, History, Latency, MAX_MAP_TILES, MipMap, OverlayModel, ResidencySnapshot,
    STACKED_NOTE, TileState, shown_layer,
};
pub use ui::{
    DebugView, FEEDBACK_STRIDES, OverlayControls, bake_progress_ui, feedback_stride_label, overlay_ui,
};
