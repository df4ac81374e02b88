//! The poll loop of the datagram engine: receive what arrived, hand it to its connections
//! and endpoints, flush their answers and acks, and only then the housekeeping (timers,
//! Resets on sending sockets, retired connections); and turning the protocol's events
//! into what the endpoint sees of a connection.
//!
//! Layer: the datagram transport. It ties the receive and send paths together; it does
//! not parse datagrams itself.

use quiver_proto::handshake::RejectReason;
use quiver_proto::reliable::{Event, FailReason, Nanos, State};
use quiver_transport::udp::{monotonic_ns, MAX_COALESCED_BYTES};

use super::connect::{CROSSED, RETRY};
use super::connection::{lent_of, Lender, Status};
use super::engine::{DgramShared, Engine};
use super::receive::{Reader, RECV_BUDGET_BYTES};
use super::rma::adopt_requests;
use super::udp_io::Socket;
use crate::transport::local::LocalRank;
use crate::transport::registry::NetInbound;
use crate::transport::rma_ops::RMA_PORT;

/// A connection's ack waits for the next poll (for the application's answer to carry it)
/// only while it owes the peer at most this many frames.
const DEFER_ACK_MAX_FRAMES: u32 = 4;

impl DgramShared {
    /// Receives what arrived, runs due timers (a poll that handed a message to the
    /// application may leave them to the next: see `Engine::poll_into`), sends what the
    /// protocol produced, and hands newly accepted connections to their endpoints. Returns
    /// the engine's news count:
    /// while it stays the same, no connection received anything or changed its state.
    pub(crate) fn poll_io(&self, ctx: &LocalRank) -> u64 {
        let mut engine = self.lock();
        engine.poll(Some(ctx), self);
        engine.news
    }

    /// [`DgramShared::poll_io`] for a blocking receive about to look for a message: it
    /// takes about one datagram of bulk data (from the sockets together), so that a large message
    /// goes into the receive window only as far as it must (its length, to start reading
    /// it); the rest arrives while the receive reads it, straight into its buffer (see
    /// [`DgramShared::take`]).
    pub(crate) fn poll_io_before_receive(&self, ctx: &LocalRank) -> u64 {
        let mut engine = self.lock();
        engine.poll_into(Some(ctx), self, &mut None, MAX_COALESCED_BYTES, None);
        engine.news
    }
}

impl Engine {
    pub(super) fn poll(&mut self, ctx: Option<&LocalRank>, shared: &DgramShared) {
        self.poll_into(ctx, shared, &mut None, RECV_BUDGET_BYTES, None);
    }

