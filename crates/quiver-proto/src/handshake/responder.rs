//! The accepting side of the handshake.
//!
//! Layer: sans-IO, inside [`crate::handshake`]. It owns the responder's state machine: the
//! Hello it reads, the Challenge (or refusal) it sends, the Proof it verifies and the
//! Verdict it sends. No I/O, no clock; its nonce is the caller's.

use quiver_wire::handshake::{
    Challenge, ChallengeRepr, ChallengeStatus, Hello, HelloRepr, MessageKind, Proof, ProofRepr,
    Verdict, VerdictRepr, VerdictStatus, CHALLENGE_FIXED_LEN, HELLO_LEN, MAC_LEN, NONCE_LEN,
    VERDICT_LEN,
};

use super::error::{check_params_len, classify_wire_error, HandshakeError};
use super::key::{
    constant_time_eq, keyed_transcript, mac, JobKey, LABEL_HELLO, LABEL_INITIATOR, LABEL_RESPONDER,
    LABEL_SESSION, LABEL_VERDICT,
};
use super::outbox::Outbox;
use super::request::{ConnectRequest, RejectReason};

/// Checks a Hello before anything is kept for it: its layout, its job id, and its MAC
/// (`mac_h`, the proof that its sender holds `key`). One keyed BLAKE3 over 56 bytes, so a
/// router can run it on every Hello before it draws an id or allocates a connection.
///
/// # Errors
/// [`HandshakeError::Malformed`], [`HandshakeError::VersionMismatch`],
/// [`HandshakeError::UnexpectedMessage`], [`HandshakeError::WrongJob`] (checked before the
/// MAC, so a member of another job learns why), [`HandshakeError::AuthenticationFailed`]
/// with `message: Hello`.
pub fn verify_hello(
    key: &JobKey,
    job_id: u64,
    bytes: &[u8],
) -> Result<ConnectRequest, HandshakeError> {
    let view = Hello::new_checked(bytes)
        .map_err(|error| classify_wire_error(error, MessageKind::Hello))?;
    let repr = HelloRepr::parse(&view).map_err(HandshakeError::Malformed)?;
    if repr.job_id != job_id {
        return Err(HandshakeError::WrongJob {
            ours: job_id,
            theirs: Some(repr.job_id),
        });
    }
    let expected = mac(key, LABEL_HELLO, &[view.authenticated_part()]);
    if !constant_time_eq(&expected, &repr.mac_h) {
        return Err(HandshakeError::AuthenticationFailed {
            message: MessageKind::Hello,
        });
    }
    Ok(ConnectRequest {
        job_id: repr.job_id,
        src_rank: repr.src_rank,
        src_port: repr.src_port,
        dst_port: repr.dst_port,
    })
}

/// Writes into `out` the refusal that answers a Hello [`verify_hello`] refused with
/// `error`, and returns its length ([`CHALLENGE_FIXED_LEN`], shorter than any Hello), or
/// `None` when the error gets no answer (bytes that are no Hello at all). Stateless: a
/// router answers a stranger with it and keeps nothing.
///
/// # Panics
/// If `out` is shorter than [`CHALLENGE_FIXED_LEN`] (a caller bug).
pub fn hello_refusal(error: &HandshakeError, out: &mut [u8]) -> Option<usize> {
    let status = refusal_status(error)?;
    emit_refusal(status, &mut out[..CHALLENGE_FIXED_LEN]);
    Some(CHALLENGE_FIXED_LEN)
}

/// The refusal status that tells an initiator why its Hello was refused, if any.
fn refusal_status(error: &HandshakeError) -> Option<ChallengeStatus> {
    match error {
        HandshakeError::VersionMismatch { .. } => Some(ChallengeStatus::UnsupportedVersion),
        HandshakeError::WrongJob { .. } => Some(ChallengeStatus::WrongJob),
        HandshakeError::AuthenticationFailed { .. } => Some(ChallengeStatus::WrongKey),
        _ => None,
    }
}

/// Writes an unauthenticated refusing Challenge with `status` into `out` (exactly
/// [`CHALLENGE_FIXED_LEN`] bytes).
fn emit_refusal(status: ChallengeStatus, out: &mut [u8]) {
    let repr = ChallengeRepr {
        status,
        nonce_r: [0; NONCE_LEN],
        mac_r: [0; MAC_LEN],
        params_r: &[],
    };
    repr.emit(&mut Challenge::new_unchecked(out));
}

