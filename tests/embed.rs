//! The embedding example (`engine/render/examples/embed.rs`) run as a test on
//! lavapipe: a user pipeline and WGSL over `vt.wgsl`, driven by `begin` / `finish`,
//! whose last frame must match its golden image; and the rest of the embedding API:
//! the application's own device, frame misuse, layer handles, two virtual textures in
//! one shader with a shared cache, and pool resizing.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

#[allow(dead_code, unreachable_pub)]
#[path = "../engine/render/examples/embed.rs"]
mod embed;

#[allow(dead_code, unreachable_pub)]
#[path = "../engine/render/examples/runtime_vt.rs"]
mod runtime_vt_example;

use tessera_tests::{check_golden, gpu};

#[test]
fn embed_example_last_frame_matches_its_golden() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = embed::bake_test_atlas(dir.path()).unwrap();
    let (pixels, stats) = embed::run(gpu(), &atlas).unwrap();
    assert!(stats.vram_counters.uploads > 0, "nothing streamed: {stats:?}");
    check_golden("embed-19", (640, 360), &pixels, 40.0);
}

/// The same program on a device the application created itself (`own_device`: plain
/// wgpu calls, then `GpuContext::from_parts`) renders the same frame.
#[test]
fn embed_example_on_the_applications_own_device_matches_the_same_golden() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = embed::bake_test_atlas(dir.path()).unwrap();
    let ctx = embed::own_device().unwrap_or_else(|e| {
        panic!(
            "{e:#}\nOn Debian: sudo apt-get install mesa-vulkan-drivers libvulkan1 (scripts/test does this)"
        )
    });
    assert!(ctx.instance.is_none(), "from_parts keeps the app's objects and makes no instance");
    let (pixels, _) = embed::run(&ctx, &atlas).unwrap();
    check_golden("embed-19", (640, 360), &pixels, 40.0);
}

