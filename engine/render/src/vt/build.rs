//! Making the GPU side of a [`VirtualTextures`]: pools, page table, staging memory
//! and bindings, at creation and when the pool is resized.

use super::*;

impl VirtualTextures {
    /// Sets up pools, page table and feedback for `atlas`, and makes the coarsest mip
    /// of every layer resident (pinned) before returning, so nothing is ever missing.
    /// Fails with [`RenderError::Config`] for a setting out of range
    /// ([`VtConfig::validate`]) or a pool that does not fit the device, and with
    /// [`RenderError::DeviceLost`] on a lost device.
    pub fn new(ctx: &GpuContext, atlas: Arc<Atlas>, config: VtConfig) -> Result<Self, RenderError> {
        Self::create(ctx, atlas, config, None)
    }

    /// [`VirtualTextures::new`] for a produced atlas (runtime virtual textures,
    /// [`crate::produce`]): `producer` draws each tile the feedback asks for into its
    /// slot, the coarsest ones before this returns. Fails with [`RenderError::Config`]
    /// when a pool cannot be drawn into (a block-compressed `pool_format`).
    pub fn with_producer(
        ctx: &GpuContext,
        atlas: Arc<Atlas>,
        config: VtConfig,
        producer: Box<dyn TileProducer>,
    ) -> Result<Self, RenderError> {
        Self::create(ctx, atlas, config, Some(producer))
    }

