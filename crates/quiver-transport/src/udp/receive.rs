//! The receive paths of [`UdpSocket`]: batches with one `recvmmsg`, one message with one
//! `recvmsg` or `recvfrom`, and the scattering receive that puts a frame's payload straight
//! into a reader's buffer ([`SplitRecv`]).
//!
//! Layer: quiver-transport, the socket layer. Receives into a [`RecvBatch`]'s preallocated
//! buffers: no allocation per call; `unsafe` only around system calls.

use std::ffi::c_void;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;

use super::address::read_socket_address;
use super::control::gro_segment_size;
use super::errno::check;
use super::receive_batch::{RecvBatch, RecvMetadata};
use super::socket::UdpSocket;

impl UdpSocket {
    /// Receives up to `batch.capacity()` messages with one non-blocking `recvmmsg`
    /// (`MSG_DONTWAIT`) into `batch`'s preallocated buffers. Returns how many arrived (also
    /// `batch.len()`); read them with [`RecvBatch::message`].
    ///
    /// # Errors
    /// `WouldBlock` when nothing is queued; otherwise the kernel's error (e.g. a pending
    /// ICMP error on a connected socket).
    pub fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        let capacity = batch.capacity();
        self.recv_batch_up_to(batch, capacity)
    }

    /// [`UdpSocket::recv_batch`] taking at most `max` messages (at least 1, at most the
    /// batch's capacity). With a queue of one datagram, a receive of one returns at once,
    /// while a larger one tries the empty queue once more before it returns (about half an
    /// empty receive's cost on the development VMs): latency paths ask for one.
    ///
    /// # Errors
    /// As [`UdpSocket::recv_batch`].
    pub fn recv_batch_up_to(&mut self, batch: &mut RecvBatch, max: usize) -> io::Result<usize> {
        let count = max.clamp(1, batch.capacity());
        batch.received = 0;
        batch.prepare(count);
        // SAFETY: the first `count` headers point into `batch`'s own buffers (data,
        // addresses, control), which are alive, unmoved and exclusively borrowed for the
        // call; lengths match them.
        let received = check(unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                batch.headers.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        })? as usize;
        batch.written(received);
        batch.finish(received);
        Ok(received)
    }

    /// Receives one message (a datagram, or several coalesced by GRO) into the first slot of
    /// `batch` with one non-blocking system call: [`UdpSocket::recv_batch_up_to`] for one
    /// message, without the `recvmmsg` loop around it, and with `Ok(0)` instead of an error
    /// when nothing is queued (what a busy-polling caller finds most of the time). Returns
    /// how many messages arrived (0 or 1, also `batch.len()`).
    ///
    /// With GRO on the call is a `recvmsg`, which returns the segment size of a coalesced
    /// message; with GRO off it is a `recvfrom`, cheaper by a few hundred
    /// nanoseconds on the development VMs with a datagram and about 150 ns when the queue
    /// is empty (no message header and iovec to copy in, no control data:
    /// measured against `recvmsg` with GRO on).
    ///
    /// # Errors
    /// The kernel's error other than `EAGAIN` (e.g. a pending ICMP error).
    pub fn recv_one(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.received = 0;
        if !self.gro_enabled {
            return self.recv_one_plain(batch);
        }
        batch.prepare(1);
        // SAFETY: the first header points into `batch`'s own buffers (data, address,
        // control), which are alive, unmoved and exclusively borrowed for the call; its
        // lengths match them.
        let received = unsafe {
            libc::recvmsg(
                self.fd.as_raw_fd(),
                &mut batch.headers[0].msg_hdr,
                libc::MSG_DONTWAIT,
            )
        };
        if received < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(error),
            };
        }
        batch.written(1);
        // At most the buffer's length (a `u32` field: buffers are far smaller).
        batch.headers[0].msg_len = received as libc::c_uint;
        batch.finish(1);
        Ok(1)
    }

    /// Receives one message in pieces, with one non-blocking `recvmsg` (a scattering
    /// receive): its first `head.len()` bytes into `head`, the next `body.len()` into `body`
    /// (a reader's buffer, where a frame's payload belongs), and anything beyond into the
    /// first slot of `batch`.
    ///
    /// - [`SplitRecv::Split`]: one datagram that filled `head` and did not go past `body`;
    ///   its other bytes are the first `body_len` of `body`.
    /// - [`SplitRecv::Whole`]: anything else (longer, shorter than `head`, or several
    ///   datagrams coalesced by GRO) was put back together, as [`UdpSocket::recv_one`]
    ///   would have received it, in the first slot of `batch` (`batch.len()` is 1). The
    ///   bytes of `body` it went through are left as they are.
    /// - [`SplitRecv::Nothing`]: nothing was queued.
    ///
    /// # Errors
    /// The kernel's error other than `EAGAIN`.
    pub fn recv_split(
        &mut self,
        batch: &mut RecvBatch,
        head: &mut [u8],
        body: &mut [u8],
    ) -> io::Result<SplitRecv> {
        batch.received = 0;
        batch.prepare(1);
        let mut parts = [
            libc::iovec {
                iov_base: head.as_mut_ptr() as *mut c_void,
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: body.as_mut_ptr() as *mut c_void,
                iov_len: body.len(),
            },
            batch.iovecs[0],
        ];
        let header = &mut batch.headers[0].msg_hdr;
        header.msg_iov = parts.as_mut_ptr();
        header.msg_iovlen = parts.len();
        // SAFETY: the header's name and control point into `batch`'s own buffers, its three
        // iovecs into `head`, `body` and the batch's first data slot, all alive, unmoved
        // and exclusively borrowed for the call, with their lengths.
        let received = unsafe { libc::recvmsg(self.fd.as_raw_fd(), header, libc::MSG_DONTWAIT) };
        // The batch's own iovec again (the array above dies here).
        header.msg_iov = &mut batch.iovecs[0];
        header.msg_iovlen = 1;
        if received < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock => Ok(SplitRecv::Nothing),
                _ => Err(error),
            };
        }
        batch.written(1);
        let length = received as usize;
        let header = &batch.headers[0].msg_hdr;
        let source = read_socket_address(&batch.addresses[0], header.msg_namelen)
            .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        let segment_bytes = gro_segment_size(header).unwrap_or(length);
        let truncated = header.msg_flags & libc::MSG_TRUNC != 0;
        let (head_len, body_len) = (head.len(), body.len());
        if length > head_len && length <= head_len + body_len && segment_bytes >= length {
            return Ok(SplitRecv::Split {
                body_len: length - head_len,
                source,
            });
        }
        // Put back together in the first slot, as much as it holds: the tail (already
        // there) moves up behind what head and body hold.
        let slot = &mut batch.data[..batch.buffer_bytes];
        let in_head = length.min(head_len);
        let in_body = (length - in_head).min(body_len);
        let keep_head = in_head.min(slot.len());
        let keep_body = in_body.min(slot.len() - keep_head);
        let keep_tail = (length - in_head - in_body).min(slot.len() - keep_head - keep_body);
        slot.copy_within(..keep_tail, keep_head + keep_body);
        slot[..keep_head].copy_from_slice(&head[..keep_head]);
        slot[keep_head..keep_head + keep_body].copy_from_slice(&body[..keep_body]);
        let kept = keep_head + keep_body + keep_tail;
        batch.metadata[0] = RecvMetadata {
            source,
            length_bytes: kept,
            segment_bytes,
            truncated: truncated || kept < length,
        };
        batch.received = 1;
        Ok(SplitRecv::Whole)
    }

    /// [`UdpSocket::recv_one`] with GRO off: one `recvfrom` of one datagram into the first
    /// slot of `batch`.
    fn recv_one_plain(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        let buffer_bytes = batch.buffer_bytes;
        let address = &mut batch.addresses[0];
        let mut address_length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: the first `buffer_bytes` bytes of `batch.data` (its first slot), the
        // address slot and its length are alive and exclusively borrowed for the call, with
        // the lengths given; the kernel writes at most those.
        let received = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                batch.data.as_mut_ptr() as *mut c_void,
                buffer_bytes,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                address as *mut libc::sockaddr_storage as *mut libc::sockaddr,
                &mut address_length,
            )
        };
        if received < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(error),
            };
        }
        // With MSG_TRUNC the datagram's real length, which may exceed the buffer.
        let length_bytes = received as usize;
        let source = read_socket_address(address, address_length)
            .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        let length_bytes_kept = length_bytes.min(buffer_bytes);
        batch.metadata[0] = RecvMetadata {
            source,
            length_bytes: length_bytes_kept,
            segment_bytes: length_bytes_kept,
            truncated: length_bytes > buffer_bytes,
        };
        batch.received = 1;
        Ok(1)
    }

    /// Receives one datagram into `buffer` without waiting: its length (cut to the buffer)
    /// and source.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is queued; a pending ICMP error (e.g. `ConnectionRefused`
    /// on a connected socket).
    pub fn recv_from(&self, buffer: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let mut length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `buffer`, `storage` and `length` are live and exclusively borrowed for the
        // call, with the lengths given.
        let received = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buffer.as_mut_ptr() as *mut c_void,
                buffer.len(),
                libc::MSG_DONTWAIT,
                &mut storage as *mut libc::sockaddr_storage as *mut libc::sockaddr,
                &mut length,
            )
        };
        if received < 0 {
            return Err(io::Error::last_os_error());
        }
        let source = read_socket_address(&storage, length)
            .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        Ok(((received as usize).min(buffer.len()), source))
    }
}

/// What one [`UdpSocket::recv_split`] received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitRecv {
    /// Nothing was queued.
    Nothing,
    /// One datagram: the head, then `body_len` bytes at the start of the body.
    Split {
        /// Bytes of the datagram after the head.
        body_len: usize,
        /// Who sent it.
        source: SocketAddr,
    },
    /// A message put back together in the batch's first slot.
    Whole,
}
