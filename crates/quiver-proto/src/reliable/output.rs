//! Datagrams out: which frame goes next, on which path, with which acknowledgement, and
//! the Reset for a datagram to an unknown connection.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. It reads the send state (`send.rs`), the
//! receive state's acknowledgements (`recv.rs`) and the paths (`paths.rs`); the caller
//! sends what it returns. No I/O.

use quiver_wire::frame::{
    self, flags, Frame, FrameError, FrameHeader, FrameKey, FrameKeys, FrameType, MoreSackRanges,
};

use super::connection::ReliableConnection;
use super::events::State;
use super::recut::PayloadLimits;
use super::send::{self, LEND_MESSAGE_TOKEN};
use super::time::Nanos;

/// One datagram to send: `header[..header_len]` followed by `payload`.
#[derive(Debug)]
pub struct Transmit<'a> {
    /// Bytes of the header written into the caller's buffer.
    pub header_len: usize,
    /// The payload, borrowed from the connection (send buffer or handshake message) or,
    /// for lent bytes, from the lender's message given to
    /// [`ReliableConnection::poll_transmit_lent`].
    pub payload: &'a [u8],
    /// For a data frame, the stream offset of its payload: [`ReliableConnection::payload_at`]
    /// gives the same bytes back later, so a caller can gather several frames into one
    /// system call without copying their payloads.
    pub stream_offset: Option<u64>,
    /// The path to send it on (`0..path_count`).
    pub path: usize,
}

