//! The connecting side of the handshake.
//!
//! Layer: sans-IO, inside [`crate::handshake`]. It owns the initiator's state machine: the
//! Hello it sends, the Challenge it verifies, the Proof it sends and the Verdict it checks.
//! No I/O, no clock; its nonce is the caller's.

use quiver_wire::handshake::{
    Challenge, ChallengeRepr, ChallengeStatus, Hello, HelloRepr, MessageKind, Proof, ProofRepr,
    Verdict, VerdictRepr, VerdictStatus, HELLO_LEN, MAC_LEN, NONCE_LEN, VERSION,
};

use super::error::{check_params_len, classify_wire_error, HandshakeError};
use super::key::{
    constant_time_eq, keyed_transcript, mac, JobKey, LABEL_HELLO, LABEL_INITIATOR, LABEL_RESPONDER,
    LABEL_SESSION, LABEL_VERDICT,
};
use super::outbox::Outbox;
use super::request::ConnectRequest;

/// The connecting side of a handshake.
///
/// # Call protocol
///
/// 1. [`Initiator::new`] queues the Hello. Call [`Initiator::poll_transmit`] and send the
///    bytes it writes.
/// 2. Receive one message and pass it to [`Initiator::handle_challenge`] with your own
///    transport params. On `Ok` you get the responder's params, and a Proof is queued:
///    `poll_transmit` and send it.
/// 3. Receive one message and pass it to [`Initiator::handle_verdict`]. On `Ok` the
///    connection is established ([`Initiator::is_established`]).
///
/// Any `Err` other than local misuse (see [`HandshakeError`]) is final: close the connection.
/// The initiator never sends anything after an error. Each method writes or reads exactly
/// one message; frame them with the `length` prefix field on byte streams.
#[derive(Debug)]
pub struct Initiator {
    key: JobKey,
    request: ConnectRequest,
    hello: [u8; HELLO_LEN],
    state: InitiatorState,
    /// MAC state over everything `mac_v` covers up to the Verdict, filled with the Proof.
    verdict_transcript: blake3::Hasher,
    /// The session secret (over the Hello and the Challenge), once the Challenge verified.
    session: Option<[u8; MAC_LEN]>,
    outbox: Outbox,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InitiatorState {
    AwaitingChallenge,
    AwaitingVerdict,
    Established,
    Failed,
}

impl InitiatorState {
    const fn name(self) -> &'static str {
        match self {
            Self::AwaitingChallenge => "awaiting the Challenge",
            Self::AwaitingVerdict => "awaiting the Verdict",
            Self::Established => "established",
            Self::Failed => "failed",
        }
    }
}

impl Initiator {
    /// Starts a handshake and queues the Hello, MACed with the key (`mac_h`) so that the
    /// responder keeps nothing for a Hello that does not prove it. `nonce_i` must be fresh
    /// random bytes, never reused.
    pub fn new(key: JobKey, request: ConnectRequest, nonce_i: [u8; NONCE_LEN]) -> Self {
        let repr = HelloRepr {
            job_id: request.job_id,
            src_rank: request.src_rank,
            src_port: request.src_port,
            dst_port: request.dst_port,
            nonce_i,
            mac_h: [0; MAC_LEN],
        };
        let mut hello = [0u8; HELLO_LEN];
        let mut view = Hello::new_unchecked(&mut hello[..]);
        repr.emit(&mut view);
        let mac_h = mac(&key, LABEL_HELLO, &[view.authenticated_part()]);
        view.set_mac_h(&mac_h);
        let mut outbox = Outbox::new();
        outbox.queue(&hello);
        Self {
            key,
            request,
            hello,
            state: InitiatorState::AwaitingChallenge,
            verdict_transcript: blake3::Hasher::new(),
            session: None,
            outbox,
        }
    }

    /// Writes the next message to send into `out` and returns its length, or `None` if there
    /// is nothing to send.
    ///
    /// # Errors
    /// [`HandshakeError::BufferTooSmall`] (nothing is lost; call again with a bigger buffer).
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Result<Option<usize>, HandshakeError> {
        self.outbox.poll_transmit(out)
    }

