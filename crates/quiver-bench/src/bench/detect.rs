//! The summary of `--detect both|interleave`: failure detection on against off, per test,
//! transport, variant and size, from the rounds (or pairs of blocks) the run measured: the
//! medians of on and off, their ratio, the median of the paired ratios with its
//! distribution-free 95% interval, and what the looks themselves took. As a table and as
//! one JSON summary record per point.

use std::io::{self, Write};

use serde::Serialize;

use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::record::{DetectMode, Metric};
use quiver_cli::bench::report::{Report, Style};
use quiver_cli::bench::result::RankResult;
use quiver_cli::bench::sizes::format_size;
use quiver_cli::bench::stats::{median, sort_samples};
use quiver_cli::bench::table::format_significant;

use super::paired::{group_pairs, paired_ratio, PairKey, CONFIDENCE};
use super::plan::LabTest;
use super::record::LabRecord;
use crate::stats::MedianInterval;

/// `variant` of the summary records (one per test, transport and size).
pub(crate) const VARIANT_DETECT_SUMMARY: &str = "detect_on_off";

/// The on/off comparison of one test, transport, variant and size over the rounds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DetectComparison {
    /// Test compared.
    pub(crate) test: LabTest,
    /// Transport compared.
    pub(crate) transport: Transport,
    /// Variant compared, where a suite gave one.
    pub(crate) variant: Option<String>,
    /// Size compared, bytes.
    pub(crate) size: u64,
    /// The figure compared.
    pub(crate) metric: Metric,
    /// Rounds with both an on and an off figure.
    pub(crate) rounds: usize,
    /// Median of the on figures and of the off figures.
    pub(crate) median_on: f64,
    /// See `median_on`.
    pub(crate) median_off: f64,
    /// Per round on / off (paired: each round's off runs right after its on), sorted.
    pub(crate) paired_ratios: Vec<f64>,
    /// Median of `paired_ratios`.
    pub(crate) paired_median: f64,
    /// Order-statistics interval of the median paired ratio (None: too few rounds).
    pub(crate) interval: Option<MedianInterval>,
    /// Median `detect_share` of the on rounds (the looks' own cost, in the same runs).
    pub(crate) share_on: Option<f64>,
    /// Median `detect_share` of the off rounds.
    pub(crate) share_off: Option<f64>,
    /// Median share of the on rounds without the slow looks (`detect_slow_ns`).
    pub(crate) share_on_without_slow: Option<f64>,
}

/// Compares on against off over the rounds in `records` (with `detect` and `round`
/// set), per test, transport, variant and size, in first-seen order.
pub(crate) fn detect_comparisons(records: &[LabRecord]) -> Vec<DetectComparison> {
    let key = |record: &LabRecord| PairKey {
        test: record.test(),
        transport: record.transport(),
        variant: record.labels().variant.clone(),
        size: record.size(),
    };
    let side = |record: &LabRecord| match record.detection().map(|cost| cost.detect) {
        Some(DetectMode::On) => Some(0),
        Some(DetectMode::Off) => Some(1),
        None => None,
    };
    let mut comparisons = Vec::new();
    for group in group_pairs(records, key, side) {
        let Some(paired) = paired_ratio(&group.pairs()) else {
            continue;
        };
        // The looks' cost: shares of the on and off runs, and of the on runs without the
        // slow looks.
        let mut shares: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut shares_without_slow: Vec<f64> = Vec::new();
        for &(side, record) in &group.records {
            let Some(cost) = record.detection() else {
                continue;
            };
            shares[side].extend(cost.detect_share);
            if let (0, Some(share)) = (side, cost.detect_share) {
                let kept = if cost.detect_ns > 0 {
                    cost.detect_ns.saturating_sub(cost.detect_slow_ns) as f64
                        / cost.detect_ns as f64
                } else {
                    1.0
                };
                shares_without_slow.push(share * kept);
            }
        }
        for samples in shares.iter_mut() {
            sort_samples(samples);
        }
        sort_samples(&mut shares_without_slow);
        let PairKey {
            test,
            transport,
            variant,
            size,
        } = group.key;
        comparisons.push(DetectComparison {
            interval: paired.interval,
            test,
            transport,
            variant,
            size,
            metric: group.metric,
            rounds: paired.pairs,
            median_on: paired.median_a,
            median_off: paired.median_b,
            paired_median: paired.median,
            paired_ratios: paired.ratios,
            share_on: median(&shares[0]),
            share_off: median(&shares[1]),
            share_on_without_slow: median(&shares_without_slow),
        });
    }
    comparisons
}

