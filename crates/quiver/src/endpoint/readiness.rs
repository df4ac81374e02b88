//! Readiness: the endpoint's descriptor ([`AsRawFd`](std::os::fd::AsRawFd)) for
//! poll/epoll and async runtimes, whatever transports its connections use.
//!
//! The descriptor is an epoll set ([`quiver_transport::readiness::Readiness`]) holding the
//! endpoint's doorbell (rung by shm senders, by the listeners for a new connection, and by
//! whichever endpoint's poll of the datagram engine fed one of this endpoint's
//! connections), the datagram engine's socket, and what [`Endpoint::arm`] adds before a
//! sleep: the tcp streams (readable; writable while sends wait in their queue), the shm
//! peers' pidfds, and a timer for the datagram protocol's next deadline (and, while shm
//! sends wait for their receiver, a short look-again: their completion rings nothing of
//! ours). A busy-polling endpoint that never arms makes no system call for any of this.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use quiver_transport::readiness::{READABLE, WRITABLE};

use super::matching::MatchSpec;
use super::Endpoint;
use crate::error::{Error, Result};

/// How soon an endpoint asleep on its descriptor looks again while shm sends wait for
/// their receiver (ring space, or a rendezvous pulled): the receiver's progress rings no
/// doorbell of the sender's.
pub(crate) const UNSIGNALLED_LOOK: Duration = Duration::from_millis(1);

impl Endpoint {
    /// Prepares the endpoint's descriptor ([`AsRawFd`](std::os::fd::AsRawFd)) for
    /// poll/epoll or an async runtime: after `arm` returns `Ok(true)`, the descriptor
    /// becomes readable as soon as a message arrives over any transport (shm, tcp, udp),
    /// a peer connects or ends a connection, or a posted operation can make progress
    /// (complete it with `test_*`); `Ok(false)` means something is already waiting:
    /// receive it instead of sleeping.
    ///
    /// The pattern: receive with `try_recv*` (and `test_*` posted requests) until
    /// [`Error::WouldBlock`], `arm`, then wait for the descriptor to be readable. A
    /// readable descriptor may find nothing (another endpoint of the context took the
    /// datagram engine's news first, or a protocol timer ran): call `try_*` again and
    /// re-arm. While the endpoint is armed, each arriving shm message costs its sender one
    /// system call, so arm only before sleeping.
    ///
    /// ```no_run
    /// # fn main() -> quiver::Result<()> {
    /// use std::os::fd::AsRawFd;
    /// let ctx = quiver::Context::from_env()?;
    /// let mut ep = ctx.endpoint(0)?;
    /// let mut buf = [0u8; 64];
    /// loop {
    ///     match ep.try_recv(&mut buf) {
    ///         Ok((len, from)) => println!("{len} bytes from {from}"),
    ///         Err(quiver::Error::WouldBlock) => {
    ///             if ep.arm()? {
    ///                 let mut fds = [libc::pollfd { fd: ep.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    ///                 // SAFETY: one valid pollfd.
    ///                 unsafe { libc::poll(fds.as_mut_ptr(), 1, -1) };
    ///             }
    ///         }
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] when the descriptor's set could not take a connection's socket
    /// (descriptor limits).
    pub fn arm(&mut self) -> Result<bool> {
        self.arm_for(None)
    }

    /// [`Endpoint::arm`] for a caller that waits for a message `spec` matches
    /// (`try_recv_matching`, `try_probe`): messages already in the endpoint that `spec`
    /// does not match (taken in by an earlier matching receive, waiting for a later one)
    /// do not count as something waiting, so the descriptor is armed while they wait
    /// (plain `arm` reports them, and a loop waiting for one tag would never sleep).
    /// `Ok(false)` when a message `spec` matches is there, or anything else is waiting
    /// that `arm` reports.
    ///
    /// The pattern: `try_recv_matching(spec, ..)` until [`Error::WouldBlock`],
    /// `arm_matching(spec)`, then wait for the descriptor to be readable.
    ///
    /// # Errors
    /// As [`Endpoint::arm`].
    pub fn arm_matching(&mut self, spec: MatchSpec) -> Result<bool> {
        self.arm_for(Some(spec))
    }

    /// `arm`, counting the matcher's unexpected messages `spec` matches (all, for `None`).
    fn arm_for(&mut self, spec: Option<MatchSpec>) -> Result<bool> {
        self.refuse_in_handler("arm")?;
        self.flush_inbound();
        self.doorbell.drain();
        self.ready.clear_timer();
        self.doorbell.arm();
        let unexpected = match spec {
            None => self.matcher.unexpected_len() > 0,
            Some(spec) => self.matcher.probe(spec).is_some(),
        };
        if self.inbox.has_incoming.load(Ordering::Relaxed) || unexpected {
            return Ok(false);
        }
        if let Some(engine) = &self.local.dgram {
            engine.arm_sleeper(self.addr.port, &self.inbox, &self.local);
        }
        // A peer that exited while we slept: its pidfd woke us; report it now.
        self.check_liveness_throttled();
        let local = &self.local;
        if self.inbound.iter_mut().any(|inb| inb.has_pending(local)) || self.end_pending() {
            return Ok(false);
        }
        self.watch_connections()?;
        Ok(true)
    }

    /// Puts the connections' descriptors a sleep must watch into the endpoint's set, and
    /// sets its timer.
    fn watch_connections(&mut self) -> Result<()> {
        let inbound = self
            .inbound
            .iter()
            .filter_map(|inb| inb.wake_fd())
            .map(|fd| (fd, READABLE));
        // One-sided requests peers send this rank, and replies to this endpoint's posted
        // ones: served and taken by the next call after the wake-up.
        let mut rma = Vec::new();
        self.local.rma.wake_fds(&mut rma);
        rma.extend(self.outbound.iter().filter_map(|out| out.rma_wake()));
        let outbound = self
            .outbound
            .iter()
            .filter_map(|out| out.wake_fd())
            .chain(rma)
            .map(|p| {
                let mut events = 0;
                if p.events & libc::POLLIN != 0 {
                    events |= READABLE;
                }
                if p.events & libc::POLLOUT != 0 {
                    events |= WRITABLE;
                }
                (p.fd, events)
            });
        self.ready
            .sync(inbound.chain(outbound))
            .map_err(|e| Error::io("watching the endpoint's connections", e))?;
        let mut timer = self.local.dgram.as_ref().and_then(|e| e.next_timer_in());
        if self.outbound.iter().any(|out| out.busy_unsignalled()) {
            timer = Some(timer.map_or(UNSIGNALLED_LOOK, |t| t.min(UNSIGNALLED_LOOK)));
        }
        self.ready
            .set_timer(timer)
            .map_err(|e| Error::io("setting the endpoint's timer", e))
    }

    /// The descriptor's own number (the epoll set), for `AsRawFd`.
    pub(super) fn ready_fd(&self) -> std::os::fd::RawFd {
        self.ready.as_raw_fd()
    }
}
