//! The four handshake message kinds and their codes.
//!
//! Layer: quiver-wire, the bottom. Codes only; the order they are exchanged in is the
//! business of `quiver_proto::handshake`.

use core::fmt;

/// The four handshake messages, in the order they are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageKind {
    /// Initiator → responder: who is connecting, plus the initiator's nonce.
    Hello = 1,
    /// Responder → initiator: status, the responder's nonce and MAC.
    Challenge = 2,
    /// Initiator → responder: the initiator's MAC.
    Proof = 3,
    /// Responder → initiator: whether the proof was accepted, and the responder's
    /// confirmation MAC.
    Verdict = 4,
}

impl MessageKind {
    /// The kind for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Hello),
            2 => Some(Self::Challenge),
            3 => Some(Self::Proof),
            4 => Some(Self::Verdict),
            _ => None,
        }
    }

    /// The wire code of this kind.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Hello => "Hello",
            Self::Challenge => "Challenge",
            Self::Proof => "Proof",
            Self::Verdict => "Verdict",
        })
    }
}
