//! The receiving half of a reliable connection: the receive ring (stream bytes not yet read
//! by the application, in order or not), the received packet numbers above the cumulative
//! ack with their SACK ranges, delayed-ack bookkeeping, credit and message-by-message reads.
//!
//! Layer: sans-IO, inside `crate::reliable`, below the connection that feeds it verified
//! frames. It owns the receive ring and the received packet numbers; it must not parse
//! frames (the connection does) nor read a clock.
//!
//! Memory: the ring is `recv_window_bytes` long and the credit we advertise never lets the
//! peer send past `read_offset + recv_window_bytes`, so every acceptable byte has its own
//! slot; the per-packet tables hold at most `max_in_flight_datagrams` entries.
//!
//! Posted readers ([`RecvState::post_reader`]): buffers for the next messages, each under a
//! token, claimed by message in posting order once the message's length prefix (and so its
//! place in the stream) is known. A frame's bytes of a claimed message go straight to their
//! place in its buffer instead of into the ring; they count as read only in order, so the
//! credit (and the ring slots they would have used) is exactly as if they had gone through
//! the ring.

use std::collections::VecDeque;

use quiver_wire::frame::{MessagePrefix, SackRange, SackRanges};

use super::posted::{PostedBuffers, PostedRead};
use super::send::MESSAGE_HEADER_LEN;
use super::stream_ring::StreamRing;
use super::time::Nanos;

mod in_order;

/// Posted readers a connection holds at most (claimed or not, or finished and not yet
/// polled).
pub const MAX_POSTED_READERS: usize = 64;

/// A message claimed by a posted reader: where it is in the stream and whose buffer it
/// goes to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Claimed {
    token: u64,
    /// Stream offset of the message's 8-byte length prefix.
    prefix_at: u64,
    /// Bytes of its header: the prefix, and the tag of a tagged message.
    header_len: u64,
    /// Its tag (0: untagged), or an active message's handler word.
    tag: u64,
    /// Whether it is an active message.
    active: bool,
    /// Its length (at most the reader's capacity).
    len: u64,
    /// The read offset has passed its prefix: its bytes are being read in order.
    started: bool,
}

impl Claimed {
    /// Stream offset of the message's first byte.
    fn payload_start(&self) -> u64 {
        self.prefix_at + self.header_len
    }

    /// Stream offset just past the message.
    fn end(&self) -> u64 {
        self.payload_start() + self.len
    }
}

/// Why a Data or Close frame was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Already received.
    Duplicate,
    /// Packet number too far above the cumulative ack (more than the in-flight cap).
    OutOfWindow,
    /// Bytes beyond the credit we gave.
    CreditViolation,
    /// Stream offsets inconsistent with data already received.
    Inconsistent,
}

/// Where the payload of a frame handed to [`RecvState::on_frame`] is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Payload<'a> {
    /// In this slice.
    Bytes(&'a [u8]),
    /// Already at the start of the reader's buffer, this many bytes (a scattering receive
    /// put it there): only for a frame [`RecvState::takes_in_place`] accepts.
    InReader(usize),
}

impl<'a> Payload<'a> {
    /// The bytes in hand: none for a payload in the reader's buffer.
    pub(super) fn bytes(self) -> &'a [u8] {
        match self {
            Payload::Bytes(bytes) => bytes,
            Payload::InReader(_) => &[],
        }
    }

    /// How many bytes the payload has, wherever they are.
    pub(super) fn len(self) -> usize {
        match self {
            Payload::Bytes(bytes) => bytes.len(),
            Payload::InReader(len) => len,
        }
    }
}

/// How a taken frame affects acking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrival {
    /// The next expected packet, nothing was missing before it.
    InOrder,
    /// Arrived above a gap, or filled one: ack at once so the sender learns quickly.
    Reordered,
}

#[derive(Debug)]
pub(super) struct RecvState {
    ring: StreamRing,
    /// Stream bytes consumed by the application.
    read_offset: u64,
    /// Every stream byte below it is present (all packets below `cumulative` arrived, and
    /// the stream ranges in `ahead` are not next).
    readable_end: u64,
    /// Stream ranges of packets below `cumulative` that lie above `readable_end` (beyond a
    /// hole): ascending, disjoint, not touching. Only a sender that re-cut a lost frame for
    /// a smaller datagram size (`send/resend.rs`) numbers bytes out of stream order; the
    /// hole is the rest of that frame, coming in later packets. At most `2 *
    /// max_in_flight` ranges (`Self::locate`).
    ahead: VecDeque<(u64, u64)>,
    /// Next expected packet number.
    cumulative: u64,
    /// Index i is packet `cumulative + i`: the stream range (start, end) it covers if it
    /// arrived.
    pending: VecDeque<Option<(u64, u64)>>,
    /// Received packet ranges above `cumulative`, ascending, separated by gaps.
    ranges: VecDeque<SackRange>,
    max_in_flight: usize,
    /// Packet number of the peer's Close, once received, and its stream offset (the end of
    /// the peer's stream).
    close_packet: Option<u64>,
    close_offset: u64,

    /// Reader: inside a message, and how much of it is left.
    in_message: bool,
    message_len: u64,
    message_remaining: u64,
    /// The tag of the message being read, or of the last one read (0: untagged).
    message_tag: u64,
    /// Whether that message is an active message (`message_tag` is its handler word).
    message_active: bool,
    /// Stream ranges of the current message placed ahead in the reader's buffer (see
    /// [`Self::on_frame`]): ascending, disjoint, at or above `read_offset`, at most
    /// `max_in_flight` of them. Their bytes are not in the ring.
    placed: VecDeque<(u64, u64)>,
    /// Payload bytes placed straight into a reader's buffer so far (in order or ahead).
    placed_bytes: u64,

