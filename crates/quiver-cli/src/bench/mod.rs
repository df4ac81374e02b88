//! `quiver bench`: the project's microscope. Measures a transport between two ranks next to
//! the machine's floors, all in one run.
//!
//! - `pingpong`: one-way latency = round trip / 2, median and p99, over a size sweep;
//! - `bw`: streaming bandwidth with a window of outstanding sends (as osu_bw does);
//! - `rate`: 8-byte message rate with the same window;
//! - `floor`: core-to-core cache-line hand-off latency and single-core memcpy bandwidth.
//!
//! The floors are always measured first (every result is printed as a ratio to its floor);
//! naming only `floor` skips the ranks. The bench starts its two ranks itself (this
//! executable, `quiver bench --worker`), pins them to two different CPUs, and both
//! busy-poll. Output: a table by default; `--json FILE|-` writes one JSON object per
//! measured point (JSON Lines), and with `-` only JSON goes to stdout.
//!
//! Layout: `plan` (what to measure), `floor` (the machine's floors), `ranks`
//! (starting and watching the ranks), `worker` (what a rank does), `report` (records,
//! ratios, table), `sizes` and `stats` (parsing and statistics).

mod floor;
mod plan;
mod ranks;
mod raw;
mod report;
mod sizes;
mod stats;
pub(crate) mod stripe;
mod worker;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::time::Duration;

use plan::{
    Plan, TestName, Transport, DEFAULT_SIZES_BYTES, DEFAULT_WINDOW, MAX_WINDOW, MAX_WINDOW_BYTES,
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
    /// Tests to run, in this order: floor, pingpong, bw, rate (default: all). The floors
    /// are measured in every run; `floor` alone measures only them.
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

    /// Internal: run as one of the bench's ranks (started by the bench itself).
    #[arg(long, hide = true)]
    worker: bool,
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
    report
        .preamble(plan.transport.as_str(), cpus)
        .map_err(|error| format!("writing the table: {error}"))?;
    // memcpy floors are needed by the size sweeps (and shown by `floor`); rate needs only
    // the hand-off.
    let sweeps_sizes = plan
        .tests
        .iter()
        .any(|&test| matches!(test, TestName::Floor | TestName::Pingpong | TestName::Bw));
    let memcpy_sizes: &[u64] = if sweeps_sizes { &plan.sizes } else { &[] };
    let floors = floor::measure(cpus[0], cpus[1], memcpy_sizes)
        .map_err(|error| format!("measuring the floors: {error}"))?;
    report
        .floors(&floors)
        .map_err(|error| format!("writing the floors: {error}"))?;
    if plan.needs_ranks() {
        ranks::run(
            plan,
            cpus,
            &floors,
            &mut report,
            Duration::from_secs(args.timeout),
        )?;
        // The hand-off depends on where the host runs the vCPUs, which can change during
        // a run: measure it again and say so when it moved.
        let after = floor::measure_handoff(cpus[0], cpus[1])
            .map_err(|error| format!("measuring the hand-off again: {error}"))?;
        report
            .handoff_after(&floors.handoff, &after)
            .map_err(|error| format!("writing the floors: {error}"))?;
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
    let plan = Plan {
        tests,
        transport,
        sizes,
        iters: args.iters,
        window: args.window,
        netns,
        addrs,
    };
    let window_bytes = plan.window.saturating_mul(plan.max_message_bytes());
    if plan.tests.contains(&TestName::Bw) && window_bytes > MAX_WINDOW_BYTES {
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
        let original =
            plan(&["--sizes", "8,64K", "--iters", "200", "bw", "pingpong"]).expect("valid");
        let worker_args = original.worker_args();
        assert_eq!(worker_args[0], "bench");
        let arguments: Vec<&str> = worker_args[1..].iter().map(String::as_str).collect();
        let parsed = parse(&arguments).expect("worker command line parses");
        assert!(parsed.worker);
        assert_eq!(plan_from_args(&parsed).expect("valid"), original);
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
