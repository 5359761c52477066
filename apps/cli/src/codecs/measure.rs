//! Codec measurements on real images, without a GPU: bake an image with one codec, then
//! report bits per texel on disk, PSNR of mip 0 against the source, bake throughput, and
//! the loader's transcode throughput to every target format on one core and on all cores.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tessera_core::bake::source::{ImageSource, RowSource, TEXEL_BYTES};
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::compare::compare;
use tessera_core::format::atlas::{Atlas, AtlasError, ColorSpace, Wrap};
use tessera_core::format::codec::{Codec, TargetFormat};
use tessera_core::format::tile::TileId;
use tessera_core::stream::atlas_loader::AtlasLoader;
use tessera_core::stream::host_cache::HostCache;
use tessera_core::stream::loader::LoadError;

/// What to measure and how long.
#[derive(Clone, Debug)]
pub(crate) struct CodecBenchOptions {
    /// Basis quality (1..=255), see [`tessera_core::format::codec::EncodeOptions::quality`].
    pub(crate) quality: u32,
    /// Mip-0 tiles, evenly spread over the image, that the transcode rates are measured on.
    pub(crate) sample_tiles: usize,
    /// Each single-core rate is timed over whole passes of the sample lasting at least this long.
    pub(crate) single_core_min: Duration,
    /// Each all-cores rate is timed over whole passes of the sample lasting at least this long.
    pub(crate) all_cores_min: Duration,
}

impl Default for CodecBenchOptions {
    fn default() -> Self {
        Self {
            quality: tessera_core::format::codec::QUALITY_DEFAULT,
            sample_tiles: 256,
            single_core_min: Duration::from_millis(300),
            all_cores_min: Duration::from_millis(500),
        }
    }
}

/// The loader's transcode rate of one codec's tiles to one target format.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct TranscodeRate {
    /// The format the tiles are turned into.
    pub(crate) target: TargetFormat,
    /// Tiles per second on the calling thread alone.
    pub(crate) single_core_tiles_per_s: f64,
    /// The same in millions of texels (border included) per second.
    pub(crate) single_core_mpix_per_s: f64,
    /// Microseconds per tile on one core.
    pub(crate) single_core_us_per_tile: f64,
    /// Tiles per second with a rayon task per tile over every core.
    pub(crate) all_cores_tiles_per_s: f64,
    /// `cores × single_core_tiles_per_s`: what all cores would reach with perfect scaling.
    pub(crate) limit_tiles_per_s: f64,
    /// `all_cores_tiles_per_s / limit_tiles_per_s`.
    pub(crate) all_cores_fraction_of_limit: f64,
    /// GPU bytes of one tile in this format.
    pub(crate) vram_bytes_per_tile: usize,
}

/// Everything measured for one codec on one image.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CodecMeasurement {
    /// The codec the image was baked with.
    pub(crate) codec: Codec,
    /// Basis quality used.
    pub(crate) quality: u32,
    /// Tiles over all mips.
    pub(crate) tiles: u64,
    /// Tiles of mip 0.
    pub(crate) mip0_tiles: u64,
    /// Side of a stored tile in texels, border included.
    pub(crate) padded_tile_size: u32,
    /// Wall time of the bake (mip chain, encode, write), seconds.
    pub(crate) bake_seconds: f64,
    /// `tiles / bake_seconds`, every core encoding.
    pub(crate) bake_tiles_per_s: f64,
    /// Atlas file size.
    pub(crate) file_bytes: u64,
    /// Bytes of tile data on disk.
    pub(crate) stored_bytes: u64,
    /// Bits per stored texel on disk, borders included (from [`Atlas::summary`]).
    pub(crate) bits_per_texel: f64,
    /// PSNR over RGB of the reassembled mip 0 against the source, dB; `None` when identical.
    pub(crate) psnr_db: Option<f64>,
    /// Largest channel error of mip 0 against the source.
    pub(crate) max_error: u8,
    /// Mip-0 tiles the transcode rates were measured on.
    pub(crate) sample_tiles: usize,
    /// Cores used for the all-cores rates (rayon's thread count).
    pub(crate) cores: usize,
    /// The format a pool would use on a desktop GPU: BC7 for Basis codecs, else RGBA8.
    pub(crate) default_target: TargetFormat,
    /// One entry per target format this codec can be loaded into.
    pub(crate) transcode: Vec<TranscodeRate>,
}

