//! The handshakes a listener (shm, tcp) is answering, all at once: one thread polls its
//! listening socket and every accepted socket whose handshake is in progress, and advances
//! each as its bytes arrive ([decision 0069](../../../../docs/decisions/0069-concurrent-handshakes.md)).
//!
//! A stranger cannot hold a listener: every handshake has a deadline for the whole
//! conversation ([`HANDSHAKE_DEADLINE`]), not per read, so one byte every second does not
//! keep it alive; at most [`MAX_PENDING_HANDSHAKES`] are pending at once, and when another
//! connection arrives a pending one chosen at random is dropped to make room (a flood of
//! connects that never speak cannot keep a job member's connect out, and a member whose
//! attempt was dropped retries until its connect timeout). Every drop is counted as a
//! refusal.
//!
//! This module knows nothing of the transports: each one's listener implements
//! [`Handshake`] for its socket and gives [`serve`] a way to accept.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quiver_transport::sys;

use crate::random::random;
use crate::transport::local::LocalRank;

/// The time a whole handshake may take on a listener, from its accept to its last message.
pub(crate) const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(2);

/// Most handshakes one listener has in progress at once.
pub(crate) const MAX_PENDING_HANDSHAKES: usize = 64;

/// Longest wait of the listener thread before it looks at the stop flag again.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// Most connections taken off the listening socket in one turn of the loop, so that the
/// handshakes in progress advance between bursts of a flood.
const ACCEPTS_PER_TURN: usize = 16;

/// First pause of a listener after a failed accept; it doubles with each failure in a row.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause (it also bounds how long a stopping context waits for the thread).
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(200);

/// How a handshake the listener answered ended, when nothing failed.
pub(crate) enum Outcome {
    /// The new inbound edge was handed to its endpoint.
    Accepted,
    /// A crossed tcp connect: refused with `Busy`, the peer uses the connection this
    /// endpoint opened to it. Not a refusal.
    Crossed,
    /// The endpoint asked for is not open (yet): refused with `NoSuchEndpoint`, the
    /// initiator retries. Why, for the log.
    NotOpen(String),
    /// A peer asked for a memory region on the shm listener's reserved port and was
    /// answered (granted or not: the region table counts the refusals).
    KeyRequest,
}

/// Where a handshake stands after its socket was read.
pub(crate) enum Step {
    /// Waiting for the peer's next message.
    Waiting,
    /// Over: how it ended, or why it failed (a refusal, for the log).
    Finished(std::result::Result<Outcome, String>),
}

/// One handshake in progress on an accepted, non-blocking socket.
pub(crate) trait Handshake {
    /// The socket to poll for reading.
    fn fd(&self) -> RawFd;
    /// Reads what arrived (never blocks) and answers it.
    fn on_readable(&mut self, local: &LocalRank) -> Step;
    /// Who is at the other end, for the log.
    fn peer(&self) -> String;
}

/// What an accept gave.
pub(crate) enum Accepted<H> {
    /// A connection whose handshake starts now.
    New(H),
    /// A connection refused at once (and counted by the accepting code).
    Refused,
}

/// Answers the connections of `listener` until the rank stops: `accept` takes the next one
/// off the (non-blocking) listening socket, `WouldBlock` when none waits. `transport` names
/// the listener in the log.
pub(crate) fn serve<H: Handshake>(
    local: &LocalRank,
    transport: &str,
    listener: RawFd,
    mut accept: impl FnMut() -> io::Result<Accepted<H>>,
) {
    let mut pending = Pending::<H>::new(MAX_PENDING_HANDSHAKES);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut fds = Vec::with_capacity(MAX_PENDING_HANDSHAKES + 1);
    while !local.stopping.load(Ordering::Acquire) {
        fds.clear();
        fds.push(pollfd(listener));
        fds.extend(pending.entries.iter().map(|e| pollfd(e.handshake.fd())));
        let now = Instant::now();
        let wait = pending.next_deadline().map_or(POLL_SLICE, |d| {
            d.saturating_duration_since(now).min(POLL_SLICE)
        });
        let _ = sys::poll(&mut fds, Some(wait));
        if local.stopping.load(Ordering::Acquire) {
            return;
        }
        // Highest index first: finishing one removes it, which keeps the lower ones valid.
        for index in (0..pending.entries.len()).rev() {
            if fds[index + 1].revents == 0 {
                continue;
            }
            if let Step::Finished(end) = pending.entries[index].handshake.on_readable(local) {
                let done = pending.entries.swap_remove(index);
                record(local, transport, &done.handshake, end);
            }
        }
        for late in pending.take_expired(Instant::now()) {
            local.registry.handshake_dropped(format!(
                "{transport} from {}: no complete handshake within {} ms",
                late.peer(),
                HANDSHAKE_DEADLINE.as_millis()
            ));
        }
        if fds[0].revents != 0 {
            accept_burst(local, transport, &mut accept, &mut backoff, |h| {
                pending.admit(h, Instant::now(), random_below)
            });
        }
        local.registry.pending_handshakes(pending.entries.len());
    }
}

