//! The bench's results, typed per test: one measured point per JSON line (JSON Lines).
//!
//! Rank 0 writes a [`Record`] per point; the parent completes it with the CPUs and the
//! ratio to its floor ([`Record::complete`]) and hands it to the report. The floors the
//! parent measures itself are [`FloorRecord`]s. The serialised field names are the JSON
//! keys tools read (`test`, `transport`, `size`, `latency_us`, `bandwidth_MBps`,
//! `rate_Mmsgs`, ...); a field that does not apply to a test does not exist in its type.
//!
//! Units: latencies in microseconds, bandwidth in MB/s (10^6 bytes per second), rates in
//! millions of messages per second, sizes in bytes. Data only: no I/O.

use serde::{Deserialize, Serialize};

use super::floor::{Floors, HandoffFloor, LatencyFloor, MemcpyFloor};
use super::plan::{TestName, Transport};

/// Whether failure detection was on in the ranks during a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DetectMode {
    /// On (`QUIVER_DETECT_MS` above 0, 1000 ms by default).
    On,
    /// Off.
    Off,
}

/// What failure detection's liveness looks cost both ranks during a point, from
/// `Endpoint::detection_stats` (quiver's transports only: the raw baselines have none).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DetectionCost {
    /// Failure detection during the point (as rank 0's endpoint had it).
    pub detect: DetectMode,
    /// Liveness looks both ranks' endpoints made during the timed run (bibw: during the
    /// whole point, warm-up included).
    pub detect_looks: u64,
    /// Time those looks took, in nanoseconds, summed over both ranks.
    pub detect_ns: u64,
    /// `detect_ns` / the timed run's duration: what the looks took, as a share of the run
    /// (an upper bound of detection's share: both ranks' looks are summed, as if every one
    /// were on the critical path). Absent for a run of no measurable duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect_share: Option<f64>,
    /// Of `detect_looks`, those longer than 50 µs (`DetectionStats::SLOW_LOOK_NS`): the
    /// thread was most likely preempted during them (a busy machine, not the look).
    pub detect_slow_looks: u64,
    /// Time the slow looks took, in nanoseconds (included in `detect_ns`).
    pub detect_slow_ns: u64,
}

/// What a suite or a paired run says about a point beyond the measurement itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Labels {
    /// Which variant of a job the point measured: a suite's path or side ("copy",
    /// "zero_copy", "default", "tuned"), or the test's own ("pooled", "fresh", "fit").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The `QUIVER_*` settings the ranks ran with, as NAME=VALUE (suites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Vec<String>>,
    /// The round (runs repeated by the lab) or the pair of blocks (paired runs) the point
    /// belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
}

/// A pingpong point: one-way latency = round trip / 2 over `iters` round trips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyPoint {
    /// Transport measured.
    pub transport: Transport,
    /// Message size in bytes.
    pub size: u64,
    /// Timed round trips.
    pub iters: u64,
    /// Median one-way latency, µs.
    pub latency_us: f64,
    /// 99th-percentile (nearest rank) one-way latency, µs.
    pub latency_p99_us: f64,
    /// The latency floor, µs: the larger of the one-way hand-off and the time one core
    /// takes to memcpy `size` bytes (filled in by the parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_us: Option<f64>,
    /// latency / floor (>= 1 expected, lower is better).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ratio: Option<f64>,
    /// The two CPUs of rank 0 and rank 1 (filled in by the parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<[usize; 2]>,
    /// Variant, settings and round, where a suite or a paired run gives them.
    #[serde(flatten)]
    pub labels: Labels,
    /// Failure detection's cost during the timed run (quiver's transports).
    #[serde(flatten)]
    pub detection: Option<DetectionCost>,
}

