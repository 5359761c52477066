//! The window, the GPU state and the frame loop: the scene and the overlay are drawn
//! into an offscreen target of the window's size, which is blitted to the surface and
//! read back for `--screenshot`. Inputs that must be baked first are baked on a
//! background thread while the window shows the progress over the current scene.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use tessera::core::scene::camera::Camera;
use tessera_egui::{
    BakeProgress, DebugView, FrameSample, History, Latency, OverlayControls, OverlayModel, bake_progress_ui,
    overlay_ui,
};
use tessera_tools::capture::write_png;
use winit::application::ApplicationHandler;
use winit::dpi::PhysicalSize;
use winit::event::{ElementState, MouseButton, MouseScrollDelta, WindowEvent};
use winit::event_loop::{ActiveEventLoop, ControlFlow, EventLoop};
use winit::keyboard::{KeyCode, PhysicalKey};
use winit::window::{Window, WindowId};

use crate::Args;
use crate::bake::{BakeTask, Opened, Resolved};
use crate::camera::{Mode, Rig, SceneCameras};
use crate::gfx::{Gfx, clear, draw_egui, load_scene};
use crate::input::Input;
use crate::outcome::{Outcome, after_frame};

/// Keys and what they do, for the overlay's help panel.
const KEYS: &[(&str, &str)] = &[
    ("W A S D", "fly forward / left / back / right"),
    ("Q E", "down / up"),
    ("Shift", "move four times faster"),
    ("right drag", "look around (fly) or turn around the pivot (orbit)"),
    ("scroll", "zoom"),
    ("O", "switch between fly and orbit"),
    ("1 2 3 4", "camera presets: static, flyover, orbit, cut (scenes: overview, walk, fly, cut)"),
    ("C", "cut to the next view"),
    ("P", "play the --camera path"),
    ("V", "vsync on / off"),
    ("H", "show / hide the overlay"),
    ("F", "freeze feedback"),
    ("M", "next debug view: mip colours, fallback depth, tile borders, off"),
    ("drop a file", "open an atlas, or bake an image or a glTF scene (in the background) and open it"),
    ("Esc", "quit"),
];

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

/// The viewer's state across frames.
struct App {
    args: Args,
    /// What to show once the window is up.
    pending: Option<Opened>,
    /// The bake running in the background, if any.
    bake: Option<BakeTask>,
    /// The last error, shown in the window until dismissed.
    notice: Option<String>,
    gfx: Option<Gfx>,
    /// The presets and `--camera` path of the scene shown (the built-in scene's until
    /// a material scene opens).
    cameras: SceneCameras,
    view: usize,
    rig: Rig,
    playing: Option<u32>,
    keys_down: HashSet<KeyCode>,
    looking: bool,
    cursor: Option<(f64, f64)>,
    vsync: bool,
    overlay: bool,
    controls: OverlayControls,
    /// `None` after the scene was rebuilt: apply every control again.
    applied: Option<Applied>,
    history: History,
    /// The camera of the previous frame, to extrapolate the next ones from.
    previous_camera: Option<Camera>,
    frame: u64,
    start: Instant,
    last_frame: Instant,
    error: Option<anyhow::Error>,
}

/// Frames ahead of a moving camera that the viewer predicts (as `tessera demo` does
/// along its path; BENCHMARKS.md, "Prediction in the renderer").
const PREDICT_FRAMES: f32 = 8.0;

/// Whether the camera moved since `previous` (enough to predict where it goes).
fn camera_moved(previous: &Camera, now: &Camera) -> bool {
    previous.position.distance_squared(now.position) > 1e-10
        || previous.target.distance_squared(now.target) > 1e-10
}

