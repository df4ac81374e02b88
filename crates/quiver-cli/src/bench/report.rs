//! Where the bench's results go: a readable table (or the OSU micro-benchmarks' columns)
//! and/or JSON lines, as they arrive.
//!
//! The [`Report`] prints the floors the parent measured, then every rank result: a table
//! section per test (and transport and variant), a row per point, and a JSON line per
//! point. It knows results only through [`RankResult`], which the bench's
//! [`Record`] implements and the lab's records implement too. A result's JSON line is
//! its serialised record followed by the [`Provenance`] fields (`schema_version`, `host`,
//! `quiver_version`, `commit`), which no record uses for anything else.

use std::io::{self, Write};

use serde::Serialize;

use super::floor::{Floors, HandoffFloor, HANDOFF_ROUND_TRIPS_PER_BATCH};
use super::progress::Progress;
use super::record::{DetectionCost, FloorRecord, Phase, Record};
use super::result::RankResult;
use super::sizes::format_size;
use super::table::{format_mbps, format_microseconds, format_significant};
use crate::provenance::Provenance;

/// A hand-off that moved by more than this factor during the run gets a warning.
pub const HANDOFF_DRIFT_WARNING_FACTOR: f64 = 1.5;

/// How far the hand-off moved between two measurements (larger / smaller, >= 1).
pub fn handoff_drift(before: &HandoffFloor, after: &HandoffFloor) -> f64 {
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
pub enum Style {
    /// quiver's table: every figure with its floor and ratio.
    Table,
    /// The columns the OSU micro-benchmarks print (`# Size  Latency (us)`, ...); floors
    /// and notes as `#` comment lines.
    Osu,
}

/// Where results go: a table (human), JSON lines (machines), either or both.
pub struct Report<R = Record> {
    table: Option<Box<dyn Write>>,
    json: Option<Box<dyn Write>>,
    style: Style,
    /// Test (and transport and variant) whose table section is open (its header printed).
    open_section: Option<String>,
    /// Every rank result so far, in order (for plots and suites).
    collected: Vec<R>,
    /// The progress bar on stderr, when the run has one.
    progress: Option<Progress>,
    /// Variant and settings given to every following result without a variant (a suite
    /// says which path or side its current job measures).
    tag: Option<(String, Vec<String>)>,
    /// The round given to every following result without one (runs the lab repeats).
    round: Option<u32>,
    /// Results of two transports come interleaved (the lab's paired runs): they share one
    /// table section per test and each row names its transport and pair.
    interleaved_transports: bool,
    /// What every JSON line carries besides its record.
    provenance: Provenance,
}

/// A JSON line: the record's own fields, then where it comes from.
#[derive(Serialize)]
struct Stamped<'a, T: Serialize> {
    #[serde(flatten)]
    record: &'a T,
    #[serde(flatten)]
    provenance: &'a Provenance,
}

