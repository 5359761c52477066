//! Virtual textures on the GPU: the tile pool, the page-table buffer, the feedback
//! bitset and one parameter block per layer, plus the streaming that keeps them fed
//! (feedback → residency decisions → loader threads → host cache → budgeted uploads).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use bytemuck::{Pod, Zeroable};
use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::codec::TargetFormat;
use tessera_core::stream::feedback::FeedbackLayout;
use tessera_core::stream::loader::{LoadOutcome, LoaderConfig, LoaderPool};
use tessera_core::stream::residency::{Residency, ResidencyConfig};
use tessera_core::stream::schedule::{
    BiasConfig, BiasInput, BudgetConfig, MipBiasController, UploadBudgetController, neighbours, region_tiles,
};
use tessera_core::stream::stats::{StatsSnapshot, TierStats};
use tessera_core::{Atlas, AtlasLoader, HostCache, StackedLoader, TileId, TileLoader};

use crate::context::GpuContext;
use crate::error::RenderError;
use crate::feedback::Feedback;
use crate::pool::{TilePool, format_support};

/// Most anisotropic taps: with a 4-texel border, more would reach past the border.
pub const MAX_ANISOTROPY: u16 = 4;

/// Largest mip count the shader's parameter block holds.
pub const MAX_SHADER_MIPS: usize = 20;

/// The per-layer parameter block, laid out as `VtParams` in `shaders/vt.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct VtParams {
    size: [f32; 2],
    pool_texels: [f32; 2],
    tile: f32,
    border: f32,
    max_aniso: f32,
    mip_bias: f32,
    mip_count: u32,
    first_tile: u32,
    feedback_mask: u32,
    feedback_phase: u32,
    wrap: u32,
    debug: u32,
    _pad: [u32; 2],
    mips: [[u32; 4]; MAX_SHADER_MIPS],
}

/// Settings of the virtual-texture system.
#[derive(Clone, Debug)]
pub struct VtConfig {
    /// GPU tile pool size in MiB.
    pub pool_mib: u32,
    /// Host page cache budget in MiB.
    pub host_cache_mib: u32,
    /// Loader threads (0 = one per core, at least 1).
    pub loader_threads: usize,
    /// Most tiles uploaded per frame.
    pub max_uploads_per_frame: usize,
    /// Most bytes uploaded per frame.
    pub max_upload_bytes_per_frame: u64,
    /// Feedback is written by one pixel in every `n × n` block (1, 2, 4 or 8), rotating.
    pub feedback_stride: u32,
    /// Anisotropy limit (1 = trilinear only; at most [`MAX_ANISOTROPY`]).
    pub max_anisotropy: u16,
    /// Added to every level of detail (positive = blurrier, fewer tiles).
    pub mip_bias: f32,
    /// Debug view: 0 off, 1 mip colours, 2 fallback depth, 3 tile borders.
    pub debug_view: u32,
    /// Force the pool's texel format (default: the best the adapter and the atlas allow).
    pub pool_format: Option<TargetFormat>,
    /// Raise a global mip bias (on top of `mip_bias`), with hysteresis, while the view
    /// needs more tiles than the pool holds, and lower it when room comes back, so an
    /// oversubscribed pool settles at a coarser level instead of thrashing.
    pub auto_mip_bias: bool,
    /// Adapt the per-frame upload budget to this frame time (ms, measured between
    /// `prepare` calls); `None`: the fixed `max_uploads_per_frame`.
    pub target_frame_ms: Option<f64>,
    /// Also request the same-mip neighbours of requested tiles, at the lowest priority,
    /// into free or unneeded slots only.
    pub prefetch_neighbours: bool,
}

impl Default for VtConfig {
    fn default() -> Self {
        Self {
            pool_mib: 128,
            host_cache_mib: 256,
            loader_threads: 0,
            max_uploads_per_frame: 256,
            max_upload_bytes_per_frame: 64 << 20,
            feedback_stride: 2,
            max_anisotropy: 1,
            mip_bias: 0.0,
            debug_view: 0,
            pool_format: None,
            auto_mip_bias: true,
            target_frame_ms: None,
            prefetch_neighbours: true,
        }
    }
}

