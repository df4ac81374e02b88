//! Tests of the handshake: both state machines driven against each other, tampering,
//! replay, misuse, and property tests over mutated messages.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.

use proptest::prelude::*;
use quiver_wire::handshake::{
    field, Challenge, ChallengeRepr, ChallengeStatus, MessageKind, MessagePrefix, Proof, ProofRepr,
    Verdict, VerdictRepr, VerdictStatus, HELLO_LEN, MAC_LEN, MAX_MESSAGE_LEN, MAX_PARAMS_LEN,
    NONCE_LEN, PROOF_FIXED_LEN, VERSION,
};

use super::key::{mac, LABEL_INITIATOR};
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
fn wrong_key_is_caught_by_the_responder_at_the_hello() {
    for (initiator_key, responder_key) in [(1, 7), (7, 1)] {
        let (initiator, responder) = pair(initiator_key, responder_key, JOB_ID);
        let outcome = drive_plain(initiator, responder);
        assert_eq!(
            outcome.responder_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Hello
            })
        );
        assert!(outcome.responder.is_failed());
        assert!(!outcome.responder.is_established());
        assert_eq!(outcome.request_seen, None);
        // The answer is a refusal, shorter than the Hello, that the initiator reports as a
        // wrong key.
        assert_eq!(outcome.messages.len(), 2);
        assert!(outcome.messages[1].len() < outcome.messages[0].len());
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Hello
            })
        );
    }
}

#[test]
fn verify_hello_checks_the_key_before_anything_is_kept() {
    let mut initiator = Initiator::new(key(7), request(JOB_ID), [3; NONCE_LEN]);
    let hello = take_initiator(&mut initiator).unwrap();
    assert_eq!(hello.len(), HELLO_LEN);
    assert_eq!(verify_hello(&key(7), JOB_ID, &hello), Ok(request(JOB_ID)));
    assert_eq!(
        verify_hello(&key(8), JOB_ID, &hello),
        Err(HandshakeError::AuthenticationFailed {
            message: MessageKind::Hello
        })
    );
    assert_eq!(
        verify_hello(&key(7), JOB_ID ^ 1, &hello),
        Err(HandshakeError::WrongJob {
            ours: JOB_ID ^ 1,
            theirs: Some(JOB_ID)
        })
    );
    for offset in [field::HELLO_SRC_RANK.start, field::HELLO_MAC_H.end - 1] {
        let mut tampered = hello.clone();
        tampered[offset] ^= 1;
        assert_eq!(
            verify_hello(&key(7), JOB_ID, &tampered),
            Err(HandshakeError::AuthenticationFailed {
                message: MessageKind::Hello
            }),
            "tampered at {offset}"
        );
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
    // A tampered Hello no longer reaches the initiator's check: the responder refuses it
    // (`verify_hello_checks_the_key_before_anything_is_kept`).
    let tamper_at = [
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
    for offset in [field::HELLO_SRC_RANK.start + 3, field::HELLO_NONCE_I.start] {
        let (initiator, responder) = pair(7, 7, JOB_ID);
        let outcome = drive(initiator, responder, &mut |index, mut bytes| {
            if index == 0 {
                bytes[offset] ^= 0x10;
            }
            bytes
        });
        assert_eq!(
            outcome.responder_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Hello
            }),
            "tampering the Hello at {offset}"
        );
        assert_eq!(
            outcome.messages.len(),
            2,
            "a refusal answers a tampered Hello"
        );
        assert_eq!(
            outcome.initiator_error,
            Some(HandshakeError::AuthenticationFailed {
                message: MessageKind::Hello
            })
        );
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
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Mutation::Append { bytes }),
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
