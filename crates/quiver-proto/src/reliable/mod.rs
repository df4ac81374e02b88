//! The reliable datagram protocol: a sans-IO connection that carries messages of any size
//! over an unreliable datagram service (UDP, the in-memory transport, the simulator)
//! (`docs/protocol.md`, section "Datagram frames (udp / in-memory)"; frame layout in
//! `quiver_wire::frame`).
//!
//! What it does:
//! - proves job membership with the existing key handshake (`crate::handshake`), its four
//!   messages carried as payloads of Handshake frames and retransmitted on timeout;
//! - numbers Data and Close frames with packet numbers; a retransmission reuses the packet
//!   number and bytes of the original (duplicates are recognised by packet number);
//! - acknowledges with a cumulative ack plus SACK ranges, delayed (every second frame at
//!   once, otherwise within `ack_delay_ns`) and piggybacked on every frame it sends;
//! - measures RTT (RFC 6298, Karn's rule) for the retransmission timeout, with exponential
//!   backoff and the configured clamp; retransmits fast after 3 duplicate acks or when 3
//!   later transmissions were acknowledged (SACK);
//! - flow control driven by the receiver: every frame carries a credit, the stream offset up
//!   to which the receiver has buffer; a sender never sends beyond it, so a slow reader holds
//!   the sender back and nothing is dropped for lack of buffer;
//! - fragments messages of any size into frames and reassembles them through the fixed
//!   receive window, so memory does not grow with message size;
//! - pings idle connections, reports [`Event::PeerUnreachable`] after `idle_timeout_ns`
//!   without a datagram from the peer or `max_retransmits` timeouts in a row without
//!   progress, and closes gracefully;
//! - stripes one connection over `path_count` paths (links): every datagram arrives on a
//!   path and every [`Transmit`] names the path to send it on; each path has its own RTT,
//!   delivery rate, congestion window, loss detection and retransmission timer, goes down
//!   when it stops working (its frames move to the others) and rejoins when a probe is
//!   answered (`paths.rs`, `docs/striping.md`).
//!
//! What it does not do: congestion control beyond each path's window (it follows the
//! measured delivery rate and ignores random loss; there is no fairness between
//! connections), authentication of frames after the handshake (the XXH3 check catches
//! corruption, not forgery), I/O, clocks, randomness.
//!
//! The answer first: the acknowledgement fields of a Data frame that brings the
//! application a whole message are processed only after the first frame of the answer is
//! built (the next [`ReliableConnection::poll_transmit`]), or at the next input, whichever
//! comes first: a request's answer then leaves without waiting for the bookkeeping of the
//! ack it carried (docs/PERFORMANCE.md, "udp latency path (session 8)"). Such an ack
//! counts as it would have on arrival (its time, the frames sent by then).
//!
//! Sending in place: instead of copying a message into the send buffer
//! ([`ReliableConnection::write_message`]), the application may lend its bytes
//! ([`ReliableConnection::lend_message`]): their room in the send buffer is reserved, frames
//! of them take their payload from the application's message (passed to
//! [`ReliableConnection::poll_transmit_lent`]), and before the application reuses its
//! message it copies what is still unacknowledged into the send buffer
//! ([`ReliableConnection::adopt_lent`]). Retransmission, the memory bound and close work as
//! for written bytes; acknowledged lent bytes are never copied (docs/PERFORMANCE.md,
//! "Session 9: udp sends in place").
//!
//! Several messages in place: each message may be lent under a token the application
//! chooses ([`ReliableConnection::lend_message_as`]), and many may be lent at once (a
//! queue of lent ranges, one per message). Frames of lent bytes take their payload from a
//! lookup the application passes ([`ReliableConnection::poll_transmit_lending`]: token to
//! the whole message), retransmissions included; once every byte of a message is
//! acknowledged its token comes back from [`ReliableConnection::poll_released`], after which
//! the connection never asks for it again. A failed connection releases every token.
//!
//! Deterministic: no clock, no randomness (ids and nonces are arguments), no hash-order
//! dependence. Same inputs, same outputs, byte for byte.

mod paths;
mod recv;
mod rtt;
mod send;
mod stream_ring;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use quiver_wire::frame::{
    self, flags, Frame, FrameError, FrameHeader, FrameType, MoreSackRanges, SackRange,
    FIXED_HEADER_LEN, MAX_ACK_RANGES, MAX_PAYLOAD_LEN, MAX_SACK_RANGES, SACK_RANGE_LEN,
};
use quiver_wire::handshake::{MAX_MESSAGE_LEN, NONCE_LEN};

use crate::handshake::{
    ConnectRequest, HandshakeError, Initiator, JobKey, RejectReason, Responder,
};
use paths::Paths;
pub use paths::{PathState, PathStats, MAX_PATHS};
pub use recv::MAX_POSTED_READERS;
use recv::{Payload, RecvState, Refusal};
use rtt::RttEstimator;
pub use send::LEND_MESSAGE_TOKEN;
use send::{SendState, MESSAGE_HEADER_LEN};

/// Monotonic time in nanoseconds, supplied by the caller on every call that needs time.
pub type Nanos = u64;

/// Bytes of the transport parameters each side sends in the handshake: its receive window
/// (the initial credit), u64 little-endian.
const PARAMS_LEN: usize = 8;

/// Limits and timers of a connection. Every limit is enforced; see each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReliableConfig {
    /// Largest datagram `poll_transmit` produces, header included. Data frames carry up to
    /// `max_datagram_bytes - FIXED_HEADER_LEN - 8 * max_sack_ranges` payload bytes, so every
    /// Data frame of a connection has the same size when data is plentiful. Default 1472
    /// (Ethernet MTU minus IPv4 and UDP headers); at least [`ReliableConfig::MIN_DATAGRAM_BYTES`],
    /// at most 65535.
    pub max_datagram_bytes: usize,
    /// Send buffer: bytes accepted from the application and not yet acknowledged (each
    /// message also takes 8 bytes for its length). Allocated once. Default 8 MiB, at least 64.
    pub send_buffer_bytes: usize,
    /// Receive window: the bytes the receiver buffers (in order but unread, plus out of
    /// order); the credit never exceeds it. Allocated once. Default 8 MiB, at least 64.
    pub recv_window_bytes: usize,
    /// SACK ranges per ack, 0 to [`frame::MAX_SACK_RANGES`]. Default 8.
    pub max_sack_ranges: usize,
    /// RTO before the first RTT sample, and the handshake's first retransmission interval.
    /// Default 200 ms (RFC 6298 says 1 s; we are on a LAN).
    pub initial_rto_ns: Nanos,
    /// Smallest RTO, and the least margin of the RTO over the smoothed RTT (`rtt.rs`).
    /// Default 1 ms; must be > 0.
    pub min_rto_ns: Nanos,
    /// Largest RTO, backoff included. Default 1 s.
    pub max_rto_ns: Nanos,
    /// Consecutive retransmission timeouts without an acknowledgement before
    /// [`Event::PeerUnreachable`]. Default 12, at least 1.
    pub max_retransmits: u32,
    /// Longest delay of a standalone ack. Default 200 µs.
    pub ack_delay_ns: Nanos,
    /// Ping a connection that received nothing for this long. Default 250 ms; > 0.
    pub keepalive_interval_ns: Nanos,
    /// No datagram from the peer for this long -> [`Event::PeerUnreachable`]. Default 1 s;
    /// must exceed `keepalive_interval_ns`.
    pub idle_timeout_ns: Nanos,
    /// The handshake must finish within this time of `connect`/`accept`, otherwise
    /// [`FailReason::HandshakeTimeout`]. Default 5 s; > 0.
    pub handshake_timeout_ns: Nanos,
    /// Data/Close frames sent and not cumulatively acknowledged; bounds the sender's and the
    /// receiver's per-packet tables. Default 4096, 1 to 2^20.
    pub max_in_flight_datagrams: usize,
    /// Paths (links) the connection is striped over, 1 to [`MAX_PATHS`]; both ends must
    /// agree. Path `i` is the same link in both directions; the I/O layer maps it to
    /// addresses. Default 1.
    pub path_count: usize,
    /// Send data in compact Stream frames (16-byte header, `frame::FrameType::Stream`)
    /// whenever no acknowledgement waits to ride along; full Data frames otherwise. Needs
    /// both buffers at most [`ReliableConfig::MAX_COMPACT_BUFFER_BYTES`] (the frame carries
    /// 32-bit offsets). A receiver takes Stream frames either way. Default false.
    pub compact_data_frames: bool,
}

