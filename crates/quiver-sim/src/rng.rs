//! The simulator's only source of randomness: a small seeded PRNG.
//!
//! Layer: test infrastructure, the bottom of `quiver-sim`. It owns the generator; nothing
//! in the simulator may draw randomness elsewhere.
//!
//! xoshiro256** (Blackman and Vigna) seeded through splitmix64. Written here, with no
//! dependency, so that a seed means the same stream of numbers forever: a failing seed
//! reported today replays the same run after any dependency upgrade.

/// One step of splitmix64: a bijective 64-bit mixer. Also used on its own to derive
/// independent seeds and message contents from a seed.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mix64(*state)
}

/// The splitmix64 finaliser: a bijective, well-mixing function of one u64.
pub fn mix64(value: u64) -> u64 {
    let mut z = value;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic pseudo-random generator (xoshiro256**). Not cryptographic.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: [u64; 4],
}

impl SimRng {
    /// A generator whose whole output is a function of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let state = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Self { state }
    }

    /// A new generator derived from this one and a label, so that adding draws to one
    /// component does not shift the stream of another (links, apps and the sim each fork).
    pub fn fork(&mut self, label: u64) -> Self {
        Self::new(self.next_u64() ^ mix64(label))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.state[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let shifted = self.state[1] << 17;
        self.state[2] ^= self.state[0];
        self.state[3] ^= self.state[1];
        self.state[1] ^= self.state[2];
        self.state[0] ^= self.state[3];
        self.state[2] ^= shifted;
        self.state[3] = self.state[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `probability` (values <= 0 never, >= 1 always; no draw is
    /// made in those cases, so a disabled feature does not consume randomness).
    pub fn chance(&mut self, probability: f64) -> bool {
        if probability <= 0.0 {
            return false;
        }
        if probability >= 1.0 {
            return true;
        }
        self.next_f64() < probability
    }

    /// Uniform in `[0, bound)`; `bound == 0` returns 0. Uses the widening-multiply method
    /// (the tiny bias is irrelevant for simulation).
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in `[low, high]` (inclusive); returns `low` when `high <= low`.
    pub fn range_inclusive(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        let span = high - low;
        if span == u64::MAX {
            return self.next_u64();
        }
        low + self.below(span + 1)
    }

    /// 16 random bytes (handshake nonces).
    pub fn nonce16(&mut self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        out[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_different_seed_differs() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        let mut c = SimRng::new(43);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..100).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn known_first_value_is_stable() {
        // Pins the algorithm: if this changes, every reported seed replays differently.
        let mut rng = SimRng::new(0);
        let first = rng.next_u64();
        let mut again = SimRng::new(0);
        assert_eq!(first, again.next_u64());
        assert_eq!(mix64(0), 0);
        let mut sm = 0u64;
        assert_eq!(splitmix64(&mut sm), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn chance_and_below_are_roughly_uniform() {
        let mut rng = SimRng::new(7);
        let hits = (0..100_000).filter(|_| rng.chance(0.3)).count();
        assert!((28_000..32_000).contains(&hits), "hits {hits}");
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10) as usize] += 1;
        }
        for count in counts {
            assert!((9_000..11_000).contains(&count), "{counts:?}");
        }
        for _ in 0..1000 {
            let value = rng.range_inclusive(5, 9);
            assert!((5..=9).contains(&value));
        }
        assert_eq!(rng.range_inclusive(3, 3), 3);
        assert!(!rng.chance(0.0));
        assert!(rng.chance(1.0));
        let first = rng.next_f64();
        assert!((0.0..1.0).contains(&first));
    }
}
