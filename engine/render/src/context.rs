//! The GPU context: adapter, device and queue, headless, for a surface, or the
//! application's own ([`GpuContext::from_parts`]).

use std::sync::Arc;
use std::time::Duration;

use web_time::Instant;

use crate::error::RenderError;
use crate::lost::{DeviceLost, LostState, PollFailure};

/// The longest [`GpuContext::wait_idle`] waits: far longer than any frame or capture
/// takes, even on a software rasteriser, so only a hung GPU reaches it.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(120);

/// The optional device features Tessera uses when the adapter has them: BC, ETC2 and
/// ASTC texture compression (block-compressed tile pools: BC7 / BC1 on desktop, ASTC
/// 4×4 or ETC2 on mobile; without any of them Basis atlases are transcoded to RGBA8,
/// which holds 4× fewer tiles per MiB), `SHADER_EARLY_DEPTH_TEST` (hidden fragments
/// skip the virtual-texture shader) and timestamp queries (`tessera bench` only).
/// None is required.
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TEXTURE_COMPRESSION_BC)
    .union(wgpu::Features::TEXTURE_COMPRESSION_ETC2)
    .union(wgpu::Features::TEXTURE_COMPRESSION_ASTC)
    .union(wgpu::Features::SHADER_EARLY_DEPTH_TEST);

/// An adapter, its device and queue, and what was chosen.
///
/// Make one with [`GpuContext::headless`], [`GpuContext::with_instance`] (a window's
/// surface), or [`GpuContext::from_parts`] around the application's own device; in a
/// browser with [`GpuContext::headless_async`] or [`GpuContext::with_instance_async`]
/// (a canvas' surface), as no thread may block there.
pub struct GpuContext {
    /// The wgpu instance, when this context created it (`None` from
    /// [`GpuContext::from_parts`]).
    pub instance: Option<wgpu::Instance>,
    /// The adapter in use.
    pub adapter: wgpu::Adapter,
    /// The logical device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// Adapter name, backend, driver.
    pub info: wgpu::AdapterInfo,
    /// Whether GPU timestamp queries are available (used by `tessera bench`).
    pub timestamps: bool,
    /// The first fatal condition of `device`, written by its callbacks.
    lost: Arc<LostState>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("adapter", &self.info.name)
            .field("backend", &self.info.backend)
            .finish()
    }
}

impl GpuContext {
    /// A context without a surface, honouring `WGPU_BACKEND`, `WGPU_ADAPTER_NAME` and friends.
    /// Blocks until the adapter and device are ready; in a browser, where no thread
    /// may block, it fails with [`RenderError::WouldBlock`]: use
    /// [`GpuContext::headless_async`] there.
    pub fn headless() -> Result<Self, RenderError> {
        crate::wait::block_on("GpuContext::headless", "GpuContext::headless_async", Self::headless_async())
    }