impl ReliableConnection {
    /// Next datagram to send, if any: writes the header into `header` (at least
    /// [`frame::MAX_HEADER_LEN`] bytes; a shorter buffer yields `None`) and returns the
    /// header length, the payload slice (borrowed from the send buffer; the datagram is
    /// header followed by payload, sent with a gathered write) and the path to send it on.
    /// Call until `None` after every `handle_*`, write, read or close.
    ///
    /// With an ack deferred (the `reliable` module docs, "The answer first"), a frame of
    /// new data that can go at once is returned before the ack is processed; the ack is
    /// processed by the next call (or input) whatever it brings, and always before `None`.
    ///
    /// While bytes are lent ([`lend_message`](Self::lend_message)) data frames go out only
    /// from [`poll_transmit_lent`](Self::poll_transmit_lent), which has the lender's bytes;
    /// this call then produces control frames only (handshake, acks, pings).
    pub fn poll_transmit<'a>(&'a mut self, now: Nanos, header: &mut [u8]) -> Option<Transmit<'a>> {
        self.poll_transmit_lent(now, header, &[])
    }

    /// [`poll_transmit`](Self::poll_transmit) for the lender of the open message's bytes
    /// ([`lend_message`](Self::lend_message)): `message` is the whole message, from its first
    /// byte (at least as long as what was lent). Frames of lent bytes take their payload
    /// from it (the [`Transmit::payload`] then borrows it). With a shorter slice (an
    /// empty one included) no data frame goes out while bytes are lent.
    pub fn poll_transmit_lent<'a>(
        &'a mut self,
        now: Nanos,
        header: &mut [u8],
        message: &'a [u8],
    ) -> Option<Transmit<'a>> {
        self.poll_transmit_lending(now, header, |token| {
            (token == LEND_MESSAGE_TOKEN).then_some(message)
        })
    }

    /// [`poll_transmit`](Self::poll_transmit) for a lender of several messages
    /// ([`lend_message_as`](Self::lend_message_as)): `lender` returns the whole message lent
    /// under a token (from its first byte, at least as long as what was lent of it), or
    /// None when the caller does not have it now. Frames of lent bytes take their payload
    /// from it (the [`Transmit::payload`] then borrows it); a frame whose lender's message
    /// is missing or too short does not go out, nor does any data frame after it.
    pub fn poll_transmit_lending<'a, F>(
        &'a mut self,
        now: Nanos,
        header: &mut [u8],
        mut lender: F,
    ) -> Option<Transmit<'a>>
    where
        F: FnMut(u64) -> Option<&'a [u8]>,
    {
        if header.len() < frame::MAX_HEADER_LEN {
            return None;
        }
        // Whether this poll processed a held ack, refreshing the timers at its arrival.
        let mut timers_fresh = false;
        if let Some(deferred) = &mut self.deferred_ack {
            if !deferred.answered
                && self.state == State::Established
                && !self.handshake_send_pending
                && !self.send.paths.reply_due()
            {
                deferred.answered = true;
                if let Some((to_send, lent)) = self.next_data_frame(now, &mut lender) {
                    return Some(self.transmit_frame(header, to_send, lent));
                }
            }
            self.apply_deferred_ack();
            timers_fresh = true;
        }
        // A handshake decision taken now changes what the timers depend on.
        timers_fresh &= !self.accept_pending();
        self.apply_pending_accept();
        if self.handshake_send_pending {
            return self.transmit_handshake(now, header);
        }
        if !matches!(
            self.state,
            State::Established | State::Closing | State::Closed
        ) {
            return None;
        }
        if let Some(reply) = self.send.paths.take_reply() {
            self.stats.acks_sent += 1;
            return self.transmit_control(
                FrameType::Ack,
                flags::PING_REPLY,
                header,
                reply.path,
                reply.token,
            );
        }
        if matches!(self.state, State::Established | State::Closing) {
            if let Some((to_send, lent)) = self.next_data_frame(now, &mut lender) {
                return Some(self.transmit_frame(header, to_send, lent));
            }
        }
        if self.state != State::Closed {
            if let Some(ping) = self.send.paths.take_ping(now) {
                self.stats.pings_sent += 1;
                return self.transmit_control(
                    FrameType::Ping,
                    flags::ACK_REQUESTED,
                    header,
                    ping.path,
                    ping.token,
                );
            }
        }
        if self.recv.ack_due(now) {
            self.stats.acks_sent += 1;
            let path = self.send.paths.ack_path();
            return self.transmit_control(FrameType::Ack, 0, header, path, 0);
        }
        // Refreshed at the held ack's arrival and nothing since moved a timer (what ran
        // after it sent nothing): refreshed again now, they would come out the same.
        if !timers_fresh {
            self.refresh_timers(now);
        }
        None
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) at `now` has anything to do: a
    /// datagram that may be due (a handshake message, a ping reply, data or a Close, a
    /// ping, an ack) or an ack held for the answer to process (the `reliable` module docs,
    /// "The answer first"). False means `poll_transmit` would return `None` and change
    /// nothing (the timers and gauges it refreshes are as the last input, timer,
    /// transmit, write or read left them), so a caller may skip it: a connection whose
    /// answer already carried its ack costs this look, not a poll. True does not promise a
    /// datagram (data may wait for credit or room in a window).
    pub fn transmit_pending(&self, now: Nanos) -> bool {
        self.deferred_ack.is_some()
            || self.handshake_send_pending
            || self.accept_pending()
            || self.send.paths.control_due()
            || self.send.data_waiting()
            || self.send.close_pending()
            || self.recv.ack_due(now)
    }

    /// The payload of a data frame transmitted earlier (see [`Transmit::stream_offset`]),
    /// while it is still in the send buffer: only an acknowledgement releases bytes (the
    /// next `handle_datagram`, or a later `poll_transmit` processing a deferred one: module
    /// docs), and only bytes it acknowledges. None for a range not (or no longer) held.
    pub fn payload_at(&self, stream_offset: u64, len: usize) -> Option<&[u8]> {
        self.payload_at_lending(stream_offset, len, |_| None)
    }

    /// [`payload_at`](Self::payload_at) for the lender: bytes that are lent come from
    /// `message` (the whole message, as given to
    /// [`poll_transmit_lent`](Self::poll_transmit_lent)).
    pub fn payload_at_lent<'a>(
        &'a self,
        stream_offset: u64,
        len: usize,
        message: &'a [u8],
    ) -> Option<&'a [u8]> {
        self.payload_at_lending(stream_offset, len, |token| {
            (token == LEND_MESSAGE_TOKEN).then_some(message)
        })
    }

    /// [`payload_at`](Self::payload_at) for a lender of several messages: bytes that are
    /// lent come from the message `lender` returns for their token (as for
    /// [`poll_transmit_lending`](Self::poll_transmit_lending)). None once the connection
    /// failed (it released every lent message).
    pub fn payload_at_lending<'a>(
        &'a self,
        stream_offset: u64,
        len: usize,
        lender: impl FnOnce(u64) -> Option<&'a [u8]>,
    ) -> Option<&'a [u8]> {
        if self.state == State::Failed {
            return None;
        }
        self.send.payload_at(stream_offset, len, lender)
    }

    /// The next Data (or compact Stream) frame to send, if any can go now, and the lender's
    /// message its payload comes from (empty when it is not lent): none when the frame
    /// would carry lent bytes and `lender` does not have their message.
    pub(super) fn next_data_frame<'a, F>(
        &mut self,
        now: Nanos,
        lender: &mut F,
    ) -> Option<(send::FrameToSend, &'a [u8])>
    where
        F: FnMut(u64) -> Option<&'a [u8]>,
    {
        // The common case first (`fast_path.rs`): a full Data frame of new bytes, none lent.
        if !self.config.compact_data_frames || self.recv.ack_owed() {
            let max_payload = self.config.max_data_payload_bytes();
            if let Some(to_send) = self.send.next_new_frame(now, max_payload) {
                return to_send.map(|to_send| (to_send, &[][..]));
            }
        }
        if !self.send.frame_may_be_due() {
            return None;
        }
        let covered = |lender: &mut F, (token, needed): (u64, u64)| {
            lender(token).filter(|message| message.len() as u64 >= needed)
        };
        // Checked before the frame is cut (cutting cannot be undone).
        let checked = match self.send.next_lend_needed() {
            Some(lend) => Some((lend.0, covered(lender, lend)?)),
            None => None,
        };
        let limits = PayloadLimits {
            data: self.config.max_data_payload_bytes(),
            stream: self.config.max_stream_payload_bytes(),
        };
        // Compact frames carry no acknowledgement: only when none is owed, due or delayed.
        // A delayed ack left behind by an answer would be due at the next frame's arrival
        // (every second frame is acked at once), and go out then as a frame of its own.
        let compact = self.config.compact_data_frames && !self.recv.ack_owed();
        let to_send = self.send.next_frame(now, limits, compact)?;
        let lent = match self.send.lend_at(to_send.frame.payload_offset) {
            None => &[][..],
            Some((token, _)) if checked.is_some_and(|(checked, _)| checked == token) => {
                checked.map_or(&[][..], |(_, message)| message)
            }
            // Not reached: the frame's lend is the one checked above.
            Some(lend) => covered(lender, lend).unwrap_or(&[]),
        };
        Some((to_send, lent))
    }

    /// A Data or Close frame (or a compact Stream frame); its payload from the send buffer
    /// or, for lent bytes, from `lent` (checked by the caller to cover them).
    pub(super) fn transmit_frame<'a>(
        &'a mut self,
        header: &mut [u8],
        to_send: send::FrameToSend,
        lent: &'a [u8],
    ) -> Transmit<'a> {
        let sent = to_send.frame;
        let path = to_send.path;
        if to_send.retransmission {
            self.stats.retransmits += 1;
            self.stats.frames_recut = self.send.frames_recut();
        } else if !sent.is_close {
            self.stats.data_frames_sent += 1;
            self.stats.payload_bytes_sent += u64::from(sent.payload_len);
        }
        if sent.compact {
            return self.transmit_stream(header, to_send, lent);
        }
        let frame_type = if sent.is_close {
            FrameType::Close
        } else {
            FrameType::Data
        };
        let mut frame_header =
            FrameHeader::new(frame_type, self.peer_id.unwrap_or(0), self.local_id);
        frame_header.packet_number = to_send.packet_number;
        frame_header.message_id = sent.message_id;
        frame_header.message_len = sent.message_len;
        frame_header.fragment_offset = sent.fragment_offset;
        frame_header.stream_offset = sent.payload_offset;
        frame_header.flags = flags::ACK;
        if self.send.will_stall() || sent.is_close {
            frame_header.flags |= flags::ACK_REQUESTED;
        }
        self.fill_ack(&mut frame_header, self.config.max_sack_ranges);
        self.stats.datagrams_sent += 1;
        self.send.paths.count_sent(path);
        let payload = self.send.payload(&sent, lent);
        // Invariant: the payload is at most max_data_payload_bytes (<= u16::MAX) and the
        // header buffer holds MAX_HEADER_LEN bytes (checked by poll_transmit); the SACK
        // ranges come from our own ordered range list.
        let header_len = frame_header
            .emit(self.send_keys(), header, payload)
            .unwrap_or(0);
        debug_assert!(header_len > 0, "emitting our own data frame failed");
        Transmit {
            header_len,
            payload,
            stream_offset: (!sent.is_close).then_some(sent.payload_offset),
            path,
        }
    }

    /// A compact Stream frame (raw stream bytes, no ack fields).
    pub(super) fn transmit_stream<'a>(
        &'a mut self,
        header: &mut [u8],
        to_send: send::FrameToSend,
        lent: &'a [u8],
    ) -> Transmit<'a> {
        let sent = to_send.frame;
        let mut frame_header = FrameHeader::new(FrameType::Stream, self.peer_id.unwrap_or(0), 0);
        frame_header.packet_number = to_send.packet_number;
        frame_header.stream_offset = sent.payload_offset;
        self.stats.datagrams_sent += 1;
        self.send.paths.count_sent(to_send.path);
        let payload = self.send.payload(&sent, lent);
        // Invariant: the payload is at most max_stream_payload_bytes (<= u16::MAX) and the
        // header buffer holds MAX_HEADER_LEN bytes (checked by poll_transmit).
        let header_len = frame_header
            .emit(self.send_keys(), header, payload)
            .unwrap_or(0);
        debug_assert!(header_len > 0, "emitting our own stream frame failed");
        Transmit {
            header_len,
            payload,
            stream_offset: Some(sent.payload_offset),
            path: to_send.path,
        }
    }

    /// An Ack or Ping on `path`; `packet_number` carries a ping's token (0 otherwise).
    pub(super) fn transmit_control<'a>(
        &'a mut self,
        frame_type: FrameType,
        extra_flags: u8,
        header: &mut [u8],
        path: usize,
        packet_number: u64,
    ) -> Option<Transmit<'a>> {
        let mut frame_header =
            FrameHeader::new(frame_type, self.peer_id.unwrap_or(0), self.local_id);
        frame_header.flags = flags::ACK | extra_flags;
        frame_header.packet_number = packet_number;
        if frame_type == FrameType::Ack && extra_flags & flags::PING_REPLY == 0 {
            // A plain Ack is numbered (from 1, one up each): the peer refuses one not above
            // the last it took, a replay (decision 0067).
            self.acks_numbered += 1;
            frame_header.packet_number = self.acks_numbered;
        }
        let mut payload_len = 0;
        if frame_type == FrameType::Ack {
            self.fill_ack(&mut frame_header, self.config.ack_range_limit());
            let previous_end = frame_header.sack.as_slice().last().map(|range| range.end);
            // Invariant: the ranges come from our own ordered range list, continue the
            // header's, and the payload buffer holds MAX_ACK_RANGES of them.
            payload_len = MoreSackRanges::emit(
                frame_header.cumulative_ack,
                previous_end,
                &self.ack_ranges_out,
                &mut self.ack_payload,
            )
            .unwrap_or(0);
        } else {
            self.fill_ack(&mut frame_header, self.config.max_sack_ranges);
        }
        let payload = &self.ack_payload[..payload_len];
        let header_len = frame_header.emit(self.send_keys(), header, payload).ok()?;
        self.stats.datagrams_sent += 1;
        self.send.paths.count_sent(path);
        Some(Transmit {
            header_len,
            payload,
            stream_offset: None,
            path,
        })
    }

    /// Fills the ack fields of `frame_header` with up to `total_limit` SACK ranges: the
    /// header's share in it, the rest in `ack_ranges_out` (for an Ack's payload).
    pub(super) fn fill_ack(&mut self, frame_header: &mut FrameHeader, total_limit: usize) {
        let (cumulative_ack, credit, truncated) = self.recv.write_ack(
            self.config.max_sack_ranges,
            total_limit,
            &mut frame_header.sack,
            &mut self.ack_ranges_out,
        );
        frame_header.cumulative_ack = cumulative_ack;
        frame_header.credit = credit;
        if truncated {
            frame_header.flags |= flags::SACK_TRUNCATED;
        }
    }
}

