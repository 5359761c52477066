//! The page's pace: the median of the recent frame times (between animation-frame
//! timestamps) and the tiles decoded per second over the last second, for `#stats` and
//! the overlay.

use std::collections::VecDeque;

/// Frame times kept for the median.
const FRAMES: usize = 120;
/// The window the decode rate is averaged over, milliseconds.
const RATE_WINDOW_MS: f64 = 1000.0;

/// Recent frame times and decode counts, fed once per animation frame.
#[derive(Clone, Debug, Default)]
pub struct FrameStats {
    last_ms: Option<f64>,
    frame_ms: VecDeque<f64>,
    /// `(timestamp, tiles decoded so far)`, oldest first; one older than the window stays
    /// so that the rate spans the whole window.
    decoded: VecDeque<(f64, u64)>,
}

impl FrameStats {
    /// Records the frame whose animation-frame timestamp is `now_ms`, when `tiles_decoded`
    /// tiles had been decoded in all. A timestamp that does not move forward adds no
    /// frame time.
    pub fn push(&mut self, now_ms: f64, tiles_decoded: u64) {
        if let Some(last) = self.last_ms
            && now_ms > last
        {
            if self.frame_ms.len() == FRAMES {
                self.frame_ms.pop_front();
            }
            self.frame_ms.push_back(now_ms - last);
        }
        if self.last_ms.is_none_or(|last| now_ms > last) {
            self.last_ms = Some(now_ms);
            self.decoded.push_back((now_ms, tiles_decoded));
        }
        while self.decoded.len() > 2 && now_ms - self.decoded[1].0 >= RATE_WINDOW_MS {
            self.decoded.pop_front();
        }
    }

    /// The median of the last frame times (up to 120), milliseconds; `None` before the
    /// second frame.
    pub fn median_ms(&self) -> Option<f64> {
        let mut sorted: Vec<f64> = self.frame_ms.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(sorted[n / 2]),
            _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
        }
    }

    /// The frame times kept, oldest first, milliseconds.
    pub fn frame_times(&self) -> impl ExactSizeIterator<Item = f64> + '_ {
        self.frame_ms.iter().copied()
    }

    /// Tiles decoded per second over about the last second (0 before two frames).
    pub fn tiles_per_s(&self) -> f64 {
        match (self.decoded.front(), self.decoded.back()) {
            (Some(&(t0, a)), Some(&(t1, b))) if t1 > t0 => b.saturating_sub(a) as f64 * 1e3 / (t1 - t0),
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_frame_time_ignores_a_slow_frame() {
        let mut s = FrameStats::default();
        assert_eq!(s.median_ms(), None);
        let mut t = 0.0;
        for (i, dt) in [16.0, 17.0, 500.0, 16.0, 18.0].into_iter().enumerate() {
            s.push(t, i as u64);
            t += dt;
        }
        s.push(t, 5);
        assert_eq!(s.frame_times().len(), 5);
        assert_eq!(s.median_ms(), Some(17.0));
        s.push(t + 20.0, 5);
        assert_eq!(s.median_ms(), Some(17.5), "even count: the mean of the middle two");
        // A repeated timestamp adds no zero-length frame.
        s.push(t + 20.0, 5);
        assert_eq!(s.frame_times().len(), 6);
    }

    #[test]
    fn the_decode_rate_spans_the_last_second() {
        let mut s = FrameStats::default();
        assert_eq!(s.tiles_per_s(), 0.0);
        // 10 tiles per 100 ms frame for 3 s, then nothing for 2 s.
        for i in 0..=30u64 {
            s.push(i as f64 * 100.0, i * 10);
        }
        assert!((s.tiles_per_s() - 100.0).abs() < 1e-9, "{}", s.tiles_per_s());
        for i in 31..=50u64 {
            s.push(i as f64 * 100.0, 300);
        }
        assert_eq!(s.tiles_per_s(), 0.0);
        assert!(s.frame_times().len() <= FRAMES);
    }
}
