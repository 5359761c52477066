//! Core tile-path benchmarks: mip-0 tile reads from an atlas on disk and from a warm host cache, and bakes.
//!
//! The source is a 2048x2048 centre crop of the Blue Marble image fetched by
//! `assets/fetch-data.sh` when it is present, otherwise the procedural texture of the same size.
//! Run with `cargo bench -p tessera-vt-core --bench atlas`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use tessera_core::NoProgress;
use tessera_core::bake::source::{Generated, ImageSource, RowSource, TEXEL_BYTES};
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::{ColorSpace, Wrap};
use tessera_core::{Atlas, AtlasLoader, Codec, HostCache, TileId, TileLoader};

/// Side of the benchmark texture in texels.
const SIDE: u32 = 2048;

/// The RGBA8 texels every benchmark bakes.
struct Texture {
    width: u32,
    height: u32,
    texels: Vec<u8>,
}

impl Texture {
    /// Size of the texels in bytes.
    fn bytes(&self) -> u64 {
        self.texels.len() as u64
    }

    /// A fresh bake input over a copy of the texels.
    fn input(&self) -> BakeInput {
        BakeInput {
            name: "bench".into(),
            source: Box::new(ImageSource::from_rgba(self.width, self.height, self.texels.clone())),
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
            codec: None,
            regions: Vec::new(),
        }
    }
}

/// Where `assets/fetch-data.sh` puts the test images (same rule as the script).
fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_DATA") {
        return d.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME must be set to find the test data"))
            .join(".cache")
    });
    cache.join("tessera").join("data")
}

/// A `SIDE²` centre crop of `bmng.jpg` when it is there, else the generated texture.
fn load_texture() -> Texture {
    let path = data_dir().join("bmng.jpg");
    if path.exists() {
        let img = ImageSource::open(&path).expect("bmng.jpg exists but cannot be decoded");
        let (w, h) = img.size();
        let (cw, ch) = (w.min(SIDE), h.min(SIDE));
        let (x0, y0) = ((w - cw) / 2, (h - ch) / 2);
        let row = cw as usize * TEXEL_BYTES;
        let mut texels = Vec::with_capacity(row * ch as usize);
        for y in y0..y0 + ch {
            let start = (y as usize * w as usize + x0 as usize) * TEXEL_BYTES;
            texels.extend_from_slice(&img.texels()[start..start + row]);
        }
        println!("source: {} ({w}x{h}), centre crop {cw}x{ch}", path.display());
        Texture { width: cw, height: ch, texels }
    } else {
        let g = Generated::new(SIDE, SIDE);
        let mut texels = vec![0u8; SIDE as usize * SIDE as usize * TEXEL_BYTES];
        g.read_rows(0, &mut texels).expect("the generated texture covers all its rows");
        println!("source: {} not found, using Generated::new({SIDE}, {SIDE})", path.display());
        Texture { width: SIDE, height: SIDE, texels }
    }
}

fn options(codec: Codec) -> BakeOptions {
    BakeOptions { codec, ..BakeOptions::default() }
}

/// Bakes `tex` with `codec` into `dir` and opens the result.
fn bake_atlas(tex: &Texture, codec: Codec, dir: &Path) -> Arc<Atlas> {
    let out = dir.join(format!("bench-{}.tsa", codec.name()));
    bake(vec![tex.input()], &out, &options(codec), &NoProgress).expect("baking the bench atlas");
    Arc::new(Atlas::open(&out).expect("opening the freshly baked bench atlas"))
}

fn mip0_tiles(atlas: &Atlas) -> Vec<TileId> {
    let layout = atlas.layers()[0].layout;
    layout.tiles(0).filter(|t| t.mip == 0).collect()
}

fn tile_read(c: &mut Criterion) {
    let tex = load_texture();
    let dir = tempfile::tempdir().expect("creating a temporary folder for the bench atlases");
    let mut group = c.benchmark_group("tile_read");
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    // Decode to RGBA8 for every stored codec (Basis transcoding to block formats is
    // measured by `tessera codecs`).
    for codec in [Codec::Raw, Codec::Lz4, Codec::Etc1s, Codec::Uastc] {
        let atlas = bake_atlas(&tex, codec, dir.path());
        let tiles = mip0_tiles(&atlas);
        group.throughput(Throughput::Elements(tiles.len() as u64));

        group.bench_function(BenchmarkId::new("disk", codec.name()), |b| {
            b.iter(|| {
                for &t in &tiles {
                    black_box(atlas.decode_tile(black_box(t)).expect("decoding a bench tile"));
                }
            });
        });

        // The same read through a memory map, as the reader did before it moved to
        // positioned reads (a file truncated under a mapping kills the process with
        // SIGBUS): copy out of the mapping, CRC, decode. The two rows side by side price
        // that change.
        let file = std::fs::File::open(atlas.path()).expect("opening the bench atlas");
        // SAFETY: the bench owns the file in its temporary folder and never changes it
        // while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.expect("mapping the bench atlas");
        let entries: Vec<_> = tiles.iter().map(|&t| atlas.entry(t).expect("a bench tile's entry")).collect();
        group.bench_function(BenchmarkId::new("mmap_baseline", codec.name()), |b| {
            b.iter(|| {
                for e in &entries {
                    let start = e.offset as usize;
                    let blob = map[start..start + e.length as usize].to_vec();
                    assert_eq!(crc32fast::hash(&blob), e.crc32);
                    black_box(e.codec.decode(&blob, e.raw_length as usize).expect("decoding a bench tile"));
                }
            });
        });

        let tile_bytes = u64::from(atlas.layers()[0].layout.padded_tile_size()).pow(2) * TEXEL_BYTES as u64;
        let cache = Arc::new(HostCache::new(2 * tiles.len() as u64 * tile_bytes));
        let loader = AtlasLoader::new(Arc::clone(&atlas), Arc::clone(&cache));
        for &t in &tiles {
            loader.load(t).expect("warming the host cache");
        }
        assert_eq!(cache.len(), tiles.len(), "the host cache holds every mip-0 tile");
        group.bench_function(BenchmarkId::new("host_cache", codec.name()), |b| {
            b.iter(|| {
                for &t in &tiles {
                    black_box(loader.load(black_box(t)).expect("loading a bench tile"));
                }
            });
        });
        let k = cache.counters();
        assert_eq!(k.misses, tiles.len() as u64, "only the warm-up missed the host cache");
        assert_eq!(k.evictions, 0, "the host cache never evicted");
    }
    group.finish();
}

fn bake_throughput(c: &mut Criterion) {
    let tex = load_texture();
    let dir = tempfile::tempdir().expect("creating a temporary folder for the bake output");
    let mut group = c.benchmark_group("bake");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Bytes(tex.bytes()));
    // Basis encoding is far slower and is measured by `tessera codecs`.
    for codec in [Codec::Raw, Codec::Lz4] {
        let out = dir.path().join(format!("bake-{}.tsa", codec.name()));
        let opts = options(codec);
        group.bench_function(codec.name(), |b| {
            b.iter_batched(
                || vec![tex.input()],
                |inputs| bake(inputs, &out, &opts, &NoProgress).expect("baking in the bench"),
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, tile_read, bake_throughput);
criterion_main!(benches);