impl CodecMeasurement {
    /// The rates for `target`, when this codec can be loaded into it.
    pub(crate) fn rate(&self, target: TargetFormat) -> Option<&TranscodeRate> {
        self.transcode.iter().find(|r| r.target == target)
    }
}

/// A decoded image shared by several bakes.
struct SharedImage(Arc<ImageSource>);

impl RowSource for SharedImage {
    fn size(&self) -> (u32, u32) {
        self.0.size()
    }
    fn read_rows(&self, y0: u32, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_rows(y0, out)
    }
}

/// The centred `w × h` part of `image`.
pub(crate) fn crop_centre(image: &ImageSource, w: u32, h: u32) -> Result<ImageSource> {
    let (iw, ih) = image.size();
    if w == 0 || h == 0 || w > iw || h > ih {
        bail!("cannot crop {w}x{h} out of a {iw}x{ih} image");
    }
    let (x0, y0) = (((iw - w) / 2) as usize, ((ih - h) / 2) as usize);
    let row = iw as usize * TEXEL_BYTES;
    let texels: Vec<u8> = (y0..y0 + h as usize)
        .flat_map(|y| {
            let start = y * row + x0 * TEXEL_BYTES;
            image.texels()[start..start + w as usize * TEXEL_BYTES].iter().copied()
        })
        .collect();
    Ok(ImageSource::from_rgba(w, h, texels))
}

/// The target formats tiles of `codec` can be loaded into.
pub(crate) fn targets_for(codec: Codec) -> Vec<TargetFormat> {
    TargetFormat::ALL.into_iter().filter(|t| codec.is_basis() || !t.is_block_compressed()).collect()
}

/// The pool format on a desktop GPU (BC7 for Basis codecs, RGBA8 otherwise).
pub(crate) fn default_target(codec: Codec) -> TargetFormat {
    if codec.is_basis() { TargetFormat::Bc7 } else { TargetFormat::Rgba8 }
}

/// Up to `n` mip-0 tiles of layer 0, evenly spread over the rows and columns.
pub(crate) fn sample_mip0(atlas: &Atlas, n: usize) -> Vec<TileId> {
    let Some(layer) = atlas.layers().first() else { return Vec::new() };
    let (tx, ty) = layer.layout.tiles_at(0);
    let total = u64::from(tx) * u64::from(ty);
    let n = (n as u64).clamp(1, total.max(1));
    (0..n)
        .map(|i| i * total / n)
        .map(|k| TileId::new(0, 0, (k % u64::from(tx)) as u32, (k / u64::from(tx)) as u32))
        .collect()
}

