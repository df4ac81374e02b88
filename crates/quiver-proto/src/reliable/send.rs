//! The sending half of a reliable connection: the send ring (bytes written by the application
//! and not yet acknowledged), packetization into Data frames, the in-flight table indexed by
//! packet number, acknowledgement processing and loss detection.
//!
//! The byte stream holds, for each message, an 8-byte little-endian length followed by the
//! message bytes. The length never travels as payload: the first fragment of a message
//! (`fragment_offset == 0`) also covers those 8 stream bytes and the receiver rebuilds them
//! from the frame's `message_len`. So a zero-length message costs 8 bytes of buffer and
//! credit, which bounds the memory any number of empty messages can take.

use std::collections::VecDeque;

use quiver_wire::frame::SackRange;

use super::stream_ring::StreamRing;
use super::Nanos;

/// Bytes of stream each message header takes.
pub(super) const MESSAGE_HEADER_LEN: u64 = 8;

/// A frame after a transmission: enough to retransmit it byte for byte.
#[derive(Debug, Clone, Copy)]
pub(super) struct SentFrame {
    /// Data or Close.
    pub(super) is_close: bool,
    /// Stream offset of the payload.
    pub(super) payload_offset: u64,
    /// Payload length in bytes.
    pub(super) payload_len: u32,
    /// Message the payload belongs to.
    pub(super) message_id: u64,
    /// That message's total length.
    pub(super) message_len: u64,
    /// Offset of the payload within the message.
    pub(super) fragment_offset: u64,
    /// When it was last sent.
    sent_at: Nanos,
    /// Transmission order of the last send (new sends and retransmissions share the counter).
    tx_seq: u64,
    /// Whether it was ever sent twice (Karn: no RTT sample from it).
    retransmitted: bool,
    status: FrameStatus,
}

impl SentFrame {
    fn stream_end(&self) -> u64 {
        self.payload_offset + u64::from(self.payload_len)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameStatus {
    /// Sent, not acknowledged.
    InFlight,
    /// Declared lost and queued for retransmission.
    Lost,
    /// Selectively acknowledged (kept until the cumulative ack passes it).
    Sacked,
}

/// What one acknowledgement did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct AckOutcome {
    /// Some frame was acknowledged for the first time.
    pub(super) progress: bool,
    /// RTT sample from the newest newly acknowledged frame that was sent once.
    pub(super) rtt_sample_ns: Option<Nanos>,
    /// Frames declared lost by this ack (fast retransmit).
    pub(super) declared_lost: u64,
}

/// The ack names packets never sent: the peer is broken or hostile.
#[derive(Debug, Clone, Copy)]
pub(super) struct InvalidAck;

/// Packets above a lost one that must be acknowledged before it is declared lost.
const PACKET_THRESHOLD: u64 = 3;
/// Duplicate acks (acks that acknowledge nothing new) that trigger a fast retransmit.
const DUPLICATE_ACK_THRESHOLD: u32 = 3;

#[derive(Debug)]
pub(super) struct SendState {
    ring: StreamRing,
    /// Stream bytes released: every byte below it was acknowledged.
    acked_offset: u64,
    /// Stream bytes written by the application (headers included).
    write_offset: u64,
    /// Next stream byte never sent.
    next_offset: u64,
    /// Bytes of the open message the application has still to write.
    write_remaining: u64,

    /// Message being packetized: id, payload start and end in the stream.
    tx_message_id: u64,
    tx_message_len: u64,
    tx_payload_start: u64,
    tx_message_end: u64,
    /// Id the next message to packetize gets.
    tx_next_message_id: u64,

    /// Frames sent and not cumulatively acknowledged; index i is packet `base_pn + i`.
    in_flight: VecDeque<SentFrame>,
    base_pn: u64,
    /// Frames in `in_flight` not selectively acknowledged.
    unsacked: usize,
    max_in_flight: usize,
    /// Packet numbers to retransmit (stale entries are skipped when popped).
    retransmit_queue: VecDeque<u64>,
    next_tx_seq: u64,
    largest_acked_tx_seq: u64,
    last_cumulative_ack: u64,
    duplicate_acks: u32,

    /// Stream offset (exclusive) the peer lets us send up to.
    peer_credit: u64,
    /// The application asked to close: send a Close once all data is out.
    close_requested: bool,
    close_sent: bool,
    close_acked: bool,
}

/// A frame to put on the wire now.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameToSend {
    pub(super) packet_number: u64,
    pub(super) frame: SentFrame,
    pub(super) retransmission: bool,
}

