//! Produced atlases in Bevy (runtime virtual textures): an atlas without a file whose
//! tiles a Tessera `TileProducer` draws on Bevy's render device when the view asks for
//! them, and the rectangles an app marks to be drawn again.

use super::*;

use std::sync::Mutex;

use tessera::produce::TileProducer;

/// Makes a produced atlas' producer on the render world's GPU context (Bevy's device).
type MakeProducer = dyn Fn(&GpuContext) -> Result<Box<dyn TileProducer>, String> + Send + Sync;

/// A (layer, mip-0 texel rectangle `[x, y, width, height]`) to draw again.
type Invalidation = (u16, [u32; 4]);

/// What a produced [`TesseraAtlas`] holds besides its atlas: how to make its producer,
/// and the rectangles invalidated that the render world has not applied yet.
#[derive(Clone)]
pub(super) struct Produced {
    make: Arc<MakeProducer>,
    invalidated: Arc<Mutex<Vec<Invalidation>>>,
}

impl Produced {
    /// The producer, made on `ctx`.
    pub(super) fn producer(&self, ctx: &GpuContext) -> Result<Box<dyn TileProducer>, String> {
        (self.make)(ctx)
    }

    /// The rectangles invalidated since the last call.
    pub(super) fn take_invalidated(&self) -> Vec<Invalidation> {
        // A panic elsewhere while the lock was held leaves a plain list: still usable.
        std::mem::take(&mut *self.invalidated.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl TesseraAtlas {
    /// A produced atlas (`tessera::core::Atlas::produced`: a layout and layers, no file)
    /// whose tiles are drawn on Bevy's render device by the producer `make` returns.
    /// The plugin calls `make` with Bevy's device and queue as a Tessera `GpuContext`
    /// when a material first shows the atlas (and again if the atlas is reopened); an
    /// error is reported like an atlas that does not open (Bevy's log,
    /// [`TesseraStats::failed`]) and its meshes keep their material colour.
    ///
    /// Add it to `Assets<TesseraAtlas>` and give the handle to
    /// [`VirtualTexture::from_handle`]; [`TesseraStats`] names it `asset <id>`.
    pub fn produced<P, E>(
        atlas: Atlas,
        make: impl Fn(&GpuContext) -> Result<P, E> + Send + Sync + 'static,
    ) -> Self
    where
        P: TileProducer + 'static,
        E: std::fmt::Display,
    {
        let location = format!("produced {}", atlas.path().display());
        let make: Arc<MakeProducer> = Arc::new(move |ctx: &GpuContext| {
            make(ctx).map(|p| Box::new(p) as Box<dyn TileProducer>).map_err(|e| e.to_string())
        });
        let produced = Produced { make, invalidated: Arc::default() };
        Self::from_parts(location, Arc::new(atlas), Some(produced))
    }

    /// Whether the atlas is produced ([`TesseraAtlas::produced`]).
    pub fn is_produced(&self) -> bool {
        self.producer().is_some()
    }

    /// Marks the texels `rect` (`[x, y, width, height]` in mip-0 texels) of layer
    /// `layer` of a produced atlas to be drawn again: the resident tiles that cover them,
    /// at every mip, are produced anew from the next frame on (after what the producer
    /// draws has changed, such as a decal added). Does nothing for an atlas read from a
    /// file.
    pub fn invalidate(&self, layer: u16, rect: [u32; 4]) {
        if let Some(p) = self.producer() {
            p.invalidated.lock().unwrap_or_else(|e| e.into_inner()).push((layer, rect));
        }
    }
}