/// The accepting side of a handshake.
///
/// # Call protocol
///
/// 1. Receive one message and pass it to [`Responder::handle_hello`]. On `Ok` you learn who
///    connects ([`ConnectRequest`]); nothing is sent yet.
/// 2. Decide: [`Responder::accept`] with your transport params, or [`Responder::reject`].
///    Either queues a Challenge: call [`Responder::poll_transmit`] and send it. After a
///    rejection, close the connection.
/// 3. Receive one message and pass it to [`Responder::handle_proof`]. On `Ok` you get the
///    initiator's params and the connection is established. Either way a Verdict may be
///    queued: `poll_transmit` and send it.
///
/// After an `Err` (other than local misuse) the handshake has failed for good, but a message
/// telling the peer why may still be queued (a refusing Challenge after `handle_hello`, a
/// `BadProof` Verdict after `handle_proof`): call `poll_transmit` once more, send what it
/// gives, then close.
#[derive(Debug)]
pub struct Responder {
    key: JobKey,
    job_id: u64,
    nonce_r: [u8; NONCE_LEN],
    state: ResponderState,
    /// The received Hello, kept for the MACs.
    hello: [u8; HELLO_LEN],
    request: Option<ConnectRequest>,
    /// MAC state over everything `mac_i` covers up to the Proof, filled by `accept`.
    proof_transcript: blake3::Hasher,
    /// MAC state over everything `mac_v` covers up to the Proof, filled by `accept`.
    verdict_transcript: blake3::Hasher,
    /// The session secret (over the Hello and the Challenge), once the Challenge is built.
    session: Option<[u8; MAC_LEN]>,
    outbox: Outbox,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponderState {
    AwaitingHello,
    Deciding,
    AwaitingProof,
    Established,
    Rejected,
    Failed,
}

impl ResponderState {
    const fn name(self) -> &'static str {
        match self {
            Self::AwaitingHello => "awaiting the Hello",
            Self::Deciding => "deciding on a Hello",
            Self::AwaitingProof => "awaiting the Proof",
            Self::Established => "established",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
        }
    }
}

