//! The keys of the frame authenticator (frame version 6, decision 0067): a [`FrameKey`] is
//! a secret CRC-64 polynomial (a universal hash of the frame) and an AES-128 key (the
//! pseudorandom function its hash goes through); [`FrameKeys`] says which key covers which
//! frame type.
//!
//! ```text
//! h   = CRC-64 of the authenticated bytes under the secret polynomial P
//!       (init all ones, not reflected, no final XOR)
//! tag = low 32 bits of AES-128_K( h (8 bytes LE) || packet number low 32 (4 LE)
//!                                 || payload length (2 LE) || type code || layout )
//! ```
//!
//! `P` is an irreducible polynomial of degree 64 drawn from the key's secret, so two
//! different messages of at most `n` bits have the same `h` with probability at most
//! `(n + 64) / 2^64` over the choice of `P` (the division hash of Krawczyk,
//! "LFSR-based hashing and authentication", 1994); AES turns `h` into a tag nobody without
//! `K` can predict. The block the AES encrypts carries the packet number and the type, so
//! two frames share a tag only if they share both and their hashes collide.
//!
//! Layer: quiver-wire, the bottom. No I/O, no allocation, no panics; key construction is
//! done once per connection (at most a few hundred microseconds), the per-datagram path is
//! in `codec.rs`.

use core::fmt;
use std::sync::LazyLock;

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use crc_fast::{CrcAlgorithm, CrcKeysStorage, CrcParams, Digest};

use super::error::FrameError;
use super::frame_type::FrameType;

/// Bytes of secret a [`FrameKey`] is made from.
pub const FRAME_SECRET_LEN: usize = 32;

/// Initial value of the CRC register: all ones, so that leading zero bytes change the hash
/// (with 0 a message and the same message after zeros would collide).
const CRC_INIT: u64 = u64::MAX;

/// x^64 + x^4 + x^3 + x + 1, irreducible: the polynomial of a key whose draws found none
/// (never in practice: each draw is irreducible with probability about 1/32).
const FALLBACK_POLY: u64 = 0x1B;

/// Draws of a polynomial before the fallback.
const MAX_DRAWS: u64 = 4096;

/// The key of one direction of one connection (or the job's key of Resets, or the public
/// key of Handshake frames): authenticates frames. `Debug` does not print it.
#[derive(Clone)]
pub struct FrameKey {
    crc: CrcParams,
    prf: Aes128,
}

impl fmt::Debug for FrameKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("FrameKey(<redacted>)")
    }
}

impl FrameKey {
    /// The key made from `secret` (uniformly random bytes, e.g. from a key derivation):
    /// its first 16 bytes are the AES key, the last 16 draw the polynomial. Equal secrets
    /// give equal keys.
    pub fn new(secret: &[u8; FRAME_SECRET_LEN]) -> Self {
        let (prf_key, poly_key) = secret.split_at(16);
        let prf = Aes128::new_from_slice(prf_key).unwrap_or_else(|_| Aes128::new(&[0; 16].into()));
        let drawer =
            Aes128::new_from_slice(poly_key).unwrap_or_else(|_| Aes128::new(&[0; 16].into()));
        let poly = draw_irreducible(&drawer);
        Self {
            crc: crc_params(poly),
            prf,
        }
    }

    /// The secret polynomial's low 64 bits (tests check the hash against a reference).
    #[cfg(test)]
    pub(super) fn poly(&self) -> u64 {
        self.crc.poly
    }

    /// The tag of a frame whose authenticated bytes are `head` followed by `payload`;
    /// `nonce` is the rest of the AES block (packet number, length, type, layout).
    #[inline]
    pub(super) fn tag(&self, head: &[u8], payload: &[u8], nonce: [u8; 8]) -> u32 {
        self.tag_of_hash(self.hash(head, payload), nonce)
    }

    /// [`FrameKey::tag`] of authenticated bytes the caller joined already (at most
    /// [`SHORT_FRAME_BYTES`] of them, as [`FrameKey::hash`] would join them): hashed in one
    /// piece, with no copy.
    #[inline]
    pub(super) fn tag_joined(&self, bytes: &[u8], nonce: [u8; 8]) -> u32 {
        self.tag_of_hash(crc_fast::checksum_with_params(self.crc, bytes), nonce)
    }

    /// The tag of a frame whose authenticated bytes hash to `hash`.
    #[inline]
    fn tag_of_hash(&self, hash: u64, nonce: [u8; 8]) -> u32 {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&hash.to_le_bytes());
        block[8..].copy_from_slice(&nonce);
        let mut block = block.into();
        self.prf.encrypt_block(&mut block);
        u32::from_le_bytes([block[0], block[1], block[2], block[3]])
    }
}

