//! GDAL VRT mosaics (what `gdalbuildvrt` writes) read as a grid of their source files:
//! every band taking the same band of the same sources, each source placed without
//! scaling or resampling. Anything else is refused, naming the element or attribute
//! that is not supported.

use std::path::{Path, PathBuf};

use quick_xml::events::Event;

use crate::bake::grid::{PlacedSource, Placement, mosaic_geo};
use crate::bake::source::{RowSource, SourceError};
use crate::format::atlas::{GeoReference, LayerMeta};

/// Largest VRT file read (its XML, whole).
pub const MAX_VRT_BYTES: u64 = 16 << 20;
/// Deepest element nesting accepted (a VRT needs 4).
const MAX_DEPTH: usize = 16;
/// Most elements accepted.
const MAX_ELEMENTS: usize = 1 << 20;

/// One XML element: its name, attributes, text and children.
#[derive(Debug, Default)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<Element>,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Parses `text` into its root element, refusing a DOCTYPE (entities), unknown entity
/// references, more than [`MAX_DEPTH`] levels or [`MAX_ELEMENTS`] elements.
fn parse(text: &str) -> Result<Element, String> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut stack: Vec<Element> = vec![Element::default()];
    let mut count = 0usize;
    let start = |e: &quick_xml::events::BytesStart<'_>| -> Result<Element, String> {
        let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        let mut attrs = Vec::new();
        for a in e.attributes() {
            let a = a.map_err(|e| format!("attribute of <{name}>: {e}"))?;
            let value = a
                .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .map_err(|e| format!("attribute of <{name}>: {e}"))?;
            attrs.push((String::from_utf8_lossy(a.key.as_ref()).into_owned(), value.into_owned()));
        }
        Ok(Element { name, attrs, ..Element::default() })
    };
    loop {
        let at = reader.buffer_position();
        let event = reader.read_event().map_err(|e| format!("XML at byte {at}: {e}"))?;
        let top = stack.len() - 1;
        match event {
            Event::Start(e) | Event::Empty(e) if count >= MAX_ELEMENTS || stack.len() > MAX_DEPTH => {
                let _ = e;
                return Err(format!("more than {MAX_ELEMENTS} elements or {MAX_DEPTH} levels"));
            }
            Event::Start(e) => {
                count += 1;
                stack.push(start(&e)?);
            }
            Event::Empty(e) => {
                count += 1;
                let el = start(&e)?;
                stack[top].children.push(el);
            }
            Event::End(_) => {
                let done = stack.pop().ok_or("unbalanced end tag")?;
                stack.last_mut().ok_or("unbalanced end tag")?.children.push(done);
            }
            Event::Text(t) => {
                stack[top].text.push_str(&t.decode().map_err(|e| format!("text at byte {at}: {e}"))?)
            }
            Event::CData(t) => {
                stack[top].text.push_str(&t.decode().map_err(|e| format!("text at byte {at}: {e}"))?)
            }
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref().map_err(|e| format!("reference at byte {at}: {e}"))? {
                    Some(c) => c,
                    None => match r.decode().map_err(|e| format!("reference at byte {at}: {e}"))?.as_ref() {
                        "amp" => '&',
                        "lt" => '<',
                        "gt" => '>',
                        "quot" => '"',
                        "apos" => '\'',
                        other => return Err(format!("unknown entity &{other}; at byte {at}")),
                    },
                };
                stack[top].text.push(c);
            }
            Event::DocType(_) => return Err("a DOCTYPE (entity declarations are not read)".into()),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    let mut doc = stack.pop().filter(|_| stack.is_empty()).ok_or("the file ends inside an element")?;
    match doc.children.len() {
        1 => Ok(doc.children.remove(0)),
        n => Err(format!("{n} root elements")),
    }
}

/// One source of a band: its file (as written and resolved), band and rectangles.
#[derive(Clone, Debug, PartialEq)]
struct Source {
    file: String,
    path: PathBuf,
    band: u32,
    src: [u32; 4],
    dst: [u32; 4],
    /// Its `<NODATA>` value, as written.
    nodata: Option<String>,
}

/// One `<VRTRasterBand>`: its number, `<NoDataValue>` (as written) and sources.
struct Band {
    number: u32,
    nodata: Option<String>,
    sources: Vec<Source>,
}