    /// [`Engine::poll`], with a receive in the middle of a message that takes the datagrams
    /// continuing it straight into its buffer, receiving about `budget` bytes at most from
    /// the udp sockets together.
    ///
    /// The order is the latency path's (see the module docs of `transport::dgram`):
    /// receive, hand what arrived to its connections and endpoints, and only then the
    /// housekeeping (timers, retired connections). When everything that arrived is a
    /// message waiting for the application, whose answer should leave next, the
    /// housekeeping waits for the next poll (which runs it whatever it receives, so it is
    /// never put off twice in a row).
    ///
    /// `lender`: a connection sending a message in place, and that message
    /// ([`DgramShared::send_in_place`]): its flushes send lent bytes too.
    pub(super) fn poll_into(
        &mut self,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        reader: &mut Option<Reader<'_>>,
        budget: usize,
        lender: Lender<'_>,
    ) {
        self.takes_since_poll = 0;
        // The clock, read once per poll and only when something needs it (a datagram
        // arrived, something is sent, a timer may be due): a poll that finds nothing reads
        // the coarse clock at most (`Engine::housekeeping`).
        let mut clock = None;
        self.flush_deferred(&mut clock, lender);
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        // With several links, receive only on the sockets with something to take (one
        // epoll_wait instead of a recvmmsg on each; a striped sender's acks come on few).
        let ready = match &shared.readiness {
            Some(set) => set.ready_now().unwrap_or(u64::MAX),
            None => u64::MAX,
        };
        // The budget is for all sockets together (a striped receive in the middle of a
        // message asks for what the message still needs: taken from every socket, most of
        // it would be the next message's, through the receive window), and the socket
        // after the last one served goes first, so that every link gets its turn.
        let count = self.sockets.len();
        let first = if count > 1 {
            self.next_socket % count
        } else {
            0
        };
        let mut left = budget;
        for k in 0..count {
            let path = if first + k < count {
                first + k
            } else {
                first + k - count
            };
            let idle = path < 64 && ready & (1 << path) == 0;
            if idle && matches!(self.sockets[path], Socket::Udp(_)) {
                continue;
            }
            if left == 0 {
                break;
            }
            let taken = self.receive(path, &mut clock, ctx, shared, &mut touched, reader, left);
            left = left.saturating_sub(taken);
            self.next_socket = path + 1;
        }
        // Held-back datagrams (reordered by the fault injectors) wait no longer than this.
        if self.faults_on {
            self.release_held_faults(self.now_once(&mut clock), ctx, shared, &mut touched, reader);
        }
        let mut all_waiting = true;
        if !touched.is_empty() {
            self.news += 1;
            if touched.len() > 1 {
                touched.sort_unstable();
                touched.dedup();
            }
            for &id in &touched {
                // Hold the ack back for the application's answer only when a whole message
                // is there for it to take (a partial one needs more frames first, so no
                // answer comes), and only for a small exchange: a stream of frames needs its
                // acks now (the sender's windows wait for them).
                // (`message_ready` is false when no message has begun.)
                let waiting = self.router.get(id).is_some_and(|e| {
                    e.core.message_ready() && e.core.unacknowledged_frames() <= DEFER_ACK_MAX_FRAMES
                });
                if waiting {
                    self.defer(id);
                } else {
                    all_waiting = false;
                    // A fresh clock, not the poll's: the datagrams it stamps leave after the
                    // whole batch was dispatched (their round-trip samples and the acks'
                    // delays must not count that time).
                    self.flush_lent(id, lent_of(lender, id));
                }
                self.settle(id, ctx, shared);
            }
            if !self.sleepers.is_empty() {
                self.wake_sleepers(&touched);
            }
            // Their timers moved.
            self.timers_dirty = true;
        }
        self.touched = touched;
        if !self.touched.is_empty() && all_waiting && !self.housekeeping_owed {
            self.housekeeping_owed = true;
            return;
        }
        self.housekeeping_owed = false;
        self.housekeeping(&mut clock, ctx, shared, lender);
    }

    /// Flushes the connections whose acks were held back for the application's answer: it
    /// has answered (and its message carried them) or not; whatever is left goes now, at
    /// the poll's clock. A connection with nothing to send and no ack owed or held (the
    /// answer carried it: the common case) is not flushed at all
    /// (`ReliableConnection::transmit_pending`). Popped, not taken: the list keeps its
    /// allocation.
    fn flush_deferred(&mut self, clock: &mut Option<Nanos>, lender: Lender<'_>) {
        while let Some(id) = self.deferred.pop() {
            let now = self.now_once(clock);
            let idle = self
                .router
                .get(id)
                .is_some_and(|e| e.posted.is_empty() && !e.core.transmit_pending(now));
            if !idle {
                self.flush_lent_at(id, lent_of(lender, id), now);
            }
        }
    }

