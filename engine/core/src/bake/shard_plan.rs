//! Planning a sharded bake and finding which shards a farm still has to run
//! (`tessera bake … --plan N`, `tessera bake … --status`).

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bake::baker::{BakeError, BakeInput, BakeOptions, bake_threads, layer_table};
use crate::bake::shard::{
    MAX_SHARDS, MergeForm, Shard, ShardError, part_path, parts_present, read_part, shard_dir,
};
use crate::format::atlas::order::StorageOrder;
use crate::format::codec::EncodeOptions;

/// Tiles encoded per layer to measure the encoding rate.
pub const SAMPLE_TILES: u32 = 6;
/// A source whose band of one tile's rows is larger than this is not read for samples:
/// the plan encodes a generated pattern of the same tile size instead.
const SAMPLE_BAND_BYTES: u64 = 64 << 20;
/// Reading and filtering time per source texel on the bake's one reading thread, seconds
/// (release build, 2-core VM, BENCHMARKS.md): 16 LZ4 shards of a generated 16384² image
/// took 4.25 s each ("Sharded bakes"), about 0.1 s of it encoding their sixteenth of the
/// tiles, so 4.1 s for 268 M texels; the LZ4 bake of Earth relief 10800×5400, bound by
/// that thread ("This 2-core VM"), took 0.90 s for 58 M texels. Both give 15 ns a texel.
pub const READ_FILTER_SECONDS_PER_TEXEL: f64 = 15e-9;

/// One shard of a plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShardPlan {
    /// The shard.
    pub shard: Shard,
    /// Its storage positions.
    pub range: [u64; 2],
    /// Estimated time on `BakePlan::threads` threads, seconds: per layer, the longer of
    /// reading and filtering its whole source and encoding the shard's tiles of it (the
    /// two run side by side).
    pub seconds: f64,
}

/// What [`plan`] found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BakePlan {
    /// Tiles in the atlas.
    pub tiles: u64,
    /// Measured encoding time per tile on one core, per layer, seconds.
    pub seconds_per_tile: Vec<f64>,
    /// Whether each layer's rate came from its own texels (else from a generated pattern,
    /// the source being too wide to read a band of rows for a plan).
    pub sampled_source: Vec<bool>,
    /// Estimated time to read and filter each layer's whole source, seconds, which every
    /// shard spends ([`READ_FILTER_SECONDS_PER_TEXEL`]).
    pub read_seconds: Vec<f64>,
    /// Encoding threads each shard is assumed to have.
    pub threads: usize,
    /// One entry per shard.
    pub shards: Vec<ShardPlan>,
}

