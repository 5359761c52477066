//! The streamed atlas' scene: its first layer on a plane (the layer's aspect ratio),
//! seen through a camera path chosen by name, drawn through the engine's
//! [`VirtualTextures`] and `vt_sample`; and the sums of a frame read back.

use bytemuck::{Pod, Zeroable};
use glam::{Mat4, Vec3};
use tessera::core::scene::camera::Camera;
use tessera::{GpuContext, RenderError, VirtualTextures, VtFrame, VtLayer, wgpu};

use crate::gpu::{Uniform, scene_pipeline};

/// The plane's shader: `vt_sample` comes from `VT_WGSL`, prepended; the virtual texture
/// is bind group 1.
const PLANE_WGSL: &str = r#"
struct Look {
    view_proj: mat4x4<f32>,
    // x: the plane's half width (its half depth is 1).
    plane: vec4<f32>,
}
@group(0) @binding(0) var<uniform> look: Look;

struct VsOut {
    @builtin(position) pos: vec4<f32>,
    @location(0) uv: vec2<f32>,
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    let corners = array<vec2<f32>, 6>(
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0),
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 1.0), vec2<f32>(0.0, 1.0),
    );
    let uv = corners[i];
    var out: VsOut;
    out.pos = look.view_proj * vec4<f32>((uv.x * 2.0 - 1.0) * look.plane.x, 0.0, uv.y * 2.0 - 1.0, 1.0);
    out.uv = uv;
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    return vec4<f32>(vt_sample(in.uv, in.pos).rgb, 1.0);
}
"#;

/// The colour the plane's surroundings are cleared to (linear).
pub const BACKGROUND: wgpu::Color = wgpu::Color { r: 0.02, g: 0.03, b: 0.06, a: 1.0 };

/// Matches `Look` in [`PLANE_WGSL`].
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Look {
    view_proj: [[f32; 4]; 4],
    plane: [f32; 4],
}

/// How the camera moves over the plane, by name (the page's `?camera=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CameraPath {
    /// The whole plane from above, still.
    Static,
    /// From the whole plane down to a low, oblique view near its middle over
    /// [`CameraPath::FLY_FRAMES`] frames, then still.
    Fly,
}

impl CameraPath {
    /// Frames the flyover moves for.
    pub const FLY_FRAMES: u64 = 120;

    /// The path named `name` (`static` or `fly`), or a message listing the names.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "static" => Ok(Self::Static),
            "fly" => Ok(Self::Fly),
            other => Err(format!("unknown camera path \"{other}\" (use camera=static or camera=fly)")),
        }
    }

    /// The path's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::Fly => "fly",
        }
    }

    /// The first frame from which the camera stands still.
    pub fn still_from(self) -> u64 {
        match self {
            Self::Static => 0,
            Self::Fly => Self::FLY_FRAMES,
        }
    }

    /// The camera at `frame` over a plane `half_width` wide (half depth 1).
    pub fn camera(self, frame: u64, half_width: f32) -> Camera {
        let (high_eye, high_target) = (Vec3::new(0.0, 1.7 * half_width.max(1.0), 0.3), Vec3::ZERO);
        let t = match self {
            Self::Static => 0.0,
            Self::Fly => (frame.min(Self::FLY_FRAMES) as f32 / Self::FLY_FRAMES as f32).clamp(0.0, 1.0),
        };
        // Ease in and out.
        let t = t * t * (3.0 - 2.0 * t);
        let low_eye = Vec3::new(0.35 * half_width, 0.22, 0.45);
        let low_target = Vec3::new(0.35 * half_width, 0.0, -0.1);
        let camera = Camera::look_at(high_eye.lerp(low_eye, t), high_target.lerp(low_target, t));
        Camera { fov_y_degrees: 50.0, ..camera }
    }
}

/// The pipeline that draws one layer of a [`VirtualTextures`] on the plane.
pub struct PlaneScene {
    pipeline: wgpu::RenderPipeline,
    look_buffer: wgpu::Buffer,
    look_group: wgpu::BindGroup,
    layer: VtLayer,
    half_width: f32,
}

impl PlaneScene {
    /// The scene of `vt`'s first layer, drawn into `color_format` targets.
    pub fn new(
        ctx: &GpuContext,
        vt: &VirtualTextures,
        color_format: wgpu::TextureFormat,
    ) -> Result<Self, RenderError> {
        let layer = vt.layer(0).ok_or_else(|| RenderError::Config("the atlas has no layer".into()))?;
        let layout = &vt.atlas().layers()[layer.index()].layout;
        let half_width = layout.width() as f32 / layout.height().max(1) as f32;
        let device = &ctx.device;
        let look =
            Uniform::new(device, "plane look", wgpu::ShaderStages::VERTEX_FRAGMENT, size_of::<Look>() as u64);
        let layouts = [Some(&look.layout), Some(vt.bind_group_layout())];
        let pipeline = scene_pipeline(device, "plane", PLANE_WGSL, &layouts, color_format);
        let Uniform { buffer: look_buffer, group: look_group, .. } = look;
        Ok(Self { pipeline, look_buffer, look_group, layer, half_width })
    }

