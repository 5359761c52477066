//! The GPU context: instance, adapter, device and queue, headless or for a surface.

use crate::error::RenderError;

/// An adapter, its device and queue, and what was chosen.
pub struct GpuContext {
    /// The wgpu instance.
    pub instance: wgpu::Instance,
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
    pub fn headless() -> Result<Self, RenderError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        Self::with_instance(instance, None)
    }

    /// A context on `instance` whose adapter can present to `surface` (when given).
    pub fn with_instance(
        instance: wgpu::Instance,
        surface: Option<&wgpu::Surface<'_>>,
    ) -> Result<Self, RenderError> {
        let options = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: surface,
            apply_limit_buckets: false,
        };
        let adapter = pollster::block_on(instance.request_adapter(&options))
            .map_err(|e| RenderError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        let available = adapter.features();
        let wanted = wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
            | wgpu::Features::TEXTURE_COMPRESSION_BC
            | wgpu::Features::TEXTURE_COMPRESSION_ETC2
            | wgpu::Features::TEXTURE_COMPRESSION_ASTC;
        let features = available & wanted;
        let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let desc = wgpu::DeviceDescriptor {
            label: Some("tessera"),
            required_features: features,
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| RenderError::Device { adapter: info.name.clone(), reason: e.to_string() })?;
        tracing::info!(
            adapter = %info.name, backend = ?info.backend, driver = %info.driver, driver_info = %info.driver_info,
            ?features, "GPU adapter chosen"
        );
        Ok(Self { instance, adapter, device, queue, info, timestamps })
    }

    /// Blocks until the GPU has finished everything submitted (benchmarks, tests and
    /// captures that read frames back; a frame loop never needs it).
    pub fn wait_idle(&self) -> Result<(), RenderError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| RenderError::Readback(format!("waiting for the GPU: {e}")))
    }

    /// One line describing the adapter, for logs and reports.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {} {})",
            self.info.name, self.info.backend, self.info.driver, self.info.driver_info
        )
    }
}
