//! [`UdpSocket`]: binding, connecting, offloads (GSO detection, GRO on and off) and
//! options. The send and receive paths are `impl UdpSocket` blocks of their own, in
//! `send.rs` and `receive.rs`.
//!
//! Layer: quiver-transport, the socket layer. Allocates only in [`UdpSocket::bind`] (and
//! when the send batch capacity changes); `unsafe` only around system calls.

use std::io;
use std::mem::zeroed;
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::address::{local_address, write_socket_address};
use super::errno::check;
use super::limits::{DEFAULT_SEND_BATCH, DEFAULT_SOCKET_BUFFER_BYTES};
use super::options::{
    get_int_option, set_buffer_sizes, set_busy_poll, set_int_option, set_nonblocking, UDP_GRO,
    UDP_SEGMENT,
};
use super::send_scratch::SendScratch;

/// A non-blocking, close-on-exec UDP socket with batched I/O.
///
/// Not `Sync`: the send path reuses scratch arrays owned by the socket (`&mut self`).
#[derive(Debug)]
pub struct UdpSocket {
    pub(super) fd: OwnedFd,
    pub(super) local_address: SocketAddr,
    pub(super) gso_supported: bool,
    pub(super) gro_enabled: bool,
    pub(super) send_scratch: SendScratch,
    /// The peer of [`UdpSocket::connect`]: datagrams to it leave without an address, on the
    /// route the kernel cached at connect (cheaper than a lookup per datagram).
    pub(super) connected: Option<SocketAddr>,
}