    /// The plane's half width (its half depth is 1): the layer's aspect ratio.
    pub fn half_width(&self) -> f32 {
        self.half_width
    }

    /// Records the plane seen by `camera` into `view` (`size` pixels), between `vt`'s
    /// `begin` and `finish`.
    pub fn draw(
        &self,
        ctx: &GpuContext,
        frame: &VtFrame<'_>,
        encoder: &mut wgpu::CommandEncoder,
        view: &wgpu::TextureView,
        size: (u32, u32),
        camera: &Camera,
    ) {
        let aspect = size.0 as f32 / size.1.max(1) as f32;
        let view_proj: Mat4 = camera.view_projection(aspect);
        let look = Look { view_proj: view_proj.to_cols_array_2d(), plane: [self.half_width, 0.0, 0.0, 0.0] };
        ctx.queue.write_buffer(&self.look_buffer, 0, bytemuck::bytes_of(&look));
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("plane"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(BACKGROUND), store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.look_group, &[]);
        pass.set_bind_group(1, frame.bind_group(self.layer), &[]);
        pass.draw(0..6, 0..1);
    }
}

/// Sums of a frame's RGBA8 pixels: enough to tell an image from a blank or flat one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImageStats {
    /// Mean luma (0–255).
    pub mean: f64,
    /// Standard deviation of luma.
    pub stddev: f64,
    /// Distinct colours, each channel quantised to 5 bits.
    pub colours: usize,
    /// Share of the pixels that show the pool's unwritten colour (magenta): slots
    /// sampled that no tile was uploaded to.
    pub unwritten: f64,
}

impl ImageStats {
    /// The sums of `pixels` (RGBA8, row by row).
    pub fn of(pixels: &[u8]) -> Self {
        let n = (pixels.len() / 4).max(1) as f64;
        let (mut sum, mut sum2, mut unwritten) = (0.0, 0.0, 0usize);
        let mut seen = vec![false; 1 << 15];
        for px in pixels.chunks_exact(4) {
            let y = 0.2126 * f64::from(px[0]) + 0.7152 * f64::from(px[1]) + 0.0722 * f64::from(px[2]);
            sum += y;
            sum2 += y * y;
            let q =
                (usize::from(px[0] >> 3) << 10) | (usize::from(px[1] >> 3) << 5) | usize::from(px[2] >> 3);
            seen[q] = true;
            if px[0] > 240 && px[1] < 16 && px[2] > 240 {
                unwritten += 1;
            }
        }
        let mean = sum / n;
        Self {
            mean,
            stddev: (sum2 / n - mean * mean).max(0.0).sqrt(),
            colours: seen.iter().filter(|s| **s).count(),
            unwritten: unwritten as f64 / n,
        }
    }

    /// Whether the frame looks like a picture: varied, many colours, nothing unwritten.
    pub fn non_trivial(&self) -> bool {
        self.stddev > 8.0 && self.colours > 64 && self.unwritten < 0.001
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camera_paths_parse_and_settle() {
        assert_eq!(CameraPath::parse("static"), Ok(CameraPath::Static));
        assert_eq!(CameraPath::parse("fly"), Ok(CameraPath::Fly));
        assert!(CameraPath::parse("orbit").unwrap_err().contains("camera=fly"));
        let fly = CameraPath::Fly;
        assert_eq!(fly.camera(0, 2.0), CameraPath::Static.camera(0, 2.0));
        assert_eq!(fly.camera(fly.still_from(), 2.0), fly.camera(fly.still_from() + 50, 2.0));
        assert!(fly.camera(fly.still_from(), 2.0).position.y < 0.5);
    }

    #[test]
    fn image_stats_tell_pictures_from_flat_frames() {
        let flat = vec![40u8; 64 * 64 * 4];
        assert!(!ImageStats::of(&flat).non_trivial());
        let picture: Vec<u8> =
            (0..64 * 64).flat_map(|i| [(i % 251) as u8, (i * 7 % 256) as u8, (i / 16) as u8, 255]).collect();
        let s = ImageStats::of(&picture);
        assert!(s.non_trivial(), "{s:?}");
    }
}
