//! Endpoint addresses: `(rank, port)`, the nodes of a job's graph. A leaf module.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The address of an endpoint: a rank of the job and a port chosen by that rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    /// The rank (process) of the job.
    pub rank: u32,
    /// The endpoint's port within that rank.
    pub port: u16,
}

impl Addr {
    /// The address of endpoint `port` of `rank`.
    pub fn new(rank: u32, port: u16) -> Addr {
        Addr { rank, port }
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.rank, self.port)
    }
}

/// A map keyed by endpoint address that hashes without SipHash: an endpoint looks its
/// connection to a peer up for every reply (an active message's answer), where SipHash
/// cost more than the rest of the lookup. Keys are addresses of the job's own ranks (a
/// stranger without the job key adds none), so there is no flooding to defend against.
pub(crate) type AddrMap<V> = HashMap<Addr, V, BuildHasherDefault<AddrHasher>>;

/// Hashes an [`Addr`] (its derived `Hash` writes the rank, then the port) by packing both
/// into one word, spread over all 64 bits (Fibonacci hashing: the table takes its control
/// bits from the top ones).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    #[inline]
    fn write_u32(&mut self, rank: u32) {
        self.0 = self.0.rotate_left(32) ^ u64::from(rank);
    }

    #[inline]
    fn write_u16(&mut self, port: u16) {
        self.0 = self.0.rotate_left(16) ^ u64::from(port);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_that_differ_in_rank_or_port_hash_apart() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<AddrHasher>::default();
        let mut seen = std::collections::HashSet::new();
        for rank in 0..64 {
            for port in 0..16 {
                assert!(seen.insert(build.hash_one(Addr::new(rank, port))));
            }
        }
        let mut map: AddrMap<u32> = AddrMap::default();
        map.insert(Addr::new(3, 1), 7);
        map.insert(Addr::new(1, 3), 8);
        assert_eq!(map.get(&Addr::new(3, 1)), Some(&7));
        assert_eq!(map.get(&Addr::new(1, 3)), Some(&8));
        assert_eq!(map.get(&Addr::new(3, 3)), None);
    }
}
