//! A grid of images read as one layer (e.g. the eight 21600² tiles of NASA's Blue
//! Marble as one 86400×43200 globe): rows are stitched across the images of a grid row,
//! reading from each only the rows asked for. The baker computes borders and mips from
//! the stitched rows, so the bake has no seams at the images' edges.

use crate::bake::source::{DataScale, RowSource, SourceOrigin, TEXEL_BYTES};
use crate::format::atlas::ColorSpace;
use crate::format::tile::MAX_VIRTUAL_SIDE;

mod placed;

pub(crate) use placed::mosaic_geo;
pub use placed::{PlacedSource, Placement};

/// Why images cannot form a grid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GridError {
    /// The number of images is not columns × rows.
    #[error("a {cols}x{rows} grid needs {} images, {given} given", u64::from(*cols) * u64::from(*rows))]
    Count {
        /// Columns asked for.
        cols: u32,
        /// Rows asked for.
        rows: u32,
        /// Images given.
        given: usize,
    },
    /// An image's height differs from that of the first image of its grid row.
    #[error(
        "{image} is {width}x{height}, but {first}, the first image of grid row {row}, is {height_first} high: \
         the images of a grid row must have equal heights"
    )]
    Height {
        /// The offending image.
        image: String,
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
        /// The first image of its grid row.
        first: String,
        /// That image's height.
        height_first: u32,
        /// The grid row, from 1.
        row: u32,
    },
    /// An image's width differs from that of the first image of its grid column.
    #[error(
        "{image} is {width}x{height}, but {first}, the first image of grid column {col}, is {width_first} wide: \
         the images of a grid column must have equal widths"
    )]
    Width {
        /// The offending image.
        image: String,
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
        /// The first image of its grid column.
        first: String,
        /// That image's width.
        width_first: u32,
        /// The grid column, from 1.
        col: u32,
    },
    /// The stitched image is larger than a layer may be.
    #[error("the {cols}x{rows} grid stitches to {width}x{height} texels, over the limit of {max} a side")]
    TooLarge {
        /// Columns.
        cols: u32,
        /// Rows.
        rows: u32,
        /// Stitched width.
        width: u64,
        /// Stitched height.
        height: u64,
        /// Largest side of a layer.
        max: u32,
    },
    /// Two images tag their texels with different colour spaces (e.g. an sRGB and a
    /// linear KTX2): one layer has one.
    #[error(
        "{image} is tagged {found:?} but {first} is tagged {expected:?}: the images of a grid share one colour space"
    )]
    ColorSpace {
        /// The offending image.
        image: String,
        /// Its colour space.
        found: ColorSpace,
        /// The first image that tags one.
        first: String,
        /// That image's colour space.
        expected: ColorSpace,
    },
    /// An image cannot be placed where the mosaic needs it: not georeferenced, another
    /// CRS or resolution, off the texel grid, overlapping another, or given at a grid
    /// position its geotransform contradicts.
    #[error("{image}: {reason}")]
    Placement {
        /// The offending image (its file).
        image: String,
        /// Why.
        reason: String,
    },
}

/// `images` as one layer. With `shape` (COLSxROWS), a grid in row order (see
/// [`GridSource`]); when every image is a GeoTIFF, the order must agree with their
/// geotransforms (a grid given in the wrong order is an error naming the first image out
/// of place), and the layer keeps the mosaic's georeference. Without `shape`, GeoTIFFs
/// placed by their geotransforms in any order ([`PlacedSource::by_geotransform`]).
pub fn open_grid(
    shape: Option<(u32, u32)>,
    mut images: Vec<Box<dyn RowSource>>,
) -> Result<Box<dyn RowSource>, GridError> {
    share_data_scale(&mut images)?;
    let Some((cols, rows)) = shape else {
        return Ok(Box::new(PlacedSource::by_geotransform(images)?));
    };
    let georeferenced = !images.is_empty()
        && images.iter().all(|i| i.layer_meta().geo.is_some_and(|g| g.geotransform.is_some()));
    if !georeferenced || images.len() as u64 != u64::from(cols) * u64::from(rows) {
        return Ok(Box::new(GridSource::new(cols, rows, images)?));
    }
    let placed = PlacedSource::by_geotransform(images)?;
    // The columns' left edges and the rows' top edges the geotransforms give.
    let offsets = placed.offsets();
    let edges = |pick: fn(&[u32; 2]) -> u32| {
        let mut e: Vec<u32> = offsets.iter().map(pick).collect();
        e.sort_unstable();
        e.dedup();
        e
    };
    let (xs, ys) = (edges(|o| o[0]), edges(|o| o[1]));
    if (xs.len(), ys.len()) != (cols as usize, rows as usize) {
        return Err(GridError::Placement {
            image: placed.name(0),
            reason: format!(
                "the geotransforms lay the images out in {} column(s) and {} row(s), not {cols}x{rows}: \
                 leave out COLSxROWS (--grid geo) to place them by their geotransforms",
                xs.len(),
                ys.len()
            ),
        });
    }
    let c = cols as usize;
    for (i, got) in offsets.iter().enumerate() {
        let want = [xs[i % c], ys[i / c]];
        if want != *got {
            return Err(GridError::Placement {
                image: placed.name(i),
                reason: format!(
                    "given at grid column {}, row {} (texel {}, {}) but its geotransform places it at texel \
                     {}, {}: give the images row by row from the top left, or use --grid geo to place them \
                     by their geotransforms",
                    i % c + 1,
                    i / c + 1,
                    want[0],
                    want[1],
                    got[0],
                    got[1]
                ),
            });
        }
    }
    Ok(Box::new(placed))
}