/// Answers a datagram for an unknown connection id: writes a Reset frame (header only, no
/// payload, under the job's frame key `job_key`) into `header` and returns its length, or
/// `None` if no Reset is due (the datagram is not a well-formed frame, is itself a Reset,
/// or is a new-connection Hello with dest id 0). A Handshake frame's tag is verified (its
/// key is public: a corrupted Hello must not reset the initiator that sent it, which takes
/// a Reset from any id); a connection frame's cannot be (no key of its connection is at
/// hand), so a corrupted one may be answered, its Reset naming the corrupted ids, which the
/// sender's connection does not take as its peer's. The Reset, no larger than the frame it
/// answers, goes to the frame's source id; only a member of the job can make one verify.
/// `header` needs [`frame::FIXED_HEADER_LEN`] bytes.
pub fn reset_for(datagram: &[u8], header: &mut [u8], job_key: &FrameKey) -> Option<usize> {
    let frame = match Frame::parse(datagram, FrameKeys::job_only(job_key)) {
        Ok(frame) => frame,
        Err(FrameError::NoKey { .. }) => Frame::parse_unauthenticated(datagram).ok()?,
        Err(_) => return None,
    };
    let received = frame.header();
    if received.frame_type == FrameType::Reset || received.dest_id == 0 || received.src_id == 0 {
        return None;
    }
    FrameHeader::new(FrameType::Reset, received.src_id, received.dest_id)
        .emit(FrameKeys::job_only(job_key), header, &[])
        .ok()
}
