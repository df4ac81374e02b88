//! Handshake messages: the four messages two endpoints exchange before a connection carries
//! data, proving that both ends hold the job's secret key (`docs/protocol.md`, section
//! "Handshake").
//!
//! This module owns the byte layouts only. The state machines that decide what to send and
//! compute the MACs live in `quiver_proto::handshake`. No I/O, no allocation, no clock.
//!
//! # Common prefix
//!
//! Every message starts with the same 8 bytes. Bytes 0..8 keep this meaning in every future
//! version, so a peer can always tell a version mismatch from garbage.
//!
//! ```text
//!  0       1       2       3       4       5       6       7       8
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! |  'Q'  |  'V'  |  'H'  |  'S'  |version| kind  |    length     |
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! ```
//!
//! `version` is [`VERSION`]; `kind` is a [`MessageKind`]; `length` (u16) is the total length of
//! the message in bytes, prefix included. All integers are big-endian.
//!
//! # Hello (initiator → responder), kind 1, exactly 88 bytes
//!
//! ```text
//!  0               8              16              20      22      24                      56
//! +---------------+---------------+---------------+-------+-------+-----------------------+
//! |    prefix     |  job_id u64   | src_rank u32  |src_prt|dst_prt|     nonce_i [32]      |
//! +---------------+---------------+---------------+-------+-------+-----------------------+
//!  56                      88
//! +-----------------------+
//! |      mac_h [32]       |
//! +-----------------------+
//! ```
//!
//! `mac_h` proves the job key before the responder keeps any state for the Hello; with it a
//! Hello (88 bytes) is at least as long as any answer quiver's transports give it (udp's
//! Challenge is 84 bytes, tcp's 88, a refusal 76), so answering never amplifies.
//!
//! # Challenge (responder → initiator), kind 2, 76 + params bytes (params ≤ 256)
//!
//! ```text
//!  0               8     9      12                      44                      76
//! +---------------+-----+-------+-----------------------+-----------------------+-----------+
//! |    prefix     |stat.|rsvd 0 |     nonce_r [32]      |      mac_r [32]       | params_r  |
//! +---------------+-----+-------+-----------------------+-----------------------+-----------+
//! ```
//!
//! `status` is a [`ChallengeStatus`]; the three reserved bytes are zero.
//!
//! # Proof (initiator → responder), kind 3, 40 + params bytes (params ≤ 256)
//!
//! ```text
//!  0               8                      40
//! +---------------+-----------------------+-----------+
//! |    prefix     |      mac_i [32]       | params_i  |
//! +---------------+-----------------------+-----------+
//! ```
//!
//! # Verdict (responder → initiator), kind 4, exactly 44 bytes
//!
//! ```text
//!  0               8     9      12                      44
//! +---------------+-----+-------+-----------------------+
//! |    prefix     |stat.|rsvd 0 |      mac_v [32]       |
//! +---------------+-----+-------+-----------------------+
//! ```
//!
//! `status` is a [`VerdictStatus`]; the three reserved bytes are zero. `mac_v` lets the
//! initiator check that the verdict really is the responder's answer to its Proof.
//!
//! # The no-panic contract
//!
//! - `new_checked` validates the prefix (length, magic, version, kind), that the `length`
//!   field equals the buffer's length, and that the length fits the message kind. After it
//!   succeeds, no accessor of that view can panic.
//! - `new_unchecked` validates nothing: accessors on a too-short buffer panic. Use it only to
//!   wrap a buffer you are about to `emit` into.
//! - `Repr::parse` re-runs the length checks (so it is safe on unchecked views too) and adds
//!   the semantic checks: known status codes, zero reserved bytes.
//! - `Repr::emit` writes exactly `buffer_len()` bytes and panics if the buffer is shorter, or if
//!   the repr's params are longer than [`MAX_PARAMS_LEN`]: both are caller bugs.
//!
//! Checks run in a fixed order: prefix length, magic, version, kind, fixed part, length field,
//! params limit. Because the version is checked before anything version-specific, the 8 bytes
//! of a prefix alone are enough to report a version mismatch.
//!
//! # Files
//!
//! - `layout.rs`: the constants (magic, version, lengths); `field.rs`: the byte offsets of
//!   every field (public as [`field`]).
//! - `kind.rs`: the message kinds; `error.rs`: why bytes are not a message.
//! - `prefix.rs`: the common prefix; `hello.rs`, `challenge.rs`, `proof.rs`, `verdict.rs`:
//!   each message's view, parsed representation and status codes.
//! - `check.rs`: the structural checks in their contractual order; `bytes.rs`: big-endian
//!   reads.

mod bytes;
mod challenge;
mod check;
mod error;
pub mod field;
mod hello;
mod kind;
mod layout;
mod prefix;
mod proof;
mod verdict;

pub use challenge::{Challenge, ChallengeRepr, ChallengeStatus};
pub use error::WireError;
pub use hello::{Hello, HelloRepr};
pub use kind::MessageKind;
pub use layout::{
    CHALLENGE_FIXED_LEN, HELLO_LEN, MAC_LEN, MAGIC, MAX_MESSAGE_LEN, MAX_PARAMS_LEN, NONCE_LEN,
    PREFIX_LEN, PROOF_FIXED_LEN, VERDICT_LEN, VERSION,
};
pub use prefix::MessagePrefix;
pub use proof::{Proof, ProofRepr};
pub use verdict::{Verdict, VerdictRepr, VerdictStatus};

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.
mod tests;