/// Bakes `image` with `codec` into `atlas_path` (one layer named `name`) and measures it.
/// Returns the measurement and the open atlas (for a streaming measurement after it).
pub(crate) fn measure(
    image: &Arc<ImageSource>,
    name: &str,
    color: ColorSpace,
    codec: Codec,
    atlas_path: &Path,
    opts: &CodecBenchOptions,
) -> Result<(CodecMeasurement, Arc<Atlas>)> {
    tessera_core::format::basis::init();
    let bake_opts = BakeOptions { codec, quality: opts.quality, ..BakeOptions::default() };
    let input = BakeInput {
        name: name.to_string(),
        source: Box::new(SharedImage(image.clone())),
        wrap: Wrap::Clamp,
        color,
        codec: None,
        regions: Vec::new(),
    };
    let report = bake(vec![input], atlas_path, &bake_opts, &tessera_core::NoProgress)?;
    let atlas = Arc::new(Atlas::open(atlas_path)?);
    let summary = atlas.summary();
    let (Some(layer), Some(layout)) = (summary.layers.first(), atlas.layers().first().map(|l| l.layout))
    else {
        bail!("{}: the baked atlas has no layer", atlas_path.display());
    };
    let diff = compare(&reassemble_mip0(&atlas)?, image.texels());
    let padded = layout.padded_tile_size();
    let sample = sample_mip0(&atlas, opts.sample_tiles);
    let cores = rayon::current_num_threads();
    let cache = Arc::new(HostCache::new(0));
    let mut transcode = Vec::new();
    for target in targets_for(codec) {
        let loader = AtlasLoader::with_target(atlas.clone(), cache.clone(), target);
        // Warm up: the thread-local transcoder, the mapped pages.
        if let Some(&first) = sample.first() {
            loader.transcode_tile(first)?;
        }
        let single = timed_passes(opts.single_core_min, || {
            sample.iter().try_for_each(|&t| loader.transcode_tile(t).map(drop))?;
            Ok(sample.len())
        })?;
        let all = timed_passes(opts.all_cores_min, || {
            sample.par_iter().try_for_each(|&t| loader.transcode_tile(t).map(drop))?;
            Ok(sample.len())
        })?;
        let limit = cores as f64 * single;
        transcode.push(TranscodeRate {
            target,
            single_core_tiles_per_s: single,
            single_core_mpix_per_s: single * f64::from(padded * padded) / 1e6,
            single_core_us_per_tile: 1e6 / single,
            all_cores_tiles_per_s: all,
            limit_tiles_per_s: limit,
            all_cores_fraction_of_limit: all / limit,
            vram_bytes_per_tile: target.bytes_per_tile(padded),
        });
    }
    let measurement = CodecMeasurement {
        codec,
        quality: opts.quality,
        tiles: layout.tile_count(),
        mip0_tiles: layout.tile_count_at(0),
        padded_tile_size: padded,
        bake_seconds: report.seconds,
        bake_tiles_per_s: layout.tile_count() as f64 / report.seconds,
        file_bytes: report.file_bytes,
        stored_bytes: layer.stored_bytes,
        bits_per_texel: layer.bits_per_texel,
        psnr_db: diff.psnr_db.is_finite().then_some(diff.psnr_db),
        max_error: diff.max_error,
        sample_tiles: sample.len(),
        cores,
        default_target: default_target(codec),
        transcode,
    };
    Ok((measurement, atlas))
}

/// Runs `pass` (which returns the tiles it handled) until at least `min` has passed;
/// returns tiles per second.
fn timed_passes(min: Duration, mut pass: impl FnMut() -> Result<usize, LoadError>) -> Result<f64, LoadError> {
    let start = Instant::now();
    let mut tiles = 0usize;
    loop {
        tiles += pass()?;
        let elapsed = start.elapsed();
        if elapsed >= min {
            return Ok(tiles as f64 / elapsed.as_secs_f64());
        }
    }
}

