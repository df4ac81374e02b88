//! Tests of the handshake layouts: byte fixtures of each message, the order of the
//! structural checks, and round-trip and no-panic properties.

use proptest::prelude::*;

use super::*;

fn nonce_fixture() -> [u8; 32] {
    core::array::from_fn(|index| 0x40 + index as u8)
}

fn hello_fixture_bytes() -> Vec<u8> {
    let mut bytes = vec![b'Q', b'V', b'H', b'S', 2, 1, 0, 88];
    bytes.extend_from_slice(&[0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
    bytes.extend_from_slice(&[0, 0, 0, 7]);
    bytes.extend_from_slice(&[0x01, 0x02, 0x03, 0x04]);
    bytes.extend_from_slice(&nonce_fixture());
    bytes.extend_from_slice(&[0x5a; 32]);
    bytes
}

fn hello_fixture_repr() -> HelloRepr {
    HelloRepr {
        job_id: 0x0123_4567_89ab_cdef,
        src_rank: 7,
        src_port: 0x0102,
        dst_port: 0x0304,
        nonce_i: nonce_fixture(),
        mac_h: [0x5a; 32],
    }
}

fn challenge_fixture_bytes() -> Vec<u8> {
    let mut bytes = vec![b'Q', b'V', b'H', b'S', 2, 2, 0, 79, 0, 0, 0, 0];
    bytes.extend_from_slice(&[0x11; 32]);
    bytes.extend_from_slice(&[0x22; 32]);
    bytes.extend_from_slice(b"abc");
    bytes
}

fn proof_fixture_bytes() -> Vec<u8> {
    let mut bytes = vec![b'Q', b'V', b'H', b'S', 2, 3, 0, 42];
    bytes.extend_from_slice(&[0x33; 32]);
    bytes.extend_from_slice(b"xy");
    bytes
}

fn verdict_fixture_bytes() -> [u8; 44] {
    let mut bytes = [0x44; 44];
    bytes[..12].copy_from_slice(&[b'Q', b'V', b'H', b'S', 2, 4, 0, 44, 1, 0, 0, 0]);
    bytes
}

#[test]
fn hello_fixture_parses_and_emits() {
    let bytes = hello_fixture_bytes();
    let view = Hello::new_checked(&bytes[..]).unwrap();
    assert_eq!(HelloRepr::parse(&view).unwrap(), hello_fixture_repr());

    let repr = hello_fixture_repr();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Hello::new_unchecked(&mut out[..]));
    assert_eq!(out, bytes);
}

#[test]
fn challenge_fixture_parses_and_emits() {
    let bytes = challenge_fixture_bytes();
    let view = Challenge::new_checked(&bytes[..]).unwrap();
    let repr = ChallengeRepr::parse(&view).unwrap();
    let expected = ChallengeRepr {
        status: ChallengeStatus::Ok,
        nonce_r: [0x11; 32],
        mac_r: [0x22; 32],
        params_r: b"abc",
    };
    assert_eq!(repr, expected);
    assert_eq!(view.authenticated_parts(), [&bytes[..44], &bytes[76..]]);

    let mut out = vec![0xffu8; expected.buffer_len()];
    expected.emit(&mut Challenge::new_unchecked(&mut out[..]));
    assert_eq!(out, bytes);
}

#[test]
fn proof_fixture_parses_and_emits() {
    let bytes = proof_fixture_bytes();
    let view = Proof::new_checked(&bytes[..]).unwrap();
    let expected = ProofRepr {
        mac_i: [0x33; 32],
        params_i: b"xy",
    };
    assert_eq!(ProofRepr::parse(&view).unwrap(), expected);
    assert_eq!(view.authenticated_parts(), [&bytes[..8], &b"xy"[..]]);

    let mut out = vec![0u8; expected.buffer_len()];
    expected.emit(&mut Proof::new_unchecked(&mut out[..]));
    assert_eq!(out, bytes);
}

#[test]
fn verdict_fixture_parses_and_emits() {
    let bytes = verdict_fixture_bytes();
    let view = Verdict::new_checked(&bytes[..]).unwrap();
    let expected = VerdictRepr {
        status: VerdictStatus::BadProof,
        mac_v: [0x44; 32],
    };
    assert_eq!(VerdictRepr::parse(&view).unwrap(), expected);
    assert_eq!(view.authenticated_parts(), [&bytes[..12], &[][..]]);

    let mut out = [0xffu8; VERDICT_LEN];
    expected.emit(&mut Verdict::new_unchecked(&mut out[..]));
    assert_eq!(out, bytes);
}

#[test]
fn prefix_view_reads_fields_of_foreign_version() {
    let mut bytes = hello_fixture_bytes();
    bytes[field::VERSION] = 9;
    let prefix = MessagePrefix::new_checked(&bytes[..PREFIX_LEN]).unwrap();
    assert_eq!(prefix.version(), 9);
    assert_eq!(prefix.kind(), Ok(MessageKind::Hello));
    assert_eq!(prefix.length(), HELLO_LEN);
    assert_eq!(prefix.magic(), MAGIC);
}

#[test]
fn short_buffers_name_the_missing_field() {
    let bytes = hello_fixture_bytes();
    assert_eq!(
        Hello::new_checked(&bytes[..3]),
        Err(WireError::Truncated {
            field: "prefix.magic",
            needed: 4,
            actual: 3
        })
    );
    assert_eq!(
        Hello::new_checked(&bytes[..7]),
        Err(WireError::Truncated {
            field: "prefix.length",
            needed: 8,
            actual: 7
        })
    );
    assert_eq!(
        Hello::new_checked(&bytes[..40]),
        Err(WireError::Truncated {
            field: "hello.nonce_i",
            needed: 56,
            actual: 40
        })
    );
    assert_eq!(
        Hello::new_checked(&bytes[..70]),
        Err(WireError::Truncated {
            field: "hello.mac_h",
            needed: 88,
            actual: 70
        })
    );
    assert!(Hello::new_checked(&[][..]).is_err());
}

#[test]
fn prefix_errors_come_in_contract_order() {
    let mut bytes = hello_fixture_bytes();
    bytes[0] = b'X';
    assert_eq!(
        Hello::new_checked(&bytes[..]),
        Err(WireError::BadMagic { actual: *b"XVHS" })
    );

    // A foreign version is reported from the prefix alone, before any length check.
    let mut bytes = hello_fixture_bytes();
    bytes[field::VERSION] = 1;
    let expected = Err(WireError::UnsupportedVersion {
        expected: 2,
        actual: 1,
    });
    assert_eq!(Hello::new_checked(&bytes[..]), expected);
    assert_eq!(Hello::new_checked(&bytes[..PREFIX_LEN]), expected);

    let mut bytes = hello_fixture_bytes();
    bytes[field::KIND] = 77;
    assert_eq!(
        Hello::new_checked(&bytes[..]),
        Err(WireError::UnknownKind { actual: 77 })
    );

    let bytes = hello_fixture_bytes();
    assert_eq!(
        Challenge::new_checked(&bytes[..]),
        Err(WireError::WrongKind {
            expected: MessageKind::Challenge,
            actual: MessageKind::Hello
        })
    );
}

#[test]
fn length_field_must_match_buffer() {
    let mut bytes = hello_fixture_bytes();
    bytes.push(0);
    assert_eq!(
        Hello::new_checked(&bytes[..]),
        Err(WireError::LengthMismatch {
            declared: 88,
            actual: 89
        })
    );
    bytes[field::LENGTH].copy_from_slice(&89u16.to_be_bytes());
    assert_eq!(
        Hello::new_checked(&bytes[..]),
        Err(WireError::TooLong {
            message: MessageKind::Hello,
            max: 88,
            actual: 89
        })
    );
}

#[test]
fn params_longer_than_limit_are_rejected() {
    let params = [7u8; MAX_PARAMS_LEN + 1];
    let mut bytes = vec![0u8; PROOF_FIXED_LEN + params.len()];
    Proof::new_unchecked(&mut bytes[..]).fill_prefix(params.len());
    bytes[PROOF_FIXED_LEN..].copy_from_slice(&params);
    assert_eq!(
        Proof::new_checked(&bytes[..]),
        Err(WireError::TooLong {
            message: MessageKind::Proof,
            max: PROOF_FIXED_LEN + MAX_PARAMS_LEN,
            actual: PROOF_FIXED_LEN + MAX_PARAMS_LEN + 1
        })
    );
    // Exactly at the limit is fine.
    let repr = ProofRepr {
        mac_i: [1; 32],
        params_i: &params[..MAX_PARAMS_LEN],
    };
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let out = &mut out[..repr.buffer_len()];
    repr.emit(&mut Proof::new_unchecked(&mut *out));
    assert_eq!(
        ProofRepr::parse(&Proof::new_checked(&*out).unwrap()),
        Ok(repr)
    );
}

#[test]
fn semantic_checks_in_parse() {
    let mut bytes = challenge_fixture_bytes();
    bytes[field::CHALLENGE_STATUS] = 200;
    let view = Challenge::new_checked(&bytes[..]).unwrap();
    assert_eq!(
        ChallengeRepr::parse(&view),
        Err(WireError::UnknownStatus {
            field: "challenge.status",
            actual: 200
        })
    );

    let mut bytes = challenge_fixture_bytes();
    bytes[field::CHALLENGE_RESERVED.start + 2] = 5;
    let view = Challenge::new_checked(&bytes[..]).unwrap();
    assert_eq!(
        ChallengeRepr::parse(&view),
        Err(WireError::NonZeroReserved {
            field: "challenge.reserved",
            actual: 5
        })
    );

    let mut bytes = verdict_fixture_bytes();
    bytes[field::VERDICT_STATUS] = 2;
    assert_eq!(
        VerdictRepr::parse(&Verdict::new_unchecked(&bytes[..])),
        Err(WireError::UnknownStatus {
            field: "verdict.status",
            actual: 2
        })
    );
    let mut bytes = verdict_fixture_bytes();
    bytes[field::VERDICT_RESERVED.start] = 1;
    assert_eq!(
        VerdictRepr::parse(&Verdict::new_unchecked(&bytes[..])),
        Err(WireError::NonZeroReserved {
            field: "verdict.reserved",
            actual: 0x01_0000
        })
    );
}

#[test]
fn parse_on_unchecked_short_view_errors_instead_of_panicking() {
    let bytes = [b'Q', b'V', b'H', b'S', 2, 2, 0, 8];
    assert!(ChallengeRepr::parse(&Challenge::new_unchecked(&bytes[..])).is_err());
    assert!(HelloRepr::parse(&Hello::new_unchecked(&bytes[..])).is_err());
}

#[test]
fn codes_round_trip() {
    for code in 0..=u8::MAX {
        if let Some(kind) = MessageKind::from_code(code) {
            assert_eq!(kind.code(), code);
        }
        if let Some(status) = ChallengeStatus::from_code(code) {
            assert_eq!(status.code(), code);
        }
        if let Some(status) = VerdictStatus::from_code(code) {
            assert_eq!(status.code(), code);
        }
    }
    assert_eq!(MessageKind::from_code(0), None);
    assert_eq!(MessageKind::Proof.to_string(), "Proof");
}

fn challenge_status_strategy() -> impl Strategy<Value = ChallengeStatus> {
    (0u8..6).prop_map(|code| ChallengeStatus::from_code(code).unwrap())
}

fn params_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=MAX_PARAMS_LEN)
}

