//! Posted readers: receive buffers the caller keeps and the core fills by token.
//!
//! Layer: sans-IO, inside [`crate::reliable`]: the trait the caller implements and what a
//! finished reader reports. No logic.

/// The buffers of a connection's posted readers
/// ([`ReliableConnection::post_reader`](crate::reliable::ReliableConnection::post_reader)), which
/// the caller keeps: the core asks for one by its token each time it places bytes in it or reads
/// bytes into it.
pub trait PostedBuffers {
    /// The buffer posted under `token` (at least the capacity it was posted with), or None
    /// when the caller does not have it now: its bytes then go through the receive buffer.
    fn buffer(&mut self, token: u64) -> Option<&mut [u8]>;
}

/// [`PostedBuffers`] with no buffer at all.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoBuffers;

impl PostedBuffers for NoBuffers {
    fn buffer(&mut self, _token: u64) -> Option<&mut [u8]> {
        None
    }
}

/// A posted reader that finished
/// ([`ReliableConnection::poll_posted`](crate::reliable::ReliableConnection::poll_posted)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostedRead {
    /// The message of `len` bytes is at the start of the buffer of `token`.
    Complete {
        /// The reader's token.
        token: u64,
        /// The message's length.
        len: u64,
        /// The message's tag (0 for an untagged message), or an active message's handler
        /// word.
        tag: u64,
        /// Whether it is an active message.
        active: bool,
    },
    /// The next message, of `len` bytes, is longer than the buffer of `token`: nothing of
    /// it went there; it stays for the next posted reader, or for `read_message`.
    TooSmall {
        /// The reader's token.
        token: u64,
        /// The message's length.
        len: u64,
    },
}
