//! The plain data of re-cutting lost frames for a smaller datagram size (decision 0081;
//! the logic is in `send/resend.rs`): the payload limits a frame is cut to, and the rest
//! of a shortened frame waiting to be sent.
//!
//! Layer: sans-IO, inside [`crate::reliable`], below the send state; no logic beyond
//! picking a limit.

/// The part of a shortened frame not resent yet: stream bytes `[offset, offset + len)`,
/// with the frame's kind and message fields (a Data frame's `fragment_offset` is that of
/// `offset`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Recut {
    pub(super) compact: bool,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) message_id: u64,
    pub(super) message_len: u64,
    pub(super) fragment_offset: u64,
}

/// The largest payloads a frame may carry now: a Data frame's, a compact Stream frame's.
#[derive(Debug, Clone, Copy)]
pub(super) struct PayloadLimits {
    pub(super) data: usize,
    pub(super) stream: usize,
}

impl PayloadLimits {
    /// The limit for a frame of that kind (a compact Stream frame, or a Data frame).
    pub(super) fn of(self, compact: bool) -> u64 {
        if compact {
            self.stream as u64
        } else {
            self.data as u64
        }
    }
}