/// Decodes every mip-0 tile of layer 0 to RGBA8 and puts their payloads back together
/// into the full `width × height` image.
pub(crate) fn reassemble_mip0(atlas: &Atlas) -> Result<Vec<u8>, AtlasError> {
    let Some(layer) = atlas.layers().first() else {
        return Err(AtlasError::Invalid { path: atlas.path().to_path_buf(), what: "no layer".into() });
    };
    let lay = layer.layout;
    let (w, h, t, b, p) = (
        lay.width() as usize,
        lay.height() as usize,
        lay.tile_size() as usize,
        lay.border() as usize,
        lay.padded_tile_size() as usize,
    );
    let (tiles_x, _) = lay.tiles_at(0);
    let row = w * TEXEL_BYTES;
    let mut out = vec![0u8; row * h];
    out.par_chunks_mut(t * row).enumerate().try_for_each(|(ty, band)| {
        let rows = band.len() / row;
        for tx in 0..tiles_x {
            let tile = atlas.decode_tile(TileId::new(0, 0, tx, ty as u32))?;
            let x0 = tx as usize * t;
            let cols = t.min(w - x0);
            for r in 0..rows {
                let src = ((b + r) * p + b) * TEXEL_BYTES;
                let dst = r * row + x0 * TEXEL_BYTES;
                band[dst..dst + cols * TEXEL_BYTES].copy_from_slice(&tile[src..src + cols * TEXEL_BYTES]);
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// A file name for the atlas of `image` baked with `codec`, inside `dir`.
pub(crate) fn atlas_path(dir: &Path, name: &str, codec: Codec) -> PathBuf {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    dir.join(format!("{safe}-{}.tsa", codec.name().replace('+', "-")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::bake::source::Generated;

    fn image(w: u32, h: u32) -> Arc<ImageSource> {
        let g = Generated::new(w, h);
        let mut texels = vec![0u8; (w * h) as usize * TEXEL_BYTES];
        g.read_rows(0, &mut texels).unwrap();
        Arc::new(ImageSource::from_rgba(w, h, texels))
    }

    #[test]
    fn lossless_codecs_reassemble_exactly_and_report_rates() {
        let dir = tempfile::tempdir().unwrap();
        let img = image(300, 170);
        let opts = CodecBenchOptions {
            sample_tiles: 4,
            single_core_min: Duration::from_millis(5),
            all_cores_min: Duration::from_millis(5),
            ..CodecBenchOptions::default()
        };
        for codec in [Codec::Raw, Codec::Lz4] {
            let path = atlas_path(dir.path(), "gen image", codec);
            let (m, atlas) = measure(&img, "gen", ColorSpace::Srgb, codec, &path, &opts).unwrap();
            assert_eq!(reassemble_mip0(&atlas).unwrap(), img.texels());
            assert_eq!((m.psnr_db, m.max_error), (None, 0), "{codec}");
            assert_eq!(m.mip0_tiles, 3 * 2);
            assert_eq!(m.sample_tiles, 4);
            assert_eq!(m.transcode.len(), 1);
            let r = m.rate(TargetFormat::Rgba8).unwrap();
            assert!(r.single_core_tiles_per_s > 0.0 && r.all_cores_tiles_per_s > 0.0);
            assert_eq!(r.vram_bytes_per_tile, 136 * 136 * 4);
            assert!(m.bits_per_texel > 0.0 && m.bake_tiles_per_s > 0.0);
        }
    }

    #[test]
    fn etc1s_is_lossy_and_transcodes_to_every_target() {
        let dir = tempfile::tempdir().unwrap();
        let img = image(200, 130);
        let opts = CodecBenchOptions {
            sample_tiles: 2,
            single_core_min: Duration::ZERO,
            all_cores_min: Duration::ZERO,
            ..CodecBenchOptions::default()
        };
        let path = atlas_path(dir.path(), "gen", Codec::Etc1s);
        let (m, _) = measure(&img, "gen", ColorSpace::Srgb, Codec::Etc1s, &path, &opts).unwrap();
        assert!(m.psnr_db.is_some_and(|db| db > 20.0), "{:?}", m.psnr_db);
        assert_eq!(m.default_target, TargetFormat::Bc7);
        let targets: Vec<_> = m.transcode.iter().map(|r| r.target).collect();
        assert_eq!(targets, TargetFormat::ALL);
        assert_eq!(m.rate(TargetFormat::Bc1).unwrap().vram_bytes_per_tile, 34 * 34 * 8);
    }

    #[test]
    fn crops_and_samples() {
        let img = image(10, 6);
        let c = crop_centre(&img, 4, 2).unwrap();
        assert_eq!(c.size(), (4, 2));
        assert_eq!(&c.texels()[..4], &img.texels()[(2 * 10 + 3) * 4..(2 * 10 + 3) * 4 + 4]);
        assert!(crop_centre(&img, 11, 2).is_err());
        assert_eq!(targets_for(Codec::Lz4), [TargetFormat::Rgba8]);
        assert_eq!(targets_for(Codec::Uastc).len(), 5);
    }
}
