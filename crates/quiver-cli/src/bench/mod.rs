//! `quiver bench`: the project's microscope. Measures a transport between two ranks next to
//! the machine's floors, all in one run.
//!
//! - `pingpong`: one-way latency = round trip / 2, median and p99, over a size sweep;
//! - `bw`: streaming bandwidth with a window of outstanding sends (as osu_bw does);
//! - `bibw`: both ranks stream to each other at once (as osu_bibw does);
//! - `rate`: 8-byte message rate with the same window;
//! - `loggp`: the LogGP cost model per size (o_s, o_r, L, g; G fitted), `loggp.rs`;
//! - `pool`: `recv_pooled` against a fresh receive buffer per message;
//! - `floor`: cache-line hand-off latency and memcpy bandwidth, plus the extended floors
//!   (a system call, a cross-core wake-up, `process_vm_readv` bandwidth);
//! - suites that start several rank jobs (`suite.rs`): `compare` (every transport and
//!   baseline in one table) and `crossover` (copy vs zero-copy per transport, and
//!   `--compare-profile`: this machine's profile against the defaults).
//!
//! The floors are always measured first (every result is printed as a ratio to its floor);
//! naming only `floor` skips the ranks. The bench starts its two ranks itself (this
//! executable, `quiver bench --worker`), pins them to two different CPUs, and both
//! busy-poll. Output: a table by default (or `--format osu`); `--json FILE|-` writes one
//! JSON object per measured point (JSON Lines), and with `-` only JSON goes to stdout;
//! `--plot FILE.svg|.png` draws latency and bandwidth against size; a progress bar goes to
//! stderr when it is a terminal.
//!
//! Layout: `plan` (what to measure), `floor` (the machine's floors), `ranks`
//! (starting and watching the ranks), `worker` (what a quiver rank does), `raw` (the
//! raw-socket baselines), `loggp` (the tests written once for both), `suite` (compare,
//! crossover), `report` (records, ratios, table, OSU columns), `plot`, `progress`, `sizes`
//! and `stats` (parsing and statistics).

mod floor;
mod loggp;
mod plan;
mod plot;
mod progress;
mod ranks;
mod raw;
mod report;
mod sizes;
mod stats;
pub(crate) mod stripe;
mod suite;
mod wire;
mod worker;

pub(crate) use plan::Transport as BenchTransport;
pub(crate) use suite::CrossoverResult;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::time::Duration;

use plan::{
    Interleave, Interleaved, Plan, TestName, Transport, DEFAULT_SIZES_BYTES, DEFAULT_WINDOW,
    MAX_WINDOW, MAX_WINDOW_BYTES,
};
use report::Report;

/// Exit code for a bad command line.
const EXIT_USAGE: i32 = 2;
/// Exit code for a run that failed.
const EXIT_FAILURE: i32 = 1;
/// Largest `--iters` (pingpong keeps one 16-byte timestamp per round trip in memory).
const MAX_ITERS: u64 = 10_000_000;

