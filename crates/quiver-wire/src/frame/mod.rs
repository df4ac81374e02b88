//! Datagram frames: the unit the reliable protocol (`quiver_proto::reliable`) exchanges over
//! UDP and the in-memory transport (`docs/protocol.md`, section "Datagram frames (udp /
//! in-memory)").
//!
//! This module owns the byte layout only: what each frame type means and when to send it is
//! decided in `quiver_proto::reliable`. No I/O, no allocation, no clock.
//!
//! # Layout
//!
//! A datagram is one frame: a header of [`FIXED_HEADER_LEN`] bytes plus 8 bytes per SACK
//! range, followed by `payload_len` payload bytes. All integers are little-endian.
//!
//! ```text
//!  0       2       3       4       5       6       8              12
//! +-------+-------+-------+-------+-------+-------+---------------+
//! | "QD"  |version| type  | flags | sacks |pay.len|   checksum    |
//! +-------+-------+-------+-------+-------+-------+---------------+
//! 12              20              28              36              44
//! +---------------+---------------+---------------+---------------+
//! |  dest_id u64  |  src_id u64   | packet_number |cumulative_ack |
//! +---------------+---------------+---------------+---------------+
//! 44              52              60              68              76              84
//! +---------------+---------------+---------------+---------------+---------------+
//! |  credit u64   |  message_id   |  message_len  |fragment_offset| stream_offset |
//! +---------------+---------------+---------------+---------------+---------------+
//! 84 + 8*i        88 + 8*i        92 + 8*i           (i < sacks <= MAX_SACK_RANGES)
//! +---------------+---------------+
//! | start - cum   |  length u32   |   SACK range i: packets [start, start + length)
//! +---------------+---------------+
//! header_len = 84 + 8 * sacks, then payload_len bytes of payload.
//! ```
//!
//! `checksum` is the frame's tag (version 6, decision 0067): keyed, it authenticates the
//! frame. Under a [`FrameKey`] (a secret polynomial `P` of degree 64 and an AES-128 key
//! `K`; [`FrameKeys`] says which key covers which type),
//!
//! ```text
//! h   = CRC-64_P( bytes[0..8] || bytes[12..header_len] || payload )
//! tag = low 32 bits of AES_K( h || bytes[28..32] || bytes[6..8] || bytes[3] || 1 )
//! ```
//!
//! so every header byte except the field itself and every payload byte enter it, and the
//! payload stays a separate piece (a sender may keep it apart from the header, as the udp
//! transport's gathered sends do; a receiver may have it elsewhere, as the scattering
//! receive does). A frame corrupted, forged or sent under another key makes
//! [`Frame::parse`] fail with [`FrameError::ChecksumMismatch`] but with probability 2^-32;
//! a connection frame with no connection key at hand is [`FrameError::NoKey`].
//!
//! SACK ranges are relative to `cumulative_ack` (the next packet number the sender of the
//! frame expects; every packet below it arrived). Each range starts above the cumulative ack,
//! is non-empty, and ranges are strictly ascending and do not touch (a gap separates them).
//!
//! # Stream frames (type 7)
//!
//! A compact data frame for the common case of a sender with nothing to acknowledge: raw
//! bytes of the connection's stream (message length prefixes included), no ack fields, no
//! message fields, a 16-byte header instead of 84, so that a 1500-byte MTU carries more
//! payload (1456 bytes) than a TCP segment with timestamps (1448):
//!
//! ```text
//!  0      1                     4              8              12             16
//! +------+---------------------+--------------+--------------+--------------+
//! | tag  | dest_id low 24 bits |   checksum   | pn low 32    | offset low 32|
//! +------+---------------------+--------------+--------------+--------------+
//! then the payload: the rest of the datagram.
//! ```
//!
//! - `tag` is [`STREAM_TAG`] (`0xC0 | VERSION`): a full frame starts with `'Q'`, so the
//!   first byte tells the layouts apart, and a peer of another version rejects either.
//! - Only the low 24 bits of the destination connection id travel ([`short_id`]); the
//!   receiver finds its connection by them (each side chooses its ids so that their low 24
//!   bits are unique among its connections) and the full 64-bit id is part of the checksum.
//! - `checksum` (the tag) covers the full destination id (a pseudo header that does not
//!   travel), bytes `0..4`, bytes `8..16` and the payload:
//!
//!   ```text
//!   h   = CRC-64_P( u64_le(dest_id) || bytes[0..4] || bytes[8..16] || payload )
//!   tag = low 32 bits of AES_K( h || bytes[8..12] || u16_le(payload length) || 7 || 2 )
//!   ```
//!
//!   A frame that reaches a connection whose id shares its low 24 bits but is not the one
//!   the sender meant fails it, as a forged frame does. Verifying it therefore needs the
//!   receiving connection's id: [`Frame::parse_for`]; [`Frame::parse`] refuses Stream
//!   frames ([`FrameError::NeedsConnectionId`]).
//! - The packet number and the stream offset travel as their low 32 bits; the receiver
//!   takes the values nearest to what it expects (its cumulative ack, its in-order stream
//!   end), which is unambiguous while the in-flight cap and the receive window stay far
//!   below 2^31.
//!
//! [`FrameHeader`] holds the full destination id in `dest_id`, the low bits of the packet
//! number and offset in `packet_number` and `stream_offset`, every other field zero;
//! [`FrameHeader::emit`] writes only the low 24 bits of the id and the low 32 bits of both
//! numbers.
//!
//! The payload of an Ack frame holds further SACK ranges ([`MoreSackRanges`]), 8 bytes
//! each in the same encoding, continuing the header's list under the same rules (at most
//! [`MAX_ACK_RANGES`] in all): a connection striped over links of different delays has
//! many more holes than the header has room for.
//!
//! # The no-panic contract
//!
//! - [`Frame::parse`] checks, in this order: a Stream tag of another version (first byte
//!   `0xC0 | v`, v not [`VERSION`]: [`FrameError::UnsupportedVersion`]), length of the
//!   fixed header, magic, version, type, flags, SACK count, total length (`header_len +
//!   payload_len == datagram length`), the key of the type, the tag, SACK ranges. [`Frame::parse_for`] does
//!   the same, and for a Stream frame (tag byte) its 16-byte length, the short destination
//!   id, then the checksum. On success every accessor of the returned view is infallible.
//! - [`FrameHeader::emit`] checks its inputs (buffer room, payload length, SACK ranges) and
//!   returns an error instead of panicking.
//! - [`dest_id`] and [`destination`] never panic and validate only the magic and version
//!   (or the Stream tag).
//! - A header that parsed emits the same bytes again (the encoding is canonical: there are no
//!   reserved or unparsed bits).
//!
//! # Files
//!
//! - `codec.rs`: the path every datagram takes, in one module (its docs say why): SACK
//!   ranges as the header holds them, the header and its emission, checked views of
//!   received frames, whom a datagram is for before verification, the tag.
//! - `auth.rs`: the frame keys (the secret polynomial, drawn by Ben-Or's irreducibility
//!   test, its folding keys for `crc-fast`, the AES key) and which key covers which type.
//! - `layout.rs`: the constants of the layout; `field.rs` and `flags.rs`: field offsets and
//!   flag bits (public as [`field`] and [`flags`]).
//! - `frame_type.rs`, `error.rs`: what a frame carries, and why bytes are not a frame.
//! - `more_sack_ranges.rs`: the further SACK ranges in the payload of an Ack.
//! - `message.rs`: the header of a message in a connection's byte stream (length prefix,
//!   and the tag of a tagged message), which frames carry without looking inside.

mod auth;
mod codec;
mod error;
pub mod field;
pub mod flags;
mod frame_type;
mod layout;
mod message;
mod more_sack_ranges;

pub use auth::{FrameKey, FrameKeys, FRAME_SECRET_LEN};
pub use codec::{
    dest_id, destination, parse_stream_split, short_id, Destination, Frame, FrameHeader, SackRange,
    SackRanges,
};
pub use error::FrameError;
pub use frame_type::FrameType;
pub use layout::{
    FIXED_HEADER_LEN, MAGIC, MAX_ACK_RANGES, MAX_HEADER_LEN, MAX_PAYLOAD_LEN, MAX_SACK_RANGES,
    SACK_RANGE_LEN, SHORT_ID_BITS, STREAM_HEADER_LEN, STREAM_TAG, VERSION,
};
pub use message::{
    MessagePrefix, MAX_MESSAGE_PAYLOAD, MESSAGE_ACTIVE, MESSAGE_PREFIX_LEN, MESSAGE_TAGGED,
    MESSAGE_TAG_LEN,
};
pub use more_sack_ranges::MoreSackRanges;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.
mod tests;
