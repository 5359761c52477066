//! What the viewer draws with: the window surface and its blit, the GPU context, the
//! scene target, the opened scene (virtual textures and drawer) and egui's renderer.

use std::sync::Arc;

use anyhow::{Context, Result};
use tessera::core::Atlas;
use tessera::{GpuContext, StreamerConfig, VirtualTextures, VtConfig};
use tessera_tools::drawer::Drawer;
use tessera_tools::open_drawn;
use tessera_tools::scene::{OffscreenTarget, TARGET_FORMAT};
use winit::dpi::PhysicalSize;
use winit::window::Window;

use crate::Args;
use crate::bake::Opened;

const BLIT_WGSL: &str = r"
@group(0) @binding(0) var src: texture_2d<f32>;

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
}

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    return textureLoad(src, vec2<i32>(pos.xy), 0);
}
";

/// The streamed atlas and what is drawn with it: the built-in meshes or a lit material
/// scene.
pub(crate) struct Scene {
    /// What was opened.
    pub(crate) opened: Opened,
    pub(crate) vt: VirtualTextures,
    pub(crate) drawer: Box<dyn Drawer>,
    pub(crate) pool_mib: u32,
}

/// The frame time the upload budget adapts to: a 60 Hz frame without vsync; with vsync
/// none (the fixed `--upload-budget`), since the time between vsynced frames is the
/// display's whatever the work, and would leave the budget no room at all.
pub(crate) fn upload_target(vsync: bool) -> Option<f64> {
    (!vsync).then_some(1000.0 / 60.0)
}

/// Opens the atlas of `opened` and sets up its virtual textures and drawer.
pub(crate) fn load_scene(
    ctx: &GpuContext,
    opened: &Opened,
    args: &Args,
    pool_mib: u32,
    vsync: bool,
) -> Result<Scene> {
    let path = &opened.atlas;
    let cfg = VtConfig {
        pool_mib,
        streaming: StreamerConfig {
            host_cache_mib: args.host_cache_mib,
            max_uploads_per_frame: args.upload_budget.max(1),
            mip_bias: args.mip_bias,
            target_frame_ms: upload_target(vsync),
            ..StreamerConfig::default()
        },
        // The camera extrapolated PREDICT_FRAMES on is drawn as a predicted view.
        prediction: true,
        ..VtConfig::default()
    };
    let (vt, drawer) =
        open_drawn(ctx, cfg, opened.terrain.as_deref(), opened.scene.as_deref(), || Ok(Atlas::open(path)?))
            .with_context(|| format!("setting up {} ({})", opened.name, path.display()))?;
    Ok(Scene { opened: opened.clone(), vt, drawer, pool_mib })
}

/// Everything that needs the window: surface, device, targets, egui.
pub(crate) struct Gfx {
    pub(crate) window: Arc<Window>,
    pub(crate) ctx: GpuContext,
    /// The window surface and the blit of the scene target onto it.
    pub(crate) present: Presenter,
    pub(crate) target: OffscreenTarget,
    /// `None` until the first atlas is open (while it bakes, or after it failed).
    pub(crate) scene: Option<Scene>,
    /// The pool texture registered with egui, for the thumbnail.
    pub(crate) pool_texture: Option<egui::TextureId>,
    pub(crate) egui_ctx: egui::Context,
    pub(crate) egui_state: egui_winit::State,
    pub(crate) egui_renderer: egui_wgpu::Renderer,
}

/// The window surface, its configuration and the pass that copies the scene target
/// onto it.
pub(crate) struct Presenter {
    surface: wgpu::Surface<'static>,
    /// The surface configuration (size, present mode).
    pub(crate) config: wgpu::SurfaceConfiguration,
    view_format: wgpu::TextureFormat,
    blit: wgpu::RenderPipeline,
    blit_layout: wgpu::BindGroupLayout,
    blit_group: wgpu::BindGroup,
}