    fn create(
        ctx: &GpuContext,
        atlas: Arc<Atlas>,
        config: VtConfig,
        producer: Option<Box<dyn TileProducer>>,
    ) -> Result<Self, RenderError> {
        config.validate()?;
        match (atlas.is_produced(), producer.is_some()) {
            (true, false) => {
                return Err(RenderError::Config(format!(
                    "{} is a produced atlas: its tiles are drawn by a TileProducer \
                     (VirtualTextures::with_producer), and without one nothing would draw them",
                    atlas.path().display()
                )));
            }
            (false, true) => {
                return Err(RenderError::Config(format!(
                    "{} is read from a file: a producer draws only the tiles of a produced atlas (Atlas::produced)",
                    atlas.path().display()
                )));
            }
            _ => {}
        }
        let colors: std::collections::HashSet<_> = atlas.layers().iter().map(|l| l.color).collect();
        if producer.is_some() && !atlas.is_stacked() && colors.len() > 1 {
            return Err(RenderError::Config(
                "a produced atlas of several layers in both colour spaces shares one pool, which a \
                 producer cannot draw both kinds into: make it a stack (one pool per layer)"
                    .into(),
            ));
        }
        // wgpu's buffer helpers panic on a lost device instead of failing.
        ctx.check()?;
        let device = &ctx.device;
        let (plan, pools) = Self::make_pools(ctx, &atlas, &config)?;
        let slice_ms = config.upload_slice_ms(ctx);
        let streaming = StreamerConfig { upload_slice_ms: slice_ms, ..config.streamer() };
        let mut streamer = match &config.shared {
            Some(shared) => Streamer::new_shared(atlas.clone(), &plan, streaming, shared),
            None => Streamer::new(atlas.clone(), &plan, streaming),
        }
        .map_err(|e| RenderError::Config(e.to_string()))?;
        let staging = Self::make_staging(ctx, &pools, &mut streamer, config.staging_mib);
        let page_table = Self::make_page_table(ctx, &config, &plan)?;
        if (config.feedback_target || config.prediction) && streamer.layout().words() as u64 * 32 >= 1 << 31 {
            // A request is the entry + 1 in 31 bits (bit 31 flags a coarser sample).
            return Err(RenderError::Config(format!(
                "a bitset of {} tiles is too large for feedback through a colour target or a predicted \
                 view (under 2^31): set feedback_target and prediction to false",
                streamer.layout().words() * 32
            )));
        }
        if producer.is_some()
            && let Some(p) = pools.iter().find(|p| p.target().is_block_compressed())
        {
            return Err(RenderError::Config(format!(
                "a produced atlas needs pools it can draw into, not {}: leave pool_format unset or rgba8",
                p.target().name()
            )));
        }
        let production = producer.map(|p| Production::new(device, &pools, p));
        let feedback = Feedback::new(device, streamer.layout().words(), FEEDBACK_RING);
        let layout_bgl = bind_group_layout(device, config.page_table);
        let bindings =
            Self::make_bindings(ctx, &atlas, &config, &plan, &pools, &page_table, &feedback, &layout_bgl);
        let mut vt = Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            atlas,
            streamer,
            pools,
            table_updater: Self::make_updater(ctx, &page_table),
            page_table,
            feedback_targets: FeedbackTargets::new(device, feedback.bitset(), false),
            prediction: config.prediction.then(|| Prediction::new(device, feedback.words())),
            feedback,
            layout_bgl,
            layers: bindings,
            config,
            stacked: plan.stacked,
            trilinear: (plan.trilinear, plan.trilinear_reason.clone()),
            format_note: plan.format_note.clone(),
            next_frame: 0,
            last_begin: None,
            last_upload_ms: 0.0,
            last_feedback: None,
            last_feedback_frame: 0,
            stall_warned: false,
            probe: ShaderProbe::Off,
            staging,
            pending_jobs: Vec::new(),
            table_unconfirmed: false,
            update_timestamps: None,
            upload_timestamps: None,
            upload_timer: slice_ms.and_then(|_| UploadTimer::new(device, &ctx.queue)),
            production,
            arrived: Vec::new(),
            waiting: Default::default(),
            input_layout: None,
        };
        // Uploads the coarsest tiles the streamer loaded, and writes every parameter block.
        let plan = vt.streamer.frame(FrameInput::default());
        vt.execute(ctx, plan);
        Ok(vt)
    }

    /// Plans the pool for `config` on `ctx`'s device and creates its textures.
    pub(super) fn make_pools(
        ctx: &GpuContext,
        atlas: &Atlas,
        config: &VtConfig,
    ) -> Result<(PoolLayout, Vec<TilePool>), RenderError> {
        let device = &ctx.device;
        let limits = GpuLimits {
            support: format_support(ctx),
            max_texture_side: device.limits().max_texture_dimension_2d,
            max_storage_binding: device.limits().max_storage_buffer_binding_size,
        };
        let plan = PoolLayout::plan(atlas, config.pool_mib, config.pool_format, limits, config.trilinear)
            .map_err(|e| RenderError::Config(e.to_string()))?;
        let layers = atlas.layers();
        let pools: Vec<TilePool> = plan
            .targets
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                // A stack's pools hold one layer each; a single pool holds them all.
                let colors: Vec<ColorSpace> = if plan.stacked {
                    vec![layers[i].color]
                } else {
                    layers.iter().map(|l| l.color).collect()
                };
                let mut pool = TilePool::with_grid(
                    device,
                    &ctx.queue,
                    (plan.slots_x, plan.slots_y),
                    (plan.slot_texels, plan.slot_margin),
                    t,
                    &colors,
                    plan.pool_levels(),
                )?;
                pool.set_merged_copies(config.merged_copies);
                Ok::<_, RenderError>(pool)
            })
            .collect::<Result<_, _>>()?;
        tracing::info!(
            formats = ?plan.targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
            slots = plan.slot_count(),
            stacked = plan.stacked,
            sampling = %plan.trilinear_reason,
            note = plan.format_note.as_deref().unwrap_or(""),
            "tile pool"
        );
        Ok((plan, pools))
    }

    /// The update pass of a complete page table (`None` for the other storages).
    pub(super) fn make_updater(ctx: &GpuContext, page_table: &PageTableBuffer) -> Option<TableUpdater> {
        if page_table.storage() != PageTableStorage::Complete {
            return None;
        }
        page_table.buffer().map(|b| TableUpdater::new(&ctx.device, b, page_table.len()))
    }

    /// The page table of `plan` in the configured storage.
    pub(super) fn make_page_table(
        ctx: &GpuContext,
        config: &VtConfig,
        plan: &PoolLayout,
    ) -> Result<PageTableBuffer, RenderError> {
        let max_side = ctx.device.limits().max_texture_dimension_2d;
        PageTableBuffer::new(&ctx.device, plan.page_table_entries(), config.page_table, max_side)
            .map_err(RenderError::Config)
    }

    /// `mib` MiB of staging memory laid out for `pools`' copies, handed to `streamer`'s
    /// loader threads (`None` for 0 MiB, and where mappings do not persist: in a browser).
    pub(super) fn make_staging(
        ctx: &GpuContext,
        pools: &[TilePool],
        streamer: &mut Streamer,
        mib: u32,
    ) -> Option<GpuStaging> {
        if mib == 0 || !crate::staging::PERSISTENT_MAPPING {
            streamer.set_staging(None);
            return None;
        }
        let parts: Vec<(u32, u32, u32)> = pools.iter().map(TilePool::staged_rows).collect();
        let layout = StagingLayout::with_margins(&parts, wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let expected: usize = streamer.part_lengths().iter().sum();
        if layout.tile_bytes() != expected {
            tracing::warn!(
                staged = layout.tile_bytes(),
                expected,
                "staging layout does not match the tile size; uploads are copied by the render thread"
            );
            streamer.set_staging(None);
            return None;
        }
        // Never more than twice what the pools hold (tiles in flight while the pool is
        // refilled after a cut), nor [`crate::staging::MAX_STAGING_MIB`].
        let pool_mib = 2 * pools.iter().map(TilePool::bytes).sum::<u64>().div_ceil(1 << 20);
        let chunk = u64::from(crate::staging::STAGING_CHUNK_MIB);
        let cap = pool_mib.next_multiple_of(chunk).max(chunk).min(u64::from(crate::staging::MAX_STAGING_MIB));
        let mib = u32::try_from(u64::from(mib).min(cap)).unwrap_or(crate::staging::MAX_STAGING_MIB);
        let staging = GpuStaging::new(&ctx.device, layout, mib);
        streamer.set_staging(Some(Arc::clone(staging.ring())));
        Some(staging)
    }

    /// One parameter block and bind group per sampled layer (a stack: layer 0's).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_bindings(
        ctx: &GpuContext,
        atlas: &Atlas,
        config: &VtConfig,
        plan: &PoolLayout,
        pools: &[TilePool],
        page_table: &PageTableBuffer,
        feedback: &Feedback,
        layout_bgl: &wgpu::BindGroupLayout,
    ) -> Vec<LayerBinding> {
        let sampler = pool_sampler(&ctx.device);
        let texels = pools[0].texels();
        let layers = atlas.layers();
        let sampled = if plan.stacked { &layers[..1] } else { layers };
        sampled
            .iter()
            .map(|l| {
                let resources = Resources {
                    pools,
                    page_table,
                    feedback: feedback.bitset(),
                    sampler: &sampler,
                    color: l.color,
                };
                let mut params = VtParams::new(l, texels, config.max_anisotropy, config.debug_view);
                params.set_trilinear(plan.trilinear);
                params.set_slot_margin(plan.slot_margin);
                LayerBinding::new(&ctx.device, layout_bgl, params, &l.name, &resources)
            })
            .collect()
    }

    /// Resizes the tile pool to about `mib` MiB between frames, keeping the host cache
    /// (tiles already decoded are uploaded again from RAM, not read or transcoded), the
    /// loader threads, the feedback buffers, the bind group layout (pipelines made with
    /// [`VirtualTextures::bind_group_layout`] stay valid) and every setting. The pool
    /// starts over from the coarsest mips: the view is blurry for a few frames while
    /// its tiles stream in again. On an error (a pool that does not fit the device, a
    /// lost device) the virtual textures keep their old pool.
    pub fn set_pool_mib(&mut self, ctx: &GpuContext, mib: u32) -> Result<(), RenderError> {
        let config = VtConfig { pool_mib: mib, ..self.config.clone() };
        config.validate()?;
        ctx.check()?;
        let (plan, pools) = Self::make_pools(ctx, &self.atlas, &config)?;
        let mut streamer = self.streamer.reshaped(&plan).map_err(|e| RenderError::Config(e.to_string()))?;
        streamer.set_mip_bias(config.streaming.mip_bias);
        let staging = Self::make_staging(ctx, &pools, &mut streamer, config.staging_mib);
        let page_table = Self::make_page_table(ctx, &config, &plan)?;
        let mut layers = Self::make_bindings(
            ctx,
            &self.atlas,
            &config,
            &plan,
            &pools,
            &page_table,
            &self.feedback,
            &self.layout_bgl,
        );
        for layer in &mut layers {
            layer.params.set_probe(self.probe);
        }
        self.streamer = streamer;
        self.staging = staging;
        if let Some(production) = self.production.as_mut() {
            production.retarget(&pools);
        }
        self.pools = pools;
        self.table_updater = Self::make_updater(ctx, &page_table);
        // The old table's jobs mean nothing to the new one, which starts unmapped.
        self.pending_jobs.clear();
        self.table_unconfirmed = false;
        self.page_table = page_table;
        self.layers = layers;
        self.trilinear = (plan.trilinear, plan.trilinear_reason.clone());
        self.format_note = plan.format_note.clone();
        self.config = config;
        // Uploads the coarsest tiles and writes the whole page table and every parameter block.
        let first = self.streamer.frame(FrameInput { frame: self.next_frame, ..FrameInput::default() });
        self.execute(ctx, first);
        Ok(())
    }
}