/// Runs every view and parser over `bytes`; whenever one accepts, emitting the repr must
/// give back the same bytes (the encoding is canonical).
fn parse_everything(bytes: &[u8]) {
    if let Ok(prefix) = MessagePrefix::new_checked(bytes) {
        let _ = (prefix.version(), prefix.kind(), prefix.length());
    }
    if let Ok(repr) = HelloRepr::parse(&Hello::new_unchecked(bytes)) {
        let mut out = [0u8; HELLO_LEN];
        repr.emit(&mut Hello::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], bytes);
    }
    if let Ok(repr) = ChallengeRepr::parse(&Challenge::new_unchecked(bytes)) {
        let mut out = [0u8; MAX_MESSAGE_LEN];
        let out = &mut out[..repr.buffer_len()];
        repr.emit(&mut Challenge::new_unchecked(&mut *out));
        assert_eq!(&*out, bytes);
    }
    if let Ok(repr) = ProofRepr::parse(&Proof::new_unchecked(bytes)) {
        let mut out = [0u8; MAX_MESSAGE_LEN];
        let out = &mut out[..repr.buffer_len()];
        repr.emit(&mut Proof::new_unchecked(&mut *out));
        assert_eq!(&*out, bytes);
    }
    if let Ok(repr) = VerdictRepr::parse(&Verdict::new_unchecked(bytes)) {
        let mut out = [0u8; VERDICT_LEN];
        repr.emit(&mut Verdict::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], bytes);
    }
}

