//! Feedback through a colour target: the main pass writes each pixel's request (the
//! wanted tile's page-table entry + 1) to an `R32Uint` attachment instead of setting
//! bits in a storage buffer, so its fragment shader has no side effect and early depth
//! testing holds on every driver; after the passes, a compute pass
//! (`shaders/feedback_resolve.wgsl`) reads one pixel per feedback block of the target
//! (this frame's phase, as the storage path) into the bitset, which the compaction
//! pass and the readback ring then treat as before.
//!
//! Each request also says whether the pixel was shown through a coarser tile than it
//! wanted (bit 31), and the resolve pass counts the pixels read and those shown coarser:
//! the share of blurry pixels per frame, read back with the frame's feedback.
//!
//! The target belongs to the virtual textures and follows the size asked for (it is
//! remade when the size changes). Several passes of one frame may share it: the first
//! attachment handed out since the last resolve clears it, later ones load it. Passes
//! that draw different views (a prefetch view, then the visible one) resolve in
//! between ([`crate::VirtualTextures::resolve_feedback`]), or the second overwrites
//! the first's requests where they overlap.

use std::sync::Mutex;

use tessera_core::stream::streamer::ShaderParams;
use wgpu::util::DeviceExt;

use crate::shaders::FEEDBACK_RESOLVE_WGSL;

/// The texel format of the feedback target: one request per pixel.
pub const FEEDBACK_TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::R32Uint;

/// The depth format of a predicted view's pass.
pub const PREDICTED_DEPTH_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Depth32Float;

/// Bytes of the resolve counters (`ResolveCounts`: two counters and padding).
pub(crate) const COUNTS_BYTES: u64 = 16;

/// Side of the resolve pass' workgroups (`@workgroup_size(8, 8)`).
const WORKGROUP: u32 = 8;

/// A colour attachment for this frame's feedback target, from
/// [`crate::VirtualTextures::feedback_attachment`].
#[derive(Clone, Debug)]
pub struct FeedbackAttachment {
    view: wgpu::TextureView,
    clear: bool,
    /// A depth buffer of the same size (predicted views, which have none of their own).
    depth: Option<wgpu::TextureView>,
}

impl FeedbackAttachment {
    /// The attachment to add to the render pass, at the `@location` the fragment shader
    /// writes `vt_request()` to: it clears the target to "no request" when it is the
    /// frame's first, and keeps what earlier passes wrote otherwise.
    pub fn attachment(&self) -> wgpu::RenderPassColorAttachment<'_> {
        let load =
            if self.clear { wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT) } else { wgpu::LoadOp::Load };
        wgpu::RenderPassColorAttachment {
            view: &self.view,
            depth_slice: None,
            resolve_target: None,
            ops: wgpu::Operations { load, store: wgpu::StoreOp::Store },
        }
    }

    /// The target's view.
    pub fn view(&self) -> &wgpu::TextureView {
        &self.view
    }

    /// The depth attachment that goes with a predicted view's target (cleared with it),
    /// `None` for the main feedback target, whose passes bring their own.
    pub fn depth_attachment(&self) -> Option<wgpu::RenderPassDepthStencilAttachment<'_>> {
        let load = if self.clear { wgpu::LoadOp::Clear(1.0) } else { wgpu::LoadOp::Load };
        self.depth.as_ref().map(|view| wgpu::RenderPassDepthStencilAttachment {
            view,
            depth_ops: Some(wgpu::Operations { load, store: wgpu::StoreOp::Store }),
            stencil_ops: None,
        })
    }
}

/// The target of one size, and the resolve pass' bind group reading it.
struct Target {
    size: (u32, u32),
    view: wgpu::TextureView,
    depth: Option<wgpu::TextureView>,
    /// The resolve's bind group, counting into the frame's counters.
    bind_group: wgpu::BindGroup,
    /// The same, counting into a buffer nobody reads (resolves of other views).
    uncounted: wgpu::BindGroup,
}

