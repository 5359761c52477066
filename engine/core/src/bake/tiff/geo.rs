//! GeoTIFF georeferencing: the model tags and GeoKeys of an image directory, kept as the
//! file holds them, and the geotransform, EPSG code and raster type GDAL derives from them.

use std::io::{Read, Seek};

use ::tiff::decoder::Decoder;
use ::tiff::decoder::ifd::Value;
use ::tiff::tags::Tag;

use crate::format::atlas::{GeoReference, GeoTiffTags, RasterType};

/// `GTRasterTypeGeoKey`.
const RASTER_TYPE_KEY: u16 = 1025;
/// `GeographicTypeGeoKey`.
const GEOGRAPHIC_TYPE_KEY: u16 = 2048;
/// `ProjectedCSTypeGeoKey`.
const PROJECTED_TYPE_KEY: u16 = 3072;
/// The GeoKey value for "user-defined" (no EPSG code).
const USER_DEFINED: u16 = 32767;
/// Most values a model tag or the GeoKey directory may hold here: far more than any
/// georeferencing needs (thousands of tiepoints are ground control points, which the
/// metadata record could not hold anyway).
const MAX_VALUES: usize = 4096;

/// The georeferencing of the image directory `decoder` is at: `None` when it has none of
/// the GeoTIFF tags. A tag of the wrong type, too long, with a non-finite number, or a
/// GeoKey directory that does not hold what it declares is an error naming the tag.
pub(super) fn read<R: Read + Seek>(decoder: &mut Decoder<R>) -> Result<Option<GeoReference>, String> {
    let tags = GeoTiffTags {
        model_pixel_scale: numbers(decoder, Tag::ModelPixelScaleTag, "ModelPixelScale (33550)")?,
        model_tiepoint: numbers(decoder, Tag::ModelTiepointTag, "ModelTiepoint (33922)")?,
        model_transformation: numbers(decoder, Tag::ModelTransformationTag, "ModelTransformation (34264)")?,
        geo_key_directory: match find(decoder, Tag::GeoKeyDirectoryTag, "GeoKeyDirectory (34735)")? {
            Some(v) => Some(bounded(v.into_u16_vec(), "GeoKeyDirectory (34735)")?),
            None => None,
        },
        geo_double_params: numbers(decoder, Tag::GeoDoubleParamsTag, "GeoDoubleParams (34736)")?,
        geo_ascii_params: match find(decoder, Tag::GeoAsciiParamsTag, "GeoAsciiParams (34737)")? {
            Some(v) => {
                let text = v.into_string().map_err(|e| format!("GeoTIFF tag GeoAsciiParams (34737): {e}"))?;
                if text.len() > MAX_VALUES {
                    return Err(format!("GeoTIFF tag GeoAsciiParams (34737): {} bytes", text.len()));
                }
                Some(text)
            }
            None => None,
        },
    };
    if tags.is_empty() {
        return Ok(None);
    }
    from_tags(tags).map(Some)
}

/// The georeference GDAL derives from `tags`: the geotransform from the model
/// transformation, else from one tiepoint and the pixel scale (several tiepoints are
/// ground control points: no geotransform), moved by half a texel for `PixelIsPoint`;
/// the EPSG code and raster type from the GeoKeys.
pub(crate) fn from_tags(tags: GeoTiffTags) -> Result<GeoReference, String> {
    let keys = match &tags.geo_key_directory {
        Some(dir) => geo_keys(dir)?,
        None => Vec::new(),
    };
    let short = |id: u16| keys.iter().find(|k| k.0 == id).map(|k| k.1);
    let code = |id: u16| short(id).filter(|&v| v != 0 && v != USER_DEFINED).map(u32::from);
    let epsg = code(PROJECTED_TYPE_KEY).or_else(|| code(GEOGRAPHIC_TYPE_KEY));
    let raster_type = match short(RASTER_TYPE_KEY) {
        Some(1) => Some(RasterType::PixelIsArea),
        Some(2) => Some(RasterType::PixelIsPoint),
        _ => None,
    };
    let mut gt = match (&tags.model_transformation, &tags.model_tiepoint, &tags.model_pixel_scale) {
        (Some(m), _, _) if m.len() == 16 => Some([m[3], m[0], m[1], m[7], m[4], m[5]]),
        (Some(m), _, _) => {
            return Err(format!("GeoTIFF tag ModelTransformation (34264): {} values, not 16", m.len()));
        }
        (None, Some(t), Some(s)) if t.len() == 6 && s.len() >= 2 => {
            let (w, h) = (s[0], -s[1]);
            Some([t[3] - t[0] * w, w, 0.0, t[4] - t[1] * h, 0.0, h])
        }
        (None, Some(t), _) if t.len() % 6 != 0 => {
            return Err(format!("GeoTIFF tag ModelTiepoint (33922): {} values, not sextuples", t.len()));
        }
        _ => None,
    };
    if let (Some(g), Some(RasterType::PixelIsPoint)) = (gt.as_mut(), raster_type) {
        // The tiepoint names a texel's centre; the geotransform names its corner.
        g[0] -= 0.5 * (g[1] + g[2]);
        g[3] -= 0.5 * (g[4] + g[5]);
    }
    Ok(GeoReference { geotransform: gt, epsg, raster_type, tags, ..GeoReference::default() })
}

