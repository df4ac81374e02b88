//! The summary of `--baseline interleave|tcp`: quiver against its baseline (the
//! raw-socket one, or quiver's tcp), per test, variant and size, from the pairs of blocks
//! of one launch: the medians of both, quiver / baseline as the ratio of the medians and as
//! the median of the paired ratios with its distribution-free 95% interval, and the target
//! quiver is held to at that point, where there is one. As a table and as one JSON summary
//! record per point.

use std::io::{self, Write};

use serde::Serialize;

use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::record::Metric;
use quiver_cli::bench::report::{Report, Style};
use quiver_cli::bench::result::RankResult;
use quiver_cli::bench::sizes::format_size;
use quiver_cli::bench::table::format_significant;

use super::paired::{group_pairs, paired_ratio, PairKey, PairedRatio, CONFIDENCE};
use super::plan::LabTest;
use super::record::LabRecord;

/// `variant` of the summary records (one per test and size).
pub(crate) const VARIANT_BASELINE_SUMMARY: &str = "baseline_quiver_raw";

/// A bound on quiver / baseline at one point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Target {
    /// The bound on quiver / baseline.
    pub(crate) bound: f64,
    /// Whether the ratio must be at most the bound (latency) rather than at least (bandwidth).
    pub(crate) at_most: bool,
}

impl Target {
    /// Whether `ratio` (quiver / baseline) meets the target.
    pub(crate) fn met_by(self, ratio: f64) -> bool {
        if self.at_most {
            ratio <= self.bound
        } else {
            ratio >= self.bound
        }
    }

    /// "<= 1.05" or ">= 0.95".
    pub(crate) fn text(self) -> String {
        format!(
            "{} {:.2}",
            if self.at_most { "<=" } else { ">=" },
            self.bound
        )
    }
}

/// The target quiver's `transport` is held to against `baseline` at this test and size,
/// where one applies. Against the raw sockets: 8-byte one-way latency (udp and tcp) within
/// 5% of raw, and tcp 1 MiB bandwidth at least 95% of raw (a protocol over the same
/// sockets should cost that little at most); against quiver's tcp (`--baseline tcp`): udp
/// 1 MiB bandwidth over loopback at least tcp's (udp's batching must pay for its
/// reliability layer, or udp has no reason to exist on one link).
pub(crate) fn target_for(
    test: LabTest,
    transport: Transport,
    baseline: Transport,
    size: u64,
) -> Option<Target> {
    use Transport::{RawTcp, RawUdp, Tcp, Udp};
    let (bound, at_most) = match (test, transport, baseline, size) {
        (LabTest::Pingpong, Udp, RawUdp, 8) | (LabTest::Pingpong, Tcp, RawTcp, 8) => (1.05, true),
        (LabTest::Bw, Tcp, RawTcp, 0x10_0000) => (0.95, false),
        (LabTest::Bw, Udp, Tcp, 0x10_0000) => (1.0, false),
        _ => return None,
    };
    Some(Target { bound, at_most })
}

/// The ratio's name in a baseline summary: "quiver / raw" against a raw-socket baseline,
/// "udp / tcp" against quiver's tcp.
pub(crate) fn ratio_name(transport: Transport, baseline: Transport) -> String {
    if baseline.is_raw() {
        "quiver / raw".to_string()
    } else {
        format!("{transport} / {baseline}")
    }
}

/// quiver against its baseline at one test, variant and size, over the pairs (ratio =
/// quiver / baseline).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BaselineComparison {
    /// Test compared.
    pub(crate) test: LabTest,
    /// quiver's transport.
    pub(crate) transport: Transport,
    /// The baseline: raw-udp, raw-tcp, or quiver's tcp.
    pub(crate) raw_transport: Transport,
    /// Variant compared, where a suite gave one.
    pub(crate) variant: Option<String>,
    /// Size compared, bytes.
    pub(crate) size: u64,
    /// The figure compared.
    pub(crate) metric: Metric,
    /// A = quiver, B = the baseline.
    pub(crate) paired: PairedRatio,
    /// The target at this point, if one applies.
    pub(crate) target: Option<Target>,
}

