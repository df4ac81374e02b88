//! Results of `quiver bench`: the JSON record of one measured point, floor ratios, and the
//! readable table.
//!
//! A [`Record`] is one JSON object per line (JSON Lines). The ranks write records without
//! floors; the parent fills them in ([`apply_floor`]) and hands every record to a
//! [`Report`], which prints a table row and/or a JSON line as it arrives.
//!
//! Units: latencies in microseconds, bandwidth in MB/s (10^6 bytes per second), rates in
//! millions of messages per second, sizes in bytes.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::floor::{Floors, HandoffFloor, LatencyFloor, HANDOFF_ROUND_TRIPS_PER_BATCH};
use super::plan::TestName;
use super::sizes::format_size;

/// `floor` value of the cache-line hand-off floor record.
pub(crate) const FLOOR_HANDOFF: &str = "cacheline_handoff";
/// `floor` value of a memcpy floor record.
pub(crate) const FLOOR_MEMCPY: &str = "memcpy";
/// `floor` value of the trivial system call floor record.
pub(crate) const FLOOR_SYSCALL: &str = "syscall";
/// `floor` value of the cross-core wake-up floor records (`mechanism` says which).
pub(crate) const FLOOR_WAKEUP: &str = "wakeup";
/// `floor` value of the cross-memory attach (`process_vm_readv`) bandwidth records.
pub(crate) const FLOOR_CMA: &str = "cma";
/// `transport` value of floor records (no transport is involved).
pub(crate) const TRANSPORT_NONE: &str = "none";
/// `size` of the hand-off floor record: one cache line.
pub(crate) const CACHE_LINE_BYTES: u64 = 64;
/// `phase` of the hand-off measured before the ranks run (the one ratios use).
pub(crate) const PHASE_BEFORE: &str = "before_ranks";
/// `phase` of the hand-off measured again after the ranks have finished.
pub(crate) const PHASE_AFTER: &str = "after_ranks";
/// A hand-off that moved by more than this factor during the run gets a warning.
pub(crate) const HANDOFF_DRIFT_WARNING_FACTOR: f64 = 1.5;

/// One measured point: one JSON line of `--json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// "pingpong", "bw", "rate" or "floor".
    pub(crate) test: String,
    /// For `test` = "floor": which floor ("cacheline_handoff" or "memcpy").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) floor: Option<String>,
    /// For the hand-off floor: "before_ranks" (used for the ratios) or "after_ranks".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) phase: Option<String>,
    /// Transport measured ("shm"), or "none" for floors.
    pub(crate) transport: String,
    /// Message size in bytes.
    pub(crate) size: u64,
    /// Timed iterations: round trips (pingpong, hand-off), windows (bw, rate), copies (memcpy).
    pub(crate) iters: u64,
    /// Outstanding sends per window (bw, rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) window: Option<u64>,
    /// Median one-way latency in µs (pingpong: round trip / 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) latency_us: Option<f64>,
    /// 99th-percentile (nearest rank) one-way latency in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) latency_p99_us: Option<f64>,
    /// Bandwidth in MB/s (10^6 bytes/s); for memcpy floors the median batch.
    #[serde(
        rename = "bandwidth_MBps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) bandwidth_mbps: Option<f64>,
    /// memcpy floors only: the best batch, in MB/s.
    #[serde(
        rename = "bandwidth_best_MBps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) bandwidth_best_mbps: Option<f64>,
    /// Message rate in millions of messages per second.
    #[serde(
        rename = "rate_Mmsgs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) rate_mmsgs: Option<f64>,
    /// pingpong: the latency floor in µs: the larger of the one-way hand-off and the time
    /// one core takes to memcpy `size` bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) floor_us: Option<f64>,
    /// bw: the bandwidth floor in MB/s (memcpy at this size).
    #[serde(
        rename = "floor_MBps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) floor_mbps: Option<f64>,
    /// rate: the rate floor in Mmsg/s (1 / one-way hand-off).
    #[serde(
        rename = "floor_Mmsgs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) floor_mmsgs: Option<f64>,
    /// Result / floor: pingpong latency / floor_us (>= 1 expected, lower is better);
    /// bw bandwidth / floor_MBps and rate / floor_Mmsgs (higher is better).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) floor_ratio: Option<f64>,
    /// The two CPUs (rank 0, rank 1; or the hand-off's two threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpus: Option<[usize; 2]>,
    /// loggp: send overhead, median time inside the blocking send call, in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) o_s_us: Option<f64>,
    /// loggp: receive overhead, median time inside a receive of an already-arrived
    /// message, in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) o_r_us: Option<f64>,
    /// loggp: latency L = round trip / 2 - o_s - o_r, in µs (the fit record: at the
    /// smallest size).
    #[serde(rename = "L_us", default, skip_serializing_if = "Option::is_none")]
    pub(crate) l_us: Option<f64>,
    /// loggp: gap per message in a saturated stream (time / messages), in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) g_us: Option<f64>,
    /// loggp: gap per byte; on a size point the slope of g from the previous size, on the
    /// fit record the least-squares slope of g over the fitted sizes; ns per byte.
    #[serde(
        rename = "G_ns_per_byte",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) big_g_ns_per_byte: Option<f64>,
    /// loggp: median round trip of this size, in µs (L is derived from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) round_trip_us: Option<f64>,
    /// loggp: median cost of one clock read pair, subtracted from o_s and o_r, in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) clock_overhead_us: Option<f64>,
    /// loggp fit record: the sizes fitted (smallest, largest) and the fit's r².
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_sizes: Option<[u64; 2]>,
    /// loggp fit record: coefficient of determination of the G fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_r2: Option<f64>,
    /// pool / crossover: which variant this point measured ("pooled", "fresh"; "copy",
    /// "zero_copy"; "default", "tuned").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variant: Option<String>,
    /// crossover: the `QUIVER_*` settings the ranks ran with, as NAME=VALUE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) settings: Option<Vec<String>>,
    /// floor records: the floor's median in µs for syscall and wake-up floors is in
    /// `latency_us`; this names the mechanism ("eventfd_poll", "futex").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mechanism: Option<String>,
    /// Free-form result of a suite (crossover size, verdict), for people and scripts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<serde_json::Value>,
    /// quiver transports: failure detection in the ranks for this point, "on" or "off"
    /// (as rank 0's configuration says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detect: Option<String>,
    /// `--detect both`: the on/off round this point belongs to (0, 1, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) round: Option<u32>,
    /// Liveness looks both ranks' endpoints made during the timed run (bibw: during the
    /// whole point, warm-up included), from `Endpoint::detection_stats`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detect_looks: Option<u64>,
    /// Time those looks took, in nanoseconds, summed over both ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detect_ns: Option<u64>,
    /// `detect_ns` / the timed run's duration: what the looks took, as a share of the run
    /// (an upper bound of detection's share: both ranks' looks are summed, as if every one
    /// were on the critical path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detect_share: Option<f64>,
    /// Of `detect_looks`, those longer than 50 µs (`DetectionStats::SLOW_LOOK_NS`): the
    /// thread was most likely preempted during them (a busy machine, not the look).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detect_slow_looks: Option<u64>,
    /// Time the slow looks took, in nanoseconds (included in `detect_ns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detect_slow_ns: Option<u64>,
    /// bw above the eager size where the transport sends posted sends in place (udp): how
    /// many distinct buffers the sender kept posted (`worker.rs`, `send_window`). Absent
    /// where it sends one buffer with blocking sends or posts the whole window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) posted: Option<u64>,
}

/// `variant` of the summary records of `--detect both` (one per test, transport and size).
pub(crate) const VARIANT_DETECT_SUMMARY: &str = "detect_on_off";

/// Confidence of the interval of the on/off ratio in the `--detect both` summary.
pub(crate) const DETECT_CONFIDENCE: f64 = 0.95;

