//! The seam between the endpoint and the transports: an endpoint's directed edges are
//! [`OutEdge`]s (this endpoint sends) and [`InEdge`]s (a peer sends to it), one variant per
//! transport. This file is the one place that dispatches on the transport; the endpoint
//! calls these methods and asks [`Capabilities`] where a choice depends on the medium.
//!
//! An enum rather than a trait object: the fast paths (a short message over shm, a small
//! frame over tcp) stay monomorphic and inlinable, and adding a transport is one variant
//! here (the compiler then lists every method that needs its arm). A new transport must
//! provide: connection setup (a listener that delivers [`InEdge`]s to the endpoint's
//! inbox, a connecting side that returns an [`OutEdge`] and, for a connection carrying both
//! directions, its reverse [`InEdge`]), the send operations (blocking, non-blocking,
//! posted, progress, close), the receive look, liveness and readiness, and its
//! [`Capabilities`]; then one line in `tests/conformance.rs`.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use quiver_wire::rma::KeyRepr;

use super::dgram::inbound::DgramIn;
use super::dgram::outbound::DgramOut;
use super::edge_context::EdgeContext;
use super::meanwhile::Meanwhile;
use super::protocols::TransportInfo;
use super::shm::inbound::{AheadOutcome, ShmIn};
use super::shm::outbound::{ShmOut, ShmSent};
use super::tcp::inbound::TcpIn;
use super::tcp::outbound::TcpOut;
use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::dest::Dest;
use crate::transport::failure::Failure;
use crate::transport::inbound_state::{InboundState, PeerEnd};
use crate::transport::local::LocalRank;
use crate::transport::net_edge::{settle_look, NetInEdge};
use crate::transport::registry::{Inbox, NetInbound, NewInbound};
use crate::transport::requests::Requests;
use crate::transport::requests::{RecvCompletion, RecvState};
use crate::transport::rma_ops::{self, OpInfo, PostedOp, RmaOp};
use crate::transport::rma_pipeline::Outcome;
use crate::transport::wire_tag::WireTag;

/// What a protocol choice or an API promise needs to know of a transport, asked of the
/// transport instead of matched on its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// The transport's name (`QUIVER_TRANSPORTS`, errors, logs).
    pub(crate) name: &'static str,
    /// Delivers in order and without loss by itself (shm rings, tcp); otherwise the
    /// protocol core adds reliability (udp, mem).
    pub(crate) reliable: bool,
    /// Large messages move without a staging copy (shm: cross-memory attach; datagrams:
    /// sent in place from the caller's buffer).
    pub(crate) zero_copy: bool,
    /// A posted send of at least `udp_post_in_place_min` bytes is held in place until
    /// acknowledged (the caller keeps several buffers posted).
    pub(crate) posts_in_place: bool,
}

/// The capabilities of transport `kind` under `config`.
pub(crate) fn capabilities(kind: TransportKind, config: &Config) -> Capabilities {
    let datagram = kind.is_datagram();
    Capabilities {
        name: kind.name(),
        reliable: !datagram,
        zero_copy: kind == TransportKind::Shm || datagram,
        posts_in_place: datagram && config.udp_post_in_place_min > 0,
    }
}

/// Which protocol transport `kind` uses for each message size under `config`, and why
/// (each transport's `protocols.rs`), with its capabilities.
pub fn transport_info(kind: TransportKind, config: &Config) -> TransportInfo {
    let ranges = match kind {
        TransportKind::Shm => super::shm::protocols::ranges(config),
        TransportKind::Tcp => super::tcp::protocols::ranges(config),
        TransportKind::Udp | TransportKind::Mem | TransportKind::Xdp => {
            super::dgram::protocols::ranges(kind, config)
        }
    };
    let capabilities = capabilities(kind, config);
    TransportInfo {
        kind,
        reliable: capabilities.reliable,
        zero_copy: capabilities.zero_copy,
        ranges,
    }
}

/// Whether transport `kind` can reach a peer from this rank: shm only on this node
/// (`peer_on_node`), the network transports only with every rank's address, and a
/// datagram transport only when it is the one this rank's engine runs.
pub(crate) fn reaches(kind: TransportKind, local: &LocalRank, peer_on_node: bool) -> bool {
    match kind {
        TransportKind::Shm => peer_on_node,
        TransportKind::Tcp => !local.addrs.is_empty(),
        TransportKind::Udp | TransportKind::Mem | TransportKind::Xdp => {
            !local.addrs.is_empty() && local.dgram_kind() == Some(kind)
        }
    }
}

/// An edge from this endpoint to a peer (module docs).
///
/// `repr(u8)`, here and on [`InEdge`] and `InboundState`: a tag byte of its own, which a
/// `match` reads with one load. Without it the compiler hides the variant in a spare value
/// of some field and decodes it at every `match`; an edge is matched a dozen times per
/// message, which cost about 7% of an active message's round trip over shm in
/// instructions (5% of a plain one's).
#[derive(Debug)]
#[repr(u8)]
pub(crate) enum OutEdge {
    Shm(ShmOut),
    Tcp(TcpOut),
    Dgram(DgramOut),
    /// Out of the list while a blocking send on it lets the endpoint receive meanwhile
    /// (see [`Meanwhile`]); every operation passes over it.
    Busy,
}

