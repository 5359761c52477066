//! Tessera's streaming virtual textures in Bevy.
//!
//! Add [`TesseraPlugin`], then give meshes a [`TesseraMaterial`]: Bevy's
//! `StandardMaterial` (lit by Bevy) whose base colour comes from a baked atlas
//! (`tessera bake photo.jpg -o photo.tsa`), streamed through a fixed VRAM pool on
//! Bevy's own device:
//!
//! ```no_run
//! use bevy::prelude::*;
//! use bevy_tessera::{TesseraMaterial, TesseraPlugin, VirtualTexture};
//!
//! fn setup(
//!     mut commands: Commands,
//!     mut meshes: ResMut<Assets<Mesh>>,
//!     mut materials: ResMut<Assets<TesseraMaterial>>,
//! ) {
//!     commands.spawn((
//!         Mesh3d(meshes.add(Plane3d::default().mesh().size(8.0, 8.0))),
//!         MeshMaterial3d(materials.add(VirtualTexture::material("photo.tsa"))),
//!     ));
//! }
//! # let _ = App::new().add_plugins(TesseraPlugin::default()).add_systems(Startup, setup);
//! ```
//!
//! Atlases load through Bevy's `AssetServer` too: `asset_server.load("level.tsa")` gives
//! a `Handle<`[`TesseraAtlas`]`>` that [`VirtualTexture::material`] takes in place of a
//! path. Its loader ([`AtlasLoader`]) opens the atlas' header and index by range reads,
//! from the file under the asset folder or, with [`TesseraWebSources`] added before
//! `AssetPlugin`, from an `http(s)://` URL; tiles stream by range reads too, the file is
//! never read whole. A file that is not an atlas fails to load with a message naming it;
//! when Bevy reloads the asset (`file_watcher`, `AssetServer::reload`) the new atlas is
//! streamed and its materials bind it.
//!
//! Each frame, in Bevy's render world: the plugin begins every atlas' frame (feedback
//! collected without waiting, the streamer's decisions, uploads and page-table writes,
//! the feedback bitset cleared) before Bevy's passes, and records the feedback readback
//! after them. [`TesseraStats`] (a resource) and [`FullyResident`] (a message) report
//! back to the main world.
//!
//! Give the camera a `DepthPrepass` (`bevy::core_pipeline::prepass`): opaque streamed
//! materials then record their feedback in the depth prepass, and their main pass,
//! left without side effects, is depth tested before shading, so hidden fragments are
//! never lit ([`feedback_in_prepass`] says when). Without one, or with a normal, motion
//! vector or deferred prepass, the main pass records the feedback itself. The cameras a
//! [`level::StreamedLevel`] spawns get one from the plugin.
//!
//! Runtime virtual textures: a produced atlas (`tessera::core::Atlas::produced`, a
//! layout and layers without a file) streams through the same material, its tiles drawn
//! on Bevy's render device by a Tessera `TileProducer` when the view first asks for
//! them. [`TesseraAtlas::produced`] takes the atlas and a function that makes the
//! producer on Bevy's device; add it to `Assets<TesseraAtlas>` and give the handle to
//! [`VirtualTexture::from_handle`]. [`TesseraAtlas::invalidate`] has texels drawn again
//! after what the producer draws changed; [`Region::world_normal`] lights a mesh with
//! the world-space normals a producer wrote. The `terrain` example draws Tessera's
//! terrain (issue 43) this way.
//!
//! Your own materials can sample a virtual texture too: the WESL module `tessera::vt`
//! ([`VT_SHADER`]) declares `vt_sample(uv, frag_coord)` on bindings 100 to 106 of the
//! material bind group; bind them with [`VirtualTexture`] as a `MaterialExtension`.
//!
//! A glTF level loaded by Bevy's own loader (`WorldAssetRoot`, with its hierarchy,
//! lights, cameras and animations) streams its textures once [`level::StreamedLevel`]
//! sits beside it: the plugin bakes the level's atlas in the background and swaps the
//! level's `StandardMaterial`s for streamed ones.
//!
//! An atlas that cannot be opened (missing, corrupted, a newer format) is reported once
//! in Bevy's log, and its meshes keep their `StandardMaterial` colour. A local atlas
//! file that is replaced (a new bake renamed over it), or that appears or becomes valid
//! after failing, is opened again within 30 frames and its materials bind the new one.
//!
//! By concern: this file holds the plugin, its settings and statistics and the
//! material's data; `binding.rs` the material's bind group, pipelines and WESL module;
//! `render.rs` the render world; `asset.rs` atlases as Bevy assets; `produced.rs`
//! produced atlases and their producers; `level.rs` glTF levels; `scene.rs` scene helpers;
//! `diagnostics.rs` Bevy diagnostics.

