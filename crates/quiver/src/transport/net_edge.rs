//! What tcp and datagram edges share. One network connection (a tcp stream, a reliable
//! datagram connection) carries both directions of an endpoint pair, so that
//! acknowledgements ride on the answers instead of costing a segment or datagram of their
//! own:
//! - `connect` first looks for a connection the peer opened to this endpoint and, if there
//!   is one, sends on it ([`NetIn::carries_out`]);
//! - a connection this endpoint opens gets a *reverse* inbound edge at once
//!   ([`NetIn::reverse`]): it stays silent (no errors, not counted by `inbound_count`)
//!   until the peer sends on it, and counts as an accepted connection from then on;
//! - when both ends connect at the same moment, the end with the lower address refuses the
//!   other's attempt with `Busy` (tcp: the listener, see `tcp::crossing`; datagrams: the
//!   engine), and the refused end uses the connection it accepted.
//!
//! Sends wait in a queue ([`NetOut`]) while the transport cannot take them; a network
//! edge's peer process, when it runs on this node, is watched for a freeze.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::addr::Addr;
use crate::error::Error;
use crate::log::ENDPOINT_LOG;
use crate::slab::Key;
use crate::transport::failure::Failure;
use crate::transport::inbound_state::{InboundState, PeerEnd};
use crate::transport::liveness::{Looks, PeerProcess};
use crate::transport::requests::Requests;
use crate::transport::wire_tag::WireTag;

/// A send waiting for its turn on a network connection (posted, or the rest of a
/// `try_send` the socket did not take at once).
#[derive(Debug)]
pub(crate) struct NetQueued {
    /// The posted request, or None for internal leftovers.
    pub(crate) key: Option<Key>,
    /// The message's tag.
    pub(crate) tag: WireTag,
    pub(crate) data: Vec<u8>,
    /// Bytes taken by the transport so far (tcp: header included).
    pub(crate) written: usize,
    /// Whether the message has been started in the datagram engine.
    pub(crate) started: bool,
    /// A posted send to be sent in place (`Config::udp_post_in_place_min`): handed to the
    /// datagram engine whole when its turn comes.
    pub(crate) in_place: bool,
}

/// The part of an outbound network edge that tcp and datagram edges share.
#[derive(Debug)]
pub(crate) struct NetOut {
    pub(crate) peer: Addr,
    /// The transport's name, for errors and logs.
    pub(crate) transport: &'static str,
    pub(crate) queue: VecDeque<NetQueued>,
    pub(crate) failure: Option<Failure>,
    /// The peer's process, when it runs on this node: watched for a freeze.
    pub(crate) process: Option<PeerProcess>,
}

impl NetOut {
    /// A new edge to `peer` over `transport`, nothing queued.
    pub(crate) fn new(peer: Addr, transport: &'static str, process: Option<PeerProcess>) -> NetOut {
        NetOut {
            peer,
            transport,
            queue: VecDeque::new(),
            failure: None,
            process,
        }
    }

    /// The edge's error if it failed.
    pub(crate) fn check(&self, during: &'static str) -> Result<(), Error> {
        match &self.failure {
            Some(f) => Err(f.to_error(self.peer, during)),
            None => Ok(()),
        }
    }

    /// The front of the queue is sent: completes its request (or releases the internal
    /// copy).
    pub(crate) fn complete_front(&mut self, requests: &mut Requests) {
        if let Some(q) = self.queue.pop_front() {
            requests.pending_sends -= 1;
            match q.key {
                Some(key) => requests.complete_send(key, Ok(q.data)),
                None => {
                    requests.buffered_bytes -= q.data.len();
                    requests.pool.give(q.data);
                }
            }
        }
    }

    /// Queues the rest of a message the transport took only part of (a non-blocking send):
    /// an internal copy, sent on by progress.
    pub(crate) fn queue_rest(
        &mut self,
        data: &[u8],
        (written, started, tag): (usize, bool, WireTag),
        requests: &mut Requests,
    ) {
        let mut copy = requests.pool.take(data.len());
        copy.copy_from_slice(data);
        requests.buffered_bytes += copy.len();
        requests.pending_sends += 1;
        self.queue.push_back(NetQueued {
            key: None,
            tag,
            data: copy,
            written,
            started,
            in_place: false,
        });
    }

