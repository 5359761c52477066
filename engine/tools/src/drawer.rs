//! What a frame draws, behind one trait: the built-in scene and the lit material
//! scenes each draw through the virtual textures and, when enabled, through a fully
//! resident reference, so capture, bench and the viewer drive either the same way
//! ([`crate::drawer_for`] picks one for an atlas).

use tessera::core::Atlas;
use tessera::core::scene::camera::Camera;
use tessera::{GpuContext, RenderError, VirtualTextures};

/// A scene renderer: draws through the virtual textures and through its reference.
pub trait Drawer {
    /// Builds the fully resident reference from `atlas` (`max_anisotropy` where the
    /// scene samples with hardware anisotropy), its texels as pools of `pools` hold them
    /// ([`crate::reference::pool_of`]; empty: the decoded tiles, as for a lossless
    /// reference atlas).
    fn enable_reference(
        &mut self,
        ctx: &GpuContext,
        atlas: &Atlas,
        max_anisotropy: u16,
        pools: &[tessera::core::format::codec::TargetFormat],
    ) -> Result<(), RenderError>;

    /// GPU bytes of the reference textures, when enabled.
    fn reference_bytes(&self) -> Option<u64>;

    /// Sets the camera for the next draws.
    fn set_camera(&self, queue: &wgpu::Queue, camera: &Camera, aspect: f32);

    /// Draws through the virtual textures.
    fn draw_vt(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        vt: &VirtualTextures,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    );

    /// Sets the camera of the predicted view ([`Drawer::draw_predicted`]); the default
    /// does nothing (a drawer without a predicted pass).
    fn set_predicted_camera(&self, _queue: &wgpu::Queue, _camera: &Camera, _aspect: f32) {}

    /// Draws the predicted view's feedback only (depth and tile requests, no shading)
    /// into the virtual textures' prediction target, at `size`: half the size of the
    /// view it stands for (the shader halves the derivatives to ask for that view's
    /// mips). Nothing unless the virtual textures take predictions
    /// ([`tessera::VtConfig::prediction`]); the default draws nothing.
    fn draw_predicted(&self, _encoder: &mut wgpu::CommandEncoder, _vt: &VirtualTextures, _size: (u32, u32)) {}

    /// Adds a decal to a runtime-virtual-texture terrain and returns the rectangle of
    /// the virtual texture (mip-0 texels) to invalidate; `None` for a scene without
    /// decals (the default).
    fn add_terrain_decal(
        &mut self,
        _queue: &wgpu::Queue,
        _decal: tessera::core::scene::terrain::Decal,
    ) -> Result<Option<[u32; 4]>, RenderError> {
        Ok(None)
    }

    /// Draws through the reference textures (nothing unless enabled).
    fn draw_reference(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        color: &wgpu::TextureView,
        depth: &wgpu::TextureView,
        timestamps: Option<wgpu::RenderPassTimestampWrites<'_>>,
    );
}
