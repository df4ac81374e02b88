//! Running the jobs of `quiver bench busy`: quiver's ranks (this executable, `quiver bench
//! busy --worker`, started through the launcher's `spawn_rank` under `taskset`), and Open
//! MPI's (`mpi_busy.c`, built once with `mpicc`, under `taskset ... mpirun --oversubscribe
//! --bind-to none`). Both are pinned the same way: every rank may run on every CPU of the
//! plan and on no other, and the launcher tells quiver's ranks how many CPUs that is
//! (`QUIVER_LOCAL_CPUS`), as `quiver run` under `taskset` does.
//!
//! Rank 0's standard output is read for its `RESULT` lines; standard error goes to the
//! terminal. A job that fails or passes its deadline is torn down whole.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::plan::{BusyPlan, Point};
use super::report::Measured;
use crate::launch::{local_addrs, spawn_rank, tear_down, JobIdentity};

/// How long a job's processes get between SIGTERM and SIGKILL when it is stopped.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How often a job's processes are looked at.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// `mpi_busy.c`, built by [`build_mpi_program`].
const MPI_SOURCE: &str = include_str!("mpi_busy.c");

/// Runs quiver's ranks over `transport` through `points` (one job).
///
/// # Errors
/// What failed: starting a rank, a rank's exit status, the deadline, missing results.
pub fn run_quiver(
    plan: &BusyPlan,
    transport: &str,
    points: &[Point],
    timeout: Duration,
) -> Result<Vec<Measured>, String> {
    let mut identity =
        JobIdentity::generate().map_err(|e| format!("making the job's identity: {e}"))?;
    identity.local_cpus = Some(plan.cpus.len());
    identity.transports = Some(transport.to_string());
    if transport != "shm" {
        identity.addrs =
            local_addrs(plan.ranks).map_err(|e| format!("finding free loopback ports: {e}"))?;
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut args: Vec<OsString> = vec!["-c".into(), plan.cpu_list().into(), exe.into()];
    args.extend(worker_args(plan, points).into_iter().map(OsString::from));
    let mut children = Vec::new();
    for rank in 0..plan.ranks {
        let stdout = if rank == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        match spawn_rank(
            "taskset".as_ref(),
            &args,
            &identity,
            rank,
            plan.ranks,
            None,
            stdout,
            Stdio::inherit(),
        ) {
            Ok(child) => children.push(child),
            Err(error) => {
                tear_down(&mut children, STOP_GRACE);
                return Err(format!("starting rank {rank} (taskset): {error}"));
            }
        }
    }
    supervise(
        children,
        &format!("quiver over {transport}"),
        points,
        timeout,
    )
}

/// The arguments of one of quiver's ranks: `bench busy --worker --point ... [--set ...]`.
pub fn worker_args(plan: &BusyPlan, points: &[Point]) -> Vec<String> {
    let mut args = vec![
        "bench".to_string(),
        "busy".to_string(),
        "--worker".to_string(),
    ];
    for point in points {
        args.push("--point".to_string());
        args.push(point.to_string());
    }
    for (name, value) in &plan.settings {
        args.push("--set".to_string());
        args.push(format!("{name}={value}"));
    }
    args
}

/// Runs Open MPI's ranks over `btl` (`vader` or `tcp`) through every point of the plan.
///
/// # Errors
/// What failed: starting `mpirun`, its exit status, the deadline, missing results.
pub fn run_openmpi(
    plan: &BusyPlan,
    program: &PathBuf,
    btl: &str,
    timeout: Duration,
) -> Result<Vec<Measured>, String> {
    let mut command = Command::new("taskset");
    command.args([
        "-c",
        &plan.cpu_list(),
        "mpirun",
        "--oversubscribe",
        "--bind-to",
        "none",
    ]);
    if quiver_transport::sys::getuid() == 0 {
        command.arg("--allow-run-as-root");
    }
    command.args(["-np", &plan.ranks.to_string(), "--mca", "pml", "ob1"]);
    command.args(["--mca", "btl", &format!("self,{btl}")]);
    if btl == "tcp" {
        command.args([
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "--mca",
            "oob_tcp_if_include",
            "lo",
        ]);
    }
    command.arg(program);
    command.args(plan.points.iter().map(Point::to_string));
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let child = command
        .spawn()
        .map_err(|e| format!("starting mpirun (taskset): {e}"))?;
    supervise(
        vec![child],
        &format!("Open MPI over {btl}"),
        &plan.points,
        timeout,
    )
}

/// Builds `mpi_busy.c` with `mpicc` into the temporary directory, once per version of the
/// source (its hash names the binary); returns the binary's path.
///
/// # Errors
/// Writing the source or `mpicc` failed (with its output).
pub fn build_mpi_program() -> Result<PathBuf, String> {
    let hash = MPI_SOURCE.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let dir = std::env::temp_dir();
    let binary = dir.join(format!("quiver-mpi-busy-{hash:016x}"));
    if binary.exists() {
        return Ok(binary);
    }
    let source = dir.join(format!(
        "quiver-mpi-busy-{hash:016x}-{}.c",
        std::process::id()
    ));
    std::fs::write(&source, MPI_SOURCE)
        .map_err(|e| format!("writing {}: {e}", source.display()))?;
    let partial = dir.join(format!(
        "quiver-mpi-busy-{hash:016x}-{}",
        std::process::id()
    ));
    let built = Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&partial)
        .arg(&source)
        .output();
    let _ = std::fs::remove_file(&source);
    let built = built.map_err(|e| format!("running mpicc: {e}"))?;
    if !built.status.success() {
        return Err(format!(
            "mpicc failed ({}): {}",
            built.status,
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    // Renamed into place whole, so that a concurrent run never starts a half-written binary.
    std::fs::rename(&partial, &binary)
        .map_err(|e| format!("installing {}: {e}", binary.display()))?;
    Ok(binary)
}

/// Waits for a job whose first child's stdout carries the results; tears it down when a
/// process fails or the deadline passes. Returns the points in the plan's order.
fn supervise(
    mut children: Vec<Child>,
    what: &str,
    points: &[Point],
    timeout: Duration,
) -> Result<Vec<Measured>, String> {
    let deadline = Instant::now() + timeout;
    let stdout = children[0].stdout.take();
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        if let Some(stdout) = stdout {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let mut problem = None;
    loop {
        let mut running = false;
        for (rank, child) in children.iter_mut().enumerate() {
            match child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    problem
                        .get_or_insert_with(|| format!("{what}: process {rank} failed ({status})"));
                }
                Ok(Some(_)) => {}
                Ok(None) => running = true,
                Err(error) => {
                    problem.get_or_insert_with(|| {
                        format!("{what}: waiting for process {rank}: {error}")
                    });
                }
            }
        }
        if problem.is_none() && running && Instant::now() >= deadline {
            problem = Some(format!(
                "{what}: not finished within {} s (--timeout)",
                timeout.as_secs()
            ));
        }
        if problem.is_some() || !running {
            break;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    if problem.is_some() {
        tear_down(&mut children, STOP_GRACE);
    }
    let _ = reader.join();
    let mut measured = Vec::new();
    let mut other = Vec::new();
    for line in lines.try_iter() {
        match Measured::parse(&line) {
            Some(m) => measured.push(m),
            None => other.push(line),
        }
    }
    if let Some(problem) = problem {
        return Err(problem);
    }
    let expected: Vec<(&str, u64)> = points
        .iter()
        .map(|p| (p.algorithm.as_str(), p.size as u64))
        .collect();
    let got: Vec<(&str, u64)> = measured
        .iter()
        .map(|m| (m.algorithm.as_str(), m.size))
        .collect();
    if got != expected {
        return Err(format!(
            "{what}: reported {} of {} points; its other output:\n{}",
            measured.len(),
            points.len(),
            other.join("\n")
        ));
    }
    Ok(measured)
}
