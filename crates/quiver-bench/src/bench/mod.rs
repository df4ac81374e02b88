//! `quiver-bench bench`: the bench's tests between two ranks (`quiver bench`, with the
//! same options and the same code), plus the lab's own:
//!
//! - `loggp`: the LogGP cost model per size (o_s, o_r, L, g; G fitted), `loggp.rs`;
//! - `pool`: `recv_pooled` against a fresh receive buffer per message, `pool.rs`;
//! - `--detect both|interleave`: failure detection on against off, in rounds of launches
//!   or in pairs of blocks of one launch, with a paired summary (`detect.rs`);
//! - `--baseline interleave|tcp`: quiver's udp or tcp against its raw-socket baseline, or
//!   quiver's udp against its tcp, in pairs of blocks of one launch, with a paired summary
//!   and the targets (`baseline.rs`).
//!
//! Layout: this file (the command line, its validation, the parent's run), `plan`
//! (what a launch measures), `record` (the lab's records), `worker` (the rank program),
//! `baseline_link` (what a paired block runs over), `loggp`, `pool`, `paired` (pairing
//! and ratios), `detect` and `baseline` (the two summaries).

mod baseline;
mod baseline_link;
mod detect;
pub(crate) mod loggp;
pub(crate) mod paired;
pub(crate) mod plan;
mod pool;
pub(crate) mod record;
mod worker;

use std::time::Duration;

use quiver_cli::bench::args::{
    check_window_bytes, worker_exit, BenchOptions, EXIT_FAILURE, EXIT_USAGE,
};
use quiver_cli::bench::parent::{choose_cpus, finish, handoff_again, measure_floors, open_report};
use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::progress::Progress;
use quiver_cli::bench::ranks;
use quiver_cli::bench::report::Report;

use plan::{Interleave, Interleaved, LabPlan, LabTest};
use record::LabRecord;

/// `--rounds` when not given (--detect both).
const DEFAULT_DETECT_ROUNDS: u32 = 2;
/// `--rounds` when not given (--detect interleave, --baseline interleave).
pub(crate) const DEFAULT_INTERLEAVE_PAIRS: u32 = 10;
/// Largest `--rounds` of --detect both (each round launches the ranks twice).
const MAX_DETECT_ROUNDS: u32 = 100;
/// Largest `--rounds` of --detect interleave and --baseline interleave (pairs of blocks
/// inside one launch).
pub(crate) const MAX_INTERLEAVE_PAIRS: u32 = 1000;

/// Command line of `quiver-bench bench`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LabBenchArgs {
    /// Tests to run, in this order: floor, pingpong, bw, bibw, rate, loggp, pool (default:
    /// floor, pingpong, bw, rate). The floors are measured in every run; `floor` alone
    /// measures only them.
    #[arg(value_enum, value_name = "TEST")]
    tests: Vec<LabTest>,

    /// The options of `quiver bench`.
    #[command(flatten)]
    options: BenchOptions,

    /// Failure detection in the ranks: on (QUIVER_DETECT_MS as set, default 1000 ms), off
    /// (QUIVER_DETECT_MS=0), both (the tests run in --rounds rounds of on then off, each a
    /// launch of the ranks), or interleave (one launch; every point of pingpong, bw and rate
    /// split into --rounds pairs of blocks, on and off, switched with
    /// `Endpoint::set_detection`, so launch-to-launch differences cancel). both and
    /// interleave end with a summary of on/off with a 95% interval. Every point also
    /// reports the liveness looks both ranks made and the share of the timed run they took.
    #[arg(long, value_enum, value_name = "on|off|both|interleave", default_value_t = Detect::On)]
    detect: Detect,

    /// --detect both: rounds of on, off [default: 2]; --detect interleave and --baseline:
    /// pairs of blocks per point [default: 10, at most 1000]. 6 or more give a 95% interval
    /// of the ratio.
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,

    /// interleave: measure quiver (--transport udp or tcp) against its raw-socket baseline
    /// (raw-udp or raw-tcp) in ONE launch of the ranks: every pingpong, bw and rate point
    /// runs as --rounds pairs of blocks, one over quiver and one over the raw sockets (each
    /// pair's order from a fixed pseudo-random sequence), so both share the launch's vCPU
    /// placement and any drift during it. Ends with a summary of the paired quiver/raw
    /// ratios with a 95% interval and the targets (8 B latency within 5% of raw; tcp 1 MiB
    /// bandwidth at least 95% of raw-tcp's). Only pingpong, bw and rate (other tests are
    /// refused), over loopback (not with --netns, --addrs or --detect both/interleave).
    /// tcp: the same with quiver's tcp as the baseline of quiver's udp (--transport udp):
    /// each rank opens a second, tcp-only context, and the summary gives udp / tcp with
    /// the target that udp's 1 MiB bandwidth over loopback is at least tcp's.
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