/// The GeoKeys of `dir` held in the directory itself (location 0): `(key, value)`. Keys
/// stored in the double or ASCII parameters are kept in the raw tags only.
fn geo_keys(dir: &[u16]) -> Result<Vec<(u16, u16)>, String> {
    let bad = |why: String| format!("GeoTIFF tag GeoKeyDirectory (34735): {why}");
    if dir.len() < 4 {
        return Err(bad(format!("{} values, shorter than its header", dir.len())));
    }
    if dir[0] != 1 {
        return Err(bad(format!("key directory version {}, GeoTIFF 1.x has 1", dir[0])));
    }
    let n = usize::from(dir[3]);
    if dir.len() < 4 + 4 * n {
        return Err(bad(format!("declares {n} keys but holds {} values", dir.len())));
    }
    Ok(dir[4..4 + 4 * n].chunks_exact(4).filter(|k| k[1] == 0).map(|k| (k[0], k[3])).collect())
}

/// The tag `tag` of the current directory, if present; a read error names `name`.
fn find<R: Read + Seek>(decoder: &mut Decoder<R>, tag: Tag, name: &str) -> Result<Option<Value>, String> {
    decoder.find_tag(tag).map_err(|e| format!("GeoTIFF tag {name}: {e}"))
}

/// The numbers of tag `tag`, finite and at most [`MAX_VALUES`].
fn numbers<R: Read + Seek>(
    decoder: &mut Decoder<R>,
    tag: Tag,
    name: &str,
) -> Result<Option<Vec<f64>>, String> {
    let Some(v) = find(decoder, tag, name)? else { return Ok(None) };
    let values = bounded(v.into_f64_vec(), name)?;
    if let Some(bad) = values.iter().find(|x| !x.is_finite()) {
        return Err(format!("GeoTIFF tag {name}: {bad} is not a finite number"));
    }
    Ok(Some(values))
}

