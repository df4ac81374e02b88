//! Waiting in a blocking call: spin while the spin budget lasts (the cross-core wake-up of a
//! sleeping process costs tens of microseconds here), then sleep on the transport's
//! descriptor or futex; honour the call's timeout; tell when a liveness look is due. How
//! long to spin and when to yield the CPU is the context's policy
//! ([`WaitPolicy`](crate::transport::wait_policy::WaitPolicy)), read once per call.

use std::time::{Duration, Instant};

use quiver_transport::sys;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::transport::liveness::Looks;
use crate::transport::wait_policy::{Yielding, CONTENDED_YIELD};

/// Polls between two periodic ticks (clock, deadline, liveness) of a call that busy-polls:
/// the clock costs as much as a poll, so it is read once per this many.
const TICK_POLLS: u32 = 1024;

/// Polls between two ticks of a call that yields at every poll: a yield may hand the CPU
/// away for a while, so the clock is read more often (and costs little next to a yield).
const YIELDING_TICK_POLLS: u32 = 16;

/// Spin-then-sleep bookkeeping of one blocking call. Reads no clock until the call
/// actually has to wait (the clock costs ~30 ns a read here, as much as a message).
pub(crate) struct Wait {
    /// When the call started waiting (the deadline counts from here).
    start: Option<Instant>,
    /// When the current spin phase started (reset after each wake-up).
    spin_start: Option<Instant>,
    spins: u32,
    /// `TICK_POLLS - 1` or `YIELDING_TICK_POLLS - 1`: a poll is a tick when `spins & mask`
    /// is 0.
    tick_mask: u32,
    /// The spin budget, from the policy (shortened once the CPU proves shared).
    spin: Duration,
    /// The budget of a spin that turns out to share its CPU.
    shared_spin: Duration,
    /// How the spin gives the CPU away: the one field a poll branches on.
    yielding: Yielding,
    timeout: Option<Duration>,
    pub(crate) armed: bool,
    pub(crate) seen: Option<u32>,
    /// The clock as the last periodic tick read it, for [`Wait::liveness_due`] (so that
    /// detection adds no clock read of its own to a spinning call).
    tick_now: Option<Instant>,
}

impl Wait {
    /// The bookkeeping of one call waiting under `config`'s policy and timeout.
    pub(crate) fn new(config: &Config) -> Wait {
        let policy = &config.wait;
        Wait {
            start: None,
            spin_start: None,
            spins: 0,
            tick_mask: match policy.yielding {
                Yielding::EveryPoll => YIELDING_TICK_POLLS - 1,
                Yielding::Never | Yielding::WhenIdle => TICK_POLLS - 1,
            },
            spin: policy.spin,
            shared_spin: policy.shared_spin,
            yielding: policy.yielding,
            timeout: config.op_timeout,
            armed: false,
            seen: None,
            tick_now: None,
        }
    }

    /// Whether a spinning call should look at its peers' liveness now, at its periodic
    /// tick: at most every [`look_interval`](crate::transport::liveness::look_interval) for the whole endpoint (`looks`).
    pub(crate) fn liveness_due(&mut self, looks: &mut Looks, detect: Duration) -> bool {
        let now = self.tick_now.take().unwrap_or_else(Instant::now);
        looks.due(now, detect)
    }

    pub(crate) fn start(&mut self) -> Instant {
        *self.start.get_or_insert_with(Instant::now)
    }

    pub(crate) fn deadline(&mut self) -> Option<Instant> {
        let start = self.start();
        self.timeout.map(|t| start + t)
    }

    pub(crate) fn check_deadline(&mut self, what: &'static str) -> Result<()> {
        match (self.deadline(), self.timeout) {
            (Some(d), Some(t)) if Instant::now() >= d => Err(Error::Timeout {
                what,
                millis: t.as_millis() as u64,
            }),
            _ => Ok(()),
        }
    }

    /// Whether to keep spinning; also says when a periodic check is due.
    /// The spin budget is counted from the first periodic check (~1000 polls in), so
    /// short waits never read the clock. At a tick of a spin that has seen no progress,
    /// a rank that owns its core yields once (`Yielding::WhenIdle`): if that handed the
    /// CPU to another task, the rest of the wait yields at every poll, spinning no longer
    /// than the shared budget.
    pub(crate) fn spinning(&mut self) -> (bool, bool) {
        self.spins = self.spins.wrapping_add(1);
        let periodic = self.spins & self.tick_mask == 0;
        let still = !periodic || {
            let start = self.start();
            let now = Instant::now();
            self.tick_now = Some(now);
            let spun = now.saturating_duration_since(*self.spin_start.get_or_insert(start));
            spun < self.spin && (self.yielding != Yielding::WhenIdle || self.yield_idle(now))
        };
        (still, periodic)
    }

