//! Randomness from the kernel: handshake nonces, job ids and keys, connection ids. A leaf
//! module: it imports nothing of the crate.

/// `N` random bytes from the kernel's random source.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom only fails without any entropy source, which Linux always has.
    getrandom::getrandom(&mut b).expect("the kernel's random source is available");
    b
}
