//! Atlases as Bevy assets: `asset_server.load("level.tsa")` opens the atlas by range
//! reads (the file under the asset folder, or an `http(s)://` URL), and a reload of the
//! asset (Bevy's file watcher, `AssetServer::reload`) opens it again.

use super::*;

use std::path::{Path, PathBuf};

use bevy::asset::io::{
    AssetReader, AssetReaderError, AssetSourceBuilder, AssetSourceBuilders, ErasedAssetReader, PathStream,
    Reader, VecReader,
};
use bevy::asset::{AssetLoader, AssetPath, LoadContext, io::AssetSourceId};
use tessera::core::format::atlas::AtlasError;

/// An atlas loaded through Bevy's `AssetServer` (`asset_server.load("level.tsa")`): its
/// header and index, read when it loads; tiles are read by ranges while streaming, never
/// the whole file. Give its handle to [`VirtualTexture::from_handle`].
///
/// Each load (a reload included) opens the atlas anew, so the render world tells a
/// reloaded asset from the one it streams and opens the new one.
#[derive(Asset, TypePath, Clone)]
pub struct TesseraAtlas {
    location: String,
    atlas: Arc<Atlas>,
    /// The producer of a produced atlas ([`TesseraAtlas::produced`]).
    produced: Option<Produced>,
}

impl std::fmt::Debug for TesseraAtlas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TesseraAtlas").field("location", &self.location).finish_non_exhaustive()
    }
}

impl TesseraAtlas {
    /// Opens the atlas at `location` (a path, or an `http(s)://` or `s3://` URL with the
    /// `remote` feature): what the loader does, for an atlas added to `Assets` by hand.
    pub fn open(location: impl Into<String>) -> Result<Self, AtlasError> {
        let location = location.into();
        let atlas = Atlas::open(&location)?;
        Ok(Self::from_parts(location, Arc::new(atlas), None))
    }

    pub(super) fn from_parts(location: String, atlas: Arc<Atlas>, produced: Option<Produced>) -> Self {
        Self { location, atlas, produced }
    }

    /// The producer side of a produced atlas.
    pub(super) fn producer(&self) -> Option<&Produced> {
        self.produced.as_ref()
    }

    /// Where the atlas was opened: the file under the asset folder, or the URL
    /// (`produced <name>` for a produced atlas).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The opened atlas.
    pub fn atlas(&self) -> &Arc<Atlas> {
        &self.atlas
    }
}

/// Why a `.tsa` asset did not load (Bevy's log names the asset path beside it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AtlasLoadError {
    /// The asset came from a source the atlas cannot be read from by ranges.
    #[error(
        "{path}: asset source `{source_name}` is neither the file source nor `http`/`https`; \
         an atlas is read by ranges, so it needs a file or a URL"
    )]
    UnsupportedSource {
        /// The asset path.
        path: String,
        /// The source's name.
        source_name: String,
    },
    /// The file or URL is not an atlas Tessera can open (missing, not an atlas,
    /// corrupted, a newer format...); the message names it.
    #[error(transparent)]
    Atlas(#[from] AtlasError),
}

/// Loads `.tsa` assets as [`TesseraAtlas`]es. It ignores the bytes Bevy's reader offers
/// and opens the atlas itself, by range reads: a path under `root` for Bevy's file
/// source, a URL for the `http` and `https` sources (see [`TesseraWebSources`]).
#[derive(TypePath, Clone, Debug)]
pub struct AtlasLoader {
    /// The folder of Bevy's default (file) asset source: `AssetPlugin::file_path` under
    /// Bevy's base path.
    pub root: PathBuf,
}

impl AtlasLoader {
    /// The loader for an app whose `AssetPlugin::file_path` is `file_path`.
    pub fn new(file_path: &str) -> Self {
        Self { root: asset_root(file_path) }
    }

    /// Where the atlas of asset `path` is: a file under [`AtlasLoader::root`], or a URL.
    pub fn location(&self, path: &AssetPath<'_>) -> Result<String, AtlasLoadError> {
        match path.source() {
            AssetSourceId::Default => Ok(self.root.join(path.path()).to_string_lossy().into_owned()),
            AssetSourceId::Name(name) if WEB_SCHEMES.contains(&&**name) => {
                Ok(format!("{name}://{}", path.path().to_string_lossy()))
            }
            AssetSourceId::Name(name) => Err(AtlasLoadError::UnsupportedSource {
                path: path.to_string(),
                source_name: name.to_string(),
            }),
        }
    }
}

/// The folder of Bevy's file asset source for `file_path` (`AssetPlugin::file_path`).
#[cfg(not(target_arch = "wasm32"))]
fn asset_root(file_path: &str) -> PathBuf {
    bevy::asset::io::file::FileAssetReader::get_base_path().join(file_path)
}

/// In a browser Bevy's default source fetches relative to the page.
#[cfg(target_arch = "wasm32")]
fn asset_root(file_path: &str) -> PathBuf {
    PathBuf::from(file_path)
}

/// The asset sources whose paths are URLs.
const WEB_SCHEMES: [&str; 2] = ["http", "https"];

impl AssetLoader for AtlasLoader {
    type Asset = TesseraAtlas;
    type Settings = ();
    type Error = AtlasLoadError;

    async fn load(
        &self,
        _reader: &mut dyn Reader,
        _settings: &(),
        load_context: &mut LoadContext<'_>,
    ) -> Result<TesseraAtlas, AtlasLoadError> {
        let location = self.location(load_context.path())?;
        // The header, layer table and index root: a few small reads.
        Ok(TesseraAtlas::open(location)?)
    }