/// Misuse of the frame API that compiles is a clear error or state, never silence:
/// `resident_fraction` is `None` before feedback, frames dropped unfinished stop the
/// feedback and `feedback_stalled` says so (with a warning), finishing again clears it,
/// and out-of-range settings are refused by `new`. (Misuse that does not compile is
/// tested by the `compile_fail` examples on `VtFrame`.)
#[test]
fn frame_api_misuse_is_reported() {
    use std::sync::Arc;
    use tessera::{VirtualTextures, VtConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = tessera_tests::bake_source(
        dir.path(),
        "small",
        tessera::core::bake::source::Generated::new(512, 512),
    );
    let atlas = Arc::new(tessera::core::Atlas::open(&path).unwrap());
    let ctx = gpu();
    for (bad, what) in [
        (VtConfig { max_anisotropy: 16, ..VtConfig::default() }, "max_anisotropy 16"),
        (
            VtConfig {
                streaming: tessera::StreamerConfig {
                    feedback_stride: 3,
                    ..tessera::StreamerConfig::default()
                },
                ..VtConfig::default()
            },
            "feedback_stride 3",
        ),
        (
            VtConfig {
                streaming: tessera::StreamerConfig {
                    mip_bias: f32::NAN,
                    ..tessera::StreamerConfig::default()
                },
                ..VtConfig::default()
            },
            "mip_bias NaN",
        ),
        (VtConfig { debug_view: 9, ..VtConfig::default() }, "debug_view 9"),
        (VtConfig { pool_mib: 0, ..VtConfig::default() }, "pool_mib is 0"),
    ] {
        let e = VirtualTextures::new(ctx, atlas.clone(), bad).err().expect(what).to_string();
        assert!(e.contains(what), "{what}: {e}");
    }
    let mut vt = VirtualTextures::new(ctx, atlas, VtConfig { pool_mib: 4, ..VtConfig::default() }).unwrap();
    assert_eq!(vt.resident_fraction(), None, "no feedback yet");
    assert!(!vt.fully_resident());
    let frames = tessera::vt::FEEDBACK_STALL_FRAMES + 2;
    for _ in 0..frames {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let frame = vt.begin(ctx, &mut encoder);
        drop(frame); // never finished: its feedback is lost
    }
    assert!(vt.feedback_stalled(), "{frames} frames without feedback went unnoticed");
    assert_eq!(vt.resident_fraction(), None);
    for _ in 0..4 {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let frame = vt.begin(ctx, &mut encoder);
        frame.finish(ctx, encoder).unwrap();
        ctx.wait_idle().unwrap();
    }
    assert!(!vt.feedback_stalled(), "feedback arrives again once frames are finished");
    assert!(vt.resident_fraction().is_some());
    // The page-table jobs recorded into the dropped frames' encoders never ran: the
    // first finished frame rebuilt the complete table, which names every tile's nearest
    // resident tile (the coarsest mips, queued by `new`, among them).
    let layer = vt.layer(0).unwrap();
    let tessera::PageTableResource::Buffer(table) = vt.binding_resources(layer).page_table.clone() else {
        panic!("the default page table is a buffer")
    };
    let out = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: table.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(&table, 0, &out, 0, table.size());
    ctx.queue.submit([enc.finish()]);
    out.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
    ctx.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let got: Vec<u32> = bytemuck::cast_slice(&out.get_mapped_range(..).unwrap()).to_vec();
    let pt = vt.residency().page_table();
    for (g, &entry) in got.iter().enumerate().take(pt.len()) {
        let want = match pt.lookup(pt.layout().tile_at(g).unwrap()) {
            0 => tessera_core::stream::complete_table::UNMAPPED,
            e => e,
        };
        assert_eq!(entry, want, "entry {g}: {:?}", pt.layout().tile_at(g));
    }
}

/// A layer handle binds only for the virtual textures that made it: another one's is a
/// panic naming the mistake, not a wrong texture.
#[test]
#[should_panic(expected = "belongs to other virtual textures")]
fn a_layer_of_other_virtual_textures_is_refused() {
    use std::sync::Arc;
    use tessera::{VirtualTextures, VtConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = tessera_tests::bake_source(
        dir.path(),
        "small",
        tessera::core::bake::source::Generated::new(256, 256),
    );
    let atlas = Arc::new(tessera::core::Atlas::open(&path).unwrap());
    let config = VtConfig {
        pool_mib: 2,
        streaming: tessera::StreamerConfig { loader_threads: 1, ..tessera::StreamerConfig::default() },
        ..VtConfig::default()
    };
    let a = VirtualTextures::new(gpu(), atlas.clone(), config.clone()).unwrap();
    let b = VirtualTextures::new(gpu(), atlas, config).unwrap();
    assert!(a.layer(1).is_none() && a.layer_named("nope").is_none());
    let layer = b.layer(0).unwrap();
    let _ = a.bind_group(layer);
}

mod two {
    //! Two virtual textures sampled by one shader (`vt_module` at groups 0 and 1), fed by
    //! one shared host cache and one set of loader threads; and `set_pool_mib`.
    use std::sync::Arc;

    use tessera::core::Atlas;
    use tessera::core::bake::source::Generated;
    use tessera::core::stream::streamer::SharedStreaming;
    use tessera::shaders::{VT_WGSL, vt_module};
    use tessera::{GpuContext, VirtualTextures, VtConfig, wgpu};
    use tessera_tests::{gpu, write_failure};
    use tessera_tools::scene::{OffscreenTarget, TARGET_FORMAT};

    /// Asserts `actual` matches `expected` (PSNR at least `min_db`), writing actual,
    /// expected and diff PNGs when it does not.
    fn compare_golden_psnr(name: &str, size: (u32, u32), actual: &[u8], expected: &[u8], min_db: f64) {
        let d = tessera::core::compare::compare(actual, expected);
        if d.psnr_db < min_db {
            let dir = write_failure(name, size, actual, expected);
            panic!(
                "{name}: PSNR {:.2} dB < {min_db} (max error {}); PNGs in {}",
                d.psnr_db,
                d.max_error,
                dir.display()
            );
        }
    }

    pub(super) const SIZE: (u32, u32) = (256, 128);

    /// A fullscreen triangle: the left half shows texture `first` over its whole
    /// extent, the right half `second`. `sample_a` / `sample_b` are the WGSL calls.
    fn shader(prefix: &str, sample_a: &str, sample_b: &str) -> String {
        format!(
            r#"{prefix}
struct VsOut {{ @builtin(position) pos: vec4<f32>, @location(0) uv: vec2<f32> }}
@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {{
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    var out: VsOut;
    out.pos = vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
    out.uv = vec2<f32>(p.x, 1.0 - p.y);
    return out;
}}
@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {{
    let ua = vec2<f32>(in.uv.x * 2.0, in.uv.y);
    let ub = vec2<f32>(in.uv.x * 2.0 - 1.0, in.uv.y);
    let ca = {sample_a};
    let cb = {sample_b};
    return select(cb, ca, in.uv.x < 0.5);
}}
"#
        )
    }

    fn pipeline(
        ctx: &GpuContext,
        src: String,
        groups: &[Option<&wgpu::BindGroupLayout>],
    ) -> wgpu::RenderPipeline {
        pipeline_with_targets(ctx, src, groups, &[Some(TARGET_FORMAT.into())])
    }

    /// A pipeline of `src` (`vs_main` and `fs_main`, no vertex buffers) writing `targets`.
    pub(super) fn pipeline_with_targets(
        ctx: &GpuContext,
        src: String,
        groups: &[Option<&wgpu::BindGroupLayout>],
        targets: &[Option<wgpu::ColorTargetState>],
    ) -> wgpu::RenderPipeline {
        let device = &ctx.device;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("two textures"),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: groups,
            immediate_size: 0,
        });
        device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("two textures"),
            layout: Some(&layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs_main"),
                compilation_options: Default::default(),
                buffers: &[],
            },
            primitive: wgpu::PrimitiveState::default(),
            depth_stencil: None,
            multisample: Default::default(),
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fs_main"),
                compilation_options: Default::default(),
                targets,
            }),
            multiview_mask: None,
            cache: None,
        })
    }

    /// Renders frames until every virtual texture is fully resident (at most 60), each
    /// at its bind group (`vts[i]` at `groups[i]`), and returns the last frame.
    fn render(
        ctx: &GpuContext,
        pipeline: &wgpu::RenderPipeline,
        vts: &mut [&mut VirtualTextures],
        groups: &[u32],
    ) -> Vec<u8> {
        let target = OffscreenTarget::new(&ctx.device, SIZE.0, SIZE.1);
        for _ in 0..60 {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let mut frames: Vec<_> = vts.iter_mut().map(|vt| vt.begin(ctx, &mut encoder)).collect();
            {
                let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                    color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                        view: &target.color_view,
                        depth_slice: None,
                        resolve_target: None,
                        ops: wgpu::Operations::default(),
                    })],
                    ..Default::default()
                });
                pass.set_pipeline(pipeline);
                for (frame, &group) in frames.iter().zip(groups) {
                    let layer = frame.vt().layer(0).unwrap();
                    pass.set_bind_group(group, frame.bind_group(layer), &[]);
                }
                pass.draw(0..3, 0..1);
            }
            target.copy_out(&mut encoder);
            let first = frames.remove(0);
            first.finish(ctx, encoder).unwrap();
            for f in frames {
                f.finish(ctx, ctx.device.create_command_encoder(&Default::default())).unwrap();
            }
            ctx.wait_idle().unwrap();
            if vts.iter().all(|vt| vt.fully_resident()) {
                break;
            }
        }
        assert!(vts.iter().all(|vt| vt.fully_resident()), "never fully resident");
        target.read(ctx).unwrap()
    }

    fn atlases(dir: &std::path::Path) -> (Arc<Atlas>, Arc<Atlas>) {
        let a = tessera_tests::bake_source(dir, "wide", Generated::new(1024, 512));
        let b = tessera_tests::bake_source(dir, "square", Generated::new(512, 512));
        (Arc::new(Atlas::open(a).unwrap()), Arc::new(Atlas::open(b).unwrap()))
    }

    /// The same left and right halves come out of one shader sampling both textures
    /// (two renamed modules at groups 0 and 1, one shared cache and loader) as out of
    /// the plain `VT_WGSL` shader sampling each alone.
    #[test]
    fn two_textures_in_one_shader_share_one_cache() {
        let ctx = gpu();
        let dir = tempfile::tempdir().unwrap();
        let (atlas_a, atlas_b) = atlases(dir.path());
        let shared = SharedStreaming::new(64, 2).unwrap();
        let config = VtConfig { pool_mib: 8, shared: Some(shared.clone()), ..VtConfig::default() };
        let mut a = VirtualTextures::new(ctx, atlas_a.clone(), config.clone()).unwrap();
        let mut b = VirtualTextures::new(ctx, atlas_b.clone(), config).unwrap();
        assert!(a.host_cache().shares_store_with(b.host_cache()));
        assert_eq!(shared.loader_threads().clients(), 2);
        let src = shader(
            &[vt_module(0, "first").unwrap(), vt_module(1, "second").unwrap()].join("\n"),
            "first_sample_grad(ua, dpdx(ua), dpdy(ua), in.pos)",
            "second_sample_grad(ub, dpdx(ub), dpdy(ub), in.pos)",
        );
        let both = pipeline(ctx, src, &[Some(a.bind_group_layout()), Some(b.bind_group_layout())]);
        let together = render(ctx, &both, &mut [&mut a, &mut b], &[0, 1]);
        let (ha, hb) = (a.host_cache().len(), b.host_cache().len());
        assert!(ha > 0 && hb > 0, "each partition holds its own tiles: {ha}, {hb}");
        assert_eq!(shared.host_cache().counters().tiles as usize, ha + hb, "one store holds both");

        // Each texture alone through the default module, in its own half.
        let black = "vec4<f32>(0.0, 0.0, 0.0, 1.0)";
        let alone_a = pipeline(
            ctx,
            shader(VT_WGSL, "vt_sample_grad(ua, dpdx(ua), dpdy(ua), in.pos)", black),
            &[None, Some(a.bind_group_layout())],
        );
        let left = render(ctx, &alone_a, &mut [&mut a], &[1]);
        let alone_b = pipeline(
            ctx,
            shader(VT_WGSL, black, "vt_sample_grad(ub, dpdx(ub), dpdy(ub), in.pos)"),
            &[None, Some(b.bind_group_layout())],
        );
        let right = render(ctx, &alone_b, &mut [&mut b], &[1]);
        let halves: Vec<u8> = left
            .chunks(SIZE.0 as usize * 4)
            .zip(right.chunks(SIZE.0 as usize * 4))
            .flat_map(|(l, r)| [&l[..l.len() / 2], &r[r.len() / 2..]].concat())
            .collect();
        compare_golden_psnr("two-textures", SIZE, &together, &halves, 60.0);
        // Not a vacuous match: each half shows a textured image, and the two differ.
        let half = |img: &[u8], right: bool| -> Vec<u8> {
            img.chunks(SIZE.0 as usize * 4)
                .flat_map(
                    |row| if right { row[row.len() / 2..].to_vec() } else { row[..row.len() / 2].to_vec() },
                )
                .collect()
        };
        for h in [half(&together, false), half(&together, true)] {
            let distinct: std::collections::HashSet<&[u8]> = h.chunks(4).collect();
            assert!(distinct.len() > 50, "a half is nearly uniform: {} colours", distinct.len());
        }
        assert!(
            tessera::core::compare::compare(&half(&together, false), &half(&together, true)).psnr_db < 30.0
        );
    }

    /// `set_pool_mib` shrinks and grows the pool between frames: the frames stay the
    /// same, the tiles come back from the host cache (not the disk), and a size that
    /// cannot be is refused with the old pool kept.
    #[test]
    fn set_pool_mib_keeps_rendering_the_same_frames() {
        let ctx = gpu();
        let dir = tempfile::tempdir().unwrap();
        let (atlas_a, _) = atlases(dir.path());
        let mut vt =
            VirtualTextures::new(ctx, atlas_a, VtConfig { pool_mib: 16, ..VtConfig::default() }).unwrap();
        let src = shader(VT_WGSL, "vt_sample_grad(ua, dpdx(ua), dpdy(ua), in.pos)", "vec4<f32>(0.2)");
        let pipe = pipeline(ctx, src, &[None, Some(vt.bind_group_layout())]);
        let before = render(ctx, &pipe, &mut [&mut vt], &[1]);
        let slots = vt.stats().vram_counters.slots_total;
        let reads = vt.stats().loader.completed;
        let hits = vt.stats().host_cache.hits;
        let bytes = vt.gpu_bytes();
        let pool = vt.pool().bytes();
        assert!(pool > 14 << 20 && bytes > pool && bytes < pool + (2 << 20), "pool {pool}, in all {bytes}");
        vt.set_pool_mib(ctx, 2).unwrap();
        assert!(vt.gpu_bytes() + (13 << 20) < bytes, "{} after shrinking from {bytes}", vt.gpu_bytes());
        assert!(vt.stats().vram_counters.slots_total < slots / 4, "the pool did not shrink");
        assert_eq!(vt.config().pool_mib, 2);
        let small = render(ctx, &pipe, &mut [&mut vt], &[1]);
        compare_golden_psnr("pool-shrunk", SIZE, &small, &before, 60.0);
        assert!(vt.stats().host_cache.hits > hits, "tiles were not taken from the host cache");
        let _ = reads;
        let e = vt.set_pool_mib(ctx, 0).unwrap_err().to_string();
        assert!(e.contains("pool_mib"), "{e}");
        vt.set_pool_mib(ctx, 32).unwrap();
        let big = render(ctx, &pipe, &mut [&mut vt], &[1]);
        compare_golden_psnr("pool-grown", SIZE, &big, &before, 60.0);
    }

    /// An engine that owns its bind groups and submissions (as Bevy's materials and
    /// render world do): the virtual texture's resources inside the engine's own group
    /// next to a binding of its own (`vt_bindings_at`), the frame begun in one
    /// submission, drawn in a second and ended (`end_detached`) in a third. The frames
    /// are those of the plain embedding.
    #[test]
    fn an_engines_own_bind_group_and_submissions_render_the_same_frames() {
        use tessera::shaders::{vt_bindings_at, vt_layout_entries};
        let ctx = gpu();
        let dir = tempfile::tempdir().unwrap();
        let (atlas_a, _) = atlases(dir.path());
        let config = VtConfig { pool_mib: 8, ..VtConfig::default() };
        let mut plain = VirtualTextures::new(ctx, atlas_a.clone(), config.clone()).unwrap();
        let src = shader(
            VT_WGSL,
            "vt_sample_grad(ua * 0.25, dpdx(ua) * 0.25, dpdy(ua) * 0.25, in.pos)",
            "vec4<f32>(0.5)",
        );
        let pipe = pipeline(ctx, src, &[None, Some(plain.bind_group_layout())]);
        let expected = render(ctx, &pipe, &mut [&mut plain], &[1]);

        let mut vt = VirtualTextures::new(ctx, atlas_a, config).unwrap();
        let layer = vt.layer(0).unwrap();
        let device = &ctx.device;
        // The engine's own binding 0 (a tint of 1) and the virtual texture at 10..16.
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::FRAGMENT,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }];
        entries.extend(vt_layout_entries(vt.page_table_storage(), 10));
        let layout = device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: None, entries: &entries });
        let tint = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        ctx.queue.write_buffer(&tint, 0, &[1.0f32; 4].map(f32::to_le_bytes).concat());
        let r = vt.binding_resources(layer).clone();
        let page_table = match &r.page_table {
            tessera::PageTableResource::Buffer(b) => b.as_entire_binding(),
            tessera::PageTableResource::Texture(v) => wgpu::BindingResource::TextureView(v),
        };
        let views = [10 + 3, 10 + 5, 10 + 6].into_iter().zip(&r.pools);
        let mut group_entries = vec![
            wgpu::BindGroupEntry { binding: 0, resource: tint.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 10, resource: r.params.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 11, resource: page_table },
            wgpu::BindGroupEntry { binding: 12, resource: r.feedback.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 14, resource: wgpu::BindingResource::Sampler(&r.sampler) },
        ];
        group_entries.extend(views.map(|(binding, v)| wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::TextureView(v),
        }));
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &group_entries,
        });
        let prefix =
            format!("{}\n@group(0) @binding(0) var<uniform> tint: vec4<f32>;", vt_bindings_at("0", 10));
        let own = pipeline(
            ctx,
            shader(
                &prefix,
                "tint * vt_sample_grad(ua * 0.25, dpdx(ua) * 0.25, dpdy(ua) * 0.25, in.pos)",
                "vec4<f32>(0.5)",
            ),
            &[Some(&layout)],
        );
        let target = OffscreenTarget::new(device, SIZE.0, SIZE.1);
        let mut ended = 0;
        for _ in 0..60 {
            // Submission 1: the streaming decisions, uploads and the feedback clear.
            let mut first = device.create_command_encoder(&Default::default());
            let frame = vt.begin(ctx, &mut first).detach();
            ctx.queue.submit([first.finish()]);
            // Submission 2: the engine's pass, recorded elsewhere.
            let mut draw = device.create_command_encoder(&Default::default());
            {
                let mut pass = draw.begin_render_pass(&wgpu::RenderPassDescriptor {
                    color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                        view: &target.color_view,
                        depth_slice: None,
                        resolve_target: None,
                        ops: wgpu::Operations::default(),
                    })],
                    ..Default::default()
                });
                pass.set_pipeline(&own);
                pass.set_bind_group(0, &group, &[]);
                pass.draw(0..3, 0..1);
            }
            target.copy_out(&mut draw);
            ctx.queue.submit([draw.finish()]);
            // Submission 3: the feedback readback.
            let mut last = device.create_command_encoder(&Default::default());
            let stats = vt.end_detached(frame, &mut last);
            ctx.queue.submit([last.finish()]);
            vt.submitted();
            ended += 1;
            let _ = stats;
            ctx.wait_idle().unwrap();
            if vt.fully_resident() {
                break;
            }
        }
        assert!(vt.fully_resident(), "never fully resident after {ended} frames");
        // A corner at 4x magnification needs mip-0 tiles, which only feedback brings.
        assert!(
            vt.stats().loader.completed > 0 && vt.resident_fraction() == Some(1.0),
            "nothing was streamed"
        );
        let actual = target.read(ctx).unwrap();
        compare_golden_psnr("own-bind-group", SIZE, &actual, &expected, 60.0);
    }
}

