//! The browser's side (wasm32 only): the page's `<canvas>`, status line and stats, the
//! WebGPU context on the canvas, the scene the query string asks for (a streamed atlas,
//! or the procedural pattern), and the frame loop on `requestAnimationFrame`.

use std::cell::RefCell;
use std::rc::Rc;

use tessera::core::stream::streamer::SharedStreaming;
use tessera::web::{DECODE_BUDGET_MS, MAX_IN_FLIGHT, RangeFetcher, StreamDriver, open_atlas};
use tessera::{GpuContext, VirtualTextures, VtConfig};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::dom_input::{InputQueue, listen};
use crate::frame_stats::FrameStats;
use crate::free_camera::{HeldKeys, PageCamera};
use crate::input::InputRouter;
use crate::overlay::{DiskFigures, Overlay, OverlayPainter, PageFigures};
use crate::pattern::{FrameCheck, FrameSummary, PatternScene};
use crate::plane::{ImageStats, PlaneScene};
use crate::query::Query;

/// Host cache of the streamed atlas' decoded tiles, MiB.
const HOST_CACHE_MIB: u32 = 256;
/// GPU tile pool of the streamed atlas, MiB.
const POOL_MIB: u32 = 128;

/// The frame whose pixels are read back and checked (feedback has arrived by then).
const CHECK_FRAME: u64 = 30;
/// Frames between two updates of the status line.
const STATUS_EVERY: u64 = 15;

/// What the page says when the browser has no WebGPU at all.
const NO_WEBGPU: &str = "This browser has no WebGPU (navigator.gpu is missing), which Tessera needs: \
     use Chrome or Edge 113+, Firefox 141+ or Safari 26+, enable WebGPU in the browser's settings or \
     flags, and serve the page over http://localhost or https:// (WebGPU needs a secure context).";

/// Starts Tessera on the `<canvas>` whose id is `canvas_id`: WebGPU context, scene,
/// then one frame per animation frame. Reports progress and every failure in the
/// page's `#status` element (and the console); the promise rejects on a startup error.
#[wasm_bindgen]
pub async fn start(canvas_id: String) -> Result<(), JsValue> {
    install_panic_hook();
    match run(&canvas_id).await {
        Ok(()) => Ok(()),
        Err(message) => {
            status(Level::Error, &message);
            Err(JsValue::from_str(&message))
        }
    }
}

