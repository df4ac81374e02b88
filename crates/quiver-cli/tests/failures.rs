//! Failure handling with real processes: one rank of four is killed (SIGKILL) or frozen
//! (SIGSTOP) during all-to-all traffic over shm, tcp and udp; the survivors' calls must
//! return a typed error naming it within the detection time while their other connections
//! keep exchanging verified data, and `quiver run` must exit non-zero naming the rank. Then
//! every connection-setup error a user can meet is provoked and its message checked: refused,
//! wrong key, version mismatch, unreachable address, out of shared memory, permission denied.
//!
//! The jobs busy-poll: the tests run one at a time. Tests that need root powers (network
//! namespaces, other users, a memory cgroup) say so and skip when they are missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const QUIVER: &str = env!("CARGO_BIN_EXE_quiver");
const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

/// The detection time the jobs run with (the default, set explicitly).
const DETECT_MS: u64 = 1000;
/// Slack on top of it for a busy two-core machine (other builds run alongside).
const SLACK_MS: u64 = 1000;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// One line of output, when it arrived, and whether it came on stderr.
type Line = (Instant, bool, String);

/// A `quiver run` job whose output is collected line by line; dropping it stops the job.
struct Launcher {
    child: Child,
    lines: mpsc::Receiver<Line>,
    seen: Vec<Line>,
}

impl Launcher {
    fn start(run_args: &[&str], program: &[&str], env: &[(&str, &str)]) -> Launcher {
        let mut cmd = Command::new(QUIVER);
        cmd.arg("run")
            .args(run_args)
            .arg("--")
            .arg(TESTPROG)
            .args(program)
            .env("QUIVER_DETECT_MS", DETECT_MS.to_string())
            .env("QUIVER_SPIN_US", "50")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start quiver run");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        for (stream, is_err) in [
            (Box::new(out) as Box<dyn Read + Send>, false),
            (Box::new(err), true),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send((Instant::now(), is_err, line));
                }
            });
        }
        Launcher {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line containing `text` (already seen or arriving within `within`).
    fn expect(&mut self, text: &str, within: Duration) -> Line {
        if let Some(line) = self.seen.iter().find(|(_, _, l)| l.contains(text)) {
            return line.clone();
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    eprintln!("{}", line.2);
                    self.seen.push(line.clone());
                    if line.2.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {text:?} within {within:?}"),
            }
        }
    }

    /// Waits for the launcher to exit; returns its status and everything it printed.
    fn finish(&mut self, within: Duration) -> (ExitStatus, Vec<Line>) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "quiver run still running");
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(300)) {
            eprintln!("{}", line.2);
            self.seen.push(line);
        }
        (status, self.seen.clone())
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(self.child.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) with integers; the pid is a process of our job.
    unsafe { libc::kill(pid as i32, sig) };
}

fn signal_name(sig: i32) -> &'static str {
    if sig == libc::SIGKILL {
        "SIGKILL"
    } else {
        "SIGSTOP"
    }
}

