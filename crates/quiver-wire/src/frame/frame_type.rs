//! What a frame carries: the type byte of a full frame (a Stream frame is told apart by
//! its first byte instead).
//!
//! Layer: quiver-wire, the bottom. Codes only: what each type means to a connection is
//! decided in `quiver_proto::reliable`.

use core::fmt;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// A handshake message (`quiver_wire::handshake`) as payload.
    Handshake = 1,
    /// Message bytes; consumes a packet number and is acknowledged.
    Data = 2,
    /// Acknowledgement and credit only.
    Ack = 3,
    /// Keepalive / probe: asks for an immediate Ack.
    Ping = 4,
    /// Graceful close: the sender will send no more data; consumes a packet number.
    Close = 5,
    /// The receiver does not know the connection named by the offending frame.
    Reset = 6,
    /// Raw stream bytes in the compact 16-byte layout (see the docs of the `frame` module);
    /// consumes a packet number and is acknowledged. Its code is never on the wire:
    /// [`STREAM_TAG`](super::STREAM_TAG) marks the layout.
    Stream = 7,
}

impl FrameType {
    /// The type for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Handshake),
            2 => Some(Self::Data),
            3 => Some(Self::Ack),
            4 => Some(Self::Ping),
            5 => Some(Self::Close),
            6 => Some(Self::Reset),
            7 => Some(Self::Stream),
            _ => None,
        }
    }

    /// The wire code of this type.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for FrameType {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, formatter)
    }
}
