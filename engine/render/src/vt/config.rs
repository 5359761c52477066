//! [`VtConfig`]: the settings of a [`VirtualTextures`], validated once.

use super::*;

/// Settings of the virtual-texture system.
#[derive(Clone, Debug)]
pub struct VtConfig {
    /// GPU tile pool size in MiB.
    pub pool_mib: u32,
    /// Everything the streamer decides by: host cache, loader threads, upload budgets,
    /// feedback resolution, mip bias and its automatic rise, prefetching. Its
    /// `complete_page_table` follows [`VtConfig::page_table`] and is not read here.
    pub streaming: StreamerConfig,
    /// Anisotropy limit: 1 (the default) is trilinear only, cheapest but blurry at
    /// grazing angles (a floor or a road seen from eye height); up to
    /// [`MAX_ANISOTROPY`] taps along the axis of elongation keep such views sharp at
    /// the cost of more fetches where a pixel's footprint is stretched.
    pub max_anisotropy: u16,
    /// Debug view: 0 off, 1 mip colours, 2 fallback depth, 3 tile borders.
    pub debug_view: u32,
    /// Force the pool's texel format (default: the best the adapter and the atlas allow).
    pub pool_format: Option<TargetFormat>,
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
    /// the streaming settings' `host_cache_mib` and `loader_threads` (which a shared
    /// one ignores).
    pub shared: Option<SharedStreaming>,
    /// MiB of host-visible staging memory the loader threads write tiles into, so that
    /// the render thread only records copies (0: none; the render thread then copies
    /// every uploaded tile into a staging belt itself, as it also does for a tile that
    /// finds the staging memory full). Ignored in a browser, where mapped memory does
    /// not persist ([`crate::staging::PERSISTENT_MAPPING`]).
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
    /// Keep [`VtConfig::feedback_target`] for the built-in material scene drawer on a
    /// software adapter (Mesa's llvmpipe / lavapipe) too. Off by default: there that
    /// drawer writes feedback to the storage bitset, since llvmpipe's memory grows on
    /// its side-effect-free colour-target pass (about 150 MB a frame in a 960×540
    /// dungeon capture, 6.7 GB after 30 frames) and that path is slower there. Other
    /// drawers, and your own pipelines, are not affected.
    pub feedback_target_on_software: bool,
    /// Keep [`VtConfig::feedback_target`] for the built-in drawers on a hardware GPU that
    /// can force early depth tests ([`VtConfig::early_depth`] and
    /// `SHADER_EARLY_DEPTH_TEST`). Off by default: there they write feedback to the
    /// storage bitset with the depth test forced early, which costs less than the
    /// colour target's full-resolution bandwidth (1080p on an H100, issue 45: 1.32× the
    /// fully resident reference against 1.49× on the photograph and the 16K² mosaic, the
    /// demo flight fully resident in 112 against 113 of 120 frames). Software adapters
    /// keep the target for the scene drawer ([`VtConfig::feedback_target_on_software`]
    /// for the material drawer). [`VirtualTextures::builtin_feedback_target`] says which
    /// path the drawers take.
    pub feedback_target_with_early_depth: bool,
    /// Take a predicted view's feedback each frame: passes drawn where the camera is
    /// going write it to [`VirtualTextures::predicted_attachment`] (the built-in
    /// drawers' `draw_predicted`), and its tiles stream at the lowest priority, never
    /// evicting what the current view needs (`FrameInput::predicted`). Costs a second
    /// request bitset and its readback; off by default.
    pub prediction: bool,
    /// Copy a run of uploaded tiles bound for slots one below the other, whose bytes
    /// follow each other in staging memory, with one copy command (the default; free
    /// slots are handed out down the columns and a frame's uploads ordered by their
    /// staging records, so a burst is a few copies), and likewise a block pool's level 1
    /// where its quadrants are cut from the parents' bytes on the CPU; off: one copy
    /// per tile and a block pool's quadrants copied on the GPU one by one, to compare.
    /// [`StreamFrame::upload_copies`] counts them.
    pub merged_copies: bool,
    /// How bursts of uploads (a camera cut, a flushed pool) are spread over frames so
    /// that no frame takes them all at once; see [`UploadSlicing`]. Sets the streaming
    /// settings' `upload_slice_ms`, which is not read here.
    pub upload_slicing: UploadSlicing,
}

