//! The parent side of `quiver bench`: starts the two ranks, streams their results into the
//! report, and makes sure neither outlives the run.
//!
//! The ranks are this same executable run with the job's worker arguments (`quiver bench
//! --worker ...`, or the lab's `quiver-bench bench --worker ...`), started through the
//! launcher ([`crate::launch::spawn_rank`]) with a fresh job identity, each pinned to its
//! own CPU. Rank 0 writes one JSON record per line to its stdout (piped here); both
//! ranks' stderr is collected and shown when a rank fails. A rank that fails gets the
//! other one killed after `FAILURE_GRACE`; a run past its deadline gets both killed.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::launch::{spawn_rank, JobIdentity};

use super::floor::Floors;
use super::plan::RankJob;
use super::report::Report;
use super::result::RankResult;

/// Ranks in a bench job.
const RANK_COUNT: u32 = 2;
/// How long the other rank may go on after one failed, to report its own error.
const FAILURE_GRACE: Duration = Duration::from_secs(2);
/// How often the parent looks at the ranks while waiting for results.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Most stderr bytes kept per rank (the rest is dropped, so a chatty rank cannot fill memory).
const MAX_STDERR_BYTES: usize = 64 << 10;

/// Runs one launch of the ranks: rank 0 on `cpus[0]`, rank 1 on `cpus[1]`. Every result is
/// given its CPUs and floor ratio and passed to `report` as it arrives.
///
/// # Errors
/// A message naming what failed: starting a rank, a rank's exit status with its stderr,
/// missing results, the deadline, or writing the report.
pub fn run<R: RankResult>(
    job: &RankJob,
    cpus: [usize; 2],
    floors: &Floors,
    report: &mut Report<R>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut ranks = start(job, cpus)?;
    let lines = ranks[0].stdout_lines();

    let mut records_seen = 0usize;
    let mut problems: Vec<String> = Vec::new();
    let mut kill_at: Option<Instant> = None;
    loop {
        match lines.recv_timeout(POLL_INTERVAL) {
            Ok(line) => match serde_json::from_str::<R>(&line) {
                Ok(mut record) => {
                    records_seen += 1;
                    record.complete(cpus, floors);
                    if let Err(error) = report.result(record) {
                        problems.push(format!("writing results: {error}"));
                        kill_at = Some(Instant::now());
                    }
                }
                Err(_) => eprintln!("rank 0: {line}"),
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        if kill_at.is_none() && ranks.iter_mut().any(RankProcess::failed) {
            kill_at = Some(now + FAILURE_GRACE);
        }
        if now >= deadline && kill_at.is_none() {
            problems.push(format!(
                "the ranks did not finish within {} s (--timeout); stopped them",
                timeout.as_secs()
            ));
            kill_at = Some(now);
        }
        if kill_at.is_some_and(|kill_at| now >= kill_at) {
            ranks.iter_mut().for_each(RankProcess::kill);
        }
    }
    // Rank 0 closed its stdout (it exited); rank 1 finishes right after its last answer.
    let wait_deadline = kill_at.unwrap_or(deadline).max(Instant::now()) + FAILURE_GRACE;
    for rank in ranks.iter_mut() {
        rank.wait_until(wait_deadline);
    }
    let mut any_rank_failed = false;
    for rank in ranks {
        let (rank_number, status, stderr) = rank.finish();
        let success = status.as_ref().is_some_and(ExitStatus::success);
        any_rank_failed |= !success;
        if !success {
            let status = status.map_or("no exit status".to_string(), |status| status.to_string());
            problems.push(format!(
                "rank {rank_number} failed ({status}); its stderr:\n{}",
                indent(&stderr)
            ));
        } else if !stderr.trim().is_empty() {
            eprintln!("rank {rank_number} (stderr):\n{}", indent(&stderr));
        }
    }
    let expected = job.records;
    if !any_rank_failed && records_seen != expected {
        problems.push(format!(
            "rank 0 reported {records_seen} results, expected {expected}"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// One started rank and what the parent keeps of it.
struct RankProcess {
    rank: u32,
    child: Child,
    stderr_reader: Option<JoinHandle<String>>,
    status: Option<ExitStatus>,
}

fn start(job: &RankJob, cpus: [usize; 2]) -> Result<Vec<RankProcess>, String> {
    let exe = std::env::current_exe()
        .map_err(|error| format!("cannot find this executable to start the ranks: {error}"))?;
    let worker_args: Vec<OsString> = job.worker_args.iter().map(OsString::from).collect();
    let mut identity =
        JobIdentity::generate().map_err(|error| format!("cannot make a job identity: {error}"))?;
    if job.transport.is_network() {
        identity.addrs = match &job.addrs {
            Some(addrs) => addrs.clone(),
            None => crate::launch::local_addrs(RANK_COUNT)
                .map_err(|error| format!("cannot find free ports for the ranks: {error}"))?,
        };
        identity.transports = Some(job.transport.as_str().to_string());
    }
    let mut ranks: Vec<RankProcess> = Vec::with_capacity(RANK_COUNT as usize);
    for (rank, &cpu) in (0..RANK_COUNT).zip(cpus.iter()) {
        // Only rank 0 reports results; rank 1's stdout has nothing to say.
        let stdout = if rank == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        // In a network namespace: `ip netns exec NS` execs the worker there (the pinning
        // and the parent-death signal set before exec carry over).
        let (program, args) = match &job.netns {
            Some(names) => {
                let mut args: Vec<OsString> = ["netns", "exec", &names[rank as usize]]
                    .into_iter()
                    .map(OsString::from)
                    .collect();
                args.push(exe.clone().into_os_string());
                args.extend(worker_args.iter().cloned());
                (OsString::from("ip"), args)
            }
            None => (exe.clone().into_os_string(), worker_args.clone()),
        };
        let spawned = spawn_rank(
            program.as_os_str(),
            &args,
            &identity,
            rank,
            RANK_COUNT,
            Some(cpu),
            stdout,
            Stdio::piped(),
        );
        match spawned {
            Ok(mut child) => {
                let stderr_reader = child.stderr.take().map(|stderr| {
                    std::thread::spawn(move || read_bounded(stderr, MAX_STDERR_BYTES))
                });
                ranks.push(RankProcess {
                    rank,
                    child,
                    stderr_reader,
                    status: None,
                });
            }
            Err(error) => {
                for started in ranks.iter_mut() {
                    started.kill();
                    started.wait_until(Instant::now() + FAILURE_GRACE);
                }
                return Err(format!(
                    "cannot start rank {rank} on CPU {cpu} ({}): {error}",
                    program.to_string_lossy()
                ));
            }
        }
    }
    Ok(ranks)
}

impl RankProcess {
    /// Lines of this rank's stdout, read by a thread until the rank closes it.
    fn stdout_lines(&mut self) -> mpsc::Receiver<String> {
        let (sender, receiver) = mpsc::channel();
        if let Some(stdout) = self.child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        receiver
    }

    /// Whether the rank has exited unsuccessfully (looks without waiting).
    fn failed(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_some_and(|status| !status.success())
    }

    /// Kills the rank if it is still running (SIGKILL to this child's pid).
    fn kill(&mut self) {
        if self.status.is_none() && self.child.try_wait().ok().flatten().is_none() {
            // An error here means the child is already gone, which is what we want.
            let _ = self.child.kill();
        }
    }

    /// Waits for the rank to exit; kills it at `deadline` and reaps it.
    fn wait_until(&mut self, deadline: Instant) {
        while self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => self.status = Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    self.status = self.child.wait().ok();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return,
            }
        }
    }

    /// The rank number, its exit status and its stderr (after it has exited).
    fn finish(mut self) -> (u32, Option<ExitStatus>, String) {
        let stderr = self
            .stderr_reader
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        (self.rank, self.status, stderr)
    }
}

/// Reads `source` to its end, keeping at most `limit` bytes (lossy UTF-8).
fn read_bounded(mut source: impl Read, limit: usize) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match source.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(count) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..count.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn indent(text: &str) -> String {
    let trimmed = text.trim_end();
    if trimmed.is_empty() {
        return "    (empty)".to_string();
    }
    trimmed
        .lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<String>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_at_most_the_limit() {
        let text = "a".repeat(10_000);
        assert_eq!(read_bounded(text.as_bytes(), 100).len(), 100);
        assert_eq!(read_bounded("short".as_bytes(), 100), "short");
    }

    #[test]
    fn indents_every_line() {
        assert_eq!(indent("one\ntwo\n"), "    one\n    two");
        assert_eq!(indent(""), "    (empty)");
    }
}
