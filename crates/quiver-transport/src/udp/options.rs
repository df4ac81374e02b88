//! Socket options: buffer sizes, busy polling, blocking mode, and the `int`-valued option
//! calls behind them, for any socket (the tcp helpers use them too).
//!
//! Layer: quiver-transport, the socket layer. System calls on a descriptor the caller
//! owns; no state of its own.

use std::ffi::c_void;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use super::errno::check;

// Socket option numbers (asm-generic/socket.h, linux/udp.h), spelled out so the module does
// not depend on which of them a libc release happens to export for this target.
pub(super) const SO_SNDBUFFORCE: libc::c_int = 32;
pub(super) const SO_RCVBUFFORCE: libc::c_int = 33;
pub(super) const SO_BUSY_POLL: libc::c_int = 46;
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
pub(super) const UDP_GRO: libc::c_int = 104;

/// Sets `SO_SNDBUF`/`SO_RCVBUF` on any socket, trying the `*FORCE` variants first (root can
/// exceed `net.core.wmem_max`/`rmem_max` with them). Returns the sizes the kernel reports.
///
/// # Errors
/// Neither variant could be set, or reading the result back failed.
pub fn set_buffer_sizes(
    socket: BorrowedFd<'_>,
    send_bytes: usize,
    receive_bytes: usize,
) -> io::Result<(usize, usize)> {
    let clamp = |bytes: usize| bytes.min(i32::MAX as usize / 2) as libc::c_int;
    for (forced, plain, bytes) in [
        (SO_SNDBUFFORCE, libc::SO_SNDBUF, clamp(send_bytes)),
        (SO_RCVBUFFORCE, libc::SO_RCVBUF, clamp(receive_bytes)),
    ] {
        if set_int_option(socket, libc::SOL_SOCKET, forced, bytes).is_err() {
            set_int_option(socket, libc::SOL_SOCKET, plain, bytes)?;
        }
    }
    let send = get_int_option(socket, libc::SOL_SOCKET, libc::SO_SNDBUF)?;
    let receive = get_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF)?;
    Ok((send.max(0) as usize, receive.max(0) as usize))
}

/// Sets `SO_BUSY_POLL` (microseconds of driver polling in blocking receives) on any socket.
///
/// # Errors
/// The kernel refused the option (raising it above `net.core.busy_read` needs
/// `CAP_NET_ADMIN`).
pub fn set_busy_poll(socket: BorrowedFd<'_>, busy_poll: Duration) -> io::Result<()> {
    let micros = busy_poll.as_micros().min(i32::MAX as u128) as libc::c_int;
    set_int_option(socket, libc::SOL_SOCKET, SO_BUSY_POLL, micros)
}

/// Sets or clears `O_NONBLOCK` on any descriptor.
///
/// # Errors
/// `fcntl` failed.
pub fn set_nonblocking(socket: BorrowedFd<'_>, nonblocking: bool) -> io::Result<()> {
    // SAFETY: plain fcntl on a live descriptor.
    let flags = check(unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_GETFL) })?;
    let flags = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    check(unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_SETFL, flags) })?;
    Ok(())
}

/// Sets an `int`-valued socket option.
pub(crate) fn set_int_option(
    socket: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length says so.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            &value as *const libc::c_int as *const c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Reads an `int`-valued socket option.
pub(crate) fn get_int_option(
    socket: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut length = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value`/`length` are valid out-pointers of the stated size.
    check(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            &mut value as *mut libc::c_int as *mut c_void,
            &mut length,
        )
    })?;
    Ok(value)
}