impl FrameKey {
    /// The CRC-64 of `head` followed by `payload`. A short frame's two parts are hashed as
    /// one joined copy, one update of the CRC instead of two: each update pays the CRC's
    /// dispatch and small-input path again (30 + 8 bytes: 52-54 ns joined against 63-69 ns
    /// in two updates, here), and a small message's frame is hashed by its sender and by
    /// its receiver on every hop.
    #[inline]
    fn hash(&self, head: &[u8], payload: &[u8]) -> u64 {
        let total = head.len() + payload.len();
        if !payload.is_empty() && total <= SHORT_FRAME_BYTES {
            let mut joined = [0u8; SHORT_FRAME_BYTES];
            joined[..head.len()].copy_from_slice(head);
            joined[head.len()..total].copy_from_slice(payload);
            return crc_fast::checksum_with_params(self.crc, &joined[..total]);
        }
        let mut digest = Digest::new_with_params(self.crc);
        digest.update(head);
        if !payload.is_empty() {
            digest.update(payload);
        }
        digest.finalize()
    }
}

/// Frames up to this long (header and payload) are hashed in one piece by
/// [`FrameKey::hash`].
pub(super) const SHORT_FRAME_BYTES: usize = 256;

/// The secret of [`FrameKey::handshake`]: public, written here.
const HANDSHAKE_SECRET: [u8; FRAME_SECRET_LEN] = *b"quiver handshake frames, public.";

static HANDSHAKE_KEY: LazyLock<FrameKey> = LazyLock::new(|| FrameKey::new(&HANDSHAKE_SECRET));

impl FrameKey {
    /// The key of Handshake frames: public (its secret is in this source), so it only
    /// detects corruption. The messages Handshake frames carry prove the job key with MACs
    /// of their own, and a rank with another key must still be told so (decision 0066's
    /// refusals), which it could not verify under a key derived from ours.
    pub fn handshake() -> &'static FrameKey {
        &HANDSHAKE_KEY
    }
}

/// Which key covers which frame: Handshake frames [`FrameKey::handshake`] (public), Reset
/// frames the job's key (every member of the job can make it, nobody else), every other
/// frame the connection's key of its direction, which exists once the handshake finished.
#[derive(Debug, Clone, Copy)]
pub struct FrameKeys<'a> {
    /// The job's frame key (derived from the job key alone): covers Resets.
    pub job: &'a FrameKey,
    /// The connection's key of this direction (sending or receiving), once established.
    pub connection: Option<&'a FrameKey>,
}

impl<'a> FrameKeys<'a> {
    /// The job's key only: a party with no connection (a router, a Reset, a refusal).
    pub const fn job_only(job: &'a FrameKey) -> Self {
        Self {
            job,
            connection: None,
        }
    }

    /// The key that covers a frame of `frame_type`.
    ///
    /// # Errors
    /// [`FrameError::NoKey`]: a connection frame and no connection key.
    #[inline]
    pub fn for_type(self, frame_type: FrameType) -> Result<&'a FrameKey, FrameError> {
        match frame_type {
            FrameType::Handshake => Ok(FrameKey::handshake()),
            FrameType::Reset => Ok(self.job),
            _ => self.connection.ok_or(FrameError::NoKey { frame_type }),
        }
    }
}

/// CRC parameters for the polynomial `x^64 + poly`, their folding keys computed here (not
/// through crc-fast's process-wide cache, which would keep every connection's key).
fn crc_params(poly: u64) -> CrcParams {
    CrcParams {
        algorithm: CrcAlgorithm::CrcCustom,
        name: "quiver-frame-key",
        width: 64,
        poly,
        init: CRC_INIT,
        init_algorithm: CRC_INIT,
        refin: false,
        refout: false,
        xorout: 0,
        check: 0,
        keys: CrcKeysStorage::KeysFold256(folding_keys(poly)),
    }
}

/// The exponents of crc-fast's 23 folding keys for a 64-bit CRC (index 7 is mu, 8 the
/// polynomial): `x^e mod P` for the folding distances its SIMD loops use.
const EXPONENTS: [u64; 23] = [
    0,
    64 * 2,
    64 * 3,
    64 * 16,
    64 * 17,
    64 * 2,
    64,
    0,
    0,
    64 * 14,
    64 * 15,
    64 * 12,
    64 * 13,
    64 * 10,
    64 * 11,
    64 * 8,
    64 * 9,
    64 * 6,
    64 * 7,
    64 * 4,
    64 * 5,
    64 * 32,
    64 * 33,
];