    /// Posted readers (token, capacity) not yet matched to a message, in posting order.
    posted: VecDeque<(u64, u64)>,
    /// Messages matched to posted readers, in stream order (consecutive messages).
    claimed: VecDeque<Claimed>,
    /// Stream ranges of claimed messages' bytes placed in their readers' buffers:
    /// ascending, disjoint, each within one message's bytes (never a length prefix), at or
    /// above `read_offset`, at most `max_in_flight` of them. Their bytes are not in the ring.
    claimed_placed: VecDeque<(u64, u64)>,
    /// Posted readers done (in the order they finished).
    completions: VecDeque<PostedRead>,

    /// Credit in the last frame we sent.
    advertised_credit: u64,
    /// Data frames taken since our last ack.
    unacked_frames: u32,
    /// Send an ack with the next poll_transmit.
    ack_now: bool,
    /// Latest time for a delayed ack.
    ack_deadline: Option<Nanos>,
}

impl RecvState {
    pub(super) fn new(window_bytes: usize, max_in_flight: usize) -> Self {
        Self {
            ring: StreamRing::new(window_bytes),
            read_offset: 0,
            readable_end: 0,
            ahead: VecDeque::new(),
            cumulative: 0,
            pending: VecDeque::new(),
            ranges: VecDeque::new(),
            max_in_flight,
            close_packet: None,
            close_offset: 0,
            in_message: false,
            message_len: 0,
            message_remaining: 0,
            message_tag: 0,
            message_active: false,
            placed: VecDeque::new(),
            placed_bytes: 0,
            posted: VecDeque::new(),
            claimed: VecDeque::new(),
            claimed_placed: VecDeque::new(),
            completions: VecDeque::new(),
            advertised_credit: window_bytes as u64,
            unacked_frames: 0,
            ack_now: false,
            ack_deadline: None,
        }
    }

    /// Starts a new connection's numbering at `packet_number` and `stream_offset` instead of
    /// 0 (tests of the 32-bit wrap), as the peer's sender does.
    pub(super) fn start_numbering(&mut self, packet_number: u64, stream_offset: u64) {
        debug_assert!(self.pending.is_empty() && self.read_offset == 0);
        self.cumulative = packet_number;
        self.read_offset = stream_offset;
        self.readable_end = stream_offset;
    }

