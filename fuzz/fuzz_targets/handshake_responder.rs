//! Arbitrary byte sequences fed into handshake state machines.
//!
//! Input: one mode byte, then messages as `[len u8][len bytes]` (a short tail is one last
//! message).
//! - mode bit 0 clear: the messages are fed raw, in order, to a Responder (handle_hello,
//!   handle_proof, then every method again) and to an Initiator (handle_challenge,
//!   handle_verdict). The fuzzer does not know the key, and genuine messages it may hold were
//!   made with other nonces, so nothing may ever authenticate.
//! - mode bit 0 set: a genuine handshake runs, and message i (Hello, Challenge, Proof,
//!   Verdict) is XOR-ed with fuzz message i (extra bytes are appended, a zero-length message
//!   truncates to the mode byte's high bits). A changed Hello, Challenge or Proof must stop both
//!   sides; a changed Verdict must stop the initiator.
//!
//! Bit 1 makes the responder reject instead of accept; the other bits pick the params length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_proto::handshake::{ConnectRequest, Initiator, JobKey, RejectReason, Responder};
use quiver_wire::handshake::MAX_MESSAGE_LEN;

const JOB_ID: u64 = 0x0123_4567_89ab_cdef;
const PARAMS: [u8; 64] = [0x5a; 64];

fn key() -> JobKey {
    JobKey::from_bytes([0x42; 32])
}

fn request() -> ConnectRequest {
    ConnectRequest {
        job_id: JOB_ID,
        src_rank: 1,
        src_port: 2,
        dst_port: 3,
    }
}

/// Splits the input into length-prefixed messages.
fn messages(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        let len = usize::from(len).min(rest.len());
        out.push(&rest[..len]);
        data = &rest[len..];
    }
    out
}

fn drain_responder(responder: &mut Responder) -> Option<Vec<u8>> {
    let mut buffer = [0u8; MAX_MESSAGE_LEN];
    let len = responder
        .poll_transmit(&mut buffer)
        .expect("MAX_MESSAGE_LEN always suffices")?;
    Some(buffer[..len].to_vec())
}

fn drain_initiator(initiator: &mut Initiator) -> Option<Vec<u8>> {
    let mut buffer = [0u8; MAX_MESSAGE_LEN];
    let len = initiator
        .poll_transmit(&mut buffer)
        .expect("MAX_MESSAGE_LEN always suffices")?;
    Some(buffer[..len].to_vec())
}

/// Nonces of the genuine run in mutation mode (and of the checked-in seeds).
const GENUINE_NONCE_I: [u8; 32] = [9; 32];
const GENUINE_NONCE_R: [u8; 32] = [7; 32];
/// Nonces of raw mode: different, so that genuine messages the fuzzer holds (seeds, or
/// anything copied from mutation mode) are replays and must fail.
const RAW_NONCE_I: [u8; 32] = [0x19; 32];
const RAW_NONCE_R: [u8; 32] = [0x17; 32];

fn raw(mode: u8, inputs: &[&[u8]]) {
    let params = &PARAMS[..usize::from(mode >> 2).min(PARAMS.len())];
    let mut responder = Responder::new(key(), JOB_ID, RAW_NONCE_R);
    let mut initiator = Initiator::new(key(), request(), RAW_NONCE_I);
    drain_initiator(&mut initiator);
    for (index, input) in inputs.iter().enumerate() {
        match index {
            0 => {
                if responder.handle_hello(input).is_ok() {
                    if mode & 2 == 0 {
                        responder.accept(params).expect("state allows accept");
                    } else {
                        responder
                            .reject(RejectReason::Busy)
                            .expect("state allows reject");
                    }
                }
                drain_responder(&mut responder);
            }
            _ => {
                // Every method in whatever state: errors are fine, panics and success are not.
                let _ = responder.handle_hello(input);
                let _ = responder.handle_proof(input);
                let _ = responder.accept(input);
                drain_responder(&mut responder);
                let _ = initiator.handle_challenge(input, params);
                drain_initiator(&mut initiator);
                let _ = initiator.handle_verdict(input);
            }
        }
        assert!(
            !responder.is_established(),
            "responder authenticated fuzz bytes"
        );
        assert!(
            !initiator.is_established(),
            "initiator authenticated fuzz bytes"
        );
    }
}

fn mutate(original: Vec<u8>, mask: Option<&&[u8]>, mode: u8) -> (Vec<u8>, bool) {
    let Some(mask) = mask else {
        return (original.clone(), false);
    };
    let mut bytes = original.clone();
    if mask.is_empty() {
        bytes.truncate(usize::from(mode >> 2) % original.len());
    } else {
        for (byte, mask_byte) in bytes.iter_mut().zip(mask.iter()) {
            *byte ^= mask_byte;
        }
        if mask.len() > bytes.len() {
            bytes.extend_from_slice(&mask[original.len()..]);
        }
    }
    let changed = bytes != original;
    (bytes, changed)
}

fn mutated(mode: u8, masks: &[&[u8]]) {
    let params = &PARAMS[..usize::from(mode >> 2).min(PARAMS.len())];
    let mut responder = Responder::new(key(), JOB_ID, GENUINE_NONCE_R);
    let mut initiator = Initiator::new(key(), request(), GENUINE_NONCE_I);
    let mut changed = [false; 4];

    let hello = drain_initiator(&mut initiator).expect("new queues the Hello");
    let (hello, hello_changed) = mutate(hello, masks.first(), mode);
    changed[0] = hello_changed;
    if responder.handle_hello(&hello).is_ok() {
        responder.accept(params).expect("state allows accept");
    }
    if let Some(challenge) = drain_responder(&mut responder) {
        let (challenge, challenge_changed) = mutate(challenge, masks.get(1), mode);
        changed[1] = challenge_changed;
        if initiator.handle_challenge(&challenge, params).is_ok() {
            let proof = drain_initiator(&mut initiator).expect("a Proof follows");
            let (proof, proof_changed) = mutate(proof, masks.get(2), mode);
            changed[2] = proof_changed;
            let _ = responder.handle_proof(&proof);
            if let Some(verdict) = drain_responder(&mut responder) {
                let (verdict, verdict_changed) = mutate(verdict, masks.get(3), mode);
                changed[3] = verdict_changed;
                let _ = initiator.handle_verdict(&verdict);
            }
        }
    }

    // Key confirmation: the initiator only finishes if its responder did.
    assert!(!initiator.is_established() || responder.is_established());
    if changed.iter().any(|&message_changed| message_changed) {
        assert!(
            !initiator.is_established(),
            "initiator finished on altered bytes: {changed:?}"
        );
    } else {
        assert!(initiator.is_established() && responder.is_established());
    }
    if changed[..3].iter().any(|&message_changed| message_changed) {
        assert!(
            !responder.is_established(),
            "responder finished on altered bytes: {changed:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let inputs = messages(rest);
    if mode & 1 == 0 {
        raw(mode, &inputs);
    } else {
        mutated(mode, &inputs);
    }
});
