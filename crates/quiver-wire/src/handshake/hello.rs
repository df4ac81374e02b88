//! Hello (initiator to responder): who is connecting, the initiator's nonce, and its MAC
//! proving the job key before the responder keeps anything. The view over a buffer and the
//! parsed representation.
//!
//! Layer: quiver-wire, the bottom. No I/O, no allocation.

use super::bytes::{read_array, read_u16};
use super::check::{check_message, HELLO_FIELDS};
use super::error::WireError;
use super::field;
use super::kind::MessageKind;
use super::layout::{HELLO_LEN, MAC_LEN, NONCE_LEN};
use super::prefix::MessagePrefix;

/// A view of a Hello message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Hello<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`HELLO_LEN`].
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
    /// As [`Hello::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(self.buffer.as_ref(), MessageKind::Hello, HELLO_FIELDS, 0)
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        u64::from_be_bytes(read_array(self.buffer.as_ref(), field::HELLO_JOB_ID))
    }

    /// The initiator's rank.
    pub fn src_rank(&self) -> u32 {
        u32::from_be_bytes(read_array(self.buffer.as_ref(), field::HELLO_SRC_RANK))
    }

    /// The initiator's endpoint port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HELLO_SRC_PORT)
    }

    /// The port of the endpoint being connected to.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HELLO_DST_PORT)
    }

    /// The initiator's nonce.
    pub fn nonce_i(&self) -> [u8; NONCE_LEN] {
        read_array(self.buffer.as_ref(), field::HELLO_NONCE_I)
    }

    /// The initiator's MAC over the job key and [`Hello::authenticated_part`].
    pub fn mac_h(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::HELLO_MAC_H)
    }

    /// The bytes `mac_h` covers: the whole message before it.
    pub fn authenticated_part(&self) -> &[u8] {
        &self.buffer.as_ref()[..field::HELLO_MAC_H.start]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Hello<T> {
    /// Writes the prefix for a Hello.
    pub fn fill_prefix(&mut self) {
        MessagePrefix::new_unchecked(self.buffer.as_mut()).fill(MessageKind::Hello, HELLO_LEN);
    }

    /// Sets the job id.
    pub fn set_job_id(&mut self, value: u64) {
        self.buffer.as_mut()[field::HELLO_JOB_ID].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the initiator's rank.
    pub fn set_src_rank(&mut self, value: u32) {
        self.buffer.as_mut()[field::HELLO_SRC_RANK].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the initiator's endpoint port.
    pub fn set_src_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::HELLO_SRC_PORT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the port being connected to.
    pub fn set_dst_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::HELLO_DST_PORT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the initiator's nonce.
    pub fn set_nonce_i(&mut self, value: &[u8; NONCE_LEN]) {
        self.buffer.as_mut()[field::HELLO_NONCE_I].copy_from_slice(value);
    }

    /// Sets the initiator's MAC.
    pub fn set_mac_h(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::HELLO_MAC_H].copy_from_slice(value);
    }
}

/// A parsed Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HelloRepr {
    /// The job the initiator belongs to.
    pub job_id: u64,
    /// The initiator's rank.
    pub src_rank: u32,
    /// The initiator's endpoint port.
    pub src_port: u16,
    /// The port of the endpoint being connected to.
    pub dst_port: u16,
    /// The initiator's fresh nonce.
    pub nonce_i: [u8; NONCE_LEN],
    /// The initiator's MAC over the job key and the bytes before it (computed by
    /// `quiver_proto::handshake`; zero while the message is being built).
    pub mac_h: [u8; MAC_LEN],
}

impl HelloRepr {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Hello::check_len`].
    pub fn parse<T: AsRef<[u8]>>(view: &Hello<T>) -> Result<Self, WireError> {
        view.check_len()?;
        Ok(Self {
            job_id: view.job_id(),
            src_rank: view.src_rank(),
            src_port: view.src_port(),
            dst_port: view.dst_port(),
            nonce_i: view.nonce_i(),
            mac_h: view.mac_h(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        HELLO_LEN
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`HelloRepr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Hello<T>) {
        view.fill_prefix();
        view.set_job_id(self.job_id);
        view.set_src_rank(self.src_rank);
        view.set_src_port(self.src_port);
        view.set_dst_port(self.dst_port);
        view.set_nonce_i(&self.nonce_i);
        view.set_mac_h(&self.mac_h);
    }
}
