//! Challenge (responder to initiator): the responder's status, nonce, MAC and transport
//! parameters. The status codes, the view over a buffer and the parsed representation.
//!
//! Layer: quiver-wire, the bottom. No I/O, no allocation.

use super::bytes::{read_array, read_reserved};
use super::check::{check_message, check_reserved, CHALLENGE_FIELDS};
use super::error::WireError;
use super::field;
use super::kind::MessageKind;
use super::layout::{CHALLENGE_FIXED_LEN, MAC_LEN, MAX_PARAMS_LEN, NONCE_LEN};
use super::prefix::MessagePrefix;

/// The responder's answer to a Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChallengeStatus {
    /// The responder takes the connection; nonce_r, mac_r and params_r are meaningful.
    Ok = 0,
    /// No endpoint is open at the Hello's `dst_port`.
    NoSuchEndpoint = 1,
    /// The Hello's `job_id` is not the responder's job.
    WrongJob = 2,
    /// The endpoint exists but takes no more connections now.
    Busy = 3,
    /// The responder does not speak the Hello's version (sent in the responder's version).
    UnsupportedVersion = 4,
    /// The Hello's MAC (`mac_h`) does not verify: the initiator does not hold the
    /// responder's job key (or the Hello was altered on the way).
    WrongKey = 5,
}

impl ChallengeStatus {
    /// The status for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Ok),
            1 => Some(Self::NoSuchEndpoint),
            2 => Some(Self::WrongJob),
            3 => Some(Self::Busy),
            4 => Some(Self::UnsupportedVersion),
            5 => Some(Self::WrongKey),
            _ => None,
        }
    }

    /// The wire code of this status.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// A view of a Challenge message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Challenge<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`CHALLENGE_FIXED_LEN`].
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
    /// As [`Challenge::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(
            self.buffer.as_ref(),
            MessageKind::Challenge,
            CHALLENGE_FIELDS,
            MAX_PARAMS_LEN,
        )
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw status byte (see [`ChallengeStatus`]).
    pub fn status_code(&self) -> u8 {
        self.buffer.as_ref()[field::CHALLENGE_STATUS]
    }

    /// The reserved bytes as a big-endian number (zero when valid).
    pub fn reserved(&self) -> u32 {
        read_reserved(self.buffer.as_ref(), field::CHALLENGE_RESERVED)
    }

    /// The responder's nonce.
    pub fn nonce_r(&self) -> [u8; NONCE_LEN] {
        read_array(self.buffer.as_ref(), field::CHALLENGE_NONCE_R)
    }

    /// The responder's MAC.
    pub fn mac_r(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::CHALLENGE_MAC_R)
    }

    /// The bytes the MACs cover: the whole message except `mac_r`, as two pieces to be hashed
    /// in order.
    pub fn authenticated_parts(&self) -> [&[u8]; 2] {
        let bytes = self.buffer.as_ref();
        [
            &bytes[..field::CHALLENGE_MAC_R.start],
            &bytes[field::CHALLENGE_MAC_R.end..],
        ]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Challenge<&'a T> {
    /// The responder's transport parameters.
    pub fn params_r(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::CHALLENGE_PARAMS_R]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Challenge<T> {
    /// Writes the prefix for a Challenge carrying `params_len` bytes of params.
    pub fn fill_prefix(&mut self, params_len: usize) {
        MessagePrefix::new_unchecked(self.buffer.as_mut())
            .fill(MessageKind::Challenge, CHALLENGE_FIXED_LEN + params_len);
    }

    /// Sets the status and zeroes the reserved bytes.
    pub fn set_status(&mut self, status: ChallengeStatus) {
        let bytes = self.buffer.as_mut();
        bytes[field::CHALLENGE_STATUS] = status.code();
        bytes[field::CHALLENGE_RESERVED].fill(0);
    }

    /// Sets the responder's nonce.
    pub fn set_nonce_r(&mut self, value: &[u8; NONCE_LEN]) {
        self.buffer.as_mut()[field::CHALLENGE_NONCE_R].copy_from_slice(value);
    }

    /// Sets the responder's MAC.
    pub fn set_mac_r(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::CHALLENGE_MAC_R].copy_from_slice(value);
    }

    /// Copies `value` into the params field, which must be exactly `value.len()` long.
    pub fn set_params_r(&mut self, value: &[u8]) {
        self.buffer.as_mut()[field::CHALLENGE_PARAMS_R].copy_from_slice(value);
    }
}

/// A parsed Challenge; `params_r` borrows from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChallengeRepr<'a> {
    /// Whether the responder takes the connection.
    pub status: ChallengeStatus,
    /// The responder's fresh nonce (zero in a rejection).
    pub nonce_r: [u8; NONCE_LEN],
    /// The responder's MAC (zero in a rejection).
    pub mac_r: [u8; MAC_LEN],
    /// The responder's transport parameters, at most [`MAX_PARAMS_LEN`] bytes.
    pub params_r: &'a [u8],
}

impl<'a> ChallengeRepr<'a> {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Challenge::check_len`], [`WireError::UnknownStatus`],
    /// [`WireError::NonZeroReserved`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &Challenge<&'a T>) -> Result<Self, WireError> {
        view.check_len()?;
        let status =
            ChallengeStatus::from_code(view.status_code()).ok_or(WireError::UnknownStatus {
                field: "challenge.status",
                actual: view.status_code(),
            })?;
        check_reserved("challenge.reserved", view.reserved())?;
        Ok(Self {
            status,
            nonce_r: view.nonce_r(),
            mac_r: view.mac_r(),
            params_r: view.params_r(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        CHALLENGE_FIXED_LEN + self.params_r.len()
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`ChallengeRepr::buffer_len`], or `params_r` is
    /// longer than [`MAX_PARAMS_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Challenge<T>) {
        assert!(self.params_r.len() <= MAX_PARAMS_LEN, "params_r too long");
        view.fill_prefix(self.params_r.len());
        view.set_status(self.status);
        view.set_nonce_r(&self.nonce_r);
        view.set_mac_r(&self.mac_r);
        let bytes = view.buffer.as_mut();
        bytes[field::CHALLENGE_PARAMS_R.start..self.buffer_len()].copy_from_slice(self.params_r);
    }
}