use std::collections::HashMap;
use std::sync::Arc;

/// The guide's Rust blocks (docs/bevy.md), compiled as doctests so that the guide
/// cannot drift from the plugin's API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/bevy.md")]
struct Guide;

mod asset;
pub mod diagnostics;
pub mod level;
pub mod scene;

pub use asset::{AtlasLoadError, AtlasLoader, TesseraAtlas, TesseraWebSources};

/// The engine crate, for anything the plugin's API does not re-export.
pub use tessera;
/// What the plugin's settings and scene helpers take, so a Bevy app needs no direct
/// dependency on the engine crate: the configuration, codecs and progress for baking,
/// camera paths for the examples' flights.
pub use tessera::VtConfig;
pub use tessera::core::format::codec::Codec;
pub use tessera::core::progress::NoProgress;
pub use tessera::core::scene::camera::{CameraPath, Shot};

use bevy::asset::{AssetMut, uuid_handle};
use bevy::ecs::system::SystemParamItem;
use bevy::ecs::system::lifetimeless::SRes;
use bevy::mesh::MeshVertexBufferLayoutRef;
use bevy::pbr::{
    ExtendedMaterial, MATERIAL_BIND_GROUP_INDEX, MaterialExtension, MaterialExtensionKey,
    MaterialExtensionPipeline, MeshPipelineKey,
};
use bevy::prelude::*;
use bevy::render::render_resource::{
    AsBindGroup, AsBindGroupError, BindGroupBuilder, BindGroupLayout, BindGroupLayoutEntry, BindingType,
    BufferBindingType, BufferInitDescriptor, BufferUsages, FragmentState, RenderPipelineDescriptor,
    SamplerBindingType, ShaderStages, SpecializedMeshPipelineError, TextureViewDimension,
    UnpreparedBindingResource,
};
use bevy::render::renderer::{RenderAdapter, RenderDevice, RenderGraph, RenderGraphSystems, RenderQueue};
use bevy::render::{Extract, ExtractSchedule, Render, RenderApp, RenderSystems};
use bevy::shader::{Shader, ShaderDefVal, ShaderRef};
use crossbeam_channel::{Receiver, Sender};
use tessera::core::Atlas;
use tessera::core::format::atlas::Wrap;
use tessera::core::scene::scene_bake::PackedMaterial;
use tessera::{DetachedFrame, GpuContext, PageTableStorage, VirtualTextures, wgpu};

mod binding;
mod produced;
mod render;

pub use binding::feedback_in_prepass;
use binding::*;
use produced::Produced;
pub use render::VtRenderState;
use render::*;

/// The first binding of the virtual texture in the material bind group (Bevy leaves
/// 0 to 99 to the base material).
pub const FIRST_BINDING: u32 = 100;

/// The binding of [`TesseraMaterial`]'s [`Region`] block, after the virtual texture's.
pub const REGION_BINDING: u32 = FIRST_BINDING + 7;

/// The `tessera::vt` WESL module: `vt_sample`, `vt_sample_grad`, `vt_sample_layers`
/// (see Tessera's `vt.wgsl`) and `vt_enabled()` (false for an atlas that failed to
/// open), on bindings [`FIRST_BINDING`].. of the material bind group.
pub const VT_SHADER: Handle<Shader> = uuid_handle!("7f1c9a52-3b0e-4f4e-9d1a-6a54c2f0e911");

/// The fragment shader of [`TesseraMaterial`].
pub const MATERIAL_SHADER: Handle<Shader> = uuid_handle!("0c2b8f63-81d4-4a7e-b5e2-93a0d61c4f27");

/// The depth prepass fragment shader of [`TesseraMaterial`]: the material's feedback and
/// nothing else, for cameras with a `DepthPrepass` (see [`feedback_in_prepass`]).
pub const PREPASS_SHADER: Handle<Shader> = uuid_handle!("5d0e7b19-c2a4-4c61-8f3e-1b7a92d4e086");

/// The `bevy_tessera::region` WESL module of the material's fragment shader: the
/// [`Region`] block and the mesh's uv mapped into it (the WGSL prepass pastes the same
/// text in at the material's bind group).
const REGION_SHADER: Handle<Shader> = uuid_handle!("a3f4c6d2-6e81-4b0f-92c7-5d18e0b3f74a");