/// A bw or bibw point: bytes streamed in windows of posted sends, per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamPoint {
    /// Transport measured.
    pub transport: Transport,
    /// Message size in bytes.
    pub size: u64,
    /// Timed windows.
    pub iters: u64,
    /// Outstanding sends per window.
    pub window: u64,
    /// Bandwidth, MB/s (10^6 bytes/s); bibw: bytes of both directions.
    #[serde(rename = "bandwidth_MBps")]
    pub bandwidth_mbps: f64,
    /// The bandwidth floor, MB/s: memcpy at this size (bibw: twice that, both cores
    /// copying). Filled in by the parent where this run measured memcpy at the size.
    #[serde(
        rename = "floor_MBps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub floor_mbps: Option<f64>,
    /// bandwidth / floor (higher is better).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ratio: Option<f64>,
    /// The two CPUs of rank 0 and rank 1 (filled in by the parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<[usize; 2]>,
    /// Variant, settings and round, where a suite or a paired run gives them.
    #[serde(flatten)]
    pub labels: Labels,
    /// Failure detection's cost during the timed run (quiver's transports).
    #[serde(flatten)]
    pub detection: Option<DetectionCost>,
    /// bw above the eager size where the transport sends posted sends in place (udp): how
    /// many distinct buffers the sender kept posted. Absent where it sends one buffer with
    /// blocking sends or posts the whole window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub posted: Option<u64>,
}

/// A rate point: 8-byte messages per second, in windows of posted sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatePoint {
    /// Transport measured.
    pub transport: Transport,
    /// Message size in bytes (8).
    pub size: u64,
    /// Timed windows.
    pub iters: u64,
    /// Outstanding sends per window.
    pub window: u64,
    /// Message rate, millions of messages per second.
    #[serde(rename = "rate_Mmsgs")]
    pub rate_mmsgs: f64,
    /// The rate floor, Mmsg/s: 1 / one-way hand-off (filled in by the parent).
    #[serde(
        rename = "floor_Mmsgs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub floor_mmsgs: Option<f64>,
    /// rate / floor (higher is better).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ratio: Option<f64>,
    /// The two CPUs of rank 0 and rank 1 (filled in by the parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<[usize; 2]>,
    /// Variant, settings and round, where a suite or a paired run gives them.
    #[serde(flatten)]
    pub labels: Labels,
    /// Failure detection's cost during the timed run (quiver's transports).
    #[serde(flatten)]
    pub detection: Option<DetectionCost>,
}

/// One point the ranks measured, by test (the JSON `test` key names the variant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "lowercase")]
pub enum Record {
    /// pingpong.
    Pingpong(LatencyPoint),
    /// bw.
    Bw(StreamPoint),
    /// bibw: both ranks stream to each other at once.
    Bibw(StreamPoint),
    /// rate.
    Rate(RatePoint),
}

/// The figure a point is compared by: its name (the JSON key) and which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Metric {
    /// Median one-way latency, µs (lower is better).
    #[serde(rename = "latency_us")]
    LatencyUs,
    /// Bandwidth, MB/s (higher is better).
    #[serde(rename = "bandwidth_MBps")]
    BandwidthMbps,
    /// Message rate, Mmsg/s (higher is better).
    #[serde(rename = "rate_Mmsgs")]
    RateMmsgs,
}

impl Metric {
    /// The JSON key of the figure.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::LatencyUs => "latency_us",
            Metric::BandwidthMbps => "bandwidth_MBps",
            Metric::RateMmsgs => "rate_Mmsgs",
        }
    }

    /// Whether a lower figure is better (latency) rather than a higher one.
    pub fn lower_is_better(self) -> bool {
        self == Metric::LatencyUs
    }
}

impl Record {
    /// The test that measured the point.
    pub fn test(&self) -> TestName {
        match self {
            Record::Pingpong(_) => TestName::Pingpong,
            Record::Bw(_) => TestName::Bw,
            Record::Bibw(_) => TestName::Bibw,
            Record::Rate(_) => TestName::Rate,
        }
    }

    /// The transport measured.
    pub fn transport(&self) -> Transport {
        match self {
            Record::Pingpong(point) => point.transport,
            Record::Bw(point) | Record::Bibw(point) => point.transport,
            Record::Rate(point) => point.transport,
        }
    }

    /// Message size in bytes.
    pub fn size(&self) -> u64 {
        match self {
            Record::Pingpong(point) => point.size,
            Record::Bw(point) | Record::Bibw(point) => point.size,
            Record::Rate(point) => point.size,
        }
    }

