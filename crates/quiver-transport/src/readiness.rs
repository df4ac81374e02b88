//! [`Readiness`]: the one descriptor an endpoint hands to poll/epoll or an async runtime.
//!
//! It is an epoll set that holds, level-triggered, every descriptor that can signal the
//! endpoint: its doorbell (an eventfd rung by shm senders and by whoever delivers to it),
//! its tcp streams, the datagram engine's socket, its peers' pidfds, and a timerfd for the
//! protocol timers that must run while the program sleeps. The set is itself pollable: it
//! is readable when any member is. The members change only when the owner says so
//! ([`Readiness::sync`], called before sleeping), so a busy-polling owner makes no system
//! call here.
//!
//! Layer: quiver-transport, the operating-system side of waiting. `unsafe` only around
//! system calls; no policy (the caller says which descriptors and when the timer fires).

use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Readable (for [`Readiness::sync`]'s members).
pub const READABLE: u32 = libc::EPOLLIN as u32;
/// Writable (for [`Readiness::sync`]'s members).
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An epoll set with a fixed part (the descriptors given to [`Readiness::new`] and its own
/// timerfd) and a changing part ([`Readiness::sync`]).
#[derive(Debug)]
pub struct Readiness {
    epoll: OwnedFd,
    timer: OwnedFd,
    timer_set: bool,
    /// The changing members as last synced: (descriptor, events), sorted by descriptor.
    members: Vec<(RawFd, u32)>,
    /// Scratch for the next sync (kept: syncing allocates nothing once warm).
    wanted: Vec<(RawFd, u32)>,
}

impl Readiness {
    /// A set holding `fixed` (readable) and its own timer, both for its whole life.
    ///
    /// # Errors
    /// `epoll_create1`, `timerfd_create` or `epoll_ctl` failed (descriptor limits).
    pub fn new(fixed: &[RawFd]) -> io::Result<Readiness> {
        // SAFETY: plain syscall; the result is a fresh descriptor.
        let raw = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `raw` was just created and is owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall; the result is a fresh descriptor.
        let raw = check(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: `raw` was just created and is owned by nobody else.
        let timer = unsafe { OwnedFd::from_raw_fd(raw) };
        let set = Readiness {
            epoll,
            timer,
            timer_set: false,
            members: Vec::new(),
            wanted: Vec::new(),
        };
        set.control(libc::EPOLL_CTL_ADD, set.timer.as_raw_fd(), READABLE)?;
        for &fd in fixed {
            set.control(libc::EPOLL_CTL_ADD, fd, READABLE)?;
        }
        Ok(set)
    }

    /// Makes the changing members exactly `wanted` (descriptor, [`READABLE`] |
    /// [`WRITABLE`]); a descriptor named twice gets both sets of events. Only differences
    /// from the last sync cost a system call. The caller keeps every member open until a
    /// later sync leaves it out (or the set is dropped).
    ///
    /// # Errors
    /// `epoll_ctl` failed for a member (not open, not pollable); the others are synced.
    pub fn sync(&mut self, wanted: impl IntoIterator<Item = (RawFd, u32)>) -> io::Result<()> {
        let mut next = std::mem::take(&mut self.wanted);
        next.clear();
        next.extend(wanted);
        next.sort_unstable_by_key(|&(fd, _)| fd);
        next.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 |= later.1;
            }
            same
        });
        let mut result = Ok(());
        let mut keep = |r: io::Result<()>| {
            if let Err(e) = r {
                result = Err(e);
            }
        };
        let (mut i, mut j) = (0, 0);
        while i < self.members.len() || j < next.len() {
            let old = self.members.get(i).copied();
            let new = next.get(j).copied();
            match (old, new) {
                (Some(o), Some(n)) if o.0 == n.0 => {
                    if o.1 != n.1 {
                        keep(self.modify(n.0, n.1));
                    }
                    i += 1;
                    j += 1;
                }
                (Some(o), Some(n)) if o.0 < n.0 => {
                    self.remove(o.0);
                    i += 1;
                }
                (Some(o), None) => {
                    self.remove(o.0);
                    i += 1;
                }
                (_, Some(n)) => {
                    keep(self.add(n.0, n.1));
                    j += 1;
                }
                (None, None) => break,
            }
        }
        self.wanted = std::mem::replace(&mut self.members, next);
        result
    }

    /// Makes the set readable after `after` (None: never), until [`Readiness::clear_timer`].
    ///
    /// # Errors
    /// `timerfd_settime` failed.
    pub fn set_timer(&mut self, after: Option<Duration>) -> io::Result<()> {
        if after.is_none() && !self.timer_set {
            return Ok(());
        }
        // SAFETY: an all-zero itimerspec is valid (disarmed).
        let mut spec: libc::itimerspec = unsafe { zeroed() };
        if let Some(after) = after {
            // A zero value disarms the timer: at least one nanosecond.
            let after = after.max(Duration::from_nanos(1));
            spec.it_value.tv_sec = after.as_secs().min(i64::MAX as u64) as libc::time_t;
            spec.it_value.tv_nsec = after.subsec_nanos() as libc::c_long;
        }
        // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
        check(unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut())
        })?;
        self.timer_set = after.is_some();
        Ok(())
    }

    /// Disarms the timer and empties it (the set no longer reads as readable for it).
    pub fn clear_timer(&mut self) {
        if !self.timer_set {
            return;
        }
        let _ = self.set_timer(None);
        let mut value: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live local; the timerfd is non-blocking.
        unsafe {
            libc::read(
                self.timer.as_raw_fd(),
                &mut value as *mut u64 as *mut libc::c_void,
                8,
            )
        };
    }

    /// The changing members as last synced (descriptor, events), sorted by descriptor.
    pub fn members(&self) -> &[(RawFd, u32)] {
        &self.members
    }

    fn add(&self, fd: RawFd, events: u32) -> io::Result<()> {
        match self.control(libc::EPOLL_CTL_ADD, fd, events) {
            // Already there (a descriptor given twice over time): set its events.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => self.modify(fd, events),
            other => other,
        }
    }

    fn modify(&self, fd: RawFd, events: u32) -> io::Result<()> {
        match self.control(libc::EPOLL_CTL_MOD, fd, events) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.control(libc::EPOLL_CTL_ADD, fd, events)
            }
            other => other,
        }
    }

    fn remove(&self, fd: RawFd) {
        // A member closed meanwhile left the set by itself: nothing to report.
        let _ = self.control(libc::EPOLL_CTL_DEL, fd, 0);
    }

    fn control(&self, op: libc::c_int, fd: RawFd, events: u32) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: the epoll descriptor is ours and open; `event` is a valid epoll_event
        // (ignored by EPOLL_CTL_DEL); a bad `fd` is an error from the kernel, nothing worse.
        check(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) })?;
        Ok(())
    }
}