    /// The part of a poll off the latency path: runs the protocol timers that are due (or
    /// may have moved; not the ack a connection this poll deferred holds for the answer),
    /// sends what they produced, and forgets the connections given up and done. A poll
    /// that finds nothing to do reads no connection, and reads the precise clock (`clock`,
    /// the poll's: read here if it was not yet) only when the coarse one says the next timer
    /// may be due ([`Engine::may_be_due`]).
    fn housekeeping(
        &mut self,
        clock: &mut Option<Nanos>,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        lender: Lender<'_>,
    ) {
        let scan = self.timers_dirty
            || self
                .next_timer
                .is_some_and(|t| self.may_be_due(t, *clock) && t <= self.now_once(clock));
        if !scan {
            return;
        }
        let now = self.now_once(clock);
        self.timers_dirty = false;
        let mut expired = std::mem::take(&mut self.touched);
        expired.clear();
        let mut timed_out = std::mem::take(&mut self.timed_out);
        let deferred = &self.deferred;
        for (&id, entry) in self.router.iter_mut() {
            // A connection this poll deferred is flushed at the start of the next one, once
            // the application had its chance to answer: an ack it holds for that answer is
            // processed then (or by the answer's own flush), not here by a timer ahead of
            // the answer; only its other timers count now.
            let timeout = if deferred.contains(&id) {
                entry.core.poll_timeout_holding_ack()
            } else {
                entry.core.poll_timeout()
            };
            if let Some(t) = timeout {
                if t <= now {
                    let before = entry.core.stats().rto_expirations;
                    entry.core.handle_timeout(now);
                    expired.push(id);
                    let stats = entry.core.stats();
                    if stats.rto_expirations != before {
                        tracing::debug!(peer = %entry.peer, to = %entry.to, retransmits = stats.retransmits, timeouts = stats.rto_expirations, "retransmission timeout: resending what is unacknowledged");
                        timed_out.push(id);
                    }
                }
            }
        }
        // A peer that forgot a connection answers its datagrams with a Reset, to the port
        // they came from: the connection's sending sockets.
        for id in timed_out.drain(..) {
            self.drain_senders(id, now, ctx, shared, &mut expired);
        }
        self.timed_out = timed_out;
        if !expired.is_empty() {
            self.news += 1;
            expired.sort_unstable();
            expired.dedup();
        }
        for &id in &expired {
            self.flush_lent(id, lent_of(lender, id));
            self.settle(id, ctx, shared);
        }
        if !self.sleepers.is_empty() {
            self.wake_sleepers(&expired);
        }
        self.touched = expired;
        self.next_timer = self.earliest_timer();
        let retired = &mut self.retired;
        self.router.retain(|_, e| {
            let keep = !(e.abandoned && matches!(e.core.state(), State::Closed | State::Failed));
            if !keep {
                retired.add(e.core.stats());
            }
            keep
        });
    }

    /// What arrived on connection `id`, when this side closed it, is dropped
    /// ([`drop_arrivals`]); the freed window lets the peer's data, then its Close, come.
    fn drop_abandoned_arrivals(&mut self, id: u64) {
        let Some(entry) = self.router.get_mut(id) else {
            return;
        };
        if entry.abandoned && drop_arrivals(&mut entry.core) {
            self.timers_dirty = true;
            self.defer(id);
        }
    }