    /// The point's labels.
    pub fn labels(&self) -> &Labels {
        match self {
            Record::Pingpong(point) => &point.labels,
            Record::Bw(point) | Record::Bibw(point) => &point.labels,
            Record::Rate(point) => &point.labels,
        }
    }

    /// The point's labels, to change.
    pub fn labels_mut(&mut self) -> &mut Labels {
        match self {
            Record::Pingpong(point) => &mut point.labels,
            Record::Bw(point) | Record::Bibw(point) => &mut point.labels,
            Record::Rate(point) => &mut point.labels,
        }
    }

    /// Failure detection's cost during the point, where it was measured.
    pub fn detection(&self) -> Option<&DetectionCost> {
        match self {
            Record::Pingpong(point) => point.detection.as_ref(),
            Record::Bw(point) | Record::Bibw(point) => point.detection.as_ref(),
            Record::Rate(point) => point.detection.as_ref(),
        }
    }

    /// The figure the point is compared by, and its value.
    pub fn figure(&self) -> (Metric, f64) {
        match self {
            Record::Pingpong(point) => (Metric::LatencyUs, point.latency_us),
            Record::Bw(point) | Record::Bibw(point) => {
                (Metric::BandwidthMbps, point.bandwidth_mbps)
            }
            Record::Rate(point) => (Metric::RateMmsgs, point.rate_mmsgs),
        }
    }

    /// Replaces the figure the point is compared by (a median over rounds).
    pub fn set_figure(&mut self, value: f64) {
        match self {
            Record::Pingpong(point) => point.latency_us = value,
            Record::Bw(point) | Record::Bibw(point) => point.bandwidth_mbps = value,
            Record::Rate(point) => point.rate_mmsgs = value,
        }
    }

    /// Fills in what the parent knows: the ranks' CPUs and the ratio to this run's floor.
    /// A point without a matching floor (a size without a memcpy floor) keeps no ratio.
    pub fn complete(&mut self, cpus: [usize; 2], floors: &Floors) {
        match self {
            Record::Pingpong(point) => {
                point.cpus = Some(cpus);
                let floor_us = latency_floor_us(floors, point.size);
                point.floor_us = Some(floor_us);
                point.floor_ratio = Some(point.latency_us / floor_us);
            }
            Record::Bw(point) => {
                point.cpus = Some(cpus);
                let floor = memcpy_mbps(floors, point.size);
                point.floor_mbps = floor;
                point.floor_ratio = floor.map(|floor| point.bandwidth_mbps / floor);
            }
            Record::Bibw(point) => {
                point.cpus = Some(cpus);
                // Both directions at once: at best each core copies at memcpy speed.
                let floor = memcpy_mbps(floors, point.size).map(|mbps| 2.0 * mbps);
                point.floor_mbps = floor;
                point.floor_ratio = floor.map(|floor| point.bandwidth_mbps / floor);
            }
            Record::Rate(point) => {
                point.cpus = Some(cpus);
                // One message per one-way hand-off; 1 / µs = 10^6 / s.
                let floor_mmsgs = 1.0 / floors.handoff.one_way_median_us;
                point.floor_mmsgs = Some(floor_mmsgs);
                point.floor_ratio = Some(point.rate_mmsgs / floor_mmsgs);
            }
        }
    }
}

/// memcpy bandwidth at exactly `size` bytes in this run's floors (MB/s), if measured.
pub fn memcpy_mbps(floors: &Floors, size: u64) -> Option<f64> {
    floors
        .memcpy_at(size)
        .map(|floor| floor.median_mbps)
        .filter(|&mbps| mbps > 0.0)
}

/// The latency floor of a message of `size` bytes, µs. A message needs at least one
/// cache-line hand-off and at least one copy of its bytes; a pipelined transport can
/// overlap the two, so the floor is the larger (not the sum): exactly the hand-off for
/// small messages, the copy for large ones. bytes / (10^6 bytes/s) = µs.
pub fn latency_floor_us(floors: &Floors, size: u64) -> f64 {
    let copy_us = memcpy_mbps(floors, size).map_or(0.0, |mbps| size as f64 / mbps);
    floors.handoff.one_way_median_us.max(copy_us)
}

