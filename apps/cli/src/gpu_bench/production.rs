//! What a produced atlas (a runtime virtual texture, issue 43) costs in `tessera bench`:
//! tiles drawn per frame, the time each takes, and the virtual-texture frame with its
//! production against the reference, which for the terrain is the whole composite
//! evaluated for every pixel.

use serde::Serialize;
use tessera_core::Atlas;

use super::{BenchFrame, Stat};

/// Production in the measured frames (a produced atlas only).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ProductionBench {
    /// Tiles drawn per measured frame (new and refreshed).
    pub per_frame: Stat,
    /// Tiles drawn over the measured frames.
    pub total: u64,
    /// Frames that drew any.
    pub frames_producing: usize,
    /// The upload span of frames that drew tiles and uploaded nothing, divided by the
    /// tiles drawn, ms: production and its level 1 per tile (CPU
    /// recording included when the GPU idles).
    pub span_per_tile_ms: Option<Stat>,
    /// The virtual-texture pass plus that frame's upload span (0 when it drew
    /// nothing), ms: what the runtime virtual texture costs a frame on the GPU.
    pub vt_with_production_ms: Option<Stat>,
    /// Its median over the reference pass' median.
    pub ratio_with_production: Option<f64>,
    /// Bytes a fully resident texture of the atlas' layers would take (RGBA8, full mip
    /// chains): what the pool stands in for.
    pub resident_bytes: f64,
}

impl ProductionBench {
    /// The production of `frames` of `atlas` (`None` for an atlas read from a file);
    /// `reference_median` is the reference pass' median GPU time.
    pub(crate) fn of(atlas: &Atlas, frames: &[BenchFrame], reference_median: Option<f64>) -> Option<Self> {
        if !atlas.is_produced() {
            return None;
        }
        let drawn = |f: &BenchFrame| f.stream.produced + f.stream.refreshed;
        let span_per_tile_ms = Stat::of(
            frames
                .iter()
                .filter(|f| drawn(f) > 0 && f.stream.uploads == 0)
                .filter_map(|f| f.vt_upload_gpu_ms.map(|ms| ms / drawn(f) as f64)),
        );
        let vt_with_production_ms = Stat::of(
            frames.iter().filter_map(|f| f.vt_gpu_pass_ms.map(|p| p + f.vt_upload_gpu_ms.unwrap_or(0.0))),
        );
        let ratio_with_production = vt_with_production_ms
            .as_ref()
            .zip(reference_median)
            .map(|(v, r)| if r > 0.0 { v.median / r } else { f64::NAN });
        let resident_bytes = atlas
            .layers()
            .iter()
            .map(|l| f64::from(l.layout.width()) * f64::from(l.layout.height()) * 4.0 * 4.0 / 3.0)
            .sum();
        Some(Self {
            per_frame: Stat::of(frames.iter().map(|f| drawn(f) as f64)).unwrap_or_default(),
            total: frames.iter().map(|f| drawn(f) as u64).sum(),
            frames_producing: frames.iter().filter(|f| drawn(f) > 0).count(),
            span_per_tile_ms,
            vt_with_production_ms,
            ratio_with_production,
            resident_bytes,
        })
    }

    /// The lines of `tessera bench`'s table, for a pool of `pool_mib`.
    pub(crate) fn lines(&self, pool_mib: f64) -> String {
        let ms = |s: &Option<Stat>| {
            s.as_ref().map_or("n/a (needs TIMESTAMP_QUERY_INSIDE_ENCODERS)".to_owned(), |s| {
                format!("median {:.4} ms, p95 {:.4} ms over {} frames", s.median, s.p95, s.samples)
            })
        };
        let tib = self.resident_bytes / f64::from(1u32 << 20) / f64::from(1u32 << 20);
        format!(
            "runtime virtual texture (the reference rows are the composite evaluated per pixel):\n\
             \x20 tiles drawn: median {} max {} per frame, {} in {} of the measured frames\n\
             \x20 drawing a tile (upload span / tiles, frames without uploads): {}\n\
             \x20 VT pass + its frame's production: {}; ratio to direct evaluation {}\n\
             \x20 memory: pool {pool_mib:.1} MiB against {tib:.2} TiB for the texture fully resident ({:.1e} of it)\n",
            self.per_frame.median,
            self.per_frame.max,
            self.total,
            self.frames_producing,
            ms(&self.span_per_tile_ms),
            ms(&self.vt_with_production_ms),
            self.ratio_with_production.filter(|r| r.is_finite()).map_or("n/a".into(), |r| format!("{r:.3}x")),
            pool_mib * f64::from(1u32 << 20) / self.resident_bytes,
        )
    }
}
