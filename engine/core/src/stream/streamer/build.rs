//! Starting a streamer: its own or shared threads and cache, the loader pool over the
//! atlas, and the coarsest mip of every layer made resident before the first frame.

use super::*;

impl Streamer {
    /// Starts streaming `atlas` into a pool shaped as `pool`: host cache, loader
    /// threads, residency. The coarsest tile of every layer is loaded before this
    /// returns; the first [`Streamer::frame`] uploads it (nothing is ever missing).
    ///
    /// This starts loader threads, which the browser does not have: there, use
    /// [`Streamer::new_shared`] with [`SharedStreaming::external`].
    pub fn new(atlas: Arc<Atlas>, pool: &PoolLayout, config: StreamerConfig) -> Result<Self, StreamerError> {
        let cache = Arc::new(HostCache::new(u64::from(config.host_cache_mib) << 20));
        // A remote atlas waits on round trips, not on the CPU: by default it gets enough
        // loader threads to keep REMOTE_LOADER_THREADS requests in flight.
        let config = if config.loader_threads == 0 && atlas.is_remote() {
            StreamerConfig { loader_threads: REMOTE_LOADER_THREADS.max(default_loader_threads()), ..config }
        } else {
            config
        };
        Self::open(atlas, pool, config, cache, Threads::Own)
    }

    /// As [`Streamer::new`], with the host cache and loader threads of `shared`: the
    /// tiles go into a new partition of the shared cache, and the requests into a queue
    /// of this streamer's on the shared threads. `config.host_cache_mib`,
    /// `config.loader_threads` and `config.loader_stack_bytes` are ignored (and kept
    /// as given in [`Streamer::config`]); the streamer's requests are cancelled after
    /// its own [`Staleness::request_frames`]. Dropping the streamer drops its
    /// partition's tiles and its queue; the shared parts go with their last user.
    ///
    /// On [`SharedStreaming::external`] (the browser: no threads) no thread is started,
    /// and the loads wait for the embedder's executor
    /// ([`LoaderThreads::take_job`]); the coarsest tiles, loaded before this returns,
    /// must then be at hand: for an atlas of [`Atlas::open_ranged`], fetch
    /// [`Atlas::ranges_to_fetch`] of [`Atlas::coarsest_tiles`] first (the
    /// [`StreamerConfig::coarsest_patience`] does not apply: nothing can arrive while
    /// this waits).
    pub fn new_shared(
        atlas: Arc<Atlas>,
        pool: &PoolLayout,
        config: StreamerConfig,
        shared: &SharedStreaming,
    ) -> Result<Self, StreamerError> {
        let cache = Arc::new(shared.host_cache().new_partition());
        Self::open(atlas, pool, config, cache, Threads::Shared(shared.loader_threads()))
    }

    /// A streamer for the same atlas into a pool of another shape (the renderer resized
    /// its pool), with the same settings, on the same loader threads and, when the pool
    /// formats are unchanged, the same host cache: tiles decoded before are uploaded
    /// again from RAM, neither read nor transcoded. Residency starts over (only the
    /// coarsest tiles are resident); this streamer's queued loads are cancelled when it
    /// is dropped. Fails for a streamer without an atlas ([`Streamer::with_loader`]).
    pub fn reshaped(&self, pool: &PoolLayout) -> Result<Self, StreamerError> {
        let atlas = self.atlas.clone().ok_or_else(|| {
            StreamerError::Config("a streamer without an atlas file cannot move to another pool".into())
        })?;
        // A cache of another format's tiles would hand out wrongly sized bytes.
        let cache = if pool.targets == self.targets {
            self.cache.clone()
        } else {
            Arc::new(self.cache.new_partition())
        };
        let threads = self.loader.loader_threads().clone();
        let mut next = Self::open(atlas, pool, self.config.clone(), cache, Threads::Shared(&threads))?;
        next.set_frozen(self.frozen);
        Ok(next)
    }