/// Opens the GDAL VRT at `path` as a mosaic of its source files (see the module docs),
/// reading their headers now. A source that is itself a VRT is refused.
pub fn open(path: &Path) -> Result<PlacedSource, SourceError> {
    let bytes = crate::bake::input_file::read_input(path, MAX_VRT_BYTES)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| SourceError::Vrt { path: path.to_path_buf(), reason: "not UTF-8 text".into() })?;
    open_text(path, text, |source| crate::bake::open::open_image_in_vrt(source, path))
}

/// The source files the GDAL VRT at `path` names, resolved as [`open`] resolves them,
/// for the bake stamp (a changed source makes the bake stale); `None` when `path` is not
/// a VRT this can parse.
pub fn source_files(path: &Path) -> Option<Vec<PathBuf>> {
    // Never a FIFO or a device (an open would block); only a VRT is read whole, other
    // inputs are told apart by their first bytes.
    crate::bake::input_file::check_input(path).ok()?;
    let mut head = Vec::with_capacity(32);
    std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::open(path).ok()?, 32), &mut head)
        .ok()?;
    if !head.trim_ascii_start().starts_with(b"<VRTDataset") {
        return None;
    }
    let bytes = crate::bake::input_file::read_input(path, MAX_VRT_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let root = parse(text).ok()?;
    let folder = path.parent().unwrap_or(Path::new(""));
    let mut files = Vec::new();
    for band in root.children.iter().filter(|c| c.name == "VRTRasterBand") {
        for name in band.children.iter().flat_map(|s| &s.children).filter(|c| c.name == "SourceFilename") {
            let relative = name.attr("relativeToVRT").is_some_and(|r| r.trim() == "1");
            let file = name.text.trim();
            let resolved = if relative { folder.join(file) } else { PathBuf::from(file) };
            if !files.contains(&resolved) {
                files.push(resolved);
            }
        }
    }
    Some(files)
}

/// Samples per texel of the TIFF at `path`; `None` when it is not a TIFF this can read.
fn tiff_samples(path: &Path) -> Option<usize> {
    let file = std::fs::File::open(path).ok()?;
    let colour = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ::tiff::decoder::Decoder::new(std::io::BufReader::new(file)).ok()?.colortype().ok()
    }))
    .ok()??;
    use ::tiff::ColorType as C;
    Some(match colour {
        C::Gray(_) => 1,
        C::GrayA(_) => 2,
        C::RGB(_) | C::YCbCr(_) | C::Lab(_) => 3,
        C::RGBA(_) | C::CMYK(_) => 4,
        _ => return None,
    })
}