/// `values`, unless the tag had the wrong type or more than [`MAX_VALUES`] values.
fn bounded<T>(values: ::tiff::TiffResult<Vec<T>>, name: &str) -> Result<Vec<T>, String> {
    let values = values.map_err(|e| format!("GeoTIFF tag {name}: {e}"))?;
    if values.len() > MAX_VALUES {
        return Err(format!("GeoTIFF tag {name}: {} values (at most {MAX_VALUES})", values.len()));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::io::Cursor;

    use ::tiff::encoder::{TiffEncoder, colortype};

    use super::*;

    /// A 4×2 RGB TIFF in memory whose directory holds `tags` (written by `add`).
    fn tiff_with(
        add: impl FnOnce(
            &mut ::tiff::encoder::DirectoryEncoder<
                '_,
                &mut Cursor<Vec<u8>>,
                ::tiff::encoder::TiffKindStandard,
            >,
        ),
    ) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        {
            let mut enc = TiffEncoder::new(&mut out).unwrap();
            let mut image = enc.new_image::<colortype::RGB8>(4, 2).unwrap();
            add(image.encoder());
            image.write_data(&[0u8; 24]).unwrap();
        }
        out.into_inner()
    }

    fn read_bytes(b: Vec<u8>) -> Result<Option<GeoReference>, String> {
        read(&mut Decoder::new(Cursor::new(b)).unwrap())
    }

    #[test]
    fn tiepoint_and_scale_give_gdals_geotransform_and_keys_the_epsg_code() {
        let b = tiff_with(|e| {
            e.write_tag(Tag::ModelPixelScaleTag, &[0.5f64, 0.25, 0.0][..]).unwrap();
            e.write_tag(Tag::ModelTiepointTag, &[0.0f64, 0.0, 0.0, 100.0, 50.0, 0.0][..]).unwrap();
            // Version 1.1.0, 3 keys: raster type area, geographic 4326, a citation in ASCII.
            let dir: [u16; 16] = [1, 1, 0, 3, 1025, 0, 1, 1, 2048, 0, 1, 4326, 2049, 34737, 7, 0];
            e.write_tag(Tag::GeoKeyDirectoryTag, &dir[..]).unwrap();
            e.write_tag(Tag::GeoAsciiParamsTag, "WGS 84|").unwrap();
        });
        let g = read_bytes(b).unwrap().unwrap();
        assert_eq!(g.geotransform, Some([100.0, 0.5, 0.0, 50.0, 0.0, -0.25]));
        assert_eq!((g.epsg, g.raster_type), (Some(4326), Some(RasterType::PixelIsArea)));
        assert_eq!(g.tags.geo_ascii_params.as_deref(), Some("WGS 84|"));
        assert_eq!(g.tags.geo_key_directory.as_ref().unwrap().len(), 16);
    }

    #[test]
    fn a_transformation_wins_point_rasters_move_half_a_texel_and_projected_codes_come_first() {
        let m = [2.0f64, 0.5, 0.0, 1000.0, 0.25, -2.0, 0.0, 2000.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        let b = tiff_with(|e| {
            e.write_tag(Tag::ModelTransformationTag, &m[..]).unwrap();
            let dir: [u16; 16] = [1, 1, 0, 3, 1025, 0, 1, 2, 2048, 0, 1, 4326, 3072, 0, 1, 32631];
            e.write_tag(Tag::GeoKeyDirectoryTag, &dir[..]).unwrap();
        });
        let g = read_bytes(b).unwrap().unwrap();
        assert_eq!(g.epsg, Some(32631));
        assert_eq!(g.raster_type, Some(RasterType::PixelIsPoint));
        assert_eq!(g.geotransform, Some([1000.0 - 1.25, 2.0, 0.5, 2000.0 + 0.875, 0.25, -2.0]));
    }

    #[test]
    fn no_tags_is_none_and_bad_tags_are_named() {
        assert_eq!(read_bytes(tiff_with(|_| {})).unwrap(), None);
        let short =
            tiff_with(|e| e.write_tag(Tag::GeoKeyDirectoryTag, &[1u16, 1, 0, 5, 1025, 0, 1, 1][..]).unwrap());
        let err = read_bytes(short).unwrap_err();
        assert!(err.contains("GeoKeyDirectory (34735): declares 5 keys"), "{err}");
        let nan = tiff_with(|e| e.write_tag(Tag::ModelPixelScaleTag, &[f64::NAN, 1.0, 0.0][..]).unwrap());
        assert!(read_bytes(nan).unwrap_err().contains("ModelPixelScale (33550): NaN is not a finite"));
        let odd = tiff_with(|e| e.write_tag(Tag::ModelTransformationTag, &[1.0f64; 9][..]).unwrap());
        assert!(read_bytes(odd).unwrap_err().contains("9 values, not 16"));
        let long = tiff_with(|e| e.write_tag(Tag::ModelTiepointTag, &vec![0.0f64; 6 * 1000][..]).unwrap());
        assert!(read_bytes(long).unwrap_err().contains("at most 4096"));
        // Ground control points: tags kept, no geotransform.
        let gcps = tiff_with(|e| e.write_tag(Tag::ModelTiepointTag, &[0.0f64; 12][..]).unwrap());
        let g = read_bytes(gcps).unwrap().unwrap();
        assert_eq!((g.geotransform, g.tags.model_tiepoint.map(|t| t.len())), (None, Some(12)));
    }
}
