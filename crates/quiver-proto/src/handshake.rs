//! The connection handshake: sans-IO state machines that prove both ends of a connection hold
//! the job's secret key (`docs/protocol.md`, section "Handshake"; byte layouts in
//! `quiver_wire::handshake`).
//!
//! ```text
//!  Initiator (connector)                              Responder (endpoint connected to)
//!  new(key, request, nonce_i) ── Hello ──────────────▶ handle_hello → ConnectRequest
//!                                                     accept(params_r) | reject(reason)
//!  handle_challenge(params_i) ◀──────── Challenge ──
//!    → params_r                ── Proof ──────────────▶ handle_proof → params_i
//!  handle_verdict            ◀──────────── Verdict ──
//! ```
//!
//! Both sides prove knowledge of the key with a keyed BLAKE3 MAC over the whole transcript so
//! far, each under its own label so that one side's MAC is never valid as the other's:
//!
//! - `mac_r = MAC(key, "quiver-hs-resp" ‖ hello ‖ challenge without mac_r)`
//! - `mac_i = MAC(key, "quiver-hs-init" ‖ hello ‖ challenge without mac_r ‖ proof without mac_i)`
//! - `mac_v = MAC(key, "quiver-hs-verd" ‖ hello ‖ challenge without mac_r ‖ proof without mac_i
//!   ‖ verdict without mac_v)`
//!
//! `mac_v` confirms to the initiator that the Verdict is the responder's answer to this very
//! Proof, so an initiator only reaches "established" if its responder did too.
//!
//! The Hello carries `nonce_i` and the Challenge `nonce_r`, both fresh random values supplied
//! by the caller, so a recorded Challenge or Proof does not verify in any other handshake.
//! The key never leaves the process. The `params` fields let the transport carry its own
//! parameters (ring sizes, …) covered by the MACs.
//!
//! What it does not do: rejections (a Challenge with a status other than `Ok`) carry no MAC,
//! so an attacker on the path can refuse a connection (but not open one). Every rank of a job
//! holds the same key, so a member can claim any rank in its Hello. Data sent after the
//! handshake is not authenticated by it.
//!
//! No I/O, no clock, no randomness, no allocation: the caller moves the bytes.

use quiver_wire::handshake::{
    Challenge, ChallengeRepr, ChallengeStatus, Hello, HelloRepr, MessageKind, Proof, ProofRepr,
    Verdict, VerdictRepr, VerdictStatus, WireError, CHALLENGE_FIXED_LEN, HELLO_LEN, MAC_LEN,
    MAX_MESSAGE_LEN, MAX_PARAMS_LEN, NONCE_LEN, VERDICT_LEN, VERSION,
};

/// Length of the job key in bytes.
pub const KEY_LEN: usize = 32;

/// Label mixed into the responder's MAC.
const LABEL_RESPONDER: &[u8; 14] = b"quiver-hs-resp";
/// Label mixed into the initiator's MAC.
const LABEL_INITIATOR: &[u8; 14] = b"quiver-hs-init";
/// Label mixed into the responder's Verdict MAC.
const LABEL_VERDICT: &[u8; 14] = b"quiver-hs-verd";

/// The job's shared secret key (`QUIVER_JOB_KEY`). `Debug` does not print it.
/// No `PartialEq`: comparing secrets is not something callers should need.
#[derive(Clone)]
pub struct JobKey([u8; KEY_LEN]);

impl JobKey {
    /// Wraps the 32 key bytes.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }
}

impl core::fmt::Debug for JobKey {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.write_str("JobKey(<redacted>)")
    }
}

/// Who connects to whom: the identities a Hello carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectRequest {
    /// The job both ends must belong to.
    pub job_id: u64,
    /// The initiator's rank.
    pub src_rank: u32,
    /// The initiator's endpoint port.
    pub src_port: u16,
    /// The port of the responder's endpoint being connected to.
    pub dst_port: u16,
}

/// Why a responder refuses a well-formed Hello from its own job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// No endpoint is open at the requested port.
    NoSuchEndpoint,
    /// The endpoint takes no more connections now.
    Busy,
}

