//! The sending half of a reliable connection: the send ring (bytes written by the application
//! and not yet acknowledged), packetization into Data frames, the in-flight table indexed by
//! packet number, the choice of path for each frame, acknowledgement processing and loss
//! detection per path (`paths.rs`).
//!
//! Layer: sans-IO, inside `crate::reliable`, below the connection that asks it for frames.
//! It owns the send ring, the in-flight table and loss detection; it must not build frame
//! headers (the connection does) nor read a clock.
//!
//! Loss is decided per path, never from packet-number gaps alone: frames striped over paths
//! of different delays arrive out of packet-number order all the time. A frame is lost when
//! [`PACKET_THRESHOLD`] frames sent after it on the *same* path were acknowledged while the
//! acknowledgement shows it missing, or when its path's retransmission timer expires. An
//! acknowledgement whose SACK list was truncated (the receiver had more ranges than fit)
//! says nothing about the packets between its last two ranges; those are not judged (and
//! their paths' timers are not run against them) until a later acknowledgement covers them.
//!
//! The byte stream holds, for each message, an 8-byte little-endian length prefix followed
//! by the message's body: its bytes, after its 8-byte tag if it is tagged (bit 63 of the
//! prefix, [`MessagePrefix`]). The frames see a body and never look inside it. The prefix
//! never travels as payload: the first fragment of a message (`fragment_offset == 0`) also
//! covers those 8 stream bytes and the receiver rebuilds them from the frame's
//! `message_len` (the raw prefix). So a zero-length message costs 8 bytes of buffer and
//! credit, which bounds the memory any number of empty messages can take.
//!
//! Lent bytes: the application may append bytes of the open message without copying them
//! ([`SendState::lend`]): their room in the ring is reserved (so that they count against the
//! buffer like written bytes and can be adopted later) but holds nothing; frames of them take
//! their payload from the lender's slice of the message, which the caller looks up by the
//! token it lent the message under, with every call that needs it. Several messages may be
//! lent at once: a queue of *lends* in stream order, one contiguous range per message, each
//! with its token. Frames never straddle the start or the end of a lent range. A lend ends
//! once none of its bytes is left unacknowledged and its message will lend no more: its
//! token is then *released* ([`SendState::poll_released`]) and the core never reads its
//! slice again. The lender of [`LEND_MESSAGE_TOKEN`] may instead copy the rest into the
//! ring ([`SendState::adopt`], highest bytes first), after which they are written bytes like
//! any others; acknowledged lent bytes need no copy at all.

use std::collections::VecDeque;

use quiver_wire::frame::{MessagePrefix, SackRange};

use super::paths::{Paths, NO_FRAME};
use super::recut::{PayloadLimits, Recut};
use super::stream_ring::StreamRing;
use super::time::Nanos;

mod lends;
mod resend;
mod short_routes;

/// Bytes of stream each message's length prefix takes (a tag may follow: [`MessagePrefix`]).
pub(super) const MESSAGE_HEADER_LEN: u64 = 8;

/// The token the single-message lend of
/// [`ReliableConnection::lend_message`](crate::reliable::ReliableConnection::lend_message)
/// goes under: its lender adopts what is left before it gives its slice up, and it is never
/// released through
/// [`ReliableConnection::poll_released`](crate::reliable::ReliableConnection::poll_released).
pub const LEND_MESSAGE_TOKEN: u64 = u64::MAX;

/// One lent message's range (module docs): `[start, end)` are reserved in the ring and not
/// in it. `start` only grows (acks), `end` shrinks by adoption from the top and grows while
/// the message lends more; bytes from `end` to `limit` were adopted (they are in the ring,
/// and still in the lender's slice).
#[derive(Debug, Clone, Copy)]
struct Lend {
    /// The lender's token for the message.
    token: u64,
    /// Stream offset of byte 0 of the lender's slice (the message's first byte).
    base: u64,
    start: u64,
    end: u64,
    /// Highest stream offset (exclusive) ever lent in this lend: frames of the range end at
    /// or below it, so the lender's slice must reach it.
    limit: u64,
}

/// Bytes a lend and its released token take at most (the memory bound counts them per
/// datagram in flight: a connection holds at most `max_in_flight_datagrams` of them).
pub(super) const LEND_ENTRY_BYTES: usize =
    core::mem::size_of::<Lend>() + core::mem::size_of::<u64>();

impl Lend {
    /// Length the lender's slice must have.
    fn slice_len(&self) -> u64 {
        self.limit - self.base
    }
}

/// A frame after a transmission: enough to retransmit it byte for byte, and to account for
/// it on the path it was last sent on.
#[derive(Debug, Clone, Copy)]
pub(super) struct SentFrame {
    /// Data or Close.
    pub(super) is_close: bool,
    /// Sent as a compact Stream frame: raw stream bytes (length prefixes included), the
    /// message fields unused.
    pub(super) compact: bool,
    /// Stream offset of the payload.
    pub(super) payload_offset: u64,
    /// Payload length in bytes.
    pub(super) payload_len: u32,
    /// Message the payload belongs to.
    pub(super) message_id: u64,
    /// That message's raw length prefix (the receiver writes it back as the prefix).
    pub(super) message_len: u64,
    /// Offset of the payload within the message.
    pub(super) fragment_offset: u64,
    /// When it was last sent.
    sent_at: Nanos,
    /// Whether it was ever sent twice (Karn: no RTT sample from it).
    retransmitted: bool,
    /// Cut from the rest of a shortened frame (`send/resend.rs`): its bytes lie below those of
    /// frames numbered before it.
    recut: bool,
    /// Whether its transmissions went on more than one path (an ack of it then tells
    /// nothing about any one path).
    paths_mixed: bool,
    /// Declared lost by a retransmission timeout of its path (undone if that timeout
    /// proves spurious: [`SendState::undo_timeouts`]).
    lost_by_timeout: bool,
    status: FrameStatus,
    /// Path of the last transmission, and its sequence number on that path.
    path: u8,
    path_seq: u64,
    /// Neighbours in its path's list of frames in flight (packet numbers, or NO_FRAME).
    previous_on_path: u64,
    next_on_path: u64,
}

