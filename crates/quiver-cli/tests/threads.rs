//! Threads in real processes: under `quiver run`, each of two ranks shares one `Context`
//! among several threads, each thread driving its own endpoint and exchanging verified
//! messages with the same port of the other rank, over each transport in turn.

use std::process::Command;

const QUIVER: &str = env!("CARGO_BIN_EXE_quiver");
const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

/// Runs `quiver-testprog threads` on two ranks over `transport`; returns each rank's
/// final line.
fn threads_job(transport: &str, threads: u32) -> Vec<String> {
    let out = Command::new(QUIVER)
        .args([
            "run",
            "-n",
            "2",
            "--timeout",
            "120",
            "--",
            TESTPROG,
            "threads",
        ])
        .args([threads.to_string().as_str(), "60", "300K", "9"])
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
        .lines()
        .filter(|line| line.contains("ok rank") || line.contains("transports rank"))
        .map(str::to_owned)
        .collect()
}

/// The number after `field` in a `transports` line.
fn count(line: &str, field: &str) -> u64 {
    let mut words = line.split_whitespace();
    words.find(|&w| w == field);
    words
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {line:?}"))
}

#[test]
fn threads_each_with_an_endpoint_of_one_context_exchange_verified_messages() {
    for transport in ["shm", "tcp", "udp"] {
        let lines = threads_job(transport, 3);
        assert_eq!(lines.len(), 4, "{transport}: {lines:?}");
        for rank in 0..2 {
            assert!(
                lines
                    .iter()
                    .any(|line| line.contains(&format!("ok rank {rank} threads 3 received"))),
                "{transport}: rank {rank} did not finish: {lines:?}"
            );
            let carried = lines
                .iter()
                .find(|line| line.contains(&format!("transports rank {rank} ")))
                .unwrap_or_else(|| panic!("{transport}: no transports line: {lines:?}"));
            // Each of the three endpoints accepted its peer's connection.
            let (shm, datagrams) = (count(carried, "shm"), count(carried, "datagrams_received"));
            match transport {
                "shm" => assert_eq!((shm, datagrams), (3, 0), "{carried}"),
                "udp" => assert!(shm == 0 && datagrams > 0, "{carried}"),
                _ => assert!(shm == 0 && datagrams == 0, "{carried}"),
            }
            assert!(count(carried, "accepted") >= 3, "{carried}");
        }
    }
}