impl Gfx {
    pub(crate) fn new(window: Arc<Window>, args: &Args) -> Result<Self> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_with_display_handle_from_env(
            Box::new(window.clone()),
        ));
        let surface = instance.create_surface(window.clone()).context("creating the window surface")?;
        let ctx = GpuContext::with_instance(instance, Some(&surface))?;
        println!("adapter: {}", ctx.describe());
        let size = window.inner_size();
        let caps = surface.get_capabilities(&ctx.adapter);
        let format = caps
            .formats
            .iter()
            .copied()
            .find(wgpu::TextureFormat::is_srgb)
            .or_else(|| caps.formats.first().copied())
            .context("the window surface supports no texture format")?;
        let mut config = surface
            .get_default_config(&ctx.adapter, size.width.max(1), size.height.max(1))
            .context("the adapter cannot present to this window")?;
        config.format = format;
        // A linear surface format is viewed as sRGB so the blit writes encoded colour.
        let view_format = format.add_srgb_suffix();
        config.view_formats = if view_format == format { vec![] } else { vec![view_format] };
        config.present_mode =
            if args.no_vsync { wgpu::PresentMode::AutoNoVsync } else { wgpu::PresentMode::AutoVsync };
        surface.configure(&ctx.device, &config);
        let device = &ctx.device;
        let blit_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("viewer blit"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::FRAGMENT,
                ty: wgpu::BindingType::Texture {
                    sample_type: wgpu::TextureSampleType::Float { filterable: false },
                    view_dimension: wgpu::TextureViewDimension::D2,
                    multisampled: false,
                },
                count: None,
            }],
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("viewer blit"),
            source: wgpu::ShaderSource::Wgsl(BLIT_WGSL.into()),
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("viewer blit"),
            bind_group_layouts: &[Some(&blit_layout)],
            immediate_size: 0,
        });
        let blit = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("viewer blit"),
            layout: Some(&layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs_main"),
                compilation_options: Default::default(),
                buffers: &[],
            },
            primitive: Default::default(),
            depth_stencil: None,
            multisample: Default::default(),
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fs_main"),
                compilation_options: Default::default(),
                targets: &[Some(view_format.into())],
            }),
            multiview_mask: None,
            cache: None,
        });
        let target = OffscreenTarget::new(device, config.width, config.height);
        let blit_group = blit_group(device, &blit_layout, &target);
        let egui_ctx = egui::Context::default();
        let egui_state = egui_winit::State::new(
            egui_ctx.clone(),
            egui::ViewportId::ROOT,
            &window,
            Some(window.scale_factor() as f32),
            None,
            Some(device.limits().max_texture_dimension_2d as usize),
        );
        let egui_renderer = egui_wgpu::Renderer::new(device, TARGET_FORMAT, Default::default());
        Ok(Self {
            window,
            ctx,
            present: Presenter { surface, config, view_format, blit, blit_layout, blit_group },
            target,
            scene: None,
            pool_texture: None,
            egui_ctx,
            egui_state,
            egui_renderer,
        })
    }

    /// Replaces the scene, re-registering the pool thumbnail.
    pub(crate) fn set_scene(&mut self, scene: Scene) {
        self.register_pool(&scene);
        self.scene = Some(scene);
    }

    /// Shows `scene`'s pool texture in the overlay's thumbnail.
    fn register_pool(&mut self, scene: &Scene) {
        if let Some(id) = self.pool_texture.take() {
            self.egui_renderer.free_texture(&id);
        }
        self.pool_texture = Some(self.egui_renderer.register_native_texture(
            &self.ctx.device,
            scene.vt.pool().view(),
            wgpu::FilterMode::Linear,
        ));
    }

    /// Resizes the open scene's tile pool to `mib` MiB in place: the host cache, the
    /// loader threads and the drawer's pipelines stay.
    pub(crate) fn resize_pool(&mut self, mib: u32) -> Result<()> {
        let Some(mut scene) = self.scene.take() else { return Ok(()) };
        let resized = scene.vt.set_pool_mib(&self.ctx, mib);
        if resized.is_ok() {
            scene.pool_mib = mib;
            self.register_pool(&scene);
        }
        self.scene = Some(scene);
        Ok(resized?)
    }

    pub(crate) fn resize(&mut self, size: PhysicalSize<u32>) {
        if size.width == 0 || size.height == 0 {
            return;
        }
        let p = &mut self.present;
        p.config.width = size.width;
        p.config.height = size.height;
        p.surface.configure(&self.ctx.device, &p.config);
        self.target = OffscreenTarget::new(&self.ctx.device, size.width, size.height);
        p.blit_group = blit_group(&self.ctx.device, &p.blit_layout, &self.target);
    }
}

