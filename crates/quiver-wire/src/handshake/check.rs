//! The structural checks of handshake messages, in the order the contract fixes (prefix
//! length, magic, version, kind, fixed part, length field, params limit), and the field
//! tables that name the first field a short buffer cuts off.
//!
//! Layer: quiver-wire, the bottom. Never panics on any input; no allocation.

use super::bytes::{read_array, read_u16};
use super::error::WireError;
use super::field;
use super::kind::MessageKind;
use super::layout::{MAGIC, PREFIX_LEN, VERSION};

/// Field names with the offset each one ends at, in order, to name the first field a short
/// buffer cuts off.
pub(super) const PREFIX_FIELDS: &[(&str, usize)] = &[
    ("prefix.magic", field::MAGIC.end),
    ("prefix.version", field::VERSION + 1),
    ("prefix.kind", field::KIND + 1),
    ("prefix.length", field::LENGTH.end),
];
pub(super) const HELLO_FIELDS: &[(&str, usize)] = &[
    ("hello.job_id", field::HELLO_JOB_ID.end),
    ("hello.src_rank", field::HELLO_SRC_RANK.end),
    ("hello.src_port", field::HELLO_SRC_PORT.end),
    ("hello.dst_port", field::HELLO_DST_PORT.end),
    ("hello.nonce_i", field::HELLO_NONCE_I.end),
    ("hello.mac_h", field::HELLO_MAC_H.end),
];
pub(super) const CHALLENGE_FIELDS: &[(&str, usize)] = &[
    ("challenge.status", field::CHALLENGE_STATUS + 1),
    ("challenge.reserved", field::CHALLENGE_RESERVED.end),
    ("challenge.nonce_r", field::CHALLENGE_NONCE_R.end),
    ("challenge.mac_r", field::CHALLENGE_MAC_R.end),
];
pub(super) const PROOF_FIELDS: &[(&str, usize)] = &[("proof.mac_i", field::PROOF_MAC_I.end)];
pub(super) const VERDICT_FIELDS: &[(&str, usize)] = &[
    ("verdict.status", field::VERDICT_STATUS + 1),
    ("verdict.reserved", field::VERDICT_RESERVED.end),
    ("verdict.mac_v", field::VERDICT_MAC_V.end),
];

/// Checks a whole message of `kind` whose fixed part is described by `fields` (after the
/// prefix), followed by at most `max_params_len` bytes of params. The order of the checks is
/// part of the contract (see the docs of the `handshake` module).
pub(super) fn check_message(
    bytes: &[u8],
    kind: MessageKind,
    fields: &[(&'static str, usize)],
    max_params_len: usize,
) -> Result<(), WireError> {
    check_fields(bytes, PREFIX_FIELDS)?;
    check_magic(bytes)?;
    let version = bytes[field::VERSION];
    if version != VERSION {
        return Err(WireError::UnsupportedVersion {
            expected: VERSION,
            actual: version,
        });
    }
    let code = bytes[field::KIND];
    let actual_kind =
        MessageKind::from_code(code).ok_or(WireError::UnknownKind { actual: code })?;
    if actual_kind != kind {
        return Err(WireError::WrongKind {
            expected: kind,
            actual: actual_kind,
        });
    }
    check_fields(bytes, fields)?;
    let declared = usize::from(read_u16(bytes, field::LENGTH));
    if declared != bytes.len() {
        return Err(WireError::LengthMismatch {
            declared,
            actual: bytes.len(),
        });
    }
    // check_fields passed, so the last field's end is within the buffer.
    let fixed_len = fields.last().map_or(PREFIX_LEN, |&(_, end)| end);
    let max = fixed_len + max_params_len;
    if bytes.len() > max {
        return Err(WireError::TooLong {
            message: kind,
            max,
            actual: bytes.len(),
        });
    }
    Ok(())
}

/// Fails with the first field of `fields` that ends beyond the buffer.
pub(super) fn check_fields(
    bytes: &[u8],
    fields: &[(&'static str, usize)],
) -> Result<(), WireError> {
    match fields.iter().find(|&&(_, end)| end > bytes.len()) {
        Some(&(name, end)) => Err(WireError::Truncated {
            field: name,
            needed: end,
            actual: bytes.len(),
        }),
        None => Ok(()),
    }
}

/// Checks the magic; `bytes` holds at least a prefix.
pub(super) fn check_magic(bytes: &[u8]) -> Result<(), WireError> {
    let magic: [u8; 4] = read_array(bytes, field::MAGIC);
    if magic == MAGIC {
        Ok(())
    } else {
        Err(WireError::BadMagic { actual: magic })
    }
}

pub(super) fn check_reserved(name: &'static str, value: u32) -> Result<(), WireError> {
    if value == 0 {
        Ok(())
    } else {
        Err(WireError::NonZeroReserved {
            field: name,
            actual: value,
        })
    }
}