    /// One poll's pause: the pause instruction, or a `sched_yield` when the policy says
    /// so (the one branch the policy adds to a poll).
    #[inline]
    pub(crate) fn pause(&self) {
        if self.yielding == Yielding::EveryPoll {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// The periodic yield of an idle spin (`now`: the tick's clock); whether to go on
    /// spinning.
    #[cold]
    fn yield_idle(&mut self, now: Instant) -> bool {
        std::thread::yield_now();
        if Instant::now().saturating_duration_since(now) < CONTENDED_YIELD {
            return true;
        }
        // Another task ran meanwhile: this CPU is shared; give it away at every poll.
        self.yielding = Yielding::EveryPoll;
        self.tick_mask = YIELDING_TICK_POLLS - 1;
        self.spin = self.shared_spin;
        let start = self.start();
        now.saturating_duration_since(*self.spin_start.get_or_insert(start)) < self.spin
    }

    /// How long the call has waited so far (reads the clock: for periodic looks only).
    pub(crate) fn waited(&mut self) -> Duration {
        self.start().elapsed()
    }

    /// Spin again from now (after a wake-up); the deadline stays where it was.
    pub(crate) fn restart(&mut self) {
        self.start();
        self.spin_start = Some(Instant::now());
    }

    /// Whether the spin budget is spent (reads the clock: for periodic checks only).
    pub(crate) fn spin_spent(&mut self) -> bool {
        let start = self.start();
        self.spin_start.unwrap_or(start).elapsed() >= self.spin
    }
}

/// How often a sleeping call wakes up on its own to re-check liveness and ring integrity.
pub(crate) const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// One step of waiting for `fd` to become ready (`events`): [`wait_fds`] on one descriptor.
pub(crate) fn wait_fd(
    fd: std::os::fd::RawFd,
    events: i16,
    cap: impl FnOnce() -> Duration,
    wait: &mut Wait,
    what: &'static str,
    alive: impl FnMut() -> bool,
) -> Result<()> {
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    wait_fds(&mut fds, cap, wait, what, alive)
}

/// One step of waiting for any of `fds` to become ready: spin while the spin budget
/// lasts, then sleep in `poll` for at most `cap()` (asked only when about to sleep) and the
/// time left before the deadline; honours the timeout. `alive()` is asked periodically and
/// after each sleep; when it says false the step returns at once (the caller knows why).
pub(crate) fn wait_fds(
    fds: &mut [libc::pollfd],
    cap: impl FnOnce() -> Duration,
    wait: &mut Wait,
    what: &'static str,
    mut alive: impl FnMut() -> bool,
) -> Result<()> {
    let (spinning, periodic) = wait.spinning();
    if periodic {
        if !alive() {
            return Ok(());
        }
        wait.check_deadline(what)?;
    }
    if spinning {
        wait.pause();
        return Ok(());
    }
    let mut slice = cap();
    if let Some(d) = wait.deadline() {
        slice = slice.min(d.saturating_duration_since(Instant::now()));
    }
    let _ = sys::poll(fds, Some(slice));
    if !alive() {
        return Ok(());
    }
    wait.check_deadline(what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::wait_policy::{NodeLoad, YieldMode};

    fn config(mode: YieldMode, spin: Duration, yield_spin: Duration) -> Config {
        let mut config = Config {
            spin,
            yield_mode: mode,
            yield_spin,
            ..Config::default()
        };
        config.resolve_wait(NodeLoad::default());
        config
    }

    /// Polls until the first tick; how many polls that took.
    fn polls_to_tick(wait: &mut Wait) -> u32 {
        (1..).find(|_| wait.spinning().1).expect("a tick")
    }

    #[test]
    fn the_policy_sets_the_tick_and_the_budget() {
        let long = Duration::from_secs(60);
        let mut busy = Wait::new(&config(YieldMode::Never, long, long));
        assert_eq!(polls_to_tick(&mut busy), TICK_POLLS);
        assert_eq!(busy.yielding, Yielding::Never);
        let mut yielding = Wait::new(&config(YieldMode::Always, long, long));
        assert_eq!(polls_to_tick(&mut yielding), YIELDING_TICK_POLLS);
        yielding.pause();
        // The spin ends at the first tick past the budget.
        let mut short = Wait::new(&config(YieldMode::Always, long, Duration::ZERO));
        let spun = (1..).find(|_| !short.spinning().0).expect("the spin ends");
        assert_eq!(spun, YIELDING_TICK_POLLS);
        assert!(short.spin_spent());
    }

    #[test]
    fn an_idle_spin_on_a_shared_cpu_turns_to_yielding() {
        let long = Duration::from_secs(60);
        let mut wait = Wait::new(&config(YieldMode::Auto, long, Duration::from_secs(30)));
        assert_eq!(wait.yielding, Yielding::WhenIdle);
        // A yield that came back at once: the CPU is this rank's.
        let now = Instant::now();
        assert!(wait.yield_idle(now) || wait.yielding == Yielding::EveryPoll);
        // One that came back late (as if another task ran for 1 s meanwhile).
        let mut wait = Wait::new(&config(YieldMode::Auto, long, Duration::from_secs(30)));
        wait.start();
        let tick = Instant::now() - Duration::from_secs(1);
        assert!(wait.yield_idle(tick), "30 s of shared spin are not spent");
        assert_eq!(wait.yielding, Yielding::EveryPoll);
        assert_eq!(wait.spin, Duration::from_secs(30));
        assert_eq!(polls_to_tick(&mut wait), YIELDING_TICK_POLLS);
        // And a shared budget already spent ends the spin.
        let mut wait = Wait::new(&config(YieldMode::Auto, long, Duration::ZERO));
        assert!(!wait.yield_idle(Instant::now() - Duration::from_secs(1)));
    }
}
