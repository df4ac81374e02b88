//! The reliable connection: its state, how it is created (connect, accept, reject), and
//! what it tells about itself.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. It owns [`ReliableConnection`] and the
//! fields every other part of the connection works on (`input.rs`, `output.rs`,
//! `timers.rs`, ... add their methods). No I/O, no clock, no randomness: ids and nonces
//! are arguments.

use std::collections::VecDeque;

use quiver_wire::frame::{
    Frame, FrameError, FrameKey, FrameKeys, FrameType, SackRange, MAX_ACK_RANGES, SACK_RANGE_LEN,
};
use quiver_wire::handshake::{MAX_MESSAGE_LEN, NONCE_LEN};

use super::config::{ConfigError, ReliableConfig, IDENTITY_LEN};
use super::events::{Event, FailReason, State};
use super::paths::{PathStats, Paths};
use super::recv::RecvState;
use super::rtt::RttEstimator;
use super::send::SendState;
use super::stats::ReliableStats;
use super::time::Nanos;
use crate::handshake::{
    job_frame_key, session_frame_keys, ConnectRequest, HandshakeError, Initiator, JobKey,
    RejectReason, Responder,
};

/// Widens the caller's 16 random bytes to the handshake's nonce; the connection id makes the
/// rest differ between the connections of one process.
fn expand_nonce(nonce: [u8; 16], local_id: u64) -> [u8; NONCE_LEN] {
    let mut expanded = [0u8; NONCE_LEN];
    expanded[..16].copy_from_slice(&nonce);
    expanded[16..24].copy_from_slice(&local_id.to_le_bytes());
    expanded
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

/// The handshake's part of a connection.
#[derive(Debug)]
pub(super) enum HandshakeSide {
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
///   (send each datagram on the path its
///   [`Transmit::path`](crate::reliable::Transmit::path) names; a caller may skip it while
///   [`transmit_pending`](Self::transmit_pending) says false),
///   [`poll_event`](Self::poll_event) until `None`, and re-read
///   [`poll_timeout`](Self::poll_timeout).
///
/// Paths: `config.path_count` of them, numbered from 0; path `i` must be the same link in
/// both directions (the I/O layer's mapping of index to addresses). With one path this is a
/// plain single-link connection.
///
/// Datagrams for unknown ids are answered with [`reset_for`](crate::reliable::reset_for). The
/// connection never reads a clock: `now` is monotonic nanoseconds from the caller, never
/// decreasing.
#[derive(Debug)]
pub struct ReliableConnection {
    pub(super) config: ReliableConfig,
    pub(super) state: State,
    pub(super) fail_reason: Option<FailReason>,
    pub(super) local_id: u64,
    pub(super) peer_id: Option<u64>,
    pub(super) request: ConnectRequest,

    pub(super) handshake: HandshakeSide,
    pub(super) is_initiator: bool,
    /// The last handshake message we produced, kept for retransmission.
    pub(super) handshake_out: [u8; MAX_MESSAGE_LEN],
    pub(super) handshake_out_len: usize,
    pub(super) handshake_send_pending: bool,
    /// The last handshake message we took from the peer, to recognise its duplicates.
    pub(super) handshake_in: [u8; MAX_MESSAGE_LEN],
    pub(super) handshake_in_len: usize,
    /// The identity the peer's handshake params carried (`ReliableConfig::identity`).
    pub(super) peer_identity: Option<[u8; IDENTITY_LEN]>,
    pub(super) handshake_retransmit_at: Option<Nanos>,
    pub(super) handshake_interval_ns: Nanos,
    pub(super) handshake_deadline: Nanos,
    /// Path of the next handshake message: the initiator rotates over the paths with each
    /// retransmission; the responder answers on the path the peer's message arrived on.
    pub(super) handshake_path: usize,

    pub(super) send: SendState,
    pub(super) recv: RecvState,
    /// RTT over all paths: the credit probe's interval and the stats.
    pub(super) rtt: RttEstimator,
    /// Retransmission timeouts (any path) in a row without an acknowledgement.
    pub(super) consecutive_rtos: u32,
    pub(super) probe_deadline: Option<Nanos>,
    pub(super) probe_backoff_shift: u32,

    pub(super) last_received_at: Nanos,
    pub(super) last_ping_at: Nanos,

    pub(super) events: VecDeque<Event>,
    pub(super) stats: ReliableStats,
    /// Scratch (allocated once, [`MAX_ACK_RANGES`] each): the SACK list of a received ack,
    /// the ranges of an outgoing Ack beyond its header, and their encoding (its payload).
    pub(super) ack_ranges_in: Vec<SackRange>,
    pub(super) ack_ranges_out: Vec<SackRange>,
    pub(super) ack_payload: Vec<u8>,
    /// The ack fields of the last frame, not yet processed (its SACK list is in
    /// `ack_ranges_in`): the frame brought a whole message, and the answer goes first
    /// (the `reliable` module docs, "The answer first").
    pub(super) deferred_ack: Option<DeferredAck>,

    /// The job's frame key (Resets), and this connection's frame keys of each direction
    /// once established (decision 0067).
    pub(super) frame_job_key: FrameKey,
    pub(super) frame_send_key: Option<FrameKey>,
    pub(super) frame_recv_key: Option<FrameKey>,
    /// Number carried by the last plain Ack this side sent, and the highest one taken from
    /// the peer: an Ack not above it is a replay (or overtaken by a newer one) and refused.
    pub(super) acks_numbered: u64,
    pub(super) highest_ack_number_in: u64,
    /// The highest ping counter taken from the peer per path index (a Ping's token is its
    /// counter times `MAX_PATHS` plus the index): a Ping not above it is refused.
    pub(super) ping_counters_in: Vec<u64>,
}

/// The ack fields of a received frame whose processing waits for the answer's first frame.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeferredAck {
    /// When the frame arrived (the ack counts at that time).
    pub(super) arrived_at: Nanos,
    pub(super) cumulative_ack: u64,
    pub(super) truncated: bool,
    pub(super) credit: u64,
    /// Packet numbers sent when it arrived (it cannot acknowledge later ones).
    pub(super) sent_end: u64,
    /// The answer's first frame went out: the next `poll_transmit` processes the ack.
    pub(super) answered: bool,
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
        let frame_job_key = job_frame_key(&key);
        let mut initiator = Box::new(Initiator::new(key, request, expand_nonce(nonce, local_id)));
        let mut connection = Self::new(
            config,
            request,
            local_id,
            None,
            HandshakeSide::Done,
            frame_job_key,
            now,
        );
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
        let frame_job_key = job_frame_key(&key);
        let frame = Frame::parse(datagram, FrameKeys::job_only(&frame_job_key))?;
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
            frame_job_key,
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

    /// Data frames received since this side last sent an acknowledgement. An engine that
    /// holds acks back (to let an answer carry them) should not do so when this is large:
    /// the peer's windows wait for them.
    pub fn unacknowledged_frames(&self) -> u32 {
        self.recv.unacked_frames()
    }

    /// The largest datagram this connection sends now (`config.max_datagram_bytes`, or
    /// less after [`ReliableConnection::lower_max_datagram_bytes`]).
    pub fn max_datagram_bytes(&self) -> usize {
        self.config.max_datagram_bytes
    }

    /// Lowers the largest datagram this connection sends to `bytes` (the path's MTU fell),
    /// never below [`ReliableConfig::MIN_DATAGRAM_BYTES`] nor above what it was; returns the
    /// size now in force. Frames cut from now on fit it (data, compact Stream frames, and
    /// the SACK ranges of standalone Acks); a frame sent before and declared lost is resent
    /// re-cut to fit (its number with the bytes that fit, the rest in new frames:
    /// `send/resend.rs`), so nothing larger leaves once this returns. The receiver needs no
    /// word of it: it takes any datagram up to its own size.
    pub fn lower_max_datagram_bytes(&mut self, bytes: usize) -> usize {
        let floor = ReliableConfig::MIN_DATAGRAM_BYTES.max(self.config.data_header_len() + 1);
        self.config.max_datagram_bytes = bytes.max(floor).min(self.config.max_datagram_bytes);
        self.config.max_datagram_bytes
    }

    /// Number of paths (`config.path_count`).
    pub fn path_count(&self) -> usize {
        self.send.paths.len()
    }

    /// Counters and gauges of `path` (None beyond `path_count`), the gauges read now.
    pub fn path_stats(&self, path: usize) -> Option<PathStats> {
        self.send.paths.stats(path)
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

    /// This side's connection id.
    pub fn local_id(&self) -> u64 {
        self.local_id
    }

    /// The peer's connection id, once known.
    pub fn peer_id(&self) -> Option<u64> {
        self.peer_id
    }

    /// The identity the peer sent in its handshake params (its `ReliableConfig::identity`),
    /// once the handshake got that far; None for a peer that sent none. Opaque to the core.
    pub fn peer_identity(&self) -> Option<&[u8; IDENTITY_LEN]> {
        self.peer_identity.as_ref()
    }

    /// Who connects to whom.
    pub fn request(&self) -> ConnectRequest {
        self.request
    }

    /// The key this side's connection frames go out under, once established. Only for a
    /// simulator's or a test's forger (a party that holds the key): nothing of quiver's
    /// sends or shows it.
    pub fn frame_send_key(&self) -> Option<&FrameKey> {
        self.frame_send_key.as_ref()
    }

    /// The keys this side emits its frames with (the connection's once established).
    pub(super) fn send_keys(&self) -> FrameKeys<'_> {
        FrameKeys {
            job: &self.frame_job_key,
            connection: self.frame_send_key.as_ref(),
        }
    }

    /// The keys this side verifies received frames with.
    pub(super) fn recv_keys(&self) -> FrameKeys<'_> {
        FrameKeys {
            job: &self.frame_job_key,
            connection: self.frame_recv_key.as_ref(),
        }
    }

    /// Installs the connection's frame keys from the finished handshake (called once, as
    /// the connection is established, while `handshake` still holds the state machine).
    pub(super) fn install_frame_keys(&mut self) {
        let session = match &self.handshake {
            HandshakeSide::Initiator(initiator) => initiator.session_secret(),
            HandshakeSide::Responder { responder, .. } => responder.session_secret(),
            HandshakeSide::Done => None,
        };
        let Some(session) = session else {
            return;
        };
        let (by_initiator, by_responder) = session_frame_keys(&session);
        if self.is_initiator {
            self.frame_send_key = Some(by_initiator);
            self.frame_recv_key = Some(by_responder);
        } else {
            self.frame_send_key = Some(by_responder);
            self.frame_recv_key = Some(by_initiator);
        }
    }

    /// Counters, with the RTT, RTO and buffer gauges brought up to date.
    pub fn stats(&self) -> &ReliableStats {
        &self.stats
    }

    pub(super) fn new(
        config: ReliableConfig,
        request: ConnectRequest,
        local_id: u64,
        peer_id: Option<u64>,
        handshake: HandshakeSide,
        frame_job_key: FrameKey,
        now: Nanos,
    ) -> Self {
        let paths = Paths::new(
            config.path_count,
            config.max_data_payload_bytes() as u64 + config.data_header_len() as u64,
            config.initial_rto_ns,
            config.min_rto_ns,
            config.max_rto_ns,
        );
        let mut send = SendState::new(
            config.send_buffer_bytes,
            config.max_in_flight_datagrams,
            paths,
            config.data_header_len() as u64,
        );
        let mut recv = RecvState::new(config.recv_window_bytes, config.max_in_flight_datagrams);
        send.start_numbering(config.initial_packet_number, config.initial_stream_offset);
        recv.start_numbering(config.initial_packet_number, config.initial_stream_offset);
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
            peer_identity: None,
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
            frame_job_key,
            frame_send_key: None,
            frame_recv_key: None,
            acks_numbered: 0,
            highest_ack_number_in: 0,
            ping_counters_in: vec![0; config.path_count],
            config,
        }
    }
}
