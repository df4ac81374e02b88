//! Where cross-memory attach is refused (a seccomp filter, as Docker's default profile
//! installs): shm carries every size through the ring, and `quiver info` says why. Also
//! `quiver info`'s other environment checks on this machine.

use std::process::Command;

/// The shm jobs busy-poll: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const QUIVER: &str = env!("CARGO_BIN_EXE_quiver");
const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

/// `quiver info --json`, run directly or under `quiver-testprog deny-cma`.
fn info_json(deny_cma: bool) -> serde_json::Value {
    let mut command = if deny_cma {
        let mut command = Command::new(TESTPROG);
        command.args(["deny-cma", QUIVER]);
        command
    } else {
        Command::new(QUIVER)
    };
    let out = command
        .args(["info", "--json"])
        .output()
        .expect("start quiver info");
    assert!(
        out.status.success(),
        "quiver info failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("quiver info --json prints one JSON object")
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["environment"]
        .as_array()
        .expect("environment is a list")
        .iter()
        .find(|check| check["name"] == name)
        .unwrap_or_else(|| panic!("no check named {name}"))
}

#[test]
fn info_checks_the_environment_each_finding_with_its_fix() {
    let report = info_json(false);
    for name in [
        "cross-memory attach",
        "ptrace scope",
        "socket buffers",
        "udp offloads",
        "io_uring",
        "membarrier",
        "locked memory",
    ] {
        let check = check(&report, name);
        let status = check["status"].as_str().unwrap();
        assert!(["ok", "warning", "problem"].contains(&status), "{check}");
        assert!(!check["found"].as_str().unwrap().is_empty(), "{check}");
        // A finding that is not ok says what to change.
        assert!(status == "ok" || check["fix"].is_string(), "{check}");
    }
    let text = Command::new(QUIVER).arg("info").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("\nenvironment checks:\n"), "{text}");
    assert!(text.contains("cross-memory attach"), "{text}");
}

#[test]
fn info_explains_a_cross_memory_attach_refusal() {
    let normal = info_json(false);
    if check(&normal, "cross-memory attach")["status"] != "ok" {
        eprintln!("skipped: cross-memory attach is refused here already");
        return;
    }
    let denied = info_json(true);
    let cma = check(&denied, "cross-memory attach");
    assert_eq!(cma["status"], "warning", "{cma}");
    let found = cma["found"].as_str().unwrap();
    assert!(found.contains("through the ring"), "{found}");
    assert!(
        found.contains("seccomp") && found.contains("os error 1"),
        "{found}"
    );
    assert!(cma["fix"].as_str().unwrap().contains("SYS_PTRACE"), "{cma}");
}

/// A two-rank shm job of `quiver-testprog sizes 64M` with `QUIVER_PROTO_INFO=1`, under the
/// seccomp filter with `deny_cma`; returns its output, and its output and error output.
fn sizes_job(deny_cma: bool) -> (String, String) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut command = Command::new(QUIVER);
    command.args(["run", "-n", "2", "--bind", "none", "--", TESTPROG]);
    if deny_cma {
        command.args(["deny-cma", TESTPROG]);
    }
    let out = command
        .args(["sizes", "64M"])
        .env("QUIVER_TRANSPORTS", "shm")
        .env("QUIVER_PROTO_INFO", "1")
        .output()
        .expect("start quiver run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stdout}{stderr}");
    assert!(out.status.success(), "the job failed: {}", out.status);
    // `quiver run` forwards the ranks' output, both streams, prefixed.
    let all = format!("{stdout}{stderr}");
    (stdout, all)
}

#[test]
fn shm_without_cross_memory_attach_carries_every_size_through_the_ring() {
    let (denied, protocols) = sizes_job(true);
    // QUIVER_PROTO_INFO tells, per connection, that every size goes through the ring.
    assert!(
        protocols.contains("cross-memory attach to the sender is refused"),
        "{protocols}"
    );
    assert!(!protocols.contains("process_vm_readv"), "{protocols}");
    for rank in 0..2 {
        // Both directions were set up without cross-memory attach, each counted by its
        // receiver; every size from 0 B to 64 MiB came back verified.
        let line = format!("[{rank}] ok sizes ");
        let found = denied.lines().find(|l| l.starts_with(&line));
        let found = found.unwrap_or_else(|| panic!("no result from rank {rank}"));
        assert!(
            found.ends_with("largest 67108864 shm_without_cross_memory 1"),
            "{found}"
        );
    }
    let (allowed, protocols) = sizes_job(false);
    assert!(protocols.contains("process_vm_readv"), "{protocols}");
    assert_eq!(
        allowed
            .lines()
            .filter(|l| l.ends_with("largest 67108864 shm_without_cross_memory 0"))
            .count(),
        2,
        "{allowed}"
    );
}