/// Takes up to [`ACCEPTS_PER_TURN`] connections from `accept`, giving each to `admit`
/// (which returns the pending handshake it dropped to make room, if any). A failed accept
/// never ends the listener: an interrupted call or a connection the peer abandoned is
/// simply retried; anything else (out of descriptors or memory, or an error nobody
/// expected) is counted and logged ([`Registry::accept_failed`]) and retried after a pause
/// that doubles while failures follow each other, from [`ACCEPT_BACKOFF_MIN`] to
/// [`ACCEPT_BACKOFF_MAX`].
///
/// [`Registry::accept_failed`]: crate::transport::registry::Registry::accept_failed
fn accept_burst<H: Handshake>(
    local: &LocalRank,
    transport: &str,
    accept: &mut impl FnMut() -> io::Result<Accepted<H>>,
    backoff: &mut Duration,
    mut admit: impl FnMut(H) -> Option<H>,
) {
    for _ in 0..ACCEPTS_PER_TURN {
        match accept() {
            Ok(Accepted::New(handshake)) => {
                *backoff = ACCEPT_BACKOFF_MIN;
                if let Some(dropped) = admit(handshake) {
                    local.registry.handshake_dropped(format!(
                        "{transport} from {}: dropped for a newer connection ({} handshakes pending)",
                        dropped.peer(),
                        MAX_PENDING_HANDSHAKES
                    ));
                }
            }
            Ok(Accepted::Refused) => *backoff = ACCEPT_BACKOFF_MIN,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ECONNABORTED)) => {}
            Err(e) => {
                local.registry.accept_failed(transport, &e, *backoff);
                std::thread::sleep(*backoff);
                *backoff = (*backoff * 2).min(ACCEPT_BACKOFF_MAX);
                return;
            }
        }
    }
}

