//! Images placed at texel offsets of one layer: GeoTIFFs placed by their geotransforms
//! (`--grid` without COLSxROWS), or the sources of a GDAL VRT mosaic. Texels no image
//! covers are transparent black (0, 0, 0, 0); images may not overlap.

use crate::bake::grid::GridError;
use crate::bake::source::{RowSource, SourceOrigin, TEXEL_BYTES};
use crate::format::atlas::{ColorSpace, GeoReference, LayerMeta, RasterType};
use crate::format::tile::MAX_VIRTUAL_SIDE;

/// A texel offset must lie this close to a whole texel to count as aligned.
const ALIGN_TEXELS: f64 = 1e-3;
/// Texel sizes that differ by less than this fraction are the same resolution.
const SAME_RESOLUTION: f64 = 1e-9;

/// One image of a [`PlacedSource`]: the rectangle `src` (x, y, width, height) of `source`
/// lies with its top-left texel at `dst` (x, y) of the layer.
pub struct Placement {
    /// The image.
    pub source: Box<dyn RowSource>,
    /// The rectangle of the image that is placed: x, y, width, height.
    pub src: [u32; 4],
    /// Where its top-left texel lies in the layer.
    pub dst: [u32; 2],
}

/// Images placed at texel offsets of one `width × height` layer (see the module docs).
pub struct PlacedSource {
    width: u32,
    height: u32,
    placements: Vec<Placement>,
    meta: LayerMeta,
}

impl std::fmt::Debug for PlacedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedSource")
            .field("size", &(self.width, self.height))
            .field("offsets", &self.offsets())
            .field("meta", &self.meta)
            .finish()
    }
}

/// An image in messages: its file, else its place in the list.
pub(super) fn name_of(image: &dyn RowSource, i: usize) -> String {
    match image.origin() {
        Some(SourceOrigin::File(path)) => path.display().to_string(),
        _ => format!("image {}", i + 1),
    }
}

impl PlacedSource {
    /// A layer of `width × height` texels holding `placements`, which say `meta` of it.
    /// Each rectangle must lie inside its image and the layer, and no two may overlap.
    pub fn new(
        width: u32,
        height: u32,
        placements: Vec<Placement>,
        meta: LayerMeta,
    ) -> Result<Self, GridError> {
        let too_large = width > MAX_VIRTUAL_SIDE || height > MAX_VIRTUAL_SIDE;
        if too_large || width == 0 || height == 0 {
            return Err(GridError::Placement {
                image: "the mosaic".into(),
                reason: format!("{width}x{height} texels (1 to {MAX_VIRTUAL_SIDE} a side)"),
            });
        }
        for (i, p) in placements.iter().enumerate() {
            let [sx, sy, sw, sh] = p.src.map(u64::from);
            let (iw, ih) = p.source.size();
            let (dx, dy) = (u64::from(p.dst[0]), u64::from(p.dst[1]));
            let bad = |reason: String| GridError::Placement { image: name_of(p.source.as_ref(), i), reason };
            if sw == 0 || sh == 0 || sx + sw > u64::from(iw) || sy + sh > u64::from(ih) {
                return Err(bad(format!("rectangle {:?} is not inside the {iw}x{ih} image", p.src)));
            }
            if dx + sw > u64::from(width) || dy + sh > u64::from(height) {
                return Err(bad(format!(
                    "placed at {:?}, it reaches past the {width}x{height} mosaic",
                    p.dst
                )));
            }
            let overlap = placements[..i].iter().position(|q| {
                let (qx, qy) = (u64::from(q.dst[0]), u64::from(q.dst[1]));
                dx < qx + u64::from(q.src[2]) && qx < dx + sw && dy < qy + u64::from(q.src[3]) && qy < dy + sh
            });
            if let Some(j) = overlap {
                return Err(bad(format!(
                    "overlaps {} (a mosaic's images may not overlap)",
                    name_of(placements[j].source.as_ref(), j)
                )));
            }
        }
        Ok(Self { width, height, placements, meta })
    }

