//! The lab's statistics: a distribution-free confidence interval of a median (for paired
//! comparisons) and an ordinary least-squares line fit (for the per-byte gap G of the
//! LogGP model). The bench's order statistics (median, percentiles) are
//! `quiver_cli::bench::stats`.
//!
//! Pure functions over slices; no I/O.

/// A confidence interval of a median from order statistics ([`median_interval`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MedianInterval {
    /// The k-th smallest sample.
    pub(crate) low: f64,
    /// The k-th largest sample.
    pub(crate) high: f64,
    /// The probability that the interval covers the true median (at least the one asked
    /// for; exact for continuous distributions).
    pub(crate) confidence: f64,
}

/// The distribution-free confidence interval of the median of the population `sorted`
/// (ascending) was drawn from: `[x(k), x(n+1-k)]` with the largest k whose coverage,
/// `1 - 2 P(B <= k-1)` for B ~ Binomial(n, 1/2), is at least `confidence` (the sign-test
/// interval; it assumes only independent samples). `None` when even `[min, max]` covers
/// less (n = 5 reaches 93.75%, so 95% needs n >= 6), or `confidence` is not in (0, 1).
pub(crate) fn median_interval(sorted: &[f64], confidence: f64) -> Option<MedianInterval> {
    let count = sorted.len();
    if count == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    // P(B <= j) for j = 0, 1, ..., in log space (0.5^n underflows for n > 1074).
    let ln_half_pow = -(count as f64) * std::f64::consts::LN_2;
    let mut ln_choose = 0.0f64; // ln C(n, 0)
    let mut below = 0.0f64; // P(B <= k - 1), starting at k = 1: P(B <= 0)
    let mut best: Option<(usize, f64)> = None;
    for k in 1..=count.div_ceil(2) {
        let j = k - 1;
        if j > 0 {
            ln_choose += ((count - j + 1) as f64).ln() - (j as f64).ln();
        }
        below += (ln_choose + ln_half_pow).exp();
        let coverage = 1.0 - 2.0 * below;
        if coverage + 1e-12 < confidence {
            break;
        }
        best = Some((k, coverage));
    }
    best.map(|(k, coverage)| MedianInterval {
        low: sorted[k - 1],
        high: sorted[count - k],
        confidence: coverage,
    })
}

/// Arithmetic mean; `None` for an empty slice.
pub(crate) fn mean(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    Some(samples.iter().sum::<f64>() / samples.len() as f64)
}

/// A straight line `y = intercept + slope * x` fitted by ordinary least squares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LineFit {
    /// dy/dx.
    pub(crate) slope: f64,
    /// y at x = 0.
    pub(crate) intercept: f64,
    /// Coefficient of determination, 0..=1 (1 = every point on the line); 1 when every y is
    /// equal (the line explains all of zero variance).
    pub(crate) r_squared: f64,
    /// Points fitted.
    pub(crate) points: usize,
}

