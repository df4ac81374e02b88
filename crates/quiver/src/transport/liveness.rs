//! Liveness of peer processes on this node, checked only while a call waits on them.
//!
//! - **Death**: a pidfd becomes readable when the process exits (`sys::pidfd_exited`).
//! - **Freeze**: a process stopped by a signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) shows
//!   state `T` in `/proc/<pid>/stat`. A waiting call looks at that state at most every
//!   quarter of the detection time (`QUIVER_DETECT_MS`), and reports the peer stopped once
//!   it has been seen stopped for half of it, at successive looks. So a stopped peer is
//!   reported within the detection time of the first look, and a brief stop (job control,
//!   a profiler) is forgiven.
//!
//! The rule never fires for a slow peer: a process that computes, sleeps, or waits for
//! I/O is in state `R`, `S` or `D`, never `T`. A process stopped under a debugger is in
//! state `t` (tracing stop) and is not counted either.
//!
//! **Cost accounting** ([`DetectionStats`]): every liveness look an endpoint makes (a pass
//! over its peers' pidfds and `/proc` states, a waiting call's check of the peer it waits
//! on) is counted and timed, so a benchmark can say what detection cost in the same run.
//! Only the looks read the clock for this; the fast path of a call that finds its message
//! at once is untouched.
//!
//! **How often** ([`Looks::due`]): a spinning call looks at its periodic tick (every 1024
//! polls), and the endpoint as a whole at most every [`look_interval`] (10 ms, or an
//! eighth of a shorter detection time), whichever of its calls waits; a call that sleeps
//! looks after each wake-up. Measured on a busy 2-vCPU VM a look took ~1-7 µs (a pidfd
//! `poll` per peer, a `/proc` read every quarter of the detection time per peer), so at
//! one look per millisecond a rank that never stopped waiting spent 0.1-0.5% of its time
//! looking (docs/PERFORMANCE.md); every 10 ms it is a tenth of that.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use quiver_transport::sys;

/// What an endpoint's liveness looks have cost: how many it made and how long they took.
/// A look is one pass over its peers (pidfd polls, `/proc/<pid>/stat` reads) or one check
/// of the peer a waiting call waits on; with detection off only the looks after a sleep
/// remain (death is still noticed then). See [`crate::Endpoint::detection_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DetectionStats {
    /// Liveness looks made.
    pub looks: u64,
    /// Time spent in them, in nanoseconds (including the one clock read that ends each).
    pub look_ns: u64,
    /// Of the looks, those that took longer than [`DetectionStats::SLOW_LOOK_NS`]: far
    /// more than a look's system calls take (~0.5 µs for a pidfd poll, ~5 µs for a
    /// `/proc` read), so the thread was most likely preempted or interrupted meanwhile
    /// (a system call is where a busy machine's scheduler switches).
    pub slow_looks: u64,
    /// Time the slow looks took, in nanoseconds (included in `look_ns`).
    pub slow_look_ns: u64,
}

impl DetectionStats {
    /// A look longer than this (50 µs) counts as slow.
    pub const SLOW_LOOK_NS: u64 = 50_000;

    /// Counts one look that began at `started`.
    pub(crate) fn record(&mut self, started: Instant) {
        self.looks += 1;
        let elapsed_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.look_ns = self.look_ns.saturating_add(elapsed_ns);
        if elapsed_ns > Self::SLOW_LOOK_NS {
            self.slow_looks += 1;
            self.slow_look_ns = self.slow_look_ns.saturating_add(elapsed_ns);
        }
    }

    /// The looks and time since `earlier` (a snapshot of the same endpoint's stats).
    pub fn since(&self, earlier: &DetectionStats) -> DetectionStats {
        DetectionStats {
            looks: self.looks.saturating_sub(earlier.looks),
            look_ns: self.look_ns.saturating_sub(earlier.look_ns),
            slow_looks: self.slow_looks.saturating_sub(earlier.slow_looks),
            slow_look_ns: self.slow_look_ns.saturating_sub(earlier.slow_look_ns),
        }
    }
}

/// Longest time between two looks of a spinning endpoint (with detection on).
const LOOK_INTERVAL_MAX: Duration = Duration::from_millis(10);

/// How often a spinning endpoint may look at its peers: [`LOOK_INTERVAL_MAX`], or an
/// eighth of a shorter detection time `detect` (the freeze rule needs looks every quarter
/// of it; a stop is reported within the detection time of the first look that sees it).
pub(crate) fn look_interval(detect: Duration) -> Duration {
    LOOK_INTERVAL_MAX.min(detect / 8)
}