impl UdpSocket {
    /// Binds a new non-blocking UDP socket to `address` (port 0 picks a free port), asks for
    /// [`DEFAULT_SOCKET_BUFFER_BYTES`] in each direction (best effort) and detects GSO.
    /// GRO starts off; turn it on with [`UdpSocket::set_gro`].
    ///
    /// # Errors
    /// Socket creation or bind failures (e.g. `AddrInUse`).
    pub fn bind(address: SocketAddr) -> io::Result<UdpSocket> {
        let family = if address.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain syscall; the result is a fresh descriptor.
        let raw = check(unsafe {
            libc::socket(
                family,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        })?;
        // SAFETY: `raw` was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let length = write_socket_address(&address, &mut storage);
        // SAFETY: `storage` holds a valid address of `length` bytes.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &storage as *const libc::sockaddr_storage as *const libc::sockaddr,
                length,
            )
        })?;
        let local_address = local_address(fd.as_fd())?;
        // Best effort: a small buffer costs speed, not correctness.
        let _ = set_buffer_sizes(
            fd.as_fd(),
            DEFAULT_SOCKET_BUFFER_BYTES,
            DEFAULT_SOCKET_BUFFER_BYTES,
        );
        let gso_supported = get_int_option(fd.as_fd(), libc::SOL_UDP, UDP_SEGMENT).is_ok();
        Ok(UdpSocket {
            fd,
            local_address,
            gso_supported,
            gro_enabled: false,
            send_scratch: SendScratch::new(DEFAULT_SEND_BATCH),
            connected: None,
        })
    }

    /// Connects the socket to `peer`: the kernel then delivers only `peer`'s datagrams to
    /// it, and [`UdpSocket::send_batch`] sends datagrams addressed to `peer` without an
    /// address, on the cached route (on loopback about a microsecond cheaper per send than
    /// an addressed one on the development VMs).
    ///
    /// # Errors
    /// The kernel's `connect` error (e.g. no route).
    pub fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        let peer_mapped = match (self.local_address.is_ipv6(), peer) {
            (true, SocketAddr::V4(v4)) => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            (_, other) => other,
        };
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let length = write_socket_address(&peer_mapped, &mut storage);
        // SAFETY: `storage` holds a valid address of `length` bytes.
        check(unsafe {
            libc::connect(
                self.fd.as_raw_fd(),
                &storage as *const libc::sockaddr_storage as *const libc::sockaddr,
                length,
            )
        })?;
        self.local_address = local_address(self.fd.as_fd())?;
        self.connected = Some(peer);
        Ok(())
    }

    /// The peer the socket is connected to, if any.
    pub fn connected_peer(&self) -> Option<SocketAddr> {
        self.connected
    }

    /// The address the socket is bound to (with the real port if bound to port 0).
    pub fn local_address(&self) -> SocketAddr {
        self.local_address
    }

    /// Whether the kernel accepts `UDP_SEGMENT` on this socket (GSO sends will work).
    pub fn gso_supported(&self) -> bool {
        self.gso_supported
    }

    /// Whether receive offload is on (receives may then carry several datagrams).
    pub fn gro_enabled(&self) -> bool {
        self.gro_enabled
    }

    /// Turns receive offload (`UDP_GRO`) on or off.
    ///
    /// Turning it off while the receive queue holds a message the kernel coalesced loses
    /// that message's segment size (the kernel reports it only while GRO is on): the
    /// message then reads as one datagram. [`UdpSocket::gro_off_if_idle`] turns it off
    /// safely.
    ///
    /// # Errors
    /// The kernel refused the option (GRO then stays as it was).
    pub fn set_gro(&mut self, enabled: bool) -> io::Result<()> {
        set_int_option(
            self.fd.as_fd(),
            libc::SOL_UDP,
            UDP_GRO,
            enabled as libc::c_int,
        )?;
        self.gro_enabled = enabled;
        Ok(())
    }

    /// Turns GRO off if the receive queue is empty once it is off (from then on the kernel
    /// splits what it would have coalesced before queueing it); with something queued,
    /// which may have been coalesced, GRO goes back on. Returns whether GRO is now off.
    ///
    /// # Errors
    /// The kernel refused the option or the queue length (GRO then stays on, or is off
    /// with nothing queued).
    pub fn gro_off_if_idle(&mut self) -> io::Result<bool> {
        if !self.gro_enabled {
            return Ok(true);
        }
        self.set_gro(false)?;
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD (SIOCINQ) writes one int, the length of the first queued
        // datagram (0 when the queue is empty), to the pointer given.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::FIONREAD, &mut queued) })?;
        if queued != 0 {
            self.set_gro(true)?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Sets the socket buffers to `send_bytes`/`receive_bytes` (`SO_*BUFFORCE` when allowed,
    /// otherwise capped by `net.core.*mem_max`). Returns what the kernel granted (it counts
    /// bookkeeping, so about twice the request).
    ///
    /// # Errors
    /// Neither the forced nor the plain option could be set.
    pub fn set_buffer_sizes(
        &self,
        send_bytes: usize,
        receive_bytes: usize,
    ) -> io::Result<(usize, usize)> {
        set_buffer_sizes(self.fd.as_fd(), send_bytes, receive_bytes)
    }

    /// Sets `SO_BUSY_POLL`: a blocking receive spins in the driver for up to `busy_poll`
    /// before sleeping (0 turns it off). Needs `CAP_NET_ADMIN` to raise above the sysctl.
    ///
    /// # Errors
    /// The kernel refused the option.
    pub fn set_busy_poll(&self, busy_poll: Duration) -> io::Result<()> {
        set_busy_poll(self.fd.as_fd(), busy_poll)
    }

    /// Switches between non-blocking (the default) and blocking sends. Receives through
    /// [`UdpSocket::recv_batch`] never block either way; use [`UdpSocket::wait_readable`].
    ///
    /// # Errors
    /// `fcntl` failed.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        set_nonblocking(self.fd.as_fd(), nonblocking)
    }

    /// Number of datagrams one [`UdpSocket::send_batch`] call can submit at most.
    pub fn send_batch_capacity(&self) -> usize {
        self.send_scratch.headers.len()
    }

    /// Changes [`UdpSocket::send_batch_capacity`] (allocates; do it at setup, not per call).
    /// Capped at the kernel's limit of 1024 (`UIO_MAXIOV`); at least 1.
    pub fn set_send_batch_capacity(&mut self, capacity: usize) {
        self.send_scratch = SendScratch::new(capacity.clamp(1, 1024));
    }

    /// Waits until a receive would find data, for at most `timeout` (None: forever).
    /// Returns whether the socket is readable; a signal counts as "not yet".
    ///
    /// # Errors
    /// `poll` failed.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut fds = [libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        Ok(crate::sys::poll(&mut fds, timeout)? > 0)
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
