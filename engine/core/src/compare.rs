//! Image comparison for regression tests and convergence: PSNR, maximum error and a
//! difference image, on RGBA8 buffers (alpha ignored).

/// How two images differ.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Difference {
    /// Peak signal-to-noise ratio over RGB in dB (infinite when identical).
    pub psnr_db: f64,
    /// Largest absolute difference of any channel.
    pub max_error: u8,
    /// Mean absolute difference over RGB channels.
    pub mean_error: f64,
    /// Fraction of pixels where some channel differs by more than 16.
    pub bad_pixel_fraction: f64,
}

/// Compares two RGBA8 images of the same size.
pub fn compare(a: &[u8], b: &[u8]) -> Difference {
    assert_eq!(a.len(), b.len(), "images differ in size");
    let (mut se, mut sum, mut max, mut bad) = (0u64, 0u64, 0u8, 0u64);
    for (pa, pb) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
        let mut worst = 0u8;
        for k in 0..3 {
            let d = pa[k].abs_diff(pb[k]);
            se += u64::from(d) * u64::from(d);
            sum += u64::from(d);
            worst = worst.max(d);
        }
        max = max.max(worst);
        bad += u64::from(worst > 16);
    }
    let n = (a.len() / 4 * 3).max(1) as f64;
    let mse = se as f64 / n;
    let psnr_db = if mse == 0.0 { f64::INFINITY } else { 10.0 * (255.0f64 * 255.0 / mse).log10() };
    Difference {
        psnr_db,
        max_error: max,
        mean_error: sum as f64 / n,
        bad_pixel_fraction: bad as f64 / (n / 3.0),
    }
}

/// A visualisation of the difference: black where equal, brighter where different (×4).
pub fn diff_image(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.chunks_exact(4)
        .zip(b.chunks_exact(4))
        .flat_map(|(pa, pb)| {
            let d = |k: usize| pa[k].abs_diff(pb[k]).saturating_mul(4);
            [d(0), d(1), d(2), 255]
        })
        .collect()
}

/// Counts pixels within `tolerance` of `colour` (RGB).
pub fn count_colour(img: &[u8], colour: [u8; 4], tolerance: u8) -> usize {
    img.chunks_exact(4).filter(|p| (0..3).all(|k| p[k].abs_diff(colour[k]) <= tolerance)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn psnr_of_known_error() {
        let a = vec![100u8; 400];
        assert!(compare(&a, &a).psnr_db.is_infinite());
        let mut b = a.clone();
        for p in b.chunks_exact_mut(4) {
            p[0] = 110;
            p[1] = 90;
            p[2] = 110;
        }
        let d = compare(&a, &b);
        // MSE 100 -> 10 log10(65025 / 100) = 28.13 dB.
        assert!((d.psnr_db - 28.13).abs() < 0.01, "{d:?}");
        assert_eq!(d.max_error, 10);
        assert_eq!(diff_image(&a, &b)[0..4], [40, 40, 40, 255]);
        assert_eq!(count_colour(&b, [110, 90, 110, 255], 0), 100);
    }
}