mod feedback_target {
    //! The colour-target feedback path through the public API alone: a user's shader
    //! passed through `with_feedback_target`, writing `vt_request()` to a second target
    //! attached with `VtFrame::feedback_attachment`, streams the texture to full
    //! residency and shows what the storage path shows.
    use std::sync::Arc;

    use tessera::core::Atlas;
    use tessera::core::bake::source::Generated;
    use tessera::shaders::{VT_WGSL, with_feedback_target};
    use tessera::{FEEDBACK_TARGET_FORMAT, VirtualTextures, VtConfig, wgpu};
    use tessera_tests::gpu;
    use tessera_tools::scene::{OffscreenTarget, TARGET_FORMAT};

    const SIZE: (u32, u32) = (256, 128);

    /// A fullscreen triangle over the whole texture, with a second output for the
    /// request when `target`.
    fn shader(target: bool) -> String {
        let (out, ret) = if target {
            (
                "struct Out { @location(0) colour: vec4<f32>, @location(1) request: u32 }",
                "return Out(c, vt_request());",
            )
        } else {
            ("struct Out { @location(0) colour: vec4<f32> }", "return Out(c);")
        };
        let vt = if target { with_feedback_target(VT_WGSL) } else { VT_WGSL.to_owned() };
        format!(
            r#"{vt}
struct VsOut {{ @builtin(position) pos: vec4<f32>, @location(0) uv: vec2<f32> }}
{out}
@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {{
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    var o: VsOut;
    o.pos = vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
    o.uv = vec2<f32>(p.x, 1.0 - p.y);
    return o;
}}
@fragment
fn fs_main(in: VsOut) -> Out {{
    let c = vt_sample(in.uv, in.pos);
    {ret}
}}
"#
        )
    }