async fn run(canvas_id: &str) -> Result<(), String> {
    let started = js_sys::Date::now();
    let window = web_sys::window().ok_or("no window: Tessera runs in a page, not a worker")?;
    let document = window.document().ok_or("the window has no document")?;
    let canvas: web_sys::HtmlCanvasElement = document
        .get_element_by_id(canvas_id)
        .ok_or_else(|| format!("the page has no element with id \"{canvas_id}\" to draw in"))?
        .dyn_into()
        .map_err(|_| format!("#{canvas_id} is not a <canvas>"))?;
    let gpu =
        js_sys::Reflect::get(&window.navigator(), &JsValue::from_str("gpu")).unwrap_or(JsValue::UNDEFINED);
    if gpu.is_undefined() || gpu.is_null() {
        return Err(NO_WEBGPU.into());
    }
    status(Level::Info, "WebGPU found: requesting an adapter…");
    // What the browser says about its adapter: wgpu's name for it is GPUAdapterInfo's
    // `description`, which browsers leave empty (so does Chrome without developer flags).
    let browser_adapter = browser_adapter(&gpu).await?;
    let size = canvas_size(&canvas);
    canvas.set_width(size.0);
    canvas.set_height(size.1);
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::BROWSER_WEBGPU,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let surface = instance
        .create_surface(wgpu::SurfaceTarget::Canvas(canvas.clone()))
        .map_err(|e| format!("the canvas gave no WebGPU surface: {e}"))?;
    let ctx = GpuContext::with_instance_async(instance, Some(&surface)).await.map_err(|e| e.to_string())?;
    let adapter = if ctx.info.name.is_empty() { browser_adapter } else { ctx.describe() };
    let query = Query::of_page(&window)?;
    let mut config = surface
        .get_default_config(&ctx.adapter, size.0, size.1)
        .ok_or_else(|| format!("the adapter {adapter} cannot present to the canvas"))?;
    // The canvas is linear (rgba8unorm or bgra8unorm); drawing through an sRGB view of
    // it stores encoded colour, as the pool's sRGB texels expect.
    let view_format = config.format.add_srgb_suffix();
    config.view_formats = if view_format == config.format { vec![] } else { vec![view_format] };
    if let Some(atlas_url) = query.atlas {
        // The frame check copies the canvas' own texture.
        config.usage |= wgpu::TextureUsages::COPY_SRC;
        surface.configure(&ctx.device, &config);
        let fetcher = RangeFetcher::new(atlas_url.clone()).with_disk_budget(query.disk_budget);
        status(
            Level::Info,
            &format!("WebGPU adapter: {adapter}. Opening {atlas_url} (HTTP range requests)…"),
        );
        let atlas = open_atlas(&fetcher).await.map_err(|e| e.to_string())?;
        let opened_ms = js_sys::Date::now() - started;
        let shared = SharedStreaming::external(HOST_CACHE_MIB);
        let threads = shared.loader_threads().clone();
        let vt_config = VtConfig { pool_mib: POOL_MIB, shared: Some(shared), ..VtConfig::default() };
        let vt = VirtualTextures::new(&ctx, atlas, vt_config)
            .map_err(|e| format!("streaming {atlas_url}: {e}"))?;
        let plane =
            PlaneScene::new(&ctx, &vt, view_format).map_err(|e| format!("building the scene: {e}"))?;
        let mut painter = OverlayPainter::new(&ctx, view_format);
        let mut overlay = Overlay::new(&vt, query.overlay);
        overlay.set_pool_thumbnail(Some(painter.register_pool(&ctx, &vt)));
        let camera = PageCamera::new(query.camera, plane.half_width());
        let app = StreamApp {
            ctx: Rc::new(ctx),
            surface,
            config,
            view_format,
            vt,
            plane,
            driver: StreamDriver::new(threads, fetcher.clone()),
            fetcher,
            camera,
            input: listen(&canvas)?,
            router: InputRouter::default(),
            overlay,
            painter,
            pace: FrameStats::default(),
            last_now_ms: None,
            canvas,
            adapter,
            started,
            opened_ms,
            first_frame_ms: None,
            resident_ms: None,
            frame: 0,
            tiles_resident: 0,
            check: Rc::new(RefCell::new(StreamCheck::Pending)),
        };
        run_frames(app);
        return Ok(());
    }
    status(Level::Info, &format!("WebGPU adapter: {adapter}. Building the scene…"));
    surface.configure(&ctx.device, &config);
    let scene = PatternScene::new(&ctx, view_format).map_err(|e| format!("building the scene: {e}"))?;
    let app = App {
        ctx: Rc::new(ctx),
        surface,
        config,
        view_format,
        scene,
        canvas,
        adapter,
        started,
        first_frame_ms: None,
        clock: None,
        check: Rc::new(RefCell::new(Check::Pending)),
    };
    run_frames(app);
    Ok(())
}

/// The adapter `navigator.gpu` (`gpu`) offers, described by its `GPUAdapterInfo`
/// (vendor, architecture, device, description: those the browser fills in), or the
/// error the page shows when it offers none.
async fn browser_adapter(gpu: &JsValue) -> Result<String, String> {
    let get = |object: &JsValue, key: &str| js_sys::Reflect::get(object, &JsValue::from_str(key)).ok();
    let request = get(gpu, "requestAdapter")
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .ok_or("navigator.gpu has no requestAdapter")?;
    let promise = request
        .call0(gpu)
        .ok()
        .and_then(|p| p.dyn_into::<js_sys::Promise>().ok())
        .ok_or("navigator.gpu.requestAdapter() failed")?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise)
        .await
        .map_err(|e| format!("navigator.gpu.requestAdapter() failed: {e:?}"))?;
    if adapter.is_null() || adapter.is_undefined() {
        return Err(
            tessera::RenderError::NoAdapter("navigator.gpu.requestAdapter() gave none".into()).to_string()
        );
    }
    let info = get(&adapter, "info").unwrap_or(JsValue::UNDEFINED);
    let mut words: Vec<String> = ["vendor", "architecture", "device", "description"]
        .iter()
        .filter_map(|key| get(&info, key)?.as_string())
        .filter(|word| !word.is_empty())
        .collect();
    words.dedup();
    if words.is_empty() {
        words.push("unnamed".into());
    }
    let fallback = get(&info, "isFallbackAdapter").and_then(|v| v.as_bool()).unwrap_or(false);
    Ok(format!("{}{}", words.join(" "), if fallback { " (fallback adapter)" } else { "" }))
}