/// Size of the hand-off and latency floor records: one cache line, in bytes.
pub const CACHE_LINE_BYTES: u64 = 64;

/// Which floor a [`FloorRecord`] is, with what only that floor has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "floor", rename_all = "snake_case")]
pub enum FloorKind {
    /// The core-to-core cache-line hand-off, one way.
    CachelineHandoff {
        /// Before the ranks (the one ratios use) or again after them.
        phase: Phase,
    },
    /// memcpy bandwidth at one size, one core.
    Memcpy,
    /// A trivial system call.
    Syscall,
    /// A cross-core wake-up, one way.
    Wakeup {
        /// How the sleeper sleeps.
        mechanism: WakeupMechanism,
    },
    /// Cross-memory attach (`process_vm_readv`) bandwidth at one size.
    Cma,
}

/// When the hand-off was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the ranks ran: the figure ratios use.
    BeforeRanks,
    /// Again after the ranks have finished (the host may have moved the vCPUs meanwhile).
    AfterRanks,
}

/// How the wake-up floor's sleeper sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeupMechanism {
    /// An eventfd slept on in `poll` (quiver's doorbell).
    EventfdPoll,
    /// A futex.
    Futex,
}

/// What a floor measured: a latency or a bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FloorFigures {
    /// Median and p99, µs.
    Latency {
        /// Median, µs.
        latency_us: f64,
        /// 99th percentile (nearest rank), µs.
        latency_p99_us: f64,
    },
    /// Median and best batch, MB/s.
    Bandwidth {
        /// Median batch, MB/s.
        #[serde(rename = "bandwidth_MBps")]
        bandwidth_mbps: f64,
        /// Best batch, MB/s.
        #[serde(rename = "bandwidth_best_MBps")]
        bandwidth_best_mbps: f64,
    },
}

/// One floor the parent measured: one JSON line with `test` = "floor" and `transport` =
/// "none" (no transport is involved).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "test", rename = "floor")]
pub struct FloorRecord {
    /// Which floor.
    #[serde(flatten)]
    pub kind: FloorKind,
    /// Always "none".
    pub transport: NoTransport,
    /// Bytes per operation (a cache line for the latency floors).
    pub size: u64,
    /// Operations timed: round trips, calls or copies.
    pub iters: u64,
    /// The figures.
    #[serde(flatten)]
    pub figures: FloorFigures,
    /// The CPUs involved (the same one twice for a single-core floor).
    pub cpus: [usize; 2],
}

/// The `transport` of floor records: "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoTransport;

impl Serialize for NoTransport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("none")
    }
}

impl FloorRecord {
    /// The record of one hand-off measurement.
    pub fn handoff(handoff: &HandoffFloor, phase: Phase) -> FloorRecord {
        FloorRecord {
            kind: FloorKind::CachelineHandoff { phase },
            transport: NoTransport,
            size: CACHE_LINE_BYTES,
            iters: handoff.round_trips,
            figures: FloorFigures::Latency {
                latency_us: handoff.one_way_median_us,
                latency_p99_us: handoff.one_way_p99_us,
            },
            cpus: [handoff.cpu_a, handoff.cpu_b],
        }
    }