/// The VRT at `path` (its XML `text`) as a mosaic of its sources, opened with `open`.
pub(crate) fn open_text(
    path: &Path,
    text: &str,
    open: impl Fn(&Path) -> Result<Box<dyn RowSource>, SourceError>,
) -> Result<PlacedSource, SourceError> {
    let refuse = |reason: String| SourceError::Vrt { path: path.to_path_buf(), reason };
    let root = parse(text).map_err(&refuse)?;
    if root.name != "VRTDataset" {
        return Err(refuse(format!("root element <{}>, not <VRTDataset>", root.name)));
    }
    if let Some(class) = root.attr("subClass") {
        return Err(refuse(format!(
            "<VRTDataset subClass=\"{class}\"> (warped or derived datasets are not read)"
        )));
    }
    let size = |el: &Element, name: &str| -> Result<u32, String> {
        let v = el.attr(name).ok_or_else(|| format!("<{}> has no {name}", el.name))?;
        v.trim().parse::<u32>().map_err(|_| format!("<{} {name}=\"{v}\">: not a size in texels", el.name))
    };
    let (width, height) =
        (size(&root, "rasterXSize").map_err(&refuse)?, size(&root, "rasterYSize").map_err(&refuse)?);
    let folder = path.parent().unwrap_or(Path::new(""));
    let mut bands: Vec<Band> = Vec::new();
    let mut geotransform = None;
    let mut srs = None;
    for el in &root.children {
        match el.name.as_str() {
            "SRS" => srs = Some(el.text.trim().to_string()),
            "GeoTransform" => geotransform = Some(parse_geotransform(&el.text).map_err(&refuse)?),
            "Metadata" => {}
            "VRTRasterBand" => bands.push(band(el, folder).map_err(&refuse)?),
            other => return Err(refuse(format!("element <{other}> in <VRTDataset> is not supported"))),
        }
    }
    if !(1..=4).contains(&bands.len()) {
        return Err(refuse(format!("{} bands (1 to 4: gray, gray and alpha, RGB or RGBA)", bands.len())));
    }
    for (k, Band { number, sources, .. }) in bands.iter().enumerate() {
        if *number != k as u32 + 1 {
            return Err(refuse(format!("<VRTRasterBand band=\"{number}\"> is band {} in the file", k + 1)));
        }
        let strip = |s: &[Source]| s.iter().map(|s| (s.path.clone(), s.src, s.dst)).collect::<Vec<_>>();
        if strip(sources) != strip(&bands[0].sources) {
            return Err(refuse(format!(
                "band {number} does not take the same sources and rectangles as band 1"
            )));
        }
        if let Some(s) = sources.iter().find(|s| s.band != *number) {
            return Err(refuse(format!(
                "band {number} takes band {} of {}: each band must take the same band of its sources",
                s.band, s.file
            )));
        }
    }
    let nodata = vrt_nodata(&bands).map_err(&refuse)?;
    let mut sources = Vec::with_capacity(bands[0].sources.len());
    let mut first_geo: Option<GeoReference> = None;
    let crs = |g: &GeoReference| g.epsg.map_or("a CRS without an EPSG code".into(), |c| format!("EPSG:{c}"));
    for s in &bands[0].sources {
        let source = open(&s.path)?;
        if let Some(v) = nodata {
            keeps_nodata(source.as_ref(), v).map_err(|why| refuse(format!("{}: {why}", s.file)))?;
        }
        if let Some(samples) = tiff_samples(&s.path)
            && samples != bands.len()
        {
            return Err(refuse(format!(
                "{} has {samples} bands, the VRT {}: a VRT must take every band of its sources",
                s.file,
                bands.len()
            )));
        }
        let geo = source.layer_meta().geo;
        if let (Some(a), Some(b)) = (&first_geo, &geo)
            && a.epsg != b.epsg
        {
            return Err(refuse(format!("{} is in {}, the first source in {}", s.file, crs(b), crs(a))));
        }
        if first_geo.is_none() {
            first_geo = geo;
        }
        sources.push(source);
    }
    // Data rasters (DEM tiles) on one value scale, as in a grid.
    crate::bake::grid::share_data_scale(&mut sources).map_err(|e| refuse(e.to_string()))?;
    let placements = sources
        .into_iter()
        .zip(&bands[0].sources)
        .map(|(source, s)| Placement { source, src: s.src, dst: [s.dst[0], s.dst[1]] })
        .collect();
    let mut meta = LayerMeta::default();
    if let Some(gt) = geotransform {
        let mut geo = match &first_geo {
            Some(first) if first.geotransform.is_some_and(|g| (g[1], g[5]) == (gt[1], gt[5])) => {
                mosaic_geo(first, gt[0], gt[3])
            }
            _ => GeoReference { geotransform: Some(gt), ..GeoReference::default() },
        };
        geo.geotransform = Some(gt);
        geo.wkt = srs.filter(|w| !w.is_empty());
        meta.geo = Some(geo);
    }
    PlacedSource::new(width, height, placements, meta).map_err(|e| refuse(e.to_string()))
}

/// The six numbers of a `<GeoTransform>`, unrotated.
fn parse_geotransform(text: &str) -> Result<[f64; 6], String> {
    let values: Vec<f64> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("<GeoTransform>{}</GeoTransform>: not six numbers", text.trim()))?;
    let gt: [f64; 6] = values
        .try_into()
        .map_err(|_| format!("<GeoTransform>{}</GeoTransform>: not six numbers", text.trim()))?;
    if gt.iter().any(|v| !v.is_finite()) || gt[2] != 0.0 || gt[4] != 0.0 {
        return Err(format!("<GeoTransform>{}</GeoTransform>: rotated or not finite", text.trim()));
    }
    Ok(gt)
}

