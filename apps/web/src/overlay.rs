//! The overlay over the streamed atlas: the native viewer's tier-residency panel
//! (`tessera_egui`) with the page's own figures (requests, bytes fetched, tiles decoded
//! per second, the median frame time), a corner with the overlay's checkbox and the
//! camera's hints, and the settings the user changes applied to the virtual textures.
//! [`OverlayPainter`] draws egui's output over the canvas with egui-wgpu.

use tessera::core::stream::stats::StatsSnapshot;
use tessera::{GpuContext, StreamFrame, VirtualTextures};
use tessera_egui::{DebugView, FrameSample, History, Latency, OverlayControls, OverlayModel, overlay_ui};

/// Keys and what they do, for the overlay's help panel and the docs.
pub const KEYS: &[(&str, &str)] = &[
    ("drag", "pan over the plane (camera=free)"),
    ("right drag", "turn around the point looked at"),
    ("wheel", "zoom"),
    ("W A S D", "move forward / left / back / right"),
    ("Q E", "down / up"),
    ("Shift", "move four times faster"),
    ("1 2", "views: the whole plane, the end of the flyover"),
    ("C", "cut to the next view"),
    ("P", "play the flyover path"),
    ("H", "show / hide the overlay"),
    ("F", "freeze feedback"),
    ("M", "next debug view: mip colours, fallback depth, tile borders, off"),
];

/// Frames of history in the overlay's plots (ten seconds at 60 Hz).
const HISTORY_FRAMES: usize = 600;

/// The page's figures the overlay shows beside the engine's.
#[derive(Clone, Copy, Debug, Default)]
pub struct PageFigures {
    /// Range requests answered (or failed).
    pub requests: u64,
    /// Body bytes fetched.
    pub bytes: u64,
    /// Requests not answered yet.
    pub in_flight: usize,
    /// Requests that failed.
    pub failures: u64,
    /// Tiles decoded in all.
    pub tiles_decoded: u64,
    /// Tiles decoded per second over the last second.
    pub tiles_per_s: f64,
    /// Median of the recent frame times, milliseconds.
    pub frame_ms_median: Option<f64>,
    /// The camera's name (`static`, `fly`, `free`).
    pub camera: &'static str,
    /// The disk tier's figures (the page's Cache Storage), `None` while it is off.
    pub disk: Option<DiskFigures>,
}

/// What the disk tier holds and has served.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskFigures {
    /// Bytes held.
    pub bytes_held: u64,
    /// Its byte budget.
    pub budget: u64,
    /// Blocks read from it.
    pub hits: u64,
    /// Bytes read from it.
    pub hit_bytes: u64,
}

/// The settings last applied to the engine, to notice changes in the overlay.
#[derive(Clone, Copy, PartialEq)]
struct Applied {
    mip_bias: f32,
    upload_budget: usize,
    host_budget_mib: u32,
    freeze: bool,
    feedback_stride: u32,
    debug: DebugView,
}

impl Applied {
    fn of(c: &OverlayControls) -> Self {
        Self {
            mip_bias: c.mip_bias,
            upload_budget: c.upload_budget,
            host_budget_mib: c.host_budget_mib,
            freeze: c.freeze_feedback,
            feedback_stride: c.feedback_stride,
            debug: c.debug_view,
        }
    }
}

/// The overlay's egui context, controls and history.
pub struct Overlay {
    ctx: egui::Context,
    controls: OverlayControls,
    history: History,
    applied: Applied,
    pool_mib: u32,
    shown: bool,
}

