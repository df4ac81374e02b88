//! What the lab's suites (`compare`, `crossover`) share: their options, and the run around
//! their jobs: the floors once, a [`SuiteRun`] for the jobs (each a launch of the two
//! ranks, through the bench's machinery), the hand-off again, and the plot.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use quiver_cli::bench::crossover::{suite_floors, SuiteRun, QUICK_EFFORT_PERCENT};
use quiver_cli::bench::parent::{choose_cpus, finish, handoff_again, open_report};
use quiver_cli::bench::plan::DEFAULT_WINDOW;
use quiver_cli::bench::progress::Progress;
use quiver_cli::bench::report::Report;
use quiver_cli::bench::result::RankResult;

/// Options every suite has.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SuiteOptions {
    /// A small, fast sweep (about 1% of the iterations; for CI and smoke tests, not for
    /// figures).
    #[arg(long)]
    pub(crate) quick: bool,

    /// Outstanding sends per window in bw and rate.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_WINDOW)]
    pub(crate) window: u64,

    /// Also write one JSON object per measured point (and the summaries) to FILE; with `-`,
    /// write only JSON to stdout (no table).
    #[arg(long, value_name = "FILE|-")]
    pub(crate) json: Option<String>,

    /// The two CPUs for rank 0 and rank 1, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    pub(crate) cpus: Option<String>,

    /// Stop a job's ranks and fail if they have not finished after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub(crate) timeout: u64,

    /// Also draw latency vs size (log-log) and bandwidth vs size, one line per transport
    /// (and variant), into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,

    /// Show a progress bar with the time left on stderr even when it is not a terminal.
    #[arg(long)]
    pub(crate) progress: bool,

    /// Internal: default iteration counts scaled to this percentage (instead of the
    /// suite's own).
    #[arg(long, hide = true)]
    pub(crate) effort: Option<u64>,
}

/// How a suite runs: its name (the table's first line), its effort and rounds per
/// variant, and the sizes its floors are measured at.
pub(crate) struct SuiteShape<'a> {
    /// The suite's name.
    pub(crate) name: &'static str,
    /// Percent of the default iterations unless `--quick` or `--effort` say otherwise.
    pub(crate) effort_percent: u64,
    /// Jobs per variant (1 with `--quick`).
    pub(crate) rounds: usize,
    /// Sizes of the memcpy and cross-memory attach floors.
    pub(crate) floor_sizes: &'a [u64],
}

/// Runs a suite: the floors, then `jobs` with the table taken from the report (`jobs`
/// prints its summary into it), the hand-off again, and the plot.
///
/// # Errors
/// Bad options, a failed measurement or job, or a failed write.
pub(crate) fn run_suite<R: RankResult>(
    options: &SuiteOptions,
    shape: SuiteShape<'_>,
    jobs: impl FnOnce(&mut SuiteRun<'_, R>, Option<&mut dyn Write>) -> Result<(), String>,
) -> Result<(), String> {
    let cpus = choose_cpus(options.cpus.as_deref())?;
    let effort_percent = match (options.quick, options.effort) {
        (true, _) => QUICK_EFFORT_PERCENT,
        (false, Some(effort)) => effort,
        (false, None) => shape.effort_percent,
    };
    if !(1..=1000).contains(&effort_percent) {
        return Err("--effort must be between 1 and 1000".to_string());
    }
    let mut report: Report<R> = open_report(options.json.as_deref())?;
    report
        .preamble(shape.name, cpus)
        .map_err(|error| format!("writing the table: {error}"))?;
    let floors = suite_floors(cpus, shape.floor_sizes)?;
    report
        .floors(&floors)
        .map_err(|error| format!("writing the floors: {error}"))?;
    let mut table = report.take_table();
    report.set_progress(Progress::new(0, options.progress));
    let mut run = SuiteRun {
        cpus,
        timeout: Duration::from_secs(options.timeout),
        effort_percent,
        window: options.window,
        report: &mut report,
        floors: &floors,
        rounds: if options.quick { 1 } else { shape.rounds },
    };
    let table_ref: Option<&mut dyn Write> = match table.as_mut() {
        Some(table) => Some(&mut **table),
        None => None,
    };
    let outcome = jobs(&mut run, table_ref);
    report.restore_table(table);
    outcome?;
    handoff_again(cpus, &floors, &mut report)?;
    finish(report, options.plot.as_deref())
}
