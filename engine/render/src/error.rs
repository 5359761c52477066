//! The renderer's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the renderer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// No GPU adapter could be found.
    #[error(
        "no GPU adapter found ({0}). Install a Vulkan driver: on Debian, `apt-get install mesa-vulkan-drivers libvulkan1` \
         gives the lavapipe software driver; or pick another backend with WGPU_BACKEND=vulkan|metal|dx12|gl"
    )]
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
    /// A camera path could not be loaded.
    #[error(transparent)]
    Camera(#[from] tessera_core::scene::camera::CameraError),
}
