//! The monotonic clock as one integer of nanoseconds, for the datagram engine's latency
//! path.
//!
//! Layer: quiver-transport. One system call (a vDSO read), no state.

/// `CLOCK_MONOTONIC` (the clock `std::time::Instant` reads) in nanoseconds, as one
/// integer: the datagram engine's clock, read twice per hop on the latency path, without
/// the `Duration` arithmetic of `Instant::elapsed`.
pub fn monotonic_ns() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a live, exclusively borrowed timespec that the call writes;
    // CLOCK_MONOTONIC exists on every Linux kernel, so the call cannot fail.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time);
    }
    (time.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(time.tv_nsec as u64)
}
