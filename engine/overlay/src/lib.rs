//! Tessera's tier-residency overlay for egui, reusable by anyone who embeds the engine.
//!
//! [`model`] turns the engine's statistics and residency sets into what each panel
//! shows, without a GPU or egui; [`ui`] draws that model with egui and egui_plot and
//! collects the user's changes in [`OverlayControls`] for the application to apply.

#![warn(missing_docs)]

pub mod model;
pub mod ui;

pub use model::{
    BakeProgress, FrameSample, History, Latency, MipMap, OverlayModel, ResidencySnapshot, STACKED_NOTE,
    TileState, shown_layer,
};
pub use ui::{
    DebugView, FEEDBACK_STRIDES, OverlayControls, bake_progress_ui, feedback_stride_label, overlay_ui,
};