impl Default for ReliableConfig {
    fn default() -> Self {
        Self {
            max_datagram_bytes: 1472,
            send_buffer_bytes: 8 << 20,
            recv_window_bytes: 8 << 20,
            max_sack_ranges: 8,
            initial_rto_ns: 200_000_000,
            min_rto_ns: 1_000_000,
            max_rto_ns: 1_000_000_000,
            max_retransmits: 12,
            ack_delay_ns: 200_000,
            keepalive_interval_ns: 250_000_000,
            idle_timeout_ns: 1_000_000_000,
            handshake_timeout_ns: 5_000_000_000,
            max_in_flight_datagrams: 4096,
            path_count: 1,
            compact_data_frames: false,
        }
    }
}

impl ReliableConfig {
    /// Smallest `max_datagram_bytes`: a Handshake frame with the longest handshake message.
    pub const MIN_DATAGRAM_BYTES: usize = FIXED_HEADER_LEN + MAX_MESSAGE_LEN;
    /// Largest `max_datagram_bytes`.
    pub const MAX_DATAGRAM_BYTES: usize = 65535;
    /// Largest `max_in_flight_datagrams` (SACK offsets are u32).
    pub const MAX_IN_FLIGHT_DATAGRAMS: usize = 1 << 20;
    /// Smallest send buffer and receive window.
    pub const MIN_BUFFER_BYTES: usize = 64;
    /// Largest send buffer and receive window.
    pub const MAX_BUFFER_BYTES: usize = 1 << 40;
    /// Largest send buffer and receive window with `compact_data_frames`.
    pub const MAX_COMPACT_BUFFER_BYTES: usize = 1 << 30;

    /// Checks every limit.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, value: u64, requirement: &'static str| {
            Err(ConfigError::Invalid {
                field,
                value,
                requirement,
            })
        };
        if self.max_sack_ranges > MAX_SACK_RANGES {
            return invalid(
                "max_sack_ranges",
                self.max_sack_ranges as u64,
                "at most frame::MAX_SACK_RANGES (16)",
            );
        }
        if self.max_datagram_bytes < Self::MIN_DATAGRAM_BYTES
            || self.max_datagram_bytes > Self::MAX_DATAGRAM_BYTES
            || self.max_datagram_bytes <= self.data_header_len()
        {
            return invalid(
                "max_datagram_bytes",
                self.max_datagram_bytes as u64,
                "between MIN_DATAGRAM_BYTES (416) and 65535",
            );
        }
        for (field, value) in [
            ("send_buffer_bytes", self.send_buffer_bytes),
            ("recv_window_bytes", self.recv_window_bytes),
        ] {
            if !(Self::MIN_BUFFER_BYTES..=Self::MAX_BUFFER_BYTES).contains(&value) {
                return invalid(field, value as u64, "between 64 bytes and 1 TiB");
            }
        }
        if self.min_rto_ns == 0 {
            return invalid("min_rto_ns", 0, "greater than 0");
        }
        if self.max_rto_ns < self.min_rto_ns {
            return invalid("max_rto_ns", self.max_rto_ns, "at least min_rto_ns");
        }
        if !(self.min_rto_ns..=self.max_rto_ns).contains(&self.initial_rto_ns) {
            return invalid(
                "initial_rto_ns",
                self.initial_rto_ns,
                "between min_rto_ns and max_rto_ns",
            );
        }
        if self.max_retransmits == 0 {
            return invalid("max_retransmits", 0, "at least 1");
        }
        if self.keepalive_interval_ns == 0 {
            return invalid("keepalive_interval_ns", 0, "greater than 0");
        }
        if self.idle_timeout_ns <= self.keepalive_interval_ns {
            return invalid(
                "idle_timeout_ns",
                self.idle_timeout_ns,
                "greater than keepalive_interval_ns",
            );
        }
        if self.handshake_timeout_ns == 0 {
            return invalid("handshake_timeout_ns", 0, "greater than 0");
        }
        if self.compact_data_frames {
            for (field, value) in [
                ("send_buffer_bytes", self.send_buffer_bytes),
                ("recv_window_bytes", self.recv_window_bytes),
            ] {
                if value > Self::MAX_COMPACT_BUFFER_BYTES {
                    return invalid(
                        field,
                        value as u64,
                        "at most 1 GiB with compact_data_frames",
                    );
                }
            }
        }
        if !(1..=MAX_PATHS).contains(&self.path_count) {
            return invalid(
                "path_count",
                self.path_count as u64,
                "between 1 and MAX_PATHS (64)",
            );
        }
        if !(1..=Self::MAX_IN_FLIGHT_DATAGRAMS).contains(&self.max_in_flight_datagrams) {
            return invalid(
                "max_in_flight_datagrams",
                self.max_in_flight_datagrams as u64,
                "between 1 and 2^20",
            );
        }
        Ok(())
    }

    /// Largest payload of a Data frame under this configuration.
    pub fn max_data_payload_bytes(&self) -> usize {
        self.max_datagram_bytes
            .saturating_sub(self.data_header_len())
            .min(MAX_PAYLOAD_LEN)
    }

    /// Largest payload of a Stream frame under this configuration.
    pub fn max_stream_payload_bytes(&self) -> usize {
        self.max_datagram_bytes
            .saturating_sub(frame::STREAM_HEADER_LEN)
            .min(MAX_PAYLOAD_LEN)
    }

    /// Upper bound of [`ReliableConnection::memory_bytes`] for a connection with this
    /// configuration (the simulator's and the fuzzer's memory invariant).
    pub fn memory_bound_bytes(&self) -> usize {
        // VecDeque capacities may double past their length bound; count them twice.
        let per_packet = 2
            * (core::mem::size_of::<send::SentFrame>()
                + core::mem::size_of::<u64>()
                + core::mem::size_of::<Option<(u64, u64)>>()
                + core::mem::size_of::<frame::SackRange>()
                + 2 * core::mem::size_of::<(u64, u64)>()
                + send::LEND_ENTRY_BYTES);
        self.send_buffer_bytes
            + self.recv_window_bytes
            + self.max_in_flight_datagrams.saturating_add(1) * per_packet
            + self.path_count * core::mem::size_of::<paths::Path>()
            + FIXED_MEMORY_BYTES
    }

    fn data_header_len(&self) -> usize {
        FIXED_HEADER_LEN + self.max_sack_ranges * SACK_RANGE_LEN
    }

    /// SACK ranges a standalone Ack carries at most (header and payload): as many as fit the
    /// datagram, up to [`MAX_ACK_RANGES`]; none when `max_sack_ranges` is 0.
    fn ack_range_limit(&self) -> usize {
        if self.max_sack_ranges == 0 {
            return 0;
        }
        let room = self
            .max_datagram_bytes
            .saturating_sub(self.data_header_len())
            / SACK_RANGE_LEN;
        (self.max_sack_ranges + room).min(MAX_ACK_RANGES)
    }
}

/// Memory of a connection that does not depend on the configuration (the Ack scratch
/// buffers included).
const FIXED_MEMORY_BYTES: usize = core::mem::size_of::<ReliableConnection>()
    + core::mem::size_of::<Initiator>()
    + core::mem::size_of::<Responder>()
    + 16 * core::mem::size_of::<Event>()
    + MAX_ACK_RANGES * (2 * core::mem::size_of::<SackRange>() + SACK_RANGE_LEN)
    + 2 * MAX_POSTED_READERS
        * (core::mem::size_of::<(u64, u64)>()
            + core::mem::size_of::<recv::Claimed>()
            + core::mem::size_of::<PostedRead>());

/// A configuration value out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A [`ReliableConfig`] field is out of range.
    #[error("invalid config: {field} = {value}, must be {requirement}")]
    Invalid {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What it must be.
        requirement: &'static str,
    },
    /// A connection id of 0 (it means "new connection" on the wire).
    #[error("connection id 0 is reserved")]
    ZeroConnectionId,
}

/// Why [`ReliableConnection::accept`] refused a datagram. The caller counts and drops it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// The configuration or local id is invalid (local misuse).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Not a frame (corrupt, truncated, foreign version).
    #[error("not a valid frame: {0}")]
    Frame(#[from] FrameError),
    /// A valid frame, but not a Handshake frame to dest id 0 from a non-zero src id.
    #[error("not a connection request: {frame_type} frame to id {dest_id:#x} from {src_id:#x}")]
    NotARequest {
        /// The frame's type.
        frame_type: FrameType,
        /// Its destination id.
        dest_id: u64,
        /// Its source id.
        src_id: u64,
    },
    /// The payload is not a Hello of our job and version.
    #[error("bad hello: {0}")]
    Handshake(HandshakeError),
}

