//! quiver under other launchers (docs/launchers.md): `mpirun` through PMIx, a job whose
//! ranks sit in two network namespaces (simulated nodes joined by a veth link), and the
//! rendezvous fallback with plain processes. Every rank runs `quiver-testprog alltoall`,
//! which verifies every byte and then prints which bootstrap it used and how many of the
//! connections it accepted came over shm. Under srun also the C examples, built against
//! the library `scripts/install-c` installs, each checking its own result.
//!
//! Needs: `mpirun` (openmpi-bin) and quiver built with PMIx (libpmix-dev) for the PMIx
//! tests, root for the namespace tests, Slurm, munge, `cc` and `pkg-config` for the srun
//! tests. Missing ones are skipped with a message, except
//! under CI (CI=true), where they fail: CI installs them.

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::netns::{is_root, Testbed};

const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

/// The jobs start several busy ranks on 2 cores: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Each job must finish within this.
const JOB_TIMEOUT: Duration = Duration::from_secs(50);

/// Variables of launchers and of quiver that must not leak from the test's environment
/// into the jobs (the tests set what they need).
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

/// Whether a missing prerequisite must fail the test rather than skip it.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Returns false (after saying why) when `what` is missing and the test should skip.
fn require(available: bool, what: &str) -> bool {
    if available {
        return true;
    }
    assert!(!in_ci(), "{what} is missing, and CI must run this test");
    eprintln!("skipped: {what} is missing");
    false
}

fn have_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn pmix_ready() -> bool {
    require(
        quiver::Bootstrap::pmix_version().is_some(),
        "PMIx support in quiver (libpmix-dev and pkg-config at build time)",
    ) && require(have_mpirun(), "mpirun (openmpi-bin)")
}

fn scrubbed(mut cmd: Command) -> Command {
    for var in SCRUBBED {
        cmd.env_remove(var);
    }
    cmd
}

/// What a finished job printed.
struct Output {
    success: bool,
    status: String,
    lines: Vec<String>,
}

impl Output {
    fn text(&self) -> String {
        format!("status {}\n{}", self.status, self.lines.join("\n"))
    }

