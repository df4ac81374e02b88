//! The receiving side of a datagram edge ([`DgramIn`]): the engine's connection holds the
//! protocol state and the message being reassembled; this edge takes whole messages out of
//! it (`DgramShared::take`), binds a message still arriving to the posted receive a look
//! gave it (`Engine::bind_next`, within `DgramShared::take`: the engine places its frames in the receive's
//! buffer) and reports the connection's end once.

use super::engine::DgramShared;
use super::messages::DgramTake;
use super::posted_reads::RecvDone;
use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::dest::Dest;
use crate::transport::inbound_state::InboundState;
use crate::transport::local::LocalRank;
use crate::transport::net_edge::{NetIn, NetInEdge};
use crate::transport::requests::{RecvCompletion, RecvState, Requests};
use crate::transport::wire_tag::WireTag;

/// The engine tokens of posted receives an edge binds to its messages
/// ([`DgramIn::bound`]) have this bit set: the endpoint's lone-edge receives
/// (`DgramSide::bind_recvs`) count up from 0 and never share a connection with them.
const BOUND_TOKEN: u64 = 1 << 63;

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
    /// The tag of the message a look left for a larger buffer (`BufferTooSmall`), or that
    /// it is an active message.
    pub(crate) next_tag: WireTag,
    /// The posted receive bound to the message arriving now (engine token, request): the
    /// engine holds its buffer and places the message's frames there; the edge delivers
    /// nothing else until it is collected ([`DgramIn::progress_bound`]).
    bound: Option<(u64, Key)>,
    /// Receives bound so far (the next token).
    binds: u64,
}

impl DgramIn {
    /// The edge the engine accepted from `peer` (its handshake completed).
    pub(crate) fn accepted(peer: Addr, kind: TransportKind, id: u64) -> DgramIn {
        Self::on(NetIn::accepted(peer, kind.name(), None), kind, id)
    }

    /// The reverse edge of the connection `id` this endpoint opened to `peer`.
    pub(crate) fn reverse(peer: Addr, kind: TransportKind, id: u64) -> DgramIn {
        Self::on(NetIn::reverse(peer, kind.name(), None), kind, id)
    }

    /// An edge of connection `id` over `net`, nothing delivered or bound yet.
    fn on(net: NetIn, kind: TransportKind, id: u64) -> DgramIn {
        DgramIn {
            net,
            id,
            kind,
            delivered_tag: WireTag::default(),
            next_tag: WireTag::default(),
            bound: None,
            binds: 0,
        }
    }

    /// One look for a whole message for `dest` (the engine was polled by the caller); the
    /// raw outcome, for [`settle_look`](crate::transport::net_edge::settle_look). A posted
    /// receive's look (`dest` is [`Dest::Posted`], not waiting) at a message that has begun
    /// but is not whole binds the receive to it instead (`Engine::bind_next`): its
    /// buffer moves into the engine, the request becomes [`RecvState::Bound`] (counted in
    /// `requests.bound_recvs`), `bound` is set in `dest`, and the look takes nothing.
    pub(crate) fn take(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
        (local, config): (&LocalRank, &Config),
        requests: &mut Requests,
    ) -> Result<Option<usize>> {
        if self.bound.is_some() {
            // Its later messages wait behind the bound one; its errors go to that receive.
            return Ok(None);
        }
        if let Some(err) = self.report_broken() {
            return Err(err);
        }
        let engine = local
            .dgram
            .as_deref()
            .expect("dgram connections need the engine");
        let token = BOUND_TOKEN | self.binds;
        let taken = engine.take(local, (self.id, token), dest, wait, config);
        if let Dest::Posted {
            key, bound: true, ..
        } = dest
        {
            self.binds += 1;
            self.bound = Some((token, *key));
            self.net.active = true;
            requests.set_recv(*key, RecvState::Bound);
            requests.bound_recvs += 1;
            return Ok(None);
        }
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
                self.next_tag = engine.next_tag(self.id);
                Err(e)
            }
            Err(DgramTake::Error(e)) => Err(e),
        }
    }

    /// What became of the posted receive bound to this edge's message
    /// ([`DgramIn::take`]): its key and outcome once the message is whole (its source,
    /// tag and length), or once the connection ended in the middle of it (the edge's
    /// error, `Unreachable`; the edge is done then, its end reported to that receive).
    /// None: still arriving, or no receive is bound here.
    pub(crate) fn progress_bound(
        &mut self,
        local: &LocalRank,
    ) -> Option<(Key, Result<RecvCompletion>)> {
        let (token, key) = self.bound?;
        let engine = local.dgram.as_deref()?;
        let mut done = Vec::new();
        let held = engine.collect_recvs(self.id, false, &mut done);
        let peer = self.net.peer;
        let transport = self.net.transport;
        let unreachable = |detail: String| Error::Unreachable {
            peer,
            transport,
            detail,
        };
        let outcome = done.into_iter().find_map(|finished| match finished {
            RecvDone::Complete {
                token: t,
                buf,
                len,
                tag,
            } if t == token => Some(Ok(RecvCompletion {
                buf,
                len,
                src: peer,
                tag: tag.value,
            })),
            RecvDone::TooSmall { token: t, buf, len } if t == token => {
                Some(Err(Error::BufferTooSmall {
                    message: len,
                    buffer: buf.len(),
                }))
            }
            // Not reached: the receive's message begins as it is bound (its header is
            // next in order), so an end finds it begun.
            RecvDone::Returned { token: t, .. } if t == token => Some(Err(unreachable(
                "the connection ended as a receive was bound to its message".into(),
            ))),
            RecvDone::Failed { token: t, why } if t == token => Some(Err(unreachable(why))),
            _ => None,
        });
        let outcome = match (outcome, held) {
            (Some(outcome), _) => outcome,
            (None, None) => Err(unreachable(
                "the connection ended in the middle of a message".into(),
            )),
            (None, Some(_)) => return None,
        };
        self.bound = None;
        if outcome.is_err() {
            // The connection's end went to the bound receive.
            self.finish();
        }
        Some((key, outcome))
    }

    /// Ends the edge because this endpoint closed the connection (`Endpoint::close`): the
    /// key of a posted receive bound to a message in progress on it, for the caller to
    /// fail (its buffer stays with the engine until the connection is forgotten).
    pub(crate) fn close_here(&mut self) -> Option<Key> {
        self.finish();
        self.bound.take().map(|(_, key)| key)
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
        self.bound.is_some()
    }
}