/// Options of `quiver bench`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BenchArgs {
    /// Tests to run, in this order: floor, pingpong, bw, bibw, rate, loggp, pool (default:
    /// floor, pingpong, bw, rate); or one suite alone: compare, crossover. The floors are
    /// measured in every run; `floor` alone measures only them.
    #[arg(value_enum, value_name = "TEST")]
    tests: Vec<TestName>,

    /// Transport to measure: shm, udp, tcp (quiver's, through its API), or a raw-socket
    /// baseline over 127.0.0.1 (raw-udp, raw-tcp: plain busy-polling sockets, no protocol).
    #[arg(long, value_name = "NAME", default_value = "shm")]
    transport: String,

    /// Message sizes of pingpong and bw, comma-separated, with optional K/M/G suffixes
    /// (powers of 1024), e.g. 8,1K,1M [default: 8,64,512,4K,32K,256K,1M,4M].
    #[arg(long, value_name = "LIST")]
    sizes: Option<String>,

    /// Timed iterations per size: round trips for pingpong, windows for bw and rate
    /// [default: scaled down with the size, so the default suite takes seconds, not minutes].
    #[arg(long, value_name = "N")]
    iters: Option<u64>,

    /// Outstanding sends per window in bw and rate.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_WINDOW)]
    window: u64,

    /// Also write one JSON object per measured point to FILE; with `-`, write only JSON
    /// to stdout (no table).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,

    /// The two CPUs for rank 0 and rank 1, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    cpus: Option<String>,

    /// Run rank 0 and rank 1 in these two network namespaces (udp and tcp only), e.g. the
    /// two sides of `quiver testbed up`: quiver-a,quiver-b.
    #[arg(long, value_name = "A,B")]
    netns: Option<String>,

    /// The two ranks' addresses (ip:port,ip:port) for udp and tcp [default: free loopback
    /// ports; with --netns, 10.77.0.1:7300,10.77.0.2:7300, link 0 of `quiver testbed`].
    #[arg(long, value_name = "ADDR,ADDR")]
    addrs: Option<String>,

    /// Stop the ranks and fail if they have not finished after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,

    /// A `QUIVER_*` setting for the ranks, NAME=VALUE (repeatable), e.g.
    /// --set QUIVER_SHM_EAGER_MAX=64K: measure quiver with other thresholds.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,

    /// Human-readable output: quiver's table with floors and ratios, or the columns of the
    /// OSU micro-benchmarks (`# Size  Latency (us)`, `# Size  Bandwidth (MB/s)`, ...).
    #[arg(long, value_enum, value_name = "STYLE", default_value = "table")]
    format: report::Style,

    /// Also draw latency vs size (log-log) and bandwidth vs size, one line per transport
    /// (and variant), into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,

    /// Show a progress bar with the time left on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,

    /// compare and crossover: a small, fast sweep (about 1% of the iterations; for CI and
    /// smoke tests, not for figures).
    #[arg(long)]
    quick: bool,

    /// crossover only: measure this machine's profile (from
    /// `quiver tune`) against the built-in defaults instead of the two paths.
    #[arg(long)]
    compare_profile: bool,

    /// crossover: the transports whose switch point is measured.
    #[arg(long, value_name = "LIST", default_value = "shm,tcp,udp")]
    transports: String,

    /// Internal: default iteration counts scaled to this percentage.
    #[arg(long, hide = true, default_value_t = 100)]
    effort: u64,

    /// Internal: run as one of the bench's ranks (started by the bench itself).
    #[arg(long, hide = true)]
    worker: bool,

    /// Failure detection in the ranks: on (QUIVER_DETECT_MS as set, default 1000 ms), off
    /// (QUIVER_DETECT_MS=0), both (the tests run in --rounds rounds of on then off, each a
    /// launch of the ranks), or interleave (one launch; every point of pingpong, bw and rate
    /// split into --rounds pairs of blocks, on and off, switched with
    /// `Endpoint::set_detection`, so launch-to-launch differences cancel). both and
    /// interleave end with a summary of on/off with a 95% interval. Every point also
    /// reports the liveness looks both ranks made and the share of the timed run they took.
    #[arg(long, value_enum, value_name = "on|off|both|interleave", default_value_t = Detect::On)]
    detect: Detect,

    /// --detect both: rounds of on, off [default: 2]; --detect interleave and --baseline
    /// interleave: pairs of blocks per point [default: 10, at most 1000]. 6 or more give a
    /// 95% interval of the ratio.
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,

    /// interleave: measure quiver (--transport udp or tcp) against its raw-socket baseline
    /// (raw-udp or raw-tcp) in ONE launch of the ranks: every pingpong, bw and rate point
    /// runs as --rounds pairs of blocks, one over quiver and one over the raw sockets (each
    /// pair's order from a fixed pseudo-random sequence), so both share the launch's vCPU
    /// placement and any drift during it. Ends with a summary of the paired quiver/raw ratios with a 95% interval and
    /// the issue-3 targets. Only pingpong, bw and rate (other tests are refused), over
    /// loopback (not with --netns, --addrs or --detect both/interleave).
    /// tcp: the same with quiver's tcp as the baseline of quiver's udp (--transport udp):
    /// each rank opens a second, tcp-only context, and the summary gives udp / tcp with
    /// issue 3's target that udp bandwidth over loopback is at least tcp's.
    #[arg(long, value_enum, value_name = "interleave|tcp")]
    baseline: Option<Baseline>,
}

/// `--baseline`: what quiver is compared with, in one launch of the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Baseline {
    /// Blocks of quiver and of the raw baseline, interleaved in one launch of the ranks.
    Interleave,
    /// Blocks of quiver's udp and of quiver's tcp, interleaved in one launch of the ranks.
    Tcp,
}

/// `--rounds` when not given (--detect both).
const DEFAULT_DETECT_ROUNDS: u32 = 2;
/// `--rounds` when not given (--detect interleave, --baseline interleave).
const DEFAULT_INTERLEAVE_PAIRS: u32 = 10;
/// Largest `--rounds` of --detect both (each round launches the ranks twice).
const MAX_DETECT_ROUNDS: u32 = 100;
/// Largest `--rounds` of --detect interleave and --baseline interleave (pairs of blocks
/// inside one launch).
const MAX_INTERLEAVE_PAIRS: u32 = 1000;

/// `--detect`: failure detection in the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Detect {
    /// As configured (on by default).
    On,
    /// Off: QUIVER_DETECT_MS=0.
    Off,
    /// On and off, alternating twice.
    Both,
    /// On and off in blocks of every point, in one launch of the ranks.
    Interleave,
}

impl Detect {
    /// The runs to make: each with the QUIVER_DETECT_MS value to give the ranks (None:
    /// leave the environment alone) and, for `Both`, its round (`rounds` of on, off).
    fn runs(self, rounds: u32) -> Vec<(Option<&'static str>, Option<u32>)> {
        match self {
            // Interleave: the ranks switch detection themselves, from on as configured.
            Detect::On | Detect::Interleave => vec![(None, None)],
            Detect::Off => vec![(Some("0"), None)],
            Detect::Both => (0..rounds)
                .flat_map(|round| [(None, Some(round)), (Some("0"), Some(round))])
                .collect(),
        }
    }
}

