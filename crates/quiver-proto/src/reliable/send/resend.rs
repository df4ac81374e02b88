//! What is resent: the queue of frames declared lost, and re-cutting them for a smaller
//! datagram size (decision 0081, "Lost frames are re-cut").
//!
//! A frame declared lost is resent under its packet number, byte for byte, while it fits
//! the datagram size in force. Once the connection's datagram size was lowered, a lost
//! frame that no longer fits is resent shortened, under its packet number still, to the
//! bytes that fit; the rest of its stream range (a [`Recut`]) waits in a queue and leaves
//! in new frames (new packet numbers, cut to the size in force then) before any new data.
//! Nothing resent is ever larger than the size in force, so a path that drops what is too
//! large (an AF_XDP link whose MTU fell, where nothing fragments) loses each frame at most
//! once.
//!
//! Layer: sans-IO, inside the send state (`send.rs`, whose fields it works on); no clock.
//!
//! The stream ranges of re-cut frames lie below those of frames numbered before them, so
//! the send ring's release point (`acked_offset`) is held at the lowest byte of a re-cut
//! range not yet acknowledged ([`SendState::recut_floor`]), and the receiver keeps its
//! readable end contiguous over stream ranges that arrive above a hole (`recv.rs`).

use super::{FrameStatus, FrameToSend, SendState, SentFrame, STREAM_OVERHEAD_BYTES};
use crate::reliable::recut::{PayloadLimits, Recut};
use crate::reliable::time::Nanos;

impl SendState {
    /// The payload length a retransmission of `frame` has under `limits`, or None when it
    /// must be shortened and the queue of rests is full (it waits for rests to leave).
    pub(super) fn fitting_len(&self, frame: &SentFrame, limits: PayloadLimits) -> Option<u32> {
        let limit = limits.of(frame.compact);
        if u64::from(frame.payload_len) <= limit {
            return Some(frame.payload_len);
        }
        if self.recut_queue.len() >= 2 * self.max_in_flight {
            return None;
        }
        // Invariant: limit < payload_len, a u32.
        Some(limit as u32)
    }

    /// Shortens the lost frame at `index` to `len` payload bytes (less than it has) before
    /// it is resent, and queues the rest of its bytes for new frames.
    pub(super) fn shorten(&mut self, index: usize, len: u32) {
        let frame = &mut self.in_flight[index];
        debug_assert!(len < frame.payload_len && !frame.is_close);
        let rest = Recut {
            compact: frame.compact,
            offset: frame.payload_offset + u64::from(len),
            len: u64::from(frame.payload_len - len),
            message_id: frame.message_id,
            message_len: frame.message_len,
            fragment_offset: frame.fragment_offset + u64::from(len),
        };
        frame.payload_len = len;
        self.recut_queue.push_back(rest);
        self.frames_recut += 1;
    }

    /// Whether the next data frame is a retransmission: one waits, and rests do not crowd
    /// the queue (`max_in_flight` of them or more) while the in-flight table has room for
    /// them. Crowding rests leave first, so that the queue never stops a retransmission
    /// for long. It holds at most `2 * max_in_flight`: beyond `max_in_flight`, only frames
    /// already in flight when it got there are shortened before the next of them leaves
    /// (`max_in_flight` at most), unless the size falls again meanwhile.
    pub(super) fn retransmission_first(&mut self) -> bool {
        let crowded = self.recut_queue.len() >= self.max_in_flight
            && self.in_flight.len() < self.max_in_flight;
        !crowded && self.retransmission_pending()
    }

    /// Whether rests of shortened frames wait to be sent.
    pub(super) fn recut_waiting(&self) -> bool {
        !self.recut_queue.is_empty()
    }

    /// Stream offset of the next rest to send, if any.
    pub(super) fn next_recut_offset(&self) -> Option<u64> {
        self.recut_queue.front().map(|rest| rest.offset)
    }