/// An endpoint's liveness looks: when a spinning call may make the next one, and what
/// they have cost ([`DetectionStats`]).
#[derive(Debug, Default)]
pub(crate) struct Looks {
    stats: DetectionStats,
    /// No look of a spinning call before this.
    next: Option<Instant>,
}

impl Looks {
    /// Whether a spinning call may look now (`now`: the clock as its tick read it): at
    /// most every [`look_interval`] for the whole endpoint. Says yes at most once per
    /// interval (the caller then looks).
    pub(crate) fn due(&mut self, now: Instant, detect: Duration) -> bool {
        if self.next.is_some_and(|next| now < next) {
            return false;
        }
        self.next = Some(now + look_interval(detect));
        true
    }

    /// Counts one look that began at `started`.
    pub(crate) fn record(&mut self, started: Instant) {
        self.stats.record(started);
    }

    /// What the looks have cost so far.
    pub(crate) fn stats(&self) -> DetectionStats {
        self.stats
    }
}

/// Freeze bookkeeping of one watched peer process.
#[derive(Debug, Default)]
pub(crate) struct FreezeWatch {
    /// When the process was first seen stopped (reset when seen running).
    stopped_since: Option<Instant>,
    /// No look at /proc before this.
    next_look: Option<Instant>,
    /// `/proc/<pid>/stat`, kept open after the first look: re-reading an open file costs
    /// about half of opening it each time (~5 against ~10 µs here), and it stays bound to
    /// the process it was opened for (a reused pid cannot answer for it).
    stat: Option<std::fs::File>,
}

impl FreezeWatch {
    /// Looks at process `pid` if a look is due, and returns for how many milliseconds it
    /// has been seen stopped once that reaches half of `detect`.
    pub(crate) fn stopped(
        &mut self,
        pid: libc::pid_t,
        detect: Duration,
        now: Instant,
    ) -> Option<u64> {
        if self.next_look.is_some_and(|t| now < t) {
            return None;
        }
        self.next_look = Some(now + detect / 4);
        if self.stat.is_none() {
            self.stat = std::fs::File::open(format!("/proc/{pid}/stat")).ok();
        }
        if self.stat.as_ref().and_then(read_state) != Some(b'T') {
            self.stopped_since = None;
            return None;
        }
        let since = *self.stopped_since.get_or_insert(now);
        let stopped = now.saturating_duration_since(since);
        (stopped >= detect / 2).then_some(stopped.as_millis() as u64)
    }
}

/// A peer process on this node whose identity the kernel vouches for (a pidfd), for the
/// transports that learn the peer's pid (shm always, tcp when both ends share a node).
#[derive(Debug)]
pub(crate) struct PeerProcess {
    pub(crate) pid: libc::pid_t,
    pidfd: OwnedFd,
    freeze: FreezeWatch,
}

impl PeerProcess {
    /// Watches `pid`; None if it is already gone (or pidfds are not available).
    pub(crate) fn open(pid: libc::pid_t) -> Option<PeerProcess> {
        let pidfd = sys::pidfd_open(pid).ok()?;
        Some(PeerProcess {
            pid,
            pidfd,
            freeze: FreezeWatch::default(),
        })
    }

    /// Whether the process exited.
    pub(crate) fn exited(&self) -> bool {
        sys::pidfd_exited(&self.pidfd)
    }

    /// The pidfd, to sleep on (readable once the process exits).
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.pidfd)
    }

    /// See [`FreezeWatch::stopped`]; never for an exited process (its pid may be reused).
    pub(crate) fn stopped(&mut self, detect: Duration, now: Instant) -> Option<u64> {
        if self.exited() {
            return None;
        }
        self.freeze.stopped(self.pid, detect, now)
    }
}

/// The state letter of process `pid` (`R`, `S`, `D`, `T`, `t`, `Z`, ...), read from
/// `/proc/<pid>/stat`; None if it cannot be read.
#[cfg(test)]
pub(crate) fn process_state(pid: libc::pid_t) -> Option<u8> {
    read_state(&std::fs::File::open(format!("/proc/{pid}/stat")).ok()?)
}

