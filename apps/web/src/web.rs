//! The browser's side (wasm32 only): the page's `<canvas>` and status line, the WebGPU
//! context on the canvas, and the frame loop on `requestAnimationFrame`.

use std::cell::RefCell;
use std::rc::Rc;

use tessera::GpuContext;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::pattern::{FrameCheck, FrameSummary, PatternScene};

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
    status(Level::Info, &format!("WebGPU adapter: {adapter}. Building the scene…"));
    let mut config = surface
        .get_default_config(&ctx.adapter, size.0, size.1)
        .ok_or_else(|| format!("the adapter {adapter} cannot present to the canvas"))?;
    // The canvas is linear (rgba8unorm or bgra8unorm); drawing through an sRGB view of
    // it stores encoded colour, as the pool's sRGB texels expect.
    let view_format = config.format.add_srgb_suffix();
    config.view_formats = if view_format == config.format { vec![] } else { vec![view_format] };
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

/// Everything the frame loop owns.
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

impl App {
    /// One animation frame at `now_ms` (the animation clock).
    fn frame(&mut self, now_ms: f64) -> Result<(), String> {
        if let Some(lost) = self.ctx.lost() {
            return Err(lost.to_string());
        }
        let size = canvas_size(&self.canvas);
        if size != (self.config.width, self.config.height) {
            self.canvas.set_width(size.0);
            self.canvas.set_height(size.1);
            self.config.width = size.0;
            self.config.height = size.1;
            self.surface.configure(&self.ctx.device, &self.config);
        }
        let texture = match self.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(t) | wgpu::CurrentSurfaceTexture::Suboptimal(t) => t,
            wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
                self.surface.configure(&self.ctx.device, &self.config);
                return Ok(());
            }
            // Timeout, occluded, a validation error: try again next frame.
            _ => return Ok(()),
        };
        let view = texture.texture.create_view(&wgpu::TextureViewDescriptor {
            format: Some(self.view_format),
            ..Default::default()
        });
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
fn run_frames(app: App) {
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
