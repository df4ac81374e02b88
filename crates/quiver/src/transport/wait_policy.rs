//! How a blocking call waits: the one waiting policy of a process, resolved once per context
//! from the settings (`QUIVER_SPIN_US`, `QUIVER_YIELD`, `QUIVER_YIELD_SPIN_US`) and what
//! this process knows about its node's load ([`NodeLoad`]: the ranks of its job here and
//! the CPUs they may use), and shown by `quiver info`
//! (docs/decisions/0058-waiting-on-a-busy-node.md).
//!
//! Every blocking wait (a receive with nothing to take, a shm send waiting for ring space or
//! for its rendezvous to be pulled, a shm receive waiting for the rest of a message, tcp and
//! udp sends waiting for the socket or the window, a receive waiting on the datagram
//! engine) is a spin followed by a sleep on the doorbell, futex or socket, through
//! [`Wait`](crate::transport::wait::Wait), which reads the policy once per call. The policy
//! decides the spin's length and how the spin gives its CPU away ([`Yielding`]):
//!
//! - the rank owns its core (ranks on this node no more than their CPUs, or unknown):
//!   busy-poll for `QUIVER_SPIN_US` (2 ms) as always: the cross-core wake-up of a sleeping
//!   process costs tens of microseconds here, a spinning receiver sees a message in ~100 ns.
//!   Only a spin that has seen no progress for a periodic tick (1024 polls) yields once per
//!   tick, and if that yield gave the CPU to someone else (it took long), the CPU is
//!   shared after all: the rest of that wait yields at every poll and spins no longer
//!   than `QUIVER_YIELD_SPIN_US`;
//! - the ranks outnumber their CPUs (`QUIVER_YIELD=auto`, the default), or `always`: every
//!   poll of the spin is a `sched_yield`, so a peer descheduled on this CPU runs at once
//!   (it is most likely the rank this one waits for), and the spin lasts
//!   `QUIVER_YIELD_SPIN_US` (200 µs) before the call sleeps; its periodic tick (clock,
//!   deadline, liveness) comes every 16 polls instead of 1024, since a yield may hand the
//!   CPU away for a while;
//! - `never`: pure busy-polling for `QUIVER_SPIN_US`, as before this policy.
//!
//! Cost on the spin path: the mode is a field of the call's `Wait`, read when the call
//! starts waiting; a poll pays one branch on it. No clock read and no system call is added
//! per poll; the periodic tick (every 1024 polls of a rank that owns its core) adds one
//! `sched_yield` and one clock read.
//!
//! Layer: below the endpoint, beside `wait.rs`; reads the machine (`sched_getaffinity`, the
//! cgroup's `cpu.max`) but no launcher variable (the job module reads those).

use std::time::Duration;

use quiver_transport::sys;

/// The yield setting (`QUIVER_YIELD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum YieldMode {
    /// Yield at every poll when this node's ranks outnumber their CPUs, else only a spin
    /// that sees no progress yields (module docs).
    #[default]
    Auto,
    /// Yield at every poll of the spin, and spin for the shorter `QUIVER_YIELD_SPIN_US`.
    Always,
    /// Never yield: busy-poll for `QUIVER_SPIN_US`, then sleep.
    Never,
}

impl YieldMode {
    /// The setting's name in `QUIVER_YIELD`.
    pub fn name(self) -> &'static str {
        match self {
            YieldMode::Auto => "auto",
            YieldMode::Always => "always",
            YieldMode::Never => "never",
        }
    }

    /// Parses a `QUIVER_YIELD` value (`auto`, `always`, `never`).
    pub fn from_name(name: &str) -> Option<YieldMode> {
        match name.trim() {
            "auto" => Some(YieldMode::Auto),
            "always" => Some(YieldMode::Always),
            "never" => Some(YieldMode::Never),
            _ => None,
        }
    }
}

