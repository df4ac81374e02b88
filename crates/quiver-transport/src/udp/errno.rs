//! System call results: a `-1`-style return value becomes the thread's `errno` as an
//! `io::Error`.
//!
//! Layer: quiver-transport, the socket layer.

use std::io;

/// Turns a `-1`-style return value into the thread's `errno`.
pub(super) fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