/// Opens the window and runs until it closes (or the screenshot is written).
pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let input = Input::classify(args.input.as_deref())?;
    // The built-in meshes' cameras now; a glTF or named scene's once it is loaded.
    let cameras = match &input {
        Input::Gltf(_) | Input::Named(_) => {
            if let Some(spec) = &args.camera {
                crate::camera::check_spec(spec)?;
            }
            SceneCameras::new(None, None)?
        }
        Input::Builtin | Input::Atlas(_) | Input::Image(_) => {
            SceneCameras::new(args.camera.as_deref(), None)?
        }
    };
    let (pending, bake) = match crate::bake::resolve(&input)? {
        Resolved::Ready(opened) => (Some(opened), None),
        Resolved::Bake(job) => (None, Some(job.spawn()?)),
    };
    let mut controls = OverlayControls::new(
        args.pool_mib,
        args.mip_bias,
        args.upload_budget.max(1),
        args.host_cache_mib,
        args.feedback_stride,
        KEYS,
    );
    controls.debug_view = args.debug_view;
    let mut app = App {
        rig: Rig::from_camera(&cameras.path.camera_at(0), Mode::Orbit, cameras.unit),
        pending,
        bake,
        notice: None,
        gfx: None,
        cameras,
        view: 0,
        playing: None,
        keys_down: HashSet::new(),
        looking: false,
        cursor: None,
        vsync: !args.no_vsync,
        overlay: !args.no_overlay,
        applied: None,
        controls,
        history: History::default(),
        previous_camera: None,
        frame: 0,
        start: Instant::now(),
        last_frame: Instant::now(),
        error: None,
        args,
    };
    let event_loop = EventLoop::new()
        .context("opening the display (no DISPLAY? run under `xvfb-run -a` for headless use)")?;
    event_loop.set_control_flow(ControlFlow::Poll);
    event_loop.run_app(&mut app).context("running the event loop")?;
    match app.error {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

impl App {
    /// Stops with `e` (the first error only): closes the window at once, so no further
    /// frame is drawn, and `main` prints `e` once.
    fn fail(&mut self, event_loop: &ActiveEventLoop, e: anyhow::Error) {
        self.error.get_or_insert(e);
        self.gfx = None;
        event_loop.exit();
    }

    fn key_pressed(&mut self, event_loop: &ActiveEventLoop, key: KeyCode) {
        match key {
            KeyCode::Escape => event_loop.exit(),
            KeyCode::Digit1 | KeyCode::Digit2 | KeyCode::Digit3 | KeyCode::Digit4 => {
                let i = match key {
                    KeyCode::Digit1 => 0,
                    KeyCode::Digit2 => 1,
                    KeyCode::Digit3 => 2,
                    _ => 3,
                };
                self.jump_to_view(i);
            }
            KeyCode::KeyC => self.jump_to_view((self.view + 1) % self.cameras.views.len().max(1)),
            KeyCode::KeyO => {
                self.rig.mode = if self.rig.mode == Mode::Fly { Mode::Orbit } else { Mode::Fly };
            }
            KeyCode::KeyP => self.playing = Some(0),
            KeyCode::KeyT => self.place_decal(),
            KeyCode::KeyH => self.overlay = !self.overlay,
            KeyCode::KeyF => self.controls.freeze_feedback = !self.controls.freeze_feedback,
            KeyCode::KeyM => self.controls.debug_view = self.controls.debug_view.next(),
            KeyCode::KeyV => {
                self.vsync = !self.vsync;
                if let Some(g) = &mut self.gfx {
                    g.present.config.present_mode = if self.vsync {
                        wgpu::PresentMode::AutoVsync
                    } else {
                        wgpu::PresentMode::AutoNoVsync
                    };
                    g.present.configure(&g.ctx.device);
                    if let Some(scene) = &mut g.scene
                        && let Err(e) = scene.vt.set_target_frame_ms(crate::gfx::upload_target(self.vsync))
                    {
                        eprintln!("error: {e}");
                    }
                }
            }
            _ => {}
        }
    }

    /// The terrain: places a yellow marking on the ground 3 units ahead of the camera and
    /// invalidates the tiles under it, which are drawn again within a few frames.
    fn place_decal(&mut self) {
        let Some(g) = self.gfx.as_mut() else { return };
        let Some(scene) = g.scene.as_mut().filter(|s| s.opened.terrain.is_some()) else { return };
        let camera = self.rig.camera();
        let ahead = camera.position + (camera.target - camera.position).normalize_or_zero() * 3.0;
        let decal = tessera::core::scene::terrain::TerrainScene::marking_at(ahead.x, ahead.z, 0.4);
        match scene.drawer.add_terrain_decal(&g.ctx.queue, decal) {
            Ok(Some(rect)) => {
                let tiles = scene.vt.invalidate(0, rect);
                println!("decal at ({:.1}, {:.1}): {tiles} tiles to draw again", ahead.x, ahead.z);
            }
            Ok(None) => {}
            Err(e) => self.report(anyhow::Error::new(e).context("placing a decal")),
        }
    }

    /// Opens a dropped file: at once when it is an atlas or has a fresh bake, else
    /// after baking it (or loading its scene) in the background (one bake at a time).
    fn open(&mut self, path: &Path) {
        let result = match Input::classify(Some(path)).and_then(|input| crate::bake::resolve(&input)) {
            Ok(Resolved::Ready(opened)) => self.load(opened),
            Ok(Resolved::Bake(job)) => match &self.bake {
                Some(running) => {
                    Err(anyhow!("still baking {}; drop {} again once that is done", running.name(), job.name))
                }
                None => job.spawn().map(|task| self.bake = Some(task)),
            },
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            self.report(e.context(format!("cannot open {}", path.display())));
        }
    }

    /// Replaces the scene with `opened`; a material scene (or leaving one) also brings
    /// its own camera presets and moves the rig to the `--camera` path's start.
    fn load(&mut self, opened: Opened) -> Result<()> {
        let Some(g) = &mut self.gfx else {
            self.pending = Some(opened);
            return Ok(());
        };
        let scene = load_scene(&g.ctx, &opened, &self.args, self.controls.pool_mib, self.vsync)?;
        let was_material =
            g.scene.as_ref().is_some_and(|s| s.opened.scene.is_some() || s.opened.terrain.is_some());
        let material = opened.scene.as_deref();
        let spec = self.args.camera.as_deref();
        let cameras_of = |spec| match &opened.terrain {
            Some(terrain) => SceneCameras::terrain(spec, terrain),
            None => SceneCameras::new(spec, material),
        };
        // Atlases on the built-in meshes share one set of cameras, and the view stays.
        let cameras = if was_material || material.is_some() || opened.terrain.is_some() {
            Some(match cameras_of(spec) {
                Ok(c) => c,
                // Without a window to look at, a camera that does not fit is the viewer's error.
                Err(e) if self.args.screenshot.is_some() => return Err(e),
                Err(e) => {
                    let e = e.context(format!("{} opens with its default camera", opened.name));
                    eprintln!("error: {}", tessera::core::error_text::chain(e.as_ref()));
                    self.notice = Some(tessera::core::error_text::chain(e.as_ref()));
                    cameras_of(None)?
                }
            })
        } else {
            None
        };
        g.window.set_title(&window_title(&opened.name));
        g.set_scene(scene);
        if let Some(cameras) = cameras {
            println!("camera presets (keys 1-4): {}", cameras.names.join(", "));
            self.rig = Rig::from_camera(&cameras.path.camera_at(0), self.rig.mode, cameras.unit);
            self.cameras = cameras;
            self.view = 0;
            self.playing = None;
        }
        self.applied = None;
        Ok(())
    }

    /// Logs an error and shows it in the window; the current scene keeps running.
    fn report(&mut self, e: anyhow::Error) {
        eprintln!("error: {}", tessera::core::error_text::chain(e.as_ref()));
        self.notice = Some(tessera::core::error_text::chain(e.as_ref()));
    }

    /// Opens the atlas of a finished bake, or reports why it failed. Without a window to
    /// look at (`--screenshot`), a failed bake is the viewer's error.
    fn poll_bake(&mut self) -> Result<()> {
        let Some(result) = self.bake.as_mut().and_then(BakeTask::finished) else { return Ok(()) };
        let name = self.bake.take().map(|b| b.name().to_owned()).unwrap_or_default();
        let result = result.and_then(|opened| {
            let how = if opened.baked { "baked" } else { "using the cached bake of" };
            println!("{how} {name}: {}", opened.atlas.display());
            self.load(opened)
        });
        match result {
            Ok(()) => Ok(()),
            Err(e) if self.args.screenshot.is_some() => Err(e),
            Err(e) => {
                self.report(e.context(format!("cannot open {name}")));
                Ok(())
            }
        }
    }

    fn jump_to_view(&mut self, i: usize) {
        if let Some(c) = self.cameras.views.get(i) {
            self.view = i;
            self.playing = None;
            self.rig = Rig::from_camera(c, self.rig.mode, self.cameras.unit);
        }
    }

    fn move_rig(&mut self, dt: f32) {
        let k = |c| if self.keys_down.contains(&c) { 1.0 } else { 0.0 };
        let boost = if self.keys_down.contains(&KeyCode::ShiftLeft)
            || self.keys_down.contains(&KeyCode::ShiftRight)
        {
            4.0
        } else {
            1.0
        };
        let right = k(KeyCode::KeyD) - k(KeyCode::KeyA);
        let up = k(KeyCode::KeyE) - k(KeyCode::KeyQ);
        let forward = k(KeyCode::KeyW) - k(KeyCode::KeyS);
        if right != 0.0 || up != 0.0 || forward != 0.0 {
            self.playing = None;
            self.rig.fly(right, up, forward, dt, boost);
        }
    }

    /// The camera of this frame: the path in screenshot mode or while playing, else the rig.
    fn frame_camera(&mut self, dt: f32) -> Camera {
        if self.args.screenshot.is_some() {
            return self.cameras.path.camera_at(self.frame as u32);
        }
        self.move_rig(dt);
        if let Some(f) = self.playing {
            let path = &self.cameras.path;
            let c = path.camera_at(f);
            self.rig = Rig::from_camera(&c, self.rig.mode, self.cameras.unit);
            self.playing = (f < path.end_frame()).then_some(f + 1);
            return c;
        }
        self.rig.camera()
    }

    fn apply_controls(&mut self) {
        let now = Applied::of(&self.controls);
        let Some(g) = &mut self.gfx else { return };
        let Some(scene) = &g.scene else { return };
        // A new pool size resizes the pool in place once the slider is let go.
        let dragging = g.egui_ctx.input(|i| i.pointer.any_down());
        let pool_mib = scene.pool_mib;
        if self.controls.pool_mib != pool_mib && !dragging {
            match g.resize_pool(self.controls.pool_mib) {
                Ok(()) => self.applied = None,
                Err(e) => {
                    let e = e.context(format!("cannot rebuild the pool at {} MiB", self.controls.pool_mib));
                    eprintln!("error: {}", tessera::core::error_text::chain(e.as_ref()));
                    self.notice = Some(tessera::core::error_text::chain(e.as_ref()));
                    self.controls.pool_mib = pool_mib;
                }
            }
        }
        let Some(scene) = &mut g.scene else { return };
        let vt = &mut scene.vt;
        if Some(now) != self.applied {
            vt.set_mip_bias(now.mip_bias);
            vt.set_upload_budget(now.upload_budget);
            vt.set_host_budget_mib(now.host_budget_mib);
            vt.set_feedback_frozen(now.freeze);
            if let Err(e) = vt.set_feedback_stride(now.feedback_stride) {
                eprintln!("error: {e}");
            }
            vt.set_debug_view(now.debug.index());
            self.applied = Some(now);
        }
        if std::mem::take(&mut self.controls.flush_vram) {
            vt.flush_vram();
        }
        if std::mem::take(&mut self.controls.flush_host) {
            vt.flush_host_cache();
        }
    }

    /// Renders one frame; returns true when the screenshot was written and the viewer
    /// should exit. Draws nothing once the device is lost ([`after_frame`] stops the loop).
    fn redraw(&mut self) -> Result<bool> {
        let Some(size) = self.gfx.as_ref().map(|g| g.window.inner_size()) else { return Ok(false) };
        if size.width == 0 || size.height == 0 || self.gfx.as_ref().is_some_and(|g| g.ctx.lost().is_some()) {
            return Ok(false);
        }
        self.poll_bake()?;
        let now = Instant::now();
        let dt = (now - self.last_frame).as_secs_f32();
        self.last_frame = now;
        let camera = self.frame_camera(dt.min(0.1));
        self.apply_controls();
        let Some(g) = &mut self.gfx else { return Ok(false) };
        if g.scene.is_some() && self.args.lose_device_at == Some(self.frame) {
            g.ctx.device.destroy();
            // A driver loss is reported at once; a destroyed device once its queue is
            // empty, so wait for that. The wait's error is the loss, which the frame
            // below reports.
            let _ = g.ctx.wait_idle();
        }
        if (size.width, size.height) != g.target.size {
            g.resize(size);
        }
        let frame = self.frame;
        let mut encoder = g
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("viewer frame") });
        let aspect = size.width as f32 / size.height as f32;
        // The frame of the virtual textures, from `begin` to `finish` after the submit.
        let vt_frame = g.scene.as_mut().map(|scene| {
            let f = scene.vt.begin(&g.ctx, &mut encoder);
            scene.drawer.set_camera(&g.ctx.queue, &camera, aspect);
            // While the camera moves, the view it is heading for streams ahead of it.
            if let Some(previous) = self.previous_camera.as_ref().filter(|p| camera_moved(p, &camera)) {
                let ahead = camera.extrapolated(previous, PREDICT_FRAMES);
                scene.drawer.set_predicted_camera(&g.ctx.queue, &ahead, aspect);
                let half = (size.width.div_ceil(2), size.height.div_ceil(2));
                scene.drawer.draw_predicted(&mut encoder, f.vt(), half);
            }
            let stream = *f.stats();
            let stats = f.vt().stats();
            self.history.push(
                self.start.elapsed().as_secs_f64(),
                &stats,
                FrameSample {
                    frame_ms: f64::from(dt) * 1e3,
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
            (f, &scene.drawer, stats)
        });
        self.previous_camera = Some(camera);
        let raw = g.egui_state.take_egui_input(&g.window);
        let overlay = self.overlay;
        self.controls.pool_thumbnail = match (&vt_frame, g.pool_texture) {
            (Some((f, _, _)), Some(id)) => {
                let (w, h) = f.vt().pool().texels();
                Some((id, [w, h]))
            }
            _ => None,
        };
        let baking = self.bake.as_mut().map(|b| b.progress().clone());
        let (controls, history, notice) = (&mut self.controls, &self.history, &mut self.notice);
        let scene = vt_frame.as_ref();
        let mut full = g.egui_ctx.run_ui(raw, |ui| {
            if overlay && let Some((f, _, stats)) = scene {
                let model = OverlayModel::of_streaming(
                    f.vt().atlas(),
                    f.vt().residency(),
                    f.vt().host_cache(),
                    stats,
                    history,
                    controls.residency_layer,
                )
                .with_production(f.vt().streamer().production_stats());
                egui::Panel::right("tessera overlay").default_size(340.0).show(ui, |ui| {
                    egui::ScrollArea::vertical().show(ui, |ui| overlay_ui(ui, &model, controls));
                });
            }
            messages_ui(ui, baking.as_ref(), notice, scene.is_none());
        });
        g.egui_state.handle_platform_output(&g.window, full.platform_output);
        // egui-wgpu panics writing its buffers on a lost device (the virtual textures'
        // `begin` may just have found it lost): end the frame here instead.
        if let Some(lost) = g.ctx.lost() {
            full.textures_delta.clear();
            if let Some((f, _, _)) = vt_frame {
                let _ = f.finish(&g.ctx, encoder);
            }
            return Err(lost.into());
        }
        let ppp = full.pixels_per_point;
        let jobs = g.egui_ctx.tessellate(full.shapes, ppp);
        let screen =
            egui_wgpu::ScreenDescriptor { size_in_pixels: [size.width, size.height], pixels_per_point: ppp };
        let (device, queue) = (&g.ctx.device, &g.ctx.queue);
        for (id, deltas) in full.textures_delta.set.drain() {
            for d in &deltas {
                g.egui_renderer.update_texture(device, queue, id, d);
            }
        }

        match &vt_frame {
            Some((f, drawer, _)) => {
                drawer.draw_vt(&mut encoder, &g.target.color_view, &g.target.depth_view, f.vt(), None);
            }
            None => clear(&mut encoder, &g.target.color_view),
        }
        let egui_cmds = g.egui_renderer.update_buffers(device, queue, &mut encoder, &jobs, &screen);
        draw_egui(&g.egui_renderer, &mut encoder, &g.target.color_view, &jobs, &screen);
        // In screenshot mode frames count once the scene is up (after any bake).
        let last = self.args.screenshot.is_some()
            && vt_frame.is_some()
            && frame + 1 >= u64::from(self.args.frames.max(1));
        if last {
            g.target.copy_out(&mut encoder);
        }
        let (surface_texture, reconfigure) = g.present.blit(&g.ctx, &g.window, &mut encoder)?;
        // egui's buffer uploads go first; the frame's encoder is submitted by `finish`.
        queue.submit(egui_cmds);
        let streamed = vt_frame.is_some();
        match vt_frame {
            Some((f, _, _)) => {
                f.finish(&g.ctx, encoder)?;
            }
            None => {
                queue.submit([encoder.finish()]);
            }
        }
        if let Some(t) = surface_texture {
            queue.present(t);
        }
        if reconfigure {
            g.present.configure(device);
        }
        for id in full.textures_delta.free.drain() {
            g.egui_renderer.free_texture(&id);
        }
        if streamed {
            self.frame += 1;
        }
        if last && let Some(path) = &self.args.screenshot {
            let rgba = g.target.read(&g.ctx)?;
            write_png(path, g.target.size, &rgba).with_context(|| format!("writing {}", path.display()))?;
            println!("screenshot after {} frames written to {}", self.frame, path.display());
            return Ok(true);
        }
        Ok(false)
    }
}

/// The window title naming what is shown: the scene name or the file name.
fn window_title(name: &str) -> String {
    format!("Tessera viewer: {name}")
}

/// The bake progress, the last error (until dismissed) and, with nothing to show, how
/// to open something.
fn messages_ui(ui: &mut egui::Ui, baking: Option<&BakeProgress>, notice: &mut Option<String>, empty: bool) {
    let ctx = ui.ctx().clone();
    let mut y = 16.0;
    if let Some(p) = baking {
        let shown = egui::Window::new("Baking")
            .anchor(egui::Align2::LEFT_TOP, [16.0, y])
            .collapsible(false)
            .resizable(false)
            .default_width(320.0)
            .show(&ctx, |ui| bake_progress_ui(ui, p));
        y += shown.map_or(0.0, |r| r.response.rect.height() + 12.0);
    }
    if let Some(text) = notice.as_deref() {
        let mut dismiss = false;
        egui::Window::new("Error")
            .anchor(egui::Align2::LEFT_TOP, [16.0, y])
            .collapsible(false)
            .resizable(false)
            .default_width(320.0)
            .show(&ctx, |ui| {
                ui.label(egui::RichText::new(text).color(egui::Color32::from_rgb(255, 140, 120)));
                dismiss = ui.button("dismiss").clicked();
            });
        if dismiss {
            *notice = None;
        }
    } else if empty && baking.is_none() {
        egui::Window::new("Nothing open")
            .anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0])
            .collapsible(false)
            .resizable(false)
            .show(&ctx, |ui| {
                ui.label("Drop an image, a glTF scene or a Tessera atlas (.tsa) on the window.")
            });
    }
}

