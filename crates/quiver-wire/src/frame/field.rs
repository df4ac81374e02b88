//! Byte offsets of every field of the fixed header (and, in [`stream`], of a Stream
//! frame's header).
//!
//! Layer: quiver-wire, the bottom. Offsets only: no reads, no checks.

use core::ops::Range;

/// Magic "QD".
pub const MAGIC: Range<usize> = 0..2;
/// Version byte.
pub const VERSION: usize = 2;
/// Frame type byte ([`super::FrameType`]).
pub const TYPE: usize = 3;
/// Flags byte ([`super::flags`]).
pub const FLAGS: usize = 4;
/// Number of SACK ranges after the fixed header.
pub const SACK_COUNT: usize = 5;
/// Payload length, u16.
pub const PAYLOAD_LEN: Range<usize> = 6..8;
/// Integrity check, u32 (see the docs of the `frame` module).
pub const CHECKSUM: Range<usize> = 8..12;
/// Destination connection id, u64 (0: a new connection's first Hello).
pub const DEST_ID: Range<usize> = 12..20;
/// Source connection id, u64.
pub const SRC_ID: Range<usize> = 20..28;
/// Packet number, u64.
pub const PACKET_NUMBER: Range<usize> = 28..36;
/// Cumulative ack: next packet number expected, u64.
pub const CUMULATIVE_ACK: Range<usize> = 36..44;
/// Receive credit: stream offset the peer may send up to (exclusive), u64.
pub const CREDIT: Range<usize> = 44..52;
/// Message id, u64.
pub const MESSAGE_ID: Range<usize> = 52..60;
/// Total message length in bytes, u64.
pub const MESSAGE_LEN: Range<usize> = 60..68;
/// Offset of the payload within its message, u64.
pub const FRAGMENT_OFFSET: Range<usize> = 68..76;
/// Offset of the payload within the connection's byte stream, u64.
pub const STREAM_OFFSET: Range<usize> = 76..84;

/// The fields of a Stream frame (type 7, recognised by its first byte).
pub mod stream {
    use core::ops::Range;

    /// [`super::super::STREAM_TAG`].
    pub const TAG: usize = 0;
    /// Low 24 bits of the destination connection id (little-endian).
    pub const SHORT_DEST_ID: Range<usize> = 1..4;
    /// Integrity check, u32 (see the docs of the `frame` module).
    pub const CHECKSUM: Range<usize> = 4..8;
    /// Low 32 bits of the packet number.
    pub const PACKET_NUMBER: Range<usize> = 8..12;
    /// Low 32 bits of the payload's stream offset.
    pub const STREAM_OFFSET: Range<usize> = 12..16;
}