/// The one nodata value a VRT's bands and sources state, if any; different values are
/// refused.
fn vrt_nodata(bands: &[Band]) -> Result<Option<f64>, String> {
    let stated =
        bands.iter().flat_map(|b| b.nodata.iter().chain(b.sources.iter().filter_map(|s| s.nodata.as_ref())));
    let mut value: Option<f64> = None;
    for text in stated {
        let t = text.trim();
        let v = if t.eq_ignore_ascii_case("nan") {
            f64::NAN
        } else {
            t.parse::<f64>().map_err(|_| format!("nodata value \"{t}\": not a number"))?
        };
        match value {
            Some(first) if !same_value(first, v) => {
                return Err(format!("nodata values {first} and {v}: one VRT, one nodata value"));
            }
            _ => value = Some(v),
        }
    }
    Ok(value)
}

/// Whether two nodata values are the same (NaN is NaN).
fn same_value(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// Whether `source` already makes the VRT's nodata value `v` transparent: a data raster
/// whose own nodata is `v` (or a float one, whose NaNs are transparent, for NaN). Then
/// the VRT's nodata changes nothing: its gaps are transparent as well.
fn keeps_nodata(source: &dyn RowSource, v: f64) -> Result<(), String> {
    let Some(d) = source.data_scale() else {
        return Err(format!(
            "the VRT's nodata {v} on a colour image is not read (only data rasters whose own nodata it is)"
        ));
    };
    match d.nodata {
        Some(own) if same_value(own, v) => Ok(()),
        None if v.is_nan() && d.sample.starts_with("Float") => Ok(()),
        own => Err(format!(
            "the VRT's nodata {v} is not the file's own ({}): only nodata its sources already have is read",
            own.map_or("none".into(), |o| o.to_string())
        )),
    }
}

/// A `<VRTRasterBand>`: its number, nodata value and simple sources.
fn band(el: &Element, folder: &Path) -> Result<Band, String> {
    if let Some(class) = el.attr("subClass") {
        return Err(format!("<VRTRasterBand subClass=\"{class}\"> (derived bands are not read)"));
    }
    let number = el
        .attr("band")
        .and_then(|b| b.trim().parse::<u32>().ok())
        .ok_or("<VRTRasterBand> without a band number")?;
    let data_type = el.attr("dataType").unwrap_or("Byte");
    let (mut sources, mut nodata) = (Vec::new(), None);
    for c in &el.children {
        match c.name.as_str() {
            "ColorInterp" | "Description" | "Metadata" | "Histograms" => {}
            "NoDataValue" => nodata = Some(c.text.trim().to_string()),
            "SimpleSource" | "ComplexSource" => sources.push(source(c, folder, data_type)?),
            other => {
                return Err(format!(
                    "element <{other}> in band {number} is not supported{}",
                    match other {
                        "KernelFilteredSource" | "AveragedSource" => " (only simple sources)",
                        _ => "",
                    }
                ));
            }
        }
    }
    if sources.is_empty() {
        return Err(format!("band {number} has no sources"));
    }
    Ok(Band { number, nodata, sources })
}

/// A `<SimpleSource>` or `<ComplexSource>` that only places texels.
fn source(el: &Element, folder: &Path, data_type: &str) -> Result<Source, String> {
    let what = &el.name;
    if let Some(r) = el.attr("resampling").filter(|r| !r.eq_ignore_ascii_case("nearest")) {
        tracing::debug!("VRT source resampling=\"{r}\" ignored: its rectangles are of equal sizes");
    }
    let mut file = None;
    let (mut band, mut src, mut dst, mut nodata) = (None, None, None, None);
    for c in &el.children {
        match c.name.as_str() {
            "SourceFilename" => {
                let name = c.text.trim();
                if name.starts_with("/vsi") {
                    return Err(format!(
                        "<SourceFilename>{name}</SourceFilename>: GDAL virtual file systems are not read"
                    ));
                }
                let relative = c.attr("relativeToVRT").is_some_and(|r| r.trim() == "1");
                file =
                    Some((name.to_string(), if relative { folder.join(name) } else { PathBuf::from(name) }));
            }
            "SourceBand" => band = c.text.trim().parse::<u32>().ok(),
            "SourceProperties" => {
                if let Some(t) = c.attr("DataType").filter(|t| *t != data_type) {
                    return Err(format!(
                        "<{what}>: source data type {t} into a {data_type} band (a conversion)"
                    ));
                }
            }
            "NODATA" => nodata = Some(c.text.trim().to_string()),
            "SrcRect" => src = Some(rect(c)?),
            "DstRect" => dst = Some(rect(c)?),
            "ScaleOffset" if c.text.trim().parse::<f64>() == Ok(0.0) => {}
            "ScaleRatio" if c.text.trim().parse::<f64>() == Ok(1.0) => {}
            other => {
                return Err(format!(
                    "<{other}> in <{what}> is not supported (only texels placed as they are)"
                ));
            }
        }
    }
    let (file, path) = file.ok_or_else(|| format!("<{what}> without <SourceFilename>"))?;
    let band =
        band.ok_or_else(|| format!("<{what}> of {file} without a <SourceBand> number (a mask band?)"))?;
    let (src, dst) = (
        src.ok_or(format!("<{what}> of {file} without <SrcRect>"))?,
        dst.ok_or(format!("<{what}> of {file} without <DstRect>"))?,
    );
    if (src[2], src[3]) != (dst[2], dst[3]) {
        return Err(format!(
            "<{what}> of {file}: SrcRect {}x{} to DstRect {}x{} is resampled (only equal sizes)",
            src[2], src[3], dst[2], dst[3]
        ));
    }
    Ok(Source { file, path, band, src, dst, nodata })
}

/// A `<SrcRect>` or `<DstRect>`: whole texels.
fn rect(el: &Element) -> Result<[u32; 4], String> {
    let mut r = [0u32; 4];
    for (i, name) in ["xOff", "yOff", "xSize", "ySize"].into_iter().enumerate() {
        let text = el.attr(name).ok_or_else(|| format!("<{}> without {name}", el.name))?;
        let v = text
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("<{} {name}=\"{text}\">: not a number", el.name))?;
        if !(0.0..=f64::from(u32::MAX)).contains(&v) || (v - v.round()).abs() > 1e-6 {
            return Err(format!("<{} {name}=\"{text}\">: not a whole number of texels (resampled)", el.name));
        }
        r[i] = v.round() as u32;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::bake::source::ImageSource;

    /// A VRT of two 2x1 gray sources side by side, with `extra` inside the first source.
    fn vrt(extra: &str) -> String {
        format!(
            r#"<VRTDataset rasterXSize="4" rasterYSize="1">
  <SRS>GEOGCS["WGS 84",AUTHORITY["EPSG","4326"]]</SRS>
  <GeoTransform> 1.0e+01, 5.0e-01, 0, 2.0e+01, 0, -5.0e-01</GeoTransform>
  <VRTRasterBand dataType="Byte" band="1">
    <ColorInterp>Gray</ColorInterp>
    <SimpleSource>
      <SourceFilename relativeToVRT="1">a&amp;b.png</SourceFilename>
      <SourceBand>1</SourceBand>
      <SrcRect xOff="0" yOff="0" xSize="2" ySize="1" />
      <DstRect xOff="0" yOff="0" xSize="2" ySize="1" />{extra}
    </SimpleSource>
    <ComplexSource>
      <SourceFilename relativeToVRT="1">c.png</SourceFilename>
      <SourceBand>1</SourceBand>
      <SrcRect xOff="0" yOff="0" xSize="2" ySize="1" />
      <DstRect xOff="2" yOff="0" xSize="2" ySize="1" />
    </ComplexSource>
  </VRTRasterBand>
</VRTDataset>"#
        )
    }

    fn open(text: &str) -> Result<PlacedSource, String> {
        let opener = |p: &Path| -> Result<Box<dyn RowSource>, SourceError> {
            let v = if p.ends_with("c.png") { 9 } else { 1 };
            Ok(Box::new(ImageSource::from_rgba(2, 1, vec![v; 8])))
        };
        open_text(Path::new("/d/m.vrt"), text, opener).map_err(|e| e.to_string())
    }

    #[test]
    fn simple_sources_are_placed_and_the_geotransform_kept() {
        let m = open(&vrt("")).unwrap();
        assert_eq!(m.size(), (4, 1));
        assert_eq!(m.offsets(), vec![[0, 0], [2, 0]]);
        let mut out = vec![0u8; 16];
        m.read_rows(0, &mut out).unwrap();
        assert_eq!(out, [[1u8; 8], [9u8; 8]].concat());
        let g = m.layer_meta().geo.unwrap();
        assert_eq!(g.geotransform, Some([10.0, 0.5, 0.0, 20.0, 0.0, -0.5]));
        assert!(g.wkt.unwrap().contains("WGS 84"));
    }

    /// The bake stamp's inputs: every source once, resolved beside the VRT.
    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn source_files_are_listed_for_the_bake_stamp() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.vrt"), vrt("")).unwrap();
        let files = source_files(&dir.path().join("m.vrt")).unwrap();
        assert_eq!(files, vec![dir.path().join("a&b.png"), dir.path().join("c.png")]);
        std::fs::write(dir.path().join("n.vrt"), "not a vrt").unwrap();
        assert_eq!(source_files(&dir.path().join("n.vrt")), None);
    }

    #[test]
    fn what_is_not_supported_is_named() {
        let cases = [
            ("<ScaleRatio>2</ScaleRatio>", "<ScaleRatio> in <SimpleSource> is not supported"),
            ("<LUT>0:0,255:128</LUT>", "<LUT> in <SimpleSource>"),
            ("<NODATA>0</NODATA>", "a&b.png: the VRT's nodata 0 on a colour image is not read"),
            ("<UseMaskBand>true</UseMaskBand>", "<UseMaskBand> in <SimpleSource>"),
        ];
        for (extra, says) in cases {
            let err = open(&vrt(extra)).unwrap_err();
            assert!(err.contains("m.vrt") && err.contains(says), "{extra}: {err}");
        }
        let resampled = vrt("")
            .replace(r#"<DstRect xOff="2" yOff="0" xSize="2""#, r#"<DstRect xOff="2" yOff="0" xSize="1""#);
        assert!(open(&resampled).unwrap_err().contains("SrcRect 2x1 to DstRect 1x1 is resampled"));
        let warped = vrt("").replace("<VRTDataset ", r#"<VRTDataset subClass="VRTWarpedDataset" "#);
        assert!(open(&warped).unwrap_err().contains("subClass=\"VRTWarpedDataset\""));
        let nodata = vrt("").replace("<ColorInterp>", "<NoDataValue>0</NoDataValue><ColorInterp>");
        assert!(open(&nodata).unwrap_err().contains("nodata 0 on a colour image"));
        let two =
            vrt("<NODATA>1</NODATA>").replace("<ColorInterp>", "<NoDataValue>0</NoDataValue><ColorInterp>");
        assert!(open(&two).unwrap_err().contains("nodata values 0 and 1"));
        let vsi = vrt("").replace("c.png", "/vsicurl/http://x/c.tif");
        assert!(open(&vsi).unwrap_err().contains("virtual file systems"));
        let overlap = vrt("").replace(r#"<DstRect xOff="2""#, r#"<DstRect xOff="1""#);
        assert!(open(&overlap).unwrap_err().contains("overlaps"));
    }

    #[test]
    fn hostile_xml_is_an_error_not_a_panic() {
        let deep = "<a>".repeat(100) + &"</a>".repeat(100);
        for bad in [
            "",
            "<VRTDataset",
            "<VRTDataset rasterXSize=\"1\" rasterYSize=\"1\"></Other>",
            "<!DOCTYPE x [<!ENTITY e \"boom\">]><VRTDataset>&e;</VRTDataset>",
            "<VRTDataset rasterXSize=\"-1\" rasterYSize=\"1\"/>",
            "<VRTDataset rasterXSize=\"1\" rasterYSize=\"1\"/><Second/>",
            "<VRTDataset rasterXSize=\"1\" rasterYSize=\"1\">&unknown;</VRTDataset>",
            "<VRTDataset rasterXSize=\"4294967295\" rasterYSize=\"4294967295\"><VRTRasterBand band=\"1\"/></VRTDataset>",
            deep.as_str(),
        ] {
            assert!(open(bad).is_err(), "{bad:?}");
        }
    }
}