/// Fills in `floor_*` and `floor_ratio` of a rank's record from this run's floors.
/// Records without a matching floor (e.g. a size without a memcpy floor) are left as they are.
pub(crate) fn apply_floor(record: &mut Record, floors: &Floors) {
    let handoff_us = floors.handoff.one_way_median_us;
    let memcpy_mbps = floors
        .memcpy_at(record.size)
        .map(|floor| floor.median_mbps)
        .filter(|&mbps| mbps > 0.0);
    match record.test.as_str() {
        "pingpong" => {
            // A message needs at least one cache-line hand-off and at least one copy of its
            // bytes; a pipelined transport can overlap the two, so the floor is the larger
            // (not the sum): exactly the hand-off for small messages, the copy for large ones.
            // bytes / (10^6 bytes/s) = µs.
            let copy_us = memcpy_mbps.map_or(0.0, |mbps| record.size as f64 / mbps);
            let floor_us = handoff_us.max(copy_us);
            record.floor_us = Some(floor_us);
            record.floor_ratio = record.latency_us.map(|latency| latency / floor_us);
        }
        "pool" => {
            let copy_us = memcpy_mbps.map_or(0.0, |mbps| record.size as f64 / mbps);
            let floor_us = handoff_us.max(copy_us);
            record.floor_us = Some(floor_us);
            record.floor_ratio = record.latency_us.map(|latency| latency / floor_us);
        }
        "bibw" => {
            // Both directions at once: at best each core copies at memcpy speed.
            let floor = memcpy_mbps.map(|mbps| 2.0 * mbps);
            record.floor_mbps = floor;
            record.floor_ratio = record
                .bandwidth_mbps
                .zip(floor)
                .map(|(bandwidth, floor)| bandwidth / floor);
        }
        "bw" => {
            record.floor_mbps = memcpy_mbps;
            record.floor_ratio = record
                .bandwidth_mbps
                .zip(memcpy_mbps)
                .map(|(bandwidth, floor)| bandwidth / floor);
        }
        "rate" => {
            // One message per one-way hand-off; 1 / µs = 10^6 / s.
            let floor_mmsgs = 1.0 / handoff_us;
            record.floor_mmsgs = Some(floor_mmsgs);
            record.floor_ratio = record.rate_mmsgs.map(|rate| rate / floor_mmsgs);
        }
        _ => {}
    }
}

/// The floor records of a run, as JSON lines would carry them.
pub(crate) fn floor_records(floors: &Floors) -> Vec<Record> {
    let mut records = vec![handoff_record(&floors.handoff, PHASE_BEFORE)];
    records.extend(floors.memcpy.iter().map(|memcpy| Record {
        test: TestName::Floor.as_str().to_string(),
        floor: Some(FLOOR_MEMCPY.to_string()),
        transport: TRANSPORT_NONE.to_string(),
        size: memcpy.size_bytes,
        iters: memcpy.copies,
        bandwidth_mbps: Some(memcpy.median_mbps),
        bandwidth_best_mbps: Some(memcpy.best_mbps),
        cpus: Some([floors.handoff.cpu_a, floors.handoff.cpu_a]),
        ..Record::default()
    }));
    if let Some(extended) = &floors.extended {
        let cpu_a = floors.handoff.cpu_a;
        let latency = |floor: &str, mechanism: Option<&str>, value: &LatencyFloor, cpus| Record {
            test: TestName::Floor.as_str().to_string(),
            floor: Some(floor.to_string()),
            mechanism: mechanism.map(str::to_string),
            transport: TRANSPORT_NONE.to_string(),
            size: CACHE_LINE_BYTES,
            iters: value.count,
            latency_us: Some(value.median_us),
            latency_p99_us: Some(value.p99_us),
            cpus: Some(cpus),
            ..Record::default()
        };
        let pair = [floors.handoff.cpu_a, floors.handoff.cpu_b];
        records.push(latency(
            FLOOR_SYSCALL,
            None,
            &extended.syscall,
            [cpu_a, cpu_a],
        ));
        records.push(latency(
            FLOOR_WAKEUP,
            Some("eventfd_poll"),
            &extended.wakeup_eventfd,
            pair,
        ));
        records.push(latency(
            FLOOR_WAKEUP,
            Some("futex"),
            &extended.wakeup_futex,
            pair,
        ));
        records.extend(extended.cma.iter().map(|cma| Record {
            test: TestName::Floor.as_str().to_string(),
            floor: Some(FLOOR_CMA.to_string()),
            transport: TRANSPORT_NONE.to_string(),
            size: cma.size_bytes,
            iters: cma.copies,
            bandwidth_mbps: Some(cma.median_mbps),
            bandwidth_best_mbps: Some(cma.best_mbps),
            cpus: Some([cpu_a, cpu_a]),
            ..Record::default()
        }));
    }
    records
}

/// The record of one hand-off measurement.
pub(crate) fn handoff_record(handoff: &HandoffFloor, phase: &str) -> Record {
    Record {
        test: TestName::Floor.as_str().to_string(),
        floor: Some(FLOOR_HANDOFF.to_string()),
        phase: Some(phase.to_string()),
        transport: TRANSPORT_NONE.to_string(),
        size: CACHE_LINE_BYTES,
        iters: handoff.round_trips,
        latency_us: Some(handoff.one_way_median_us),
        latency_p99_us: Some(handoff.one_way_p99_us),
        cpus: Some([handoff.cpu_a, handoff.cpu_b]),
        ..Record::default()
    }
}

/// How far the hand-off moved between two measurements (larger / smaller, >= 1).
pub(crate) fn handoff_drift(before: &HandoffFloor, after: &HandoffFloor) -> f64 {
    let (low, high) = if before.one_way_median_us <= after.one_way_median_us {
        (before.one_way_median_us, after.one_way_median_us)
    } else {
        (after.one_way_median_us, before.one_way_median_us)
    };
    if low > 0.0 {
        high / low
    } else {
        f64::INFINITY
    }
}

/// How the human-readable output looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Style {
    /// quiver's table: every figure with its floor and ratio.
    Table,
    /// The columns the OSU micro-benchmarks print (`# Size  Latency (us)`, ...); floors
    /// and notes as `#` comment lines.
    Osu,
}

/// Where results go: a table (human), JSON lines (machines), either or both.
pub(crate) struct Report {
    table: Option<Box<dyn Write>>,
    json: Option<Box<dyn Write>>,
    style: Style,
    /// Test (and transport and variant) whose table section is open (its header printed).
    open_section: Option<String>,
    /// Every rank result so far, in order (for plots and suites).
    collected: Vec<Record>,
    /// The progress bar on stderr, when the run has one.
    progress: Option<super::progress::Progress>,
    /// Variant and settings given to every following result without a variant (a suite
    /// says which path or side its current job measures).
    tag: Option<(String, Vec<String>)>,
    /// `--detect both`: the round given to every following result.
    round: Option<u32>,
    /// `--baseline interleave`: results of two transports come interleaved; they share one
    /// table section per test and each row names its transport and pair.
    interleaved_transports: bool,
}

impl Report {
    /// A report printing the table to `table` and JSON lines to `json`, when given.
    pub(crate) fn new(table: Option<Box<dyn Write>>, json: Option<Box<dyn Write>>) -> Report {
        Report {
            table,
            json,
            style: Style::Table,
            open_section: None,
            collected: Vec::new(),
            progress: None,
            tag: None,
            round: None,
            interleaved_transports: false,
        }
    }

    /// `--baseline interleave`: one table section per test for both transports, each row
    /// followed by its transport and pair (`false`: a section per transport, as usual).
    pub(crate) fn set_interleaved_transports(&mut self, interleaved: bool) {
        self.interleaved_transports = interleaved;
    }

    /// Gives every following result `round` (`--detect both`; `None`: no round).
    pub(crate) fn set_round(&mut self, round: Option<u32>) {
        self.round = round;
    }

    /// Tags every following result that has no variant of its own with `variant` and
    /// `settings` (`None`: stop tagging).
    pub(crate) fn set_tag(&mut self, variant: Option<&str>, settings: Vec<String>) {
        self.tag = variant.map(|variant| (variant.to_string(), settings));
    }

    /// Prints the human-readable part in `style`.
    pub(crate) fn set_style(&mut self, style: Style) {
        self.style = style;
    }