/// How the part of a blocking send an edge does by itself ended.
pub(crate) enum Started {
    /// The send is over.
    Finished(Result<()>),
    /// The rest needs the endpoint's help while it waits: `written` bytes are out.
    Partly { written: usize },
}

impl OutEdge {
    /// Why the edge stopped working, if it did.
    pub(crate) fn failure(&self) -> Option<&Failure> {
        match self {
            OutEdge::Shm(e) => e.failure.as_ref(),
            OutEdge::Tcp(e) => e.net.failure.as_ref(),
            OutEdge::Dgram(e) => e.net.failure.as_ref(),
            OutEdge::Busy => None,
        }
    }

    /// What the edge's transport can do.
    pub(crate) fn capabilities(&self, config: &Config) -> Option<Capabilities> {
        self.kind().map(|kind| capabilities(kind, config))
    }

    /// Which protocol this edge uses for each message size ([`transport_info`]), for this
    /// edge: a shm edge without cross-memory attach sends every size through its ring.
    pub(crate) fn info(&self, config: &Config) -> Option<TransportInfo> {
        let mut info = transport_info(self.kind()?, config);
        if let OutEdge::Shm(e) = self {
            if !e.cross_memory() {
                info.zero_copy = false;
                info.ranges = super::shm::protocols::ranges_without_cross_memory(config);
            }
        }
        Some(info)
    }

    /// The transport of this edge (`None` while it is [`OutEdge::Busy`]).
    pub(crate) fn kind(&self) -> Option<TransportKind> {
        match self {
            OutEdge::Shm(_) => Some(TransportKind::Shm),
            OutEdge::Tcp(_) => Some(TransportKind::Tcp),
            OutEdge::Dgram(e) => Some(e.kind()),
            OutEdge::Busy => None,
        }
    }

    /// The part of a blocking send the edge does by itself: over shm all of it (which
    /// waits on its own ring; `flush` publishes the ring space the endpoint consumed
    /// meanwhile, reads ahead what senders asleep on the endpoint wrote and says whether
    /// the peer named stays blocked sending to the endpoint beyond the read-ahead bound,
    /// [`InEdge::read_ahead`]; its second argument: whether the send waited long enough to
    /// pull other senders' rendezvous messages ahead too), except the wait for a
    /// rendezvous to be pulled while the endpoint has receives posted
    /// (`receives_posted`: they take what comes meanwhile, [`OutEdge::finish_send`]);
    /// tcp's latency path (one `send` of a small frame); for datagrams a message the send
    /// window takes whole now ([`DgramOut::start_send`](crate::transport::dgram::outbound::DgramOut::start_send)).
    #[inline]
    pub(crate) fn start_send(
        &mut self,
        data: &[u8],
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
        receives_posted: bool,
    ) -> Started {
        match self {
            OutEdge::Shm(e) => match e.send(data, cx, flush, receives_posted) {
                ShmSent::Done(result) => Started::Finished(result),
                ShmSent::Pulling => Started::Partly { written: 0 },
            },
            OutEdge::Tcp(e) => {
                let mut written = 0;
                match e.start_send(data, &mut written, cx) {
                    Ok(true) => Started::Finished(Ok(())),
                    Ok(false) => Started::Partly { written },
                    Err(err) => Started::Finished(Err(err)),
                }
            }
            OutEdge::Dgram(e) => match e.start_send(data, cx) {
                Some(result) => Started::Finished(result),
                None => Started::Partly { written: 0 },
            },
            OutEdge::Busy => unreachable!("a busy edge is out of the endpoint's list"),
        }
    }

    /// A blocking send's short path: a shm edge writes a short message as one record when
    /// its ring has room now ([`ShmOut::send_short`]); `None` for every other case, which
    /// [`OutEdge::start_send`] takes.
    #[inline]
    pub(crate) fn send_short(
        &mut self,
        data: &[u8],
        config: &Config,
        requests: &mut Requests,
    ) -> Option<Result<()>> {
        match self {
            OutEdge::Shm(e) => e.send_short(data, config, requests),
            _ => None,
        }
    }

    /// The rest of a blocking send ([`Started::Partly`]), with the endpoint receiving
    /// meanwhile (the edge is out of the endpoint's list while this runs).
    pub(crate) fn finish_send(
        &mut self,
        data: &[u8],
        written: usize,
        endpoint: &mut dyn Meanwhile,
    ) -> Result<()> {
        match self {
            OutEdge::Tcp(e) => e.finish_send(data, written, endpoint),
            OutEdge::Dgram(e) => e.finish_send(data, endpoint),
            OutEdge::Shm(e) => e.finish_pull(data, endpoint),
            OutEdge::Busy => unreachable!("a busy edge is out of the endpoint's list"),
        }
    }

    /// Sets the tag of the sends that follow on this edge, or that they are active
    /// messages (the endpoint sets it around a tagged send or an active message and back
    /// to 0 after it). Every transport carries both: shm and tcp in a sticky record before
    /// the messages whose tag changes, udp, mem and xdp in each message's header.
    pub(crate) fn set_tag(&mut self, tag: WireTag) {
        match self {
            OutEdge::Shm(e) => e.set_tag(tag),
            OutEdge::Tcp(e) => e.set_tag(tag),
            OutEdge::Dgram(e) => e.set_tag(tag),
            OutEdge::Busy => {}
        }
    }

