//! The bench's suites: tests that start several rank jobs and summarise them.
//!
//! - **`compare`**: every transport (shm, udp, tcp) and both raw-socket baselines
//!   (raw-udp, raw-tcp), one job each running pingpong, bw, rate and loggp at 8 B, 1 KiB,
//!   64 KiB and 1 MiB, next to the floors measured once in the same run; one table, in the
//!   spirit of the SC98 comparison of communication layers, every figure with its ratio to
//!   its floor (see [`compare`] for which floor).
//! - **`crossover`**: for each transport the size where its copy path and its zero-copy
//!   path cross. Each transport has one switch point (a `QUIVER_*` threshold); the suite
//!   runs pingpong and bw twice over the same sizes, once with the threshold forcing the
//!   copy path at every size and once forcing the zero-copy path, and finds where the
//!   zero-copy path starts to win ([`stats::crossing`]) and which threshold costs least
//!   over the sweep ([`best_threshold`]). For shm this is also eager vs rendezvous.
//! - **`crossover --compare-profile`**: defaults against this machine's profile (written by
//!   `quiver tune`), same sizes, to show tuned thresholds are never worse.
//!
//! Every job runs with `QUIVER_PROFILE=off` plus its own `--set` settings, so a profile
//! on the machine never changes what a "default" run measures.

use std::io::Write;
use std::time::Duration;

use super::floor::{self, Floors};
use super::plan::{Plan, TestName, Transport};
use super::ranks;
use super::report::{Record, Report};
use super::sizes::format_size;
use super::stats::{self, Crossing};

/// Sizes of the compare table's columns: latency at the first two, bandwidth at the last two.
pub(crate) const COMPARE_SIZES_BYTES: [u64; 4] = [8, 1 << 10, 64 << 10, 1 << 20];
/// Transports and baselines compared, in the table's order.
pub(crate) const COMPARE_TRANSPORTS: [Transport; 5] = [
    Transport::Shm,
    Transport::Udp,
    Transport::Tcp,
    Transport::RawUdp,
    Transport::RawTcp,
];
/// Iteration effort of a default compare (percent of the bench's defaults): the whole
/// suite stays under five minutes on the 2-core machines.
pub(crate) const COMPARE_EFFORT_PERCENT: u64 = 15;
/// Effort of the suites with `--quick` (CI, smoke runs).
pub(crate) const QUICK_EFFORT_PERCENT: u64 = 1;
/// Effort of a default crossover measurement (and `quiver tune`).
pub(crate) const CROSSOVER_EFFORT_PERCENT: u64 = 10;
/// A tuned figure more than this factor worse than the default's counts as worse (the
/// run-to-run spread of these shared VMs is of this order).
pub(crate) const NOISE_TOLERANCE: f64 = 1.10;
/// Rank jobs per variant in crossover, `quiver tune` and `--compare-profile`: the variants
/// alternate (a, b, a, b, ...) and each figure is the median over the rounds. The figures
/// of one launch of the ranks move by up to 3x between launches on these VMs (tcp
/// bandwidth is bimodal), so one job per variant can pick the wrong threshold.
pub(crate) const CROSSOVER_ROUNDS: usize = 3;
/// How far the cross-core hand-off may move from the suite's floor before a round of
/// alternating jobs is measured again. On these VMs the host sometimes places the two
/// vCPUs far apart (hand-off 0.05 -> 0.23 µs), and the ring paths slow down 3-4x while the
/// system-call paths barely move: a round straddling such a move compares two machines.
pub(crate) const PLACEMENT_TOLERANCE: f64 = 1.5;
/// Attempts at one round before it is kept even though the hand-off moved (with a warning).
pub(crate) const ROUND_ATTEMPTS: usize = 4;

/// How a suite runs its jobs.
pub(crate) struct SuiteRun<'a> {
    /// The two CPUs of the ranks.
    pub(crate) cpus: [usize; 2],
    /// Deadline of each job.
    pub(crate) timeout: Duration,
    /// Percent of the default iteration counts.
    pub(crate) effort_percent: u64,
    /// Outstanding sends per window.
    pub(crate) window: u64,
    /// Where results go (its table is taken: suites print summaries).
    pub(crate) report: &'a mut Report,
    /// The floors of this run.
    pub(crate) floors: &'a Floors,
    /// Jobs per variant where a suite compares variants (see [`CROSSOVER_ROUNDS`]).
    pub(crate) rounds: usize,
}

impl SuiteRun<'_> {
    /// Whether the cross-core hand-off, measured now, is within [`PLACEMENT_TOLERANCE`] of
    /// the one in the suite's floors (an error measuring it counts as steady).
    fn placement_steady(&self) -> bool {
        let reference = self.floors.handoff.one_way_median_us;
        match floor::measure_handoff(self.cpus[0], self.cpus[1]) {
            Ok(now) => {
                let ratio = now.one_way_median_us / reference.max(1e-9);
                (1.0 / PLACEMENT_TOLERANCE..=PLACEMENT_TOLERANCE).contains(&ratio)
            }
            Err(_) => true,
        }
    }

    /// Runs `jobs` (one round of alternating variants) until the hand-off was where the
    /// suite's floors put it both before and after the round, at most [`ROUND_ATTEMPTS`]
    /// times; returns the kept round's results.
    fn steady_round<T>(
        &mut self,
        what: &str,
        mut jobs: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut attempt = 1;
        loop {
            let before = self.placement_steady();
            let result = jobs(self)?;
            let steady = before && self.placement_steady();
            if steady || attempt >= ROUND_ATTEMPTS {
                if !steady {
                    eprintln!(
                        "quiver bench: {what}: the cross-core hand-off moved away from {:.3} µs in each of {attempt} attempts; keeping the last (its figures mix two CPU placements)",
                        self.floors.handoff.one_way_median_us
                    );
                }
                return Ok(result);
            }
            eprintln!(
                "quiver bench: {what}: the cross-core hand-off moved away from {:.3} µs (the host moved the vCPUs); measuring this round again",
                self.floors.handoff.one_way_median_us
            );
            attempt += 1;
        }
    }

    /// Runs one job; returns its records (also reported as JSON as they arrive).
    fn job(
        &mut self,
        transport: Transport,
        tests: Vec<TestName>,
        sizes: &[u64],
        settings: &[(String, String)],
    ) -> Result<Vec<Record>, String> {
        let mut all_settings = vec![("QUIVER_PROFILE".to_string(), "off".to_string())];
        all_settings.extend(settings.iter().cloned());
        let plan = Plan {
            tests,
            transport,
            sizes: sizes.to_vec(),
            iters: None,
            window: self.window,
            netns: None,
            addrs: None,
            settings: all_settings,
            effort_percent: self.effort_percent,
            interleave: None,
        };
        self.report.add_points(plan.rank_record_count());
        let first = self.report.collected().len();
        ranks::run(&plan, self.cpus, self.floors, self.report, self.timeout)?;
        Ok(self.report.collected()[first..].to_vec())
    }
}