impl Presenter {
    /// Applies the configuration to the surface.
    pub(crate) fn configure(&self, device: &wgpu::Device) {
        self.surface.configure(device, &self.config);
    }

    /// Takes the surface's next texture (recreating a lost surface, reconfiguring an
    /// outdated one) and records the blit of the scene target into it. Returns the
    /// texture to present, if any, and whether to reconfigure after presenting.
    pub(crate) fn blit(
        &mut self,
        ctx: &GpuContext,
        window: &Arc<Window>,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<(Option<wgpu::SurfaceTexture>, bool)> {
        let mut reconfigure = false;
        let texture = match self.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(t) => Some(t),
            wgpu::CurrentSurfaceTexture::Suboptimal(t) => {
                reconfigure = true;
                Some(t)
            }
            wgpu::CurrentSurfaceTexture::Lost => {
                let instance = ctx.instance.as_ref().context("the GPU context has no instance")?;
                self.surface =
                    instance.create_surface(window.clone()).context("recreating the lost window surface")?;
                self.configure(&ctx.device);
                None
            }
            wgpu::CurrentSurfaceTexture::Outdated => {
                self.configure(&ctx.device);
                None
            }
            // Timeout, occluded: skip presenting this frame; the scene still streams.
            _ => None,
        };
        if let Some(t) = &texture {
            let view = t.texture.create_view(&wgpu::TextureViewDescriptor {
                format: Some(self.view_format),
                ..Default::default()
            });
            let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("blit to surface"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                depth_stencil_attachment: None,
                timestamp_writes: None,
                occlusion_query_set: None,
                multiview_mask: None,
            });
            pass.set_pipeline(&self.blit);
            pass.set_bind_group(0, &self.blit_group, &[]);
            pass.draw(0..3, 0..1);
        }
        Ok((texture, reconfigure))
    }
}

fn blit_group(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    target: &OffscreenTarget,
) -> wgpu::BindGroup {
    device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("viewer blit"),
        layout,
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::TextureView(&target.color_view),
        }],
    })
}

/// Clears the scene target when there is no scene to draw.
pub(crate) fn clear(encoder: &mut wgpu::CommandEncoder, view: &wgpu::TextureView) {
    encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
        label: Some("no scene"),
        color_attachments: &[Some(wgpu::RenderPassColorAttachment {
            view,
            depth_slice: None,
            resolve_target: None,
            ops: wgpu::Operations {
                load: wgpu::LoadOp::Clear(wgpu::Color { r: 0.05, g: 0.06, b: 0.08, a: 1.0 }),
                store: wgpu::StoreOp::Store,
            },
        })],
        depth_stencil_attachment: None,
        timestamp_writes: None,
        occlusion_query_set: None,
        multiview_mask: None,
    });
}

/// Draws egui's tessellated `jobs` over the scene target.
pub(crate) fn draw_egui(
    renderer: &egui_wgpu::Renderer,
    encoder: &mut wgpu::CommandEncoder,
    view: &wgpu::TextureView,
    jobs: &[egui::ClippedPrimitive],
    screen: &egui_wgpu::ScreenDescriptor,
) {
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
    renderer.render(&mut pass.forget_lifetime(), jobs, screen);
}
