//! The receiving side of a datagram edge ([`DgramIn`]): the engine's connection holds the
//! protocol state and the message being reassembled; this edge takes whole messages out of
//! it (`DgramShared::take`) and reports the connection's end once.

use super::engine::DgramShared;
use super::messages::DgramTake;
use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::transport::dest::Dest;
use crate::transport::inbound_state::InboundState;
use crate::transport::local::LocalRank;
use crate::transport::net_edge::{NetIn, NetInEdge};
use crate::transport::wire_tag::WireTag;

/// The receiving side of a datagram edge (module docs).
#[derive(Debug)]
pub(crate) struct DgramIn {
    pub(crate) net: NetIn,
    /// The engine's id of the connection.
    pub(crate) id: u64,
    /// udp or mem.
    pub(crate) kind: TransportKind,
    /// The tag of the message this edge delivered last (or its active message's word).
    pub(crate) delivered_tag: WireTag,
    /// Whether the message a look left for a larger buffer (`BufferTooSmall`) is an active
    /// message.
    pub(crate) next_active: bool,
}

impl DgramIn {
    /// The edge the engine accepted from `peer` (its handshake completed).
    pub(crate) fn accepted(peer: Addr, kind: TransportKind, id: u64) -> DgramIn {
        DgramIn {
            net: NetIn::accepted(peer, kind.name(), None),
            id,
            kind,
            delivered_tag: WireTag::default(),
            next_active: false,
        }
    }

    /// The reverse edge of the connection `id` this endpoint opened to `peer`.
    pub(crate) fn reverse(peer: Addr, kind: TransportKind, id: u64) -> DgramIn {
        DgramIn {
            net: NetIn::reverse(peer, kind.name(), None),
            id,
            kind,
            delivered_tag: WireTag::default(),
            next_active: false,
        }
    }

    /// One look for a whole message for `dest` (the engine was polled by the caller); the
    /// raw outcome, for [`settle_look`](crate::transport::net_edge::settle_look).
    pub(crate) fn take(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
        local: &LocalRank,
        config: &Config,
    ) -> Result<Option<usize>> {
        if let Some(err) = self.report_broken() {
            return Err(err);
        }
        let engine = local
            .dgram
            .as_deref()
            .expect("dgram connections need the engine");
        let taken = engine.take(local, self.id, dest, wait, config);
        if !self.net.active && !matches!(taken, Ok(None) | Err(DgramTake::Closed)) {
            // Delivered, or an error: does it concern what the peer sent us?
            self.net.active = matches!(taken, Ok(Some(_))) || engine.peer_sent(self.id);
        }
        match taken {
            Ok(Some((len, tag))) => {
                self.delivered_tag = tag;
                Ok(Some(len))
            }
            Ok(None) => Ok(None),
            Err(DgramTake::Closed) => {
                self.net.state = InboundState::Done;
                // A connection the peer never sent on (ours, answered by nothing) ends
                // without a report here: its end is the outbound edge's.
                self.net.end.closed = self.net.active;
                Ok(None)
            }
            Err(DgramTake::Failed(detail)) => {
                self.net.state = InboundState::Broken(detail);
                Ok(None)
            }
            Err(DgramTake::Error(e @ Error::BufferTooSmall { .. })) => {
                self.next_active = engine.next_is_active(self.id);
                Err(e)
            }
            Err(DgramTake::Error(e)) => Err(e),
        }
    }

    /// Whether the edge is open and the peer has sent on it: the lone-edge receive path
    /// may take its messages.
    pub(crate) fn open_and_active(&self) -> bool {
        self.net.state == InboundState::Open && self.net.active
    }

    /// Whether a receive would find a message here now (for `arm`).
    pub(crate) fn has_pending(&self, engine: &DgramShared) -> bool {
        self.net.state == InboundState::Open && engine.readable(self.id)
    }

    /// Whether the edge still delivers (or has an error to report); a reverse edge only
    /// once the peer has sent on it.
    pub(crate) fn is_live(&mut self) -> bool {
        self.net.state != InboundState::Done && !self.silent()
    }
}

impl NetInEdge for DgramIn {
    fn net(&self) -> &NetIn {
        &self.net
    }

    fn silent(&mut self) -> bool {
        !self.net.active
    }

    fn finish(&mut self) {
        self.net.state = InboundState::Done;
    }

    fn mid_message(&self) -> bool {
        false
    }

    fn bound_to_posted(&self) -> bool {
        false
    }
}