/// A count and where it came from (a launcher's variable, PMIx, the machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCount {
    /// The count (at least 1).
    pub count: u32,
    /// Where it came from, for reports (`QUIVER_LOCAL_SIZE`, `PMIx`, `sched_getaffinity`...).
    pub source: &'static str,
}

/// What this process knows about its node's load; `None` where nothing says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeLoad {
    /// Ranks of the job on this node, this one included (the launcher's word).
    pub ranks: Option<NodeCount>,
    /// CPUs those ranks may use together: the launcher's word, else this process's and
    /// its parent's CPU sets together; at most the cgroup's quota.
    pub cpus: Option<NodeCount>,
}

impl NodeLoad {
    /// Completes what the launcher said with what the machine says: the CPUs this process
    /// and its parent (the launcher, usually) may run on when the launcher named none
    /// (a rank pinned to one core by its launcher still shares the launcher's set with the
    /// other ranks), then at most the cgroup v2 quota (`cpu.max`, rounded up).
    pub fn with_machine(mut self) -> NodeLoad {
        if self.cpus.is_none() {
            self.cpus = affinity_cpus();
        }
        if let Some(quota) = cgroup_quota_cpus() {
            if self.cpus.is_none_or(|cpus| quota < cpus.count) {
                self.cpus = Some(NodeCount {
                    count: quota,
                    source: "cgroup cpu.max",
                });
            }
        }
        self
    }

    /// Whether the job's ranks here outnumber their CPUs (false when either is unknown).
    pub fn oversubscribed(&self) -> bool {
        matches!((self.ranks, self.cpus), (Some(r), Some(c)) if r.count > c.count)
    }
}

/// How a spinning call gives its CPU away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yielding {
    /// Never: pure busy-polling (`QUIVER_YIELD=never`).
    Never,
    /// Once per periodic tick of a spin that has seen no progress; at every poll for the
    /// rest of the wait once such a yield shows another task wanted the CPU.
    WhenIdle,
    /// At every poll (`sched_yield` in place of the pause instruction).
    EveryPoll,
}

/// The waiting policy of one context (module docs), resolved by [`WaitPolicy::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// How long a blocking call polls before it sleeps.
    pub spin: Duration,
    /// The spin of a wait that turns out to share its CPU (`Yielding::WhenIdle`).
    pub shared_spin: Duration,
    /// How the spin gives the CPU away.
    pub yielding: Yielding,
    /// What the node's load looked like when the policy was resolved.
    pub load: NodeLoad,
}

impl Default for WaitPolicy {
    /// The policy of the default settings on a node of unknown load.
    fn default() -> WaitPolicy {
        WaitPolicy::resolve(
            Duration::from_millis(2),
            YieldMode::Auto,
            DEFAULT_YIELD_SPIN,
            NodeLoad::default(),
        )
    }
}

/// The default of `QUIVER_YIELD_SPIN_US`: long enough that a peer woken on the other core
/// answers within it, short enough that an idle rank of an oversubscribed node soon sleeps.
pub const DEFAULT_YIELD_SPIN: Duration = Duration::from_micros(200);

/// The shm eager limit when ranks share their CPUs (measured with `quiver bench busy`, 4
/// ranks on 2 CPUs, docs/decisions/0071-eager-limit-on-a-busy-node.md): a rendezvous
/// sender waits until its receiver is scheduled and pulls, an eager one copies into the
/// ring and goes on, so up to 256 KiB eager was 2-5x faster than rendezvous from 16 or
/// 64 KiB for ping-pong and request/reply; above it a whole pull beat eager through a
/// larger ring (4 MiB ring, 1 MiB eager: slower for the ring allreduce and request/reply).
pub(crate) const BUSY_SHM_EAGER_MAX: u64 = 256 << 10;

/// How long a `sched_yield` takes when it gave the CPU to another task (returning at once
/// takes well under a microsecond; a switch there and back takes a few).
pub(crate) const CONTENDED_YIELD: Duration = Duration::from_micros(20);

