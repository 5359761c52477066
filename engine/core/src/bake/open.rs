//! Opening an input image file for a bake by what its bytes say it is: the one place
//! that picks a reader, so the CLI, the viewer and library users get the same sources.

use std::io::Read as _;
use std::path::Path;

use crate::bake::source::{ImageFile, RowSource, SourceError};

/// What an input file is, by its first bytes ([`sniff`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// TIFF or BigTIFF, either byte order.
    Tiff,
    /// KTX 2.0.
    Ktx2,
    /// DirectDraw Surface.
    Dds,
    /// PNG.
    Png,
    /// JPEG.
    Jpeg,
    /// A GDAL VRT (XML) mosaic.
    Vrt,
    /// Anything else: left to the `image` crate's own detection.
    Other,
}

/// The kind of file whose first bytes are `head` (16 bytes are enough).
pub(crate) fn sniff(head: &[u8]) -> Kind {
    match head {
        [b'I', b'I', b'*' | b'+', 0, ..] | [b'M', b'M', 0, b'*' | b'+', ..] => Kind::Tiff,
        _ if head.starts_with(&crate::bake::ktx2::IDENTIFIER) => Kind::Ktx2,
        _ if head.starts_with(b"DDS ") => Kind::Dds,
        _ if head.starts_with(b"\x89PNG\r\n\x1a\n") => Kind::Png,
        [0xFF, 0xD8, 0xFF, ..] => Kind::Jpeg,
        _ if head.trim_ascii_start().starts_with(b"<VRTDataset") => Kind::Vrt,
        _ => Kind::Other,
    }
}

/// Opens the image at `path` as a source that reads only the rows a bake asks for where
/// its format allows it. Only the header is read now; a corrupt body fails at the bake.
/// Anything but a regular file (or a link to one) is refused unopened
/// ([`check_input`](crate::bake::input_file::check_input)).
pub fn open_image(path: &Path) -> Result<Box<dyn RowSource>, SourceError> {
    open_kind(path, None)
}

/// [`open_image`] for a source of the GDAL VRT `vrt`: anything but another VRT.
pub(crate) fn open_image_in_vrt(path: &Path, vrt: &Path) -> Result<Box<dyn RowSource>, SourceError> {
    open_kind(path, Some(vrt))
}

/// [`open_image`]; a VRT is refused when the file is a source of the VRT `in_vrt`.
fn open_kind(path: &Path, in_vrt: Option<&Path>) -> Result<Box<dyn RowSource>, SourceError> {
    // Before any reader opens it: a FIFO would block the open, a device read without end.
    crate::bake::input_file::check_input(path)?;
    let mut head = Vec::with_capacity(32);
    std::fs::File::open(path)
        .and_then(|f| f.take(32).read_to_end(&mut head))
        .map_err(|source| SourceError::Io { path: path.to_path_buf(), source })?;
    Ok(match sniff(&head) {
        // Strip by strip or tile by tile.
        Kind::Tiff => Box::new(crate::bake::tiff::TiffSource::open(path)?),
        // Basis ETC1S / UASTC through the Rust transcoder, or RGBA8: the top level.
        Kind::Ktx2 => Box::new(crate::bake::ktx2::Ktx2Source::open(path)?),
        // BC1-BC5, BC7, 32-bit texels: one row of blocks at a time.
        Kind::Dds => Box::new(crate::bake::dds::DdsSource::open(path)?),
        // Row by row; an interlaced PNG is decoded whole.
        Kind::Png => match crate::bake::png_rows::PngRows::open(path)? {
            Some(rows) => Box::new(rows),
            None => Box::new(ImageFile::open(path)?),
        },
        // Decoded once into its own pixel layout, in a scratch file when large.
        Kind::Jpeg => Box::new(crate::bake::jpeg_file::JpegFile::open(path)?),
        // A mosaic of its sources, placed as its rectangles say.
        Kind::Vrt => match in_vrt {
            None => Box::new(crate::bake::vrt::open(path)?),
            Some(vrt) => {
                return Err(SourceError::Vrt {
                    path: path.to_path_buf(),
                    reason: format!("a source of the VRT {} (nested VRTs are not read)", vrt.display()),
                });
            }
        },
        Kind::Other => Box::new(ImageFile::open(path)?),
    })
}