/// What streaming did in one frame.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamFrame {
    /// Distinct tiles (with ancestors) the newest feedback asked for.
    pub tiles_needed: usize,
    /// Of those, tiles not resident in VRAM.
    pub misses: usize,
    /// Tiles uploaded this frame.
    pub uploads: usize,
    /// Tiles evicted from the pool this frame.
    pub evictions: usize,
    /// Tiles resident in the pool.
    pub resident_vram: usize,
    /// Tiles resident in the host cache.
    pub resident_host: usize,
    /// Requests handed to the loader this frame.
    pub requests: usize,
    /// Frame whose feedback was used (none when no readback arrived).
    pub feedback_frame: Option<u64>,
    /// CPU time spent decoding feedback and planning, milliseconds.
    pub feedback_ms: f64,
    /// CPU time spent issuing uploads and page-table writes, milliseconds.
    pub upload_ms: f64,
    /// Request-to-resident latency of the tiles uploaded this frame (from the frame
    /// whose feedback asked for them to the upload), milliseconds: mean and maximum
    /// (0 when nothing that was requested arrived).
    pub latency_ms_mean: f64,
    /// See [`StreamFrame::latency_ms_mean`].
    pub latency_ms_max: f64,
    /// The same latency in frames (upload frame − feedback frame): mean.
    pub latency_frames_mean: f64,
    /// Fraction (0 to 1) of the tiles the view wants (the latest feedback window, each
    /// tile at the mip its pixels asked for) that are resident themselves rather than
    /// shown through a coarser fallback, after this frame's uploads. 1 when nothing is
    /// wanted.
    pub resident_fraction: f64,
    /// True on the frame where `resident_fraction` reaches 1 after being below it: the
    /// "fully resident" event (everything visible is at its wanted resolution).
    pub became_fully_resident: bool,
    /// The automatic mip bias in effect for this frame (0 without oversubscription).
    pub auto_mip_bias: f32,
    /// The upload budget (tiles) for this frame.
    pub upload_budget: usize,
    /// Prefetch requests (neighbours, regions) handed to the loader this frame.
    pub prefetches: usize,
}

/// The GPU side of an atlas' virtual textures plus the streaming that fills them.
pub struct VirtualTextures {
    atlas: Arc<Atlas>,
    cache: Arc<HostCache>,
    loader: LoaderPool,
    residency: Residency,
    layout: FeedbackLayout,
    /// One pool, or one per layer of a stack (same slot grid).
    pools: Vec<TilePool>,
    /// Bytes of each pool's part of a loaded tile.
    part_lengths: Vec<usize>,
    tile_loader: Arc<dyn TileLoader>,
    stacked: bool,
    page_table: wgpu::Buffer,
    feedback: Feedback,
    layout_bgl: wgpu::BindGroupLayout,
    params: Vec<(VtParams, wgpu::Buffer, wgpu::BindGroup)>,
    config: VtConfig,
    reported_failures: HashSet<TileId>,
    recent_feedback: std::collections::VecDeque<Vec<TileId>>,
    /// When each outstanding request was made: feedback frame and CPU time.
    request_times: HashMap<TileId, (u64, Instant)>,
    /// The tiles the view wants (the feedback window), for the resident fraction.
    wanted: Vec<TileId>,
    /// The resident fraction of the previous frame.
    last_fraction: f64,
    bias: MipBiasController,
    budget: Option<UploadBudgetController>,
    /// Whether the last upload plan could not place a needed tile.
    last_pool_full: bool,
    last_prepare: Option<Instant>,
    last_upload_ms: f64,
    last_uploads: usize,
    total_uploads: u64,
    total_evictions: u64,
    frozen: bool,
}

