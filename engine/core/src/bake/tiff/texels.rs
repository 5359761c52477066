//! Decoded TIFF samples to RGBA8 texels: colours (16-bit rounded to 8), data rasters
//! rescaled from their value range, GDAL nodata and alpha bands as transparency; and
//! the GDAL tags that say which values are nodata and what range a raster spans.

use ::tiff::decoder::DecodingResult;

use crate::bake::source::{DataScale, TEXEL_BYTES};

/// The type of one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sample {
    /// 8-bit unsigned.
    U8,
    /// 16-bit unsigned.
    U16,
    /// 16-bit signed.
    I16,
    /// 32-bit IEEE floating point.
    F32,
}

impl Sample {
    /// Bytes per sample.
    pub(super) fn bytes(self) -> usize {
        match self {
            Sample::U8 => 1,
            Sample::U16 | Sample::I16 => 2,
            Sample::F32 => 4,
        }
    }

    /// The type's name, as GDAL calls it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Sample::U8 => "Byte",
            Sample::U16 => "UInt16",
            Sample::I16 => "Int16",
            Sample::F32 => "Float32",
        }
    }
}

/// What the samples of a texel mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Texels {
    Gray,
    GrayAlpha,
    Rgb,
    Rgba,
    /// One band of values (a DEM, a measurement), followed by alpha when `alpha`:
    /// rescaled from the raster's range to 0..=255 by its [`DataScale`].
    Data {
        alpha: bool,
    },
}

impl Texels {
    /// Samples of a texel that hold colour or value (not alpha).
    fn colour_samples(self) -> usize {
        match self {
            Texels::Gray | Texels::GrayAlpha | Texels::Data { .. } => 1,
            Texels::Rgb | Texels::Rgba => 3,
        }
    }

    /// Whether the last sample is alpha.
    fn alpha(self) -> bool {
        matches!(self, Texels::GrayAlpha | Texels::Rgba | Texels::Data { alpha: true })
    }
}

/// How one decoded chunk's samples become texels.
#[derive(Clone, Copy, Debug)]
pub(super) struct Conversion<'a> {
    pub(super) texels: Texels,
    /// Samples per texel in the decoded chunk.
    pub(super) samples: usize,
    /// GDAL's nodata value as a value of the samples' type (what GDAL compares with):
    /// texels whose colour samples all equal it are transparent.
    pub(super) nodata: Option<f64>,
    /// The rescaling of a data raster ([`Texels::Data`]).
    pub(super) data: Option<&'a DataScale>,
}

/// Converts `len` samples of `chunk` from sample `from` (whole texels of one row) to
/// RGBA8 texels in `out`; an error names a sample type the conversion does not take.
pub(super) fn to_rgba(
    chunk: &DecodingResult,
    from: usize,
    len: usize,
    c: &Conversion<'_>,
    out: &mut [u8],
) -> Result<(), String> {
    let range = from..from + len;
    match chunk {
        DecodingResult::U8(v) => expand(&v[range], c, |s| s, out),
        DecodingResult::U16(v) => expand(&v[range], c, to_8bit, out),
        DecodingResult::I16(v) if c.data.is_some() => expand(&v[range], c, |_| 0, out),
        DecodingResult::F32(v) if c.data.is_some() => expand(&v[range], c, |_| 0, out),
        _ => return Err("unexpected sample type".into()),
    }
    Ok(())
}