    /// Sends `data` only if that needs no waiting (`WouldBlock` otherwise).
    #[inline]
    pub(crate) fn try_send(&mut self, data: &[u8], cx: &mut EdgeContext<'_>) -> Result<()> {
        match self {
            OutEdge::Shm(e) => e.try_send(data, cx.config, cx.requests),
            OutEdge::Tcp(e) => e.try_send(data, cx),
            OutEdge::Dgram(e) => e.try_send(data, cx),
            OutEdge::Busy => unreachable!("a busy edge is out of the endpoint's list"),
        }
    }

    /// Starts sending `data` without waiting; the request's key.
    pub(crate) fn post_send(&mut self, data: Vec<u8>, cx: &mut EdgeContext<'_>) -> Result<Key> {
        match self {
            OutEdge::Shm(e) => e.post_send(data, cx.config, cx.requests),
            OutEdge::Tcp(e) => Ok(e.post_send(data, cx)),
            OutEdge::Dgram(e) => Ok(e.post_send(data, cx)),
            OutEdge::Busy => unreachable!("a busy edge is out of the endpoint's list"),
        }
    }

    /// Pushes queued sends as far as the transport takes them now and completes finished
    /// requests.
    pub(crate) fn progress(&mut self, cx: &mut EdgeContext<'_>) -> Result<()> {
        match self {
            OutEdge::Shm(e) => {
                if !e.busy() {
                    return Ok(());
                }
                e.progress(cx.config, cx.requests)
            }
            OutEdge::Tcp(e) => e.progress(cx),
            OutEdge::Dgram(e) => e.progress(cx),
            OutEdge::Busy => Ok(()),
        }
    }

    /// The endpoint's liveness look: a peer that exited or stopped while sends are pending
    /// fails them.
    pub(crate) fn check_liveness(&mut self, now: Instant, cx: &mut EdgeContext<'_>) {
        match self {
            OutEdge::Shm(e) => e.check_liveness(now, cx.config, cx.requests),
            OutEdge::Tcp(e) => {
                if let Some(detect) = cx.config.detect {
                    e.check_liveness(detect, now, cx);
                }
            }
            OutEdge::Dgram(_) | OutEdge::Busy => {}
        }
    }

    /// The descriptor a sleeping call should also wake up for (a tcp stream with queued
    /// sends, writable).
    pub(crate) fn wake_fd(&self) -> Option<libc::pollfd> {
        match self {
            OutEdge::Tcp(e) => e.wake_fd(),
            _ => None,
        }
    }

    /// The datagram edge, for closing (which waits until its sends are acknowledged).
    pub(crate) fn as_dgram_mut(&mut self) -> Option<&mut DgramOut> {
        match self {
            OutEdge::Dgram(e) => Some(e),
            _ => None,
        }
    }

    /// Whether posted or queued sends are still on their way out of this edge.
    pub(crate) fn busy(&self) -> bool {
        match self {
            OutEdge::Shm(e) => e.failure.is_none() && e.busy(),
            OutEdge::Tcp(e) => e.net.failure.is_none() && !e.net.queue.is_empty(),
            OutEdge::Dgram(e) => e.net.failure.is_none() && !e.net.queue.is_empty(),
            OutEdge::Busy => false,
        }
    }

    /// Whether sends are on their way out of this edge whose completion rings none of the
    /// endpoint's descriptors (shm: the receiver frees ring space and finishes a
    /// rendezvous without a doorbell of ours), so that an endpoint asleep on its
    /// descriptor must look again on a timer.
    pub(crate) fn busy_unsignalled(&self) -> bool {
        match self {
            OutEdge::Shm(e) => e.failure.is_none() && e.busy(),
            OutEdge::Tcp(_) | OutEdge::Dgram(_) | OutEdge::Busy => false,
        }
    }

    /// Closes this one connection, both directions, while the endpoint stays open
    /// (`Endpoint::close`, its sends finished): the peer gets what was sent, then the end;
    /// every later call on the edge fails with [`Failure::ClosedHere`]. The inbound edges of
    /// the same connection (`inbound`) end too, without a report here: shm closes the
    /// peer's ring to this endpoint (its sends then fail with `PeerClosed`), tcp stops
    /// reading the stream (the peer's edge on it fails once the peer reads the close), and
    /// a datagram connection, one for both directions, waits until the peer acknowledged
    /// the data and the Close.
    pub(crate) fn close_connection(&mut self, inbound: &mut [InEdge], cx: &mut EdgeContext<'_>) {
        let Some(peer) = self.peer() else {
            return;
        };
        for inb in inbound.iter_mut().filter(|inb| inb.peer() == peer) {
            let same = match (&*self, &*inb) {
                (OutEdge::Shm(_), InEdge::Shm(_)) => true,
                (OutEdge::Tcp(out), InEdge::Tcp(i)) => out.same_stream(&i.open),
                (OutEdge::Dgram(out), InEdge::Dgram(i)) => out.id == i.id,
                _ => false,
            };
            if same && !inb.is_done() {
                if let Some(key) = inb.close_here() {
                    // A posted receive bound to a message the close cut off.
                    cx.requests.bound_recvs -= 1;
                    let closed = Error::ConnectionClosed { peer };
                    cx.requests.set_recv(key, RecvState::Done(Err(closed)));
                }
            }
        }
        let failure = match self {
            OutEdge::Shm(e) => {
                e.close();
                &mut e.failure
            }
            OutEdge::Tcp(e) => {
                e.close();
                // A later connect between the two endpoints is no crossing of this one.
                cx.inbox.tcp_crossings().release_connect(e.net.peer);
                &mut e.net.failure
            }
            OutEdge::Dgram(e) => {
                let id = e.id;
                super::dgram::endpoint_side::close(&mut [&mut *e], vec![id], cx);
                &mut e.net.failure
            }
            OutEdge::Busy => return,
        };
        *failure = Some(Failure::ClosedHere);
    }