impl VirtualTextures {
    /// Sets up pool, page table and feedback for `atlas`, and makes the coarsest mip
    /// of every layer resident (pinned) before returning, so nothing is ever missing.
    pub fn new(ctx: &GpuContext, atlas: Arc<Atlas>, config: VtConfig) -> Result<Self, RenderError> {
        let layers = atlas.layers();
        let slot = layers[0].layout.padded_tile_size();
        if let Some(l) = layers.iter().find(|l| l.layout.padded_tile_size() != slot) {
            return Err(RenderError::Config(format!(
                "layer '{}' has {}² tiles but layer 0 has {slot}²: one pool needs one tile size",
                l.name,
                l.layout.padded_tile_size()
            )));
        }
        if let Some(l) = layers.iter().find(|l| l.layout.mip_count() as usize > MAX_SHADER_MIPS) {
            return Err(RenderError::Config(format!(
                "layer '{}' has more than {MAX_SHADER_MIPS} mips",
                l.name
            )));
        }
        let stacked = atlas.is_stacked();
        let support = format_support(&ctx.device);
        let select = |codecs: &[tessera_core::Codec]| {
            tessera_core::format::pool_format::select(codecs, support, config.pool_format)
                .map_err(|e| RenderError::Config(format!("{}: {e}", atlas.path().display())))
        };
        // A stack has one pool per layer, each in the best format for that layer's codec;
        // otherwise one pool holds every layer in one format.
        let targets: Vec<TargetFormat> = if stacked {
            layers.iter().map(|l| select(&[l.codec])).collect::<Result<_, _>>()?
        } else {
            let codecs: Vec<_> = layers.iter().map(|l| l.codec).collect();
            vec![select(&codecs)?]
        };
        if layers[0].layout.border() == 0 {
            return Err(RenderError::Config(format!(
                "{}: tiles have no border, so filtering would read neighbouring pool slots; bake with --border 4",
                atlas.path().display()
            )));
        }
        if let Some(target) =
            targets.iter().find(|t| t.is_block_compressed()).filter(|_| !slot.is_multiple_of(4))
        {
            return Err(RenderError::Config(format!(
                "{}: stored tiles are {slot}² texels, not a multiple of the 4×4 blocks of a {} pool",
                atlas.path().display(),
                target.name()
            )));
        }
        let stack_slot_bytes: u64 = targets.iter().map(|t| t.bytes_per_tile(slot) as u64).sum();
        let grid = TilePool::grid_for(&ctx.device, config.pool_mib, stack_slot_bytes, slot)?;
        let pools: Vec<TilePool> = targets
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let color = if stacked { layers[i].color } else { ColorSpace::Srgb };
                TilePool::with_grid(&ctx.device, &ctx.queue, grid, slot, t, color)
            })
            .collect::<Result<_, _>>()?;
        let pool = &pools[0];
        tracing::info!(
            formats = ?targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
            slots = pool.slot_count(),
            stacked,
            "tile pool"
        );
        // The layouts that own tile ids: a stack's layers share layer 0's.
        let layouts: Vec<_> =
            if stacked { vec![layers[0].layout] } else { layers.iter().map(|l| l.layout).collect() };
        if (pool.slot_count() as usize) < layouts.len() + 1 {
            return Err(RenderError::Config(format!(
                "a pool of {} slots cannot pin the coarsest tile of {} layers",
                pool.slot_count(),
                layouts.len()
            )));
        }
        let entries = layouts.iter().map(|l| l.tile_count()).sum::<u64>() as usize;
        let max_binding = ctx.device.limits().max_storage_buffer_binding_size;
        if (entries as u64) * 4 > max_binding {
            return Err(RenderError::Config(format!(
                "{}: the page table needs {} MiB but the adapter binds at most {} MiB of storage buffer",
                atlas.path().display(),
                (entries as u64 * 4) >> 20,
                max_binding >> 20
            )));
        }
        let residency = Residency::new(
            &layouts,
            ResidencyConfig {
                slots_x: pool.slots_x() as u16,
                slots_y: pool.slots_y() as u16,
                max_uploads_per_frame: config.max_uploads_per_frame,
                max_upload_bytes_per_frame: config.max_upload_bytes_per_frame,
                ..ResidencyConfig::default()
            },
        );
        let layout = FeedbackLayout::new(&layouts);
        let cache = Arc::new(HostCache::new(u64::from(config.host_cache_mib) << 20));
        let threads = if config.loader_threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            config.loader_threads
        };
        let tile_loader: Arc<dyn TileLoader> = if stacked {
            Arc::new(StackedLoader::new(atlas.clone(), cache.clone(), &targets))
        } else {
            Arc::new(AtlasLoader::with_target(atlas.clone(), cache.clone(), targets[0]))
        };
        let part_lengths: Vec<usize> = targets.iter().map(|t| t.bytes_per_tile(slot)).collect();
        let loader = LoaderPool::new(tile_loader.clone(), threads, LoaderConfig::default());
        let device = &ctx.device;
        let page_table = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera page table"),
            size: (entries.max(1) * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let feedback = Feedback::new(device, layout.words(), 3);
        let layout_bgl = bind_group_layout(device);
        let sampler = device.create_sampler(&wgpu::SamplerDescriptor {
            label: Some("tessera pool sampler"),
            address_mode_u: wgpu::AddressMode::ClampToEdge,
            address_mode_v: wgpu::AddressMode::ClampToEdge,
            address_mode_w: wgpu::AddressMode::ClampToEdge,
            mag_filter: wgpu::FilterMode::Linear,
            min_filter: wgpu::FilterMode::Linear,
            mipmap_filter: wgpu::MipmapFilterMode::Linear,
            ..Default::default()
        });
        let (pw, ph) = pool.texels();
        let stride = config.feedback_stride.clamp(1, 8).next_power_of_two();
        let mut params = Vec::with_capacity(layers.len());
        // A stack is sampled through layer 0's parameters (all its pools at once).
        let sampled = if stacked { &layers[..1] } else { layers };
        let view = |i: usize| pools.get(i).unwrap_or(&pools[0]).view();
        for l in sampled {
            let lay = l.layout;
            let mut p = VtParams {
                size: [lay.width() as f32, lay.height() as f32],
                pool_texels: [pw as f32, ph as f32],
                tile: lay.tile_size() as f32,
                border: lay.border() as f32,
                max_aniso: f32::from(config.max_anisotropy.clamp(1, MAX_ANISOTROPY)),
                mip_bias: config.mip_bias,
                mip_count: lay.mip_count(),
                first_tile: l.first_tile as u32,
                feedback_mask: stride - 1,
                feedback_phase: 0,
                wrap: l.wrap as u32,
                debug: config.debug_view,
                _pad: [0; 2],
                mips: [[0; 4]; MAX_SHADER_MIPS],
            };
            for m in 0..lay.mip_count() {
                let (tx, ty) = lay.tiles_at(m);
                p.mips[m as usize] = [lay.mip_tile_offset(m) as u32, tx, ty, 0];
            }
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(&format!("tessera vt params {}", l.name)),
                size: std::mem::size_of::<VtParams>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            ctx.queue.write_buffer(&buffer, 0, bytemuck::bytes_of(&p));
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("tessera vt"),
                layout: &layout_bgl,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: page_table.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: feedback.bitset().as_entire_binding() },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: wgpu::BindingResource::TextureView(view(0)),
                    },
                    wgpu::BindGroupEntry { binding: 4, resource: wgpu::BindingResource::Sampler(&sampler) },
                    wgpu::BindGroupEntry {
                        binding: 5,
                        resource: wgpu::BindingResource::TextureView(view(1)),
                    },
                    wgpu::BindGroupEntry {
                        binding: 6,
                        resource: wgpu::BindingResource::TextureView(view(2)),
                    },
                ],
            });
            params.push((p, buffer, bind_group));
        }
        let budget = config.target_frame_ms.map(|target| {
            UploadBudgetController::new(BudgetConfig {
                target_frame_ms: target,
                start_tiles: config.max_uploads_per_frame.max(1),
                bytes_per_tile: part_lengths.iter().sum::<usize>() as u64,
                ..BudgetConfig::default()
            })
        });
        let mut vt = Self {
            atlas,
            cache,
            loader,
            residency,
            layout,
            pools,
            part_lengths,
            tile_loader,
            stacked,
            page_table,
            feedback,
            layout_bgl,
            params,
            config,
            reported_failures: HashSet::new(),
            recent_feedback: std::collections::VecDeque::new(),
            request_times: HashMap::new(),
            wanted: Vec::new(),
            last_fraction: 1.0,
            bias: MipBiasController::new(BiasConfig {
                // The needed set is the union of stride² readbacks, which lag about 2 frames.
                settle_frames: stride * stride + 2,
                ..BiasConfig::default()
            }),
            budget,
            last_pool_full: false,
            last_prepare: None,
            last_upload_ms: 0.0,
            last_uploads: 0,
            total_uploads: 0,
            total_evictions: 0,
            frozen: false,
        };
        vt.make_coarsest_resident(ctx)?;
        Ok(vt)
    }

    /// Loads the coarsest tile of every layer synchronously and uploads it.
    fn make_coarsest_resident(&mut self, ctx: &GpuContext) -> Result<(), RenderError> {
        let owners = if self.stacked { 1 } else { self.atlas.layers().len() };
        let roots: Vec<TileId> = self.atlas.layers()[..owners]
            .iter()
            .enumerate()
            .map(|(i, l)| TileId::new(i as u16, l.layout.coarsest_mip(), 0, 0))
            .collect();
        for (tile, _) in self.residency.on_feedback(0, &roots) {
            match self.tile_loader.load(tile) {
                Ok(bytes) => self.residency.on_loaded(tile, bytes),
                Err(e) => {
                    return Err(RenderError::Config(format!(
                        "{}: the coarsest tile of a layer cannot be read, so nothing could be shown: {e}",
                        self.atlas.path().display()
                    )));
                }
            }
        }
        self.apply_uploads(ctx, 0);
        Ok(())
    }

    /// The bind group layout of group 1 in `vt.wgsl`, for user pipelines.
    pub fn bind_group_layout(&self) -> &wgpu::BindGroupLayout {
        &self.layout_bgl
    }

    /// The bind group (group 1 in `vt.wgsl`) that samples layer `layer`, or `None`
    /// when there is no such layer. Of a stacked atlas there is one, layer 0's, which
    /// samples every layer of the stack (`vt_sample_layers`).
    pub fn bind_group(&self, layer: usize) -> Option<&wgpu::BindGroup> {
        self.params.get(layer).map(|p| &p.2)
    }

    /// Whether the atlas is stacked: its layers share tile ids, residency and one
    /// page table, each in its own pool.
    pub fn is_stacked(&self) -> bool {
        self.stacked
    }

    /// The atlas being streamed.
    pub fn atlas(&self) -> &Arc<Atlas> {
        &self.atlas
    }

    /// The tile pool (of a stack: layer 0's).
    pub fn pool(&self) -> &TilePool {
        &self.pools[0]
    }

    /// Every pool: one, or one per layer of a stack.
    pub fn pools(&self) -> &[TilePool] {
        &self.pools
    }

    /// The residency manager (page-table mirror, slots, counters).
    pub fn residency(&self) -> &Residency {
        &self.residency
    }

    /// The host page cache.
    pub fn host_cache(&self) -> &Arc<HostCache> {
        &self.cache
    }

    /// Bytes of feedback read back per frame.
    pub fn feedback_bytes(&self) -> u64 {
        self.feedback.bytes()
    }

    /// Per-frame CPU work before rendering frame `frame`: collect arrived feedback,
    /// request missing tiles, take finished loads, upload within budget, write the
    /// page table. Never blocks on the GPU or the disk.
    pub fn prepare(&mut self, ctx: &GpuContext, frame: u64) -> StreamFrame {
        let t0 = std::time::Instant::now();
        let mut out = StreamFrame::default();
        // Adaptive upload budget: last frame's time (between prepare calls) and uploads.
        let now = Instant::now();
        if let (Some(budget), Some(last)) = (self.budget.as_mut(), self.last_prepare) {
            let frame_ms = now.duration_since(last).as_secs_f64() * 1e3;
            let b = budget.update(frame_ms, self.last_upload_ms, self.last_uploads);
            self.residency.set_upload_budget(b.tiles, b.bytes.max(1));
        }
        self.last_prepare = Some(now);
        out.upload_budget = self.residency.config().max_uploads_per_frame;
        if let Some(fb) = self.feedback.poll(&ctx.device).filter(|_| !self.frozen) {
            // Each frame only one pixel per stride² block writes feedback, so a tile that
            // covers a few pixels shows up in some frames only: the needed set is the union
            // of the last stride² readbacks, so such tiles are neither dropped nor evicted.
            let window = ((self.params[0].0.feedback_mask + 1).pow(2)) as usize;
            self.recent_feedback.push_back(self.layout.decode_sparse(&fb.sparse));
            while self.recent_feedback.len() > window {
                self.recent_feedback.pop_front();
            }
            let mut needed: Vec<TileId> = self.recent_feedback.iter().flatten().copied().collect();
            needed.sort_unstable();
            needed.dedup();
            let misses_before = self.residency.counters().misses;
            let requests = self.residency.on_feedback(frame, &needed);
            out.tiles_needed = self.residency.needed_count();
            out.misses = (self.residency.counters().misses - misses_before) as usize;
            out.feedback_frame = Some(fb.frame);
            let now = Instant::now();
            let mut around = Vec::new();
            for (tile, priority) in requests {
                if self.loader.request(tile, priority, frame) {
                    out.requests += 1;
                }
                self.request_times.entry(tile).or_insert((fb.frame, now));
                if self.config.prefetch_neighbours {
                    around.extend(neighbours(&self.layout, tile));
                }
            }
            if !around.is_empty() {
                around.sort_unstable();
                around.dedup();
                for (tile, priority) in self.residency.prefetch(frame, &around, 0) {
                    out.prefetches += usize::from(self.loader.request(tile, priority, frame));
                }
            }
            // Oversubscription: a global mip bias with hysteresis.
            if self.config.auto_mip_bias {
                let bias = self.bias.update(BiasInput {
                    needed: out.tiles_needed,
                    capacity: self.pools[0].slot_count() as usize,
                    pool_full: self.last_pool_full,
                    misses: out.misses,
                });
                self.apply_mip_bias(self.config.mip_bias + bias);
            }
            // Renew queued loads that are still wanted, so the loader's staleness rule
            // cancels only requests that the feedback no longer asks for; priority 1
            // moves a prefetch the view now needs out of the speculative class.
            for tile in self.layout.with_ancestors(&needed) {
                if self.loader.is_requested(tile) {
                    self.loader.request(tile, 1, frame);
                }
            }
            self.wanted = needed;
        } else {
            out.tiles_needed = self.residency.needed_count();
        }
        for tile in self.residency.drop_stale_prefetch(frame) {
            self.loader.cancel(tile);
        }
        self.loader.cancel_stale(frame);
        for r in self.loader.try_results() {
            match r.outcome {
                LoadOutcome::Ready(bytes) => self.residency.on_loaded(r.tile, bytes),
                LoadOutcome::Failed(e) => {
                    if self.reported_failures.insert(r.tile) {
                        tracing::error!("{e}; showing its nearest resident ancestor instead");
                    }
                    self.residency.on_failed(r.tile);
                    self.request_times.remove(&r.tile);
                }
                LoadOutcome::Cancelled => {
                    self.residency.on_cancelled(r.tile);
                    self.request_times.remove(&r.tile);
                }
            }
        }
        out.feedback_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = std::time::Instant::now();
        let (uploads, evictions, latency) = self.apply_uploads(ctx, frame);
        (out.latency_ms_mean, out.latency_ms_max, out.latency_frames_mean) = latency;
        out.uploads = uploads;
        out.evictions = evictions;
        out.upload_ms = t1.elapsed().as_secs_f64() * 1e3;
        out.resident_vram = self.residency.resident_count();
        out.resident_host = self.cache.len();
        out.resident_fraction = self.resident_fraction();
        out.auto_mip_bias = self.bias.bias();
        self.last_upload_ms = out.upload_ms;
        self.last_uploads = out.uploads;
        out.became_fully_resident = out.resident_fraction >= 1.0 && self.last_fraction < 1.0;
        self.last_fraction = out.resident_fraction;
        // Rotate which pixel of each block writes feedback.
        let stride = self.params[0].0.feedback_mask + 1;
        let k = (frame % u64::from(stride * stride)) as u32;
        let phase = (k % stride) | ((k / stride) << 8);
        for (p, buffer, _) in &mut self.params {
            p.feedback_phase = phase;
            ctx.queue.write_buffer(buffer, 0, bytemuck::bytes_of(p));
        }
        out
    }

    /// Uploads what the residency plan allows; returns uploads, evictions and the
    /// (mean ms, max ms, mean frames) request-to-resident latency of the uploaded tiles.
    fn apply_uploads(&mut self, ctx: &GpuContext, frame: u64) -> (usize, usize, (f64, f64, f64)) {
        let plan = self.residency.plan_uploads(frame);
        self.last_pool_full = plan.pool_full;
        let mut evictions = 0;
        let now = Instant::now();
        let (mut sum_ms, mut max_ms, mut sum_frames, mut timed) = (0.0f64, 0.0f64, 0.0f64, 0usize);
        // Each pool's parts of this frame's tiles go up in one batch (one submission).
        let mut parts: Vec<Vec<(tessera_core::stream::page_table::SlotCoord, &[u8])>> =
            self.pools.iter().map(|_| Vec::with_capacity(plan.uploads.len())).collect();
        for u in &plan.uploads {
            let mut rest: &[u8] = &u.bytes;
            for (batch, &len) in parts.iter_mut().zip(&self.part_lengths) {
                let Some((part, tail)) = rest.split_at_checked(len) else { break };
                batch.push((u.slot, part));
                rest = tail;
            }
            evictions += usize::from(u.evicted.is_some());
            if let Some((fb_frame, at)) = self.request_times.remove(&u.tile) {
                let ms = now.duration_since(at).as_secs_f64() * 1e3;
                sum_ms += ms;
                max_ms = max_ms.max(ms);
                sum_frames += frame.saturating_sub(fb_frame) as f64;
                timed += 1;
            }
        }
        for (pool, batch) in self.pools.iter().zip(&parts) {
            pool.upload_batch(&ctx.device, &ctx.queue, batch);
        }
        // Requests whose result was dropped (no longer needed) never upload: forget them
        // once they are neither requested nor waiting.
        if self.request_times.len() > 4 * self.pools[0].slot_count() as usize {
            let live: HashSet<TileId> = self.residency.requested_tiles().collect();
            self.request_times.retain(|t, _| live.contains(t));
        }
        let pt = self.residency.page_table_mut();
        for range in pt.take_dirty_ranges() {
            let data = &pt.entries()[range.clone()];
            ctx.queue.write_buffer(&self.page_table, (range.start * 4) as u64, bytemuck::cast_slice(data));
        }
        self.total_uploads += plan.uploads.len() as u64;
        self.total_evictions += evictions as u64;
        let latency = if timed == 0 {
            (0.0, 0.0, 0.0)
        } else {
            (sum_ms / timed as f64, max_ms, sum_frames / timed as f64)
        };
        (plan.uploads.len(), evictions, latency)
    }

    /// Record into the frame's encoder before any pass that samples virtual textures.
    pub fn begin_frame(&self, encoder: &mut wgpu::CommandEncoder) {
        self.feedback.begin(encoder);
    }

    /// Record into the frame's encoder after the passes: queues the feedback readback.
    pub fn end_frame(&mut self, encoder: &mut wgpu::CommandEncoder, frame: u64) {
        self.feedback.end(encoder, frame);
    }

    /// Call right after submitting the frame's encoder.
    pub fn after_submit(&mut self) {
        self.feedback.after_submit();
    }

    /// Fraction (0 to 1) of the tiles the latest feedback window wants that are resident
    /// themselves (see [`StreamFrame::resident_fraction`]).
    pub fn resident_fraction(&self) -> f64 {
        if self.wanted.is_empty() {
            return 1.0;
        }
        let resident = self.wanted.iter().filter(|t| self.residency.is_resident(**t)).count();
        resident as f64 / self.wanted.len() as f64
    }

    /// Whether everything the view wants is resident at its wanted resolution.
    pub fn fully_resident(&self) -> bool {
        self.resident_fraction() >= 1.0
    }

    /// Changes the mip bias (positive = blurrier, fewer tiles) from the next frame on.
    pub fn set_mip_bias(&mut self, bias: f32) {
        self.config.mip_bias = bias;
        self.apply_mip_bias(bias + if self.config.auto_mip_bias { self.bias.bias() } else { 0.0 });
    }

    fn apply_mip_bias(&mut self, bias: f32) {
        for (p, _, _) in &mut self.params {
            p.mip_bias = bias;
        }
    }

    /// The automatic oversubscription bias in effect (see [`VtConfig::auto_mip_bias`]).
    pub fn auto_mip_bias(&self) -> f32 {
        self.bias.bias()
    }

    /// Warms a region before it is seen (e.g. the destination of a coming cut): requests
    /// the tiles covering `rect` (`[x, y, width, height]` in mip-0 texels of layer
    /// `layer`) at `mip`, with their ancestors, at the lowest priority. They go into free
    /// or unneeded pool slots only, never displacing what the view needs, and are
    /// forgotten if nothing asks for them within a minute of frames. Returns the number
    /// of tiles requested.
    pub fn prefetch_region(&mut self, layer: u16, rect: [u32; 4], mip: u8, frame: u64) -> usize {
        let owner = if self.stacked { 0 } else { layer };
        let tiles = region_tiles(&self.layout, owner, rect, mip);
        let mut n = 0;
        for (tile, priority) in self.residency.prefetch(frame, &tiles, 0) {
            n += usize::from(self.loader.request(tile, priority, frame));
        }
        n
    }

    /// Changes the debug view (0 off, 1 mip colours, 2 fallback depth, 3 tile borders)
    /// from the next frame on.
    pub fn set_debug_view(&mut self, view: u32) {
        self.config.debug_view = view;
        for (p, _, _) in &mut self.params {
            p.debug = view;
        }
    }

    /// Changes the feedback resolution: one pixel in every `stride × stride` block
    /// writes feedback each frame (1, 2, 4 or 8; other values round up to the next of
    /// these). Larger strides cost less GPU time and see small tiles later.
    pub fn set_feedback_stride(&mut self, stride: u32) {
        let stride = stride.clamp(1, 8).next_power_of_two();
        self.config.feedback_stride = stride;
        for (p, _, _) in &mut self.params {
            p.feedback_mask = stride - 1;
        }
    }

    /// Changes the most tiles uploaded per frame.
    pub fn set_upload_budget(&mut self, tiles: usize) {
        self.config.max_uploads_per_frame = tiles.max(1);
        self.residency.set_upload_budget(tiles, self.config.max_upload_bytes_per_frame);
    }

    /// Changes the host cache budget, evicting least recently used tiles until it fits.
    pub fn set_host_budget_mib(&mut self, mib: u32) {
        self.config.host_cache_mib = mib;
        self.cache.set_budget(u64::from(mib) << 20);
    }

    /// While frozen, arriving feedback is dropped: nothing new is requested, so the
    /// resident set stays as it is while the camera moves (a debugging aid).
    pub fn set_feedback_frozen(&mut self, frozen: bool) {
        self.frozen = frozen;
    }

    /// Whether feedback is frozen.
    pub fn feedback_frozen(&self) -> bool {
        self.frozen
    }

    /// Evicts every unpinned tile from the VRAM pool; they stream in again.
    pub fn flush_vram(&mut self) {
        let before = self.residency.counters().evictions;
        self.residency.flush();
        self.total_evictions += self.residency.counters().evictions - before;
    }

    /// Empties the host cache; tiles are read from disk again.
    pub fn flush_host_cache(&self) {
        self.cache.clear();
    }

    /// Statistics of every tier.
    pub fn stats(&self) -> StatsSnapshot {
        let mut s = StatsSnapshot::gather(&self.atlas, &self.cache, Some(&self.loader));
        let slot_bytes: u64 = self.pools.iter().map(TilePool::slot_bytes).sum();
        let resident = self.residency.resident_count() as u64;
        s.vram = TierStats { tiles: resident, bytes: resident * slot_bytes };
        s.vram_counters.uploads = self.total_uploads;
        s.vram_counters.evictions = self.total_evictions;
        s.vram_counters.slots_used = resident;
        s.vram_counters.slots_total = u64::from(self.pools[0].slot_count());
        s
    }

    /// The settings in use.
    pub fn config(&self) -> &VtConfig {
        &self.config
    }
}

fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let frag = wgpu::ShaderStages::FRAGMENT;
    let pool_texture = wgpu::BindingType::Texture {
        sample_type: wgpu::TextureSampleType::Float { filterable: true },
        view_dimension: wgpu::TextureViewDimension::D2,
        multisampled: false,
    };
    let storage = |read_only| wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Storage { read_only },
        has_dynamic_offset: false,
        min_binding_size: None,
    };
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("tessera vt"),
        entries: &[
            wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: frag,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            },
            wgpu::BindGroupLayoutEntry { binding: 1, visibility: frag, ty: storage(true), count: None },
            wgpu::BindGroupLayoutEntry { binding: 2, visibility: frag, ty: storage(false), count: None },
            wgpu::BindGroupLayoutEntry { binding: 3, visibility: frag, ty: pool_texture, count: None },
            wgpu::BindGroupLayoutEntry {
                binding: 4,
                visibility: frag,
                ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
                count: None,
            },
            wgpu::BindGroupLayoutEntry { binding: 5, visibility: frag, ty: pool_texture, count: None },
            wgpu::BindGroupLayoutEntry { binding: 6, visibility: frag, ty: pool_texture, count: None },
        ],
    })
}
