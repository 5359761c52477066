//! `tessera inspect`: print an atlas summary as a table or JSON.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use tessera_core::format::atlas::{Atlas, AtlasSummary};

use crate::out::Out;

/// Runs `tessera inspect`.
pub(crate) fn run(path: &Path, json: bool, tiles: bool) -> Result<ExitCode> {
    crate::args::atlas_file(path)?;
    let atlas = Atlas::open(path)?;
    // Through a locked handle: a reader that stops early (`| head`) ends the listing quietly.
    let mut out = Out::new();
    if tiles {
        // One line per tile: what two bakes of the same inputs must agree on.
        for (i, layer) in atlas.layers().iter().enumerate() {
            for t in layer.layout.tiles(i as u16) {
                let e = atlas.entry(t)?;
                writeln!(
                    out,
                    "{} {} {} {} {} {} {:08x}",
                    t.layer, t.mip, t.x, t.y, e.codec, e.length, e.crc32
                )?;
            }
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let summary = atlas.summary();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        write!(out, "{}", table(&summary))?;
    }
    out.flush()?;
    if let Some(e) = &summary.first_error {
        // The sizes above leave those tiles out: not an atlas to trust.
        eprintln!(
            "tessera: error: {} of {} tiles' index entries could not be read, e.g. {e}",
            summary.unreadable_entries, summary.tiles
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// The human-readable report.
pub(crate) fn table(s: &AtlasSummary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    // A split atlas' size is its index object's and its data objects' (issue 44: the
    // index alone read "0.00 MiB").
    let data: u64 = s.data_objects.iter().map(|(_, b)| b).sum();
    if let Some(c) = &s.cog {
        let chunk =
            c.chunk_sizes.first().map_or_else(String::new, |(w, h)| format!("internal tiles {w}x{h}, "));
        let _ = writeln!(
            o,
            "{}: TIFF streamed without a bake (Cloud Optimized GeoTIFF): {}{} stored level(s) (the image and its \
             overviews), {} coarser mip(s) built at open, {:.2} MiB",
            s.path.display(),
            chunk,
            c.stored_levels,
            c.built_levels,
            mib(s.file_bytes)
        );
    } else {
        let _ = writeln!(
            o,
            "{}: Tessera atlas v{}, {} layer(s){}, {} tiles, {:.2} MiB",
            s.path.display(),
            s.version,
            s.layers.len(),
            if s.stacked { " stacked (one layout, shared tile ids)" } else { "" },
            s.tiles,
            mib(s.file_bytes + data)
        );
    }
    if !s.data_objects.is_empty() {
        let _ = writeln!(
            o,
            "split atlas: a {:.1} KiB index naming {} data object(s), {:.2} MiB: {}",
            s.file_bytes as f64 / 1024.0,
            s.data_objects.len(),
            mib(data),
            s.data_objects.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    for l in &s.layers {
        let _ = writeln!(
            o,
            "layer {} '{}': {}x{} texels, tile {} + border {} ({}² stored), {} mips, codec {}, wrap {:?}, {:?}",
            l.index,
            l.name,
            l.width,
            l.height,
            l.tile_size,
            l.border,
            l.tile_size + 2 * l.border,
            l.mip_count,
            l.codec,
            l.wrap,
            l.color
        );
        let _ = writeln!(
            o,
            "  {:>4} {:>13} {:>11} {:>7} {:>12} {:>7}",
            "mip", "texels", "tiles", "count", "on disk MiB", "ratio"
        );
        for m in &l.mips {
            if s.cog.as_ref().is_some_and(|c| m.mip >= c.stored_levels) {
                let (w, h) = (m.width, m.height);
                let tiles = format!("{}x{}", m.tiles_x, m.tiles_y);
                let count = u64::from(m.tiles_x) * u64::from(m.tiles_y);
                let _ = writeln!(
                    o,
                    "  {:>4} {:>13} {tiles:>11} {count:>7}   built at open",
                    m.mip,
                    format!("{w}x{h}")
                );
                continue;
            }
            let _ = writeln!(
                o,
                "  {:>4} {:>13} {:>11} {:>7} {:>12.2} {:>6.2}x",
                m.mip,
                format!("{}x{}", m.width, m.height),
                format!("{}x{}", m.tiles_x, m.tiles_y),
                u64::from(m.tiles_x) * u64::from(m.tiles_y),
                mib(m.stored_bytes),
                m.raw_bytes as f64 / m.stored_bytes.max(1) as f64
            );
        }
        let _ = writeln!(
            o,
            "  total {} tiles, {:.2} MiB on disk, {:.2} MiB decoded, compression ratio {:.2}x, {:.2} bits/texel on disk",
            l.tiles,
            mib(l.stored_bytes),
            mib(l.raw_bytes),
            l.compression_ratio,
            l.bits_per_texel
        );
        let vram: Vec<String> = l.vram_bytes_per_tile.iter().map(|(t, b)| format!("{t} {b} B")).collect();
        let _ = writeln!(o, "  VRAM per tile: {}", vram.join(", "));
        if let Some(g) = &l.geo {
            let _ = writeln!(o, "{}", geo_lines(g));
        }
        if let Some(d) = &l.data {
            let nodata = d.nodata.map_or_else(String::new, |n| format!(", nodata {n} (alpha 0)"));
            let _ = writeln!(
                o,
                "  data raster: {} values {} .. {}, value = {} + {} x texel{nodata}",
                d.sample, d.min, d.max, d.offset, d.scale
            );
        }
    }
    o
}

/// A layer's georeference in the table: CRS, geotransform, texel size and bounds.
fn geo_lines(g: &tessera_core::format::atlas::GeoSummary) -> String {
    let crs = g.crs.as_deref().unwrap_or("a CRS without an EPSG code");
    let mut o = format!("  georeferenced: {crs}");
    if let Some(t) = g.raster_type {
        o += &format!(", {t:?}");
    }
    if let Some(gt) = g.geotransform {
        let n: Vec<String> = gt.iter().map(|v| format!("{v}")).collect();
        o += &format!("\n  geotransform: [{}]", n.join(", "));
    }
    if let Some([w, h]) = g.pixel_size {
        o += &format!("\n  pixel size: {w} x {h}");
    }
    if let Some([x0, y0, x1, y1]) = g.bounds {
        o += &format!("\n  bounds: x {x0} .. {x1}, y {y0} .. {y1}");
    }
    o
}