    /// Takes one Data (or, with `is_close`, Close) frame. `first_fragment` frames also cover
    /// the 8 header bytes before `payload_offset`, rebuilt from `message_len`.
    ///
    /// `reader` is where the application reads the current message to (empty: nowhere):
    /// `reader[i]` is stream offset `read_offset + i`. When the frame carries exactly the
    /// next bytes it would read (nothing unread before them), those of the current message
    /// are copied there instead of into the ring and count as read ([`Self::read_message`]
    /// would have copied them there next). A frame further ahead in the current message (a
    /// striped connection's frames arrive out of order all the time) is copied to its place
    /// in `reader` as well and remembered in `placed`; it counts as read once everything
    /// before it is (here, or in a later `read_message` with the same buffer). Returns how
    /// the frame arrived and how many bytes at the start of `reader` are now read.
    ///
    /// Bytes of messages claimed by posted readers go to their buffers (from `buffers`)
    /// instead of the ring; the posted readers then claim and read what they can
    /// ([`Self::read_posted`]).
    #[allow(clippy::too_many_arguments)] // The fields of one frame; a struct would only rename them.
    pub(super) fn on_frame(
        &mut self,
        packet_number: u64,
        is_close: bool,
        first_fragment: bool,
        message_len: u64,
        payload_offset: u64,
        payload: Payload<'_>,
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> Result<(Arrival, usize), Refusal> {
        let (bytes, payload_len) = (payload.bytes(), payload.len());
        let (index, stream_start, stream_end) = self.locate(
            packet_number,
            is_close,
            first_fragment,
            payload_offset,
            payload_len,
        )?;
        // Bytes held already (`Self::locate`): only the packet number is new.
        let held = !is_close
            && (stream_start < self.readable_end || self.ahead_covers(stream_start, stream_end));
        let direct = if held {
            if matches!(payload, Payload::InReader(_)) {
                return Err(Refusal::Inconsistent);
            }
            0
        } else {
            if first_fragment {
                self.ring.write_u64_le(stream_start, message_len);
            }
            let direct =
                self.copy_to_reader(index, first_fragment, payload_offset, payload, reader)?;
            self.store(
                direct,
                first_fragment,
                payload_offset,
                bytes,
                reader,
                buffers,
            );
            direct
        };
        if is_close {
            self.close_packet = Some(packet_number);
            self.close_offset = stream_start;
        }
        let arrival = self.take_packet(packet_number, index, stream_start, stream_end, direct);
        let mut read = direct as u64;
        // Bytes placed ahead earlier that are now next in order: read.
        if !reader.is_empty() {
            read += self.consume_placed();
        }
        if !self.posted.is_empty() || !self.claimed.is_empty() {
            self.claim(Some((stream_start, stream_end)), false);
            self.drive_posted(buffers);
        }
        // Invariant: what was read is in `reader` (placed there by this call or an earlier
        // one with the same buffer), so it is at most `reader.len()`.
        let read = usize::try_from(read)
            .unwrap_or(usize::MAX)
            .min(reader.len());
        Ok((arrival, read))
    }

    /// Puts a frame's payload `bytes` (at stream `offset`; its first `direct` bytes went to
    /// the reader) where it goes: ahead in the reader's buffer, to posted readers, or into
    /// the ring.
    fn store(
        &mut self,
        direct: usize,
        first_fragment: bool,
        offset: u64,
        bytes: &[u8],
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) {
        // Ahead of the reader, within its buffer and the current message: to its place there.
        let ahead = if direct == 0 && !first_fragment {
            self.place_ahead(offset, bytes, reader)
        } else {
            0
        };
        self.placed_bytes += (direct + ahead) as u64;
        // The ring slots of the bytes that went to the reader are never read: the read
        // offset moves past them (below, or once the bytes before them are read).
        let rest_offset = offset + (direct + ahead) as u64;
        let rest = bytes.get(direct + ahead..).unwrap_or(&[]);
        if self.claimed.is_empty() {
            self.ring.copy_in(rest_offset, rest);
        } else {
            self.place_claimed(rest_offset, rest, buffers);
        }
    }

    /// Records packet `packet_number` (at `index` above the cumulative ack, covering the
    /// stream range `[stream_start, stream_end)`) as received, moves the cumulative ack
    /// over it when it is next, and reads the `direct` bytes that went to the reader.
    fn take_packet(
        &mut self,
        packet_number: u64,
        index: usize,
        stream_start: u64,
        stream_end: u64,
        direct: usize,
    ) -> Arrival {
        let range = Some((stream_start, stream_end));
        match self.pending.get_mut(index) {
            Some(slot) => *slot = range,
            None => {
                // Usually the next packet in order, with no hole to fill first (a resize
                // is a call even then).
                if self.pending.len() < index {
                    self.pending.resize(index, None);
                }
                self.pending.push_back(range);
            }
        }
        let had_gap = !self.ranges.is_empty();
        if index == 0 {
            self.advance();
        } else {
            self.insert_range(packet_number);
        }
        self.unacked_frames += 1;
        if direct > 0 {
            self.consume(direct as u64);
        }
        if index == 0 && !had_gap {
            Arrival::InOrder
        } else {
            Arrival::Reordered
        }
    }

    /// Whether a data frame numbered `packet_number` was received already (below the
    /// cumulative ack, or held above it): a retransmission the peer did not need, or a
    /// replay, refused before anything in it is acted on.
    pub(super) fn already_received(&self, packet_number: u64) -> bool {
        let Some(index) = packet_number.checked_sub(self.cumulative) else {
            return true;
        };
        usize::try_from(index)
            .ok()
            .and_then(|index| self.pending.get(index))
            .is_some_and(Option::is_some)
    }

    /// Where a frame belongs, or why it is refused (nothing changes either way): its index
    /// among the packets above the cumulative ack, and the stream range it covers, its
    /// message's length prefix included for a first fragment.
    ///
    /// A frame whose bytes are all held already (below the readable end, or within a range
    /// ahead of it) is taken for its packet number alone: a frame re-cut by the sender
    /// (`send/resend.rs`) whose original arrived after all. One that straddles the
    /// readable end is refused. After the peer's Close, only frames of bytes before the
    /// Close's offset (re-cut ones) are taken.
    fn locate(
        &self,
        packet_number: u64,
        is_close: bool,
        first_fragment: bool,
        payload_offset: u64,
        payload_len: usize,
    ) -> Result<(usize, u64, u64), Refusal> {
        let Some(index) = packet_number.checked_sub(self.cumulative) else {
            return Err(Refusal::Duplicate);
        };
        if index >= self.max_in_flight as u64 {
            return Err(Refusal::OutOfWindow);
        }
        let index = index as usize;
        if self.pending.get(index).is_some_and(Option::is_some) {
            return Err(Refusal::Duplicate);
        }
        let after_close = self.close_packet.is_some_and(|close| packet_number > close);
        let header_len = if first_fragment {
            MESSAGE_HEADER_LEN
        } else {
            0
        };
        let stream_start = payload_offset
            .checked_sub(header_len)
            .ok_or(Refusal::Inconsistent)?;
        let stream_end = payload_offset
            .checked_add(payload_len as u64)
            .ok_or(Refusal::Inconsistent)?;
        if (stream_start < self.readable_end && stream_end > self.readable_end)
            || (after_close && (is_close || stream_end > self.close_offset))
        {
            return Err(Refusal::Inconsistent);
        }
        if stream_end > self.read_offset + self.ring.len() as u64 {
            return Err(Refusal::CreditViolation);
        }
        if self.ahead.len() >= self.max_in_flight
            && stream_start > self.readable_end
            && !self.ahead_touches(stream_start, stream_end)
        {
            // Only a broken peer makes this many holes: keep the list bounded.
            return Err(Refusal::OutOfWindow);
        }
        Ok((index, stream_start, stream_end))
    }

    /// The bytes of a frame (at `index`, payload at `payload_offset`) that go straight to
    /// the reader: when the frame is the next in order (so the cumulative ack, and with it
    /// the readable end, moves over it) and continues the message being read right where
    /// the reader stands. A frame already in the reader's buffer must go there whole.
    fn copy_to_reader(
        &self,
        index: usize,
        first_fragment: bool,
        payload_offset: u64,
        payload: Payload<'_>,
        reader: &mut [u8],
    ) -> Result<usize, Refusal> {
        let payload_len = payload.len();
        if !reader.is_empty()
            && index == 0
            && !first_fragment
            && self.in_message
            && payload_offset == self.read_offset
            && self.read_offset == self.readable_end
        {
            let count = payload_len
                .min(reader.len())
                .min(usize::try_from(self.message_remaining).unwrap_or(usize::MAX));
            match payload {
                Payload::Bytes(bytes) => {
                    super::stream_ring::copy_bytes(&mut reader[..count], &bytes[..count]);
                }
                // Already there; all of it must go there (`Self::takes_in_place`).
                Payload::InReader(_) if count < payload_len => return Err(Refusal::Inconsistent),
                Payload::InReader(_) => {}
            }
            Ok(count)
        } else if matches!(payload, Payload::InReader(_)) {
            // Nothing changed yet: a frame in the reader's buffer goes there or nowhere.
            Err(Refusal::Inconsistent)
        } else {
            Ok(0)
        }
    }

    /// How many bytes at the start of a reader's buffer of `reader_len` bytes the next
    /// frame in order may be received straight into, before it is checked
    /// ([`Self::takes_in_place`]): bytes of the current message that nothing was read or
    /// placed into yet, all within the credit. 0 when a frame could not go there whole
    /// (no message being read, bytes waiting in the ring, posted readers, a Close seen).
    pub(super) fn in_place_room(&self, reader_len: usize) -> usize {
        if !self.in_message
            || self.read_offset != self.readable_end
            || !self.posted.is_empty()
            || !self.claimed.is_empty()
            || self.close_packet.is_some()
        {
            return 0;
        }
        let mut room = (reader_len as u64)
            .min(self.message_remaining)
            .min(self.ring.len() as u64);
        if let Some(&(start, _)) = self.placed.front() {
            room = room.min(start - self.read_offset);
        }
        usize::try_from(room).unwrap_or(usize::MAX)
    }

    /// Whether a frame of `len` payload bytes (not a message's first fragment), packet
    /// `packet_number` at stream offset `offset`, already at the start of a reader's buffer
    /// of `reader_len` bytes, is taken there whole by [`Self::on_frame`] with
    /// [`Payload::InReader`]: it is the next packet and carries the next bytes of the
    /// message, and [`Self::in_place_room`] has room for it.
    pub(super) fn takes_in_place(
        &self,
        packet_number: u64,
        offset: u64,
        len: usize,
        reader_len: usize,
    ) -> bool {
        len > 0
            && packet_number == self.cumulative
            && self.pending.front().is_none_or(Option::is_none)
            && offset == self.read_offset
            && len <= self.in_place_room(reader_len)
    }

    /// Copies the part of a frame's `payload` (at stream `offset`) that lies ahead of the
    /// read offset, within `reader` and the current message, to its place in `reader`, and
    /// remembers the range. Returns the bytes placed (a prefix of `payload`; 0 when none
    /// fits, or when `placed` is full).
    fn place_ahead(&mut self, offset: u64, payload: &[u8], reader: &mut [u8]) -> usize {
        if reader.is_empty() || !self.in_message || offset <= self.read_offset {
            return 0;
        }
        let span_end = self.read_offset + (reader.len() as u64).min(self.message_remaining);
        let end = (offset + payload.len() as u64).min(span_end);
        if end <= offset {
            return 0;
        }
        // Where the range goes, and whether it joins its neighbours.
        let after = self.placed.partition_point(|&(start, _)| start < offset);
        let joins_previous = after > 0 && self.placed[after - 1].1 == offset;
        let joins_next = self
            .placed
            .get(after)
            .is_some_and(|&(start, _)| start == end);
        // Bytes placed already (only a broken peer sends a range twice under two packet
        // numbers): to the ring, which never confuses the read.
        let overlaps = (after > 0 && self.placed[after - 1].1 > offset)
            || self
                .placed
                .get(after)
                .is_some_and(|&(start, _)| start < end);
        if overlaps || (!joins_previous && !joins_next && self.placed.len() >= self.max_in_flight) {
            return 0;
        }
        let count = (end - offset) as usize;
        let at = (offset - self.read_offset) as usize;
        super::stream_ring::copy_bytes(&mut reader[at..at + count], &payload[..count]);
        match (joins_previous, joins_next) {
            (true, true) => {
                self.placed[after - 1].1 = self.placed[after].1;
                self.placed.remove(after);
            }
            (true, false) => self.placed[after - 1].1 = end,
            (false, true) => self.placed[after].0 = offset,
            (false, false) => self.placed.insert(after, (offset, end)),
        }
        count
    }

    /// Reads the placed range that starts at the read offset, as far as the bytes are in
    /// order. Returns the bytes read.
    fn consume_placed(&mut self) -> u64 {
        let Some(&(start, end)) = self.placed.front() else {
            return 0;
        };
        if start != self.read_offset || self.readable_end <= start {
            return 0;
        }
        let count = end.min(self.readable_end) - start;
        if end <= self.readable_end {
            self.placed.pop_front();
        } else {
            self.placed[0].0 = start + count;
        }
        self.consume(count);
        count
    }

    /// Payload bytes placed straight into readers' buffers so far.
    pub(super) fn placed_bytes(&self) -> u64 {
        self.placed_bytes
    }

    /// The reader stops using `reader` (its buffer for the rest of the current message,
    /// starting at the next unread byte) before the message is complete: the bytes placed
    /// ahead in it go back into the ring, so that the next read may use any buffer.
    pub(super) fn detach_reader(&mut self, reader: &[u8]) {
        while let Some((start, end)) = self.placed.pop_front() {
            let from = (start - self.read_offset) as usize;
            let to = ((end - self.read_offset) as usize).min(reader.len());
            if from < to {
                self.ring.copy_in(start, &reader[from..to]);
            }
        }
    }

    // ---- posted readers ----

    /// Queues a posted reader: a buffer of `capacity` bytes, under `token`, for the next
    /// message no earlier reader claimed. False (nothing queued) when
    /// [`MAX_POSTED_READERS`] are held already (finished ones not yet polled included).
    pub(super) fn post_reader(&mut self, token: u64, capacity: u64) -> bool {
        if self.posted.len() + self.claimed.len() + self.completions.len() >= MAX_POSTED_READERS {
            return false;
        }
        self.posted.push_back((token, capacity));
        self.claim(None, true);
        true
    }

    /// Posted readers held (claimed or not, not yet finished).
    pub(super) fn posted_readers(&self) -> usize {
        self.posted.len() + self.claimed.len()
    }

    /// Whether a message is being read with `read_message` (begun, not complete).
    pub(super) fn reading_message(&self) -> bool {
        self.in_message
    }

    /// The next posted reader's news, in the order they finished.
    pub(super) fn poll_posted(&mut self) -> Option<PostedRead> {
        self.completions.pop_front()
    }

    /// Claims and reads what the posted readers can now: messages whose length prefixes
    /// arrived get readers, and the first claimed message's bytes in order are read into
    /// its buffer (from the ring where they did not go straight there).
    pub(super) fn read_posted(&mut self, buffers: &mut dyn PostedBuffers) {
        if self.posted.is_empty() && self.claimed.is_empty() {
            return;
        }
        // No walk over the packets above a gap: a prefix that arrived there was looked for
        // when the chain of known prefixes reached it or a reader was posted (an engine
        // calls this on every poll, with thousands of packets above a gap).
        self.claim(None, false);
        self.drive_posted(buffers);
    }

    /// Takes back every posted reader whose message has not begun to be read (claimed or
    /// not), the bytes placed in their buffers going back into the ring; returns their
    /// tokens in posting order. A reader whose message is being read (its first bytes are
    /// read) stays: it finishes with that message. Readers whose buffer `buffers` does not
    /// have now stay too, with every later one.
    pub(super) fn withdraw_readers(&mut self, buffers: &mut dyn PostedBuffers) -> Vec<u64> {
        let mut keep = 0;
        while self
            .claimed
            .get(keep)
            .is_some_and(|claimed| claimed.started)
        {
            keep += 1;
        }
        let mut withdrawn = Vec::new();
        while let Some(&claimed) = self.claimed.get(keep) {
            let from = self
                .claimed_placed
                .partition_point(|&(start, _)| start < claimed.payload_start());
            let to = self
                .claimed_placed
                .partition_point(|&(start, _)| start < claimed.end());
            if from < to {
                let Some(buffer) = buffers.buffer(claimed.token) else {
                    break;
                };
                for &(start, end) in self.claimed_placed.range(from..to) {
                    let at = (start - claimed.payload_start()) as usize;
                    let count = (end - start) as usize;
                    self.ring.copy_in(start, &buffer[at..at + count]);
                }
                self.claimed_placed.drain(from..to);
            }
            self.claimed.remove(keep);
            withdrawn.push(claimed.token);
        }
        if self.claimed.len() == keep {
            withdrawn.extend(self.posted.drain(..).map(|(token, _)| token));
        }
        withdrawn
    }

    /// Whether the next message (none being read) belongs to a posted reader: reads of the
    /// application's own (`read_message`) wait until every posted reader is done.
    fn posted_first(&self) -> bool {
        !self.in_message && self.posted_readers() > 0
    }

    /// Stream offset of the length prefix of the first message no posted reader claimed.
    fn next_unclaimed_prefix(&self) -> u64 {
        if let Some(last) = self.claimed.back() {
            last.end()
        } else if self.in_message {
            self.read_offset + self.message_remaining
        } else {
            self.read_offset
        }
    }

    /// Whether the `len` bytes at `at` (a length prefix, or a whole message header) are in
    /// the ring: in order, in the frame that just arrived (`frame`, its stream range), or
    /// with `scan`, in any frame that arrived above a gap (a walk over the packets above the
    /// cumulative ack). A tagged message's prefix and tag may come in two frames: each is
    /// looked for.
    fn header_known(&self, at: u64, len: u64, frame: Option<(u64, u64)>, scan: bool) -> bool {
        let known = |from: u64, to: u64| {
            let covers = |(start, end): (u64, u64)| start <= from && to <= end;
            to <= self.readable_end
                || frame.is_some_and(covers)
                || (scan && self.pending.iter().flatten().copied().any(covers))
                || (scan && self.ahead_covers(from, to))
        };
        let prefix_end = at + MESSAGE_HEADER_LEN;
        known(at, prefix_end) && (len == MESSAGE_HEADER_LEN || known(prefix_end, at + len))
    }

    /// The length prefix at `at` (its bytes known to be in the ring).
    fn header_at(&self, at: u64) -> MessagePrefix {
        MessagePrefix::from_raw(self.ring.read_u64_le(at))
    }

    /// The tag after the prefix at `at` of a tagged message (its bytes in the ring).
    fn tag_at(&self, at: u64) -> u64 {
        self.ring.read_u64_le(at + MESSAGE_HEADER_LEN)
    }

    /// The header of the next message to read (none being read) once all of it (prefix and
    /// tag) is in order: the prefix and the tag (0 for an untagged message).
    fn next_header(&self) -> Option<(MessagePrefix, u64)> {
        if self.readable_end < self.read_offset + MESSAGE_HEADER_LEN {
            return None;
        }
        let prefix = self.header_at(self.read_offset);
        if !prefix.tagged() {
            return Some((prefix, 0));
        }
        if self.readable_end < self.read_offset + prefix.header_len() {
            return None;
        }
        Some((prefix, self.tag_at(self.read_offset)))
    }

    /// Gives the next unclaimed messages whose length prefixes are known to the posted
    /// readers in order: a message longer than its reader's capacity finishes that reader
    /// ([`PostedRead::TooSmall`]) and is offered to the next one (or, with none left, stays
    /// for `read_message`). `frame`: the stream range of the frame that just arrived;
    /// `scan`: look for the first prefix in every frame above a gap too (the prefixes after
    /// a newly claimed message always are).
    fn claim(&mut self, frame: Option<(u64, u64)>, mut scan: bool) {
        while let Some(&(token, capacity)) = self.posted.front() {
            let at = self.next_unclaimed_prefix();
            if !self.header_known(at, MESSAGE_HEADER_LEN, frame, scan) {
                return;
            }
            let prefix = self.header_at(at);
            let header_len = prefix.header_len();
            if prefix.tagged() && !self.header_known(at, header_len, frame, scan) {
                return;
            }
            let tag = if prefix.tagged() { self.tag_at(at) } else { 0 };
            let len = prefix.payload_len();
            self.posted.pop_front();
            if len > capacity {
                self.completions
                    .push_back(PostedRead::TooSmall { token, len });
                continue;
            }
            self.claimed.push_back(Claimed {
                token,
                prefix_at: at,
                header_len,
                tag,
                active: prefix.is_active(),
                len,
                started: false,
            });
            scan = true;
        }
    }

    /// Places the bytes of `payload` (at stream `offset`) that belong to claimed messages
    /// in their readers' buffers; the others (length prefixes, unclaimed messages, bytes
    /// whose buffer is missing or whose range cannot be recorded) go to the ring.
    fn place_claimed(&mut self, offset: u64, payload: &[u8], buffers: &mut dyn PostedBuffers) {
        let end = offset + payload.len() as u64;
        let mut cursor = offset;
        let first = self
            .claimed
            .partition_point(|claimed| claimed.end() <= offset);
        for index in first..self.claimed.len() {
            let claimed = self.claimed[index];
            if claimed.payload_start() >= end {
                break;
            }
            let from = cursor.max(claimed.payload_start());
            let to = end.min(claimed.end());
            if from >= to {
                continue;
            }
            let bytes = &payload[(from - offset) as usize..(to - offset) as usize];
            if self.place_in(claimed, from, bytes, buffers) {
                let gap = &payload[(cursor - offset) as usize..(from - offset) as usize];
                self.ring.copy_in(cursor, gap);
                cursor = to;
            }
        }
        self.ring
            .copy_in(cursor, &payload[(cursor - offset) as usize..]);
    }

    /// Copies `bytes` (stream offset `at`, within `claimed`'s message) to their place in its
    /// reader's buffer and records the range. False (nothing copied) when the buffer is
    /// missing or short, the range overlaps one placed before, or the range list is full.
    fn place_in(
        &mut self,
        claimed: Claimed,
        at: u64,
        bytes: &[u8],
        buffers: &mut dyn PostedBuffers,
    ) -> bool {
        let end = at + bytes.len() as u64;
        let after = self
            .claimed_placed
            .partition_point(|&(start, _)| start < at);
        let joins_previous = after > 0 && self.claimed_placed[after - 1].1 == at;
        let joins_next = self
            .claimed_placed
            .get(after)
            .is_some_and(|&(start, _)| start == end);
        let overlaps = (after > 0 && self.claimed_placed[after - 1].1 > at)
            || self
                .claimed_placed
                .get(after)
                .is_some_and(|&(start, _)| start < end);
        if overlaps
            || (!joins_previous && !joins_next && self.claimed_placed.len() >= self.max_in_flight)
        {
            return false;
        }
        let Some(buffer) = buffers.buffer(claimed.token) else {
            return false;
        };
        if (buffer.len() as u64) < claimed.len {
            return false;
        }
        let from = (at - claimed.payload_start()) as usize;
        super::stream_ring::copy_bytes(&mut buffer[from..from + bytes.len()], bytes);
        self.placed_bytes += bytes.len() as u64;
        match (joins_previous, joins_next) {
            (true, true) => {
                self.claimed_placed[after - 1].1 = self.claimed_placed[after].1;
                self.claimed_placed.remove(after);
            }
            (true, false) => self.claimed_placed[after - 1].1 = end,
            (false, true) => self.claimed_placed[after].0 = at,
            (false, false) => self.claimed_placed.insert(after, (at, end)),
        }
        true
    }

    /// Reads the first claimed message's bytes that are in order into its buffer (from the
    /// ring, except those placed there already), once the reads before it are done;
    /// finishes each message read whole ([`PostedRead::Complete`]) and goes on with the next.
    fn drive_posted(&mut self, buffers: &mut dyn PostedBuffers) {
        while let Some(front) = self.claimed.front_mut() {
            if self.in_message {
                // The application's own read of an earlier message is not done.
                return;
            }
            if !front.started {
                if self.read_offset != front.prefix_at
                    || self.readable_end < front.prefix_at + front.header_len
                {
                    return;
                }
                front.started = true;
                let header_len = front.header_len;
                self.message_tag = front.tag;
                self.message_active = front.active;
                self.advance_read(header_len);
            }
            let claimed = self.claimed[0];
            let end = self.readable_end.min(claimed.end());
            if self.read_offset < end {
                let Some(buffer) = buffers.buffer(claimed.token) else {
                    return;
                };
                if (buffer.len() as u64) < claimed.len {
                    return;
                }
                let mut at = self.read_offset;
                while at < end {
                    match self.claimed_placed.front().copied() {
                        Some((start, placed_end)) if start <= at => {
                            at = placed_end.min(end);
                            if placed_end <= end {
                                self.claimed_placed.pop_front();
                            } else {
                                self.claimed_placed[0].0 = end;
                            }
                        }
                        next => {
                            let upto = next.map_or(end, |(start, _)| start.min(end));
                            let from = (at - claimed.payload_start()) as usize;
                            let to = (upto - claimed.payload_start()) as usize;
                            self.ring.copy_out(at, &mut buffer[from..to]);
                            at = upto;
                        }
                    }
                }
                self.advance_read(at - self.read_offset);
            }
            if self.read_offset < claimed.end() {
                return;
            }
            self.claimed.pop_front();
            self.completions.push_back(PostedRead::Complete {
                token: claimed.token,
                len: claimed.len,
                tag: claimed.tag,
                active: claimed.active,
            });
        }
    }

    /// Schedules the ack for a taken frame: at once every second frame, on reordering or on
    /// request, otherwise within `ack_delay_ns`.
    pub(super) fn schedule_ack(
        &mut self,
        now: Nanos,
        arrival: Arrival,
        requested: bool,
        ack_delay_ns: Nanos,
    ) {
        if requested || arrival == Arrival::Reordered || self.unacked_frames >= 2 {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now.saturating_add(ack_delay_ns));
        }
    }

