//! Why bytes are not a valid handshake message.
//!
//! Layer: quiver-wire, the bottom. One error type for every message; each variant names the
//! field and the values it found.

use super::kind::MessageKind;
use super::layout::MAGIC;

/// Why bytes are not a valid handshake message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before `field` does.
    #[error("truncated: field `{field}` needs {needed} bytes, buffer has {actual}")]
    Truncated {
        /// The first field that does not fit, e.g. `"hello.nonce_i"`.
        field: &'static str,
        /// Bytes needed to hold that field.
        needed: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The first four bytes are not [`MAGIC`].
    #[error("bad magic: expected {:?}, got {actual:?}", MAGIC)]
    BadMagic {
        /// The four bytes found.
        actual: [u8; 4],
    },
    /// The version byte is not [`VERSION`](super::VERSION).
    #[error("unsupported handshake version: expected {expected}, got {actual}")]
    UnsupportedVersion {
        /// The version this code speaks.
        expected: u8,
        /// The version found.
        actual: u8,
    },
    /// The kind byte names no message.
    #[error("unknown message kind {actual}")]
    UnknownKind {
        /// The kind byte found.
        actual: u8,
    },
    /// A valid message, but not the kind this view is for.
    #[error("wrong message kind: expected {expected}, got {actual}")]
    WrongKind {
        /// The kind the view is for.
        expected: MessageKind,
        /// The kind found.
        actual: MessageKind,
    },
    /// The `length` field disagrees with the buffer's length.
    #[error("length field says {declared} bytes, buffer has {actual}")]
    LengthMismatch {
        /// The value of the `length` field.
        declared: usize,
        /// The buffer's length.
        actual: usize,
    },
    /// The message is longer than its kind allows (params over
    /// [`MAX_PARAMS_LEN`](super::MAX_PARAMS_LEN), or bytes after a fixed-size message).
    #[error("{message} too long: at most {max} bytes, got {actual}")]
    TooLong {
        /// The message kind.
        message: MessageKind,
        /// The longest valid message of that kind.
        max: usize,
        /// The message's length.
        actual: usize,
    },
    /// A status byte names no status.
    #[error("unknown status {actual} in `{field}`")]
    UnknownStatus {
        /// Which status field, e.g. `"challenge.status"`.
        field: &'static str,
        /// The byte found.
        actual: u8,
    },
    /// Reserved bytes are not zero.
    #[error("reserved field `{field}` is {actual:#x}, must be zero")]
    NonZeroReserved {
        /// Which field, e.g. `"verdict.reserved"`.
        field: &'static str,
        /// The reserved bytes as a big-endian number.
        actual: u32,
    },
}
