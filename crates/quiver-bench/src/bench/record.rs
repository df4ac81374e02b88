//! The lab's results, typed per test: the bench's records ([`Record`]) and the lab's own,
//! loggp ([`LoggpRecord`]) and pool (a [`LatencyPoint`] with its receive buffers as the
//! variant). One JSON line each, with the bench's field names.
//!
//! Data and how it looks in the table: no I/O.

use serde::{Deserialize, Serialize};

use quiver_cli::bench::floor::Floors;
use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::record::{
    latency_floor_us, DetectionCost, Labels, LatencyPoint, Metric, Record,
};
use quiver_cli::bench::result::{Panel, PlotPoint, RankResult};
use quiver_cli::bench::sizes::format_size;
use quiver_cli::bench::table::{
    format_microseconds, format_ratio, line_label, or_dash, osu_figure_row,
};

use super::plan::LabTest;

/// `variant` of the loggp record that carries the fitted model.
pub(crate) const VARIANT_FIT: &str = "fit";

/// One loggp point (one size), or the fit record (`variant` = "fit": G fitted over the
/// sizes, with o_s, o_r, L and g of the smallest size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoggpRecord {
    /// Transport measured.
    pub(crate) transport: Transport,
    /// Message size in bytes (the fit record: the smallest size).
    pub(crate) size: u64,
    /// Timed round trips of the L loop.
    pub(crate) iters: u64,
    /// Outstanding sends per window of the g loop.
    pub(crate) window: u64,
    /// Round trip / 2, µs.
    pub(crate) latency_us: f64,
    /// Median round trip of this size, µs (L is derived from it).
    pub(crate) round_trip_us: f64,
    /// Send overhead: median time inside the blocking send call, µs.
    pub(crate) o_s_us: f64,
    /// Receive overhead: median time inside a receive of an already-arrived message, µs.
    pub(crate) o_r_us: f64,
    /// Latency L = round trip / 2 - o_s - o_r, µs.
    #[serde(rename = "L_us")]
    pub(crate) l_us: f64,
    /// Gap per message in a saturated stream (time / messages), µs.
    pub(crate) g_us: f64,
    /// Median cost of one clock read pair, subtracted from o_s and o_r, µs.
    pub(crate) clock_overhead_us: f64,
    /// Gap per byte, ns per byte: on a size point the slope of g from the previous size,
    /// on the fit record the least-squares slope of g over the fitted sizes (absent on the
    /// first size and on the fit of one size).
    #[serde(
        rename = "G_ns_per_byte",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) big_g_ns_per_byte: Option<f64>,
    /// The fit record: the sizes fitted (smallest, largest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_sizes: Option<[u64; 2]>,
    /// The fit record: coefficient of determination of the G fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_r2: Option<f64>,
    /// The two CPUs of rank 0 and rank 1 (filled in by the parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpus: Option<[usize; 2]>,
    /// "fit" on the fit record; the round of a repeated run.
    #[serde(flatten)]
    pub(crate) labels: Labels,
}

impl LoggpRecord {
    /// Whether this is the fit record.
    pub(crate) fn is_fit(&self) -> bool {
        self.labels.variant.as_deref() == Some(VARIANT_FIT)
    }
}

/// One of the lab's own points, by test (the JSON `test` key names the variant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "lowercase")]
pub(crate) enum LabPoint {
    /// loggp.
    Loggp(LoggpRecord),
    /// pool: a pingpong whose rank 0 receives into pooled ("pooled") or fresh ("fresh")
    /// buffers, as its variant says.
    Pool(LatencyPoint),
}

/// A result of `quiver-bench bench`: the bench's or the lab's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum LabRecord {
    /// A point of the bench's tests.
    Bench(Record),
    /// A point of the lab's tests.
    Lab(LabPoint),
}

impl LabRecord {
    /// The test that measured the point.
    pub(crate) fn test(&self) -> LabTest {
        match self {
            LabRecord::Bench(record) => LabTest::of(record.test()),
            LabRecord::Lab(LabPoint::Loggp(_)) => LabTest::Loggp,
            LabRecord::Lab(LabPoint::Pool(_)) => LabTest::Pool,
        }
    }

    /// The figure a paired comparison compares, where the test has one (loggp has none).
    pub(crate) fn figure(&self) -> Option<(Metric, f64)> {
        match self {
            LabRecord::Bench(record) => Some(record.figure()),
            LabRecord::Lab(LabPoint::Pool(point)) => Some((Metric::LatencyUs, point.latency_us)),
            LabRecord::Lab(LabPoint::Loggp(_)) => None,
        }
    }
}