impl SendState {
    pub(super) fn new(buffer_bytes: usize, max_in_flight: usize) -> Self {
        Self {
            ring: StreamRing::new(buffer_bytes),
            acked_offset: 0,
            write_offset: 0,
            next_offset: 0,
            write_remaining: 0,
            tx_message_id: 0,
            tx_message_len: 0,
            tx_payload_start: 0,
            tx_message_end: 0,
            tx_next_message_id: 0,
            in_flight: VecDeque::new(),
            base_pn: 0,
            unsacked: 0,
            max_in_flight,
            retransmit_queue: VecDeque::new(),
            next_tx_seq: 0,
            largest_acked_tx_seq: 0,
            last_cumulative_ack: 0,
            duplicate_acks: 0,
            peer_credit: 0,
            close_requested: false,
            close_sent: false,
            close_acked: false,
        }
    }

    // ---- application side ----

    /// Free bytes in the send ring.
    pub(super) fn capacity(&self) -> usize {
        // Invariant: write_offset - acked_offset <= ring.len(), enforced by every write.
        self.ring.len() - (self.write_offset - self.acked_offset) as usize
    }

    pub(super) fn message_open(&self) -> bool {
        self.write_remaining > 0
    }

    /// Writes a message header; the caller checked that no message is open and that
    /// [`MESSAGE_HEADER_LEN`] bytes are free.
    pub(super) fn start_message(&mut self, len: u64) {
        debug_assert!(!self.message_open() && self.capacity() >= MESSAGE_HEADER_LEN as usize);
        let at = self.write_offset;
        self.ring.copy_in(at, &len.to_le_bytes());
        self.write_offset += MESSAGE_HEADER_LEN;
        self.write_remaining = len;
    }

    /// Copies as much of `data` as fits the open message and the ring.
    pub(super) fn write(&mut self, data: &[u8]) -> usize {
        let remaining = usize::try_from(self.write_remaining).unwrap_or(usize::MAX);
        let count = data.len().min(remaining).min(self.capacity());
        if count > 0 {
            let at = self.write_offset;
            self.ring.copy_in(at, &data[..count]);
            self.write_offset += count as u64;
            self.write_remaining -= count as u64;
        }
        count
    }

    pub(super) fn all_acked(&self) -> bool {
        self.acked_offset == self.write_offset
    }

    pub(super) fn buffered_bytes(&self) -> u64 {
        self.write_offset - self.acked_offset
    }

    pub(super) fn request_close(&mut self) {
        self.close_requested = true;
    }

    pub(super) fn close_requested(&self) -> bool {
        self.close_requested
    }

    pub(super) fn close_acked(&self) -> bool {
        self.close_acked
    }

    pub(super) fn set_initial_credit(&mut self, credit: u64) {
        self.peer_credit = self.peer_credit.max(credit);
    }

    // ---- wire side ----

    /// Whether frames are sent and neither acknowledged nor selectively acknowledged.
    pub(super) fn has_unsacked(&self) -> bool {
        self.unsacked > 0
    }

    /// Whether the peer's credit is all that keeps data from going out.
    pub(super) fn credit_blocked(&self) -> bool {
        self.next_offset < self.write_offset && self.next_offset >= self.peer_credit
            || (self.next_offset < self.write_offset
                && self.next_offset == self.tx_message_end
                && self.peer_credit < self.next_offset + MESSAGE_HEADER_LEN)
    }

    /// Whether sending stalls after this frame (buffer full, no credit, in-flight cap): the
    /// receiver should ack at once instead of delaying.
    pub(super) fn will_stall(&self) -> bool {
        self.capacity() == 0
            || self.next_offset >= self.peer_credit
            || self.in_flight.len() >= self.max_in_flight
    }

    /// The next frame to send: a retransmission first, then new data, then the Close.
    /// `max_payload` bounds the payload length.
    pub(super) fn next_frame(&mut self, now: Nanos, max_payload: usize) -> Option<FrameToSend> {
        if let Some(frame) = self.next_retransmission(now) {
            return Some(frame);
        }
        if self.in_flight.len() >= self.max_in_flight {
            return None;
        }
        if let Some(frame) = self.next_new_data(max_payload) {
            return Some(self.record_new(now, frame));
        }
        if self.close_requested
            && !self.close_sent
            && !self.message_open()
            && self.next_offset == self.write_offset
        {
            self.close_sent = true;
            let frame = SentFrame {
                is_close: true,
                payload_offset: self.write_offset,
                payload_len: 0,
                message_id: self.tx_next_message_id,
                message_len: 0,
                fragment_offset: 0,
                sent_at: now,
                tx_seq: 0,
                retransmitted: false,
                status: FrameStatus::InFlight,
            };
            return Some(self.record_new(now, frame));
        }
        None
    }

