//! A Data frame taken on a short route (`crate::reliable::fast_path`): the next packet
//! expected, its bytes the next of the stream, nothing received above it or held ahead,
//! no Close seen, no posted reader and no reader's buffer to fill.
//!
//! Layer: sans-IO, inside the receive state (`recv.rs`, whose fields it works on). It makes
//! exactly the changes [`RecvState::on_frame`] makes for such a frame with an empty
//! reader's buffer: the bytes (and a first fragment's length prefix) into the ring, the
//! readable end and the cumulative ack moved over them, the frame counted for the next ack.

use quiver_wire::frame::MessagePrefix;

use super::RecvState;
use crate::reliable::send::MESSAGE_HEADER_LEN;

impl RecvState {
    /// [`Self::on_frame`] for a Data frame (not a Close) with no reader's buffer, when it
    /// arrives in order as described in the module docs: it is then taken (as `on_frame`
    /// takes it, [`Arrival::InOrder`](super::Arrival::InOrder) with nothing read) and the
    /// result is whether the next message to read is now whole ([`Self::message_ready`]).
    /// `None`, with nothing changed, for any other frame (the caller then calls
    /// `on_frame`).
    pub(in crate::reliable) fn take_in_order(
        &mut self,
        packet_number: u64,
        first_fragment: bool,
        message_len: u64,
        payload_offset: u64,
        payload: &[u8],
    ) -> Option<bool> {
        let header_len = if first_fragment {
            MESSAGE_HEADER_LEN
        } else {
            0
        };
        let stream_start = payload_offset.checked_sub(header_len)?;
        let stream_end = payload_offset.checked_add(payload.len() as u64)?;
        if packet_number != self.cumulative
            || stream_start != self.readable_end
            || stream_end > self.read_offset + self.ring.len() as u64
            || self.max_in_flight == 0
            || !self.pending.is_empty()
            || !self.ranges.is_empty()
            || !self.ahead.is_empty()
            || self.close_packet.is_some()
            || !self.posted.is_empty()
            || !self.claimed.is_empty()
        {
            return None;
        }
        if first_fragment {
            self.ring.write_u64_le(stream_start, message_len);
        }
        self.ring.copy_in(payload_offset, payload);
        // `take_packet` and `advance` for the next packet with nothing above it.
        self.readable_end = stream_end;
        self.cumulative += 1;
        self.unacked_frames += 1;
        Some(self.message_ready_after(first_fragment, message_len, stream_start))
    }

    /// [`Self::message_ready`] after a frame taken by [`Self::take_in_order`]: without
    /// reading the ring when the frame begins the next message to read (its length prefix
    /// is the frame's `message_len`, just written at `stream_start`, the read offset).
    fn message_ready_after(
        &self,
        first_fragment: bool,
        message_len: u64,
        stream_start: u64,
    ) -> bool {
        if !first_fragment || self.in_message || self.read_offset != stream_start {
            return self.message_ready();
        }
        // (No posted reader waits: `take_in_order` checked.)
        let prefix = MessagePrefix::from_raw(message_len);
        let payload_start = stream_start + prefix.header_len();
        self.readable_end >= payload_start
            && self.readable_end - payload_start >= prefix.payload_len()
    }
}
