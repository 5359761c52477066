//! Everything that can be wrong with an atlas file, reading or writing it.

use std::path::PathBuf;

use super::{OLDEST_VERSION, VERSION};
use crate::format::codec::CodecError;
use crate::format::tile::{LayoutError, TileId};

/// Everything that can be wrong with an atlas file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AtlasError {
    /// A TIFF given as an atlas that cannot be streamed unbaked (see
    /// [`crate::format::cog`]).
    #[error(transparent)]
    Cog(crate::format::cog::CogError),
    /// A tile of a streamed TIFF whose internal tiles could not be read or decoded.
    #[error("{path}: {tile}: cannot read its texels from the TIFF: {reason}")]
    CogTile {
        /// The TIFF.
        path: PathBuf,
        /// The virtual-texture tile.
        tile: TileId,
        /// What failed.
        reason: String,
    },
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The atlas path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file shrank or could not be read after it was opened (truncated or replaced
    /// in place while in use): the tile is reported and its ancestor shown instead.
    #[error(
        "{path}: tile {tile} cannot be read: the file changed while in use ({source}); replace atlases by renaming a new file over them"
    )]
    Changed {
        /// The atlas path.
        path: PathBuf,
        /// The tile being read.
        tile: TileId,
        /// What the read said.
        source: std::io::Error,
    },
    /// A remote atlas could not be read just now (network or server failure after
    /// retries): the tile's ancestor is shown and the tile is asked for again later.
    #[error("{path}: tile {tile} is unavailable for now: {reason}")]
    Unavailable {
        /// The atlas location.
        path: PathBuf,
        /// The tile being read.
        tile: TileId,
        /// What the network or the server said.
        reason: String,
    },
    /// A remote read was abandoned because nothing wanted the tile any more (see
    /// [`Atlas::read_tiles`](super::Atlas::read_tiles)).
    #[error("{path}: tile {tile}: read cancelled (no longer wanted)")]
    Cancelled {
        /// The atlas location.
        path: PathBuf,
        /// The tile.
        tile: TileId,
    },
    /// The file does not start with the atlas magic.
    #[error("{path}: not a Tessera atlas ({found})")]
    BadMagic {
        /// The atlas path.
        path: PathBuf,
        /// What its first bytes look like instead ([`what_the_bytes_are`]).
        found: String,
    },
    /// The file is of a format version this build does not read.
    #[error(
        "{path}: unsupported atlas version {found} (this build reads versions {OLDEST_VERSION} to {VERSION})"
    )]
    UnsupportedVersion {
        /// The atlas path.
        path: PathBuf,
        /// Version found in the file.
        found: u32,
    },
    /// The file is shorter (or longer) than its header says.
    #[error("{path}: truncated or extended: header says {expected} bytes, file has {found}")]
    Truncated {
        /// The atlas path.
        path: PathBuf,
        /// Size the header records.
        expected: u64,
        /// Actual size.
        found: u64,
    },
    /// A checksum over the header or the index does not match.
    #[error("{path}: {what} checksum mismatch (file corrupted)")]
    Checksum {
        /// The atlas path.
        path: PathBuf,
        /// Which part.
        what: &'static str,
    },
    /// A header, layer or index field is out of range.
    #[error("{path}: invalid {what}")]
    Invalid {
        /// The atlas path.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The destination of a write exists and is not a regular file (a device, a FIFO, a
    /// socket, a folder): the finished atlas, renamed over it, would replace it.
    #[error("refusing to write {path}: it is {kind}, not a regular file; give the path of a file to write")]
    NotAFile {
        /// The atlas path.
        path: PathBuf,
        /// What it is ("a character device", "a FIFO (named pipe)").
        kind: &'static str,
    },
    /// A tile of a produced atlas ([`Atlas::produced`](super::Atlas::produced)) was
    /// read: such an atlas stores no texels, the renderer draws its tiles at run time.
    #[error(
        "{path}: {tile} has no stored texels: the atlas is produced at run time (its tiles are drawn by the renderer, not read)"
    )]
    Produced {
        /// The atlas' name (`produced:NAME`).
        path: PathBuf,
        /// The tile asked for.
        tile: TileId,
    },
    /// A tile id outside every layer was asked for.
    #[error("{path}: {tile} does not exist in this atlas")]
    NoSuchTile {
        /// The atlas path.
        path: PathBuf,
        /// The tile asked for.
        tile: TileId,
    },
    /// A tile's data does not match its CRC.
    #[error("{path}: {tile}: data checksum mismatch (corrupted tile)")]
    TileChecksum {
        /// The atlas path.
        path: PathBuf,
        /// The bad tile.
        tile: TileId,
    },
    /// A tile's data passed its CRC but cannot be decoded.
    #[error("{path}: {tile}: {source}")]
    TileDecode {
        /// The atlas path.
        path: PathBuf,
        /// The bad tile.
        tile: TileId,
        /// The codec's complaint.
        source: CodecError,
    },
    /// A remote atlas was replaced on the server (another ETag) since it was opened: none
    /// of its tiles is read any more, never a mix of old and new bytes.
    #[error(
        "{path}: the atlas was replaced on the server since it was opened ({tile} not read); open it again to read the new version"
    )]
    Replaced {
        /// The atlas location.
        path: PathBuf,
        /// The tile being read.
        tile: TileId,
    },
    /// A tile's index entry cannot be read: its index page is damaged or invalid.
    #[error("{path}: {tile}: its index entry cannot be read: {reason}")]
    TileIndex {
        /// The atlas path.
        path: PathBuf,
        /// The tile.
        tile: TileId,
        /// Why (the page's error).
        reason: String,
    },
    /// Bytes of an atlas read through a [`RangedBytes`](super::ranged::RangedBytes) are not
    /// held yet: fetch them, insert them and try again. Never a sign of a bad file.
    #[error(
        "{path}: bytes {offset}..{end} are not fetched yet (fetch them into the ranged store and try again)",
        end = offset.saturating_add(*len)
    )]
    NeedBytes {
        /// The atlas location.
        path: PathBuf,
        /// The first byte to fetch.
        offset: u64,
        /// How many bytes to fetch.
        len: u64,
    },
    /// A layout could not be built (writer side).
    #[error("{path}: {source}")]
    Layout {
        /// The atlas path.
        path: PathBuf,
        /// The layout problem.
        source: LayoutError,
    },
}