    /// Asks for an ack with the next transmission (duplicates, pings, window updates).
    pub(super) fn request_ack(&mut self) {
        self.ack_now = true;
    }

    /// Next expected packet number (the cumulative ack).
    pub(super) fn cumulative(&self) -> u64 {
        self.cumulative
    }

    /// Every stream byte below this has arrived.
    pub(super) fn readable_end(&self) -> u64 {
        self.readable_end
    }

    /// Data frames taken since our last ack.
    pub(super) fn unacked_frames(&self) -> u32 {
        self.unacked_frames
    }

    /// Whether a standalone ack is due.
    pub(super) fn ack_due(&self, now: Nanos) -> bool {
        self.ack_now || self.ack_deadline.is_some_and(|deadline| deadline <= now)
    }

    /// Whether an ack is owed at all, due now or delayed: a data frame sent now carries it.
    pub(super) fn ack_owed(&self) -> bool {
        self.ack_now || self.ack_deadline.is_some()
    }

    pub(super) fn ack_deadline(&self) -> Option<Nanos> {
        self.ack_deadline
    }

    /// Fills the ack fields of an outgoing frame and clears the pending ack: up to
    /// `header_limit` SACK ranges into `sack` and, up to `total_limit` in all, the rest into
    /// `more` (an Ack frame's payload). Returns (cumulative ack, credit, truncated): when
    /// there are more ranges than `total_limit`, the lowest `total_limit - 1` (where the
    /// holes the sender must repair are) and the highest (how far the peer got) are written,
    /// and `truncated` says that ranges between the last two were left out.
    pub(super) fn write_ack(
        &mut self,
        header_limit: usize,
        total_limit: usize,
        sack: &mut SackRanges,
        more: &mut Vec<SackRange>,
    ) -> (u64, u64, bool) {
        sack.clear();
        more.clear();
        let total_limit = total_limit.max(header_limit);
        let truncated = self.ranges.len() > total_limit;
        let count = self.ranges.len().min(total_limit);
        if count > 0 {
            let selected = self.ranges.iter().take(count - 1).chain(self.ranges.back());
            for (index, range) in selected.enumerate() {
                if index < header_limit {
                    sack.push(*range);
                } else {
                    more.push(*range);
                }
            }
        }
        self.ack_now = false;
        self.ack_deadline = None;
        self.unacked_frames = 0;
        let credit = self.credit();
        self.advertised_credit = credit;
        (self.cumulative, credit, truncated)
    }