/// Why a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailReason {
    /// The handshake failed: wrong key (authentication), wrong job, version, malformed.
    Handshake(HandshakeError),
    /// The responder refused the connection (or, on the responder, `reject` was called).
    Rejected(RejectReason),
    /// The handshake did not finish within `handshake_timeout_ns`.
    HandshakeTimeout,
    /// The peer says the connection is unknown or closed (a Reset frame).
    PeerReset,
    /// The peer stopped answering ([`Event::PeerUnreachable`] was emitted).
    PeerUnreachable,
    /// The peer broke the protocol (acked packets never sent).
    ProtocolViolation,
}

/// What happened to a connection; pull with [`ReliableConnection::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handshake finished; data flows.
    Established,
    /// No datagram from the peer within `idle_timeout_ns`, or `max_retransmits` timeouts
    /// in a row without progress. The connection is failed ([`State::Failed`]).
    PeerUnreachable,
    /// Both sides closed and every byte was acknowledged. Unread data stays readable.
    Closed,
    /// The connection failed for good.
    Failed(FailReason),
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// The key handshake is running.
    Handshaking,
    /// Data flows both ways.
    Established,
    /// One side asked to close; remaining data is being delivered.
    Closing,
    /// Closed gracefully.
    Closed,
    /// Failed (see [`ReliableConnection::fail_reason`]).
    Failed,
}

/// Why a message cannot be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The previous message is not fully written, or the send buffer lacks the 8 bytes a
    /// message header takes: try again after acks arrive.
    #[error("would block")]
    WouldBlock,
    /// The connection is closing, closed or failed.
    #[error("connection closed for sending")]
    Closed,
    /// Bytes of the previous message are still lent
    /// ([`ReliableConnection::lend_message`]): adopt them first
    /// ([`ReliableConnection::adopt_lent`]) or wait for their acknowledgement.
    #[error("bytes of the previous message are still lent")]
    Lent,
    /// The slice given for the lent bytes is shorter than what was lent.
    #[error("lent slice of {given} bytes, {needed} were lent")]
    LentSliceTooShort {
        /// Bytes the slice must have (from the message's first byte).
        needed: u64,
        /// Its length.
        given: u64,
    },
}

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

/// Counters of a connection. All counts since creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReliableStats {
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Datagrams passed to `handle_datagram`.
    pub datagrams_received: u64,
    /// Data frames sent for the first time.
    pub data_frames_sent: u64,
    /// Payload bytes sent for the first time.
    pub payload_bytes_sent: u64,
    /// Data/Close frames sent again.
    pub retransmits: u64,
    /// Frames declared lost by duplicate acks or SACK (fast retransmit).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub rto_expirations: u64,
    /// Handshake messages sent again.
    pub handshake_retransmits: u64,
    /// Standalone Ack frames sent.
    pub acks_sent: u64,
    /// Ping frames sent (keepalive and credit probes).
    pub pings_sent: u64,
    /// Frames received twice (dropped).
    pub duplicates_dropped: u64,
    /// Datagrams that are not valid frames: bad checksum, truncated, malformed (dropped).
    pub corrupt_dropped: u64,
    /// Frames whose bytes exceed the credit we gave (dropped; the peer broke the rules).
    pub credit_violations: u64,
    /// Frames too far ahead of the cumulative ack, or inconsistent with received data.
    pub out_of_window_dropped: u64,
    /// Valid frames that do not fit the connection's ids or state (dropped).
    pub unexpected_dropped: u64,
    /// Handshakes that failed (wrong key, wrong job, refused, timed out).
    pub handshake_failures: u64,
    /// Smoothed RTT in ns (0 before the first sample).
    pub smoothed_rtt_ns: u64,
    /// RTT variance in ns.
    pub rtt_variance_ns: u64,
    /// Current retransmission timeout in ns, backoff included.
    pub rto_ns: u64,
    /// Bytes in the send buffer (written, not yet acknowledged).
    pub send_buffered_bytes: u64,
    /// Bytes received in order and not yet read.
    pub recv_buffered_bytes: u64,
    /// Times a path went down (its frames moved to the other paths).
    pub paths_down: u64,
    /// Times a path that was down came back.
    pub paths_rejoined: u64,
    /// Payload bytes [`ReliableConnection::handle_datagram_into`] placed straight into the
    /// reader's buffer (not through the receive buffer), in order or ahead.
    pub direct_read_bytes: u64,
    /// Of those, payload bytes a scattering receive had put there before the frame was
    /// checked ([`ReliableConnection::handle_stream_in_place`]): not copied at all.
    pub scattered_bytes: u64,
}

/// The buffers of a connection's posted readers
/// ([`ReliableConnection::post_reader`]), which the caller keeps: the core asks for one by
/// its token each time it places bytes in it or reads bytes into it.
pub trait PostedBuffers {
    /// The buffer posted under `token` (at least the capacity it was posted with), or None
    /// when the caller does not have it now: its bytes then go through the receive buffer.
    fn buffer(&mut self, token: u64) -> Option<&mut [u8]>;
}

/// [`PostedBuffers`] with no buffer at all.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoBuffers;

impl PostedBuffers for NoBuffers {
    fn buffer(&mut self, _token: u64) -> Option<&mut [u8]> {
        None
    }
}

/// A posted reader that finished ([`ReliableConnection::poll_posted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostedRead {
    /// The message of `len` bytes is at the start of the buffer of `token`.
    Complete {
        /// The reader's token.
        token: u64,
        /// The message's length.
        len: u64,
    },
    /// The next message, of `len` bytes, is longer than the buffer of `token`: nothing of
    /// it went there; it stays for the next posted reader, or for `read_message`.
    TooSmall {
        /// The reader's token.
        token: u64,
        /// The message's length.
        len: u64,
    },
}

/// The handshake's part of a connection.
#[derive(Debug)]
enum HandshakeSide {
    Initiator(Box<Initiator>),
    /// `deciding`: the Hello arrived, `accept` or `reject` not yet applied.
    Responder {
        responder: Box<Responder>,
        deciding: bool,
    },
    /// Established; the state machines are dropped.
    Done,
}

/// One reliable connection between two endpoints.
///
/// # Call protocol
///
/// Create with [`ReliableConnection::connect`] (initiator) or, for the first datagram of a
/// stranger (`frame::dest_id(datagram) == Some(0)`), [`ReliableConnection::accept`]
/// (responder; check the request's port and call [`ReliableConnection::reject`] to refuse).
/// Then, in any order:
///
/// - inputs: [`handle_datagram`](Self::handle_datagram) (with the path it arrived on) for
///   every datagram whose dest id is
///   [`local_id`](Self::local_id) (and, for duplicates of the Hello that created a responder,
///   datagrams with dest id 0 from the same peer address and src id);
///   [`handle_timeout`](Self::handle_timeout) once `now >= poll_timeout()`; the application's
///   [`start_message`](Self::start_message) / [`write_message`](Self::write_message),
///   [`read_message`](Self::read_message) and [`close`](Self::close);
/// - outputs, after every input: [`poll_transmit`](Self::poll_transmit) until `None`
///   (send each datagram on the path its [`Transmit::path`] names),
///   [`poll_event`](Self::poll_event) until `None`, and re-read
///   [`poll_timeout`](Self::poll_timeout).
///
/// Paths: `config.path_count` of them, numbered from 0; path `i` must be the same link in
/// both directions (the I/O layer's mapping of index to addresses). With one path this is a
/// plain single-link connection.
///
/// Datagrams for unknown ids are answered with [`reset_for`]. The connection never reads a
/// clock: `now` is monotonic nanoseconds from the caller, never decreasing.
#[derive(Debug)]
pub struct ReliableConnection {
    config: ReliableConfig,
    state: State,
    fail_reason: Option<FailReason>,
    local_id: u64,
    peer_id: Option<u64>,
    request: ConnectRequest,

    handshake: HandshakeSide,
    is_initiator: bool,
    /// The last handshake message we produced, kept for retransmission.
    handshake_out: [u8; MAX_MESSAGE_LEN],
    handshake_out_len: usize,
    handshake_send_pending: bool,
    /// The last handshake message we took from the peer, to recognise its duplicates.
    handshake_in: [u8; MAX_MESSAGE_LEN],
    handshake_in_len: usize,
    handshake_retransmit_at: Option<Nanos>,
    handshake_interval_ns: Nanos,
    handshake_deadline: Nanos,
    /// Path of the next handshake message: the initiator rotates over the paths with each
    /// retransmission; the responder answers on the path the peer's message arrived on.
    handshake_path: usize,

