//! A connection's limits and timers, and their validation.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. It owns [`ReliableConfig`] and
//! [`ConfigError`]; it knows the frame format's sizes, nothing of a connection's state.

use quiver_wire::frame::{
    self, FIXED_HEADER_LEN, MAX_ACK_RANGES, MAX_PAYLOAD_LEN, MAX_SACK_RANGES, SACK_RANGE_LEN,
};
use quiver_wire::handshake::MAX_MESSAGE_LEN;

use super::paths::MAX_PATHS;
use super::time::Nanos;

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
    /// [`Event::PeerUnreachable`](crate::reliable::Event::PeerUnreachable). Default 12, at least 1.
    pub max_retransmits: u32,
    /// Longest delay of a standalone ack. Default 200 µs.
    pub ack_delay_ns: Nanos,
    /// Ping a connection that received nothing for this long. Default 250 ms; > 0.
    pub keepalive_interval_ns: Nanos,
    /// No datagram from the peer for this long ->
    /// [`Event::PeerUnreachable`](crate::reliable::Event::PeerUnreachable). Default 1 s; must
    /// exceed `keepalive_interval_ns`.
    pub idle_timeout_ns: Nanos,
    /// The handshake must finish within this time of `connect`/`accept`, otherwise
    /// [`FailReason::HandshakeTimeout`](crate::reliable::FailReason::HandshakeTimeout).
    /// Default 5 s; > 0.
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
    /// For tests of the 32-bit wrap: the packet number of this end's first Data or Close
    /// frame, and the peer's. Both ends must use the same value. Compact Stream frames carry
    /// packet numbers in 32 bits, so a value just below 2^32 makes a short transfer cross
    /// the wrap, which 2^32 frames would otherwise take. Default 0.
    pub initial_packet_number: u64,
    /// For tests of the 32-bit wrap: the stream offset of this end's first byte, and the
    /// peer's. Both ends must use the same value (compact Stream frames carry 32-bit
    /// offsets; a value just below 2^32 crosses their wrap in a short transfer). Default 0.
    pub initial_stream_offset: u64,
    /// Opaque bytes naming this end's process, carried in the handshake's params after the
    /// receive window and handed to the peer
    /// ([`ReliableConnection::peer_identity`](crate::reliable::ReliableConnection::peer_identity)):
    /// quiver puts its pid and a node id there, so that a peer on the same node can watch
    /// the process. The core neither checks nor uses them. Default None (the params are the
    /// window alone, as before).
    pub identity: Option<[u8; IDENTITY_LEN]>,
}

/// Bytes of a [`ReliableConfig::identity`].
pub const IDENTITY_LEN: usize = 12;

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
            initial_packet_number: 0,
            initial_stream_offset: 0,
            identity: None,
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

    pub(super) fn data_header_len(&self) -> usize {
        FIXED_HEADER_LEN + self.max_sack_ranges * SACK_RANGE_LEN
    }

    /// SACK ranges a standalone Ack carries at most (header and payload): as many as fit the
    /// datagram, up to [`MAX_ACK_RANGES`]; none when `max_sack_ranges` is 0.
    pub(super) fn ack_range_limit(&self) -> usize {
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
