//! Consistency of the LogGP model on real runs (`quiver-bench bench pingpong loggp`).
//!
//! For each quiver transport, at 8 B and 1 KiB, in one run:
//! - **o_s + L + o_r agrees with the measured one-way latency**: the model's one-way time
//!   against the median of the independent `pingpong` test of the same run, within
//!   [`TOLERANCE_FRACTION`] of the latter plus [`TOLERANCE_US`] (these shared 2-vCPU
//!   machines move a figure by tens of percent between two loops; a run whose cache-line
//!   hand-off floor moved, or whose loops disagree, is retried once: a stall of the host
//!   during one loop moves one side alone, and a model that is wrong fails both runs);
//! - **g is a positive, finite time**.
//!
//! g is not held to o_s (LogGP's "a sender cannot start messages faster than it spends
//! inside each send"): an isolated send is measured cold, after the idle wait, and a
//! stream is not. Over udp and tcp the isolated send also delivers the datagram or segment
//! into the receiver's socket on loopback (the bench measures L < 0 over both) and carries
//! the ack owed for the previous message: a CI run measured g 27% below o_s over udp at 8 B
//! (4.48 against 6.14 µs). Over shm the isolated send writes ring lines that the receiver
//! read last, and a stream finds them in the writer's cache: a 2-vCPU development VM
//! measured g 28-47% below o_s at 1 KiB in 7 runs of 7 (0.195 against 0.367 µs) and up to 37%
//! at 8 B. No tolerance makes a sound invariant of that.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

/// Agreement required between o_s + L + o_r and the pingpong one-way latency.
const TOLERANCE_FRACTION: f64 = 0.5;
/// ... plus this many µs (the udp and tcp figures are several µs).
const TOLERANCE_US: f64 = 0.5;

/// The bench busy-polls on both CPUs: never run two at once.
static ONE_BENCH_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(transport: &str) -> (Vec<Value>, String) {
    let _guard = ONE_BENCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let output = Command::new(env!("CARGO_BIN_EXE_quiver-bench"))
        .args([
            "bench",
            "pingpong",
            "loggp",
            "--transport",
            transport,
            "--sizes",
            "8,1K",
            "--effort",
            "5",
            "--json",
            "-",
            "--timeout",
            "120",
        ])
        .output()
        .expect("run quiver-bench bench");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{transport}: {stderr}");
    let records = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect();
    (records, stderr)
}

fn number(record: &Value, key: &str) -> f64 {
    record[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {record}"))
}

/// The problems of one run, empty when consistent.
fn problems(records: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    for size in [8u64, 1024] {
        let find = |test: &str| {
            records
                .iter()
                .find(|r| r["test"] == test && r["size"] == size && r.get("variant").is_none())
                .unwrap_or_else(|| panic!("no {test} at {size}: {records:?}"))
        };
        let (pingpong, loggp) = (find("pingpong"), find("loggp"));
        let one_way = number(pingpong, "latency_us");
        let (o_s, o_r, l, g) = (
            number(loggp, "o_s_us"),
            number(loggp, "o_r_us"),
            number(loggp, "L_us"),
            number(loggp, "g_us"),
        );
        let model = o_s + l + o_r;
        let allowed = TOLERANCE_FRACTION * one_way + TOLERANCE_US;
        if (model - one_way).abs() > allowed {
            problems.push(format!(
                "{size} B: o_s + L + o_r = {model:.3} µs vs pingpong {one_way:.3} µs (allowed ±{allowed:.3})"
            ));
        }
        if !(g.is_finite() && g > 0.0) {
            problems.push(format!("{size} B: g = {g} µs is not a positive time"));
        }
    }
    problems
}

fn check(transport: &str) {
    let (records, stderr) = run(transport);
    let found = problems(&records);
    if found.is_empty() {
        return;
    }
    // The host moved the vCPUs (the bench warns "floor moved") or stalled one loop: one
    // more run, which must agree.
    let first = (found, stderr);
    let (records, stderr) = run(transport);
    let found = problems(&records);
    assert!(
        found.is_empty(),
        "{transport}: first run {:?}, second run {found:?}\n{}\n{stderr}",
        first.0,
        first.1
    );
}

#[test]
fn loggp_model_is_consistent_over_shm() {
    check("shm");
}

#[test]
fn loggp_model_is_consistent_over_udp() {
    check("udp");
}

#[test]
fn loggp_model_is_consistent_over_tcp() {
    check("tcp");
}
