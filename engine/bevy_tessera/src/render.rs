//! The plugin's render world: atlases opened on Bevy's device (and opened again when
//! their file is replaced or Bevy reloads their asset), each frame begun before Bevy's passes and ended after them,
//! and the statistics sent back to the main world.

use super::*;

use bevy::render::render_resource::{CachedPipelineState, PipelineCache, PipelineDescriptor};
use bevy::shader::ShaderCacheError;

/// The render world's virtual textures, one per atlas in use.
#[derive(Resource)]
pub struct VtRenderState {
    pub(super) config: VtConfig,
    pub(super) ctx: Option<GpuContext>,
    pub(super) atlases: HashMap<String, Streamed>,
    /// Atlases the materials name ([`VirtualTexture::atlas`]), from the main world.
    pub(super) wanted: Vec<(String, Wanted)>,
    /// Resources bound for atlases that failed to open: an empty parameter block.
    pub(super) fallback: Option<tessera::BindingResources>,
    pub(super) sender: Sender<Report>,
    /// Render-world frames so far (atlas files are checked for replacement every
    /// [`RELOAD_CHECK_FRAMES`]).
    pub(super) frames: u64,
    /// Pipelines whose shader error was reported ([`report_shader_errors`]).
    pub(super) shader_errors: std::collections::HashSet<usize>,
}

/// Frames between two checks of whether an atlas file was replaced.
pub(super) const RELOAD_CHECK_FRAMES: u64 = 30;

/// What tells a replaced atlas file: its length and modification time.
pub(super) type FileIdentity = (u64, std::time::SystemTime);