    /// The floor records of a run, in the order the table shows them.
    pub fn all(floors: &Floors) -> Vec<FloorRecord> {
        let cpu_a = floors.handoff.cpu_a;
        let bandwidth = |kind: FloorKind, copy: &MemcpyFloor| FloorRecord {
            kind,
            transport: NoTransport,
            size: copy.size_bytes,
            iters: copy.copies,
            figures: FloorFigures::Bandwidth {
                bandwidth_mbps: copy.median_mbps,
                bandwidth_best_mbps: copy.best_mbps,
            },
            cpus: [cpu_a, cpu_a],
        };
        let latency = |kind: FloorKind, value: &LatencyFloor, cpus| FloorRecord {
            kind,
            transport: NoTransport,
            size: CACHE_LINE_BYTES,
            iters: value.count,
            figures: FloorFigures::Latency {
                latency_us: value.median_us,
                latency_p99_us: value.p99_us,
            },
            cpus,
        };
        let mut records = vec![FloorRecord::handoff(&floors.handoff, Phase::BeforeRanks)];
        records.extend(
            floors
                .memcpy
                .iter()
                .map(|copy| bandwidth(FloorKind::Memcpy, copy)),
        );
        if let Some(extended) = &floors.extended {
            let pair = [floors.handoff.cpu_a, floors.handoff.cpu_b];
            records.push(latency(
                FloorKind::Syscall,
                &extended.syscall,
                [cpu_a, cpu_a],
            ));
            for (mechanism, wakeup) in [
                (WakeupMechanism::EventfdPoll, &extended.wakeup_eventfd),
                (WakeupMechanism::Futex, &extended.wakeup_futex),
            ] {
                records.push(latency(FloorKind::Wakeup { mechanism }, wakeup, pair));
            }
            records.extend(
                extended
                    .cma
                    .iter()
                    .map(|copy| bandwidth(FloorKind::Cma, copy)),
            );
        }
        records
    }
}

#[cfg(test)]
mod tests {
    use super::super::floor::MemcpyFloor;
    use super::*;

    pub(crate) fn floors() -> Floors {
        Floors {
            handoff: HandoffFloor {
                cpu_a: 0,
                cpu_b: 1,
                one_way_median_us: 0.1,
                one_way_p99_us: 0.2,
                round_trips: 1000,
            },
            memcpy: vec![MemcpyFloor {
                size_bytes: 1_000_000,
                median_mbps: 20_000.0,
                best_mbps: 25_000.0,
                copies: 10,
            }],
            extended: None,
        }
    }

    fn pingpong(size: u64, latency_us: f64) -> Record {
        Record::Pingpong(LatencyPoint {
            transport: Transport::Shm,
            size,
            iters: 10,
            latency_us,
            latency_p99_us: latency_us,
            floor_us: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: None,
        })
    }

    fn stream(size: u64, bandwidth_mbps: f64) -> StreamPoint {
        StreamPoint {
            transport: Transport::Shm,
            size,
            iters: 200,
            window: 64,
            bandwidth_mbps,
            floor_mbps: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: None,
            posted: None,
        }
    }

    #[test]
    fn pingpong_floor_is_the_handoff_for_small_messages() {
        let mut floors = floors();
        floors.memcpy[0].median_mbps = 1e9; // the copy takes 0.001 µs
        let mut record = pingpong(1_000_000, 0.3);
        record.complete([0, 1], &floors);
        let Record::Pingpong(point) = record else {
            unreachable!()
        };
        assert_eq!(point.floor_us, Some(0.1));
        assert!((point.floor_ratio.expect("ratio") - 3.0).abs() < 1e-9);
        assert_eq!(point.cpus, Some([0, 1]));
    }

    #[test]
    fn pingpong_floor_is_the_copy_time_for_large_messages() {
        let mut record = pingpong(1_000_000, 300.0);
        record.complete([0, 1], &floors());
        let Record::Pingpong(point) = record else {
            unreachable!()
        };
        // max(0.1 µs, 10^6 bytes / (2 * 10^10 bytes/s) = 50 µs).
        let floor_us = point.floor_us.expect("floor");
        assert!((floor_us - 50.0).abs() < 1e-9);
        assert!((point.floor_ratio.expect("ratio") - 6.0).abs() < 1e-9);
    }

    #[test]
    fn bw_and_rate_ratios() {
        let mut bw = Record::Bw(stream(1_000_000, 10_000.0));
        bw.complete([0, 1], &floors());
        let Record::Bw(point) = &bw else {
            unreachable!()
        };
        assert_eq!(point.floor_mbps, Some(20_000.0));
        assert_eq!(point.floor_ratio, Some(0.5));

        let mut rate = Record::Rate(RatePoint {
            transport: Transport::Shm,
            size: 8,
            iters: 10,
            window: 64,
            rate_mmsgs: 5.0,
            floor_mmsgs: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: None,
        });
        rate.complete([0, 1], &floors());
        let Record::Rate(point) = rate else {
            unreachable!()
        };
        assert!((point.floor_mmsgs.expect("floor") - 10.0).abs() < 1e-9);
        assert!((point.floor_ratio.expect("ratio") - 0.5).abs() < 1e-9);

        let mut unmatched = Record::Bw(stream(8, 1.0));
        unmatched.complete([0, 1], &floors());
        let Record::Bw(point) = unmatched else {
            unreachable!()
        };
        assert_eq!(point.floor_ratio, None);
    }