    /// Renders until fully resident; returns the last frame and the blurry-pixel shares
    /// the frames reported.
    fn render(atlas: &Arc<Atlas>, target: bool) -> (Vec<u8>, Vec<f64>) {
        let ctx = gpu();
        let device = &ctx.device;
        let config = VtConfig { pool_mib: 8, feedback_target: target, ..VtConfig::default() };
        let mut vt = VirtualTextures::new(ctx, atlas.clone(), config).unwrap();
        let targets = [Some(TARGET_FORMAT.into()), Some(FEEDBACK_TARGET_FORMAT.into())];
        let pipeline = super::two::pipeline_with_targets(
            ctx,
            shader(target),
            &[None, Some(vt.bind_group_layout())],
            &targets[..if target { 2 } else { 1 }],
        );
        let out = OffscreenTarget::new(device, SIZE.0, SIZE.1);
        let layer = vt.layer(0).unwrap();
        let mut shares = Vec::new();
        for _ in 0..60 {
            let mut encoder = device.create_command_encoder(&Default::default());
            let frame = vt.begin(ctx, &mut encoder);
            let feedback = target.then(|| frame.feedback_attachment(SIZE.0, SIZE.1));
            {
                let colour = Some(wgpu::RenderPassColorAttachment {
                    view: &out.color_view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations::default(),
                });
                let attachments = [colour, feedback.as_ref().map(|f| f.attachment())];
                let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                    color_attachments: &attachments[..if target { 2 } else { 1 }],
                    ..Default::default()
                });
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(1, frame.bind_group(layer), &[]);
                pass.draw(0..3, 0..1);
            }
            out.copy_out(&mut encoder);
            let stats = frame.finish(ctx, encoder).unwrap();
            shares.extend(stats.coarse_pixel_share);
            ctx.wait_idle().unwrap();
            if vt.fully_resident() && stats.tiles_needed > 1 {
                return (out.read(ctx).unwrap(), shares);
            }
        }
        panic!("target {target}: never fully resident");
    }

    #[test]
    fn a_users_shader_streams_through_the_feedback_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = tessera_tests::bake_source(dir.path(), "user", Generated::new(1024, 512));
        let atlas = Arc::new(Atlas::open(path).unwrap());
        let (storage, none) = render(&atlas, false);
        let (target, shares) = render(&atlas, true);
        assert!(none.is_empty(), "the storage path measured blur: {none:?}");
        assert!(shares.first().is_some_and(|&s| s > 0.0), "the first frames were not blurry: {shares:?}");
        let d = tessera::core::compare::compare(&target, &storage);
        assert!(d.psnr_db >= 60.0, "{:.1} dB, max error {} between the two paths", d.psnr_db, d.max_error);
    }
}

