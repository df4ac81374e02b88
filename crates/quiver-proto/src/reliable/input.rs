//! Datagrams in: verification, the key handshake's frames, data, acknowledgements, Close
//! and Reset.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. It feeds the receive state (`recv.rs`) and
//! the send state's acknowledgements (`send.rs`). Corrupt, stale or foreign frames are
//! counted and dropped; nothing here panics on peer input.

use quiver_wire::frame::{
    self, flags, Frame, FrameError, FrameHeader, FrameType, MoreSackRanges, MAX_PAYLOAD_LEN,
};

use super::connection::{DeferredAck, ReliableConnection};
use super::events::{Event, FailReason, State};
use super::paths::MAX_PATHS;
use super::posted::{NoBuffers, PostedBuffers};
use super::recv::{Payload, Refusal};
use super::time::Nanos;

mod in_order;

impl ReliableConnection {
    /// Feeds one received datagram addressed to this connection, which arrived on `path`.
    /// Corrupt (bad checksum), malformed, duplicate, stale or out-of-window frames are
    /// dropped and counted in [`stats`](Self::stats); they never change delivered data and
    /// never panic. A `path` beyond `path_count` (the caller's mistake) is counted as
    /// unexpected and dropped.
    pub fn handle_datagram(&mut self, now: Nanos, path: usize, datagram: &[u8]) {
        self.handle_datagram_into(now, path, datagram, &mut []);
    }

    /// [`handle_datagram`](Self::handle_datagram) for a caller in the middle of reading a
    /// message (`read_message` returned it incomplete) whose buffer for the rest of it is
    /// `reader`: when the datagram carries exactly the next bytes of that message (in
    /// order, nothing unread before them), they are copied to the start of `reader` instead
    /// of into the receive buffer, and count as read. Returns that count (0: the datagram
    /// went the usual way); the caller moves its buffer on by it. Saves a copy per byte of
    /// a large message that arrives while it is being read. When the count completes the
    /// message, the next `read_message` starts the next one.
    ///
    /// Bytes of the message further ahead (frames that overtook others, as a striped
    /// connection's do all the time) go to their place in `reader` too, and are counted as
    /// read (returned) once everything before them is. So until the message is complete the
    /// caller keeps one buffer: every later call, and every `read_message`, gets it
    /// starting at the next unread byte, its bytes beyond left as they are; a reader that
    /// gives the buffer up earlier calls [`detach_reader`](Self::detach_reader).
    pub fn handle_datagram_into(
        &mut self,
        now: Nanos,
        path: usize,
        datagram: &[u8],
        reader: &mut [u8],
    ) -> usize {
        self.handle_datagram_with(now, path, datagram, reader, &mut NoBuffers)
    }

    /// [`handle_datagram`](Self::handle_datagram) for a caller with posted readers
    /// ([`post_reader`](Self::post_reader)), whose buffers are in `buffers`: the
    /// datagram's bytes of messages claimed by posted readers go straight to their place in
    /// those buffers (in order or ahead of the reads), and the readers read what is in
    /// order. Finished readers are in [`poll_posted`](Self::poll_posted).
    pub fn handle_datagram_posted(
        &mut self,
        now: Nanos,
        path: usize,
        datagram: &[u8],
        buffers: &mut dyn PostedBuffers,
    ) {
        self.handle_datagram_with(now, path, datagram, &mut [], buffers);
    }

    pub(super) fn handle_datagram_with(
        &mut self,
        now: Nanos,
        path: usize,
        datagram: &[u8],
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        self.stats.datagrams_received += 1;
        self.apply_deferred_ack();
        if path >= self.send.paths.len() {
            self.stats.unexpected_dropped += 1;
            return 0;
        }
        // Looked at where it was parsed, not moved out: a frame holds its whole header.
        let parsed = Frame::parse_for(datagram, self.local_id, self.recv_keys());
        let frame = match &parsed {
            Ok(frame) => frame,
            Err(FrameError::WrongConnection { .. }) => {
                self.stats.unexpected_dropped += 1;
                return 0;
            }
            Err(_) => {
                self.stats.corrupt_dropped += 1;
                return 0;
            }
        };
        self.handle_frame(
            now,
            path,
            frame.header(),
            Payload::Bytes(frame.payload()),
            reader,
            buffers,
        )
    }