/// `--detect`: failure detection in the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Detect {
    /// As configured (on by default).
    On,
    /// Off: QUIVER_DETECT_MS=0.
    Off,
    /// On and off, alternating, in --rounds rounds.
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

/// Runs `quiver-bench bench`; returns the process exit code (0 ok, 1 failed, 2 bad usage).
pub(crate) fn main(args: LabBenchArgs) -> i32 {
    let plan = match plan_from_args(&args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver-bench bench: {message}");
            return EXIT_USAGE;
        }
    };
    if args.options.worker {
        return worker_exit("quiver-bench bench", worker::run(&plan));
    }
    let cpus = match choose_cpus(args.options.cpus.as_deref()) {
        Ok(cpus) => cpus,
        Err(message) => {
            eprintln!("quiver-bench bench: {message}");
            return EXIT_USAGE;
        }
    };
    match run(&args, &plan, cpus) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver-bench bench: {message}");
            EXIT_FAILURE
        }
    }
}

/// Measures the floors, runs the ranks' tests (once, or in rounds of `--detect both`),
/// reports everything and ends with the paired summaries.
fn run(args: &LabBenchArgs, plan: &LabPlan, cpus: [usize; 2]) -> Result<(), String> {
    let options = &args.options;
    let mut report: Report<LabRecord> = open_report(options.json.as_deref())?;
    report.set_style(options.format);
    report.set_progress(Progress::new(plan.rank_record_count(), options.progress));
    report
        .preamble(plan.base.transport.as_str(), cpus)
        .map_err(|error| format!("writing the table: {error}"))?;
    // memcpy floors are needed by the size sweeps (and shown by `floor`); rate needs only
    // the hand-off. The extended floors when asked for, or when the cost model is measured
    // (its overheads are compared with a system call).
    let memcpy_sizes: &[u64] = if plan.sweeps_sizes() {
        &plan.base.sizes
    } else {
        &[]
    };
    let extended = plan.has(LabTest::Floor) || plan.has(LabTest::Loggp);
    let floors = measure_floors(cpus, memcpy_sizes, extended, &mut report)?;
    if !plan.needs_ranks() {
        return finish(report, options.plot.as_deref());
    }
    let on = std::env::var("QUIVER_DETECT_MS").ok();
    let rounds = match plan.interleave {
        Some(interleave) => interleave.pairs,
        None => args.rounds.unwrap_or(DEFAULT_DETECT_ROUNDS),
    };
    // Paired against a baseline: both transports' blocks share one table section per
    // test (a column names the transport and the pair).
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
                "quiver-bench bench: round {} of {rounds}: failure detection {} (QUIVER_DETECT_MS={})",
                round.map_or(0, |round| round + 1),
                if detect.is_some() { "off" } else { "on" },
                value.as_deref().unwrap_or("default 1000")
            );
        }
        report.set_round(round);
        ranks::run(
            &plan.rank_job(),
            cpus,
            &floors,
            &mut report,
            Duration::from_secs(options.timeout),
        )?;
    }
    report.set_round(None);
    handoff_again(cpus, &floors, &mut report)?;
    if let Some(baseline) = plan.baseline_transport() {
        baseline::summary(&mut report, plan.base.transport, baseline, rounds)
            .map_err(|error| format!("writing the baseline summary: {error}"))?;
    }
    if matches!(args.detect, Detect::Both | Detect::Interleave) {
        detect::summary(&mut report, rounds, args.detect == Detect::Interleave)
            .map_err(|error| format!("writing the detection summary: {error}"))?;
    }
    finish(report, options.plot.as_deref())
}

