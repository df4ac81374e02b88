//! Sending: blocking, non-blocking and posted sends over any edge, and the progress that
//! advances every posted operation. A blocking send over a network edge lets the endpoint
//! receive meanwhile ([`Meanwhile`]): its edge leaves the list for the send's duration.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Connection, Endpoint, SendRequest};
use crate::addr::Addr;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::transport::edge::{InEdge, OutEdge, Started};
use crate::transport::edge_context::EdgeContext;
use crate::transport::meanwhile::Meanwhile;
use crate::transport::registry::Inbox;
use crate::transport::requests::SendState;
use crate::transport::wait::Wait;

/// Active messages one `progress` takes in at most.
const AM_BURST: u64 = 64;

/// How `progress` takes active messages in now ([`Endpoint::intake`]).
enum Intake {
    /// Nothing to take.
    Idle,
    /// Straight from the shm rings ([`Endpoint::take_in_from_rings`]).
    Rings,
    /// Through the general look (`Endpoint::pull`).
    General,
}

impl Endpoint {
    /// Sends `data` as one message, blocking until it is in the ring (short/eager) or the
    /// receiver has pulled it (rendezvous). Earlier posted sends on `conn` go first.
    /// Over a network connection it blocks until the transport took the message, and
    /// receives meanwhile: posted receives advance, and tcp edges are read ahead into
    /// internal buffers (at most `max_buffered_bytes`), so two ranks sending each other
    /// large messages do not wait on each other within that bound.
    ///
    /// Over shm it takes ahead what peers asleep in a blocking send to this endpoint wrote
    /// (at most `read_ahead_bytes` per connection; a large message of another peer than
    /// `conn`'s only once the send has waited 10 ms, the receive that comes next usually
    /// takes it without the copy), and while it waits for the receiver to pull a large
    /// message, posted receives take what arrives. When the peer is itself blocked
    /// sending to this endpoint a message beyond the read-ahead bound, neither can finish,
    /// and the send returns [`Error::SendDeadlock`] within the detection time instead of
    /// waiting forever (docs/failures.md).
    ///
    /// # Errors
    /// A peer error of this connection ([`Error::PeerDead`], [`Error::PeerClosed`],
    /// [`Error::Corrupt`]), [`Error::SendDeadlock`], or [`Error::Timeout`] when
    /// `op_timeout` is set.
    pub fn send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        self.refuse_in_handler("send")?;
        let idx = self.outbound_index(conn)?;
        if let Some(sent) = self.outbound[idx].send_short(data, &self.config, &mut self.requests) {
            return sent;
        }
        let receives_posted =
            !self.requests.posted_recvs.is_empty() || self.matcher.posted_len() > 0;
        let super::Parts {
            outbound,
            inbound,
            mut cx,
            ..
        } = self.parts();
        let (inbox, config, local) = (cx.inbox, cx.config, cx.local);
        let mut engine_at = None;
        // What the shm send does while it waits (at its periodic looks, and after each
        // sleep): the rank's meanwhile (the engine at most every millisecond), then what
        // lets a peer blocked on us go on.
        let mut flush = |peer, waited_long| {
            local.meanwhile(!local.engine_due(&mut engine_at));
            look_at_shm_senders(inbox, inbound, config, peer, waited_long)
        };
        let written = match outbound[idx].start_send(data, &mut cx, &mut flush, receives_posted) {
            Started::Finished(result) => return result,
            Started::Partly { written } => written,
        };
        let mut edge = std::mem::replace(&mut self.outbound[idx], OutEdge::Busy);
        let result = edge.finish_send(data, written, self);
        self.outbound[idx] = edge;
        result
    }

    /// Sends `data` only if that needs no waiting. Over shm, short and eager messages must
    /// fit in the ring now; larger ones are copied into an internal buffer and sent by
    /// rendezvous (bounded by `max_buffered_bytes`). Over a network connection the message
    /// is taken whole or not at all.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when it would have to wait (the message was not sent), or a
    /// peer error of the connection.
    pub fn try_send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        let idx = self.outbound_index(conn)?;
        let super::Parts {
            outbound, mut cx, ..
        } = self.parts();
        outbound[idx].try_send(data, &mut cx)
    }

    /// Starts sending `data` without waiting; the endpoint owns the buffer until the send
    /// completes (large messages are sent from it directly, with no copy).
    ///
    /// # Errors
    /// A peer error if the connection already failed.
    pub fn post_send(&mut self, conn: Connection, data: Vec<u8>) -> Result<SendRequest> {
        let idx = self.outbound_index(conn)?;
        let key = self.with_outbound(idx, |out, cx| out.post_send(data, cx))?;
        Ok(SendRequest { key })
    }

    /// Whether a posted send has completed (advancing progress first).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a request of another endpoint.
    pub fn test_send(&mut self, req: &SendRequest) -> Result<bool> {
        self.refuse_in_handler("test_send")?;
        self.progress()?;
        match self.requests.sends.get_mut(req.key) {
            Some(SendState::Pending) => Ok(false),
            Some(SendState::Done(_)) => Ok(true),
            None => Err(Error::InvalidArgument("unknown send request".into())),
        }
    }

    /// Waits for a posted send to complete and hands its buffer back.
    ///
    /// # Errors
    /// The connection's error if it failed before the message was delivered.
    pub fn wait_send(&mut self, req: SendRequest) -> Result<Vec<u8>> {
        self.wait_send_ready(&req)?;
        match self.requests.sends.remove(req.key) {
            Some(SendState::Done(r)) => r,
            _ => unreachable!("wait_send_ready returned Ok: the send is done"),
        }
    }

    /// Waits until posted send `req` has completed, without ending it: afterwards
    /// [`Endpoint::test_send`] is true and [`Endpoint::wait_send`] returns at once with its
    /// outcome. A failed wait ([`Error::Timeout`], an error of progress) leaves the send
    /// posted, so a caller that holds requests by number (the C and Python bindings) can
    /// wait again.
    ///
    /// # Errors
    /// [`Error::Timeout`], an error of progress, [`Error::InvalidArgument`] for a request
    /// of another endpoint; not the send's own outcome (`wait_send` gives that).
    pub fn wait_send_ready(&mut self, req: &SendRequest) -> Result<()> {
        self.refuse_in_handler("wait_send")?;
        let mut wait = Wait::new(&self.config);
        loop {
            match self.requests.sends.get_mut(req.key) {
                Some(SendState::Done(_)) => return Ok(()),
                Some(SendState::Pending) => {}
                None => return Err(Error::InvalidArgument("unknown send request".into())),
            }
            self.progress()?;
            if let Some(SendState::Pending) = self.requests.sends.get_mut(req.key) {
                // The peer may be blocked sending to us: take what it sent, within bounds.
                self.read_ahead();
                self.idle(&mut wait, "waiting for a posted send")?;
            }
        }
    }

    /// Advances every posted operation once, without waiting, and runs the handlers of the
    /// active messages that arrived (once a handler is registered, it takes in what the
    /// connections have: an active message runs its handler, a plain message waits for a
    /// receive, which takes it as it would have).
    ///
    /// # Errors
    /// A handler's error, [`Error::UnknownHandler`], a peer error of one inbound connection
    /// while handlers are registered, or [`Error::InHandler`] inside a handler; otherwise
    /// none beyond those recorded in the requests themselves.
    pub fn progress(&mut self) -> Result<()> {
        self.refuse_in_handler("progress")?;
        self.advance();
        if self.has_handlers() {
            self.take_in_for_handlers()?;
        }
        Ok(())
    }

    /// Takes in the active messages the connections have, at most a burst, stopping at the
    /// first plain message (left for a receive, in the matcher) or when nothing came.
    ///
    /// The burst adapts to the traffic, as UCX's shared-memory transport adapts its poll
    /// count: a call that took a whole burst returns without asking the edges for more,
    /// so that in a ping-pong no look at a ring's next record (a line the peer writes: a
    /// miss between the CPUs) delays the caller's answer. The burst doubles when the
    /// next call finds messages at once (they were queueing), and halves when the edges
    /// ran out before it was reached.
    fn take_in_for_handlers(&mut self) -> Result<()> {
        let queued = std::mem::take(&mut self.am.burst_reached);
        let rings_only = match self.intake() {
            // Nothing to take: a busy-polling `progress` loop spins here, on each ring's
            // next record, not through a whole look.
            Intake::Idle => return Ok(()),
            Intake::Rings => true,
            Intake::General => false,
        };
        if queued {
            self.am.burst = (self.am.burst * 2).min(AM_BURST);
        }
        let start = self.am.taken;
        loop {
            let before = self.am.taken;
            let took_plain = if rings_only {
                self.take_in_from_rings()?
            } else {
                self.pull(false)?
            };
            if took_plain || self.am.taken == before {
                return Ok(());
            }
            if self.am.taken - start >= self.am.burst {
                self.am.burst_reached = true;
                return Ok(());
            }
            // Asked of each edge, which costs a fraction of a look that finds nothing.
            if !self.inbound_pending() {
                self.am.burst = (self.am.burst / 2).max(1);
                return Ok(());
            }
        }
    }

    /// How the handlers' intake looks now, in one pass over the edges: `Idle` when every
    /// inbound edge is a shm ring with nothing in it and no new connection waits to be
    /// adopted (a look would find nothing; the network edges' looks read their sockets or
    /// the engine, so they are never skipped); `Rings` when a ring has a record and the
    /// intake from the rings applies ([`Endpoint::take_in_from_rings`]); else `General`.
    #[inline]
    fn intake(&mut self) -> Intake {
        if self.inbox.has_incoming.load(Ordering::Relaxed) || self.committed.is_some() {
            return Intake::General;
        }
        let mut pending = false;
        for edge in self.inbound.iter_mut() {
            if edge.is_network() {
                return Intake::General;
            }
            pending = pending || edge.has_pending(&self.local);
        }
        if !pending {
            Intake::Idle
        } else if self.am.placing == 0 && self.requests.posted_recvs.is_empty() {
            Intake::Rings
        } else {
            Intake::General
        }
    }

    /// Whether any inbound edge has something a look would find now.
    fn inbound_pending(&mut self) -> bool {
        let local = &self.local;
        self.inbound.iter_mut().any(|edge| edge.has_pending(local))
    }

    /// [`Endpoint::progress`] without running handlers: what the endpoint's own waiting
    /// loops call (a receive in progress takes active messages in itself).
    pub(super) fn advance(&mut self) {
        // The rank's meanwhile (the one hook of every wait): the engine's acknowledgements,
        // retransmissions and keepalives run whenever the API is used (once per round of a
        // polling loop: a receive that just polled is enough), and the one-sided requests
        // peers sent this rank are served. Then this endpoint's own posted ones.
        let polled = std::mem::take(&mut self.dgram.engine_polled);
        self.local.meanwhile(polled);
        self.progress_rma();
        if self.requests.pending_sends > 0 {
            for idx in 0..self.outbound.len() {
                // Failures are recorded in the requests of that connection.
                let _ = self.with_outbound(idx, |out, cx| out.progress(cx));
            }
        }
        if self.requests.bound_recvs > 0 {
            self.progress_bound_recvs();
        }
        if self.dgram.holds_recvs() {
            // Another edge (or a connection not adopted yet) may deliver now: the engine
            // hands back the receives whose message has not begun.
            let lone = self.lone_dgram();
            self.dgram
                .progress_recvs(lone, &mut self.requests, &self.local);
            self.am.stats.unknown_handler += self.dgram.take_unknown_handler();
        }
        if !self.requests.posted_recvs.is_empty() {
            self.progress_recvs();
        }
        if self.matcher.posted_len() > 0 {
            self.progress_matched();
        }
        if self.replies_pending() {
            self.reap_replies();
        }
    }

    /// Runs `f` on outbound edge `idx` with the endpoint's state beside it.
    fn with_outbound<T>(
        &mut self,
        idx: usize,
        f: impl FnOnce(&mut OutEdge, &mut EdgeContext<'_>) -> T,
    ) -> T {
        let super::Parts {
            outbound, mut cx, ..
        } = self.parts();
        f(&mut outbound[idx], &mut cx)
    }

    /// While this endpoint waits for a send, takes what its tcp peers sent into internal
    /// buffers: whole messages, and large ones as they arrive, at most
    /// `max_buffered_bytes` held over all edges. A peer blocked sending to us can then go
    /// on (and take what we are sending it). Order is kept; receives take them later (a
    /// copy). Edges where the bound stopped it are marked `stalled`.
    pub(super) fn read_ahead(&mut self) {
        if self
            .inbox
            .has_incoming
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.adopt_new_inbound();
        }
        let max_held = self.config.max_buffered_bytes as u64;
        let per_edge = self.config.read_ahead_bytes as u64;
        let mut held_total: u64 = self
            .inbound
            .iter()
            .filter_map(InEdge::as_tcp)
            .map(|t| t.held().0)
            .sum();
        // One `poll` says which streams have something: a failed read takes the socket's
        // lock, and this runs on every round of a send's wait, often on the very stream the
        // send is pushing (one stream carries both directions), whose incoming
        // acknowledgements would then wait behind the lock (measured: 1 MiB bandwidth fell
        // to 0.5-0.8 of one stream per direction).
        self.pollfds.clear();
        for tcp in self.inbound.iter().filter_map(InEdge::as_tcp) {
            if let Some(fd) = tcp.open_fd() {
                self.pollfds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        if self.pollfds.is_empty() {
            return;
        }
        if quiver_transport::sys::poll(&mut self.pollfds, Some(Duration::ZERO)).is_err() {
            // Look at every stream then.
            for fd in &mut self.pollfds {
                fd.revents = libc::POLLIN;
            }
        }
        let mut readiness = self.pollfds.iter();
        let pool = &self.requests.pool;
        for tcp in self.inbound.iter_mut().filter_map(InEdge::as_tcp_mut) {
            if tcp.open_fd().is_none() {
                continue;
            }
            let readable = readiness.next().is_some_and(|fd| fd.revents != 0);
            tcp.read_ahead(readable, &mut held_total, (max_held, per_edge), pool);
        }
    }

    /// Whether a [`Endpoint::post_send`] of `len` bytes on `conn` is sent in place: a
    /// datagram connection (udp, mem) and `len` at least `Config::udp_post_in_place_min`
    /// (`QUIVER_UDP_POST_IN_PLACE_MIN`, not 0). Such a send is never copied; the endpoint
    /// holds the buffer until every byte is acknowledged, so a caller that streams large
    /// messages keeps several distinct buffers posted. False for shm and tcp connections,
    /// for shorter messages, and for a connection of another endpoint.
    pub fn posts_in_place(&self, conn: Connection, len: usize) -> bool {
        if conn.endpoint_id != self.id {
            return false;
        }
        self.outbound
            .get(conn.index as usize)
            .and_then(|out| out.capabilities(&self.config))
            .is_some_and(|c| c.posts_in_place && len >= self.config.udp_post_in_place_min)
    }
}

impl Meanwhile for Endpoint {
    fn context(&mut self) -> EdgeContext<'_> {
        Endpoint::context(self)
    }

    fn poll_engine(&mut self) {
        if let Some(engine) = &self.local.dgram {
            engine.poll_io(&self.local);
            self.dgram.engine_polled = true;
        }
    }

    fn engine_polled(&mut self) {
        self.dgram.engine_polled = true;
    }

    fn receive(&mut self) -> Result<()> {
        self.advance();
        self.read_ahead();
        Ok(())
    }

    fn shm_look(&mut self, peer: Addr, waited_long: bool) -> bool {
        look_at_shm_senders(
            &self.inbox,
            &mut self.inbound,
            &self.config,
            peer,
            waited_long,
        )
    }

    fn read_ahead_full(&mut self, peer: crate::addr::Addr) -> bool {
        let local = &self.local;
        self.inbound
            .iter()
            .any(|inb| inb.read_ahead_full(peer, local))
    }

    fn wake_fds(&self, fds: &mut Vec<libc::pollfd>) {
        self.local.rma.wake_fds(fds);
        let streams = self.inbound.iter().filter_map(InEdge::as_tcp);
        for fd in streams.filter_map(|tcp| tcp.wake_fd()) {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
    }
}

/// What a waiting shm send asks of its endpoint at each look ([`Meanwhile::shm_look`]):
/// edges the listener accepted and no receive adopted yet join the list (they may hold the
/// peer's message too), every ring's consumed space is published, and what senders asleep
/// sending to this endpoint wrote is taken ahead (rendezvous messages `peer`'s always,
/// others' with `waited_long`); whether `peer` stays blocked beyond the read-ahead bound.
fn look_at_shm_senders(
    inbox: &Inbox,
    inbound: &mut Vec<InEdge>,
    config: &Config,
    peer: Addr,
    waited_long: bool,
) -> bool {
    for new in inbox.take_shm() {
        inbound.push(InEdge::from_shm(new));
    }
    let mut blocked = false;
    for inb in inbound.iter_mut() {
        inb.publish_consumed();
        blocked |= inb.read_ahead(peer, config, waited_long);
    }
    blocked
}