    /// The next frame cut from the oldest rest, under a new packet number (the caller
    /// checked that the in-flight table has room), or None while no path has room.
    pub(super) fn next_recut(&mut self, now: Nanos, limits: PayloadLimits) -> Option<FrameToSend> {
        let rest = *self.recut_queue.front()?;
        let len = rest.len.min(limits.of(rest.compact));
        let overhead = if rest.compact {
            STREAM_OVERHEAD_BYTES
        } else {
            self.frame_overhead_bytes
        };
        let path = self.paths.choose(len + overhead)?;
        // Invariant: len <= the payload limit, at most u16::MAX.
        let mut frame = SentFrame::new(
            false,
            rest.offset,
            len as u32,
            rest.message_id,
            rest.message_len,
            rest.fragment_offset,
        );
        frame.compact = rest.compact;
        frame.recut = true;
        if len == rest.len {
            self.recut_queue.pop_front();
        } else if let Some(front) = self.recut_queue.front_mut() {
            front.offset += len;
            front.len -= len;
            front.fragment_offset += len;
        }
        self.recut_in_flight += 1;
        let mut to_send = self.record_new(now, frame, path);
        // Its bytes were sent before (in the frame it was cut from).
        to_send.retransmission = true;
        Some(to_send)
    }

    /// The lowest stream byte of a re-cut range not yet acknowledged (a rest waiting, or a
    /// frame cut from one not yet cumulatively acknowledged): the ring keeps every byte
    /// from there on. `u64::MAX` when there is none.
    pub(super) fn recut_floor(&self) -> u64 {
        let waiting = self.recut_queue.iter().map(|rest| rest.offset).min();
        let in_flight = if self.recut_in_flight == 0 {
            None
        } else {
            self.in_flight
                .iter()
                .filter(|frame| frame.recut)
                .map(|frame| frame.payload_offset)
                .min()
        };
        waiting
            .into_iter()
            .chain(in_flight)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Frames shortened so far (each resent smaller, its rest in new frames).
    pub(in crate::reliable) fn frames_recut(&self) -> u64 {
        self.frames_recut
    }

    /// Whether a frame declared lost waits for retransmission (drops stale entries).
    pub(super) fn retransmission_pending(&mut self) -> bool {
        while let Some(&packet_number) = self.retransmit_queue.front() {
            let live = packet_number
                .checked_sub(self.base_pn)
                .and_then(|index| self.in_flight.get(index as usize))
                .is_some_and(|frame| frame.status == FrameStatus::Lost);
            if live {
                return true;
            }
            self.retransmit_queue.pop_front();
        }
        false
    }

    /// The frame at the front of the retransmit queue (live: checked by the caller) on the
    /// path that can take it, or `None` while every window is full. A frame larger than
    /// `limits` allow now is shortened first (`recut.rs`).
    pub(super) fn next_retransmission(
        &mut self,
        now: Nanos,
        limits: PayloadLimits,
    ) -> Option<FrameToSend> {
        let packet_number = *self.retransmit_queue.front()?;
        let index = (packet_number - self.base_pn) as usize;
        let frame = self.in_flight[index];
        let len = self.fitting_len(&frame, limits)?;
        let bytes = self.frame_bytes(&frame) - u64::from(frame.payload_len - len);
        let path = self.paths.choose(bytes)?;
        if len < frame.payload_len {
            self.shorten(index, len);
        }
        self.retransmit_queue.pop_front();
        let frame = &mut self.in_flight[index];
        frame.status = FrameStatus::InFlight;
        frame.retransmitted = true;
        frame.paths_mixed |= usize::from(frame.path) != path;
        self.on_transmit(now, packet_number, path);
        Some(FrameToSend {
            packet_number,
            frame: self.in_flight[index],
            retransmission: true,
            path,
        })
    }

    /// Keeps the retransmit queue within `max_in_flight` entries.
    pub(super) fn drop_stale_retransmissions(&mut self) {
        while self
            .retransmit_queue
            .front()
            .is_some_and(|&packet_number| packet_number < self.base_pn)
        {
            self.retransmit_queue.pop_front();
        }
        if self.retransmit_queue.len() > self.max_in_flight {
            let base_pn = self.base_pn;
            let in_flight = &self.in_flight;
            self.retransmit_queue.retain(|&packet_number| {
                packet_number >= base_pn
                    && in_flight
                        .get((packet_number - base_pn) as usize)
                        .is_some_and(|frame| frame.status == FrameStatus::Lost)
            });
        }
    }
}
