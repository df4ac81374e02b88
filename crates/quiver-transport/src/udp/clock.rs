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

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the monotonic clock as of the last timer
/// tick, a read of a few nanoseconds (no time-stamp counter) where [`monotonic_ns`] takes
/// tens (60 ns on the 2-vCPU development VM under load, against 11). It is never ahead of
/// [`monotonic_ns`] and at most about [`coarse_resolution_ns`] behind: good enough to
/// tell that a millisecond timer cannot be due yet.
pub fn monotonic_coarse_ns() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as in `monotonic_ns`; CLOCK_MONOTONIC_COARSE exists since Linux 2.6.32.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut time);
    }
    (time.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(time.tv_nsec as u64)
}

/// How far [`monotonic_coarse_ns`] may lag [`monotonic_ns`]: the coarse clock's
/// resolution (one timer tick, 1-10 ms), or 10 ms when the kernel does not say.
pub fn coarse_resolution_ns() -> u64 {
    let mut res = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `res` is a live, exclusively borrowed timespec that the call writes.
    let ret = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut res) };
    let ns = (res.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(res.tv_nsec as u64);
    if ret != 0 || ns == 0 || ns > 1_000_000_000 {
        10_000_000
    } else {
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_is_never_ahead_and_lags_at_most_its_resolution() {
        let res = coarse_resolution_ns();
        assert!((1..=1_000_000_000).contains(&res), "{res}");
        // The least lag seen: a read pair the scheduler split (a busy machine) lags more.
        let mut least = u64::MAX;
        for _ in 0..10_000 {
            let coarse = monotonic_coarse_ns();
            let precise = monotonic_ns();
            assert!(coarse <= precise, "coarse {coarse} ahead of {precise}");
            least = least.min(precise - coarse);
        }
        // Two ticks of slack: the tick that updates it may run a little late.
        assert!(least <= 2 * res, "lag {least} > 2 x {res}");
    }
}
