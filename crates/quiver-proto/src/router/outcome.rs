//! What the router says to do with one datagram.
//!
//! Layer: sans-IO, inside [`crate::router`]. Plain data: the [`Routed`] verdict, the
//! [`Accepted`] connection it may hand over, and the [`DropReason`] of a datagram nobody
//! takes. No logic, no I/O.

use crate::handshake::{ConnectRequest, RejectReason};
use crate::reliable::{AcceptError, ReliableConnection};

/// What to do with one received datagram ([`crate::router::Router::handle`]).
#[must_use = "a routed datagram must be delivered, answered or counted"]
#[derive(Debug)]
pub enum Routed<'a, C> {
    /// The datagram is for connection `id` (its full id, or the short id of a Stream frame
    /// that names it): feed it to the connection on the path it arrived on. The connection
    /// verifies it (a Stream frame's checksum covers the full id).
    Connection {
        /// The connection's id.
        id: u64,
        /// The caller's connection value.
        connection: &'a mut C,
    },
    /// A Hello answered before (retransmitted, on any link): feed it to connection `id`,
    /// which answers it again. `connection` is `None` when that connection has left the
    /// table; the repeat is then ignored (it must not open a second connection).
    RepeatedHello {
        /// The connection the Hello opened.
        id: u64,
        /// The caller's connection value, if it is still in the table.
        connection: Option<&'a mut C>,
    },
    /// A Hello of the job opened a new inbound connection: the caller wraps it in its
    /// connection value and adds it with [`crate::router::Router::insert`] under
    /// [`Accepted::id`], then has it transmit (its Challenge, or its rejection).
    Accepted(Box<Accepted>),
    /// The datagram names a connection id this router does not know (a connection it
    /// forgot, or a forged id): send these bytes, a Reset frame, back to the datagram's
    /// source from the socket it arrived on.
    Reset(&'a [u8]),
    /// A datagram for id 0 that is a valid frame but not a Hello of this job (wrong job,
    /// version or kind; a MAC that does not prove the job key; a bad configuration from the
    /// host): count it as a refused connection attempt. Nothing was kept.
    Refused {
        /// Why.
        error: AcceptError,
        /// A Handshake frame refusing the Hello (its Challenge says why: another job,
        /// version or key), to send back to the datagram's source from the socket it
        /// arrived on; shorter than the Hello, at most one per
        /// [`crate::router::REFUSAL_INTERVAL_NS`]. `None`: send nothing.
        reply: Option<&'a [u8]>,
    },
    /// Nobody takes the datagram and nothing is sent back: count it.
    Dropped(DropReason),
}

/// A connection the router accepted from a Hello ([`Routed::Accepted`]).
#[derive(Debug)]
pub struct Accepted {
    /// Its connection id here (non-zero, its short id unique in the router's table).
    pub id: u64,
    /// The protocol state, whose first transmit answers the Hello.
    pub connection: ReliableConnection,
    /// Who connects to whom, as the Hello says.
    pub request: ConnectRequest,
    /// The path the Hello arrived on, as [`crate::router::RouterHost::inbound_path`] chose.
    pub path: usize,
    /// `Some` when the router rejected the connection (already done: its first transmit
    /// is the refusal, and the connection has failed): no endpoint is open for it, or the
    /// two endpoints connected to each other at the same moment and the peer's connection
    /// loses ([`RejectReason::Busy`]). The caller keeps it only until the refusal is sent,
    /// and never hands it to an endpoint.
    pub rejection: Option<RejectReason>,
}

/// Why a datagram was dropped without an answer ([`Routed::Dropped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Too short, or wrong magic or version: it names no destination.
    NoDestination,
    /// A Stream frame whose short id names no connection (a Stream frame carries no source
    /// id, so no Reset can answer it).
    UnknownShortId,
    /// A full id that names no connection, in a frame that gets no Reset: a Reset itself,
    /// one from id 0, or one that does not parse (corrupt).
    UnknownId,
    /// Destination id 0, but not a valid frame (corrupt or truncated).
    MalformedHello,
    /// A Hello on a link this node does not share with the rank it claims
    /// ([`crate::router::RouterHost::inbound_path`] said `None`).
    UnsharedPath,
}
