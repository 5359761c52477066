//! Soak of the real `Streamer` without a GPU: many frames of random camera cuts over a
//! 65536² virtual texture through a 256-slot pool. The loader queue, the ready and
//! prefetch queues, the host cache and the process's memory must stay flat.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use tessera_core::stream::simulate::{SoakConfig, SoakSample, soak};

/// Checks that every queue is bounded by the pool and that memory does not grow
/// between the first and the second half of the run.
fn assert_flat(samples: &[SoakSample], slots: usize) {
    assert!(samples.len() >= 4, "{samples:?}");
    for s in samples {
        assert!(s.resident <= slots, "{s:?}");
        assert!(s.loader_queue + s.ready + s.prefetched <= 16 * slots, "queues grow: {s:?}");
        assert!(s.host_bytes <= 16 << 20, "host cache over budget: {s:?}");
        assert!(s.uploads > 0, "nothing streamed: {s:?}");
    }
    let half = samples.len() / 2;
    let first = samples[..half].iter().map(|s| s.rss_bytes).max().unwrap();
    let second = samples[half..].iter().map(|s| s.rss_bytes).max().unwrap();
    assert!(second <= first + (32 << 20), "memory grows: {first} then {second} bytes");
}

#[test]
fn random_cuts_keep_queues_and_memory_flat() {
    let config = SoakConfig { frames: 12_000, sample_every: 1000, ..SoakConfig::default() };
    let samples = soak(config).unwrap();
    assert_flat(&samples, 256);
}

/// The 10⁵-frame soak behind BENCHMARKS.md; prints the series as a table.
/// `cargo test --release -p tessera-vt-core --test soak soak_series -- --ignored --nocapture`
#[test]
#[ignore = "long soak: run in release with --ignored --nocapture"]
fn soak_series() {
    let samples =
        soak(SoakConfig { frames: 100_000, sample_every: 10_000, ..SoakConfig::default() }).unwrap();
    println!(
        "| frame | resident | loader queue | ready | prefetched | host MiB | RSS MiB | uploads | median ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in &samples {
        println!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {} | {:.3} |",
            s.frame,
            s.resident,
            s.loader_queue,
            s.ready,
            s.prefetched,
            s.host_bytes as f64 / 1048576.0,
            s.rss_bytes as f64 / 1048576.0,
            s.uploads,
            s.median_ms
        );
    }
    assert_flat(&samples, 256);
}