proptest! {
    #[test]
    fn hello_round_trips(
        job_id: u64, src_rank: u32, src_port: u16, dst_port: u16, nonce_i: [u8; 32],
        mac_h: [u8; 32]
    ) {
        let repr = HelloRepr { job_id, src_rank, src_port, dst_port, nonce_i, mac_h };
        let mut out = [0u8; HELLO_LEN];
        repr.emit(&mut Hello::new_unchecked(&mut out[..]));
        let view = Hello::new_checked(&out[..]).unwrap();
        prop_assert_eq!(HelloRepr::parse(&view), Ok(repr));
    }

    #[test]
    fn challenge_round_trips(
        status in challenge_status_strategy(),
        nonce_r: [u8; 32],
        mac_r: [u8; 32],
        params_r in params_strategy(),
    ) {
        let repr = ChallengeRepr { status, nonce_r, mac_r, params_r: &params_r };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Challenge::new_unchecked(&mut out[..]));
        let view = Challenge::new_checked(&out[..]).unwrap();
        prop_assert_eq!(ChallengeRepr::parse(&view), Ok(repr));
    }

    #[test]
    fn proof_round_trips(mac_i: [u8; 32], params_i in params_strategy()) {
        let repr = ProofRepr { mac_i, params_i: &params_i };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Proof::new_unchecked(&mut out[..]));
        let view = Proof::new_checked(&out[..]).unwrap();
        prop_assert_eq!(ProofRepr::parse(&view), Ok(repr));
    }

    #[test]
    fn verdict_round_trips(accepted: bool, mac_v: [u8; 32]) {
        let status = if accepted { VerdictStatus::Accepted } else { VerdictStatus::BadProof };
        let repr = VerdictRepr { status, mac_v };
        let mut out = [0u8; VERDICT_LEN];
        repr.emit(&mut Verdict::new_unchecked(&mut out[..]));
        prop_assert_eq!(VerdictRepr::parse(&Verdict::new_checked(&out[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..400)
    ) {
        parse_everything(&bytes);
    }

    /// Arbitrary bytes almost never get past the magic, so also try bodies behind a valid
    /// prefix of every kind and a matching length.
    #[test]
    fn parse_never_panics_behind_valid_prefix(
        kind in 1u8..=4,
        body in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut bytes = vec![0u8; PREFIX_LEN];
        bytes[field::MAGIC].copy_from_slice(&MAGIC);
        bytes[field::VERSION] = VERSION;
        bytes[field::KIND] = kind;
        bytes.extend_from_slice(&body);
        let length = u16::try_from(bytes.len()).unwrap();
        bytes[field::LENGTH].copy_from_slice(&length.to_be_bytes());
        parse_everything(&bytes);
    }
}
