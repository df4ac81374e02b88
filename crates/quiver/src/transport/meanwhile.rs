//! What an edge asks of its endpoint while a blocking send on it waits (a network edge, or
//! a shm edge whose rendezvous waits for its pull while receives are posted)
//! ([`Meanwhile`]): the peer may be blocked sending to us, so the endpoint keeps receiving
//! (posted receives advance, tcp streams are read ahead within `max_buffered_bytes`, the
//! datagram engine brings acknowledgements and credit). The edge is out of the endpoint's
//! list while its send runs, so the endpoint can lend itself whole.

use std::time::{Duration, Instant};

use crate::addr::Addr;
use crate::error::Result;
use crate::transport::edge_context::EdgeContext;

/// The endpoint as a waiting network edge sees it (module docs).
pub(crate) trait Meanwhile {
    /// The endpoint's state the edge's driver uses (settings, requests, looks).
    fn context(&mut self) -> EdgeContext<'_>;

    /// Polls the datagram engine, if one runs (acknowledgements and credit arrive through
    /// it), and remembers that it was polled.
    fn poll_engine(&mut self);

    /// The caller polled the datagram engine itself: the next [`Meanwhile::receive`] need
    /// not poll it again.
    fn engine_polled(&mut self);

    /// Everything the endpoint does while an edge waits to send: the other edges' queued
    /// sends, posted receives, reading ahead what tcp peers sent (and the datagram engine,
    /// unless it was just polled).
    ///
    /// # Errors
    /// None today beyond those recorded in the requests themselves.
    fn receive(&mut self) -> Result<()>;

    /// What a waiting shm send asks at each look: publish the ring space consumed, take
    /// ahead what shm senders asleep sending to this endpoint wrote (their rendezvous
    /// messages `peer`'s always, others' with `waited_long`), and whether `peer` stays
    /// asleep sending to this endpoint beyond the read-ahead bound
    /// ([`InEdge::read_ahead`](crate::transport::edge::InEdge::read_ahead)).
    fn shm_look(&mut self, peer: Addr, waited_long: bool) -> bool;

    /// Adds the descriptors of inbound edges a sleeping sender should wake up for (tcp
    /// streams with something to read ahead).
    fn wake_fds(&self, fds: &mut Vec<libc::pollfd>);

    /// Whether the endpoint's read-ahead from `peer` is full: `peer`'s next message to
    /// this endpoint is beyond the read-ahead bound (tcp: `read_ahead_bytes`; udp: its
    /// receive window), so that `peer` cannot finish sending it until this endpoint
    /// receives.
    fn read_ahead_full(&mut self, peer: Addr) -> bool;
}

/// Watches a blocking network send for the send-send deadlock ([`DeadlockWatch::stuck`]).
#[derive(Debug, Default)]
pub(crate) struct DeadlockWatch {
    /// Since when the read-ahead from the peer has been full at every look with the send's
    /// progress mark unchanged, and that mark.
    since: Option<(Instant, u64)>,
}

impl DeadlockWatch {
    /// One look while the send waits: `full` ([`Meanwhile::read_ahead_full`] of the send's
    /// peer) and `mark`, a number that changes whenever the send progresses (bytes handed
    /// over or acknowledged). True once both stood still for half the detection time on the
    /// endpoint of the lower address of the two (`(me, peer)`), for the whole of it on the
    /// other: the peer is blocked sending to this endpoint beyond the bound and takes
    /// nothing of ours, so neither can finish. The lower side fails first and receives, so
    /// the other's send then progresses (both failing would deliver neither message).
    /// Reads the clock only while `full`; off without detection.
    pub(crate) fn stuck(
        &mut self,
        full: bool,
        mark: u64,
        detect: Option<Duration>,
        (me, peer): (Addr, Addr),
    ) -> bool {
        let Some(detect) = detect.filter(|_| full) else {
            self.since = None;
            return false;
        };
        let patience = if me < peer { detect / 2 } else { detect };
        let now = Instant::now();
        match self.since {
            Some((at, seen)) if seen == mark => now.duration_since(at) >= patience,
            _ => {
                self.since = Some((now, mark));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stuck only while the read-ahead stays full and the send's mark stands still, for
    /// half the detection time on the lower address and the whole of it on the other;
    /// never without detection.
    #[test]
    fn a_send_is_stuck_only_without_progress_while_the_read_ahead_is_full() {
        let detect = Some(Duration::from_millis(40));
        let (low, high) = (Addr::new(0, 0), Addr::new(1, 0));
        let mut watch = DeadlockWatch::default();
        assert!(!watch.stuck(true, 7, detect, (low, high)));
        std::thread::sleep(Duration::from_millis(25));
        assert!(watch.stuck(true, 7, detect, (low, high)));
        // Progress (a new mark) or a read-ahead with room starts over.
        assert!(!watch.stuck(true, 8, detect, (low, high)));
        assert!(!watch.stuck(false, 8, detect, (low, high)));
        assert!(!watch.stuck(true, 8, detect, (low, high)));
        std::thread::sleep(Duration::from_millis(25));
        assert!(watch.stuck(true, 8, detect, (low, high)));
        // The higher address waits the whole detection time.
        let mut other = DeadlockWatch::default();
        let started = Instant::now();
        assert!(!other.stuck(true, 1, detect, (high, low)));
        std::thread::sleep(Duration::from_millis(25));
        let stuck = other.stuck(true, 1, detect, (high, low));
        if started.elapsed() < Duration::from_millis(40) {
            assert!(
                !stuck,
                "the higher address waited only half the detection time"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(other.stuck(true, 1, detect, (high, low)));
        let mut off = DeadlockWatch::default();
        assert!(!off.stuck(true, 1, None, (low, high)));
        std::thread::sleep(Duration::from_millis(25));
        assert!(!off.stuck(true, 1, None, (low, high)));
    }
}
