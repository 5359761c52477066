//! The atlas metadata record (header flag [`FLAG_META`](super::FLAG_META)): free,
//! bounded, CRC-covered facts about the atlas' layers that no tile holds, such as where
//! a GeoTIFF's texels lie on Earth. A small JSON object, specified in
//! `docs/atlas-format.md`, "Metadata record".
//!
//! Every field is optional, so a record names only what a bake knew. Keys this build does
//! not know are kept (in the `other` maps) and written back unchanged by merges and
//! splits, so a newer writer's facts survive an older tool; they are never interpreted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Largest metadata record (its JSON bytes) a writer writes and a reader accepts: 16 KiB,
/// so the head of a version-2 atlas still fits the first range request of a remote reader.
pub const MAX_META_BYTES: usize = 16 << 10;

/// Bytes before the JSON text of a metadata record: its length (u32).
pub const META_LEN_BYTES: usize = 4;

/// What an atlas says about itself beyond its layer table (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AtlasMeta {
    /// Per layer, in layer-table order: empty, or exactly one entry per layer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerMeta>,
    /// Keys this build does not know, kept as they were read.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// What the metadata record says about one layer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LayerMeta {
    /// Where the layer's texels lie: a GeoTIFF's georeferencing, carried through the bake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoReference>,
    /// For a data raster (a DEM: one band of 16-bit or float values), how its values map
    /// onto the layer's 8-bit texels, and which value was nodata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<DataScale>,
    /// Keys this build does not know, kept as they were read.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// How a data raster's values map onto 8-bit texels: `value = offset + scale × texel`
/// for a texel of 0..=255 (gray, in every colour channel); texels whose alpha is 0 hold
/// no value (nodata). The range `[min, max]` of the values is spread over 0..=255, so
/// one texel step is `scale` (the raster's range / 255).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataScale {
    /// The samples' type as GDAL names it: `UInt16`, `Int16`, `Float32`.
    pub sample: String,
    /// The smallest value of the raster (nodata left out).
    pub min: f64,
    /// The largest value of the raster (nodata left out).
    pub max: f64,
    /// Value of one texel step.
    pub scale: f64,
    /// Value of texel 0.
    pub offset: f64,
    /// The value that marked missing data in the file (GDAL's nodata), if any: those
    /// texels have alpha 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<f64>,
}

impl DataScale {
    /// The scale spreading `min..=max` over the texels 0..=255.
    pub fn spanning(sample: &str, min: f64, max: f64, nodata: Option<f64>) -> Self {
        let scale = if max > min { (max - min) / 255.0 } else { 0.0 };
        Self { sample: sample.to_string(), min, max, scale, offset: min, nodata }
    }

    /// The texel (0..=255) that holds `value`, clamped to the range.
    pub fn texel(&self, value: f64) -> u8 {
        if self.scale > 0.0 {
            ((value - self.offset) / self.scale).round().clamp(0.0, 255.0) as u8
        } else {
            0
        }
    }

    /// The value texel `t` stands for.
    pub fn value(&self, t: u8) -> f64 {
        self.offset + self.scale * f64::from(t)
    }
}

/// A GeoTIFF's georeferencing: what GDAL derives from it (geotransform, EPSG code,
/// raster type) and the GeoTIFF tags themselves, so that nothing is lost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GeoReference {
    /// The affine map from texel corners to model (CRS) coordinates in GDAL's order:
    /// `[x0, pixel_width, row_rotation, y0, column_rotation, pixel_height]`, so texel
    /// corner `(col, row)` lies at `x = x0 + col·gt[1] + row·gt[2]`,
    /// `y = y0 + col·gt[4] + row·gt[5]`. It describes texel *corners* whatever the
    /// raster type: for `PixelIsPoint` the tiepoint is moved by half a texel, as GDAL does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geotransform: Option<[f64; 6]>,
    /// The CRS as an EPSG code: `ProjectedCSTypeGeoKey` (3072), else
    /// `GeographicTypeGeoKey` (2048); `None` when the file names none (or a user-defined one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epsg: Option<u32>,
    /// `GTRasterTypeGeoKey` (1025): whether a texel is an area or a point sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raster_type: Option<RasterType>,
    /// The CRS as WKT, where the input states it so (a GDAL VRT's `<SRS>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wkt: Option<String>,
    /// The GeoTIFF tags as the file holds them.
    #[serde(skip_serializing_if = "GeoTiffTags::is_empty")]
    pub tags: GeoTiffTags,
    /// Keys this build does not know, kept as they were read.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `GTRasterTypeGeoKey`: what a texel's value stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RasterType {
    /// `RasterPixelIsArea` (1): a texel covers a cell; the geotransform's origin is a corner.
    PixelIsArea,
    /// `RasterPixelIsPoint` (2): a texel is a sample at a point.
    PixelIsPoint,
}

