//! The renderer's error type.

use std::path::PathBuf;

/// What to do when no adapter is found: install a driver natively; in a browser, use
/// one with WebGPU.
#[cfg(not(target_arch = "wasm32"))]
const NO_ADAPTER_HINT: &str = "Install a Vulkan driver: on Debian, `apt-get install mesa-vulkan-drivers libvulkan1` \
     gives the lavapipe software driver; or pick another backend with WGPU_BACKEND=vulkan|metal|dx12|gl";
#[cfg(target_arch = "wasm32")]
const NO_ADAPTER_HINT: &str = "This browser offers no WebGPU adapter: use a browser with WebGPU \
     (Chrome or Edge 113+, Firefox 141+, Safari 26+), enable it, or check that the GPU is not blocklisted";

/// Everything that can go wrong in the renderer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// No GPU adapter could be found.
    #[error("no GPU adapter found ({0}). {hint}", hint = NO_ADAPTER_HINT)]
    NoAdapter(String),
    /// The adapter refused the device.
    #[error("the GPU adapter '{adapter}' refused to create a device: {reason}")]
    Device {
        /// Adapter name.
        adapter: String,
        /// What wgpu said.
        reason: String,
    },
    /// The atlas could not be used.
    #[error(transparent)]
    Atlas(#[from] tessera_core::AtlasError),
    /// A setting is out of range for this adapter or atlas.
    #[error("{0}")]
    Config(String),
    /// Reading back a frame failed.
    #[error("reading back a frame from the GPU failed: {0}")]
    Readback(String),
    /// Writing an output file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The GPU device was lost (driver reset, GPU removed, out of memory, destroyed):
    /// recreate the [`crate::GpuContext`] and everything made with it, or exit.
    #[error(transparent)]
    DeviceLost(#[from] crate::lost::DeviceLost),
    /// The GPU did not finish the work submitted within the wait limit.
    #[error(
        "the GPU did not finish its work within {seconds} s (hung, or far more work than it can do); \
         restart the application"
    )]
    GpuTimeout {
        /// The limit, seconds.
        seconds: u64,
    },
    /// A call that blocks until the GPU answers was made where no thread may block
    /// (in a browser, wasm32: the answer comes from the event loop that the blocked
    /// thread would hold up); `instead` is its `async` twin.
    #[error("{call} would block this thread, which a browser does not allow: use {instead}")]
    WouldBlock {
        /// The blocking call.
        call: &'static str,
        /// What to call instead.
        instead: &'static str,
    },
    /// A camera path could not be loaded.
    #[error(transparent)]
    Camera(#[from] tessera_core::scene::camera::CameraError),
}