    /// Turns the protocol's events of connection `id` into its status (what arrives on a
    /// connection this side closed is dropped: [`drop_arrivals`]).
    fn settle(&mut self, id: u64, ctx: Option<&LocalRank>, shared: &DgramShared) {
        self.drop_abandoned_arrivals(id);
        let Some(entry) = self.router.get_mut(id) else {
            return;
        };
        while let Some(event) = entry.core.poll_event() {
            match event {
                Event::Established => {
                    entry.status = Status::Open;
                    let requests = entry.local_port == RMA_PORT && entry.inbound;
                    if let Some(c) = ctx.filter(|_| requests && !entry.abandoned) {
                        adopt_requests(c, id, entry.peer.rank);
                    } else if entry.inbound && !entry.abandoned {
                        match ctx.and_then(|c| c.registry.inbox(entry.local_port)) {
                            Some(ep) => {
                                if let Some(c) = ctx {
                                    c.registry.accepted();
                                }
                                ep.deliver_inbound(NetInbound::Dgram {
                                    peer: entry.peer,
                                    kind: shared.kind,
                                    id,
                                });
                            }
                            None => {
                                // The endpoint closed meanwhile.
                                entry.abandoned = true;
                                entry
                                    .core
                                    .close(monotonic_ns().saturating_sub(self.start_ns));
                            }
                        }
                    }
                }
                Event::PeerUnreachable => {
                    tracing::warn!(peer = %entry.peer, to = %entry.to, idle_ms = self.base.idle_timeout_ns / 1_000_000, "peer unreachable: no answer for the idle timeout");
                    let retry = if entry.status == Status::Connecting {
                        RETRY
                    } else {
                        ""
                    };
                    entry.status = Status::Failed(format!(
                        "{retry}no answer for {} ms (the peer died, froze, or the network is down)",
                        self.base.idle_timeout_ns / 1_000_000
                    ));
                }
                Event::Closed if !matches!(entry.status, Status::Failed(_)) => {
                    entry.status = Status::Closed;
                }
                Event::Failed(reason) => {
                    entry.status = Status::Failed(match reason {
                        FailReason::Rejected(RejectReason::NoSuchEndpoint) => {
                            format!("{RETRY}the endpoint is not open")
                        }
                        FailReason::Rejected(RejectReason::Busy) => CROSSED.into(),
                        FailReason::Handshake(e) => {
                            let why = crate::error::describe_handshake_error(e);
                            if entry.inbound {
                                if let Some(c) = ctx {
                                    c.registry.refused(format!(
                                        "{} from rank {}: {why}",
                                        shared.kind, entry.peer.rank
                                    ));
                                }
                                entry.abandoned = true;
                            }
                            why
                        }
                        FailReason::HandshakeTimeout => {
                            if entry.inbound {
                                // A stranger that could not prove the key goes quiet.
                                if let Some(c) = ctx {
                                    c.registry.refused(format!(
                                        "{} from {}: the handshake was not completed",
                                        shared.kind, entry.to
                                    ));
                                }
                                entry.abandoned = true;
                            }
                            format!("{RETRY}no answer to the handshake")
                        }
                        FailReason::PeerReset => {
                            "the peer reset the connection (it closed it, restarted, or forgot it)"
                                .into()
                        }
                        FailReason::PeerUnreachable => "the peer stopped answering".into(),
                        FailReason::ProtocolViolation => {
                            "the peer broke the protocol; the connection was closed".into()
                        }
                        #[allow(unreachable_patterns)]
                        other => format!("{other:?}"),
                    });
                }
                _ => {}
            }
        }
    }
}

