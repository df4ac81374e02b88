//! Verdict (responder to initiator): whether the proof was accepted, and the responder's
//! confirmation MAC. The status codes, the view over a buffer and the parsed
//! representation.
//!
//! Layer: quiver-wire, the bottom. No I/O, no allocation.

use super::bytes::{read_array, read_reserved};
use super::check::{check_message, check_reserved, VERDICT_FIELDS};
use super::error::WireError;
use super::field;
use super::kind::MessageKind;
use super::layout::{MAC_LEN, VERDICT_LEN};
use super::prefix::MessagePrefix;

/// The responder's answer to a Proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum VerdictStatus {
    /// The proof verified: the connection is established.
    Accepted = 0,
    /// The proof's MAC did not verify.
    BadProof = 1,
}

impl VerdictStatus {
    /// The status for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Accepted),
            1 => Some(Self::BadProof),
            _ => None,
        }
    }

    /// The wire code of this status.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// A view of a Verdict message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Verdict<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`VERDICT_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it (see the `handshake` module's no-panic contract).
    ///
    /// # Errors
    /// Any structural [`WireError`]; a different version gives
    /// [`WireError::UnsupportedVersion`], another message kind [`WireError::WrongKind`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let view = Self::new_unchecked(buffer);
        view.check_len()?;
        Ok(view)
    }

    /// Checks the structure: after `Ok`, accessors cannot panic.
    ///
    /// # Errors
    /// As [`Verdict::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(
            self.buffer.as_ref(),
            MessageKind::Verdict,
            VERDICT_FIELDS,
            0,
        )
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw status byte (see [`VerdictStatus`]).
    pub fn status_code(&self) -> u8 {
        self.buffer.as_ref()[field::VERDICT_STATUS]
    }

    /// The reserved bytes as a big-endian number (zero when valid).
    pub fn reserved(&self) -> u32 {
        read_reserved(self.buffer.as_ref(), field::VERDICT_RESERVED)
    }

    /// The responder's confirmation MAC.
    pub fn mac_v(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::VERDICT_MAC_V)
    }

    /// The bytes the MAC covers: the whole message except `mac_v`, as two pieces to be hashed
    /// in order (the second is empty; the shape matches the other messages).
    pub fn authenticated_parts(&self) -> [&[u8]; 2] {
        let bytes = self.buffer.as_ref();
        [
            &bytes[..field::VERDICT_MAC_V.start],
            &bytes[field::VERDICT_MAC_V.end..],
        ]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Verdict<T> {
    /// Writes the prefix for a Verdict.
    pub fn fill_prefix(&mut self) {
        MessagePrefix::new_unchecked(self.buffer.as_mut()).fill(MessageKind::Verdict, VERDICT_LEN);
    }

    /// Sets the status and zeroes the reserved bytes.
    pub fn set_status(&mut self, status: VerdictStatus) {
        let bytes = self.buffer.as_mut();
        bytes[field::VERDICT_STATUS] = status.code();
        bytes[field::VERDICT_RESERVED].fill(0);
    }

    /// Sets the responder's confirmation MAC.
    pub fn set_mac_v(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::VERDICT_MAC_V].copy_from_slice(value);
    }
}

/// A parsed Verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerdictRepr {
    /// Whether the proof was accepted.
    pub status: VerdictStatus,
    /// The responder's confirmation MAC.
    pub mac_v: [u8; MAC_LEN],
}

impl VerdictRepr {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Verdict::check_len`], [`WireError::UnknownStatus`],
    /// [`WireError::NonZeroReserved`].
    pub fn parse<T: AsRef<[u8]>>(view: &Verdict<T>) -> Result<Self, WireError> {
        view.check_len()?;
        let status =
            VerdictStatus::from_code(view.status_code()).ok_or(WireError::UnknownStatus {
                field: "verdict.status",
                actual: view.status_code(),
            })?;
        check_reserved("verdict.reserved", view.reserved())?;
        Ok(Self {
            status,
            mac_v: view.mac_v(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        VERDICT_LEN
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`VerdictRepr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Verdict<T>) {
        view.fill_prefix();
        view.set_status(self.status);
        view.set_mac_v(&self.mac_v);
    }
}