    send: SendState,
    recv: RecvState,
    /// RTT over all paths: the credit probe's interval and the stats.
    rtt: RttEstimator,
    /// Retransmission timeouts (any path) in a row without an acknowledgement.
    consecutive_rtos: u32,
    probe_deadline: Option<Nanos>,
    probe_backoff_shift: u32,

    last_received_at: Nanos,
    last_ping_at: Nanos,

    events: VecDeque<Event>,
    stats: ReliableStats,
    /// Scratch (allocated once, [`MAX_ACK_RANGES`] each): the SACK list of a received ack,
    /// the ranges of an outgoing Ack beyond its header, and their encoding (its payload).
    ack_ranges_in: Vec<SackRange>,
    ack_ranges_out: Vec<SackRange>,
    ack_payload: Vec<u8>,
    /// The ack fields of the last frame, not yet processed (its SACK list is in
    /// `ack_ranges_in`): the frame brought a whole message, and the answer goes first
    /// (module docs).
    deferred_ack: Option<DeferredAck>,
}

/// The ack fields of a received frame whose processing waits for the answer's first frame.
#[derive(Debug, Clone, Copy)]
struct DeferredAck {
    /// When the frame arrived (the ack counts at that time).
    arrived_at: Nanos,
    cumulative_ack: u64,
    truncated: bool,
    credit: u64,
    /// Packet numbers sent when it arrived (it cannot acknowledge later ones).
    sent_end: u64,
    /// The answer's first frame went out: the next `poll_transmit` processes the ack.
    answered: bool,
}

impl ReliableConnection {
    /// Initiator: queues a handshake Hello (carried in a Handshake frame) to the peer.
    /// `local_id` is this side's connection id (non-zero, chosen randomly by the caller); the
    /// peer's id is learned from its reply. `nonce` must be fresh random bytes.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid configuration or a zero `local_id`.
    pub fn connect(
        config: ReliableConfig,
        key: JobKey,
        request: ConnectRequest,
        local_id: u64,
        nonce: [u8; 16],
        now: Nanos,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if local_id == 0 {
            return Err(ConfigError::ZeroConnectionId);
        }
        let mut initiator = Box::new(Initiator::new(key, request, expand_nonce(nonce, local_id)));
        let mut connection = Self::new(config, request, local_id, None, HandshakeSide::Done, now);
        connection.handshake_out_len = initiator
            .poll_transmit(&mut connection.handshake_out)
            .ok()
            .flatten()
            .unwrap_or(0);
        connection.handshake_send_pending = connection.handshake_out_len > 0;
        connection.handshake = HandshakeSide::Initiator(initiator);
        Ok(connection)
    }

    /// Responder: built from the first datagram of a stranger (a Handshake frame with dest
    /// id 0 carrying a Hello) that arrived on `path`. Returns the connection (its Challenge
    /// goes out on that path with the first `poll_transmit` unless [`reject`](Self::reject)
    /// is called before) and the request so the caller can check the destination port.
    ///
    /// # Errors
    /// [`AcceptError`]: the datagram is not a valid Hello of our job (the caller counts and
    /// drops it), or the configuration is invalid (a `path` beyond `path_count` included).
    #[allow(clippy::too_many_arguments)] // Each is one input of the responder; none is optional.
    pub fn accept(
        config: ReliableConfig,
        key: JobKey,
        job_id: u64,
        datagram: &[u8],
        path: usize,
        local_id: u64,
        nonce: [u8; 16],
        now: Nanos,
    ) -> Result<(Self, ConnectRequest), AcceptError> {
        config.validate()?;
        if path >= config.path_count {
            return Err(ConfigError::Invalid {
                field: "path",
                value: path as u64,
                requirement: "below path_count",
            }
            .into());
        }
        if local_id == 0 {
            return Err(ConfigError::ZeroConnectionId.into());
        }
        let frame = Frame::parse(datagram)?;
        let header = frame.header();
        if header.frame_type != FrameType::Handshake || header.dest_id != 0 || header.src_id == 0 {
            return Err(AcceptError::NotARequest {
                frame_type: header.frame_type,
                dest_id: header.dest_id,
                src_id: header.src_id,
            });
        }
        let mut responder = Box::new(Responder::new(key, job_id, expand_nonce(nonce, local_id)));
        let request = responder
            .handle_hello(frame.payload())
            .map_err(AcceptError::Handshake)?;
        let mut connection = Self::new(
            config,
            request,
            local_id,
            Some(header.src_id),
            HandshakeSide::Responder {
                responder,
                deciding: true,
            },
            now,
        );
        connection.remember_incoming(frame.payload());
        connection.last_received_at = now;
        connection.stats.datagrams_received = 1;
        connection.handshake_path = path;
        connection.send.paths.on_arrival(path);
        Ok((connection, request))
    }

    /// Refuses a connection made by [`accept`](Self::accept): a refusal goes out with the
    /// next `poll_transmit`, and the connection fails with [`FailReason::Rejected`]. Does
    /// nothing once the Challenge was sent.
    pub fn reject(&mut self, reason: RejectReason) {
        let HandshakeSide::Responder {
            responder,
            deciding,
        } = &mut self.handshake
        else {
            return;
        };
        if !*deciding {
            return;
        }
        *deciding = false;
        if responder.reject(reason).is_ok() {
            self.handshake_out_len = responder
                .poll_transmit(&mut self.handshake_out)
                .ok()
                .flatten()
                .unwrap_or(0);
            self.handshake_send_pending = self.handshake_out_len > 0;
        }
        self.fail(FailReason::Rejected(reason));
    }

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

    fn handle_datagram_with(
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
        let frame = match Frame::parse_for(datagram, self.local_id) {
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
        let parsed = frame::parse_stream_split(header, payload, self.local_id).ok()?;
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
    fn handle_frame(
        &mut self,
        now: Nanos,
        path: usize,
        header: &FrameHeader,
        payload: Payload<'_>,
        reader: &mut [u8],
        buffers: &mut dyn PostedBuffers,
    ) -> usize {
        if !self.frame_is_ours(header) {
            self.stats.unexpected_dropped += 1;
            return 0;
        }
        self.send.paths.on_arrival(path);
        let bytes = payload.bytes();
        let mut direct = 0;
        match header.frame_type {
            FrameType::Handshake => {
                if !self.is_initiator {
                    self.handshake_path = path;
                }
                self.handle_handshake_frame(now, header, bytes);
            }
            FrameType::Reset => self.handle_reset(),
            FrameType::Data
            | FrameType::Ack
            | FrameType::Ping
            | FrameType::Close
            | FrameType::Stream => {
                direct = self.handle_connection_frame(now, path, header, payload, reader, buffers);
            }
        }
        self.stats.direct_read_bytes = self.recv.placed_bytes();
        if self.deferred_ack.is_none() {
            // (With an ack deferred, its processing refreshes them.)
            self.refresh_timers(now);
        }
        direct
    }

    /// The reader stops handing `reader` to [`handle_datagram_into`](Self::handle_datagram_into)
    /// before its message is complete (an error or a timeout ends its receive): `reader` is
    /// its buffer for the rest of the message as the last call left it (starting at the next
    /// unread byte). Bytes placed ahead in it go back into the receive buffer, so that the
    /// next read may use any buffer. Nothing to do after a message completed.
    pub fn detach_reader(&mut self, reader: &[u8]) {
        self.recv.detach_reader(reader);
    }

    /// Posts a reader: a buffer of `capacity` bytes, under `token`, which the next message
    /// no earlier posted reader took goes to. Posted readers take messages in posting order
    /// and before `read_message` gets any: while any is held, `peek_message` and
    /// `read_message` see no new message (a message being read with `read_message` when
    /// the first reader is posted is read to its end that way). The caller keeps the
    /// buffers and hands them to [`handle_datagram_posted`](Self::handle_datagram_posted)
    /// and [`read_posted`](Self::read_posted); each reader finishes
    /// ([`poll_posted`](Self::poll_posted)) with its whole message, or at once with
    /// [`PostedRead::TooSmall`] when its message is longer than `capacity`. False (nothing
    /// posted) when [`MAX_POSTED_READERS`] are held.
    pub fn post_reader(&mut self, token: u64, capacity: usize) -> bool {
        self.recv.post_reader(token, capacity as u64)
    }

    /// Moves the posted readers on without a datagram: they claim the messages whose
    /// length prefixes arrived, and the first reads what is in order (copying what did not
    /// go straight to its buffer out of the receive buffer). Call after posting, and after a
    /// `read_message` that finished a message while readers were posted. Freed credit may
    /// bring a window update: call `poll_transmit` after.
    pub fn read_posted(&mut self, buffers: &mut dyn PostedBuffers) {
        self.recv.read_posted(buffers);
    }

    /// The next posted reader that finished, in the order they finished (messages are
    /// complete in posting order; a [`PostedRead::TooSmall`] comes as soon as its message's
    /// length is known).
    pub fn poll_posted(&mut self) -> Option<PostedRead> {
        self.recv.poll_posted()
    }

    /// Posted readers held, not yet finished.
    pub fn posted_readers(&self) -> usize {
        self.recv.posted_readers()
    }

    /// Whether a message is being read with `read_message` (begun, not complete): posted
    /// readers wait for its end.
    pub fn reading_message(&self) -> bool {
        self.recv.reading_message()
    }

    /// Takes back the posted readers whose message has not begun to be read, in posting
    /// order (their tokens); bytes placed in their buffers go back into the receive buffer,
    /// so that the messages stay whole for other reads. A reader whose message is being
    /// read stays posted until it finishes. Readers whose buffer `buffers` lacks (and every
    /// later one) stay posted too.
    pub fn withdraw_readers(&mut self, buffers: &mut dyn PostedBuffers) -> Vec<u64> {
        self.recv.withdraw_readers(buffers)
    }

    /// Next datagram to send, if any: writes the header into `header` (at least
    /// [`frame::MAX_HEADER_LEN`] bytes; a shorter buffer yields `None`) and returns the
    /// header length, the payload slice (borrowed from the send buffer; the datagram is
    /// header followed by payload, sent with a gathered write) and the path to send it on.
    /// Call until `None` after every `handle_*`, write, read or close.
    ///
    /// With an ack deferred (module docs), a frame of new data that can go at once is
    /// returned before the ack is processed; the ack is processed by the next call (or
    /// input) whatever it brings, and always before `None`.
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
        }
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
        self.refresh_timers(now);
        None
    }