/// The JSON summary record of one comparison: `test`, `transport` and `size` of the point,
/// `iters` = rounds, `variant` = [`VARIANT_DETECT_SUMMARY`], the figures in `summary`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DetectSummary {
    test: &'static str,
    transport: Transport,
    size: u64,
    iters: u64,
    variant: &'static str,
    summary: DetectFigures,
}

/// The figures of a [`DetectSummary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
struct DetectFigures {
    variant: Option<String>,
    metric: Metric,
    rounds: usize,
    median_on: f64,
    median_off: f64,
    ratio_of_medians: f64,
    paired_ratios: Vec<f64>,
    paired_ratio_median: f64,
    interval: Option<[f64; 2]>,
    interval_confidence: Option<f64>,
    detect_share_on: Option<f64>,
    detect_share_off: Option<f64>,
    detect_share_on_without_slow: Option<f64>,
}

impl DetectComparison {
    /// The summary as a JSON record.
    pub(crate) fn record(&self) -> DetectSummary {
        DetectSummary {
            test: self.test.as_str(),
            transport: self.transport,
            size: self.size,
            iters: self.rounds as u64,
            variant: VARIANT_DETECT_SUMMARY,
            summary: DetectFigures {
                variant: self.variant.clone(),
                metric: self.metric,
                rounds: self.rounds,
                median_on: self.median_on,
                median_off: self.median_off,
                ratio_of_medians: self.median_on / self.median_off,
                paired_ratios: self.paired_ratios.clone(),
                paired_ratio_median: self.paired_median,
                interval: self.interval.map(|interval| [interval.low, interval.high]),
                interval_confidence: self.interval.map(|interval| interval.confidence),
                detect_share_on: self.share_on,
                detect_share_off: self.share_off,
                detect_share_on_without_slow: self.share_on_without_slow,
            },
        }
    }
}

/// Ends a `--detect both` or `interleave` run: the comparisons as JSON summary records and
/// as a table (in `rounds` rounds, or pairs of blocks when `interleaved`).
///
/// # Errors
/// If writing either output fails.
pub(crate) fn summary(
    report: &mut Report<LabRecord>,
    rounds: u32,
    interleaved: bool,
) -> io::Result<()> {
    let comparisons = detect_comparisons(report.collected());
    for comparison in &comparisons {
        report.json_only(&comparison.record())?;
    }
    let osu = report.style() == Style::Osu;
    let Some(table) = report.table() else {
        return Ok(());
    };
    write_table(table, osu, rounds, interleaved, &comparisons)
}

/// The summary table.
fn write_table(
    table: &mut dyn Write,
    osu: bool,
    rounds: u32,
    interleaved: bool,
    comparisons: &[DetectComparison],
) -> io::Result<()> {
    let prefix = if osu { "# " } else { "" };
    writeln!(table)?;
    if interleaved {
        writeln!(
            table,
            "{prefix}failure detection on against off, {rounds} pairs of blocks per point in one launch of the ranks"
        )?;
        writeln!(
            table,
            "{prefix}  (each pair on-off or off-on in a fixed pseudo-random order; switched with Endpoint::set_detection)"
        )?;
    } else {
        writeln!(
            table,
            "{prefix}failure detection on against off, {rounds} rounds (each: on, then off; all against the floors above)"
        )?;
    }
    writeln!(
        table,
        "{prefix}  on/off = median on / median off; paired = median over the {} of on / off of that {}, with its",
        if interleaved { "pairs" } else { "rounds" },
        if interleaved { "pair" } else { "round" }
    )?;
    writeln!(
        table,
        "{prefix}  distribution-free {:.0}% interval (order statistics; needs 6 rounds or more). Latency: above 1 = detection",
        CONFIDENCE * 100.0
    )?;
    writeln!(
        table,
        "{prefix}  slower; bandwidth and rate: below 1 = slower. looks = median share of the timed run the looks took (on),"
    )?;
    writeln!(
        table,
        "{prefix}  both ranks summed; w/o slow = the same without the looks over 50 µs (preempted?)."
    )?;
    writeln!(
        table,
        "{prefix}  {:<9} {:<5} {:>10} {:<15} {:>11} {:>11} {:>7} {:>7} {:>19} {:>9} {:>9}",
        "test",
        "via",
        "size",
        "figure",
        "median on",
        "median off",
        "on/off",
        "paired",
        "interval",
        "looks",
        "w/o slow"
    )?;
    for comparison in comparisons {
        let interval = comparison.interval.map_or("- (too few)".to_string(), |i| {
            format!("{:.3} .. {:.3}", i.low, i.high)
        });
        let ppm = |share: Option<f64>| {
            share.map_or("-".to_string(), |share| {
                format!("{} ppm", format_significant(share * 1e6, 2))
            })
        };
        let test = match &comparison.variant {
            Some(variant) => format!("{} {variant}", comparison.test.as_str()),
            None => comparison.test.as_str().to_string(),
        };
        writeln!(
            table,
            "{prefix}  {:<9} {:<5} {:>10} {:<15} {:>11} {:>11} {:>7.3} {:>7.3} {:>19} {:>9} {:>9}",
            test,
            comparison.transport,
            format_size(comparison.size),
            comparison.metric.as_str(),
            format_significant(comparison.median_on, 3),
            format_significant(comparison.median_off, 3),
            comparison.median_on / comparison.median_off,
            comparison.paired_median,
            interval,
            ppm(comparison.share_on),
            ppm(comparison.share_on_without_slow)
        )?;
    }
    table.flush()
}