    /// Stream offset (exclusive) the peer may send up to.
    pub(super) fn credit(&self) -> u64 {
        self.read_offset + self.ring.len() as u64
    }

    /// Whether the peer's Close arrived with everything before it.
    pub(super) fn peer_closed(&self) -> bool {
        self.close_packet
            .is_some_and(|close| close < self.cumulative)
            && self.readable_end >= self.close_offset
    }

    /// Unread bytes held (in order or not), as far as known.
    pub(super) fn buffered_bytes(&self) -> u64 {
        self.readable_end - self.read_offset
    }

    // ---- application side ----

    pub(super) fn peek_message_len(&self) -> Option<u64> {
        if self.in_message {
            return Some(self.message_len);
        }
        if self.posted_first() {
            return None;
        }
        self.next_header().map(|(prefix, _)| prefix.payload_len())
    }

    /// The tag of the message being read, or of the last one read (0: untagged).
    pub(super) fn message_tag(&self) -> u64 {
        self.message_tag
    }

    /// Whether the message being read, or the last one read, is an active message.
    pub(super) fn message_is_active(&self) -> bool {
        self.message_active
    }

    /// Whether the next in-order message is an active message, known as `peek_header`
    /// knows its header.
    pub(super) fn peek_is_active(&self) -> Option<bool> {
        if self.in_message || self.posted_first() {
            return None;
        }
        self.next_header().map(|(prefix, _)| prefix.is_active())
    }