impl ApplicationHandler for App {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.gfx.is_some() {
            return;
        }
        let title = match (&self.pending, &self.bake) {
            (Some(opened), _) => window_title(&opened.name),
            (None, Some(bake)) => format!("Tessera viewer: opening {}", bake.name()),
            (None, None) => "Tessera viewer".to_owned(),
        };
        let attrs = Window::default_attributes()
            .with_title(title)
            .with_inner_size(PhysicalSize::new(self.args.size.0, self.args.size.1));
        let result = event_loop
            .create_window(attrs)
            .context("creating the window")
            .and_then(|w| Gfx::new(Arc::new(w), &self.args));
        match result {
            Ok(g) => {
                g.window.request_redraw();
                self.gfx = Some(g);
            }
            Err(e) => return self.fail(event_loop, e),
        }
        if let Some(opened) = self.pending.take()
            && let Err(e) = self.load(opened)
        {
            self.fail(event_loop, e);
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        let Some(g) = &mut self.gfx else { return };
        let consumed = g.egui_state.on_window_event(&g.window, &event).consumed;
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::Resized(size) => g.resize(size),
            WindowEvent::RedrawRequested => {
                let frame = self.redraw();
                let lost = self.gfx.as_ref().and_then(|g| g.ctx.lost());
                match after_frame(frame, lost) {
                    Outcome::Continue => {}
                    Outcome::Done => event_loop.exit(),
                    Outcome::Fail(e) => self.fail(event_loop, e),
                }
            }
            WindowEvent::KeyboardInput { event, .. } => {
                let PhysicalKey::Code(code) = event.physical_key else { return };
                if event.state == ElementState::Released {
                    self.keys_down.remove(&code);
                } else if !consumed && !g.egui_ctx.egui_wants_keyboard_input() {
                    if !event.repeat {
                        self.key_pressed(event_loop, code);
                    }
                    self.keys_down.insert(code);
                }
            }
            WindowEvent::MouseInput { button: MouseButton::Right, state, .. } => {
                self.looking = state == ElementState::Pressed && !consumed;
            }
            WindowEvent::CursorMoved { position, .. } => {
                if self.looking
                    && let Some((x, y)) = self.cursor
                {
                    self.playing = None;
                    self.rig.drag((position.x - x) as f32, (position.y - y) as f32);
                }
                self.cursor = Some((position.x, position.y));
            }
            WindowEvent::MouseWheel { delta, .. } if !consumed => {
                let steps = match delta {
                    MouseScrollDelta::LineDelta(_, y) => y,
                    MouseScrollDelta::PixelDelta(p) => p.y as f32 / 40.0,
                };
                self.playing = None;
                self.rig.zoom(steps);
            }
            WindowEvent::DroppedFile(path) => self.open(&path),
            _ => {}
        }
    }

    fn about_to_wait(&mut self, _event_loop: &ActiveEventLoop) {
        if let Some(g) = &self.gfx {
            g.window.request_redraw();
        }
    }
}