/// One animation frame of a scene.
trait Frames {
    /// Draws the frame at `now_ms` (the animation clock); an error stops the loop.
    fn frame(&mut self, now_ms: f64) -> Result<(), String>;
}

/// The streamed atlas' frame loop: everything it owns.
struct StreamApp {
    ctx: Rc<GpuContext>,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    view_format: wgpu::TextureFormat,
    vt: VirtualTextures,
    plane: PlaneScene,
    driver: StreamDriver,
    fetcher: RangeFetcher,
    camera: PageCamera,
    /// The DOM events since the last frame, and where they go.
    input: InputQueue,
    router: InputRouter,
    overlay: Overlay,
    painter: OverlayPainter,
    /// Frame times and the decode rate, and the animation clock of the last frame.
    pace: FrameStats,
    last_now_ms: Option<f64>,
    canvas: web_sys::HtmlCanvasElement,
    adapter: String,
    /// `Date.now()` when `start` was called, and milliseconds from then to the atlas
    /// being open (its coarsest tiles fetched), to the first frame, to fully resident
    /// once the camera stands still.
    started: f64,
    opened_ms: f64,
    first_frame_ms: Option<f64>,
    resident_ms: Option<f64>,
    frame: u64,
    tiles_resident: usize,
    check: Rc<RefCell<StreamCheck>>,
}

/// The readback of the first fully resident frame once the camera stands still.
enum StreamCheck {
    Pending,
    Reading,
    Done(ImageStats),
    Failed(String),
}

impl Frames for StreamApp {
    fn frame(&mut self, now_ms: f64) -> Result<(), String> {
        if let Some(lost) = self.ctx.lost() {
            return Err(lost.to_string());
        }
        self.driver.pump();
        self.pace.push(now_ms, self.driver.stats().tiles_decoded);
        let frame_ms = self.last_now_ms.map_or(0.0, |last| (now_ms - last).max(0.0));
        self.last_now_ms = Some(now_ms);
        let Some((texture, view)) =
            next_texture(&self.canvas, &self.surface, &self.ctx.device, &mut self.config, self.view_format)
        else {
            return Ok(());
        };
        let size = (self.config.width, self.config.height);
        let ppp = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()) as f32;
        let events = std::mem::take(&mut *self.input.borrow_mut());
        let (egui_events, pointer) =
            self.router.route(&events, self.overlay.wants_pointer(), self.overlay.wants_keyboard());
        for code in &pointer.pressed {
            match code.as_str() {
                "KeyH" => self.overlay.toggle(),
                "KeyF" => self.overlay.toggle_freeze(),
                "KeyM" => self.overlay.next_debug_view(),
                other => self.camera.key(other),
            }
        }
        let keys = HeldKeys::of(|code| self.router.held(code));
        let seconds = (frame_ms / 1e3).min(0.1) as f32;
        let camera = self.camera.camera(self.frame, &pointer, keys, seconds, size.1 as f32 / ppp);
        let resident = self.camera.still() && self.vt.fully_resident() && !self.driver.busy();
        let check = resident && matches!(*self.check.borrow(), StreamCheck::Pending);
        let page = self.page_figures();
        let ctx = self.ctx.clone();
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("frame") });
        let vt_frame = self.vt.begin(&ctx, &mut encoder);
        self.plane.draw(&ctx, &vt_frame, &mut encoder, &view, size, &camera);
        // The checked frame is the scene's alone: copied before the overlay is drawn.
        let readback = check.then(|| FrameCheck::record(&ctx.device, &mut encoder, &texture.texture));
        let tiers = vt_frame.vt().stats();
        self.overlay.record(now_ms / 1e3, frame_ms, vt_frame.stats(), &tiers);
        let raw = egui_input(size, ppp, now_ms, egui_events, &ctx.device);
        let output = self.overlay.run(raw, vt_frame.vt(), &tiers, &page);
        let free = self.painter.paint(&ctx, &mut encoder, &view, size, output, self.overlay.egui());
        let stats = vt_frame.finish(&ctx, encoder).map_err(|e| e.to_string())?;
        ctx.queue.present(texture);
        self.painter.free(&free);
        match self.overlay.apply(&ctx, &mut self.vt) {
            Ok(true) => {
                let thumbnail = self.painter.register_pool(&ctx, &self.vt);
                self.overlay.set_pool_thumbnail(Some(thumbnail));
            }
            Ok(false) => {}
            Err(e) => web_sys::console::error_1(&JsValue::from_str(&e)),
        }
        self.tiles_resident = stats.resident_vram;
        self.frame += 1;
        let elapsed = js_sys::Date::now() - self.started;
        self.first_frame_ms.get_or_insert(elapsed);
        if resident {
            self.resident_ms.get_or_insert(elapsed);
        }
        if let Some(readback) = readback {
            *self.check.borrow_mut() = StreamCheck::Reading;
            let state = self.check.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let result =
                    match ctx.map_read_async(readback.buffer()).await.and_then(|()| readback.pixels()) {
                        Ok(pixels) => {
                            expose_frame(size, &pixels);
                            StreamCheck::Done(ImageStats::of(&pixels))
                        }
                        Err(e) => StreamCheck::Failed(e.to_string()),
                    };
                *state.borrow_mut() = result;
            });
        }
        if self.frame % STATUS_EVERY == 1 || check || matches!(*self.check.borrow(), StreamCheck::Done(_)) {
            self.report(resident);
        }
        Ok(())
    }
}

