//! Statistics of the bench: order statistics over samples (median, percentiles) and where
//! two measured curves cross (crossovers).
//!
//! Pure functions over slices; no I/O, no allocation. The caller sorts once
//! ([`sort_samples`]) and then reads any number of order statistics from the sorted slice.

/// Sorts samples ascending in place (total order: NaN, which a timing never yields, sorts last).
pub fn sort_samples(samples: &mut [f64]) {
    samples.sort_unstable_by(f64::total_cmp);
}

/// Median of an ascending-sorted slice: the middle element, or the mean of the two middle
/// elements when the count is even. `None` for an empty slice.
pub fn median(sorted: &[f64]) -> Option<f64> {
    let count = sorted.len();
    if count == 0 {
        return None;
    }
    let middle = count / 2;
    if count % 2 == 1 {
        Some(sorted[middle])
    } else {
        Some((sorted[middle - 1] + sorted[middle]) / 2.0)
    }
}

/// Percentile of an ascending-sorted slice by the nearest-rank method: the smallest sample
/// such that at least `percent`% of the samples are less than or equal to it, that is
/// `sorted[ceil(percent / 100 * n) - 1]` (and the minimum for `percent` = 0).
/// `None` for an empty slice or a `percent` outside 0..=100.
pub fn percentile(sorted: &[f64], percent: f64) -> Option<f64> {
    let count = sorted.len();
    if count == 0 || !(0.0..=100.0).contains(&percent) {
        return None;
    }
    // The epsilon keeps a product that should be whole (99.9% of 1000 = 999.0000000000001
    // in floating point) from rounding up to the next rank.
    let rank = (percent / 100.0 * count as f64 - 1e-9).ceil() as usize;
    Some(sorted[rank.clamp(1, count) - 1])
}

/// Median and 99th percentile (nearest rank) of an ascending-sorted slice of timings.
/// A timed run has at least one sample; an empty slice gives NaN for both.
pub fn median_and_p99(sorted: &[f64]) -> (f64, f64) {
    (
        median(sorted).unwrap_or(f64::NAN),
        percentile(sorted, 99.0).unwrap_or(f64::NAN),
    )
}

/// Where two piecewise-linear curves sampled at the same ascending `xs` cross: the first
/// x from which `b` is below `a` (b better, for times) at every later sample. The crossing
/// is interpolated linearly between the last sample where `a <= b` and the next one.
/// Returns `Crossing::Never` when `b` is not below `a` at the last sample and
/// `Crossing::Always` when `b` is below `a` at every sample.
pub fn crossing(xs: &[f64], a: &[f64], b: &[f64]) -> Crossing {
    let count = xs.len().min(a.len()).min(b.len());
    if count == 0 {
        return Crossing::Never;
    }
    // The last sample where b is not better; b must be better everywhere after it.
    let last_not_better = (0..count).rev().find(|&i| b[i] >= a[i]);
    match last_not_better {
        None => Crossing::Always,
        Some(i) if i + 1 == count => Crossing::Never,
        Some(i) => {
            // Difference d = a - b goes from <= 0 at i to > 0 at i + 1.
            let (d0, d1) = (a[i] - b[i], a[i + 1] - b[i + 1]);
            let fraction = if d1 - d0 > 0.0 {
                (-d0 / (d1 - d0)).clamp(0.0, 1.0)
            } else {
                0.0
            };
            Crossing::At(xs[i] + fraction * (xs[i + 1] - xs[i]))
        }
    }
}

/// Result of [`crossing`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crossing {
    /// The second curve is better from this x on.
    At(f64),
    /// The second curve is better at every sample.
    Always,
    /// The second curve is not better at the last sample.
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[1.0, 2.0, 10.0]), Some(2.0));
        assert_eq!(median(&[1.0, 2.0, 4.0, 10.0]), Some(3.0));
    }

    #[test]
    fn nearest_rank_percentiles() {
        // The textbook example: 15, 20, 35, 40, 50.
        let sorted = [15.0, 20.0, 35.0, 40.0, 50.0];
        assert_eq!(percentile(&sorted, 5.0), Some(15.0));
        assert_eq!(percentile(&sorted, 30.0), Some(20.0));
        assert_eq!(percentile(&sorted, 40.0), Some(20.0));
        assert_eq!(percentile(&sorted, 50.0), Some(35.0));
        assert_eq!(percentile(&sorted, 100.0), Some(50.0));
        assert_eq!(percentile(&sorted, 0.0), Some(15.0));
        assert_eq!(percentile(&sorted, 101.0), None);
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn p99_of_one_to_a_thousand() {
        let mut samples: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        sort_samples(&mut samples);
        assert_eq!(percentile(&samples, 99.0), Some(990.0));
        assert_eq!(percentile(&samples, 99.9), Some(999.0));
        assert_eq!(median(&samples), Some(500.5));
    }

    #[test]
    fn p99_of_few_samples_is_the_maximum() {
        let mut samples = vec![3.0, 1.0, 2.0];
        sort_samples(&mut samples);
        assert_eq!(samples, vec![1.0, 2.0, 3.0]);
        assert_eq!(percentile(&samples, 99.0), Some(3.0));
    }

    #[test]
    fn crossings_are_interpolated() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        // a - b: -2, -1, +1, +3: crosses halfway between 2 and 3.
        let a = [1.0, 2.0, 4.0, 6.0];
        let b = [3.0, 3.0, 3.0, 3.0];
        assert_eq!(crossing(&xs, &a, &b), Crossing::At(2.5));
        assert_eq!(crossing(&xs, &b, &a), Crossing::Never);
        assert_eq!(crossing(&xs, &a, &[0.0; 4]), Crossing::Always);
        // Noise: b better at x = 2, worse at 3, better from 4 on: the crossing is after 3.
        let noisy_b = [3.0, 1.0, 5.0, 3.0];
        assert_eq!(crossing(&xs, &a, &noisy_b), Crossing::At(3.0 + 1.0 / 4.0));
        assert_eq!(crossing(&[], &[], &[]), Crossing::Never);
    }
}
