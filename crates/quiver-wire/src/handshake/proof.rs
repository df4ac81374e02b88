//! Proof (initiator to responder): the initiator's MAC and transport parameters. The view
//! over a buffer and the parsed representation.
//!
//! Layer: quiver-wire, the bottom. No I/O, no allocation.

use super::bytes::read_array;
use super::check::{check_message, PROOF_FIELDS};
use super::error::WireError;
use super::field;
use super::kind::MessageKind;
use super::layout::{MAC_LEN, MAX_PARAMS_LEN, PROOF_FIXED_LEN};
use super::prefix::MessagePrefix;

/// A view of a Proof message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Proof<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`PROOF_FIXED_LEN`].
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
    /// As [`Proof::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(
            self.buffer.as_ref(),
            MessageKind::Proof,
            PROOF_FIELDS,
            MAX_PARAMS_LEN,
        )
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The initiator's MAC.
    pub fn mac_i(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::PROOF_MAC_I)
    }

    /// The bytes the MAC covers: the whole message except `mac_i`, as two pieces to be hashed
    /// in order.
    pub fn authenticated_parts(&self) -> [&[u8]; 2] {
        let bytes = self.buffer.as_ref();
        [
            &bytes[..field::PROOF_MAC_I.start],
            &bytes[field::PROOF_MAC_I.end..],
        ]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Proof<&'a T> {
    /// The initiator's transport parameters.
    pub fn params_i(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PROOF_PARAMS_I]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Proof<T> {
    /// Writes the prefix for a Proof carrying `params_len` bytes of params.
    pub fn fill_prefix(&mut self, params_len: usize) {
        MessagePrefix::new_unchecked(self.buffer.as_mut())
            .fill(MessageKind::Proof, PROOF_FIXED_LEN + params_len);
    }

    /// Sets the initiator's MAC.
    pub fn set_mac_i(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::PROOF_MAC_I].copy_from_slice(value);
    }

    /// Copies `value` into the params field, which must be exactly `value.len()` long.
    pub fn set_params_i(&mut self, value: &[u8]) {
        self.buffer.as_mut()[field::PROOF_PARAMS_I].copy_from_slice(value);
    }
}

/// A parsed Proof; `params_i` borrows from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProofRepr<'a> {
    /// The initiator's MAC.
    pub mac_i: [u8; MAC_LEN],
    /// The initiator's transport parameters, at most [`MAX_PARAMS_LEN`] bytes.
    pub params_i: &'a [u8],
}

impl<'a> ProofRepr<'a> {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Proof::check_len`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &Proof<&'a T>) -> Result<Self, WireError> {
        view.check_len()?;
        Ok(Self {
            mac_i: view.mac_i(),
            params_i: view.params_i(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        PROOF_FIXED_LEN + self.params_i.len()
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`ProofRepr::buffer_len`], or `params_i` is longer
    /// than [`MAX_PARAMS_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Proof<T>) {
        assert!(self.params_i.len() <= MAX_PARAMS_LEN, "params_i too long");
        view.fill_prefix(self.params_i.len());
        view.set_mac_i(&self.mac_i);
        let bytes = view.buffer.as_mut();
        bytes[field::PROOF_PARAMS_I.start..self.buffer_len()].copy_from_slice(self.params_i);
    }
}