/// egui's input for a frame of `size` device pixels at `ppp` device pixels per CSS
/// pixel (egui's points), at `now_ms`, with the page's `events`.
fn egui_input(
    size: (u32, u32),
    ppp: f32,
    now_ms: f64,
    events: Vec<egui::Event>,
    device: &wgpu::Device,
) -> egui::RawInput {
    let points = egui::vec2(size.0 as f32, size.1 as f32) / ppp;
    let mut raw = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, points)),
        max_texture_side: Some(device.limits().max_texture_dimension_2d as usize),
        time: Some(now_ms / 1e3),
        events,
        focused: true,
        ..Default::default()
    };
    raw.viewports.entry(egui::ViewportId::ROOT).or_default().native_pixels_per_point = Some(ppp);
    raw
}

impl StreamApp {
    /// The page's figures for the overlay.
    fn page_figures(&self) -> PageFigures {
        let net = self.fetcher.stats();
        PageFigures {
            requests: net.requests,
            bytes: net.bytes,
            in_flight: net.in_flight,
            failures: net.failures,
            tiles_decoded: self.driver.stats().tiles_decoded,
            tiles_per_s: self.pace.tiles_per_s(),
            frame_ms_median: self.pace.median_ms(),
            camera: self.camera.name(),
            disk: {
                let tier = self.fetcher.disk_tier();
                tier.on.then_some(DiskFigures {
                    bytes_held: tier.stats.bytes_held,
                    budget: tier.stats.budget,
                    hits: tier.stats.hits,
                    hit_bytes: tier.stats.hit_bytes,
                })
            },
        }
    }