impl AsRawFd for Readiness {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    fn readable(fd: RawFd, wait: Duration) -> bool {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        sys::poll(&mut p, Some(wait)).unwrap() == 1
    }

    #[test]
    fn the_set_is_readable_for_a_fixed_member_a_synced_one_and_the_timer() {
        let bell = sys::eventfd().unwrap();
        let other = sys::eventfd().unwrap();
        let mut set = Readiness::new(&[bell.as_raw_fd()]).unwrap();
        assert!(!readable(set.as_raw_fd(), Duration::ZERO));
        sys::eventfd_signal(bell.as_raw_fd()).unwrap();
        assert!(readable(set.as_raw_fd(), Duration::ZERO));
        sys::eventfd_drain(bell.as_raw_fd());
        assert!(!readable(set.as_raw_fd(), Duration::ZERO));

        // A member not synced does not count; once synced it does; left out again, not.
        sys::eventfd_signal(other.as_raw_fd()).unwrap();
        assert!(!readable(set.as_raw_fd(), Duration::ZERO));
        set.sync([(other.as_raw_fd(), READABLE), (other.as_raw_fd(), WRITABLE)])
            .unwrap();
        assert_eq!(set.members(), &[(other.as_raw_fd(), READABLE | WRITABLE)]);
        assert!(readable(set.as_raw_fd(), Duration::ZERO));
        set.sync([]).unwrap();
        assert!(set.members().is_empty());
        assert!(!readable(set.as_raw_fd(), Duration::ZERO));

        // The timer.
        set.set_timer(Some(Duration::from_millis(5))).unwrap();
        assert!(readable(set.as_raw_fd(), Duration::from_secs(5)));
        set.clear_timer();
        assert!(!readable(set.as_raw_fd(), Duration::ZERO));
    }
}