impl Overlay {
    /// The overlay of `vt`, its controls at `vt`'s settings, shown or not.
    pub fn new(vt: &VirtualTextures, shown: bool) -> Self {
        let config = vt.config();
        let s = &config.streaming;
        let mut controls = OverlayControls::new(
            config.pool_mib,
            s.mip_bias,
            s.max_uploads_per_frame,
            s.host_cache_mib,
            s.feedback_stride,
            KEYS,
        );
        controls.freeze_feedback = vt.feedback_frozen();
        controls.debug_view =
            DebugView::ALL.into_iter().find(|v| v.index() == config.debug_view).unwrap_or_default();
        let ctx = egui::Context::default();
        ctx.set_visuals(egui::Visuals::dark());
        Self {
            ctx,
            applied: Applied::of(&controls),
            pool_mib: config.pool_mib,
            controls,
            history: History::new(HISTORY_FRAMES, 1.0),
            shown,
        }
    }

    /// The egui context, for [`OverlayPainter::paint`].
    pub fn egui(&self) -> &egui::Context {
        &self.ctx
    }

    /// Shows `thumbnail` (the tile pool registered with the painter, and its size in
    /// texels) in the tiers panel.
    pub fn set_pool_thumbnail(&mut self, thumbnail: Option<(egui::TextureId, [u32; 2])>) {
        self.controls.pool_thumbnail = thumbnail;
    }

    /// Whether the panel is shown.
    pub fn shown(&self) -> bool {
        self.shown
    }

    /// Shows or hides the panel (the corner with its checkbox stays).
    pub fn toggle(&mut self) {
        self.shown = !self.shown;
    }

    /// Freezes or thaws feedback (applied with the other settings).
    pub fn toggle_freeze(&mut self) {
        self.controls.freeze_feedback = !self.controls.freeze_feedback;
    }

    /// Moves to the next debug view (applied with the other settings).
    pub fn next_debug_view(&mut self) {
        self.controls.debug_view = self.controls.debug_view.next();
    }

    /// Whether egui wants the pointer (it is over the overlay, or dragging in it),
    /// after the last frame.
    pub fn wants_pointer(&self) -> bool {
        self.ctx.egui_wants_pointer_input()
    }

    /// Whether egui wants the keyboard (a text field has focus), after the last frame.
    pub fn wants_keyboard(&self) -> bool {
        self.ctx.egui_wants_keyboard_input()
    }

    /// Adds a frame to the plots: `t_s` seconds since start, `frame_ms` since the last
    /// frame, what streaming did (`stream`) and the tiers' statistics.
    pub fn record(&mut self, t_s: f64, frame_ms: f64, stream: &StreamFrame, stats: &StatsSnapshot) {
        self.history.push(
            t_s,
            stats,
            FrameSample {
                frame_ms,
                uploads: stream.uploads,
                misses: stream.misses,
                host_hit_rate: stats.host_hit_rate(),
                latency: Latency::from_frame(
                    stream.latency_ms_mean,
                    stream.latency_ms_max,
                    stream.latency_frames_mean,
                ),
            },
        );
    }

    /// Runs egui for one frame on `raw` (the page's input): the corner, and when shown
    /// the panel of `vt` (whose tiers' statistics are `stats`) with the page's figures.
    pub fn run(
        &mut self,
        raw: egui::RawInput,
        vt: &VirtualTextures,
        stats: &StatsSnapshot,
        page: &PageFigures,
    ) -> egui::FullOutput {
        let model = self.shown.then(|| {
            OverlayModel::of_streaming(
                vt.atlas(),
                vt.residency(),
                vt.host_cache(),
                stats,
                &self.history,
                self.controls.residency_layer,
            )
            .with_production(vt.streamer().production_stats())
        });
        let (controls, shown) = (&mut self.controls, &mut self.shown);
        self.ctx.clone().run_ui(raw, |ui| {
            if let Some(model) = &model {
                egui::Panel::right("tessera overlay").default_size(340.0).show(ui, |ui| {
                    egui::ScrollArea::vertical().show(ui, |ui| {
                        page_ui(ui, page, model);
                        overlay_ui(ui, model, controls);
                    });
                });
            }
            corner_ui(ui, shown, page.camera);
        })
    }