    /// [`Streamer::new`] and [`Streamer::new_shared`] once the cache is chosen.
    pub(super) fn open(
        atlas: Arc<Atlas>,
        pool: &PoolLayout,
        config: StreamerConfig,
        cache: Arc<HostCache>,
        threads: Threads<'_>,
    ) -> Result<Self, StreamerError> {
        config.check()?;
        if atlas.is_produced() {
            // Nothing to read: misses go to the production queue, and no loader thread
            // is started (the pool's threads are external ones no job reaches).
            let path = atlas.path().to_path_buf();
            let tile_loader: Arc<dyn TileLoader> =
                Arc::new(move |tile: TileId| -> Result<Arc<[u8]>, LoadError> {
                    Err(LoadError::failed(
                        tile,
                        format!(
                            "{} is produced at run time: its tiles are drawn, not loaded",
                            path.display()
                        ),
                    ))
                });
            let mut streamer = Self::build(pool, config, cache, tile_loader, Threads::None, true)?;
            streamer.atlas = Some(atlas);
            return Ok(streamer);
        }
        let tile_loader: Arc<dyn TileLoader> = if pool.stacked {
            Arc::new(StackedLoader::new(atlas.clone(), cache.clone(), &pool.targets))
        } else {
            Arc::new(AtlasLoader::with_target(atlas.clone(), cache.clone(), pool.targets[0]))
        };
        let mut streamer =
            Self::build(pool, config, cache, tile_loader, threads, false).map_err(|e| match e {
                StreamerError::CoarsestTile { source, .. } => {
                    StreamerError::CoarsestTile { atlas: atlas.path().to_path_buf(), source }
                }
                other => other,
            })?;
        streamer.atlas = Some(atlas);
        Ok(streamer)
    }

    /// As [`Streamer::new`] with a tile loader of the caller's and no atlas file (tests
    /// and simulations inject corrupt, slow or synthetic tiles this way); `cache` is
    /// what [`Streamer::host_cache`] reports, and the disk tier of [`Streamer::stats`]
    /// stays empty.
    pub fn with_loader(
        pool: &PoolLayout,
        config: StreamerConfig,
        cache: Arc<HostCache>,
        tile_loader: Arc<dyn TileLoader>,
    ) -> Result<Self, StreamerError> {
        Self::build(pool, config, cache, tile_loader, Threads::Own, false)
    }