/// Converts one row of decoded samples to RGBA8 texels (`to8` makes a colour sample 8-bit).
fn expand<T: Copy + Into<f64>>(src: &[T], c: &Conversion<'_>, to8: impl Fn(T) -> u8, out: &mut [u8]) {
    let colour = c.texels.colour_samples();
    let alpha = c.texels.alpha();
    for (px, o) in src.chunks_exact(c.samples).zip(out.chunks_exact_mut(TEXEL_BYTES)) {
        let is_nodata = |px: &[T]| c.nodata.is_some_and(|nd| px[..colour].iter().all(|&s| s.into() == nd));
        let texel = match (c.texels, c.data) {
            (Texels::Data { .. }, Some(d)) => {
                let v: f64 = px[0].into();
                let hidden = v.is_nan() || is_nodata(px) || (alpha && px[c.samples - 1].into() == 0.0);
                if hidden {
                    [0; 4]
                } else {
                    let t = d.texel(v);
                    [t, t, t, 255]
                }
            }
            _ if is_nodata(px) => [0; 4],
            (Texels::Gray | Texels::Data { .. }, _) => {
                let v = to8(px[0]);
                [v, v, v, 255]
            }
            (Texels::GrayAlpha, _) => {
                let v = to8(px[0]);
                [v, v, v, to8(px[c.samples - 1])]
            }
            (Texels::Rgb, _) => [to8(px[0]), to8(px[1]), to8(px[2]), 255],
            (Texels::Rgba, _) => [to8(px[0]), to8(px[1]), to8(px[2]), to8(px[3])],
        };
        o.copy_from_slice(&texel);
    }
}

/// A 16-bit sample rounded to 8 bits.
fn to_8bit(v: u16) -> u8 {
    ((u32::from(v) * 255 + 32767) / 65535) as u8
}

/// Widens `range` (smallest, largest) to the values of a data raster's decoded chunk
/// (its first `w` texels of each of `h` rows of `line` samples), leaving out NaN, nodata
/// and texels whose alpha is 0.
pub(super) fn fold_range(
    chunk: &DecodingResult,
    c: &Conversion<'_>,
    rows: (usize, usize),
    range: &mut Option<(f64, f64)>,
) {
    fn fold<T: Copy + Into<f64>>(
        v: &[T],
        c: &Conversion<'_>,
        (line, h): (usize, usize),
        range: &mut Option<(f64, f64)>,
    ) {
        let alpha = c.texels.alpha();
        for row in v.chunks(line).take(h) {
            for px in row.chunks_exact(c.samples) {
                let x: f64 = px[0].into();
                if x.is_nan() || c.nodata == Some(x) || (alpha && px[c.samples - 1].into() == 0.0) {
                    continue;
                }
                *range = Some(range.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))));
            }
        }
    }
    match chunk {
        DecodingResult::U8(v) => fold(v, c, rows, range),
        DecodingResult::U16(v) => fold(v, c, rows, range),
        DecodingResult::I16(v) => fold(v, c, rows, range),
        DecodingResult::F32(v) => fold(v, c, rows, range),
        _ => {}
    }
}

/// GDAL's nodata value (the GDAL_NODATA tag's text) as a value of `sample`'s type, as
/// GDAL compares it; `None` when the text is no number or no value of the type (a
/// nodata of -9999 on unsigned samples marks nothing). `nan` is NaN, which data
/// rasters hide anyway.
pub(super) fn nodata_value(text: &str, sample: Sample) -> Option<f64> {
    let t = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    let v: f64 = if t.eq_ignore_ascii_case("nan") { f64::NAN } else { t.parse().ok()? };
    match sample {
        Sample::F32 => Some(f64::from(v as f32)),
        Sample::U8 => (v.fract() == 0.0 && (0.0..=255.0).contains(&v)).then_some(v),
        Sample::U16 => (v.fract() == 0.0 && (0.0..=65535.0).contains(&v)).then_some(v),
        Sample::I16 => (v.fract() == 0.0 && (-32768.0..=32767.0).contains(&v)).then_some(v),
    }
}

