//! Integration tests of `quiver bench`: the real binary, a small sweep, JSON checked line by
//! line. No assertion is about speed: only that every point was measured and is positive.

use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// The bench busy-polls on both CPUs: never run two at once.
static ONE_BENCH_AT_A_TIME: Mutex<()> = Mutex::new(());

fn quiver_bench(arguments: &[&str]) -> Output {
    let _guard = ONE_BENCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("bench")
        .args(arguments)
        .args(["--timeout", "120"])
        .output()
        .expect("run quiver bench")
}

/// Parses every stdout line as a JSON object with the keys every record has.
fn json_lines(output: &Output) -> Vec<Value> {
    let stdout = String::from_utf8(output.stdout.clone()).expect("utf-8 stdout");
    assert!(
        output.status.success(),
        "quiver bench failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
            assert!(value["test"].is_string(), "no test: {line}");
            assert!(value["transport"].is_string(), "no transport: {line}");
            assert!(
                value["size"].as_u64().is_some_and(|size| size > 0),
                "size is not a positive integer: {line}"
            );
            value
        })
        .collect()
}

fn positive(record: &Value, key: &str) -> f64 {
    let number = record[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or not a number in {record}"));
    assert!(
        number.is_finite() && number > 0.0,
        "{key} is not positive in {record}"
    );
    number
}

fn of_test<'a>(records: &'a [Value], test: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|record| record["test"] == test)
        .collect()
}

#[test]
fn floor_alone_measures_the_handoff_and_memcpy_per_size() {
    let output = quiver_bench(&["floor", "--sizes", "8,64K", "--json", "-"]);
    let records = json_lines(&output);
    assert_eq!(records.len(), 3, "{records:?}");
    let handoff: Vec<&Value> = records
        .iter()
        .filter(|record| record["floor"] == "cacheline_handoff")
        .collect();
    assert_eq!(handoff.len(), 1);
    positive(handoff[0], "latency_us");
    positive(handoff[0], "latency_p99_us");
    let memcpy_sizes: Vec<u64> = records
        .iter()
        .filter(|record| record["floor"] == "memcpy")
        .map(|record| {
            positive(record, "bandwidth_MBps");
            record["size"].as_u64().unwrap_or(0)
        })
        .collect();
    assert_eq!(memcpy_sizes, vec![8, 65536]);
    assert!(records.iter().all(|record| record["test"] == "floor"));
}

