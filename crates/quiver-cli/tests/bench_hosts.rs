//! `quiver bench` between ranks a launcher started (docs/bench.md, "Across hosts"): under
//! `mpirun` with the ranks in two network namespaces joined by a veth link (simulated
//! hosts), and as two commands started by hand that meet with `--rendezvous`, in the same
//! namespaces and on loopback. The output is parsed, never timed: rank 0's table names
//! both ranks' addresses, its JSON lines hold every point, and rank 1 prints nothing.
//!
//! Needs root for the namespaces, and `mpirun` with quiver built with PMIx for the mpirun
//! test; missing ones are skipped with a message, except under CI (CI=true).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::netns::{is_root, quiver, Testbed};

/// The bench busy-polls on both CPUs: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Each run must finish within this.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// A small plan: two sizes each of pingpong and bw, few iterations.
const PLAN: [&str; 6] = ["--sizes", "8,64K", "--iters", "30", "pingpong", "bw"];

/// Variables of launchers and quiver that must not leak into the runs.
const SCRUBBED: &[&str] = &[
    "QUIVER_RANK",
    "QUIVER_SIZE",
    "QUIVER_JOB_ID",
    "QUIVER_JOB_KEY",
    "QUIVER_JOB_KEY_FILE",
    "QUIVER_ADDRS",
    "QUIVER_TRANSPORTS",
    "QUIVER_BOOTSTRAP",
    "QUIVER_RENDEZVOUS",
    "QUIVER_NETNS",
    "QUIVER_BIND_ADDR",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
];

fn require(available: bool, what: &str) -> bool {
    if available {
        return true;
    }
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{what} is missing, and CI must run this test"
    );
    eprintln!("skipped: {what} is missing");
    false
}

fn scrubbed(mut cmd: Command) -> Command {
    for var in SCRUBBED {
        cmd.env_remove(var);
    }
    cmd
}

fn random_key() -> String {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).expect("random");
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A test's scratch directory, removed when the test ends (also when it fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("quiver-bench-hosts-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts `cmd` with its output captured, in a process group of its own.
fn start(mut cmd: Command) -> Child {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start the run")
}