/// The [`FileIdentity`] of a local atlas (`None` for a remote atlas or a file that
/// cannot be read).
pub(super) fn file_identity(location: &str) -> Option<FileIdentity> {
    if location.contains("://") {
        return None;
    }
    let meta = std::fs::metadata(location).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// An atlas a material names, as the main world has it this frame.
#[derive(Clone)]
pub(super) enum Wanted {
    /// A location the plugin opens itself (and checks for replacement).
    Location,
    /// An atlas asset, loaded: each load (a reload too) is a new atlas; with its
    /// producer where it is produced.
    Asset(Arc<Atlas>, Option<Produced>),
    /// An atlas asset that failed to load: Bevy's message.
    AssetFailed(String),
}

/// What an atlas in the render world was opened from, to tell when it changes.
pub(super) enum Origin {
    /// A location: its file as it was opened ([`file_identity`]).
    File(Option<FileIdentity>),
    /// An atlas asset's atlas (`None`: the asset failed to load).
    Asset(Option<Arc<Atlas>>),
}

impl Origin {
    /// Whether this is the asset's atlas `atlas`, the same load of it.
    fn is(&self, atlas: &Arc<Atlas>) -> bool {
        matches!(self, Origin::Asset(Some(seen)) if Arc::ptr_eq(seen, atlas))
    }
}

pub(super) enum Streamed {
    Open(Box<Streaming>),
    /// Tried again only once its origin changes from this.
    Failed(Origin),
}

impl Streamed {
    fn origin(&self) -> &Origin {
        match self {
            Streamed::Open(s) => &s.origin,
            Streamed::Failed(origin) => origin,
        }
    }
}

pub(super) struct Streaming {
    pub(super) vt: VirtualTextures,
    pub(super) frame: Option<DetachedFrame>,
    /// What it was opened from.
    pub(super) origin: Origin,
}

pub(super) fn extract_atlases(
    materials: Extract<Res<Assets<TesseraMaterial>>>,
    assets: Extract<Res<Assets<TesseraAtlas>>>,
    server: Extract<Res<AssetServer>>,
    mut state: ResMut<VtRenderState>,
) {
    state.wanted.clear();
    for (_, m) in materials.iter() {
        let vt = &m.extension;
        if state.wanted.iter().any(|(name, _)| *name == vt.atlas) {
            continue;
        }
        let wanted = match &vt.asset {
            None => Wanted::Location,
            Some(handle) => match (assets.get(handle), server.load_state(handle)) {
                // After a failed reload Bevy keeps the asset: it keeps streaming.
                (Some(atlas), _) => Wanted::Asset(atlas.atlas().clone(), atlas.producer().cloned()),
                (None, bevy::asset::LoadState::Failed(e)) => Wanted::AssetFailed(e.to_string()),
                // Still loading: its materials wait.
                (None, _) => continue,
            },
        };
        state.wanted.push((vt.atlas.clone(), wanted));
    }
}

/// Whether `wanted` asks for something the render world has not done: an atlas not
/// tried yet, or an asset loaded again.
fn pending(atlases: &HashMap<String, Streamed>, (name, wanted): &(String, Wanted)) -> bool {
    match (atlases.get(name), wanted) {
        (None, _) => true,
        (Some(streamed), Wanted::Asset(atlas, _)) => !streamed.origin().is(atlas),
        (Some(_), Wanted::Location | Wanted::AssetFailed(_)) => false,
    }
}

pub(super) fn open_atlases(
    mut state: ResMut<VtRenderState>,
    device: Res<RenderDevice>,
    queue: Res<RenderQueue>,
    adapter: Res<RenderAdapter>,
) {
    let state = &mut *state;
    state.frames += 1;
    if state.frames.is_multiple_of(RELOAD_CHECK_FRAMES) {
        reopen_replaced(state);
    }
    if !state.wanted.iter().any(|w| pending(&state.atlases, w)) {
        return;
    }
    if state.ctx.is_none() {
        match GpuContext::from_host_parts(&adapter, device.wgpu_device(), &queue) {
            Ok(ctx) => state.ctx = Some(ctx),
            Err(e) => {
                error!("Tessera cannot stream on this GPU: {e}");
                state.fallback = Some(fallback_resources(device.wgpu_device()));
                for (name, wanted) in &state.wanted {
                    let _ = state.sender.send(Report::Failed(name.clone(), e.to_string()));
                    let origin = match wanted {
                        Wanted::Location => Origin::File(None),
                        Wanted::Asset(atlas, _) => Origin::Asset(Some(atlas.clone())),
                        Wanted::AssetFailed(_) => Origin::Asset(None),
                    };
                    state.atlases.insert(name.clone(), Streamed::Failed(origin));
                }
            }
        }
    }
    for (name, wanted) in state.wanted.clone() {
        if !pending(&state.atlases, &(name.clone(), wanted.clone())) {
            continue;
        }
        let (opened, origin) = match wanted {
            Wanted::Location => {
                let identity = file_identity(&name);
                let opened = match &state.ctx {
                    Some(ctx) => open_one(ctx, &name, &state.config),
                    None => Err("no GPU context".to_owned()),
                };
                (opened, Origin::File(identity))
            }
            Wanted::Asset(atlas, produced) => {
                let opened = match &state.ctx {
                    Some(ctx) => stream(ctx, atlas.clone(), produced.as_ref(), &state.config),
                    None => Err("no GPU context".to_owned()),
                };
                (opened, Origin::Asset(Some(atlas)))
            }
            Wanted::AssetFailed(why) => (Err(why), Origin::Asset(None)),
        };
        if let Some(streamed) = state.atlases.get_mut(&name) {
            replace(streamed, &name, "Bevy loaded the asset again", opened, origin, &state.sender);
            continue;
        }
        let entry = match opened {
            Ok(vt) => Streamed::Open(Box::new(Streaming { vt, frame: None, origin })),
            Err(e) => {
                error!("Tessera atlas {name}: {e}; its meshes keep their material colour");
                let _ = state.sender.send(Report::Failed(name.clone(), e));
                if state.fallback.is_none() {
                    state.fallback = Some(fallback_resources(device.wgpu_device()));
                }
                Streamed::Failed(origin)
            }
        };
        state.atlases.insert(name, entry);
    }
}

/// Opens again every local atlas whose file was replaced since it was opened (or that
/// failed to open and now opens): a bake that rewrote it, a file copied over it. A file
/// that does not open yet (still being written) keeps the old one until a later check.
/// Atlas assets are left to Bevy's reloads.
pub(super) fn reopen_replaced(state: &mut VtRenderState) {
    let Some(ctx) = &state.ctx else { return };
    for (location, streamed) in &mut state.atlases {
        let Origin::File(seen) = streamed.origin() else { continue };
        let now = file_identity(location);
        if now.is_none() || now == *seen {
            continue;
        }
        let opened = open_one(ctx, location, &state.config);
        replace(streamed, location, "the file changed", opened, Origin::File(now), &state.sender);
    }
}

/// Puts a new opening of atlas `name` (from `origin`, because of `why`) in place of
/// `streamed`: its materials bind the new one; or, where it did not open, the old one
/// stays, and it is tried again only once its origin changes again.
fn replace(
    streamed: &mut Streamed,
    name: &str,
    why: &str,
    opened: Result<VirtualTextures, String>,
    origin: Origin,
    sender: &Sender<Report>,
) {
    match opened {
        Ok(vt) => {
            info!("Tessera atlas {name}: {why}, opened again");
            *streamed = Streamed::Open(Box::new(Streaming { vt, frame: None, origin }));
            let _ = sender.send(Report::Reopened(name.to_owned()));
        }
        Err(e) => match streamed {
            Streamed::Open(s) => {
                s.origin = origin;
                warn!("Tessera atlas {name}: {why} but does not open ({e}); the old one stays");
            }
            Streamed::Failed(seen) => *seen = origin,
        },
    }
}

pub(super) fn open_one(
    ctx: &GpuContext,
    location: &str,
    config: &VtConfig,
) -> Result<VirtualTextures, String> {
    let atlas = Atlas::open(location).map_err(|e| e.to_string())?;
    stream(ctx, Arc::new(atlas), None, config)
}

/// The virtual textures of an opened atlas on the host's device, with a pool no larger
/// than the atlas can fill ([`fitted_pool_mib`]); a produced atlas' with its producer,
/// made on the host's device.
fn stream(
    ctx: &GpuContext,
    atlas: Arc<Atlas>,
    produced: Option<&Produced>,
    config: &VtConfig,
) -> Result<VirtualTextures, String> {
    let layers = atlas.layers();
    let tiles = if atlas.is_stacked() {
        layers.first().map_or(0, |l| l.layout.tile_count())
    } else {
        layers.iter().map(|l| l.layout.tile_count()).sum()
    };
    let padded = layers.first().map_or(0, |l| l.layout.padded_tile_size());
    let pool_mib = fitted_pool_mib(config.pool_mib, tiles, layers.len(), padded);
    if pool_mib < config.pool_mib {
        info!(
            "Tessera atlas {}: a {pool_mib} MiB pool holds all its {tiles} tiles (not the {} MiB asked)",
            atlas.path().display(),
            config.pool_mib
        );
    }
    let config = VtConfig { pool_mib, ..config.clone() };
    match produced {
        Some(p) => VirtualTextures::with_producer(ctx, atlas, config, p.producer(ctx)?),
        None => VirtualTextures::new(ctx, atlas, config),
    }
    .map_err(|e| e.to_string())
}

/// The pool size for an atlas of `tiles` tile ids in `layers` layers of `padded`² stored
/// tiles: `requested` MiB, or less where that many would hold more slots than the atlas
/// has tiles. A small level then takes what its whole mip chain needs instead of the
/// plugin's budget (a 1024² scene atlas: 29 MiB, not 64). The bound assumes the largest
/// slot, RGBA8 in every layer with its 2× downsample, so any pool format gets at least
/// the slots it needs, with room for the slot grid's rounding (`slot_grid` makes a
/// near-square grid that can hold up to a row fewer than the bytes allow).
pub(super) fn fitted_pool_mib(requested: u32, tiles: u64, layers: usize, padded: u32) -> u32 {
    let side = u64::from(padded);
    let slot_bytes = layers.max(1) as u64 * 4 * (side * side + (side / 2) * (side / 2));
    let slots = tiles + 2 * (tiles as f64).sqrt().ceil() as u64 + 2;
    let needed = (slots * slot_bytes).div_ceil(1 << 20).max(1);
    u32::try_from(needed).map_or(requested, |n| requested.min(n))
}

/// Bindings for an atlas that failed to open: a zeroed parameter block (so
/// `vt_enabled()` is false), a one-entry page table and feedback, a 1x1 pool.
pub(super) fn fallback_resources(device: &wgpu::Device) -> tessera::BindingResources {
    let buffer = |size: u64, usage: wgpu::BufferUsages| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera fallback"),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let params_size = std::mem::size_of::<tessera::params::VtParams>() as u64;
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("tessera fallback pool"),
        size: wgpu::Extent3d { width: 1, height: 1, depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8UnormSrgb,
        usage: wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    });
    let view = texture.create_view(&Default::default());
    tessera::BindingResources {
        params: buffer(params_size, wgpu::BufferUsages::UNIFORM),
        page_table: tessera::PageTableResource::Buffer(buffer(16, wgpu::BufferUsages::STORAGE)),
        feedback: buffer(16, wgpu::BufferUsages::STORAGE),
        pools: [view.clone(), view.clone(), view],
        sampler: device.create_sampler(&Default::default()),
    }
}

