//! The application's side of receiving: messages read in order, and posted readers.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. The bytes come from the receive state
//! (`recv.rs`); what arrives is `input.rs`'s. No I/O.

use super::connection::ReliableConnection;
use super::posted::{PostedBuffers, PostedRead};

impl ReliableConnection {
    /// The reader stops handing `reader` to [`handle_datagram_into`](Self::handle_datagram_into)
    /// before its message is complete (an error or a timeout ends its receive): `reader` is
    /// its buffer for the rest of the message as the last call left it (starting at the next
    /// unread byte). Bytes placed ahead in it go back into the receive buffer, so that the
    /// next read may use any buffer. Nothing to do after a message completed.
    pub fn detach_reader(&mut self, reader: &[u8]) {
        self.recv.detach_reader(reader);
    }

    /// Posts a reader: a buffer of `capacity` bytes, under `token`, which the next message
    /// no earlier posted reader took goes to. Posted readers take messages in posting order
    /// and before `read_message` gets any: while any is held, `peek_message` and
    /// `read_message` see no new message (a message being read with `read_message` when
    /// the first reader is posted is read to its end that way). The caller keeps the
    /// buffers and hands them to [`handle_datagram_posted`](Self::handle_datagram_posted)
    /// and [`read_posted`](Self::read_posted); each reader finishes
    /// ([`poll_posted`](Self::poll_posted)) with its whole message, or at once with
    /// [`PostedRead::TooSmall`] when its message is longer than `capacity`. False (nothing
    /// posted) when [`MAX_POSTED_READERS`](crate::reliable::MAX_POSTED_READERS) are held.
    pub fn post_reader(&mut self, token: u64, capacity: usize) -> bool {
        self.recv.post_reader(token, capacity as u64)
    }

    /// Moves the posted readers on without a datagram: they claim the messages whose
    /// length prefixes arrived, and the first reads what is in order (copying what did not
    /// go straight to its buffer out of the receive buffer). Call after posting, and after a
    /// `read_message` that finished a message while readers were posted. Freed credit may
    /// bring a window update: call `poll_transmit` after.
    pub fn read_posted(&mut self, buffers: &mut dyn PostedBuffers) {
        self.recv.read_posted(buffers);
        self.stats.recv_buffered_bytes = self.recv.buffered_bytes();
    }

    /// The next posted reader that finished, in the order they finished (messages are
    /// complete in posting order; a [`PostedRead::TooSmall`] comes as soon as its message's
    /// length is known).
    pub fn poll_posted(&mut self) -> Option<PostedRead> {
        self.recv.poll_posted()
    }

    /// Posted readers held, not yet finished.
    pub fn posted_readers(&self) -> usize {
        self.recv.posted_readers()
    }

    /// Whether a message is being read with `read_message` (begun, not complete): posted
    /// readers wait for its end.
    pub fn reading_message(&self) -> bool {
        self.recv.reading_message()
    }

    /// Takes back the posted readers whose message has not begun to be read, in posting
    /// order (their tokens); bytes placed in their buffers go back into the receive buffer,
    /// so that the messages stay whole for other reads. A reader whose message is being
    /// read stays posted until it finishes. Readers whose buffer `buffers` lacks (and every
    /// later one) stay posted too.
    pub fn withdraw_readers(&mut self, buffers: &mut dyn PostedBuffers) -> Vec<u64> {
        self.recv.withdraw_readers(buffers)
    }

    /// Length (tag not counted) of the next in-order message once its first bytes (or, for
    /// length 0, its header: prefix and tag) have arrived, or of the message being read;
    /// `None` otherwise. Does not consume.
    pub fn peek_message_len(&self) -> Option<u64> {
        self.recv.peek_message_len()
    }

    /// The tag of the message being read with `read_message`, or of the last one read
    /// (0 for an untagged message: [`start_message_tagged`](Self::start_message_tagged)).
    /// Messages read by posted readers carry theirs in [`PostedRead::Complete`].
    pub fn message_tag(&self) -> u64 {
        self.recv.message_tag()
    }

    /// Whether the message being read (or the last one read) is an active message, whose
    /// [`message_tag`](Self::message_tag) is its handler word
    /// ([`start_message_active`](Self::start_message_active)).
    pub fn message_is_active(&self) -> bool {
        self.recv.message_is_active()
    }

    /// Whether the next in-order message is an active message, when
    /// [`peek_header`](Self::peek_header) knows it.
    pub fn peek_is_active(&self) -> Option<bool> {
        self.recv.peek_is_active()
    }

    /// The length and tag of the next in-order message, before any of it is read: `None`
    /// while a message is being read, while posted readers come first, or until its whole
    /// header (length prefix, and tag) has arrived.
    pub fn peek_header(&self) -> Option<(u64, u64)> {
        self.recv.peek_header()
    }

    /// Whether the rest of the message `peek_message_len` describes has arrived, so that
    /// `read_message` with a large enough buffer completes it now. A message longer than
    /// the receive window minus 8 bytes never is: read it as it arrives.
    pub fn message_ready(&self) -> bool {
        self.recv.message_ready()
    }

    /// [`peek_message_len`](Self::peek_message_len) and
    /// [`message_ready`](Self::message_ready) together, with one look at the length
    /// prefix: the length of the message being read (or the next one) and whether the rest
    /// of it has arrived. None: no message has begun to arrive.
    pub fn peek_message(&self) -> Option<(u64, bool)> {
        self.recv.peek_message()
    }

    /// Copies the next in-order bytes of the current message into `out`; returns (bytes
    /// copied, message complete). Frees receive credit (a window update is sent with the
    /// next `poll_transmit` once a quarter of the window was freed). A 0-length message
    /// completes with (0, true); nothing available gives (0, false). After
    /// [`handle_datagram_into`](Self::handle_datagram_into) placed bytes ahead in a buffer,
    /// `out` is that buffer (starting at the next unread byte): those bytes are not copied
    /// again.
    pub fn read_message(&mut self, out: &mut [u8]) -> (usize, bool) {
        let read = self.recv.read_message(out);
        // The gauge follows the read itself: a caller may skip the `poll_transmit` after it
        // (`transmit_pending`), which would otherwise be what refreshes it.
        self.stats.recv_buffered_bytes = self.recv.buffered_bytes();
        read
    }
}