/// Waits for every child (killing their groups at the timeout) and returns their outputs.
fn finish(children: Vec<Child>) -> Vec<Output> {
    let deadline = Instant::now() + RUN_TIMEOUT;
    let groups: Vec<i32> = children.iter().map(|child| child.id() as i32).collect();
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if Instant::now() >= deadline {
                    for &group in &groups {
                        // SAFETY: kill has no memory effects; the groups are the children's
                        // own, not yet reaped (they are waited for below).
                        unsafe { libc::kill(-group, libc::SIGKILL) };
                    }
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        })
    };
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().expect("wait for the run"))
        .collect();
    done.store(true, Ordering::SeqCst);
    let timed_out = watchdog.join().expect("the watchdog");
    assert!(
        !timed_out,
        "the run did not finish within {RUN_TIMEOUT:?}:\n{}",
        outputs.iter().map(text).collect::<Vec<_>>().join("\n")
    );
    outputs
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Checks rank 0's table (stdout) and JSON file: the ranks at `addresses` (prefixes),
/// `bootstrap`, and every point of [`PLAN`] over `transport`.
fn assert_measured(
    table: &str,
    json: &Path,
    transport: &str,
    bootstrap: &str,
    addresses: [&str; 2],
) {
    let headers = table
        .lines()
        .filter(|line| line.starts_with("quiver bench: transport"))
        .count();
    assert_eq!(headers, 1, "one report, from rank 0:\n{table}");
    assert!(
        table.contains(&format!(
            "quiver bench: transport {transport}, ranks from the launcher (bootstrap {bootstrap})"
        )),
        "{table}"
    );
    for (rank, address) in addresses.iter().enumerate() {
        let line = table
            .lines()
            .find(|line| {
                line.trim_start()
                    .starts_with(&format!("rank {rank}: host "))
            })
            .unwrap_or_else(|| panic!("no line for rank {rank}:\n{table}"));
        assert!(
            line.contains(&format!("address {address}")),
            "rank {rank} not at {address}:\n{table}"
        );
    }
    assert!(table.contains("floors: not measured"), "{table}");
    for section in ["pingpong: one-way latency", "bw: streaming"] {
        assert!(table.contains(section), "no {section} section:\n{table}");
    }
    let json = std::fs::read_to_string(json).expect("rank 0 wrote the JSON file");
    let records: Vec<Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let points: Vec<(String, u64)> = records
        .iter()
        .map(|record| {
            assert_eq!(record["transport"], transport, "{record}");
            assert!(record["floor_ratio"].is_null(), "no floors: {record}");
            let key = if record["test"] == "pingpong" {
                "latency_us"
            } else {
                "bandwidth_MBps"
            };
            let figure = record[key].as_f64().unwrap_or(0.0);
            assert!(figure.is_finite() && figure > 0.0, "{key}: {record}");
            (
                record["test"].as_str().unwrap_or("?").to_string(),
                record["size"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = [
        ("pingpong", 8),
        ("pingpong", 65536),
        ("bw", 8),
        ("bw", 65536),
    ]
    .iter()
    .map(|(test, size)| (test.to_string(), *size))
    .collect();
    assert_eq!(points, expected, "{json}");
}

#[test]
fn bench_under_mpirun_measures_between_two_namespaces() {
    let mpirun = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !require(is_root(), "root (network namespaces)")
        || !require(
            quiver::Bootstrap::pmix_version().is_some(),
            "PMIx support in quiver (libpmix-dev and pkg-config at build time)",
        )
        || !require(mpirun, "mpirun (openmpi-bin)")
    {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let testbed = Testbed::up().expect("namespaces up");
    let [a, b] = testbed.namespaces();
    let scratch = Scratch::new("mpirun");
    let json = scratch.file("mpirun.json");
    let mut cmd = scrubbed(Command::new("mpirun"));
    cmd.args(["--allow-run-as-root", "-np", "2", "-x", "QUIVER_NETNS"])
        .env("QUIVER_NETNS", format!("{a},{b}"))
        .arg(env!("CARGO_BIN_EXE_quiver"))
        .args(["bench", "--transport", "tcp", "--json"])
        .arg(&json)
        .args(PLAN);
    let output = finish(vec![start(cmd)]).remove(0);
    assert!(output.status.success(), "{}", text(&output));
    assert_measured(
        &String::from_utf8_lossy(&output.stdout),
        &json,
        "tcp",
        "pmix",
        ["10.77.0.1:", "10.77.0.2:"],
    );
}

/// Two `quiver bench --rendezvous` commands, rank 0 listening at `point`; `place(rank)`
/// wraps each command (e.g. in its namespace). Returns both outputs, rank 0's first.
fn by_hand(
    point: &str,
    transport: &str,
    json: &Path,
    extra: &[&str],
    place: impl Fn(u32) -> Command,
) -> [Output; 2] {
    let key = random_key();
    let children = (0..2)
        .map(|rank| {
            let mut cmd = scrubbed(place(rank));
            cmd.args(["bench", "--rendezvous", point, "--rank", &rank.to_string()])
                .args(["--transport", transport, "--json"])
                .arg(json.with_extension(format!("{rank}.json")))
                .args(extra)
                .args(PLAN)
                .env("QUIVER_JOB_KEY", &key);
            start(cmd)
        })
        .collect();
    let [zero, one]: [Output; 2] = finish(children).try_into().expect("two outputs");
    for (rank, output) in [&zero, &one].into_iter().enumerate() {
        assert!(output.status.success(), "rank {rank}: {}", text(output));
    }
    assert!(
        one.stdout.is_empty(),
        "rank 1 prints nothing: {}",
        text(&one)
    );
    [zero, one]
}

#[test]
fn bench_by_hand_meets_at_the_rendezvous_across_two_namespaces() {
    if !require(is_root(), "root (network namespaces)") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let testbed = Testbed::up().expect("namespaces up");
    let namespaces = testbed.namespaces();
    let scratch = Scratch::new("netns");
    let json = scratch.file("netns");
    let plot = scratch.file("netns.svg");
    let [zero, _] = by_hand(
        "10.77.0.1:47311",
        "udp",
        &json,
        &["--plot", plot.to_str().expect("utf-8 path")],
        |rank| {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &namespaces[rank as usize]])
                .arg(env!("CARGO_BIN_EXE_quiver"));
            cmd
        },
    );
    assert_measured(
        &String::from_utf8_lossy(&zero.stdout),
        &json.with_extension("0.json"),
        "udp",
        "rendezvous",
        ["10.77.0.1:", "10.77.0.2:"],
    );
    let svg = std::fs::read_to_string(&plot).expect("rank 0 drew the plot");
    assert!(svg.contains("<svg"), "{svg}");
    assert!(
        !json.with_extension("1.json").exists(),
        "rank 1 writes no JSON"
    );
}

#[test]
fn bench_by_hand_meets_at_the_rendezvous_on_loopback() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let scratch = Scratch::new("loopback");
    let json = scratch.file("loopback");
    let [zero, _] = by_hand(&format!("127.0.0.1:{port}"), "tcp", &json, &[], |_| {
        quiver()
    });
    let table = String::from_utf8_lossy(&zero.stdout);
    assert_measured(
        &table,
        &json.with_extension("0.json"),
        "tcp",
        "rendezvous",
        ["127.0.0.1:", "127.0.0.1:"],
    );
    assert!(table.contains("both ranks report the same host"), "{table}");
}

#[test]
fn rendezvous_needs_a_rank_and_refuses_what_only_a_local_run_does() {
    let cases: [(&[&str], &str); 4] = [
        (&["--rendezvous", "127.0.0.1:1"], "--rank 0"),
        (&["--rank", "0"], "--rendezvous"),
        (
            &[
                "--rendezvous",
                "127.0.0.1:1",
                "--rank",
                "0",
                "--transport",
                "raw-tcp",
            ],
            "raw-socket baselines",
        ),
        (
            &["--rendezvous", "127.0.0.1:1", "--rank", "0", "floor"],
            "without a launcher",
        ),
    ];
    for (arguments, expected) in cases {
        let mut cmd = scrubbed(quiver());
        let output = cmd
            .arg("bench")
            .args(arguments)
            .env("QUIVER_JOB_KEY", random_key())
            .output()
            .expect("run quiver bench");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{arguments:?}: {}", text(&output));
        assert!(stderr.contains(expected), "{arguments:?}: {stderr}");
    }
}
