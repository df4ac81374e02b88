//! The one handshake message a side has waiting to be sent.
//!
//! Layer: sans-IO, inside [`crate::handshake`]: a fixed buffer, no allocation, no I/O.

use quiver_wire::handshake::MAX_MESSAGE_LEN;

use super::error::HandshakeError;

/// One pending outgoing message. At most one message is ever in flight per side.
#[derive(Debug)]
pub(super) struct Outbox {
    bytes: [u8; MAX_MESSAGE_LEN],
    len: usize,
}

impl Outbox {
    pub(super) const fn new() -> Self {
        Self {
            bytes: [0; MAX_MESSAGE_LEN],
            len: 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Returns a zeroed buffer of `len` bytes that will be sent next. The callers check that
    /// the outbox is empty and `len <= MAX_MESSAGE_LEN` (params are limited before).
    pub(super) fn reserve(&mut self, len: usize) -> &mut [u8] {
        debug_assert!(self.is_empty());
        assert!(
            len <= MAX_MESSAGE_LEN,
            "handshake message over MAX_MESSAGE_LEN"
        );
        self.len = len;
        let slot = &mut self.bytes[..len];
        slot.fill(0);
        slot
    }

    pub(super) fn queue(&mut self, message: &[u8]) {
        self.reserve(message.len()).copy_from_slice(message);
    }

    pub(super) fn poll_transmit(
        &mut self,
        out: &mut [u8],
    ) -> Result<Option<usize>, HandshakeError> {
        if self.len == 0 {
            return Ok(None);
        }
        let Some(destination) = out.get_mut(..self.len) else {
            return Err(HandshakeError::BufferTooSmall {
                needed: self.len,
                actual: out.len(),
            });
        };
        destination.copy_from_slice(&self.bytes[..self.len]);
        let len = self.len;
        self.len = 0;
        Ok(Some(len))
    }
}
