//! The constants of the datagram frame layout (magic, version, lengths, limits) and the
//! check of a frame's first bytes.
//!
//! Layer: quiver-wire, the bottom. Owns the numbers every other part of [`super`] sizes
//! its buffers and checks by; no I/O, no allocation.

use super::field;

/// The first two bytes of every frame (ASCII "QD", quiver datagram).
pub const MAGIC: [u8; 2] = *b"QD";
/// The frame format version this code speaks. Peers must match exactly. Version 2 added
/// [`flags::PING_REPLY`](super::flags::PING_REPLY),
/// [`flags::SACK_TRUNCATED`](super::flags::SACK_TRUNCATED) and further SACK ranges in the
/// payload of Ack frames (multi-path connections, `docs/striping.md`); version 3 the 16-byte
/// Stream frame (version 2's had 24 bytes: "QD", version, type and the full destination
/// id); version 4 the XXH3-64 integrity check (versions 1-3 used CRC32C; same layouts);
/// version 5 checks the payload with CRC32C instead, the header still with XXH3-64; version 6
/// replaces the check with a keyed authenticator (decision 0067; same layouts).
pub const VERSION: u8 = 6;
/// First byte of a Stream frame (a full frame's first byte is `'Q'`).
pub const STREAM_TAG: u8 = 0xC0 | VERSION;
/// Bits of the destination connection id a Stream frame carries (the low ones).
pub const SHORT_ID_BITS: u32 = 24;
/// Length of the header without SACK ranges, in bytes.
pub const FIXED_HEADER_LEN: usize = field::STREAM_OFFSET.end;
/// Length of one encoded SACK range, in bytes.
pub const SACK_RANGE_LEN: usize = 8;
/// Most SACK ranges one frame can carry.
pub const MAX_SACK_RANGES: usize = 16;
/// Longest header, in bytes: a buffer of this size holds any header.
pub const MAX_HEADER_LEN: usize = FIXED_HEADER_LEN + MAX_SACK_RANGES * SACK_RANGE_LEN;
/// Length of a Stream frame's header, in bytes.
pub const STREAM_HEADER_LEN: usize = field::stream::STREAM_OFFSET.end;
/// Longest payload one frame can carry (the `payload_len` field is a u16).
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;
/// Most SACK ranges of one Ack frame, header and payload together.
pub const MAX_ACK_RANGES: usize = 128;