/// What changes between frames.
struct State {
    target: Option<Target>,
    /// An attachment was handed out since the frame began or the last resolve.
    unresolved: bool,
    /// A resolve ran this frame: the counters hold this frame's pixels.
    resolved: bool,
    /// Feedback mask (stride − 1) of the frame.
    mask: u32,
}

/// The feedback target, its resolve pipeline and the parameters of the current frame.
pub(crate) struct FeedbackTargets {
    device: wgpu::Device,
    bitset: wgpu::Buffer,
    params: wgpu::Buffer,
    /// Pixels read and pixels shown coarser (`ResolveCounts`), summed over the frame's
    /// counted resolves.
    counts: wgpu::Buffer,
    /// Where uncounted resolves count.
    discarded: wgpu::Buffer,
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    /// Make a depth buffer beside each target (a predicted view's).
    with_depth: bool,
    state: Mutex<State>,
}

impl FeedbackTargets {
    /// The resolve pipeline writing into `bitset`; no target until one is asked for.
    /// `with_depth`: each target comes with a depth buffer of its size.
    pub(crate) fn new(device: &wgpu::Device, bitset: &wgpu::Buffer, with_depth: bool) -> Self {
        let words = u32::try_from(bitset.size() / 4).unwrap_or(u32::MAX);
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("tessera feedback resolve params"),
            contents: bytemuck::cast_slice(&[0u32, 0, words, 0]),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        });
        let counts = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera feedback resolve counts"),
            size: COUNTS_BYTES,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let discarded = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera feedback resolve uncounted"),
            size: COUNTS_BYTES,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tessera feedback resolve"),
            source: wgpu::ShaderSource::Wgsl(FEEDBACK_RESOLVE_WGSL.into()),
        });
        let compute = wgpu::ShaderStages::COMPUTE;
        let storage = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: compute,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tessera feedback resolve"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: compute,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 1,
                    visibility: compute,
                    ty: wgpu::BindingType::Texture {
                        sample_type: wgpu::TextureSampleType::Uint,
                        view_dimension: wgpu::TextureViewDimension::D2,
                        multisampled: false,
                    },
                    count: None,
                },
                storage(2),
                storage(3),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera feedback resolve"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("tessera feedback resolve"),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("resolve"),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        Self {
            device: device.clone(),
            bitset: bitset.clone(),
            params,
            counts,
            discarded,
            pipeline,
            layout,
            with_depth,
            state: Mutex::new(State { target: None, unresolved: false, resolved: false, mask: 0 }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain data: a panic elsewhere cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new frame whose feedback block is `shader`'s (mask and phase): clears the
    /// counters in `encoder` (the frame's, before its passes); its first attachment
    /// clears the target.
    pub(crate) fn begin(
        &self,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        shader: &ShaderParams,
    ) {
        let mut state = self.state();
        state.unresolved = false;
        state.resolved = false;
        state.mask = shader.feedback_mask;
        queue.write_buffer(
            &self.params,
            0,
            bytemuck::cast_slice(&[shader.feedback_mask, shader.feedback_phase]),
        );
        encoder.clear_buffer(&self.counts, 0, None);
    }

    /// The attachment for a pass of `width × height` pixels (at least 1 × 1), making
    /// the target when there is none of that size.
    pub(crate) fn attachment(&self, width: u32, height: u32) -> FeedbackAttachment {
        let size = (width.max(1), height.max(1));
        let mut state = self.state();
        if state.target.as_ref().is_some_and(|t| t.size != size) {
            if state.unresolved {
                // The earlier pass's requests would be lost with its target.
                tracing::warn!(
                    "feedback target asked for at {}x{} after a pass at another size without resolve_feedback \
                     in between: that pass's requests are lost",
                    size.0,
                    size.1
                );
            }
            state.target = None;
        }
        let target = state.target.get_or_insert_with(|| self.make_target(size));
        let (view, depth) = (target.view.clone(), target.depth.clone());
        let clear = !state.unresolved;
        state.unresolved = true;
        FeedbackAttachment { view, clear, depth }
    }

    fn make_target(&self, (width, height): (u32, u32)) -> Target {
        let texture = self.device.create_texture(&wgpu::TextureDescriptor {
            label: Some("tessera feedback target"),
            size: wgpu::Extent3d { width, height, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: FEEDBACK_TARGET_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::TEXTURE_BINDING,
            view_formats: &[],
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        let group = |counts: &wgpu::Buffer| {
            self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("tessera feedback resolve"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: self.params.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::TextureView(&view) },
                    wgpu::BindGroupEntry { binding: 2, resource: self.bitset.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: counts.as_entire_binding() },
                ],
            })
        };
        let (bind_group, uncounted) = (group(&self.counts), group(&self.discarded));
        let depth = self.with_depth.then(|| {
            self.device
                .create_texture(&wgpu::TextureDescriptor {
                    label: Some("tessera predicted view depth"),
                    size: wgpu::Extent3d { width, height, depth_or_array_layers: 1 },
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D2,
                    format: PREDICTED_DEPTH_FORMAT,
                    usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
                    view_formats: &[],
                })
                .create_view(&wgpu::TextureViewDescriptor::default())
        });
        Target { size: (width, height), view, depth, bind_group, uncounted }
    }

    /// After a pass that wrote the target (before the next one that would overwrite it,
    /// and before the compaction): when an attachment was handed out since the last
    /// resolve, records the resolve pass into `encoder`. Only `counted` resolves add to
    /// the frame's pixel counters (the view the frame shows, not a hidden one drawn
    /// ahead of it).
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder, counted: bool) {
        let mut state = self.state();
        if !state.unresolved {
            return;
        }
        state.unresolved = false;
        state.resolved |= counted;
        let Some(target) = state.target.as_ref() else { return };
        let (x, y) = resolve_grid(target.size, state.mask + 1);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("tessera feedback resolve"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, if counted { &target.bind_group } else { &target.uncounted }, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }

    /// Whether a pass wrote the target since the last resolve.
    pub(crate) fn unresolved(&self) -> bool {
        self.state().unresolved
    }

    /// The counters (pixels read that requested a tile, pixels shown coarser: two
    /// little-endian u32 in [`COUNTS_BYTES`]) when a resolve ran this frame.
    pub(crate) fn counts(&self) -> Option<&wgpu::Buffer> {
        self.state().resolved.then_some(&self.counts)
    }

    /// GPU bytes of the target (0 before one is asked for).
    pub(crate) fn gpu_bytes(&self) -> u64 {
        let per_texel = if self.with_depth { 8 } else { 4 };
        self.state().target.as_ref().map_or(0, |t| per_texel * u64::from(t.size.0) * u64::from(t.size.1))
    }
}

/// Workgroups of the resolve pass over a target of `size` read at `stride`: one
/// invocation per feedback block.
pub(crate) fn resolve_grid(size: (u32, u32), stride: u32) -> (u32, u32) {
    let stride = stride.max(1);
    (size.0.div_ceil(stride).div_ceil(WORKGROUP).max(1), size.1.div_ceil(stride).div_ceil(WORKGROUP).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block of every size and stride has an invocation, and no row or column
    /// of workgroups is wholly outside the target.
    #[test]
    fn the_resolve_grid_covers_each_block_once() {
        for size in [(1, 1), (7, 9), (8, 8), (640, 360), (1920, 1080), (1921, 1)] {
            for stride in [1, 2, 4, 8] {
                let (x, y) = resolve_grid(size, stride);
                let blocks = (size.0.div_ceil(stride), size.1.div_ceil(stride));
                assert!(x * WORKGROUP >= blocks.0 && y * WORKGROUP >= blocks.1, "{size:?} {stride}");
                assert!(
                    (x - 1) * WORKGROUP < blocks.0 && (y - 1) * WORKGROUP < blocks.1,
                    "{size:?} {stride}"
                );
            }
        }
    }
}
