//! The send state's short routes (`crate::reliable::fast_path`), for a request-response
//! exchange.
//!
//! The acknowledgement: it newly covers the oldest frame in flight, and only that one,
//! cumulatively (no SACK range), and that frame left once, whole and as sent (no
//! retransmission, no re-cut), carrying data (not the Close), with nothing queued to resend
//! or re-cut. It makes exactly the changes [`SendState::on_ack`] makes for such an ack, in
//! the same order (the frame's path's window, RTT, rate meter, signs of life, timer and
//! loss detection; the lends; the duplicate-ack and freshness records), without that
//! method's walks over SACK ranges and paths and its copies of whole frames.
//!
//! The next frame of new data: one path, nothing lent, nothing queued to resend or re-cut,
//! room in the in-flight table, no Close asked for, bytes written and not yet sent. It is
//! cut and recorded as [`SendState::next_frame`] does it in that case (the same calls in
//! the same order, from the path's room on), without the checks and lookups of what cannot
//! be there.
//!
//! Layer: sans-IO, inside the send state (`send.rs`, whose fields it works on); no clock.

use quiver_wire::frame::SackRange;

use super::{AckOutcome, FrameStatus, FrameToSend, SendState, Unknown, NO_FRAME};
use crate::reliable::fast_path;
use crate::reliable::time::Nanos;

impl SendState {
    /// Processes an ack as [`Self::on_ack`] does (same arguments, same result): by
    /// [`Self::on_ack_of_one_frame`] when it can, else by `on_ack`.
    pub(in crate::reliable) fn process_ack(
        &mut self,
        now: Nanos,
        cumulative_ack: u64,
        sack: &[SackRange],
        truncated: bool,
        credit: u64,
        sent_end: u64,
    ) -> AckOutcome {
        match self.on_ack_of_one_frame(now, cumulative_ack, sack, truncated, credit, sent_end) {
            Some(outcome) => outcome,
            None => self.on_ack(now, cumulative_ack, sack, truncated, credit, sent_end),
        }
    }

    /// [`Self::on_ack`] (same arguments, same result) for an ack that newly covers exactly
    /// the oldest frame in flight, a first transmission of data, with no SACK ranges and
    /// nothing waiting to be resent or re-cut; `None`, with nothing changed, for any other
    /// ack.
    fn on_ack_of_one_frame(
        &mut self,
        now: Nanos,
        cumulative_ack: u64,
        sack: &[SackRange],
        truncated: bool,
        credit: u64,
        sent_end: u64,
    ) -> Option<AckOutcome> {
        if !fast_path::enabled()
            || !sack.is_empty()
            || truncated
            || cumulative_ack != self.base_pn + 1
            || sent_end <= self.base_pn
            || !self.retransmit_queue.is_empty()
            || !self.recut_queue.is_empty()
            || self.recut_in_flight != 0
        {
            return None;
        }
        let frame = self.in_flight.front()?;
        let path = usize::from(frame.path);
        if frame.status != FrameStatus::InFlight
            || frame.retransmitted
            || frame.recut
            || frame.is_close
            || frame.sent_at < self.paths.get(path).last_timeout_at
        {
            return None;
        }
        fast_path::note_taken();
        let sent_at = frame.sent_at;
        self.peer_credit = self.peer_credit.max(credit);
        let no_loss = self.retire_one_frame(now);
        if !self.lends.is_empty() {
            // Acknowledged lent bytes need no adoption; whole lends end.
            self.settle_lends();
        }
        // The path's one RTT sample of this ack (`on_ack`'s `sample_rtts`), from the frame
        // (`frame_acked` would have noted its send time: it left after the path's latest
        // timeout).
        let entry = self.paths.get_mut(path);
        let newest_sent_at = entry
            .newest_acked_sent_at
            .take()
            .map_or(sent_at, |newest| newest.max(sent_at));
        entry.on_rtt_sample(now.saturating_sub(newest_sent_at));
        let fresh = cumulative_ack >= self.freshest_ack_high;
        self.freshest_ack_high = self.freshest_ack_high.max(cumulative_ack);
        self.duplicate_acks = 0;
        let mut outcome = AckOutcome {
            progress: true,
            rtt_sample_ns: Some(now.saturating_sub(sent_at)),
            declared_lost: 0,
        };
        if fresh && !no_loss {
            outcome.declared_lost = self.detect_losses(path, Unknown { start: 0, end: 0 });
        }
        self.last_cumulative_ack = cumulative_ack;
        Some(outcome)
    }

