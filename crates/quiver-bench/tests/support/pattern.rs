//! The deterministic message contents the transfer tests send and check.
//!
//! Not every test binary that includes `support` sends messages.
#![allow(dead_code)]

/// Fills `buf` with the bytes of message `index`: xorshift64 output seeded by the index, so
/// every message differs and a receiver can recompute what it should have got.
pub(crate) fn fill(buf: &mut [u8], index: u64) {
    let mut state = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}