    /// The length and tag of the next in-order message to read (none being read, no
    /// posted reader first) once its whole header has arrived.
    pub(super) fn peek_header(&self) -> Option<(u64, u64)> {
        if self.in_message || self.posted_first() {
            return None;
        }
        self.next_header()
            .map(|(prefix, tag)| (prefix.payload_len(), tag))
    }

    /// Whether the rest of the current (or next) message is all in order in the ring.
    pub(super) fn message_ready(&self) -> bool {
        self.peek_message().is_some_and(|(_, ready)| ready)
    }

    /// The current (or next) message's length and whether the rest of it is all in order
    /// in the ring; None before its length prefix arrived.
    pub(super) fn peek_message(&self) -> Option<(u64, bool)> {
        let (len, start, remaining) = if self.in_message {
            (self.message_len, self.read_offset, self.message_remaining)
        } else {
            if self.posted_first() {
                return None;
            }
            let (prefix, _) = self.next_header()?;
            let len = prefix.payload_len();
            (len, self.read_offset + prefix.header_len(), len)
        };
        Some((len, self.readable_end - start >= remaining))
    }

    pub(super) fn read_message(&mut self, out: &mut [u8]) -> (usize, bool) {
        if !self.in_message {
            if self.posted_first() {
                return (0, false);
            }
            let Some((prefix, tag)) = self.next_header() else {
                return (0, false);
            };
            let len = prefix.payload_len();
            self.read_offset += prefix.header_len();
            self.in_message = true;
            self.message_len = len;
            self.message_remaining = len;
            self.message_tag = tag;
            self.message_active = prefix.is_active();
        }
        let available = self.readable_end - self.read_offset;
        let count = (out.len() as u64)
            .min(self.message_remaining)
            .min(available) as usize;
        // Bytes placed ahead in `out` (the same buffer the frames were given) are there
        // already: copy only the others out of the ring.
        let end = self.read_offset + count as u64;
        let mut at = self.read_offset;
        while let Some(&(start, placed_end)) = self.placed.front() {
            if start >= end {
                break;
            }
            let from = (at - self.read_offset) as usize;
            let to = (start - self.read_offset) as usize;
            self.ring.copy_out(at, &mut out[from..to]);
            at = placed_end.min(end);
            if placed_end <= end {
                self.placed.pop_front();
            } else {
                self.placed[0].0 = end;
            }
        }
        let from = (at - self.read_offset) as usize;
        self.ring.copy_out(at, &mut out[from..count]);
        let complete = self.consume(count as u64);
        (count, complete)
    }