/// Floors a suite needs: hand-off, memcpy and the extended floors at `sizes`.
pub(crate) fn measure_floors(cpus: [usize; 2], sizes: &[u64]) -> Result<Floors, String> {
    let mut floors = floor::measure(cpus[0], cpus[1], sizes)
        .map_err(|error| format!("measuring the floors: {error}"))?;
    floors.extended = Some(
        floor::measure_extended(cpus[0], cpus[1], sizes)
            .map_err(|error| format!("measuring the extended floors: {error}"))?,
    );
    Ok(floors)
}

/// One transport's results in the compare table (a failed job keeps its error).
struct CompareColumn {
    transport: Transport,
    records: Result<Vec<Record>, String>,
}

/// Runs `compare` and prints its table to `table` (when given).
pub(crate) fn compare(run: &mut SuiteRun<'_>, table: Option<&mut dyn Write>) -> Result<(), String> {
    let mut columns = Vec::new();
    for transport in COMPARE_TRANSPORTS {
        let records = run.job(
            transport,
            vec![
                TestName::Pingpong,
                TestName::Bw,
                TestName::Rate,
                TestName::Loggp,
            ],
            &COMPARE_SIZES_BYTES,
            &[],
        );
        if let Err(error) = &records {
            eprintln!(
                "quiver bench compare: {} failed; its column is left empty:\n{error}",
                transport.as_str()
            );
        }
        columns.push(CompareColumn { transport, records });
    }
    run.report.clear_progress();
    if let Some(table) = table {
        print_compare(table, &columns, run.floors)
            .map_err(|error| format!("writing the table: {error}"))?;
    }
    if columns.iter().all(|column| column.records.is_err()) {
        return Err("every transport failed".to_string());
    }
    Ok(())
}

/// One row of the compare table: a label, how to read a column's figure, and its floor.
struct CompareRow {
    label: &'static str,
    figure: fn(&[Record]) -> Option<f64>,
    /// The floor the figure is divided by (same unit).
    floor: fn(&Floors) -> Option<f64>,
    floor_name: &'static str,
}

fn point<'a>(records: &'a [Record], test: &str, size: u64) -> Option<&'a Record> {
    records
        .iter()
        .find(|record| record.test == test && record.size == size && record.variant.is_none())
}

fn loggp_fit(records: &[Record]) -> Option<&Record> {
    records
        .iter()
        .find(|record| record.test == "loggp" && record.variant.as_deref() == Some("fit"))
}

fn syscall_us(floors: &Floors) -> Option<f64> {
    floors
        .extended
        .as_ref()
        .map(|extended| extended.syscall.median_us)
}

fn memcpy_mbps(floors: &Floors, size: u64) -> Option<f64> {
    floors.memcpy_at(size).map(|memcpy| memcpy.median_mbps)
}

fn latency_floor_us(floors: &Floors, size: u64) -> Option<f64> {
    let copy_us = memcpy_mbps(floors, size).map_or(0.0, |mbps| size as f64 / mbps);
    Some(floors.handoff.one_way_median_us.max(copy_us))
}

const COMPARE_ROWS: [CompareRow; 10] = [
    CompareRow {
        label: "8 B one-way latency (µs)",
        figure: |r| point(r, "pingpong", 8).and_then(|p| p.latency_us),
        floor: |f| latency_floor_us(f, 8),
        floor_name: "hand-off",
    },
    CompareRow {
        label: "1 KiB one-way latency (µs)",
        figure: |r| point(r, "pingpong", 1024).and_then(|p| p.latency_us),
        floor: |f| latency_floor_us(f, 1024),
        floor_name: "max(hand-off, memcpy)",
    },
    CompareRow {
        label: "64 KiB bandwidth (MB/s)",
        figure: |r| point(r, "bw", 64 << 10).and_then(|p| p.bandwidth_mbps),
        floor: |f| memcpy_mbps(f, 64 << 10),
        floor_name: "memcpy",
    },
    CompareRow {
        label: "1 MiB bandwidth (MB/s)",
        figure: |r| point(r, "bw", 1 << 20).and_then(|p| p.bandwidth_mbps),
        floor: |f| memcpy_mbps(f, 1 << 20),
        floor_name: "memcpy",
    },
    CompareRow {
        label: "8 B message rate (Mmsg/s)",
        figure: |r| point(r, "rate", 8).and_then(|p| p.rate_mmsgs),
        floor: |f| Some(1.0 / f.handoff.one_way_median_us),
        floor_name: "1 / hand-off",
    },
    CompareRow {
        label: "o_s, 8 B (µs)",
        figure: |r| loggp_fit(r).and_then(|p| p.o_s_us),
        floor: syscall_us,
        floor_name: "syscall",
    },
    CompareRow {
        label: "o_r, 8 B (µs)",
        figure: |r| loggp_fit(r).and_then(|p| p.o_r_us),
        floor: syscall_us,
        floor_name: "syscall",
    },
    CompareRow {
        label: "L, 8 B (µs)",
        figure: |r| loggp_fit(r).and_then(|p| p.l_us),
        floor: |f| Some(f.handoff.one_way_median_us),
        floor_name: "hand-off",
    },
    CompareRow {
        label: "g, 8 B (µs)",
        figure: |r| loggp_fit(r).and_then(|p| p.g_us),
        floor: |f| Some(f.handoff.one_way_median_us),
        floor_name: "hand-off",
    },
    CompareRow {
        label: "G, 64 KiB..1 MiB (ns/B)",
        figure: |r| loggp_fit(r).and_then(|p| p.big_g_ns_per_byte),
        // ns per byte of one memcpy: 1000 / (bytes per µs).
        floor: |f| memcpy_mbps(f, 1 << 20).map(|mbps| 1e3 / mbps),
        floor_name: "memcpy 1 MiB",
    },
];