    /// GeoTIFFs placed by their geotransforms: every image must be georeferenced, in
    /// one CRS, raster type and resolution, unrotated, with its origin on the texel grid
    /// of the others. The layer spans them all (gaps transparent); its metadata holds the
    /// mosaic's geotransform and the first image's GeoKeys. The order of `images` does
    /// not matter. A mismatch is an error naming the file.
    pub fn by_geotransform(images: Vec<Box<dyn RowSource>>) -> Result<Self, GridError> {
        let geos: Vec<GeoReference> = images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                let bad = |reason: &str| GridError::Placement {
                    image: name_of(image.as_ref(), i),
                    reason: reason.to_string(),
                };
                let geo = image.layer_meta().geo.ok_or_else(|| {
                    bad("not georeferenced (no GeoTIFF tags): --grid without COLSxROWS places GeoTIFFs by \
                         their geotransforms; give COLSxROWS to lay out other images")
                })?;
                match geo.geotransform {
                    None => Err(bad("a GeoTIFF without a geotransform (ground control points only)")),
                    Some(g) if g[2] != 0.0 || g[4] != 0.0 => {
                        Err(bad("its geotransform is rotated or sheared: only north-up images form a grid"))
                    }
                    Some(g) if g[1] <= 0.0 || g[5] >= 0.0 => Err(bad(
                        "its geotransform is not north-up (texel width > 0 and height < 0): cannot place it",
                    )),
                    Some(_) => Ok(geo),
                }
            })
            .collect::<Result<_, _>>()?;
        let Some(first) = geos.first() else {
            return Err(GridError::Placement {
                image: "the mosaic".into(),
                reason: "no images to place".into(),
            });
        };
        let name = |i: usize| name_of(images[i].as_ref(), i);
        let gt0 = first.geotransform.unwrap_or_default();
        let crs = |g: &GeoReference| {
            (
                g.epsg,
                g.epsg.is_none().then(|| (g.tags.geo_key_directory.clone(), g.tags.geo_ascii_params.clone())),
            )
        };
        let describe_crs =
            |g: &GeoReference| g.epsg.map_or("a CRS without an EPSG code".into(), |c| format!("EPSG:{c}"));
        let same = |a: f64, b: f64| (a - b).abs() <= SAME_RESOLUTION * a.abs().max(b.abs());
        let (mut min_x, mut max_y) = (f64::INFINITY, f64::NEG_INFINITY);
        for (i, g) in geos.iter().enumerate() {
            let gt = g.geotransform.unwrap_or_default();
            let bad = |reason: String| GridError::Placement { image: name(i), reason };
            if crs(g) != crs(first) {
                return Err(bad(format!(
                    "is in {}, but {} is in {}",
                    describe_crs(g),
                    name(0),
                    describe_crs(first)
                )));
            }
            if g.raster_type.unwrap_or(RasterType::PixelIsArea)
                != first.raster_type.unwrap_or(RasterType::PixelIsArea)
            {
                return Err(bad(format!(
                    "has raster type {:?}, {} {:?}",
                    g.raster_type,
                    name(0),
                    first.raster_type
                )));
            }
            if !same(gt[1], gt0[1]) || !same(gt[5], gt0[5]) {
                return Err(bad(format!(
                    "has texels of {} x {}, {} of {} x {}: the images of a grid share one resolution",
                    gt[1],
                    -gt[5],
                    name(0),
                    gt0[1],
                    -gt0[5]
                )));
            }
            min_x = min_x.min(gt[0]);
            max_y = max_y.max(gt[3]);
        }
        let mut placements = Vec::with_capacity(images.len());
        let (mut width, mut height) = (0u64, 0u64);
        for (i, (image, g)) in images.into_iter().zip(&geos).enumerate() {
            let gt = g.geotransform.unwrap_or_default();
            let bad = |reason: String| GridError::Placement { image: name_of(image.as_ref(), i), reason };
            let (fx, fy) = ((gt[0] - min_x) / gt0[1], (gt[3] - max_y) / gt0[5]);
            let (cx, cy) = (fx.round(), fy.round());
            if (fx - cx).abs() > ALIGN_TEXELS || (fy - cy).abs() > ALIGN_TEXELS {
                return Err(bad(format!(
                    "its origin lies {:.3} x {:.3} texels from the mosaic's: not on the texel grid of the others",
                    fx, fy
                )));
            }
            if cx > f64::from(MAX_VIRTUAL_SIDE) || cy > f64::from(MAX_VIRTUAL_SIDE) {
                return Err(bad(format!("its origin lies {cx} x {cy} texels from the mosaic's: too far")));
            }
            let (w, h) = image.size();
            let dst = [cx as u32, cy as u32];
            width = width.max(u64::from(dst[0]) + u64::from(w));
            height = height.max(u64::from(dst[1]) + u64::from(h));
            placements.push(Placement { source: image, src: [0, 0, w, h], dst });
        }
        let mut meta = placements[0].source.layer_meta();
        meta.geo = Some(mosaic_geo(first, min_x, max_y));
        let side = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Self::new(side(width), side(height), placements, meta)
    }

    /// Image `i` in messages: its file, else its place in the list.
    pub fn name(&self, i: usize) -> String {
        self.placements.get(i).map_or_else(|| format!("image {}", i + 1), |p| name_of(p.source.as_ref(), i))
    }

    /// Where each image lies in the layer, in the order given.
    pub fn offsets(&self) -> Vec<[u32; 2]> {
        self.placements.iter().map(|p| p.dst).collect()
    }
}