/// The plugin's shaders and the files they are named by (Bevy's WESL diagnostics, and the
/// plugin's own log line for a pipeline of [`MATERIAL_SHADER`] or [`PREPASS_SHADER`] that
/// does not compile: wgpu's message names no shader).
const SHADER_FILES: [(Handle<Shader>, &str); 4] = [
    (VT_SHADER, "embedded://tessera/vt.wesl"),
    (REGION_SHADER, "embedded://bevy_tessera/region.wesl"),
    (MATERIAL_SHADER, "embedded://bevy_tessera/material.wesl"),
    (PREPASS_SHADER, PREPASS_FILE),
];

/// The file [`PREPASS_SHADER`] is named by (plain WGSL; the other three are WESL).
const PREPASS_FILE: &str = "embedded://bevy_tessera/prepass.wgsl";

/// The WESL feature (shader def) under which the `tessera::vt` module's samples record no
/// feedback: set for a main pass whose depth prepass records it instead.
pub const FEEDBACK_IN_PREPASS_DEF: &str = "TESSERA_FEEDBACK_IN_PREPASS";

/// Bevy's `StandardMaterial` with its base colour streamed from a virtual texture.
pub type TesseraMaterial = ExtendedMaterial<StandardMaterial, VirtualTexture>;

/// The virtual texture of a material: a baked atlas (an asset loaded by Bevy's
/// `AssetServer`, or a path, or an `http(s)://` or `s3://` URL with the `remote`
/// feature, on by default), sampled over the mesh's UVs (0..1 across the whole texture,
/// or a [`Region`] of it).
#[derive(Asset, TypePath, Clone, Debug, PartialEq)]
pub struct VirtualTexture {
    /// The atlas' name: where it is (a path or URL the plugin opens), or, with
    /// [`VirtualTexture::asset`], the asset's path. [`TesseraStats`] names the atlas by it.
    pub atlas: String,
    /// The atlas as a Bevy asset ([`VirtualTexture::from_handle`]): `None` for an atlas
    /// the plugin opens at [`VirtualTexture::atlas`].
    #[dependency]
    pub asset: Option<Handle<TesseraAtlas>>,
    /// The part of the atlas the mesh's UVs span: the whole texture by default, or a
    /// material's rectangle of a scene atlas (`tessera bake --gltf`).
    pub region: Region,
    /// Record feedback in the main pass even where the camera has a depth prepass.
    /// The plugin keeps it equal to whether the base material transmits light
    /// (`specular_transmission` above 0): Bevy draws such materials in its transmissive
    /// phase and leaves them out of the prepass, which could not record for them.
    pub main_pass_feedback: bool,
}

/// What a [`VirtualTexture`] adds to its material's pipeline key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VirtualTextureKey {
    /// [`VirtualTexture::main_pass_feedback`].
    pub main_pass_feedback: bool,
}

/// The part of an atlas a material samples, and how.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Region {
    /// Origin and size in the atlas' uv (0..1).
    pub rect: [f32; 4],
    /// Its size in texels (UVs clamp to the texel centres inside it).
    pub texels: [f32; 2],
    /// Whether UVs repeat inside the rectangle along u and v (else they clamp).
    pub wrap: [bool; 2],
    /// The finest level of detail (0 = mip 0) that still has whole tiles of this
    /// rectangle; limits blur from neighbours in a packed atlas.
    pub max_lod: f32,
    /// Layer 1 of a stacked atlas holds this material's normal map (tangent space).
    pub normal_map: bool,
    /// The normal map's X and Y scale.
    pub normal_scale: f32,
    /// Layer 1 of a stacked atlas holds world-space normals (`n · 0.5 + 0.5`, what a
    /// runtime virtual texture's producer writes, such as a terrain's relief and decals)
    /// that replace the mesh's normal; for meshes drawn without rotation. Takes
    /// precedence over [`Region::normal_map`].
    pub world_normal: bool,
    /// Whether the material samples the atlas at all (an untextured material of a
    /// scene keeps its constant factors).
    pub sampled: bool,
}

impl Default for Region {
    /// The whole texture, clamped at its edges.
    fn default() -> Self {
        Self {
            rect: [0.0, 0.0, 1.0, 1.0],
            texels: [1e9; 2],
            wrap: [false; 2],
            max_lod: 32.0,
            normal_map: false,
            normal_scale: 1.0,
            world_normal: false,
            sampled: true,
        }
    }
}

