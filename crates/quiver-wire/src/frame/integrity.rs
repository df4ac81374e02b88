//! The integrity check of a frame: XXH3-64 over the header, CRC32C over the payload (the
//! formulas are in the docs of [`super`]).
//!
//! Layer: quiver-wire, the bottom. Pure functions of the bytes; no allocation.

use twox_hash::XxHash3_64;

use super::bytes::{read_u32, read_u64};
use super::field;
use super::layout::STREAM_HEADER_LEN;

/// The integrity check of a Stream frame sent to the connection `dest_id`, whose `header`
/// is at least [`STREAM_HEADER_LEN`] bytes long:
///
/// ```text
/// seed        = dest_id XOR (u32_le(header[0..4]) << 32)
/// header_hash = XXH3_64(header[8..16], seed)
/// checksum    = (header_hash as u32) XOR CRC32C(payload)
/// ```
///
/// `header[0..4]` (tag and short id) goes into the high half of the id, the half that never
/// travels: for one id the seed is a bijection of those bytes, and for given bytes a
/// bijection of the id, so a frame for another connection with the same short id gets
/// another seed. One call over each contiguous piece.
pub(super) fn stream_checksum(dest_id: u64, header: &[u8], payload: &[u8]) -> u32 {
    let seed = dest_id ^ (u64::from(read_u32(header, field::stream::TAG)) << 32);
    let header_hash = XxHash3_64::oneshot_with_seed(
        seed,
        &header[field::stream::CHECKSUM.end..STREAM_HEADER_LEN],
    );
    // The low 32 bits, by design (the field is a u32).
    header_hash as u32 ^ payload_check(payload)
}

/// CRC32C of a frame's payload (0 for none, without a call: acks and pings).
fn payload_check(payload: &[u8]) -> u32 {
    if payload.is_empty() {
        0
    } else {
        crc_fast::crc32_iscsi(payload)
    }
}

/// The integrity check of a full frame whose `header` (at least [`FIXED_HEADER_LEN`]
/// bytes, exactly the header: its length is `header_len`) precedes `payload`:
///
/// ```text
/// header_hash = XXH3_64(header[12..], seed = u64_le(header[0..8]))
/// checksum    = (header_hash as u32) XOR CRC32C(payload)
/// ```
///
/// The bytes before the checksum field (magic, version, type, flags, SACK count, payload
/// length) are the hash's seed, the rest of the header its input; the payload's CRC32C
/// (0 for none) is XORed in. XXH3_64 is the 64-bit XXH3 of the xxHash reference
/// (`XXH3_64bits_withSeed`), CRC32C the Castagnoli CRC of iSCSI (RFC 3720).
pub(super) fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    let seed = read_u64(header, 0);
    let header_hash = XxHash3_64::oneshot_with_seed(seed, &header[field::CHECKSUM.end..]);
    // The low 32 bits, by design (the field is a u32).
    header_hash as u32 ^ payload_check(payload)
}