/// Runtime virtual textures (issue 43), through the `runtime_vt` example: a producer
/// draws a procedural terrain material (four patterns blended by a splat function, 100
/// disc decals) into the tiles the feedback asks for, and the view samples them.
mod runtime_vt {
    use super::runtime_vt_example::{App, Decal, SIZE, Window, scatter};
    use tessera::VtConfig;
    use tessera::core::compare::compare;
    use tessera_tests::{check_golden, gpu, write_failure};

    /// Frames until the view is fully resident (and the production budget held in each):
    /// three frames in a row with nothing produced and everything resident, the first
    /// of them at least 8 frames in, so that the feedback describes this window (it
    /// arrives frames late, and describes the last stride² frames).
    fn converge(app: &mut App, window: Window, max: usize) -> (Vec<u8>, usize) {
        let ctx = gpu();
        let mut settled = 0;
        for frame in 1..=max {
            let (pixels, stats) = app.frame(ctx, window).unwrap();
            assert!(
                stats.produced + stats.refreshed <= stats.production_budget,
                "frame {frame}: {} produced and {} refreshed over a budget of {}",
                stats.produced,
                stats.refreshed,
                stats.production_budget
            );
            assert_no_unwritten(&pixels, frame);
            settled = if app.vt.fully_resident() && stats.produced + stats.refreshed == 0 {
                settled + 1
            } else {
                0
            };
            if frame >= 10 && settled >= 3 {
                return (pixels, frame);
            }
        }
        panic!("not fully resident after {max} frames");
    }

    /// No pixel shows the pool's unwritten colour: every slot sampled was produced.
    fn assert_no_unwritten(pixels: &[u8], frame: usize) {
        let u = tessera::UNWRITTEN;
        let unwritten = pixels.chunks(4).filter(|p| (0..3).all(|c| p[c].abs_diff(u[c]) <= 2)).count();
        assert_eq!(unwritten, 0, "frame {frame}: {unwritten} pixels show the unwritten colour");
    }

    fn assert_psnr(name: &str, actual: &[u8], expected: &[u8], min_db: f64) -> f64 {
        let d = compare(actual, expected);
        if d.psnr_db < min_db {
            let dir = write_failure(name, SIZE, actual, expected);
            panic!(
                "{name}: {:.2} dB < {min_db} (max error {}); PNGs in {}",
                d.psnr_db,
                d.max_error,
                dir.display()
            );
        }
        d.psnr_db
    }

