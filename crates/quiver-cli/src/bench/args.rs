//! `quiver bench`: the everyday measurements of a transport between two ranks, next to the
//! machine's floors, all in one run.
//!
//! - `floor`: cache-line hand-off latency and memcpy bandwidth, plus the extended floors
//!   (a system call, a cross-core wake-up, `process_vm_readv` bandwidth);
//! - `pingpong`: one-way latency = round trip / 2, median and p99, over a size sweep;
//! - `bw`: streaming bandwidth with a window of outstanding sends (as osu_bw does);
//! - `bibw`: both ranks stream to each other at once (as osu_bibw does);
//! - `rate`: 8-byte message rate with the same window.
//!
//! The floors are always measured first (every result is printed as a ratio to its floor);
//! naming only `floor` skips the ranks. The bench starts its two ranks itself (this
//! executable, `quiver bench --worker`), pins them to two different CPUs, and both
//! busy-poll; started by a launcher (or `--rendezvous`), each process is one of the two
//! ranks instead (`launched`). Output: a table by default (or `--format osu`); `--json FILE|-` writes one
//! JSON object per measured point (JSON Lines), and with `-` only JSON goes to stdout;
//! `--plot FILE.svg|.png` draws latency and bandwidth against size; a progress bar goes to
//! stderr when it is a terminal.
//!
//! This file holds the command line ([`BenchOptions`], shared with the lab's
//! `quiver-bench bench`), its validation into a [`Plan`], and the parent's run: floors,
//! the ranks, the hand-off again. The lab builds its runs from the same pieces.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::am::{self, AmFailure, AmOptions};
use super::fd_wait::WaitMode;
use super::launched::{self, LaunchArgs};
use super::parent::{choose_cpus, finish, handoff_again, measure_floors, open_report};
use super::plan::{
    Plan, TestName, Transport, DEFAULT_SIZES_BYTES, DEFAULT_WINDOW, MAX_WINDOW, MAX_WINDOW_BYTES,
};
use super::progress::Progress;
use super::ranks;
use super::report::{Report, Style};
use super::sizes;
use super::worker;

/// Exit code for a bad command line.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for a run that failed.
pub const EXIT_FAILURE: i32 = 1;
/// Largest `--iters` (pingpong keeps one 16-byte timestamp per round trip in memory).
const MAX_ITERS: u64 = 10_000_000;
/// The tests a run makes when none is named.
pub const DEFAULT_TESTS: [TestName; 4] = [
    TestName::Floor,
    TestName::Pingpong,
    TestName::Bw,
    TestName::Rate,
];
/// The ranks' addresses with `--netns` and no `--addrs`: link 0 of `quiver-bench testbed`.
const TESTBED_ADDRS: &str = "10.77.0.1:7300,10.77.0.2:7300";

/// Command line of `quiver bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Tests to run, in this order: floor, pingpong, bw, bibw, rate (default: floor,
    /// pingpong, bw, rate). The floors are measured in every run; `floor` alone measures
    /// only them.
    #[arg(value_enum, value_name = "TEST")]
    pub tests: Vec<TestName>,

    /// Everything else.
    #[command(flatten)]
    pub options: BenchOptions,

    /// Ranks started by a launcher or by hand.
    #[command(flatten)]
    pub launch: LaunchArgs,
}