    /// How many bytes at the start of `reader` (the buffer of a caller in the middle of a
    /// message, as for [`handle_datagram_into`](Self::handle_datagram_into)) the payload
    /// of the next Stream frame may be received straight into, before anything checked it:
    /// a scattering receive puts a datagram's first [`frame::STREAM_HEADER_LEN`] bytes in
    /// a buffer of their own and the next bytes there, then calls
    /// [`handle_stream_in_place`](Self::handle_stream_in_place). Those bytes of `reader`
    /// hold nothing yet (they are the message's next, neither read nor placed ahead), so a
    /// datagram that is not that frame costs nothing but the copy back out. 0: none (no
    /// message being read, bytes of it waiting in the receive buffer, posted readers, a
    /// connection not open).
    pub fn in_place_room(&self, reader_len: usize) -> usize {
        if !matches!(self.state, State::Established | State::Closing) {
            return 0;
        }
        self.recv.in_place_room(reader_len).min(MAX_PAYLOAD_LEN)
    }

    /// A datagram received in two pieces: `header`, its first
    /// [`frame::STREAM_HEADER_LEN`] bytes, and `payload_len` bytes at the start of `reader`
    /// (at most [`in_place_room`](Self::in_place_room) of them), the rest of it. When it is
    /// a Stream frame of this connection, intact, carrying exactly the next bytes of the
    /// message being read, it is taken as
    /// [`handle_datagram_into`](Self::handle_datagram_into) would take the same bytes back
    /// to back, without copying the payload (it is where that call would copy it), and the
    /// count of bytes read is returned. Otherwise nothing changes and the result is `None`:
    /// the caller puts the datagram back together and hands it to
    /// `handle_datagram_into`, which counts and drops it or takes it the usual way.
    pub fn handle_stream_in_place(
        &mut self,
        now: Nanos,
        path: usize,
        header: &[u8],
        payload_len: usize,
        reader: &mut [u8],
    ) -> Option<usize> {
        let payload = reader.get(..payload_len)?;
        let parsed =
            frame::parse_stream_split(header, payload, self.local_id, self.recv_keys()).ok()?;
        if path >= self.send.paths.len()
            || !self.frame_is_ours(&parsed)
            || !matches!(self.state, State::Established | State::Closing)
        {
            return None;
        }
        let packet_number = expand_low32(parsed.packet_number, self.recv.cumulative());
        let stream_offset = expand_low32(parsed.stream_offset, self.recv.readable_end());
        if !self
            .recv
            .takes_in_place(packet_number, stream_offset, payload_len, reader.len())
        {
            return None;
        }
        self.stats.datagrams_received += 1;
        self.stats.scattered_bytes += payload_len as u64;
        self.apply_deferred_ack();
        Some(self.handle_frame(
            now,
            path,
            &parsed,
            Payload::InReader(payload_len),
            reader,
            &mut NoBuffers,
        ))
    }

    /// A parsed and verified frame (the rest of `handle_datagram_with`); a payload already
    /// in `reader` only for a Stream frame `takes_in_place` accepted.
    pub(super) fn handle_frame(
        &mut self,
        now: Nanos,
        path: usize,
        header: &FrameHeader,
        payload: Payload<'_>,
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        // The common case first (`fast_path.rs`); false changed nothing.
        let in_order = match payload {
            Payload::Bytes(bytes) => {
                reader.is_empty() && self.take_data_in_order(now, path, header, bytes)
            }
            Payload::InReader(_) => false,
        };
        let direct = if in_order {
            0
        } else if self.frame_is_ours(header) {
            self.dispatch_frame(now, path, header, payload, reader, buffers)
        } else {
            self.stats.unexpected_dropped += 1;
            return 0;
        };
        self.stats.direct_read_bytes = self.recv.placed_bytes();
        if header.frame_type == FrameType::Stream && self.timers_idle() {
            // A compact Stream frame carries no ack fields, and this side has nothing in
            // flight, armed or waiting: refreshing the timers would change only the receive
            // buffer's gauge (the keepalive, idle and ack deadlines are computed when
            // asked). The receiving side of a bulk transfer, on nearly every datagram.
            self.stats.recv_buffered_bytes = self.recv.buffered_bytes();
        } else if self.deferred_ack.is_none() {
            // (With an ack deferred, its processing refreshes them.)
            self.refresh_timers(now);
        }
        direct
    }

