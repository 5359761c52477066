//! egui widgets that draw an [`OverlayModel`]: tier panels, per-mip residency maps,
//! rolling plots, the controls the application applies, a help panel of keys, and the
//! progress of a background bake.

use egui::{Color32, ColorImage, RichText, TextureHandle, TextureOptions};
use egui_plot::{Line, Plot, PlotPoints};

use crate::model::{BakeProgress, OverlayModel, TileState};

/// The renderer's debug views, as the overlay's selector offers them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DebugView {
    /// The texture as it is.
    #[default]
    Off,
    /// Each mip level tinted with its own colour.
    MipColours,
    /// How many mips coarser than wanted the sampled tile is.
    FallbackDepth,
    /// The payload edges of the tiles of the sampled mip, coloured by fallback depth.
    TileBorders,
}

impl DebugView {
    /// The value of `VtConfig::debug_view` for this view.
    pub fn index(self) -> u32 {
        match self {
            Self::Off => 0,
            Self::MipColours => 1,
            Self::FallbackDepth => 2,
            Self::TileBorders => 3,
        }
    }

    /// Every view, in index order.
    pub const ALL: [Self; 4] = [Self::Off, Self::MipColours, Self::FallbackDepth, Self::TileBorders];

    /// The view named `s`: its index (`0`–`3`), its label, or a short name
    /// (`off`, `mip`, `fallback`, `borders`), for command lines.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|v| {
            s == v.index().to_string()
                || s == v.label()
                || s == v.short_name()
                || s == v.label().replace(' ', "-")
        })
    }

    /// A one-word name, for command lines.
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::MipColours => "mip",
            Self::FallbackDepth => "fallback",
            Self::TileBorders => "borders",
        }
    }

    /// Name shown in the selector.
    pub fn label(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::MipColours => "mip colours",
            Self::FallbackDepth => "fallback depth",
            Self::TileBorders => "tile borders",
        }
    }

    /// The next view, wrapping around (for a key that cycles views).
    pub fn next(self) -> Self {
        match self {
            Self::Off => Self::MipColours,
            Self::MipColours => Self::FallbackDepth,
            Self::FallbackDepth => Self::TileBorders,
            Self::TileBorders => Self::Off,
        }
    }
}

pub use tessera_core::stream::streamer::FEEDBACK_STRIDES;

/// How the feedback selector names `stride`, e.g. "feedback: 1 px in 2×2".
pub fn feedback_stride_label(stride: u32) -> String {
    format!("feedback: 1 px in {stride}×{stride}")
}

/// What the user set in the overlay; the application applies it to the engine.
///
/// `flush_vram` and `flush_host` are one-shot requests: the application acts on them
/// and sets them back to `false`.
#[derive(Default)]
pub struct OverlayControls {
    /// Added to every level of detail.
    pub mip_bias: f32,
    /// Most tiles uploaded per frame.
    pub upload_budget: usize,
    /// Host cache budget, MiB.
    pub host_budget_mib: u32,
    /// Drop arriving feedback so nothing new streams.
    pub freeze_feedback: bool,
    /// Feedback resolution: one pixel in every `stride × stride` block writes feedback
    /// each frame (one of [`FEEDBACK_STRIDES`]).
    pub feedback_stride: u32,
    /// The layer whose residency maps are shown (the application clamps it to the atlas).
    pub residency_layer: u16,
    /// Debug view of the scene.
    pub debug_view: DebugView,
    /// Evict every unpinned tile from VRAM (one-shot).
    pub flush_vram: bool,
    /// Empty the host cache (one-shot).
    pub flush_host: bool,
    /// VRAM pool size, MiB; changing it rebuilds the pool (the application decides when).
    pub pool_mib: u32,
    /// The physical pool texture registered with egui and its size in texels, for a
    /// live thumbnail (the application registers it).
    pub pool_thumbnail: Option<(egui::TextureId, [u32; 2])>,
    /// Keys and what they do, listed in the help panel.
    pub keys: Vec<(String, String)>,
    maps: Vec<TextureHandle>,
}