    /// At 100% resident, the virtual texture shows what the composite evaluated for
    /// every pixel shows, within 45 dB, at mips 0, 1 and 2 (one texel a pixel, so each
    /// pixel samples a texel's centre, where the producer evaluated the same function);
    /// the mip-1 frame is kept as a golden image.
    #[test]
    fn produced_tiles_converge_to_the_direct_composite() {
        let ctx = gpu();
        let mut app = App::new(ctx, scatter(100), VtConfig { pool_mib: 32, ..VtConfig::default() }).unwrap();
        for (mip, origin) in [(0, [0.40, 0.30]), (1, [0.61, 0.12]), (2, [0.05, 0.70])] {
            let window = Window { origin, mip };
            let (vt, frames) = converge(&mut app, window, 120);
            let direct = app.direct(ctx, window).unwrap();
            let db = assert_psnr(&format!("runtime-vt-mip{mip}"), &vt, &direct, 45.0);
            eprintln!(
                "mip {mip}: fully resident after {frames} frames, {db:.1} dB against the direct composite"
            );
            // Not a vacuous match: the frame is textured.
            let distinct: std::collections::HashSet<&[u8]> = vt.chunks(4).collect();
            assert!(distinct.len() > 200, "mip {mip}: only {} colours", distinct.len());
            if mip == 1 {
                check_golden("runtime-vt-mip1", SIZE, &vt, 45.0);
            }
        }
    }

    /// A decal placed mid-flight and its rectangle invalidated: the stale tiles stay
    /// shown (never the unwritten colour, never a hole) and are produced again, so the
    /// view matches the direct composite with the decal within 10 frames.
    #[test]
    fn an_invalidated_decal_appears_within_ten_frames() {
        let ctx = gpu();
        let mut app = App::new(ctx, scatter(100), VtConfig { pool_mib: 32, ..VtConfig::default() }).unwrap();
        let window = Window { origin: [0.30, 0.40], mip: 0 };
        let (before, _) = converge(&mut app, window, 120);
        let decal = Decal { disc: [0.30 + 0.01, 0.40 + 0.005, 0.004, 0.0], colour: [0.9, 0.85, 0.1, 1.0] };
        let rect = app.decals.add(&ctx.queue, decal);
        let stale = app.vt.invalidate(0, rect);
        assert!(stale > 0, "the decal's rectangle covers resident tiles");
        let direct = app.direct(ctx, window).unwrap();
        assert!(compare(&before, &direct).psnr_db < 40.0, "the decal changes the view");
        let mut shown = None;
        for frame in 1..=10 {
            let (pixels, stats) = app.frame(ctx, window).unwrap();
            assert_no_unwritten(&pixels, frame);
            assert!(stats.produced + stats.refreshed <= stats.production_budget, "{stats:?}");
            if compare(&pixels, &direct).psnr_db >= 45.0 {
                shown = Some(frame);
                break;
            }
        }
        let (last, _) = app.frame(ctx, window).unwrap();
        assert_psnr("runtime-vt-decal", &last, &direct, 45.0);
        eprintln!("decal shown after {shown:?} frames ({stale} tiles invalidated)");
        assert!(shown.is_some(), "the decal did not show within 10 frames");
    }