/// Plans a bake of `inputs` with `opts` cut into `count` shards: each shard's tiles and
/// an estimate of its time, from [`SAMPLE_TILES`] tiles per layer encoded here on one
/// core (tiles cut from a band of rows in the middle of the source, with the layer's
/// codec and options), and of reading and filtering, which every shard does for the whole
/// input on one thread beside its encoders ([`READ_FILTER_SECONDS_PER_TEXEL`]). Encoding
/// dominates a Basis bake; reading and filtering dominate an LZ4 or raw one
/// (BENCHMARKS.md, "Sharded bakes").
pub fn plan(inputs: &[BakeInput], opts: &BakeOptions, count: u32) -> Result<BakePlan, BakeError> {
    if count > MAX_SHARDS {
        return Err(BakeError::Shard(ShardError::Spec(count.to_string())));
    }
    let layers = layer_table(inputs, opts)?;
    let mut seconds_per_tile = Vec::with_capacity(layers.len());
    let mut sampled_source = Vec::with_capacity(layers.len());
    let mut read_seconds = Vec::with_capacity(layers.len());
    for (input, layer) in inputs.iter().zip(&layers) {
        let p = layer.layout.padded_tile_size();
        let (w, h) = input.source.size();
        let band_bytes = u64::from(w) * u64::from(p.min(h)) * 4;
        let (texels, width, rows, real) = if band_bytes <= SAMPLE_BAND_BYTES {
            let rows = p.min(h);
            let mut band = vec![0u8; band_bytes as usize];
            input
                .source
                .read_rows((h - rows) / 2, &mut band)
                .map_err(|source| BakeError::Read { name: input.name.clone(), source })?;
            (band, w, rows, true)
        } else {
            let side = p * SAMPLE_TILES;
            let g = crate::bake::source::Generated::new(side, p);
            let mut band = vec![0u8; side as usize * p as usize * 4];
            crate::bake::source::RowSource::read_rows(&g, 0, &mut band)
                .map_err(|source| BakeError::Read { name: input.name.clone(), source })?;
            (band, side, p, false)
        };
        let encode = EncodeOptions {
            quality: opts.quality,
            uastc_rdo: opts.uastc_rdo,
            color: layer.color,
            ..EncodeOptions::default()
        };
        let mut tile = vec![0u8; p as usize * p as usize * 4];
        let start = Instant::now();
        for k in 0..SAMPLE_TILES {
            // Tile k of the band, its texels clamped to the band.
            let x0 = (u64::from(width) * u64::from(k) / u64::from(SAMPLE_TILES)) as u32;
            for y in 0..p {
                let sy = y.min(rows - 1);
                for x in 0..p {
                    let sx = (x0 + x).min(width - 1);
                    let from = (sy as usize * width as usize + sx as usize) * 4;
                    let to = (y as usize * p as usize + x as usize) * 4;
                    tile[to..to + 4].copy_from_slice(&texels[from..from + 4]);
                }
            }
            layer
                .codec
                .encode(&tile, p, &encode)
                .map_err(|source| BakeError::Encode { name: input.name.clone(), source })?;
        }
        seconds_per_tile.push(start.elapsed().as_secs_f64() / f64::from(SAMPLE_TILES));
        sampled_source.push(real);
        read_seconds.push(f64::from(w) * f64::from(h) * READ_FILTER_SECONDS_PER_TEXEL);
    }
    let order = StorageOrder::new(layers.iter().map(|l| l.layout).collect(), opts.stacked);
    let tiles: u64 = layers.iter().map(|l| l.layout.tile_count()).sum();
    let threads = bake_threads(opts);
    let count = count.max(1);
    let shards = (0..count)
        .filter_map(|i| Shard::new(i, count))
        .map(|shard| {
            let range = shard.range_of(&layers);
            // Plain layers lie one after the other in storage order, stacked ones
            // interleaved: count each layer's positions in the range.
            let seconds: f64 = layers
                .iter()
                .enumerate()
                .map(|(li, l)| {
                    let n = if opts.stacked {
                        (range.end - range.start) as f64 / layers.len() as f64
                    } else {
                        let first = order.position(li, u32::from(l.layout.coarsest_mip()), 0, 0);
                        let end = first + l.layout.tile_count();
                        range.end.min(end).saturating_sub(range.start.max(first)) as f64
                    };
                    (n * seconds_per_tile[li] / threads as f64).max(read_seconds[li])
                })
                .sum();
            ShardPlan { shard, range: [range.start, range.end], seconds }
        })
        .collect();
    Ok(BakePlan { tiles, seconds_per_tile, sampled_source, read_seconds, threads, shards })
}

/// The state of one shard's part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum PartState {
    /// Present, intact, from the bake asked about.
    Done {
        /// Tiles in the part.
        tiles: u64,
        /// Its size in bytes.
        bytes: u64,
    },
    /// No part.
    Missing,
    /// A part of another bake (other inputs or options, or another Tessera).
    Stale {
        /// Why.
        reason: String,
    },
    /// Unreadable or damaged.
    Damaged {
        /// What is wrong.
        reason: String,
    },
}

/// One shard and its part's state; or a run of shards whose parts are all missing.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartStatus {
    /// The shard (the first of a run).
    pub shard: Shard,
    /// The last shard index the entry stands for: `shard.index` but for a run of
    /// missing parts, `shard.index..=last`, listed as one entry whatever its length.
    pub last: u32,
    /// Its part's state.
    #[serde(flatten)]
    pub state: PartState,
}

/// What [`status`] found in `OUT.shards/`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShardStatus {
    /// The parts, by shard count then index.
    pub parts: Vec<PartStatus>,
    /// Names ending in `.part` that name no part of any bake (`0-of-4294967295.part`,
    /// `5-of-5.part`): never read.
    pub strays: Vec<String>,
}