/// Before Bevy's passes: every atlas' streaming decisions, uploads, produced tiles and
/// page-table writes (after the rectangles of produced atlases invalidated since the
/// last frame), and its feedback cleared, in a submission of its own.
pub(super) fn begin_frames(mut state: ResMut<VtRenderState>) {
    let state = &mut *state;
    let Some(ctx) = &state.ctx else { return };
    for (name, streamed) in &mut state.atlases {
        let Streamed::Open(s) = streamed else { continue };
        let produced = state.wanted.iter().find_map(|(n, w)| match w {
            Wanted::Asset(_, Some(p)) if n == name => Some(p),
            _ => None,
        });
        for (layer, rect) in produced.map(Produced::take_invalidated).unwrap_or_default() {
            s.vt.invalidate(layer, rect);
        }
        if let Some(stale) = s.frame.take() {
            // The previous frame never reached `end_frames` (a frame Bevy skipped).
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let _ = s.vt.end_detached(stale, &mut encoder);
            ctx.queue.submit([encoder.finish()]);
            s.vt.submitted();
        }
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera begin") });
        s.frame = Some(s.vt.begin(ctx, &mut encoder).detach());
        ctx.queue.submit([encoder.finish()]);
    }
}

/// After Bevy's passes were submitted: the feedback readback, mapped without waiting,
/// and the statistics sent to the main world.
pub(super) fn end_frames(mut state: ResMut<VtRenderState>) {
    let state = &mut *state;
    let Some(ctx) = &state.ctx else { return };
    for (location, streamed) in &mut state.atlases {
        let Streamed::Open(s) = streamed else { continue };
        let Some(frame) = s.frame.take() else { continue };
        let number = frame.number();
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera end") });
        let stream = s.vt.end_detached(frame, &mut encoder);
        ctx.queue.submit([encoder.finish()]);
        s.vt.submitted();
        let snapshot = s.vt.stats();
        let stats = AtlasStats {
            frame: number,
            resident_fraction: s.vt.resident_fraction(),
            stream,
            vram_slots: (snapshot.vram_counters.slots_used, snapshot.vram_counters.slots_total),
            host_tiles: (snapshot.host_cache.tiles, snapshot.host_cache.bytes),
            gpu_bytes: s.vt.gpu_bytes(),
        };
        let _ = state.sender.send(Report::Stats(location.clone(), Box::new(stats)));
    }
}