impl Region {
    /// The uniform block of `material.wesl`'s `TesseraRegion` (14 floats, padded to 16).
    fn block(&self, layers: usize) -> [f32; 16] {
        let [x, y, w, h] = self.rect;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        [
            x,
            y,
            w,
            h,
            self.texels[0],
            self.texels[1],
            flag(self.wrap[0]),
            flag(self.wrap[1]),
            self.max_lod,
            layers as f32,
            flag(self.normal_map),
            self.normal_scale,
            flag(self.sampled),
            flag(self.world_normal),
            0.0,
            0.0,
        ]
    }

    /// The region of a material of a scene atlas, from the manifest `tessera bake
    /// --gltf` writes beside it (`size`: the atlas' mip-0 width and height).
    pub fn from_packed(m: &PackedMaterial, size: (u32, u32)) -> Self {
        let (w, h) = (size.0.max(1) as f32, size.1.max(1) as f32);
        let repeat = |wrap: Wrap| wrap == Wrap::Repeat;
        match m.rect {
            Some([x, y, rw, rh]) => Self {
                rect: [x as f32 / w, y as f32 / h, rw as f32 / w, rh as f32 / h],
                texels: [rw as f32, rh as f32],
                wrap: [repeat(m.wrap[0]), repeat(m.wrap[1])],
                max_lod: m.max_mip as f32,
                normal_map: m.has_normal_map,
                normal_scale: m.normal_scale,
                world_normal: false,
                sampled: true,
            },
            None => Self { sampled: false, ..Self::default() },
        }
    }
}

/// The [`TesseraMaterial`] of material `m` of a scene atlas at `atlas` (`size`: its
/// mip-0 width and height): the glTF factors on a `StandardMaterial` (alpha mode and
/// double-sidedness included), its textures from the atlas.
pub fn scene_material(atlas: &str, m: &PackedMaterial, size: (u32, u32)) -> TesseraMaterial {
    let [r, g, b, a] = m.base_color_factor;
    ExtendedMaterial {
        base: StandardMaterial {
            base_color: Color::linear_rgba(r, g, b, a),
            metallic: m.metallic_factor,
            perceptual_roughness: m.roughness_factor,
            alpha_mode: alpha_mode(m),
            ..default()
        },
        extension: VirtualTexture {
            atlas: atlas.to_owned(),
            asset: None,
            region: Region::from_packed(m, size),
            main_pass_feedback: false,
        },
    }
}

/// Bevy's alpha mode for a baked glTF material: `BLEND` blends, `MASK` tests against
/// its cutoff, anything else is opaque.
pub fn alpha_mode(m: &PackedMaterial) -> AlphaMode {
    match (m.blend, m.alpha_cutoff) {
        (true, _) => AlphaMode::Blend,
        (false, Some(cutoff)) => AlphaMode::Mask(cutoff),
        (false, None) => AlphaMode::Opaque,
    }
}

impl VirtualTexture {
    /// The virtual texture of the atlas at `atlas` (or of an atlas asset's handle), over
    /// the whole texture.
    pub fn new(atlas: impl Into<AtlasRef>) -> Self {
        let (atlas, asset) = match atlas.into() {
            AtlasRef::Location(location) => (location, None),
            AtlasRef::Asset(handle) => (atlas_name(&handle), Some(handle)),
        };
        Self { atlas, asset, region: Region::default(), main_pass_feedback: false }
    }

    /// The virtual texture of an atlas loaded by Bevy's `AssetServer`
    /// (`asset_server.load("level.tsa")`), over the whole texture. The plugin streams it
    /// once it has loaded, and opens it again when Bevy reloads it (its `file_watcher`
    /// feature, `AssetServer::reload`); one that fails to load leaves the material's
    /// colour, like a path that does not open.
    pub fn from_handle(atlas: Handle<TesseraAtlas>) -> Self {
        Self::new(atlas)
    }

    /// A white, fully rough [`TesseraMaterial`] showing the atlas at `atlas`, or the atlas
    /// asset of a handle (`VirtualTexture::material(asset_server.load("level.tsa"))`).
    pub fn material(atlas: impl Into<AtlasRef>) -> TesseraMaterial {
        ExtendedMaterial {
            base: StandardMaterial { perceptual_roughness: 1.0, ..default() },
            extension: Self::new(atlas),
        }
    }
}