    /// Shows a progress bar over `points` points (more may be added with `add_points`).
    pub(crate) fn set_progress(&mut self, progress: super::progress::Progress) {
        self.progress = Some(progress);
    }

    /// Adds points to the progress bar's total.
    pub(crate) fn add_points(&mut self, points: usize) {
        if let Some(progress) = self.progress.as_mut() {
            progress.add_points(points);
        }
    }

    /// Removes the progress bar from the screen.
    pub(crate) fn clear_progress(&mut self) {
        if let Some(progress) = self.progress.as_mut() {
            progress.clear();
        }
    }

    /// Stops printing the table (a suite prints its own summary instead).
    pub(crate) fn take_table(&mut self) -> Option<Box<dyn Write>> {
        self.table.take()
    }

    /// Gives back the table taken with [`Report::take_table`].
    pub(crate) fn restore_table(&mut self, table: Option<Box<dyn Write>>) {
        self.table = table;
    }

    /// Every rank result reported so far.
    pub(crate) fn collected(&self) -> &[Record] {
        &self.collected
    }

    /// Writes a record to the JSON output only (suite summaries).
    ///
    /// # Errors
    /// If writing fails.
    pub(crate) fn json_only(&mut self, record: &Record) -> io::Result<()> {
        self.json_line(record)
    }

    /// Prints the run's first lines: what is measured, where, and the units.
    ///
    /// # Errors
    /// If writing the table fails.
    pub(crate) fn preamble(&mut self, transport: &str, cpus: [usize; 2]) -> io::Result<()> {
        if self.style == Style::Osu {
            return self.as_comments(|report| report.preamble_table(transport, cpus));
        }
        self.preamble_table(transport, cpus)
    }

    fn preamble_table(&mut self, transport: &str, cpus: [usize; 2]) -> io::Result<()> {
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        writeln!(
            table,
            "quiver bench: transport {transport}, rank 0 on CPU {}, rank 1 on CPU {}, both busy-polling",
            cpus[0], cpus[1]
        )?;
        writeln!(
            table,
            "units: µs = microseconds, MB/s = 10^6 bytes/s, Mmsg/s = 10^6 messages/s, KiB/MiB = 2^10/2^20 bytes"
        )?;
        table.flush()
    }

    /// Prints the floor section and the floor JSON records.
    ///
    /// # Errors
    /// If writing either output fails.
    pub(crate) fn floors(&mut self, floors: &Floors) -> io::Result<()> {
        if self.style == Style::Osu {
            return self.as_comments(|report| report.floors_table(floors));
        }
        self.floors_table(floors)
    }

    fn floors_table(&mut self, floors: &Floors) -> io::Result<()> {
        for record in floor_records(floors) {
            self.json_line(&record)?;
        }
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        let handoff = &floors.handoff;
        writeln!(table)?;
        writeln!(table, "floor: the machine, measured in this run")?;
        writeln!(
            table,
            "  cache-line hand-off CPU {} <-> CPU {}, one way: median {} µs, p99 {} µs",
            handoff.cpu_a,
            handoff.cpu_b,
            format_microseconds(handoff.one_way_median_us),
            format_microseconds(handoff.one_way_p99_us)
        )?;
        writeln!(
            table,
            "    (128-byte-aligned AtomicU64 ping-ponged by two pinned threads; per batch of {} round trips, time / round trips / 2)",
            HANDOFF_ROUND_TRIPS_PER_BATCH
        )?;
        if !floors.memcpy.is_empty() {
            writeln!(
                table,
                "  memcpy on CPU {}, warm buffers (median and best batch):",
                handoff.cpu_a
            )?;
            writeln!(table, "  {:>10} {:>11} {:>12}", "size", "MB/s", "best MB/s")?;
            for memcpy in &floors.memcpy {
                writeln!(
                    table,
                    "  {:>10} {:>11} {:>12}",
                    format_size(memcpy.size_bytes),
                    format_mbps(memcpy.median_mbps),
                    format_mbps(memcpy.best_mbps)
                )?;
            }
        }
        if let Some(extended) = &floors.extended {
            writeln!(
                table,
                "  trivial system call (getppid) on CPU {}: median {} µs, p99 {} µs",
                handoff.cpu_a,
                format_microseconds(extended.syscall.median_us),
                format_microseconds(extended.syscall.p99_us)
            )?;
            for (name, wakeup) in [
                ("eventfd + poll", &extended.wakeup_eventfd),
                ("futex", &extended.wakeup_futex),
            ] {
                writeln!(
                    table,
                    "  cross-core wake-up ({name}) CPU {} <-> CPU {}, one way: median {} µs, p99 {} µs",
                    handoff.cpu_a,
                    handoff.cpu_b,
                    format_microseconds(wakeup.median_us),
                    format_microseconds(wakeup.p99_us)
                )?;
            }
            if !extended.cma.is_empty() {
                writeln!(
                    table,
                    "  cross-memory attach (process_vm_readv of own memory) on CPU {}:",
                    handoff.cpu_a
                )?;
                writeln!(table, "  {:>10} {:>11} {:>12}", "size", "MB/s", "best MB/s")?;
                for cma in &extended.cma {
                    writeln!(
                        table,
                        "  {:>10} {:>11} {:>12}",
                        format_size(cma.size_bytes),
                        format_mbps(cma.median_mbps),
                        format_mbps(cma.best_mbps)
                    )?;
                }
            }
        }
        table.flush()
    }

    /// Reports the hand-off measured again after the ranks, and warns (in the table and on
    /// stderr) when it moved by more than [`HANDOFF_DRIFT_WARNING_FACTOR`].
    ///
    /// # Errors
    /// If writing either output fails.
    pub(crate) fn handoff_after(
        &mut self,
        before: &HandoffFloor,
        after: &HandoffFloor,
    ) -> io::Result<()> {
        self.clear_progress();
        if self.style == Style::Osu {
            return self.as_comments(|report| report.handoff_after_table(before, after));
        }
        self.handoff_after_table(before, after)
    }

    /// Runs `print` with the table going to a buffer, then writes the buffer's lines as
    /// `# ` comments (the OSU layout keeps only data rows uncommented).
    fn as_comments(&mut self, print: impl FnOnce(&mut Report) -> io::Result<()>) -> io::Result<()> {
        let Some(mut real) = self.table.take() else {
            return print(self);
        };
        let buffer = SharedBuffer::default();
        self.table = Some(Box::new(buffer.clone()));
        let printed = print(self);
        self.table = Some(Box::new(std::io::sink()));
        let text = buffer.text();
        for line in text.lines() {
            if line.is_empty() {
                writeln!(real)?;
            } else {
                writeln!(real, "# {line}")?;
            }
        }
        real.flush()?;
        self.table = Some(real);
        printed
    }

    fn handoff_after_table(
        &mut self,
        before: &HandoffFloor,
        after: &HandoffFloor,
    ) -> io::Result<()> {
        self.json_line(&handoff_record(after, PHASE_AFTER))?;
        let drift = handoff_drift(before, after);
        let warning = (drift > HANDOFF_DRIFT_WARNING_FACTOR).then(|| {
            format!(
                "warning: the cache-line hand-off floor moved {drift:.1}x during the run ({} -> {} µs); \
                 ratios use the first figure. Where the host runs the vCPUs changes it: compare runs with care.",
                format_microseconds(before.one_way_median_us),
                format_microseconds(after.one_way_median_us)
            )
        });
        if let Some(warning) = &warning {
            eprintln!("quiver bench: {warning}");
        }
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        writeln!(table)?;
        writeln!(
            table,
            "floor again after the ranks: cache-line hand-off one way: median {} µs, p99 {} µs",
            format_microseconds(after.one_way_median_us),
            format_microseconds(after.one_way_p99_us)
        )?;
        if let Some(warning) = &warning {
            writeln!(table, "  {warning}")?;
        }
        table.flush()
    }

