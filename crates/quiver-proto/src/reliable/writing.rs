//! The application's side of sending: messages written or lent, their tokens released,
//! and the close.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. The bytes go into the send state
//! (`send.rs`); what leaves is `output.rs`'s. No I/O.

use super::connection::ReliableConnection;
use super::events::State;
use quiver_wire::frame::{MAX_MESSAGE_PAYLOAD, MESSAGE_TAG_LEN};

use super::send::{LEND_MESSAGE_TOKEN, MESSAGE_HEADER_LEN};
use super::time::Nanos;

/// Why a message cannot be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The previous message is not fully written, or the send buffer lacks the 8 bytes a
    /// message header takes: try again after acks arrive.
    #[error("would block")]
    WouldBlock,
    /// The connection is closing, closed or failed.
    #[error("connection closed for sending")]
    Closed,
    /// Bytes of the previous message are still lent
    /// ([`ReliableConnection::lend_message`]): adopt them first
    /// ([`ReliableConnection::adopt_lent`]) or wait for their acknowledgement.
    #[error("bytes of the previous message are still lent")]
    Lent,
    /// A message longer than a length prefix can announce
    /// ([`MAX_MESSAGE_PAYLOAD`](quiver_wire::frame::MAX_MESSAGE_PAYLOAD)).
    #[error("a message of {0} bytes is longer than a stream can carry")]
    TooLong(u64),
    /// The slice given for the lent bytes is shorter than what was lent.
    #[error("lent slice of {given} bytes, {needed} were lent")]
    LentSliceTooShort {
        /// Bytes the slice must have (from the message's first byte).
        needed: u64,
        /// Its length.
        given: u64,
    },
}

impl ReliableConnection {
    /// Starts the next message of `len` bytes (0 allowed).
    ///
    /// Messages may be started before the handshake completes (queued, sent once
    /// established).
    ///
    /// # Errors
    /// [`SendError::WouldBlock`] if the previous message has not been fully written yet or
    /// the send buffer lacks the 8 bytes a message header takes; [`SendError::Closed`] once
    /// the connection is closing, closed or failed; [`SendError::Lent`] while bytes of the
    /// previous message are lent; [`SendError::TooLong`] beyond 2^62 - 1 bytes.
    pub fn start_message(&mut self, len: u64) -> Result<(), SendError> {
        self.check_start(len, 0)?;
        self.send.start_message(len, 0, false);
        Ok(())
    }

    /// Starts the next message of `len` bytes with `tag`, which the receiver reads with it
    /// ([`message_tag`](Self::message_tag), [`PostedRead::Complete`](crate::reliable::PostedRead)).
    /// Tag 0 is [`start_message`](Self::start_message): an untagged message; any other tag
    /// takes 8 more bytes of the stream (after the length prefix).
    ///
    /// # Errors
    /// As [`start_message`](Self::start_message); `WouldBlock` also when the send buffer
    /// lacks the 16 bytes a tagged message's header takes.
    pub fn start_message_tagged(&mut self, len: u64, tag: u64) -> Result<(), SendError> {
        if tag == 0 {
            return self.start_message(len);
        }
        self.check_start(len, MESSAGE_TAG_LEN)?;
        self.send.start_message(len, tag, false);
        Ok(())
    }

    /// Starts the next message of `len` bytes as an active message whose handler `word`
    /// the receiver reads in its tag's place ([`message_is_active`](Self::message_is_active),
    /// [`PostedRead::Complete`](crate::reliable::PostedRead)'s `active`); the protocol
    /// carries it as a tagged message.
    ///
    /// # Errors
    /// As [`start_message_tagged`](Self::start_message_tagged).
    pub fn start_message_active(&mut self, len: u64, word: u64) -> Result<(), SendError> {
        self.check_start(len, MESSAGE_TAG_LEN)?;
        self.send.start_message(len, word, true);
        Ok(())
    }