    /// The peer closed inbound edge `inb` cleanly: an outbound edge riding on the same
    /// connection ends too (tcp: the same stream; its queued sends fail with
    /// `PeerClosed`). Shm rings are one-way (the closer closes its end of the ring back)
    /// and the datagram engine ends both directions of its connection itself.
    pub(crate) fn peer_closed(&mut self, inb: &InEdge, cx: &mut EdgeContext<'_>) {
        if let (OutEdge::Tcp(out), InEdge::Tcp(i)) = (&mut *self, inb) {
            if out.net.failure.is_none() && out.same_stream(&i.open) {
                out.fail(Failure::Closed, "after the peer closed the connection", cx);
            }
        }
    }

    /// The peer of the edge (`None` while it is [`OutEdge::Busy`]).
    fn peer(&self) -> Option<Addr> {
        match self {
            OutEdge::Shm(e) => Some(e.peer),
            OutEdge::Tcp(e) => Some(e.net.peer),
            OutEdge::Dgram(e) => Some(e.net.peer),
            OutEdge::Busy => None,
        }
    }

    /// Closes the edge (the endpoint closes): shm and tcp peers see the end at once;
    /// datagram edges close with the engine's connections (see `dgram::endpoint_side`).
    pub(crate) fn close(&mut self) {
        match self {
            OutEdge::Shm(e) => e.close(),
            OutEdge::Tcp(e) => e.close(),
            OutEdge::Dgram(_) | OutEdge::Busy => {}
        }
    }

    /// Applies one-sided operation `op` (checked by the caller against `key`) to the
    /// region of `peer` that `key` names; the word before, for an atomic. Over shm the
    /// initiator maps the region once and uses plain copies and CPU atomics; over tcp and
    /// the datagram transports a request on a connection of its own, applied by the
    /// target's progress engine (`rma_stream`, `dgram::rma`).
    ///
    /// # Errors
    /// The edge's failure; the transport's.
    pub(crate) fn rma(
        &mut self,
        local: &LocalRank,
        (src, peer): (Addr, Addr),
        key: &KeyRepr,
        op: RmaOp<'_>,
    ) -> Result<u64> {
        match self {
            OutEdge::Shm(e) => e.rma.apply(local, (src, peer), key, op),
            OutEdge::Tcp(e) => {
                e.net.check("before a one-sided operation")?;
                e.rma.apply(local, (src, peer), key, op)
            }
            OutEdge::Dgram(e) => {
                e.net.check("before a one-sided operation")?;
                e.rma.apply(local, (src, peer), key, op)
            }
            OutEdge::Busy => Err(self.rma_unsupported(local, peer)),
        }
    }

    /// Posts one-sided operation `op` (checked by the caller against `key`): done at once
    /// over shm (the initiator's own copies and atomics), queued on the request
    /// connection over the network transports (its number, for [`OutEdge::rma_take`]).
    ///
    /// # Errors
    /// The edge's failure; the request connection could not be opened.
    pub(crate) fn rma_post(
        &mut self,
        local: &LocalRank,
        (src, peer): (Addr, Addr),
        key: &KeyRepr,
        mut op: PostedOp,
    ) -> Result<Posted> {
        let (info, request) = {
            let view = op.as_op();
            (OpInfo::of(&view), rma_ops::request_for(&view, key, 0))
        };
        match self {
            OutEdge::Shm(e) => {
                let done = e.rma.apply(local, (src, peer), key, op.as_op());
                Ok(Posted::Done(done.map(|value| (value, op.buf))))
            }
            OutEdge::Tcp(e) => {
                e.net.check("before a one-sided operation")?;
                let seq = e
                    .rma
                    .post(local, (src, peer), key, (info, op.buf), request)?;
                Ok(Posted::Pending(seq))
            }
            OutEdge::Dgram(e) => {
                e.net.check("before a one-sided operation")?;
                let seq = e
                    .rma
                    .post(local, (src, peer), key, (info, op.buf), request)?;
                Ok(Posted::Pending(seq))
            }
            OutEdge::Busy => Err(self.rma_unsupported(local, peer)),
        }
    }

    /// Moves this edge's posted one-sided operations on, never waiting.
    pub(crate) fn rma_progress(&mut self, local: &LocalRank, peer: Addr) {
        match self {
            OutEdge::Tcp(e) => e.rma.progress(local, peer),
            OutEdge::Dgram(e) => e.rma.progress(local, peer),
            OutEdge::Shm(_) | OutEdge::Busy => {}
        }
    }

    /// The completion of posted one-sided operation `seq`, once it came.
    pub(crate) fn rma_take(&mut self, seq: u32) -> Option<Outcome> {
        match self {
            OutEdge::Tcp(e) => e.rma.take(seq),
            OutEdge::Dgram(e) => e.rma.take(seq),
            OutEdge::Shm(_) | OutEdge::Busy => None,
        }
    }

