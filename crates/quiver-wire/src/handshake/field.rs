//! Byte offsets of every field of the handshake messages, as named ranges into a message.
//!
//! Layer: quiver-wire, the bottom. Offsets only: no reads, no checks.

use core::ops::{Range, RangeFrom};

/// Prefix: the magic bytes "QVHS".
pub const MAGIC: Range<usize> = 0..4;
/// Prefix: the version byte.
pub const VERSION: usize = 4;
/// Prefix: the message kind byte.
pub const KIND: usize = 5;
/// Prefix: total message length, u16.
pub const LENGTH: Range<usize> = 6..8;

/// Hello: job id, u64.
pub const HELLO_JOB_ID: Range<usize> = 8..16;
/// Hello: the initiator's rank, u32.
pub const HELLO_SRC_RANK: Range<usize> = 16..20;
/// Hello: the initiator's endpoint port, u16.
pub const HELLO_SRC_PORT: Range<usize> = 20..22;
/// Hello: the port of the endpoint being connected to, u16.
pub const HELLO_DST_PORT: Range<usize> = 22..24;
/// Hello: the initiator's fresh nonce.
pub const HELLO_NONCE_I: Range<usize> = 24..56;
/// Hello: the initiator's MAC over the bytes before it, proving the job key.
pub const HELLO_MAC_H: Range<usize> = 56..88;

/// Challenge: status byte.
pub const CHALLENGE_STATUS: usize = 8;
/// Challenge: reserved, zero.
pub const CHALLENGE_RESERVED: Range<usize> = 9..12;
/// Challenge: the responder's fresh nonce.
pub const CHALLENGE_NONCE_R: Range<usize> = 12..44;
/// Challenge: the responder's MAC.
pub const CHALLENGE_MAC_R: Range<usize> = 44..76;
/// Challenge: the responder's transport parameters (rest of the message).
pub const CHALLENGE_PARAMS_R: RangeFrom<usize> = 76..;

/// Proof: the initiator's MAC.
pub const PROOF_MAC_I: Range<usize> = 8..40;
/// Proof: the initiator's transport parameters (rest of the message).
pub const PROOF_PARAMS_I: RangeFrom<usize> = 40..;

/// Verdict: status byte.
pub const VERDICT_STATUS: usize = 8;
/// Verdict: reserved, zero.
pub const VERDICT_RESERVED: Range<usize> = 9..12;
/// Verdict: the responder's confirmation MAC.
pub const VERDICT_MAC_V: Range<usize> = 12..44;