impl AtlasError {
    /// The byte range to fetch, for [`AtlasError::NeedBytes`].
    pub fn need_bytes(&self) -> Option<std::ops::Range<u64>> {
        match self {
            AtlasError::NeedBytes { offset, len, .. } => Some(*offset..offset.saturating_add(*len)),
            _ => None,
        }
    }

    /// The tile the error is about, when it is about one tile.
    pub fn tile(&self) -> Option<TileId> {
        match self {
            AtlasError::TileChecksum { tile, .. }
            | AtlasError::TileDecode { tile, .. }
            | AtlasError::TileIndex { tile, .. }
            | AtlasError::Replaced { tile, .. }
            | AtlasError::NoSuchTile { tile, .. }
            | AtlasError::Changed { tile, .. }
            | AtlasError::Unavailable { tile, .. }
            | AtlasError::Cancelled { tile, .. }
            | AtlasError::Produced { tile, .. } => Some(*tile),
            _ => None,
        }
    }
}

/// What a file that is not an atlas seems to be, from its first bytes: a known format
/// (an image to bake first, an HTML page a server sent instead), else the bytes in hex.
pub fn what_the_bytes_are(first: &[u8]) -> String {
    let starts = |sig: &[u8]| first.starts_with(sig);
    let text = String::from_utf8_lossy(&first[..first.len().min(64)]).trim_start().to_ascii_lowercase();
    let known = if starts(b"\x89PNG\r\n\x1a\n") {
        "a PNG image: bake it first (tessera bake FILE -o FILE.tsa)"
    } else if starts(&[0xff, 0xd8, 0xff]) {
        "a JPEG image: bake it first (tessera bake FILE -o FILE.tsa)"
    } else if starts(b"\xabKTX 20\xbb") {
        "a KTX2 texture: bake it first (tessera bake FILE -o FILE.tsa)"
    } else if starts(b"II*\0") || starts(b"MM\0*") || starts(b"II+\0") || starts(b"MM\0+") {
        "a TIFF image: bake it first (tessera bake FILE -o FILE.tsa)"
    } else if starts(b"glTF") {
        "a binary glTF: bake it first (tessera bake --gltf FILE -o FILE.tsa)"
    } else if text.starts_with("<!doctype html") || text.starts_with("<html") || text.starts_with("<?xml") {
        "an HTML or XML page: a wrong link, or a server's error or fallback page"
    } else if text.starts_with('{') || text.starts_with('[') {
        "JSON text: a wrong link, or a server's error reply"
    } else if starts(&[0x1f, 0x8b]) {
        "gzip data: a compressed download, or a server that compresses what it sends"
    } else if first.is_empty() {
        return "it is empty".to_owned();
    } else {
        let hex: Vec<String> = first.iter().take(8).map(|b| format!("{b:02x}")).collect();
        return format!("it starts with bytes {}", hex.join(" "));
    };
    format!("it looks like {known}")
}