/// Four ranks in lockstep all-to-all over `transport`; rank 2 gets `sig` mid-run.
fn lose_one_of_four(transport: &str, sig: i32, expected_kind: &str) {
    let _serial = serial();
    let seed = format!("{}", std::process::id());
    // Enough rounds that the job still runs when the signal lands: four ranks that yield
    // on two CPUs do about 40,000 rounds a second here.
    const ROUNDS: &str = "200000";
    let mut job = Launcher::start(
        &["-n", "4", "--keep-going"],
        &["survive", ROUNDS, "64K", &seed],
        &[("QUIVER_TRANSPORTS", transport)],
    );
    let ready = job.expect("[2] ready pid", Duration::from_secs(60)).2;
    let pid: u32 = ready
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a pid");
    for rank in [0, 1, 3] {
        job.expect(&format!("[{rank}] running"), Duration::from_secs(60));
    }
    job.expect("[2] running", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(200));
    let signalled = Instant::now();
    signal(pid, sig);
    let bound = Duration::from_millis(DETECT_MS + SLACK_MS);
    for rank in [0, 1, 3] {
        let (at, _, line) = job.expect(&format!("[{rank}] lost 2 "), Duration::from_secs(30));
        let took = at.saturating_duration_since(signalled);
        assert!(
            line.contains(&format!(" lost 2 {expected_kind} ")) && line.contains("peer 2:0"),
            "{transport}: rank {rank} saw {line}"
        );
        assert!(
            took <= bound,
            "{transport}: rank {rank} reported the loss {took:?} after the signal (bound {bound:?})"
        );
    }
    let (status, lines) = job.finish(Duration::from_secs(120));
    let exit = 128 + sig;
    assert_eq!(status.code(), Some(exit), "{transport}: launcher status");
    let named = format!(
        "quiver run: rank 2 {} by signal {sig} ({})",
        if sig == libc::SIGKILL {
            "killed"
        } else {
            "stopped"
        },
        signal_name(sig)
    );
    assert!(
        lines
            .iter()
            .any(|(_, err, l)| *err && l.starts_with(&named)),
        "{transport}: the launcher did not say {named:?}"
    );
    for rank in [0, 1, 3] {
        let done = lines
            .iter()
            .find(|(_, _, l)| l.starts_with(&format!("[{rank}] ok rank {rank} finished {ROUNDS}")))
            .unwrap_or_else(|| panic!("{transport}: rank {rank} did not finish"));
        let after: u64 = done
            .2
            .split(", ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("rounds after the loss");
        assert!(
            after > 0 && done.2.contains("lost [2]"),
            "{transport}: rank {rank} did not go on with the others: {}",
            done.2
        );
    }
}

#[test]
fn sigkill_of_one_rank_of_four_over_shm() {
    lose_one_of_four("shm", libc::SIGKILL, "PeerDead");
}

#[test]
fn sigstop_of_one_rank_of_four_over_shm() {
    lose_one_of_four("shm", libc::SIGSTOP, "PeerStopped");
}

#[test]
fn sigkill_of_one_rank_of_four_over_tcp() {
    lose_one_of_four("tcp", libc::SIGKILL, "Unreachable");
}

#[test]
fn sigstop_of_one_rank_of_four_over_tcp() {
    lose_one_of_four("tcp", libc::SIGSTOP, "PeerStopped");
}

#[test]
fn sigkill_of_one_rank_of_four_over_udp() {
    lose_one_of_four("udp", libc::SIGKILL, "Unreachable");
}

#[test]
fn sigstop_of_one_rank_of_four_over_udp() {
    lose_one_of_four("udp", libc::SIGSTOP, "Unreachable");
}

/// Without --keep-going the launcher stops the job at the first failure.
fn job_is_torn_down(sig: i32) {
    let _serial = serial();
    let mut job = Launcher::start(&["-n", "4"], &["survive", "1000000", "4K", "3"], &[]);
    let ready = job.expect("[1] ready pid", Duration::from_secs(60)).2;
    let pid: u32 = ready
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("pid");
    job.expect("[1] running", Duration::from_secs(60));
    let pids: Vec<u32> = (0..4)
        .map(|rank| {
            let line = job
                .expect(&format!("[{rank}] ready pid"), Duration::from_secs(5))
                .2;
            line.rsplit(' ')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("pid")
        })
        .collect();
    let signalled = Instant::now();
    signal(pid, sig);
    let (status, lines) = job.finish(Duration::from_secs(30));
    assert_eq!(status.code(), Some(128 + sig));
    let named = format!(
        "rank 1 {} by signal {sig} ({})",
        if sig == libc::SIGKILL {
            "killed"
        } else {
            "stopped"
        },
        signal_name(sig)
    );
    assert!(
        lines
            .iter()
            .any(|(_, err, l)| *err && l.contains(&named) && l.contains("stopped the job")),
        "the launcher did not say {named:?}"
    );
    // SIGSTOP counts after --stop-timeout (1 s); then 500 ms of grace at most.
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "{:?}",
        signalled.elapsed()
    );
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "rank process {pid} survived the tear-down"
        );
    }
}

#[test]
fn a_killed_rank_stops_the_job_by_default() {
    job_is_torn_down(libc::SIGKILL);
}

#[test]
fn a_stopped_rank_stops_the_job_by_default() {
    job_is_torn_down(libc::SIGSTOP);
}

// ----- actionable errors ---------------------------------------------------------------

/// A free loopback port for both tcp and udp.
fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn job_id() -> String {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("random");
    format!("{:016x}", u64::from_ne_bytes(b))
}

