//! Single-core transcode throughput of the run-time (pure-Rust) Basis transcoder on real
//! tiles, tiles/s per mode and pool format, beside `basisu-unchecked` (`basisu` alone,
//! without the run-time path's checks). With `--features cpp-transcoder` the C++
//! transcoder runs beside them on the same tiles:
//! `cargo bench -p tessera-vt-core --features cpp-transcoder --bench transcode`.

#![allow(clippy::unwrap_used, missing_docs)] // A benchmark fails loudly by design.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tessera_core::bake::source::{ImageSource, RowSource};
use tessera_core::format::basis::{self, BasisMode, DataCheck};
use tessera_core::format::basis_rust;
use tessera_core::format::codec::{EncodeOptions, TargetFormat};

const SIDE: u32 = 136;

/// 16 tiles of 136² from the Earth relief image (`assets/fetch-data.sh`), spread over it.
fn tiles() -> Vec<Vec<u8>> {
    let path = tessera_core::bake::source::data_dir().join("shadedrelief.jpg");
    let img = ImageSource::open(&path).expect("shadedrelief.jpg: run assets/fetch-data.sh");
    let (w, h) = img.size();
    (0..16u64)
        .map(|i| {
            let x0 = (i * 1_237 % u64::from(w - SIDE)) as usize;
            let y0 = (i * 611 % u64::from(h - SIDE)) as usize;
            (y0..y0 + SIDE as usize)
                .flat_map(|y| {
                    img.texels()[(y * w as usize + x0) * 4..(y * w as usize + x0 + SIDE as usize) * 4]
                        .to_vec()
                })
                .collect()
        })
        .collect()
}

fn transcode(c: &mut Criterion) {
    let tiles = tiles();
    let mut group = c.benchmark_group("transcode");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
    for mode in [BasisMode::Etc1s, BasisMode::Uastc] {
        let blobs: Vec<Vec<u8>> =
            tiles.iter().map(|t| basis::encode(t, SIDE, mode, &EncodeOptions::default()).unwrap()).collect();
        group.throughput(Throughput::Elements(blobs.len() as u64));
        for target in TargetFormat::ALL {
            let name = format!("{mode:?}-{target}");
            #[cfg(feature = "cpp-transcoder")]
            group.bench_function(BenchmarkId::new("cpp", &name), |b| {
                b.iter(|| {
                    for blob in &blobs {
                        basis::cpp::transcode(blob, mode, SIDE, target, DataCheck::AlreadyVerified).unwrap();
                    }
                })
            });
            // The checks' cost: `basisu::Transcoder` alone, without the structure check and
            // the ETC1S stream walk that the run-time path makes first.
            let format = match target {
                TargetFormat::Rgba8 => basisu::TargetFormat::Rgba32,
                TargetFormat::Bc7 => basisu::TargetFormat::Bc7Rgba,
                TargetFormat::Bc1 => basisu::TargetFormat::Bc1Rgb,
                TargetFormat::Astc4x4 => basisu::TargetFormat::Astc4x4Rgba,
                _ => basisu::TargetFormat::Etc2Rgba,
            };
            let mut bits = basisu::DecodeFlags::NO_ETC1S_CHROMA_FILTERING.bits()
                | basisu::DecodeFlags::NO_DEBLOCK_FILTERING.bits();
            if target == TargetFormat::Bc1 {
                bits |= basisu::DecodeFlags::BC1_FORBID_THREE_COLOR_BLOCKS.bits();
            }
            let flags = basisu::DecodeFlags::from_bits(bits);
            group.bench_function(BenchmarkId::new("basisu-unchecked", &name), |b| {
                b.iter(|| {
                    for blob in &blobs {
                        let mut out = vec![0u8; target.bytes_per_tile(SIDE)];
                        basisu::Transcoder::new(blob)
                            .unwrap()
                            .transcode_into(0, format, flags, &mut out)
                            .unwrap();
                    }
                })
            });
            group.bench_function(BenchmarkId::new("rust", &name), |b| {
                b.iter(|| {
                    for blob in &blobs {
                        basis_rust::transcode(blob, mode, SIDE, target, DataCheck::AlreadyVerified).unwrap();
                    }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, transcode);
criterion_main!(benches);
