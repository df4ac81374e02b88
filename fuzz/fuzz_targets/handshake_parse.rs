//! Every handshake view and parser over arbitrary bytes: nothing may panic, and whatever
//! parses must emit back to the same bytes (the encoding is canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::handshake::{
    Challenge, ChallengeRepr, Hello, HelloRepr, MessagePrefix, Proof, ProofRepr, Verdict,
    VerdictRepr, HELLO_LEN, MAX_MESSAGE_LEN, VERDICT_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(prefix) = MessagePrefix::new_checked(data) {
        let _ = (
            prefix.version(),
            prefix.kind(),
            prefix.length(),
            prefix.magic(),
        );
    }

    if let Ok(view) = Hello::new_checked(data) {
        let _ = (
            view.job_id(),
            view.src_rank(),
            view.src_port(),
            view.dst_port(),
        );
        let repr = HelloRepr::parse(&view).expect("a checked Hello always parses");
        let mut out = [0u8; HELLO_LEN];
        repr.emit(&mut Hello::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], data);
    }

    if let Ok(view) = Challenge::new_checked(data) {
        let _ = (
            view.status_code(),
            view.reserved(),
            view.nonce_r(),
            view.mac_r(),
        );
        let _ = view.authenticated_parts();
        if let Ok(repr) = ChallengeRepr::parse(&view) {
            let mut out = [0u8; MAX_MESSAGE_LEN];
            let out = &mut out[..repr.buffer_len()];
            repr.emit(&mut Challenge::new_unchecked(&mut *out));
            assert_eq!(&*out, data);
        }
    }

    if let Ok(view) = Proof::new_checked(data) {
        let _ = (view.mac_i(), view.params_i(), view.authenticated_parts());
        let repr = ProofRepr::parse(&view).expect("a checked Proof always parses");
        let mut out = [0u8; MAX_MESSAGE_LEN];
        let out = &mut out[..repr.buffer_len()];
        repr.emit(&mut Proof::new_unchecked(&mut *out));
        assert_eq!(&*out, data);
    }

    if let Ok(view) = Verdict::new_checked(data) {
        let _ = (view.status_code(), view.reserved());
        if let Ok(repr) = VerdictRepr::parse(&view) {
            let mut out = [0u8; VERDICT_LEN];
            repr.emit(&mut Verdict::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], data);
        }
    }

    // Parsing unchecked views must fail cleanly rather than panic.
    let _ = HelloRepr::parse(&Hello::new_unchecked(data));
    let _ = ChallengeRepr::parse(&Challenge::new_unchecked(data));
    let _ = ProofRepr::parse(&Proof::new_unchecked(data));
    let _ = VerdictRepr::parse(&Verdict::new_unchecked(data));
});