impl<R: RankResult> Report<R> {
    /// A report printing the table to `table` and JSON lines to `json`, when given.
    pub fn new(table: Option<Box<dyn Write>>, json: Option<Box<dyn Write>>) -> Report<R> {
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
            provenance: Provenance::current(),
        }
    }

    /// One table section per test for both transports of a paired run, each row followed
    /// by its transport and pair (`false`: a section per transport, as usual).
    pub fn set_interleaved_transports(&mut self, interleaved: bool) {
        self.interleaved_transports = interleaved;
    }

    /// Gives every following result `round` (`None`: no round).
    pub fn set_round(&mut self, round: Option<u32>) {
        self.round = round;
    }

    /// Tags every following result that has no variant of its own with `variant` and
    /// `settings` (`None`: stop tagging).
    pub fn set_tag(&mut self, variant: Option<&str>, settings: Vec<String>) {
        self.tag = variant.map(|variant| (variant.to_string(), settings));
    }

    /// Prints the human-readable part in `style`.
    pub fn set_style(&mut self, style: Style) {
        self.style = style;
    }

    /// The style of the human-readable part.
    pub fn style(&self) -> Style {
        self.style
    }

    /// Shows a progress bar over `points` points (more may be added with `add_points`).
    pub fn set_progress(&mut self, progress: Progress) {
        self.progress = Some(progress);
    }

    /// Adds points to the progress bar's total.
    pub fn add_points(&mut self, points: usize) {
        if let Some(progress) = self.progress.as_mut() {
            progress.add_points(points);
        }
    }

    /// Removes the progress bar from the screen.
    pub fn clear_progress(&mut self) {
        if let Some(progress) = self.progress.as_mut() {
            progress.clear();
        }
    }

    /// Stops printing the table (a suite prints its own summary instead).
    pub fn take_table(&mut self) -> Option<Box<dyn Write>> {
        self.table.take()
    }

    /// Gives back the table taken with [`Report::take_table`].
    pub fn restore_table(&mut self, table: Option<Box<dyn Write>>) {
        self.table = table;
    }

    /// The table output, when there is one (for a summary after the results).
    pub fn table(&mut self) -> Option<&mut Box<dyn Write>> {
        self.table.as_mut()
    }

    /// Every rank result reported so far.
    pub fn collected(&self) -> &[R] {
        &self.collected
    }

    /// Writes a summary to the JSON output only.
    ///
    /// # Errors
    /// If writing fails.
    pub fn json_only(&mut self, summary: &impl Serialize) -> io::Result<()> {
        self.json_line(summary)
    }

    /// Prints the run's first lines: what is measured, where, and the units.
    ///
    /// # Errors
    /// If writing the table fails.
    pub fn preamble(&mut self, transport: &str, cpus: [usize; 2]) -> io::Result<()> {
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

    /// Prints `lines` in the table as they are (as `# ` comments in the OSU layout): what a
    /// run started by a launcher says instead of the preamble and the floors.
    ///
    /// # Errors
    /// If writing the table fails.
    pub fn lines(&mut self, lines: &[String]) -> io::Result<()> {
        if self.style == Style::Osu {
            return self.as_comments(|report| report.lines_table(lines));
        }
        self.lines_table(lines)
    }

    fn lines_table(&mut self, lines: &[String]) -> io::Result<()> {
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        for line in lines {
            writeln!(table, "{line}")?;
        }
        table.flush()
    }

    /// Prints the floor section and the floor JSON records.
    ///
    /// # Errors
    /// If writing either output fails.
    pub fn floors(&mut self, floors: &Floors) -> io::Result<()> {
        if self.style == Style::Osu {
            return self.as_comments(|report| report.floors_table(floors));
        }
        self.floors_table(floors)
    }

    fn floors_table(&mut self, floors: &Floors) -> io::Result<()> {
        for record in FloorRecord::all(floors) {
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
    pub fn handoff_after(&mut self, before: &HandoffFloor, after: &HandoffFloor) -> io::Result<()> {
        self.clear_progress();
        if self.style == Style::Osu {
            return self.as_comments(|report| report.handoff_after_table(before, after));
        }
        self.handoff_after_table(before, after)
    }

    /// Runs `print` with the table going to a buffer, then writes the buffer's lines as
    /// `# ` comments (the OSU layout keeps only data rows uncommented).
    fn as_comments(
        &mut self,
        print: impl FnOnce(&mut Report<R>) -> io::Result<()>,
    ) -> io::Result<()> {
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
        self.json_line(&FloorRecord::handoff(after, Phase::AfterRanks))?;
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
    pub fn result(&mut self, mut record: R) -> io::Result<()> {
        if let Some((variant, settings)) = &self.tag {
            let labels = record.labels_mut();
            if labels.variant.is_none() {
                labels.variant = Some(variant.clone());
                if !settings.is_empty() {
                    labels.settings = Some(settings.clone());
                }
            }
        }
        if let Some(round) = self.round {
            record.labels_mut().round.get_or_insert(round);
        }
        if let Some(progress) = self.progress.as_mut() {
            let what = format!(
                "{} {} {}",
                record.transport(),
                record.test_name(),
                format_size(record.size())
            );
            progress.point_done(&what);
        }
        self.json_line(&record)?;
        let written = self.table_lines(&record);
        self.collected.push(record);
        written
    }

    /// The table rows of one result (and its section's header when it opens one).
    fn table_lines(&mut self, record: &R) -> io::Result<()> {
        if self.table.is_none() {
            return Ok(());
        }
        // Variants of a suite's jobs get a section each; a test's own variants a column.
        let variant = match (record.variant_in_column(), &record.labels().variant) {
            (false, Some(variant)) => variant.as_str(),
            _ => "",
        };
        let transport = if self.interleaved_transports {
            "interleaved".to_string()
        } else {
            record.transport().to_string()
        };
        let section = format!("{} {transport} {variant}", record.test_name());
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
            Style::Table => record.table_row(),
            Style::Osu => record.osu_row(),
        };
        if self.interleaved_transports {
            let pair = record
                .labels()
                .round
                .map_or(String::new(), |round| format!(" pair {round}"));
            match style {
                Style::Table => row.push_str(&format!(" {:>8}{pair}", record.transport())),
                Style::Osu => row.push_str(&format!("  # {}{pair}", record.transport())),
            }
        }
        self.clear_progress();
        if let Some(table) = self.table.as_mut() {
            writeln!(table, "{row}")?;
            if let Some(line) = record
                .detection()
                .and_then(|cost| detection_line(cost, record.detection_covers_warmup()))
            {
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
    fn osu_header(&mut self, record: &R) -> io::Result<()> {
        let interleaved = self.interleaved_transports;
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        let transport = if interleaved {
            "quiver and raw-baseline blocks interleaved".to_string()
        } else {
            record.transport().to_string()
        };
        let variant = record
            .labels()
            .variant
            .as_deref()
            .map_or(String::new(), |variant| format!(", {variant}"));
        let (title, columns) = record.osu_header();
        writeln!(table)?;
        writeln!(table, "# quiver bench {title} ({transport}{variant})")?;
        writeln!(table, "{columns}")?;
        Ok(())
    }

    fn section_header(&mut self, record: &R) -> io::Result<()> {
        let interleaved = self.interleaved_transports;
        let Some(table) = self.table.as_mut() else {
            return Ok(());
        };
        writeln!(table)?;
        let labels = record.labels();
        if let (Some(variant), false) = (&labels.variant, record.variant_in_column()) {
            writeln!(
                table,
                "[{} {variant}: {}]",
                record.transport(),
                labels
                    .settings
                    .as_ref()
                    .map_or(String::new(), |settings| settings.join(" "))
            )?;
        }
        for line in record.table_header() {
            writeln!(table, "{line}")?;
        }
        if interleaved {
            writeln!(
                table,
                "  (quiver and raw-baseline blocks in the order they ran; the last columns name the transport and the pair)"
            )?;
        }
        Ok(())
    }

    fn json_line<T: Serialize>(&mut self, record: &T) -> io::Result<()> {
        let Some(json) = self.json.as_mut() else {
            return Ok(());
        };
        let stamped = Stamped {
            record,
            provenance: &self.provenance,
        };
        serde_json::to_writer(&mut *json, &stamped)?;
        writeln!(json)?;
        json.flush()
    }
}

/// "detection on: N looks, X µs in total = Y ppm of the timed run (both ranks)" (None for a
/// run of no measurable duration: no share).
pub fn detection_line(cost: &DetectionCost, covers_warmup: bool) -> Option<String> {
    let share = cost.detect_share?;
    let mode = match cost.detect {
        super::record::DetectMode::On => "on",
        super::record::DetectMode::Off => "off",
    };
    let run = if covers_warmup {
        "the point (warm-up included)"
    } else {
        "the timed run"
    };
    let slow = if cost.detect_slow_looks > 0 {
        format!(
            "; {} of them over 50 µs took {} µs (preempted?)",
            cost.detect_slow_looks,
            format_microseconds(cost.detect_slow_ns as f64 / 1e3)
        )
    } else {
        String::new()
    };
    Some(format!(
        "detection {mode}: {} looks, {} µs in total = {} ppm of {run} (both ranks){slow}",
        cost.detect_looks,
        format_microseconds(cost.detect_ns as f64 / 1e3),
        format_significant(share * 1e6, 2)
    ))
}

/// A `Write` into memory that can be read back while a clone was handed out.
#[derive(Clone, Default)]
pub struct SharedBuffer(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl SharedBuffer {
    /// Everything written so far, as text.
    pub fn text(&self) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::plan::Transport;
    use super::super::record::{DetectMode, Labels, LatencyPoint};
    use super::*;

    fn handoff(one_way_median_us: f64) -> HandoffFloor {
        HandoffFloor {
            cpu_a: 0,
            cpu_b: 1,
            one_way_median_us,
            one_way_p99_us: 0.2,
            round_trips: 1000,
        }
    }

    #[test]
    fn handoff_drift_is_symmetric() {
        let before = handoff(0.1);
        let after = handoff(0.3);
        assert!((handoff_drift(&before, &after) - 3.0).abs() < 1e-9);
        assert!((handoff_drift(&after, &before) - 3.0).abs() < 1e-9);
        assert_eq!(handoff_drift(&before, &before), 1.0);
    }

    #[test]
    fn detection_line_says_looks_time_and_share() {
        let mut cost = DetectionCost {
            detect: DetectMode::On,
            detect_looks: 12,
            detect_ns: 3400,
            detect_share: Some(5.2e-6),
            detect_slow_looks: 0,
            detect_slow_ns: 0,
        };
        assert_eq!(
            detection_line(&cost, false).as_deref(),
            Some(
                "detection on: 12 looks, 3.400 µs in total = 5.2 ppm of the timed run (both ranks)"
            )
        );
        cost.detect_slow_looks = 1;
        cost.detect_slow_ns = 60_000;
        assert!(
            detection_line(&cost, false).is_some_and(
                |line| line.ends_with("; 1 of them over 50 µs took 60.000 µs (preempted?)")
            ),
            "{cost:?}"
        );
        cost.detect_share = None;
        assert_eq!(detection_line(&cost, false), None);
    }

    #[test]
    fn results_are_tagged_tabled_and_written_as_json() {
        let table = SharedBuffer::default();
        let json = SharedBuffer::default();
        let mut report: Report =
            Report::new(Some(Box::new(table.clone())), Some(Box::new(json.clone())));
        report.set_tag(Some("copy"), vec!["QUIVER_SHM_EAGER_MAX=4095".to_string()]);
        report.set_round(Some(2));
        let point = LatencyPoint {
            transport: Transport::Shm,
            size: 8,
            iters: 100,
            latency_us: 0.25,
            latency_p99_us: 0.5,
            floor_us: Some(0.1),
            floor_ratio: Some(2.5),
            cpus: Some([0, 1]),
            labels: Labels::default(),
            detection: None,
        };
        report.result(Record::Pingpong(point)).expect("write");
        let collected = report.collected();
        assert_eq!(collected[0].labels().variant.as_deref(), Some("copy"));
        assert_eq!(collected[0].labels().round, Some(2));
        let text = table.text();
        assert!(
            text.contains("[shm copy: QUIVER_SHM_EAGER_MAX=4095]"),
            "{text}"
        );
        assert!(text.contains("pingpong: one-way latency"), "{text}");
        let value: serde_json::Value =
            serde_json::from_str(json.text().trim()).expect("one JSON line");
        assert_eq!(value["variant"], "copy");
        assert_eq!(value["settings"][0], "QUIVER_SHM_EAGER_MAX=4095");
        assert_eq!(value["round"], 2);
        assert_eq!(value["test"], "pingpong");
        assert_eq!(value["latency_us"], 0.25);
        assert_eq!(
            value["schema_version"],
            crate::provenance::RECORD_SCHEMA_VERSION
        );
        assert_eq!(value["quiver_version"], env!("CARGO_PKG_VERSION"));
        assert!(value["host"].as_str().is_some_and(|host| !host.is_empty()));
        assert!(value["commit"].is_string());
        // The stamped line still reads back as the record it was.
        let back: Record = serde_json::from_value(value).expect("a record");
        assert_eq!(back.size(), 8);
    }
}
