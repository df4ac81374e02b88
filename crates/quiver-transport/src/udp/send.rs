//! The send paths of [`UdpSocket`]: batches of datagrams and gathered messages with one
//! `sendmmsg`, and single datagrams with one `send`/`sendto`.
//!
//! Layer: quiver-transport, the socket layer. Reuses the socket's preallocated send arrays:
//! no allocation per call; `unsafe` only around system calls.

use std::ffi::c_void;
use std::io;
use std::mem::zeroed;
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;

use super::address::write_socket_address;
use super::errno::check;
use super::gather::Gather;
use super::send_scratch::OutDatagram;
use super::socket::UdpSocket;

impl UdpSocket {
    /// Sends the first `min(batch.len(), send_batch_capacity())` entries with one
    /// `sendmmsg`. Returns how many entries the kernel took; the caller resubmits the rest.
    /// An entry with `segment_size` needs [`UdpSocket::gso_supported`].
    ///
    /// # Errors
    /// The first entry could not be sent: `WouldBlock` when the socket buffer is full, or
    /// the kernel's error (`EMSGSIZE`, `ECONNREFUSED` from an earlier ICMP error, `EINVAL`
    /// for a GSO entry beyond the kernel's limits, ...). An empty batch returns `Ok(0)`.
    pub fn send_batch(&mut self, batch: &[OutDatagram<'_>]) -> io::Result<usize> {
        let count = batch.len().min(self.send_scratch.headers.len());
        if count == 0 {
            return Ok(0);
        }
        let ipv6_socket = self.local_address.is_ipv6();
        let scratch = &mut self.send_scratch;
        for (index, datagram) in batch[..count].iter().enumerate() {
            let addressed = self.connected != Some(datagram.destination);
            scratch.fill(index, datagram, ipv6_socket, addressed);
        }
        // SAFETY (of `send_filled`): the first `count` headers point into `scratch`
        // (addresses, iovecs, control buffers) and into the borrowed slices of `batch`.
        self.send_filled(count)
    }

    /// Sends the messages of `gather` from `first_message` on, at most
    /// [`UdpSocket::send_batch_capacity`] of them, with one `sendmmsg`. Returns how many
    /// messages the kernel took; the caller resubmits the rest (`first_message + n`).
    ///
    /// # Errors
    /// As [`UdpSocket::send_batch`] (for a GSO message beyond the kernel's limits, or more than
    /// [`MAX_GATHER_PARTS`](super::MAX_GATHER_PARTS) parts, the kernel's `EINVAL`/`EMSGSIZE`). No
    /// message from `first_message` on returns `Ok(0)`.
    pub fn send_gather(&mut self, gather: &Gather<'_>, first_message: usize) -> io::Result<usize> {
        let runs = gather.buffer.runs.get(first_message..).unwrap_or(&[]);
        let count = runs.len().min(self.send_scratch.headers.len());
        if count == 0 {
            return Ok(0);
        }
        let ipv6_socket = self.local_address.is_ipv6();
        let scratch = &mut self.send_scratch;
        let iovecs = &gather.buffer.iovecs;
        for (index, run) in runs[..count].iter().enumerate() {
            let addressed = self.connected != Some(run.destination);
            // `first_part` is at most `iovecs.len()` (set by `start_message`); the kernel
            // only reads through the pointer.
            let iov = iovecs[run.first_part..].as_ptr() as *mut libc::iovec;
            scratch.fill_message(
                index,
                run.destination,
                (iov, run.part_count),
                run.segment_size,
                ipv6_socket,
                addressed,
            );
        }
        // SAFETY (of `send_filled`): the first `count` headers point into `scratch`
        // (addresses, control buffers) and into the gather's iovecs (each message's
        // `part_count` iovecs exist), which point into slices alive for the gather's
        // lifetime.
        self.send_filled(count)
    }

    /// Sends the first `count` message headers of the send scratch with one `sendmmsg`;
    /// returns how many the kernel took. The caller has just filled them, and everything
    /// they point to is alive and unmoved for the call.
    fn send_filled(&mut self, count: usize) -> io::Result<usize> {
        // SAFETY: the first `count` headers were filled by the caller (`send_batch`,
        // `send_gather`) and point into the scratch and into memory the caller borrows for
        // this call; the kernel only reads them.
        let sent = check(unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                self.send_scratch.headers.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_NOSIGNAL,
            )
        })?;
        Ok(sent as usize)
    }

    /// Sends one datagram of `data` with one `send` (to the connected peer) or `sendto`:
    /// no message header for the kernel to copy in, unlike [`UdpSocket::send_batch`].
    /// Returns the bytes sent.
    ///
    /// # Errors
    /// As [`UdpSocket::send_batch`].
    pub fn send_one(&mut self, destination: SocketAddr, data: &[u8]) -> io::Result<usize> {
        let sent = if self.connected == Some(destination) {
            // SAFETY: `data` is live for the call and the kernel only reads it.
            unsafe {
                libc::send(
                    self.fd.as_raw_fd(),
                    data.as_ptr() as *const c_void,
                    data.len(),
                    libc::MSG_NOSIGNAL,
                )
            }
        } else {
            let destination = match (self.local_address.is_ipv6(), destination) {
                (true, SocketAddr::V4(v4)) => {
                    SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
                }
                (_, other) => other,
            };
            // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
            let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
            let length = write_socket_address(&destination, &mut storage);
            // SAFETY: `data` and `storage` are live for the call with the lengths given; the
            // kernel only reads them.
            unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    data.as_ptr() as *const c_void,
                    data.len(),
                    libc::MSG_NOSIGNAL,
                    &storage as *const libc::sockaddr_storage as *const libc::sockaddr,
                    length,
                )
            }
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }

    /// Sends one plain datagram (no batching), returning the bytes sent.
    ///
    /// # Errors
    /// As [`UdpSocket::send_batch`].
    pub fn send_to(&mut self, destination: SocketAddr, data: &[u8]) -> io::Result<usize> {
        self.send_batch(&[OutDatagram::new(destination, &[], data)])
            .map(|_| data.len())
    }
}
