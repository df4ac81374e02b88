//! Figures measured in pairs (side A and side B of each pair: detection on and off, quiver
//! and its baseline), grouped by point and compared by the ratio A / B: the median of the
//! paired ratios, with its distribution-free confidence interval. Both summaries of
//! `quiver-bench bench` (`detect.rs`, `baseline.rs`) are built on this.
//!
//! Pure code over the collected records; no I/O.

use std::collections::BTreeMap;

use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::record::Metric;
use quiver_cli::bench::result::RankResult;
use quiver_cli::bench::stats::{median, sort_samples};

use super::plan::LabTest;
use super::record::LabRecord;
use crate::stats::{median_interval, MedianInterval};

/// Confidence of the interval of a paired ratio.
pub(crate) const CONFIDENCE: f64 = 0.95;

/// Two figures measured in pairs, compared by the ratio A / B.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PairedRatio {
    /// Pairs with both figures (and B above 0).
    pub(crate) pairs: usize,
    /// Median of the A figures and of the B figures over those pairs.
    pub(crate) median_a: f64,
    /// See `median_a`.
    pub(crate) median_b: f64,
    /// Per pair A / B, sorted.
    pub(crate) ratios: Vec<f64>,
    /// Median of `ratios`.
    pub(crate) median: f64,
    /// Order-statistics interval of `median` at [`CONFIDENCE`] (None: fewer than 6
    /// pairs).
    pub(crate) interval: Option<MedianInterval>,
}

/// The paired comparison of `pairs` (A, B); pairs whose B is not above 0 are left out.
/// `None` when no pair is left.
pub(crate) fn paired_ratio(pairs: &[(f64, f64)]) -> Option<PairedRatio> {
    let kept: Vec<(f64, f64)> = pairs.iter().copied().filter(|&(_, b)| b > 0.0).collect();
    let mut a: Vec<f64> = kept.iter().map(|pair| pair.0).collect();
    let mut b: Vec<f64> = kept.iter().map(|pair| pair.1).collect();
    let mut ratios: Vec<f64> = kept.iter().map(|(a, b)| a / b).collect();
    for samples in [&mut a, &mut b, &mut ratios] {
        sort_samples(samples);
    }
    Some(PairedRatio {
        pairs: kept.len(),
        median_a: median(&a)?,
        median_b: median(&b)?,
        median: median(&ratios)?,
        interval: median_interval(&ratios, CONFIDENCE),
        ratios,
    })
}

/// What a paired comparison groups by: test, transport, variant and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PairKey {
    /// The test.
    pub(crate) test: LabTest,
    /// The transport the comparison is named after.
    pub(crate) transport: Transport,
    /// The variant, where a suite gave one.
    pub(crate) variant: Option<String>,
    /// Message size in bytes.
    pub(crate) size: u64,
}

/// The records of one [`PairKey`], by pair.
pub(crate) struct PairGroup<'a> {
    /// What the records have in common.
    pub(crate) key: PairKey,
    /// The figure compared.
    pub(crate) metric: Metric,
    /// Per pair (`round`): the figure of side A and of side B.
    by_pair: BTreeMap<u32, [Option<f64>; 2]>,
    /// The records compared, with their side (0: A, 1: B).
    pub(crate) records: Vec<(usize, &'a LabRecord)>,
}

impl PairGroup<'_> {
    /// The (A, B) figures of the pairs that have both.
    pub(crate) fn pairs(&self) -> Vec<(f64, f64)> {
        self.by_pair
            .values()
            .filter_map(|[a, b]| a.zip(*b))
            .collect()
    }
}

/// Groups the records that have a figure, a pair (`round`) and a side (`side`: 0 for A,
/// 1 for B, `None`: not compared) by `key`, in first-seen order.
pub(crate) fn group_pairs<'a>(
    records: &'a [LabRecord],
    key: impl Fn(&LabRecord) -> PairKey,
    side: impl Fn(&LabRecord) -> Option<usize>,
) -> Vec<PairGroup<'a>> {
    let mut groups: Vec<PairGroup<'a>> = Vec::new();
    for record in records {
        let (Some((metric, value)), Some(pair), Some(side)) =
            (record.figure(), record.labels().round, side(record))
        else {
            continue;
        };
        let key = key(record);
        let index = match groups.iter().position(|group| group.key == key) {
            Some(index) => index,
            None => {
                groups.push(PairGroup {
                    key,
                    metric,
                    by_pair: BTreeMap::new(),
                    records: Vec::new(),
                });
                groups.len() - 1
            }
        };
        let group = &mut groups[index];
        group.by_pair.entry(pair).or_default()[side] = Some(value);
        group.records.push((side, record));
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratio_pairs_and_bounds_the_median() {
        // Ratios 0.5, 1, 2, 3, 4, 5, 6 (A = ratio x B); one pair with B = 0 left out.
        let mut pairs: Vec<(f64, f64)> = [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .zip([10.0, 1.0, 4.0, 2.0, 8.0, 3.0, 5.0])
            .map(|(&ratio, b)| (ratio * b, b))
            .collect();
        pairs.push((1.0, 0.0));
        let paired = paired_ratio(&pairs).expect("pairs");
        assert_eq!(paired.pairs, 7);
        assert_eq!(paired.ratios, vec![0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(paired.median, 3.0);
        // A: 5, 1, 8, 6, 32, 15, 30 -> median 8; B: median 4.
        assert_eq!(paired.median_a, 8.0);
        assert_eq!(paired.median_b, 4.0);
        // n = 7: the 95% interval is [x(1), x(7)] (coverage 1 - 2/128).
        let interval = paired.interval.expect("7 pairs give a 95% interval");
        assert_eq!((interval.low, interval.high), (0.5, 6.0));
        assert!((interval.confidence - (1.0 - 2.0 / 128.0)).abs() < 1e-12);
        assert_eq!(paired_ratio(&[(1.0, 0.0)]), None);
        assert_eq!(paired_ratio(&[]), None);
    }
}