/// The exact minimum and maximum of band 1 that GDAL stored in the GDAL_METADATA tag
/// (`STATISTICS_MINIMUM` / `STATISTICS_MAXIMUM`, written by `gdal_translate -stats` or
/// `gdalinfo -stats`); `None` when absent, or when GDAL says they are approximate.
pub(super) fn gdal_statistics(xml: &str) -> Option<(f64, f64)> {
    let item = |name: &str| -> Option<&str> {
        // <Item name="STATISTICS_MINIMUM" sample="0" role="...">0</Item>
        let mut rest = xml;
        while let Some(at) = rest.find("<Item ") {
            let tail = &rest[at..];
            let close = tail.find('>')?;
            let head = &tail[..close];
            let body_end = tail.find("</Item>")?;
            let body = tail.get(close + 1..body_end)?;
            let named = head.contains(&format!("name=\"{name}\""));
            let band1 = !head.contains("sample=") || head.contains("sample=\"0\"");
            if named && band1 {
                return Some(body.trim());
            }
            rest = &tail[body_end..];
        }
        None
    };
    if item("STATISTICS_APPROXIMATE").is_some_and(|v| v.eq_ignore_ascii_case("yes")) {
        return None;
    }
    let min: f64 = item("STATISTICS_MINIMUM")?.parse().ok()?;
    let max: f64 = item("STATISTICS_MAXIMUM")?.parse().ok()?;
    (min.is_finite() && max.is_finite() && min <= max).then_some((min, max))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn gdal_metadata_statistics_are_read_for_band_one_only_when_exact() {
        let xml = r#"<GDALMetadata>
  <Item name="STATISTICS_MAXIMUM" sample="1">9</Item>
  <Item name="STATISTICS_MAXIMUM" sample="0">2999.5</Item>
  <Item name="STATISTICS_MEAN" sample="0">1000</Item>
  <Item name="STATISTICS_MINIMUM" sample="0">-12</Item>
</GDALMetadata>"#;
        assert_eq!(gdal_statistics(xml), Some((-12.0, 2999.5)));
        let approx = xml.replace(
            "<GDALMetadata>",
            r#"<GDALMetadata><Item name="STATISTICS_APPROXIMATE" sample="0">YES</Item>"#,
        );
        assert_eq!(gdal_statistics(&approx), None);
        assert_eq!(gdal_statistics("<GDALMetadata></GDALMetadata>"), None);
        assert_eq!(gdal_statistics(r#"<Item name="STATISTICS_MINIMUM" sample="0">x</Item>"#), None);
    }

    #[test]
    fn nodata_is_a_value_of_the_sample_type() {
        assert_eq!(nodata_value("-9999\0", Sample::I16), Some(-9999.0));
        assert_eq!(nodata_value("-9999", Sample::U16), None);
        assert_eq!(nodata_value(" 0 ", Sample::U8), Some(0.0));
        assert_eq!(nodata_value("-3.40282346638529e+38", Sample::F32), Some(f64::from(f32::MIN)));
        assert!(nodata_value("nan", Sample::F32).unwrap().is_nan());
        assert_eq!(nodata_value("none", Sample::F32), None);
    }

    #[test]
    fn data_rasters_rescale_and_hide_nodata() {
        let scale = DataScale::spanning("Int16", -100.0, 155.0, Some(-9999.0));
        let c = Conversion {
            texels: Texels::Data { alpha: false },
            samples: 1,
            nodata: Some(-9999.0),
            data: Some(&scale),
        };
        let chunk = DecodingResult::I16(vec![-100, 0, 155, -9999]);
        let mut out = [1u8; 16];
        to_rgba(&chunk, 0, 4, &c, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 255, 100, 100, 100, 255, 255, 255, 255, 255, 0, 0, 0, 0]);
        let mut range = None;
        fold_range(&chunk, &c, (4, 1), &mut range);
        assert_eq!(range, Some((-100.0, 155.0)));
        // Colour rasters: a texel is nodata when all its colour samples are.
        let c = Conversion { texels: Texels::Rgb, samples: 3, nodata: Some(0.0), data: None };
        to_rgba(&DecodingResult::U8(vec![0, 0, 0, 0, 5, 0]), 0, 6, &c, &mut out[..8]).unwrap();
        assert_eq!(out[..8], [0, 0, 0, 0, 0, 5, 0, 255]);
        // Floats only as data.
        assert!(to_rgba(&DecodingResult::F32(vec![1.0; 3]), 0, 3, &c, &mut out[..4]).is_err());
    }
}