impl From<Record> for LabRecord {
    fn from(record: Record) -> LabRecord {
        LabRecord::Bench(record)
    }
}

impl RankResult for LabRecord {
    fn test_name(&self) -> &'static str {
        self.test().as_str()
    }

    fn transport(&self) -> Transport {
        match self {
            LabRecord::Bench(record) => record.transport(),
            LabRecord::Lab(LabPoint::Loggp(point)) => point.transport,
            LabRecord::Lab(LabPoint::Pool(point)) => point.transport,
        }
    }

    fn size(&self) -> u64 {
        match self {
            LabRecord::Bench(record) => record.size(),
            LabRecord::Lab(LabPoint::Loggp(point)) => point.size,
            LabRecord::Lab(LabPoint::Pool(point)) => point.size,
        }
    }

    fn labels(&self) -> &Labels {
        match self {
            LabRecord::Bench(record) => record.labels(),
            LabRecord::Lab(LabPoint::Loggp(point)) => &point.labels,
            LabRecord::Lab(LabPoint::Pool(point)) => &point.labels,
        }
    }

    fn labels_mut(&mut self) -> &mut Labels {
        match self {
            LabRecord::Bench(record) => record.labels_mut(),
            LabRecord::Lab(LabPoint::Loggp(point)) => &mut point.labels,
            LabRecord::Lab(LabPoint::Pool(point)) => &mut point.labels,
        }
    }

    fn complete(&mut self, cpus: [usize; 2], floors: &Floors) {
        match self {
            LabRecord::Bench(record) => record.complete(cpus, floors),
            LabRecord::Lab(LabPoint::Loggp(point)) => point.cpus = Some(cpus),
            LabRecord::Lab(LabPoint::Pool(point)) => {
                // The floor of a pingpong: the larger of the hand-off and the copy.
                point.cpus = Some(cpus);
                let floor_us = latency_floor_us(floors, point.size);
                point.floor_us = Some(floor_us);
                point.floor_ratio = Some(point.latency_us / floor_us);
            }
        }
    }

    fn detection(&self) -> Option<&DetectionCost> {
        match self {
            LabRecord::Bench(record) => record.detection(),
            LabRecord::Lab(LabPoint::Loggp(_)) => None,
            LabRecord::Lab(LabPoint::Pool(point)) => point.detection.as_ref(),
        }
    }

    fn detection_covers_warmup(&self) -> bool {
        match self {
            LabRecord::Bench(record) => record.detection_covers_warmup(),
            LabRecord::Lab(_) => false,
        }
    }

    fn variant_in_column(&self) -> bool {
        matches!(self, LabRecord::Lab(_))
    }

    fn table_header(&self) -> Vec<String> {
        match self {
            LabRecord::Bench(record) => record.table_header(),
            LabRecord::Lab(LabPoint::Loggp(_)) => vec![
                "loggp: LogGP cost model per size, µs (o_s = inside send, o_r = inside a receive of an arrived message,".to_string(),
                "  L = round trip/2 - o_s - o_r, g = time per message in a saturated stream, G = slope of g, ns/byte)".to_string(),
                format!(
                    "  {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
                    "size", "RTT/2 µs", "o_s µs", "o_r µs", "L µs", "g µs", "G ns/B", ""
                ),
            ],
            LabRecord::Lab(LabPoint::Pool(_)) => vec![
                "pool: pingpong, rank 0 receiving with recv_pooled (pre-registered buffers) or into a fresh buffer per message".to_string(),
                format!(
                    "  {:>10} {:>9} {:>8} {:>11} {:>11} {:>11} {:>9}",
                    "size", "iters", "buffers", "median µs", "p99 µs", "floor µs", "x floor"
                ),
            ],
        }
    }

    fn osu_header(&self) -> (&'static str, &'static str) {
        match self {
            LabRecord::Bench(record) => record.osu_header(),
            LabRecord::Lab(LabPoint::Loggp(_)) => (
                "LogGP Parameters",
                "# Size      o_s (us)      o_r (us)        L (us)        g (us)     G (ns/B)",
            ),
            LabRecord::Lab(LabPoint::Pool(_)) => (
                "Latency Test (receive buffers)",
                "# Size          Latency (us)",
            ),
        }
    }

    fn table_row(&self) -> String {
        match self {
            LabRecord::Bench(record) => record.table_row(),
            LabRecord::Lab(LabPoint::Loggp(point)) => {
                let model = match (point.is_fit(), point.fit_sizes) {
                    (true, Some([low, high])) => format!(
                        "<- model: G fitted over {}..{}, r² {}",
                        format_size(low),
                        format_size(high),
                        or_dash(point.fit_r2, format_ratio)
                    ),
                    (true, None) => "<- model (one size: no G)".to_string(),
                    (false, _) => String::new(),
                };
                format!(
                    "  {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
                    format_size(point.size),
                    format_microseconds(point.latency_us),
                    format_microseconds(point.o_s_us),
                    format_microseconds(point.o_r_us),
                    format_microseconds(point.l_us),
                    format_microseconds(point.g_us),
                    or_dash(point.big_g_ns_per_byte, format_ratio),
                    model
                )
            }
            LabRecord::Lab(LabPoint::Pool(point)) => format!(
                "  {:>10} {:>9} {:>8} {:>11} {:>11} {:>11} {:>9}",
                format_size(point.size),
                point.iters,
                point.labels.variant.as_deref().unwrap_or("-"),
                format_microseconds(point.latency_us),
                format_microseconds(point.latency_p99_us),
                or_dash(point.floor_us, format_microseconds),
                or_dash(point.floor_ratio, format_ratio)
            ),
        }
    }

    fn osu_row(&self) -> String {
        match self {
            LabRecord::Bench(record) => record.osu_row(),
            LabRecord::Lab(LabPoint::Loggp(point)) => {
                let size = if point.is_fit() {
                    format!("# model at {}", point.size)
                } else {
                    point.size.to_string()
                };
                let figure = |value: f64| format!("{value:.2}");
                let g_per_byte = point
                    .big_g_ns_per_byte
                    .map_or("-".to_string(), |value| format!("{value:.4}"));
                format!(
                    "{size:<10}{:>14}{:>14}{:>14}{:>14}{:>13}",
                    figure(point.o_s_us),
                    figure(point.o_r_us),
                    figure(point.l_us),
                    figure(point.g_us),
                    g_per_byte
                )
            }
            LabRecord::Lab(LabPoint::Pool(point)) => osu_figure_row(point.size, point.latency_us),
        }
    }

    fn plot_point(&self) -> Option<PlotPoint> {
        match self {
            LabRecord::Bench(record) => record.plot_point(),
            LabRecord::Lab(LabPoint::Loggp(_)) => None,
            LabRecord::Lab(LabPoint::Pool(point)) => Some(PlotPoint {
                panel: Panel::Latency,
                label: line_label(point.transport, &point.labels),
                size: point.size as f64,
                value: point.latency_us,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_and_the_lab_records_read_back_by_their_test() {
        let bench =
            r#"{"test":"bw","transport":"tcp","size":8,"iters":3,"window":4,"bandwidth_MBps":5.0}"#;
        let record: LabRecord = serde_json::from_str(bench).expect("bw");
        assert_eq!(record.test(), LabTest::Bw);
        assert_eq!(record.figure(), Some((Metric::BandwidthMbps, 5.0)));
        let pool = r#"{"test":"pool","transport":"shm","size":8,"iters":3,"latency_us":1.5,"latency_p99_us":2.0,"variant":"fresh"}"#;
        let record: LabRecord = serde_json::from_str(pool).expect("pool");
        assert_eq!(record.test(), LabTest::Pool);
        assert_eq!(record.labels().variant.as_deref(), Some("fresh"));
        assert!(record.variant_in_column());
        let loggp = LoggpRecord {
            transport: Transport::Udp,
            size: 8,
            iters: 100,
            window: 16,
            latency_us: 5.0,
            round_trip_us: 10.0,
            o_s_us: 1.0,
            o_r_us: 0.5,
            l_us: 3.5,
            g_us: 1.2,
            clock_overhead_us: 0.02,
            big_g_ns_per_byte: None,
            fit_sizes: None,
            fit_r2: None,
            cpus: None,
            labels: Labels::default(),
        };
        let line = serde_json::to_string(&LabRecord::Lab(LabPoint::Loggp(loggp.clone())))
            .expect("serialize");
        let value: serde_json::Value = serde_json::from_str(&line).expect("parse");
        assert_eq!(value["test"], "loggp");
        assert_eq!(value["L_us"], 3.5);
        assert!(value.get("G_ns_per_byte").is_none());
        let back: LabRecord = serde_json::from_str(&line).expect("loggp");
        assert_eq!(back, LabRecord::Lab(LabPoint::Loggp(loggp)));
        assert_eq!(back.figure(), None);
    }
}