    /// The reader took the next `count` bytes of the current message (at most what is left
    /// of it and in order): moves the read offset, ends the message when it is all read,
    /// and asks for a window update once a quarter of the window was freed since the last
    /// advertisement. Returns whether the message is complete.
    fn consume(&mut self, count: u64) -> bool {
        self.message_remaining -= count;
        let complete = self.message_remaining == 0;
        if complete {
            self.in_message = false;
        }
        self.advance_read(count);
        complete
    }

    /// Moves the read offset over `count` bytes read in order; asks for a window update
    /// once a quarter of the window was freed since the last advertisement.
    fn advance_read(&mut self, count: u64) {
        self.read_offset += count;
        if self.credit() - self.advertised_credit >= (self.ring.len() as u64 / 4).max(1) {
            self.ack_now = true;
        }
    }

    /// Bytes of memory held.
    pub(super) fn memory_bytes(&self) -> usize {
        self.ring.capacity()
            + self.pending.capacity() * core::mem::size_of::<Option<(u64, u64)>>()
            + self.ranges.capacity() * core::mem::size_of::<SackRange>()
            + self.ahead.capacity() * core::mem::size_of::<(u64, u64)>()
            + self.placed.capacity() * core::mem::size_of::<(u64, u64)>()
            + self.claimed_placed.capacity() * core::mem::size_of::<(u64, u64)>()
            + self.posted.capacity() * core::mem::size_of::<(u64, u64)>()
            + self.claimed.capacity() * core::mem::size_of::<Claimed>()
            + self.completions.capacity() * core::mem::size_of::<PostedRead>()
    }

