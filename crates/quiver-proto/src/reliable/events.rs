//! What happens to a connection, and where it is in its life.
//!
//! Layer: sans-IO, inside [`crate::reliable`]: plain types the application pulls
//! ([`Event`]) or reads ([`State`], [`FailReason`]). No logic.

use crate::handshake::{HandshakeError, RejectReason};

/// Why a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailReason {
    /// The handshake failed: wrong key (authentication), wrong job, version, malformed.
    Handshake(HandshakeError),
    /// The responder refused the connection (or, on the responder, `reject` was called).
    Rejected(RejectReason),
    /// The handshake did not finish within `handshake_timeout_ns`.
    HandshakeTimeout,
    /// The peer says the connection is unknown or closed (a Reset frame).
    PeerReset,
    /// The peer stopped answering ([`Event::PeerUnreachable`] was emitted).
    PeerUnreachable,
    /// The peer broke the protocol (acked packets never sent).
    ProtocolViolation,
}

/// What happened to a connection; pull with
/// [`ReliableConnection::poll_event`](crate::reliable::ReliableConnection::poll_event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handshake finished; data flows.
    Established,
    /// No datagram from the peer within `idle_timeout_ns`, or `max_retransmits` timeouts
    /// in a row without progress. The connection is failed ([`State::Failed`]).
    PeerUnreachable,
    /// Both sides closed and every byte was acknowledged. Unread data stays readable.
    Closed,
    /// The connection failed for good.
    Failed(FailReason),
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// The key handshake is running.
    Handshaking,
    /// Data flows both ways.
    Established,
    /// One side asked to close; remaining data is being delivered.
    Closing,
    /// Closed gracefully.
    Closed,
    /// Failed (see
    /// [`ReliableConnection::fail_reason`](crate::reliable::ReliableConnection::fail_reason)).
    Failed,
}