    /// `on_ack`'s `ack_cumulative` and `frame_acked` for the oldest frame in flight (a first
    /// transmission, in flight): off its path's list and out of the table. Returns true
    /// when loss detection on its path would find nothing: the frame headed the path's
    /// list (every frame still on it was sent there after it, at a higher sequence
    /// number) and no later frame of the path was acknowledged before, so none can have
    /// been overtaken by acknowledged ones (`detect_losses` needs three).
    fn retire_one_frame(&mut self, now: Nanos) -> bool {
        let frame = &self.in_flight[0];
        let (path, sent_at, path_seq) = (usize::from(frame.path), frame.sent_at, frame.path_seq);
        let (previous, next, stream_end) = (
            frame.previous_on_path,
            frame.next_on_path,
            frame.stream_end(),
        );
        let bytes = self.frame_bytes(frame);
        self.unsacked -= 1;
        if previous == NO_FRAME {
            // `unlink` of its path's head (the frame's own links go with it below).
            let entry = self.paths.get_mut(path);
            entry.head = next;
            if next == NO_FRAME {
                entry.tail = NO_FRAME;
            } else {
                self.in_flight[(next - self.base_pn) as usize].previous_on_path = NO_FRAME;
            }
        } else {
            self.unlink(self.base_pn);
        }
        let entry = self.paths.get_mut(path);
        let overtaken = entry
            .largest_acked_seq
            .is_some_and(|largest| largest > path_seq);
        entry.bytes_in_flight -= bytes;
        entry.stats.frames_acked += 1;
        entry.largest_acked_seq = Some(
            entry
                .largest_acked_seq
                .map_or(path_seq, |largest| largest.max(path_seq)),
        );
        entry.rto_deadline = None;
        self.paths.delivered(path, now, bytes, sent_at);
        self.paths.mark_alive(path);
        self.in_flight.pop_front();
        self.acked_high = self.acked_high.max(stream_end);
        self.base_pn += 1;
        self.acked_offset = self.acked_high;
        debug_assert!(self.write_offset - self.acked_offset <= self.ring.len() as u64);
        previous == NO_FRAME && !overtaken
    }

    /// [`Self::next_frame`] for a full Data frame (not compact) of at most `max_payload`
    /// bytes, when the conditions of the module docs (the next frame of new data) hold:
    /// `Some` of its result (`None` inside when the path has no room, or credit or bytes
    /// are lacking). `None`, with nothing changed, when one of them fails: the caller then
    /// goes the general way (lends, retransmissions, re-cuts, the Close).
    pub(in crate::reliable) fn next_new_frame(
        &mut self,
        now: Nanos,
        max_payload: usize,
    ) -> Option<Option<FrameToSend>> {
        if !fast_path::enabled()
            || self.paths.len() != 1
            || !self.lends.is_empty()
            || !self.retransmit_queue.is_empty()
            || !self.recut_queue.is_empty()
            || self.in_flight.len() >= self.max_in_flight
            || self.close_requested
            || self.next_offset == self.write_offset
        {
            return None;
        }
        fast_path::note_taken();
        let largest = max_payload as u64 + self.frame_overhead_bytes;
        if !self.paths.get(0).has_room(largest) {
            return Some(None);
        }
        Some(
            self.next_new_data(max_payload)
                .map(|frame| self.record_new(now, frame, 0)),
        )
    }
}