    /// Prints one rank result (floors already applied) as a table row and/or a JSON line.
    ///
    /// # Errors
    /// If writing either output fails.
    pub(crate) fn result(&mut self, record: &Record) -> io::Result<()> {
        let tagged;
        let record = match &self.tag {
            Some((variant, settings)) if record.variant.is_none() => {
                let mut copy = record.clone();
                copy.variant = Some(variant.clone());
                if !settings.is_empty() {
                    copy.settings = Some(settings.clone());
                }
                tagged = copy;
                &tagged
            }
            _ => record,
        };
        let rounded;
        let record = match self.round {
            Some(round) if record.round.is_none() => {
                let mut copy = record.clone();
                copy.round = Some(round);
                rounded = copy;
                &rounded
            }
            _ => record,
        };
        self.collected.push(record.clone());
        if let Some(progress) = self.progress.as_mut() {
            let what = format!(
                "{} {} {}",
                record.transport,
                record.test,
                format_size(record.size)
            );
            progress.point_done(&what);
        }
        self.json_line(record)?;
        if self.table.is_none() {
            return Ok(());
        }
        // pool and loggp show their variant in a column; other tests get a section per
        // variant (a suite's copy/zero-copy or default/tuned jobs).
        let variant_in_column = matches!(record.test.as_str(), "pool" | "loggp");
        let section = format!(
            "{} {} {}",
            record.test,
            if self.interleaved_transports {
                "interleaved"
            } else {
                &record.transport
            },
            if variant_in_column {
                ""
            } else {
                record.variant.as_deref().unwrap_or("")
            }
        );
        let style = self.style;
        if self.open_section.as_deref() != Some(section.as_str()) {
            self.open_section = Some(section);
            self.clear_progress();
            match style {
                Style::Table => self.section_header(record)?,
                Style::Osu => self.osu_header(record)?,
            }
        }
        let mut row = match style {
            Style::Table => table_row(record),
            Style::Osu => osu_row(record),
        };
        if self.interleaved_transports {
            let pair = record
                .round
                .map_or(String::new(), |round| format!(" pair {round}"));
            match style {
                Style::Table => row.push_str(&format!(" {:>8}{pair}", record.transport)),
                Style::Osu => row.push_str(&format!("  # {}{pair}", record.transport)),
            }
        }
        self.clear_progress();
        if let Some(table) = self.table.as_mut() {
            writeln!(table, "{row}")?;
            if let Some(line) = detection_line(record) {
                match style {
                    Style::Table => writeln!(table, "  {:>10} {line}", "")?,
                    Style::Osu => writeln!(table, "# {line}")?,
                }
            }
            table.flush()?;
        }
        Ok(())
    }

    /// The OSU micro-benchmarks' title and column line for `record`'s test.
    fn osu_header(&mut self, record: &Record) -> io::Result<()> {
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        let transport = if self.interleaved_transports {
            "quiver and raw-baseline blocks interleaved"
        } else {
            &record.transport
        };
        let variant = record
            .variant
            .as_deref()
            .map_or(String::new(), |variant| format!(", {variant}"));
        let (title, columns) = match record.test.as_str() {
            "pingpong" => ("Latency Test", "# Size          Latency (us)"),
            "bw" => ("Bandwidth Test", "# Size      Bandwidth (MB/s)"),
            "bibw" => (
                "Bi-Directional Bandwidth Test",
                "# Size      Bandwidth (MB/s)",
            ),
            "rate" => (
                "Multiple Bandwidth / Message Rate Test",
                "# Size                  MB/s        Messages/s",
            ),
            "pool" => (
                "Latency Test (receive buffers)",
                "# Size          Latency (us)",
            ),
            "loggp" => (
                "LogGP Parameters",
                "# Size      o_s (us)      o_r (us)        L (us)        g (us)     G (ns/B)",
            ),
            _ => ("Test", "# Size"),
        };
        writeln!(table)?;
        writeln!(table, "# quiver bench {title} ({transport}{variant})")?;
        writeln!(table, "{columns}")?;
        Ok(())
    }

    fn section_header(&mut self, record: &Record) -> io::Result<()> {
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        let window = record.window.unwrap_or(0);
        writeln!(table)?;
        if record.variant.is_some() && record.test != "pool" && record.test != "loggp" {
            writeln!(
                table,
                "[{} {}: {}]",
                record.transport,
                record.variant.as_deref().unwrap_or(""),
                record
                    .settings
                    .as_ref()
                    .map_or(String::new(), |settings| settings.join(" "))
            )?;
        }
        match record.test.as_str() {
            "pingpong" => {
                writeln!(table, "pingpong: one-way latency = round trip / 2, median and p99 (nearest rank) over round trips")?;
                writeln!(table, "  floor = max(hand-off, size / memcpy MB/s at that size); x floor = median / floor (1 = at the floor, lower is better)")?;
                writeln!(
                    table,
                    "  {:>10} {:>9} {:>11} {:>11} {:>11} {:>9}",
                    "size", "iters", "median µs", "p99 µs", "floor µs", "x floor"
                )?;
            }
            "bw" => {
                writeln!(table, "bw: streaming, windows of {window} posted sends, 1-byte ack per window (osu_bw style); MB/s = bytes / time")?;
                writeln!(table, "  of floor = MB/s / memcpy MB/s at that size (1 = as fast as one core's memcpy, higher is better)")?;
                writeln!(
                    table,
                    "  {:>10} {:>9} {:>11} {:>12} {:>9}",
                    "size", "windows", "MB/s", "memcpy MB/s", "of floor"
                )?;
            }
            "rate" => {
                writeln!(table, "rate: 8-byte messages, windows of {window} posted sends, 1-byte ack per window")?;
                writeln!(table, "  floor Mmsg/s = 1 / one-way hand-off (one cache-line hand-off per message); x floor = Mmsg/s / floor (higher is better)")?;
                writeln!(
                    table,
                    "  {:>10} {:>9} {:>11} {:>13} {:>9}",
                    "size", "messages", "Mmsg/s", "floor Mmsg/s", "x floor"
                )?;
            }
            "bibw" => {
                writeln!(table, "bibw: both ranks stream windows of {window} posted sends to each other at once (osu_bibw style); MB/s = bytes both ways / time")?;
                writeln!(
                    table,
                    "  of floor = MB/s / (2 x memcpy MB/s at that size: both cores copying)"
                )?;
                writeln!(
                    table,
                    "  {:>10} {:>9} {:>11} {:>12} {:>9}",
                    "size", "windows", "MB/s", "floor MB/s", "of floor"
                )?;
            }
            "loggp" => {
                writeln!(table, "loggp: LogGP cost model per size, µs (o_s = inside send, o_r = inside a receive of an arrived message,")?;
                writeln!(table, "  L = round trip/2 - o_s - o_r, g = time per message in a saturated stream, G = slope of g, ns/byte)")?;
                writeln!(
                    table,
                    "  {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
                    "size", "RTT/2 µs", "o_s µs", "o_r µs", "L µs", "g µs", "G ns/B", ""
                )?;
            }
            "pool" => {
                writeln!(table, "pool: pingpong, rank 0 receiving with recv_pooled (pre-registered buffers) or into a fresh buffer per message")?;
                writeln!(
                    table,
                    "  {:>10} {:>9} {:>8} {:>11} {:>11} {:>11} {:>9}",
                    "size", "iters", "buffers", "median µs", "p99 µs", "floor µs", "x floor"
                )?;
            }
            other => writeln!(table, "{other}:")?,
        }
        if self.interleaved_transports {
            writeln!(
                table,
                "  (quiver and raw-baseline blocks in the order they ran; the last columns name the transport and the pair)"
            )?;
        }
        Ok(())
    }

    fn json_line(&mut self, record: &Record) -> io::Result<()> {
        let Some(json) = self.json.as_mut() else {
            return Ok(());
        };
        serde_json::to_writer(&mut *json, record)?;
        writeln!(json)?;
        json.flush()
    }
}