    /// Whether a message of `len` bytes whose header takes `tag_len` bytes after the prefix
    /// may start now.
    fn check_start(&self, len: u64, tag_len: u64) -> Result<(), SendError> {
        if !self.open_for_sending() {
            return Err(SendError::Closed);
        }
        if self.send.lent_bytes() > 0 {
            return Err(SendError::Lent);
        }
        if self.send.message_open()
            || self.send.capacity() < (MESSAGE_HEADER_LEN + tag_len) as usize
        {
            return Err(SendError::WouldBlock);
        }
        if len > MAX_MESSAGE_PAYLOAD {
            return Err(SendError::TooLong(len));
        }
        Ok(())
    }

    /// Copies as much of the current message's next bytes as the send buffer has room for;
    /// returns the count (0 when full: wait for acks, i.e. for `handle_datagram`; also 0 when
    /// no message is open or the connection failed).
    pub fn write_message(&mut self, data: &[u8]) -> usize {
        if matches!(self.state, State::Closed | State::Failed) {
            return 0;
        }
        self.send.write(data)
    }

    /// Appends up to `len` of the current message's next bytes without copying them: the
    /// caller lends them, and keeps the message unchanged until [`lent_bytes`](Self::lent_bytes)
    /// is 0. Their room in the send buffer is reserved as for written bytes; frames of them
    /// go out from [`poll_transmit_lent`](Self::poll_transmit_lent), which takes the payload
    /// from the caller's message, retransmissions included. The lend ends when every lent
    /// byte is acknowledged (no copy at all) or [adopted](Self::adopt_lent) (copied into the
    /// send buffer, after which the connection owns them like written bytes).
    ///
    /// Returns the count lent (bounded by the message and the send buffer's room, as for
    /// [`write_message`](Self::write_message)); 0 when no message is open, the connection
    /// is closed or failed, or bytes were written after lent ones (one contiguous lend per
    /// message; later bytes may still be written). A message may mix written and lent bytes.
    pub fn lend_message(&mut self, len: usize) -> usize {
        self.lend_message_as(LEND_MESSAGE_TOKEN, len)
    }

    /// Lends up to `len` of the current message's next bytes under `token` (the caller's
    /// name for the message, e.g. an index into its table of lent buffers): as
    /// [`lend_message`](Self::lend_message), but other messages may be started and lent
    /// while this one's bytes are lent, and the caller never adopts them: it keeps the
    /// message unchanged until its token comes back from
    /// [`poll_released`](Self::poll_released) (every byte acknowledged, or the connection
    /// failed), and passes it to [`poll_transmit_lending`](Self::poll_transmit_lending) and
    /// [`payload_at_lending`](Self::payload_at_lending) meanwhile. A message larger than
    /// the send buffer is lent in parts as acknowledgements free room (the same token each
    /// time); its token is released once, after its last part.
    ///
    /// Returns the count lent; 0 as for [`lend_message`](Self::lend_message), and when the
    /// message's lend has another token, or when the connection holds
    /// `max_in_flight_datagrams` lends and released tokens not yet polled together.
    /// `lend_message` is `lend_message_as(LEND_MESSAGE_TOKEN, ..)`: that token is the one
    /// [`start_message`](Self::start_message) waits for, and it is never released.
    pub fn lend_message_as(&mut self, token: u64, len: usize) -> usize {
        if matches!(self.state, State::Closed | State::Failed) {
            return 0;
        }
        // Invariant: the count is at most `len`.
        self.send.lend(token, len as u64) as usize
    }

    /// The token of a message lent with [`lend_message_as`](Self::lend_message_as) whose
    /// lend ended, oldest first: every byte of it was acknowledged (or the connection
    /// failed, which releases them all). The connection never reads that message again.
    pub fn poll_released(&mut self) -> Option<u64> {
        self.send.poll_released()
    }