#[test]
fn small_sweep_reports_every_point_with_its_floor_ratio() {
    let output = quiver_bench(&["--sizes", "8,64K", "--iters", "200", "--json", "-"]);
    let records = json_lines(&output);

    // The hand-off before and after the ranks, memcpy at both sizes.
    let floors = of_test(&records, "floor");
    assert_eq!(floors.len(), 4, "{records:?}");
    let phases: Vec<&str> = floors
        .iter()
        .filter(|record| record["floor"] == "cacheline_handoff")
        .map(|record| {
            positive(record, "latency_us");
            record["phase"].as_str().unwrap_or("")
        })
        .collect();
    assert_eq!(phases, vec!["before_ranks", "after_ranks"]);
    let pingpong = of_test(&records, "pingpong");
    assert_eq!(pingpong.len(), 2, "{records:?}");
    for record in &pingpong {
        assert_eq!(record["transport"], "shm");
        let median = positive(record, "latency_us");
        let p99 = positive(record, "latency_p99_us");
        assert!(p99 >= median, "p99 below the median in {record}");
        positive(record, "floor_ratio");
    }
    let bw = of_test(&records, "bw");
    assert_eq!(bw.len(), 2, "{records:?}");
    for record in &bw {
        positive(record, "bandwidth_MBps");
        positive(record, "floor_ratio");
    }
    let rate = of_test(&records, "rate");
    assert_eq!(rate.len(), 1, "{records:?}");
    assert_eq!(rate[0]["size"], 8);
    positive(rate[0], "rate_Mmsgs");
    positive(rate[0], "floor_ratio");

    let sizes: Vec<u64> = pingpong
        .iter()
        .chain(bw.iter())
        .map(|record| record["size"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(sizes, vec![8, 65536, 8, 65536]);
}

#[test]
fn messages_above_the_eager_limit_are_measured_too() {
    // 1 MiB is above the shm eager limit (64 KiB by default): the rendezvous path.
    let output = quiver_bench(&[
        "pingpong", "bw", "--sizes", "1M", "--iters", "20", "--json", "-",
    ]);
    let records = json_lines(&output);
    for test in ["pingpong", "bw"] {
        let points = of_test(&records, test);
        assert_eq!(points.len(), 1, "{records:?}");
        assert_eq!(points[0]["size"], 1 << 20);
        positive(points[0], "floor_ratio");
    }
    positive(of_test(&records, "pingpong")[0], "latency_us");
    positive(of_test(&records, "bw")[0], "bandwidth_MBps");
    assert!(of_test(&records, "rate").is_empty());
}

#[test]
fn default_output_is_a_table_with_units() {
    let output = quiver_bench(&["floor", "--sizes", "1K"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("cache-line hand-off"), "{stdout}");
    assert!(stdout.contains("µs"), "{stdout}");
    assert!(stdout.contains("MB/s"), "{stdout}");
    assert!(stdout.contains("1 KiB"), "{stdout}");
    assert!(!stdout.contains('{'), "no JSON without --json: {stdout}");
}

#[test]
fn json_to_a_file_keeps_the_table_on_stdout() {
    let directory = std::env::temp_dir().join(format!("quiver-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let path = directory.join("floor.jsonl");
    let path_text = path.to_str().expect("utf-8 temp path");
    let output = quiver_bench(&["floor", "--sizes", "8", "--json", path_text]);
    let written = std::fs::read_to_string(&path);
    std::fs::remove_dir_all(&directory).expect("remove temp dir");
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("hand-off"));
    let written = written.expect("JSON file written");
    assert_eq!(written.lines().count(), 2, "{written}");
    for line in written.lines() {
        let value: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(value["test"], "floor");
    }
}

#[test]
fn bad_usage_exits_2_with_a_message() {
    let cases: [(&[&str], &str); 4] = [
        (&["--transport", "udx"], "unknown transport 'udx'"),
        (&["--sizes", "8,12Q"], "--sizes"),
        (&["--iters", "0"], "--iters"),
        (&["--cpus", "0,0"], "--cpus"),
    ];
    for (arguments, message) in cases {
        let output = quiver_bench(arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(stderr.contains(message), "{arguments:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{arguments:?}");
    }
}

/// Runs a short sweep of a raw-socket baseline and checks every point.
fn raw_baseline_reports_every_point(transport: &str) {
    // 100 KiB is above one UDP datagram (65507 bytes): raw-udp splits it in two.
    let output = quiver_bench(&[
        "pingpong",
        "bw",
        "rate",
        "--transport",
        transport,
        "--sizes",
        "8,100K",
        "--iters",
        "50",
        "--window",
        "16",
        "--json",
        "-",
    ]);
    let records = json_lines(&output);
    let measured: Vec<&Value> = records
        .iter()
        .filter(|record| record["test"] != "floor")
        .collect();
    assert_eq!(measured.len(), 5, "{records:?}");
    for record in &measured {
        assert_eq!(record["transport"], transport, "{record}");
        positive(record, "floor_ratio");
    }
    for record in of_test(&records, "pingpong") {
        let median = positive(record, "latency_us");
        assert!(positive(record, "latency_p99_us") >= median, "{record}");
    }
    let bw_sizes: Vec<u64> = of_test(&records, "bw")
        .iter()
        .map(|record| {
            positive(record, "bandwidth_MBps");
            assert_eq!(record["window"], 16);
            record["size"].as_u64().unwrap_or(0)
        })
        .collect();
    assert_eq!(bw_sizes, vec![8, 100 << 10]);
    positive(of_test(&records, "rate")[0], "rate_Mmsgs");
}

#[test]
fn raw_udp_baseline_reports_every_point() {
    raw_baseline_reports_every_point("raw-udp");
}

#[test]
fn raw_tcp_baseline_reports_every_point() {
    raw_baseline_reports_every_point("raw-tcp");
}