/// Validates the command line into a plan: the bench's validation, then the lab's.
fn plan_from_args(args: &LabBenchArgs) -> Result<LabPlan, String> {
    let mut tests = if args.tests.is_empty() {
        LabTest::DEFAULT.to_vec()
    } else {
        args.tests.clone()
    };
    tests.sort_unstable();
    tests.dedup();
    let everyday = tests.iter().filter_map(|test| test.everyday()).collect();
    let mut base = args.options.plan(everyday)?;
    if base.transport.is_raw() && tests.contains(&LabTest::Pool) {
        return Err(
            "pool measures quiver's receive buffers: use --transport shm, udp or tcp".to_string(),
        );
    }
    let sides = interleaved_sides(args)?;
    check_rounds(args, sides)?;
    let interleave = sides.map(|sides| Interleave {
        pairs: args.rounds.unwrap_or(DEFAULT_INTERLEAVE_PAIRS),
        sides,
    });
    if let Some(interleave) = interleave {
        base.blocks_per_point = 2 * interleave.pairs;
    }
    let plan = LabPlan {
        base,
        tests,
        interleave,
    };
    match sides {
        Some(sides @ (Interleaved::Tcp | Interleaved::Baseline)) => check_baseline(&plan, sides)?,
        Some(Interleaved::Detection) => check_detect_interleave(&plan)?,
        None => {}
    }
    if plan.has(LabTest::Loggp) {
        check_window_bytes(&plan.base)?;
    }
    Ok(plan)
}

/// What the blocks of a pair compare, when `--detect interleave` or `--baseline` split
/// every point into pairs.
fn interleaved_sides(args: &LabBenchArgs) -> Result<Option<Interleaved>, String> {
    match (args.detect, args.baseline) {
        (Detect::Both | Detect::Interleave, Some(_)) => Err(
            "--baseline interleave or tcp runs quiver with detection as configured: not with --detect both or interleave"
                .to_string(),
        ),
        (_, Some(Baseline::Interleave)) => Ok(Some(Interleaved::Baseline)),
        (_, Some(Baseline::Tcp)) => Ok(Some(Interleaved::Tcp)),
        (Detect::Interleave, None) => Ok(Some(Interleaved::Detection)),
        _ => Ok(None),
    }
}

/// `--rounds` only where it means something, within its range.
fn check_rounds(args: &LabBenchArgs, sides: Option<Interleaved>) -> Result<(), String> {
    let Some(rounds) = args.rounds else {
        return Ok(());
    };
    if sides.is_none() && args.detect != Detect::Both {
        return Err(
            "--rounds needs --detect both or interleave, or --baseline interleave".to_string(),
        );
    }
    let most = match sides {
        Some(_) => MAX_INTERLEAVE_PAIRS,
        None => MAX_DETECT_ROUNDS,
    };
    if !(1..=most).contains(&rounds) {
        return Err(format!("--rounds must be between 1 and {most}"));
    }
    Ok(())
}

/// `--baseline tcp` (udp only) and `--baseline interleave` (udp or tcp against raw): over
/// loopback, pingpong, bw and rate only.
fn check_baseline(plan: &LabPlan, sides: Interleaved) -> Result<(), String> {
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
    let transport = plan.base.transport;
    let fits = match sides {
        Interleaved::Tcp => transport == Transport::Udp,
        _ => transport.raw_baseline().is_some(),
    };
    if !fits {
        return Err(format!(
            "--baseline {mode} compares {compares}, not {transport}"
        ));
    }
    if plan.base.netns.is_some() || plan.base.addrs.is_some() {
        return Err(format!(
            "--baseline {mode} runs over loopback ({binds}): not with --netns or --addrs"
        ));
    }
    if let Some(test) = plan.tests.iter().find(|test| {
        !matches!(
            test,
            LabTest::Floor | LabTest::Pingpong | LabTest::Bw | LabTest::Rate
        )
    }) {
        return Err(format!(
            "--baseline {mode} splits pingpong, bw and rate points into blocks; {} is not one of them",
            test.as_str()
        ));
    }
    Ok(())
}

/// `--detect interleave`: quiver's transports only, pingpong, bw and rate only.
fn check_detect_interleave(plan: &LabPlan) -> Result<(), String> {
    if plan.base.transport.is_raw() {
        return Err(
            "--detect interleave measures quiver's failure detection: use --transport shm, udp or tcp"
                .to_string(),
        );
    }
    if let Some(test) = plan
        .rank_tests()
        .find(|test| !matches!(test, LabTest::Pingpong | LabTest::Bw | LabTest::Rate))
    {
        return Err(format!(
            "--detect interleave splits pingpong, bw and rate points into blocks; {} is not one of them",
            test.as_str()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