/// Parses `--set NAME=VALUE` entries (only `QUIVER_*` names, not the job's identity).
fn parse_settings(entries: &[String]) -> Result<Vec<(String, String)>, String> {
    const RESERVED: [&str; 6] = [
        "QUIVER_RANK",
        "QUIVER_SIZE",
        "QUIVER_JOB_ID",
        "QUIVER_JOB_KEY",
        "QUIVER_ADDRS",
        "QUIVER_TRANSPORTS",
    ];
    entries
        .iter()
        .map(|entry| {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(format!("--set {entry:?}: expected NAME=VALUE"));
            };
            let name = name.trim();
            if !name.starts_with("QUIVER_")
                || !name[7..]
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                return Err(format!(
                    "--set {entry:?}: the name must be a QUIVER_* setting"
                ));
            }
            if RESERVED.contains(&name) {
                return Err(format!(
                    "--set {name}: the bench sets the job's identity and transport itself"
                ));
            }
            Ok((name.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Parses exactly two `ip:port` addresses.
fn parse_two_addrs(list: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    let addrs: Vec<std::net::SocketAddr> = list
        .split(',')
        .map(|a| {
            a.trim()
                .parse()
                .map_err(|_| format!("--addrs: {a:?} is not an ip:port address"))
        })
        .collect::<Result<_, _>>()?;
    if addrs.len() != 2 {
        return Err(format!(
            "--addrs {list:?}: expected two addresses, one per rank"
        ));
    }
    Ok(addrs)
}

/// Runs `quiver bench`; returns the process exit code (0 ok, 1 failed, 2 bad usage).
pub(crate) fn main(args: BenchArgs) -> i32 {
    let plan = match plan_from_args(&args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver bench: {message}");
            return EXIT_USAGE;
        }
    };
    if args.worker {
        let result = if plan.transport.is_raw() {
            raw::run(&plan)
        } else {
            worker::run(&plan)
        };
        return match result {
            Ok(()) => 0,
            Err(message) => {
                let rank = std::env::var("QUIVER_RANK").unwrap_or_else(|_| "?".to_string());
                eprintln!("quiver bench: rank {rank}: {message}");
                EXIT_FAILURE
            }
        };
    }
    let cpus = match choose_cpus(args.cpus.as_deref()) {
        Ok(cpus) => cpus,
        Err(message) => {
            eprintln!("quiver bench: {message}");
            return EXIT_USAGE;
        }
    };
    match run(&args, &plan, cpus) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver bench: {message}");
            EXIT_FAILURE
        }
    }
}

/// Measures the floors, runs the ranks' tests and reports everything.
fn run(args: &BenchArgs, plan: &Plan, cpus: [usize; 2]) -> Result<(), String> {
    let mut report = open_report(args.json.as_deref())?;
    report.set_style(args.format);
    if plan.tests.contains(&TestName::Wire) {
        wire::run(
            wire::WirePlan::new(args.rounds, args.iters, cpus),
            &mut report,
        )?;
    } else if let Some(suite) = plan.tests.iter().copied().find(|test| test.is_suite()) {
        run_suite(args, suite, cpus, &mut report)?;
    } else {
        run_tests(args, plan, cpus, &mut report)?;
    }
    report.clear_progress();
    if let Some(path) = &args.plot {
        plot::draw(path, report.collected())?;
        eprintln!("quiver bench: plot written to {}", path.display());
    }
    Ok(())
}

/// Runs compare or crossover (which start their own rank jobs).
fn run_suite(
    args: &BenchArgs,
    suite: TestName,
    cpus: [usize; 2],
    report: &mut Report,
) -> Result<(), String> {
    let effort_percent = if args.quick {
        suite::QUICK_EFFORT_PERCENT
    } else if args.effort != 100 {
        args.effort
    } else if suite == TestName::Compare {
        suite::COMPARE_EFFORT_PERCENT
    } else {
        suite::CROSSOVER_EFFORT_PERCENT
    };
    let transports = parse_transport_list(&args.transports)?;
    let floor_sizes: Vec<u64> = if suite == TestName::Compare {
        suite::COMPARE_SIZES_BYTES.to_vec()
    } else {
        let mut sizes: Vec<u64> = suite::knobs()
            .iter()
            .filter(|knob| transports.contains(&knob.transport))
            .flat_map(|knob| knob.sizes.clone())
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    };
    report
        .preamble(suite.as_str(), cpus)
        .map_err(|error| format!("writing the table: {error}"))?;
    let floors = suite::measure_floors(cpus, &floor_sizes)?;
    report
        .floors(&floors)
        .map_err(|error| format!("writing the floors: {error}"))?;
    let mut table = report.take_table();
    report.set_progress(progress::Progress::new(0, args.progress));
    let mut run = suite::SuiteRun {
        cpus,
        timeout: Duration::from_secs(args.timeout),
        effort_percent,
        window: args.window,
        report,
        floors: &floors,
        // compare runs each transport once; crossover and --compare-profile alternate
        // their variants over several rounds (quick: one).
        rounds: if args.quick || suite == TestName::Compare {
            1
        } else {
            suite::CROSSOVER_ROUNDS
        },
    };
    let outcome = {
        let table_ref: Option<&mut dyn Write> = match table.as_mut() {
            Some(table) => Some(&mut **table),
            None => None,
        };
        match suite {
            TestName::Compare => suite::compare(&mut run, table_ref),
            _ if args.compare_profile => this_machines_profile().and_then(|tuned| {
                suite::compare_profile(&mut run, &transports, &tuned, table_ref).map(|_| ())
            }),
            _ => {
                suite::measure_crossovers(&mut run, &transports).and_then(|results| match table_ref
                {
                    Some(table) => suite::print_crossovers(table, &results)
                        .map_err(|error| format!("writing the table: {error}")),
                    None => Ok(()),
                })
            }
        }
    };
    report.restore_table(table);
    outcome?;
    let after = floor::measure_handoff(cpus[0], cpus[1])
        .map_err(|error| format!("measuring the hand-off again: {error}"))?;
    report
        .handoff_after(&floors.handoff, &after)
        .map_err(|error| format!("writing the floors: {error}"))
}