/// A rank started by hand (no launcher), with the job's environment.
fn rank_command(rank: u32, job: &str, key: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(TESTPROG);
    cmd.env("QUIVER_RANK", rank.to_string())
        .env("QUIVER_SIZE", "2")
        .env("QUIVER_JOB_ID", job)
        .env("QUIVER_JOB_KEY", key)
        .env("QUIVER_CONNECT_TIMEOUT_MS", "3000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `cmd` to its end (bounded) and returns stdout + stderr.
fn output_of(mut cmd: Command) -> String {
    let mut child = cmd.spawn().expect("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    while matches!(child.try_wait(), Ok(None)) {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the rank did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut text = String::new();
    let _ = child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut text);
    let _ = child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut text);
    eprintln!("{text}");
    text
}

/// A rank that waits for connections while the test runs; killed on drop.
struct Server(Child);

impl Server {
    fn start(mut cmd: Command) -> Server {
        let mut child = cmd.arg("recv-until-error").spawn().expect("start");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("piped"))
            .read_line(&mut line)
            .expect("read");
        assert!(line.contains("started"), "server said {line:?}");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const KEY_A: &str = "abababababababababababababababababababababababababababababababab";
const KEY_B: &str = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";

fn assert_error(text: &str, kind: &str, parts: &[&str]) {
    let line = text
        .lines()
        .find(|l| l.starts_with("error ") || l.starts_with("quiver-testprog: "))
        .unwrap_or_else(|| panic!("no error in {text:?}"));
    assert!(line.contains(kind), "expected {kind}: {line}");
    for part in parts {
        assert!(line.contains(part), "{line:?} lacks {part:?}");
    }
}

#[test]
fn connecting_to_a_rank_that_is_not_running_is_refused() {
    let _serial = serial();
    let job = job_id();
    let mut cmd = rank_command(0, &job, KEY_A, &[("QUIVER_CONNECT_TIMEOUT_MS", "300")]);
    cmd.args(["connect-to", "1"]);
    assert_error(
        &output_of(cmd),
        "error Refused",
        &[
            "rank 1 is not listening",
            "gave up after 300 ms",
            "is rank 1 running in this job",
            "QUIVER_CONNECT_TIMEOUT_MS",
        ],
    );
}

#[test]
fn a_rank_with_another_key_is_a_wrong_key_error_over_shm_and_tcp() {
    let _serial = serial();
    for transport in ["shm", "tcp"] {
        let job = job_id();
        let addrs = format!("127.0.0.1:{},127.0.0.1:{}", free_port(), free_port());
        let env = [
            ("QUIVER_TRANSPORTS", transport),
            ("QUIVER_ADDRS", addrs.as_str()),
        ];
        let _server = Server::start(rank_command(1, &job, KEY_A, &env));
        let mut cmd = rank_command(0, &job, KEY_B, &env);
        cmd.args(["connect-to", "1"]);
        assert_error(
            &output_of(cmd),
            "error WrongKey",
            &[
                "wrong job key",
                &format!("over {transport}"),
                "QUIVER_JOB_KEY",
            ],
        );
    }
}

#[test]
fn a_peer_of_another_protocol_version_is_a_version_mismatch() {
    let _serial = serial();
    // A fake rank 1 that answers the Hello with a Challenge prefix of version 99.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let fake = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut hello = [0u8; 8];
        stream
            .read_exact(&mut hello)
            .expect("read the hello prefix");
        assert_eq!(&hello[..4], b"QVHS");
        stream
            .write_all(&[b'Q', b'V', b'H', b'S', 99, 2, 0, 8])
            .expect("answer");
        std::thread::sleep(Duration::from_millis(500));
    });
    let job = job_id();
    let addrs = format!("127.0.0.1:{},{fake}", free_port());
    let mut cmd = rank_command(
        0,
        &job,
        KEY_A,
        &[("QUIVER_TRANSPORTS", "tcp"), ("QUIVER_ADDRS", &addrs)],
    );
    cmd.args(["connect-to", "1"]);
    assert_error(
        &output_of(cmd),
        "error VersionMismatch",
        &[
            "speaks protocol version 99",
            "run the same quiver version on every rank",
        ],
    );
    server.join().expect("fake peer");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn an_address_without_a_route_is_unreachable() {
    if !is_root() || !have("unshare") {
        eprintln!("skipped: needs root and unshare for a private network namespace");
        return;
    }
    let _serial = serial();
    // In a fresh network namespace nothing is up: no route anywhere, no packet leaves.
    let job = job_id();
    let cmd = rank_command(
        0,
        &job,
        KEY_A,
        &[
            ("QUIVER_TRANSPORTS", "tcp"),
            ("QUIVER_ADDRS", "0.0.0.0:7001,127.0.0.2:7002"),
        ],
    );
    let program = cmd.get_program().to_owned();
    let mut wrapped = Command::new("unshare");
    wrapped.arg("-n").arg(program).args(["connect-to", "1"]);
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    wrapped.stdout(Stdio::piped()).stderr(Stdio::piped());
    assert_error(
        &output_of(wrapped),
        "error Unreachable",
        &[
            "unreachable over tcp",
            "127.0.0.2:7002",
            "no route",
            "QUIVER_ADDRS",
        ],
    );
}

/// A memory cgroup (v1) of `limit` bytes whose OOM killer is off, so allocations beyond the
/// limit fail with ENOMEM; removed on drop.
struct MemoryCgroup(std::path::PathBuf);

impl MemoryCgroup {
    fn create(limit: u64) -> Option<MemoryCgroup> {
        let root = std::path::Path::new("/sys/fs/cgroup/memory");
        if !root.join("cgroup.procs").exists() {
            return None;
        }
        let dir = root.join(format!("quiver-failures-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let group = MemoryCgroup(dir);
        std::fs::write(group.0.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
        std::fs::write(group.0.join("memory.oom_control"), "1").ok()?;
        Some(group)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn exhausted_memory_is_out_of_shared_memory_not_a_crash() {
    if !is_root() {
        eprintln!("skipped: needs root for a memory cgroup");
        return;
    }
    let _serial = serial();
    let Some(group) = MemoryCgroup::create(64 << 20) else {
        eprintln!("skipped: no cgroup v1 memory controller to limit a rank with");
        return;
    };
    let job = job_id();
    let env = [
        ("QUIVER_SHM_RING_BYTES", "256M"),
        ("QUIVER_TRANSPORTS", "shm"),
    ];
    // Rank 1 creates the ring (the receiver does), inside the 64 MiB group.
    let server_cmd = rank_command(1, &job, KEY_A, &env);
    let mut wrapped = Command::new("sh");
    wrapped
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
            group.0.display()
        ))
        .arg(server_cmd.get_program());
    for (k, v) in server_cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    wrapped
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let server = Server::start(wrapped);
    let mut cmd = rank_command(0, &job, KEY_A, &env);
    cmd.args(["connect-to", "1"]);
    assert_error(
        &output_of(cmd),
        "error OutOfSharedMemory",
        &[
            "268435456 bytes",
            "not files in /dev/shm",
            "QUIVER_SHM_RING_BYTES",
            "rank 1",
        ],
    );
    drop(server);
    drop(group);
}

/// Ranks of different users are refused on shm (a rank's listener takes only processes of
/// its own user, by SO_PEERCRED), with a fix that names tcp and udp; a port below 1024 is
/// refused to a user without the capability.
#[test]
fn ranks_of_different_users_are_refused_on_shm() {
    if !is_root() || !have("setpriv") {
        eprintln!("skipped: needs root and setpriv to run ranks as other users");
        return;
    }
    let _serial = serial();
    let as_user = |uid: &str, cmd: Command| {
        let mut wrapped = Command::new("setpriv");
        wrapped
            .args(["--reuid", uid, "--regid", uid, "--clear-groups"])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                wrapped.env(k, v);
            }
        }
        wrapped
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        wrapped
    };
    let job = job_id();
    let env = [("QUIVER_TRANSPORTS", "shm")];
    let _server = Server::start(as_user("65534", rank_command(1, &job, KEY_A, &env)));
    let mut cmd = rank_command(0, &job, KEY_A, &env);
    cmd.args(["connect-to", "1"]);
    assert_error(
        &output_of(as_user("65533", cmd)),
        "error PermissionDenied",
        &["cross-memory attach", "same user", "CAP_SYS_PTRACE"],
    );
    // A port below 1024 for a user without CAP_NET_BIND_SERVICE.
    let unprivileged_start: u32 =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1024);
    if unprivileged_start > 80 {
        let addrs = format!("127.0.0.1:80,127.0.0.1:{}", free_port());
        let mut cmd = rank_command(
            0,
            &job_id(),
            KEY_A,
            &[("QUIVER_TRANSPORTS", "tcp"), ("QUIVER_ADDRS", &addrs)],
        );
        cmd.args(["connect-to", "1"]);
        assert_error(
            &output_of(as_user("65534", cmd)),
            "permission denied binding the tcp socket",
            &["127.0.0.1:80", "CAP_NET_BIND_SERVICE", "QUIVER_ADDRS"],
        );
    }
}

// ----- logging --------------------------------------------------------------------------

/// Runs a small two-rank job with `QUIVER_LOG` set to `filter` (None: unset); returns its
/// stderr.
fn logged_job(filter: Option<&str>) -> String {
    let mut cmd = Command::new(QUIVER);
    cmd.args(["run", "-n", "2", "--", TESTPROG, "alltoall", "2", "1K", "1"])
        .env_remove("QUIVER_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(filter) = filter {
        cmd.env("QUIVER_LOG", filter);
    }
    let out = cmd.output().expect("run the job");
    assert!(out.status.success(), "the job failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn logging_is_off_by_default_and_follows_quiver_log_filters() {
    let _serial = serial();
    let quiet = logged_job(None);
    assert!(
        !quiet.contains("quiver::"),
        "logged without QUIVER_LOG: {quiet}"
    );
    let info = logged_job(Some("quiver=info"));
    assert!(
        info.contains("INFO quiver::endpoint: connected") && info.contains("transport=\"shm\""),
        "no connection lines: {info}"
    );
    assert!(info.contains("quiver::context: context ready"), "{info}");
    let net_only = logged_job(Some("quiver::transport=debug"));
    assert!(
        !net_only.contains("quiver::endpoint"),
        "filter ignored: {net_only}"
    );
    let bad = logged_job(Some("quiver=loud"));
    assert!(bad.contains("is not a valid filter"), "{bad}");
}

// ----- timeouts -------------------------------------------------------------------------

#[test]
fn blocking_calls_time_out_and_a_slow_live_peer_is_not_declared_dead() {
    let _serial = serial();
    // Not udp: its protocol needs the peer's process to call quiver (even to accept the
    // connection), so a peer idle this long is unreachable there by design.
    for transport in ["shm", "tcp"] {
        let job = job_id();
        let addrs = format!("127.0.0.1:{},127.0.0.1:{}", free_port(), free_port());
        // The send phase outlasts the detection time: a live peer that does not read for
        // that long is slow, not dead or stopped.
        let env = [
            ("QUIVER_TRANSPORTS", transport),
            ("QUIVER_ADDRS", addrs.as_str()),
            ("QUIVER_DETECT_MS", "300"),
        ];
        let mut idle = rank_command(1, &job, KEY_A, &env);
        idle.arg("idle");
        let mut idle = idle.spawn().expect("start the idle rank");
        let mut cmd = rank_command(0, &job, KEY_A, &env);
        cmd.args(["timeouts", "800"]);
        let text = output_of(cmd);
        let _ = idle.kill();
        let _ = idle.wait();
        for call in ["recv", "send"] {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{call} ")))
                .unwrap_or_else(|| panic!("{transport}: no {call} line in {text}"));
            let ms: u64 = line
                .split(" after ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("milliseconds");
            if transport == "udp" && call == "send" {
                // udp's keepalive needs answers from the peer's process: silent for the
                // detection time, it counts as unreachable (documented).
                assert!(
                    line.contains("Unreachable") || line.contains("Timeout"),
                    "{line}"
                );
                continue;
            }
            assert!(
                line.starts_with(&format!("{call} Timeout")),
                "{transport}: {line}"
            );
            assert!(
                (800..800 + SLACK_MS).contains(&ms),
                "{transport}: {call} timed out after {ms} ms"
            );
            assert!(line.contains("QUIVER_TIMEOUT_MS"), "{line}");
        }
    }
}
