//! Order statistics over samples (median, percentiles) for `quiver bench`.
//!
//! Pure functions over a slice of samples; no I/O. The caller sorts once
//! ([`sort_samples`]) and then reads any number of statistics from the sorted slice.

/// Sorts samples ascending in place (total order: NaN, which a timing never yields, sorts last).
pub(crate) fn sort_samples(samples: &mut [f64]) {
    samples.sort_unstable_by(f64::total_cmp);
}

/// Median of an ascending-sorted slice: the middle element, or the mean of the two middle
/// elements when the count is even. `None` for an empty slice.
pub(crate) fn median(sorted: &[f64]) -> Option<f64> {
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
pub(crate) fn percentile(sorted: &[f64], percent: f64) -> Option<f64> {
    let count = sorted.len();
    if count == 0 || !(0.0..=100.0).contains(&percent) {
        return None;
    }
    // The epsilon keeps a product that should be whole (99.9% of 1000 = 999.0000000000001
    // in floating point) from rounding up to the next rank.
    let rank = (percent / 100.0 * count as f64 - 1e-9).ceil() as usize;
    Some(sorted[rank.clamp(1, count) - 1])
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
}
