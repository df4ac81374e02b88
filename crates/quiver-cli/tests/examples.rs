//! The examples of `crates/quiver/examples` (ring allreduce, request/reply, halo exchange)
//! run as real jobs through `quiver run` with more ranks than cores: 4 and 8 ranks on two
//! CPUs, over shm, tcp and udp. Each example checks its own result and exits non-zero on a
//! wrong one; each run must end within a generous bound. That bound is no timing
//! assertion: ranks that busy-poll while the rank they wait for cannot run take
//! milliseconds per message (a scheduler time slice) and overrun it many times over.
//!
//! The event-loop example (a server that sleeps in mio on its endpoint's descriptor) runs
//! over each transport too.
//!
//! And a waiting rank yields: two ranks pinned to one CPU ping-pong 5000 times within a
//! bound that 2 ms stalls per message would exceed twice over.
//!
//! The examples are built by cargo here (same profile as this test) the first time a test
//! needs them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One job at a time: jobs of 8 ranks sharing two CPUs with each other would measure the
/// test harness, not quiver.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Per run of an example. On the 2-core development VM these runs took 0.05-3.5 s each;
/// with ranks that busy-poll and never yield (`QUIVER_YIELD=never`, the waiting of before)
/// every allreduce run and the 8-rank halo runs ran past 45 s, the 4-rank halo runs took
/// 15-22 s for 2000 steps (here 4000) and request/reply 1.2-6.6 ms per round trip
/// (10000 requests here: 12-66 s).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The examples directory of this test's profile, built once.
fn examples() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // target/<profile>/deps/examples-<hash>: the profile's directory is two up.
        let exe = std::env::current_exe().expect("test executable");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>/deps")
            .to_path_buf();
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--quiet", "-p", "quiver-hpc", "--examples"]);
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("run cargo");
        assert!(status.success(), "building the examples failed: {status}");
        profile_dir.join("examples")
    })
}

/// The first two CPUs this test may use (one if there is only one).
fn two_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => cpus.push(part.parse::<usize>().unwrap()),
        }
    }
    cpus.truncate(2);
    cpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs `example ARGS` as a job of `ranks` ranks over `transport` on `cpus` (a taskset
/// list), within `limit`; panics with its output unless it succeeds in time. Returns its
/// standard output.
fn run(
    example: &str,
    args: &[&str],
    ranks: u32,
    transport: &str,
    cpus: &str,
    limit: Duration,
) -> String {
    let _one = ONE_JOB
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let program = examples().join(example);
    let started = Instant::now();
    let output = Command::new("taskset")
        .args(["-c", cpus, env!("CARGO_BIN_EXE_quiver"), "run", "-n"])
        .arg(ranks.to_string())
        .args(["--timeout", &limit.as_secs().to_string(), "--"])
        .arg(&program)
        .args(args)
        .env("QUIVER_TRANSPORTS", transport)
        .env_remove("QUIVER_YIELD")
        .env_remove("QUIVER_SPIN_US")
        .env_remove("QUIVER_YIELD_SPIN_US")
        .output()
        .expect("start quiver run");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(": ok"),
        "{example} {args:?}, {ranks} ranks on CPUs {cpus} over {transport}: {} after {took:?} \
         (limit {limit:?}; 124 is the limit)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    eprintln!(
        "{example} {ranks} ranks over {transport}: {took:?}: {}",
        stdout.trim()
    );
    stdout.into_owned()
}

/// Retransmissions in one lossless run of an example over udp (loopback), summed over its
/// ranks, at most: each is spurious (a peer that waited for a CPU looked like loss). With
/// the 10 ms timeout floor of a node that is not oversubscribed, these runs resent 6-717
/// frames each on the 2-core development VM (busy with other work); with the 50 ms floor of
/// an oversubscribed node, 0-1 (docs/decisions/0073-calm-udp-on-a-busy-node.md).
const SPURIOUS_PER_RUN: u64 = 3;

