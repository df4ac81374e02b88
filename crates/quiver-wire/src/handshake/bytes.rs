//! Big-endian reads of fixed-size fields at byte ranges.
//!
//! Layer: quiver-wire, the bottom. Callers check lengths first: these index the slice and
//! would panic on a short one.

use core::ops::Range;

/// Copies `bytes[range]` into an array; `range` must be `N` long and inside `bytes`.
pub(super) fn read_array<const N: usize>(bytes: &[u8], range: Range<usize>) -> [u8; N] {
    debug_assert_eq!(range.len(), N);
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[range]);
    out
}

pub(super) fn read_u16(bytes: &[u8], range: Range<usize>) -> u16 {
    u16::from_be_bytes(read_array(bytes, range))
}

/// Reads a 3-byte reserved field as a number.
pub(super) fn read_reserved(bytes: &[u8], range: Range<usize>) -> u32 {
    let [a, b, c]: [u8; 3] = read_array(bytes, range);
    u32::from_be_bytes([0, a, b, c])
}