/// Puts data rasters (DEM tiles) on one value scale, the union of their ranges, so that a
/// texel means the same value across the mosaic: an error when data rasters and colour
/// images are mixed, when their sample types differ, or when one cannot be rescaled.
pub(crate) fn share_data_scale(images: &mut [Box<dyn RowSource>]) -> Result<(), GridError> {
    let scales: Vec<Option<DataScale>> = images.iter().map(|i| i.data_scale()).collect();
    let Some((first, f)) = scales.iter().enumerate().find_map(|(i, s)| Some((i, s.clone()?))) else {
        return Ok(());
    };
    let name = |i: usize| placed::name_of(images[i].as_ref(), i);
    let mut range = (f.min, f.max);
    for (i, s) in scales.iter().enumerate() {
        let reason = match s {
            None => format!("a colour image among data rasters ({} is {} values)", name(first), f.sample),
            Some(d) if d.sample != f.sample => {
                format!(
                    "{} values among {} values of {}: a mosaic's data rasters share one type",
                    d.sample,
                    f.sample,
                    name(first)
                )
            }
            Some(d) => {
                range = (range.0.min(d.min), range.1.max(d.max));
                continue;
            }
        };
        return Err(GridError::Placement { image: name(i), reason });
    }
    for (i, image) in images.iter_mut().enumerate() {
        if !image.set_data_range(range.0, range.1) {
            let reason = "a data raster that cannot take the mosaic's value range".to_string();
            return Err(GridError::Placement { image: placed::name_of(image.as_ref(), i), reason });
        }
    }
    Ok(())
}

/// `cols × rows` images read as one: image `r * cols + c` (row-major: A1 B1 C1 D1, A2 …)
/// lies at grid column `c`, grid row `r`.
pub struct GridSource {
    cols: usize,
    images: Vec<Box<dyn RowSource>>,
    /// Left edge of each grid column, and the total width last.
    xs: Vec<u32>,
    /// Top edge of each grid row, and the total height last.
    ys: Vec<u32>,
}

impl GridSource {
    /// Stitches `images` (row-major) into a `cols × rows` grid. The images of a grid row
    /// must have equal heights and those of a grid column equal widths.
    pub fn new(cols: u32, rows: u32, images: Vec<Box<dyn RowSource>>) -> Result<Self, GridError> {
        if cols == 0 || rows == 0 || images.len() as u64 != u64::from(cols) * u64::from(rows) {
            return Err(GridError::Count { cols, rows, given: images.len() });
        }
        let (c, r) = (cols as usize, rows as usize);
        let name = |i: usize| describe(images[i].as_ref(), i, c);
        for (i, image) in images.iter().enumerate() {
            let (width, height) = image.size();
            let (row_first, col_first) = (i - i % c, i % c);
            let height_first = images[row_first].size().1;
            if height != height_first {
                return Err(GridError::Height {
                    image: name(i),
                    width,
                    height,
                    first: name(row_first),
                    height_first,
                    row: (i / c) as u32 + 1,
                });
            }
            let width_first = images[col_first].size().0;
            if width != width_first {
                return Err(GridError::Width {
                    image: name(i),
                    width,
                    height,
                    first: name(col_first),
                    width_first,
                    col: col_first as u32 + 1,
                });
            }
        }
        let tagged = images.iter().enumerate().filter_map(|(i, im)| Some((i, im.color_space()?)));
        let mut first_tag: Option<(usize, ColorSpace)> = None;
        for (i, found) in tagged {
            match first_tag {
                None => first_tag = Some((i, found)),
                Some((f, expected)) if expected != found => {
                    return Err(GridError::ColorSpace { image: name(i), found, first: name(f), expected });
                }
                Some(_) => {}
            }
        }
        let edges = |sizes: Vec<u32>| -> Vec<u64> {
            std::iter::once(0)
                .chain(sizes.iter().scan(0u64, |at, &s| {
                    *at += u64::from(s);
                    Some(*at)
                }))
                .collect()
        };
        let xs = edges((0..c).map(|i| images[i].size().0).collect());
        let ys = edges((0..r).map(|j| images[j * c].size().1).collect());
        let (width, height) = (xs[c], ys[r]);
        if width > u64::from(MAX_VIRTUAL_SIDE) || height > u64::from(MAX_VIRTUAL_SIDE) {
            return Err(GridError::TooLarge { cols, rows, width, height, max: MAX_VIRTUAL_SIDE });
        }
        let narrow = |v: Vec<u64>| v.into_iter().map(|e| e as u32).collect();
        Ok(Self { cols: c, images, xs: narrow(xs), ys: narrow(ys) })
    }
}