    /// [`GpuContext::headless`] as a future, for native code and browsers alike (in a
    /// browser, WebGPU without a canvas).
    pub async fn headless_async() -> Result<Self, RenderError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        Self::with_instance_async(instance, None).await
    }

    /// A context on `instance` whose adapter can present to `surface` (when given).
    /// Blocks like [`GpuContext::headless`]; in a browser use
    /// [`GpuContext::with_instance_async`].
    pub fn with_instance(
        instance: wgpu::Instance,
        surface: Option<&wgpu::Surface<'_>>,
    ) -> Result<Self, RenderError> {
        crate::wait::block_on(
            "GpuContext::with_instance",
            "GpuContext::with_instance_async",
            Self::with_instance_async(instance, surface),
        )
    }

    /// [`GpuContext::with_instance`] as a future: the constructor of a browser's
    /// context, with the surface of its `<canvas>` (`wgpu::SurfaceTarget::Canvas`) and
    /// an instance with the `BROWSER_WEBGPU` backend.
    pub async fn with_instance_async(
        instance: wgpu::Instance,
        surface: Option<&wgpu::Surface<'_>>,
    ) -> Result<Self, RenderError> {
        let options = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: surface,
            apply_limit_buckets: false,
        };
        let adapter =
            instance.request_adapter(&options).await.map_err(|e| RenderError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        let desc = Self::device_descriptor(&adapter);
        let (device, queue) = adapter
            .request_device(&desc)
            .await
            .map_err(|e| RenderError::Device { adapter: info.name.clone(), reason: e.to_string() })?;
        let mut ctx = Self::from_parts(&adapter, &device, &queue)?;
        ctx.instance = Some(instance);
        Ok(ctx)
    }

    /// The device descriptor Tessera's own contexts use on `adapter`: every
    /// [`OPTIONAL_FEATURES`] the adapter has, and the adapter's full limits (large tile
    /// pools and page tables need them). Add your own features to it when you create
    /// the device yourself for [`GpuContext::from_parts`].
    pub fn device_descriptor(adapter: &wgpu::Adapter) -> wgpu::DeviceDescriptor<'static> {
        wgpu::DeviceDescriptor {
            label: Some("tessera"),
            required_features: adapter.features() & OPTIONAL_FEATURES,
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }
    }

    /// A context around the application's own adapter, device and queue (wgpu handles
    /// are reference-counted: these are clones of the same objects).
    ///
    /// The device needs no particular feature: Tessera uses those of
    /// [`OPTIONAL_FEATURES`] it was created with (see [`GpuContext::device_descriptor`]).
    /// It needs fragment shaders that write storage buffers (every Vulkan, Metal and
    /// DX12 adapter; not WebGL2), refused here with [`RenderError::Config`] otherwise.
    /// Tile pools are sized within `max_texture_dimension_2d` and page tables within
    /// `max_storage_buffer_binding_size`: a device made with default limits gets
    /// smaller maximum pools than one made with the adapter's limits, and
    /// [`crate::VirtualTextures::new`] says so when a configuration does not fit.
    ///
    /// Tessera installs the device-lost callback and the uncaptured-error handler of
    /// `device` (to report a lost device as [`RenderError::DeviceLost`] instead of a
    /// panic); an application that needs them too should read [`GpuContext::lost`].
    pub fn from_parts(
        adapter: &wgpu::Adapter,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<Self, RenderError> {
        Self::wrap(adapter, device, queue, true)
    }

    /// Like [`GpuContext::from_parts`], but leaves the device's lost callback and
    /// uncaptured-error handler to the host, for engines that install their own (Bevy
    /// does): [`GpuContext::lost`] then stays `None`, and the host reports a lost device.
    pub fn from_host_parts(
        adapter: &wgpu::Adapter,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<Self, RenderError> {
        Self::wrap(adapter, device, queue, false)
    }

    fn wrap(
        adapter: &wgpu::Adapter,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        install: bool,
    ) -> Result<Self, RenderError> {
        let info = adapter.get_info();
        let downlevel = adapter.get_downlevel_capabilities();
        if !downlevel.flags.contains(wgpu::DownlevelFlags::FRAGMENT_WRITABLE_STORAGE)
            || device.limits().max_storage_buffers_per_shader_stage < 2
        {
            return Err(RenderError::Config(format!(
                "the GPU adapter '{}' ({:?}) cannot write storage buffers from fragment shaders, \
                 which GPU feedback needs: use a Vulkan, Metal or DX12 adapter",
                info.name, info.backend
            )));
        }
        let features = device.features();
        let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        tracing::info!(
            adapter = %info.name, backend = ?info.backend, driver = %info.driver, driver_info = %info.driver_info,
            features = ?(features & OPTIONAL_FEATURES), "GPU adapter chosen"
        );
        let lost = if install { LostState::install(device) } else { Arc::new(LostState::default()) };
        Ok(Self {
            instance: None,
            adapter: adapter.clone(),
            device: device.clone(),
            queue: queue.clone(),
            info,
            timestamps,
            lost,
        })
    }

    /// Blocks until the GPU has finished everything submitted (benchmarks, tests and
    /// captures that read frames back; a frame loop never needs it). Fails with
    /// [`RenderError::DeviceLost`] once the device is lost, and with
    /// [`RenderError::GpuTimeout`] after [`WAIT_TIMEOUT`]; it never waits forever. In a
    /// browser it fails with [`RenderError::WouldBlock`]: use
    /// [`GpuContext::wait_idle_async`].
    pub fn wait_idle(&self) -> Result<(), RenderError> {
        crate::wait::may_block("GpuContext::wait_idle", "GpuContext::wait_idle_async")?;
        self.poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(WAIT_TIMEOUT) })
    }

    /// [`GpuContext::wait_idle`] as a future: in a browser it resolves when the queue's
    /// work is done; natively it waits on this thread like `wait_idle` (the device
    /// must be polled for anything to complete there).
    pub async fn wait_idle_async(&self) -> Result<(), RenderError> {
        if crate::wait::MAY_BLOCK {
            return self.wait_idle();
        }
        let (tx, rx) = crate::wait::oneshot();
        self.queue.on_submitted_work_done(move || tx.send(()));
        let done = rx.await;
        self.check()?;
        done.ok_or_else(|| RenderError::Readback("the queue's work-done callback was dropped".into()))
    }

    /// Maps all of `buffer` for reading and waits until it is mapped (then read it with
    /// `get_mapped_range` and unmap it). Fails like [`GpuContext::wait_idle`]: on a lost
    /// device, or after [`WAIT_TIMEOUT`]; it never waits forever. In a browser it fails
    /// with [`RenderError::WouldBlock`]: use [`GpuContext::map_read_async`].
    pub fn map_read(&self, buffer: &wgpu::Buffer) -> Result<(), RenderError> {
        crate::wait::may_block("GpuContext::map_read", "GpuContext::map_read_async")?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        buffer.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        let started = Instant::now();
        loop {
            self.wait_idle()?;
            // Another thread's poll may have taken the callback and not yet run it.
            match rx.recv_timeout(Duration::from_millis(10)) {
                Ok(mapped) => {
                    return mapped.map_err(|e| self.explain(RenderError::Readback(e.to_string())));
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    let e = RenderError::Readback("the map callback was dropped".into());
                    return Err(self.explain(e));
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) if started.elapsed() > WAIT_TIMEOUT => {
                    return Err(RenderError::GpuTimeout { seconds: WAIT_TIMEOUT.as_secs() });
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// [`GpuContext::map_read`] as a future: in a browser it resolves when the mapping
    /// is done (frames read back there, for captures and tests); natively it waits on
    /// this thread like `map_read`.
    pub async fn map_read_async(&self, buffer: &wgpu::Buffer) -> Result<(), RenderError> {
        if crate::wait::MAY_BLOCK {
            return self.map_read(buffer);
        }
        let (tx, rx) = crate::wait::oneshot();
        buffer.map_async(wgpu::MapMode::Read, .., move |r| tx.send(r));
        match rx.await {
            Some(mapped) => mapped.map_err(|e| self.explain(RenderError::Readback(e.to_string()))),
            None => Err(self.explain(RenderError::Readback("the map callback was dropped".into()))),
        }
    }

    /// Processes finished GPU work without waiting (map callbacks, and the device-lost
    /// callback of a device that is gone), then fails if the device is lost.
    pub fn check(&self) -> Result<(), RenderError> {
        self.poll(wgpu::PollType::Poll)
    }

    /// Why the device was lost, if it was: the first device-lost callback, or the first
    /// out-of-memory or internal error wgpu reported. Reads what was recorded (no GPU
    /// call); a destroyed device is reported once it has been polled
    /// ([`GpuContext::check`], [`GpuContext::wait_idle`], or any frame's
    /// [`crate::VirtualTextures::begin`]).
    pub fn lost(&self) -> Option<DeviceLost> {
        self.lost.get()
    }

    /// `error`, or [`RenderError::DeviceLost`] when the device is lost: a readback of a
    /// lost device fails first as a failed map, and its cause is the loss.
    pub fn explain(&self, error: RenderError) -> RenderError {
        match (error, self.lost()) {
            (e @ RenderError::DeviceLost(_), _) => e,
            (_, Some(lost)) => RenderError::DeviceLost(lost),
            (e, None) => e,
        }
    }

    /// Polls the device (wgpu's panic on a device the driver lost becomes an error), then
    /// fails if the device is lost.
    fn poll(&self, poll_type: wgpu::PollType) -> Result<(), RenderError> {
        match crate::lost::poll(&self.device, &self.lost, poll_type) {
            Ok(_) => self.lost().map_or(Ok(()), |lost| Err(lost.into())),
            Err(PollFailure::Lost(lost)) => Err(lost.into()),
            Err(PollFailure::Poll(wgpu::PollError::Timeout)) => match self.lost() {
                Some(lost) => Err(lost.into()),
                None => Err(RenderError::GpuTimeout { seconds: WAIT_TIMEOUT.as_secs() }),
            },
            Err(PollFailure::Poll(e)) => {
                Err(self.explain(RenderError::Readback(format!("waiting for the GPU: {e}"))))
            }
        }
    }

    /// Polls without waiting for the feedback readbacks of a frame; a loss is recorded
    /// (and reported by [`GpuContext::lost`]), never raised here.
    pub(crate) fn poll_quietly(&self) {
        let _ = crate::lost::poll(&self.device, &self.lost, wgpu::PollType::Poll);
    }

    /// One line describing the adapter, for logs and reports.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {} {})",
            self.info.name, self.info.backend, self.info.driver, self.info.driver_info
        )
    }
}
