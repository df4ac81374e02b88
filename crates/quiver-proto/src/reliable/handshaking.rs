//! The key handshake carried in Handshake frames: the state machines of
//! [`crate::handshake`] driven by the connection, retransmitted on timeout, and the
//! transport parameters they carry.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. No I/O, no randomness: the nonce is the
//! caller's, widened with the connection id.

use quiver_wire::frame::{FrameHeader, FrameType};
use quiver_wire::handshake::MAX_MESSAGE_LEN;

use super::connection::{HandshakeSide, ReliableConnection};
use super::events::{Event, FailReason, State};
use super::output::Transmit;
use super::time::Nanos;
use crate::handshake::{HandshakeError, Initiator, RejectReason, Responder};

use super::config::IDENTITY_LEN;

/// Bytes of the transport parameters each side sends in the handshake: its receive window
/// (the initial credit), u64 little-endian; then, when the side has one, its identity
/// ([`IDENTITY_LEN`] opaque bytes, `ReliableConfig::identity`).
pub(super) const PARAMS_LEN: usize = 8;

/// The longest params: the window and an identity.
const PARAMS_MAX: usize = PARAMS_LEN + IDENTITY_LEN;

/// What a peer's params say: its receive window and its identity, if it sent one.
pub(super) type PeerParams = (u64, Option<[u8; IDENTITY_LEN]>);

impl ReliableConnection {
    /// Responder: whether `accept` left the decision open (accepted at the next
    /// `poll_transmit` unless the caller rejects first).
    pub(super) fn accept_pending(&self) -> bool {
        matches!(
            self.handshake,
            HandshakeSide::Responder { deciding: true, .. }
        )
    }

    /// Responder: accepts now unless the caller rejected since `accept`.
    pub(super) fn apply_pending_accept(&mut self) {
        // Checked first: every `poll_transmit` comes here, and the params cost a copy.
        if !self.accept_pending() {
            return;
        }
        let (params, len) = self.own_params();
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
        if responder.accept(&params[..len]).is_ok() {
            self.handshake_out_len = responder
                .poll_transmit(&mut self.handshake_out)
                .ok()
                .flatten()
                .unwrap_or(0);
            self.handshake_send_pending = self.handshake_out_len > 0;
        }
    }

    pub(super) fn transmit_handshake<'a>(
        &'a mut self,
        now: Nanos,
        header: &mut [u8],
    ) -> Option<Transmit<'a>> {
        self.handshake_send_pending = false;
        // Only the initiator repeats on a timer. A responder answers each Hello (or Proof)
        // it receives once, so it never sends more than it received to a source whose
        // address nothing has verified; a lost Challenge is recovered by the initiator's
        // repeated Hello.
        if self.state == State::Handshaking && self.is_initiator {
            self.handshake_retransmit_at = Some(now.saturating_add(self.handshake_interval_ns));
        }
        let frame_header = FrameHeader::new(
            FrameType::Handshake,
            self.peer_id.unwrap_or(0),
            self.local_id,
        );
        let payload = &self.handshake_out[..self.handshake_out_len];
        let header_len = frame_header.emit(self.send_keys(), header, payload).ok()?;
        self.stats.datagrams_sent += 1;
        self.send.paths.count_sent(self.handshake_path);
        Some(Transmit {
            header_len,
            payload,
            stream_offset: None,
            path: self.handshake_path,
        })
    }

    pub(super) fn handle_handshake_frame(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        payload: &[u8],
    ) {
        // Handshake frames are under a public key (decision 0067): only a message that
        // advances the handshake (its own MACs verified) counts as hearing from the peer.
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
        let (params, params_len) = self.own_params();
        let step = match &mut self.handshake {
            HandshakeSide::Initiator(initiator)
                if !initiator.is_established() && !initiator.is_failed() =>
            {
                initiator_step(
                    initiator,
                    awaiting_challenge,
                    payload,
                    &params[..params_len],
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
            Ok(params) => {
                self.last_received_at = now;
                self.remember_incoming(payload);
                // A Verdict carries no params: keep what the Challenge said.
                if let Some((credit, identity)) = params {
                    self.send.set_initial_credit(credit);
                    self.peer_identity = identity;
                }
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

    pub(super) fn establish(&mut self, now: Nanos) {
        self.install_frame_keys();
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

    /// This end's params (module docs of [`PARAMS_LEN`]) and their length.
    fn own_params(&self) -> ([u8; PARAMS_MAX], usize) {
        let mut params = [0u8; PARAMS_MAX];
        params[..PARAMS_LEN].copy_from_slice(&(self.config.recv_window_bytes as u64).to_le_bytes());
        match &self.config.identity {
            Some(identity) => {
                params[PARAMS_LEN..].copy_from_slice(identity);
                (params, PARAMS_MAX)
            }
            None => (params, PARAMS_LEN),
        }
    }

    pub(super) fn remember_incoming(&mut self, payload: &[u8]) {
        let len = payload.len().min(MAX_MESSAGE_LEN);
        self.handshake_in[..len].copy_from_slice(&payload[..len]);
        self.handshake_in_len = len;
    }

    pub(super) fn incoming_handshake(&self) -> &[u8] {
        &self.handshake_in[..self.handshake_in_len]
    }
}

/// The peer's receive window and identity from its handshake params: the window alone, or
/// the window and an identity.
pub(super) fn parse_params(params: &[u8]) -> Option<PeerParams> {
    if params.len() != PARAMS_LEN && params.len() != PARAMS_MAX {
        return None;
    }
    let (window, identity) = params.split_at(PARAMS_LEN);
    let window = u64::from_le_bytes(window.try_into().ok()?);
    Some((window, identity.try_into().ok()))
}

/// What one handshake message did: the length of a new message to send (0: none), the
/// peer's credit and identity from its params when the message carried them (or the
/// error), and whether the handshake finished.
pub(super) struct HandshakeStep {
    out_len: usize,
    result: Result<Option<PeerParams>, HandshakeError>,
    established: bool,
}

/// Feeds the initiator the Challenge (queues the Proof) or the Verdict.
pub(super) fn initiator_step(
    initiator: &mut Initiator,
    awaiting_challenge: bool,
    payload: &[u8],
    params_i: &[u8],
    out: &mut [u8; MAX_MESSAGE_LEN],
) -> HandshakeStep {
    if !awaiting_challenge {
        return HandshakeStep {
            out_len: 0,
            result: initiator.handle_verdict(payload).map(|()| None),
            established: initiator.is_established(),
        };
    }
    let result = initiator
        .handle_challenge(payload, params_i)
        .and_then(|params_r| {
            parse_params(params_r)
                .map(Some)
                .ok_or(HandshakeError::ParamsTooLong {
                    len: params_r.len(),
                    max: PARAMS_MAX,
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
pub(super) fn responder_step(
    responder: &mut Responder,
    payload: &[u8],
    out: &mut [u8; MAX_MESSAGE_LEN],
) -> HandshakeStep {
    let result = responder.handle_proof(payload).and_then(|params_i| {
        parse_params(params_i)
            .map(Some)
            .ok_or(HandshakeError::ParamsTooLong {
                len: params_i.len(),
                max: PARAMS_MAX,
            })
    });
    let out_len = responder.poll_transmit(out).ok().flatten().unwrap_or(0);
    HandshakeStep {
        out_len,
        established: result.is_ok(),
        result,
    }
}