    /// The `transports rank R ...` line of each rank, as (rank, fields by name).
    fn transports(&self, size: u32) -> Vec<std::collections::HashMap<String, String>> {
        let mut by_rank = vec![None; size as usize];
        for line in &self.lines {
            let Some(rest) = line.strip_prefix("transports ") else {
                continue;
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            let fields: std::collections::HashMap<String, String> = words
                .chunks(2)
                .filter(|pair| pair.len() == 2)
                .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
                .collect();
            let rank: usize = fields["rank"].parse().expect("rank number");
            by_rank[rank] = Some(fields);
        }
        by_rank
            .into_iter()
            .enumerate()
            .map(|(rank, f)| {
                f.unwrap_or_else(|| panic!("no transports line from rank {rank}:\n{}", self.text()))
            })
            .collect()
    }
}

/// Runs `cmds` (one job: all started together, each in its own process group) to the end,
/// merging their stdout and stderr lines; kills every group at the timeout.
fn run_all(cmds: Vec<Command>) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut children = Vec::new();
    for mut cmd in cmds {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn().expect("start the job");
        for stream in [
            Box::new(child.stdout.take().expect("piped")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        children.push(child);
    }
    drop(tx);
    let deadline = Instant::now() + JOB_TIMEOUT;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                *status = child.try_wait().expect("wait for the job");
            }
        }
        if Instant::now() >= deadline {
            for child in &children {
                // SAFETY: kill has no memory effects; the group is the child's own.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            }
            for child in &mut children {
                let _ = child.wait();
            }
            let lines: Vec<String> = rx.try_iter().collect();
            panic!(
                "the job did not finish within {JOB_TIMEOUT:?}:\n{}",
                lines.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Ranks may have left grandchildren holding the pipes only if they misbehave; the
    // groups go in any case.
    for child in &children {
        // SAFETY: as above; the group may already be gone (ESRCH is fine).
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    }
    let lines: Vec<String> = rx.iter().collect();
    let statuses: Vec<std::process::ExitStatus> = statuses.into_iter().flatten().collect();
    Output {
        success: statuses.iter().all(|s| s.success()),
        status: statuses
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        lines,
    }
}

fn mpirun(np: u32, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = scrubbed(Command::new("mpirun"));
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string());
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(TESTPROG).args(args);
    run_all(vec![cmd])
}

fn random_key() -> String {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).expect("random");
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A loopback port free right now (for rank 0's rendezvous listener).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `size` plain processes with the fallback variables (`PMI_RANK`/`PMI_SIZE`), meeting at
/// `rendezvous`; `key(rank)` gives each its job key.
fn rendezvous_job(
    size: u32,
    rendezvous: &str,
    key: impl Fn(u32) -> String,
    env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let cmds = (0..size)
        .map(|rank| {
            let mut cmd = scrubbed(Command::new(TESTPROG));
            cmd.args(args)
                .env("PMI_RANK", rank.to_string())
                .env("PMI_SIZE", size.to_string())
                .env("QUIVER_RENDEZVOUS", rendezvous)
                .env("QUIVER_JOB_KEY", key(rank))
                .envs(env.iter().copied());
            cmd
        })
        .collect();
    run_all(cmds)
}

fn assert_alltoall_ok(out: &Output, size: u32) {
    assert!(out.success, "job failed:\n{}", out.text());
    for rank in 0..size {
        assert!(
            out.lines
                .iter()
                .any(|l| l.starts_with(&format!("ok rank {rank} received"))),
            "rank {rank} did not verify its data:\n{}",
            out.text()
        );
    }
}

#[test]
fn mpirun_alltoall_through_pmix() {
    if !pmix_ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = mpirun(4, &[], &["alltoall", "20", "1M", "7"]);
    assert_alltoall_ok(&out, 4);
    for (rank, t) in out.transports(4).iter().enumerate() {
        assert_eq!(t["bootstrap"], "pmix", "rank {rank}:\n{}", out.text());
        // One node: everything over shm, no sockets at all.
        assert_eq!(t["addr"], "-", "rank {rank}:\n{}", out.text());
        assert_eq!(t["shm"], "3", "rank {rank}:\n{}", out.text());
        assert_eq!(t["accepted"], "3", "rank {rank}:\n{}", out.text());
    }
}

/// Starts a 4-rank job with these extra environment variables.
type Launch<'a> = &'a dyn Fn(&[(&str, &str)]) -> Output;

/// Ranks 0,1 in namespace a (10.77.0.1), ranks 2,3 in namespace b (10.77.0.2): each rank
/// accepts one shm connection (its namespace neighbour) and two over `transport`.
fn two_namespace_job(transport: &str, launch: Launch<'_>, bootstrap: &str) {
    let testbed = Testbed::up().expect("namespaces up");
    let [a, b] = testbed.namespaces();
    let netns = format!("{a},{b}");
    let transports = format!("shm,{transport}");
    let out = launch(&[
        ("QUIVER_NETNS", &netns),
        ("QUIVER_TRANSPORTS", &transports),
        ("QUIVER_CONNECT_TIMEOUT_MS", "20000"),
    ]);
    assert_alltoall_ok(&out, 4);
    for (rank, t) in out.transports(4).iter().enumerate() {
        let ip = if rank < 2 { "10.77.0.1:" } else { "10.77.0.2:" };
        assert_eq!(t["bootstrap"], bootstrap, "rank {rank}:\n{}", out.text());
        assert!(t["addr"].starts_with(ip), "rank {rank}:\n{}", out.text());
        assert_eq!(t["accepted"], "3", "rank {rank}:\n{}", out.text());
        assert_eq!(t["shm"], "1", "rank {rank}:\n{}", out.text());
        let datagrams: u64 = t["datagrams_received"].parse().expect("a number");
        if transport == "udp" {
            assert!(datagrams > 0, "rank {rank}:\n{}", out.text());
        } else {
            assert_eq!(datagrams, 0, "rank {rank}:\n{}", out.text());
        }
    }
}

#[test]
fn two_namespace_job_through_pmix() {
    if !require(is_root(), "root (network namespaces)") || !pmix_ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Messages up to 1 MiB: every rank posts megabytes to every peer, then a blocking
    // send flushes them before it receives anything; meanwhile it receives what it can
    // (the datagram engine within its window, tcp by reading ahead).
    two_namespace_job(
        "udp",
        &|env| mpirun(4, env, &["alltoall", "20", "1M", "21"]),
        "pmix",
    );
    two_namespace_job(
        "tcp",
        &|env| mpirun(4, env, &["alltoall", "20", "1M", "22"]),
        "pmix",
    );
}

#[test]
fn two_namespace_job_through_the_rendezvous() {
    if !require(is_root(), "root (network namespaces)") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let key = random_key();
    two_namespace_job(
        "udp",
        &|env| {
            // Rank 0 sits in namespace a, at 10.77.0.1.
            let point = format!("10.77.0.1:{}", free_port());
            rendezvous_job(
                4,
                &point,
                |_| key.clone(),
                env,
                &["alltoall", "10", "1M", "23"],
            )
        },
        "rendezvous",
    );
}

#[test]
fn rendezvous_fallback_with_plain_processes() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let key = random_key();
    let point = format!("127.0.0.1:{}", free_port());
    let out = rendezvous_job(
        3,
        &point,
        |_| key.clone(),
        &[],
        &["alltoall", "10", "1M", "9"],
    );
    assert_alltoall_ok(&out, 3);
    for (rank, t) in out.transports(3).iter().enumerate() {
        assert_eq!(t["bootstrap"], "rendezvous", "rank {rank}:\n{}", out.text());
        assert_eq!(t["shm"], "2", "rank {rank}:\n{}", out.text());
    }
    // Over the network (udp first): addresses are exchanged and used.
    let point = format!("127.0.0.1:{}", free_port());
    let out = rendezvous_job(
        3,
        &point,
        |_| key.clone(),
        &[("QUIVER_TRANSPORTS", "udp")],
        &["alltoall", "10", "256K", "10"],
    );
    assert_alltoall_ok(&out, 3);
    for (rank, t) in out.transports(3).iter().enumerate() {
        assert!(
            t["addr"].starts_with("127.0.0.1:"),
            "rank {rank}:\n{}",
            out.text()
        );
        assert_eq!(t["shm"], "0", "rank {rank}:\n{}", out.text());
        assert_eq!(t["accepted"], "2", "rank {rank}:\n{}", out.text());
    }
}

#[test]
fn rendezvous_with_a_wrong_key_fails_on_both_sides() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let point = format!("127.0.0.1:{}", free_port());
    let (good, bad) = (random_key(), random_key());
    let out = rendezvous_job(
        2,
        &point,
        |rank| if rank == 0 { good.clone() } else { bad.clone() },
        &[("QUIVER_CONNECT_TIMEOUT_MS", "3000")],
        &["alltoall", "1", "1K", "1"],
    );
    assert!(!out.success, "{}", out.text());
    let text = out.text();
    assert!(text.contains("wrong job key"), "{text}");
    assert!(text.contains("ranks 1 did not arrive"), "{text}");
}

#[test]
fn without_a_launcher_the_error_names_the_ways_to_start() {
    let out = run_all(vec![{
        let mut cmd = scrubbed(Command::new(TESTPROG));
        cmd.args(["alltoall", "1", "1K", "1"]);
        cmd
    }]);
    assert!(!out.success);
    let text = out.text();
    assert!(
        text.contains("not started by a launcher") && text.contains("mpirun"),
        "{text}"
    );
    // Fallback variables without a rendezvous or a key: each named.
    let out = run_all(vec![{
        let mut cmd = scrubbed(Command::new(TESTPROG));
        cmd.args(["alltoall", "1", "1K", "1"])
            .env("SLURM_PROCID", "0")
            .env("SLURM_NTASKS", "2");
        cmd
    }]);
    assert!(
        out.text().contains("QUIVER_RENDEZVOUS is not set"),
        "{}",
        out.text()
    );
}

#[test]
fn info_reports_pmix_support_and_the_launcher() {
    let out = run_all(vec![{
        let mut cmd = scrubbed(support::netns::quiver());
        cmd.arg("info");
        cmd
    }]);
    assert!(out.success, "{}", out.text());
    let text = out.text();
    let built = quiver::Bootstrap::pmix_version().is_some();
    assert!(
        text.contains(if built {
            "PMIx support: built in"
        } else {
            "PMIx support: not built in"
        }),
        "{text}"
    );
    assert!(text.contains("launcher: none detected"), "{text}");
    if !pmix_ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = run_all(vec![{
        let mut cmd = scrubbed(Command::new("mpirun"));
        cmd.args(["--allow-run-as-root", "-np", "1"])
            .arg(env!("CARGO_BIN_EXE_quiver"))
            .arg("info");
        cmd
    }]);
    assert!(out.success, "{}", out.text());
    assert!(out.text().contains("launcher: PMIx"), "{}", out.text());
}

// ----- Slurm: a one-node cluster (munged + slurmctld + slurmd, no systemd) ----------------

/// A one-node Slurm cluster private to one test: its own munge socket, configuration,
/// state directories and ports under a temporary directory; the three daemons run in the
/// foreground as children of the test and are stopped, and the directory removed, on drop.
struct SlurmCluster {
    dir: std::path::PathBuf,
    conf: std::path::PathBuf,
    daemons: Vec<std::process::Child>,
}

impl SlurmCluster {
    /// The programs the cluster needs (Debian: slurmd slurmctld slurm-client munge
    /// slurm-wlm-basic-plugins), and root.
    fn available() -> bool {
        let tools = ["munged", "slurmctld", "slurmd", "srun", "sinfo", "runuser"];
        tools.iter().all(|tool| {
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    fn start() -> SlurmCluster {
        let dir = std::env::temp_dir().join(format!("quiver-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["state", "spool", "munge"] {
            std::fs::create_dir_all(dir.join(sub)).expect("create the cluster's directories");
        }
        let mut cluster = SlurmCluster {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
        };
        let d = cluster.dir.display().to_string();
        // munged insists on owning its directory and on a socket directory others can enter.
        let status = Command::new("chown")
            .args(["munge:munge", &format!("{d}/munge")])
            .status()
            .expect("chown");
        assert!(status.success(), "chown munge {d}/munge");
        std::fs::set_permissions(
            cluster.dir.join("munge"),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .expect("chmod");
        let output = Command::new("hostname").output().expect("hostname");
        let host = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let conf = format!(
            "ClusterName=quivertest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={d}/munge/socket\n\
             CredType=cred/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=quiver Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=YES\n",
            ctld_port = free_port(),
            slurmd_port = free_port(),
        );
        std::fs::write(&cluster.conf, conf).expect("write slurm.conf");
        let conf = cluster.conf.display().to_string();
        let mut munged = Command::new("runuser");
        munged
            .args(["-u", "munge", "--", "munged", "--foreground"])
            .args([
                format!("--socket={d}/munge/socket"),
                format!("--pid-file={d}/munge/pid"),
                format!("--seed-file={d}/munge/seed"),
                format!("--log-file={d}/munge/log"),
            ]);
        let mut slurmctld = Command::new("slurmctld");
        slurmctld.args(["-D", "-i", "-f", &conf]);
        let mut slurmd = Command::new("slurmd");
        slurmd.args(["-D", "-f", &conf]);
        for (name, mut cmd) in [
            ("munged", munged),
            ("slurmctld", slurmctld),
            ("slurmd", slurmd),
        ] {
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .stdin(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {name}: {e}"));
            cluster.daemons.push(child);
            if name == "munged" {
                cluster.wait_for("munged's socket", || {
                    cluster.dir.join("munge/socket").exists()
                });
            }
        }
        cluster.wait_for("the node to be idle", || {
            cluster
                .command("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        cluster
    }

    /// A Slurm client command talking to this cluster.
    fn command(&self, program: &str) -> Command {
        let mut cmd = scrubbed(Command::new(program));
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    fn wait_for(&self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "slurm cluster: timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        ["munge/log", "slurmctld.log", "slurmd.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "--- {f}\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // slurmd and slurmctld first (they use munge), then munged.
        for child in self.daemons.iter_mut().rev() {
            // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn srun_alltoall_through_pmix() {
    if !require(is_root(), "root (the Slurm daemons)")
        || !require(
            SlurmCluster::available(),
            "Slurm and munge (slurmd slurmctld slurm-client munge slurm-wlm-basic-plugins)",
        )
        || !require(
            quiver::Bootstrap::pmix_version().is_some(),
            "PMIx support in quiver (libpmix-dev and pkg-config at build time)",
        )
    {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cluster = SlurmCluster::start();
    let mut srun = cluster.command("srun");
    srun.args(["--mpi=pmix", "-n", "4", "--overcommit", "--time=1"])
        .arg(TESTPROG)
        .args(["alltoall", "20", "1M", "31"]);
    let out = run_all(vec![srun]);
    assert!(out.success, "{}\n{}", out.text(), cluster.logs());
    assert_alltoall_ok(&out, 4);
    for (rank, t) in out.transports(4).iter().enumerate() {
        assert_eq!(t["bootstrap"], "pmix", "rank {rank}:\n{}", out.text());
        assert_eq!(t["shm"], "3", "rank {rank}:\n{}", out.text());
    }
    // Without --mpi=pmix, srun gives only SLURM_PROCID/SLURM_NTASKS: the rendezvous fallback.
    let mut srun = cluster.command("srun");
    srun.args(["-n", "3", "--overcommit", "--time=1"])
        .env("QUIVER_RENDEZVOUS", format!("127.0.0.1:{}", free_port()))
        .env("QUIVER_JOB_KEY", random_key())
        .arg(TESTPROG)
        .args(["alltoall", "10", "256K", "32"]);
    let out = run_all(vec![srun]);
    assert_alltoall_ok(&out, 3);
    for (rank, t) in out.transports(3).iter().enumerate() {
        assert_eq!(t["bootstrap"], "rendezvous", "rank {rank}:\n{}", out.text());
    }
}

// ----- A C program under srun: built against the installed library, as a user builds it ---

/// Whether `program` is on the PATH.
fn on_path(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs the C library into `dir/prefix` with `scripts/install-c` (which builds it:
/// `cargo build --release -p quiver-hpc-ffi`), then builds each of `examples/c/NAME.c`
/// exactly as the README says, `cc NAME.c $(pkg-config --cflags --libs quiver)`; returns
/// the programs' paths.
fn build_c_examples(dir: &std::path::Path, names: &[&str]) -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let prefix = dir.join("prefix");
    let out = Command::new(root.join("scripts/install-c"))
        .arg(&prefix)
        .output()
        .expect("run scripts/install-c");
    assert!(
        out.status.success(),
        "scripts/install-c {}: {}\n{}",
        prefix.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    names
        .iter()
        .map(|name| {
            let program = dir.join(name);
            let out = Command::new("sh")
                .args([
                    "-c",
                    "cc -O2 \"$1\" $(pkg-config --cflags --libs quiver) -o \"$2\"",
                    "sh",
                ])
                .arg(root.join(format!("examples/c/{name}.c")))
                .arg(&program)
                .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
                .output()
                .expect("run cc");
            assert!(
                out.status.success(),
                "cc examples/c/{name}.c $(pkg-config --cflags --libs quiver):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            program
        })
        .collect()
}

#[test]
fn srun_runs_a_c_program_built_with_pkg_config() {
    if !require(is_root(), "root (the Slurm daemons)")
        || !require(
            SlurmCluster::available(),
            "Slurm and munge (slurmd slurmctld slurm-client munge slurm-wlm-basic-plugins)",
        )
        || !require(
            quiver::Bootstrap::pmix_version().is_some(),
            "PMIx support in quiver (libpmix-dev and pkg-config at build time)",
        )
        || !require(
            on_path("cc") && on_path("pkg-config"),
            "a C compiler (cc) and pkg-config",
        )
    {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("quiver-srun-c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the build directory");
    let programs = build_c_examples(&dir, &["request_reply", "pingpong"]);
    let (request_reply, pingpong) = (&programs[0], &programs[1]);
    let cluster = SlurmCluster::start();
    // Through PMIx: a server and two clients, tagged requests and replies.
    let mut srun = cluster.command("srun");
    srun.args(["--mpi=pmix", "-n", "3", "--overcommit", "--time=1"])
        .arg(request_reply)
        .arg("300");
    let out = run_all(vec![srun]);
    assert!(out.success, "{}\n{}", out.text(), cluster.logs());
    assert!(
        out.lines
            .iter()
            .any(|l| l == "server: answered 600 requests"),
        "{}",
        out.text()
    );
    // Without --mpi=pmix: the rendezvous fallback from SLURM_PROCID/SLURM_NTASKS.
    let mut srun = cluster.command("srun");
    srun.args(["-n", "2", "--overcommit", "--time=1"])
        .env("QUIVER_RENDEZVOUS", format!("127.0.0.1:{}", free_port()))
        .env("QUIVER_JOB_KEY", random_key())
        .arg(pingpong)
        .args(["65536", "200"]);
    let out = run_all(vec![srun]);
    assert!(out.success, "{}\n{}", out.text(), cluster.logs());
    assert!(
        out.lines
            .iter()
            .any(|l| l.starts_with("pingpong: 65536 B, 200 round trips")),
        "{}",
        out.text()
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
