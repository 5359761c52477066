//! Bursts spread over frames, GPU-free: a cap on one frame's uploads from what an
//! upload costs the CPU (recording copies, page-table writes) and the GPU (copies and
//! level 1 of the hardware trilinear path), so a burst (a camera cut, a flushed pool)
//! takes a slice of its tiles each frame instead of one long frame.
//!
//! The renderer measures both costs (the GPU's with timestamps read back a few frames
//! later) and the streamer applies [`UploadSlice::tiles`] below its upload budget; the
//! tiles left wait in the ready queue, coarse mips first, while their ancestors show.

/// Fewest tiles a frame may upload, whatever the price: streaming always progresses.
/// About what a 0.35 ms slice holds of BC7 tiles on an H100 (some 10 µs each, on the
/// CPU). At 16, a price overestimated at a camera cut held an H100 to 16 BC7 tiles a
/// frame, and the view took 10 frames to be resident (BENCHMARKS.md, issue 45).
pub const MIN_SLICE_TILES: usize = 32;

/// The cost of a frame's upload work as (fixed ms, ms per tile).
pub type Price = (f64, f64);

/// Weight of the past against each new sample (about the last 20 frames that uploaded
/// count).
const FORGET: f64 = 0.95;

/// The cost of a frame's upload work against its number of tiles, `fixed + per_tile ·
/// n`, fitted by least squares over the recent frames (older ones weigh less). A frame's
/// fixed part (an encoder, a submission, a pass, however few its tiles) must not be
/// charged to its tiles: priced per tile from small batches alone, it would shrink the
/// slices, which makes the batches smaller and the price higher still. While the recent
/// frames all uploaded about as many tiles (no spread to separate the two parts), the
/// last fit's price per tile holds and its fixed part follows what those frames cost,
/// so a price fitted in a slow spell (a GPU still clocking up) falls again once frames
/// get cheaper, even while every frame is capped alike; before any fit there is no
/// price (and no cap).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Cost {
    /// Weighted sums: weight, n, ms, n², n·ms.
    w: f64,
    n: f64,
    ms: f64,
    nn: f64,
    nm: f64,
    /// The last fit.
    fit: Option<Price>,
}

impl Cost {
    fn observe(&mut self, ms: f64, tiles: usize) {
        if tiles == 0 || !ms.is_finite() || ms < 0.0 {
            return;
        }
        let n = tiles as f64;
        self.w = FORGET * self.w + 1.0;
        self.n = FORGET * self.n + n;
        self.ms = FORGET * self.ms + ms;
        self.nn = FORGET * self.nn + n * n;
        self.nm = FORGET * self.nm + n * ms;
        let spread = self.w * self.nn - self.n * self.n;
        // A spread of tiles across the samples: at least a few tiles of standard
        // deviation (variance · w² > 16 w²).
        if spread > 16.0 * self.w * self.w {
            let per_tile = (self.w * self.nm - self.n * self.ms) / spread;
            let fixed = (self.ms - per_tile * self.n) / self.w;
            if per_tile > 0.0 {
                self.fit = Some((fixed.max(0.0), per_tile));
                return;
            }
        }
        // No spread to fit a slope (or a slope that is not a price): the last slope
        // holds, through the recent frames' weighted mean; where the frames cost less
        // than that slope alone, the slope comes down to their cost per tile.
        if let Some((_, per_tile)) = self.fit {
            let fixed = (self.ms - per_tile * self.n) / self.w;
            self.fit = Some(if fixed >= 0.0 { (fixed, per_tile) } else { (0.0, self.ms / self.n) });
        }
        // Before any fit, frames without a spread set no price, and no cap: charging
        // the whole cost per tile from the start (an upper bound) locks the cap at its
        // floor, since frames capped alike never show a spread (on an H100, 16 tiles a
        // frame for good).
    }
}