/// Options of `quiver bench` (and of the lab's `quiver-bench bench`).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchOptions {
    /// Transport to measure: shm, udp, tcp (quiver's, through its API), xdp (quiver's udp
    /// protocol over AF_XDP: with --netns, as root), or a raw-socket baseline over
    /// 127.0.0.1 (raw-udp, raw-tcp: plain busy-polling sockets, no protocol).
    #[arg(long, value_name = "NAME", default_value = "shm")]
    pub transport: String,

    /// Message sizes of pingpong and bw, comma-separated, with optional K/M/G suffixes
    /// (powers of 1024), e.g. 8,1K,1M [default: 8,64,512,4K,32K,256K,1M,4M].
    #[arg(long, value_name = "LIST")]
    pub sizes: Option<String>,

    /// Timed iterations per size: round trips for pingpong, windows for bw and rate
    /// [default: scaled down with the size, so the default run takes seconds, not minutes].
    #[arg(long, value_name = "N")]
    pub iters: Option<u64>,

    /// Outstanding sends per window in bw and rate.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_WINDOW)]
    pub window: u64,

    /// Also write one JSON object per measured point to FILE; with `-`, write only JSON
    /// to stdout (no table).
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<String>,

    /// The two CPUs for rank 0 and rank 1, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    pub cpus: Option<String>,

    /// Run rank 0 and rank 1 in these two network namespaces (udp, tcp and xdp), e.g. the
    /// two sides of `quiver-bench testbed up`: quiver-a,quiver-b.
    #[arg(long, value_name = "A,B")]
    pub netns: Option<String>,

    /// The two ranks' addresses (ip:port,ip:port) for udp and tcp [default: free loopback
    /// ports; with --netns, 10.77.0.1:7300,10.77.0.2:7300, link 0 of `quiver-bench testbed`].
    #[arg(long, value_name = "ADDR,ADDR")]
    pub addrs: Option<String>,

    /// Stop the ranks and fail if they have not finished after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,

    /// A `QUIVER_*` setting for the ranks, NAME=VALUE (repeatable), e.g.
    /// --set QUIVER_SHM_EAGER_MAX=64K: measure quiver with other thresholds.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub settings: Vec<String>,

    /// Human-readable output: quiver's table with floors and ratios, or the columns of the
    /// OSU micro-benchmarks (`# Size  Latency (us)`, `# Size  Bandwidth (MB/s)`, ...).
    #[arg(long, value_enum, value_name = "STYLE", default_value = "table")]
    pub format: Style,

    /// Also draw latency vs size (log-log) and bandwidth vs size, one line per transport
    /// (and variant), into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Show a progress bar with the time left on stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,

    /// pingpong also measures a tagged receive (a receive naming the source and the tag,
    /// after a tagged send) beside the plain one, interleaved: each size plain, then
    /// tagged (records labelled `untagged` and `tagged`). Over shm and tcp.
    #[arg(long)]
    pub tagged: bool,

    /// Internal: default iteration counts scaled to this percentage.
    #[arg(long, hide = true, default_value_t = 100)]
    pub effort: u64,

    /// How the ranks wait in pingpong: busy (busy-poll, every test) or fd (also an 8 B
    /// ping-pong where both ranks sleep in poll(2) on their endpoint's descriptor between
    /// messages, reported beside the busy one as variant fd-wait: what sleeping costs).
    #[arg(long, value_enum, value_name = "HOW", default_value = "busy")]
    pub wait: WaitMode,

    /// Internal: run as one of the bench's ranks (started by the bench itself).
    #[arg(long, hide = true)]
    pub worker: bool,
}

impl BenchOptions {
    /// Validates the options into a plan of `tests` (sorted and deduplicated here; the
    /// caller puts in [`DEFAULT_TESTS`] when none was named).
    ///
    /// # Errors
    /// What is wrong with the command line, as the message to print.
    pub fn plan(&self, mut tests: Vec<TestName>) -> Result<Plan, String> {
        let Some(transport) = Transport::from_name(&self.transport) else {
            let names: Vec<&str> = Transport::ALL.iter().map(|t| t.as_str()).collect();
            return Err(format!(
                "unknown transport '{}' (available: {})",
                self.transport,
                names.join(", ")
            ));
        };
        tests.sort_unstable();
        tests.dedup();
        let sizes = match &self.sizes {
            Some(list) => {
                sizes::parse_size_list(list).map_err(|error| format!("--sizes: {error}"))?
            }
            None => DEFAULT_SIZES_BYTES.to_vec(),
        };
        if self
            .iters
            .is_some_and(|iters| !(1..=MAX_ITERS).contains(&iters))
        {
            return Err(format!("--iters must be between 1 and {MAX_ITERS}"));
        }
        if !(1..=MAX_WINDOW).contains(&self.window) {
            return Err(format!("--window must be between 1 and {MAX_WINDOW}"));
        }
        let networked = transport.is_network();
        let netns = match &self.netns {
            None => None,
            Some(_) if !networked => {
                return Err("--netns needs --transport udp, tcp or xdp".to_string());
            }
            Some(list) => match list.split(',').map(str::trim).collect::<Vec<_>>()[..] {
                [a, b] if !a.is_empty() && !b.is_empty() => Some([a.to_string(), b.to_string()]),
                _ => return Err(format!("--netns {list:?}: expected two names, A,B")),
            },
        };
        let addrs = match (&self.addrs, &netns) {
            (Some(_), _) if !networked => {
                return Err("--addrs needs --transport udp, tcp or xdp".to_string());
            }
            (Some(list), _) => Some(parse_two_addrs(list)?),
            (None, Some(_)) => Some(parse_two_addrs(TESTBED_ADDRS)?),
            (None, None) => None,
        };
        if transport == Transport::Xdp && addrs.is_none() && !self.worker {
            return Err(
                "--transport xdp needs ranks on network interfaces: --netns A,B (e.g. quiver-bench testbed's namespaces) or --addrs; it runs as root"
                    .to_string(),
            );
        }
        if transport == Transport::RawUdp && tests.contains(&TestName::Bibw) {
            return Err(
                "bibw is not measured over raw-udp (its flow control is one-way)".to_string(),
            );
        }
        if self.wait == WaitMode::Fd && transport.is_raw() {
            return Err("--wait fd measures quiver's endpoints, not a raw baseline".to_string());
        }
        if !(1..=1000).contains(&self.effort) {
            return Err("--effort must be between 1 and 1000".to_string());
        }
        let plan = Plan {
            tests,
            transport,
            sizes,
            iters: self.iters,
            window: self.window,
            netns,
            addrs,
            settings: parse_settings(&self.settings)?,
            effort_percent: self.effort,
            blocks_per_point: 1,
            tagged: self.tagged,
            wait_fd: self.wait == WaitMode::Fd,
        };
        if plan.tests.contains(&TestName::Bw) || plan.tests.contains(&TestName::Bibw) {
            check_window_bytes(&plan)?;
        }
        Ok(plan)
    }
}