    /// A frame of ours, by its type; returns the bytes that went to `reader`.
    fn dispatch_frame(
        &mut self,
        now: Nanos,
        path: usize,
        header: &FrameHeader,
        payload: Payload<'_>,
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        self.send.paths.on_arrival(path);
        match header.frame_type {
            FrameType::Handshake => {
                if !self.is_initiator {
                    self.handshake_path = path;
                }
                self.handle_handshake_frame(now, header, payload.bytes());
                0
            }
            FrameType::Reset => {
                self.handle_reset();
                0
            }
            FrameType::Data
            | FrameType::Ack
            | FrameType::Ping
            | FrameType::Close
            | FrameType::Stream => {
                self.handle_connection_frame(now, path, header, payload, reader, buffers)
            }
        }
    }

    /// Whether a valid frame belongs to this connection.
    pub(super) fn frame_is_ours(&self, header: &FrameHeader) -> bool {
        let to_us = header.dest_id == self.local_id
            // A duplicate Hello (dest id 0) reaches the responder it created.
            || (header.dest_id == 0
                && header.frame_type == FrameType::Handshake
                && !self.is_initiator);
        let from_peer = match self.peer_id {
            // A Stream frame names only its receiver.
            Some(_) if header.frame_type == FrameType::Stream => true,
            Some(peer_id) => header.src_id == peer_id,
            // A router's stateless refusal of our Hello comes from id 0: the responder kept
            // nothing, so it has no id.
            None => {
                header.src_id != 0
                    || (header.frame_type == FrameType::Handshake && self.is_initiator)
            }
        };
        to_us && from_peer
    }

    pub(super) fn handle_reset(&mut self) {
        match self.state {
            State::Closing if self.recv.peer_closed() => {
                // The peer forgot us after both Closes: only our Close's ack got lost.
                self.state = State::Closed;
                self.events.push_back(Event::Closed);
            }
            State::Closed | State::Failed => {}
            _ => self.fail(FailReason::PeerReset),
        }
    }

