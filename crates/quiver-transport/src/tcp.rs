//! TCP helpers over `std::net::TcpStream`: what std lacks for a messaging transport.
//!
//! Layer: operating-system side of the TCP transport. std's `TcpStream` is the base type
//! (connect, `TCP_NODELAY`, non-blocking mode are std's); this module adds gathered writes
//! and scattered reads that resume at a byte offset (so a non-blocking sender can push a
//! header and a payload in one system call and continue after a partial write without
//! copying), `TCP_QUICKACK`, `SO_BUSY_POLL`, forced socket buffer sizes and readiness waits.
//! No framing, no allocation, no retries beyond what each function documents.
//!
//! Writes use `sendmsg(MSG_NOSIGNAL)`: a peer that reset the connection gives `EPIPE`
//! (`BrokenPipe`) instead of killing the process with SIGPIPE.

use std::ffi::c_void;
use std::io;
use std::mem::zeroed;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use crate::udp;

/// Most buffers one gathered write or scattered read hands to the kernel; further parts go
/// in the next call.
pub const MAX_GATHER_PARTS: usize = 8;

/// Connects to `address` within `timeout` and turns on `TCP_NODELAY` (messages leave at
/// once instead of waiting for Nagle). The stream is blocking; see
/// `TcpStream::set_nonblocking`.
///
/// # Errors
/// Connection refused, timed out (`TimedOut`), or the option failed.
pub fn connect(address: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Sets `TCP_QUICKACK`: acknowledge at once instead of delaying. The kernel clears it again
/// after some events, so latency paths set it after each receive.
///
/// # Errors
/// The kernel refused the option.
pub fn set_quickack(stream: &TcpStream, enabled: bool) -> io::Result<()> {
    udp::set_int_option(
        stream.as_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_QUICKACK,
        enabled as libc::c_int,
    )
}

/// Sets `SO_BUSY_POLL` on the stream (see [`udp::set_busy_poll`]).
///
/// # Errors
/// The kernel refused the option.
pub fn set_busy_poll(stream: &TcpStream, busy_poll: Duration) -> io::Result<()> {
    udp::set_busy_poll(stream.as_fd(), busy_poll)
}

/// Sets the stream's socket buffers (see [`udp::set_buffer_sizes`]). Doing so turns off the
/// kernel's automatic buffer tuning for the stream, so only use it with sizes that are
/// known to be large enough.
///
/// # Errors
/// The kernel refused both the forced and the plain option.
pub fn set_buffer_sizes(
    stream: &TcpStream,
    send_bytes: usize,
    receive_bytes: usize,
) -> io::Result<(usize, usize)> {
    udp::set_buffer_sizes(stream.as_fd(), send_bytes, receive_bytes)
}

/// Writes the concatenation of `parts`, skipping its first `skip_bytes`, with one
/// `sendmsg` of up to [`MAX_GATHER_PARTS`] buffers. Returns how many bytes the kernel took
/// (possibly fewer than offered: add them to `skip_bytes` and call again). Returns `Ok(0)`
/// when nothing is left to write.
///
/// # Errors
/// `WouldBlock` on a full non-blocking socket; `BrokenPipe`/`ConnectionReset` when the peer
/// is gone; `Interrupted` by a signal (just retry).
pub fn write_gathered(stream: &TcpStream, parts: &[&[u8]], skip_bytes: usize) -> io::Result<usize> {
    // SAFETY: iovec is plain old data; all-zero is valid.
    let mut iovecs: [libc::iovec; MAX_GATHER_PARTS] = unsafe { zeroed() };
    let mut count = 0;
    let mut skip = skip_bytes;
    for part in parts {
        if count == MAX_GATHER_PARTS {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let rest = &part[skip..];
        skip = 0;
        iovecs[count] = libc::iovec {
            // The kernel only reads through this pointer (sendmsg).
            iov_base: rest.as_ptr() as *mut c_void,
            iov_len: rest.len(),
        };
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut message: libc::msghdr = unsafe { zeroed() };
    message.msg_iov = iovecs.as_mut_ptr();
    message.msg_iovlen = count;
    // SAFETY: `message` points at `count` iovecs describing live borrowed slices the kernel
    // only reads.
    let written = unsafe { libc::sendmsg(stream.as_raw_fd(), &message, libc::MSG_NOSIGNAL) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(written as usize)
}

/// Writes all of the concatenation of `parts`, looping over partial writes; on a
/// non-blocking stream it waits for room with `poll` (this blocks the thread).
///
/// # Errors
/// As [`write_gathered`], except `WouldBlock` and `Interrupted`, which are waited out.
pub fn write_all_gathered(stream: &TcpStream, parts: &[&[u8]]) -> io::Result<()> {
    let total: usize = parts.iter().map(|part| part.len()).sum();
    let mut written = 0;
    while written < total {
        match write_gathered(stream, parts, written) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(stream, libc::POLLOUT, None)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads into the concatenation of `parts`, skipping its first `skip_bytes` (already
/// filled), with one `readv` of up to [`MAX_GATHER_PARTS`] buffers. Returns the bytes read;
/// `Ok(0)` means end of stream, unless no room was left (then nothing was asked for).
///
/// # Errors
/// `WouldBlock` when a non-blocking stream has nothing; `ConnectionReset` and the like.
pub fn read_scattered(
    stream: &TcpStream,
    parts: &mut [&mut [u8]],
    skip_bytes: usize,
) -> io::Result<usize> {
    // SAFETY: iovec is plain old data; all-zero is valid.
    let mut iovecs: [libc::iovec; MAX_GATHER_PARTS] = unsafe { zeroed() };
    let mut count = 0;
    let mut skip = skip_bytes;
    for part in parts.iter_mut() {
        if count == MAX_GATHER_PARTS {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let rest = &mut part[skip..];
        skip = 0;
        iovecs[count] = libc::iovec {
            iov_base: rest.as_mut_ptr() as *mut c_void,
            iov_len: rest.len(),
        };
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: the iovecs describe exclusively borrowed, live slices of `parts`.
    let read = unsafe { libc::readv(stream.as_raw_fd(), iovecs.as_ptr(), count as libc::c_int) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(read as usize)
}

/// Waits until the stream is readable (or at end of stream / in error), for at most
/// `timeout` (None: forever). Returns whether it is.
///
/// # Errors
/// `poll` failed.
pub fn wait_readable(stream: &TcpStream, timeout: Option<Duration>) -> io::Result<bool> {
    wait(stream, libc::POLLIN, timeout)
}

/// Waits until the stream has room to write (or is in error), for at most `timeout`.
///
/// # Errors
/// `poll` failed.
pub fn wait_writable(stream: &TcpStream, timeout: Option<Duration>) -> io::Result<bool> {
    wait(stream, libc::POLLOUT, timeout)
}

fn wait(stream: &TcpStream, events: libc::c_short, timeout: Option<Duration>) -> io::Result<bool> {
    let mut fds = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events,
        revents: 0,
    }];
    Ok(crate::sys::poll(&mut fds, timeout)? > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{Ipv4Addr, TcpListener};

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = connect(listener.local_addr().unwrap(), Duration::from_secs(5)).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn gathered_write_of_header_and_payload() {
        let (client, mut server) = pair();
        assert!(client.nodelay().unwrap());
        set_quickack(&client, true).unwrap();
        set_busy_poll(&client, Duration::from_micros(50)).unwrap();
        let header = [0xAAu8; 16];
        let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let parts: [&[u8]; 2] = [&header, &payload];
        std::thread::scope(|scope| {
            scope.spawn(|| {
                write_all_gathered(&client, &parts).unwrap();
                client.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let mut header_in = [0u8; 16];
            let mut payload_in = vec![0u8; payload.len()];
            let mut got = 0;
            while got < 16 + payload.len() {
                let mut parts_in: [&mut [u8]; 2] = [&mut header_in, &mut payload_in];
                let n = read_scattered(&server, &mut parts_in, got).unwrap();
                assert!(n > 0, "early end of stream");
                got += n;
            }
            assert_eq!(header_in, header);
            assert_eq!(payload_in, payload);
        });
        let mut rest = Vec::new();
        assert_eq!(server.read_to_end(&mut rest).unwrap(), 0);
    }

    #[test]
    fn nonblocking_partial_writes_resume() {
        let (client, server) = pair();
        client.set_nonblocking(true).unwrap();
        server.set_nonblocking(true).unwrap();
        let header = 7u64.to_be_bytes();
        let payload = vec![3u8; 16 << 20];
        let parts: [&[u8]; 2] = [&header, &payload];
        let total = header.len() + payload.len();
        let mut written = 0;
        let mut received = Vec::with_capacity(total);
        let mut chunk = vec![0u8; 1 << 20];
        let mut saw_short_write = false;
        while received.len() < total {
            match write_gathered(&client, &parts, written) {
                Ok(n) => {
                    saw_short_write |= written + n < total;
                    written += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => saw_short_write = true,
                Err(e) => panic!("write: {e}"),
            }
            match read_scattered(&server, &mut [&mut chunk[..]], 0) {
                Ok(0) => panic!("early end of stream"),
                Ok(n) => received.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        assert_eq!(written, total);
        assert!(
            saw_short_write,
            "16 MiB should not fit the socket buffers at once"
        );
        assert_eq!(&received[..8], &header);
        assert!(received[8..].iter().all(|&b| b == 3));
        assert_eq!(write_gathered(&client, &parts, total).unwrap(), 0);
    }

    #[test]
    fn reset_peer_is_an_error_not_a_signal() {
        let (client, server) = pair();
        drop(server);
        let data = vec![0u8; 1 << 20];
        let mut failed = false;
        for _ in 0..100 {
            if write_gathered(&client, &[&data], 0).is_err() {
                failed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(failed, "writes to a closed peer kept succeeding");
    }
}
