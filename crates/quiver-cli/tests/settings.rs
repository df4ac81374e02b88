//! Configuration hygiene, end to end: `quiver info` (text, `--protocols`, `--json`), the
//! warning about an unknown `QUIVER_*` variable (by `quiver info` and once per rank when a
//! context is created), `QUIVER_PROTO_INFO=1`'s report per connection, and the profile
//! under `XDG_CONFIG_HOME`.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

const QUIVER: &str = env!("CARGO_BIN_EXE_quiver");
const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

/// A command with no `QUIVER_*` variable of the test's own environment (a developer's
/// settings must not change what the tests see) and no logging.
fn clean(program: &str) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("QUIVER_") {
            command.env_remove(name);
        }
    }
    command.env("QUIVER_PROFILE", "off");
    command
}

fn info(args: &[&str], variables: &[(&str, &str)]) -> Output {
    let output = clean(QUIVER)
        .arg("info")
        .args(args)
        .envs(variables.iter().copied())
        .output()
        .expect("run quiver info");
    assert!(
        output.status.success(),
        "quiver info {args:?} failed: {}",
        text(&output.stderr)
    );
    output
}

fn info_json(args: &[&str], variables: &[(&str, &str)]) -> Value {
    let output = info(args, variables);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "quiver info {args:?} is not JSON ({error}): {}",
            text(&output.stdout)
        )
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A two-rank job of `quiver-testprog alltoall` with `variables`; returns its stderr.
fn job_stderr(variables: &[(&str, &str)]) -> String {
    let output = clean(QUIVER)
        .args(["run", "-n", "2", "--", TESTPROG, "alltoall", "2", "1K", "1"])
        .envs(variables.iter().copied())
        .stdout(Stdio::null())
        .output()
        .expect("run the job");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "the job failed: {stderr}");
    stderr
}

/// The protocol ranges of `transport` in `quiver info --json`, checked to cover every size
/// once: consecutive, from 0 up, the last without an upper bound.
fn ranges_of(report: &Value, transport: &str) -> Vec<Value> {
    let entry = report["protocols"]
        .as_array()
        .expect("protocols")
        .iter()
        .find(|entry| entry["transport"] == transport)
        .unwrap_or_else(|| panic!("no {transport} in {report}"));
    let ranges = entry["ranges"].as_array().expect("ranges").clone();
    let mut next = 0;
    for (i, range) in ranges.iter().enumerate() {
        assert_eq!(range["first"], next, "{transport} range {i} of {ranges:?}");
        assert!(range["protocol"].as_str().is_some_and(|p| !p.is_empty()));
        assert!(range["why"].as_str().is_some_and(|why| !why.is_empty()));
        match range["last"].as_u64() {
            Some(last) => next = last + 1,
            None => assert_eq!(i, ranges.len() - 1, "unbounded before the end: {ranges:?}"),
        }
    }
    assert!(ranges.last().expect("a range")["last"].is_null());
    ranges
}

/// The start of a range's line in the text reports: `0 B .. 40 B          short`.
fn range_line(range: &Value) -> String {
    let last = range["last"]
        .as_u64()
        .map_or("any".to_string(), |last| format!("{last} B"));
    format!(
        "{} B .. {last:<12} {} ",
        range["first"],
        range["protocol"].as_str().expect("a protocol")
    )
}