/// The parts of the atlas `out` (`OUT.shards/`, a folder or an `s3://` prefix), shard by
/// shard, for every shard count that has parts there (or `count` when given: then its
/// missing shards are listed even when none has run). With `expected` (the fingerprint
/// of the bake as it would run now, [`crate::bake::bake_fingerprint`]) a part of another
/// bake is stale; without, parts that disagree with the first intact one are. Missing
/// parts come in runs, so the answer grows with the files present, never with a count
/// a file name claims.
pub fn status(
    out: &Path,
    count: Option<u32>,
    expected: Option<&str>,
    s3: &[(String, String)],
) -> Result<ShardStatus, ShardError> {
    let (mut present, strays) = match parts_present(&shard_dir(out), s3) {
        Ok(found) => found,
        Err(ShardError::NoParts(_)) => Default::default(),
        Err(e) => return Err(e),
    };
    if let Some(c) = count {
        if Shard::new(0, c).is_none() {
            return Err(ShardError::Spec(c.to_string()));
        }
        present.entry(c).or_default();
    }
    let mut parts = Vec::new();
    let mut reference: Option<String> = expected.map(str::to_owned);
    let missing = |n: u32, first: u32, last: u32| PartStatus {
        shard: Shard { index: first, count: n },
        last,
        state: PartState::Missing,
    };
    for (&n, indices) in &present {
        let mut next = 0;
        for &i in indices {
            if i > next {
                parts.push(missing(n, next, i - 1));
            }
            next = i + 1;
            let shard = Shard { index: i, count: n };
            let state = match read_part(&part_path(out, shard), s3) {
                Err(e) => PartState::Damaged { reason: e.to_string() },
                Ok(part) if part.manifest.shard != shard => {
                    PartState::Damaged { reason: format!("holds shard {}", part.manifest.shard) }
                }
                Ok(part) => {
                    let fp = &part.manifest.fingerprint;
                    match &reference {
                        Some(r) if r != fp => PartState::Stale {
                            reason: if expected.is_some() {
                                "baked from other inputs or options than these".into()
                            } else {
                                "from another bake than the other parts".into()
                            },
                        },
                        _ if let Some(c) = count.filter(|&c| c != n) => {
                            PartState::Stale { reason: format!("of a bake cut into {n} shards, not {c}") }
                        }
                        _ => {
                            reference.get_or_insert_with(|| fp.clone());
                            PartState::Done {
                                tiles: part.manifest.range[1] - part.manifest.range[0],
                                bytes: part.len,
                            }
                        }
                    }
                }
            };
            parts.push(PartStatus { shard, last: i, state });
        }
        if next < n {
            parts.push(missing(n, next, n - 1));
        }
    }
    Ok(ShardStatus { parts, strays })
}