/// The folding keys of a forward (not reflected) CRC-64 with polynomial `x^64 + poly`, as
/// crc-fast's own key generation computes them (its `generate::keys`).
fn folding_keys(poly: u64) -> [u64; 23] {
    let mut keys = [0u64; 23];
    for (key, &exponent) in keys.iter_mut().zip(EXPONENTS.iter()) {
        if exponent > 64 {
            let mut n: u64 = 1 << 63;
            for _ in 0..exponent - 63 {
                n = (n << 1) ^ (0u64.wrapping_sub(n >> 63) & poly);
            }
            *key = n;
        }
    }
    // mu: the quotient of x^128 by P (Barrett reduction).
    let (mut high, mut low, mut quotient) = (1u64, 0u64, 0u64);
    for _ in 0..65 {
        quotient <<= 1;
        if high != 0 {
            quotient |= 1;
            low ^= poly;
        }
        high = low >> 63;
        low <<= 1;
    }
    keys[7] = quotient;
    keys[8] = poly;
    keys
}

/// The first irreducible `x^64 + c` among AES encryptions of a counter under `drawer`:
/// `c` is the block's low 64 bits with bit 0 set and bit 1 flipped when needed to make the
/// number of terms odd (a polynomial with constant term 0 has the root 0, one with an even
/// number of terms the root 1: neither is irreducible).
fn draw_irreducible(drawer: &Aes128) -> u64 {
    for counter in 0..MAX_DRAWS {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&counter.to_le_bytes());
        let mut block = block.into();
        drawer.encrypt_block(&mut block);
        let mut low = [0u8; 8];
        low.copy_from_slice(&block[..8]);
        let mut candidate = u64::from_le_bytes(low) | 1;
        if candidate.count_ones() % 2 == 1 {
            // With x^64, an even count here is an odd number of terms.
            candidate ^= 0b10;
        }
        if is_irreducible(candidate) {
            return candidate;
        }
    }
    FALLBACK_POLY
}

/// Carry-less product of two polynomials of degree below 64.
#[cfg(test)]
fn clmul(a: u64, b: u64) -> u128 {
    let mut product = 0u128;
    for bit in 0..64 {
        if (b >> bit) & 1 != 0 {
            product ^= u128::from(a) << bit;
        }
    }
    product
}

/// `value mod (x^64 + poly)`.
fn reduce(mut value: u128, poly: u64) -> u64 {
    let modulus = (1u128 << 64) | u128::from(poly);
    for bit in (64..128).rev() {
        if (value >> bit) & 1 != 0 {
            value ^= modulus << (bit - 64);
        }
    }
    value as u64
}

/// Greatest common divisor of two polynomials over GF(2).
fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let degree_b = 127 - b.leading_zeros();
        while a != 0 && 127 - a.leading_zeros() >= degree_b {
            a ^= b << (127 - a.leading_zeros() - degree_b);
        }
        core::mem::swap(&mut a, &mut b);
    }
    a
}

/// Steps of Ben-Or's test run before Rabin's: factors of degree up to this are found early
/// (most reducible candidates have one), each step costing a gcd.
const EARLY_DEGREES: u32 = 8;

/// Whether `x^64 + poly` is irreducible. Rabin's test (64's only prime factor is 2): it is if
/// and only if `x^(2^64) = x` and `gcd(x^(2^32) - x, P) = 1`, both mod P. Before it, Ben-Or's
/// first steps (`gcd(x^(2^i) - x, P) = 1` for `i` up to [`EARLY_DEGREES`]; `x^(2^i) - x` is
/// the product of the irreducibles of degrees dividing `i`) turn most reducible candidates
/// away after a few squarings.
pub(super) fn is_irreducible(poly: u64) -> bool {
    let x = 2u64;
    let modulus = (1u128 << 64) | u128::from(poly);
    let mut power = x;
    for step in 1..=64 {
        power = reduce(square(power), poly);
        let checked = step <= EARLY_DEGREES || step == 32;
        if checked && gcd(modulus, u128::from(power ^ x)) != 1 {
            return false;
        }
    }
    power == x
}