/// `value (ratio x)` for a compare cell.
fn compare_cell(value: Option<f64>, floor: Option<f64>) -> String {
    match (value, floor) {
        (Some(value), Some(floor)) if floor > 0.0 => {
            format!("{} ({}x)", significant(value), significant(value / floor))
        }
        (Some(value), _) => significant(value),
        (None, _) => "-".to_string(),
    }
}

fn significant(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

fn print_compare(
    table: &mut dyn Write,
    columns: &[CompareColumn],
    floors: &Floors,
) -> std::io::Result<()> {
    writeln!(table)?;
    writeln!(
        table,
        "compare: every transport and baseline, two pinned busy-polling ranks on CPU {} and {}",
        floors.handoff.cpu_a, floors.handoff.cpu_b
    )?;
    writeln!(
        table,
        "  each cell: figure (figure / floor); floors measured in this run (right). Latencies and"
    )?;
    writeln!(
        table,
        "  o_s/o_r/L/g: lower is better, x >= 1 expected (o_s/o_r below a syscall = no kernel entry);"
    )?;
    writeln!(
        table,
        "  bandwidth and rate: higher is better, x <= 1 expected. G = per-byte gap fitted over 64 KiB..1 MiB."
    )?;
    let label_width = 27;
    let cell_width = 19;
    write!(table, "{:<label_width$}", "")?;
    for column in columns {
        write!(table, "{:>cell_width$}", column.transport.as_str())?;
    }
    writeln!(table, "  {:>9} floor", "")?;
    for row in &COMPARE_ROWS {
        write!(table, "{:<label_width$}", row.label)?;
        let floor = (row.floor)(floors);
        for column in columns {
            let cell = match &column.records {
                Ok(records) => compare_cell((row.figure)(records), floor),
                Err(_) => "failed".to_string(),
            };
            write!(table, "{cell:>cell_width$}")?;
        }
        writeln!(
            table,
            "  {:>9} {}",
            floor.map_or("-".to_string(), significant),
            row.floor_name
        )?;
    }
    if let Some(extended) = &floors.extended {
        writeln!(
            table,
            "  other floors: system call {} µs, cross-core wake-up {} µs (eventfd+poll) / {} µs (futex), \
             process_vm_readv {} MB/s at 1 MiB",
            significant(extended.syscall.median_us),
            significant(extended.wakeup_eventfd.median_us),
            significant(extended.wakeup_futex.median_us),
            extended
                .cma
                .iter()
                .find(|cma| cma.size_bytes == 1 << 20)
                .map_or("-".to_string(), |cma| significant(cma.median_mbps))
        )?;
    }
    table.flush()
}

/// One transport's switch point between its copy path and its zero-copy path.
#[derive(Debug, Clone)]
pub(crate) struct Knob {
    /// The transport.
    pub(crate) transport: Transport,
    /// The `QUIVER_*` setting.
    pub(crate) setting: &'static str,
    /// What the copy path and the zero-copy path are.
    pub(crate) paths: &'static str,
    /// Sizes measured, ascending.
    pub(crate) sizes: Vec<u64>,
    /// The setting's value forcing the copy path at every size of the sweep.
    pub(crate) copy_value: u64,
    /// The setting's value forcing the zero-copy path at every size of the sweep.
    pub(crate) zero_copy_value: u64,
    /// The built-in default.
    pub(crate) default_value: u64,
    /// The setting's value that copies messages up to `largest_copied` bytes (None: none
    /// of the sweep) and sends larger ones the zero-copy way.
    pub(crate) value_for: fn(Option<u64>) -> u64,
    /// Whether a message of `size` bytes takes the copy path when the setting is `value`.
    pub(crate) copies: fn(u64, u64) -> bool,
}

impl Knob {
    /// The largest size of the sweep the default copies (None: none).
    fn default_candidate(&self) -> Option<u64> {
        self.sizes
            .iter()
            .copied()
            .filter(|&size| (self.copies)(size, self.default_value))
            .max()
    }
}

/// A measured threshold replaces the default only when it lowers the sweep's total cost
/// ([`threshold_cost`]) by more than this fraction: the run-to-run noise of one size must
/// not move a switch point.
pub(crate) const TUNING_MARGIN: f64 = 0.02;

/// The three switch points, one per quiver transport.
pub(crate) fn knobs() -> Vec<Knob> {
    let defaults = quiver::Config::default();
    vec![
        Knob {
            transport: Transport::Shm,
            setting: "QUIVER_SHM_EAGER_MAX",
            paths: "copy = eager, two copies through the ring; zero-copy = rendezvous, one process_vm_readv/writev copy",
            // Eager is capped at a quarter of the (default 1 MiB) ring.
            sizes: vec![4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10],
            copy_value: 256 << 10,
            zero_copy_value: (4 << 10) - 1,
            default_value: defaults.shm_eager_max,
            value_for: |largest| largest.unwrap_or((4 << 10) - 1),
            copies: |size, value| size <= value,
        },
        Knob {
            transport: Transport::Tcp,
            setting: "QUIVER_TCP_STAGING_BYTES",
            paths: "copy = staged in the receive buffer and copied out; zero-copy = read straight into the destination",
            sizes: vec![8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20],
            copy_value: 2 << 20,
            zero_copy_value: 4 << 10,
            default_value: defaults.tcp_staging_bytes as u64,
            // A message is staged when its 16-byte header and payload fit.
            value_for: |largest| largest.map_or(4 << 10, |size| (size + 16).max(4 << 10)),
            copies: |size, value| size + 16 <= value,
        },
        Knob {
            transport: Transport::Udp,
            setting: "QUIVER_UDP_IN_PLACE_MIN",
            paths: "copy = payload copied next to its header (GSO runs); zero-copy = sent from the send buffer in place",
            sizes: vec![512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10],
            copy_value: 1 << 30,
            zero_copy_value: 0,
            default_value: defaults.udp_in_place_min as u64,
            value_for: |largest| largest.map_or(0, |size| size + 1),
            copies: |size, value| size < value,
        },
    ]
}

/// One size of a crossover sweep: (size, [copy latency µs, zero-copy latency µs, copy
/// MB/s, zero-copy MB/s]).
pub(crate) type CrossoverPoint = (u64, [Option<f64>; 4]);

/// What crossover measured for one knob.
#[derive(Debug, Clone)]
pub(crate) struct CrossoverResult {
    /// The knob measured.
    pub(crate) knob: Knob,
    /// Per size: (copy latency µs, zero-copy latency µs, copy MB/s, zero-copy MB/s).
    pub(crate) points: Vec<(u64, [Option<f64>; 4])>,
    /// Where zero-copy starts to win on latency, and on bandwidth.
    pub(crate) latency_crossing: Crossing,
    /// Where zero-copy starts to win on bandwidth.
    pub(crate) bandwidth_crossing: Crossing,
    /// The threshold value with the least cost over the sweep ([`best_threshold`]).
    pub(crate) best_value: u64,
    /// The cross-core hand-off (µs) the rounds were measured at (0 when not known).
    pub(crate) handoff_us: f64,
}

/// Measures every knob whose transport is in `transports`.
pub(crate) fn measure_crossovers(
    run: &mut SuiteRun<'_>,
    transports: &[Transport],
) -> Result<Vec<CrossoverResult>, String> {
    let mut results = Vec::new();
    for knob in knobs() {
        if !transports.contains(&knob.transport) {
            continue;
        }
        let mut by_path: [Vec<Vec<Record>>; 2] = [Vec::new(), Vec::new()];
        for round in 1..=run.rounds.max(1) {
            let what = format!("crossover {} round {round}", knob.transport.as_str());
            let [copy, zero_copy] = run.steady_round(&what, |run| {
                let mut pair = [Vec::new(), Vec::new()];
                for (path, (variant, value)) in [
                    ("copy", knob.copy_value),
                    ("zero_copy", knob.zero_copy_value),
                ]
                .into_iter()
                .enumerate()
                {
                    let settings = vec![(knob.setting.to_string(), value.to_string())];
                    run.report
                        .set_tag(Some(variant), vec![format!("{}={value}", knob.setting)]);
                    let records = run
                        .job(
                            knob.transport,
                            vec![TestName::Pingpong, TestName::Bw],
                            &knob.sizes,
                            &settings,
                        )
                        .map_err(|error| {
                            format!("{} {variant} path: {error}", knob.transport.as_str())
                        });
                    run.report.set_tag(None, Vec::new());
                    pair[path] = records?;
                }
                Ok(pair)
            })?;
            by_path[0].push(copy);
            by_path[1].push(zero_copy);
        }
        let mut result = summarise_crossover(knob, &by_path[0], &by_path[1]);
        result.handoff_us = run.floors.handoff.one_way_median_us;
        run.report
            .json_only(&crossover_record(&result))
            .map_err(|error| format!("writing JSON: {error}"))?;
        results.push(result);
    }
    run.report.clear_progress();
    Ok(results)
}

/// One variant's records over several rounds, merged: each point's latency and bandwidth
/// are the medians of that point over the rounds that measured it (the other fields are
/// the first round's). Points are those of the first round.
pub(crate) fn median_records(rounds: &[Vec<Record>]) -> Vec<Record> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let median_of = |values: Vec<f64>| -> Option<f64> {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        stats::median(&values)
    };
    first
        .iter()
        .map(|template| {
            let same: Vec<&Record> = rounds
                .iter()
                .filter_map(|round| {
                    round.iter().find(|record| {
                        record.test == template.test
                            && record.size == template.size
                            && record.transport == template.transport
                    })
                })
                .collect();
            let mut merged = template.clone();
            merged.latency_us = median_of(same.iter().filter_map(|r| r.latency_us).collect());
            merged.bandwidth_mbps =
                median_of(same.iter().filter_map(|r| r.bandwidth_mbps).collect());
            merged
        })
        .collect()
}