impl Responder {
    /// Prepares to answer one Hello for job `job_id`. `nonce_r` must be fresh random bytes,
    /// never reused.
    pub fn new(key: JobKey, job_id: u64, nonce_r: [u8; NONCE_LEN]) -> Self {
        Self {
            key,
            job_id,
            nonce_r,
            state: ResponderState::AwaitingHello,
            hello: [0; HELLO_LEN],
            request: None,
            proof_transcript: blake3::Hasher::new(),
            verdict_transcript: blake3::Hasher::new(),
            session: None,
            outbox: Outbox::new(),
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

    /// Takes the initiator's Hello and returns who is connecting. Nothing is queued on
    /// success: decide with [`Responder::accept`] or [`Responder::reject`].
    ///
    /// # Errors
    /// Peer-caused (final): [`HandshakeError::VersionMismatch`] and
    /// [`HandshakeError::WrongJob`] (both queue a refusing Challenge, shorter than the
    /// Hello), [`HandshakeError::AuthenticationFailed`] (`mac_h` does not verify; a refusing
    /// Challenge `WrongKey` is queued, shorter than the Hello, and nothing is kept), [`HandshakeError::Malformed`],
    /// [`HandshakeError::UnexpectedMessage`]. Local: [`HandshakeError::UnexpectedCall`].
    pub fn handle_hello(&mut self, hello: &[u8]) -> Result<ConnectRequest, HandshakeError> {
        self.expect_state(ResponderState::AwaitingHello, "handle_hello")?;
        let result = self.parse_hello(hello);
        match result {
            Ok(request) => {
                self.request = Some(request);
                self.state = ResponderState::Deciding;
            }
            Err(error) => {
                self.state = ResponderState::Failed;
                if let Some(status) = refusal_status(&error) {
                    self.queue_refusal(status);
                }
            }
        }
        result
    }

    /// Accepts the connection: queues a Challenge carrying `params_r`.
    ///
    /// # Errors
    /// Local only: [`HandshakeError::UnexpectedCall`], [`HandshakeError::ParamsTooLong`].
    pub fn accept(&mut self, params_r: &[u8]) -> Result<(), HandshakeError> {
        self.expect_state(ResponderState::Deciding, "accept")?;
        check_params_len(params_r)?;
        let challenge = ChallengeRepr {
            status: ChallengeStatus::Ok,
            nonce_r: self.nonce_r,
            mac_r: [0; MAC_LEN],
            params_r,
        };
        let challenge_bytes = self.outbox.reserve(challenge.buffer_len());
        let mut view = Challenge::new_unchecked(challenge_bytes);
        challenge.emit(&mut view);
        let [head, tail] = view.authenticated_parts();
        let mac_r = mac(&self.key, LABEL_RESPONDER, &[&self.hello, head, tail]);
        self.session = Some(mac(&self.key, LABEL_SESSION, &[&self.hello, head, tail]));
        self.proof_transcript =
            keyed_transcript(&self.key, LABEL_INITIATOR, &[&self.hello, head, tail]);
        self.verdict_transcript =
            keyed_transcript(&self.key, LABEL_VERDICT, &[&self.hello, head, tail]);
        view.set_mac_r(&mac_r);
        self.state = ResponderState::AwaitingProof;
        Ok(())
    }

    /// Refuses the connection: queues a Challenge carrying `reason`. Send it, then close.
    ///
    /// # Errors
    /// Local only: [`HandshakeError::UnexpectedCall`].
    pub fn reject(&mut self, reason: RejectReason) -> Result<(), HandshakeError> {
        self.expect_state(ResponderState::Deciding, "reject")?;
        self.queue_refusal(match reason {
            RejectReason::NoSuchEndpoint => ChallengeStatus::NoSuchEndpoint,
            RejectReason::Busy => ChallengeStatus::Busy,
        });
        self.state = ResponderState::Rejected;
        Ok(())
    }

    /// Takes the initiator's Proof. On `Ok` the connection is established and the initiator's
    /// params (borrowed from `proof`) are returned; an `Accepted` Verdict is queued.
    ///
    /// # Errors
    /// Peer-caused (final): [`HandshakeError::AuthenticationFailed`] (queues a `BadProof`
    /// Verdict), [`HandshakeError::Malformed`], [`HandshakeError::VersionMismatch`],
    /// [`HandshakeError::UnexpectedMessage`]. Local: [`HandshakeError::UnexpectedCall`].
    pub fn handle_proof<'a>(&mut self, proof: &'a [u8]) -> Result<&'a [u8], HandshakeError> {
        self.expect_state(ResponderState::AwaitingProof, "handle_proof")?;
        let parsed = Proof::new_checked(proof)
            .map_err(|error| classify_wire_error(error, MessageKind::Proof))
            .and_then(|view| {
                let repr = ProofRepr::parse(&view).map_err(HandshakeError::Malformed)?;
                Ok((view, repr))
            });
        let (view, repr) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => {
                self.state = ResponderState::Failed;
                return Err(error);
            }
        };
        let proof_parts = view.authenticated_parts();
        let mut transcript = self.proof_transcript.clone();
        for part in proof_parts {
            transcript.update(part);
        }
        if constant_time_eq(&transcript.finalize().into(), &repr.mac_i) {
            self.queue_verdict(VerdictStatus::Accepted, proof_parts);
            self.state = ResponderState::Established;
            Ok(repr.params_i)
        } else {
            self.queue_verdict(VerdictStatus::BadProof, proof_parts);
            self.state = ResponderState::Failed;
            Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof,
            })
        }
    }

    /// Whether the handshake completed successfully.
    pub fn is_established(&self) -> bool {
        self.state == ResponderState::Established
    }

    /// The connection's session secret, once established (the initiator's
    /// [`Initiator::session_secret`](crate::handshake::Initiator::session_secret)).
    pub fn session_secret(&self) -> Option<[u8; MAC_LEN]> {
        self.session.filter(|_| self.is_established())
    }

    /// Whether the handshake ended without a connection (failed or rejected).
    pub fn is_failed(&self) -> bool {
        matches!(
            self.state,
            ResponderState::Failed | ResponderState::Rejected
        )
    }

    /// Who is connecting, once a valid Hello was received.
    pub fn request(&self) -> Option<ConnectRequest> {
        self.request
    }

    fn expect_state(
        &self,
        expected: ResponderState,
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

    /// Verifies a Hello ([`verify_hello`]) and keeps its bytes for the MACs.
    fn parse_hello(&mut self, bytes: &[u8]) -> Result<ConnectRequest, HandshakeError> {
        let request = verify_hello(&self.key, self.job_id, bytes)?;
        // A verified Hello is exactly HELLO_LEN bytes (its length field says so).
        self.hello.copy_from_slice(bytes);
        Ok(request)
    }

    /// Queues a Verdict with its MAC over the transcript and the Proof's `proof_parts`.
    fn queue_verdict(&mut self, status: VerdictStatus, proof_parts: [&[u8]; 2]) {
        let repr = VerdictRepr {
            status,
            mac_v: [0; MAC_LEN],
        };
        let mut view = Verdict::new_unchecked(self.outbox.reserve(VERDICT_LEN));
        repr.emit(&mut view);
        let mut transcript = self.verdict_transcript.clone();
        for part in proof_parts.into_iter().chain(view.authenticated_parts()) {
            transcript.update(part);
        }
        view.set_mac_v(&transcript.finalize().into());
    }

    /// Queues an unauthenticated Challenge refusing the connection.
    fn queue_refusal(&mut self, status: ChallengeStatus) {
        emit_refusal(status, self.outbox.reserve(CHALLENGE_FIXED_LEN));
    }
}