/// An image of a grid in messages: its file, else its place.
fn describe(image: &dyn RowSource, i: usize, cols: usize) -> String {
    match image.origin() {
        Some(SourceOrigin::File(path)) => path.display().to_string(),
        _ => format!("image {} (grid column {}, row {})", i + 1, i % cols + 1, i / cols + 1),
    }
}

impl RowSource for GridSource {
    fn size(&self) -> (u32, u32) {
        (self.xs[self.cols], self.ys[self.ys.len() - 1])
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let (width, height) = self.size();
        let row_bytes = width as usize * TEXEL_BYTES;
        let rows = out.len() / row_bytes;
        let end = u64::from(y0) + rows as u64;
        if !out.len().is_multiple_of(row_bytes) || end > u64::from(height) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("rows {y0}..{end} lie outside the {width}x{height} grid"),
            ));
        }
        let end = end as u32;
        let mut part = Vec::new();
        for (gr, band) in self.ys.windows(2).enumerate() {
            let (top, bottom) = (band[0].max(y0), band[1].min(end));
            if top >= bottom {
                continue;
            }
            let n = (bottom - top) as usize;
            let dst_rows = &mut out[(top - y0) as usize * row_bytes..(bottom - y0) as usize * row_bytes];
            let row_images = &self.images[gr * self.cols..(gr + 1) * self.cols];
            if self.cols == 1 {
                row_images[0].read_rows(top - band[0], dst_rows)?;
                continue;
            }
            for (image, x) in row_images.iter().zip(&self.xs) {
                let part_row = image.size().0 as usize * TEXEL_BYTES;
                part.resize(n * part_row, 0);
                image.read_rows(top - band[0], &mut part)?;
                let at = *x as usize * TEXEL_BYTES;
                for (src, dst) in part.chunks_exact(part_row).zip(dst_rows.chunks_exact_mut(row_bytes)) {
                    dst[at..at + part_row].copy_from_slice(src);
                }
            }
        }
        Ok(())
    }

    fn color_space(&self) -> Option<ColorSpace> {
        self.images.iter().find_map(|image| image.color_space())
    }

    fn data_scale(&self) -> Option<DataScale> {
        self.images.first().and_then(|image| image.data_scale())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::bake::source::ImageSource;
    use crate::bake::{BakeInput, BakeOptions, bake};
    use crate::format::atlas::{Atlas, Wrap};
    use crate::format::codec::Codec;

    /// A noisy `w × h` RGBA8 image with smooth parts, so that LZ4 tiles differ in size.
    fn image(w: u32, h: u32) -> Vec<u8> {
        let mut s = 0x2545_f491u32;
        (0..w * h)
            .flat_map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let (x, y) = (i % w, i / w);
                [(x * 2) as u8, (y * 3) as u8, if x > w / 2 { s as u8 } else { 9 }, 255 - (s >> 29) as u8]
            })
            .collect()
    }

    /// The `cw × ch` rectangle at `(x0, y0)` of the `w`-wide RGBA8 `texels`.
    fn cut(texels: &[u8], w: u32, [x0, y0, cw, ch]: [u32; 4]) -> Vec<u8> {
        (y0..y0 + ch)
            .flat_map(|y| {
                let at = ((y * w + x0) * 4) as usize;
                texels[at..at + cw as usize * 4].iter().copied()
            })
            .collect()
    }

    /// Cut lines: columns at 97 and 211 of 300, rows at 77 of 200 (tiles are 32 wide).
    const XS: [u32; 4] = [0, 97, 211, 300];
    const YS: [u32; 3] = [0, 77, 200];

    /// The pieces of the 300 × 200 image, row-major.
    fn pieces() -> Vec<[u32; 4]> {
        YS.windows(2)
            .flat_map(|r| XS.windows(2).map(move |c| [c[0], r[0], c[1] - c[0], r[1] - r[0]]))
            .collect()
    }

    fn in_memory(texels: &[u8]) -> Vec<Box<dyn RowSource>> {
        pieces()
            .into_iter()
            .map(|r| Box::new(ImageSource::from_rgba(r[2], r[3], cut(texels, 300, r))) as Box<dyn RowSource>)
            .collect()
    }

    fn png_files(dir: &Path, texels: &[u8]) -> Vec<Box<dyn RowSource>> {
        pieces()
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let path = dir.join(format!("piece-{i}.png"));
                image::RgbaImage::from_raw(r[2], r[3], cut(texels, 300, r)).unwrap().save(&path).unwrap();
                crate::bake::open::open_image(&path).unwrap()
            })
            .collect()
    }

    #[test]
    fn rows_are_stitched_across_the_images_of_a_grid_row() {
        let texels = image(300, 200);
        let grid = GridSource::new(3, 2, in_memory(&texels)).unwrap();
        assert_eq!(grid.size(), (300, 200));
        for (y0, n) in [(0, 200), (70, 10), (76, 2), (77, 1), (199, 1), (5, 150)] {
            let mut out = vec![0u8; 300 * 4 * n as usize];
            grid.read_rows(y0, &mut out).unwrap();
            assert_eq!(out, texels[y0 as usize * 1200..(y0 + n) as usize * 1200], "rows {y0}+{n}");
        }
        assert!(grid.read_rows(199, &mut vec![0u8; 2400]).is_err());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn mismatched_sizes_and_counts_are_named() {
        let src = |w, h| {
            Box::new(ImageSource::from_rgba(w, h, vec![0; (w * h * 4) as usize])) as Box<dyn RowSource>
        };
        let err = GridSource::new(2, 2, vec![src(4, 4), src(4, 4), src(4, 4)]).err().unwrap();
        assert_eq!(err.to_string(), "a 2x2 grid needs 4 images, 3 given");
        let err = GridSource::new(2, 1, vec![src(4, 4), src(4, 5)]).err().unwrap();
        let text = err.to_string();
        assert!(
            text.contains("image 2 (grid column 2, row 1) is 4x5") && text.contains("grid row 1"),
            "{text}"
        );
        let err = GridSource::new(1, 2, vec![src(4, 4), src(3, 4)]).err().unwrap();
        let text = err.to_string();
        assert!(text.contains("image 2 (grid column 1, row 2) is 3x4") && text.contains("4 wide"), "{text}");
        // A file is named by its path.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("B1.png");
        image::RgbaImage::new(5, 4).save(&path).unwrap();
        let b1 = crate::bake::open::open_image(&path).unwrap();
        let err = GridSource::new(2, 1, vec![src(4, 3), b1]).err().unwrap();
        assert!(err.to_string().contains("B1.png is 5x4"), "{err}");
    }

    /// A bake of `source` as one layer, tiles of 32 with borders of 4, LZ4.
    fn bake_one(path: &Path, source: Box<dyn RowSource>, wrap: Wrap) -> Atlas {
        let mut input = BakeInput::boxed("layer", source);
        input.wrap = wrap;
        let opts = BakeOptions { tile_size: 32, border: 4, codec: Codec::Lz4, ..BakeOptions::default() };
        bake(vec![input], path, &opts, &crate::progress::NoProgress).unwrap();
        Atlas::open(path).unwrap()
    }

    /// Cut lines off the tile grid, borders and mips across them: the grid bakes to the
    /// very tiles of the whole image, from memory and from PNG files read row by row.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_grid_bakes_to_the_same_tiles_as_the_whole_image() {
        let dir = tempfile::tempdir().unwrap();
        let texels = image(300, 200);
        for wrap in [Wrap::Clamp, Wrap::Repeat] {
            let whole = bake_one(
                &dir.path().join("whole.tsa"),
                Box::new(ImageSource::from_rgba(300, 200, texels.clone())),
                wrap,
            );
            let layout = whole.layers()[0].layout;
            for (name, images) in [("memory", in_memory(&texels)), ("png", png_files(dir.path(), &texels))] {
                let grid = GridSource::new(3, 2, images).unwrap();
                let atlas = bake_one(&dir.path().join(format!("{name}.tsa")), Box::new(grid), wrap);
                assert_eq!(atlas.layers()[0].layout, layout);
                for t in layout.tiles(0) {
                    let (a, b) = (whole.entry(t).unwrap(), atlas.entry(t).unwrap());
                    assert_eq!((a.crc32, a.length), (b.crc32, b.length), "{name} {wrap:?} tile {t}");
                }
            }
        }
    }
}