fn figure(records: &[Record], test: &str, size: u64) -> Option<f64> {
    let record = records
        .iter()
        .find(|record| record.test == test && record.size == size)?;
    match test {
        "pingpong" => record.latency_us,
        _ => record.bandwidth_mbps,
    }
}

/// Reads both paths' records, one list per round (round r of copy pairs with round r of
/// zero-copy), into a result. The points shown are the per-point medians over the rounds;
/// the threshold is [`safe_threshold`] over the rounds and the medians.
pub(crate) fn summarise_crossover(
    knob: Knob,
    copy_rounds: &[Vec<Record>],
    zero_copy_rounds: &[Vec<Record>],
) -> CrossoverResult {
    let points = crossover_points(
        &knob,
        &median_records(copy_rounds),
        &median_records(zero_copy_rounds),
    );
    let xs: Vec<f64> = points.iter().map(|(size, _)| *size as f64).collect();
    let column = |index: usize, invert: bool| -> Vec<f64> {
        points
            .iter()
            .map(|(_, figures)| {
                let value = figures[index].unwrap_or(f64::NAN);
                // Bandwidth is compared as time per byte (lower is better, like latency).
                if invert {
                    1.0 / value
                } else {
                    value
                }
            })
            .collect()
    };
    let latency_crossing = stats::crossing(&xs, &column(0, false), &column(1, false));
    let bandwidth_crossing = stats::crossing(&xs, &column(2, true), &column(3, true));
    let rounds: Vec<_> = copy_rounds
        .iter()
        .zip(zero_copy_rounds)
        .map(|(copy, zero_copy)| crossover_points(&knob, copy, zero_copy))
        .chain(std::iter::once(points.clone()))
        .collect();
    let best_value = safe_threshold(&knob, &rounds)
        .map_or(knob.default_value, |largest| (knob.value_for)(largest));
    CrossoverResult {
        knob,
        points,
        latency_crossing,
        bandwidth_crossing,
        best_value,
        handoff_us: 0.0,
    }
}