    /// The descriptor a sleeping call should also wake up for while one-sided operations
    /// are posted on this edge (tcp: its request stream).
    pub(crate) fn rma_wake(&self) -> Option<libc::pollfd> {
        match self {
            OutEdge::Tcp(e) => e.rma.wake(),
            _ => None,
        }
    }

    /// Makes every earlier one-sided operation on this edge visible to the peer; over shm
    /// a fence, then the peer's liveness: a put to a target that died may have landed in
    /// memory nobody will read. Over the network transports a flush request answered once
    /// everything before it is applied.
    ///
    /// # Errors
    /// [`Error::PeerDead`] when the peer's process has exited; the transport's.
    pub(crate) fn rma_flush(&mut self, local: &LocalRank, peer: Addr) -> Result<()> {
        match self {
            OutEdge::Shm(e) => {
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                if e.peer_exited() {
                    return Err(Error::PeerDead {
                        peer,
                        during: "while flushing one-sided operations",
                    });
                }
                Ok(())
            }
            OutEdge::Tcp(e) => e.rma.flush(local, peer),
            OutEdge::Dgram(e) => e.rma.flush(local, peer),
            OutEdge::Busy => Err(self.rma_unsupported(local, peer)),
        }
    }

    /// The refusal of a one-sided operation on a transport without them, counted.
    fn rma_unsupported(&self, local: &LocalRank, peer: Addr) -> Error {
        let transport = self.kind().map_or("no transport", TransportKind::name);
        rma_ops::refused(local, Error::RmaUnsupported { peer, transport })
    }
}

/// Where a posted one-sided operation stands once posted.
pub(crate) enum Posted {
    /// Done already (over shm).
    Done(Outcome),
    /// Queued on the edge's request connection, by number.
    Pending(u32),
}

/// An edge from a peer to this endpoint (module docs; `repr(u8)`: see [`OutEdge`]).
#[derive(Debug)]
#[repr(u8)]
pub(crate) enum InEdge {
    Shm(ShmIn),
    Tcp(TcpIn),
    Dgram(DgramIn),
}

/// What one look at the endpoint's inbound edges needs besides the edges.
pub(crate) struct Look<'a, 'b> {
    /// The endpoint's state the drivers use.
    pub(crate) cx: EdgeContext<'a>,
    /// The tcp edge the blocking receive in progress is committed to (see
    /// [`TcpIn::take`]).
    pub(crate) committed: &'b mut Option<usize>,
    /// Skip open datagram edges: the engine has no news since they last had nothing.
    pub(crate) skip_dgram: bool,
}

impl InEdge {
    /// The shared-memory edge a listener accepted.
    pub(crate) fn from_shm(accepted: NewInbound) -> InEdge {
        InEdge::Shm(ShmIn::new(accepted))
    }

    /// The network edge a listener or the datagram engine accepted (a tcp edge stages
    /// `staging_bytes`).
    pub(crate) fn from_network(accepted: NetInbound, staging_bytes: usize) -> InEdge {
        match accepted {
            NetInbound::Tcp {
                peer,
                stream,
                pid,
                open,
            } => InEdge::Tcp(TcpIn::accepted(peer, stream, pid, staging_bytes, open)),
            NetInbound::Dgram { peer, kind, id } => {
                InEdge::Dgram(DgramIn::accepted(peer, kind, id))
            }
        }
    }

    /// The peer at the other end.
    pub(crate) fn peer(&self) -> Addr {
        match self {
            InEdge::Shm(e) => e.peer,
            InEdge::Tcp(e) => e.net.peer,
            InEdge::Dgram(e) => e.net.peer,
        }
    }

    /// The tag of the message this edge delivered last (0 for untagged messages), or
    /// that it was an active message.
    #[inline]
    pub(crate) fn tag(&self) -> WireTag {
        match self {
            InEdge::Shm(e) => e.delivered_tag,
            InEdge::Tcp(e) => e.reader.delivered_tag,
            InEdge::Dgram(e) => e.delivered_tag,
        }
    }

    /// The tag of the message the next look would deliver (one a `BufferTooSmall` left in
    /// place): whether it is an active message, which goes to its handler whatever the
    /// receive's buffer.
    ///
    /// Every transport's look that finds its next message too long for the destination
    /// leaves it whole in place with this tag known, so that the next look, with a
    /// destination that fits and without waiting, delivers that very message: shm (the
    /// ring's records and the rendezvous record stay until taken), tcp (a look that does
    /// not fit stops at the header, or at a large message read ahead, before anything is
    /// consumed; the next look into a posted receive's buffer, [`Dest::Posted`], binds a
    /// large message to it) and the datagram transports (the message stays in the receive
    /// window once its header arrived; the next look into a posted receive's buffer binds
    /// a message still arriving to it, the engine placing its frames there). The endpoint
    /// reads envelopes before payloads that way (`Endpoint::pull_into_posted`).
    pub(crate) fn next_tag(&self) -> WireTag {
        match self {
            InEdge::Shm(e) => e.next_tag(),
            InEdge::Tcp(e) => e.next_tag(),
            InEdge::Dgram(e) => e.next_tag,
        }
    }

