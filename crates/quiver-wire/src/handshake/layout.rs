//! The constants of the handshake layout: magic, version and the length of each message.
//!
//! Layer: quiver-wire, the bottom. Numbers only; no I/O, no allocation.

use super::field;

/// The four bytes every handshake message starts with (ASCII "QVHS").
pub const MAGIC: [u8; 4] = *b"QVHS";
/// The handshake version this code speaks. Peers must match exactly.
pub const VERSION: u8 = 2;
/// Length of the common prefix in bytes.
pub const PREFIX_LEN: usize = 8;
/// Length of a nonce in bytes.
pub const NONCE_LEN: usize = 32;
/// Length of a MAC in bytes.
pub const MAC_LEN: usize = 32;
/// Largest `params` field a Challenge or Proof may carry, in bytes.
pub const MAX_PARAMS_LEN: usize = 256;
/// Length of a Hello in bytes.
pub const HELLO_LEN: usize = field::HELLO_MAC_H.end;
/// Length of a Challenge without params, in bytes.
pub const CHALLENGE_FIXED_LEN: usize = field::CHALLENGE_MAC_R.end;
/// Length of a Proof without params, in bytes.
pub const PROOF_FIXED_LEN: usize = field::PROOF_MAC_I.end;
/// Length of a Verdict in bytes.
pub const VERDICT_LEN: usize = field::VERDICT_MAC_V.end;
/// Longest handshake message of this version, in bytes: a buffer of this size holds any of
/// them.
pub const MAX_MESSAGE_LEN: usize = CHALLENGE_FIXED_LEN + MAX_PARAMS_LEN;