    /// A produced atlas without a producer (nothing would draw its tiles), a producer
    /// for an atlas read from a file, and a produced atlas whose one pool would hold both
    /// colour spaces are refused with a clear error.
    #[test]
    fn producers_and_atlases_that_cannot_go_together_are_refused() {
        use std::sync::Arc;
        use tessera::VirtualTextures;
        use tessera::core::Atlas;
        use tessera::core::format::atlas::ColorSpace;
        use tessera::core::format::tile::TextureLayout;
        use tessera::produce::{ProduceBatch, TileProducer};
        struct Nothing;
        impl TileProducer for Nothing {
            fn produce(
                &mut self,
                _: &tessera::GpuContext,
                _: &mut tessera::wgpu::CommandEncoder,
                _: &ProduceBatch<'_>,
            ) {
            }
        }
        let ctx = gpu();
        let layout = TextureLayout::new(1024, 1024, 128, 4).unwrap();
        let one = Arc::new(Atlas::produced("one", &[("a".into(), ColorSpace::Srgb)], layout, false).unwrap());
        let e = VirtualTextures::new(ctx, one, VtConfig::default()).err().unwrap().to_string();
        assert!(e.contains("TileProducer"), "{e}");
        let mixed = [("albedo".into(), ColorSpace::Srgb), ("height".into(), ColorSpace::Linear)];
        let mixed = Arc::new(Atlas::produced("mixed", &mixed, layout, false).unwrap());
        let e =
            VirtualTextures::with_producer(ctx, mixed, VtConfig::default(), Box::new(Nothing)).err().unwrap();
        assert!(e.to_string().contains("make it a stack"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = tessera_tests::bake_source(
            dir.path(),
            "file",
            tessera::core::bake::source::Generated::new(256, 256),
        );
        let file = Arc::new(Atlas::open(path).unwrap());
        let e =
            VirtualTextures::with_producer(ctx, file, VtConfig::default(), Box::new(Nothing)).err().unwrap();
        assert!(e.to_string().contains("produced atlas"), "{e}");
    }

    /// A stack (two linear layers, as albedo and normal would be) is produced in one
    /// pass with one output per layer: tiles asked for by `prefetch_region` (no view at
    /// all) land in the same slot of both pools, each texel holding what the producer
    /// computed at that texel's virtual coordinates and mip.
    #[test]
    fn a_stack_is_produced_in_one_pass_into_every_pool() {
        use std::sync::Arc;
        use tessera::core::Atlas;
        use tessera::core::format::atlas::ColorSpace;
        use tessera::core::format::tile::TextureLayout;
        use tessera::produce::{ProduceBatch, TileProducer};
        use tessera::{GpuContext, VirtualTextures, wgpu};

        const WGSL: &str = r#"
struct Out { @location(0) a: vec4<f32>, @location(1) b: vec4<f32> }
@vertex
fn vs(@builtin(vertex_index) v: u32, @builtin(instance_index) i: u32) -> VtProduced {
    return vt_produce_vertex(v, i);
}
@fragment
fn fs(t: VtProduced) -> Out {
    let uv = vt_produce_uv(t);
    var o: Out;
    o.a = vec4<f32>(uv.x, uv.y, f32(t.info.y) / 8.0, 1.0);
    o.b = vec4<f32>(1.0 - uv.x, 1.0 - uv.y, t.texel.x * 256.0, 1.0);
    return o;
}
"#;
        struct Two(Option<wgpu::RenderPipeline>);
        impl TileProducer for Two {
            fn produce(
                &mut self,
                ctx: &GpuContext,
                encoder: &mut wgpu::CommandEncoder,
                batch: &ProduceBatch<'_>,
            ) {
                let pipeline =
                    self.0.get_or_insert_with(|| batch.pipeline(&ctx.device, WGSL, "vs", "fs", &[]));
                assert_eq!(batch.targets().len(), 2, "one target per layer of the stack");
                let mut pass = batch.begin_pass(encoder);
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, batch.bind_group(), &[]);
                pass.draw(0..4, 0..batch.len());
            }
        }

        let ctx = gpu();
        let side = 2048u32;
        let layout = TextureLayout::new(side, side, 128, 4).unwrap();
        let layers = [("a".to_owned(), ColorSpace::Linear), ("b".to_owned(), ColorSpace::Linear)];
        let atlas = Arc::new(Atlas::produced("two", &layers, layout, true).unwrap());
        let config = VtConfig { pool_mib: 64, ..VtConfig::default() };
        let mut vt = VirtualTextures::with_producer(ctx, atlas, config, Box::new(Two(None))).unwrap();
        assert_eq!(vt.pools().len(), 2);
        for _ in 0..30 {
            vt.prefetch_region(0, [0, 0, side, 1024], 0);
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let frame = vt.begin(ctx, &mut encoder);
            frame.finish(ctx, encoder).unwrap();
        }
        ctx.wait_idle().unwrap();
        let resident: Vec<_> = vt.residency().resident_tiles().collect();
        // Mip 0's upper half (16 × 8 tiles) and the ancestors of those tiles.
        assert!(resident.iter().filter(|(t, _)| t.mip == 0).count() >= 128, "{} resident", resident.len());
        let pools: Vec<Vec<u8>> = vt.pools().iter().map(|p| tessera_tests::read_pool(ctx, p)).collect();
        let (w, _) = vt.pool().texels();
        let pitch = vt.pool().pitch();
        let to8 = |v: f64| (v.clamp(0.0, 1.0) * 255.0).round() as i32;
        for (tile, slot) in resident {
            // Texel (64, 64) of the tile, past its 4-texel border in the slot.
            let (x, y) = (u32::from(slot.x) * pitch + 4 + 64, u32::from(slot.y) * pitch + 4 + 64);
            let scale = f64::from(1u32 << tile.mip) / f64::from(side);
            let u = (f64::from(tile.x * 128 + 64) + 0.5) * scale;
            let v = (f64::from(tile.y * 128 + 64) + 0.5) * scale;
            let want = [
                [to8(u), to8(v), to8(f64::from(tile.mip) / 8.0)],
                [to8(1.0 - u), to8(1.0 - v), to8(scale * 256.0)],
            ];
            for (p, pool) in pools.iter().enumerate() {
                let at = ((y * w + x) * 4) as usize;
                let got = [i32::from(pool[at]), i32::from(pool[at + 1]), i32::from(pool[at + 2])];
                for c in 0..3 {
                    assert!((got[c] - want[p][c]).abs() <= 1, "{tile} pool {p}: {got:?}, want {:?}", want[p]);
                }
            }
        }
    }

    /// A produced tile evicted (the whole pool flushed) and asked for again is drawn
    /// again bit for bit, wherever its new slot is.
    #[test]
    fn a_tile_produced_again_is_bit_identical() {
        let ctx = gpu();
        let mut app = App::new(ctx, scatter(100), VtConfig { pool_mib: 32, ..VtConfig::default() }).unwrap();
        let window = Window { origin: [0.70, 0.55], mip: 1 };
        converge(&mut app, window, 120);
        let tiles = |app: &App| -> Vec<(tessera::core::TileId, Vec<u8>)> {
            let pool = app.vt.pool();
            let texels = tessera_tests::read_pool(ctx, pool);
            let (w, _) = pool.texels();
            let pitch = pool.pitch() as usize;
            let res = app.vt.residency();
            let mut out: Vec<_> = res
                .resident_tiles()
                .map(|(t, slot)| {
                    let (x0, y0) = (usize::from(slot.x) * pitch, usize::from(slot.y) * pitch);
                    let bytes = (y0..y0 + pitch)
                        .flat_map(|y| {
                            let at = (y * w as usize + x0) * 4;
                            texels[at..at + pitch * 4].to_vec()
                        })
                        .collect();
                    (t, bytes)
                })
                .collect();
            out.sort_by_key(|(t, _)| *t);
            out
        };
        let first = tiles(&app);
        assert!(first.len() > 8, "{} tiles resident", first.len());
        app.vt.flush_vram();
        converge(&mut app, window, 120);
        let again = tiles(&app);
        let mut same = 0;
        for (tile, bytes) in &again {
            if let Some((_, old)) = first.iter().find(|(t, _)| t == tile) {
                assert!(old == bytes, "{tile}: drawn again differently");
                same += 1;
            }
        }
        assert!(same > 8, "only {same} tiles were produced twice");
    }

    /// A produced layer that reads a streamed one (a baked base under decals drawn at
    /// run time): the producer samples the base through its own virtual textures
    /// (`vt_module`), its samples request the base's tiles through the base's feedback,
    /// and `invalidate_arrivals` has every produced tile drawn from a coarser fallback
    /// drawn again once the base's tile arrives, until each equals the base (outside the
    /// disc it draws over it).
    #[test]
    fn a_produced_layer_over_a_streamed_base_converges_to_the_base() {
        use std::sync::Arc;
        use tessera::core::Atlas;
        use tessera::core::format::atlas::ColorSpace;
        use tessera::core::format::tile::{TextureLayout, TileId};
        use tessera::produce::{ProduceBatch, TileProducer};
        use tessera::{GpuContext, VirtualTextures, wgpu};

        const WGSL: &str = r#"
@vertex
fn vs(@builtin(vertex_index) v: u32, @builtin(instance_index) i: u32) -> VtProduced {
    return vt_produce_vertex(v, i);
}
@fragment
fn fs(t: VtProduced) -> @location(0) vec4<f32> {
    let uv = vt_produce_uv(t);
    // One texel of the tile's mip: the base at that mip, exactly.
    let c = base_sample_grad(uv, vec2<f32>(t.texel.x, 0.0), vec2<f32>(0.0, t.texel.y), t.pos);
    let disc = step(distance(uv, vec2<f32>(0.3, 0.3)), 0.05);
    return vec4<f32>(mix(c.rgb, vec3<f32>(1.0, 0.0, 0.0), disc), 1.0);
}
"#;
        struct OverBase {
            base: (wgpu::BindGroupLayout, wgpu::BindGroup, String),
            pipeline: Option<wgpu::RenderPipeline>,
        }
        impl TileProducer for OverBase {
            fn produce(
                &mut self,
                ctx: &GpuContext,
                encoder: &mut wgpu::CommandEncoder,
                batch: &ProduceBatch<'_>,
            ) {
                let device = &ctx.device;
                let (base_layout, base_group, base_src) = &self.base;
                let pipeline = self.pipeline.get_or_insert_with(|| {
                    batch.pipeline(device, &format!("{base_src}\n{WGSL}"), "vs", "fs", &[base_layout])
                });
                let mut pass = batch.begin_pass(encoder);
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, batch.bind_group(), &[]);
                pass.set_bind_group(1, base_group, &[]);
                pass.draw(0..4, 0..batch.len());
            }
        }

        let ctx = gpu();
        let dir = tempfile::tempdir().unwrap();
        let side = 2048u32;
        let path = tessera_tests::bake_source(
            dir.path(),
            "base",
            tessera::core::bake::source::Generated::new(side, side),
        );
        let base_atlas = Arc::new(Atlas::open(&path).unwrap());
        let config = VtConfig { pool_mib: 64, ..VtConfig::default() };
        let mut base = VirtualTextures::new(ctx, base_atlas.clone(), config.clone()).unwrap();
        let layer = base.layer(0).unwrap();
        let src = tessera::shaders::with_page_table(
            &tessera::shaders::vt_module(1, "base").unwrap(),
            base.page_table_storage(),
        );
        let producer = OverBase {
            base: (base.bind_group_layout().clone(), base.bind_group(layer).clone(), src),
            pipeline: None,
        };
        let l = base_atlas.layers()[0].layout;
        let layout = TextureLayout::new(side, side, l.tile_size(), l.border()).unwrap();
        let atlas =
            Arc::new(Atlas::produced("over", &[("c".to_owned(), ColorSpace::Srgb)], layout, false).unwrap());
        let mut produced = VirtualTextures::with_producer(ctx, atlas, config, Box::new(producer)).unwrap();
        let (mut refreshed, mut invalidated, mut quiet) = (0, 0, 0);
        // Until neither side has done anything for 5 frames (the base's loader threads
        // take their time on a busy machine).
        for frame in 0..600 {
            // The base's frame begins in a submission of its own, so that the producer's
            // samples (submitted from the produced frame's begin) land after its clear.
            // Keep asking for the base's tiles that produced tiles wait for.
            for (rect, mip) in produced.input_requests() {
                base.prefetch_region(0, rect, mip);
            }
            let mut e1 = ctx.device.create_command_encoder(&Default::default());
            let base_frame = base.begin(ctx, &mut e1);
            ctx.queue.submit([e1.finish()]);
            let arrived = base_frame.vt().arrived().len();
            invalidated += produced.invalidate_arrivals(0, base_frame.vt());
            produced.prefetch_region(0, [0, 0, side, side / 2], 0);
            let mut e2 = ctx.device.create_command_encoder(&Default::default());
            let frame_p = produced.begin(ctx, &mut e2);
            // Tiles drawn again: refreshed in place where the view needs them, produced
            // afresh after eviction where only `prefetch_region` asked (as here).
            let drawn = frame_p.stats().refreshed + frame_p.stats().produced;
            refreshed += drawn;
            frame_p.finish(ctx, e2).unwrap();
            base_frame.finish(ctx, ctx.device.create_command_encoder(&Default::default())).unwrap();
            let waiting = produced.input_requests().len();
            quiet = if arrived == 0 && drawn == 0 && waiting == 0 { quiet + 1 } else { 0 };
            if frame >= 20 && quiet >= 5 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(quiet >= 5, "still streaming or drawing after 600 frames");
        ctx.wait_idle().unwrap();
        let resident = produced.residency().resident_count();
        assert!(
            invalidated > 0 && refreshed > resident,
            "{invalidated} invalidated, {refreshed} drawn for {resident} resident tiles"
        );
        let pool = tessera_tests::read_pool(ctx, produced.pool());
        let (w, _) = produced.pool().texels();
        let (pitch, b) = (produced.pool().pitch(), l.border());
        let mut checked = 0;
        for (tile, slot) in produced.residency().resident_tiles().filter(|(t, _)| t.mip == 0) {
            let texel = (64, 64);
            let uv = [
                (tile.x * 128 + texel.0) as f32 / side as f32,
                (tile.y * 128 + texel.1) as f32 / side as f32,
            ];
            if ((uv[0] - 0.3).powi(2) + (uv[1] - 0.3).powi(2)).sqrt() < 0.06 {
                continue;
            }
            let (x, y) = (u32::from(slot.x) * pitch + b + texel.0, u32::from(slot.y) * pitch + b + texel.1);
            let at = ((y * w + x) * 4) as usize;
            let base_tile =
                base_atlas.decode_tile(TileId { layer: 0, mip: 0, x: tile.x, y: tile.y }).unwrap();
            let padded = l.tile_size() + 2 * b;
            let bt = (((texel.1 + b) * padded + texel.0 + b) * 4) as usize;
            for c in 0..3 {
                let (got, want) = (pool[at + c], base_tile[bt + c]);
                assert!(got.abs_diff(want) <= 2, "{tile}: channel {c} is {got}, the base's texel {want}");
            }
            checked += 1;
        }
        assert!(checked >= 100, "only {checked} mip-0 tiles checked");
        eprintln!(
            "{checked} tiles equal to the base; {invalidated} invalidated, {refreshed} drawn for {resident}"
        );
    }
}