/// "detection on: N looks, X µs in total = Y ppm of the timed run" for a record that
/// carries the detection cost.
fn detection_line(record: &Record) -> Option<String> {
    let (looks, ns, share) = (
        record.detect_looks?,
        record.detect_ns?,
        record.detect_share?,
    );
    let mode = record
        .detect
        .as_deref()
        .map_or(String::new(), |mode| format!(" {mode}"));
    let run = if record.test == "bibw" {
        "the point (warm-up included)"
    } else {
        "the timed run"
    };
    let slow = match (record.detect_slow_looks, record.detect_slow_ns) {
        (Some(slow), Some(slow_ns)) if slow > 0 => format!(
            "; {slow} of them over 50 µs took {} µs (preempted?)",
            format_microseconds(slow_ns as f64 / 1e3)
        ),
        _ => String::new(),
    };
    Some(format!(
        "detection{mode}: {looks} looks, {} µs in total = {} ppm of {run} (both ranks){slow}",
        format_microseconds(ns as f64 / 1e3),
        format_significant(share * 1e6, 2)
    ))
}

/// The figure the `--detect both` summary compares for a test, and its name.
fn detect_metric(record: &Record) -> Option<(&'static str, f64)> {
    match record.test.as_str() {
        "pingpong" | "pool" => record.latency_us.map(|value| ("latency_us", value)),
        "bw" | "bibw" => record.bandwidth_mbps.map(|value| ("bandwidth_MBps", value)),
        "rate" => record.rate_mmsgs.map(|value| ("rate_Mmsgs", value)),
        _ => None,
    }
}

/// The on/off comparison of one test, transport, variant and size over the rounds of
/// `--detect both`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DetectComparison {
    /// Test, transport, variant and size compared.
    pub(crate) test: String,
    /// See `test`.
    pub(crate) transport: String,
    /// See `test`.
    pub(crate) variant: Option<String>,
    /// See `test`.
    pub(crate) size: u64,
    /// "latency_us", "bandwidth_MBps" or "rate_Mmsgs".
    pub(crate) metric: &'static str,
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
    pub(crate) interval: Option<super::stats::MedianInterval>,
    /// Median `detect_share` of the on rounds (the looks' own cost, in the same runs).
    pub(crate) share_on: Option<f64>,
    /// Median `detect_share` of the off rounds.
    pub(crate) share_off: Option<f64>,
    /// Median share of the on rounds without the slow looks (`detect_slow_ns`).
    pub(crate) share_on_without_slow: Option<f64>,
}

/// Two figures measured in pairs (side A and side B of each pair: detection on and off,
/// or quiver and its raw baseline), compared by the ratio A / B.
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
    /// Order-statistics interval of `median` at [`DETECT_CONFIDENCE`] (None: fewer than 6
    /// pairs).
    pub(crate) interval: Option<super::stats::MedianInterval>,
}

/// The paired comparison of `pairs` (A, B); pairs whose B is not above 0 are left out.
/// `None` when no pair is left.
pub(crate) fn paired_ratio(pairs: &[(f64, f64)]) -> Option<PairedRatio> {
    use super::stats::{median, median_interval, sort_samples};
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
        interval: median_interval(&ratios, DETECT_CONFIDENCE),
        ratios,
    })
}

/// What a paired comparison groups by: test, transport, variant and size.
type PairKey = (String, String, Option<String>, u64);

/// The records of one [`PairKey`], by pair.
struct PairGroup<'a> {
    key: PairKey,
    /// "latency_us", "bandwidth_MBps" or "rate_Mmsgs".
    metric: &'static str,
    /// Per pair (`round`): the figure of side A and of side B.
    by_pair: std::collections::BTreeMap<u32, [Option<f64>; 2]>,
    /// The records compared, with their side (0: A, 1: B).
    records: Vec<(usize, &'a Record)>,
}

impl PairGroup<'_> {
    /// The (A, B) figures of the pairs that have both.
    fn pairs(&self) -> Vec<(f64, f64)> {
        self.by_pair
            .values()
            .filter_map(|[a, b]| a.zip(*b))
            .collect()
    }
}