/// The GeoTIFF tags of a file, unchanged (each `None` when absent).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GeoTiffTags {
    /// `ModelPixelScaleTag` (33550): ScaleX, ScaleY, ScaleZ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_pixel_scale: Option<Vec<f64>>,
    /// `ModelTiepointTag` (33922): sextuples I, J, K, X, Y, Z.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_tiepoint: Option<Vec<f64>>,
    /// `ModelTransformationTag` (34264): a 4×4 matrix, row by row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_transformation: Option<Vec<f64>>,
    /// `GeoKeyDirectoryTag` (34735): the header (version, revision, minor, key count) and
    /// one quadruple (key, location, count, value or offset) per key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo_key_directory: Option<Vec<u16>>,
    /// `GeoDoubleParamsTag` (34736).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo_double_params: Option<Vec<f64>>,
    /// `GeoAsciiParamsTag` (34737), `|`-separated strings as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo_ascii_params: Option<String>,
}

impl GeoTiffTags {
    /// Whether no tag is present.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl GeoReference {
    /// The size of a texel in CRS units, `(width, height)`, both positive; `None`
    /// without a geotransform.
    pub fn pixel_size(&self) -> Option<(f64, f64)> {
        let g = self.geotransform?;
        Some((g[1].hypot(g[4]), g[2].hypot(g[5])))
    }

    /// The CRS coordinates `[min_x, min_y, max_x, max_y]` a `width × height` layer
    /// covers (the box around its four corners); `None` without a geotransform.
    pub fn bounds(&self, width: u32, height: u32) -> Option<[f64; 4]> {
        let g = self.geotransform?;
        let at = |c: f64, r: f64| (g[0] + c * g[1] + r * g[2], g[3] + c * g[4] + r * g[5]);
        let (w, h) = (f64::from(width), f64::from(height));
        let corners = [at(0.0, 0.0), at(w, 0.0), at(0.0, h), at(w, h)];
        let fold = |f: fn(f64, f64) -> f64, init: f64, pick: fn(&(f64, f64)) -> f64| {
            corners.iter().map(pick).fold(init, f)
        };
        Some([
            fold(f64::min, f64::INFINITY, |p| p.0),
            fold(f64::min, f64::INFINITY, |p| p.1),
            fold(f64::max, f64::NEG_INFINITY, |p| p.0),
            fold(f64::max, f64::NEG_INFINITY, |p| p.1),
        ])
    }
}

/// What `tessera inspect` shows of a layer's georeference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeoSummary {
    /// The CRS as `EPSG:code`, when the file names one.
    pub crs: Option<String>,
    /// The EPSG code.
    pub epsg: Option<u32>,
    /// GDAL's geotransform (see [`GeoReference::geotransform`]).
    pub geotransform: Option<[f64; 6]>,
    /// A texel's width and height in CRS units.
    pub pixel_size: Option<[f64; 2]>,
    /// The layer's extent in CRS units: `[min_x, min_y, max_x, max_y]`.
    pub bounds: Option<[f64; 4]>,
    /// Area or point texels.
    pub raster_type: Option<RasterType>,
}

impl GeoReference {
    /// The summary of this georeference for a `width × height` layer.
    pub fn summary(&self, width: u32, height: u32) -> GeoSummary {
        GeoSummary {
            crs: self.epsg.map(|c| format!("EPSG:{c}")),
            epsg: self.epsg,
            geotransform: self.geotransform,
            pixel_size: self.pixel_size().map(|(w, h)| [w, h]),
            bounds: self.bounds(width, height),
            raster_type: self.raster_type,
        }
    }
}

impl AtlasMeta {
    /// Whether the record would say nothing (a writer then writes none, and no flag).
    pub fn is_empty(&self) -> bool {
        self.other.is_empty() && self.layers.iter().all(LayerMeta::is_empty)
    }

    /// The JSON text of the record, checked: at most [`MAX_META_BYTES`], and read back
    /// to the same value (a non-finite number, which JSON cannot hold, fails), with
    /// `layer_count` entries in `layers` unless it is empty.
    pub fn encode(&self, layer_count: usize) -> Result<Vec<u8>, String> {
        let text = serde_json::to_vec(self).map_err(|e| format!("metadata record: {e}"))?;
        if text.len() > MAX_META_BYTES {
            return Err(format!("metadata record of {} bytes (limit {MAX_META_BYTES})", text.len()));
        }
        if !self.layers.is_empty() && self.layers.len() != layer_count {
            return Err(format!(
                "metadata record: {} layer entries for {layer_count} layers",
                self.layers.len()
            ));
        }
        let lost = "metadata record: a value does not survive JSON (a non-finite number?)";
        match Self::decode(&text, layer_count) {
            Ok(back) if back == *self => Ok(text),
            Ok(_) => Err(lost.into()),
            Err(e) => Err(format!("{lost}: {e}")),
        }
    }

    /// The record whose JSON text is `text`, for an atlas of `layer_count` layers: a JSON
    /// object of at most [`MAX_META_BYTES`] whose known keys have their types, and whose
    /// `layers`, when present, has one entry per layer. The error says what is wrong.
    pub fn decode(text: &[u8], layer_count: usize) -> Result<Self, String> {
        if text.len() > MAX_META_BYTES {
            return Err(format!("metadata record of {} bytes (limit {MAX_META_BYTES})", text.len()));
        }
        if text.first() != Some(&b'{') {
            return Err("metadata record: not a JSON object".into());
        }
        let meta: Self = serde_json::from_slice(text).map_err(|e| format!("metadata record: {e}"))?;
        if !meta.layers.is_empty() && meta.layers.len() != layer_count {
            return Err(format!(
                "metadata record: {} layer entries for {layer_count} layers",
                meta.layers.len()
            ));
        }
        Ok(meta)
    }
}

