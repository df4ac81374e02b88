//! Integration tests of `quiver bench`: the real binary, a small sweep, JSON checked line by
//! line. No assertion is about speed: only that every point was measured and is positive.

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

#[test]
fn wire_reports_every_variant_of_every_pair() {
    let output = quiver_bench(&["wire", "--rounds", "3", "--iters", "100", "--json", "-"]);
    let records = json_lines(&output);
    let wire = of_test(&records, "wire");
    // Three pairs of three latency blocks (8 B) and three bandwidth blocks (1 MiB). The
    // bandwidth blocks need udp buffers that hold a 1 MiB message: forced as root, else
    // as net.core.rmem_max allows.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let with_bandwidth = root || wire.len() == 18;
    assert_eq!(
        wire.len(),
        if with_bandwidth { 18 } else { 9 },
        "{records:?}"
    );
    for pair in 0..3 {
        let of_pair: Vec<&&Value> = wire.iter().filter(|r| r["round"] == pair).collect();
        let mut latency: Vec<&str> = of_pair
            .iter()
            .filter(|r| r["size"] == 8)
            .map(|r| {
                positive(r, "latency_us");
                r["variant"].as_str().unwrap_or("")
            })
            .collect();
        let mut bandwidth: Vec<&str> = of_pair
            .iter()
            .filter(|r| r["size"] == 1 << 20)
            .map(|r| {
                positive(r, "bandwidth_MBps");
                r["variant"].as_str().unwrap_or("")
            })
            .collect();
        latency.sort_unstable();
        bandwidth.sort_unstable();
        assert_eq!(latency, ["data", "plain", "stream"], "pair {pair}");
        let expected: &[&str] = if with_bandwidth {
            &["checked", "plain", "tcp"]
        } else {
            &[]
        };
        assert_eq!(bandwidth, expected, "pair {pair}");
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let directory =
        std::env::temp_dir().join(format!("quiver-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    directory
}

#[test]
fn loggp_reports_the_five_parameters_and_the_fit() {
    let output = quiver_bench(&[
        "loggp", "--sizes", "8,4K,64K", "--iters", "200", "--window", "16", "--json", "-",
    ]);
    let records = json_lines(&output);
    let points: Vec<&Value> = of_test(&records, "loggp")
        .into_iter()
        .filter(|record| record.get("variant").is_none())
        .collect();
    assert_eq!(points.len(), 3, "{records:?}");
    for record in &points {
        for key in ["o_s_us", "o_r_us", "g_us", "round_trip_us"] {
            assert!(
                record[key].as_f64().is_some_and(|v| v >= 0.0),
                "{key} in {record}"
            );
        }
        assert!(
            record["L_us"].as_f64().is_some_and(f64::is_finite),
            "{record}"
        );
    }
    assert!(points[0].get("G_ns_per_byte").is_none());
    assert!(
        points[2]["G_ns_per_byte"].as_f64().is_some(),
        "{}",
        points[2]
    );
    let fit: Vec<&Value> = of_test(&records, "loggp")
        .into_iter()
        .filter(|record| record["variant"] == "fit")
        .collect();
    assert_eq!(fit.len(), 1, "{records:?}");
    assert_eq!(fit[0]["size"], 8);
    assert_eq!(fit[0]["fit_sizes"], serde_json::json!([4096, 65536]));
    assert!(fit[0]["G_ns_per_byte"].as_f64().is_some(), "{}", fit[0]);
    // loggp measures the extended floors: a system call and the wake-ups.
    let floors: Vec<&str> = of_test(&records, "floor")
        .iter()
        .filter_map(|record| record["floor"].as_str())
        .collect();
    for floor in ["syscall", "wakeup", "cma"] {
        assert!(floors.contains(&floor), "{floor} missing: {floors:?}");
    }
}

#[test]
fn bibw_and_pool_report_every_point() {
    let output = quiver_bench(&[
        "bibw", "pool", "--sizes", "8,64K", "--iters", "50", "--window", "8", "--json", "-",
    ]);
    let records = json_lines(&output);
    let bibw = of_test(&records, "bibw");
    assert_eq!(bibw.len(), 2, "{records:?}");
    for record in bibw {
        positive(record, "bandwidth_MBps");
        positive(record, "floor_ratio");
    }
    let variants: Vec<(u64, &str)> = of_test(&records, "pool")
        .iter()
        .map(|record| {
            positive(record, "latency_us");
            (
                record["size"].as_u64().unwrap_or(0),
                record["variant"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        variants,
        vec![
            (8, "pooled"),
            (8, "fresh"),
            (65536, "pooled"),
            (65536, "fresh")
        ]
    );
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

/// The CI end-to-end run of `compare`: the table on stdout (a row per figure, a column per
/// transport, every cell with its ratio), every transport's JSON points in a file, and the
/// plot checked as an SVG document.
#[test]
fn compare_quick_measures_every_transport_tables_and_plots() {
    let directory = temp_dir("compare");
    let plot = directory.join("compare.svg");
    let json = directory.join("compare.jsonl");
    let output = quiver_bench(&[
        "compare",
        "--quick",
        "--json",
        json.to_str().expect("utf-8 path"),
        "--plot",
        plot.to_str().expect("utf-8 path"),
    ]);
    let svg = std::fs::read_to_string(&plot);
    let lines = std::fs::read_to_string(&json);
    std::fs::remove_dir_all(&directory).expect("remove temp dir");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let header = stdout
        .lines()
        .find(|line| line.contains("raw-udp") && line.contains("floor"))
        .unwrap_or_else(|| panic!("no header line: {stdout}"));
    for transport in ["shm", "udp", "tcp", "raw-tcp"] {
        assert!(header.contains(transport), "{header}");
    }
    for row in [
        "8 B one-way latency (µs)",
        "1 KiB one-way latency (µs)",
        "64 KiB bandwidth (MB/s)",
        "1 MiB bandwidth (MB/s)",
        "8 B message rate (Mmsg/s)",
        "o_s, 8 B (µs)",
        "o_r, 8 B (µs)",
        "L, 8 B (µs)",
        "g, 8 B (µs)",
        "G, 64 KiB..1 MiB (ns/B)",
    ] {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row}: {stdout}"));
        assert!(line.contains("x)"), "no ratio in {line}");
    }
    let records: Vec<Value> = lines
        .expect("JSON written")
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect();
    for transport in ["shm", "udp", "tcp", "raw-udp", "raw-tcp"] {
        let of_transport: Vec<&Value> = records
            .iter()
            .filter(|record| record["transport"] == transport)
            .collect();
        let has = |test: &str, size: u64| {
            of_transport
                .iter()
                .any(|record| record["test"] == test && record["size"] == size)
        };
        assert!(has("pingpong", 8) && has("pingpong", 1024), "{transport}");
        assert!(has("bw", 65536) && has("bw", 1 << 20), "{transport}");
        assert!(has("rate", 8), "{transport}");
        let fit = of_transport
            .iter()
            .find(|record| record["test"] == "loggp" && record["variant"] == "fit")
            .unwrap_or_else(|| panic!("no loggp fit for {transport}"));
        for key in ["o_s_us", "o_r_us", "L_us", "g_us", "G_ns_per_byte"] {
            assert!(fit[key].as_f64().is_some(), "{key} of {transport}: {fit}");
        }
    }
    let svg = svg.expect("plot written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for label in ["latency (µs)", "bandwidth (MB/s)", "raw-tcp", "shm"] {
        assert!(svg.contains(label), "{label} missing from the plot");
    }
}

#[test]
fn crossover_quick_finds_a_threshold_per_transport() {
    let output = quiver_bench(&[
        "crossover",
        "--quick",
        "--transports",
        "shm,tcp",
        "--json",
        "-",
    ]);
    let records = json_lines(&output);
    let summaries = of_test(&records, "crossover");
    assert_eq!(summaries.len(), 2, "{records:?}");
    for summary in summaries {
        let details = &summary["summary"];
        assert!(details["setting"].is_string(), "{summary}");
        assert!(details["best"].as_u64().is_some(), "{summary}");
        assert_eq!(details["best"], summary["size"]);
    }
    let variants: Vec<&str> = of_test(&records, "pingpong")
        .iter()
        .filter_map(|record| record["variant"].as_str())
        .collect();
    assert!(variants.contains(&"copy") && variants.contains(&"zero_copy"));
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

/// The one on/off summary of `test` in `records`, over `rounds` rounds (or pairs), with a
/// positive paired ratio.
fn detect_summary<'a>(records: &'a [Value], test: &str, rounds: u64) -> &'a Value {
    let summaries: Vec<&Value> = of_test(records, test)
        .into_iter()
        .filter(|record| record["variant"] == "detect_on_off")
        .collect();
    assert_eq!(summaries.len(), 1, "{test}: {summaries:?}");
    let summary = &summaries[0]["summary"];
    assert_eq!(summary["rounds"], rounds, "{summary}");
    positive(summary, "paired_ratio_median");
    summary
}

#[test]
fn detect_both_pairs_rounds_and_reports_the_looks() {
    let output = quiver_bench(&[
        "pingpong", "bw", "--sizes", "8", "--iters", "200", "--detect", "both", "--rounds", "2",
        "--json", "-",
    ]);
    let records = json_lines(&output);
    for test in ["pingpong", "bw"] {
        let points: Vec<&Value> = of_test(&records, test)
            .into_iter()
            .filter(|record| record["variant"].is_null())
            .collect();
        let modes: Vec<(String, u64)> = points
            .iter()
            .map(|record| {
                (
                    record["detect"].as_str().unwrap_or("?").to_string(),
                    record["round"].as_u64().unwrap_or(99),
                )
            })
            .collect();
        let expected: Vec<(String, u64)> = [("on", 0), ("off", 0), ("on", 1), ("off", 1)]
            .iter()
            .map(|&(mode, round)| (mode.to_string(), round))
            .collect();
        assert_eq!(modes, expected, "{test}");
        for record in &points {
            assert!(record["detect_looks"].as_u64().is_some(), "{record}");
            assert!(record["detect_ns"].as_u64().is_some(), "{record}");
            let share = record["detect_share"].as_f64().expect("detect_share");
            assert!((0.0..1.0).contains(&share), "{record}");
        }
        let summary = detect_summary(&records, test, 2);
        positive(summary, "median_on");
        positive(summary, "median_off");
        // Two rounds are too few for a 95% interval.
        assert!(summary["interval"].is_null(), "{summary}");
    }
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

#[test]
fn detect_interleave_switches_blocks_in_one_launch() {
    let output = quiver_bench(&[
        "pingpong",
        "rate",
        "--sizes",
        "8",
        "--iters",
        "100",
        "--detect",
        "interleave",
        "--rounds",
        "6",
        "--json",
        "-",
    ]);
    let records = json_lines(&output);
    // Each pair has one block on and one off, in either order.
    let expected: Vec<u64> = (0..6u64).flat_map(|pair| [pair, pair]).collect();
    for test in ["pingpong", "rate"] {
        let points: Vec<&Value> = of_test(&records, test)
            .into_iter()
            .filter(|record| record["variant"].is_null())
            .collect();
        let pairs: Vec<u64> = points
            .iter()
            .map(|record| record["round"].as_u64().unwrap_or(99))
            .collect();
        assert_eq!(pairs, expected, "{test}");
        for pair in points.chunks(2) {
            let mut modes = [pair[0]["detect"].as_str(), pair[1]["detect"].as_str()];
            modes.sort_unstable();
            assert_eq!(modes, [Some("off"), Some("on")], "{test}: {pair:?}");
        }
        for record in &points {
            assert_eq!(record["iters"], 100, "{record}");
            assert!(record["detect_looks"].as_u64().is_some(), "{record}");
        }
        let summary = detect_summary(&records, test, 6);
        // Six pairs give a 95% interval around the paired median.
        let low = summary["interval"][0].as_f64().expect("interval low");
        let high = summary["interval"][1].as_f64().expect("interval high");
        let median = summary["paired_ratio_median"].as_f64().expect("median");
        assert!(low <= median && median <= high, "{summary}");
    }
    let refused = quiver_bench(&["loggp", "--detect", "interleave"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--detect interleave"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// `--baseline interleave` over `transport` with `pairs` pairs: every point's blocks pair
/// up (one quiver and one raw record per pair, in the same order at every point), and one
/// summary per point carries the paired ratio; returns the summaries by (test, size).
fn check_baseline_interleave(transport: &str, raw: &str, pairs: u64) -> Vec<(String, u64, Value)> {
    check_baseline(transport, raw, "interleave", "8,4K", "50", pairs)
}

/// As [`check_baseline_interleave`], for `--baseline MODE` (interleave: `raw` is the raw
/// socket baseline; tcp: `raw` is quiver's tcp), at the given sizes and iterations.
fn check_baseline(
    transport: &str,
    raw: &str,
    mode: &str,
    sizes: &str,
    iters: &str,
    pairs: u64,
) -> Vec<(String, u64, Value)> {
    let rounds = pairs.to_string();
    let output = quiver_bench(&[
        "pingpong",
        "bw",
        "rate",
        "--sizes",
        sizes,
        "--iters",
        iters,
        "--transport",
        transport,
        "--baseline",
        mode,
        "--rounds",
        &rounds,
        "--json",
        "-",
    ]);
    let records = json_lines(&output);
    let mut orders: Vec<Vec<String>> = Vec::new();
    let mut summaries = Vec::new();
    let larger: u64 = match sizes.split_once(',') {
        Some((_, "4K")) => 4096,
        Some((_, "1M")) => 1 << 20,
        _ => panic!("check_baseline takes 8,4K or 8,1M, not {sizes}"),
    };
    for (test, size) in [
        ("pingpong", 8),
        ("pingpong", larger),
        ("bw", 8),
        ("bw", larger),
        ("rate", 8),
    ] {
        let blocks: Vec<&Value> = of_test(&records, test)
            .into_iter()
            .filter(|record| record["size"] == size && record["variant"].is_null())
            .collect();
        assert_eq!(blocks.len() as u64, 2 * pairs, "{test} {size}: {blocks:?}");
        for (index, pair) in blocks.chunks(2).enumerate() {
            let mut transports: Vec<&str> = pair
                .iter()
                .map(|record| {
                    assert_eq!(record["round"], index as u64, "{record}");
                    assert_eq!(record["iters"].to_string(), iters, "{record}");
                    let figure = match test {
                        "pingpong" => "latency_us",
                        "bw" => "bandwidth_MBps",
                        _ => "rate_Mmsgs",
                    };
                    positive(record, figure);
                    record["transport"].as_str().unwrap_or("?")
                })
                .collect();
            // quiver's blocks carry their failure detection, raw ones none.
            for record in pair {
                assert_eq!(
                    record["detect"].is_string(),
                    record["transport"] == transport || !raw.starts_with("raw-"),
                    "{record}"
                );
            }
            transports.sort_unstable();
            let mut expected = [transport, raw];
            expected.sort_unstable();
            assert_eq!(transports, expected, "{test} {size} pair {index}");
        }
        // Every point runs its pairs in the same order.
        orders.push(
            blocks
                .iter()
                .map(|record| record["transport"].as_str().unwrap_or("?").to_string())
                .collect(),
        );
        let summary: Vec<&Value> = of_test(&records, test)
            .into_iter()
            .filter(|record| record["size"] == size && record["variant"] == "baseline_quiver_raw")
            .collect();
        assert_eq!(summary.len(), 1, "{test} {size}: {summary:?}");
        assert_eq!(summary[0]["transport"], transport);
        let summary = &summary[0]["summary"];
        assert_eq!(summary["pairs"], pairs, "{summary}");
        assert_eq!(summary["raw_transport"], raw, "{summary}");
        let ratio = if raw.starts_with("raw-") {
            "quiver / raw".to_string()
        } else {
            format!("{transport} / {raw}")
        };
        assert_eq!(summary["ratio"], ratio, "{summary}");
        assert_eq!(
            summary["better"],
            if test == "pingpong" {
                "lower"
            } else {
                "higher"
            }
        );
        positive(summary, "median_quiver");
        positive(summary, "median_raw");
        positive(summary, "ratio_of_medians");
        positive(summary, "paired_ratio_median");
        assert_eq!(
            summary["paired_ratios"].as_array().map(Vec::len),
            Some(pairs as usize)
        );
        summaries.push((test.to_string(), size, summary.clone()));
    }
    assert!(orders.windows(2).all(|two| two[0] == two[1]), "{orders:?}");
    summaries
}

#[test]
fn baseline_interleave_pairs_quiver_and_raw_blocks_over_udp() {
    let summaries = check_baseline_interleave("udp", "raw-udp", 2);
    for (test, size, summary) in &summaries {
        // Two pairs: too few for a 95% interval.
        assert!(summary["interval"].is_null(), "{test} {size}: {summary}");
        // The 8 B latency target applies to udp; no bandwidth target for udp.
        let has_target = test == "pingpong" && *size == 8;
        assert_eq!(
            summary["target"].is_string(),
            has_target,
            "{test} {size}: {summary}"
        );
        assert_eq!(summary["target_met"].is_boolean(), has_target, "{summary}");
        assert!(summary["target_shown"].is_null(), "{summary}");
    }
}

/// `--baseline tcp`: quiver's udp and quiver's tcp (a second context in each rank) in
/// pairs of blocks of one launch, with issue 3's udp-against-tcp bandwidth target at 1 MiB.
#[test]
fn baseline_tcp_pairs_quiver_udp_and_tcp_blocks() {
    let summaries = check_baseline("udp", "tcp", "tcp", "8,1M", "2", 6);
    assert_eq!(summaries.len(), 5, "{summaries:?}");
    for (test, size, summary) in &summaries {
        let has_target = test == "bw" && *size == 1 << 20;
        assert_eq!(
            summary["target"].is_string(),
            has_target,
            "{test} {size}: {summary}"
        );
        assert_eq!(
            summary["target_shown"].is_boolean(),
            has_target,
            "{summary}"
        );
    }
}

#[test]
fn baseline_interleave_pairs_quiver_and_raw_blocks_over_tcp() {
    let summaries = check_baseline_interleave("tcp", "raw-tcp", 6);
    for (test, size, summary) in &summaries {
        // Six pairs give a 95% interval around the paired median.
        let low = summary["interval"][0].as_f64().expect("interval low");
        let high = summary["interval"][1].as_f64().expect("interval high");
        let median = summary["paired_ratio_median"].as_f64().expect("median");
        assert!(low <= median && median <= high, "{test} {size}: {summary}");
        let has_target = test == "pingpong" && *size == 8;
        assert_eq!(
            summary["target"].is_string(),
            has_target,
            "{test} {size}: {summary}"
        );
        assert_eq!(
            summary["target_shown"].is_boolean(),
            has_target,
            "{summary}"
        );
    }
    // The table: one section per test with both transports, and the summary.
    let table = quiver_bench(&[
        "pingpong",
        "--sizes",
        "8",
        "--iters",
        "50",
        "--transport",
        "tcp",
        "--baseline",
        "interleave",
        "--rounds",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{stdout}");
    assert_eq!(
        stdout.matches("pingpong: one-way latency").count(),
        1,
        "{stdout}"
    );
    assert!(stdout.contains("raw-tcp pair 1"), "{stdout}");
    assert!(
        stdout.contains("quiver tcp against its raw-socket baseline raw-tcp, 2 pairs"),
        "{stdout}"
    );
    assert!(stdout.contains("<= 1.05: met "), "{stdout}");
    let refused = quiver_bench(&["bibw", "--transport", "tcp", "--baseline", "interleave"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--baseline interleave"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// bw above the eager limit over udp, where a posted send of at least
/// `QUIVER_UDP_POST_IN_PLACE_MIN` (256 KiB, the default, set here all the same) is sent in place: the sender keeps 2 distinct
/// buffers posted and posts each again when it comes back (6 times each in a window of
/// 12), and the receiver checks every message's length (an odd size, so a wrong length
/// fails the run). tcp, in the same launch, and messages under the eager size or over
/// 1 MiB keep the old ways (no `posted`); with a larger minimum set, 600000 bytes are
/// not posted either.
#[test]
fn bw_over_udp_keeps_large_messages_posted_in_place() {
    let arguments = [
        "bw",
        "--transport",
        "udp",
        "--baseline",
        "tcp",
        "--rounds",
        "2",
        "--sizes",
        "64K,1000003,3M",
        "--iters",
        "3",
        "--window",
        "12",
        "--json",
        "-",
    ];
    let records = json_lines(&quiver_bench_with(
        &arguments,
        &[("QUIVER_UDP_POST_IN_PLACE_MIN", "256K")],
    ));
    let bw: Vec<&Value> = of_test(&records, "bw")
        .into_iter()
        .filter(|record| record["summary"].is_null())
        .collect();
    // Three sizes, two rounds, udp and tcp.
    assert_eq!(bw.len(), 12, "{records:?}");
    for record in &bw {
        positive(record, "bandwidth_MBps");
        assert_eq!(record["window"], 12, "{record}");
        let in_place = record["transport"] == "udp" && record["size"] == 1_000_003;
        let expected = if in_place {
            Value::from(2)
        } else {
            Value::Null
        };
        assert_eq!(record["posted"], expected, "{record}");
    }

    // The bench asks the endpoint, which follows the configuration.
    let output = quiver_bench_with(
        &[
            "bw",
            "--transport",
            "udp",
            "--sizes",
            "600000,1000003",
            "--iters",
            "3",
            "--window",
            "3",
            "--json",
            "-",
        ],
        &[("QUIVER_UDP_POST_IN_PLACE_MIN", "768K")],
    );
    let records = json_lines(&output);
    let bw = of_test(&records, "bw");
    assert_eq!(bw.len(), 2, "{records:?}");
    for record in bw {
        positive(record, "bandwidth_MBps");
        let expected = if record["size"] == 1_000_003 {
            Value::from(2)
        } else {
            Value::Null
        };
        assert_eq!(record["posted"], expected, "{record}");
    }
}