/// What a [`VirtualTexture`] names: a location the plugin opens, or an atlas asset.
/// Strings, paths' strings and handles convert into it.
#[derive(Clone, Debug, PartialEq)]
pub enum AtlasRef {
    /// A path, or an `http(s)://` or `s3://` URL (the `remote` feature).
    Location(String),
    /// An atlas loaded by Bevy's `AssetServer`.
    Asset(Handle<TesseraAtlas>),
}

impl From<String> for AtlasRef {
    fn from(location: String) -> Self {
        Self::Location(location)
    }
}

impl From<&str> for AtlasRef {
    fn from(location: &str) -> Self {
        Self::Location(location.to_owned())
    }
}

impl From<&String> for AtlasRef {
    fn from(location: &String) -> Self {
        Self::Location(location.clone())
    }
}

impl From<std::borrow::Cow<'_, str>> for AtlasRef {
    fn from(location: std::borrow::Cow<'_, str>) -> Self {
        Self::Location(location.into_owned())
    }
}

impl From<Handle<TesseraAtlas>> for AtlasRef {
    fn from(handle: Handle<TesseraAtlas>) -> Self {
        Self::Asset(handle)
    }
}

/// The name of an atlas asset in [`VirtualTexture::atlas`] and [`TesseraStats`]: its
/// asset path (`level.tsa`, `http://host/level.tsa`), or its id for an atlas added to
/// `Assets` by hand.
fn atlas_name(handle: &Handle<TesseraAtlas>) -> String {
    match handle.path() {
        Some(path) => path.to_string(),
        None => format!("asset {}", handle.id()),
    }
}

/// Adds [`TesseraMaterial`], the `tessera::vt` shader module, streaming in the render
/// world, [`TesseraStats`], [`FullyResident`] and the [`diagnostics`] in Bevy's
/// `DiagnosticsStore`.
#[derive(Clone, Debug, Default)]
pub struct TesseraPlugin {
    /// The configuration of every atlas' virtual textures (pool size, host cache,
    /// loader threads, upload budget...). The page table is always a storage buffer.
    /// `pool_mib` is each atlas' most: an atlas whose whole mip chain fits in fewer
    /// slots (a small level) gets a pool of that size instead.
    pub config: VtConfig,
    /// For unattended runs (tests, CI, benchmarks): exit after a number of frames,
    /// saving a screenshot of the primary window first. `None` (the default): run on.
    pub unattended: Option<Unattended>,
}

/// An unattended run: [`TesseraPlugin::unattended`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unattended {
    /// The app exits (`AppExit::Success`) after this many frames.
    pub frames: u32,
    /// Saved from the primary window 5 frames before the end (a screenshot takes a few
    /// frames to reach the disk), where there is a window.
    pub screenshot: Option<std::path::PathBuf>,
}

impl Unattended {
    /// From the environment: `BEVY_TESSERA_FRAMES=N` (exit after N frames) and
    /// `BEVY_TESSERA_SCREENSHOT=file.png`; `None` without a valid frame count.
    pub fn from_env() -> Option<Self> {
        let frames = std::env::var("BEVY_TESSERA_FRAMES").ok()?.parse().ok()?;
        let screenshot = std::env::var_os("BEVY_TESSERA_SCREENSHOT").map(Into::into);
        Some(Self { frames, screenshot })
    }
}

/// Counts the frames of an [`Unattended`] run and ends it.
fn unattended(
    mut commands: Commands,
    run: Res<UnattendedRun>,
    mut frames: Local<u32>,
    windows: Query<(), With<bevy::window::PrimaryWindow>>,
    mut exit: MessageWriter<AppExit>,
) {
    *frames += 1;
    if let Some(path) = &run.0.screenshot
        && *frames + 5 == run.0.frames
    {
        if windows.is_empty() {
            warn!("unattended run: no primary window, so no screenshot {}", path.display());
        } else {
            commands
                .spawn(bevy::render::view::screenshot::Screenshot::primary_window())
                .observe(bevy::render::view::screenshot::save_to_disk(path.clone()));
        }
    }
    if *frames >= run.0.frames {
        exit.write(AppExit::Success);
    }
}

#[derive(Resource)]
struct UnattendedRun(Unattended);