    /// A frame of an established connection; returns the bytes that went to `reader` (see
    /// [`Self::handle_datagram_into`]).
    pub(super) fn handle_connection_frame(
        &mut self,
        now: Nanos,
        path: usize,
        header: &FrameHeader,
        payload: Payload<'_>,
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        let bytes = payload.bytes();
        if !matches!(
            self.state,
            State::Established | State::Closing | State::Closed
        ) {
            // E.g. the responder's data before our Verdict arrived: it will be retransmitted.
            self.stats.unexpected_dropped += 1;
            return 0;
        }
        if self.is_replay(header) {
            self.stats.duplicates_dropped += 1;
            self.check_closed();
            return 0;
        }
        self.last_received_at = now;
        // The ack fields of a Data frame may wait for the answer (the `reliable` module
        // docs, "The answer first"): decided once its payload is taken.
        let mut ack_held = None;
        if header.flags & flags::ACK != 0 || header.frame_type == FrameType::Ack {
            let Ok(more) = MoreSackRanges::parse(header, bytes) else {
                // Checksummed but malformed: the peer is broken.
                self.stats.unexpected_dropped += 1;
                return 0;
            };
            let sent_end = self.send.next_packet_number();
            if header.cumulative_ack > sent_end {
                // It acknowledges what was never sent: the peer is broken.
                self.stats.unexpected_dropped += 1;
                return 0;
            }
            self.ack_ranges_in.clear();
            self.ack_ranges_in.extend_from_slice(header.sack.as_slice());
            self.ack_ranges_in.extend(more.iter());
            let ack = DeferredAck {
                arrived_at: now,
                cumulative_ack: header.cumulative_ack,
                truncated: header.flags & flags::SACK_TRUNCATED != 0,
                credit: header.credit,
                sent_end,
                answered: false,
            };
            if header.frame_type == FrameType::Data
                && self.state == State::Established
                && !self.send.close_requested()
            {
                ack_held = Some(ack);
            } else {
                self.apply_ack(ack);
            }
        }
        let mut direct = 0;
        match header.frame_type {
            FrameType::Data | FrameType::Close => {
                direct = self.take_data(now, header, bytes, reader, buffers);
                if let Some(ack) = ack_held {
                    let answer_due = self.state == State::Established
                        && !self.send.close_requested()
                        && self.recv.message_ready();
                    self.hold_ack_for_answer(ack, answer_due);
                }
            }
            FrameType::Stream => {
                direct = self.take_stream(now, header, payload, reader, buffers);
            }
            // Answered on the path it came by, so that the answer proves that path.
            FrameType::Ping => self.send.paths.queue_reply(path, header.packet_number),
            FrameType::Ack
                if header.flags & flags::PING_REPLY != 0
                    && self.send.paths.on_ping_reply(now, header.packet_number) =>
            {
                self.stats.paths_rejoined += 1;
            }
            _ => {}
        }
        if header.flags & flags::ACK_REQUESTED != 0 {
            self.recv.request_ack();
        }
        self.check_closed();
        direct
    }

    /// Whether an authenticated connection frame was taken before (decision 0067): a data
    /// frame already received (a retransmission the peer did not need, or a replay: our
    /// ack is repeated, as it may have been lost), a plain Ack not numbered above the last
    /// taken, a Ping not counted above the last of its path. Such a frame is refused before
    /// anything in it (acks, credit, liveness) is acted on; this notes what it refused.
    pub(super) fn is_replay(&mut self, header: &FrameHeader) -> bool {
        match header.frame_type {
            FrameType::Data | FrameType::Close | FrameType::Stream => {
                let packet_number = if header.frame_type == FrameType::Stream {
                    expand_low32(header.packet_number, self.recv.cumulative())
                } else {
                    header.packet_number
                };
                if !self.recv.already_received(packet_number) {
                    return false;
                }
                if header.frame_type != FrameType::Close {
                    self.stats.spurious_retransmits += 1;
                }
                self.recv.request_ack();
                true
            }
            FrameType::Ack if header.flags & flags::PING_REPLY == 0 => {
                if header.packet_number <= self.highest_ack_number_in {
                    return true;
                }
                self.highest_ack_number_in = header.packet_number;
                false
            }
            FrameType::Ping => {
                let index = (header.packet_number % MAX_PATHS as u64) as usize;
                let counter = header.packet_number / MAX_PATHS as u64;
                match self.ping_counters_in.get_mut(index) {
                    Some(highest) if counter > *highest => {
                        *highest = counter;
                        false
                    }
                    _ => true,
                }
            }
            _ => false,
        }
    }

    /// The ack fields of a Data frame whose message is now whole (`answer_due`) wait for the
    /// application's answer (the `reliable` module docs, "The answer first"); otherwise
    /// they are processed now.
    pub(super) fn hold_ack_for_answer(&mut self, ack: DeferredAck, answer_due: bool) {
        if answer_due {
            self.deferred_ack = Some(ack);
        } else {
            self.apply_ack(ack);
        }
    }