/// Upload work a frame may take where bursts are sliced with [`UploadSlicing::Auto`], ms,
/// on the CPU and on the GPU each.
pub const DEFAULT_UPLOAD_SLICE_MS: f64 = 0.35;

/// How bursts of uploads are spread over frames ([`VtConfig::upload_slicing`]): each
/// frame uploads at most as many tiles as fit a slice of milliseconds at the measured
/// price of a tile (the CPU's recording, and the GPU's copies and level 1 timed with
/// timestamps read back frames later), coarse mips first, below the upload budget;
/// the tiles left wait in the ready queue, their staging kept, while their ancestors
/// show.
///
/// `Auto` by default. On an H100 (issue 45, BENCHMARKS.md), the 16K² mosaic flown at
/// 1080p with its pool flushed every 10 frames (`--upload-budget 1024`): against the
/// same frames unflushed, the burst frames' p95 is +0.54 ms with a 0.35 ms slice and
/// +1.03 ms without (LZ4 → RGBA8), +0.85 and +1.45 ms (ETC1S → BC7), and the pool
/// refills in 8–9 frames instead of 4. Motion: with prediction (the default in
/// `tessera capture`), a camera cut is fully resident 1 frame after it, as without the
/// slice, and the demo flight keeps its 112 of 120 fully resident frames. A cut that
/// nothing predicted takes longer: 3 frames instead of 2 (RGBA8), 6 instead of 2 (BC7),
/// its ancestors shown meanwhile. [`UploadSlicing::Off`] is the setting for an
/// application that cuts without warning and would rather take one long frame.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum UploadSlicing {
    /// [`DEFAULT_UPLOAD_SLICE_MS`] on a hardware GPU that can time its uploads
    /// (`TIMESTAMP_QUERY_INSIDE_ENCODERS`); off elsewhere (software adapters, where
    /// GPU work is CPU work and slower by orders of magnitude, and browsers). The
    /// default.
    #[default]
    Auto,
    /// No cap beyond the upload budget: a burst takes one frame.
    Off,
    /// At most this many milliseconds of upload work a frame (the GPU's share counted
    /// where the device can time it).
    Ms(f64),
}

impl Default for VtConfig {
    fn default() -> Self {
        Self {
            pool_mib: 128,
            streaming: StreamerConfig::default(),
            max_anisotropy: 1,
            debug_view: 0,
            pool_format: None,
            trilinear: Trilinear::default(),
            early_depth: true,
            shared: None,
            staging_mib: crate::staging::DEFAULT_STAGING_MIB,
            page_table: PageTableStorage::default(),
            feedback_target: true,
            feedback_target_on_software: false,
            feedback_target_with_early_depth: false,
            prediction: false,
            merged_copies: true,
            upload_slicing: UploadSlicing::Auto,
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
        if let Err(what) = self.streaming.validate() {
            return bad(format!("streaming.{what}"));
        }
        if let UploadSlicing::Ms(ms) = self.upload_slicing
            && !(ms.is_finite() && ms > 0.0)
        {
            return bad(format!("upload_slicing {ms} ms is not a positive number of milliseconds"));
        }
        if self.debug_view >= DEBUG_VIEWS {
            return bad(format!("debug_view {} is outside 0..{DEBUG_VIEWS}", self.debug_view));
        }
        Ok(())
    }

    /// The streamer's settings: [`VtConfig::streaming`], with the page table's kind
    /// from [`VtConfig::page_table`].
    pub fn streamer(&self) -> StreamerConfig {
        StreamerConfig {
            complete_page_table: self.page_table == PageTableStorage::Complete,
            ..self.streaming.clone()
        }
    }

    /// The burst slice on `ctx`'s device ([`VtConfig::upload_slicing`]), ms; `None`: off.
    pub fn upload_slice_ms(&self, ctx: &crate::GpuContext) -> Option<f64> {
        match self.upload_slicing {
            UploadSlicing::Auto => {
                let timed = ctx.device.features().contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
                (timed && ctx.info.device_type != wgpu::DeviceType::Cpu).then_some(DEFAULT_UPLOAD_SLICE_MS)
            }
            UploadSlicing::Off => None,
            UploadSlicing::Ms(ms) => Some(ms),
        }
    }
}
