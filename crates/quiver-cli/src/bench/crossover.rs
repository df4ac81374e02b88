//! Where each quiver transport's copy path and zero-copy path cross on this machine: the
//! measurement behind `quiver tune` (which writes the least-cost thresholds into this
//! machine's profile) and the lab's `quiver-bench crossover`.
//!
//! Each transport has one switch point (a `QUIVER_*` threshold, a [`Knob`]). For each,
//! pingpong and bw run twice over the same sizes, once with the threshold forcing the copy
//! path at every size and once forcing the zero-copy path, in alternating rounds; the
//! result says where the zero-copy path starts to win ([`stats::crossing`]) and which
//! threshold costs least over the sweep without being worse anywhere it changes the path
//! ([`safe_threshold`]). For shm this is also eager vs rendezvous.
//!
//! The jobs run through a [`SuiteRun`], which the lab's suites use too: every job runs
//! with `QUIVER_PROFILE=off` plus its own `--set` settings, so a profile on the machine
//! never changes what a "default" run measures, and a round of alternating jobs is measured
//! again when the host moved the vCPUs during it.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::floor::{self, Floors};
use super::parent::{choose_cpus, open_report};
use super::plan::{Plan, RankJob, TestName, Transport, DEFAULT_WINDOW};
use super::progress::Progress;
use super::ranks;
use super::record::Record;
use super::report::Report;
use super::result::RankResult;
use super::sizes::format_size;
use super::stats::{self, Crossing};

/// Effort of the suites with `--quick` (CI, smoke runs), percent of the bench's default
/// iterations.
pub const QUICK_EFFORT_PERCENT: u64 = 1;
/// Effort of a default crossover measurement (and `quiver tune`).
pub const CROSSOVER_EFFORT_PERCENT: u64 = 10;
/// A tuned figure more than this factor worse than the default's counts as worse (the
/// run-to-run spread of these shared VMs is of this order).
pub const NOISE_TOLERANCE: f64 = 1.10;
/// Rank jobs per variant in crossover, `quiver tune` and the lab's profile comparison: the
/// variants alternate (a, b, a, b, ...) and each figure is the median over the rounds.
/// The figures of one launch of the ranks move by up to 3x between launches on shared VMs
/// (tcp bandwidth is bimodal), so one job per variant can pick the wrong threshold.
pub const CROSSOVER_ROUNDS: usize = 3;
/// How far the cross-core hand-off may move from the suite's floor before a round of
/// alternating jobs is measured again. On shared VMs the host sometimes places the two
/// vCPUs far apart (hand-off 0.05 -> 0.23 µs), and the ring paths slow down 3-4x while the
/// system-call paths barely move: a round straddling such a move compares two machines.
pub const PLACEMENT_TOLERANCE: f64 = 1.5;
/// Attempts at one round before it is kept even though the hand-off moved (with a warning).
pub const ROUND_ATTEMPTS: usize = 4;

/// How a suite runs its jobs.
pub struct SuiteRun<'a, R = Record> {
    /// The two CPUs of the ranks.
    pub cpus: [usize; 2],
    /// Deadline of each job.
    pub timeout: Duration,
    /// Percent of the default iteration counts.
    pub effort_percent: u64,
    /// Outstanding sends per window.
    pub window: u64,
    /// Where results go (its table is taken: suites print summaries).
    pub report: &'a mut Report<R>,
    /// The floors of this run.
    pub floors: &'a Floors,
    /// Jobs per variant where a suite compares variants (see [`CROSSOVER_ROUNDS`]).
    pub rounds: usize,
}

impl<R: RankResult> SuiteRun<'_, R> {
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
    ///
    /// # Errors
    /// The first error of `jobs`.
    pub fn steady_round<T>(
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

    /// A job's plan: `tests` over `transport` at `sizes`, with the suite's effort and
    /// window, the profile off and `settings`.
    pub fn plan(
        &self,
        transport: Transport,
        tests: Vec<TestName>,
        sizes: &[u64],
        settings: &[(String, String)],
    ) -> Plan {
        let mut all_settings = vec![("QUIVER_PROFILE".to_string(), "off".to_string())];
        all_settings.extend(settings.iter().cloned());
        Plan {
            tests,
            transport,
            sizes: sizes.to_vec(),
            iters: None,
            window: self.window,
            netns: None,
            addrs: None,
            settings: all_settings,
            effort_percent: self.effort_percent,
            blocks_per_point: 1,
            wait_fd: false,
        }
    }

    /// Runs one job; returns its records (also reported as JSON as they arrive).
    ///
    /// # Errors
    /// The ranks failed.
    pub fn job(&mut self, job: &RankJob) -> Result<Vec<R>, String> {
        self.report.add_points(job.records);
        let first = self.report.collected().len();
        ranks::run(job, self.cpus, self.floors, self.report, self.timeout)?;
        Ok(self.report.collected()[first..].to_vec())
    }
}