/// The georeference of a mosaic whose top-left corner is `(x0, y0)`, of `first`'s CRS,
/// raster type and resolution: its geotransform, and tiepoint and pixel scale tags to match.
pub(crate) fn mosaic_geo(first: &GeoReference, x0: f64, y0: f64) -> GeoReference {
    let gt0 = first.geotransform.unwrap_or_default();
    let gt = [x0, gt0[1], 0.0, y0, 0.0, gt0[5]];
    let mut geo = first.clone();
    geo.geotransform = Some(gt);
    // A point raster's tiepoint names the first texel's centre.
    let half = if first.raster_type == Some(RasterType::PixelIsPoint) { 0.5 } else { 0.0 };
    geo.tags.model_tiepoint = Some(vec![0.0, 0.0, 0.0, x0 + half * gt[1], y0 + half * gt[5], 0.0]);
    geo.tags.model_pixel_scale = Some(vec![gt[1], -gt[5], 0.0]);
    geo.tags.model_transformation = None;
    geo
}

impl RowSource for PlacedSource {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        let row_bytes = self.width as usize * TEXEL_BYTES;
        let rows = out.len() / row_bytes;
        let end = u64::from(y0) + rows as u64;
        if !out.len().is_multiple_of(row_bytes) || end > u64::from(self.height) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("rows {y0}..{end} lie outside the {}x{} mosaic", self.width, self.height),
            ));
        }
        out.fill(0);
        let end = end as u32;
        let mut part = Vec::new();
        for p in &self.placements {
            let [sx, sy, sw, sh] = p.src;
            let (top, bottom) = (p.dst[1].max(y0), (p.dst[1] + sh).min(end));
            if top >= bottom {
                continue;
            }
            let image_row = p.source.size().0 as usize * TEXEL_BYTES;
            part.resize((bottom - top) as usize * image_row, 0);
            p.source.read_rows(sy + top - p.dst[1], &mut part)?;
            let (from, to) = (sx as usize * TEXEL_BYTES, p.dst[0] as usize * TEXEL_BYTES);
            let len = sw as usize * TEXEL_BYTES;
            let dst_rows = out[(top - y0) as usize * row_bytes..(bottom - y0) as usize * row_bytes]
                .chunks_exact_mut(row_bytes);
            for (src, dst) in part.chunks_exact(image_row).zip(dst_rows) {
                dst[to..to + len].copy_from_slice(&src[from..from + len]);
            }
        }
        Ok(())
    }

    fn color_space(&self) -> Option<ColorSpace> {
        self.placements.iter().find_map(|p| p.source.color_space())
    }

    fn data_scale(&self) -> Option<crate::bake::source::DataScale> {
        self.placements.first().and_then(|p| p.source.data_scale())
    }

    fn layer_meta(&self) -> LayerMeta {
        self.meta.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::bake::source::ImageSource;

    /// A `w × h` image of texels `[x, y, tag, 255]` georeferenced at `(x0, y0)` with
    /// `res`-unit texels in `epsg`.
    struct Geo {
        image: ImageSource,
        geo: GeoReference,
    }

    impl RowSource for Geo {
        fn size(&self) -> (u32, u32) {
            self.image.size()
        }
        fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
            self.image.read_rows(y0, out)
        }
        fn layer_meta(&self) -> LayerMeta {
            LayerMeta { geo: Some(self.geo.clone()), ..LayerMeta::default() }
        }
    }

    fn geo(w: u32, h: u32, tag: u8, origin: (f64, f64), res: f64, epsg: u32) -> Box<dyn RowSource> {
        let texels = (0..w * h).flat_map(|i| [(i % w) as u8, (i / w) as u8, tag, 255]).collect();
        Box::new(Geo {
            image: ImageSource::from_rgba(w, h, texels),
            geo: GeoReference {
                geotransform: Some([origin.0, res, 0.0, origin.1, 0.0, -res]),
                epsg: Some(epsg),
                ..GeoReference::default()
            },
        })
    }

    #[test]
    fn images_land_where_their_geotransforms_say_in_any_order_with_gaps_transparent() {
        // Three of a 2x2 grid of 3x2 images, 0.5 units a texel; the top-right one missing.
        let images = vec![
            geo(3, 2, 3, (101.5, 50.0), 0.5, 4326),
            geo(3, 2, 1, (100.0, 51.0), 0.5, 4326),
            geo(3, 2, 2, (100.0, 50.0), 0.5, 4326),
        ];
        let m = PlacedSource::by_geotransform(images).unwrap();
        assert_eq!(m.size(), (6, 4));
        assert_eq!(m.offsets(), vec![[3, 2], [0, 0], [0, 2]]);
        let mut out = vec![0u8; 6 * 4 * 4];
        m.read_rows(0, &mut out).unwrap();
        let at = |x: usize, y: usize| &out[(y * 6 + x) * 4..(y * 6 + x) * 4 + 4];
        assert_eq!(at(1, 1), [1, 1, 1, 255]);
        assert_eq!(at(4, 0), [0, 0, 0, 0], "the gap is transparent");
        assert_eq!(at(5, 3), [2, 1, 3, 255]);
        assert_eq!(at(0, 2), [0, 0, 2, 255]);
        let mut band = vec![0u8; 6 * 4];
        m.read_rows(3, &mut band).unwrap();
        assert_eq!(band, out[3 * 24..]);
        let g = m.layer_meta().geo.unwrap();
        assert_eq!(g.geotransform, Some([100.0, 0.5, 0.0, 51.0, 0.0, -0.5]));
        assert_eq!(g.tags.model_tiepoint, Some(vec![0.0, 0.0, 0.0, 100.0, 51.0, 0.0]));
    }

    #[test]
    fn mismatches_name_the_file() {
        let err = |images| PlacedSource::by_geotransform(images).err().unwrap().to_string();
        let crs = err(vec![geo(2, 2, 0, (0.0, 0.0), 1.0, 4326), geo(2, 2, 0, (2.0, 0.0), 1.0, 3857)]);
        assert!(crs.contains("image 2: is in EPSG:3857, but image 1 is in EPSG:4326"), "{crs}");
        let res = err(vec![geo(2, 2, 0, (0.0, 0.0), 1.0, 4326), geo(2, 2, 0, (2.0, 0.0), 2.0, 4326)]);
        assert!(res.contains("image 2: has texels of 2 x 2"), "{res}");
        let off = err(vec![geo(2, 2, 0, (0.0, 0.0), 1.0, 4326), geo(2, 2, 0, (2.5, 0.0), 1.0, 4326)]);
        assert!(off.contains("image 2: its origin lies 2.500"), "{off}");
        let over = err(vec![geo(2, 2, 0, (0.0, 0.0), 1.0, 4326), geo(2, 2, 0, (1.0, 0.0), 1.0, 4326)]);
        assert!(over.contains("image 2: overlaps image 1"), "{over}");
        assert_eq!(err(vec![]), "the mosaic: no images to place");
        let plain = Box::new(ImageSource::from_rgba(1, 1, vec![0; 4]));
        let none = err(vec![geo(2, 2, 0, (0.0, 0.0), 1.0, 4326), plain]);
        assert!(none.contains("image 2: not georeferenced"), "{none}");
        let mut rotated =
            Geo { image: ImageSource::from_rgba(1, 1, vec![0; 4]), geo: GeoReference::default() };
        rotated.geo.geotransform = Some([0.0, 1.0, 0.1, 0.0, 0.0, -1.0]);
        assert!(err(vec![Box::new(rotated)]).contains("rotated"));
    }
}
