//! [`VtConfig`]: the settings of a [`VirtualTextures`], validated once.

use super::*;

/// Settings of the virtual-texture system.
#[derive(Clone, Debug)]
pub struct VtConfig {
    /// GPU tile pool size in MiB.
    pub pool_mib: u32,
    /// Host page cache budget in MiB.
    pub host_cache_mib: u32,
    /// Loader threads (0 = one per core but one, at least 1: the render thread keeps a core).
    pub loader_threads: usize,
    /// Most tiles uploaded per frame (with `target_frame_ms`: the adaptive budget's
    /// ceiling).
    pub max_uploads_per_frame: usize,
    /// Most bytes uploaded per frame.
    pub max_upload_bytes_per_frame: u64,
    /// Feedback is written by one pixel in every `n × n` block (1, 2, 4 or 8), rotating.
    pub feedback_stride: u32,
    /// Anisotropy limit: 1 (the default) is trilinear only, cheapest but blurry at
    /// grazing angles (a floor or a road seen from eye height); up to
    /// [`MAX_ANISOTROPY`] taps along the axis of elongation keep such views sharp at
    /// the cost of more fetches where a pixel's footprint is stretched.
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
    /// [`VirtualTextures::begin`] calls); `None`: the fixed `max_uploads_per_frame`.
    pub target_frame_ms: Option<f64>,
    /// Also request the same-mip neighbours of requested tiles, at the lowest priority,
    /// into free or unneeded slots only.
    pub prefetch_neighbours: bool,
    /// How samples blend mips: [`Trilinear::Hardware`] (the default) where the pool
    /// format allows it, else the software path; [`Trilinear::Software`] forces the
    /// software path. [`VirtualTextures::trilinear`] says which one runs.
    pub trilinear: Trilinear,
    /// Let the built-in drawers force the depth test before their virtual-texture
    /// fragment shaders (where the device has `SHADER_EARLY_DEPTH_TEST` and the
    /// material never discards), so hidden fragments cost nothing and request no tiles.
    pub early_depth: bool,
    /// One host cache and one set of loader threads shared with other virtual
    /// textures (make it once with [`SharedStreaming::new`] and clone it into each
    /// config); `None` (the default): these virtual textures have their own, sized by
    /// `host_cache_mib` and `loader_threads` (which a shared one ignores).
    pub shared: Option<SharedStreaming>,
    /// MiB of host-visible staging memory the loader threads write tiles into, so that
    /// the render thread only records copies (0: none; the render thread then copies
    /// every uploaded tile into a staging belt itself, as it also does for a tile that
    /// finds the staging memory full).
    pub staging_mib: u32,
    /// Where the page table lives on the GPU: a complete storage buffer updated on the
    /// GPU (the default), one written from the CPU with shallow fallbacks, or an
    /// `R32Uint` texture. With the texture, shaders must read it that way: pass their
    /// source through [`crate::shaders::with_page_table`] (the built-in drawers do).
    pub page_table: PageTableStorage,
    /// Let the built-in drawers write feedback to a colour target
    /// ([`crate::shaders::with_feedback_target`], the default) instead of the storage
    /// bitset: their fragment shaders then have no side effect, so early depth holds
    /// without `SHADER_EARLY_DEPTH_TEST`. Your own pipelines choose by their shader;
    /// the virtual textures take feedback from both paths in the same frame.
    pub feedback_target: bool,
    /// Take a predicted view's feedback each frame: passes drawn where the camera is
    /// going write it to [`VirtualTextures::predicted_attachment`] (the built-in
    /// drawers' `draw_predicted`), and its tiles stream at the lowest priority, never
    /// evicting what the current view needs (`FrameInput::predicted`). Costs a second
    /// request bitset and its readback; off by default.
    pub prediction: bool,
    /// Copy a run of uploaded tiles bound for slots one below the other, whose bytes
    /// follow each other in staging memory, with one copy command (the default; free
    /// slots are handed out down the columns and a frame's uploads ordered by their
    /// staging records, so a burst is a few copies); off: one copy per tile, to
    /// compare. [`StreamFrame::upload_copies`] counts them.
    pub merged_copies: bool,
}

impl Default for VtConfig {
    fn default() -> Self {
        let s = StreamerConfig::default();
        Self {
            pool_mib: 128,
            host_cache_mib: s.host_cache_mib,
            loader_threads: s.loader_threads,
            max_uploads_per_frame: s.max_uploads_per_frame,
            max_upload_bytes_per_frame: s.max_upload_bytes_per_frame,
            feedback_stride: s.feedback_stride,
            max_anisotropy: 1,
            mip_bias: s.mip_bias,
            debug_view: 0,
            pool_format: None,
            auto_mip_bias: s.auto_mip_bias,
            target_frame_ms: s.target_frame_ms,
            prefetch_neighbours: s.prefetch_neighbours,
            trilinear: Trilinear::default(),
            early_depth: true,
            shared: None,
            staging_mib: crate::staging::DEFAULT_STAGING_MIB,
            page_table: PageTableStorage::default(),
            feedback_target: true,
            prediction: false,
            merged_copies: true,
        }
    }
}

impl VtConfig {
    /// Checks every setting's range; [`VirtualTextures::new`] refuses a configuration
    /// that fails this with [`RenderError::Config`] naming the setting, instead of
    /// clamping it silently.
    pub fn validate(&self) -> Result<(), RenderError> {
        let bad = |what: String| Err(RenderError::Config(format!("VtConfig: {what}")));
        if self.pool_mib == 0 {
            return bad("pool_mib is 0: the tile pool needs at least 1 MiB".into());
        }
        if !(1..=MAX_ANISOTROPY).contains(&self.max_anisotropy) {
            return bad(format!("max_anisotropy {} is outside 1..={MAX_ANISOTROPY}", self.max_anisotropy));
        }
        if !FEEDBACK_STRIDES.contains(&self.feedback_stride) {
            return bad(format!(
                "feedback_stride {} is not one of {FEEDBACK_STRIDES:?}",
                self.feedback_stride
            ));
        }
        if !self.mip_bias.is_finite() || self.mip_bias.abs() > 16.0 {
            return bad(format!("mip_bias {} is outside -16..=16", self.mip_bias));
        }
        if self.debug_view >= DEBUG_VIEWS {
            return bad(format!("debug_view {} is outside 0..{DEBUG_VIEWS}", self.debug_view));
        }
        if self.max_uploads_per_frame == 0 || self.max_upload_bytes_per_frame == 0 {
            return bad("max_uploads_per_frame and max_upload_bytes_per_frame must be at least 1".into());
        }
        if let Some(ms) = self.target_frame_ms.filter(|ms| !(ms.is_finite() && *ms > 0.0)) {
            return bad(format!("target_frame_ms {ms} must be a positive number of milliseconds"));
        }
        Ok(())
    }

    /// The streaming part of these settings.
    pub fn streamer(&self) -> StreamerConfig {
        StreamerConfig {
            host_cache_mib: self.host_cache_mib,
            loader_threads: self.loader_threads,
            max_uploads_per_frame: self.max_uploads_per_frame,
            max_upload_bytes_per_frame: self.max_upload_bytes_per_frame,
            feedback_stride: self.feedback_stride,
            mip_bias: self.mip_bias,
            auto_mip_bias: self.auto_mip_bias,
            target_frame_ms: self.target_frame_ms,
            prefetch_neighbours: self.prefetch_neighbours,
            staleness: Staleness::default(),
            complete_page_table: self.page_table == PageTableStorage::Complete,
            ..StreamerConfig::default()
        }
    }
}