/// Floors a suite needs: hand-off, memcpy and the extended floors at `sizes`.
///
/// # Errors
/// Measuring failed.
pub fn suite_floors(cpus: [usize; 2], sizes: &[u64]) -> Result<Floors, String> {
    let mut floors = floor::measure(cpus[0], cpus[1], sizes)
        .map_err(|error| format!("measuring the floors: {error}"))?;
    floors.extended = Some(
        floor::measure_extended(cpus[0], cpus[1], sizes)
            .map_err(|error| format!("measuring the extended floors: {error}"))?,
    );
    Ok(floors)
}

/// Parses `--transports shm,tcp,udp` (quiver's transports only).
///
/// # Errors
/// A name that is not one of quiver's transports.
pub fn parse_transport_list(list: &str) -> Result<Vec<Transport>, String> {
    list.split(',')
        .filter(|name| !name.trim().is_empty())
        .map(|name| match Transport::from_name(name.trim()) {
            Some(transport) if !transport.is_raw() => Ok(transport),
            _ => Err(format!(
                "--transports: {name:?} is not one of shm, tcp, udp"
            )),
        })
        .collect()
}

/// Every size the knobs of `transports` sweep, ascending, without duplicates.
pub fn knob_sizes(transports: &[Transport]) -> Vec<u64> {
    let mut sizes: Vec<u64> = knobs()
        .iter()
        .filter(|knob| transports.contains(&knob.transport))
        .flat_map(|knob| knob.sizes.clone())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Measures the crossovers for `quiver tune`: floors are not needed beyond what the
/// records carry, so only the hand-off and memcpy at the sweep sizes are measured.
///
/// # Errors
/// Bad CPUs or JSON file, or a failed job.
pub fn measure_for_tune(
    cpus: Option<&str>,
    transports: &[Transport],
    quick: bool,
    timeout: Duration,
    json: Option<&str>,
) -> Result<Vec<CrossoverResult>, String> {
    let cpus = choose_cpus(cpus)?;
    let mut report: Report = open_report(json)?;
    report.take_table();
    report.set_progress(Progress::new(0, false));
    let all = [Transport::Shm, Transport::Tcp, Transport::Udp];
    let floors = floor::measure(cpus[0], cpus[1], &knob_sizes(&all))
        .map_err(|error| format!("measuring the floors: {error}"))?;
    let mut run = SuiteRun {
        cpus,
        timeout,
        effort_percent: if quick {
            QUICK_EFFORT_PERCENT
        } else {
            CROSSOVER_EFFORT_PERCENT
        },
        window: DEFAULT_WINDOW,
        report: &mut report,
        floors: &floors,
        rounds: if quick { 1 } else { CROSSOVER_ROUNDS },
    };
    measure_crossovers(&mut run, transports)
}

/// One transport's switch point between its copy path and its zero-copy path.
#[derive(Debug, Clone)]
pub struct Knob {
    /// The transport.
    pub transport: Transport,
    /// The `QUIVER_*` setting.
    pub setting: &'static str,
    /// What the copy path and the zero-copy path are.
    pub paths: &'static str,
    /// Sizes measured, ascending.
    pub sizes: Vec<u64>,
    /// The setting's value forcing the copy path at every size of the sweep.
    pub copy_value: u64,
    /// The setting's value forcing the zero-copy path at every size of the sweep.
    pub zero_copy_value: u64,
    /// The built-in default.
    pub default_value: u64,
    /// The setting's value that copies messages up to `largest_copied` bytes (None: none
    /// of the sweep) and sends larger ones the zero-copy way.
    pub value_for: fn(Option<u64>) -> u64,
    /// Whether a message of `size` bytes takes the copy path when the setting is `value`.
    pub copies: fn(u64, u64) -> bool,
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
pub const TUNING_MARGIN: f64 = 0.02;

/// The three switch points, one per quiver transport.
pub fn knobs() -> Vec<Knob> {
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
pub type CrossoverPoint = (u64, [Option<f64>; 4]);

/// What crossover measured for one knob.
#[derive(Debug, Clone)]
pub struct CrossoverResult {
    /// The knob measured.
    pub knob: Knob,
    /// Per size: (copy latency µs, zero-copy latency µs, copy MB/s, zero-copy MB/s).
    pub points: Vec<(u64, [Option<f64>; 4])>,
    /// Where zero-copy starts to win on latency, and on bandwidth.
    pub latency_crossing: Crossing,
    /// Where zero-copy starts to win on bandwidth.
    pub bandwidth_crossing: Crossing,
    /// The threshold value with the least cost over the sweep ([`safe_threshold`]).
    pub best_value: u64,
    /// The cross-core hand-off (µs) the rounds were measured at (0 when not known).
    pub handoff_us: f64,
}

/// Measures every knob whose transport is in `transports`.
///
/// # Errors
/// A job failed.
pub fn measure_crossovers(
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
                    let plan = run.plan(
                        knob.transport,
                        vec![TestName::Pingpong, TestName::Bw],
                        &knob.sizes,
                        &settings,
                    );
                    let records = run.job(&plan.rank_job()).map_err(|error| {
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
            .json_only(&CrossoverSummary::of(&result))
            .map_err(|error| format!("writing JSON: {error}"))?;
        results.push(result);
    }
    run.report.clear_progress();
    Ok(results)
}

/// One variant's records over several rounds, merged: each point's latency and bandwidth
/// (its figure) is the median of that point over the rounds that measured it (the other
/// fields are the first round's). Points are those of the first round.
pub fn median_records(rounds: &[Vec<Record>]) -> Vec<Record> {
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
            let same: Vec<f64> = rounds
                .iter()
                .filter_map(|round| {
                    round.iter().find(|record| {
                        record.test() == template.test()
                            && record.size() == template.size()
                            && record.transport() == template.transport()
                    })
                })
                .map(|record| record.figure().1)
                .collect();
            let mut merged = template.clone();
            if let Some(median) = median_of(same) {
                merged.set_figure(median);
            }
            merged
        })
        .collect()
}

/// The figure of the point of `test` at `size` in `records` (latency for pingpong,
/// bandwidth for bw), if there is one.
pub fn figure(records: &[Record], test: TestName, size: u64) -> Option<f64> {
    records
        .iter()
        .find(|record| record.test() == test && record.size() == size)
        .map(|record| record.figure().1)
}

/// Reads both paths' records, one list per round (round r of copy pairs with round r of
/// zero-copy), into a result. The points shown are the per-point medians over the rounds;
/// the threshold is [`safe_threshold`] over the rounds and the medians.
pub fn summarise_crossover(
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
                    figure(copy, TestName::Pingpong, size),
                    figure(zero_copy, TestName::Pingpong, size),
                    figure(copy, TestName::Bw, size),
                    figure(zero_copy, TestName::Bw, size),
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
pub fn safe_threshold(knob: &Knob, rounds: &[Vec<CrossoverPoint>]) -> Option<Option<u64>> {
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
pub fn threshold_cost(points: &[(u64, [Option<f64>; 4])], largest_copied: Option<u64>) -> f64 {
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

/// Where zero-copy starts to win, as the JSON summary says it: bytes, "always" or "never".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum CrossingBytes {
    /// From about this many bytes on.
    At(u64),
    /// At every size measured, or at none.
    Edge(CrossingEdge),
}

/// A crossing outside the sizes measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrossingEdge {
    /// Zero-copy wins at every size measured.
    Always,
    /// Zero-copy wins at no size measured.
    Never,
}

impl From<Crossing> for CrossingBytes {
    fn from(crossing: Crossing) -> CrossingBytes {
        match crossing {
            Crossing::At(bytes) => CrossingBytes::At(bytes.round() as u64),
            Crossing::Always => CrossingBytes::Edge(CrossingEdge::Always),
            Crossing::Never => CrossingBytes::Edge(CrossingEdge::Never),
        }
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

/// The JSON summary of one knob: `test` = "crossover", `size` = the best threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "test", rename = "crossover")]
pub struct CrossoverSummary {
    /// The knob's transport.
    pub transport: Transport,
    /// The best threshold (at least 1: sizes are positive).
    pub size: u64,
    /// Always 0 (the summary of several jobs).
    pub iters: u64,
    /// The knob and its crossings.
    pub summary: CrossoverFigures,
}

/// What the crossover summary says about one knob.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrossoverFigures {
    /// The `QUIVER_*` setting.
    pub setting: &'static str,
    /// Its built-in default.
    pub default: u64,
    /// The least-cost value measured.
    pub best: u64,
    /// Where zero-copy starts to win on latency.
    pub latency_crossing_bytes: CrossingBytes,
    /// Where zero-copy starts to win on bandwidth.
    pub bandwidth_crossing_bytes: CrossingBytes,
}

impl CrossoverSummary {
    /// The summary of `result`.
    pub fn of(result: &CrossoverResult) -> CrossoverSummary {
        CrossoverSummary {
            transport: result.knob.transport,
            size: result.best_value.max(1),
            iters: 0,
            summary: CrossoverFigures {
                setting: result.knob.setting,
                default: result.knob.default_value,
                best: result.best_value,
                latency_crossing_bytes: result.latency_crossing.into(),
                bandwidth_crossing_bytes: result.bandwidth_crossing.into(),
            },
        }
    }
}

/// Prints the crossover tables.
pub fn print_crossovers(table: &mut dyn Write, results: &[CrossoverResult]) -> std::io::Result<()> {
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

/// A figure for a summary table: three significant digits, no decimals from 100 up.
pub fn significant(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::super::record::{Labels, LatencyPoint, Metric, StreamPoint};
    use super::*;

    #[test]
    fn median_records_takes_each_points_median_over_rounds() {
        let rounds = vec![
            vec![point("pingpong", 8, 5.0, 1.0), point("bw", 8, 0.0, 100.0)],
            vec![point("pingpong", 8, 50.0, 1.0), point("bw", 8, 0.0, 300.0)],
            // A round that lost a point still counts for the others.
            vec![point("bw", 8, 0.0, 200.0)],
        ];
        let merged = median_records(&rounds);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].figure(), (Metric::LatencyUs, 27.5));
        assert_eq!(merged[1].figure(), (Metric::BandwidthMbps, 200.0));
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
        point(test, size, value, value)
    }

    /// A pingpong point with `latency`, or a bw point with `bandwidth`, over tcp.
    fn point(test: &str, size: u64, latency: f64, bandwidth: f64) -> Record {
        let labels = Labels::default();
        if test == "pingpong" {
            return Record::Pingpong(LatencyPoint {
                transport: Transport::Tcp,
                size,
                iters: 10,
                latency_us: latency,
                latency_p99_us: latency,
                floor_us: None,
                floor_ratio: None,
                cpus: None,
                labels,
                detection: None,
            });
        }
        Record::Bw(StreamPoint {
            transport: Transport::Tcp,
            size,
            iters: 10,
            window: 64,
            bandwidth_mbps: bandwidth,
            floor_mbps: None,
            floor_ratio: None,
            cpus: None,
            labels,
            detection: None,
            posted: None,
        })
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
    fn the_summary_says_the_crossings_in_bytes_or_words() {
        let knob = knobs().remove(0);
        let result = CrossoverResult {
            points: Vec::new(),
            latency_crossing: Crossing::At(6000.4),
            bandwidth_crossing: Crossing::Never,
            best_value: 8192,
            handoff_us: 0.1,
            knob,
        };
        let value = serde_json::to_value(CrossoverSummary::of(&result)).expect("json");
        assert_eq!(value["test"], "crossover");
        assert_eq!(value["transport"], "shm");
        assert_eq!(value["size"], 8192);
        assert_eq!(value["summary"]["best"], value["size"]);
        assert_eq!(value["summary"]["setting"], "QUIVER_SHM_EAGER_MAX");
        assert_eq!(value["summary"]["latency_crossing_bytes"], 6000);
        assert_eq!(value["summary"]["bandwidth_crossing_bytes"], "never");
    }
}