/// Names the file of every pipeline of [`MATERIAL_SHADER`] or [`PREPASS_SHADER`] that
/// failed to compile, once each, in Bevy's log and [`TesseraStats::shader_errors`]:
/// Bevy creates shader modules without a label, so wgpu's own message (logged by Bevy's
/// pipeline cache) names no shader. Pipelines still waiting for an import are not
/// failures.
pub(super) fn report_shader_errors(cache: Res<PipelineCache>, mut state: ResMut<VtRenderState>) {
    for (id, pipeline) in cache.pipelines().enumerate() {
        let CachedPipelineState::Err(
            err @ (ShaderCacheError::ProcessShaderError(_) | ShaderCacheError::CreateShaderModule(_)),
        ) = &pipeline.state
        else {
            continue;
        };
        let (label, fragment) = match &pipeline.descriptor {
            PipelineDescriptor::RenderPipelineDescriptor(d) => (&d.label, &d.fragment),
            PipelineDescriptor::MeshPipelineDescriptor(d) => (&d.label, &d.fragment),
            PipelineDescriptor::ComputePipelineDescriptor(_) => continue,
        };
        let Some(fragment) = fragment else { continue };
        let Some((_, file)) = SHADER_FILES.iter().find(|(h, _)| *h == fragment.shader) else { continue };
        if !state.shader_errors.insert(id) {
            continue;
        }
        let message = format!(
            "shader {file} (pipeline {}, features {}) does not compile: {err}",
            label.as_deref().unwrap_or("without a label"),
            enabled_defs(&fragment.shader_defs),
        );
        error!("{message}");
        let _ = state.sender.send(Report::ShaderFailed(message));
    }
}