impl std::fmt::Debug for OverlayControls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OverlayControls")
            .field("pool_mib", &self.pool_mib)
            .field("mip_bias", &self.mip_bias)
            .field("upload_budget", &self.upload_budget)
            .field("host_budget_mib", &self.host_budget_mib)
            .field("freeze_feedback", &self.freeze_feedback)
            .field("feedback_stride", &self.feedback_stride)
            .field("residency_layer", &self.residency_layer)
            .field("debug_view", &self.debug_view)
            .finish_non_exhaustive()
    }
}

impl OverlayControls {
    /// Controls starting from the engine's current settings, with the application's keys.
    pub fn new(
        pool_mib: u32,
        mip_bias: f32,
        upload_budget: usize,
        host_budget_mib: u32,
        feedback_stride: u32,
        keys: &[(&str, &str)],
    ) -> Self {
        Self {
            pool_mib,
            mip_bias,
            upload_budget,
            host_budget_mib,
            feedback_stride,
            keys: keys.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..Self::default()
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

fn color(state: TileState) -> Color32 {
    let [r, g, b, a] = state.color();
    Color32::from_rgba_unmultiplied(r, g, b, a)
}

/// Draws the overlay into `ui`: tier panels, residency maps, plots, controls, help.
pub fn overlay_ui(ui: &mut egui::Ui, model: &OverlayModel, controls: &mut OverlayControls) {
    egui::CollapsingHeader::new(RichText::new("Tiers").strong()).default_open(true).show(ui, |ui| {
        tiers_ui(ui, model);
        if let Some((id, [w, h])) = controls.pool_thumbnail {
            ui.label("physical pool");
            let width = (ui.available_width() - 8.0).clamp(32.0, 320.0);
            ui.image((id, egui::vec2(width, width * h as f32 / w.max(1) as f32)));
        }
    });
    egui::CollapsingHeader::new(RichText::new("Residency").strong())
        .id_salt("tessera residency")
        .default_open(true)
        .show(ui, |ui| residency_ui(ui, model, controls));
    egui::CollapsingHeader::new(RichText::new("Plots").strong()).default_open(true).show(ui, |ui| {
        plots_ui(ui, model);
    });
    egui::CollapsingHeader::new(RichText::new("Controls").strong()).default_open(true).show(ui, |ui| {
        controls_ui(ui, controls);
    });
    egui::CollapsingHeader::new(RichText::new("Help").strong()).default_open(false).show(ui, |ui| {
        egui::Grid::new("tessera keys").num_columns(2).striped(true).show(ui, |ui| {
            for (k, v) in &controls.keys {
                ui.monospace(k);
                ui.label(v);
                ui.end_row();
            }
        });
    });
}

fn tiers_ui(ui: &mut egui::Ui, m: &OverlayModel) {
    ui.label(RichText::new("VRAM pool").color(color(TileState::Vram)));
    ui.add(egui::ProgressBar::new(m.vram_fill() as f32).text(format!(
        "{} / {} slots, {:.1} MiB",
        m.vram_slots_used,
        m.vram_slots_total,
        mib(m.vram_bytes)
    )));
    ui.label(format!("{:.0} uploads/s, {:.0} evictions/s", m.uploads_per_s, m.evictions_per_s));
    ui.separator();
    if let Some(p) = &m.produced {
        produced_ui(ui, p);
        return;
    }
    ui.label(RichText::new("Host cache").color(color(TileState::Host)));
    ui.add(egui::ProgressBar::new(m.host_fill().min(1.0) as f32).text(format!(
        "{} tiles, {:.1} / {:.0} MiB",
        m.host_tiles,
        mib(m.host_bytes),
        mib(m.host_budget_bytes)
    )));
    ui.label(format!("hit rate {:.1}%", 100.0 * m.host_hit_rate));
    ui.separator();
    if let Some(n) = &m.network {
        network_ui(ui, n);
        ui.separator();
    }
    ui.label(
        RichText::new(match (m.unbaked_tiff, m.network.is_some()) {
            (true, true) => "COG, unbaked (remote)",
            (true, false) => "COG, unbaked (disk)",
            (false, true) => "Atlas (remote)",
            (false, false) => "Disk (atlas)",
        })
        .color(Color32::GRAY),
    );
    ui.label(format!(
        "{} tiles, {:.1} MiB, {:.0} reads/s{}",
        m.disk_tiles,
        mib(m.disk_bytes),
        m.reads_per_s,
        if m.failed_loads > 0 { format!(", {} failed", m.failed_loads) } else { String::new() }
    ));
}

/// The production tier of a produced atlas, in place of the host cache and the disk.
fn produced_ui(ui: &mut egui::Ui, p: &tessera_core::stream::produce::ProductionStats) {
    ui.label(RichText::new("Produced on the GPU").color(Color32::from_rgb(90, 200, 200)));
    ui.label(format!("{} tiles drawn, {} drawn again after an invalidation", p.produced, p.refreshed));
    ui.label(format!("{} queued; budget {} tiles a frame", p.queued, p.budget));
    ui.label(if p.stale > 0 {
        format!("{} stale, the oldest for {} frames", p.stale, p.oldest_stale_frames)
    } else {
        "nothing stale".to_owned()
    });
    ui.label(
        RichText::new("no host or disk tier: evicted tiles are drawn again when needed").color(Color32::GRAY),
    );
}

/// The disk-cache and network tiers of a remote atlas.
fn network_ui(ui: &mut egui::Ui, n: &tessera_core::format::atlas::NetworkStats) {
    if let Some(d) = &n.disk_cache {
        ui.label(RichText::new("Disk cache").color(Color32::from_rgb(200, 160, 60)));
        let lookups = d.hits + d.misses;
        let rate = if lookups > 0 { 100.0 * d.hits as f64 / lookups as f64 } else { 0.0 };
        ui.label(format!(
            "{:.1} MiB held, {} hits ({:.1} MiB, {rate:.0}%), {} written{}",
            mib(d.bytes),
            d.hits,
            mib(d.hit_bytes),
            d.writes,
            if d.rejected > 0 { format!(", {} rejected", d.rejected) } else { String::new() }
        ));
        ui.separator();
    }
    ui.label(
        RichText::new(if n.offline { "Network (offline: server unreachable at open)" } else { "Network" })
            .color(Color32::from_rgb(170, 110, 220)),
    );
    ui.label(format!(
        "{} requests ({:.1} blobs each), {:.1} MiB, {} in flight, latency p50 {:.1} ms, p95 {:.1} ms{}{}",
        n.requests,
        n.blobs as f64 / n.requests.max(1) as f64,
        mib(n.bytes),
        n.in_flight,
        n.latency_p50_ms,
        n.latency_p95_ms,
        if n.failures > 0 { format!(", {} failed", n.failures) } else { String::new() },
        if n.cancelled > 0 { format!(", {} cancelled", n.cancelled) } else { String::new() }
    ));
}

fn residency_ui(ui: &mut egui::Ui, m: &OverlayModel, controls: &mut OverlayControls) {
    let count = m.selectable_layers();
    if count > 0 {
        egui::ComboBox::from_label("layer").selected_text(m.layer_label(m.residency.layer)).show_ui(
            ui,
            |ui| {
                for i in 0..count {
                    ui.selectable_value(&mut controls.residency_layer, i, m.layer_label(i));
                }
            },
        );
    }
    if let Some(note) = m.residency_note() {
        ui.label(RichText::new(note).italics());
    }
    ui.horizontal_wrapped(|ui| {
        for s in TileState::ALL {
            let (rect, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
            ui.painter().rect_filled(rect, 2.0, color(s));
            ui.label(s.label());
        }
    });
    let width = (ui.available_width() - 8.0).max(32.0);
    for (i, map) in m.residency.mips.iter().enumerate() {
        let image =
            ColorImage::from_rgba_unmultiplied([map.tiles_x as usize, map.tiles_y as usize], &map.rgba());
        if let Some(h) = controls.maps.get_mut(i) {
            h.set(image, TextureOptions::NEAREST);
        } else {
            let h = ui.ctx().load_texture(format!("tessera residency {i}"), image, TextureOptions::NEAREST);
            controls.maps.push(h);
        }
        let scale = (width / map.tiles_x as f32).min(12.0);
        let size = egui::vec2(map.tiles_x as f32 * scale, map.tiles_y as f32 * scale);
        ui.label(format!(
            "mip {}: {}×{} tiles, {} in VRAM, {} in flight",
            map.mip,
            map.tiles_x,
            map.tiles_y,
            map.count(TileState::Vram),
            map.count(TileState::InFlight)
        ));
        ui.image((controls.maps[i].id(), size));
    }
}

fn plot(ui: &mut egui::Ui, id: &str, name: &str, values: &[f64], color: Color32) {
    let last = values.last().copied().unwrap_or(0.0);
    ui.label(format!("{name}: {last:.1}"));
    let points: Vec<[f64; 2]> = values.iter().enumerate().map(|(i, v)| [i as f64, *v]).collect();
    Plot::new(id)
        .height(60.0)
        .show_axes([false, true])
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .include_y(0.0)
        .show(ui, |p| p.line(Line::new(name, points).color(color)));
}

const LATENCY_MEAN: Color32 = Color32::from_rgb(230, 230, 240);
const LATENCY_MAX: Color32 = Color32::from_rgb(235, 110, 80);

/// Request-to-resident latency, mean and max, on the frame axis of the other plots;
/// frames where nothing arrived have no point.
fn latency_plot(ui: &mut egui::Ui, m: &OverlayModel) {
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing.x = 4.0;
        ui.label("request-to-resident ms:");
        match m.latency_last {
            Some(l) => {
                ui.label(RichText::new(format!("mean {:.1}", l.mean_ms)).color(LATENCY_MEAN));
                ui.label(RichText::new(format!("max {:.1}", l.max_ms)).color(LATENCY_MAX));
                ui.label(format!("({:.1} frames)", l.mean_frames));
            }
            None => {
                ui.label("nothing arrived lately");
            }
        }
    });
    let last_x = m.frame_ms.len().saturating_sub(1) as f64;
    let mean = PlotPoints::from(m.latency_mean_ms.clone());
    let max = PlotPoints::from(m.latency_max_ms.clone());
    Plot::new("tessera latency")
        .height(60.0)
        .show_axes([false, true])
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .include_x(0.0)
        .include_x(last_x)
        .include_y(0.0)
        .show(ui, |p| {
            p.line(Line::new("max ms", max).color(LATENCY_MAX));
            p.line(Line::new("mean ms", mean).color(LATENCY_MEAN));
        });
}

fn plots_ui(ui: &mut egui::Ui, m: &OverlayModel) {
    plot(ui, "tessera frame ms", "frame ms", &m.frame_ms, Color32::LIGHT_GRAY);
    plot(ui, "tessera uploads", "uploads / frame", &m.uploads, color(TileState::Vram));
    plot(ui, "tessera misses", "misses / frame", &m.misses, color(TileState::InFlight));
    latency_plot(ui, m);
    plot(ui, "tessera hit rate", "host hit rate %", &m.hit_rate_pct, color(TileState::Host));
}

fn controls_ui(ui: &mut egui::Ui, c: &mut OverlayControls) {
    ui.add(egui::Slider::new(&mut c.pool_mib, 4..=1024).logarithmic(true).text("pool MiB"));
    ui.add(egui::Slider::new(&mut c.mip_bias, -2.0..=4.0).text("mip bias"));
    ui.add(egui::Slider::new(&mut c.upload_budget, 1..=1024).logarithmic(true).text("uploads / frame (max)"))
        .on_hover_text("The most tiles uploaded per frame; an adaptive budget stays at or below it");
    ui.add(egui::Slider::new(&mut c.host_budget_mib, 16..=4096).logarithmic(true).text("host MiB"));
    ui.checkbox(&mut c.freeze_feedback, "freeze feedback");
    egui::ComboBox::from_id_salt("tessera feedback stride")
        .selected_text(feedback_stride_label(c.feedback_stride))
        .show_ui(ui, |ui| {
            for s in FEEDBACK_STRIDES {
                ui.selectable_value(&mut c.feedback_stride, s, feedback_stride_label(s));
            }
        });
    egui::ComboBox::from_label("debug view").selected_text(c.debug_view.label()).show_ui(ui, |ui| {
        for v in DebugView::ALL {
            ui.selectable_value(&mut c.debug_view, v, v.label());
        }
    });
    ui.horizontal(|ui| {
        if ui.button("flush VRAM").clicked() {
            c.flush_vram = true;
        }
        if ui.button("flush host cache").clicked() {
            c.flush_host = true;
        }
    });
}

/// Draws the progress of a background bake: the file, a bar with the tiles written,
/// the time left and what the baker is doing.
pub fn bake_progress_ui(ui: &mut egui::Ui, p: &BakeProgress) {
    ui.label(RichText::new(format!("Baking {}", p.name)).strong());
    let bar = egui::ProgressBar::new(p.fraction() as f32).text(p.tiles_text());
    ui.add(if p.total == 0 { bar.animate(true) } else { bar });
    ui.label(p.eta_text());
    if !p.stage.is_empty() {
        ui.label(RichText::new(&p.stage).weak());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every text the overlay draws for `model`, from a headless egui frame.
    fn texts(model: &OverlayModel) -> Vec<String> {
        let ctx = egui::Context::default();
        let mut controls = OverlayControls::default();
        let mut out = ctx.run_ui(egui::RawInput::default(), |ui| overlay_ui(ui, model, &mut controls));
        out.textures_delta.clear();
        let mut texts = Vec::new();
        fn walk(shape: &egui::Shape, texts: &mut Vec<String>) {
            match shape {
                egui::Shape::Text(t) => texts.push(t.galley.job.text.clone()),
                egui::Shape::Vec(v) => v.iter().for_each(|s| walk(s, texts)),
                _ => {}
            }
        }
        out.shapes.iter().for_each(|c| walk(&c.shape, &mut texts));
        texts
    }

    /// A produced atlas shows its production tier in place of the host cache and the
    /// disk; an atlas read from a file shows those.
    #[test]
    fn a_produced_atlas_shows_its_production_tier() {
        let stats = tessera_core::stream::produce::ProductionStats {
            queued: 7,
            stale: 3,
            oldest_stale_frames: 2,
            produced: 120,
            refreshed: 18,
            budget: 64,
        };
        let model = OverlayModel::default().with_production(Some(stats));
        let shown = texts(&model).join("\n");
        assert!(shown.contains("Produced on the GPU"), "{shown}");
        assert!(shown.contains("120 tiles drawn, 18 drawn again"), "{shown}");
        assert!(shown.contains("3 stale, the oldest for 2 frames"), "{shown}");
        assert!(!shown.contains("Host cache"), "{shown}");
        let streamed = texts(&OverlayModel::default()).join("\n");
        assert!(streamed.contains("Host cache") && !streamed.contains("Produced"), "{streamed}");
    }

    #[test]
    fn debug_views_cycle_through_tile_borders_and_parse_by_name() {
        let mut v = DebugView::Off;
        let mut seen = vec![];
        for _ in 0..4 {
            seen.push(v.index());
            v = v.next();
        }
        assert_eq!((seen, v), (vec![0, 1, 2, 3], DebugView::Off));
        assert_eq!(DebugView::ALL.map(DebugView::index), [0, 1, 2, 3]);
        for v in DebugView::ALL {
            assert_eq!(DebugView::parse(v.label()), Some(v));
            assert_eq!(DebugView::parse(v.short_name()), Some(v));
            assert_eq!(DebugView::parse(&v.index().to_string()), Some(v));
        }
        assert_eq!(DebugView::parse("Tile-Borders"), Some(DebugView::TileBorders));
        assert_eq!((DebugView::parse("4"), DebugView::parse("wireframe")), (None, None));
    }

    #[test]
    fn feedback_strides_are_labelled_by_block() {
        assert_eq!(FEEDBACK_STRIDES.map(feedback_stride_label)[1], "feedback: 1 px in 2×2");
        assert_eq!(feedback_stride_label(8), "feedback: 1 px in 8×8");
        let c = OverlayControls::new(64, 0.0, 32, 256, 4, &[("H", "overlay")]);
        assert_eq!((c.feedback_stride, c.residency_layer, c.keys.len()), (4, 0, 1));
    }
}
