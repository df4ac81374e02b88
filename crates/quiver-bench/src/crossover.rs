//! `quiver-bench crossover`: for each transport the size where its copy path and its
//! zero-copy path cross, measured by the bench's crossover code (`quiver tune`'s), shown
//! as a table per transport with the least-cost threshold; and, with
//! `--compare-profile`, this machine's profile (written by `quiver tune`) against the
//! built-in defaults, same sizes, to show tuned thresholds are never worse where they
//! change the path.

use std::io::Write;

use quiver_cli::bench::crossover::{
    figure, knob_sizes, knobs, measure_crossovers, median_records, parse_transport_list,
    print_crossovers, significant, Knob, SuiteRun, CROSSOVER_EFFORT_PERCENT, CROSSOVER_ROUNDS,
    NOISE_TOLERANCE,
};
use quiver_cli::bench::plan::{TestName, Transport};
use quiver_cli::bench::record::Record;
use quiver_cli::bench::sizes::format_size;

use crate::suite::{run_suite, SuiteOptions, SuiteShape};

/// Command line of `quiver-bench crossover`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CrossoverArgs {
    /// The transports whose switch point is measured.
    #[arg(long, value_name = "LIST", default_value = "shm,tcp,udp")]
    transports: String,

    /// Measure this machine's profile (from `quiver tune`) against the built-in defaults
    /// instead of the two paths.
    #[arg(long)]
    compare_profile: bool,

    /// The suite's options.
    #[command(flatten)]
    options: SuiteOptions,
}

/// Runs `quiver-bench crossover`.
///
/// # Errors
/// Bad options, no profile (`--compare-profile`), or a failed job.
pub(crate) fn run(args: &CrossoverArgs) -> Result<(), String> {
    let transports = parse_transport_list(&args.transports)?;
    let sizes = knob_sizes(&transports);
    let shape = SuiteShape {
        name: "crossover",
        effort_percent: CROSSOVER_EFFORT_PERCENT,
        rounds: CROSSOVER_ROUNDS,
        floor_sizes: &sizes,
    };
    let compare = args.compare_profile;
    run_suite(
        &args.options,
        shape,
        |run: &mut SuiteRun<'_, Record>, table: Option<&mut dyn Write>| {
            if compare {
                let tuned = this_machines_profile()?;
                compare_profile(run, &transports, &tuned, table).map(|_| ())
            } else {
                let results = measure_crossovers(run, &transports)?;
                match table {
                    Some(table) => print_crossovers(table, &results)
                        .map_err(|error| format!("writing the table: {error}")),
                    None => Ok(()),
                }
            }
        },
    )
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

/// Defaults against the thresholds of this machine's profile: one job per transport and
/// side, same sizes; prints each size's tuned/default ratios and a verdict. Knobs whose
/// profile value equals the default are skipped (nothing to compare).
fn compare_profile(
    run: &mut SuiteRun<'_, Record>,
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
        let (default_rounds, tuned_rounds) = measure_rounds(run, &knob, value)?;
        never_worse &= judge_knob(&knob, value, (&default_rounds, &tuned_rounds), &mut lines);
    }
    run.report.clear_progress();
    if let Some(table) = table {
        for line in &lines {
            writeln!(table, "{line}").map_err(|error| error.to_string())?;
        }
    }
    Ok(never_worse)
}

/// One variant's records, one list per round.
type Rounds = Vec<Vec<Record>>;

/// The knob's default and tuned jobs, alternating, in `run.rounds` steady rounds: the
/// records of every round, default's and tuned's.
fn measure_rounds(
    run: &mut SuiteRun<'_, Record>,
    knob: &Knob,
    value: u64,
) -> Result<(Rounds, Rounds), String> {
    let tests = vec![TestName::Pingpong, TestName::Bw];
    let settings = vec![(knob.setting.to_string(), value.to_string())];
    let default_job = run
        .plan(knob.transport, tests.clone(), &knob.sizes, &[])
        .rank_job();
    let tuned_job = run
        .plan(knob.transport, tests, &knob.sizes, &settings)
        .rank_job();
    let (mut default_rounds, mut tuned_rounds) = (Vec::new(), Vec::new());
    for round in 1..=run.rounds.max(1) {
        let what = format!(
            "profile vs defaults {} round {round}",
            knob.transport.as_str()
        );
        let (default, tuned_records) = run.steady_round(&what, |run| {
            run.report.set_tag(Some("default"), Vec::new());
            let default = run.job(&default_job);
            run.report
                .set_tag(Some("tuned"), vec![format!("{}={value}", knob.setting)]);
            let tuned_records = run.job(&tuned_job);
            run.report.set_tag(None, Vec::new());
            Ok((default?, tuned_records?))
        })?;
        default_rounds.push(default);
        tuned_rounds.push(tuned_records);
    }
    Ok((default_rounds, tuned_rounds))
}

/// Compares the knob's tuned value with its default over the measured rounds: a table
/// line per size into `lines`, and the verdict. Returns whether tuned is never worse where
/// it changes the path.
fn judge_knob(
    knob: &Knob,
    value: u64,
    (default_rounds, tuned_rounds): (&[Vec<Record>], &[Vec<Record>]),
    lines: &mut Vec<String>,
) -> bool {
    let (default, tuned_records) = (median_records(default_rounds), median_records(tuned_rounds));
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
            figure(&default, TestName::Pingpong, size),
            figure(&tuned_records, TestName::Pingpong, size),
        );
        let bandwidth = (
            figure(&default, TestName::Bw, size),
            figure(&tuned_records, TestName::Bw, size),
        );
        let latency_ratio = latency.1.zip(latency.0).map(|(t, d)| t / d);
        let bandwidth_ratio = bandwidth.1.zip(bandwidth.0).map(|(t, d)| t / d);
        // Sizes whose path the tuned value does not change run the same code on both
        // sides: their difference is noise and does not count against the profile.
        let path_changes = (knob.copies)(size, knob.default_value) != (knob.copies)(size, value);
        let worse_by = |latency_ratio: Option<f64>, bandwidth_ratio: Option<f64>| {
            latency_ratio.is_some_and(|ratio| ratio > NOISE_TOLERANCE)
                || bandwidth_ratio.is_some_and(|ratio| ratio < 1.0 / NOISE_TOLERANCE)
        };
        // Worse in the medians and in every round (default and tuned of one round ran
        // back to back): one slow launch does not condemn a threshold.
        let worse = worse_by(latency_ratio, bandwidth_ratio)
            && default_rounds.iter().zip(tuned_rounds).all(|(d, t)| {
                let ratio = |test: TestName| {
                    figure(t, test, size)
                        .zip(figure(d, test, size))
                        .map(|(t, d)| t / d)
                };
                worse_by(ratio(TestName::Pingpong), ratio(TestName::Bw))
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
        lines.push(format!(
            "  verdict: where the path changes, tuned is worse than the default beyond {:.0}%, in the medians and in every round, at {}",
            (NOISE_TOLERANCE - 1.0) * 100.0,
            worse_sizes.join(", ")
        ));
    }
    worse_sizes.is_empty()
}
