//! A Data frame of an established connection on a short route (`crate::reliable::fast_path`):
//! it carries a cumulative ack and no SACK range (the ack of a request-response exchange),
//! and its bytes are the next the receive state expects (`recv/in_order.rs`).
//!
//! Layer: sans-IO, inside [`crate::reliable`], beside `input.rs`, whose general path
//! (`handle_frame`, `handle_connection_frame`, `take_data`) makes the same changes for
//! such a frame, in the same order as far as they touch the same state.

use quiver_wire::frame::{flags, FrameHeader, FrameType};

use crate::reliable::connection::{DeferredAck, ReliableConnection};
use crate::reliable::events::State;
use crate::reliable::fast_path;
use crate::reliable::recv::Arrival;
use crate::reliable::time::Nanos;

impl ReliableConnection {
    /// [`Self::handle_connection_frame`] for a verified frame with its `payload` in hand and
    /// no reader's buffer, when it is a Data frame as the module docs describe: it is then
    /// taken and the result is true (`handle_frame` then updates the gauges and timers as
    /// after any frame). False, with nothing changed, for any other frame (the caller then
    /// goes the general way).
    pub(in crate::reliable) fn take_data_in_order(
        &mut self,
        now: Nanos,
        path: usize,
        header: &FrameHeader,
        payload: &[u8],
    ) -> bool {
        if !fast_path::enabled()
            || header.frame_type != FrameType::Data
            || header.flags & !(flags::ACK | flags::ACK_REQUESTED) != 0
            || header.flags & flags::ACK == 0
            || !header.sack.is_empty()
            || self.state != State::Established
            || self.send.close_requested()
            || !self.frame_is_ours(header)
        {
            return false;
        }
        let sent_end = self.send.next_packet_number();
        if header.cumulative_ack > sent_end {
            return false;
        }
        let first_fragment = header.fragment_offset == 0;
        let Some(message_ready) = self.recv.take_in_order(
            header.packet_number,
            first_fragment,
            header.message_len,
            header.stream_offset,
            payload,
        ) else {
            return false;
        };
        fast_path::note_taken();
        self.send.paths.on_arrival(path);
        self.last_received_at = now;
        self.ack_ranges_in.clear();
        let requested = header.flags & flags::ACK_REQUESTED != 0;
        self.recv
            .schedule_ack(now, Arrival::InOrder, requested, self.config.ack_delay_ns);
        let ack = DeferredAck {
            arrived_at: now,
            cumulative_ack: header.cumulative_ack,
            truncated: false,
            credit: header.credit,
            sent_end,
            answered: false,
        };
        // (Established, no Close asked for: checked above.)
        self.hold_ack_for_answer(ack, message_ready);
        if requested {
            self.recv.request_ack();
        }
        true
    }
}
