//! A mosaic texture: a square grid of square cells, each showing one of a few image
//! crops, laid out so that neighbouring cells differ. It makes a virtual texture far
//! larger than any GPU texture (the 64K² stress scene) from a few real photographs while
//! holding only the crops in memory, and it supplies its own mip levels so that baking it
//! needs no multi-GiB scratch levels.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::bake::Region;
use crate::bake::filter::downsample;
use crate::bake::source::{RowSource, SourceError, TEXEL_BYTES, decode_image};
use crate::format::atlas::{ColorSpace, Wrap};
use crate::format::tile::MAX_VIRTUAL_SIDE;

/// Side of one cell of the stress mosaic, in texels.
pub const STRESS_CELL: u32 = 4096;
/// Cells along each side of the stress mosaic.
pub const STRESS_CELLS: u32 = 16;

/// The crops of the stress mosaic: image file in the data folder, top-left corner, side
/// of the crop in the image, and the integer factor it is enlarged by to fill a cell.
pub const STRESS_CROPS: [(&str, u32, u32, u32, u32); 6] = [
    ("shadedrelief.jpg", 1100, 500, 4096, 1),
    ("shadedrelief.jpg", 6000, 700, 4096, 1),
    ("bmng.jpg", 500, 250, 2048, 2),
    ("bmng.jpg", 2900, 350, 2048, 2),
    ("etopo1.jpg", 1500, 300, 2048, 2),
    ("etopo1.jpg", 3300, 600, 2048, 2),
];

/// Why a mosaic cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MosaicError {
    /// An image could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A crop reaches outside its image.
    #[error("{path}: crop {side}x{side} at ({x}, {y}) lies outside the {width}x{height} image")]
    CropOutside {
        /// The image file.
        path: PathBuf,
        /// Left edge of the crop.
        x: u32,
        /// Top edge of the crop.
        y: u32,
        /// Side of the crop.
        side: u32,
        /// The image's width.
        width: u32,
        /// The image's height.
        height: u32,
    },
    /// The grid or a crop does not fit together.
    #[error("mosaic: {0}")]
    Geometry(String),
}

/// One crop shown by mosaic cells: `side²` RGBA8 texels, enlarged `scale` times
/// (nearest texel) to fill a cell of `side · scale` texels.
#[derive(Clone, Debug)]
pub struct MosaicCrop {
    name: String,
    side: u32,
    scale: u32,
    texels: Vec<u8>,
}

impl MosaicCrop {
    /// A crop from RGBA8 texels (`side² × 4` bytes), enlarged `scale` times.
    pub fn new(name: impl Into<String>, side: u32, scale: u32, texels: Vec<u8>) -> Result<Self, MosaicError> {
        let name = name.into();
        let bytes = u64::from(side) * u64::from(side) * TEXEL_BYTES as u64;
        if side == 0 || scale == 0 || texels.len() as u64 != bytes {
            return Err(MosaicError::Geometry(format!(
                "crop '{name}': side {side}, scale {scale} and {} bytes of texels do not fit together",
                texels.len()
            )));
        }
        Ok(Self { name, side, scale, texels })
    }

    /// The `side × side` square at `(x, y)` of an image file, enlarged `scale` times.
    pub fn from_file(path: &Path, x: u32, y: u32, side: u32, scale: u32) -> Result<Self, MosaicError> {
        let img = decode_image(path)?;
        Self::from_image(path, &img, x, y, side, scale)
    }

    fn from_image(
        path: &Path,
        img: &image::DynamicImage,
        x: u32,
        y: u32,
        side: u32,
        scale: u32,
    ) -> Result<Self, MosaicError> {
        let (width, height) = (img.width(), img.height());
        let inside = |o: u32, n: u32| o.checked_add(side).is_some_and(|e| e <= n);
        if side == 0 || !inside(x, width) || !inside(y, height) {
            return Err(MosaicError::CropOutside { path: path.to_path_buf(), x, y, side, width, height });
        }
        let name = format!(
            "{}@{x},{y}",
            path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
        );
        Self::new(name, side, scale, img.crop_imm(x, y, side, side).into_rgba8().into_raw())
    }

    /// Name of the crop: the image's stem and the crop's corner.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Side of a cell showing this crop: `side · scale`.
    pub fn cell_side(&self) -> u64 {
        u64::from(self.side) * u64::from(self.scale)
    }
}

/// One mip level of a mosaic: every crop at that level, in the same grid.
struct Level {
    cell: u32,
    cells: u32,
    crops: Vec<MosaicCrop>,
}

impl Level {
    /// Row `ly` of crop `c` as stored (before enlarging) and the factor it is enlarged by.
    fn crop_row(&self, c: usize, ly: u32) -> (&[u8], u32) {
        let crop = &self.crops[c];
        let row_bytes = crop.side as usize * TEXEL_BYTES;
        let start = (ly / crop.scale) as usize * row_bytes;
        (&crop.texels[start..start + row_bytes], crop.scale)
    }

    fn width(&self) -> u32 {
        self.cell * self.cells
    }