/// Per size of the knob: (copy latency, zero-copy latency, copy MB/s, zero-copy MB/s).
fn crossover_points(
    knob: &Knob,
    copy: &[Record],
    zero_copy: &[Record],
) -> Vec<(u64, [Option<f64>; 4])> {
    knob.sizes
        .iter()
        .map(|&size| {
            (
                size,
                [
                    figure(copy, "pingpong", size),
                    figure(zero_copy, "pingpong", size),
                    figure(copy, "bw", size),
                    figure(zero_copy, "bw", size),
                ],
            )
        })
        .collect()
}

/// The threshold to replace the default with, as the largest size to copy (`Some(None)`:
/// copy none), or None to keep the default. A candidate qualifies only if, in every one of
/// `rounds` (each round's points, and the medians), it lowers the cost
/// ([`threshold_cost`]) by more than [`TUNING_MARGIN`] *and* is no worse than the default
/// beyond [`NOISE_TOLERANCE`] on latency or on bandwidth at any size whose path it changes.
/// So a tuned threshold trades nothing away that `--compare-profile` would count as worse,
/// and one noisy launch cannot move it. Of the qualifying candidates the one with the
/// lowest cost in the medians (the last round) wins.
pub(crate) fn safe_threshold(knob: &Knob, rounds: &[Vec<CrossoverPoint>]) -> Option<Option<u64>> {
    let default = knob.default_candidate();
    let medians = rounds.last()?;
    let candidates = std::iter::once(None).chain(medians.iter().map(|(size, _)| Some(*size)));
    let qualifies = |candidate: Option<u64>| {
        candidate != default
            && rounds.iter().all(|points| {
                threshold_cost(points, candidate)
                    < threshold_cost(points, default) * (1.0 - TUNING_MARGIN)
                    && no_worse_where_changed(points, default, candidate)
            })
    };
    // Ties go to the larger candidate (fewer protocol switches for mid-size messages).
    let mut best: Option<(Option<u64>, f64)> = None;
    for candidate in candidates.filter(|candidate| qualifies(*candidate)) {
        let cost = threshold_cost(medians, candidate);
        if best.is_none_or(|(_, lowest)| cost <= lowest + 1e-12) {
            best = Some((candidate, cost));
        }
    }
    best.map(|(candidate, _)| candidate)
}

/// Whether copying up to `candidate` instead of up to `default` is within
/// [`NOISE_TOLERANCE`] of the default on both latency and bandwidth at every size whose
/// path changes (a size missing a figure fails).
fn no_worse_where_changed(
    points: &[(u64, [Option<f64>; 4])],
    default: Option<u64>,
    candidate: Option<u64>,
) -> bool {
    points.iter().all(|(size, figures)| {
        let copies_now = candidate.is_some_and(|largest| *size <= largest);
        if copies_now == default.is_some_and(|largest| *size <= largest) {
            return true;
        }
        let [Some(lat_copy), Some(lat_zero), Some(bw_copy), Some(bw_zero)] = *figures else {
            return false;
        };
        let (latency, latency_before, bandwidth, bandwidth_before) = if copies_now {
            (lat_copy, lat_zero, bw_copy, bw_zero)
        } else {
            (lat_zero, lat_copy, bw_zero, bw_copy)
        };
        latency <= latency_before * NOISE_TOLERANCE
            && bandwidth >= bandwidth_before / NOISE_TOLERANCE
    })
}

/// The cost of copying every size up to `largest_copied` (None: none) and sending the rest
/// the zero-copy way: per size, chosen latency / best latency + best bandwidth / chosen
/// bandwidth (2 per size = the best path everywhere); sizes missing a figure count 0.
pub(crate) fn threshold_cost(
    points: &[(u64, [Option<f64>; 4])],
    largest_copied: Option<u64>,
) -> f64 {
    points
        .iter()
        .map(|(size, figures)| {
            let copy = largest_copied.is_some_and(|largest| *size <= largest);
            let [Some(lat_copy), Some(lat_zero), Some(bw_copy), Some(bw_zero)] = *figures else {
                return 0.0;
            };
            let (latency, bandwidth) = if copy {
                (lat_copy, bw_copy)
            } else {
                (lat_zero, bw_zero)
            };
            latency / lat_copy.min(lat_zero) + bw_copy.max(bw_zero) / bandwidth
        })
        .sum()
}

