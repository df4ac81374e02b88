//! Integration tests of `quiver-bench testbed` (root only; skipped otherwise): real namespaces,
//! veth links, tbf and nftables loss, a checksummed TCP transfer across them, and cleanup.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use support::testbed::{in_namespace, is_root, namespace_list, quiver_bench, Testbed};

/// Bytes sent across the lossy testbed.
const TRANSFER_BYTES: usize = 20_000_000;

/// Deterministic, incompressible-looking test data (xorshift64).
fn test_data(length: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[test]
fn tcp_transfer_across_two_lossy_links_is_intact_and_cleanup_is_complete() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let testbed = Testbed::up(2, "100mbit", 1.0).expect("testbed up");
    let [a, b] = testbed.namespaces();
    assert!(namespace_list().contains(&a) && namespace_list().contains(&b));

    // Link 1: the receiver listens on 10.77.1.2 in b, the sender connects from a.
    let listener = in_namespace(&b, || {
        TcpListener::bind("10.77.1.2:7000").expect("bind in b")
    });
    let receiver = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("accept");
        assert_eq!(peer.ip().to_string(), "10.77.1.1");
        let mut received = Vec::with_capacity(TRANSFER_BYTES);
        stream.read_to_end(&mut received).expect("read");
        received
    });
    let data = test_data(TRANSFER_BYTES);
    let expected = blake3::hash(&data);
    let start = Instant::now();
    let mut stream = in_namespace(&a, || {
        TcpStream::connect_timeout(
            &"10.77.1.2:7000".parse().expect("address"),
            Duration::from_secs(5),
        )
        .expect("connect from a")
    });
    stream.write_all(&data).expect("send");
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let received = receiver.join().expect("receiver");
    let elapsed = start.elapsed();
    assert_eq!(received.len(), TRANSFER_BYTES);
    assert_eq!(
        blake3::hash(&received),
        expected,
        "data corrupted across the testbed"
    );
    // 160 Mbit at 100 Mbit/s takes at least 1.6 s: the rate limit is in force.
    assert!(
        elapsed >= Duration::from_millis(1500),
        "too fast for 100mbit: {elapsed:?}"
    );
    eprintln!(
        "20 MB over 100mbit with 1% loss: {elapsed:?} ({:.1} Mbit/s)",
        TRANSFER_BYTES as f64 * 8.0 / elapsed.as_secs_f64() / 1e6
    );

    let name = testbed.name().to_string();
    drop(testbed);
    let left: Vec<String> = namespace_list()
        .into_iter()
        .filter(|namespace| namespace.starts_with(&format!("{name}-")))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn up_twice_fails_and_down_is_idempotent() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let testbed = Testbed::up(1, "10mbit", 0.0).expect("testbed up");
    let again = quiver_bench()
        .args([
            "testbed",
            "up",
            "--links",
            "1",
            "--rate",
            "10mbit",
            "--name",
            testbed.name(),
        ])
        .output()
        .expect("run quiver-bench");
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let forced = quiver_bench()
        .args([
            "testbed",
            "up",
            "--links",
            "2",
            "--rate",
            "10mbit",
            "--force",
            "--name",
            testbed.name(),
        ])
        .output()
        .expect("run quiver-bench");
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    for _ in 0..2 {
        let down = quiver_bench()
            .args(["testbed", "down", "--name", testbed.name()])
            .status()
            .expect("run quiver-bench");
        assert!(down.success());
    }
    let [a, b] = testbed.namespaces();
    let list = namespace_list();
    assert!(!list.contains(&a) && !list.contains(&b));
}