/// Fits `y = a + b x` to the points `(xs[i], ys[i])` by ordinary least squares.
/// `None` when the slices differ in length, there are fewer than two points, all x are
/// equal, or a value is not finite.
pub(crate) fn fit_line(xs: &[f64], ys: &[f64]) -> Option<LineFit> {
    let count = xs.len();
    if count != ys.len() || count < 2 {
        return None;
    }
    if xs.iter().chain(ys.iter()).any(|value| !value.is_finite()) {
        return None;
    }
    // Centred sums (numerically safer than the textbook sum-of-squares form).
    let mean_x = mean(xs)?;
    let mean_y = mean(ys)?;
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for (&x, &y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mean_x, y - mean_y);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let r_squared = if syy == 0.0 {
        1.0
    } else {
        (sxy * sxy / (sxx * syy)).clamp(0.0, 1.0)
    };
    Some(LineFit {
        slope,
        intercept,
        r_squared,
        points: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_intervals_match_the_sign_test_tables() {
        let six = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        // n = 6: only [min, max] reaches 95%, with coverage 1 - 2/64.
        let interval = median_interval(&six, 0.95).expect("n = 6 reaches 95%");
        assert_eq!((interval.low, interval.high), (1.0, 6.0));
        assert!((interval.confidence - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
        // n = 5: [min, max] covers 1 - 2/32 = 93.75% only.
        assert_eq!(median_interval(&six[..5], 0.95), None);
        let interval = median_interval(&six[..5], 0.9).expect("90%");
        assert_eq!((interval.low, interval.high), (1.0, 5.0));
        assert!((interval.confidence - 0.9375).abs() < 1e-12);
        // n = 10: ranks 2 and 9, coverage 1 - 2 * 11/1024 (k = 3 would give 89%).
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let interval = median_interval(&ten, 0.95).expect("n = 10");
        assert_eq!((interval.low, interval.high), (2.0, 9.0));
        assert!((interval.confidence - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        // n = 100: the textbook ranks are 40 and 61 (coverage 96.5%).
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        let interval = median_interval(&hundred, 0.95).expect("n = 100");
        assert_eq!((interval.low, interval.high), (40.0, 61.0));
        assert!(interval.confidence > 0.95 && interval.confidence < 0.97);
        // Large n does not underflow.
        let many: Vec<f64> = (1..=5000).map(f64::from).collect();
        let interval = median_interval(&many, 0.95).expect("n = 5000");
        assert!(
            interval.low < 2500.5 && interval.high > 2500.5,
            "{interval:?}"
        );
        assert_eq!(median_interval(&[], 0.95), None);
        assert_eq!(median_interval(&six, 1.0), None);
    }

    #[test]
    fn mean_of_known_values() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[2.0, 4.0, 9.0]), Some(5.0));
    }

    #[test]
    fn line_fit_recovers_an_exact_line() {
        // y = 3 + 0.5 x.
        let xs = [0.0, 2.0, 4.0, 10.0];
        let ys: Vec<f64> = xs.iter().map(|x| 3.0 + 0.5 * x).collect();
        let fit = fit_line(&xs, &ys).expect("fit");
        assert!((fit.slope - 0.5).abs() < 1e-12, "{fit:?}");
        assert!((fit.intercept - 3.0).abs() < 1e-12, "{fit:?}");
        assert!((fit.r_squared - 1.0).abs() < 1e-12, "{fit:?}");
        assert_eq!(fit.points, 4);
    }

    #[test]
    fn line_fit_of_noisy_points_matches_the_textbook() {
        // x = 1..5, y = 2, 4, 5, 4, 5: slope 0.6, intercept 2.2, r^2 = 0.6.
        let fit = fit_line(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 5.0, 4.0, 5.0]).expect("fit");
        assert!((fit.slope - 0.6).abs() < 1e-12, "{fit:?}");
        assert!((fit.intercept - 2.2).abs() < 1e-12, "{fit:?}");
        assert!((fit.r_squared - 0.6).abs() < 1e-12, "{fit:?}");
    }

    #[test]
    fn line_fit_of_large_sizes_keeps_precision() {
        // Sizes in bytes up to 4 MiB, times in µs: G = 0.05 ns/byte.
        let xs = [65536.0, 262144.0, 1048576.0, 4194304.0];
        let ys: Vec<f64> = xs.iter().map(|x| 1.5 + 0.00005 * x).collect();
        let fit = fit_line(&xs, &ys).expect("fit");
        assert!((fit.slope * 1e3 - 0.05).abs() < 1e-12, "{fit:?}");
        assert!((fit.intercept - 1.5).abs() < 1e-9, "{fit:?}");
    }

    #[test]
    fn line_fit_rejects_degenerate_input() {
        assert_eq!(fit_line(&[1.0], &[1.0]), None);
        assert_eq!(fit_line(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(fit_line(&[1.0, 2.0], &[1.0]), None);
        assert_eq!(fit_line(&[1.0, f64::NAN], &[1.0, 2.0]), None);
        let flat = fit_line(&[1.0, 2.0, 3.0], &[4.0, 4.0, 4.0]).expect("flat fit");
        assert_eq!(
            (flat.slope, flat.intercept, flat.r_squared),
            (0.0, 4.0, 1.0)
        );
    }
}