fn crossing_text(crossing: Crossing) -> String {
    match crossing {
        Crossing::At(bytes) => format!("from ~{}", format_size_approx(bytes)),
        Crossing::Always => "at every size measured".to_string(),
        Crossing::Never => "at no size measured (from the largest on, copy wins)".to_string(),
    }
}

fn crossing_bytes(crossing: Crossing) -> serde_json::Value {
    match crossing {
        Crossing::At(bytes) => serde_json::json!(bytes.round() as u64),
        Crossing::Always => serde_json::json!("always"),
        Crossing::Never => serde_json::json!("never"),
    }
}

/// A size that need not be a power of two: `48 KiB`, `1.5 MiB`, `700 B`.
fn format_size_approx(bytes: f64) -> String {
    if bytes >= (1 << 20) as f64 {
        format!("{:.1} MiB", bytes / (1 << 20) as f64)
    } else if bytes >= 1024.0 {
        format!("{:.0} KiB", bytes / 1024.0)
    } else {
        format!("{bytes:.0} B")
    }
}

/// The JSON summary of one knob: `test: "crossover"`, `size` = the best threshold.
pub(crate) fn crossover_record(result: &CrossoverResult) -> Record {
    Record {
        test: TestName::Crossover.as_str().to_string(),
        transport: result.knob.transport.as_str().to_string(),
        size: result.best_value.max(1),
        iters: 0,
        summary: Some(serde_json::json!({
            "setting": result.knob.setting,
            "default": result.knob.default_value,
            "best": result.best_value,
            "latency_crossing_bytes": crossing_bytes(result.latency_crossing),
            "bandwidth_crossing_bytes": crossing_bytes(result.bandwidth_crossing),
        })),
        ..Record::default()
    }
}

/// Prints the crossover tables.
pub(crate) fn print_crossovers(
    table: &mut dyn Write,
    results: &[CrossoverResult],
) -> std::io::Result<()> {
    for result in results {
        let knob = &result.knob;
        writeln!(table)?;
        writeln!(
            table,
            "crossover: {} ({}); {}",
            knob.transport.as_str(),
            knob.setting,
            knob.paths
        )?;
        writeln!(
            table,
            "  {:>10} {:>12} {:>14} {:>12} {:>15}  faster (latency, bandwidth)",
            "size", "copy µs", "zero-copy µs", "copy MB/s", "zero-copy MB/s"
        )?;
        for (size, figures) in &result.points {
            let show = |value: Option<f64>| value.map_or("-".to_string(), significant);
            let faster = |a: Option<f64>, b: Option<f64>, lower_better: bool| match (a, b) {
                (Some(a), Some(b)) if (a < b) == lower_better => "copy",
                (Some(_), Some(_)) => "zero-copy",
                _ => "-",
            };
            writeln!(
                table,
                "  {:>10} {:>12} {:>14} {:>12} {:>15}  {}, {}",
                format_size(*size),
                show(figures[0]),
                show(figures[1]),
                show(figures[2]),
                show(figures[3]),
                faster(figures[0], figures[1], true),
                faster(figures[2], figures[3], false)
            )?;
        }
        writeln!(
            table,
            "  zero-copy wins on latency {}; on bandwidth {}",
            crossing_text(result.latency_crossing),
            crossing_text(result.bandwidth_crossing)
        )?;
        let verdict = if result.best_value == knob.default_value {
            format!(
                "keep the default: no threshold lowers the sweep's cost by more than {:.0}% while staying within {:.0}% of the default's latency and bandwidth wherever it changes the path, in every round",
                TUNING_MARGIN * 100.0,
                (NOISE_TOLERANCE - 1.0) * 100.0
            )
        } else {
            format!("default {}", knob.default_value)
        };
        writeln!(
            table,
            "  tuned threshold: {}={} ({verdict})",
            knob.setting, result.best_value
        )?;
    }
    table.flush()
}