    /// Marks the edge failed and fails its queued requests (the caller fails anything else
    /// its transport holds first); returns the error. Logs the failure once.
    pub(crate) fn fail(
        &mut self,
        failure: Failure,
        during: &'static str,
        requests: &mut Requests,
        endpoint: Addr,
    ) -> Error {
        let peer = self.peer;
        if self.failure.is_none() {
            tracing::warn!(target: ENDPOINT_LOG, endpoint = %endpoint, %peer, transport = self.transport, failure = ?failure, during, "connection failed");
            self.failure = Some(failure.clone());
            while let Some(q) = self.queue.pop_front() {
                requests.pending_sends -= 1;
                match q.key {
                    Some(key) => requests.complete_send(key, Err(failure.to_error(peer, during))),
                    None => requests.buffered_bytes -= q.data.len(),
                }
            }
        }
        failure.to_error(peer, during)
    }

    /// Whether the peer process has been stopped long enough to fail the edge's queued
    /// sends (the endpoint's liveness look); None when not (or nothing is queued).
    pub(crate) fn stopped_with_queue(&mut self, detect: Duration, now: Instant) -> Option<u64> {
        if self.failure.is_some() || self.queue.is_empty() {
            return None;
        }
        self.process.as_mut().and_then(|p| p.stopped(detect, now))
    }
}

/// The part of an inbound network edge that tcp and datagram edges share.
#[derive(Debug)]
pub(crate) struct NetIn {
    pub(crate) peer: Addr,
    /// The transport's name, for errors and logs.
    pub(crate) transport: &'static str,
    pub(crate) state: InboundState,
    /// The peer's process, when it runs on this node (tcp): watched for a freeze.
    pub(crate) process: Option<PeerProcess>,
    /// The edge rides on a connection this endpoint opened: the peer's answers to it.
    pub(crate) reverse: bool,
    /// The peer has sent on the edge (always true for an accepted edge). A reverse edge
    /// that has not is silent: its errors are the outbound edge's, reported there.
    pub(crate) active: bool,
    /// This endpoint's outbound edge to the peer rides on this (accepted) connection.
    pub(crate) carries_out: bool,
    /// Whether the peer closed the edge cleanly, and whether that was reported.
    pub(crate) end: PeerEnd,
}

impl NetIn {
    /// An edge the peer opened (accepted by a listener or the engine).
    pub(crate) fn accepted(
        peer: Addr,
        transport: &'static str,
        process: Option<PeerProcess>,
    ) -> NetIn {
        NetIn {
            peer,
            transport,
            state: InboundState::Open,
            process,
            reverse: false,
            active: true,
            carries_out: false,
            end: PeerEnd::default(),
        }
    }

    /// The reverse edge of a connection this endpoint opened to `peer`.
    pub(crate) fn reverse(
        peer: Addr,
        transport: &'static str,
        process: Option<PeerProcess>,
    ) -> NetIn {
        NetIn {
            reverse: true,
            active: false,
            ..NetIn::accepted(peer, transport, process)
        }
    }

    /// Whether an outbound edge to `peer` over `transport` may ride on this edge: one the
    /// peer opened, open, and not carrying one already.
    pub(crate) fn reusable_for(&self, peer: Addr, transport: &'static str) -> bool {
        self.peer == peer
            && self.transport == transport
            && self.state == InboundState::Open
            && !self.reverse
            && !self.carries_out
    }

    /// A broken edge's error, once (the caller then finishes the edge); None for a silent
    /// edge, whose failure is the outbound edge's.
    pub(crate) fn broken_error(&self) -> Option<Error> {
        let InboundState::Broken(detail) = &self.state else {
            return None;
        };
        self.active.then(|| Error::Unreachable {
            peer: self.peer,
            transport: self.transport,
            detail: detail.clone(),
        })
    }

    /// A stopped peer's error, once (the caller then finishes the edge); `mid`: a message
    /// was in the middle of arriving.
    pub(crate) fn stopped_error(&self, mid: bool) -> Option<Error> {
        let InboundState::Stopped(stopped_ms) = self.state else {
            return None;
        };
        let during = if mid {
            "in the middle of a message"
        } else {
            "while receiving"
        };
        self.active.then_some(Error::PeerStopped {
            peer: self.peer,
            transport: self.transport,
            during,
            stopped_ms,
        })
    }