    /// Whether the edge is done (skipped by every look).
    pub(crate) fn is_done(&self) -> bool {
        let state = match self {
            InEdge::Shm(e) => &e.state,
            InEdge::Tcp(e) => &e.net.state,
            InEdge::Dgram(e) => &e.net.state,
        };
        *state == InboundState::Done
    }

    /// Whether the edge can deliver nothing more: done, and nothing taken ahead is left.
    pub(crate) fn ended(&self) -> bool {
        match self {
            InEdge::Shm(e) => !e.is_live(),
            InEdge::Tcp(e) => e.net.state == InboundState::Done,
            InEdge::Dgram(e) => e.net.state == InboundState::Done,
        }
    }

    /// How the edge ended: whether its peer closed it cleanly, and whether an any-source
    /// receive reported that.
    pub(crate) fn peer_end(&mut self) -> &mut PeerEnd {
        match self {
            InEdge::Shm(e) => &mut e.end,
            InEdge::Tcp(e) => &mut e.net.end,
            InEdge::Dgram(e) => &mut e.net.end,
        }
    }

    /// Ends the edge because this endpoint closed the connection it belongs to
    /// ([`OutEdge::close_connection`]): no report, nothing more taken from it. The key of
    /// a posted receive bound to a message in progress on it (tcp, datagrams), which the
    /// caller fails.
    pub(crate) fn close_here(&mut self) -> Option<Key> {
        match self {
            InEdge::Shm(e) => e.close_here(),
            InEdge::Tcp(e) => return e.close_here(),
            InEdge::Dgram(e) => return e.close_here(),
        }
        None
    }

    /// What became of the posted receive bound to this edge's message in progress (tcp
    /// reads more of it from the socket; the datagram engine placed its frames): its key
    /// and outcome once the message is whole or the edge failed. None: still arriving, or
    /// no receive is bound here.
    pub(crate) fn progress_bound(
        &mut self,
        local: &LocalRank,
    ) -> Option<(Key, Result<RecvCompletion>)> {
        match self {
            InEdge::Shm(_) => None,
            InEdge::Tcp(e) => e.progress_bound(),
            InEdge::Dgram(e) => e.progress_bound(local),
        }
    }

    /// Whether the edge is a network edge (the datagram engine is polled before its look).
    pub(crate) fn is_network(&self) -> bool {
        !matches!(self, InEdge::Shm(_))
    }

    /// One look at edge `i` of `edges` for a message for `dest`: its length, nothing, or
    /// the edge's error (reported once; the edge is done afterwards, except after
    /// `BufferTooSmall`). With `wait`, a message that has begun may be waited for.
    #[inline]
    pub(crate) fn look(
        edges: &mut [InEdge],
        i: usize,
        dest: &mut Dest<'_>,
        wait: bool,
        look: &mut Look<'_, '_>,
    ) -> Result<Option<usize>> {
        let cx = &mut look.cx;
        match &mut edges[i] {
            InEdge::Shm(e) => e.poll(dest, wait, cx.config, cx.detection, Some(cx.local), cx.addr),
            InEdge::Dgram(e) => {
                if look.skip_dgram && e.net.state == InboundState::Open {
                    return Ok(None);
                }
                let was_active = e.net.active;
                let got = e.take(dest, wait, (cx.local, cx.config), cx.requests);
                settle_look(e, was_active, got, &cx.local.registry, cx.addr)
            }
            InEdge::Tcp(_) => look_tcp(edges, i, dest, wait, look),
        }
    }

    /// Whether the edge still delivers or has an error to report (`inbound_count`); a
    /// reverse network edge only once the peer has sent on it.
    pub(crate) fn is_live(&mut self) -> bool {
        match self {
            InEdge::Shm(e) => e.is_live(),
            InEdge::Tcp(e) => e.is_live(),
            InEdge::Dgram(e) => e.is_live(),
        }
    }

    /// Whether a receive would find something here now (for `arm`).
    pub(crate) fn has_pending(&mut self, local: &LocalRank) -> bool {
        match self {
            InEdge::Shm(e) => e.has_pending(),
            InEdge::Tcp(e) => e.has_pending(),
            InEdge::Dgram(e) => local.dgram.as_deref().is_some_and(|d| e.has_pending(d)),
        }
    }

    /// Publishes the ring space consumed so far (shm; nothing for the others).
    #[inline]
    pub(crate) fn publish_consumed(&mut self) {
        if let InEdge::Shm(e) = self {
            e.flush();
        }
    }

    /// While a blocking send of this endpoint waits: takes ahead what a sender asleep in a
    /// blocking send on this edge wrote, within `read_ahead_bytes` (shm; the network
    /// transports read ahead through [`Meanwhile`]). Whether this edge's sender is `peer`
    /// and stays blocked with a message beyond the bound (a send-send deadlock once the
    /// caller's send cannot finish either). A rendezvous of another sender than `peer` is
    /// pulled ahead only once the send `waited_long` (a cycle of blocking sends, suspected).
    pub(crate) fn read_ahead(&mut self, peer: Addr, config: &Config, waited_long: bool) -> bool {
        match self {
            InEdge::Shm(e) => {
                let own_peer = e.peer == peer;
                e.read_ahead(config, own_peer || waited_long) == AheadOutcome::Blocked && own_peer
            }
            _ => false,
        }
    }

