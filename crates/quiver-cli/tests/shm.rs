//! Multi-process tests of the shared-memory transport: real processes, real shared memory,
//! real cross-memory attach. Ranks are started directly with the launcher's environment
//! contract (the launcher itself is tested in tests/run.rs), so a test can kill or freeze
//! one rank and watch the others.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TESTPROG: &str = env!("CARGO_BIN_EXE_quiver-testprog");

/// The scenarios start many busy-polling processes: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Job {
    _serial: std::sync::MutexGuard<'static, ()>,
    children: Vec<Child>,
    lines: mpsc::Receiver<(u32, String)>,
    /// Lines read while looking for another one: ranks print concurrently, so a later
    /// `expect_line` may want a line that arrived earlier.
    seen: std::cell::RefCell<Vec<(u32, String)>>,
}

impl Job {
    /// Starts `size` ranks; `args(rank)` gives each its arguments, `key(rank)` its job key.
    fn start(
        size: u32,
        args: impl Fn(u32) -> Vec<String>,
        key: impl Fn(u32) -> String,
        env: &[(&str, &str)],
    ) -> Job {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let job_id = format!("{:016x}", (std::process::id() as u64) << 24 ^ rand_u64());
        let (tx, lines) = mpsc::channel();
        let mut children = Vec::new();
        for rank in 0..size {
            let mut cmd = Command::new(TESTPROG);
            cmd.args(args(rank))
                .env("QUIVER_RANK", rank.to_string())
                .env("QUIVER_SIZE", size.to_string())
                .env("QUIVER_JOB_ID", &job_id)
                .env("QUIVER_JOB_KEY", key(rank))
                .env("QUIVER_CONNECT_TIMEOUT_MS", "20000")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                cmd.env(k, v);
            }
            let mut child = cmd.spawn().expect("start quiver-testprog");
            for stream in [
                Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
                Box::new(child.stderr.take().unwrap()),
            ] {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stream).lines().map_while(Result::ok) {
                        let _ = tx.send((rank, line));
                    }
                });
            }
            children.push(child);
        }
        Job {
            _serial: serial,
            children,
            lines,
            seen: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Waits for a line from `rank` containing `text`; returns it.
    fn expect_line(&self, rank: u32, text: &str, within: Duration) -> String {
        let mut seen = self.seen.borrow_mut();
        if let Some(at) = seen
            .iter()
            .position(|(r, line)| *r == rank && line.contains(text))
        {
            return seen.remove(at).1;
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((r, line)) => {
                    eprintln!("[{r}] {line}");
                    if r == rank && line.contains(text) {
                        return line;
                    }
                    seen.push((r, line));
                }
                Err(_) => panic!("rank {rank} did not print {text:?} within {within:?}"),
            }
        }
    }

    /// Waits for every rank to exit successfully within `within`, printing their output.
    fn wait_all_ok(mut self, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        for (rank, child) in self.children.iter_mut().enumerate() {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    while let Ok((r, l)) = self.lines.recv_timeout(Duration::from_millis(50)) {
                        eprintln!("[{r}] {l}");
                        out.push(l);
                    }
                    assert!(status.success(), "rank {rank} failed: {status}");
                    break;
                }
                while let Ok((r, l)) = self.lines.try_recv() {
                    eprintln!("[{r}] {l}");
                    out.push(l);
                }
                assert!(
                    Instant::now() < deadline,
                    "rank {rank} still running after {within:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        out
    }

    fn signal(&self, rank: u32, sig: i32) {
        // SAFETY: plain kill(2) on a child we started and have not reaped.
        unsafe { libc::kill(self.children[rank as usize].id() as i32, sig) };
    }

    fn wait_rank(&mut self, rank: u32, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.children[rank as usize].try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "rank {rank} did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).unwrap();
    u64::from_ne_bytes(b)
}

fn same_key(_: u32) -> String {
    "ab".repeat(32)
}

fn args(list: &[&str]) -> impl Fn(u32) -> Vec<String> {
    let v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    move |_| v.clone()
}

#[test]
fn all_to_all_2_to_8_ranks_random_sizes_up_to_8_mib() {
    for (size, messages) in [(2, 12), (3, 6), (5, 3), (8, 2)] {
        let seed = rand_u64().to_string();
        let job = Job::start(
            size,
            args(&["alltoall", &messages.to_string(), "8M", &seed]),
            same_key,
            &[],
        );
        let out = job.wait_all_ok(Duration::from_secs(120));
        assert_eq!(
            out.iter().filter(|l| l.starts_with("ok rank")).count(),
            size as usize,
            "seed {seed}"
        );
    }
}

#[test]
fn sixty_four_ranks_connect_all_to_all_with_bounded_memory() {
    // 64 processes on a small machine: short spins, so waiting ranks yield the CPU.
    let job = Job::start(
        64,
        args(&["alltoall", "2", "4K", "7"]),
        same_key,
        &[
            ("QUIVER_SPIN_US", "20"),
            ("QUIVER_SHM_RING_BYTES", "64K"),
            ("QUIVER_SHM_EAGER_MAX", "16K"),
        ],
    );
    let out = job.wait_all_ok(Duration::from_secs(300));
    let rss: Vec<u64> = out
        .iter()
        .filter_map(|l| {
            l.split("rss_kib ")
                .nth(1)
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    assert_eq!(rss.len(), 64);
    let max = *rss.iter().max().unwrap();
    // 63 inbound rings of 64 KiB plus code and pools: far below 64 MiB per rank.
    assert!(max < 64 * 1024, "a rank used {max} KiB");
}

#[test]
fn slow_receiver_holds_the_sender_back_and_loses_nothing() {
    let job = Job::start(
        2,
        args(&["slow-recv", "3000"]),
        same_key,
        &[("QUIVER_SHM_RING_BYTES", "16K")],
    );
    let out = job.wait_all_ok(Duration::from_secs(120));
    assert!(out
        .iter()
        .any(|l| l.starts_with("ok received all 3000 in order")));
    let held = out
        .iter()
        .find(|l| l.starts_with("ok sender held back"))
        .unwrap();
    let times: u64 = held.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!(times > 0, "the sender was never held back: {held}");
}

/// Starts a sender (rank 0) streaming to a receiver (rank 1), SIGKILLs `victim` mid-stream,
/// and checks the other rank's blocking call returns a "peer died" error promptly.
fn kill_mid_transfer(victim: u32) {
    let survivor = 1 - victim;
    let mut job = Job::start(
        2,
        |r| {
            vec![if r == 0 {
                "send-until-error"
            } else {
                "recv-until-error"
            }
            .to_string()]
        },
        same_key,
        &[],
    );
    job.expect_line(0, "started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    job.signal(victim, libc::SIGKILL);
    let line = job.expect_line(survivor, "error:", Duration::from_secs(10));
    assert!(line.contains(&format!("peer {victim}:0 died")), "{line}");
    assert!(job.wait_rank(survivor, Duration::from_secs(5)).success());
}

#[test]
fn sigkill_of_the_receiver_fails_the_sender_without_hanging() {
    kill_mid_transfer(1);
}

#[test]
fn sigkill_of_the_sender_fails_the_receiver_without_hanging() {
    kill_mid_transfer(0);
}

fn scribble(how: &str) {
    let job = Job::start(
        3,
        move |r| match r {
            0 => vec!["victim".into()],
            1 => vec!["scribble".into(), how.into()],
            _ => vec!["serve".into()],
        },
        same_key,
        &[],
    );
    job.expect_line(1, "scribbled", Duration::from_secs(20));
    let line = job.expect_line(0, "error:", Duration::from_secs(10));
    assert!(line.contains("1:0") && line.contains("corrupted"), "{line}");
    job.expect_line(
        0,
        "ok other connection still works",
        Duration::from_secs(10),
    );
}

#[test]
fn garbage_in_a_shared_ring_is_an_error_not_a_crash() {
    scribble("garbage");
}

#[test]
fn a_forged_record_is_an_error_not_a_crash() {
    scribble("forge");
}

/// A ring written by hand with a rendezvous request for three quarters of the machine's
/// memory: the receiver, in a pooled receive that sizes its buffer by the message, gets
/// `MessageTooLarge` on that connection (no OOM kill), and its other connections work.
#[test]
fn a_rendezvous_for_most_of_the_memory_is_message_too_large_not_an_oom() {
    let job = Job::start(
        3,
        |r| match r {
            0 => vec!["victim".into(), "pooled".into()],
            1 => vec!["scribble".into(), "huge".into()],
            _ => vec!["serve".into()],
        },
        same_key,
        &[],
    );
    let announced = job.expect_line(1, "announced", Duration::from_secs(20));
    job.expect_line(1, "scribbled", Duration::from_secs(20));
    let line = job.expect_line(0, "error:", Duration::from_secs(10));
    let len = announced.split_whitespace().nth(1).expect("a length");
    assert!(
        line.contains("1:0") && line.contains(&format!("message of {len} bytes")),
        "{line}"
    );
    job.expect_line(
        0,
        "ok other connection still works",
        Duration::from_secs(10),
    );
}

/// The ring and the doorbell are sealed: a peer cannot shrink them under their reader (it
/// would die of SIGBUS); its scribbling is still `Corrupt` on its connection only.
#[test]
fn a_truncated_ring_or_doorbell_is_refused_and_scribbling_stays_corrupt() {
    let job = Job::start(
        3,
        |r| match r {
            0 => vec!["victim".into()],
            1 => vec!["scribble".into(), "truncate".into()],
            _ => vec!["serve".into()],
        },
        same_key,
        &[],
    );
    for what in ["ring", "doorbell"] {
        let line = job.expect_line(1, &format!("{what} truncate"), Duration::from_secs(20));
        assert!(
            line.contains("refused") && line.contains("not permitted"),
            "{line}"
        );
    }
    job.expect_line(1, "scribbled", Duration::from_secs(20));
    let line = job.expect_line(0, "error:", Duration::from_secs(10));
    assert!(line.contains("1:0") && line.contains("corrupted"), "{line}");
    job.expect_line(
        0,
        "ok other connection still works",
        Duration::from_secs(10),
    );
}

#[test]
fn a_rank_with_the_wrong_key_is_refused() {
    let mut job = Job::start(
        2,
        |r| vec![if r == 0 { "recv-until-error" } else { "serve" }.to_string()],
        |r| {
            if r == 0 {
                "ab".repeat(32)
            } else {
                "cd".repeat(32)
            }
        },
        &[("QUIVER_CONNECT_TIMEOUT_MS", "2000")],
    );
    let status = job.wait_rank(1, Duration::from_secs(20));
    assert!(!status.success());
    job.expect_line(1, "wrong job key", Duration::from_secs(5));
}

#[test]
fn quiver_run_drives_an_all_to_all_job_end_to_end() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args([
            "run", "-n", "4", "--bind", "none", "--", TESTPROG, "alltoall", "3", "1M", "11",
        ])
        .output()
        .expect("start quiver run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "quiver run failed: {}", out.status);
    for rank in 0..4 {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("[{rank}] ok rank {rank} received"))),
            "no result line from rank {rank}"
        );
    }
}