    fn fill_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row_bytes = self.width() as usize * TEXEL_BYTES;
        let rows = out.len() / row_bytes.max(1);
        if !out.len().is_multiple_of(row_bytes) || y0 as usize + rows > self.width() as usize {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "mosaic rows {y0}..{} lie outside the {}-texel texture",
                    y0 as usize + rows,
                    self.width()
                ),
            ));
        }
        let cell_bytes = self.cell as usize * TEXEL_BYTES;
        out.par_chunks_mut(row_bytes).enumerate().for_each(|(i, row)| {
            let y = y0 + i as u32;
            let (cy, ly) = (y / self.cell, y % self.cell);
            for (cx, dst) in row.chunks_exact_mut(cell_bytes).enumerate() {
                let (src, scale) = self.crop_row(crop_at(cx as u32, cy, self.crops.len()), ly);
                if scale == 1 {
                    dst.copy_from_slice(src);
                } else {
                    for (k, px) in dst.chunks_exact_mut(TEXEL_BYTES).enumerate() {
                        let s = k / scale as usize * TEXEL_BYTES;
                        px.copy_from_slice(&src[s..s + TEXEL_BYTES]);
                    }
                }
            }
        });
        Ok(())
    }

    /// The next level, when this one is mip `mip`: every crop filtered by the baker's own
    /// 2×2 filter (sRGB) with the weights the baker uses at that mip.
    fn halve(&self, mip: u32) -> Level {
        let cell = self.cell / 2;
        let crops = self
            .crops
            .iter()
            .enumerate()
            .map(|(c, crop)| {
                let w = self.cell;
                let row_bytes = w as usize * TEXEL_BYTES;
                let mut texels = Vec::with_capacity(cell as usize * cell as usize * TEXEL_BYTES);
                // In bands, so an enlarged crop is never held at full size.
                const BAND: u32 = 256;
                let mut band = vec![0u8; BAND as usize * row_bytes];
                for y0 in (0..w).step_by(BAND as usize) {
                    let n = BAND.min(w - y0);
                    for (i, row) in band.chunks_exact_mut(row_bytes).take(n as usize).enumerate() {
                        let (src, scale) = self.crop_row(c, y0 + i as u32);
                        for (k, px) in row.chunks_exact_mut(TEXEL_BYTES).enumerate() {
                            let s = k / scale as usize * TEXEL_BYTES;
                            px.copy_from_slice(&src[s..s + TEXEL_BYTES]);
                        }
                    }
                    let rows = &band[..n as usize * row_bytes];
                    // A texture `w << mip` wide gives every texel of this crop the coverage
                    // weight it has in the whole mosaic at this mip.
                    let full = w << mip;
                    texels.extend_from_slice(&downsample(rows, w, mip, full, y0, full, ColorSpace::Srgb));
                }
                MosaicCrop { name: crop.name.clone(), side: cell, scale: 1, texels }
            })
            .collect();
        Level { cell, cells: self.cells, crops }
    }
}

/// Which crop cell `(cx, cy)` shows: `(cx + 2·cy) mod crops`, so that with three crops
/// or more no cell shares its crop with any of its eight neighbours.
pub fn crop_at(cx: u32, cy: u32, crops: usize) -> usize {
    ((u64::from(cx) + 2 * u64::from(cy)) % crops.max(1) as u64) as usize
}

/// A `cells × cells` grid of `cell`-texel cells, each showing one crop (see [`crop_at`]).
/// Holds the crops and their mip pyramids (filtered in linear light, as the baker does),
/// about 4/3 of the crops' own size in memory.
pub struct Mosaic {
    levels: Vec<Level>,
}

impl Mosaic {
    /// A mosaic of `cells × cells` cells of `cell` texels from `crops` (each must fill a
    /// cell exactly: `side · scale = cell`).
    pub fn with_grid(cell: u32, cells: u32, crops: Vec<MosaicCrop>) -> Result<Self, MosaicError> {
        if crops.is_empty() || cell == 0 || cells == 0 {
            return Err(MosaicError::Geometry(format!(
                "{cells}x{cells} cells of {cell} texels from {} crops",
                crops.len()
            )));
        }
        if u64::from(cell) * u64::from(cells) > u64::from(MAX_VIRTUAL_SIDE) {
            return Err(MosaicError::Geometry(format!(
                "{cells} cells of {cell} texels exceed {MAX_VIRTUAL_SIDE} texels a side"
            )));
        }
        if let Some(c) = crops.iter().find(|c| c.cell_side() != u64::from(cell)) {
            return Err(MosaicError::Geometry(format!(
                "crop '{}' fills {} texels ({} x {}), cells are {cell}",
                c.name,
                c.cell_side(),
                c.side,
                c.scale
            )));
        }
        let mut levels = vec![Level { cell, cells, crops }];
        // A level can be filtered cell by cell while the level above has even cells.
        while let Some(last) = levels.last().filter(|l| l.cell % 2 == 0) {
            let next = last.halve(levels.len() as u32 - 1);
            levels.push(next);
        }
        Ok(Self { levels })
    }