/// Refuses a window that would hold more than [`MAX_WINDOW_BYTES`] in posted buffers at
/// the plan's largest size (for the tests that post windows of messages).
///
/// # Errors
/// The message to print.
pub fn check_window_bytes(plan: &Plan) -> Result<(), String> {
    let window_bytes = plan.window.saturating_mul(plan.max_message_bytes());
    if window_bytes > MAX_WINDOW_BYTES {
        return Err(format!(
            "bw would hold --window {} x {} = {} in posted buffers (at most {}); use a smaller window or size",
            plan.window,
            sizes::format_size(plan.max_message_bytes()),
            sizes::format_size(window_bytes),
            sizes::format_size(MAX_WINDOW_BYTES)
        ));
    }
    Ok(())
}

/// Parses `--set NAME=VALUE` entries (only `QUIVER_*` names quiver knows, not the job's
/// identity).
fn parse_settings(entries: &[String]) -> Result<Vec<(String, String)>, String> {
    let known = quiver::variables::known_variables();
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
            if let Some(unknown) =
                quiver::variables::unknown_among([name.to_string()], &known).pop()
            {
                return Err(format!(
                    "--set {name}: quiver knows no such variable (did you mean {}?)",
                    unknown.closest
                ));
            }
            Ok((name.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Parses exactly two `ip:port` addresses.
fn parse_two_addrs(list: &str) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = list
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
pub fn main(args: BenchArgs) -> i32 {
    if args.tests.contains(&TestName::Am) {
        if args.tests.len() > 1 {
            eprintln!("quiver bench: am runs alone (quiver bench am)");
            return EXIT_USAGE;
        }
        let options = &args.options;
        let am = AmOptions {
            transport: &options.transport,
            iters: options.iters,
            cpus: options.cpus.as_deref(),
            json: options.json.as_deref(),
        };
        return match am::run(&am) {
            Ok(()) => 0,
            Err(AmFailure::Usage(message)) => {
                eprintln!("quiver bench am: {message}");
                EXIT_USAGE
            }
            Err(AmFailure::Run(message)) => {
                eprintln!("quiver bench am: {message}");
                EXIT_FAILURE
            }
        };
    }
    let tests = if args.tests.is_empty() {
        DEFAULT_TESTS.to_vec()
    } else {
        args.tests.clone()
    };
    let plan = match args.options.plan(tests) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver bench: {message}");
            return EXIT_USAGE;
        }
    };
    if args.options.worker {
        return worker_exit("quiver bench", worker::run(&plan));
    }
    match launched::is_launched(&args.launch) {
        Ok(false) => {}
        Ok(true) => {
            let options = &args.options;
            let output = launched::Output {
                json: options.json.as_deref(),
                format: options.format,
                progress: options.progress,
                plot: options.plot.as_deref(),
                cpus: options.cpus.as_deref(),
            };
            return worker_exit("quiver bench", launched::run(&output, &args.launch, &plan));
        }
        Err(message) => {
            eprintln!("quiver bench: {message}");
            return EXIT_USAGE;
        }
    }
    let cpus = match choose_cpus(args.options.cpus.as_deref()) {
        Ok(cpus) => cpus,
        Err(message) => {
            eprintln!("quiver bench: {message}");
            return EXIT_USAGE;
        }
    };
    match run(&args.options, &plan, cpus) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver bench: {message}");
            EXIT_FAILURE
        }
    }
}

