//! `quiver-bench bypass` runs briefly (`--quick`, fewer iterations still) and its output is
//! read, not timed: every case reports each test, with figures that are numbers (and raw
//! AF_XDP's streams the frames sent and received), the plot is written, and the testbed is
//! gone afterwards. Root only (namespaces, AF_XDP; skipped otherwise).

mod support;

use serde_json::Value;
use support::testbed::{is_root, namespace_list, quiver_bench};

#[test]
fn a_short_run_reports_every_case_and_test() {
    if !is_root() {
        eprintln!("skipped: quiver-bench bypass needs root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("quiver-bypass-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, plot) = (dir.join("bypass.json"), dir.join("bypass.svg"));
    let name = format!("qbyp{}", std::process::id() % 100_000);
    let output = quiver_bench()
        .args(["bypass", "--quick", "--name", &name])
        .args(["--lat-iters", "100", "--rate-count", "1000"])
        .args(["--bw-bytes", "4194304"])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        .output()
        .expect("quiver-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON object per line"))
        .collect();
    let has = |case: &str, test: &str, size: u64| {
        rows.iter()
            .any(|r| r["case"] == case && r["test"] == test && r["size"] == size)
    };
    for case in [
        "quiver-udp-sockets",
        "quiver-udp-uring",
        "quiver-xdp",
        "raw-udp",
        "raw-xdp",
    ] {
        assert!(has(case, "latency", 8), "{case} 8 B latency\n{stderr}");
        assert!(has(case, "latency", 1024), "{case} 1 KiB latency\n{stderr}");
        assert!(has(case, "rate", 8), "{case} rate\n{stderr}");
        assert!(has(case, "bandwidth", 65536), "{case} 64 KiB\n{stderr}");
        assert!(has(case, "bandwidth", 1 << 20), "{case} 1 MiB\n{stderr}");
    }
    // Raw AF_XDP's streams count their frames at both ends (nothing is resent).
    for row in rows
        .iter()
        .filter(|r| r["case"] == "raw-xdp" && r["test"] != "latency")
    {
        let sent = row["frames_sent"].as_u64().expect("frames sent");
        let received = row["frames_received"].as_u64().expect("frames received");
        assert!(received > 0 && received <= sent, "{row}");
    }
    assert!(stdout.contains("frames lost"), "{stdout}");
    for row in &rows {
        let figure = match row["test"].as_str().unwrap() {
            "latency" => &row["one_way_us"],
            "rate" => &row["messages_per_second"],
            _ => &row["gbit_per_second"],
        };
        assert!(figure.as_f64().is_some_and(|f| f > 0.0), "{row}");
        assert!(row["cpu_ns_per_message"][0].as_f64().is_some(), "{row}");
        assert!(row["cpu_ns_per_byte"][1].as_f64().is_some(), "{row}");
    }
    assert!(stdout.contains("quiver-udp-uring"), "{stdout}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("quiver-xdp"),
        "{svg}"
    );
    assert!(
        !namespace_list().iter().any(|n| n.starts_with(&name)),
        "the testbed is removed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