    /// Writes the status line and the `#stats` JSON.
    fn report(&self, resident: bool) {
        let net = self.fetcher.stats();
        let driver = self.driver.stats();
        let ms = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.0}"));
        let (level, check_json, check_text) = match &*self.check.borrow() {
            StreamCheck::Pending | StreamCheck::Reading => {
                (Level::Info, "null".to_owned(), "pending".to_owned())
            }
            StreamCheck::Done(s) => (
                if s.non_trivial() { Level::Ok } else { Level::Error },
                format!(
                    "{{\"mean\":{:.2},\"stddev\":{:.2},\"colours\":{},\"unwritten\":{:.5},\"ok\":{}}}",
                    s.mean,
                    s.stddev,
                    s.colours,
                    s.unwritten,
                    s.non_trivial()
                ),
                format!(
                    "{} (luma {:.0} ± {:.0}, {} colours)",
                    if s.non_trivial() { "ok" } else { "FAILED: a flat or unwritten image" },
                    s.mean,
                    s.stddev,
                    s.colours
                ),
            ),
            StreamCheck::Failed(e) => (Level::Error, "null".to_owned(), format!("FAILED ({e})")),
        };
        let last_error = self.driver.last_error().map_or("null".to_owned(), json_string);
        let tier = self.fetcher.disk_tier();
        let disk_json = format!(
            "{{\"on\":{},\"note\":{},\"hits\":{},\"hit_bytes\":{},\"misses\":{},\"writes\":{},\
             \"write_failures\":{},\"evictions\":{},\"rejected\":{},\"bytes_held\":{},\"budget\":{}}}",
            tier.on,
            json_string(&tier.note),
            tier.stats.hits,
            tier.stats.hit_bytes,
            tier.stats.misses,
            tier.stats.writes,
            tier.stats.write_failures,
            tier.stats.evictions,
            tier.stats.rejected,
            tier.stats.bytes_held,
            tier.stats.budget,
        );
        let json = format!(
            "{{\"atlas\":{},\"camera\":\"{}\",\"frame\":{},\"tiles_resident\":{},\"requests\":{},\
             \"bytes_fetched\":{},\"in_flight\":{},\"failed_requests\":{},\"jobs\":{},\"jobs_unavailable\":{},\
             \"tiles_decoded\":{},\"worst_decode_ms\":{:.1},\"decode_budget_ms\":{DECODE_BUDGET_MS},\
             \"max_in_flight\":{MAX_IN_FLIGHT},\"fully_resident\":{resident},\"opened_ms\":{:.0},\
             \"first_frame_ms\":{},\"resident_ms\":{},\"frame_ms_median\":{},\"tiles_per_s\":{:.1},\
             \"overlay\":{},\"disk_tier\":{disk_json},\"check\":{check_json},\"last_fetch_error\":{last_error}}}",
            json_string(self.fetcher.url()),
            self.camera.name(),
            self.frame,
            self.tiles_resident,
            net.requests,
            net.bytes,
            net.in_flight,
            net.failures,
            driver.jobs,
            driver.jobs_unavailable,
            driver.tiles_decoded,
            driver.worst_decode_ms,
            self.opened_ms,
            ms(self.first_frame_ms),
            ms(self.resident_ms),
            self.pace.median_ms().map_or("null".to_owned(), |v| format!("{v:.2}")),
            self.pace.tiles_per_s(),
            self.overlay.shown(),
        );
        if let Some(element) =
            web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id("stats"))
        {
            element.set_text_content(Some(&json));
        }
        let text = format!(
            "WebGPU adapter: {}. {}: frame {} ({} camera), {} tiles resident, {} requests, {:.1} MiB fetched, \
             fully resident: {}{}. Frame check: {check_text}.",
            self.adapter,
            self.fetcher.url(),
            self.frame,
            self.camera.name(),
            self.tiles_resident,
            net.requests,
            net.bytes as f64 / f64::from(1 << 20),
            if resident { "yes" } else { "no" },
            self.resident_ms.map_or(String::new(), |ms| format!(" ({ms:.0} ms after start)")),
        );
        status(level, &text);
    }
}