    /// Applies the settings the user changed to `vt`; a new pool size once the slider is
    /// let go. Returns whether the pool was rebuilt (register it again with the painter).
    /// A pool that cannot be resized keeps its size (the error says why).
    pub fn apply(&mut self, ctx: &GpuContext, vt: &mut VirtualTextures) -> Result<bool, String> {
        let mut resized = false;
        let dragging = self.ctx.input(|i| i.pointer.any_down());
        if self.controls.pool_mib != self.pool_mib && !dragging {
            let mib = self.controls.pool_mib;
            match vt.set_pool_mib(ctx, mib) {
                Ok(()) => {
                    self.pool_mib = mib;
                    resized = true;
                }
                Err(e) => {
                    self.controls.pool_mib = self.pool_mib;
                    return Err(format!("cannot resize the tile pool to {mib} MiB: {e}"));
                }
            }
        }
        let now = Applied::of(&self.controls);
        if now != self.applied {
            vt.set_mip_bias(now.mip_bias);
            vt.set_upload_budget(now.upload_budget);
            vt.set_host_budget_mib(now.host_budget_mib);
            vt.set_feedback_frozen(now.freeze);
            vt.set_debug_view(now.debug.index());
            self.applied = now;
            vt.set_feedback_stride(now.feedback_stride).map_err(|e| e.to_string())?;
        }
        if std::mem::take(&mut self.controls.flush_vram) {
            vt.flush_vram();
        }
        if std::mem::take(&mut self.controls.flush_host) {
            vt.flush_host_cache();
        }
        Ok(resized)
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// The page's own figures: the network, the decoder and the frame time.
fn page_ui(ui: &mut egui::Ui, p: &PageFigures, m: &OverlayModel) {
    egui::CollapsingHeader::new(egui::RichText::new("Browser").strong()).default_open(true).show(ui, |ui| {
        ui.label(format!(
            "{} range requests, {:.1} MiB fetched, {} in flight{}",
            p.requests,
            mib(p.bytes),
            p.in_flight,
            if p.failures > 0 { format!(", {} failed", p.failures) } else { String::new() }
        ));
        ui.label(format!("{} tiles decoded, {:.0} tiles/s", p.tiles_decoded, p.tiles_per_s));
        ui.label(format!(
            "host cache {:.1} of {:.0} MiB ({} tiles)",
            mib(m.host_bytes),
            mib(m.host_budget_bytes),
            m.host_tiles
        ));
        ui.label(match &p.disk {
            Some(d) => format!(
                "disk tier {:.1} of {:.0} MiB, {:.1} MiB read from it ({} blocks)",
                mib(d.bytes_held),
                mib(d.budget),
                mib(d.hit_bytes),
                d.hits
            ),
            None => "disk tier off (#stats says why)".to_owned(),
        });
        ui.label(match p.frame_ms_median {
            Some(ms) => format!("frame time {ms:.1} ms (median), {} camera", p.camera),
            None => format!("{} camera", p.camera),
        });
    });
}

/// The top-left corner: the overlay's checkbox and how to move the camera.
fn corner_ui(ui: &mut egui::Ui, shown: &mut bool, camera: &str) {
    egui::Area::new(egui::Id::unique("tessera corner")).anchor(egui::Align2::LEFT_TOP, [8.0, 8.0]).show(
        ui.ctx(),
        |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.checkbox(shown, "overlay (H)");
                if camera == "free" {
                    ui.label("drag: pan · right drag: turn · wheel: zoom · WASD QE: move");
                } else {
                    ui.label(format!("{camera} camera: ?camera=free to move it"));
                }
            });
        },
    );
}

/// egui's painter on the canvas: its textures, buffers and pipeline (egui-wgpu).
pub struct OverlayPainter {
    renderer: egui_wgpu::Renderer,
    /// The tile pool, registered for the thumbnail.
    pool: Option<egui::TextureId>,
}