    // ---- helpers ----

    /// Moves the cumulative ack over every packet that arrived in order.
    fn advance(&mut self) {
        while let Some(Some((stream_start, stream_end))) = self.pending.front().copied() {
            self.pending.pop_front();
            if stream_start <= self.readable_end {
                self.readable_end = self.readable_end.max(stream_end);
            } else if stream_start < stream_end {
                self.insert_ahead(stream_start, stream_end);
            }
            self.cumulative += 1;
        }
        while let Some(&(start, end)) = self.ahead.front() {
            if start > self.readable_end {
                break;
            }
            self.readable_end = self.readable_end.max(end);
            self.ahead.pop_front();
        }
        while self
            .ranges
            .front()
            .is_some_and(|range| range.start < self.cumulative)
        {
            self.ranges.pop_front();
        }
    }

    /// Adds a stream range beyond the readable end to `ahead`, merging it with the ranges
    /// it overlaps or touches.
    fn insert_ahead(&mut self, start: u64, end: u64) {
        let from = self
            .ahead
            .partition_point(|&(_, other_end)| other_end < start);
        let to = self
            .ahead
            .partition_point(|&(other_start, _)| other_start <= end);
        if from == to {
            self.ahead.insert(from, (start, end));
            return;
        }
        let merged = (start.min(self.ahead[from].0), end.max(self.ahead[to - 1].1));
        self.ahead.drain(from + 1..to);
        self.ahead[from] = merged;
    }

    /// Whether `[start, end)` lies within one range of `ahead`.
    fn ahead_covers(&self, start: u64, end: u64) -> bool {
        if self.ahead.is_empty() {
            return false;
        }
        let index = self
            .ahead
            .partition_point(|&(_, other_end)| other_end < end);
        self.ahead
            .get(index)
            .is_some_and(|&(other_start, other_end)| other_start <= start && end <= other_end)
    }

    /// Whether `[start, end)` overlaps or touches a range of `ahead`.
    fn ahead_touches(&self, start: u64, end: u64) -> bool {
        let index = self
            .ahead
            .partition_point(|&(_, other_end)| other_end < start);
        self.ahead
            .get(index)
            .is_some_and(|&(other_start, _)| other_start <= end)
    }

    /// Adds one packet above the cumulative ack to the range list, merging neighbours.
    fn insert_range(&mut self, packet_number: u64) {
        let after = self
            .ranges
            .partition_point(|range| range.start <= packet_number);
        // `after` is the first range starting above the packet; `after - 1` may hold it.
        let joins_previous = after > 0 && self.ranges[after - 1].end == packet_number;
        let joins_next = self
            .ranges
            .get(after)
            .is_some_and(|range| range.start == packet_number + 1);
        match (joins_previous, joins_next) {
            (true, true) => {
                let next_end = self.ranges[after].end;
                self.ranges[after - 1].end = next_end;
                self.ranges.remove(after);
            }
            (true, false) => self.ranges[after - 1].end = packet_number + 1,
            (false, true) => self.ranges[after].start = packet_number,
            (false, false) => self.ranges.insert(
                after,
                SackRange {
                    start: packet_number,
                    end: packet_number + 1,
                },
            ),
        }
    }
}
