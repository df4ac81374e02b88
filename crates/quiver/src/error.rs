//! The error type of the public API.

use std::io;

use crate::Addr;

/// Result of a quiver operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong, sorted by who caused it: a busy resource (`WouldBlock`),
/// the caller (`BufferTooSmall`, `InvalidArgument`, `Config`), a peer (`PeerDead`,
/// `PeerClosed`, `Corrupt`, `Refused`), time (`Timeout`) or the operating system (`Io`).
/// Peer errors affect one connection; every other connection keeps working.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operation cannot proceed without waiting (ring full, nothing arrived yet).
    #[error("operation would block")]
    WouldBlock,
    /// The next message is larger than the buffer offered for it. The message stays queued:
    /// receive it with a larger buffer or with `recv_pooled`.
    #[error("receive buffer of {buffer} bytes is too small for the next message of {message} bytes (the message is kept; use a larger buffer or recv_pooled)")]
    BufferTooSmall {
        /// Length of the waiting message.
        message: usize,
        /// Length of the buffer offered.
        buffer: usize,
    },
    /// The peer process exited (or was killed) while this connection was in use.
    #[error("peer {peer} died (its process exited) {during}")]
    PeerDead {
        /// The peer's address.
        peer: Addr,
        /// What was happening, e.g. "while receiving".
        during: &'static str,
    },
    /// The peer closed its end of the connection.
    #[error("peer {peer} closed the connection")]
    PeerClosed {
        /// The peer's address.
        peer: Addr,
    },
    /// The peer broke the shared-memory protocol (a crash mid-write or a scribbler): the
    /// connection is closed; no data from it after this point is trusted.
    #[error("connection with {peer} is corrupted: {detail}; the connection was closed")]
    Corrupt {
        /// The peer's address.
        peer: Addr,
        /// What was found.
        detail: String,
    },
    /// The connection to the peer broke on the network side: a TCP reset or end of stream
    /// without a close, or no answer (not even to keepalives) for the idle timeout over
    /// udp. The peer may have died, frozen, or the network between may be down.
    #[error("peer {peer} unreachable over {transport}: {detail}")]
    Unreachable {
        /// The peer's address.
        peer: Addr,
        /// The transport of the connection ("tcp", "udp", ...).
        transport: &'static str,
        /// What was seen, and when.
        detail: String,
    },
    /// The peer refused the connection or failed to prove membership of the job.
    #[error("connection to {peer} refused: {reason}")]
    Refused {
        /// The peer's address.
        peer: Addr,
        /// Why, e.g. "wrong job key".
        reason: String,
    },
    /// A blocking operation did not complete in time.
    #[error("timed out after {millis} ms {what}")]
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// How long was waited.
        millis: u64,
    },
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A configuration value (usually a `QUIVER_*` environment variable) is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// The operating system refused something.
    #[error("{what}: {source}")]
    Io {
        /// What quiver was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// Whether this is [`Error::WouldBlock`].
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock)
    }
}
