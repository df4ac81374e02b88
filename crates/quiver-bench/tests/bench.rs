//! Integration tests of `quiver-bench`: the real binary; the lab's tests (loggp, pool),
//! paired runs (--detect, --baseline) and suites (compare, crossover, wire), JSON checked
//! line by line. No assertion is about speed: only that every point was measured and is
//! positive, and that the summaries pair what they should.

use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// The bench busy-polls on both CPUs: never run two at once.
static ONE_BENCH_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `quiver-bench bench ARGUMENTS --timeout 120`.
fn quiver_bench(arguments: &[&str]) -> Output {
    quiver_bench_with(arguments, &[])
}

/// [`quiver_bench`] with `variables` set in the bench's environment.
fn quiver_bench_with(arguments: &[&str], variables: &[(&str, &str)]) -> Output {
    let mut all = vec!["bench"];
    all.extend_from_slice(arguments);
    all.extend_from_slice(&["--timeout", "120"]);
    run(&all, variables)
}

/// `quiver-bench ARGUMENTS` (a command of the lab and its options).
fn quiver_bench_command(arguments: &[&str]) -> Output {
    run(arguments, &[])
}

fn run(arguments: &[&str], variables: &[(&str, &str)]) -> Output {
    let _guard = ONE_BENCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new(env!("CARGO_BIN_EXE_quiver-bench"))
        .args(arguments)
        .envs(variables.iter().copied())
        .output()
        .expect("run quiver-bench")
}

/// Parses every stdout line as a JSON object with the keys every record has.
fn json_lines(output: &Output) -> Vec<Value> {
    let stdout = String::from_utf8(output.stdout.clone()).expect("utf-8 stdout");
    assert!(
        output.status.success(),
        "quiver-bench failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
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
fn wire_reports_every_variant_of_every_pair() {
    let output = quiver_bench_command(&["wire", "--rounds", "3", "--iters", "100", "--json", "-"]);
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

/// The CI end-to-end run of `compare`: the table on stdout (a row per figure, a column per
/// transport, every cell with its ratio), every transport's JSON points in a file, and the
/// plot checked as an SVG document.
#[test]
fn compare_quick_measures_every_transport_tables_and_plots() {
    let directory = temp_dir("compare");
    let plot = directory.join("compare.svg");
    let json = directory.join("compare.jsonl");
    let output = quiver_bench_command(&[
        "compare",
        "--quick",
        "--timeout",
        "120",
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
    let output = quiver_bench_command(&[
        "crossover",
        "--quick",
        "--timeout",
        "120",
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
    // The table of `quiver-bench bench` shows the looks' cost as `quiver bench`'s does.
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
        let summary = check_summary(&records, (test, size), (transport, raw), pairs);
        summaries.push((test.to_string(), size, summary.clone()));
    }
    assert!(orders.windows(2).all(|two| two[0] == two[1]), "{orders:?}");
    summaries
}

/// The one baseline summary of `test` at `size`: quiver's `transport` against `raw` over
/// `pairs` pairs, with positive medians and ratios; returns its `summary` object.
fn check_summary<'a>(
    records: &'a [Value],
    (test, size): (&str, u64),
    (transport, raw): (&str, &str),
    pairs: u64,
) -> &'a Value {
    let summary: Vec<&Value> = of_test(records, test)
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
    summary
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
/// pairs of blocks of one launch, with the udp-against-tcp bandwidth target at 1 MiB.
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
/// `QUIVER_UDP_POST_IN_PLACE_MIN` (256 KiB, the default, set here all the same) is sent in
/// place: the sender keeps 2 distinct buffers posted and posts each again when it comes
/// back (6 times each in a window of 12), and the receiver checks every message's length
/// (an odd size, so a wrong length fails the run). tcp, in the same launch, and messages
/// under the eager size or over 1 MiB keep the old ways (no `posted`); with a larger
/// minimum set, 600000 bytes are not posted either.
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