    /// Takes the responder's Challenge, verifies it, and queues a Proof carrying `params_i`.
    /// Returns the responder's params (borrowed from `challenge`).
    ///
    /// # Errors
    /// Peer-caused (final): [`HandshakeError::Malformed`], [`HandshakeError::VersionMismatch`],
    /// [`HandshakeError::UnexpectedMessage`], the responder's refusals
    /// ([`HandshakeError::NoSuchEndpoint`], [`HandshakeError::WrongJob`],
    /// [`HandshakeError::Busy`]), and [`HandshakeError::AuthenticationFailed`] if `mac_r` does
    /// not verify. Local: [`HandshakeError::UnexpectedCall`], [`HandshakeError::ParamsTooLong`].
    pub fn handle_challenge<'a>(
        &mut self,
        challenge: &'a [u8],
        params_i: &[u8],
    ) -> Result<&'a [u8], HandshakeError> {
        self.expect_state(InitiatorState::AwaitingChallenge, "handle_challenge")?;
        check_params_len(params_i)?;
        let result = self.verify_challenge(challenge, params_i);
        self.state = match result {
            Ok(_) => InitiatorState::AwaitingVerdict,
            Err(_) => InitiatorState::Failed,
        };
        result
    }

    /// Takes the responder's Verdict. On `Ok` the connection is established.
    ///
    /// # Errors
    /// Peer-caused (final): [`HandshakeError::Malformed`], [`HandshakeError::VersionMismatch`],
    /// [`HandshakeError::UnexpectedMessage`], [`HandshakeError::AuthenticationFailed`] with
    /// `message: Verdict` if `mac_v` does not verify, or with `message: Proof` if the
    /// responder rejected our proof. Local: [`HandshakeError::UnexpectedCall`].
    pub fn handle_verdict(&mut self, verdict: &[u8]) -> Result<(), HandshakeError> {
        self.expect_state(InitiatorState::AwaitingVerdict, "handle_verdict")?;
        let result = self.verify_verdict(verdict);
        self.state = match result {
            Ok(()) => InitiatorState::Established,
            Err(_) => InitiatorState::Failed,
        };
        result
    }

    /// Whether the handshake completed successfully.
    pub fn is_established(&self) -> bool {
        self.state == InitiatorState::Established
    }

    /// The connection's session secret, once established: a keyed BLAKE3 of the job key
    /// over the Hello and the Challenge (so over both sides' nonces), the same on both
    /// sides; the datagram frames' keys come from it
    /// ([`session_frame_keys`](crate::handshake::session_frame_keys)).
    pub fn session_secret(&self) -> Option<[u8; MAC_LEN]> {
        self.session.filter(|_| self.is_established())
    }

    /// Whether the handshake failed for good.
    pub fn is_failed(&self) -> bool {
        self.state == InitiatorState::Failed
    }

    /// The identities this handshake announces.
    pub fn request(&self) -> ConnectRequest {
        self.request
    }

    fn expect_state(
        &self,
        expected: InitiatorState,
        call: &'static str,
    ) -> Result<(), HandshakeError> {
        if self.state != expected {
            return Err(HandshakeError::UnexpectedCall {
                call,
                state: self.state.name(),
            });
        }
        if !self.outbox.is_empty() {
            return Err(HandshakeError::UnexpectedCall {
                call,
                state: "a message is waiting in poll_transmit",
            });
        }
        Ok(())
    }

    /// Parses and verifies a Challenge, then queues the Proof. Leaves the state to the caller.
    fn verify_challenge<'a>(
        &mut self,
        bytes: &'a [u8],
        params_i: &[u8],
    ) -> Result<&'a [u8], HandshakeError> {
        let view = Challenge::new_checked(bytes)
            .map_err(|error| classify_wire_error(error, MessageKind::Challenge))?;
        let repr = ChallengeRepr::parse(&view).map_err(HandshakeError::Malformed)?;
        match repr.status {
            ChallengeStatus::Ok => {}
            ChallengeStatus::NoSuchEndpoint => {
                return Err(HandshakeError::NoSuchEndpoint {
                    port: self.request.dst_port,
                })
            }
            ChallengeStatus::WrongJob => {
                return Err(HandshakeError::WrongJob {
                    ours: self.request.job_id,
                    theirs: None,
                })
            }
            ChallengeStatus::Busy => {
                return Err(HandshakeError::Busy {
                    port: self.request.dst_port,
                })
            }
            ChallengeStatus::WrongKey => {
                return Err(HandshakeError::AuthenticationFailed {
                    message: MessageKind::Hello,
                })
            }
            ChallengeStatus::UnsupportedVersion => {
                return Err(HandshakeError::VersionMismatch {
                    ours: VERSION,
                    theirs: VERSION,
                })
            }
        }
        let [challenge_head, challenge_tail] = view.authenticated_parts();
        let expected_mac_r = mac(
            &self.key,
            LABEL_RESPONDER,
            &[&self.hello, challenge_head, challenge_tail],
        );
        if !constant_time_eq(&expected_mac_r, &repr.mac_r) {
            return Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Challenge,
            });
        }

        let proof = ProofRepr {
            mac_i: [0; MAC_LEN],
            params_i,
        };
        let proof_bytes = self.outbox.reserve(proof.buffer_len());
        let mut proof_view = Proof::new_unchecked(proof_bytes);
        proof.emit(&mut proof_view);
        let [proof_head, proof_tail] = proof_view.authenticated_parts();
        let transcript = [
            &self.hello[..],
            challenge_head,
            challenge_tail,
            proof_head,
            proof_tail,
        ];
        self.session = Some(mac(
            &self.key,
            LABEL_SESSION,
            &[&self.hello, challenge_head, challenge_tail],
        ));
        let mac_i = mac(&self.key, LABEL_INITIATOR, &transcript);
        self.verdict_transcript = keyed_transcript(&self.key, LABEL_VERDICT, &transcript);
        proof_view.set_mac_i(&mac_i);
        Ok(repr.params_r)
    }

    /// Parses a Verdict and checks its MAC before believing its status.
    fn verify_verdict(&self, bytes: &[u8]) -> Result<(), HandshakeError> {
        let view = Verdict::new_checked(bytes)
            .map_err(|error| classify_wire_error(error, MessageKind::Verdict))?;
        let repr = VerdictRepr::parse(&view).map_err(HandshakeError::Malformed)?;
        let mut transcript = self.verdict_transcript.clone();
        for part in view.authenticated_parts() {
            transcript.update(part);
        }
        if !constant_time_eq(&transcript.finalize().into(), &repr.mac_v) {
            return Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Verdict,
            });
        }
        match repr.status {
            VerdictStatus::Accepted => Ok(()),
            VerdictStatus::BadProof => Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof,
            }),
        }
    }
}
