//! Why bytes are not a valid frame, or why a header cannot be emitted.
//!
//! Layer: quiver-wire, the bottom. One error type for parsing and emitting frames; each
//! variant carries the values it found.

use super::frame_type::FrameType;

/// Why bytes are not a valid frame, or why a header cannot be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The datagram is shorter than the header it announces.
    #[error("truncated frame: header needs {needed} bytes, datagram has {actual}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The first two bytes are not [`MAGIC`](super::MAGIC).
    #[error("bad frame magic {actual:?}")]
    BadMagic {
        /// The two bytes found.
        actual: [u8; 2],
    },
    /// The version byte is not [`VERSION`](super::VERSION).
    #[error("unsupported frame version: expected {expected}, got {actual}")]
    UnsupportedVersion {
        /// [`VERSION`](super::VERSION).
        expected: u8,
        /// The version found.
        actual: u8,
    },
    /// The type byte names no frame type.
    #[error("unknown frame type {actual}")]
    UnknownType {
        /// The byte found.
        actual: u8,
    },
    /// Flag bits outside [`flags::ALL`](super::flags::ALL) are set.
    #[error("unknown frame flags {actual:#04x}")]
    UnknownFlags {
        /// The flags byte found.
        actual: u8,
    },
    /// More SACK ranges than [`MAX_SACK_RANGES`](super::MAX_SACK_RANGES).
    #[error("{actual} SACK ranges, at most {max}")]
    TooManySackRanges {
        /// The count found or given.
        actual: usize,
        /// [`MAX_SACK_RANGES`](super::MAX_SACK_RANGES).
        max: usize,
    },
    /// `header_len + payload_len` differs from the datagram's length.
    #[error("frame length mismatch: header says {declared} bytes, datagram has {actual}")]
    LengthMismatch {
        /// Length the header announces.
        declared: usize,
        /// The datagram's length.
        actual: usize,
    },
    /// The authenticator does not match: the frame was corrupted or forged, or was sent
    /// under another key (or, for a Stream frame, was meant for another connection sharing
    /// the short id). The message does not show the computed tag (a forger must not learn
    /// it from a log).
    #[error("authenticator mismatch: frame says {declared:#010x}")]
    ChecksumMismatch {
        /// The checksum field.
        declared: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A SACK range is empty, starts at or below the cumulative ack, overlaps or touches
    /// the previous range, or does not fit the encoding (u32 offset and length, u64 end).
    #[error("invalid SACK range {index}")]
    BadSackRange {
        /// Index of the offending range.
        index: usize,
    },
    /// Emit: the output buffer cannot hold the header.
    #[error("header buffer holds {actual} bytes, header needs {needed}")]
    BufferTooSmall {
        /// The header length.
        needed: usize,
        /// The buffer length.
        actual: usize,
    },
    /// A Stream frame given to [`Frame::parse`](super::Frame::parse): its checksum covers
    /// the receiving connection's full id, so only
    /// [`Frame::parse_for`](super::Frame::parse_for) can verify it.
    #[error("a Stream frame can only be verified by its connection (Frame::parse_for)")]
    NeedsConnectionId,
    /// [`Frame::parse_for`](super::Frame::parse_for): a Stream frame whose short destination
    /// id is not the connection's.
    #[error("Stream frame for short id {actual:#08x}, this connection's is {expected:#08x}")]
    WrongConnection {
        /// The connection's [`short_id`](super::short_id).
        expected: u32,
        /// The short id in the frame.
        actual: u32,
    },
    /// A connection frame (every type but Handshake and Reset) and no connection key to
    /// emit or verify it with: the handshake has not finished (decision 0067).
    #[error("no key for a {frame_type:?} frame: the connection's handshake has not finished")]
    NoKey {
        /// The frame's type.
        frame_type: FrameType,
    },
    /// Emit: the payload is longer than [`MAX_PAYLOAD_LEN`](super::MAX_PAYLOAD_LEN).
    #[error("payload of {actual} bytes, at most {max}")]
    PayloadTooLong {
        /// The payload length.
        actual: usize,
        /// [`MAX_PAYLOAD_LEN`](super::MAX_PAYLOAD_LEN).
        max: usize,
    },
    /// The payload of an Ack is not a whole number of SACK ranges, or holds more than
    /// [`MAX_ACK_RANGES`](super::MAX_ACK_RANGES) with the header's.
    #[error("Ack payload of {len} bytes is not a list of at most {max} SACK ranges")]
    BadAckPayload {
        /// The payload length.
        len: usize,
        /// [`MAX_ACK_RANGES`](super::MAX_ACK_RANGES).
        max: usize,
    },
}