impl OverlayPainter {
    /// A painter drawing into `format` targets (the canvas' sRGB view).
    pub fn new(ctx: &GpuContext, format: wgpu::TextureFormat) -> Self {
        Self { renderer: egui_wgpu::Renderer::new(&ctx.device, format, Default::default()), pool: None }
    }

    /// Records `output` (egui's frame) over `view` (`size` pixels, at `pixels_per_point`)
    /// into `encoder`: textures and buffers are written now, the pass loads what the
    /// scene drew. Returns the textures to free once `encoder` is submitted.
    pub fn paint(
        &mut self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        view: &wgpu::TextureView,
        size: (u32, u32),
        mut output: egui::FullOutput,
        egui_ctx: &egui::Context,
    ) -> Vec<egui::TextureId> {
        let ppp = output.pixels_per_point;
        let jobs = egui_ctx.tessellate(output.shapes, ppp);
        let screen = egui_wgpu::ScreenDescriptor { size_in_pixels: [size.0, size.1], pixels_per_point: ppp };
        let (device, queue) = (&ctx.device, &ctx.queue);
        for (id, deltas) in output.textures_delta.set.drain() {
            for delta in &deltas {
                self.renderer.update_texture(device, queue, id, delta);
            }
        }
        let callbacks = self.renderer.update_buffers(device, queue, encoder, &jobs, &screen);
        if !callbacks.is_empty() {
            queue.submit(callbacks);
        }
        let pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("overlay"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Load, store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        self.renderer.render(&mut pass.forget_lifetime(), &jobs, &screen);
        output.textures_delta.free.drain().collect()
    }

    /// Registers `vt`'s tile pool as an egui texture (for the overlay's thumbnail),
    /// replacing the one registered before; returns it with its size in texels.
    pub fn register_pool(&mut self, ctx: &GpuContext, vt: &VirtualTextures) -> (egui::TextureId, [u32; 2]) {
        if let Some(id) = self.pool.take() {
            self.renderer.free_texture(&id);
        }
        let id =
            self.renderer.register_native_texture(&ctx.device, vt.pool().view(), wgpu::FilterMode::Linear);
        self.pool = Some(id);
        let (w, h) = vt.pool().texels();
        (id, [w, h])
    }

    /// Frees the textures [`OverlayPainter::paint`] returned, after the submit.
    pub fn free(&mut self, ids: &[egui::TextureId]) {
        for id in ids {
            self.renderer.free_texture(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{InputEvent, InputRouter};

    /// The corner's checkbox, clicked through the page's input path, hides the panel.
    #[test]
    fn the_corner_checkbox_toggles_the_panel() {
        let ctx = egui::Context::default();
        let mut router = InputRouter::default();
        let mut shown = true;
        let mut frame = |events: &[InputEvent], shown: &mut bool| {
            let (events, camera) =
                router.route(events, ctx.egui_wants_pointer_input(), ctx.egui_wants_keyboard_input());
            let raw = egui::RawInput {
                screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(800.0, 450.0))),
                events,
                ..Default::default()
            };
            let mut output = ctx.run_ui(raw, |ui| {
                page_ui(ui, &PageFigures { camera: "free", ..Default::default() }, &OverlayModel::default());
                corner_ui(ui, shown, "free");
            });
            output.textures_delta.clear();
            assert!(!output.shapes.is_empty());
            camera
        };
        let modifiers = egui::Modifiers::default();
        let at = [22.0, 24.0];
        // An area is laid out unseen in its first frame.
        frame(&[], &mut shown);
        frame(&[InputEvent::PointerMove { pos: at }], &mut shown);
        let camera = frame(
            &[
                InputEvent::PointerButton { pos: at, button: 0, pressed: true, modifiers },
                InputEvent::PointerButton { pos: at, button: 0, pressed: false, modifiers },
            ],
            &mut shown,
        );
        assert!(!shown, "the click unticked the checkbox");
        assert!(!camera.moved(), "a click on the overlay does not move the camera");
    }
}