/// The datagram counters every rank of a udp run printed (`rank R: datagram retransmits
/// N, timeouts T, spurious retransmissions received S`), summed: (retransmits, spurious).
fn retransmissions(stdout: &str, ranks: u32) -> (u64, u64) {
    let mut reports = 0;
    let (mut retransmits, mut spurious) = (0, 0);
    for line in stdout.lines() {
        let Some((_, counters)) = line.split_once(": datagram retransmits ") else {
            continue;
        };
        let numbers: Vec<u64> = counters
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|word| word.parse().ok())
            .collect();
        assert_eq!(numbers.len(), 3, "{line}");
        retransmits += numbers[0];
        spurious += numbers[2];
        reports += 1;
    }
    assert_eq!(reports, ranks, "one report per rank:\n{stdout}");
    (retransmits, spurious)
}

/// Every example with 4 and 8 ranks on two CPUs over `transport`.
fn oversubscribed(transport: &str) {
    let cpus = two_cpus();
    let examples: [(&str, &[&str]); 3] = [
        ("ring_allreduce", &["1024", "2000"]),
        ("request_reply", &["10000", "64"]),
        ("halo_exchange", &["1000", "4000"]),
    ];
    for ranks in [4, 8] {
        for (example, args) in examples {
            let stdout = run(example, args, ranks, transport, &cpus, RUN_LIMIT);
            if transport == "udp" {
                // Loopback loses nothing: every retransmission would be spurious.
                let (retransmits, spurious) = retransmissions(&stdout, ranks);
                assert!(
                    retransmits <= SPURIOUS_PER_RUN && spurious <= SPURIOUS_PER_RUN,
                    "{example} {ranks} ranks over udp: {retransmits} retransmissions, \
                     {spurious} received twice (at most {SPURIOUS_PER_RUN})\n{stdout}"
                );
            }
        }
    }
}

#[test]
fn examples_with_more_ranks_than_cores_over_shm() {
    oversubscribed("shm");
}

#[test]
fn examples_with_more_ranks_than_cores_over_tcp() {
    oversubscribed("tcp");
}

#[test]
fn examples_with_more_ranks_than_cores_over_udp() {
    oversubscribed("udp");
}

/// Two ranks on one CPU: 5000 round trips. A rank that spins while its peer waits for the
/// CPU stalls a time slice (2-4 ms) per message: 20-40 s; yielding, a round trip costs two
/// context switches (tens of microseconds at most).
#[test]
fn a_waiting_rank_yields_to_its_peer_on_the_same_cpu() {
    let one = two_cpus().split(',').next().expect("a CPU").to_owned();
    for transport in ["shm", "tcp", "udp"] {
        run(
            "request_reply",
            &["5000", "64"],
            2,
            transport,
            &one,
            Duration::from_secs(10),
        );
    }
}

/// `quiver info` run as the ranks of a job shows the waiting policy they get: more ranks
/// than the launcher's CPUs yield at every poll; a job that fits busy-polls.
#[test]
fn quiver_info_shows_the_waiting_policy_of_a_job() {
    let one = two_cpus().split(',').next().expect("a CPU").to_owned();
    let info = |ranks: &str, cpus: &str| {
        let output = Command::new("taskset")
            .args([
                "-c",
                cpus,
                env!("CARGO_BIN_EXE_quiver"),
                "run",
                "-n",
                ranks,
                "--",
            ])
            .args([env!("CARGO_BIN_EXE_quiver"), "info"])
            .env_remove("QUIVER_YIELD")
            .env_remove("QUIVER_SPIN_US")
            .env_remove("QUIVER_YIELD_SPIN_US")
            .output()
            .expect("run quiver info in a job");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let crowded = info("2", &one);
    assert!(
        crowded.contains("poll and yield 200 us")
            && crowded.contains("ranks on this node 2 (QUIVER_LOCAL_SIZE), CPUs 1 (QUIVER_LOCAL_CPUS): oversubscribed"),
        "{crowded}"
    );
    let alone = info("1", &one);
    assert!(
        alone.contains("busy-poll 2000 us") && !alone.contains("oversubscribed"),
        "{alone}"
    );
}

/// The event-loop example: rank 0 serves two clients from a mio event loop on its
/// endpoint's descriptor, never blocking inside quiver, over each transport.
#[test]
fn the_event_loop_example_serves_from_mio_over_every_transport() {
    let cpus = two_cpus();
    for transport in ["shm", "tcp", "udp"] {
        let stdout = run("event_loop", &["500"], 3, transport, &cpus, RUN_LIMIT);
        assert!(
            stdout.contains("served 1000 requests"),
            "{transport}: {stdout}"
        );
    }
}