    /// The payload bytes of a frame (contiguous in the ring by construction).
    /// Bytes `[offset, offset + len)` of the stream while still buffered (written and not
    /// yet acknowledged) and contiguous in the ring; None otherwise.
    pub(super) fn payload_at(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len as u64)?;
        if offset < self.acked_offset || end > self.write_offset {
            return None;
        }
        let start = self.ring.position(offset);
        self.ring.get(start..start.checked_add(len)?)
    }

    pub(super) fn payload(&self, frame: &SentFrame) -> &[u8] {
        let start = self.ring.position(frame.payload_offset);
        &self.ring[start..start + frame.payload_len as usize]
    }

    /// Processes the ack fields of a frame from the peer.
    pub(super) fn on_ack(
        &mut self,
        now: Nanos,
        cumulative_ack: u64,
        sack: &[SackRange],
        credit: u64,
    ) -> Result<AckOutcome, InvalidAck> {
        let next_pn = self.base_pn + self.in_flight.len() as u64;
        if cumulative_ack > next_pn {
            return Err(InvalidAck);
        }
        self.peer_credit = self.peer_credit.max(credit);
        let mut outcome = AckOutcome::default();
        // (packet number, frame) of the newest newly acknowledged frame.
        let mut newest: Option<(u64, SentFrame)> = None;
        while self.base_pn < cumulative_ack {
            let Some(frame) = self.in_flight.pop_front() else {
                break;
            };
            if frame.status != FrameStatus::Sacked {
                self.unsacked -= 1;
                newest = Some((self.base_pn, frame));
            }
            self.acked_offset = self.acked_offset.max(frame.stream_end());
            if frame.is_close {
                self.close_acked = true;
            }
            self.base_pn += 1;
        }
        for range in sack {
            let start = range.start.max(self.base_pn);
            let end = range.end.min(next_pn);
            for packet_number in start..end {
                let index = (packet_number - self.base_pn) as usize;
                let frame = &mut self.in_flight[index];
                if frame.status != FrameStatus::Sacked {
                    frame.status = FrameStatus::Sacked;
                    self.unsacked -= 1;
                    if newest.is_none_or(|(newest_pn, _)| packet_number > newest_pn) {
                        newest = Some((packet_number, *frame));
                    }
                }
            }
        }
        if let Some((newest_pn, frame)) = newest {
            outcome.progress = true;
            self.duplicate_acks = 0;
            if !frame.retransmitted {
                outcome.rtt_sample_ns = Some(now.saturating_sub(frame.sent_at));
            }
            if frame.tx_seq > self.largest_acked_tx_seq {
                self.largest_acked_tx_seq = frame.tx_seq;
                outcome.declared_lost = self.detect_losses(newest_pn);
            }
        } else if cumulative_ack == self.last_cumulative_ack
            && !sack.is_empty()
            && !self.in_flight.is_empty()
        {
            // Only an ack that reports holes counts: acks answering pings or carrying a
            // window update say nothing about loss.
            self.duplicate_acks += 1;
            if self.duplicate_acks == DUPLICATE_ACK_THRESHOLD && self.mark_lost(0) {
                outcome.declared_lost = 1;
            }
        }
        self.last_cumulative_ack = cumulative_ack;
        self.drop_stale_retransmissions();
        Ok(outcome)
    }

    /// Retransmission timeout: declares lost every unacknowledged frame last sent at least
    /// `rto_ns` ago (and at least the oldest one). Returns how many were declared lost.
    pub(super) fn on_rto(&mut self, now: Nanos, rto_ns: Nanos) -> u64 {
        let mut lost = 0;
        let mut first = true;
        for index in 0..self.in_flight.len() {
            let frame = self.in_flight[index];
            if frame.status != FrameStatus::InFlight {
                continue;
            }
            if (first || now.saturating_sub(frame.sent_at) >= rto_ns) && self.mark_lost(index) {
                lost += 1;
            }
            first = false;
        }
        lost
    }

    /// Bytes of memory held.
    pub(super) fn memory_bytes(&self) -> usize {
        self.ring.capacity()
            + self.in_flight.capacity() * core::mem::size_of::<SentFrame>()
            + self.retransmit_queue.capacity() * core::mem::size_of::<u64>()
    }

    // ---- helpers ----

    fn next_retransmission(&mut self, now: Nanos) -> Option<FrameToSend> {
        while let Some(packet_number) = self.retransmit_queue.pop_front() {
            let Some(index) = packet_number.checked_sub(self.base_pn) else {
                continue;
            };
            let Some(frame) = self.in_flight.get_mut(index as usize) else {
                continue;
            };
            if frame.status != FrameStatus::Lost {
                continue;
            }
            frame.status = FrameStatus::InFlight;
            frame.retransmitted = true;
            frame.sent_at = now;
            frame.tx_seq = self.next_tx_seq;
            self.next_tx_seq += 1;
            return Some(FrameToSend {
                packet_number,
                frame: *frame,
                retransmission: true,
            });
        }
        None
    }

    /// Cuts the next Data frame from the stream, or `None` if no data, credit or room.
    fn next_new_data(&mut self, max_payload: usize) -> Option<SentFrame> {
        let start = self.next_offset;
        if start == self.tx_message_end {
            // A message boundary: read the next message's header.
            if self.write_offset < start + MESSAGE_HEADER_LEN
                || self.peer_credit < start + MESSAGE_HEADER_LEN
            {
                return None;
            }
            let mut header = [0u8; MESSAGE_HEADER_LEN as usize];
            self.ring.copy_out(start, &mut header);
            let len = u64::from_le_bytes(header);
            self.tx_message_id = self.tx_next_message_id;
            self.tx_next_message_id += 1;
            self.tx_message_len = len;
            self.tx_payload_start = start + MESSAGE_HEADER_LEN;
            self.tx_message_end = self.tx_payload_start.saturating_add(len);
        }
        let payload_offset = start.max(self.tx_payload_start);
        let first_fragment = start < self.tx_payload_start;
        let available_end = self
            .write_offset
            .min(self.tx_message_end)
            .min(self.peer_credit);
        let ring_room = self.ring.len() - self.ring.position(payload_offset);
        let len = available_end
            .saturating_sub(payload_offset)
            .min(max_payload as u64)
            .min(ring_room as u64);
        if len == 0 && !(first_fragment && self.tx_message_len == 0) {
            return None;
        }
        self.next_offset = payload_offset + len;
        Some(SentFrame {
            is_close: false,
            payload_offset,
            // Invariant: len <= max_payload, which the caller bounds by the u16 payload field.
            payload_len: len as u32,
            message_id: self.tx_message_id,
            message_len: self.tx_message_len,
            fragment_offset: payload_offset - self.tx_payload_start,
            sent_at: 0,
            tx_seq: 0,
            retransmitted: false,
            status: FrameStatus::InFlight,
        })
    }

    fn record_new(&mut self, now: Nanos, mut frame: SentFrame) -> FrameToSend {
        frame.sent_at = now;
        frame.tx_seq = self.next_tx_seq;
        self.next_tx_seq += 1;
        let packet_number = self.base_pn + self.in_flight.len() as u64;
        self.in_flight.push_back(frame);
        self.unsacked += 1;
        FrameToSend {
            packet_number,
            frame,
            retransmission: false,
        }
    }

    /// Declares the frames before `newest_pn` lost whose last send is at least
    /// [`PACKET_THRESHOLD`] transmissions older than the newest acknowledged one.
    fn detect_losses(&mut self, newest_pn: u64) -> u64 {
        let limit = ((newest_pn.saturating_sub(self.base_pn)) as usize).min(self.in_flight.len());
        let mut lost = 0;
        for index in 0..limit {
            let frame = self.in_flight[index];
            if frame.status == FrameStatus::InFlight
                && frame.tx_seq + PACKET_THRESHOLD <= self.largest_acked_tx_seq
                && self.mark_lost(index)
            {
                lost += 1;
            }
        }
        lost
    }

    fn mark_lost(&mut self, index: usize) -> bool {
        let Some(frame) = self.in_flight.get_mut(index) else {
            return false;
        };
        if frame.status != FrameStatus::InFlight {
            return false;
        }
        frame.status = FrameStatus::Lost;
        self.retransmit_queue.push_back(self.base_pn + index as u64);
        true
    }

    /// Keeps the retransmit queue within `max_in_flight` entries.
    fn drop_stale_retransmissions(&mut self) {
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