    /// The 64K² stress mosaic ([`STRESS_CELLS`]² cells of [`STRESS_CELL`] texels) from the
    /// crops [`STRESS_CROPS`] of the images in the data folder `data`.
    pub fn stress(data: &Path) -> Result<Self, MosaicError> {
        Self::stress_grid(data, STRESS_CELLS)
    }

    /// The stress mosaic's crops on a grid of `cells`² cells of [`STRESS_CELL`] texels
    /// (4 cells: a 16384² real texture whose fully resident reference still fits a GPU).
    pub fn stress_grid(data: &Path, cells: u32) -> Result<Self, MosaicError> {
        let mut crops = Vec::with_capacity(STRESS_CROPS.len());
        let mut decoded: Option<(PathBuf, image::DynamicImage)> = None;
        for (file, x, y, side, scale) in STRESS_CROPS {
            let path = data.join(file);
            // Crops of one image are listed together: each image is decoded once.
            if decoded.as_ref().is_none_or(|(p, _)| *p != path) {
                drop(decoded.take());
                decoded = Some((path.clone(), decode_image(&path)?));
            }
            if let Some((_, img)) = &decoded {
                crops.push(MosaicCrop::from_image(&path, img, x, y, side, scale)?);
            }
        }
        drop(decoded);
        Self::with_grid(STRESS_CELL, cells, crops)
    }

    /// The image files the stress mosaic is made of, in the data folder `data`.
    pub fn stress_files(data: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = STRESS_CROPS.iter().map(|c| data.join(c.0)).collect();
        files.dedup();
        files
    }

    /// Side of a cell in texels.
    pub fn cell(&self) -> u32 {
        self.levels[0].cell
    }

    /// Cells along each side.
    pub fn cells(&self) -> u32 {
        self.levels[0].cells
    }

    /// The crops, in the order [`crop_at`] indexes.
    pub fn crops(&self) -> &[MosaicCrop] {
        &self.levels[0].crops
    }

    /// The RGBA8 texel at `(x, y)` of mip 0.
    pub fn texel(&self, x: u32, y: u32) -> [u8; 4] {
        let l = &self.levels[0];
        let (src, scale) = l.crop_row(crop_at(x / l.cell, y / l.cell, l.crops.len()), y % l.cell);
        let s = (x % l.cell / scale) as usize * TEXEL_BYTES;
        [src[s], src[s + 1], src[s + 2], src[s + 3]]
    }

    /// One region per cell, wrapping (repeat) within the cell on both axes, so every tile
    /// of a cell, borders included, depends only on its crop and its place in the cell:
    /// cells showing the same crop bake to identical tiles, which the atlas stores once.
    pub fn regions(&self) -> Vec<Region> {
        let (cell, cells) = (self.cell(), self.cells());
        (0..cells)
            .flat_map(|cy| {
                (0..cells).map(move |cx| Region {
                    x: cx * cell,
                    y: cy * cell,
                    width: cell,
                    height: cell,
                    wrap: [Wrap::Repeat, Wrap::Repeat],
                })
            })
            .collect()
    }
}

impl RowSource for Mosaic {
    fn size(&self) -> (u32, u32) {
        let w = self.levels[0].width();
        (w, w)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.levels[0].fill_rows(y0, out)
    }

    fn mip_level(&self, mip: u32, color: ColorSpace) -> Option<&dyn RowSource> {
        if color != ColorSpace::Srgb || mip == 0 {
            return None;
        }
        self.levels.get(mip as usize).map(|l| l as &dyn RowSource)
    }

    /// On mips whose cells are whole tiles (a cell at least a tile, a multiple of it,
    /// and at least a border wide): the crop of the tile's cell, the tile's place in the
    /// cell, and which edges of the whole texture the cell touches. A cell's neighbours
    /// show crops fixed by its own ([`crop_at`] adds 1 per column and 2 per row), so the
    /// border texels a tile borrows from them repeat with the key too, as do the clamped
    /// or in-cell repeated ones. Everywhere else: `None`.
    fn tile_key(&self, mip: u32, tile: u32, border: u32, tx: u32, ty: u32) -> Option<u64> {
        let level = self.levels.get(mip as usize)?;
        let cell = level.cell;
        if tile == 0 || cell < tile || !cell.is_multiple_of(tile) || cell < border {
            return None;
        }
        let per = cell / tile;
        let (cx, cy) = (tx / per, ty / per);
        if cx >= level.cells || cy >= level.cells || per > 1 << 20 {
            return None;
        }
        let crop = crop_at(cx, cy, level.crops.len()) as u64;
        let last = level.cells - 1;
        let edges = u64::from(cx == 0)
            | u64::from(cx == last) << 1
            | u64::from(cy == 0) << 2
            | u64::from(cy == last) << 3;
        Some(crop << 48 | edges << 44 | u64::from(tx % per) << 22 | u64::from(ty % per))
    }
}

impl RowSource for Level {
    fn size(&self) -> (u32, u32) {
        (self.width(), self.width())
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.fill_rows(y0, out)
    }
}