    #[test]
    fn json_uses_the_documented_keys_and_round_trips() {
        let record = Record::Bw(StreamPoint {
            floor_mbps: Some(2000.0),
            floor_ratio: Some(0.61725),
            ..stream(65536, 1234.5)
        });
        let line = serde_json::to_string(&record).expect("serialize");
        let value: serde_json::Value = serde_json::from_str(&line).expect("parse");
        assert_eq!(value["test"], "bw");
        assert_eq!(value["transport"], "shm");
        assert_eq!(value["size"], 65536);
        assert_eq!(value["bandwidth_MBps"], 1234.5);
        assert_eq!(value["floor_MBps"], 2000.0);
        assert!(value.get("latency_us").is_none());
        assert!(value.get("detect").is_none());
        assert!(value.get("variant").is_none());
        let back: Record = serde_json::from_str(&line).expect("deserialize");
        assert_eq!(back, record);
    }

    #[test]
    fn detection_and_labels_flatten_into_the_record_and_back() {
        let record = Record::Pingpong(LatencyPoint {
            labels: Labels {
                variant: Some("copy".to_string()),
                settings: Some(vec!["QUIVER_SHM_EAGER_MAX=4095".to_string()]),
                round: Some(3),
            },
            detection: Some(DetectionCost {
                detect: DetectMode::On,
                detect_looks: 12,
                detect_ns: 3400,
                detect_share: Some(5.2e-6),
                detect_slow_looks: 0,
                detect_slow_ns: 0,
            }),
            ..match pingpong(8, 0.2) {
                Record::Pingpong(point) => point,
                _ => unreachable!(),
            }
        });
        let line = serde_json::to_string(&record).expect("serialize");
        let value: serde_json::Value = serde_json::from_str(&line).expect("parse");
        assert_eq!(value["test"], "pingpong");
        assert_eq!(value["variant"], "copy");
        assert_eq!(value["round"], 3);
        assert_eq!(value["detect"], "on");
        assert_eq!(value["detect_looks"], 12);
        assert_eq!(value["detect_share"], 5.2e-6);
        let back: Record = serde_json::from_str(&line).expect("deserialize");
        assert_eq!(back, record);
        // A raw baseline's point has no detection.
        let raw: Record =
            serde_json::from_str(r#"{"test":"pingpong","transport":"raw-udp","size":8,"iters":5,"latency_us":1.0,"latency_p99_us":2.0}"#)
                .expect("deserialize");
        assert_eq!(raw.detection(), None);
        assert_eq!(raw.transport(), Transport::RawUdp);
    }

    #[test]
    fn floor_records_cover_handoff_and_every_memcpy_size() {
        let records = FloorRecord::all(&floors());
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[0].kind,
            FloorKind::CachelineHandoff {
                phase: Phase::BeforeRanks
            }
        );
        assert_eq!(
            records[0].figures,
            FloorFigures::Latency {
                latency_us: 0.1,
                latency_p99_us: 0.2
            }
        );
        assert_eq!(records[1].kind, FloorKind::Memcpy);
        let value = serde_json::to_value(&records[1]).expect("serialize");
        assert_eq!(value["test"], "floor");
        assert_eq!(value["floor"], "memcpy");
        assert_eq!(value["transport"], "none");
        assert_eq!(value["bandwidth_MBps"], 20_000.0);
        let value = serde_json::to_value(&records[0]).expect("serialize");
        assert_eq!(value["floor"], "cacheline_handoff");
        assert_eq!(value["phase"], "before_ranks");
        assert_eq!(value["latency_us"], 0.1);
    }
}