/// The thresholds of this machine's profile entry.
fn this_machines_profile() -> Result<Vec<(String, u64)>, String> {
    use quiver::profile::{profile_path, MachineIdentity, ProfileFile};
    let lookup = |name: &str| std::env::var(name).ok();
    let Some(path) = profile_path(&lookup) else {
        return Err("--compare-profile: no profile (QUIVER_PROFILE=off or no HOME)".to_string());
    };
    let file = ProfileFile::load(&path)
        .map_err(|error| error.to_string())?
        .ok_or_else(|| {
            format!(
                "--compare-profile: {} does not exist: run `quiver tune` first",
                path.display()
            )
        })?;
    let machine = MachineIdentity::current();
    let entry = file.entry_for(&machine).ok_or_else(|| {
        format!(
            "--compare-profile: {} has no entry for this machine ({}, {}): run `quiver tune`",
            path.display(),
            machine.hostname,
            machine.cpu_model
        )
    })?;
    Ok(entry
        .thresholds
        .iter()
        .map(|(name, value)| (name.clone(), *value))
        .collect())
}

/// Parses `--transports shm,tcp,udp` (quiver's transports only).
pub(crate) fn parse_transport_list(list: &str) -> Result<Vec<Transport>, String> {
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

/// Measures the crossovers for `quiver tune`: floors are not needed beyond what the
/// records carry, so only the hand-off and memcpy at the sweep sizes are measured.
pub(crate) fn measure_crossovers_for_tune(
    cpus: Option<&str>,
    transports: &[BenchTransport],
    quick: bool,
    timeout: Duration,
    json: Option<&str>,
) -> Result<Vec<CrossoverResult>, String> {
    let cpus = choose_cpus(cpus)?;
    let mut report = open_report(json)?;
    report.take_table();
    report.set_progress(progress::Progress::new(0, false));
    let mut sizes: Vec<u64> = suite::knobs()
        .iter()
        .flat_map(|knob| knob.sizes.clone())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let floors = floor::measure(cpus[0], cpus[1], &sizes)
        .map_err(|error| format!("measuring the floors: {error}"))?;
    let mut run = suite::SuiteRun {
        cpus,
        timeout,
        effort_percent: if quick {
            suite::QUICK_EFFORT_PERCENT
        } else {
            suite::CROSSOVER_EFFORT_PERCENT
        },
        window: DEFAULT_WINDOW,
        report: &mut report,
        floors: &floors,
        rounds: if quick { 1 } else { suite::CROSSOVER_ROUNDS },
    };
    suite::measure_crossovers(&mut run, transports)
}

/// Prints crossover results (for `quiver tune`).
pub(crate) fn print_crossovers(
    table: &mut dyn Write,
    results: &[CrossoverResult],
) -> io::Result<()> {
    suite::print_crossovers(table, results)
}

/// Runs the tests of one rank job: floors, the ranks, the hand-off again.
fn run_tests(
    args: &BenchArgs,
    plan: &Plan,
    cpus: [usize; 2],
    report: &mut Report,
) -> Result<(), String> {
    report.set_progress(progress::Progress::new(
        plan.rank_record_count(),
        args.progress,
    ));
    report
        .preamble(plan.transport.as_str(), cpus)
        .map_err(|error| format!("writing the table: {error}"))?;
    // memcpy floors are needed by the size sweeps (and shown by `floor`); rate needs only
    // the hand-off.
    let sweeps_sizes = plan
        .tests
        .iter()
        .any(|&test| test == TestName::Floor || test.sweeps_sizes());
    let memcpy_sizes: &[u64] = if sweeps_sizes { &plan.sizes } else { &[] };
    let mut floors = floor::measure(cpus[0], cpus[1], memcpy_sizes)
        .map_err(|error| format!("measuring the floors: {error}"))?;
    // The extended floors (syscall, wake-up, cross-memory attach) when asked for, or when
    // the cost model is measured (its overheads are compared with a system call).
    if plan.tests.contains(&TestName::Floor) || plan.tests.contains(&TestName::Loggp) {
        floors.extended = Some(
            floor::measure_extended(cpus[0], cpus[1], memcpy_sizes)
                .map_err(|error| format!("measuring the extended floors: {error}"))?,
        );
    }
    report
        .floors(&floors)
        .map_err(|error| format!("writing the floors: {error}"))?;
    if plan.needs_ranks() {
        let on = std::env::var("QUIVER_DETECT_MS").ok();
        let rounds = match (plan.interleave, args.detect) {
            (Some(interleave), _) => interleave.pairs,
            (None, Detect::Interleave) => DEFAULT_INTERLEAVE_PAIRS,
            (None, _) => args.rounds.unwrap_or(DEFAULT_DETECT_ROUNDS),
        };
        // --baseline interleave: quiver's and the raw baseline's blocks share one table
        // section per test (a column names the transport and the pair).
        report.set_interleaved_transports(plan.baseline_transport().is_some());
        let runs = args.detect.runs(rounds);
        report.add_points(plan.rank_record_count() * (runs.len() - 1));
        for (detect, round) in runs {
            // The ranks inherit the environment. Rust's own environment accesses (spawning
            // included) are serialised by std's lock; no C code of ours reads it meanwhile.
            match (detect, &on) {
                (Some(off), _) => std::env::set_var("QUIVER_DETECT_MS", off),
                (None, Some(value)) => std::env::set_var("QUIVER_DETECT_MS", value),
                (None, None) => std::env::remove_var("QUIVER_DETECT_MS"),
            }
            if args.detect == Detect::Both {
                let value = std::env::var("QUIVER_DETECT_MS");
                eprintln!(
                    "quiver bench: round {} of {rounds}: failure detection {} (QUIVER_DETECT_MS={})",
                    round.map_or(0, |round| round + 1),
                    if detect.is_some() { "off" } else { "on" },
                    value.as_deref().unwrap_or("default 1000")
                );
            }
            report.set_round(round);
            ranks::run(
                plan,
                cpus,
                &floors,
                report,
                Duration::from_secs(args.timeout),
            )?;
        }
        report.set_round(None);
        // The hand-off depends on where the host runs the vCPUs, which can change during
        // a run: measure it again and say so when it moved.
        let after = floor::measure_handoff(cpus[0], cpus[1])
            .map_err(|error| format!("measuring the hand-off again: {error}"))?;
        report
            .handoff_after(&floors.handoff, &after)
            .map_err(|error| format!("writing the floors: {error}"))?;
        if let Some(raw) = plan.baseline_transport() {
            report
                .baseline_summary(plan.transport.as_str(), raw.as_str(), rounds)
                .map_err(|error| format!("writing the baseline summary: {error}"))?;
        }
        if matches!(args.detect, Detect::Both | Detect::Interleave) {
            report
                .detect_summary(rounds, args.detect == Detect::Interleave)
                .map_err(|error| format!("writing the detection summary: {error}"))?;
        }
    }
    Ok(())
}

/// Validates the options into a plan.
fn plan_from_args(args: &BenchArgs) -> Result<Plan, String> {
    let Some(transport) = Transport::from_name(&args.transport) else {
        let names: Vec<&str> = Transport::ALL.iter().map(|t| t.as_str()).collect();
        return Err(format!(
            "unknown transport '{}' (available: {})",
            args.transport,
            names.join(", ")
        ));
    };
    let mut tests = if args.tests.is_empty() {
        vec![
            TestName::Floor,
            TestName::Pingpong,
            TestName::Bw,
            TestName::Rate,
        ]
    } else {
        args.tests.clone()
    };
    tests.sort_unstable();
    tests.dedup();
    let sizes = match &args.sizes {
        Some(list) => sizes::parse_size_list(list).map_err(|error| format!("--sizes: {error}"))?,
        None => DEFAULT_SIZES_BYTES.to_vec(),
    };
    if args
        .iters
        .is_some_and(|iters| !(1..=MAX_ITERS).contains(&iters))
    {
        return Err(format!("--iters must be between 1 and {MAX_ITERS}"));
    }
    if !(1..=MAX_WINDOW).contains(&args.window) {
        return Err(format!("--window must be between 1 and {MAX_WINDOW}"));
    }
    let networked = matches!(transport, Transport::Udp | Transport::Tcp);
    let netns = match &args.netns {
        None => None,
        Some(_) if !networked => {
            return Err("--netns needs --transport udp or tcp".to_string());
        }
        Some(list) => match list.split(',').map(str::trim).collect::<Vec<_>>()[..] {
            [a, b] if !a.is_empty() && !b.is_empty() => Some([a.to_string(), b.to_string()]),
            _ => return Err(format!("--netns {list:?}: expected two names, A,B")),
        },
    };
    let addrs = match (&args.addrs, &netns) {
        (Some(_), _) if !networked => {
            return Err("--addrs needs --transport udp or tcp".to_string());
        }
        (Some(list), _) => Some(parse_two_addrs(list)?),
        (None, Some(_)) => Some(parse_two_addrs("10.77.0.1:7300,10.77.0.2:7300")?),
        (None, None) => None,
    };
    if let Some(suite) = tests.iter().find(|test| test.is_suite()) {
        if tests.len() > 1 {
            return Err(format!(
                "{} runs its own tests: name it alone",
                suite.as_str()
            ));
        }
    }
    if transport.is_raw() && tests.contains(&TestName::Pool) {
        return Err(
            "pool measures quiver's receive buffers: use --transport shm, udp or tcp".to_string(),
        );
    }
    if transport == Transport::RawUdp && tests.contains(&TestName::Bibw) {
        return Err("bibw is not measured over raw-udp (its flow control is one-way)".to_string());
    }
    if !(1..=1000).contains(&args.effort) {
        return Err("--effort must be between 1 and 1000".to_string());
    }
    let interleave_sides = match (args.detect, args.baseline) {
        (Detect::Both | Detect::Interleave, Some(_)) => {
            return Err(
                "--baseline interleave or tcp runs quiver with detection as configured: not with --detect both or interleave"
                    .to_string(),
            );
        }
        (_, Some(Baseline::Interleave)) => Some(Interleaved::Baseline),
        (_, Some(Baseline::Tcp)) => Some(Interleaved::Tcp),
        (Detect::Interleave, None) => Some(Interleaved::Detection),
        _ => None,
    };
    match args.rounds {
        Some(rounds)
            if tests.contains(&TestName::Wire) && !(1..=MAX_INTERLEAVE_PAIRS).contains(&rounds) =>
        {
            return Err(format!(
                "--rounds must be between 1 and {MAX_INTERLEAVE_PAIRS}"
            ));
        }
        Some(_) if tests.contains(&TestName::Wire) => {}
        Some(_) if interleave_sides.is_none() && args.detect != Detect::Both => {
            return Err(
                "--rounds needs --detect both or interleave, or --baseline interleave".to_string(),
            );
        }
        Some(rounds) => {
            let most = match interleave_sides {
                Some(_) => MAX_INTERLEAVE_PAIRS,
                None => MAX_DETECT_ROUNDS,
            };
            if !(1..=most).contains(&rounds) {
                return Err(format!("--rounds must be between 1 and {most}"));
            }
        }
        _ => {}
    }
    let plan = Plan {
        tests,
        transport,
        sizes,
        iters: args.iters,
        window: args.window,
        netns,
        addrs,
        settings: parse_settings(&args.settings)?,
        effort_percent: args.effort,
        interleave: interleave_sides.map(|sides| Interleave {
            pairs: args.rounds.unwrap_or(DEFAULT_INTERLEAVE_PAIRS),
            sides,
        }),
    };
    if let Some(sides @ (Interleaved::Tcp | Interleaved::Baseline)) = interleave_sides {
        // --baseline tcp (udp only) and --baseline interleave (udp or tcp against raw).
        let (mode, compares, binds) = match sides {
            Interleaved::Tcp => (
                "tcp",
                "quiver's udp with quiver's tcp: use --transport udp",
                "the tcp context binds 127.0.0.1",
            ),
            _ => (
                "interleave",
                "quiver's udp or tcp with its raw-socket baseline: use --transport udp or tcp",
                "the raw baselines bind 127.0.0.1",
            ),
        };
        let fits = match sides {
            Interleaved::Tcp => plan.transport == Transport::Udp,
            _ => plan.transport.raw_baseline().is_some(),
        };
        if !fits {
            return Err(format!(
                "--baseline {mode} compares {compares}, not {}",
                plan.transport.as_str()
            ));
        }
        if plan.netns.is_some() || plan.addrs.is_some() {
            return Err(format!(
                "--baseline {mode} runs over loopback ({binds}): not with --netns or --addrs"
            ));
        }
        if let Some(test) = plan.tests.iter().find(|test| {
            !matches!(
                test,
                TestName::Floor | TestName::Pingpong | TestName::Bw | TestName::Rate
            )
        }) {
            return Err(format!(
                "--baseline {mode} splits pingpong, bw and rate points into blocks; {} is not one of them",
                test.as_str()
            ));
        }
    } else if plan.interleave.is_some() {
        if plan.transport.is_raw() {
            return Err(
                "--detect interleave measures quiver's failure detection: use --transport shm, udp or tcp"
                    .to_string(),
            );
        }
        if let Some(test) = plan
            .rank_tests()
            .find(|test| !matches!(test, TestName::Pingpong | TestName::Bw | TestName::Rate))
        {
            return Err(format!(
                "--detect interleave splits pingpong, bw and rate points into blocks; {} is not one of them",
                test.as_str()
            ));
        }
    }
    let window_bytes = plan.window.saturating_mul(plan.max_message_bytes());
    let windowed = plan.tests.contains(&TestName::Bw)
        || plan.tests.contains(&TestName::Bibw)
        || plan.tests.contains(&TestName::Loggp);
    if windowed && window_bytes > MAX_WINDOW_BYTES {
        return Err(format!(
            "bw would hold --window {} x {} = {} in posted buffers (at most {}); use a smaller window or size",
            plan.window,
            sizes::format_size(plan.max_message_bytes()),
            sizes::format_size(window_bytes),
            sizes::format_size(MAX_WINDOW_BYTES)
        ));
    }
    Ok(plan)
}

/// The two CPUs to pin the ranks (and the hand-off threads) to.
fn choose_cpus(requested: Option<&str>) -> Result<[usize; 2], String> {
    let allowed = crate::launch::allowed_cpus()
        .map_err(|error| format!("cannot read the CPU affinity: {error}"))?;
    let cpus = match requested {
        Some(text) => parse_cpu_pair(text)?,
        None => match allowed.as_slice() {
            [first, second, ..] => [*first, *second],
            _ => {
                return Err(format!(
                    "the bench needs two CPUs to pin its two busy-polling ranks to; this process may use only {allowed:?}"
                ))
            }
        },
    };
    if let Some(cpu) = cpus.iter().find(|cpu| !allowed.contains(cpu)) {
        return Err(format!(
            "--cpus: CPU {cpu} is not one this process may use ({allowed:?})"
        ));
    }
    Ok(cpus)
}

fn parse_cpu_pair(text: &str) -> Result<[usize; 2], String> {
    let parsed: Result<Vec<usize>, _> = text.split(',').map(|cpu| cpu.trim().parse()).collect();
    match parsed.as_deref() {
        Ok([first, second]) if first != second => Ok([*first, *second]),
        Ok([_, _]) => Err("--cpus: the two CPUs must differ".to_string()),
        _ => Err(format!(
            "--cpus: expected two CPU numbers such as 0,1, got '{text}'"
        )),
    }
}

/// Table to stdout unless `--json -`; JSON lines to stdout (`-`) or a file.
fn open_report(json: Option<&str>) -> Result<Report, String> {
    let stdout = || -> Box<dyn Write> { Box::new(io::stdout()) };
    match json {
        None => Ok(Report::new(Some(stdout()), None)),
        Some("-") => Ok(Report::new(None, Some(stdout()))),
        Some(path) => {
            let file = File::create(path)
                .map_err(|error| format!("--json: cannot create '{path}': {error}"))?;
            Ok(Report::new(
                Some(stdout()),
                Some(Box::new(BufWriter::new(file))),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct TestCli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(arguments: &[&str]) -> Result<BenchArgs, clap::Error> {
        let mut all = vec!["bench"];
        all.extend_from_slice(arguments);
        TestCli::try_parse_from(all).map(|cli| cli.bench)
    }

    fn plan(arguments: &[&str]) -> Result<Plan, String> {
        plan_from_args(&parse(arguments).expect("command line parses"))
    }

    #[test]
    fn defaults_run_every_test_over_the_default_sweep() {
        let plan = plan(&[]).expect("valid");
        assert_eq!(
            plan.tests,
            vec![
                TestName::Floor,
                TestName::Pingpong,
                TestName::Bw,
                TestName::Rate
            ]
        );
        assert_eq!(plan.sizes, DEFAULT_SIZES_BYTES.to_vec());
        assert_eq!(plan.transport, Transport::Shm);
        assert_eq!(plan.window, 64);
        assert_eq!(plan.iters, None);
        assert!(plan.settings.is_empty());
        assert_eq!(plan.effort_percent, 100);
    }

    #[test]
    fn settings_and_suites_are_validated() {
        let plan = plan(&["--set", "QUIVER_SHM_EAGER_MAX=64K", "pingpong"]).expect("valid");
        assert_eq!(
            plan.settings,
            vec![("QUIVER_SHM_EAGER_MAX".to_string(), "64K".to_string())]
        );
        assert!(super::tests::plan(&["--set", "PATH=/"]).is_err());
        assert!(super::tests::plan(&["--set", "QUIVER_RANK=1"]).is_err());
        assert!(super::tests::plan(&["--set", "QUIVER_X"]).is_err());
        assert!(super::tests::plan(&["compare", "pingpong"]).is_err());
        assert!(super::tests::plan(&["compare"]).is_ok());
        assert!(super::tests::plan(&["pool", "--transport", "raw-tcp"]).is_err());
        assert!(super::tests::plan(&["bibw", "--transport", "raw-udp"]).is_err());
        assert!(super::tests::plan(&["bibw", "--transport", "raw-tcp"]).is_ok());
    }

    #[test]
    fn tests_are_ordered_and_deduplicated() {
        let plan = plan(&["rate", "pingpong", "rate"]).expect("valid");
        assert_eq!(plan.tests, vec![TestName::Pingpong, TestName::Rate]);
        assert!(parse(&["latency"]).is_err());
    }

    #[test]
    fn options_are_validated() {
        let plan = plan(&["--sizes", "1M,8", "--iters", "200", "--window", "8"]).expect("valid");
        assert_eq!(plan.sizes, vec![8, 1 << 20]);
        assert_eq!(plan.iters, Some(200));
        assert_eq!(plan.window, 8);
        let error = super::tests::plan(&["--transport", "udx"]).expect_err("no such transport");
        assert!(error.contains("unknown transport 'udx'"), "{error}");
        assert_eq!(
            super::tests::plan(&["--transport", "udp"]).map(|plan| plan.transport),
            Ok(Transport::Udp)
        );
        let error = super::tests::plan(&["--netns", "a,b"]).expect_err("shm in netns");
        assert!(error.contains("udp or tcp"), "{error}");
        let plan = super::tests::plan(&["--transport", "tcp", "--netns", "a,b"]).expect("netns");
        assert_eq!(plan.netns, Some(["a".to_string(), "b".to_string()]));
        assert_eq!(plan.addrs.map(|a| a.len()), Some(2));
        let error = super::tests::plan(&["--transport", "tcp", "--addrs", "1.2.3.4:5"])
            .expect_err("one address");
        assert!(error.contains("two addresses"), "{error}");
        assert_eq!(
            super::tests::plan(&["--transport", "raw-udp"]).map(|plan| plan.transport),
            Ok(Transport::RawUdp)
        );
        assert_eq!(
            super::tests::plan(&["--transport", "raw-tcp"]).map(|plan| plan.transport),
            Ok(Transport::RawTcp)
        );
        assert!(super::tests::plan(&["--sizes", "8,1X"]).is_err());
        assert!(super::tests::plan(&["--iters", "0"]).is_err());
        assert!(super::tests::plan(&["--iters", "10000001"]).is_err());
        assert!(super::tests::plan(&["--iters", "10000000"]).is_ok());
        assert!(super::tests::plan(&["--window", "0"]).is_err());
        assert!(super::tests::plan(&["bw", "--sizes", "1G", "--window", "64"]).is_err());
        assert!(super::tests::plan(&["pingpong", "--sizes", "1G"]).is_ok());
        assert!(parse(&["--iters", "-1"]).is_err());
    }

    #[test]
    fn worker_args_parse_back_to_the_same_plan() {
        let original = plan(&[
            "--sizes",
            "8,64K",
            "--iters",
            "200",
            "--set",
            "QUIVER_SPIN_US=100",
            "--effort",
            "20",
            "bw",
            "pingpong",
            "loggp",
        ])
        .expect("valid");
        let worker_args = original.worker_args();
        assert_eq!(worker_args[0], "bench");
        let arguments: Vec<&str> = worker_args[1..].iter().map(String::as_str).collect();
        let parsed = parse(&arguments).expect("worker command line parses");
        assert!(parsed.worker);
        assert_eq!(plan_from_args(&parsed).expect("valid"), original);
    }

    #[test]
    fn wire_runs_alone_with_its_own_rounds() {
        let wire = plan(&["wire", "--rounds", "6", "--iters", "500"]).expect("valid");
        assert_eq!(wire.tests, vec![TestName::Wire]);
        assert!(plan(&["wire"]).is_ok());
        assert!(plan(&["wire", "pingpong"]).is_err());
        assert!(plan(&["wire", "--rounds", "0"]).is_err());
        assert!(plan(&["wire", "--rounds", "1001"]).is_err());
    }

    #[test]
    fn detect_rounds_alternate_on_and_off() {
        assert_eq!(Detect::On.runs(6), vec![(None, None)]);
        assert_eq!(Detect::Off.runs(6), vec![(Some("0"), None)]);
        assert_eq!(
            Detect::Both.runs(2),
            vec![
                (None, Some(0)),
                (Some("0"), Some(0)),
                (None, Some(1)),
                (Some("0"), Some(1))
            ]
        );
        assert_eq!(Detect::Both.runs(6).len(), 12);
        assert!(plan(&["--detect", "both", "--rounds", "6"]).is_ok());
        assert!(plan(&["--rounds", "6"]).is_err());
        assert!(plan(&["--detect", "both", "--rounds", "0"]).is_err());
        assert!(plan(&["--detect", "both", "--rounds", "101"]).is_err());
        assert!(plan(&["pingpong", "--detect", "interleave", "--rounds", "1000"]).is_ok());
        assert!(plan(&["pingpong", "--detect", "interleave", "--rounds", "1001"]).is_err());
        // interleave: one launch, blocks inside the ranks.
        assert_eq!(Detect::Interleave.runs(6), vec![(None, None)]);
        let interleaved = plan(&["pingpong", "--detect", "interleave", "--rounds", "8"]);
        assert_eq!(
            interleaved.expect("valid").interleave,
            Some(Interleave {
                pairs: 8,
                sides: Interleaved::Detection
            })
        );
        let default_pairs = plan(&["bw", "rate", "--detect", "interleave"]).expect("valid");
        assert_eq!(
            default_pairs.interleave.map(|interleave| interleave.pairs),
            Some(DEFAULT_INTERLEAVE_PAIRS)
        );
        assert!(plan(&["loggp", "--detect", "interleave"]).is_err());
        assert!(plan(&["--transport", "raw-udp", "--detect", "interleave"]).is_err());
    }

    #[test]
    fn baseline_interleave_is_validated() {
        let udp = plan(&["--transport", "udp", "--baseline", "interleave"]).expect("valid");
        assert_eq!(
            udp.interleave,
            Some(Interleave {
                pairs: DEFAULT_INTERLEAVE_PAIRS,
                sides: Interleaved::Baseline
            })
        );
        assert_eq!(udp.baseline_transport(), Some(Transport::RawUdp));
        let tcp = plan(&[
            "pingpong",
            "bw",
            "--transport",
            "tcp",
            "--baseline",
            "interleave",
            "--rounds",
            "20",
            "--sizes",
            "8,1M",
        ])
        .expect("valid");
        assert_eq!(tcp.interleave.map(|interleave| interleave.pairs), Some(20));
        assert_eq!(tcp.baseline_transport(), Some(Transport::RawTcp));
        assert!(plan(&[
            "--transport",
            "tcp",
            "--baseline",
            "interleave",
            "--rounds",
            "1000"
        ])
        .is_ok());
        let refused = |arguments: &[&str], expected: &str| {
            let error = super::tests::plan(arguments).expect_err("refused");
            assert!(error.contains(expected), "{arguments:?}: {error}");
        };
        refused(
            &[
                "--rounds",
                "1001",
                "--transport",
                "tcp",
                "--baseline",
                "interleave",
            ],
            "--rounds must be between 1 and 1000",
        );
        refused(
            &[
                "--rounds",
                "0",
                "--transport",
                "tcp",
                "--baseline",
                "interleave",
            ],
            "--rounds must be between",
        );
        for transport in ["shm", "raw-udp", "raw-tcp"] {
            refused(
                &["--transport", transport, "--baseline", "interleave"],
                "use --transport udp or tcp",
            );
        }
        let udp_tcp = plan(&["bw", "--transport", "udp", "--baseline", "tcp"]).expect("valid");
        assert_eq!(
            udp_tcp.interleave,
            Some(Interleave {
                pairs: DEFAULT_INTERLEAVE_PAIRS,
                sides: Interleaved::Tcp
            })
        );
        assert_eq!(udp_tcp.baseline_transport(), Some(Transport::Tcp));
        for transport in ["shm", "tcp", "raw-udp", "raw-tcp"] {
            refused(
                &["--transport", transport, "--baseline", "tcp"],
                "use --transport udp",
            );
        }
        refused(
            &["--transport", "udp", "--baseline", "tcp", "loggp"],
            "loggp is not one of them",
        );
        refused(
            &[
                "--transport",
                "udp",
                "--baseline",
                "tcp",
                "--detect",
                "both",
            ],
            "not with --detect both or interleave",
        );
        for detect in ["both", "interleave"] {
            refused(
                &[
                    "--transport",
                    "udp",
                    "--baseline",
                    "interleave",
                    "--detect",
                    detect,
                ],
                "not with --detect both or interleave",
            );
        }
        assert!(plan(&[
            "--transport",
            "udp",
            "--baseline",
            "interleave",
            "--detect",
            "off"
        ])
        .is_ok());
        for test in ["bibw", "loggp", "pool", "compare", "crossover"] {
            refused(
                &[test, "--transport", "udp", "--baseline", "interleave"],
                "splits pingpong, bw and rate",
            );
        }
        refused(
            &[
                "--transport",
                "udp",
                "--baseline",
                "interleave",
                "--netns",
                "a,b",
            ],
            "loopback",
        );
        refused(
            &[
                "--transport",
                "tcp",
                "--baseline",
                "interleave",
                "--addrs",
                "127.0.0.1:1,127.0.0.1:2",
            ],
            "loopback",
        );
        assert!(parse(&["--baseline", "both"]).is_err());
        // The ranks get the same plan back from their command line.
        let arguments_owned = tcp.worker_args();
        let arguments: Vec<&str> = arguments_owned[1..].iter().map(String::as_str).collect();
        assert_eq!(plan_from_args(&parse(&arguments).expect("parses")), Ok(tcp));
    }

    #[test]
    fn cpu_pairs() {
        assert_eq!(parse_cpu_pair("0,1"), Ok([0, 1]));
        assert_eq!(parse_cpu_pair(" 3 , 2 "), Ok([3, 2]));
        assert!(parse_cpu_pair("1,1").is_err());
        assert!(parse_cpu_pair("1").is_err());
        assert!(parse_cpu_pair("0,1,2").is_err());
        assert!(parse_cpu_pair("a,b").is_err());
    }
}