/// Whether the atlas `out` was merged from the parts [`status`] found done, and how: a
/// split atlas naming exactly those parts at their sizes, or one file holding as many
/// tiles and written after all of them. `None` when there is no such atlas (not merged
/// yet, or merged before a part was rebaked) or when `out` is remote.
pub fn merged_from(out: &Path, status: &ShardStatus) -> Option<MergeForm> {
    if crate::format::atlas::is_remote_location(out) {
        return None;
    }
    let done: Vec<(Shard, u64, u64)> = status
        .parts
        .iter()
        .filter_map(|p| match p.state {
            PartState::Done { tiles, bytes } => Some((p.shard, tiles, bytes)),
            _ => None,
        })
        .collect();
    if done.is_empty() {
        return None;
    }
    let atlas = crate::format::atlas::Atlas::open(out).ok()?;
    if atlas.is_split() {
        let file_name = out.file_name()?.to_string_lossy();
        let mut named: Vec<(String, u64)> =
            atlas.data_objects().into_iter().map(|(o, _)| (o.name, o.size)).collect();
        let mut parts: Vec<(String, u64)> = done
            .iter()
            .map(|(s, _, bytes)| (format!("{file_name}.shards/{}-of-{}.part", s.index, s.count), *bytes))
            .collect();
        named.sort();
        parts.sort();
        (named == parts).then_some(MergeForm::Split)
    } else {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let written = modified(out)?;
        let newest = done.iter().map(|(s, ..)| modified(&part_path(out, *s))).collect::<Option<Vec<_>>>()?;
        let tiles: u64 = done.iter().map(|(_, t, _)| t).sum();
        (atlas.tile_count() == tiles && newest.iter().all(|&t| t <= written)).then_some(MergeForm::OneFile)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::NoProgress;
    use crate::bake::source::Generated;
    use crate::bake::{bake, bake_fingerprint};
    use crate::format::codec::Codec;

    fn inputs() -> Vec<BakeInput> {
        vec![BakeInput::new("a", Generated::new(500, 300)), BakeInput::new("b", Generated::new(90, 70))]
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs a clock")]
    fn a_plan_covers_every_tile_once_and_weighs_shards_by_their_layers() {
        let opts =
            BakeOptions { tile_size: 32, border: 2, codec: Codec::Lz4, threads: 2, ..Default::default() };
        let p = plan(&inputs(), &opts, 5).unwrap();
        let layers = layer_table(&inputs(), &opts).unwrap();
        assert_eq!(p.tiles, layers.iter().map(|l| l.layout.tile_count()).sum::<u64>());
        assert_eq!(p.shards.len(), 5);
        assert_eq!((p.shards[0].range[0], p.shards[4].range[1]), (0, p.tiles));
        assert!(p.shards.windows(2).all(|w| w[0].range[1] == w[1].range[0]));
        assert!(p.seconds_per_tile.iter().all(|&s| s > 0.0) && p.sampled_source.iter().all(|&r| r));
        let total: f64 = p.shards.iter().map(|s| s.seconds).sum();
        let encode: f64 = layers
            .iter()
            .zip(&p.seconds_per_tile)
            .map(|(l, s)| l.layout.tile_count() as f64 * s)
            .sum::<f64>()
            / 2.0;
        // Every shard also reads and filters the whole input, beside its encoders.
        let read: f64 = p.read_seconds.iter().sum();
        assert!(p.shards.iter().all(|s| s.seconds >= read * (1.0 - 1e-9)), "{:?}", p.shards);
        assert!(total >= encode * (1.0 - 1e-9) && total <= (encode + 5.0 * read) * (1.0 + 1e-9), "{total}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs a clock")]
    fn an_lz4_plan_counts_reading_and_filtering_the_whole_input() {
        // Issue 44: LZ4 shards were estimated at 0.0 s, their encoding being cheap.
        let opts = BakeOptions { codec: Codec::Lz4, ..Default::default() };
        let input = || vec![BakeInput::new("big", Generated::new(4096, 4096))];
        let p = plan(&input(), &opts, 16).unwrap();
        let read = 4096.0 * 4096.0 * READ_FILTER_SECONDS_PER_TEXEL;
        assert_eq!(p.read_seconds, [read]);
        assert!(read > 0.2, "{read}");
        assert!(p.shards.iter().all(|s| s.seconds >= read), "{:?}", p.shards);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn status_names_missing_stale_and_damaged_parts() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("s.tsa");
        let opts = |i: u32, quality: u32| BakeOptions {
            tile_size: 32,
            border: 2,
            quality,
            shard: Shard::new(i, 4),
            ..Default::default()
        };
        assert!(status(&out, None, None, &[]).unwrap().parts.is_empty());
        for (i, q) in [(0, 128), (1, 128), (2, 90)] {
            bake(inputs(), &out, &opts(i, q), &NoProgress).unwrap();
        }
        let part = part_path(&out, Shard::new(1, 4).unwrap());
        let bytes = std::fs::read(&part).unwrap();
        std::fs::write(&part, &bytes[..bytes.len() - 3]).unwrap();
        let expected = bake_fingerprint(&inputs(), &opts(0, 128)).unwrap();
        let s = status(&out, None, Some(&expected), &[]).unwrap().parts;
        let states: Vec<&str> = s
            .iter()
            .map(|p| match p.state {
                PartState::Done { .. } => "done",
                PartState::Missing => "missing",
                PartState::Stale { .. } => "stale",
                PartState::Damaged { .. } => "damaged",
            })
            .collect();
        assert_eq!(states, ["done", "damaged", "stale", "missing"]);
        // Without the inputs, the first intact part is the reference.
        let s = status(&out, None, None, &[]).unwrap().parts;
        assert!(matches!(s[2].state, PartState::Stale { .. }), "{s:?}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn status_grows_with_the_files_present_not_with_the_counts_they_claim() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("s.tsa");
        let opts = BakeOptions { tile_size: 32, border: 2, shard: Shard::new(0, 2), ..Default::default() };
        bake(inputs(), &out, &opts, &NoProgress).unwrap();
        let shards = shard_dir(&out);
        for stray in ["0-of-4294967295.part", "0-of-50000000.part", "01-of-2.part", "2-of-2.part", "x.part"] {
            std::fs::write(shards.join(stray), b"stray").unwrap();
        }
        std::fs::write(shards.join("7-of-65536.part"), b"damaged").unwrap();
        let s = status(&out, None, None, &[]).unwrap();
        assert_eq!(s.strays.len(), 5, "{:?}", s.strays);
        let runs: Vec<(u32, u32, u32, &str)> = s
            .parts
            .iter()
            .map(|p| {
                let state = match p.state {
                    PartState::Done { .. } => "done",
                    PartState::Missing => "missing",
                    _ => "damaged",
                };
                (p.shard.count, p.shard.index, p.last, state)
            })
            .collect();
        assert_eq!(
            runs,
            [
                (2, 0, 0, "done"),
                (2, 1, 1, "missing"),
                (65536, 0, 6, "missing"),
                (65536, 7, 7, "damaged"),
                (65536, 8, 65535, "missing")
            ]
        );
        // A count asked for is listed whole; past the cap it is refused.
        let s = status(&out, Some(65536), None, &[]).unwrap();
        assert_eq!(s.parts.len(), 5);
        assert!(matches!(status(&out, Some(65537), None, &[]), Err(ShardError::Spec(_))));
    }
}