    /// Messages lent with [`lend_message_as`](Self::lend_message_as) whose tokens are not
    /// yet released (released tokens waiting in [`poll_released`](Self::poll_released) are
    /// not counted).
    pub fn lent_messages(&self) -> usize {
        self.send.lent_messages()
    }

    /// Bytes lent by [`lend_message`](Self::lend_message) neither acknowledged nor adopted
    /// (messages lent under other tokens not counted): while not 0 the lender keeps its message
    /// and passes it to [`poll_transmit_lent`](Self::poll_transmit_lent). 0 once the
    /// connection failed (nothing is sent any more).
    pub fn lent_bytes(&self) -> u64 {
        if self.state == State::Failed {
            return 0;
        }
        self.send.lent_bytes()
    }

    /// Copies up to `max_bytes` of the lent bytes not yet acknowledged into the send
    /// buffer, the highest first (the lowest are the likeliest to be acknowledged soon), from
    /// `message` (the whole message, as for [`poll_transmit_lent`](Self::poll_transmit_lent));
    /// returns the count. Once [`lent_bytes`](Self::lent_bytes) is 0 the caller may reuse
    /// its message: retransmissions read the send buffer.
    ///
    /// # Errors
    /// [`SendError::LentSliceTooShort`] if `message` is shorter than what was lent (nothing
    /// is copied).
    pub fn adopt_lent(&mut self, message: &[u8], max_bytes: usize) -> Result<usize, SendError> {
        let needed = self.send.lent_slice_len();
        if (message.len() as u64) < needed {
            return Err(SendError::LentSliceTooShort {
                needed,
                given: message.len() as u64,
            });
        }
        // Invariant: the count is at most `max_bytes`.
        Ok(self.send.adopt(message, max_bytes as u64) as usize)
    }

    /// Bytes the send buffer can take now (a new message needs 8 of them for its header).
    pub fn send_capacity(&self) -> usize {
        if matches!(self.state, State::Closed | State::Failed) {
            return 0;
        }
        self.send.capacity()
    }

    /// Whether data frames may still be waiting to go: bytes written or lent and not yet
    /// sent, or frames queued for retransmission. False means the data frames
    /// `poll_transmit` returned so far were all there was: an engine may send the one it
    /// holds at once instead of gathering it with more (only control frames can follow).
    pub fn data_waiting(&self) -> bool {
        self.send.data_waiting()
    }

    /// True when every byte written has been acknowledged by the peer (and no ack waits to
    /// be processed: the `reliable` module docs, "The answer first").
    pub fn all_acked(&self) -> bool {
        self.deferred_ack.is_none() && self.send.all_acked()
    }

    /// Bytes of the stream written so far that the peer has acknowledged (grows as the peer
    /// receives; a blocking send that sees it stand still is not progressing).
    pub fn acked_bytes(&self) -> u64 {
        self.send.acked_offset()
    }

    /// Graceful close: data already written is delivered and acknowledged, then Close frames
    /// are exchanged; [`Event::Closed`](crate::reliable::Event::Closed) follows. A message being
    /// written must still be completed with `write_message`. Closing during the handshake closes
    /// right after it.
    pub fn close(&mut self, now: Nanos) {
        self.apply_deferred_ack();
        match self.state {
            State::Handshaking => self.send.request_close(),
            State::Established => {
                self.send.request_close();
                self.state = State::Closing;
                self.refresh_timers(now);
            }
            State::Closing | State::Closed | State::Failed => {}
        }
    }

    /// True once this side's Close frame has been acknowledged by the peer (after
    /// [`close`](Self::close)): the peer then knows everything this side acknowledged,
    /// since the Close carried the acks.
    pub fn close_acknowledged(&self) -> bool {
        self.send.close_acked()
    }

    pub(super) fn open_for_sending(&self) -> bool {
        matches!(self.state, State::Handshaking | State::Established)
            && !self.send.close_requested()
    }
}