/// Counts how a handshake ended.
fn record(
    local: &LocalRank,
    transport: &str,
    handshake: &impl Handshake,
    end: std::result::Result<Outcome, String>,
) {
    match end {
        // Counted by the handshake itself before the edge reached the endpoint.
        Ok(Outcome::Accepted) => {}
        // Not a refusal: the peer uses the connection we opened to it.
        Ok(Outcome::Crossed) => {}
        Ok(Outcome::KeyRequest) => {}
        Ok(Outcome::NotOpen(why)) => local
            .registry
            .not_open(format!("{transport} from {}: {why}", handshake.peer())),
        Err(why) => local
            .registry
            .refused(format!("{transport} from {}: {why}", handshake.peer())),
    }
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// A number in `0..n` from the kernel's randomness (`n > 0`).
fn random_below(n: usize) -> usize {
    (u64::from_ne_bytes(random()) % n as u64) as usize
}

/// The handshakes in progress, each with its deadline; never more than `bound`.
struct Pending<H> {
    entries: Vec<Entry<H>>,
    bound: usize,
}

struct Entry<H> {
    handshake: H,
    deadline: Instant,
}

impl<H> Pending<H> {
    fn new(bound: usize) -> Self {
        assert!(bound > 0, "a listener holds at least one handshake");
        Pending {
            entries: Vec::with_capacity(bound),
            bound,
        }
    }

    /// Adds `handshake`, started `now`. When `bound` are pending already, first drops the
    /// one at index `pick(bound)` (random in [`serve`]) and returns it.
    fn admit(
        &mut self,
        handshake: H,
        now: Instant,
        pick: impl FnOnce(usize) -> usize,
    ) -> Option<H> {
        let dropped = (self.entries.len() >= self.bound).then(|| {
            let index = pick(self.entries.len()).min(self.entries.len() - 1);
            self.entries.swap_remove(index).handshake
        });
        self.entries.push(Entry {
            handshake,
            deadline: now + HANDSHAKE_DEADLINE,
        });
        dropped
    }

    /// Removes and returns the handshakes whose deadline passed by `now`.
    fn take_expired(&mut self, now: Instant) -> Vec<H> {
        let mut expired = Vec::new();
        let mut index = 0;
        while index < self.entries.len() {
            if self.entries[index].deadline <= now {
                expired.push(self.entries.swap_remove(index).handshake);
            } else {
                index += 1;
            }
        }
        expired
    }

    /// The earliest deadline of a pending handshake.
    fn next_deadline(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, OwnedFd};

    use super::*;
    use crate::config::Config;
    use crate::job::JobInfo;

    /// A pending handshake that only has a name.
    struct Named(u32, OwnedFd);

    impl Handshake for Named {
        fn fd(&self) -> RawFd {
            self.1.as_raw_fd()
        }
        fn on_readable(&mut self, _: &LocalRank) -> Step {
            Step::Finished(Ok(Outcome::Accepted))
        }
        fn peer(&self) -> String {
            format!("test {}", self.0)
        }
    }

    fn named(n: u32) -> Named {
        Named(n, std::fs::File::open("/dev/null").unwrap().into())
    }

    /// At the bound, each new handshake drops the one `pick` chose; never more than the
    /// bound are kept.
    #[test]
    fn pending_handshakes_stay_within_their_bound() {
        let now = Instant::now();
        let mut pending = Pending::new(3);
        for n in 0..3 {
            assert!(pending.admit(named(n), now, |_| unreachable!()).is_none());
        }
        let dropped = pending.admit(named(3), now, |n| {
            assert_eq!(n, 3);
            1
        });
        assert_eq!(dropped.map(|d| d.0), Some(1));
        // An out-of-range pick is clamped, never a panic.
        assert_eq!(pending.admit(named(4), now, |_| 99).map(|d| d.0), Some(3));
        assert_eq!(pending.entries.len(), 3);
        let kept: Vec<u32> = pending.entries.iter().map(|e| e.handshake.0).collect();
        assert_eq!(kept, vec![0, 2, 4]);
    }

    /// The deadline is for the whole handshake, from its admission.
    #[test]
    fn handshakes_expire_at_their_deadline() {
        let start = Instant::now();
        let mut pending = Pending::new(4);
        pending.admit(named(0), start, |_| 0);
        pending.admit(named(1), start + Duration::from_millis(500), |_| 0);
        assert_eq!(pending.next_deadline(), Some(start + HANDSHAKE_DEADLINE));
        assert!(pending
            .take_expired(start + Duration::from_millis(1999))
            .is_empty());
        let late = pending.take_expired(start + HANDSHAKE_DEADLINE);
        assert_eq!(late.iter().map(|h| h.0).collect::<Vec<_>>(), vec![0]);
        assert_eq!(pending.entries.len(), 1);
    }

    /// Unexpected accept errors (here EPERM, then out of descriptors) never end the
    /// listener: each is counted, and the connection after them is still served.
    #[test]
    fn the_listener_keeps_listening_after_failed_accepts() {
        let local = LocalRank::new(JobInfo::by_hand(), Config::default(), None);
        let mut outcomes: Vec<io::Result<Accepted<Named>>> = vec![
            Err(io::Error::from_raw_os_error(libc::EPERM)),
            Err(io::Error::from_raw_os_error(libc::EINTR)),
            Err(io::Error::from_raw_os_error(libc::EMFILE)),
            Err(io::Error::from_raw_os_error(libc::EPROTO)),
            Ok(Accepted::New(named(7))),
        ];
        outcomes.reverse();
        let mut served = 0;
        let mut backoff = ACCEPT_BACKOFF_MIN;
        let started = Instant::now();
        let mut accept = || {
            outcomes
                .pop()
                .unwrap_or_else(|| Err(io::Error::from(io::ErrorKind::WouldBlock)))
        };
        for _ in 0..4 {
            accept_burst(&local, "shm", &mut accept, &mut backoff, |_| {
                served += 1;
                None
            });
        }
        assert_eq!(served, 1, "the connection after the errors is served");
        // EINTR is retried at once; the three others are counted, with pauses of 10, 20
        // and 40 ms.
        assert_eq!(local.registry.counts_now().accept_errors, 3);
        assert!(started.elapsed() >= Duration::from_millis(70));
        assert_eq!(backoff, ACCEPT_BACKOFF_MIN, "a success resets the pause");
    }
}