    /// Data frames received since this side last sent an acknowledgement. An engine that
    /// holds acks back (to let an answer carry them) should not do so when this is large:
    /// the peer's windows wait for them.
    pub fn unacknowledged_frames(&self) -> u32 {
        self.recv.unacked_frames()
    }

    /// Number of paths (`config.path_count`).
    pub fn path_count(&self) -> usize {
        self.send.paths.len()
    }

    /// Counters and gauges of `path` (None beyond `path_count`), the gauges read now.
    pub fn path_stats(&self, path: usize) -> Option<PathStats> {
        self.send.paths.stats(path)
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

    /// Earliest time [`handle_timeout`](Self::handle_timeout) must be called (retransmit,
    /// delayed ack, keepalive, idle/handshake timeout). `None`: nothing scheduled.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if let Some(ack) = &self.deferred_ack {
            // Processed by `handle_timeout` if nothing else comes first.
            return Some(ack.arrived_at);
        }
        match self.state {
            State::Handshaking => {
                let deadline = Some(self.handshake_deadline);
                earliest(deadline, self.handshake_retransmit_at)
            }
            State::Established | State::Closing => {
                let mut deadline = earliest(self.send.paths.next_deadline(), self.probe_deadline);
                deadline = earliest(deadline, self.recv.ack_deadline());
                deadline = earliest(deadline, Some(self.keepalive_at()));
                earliest(deadline, Some(self.idle_deadline()))
            }
            State::Closed | State::Failed => None,
        }
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.apply_deferred_ack();
        match self.state {
            State::Handshaking => {
                if now >= self.handshake_deadline {
                    self.fail(FailReason::HandshakeTimeout);
                    return;
                }
                if self.handshake_retransmit_at.is_some_and(|at| at <= now) {
                    self.handshake_retransmit_at = None;
                    self.handshake_send_pending = self.handshake_out_len > 0;
                    self.stats.handshake_retransmits += 1;
                    if self.is_initiator {
                        // A dead first link must not keep the connection from opening.
                        self.handshake_path = (self.handshake_path + 1) % self.send.paths.len();
                    }
                    self.handshake_interval_ns = self
                        .handshake_interval_ns
                        .saturating_mul(2)
                        .min(self.config.max_rto_ns);
                }
            }
            State::Established | State::Closing => self.handle_connection_timers(now),
            State::Closed | State::Failed => {}
        }
    }

    /// Events in order: [`Event::Established`], then at most one of
    /// [`Event::PeerUnreachable`], [`Event::Closed`], [`Event::Failed`].
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Where the connection is.
    pub fn state(&self) -> State {
        self.state
    }

    /// Why the connection failed, once [`State::Failed`].
    pub fn fail_reason(&self) -> Option<FailReason> {
        self.fail_reason
    }

    // ---- sending: messages of any length, bounded memory ----

    /// Starts the next message of `len` bytes (0 allowed).
    ///
    /// Messages may be started before the handshake completes (queued, sent once
    /// established).
    ///
    /// # Errors
    /// [`SendError::WouldBlock`] if the previous message has not been fully written yet or
    /// the send buffer lacks the 8 bytes a message header takes; [`SendError::Closed`] once
    /// the connection is closing, closed or failed; [`SendError::Lent`] while bytes of the
    /// previous message are lent.
    pub fn start_message(&mut self, len: u64) -> Result<(), SendError> {
        if !self.open_for_sending() {
            return Err(SendError::Closed);
        }
        if self.send.lent_bytes() > 0 {
            return Err(SendError::Lent);
        }
        if self.send.message_open() || self.send.capacity() < MESSAGE_HEADER_LEN as usize {
            return Err(SendError::WouldBlock);
        }
        self.send.start_message(len);
        Ok(())
    }

    /// Copies as much of the current message's next bytes as the send buffer has room for;
    /// returns the count (0 when full: wait for acks, i.e. for `handle_datagram`; also 0 when
    /// no message is open or the connection failed).
    pub fn write_message(&mut self, data: &[u8]) -> usize {
        if matches!(self.state, State::Closed | State::Failed) {
            return 0;
        }
        self.send.write(data)
    }

    /// Appends up to `len` of the current message's next bytes without copying them: the
    /// caller lends them, and keeps the message unchanged until [`lent_bytes`](Self::lent_bytes)
    /// is 0. Their room in the send buffer is reserved as for written bytes; frames of them
    /// go out from [`poll_transmit_lent`](Self::poll_transmit_lent), which takes the payload
    /// from the caller's message, retransmissions included. The lend ends when every lent
    /// byte is acknowledged (no copy at all) or [adopted](Self::adopt_lent) (copied into the
    /// send buffer, after which the connection owns them like written bytes).
    ///
    /// Returns the count lent (bounded by the message and the send buffer's room, as for
    /// [`write_message`](Self::write_message)); 0 when no message is open, the connection
    /// is closed or failed, or bytes were written after lent ones (one contiguous lend per
    /// message; later bytes may still be written). A message may mix written and lent bytes.
    pub fn lend_message(&mut self, len: usize) -> usize {
        self.lend_message_as(LEND_MESSAGE_TOKEN, len)
    }

    /// Lends up to `len` of the current message's next bytes under `token` (the caller's
    /// name for the message, e.g. an index into its table of lent buffers): as
    /// [`lend_message`](Self::lend_message), but other messages may be started and lent
    /// while this one's bytes are lent, and the caller never adopts them: it keeps the
    /// message unchanged until its token comes back from
    /// [`poll_released`](Self::poll_released) (every byte acknowledged, or the connection
    /// failed), and passes it to [`poll_transmit_lending`](Self::poll_transmit_lending) and
    /// [`payload_at_lending`](Self::payload_at_lending) meanwhile. A message larger than
    /// the send buffer is lent in parts as acknowledgements free room (the same token each
    /// time); its token is released once, after its last part.
    ///
    /// Returns the count lent; 0 as for [`lend_message`](Self::lend_message), and when the
    /// message's lend has another token, or when the connection holds
    /// `max_in_flight_datagrams` lends and released tokens not yet polled together.
    /// `lend_message` is `lend_message_as(LEND_MESSAGE_TOKEN, ..)`: that token is the one
    /// [`start_message`](Self::start_message) waits for, and it is never released.
    pub fn lend_message_as(&mut self, token: u64, len: usize) -> usize {
        if matches!(self.state, State::Closed | State::Failed) {
            return 0;
        }
        // Invariant: the count is at most `len`.
        self.send.lend(token, len as u64) as usize
    }

    /// The token of a message lent with [`lend_message_as`](Self::lend_message_as) whose
    /// lend ended, oldest first: every byte of it was acknowledged (or the connection
    /// failed, which releases them all). The connection never reads that message again.
    pub fn poll_released(&mut self) -> Option<u64> {
        self.send.poll_released()
    }

    /// Messages lent with [`lend_message_as`](Self::lend_message_as) whose tokens are not
    /// yet released (released tokens waiting in [`poll_released`](Self::poll_released) are
    /// not counted).
    pub fn lent_messages(&self) -> usize {
        self.send.lent_messages()
    }

    /// Bytes lent by [`lend_message`](Self::lend_message) neither acknowledged nor adopted
    /// (messages lent under other tokens not counted): while not 0 the lender keeps its message
    /// and passes it to [`poll_transmit_lent`](Self::poll_transmit_lent). 0 once the
    /// connection failed (nothing is sent any more).
    pub fn lent_bytes(&self) -> u64 {
        if self.state == State::Failed {
            return 0;
        }
        self.send.lent_bytes()
    }

    /// Copies up to `max_bytes` of the lent bytes not yet acknowledged into the send
    /// buffer, the highest first (the lowest are the likeliest to be acknowledged soon), from
    /// `message` (the whole message, as for [`poll_transmit_lent`](Self::poll_transmit_lent));
    /// returns the count. Once [`lent_bytes`](Self::lent_bytes) is 0 the caller may reuse
    /// its message: retransmissions read the send buffer.
    ///
    /// # Errors
    /// [`SendError::LentSliceTooShort`] if `message` is shorter than what was lent (nothing
    /// is copied).
    pub fn adopt_lent(&mut self, message: &[u8], max_bytes: usize) -> Result<usize, SendError> {
        let needed = self.send.lent_slice_len();
        if (message.len() as u64) < needed {
            return Err(SendError::LentSliceTooShort {
                needed,
                given: message.len() as u64,
            });
        }
        // Invariant: the count is at most `max_bytes`.
        Ok(self.send.adopt(message, max_bytes as u64) as usize)
    }

    /// Bytes the send buffer can take now (a new message needs 8 of them for its header).
    pub fn send_capacity(&self) -> usize {
        if matches!(self.state, State::Closed | State::Failed) {
            return 0;
        }
        self.send.capacity()
    }

    /// Whether data frames may still be waiting to go: bytes written or lent and not yet
    /// sent, or frames queued for retransmission. False means the data frames
    /// `poll_transmit` returned so far were all there was: an engine may send the one it
    /// holds at once instead of gathering it with more (only control frames can follow).
    pub fn data_waiting(&self) -> bool {
        self.send.data_waiting()
    }

    /// True when every byte written has been acknowledged by the peer (and no ack waits to
    /// be processed: module docs).
    pub fn all_acked(&self) -> bool {
        self.deferred_ack.is_none() && self.send.all_acked()
    }

    // ---- receiving: in order, message by message, with bounded memory ----

    /// Total length of the next in-order message once its first bytes (or, for length 0,
    /// its header) have arrived, or of the message being read; `None` otherwise. Does not
    /// consume.
    pub fn peek_message_len(&self) -> Option<u64> {
        self.recv.peek_message_len()
    }

    /// Whether the rest of the message `peek_message_len` describes has arrived, so that
    /// `read_message` with a large enough buffer completes it now. A message longer than
    /// the receive window minus 8 bytes never is: read it as it arrives.
    pub fn message_ready(&self) -> bool {
        self.recv.message_ready()
    }

    /// [`peek_message_len`](Self::peek_message_len) and
    /// [`message_ready`](Self::message_ready) together, with one look at the length
    /// prefix: the length of the message being read (or the next one) and whether the rest
    /// of it has arrived. None: no message has begun to arrive.
    pub fn peek_message(&self) -> Option<(u64, bool)> {
        self.recv.peek_message()
    }

    /// Copies the next in-order bytes of the current message into `out`; returns (bytes
    /// copied, message complete). Frees receive credit (a window update is sent with the
    /// next `poll_transmit` once a quarter of the window was freed). A 0-length message
    /// completes with (0, true); nothing available gives (0, false). After
    /// [`handle_datagram_into`](Self::handle_datagram_into) placed bytes ahead in a buffer,
    /// `out` is that buffer (starting at the next unread byte): those bytes are not copied
    /// again.
    pub fn read_message(&mut self, out: &mut [u8]) -> (usize, bool) {
        self.recv.read_message(out)
    }

    /// Graceful close: data already written is delivered and acknowledged, then Close frames
    /// are exchanged; [`Event::Closed`] follows. A message being written must still be
    /// completed with `write_message`. Closing during the handshake closes right after it.
    pub fn close(&mut self, now: Nanos) {
        self.apply_deferred_ack();
        match self.state {
            State::Handshaking => self.send.request_close(),
            State::Established => {
                self.send.request_close();
                self.state = State::Closing;
                self.refresh_timers(now);
            }
            State::Closing | State::Closed | State::Failed => {}
        }
    }

    /// True once this side's Close frame has been acknowledged by the peer (after
    /// [`close`](Self::close)): the peer then knows everything this side acknowledged,
    /// since the Close carried the acks.
    pub fn close_acknowledged(&self) -> bool {
        self.send.close_acked()
    }

    /// This side's connection id.
    pub fn local_id(&self) -> u64 {
        self.local_id
    }

    /// The peer's connection id, once known.
    pub fn peer_id(&self) -> Option<u64> {
        self.peer_id
    }

    /// Who connects to whom.
    pub fn request(&self) -> ConnectRequest {
        self.request
    }

    /// Counters, with the RTT, RTO and buffer gauges brought up to date.
    pub fn stats(&self) -> &ReliableStats {
        &self.stats
    }

    /// Bytes of memory held for this connection (send buffer + receive buffer + tracking).
    /// Never exceeds [`ReliableConfig::memory_bound_bytes`].
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>()
            + match &self.handshake {
                HandshakeSide::Initiator(_) => core::mem::size_of::<Initiator>(),
                HandshakeSide::Responder { .. } => core::mem::size_of::<Responder>(),
                HandshakeSide::Done => 0,
            }
            + self.send.memory_bytes()
            + self.recv.memory_bytes()
            + self.events.capacity() * core::mem::size_of::<Event>()
            + (self.ack_ranges_in.capacity() + self.ack_ranges_out.capacity())
                * core::mem::size_of::<SackRange>()
            + self.ack_payload.capacity()
    }

    // ---- construction and handshake ----

    fn new(
        config: ReliableConfig,
        request: ConnectRequest,
        local_id: u64,
        peer_id: Option<u64>,
        handshake: HandshakeSide,
        now: Nanos,
    ) -> Self {
        let paths = Paths::new(
            config.path_count,
            config.max_data_payload_bytes() as u64 + config.data_header_len() as u64,
            config.initial_rto_ns,
            config.min_rto_ns,
            config.max_rto_ns,
        );
        let send = SendState::new(
            config.send_buffer_bytes,
            config.max_in_flight_datagrams,
            paths,
            config.data_header_len() as u64,
        );
        let recv = RecvState::new(config.recv_window_bytes, config.max_in_flight_datagrams);
        let rtt = RttEstimator::new(config.initial_rto_ns, config.min_rto_ns, config.max_rto_ns);
        Self {
            state: State::Handshaking,
            fail_reason: None,
            local_id,
            peer_id,
            request,
            // `connect` installs its Initiator after construction.
            is_initiator: !matches!(handshake, HandshakeSide::Responder { .. }),
            handshake,
            handshake_out: [0; MAX_MESSAGE_LEN],
            handshake_out_len: 0,
            handshake_send_pending: false,
            handshake_in: [0; MAX_MESSAGE_LEN],
            handshake_in_len: 0,
            handshake_retransmit_at: None,
            handshake_interval_ns: config.initial_rto_ns,
            handshake_deadline: now.saturating_add(config.handshake_timeout_ns),
            handshake_path: 0,
            send,
            recv,
            rtt,
            consecutive_rtos: 0,
            probe_deadline: None,
            probe_backoff_shift: 0,
            last_received_at: now,
            last_ping_at: now,
            events: VecDeque::with_capacity(4),
            stats: ReliableStats {
                rto_ns: config.initial_rto_ns,
                ..ReliableStats::default()
            },
            ack_ranges_in: Vec::with_capacity(MAX_ACK_RANGES),
            ack_ranges_out: Vec::with_capacity(MAX_ACK_RANGES),
            ack_payload: vec![0; MAX_ACK_RANGES * SACK_RANGE_LEN],
            deferred_ack: None,
            config,
        }
    }

    /// Responder: accepts now unless the caller rejected since `accept`.
    fn apply_pending_accept(&mut self) {
        let HandshakeSide::Responder {
            responder,
            deciding,
        } = &mut self.handshake
        else {
            return;
        };
        if !*deciding {
            return;
        }
        *deciding = false;
        let params = (self.config.recv_window_bytes as u64).to_le_bytes();
        if responder.accept(&params).is_ok() {
            self.handshake_out_len = responder
                .poll_transmit(&mut self.handshake_out)
                .ok()
                .flatten()
                .unwrap_or(0);
            self.handshake_send_pending = self.handshake_out_len > 0;
        }
    }

    fn transmit_handshake<'a>(&'a mut self, now: Nanos, header: &mut [u8]) -> Option<Transmit<'a>> {
        self.handshake_send_pending = false;
        if self.state == State::Handshaking {
            self.handshake_retransmit_at = Some(now.saturating_add(self.handshake_interval_ns));
        }
        let frame_header = FrameHeader::new(
            FrameType::Handshake,
            self.peer_id.unwrap_or(0),
            self.local_id,
        );
        let payload = &self.handshake_out[..self.handshake_out_len];
        let header_len = frame_header.emit(header, payload).ok()?;
        self.stats.datagrams_sent += 1;
        self.send.paths.count_sent(self.handshake_path);
        Some(Transmit {
            header_len,
            payload,
            stream_offset: None,
            path: self.handshake_path,
        })
    }

    fn handle_handshake_frame(&mut self, now: Nanos, header: &FrameHeader, payload: &[u8]) {
        self.last_received_at = now;
        if self.handshake_in_len > 0 && payload == self.incoming_handshake() {
            // The peer repeats itself because our answer was lost. A responder repeats its
            // Challenge (for a Hello) or Verdict (for a Proof); an initiator repeats its Proof
            // (for a Challenge) only while it waits for the Verdict, so repeats never loop.
            self.stats.duplicates_dropped += 1;
            if !self.is_initiator || self.state == State::Handshaking {
                self.handshake_send_pending = self.handshake_out_len > 0;
            }
            return;
        }
        let awaiting_challenge = self.handshake_in_len == 0;
        let params = (self.config.recv_window_bytes as u64).to_le_bytes();
        let step = match &mut self.handshake {
            HandshakeSide::Initiator(initiator)
                if !initiator.is_established() && !initiator.is_failed() =>
            {
                initiator_step(
                    initiator,
                    awaiting_challenge,
                    payload,
                    &params,
                    &mut self.handshake_out,
                )
            }
            HandshakeSide::Responder {
                responder,
                deciding: false,
            } if !responder.is_established() && !responder.is_failed() => {
                responder_step(responder, payload, &mut self.handshake_out)
            }
            _ => {
                self.stats.unexpected_dropped += 1;
                return;
            }
        };
        if step.out_len > 0 {
            self.handshake_out_len = step.out_len;
            self.handshake_send_pending = true;
        }
        match step.result {
            Ok(credit) => {
                self.remember_incoming(payload);
                self.send.set_initial_credit(credit);
                if self.is_initiator && awaiting_challenge {
                    self.peer_id = Some(header.src_id);
                    // A new message: restart the retransmission interval.
                    self.handshake_interval_ns = self.config.initial_rto_ns;
                }
                if step.established {
                    self.establish(now);
                }
            }
            Err(error) => {
                let reason = match error {
                    HandshakeError::NoSuchEndpoint { .. } => {
                        FailReason::Rejected(RejectReason::NoSuchEndpoint)
                    }
                    HandshakeError::Busy { .. } => FailReason::Rejected(RejectReason::Busy),
                    other => FailReason::Handshake(other),
                };
                self.fail(reason);
            }
        }
    }

    fn establish(&mut self, now: Nanos) {
        // The state machines are done; a responder keeps its last message (the Verdict) in
        // `handshake_out` to repeat it if the Proof comes again.
        self.handshake = HandshakeSide::Done;
        self.handshake_retransmit_at = None;
        self.state = if self.send.close_requested() {
            State::Closing
        } else {
            State::Established
        };
        self.last_received_at = now;
        self.last_ping_at = now;
        self.events.push_back(Event::Established);
    }

    fn remember_incoming(&mut self, payload: &[u8]) {
        let len = payload.len().min(MAX_MESSAGE_LEN);
        self.handshake_in[..len].copy_from_slice(&payload[..len]);
        self.handshake_in_len = len;
    }

    fn incoming_handshake(&self) -> &[u8] {
        &self.handshake_in[..self.handshake_in_len]
    }

    // ---- established connection ----

    /// Whether a valid frame belongs to this connection.
    fn frame_is_ours(&self, header: &FrameHeader) -> bool {
        let to_us = header.dest_id == self.local_id
            // A duplicate Hello (dest id 0) reaches the responder it created.
            || (header.dest_id == 0
                && header.frame_type == FrameType::Handshake
                && !self.is_initiator);
        let from_peer = match self.peer_id {
            // A Stream frame names only its receiver.
            Some(_) if header.frame_type == FrameType::Stream => true,
            Some(peer_id) => header.src_id == peer_id,
            None => header.src_id != 0,
        };
        to_us && from_peer
    }

    fn handle_reset(&mut self) {
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
    fn handle_connection_frame(
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
        self.last_received_at = now;
        // The ack fields of a Data frame may wait for the answer (module docs): decided once
        // its payload is taken.
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
                    if self.state == State::Established
                        && !self.send.close_requested()
                        && self.recv.message_ready()
                    {
                        self.deferred_ack = Some(ack);
                    } else {
                        self.apply_ack(ack);
                    }
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

    /// Processes the ack fields of a frame (its SACK list in `ack_ranges_in`).
    fn apply_ack(&mut self, ack: DeferredAck) {
        let outcome = self.send.on_ack(
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

    /// Processes the deferred ack, if any (module docs), at the time it arrived, and
    /// refreshes the timers it moves.
    fn apply_deferred_ack(&mut self) {
        if let Some(ack) = self.deferred_ack.take() {
            self.apply_ack(ack);
            self.refresh_timers(ack.arrived_at);
        }
    }

    /// The next Data (or compact Stream) frame to send, if any can go now, and the lender's
    /// message its payload comes from (empty when it is not lent): none when the frame
    /// would carry lent bytes and `lender` does not have their message.
    fn next_data_frame<'a, F>(
        &mut self,
        now: Nanos,
        lender: &mut F,
    ) -> Option<(send::FrameToSend, &'a [u8])>
    where
        F: FnMut(u64) -> Option<&'a [u8]>,
    {
        let covered = |lender: &mut F, (token, needed): (u64, u64)| {
            lender(token).filter(|message| message.len() as u64 >= needed)
        };
        // Checked before the frame is cut (cutting cannot be undone).
        let checked = match self.send.next_lend_needed() {
            Some(lend) => Some((lend.0, covered(lender, lend)?)),
            None => None,
        };
        let max_payload = self.config.max_data_payload_bytes();
        // Compact frames carry no acknowledgement: only when none waits to ride along.
        let compact_payload = (self.config.compact_data_frames && !self.recv.ack_due(now))
            .then(|| self.config.max_stream_payload_bytes());
        let to_send = self.send.next_frame(now, max_payload, compact_payload)?;
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

    /// A Data or Close frame; returns the bytes that went to `reader`.
    fn take_data(
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
                    Refusal::Duplicate => self.stats.duplicates_dropped += 1,
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
    fn take_stream(
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
                    Refusal::Duplicate => self.stats.duplicates_dropped += 1,
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

    fn check_closed(&mut self) {
        if self.state == State::Closing && self.send.close_acked() && self.recv.peer_closed() {
            self.state = State::Closed;
            self.probe_deadline = None;
            self.events.push_back(Event::Closed);
        }
    }

    /// A Data or Close frame (or a compact Stream frame); its payload from the send buffer
    /// or, for lent bytes, from `lent` (checked by the caller to cover them).
    fn transmit_frame<'a>(
        &'a mut self,
        header: &mut [u8],
        to_send: send::FrameToSend,
        lent: &'a [u8],
    ) -> Transmit<'a> {
        let sent = to_send.frame;
        let path = to_send.path;
        if to_send.retransmission {
            self.stats.retransmits += 1;
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
        let header_len = frame_header.emit(header, payload).unwrap_or(0);
        debug_assert!(header_len > 0, "emitting our own data frame failed");
        Transmit {
            header_len,
            payload,
            stream_offset: (!sent.is_close).then_some(sent.payload_offset),
            path,
        }
    }

    /// A compact Stream frame (raw stream bytes, no ack fields).
    fn transmit_stream<'a>(
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
        let header_len = frame_header.emit(header, payload).unwrap_or(0);
        debug_assert!(header_len > 0, "emitting our own stream frame failed");
        Transmit {
            header_len,
            payload,
            stream_offset: Some(sent.payload_offset),
            path: to_send.path,
        }
    }

    /// An Ack or Ping on `path`; `packet_number` carries a ping's token (0 otherwise).
    fn transmit_control<'a>(
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
        let header_len = frame_header.emit(header, payload).ok()?;
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
    fn fill_ack(&mut self, frame_header: &mut FrameHeader, total_limit: usize) {
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

    fn handle_connection_timers(&mut self, now: Nanos) {
        if now >= self.idle_deadline() {
            self.unreachable();
            return;
        }
        let due = self.send.due_path_rtos(now);
        for path in (0..self.send.paths.len()).filter(|path| due & (1 << path) != 0) {
            self.stats.rto_expirations += 1;
            self.consecutive_rtos += 1;
            let (_, failed) = self.send.on_path_rto(now, path);
            // One path: max_retransmits timeouts in a row. Several: each path times out on
            // its own (with its own backoff), and the peer is gone only once even the best
            // usable path timed out that often in a row. (Counting every path's timeouts
            // together gave a striped connection as little as 70 ms of a stalled peer.)
            let gone = if self.send.paths.len() == 1 {
                self.consecutive_rtos > self.config.max_retransmits
            } else {
                self.send.paths.fewest_failures() > self.config.max_retransmits
            };
            if gone {
                self.unreachable();
                return;
            }
            self.rtt.back_off();
            if failed && self.send.take_path_down(now, path) {
                self.stats.paths_down += 1;
            }
        }
        let failed = self.send.paths.handle_ping_timers(now);
        for path in (0..self.send.paths.len()).filter(|path| failed & (1 << path) != 0) {
            if self.send.take_path_down(now, path) {
                self.stats.paths_down += 1;
            }
        }
        if self.probe_deadline.is_some_and(|deadline| deadline <= now) {
            let best = self.send.paths.best();
            self.send.paths.ping(best);
            self.last_ping_at = now;
            self.probe_deadline = None;
            self.probe_backoff_shift = (self.probe_backoff_shift + 1).min(16);
        }
        if now >= self.keepalive_at() {
            self.send.paths.ping_all_usable();
            self.last_ping_at = now;
        }
        self.refresh_timers(now);
    }

    /// Re-arms the RTO and the credit probe, and updates the gauges in the stats.
    fn refresh_timers(&mut self, now: Nanos) {
        if matches!(self.state, State::Established | State::Closing) {
            self.send.refresh_path_timers(now);
            if self.send.credit_blocked() && !self.send.has_unsacked() {
                if self.probe_deadline.is_none() {
                    let interval = self
                        .rtt
                        .rto_ns()
                        .checked_shl(self.probe_backoff_shift)
                        .unwrap_or(self.config.max_rto_ns)
                        .min(self.config.max_rto_ns);
                    self.probe_deadline = Some(now.saturating_add(interval));
                }
            } else {
                self.probe_deadline = None;
            }
        }
        self.stats.smoothed_rtt_ns = self.rtt.smoothed_ns();
        self.stats.rtt_variance_ns = self.rtt.variance_ns();
        self.stats.rto_ns = self.send.paths.min_rto_ns();
        self.stats.send_buffered_bytes = self.send.buffered_bytes();
        self.stats.recv_buffered_bytes = self.recv.buffered_bytes();
    }

    fn keepalive_at(&self) -> Nanos {
        self.last_received_at
            .max(self.last_ping_at)
            .saturating_add(self.config.keepalive_interval_ns)
    }

    fn idle_deadline(&self) -> Nanos {
        self.last_received_at
            .saturating_add(self.config.idle_timeout_ns)
    }

    fn open_for_sending(&self) -> bool {
        matches!(self.state, State::Handshaking | State::Established)
            && !self.send.close_requested()
    }

    fn unreachable(&mut self) {
        self.state = State::Failed;
        self.send.release_all();
        self.fail_reason = Some(FailReason::PeerUnreachable);
        self.probe_deadline = None;
        self.events.push_back(Event::PeerUnreachable);
    }

    fn fail(&mut self, reason: FailReason) {
        if matches!(self.state, State::Closed | State::Failed) {
            return;
        }
        if matches!(
            reason,
            FailReason::Handshake(_) | FailReason::Rejected(_) | FailReason::HandshakeTimeout
        ) {
            self.stats.handshake_failures += 1;
        }
        self.state = State::Failed;
        self.send.release_all();
        self.fail_reason = Some(reason);
        self.probe_deadline = None;
        self.handshake_retransmit_at = None;
        self.events.push_back(Event::Failed(reason));
    }
}

/// Answers a datagram for an unknown connection id: writes a Reset frame (header only, no
/// payload) into `header` and returns its length, or `None` if no Reset is due (the datagram
/// is not a valid frame, is itself a Reset, or is a new-connection Hello with dest id 0).
/// `header` needs [`frame::FIXED_HEADER_LEN`] bytes.
pub fn reset_for(datagram: &[u8], header: &mut [u8]) -> Option<usize> {
    let frame = Frame::parse(datagram).ok()?;
    let received = frame.header();
    if received.frame_type == FrameType::Reset || received.dest_id == 0 || received.src_id == 0 {
        return None;
    }
    FrameHeader::new(FrameType::Reset, received.src_id, received.dest_id)
        .emit(header, &[])
        .ok()
}

/// Widens the caller's 16 random bytes to the handshake's nonce; the connection id makes the
/// rest differ between the connections of one process.
fn expand_nonce(nonce: [u8; 16], local_id: u64) -> [u8; NONCE_LEN] {
    let mut expanded = [0u8; NONCE_LEN];
    expanded[..16].copy_from_slice(&nonce);
    expanded[16..24].copy_from_slice(&local_id.to_le_bytes());
    expanded
}

/// The peer's receive window from its handshake params.
fn parse_params(params: &[u8]) -> Option<u64> {
    let bytes: [u8; PARAMS_LEN] = params.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// The value whose low 32 bits are `low` nearest to `expected` (a Stream frame's packet
/// number or offset; unambiguous while the true value is within 2^31 of `expected`).
fn expand_low32(low: u64, expected: u64) -> u64 {
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

fn earliest(left: Option<Nanos>, right: Option<Nanos>) -> Option<Nanos> {
    match (left, right) {
        (Some(left), Some(right)) => Some(left.min(right)),
        (left, None) => left,
        (None, right) => right,
    }
}

/// What one handshake message did: the length of a new message to send (0: none), the
/// peer's credit from its params (or the error), and whether the handshake finished.
struct HandshakeStep {
    out_len: usize,
    result: Result<u64, HandshakeError>,
    established: bool,
}

/// Feeds the initiator the Challenge (queues the Proof) or the Verdict.
fn initiator_step(
    initiator: &mut Initiator,
    awaiting_challenge: bool,
    payload: &[u8],
    params_i: &[u8],
    out: &mut [u8; MAX_MESSAGE_LEN],
) -> HandshakeStep {
    if !awaiting_challenge {
        return HandshakeStep {
            out_len: 0,
            result: initiator.handle_verdict(payload).map(|()| 0),
            established: initiator.is_established(),
        };
    }
    let result = initiator
        .handle_challenge(payload, params_i)
        .and_then(|params_r| {
            parse_params(params_r).ok_or(HandshakeError::ParamsTooLong {
                len: params_r.len(),
                max: PARAMS_LEN,
            })
        });
    let out_len = if result.is_ok() {
        initiator.poll_transmit(out).ok().flatten().unwrap_or(0)
    } else {
        0
    };
    HandshakeStep {
        out_len,
        result,
        established: false,
    }
}

/// Feeds the responder the Proof; queues the Verdict (Accepted or BadProof).
fn responder_step(
    responder: &mut Responder,
    payload: &[u8],
    out: &mut [u8; MAX_MESSAGE_LEN],
) -> HandshakeStep {
    let result = responder.handle_proof(payload).and_then(|params_i| {
        parse_params(params_i).ok_or(HandshakeError::ParamsTooLong {
            len: params_i.len(),
            max: PARAMS_LEN,
        })
    });
    let out_len = responder.poll_transmit(out).ok().flatten().unwrap_or(0);
    HandshakeStep {
        out_len,
        established: result.is_ok(),
        result,
    }
}
