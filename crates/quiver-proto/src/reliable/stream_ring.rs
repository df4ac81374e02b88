//! The byte ring both halves of a connection keep their stream in: stream offset `o` lives
//! at `o % len`, and a range may wrap around the end.
//!
//! Layer: sans-IO, inside `crate::reliable`, under the send and receive states. It owns one
//! allocation of bytes and the copies in and out; it knows nothing of frames or messages.

use core::ops::{Deref, DerefMut};

/// A fixed-size ring of stream bytes (allocated once; pages are touched only when used).
#[derive(Debug)]
pub(super) struct StreamRing {
    bytes: Vec<u8>,
    /// `len - 1` when the length is a power of two, else [`NO_MASK`].
    mask: u64,
}

/// [`StreamRing::mask`] when the length is not a power of two.
const NO_MASK: u64 = u64::MAX;

impl StreamRing {
    /// A ring of `len` bytes (at least 1, checked by config validation).
    pub(super) fn new(len: usize) -> StreamRing {
        // A power-of-two length (the default windows) finds positions with a mask: a
        // ping-pong message takes a dozen of them per hop, and a 64-bit division costs
        // 10-20 cycles.
        let mask = if len.is_power_of_two() {
            len as u64 - 1
        } else {
            NO_MASK
        };
        StreamRing {
            bytes: vec![0; len],
            mask,
        }
    }

    /// Bytes of memory held.
    pub(super) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Where stream offset `offset` lives.
    pub(super) fn position(&self, offset: u64) -> usize {
        // Invariant: the ring is non-empty (config validation), so the result is < len.
        if self.mask != NO_MASK {
            return (offset & self.mask) as usize;
        }
        (offset % self.bytes.len() as u64) as usize
    }

    /// Copies `data` to stream offsets `offset..`, wrapping at the end.
    pub(super) fn copy_in(&mut self, offset: u64, data: &[u8]) {
        let start = self.position(offset);
        let first = data.len().min(self.bytes.len() - start);
        copy_bytes(&mut self.bytes[start..start + first], &data[..first]);
        let rest = data.len() - first;
        // Most copies do not wrap: no call for an empty rest (a small message's header and
        // payload are copied in and out several times per message).
        if rest > 0 {
            copy_bytes(&mut self.bytes[..rest], &data[first..]);
        }
    }

    /// The 8 bytes at stream offset `offset` as a little-endian number (a message's length
    /// prefix or tag): read as one word where they do not wrap, not through a copy call.
    pub(super) fn read_u64_le(&self, offset: u64) -> u64 {
        let mut bytes = [0u8; 8];
        let start = self.position(offset);
        match self.bytes.get(start..start + bytes.len()) {
            Some(in_place) => bytes.copy_from_slice(in_place),
            None => self.copy_out(offset, &mut bytes),
        }
        u64::from_le_bytes(bytes)
    }

    /// Writes `value` little-endian to stream offsets `offset..offset + 8`, as
    /// [`StreamRing::read_u64_le`] reads it.
    pub(super) fn write_u64_le(&mut self, offset: u64, value: u64) {
        let bytes = value.to_le_bytes();
        let start = self.position(offset);
        match self.bytes.get_mut(start..start + bytes.len()) {
            Some(in_place) => in_place.copy_from_slice(&bytes),
            None => self.copy_in(offset, &bytes),
        }
    }

    /// Copies stream offsets `offset..offset + out.len()` into `out`, wrapping at the end.
    pub(super) fn copy_out(&self, offset: u64, out: &mut [u8]) {
        let start = self.position(offset);
        let first = out.len().min(self.bytes.len() - start);
        copy_bytes(&mut out[..first], &self.bytes[start..start + first]);
        let rest = out.len() - first;
        if rest > 0 {
            copy_bytes(&mut out[first..], &self.bytes[..rest]);
        }
    }
}

impl Deref for StreamRing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for StreamRing {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

/// Copies `src` into `dst` (of the same length).
///
/// glibc's memcpy (its `rep movsb` path) runs at 2-3 GB/s instead of 30-45 GB/s on the
/// development machines' AMD CPUs when `dst - src` is 1..=31 modulo 4096, for copies of
/// 4 KiB to 256 KiB (measured for the shared-memory copies, and again with a loop of
/// 64 KiB copies while profiling the udp bulk path). Stream bytes land
/// anywhere relative to the application's buffers, so some copies would hit it by chance;
/// in that window this copies 64 bytes at a time with plain vector moves (25-32 GB/s).
/// Elsewhere memcpy is as fast or faster.
pub(super) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let distance = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) & 4095;
    if src.len() < 256 || !(1..64).contains(&distance) {
        dst.copy_from_slice(src);
        return;
    }
    let mut out = dst.chunks_exact_mut(64);
    let mut from = src.chunks_exact(64);
    for (to, chunk) in (&mut out).zip(&mut from) {
        to.copy_from_slice(chunk);
    }
    out.into_remainder().copy_from_slice(from.remainder());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length and every distance in and around the slow window copies exactly.
    #[test]
    fn copy_bytes_copies_at_every_distance() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; 4096 + 80 + 9000];
        // dst[aligned..] is at distance 0 (mod 4096) from src.
        let aligned = (src.as_ptr() as usize).wrapping_sub(dst.as_ptr() as usize) & 4095;
        for len in [0usize, 1, 63, 64, 255, 256, 257, 1000, 4096, 8191] {
            for distance in 0..80 {
                let shift = aligned + distance;
                dst.fill(0xEE);
                copy_bytes(&mut dst[shift..shift + len], &src[..len]);
                assert_eq!(
                    &dst[shift..shift + len],
                    &src[..len],
                    "len {len} distance {distance}"
                );
                assert!(dst[..shift].iter().all(|&b| b == 0xEE));
                assert!(dst[shift + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    /// Positions and wrapping copies agree with `offset % len` for power-of-two lengths
    /// (found with a mask) and others (a division); so do the words read and written
    /// whole where they do not wrap.
    #[test]
    fn positions_and_wrapping_copies_match_the_modulo() {
        for len in [1usize, 2, 7, 10, 16, 64, 100, 4096] {
            let mut ring = StreamRing::new(len);
            for offset in [
                0u64,
                1,
                5,
                15,
                16,
                17,
                99,
                4095,
                4096,
                1 << 40,
                u64::MAX - 3,
            ] {
                assert_eq!(
                    ring.position(offset),
                    (offset % len as u64) as usize,
                    "len {len}"
                );
            }
            if len >= 8 {
                // Words in place and across the end.
                for at in [8 * len as u64 + 1, 3 * len as u64 - 3, 3 * len as u64 - 8] {
                    ring.write_u64_le(at, 0x0102_0304_0506_0708 ^ at);
                    assert_eq!(ring.read_u64_le(at), 0x0102_0304_0506_0708 ^ at);
                    let mut out = [0u8; 8];
                    ring.copy_out(at, &mut out);
                    assert_eq!(u64::from_le_bytes(out), 0x0102_0304_0506_0708 ^ at);
                }
            }
            let data: Vec<u8> = (0..len.min(9) as u8).map(|b| b + 1).collect();
            let offset = (3 * len as u64).saturating_sub(2);
            ring.copy_in(offset, &data);
            let mut out = vec![0u8; data.len()];
            ring.copy_out(offset, &mut out);
            assert_eq!(out, data, "len {len}");
        }
    }
}