impl WaitPolicy {
    /// The policy for these settings and this load (module docs).
    pub fn resolve(
        spin: Duration,
        mode: YieldMode,
        yield_spin: Duration,
        load: NodeLoad,
    ) -> WaitPolicy {
        let (spin, yielding) = match mode {
            YieldMode::Never => (spin, Yielding::Never),
            YieldMode::Always => (yield_spin, Yielding::EveryPoll),
            YieldMode::Auto if load.oversubscribed() => (yield_spin, Yielding::EveryPoll),
            YieldMode::Auto => (spin, Yielding::WhenIdle),
        };
        WaitPolicy {
            spin,
            shared_spin: yield_spin.min(spin),
            yielding,
            load,
        }
    }

    /// Whether this rank shares its CPUs with the ranks it talks to (it yields at every
    /// poll: ranks outnumber CPUs, or `QUIVER_YIELD=always`). Then no second core is free
    /// to copy at the same time: a large shm rendezvous is pulled whole by the receiver
    /// instead of split with a sender that may not be running.
    pub fn shares_cpus(&self) -> bool {
        self.yielding == Yielding::EveryPoll
    }

    /// The shm eager limit (`QUIVER_SHM_EAGER_MAX`) this policy chooses, when it chooses
    /// one: with shared CPUs 256 KiB (`BUSY_SHM_EAGER_MAX`; at most a quarter of the ring,
    /// `ring_bytes`); otherwise none (the default or this machine's profile, measured with a
    /// core per rank, applies). An environment setting wins
    /// ([`Config::resolve_wait`](crate::config::Config::resolve_wait)).
    pub fn shm_eager_max(&self, ring_bytes: u64) -> Option<u64> {
        self.shares_cpus()
            .then_some(BUSY_SHM_EAGER_MAX.min(ring_bytes / 4))
    }

    /// One line for `quiver info` and the logs: what a waiting call does, and why.
    pub fn describe(&self) -> String {
        let spin = self.spin.as_micros();
        let how = match self.yielding {
            Yielding::Never => format!("busy-poll {spin} us, never yield, then sleep"),
            Yielding::WhenIdle => format!(
                "busy-poll {spin} us (yield once per 1024 idle polls; at every poll and for at \
                 most {} us once the CPU proves shared), then sleep",
                self.shared_spin.as_micros()
            ),
            Yielding::EveryPoll => format!("poll and yield {spin} us, then sleep"),
        };
        let count = |c: Option<NodeCount>| match c {
            Some(c) => format!("{} ({})", c.count, c.source),
            None => "unknown".to_owned(),
        };
        format!(
            "{how}; ranks on this node {}, CPUs {}{}",
            count(self.load.ranks),
            count(self.load.cpus),
            if self.load.oversubscribed() {
                ": oversubscribed"
            } else {
                ""
            }
        )
    }
}

/// The CPUs this process and its parent may run on, together (`sched_getaffinity`).
fn affinity_cpus() -> Option<NodeCount> {
    let mut cpus = sys::cpu_affinity(0).ok()?;
    let parent = sys::getppid();
    let mut source = "sched_getaffinity";
    if parent > 1 {
        if let Ok(theirs) = sys::cpu_affinity(parent) {
            cpus.extend(theirs);
            cpus.sort_unstable();
            cpus.dedup();
            source = "sched_getaffinity of this process and its parent";
        }
    }
    let count = u32::try_from(cpus.len()).ok().filter(|&n| n > 0)?;
    Some(NodeCount { count, source })
}