/// The square of a polynomial of degree below 64 over GF(2): its bits spread to the even
/// positions.
fn square(a: u64) -> u128 {
    let mut value = u128::from(a);
    value = (value | (value << 32)) & 0x0000_0000_FFFF_FFFF_0000_0000_FFFF_FFFF;
    value = (value | (value << 16)) & 0x0000_FFFF_0000_FFFF_0000_FFFF_0000_FFFF;
    value = (value | (value << 8)) & 0x00FF_00FF_00FF_00FF_00FF_00FF_00FF_00FF;
    value = (value | (value << 4)) & 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F;
    value = (value | (value << 2)) & 0x3333_3333_3333_3333_3333_3333_3333_3333;
    (value | (value << 1)) & 0x5555_5555_5555_5555_5555_5555_5555_5555
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.
mod tests {
    use super::*;

    /// The forward CRC-64 under `x^64 + poly`, bit by bit, init all ones.
    fn reference_crc(poly: u64, bytes: &[u8]) -> u64 {
        let mut register = CRC_INIT;
        for &byte in bytes {
            register ^= u64::from(byte) << 56;
            for _ in 0..8 {
                let top = register >> 63;
                register <<= 1;
                if top != 0 {
                    register ^= poly;
                }
            }
        }
        register
    }

    #[test]
    fn squaring_is_the_carry_less_product() {
        for a in [0, 1, 2, 0xdead_beef, u64::MAX, 0x8000_0000_0000_0001] {
            assert_eq!(square(a), clmul(a, a), "{a:#x}");
        }
    }

    /// Ben-Or's test in full (every gcd up to degree 32), as a reference.
    fn ben_or(poly: u64) -> bool {
        let x = 2u64;
        let modulus = (1u128 << 64) | u128::from(poly);
        let mut power = x;
        for _ in 0..32 {
            power = reduce(clmul(power, power), poly);
            if gcd(modulus, u128::from(power ^ x)) != 1 {
                return false;
            }
        }
        true
    }

    #[test]
    fn the_irreducibility_test_agrees_with_ben_or() {
        for index in 0..3000u64 {
            let poly = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            assert_eq!(is_irreducible(poly), ben_or(poly), "{poly:#x}");
        }
    }

    #[test]
    fn irreducibility_is_rabins() {
        assert!(is_irreducible(FALLBACK_POLY));
        // x^64 + 1 = (x + 1)^64; x^64 + x^3 + x + 1 has the root 1 (an even number of
        // terms); x^64 + x^63 the root 0.
        assert!(!is_irreducible(1));
        assert!(!is_irreducible(0b1011));
        assert!(!is_irreducible(1 << 63));
        // About one in 64 polynomials of degree 64 is irreducible.
        let found = (0..4096u64)
            .filter(|c| is_irreducible(c.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .count();
        assert!((20..150).contains(&found), "{found}");
    }

    #[test]
    fn folding_keys_match_crc_fast() {
        for poly in [FALLBACK_POLY, 0x42F0_E1EB_A9EA_3693, 0x9a6c_9329_ac4b_c9b5] {
            let theirs = CrcParams::new("t", 64, poly, CRC_INIT, false, 0, 0);
            assert_eq!(theirs.keys, folding_keys(poly), "poly {poly:#x}");
        }
    }

    #[test]
    fn the_hash_is_the_forward_crc() {
        let key = FrameKey::new(&[7; 32]);
        let poly = key.crc.poly;
        assert!(is_irreducible(poly));
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 131 % 251) as u8).collect();
        for len in [0, 1, 7, 8, 15, 16, 63, 64, 255, 256, 257, 1456, 4999] {
            let mut digest = Digest::new_with_params(key.crc);
            digest.update(&bytes[..len]);
            assert_eq!(
                digest.finalize(),
                reference_crc(poly, &bytes[..len]),
                "{len}"
            );
        }
    }

    #[test]
    fn a_frame_hashes_as_its_joined_bytes_short_or_long() {
        let key = FrameKey::new(&[9; 32]);
        let bytes: Vec<u8> = (0..2000u32).map(|i| (i * 37 % 253) as u8).collect();
        for (head, payload) in [(30, 0), (30, 8), (40, 216), (40, 217), (56, 1400), (0, 300)] {
            let joined = &bytes[..head + payload];
            assert_eq!(
                key.hash(&joined[..head], &joined[head..]),
                reference_crc(key.crc.poly, joined),
                "{head}+{payload}"
            );
        }
    }

    #[test]
    fn secrets_draw_different_polynomials_and_keys() {
        let a = FrameKey::new(&[1; 32]);
        let b = FrameKey::new(&[2; 32]);
        assert_ne!(a.crc.poly, b.crc.poly);
        let nonce = [0; 8];
        assert_ne!(
            a.tag(b"head", b"payload", nonce),
            b.tag(b"head", b"payload", nonce)
        );
        assert_eq!(
            a.tag(b"head", b"payload", nonce),
            FrameKey::new(&[1; 32]).tag(b"head", b"payload", nonce)
        );
        assert_ne!(
            a.tag(b"head", b"payload", nonce),
            a.tag(b"head", b"payload", [1, 0, 0, 0, 0, 0, 0, 0])
        );
        assert_eq!(format!("{a:?}"), "FrameKey(<redacted>)");
    }
}
