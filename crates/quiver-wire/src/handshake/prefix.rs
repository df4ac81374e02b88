//! The common 8-byte prefix of every handshake message, which frames messages on a byte
//! stream and tells a version mismatch from garbage.
//!
//! Layer: quiver-wire, the bottom. A view over a caller's buffer; no allocation.

use super::bytes::{read_array, read_u16};
use super::check::{check_fields, check_magic, PREFIX_FIELDS};
use super::error::WireError;
use super::field;
use super::kind::MessageKind;
use super::layout::{MAGIC, VERSION};

/// A view of the common 8-byte prefix of any handshake message.
///
/// Use it to frame messages on a byte stream: read [`PREFIX_LEN`](super::PREFIX_LEN) bytes,
/// check them, then read `length() - PREFIX_LEN` more. `new_checked` checks only the buffer
/// length and the magic, so that a reader can see a foreign version; if `version() !=
/// VERSION`, do not read on: hand the prefix to the state machine, which reports the
/// mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessagePrefix<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MessagePrefix<T> {
    /// Wraps a buffer without checking it. Accessors panic if it is shorter than
    /// [`PREFIX_LEN`](super::PREFIX_LEN).
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking that it holds a prefix with the right magic.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if shorter than [`PREFIX_LEN`](super::PREFIX_LEN),
    /// [`WireError::BadMagic`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let bytes = buffer.as_ref();
        check_fields(bytes, PREFIX_FIELDS)?;
        check_magic(bytes)?;
        Ok(Self { buffer })
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The magic bytes.
    pub fn magic(&self) -> [u8; 4] {
        read_array(self.buffer.as_ref(), field::MAGIC)
    }

    /// The version byte.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The raw kind byte.
    pub fn kind_code(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The message kind.
    ///
    /// # Errors
    /// [`WireError::UnknownKind`] if the kind byte names no message.
    pub fn kind(&self) -> Result<MessageKind, WireError> {
        let code = self.kind_code();
        MessageKind::from_code(code).ok_or(WireError::UnknownKind { actual: code })
    }

    /// The total length of the message in bytes, prefix included.
    pub fn length(&self) -> usize {
        usize::from(read_u16(self.buffer.as_ref(), field::LENGTH))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MessagePrefix<T> {
    /// Writes the whole prefix: magic, [`VERSION`], `kind` and the total `length` in bytes.
    ///
    /// # Panics
    /// If the buffer is shorter than [`PREFIX_LEN`](super::PREFIX_LEN) or `length` exceeds
    /// `u16::MAX`.
    pub fn fill(&mut self, kind: MessageKind, length: usize) {
        // Invariant: callers pass the length of a message they built, at most MAX_MESSAGE_LEN
        // (332) bytes; anything else is the misuse the `# Panics` section covers.
        let length = u16::try_from(length).expect("handshake message over u16::MAX bytes");
        let bytes = self.buffer.as_mut();
        bytes[field::MAGIC].copy_from_slice(&MAGIC);
        bytes[field::VERSION] = VERSION;
        bytes[field::KIND] = kind.code();
        bytes[field::LENGTH].copy_from_slice(&length.to_be_bytes());
    }

    /// Sets the version byte (tests use it to fake a foreign peer).
    pub fn set_version(&mut self, version: u8) {
        self.buffer.as_mut()[field::VERSION] = version;
    }
}