/// The cgroup v2 CPU quota of this process, in whole CPUs rounded up: the smallest
/// `cpu.max` of its cgroup and the cgroups above it; `None` without a quota.
fn cgroup_quota_cpus() -> Option<u32> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = std::path::PathBuf::from("/sys/fs/cgroup");
    dir.push(path.trim().trim_start_matches('/'));
    let mut least: Option<u32> = None;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("cpu.max")) {
            if let Some(cpus) = parse_cpu_max(&text) {
                least = Some(least.map_or(cpus, |l| l.min(cpus)));
            }
        }
        if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
            return least;
        }
    }
}

/// Whole CPUs (rounded up, at least 1) of a `cpu.max` line (`"200000 100000"`: two CPUs;
/// `"max 100000"`: no quota).
fn parse_cpu_max(text: &str) -> Option<u32> {
    let mut words = text.split_whitespace();
    let quota = words.next()?.parse::<u64>().ok()?;
    let period = words
        .next()
        .map_or(Some(100_000), |p| p.parse::<u64>().ok())?;
    if period == 0 {
        return None;
    }
    u32::try_from(quota.div_ceil(period).max(1)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(ranks: Option<u32>, cpus: Option<u32>) -> NodeLoad {
        let count = |count| NodeCount {
            count,
            source: "test",
        };
        NodeLoad {
            ranks: ranks.map(count),
            cpus: cpus.map(count),
        }
    }

    #[test]
    fn owning_a_core_keeps_busy_polling() {
        let spin = Duration::from_millis(2);
        let yield_spin = Duration::from_micros(200);
        for l in [
            load(None, None),
            load(Some(2), Some(2)),
            load(Some(4), None),
        ] {
            let p = WaitPolicy::resolve(spin, YieldMode::Auto, yield_spin, l);
            assert_eq!((p.spin, p.yielding), (spin, Yielding::WhenIdle), "{l:?}");
            assert_eq!(p.shared_spin, yield_spin);
        }
        let never = WaitPolicy::resolve(spin, YieldMode::Never, yield_spin, load(Some(8), Some(2)));
        assert_eq!((never.spin, never.yielding), (spin, Yielding::Never));
        assert_eq!(WaitPolicy::default().yielding, Yielding::WhenIdle);
        assert_eq!(WaitPolicy::default().spin, spin);
    }

    #[test]
    fn more_ranks_than_cpus_yield_and_spin_shorter() {
        let spin = Duration::from_millis(2);
        let yield_spin = Duration::from_micros(200);
        let p = WaitPolicy::resolve(spin, YieldMode::Auto, yield_spin, load(Some(4), Some(2)));
        assert_eq!((p.spin, p.yielding), (yield_spin, Yielding::EveryPoll));
        assert!(p.describe().contains("oversubscribed"), "{}", p.describe());
        let forced = WaitPolicy::resolve(spin, YieldMode::Always, yield_spin, load(None, None));
        assert_eq!(
            (forced.spin, forced.yielding),
            (yield_spin, Yielding::EveryPoll)
        );
        // A shared spin never exceeds the spin itself.
        let short = WaitPolicy::resolve(
            Duration::from_micros(5),
            YieldMode::Auto,
            yield_spin,
            load(None, None),
        );
        assert_eq!(short.shared_spin, Duration::from_micros(5));
    }

    #[test]
    fn cgroup_quota_caps_the_cpus() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2));
        assert_eq!(parse_cpu_max("150000 100000"), Some(2));
        assert_eq!(parse_cpu_max("1000 100000"), Some(1));
        assert_eq!(parse_cpu_max("50000"), Some(1));
        assert_eq!(parse_cpu_max("x 100000"), None);
        assert_eq!(parse_cpu_max("100 0"), None);
        assert_eq!(parse_cpu_max(""), None);
        // The machine always fills in the CPUs; the launcher's word is kept unless a quota
        // is smaller.
        let machine = load(Some(2), None).with_machine();
        assert!(machine.cpus.is_some_and(|c| c.count >= 1));
        let told = load(Some(2), Some(1)).with_machine();
        assert_eq!(told.cpus.map(|c| c.count), Some(1));
    }
}