impl Plugin for TesseraPlugin {
    fn build(&self, app: &mut App) {
        let mut shaders = app.world_mut().resource_mut::<Assets<Shader>>();
        // The first three of SHADER_FILES are WESL; the prepass, last, is plain WGSL.
        let wesl: [String; 3] =
            [vt_module(), include_str!("region.wesl").into(), include_str!("material.wesl").into()];
        for ((handle, file), source) in SHADER_FILES.into_iter().zip(wesl) {
            let _ = shaders.insert(handle.id(), Shader::from_wesl(source, file));
        }
        // Forcing early depth; `finish` drops that where the device cannot.
        let _ = shaders.insert(PREPASS_SHADER.id(), prepass_shader(true));
        asset::register(app);
        app.add_plugins(MaterialPlugin::<TesseraMaterial>::default());
        let (sender, receiver) = crossbeam_channel::unbounded();
        app.init_resource::<TesseraStats>()
            .add_message::<FullyResident>()
            .insert_resource(StatsInbox(receiver))
            .add_systems(PreUpdate, receive_stats)
            .add_systems(PostUpdate, sync_main_pass_feedback);
        diagnostics::register(app);
        level::register(app);
        if let Some(run) = &self.unattended {
            app.insert_resource(UnattendedRun(run.clone())).add_systems(Last, unattended);
        }
        let mut config = self.config.clone();
        config.page_table = PageTableStorage::Complete;
        let Some(render_app) = app.get_sub_app_mut(RenderApp) else {
            warn!("TesseraPlugin: no render app (RenderPlugin missing): virtual textures are off");
            return;
        };
        render_app
            .insert_resource(VtRenderState {
                config,
                ctx: None,
                atlases: HashMap::new(),
                wanted: Vec::new(),
                fallback: None,
                sender,
                frames: 0,
                shader_errors: Default::default(),
            })
            .add_systems(ExtractSchedule, extract_atlases)
            .add_systems(
                Render,
                open_atlases.after(RenderSystems::ExtractCommands).before(RenderSystems::PrepareAssets),
            )
            .add_systems(Render, report_shader_errors.after(RenderSystems::Render))
            .add_systems(RenderGraph, begin_frames.in_set(RenderGraphSystems::Begin))
            .add_systems(RenderGraph, end_frames.in_set(RenderGraphSystems::Finish));
    }

    /// The render device is known now: where it cannot force early depth tests, the
    /// prepass shader is replaced by the same one without `@early_depth_test(force)`
    /// (which would not compile there).
    fn finish(&self, app: &mut App) {
        let Some(device) = app.get_sub_app(RenderApp).and_then(|r| r.world().get_resource::<RenderDevice>())
        else {
            return;
        };
        if device.features().contains(wgpu::Features::SHADER_EARLY_DEPTH_TEST) {
            return;
        }
        info!(
            "TesseraPlugin: this device cannot force early depth tests (no SHADER_EARLY_DEPTH_TEST): \
             the depth prepass records feedback for hidden fragments too"
        );
        let mut shaders = app.world_mut().resource_mut::<Assets<Shader>>();
        let _ = shaders.insert(PREPASS_SHADER.id(), prepass_shader(false));
    }
}

/// Streaming statistics of every atlas, updated each frame in the main world.
#[derive(Resource, Clone, Debug, Default)]
pub struct TesseraStats {
    /// Per atlas (by location): the last frame's figures.
    pub atlases: HashMap<String, AtlasStats>,
    /// Atlases that could not be opened, with the reason (also in Bevy's log); their
    /// meshes show the material's own colour.
    pub failed: HashMap<String, String>,
    /// Per atlas: times its file was replaced and opened again.
    pub reopened: HashMap<String, u64>,
    /// Pipelines of the plugin's shaders that did not compile, one line each naming the
    /// shader file, its features and wgpu's or WESL's message (also in Bevy's log). Their
    /// meshes are not drawn.
    pub shader_errors: Vec<String>,
}

/// What the render world tells the main world.
enum Report {
    Stats(String, Box<AtlasStats>),
    Failed(String, String),
    /// The atlas file was replaced and opened again: its materials bind anew.
    Reopened(String),
    /// A pipeline of the plugin's shaders did not compile (the message).
    ShaderFailed(String),
}

/// One atlas' streaming figures after a frame.
#[derive(Clone, Debug, Default)]
pub struct AtlasStats {
    /// The render-world frame number of these figures (Tessera's own count).
    pub frame: u64,
    /// The fraction of the tiles the last feedback asked for that are resident in
    /// VRAM; `None` before the first feedback.
    pub resident_fraction: Option<f64>,
    /// What streaming did in this frame (uploads, misses, VRAM and host tiers...).
    pub stream: tessera::StreamFrame,
    /// Tiles in the VRAM pool: used and total slots.
    pub vram_slots: (u64, u64),
    /// Tiles in the host cache and its bytes.
    pub host_tiles: (u64, u64),
    /// Bytes of GPU memory the atlas' virtual texture takes (pool, page table, feedback).
    pub gpu_bytes: u64,
}