    fn extensions(&self) -> &[&str] {
        &["tsa"]
    }
}

/// Adds `http` and `https` asset sources under which atlases (`.tsa`) are read by range
/// requests: Bevy's own web source (`WebAssetPlugin`) downloads a whole file before any
/// loader sees it. Other paths go to the source it wraps (Bevy's, with Bevy's `http` or
/// `https` feature), else fail as not found.
///
/// Asset sources are fixed when `AssetPlugin` builds, so add it just before:
/// `DefaultPlugins.build().add_before::<AssetPlugin>(TesseraWebSources)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TesseraWebSources;

impl Plugin for TesseraWebSources {
    fn build(&self, app: &mut App) {
        for scheme in WEB_SCHEMES {
            let mut builders = app.world_mut().get_resource_or_init::<AssetSourceBuilders>();
            match builders.get_mut(scheme) {
                Some(builder) => {
                    let mut inner =
                        std::mem::replace(&mut builder.reader, Box::new(|| Box::new(RangedAtlases(None))));
                    builder.reader = Box::new(move || Box::new(RangedAtlases(Some(inner()))));
                }
                None => builders.insert(scheme, AssetSourceBuilder::new(|| Box::new(RangedAtlases(None)))),
            }
        }
        if app.world().get_resource::<AssetServer>().is_some() {
            error!("TesseraWebSources must be added before AssetPlugin (part of DefaultPlugins)");
        }
    }
}

/// An asset reader that leaves atlases to the loader's range reads and passes anything
/// else to the reader it wraps.
struct RangedAtlases(Option<Box<dyn ErasedAssetReader>>);

fn is_atlas(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "tsa")
}

impl AssetReader for RangedAtlases {
    async fn read<'a>(&'a self, path: &'a Path) -> Result<Box<dyn Reader + 'a>, AssetReaderError> {
        match &self.0 {
            // Nothing is fetched: `AtlasLoader` opens the URL by ranges.
            _ if is_atlas(path) => Ok(Box::new(VecReader::new(Vec::new()))),
            Some(inner) => inner.read(path).await,
            None => Err(AssetReaderError::NotFound(path.to_owned())),
        }
    }

    async fn read_meta<'a>(&'a self, path: &'a Path) -> Result<Box<dyn Reader + 'a>, AssetReaderError> {
        match &self.0 {
            // No `.meta` request: atlases load with the default settings.
            _ if is_atlas(path) => Err(AssetReaderError::NotFound(path.to_owned())),
            Some(inner) => inner.read_meta(path).await,
            None => Err(AssetReaderError::NotFound(path.to_owned())),
        }
    }

    async fn read_directory<'a>(&'a self, path: &'a Path) -> Result<Box<PathStream>, AssetReaderError> {
        match &self.0 {
            Some(inner) => inner.read_directory(path).await,
            None => Err(AssetReaderError::NotFound(path.to_owned())),
        }
    }

    async fn is_directory<'a>(&'a self, path: &'a Path) -> Result<bool, AssetReaderError> {
        match &self.0 {
            Some(inner) => inner.is_directory(path).await,
            None => Ok(false),
        }
    }
}

/// Registers [`TesseraAtlas`] and its loader, whose file root follows the app's
/// `AssetPlugin::file_path`.
pub(super) fn register(app: &mut App) {
    let file_path = app.get_added_plugins::<AssetPlugin>().first().map(|p| p.file_path.clone());
    let loader = AtlasLoader::new(file_path.as_deref().unwrap_or("assets"));
    app.init_asset::<TesseraAtlas>().register_asset_loader(loader);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_paths_become_files_under_the_root_or_urls() {
        let loader = AtlasLoader { root: PathBuf::from("/game/assets") };
        let at = |p: &'static str| loader.location(&AssetPath::parse(p));
        assert_eq!(at("levels/a.tsa").unwrap(), "/game/assets/levels/a.tsa");
        assert_eq!(at("http://host:8080/a.tsa").unwrap(), "http://host:8080/a.tsa");
        assert_eq!(at("https://cdn.example/x/b.tsa").unwrap(), "https://cdn.example/x/b.tsa");
        let err = at("embedded://a.tsa").unwrap_err().to_string();
        assert!(err.contains("embedded://a.tsa") && err.contains("`embedded`"), "{err}");
    }

    #[test]
    fn web_sources_fetch_nothing_for_atlases_and_pass_the_rest_on() {
        use bevy::asset::io::memory::{Dir, MemoryAssetReader};
        let root = Dir::default();
        root.insert_asset_text(Path::new("a.png"), "png bytes");
        root.insert_asset_text(Path::new("b.tsa"), "atlas bytes");
        let wrapped = RangedAtlases(Some(Box::new(MemoryAssetReader { root })));
        bevy::tasks::block_on(async {
            let mut bytes = Vec::new();
            AssetReader::read(&wrapped, Path::new("b.tsa"))
                .await
                .unwrap()
                .read_to_end(&mut bytes)
                .await
                .unwrap();
            assert!(bytes.is_empty(), "the atlas was read through Bevy's source");
            assert!(matches!(
                AssetReader::read_meta(&wrapped, Path::new("b.tsa")).await,
                Err(AssetReaderError::NotFound(_))
            ));
            AssetReader::read(&wrapped, Path::new("a.png"))
                .await
                .unwrap()
                .read_to_end(&mut bytes)
                .await
                .unwrap();
            assert_eq!(bytes, b"png bytes");
            let alone = RangedAtlases(None);
            assert!(matches!(
                AssetReader::read(&alone, Path::new("a.png")).await,
                Err(AssetReaderError::NotFound(_))
            ));
        });
    }
}