/// Groups the records that have a figure ([`detect_metric`]), a pair (`round`) and a side
/// (`side`: 0 for A, 1 for B, `None`: not compared) by `key`, in first-seen order.
fn group_pairs<'a>(
    records: &'a [Record],
    key: impl Fn(&Record) -> PairKey,
    side: impl Fn(&Record) -> Option<usize>,
) -> Vec<PairGroup<'a>> {
    let mut groups: Vec<PairGroup<'a>> = Vec::new();
    for record in records {
        let (Some((metric, value)), Some(pair), Some(side)) =
            (detect_metric(record), record.round, side(record))
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
                    by_pair: Default::default(),
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

/// Compares on against off over the rounds in `records` (results of `--detect both` or
/// `interleave`, with `detect` and `round` set), per test, transport, variant and size, in
/// first-seen order.
pub(crate) fn detect_comparisons(records: &[Record]) -> Vec<DetectComparison> {
    use super::stats::{median, sort_samples};
    let key = |record: &Record| {
        (
            record.test.clone(),
            record.transport.clone(),
            record.variant.clone(),
            record.size,
        )
    };
    let side = |record: &Record| match record.detect.as_deref() {
        Some("on") => Some(0),
        Some("off") => Some(1),
        _ => None,
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
            shares[side].extend(record.detect_share);
            if let (0, Some(share), Some(ns), Some(slow_ns)) = (
                side,
                record.detect_share,
                record.detect_ns,
                record.detect_slow_ns,
            ) {
                let kept = if ns > 0 {
                    ns.saturating_sub(slow_ns) as f64 / ns as f64
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
        let (test, transport, variant, size) = group.key;
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

impl DetectComparison {
    /// The summary as a JSON record (`variant` = [`VARIANT_DETECT_SUMMARY`]).
    pub(crate) fn record(&self) -> Record {
        Record {
            test: self.test.clone(),
            transport: self.transport.clone(),
            size: self.size,
            iters: self.rounds as u64,
            variant: Some(VARIANT_DETECT_SUMMARY.to_string()),
            summary: Some(serde_json::json!({
                "variant": self.variant,
                "metric": self.metric,
                "rounds": self.rounds,
                "median_on": self.median_on,
                "median_off": self.median_off,
                "ratio_of_medians": self.median_on / self.median_off,
                "paired_ratios": self.paired_ratios,
                "paired_ratio_median": self.paired_median,
                "interval": self.interval.map(|interval| [interval.low, interval.high]),
                "interval_confidence": self.interval.map(|interval| interval.confidence),
                "detect_share_on": self.share_on,
                "detect_share_off": self.share_off,
                "detect_share_on_without_slow": self.share_on_without_slow,
            })),
            ..Record::default()
        }
    }
}

impl Report {
    /// Ends a `--detect both` run: per test, transport and size, the medians of on and off,
    /// their ratio, the median of the paired per-round ratios with its order-statistics
    /// 95% interval, and the looks' own cost; as a table and as JSON summary records.
    ///
    /// # Errors
    /// If writing either output fails.
    pub(crate) fn detect_summary(&mut self, rounds: u32, interleaved: bool) -> io::Result<()> {
        let comparisons = detect_comparisons(&self.collected);
        for comparison in &comparisons {
            self.json_line(&comparison.record())?;
        }
        let osu = self.style == Style::Osu;
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
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
            DETECT_CONFIDENCE * 100.0
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
        for comparison in &comparisons {
            let interval = comparison.interval.map_or("- (too few)".to_string(), |i| {
                format!("{:.3} .. {:.3}", i.low, i.high)
            });
            let ppm = |share: Option<f64>| {
                share.map_or("-".to_string(), |share| {
                    format!("{} ppm", format_significant(share * 1e6, 2))
                })
            };
            let test = match &comparison.variant {
                Some(variant) => format!("{} {variant}", comparison.test),
                None => comparison.test.clone(),
            };
            writeln!(
                table,
                "{prefix}  {:<9} {:<5} {:>10} {:<15} {:>11} {:>11} {:>7.3} {:>7.3} {:>19} {:>9} {:>9}",
                test,
                comparison.transport,
                format_size(comparison.size),
                comparison.metric,
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
}

/// `variant` of the summary records of `--baseline interleave` (one per test and size).
pub(crate) const VARIANT_BASELINE_SUMMARY: &str = "baseline_quiver_raw";

/// An issue-3 target for quiver / raw at one point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Target {
    /// The bound on quiver / raw.
    pub(crate) bound: f64,
    /// Whether the ratio must be at most the bound (latency) rather than at least (bandwidth).
    pub(crate) at_most: bool,
}

impl Target {
    /// Whether `ratio` (quiver / raw) meets the target.
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

/// Issue 3's target for quiver's `transport` against `baseline` at this test and size,
/// where one applies: against the raw sockets, 8-byte one-way latency (udp and tcp) within
/// 1.05x of raw and tcp 1 MiB bandwidth at least 0.95x of raw; against quiver's tcp
/// (`--baseline tcp`), udp 1 MiB bandwidth at least tcp's (1.0x).
pub(crate) fn issue3_target(
    test: &str,
    transport: &str,
    baseline: &str,
    size: u64,
) -> Option<Target> {
    match (test, transport, baseline, size) {
        ("pingpong", "udp", "raw-udp", 8) | ("pingpong", "tcp", "raw-tcp", 8) => Some(Target {
            bound: 1.05,
            at_most: true,
        }),
        ("bw", "tcp", "raw-tcp", 0x10_0000) => Some(Target {
            bound: 0.95,
            at_most: false,
        }),
        ("bw", "udp", "tcp", 0x10_0000) => Some(Target {
            bound: 1.0,
            at_most: false,
        }),
        _ => None,
    }
}

/// The ratio's name in a baseline summary: "quiver / raw" against a raw-socket baseline,
/// "udp / tcp" against quiver's tcp.
fn baseline_ratio_name(transport: &str, baseline: &str) -> String {
    if baseline.starts_with("raw-") {
        "quiver / raw".to_string()
    } else {
        format!("{transport} / {baseline}")
    }
}

/// quiver against its raw-socket baseline at one test, variant and size, over the pairs
/// of `--baseline interleave` (ratio = quiver / raw).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BaselineComparison {
    /// Test, quiver's transport, variant and size compared.
    pub(crate) test: String,
    /// See `test`.
    pub(crate) transport: String,
    /// The raw baseline: "raw-udp" or "raw-tcp".
    pub(crate) raw_transport: String,
    /// See `test`.
    pub(crate) variant: Option<String>,
    /// See `test`.
    pub(crate) size: u64,
    /// "latency_us", "bandwidth_MBps" or "rate_Mmsgs".
    pub(crate) metric: &'static str,
    /// A = quiver, B = raw.
    pub(crate) paired: PairedRatio,
    /// Issue 3's target at this point, if one applies.
    pub(crate) target: Option<Target>,
}

/// Pairs the blocks of quiver's `transport` with those of its baseline `raw_transport`
/// (same `round`) per test, variant and size, in first-seen order.
pub(crate) fn baseline_comparisons(
    records: &[Record],
    transport: &str,
    raw_transport: &str,
) -> Vec<BaselineComparison> {
    let key = |record: &Record| {
        (
            record.test.clone(),
            transport.to_string(),
            record.variant.clone(),
            record.size,
        )
    };
    let side = |record: &Record| {
        if record.transport == transport {
            Some(0)
        } else if record.transport == raw_transport {
            Some(1)
        } else {
            None
        }
    };
    group_pairs(records, key, side)
        .into_iter()
        .filter_map(|group| {
            let paired = paired_ratio(&group.pairs())?;
            let (test, transport, variant, size) = group.key;
            Some(BaselineComparison {
                target: issue3_target(&test, &transport, raw_transport, size),
                test,
                transport,
                raw_transport: raw_transport.to_string(),
                variant,
                size,
                metric: group.metric,
                paired,
            })
        })
        .collect()
}

impl BaselineComparison {
    /// Whether a lower quiver / raw is better (latency) rather than a higher one.
    pub(crate) fn lower_is_better(&self) -> bool {
        self.metric == "latency_us"
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

    /// The summary as a JSON record (`variant` = [`VARIANT_BASELINE_SUMMARY`]).
    pub(crate) fn record(&self) -> Record {
        let paired = &self.paired;
        Record {
            test: self.test.clone(),
            transport: self.transport.clone(),
            size: self.size,
            iters: paired.pairs as u64,
            variant: Some(VARIANT_BASELINE_SUMMARY.to_string()),
            summary: Some(serde_json::json!({
                "variant": self.variant,
                "metric": self.metric,
                "raw_transport": self.raw_transport,
                "ratio": baseline_ratio_name(&self.transport, &self.raw_transport),
                "better": if self.lower_is_better() { "lower" } else { "higher" },
                "pairs": paired.pairs,
                "median_quiver": paired.median_a,
                "median_raw": paired.median_b,
                "ratio_of_medians": paired.median_a / paired.median_b,
                "paired_ratios": paired.ratios,
                "paired_ratio_median": paired.median,
                "interval": paired.interval.map(|interval| [interval.low, interval.high]),
                "interval_confidence": paired.interval.map(|interval| interval.confidence),
                "target": self.target.map(Target::text),
                "target_met": self.target_met(),
                "target_shown": self.target_shown(),
            })),
            ..Record::default()
        }
    }
}

impl Report {
    /// Ends a `--baseline interleave` run: per test and size, quiver's and the raw
    /// baseline's medians, quiver / raw as the ratio of the medians and as the median of
    /// the paired ratios with its order-statistics 95% interval, and issue 3's target where
    /// one applies; as a table and as JSON summary records.
    ///
    /// # Errors
    /// If writing either output fails.
    pub(crate) fn baseline_summary(
        &mut self,
        transport: &str,
        raw_transport: &str,
        pairs: u32,
    ) -> io::Result<()> {
        let comparisons = baseline_comparisons(&self.collected, transport, raw_transport);
        for comparison in &comparisons {
            self.json_line(&comparison.record())?;
        }
        let osu = self.style == Style::Osu;
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        let prefix = if osu { "# " } else { "" };
        let against = if raw_transport.starts_with("raw-") {
            format!("its raw-socket baseline {raw_transport}")
        } else {
            format!("quiver {raw_transport} (raw = quiver {raw_transport} in this table)")
        };
        let lines = [
            format!("quiver {transport} against {against}, {pairs} pairs of blocks per point in one launch of the ranks"),
            "  (each pair quiver-raw or raw-quiver in a fixed pseudo-random order, half each way; the same iterations per block)".to_string(),
            "  ratio = quiver / raw. q/raw = median quiver / median raw; paired = median over the pairs of quiver / raw of that".to_string(),
            format!("  pair, with its distribution-free {:.0}% interval (order statistics; needs 6 pairs or more).", DETECT_CONFIDENCE * 100.0),
            "  Latency: lower is better (below 1 = quiver faster); bandwidth and rate: higher is better (above 1 = quiver faster).".to_string(),
            "  target: issue 3's, where one applies; met = the paired median meets it, shown = the whole interval does.".to_string(),
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
        for comparison in &comparisons {
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
                Some(variant) => format!("{} {variant}", comparison.test),
                None => comparison.test.clone(),
            };
            writeln!(
                table,
                "{prefix}  {:<9} {:>10} {:<15} {:>13} {:>11} {:>7.3} {:>7.3} {:>15} {}",
                test,
                format_size(comparison.size),
                comparison.metric,
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
}

fn table_row(record: &Record) -> String {
    let size = format_size(record.size);
    let ratio = record.floor_ratio.map_or("-".to_string(), format_ratio);
    let or_dash =
        |value: Option<f64>, format: fn(f64) -> String| value.map_or("-".to_string(), format);
    match record.test.as_str() {
        "pingpong" => format!(
            "  {:>10} {:>9} {:>11} {:>11} {:>11} {:>9}",
            size,
            record.iters,
            or_dash(record.latency_us, format_microseconds),
            or_dash(record.latency_p99_us, format_microseconds),
            or_dash(record.floor_us, format_microseconds),
            ratio
        ),
        "bw" => format!(
            "  {:>10} {:>9} {:>11} {:>12} {:>9}",
            size,
            record.iters,
            or_dash(record.bandwidth_mbps, format_mbps),
            or_dash(record.floor_mbps, format_mbps),
            ratio
        ),
        "rate" => format!(
            "  {:>10} {:>9} {:>11} {:>13} {:>9}",
            size,
            record.iters * record.window.unwrap_or(1),
            or_dash(record.rate_mmsgs, format_mmsgs),
            or_dash(record.floor_mmsgs, format_mmsgs),
            ratio
        ),
        "bibw" => format!(
            "  {:>10} {:>9} {:>11} {:>12} {:>9}",
            size,
            record.iters,
            or_dash(record.bandwidth_mbps, format_mbps),
            or_dash(record.floor_mbps, format_mbps),
            ratio
        ),
        "loggp" => format!(
            "  {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
            size,
            or_dash(record.latency_us, format_microseconds),
            or_dash(record.o_s_us, format_microseconds),
            or_dash(record.o_r_us, format_microseconds),
            or_dash(record.l_us, format_microseconds),
            or_dash(record.g_us, format_microseconds),
            or_dash(record.big_g_ns_per_byte, format_ratio),
            match (record.variant.as_deref(), record.fit_sizes) {
                (Some("fit"), Some([low, high])) => format!(
                    "<- model: G fitted over {}..{}, r² {}",
                    format_size(low),
                    format_size(high),
                    or_dash(record.fit_r2, format_ratio)
                ),
                (Some("fit"), None) => "<- model (one size: no G)".to_string(),
                _ => String::new(),
            }
        ),
        "pool" => format!(
            "  {:>10} {:>9} {:>8} {:>11} {:>11} {:>11} {:>9}",
            size,
            record.iters,
            record.variant.as_deref().unwrap_or("-"),
            or_dash(record.latency_us, format_microseconds),
            or_dash(record.latency_p99_us, format_microseconds),
            or_dash(record.floor_us, format_microseconds),
            ratio
        ),
        _ => format!("  {size:>10} {:?}", record),
    }
}

/// A `Write` into memory that can be read back while a clone was handed out.
#[derive(Clone, Default)]
struct SharedBuffer(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl SharedBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.borrow()).into_owned()
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One line in the OSU micro-benchmarks' layout (size left, figures right-aligned, two
/// decimals).
fn osu_row(record: &Record) -> String {
    let figure = |value: Option<f64>| value.map_or("-".to_string(), |value| format!("{value:.2}"));
    match record.test.as_str() {
        "pingpong" | "pool" => format!("{:<10}{:>18}", record.size, figure(record.latency_us)),
        "bw" | "bibw" => format!("{:<10}{:>18}", record.size, figure(record.bandwidth_mbps)),
        "rate" => {
            let rate = record.rate_mmsgs.map(|mmsgs| mmsgs * 1e6);
            let mbps = record.rate_mmsgs.map(|mmsgs| mmsgs * record.size as f64);
            format!(
                "{:<10}{:>18}{:>18}",
                record.size,
                figure(mbps),
                figure(rate)
            )
        }
        "loggp" => {
            let size = if record.variant.as_deref() == Some("fit") {
                format!("# model at {}", record.size)
            } else {
                record.size.to_string()
            };
            let g_per_byte = record
                .big_g_ns_per_byte
                .map_or("-".to_string(), |value| format!("{value:.4}"));
            format!(
                "{size:<10}{:>14}{:>14}{:>14}{:>14}{:>13}",
                figure(record.o_s_us),
                figure(record.o_r_us),
                figure(record.l_us),
                figure(record.g_us),
                g_per_byte
            )
        }
        _ => format!("# {} {}", record.test, record.size),
    }
}

fn format_microseconds(microseconds: f64) -> String {
    if microseconds < 100.0 {
        format!("{microseconds:.3}")
    } else {
        format!("{microseconds:.1}")
    }
}

fn format_mbps(mbps: f64) -> String {
    format_significant(mbps, 3)
}

fn format_mmsgs(mmsgs: f64) -> String {
    format_significant(mmsgs, 3)
}

fn format_ratio(ratio: f64) -> String {
    format_significant(ratio, 3)
}

/// At least `digits` significant digits, and no decimals for numbers that have that many
/// before the point (1234, 19.2, 2.30, 0.000331).
fn format_significant(value: f64, digits: i32) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::super::floor::MemcpyFloor;
    use super::*;

    fn floors() -> Floors {
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

    #[test]
    fn pingpong_floor_is_the_handoff_for_small_messages() {
        let mut record = Record {
            test: "pingpong".into(),
            size: 1_000_000,
            latency_us: Some(0.3),
            ..Record::default()
        };
        let mut floors = floors();
        floors.memcpy[0].median_mbps = 1e9; // the copy takes 0.001 µs
        apply_floor(&mut record, &floors);
        assert_eq!(record.floor_us, Some(0.1));
        assert!((record.floor_ratio.expect("ratio") - 3.0).abs() < 1e-9);
    }

    #[test]
    fn pingpong_floor_is_the_copy_time_for_large_messages() {
        let mut record = Record {
            test: "pingpong".into(),
            transport: "shm".into(),
            size: 1_000_000,
            iters: 10,
            latency_us: Some(300.0),
            latency_p99_us: Some(400.0),
            ..Record::default()
        };
        apply_floor(&mut record, &floors());
        // max(0.1 µs, 10^6 bytes / (2 * 10^10 bytes/s) = 50 µs).
        let floor_us = record.floor_us.expect("floor");
        assert!((floor_us - 50.0).abs() < 1e-9);
        assert!((record.floor_ratio.expect("ratio") - 6.0).abs() < 1e-9);
    }

    #[test]
    fn bw_and_rate_ratios() {
        let mut bw = Record {
            test: "bw".into(),
            size: 1_000_000,
            bandwidth_mbps: Some(10_000.0),
            ..Record::default()
        };
        apply_floor(&mut bw, &floors());
        assert_eq!(bw.floor_mbps, Some(20_000.0));
        assert_eq!(bw.floor_ratio, Some(0.5));

        let mut rate = Record {
            test: "rate".into(),
            size: 8,
            rate_mmsgs: Some(5.0),
            ..Record::default()
        };
        apply_floor(&mut rate, &floors());
        assert!((rate.floor_mmsgs.expect("floor") - 10.0).abs() < 1e-9);
        assert!((rate.floor_ratio.expect("ratio") - 0.5).abs() < 1e-9);

        let mut unmatched = Record {
            test: "bw".into(),
            size: 8,
            bandwidth_mbps: Some(1.0),
            ..Record::default()
        };
        apply_floor(&mut unmatched, &floors());
        assert_eq!(unmatched.floor_ratio, None);
    }

    #[test]
    fn json_uses_the_documented_keys_and_round_trips() {
        let record = Record {
            test: "bw".into(),
            transport: "shm".into(),
            size: 65536,
            iters: 200,
            window: Some(64),
            bandwidth_mbps: Some(1234.5),
            floor_mbps: Some(2000.0),
            floor_ratio: Some(0.61725),
            ..Record::default()
        };
        let line = serde_json::to_string(&record).expect("serialize");
        let value: serde_json::Value = serde_json::from_str(&line).expect("parse");
        assert_eq!(value["test"], "bw");
        assert_eq!(value["transport"], "shm");
        assert_eq!(value["size"], 65536);
        assert_eq!(value["bandwidth_MBps"], 1234.5);
        assert_eq!(value["floor_MBps"], 2000.0);
        assert!(value.get("latency_us").is_none());
        let back: Record = serde_json::from_str(&line).expect("deserialize");
        assert_eq!(back, record);
    }

    #[test]
    fn floor_records_cover_handoff_and_every_memcpy_size() {
        let records = floor_records(&floors());
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].floor.as_deref(), Some(FLOOR_HANDOFF));
        assert_eq!(records[0].phase.as_deref(), Some(PHASE_BEFORE));
        assert_eq!(records[0].latency_us, Some(0.1));
        assert_eq!(records[1].floor.as_deref(), Some(FLOOR_MEMCPY));
        assert_eq!(records[1].bandwidth_mbps, Some(20_000.0));
    }

    #[test]
    fn handoff_drift_is_symmetric() {
        let before = floors().handoff;
        let after = HandoffFloor {
            one_way_median_us: 0.3,
            ..before
        };
        assert!((handoff_drift(&before, &after) - 3.0).abs() < 1e-9);
        assert!((handoff_drift(&after, &before) - 3.0).abs() < 1e-9);
        assert_eq!(handoff_drift(&before, &before), 1.0);
    }

    fn detect_point(round: u32, detect: &str, latency_us: f64) -> Record {
        Record {
            test: "pingpong".into(),
            transport: "shm".into(),
            size: 8,
            latency_us: Some(latency_us),
            detect: Some(detect.into()),
            round: Some(round),
            detect_share: Some(if detect == "on" { 2e-6 } else { 0.0 }),
            detect_ns: Some(1000),
            detect_slow_ns: Some(if detect == "on" { 500 } else { 0 }),
            ..Record::default()
        }
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
        // A bw point and a floor record are kept apart or ignored.
        records.push(Record {
            test: "bw".into(),
            transport: "shm".into(),
            size: 8,
            bandwidth_mbps: Some(5.0),
            detect: Some("on".into()),
            round: Some(0),
            ..Record::default()
        });
        records.push(Record {
            test: "floor".into(),
            latency_us: Some(0.1),
            ..Record::default()
        });
        let comparisons = detect_comparisons(&records);
        assert_eq!(comparisons.len(), 1, "{comparisons:?}");
        let comparison = &comparisons[0];
        assert_eq!(comparison.rounds, 6);
        assert_eq!(comparison.metric, "latency_us");
        assert!((comparison.median_off - 3.5).abs() < 1e-12);
        assert!((comparison.paired_median - 1.35).abs() < 1e-12);
        let interval = comparison.interval.expect("6 rounds give a 95% interval");
        assert!((interval.low - 1.1).abs() < 1e-12 && (interval.high - 1.6).abs() < 1e-12);
        assert_eq!(comparison.share_on, Some(2e-6));
        assert_eq!(comparison.share_off, Some(0.0));
        assert_eq!(comparison.share_on_without_slow, Some(1e-6));
        let summary = comparison.record();
        assert_eq!(summary.variant.as_deref(), Some(VARIANT_DETECT_SUMMARY));
        let value = summary.summary.expect("summary");
        assert_eq!(value["rounds"], 6);
        assert_eq!(value["metric"], "latency_us");
        // Two rounds (today's default): medians and ratio, no 95% interval.
        let two = detect_comparisons(&records[..4]);
        assert_eq!(two[0].rounds, 2);
        assert_eq!(two[0].interval, None);
    }

    /// A block of `--baseline interleave`: pingpong latency or bw bandwidth.
    fn baseline_point(test: &str, transport: &str, size: u64, pair: u32, figure: f64) -> Record {
        let mut record = Record {
            test: test.into(),
            transport: transport.into(),
            size,
            iters: 100,
            round: Some(pair),
            ..Record::default()
        };
        match test {
            "pingpong" => record.latency_us = Some(figure),
            _ => record.bandwidth_mbps = Some(figure),
        }
        record
    }

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

    #[test]
    fn baseline_comparisons_pair_quiver_and_raw_blocks_and_judge_the_targets() {
        let mut records = Vec::new();
        for pair in 0..6u32 {
            let drift = 1.0 + 0.5 * f64::from(pair); // the machine slows down pair by pair
                                                     // 8 B latency: quiver 1.02, 1.03, ... 1.07 x raw (paired median 1.045).
            let latency_ratio = 1.02 + 0.01 * f64::from(pair);
            let raw = baseline_point("pingpong", "raw-tcp", 8, pair, 5.0 * drift);
            let quiver = baseline_point("pingpong", "tcp", 8, pair, 5.0 * drift * latency_ratio);
            // Either order within a pair: pairing is by `round`, not position.
            if pair % 3 == 0 {
                records.extend([raw, quiver]);
            } else {
                records.extend([quiver, raw]);
            }
            // 1 MiB bw: quiver 0.97 x raw in every pair.
            records.push(baseline_point(
                "bw",
                "tcp",
                1 << 20,
                pair,
                2000.0 * 0.97 / drift,
            ));
            records.push(baseline_point(
                "bw",
                "raw-tcp",
                1 << 20,
                pair,
                2000.0 / drift,
            ));
            // 64 KiB bw: no target there.
            records.push(baseline_point("bw", "tcp", 65536, pair, 900.0));
            records.push(baseline_point("bw", "raw-tcp", 65536, pair, 1000.0));
        }
        // A record of another transport, and a quiver block without its raw partner.
        records.push(baseline_point("pingpong", "udp", 8, 0, 1.0));
        records.push(baseline_point("pingpong", "tcp", 8, 9, 1.0));
        let comparisons = baseline_comparisons(&records, "tcp", "raw-tcp");
        assert_eq!(comparisons.len(), 3);

        let latency = &comparisons[0];
        assert_eq!(
            (latency.test.as_str(), latency.size),
            ("pingpong", 8),
            "{latency:?}"
        );
        assert_eq!(latency.raw_transport, "raw-tcp");
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
        assert_eq!((bandwidth.test.as_str(), bandwidth.size), ("bw", 1 << 20));
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
        assert!(issue3_target("pingpong", "udp", "raw-udp", 8).is_some());
        assert_eq!(issue3_target("bw", "udp", "raw-udp", 1 << 20), None);
        assert_eq!(issue3_target("pingpong", "tcp", "raw-tcp", 64), None);
        let udp_tcp = issue3_target("bw", "udp", "tcp", 1 << 20).expect("udp against tcp");
        assert!(udp_tcp.met_by(1.0) && !udp_tcp.met_by(0.99));
        assert_eq!(issue3_target("pingpong", "udp", "tcp", 8), None);
        assert_eq!(baseline_ratio_name("udp", "raw-udp"), "quiver / raw");
        assert_eq!(baseline_ratio_name("udp", "tcp"), "udp / tcp");

        // The summary table says which way is better and the verdicts.
        let table = SharedBuffer::default();
        let mut report = Report::new(Some(Box::new(table.clone())), None);
        report.collected = records;
        report.baseline_summary("tcp", "raw-tcp", 6).expect("write");
        let text = table.text();
        assert!(text.contains("lower is better"), "{text}");
        assert!(text.contains("<= 1.05: met yes, shown no"), "{text}");
        assert!(text.contains(">= 0.95: met yes, shown yes"), "{text}");
    }

    #[test]
    fn detection_line_says_looks_time_and_share() {
        let mut record = detect_point(0, "on", 0.2);
        record.detect_looks = Some(12);
        record.detect_ns = Some(3400);
        record.detect_share = Some(5.2e-6);
        assert_eq!(
            detection_line(&record).as_deref(),
            Some(
                "detection on: 12 looks, 3.400 µs in total = 5.2 ppm of the timed run (both ranks)"
            )
        );
        record.detect_slow_looks = Some(1);
        record.detect_slow_ns = Some(60_000);
        assert!(
            detection_line(&record).is_some_and(
                |line| line.ends_with("; 1 of them over 50 µs took 60.000 µs (preempted?)")
            ),
            "{record:?}"
        );
        record.detect_ns = None;
        assert_eq!(detection_line(&record), None);
    }

    #[test]
    fn formats_numbers_for_the_table() {
        assert_eq!(format_ratio(1.234), "1.23");
        assert_eq!(format_ratio(12.34), "12.3");
        assert_eq!(format_ratio(1234.0), "1234");
        assert_eq!(format_ratio(0.000331384), "0.000331");
        assert_eq!(format_ratio(2.3), "2.30");
        assert_eq!(format_mbps(0.7641), "0.764");
        assert_eq!(format_mbps(47322.1), "47322");
        assert_eq!(format_microseconds(0.0912), "0.091");
        assert_eq!(format_microseconds(1234.56), "1234.6");
    }
}