    /// Whether this is a network edge from `peer` whose read-ahead is full: a tcp stream
    /// whose next message the read-ahead bound stopped, a datagram connection whose
    /// receive window cannot take more ([`Meanwhile::read_ahead_full`]).
    pub(crate) fn read_ahead_full(&self, peer: Addr, local: &LocalRank) -> bool {
        match self {
            InEdge::Shm(_) => false,
            InEdge::Tcp(e) => e.net.peer == peer && e.read_ahead_stalled(),
            InEdge::Dgram(e) => {
                e.net.peer == peer
                    && e.net.state == InboundState::Open
                    && local
                        .dgram
                        .as_deref()
                        .is_some_and(|d| d.read_ahead_full(e.id).0)
            }
        }
    }

    /// Re-reads a shared ring's header while idle (shm).
    pub(crate) fn verify(&mut self) {
        if let InEdge::Shm(e) = self {
            e.verify();
        }
    }

    /// The endpoint's liveness look at this edge (a peer that exited or stopped).
    pub(crate) fn check_liveness(
        &mut self,
        now: Instant,
        detect: Option<Duration>,
        endpoint: Addr,
    ) {
        match self {
            InEdge::Shm(e) => e.check_liveness(now, detect, endpoint),
            InEdge::Tcp(e) => {
                if let Some(detect) = detect {
                    if e.net.state == InboundState::Open && !e.silent() {
                        e.net.check_stopped(detect, now, endpoint);
                    }
                }
            }
            InEdge::Dgram(e) => {
                if let Some(detect) = detect {
                    if e.net.state == InboundState::Open && !e.silent() {
                        e.net.check_stopped(detect, now, endpoint);
                    }
                }
            }
        }
    }

    /// The descriptor a sleeping receive should wake up for: a shm peer's pidfd (it
    /// exited), a tcp stream with something to read (unless read-ahead stalled on it).
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        match self {
            InEdge::Shm(e) => e.pidfd_to_watch(),
            InEdge::Tcp(e) => e.wake_fd(),
            InEdge::Dgram(_) => None,
        }
    }

    /// The engine's connection id of a datagram edge (closed with the endpoint).
    pub(crate) fn dgram_id(&self) -> Option<u64> {
        match self {
            InEdge::Dgram(e) => Some(e.id),
            _ => None,
        }
    }

    /// The tcp edge, if it is one.
    pub(crate) fn as_tcp_mut(&mut self) -> Option<&mut TcpIn> {
        match self {
            InEdge::Tcp(e) => Some(e),
            _ => None,
        }
    }

    /// The tcp edge, if it is one.
    pub(crate) fn as_tcp(&self) -> Option<&TcpIn> {
        match self {
            InEdge::Tcp(e) => Some(e),
            _ => None,
        }
    }

    /// Fails the edge for a protocol violation the endpoint found in a message it
    /// delivered (a malformed active message): its next look reports `detail` once, and it
    /// delivers nothing more.
    pub(crate) fn fail(&mut self, detail: String) {
        match self {
            InEdge::Shm(e) => e.state = InboundState::Broken(detail),
            InEdge::Tcp(e) => e.net.state = InboundState::Broken(detail),
            InEdge::Dgram(e) => e.net.state = InboundState::Broken(detail),
        }
    }

    /// Closes the edge (the endpoint closes; datagram edges close with the engine's
    /// connections).
    pub(crate) fn close(&mut self) {
        if let InEdge::Shm(e) = self {
            e.close();
        }
    }

    /// Whether an outbound edge to `peer` over `transport` may ride on this edge's
    /// connection (one the peer opened, open, not carrying one already).
    pub(crate) fn reusable_for(&self, peer: Addr, transport: &'static str) -> bool {
        match self {
            InEdge::Shm(_) => false,
            InEdge::Tcp(e) => e.net.reusable_for(peer, transport),
            InEdge::Dgram(e) => e.net.reusable_for(peer, transport),
        }
    }

    /// Whether an answer to this edge's peer can ride on the edge's own connection: a
    /// network edge the peer opened, open and carrying no outbound edge yet. Shm edges
    /// are one-way (an answer needs a ring of its own).
    pub(crate) fn carries_answers(&self) -> bool {
        match self {
            InEdge::Shm(_) => false,
            InEdge::Tcp(e) => e.net.reusable_for(e.net.peer, e.net.transport),
            InEdge::Dgram(e) => e.net.reusable_for(e.net.peer, e.net.transport),
        }
    }

    /// The outbound edge to the peer that rides on this edge's connection (one network
    /// connection carries both directions); the edge is marked as carrying it.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when a tcp stream cannot be duplicated.
    pub(crate) fn ride(&mut self) -> Result<OutEdge> {
        match self {
            InEdge::Shm(_) => unreachable!("shm edges are one-way"),
            InEdge::Tcp(e) => {
                let stream = e
                    .reader
                    .stream
                    .try_clone()
                    .map_err(|err| crate::error::Error::io("duplicating a tcp stream", err))?;
                e.net.carries_out = true;
                let process = e
                    .net
                    .process
                    .as_ref()
                    .and_then(|p| crate::transport::liveness::PeerProcess::open(p.pid));
                Ok(OutEdge::Tcp(TcpOut::new(
                    e.net.peer,
                    stream,
                    process,
                    std::sync::Arc::clone(&e.open),
                )))
            }
            InEdge::Dgram(e) => {
                e.net.carries_out = true;
                Ok(OutEdge::Dgram(DgramOut::new(e.net.peer, e.id, e.kind)))
            }
        }
    }
}