/// Why a handshake failed, or why a call was refused.
///
/// Errors caused by the peer's bytes leave the state machine failed for good (close the
/// connection after sending what [`Initiator::poll_transmit`] / [`Responder::poll_transmit`]
/// still hand out). Local misuse ([`HandshakeError::UnexpectedCall`],
/// [`HandshakeError::ParamsTooLong`], [`HandshakeError::BufferTooSmall`]) changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer's bytes are not a valid message of the expected kind.
    #[error("malformed handshake message: {0}")]
    Malformed(WireError),
    /// The peer speaks another handshake version.
    #[error("handshake version mismatch: ours {ours}, theirs {theirs}")]
    VersionMismatch {
        /// [`VERSION`].
        ours: u8,
        /// The peer's version (equal to `ours` if the peer only said, in our version, that it
        /// does not support it).
        theirs: u8,
    },
    /// The two ends belong to different jobs.
    #[error("wrong job: ours {ours:#018x}, theirs {}", OptionalJobId(*theirs))]
    WrongJob {
        /// Our job id.
        ours: u64,
        /// The peer's job id: known to a responder, `None` for an initiator told by the
        /// responder.
        theirs: Option<u64>,
    },
    /// A MAC did not verify: the peer does not hold our job key (or the bytes were altered or
    /// replayed on the way).
    #[error("handshake authentication failed: the {message} MAC did not verify")]
    AuthenticationFailed {
        /// The message whose MAC failed. For an initiator, [`MessageKind::Proof`] means the
        /// responder rejected our proof in its Verdict.
        message: MessageKind,
    },
    /// The peer sent a valid message of the wrong kind for this step.
    #[error("unexpected handshake message: expected {expected}, got {actual}")]
    UnexpectedMessage {
        /// The kind this step takes.
        expected: MessageKind,
        /// The kind received.
        actual: MessageKind,
    },
    /// The responder has no endpoint at the requested port.
    #[error("no endpoint at port {port}")]
    NoSuchEndpoint {
        /// The requested port.
        port: u16,
    },
    /// The responder's endpoint takes no more connections now.
    #[error("endpoint at port {port} is busy")]
    Busy {
        /// The requested port.
        port: u16,
    },
    /// Local misuse: the method does not fit the current state (see the call protocol on the
    /// type), or a message is still waiting in `poll_transmit`.
    #[error("`{call}` is not allowed while {state}")]
    UnexpectedCall {
        /// The method called.
        call: &'static str,
        /// The state it was called in.
        state: &'static str,
    },
    /// Local misuse: transport params longer than [`MAX_PARAMS_LEN`].
    #[error("params are {len} bytes, at most {max} allowed")]
    ParamsTooLong {
        /// Length given.
        len: usize,
        /// [`MAX_PARAMS_LEN`].
        max: usize,
    },
    /// Local misuse: the buffer given to `poll_transmit` cannot hold the pending message.
    /// [`MAX_MESSAGE_LEN`] bytes always suffice.
    #[error("output buffer holds {actual} bytes, message needs {needed}")]
    BufferTooSmall {
        /// Length of the pending message.
        needed: usize,
        /// Length of the buffer given.
        actual: usize,
    },
}

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
    /// Starts a handshake and queues the Hello. `nonce_i` must be fresh random bytes, never
    /// reused.
    pub fn new(key: JobKey, request: ConnectRequest, nonce_i: [u8; NONCE_LEN]) -> Self {
        let repr = HelloRepr {
            job_id: request.job_id,
            src_rank: request.src_rank,
            src_port: request.src_port,
            dst_port: request.dst_port,
            nonce_i,
        };
        let mut hello = [0u8; HELLO_LEN];
        repr.emit(&mut Hello::new_unchecked(&mut hello[..]));
        let mut outbox = Outbox::new();
        outbox.queue(&hello);
        Self {
            key,
            request,
            hello,
            state: InitiatorState::AwaitingChallenge,
            verdict_transcript: blake3::Hasher::new(),
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
    /// [`HandshakeError::WrongJob`] (both queue a refusing Challenge),
    /// [`HandshakeError::Malformed`], [`HandshakeError::UnexpectedMessage`]. Local:
    /// [`HandshakeError::UnexpectedCall`].
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
                match error {
                    HandshakeError::VersionMismatch { .. } => {
                        self.queue_refusal(ChallengeStatus::UnsupportedVersion);
                    }
                    HandshakeError::WrongJob { .. } => {
                        self.queue_refusal(ChallengeStatus::WrongJob);
                    }
                    _ => {}
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

    /// Parses a Hello, checks the job id and keeps its bytes for the MACs.
    fn parse_hello(&mut self, bytes: &[u8]) -> Result<ConnectRequest, HandshakeError> {
        let view = Hello::new_checked(bytes)
            .map_err(|error| classify_wire_error(error, MessageKind::Hello))?;
        let repr = HelloRepr::parse(&view).map_err(HandshakeError::Malformed)?;
        if repr.job_id != self.job_id {
            return Err(HandshakeError::WrongJob {
                ours: self.job_id,
                theirs: Some(repr.job_id),
            });
        }
        // Emitting the parsed repr reproduces the received bytes: a Hello has no reserved or
        // unparsed bits, so its encoding is canonical.
        repr.emit(&mut Hello::new_unchecked(&mut self.hello[..]));
        debug_assert_eq!(&self.hello[..], bytes);
        Ok(ConnectRequest {
            job_id: repr.job_id,
            src_rank: repr.src_rank,
            src_port: repr.src_port,
            dst_port: repr.dst_port,
        })
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
        let repr = ChallengeRepr {
            status,
            nonce_r: [0; NONCE_LEN],
            mac_r: [0; MAC_LEN],
            params_r: &[],
        };
        repr.emit(&mut Challenge::new_unchecked(
            self.outbox.reserve(CHALLENGE_FIXED_LEN),
        ));
    }
}

/// Compares two MACs in time independent of where they differ.
pub fn constant_time_eq(left: &[u8; MAC_LEN], right: &[u8; MAC_LEN]) -> bool {
    let mut difference = 0u8;
    for (a, b) in left.iter().zip(right.iter()) {
        difference |= a ^ b;
    }
    // Keeps the optimiser from turning the loop into an early-exit comparison.
    core::hint::black_box(difference) == 0
}

/// One pending outgoing message. At most one message is ever in flight per side.
#[derive(Debug)]
struct Outbox {
    bytes: [u8; MAX_MESSAGE_LEN],
    len: usize,
}

impl Outbox {
    const fn new() -> Self {
        Self {
            bytes: [0; MAX_MESSAGE_LEN],
            len: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Returns a zeroed buffer of `len` bytes that will be sent next. The callers check that
    /// the outbox is empty and `len <= MAX_MESSAGE_LEN` (params are limited before).
    fn reserve(&mut self, len: usize) -> &mut [u8] {
        debug_assert!(self.is_empty());
        assert!(
            len <= MAX_MESSAGE_LEN,
            "handshake message over MAX_MESSAGE_LEN"
        );
        self.len = len;
        let slot = &mut self.bytes[..len];
        slot.fill(0);
        slot
    }

    fn queue(&mut self, message: &[u8]) {
        self.reserve(message.len()).copy_from_slice(message);
    }

    fn poll_transmit(&mut self, out: &mut [u8]) -> Result<Option<usize>, HandshakeError> {
        if self.len == 0 {
            return Ok(None);
        }
        let Some(destination) = out.get_mut(..self.len) else {
            return Err(HandshakeError::BufferTooSmall {
                needed: self.len,
                actual: out.len(),
            });
        };
        destination.copy_from_slice(&self.bytes[..self.len]);
        let len = self.len;
        self.len = 0;
        Ok(Some(len))
    }
}

/// Maps a structural wire error on a message we expected to be `expected`.
fn classify_wire_error(error: WireError, expected: MessageKind) -> HandshakeError {
    match error {
        WireError::UnsupportedVersion { actual, .. } => HandshakeError::VersionMismatch {
            ours: VERSION,
            theirs: actual,
        },
        WireError::WrongKind { actual, .. } => {
            HandshakeError::UnexpectedMessage { expected, actual }
        }
        other => HandshakeError::Malformed(other),
    }
}

fn check_params_len(params: &[u8]) -> Result<(), HandshakeError> {
    if params.len() > MAX_PARAMS_LEN {
        return Err(HandshakeError::ParamsTooLong {
            len: params.len(),
            max: MAX_PARAMS_LEN,
        });
    }
    Ok(())
}

/// Keyed BLAKE3 over `label` followed by `parts`.
fn mac(key: &JobKey, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    keyed_transcript(key, label, parts).finalize().into()
}

/// A keyed BLAKE3 state fed with `label` and `parts`, to be continued with later messages.
fn keyed_transcript(key: &JobKey, label: &[u8], parts: &[&[u8]]) -> blake3::Hasher {
    let mut hasher = blake3::Hasher::new_keyed(&key.0);
    hasher.update(label);
    for part in parts {
        hasher.update(part);
    }
    hasher
}

/// Shows an optional job id in error messages.
struct OptionalJobId(Option<u64>);

impl core::fmt::Display for OptionalJobId {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(job_id) => write!(formatter, "{job_id:#018x}"),
            None => formatter.write_str("unknown (the responder refused ours)"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.
mod tests {
    use proptest::prelude::*;
    use quiver_wire::handshake::{field, MessagePrefix, PROOF_FIXED_LEN};

    use super::*;

    const JOB_ID: u64 = 0x1234_5678_9abc_def0;
    const PARAMS_R: &[u8] = b"ring=4096";
    const PARAMS_I: &[u8] = b"ring=8192;fd=1";

    fn key(byte: u8) -> JobKey {
        JobKey::from_bytes([byte; KEY_LEN])
    }

    fn request(job_id: u64) -> ConnectRequest {
        ConnectRequest {
            job_id,
            src_rank: 3,
            src_port: 10,
            dst_port: 20,
        }
    }

    fn take_initiator(initiator: &mut Initiator) -> Option<Vec<u8>> {
        let mut buffer = [0u8; MAX_MESSAGE_LEN];
        let len = initiator.poll_transmit(&mut buffer).unwrap()?;
        Some(buffer[..len].to_vec())
    }

    fn take_responder(responder: &mut Responder) -> Option<Vec<u8>> {
        let mut buffer = [0u8; MAX_MESSAGE_LEN];
        let len = responder.poll_transmit(&mut buffer).unwrap()?;
        Some(buffer[..len].to_vec())
    }

    /// What a driven handshake did: the first error each side saw and the messages sent.
    #[derive(Debug)]
    struct Outcome {
        initiator: Initiator,
        responder: Responder,
        initiator_error: Option<HandshakeError>,
        responder_error: Option<HandshakeError>,
        request_seen: Option<ConnectRequest>,
        params_r_seen: Option<Vec<u8>>,
        params_i_seen: Option<Vec<u8>>,
        /// The messages as delivered (after `deliver`), in order.
        messages: Vec<Vec<u8>>,
    }

    /// Runs a handshake between fresh state machines. `deliver(index, bytes)` sees every
    /// message (0 Hello, 1 Challenge, 2 Proof, 3 Verdict) and returns what arrives. Like a
    /// real driver, it sends whatever a side has queued even after that side failed.
    fn drive(
        initiator: Initiator,
        responder: Responder,
        deliver: &mut dyn FnMut(usize, Vec<u8>) -> Vec<u8>,
    ) -> Outcome {
        let mut outcome = Outcome {
            initiator,
            responder,
            initiator_error: None,
            responder_error: None,
            request_seen: None,
            params_r_seen: None,
            params_i_seen: None,
            messages: Vec::new(),
        };
        let mut send = |outcome: &mut Outcome, index: usize, bytes: Vec<u8>| {
            let delivered = deliver(index, bytes);
            outcome.messages.push(delivered.clone());
            delivered
        };

        let hello = take_initiator(&mut outcome.initiator).expect("new queues the Hello");
        let hello = send(&mut outcome, 0, hello);
        match outcome.responder.handle_hello(&hello) {
            Ok(request) => {
                outcome.request_seen = Some(request);
                outcome.responder.accept(PARAMS_R).unwrap();
            }
            Err(error) => outcome.responder_error = Some(error),
        }

        let Some(challenge) = take_responder(&mut outcome.responder) else {
            return outcome;
        };
        let challenge = send(&mut outcome, 1, challenge);
        match outcome.initiator.handle_challenge(&challenge, PARAMS_I) {
            Ok(params_r) => outcome.params_r_seen = Some(params_r.to_vec()),
            Err(error) => {
                outcome.initiator_error = Some(error);
                assert_eq!(take_initiator(&mut outcome.initiator), None);
                return outcome;
            }
        }

        let proof = take_initiator(&mut outcome.initiator).expect("a Proof follows a Challenge");
        let proof = send(&mut outcome, 2, proof);
        match outcome.responder.handle_proof(&proof) {
            Ok(params_i) => outcome.params_i_seen = Some(params_i.to_vec()),
            Err(error) => outcome.responder_error = Some(error),
        }

        let Some(verdict) = take_responder(&mut outcome.responder) else {
            return outcome;
        };
        let verdict = send(&mut outcome, 3, verdict);
        if let Err(error) = outcome.initiator.handle_verdict(&verdict) {
            outcome.initiator_error = Some(error);
        }
        outcome
    }

    fn pair(initiator_key: u8, responder_key: u8, initiator_job: u64) -> (Initiator, Responder) {
        (
            Initiator::new(key(initiator_key), request(initiator_job), [0xa1; 32]),
            Responder::new(key(responder_key), JOB_ID, [0xb2; 32]),
        )
    }

    fn drive_plain(initiator: Initiator, responder: Responder) -> Outcome {
        drive(initiator, responder, &mut |_, bytes| bytes)
    }

    #[test]
    fn happy_path_establishes_both_sides_and_exchanges_params() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let mut outcome = drive_plain(initiator, responder);
        assert_eq!(outcome.initiator_error, None);
        assert_eq!(outcome.responder_error, None);
        assert!(outcome.initiator.is_established());
        assert!(outcome.responder.is_established());
        assert_eq!(outcome.request_seen, Some(request(JOB_ID)));
        assert_eq!(outcome.responder.request(), Some(request(JOB_ID)));
        assert_eq!(outcome.params_r_seen.as_deref(), Some(PARAMS_R));
        assert_eq!(outcome.params_i_seen.as_deref(), Some(PARAMS_I));
        assert_eq!(outcome.messages.len(), 4);
        assert_eq!(take_initiator(&mut outcome.initiator), None);
        assert_eq!(take_responder(&mut outcome.responder), None);
        // Nothing is accepted after the end.
        assert!(matches!(
            outcome.initiator.handle_verdict(&outcome.messages[3]),
            Err(HandshakeError::UnexpectedCall { .. })
        ));
    }

    #[test]
    fn handshake_is_deterministic() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let first = drive_plain(initiator, responder).messages;
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let second = drive_plain(initiator, responder).messages;
        assert_eq!(first, second);
        // The key never appears in the messages.
        for message in &first {
            assert!(!message
                .windows(KEY_LEN)
                .any(|window| window == [7u8; KEY_LEN]));
        }
    }

    #[test]
    fn wrong_key_is_caught_by_the_initiator_at_the_challenge() {
        for (initiator_key, responder_key) in [(1, 7), (7, 1)] {
            let (initiator, responder) = pair(initiator_key, responder_key, JOB_ID);
            let outcome = drive_plain(initiator, responder);
            assert_eq!(
                outcome.initiator_error,
                Some(HandshakeError::AuthenticationFailed {
                    message: MessageKind::Challenge
                })
            );
            assert!(outcome.initiator.is_failed());
            assert!(!outcome.responder.is_established());
            // The initiator sent no Proof, so the responder only sees the connection close.
            assert_eq!(outcome.messages.len(), 2);
        }
    }

    #[test]
    fn forged_proof_is_caught_by_the_responder_and_reported_to_the_initiator() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let outcome = drive(initiator, responder, &mut |index, mut bytes| {
            if index == 2 {
                bytes[field::PROOF_MAC_I.start] ^= 1;
            }
            bytes
        });
        assert_eq!(
            outcome.responder_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof
            })
        );
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof
            })
        );
        assert!(outcome.responder.is_failed());
        assert!(outcome.initiator.is_failed());
    }

    #[test]
    fn proof_made_with_another_key_fails_at_the_responder() {
        let mut responder = Responder::new(key(7), JOB_ID, [0xb2; 32]);
        let mut initiator = Initiator::new(key(7), request(JOB_ID), [0xa1; 32]);
        let hello = take_initiator(&mut initiator).unwrap();
        responder.handle_hello(&hello).unwrap();
        responder.accept(PARAMS_R).unwrap();
        let challenge = take_responder(&mut responder).unwrap();
        // An attacker who skips checking mac_r and signs with its own key.
        let mut proof = vec![0u8; PROOF_FIXED_LEN];
        ProofRepr {
            mac_i: [0; MAC_LEN],
            params_i: &[],
        }
        .emit(&mut Proof::new_unchecked(&mut proof[..]));
        let challenge_view = Challenge::new_checked(&challenge[..]).unwrap();
        let [challenge_head, challenge_tail] = challenge_view.authenticated_parts();
        let forged = mac(
            &key(9),
            LABEL_INITIATOR,
            &[&hello, challenge_head, challenge_tail, &proof[..]],
        );
        Proof::new_unchecked(&mut proof[..]).set_mac_i(&forged);
        assert_eq!(
            responder.handle_proof(&proof),
            Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof
            })
        );
        let verdict = take_responder(&mut responder).unwrap();
        assert_eq!(
            VerdictRepr::parse(&Verdict::new_checked(&verdict[..]).unwrap())
                .unwrap()
                .status,
            VerdictStatus::BadProof
        );

        // The same construction with the right key is accepted (the forgery test is real).
        let mut responder = Responder::new(key(7), JOB_ID, [0xb2; 32]);
        responder.handle_hello(&hello).unwrap();
        responder.accept(PARAMS_R).unwrap();
        take_responder(&mut responder).unwrap();
        let genuine = mac(
            &key(7),
            LABEL_INITIATOR,
            &[&hello, challenge_head, challenge_tail, &proof[..8]],
        );
        Proof::new_unchecked(&mut proof[..]).set_mac_i(&genuine);
        assert_eq!(responder.handle_proof(&proof), Ok(&[][..]));
    }

    #[test]
    fn replayed_challenge_fails_against_a_fresh_hello() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let recorded = drive_plain(initiator, responder).messages;
        let mut initiator = Initiator::new(key(7), request(JOB_ID), [0xc3; 32]);
        take_initiator(&mut initiator).unwrap();
        assert_eq!(
            initiator.handle_challenge(&recorded[1], PARAMS_I),
            Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Challenge
            })
        );
    }

    #[test]
    fn replayed_hello_and_proof_fail_against_a_fresh_nonce() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let recorded = drive_plain(initiator, responder).messages;
        let mut responder = Responder::new(key(7), JOB_ID, [0xd4; 32]);
        assert_eq!(responder.handle_hello(&recorded[0]), Ok(request(JOB_ID)));
        responder.accept(PARAMS_R).unwrap();
        take_responder(&mut responder).unwrap();
        assert_eq!(
            responder.handle_proof(&recorded[2]),
            Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof
            })
        );
        assert!(!responder.is_established());
    }

    #[test]
    fn tampered_hello_or_challenge_fails_at_the_initiator() {
        let tamper_at = [
            (0, field::HELLO_SRC_RANK.start + 3),
            (0, field::HELLO_NONCE_I.start),
            (1, field::CHALLENGE_NONCE_R.start),
            (1, field::CHALLENGE_MAC_R.end - 1),
            (1, field::CHALLENGE_PARAMS_R.start),
        ];
        for (message, offset) in tamper_at {
            let (initiator, responder) = pair(7, 7, JOB_ID);
            let outcome = drive(initiator, responder, &mut |index, mut bytes| {
                if index == message {
                    bytes[offset] ^= 0x10;
                }
                bytes
            });
            assert_eq!(
                outcome.initiator_error,
                Some(HandshakeError::AuthenticationFailed {
                    message: MessageKind::Challenge
                }),
                "tampering message {message} at {offset}"
            );
            assert!(!outcome.responder.is_established());
        }
    }

    #[test]
    fn wrong_job_is_refused_and_both_sides_say_so() {
        let (initiator, responder) = pair(7, 7, JOB_ID + 1);
        let outcome = drive_plain(initiator, responder);
        assert_eq!(
            outcome.responder_error,
            Some(HandshakeError::WrongJob {
                ours: JOB_ID,
                theirs: Some(JOB_ID + 1)
            })
        );
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::WrongJob {
                ours: JOB_ID + 1,
                theirs: None
            })
        );
        assert!(outcome.responder.is_failed());
        assert_eq!(outcome.responder.request(), None);
    }

    #[test]
    fn version_mismatch_is_reported_on_both_sides() {
        let mut initiator = Initiator::new(key(7), request(JOB_ID), [0xa1; 32]);
        let mut hello = take_initiator(&mut initiator).unwrap();
        MessagePrefix::new_unchecked(&mut hello[..]).set_version(VERSION + 1);

        let mut responder = Responder::new(key(7), JOB_ID, [0xb2; 32]);
        assert_eq!(
            responder.handle_hello(&hello),
            Err(HandshakeError::VersionMismatch {
                ours: VERSION,
                theirs: VERSION + 1
            })
        );
        // The refusal goes out in our version, status UnsupportedVersion.
        let refusal = take_responder(&mut responder).unwrap();
        let refusal_repr = ChallengeRepr::parse(&Challenge::new_checked(&refusal[..]).unwrap());
        assert_eq!(
            refusal_repr.unwrap().status,
            ChallengeStatus::UnsupportedVersion
        );

        // A newer peer sees our version in the prefix; we play that peer by reading a
        // Challenge of another version.
        let mut foreign_challenge = refusal.clone();
        MessagePrefix::new_unchecked(&mut foreign_challenge[..]).set_version(VERSION + 1);
        assert_eq!(
            initiator.handle_challenge(&foreign_challenge, PARAMS_I),
            Err(HandshakeError::VersionMismatch {
                ours: VERSION,
                theirs: VERSION + 1
            })
        );
        // The prefix alone is enough to tell.
        let mut initiator = Initiator::new(key(7), request(JOB_ID), [0xa1; 32]);
        take_initiator(&mut initiator).unwrap();
        assert_eq!(
            initiator.handle_challenge(&foreign_challenge[..8], PARAMS_I),
            Err(HandshakeError::VersionMismatch {
                ours: VERSION,
                theirs: VERSION + 1
            })
        );
        // An initiator of our version told "unsupported" in our version.
        let mut initiator = Initiator::new(key(7), request(JOB_ID), [0xa1; 32]);
        take_initiator(&mut initiator).unwrap();
        assert!(matches!(
            initiator.handle_challenge(&refusal, PARAMS_I),
            Err(HandshakeError::VersionMismatch { .. })
        ));
    }

    #[test]
    fn rejections_reach_the_initiator() {
        for (reason, expected) in [
            (
                RejectReason::NoSuchEndpoint,
                HandshakeError::NoSuchEndpoint { port: 20 },
            ),
            (RejectReason::Busy, HandshakeError::Busy { port: 20 }),
        ] {
            let (mut initiator, mut responder) = pair(7, 7, JOB_ID);
            let hello = take_initiator(&mut initiator).unwrap();
            let request_seen = responder.handle_hello(&hello).unwrap();
            assert_eq!(request_seen.dst_port, 20);
            responder.reject(reason).unwrap();
            assert!(responder.is_failed());
            let refusal = take_responder(&mut responder).unwrap();
            assert_eq!(
                initiator.handle_challenge(&refusal, PARAMS_I),
                Err(expected)
            );
            assert!(initiator.is_failed());
            assert_eq!(take_initiator(&mut initiator), None);
        }
    }

    #[test]
    fn truncated_messages_are_malformed_on_every_length() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let messages = drive_plain(initiator, responder).messages;
        for (index, message) in messages.iter().enumerate() {
            for len in 0..message.len() {
                let (initiator, responder) = pair(7, 7, JOB_ID);
                let outcome = drive(initiator, responder, &mut |at, bytes| {
                    if at == index {
                        bytes[..len].to_vec()
                    } else {
                        bytes
                    }
                });
                let error = if index % 2 == 0 {
                    outcome.responder_error
                } else {
                    outcome.initiator_error
                };
                assert!(
                    matches!(error, Some(HandshakeError::Malformed(_))),
                    "message {index} cut to {len} bytes gave {error:?}"
                );
                assert!(!outcome.initiator.is_established());
            }
        }
    }

    #[test]
    fn messages_of_the_wrong_kind_are_unexpected() {
        let (mut initiator, mut responder) = pair(7, 7, JOB_ID);
        let hello = take_initiator(&mut initiator).unwrap();
        assert_eq!(
            initiator.handle_challenge(&hello, PARAMS_I),
            Err(HandshakeError::UnexpectedMessage {
                expected: MessageKind::Challenge,
                actual: MessageKind::Hello
            })
        );
        let verdict = [b'Q', b'V', b'H', b'S', VERSION, 4, 0, 12, 0, 0, 0, 0];
        assert_eq!(
            responder.handle_hello(&verdict),
            Err(HandshakeError::UnexpectedMessage {
                expected: MessageKind::Hello,
                actual: MessageKind::Verdict
            })
        );
        // No refusal is queued for a message that is not a Hello at all.
        assert_eq!(take_responder(&mut responder), None);
    }

    #[test]
    fn misuse_is_refused_without_changing_state() {
        let (mut initiator, mut responder) = pair(7, 7, JOB_ID);
        assert!(matches!(
            responder.accept(PARAMS_R),
            Err(HandshakeError::UnexpectedCall { call: "accept", .. })
        ));
        assert!(matches!(
            initiator.handle_verdict(&[]),
            Err(HandshakeError::UnexpectedCall { .. })
        ));
        // The Hello has not been taken out yet.
        assert!(matches!(
            initiator.handle_challenge(&[], PARAMS_I),
            Err(HandshakeError::UnexpectedCall { .. })
        ));
        let mut small = [0u8; 10];
        assert_eq!(
            initiator.poll_transmit(&mut small),
            Err(HandshakeError::BufferTooSmall {
                needed: HELLO_LEN,
                actual: 10
            })
        );
        let hello = take_initiator(&mut initiator).unwrap();
        responder.handle_hello(&hello).unwrap();
        let too_long = [0u8; MAX_PARAMS_LEN + 1];
        assert_eq!(
            responder.accept(&too_long),
            Err(HandshakeError::ParamsTooLong {
                len: MAX_PARAMS_LEN + 1,
                max: MAX_PARAMS_LEN
            })
        );
        responder.accept(&too_long[..MAX_PARAMS_LEN]).unwrap();
        // The Challenge is still queued: a Proof cannot be handled yet.
        assert!(matches!(
            responder.handle_proof(&[]),
            Err(HandshakeError::UnexpectedCall { .. })
        ));
        let challenge = take_responder(&mut responder).unwrap();
        assert_eq!(challenge.len(), MAX_MESSAGE_LEN);
        assert_eq!(
            initiator.handle_challenge(&challenge, &too_long),
            Err(HandshakeError::ParamsTooLong {
                len: MAX_PARAMS_LEN + 1,
                max: MAX_PARAMS_LEN
            })
        );
        let params_r = initiator
            .handle_challenge(&challenge, &too_long[..MAX_PARAMS_LEN])
            .unwrap();
        assert_eq!(params_r, &too_long[..MAX_PARAMS_LEN]);
        let proof = take_initiator(&mut initiator).unwrap();
        responder.handle_proof(&proof).unwrap();
        let verdict = take_responder(&mut responder).unwrap();
        initiator.handle_verdict(&verdict).unwrap();
        assert!(initiator.is_established() && responder.is_established());
    }

    /// Found by the `handshake_responder` fuzz target when the Verdict had no MAC: break the
    /// Proof (the responder answers BadProof), then flip the Verdict's status to Accepted.
    #[test]
    fn corrupted_proof_and_flipped_verdict_cannot_fake_acceptance() {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let outcome = drive(initiator, responder, &mut |index, mut bytes| {
            match index {
                2 => bytes[field::PROOF_MAC_I.start] ^= 0x51,
                3 => bytes[field::VERDICT_STATUS] ^= 1,
                _ => {}
            }
            bytes
        });
        assert_eq!(
            outcome.responder_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Proof
            })
        );
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Verdict
            })
        );
        assert!(!outcome.initiator.is_established());
    }

    #[test]
    fn altered_or_replayed_verdict_fails_at_the_initiator() {
        // The status flipped from Accepted: the responder is established, the initiator is not.
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let outcome = drive(initiator, responder, &mut |index, mut bytes| {
            if index == 3 {
                bytes[field::VERDICT_STATUS] ^= 1;
            }
            bytes
        });
        assert!(outcome.responder.is_established());
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Verdict
            })
        );

        // An Accepted Verdict from another handshake does not confirm this one.
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let recorded = drive_plain(initiator, responder).messages;
        let (initiator, responder) = (
            Initiator::new(key(7), request(JOB_ID), [0xe5; 32]),
            Responder::new(key(7), JOB_ID, [0xf6; 32]),
        );
        let outcome = drive(initiator, responder, &mut |index, bytes| {
            if index == 3 {
                recorded[3].clone()
            } else {
                bytes
            }
        });
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Verdict
            })
        );
    }

    #[test]
    fn constant_time_eq_compares() {
        let a = [5u8; 32];
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        for index in 0..32 {
            b = a;
            b[index] ^= 0x80;
            assert!(!constant_time_eq(&a, &b));
        }
    }

    #[test]
    fn key_is_not_printed() {
        let printed = format!("{:?}", key(0xab));
        assert!(!printed.contains("171") && !printed.contains("ab"));
        let initiator = Initiator::new(key(0xab), request(JOB_ID), [0; 32]);
        assert!(!format!("{initiator:?}").contains("171, 171"));
    }

    #[test]
    fn errors_display_context() {
        let error = HandshakeError::WrongJob {
            ours: 1,
            theirs: None,
        };
        assert!(error.to_string().contains("0x0000000000000001"));
        let error = HandshakeError::VersionMismatch { ours: 1, theirs: 2 };
        assert_eq!(
            error.to_string(),
            "handshake version mismatch: ours 1, theirs 2"
        );
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Flip { index: usize, bit: u8 },
        Set { index: usize, value: u8 },
        Truncate { len: usize },
        Append { bytes: Vec<u8> },
        Replace { bytes: Vec<u8> },
    }

    impl Mutation {
        fn apply(&self, original: &[u8]) -> Vec<u8> {
            let mut bytes = original.to_vec();
            if bytes.is_empty() && !matches!(self, Self::Append { .. } | Self::Replace { .. }) {
                return bytes;
            }
            match self {
                Self::Flip { index, bit } => {
                    let at = index % bytes.len();
                    bytes[at] ^= 1 << (bit % 8);
                }
                Self::Set { index, value } => {
                    let at = index % bytes.len();
                    bytes[at] = *value;
                }
                Self::Truncate { len } => bytes.truncate(len % bytes.len()),
                Self::Append { bytes: extra } => bytes.extend_from_slice(extra),
                Self::Replace { bytes: other } => bytes.clone_from(other),
            }
            bytes
        }
    }

    fn mutation_strategy() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(index, bit)| Mutation::Flip { index, bit }),
            (any::<usize>(), any::<u8>()).prop_map(|(index, value)| Mutation::Set { index, value }),
            any::<usize>().prop_map(|len| Mutation::Truncate { len }),
            proptest::collection::vec(any::<u8>(), 1..64)
                .prop_map(|bytes| Mutation::Append { bytes }),
            proptest::collection::vec(any::<u8>(), 0..400)
                .prop_map(|bytes| Mutation::Replace { bytes }),
        ]
    }

    proptest! {
        /// Any changes to any messages never panic and never let the initiator finish; the
        /// responder can only have finished if nothing but the Verdict (which it sends after
        /// deciding) was changed. And whenever the initiator finishes, so did the responder.
        #[test]
        fn mutated_messages_never_authenticate(
            mutations in proptest::collection::vec((0usize..4, mutation_strategy()), 1..5),
            nonce_i: [u8; 32],
            nonce_r: [u8; 32],
        ) {
            let mut changed = [false; 4];
            let outcome = drive(
                Initiator::new(key(7), request(JOB_ID), nonce_i),
                Responder::new(key(7), JOB_ID, nonce_r),
                &mut |index, original| {
                    let mut bytes = original.clone();
                    for (target, mutation) in &mutations {
                        if *target == index {
                            bytes = mutation.apply(&bytes);
                        }
                    }
                    changed[index] = bytes != original;
                    bytes
                },
            );
            prop_assert!(
                !outcome.initiator.is_established() || outcome.responder.is_established()
            );
            if changed.iter().any(|&message_changed| message_changed) {
                prop_assert!(!outcome.initiator.is_established());
                prop_assert!(
                    outcome.initiator_error.is_some() || outcome.responder_error.is_some()
                );
            } else {
                prop_assert!(outcome.initiator.is_established());
            }
            if changed[..3].iter().any(|&message_changed| message_changed) {
                prop_assert!(!outcome.responder.is_established());
            }
        }

        /// Arbitrary bytes at every step never panic and never authenticate.
        #[test]
        fn arbitrary_bytes_never_authenticate(
            hello in proptest::collection::vec(any::<u8>(), 0..80),
            proof in proptest::collection::vec(any::<u8>(), 0..80),
            challenge in proptest::collection::vec(any::<u8>(), 0..120),
            verdict in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let mut responder = Responder::new(key(7), JOB_ID, [1; 32]);
            if responder.handle_hello(&hello).is_ok() {
                responder.accept(PARAMS_R).unwrap();
                take_responder(&mut responder).unwrap();
                prop_assert!(responder.handle_proof(&proof).is_err());
            }
            prop_assert!(!responder.is_established());

            let mut initiator = Initiator::new(key(7), request(JOB_ID), [2; 32]);
            take_initiator(&mut initiator).unwrap();
            prop_assert!(initiator.handle_challenge(&challenge, PARAMS_I).is_err());
            prop_assert!(initiator.handle_verdict(&verdict).is_err());
            prop_assert!(!initiator.is_established());
        }
    }
}