/// A rank's exit code: 0, or 1 after printing `command: rank N: message` on stderr.
pub fn worker_exit(command: &str, result: Result<(), String>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(message) => {
            // The bench's own ranks have QUIVER_RANK; a launcher's, one of its variables.
            let rank = [
                "QUIVER_RANK",
                "PMIX_RANK",
                "OMPI_COMM_WORLD_RANK",
                "PMI_RANK",
            ]
            .iter()
            .find_map(|name| std::env::var(name).ok())
            .unwrap_or_else(|| "?".to_string());
            eprintln!("{command}: rank {rank}: {message}");
            EXIT_FAILURE
        }
    }
}

/// Measures the floors, runs the ranks' tests and reports everything.
fn run(options: &BenchOptions, plan: &Plan, cpus: [usize; 2]) -> Result<(), String> {
    let mut report: Report = open_report(options.json.as_deref())?;
    report.set_style(options.format);
    report.set_progress(Progress::new(plan.rank_record_count(), options.progress));
    report
        .preamble(plan.transport.as_str(), cpus)
        .map_err(|error| format!("writing the table: {error}"))?;
    // memcpy floors are needed by the size sweeps (and shown by `floor`); rate needs only
    // the hand-off. The extended floors are shown by `floor`.
    let memcpy_sizes: &[u64] = if plan.sweeps_sizes() {
        &plan.sizes
    } else {
        &[]
    };
    let floors = measure_floors(
        cpus,
        memcpy_sizes,
        plan.tests.contains(&TestName::Floor),
        &mut report,
    )?;
    if plan.needs_ranks() {
        ranks::run(
            &plan.rank_job(),
            cpus,
            &floors,
            &mut report,
            Duration::from_secs(options.timeout),
        )?;
        handoff_again(cpus, &floors, &mut report)?;
    }
    finish(report, options.plot.as_deref())
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

    fn plan_from_args(args: &BenchArgs) -> Result<Plan, String> {
        let tests = if args.tests.is_empty() {
            DEFAULT_TESTS.to_vec()
        } else {
            args.tests.clone()
        };
        args.options.plan(tests)
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
    fn settings_are_validated() {
        let plan = plan(&["--set", "QUIVER_SHM_EAGER_MAX=64K", "pingpong"]).expect("valid");
        assert_eq!(
            plan.settings,
            vec![("QUIVER_SHM_EAGER_MAX".to_string(), "64K".to_string())]
        );
        assert!(super::tests::plan(&["--set", "PATH=/"]).is_err());
        assert!(super::tests::plan(&["--set", "QUIVER_RANK=1"]).is_err());
        assert!(super::tests::plan(&["--set", "QUIVER_X"]).is_err());
        let misspelt = super::tests::plan(&["--set", "QUIVER_SHM_EAGER_MAXX=64K"])
            .expect_err("an unknown name");
        assert!(
            misspelt.contains("did you mean QUIVER_SHM_EAGER_MAX?"),
            "{misspelt}"
        );
        assert!(super::tests::plan(&["bibw", "--transport", "raw-udp"]).is_err());
        assert!(super::tests::plan(&["bibw", "--transport", "raw-tcp"]).is_ok());
        // The lab's tests and suites are not `quiver bench`'s.
        for lab in ["compare", "crossover", "loggp", "pool", "wire", "stripe"] {
            assert!(parse(&[lab]).is_err(), "{lab}");
        }
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
        assert!(error.contains("udp, tcp or xdp"), "{error}");
        let error = super::tests::plan(&["--transport", "xdp"]).expect_err("xdp on loopback");
        assert!(error.contains("--netns"), "{error}");
        let plan = super::tests::plan(&["--transport", "xdp", "--netns", "a,b"]).expect("xdp");
        assert_eq!(
            (plan.transport, plan.addrs.map(|a| a.len())),
            (Transport::Xdp, Some(2))
        );
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
        assert!(super::tests::plan(&["--wait", "fd", "--transport", "raw-tcp"]).is_err());
        assert!(parse(&["--wait", "sometimes"]).is_err());
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
            "--wait",
            "fd",
            "bw",
            "pingpong",
        ])
        .expect("valid");
        assert!(original.wait_fd);
        let worker_args = original.worker_args();
        assert_eq!(worker_args[0], "bench");
        let arguments: Vec<&str> = worker_args[1..].iter().map(String::as_str).collect();
        let parsed = parse(&arguments).expect("worker command line parses");
        assert!(parsed.options.worker);
        assert_eq!(plan_from_args(&parsed).expect("valid"), original);
    }
}
