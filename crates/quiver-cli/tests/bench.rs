//! Integration tests of `quiver bench`: the real binary, a small sweep, JSON checked line by
//! line. No assertion is about speed: only that every point was measured and is positive.
//! The lab's tests and suites (`quiver-bench`) are tested in that crate.

use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// The bench busy-polls on both CPUs: never run two at once.
static ONE_BENCH_AT_A_TIME: Mutex<()> = Mutex::new(());

fn quiver_bench(arguments: &[&str]) -> Output {
    quiver_bench_with(arguments, &[])
}

/// [`quiver_bench`] with `variables` set in the bench's environment.
fn quiver_bench_with(arguments: &[&str], variables: &[(&str, &str)]) -> Output {
    let _guard = ONE_BENCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("bench")
        .args(arguments)
        .args(["--timeout", "120"])
        .envs(variables.iter().copied())
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
            // Every line says where it comes from.
            assert_eq!(value["schema_version"], 1, "no schema version: {line}");
            assert_eq!(
                value["quiver_version"],
                env!("CARGO_PKG_VERSION"),
                "no version: {line}"
            );
            for key in ["host", "commit"] {
                assert!(
                    value[key].as_str().is_some_and(|text| !text.is_empty()),
                    "no {key}: {line}"
                );
            }
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
    // Hand-off, memcpy x 2, syscall, wake-up x 2 (eventfd, futex), cross-memory attach x 2.
    assert_eq!(records.len(), 8, "{records:?}");
    let kinds: Vec<&str> = records
        .iter()
        .map(|record| record["floor"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        vec![
            "cacheline_handoff",
            "memcpy",
            "memcpy",
            "syscall",
            "wakeup",
            "wakeup",
            "cma",
            "cma"
        ]
    );
    for record in &records[3..6] {
        positive(record, "latency_us");
    }
    for record in &records[6..] {
        positive(record, "bandwidth_MBps");
    }
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

    // The hand-off before and after the ranks, memcpy at both sizes, and the extended
    // floors (syscall, two wake-ups, cross-memory attach at both sizes).
    let floors = of_test(&records, "floor");
    assert_eq!(floors.len(), 9, "{records:?}");
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
    // Hand-off, memcpy, syscall, two wake-ups, cross-memory attach.
    assert_eq!(written.lines().count(), 6, "{written}");
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

/// `quiver bench am`: the latency and rate of active messages over shm, tcp and udp, each
/// with UCX's figure and the ratio when `ucx_perftest` is installed (read, not judged),
/// and the floors beside them: the plain message and the cache-line hand-off.
#[test]
fn am_reports_latency_and_rate() {
    let ucx = Command::new("ucx_perftest").arg("-h").output().is_ok();
    for transport in ["shm", "tcp", "udp"] {
        let output = quiver_bench(&[
            "am",
            "--transport",
            transport,
            "--iters",
            "300",
            "--json",
            "-",
        ]);
        let records = json_lines(&output);
        let tests: Vec<&str> = records
            .iter()
            .map(|r| r["test"].as_str().unwrap())
            .collect();
        assert_eq!(
            tests,
            ["am_lat", "am_rate", "msg_lat", "handoff"],
            "{transport}"
        );
        for record in &records {
            assert_eq!(record["transport"], transport);
            positive(record, "quiver");
            if ucx {
                positive(record, "ucx");
                positive(record, "ratio");
            }
        }
    }
    let output = quiver_bench(&["am", "--transport", "mem"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("shm, tcp and udp"));
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

fn temp_dir(name: &str) -> std::path::PathBuf {
    let directory =
        std::env::temp_dir().join(format!("quiver-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    directory
}

/// bibw over tcp with messages far above the staging buffer and what a connection holds
/// in flight (it refused them while a tcp receive read a large message to its end even
/// inside progress, so both ranks waited for each other).
#[test]
fn bibw_over_tcp_takes_large_messages() {
    let output = quiver_bench(&[
        "bibw",
        "--transport",
        "tcp",
        "--sizes",
        "1M,4M",
        "--iters",
        "20",
        "--window",
        "4",
        "--json",
        "-",
    ]);
    let records = json_lines(&output);
    let bibw = of_test(&records, "bibw");
    assert_eq!(bibw.len(), 2, "{records:?}");
    for record in bibw {
        positive(record, "bandwidth_MBps");
    }
}

#[test]
fn osu_format_prints_the_osu_columns() {
    let output = quiver_bench(&[
        "pingpong", "bw", "--sizes", "8,1K", "--iters", "50", "--format", "osu",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("# Size          Latency (us)"), "{stdout}");
    assert!(stdout.contains("# Size      Bandwidth (MB/s)"), "{stdout}");
    // Data rows: a size and a number; everything else is a # comment or blank.
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    for row in rows {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields.len(), 2, "{row}");
        assert!(fields[0] == "8" || fields[0] == "1024", "{row}");
        assert!(fields[1].parse::<f64>().is_ok_and(|v| v > 0.0), "{row}");
    }
}

#[test]
fn plot_writes_a_valid_png() {
    let directory = temp_dir("plot");
    let path = directory.join("latency.png");
    let output = quiver_bench(&[
        "pingpong",
        "bw",
        "--sizes",
        "8,4K",
        "--iters",
        "50",
        "--plot",
        path.to_str().expect("utf-8 path"),
    ]);
    let written = std::fs::read(&path);
    std::fs::remove_dir_all(&directory).expect("remove temp dir");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bytes = written.expect("plot written");
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut pixels = vec![0u8; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut pixels).expect("PNG data decodes");
    assert!(info.width >= 400 && info.height >= 200, "{info:?}");
    // Not a blank image: the axes and lines are drawn over the white background.
    assert!(pixels.iter().any(|&byte| byte < 128));
}

#[test]
fn tune_writes_a_profile_that_info_reports() {
    let _guard = ONE_BENCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let directory = temp_dir("tune");
    let profile = directory.join("profile.json");
    let tune = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["tune", "--quick", "--transports", "shm", "--profile"])
        .arg(&profile)
        .output()
        .expect("run quiver tune");
    let written = std::fs::read_to_string(&profile);
    let info = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("info")
        .env("QUIVER_PROFILE", &profile)
        .env("QUIVER_UDP_IN_PLACE_MIN", "4K")
        .output()
        .expect("run quiver info");
    std::fs::remove_dir_all(&directory).expect("remove temp dir");
    assert!(
        tune.status.success(),
        "{}",
        String::from_utf8_lossy(&tune.stderr)
    );
    let value: Value = serde_json::from_str(&written.expect("profile written")).expect("JSON");
    assert_eq!(value["format"], "quiver-profile-1");
    let thresholds = &value["machines"][0]["thresholds"];
    assert!(
        thresholds["QUIVER_SHM_EAGER_MAX"].as_u64().is_some(),
        "{value}"
    );
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("(loaded)"), "{info}");
    let line = |name: &str| {
        info.lines()
            .find(|line| line.trim_start().starts_with(name) && line.contains(" from "))
            .unwrap_or_else(|| panic!("no {name} line: {info}"))
            .to_string()
    };
    assert!(
        line("QUIVER_SHM_EAGER_MAX").ends_with("from profile"),
        "{info}"
    );
    assert!(
        line("QUIVER_UDP_IN_PLACE_MIN").ends_with("from environment"),
        "{info}"
    );
    assert!(
        line("QUIVER_TCP_STAGING_BYTES").ends_with("from default"),
        "{info}"
    );
}

/// Every point over quiver's transports says what failure detection's looks cost during
/// its timed run.
#[test]
fn table_reports_the_detection_cost() {
    let table = quiver_bench(&[
        "pingpong",
        "--sizes",
        "8",
        "--iters",
        "200",
        "--transport",
        "tcp",
    ]);
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{stdout}");
    assert!(
        stdout.contains("detection on: ") && stdout.contains("ppm of the timed run"),
        "{stdout}"
    );
}

/// `--wait fd`: beside the busy-polling pingpong, an 8 B ping-pong whose ranks sleep in
/// poll(2) on their endpoint's descriptor, over each transport (variant `fd-wait`).
#[test]
fn wait_fd_adds_a_sleeping_pingpong_beside_the_busy_one() {
    for transport in ["shm", "tcp", "udp"] {
        let output = quiver_bench(&[
            "pingpong",
            "--transport",
            transport,
            "--sizes",
            "8,1K",
            "--iters",
            "100",
            "--wait",
            "fd",
            "--json",
            "-",
        ]);
        let records = json_lines(&output);
        let pingpong = of_test(&records, "pingpong");
        assert_eq!(pingpong.len(), 3, "{transport}: {records:?}");
        let sleeping: Vec<_> = pingpong
            .iter()
            .filter(|record| record["variant"] == "fd-wait")
            .collect();
        assert_eq!(sleeping.len(), 1, "{transport}: {records:?}");
        assert_eq!(sleeping[0]["size"], 8);
        assert_eq!(sleeping[0]["transport"], transport);
        positive(sleeping[0], "latency_us");
    }
}

/// `quiver bench rma` with tiny counts and no UCX: every one-sided figure over shm, tcp and
/// udp, end to end, as JSON with its provenance; `put`, `get` and `atomic` make their part.
#[test]
fn one_sided_operations_run_end_to_end_over_every_transport() {
    let run = |arguments: &[&str]| {
        let _guard = ONE_BENCH_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Command::new(env!("CARGO_BIN_EXE_quiver"))
            .arg("bench")
            .args(arguments)
            .args(["--iters", "100", "--no-ucx", "--json", "-"])
            .output()
            .expect("run quiver bench rma")
    };
    let records = json_lines(&run(&["rma"]));
    for transport in ["shm", "tcp", "udp"] {
        for op in ["put_lat", "put_bw", "msg_bw", "get_bw", "fetch_add"] {
            let found: Vec<_> = records
                .iter()
                .filter(|r| r["transport"] == transport && r["op"] == op)
                .collect();
            assert_eq!(found.len(), 1, "{transport} {op}: {records:?}");
            assert_eq!(found[0]["test"], "rma");
            assert_eq!(found[0]["system"], "quiver");
            positive(found[0], "value");
        }
    }
    // The targets are judged where they have a reference.
    let judged = |transport: &str, op: &str| {
        records
            .iter()
            .find(|r| r["transport"] == transport && r["op"] == op)
            .map(|r| r["met"].is_boolean())
    };
    assert_eq!(judged("shm", "fetch_add"), Some(true));
    assert_eq!(judged("tcp", "put_bw"), Some(true));
    for (part, ops) in [
        ("put", &["put_lat", "put_bw", "msg_bw"][..]),
        ("get", &["get_bw"][..]),
        ("atomic", &["fetch_add"][..]),
    ] {
        let records = json_lines(&run(&[part, "--transports", "shm"]));
        let mut made: Vec<&str> = records.iter().filter_map(|r| r["op"].as_str()).collect();
        made.sort_unstable();
        let mut expected = ops.to_vec();
        expected.sort_unstable();
        assert_eq!(made, expected, "quiver bench {part}");
    }
}
