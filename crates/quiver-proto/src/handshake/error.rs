//! What can go wrong in a handshake, and how wire errors map to it.
//!
//! Layer: sans-IO, inside [`crate::handshake`]. It owns [`HandshakeError`] and the checks
//! shared by both sides (params length, wire error classification). No I/O.

use quiver_wire::handshake::{MessageKind, WireError, MAX_PARAMS_LEN, VERSION};

/// Why a handshake failed, or why a call was refused.
///
/// Errors caused by the peer's bytes leave the state machine failed for good (close the
/// connection after sending what
/// [`Initiator::poll_transmit`](crate::handshake::Initiator::poll_transmit) /
/// [`Responder::poll_transmit`](crate::handshake::Responder::poll_transmit) still hand out). Local
/// misuse ([`HandshakeError::UnexpectedCall`], [`HandshakeError::ParamsTooLong`],
/// [`HandshakeError::BufferTooSmall`]) changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer's bytes are not a valid message of the expected kind.
    #[error("malformed handshake message: {0}")]
    Malformed(WireError),
    /// The peer speaks another handshake version.
    #[error("handshake version mismatch: ours {ours}, theirs {theirs}")]
    VersionMismatch {
        /// [`VERSION`].
        ours: u8,
        /// The peer's version (equal to `ours` if the peer only said, in our version, that it
        /// does not support it).
        theirs: u8,
    },
    /// The two ends belong to different jobs.
    #[error("wrong job: ours {ours:#018x}, theirs {}", OptionalJobId(*theirs))]
    WrongJob {
        /// Our job id.
        ours: u64,
        /// The peer's job id: known to a responder, `None` for an initiator told by the
        /// responder.
        theirs: Option<u64>,
    },
    /// A MAC did not verify: the peer does not hold our job key (or the bytes were altered or
    /// replayed on the way).
    #[error("handshake authentication failed: the {message} MAC did not verify")]
    AuthenticationFailed {
        /// The message whose MAC failed. For an initiator, [`MessageKind::Proof`] means the
        /// responder rejected our proof in its Verdict.
        message: MessageKind,
    },
    /// The peer sent a valid message of the wrong kind for this step.
    #[error("unexpected handshake message: expected {expected}, got {actual}")]
    UnexpectedMessage {
        /// The kind this step takes.
        expected: MessageKind,
        /// The kind received.
        actual: MessageKind,
    },
    /// The responder has no endpoint at the requested port.
    #[error("no endpoint at port {port}")]
    NoSuchEndpoint {
        /// The requested port.
        port: u16,
    },
    /// The responder's endpoint takes no more connections now.
    #[error("endpoint at port {port} is busy")]
    Busy {
        /// The requested port.
        port: u16,
    },
    /// Local misuse: the method does not fit the current state (see the call protocol on the
    /// type), or a message is still waiting in `poll_transmit`.
    #[error("`{call}` is not allowed while {state}")]
    UnexpectedCall {
        /// The method called.
        call: &'static str,
        /// The state it was called in.
        state: &'static str,
    },
    /// Local misuse: transport params longer than [`MAX_PARAMS_LEN`].
    #[error("params are {len} bytes, at most {max} allowed")]
    ParamsTooLong {
        /// Length given.
        len: usize,
        /// [`MAX_PARAMS_LEN`].
        max: usize,
    },
    /// Local misuse: the buffer given to `poll_transmit` cannot hold the pending message.
    /// [`MAX_MESSAGE_LEN`](quiver_wire::handshake::MAX_MESSAGE_LEN) bytes always suffice.
    #[error("output buffer holds {actual} bytes, message needs {needed}")]
    BufferTooSmall {
        /// Length of the pending message.
        needed: usize,
        /// Length of the buffer given.
        actual: usize,
    },
}

/// Maps a structural wire error on a message we expected to be `expected`.
pub(super) fn classify_wire_error(error: WireError, expected: MessageKind) -> HandshakeError {
    match error {
        WireError::UnsupportedVersion { actual, .. } => HandshakeError::VersionMismatch {
            ours: VERSION,
            theirs: actual,
        },
        WireError::WrongKind { actual, .. } => {
            HandshakeError::UnexpectedMessage { expected, actual }
        }
        other => HandshakeError::Malformed(other),
    }
}

pub(super) fn check_params_len(params: &[u8]) -> Result<(), HandshakeError> {
    if params.len() > MAX_PARAMS_LEN {
        return Err(HandshakeError::ParamsTooLong {
            len: params.len(),
            max: MAX_PARAMS_LEN,
        });
    }
    Ok(())
}

/// Shows an optional job id in error messages.
struct OptionalJobId(Option<u64>);

impl core::fmt::Display for OptionalJobId {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(job_id) => write!(formatter, "{job_id:#018x}"),
            None => formatter.write_str("unknown (the responder refused ours)"),
        }
    }
}
