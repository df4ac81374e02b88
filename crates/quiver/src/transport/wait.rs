//! Waiting in a blocking call: spin while the spin budget lasts (the cross-core wake-up of a
//! sleeping process costs tens of microseconds here), then sleep on the transport's
//! descriptor or futex; honour the call's timeout; tell when a liveness look is due.

use std::time::{Duration, Instant};

use quiver_transport::sys;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::transport::liveness::Looks;

/// Spin-then-sleep bookkeeping of one blocking call. Reads no clock until the call
/// actually has to wait (the clock costs ~30 ns a read here, as much as a message).
pub(crate) struct Wait {
    /// When the call started waiting (the deadline counts from here).
    start: Option<Instant>,
    /// When the current spin phase started (reset after each wake-up).
    spin_start: Option<Instant>,
    spins: u32,
    timeout: Option<Duration>,
    pub(crate) armed: bool,
    pub(crate) seen: Option<u32>,
    /// The clock as the last periodic tick read it, for [`Wait::liveness_due`] (so that
    /// detection adds no clock read of its own to a spinning call).
    tick_now: Option<Instant>,
}

impl Wait {
    pub(crate) fn new(config: &Config) -> Wait {
        Wait::with_timeout(config.op_timeout)
    }

    pub(crate) fn with_timeout(timeout: Option<Duration>) -> Wait {
        Wait {
            start: None,
            spin_start: None,
            spins: 0,
            timeout,
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
    /// short waits never read the clock.
    pub(crate) fn spinning(&mut self, spin: Duration) -> (bool, bool) {
        self.spins = self.spins.wrapping_add(1);
        let periodic = self.spins.is_multiple_of(1024);
        let still = !periodic || {
            let start = self.start();
            let now = Instant::now();
            self.tick_now = Some(now);
            now.saturating_duration_since(*self.spin_start.get_or_insert(start)) < spin
        };
        (still, periodic)
    }

    /// Spin again from now (after a wake-up); the deadline stays where it was.
    pub(crate) fn restart(&mut self) {
        self.start();
        self.spin_start = Some(Instant::now());
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
    spin: Duration,
    what: &'static str,
    alive: impl FnMut() -> bool,
) -> Result<()> {
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    wait_fds(&mut fds, cap, wait, spin, what, alive)
}

/// One step of waiting for any of `fds` to become ready: spin while the spin budget
/// lasts, then sleep in `poll` for at most `cap()` (asked only when about to sleep) and the
/// time left before the deadline; honours the timeout. `alive()` is asked periodically and
/// after each sleep; when it says false the step returns at once (the caller knows why).
pub(crate) fn wait_fds(
    fds: &mut [libc::pollfd],
    cap: impl FnOnce() -> Duration,
    wait: &mut Wait,
    spin: Duration,
    what: &'static str,
    mut alive: impl FnMut() -> bool,
) -> Result<()> {
    let (spinning, periodic) = wait.spinning(spin);
    if periodic {
        if !alive() {
            return Ok(());
        }
        wait.check_deadline(what)?;
    }
    if spinning {
        std::hint::spin_loop();
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