/// Leaves the checked frame's pixels to the page's scripts (and tests) as
/// `window.tesseraFrame = { width, height, rgba }` (RGBA8 rows, sRGB-encoded).
fn expose_frame(size: (u32, u32), pixels: &[u8]) {
    let Some(window) = web_sys::window() else { return };
    let frame = js_sys::Object::new();
    let set =
        |key: &str, value: &JsValue| js_sys::Reflect::set(&frame, &JsValue::from_str(key), value).is_ok();
    let done = set("width", &JsValue::from(size.0))
        && set("height", &JsValue::from(size.1))
        && set("rgba", &js_sys::Uint8Array::from(pixels).into());
    if done {
        let _ = js_sys::Reflect::set(&window, &JsValue::from_str("tesseraFrame"), &frame);
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The pattern's frame loop: everything it owns.
struct App {
    ctx: Rc<GpuContext>,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    view_format: wgpu::TextureFormat,
    scene: PatternScene,
    canvas: web_sys::HtmlCanvasElement,
    adapter: String,
    /// `Date.now()` when `start` was called.
    started: f64,
    first_frame_ms: Option<f64>,
    /// The animation clock at the first frame and at the latest.
    clock: Option<(f64, f64)>,
    check: Rc<RefCell<Check>>,
}

/// The readback of frame [`CHECK_FRAME`].
enum Check {
    Pending,
    Reading,
    Done(FrameSummary),
    Failed(String),
}

impl Frames for App {
    fn frame(&mut self, now_ms: f64) -> Result<(), String> {
        self.pattern_frame(now_ms)
    }
}

impl App {
    /// One animation frame at `now_ms` (the animation clock).
    fn pattern_frame(&mut self, now_ms: f64) -> Result<(), String> {
        if let Some(lost) = self.ctx.lost() {
            return Err(lost.to_string());
        }
        let Some((texture, view)) =
            next_texture(&self.canvas, &self.surface, &self.ctx.device, &mut self.config, self.view_format)
        else {
            return Ok(());
        };
        let size = (self.config.width, self.config.height);
        let seconds = now_ms / 1e3;
        self.scene.render(&self.ctx, &view, size, seconds).map_err(|e| e.to_string())?;
        self.ctx.queue.present(texture);
        if self.first_frame_ms.is_none() {
            self.first_frame_ms = Some(js_sys::Date::now() - self.started);
        }
        self.clock = Some((self.clock.map_or(now_ms, |(first, _)| first), now_ms));
        if self.scene.frames() == CHECK_FRAME {
            self.start_check(size, seconds)?;
        }
        if self.scene.frames() % STATUS_EVERY == 1 {
            self.report();
        }
        Ok(())
    }

    /// Renders the frame once more into a texture that can be copied, and reads it
    /// back without blocking: the result lands in `self.check`.
    fn start_check(&mut self, size: (u32, u32), seconds: f64) -> Result<(), String> {
        let device = &self.ctx.device;
        let target = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("frame check"),
            size: wgpu::Extent3d { width: size.0, height: size.1, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: self.view_format,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let view = target.create_view(&wgpu::TextureViewDescriptor::default());
        self.scene.render(&self.ctx, &view, size, seconds).map_err(|e| e.to_string())?;
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("frame check") });
        let check = FrameCheck::record(device, &mut encoder, &target);
        self.ctx.queue.submit([encoder.finish()]);
        *self.check.borrow_mut() = Check::Reading;
        let (ctx, state) = (self.ctx.clone(), self.check.clone());
        wasm_bindgen_futures::spawn_local(async move {
            let result = match ctx.map_read_async(check.buffer()).await.and_then(|()| check.pixels()) {
                Ok(pixels) => Check::Done(FrameCheck::summarize(&pixels)),
                Err(e) => Check::Failed(e.to_string()),
            };
            *state.borrow_mut() = result;
        });
        Ok(())
    }

    /// Writes the status line: adapter, frames, feedback, the frame check.
    fn report(&self) {
        let scene = &self.scene;
        let feedback = match scene.feedback() {
            Some(f) => {
                let mips: Vec<String> = f
                    .per_mip
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(m, n)| format!("{m}: {n}"))
                    .collect();
                format!(
                    "feedback: {} of {} tiles requested in frame {} (by mip {}), {} readbacks",
                    f.tiles,
                    scene.tiles(),
                    f.frame,
                    mips.join(", "),
                    scene.feedback_frames()
                )
            }
            None => "feedback: none arrived yet".to_owned(),
        };
        let (level, check) = match &*self.check.borrow() {
            Check::Pending | Check::Reading => (Level::Info, "frame check: pending".to_owned()),
            Check::Done(s) => (
                if s.ok() && scene.feedback().is_some() { Level::Ok } else { Level::Error },
                format!(
                    "frame check: {} ({:.0}% of the pixels show the texture, {:.2}% unwritten)",
                    if s.ok() { "ok" } else { "FAILED" },
                    s.covered * 100.0,
                    s.unwritten * 100.0
                ),
            ),
            Check::Failed(e) => (Level::Error, format!("frame check: FAILED ({e})")),
        };
        let first =
            self.first_frame_ms.map_or(String::new(), |ms| format!(", first frame {ms:.0} ms after start"));
        let rate = match self.clock {
            Some((first, last)) if last > first => {
                format!(", {:.1} frames/s", scene.frames().saturating_sub(1) as f64 * 1e3 / (last - first))
            }
            _ => String::new(),
        };
        status(
            level,
            &format!(
                "WebGPU adapter: {}. {} frames at {}×{}{first}{rate}. {feedback}. {check}.",
                self.adapter,
                scene.frames(),
                self.config.width,
                self.config.height
            ),
        );
    }
}

