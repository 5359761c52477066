//! What a streamed COG ([`crate::format::cog`]) asks of a TIFF: its image directories,
//! one of them opened over shared byte blocks, and one internal tile at a time decoded to
//! RGBA8 (instead of the bake's rows of chunks).

use std::io::{self, BufReader, ErrorKind};
use std::path::Path;
use std::sync::{Arc, PoisonError};

use ::tiff::decoder::{ChunkType, Decoder};
use ::tiff::tags::Tag;

use super::bytes::{BlockCache, TiffReader};
use super::{TiffSource, guarded, header_error, texels};
use crate::bake::source::{SourceError, TEXEL_BYTES};
use crate::format::atlas::ColorSpace;
use crate::format::cog::ImageDirectory;

/// Image directories read at most: a COG has one per level and mask (a 2²⁰ image has 21
/// levels), so more than this is not a COG.
const MAX_DIRECTORIES: usize = 96;

/// Largest internal tile side streamed (GDAL writes 256 or 512).
const MAX_CHUNK_SIDE: u32 = 4096;

impl TiffSource {
    /// Every image directory of the TIFF read through `cache` (shown as `path`), in file
    /// order: size, chunking and whether it is an overview or a mask.
    pub(crate) fn image_directories(
        path: &Path,
        cache: &Arc<BlockCache>,
    ) -> Result<Vec<ImageDirectory>, SourceError> {
        let reader = TiffReader::new(cache.clone());
        let mut decoder =
            guarded(|| Decoder::new(BufReader::new(reader))).map_err(|e| header_error(path, e))?;
        let mut out = Vec::new();
        loop {
            let (width, height) = decoder.dimensions().map_err(|e| header_error(path, e))?;
            let kind: u32 = decoder.find_tag_unsigned(Tag::NewSubfileType).ok().flatten().unwrap_or(0);
            let tiled = decoder.get_chunk_type() == ChunkType::Tile;
            out.push(ImageDirectory {
                image: out.len(),
                width,
                height,
                tiled,
                chunk: decoder.chunk_dimensions(),
                reduced: kind & 1 != 0,
                mask: kind & 4 != 0,
            });
            if !decoder.more_images() {
                return Ok(out);
            }
            if out.len() == MAX_DIRECTORIES {
                return Err(SourceError::Unsupported {
                    path: path.to_path_buf(),
                    reason: format!("TIFF with more than {MAX_DIRECTORIES} image directories"),
                });
            }
            guarded(|| decoder.next_image()).map_err(|e| header_error(path, e))?;
        }
    }

    /// Image directory `image` of the TIFF read through `cache`, for reads of one
    /// internal tile at a time ([`TiffSource::chunk_rgba`]); a data raster takes the
    /// value range `range` (its full image's) or GDAL's statistics, and is refused
    /// without either.
    pub(crate) fn open_image(
        path: &Path,
        cache: &Arc<BlockCache>,
        image: usize,
        range: Option<(f64, f64)>,
    ) -> Result<Self, SourceError> {
        // The bake's row window is never filled here: no memory bound beyond one chunk.
        let source = Self::from_reader(
            path,
            TiffReader::new(cache.clone()),
            cache.len(),
            u64::MAX,
            image,
            (range, false),
        )?;
        let g = source.grid;
        if g.chunk_w > MAX_CHUNK_SIDE || g.chunk_h > MAX_CHUNK_SIDE {
            return Err(SourceError::Unsupported {
                path: path.to_path_buf(),
                reason: format!(
                    "internal tiles of {}x{} texels (at most {MAX_CHUNK_SIDE} a side are streamed)",
                    g.chunk_w, g.chunk_h
                ),
            });
        }
        Ok(source)
    }

    /// How the texels are encoded: linear for a data raster, else sRGB.
    pub(crate) fn colour_space(&self) -> ColorSpace {
        if self.data.is_some() { ColorSpace::Linear } else { ColorSpace::Srgb }
    }

    /// Compressed bytes of all chunks.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.byte_counts.iter().sum()
    }

    /// The value range of a data raster (`None` for colour).
    pub(crate) fn value_range_known(&self) -> Option<(f64, f64)> {
        self.data.as_ref().map(|d| (d.min, d.max))
    }

    /// Internal tile (`cx`, `cy`) decoded to RGBA8: its visible part, `w × h × 4` bytes
    /// row after row, `w` and `h` the tile's size clipped to the image.
    pub(crate) fn chunk_rgba(&self, cx: u32, cy: u32) -> io::Result<Vec<u8>> {
        let g = self.grid;
        let (x0, y0) = (cx.saturating_mul(g.chunk_w), cy.saturating_mul(g.chunk_h));
        if x0 >= self.width || y0 >= self.height {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: no internal tile {cx},{cy} in a {}x{} image",
                    self.path.display(),
                    self.width,
                    self.height
                ),
            ));
        }
        let (w, h) = (g.chunk_w.min(self.width - x0) as usize, g.chunk_h.min(self.height - y0) as usize);
        let index = cy * g.across + cx;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let chunk = self.read_chunk(&mut state.decoder, index, w, h)?;
        drop(state);
        let conversion = self.conversion();
        let line = w * g.samples;
        let mut out = vec![0u8; w * h * TEXEL_BYTES];
        for (r, row) in out.chunks_exact_mut(w * TEXEL_BYTES).enumerate() {
            texels::to_rgba(&chunk, r * line, line, &conversion, row)
                .map_err(|e| self.chunk_error(ErrorKind::InvalidData, index, &e))?;
        }
        Ok(out)
    }
}
