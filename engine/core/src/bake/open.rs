//! Opening an input image file for a bake by what its bytes say it is: the one place
//! that picks a reader, so the CLI, the viewer and library users get the same sources.

use std::path::Path;

use crate::bake::source::{ImageFile, RowSource, SourceError};

/// Opens the image at `path` as a source that reads only the rows a bake asks for where
/// its format allows it. Only the header is read now; a corrupt body fails at the bake.
/// Anything but a regular file (or a link to one) is refused unopened
/// ([`check_input`](crate::bake::input_file::check_input)).
pub fn open_image(path: &Path) -> Result<Box<dyn RowSource>, SourceError> {
    // Before any reader opens it: a FIFO would block the open, a device read without end.
    crate::bake::input_file::check_input(path)?;
    // TIFF and BigTIFF (`II*\0`, `MM\0*`, `II+\0`, `MM\0+`): strip by strip or tile by tile.
    if crate::bake::tiff::is_tiff_file(path) {
        return Ok(Box::new(crate::bake::tiff::TiffSource::open(path)?));
    }
    // KTX2 (Basis ETC1S / UASTC through the Rust transcoder, or RGBA8): the top level.
    if crate::bake::ktx2::is_ktx2_file(path) {
        return Ok(Box::new(crate::bake::ktx2::Ktx2Source::open(path)?));
    }
    // DDS (BC1-BC5, BC7, 32-bit texels): one row of blocks at a time.
    if crate::bake::dds::is_dds_file(path) {
        return Ok(Box::new(crate::bake::dds::DdsSource::open(path)?));
    }
    // PNG row by row (an interlaced one is decoded whole, below).
    if starts_with(path, b"\x89PNG\r\n\x1a\n")
        && let Some(rows) = crate::bake::png_rows::PngRows::open(path)?
    {
        return Ok(Box::new(rows));
    }
    // JPEG decoded once into its own pixel layout, in a scratch file when large.
    if starts_with(path, &[0xFF, 0xD8, 0xFF]) {
        return Ok(Box::new(crate::bake::jpeg_file::JpegFile::open(path)?));
    }
    Ok(Box::new(ImageFile::open(path)?))
}

/// Whether the file at `path` begins with `magic` (false when it cannot be read).
fn starts_with(path: &Path, magic: &[u8]) -> bool {
    let mut head = vec![0u8; magic.len()];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok()
        && head == magic
}