    /// The endpoint's liveness look: a peer process stopped long enough marks the edge
    /// (reported once what it sent is taken).
    pub(crate) fn check_stopped(&mut self, detect: Duration, now: Instant, endpoint: Addr) {
        if let Some(ms) = self.process.as_mut().and_then(|p| p.stopped(detect, now)) {
            tracing::warn!(target: ENDPOINT_LOG, endpoint = %endpoint, peer = %self.peer, transport = self.transport, stopped_ms = ms, "peer stopped");
            self.state = InboundState::Stopped(ms);
        }
    }
}

/// How long a watched peer process has been stopped, once that counts (see
/// [`PeerProcess::stopped`]); None without a process or with detection off. Looks at
/// most as often as the endpoint's other looks ([`Looks::due`]) and counts the look in
/// `detection`.
pub(crate) fn stopped_for(
    process: &mut Option<PeerProcess>,
    detect: Option<Duration>,
    detection: &mut Looks,
) -> Option<u64> {
    let detect = detect?;
    let process = process.as_mut()?;
    let now = Instant::now();
    if !detection.due(now, detect) {
        return None;
    }
    let stopped = process.stopped(detect, now);
    detection.record(now);
    stopped
}

/// An inbound network edge (tcp or datagram) as the receive path's common rules see it.
pub(crate) trait NetInEdge {
    /// The shared bookkeeping.
    fn net(&self) -> &NetIn;
    /// Whether the edge is a reverse edge the peer has not used (yet).
    fn silent(&mut self) -> bool;
    /// Marks the edge done and drops what it held.
    fn finish(&mut self);
    /// Whether a message is in the middle of arriving (a stopped peer's report says so).
    fn mid_message(&self) -> bool;

    /// A broken edge's error, once (the edge is done afterwards).
    fn report_broken(&mut self) -> Option<Error> {
        if !matches!(self.net().state, InboundState::Broken(_)) {
            return None;
        }
        let err = self.net().broken_error();
        self.finish();
        err
    }

    /// A stopped peer's error, once (the edge is done afterwards).
    fn report_stopped(&mut self) -> Option<Error> {
        if !matches!(self.net().state, InboundState::Stopped(_)) {
            return None;
        }
        let err = self.net().stopped_error(self.mid_message());
        self.finish();
        err
    }
    /// Whether a posted receive is bound to the edge's message in progress (it then gets
    /// the edge's errors).
    fn bound_to_posted(&self) -> bool;
}

/// Turns one look at inbound network edge `edge` (`got`) into the receive's outcome: a
/// message, nothing, or the edge's error, reported once (the edge is done afterwards,
/// except after `BufferTooSmall`). A reverse edge that came to life in this look (it was
/// not `was_active`) is counted as an accepted connection.
pub(crate) fn settle_look<E: NetInEdge>(
    edge: &mut E,
    was_active: bool,
    got: crate::error::Result<Option<usize>>,
    registry: &crate::transport::registry::Registry,
    endpoint: Addr,
) -> crate::error::Result<Option<usize>> {
    if !was_active && !edge.silent() {
        // A reverse edge came to life: the peer connected to us (over our connection).
        let net = edge.net();
        tracing::debug!(target: ENDPOINT_LOG, endpoint = %endpoint, peer = %net.peer, transport = net.transport, "peer connected (on our connection)");
        registry.accepted();
    }
    match got {
        Ok(Some(len)) => Ok(Some(len)),
        // A posted receive bound to this edge's message gets its errors.
        Ok(None) if edge.bound_to_posted() => Ok(None),
        Ok(None) => match edge.report_broken() {
            Some(err) => Err(err),
            None => match edge.report_stopped() {
                Some(err) => Err(err),
                None => Ok(None),
            },
        },
        Err(e @ Error::BufferTooSmall { .. }) => Err(e),
        // The failure of a connection the peer never sent on is the outbound edge's.
        Err(_) if edge.silent() => {
            edge.finish();
            Ok(None)
        }
        Err(e) => {
            edge.finish();
            Err(e)
        }
    }
}
