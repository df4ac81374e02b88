//! The datagram engine's side of the router ([`quiver_proto::router`]): the answers the
//! router asks for while it accepts a Hello ([`EngineHost`]), and the entry the engine
//! keeps for a connection the router accepted ([`accepted_entry`]).
//!
//! Layer: the datagram transport, between the engine's state (`engine`, `connection`) and
//! its receive path (`receive`, which builds an [`EngineHost`] for every datagram and acts
//! on the router's verdict). It owns no state and does no I/O: it only reads the engine's
//! links, sockets and settings and the context's open endpoints. Which connection a
//! datagram belongs to, Hellos and their repeats, crossed connects and Resets are the
//! router's to decide, not this module's.

use std::collections::VecDeque;
use std::net::SocketAddr;

use quiver_proto::handshake::ConnectRequest;
use quiver_proto::reliable::{Nanos, ReliableConfig};
use quiver_proto::router::{Accepted, Handshake, InboundPath, RouterHost};

use super::connection::{Entry, PostedReads, Status};
use super::engine::{config_for, peer_paths};
use super::udp_io::Socket;
use crate::addr::Addr;
use crate::random::random;
use crate::transport::local::LocalRank;
use crate::transport::registry::not_open_reason;
use crate::transport::rma_ops::RMA_PORT;

/// What the router asks of the engine while it accepts a Hello: borrowed from the engine's
/// fields apart from its router, so that the router can be handed it while the engine's
/// connections are borrowed. Made for every datagram (a few references on the stack), used
/// only for Hellos.
pub(super) struct EngineHost<'a> {
    /// Link addresses of every rank (`Engine::links`).
    pub(super) links: &'a [Vec<SocketAddr>],
    /// The engine's link sockets, one per own link.
    pub(super) sockets: &'a [Socket],
    /// The context's protocol settings (`Engine::base`).
    pub(super) base: &'a ReliableConfig,
    /// `Engine::config_datagram`.
    pub(super) config_datagram: usize,
    /// `Engine::network_min_rto_ns`.
    pub(super) network_min_rto_ns: Nanos,
    /// The rank's shared state; None while the engine is polled without one (no endpoint
    /// is open then).
    pub(super) ctx: Option<&'a LocalRank>,
}

impl RouterHost<SocketAddr, Entry> for EngineHost<'_> {
    fn random_u64(&mut self) -> u64 {
        u64::from_ne_bytes(random())
    }

    fn random_nonce(&mut self) -> [u8; 16] {
        random()
    }

    /// The claimed rank picks the peer's links (the handshake then proves membership); a
    /// link the two ranks do not share is not a way to open a connection.
    fn inbound_path(
        &mut self,
        claimed_rank: u32,
        from: &SocketAddr,
        path: usize,
    ) -> Option<InboundPath> {
        let paths = peer_paths(self.links, self.sockets.len(), claimed_rank, *from);
        (path < paths.len()).then(|| InboundPath {
            path,
            config: config_for(
                self.sockets,
                self.base,
                self.config_datagram,
                self.network_min_rto_ns,
                from,
                paths.len(),
            ),
        })
    }

    /// A valid rank asking for an endpoint that is not open (yet) is counted as the shm and
    /// tcp listeners count it ([`Registry::not_open`](crate::transport::registry::Registry::not_open)).
    fn endpoint_open(&mut self, request: &ConnectRequest) -> bool {
        self.ctx.is_some_and(|c| {
            if request.src_rank >= c.size {
                return false;
            }
            if request.dst_port == RMA_PORT {
                // One-sided requests: the rank serves them, whatever endpoints are open.
                return true;
            }
            let open = c.registry.inbox(request.dst_port).is_some();
            if !open {
                c.registry
                    .not_open(not_open_reason(request.src_rank, request.dst_port));
            }
            open
        })
    }

    /// Without a context no endpoint is open, so the router never asks then.
    fn local_rank(&self) -> u32 {
        self.ctx.map_or(u32::MAX, |c| c.rank)
    }

    fn handshake(&self, entry: &Entry) -> Option<Handshake> {
        entry.handshake()
    }
}

/// The entry for a connection the router accepted from a Hello that came from `from`,
/// whose peer's address on each path is `paths`; with its id. A rejected connection is
/// abandoned from the start: it is kept only until its refusal is sent, and never handed
/// to an endpoint.
pub(super) fn accepted_entry(
    accepted: Accepted,
    from: SocketAddr,
    paths: Vec<SocketAddr>,
) -> (u64, Entry) {
    let Accepted {
        id,
        connection,
        request,
        rejection,
        ..
    } = accepted;
    let entry = Entry {
        core: connection,
        to: from,
        paths,
        local_port: request.dst_port,
        peer: Addr::new(request.src_rank, request.src_port),
        inbound: true,
        status: Status::Connecting,
        abandoned: rejection.is_some(),
        senders: Vec::new(),
        peer_sent: false,
        posted: VecDeque::new(),
        reads: PostedReads::default(),
    };
    (id, entry)
}