/// Sent each time an atlas becomes fully resident (everything the view wants is in
/// VRAM at the wanted detail) after something it wanted was missing.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
pub struct FullyResident {
    /// The atlas' location.
    pub atlas: String,
    /// The render-world frame at which it happened.
    pub frame: u64,
}

#[derive(Resource)]
struct StatsInbox(Receiver<Report>);

fn receive_stats(
    inbox: Res<StatsInbox>,
    mut stats: ResMut<TesseraStats>,
    mut resident: MessageWriter<FullyResident>,
    mut materials: ResMut<Assets<TesseraMaterial>>,
) {
    for report in inbox.0.try_iter() {
        let (atlas, new) = match report {
            Report::Stats(atlas, new) => (atlas, *new),
            Report::Failed(atlas, why) => {
                stats.failed.insert(atlas, why);
                continue;
            }
            Report::ShaderFailed(message) => {
                stats.shader_errors.push(message);
                continue;
            }
            Report::Reopened(atlas) => {
                // Its materials are prepared again, binding the new pool and tables.
                let ids: Vec<_> =
                    materials.iter().filter(|(_, m)| m.extension.atlas == atlas).map(|(id, _)| id).collect();
                for id in ids {
                    // A mutable borrow marks it modified.
                    let _ = materials.get_mut(id).map(AssetMut::into_inner);
                }
                stats.failed.remove(&atlas);
                stats.atlases.remove(&atlas);
                *stats.reopened.entry(atlas).or_default() += 1;
                continue;
            }
        };
        if new.stream.became_fully_resident {
            resident.write(FullyResident { atlas: atlas.clone(), frame: new.frame });
        }
        stats.atlases.insert(atlas, new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn camera_prepass(extra: MeshPipelineKey) -> MeshPipelineKey {
        MeshPipelineKey::DEPTH_PREPASS | extra
    }

    fn pipeline(prepass: bool, fragment: bool) -> RenderPipelineDescriptor {
        let mut d = RenderPipelineDescriptor::default();
        if prepass {
            d.vertex.shader_defs.push("PREPASS_PIPELINE".into());
        }
        d.vertex.shader_defs.push("VERTEX_UVS_A".into());
        if fragment {
            d.fragment = Some(FragmentState::default());
        }
        d
    }

    fn quiet(d: &RenderPipelineDescriptor) -> bool {
        d.fragment.as_ref().is_some_and(|f| f.shader_defs.contains(&FEEDBACK_IN_PREPASS_DEF.into()))
    }

    #[test]
    fn feedback_moves_to_a_depth_only_prepass_of_opaque_materials() {
        assert!(feedback_in_prepass(camera_prepass(MeshPipelineKey::NONE)));
        assert!(feedback_in_prepass(camera_prepass(MeshPipelineKey::VIEW_PROJECTION_PERSPECTIVE)));
        assert!(!feedback_in_prepass(MeshPipelineKey::NONE), "no prepass: the main pass records");
        for other in [
            MeshPipelineKey::NORMAL_PREPASS,
            MeshPipelineKey::MOTION_VECTOR_PREPASS,
            MeshPipelineKey::DEFERRED_PREPASS,
            MeshPipelineKey::MAY_DISCARD,
            MeshPipelineKey::BLEND_ALPHA,
            MeshPipelineKey::BLEND_PREMULTIPLIED_ALPHA,
        ] {
            assert!(!feedback_in_prepass(camera_prepass(other)), "{other:?}");
        }
    }

    #[test]
    fn the_main_pass_goes_quiet_and_the_camera_prepass_gets_the_feedback_shader() {
        let key = camera_prepass(MeshPipelineKey::VIEW_PROJECTION_PERSPECTIVE);
        let mut main = pipeline(false, true);
        move_feedback_to_prepass(&mut main, key);
        assert!(quiet(&main));

        let mut prepass = pipeline(true, false);
        move_feedback_to_prepass(&mut prepass, camera_prepass(MeshPipelineKey::NONE));
        let fragment = prepass.fragment.expect("a fragment stage for the feedback");
        assert_eq!(fragment.shader, PREPASS_SHADER);
        assert!(fragment.targets.is_empty());
        assert!(fragment.shader_defs.contains(&"VERTEX_UVS_A".into()));
        assert!(!fragment.shader_defs.contains(&FEEDBACK_IN_PREPASS_DEF.into()));

        // A mesh without uvs: nothing to record, no fragment stage.
        let mut bare = pipeline(true, false);
        bare.vertex.shader_defs.retain(|d| *d != "VERTEX_UVS_A".into());
        move_feedback_to_prepass(&mut bare, camera_prepass(MeshPipelineKey::NONE));
        assert!(bare.fragment.is_none());

        // A shadow view's prepass carries its projection: left as Bevy built it.
        let mut shadow = pipeline(true, false);
        move_feedback_to_prepass(&mut shadow, key);
        assert!(shadow.fragment.is_none());

        // Without a depth prepass, or for a masked material, nothing moves.
        let mut main = pipeline(false, true);
        move_feedback_to_prepass(&mut main, MeshPipelineKey::VIEW_PROJECTION_PERSPECTIVE);
        assert!(!quiet(&main));
        let mut masked = pipeline(true, true);
        move_feedback_to_prepass(&mut masked, camera_prepass(MeshPipelineKey::MAY_DISCARD));
        assert_ne!(masked.fragment.map(|f| f.shader), Some(PREPASS_SHADER));
    }

    /// A transmissive base (drawn outside the depth prepass) keeps its feedback in the
    /// main pass: the plugin sets the flag that its pipeline key carries.
    #[test]
    fn transmissive_materials_keep_their_feedback_in_the_main_pass() {
        use bevy::ecs::system::RunSystemOnce;
        let mut world = World::new();
        world.init_resource::<Assets<TesseraMaterial>>();
        let mut glass = VirtualTexture::material("a.tsa");
        glass.base.specular_transmission = 0.6;
        let (glass, plain) = {
            let mut assets = world.resource_mut::<Assets<TesseraMaterial>>();
            (assets.add(glass), assets.add(VirtualTexture::material("a.tsa")))
        };
        world.run_system_once(sync_main_pass_feedback).unwrap();
        let assets = world.resource::<Assets<TesseraMaterial>>();
        let key = |h: &Handle<TesseraMaterial>| assets.get(h).unwrap().extension.bind_group_data();
        assert!(key(&glass).main_pass_feedback);
        assert!(!key(&plain).main_pass_feedback);
    }

    /// The prepass is plain WGSL that naga accepts as it stands, and its entry point forces
    /// the depth test before the shader (so that hidden fragments record no feedback), or,
    /// for a device that cannot, leaves the attribute out.
    #[test]
    fn the_prepass_is_valid_wgsl_that_forces_early_depth() {
        use tessera::wgpu::naga;
        for (early, want) in [(true, Some(naga::EarlyDepthTest::Force)), (false, None)] {
            let src = prepass_wgsl(early);
            let module =
                naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
            let entry =
                module.entry_points.iter().find(|e| e.name == "fragment").expect("an entry point `fragment`");
            assert_eq!(entry.stage, naga::ShaderStage::Fragment);
            assert_eq!(entry.early_depth_test, want, "early depth {early}");
            let group = format!("@group({MATERIAL_BIND_GROUP_INDEX}) @binding(");
            assert_eq!(src.matches(&group).count(), 8, "seven virtual-texture bindings and the region");
            assert!(!src.contains("constants::"), "a WESL path left in plain WGSL");
        }
    }

    #[test]
    fn the_vt_module_has_a_quiet_mark_under_the_feature_and_the_recording_one_otherwise() {
        let m = vt_module();
        let quiet = format!(
            "@if({FEEDBACK_IN_PREPASS_DEF})\nfn vt_mark(uv: vec2<f32>, m: u32, frag: vec4<f32>) {{}}\n"
        );
        let loud = format!(
            "@if(!{FEEDBACK_IN_PREPASS_DEF})\nfn vt_mark(uv: vec2<f32>, m: u32, frag: vec4<f32>) {{\n"
        );
        assert_eq!(m.matches(&quiet).count(), 1, "{m}");
        assert_eq!(m.matches(&loud).count(), 1);
        assert_eq!(m.matches("fn vt_mark(").count(), 2);
        assert!(m.contains("fn vt_record("));
        assert!(m.contains("atomicOr(&vt_feedback"));
    }
}