/// Defaults against the thresholds of this machine's profile: one job per transport and
/// side, same sizes; prints each size's tuned/default ratios and a verdict. Knobs whose
/// profile value equals the default are skipped (nothing to compare).
pub(crate) fn compare_profile(
    run: &mut SuiteRun<'_>,
    transports: &[Transport],
    tuned: &[(String, u64)],
    table: Option<&mut dyn Write>,
) -> Result<bool, String> {
    let mut lines: Vec<String> = Vec::new();
    let mut never_worse = true;
    for knob in knobs() {
        if !transports.contains(&knob.transport) {
            continue;
        }
        let Some(&(_, value)) = tuned.iter().find(|(name, _)| name == knob.setting) else {
            lines.push(format!(
                "{}: {} is not in the profile; nothing to compare",
                knob.transport.as_str(),
                knob.setting
            ));
            continue;
        };
        if value == knob.default_value {
            lines.push(format!(
                "{}: {}={value} is the default; nothing to compare",
                knob.transport.as_str(),
                knob.setting
            ));
            continue;
        }
        let tests = vec![TestName::Pingpong, TestName::Bw];
        let settings = vec![(knob.setting.to_string(), value.to_string())];
        let (mut default_rounds, mut tuned_rounds) = (Vec::new(), Vec::new());
        for round in 1..=run.rounds.max(1) {
            let what = format!(
                "profile vs defaults {} round {round}",
                knob.transport.as_str()
            );
            let (default, tuned_records) = run.steady_round(&what, |run| {
                run.report.set_tag(Some("default"), Vec::new());
                let default = run.job(knob.transport, tests.clone(), &knob.sizes, &[]);
                run.report
                    .set_tag(Some("tuned"), vec![format!("{}={value}", knob.setting)]);
                let tuned_records = run.job(knob.transport, tests.clone(), &knob.sizes, &settings);
                run.report.set_tag(None, Vec::new());
                Ok((default?, tuned_records?))
            })?;
            default_rounds.push(default);
            tuned_rounds.push(tuned_records);
        }
        let (default, tuned_records) = (
            median_records(&default_rounds),
            median_records(&tuned_rounds),
        );
        lines.push(String::new());
        lines.push(format!(
            "profile vs defaults: {} {}: default {} -> tuned {value} (medians of {} alternating jobs each)",
            knob.transport.as_str(),
            knob.setting,
            knob.default_value,
            default_rounds.len()
        ));
        lines.push(format!(
            "  {:>10} {:>11} {:>11} {:>9} {:>11} {:>11} {:>9}  path (tuned vs default)",
            "size", "default µs", "tuned µs", "ratio", "default MB/s", "tuned MB/s", "ratio"
        ));
        let mut worse_sizes = Vec::new();
        for &size in &knob.sizes {
            let latency = (
                figure(&default, "pingpong", size),
                figure(&tuned_records, "pingpong", size),
            );
            let bandwidth = (
                figure(&default, "bw", size),
                figure(&tuned_records, "bw", size),
            );
            let latency_ratio = latency.1.zip(latency.0).map(|(t, d)| t / d);
            let bandwidth_ratio = bandwidth.1.zip(bandwidth.0).map(|(t, d)| t / d);
            // Sizes whose path the tuned value does not change run the same code on both
            // sides: their difference is noise and does not count against the profile.
            let path_changes =
                (knob.copies)(size, knob.default_value) != (knob.copies)(size, value);
            let worse_by = |latency_ratio: Option<f64>, bandwidth_ratio: Option<f64>| {
                latency_ratio.is_some_and(|ratio| ratio > NOISE_TOLERANCE)
                    || bandwidth_ratio.is_some_and(|ratio| ratio < 1.0 / NOISE_TOLERANCE)
            };
            // Worse in the medians and in every round (default and tuned of one round ran
            // back to back): one slow launch does not condemn a threshold.
            let worse = worse_by(latency_ratio, bandwidth_ratio)
                && default_rounds.iter().zip(&tuned_rounds).all(|(d, t)| {
                    let ratio = |test: &str| {
                        figure(t, test, size)
                            .zip(figure(d, test, size))
                            .map(|(t, d)| t / d)
                    };
                    worse_by(ratio("pingpong"), ratio("bw"))
                });
            if path_changes && worse {
                worse_sizes.push(format_size(size));
            }
            let path = if !path_changes {
                "same path"
            } else if (knob.copies)(size, value) {
                "now copy"
            } else {
                "now zero-copy"
            };
            let show = |value: Option<f64>| value.map_or("-".to_string(), significant);
            lines.push(format!(
                "  {:>10} {:>11} {:>11} {:>9} {:>11} {:>11} {:>9}  {path}",
                format_size(size),
                show(latency.0),
                show(latency.1),
                show(latency_ratio),
                show(bandwidth.0),
                show(bandwidth.1),
                show(bandwidth_ratio)
            ));
        }
        if worse_sizes.is_empty() {
            lines.push(format!(
                "  verdict: where the path changes, tuned is never worse than the default beyond the {:.0}% noise tolerance (in the medians and in every round)",
                (NOISE_TOLERANCE - 1.0) * 100.0
            ));
        } else {
            never_worse = false;
            lines.push(format!(
                "  verdict: where the path changes, tuned is worse than the default beyond {:.0}%, in the medians and in every round, at {}",
                (NOISE_TOLERANCE - 1.0) * 100.0,
                worse_sizes.join(", ")
            ));
        }
    }
    run.report.clear_progress();
    if let Some(table) = table {
        for line in &lines {
            writeln!(table, "{line}").map_err(|error| error.to_string())?;
        }
    }
    Ok(never_worse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_records_takes_each_points_median_over_rounds() {
        let point = |test: &str, size: u64, latency: f64, bandwidth: f64| Record {
            test: test.to_string(),
            transport: "tcp".to_string(),
            size,
            latency_us: Some(latency),
            bandwidth_mbps: Some(bandwidth),
            ..Record::default()
        };
        let rounds = vec![
            vec![point("pingpong", 8, 5.0, 1.0), point("bw", 8, 0.0, 100.0)],
            vec![point("pingpong", 8, 50.0, 1.0), point("bw", 8, 0.0, 300.0)],
            // A round that lost a point still counts for the others.
            vec![point("bw", 8, 0.0, 200.0)],
        ];
        let merged = median_records(&rounds);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].latency_us, Some(27.5));
        assert_eq!(merged[1].bandwidth_mbps, Some(200.0));
        assert!(median_records(&[]).is_empty());
    }

    #[test]
    fn safe_threshold_follows_the_faster_path() {
        let mut knob = knobs().remove(0);
        knob.sizes = vec![8, 16, 32, 64];
        // The default copies every size of this sweep.
        assert_eq!(knob.default_candidate(), Some(64));
        // Copy faster up to 16, zero-copy faster from 32 on, in both figures.
        let points: Vec<CrossoverPoint> = vec![
            (8, [Some(1.0), Some(2.0), Some(100.0), Some(50.0)]),
            (16, [Some(2.0), Some(3.0), Some(200.0), Some(150.0)]),
            (32, [Some(5.0), Some(4.0), Some(300.0), Some(400.0)]),
            (64, [Some(9.0), Some(6.0), Some(400.0), Some(600.0)]),
        ];
        assert_eq!(
            safe_threshold(&knob, std::slice::from_ref(&points)),
            Some(Some(16))
        );
        // Zero-copy better everywhere: copy nothing.
        let zero: Vec<CrossoverPoint> = points
            .iter()
            .map(|(size, f)| {
                (
                    *size,
                    [f[0].map(|v| v * 10.0), f[1], f[2], f[3].map(|v| v * 10.0)],
                )
            })
            .collect();
        assert_eq!(safe_threshold(&knob, &[zero]), Some(None));
        // A round in which zero-copy is slower at 32: only 64 may change, and copying up
        // to 32 still wins in both rounds.
        let mut other = points.clone();
        other[2].1[1] = Some(20.0);
        assert_eq!(
            safe_threshold(&knob, &[other, points.clone()]),
            Some(Some(32))
        );
        assert_eq!(safe_threshold(&knob, &[]), None);
        // Perfect choice: 2 per size.
        assert!((threshold_cost(&points, Some(16)) - 8.0).abs() < 1e-12);
        assert!(threshold_cost(&points, None) > 8.0);
    }

    #[test]
    fn noise_does_not_move_the_default() {
        let mut knob = knobs().remove(0);
        knob.sizes = vec![4096, 8192];
        // Zero-copy 1% faster at 8 KiB: within the margin, the default (copy both) stays.
        let copy = vec![
            record("pingpong", 4096, 1.0),
            record("pingpong", 8192, 2.0),
            record("bw", 4096, 100.0),
            record("bw", 8192, 100.0),
        ];
        let zero = vec![
            record("pingpong", 4096, 3.0),
            record("pingpong", 8192, 1.98),
            record("bw", 4096, 50.0),
            record("bw", 8192, 101.0),
        ];
        let result = summarise_crossover(knob.clone(), std::slice::from_ref(&copy), &[zero]);
        assert_eq!(result.best_value, knob.default_value);
        // Zero-copy twice as fast at 8 KiB: the threshold moves to 4 KiB.
        let zero = vec![
            record("pingpong", 4096, 3.0),
            record("pingpong", 8192, 1.0),
            record("bw", 4096, 50.0),
            record("bw", 8192, 200.0),
        ];
        let result = summarise_crossover(
            knob.clone(),
            std::slice::from_ref(&copy),
            std::slice::from_ref(&zero),
        );
        assert_eq!(result.best_value, 4096);
        assert_eq!(
            result.latency_crossing,
            Crossing::At(4096.0 + 4096.0 * 2.0 / 3.0)
        );
        // The same win in two rounds of three, and a third round where zero-copy is slow
        // at 8 KiB: the median still favours zero-copy, but one round contradicts it, so
        // the default stays.
        let slow = vec![
            record("pingpong", 4096, 3.0),
            record("pingpong", 8192, 4.0),
            record("bw", 4096, 50.0),
            record("bw", 8192, 50.0),
        ];
        let three = |last: Vec<Record>| vec![zero.clone(), zero.clone(), last];
        let copies = vec![copy.clone(), copy.clone(), copy.clone()];
        let result = summarise_crossover(knob.clone(), &copies, &three(slow));
        assert_eq!(result.points[1].1[1], Some(1.0), "the median of 1, 1, 4");
        assert_eq!(result.best_value, knob.default_value);
        let result = summarise_crossover(knob.clone(), &copies, &three(zero.clone()));
        assert_eq!(result.best_value, 4096);
        // A trade: zero-copy has three times the bandwidth at 8 KiB but 1.5x the latency.
        // Its cost is lower, but the tuned profile would be worse on latency there: kept.
        let trade = vec![
            record("pingpong", 4096, 3.0),
            record("pingpong", 8192, 3.0),
            record("bw", 4096, 50.0),
            record("bw", 8192, 300.0),
        ];
        let result = summarise_crossover(knob.clone(), &copies, &three(trade.clone()));
        assert!(
            threshold_cost(&result.points, Some(4096)) < threshold_cost(&result.points, Some(8192))
        );
        assert_eq!(result.best_value, knob.default_value);
    }

    fn record(test: &str, size: u64, value: f64) -> Record {
        Record {
            test: test.into(),
            size,
            latency_us: (test == "pingpong").then_some(value),
            bandwidth_mbps: (test == "bw").then_some(value),
            ..Record::default()
        }
    }

    #[test]
    fn knob_values_map_thresholds() {
        let knobs = knobs();
        let shm = &knobs[0];
        assert_eq!((shm.value_for)(Some(64 << 10)), 64 << 10);
        assert_eq!((shm.value_for)(None), 4095);
        assert_eq!(shm.default_value, 256 << 10);
        let tcp = &knobs[1];
        assert_eq!((tcp.value_for)(Some(64 << 10)), (64 << 10) + 16);
        assert_eq!((tcp.value_for)(None), 4096);
        let udp = &knobs[2];
        assert_eq!((udp.value_for)(Some(4096)), 4097);
        assert_eq!((udp.value_for)(None), 0);
        for knob in &knobs {
            assert!(knob.sizes.windows(2).all(|pair| pair[0] < pair[1]));
            // The mapping and the path rule agree: value_for(T) copies exactly sizes <= T.
            for &largest in &knob.sizes {
                let value = (knob.value_for)(Some(largest));
                for &size in &knob.sizes {
                    assert_eq!(
                        (knob.copies)(size, value),
                        size <= largest,
                        "{knob:?} {largest} {size}"
                    );
                }
            }
        }
        assert_eq!(knobs[0].default_candidate(), Some(256 << 10));
        assert_eq!(knobs[1].default_candidate(), Some(128 << 10));
        // udp sends payloads of 512 B and more in place by default: no swept size is copied.
        assert_eq!(knobs[2].default_candidate(), None);
    }

    #[test]
    fn compare_cells_show_ratios() {
        assert_eq!(compare_cell(Some(0.135), Some(0.05)), "0.135 (2.70x)");
        assert_eq!(compare_cell(Some(20493.0), Some(38900.0)), "20493 (0.527x)");
        assert_eq!(compare_cell(None, Some(1.0)), "-");
        assert_eq!(compare_cell(Some(3.0), None), "3.00");
    }
}