impl SentFrame {
    fn stream_end(&self) -> u64 {
        self.payload_offset + u64::from(self.payload_len)
    }

    fn new(
        is_close: bool,
        payload_offset: u64,
        payload_len: u32,
        message_id: u64,
        message_len: u64,
        fragment_offset: u64,
    ) -> SentFrame {
        SentFrame {
            is_close,
            compact: false,
            payload_offset,
            payload_len,
            message_id,
            message_len,
            fragment_offset,
            sent_at: 0,
            retransmitted: false,
            recut: false,
            paths_mixed: false,
            lost_by_timeout: false,
            status: FrameStatus::InFlight,
            path: 0,
            path_seq: 0,
            previous_on_path: NO_FRAME,
            next_on_path: NO_FRAME,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameStatus {
    /// Sent, not acknowledged; linked into its path's list.
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

/// Frames sent later on the same path that must be acknowledged before a frame is lost.
const PACKET_THRESHOLD: u64 = 3;
/// Header bytes of a compact Stream frame.
const STREAM_OVERHEAD_BYTES: u64 = quiver_wire::frame::STREAM_HEADER_LEN as u64;
/// Duplicate acks (acks that acknowledge nothing new) that trigger a fast retransmit
/// (single-path connections only: with several paths, acks without progress are normal).
const DUPLICATE_ACK_THRESHOLD: u32 = 3;

#[derive(Debug)]
pub(super) struct SendState {
    ring: StreamRing,
    /// Stream bytes released: every byte below it was acknowledged.
    acked_offset: u64,
    /// Highest stream end of a cumulatively acknowledged frame: `acked_offset`, unless
    /// re-cut ranges below it are unacknowledged (`send/resend.rs`).
    acked_high: u64,
    /// Stream bytes written by the application (headers included).
    write_offset: u64,
    /// Next stream byte never sent.
    next_offset: u64,
    /// Bytes of the open message the application has still to write.
    write_remaining: u64,
    /// Length of the open (or last) message.
    write_message_len: u64,
    /// Lent ranges (module docs) in stream order, not overlapping: every byte not in one
    /// of them and not acknowledged is in the ring. An entry stays while it has bytes lent,
    /// or while it is the open message's and may lend more (`Self::growable`).
    lends: VecDeque<Lend>,
    /// Tokens of lends that ended, for the caller (`poll_released`).
    released: VecDeque<u64>,
    /// At most this many lends and released tokens together (the memory bound).
    max_lends: usize,
    /// Base (first byte's stream offset) of a message whose lend was ended by a write
    /// after it: that message lends no more (one contiguous range per message).
    lend_ended_base: Option<u64>,

    /// Message being packetized: id, body length (tag included), raw prefix, body start
    /// and end in the stream.
    tx_message_id: u64,
    tx_message_len: u64,
    tx_message_prefix: u64,
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
    /// Rests of shortened frames to send in new frames (`send/resend.rs`), at most
    /// `2 * max_in_flight`; frames cut from them in `in_flight`; frames shortened so far.
    recut_queue: VecDeque<Recut>,
    recut_in_flight: usize,
    frames_recut: u64,
    last_cumulative_ack: u64,
    duplicate_acks: u32,
    /// Highest packet an ack has reported (its last SACK range's end, or its cumulative
    /// ack): the receiver's highest received packet only grows, so an ack reporting less is
    /// older than one already processed (acks overtake each other on different paths) and
    /// must not declare losses.
    freshest_ack_high: u64,

    /// The paths, their windows, timers and lists of frames in flight.
    pub(super) paths: Paths,
    /// Some path's retransmission timer may be armed: false only from a
    /// [`Self::refresh_path_timers`] that found nothing in flight (and disarmed every
    /// timer) to the next transmission.
    path_timers_armed: bool,
    /// Bytes a frame takes besides its payload (header estimate), for the windows.
    frame_overhead_bytes: u64,

    /// Stream offset (exclusive) the peer lets us send up to.
    peer_credit: u64,
    /// The application asked to close: send a Close once all data is out.
    close_requested: bool,
    close_sent: bool,
    close_acked: bool,
}

/// A frame to put on the wire now, and the path to send it on.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameToSend {
    pub(super) packet_number: u64,
    pub(super) frame: SentFrame,
    pub(super) retransmission: bool,
    pub(super) path: usize,
}

/// Packets an acknowledgement says nothing about: `[start, end)`.
#[derive(Debug, Clone, Copy)]
struct Unknown {
    start: u64,
    end: u64,
}

impl Unknown {
    fn contains(&self, packet_number: u64) -> bool {
        (self.start..self.end).contains(&packet_number)
    }
}

impl SendState {
    pub(super) fn new(
        buffer_bytes: usize,
        max_in_flight: usize,
        paths: Paths,
        frame_overhead_bytes: u64,
    ) -> Self {
        Self {
            ring: StreamRing::new(buffer_bytes),
            acked_offset: 0,
            acked_high: 0,
            write_offset: 0,
            next_offset: 0,
            write_remaining: 0,
            write_message_len: 0,
            lends: VecDeque::new(),
            released: VecDeque::new(),
            max_lends: max_in_flight,
            lend_ended_base: None,
            tx_message_id: 0,
            tx_message_len: 0,
            tx_message_prefix: 0,
            tx_payload_start: 0,
            tx_message_end: 0,
            tx_next_message_id: 0,
            in_flight: VecDeque::new(),
            base_pn: 0,
            unsacked: 0,
            max_in_flight,
            retransmit_queue: VecDeque::new(),
            recut_queue: VecDeque::new(),
            recut_in_flight: 0,
            frames_recut: 0,
            last_cumulative_ack: 0,
            duplicate_acks: 0,
            freshest_ack_high: 0,
            paths,
            path_timers_armed: false,
            frame_overhead_bytes,
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

    /// Writes a message header: the prefix, and after it the tag of a tagged message (`tag`
    /// not 0; written like message bytes, so that frames carry it as the first 8 bytes of
    /// the body), or with `active` the active message's handler word in the tag's place.
    /// The caller checked that no message is open and that the header fits.
    pub(super) fn start_message(&mut self, len: u64, tag: u64, active: bool) {
        let prefix = MessagePrefix::for_message(len, tag, active);
        debug_assert!(!self.message_open() && self.capacity() as u64 >= prefix.header_len());
        let at = self.write_offset;
        self.ring.write_u64_le(at, prefix.raw());
        if prefix.tagged() {
            self.ring.write_u64_le(at + MESSAGE_HEADER_LEN, tag);
        }
        self.write_offset += prefix.header_len();
        self.write_remaining = len;
        self.write_message_len = len;
        // The previous message's last lend may have ended meanwhile (acknowledged).
        self.settle_lends();
    }

    /// Stream offset of the open (or last) message's first byte.
    fn message_base(&self) -> u64 {
        self.write_offset - (self.write_message_len - self.write_remaining)
    }

    /// Copies as much of `data` as fits the open message and the ring.
    pub(super) fn write(&mut self, data: &[u8]) -> usize {
        let remaining = usize::try_from(self.write_remaining).unwrap_or(usize::MAX);
        let count = data.len().min(remaining).min(self.capacity());
        if count > 0 {
            let base = self.message_base();
            if self
                .lends
                .back()
                .is_some_and(|lend| lend.base == base && lend.end == self.write_offset)
            {
                // Written after lent bytes: this message lends no more.
                self.lend_ended_base = Some(base);
            }
            let at = self.write_offset;
            self.ring.copy_in(at, &data[..count]);
            self.write_offset += count as u64;
            self.write_remaining -= count as u64;
            self.settle_lends();
        }
        count
    }

    pub(super) fn all_acked(&self) -> bool {
        self.acked_offset == self.write_offset
    }

    pub(super) fn acked_offset(&self) -> u64 {
        self.acked_offset
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

    /// Whether the Close was asked for and has not gone out yet.
    pub(super) fn close_pending(&self) -> bool {
        self.close_requested && !self.close_sent
    }

    pub(super) fn close_acked(&self) -> bool {
        // Frames re-cut after the Close may still be unacknowledged.
        self.close_acked && self.all_acked()
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
        self.next_offset < self.write_offset
            && self.peer_credit < self.next_offset + self.credit_needed()
    }

    /// Stream bytes from `next_offset` on that the peer's credit must cover before the next
    /// new frame can go: a length prefix goes only whole and, unless its message is empty,
    /// with at least one byte of the message ([`Self::next_raw_data`]); other bytes, one.
    fn credit_needed(&self) -> u64 {
        let len = if self.next_offset == self.tx_message_end {
            // A prefix not read yet (the writer writes prefixes whole).
            self.prefix_len(self.next_offset)
        } else if self.next_offset + MESSAGE_HEADER_LEN == self.tx_payload_start {
            self.tx_message_len
        } else {
            return 1;
        };
        MESSAGE_HEADER_LEN + u64::from(len > 0)
    }

    /// Whether sending stalls after this frame (buffer full, no credit, in-flight cap, every
    /// path's window full): the receiver should ack at once instead of delaying.
    pub(super) fn will_stall(&self) -> bool {
        self.capacity() == 0
            || self.next_offset >= self.peer_credit
            || self.in_flight.len() >= self.max_in_flight
            || !self.paths.any_room()
    }

    /// Whether [`Self::next_frame`] can have a frame now: false exactly where it returns
    /// `None` before choosing a path, so a caller with nothing to send (a receiver, a
    /// sender polled after its answer) skips working out a frame's limits and lends.
    pub(super) fn frame_may_be_due(&mut self) -> bool {
        if self.retransmission_first() {
            return true;
        }
        self.in_flight.len() < self.max_in_flight
            && (self.recut_waiting()
                || self.next_offset != self.write_offset
                || self.close_pending())
    }

    /// The next frame to send and its path: a retransmission first, then the rests of
    /// shortened frames (`send/resend.rs`), then new data, then the Close. `limits` bound the
    /// payloads of frames of either kind; with `compact`, new data goes in a compact Stream
    /// frame. `None` when there is nothing to send or no path has room in its window.
    pub(super) fn next_frame(
        &mut self,
        now: Nanos,
        limits: PayloadLimits,
        compact: bool,
    ) -> Option<FrameToSend> {
        if self.retransmission_first() {
            return self.next_retransmission(now, limits);
        }
        if self.in_flight.len() >= self.max_in_flight {
            return None;
        }
        if self.recut_waiting() {
            return self.next_recut(now, limits);
        }
        let (max_payload, compact_payload) = (limits.data, compact.then_some(limits.stream));
        if self.next_offset == self.write_offset && !self.close_pending() {
            // Nothing new to send (a receiver, on every poll): spare the scheduler.
            return None;
        }
        let largest = match compact_payload {
            Some(payload) => payload as u64 + STREAM_OVERHEAD_BYTES,
            None => max_payload as u64 + self.frame_overhead_bytes,
        };
        let path = self.paths.choose(largest)?;
        // A length prefix that wraps around the end of the ring cannot travel as raw bytes;
        // a Data frame carries it implicitly (its first fragment covers the prefix).
        let frame = compact_payload
            .and_then(|payload| self.next_raw_data(payload))
            .or_else(|| self.next_new_data(max_payload));
        if let Some(frame) = frame {
            return Some(self.record_new(now, frame, path));
        }
        if self.close_requested
            && !self.close_sent
            && !self.message_open()
            && self.next_offset == self.write_offset
        {
            self.close_sent = true;
            let frame = SentFrame::new(true, self.write_offset, 0, self.tx_next_message_id, 0, 0);
            return Some(self.record_new(now, frame, path));
        }
        None
    }

    /// Bytes `[offset, offset + len)` of the stream while still buffered (written, or lent,
    /// and not yet acknowledged): from the lender's slice (`lender` looks it up by token)
    /// when they are lent (the range starts in a lent range; frames never straddle one),
    /// else from the ring when contiguous there. None otherwise, or when the lender's slice
    /// is missing or too short for them.
    pub(super) fn payload_at<'a>(
        &'a self,
        offset: u64,
        len: usize,
        lender: impl FnOnce(u64) -> Option<&'a [u8]>,
    ) -> Option<&'a [u8]> {
        let end = offset.checked_add(len as u64)?;
        if offset < self.acked_offset || end > self.write_offset {
            return None;
        }
        if let Some(index) = self.lend_index_at(offset) {
            let lend = self.lends[index];
            if end > lend.limit {
                return None;
            }
            let start = usize::try_from(offset - lend.base).ok()?;
            return lender(lend.token)?.get(start..start.checked_add(len)?);
        }
        let start = self.ring.position(offset);
        self.ring.get(start..start.checked_add(len)?)
    }

    /// The payload bytes of a frame being transmitted: contiguous in the ring, or in the
    /// lender's slice `lent` of the lend holding them (the caller checked that it covers
    /// the lend), by construction.
    pub(super) fn payload<'a>(&'a self, frame: &SentFrame, lent: &'a [u8]) -> &'a [u8] {
        let len = frame.payload_len as usize;
        if let Some(index) = self.lend_index_at(frame.payload_offset) {
            let start = (frame.payload_offset - self.lends[index].base) as usize;
            let payload = lent.get(start..start + len);
            debug_assert!(payload.is_some(), "a lent frame without its lender's bytes");
            return payload.unwrap_or(&[]);
        }
        let start = self.ring.position(frame.payload_offset);
        &self.ring[start..start + len]
    }

    /// Starts a new connection's numbering at `packet_number` and `stream_offset` instead of
    /// 0 (tests of the 32-bit wrap: [`ReliableConfig::initial_packet_number`]).
    ///
    /// [`ReliableConfig::initial_packet_number`]: super::config::ReliableConfig::initial_packet_number
    pub(super) fn start_numbering(&mut self, packet_number: u64, stream_offset: u64) {
        debug_assert!(self.in_flight.is_empty() && self.write_offset == 0);
        self.base_pn = packet_number;
        self.last_cumulative_ack = packet_number;
        self.freshest_ack_high = packet_number;
        self.acked_offset = stream_offset;
        self.acked_high = stream_offset;
        self.write_offset = stream_offset;
        self.next_offset = stream_offset;
        self.tx_payload_start = stream_offset;
        self.tx_message_end = stream_offset;
    }

    /// The packet number the next new frame gets: every lower one was sent.
    pub(super) fn next_packet_number(&self) -> u64 {
        self.base_pn + self.in_flight.len() as u64
    }

    /// Processes the ack fields of a frame from the peer: its cumulative ack, its whole SACK
    /// list (header and Ack payload), whether that list was truncated, and its credit.
    /// `sent_end` is [`Self::next_packet_number`] when the frame arrived (the caller
    /// refused it if its cumulative ack was beyond): frames sent after that are not
    /// acknowledged by it whatever its SACK ranges say, and `now` is its arrival time.
    pub(super) fn on_ack(
        &mut self,
        now: Nanos,
        cumulative_ack: u64,
        sack: &[SackRange],
        truncated: bool,
        credit: u64,
        sent_end: u64,
    ) -> AckOutcome {
        let next_pn = self.next_packet_number().min(sent_end);
        let cumulative_ack = cumulative_ack.min(next_pn);
        self.peer_credit = self.peer_credit.max(credit);
        let mut outcome = AckOutcome::default();
        // Paths that had a frame acknowledged (a bit per path; MAX_PATHS is 64).
        let mut touched = 0u64;
        // (packet number, frame) of the newest newly acknowledged frame.
        let mut newest: Option<(u64, SentFrame)> = None;
        self.ack_cumulative(now, cumulative_ack, &mut touched, &mut newest);
        if !self.lends.is_empty() {
            // Acknowledged lent bytes need no adoption; whole lends end.
            self.settle_lends();
        }
        self.ack_ranges(now, sack, next_pn, &mut touched, &mut newest);
        self.sample_rtts(now, touched);
        let unknown = Self::unknown_region(cumulative_ack, sack, truncated);
        for path in 0..self.paths.len() {
            let head = self.paths.get(path).head;
            if head != NO_FRAME && unknown.contains(head) {
                // This ack could not tell whether the path delivers: do not let its timer
                // run against it (it is re-armed from now).
                self.paths.get_mut(path).rto_deadline = None;
            }
        }
        let high = sack.last().map_or(cumulative_ack, |range| range.end);
        let fresh = high >= self.freshest_ack_high;
        self.freshest_ack_high = self.freshest_ack_high.max(high);
        if let Some((_, frame)) = newest {
            outcome.progress = true;
            self.duplicate_acks = 0;
            if !frame.retransmitted
                && frame.sent_at >= self.paths.get(usize::from(frame.path)).last_timeout_at
            {
                outcome.rtt_sample_ns = Some(now.saturating_sub(frame.sent_at));
            }
            for path in 0..self.paths.len() {
                if fresh && touched & (1 << path) != 0 {
                    outcome.declared_lost += self.detect_losses(path, unknown);
                }
            }
        } else if self.paths.len() == 1
            && cumulative_ack == self.last_cumulative_ack
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
        outcome
    }

    /// [`Self::on_ack`]'s cumulative part: retires every frame below `cumulative_ack`,
    /// marking the paths of those newly acknowledged in `touched` and the newest of them in
    /// `newest`.
    fn ack_cumulative(
        &mut self,
        now: Nanos,
        cumulative_ack: u64,
        touched: &mut u64,
        newest: &mut Option<(u64, SentFrame)>,
    ) {
        while self.base_pn < cumulative_ack {
            let Some(&frame) = self.in_flight.front() else {
                break;
            };
            if frame.status != FrameStatus::Sacked {
                self.unsacked -= 1;
                self.frame_acked(now, self.base_pn, touched);
                *newest = Some((self.base_pn, frame));
            }
            self.in_flight.pop_front();
            self.acked_high = self.acked_high.max(frame.stream_end());
            self.recut_in_flight -= usize::from(frame.recut);
            if frame.is_close {
                self.close_acked = true;
            }
            self.base_pn += 1;
        }
        self.acked_offset = if self.recut_in_flight == 0 && !self.recut_waiting() {
            self.acked_high
        } else {
            self.acked_high.min(self.recut_floor())
        };
        debug_assert!(self.write_offset - self.acked_offset <= self.ring.len() as u64);
    }

    /// [`Self::on_ack`]'s selective part: marks the frames of the SACK ranges (below
    /// `next_pn`) acknowledged, as [`Self::ack_cumulative`] does.
    fn ack_ranges(
        &mut self,
        now: Nanos,
        sack: &[SackRange],
        next_pn: u64,
        touched: &mut u64,
        newest: &mut Option<(u64, SentFrame)>,
    ) {
        for range in sack {
            let start = range.start.max(self.base_pn);
            let end = range.end.min(next_pn);
            for packet_number in start..end {
                let index = (packet_number - self.base_pn) as usize;
                let frame = self.in_flight[index];
                if frame.status != FrameStatus::Sacked {
                    self.unsacked -= 1;
                    self.frame_acked(now, packet_number, touched);
                    self.in_flight[index].status = FrameStatus::Sacked;
                    if newest.is_none_or(|(newest_pn, _)| packet_number > newest_pn) {
                        *newest = Some((packet_number, frame));
                    }
                }
            }
        }
    }

    /// One RTT sample per path of `touched` and ack, from its newest frame acknowledged (a
    /// sample per frame cost two divisions each, for near-identical values).
    fn sample_rtts(&mut self, now: Nanos, touched: u64) {
        let mut sampled = touched;
        while sampled != 0 {
            let path = sampled.trailing_zeros() as usize;
            sampled &= sampled - 1;
            let entry = self.paths.get_mut(path);
            if let Some(sent_at) = entry.newest_acked_sent_at.take() {
                entry.on_rtt_sample(now.saturating_sub(sent_at));
            }
        }
    }

    /// Retransmission timeout of `path`: declares lost every frame in flight on it last sent
    /// at least its RTO ago (and at least the oldest one; only that one when the whole
    /// peer is silent), backs its timer off and marks it suspect. Returns how many frames were declared lost and whether the path failed often
    /// enough in a row to go down.
    pub(super) fn on_path_rto(&mut self, now: Nanos, path: usize) -> (u64, bool) {
        let rto_ns = self.paths.get(path).rtt.rto_ns();
        // The peer (or this process) is silent as a whole, not this link, when nothing sent
        // since this path's oldest frame got through on any path (give or take the path's
        // minimum RTT: links of different delays deliver out of send order), or when no
        // path had anything acknowledged in the second half of that frame's wait (from
        // midway between its expected ack, one smoothed RTT after it left, and its
        // timeout) while another path still waits for the ack of a frame sent before that
        // midpoint and not before the latest frame that got through: a reading peer would
        // have acknowledged it. Without such a frame the silence says nothing: the other
        // paths may have had nothing to send (held back by a receive window full behind
        // this path's hole, or at the end of a transfer), or only frames that later ones
        // overtook, lost like this path's.
        // The second test is needed because paths with queues of different lengths deliver
        // out of send order by far more than a minimum RTT: a frame that waited behind 9 ms
        // of queue on one path was overtaken by frames sent 0.7 ms after it on another,
        // with 8 ms of queue, which the receiver read just before it paused; the first test
        // alone then called the pause a dead link, declared the whole window of the path
        // lost, and the other path resent it all before the originals' acks came back
        // (`striping_receiver_pauses_cost_one_frame_each`, seed 163: 712 duplicates).
        // Only the oldest frame is declared lost (as TCP does); moving all the path's
        // frames to the other paths only made duplicates of what the paused receiver was
        // about to read.
        let peer_silent = {
            let entry = self.paths.get(path);
            entry.head != NO_FRAME && {
                let head_sent_at = self.in_flight[(entry.head - self.base_pn) as usize].sent_at;
                let midway_ns = entry.rtt.smoothed_ns().min(rto_ns) / 2 + rto_ns / 2;
                let midpoint = head_sent_at.saturating_add(midway_ns);
                let latest_delivered_sent_at = self.paths.latest_delivered_sent_at();
                latest_delivered_sent_at < head_sent_at.saturating_add(entry.min_rtt_ns())
                    || (self.paths.latest_delivered_at() < midpoint
                        && (0..self.paths.len()).any(|other| {
                            let head = self.paths.get(other).head;
                            other != path
                                && head != NO_FRAME
                                && (latest_delivered_sent_at..midpoint).contains(
                                    &self.in_flight[(head - self.base_pn) as usize].sent_at,
                                )
                        }))
            }
        };
        let mut lost = 0;
        loop {
            let packet_number = self.paths.get(path).head;
            if packet_number == NO_FRAME {
                break;
            }
            let frame = self.in_flight[(packet_number - self.base_pn) as usize];
            if lost > 0 && (peer_silent || now.saturating_sub(frame.sent_at) < rto_ns) {
                break;
            }
            let index = (packet_number - self.base_pn) as usize;
            if !self.mark_lost(index) {
                break;
            }
            self.in_flight[index].lost_by_timeout = true;
            lost += 1;
        }
        let signs_of_life = self.paths.signs_of_life();
        let entry = self.paths.get_mut(path);
        entry.stats.rto_expirations += 1;
        entry.on_failure(signs_of_life);
        entry.rtt.back_off();
        entry.rto_deadline = None;
        entry.timeout_probe = true;
        entry.last_timeout_at = now;
        entry.restart_meter();
        // Suspect steers traffic to the other paths, and keeps one frame in flight on this
        // one (a single path too): most timeouts on a busy host are a process off its CPU,
        // and resending a whole window at once, only for the originals to be acknowledged
        // a moment later, wasted milliseconds of the link each time. A ping probes the
        // path at once: the frames it carries while suspect are mostly retransmissions,
        // whose acks cannot tell which path delivered them, but the answer to a ping sent
        // on it can.
        if entry.state == super::paths::PathState::Up {
            self.paths.get_mut(path).state = super::paths::PathState::Suspect;
            self.paths.ping(path);
        }
        let entry = self.paths.get(path);
        (
            lost,
            entry.consecutive_failures >= super::paths::DOWN_AFTER_FAILURES,
        )
    }

    /// Takes `path` down unless it is the last usable one: every frame in flight on it is
    /// declared lost and queued for the other paths. Returns whether it went down.
    pub(super) fn take_path_down(&mut self, now: Nanos, path: usize) -> bool {
        if !self.paths.may_go_down(path) {
            return false;
        }
        loop {
            let packet_number = self.paths.get(path).head;
            if packet_number == NO_FRAME || !self.mark_lost((packet_number - self.base_pn) as usize)
            {
                break;
            }
        }
        self.paths.take_down(now, path)
    }

    /// Whether nothing is in flight and no path's retransmission timer is armed:
    /// [`Self::refresh_path_timers`] has nothing to do.
    pub(super) fn path_timers_idle(&self) -> bool {
        self.in_flight.is_empty() && !self.path_timers_armed
    }

    /// Arms the retransmission timer of every path with frames in flight, disarms the others.
    pub(super) fn refresh_path_timers(&mut self, now: Nanos) {
        if self.in_flight.is_empty() && !self.path_timers_armed {
            // Nothing was or is in flight (a receiver, on every datagram): nothing to do.
            return;
        }
        self.path_timers_armed = !self.in_flight.is_empty();
        for path in 0..self.paths.len() {
            let entry = self.paths.get_mut(path);
            if entry.head == NO_FRAME {
                entry.rto_deadline = None;
            } else if entry.rto_deadline.is_none() {
                entry.rto_deadline = Some(now.saturating_add(entry.rtt.rto_ns()));
            }
        }
    }

    /// Paths whose retransmission timer is due at `now`, as a bit set. A timer that runs
    /// late (this process was not running) waits one more RTO first, once: the acks that
    /// came meanwhile may still be unread (`Path::defer_late_timer`).
    pub(super) fn due_path_rtos(&mut self, now: Nanos) -> u64 {
        let mut due = 0u64;
        for path in 0..self.paths.len() {
            let entry = self.paths.get_mut(path);
            let Some(deadline) = entry.rto_deadline.filter(|&deadline| deadline <= now) else {
                continue;
            };
            match entry.defer_late_timer(now, deadline) {
                Some(later) => entry.rto_deadline = Some(later),
                None => due |= 1 << path,
            }
        }
        due
    }

    /// Bytes of memory held.
    pub(super) fn memory_bytes(&self) -> usize {
        self.ring.capacity()
            + self.in_flight.capacity() * core::mem::size_of::<SentFrame>()
            + self.retransmit_queue.capacity() * core::mem::size_of::<u64>()
            + self.recut_queue.capacity() * core::mem::size_of::<Recut>()
            + self.lends.capacity() * core::mem::size_of::<Lend>()
            + self.released.capacity() * core::mem::size_of::<u64>()
            + self.paths.len() * core::mem::size_of::<super::paths::Path>()
    }

    // ---- helpers ----

    /// Bytes a frame takes in a path's window.
    fn frame_bytes(&self, frame: &SentFrame) -> u64 {
        let overhead = if frame.compact {
            STREAM_OVERHEAD_BYTES
        } else {
            self.frame_overhead_bytes
        };
        u64::from(frame.payload_len) + overhead
    }

    /// Whether data frames may be waiting to go: bytes written (or lent) and not yet sent,
    /// or frames queued for retransmission (some of which may turn out stale).
    pub(super) fn data_waiting(&self) -> bool {
        self.next_offset < self.write_offset
            || !self.retransmit_queue.is_empty()
            || self.recut_waiting()
    }

    /// Cuts the next Stream frame: raw stream bytes from `next_offset`, possibly across
    /// message boundaries, never ending inside a message's 8-byte length prefix (a Data
    /// frame must be able to follow). Keeps the message bookkeeping of [`Self::next_new_data`]
    /// up to date by reading the prefixes it passes. `None` if no data, credit or room.
    fn next_raw_data(&mut self, max_payload: usize) -> Option<SentFrame> {
        let start = self.next_offset;
        let ring_room = (self.ring.len() - self.ring.position(start)) as u64;
        let mut end = self
            .write_offset
            .min(self.peer_credit)
            .min(start.saturating_add(max_payload as u64))
            .min(start + ring_room)
            .min(self.lent_cut(start));
        if end <= start {
            return None;
        }
        let mut cursor = start;
        loop {
            if cursor == self.tx_message_end {
                // A message's length prefix starts here: all of it, or the frame ends here.
                if end < cursor + MESSAGE_HEADER_LEN {
                    end = cursor;
                    break;
                }
                self.enter_message(cursor);
            }
            if self.tx_message_end >= end {
                break;
            }
            cursor = self.tx_message_end;
        }
        // The prefix of the last message read (by the loop above, or earlier by
        // `next_new_data`, which reads it before it has a byte of the message to send):
        // the frame ends before it if it would end inside it, or right after it with none
        // of the message's bytes. A Data frame at fragment offset 0 carries the prefix
        // implicitly, so one that followed a prefix sent alone (or in part) would claim it
        // again, and the receiver refuses that as inconsistent on every retransmission.
        // (The bytes are not written or lent yet, or credit, the frame's size or the end
        // of the ring cut it there: the prefix goes with them.)
        if let Some(prefix_start) = self.tx_payload_start.checked_sub(MESSAGE_HEADER_LEN) {
            let inside = end > prefix_start && end < self.tx_payload_start;
            let alone = end == self.tx_payload_start && self.tx_message_len > 0;
            if start <= prefix_start && (inside || alone) {
                end = prefix_start;
            }
        }
        if end <= start {
            return None;
        }
        self.next_offset = end;
        let mut frame = SentFrame::new(false, start, (end - start) as u32, 0, 0, 0);
        frame.compact = true;
        Some(frame)
    }

    /// The prefix written at stream offset `at` (in the ring: headers are written whole and
    /// never lent).
    fn prefix_at(&self, at: u64) -> MessagePrefix {
        MessagePrefix::from_raw(self.ring.read_u64_le(at))
    }

    /// The length of the body (tag included) after the prefix at `at`.
    fn prefix_len(&self, at: u64) -> u64 {
        self.prefix_at(at).body_len()
    }

    /// Makes the message whose prefix is at `at` the one being cut into frames: the prefix
    /// is read, and the frames that follow belong to it (both frame cutters, whichever
    /// reaches the prefix first).
    fn enter_message(&mut self, at: u64) {
        let prefix = self.prefix_at(at);
        let len = prefix.body_len();
        self.tx_message_id = self.tx_next_message_id;
        self.tx_next_message_id += 1;
        self.tx_message_len = len;
        self.tx_message_prefix = prefix.raw();
        self.tx_payload_start = at + MESSAGE_HEADER_LEN;
        self.tx_message_end = self.tx_payload_start.saturating_add(len);
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
            self.enter_message(start);
        }
        let payload_offset = start.max(self.tx_payload_start);
        let first_fragment = start < self.tx_payload_start;
        let available_end = self
            .write_offset
            .min(self.tx_message_end)
            .min(self.peer_credit);
        let ring_room = self.ring.len() - self.ring.position(payload_offset);
        let len = available_end
            .min(self.lent_cut(payload_offset))
            .saturating_sub(payload_offset)
            .min(max_payload as u64)
            .min(ring_room as u64);
        if len == 0 && !(first_fragment && self.tx_message_len == 0) {
            return None;
        }
        self.next_offset = payload_offset + len;
        // Invariant: len <= max_payload, which the caller bounds by the u16 payload field.
        Some(SentFrame::new(
            false,
            payload_offset,
            len as u32,
            self.tx_message_id,
            self.tx_message_prefix,
            payload_offset - self.tx_payload_start,
        ))
    }

    fn record_new(&mut self, now: Nanos, frame: SentFrame, path: usize) -> FrameToSend {
        let packet_number = self.base_pn + self.in_flight.len() as u64;
        self.in_flight.push_back(frame);
        self.unsacked += 1;
        self.on_transmit(now, packet_number, path);
        FrameToSend {
            packet_number,
            frame: self.in_flight[self.in_flight.len() - 1],
            retransmission: false,
            path,
        }
    }

    /// Accounts a transmission of `packet_number` (in `in_flight`, status InFlight) on
    /// `path`: its sequence number there, the delivery snapshot, the window, the timer, the
    /// path's list.
    fn on_transmit(&mut self, now: Nanos, packet_number: u64, path: usize) {
        let index = (packet_number - self.base_pn) as usize;
        let bytes = self.frame_bytes(&self.in_flight[index]);
        let entry = self.paths.get_mut(path);
        entry.on_send(now);
        let frame = &mut self.in_flight[index];
        frame.sent_at = now;
        // Invariant: path < MAX_PATHS (64), so it fits a u8.
        frame.path = path as u8;
        frame.path_seq = entry.next_seq;
        entry.next_seq += 1;
        entry.bytes_in_flight += bytes;
        entry.stats.frames_sent += 1;
        entry.stats.payload_bytes_sent += u64::from(frame.payload_len);
        if entry.rto_deadline.is_none() {
            entry.rto_deadline = Some(now.saturating_add(entry.rtt.rto_ns()));
        }
        self.path_timers_armed = true;
        self.link(packet_number);
    }

    /// A frame acknowledged for the first time: if its last transmission was still in
    /// flight, its path gets an RTT sample (Karn's rule), a delivery-rate sample and a sign
    /// of life.
    fn frame_acked(&mut self, now: Nanos, packet_number: u64, touched: &mut u64) {
        let index = (packet_number - self.base_pn) as usize;
        let frame = self.in_flight[index];
        match frame.status {
            FrameStatus::InFlight => {}
            FrameStatus::Lost if !frame.retransmitted => {
                // Declared lost (a timeout that came too early, most likely) and yet it
                // arrived, over the one path it took: that path works, this is a clean RTT
                // sample of it, and its bytes were delivered (the rate meter counts them,
                // or a pause of the receiver would read as a slower link).
                let path = usize::from(frame.path);
                let bytes = self.frame_bytes(&frame);
                let entry = self.paths.get_mut(path);
                if frame.sent_at >= entry.last_timeout_at {
                    entry.on_rtt_sample(now.saturating_sub(frame.sent_at));
                }
                entry.stats.spurious_losses += 1;
                self.paths.delivered(path, now, bytes, frame.sent_at);
                self.paths.mark_alive(path);
                if frame.lost_by_timeout {
                    // Not this one: the caller retires it.
                    self.in_flight[index].lost_by_timeout = false;
                    self.undo_timeouts(path);
                }
                return;
            }
            FrameStatus::Lost | FrameStatus::Sacked => return,
        }
        self.unlink(packet_number);
        let bytes = self.frame_bytes(&frame);
        let path = usize::from(frame.path);
        let entry = self.paths.get_mut(path);
        entry.bytes_in_flight -= bytes;
        entry.stats.frames_acked += 1;
        if frame.retransmitted {
            // An earlier transmission may be the one that arrived, and it left before the
            // frames now in flight on this path: its RTT (Karn), its delivery and its place
            // in the path's order say nothing. Only if every transmission took this path
            // does the ack show the path works.
            if !frame.paths_mixed {
                entry.rto_deadline = None;
                self.paths.mark_alive(path);
            }
            return;
        }
        // Its RTT sample is taken once the whole ack is processed (`on_ack`), unless it
        // left before the path's latest timeout (see `Path::last_timeout_at`).
        if frame.sent_at >= entry.last_timeout_at {
            entry.newest_acked_sent_at = Some(
                entry
                    .newest_acked_sent_at
                    .map_or(frame.sent_at, |newest| newest.max(frame.sent_at)),
            );
        }
        entry.largest_acked_seq = Some(
            entry
                .largest_acked_seq
                .map_or(frame.path_seq, |largest| largest.max(frame.path_seq)),
        );
        entry.rto_deadline = None;
        self.paths.delivered(path, now, bytes, frame.sent_at);
        self.paths.mark_alive(path);
        *touched |= 1 << path;
    }

    /// What an ack with these fields does not tell: when its SACK list was truncated, the
    /// packets between its last two ranges (the receiver reports its lowest ranges and its
    /// highest), or everything above the cumulative ack when it reported none.
    fn unknown_region(cumulative_ack: u64, sack: &[SackRange], truncated: bool) -> Unknown {
        if !truncated {
            return Unknown { start: 0, end: 0 };
        }
        let above = cumulative_ack.saturating_add(1);
        match sack {
            [.., previous, last] => Unknown {
                start: previous.end,
                end: last.start,
            },
            [last] => Unknown {
                start: above,
                end: last.start,
            },
            [] => Unknown {
                start: above,
                end: u64::MAX,
            },
        }
    }

    /// Declares lost the oldest frames in flight on `path` that [`PACKET_THRESHOLD`] later
    /// frames of the same path overtook (acknowledged) while the ack shows them missing.
    fn detect_losses(&mut self, path: usize, unknown: Unknown) -> u64 {
        let mut lost = 0;
        loop {
            let entry = self.paths.get(path);
            let (packet_number, Some(largest)) = (entry.head, entry.largest_acked_seq) else {
                break;
            };
            if packet_number == NO_FRAME || unknown.contains(packet_number) {
                break;
            }
            let index = (packet_number - self.base_pn) as usize;
            if self.in_flight[index].path_seq + PACKET_THRESHOLD > largest {
                break;
            }
            if !self.mark_lost(index) {
                break;
            }
            lost += 1;
        }
        lost
    }

    fn mark_lost(&mut self, index: usize) -> bool {
        let Some(&frame) = self.in_flight.get(index) else {
            return false;
        };
        if frame.status != FrameStatus::InFlight {
            return false;
        }
        let packet_number = self.base_pn + index as u64;
        self.unlink(packet_number);
        let bytes = self.frame_bytes(&frame);
        let entry = self.paths.get_mut(usize::from(frame.path));
        entry.bytes_in_flight -= bytes;
        entry.stats.frames_lost += 1;
        self.in_flight[index].status = FrameStatus::Lost;
        self.retransmit_queue.push_back(packet_number);
        true
    }

    /// A frame that a retransmission timeout of `path` declared lost was acknowledged
    /// from its first transmission: the timeout was spurious (the peer or this process was
    /// paused, not the link), and so are the losses it declared (like TCP's Eifel and
    /// F-RTO). Every frame of `path` a timeout declared lost and not yet resent goes back
    /// in flight, at the head of the path's list in send order, instead of being resent:
    /// after a pause the receiver works through its socket backlog for a while, and
    /// resending what it is about to read doubled the traffic of the path for that time.
    fn undo_timeouts(&mut self, path: usize) {
        let mut restored = 0u64;
        // Backwards, each one put at the head: the list ends up in send order (a path's
        // first transmissions leave in packet-number order, and a timeout declares its
        // oldest frames lost first).
        for position in (0..self.retransmit_queue.len()).rev() {
            let packet_number = self.retransmit_queue[position];
            let Some(index) = packet_number
                .checked_sub(self.base_pn)
                .map(|index| index as usize)
                .filter(|&index| index < self.in_flight.len())
            else {
                continue;
            };
            let frame = self.in_flight[index];
            if frame.status != FrameStatus::Lost
                || frame.retransmitted
                || !frame.lost_by_timeout
                || usize::from(frame.path) != path
            {
                continue;
            }
            let bytes = self.frame_bytes(&frame);
            let entry = &mut self.in_flight[index];
            entry.status = FrameStatus::InFlight;
            entry.lost_by_timeout = false;
            self.link_front(packet_number);
            self.paths.get_mut(path).bytes_in_flight += bytes;
            restored += 1;
        }
        let entry = self.paths.get_mut(path);
        entry.stats.spurious_timeouts += 1;
        entry.stats.spurious_losses += restored;
        // The retransmit queue's entries for them are stale now (skipped when popped).
    }

    /// Puts `packet_number` (in flight, its `path` set) at the head of its path's list.
    fn link_front(&mut self, packet_number: u64) {
        let index = (packet_number - self.base_pn) as usize;
        let path = usize::from(self.in_flight[index].path);
        let head = self.paths.get(path).head;
        self.in_flight[index].previous_on_path = NO_FRAME;
        self.in_flight[index].next_on_path = head;
        if head == NO_FRAME {
            self.paths.get_mut(path).tail = packet_number;
        } else {
            self.in_flight[(head - self.base_pn) as usize].previous_on_path = packet_number;
        }
        self.paths.get_mut(path).head = packet_number;
    }

    /// Appends `packet_number` (in flight, its `path` set) to its path's list.
    fn link(&mut self, packet_number: u64) {
        let index = (packet_number - self.base_pn) as usize;
        let path = usize::from(self.in_flight[index].path);
        let tail = self.paths.get(path).tail;
        self.in_flight[index].previous_on_path = tail;
        self.in_flight[index].next_on_path = NO_FRAME;
        if tail == NO_FRAME {
            self.paths.get_mut(path).head = packet_number;
        } else {
            self.in_flight[(tail - self.base_pn) as usize].next_on_path = packet_number;
        }
        self.paths.get_mut(path).tail = packet_number;
    }

    /// Removes `packet_number` from its path's list (it must be linked: status InFlight).
    fn unlink(&mut self, packet_number: u64) {
        let index = (packet_number - self.base_pn) as usize;
        let frame = self.in_flight[index];
        let path = usize::from(frame.path);
        if frame.previous_on_path == NO_FRAME {
            self.paths.get_mut(path).head = frame.next_on_path;
        } else {
            self.in_flight[(frame.previous_on_path - self.base_pn) as usize].next_on_path =
                frame.next_on_path;
        }
        if frame.next_on_path == NO_FRAME {
            self.paths.get_mut(path).tail = frame.previous_on_path;
        } else {
            self.in_flight[(frame.next_on_path - self.base_pn) as usize].previous_on_path =
                frame.previous_on_path;
        }
        self.in_flight[index].previous_on_path = NO_FRAME;
        self.in_flight[index].next_on_path = NO_FRAME;
    }
}