/// The animation-frame callback, shared with itself so it can ask for the next frame.
type FrameCallback = Rc<RefCell<Option<Closure<dyn FnMut(f64)>>>>;

/// Runs `app.frame` on every animation frame until it fails (then says why in the page).
fn run_frames(app: impl Frames + 'static) {
    let app = RefCell::new(app);
    let callback: FrameCallback = Rc::new(RefCell::new(None));
    let next = callback.clone();
    *callback.borrow_mut() = Some(Closure::new(move |now_ms: f64| {
        let result = app.borrow_mut().frame(now_ms);
        match result {
            Ok(()) => {
                if let Some(f) = next.borrow().as_ref() {
                    request_frame(f);
                }
            }
            // No next frame: the loop stops (the closure stays alive, unused).
            Err(e) => status(Level::Error, &format!("Tessera stopped: {e}")),
        }
    }));
    if let Some(f) = callback.borrow().as_ref() {
        request_frame(f);
    }
}

fn request_frame(f: &Closure<dyn FnMut(f64)>) {
    if let Some(window) = web_sys::window()
        && let Err(e) = window.request_animation_frame(f.as_ref().unchecked_ref())
    {
        status(Level::Error, &format!("requestAnimationFrame failed: {e:?}"));
    }
}

/// The canvas' next surface texture and a view of it in `view_format`, after following a
/// resized canvas; `None` for a frame to skip (the surface was outdated or lost and is
/// configured again, or it timed out, is occluded or failed validation: next frame).
fn next_texture(
    canvas: &web_sys::HtmlCanvasElement,
    surface: &wgpu::Surface<'static>,
    device: &wgpu::Device,
    config: &mut wgpu::SurfaceConfiguration,
    view_format: wgpu::TextureFormat,
) -> Option<(wgpu::SurfaceTexture, wgpu::TextureView)> {
    let size = canvas_size(canvas);
    if size != (config.width, config.height) {
        canvas.set_width(size.0);
        canvas.set_height(size.1);
        config.width = size.0;
        config.height = size.1;
        surface.configure(device, config);
    }
    let texture = match surface.get_current_texture() {
        wgpu::CurrentSurfaceTexture::Success(t) | wgpu::CurrentSurfaceTexture::Suboptimal(t) => t,
        wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
            surface.configure(device, config);
            return None;
        }
        _ => return None,
    };
    let view = texture
        .texture
        .create_view(&wgpu::TextureViewDescriptor { format: Some(view_format), ..Default::default() });
    Some((texture, view))
}

/// The canvas' size in device pixels (its CSS size × `devicePixelRatio`), at least 1×1
/// and at most WebGPU's default texture limit.
fn canvas_size(canvas: &web_sys::HtmlCanvasElement) -> (u32, u32) {
    let ratio = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio());
    let side = |css: i32| ((f64::from(css) * ratio).round() as u32).clamp(1, 8192);
    (side(canvas.client_width()), side(canvas.client_height()))
}

#[derive(Clone, Copy)]
enum Level {
    Info,
    Ok,
    Error,
}

/// Shows `text` in the page's `#status` element (its class says the level) and logs it.
fn status(level: Level, text: &str) {
    let class = match level {
        Level::Info => "info",
        Level::Ok => "ok",
        Level::Error => "error",
    };
    if let Some(element) =
        web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id("status"))
    {
        element.set_text_content(Some(text));
        element.set_class_name(class);
    }
    match level {
        Level::Error => web_sys::console::error_1(&JsValue::from_str(text)),
        _ => web_sys::console::log_1(&JsValue::from_str(text)),
    }
}

/// A panic (a wgpu validation error included) ends up in the page, not only in the console.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        status(Level::Error, &format!("Tessera stopped: {info}"));
    }));
}