/// Pairs the blocks of quiver's `transport` with those of its baseline `raw_transport`
/// (same `round`) per test, variant and size, in first-seen order.
pub(crate) fn baseline_comparisons(
    records: &[LabRecord],
    transport: Transport,
    raw_transport: Transport,
) -> Vec<BaselineComparison> {
    let key = |record: &LabRecord| PairKey {
        test: record.test(),
        transport,
        variant: record.labels().variant.clone(),
        size: record.size(),
    };
    let side = |record: &LabRecord| {
        if record.transport() == transport {
            Some(0)
        } else if record.transport() == raw_transport {
            Some(1)
        } else {
            None
        }
    };
    group_pairs(records, key, side)
        .into_iter()
        .filter_map(|group| {
            let paired = paired_ratio(&group.pairs())?;
            let PairKey {
                test,
                transport,
                variant,
                size,
            } = group.key;
            Some(BaselineComparison {
                target: target_for(test, transport, raw_transport, size),
                test,
                transport,
                raw_transport,
                variant,
                size,
                metric: group.metric,
                paired,
            })
        })
        .collect()
}

/// The JSON summary record of one comparison: `test`, `transport` (quiver's) and `size`
/// of the point, `iters` = pairs, `variant` = [`VARIANT_BASELINE_SUMMARY`], the figures
/// in `summary`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BaselineSummary {
    test: &'static str,
    transport: Transport,
    size: u64,
    iters: u64,
    variant: &'static str,
    summary: BaselineFigures,
}

/// The figures of a [`BaselineSummary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
struct BaselineFigures {
    variant: Option<String>,
    metric: Metric,
    raw_transport: Transport,
    ratio: String,
    better: &'static str,
    pairs: usize,
    median_quiver: f64,
    median_raw: f64,
    ratio_of_medians: f64,
    paired_ratios: Vec<f64>,
    paired_ratio_median: f64,
    interval: Option<[f64; 2]>,
    interval_confidence: Option<f64>,
    target: Option<String>,
    target_met: Option<bool>,
    target_shown: Option<bool>,
}

impl BaselineComparison {
    /// Whether a lower quiver / baseline is better (latency) rather than a higher one.
    pub(crate) fn lower_is_better(&self) -> bool {
        self.metric.lower_is_better()
    }

    /// Whether the paired median meets the target (`None`: no target here).
    pub(crate) fn target_met(&self) -> Option<bool> {
        self.target.map(|target| target.met_by(self.paired.median))
    }

    /// Whether the whole 95% interval meets the target (`None`: no target or no interval).
    pub(crate) fn target_shown(&self) -> Option<bool> {
        let interval = self.paired.interval?;
        self.target
            .map(|target| target.met_by(interval.low) && target.met_by(interval.high))
    }

    /// The summary as a JSON record.
    pub(crate) fn record(&self) -> BaselineSummary {
        let paired = &self.paired;
        BaselineSummary {
            test: self.test.as_str(),
            transport: self.transport,
            size: self.size,
            iters: paired.pairs as u64,
            variant: VARIANT_BASELINE_SUMMARY,
            summary: BaselineFigures {
                variant: self.variant.clone(),
                metric: self.metric,
                raw_transport: self.raw_transport,
                ratio: ratio_name(self.transport, self.raw_transport),
                better: if self.lower_is_better() {
                    "lower"
                } else {
                    "higher"
                },
                pairs: paired.pairs,
                median_quiver: paired.median_a,
                median_raw: paired.median_b,
                ratio_of_medians: paired.median_a / paired.median_b,
                paired_ratios: paired.ratios.clone(),
                paired_ratio_median: paired.median,
                interval: paired
                    .interval
                    .map(|interval| [interval.low, interval.high]),
                interval_confidence: paired.interval.map(|interval| interval.confidence),
                target: self.target.map(Target::text),
                target_met: self.target_met(),
                target_shown: self.target_shown(),
            },
        }
    }
}

/// Ends a paired run against a baseline: the comparisons of quiver's `transport` with
/// `raw_transport` over `pairs` pairs, as JSON summary records and as a table.
///
/// # Errors
/// If writing either output fails.
pub(crate) fn summary(
    report: &mut Report<LabRecord>,
    transport: Transport,
    raw_transport: Transport,
    pairs: u32,
) -> io::Result<()> {
    let comparisons = baseline_comparisons(report.collected(), transport, raw_transport);
    for comparison in &comparisons {
        report.json_only(&comparison.record())?;
    }
    let osu = report.style() == Style::Osu;
    let Some(table) = report.table() else {
        return Ok(());
    };
    write_table(table, osu, (transport, raw_transport), pairs, &comparisons)
}

