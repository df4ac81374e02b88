//! Readiness on every transport, in real processes: under `quiver run`, rank 1 of
//! `quiver-testprog wait-fd` never blocks inside quiver; it sleeps in poll(2) on its
//! endpoint's descriptor and must wake for every message, over shm, tcp and udp alike,
//! and for the completion of a posted receive and a posted send. The rounds where rank 0
//! answers at once or after a yield race the arm against the arrival: a lost wake-up
//! shows as a 10 s sleep, which fails the rank.

use std::process::Command;

const QUIVER: &str = env!("CARGO_BIN_EXE_quiver");
const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

fn wait_fd_job(transport: &str, rounds: u32) -> String {
    let out = Command::new(QUIVER)
        .args([
            "run",
            "-n",
            "2",
            "--timeout",
            "120",
            "--",
            TESTPROG,
            "wait-fd",
        ])
        .arg(rounds.to_string())
        .env("QUIVER_TRANSPORTS", transport)
        .env_remove("QUIVER_LOG")
        .output()
        .expect("run the job");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{transport}: the job failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The sleeps rank 1 reported.
fn sleeps(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|line| line.contains("ok rank 1 wait-fd"))
        .unwrap_or_else(|| panic!("rank 1 did not finish: {stdout}"));
    line.split_whitespace()
        .rev()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sleep count in {line:?}"))
}

fn wakes_for_messages_and_posted_operations(transport: &str) {
    let stdout = wait_fd_job(transport, 600);
    assert!(stdout.contains("ok rank 0 wait-fd 600 rounds"), "{stdout}");
    // At least the rounds after a 100 ms pause and the two posted operations slept.
    let slept = sleeps(&stdout);
    assert!(
        slept >= 5,
        "{transport}: rank 1 slept only {slept} times: {stdout}"
    );
}

#[test]
fn a_rank_asleep_in_poll_wakes_over_shm() {
    wakes_for_messages_and_posted_operations("shm");
}

#[test]
fn a_rank_asleep_in_poll_wakes_over_tcp() {
    wakes_for_messages_and_posted_operations("tcp");
}

#[test]
fn a_rank_asleep_in_poll_wakes_over_udp() {
    wakes_for_messages_and_posted_operations("udp");
}