    /// Everything but the atlas: residency, the loader pool on `threads` and the
    /// coarsest tiles; with `produced`, a production queue instead of loads, and the
    /// coarsest tiles placed for the first plan to produce.
    pub(super) fn build(
        pool: &PoolLayout,
        config: StreamerConfig,
        cache: Arc<HostCache>,
        tile_loader: Arc<dyn TileLoader>,
        threads: Threads<'_>,
        produced: bool,
    ) -> Result<Self, StreamerError> {
        let stride = checked_stride(config.feedback_stride)?;
        let layout = FeedbackLayout::new(&pool.owners);
        let mut residency = Residency::with_layout(
            layout.clone(),
            ResidencyConfig {
                slots_x: u16::try_from(pool.slots_x).unwrap_or(u16::MAX),
                slots_y: u16::try_from(pool.slots_y).unwrap_or(u16::MAX),
                max_uploads_per_frame: config.max_uploads_per_frame.max(1),
                max_upload_bytes_per_frame: config.max_upload_bytes_per_frame.max(1),
                complete_page_table: config.complete_page_table,
                ..ResidencyConfig::default()
            },
        );
        residency.set_prefetch_ttl(config.staleness.prefetch_frames);
        let loader = match threads {
            Threads::Own => {
                let loader_config = LoaderConfig {
                    cancel_after_frames: config.staleness.request_frames,
                    stack_bytes: config.loader_stack_bytes,
                };
                // 0 threads: one per core but one.
                let threads = LoaderThreads::new(config.loader_threads, loader_config)
                    .map_err(StreamerError::LoaderThreads)?;
                LoaderPool::on_threads(&threads, tile_loader.clone())
            }
            Threads::Shared(threads) => LoaderPool::on_threads(threads, tile_loader.clone())
                .with_cancel_after_frames(config.staleness.request_frames),
            Threads::None => {
                let loader_config = LoaderConfig {
                    cancel_after_frames: config.staleness.request_frames,
                    stack_bytes: config.loader_stack_bytes,
                };
                LoaderPool::on_threads(&LoaderThreads::external(loader_config), tile_loader.clone())
            }
        };
        // The coarsest tile of every owning layer, loaded now so that it is never missing.
        let roots: Vec<TileId> = pool
            .owners
            .iter()
            .enumerate()
            .map(|(i, l)| TileId::new(i as u16, l.coarsest_mip(), 0, 0))
            .collect();
        let part_lengths = pool.part_lengths();
        let tile_bytes: usize = part_lengths.iter().sum();
        // On external threads (the browser) nothing arrives while this thread waits: the
        // embedder fetched the coarsest tiles' bytes before, or they are an error now.
        let patience = if loader.loader_threads().is_external() {
            std::time::Duration::ZERO
        } else {
            config.coarsest_patience
        };
        let roots_wanted = residency.on_feedback(0, &roots);
        let production = produced.then(|| {
            let mut production = Production::new(config.production);
            // Placed now, whatever the budget: the first plan produces them, so nothing
            // is ever missing.
            for &(tile, _) in &roots_wanted {
                residency.on_produced(tile);
            }
            let budget = residency.config();
            residency.set_upload_budget(roots_wanted.len(), u64::MAX);
            let placed = residency.plan_uploads(0);
            residency.set_upload_budget(budget.max_uploads_per_frame, budget.max_upload_bytes_per_frame);
            production.set_pending(placed.uploads.iter().map(|u| (u.tile, u.slot)).collect());
            production
        });
        let roots_wanted = if produced { Vec::new() } else { roots_wanted };
        for (tile, _) in roots_wanted {
            let start = Instant::now();
            let bytes = loop {
                match tile_loader.load(tile).and_then(|b| check_length(tile, b, tile_bytes)) {
                    // Unavailable for now: asked again, as every other tile would be.
                    Err(LoadError::Unavailable { reason, .. })
                        if start.elapsed() + COARSEST_RETRY <= patience =>
                    {
                        tracing::warn!(
                            "{tile}, the coarsest tile, is unavailable for now ({reason}); trying again"
                        );
                        std::thread::sleep(COARSEST_RETRY);
                    }
                    other => {
                        break other.map_err(|source| StreamerError::CoarsestTile {
                            atlas: std::path::PathBuf::new(),
                            source,
                        })?;
                    }
                }
            };
            residency.on_loaded(tile, bytes);
        }
        let budget = config.budget_controller(tile_bytes as u64);
        Ok(Self {
            atlas: None,
            layout,
            residency,
            loader,
            cache,
            part_lengths,
            targets: pool.targets.clone(),
            stacked: pool.stacked,
            bias: MipBiasController::new(BiasConfig {
                settle_frames: settle_frames(stride),
                ..BiasConfig::default()
            }),
            budget,
            slice: config.upload_slice_ms.map(crate::stream::upload_slice::UploadSlice::new),
            tile_bytes: tile_bytes as u64,
            config: StreamerConfig { feedback_stride: stride, ..config },
            recent_feedback: Default::default(),
            seen_feedback: false,
            last_fraction: 1.0,
            last_pool_full: false,
            last_uploads: 0,
            request_times: TileMap::default(),
            staged: TileMap::default(),
            reported_failures: TileSet::default(),
            retry_at: TileMap::default(),
            unavailable_logged: false,
            replaced_logged: false,
            last_network: None,
            production,
            frame: 0,
            frozen: false,
        })
    }
}