    /// Processes the ack fields of a frame (its SACK list in `ack_ranges_in`).
    pub(super) fn apply_ack(&mut self, ack: DeferredAck) {
        let outcome = self.send.process_ack(
            ack.arrived_at,
            ack.cumulative_ack,
            &self.ack_ranges_in,
            ack.truncated,
            ack.credit,
            ack.sent_end,
        );
        if let Some(sample) = outcome.rtt_sample_ns {
            self.rtt.on_sample(sample);
        }
        self.stats.fast_retransmits += outcome.declared_lost;
        if outcome.progress {
            self.consecutive_rtos = 0;
        }
        // Any ack answers a credit probe.
        self.probe_deadline = None;
        self.probe_backoff_shift = 0;
    }

    /// Processes the deferred ack, if any (the `reliable` module docs, "The answer
    /// first"), at the time it arrived, and refreshes the timers it moves.
    pub(super) fn apply_deferred_ack(&mut self) {
        if let Some(ack) = self.deferred_ack.take() {
            self.apply_ack(ack);
            self.refresh_timers(ack.arrived_at);
        }
    }

    /// A Data or Close frame; returns the bytes that went to `reader`.
    pub(super) fn take_data(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        payload: &[u8],
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        let is_close = header.frame_type == FrameType::Close;
        let first_fragment = !is_close && header.fragment_offset == 0;
        let result = self.recv.on_frame(
            header.packet_number,
            is_close,
            first_fragment,
            header.message_len,
            header.stream_offset,
            Payload::Bytes(if is_close { &[] } else { payload }),
            reader,
            buffers,
        );
        match result {
            Ok((arrival, direct)) => {
                let requested = header.flags & flags::ACK_REQUESTED != 0 || is_close;
                self.recv
                    .schedule_ack(now, arrival, requested, self.config.ack_delay_ns);
                if self.recv.peer_closed() && self.state == State::Established {
                    self.send.request_close();
                    self.state = State::Closing;
                }
                direct
            }
            Err(refusal) => {
                match refusal {
                    Refusal::Duplicate => {
                        self.stats.duplicates_dropped += 1;
                        self.stats.spurious_retransmits += 1;
                    }
                    Refusal::CreditViolation => self.stats.credit_violations += 1,
                    Refusal::OutOfWindow | Refusal::Inconsistent => {
                        self.stats.out_of_window_dropped += 1;
                    }
                }
                // A duplicate means our ack got lost: repeat it at once.
                self.recv.request_ack();
                0
            }
        }
    }

    /// A Stream frame: raw stream bytes, its packet number and offset in their low 32 bits.
    /// Returns the bytes that went to `reader`.
    pub(super) fn take_stream(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        payload: Payload<'_>,
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        let packet_number = expand_low32(header.packet_number, self.recv.cumulative());
        let stream_offset = expand_low32(header.stream_offset, self.recv.readable_end());
        match self.recv.on_frame(
            packet_number,
            false,
            false,
            0,
            stream_offset,
            payload,
            reader,
            buffers,
        ) {
            Ok((arrival, direct)) => {
                self.recv
                    .schedule_ack(now, arrival, false, self.config.ack_delay_ns);
                direct
            }
            Err(refusal) => {
                match refusal {
                    Refusal::Duplicate => {
                        self.stats.duplicates_dropped += 1;
                        self.stats.spurious_retransmits += 1;
                    }
                    Refusal::CreditViolation => self.stats.credit_violations += 1,
                    Refusal::OutOfWindow | Refusal::Inconsistent => {
                        self.stats.out_of_window_dropped += 1;
                    }
                }
                self.recv.request_ack();
                0
            }
        }
    }
}

/// The value whose low 32 bits are `low` nearest to `expected` (a Stream frame's packet
/// number or offset; unambiguous while the true value is within 2^31 of `expected`).
pub(super) fn expand_low32(low: u64, expected: u64) -> u64 {
    const SPAN: u64 = 1 << 32;
    let candidate = (expected & !(SPAN - 1)) | (low & (SPAN - 1));
    if candidate > expected.saturating_add(SPAN / 2) && candidate >= SPAN {
        candidate - SPAN
    } else if candidate.saturating_add(SPAN / 2) < expected {
        candidate.saturating_add(SPAN)
    } else {
        candidate
    }
}