/// The shader features turned on in `defs`, comma-separated.
fn enabled_defs(defs: &[ShaderDefVal]) -> String {
    let on = defs.iter().filter_map(|d| match d {
        ShaderDefVal::Bool(name, true) => Some(name.to_string()),
        ShaderDefVal::Bool(_, false) => None,
        ShaderDefVal::Int(name, v) => Some(format!("{name} = {v}")),
        ShaderDefVal::UInt(name, v) => Some(format!("{name} = {v}")),
    });
    on.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::fitted_pool_mib;
    use tessera::core::format::codec::TargetFormat;
    use tessera::core::stream::pool_layout::slot_grid;

    /// Slots of a pool of `mib` MiB in `format` on the hardware trilinear path (each slot
    /// `pitch`² plus its 2× downsample), as the renderer lays it out.
    fn slots(mib: u32, format: TargetFormat, layers: u64, pitch: u32) -> u64 {
        let bytes = layers * (format.bytes_per_tile(pitch) + format.bytes_per_tile(pitch / 2)) as u64;
        let (x, y) = slot_grid(mib, bytes, 16384 / pitch);
        u64::from(x) * u64::from(y)
    }

    #[test]
    fn a_fitted_pool_holds_every_tile_of_the_atlas_in_any_format() {
        for layers in 1..=3u64 {
            for tiles in (1..400).chain([767, 1365, 5461]) {
                let mib = fitted_pool_mib(1 << 20, tiles, layers as usize, 136);
                let what = format!("{tiles} tiles in {layers} layers, {mib} MiB");
                let rgba8 = slots(mib, TargetFormat::Rgba8, layers, 136);
                assert!(rgba8 >= tiles, "{what}: {rgba8} RGBA8 slots");
                // A block pool's slots have a margin of the tile's border.
                assert!(slots(mib, TargetFormat::Bc7, layers, 144) >= tiles, "{what}: BC7");
                // Little waste: the grid's rounding and the last MiB.
                let per_mib = slots(1, TargetFormat::Rgba8, layers, 136).max(1);
                assert!(
                    rgba8 <= tiles + 4 * (tiles as f64).sqrt().ceil() as u64 + 4 + per_mib,
                    "{what}: {rgba8}"
                );
            }
        }
    }

    #[test]
    fn a_large_atlas_keeps_the_pool_it_was_given() {
        // The dungeon's 3072² stack: 24² + 12² + 6² + 3² + 2² + 1 tiles of 128² (136² stored).
        assert_eq!(fitted_pool_mib(64, 770, 3, 136), 64);
        // The castle's 1024² stack: 8² + 4² + 2² + 1 tiles.
        assert_eq!(fitted_pool_mib(64, 85, 3, 136), 29);
        assert_eq!(fitted_pool_mib(16, 85, 3, 136), 16, "never more than asked");
        assert_eq!(fitted_pool_mib(64, 0, 0, 0), 1, "at least 1 MiB");
    }
}