/// The summary table.
fn write_table(
    table: &mut dyn Write,
    osu: bool,
    (transport, raw_transport): (Transport, Transport),
    pairs: u32,
    comparisons: &[BaselineComparison],
) -> io::Result<()> {
    let prefix = if osu { "# " } else { "" };
    let against = if raw_transport.is_raw() {
        format!("its raw-socket baseline {raw_transport}")
    } else {
        format!("quiver {raw_transport} (raw = quiver {raw_transport} in this table)")
    };
    let lines = [
        format!("quiver {transport} against {against}, {pairs} pairs of blocks per point in one launch of the ranks"),
        "  (each pair quiver-raw or raw-quiver in a fixed pseudo-random order, half each way; the same iterations per block)".to_string(),
        "  ratio = quiver / raw. q/raw = median quiver / median raw; paired = median over the pairs of quiver / raw of that".to_string(),
        format!("  pair, with its distribution-free {:.0}% interval (order statistics; needs 6 pairs or more).", CONFIDENCE * 100.0),
        "  Latency: lower is better (below 1 = quiver faster); bandwidth and rate: higher is better (above 1 = quiver faster).".to_string(),
        "  target: the one quiver is held to here, where one applies; met = the paired median meets it, shown = the whole interval does.".to_string(),
    ];
    writeln!(table)?;
    for line in lines {
        writeln!(table, "{prefix}{line}")?;
    }
    writeln!(
        table,
        "{prefix}  {:<9} {:>10} {:<15} {:>13} {:>11} {:>7} {:>7} {:>15} target",
        "test", "size", "figure", "median quiver", "median raw", "q/raw", "paired", "interval",
    )?;
    for comparison in comparisons {
        let paired = &comparison.paired;
        let interval = paired.interval.map_or("- (too few)".to_string(), |i| {
            format!("{:.3} .. {:.3}", i.low, i.high)
        });
        let yes_no = |value: Option<bool>| match value {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let target = comparison.target.map_or("-".to_string(), |target| {
            format!(
                "{}: met {}, shown {}",
                target.text(),
                yes_no(comparison.target_met()),
                yes_no(comparison.target_shown())
            )
        });
        let test = match &comparison.variant {
            Some(variant) => format!("{} {variant}", comparison.test.as_str()),
            None => comparison.test.as_str().to_string(),
        };
        writeln!(
            table,
            "{prefix}  {:<9} {:>10} {:<15} {:>13} {:>11} {:>7.3} {:>7.3} {:>15} {}",
            test,
            format_size(comparison.size),
            comparison.metric.as_str(),
            format_significant(paired.median_a, 3),
            format_significant(paired.median_b, 3),
            paired.median_a / paired.median_b,
            paired.median,
            interval,
            target
        )?;
    }
    table.flush()
}

#[cfg(test)]
mod tests {
    use quiver_cli::bench::record::{Labels, LatencyPoint, Record, StreamPoint};

    use super::*;

    /// A block of `--baseline interleave`: pingpong latency or bw bandwidth.
    fn baseline_point(
        test: &str,
        transport: Transport,
        size: u64,
        pair: u32,
        figure: f64,
    ) -> LabRecord {
        let labels = Labels {
            round: Some(pair),
            ..Labels::default()
        };
        let record = match test {
            "pingpong" => Record::Pingpong(LatencyPoint {
                transport,
                size,
                iters: 100,
                latency_us: figure,
                latency_p99_us: figure,
                floor_us: None,
                floor_ratio: None,
                cpus: None,
                labels,
                detection: None,
            }),
            _ => Record::Bw(StreamPoint {
                transport,
                size,
                iters: 100,
                window: 64,
                bandwidth_mbps: figure,
                floor_mbps: None,
                floor_ratio: None,
                cpus: None,
                labels,
                detection: None,
                posted: None,
            }),
        };
        LabRecord::Bench(record)
    }

    #[test]
    fn baseline_comparisons_pair_quiver_and_raw_blocks_and_judge_the_targets() {
        use Transport::{RawTcp, RawUdp, Tcp, Udp};
        let mut records = Vec::new();
        for pair in 0..6u32 {
            // The machine slows down pair by pair.
            let drift = 1.0 + 0.5 * f64::from(pair);
            // 8 B latency: quiver 1.02, 1.03, ... 1.07 x raw (paired median 1.045).
            let latency_ratio = 1.02 + 0.01 * f64::from(pair);
            let raw = baseline_point("pingpong", RawTcp, 8, pair, 5.0 * drift);
            let quiver = baseline_point("pingpong", Tcp, 8, pair, 5.0 * drift * latency_ratio);
            // Either order within a pair: pairing is by `round`, not position.
            if pair % 3 == 0 {
                records.extend([raw, quiver]);
            } else {
                records.extend([quiver, raw]);
            }
            // 1 MiB bw: quiver 0.97 x raw in every pair.
            records.push(baseline_point(
                "bw",
                Tcp,
                1 << 20,
                pair,
                2000.0 * 0.97 / drift,
            ));
            records.push(baseline_point("bw", RawTcp, 1 << 20, pair, 2000.0 / drift));
            // 64 KiB bw: no target there.
            records.push(baseline_point("bw", Tcp, 65536, pair, 900.0));
            records.push(baseline_point("bw", RawTcp, 65536, pair, 1000.0));
        }
        // A record of another transport, and a quiver block without its raw partner.
        records.push(baseline_point("pingpong", Udp, 8, 0, 1.0));
        records.push(baseline_point("pingpong", Tcp, 8, 9, 1.0));
        let comparisons = baseline_comparisons(&records, Tcp, RawTcp);
        assert_eq!(comparisons.len(), 3);

        let latency = &comparisons[0];
        assert_eq!(
            (latency.test, latency.size),
            (LabTest::Pingpong, 8),
            "{latency:?}"
        );
        assert_eq!(latency.raw_transport, RawTcp);
        assert_eq!(latency.paired.pairs, 6);
        assert!((latency.paired.median - 1.045).abs() < 1e-9, "{latency:?}");
        assert!(latency.lower_is_better());
        // The median meets <= 1.05; the interval [1.02, 1.07] does not all of it.
        assert_eq!(latency.target_met(), Some(true));
        assert_eq!(latency.target_shown(), Some(false));
        let value = serde_json::to_value(latency.record()).expect("json");
        assert_eq!(value["variant"], VARIANT_BASELINE_SUMMARY);
        assert_eq!(value["transport"], "tcp");
        assert_eq!(value["summary"]["better"], "lower");
        assert_eq!(value["summary"]["pairs"], 6);
        assert_eq!(value["summary"]["target"], "<= 1.05");
        assert_eq!(value["summary"]["target_met"], true);
        assert_eq!(value["summary"]["target_shown"], false);
        let interval = &value["summary"]["interval"];
        assert!((interval[0].as_f64().expect("low") - 1.02).abs() < 1e-9);
        assert!((interval[1].as_f64().expect("high") - 1.07).abs() < 1e-9);
        // The ratio of medians mixes the drift in; the paired ratio does not.
        assert!(value["summary"]["median_quiver"].as_f64().is_some());
        assert!(value["summary"]["ratio_of_medians"].as_f64().is_some());

        let bandwidth = &comparisons[1];
        assert_eq!((bandwidth.test, bandwidth.size), (LabTest::Bw, 1 << 20));
        assert!(!bandwidth.lower_is_better());
        assert!((bandwidth.paired.median - 0.97).abs() < 1e-9);
        assert_eq!(bandwidth.target_met(), Some(true));
        assert_eq!(bandwidth.target_shown(), Some(true));
        let no_target = &comparisons[2];
        assert_eq!(no_target.size, 65536);
        assert_eq!(no_target.target, None);
        assert_eq!(no_target.target_met(), None);
        assert!((no_target.paired.median - 0.9).abs() < 1e-9);

        // udp has the latency target, not the bandwidth one.
        assert!(target_for(LabTest::Pingpong, Udp, RawUdp, 8).is_some());
        assert_eq!(target_for(LabTest::Bw, Udp, RawUdp, 1 << 20), None);
        assert_eq!(target_for(LabTest::Pingpong, Tcp, RawTcp, 64), None);
        let udp_tcp = target_for(LabTest::Bw, Udp, Tcp, 1 << 20).expect("udp against tcp");
        assert!(udp_tcp.met_by(1.0) && !udp_tcp.met_by(0.99));
        assert_eq!(target_for(LabTest::Pingpong, Udp, Tcp, 8), None);
        assert_eq!(ratio_name(Udp, RawUdp), "quiver / raw");
        assert_eq!(ratio_name(Udp, Tcp), "udp / tcp");

        // The summary table says which way is better and the verdicts.
        let mut table = Vec::new();
        write_table(&mut table, false, (Tcp, RawTcp), 6, &comparisons).expect("write");
        let text = String::from_utf8(table).expect("utf-8");
        assert!(text.contains("lower is better"), "{text}");
        assert!(text.contains("<= 1.05: met yes, shown no"), "{text}");
        assert!(text.contains(">= 0.95: met yes, shown yes"), "{text}");
    }
}