/// The look at tcp edge `i` (see [`InEdge::look`]): its large messages may need the held
/// bytes of the endpoint's other tcp edges, and a blocking receive may commit to it.
fn look_tcp(
    edges: &mut [InEdge],
    i: usize,
    dest: &mut Dest<'_>,
    wait: bool,
    look: &mut Look<'_, '_>,
) -> Result<Option<usize>> {
    let cx = &mut look.cx;
    let (before, rest) = edges.split_at_mut(i);
    let Some((InEdge::Tcp(e), after)) = rest.split_first_mut() else {
        unreachable!("look_tcp is given a tcp edge")
    };
    let others = || {
        before
            .iter()
            .chain(after.iter())
            .filter_map(InEdge::as_tcp)
            .map(TcpIn::held)
            .fold((0, false), |(bytes, partial), (b, p)| {
                (bytes + b, partial || p)
            })
    };
    let was_active = e.net.active;
    let mut committed = *look.committed == Some(i);
    let got = e.take(dest, wait, cx.requests, cx.config, &mut committed, others);
    if committed {
        *look.committed = Some(i);
    } else if *look.committed == Some(i) {
        *look.committed = None;
    }
    let result = settle_look(e, was_active, got, &cx.local.registry, cx.addr);
    if e.net.reverse && e.net.state == InboundState::Done {
        // Our connection to the peer ended: a new one from the peer is no crossing.
        cx.inbox.tcp_crossings().release_connect(e.net.peer);
    }
    if *look.committed == Some(i) && e.net.state == InboundState::Done {
        *look.committed = None;
    }
    result
}

/// A new outbound edge, or the index of an inbound edge whose connection should carry it.
pub(crate) enum Opened {
    /// A new connection: the outbound edge and its reverse inbound edge (the peer's
    /// answers come back on it).
    New(Box<(OutEdge, InEdge)>),
    /// The peer's own connection to us, inbound edge number `index`, carries both ways.
    Reused(usize),
}

/// Opens a network connection of `kind` from `src` to `peer` at `to`, until `deadline`.
/// `reuse` looks for a connection the peer opened to this endpoint before every attempt
/// (tcp: `Err(why)` means the listener is accepting one from the peer right now, wait for
/// it).
///
/// # Errors
/// The transport's connection errors ([`crate::Error::Refused`], `Unreachable`, `Io`).
pub(crate) fn open_network(
    kind: TransportKind,
    local: &LocalRank,
    inbox: &Inbox,
    (src, peer, to): (Addr, Addr, SocketAddr),
    deadline: Instant,
    reuse: &mut dyn FnMut() -> std::result::Result<Option<usize>, String>,
) -> Result<Opened> {
    let staging = local.config.tcp_staging_bytes;
    match kind {
        TransportKind::Tcp => {
            let connected = super::tcp::connect::connect(local, src, peer, to, deadline, || {
                if let Some(i) = reuse()? {
                    return Ok(Some(i));
                }
                // Recorded (for crossed connects) together with the check that our
                // listener is not accepting the peer's connection right now.
                if !inbox.tcp_crossings().claim_connect(peer) {
                    return Err(format!("accepting a connection from {peer} (to be used)"));
                }
                // An accept that ended just before the claim has been handed over.
                reuse()
            });
            let (stream, pid) = match connected {
                Ok(super::tcp::connect::Connected::New(stream, pid)) => (stream, pid),
                Ok(super::tcp::connect::Connected::Reused(i)) => {
                    inbox.tcp_crossings().release_connect(peer);
                    return Ok(Opened::Reused(i));
                }
                Err(e) => {
                    inbox.tcp_crossings().release_connect(peer);
                    return Err(e);
                }
            };
            // Stays recorded while the connection lives (a crossed connect may reach our
            // listener after ours completed).
            let reverse = stream.try_clone().map_err(|e| {
                inbox.tcp_crossings().release_connect(peer);
                crate::error::Error::io("duplicating a tcp stream", e)
            })?;
            let process = |pid: Option<libc::pid_t>| {
                pid.and_then(crate::transport::liveness::PeerProcess::open)
            };
            let open = local.tcp.connected();
            Ok(Opened::New(Box::new((
                OutEdge::Tcp(TcpOut::new(
                    peer,
                    stream,
                    process(pid),
                    std::sync::Arc::clone(&open),
                )),
                InEdge::Tcp(TcpIn::reverse(peer, reverse, pid, staging, open)),
            ))))
        }
        TransportKind::Udp | TransportKind::Mem | TransportKind::Xdp => {
            let engine = local.dgram.as_ref().ok_or_else(|| {
                crate::error::Error::Config(format!("{kind} is not set up in this context"))
            })?;
            let connected =
                engine.connect(local, src, peer, to, deadline, || reuse().ok().flatten())?;
            match connected {
                super::dgram::connect::Connected::New(id) => Ok(Opened::New(Box::new((
                    OutEdge::Dgram(DgramOut::new(peer, id, kind)),
                    InEdge::Dgram(DgramIn::reverse(peer, kind, id)),
                )))),
                super::dgram::connect::Connected::Reused(i) => Ok(Opened::Reused(i)),
            }
        }
        TransportKind::Shm => unreachable!("shm connections are not network connections"),
    }
}