#[cfg(test)]
mod tests {
    use quiver_cli::bench::record::{DetectionCost, Labels, LatencyPoint, Record, StreamPoint};

    use super::*;

    fn detect_point(round: u32, detect: &str, latency_us: f64) -> LabRecord {
        let on = detect == "on";
        LabRecord::Bench(Record::Pingpong(LatencyPoint {
            transport: Transport::Shm,
            size: 8,
            iters: 100,
            latency_us,
            latency_p99_us: latency_us,
            floor_us: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels {
                round: Some(round),
                ..Labels::default()
            },
            detection: Some(DetectionCost {
                detect: if on { DetectMode::On } else { DetectMode::Off },
                detect_looks: 10,
                detect_ns: 1000,
                detect_share: Some(if on { 2e-6 } else { 0.0 }),
                detect_slow_looks: u64::from(on),
                detect_slow_ns: if on { 500 } else { 0 },
            }),
        }))
    }

    #[test]
    fn detect_comparisons_pair_each_round() {
        // Six rounds; on is 1.1, 1.2, ... 1.6 times off (off = 1, 2, ..., 6).
        let mut records = Vec::new();
        for round in 0..6u32 {
            let off = f64::from(round + 1);
            let factor = 1.1 + 0.1 * f64::from(round);
            records.push(detect_point(round, "on", off * factor));
            records.push(detect_point(round, "off", off));
        }
        // A bw point without a partner is kept apart.
        records.push(LabRecord::Bench(Record::Bw(StreamPoint {
            transport: Transport::Shm,
            size: 8,
            iters: 10,
            window: 64,
            bandwidth_mbps: 5.0,
            floor_mbps: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels {
                round: Some(0),
                ..Labels::default()
            },
            detection: Some(DetectionCost {
                detect: DetectMode::On,
                detect_looks: 1,
                detect_ns: 1,
                detect_share: None,
                detect_slow_looks: 0,
                detect_slow_ns: 0,
            }),
            posted: None,
        })));
        let comparisons = detect_comparisons(&records);
        assert_eq!(comparisons.len(), 1, "{comparisons:?}");
        let comparison = &comparisons[0];
        assert_eq!(comparison.rounds, 6);
        assert_eq!(comparison.metric, Metric::LatencyUs);
        assert!((comparison.median_off - 3.5).abs() < 1e-12);
        assert!((comparison.paired_median - 1.35).abs() < 1e-12);
        let interval = comparison.interval.expect("6 rounds give a 95% interval");
        assert!((interval.low - 1.1).abs() < 1e-12 && (interval.high - 1.6).abs() < 1e-12);
        assert_eq!(comparison.share_on, Some(2e-6));
        assert_eq!(comparison.share_off, Some(0.0));
        assert_eq!(comparison.share_on_without_slow, Some(1e-6));
        let value = serde_json::to_value(comparison.record()).expect("json");
        assert_eq!(value["variant"], VARIANT_DETECT_SUMMARY);
        assert_eq!(value["test"], "pingpong");
        assert_eq!(value["summary"]["rounds"], 6);
        assert_eq!(value["summary"]["metric"], "latency_us");
        // Two rounds (the default): medians and ratio, no 95% interval.
        let two = detect_comparisons(&records[..4]);
        assert_eq!(two[0].rounds, 2);
        assert_eq!(two[0].interval, None);
        let mut table = Vec::new();
        write_table(&mut table, false, 6, false, &comparisons).expect("write");
        let text = String::from_utf8(table).expect("utf-8");
        assert!(
            text.contains("failure detection on against off, 6 rounds"),
            "{text}"
        );
        assert!(text.contains("latency_us"), "{text}");
    }
}