#[test]
fn info_json_holds_the_whole_report() {
    let report = info_json(
        &["--json"],
        &[
            ("QUIVER_TRANSPORTS", "shm,udp,tcp"),
            ("QUIVER_SHM_EAGER_MAX", "4096"),
        ],
    );
    for key in [
        "schema_version",
        "host",
        "quiver_version",
        "commit",
        "machine",
        "transports",
        "addresses",
        "links",
        "protocols",
        "profile",
        "thresholds",
        "settings",
        "bootstrap",
        "job",
        "unknown_variables",
    ] {
        assert!(report.get(key).is_some(), "no {key} in {report}");
    }
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["quiver_version"], env!("CARGO_PKG_VERSION"));
    assert!(report["job"].is_null(), "not inside a job");
    assert_eq!(report["unknown_variables"], Value::Array(Vec::new()));
    let names: Vec<&str> = report["transports"]
        .as_array()
        .expect("transports")
        .iter()
        .map(|t| t["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["shm", "udp", "tcp"]);
    // The shm ranges follow the setting from the environment, and say where it came from.
    let shm = ranges_of(&report, "shm");
    let protocols: Vec<&str> = shm
        .iter()
        .map(|r| r["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(
        protocols,
        ["short", "eager", "rendezvous", "rendezvous-split"]
    );
    assert_eq!(shm[1]["last"], 4096);
    assert!(shm[2]["why"]
        .as_str()
        .unwrap()
        .contains("QUIVER_SHM_EAGER_MAX"));
    let eager = report["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .find(|t| t["name"] == "QUIVER_SHM_EAGER_MAX")
        .expect("the eager threshold");
    assert_eq!(eager["source"], "environment");
    let settings = report["settings"].as_array().expect("settings");
    assert!(settings
        .iter()
        .any(|s| s["name"] == "QUIVER_PROTO_INFO" && s["value"] == "0"));
    ranges_of(&report, "udp");
    ranges_of(&report, "tcp");
}

#[test]
fn info_protocols_names_every_range_of_every_transport() {
    let variables = [("QUIVER_TRANSPORTS", "shm,udp,tcp")];
    let report = info_json(&["--json", "--protocols"], &variables);
    assert!(report.get("settings").is_none(), "only the protocols");
    let printed = text(&info(&["--protocols"], &variables).stdout);
    for transport in ["shm", "udp", "tcp"] {
        assert!(printed.contains(&format!("\n{transport} (")), "{printed}");
        for range in ranges_of(&report, transport) {
            let line = range_line(&range);
            assert!(printed.contains(&line), "no {line:?} in {printed}");
        }
    }
}

#[test]
fn info_names_an_unknown_variable_with_the_closest_known_one() {
    let variables = [
        ("QUIVER_SHM_EAGER_MAXX", "64K"),
        ("QUIVER_TRANSPORT", "tcp"),
        // The programs' own variables and the simulator's are known.
        ("QUIVER_PLOT_FONT", "/nonexistent.ttf"),
        ("QUIVER_SIM_SEEDS", "10"),
    ];
    let printed = text(&info(&[], &variables).stdout);
    assert!(
        printed.contains(
            "warning: QUIVER_SHM_EAGER_MAXX is set but quiver knows no such variable; it is \
             ignored (did you mean QUIVER_SHM_EAGER_MAX?)"
        ),
        "{printed}"
    );
    assert!(
        printed.contains("(did you mean QUIVER_TRANSPORTS?)"),
        "{printed}"
    );
    assert!(!printed.contains("QUIVER_PLOT_FONT is set"), "{printed}");
    assert!(!printed.contains("QUIVER_SIM_SEEDS"), "{printed}");
    let report = info_json(&["--json"], &variables);
    let unknown = report["unknown_variables"].as_array().expect("a list");
    let pairs: Vec<(&str, &str)> = unknown
        .iter()
        .map(|u| (u["name"].as_str().unwrap(), u["closest"].as_str().unwrap()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("QUIVER_SHM_EAGER_MAXX", "QUIVER_SHM_EAGER_MAX"),
            ("QUIVER_TRANSPORT", "QUIVER_TRANSPORTS")
        ]
    );
}

#[test]
fn a_context_warns_once_per_rank_about_an_unknown_variable() {
    let warning = "QUIVER_SPIN_UZ is set but quiver knows no such variable; it is ignored \
                   (did you mean QUIVER_SPIN_US?)";
    let plain = job_stderr(&[("QUIVER_SPIN_UZ", "5")]);
    assert_eq!(plain.matches(warning).count(), 2, "{plain}");
    assert!(plain.contains("quiver: warning: "), "{plain}");
    // Through tracing when the subscriber records the warning...
    let logged = job_stderr(&[("QUIVER_SPIN_UZ", "5"), ("QUIVER_LOG", "warn")]);
    assert_eq!(logged.matches(warning).count(), 2, "{logged}");
    assert!(logged.contains("WARN quiver::config"), "{logged}");
    // ...and on stderr when its filter leaves the warning out: never lost.
    let filtered = job_stderr(&[
        ("QUIVER_SPIN_UZ", "5"),
        ("QUIVER_LOG", "quiver::transport=debug"),
    ]);
    assert_eq!(filtered.matches(warning).count(), 2, "{filtered}");
    assert!(
        !job_stderr(&[]).contains("warning"),
        "a clean environment warns"
    );
}

#[test]
fn proto_info_reports_each_connection_with_every_size_range() {
    for transport in ["shm", "tcp", "udp"] {
        let variables = [("QUIVER_TRANSPORTS", transport)];
        let report = info_json(&["--json", "--protocols"], &variables);
        let ranges = ranges_of(&report, transport);
        let quiet = job_stderr(&variables);
        assert!(!quiet.contains("quiver: connection"), "{quiet}");
        let stderr = job_stderr(&[variables[0], ("QUIVER_PROTO_INFO", "1")]);
        // Each rank connects to the other once.
        let headers: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains("quiver: connection"))
            .collect();
        assert_eq!(headers.len(), 2, "{stderr}");
        for header in &headers {
            assert!(header.contains(&format!(" over {transport} (")), "{header}");
        }
        for range in &ranges {
            let line = range_line(range);
            let count = stderr.lines().filter(|l| l.contains(&line)).count();
            assert_eq!(count, 2, "{line:?} not once per connection: {stderr}");
        }
    }
}

#[test]
fn the_profile_lives_under_xdg_config_home() {
    let run = |variables: &[(&str, &str)]| {
        let output = clean(QUIVER)
            .env_remove("QUIVER_PROFILE")
            .args(["info", "--json"])
            .envs(variables.iter().copied())
            .output()
            .expect("run quiver info");
        assert!(output.status.success());
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        report["profile"].as_str().expect("profile").to_string()
    };
    let dir = std::env::temp_dir().join(format!("quiver-xdg-{}", std::process::id()));
    let xdg = dir.to_str().expect("a UTF-8 path");
    let profile = run(&[("XDG_CONFIG_HOME", xdg), ("HOME", "/nonexistent-home")]);
    assert!(
        profile.starts_with(&format!("{xdg}/quiver/profile.json")),
        "{profile}"
    );
    let home = run(&[("XDG_CONFIG_HOME", ""), ("HOME", "/nonexistent-home")]);
    assert!(
        home.starts_with("/nonexistent-home/.config/quiver/profile.json"),
        "{home}"
    );
}