/// The state letter in an open `/proc/<pid>/stat` (read again from its start).
fn read_state(file: &std::fs::File) -> Option<u8> {
    use std::os::unix::fs::FileExt;
    // "pid (comm) S ...": comm is at most 64 bytes, so the state is within the first 128.
    let mut buf = [0u8; 128];
    let n = file.read_at(&mut buf, 0).ok()?;
    let text = &buf[..n];
    let close = text.iter().rposition(|&b| b == b')')?;
    text[close + 1..]
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
}

/// A process identity for the tcp handshake's params: our pid and a node id, so that a
/// peer on the same node (same boot, same pid namespace) can watch our process.
pub(crate) fn identity_params() -> [u8; 12] {
    let mut params = [0u8; 12];
    params[..4].copy_from_slice(&(std::process::id()).to_be_bytes());
    params[4..].copy_from_slice(&node_id().to_be_bytes());
    params
}

/// The pid in a peer's identity params, if the peer shares our node.
pub(crate) fn local_peer_pid(params: &[u8]) -> Option<libc::pid_t> {
    let params: &[u8; 12] = params.try_into().ok()?;
    let mut pid = [0u8; 4];
    pid.copy_from_slice(&params[..4]);
    let mut node = [0u8; 8];
    node.copy_from_slice(&params[4..]);
    let pid = libc::pid_t::try_from(u32::from_be_bytes(pid)).ok()?;
    (u64::from_be_bytes(node) == node_id() && pid > 0).then_some(pid)
}

/// This boot and pid namespace, hashed (FNV-1a): equal ids mean pids mean the same
/// processes. 0 when unknown (never equal to a real id by accident of both being 0: a
/// peer that cannot tell is not watched).
fn node_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    static NODE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NODE.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let pid_ns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
        if boot.trim().is_empty() || pid_ns == 0 {
            return 0;
        }
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in boot.trim().bytes().chain(pid_ns.to_le_bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash | 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_stats_count_and_subtract() {
        let mut stats = DetectionStats::default();
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        stats.record(started);
        assert_eq!(stats.looks, 1);
        assert!(stats.look_ns >= 2_000_000, "{stats:?}");
        // 2 ms is a slow look.
        assert_eq!(stats.slow_looks, 1);
        assert_eq!(stats.slow_look_ns, stats.look_ns);
        let snapshot = stats;
        stats.record(Instant::now());
        let delta = stats.since(&snapshot);
        assert_eq!(delta.looks, 1);
        assert_eq!(delta.look_ns, stats.look_ns - snapshot.look_ns);
        assert_eq!(delta.slow_looks, stats.slow_looks - snapshot.slow_looks);
        assert_eq!(snapshot.since(&stats), DetectionStats::default());
    }

    #[test]
    fn looks_are_due_once_per_interval() {
        let detect = Duration::from_secs(1);
        assert_eq!(look_interval(detect), Duration::from_millis(10));
        assert_eq!(
            look_interval(Duration::from_millis(40)),
            Duration::from_millis(5)
        );
        let mut looks = Looks::default();
        let start = Instant::now();
        assert!(looks.due(start, detect));
        assert!(!looks.due(start, detect));
        assert!(!looks.due(start + Duration::from_millis(9), detect));
        assert!(looks.due(start + Duration::from_millis(10), detect));
        assert!(!looks.due(start + Duration::from_millis(19), detect));
        looks.record(start);
        assert_eq!(looks.stats().looks, 1);
    }

    #[test]
    fn own_process_is_running_and_params_round_trip() {
        let me = std::process::id() as libc::pid_t;
        assert!(matches!(process_state(me), Some(b'R') | Some(b'S')));
        assert_eq!(local_peer_pid(&identity_params()), Some(me));
        assert_eq!(local_peer_pid(&[]), None);
        let mut watch = FreezeWatch::default();
        assert_eq!(
            watch.stopped(me, Duration::from_millis(100), Instant::now()),
            None
        );
    }

    #[test]
    fn a_stopped_child_is_reported_after_half_the_detection_time() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let mut watch = PeerProcess::open(pid).unwrap();
        let detect = Duration::from_millis(200);
        assert_eq!(watch.stopped(detect, Instant::now()), None);
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        let mut seen = None;
        while start.elapsed() < Duration::from_secs(5) && seen.is_none() {
            seen = watch.stopped(detect, Instant::now());
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        let ms = seen.expect("the stopped child was reported");
        assert!(ms >= 100, "{ms}");
        assert!(
            start.elapsed() < Duration::from_millis(400),
            "{:?}",
            start.elapsed()
        );
    }
}