/// Drops what arrived on a connection this side closed (its endpoint closed it or went
/// away, decision 0089): nobody will read it, and a peer still sending would otherwise
/// fill the window and never get its own Close through. Whether anything was dropped.
fn drop_arrivals(core: &mut quiver_proto::reliable::ReliableConnection) -> bool {
    let mut scratch = [0u8; 4096];
    let mut dropped = false;
    while core.peek_message_len().is_some() {
        let (read, complete) = core.read_message(&mut scratch);
        if read == 0 && !complete {
            // The rest of the message has not arrived yet.
            break;
        }
        dropped = true;
    }
    dropped
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use crate::endpoint::tests::two_rank_contexts;
    use crate::{Addr, Config, Connection, Context, Endpoint, TransportKind};

    /// Two ranks of a job over the mem transport at the test's own addresses (`octet` tells
    /// them from other tests'), their endpoints 0 connected to each other: (contexts,
    /// endpoints, rank 0's connection, rank 1's).
    fn connected_pair(octet: u8) -> ([Context; 2], [Endpoint; 2], Connection, Connection) {
        let addrs: Vec<SocketAddr> = (0..2u8)
            .map(|rank| (Ipv4Addr::new(127, 84, octet, rank + 1), 41_029).into())
            .collect();
        let config = Config {
            transports: vec![TransportKind::Mem],
            ..Config::default()
        };
        let (rank0, rank1) = two_rank_contexts(&addrs, &config, u64::from(octet));
        let contexts = [rank0, rank1];
        // No retransmission or keepalive timer comes due during a test, however slow the
        // machine: the only timer is the one a test looks at.
        for context in &contexts {
            let shared = context.local().dgram.clone().unwrap();
            let base = &mut shared.lock().base;
            base.min_rto_ns = 30_000_000_000;
            base.initial_rto_ns = base.min_rto_ns;
            base.max_rto_ns = base.max_rto_ns.max(base.min_rto_ns);
            base.keepalive_interval_ns = 30_000_000_000;
            base.idle_timeout_ns = base.idle_timeout_ns.max(60_000_000_000);
        }
        let mut endpoints = [
            contexts[0].endpoint(0).unwrap(),
            contexts[1].endpoint(0).unwrap(),
        ];
        for endpoint in &mut endpoints {
            endpoint.set_timeout(Some(Duration::from_secs(10)));
        }
        let [e0, e1] = &mut endpoints;
        let (c01, c10) = std::thread::scope(|s| {
            let peer = s.spawn(|| e1.connect(Addr::new(0, 0)).unwrap());
            let c01 = e0.connect(Addr::new(1, 0)).unwrap();
            (c01, peer.join().unwrap())
        });
        (contexts, endpoints, c01, c10)
    }

    /// One round trip driven from this thread: rank 0 asks, rank 1 answers.
    fn round_trip(endpoints: &mut [Endpoint; 2], c01: Connection, c10: Connection) {
        let mut buffer = [0u8; 8];
        let [e0, e1] = endpoints;
        e0.send(c01, b"request!").unwrap();
        assert_eq!(e1.recv(&mut buffer).unwrap().0, 8);
        e1.send(c10, b"answer!!").unwrap();
        assert_eq!(e0.recv(&mut buffer).unwrap().0, 8);
    }

    /// The connection whose ack waited for the application's answer is flushed by the next
    /// poll only when it has something to do: after an answer that carried the ack (a
    /// ping-pong's every round trip) that poll flushes nothing.
    #[test]
    fn a_poll_after_an_answer_that_carried_its_ack_flushes_nothing() {
        let (contexts, mut endpoints, c01, c10) = connected_pair(1);
        for _ in 0..3 {
            round_trip(&mut endpoints, c01, c10);
        }
        let local = contexts[1].local();
        let shared = local.dgram.clone().unwrap();
        let flushes = {
            let engine = shared.lock();
            assert_eq!(
                engine.deferred.len(),
                1,
                "the receive deferred its connection"
            );
            engine.flushes
        };
        shared.poll_io(local);
        let engine = shared.lock();
        assert!(engine.deferred.is_empty());
        assert_eq!(
            engine.flushes, flushes,
            "the poll flushed a connection with nothing to send"
        );
    }

    /// A poll that receives a request (its ack held for the answer) and runs the
    /// housekeeping it owed leaves that ack to the answer's flush: no timer processes it
    /// ahead of the answer.
    #[test]
    fn housekeeping_leaves_a_held_ack_to_the_answer() {
        let (contexts, mut endpoints, c01, c10) = connected_pair(2);
        for _ in 0..3 {
            round_trip(&mut endpoints, c01, c10);
        }
        let local = contexts[1].local();
        let shared = local.dgram.clone().unwrap();
        // The request carries rank 0's ack of the last answer.
        endpoints[0].send(c01, b"request!").unwrap();
        shared.lock().housekeeping_owed = true;
        shared.poll_io(local);
        {
            let engine = shared.lock();
            assert!(!engine.housekeeping_owed, "the poll ran its housekeeping");
            let (&id, entry) = engine.router.connections().iter().next().unwrap();
            assert_eq!(engine.deferred, [id]);
            assert!(
                !entry.core.all_acked(),
                "the ack of the last answer was processed before the next answer"
            );
            assert!(entry.core.poll_timeout() < entry.core.poll_timeout_holding_ack());
        }
        let mut buffer = [0u8; 8];
        assert_eq!(endpoints[1].recv(&mut buffer).unwrap().0, 8);
        endpoints[1].send(c10, b"answer!!").unwrap();
        let engine = shared.lock();
        let entry = engine.router.connections().values().next().unwrap();
        assert_eq!(
            entry.core.poll_timeout(),
            entry.core.poll_timeout_holding_ack(),
            "the answer's flush processed the ack"
        );
    }
}