#[test]
fn testbed_goes_away_when_its_owner_dies() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let mut owner = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("start sleep");
    let name = format!("qt{}-owner", std::process::id());
    let up = quiver_bench()
        .args([
            "testbed", "up", "--links", "1", "--rate", "10mbit", "--name", &name,
        ])
        .arg("--owner-pid")
        .arg(owner.id().to_string())
        .status()
        .expect("run quiver-bench");
    assert!(up.success());
    assert!(namespace_list().contains(&format!("{name}-a")));
    owner.kill().expect("kill owner");
    owner.wait().expect("reap owner");
    let deadline = Instant::now() + Duration::from_secs(5);
    while namespace_list()
        .iter()
        .any(|namespace| namespace.starts_with(&format!("{name}-")))
    {
        assert!(
            Instant::now() < deadline,
            "the watcher did not remove {name}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A watcher removes only the testbed it was started for: after its testbed was replaced
/// by another of the same name (the next run of a bench), its owner's exit leaves the new
/// one alone.
#[test]
fn a_watcher_leaves_a_replaced_testbed_alone() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let mut owner = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("start sleep");
    let name = format!("qt{}-renew", std::process::id());
    let up = |with_owner: Option<u32>| {
        let mut command = quiver_bench();
        command.args([
            "testbed", "up", "--links", "1", "--rate", "10mbit", "--name", &name, "--force",
        ]);
        if let Some(pid) = with_owner {
            command.arg("--owner-pid").arg(pid.to_string());
        }
        assert!(command.status().expect("run quiver-bench").success());
    };
    up(Some(owner.id()));
    // The first run's owner removes its testbed itself and a new one comes up at once.
    // The replacement comes up while the old watcher does not look (as on a loaded
    // machine, between two of its looks), and after the kernel freed the old namespaces
    // (within milliseconds on a quiet machine): a freed namespace's inode number goes to
    // the next one made, so unless the watcher holds its own, the new ones have their
    // identities. Stopping the watcher and the pause make both certain.
    let watchers = watcher_pids(&name);
    assert_eq!(watchers.len(), 1, "one watcher of {name}: {watchers:?}");
    signal(watchers[0], "STOP");
    let down = quiver_bench()
        .args(["testbed", "down", "--name", &name])
        .status()
        .expect("run quiver-bench");
    assert!(down.success());
    std::thread::sleep(Duration::from_millis(500));
    up(None);
    signal(watchers[0], "CONT");
    owner.kill().expect("kill owner");
    owner.wait().expect("reap owner");
    // Several watch intervals: the old watcher has seen its owner go by then.
    std::thread::sleep(Duration::from_millis(1500));
    let survived = namespace_list().contains(&format!("{name}-a"));
    let removed = quiver_bench()
        .args(["testbed", "down", "--name", &name])
        .status()
        .expect("run quiver-bench");
    assert!(removed.success());
    assert!(
        survived,
        "the first testbed's watcher removed its replacement"
    );
}

/// The processes running `quiver-bench testbed watch --name NAME`.
fn watcher_pids(name: &str) -> Vec<i32> {
    let wanted = ["testbed", "watch", "--name", name];
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.windows(wanted.len())
                .any(|w| w.iter().zip(wanted).all(|(a, b)| *a == b.as_bytes()))
        })
        .collect()
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid` with kill(1).
fn signal(pid: i32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{signal} {pid}");
}

#[test]
fn bad_options_exit_2() {
    for arguments in [
        &["testbed", "up", "--links", "0", "--rate", "1gbit"][..],
        &["testbed", "up", "--links", "1", "--rate", "fast"][..],
        &[
            "testbed", "up", "--links", "1", "--rate", "1gbit", "--loss", "101",
        ][..],
        &["testbed", "down", "--name", "../x"][..],
    ] {
        let output = quiver_bench()
            .args(arguments)
            .output()
            .expect("run quiver-bench");
        assert_eq!(output.status.code(), Some(2), "{arguments:?}");
    }
}

/// `quiver-bench stripe` end to end at a modest rate: two links with 1% loss, and in the
/// same run the quiver transfer without the loss rules (`--lossless-baseline`) and the TCP
/// baseline. Every field the striping experiment reports is in the JSON record, the data
/// was verified, and
/// the testbed is gone afterwards. No assertion is about speed.
#[test]
fn stripe_reports_its_baselines_from_one_run() {
    if !is_root() {
        eprintln!("skipped: the testbed needs root");
        return;
    }
    let name = format!("qvbs{}", std::process::id() % 100_000);
    let output = quiver_bench()
        .args(["stripe", "--links", "2", "--rate", "200mbit", "--loss", "1"])
        .args([
            "--lossless-baseline",
            "--seconds",
            "1",
            "--name",
            &name,
            "--json",
            "-",
        ])
        .output()
        .expect("run quiver-bench stripe");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(records.len(), 1, "{stdout}");
    let record = &records[0];
    assert_eq!(record["test"], "stripe", "{record}");
    assert_eq!(record["links"], 2, "{record}");
    assert_eq!(record["mtu"], 1500, "{record}");
    assert_eq!(record["rate_gbps"].as_f64(), Some(0.2), "{record}");
    assert_eq!(record["loss_pct"].as_f64(), Some(1.0), "{record}");
    for key in [
        "goodput_gbps",
        "nominal_ratio",
        "tcp_baseline_gbps",
        "lossless_goodput_gbps",
        "lossless_ratio",
    ] {
        let value = record[key].as_f64().unwrap_or(f64::NAN);
        assert!(value.is_finite() && value > 0.0, "{key}: {record}");
    }
    assert!(
        record["verified_bytes"].as_u64().unwrap_or(0) > 0,
        "{record}"
    );
    let namespaces = namespace_list();
    assert!(
        !namespaces
            .iter()
            .any(|namespace| namespace.starts_with(&name)),
        "{namespaces:?}"
    );
}
