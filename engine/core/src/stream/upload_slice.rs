//! Bursts spread over frames, GPU-free: a cap on one frame's uploads from what an
//! upload costs the CPU (recording copies, page-table writes) and the GPU (copies and
//! level 1 of the hardware trilinear path), so a burst (a camera cut, a flushed pool)
//! takes a slice of its tiles each frame instead of one long frame.
//!
//! The renderer measures both costs (the GPU's with timestamps read back a few frames
//! later) and the streamer applies [`UploadSlice::tiles`] below its upload budget; the
//! tiles left wait in the ready queue, coarse mips first, while their ancestors show.

/// Fewest tiles a frame may upload, whatever the price: streaming always progresses.
pub const MIN_SLICE_TILES: usize = 16;

/// Fewest tiles of a frame whose cost is taken as a price sample: smaller batches are
/// dominated by the fixed cost of a frame's upload work (an encoder, a submission, a
/// pass), which would inflate the price and shrink the slices further.
pub const MIN_SAMPLE_TILES: usize = 16;

/// Weight of a sample above the estimate (prices follow a rise quickly).
const RISE: f64 = 0.5;
/// Weight of a sample below the estimate (and fall slowly).
const FALL: f64 = 0.125;

/// A per-tile price in milliseconds, from frames of at least [`MIN_SAMPLE_TILES`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Price(Option<f64>);

impl Price {
    fn observe(&mut self, ms: f64, tiles: usize) {
        if tiles < MIN_SAMPLE_TILES || !ms.is_finite() || ms < 0.0 {
            return;
        }
        let sample = ms / tiles as f64;
        self.0 = Some(match self.0 {
            None => sample,
            Some(old) => old + if sample > old { RISE } else { FALL } * (sample - old),
        });
    }
}

/// The most tiles a frame uploads so that their CPU and GPU work together stay within
/// a slice of milliseconds ([`UploadSlice::tiles`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UploadSlice {
    slice_ms: f64,
    cpu: Price,
    gpu: Price,
}

impl UploadSlice {
    /// A cap of `slice_ms` of upload work a frame (a positive, finite number).
    pub fn new(slice_ms: f64) -> Self {
        Self { slice_ms, cpu: Price::default(), gpu: Price::default() }
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

    /// The estimated cost of one upload (CPU plus GPU), ms, once either was priced.
    pub fn price_ms(&self) -> Option<f64> {
        match (self.cpu.0, self.gpu.0) {
            (None, None) => None,
            (c, g) => Some(c.unwrap_or(0.0) + g.unwrap_or(0.0)),
        }
    }

    /// The most tiles the next frame may upload: as many as fit the slice at the
    /// current price, at least [`MIN_SLICE_TILES`]; `None` (no cap) until an upload was
    /// priced.
    pub fn tiles(&self) -> Option<usize> {
        let price = self.price_ms().filter(|p| *p > 0.0)?;
        // Finite and non-negative: the cast saturates.
        Some(((self.slice_ms / price).floor() as usize).max(MIN_SLICE_TILES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpriced_means_no_cap() {
        let mut s = UploadSlice::new(0.5);
        assert_eq!(s.tiles(), None);
        // Too few tiles to price: the fixed cost would dominate.
        s.observe_cpu(0.2, MIN_SAMPLE_TILES - 1);
        s.observe_gpu(0.4, 3);
        assert_eq!(s.tiles(), None);
    }

    #[test]
    fn cpu_and_gpu_prices_add_up() {
        let mut s = UploadSlice::new(0.5);
        s.observe_cpu(0.4, 200); // 2 µs a tile
        assert_eq!(s.tiles(), Some(250));
        s.observe_gpu(0.6, 200); // 3 µs a tile more
        assert_eq!(s.tiles(), Some(100));
    }

    #[test]
    fn rises_fast_falls_slowly_never_below_the_floor() {
        let mut s = UploadSlice::new(0.5);
        s.observe_gpu(1.0, 100); // 10 µs
        s.observe_gpu(3.0, 100); // 30 µs: halfway up at once
        assert_eq!(s.tiles(), Some(25));
        s.observe_gpu(1.0, 100); // back to 10 µs: an eighth of the way down
        assert!((s.price_ms().unwrap() - 0.018_75).abs() < 1e-12);
        s.observe_gpu(100.0, 100);
        assert_eq!(s.tiles(), Some(MIN_SLICE_TILES));
        // Nonsense is ignored.
        let before = s.clone();
        s.observe_cpu(f64::NAN, 100);
        s.observe_gpu(-1.0, 100);
        assert_eq!(s, before);
    }
}