/// The most tiles a frame uploads so that neither their CPU work nor their GPU work
/// goes over a slice of milliseconds ([`UploadSlice::tiles`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UploadSlice {
    slice_ms: f64,
    cpu: Cost,
    gpu: Cost,
}

impl UploadSlice {
    /// A cap of `slice_ms` of upload work a frame (a positive, finite number).
    pub fn new(slice_ms: f64) -> Self {
        Self { slice_ms, cpu: Cost::default(), gpu: Cost::default() }
    }

    /// The slice, ms.
    pub fn slice_ms(&self) -> f64 {
        self.slice_ms
    }

    /// Takes in the CPU time the renderer spent on a frame's `tiles` uploads.
    pub fn observe_cpu(&mut self, ms: f64, tiles: usize) {
        self.cpu.observe(ms, tiles);
    }

    /// Takes in the GPU time of a frame's `tiles` uploads (measured frames later).
    pub fn observe_gpu(&mut self, ms: f64, tiles: usize) {
        self.gpu.observe(ms, tiles);
    }

    /// The estimated cost of a frame's upload work on the CPU and on the GPU, each
    /// once measured.
    pub fn price_ms(&self) -> (Option<Price>, Option<Price>) {
        (self.cpu.fit, self.gpu.fit)
    }

    /// The most tiles the next frame may upload: as many as fit the slice (after the
    /// fixed part) at the current price on the CPU and on the GPU alike, at least
    /// [`MIN_SLICE_TILES`]; `None` (no cap) until an upload was priced.
    ///
    /// The two sides are not added. They overlap: the GPU's copies run while the CPU
    /// records the next ones, and where the GPU waits for the CPU, its timestamps
    /// (written before the first upload is recorded) already include the recording.
    /// Added, they charged the recording twice: on an H100 an RGBA8 burst was held to
    /// 16 tiles a frame (BENCHMARKS.md, issue 45).
    pub fn tiles(&self) -> Option<usize> {
        let fits = |fit: Option<Price>| {
            let (fixed, per_tile) = fit.filter(|p| p.1 > 0.0)?;
            let room = (self.slice_ms - fixed).max(0.0);
            // Finite and non-negative: the cast saturates.
            Some((room / per_tile).floor() as usize)
        };
        let n = match (fits(self.cpu.fit), fits(self.gpu.fit)) {
            (None, None) => return None,
            (Some(a), Some(b)) => a.min(b),
            (Some(n), None) | (None, Some(n)) => n,
        };
        Some(n.max(MIN_SLICE_TILES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpriced_means_no_cap() {
        let s = UploadSlice::new(0.5);
        assert_eq!(s.tiles(), None);
        let mut s = UploadSlice::new(0.5);
        s.observe_cpu(f64::NAN, 100);
        s.observe_gpu(-1.0, 100);
        s.observe_gpu(0.3, 0);
        assert_eq!(s.tiles(), None);
    }

    /// Before frames of different sizes separate the fixed part there is no price, and
    /// no cap: frames capped alike would never show the spread that prices them.
    #[test]
    fn one_batch_size_sets_no_price() {
        let mut s = UploadSlice::new(0.5);
        for _ in 0..50 {
            s.observe_cpu(0.3, 16);
            s.observe_gpu(0.3, 16);
        }
        assert_eq!(s.tiles(), None);
        // One burst gives the spread: 0.25 ms a frame and 2 + 3 µs a tile.
        s.observe_cpu(0.1 + 0.002 * 340.0, 340);
        s.observe_gpu(0.15 + 0.003 * 340.0, 340);
        for (fixed, per_tile) in [s.price_ms().0.unwrap(), s.price_ms().1.unwrap()] {
            assert!(fixed > 0.0 && per_tile > 0.0, "{fixed} {per_tile}");
        }
        assert!(s.tiles().is_some_and(|t| t >= MIN_SLICE_TILES));
    }

    /// A fixed cost per frame is not charged to the tiles: with 0.2 ms a frame and 5 µs
    /// a tile, a 0.5 ms slice holds 60 tiles, and small batches (whose price per tile is
    /// high) do not shrink it below that, however many of them follow.
    #[test]
    fn the_fixed_part_of_a_frame_is_not_charged_per_tile() {
        let mut s = UploadSlice::new(0.5);
        let cost = |n: usize| 0.2 + 0.005 * n as f64;
        for n in [340, 16, 60, 16, 120, 30] {
            s.observe_gpu(cost(n), n);
        }
        let (fixed, per_tile) = s.price_ms().1.unwrap();
        assert!((fixed - 0.2).abs() < 1e-9 && (per_tile - 0.005).abs() < 1e-12, "{fixed} {per_tile}");
        assert_eq!(s.tiles(), Some(60));
        // A long run of 16-tile frames (no spread left to fit) keeps the last fit.
        for _ in 0..500 {
            s.observe_gpu(cost(16), 16);
        }
        assert_eq!(s.tiles(), Some(60));
        // A slower device raises the price, and the cap follows.
        for n in [200, 20, 100, 40, 300, 60, 150, 16, 250, 80] {
            s.observe_gpu(0.2 + 0.01 * n as f64, n);
        }
        assert!(s.tiles().is_some_and(|t| (28..=36).contains(&t)), "{:?} {:?}", s.tiles(), s.price_ms());
    }

    /// The CPU and GPU sides are each held to the slice, not their sum: with 0.1 ms
    /// plus 10 µs a tile on the CPU and 0.1 ms plus 12 µs on the GPU, a 0.5 ms slice
    /// holds 33 tiles (the GPU's bound), not the 18 their sum would allow.
    #[test]
    fn each_side_is_held_to_the_slice() {
        let mut s = UploadSlice::new(0.5);
        for n in [300, 16, 60, 16, 120, 30] {
            s.observe_cpu(0.1 + 0.010 * n as f64, n);
            s.observe_gpu(0.1 + 0.012 * n as f64, n);
        }
        // 0.4 / 0.012 = 33.3 tiles (the fit rounds within a hair of it).
        assert!(s.tiles().is_some_and(|t| (32..=33).contains(&t)), "{:?}", s.tiles());
        // With only the CPU priced (a device without timestamps), its bound alone.
        let mut s = UploadSlice::new(0.5);
        for n in [300, 16, 60, 16, 120, 30] {
            s.observe_cpu(0.1 + 0.010 * n as f64, n);
        }
        assert!(s.tiles().is_some_and(|t| (39..=40).contains(&t)), "{:?}", s.tiles());
    }

    /// A price fitted while everything was slow (a GPU clocking up: every frame three
    /// times dearer) caps frames at the floor; frames capped alike then show no spread
    /// to fit again, but their cost still brings the fixed part down, and the cap up.
    #[test]
    fn a_price_from_a_slow_spell_comes_down_without_a_spread() {
        let mut s = UploadSlice::new(0.5);
        let cost = |n: usize| 0.1 + 0.005 * n as f64;
        for n in [300, 16, 60, 16, 120, 30] {
            s.observe_gpu(3.0 * cost(n), n);
        }
        assert_eq!(s.tiles(), Some(MIN_SLICE_TILES));
        let mut cap = MIN_SLICE_TILES;
        for _ in 0..200 {
            s.observe_gpu(cost(cap), cap);
            cap = s.tiles().unwrap();
        }
        // The cap climbs back to what the slice holds at the true price: 80 tiles
        // (79 measured, the price refitted to 0.096 ms and 5.05 µs a tile).
        assert!((64..=80).contains(&cap), "cap {cap}, price {:?}", s.price_ms());
    }

    #[test]
    fn never_below_the_floor() {
        let mut s = UploadSlice::new(0.5);
        s.observe_gpu(100.0, 100);
        s.observe_gpu(200.0, 200);
        assert_eq!(s.tiles(), Some(MIN_SLICE_TILES));
    }
}
