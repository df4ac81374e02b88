//! Waiting without sleeping, for the raw-socket baselines (and the lab's wire floors):
//! non-blocking socket calls retried in a spin loop, with a stall timeout so a lost
//! datagram or a dead peer becomes an error instead of a hang.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// A spinning rank that makes no progress for this long gives up.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Spins between two looks at the clock while waiting.
pub const SPINS_PER_CLOCK_READ: u32 = 4096;

/// Waits by spinning: `attempt` returns `Ok(Some(_))` when done and `Ok(None)` to be tried
/// again; after [`STALL_TIMEOUT`] without success the wait fails with `TimedOut`.
///
/// # Errors
/// `attempt`'s error, or `TimedOut` after a stall.
pub fn spin<T>(what: &str, mut attempt: impl FnMut() -> io::Result<Option<T>>) -> io::Result<T> {
    let mut spins = 0u32;
    let mut started: Option<Instant> = None;
    loop {
        if let Some(done) = attempt()? {
            return Ok(done);
        }
        std::hint::spin_loop();
        spins += 1;
        if spins == SPINS_PER_CLOCK_READ {
            spins = 0;
            let started = *started.get_or_insert_with(Instant::now);
            if started.elapsed() > STALL_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no progress for {} s while {what} (a lost datagram or a dead peer)",
                        STALL_TIMEOUT.as_secs()
                    ),
                ));
            }
        }
    }
}

/// `Ok(Some(n))` for progress, `Ok(None)` for "try again", errors otherwise.
///
/// # Errors
/// `result`'s error unless it is `WouldBlock` or `Interrupted`.
pub fn would_block(result: io::Result<usize>) -> io::Result<Option<usize>> {
    match result {
        Ok(count) => Ok(Some(count)),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Whether `stream` is ready for `events` now (a zero-timeout `poll`). The TCP spin loops
/// look with `poll` before they read or write: `tcp_poll` takes no lock, while a failed
/// non-blocking `recv` takes the socket lock and, spinning, pushes every arriving segment
/// through the backlog (measured: about 3x lower message rate).
///
/// # Errors
/// `poll`'s error.
pub fn ready(stream: &TcpStream, events: libc::c_short) -> io::Result<bool> {
    let mut fds = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events,
        revents: 0,
    }];
    Ok(quiver_transport::sys::poll(&mut fds, Some(Duration::ZERO))? > 0)
}