/// The record as it lies in the file: its length (u32), then its JSON `text`.
pub(super) fn record_bytes(text: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(META_LEN_BYTES + text.len());
    b.extend_from_slice(&(text.len() as u32).to_le_bytes());
    b.extend_from_slice(text);
    b
}

/// The length in bytes of the record at the start of `b` (length prefix included),
/// checked against [`MAX_META_BYTES`] and against the bytes `b` holds.
pub(super) fn record_len(b: &[u8]) -> Result<usize, String> {
    let Some(len) = b.get(..META_LEN_BYTES) else {
        return Err("metadata record: past the bytes read at open".into());
    };
    let n = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if !(2..=MAX_META_BYTES).contains(&n) {
        return Err(format!("metadata record of {n} bytes (2 to {MAX_META_BYTES})"));
    }
    if META_LEN_BYTES + n > b.len() {
        return Err(format!("metadata record of {n} bytes: past the bytes read at open"));
    }
    Ok(META_LEN_BYTES + n)
}

impl LayerMeta {
    /// Whether this says nothing about its layer.
    pub fn is_empty(&self) -> bool {
        self.geo.is_none() && self.data.is_none() && self.other.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn geo() -> GeoReference {
        GeoReference {
            geotransform: Some([10.0, 0.1, 0.0, 50.0, 0.0, -0.1]),
            epsg: Some(4326),
            raster_type: Some(RasterType::PixelIsArea),
            tags: GeoTiffTags {
                model_pixel_scale: Some(vec![0.1, 0.1, 0.0]),
                model_tiepoint: Some(vec![0.0, 0.0, 0.0, 10.0, 50.0, 0.0]),
                geo_key_directory: Some(vec![1, 1, 0, 1, 2048, 0, 1, 4326]),
                geo_ascii_params: Some("WGS 84|".into()),
                ..GeoTiffTags::default()
            },
            wkt: Some("GEOGCS[\"WGS 84\"]".into()),
            other: BTreeMap::new(),
        }
    }

    #[test]
    fn a_record_round_trips_and_keeps_unknown_keys() {
        let text =
            br#"{"layers":[{"geo":{"epsg":32631,"later":[1,2]},"nodata_future":-9999},{}],"made_by":"v9"}"#;
        let meta = AtlasMeta::decode(text, 2).unwrap();
        assert_eq!(meta.layers[0].geo.as_ref().unwrap().epsg, Some(32631));
        assert_eq!(meta.layers[0].geo.as_ref().unwrap().other["later"], serde_json::json!([1, 2]));
        assert_eq!(meta.layers[0].other["nodata_future"], serde_json::json!(-9999));
        assert_eq!(meta.other["made_by"], serde_json::json!("v9"));
        let again = AtlasMeta::decode(&meta.encode(2).unwrap(), 2).unwrap();
        assert_eq!(again, meta);
        let m = AtlasMeta {
            layers: vec![LayerMeta { geo: Some(geo()), ..LayerMeta::default() }],
            ..AtlasMeta::default()
        };
        assert_eq!(AtlasMeta::decode(&m.encode(1).unwrap(), 1).unwrap(), m);
        assert!(AtlasMeta::default().is_empty() && !m.is_empty());
    }

    #[test]
    fn bad_records_are_refused_with_a_reason() {
        let err = |t: &[u8], n| AtlasMeta::decode(t, n).unwrap_err();
        assert!(err(b"[1]", 1).contains("not a JSON object"));
        assert!(err(br#"{"layers":[{},{}]}"#, 3).contains("2 layer entries for 3 layers"));
        assert!(err(br#"{"layers":[{"geo":{"epsg":"x"}}]}"#, 1).contains("metadata record"));
        assert!(err(br#"{"layers":"#, 1).contains("metadata record"));
        let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_META_BYTES));
        assert!(err(big.as_bytes(), 1).contains("limit"));
        // Writers refuse what JSON cannot carry, and too many layer entries.
        let mut g = geo();
        g.geotransform = Some([f64::NAN, 1.0, 0.0, 0.0, 0.0, -1.0]);
        let nan = AtlasMeta {
            layers: vec![LayerMeta { geo: Some(g), ..Default::default() }],
            ..Default::default()
        };
        assert!(nan.encode(1).unwrap_err().contains("does not survive"));
        assert!(nan.encode(2).is_err());
    }

    #[test]
    fn pixel_size_and_bounds_follow_the_geotransform() {
        let g = geo();
        assert_eq!(g.pixel_size(), Some((0.1, 0.1)));
        let b = g.bounds(100, 50).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(b[0], 10.0) && close(b[1], 45.0) && close(b[2], 20.0) && close(b[3], 50.0), "{b:?}");
        assert_eq!(GeoReference::default().bounds(1, 1), None);
    }
}
