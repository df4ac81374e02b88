//! A batched UDP socket: `sendmmsg`/`recvmmsg`, UDP segmentation offload (`UDP_SEGMENT`,
//! "GSO") and receive offload (`UDP_GRO`), large socket buffers and busy polling.
//!
//! Layer: operating-system side of the UDP transport. This module moves datagrams and
//! nothing else: it knows no frame format, keeps no connection state and never retries. It
//! allocates only in constructors ([`UdpSocket::bind`], [`RecvBatch::new`]); the per-call
//! paths ([`UdpSocket::send_batch`], [`UdpSocket::recv_batch`]) reuse preallocated
//! `mmsghdr`/`iovec`/address/control arrays. For one datagram at a time (a latency path),
//! [`UdpSocket::recv_one`] is one `recvmsg` into a batch's first slot (a cheaper
//! `recvfrom` while GRO is off: [`UdpSocket::gro_off_if_idle`]) and
//! [`UdpSocket::send_one`] one `send`/`sendto`: no `recvmmsg`/`sendmmsg` loop around them,
//! and no message header for the kernel to copy in on the send.
//!
//! Offloads, in short:
//! - **GSO** (`UDP_SEGMENT`): one send of up to ~64 KiB with a segment size `S` leaves the
//!   socket as `ceil(len / S)` datagrams of `S` bytes (the last one may be shorter). The
//!   caller lays out each segment's header inside the buffer itself, or gathers the
//!   segments from anywhere with [`UdpSocket::send_gather`]: the kernel cuts the *total*
//!   of a message's iovecs into segments whatever their layout, so a run of
//!   `(header, payload)` pairs, each pair one segment, leaves as one GSO send without
//!   copying the payloads next to their headers.
//! - **GRO** (`UDP_GRO`): the kernel may hand several datagrams of one flow to a single
//!   receive, concatenated, with the segment size in a control message. [`RecvMessage::datagrams`]
//!   splits such a buffer back into datagrams. Receive buffers must then be at least
//!   [`MAX_COALESCED_BYTES`] long or a coalesced receive is truncated.
//!
//! Errors are plain `io::Error`s: `EAGAIN` appears as [`io::ErrorKind::WouldBlock`], ICMP
//! errors (e.g. `ECONNREFUSED`) as whatever the kernel reports.

use std::ffi::c_void;
use std::io;
use std::marker::PhantomData;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Largest payload of one plain IPv4 UDP datagram (65535 - 20 IP - 8 UDP header bytes).
pub const MAX_DATAGRAM_BYTES_V4: usize = 65_507;

/// Largest payload of one plain IPv6 UDP datagram (65535 payload length - 8 UDP bytes).
pub const MAX_DATAGRAM_BYTES_V6: usize = 65_527;

/// Receive buffer length that can hold any coalesced (GRO) receive.
pub const MAX_COALESCED_BYTES: usize = 65_535;

/// Most segments one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS` on older kernels;
/// newer ones allow more, so this is the portable limit).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most parts (iovecs) one message of a [`Gather`] may have: the kernel's `UIO_MAXIOV`
/// (`IOV_MAX`); a message with more is refused by the kernel (`EMSGSIZE`).
pub const MAX_GATHER_PARTS: usize = 1024;

/// Default number of datagrams one [`UdpSocket::send_batch`] call can submit.
pub const DEFAULT_SEND_BATCH: usize = 64;

/// Socket buffer size [`UdpSocket::bind`] asks for in each direction (bytes; the kernel
/// reports twice what it grants).
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 8 << 20;

// Socket option numbers (asm-generic/socket.h, linux/udp.h), spelled out so the module does
// not depend on which of them a libc release happens to export for this target.
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;
const SO_BUSY_POLL: libc::c_int = 46;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Room for one control message carrying an `int` (segment sizes): CMSG_SPACE(4) is 24 on
/// 64-bit Linux; 32 leaves slack. `u64` elements keep it aligned for `cmsghdr`.
const CONTROL_WORDS: usize = 4;
type ControlBuffer = [u64; CONTROL_WORDS];

/// One datagram (or, with `segment_size`, one GSO batch of datagrams) to send.
///
/// The bytes sent are `header` followed by `payload`, gathered by the kernel (no copy here).
/// With `segment_size: Some(s)` the concatenation is cut into datagrams of `s` bytes (the last
/// may be shorter); `header` then belongs to the first segment only, so callers that need a
/// header per segment lay the segments out in `payload` and leave `header` empty.
#[derive(Clone, Copy, Debug)]
pub struct OutDatagram<'a> {
    /// Where the datagram goes.
    pub destination: SocketAddr,
    /// First part of the bytes (may be empty).
    pub header: &'a [u8],
    /// Second part of the bytes (may be empty).
    pub payload: &'a [u8],
    /// GSO segment size in bytes, or `None` for one plain datagram.
    pub segment_size: Option<u16>,
}

impl<'a> OutDatagram<'a> {
    /// A plain datagram of `header` + `payload`.
    pub fn new(destination: SocketAddr, header: &'a [u8], payload: &'a [u8]) -> Self {
        OutDatagram {
            destination,
            header,
            payload,
            segment_size: None,
        }
    }

    /// Total bytes this entry carries.
    pub fn len(&self) -> usize {
        self.header.len() + self.payload.len()
    }

    /// Whether it carries no bytes (a valid, empty datagram).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One message of a [`Gather`]: `part_count` consecutive parts from `first_part`, sent as
/// one datagram or, with `segment_size`, as one GSO send cut into datagrams of
/// `segment_size` bytes (the last may be shorter). A segment may span any number of parts
/// (e.g. a header and a payload), and a part may span segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherRun {
    /// Where the datagrams go.
    pub destination: SocketAddr,
    /// Index of the message's first part among the gather's parts.
    pub first_part: usize,
    /// Number of parts (0 sends an empty datagram).
    pub part_count: usize,
    /// GSO segment size in bytes, or `None` for one plain datagram.
    pub segment_size: Option<u16>,
}

/// Reusable storage of a [`Gather`] (iovecs and message descriptors): allocated once, so
/// that laying out and sending a batch allocates nothing (unless a batch outgrows it).
#[derive(Debug, Default)]
pub struct GatherBuffer {
    iovecs: Vec<libc::iovec>,
    runs: Vec<GatherRun>,
}

// SAFETY: the iovecs' pointers are only read through a `Gather`, which borrows the buffer
// for no longer than the slices they were made from; outside one they are never
// dereferenced (a new `Gather` clears them first).
unsafe impl Send for GatherBuffer {}

impl GatherBuffer {
    /// Storage for `parts` parts and `messages` messages before it grows.
    pub fn with_capacity(parts: usize, messages: usize) -> GatherBuffer {
        GatherBuffer {
            iovecs: Vec::with_capacity(parts),
            runs: Vec::with_capacity(messages),
        }
    }

    /// Starts laying out a new batch (empty) in this storage.
    pub fn gather<'a>(&'a mut self) -> Gather<'a> {
        self.iovecs.clear();
        self.runs.clear();
        Gather {
            buffer: self,
            parts: PhantomData,
        }
    }
}

/// Messages laid out for [`UdpSocket::send_gather`], each gathered from its parts in place
/// (the kernel reads them where they are, no copy here): slices that live at least as long
/// as the gather.
#[derive(Debug)]
pub struct Gather<'a> {
    buffer: &'a mut GatherBuffer,
    parts: PhantomData<&'a [u8]>,
}

impl<'a> Gather<'a> {
    /// Starts a new message to `destination`, a plain datagram until
    /// [`Gather::set_segment_size`]; the parts pushed next belong to it.
    pub fn start_message(&mut self, destination: SocketAddr) {
        self.buffer.runs.push(GatherRun {
            destination,
            first_part: self.buffer.iovecs.len(),
            part_count: 0,
            segment_size: None,
        });
    }

    /// Appends `part` to the current message (starting one to an unspecified address if
    /// there is none: call [`Gather::start_message`] first).
    pub fn push_part(&mut self, part: &'a [u8]) {
        if self.buffer.runs.is_empty() {
            self.start_message(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        }
        self.buffer.iovecs.push(libc::iovec {
            // The kernel only reads through this pointer (sendmmsg).
            iov_base: part.as_ptr() as *mut c_void,
            iov_len: part.len(),
        });
        if let Some(run) = self.buffer.runs.last_mut() {
            run.part_count += 1;
        }
    }

    /// Makes the current message a GSO send of `segment_size`-byte datagrams (`None`: one
    /// plain datagram). Needs [`UdpSocket::gso_supported`] and the kernel's limits
    /// ([`max_gso_bytes`]) when sent.
    pub fn set_segment_size(&mut self, segment_size: Option<u16>) {
        if let Some(run) = self.buffer.runs.last_mut() {
            run.segment_size = segment_size;
        }
    }

    /// The messages laid out so far.
    pub fn messages(&self) -> &[GatherRun] {
        &self.buffer.runs
    }

    /// Parts laid out so far (all messages).
    pub fn part_count(&self) -> usize {
        self.buffer.iovecs.len()
    }

    /// The parts of message `index` (none if there is no such message).
    pub fn parts(&self, index: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        let range = self
            .buffer
            .runs
            .get(index)
            .map_or(0..0, |run| run.first_part..run.first_part + run.part_count);
        self.buffer.iovecs[range].iter().map(|iovec| {
            // SAFETY: every iovec was made by `push_part` from a `&'a [u8]`, alive for 'a
            // (the buffer is borrowed for 'a and cleared before it is reused).
            unsafe { std::slice::from_raw_parts(iovec.iov_base as *const u8, iovec.iov_len) }
        })
    }
}

/// Largest total length of one GSO send with segments of `segment_bytes`, for a socket of
/// the given family: whole segments only, at most [`MAX_GSO_SEGMENTS`], and within one IP
/// packet's length limit.
pub fn max_gso_bytes(segment_bytes: usize, ipv6: bool) -> usize {
    let limit = if ipv6 {
        MAX_DATAGRAM_BYTES_V6
    } else {
        MAX_DATAGRAM_BYTES_V4
    };
    if segment_bytes == 0 {
        return 0;
    }
    (limit / segment_bytes).min(MAX_GSO_SEGMENTS) * segment_bytes
}

/// A non-blocking, close-on-exec UDP socket with batched I/O.
///
/// Not `Sync`: the send path reuses scratch arrays owned by the socket (`&mut self`).
#[derive(Debug)]
pub struct UdpSocket {
    fd: OwnedFd,
    local_address: SocketAddr,
    gso_supported: bool,
    gro_enabled: bool,
    send_scratch: SendScratch,
    /// The peer of [`UdpSocket::connect`]: datagrams to it leave without an address, on the
    /// route the kernel cached at connect (cheaper than a lookup per datagram).
    connected: Option<SocketAddr>,
}

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
    /// As [`UdpSocket::send_batch`] (for a GSO message beyond the kernel's limits, or more
    /// than [`MAX_GATHER_PARTS`] parts, the kernel's `EINVAL`/`EMSGSIZE`). No message from
    /// `first_message` on returns `Ok(0)`.
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
    /// docs/PERFORMANCE.md, "udp latency path (session 8)").
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

/// One descriptor that becomes readable when any of several sockets (or other
/// descriptors) is: an epoll set, for a process that receives on one UDP socket per link and
/// sleeps in `poll` on a single descriptor.
#[derive(Debug)]
pub struct ReadinessSet {
    epoll: OwnedFd,
    members: usize,
}

impl ReadinessSet {
    /// An empty set.
    ///
    /// # Errors
    /// `epoll_create1` failed (descriptor limits).
    pub fn new() -> io::Result<ReadinessSet> {
        // SAFETY: plain syscall; the result is a fresh descriptor.
        let raw = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `raw` was just created and is owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(ReadinessSet { epoll, members: 0 })
    }

    /// Adds `fd` (level-triggered, readable). The caller keeps `fd` open while the set is
    /// used; closing it removes it from the set. (A raw descriptor: an invalid one is an
    /// error from the kernel, nothing worse.)
    ///
    /// # Errors
    /// `epoll_ctl` failed (e.g. `fd` is not open or not pollable, or already in the set).
    pub fn add(&mut self, fd: RawFd) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: self.members as u64,
        };
        // SAFETY: both descriptors are valid; `event` is a valid epoll_event.
        check(unsafe {
            libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event)
        })?;
        self.members += 1;
        Ok(())
    }

    /// Number of descriptors added.
    pub fn len(&self) -> usize {
        self.members
    }

    /// Which members are readable right now, without waiting: bit `i` set for the `i`-th
    /// descriptor added. A member at index 64 or above being ready sets every bit (the
    /// caller then looks at all of them). One `epoll_wait` instead of a receive attempt on
    /// every member: a process busy-polling several sockets, most of them idle, skips the
    /// empty ones.
    ///
    /// # Errors
    /// `epoll_wait` failed (interrupted calls are retried).
    pub fn ready_now(&self) -> io::Result<u64> {
        const EVENTS: usize = 64;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        let count = loop {
            // SAFETY: `events` is a valid, writable array of EVENTS epoll_event; timeout 0
            // never blocks.
            let result = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    EVENTS as libc::c_int,
                    0,
                )
            };
            match check(result) {
                Ok(count) => break count as usize,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        };
        let mut ready = 0u64;
        for event in &events[..count.min(EVENTS)] {
            let index = event.u64;
            if index >= 64 {
                return Ok(u64::MAX);
            }
            ready |= 1 << index;
        }
        Ok(ready)
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.members == 0
    }
}

impl AsRawFd for ReadinessSet {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

/// Preallocated receive state for [`UdpSocket::recv_batch`]: `capacity` buffers of
/// `buffer_bytes` each, plus the kernel-facing headers, addresses and control buffers.
#[derive(Debug)]
pub struct RecvBatch {
    data: Vec<u8>,
    buffer_bytes: usize,
    headers: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
    addresses: Vec<libc::sockaddr_storage>,
    controls: Vec<ControlBuffer>,
    metadata: Vec<RecvMetadata>,
    received: usize,
}

// SAFETY: the raw pointers inside `headers`/`iovecs` only ever point into this struct's own
// heap buffers and are rewritten before every use; nothing is shared with another thread.
unsafe impl Send for RecvBatch {}

/// What the kernel said about one received message.
#[derive(Clone, Copy, Debug)]
struct RecvMetadata {
    source: SocketAddr,
    length_bytes: usize,
    segment_bytes: usize,
    truncated: bool,
}

impl RecvBatch {
    /// Allocates `capacity` receive buffers of `buffer_bytes` each (both at least 1). With
    /// GRO on, use [`MAX_COALESCED_BYTES`]; otherwise the largest datagram expected.
    pub fn new(capacity: usize, buffer_bytes: usize) -> RecvBatch {
        let capacity = capacity.clamp(1, 1024);
        let buffer_bytes = buffer_bytes.max(1);
        let unspecified = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        RecvBatch {
            data: vec![0; capacity * buffer_bytes],
            buffer_bytes,
            // SAFETY: mmsghdr, iovec and sockaddr_storage are plain old data; all-zero
            // (null pointers, zero lengths) is valid.
            headers: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            iovecs: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            addresses: vec![unsafe { zeroed() }; capacity],
            controls: vec![[0; CONTROL_WORDS]; capacity],
            metadata: vec![
                RecvMetadata {
                    source: unspecified,
                    length_bytes: 0,
                    segment_bytes: 0,
                    truncated: false,
                };
                capacity
            ],
            received: 0,
        }
    }

    /// How many messages one receive can return.
    pub fn capacity(&self) -> usize {
        self.headers.len()
    }

    /// Length of each receive buffer in bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Number of messages the last [`UdpSocket::recv_batch`] returned.
    pub fn len(&self) -> usize {
        self.received
    }

    /// Whether the last receive returned nothing.
    pub fn is_empty(&self) -> bool {
        self.received == 0
    }

    /// Message `index` of the last receive.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn message(&self, index: usize) -> RecvMessage<'_> {
        assert!(index < self.received, "message index out of range");
        let metadata = &self.metadata[index];
        let start = index * self.buffer_bytes;
        RecvMessage {
            data: &self.data[start..start + metadata.length_bytes],
            source: metadata.source,
            segment_bytes: metadata.segment_bytes,
            truncated: metadata.truncated,
        }
    }

    /// The messages of the last receive, in order.
    pub fn iter(&self) -> impl Iterator<Item = RecvMessage<'_>> {
        (0..self.received).map(move |index| self.message(index))
    }

    /// Points the first `count` headers at their buffers, address and control slots (the
    /// kernel overwrites the lengths on each receive, so this runs before every call).
    fn prepare(&mut self, count: usize) {
        let data = self.data.as_mut_ptr();
        for index in 0..count.min(self.headers.len()) {
            self.iovecs[index] = libc::iovec {
                // In bounds: index < capacity and data holds capacity * buffer_bytes bytes.
                iov_base: data.wrapping_add(index * self.buffer_bytes) as *mut c_void,
                iov_len: self.buffer_bytes,
            };
            let header = &mut self.headers[index].msg_hdr;
            header.msg_name = &mut self.addresses[index] as *mut _ as *mut c_void;
            header.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header.msg_iov = &mut self.iovecs[index];
            header.msg_iovlen = 1;
            header.msg_control = self.controls[index].as_mut_ptr() as *mut c_void;
            header.msg_controllen = size_of::<ControlBuffer>();
            header.msg_flags = 0;
            self.headers[index].msg_len = 0;
        }
    }

    /// Reads lengths, sources and GRO segment sizes of the first `received` headers.
    fn finish(&mut self, received: usize) {
        for index in 0..received {
            let message = &self.headers[index];
            let length_bytes = (message.msg_len as usize).min(self.buffer_bytes);
            let header = &message.msg_hdr;
            let source = read_socket_address(&self.addresses[index], header.msg_namelen)
                .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
            let segment_bytes = gro_segment_size(header).unwrap_or(length_bytes);
            self.metadata[index] = RecvMetadata {
                source,
                length_bytes,
                segment_bytes,
                truncated: header.msg_flags & libc::MSG_TRUNC != 0,
            };
        }
        self.received = received;
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

/// One received message: a single datagram, or several coalesced by GRO.
#[derive(Clone, Copy, Debug)]
pub struct RecvMessage<'a> {
    /// The bytes received (all segments, concatenated).
    pub data: &'a [u8],
    /// Who sent it.
    pub source: SocketAddr,
    /// Size of each datagram inside `data` (the last may be shorter); equals `data.len()`
    /// when the kernel did not coalesce.
    pub segment_bytes: usize,
    /// The buffer was too small and the kernel cut the message (`MSG_TRUNC`).
    pub truncated: bool,
}

impl<'a> RecvMessage<'a> {
    /// The datagrams inside this message, in the order they were sent. An empty datagram
    /// yields one empty slice.
    pub fn datagrams(&self) -> Datagrams<'a> {
        Datagrams {
            remaining: self.data,
            segment_bytes: self.segment_bytes.max(1),
            empty_pending: self.data.is_empty(),
        }
    }
}

/// Iterator over the datagrams of a [`RecvMessage`].
#[derive(Clone, Debug)]
pub struct Datagrams<'a> {
    remaining: &'a [u8],
    segment_bytes: usize,
    empty_pending: bool,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.empty_pending {
            self.empty_pending = false;
            return Some(&[]);
        }
        if self.remaining.is_empty() {
            return None;
        }
        let take = self.segment_bytes.min(self.remaining.len());
        let (head, tail) = self.remaining.split_at(take);
        self.remaining = tail;
        Some(head)
    }
}

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

/// Preallocated kernel-facing arrays for `sendmmsg`.
#[derive(Debug)]
struct SendScratch {
    headers: Vec<libc::mmsghdr>,
    iovecs: Vec<[libc::iovec; 2]>,
    addresses: Vec<libc::sockaddr_storage>,
    controls: Vec<ControlBuffer>,
}

// SAFETY: the raw pointers inside are rewritten before every sendmmsg and point only into
// this struct's own heap buffers or into slices borrowed for the duration of that one call.
unsafe impl Send for SendScratch {}

impl SendScratch {
    fn new(capacity: usize) -> SendScratch {
        SendScratch {
            // SAFETY: mmsghdr, iovec and sockaddr_storage are plain old data; all-zero is
            // valid (null pointers, zero lengths).
            headers: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            iovecs: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            addresses: vec![unsafe { zeroed() }; capacity],
            controls: vec![[0; CONTROL_WORDS]; capacity],
        }
    }

    /// Fills slot `index` for `datagram`; `ipv6_socket` maps IPv4 destinations. Without
    /// `addressed` the datagram goes to the socket's connected peer (no address).
    fn fill(
        &mut self,
        index: usize,
        datagram: &OutDatagram<'_>,
        ipv6_socket: bool,
        addressed: bool,
    ) {
        let mut parts = 0;
        for part in [datagram.header, datagram.payload] {
            if !part.is_empty() {
                self.iovecs[index][parts] = libc::iovec {
                    // The kernel only reads through this pointer (sendmmsg).
                    iov_base: part.as_ptr() as *mut c_void,
                    iov_len: part.len(),
                };
                parts += 1;
            }
        }
        let iov = self.iovecs[index].as_mut_ptr();
        self.fill_message(
            index,
            datagram.destination,
            (iov, parts),
            datagram.segment_size,
            ipv6_socket,
            addressed,
        );
    }

    /// Fills slot `index` for a message of the iovec array `iov` (pointer, count), which
    /// must stay alive and unmoved until the `sendmmsg` that uses the slot.
    fn fill_message(
        &mut self,
        index: usize,
        destination: SocketAddr,
        iov: (*mut libc::iovec, usize),
        segment_size: Option<u16>,
        ipv6_socket: bool,
        addressed: bool,
    ) {
        let destination = match (ipv6_socket, destination) {
            (true, SocketAddr::V4(v4)) => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            (_, other) => other,
        };
        let address_length = write_socket_address(&destination, &mut self.addresses[index]);
        let header = &mut self.headers[index].msg_hdr;
        if addressed {
            header.msg_name = &mut self.addresses[index] as *mut _ as *mut c_void;
            header.msg_namelen = address_length;
        } else {
            header.msg_name = std::ptr::null_mut();
            header.msg_namelen = 0;
        }
        header.msg_iov = iov.0;
        header.msg_iovlen = iov.1;
        header.msg_flags = 0;
        match segment_size {
            Some(segment) => {
                header.msg_control = self.controls[index].as_mut_ptr() as *mut c_void;
                // SAFETY: CMSG_SPACE is a pure computation.
                header.msg_controllen =
                    unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
                // SAFETY: msg_control points at a live, aligned buffer of CONTROL_WORDS u64
                // (32 bytes), larger than CMSG_SPACE(2) = 24, so the first header fits.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(header);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, segment);
                }
            }
            None => {
                header.msg_control = std::ptr::null_mut();
                header.msg_controllen = 0;
            }
        }
        self.headers[index].msg_len = 0;
    }
}

/// The GRO segment size from a received message's control data, if the kernel put one.
fn gro_segment_size(header: &libc::msghdr) -> Option<usize> {
    // SAFETY: the kernel filled msg_control/msg_controllen for this header; the CMSG_*
    // macros stay within msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(header) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points inside the control buffer.
        let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
        if level == libc::SOL_UDP && kind == UDP_GRO {
            // SAFETY: a UDP_GRO control message carries one int; read unaligned.
            let size = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const i32) };
            return usize::try_from(size).ok().filter(|&size| size > 0);
        }
        // SAFETY: walking the control buffer the kernel filled.
        cmsg = unsafe { libc::CMSG_NXTHDR(header, cmsg) };
    }
    None
}

/// Writes `address` into `storage` as a sockaddr_in/sockaddr_in6; returns its length.
fn write_socket_address(
    address: &SocketAddr,
    storage: &mut libc::sockaddr_storage,
) -> libc::socklen_t {
    match address {
        SocketAddr::V4(v4) => {
            let raw = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(storage as *mut _ as *mut libc::sockaddr_in, raw) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            let raw = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(storage as *mut _ as *mut libc::sockaddr_in6, raw) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a sockaddr_in/sockaddr_in6 the kernel wrote; None for other families.
fn read_socket_address(
    storage: &libc::sockaddr_storage,
    length: libc::socklen_t,
) -> Option<SocketAddr> {
    let length = length as usize;
    match storage.ss_family as libc::c_int {
        libc::AF_INET if length >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in; storage is aligned
            // for it.
            let raw = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(raw.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(raw.sin_port),
            )))
        }
        libc::AF_INET6 if length >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6; storage is aligned
            // for it.
            let raw = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(raw.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(raw.sin6_port),
                raw.sin6_flowinfo,
                raw.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The local address of a bound socket.
fn local_address(socket: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage`/`length` are valid out-pointers of the stated size.
    check(unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            &mut storage as *mut _ as *mut libc::sockaddr,
            &mut length,
        )
    })?;
    read_socket_address(&storage, length)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected address family"))
}

/// Turns a `-1`-style return value into the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

#[cfg(test)]
mod readiness_tests {
    use super::*;

    #[test]
    fn readiness_set_wakes_for_any_member() {
        let receivers: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap())
            .collect();
        let mut set = ReadinessSet::new().unwrap();
        for socket in &receivers {
            set.add(socket.as_raw_fd()).unwrap();
        }
        assert_eq!(set.len(), 3);
        let mut fds = [libc::pollfd {
            fd: set.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(crate::sys::poll(&mut fds, Some(Duration::ZERO)).unwrap(), 0);
        let mut sender = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        sender
            .send_to(receivers[2].local_address(), b"wake")
            .unwrap();
        assert_eq!(
            crate::sys::poll(&mut fds, Some(Duration::from_secs(5))).unwrap(),
            1
        );
        // Only the member that has a datagram is reported (bit 2), until it is taken.
        assert_eq!(set.ready_now().unwrap(), 1 << 2);
        sender
            .send_to(receivers[0].local_address(), b"also")
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while set.ready_now().unwrap() != 0b101 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(set.ready_now().unwrap(), 0b101);
        let mut receivers = receivers;
        let mut batch = RecvBatch::new(4, MAX_COALESCED_BYTES);
        assert_eq!(receivers[2].recv_batch(&mut batch).unwrap(), 1);
        assert_eq!(set.ready_now().unwrap(), 0b001);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn loopback_pair() -> (UdpSocket, UdpSocket) {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        (UdpSocket::bind(any).unwrap(), UdpSocket::bind(any).unwrap())
    }

    /// Receives until `want` datagrams arrived (or 5 s pass), returning them split.
    fn receive_datagrams(
        socket: &mut UdpSocket,
        batch: &mut RecvBatch,
        want: usize,
    ) -> (Vec<Vec<u8>>, usize) {
        let mut datagrams = Vec::new();
        let mut messages = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while datagrams.len() < want && Instant::now() < deadline {
            match socket.recv_batch(batch) {
                Ok(_) => {
                    for message in batch.iter() {
                        assert!(!message.truncated);
                        messages += 1;
                        datagrams.extend(message.datagrams().map(<[u8]>::to_vec));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    socket
                        .wait_readable(Some(Duration::from_millis(100)))
                        .unwrap();
                }
                Err(e) => panic!("recv_batch: {e}"),
            }
        }
        (datagrams, messages)
    }

    #[test]
    fn batch_of_64_round_trips() {
        let (mut a, mut b) = loopback_pair();
        let headers: Vec<[u8; 4]> = (0..64u32).map(|i| i.to_be_bytes()).collect();
        let payloads: Vec<Vec<u8>> = (0..64usize).map(|i| vec![i as u8; i * 10]).collect();
        let batch: Vec<OutDatagram<'_>> = (0..64)
            .map(|i| OutDatagram::new(b.local_address(), &headers[i], &payloads[i]))
            .collect();
        let mut sent = 0;
        while sent < batch.len() {
            sent += a.send_batch(&batch[sent..]).unwrap();
        }
        let mut receive = RecvBatch::new(16, 2048);
        let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 64);
        assert_eq!(datagrams.len(), 64);
        for (i, datagram) in datagrams.iter().enumerate() {
            assert_eq!(&datagram[..4], &headers[i]);
            assert_eq!(&datagram[4..], &payloads[i][..]);
        }
        // Replies go back to the reported source.
        let source = receive.message(receive.len() - 1).source;
        assert_eq!(source, a.local_address());
        b.send_to(source, b"pong").unwrap();
        let (reply, _) = receive_datagrams(&mut a, &mut receive, 1);
        assert_eq!(reply, vec![b"pong".to_vec()]);
        assert_eq!(
            a.recv_batch(&mut receive).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    fn gso_round_trip(gro: bool) {
        let (mut a, mut b) = loopback_pair();
        assert!(a.gso_supported(), "UDP_SEGMENT not supported");
        b.set_gro(gro).unwrap();
        let total: usize = 64 * 1024;
        let segment: usize = 1400;
        let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 1400) as u8).collect();
        // 64 KiB exceeds one IP packet, so the buffer goes out as a batch of GSO sends.
        let chunk = max_gso_bytes(segment, false);
        let batch: Vec<OutDatagram<'_>> = data
            .chunks(chunk)
            .map(|part| OutDatagram {
                destination: b.local_address(),
                header: &[],
                payload: part,
                segment_size: Some(segment as u16),
            })
            .collect();
        assert_eq!(a.send_batch(&batch).unwrap(), batch.len());
        let want = total.div_ceil(segment);
        let mut receive = RecvBatch::new(64, MAX_COALESCED_BYTES);
        let (datagrams, messages) = receive_datagrams(&mut b, &mut receive, want);
        assert_eq!(datagrams.len(), want);
        assert!(datagrams[..want - 1].iter().all(|d| d.len() == segment));
        assert_eq!(datagrams.concat(), data);
        if gro {
            assert!(messages < want, "GRO on but nothing was coalesced");
        } else {
            assert_eq!(messages, want);
        }
    }

    /// Sends `count` datagrams of `segment` bytes (datagram i filled with byte i) from `a`
    /// to `b` as one GSO send.
    fn send_gso_run(a: &mut UdpSocket, b: &UdpSocket, count: usize, segment: usize) {
        let data: Vec<u8> = (0..count * segment).map(|i| (i / segment) as u8).collect();
        let run = [OutDatagram {
            destination: b.local_address(),
            header: &[],
            payload: &data,
            segment_size: Some(segment as u16),
        }];
        assert_eq!(a.send_batch(&run).unwrap(), 1);
    }

    /// Receives with `recv_one` until `want` datagrams arrived (or 5 s pass): the
    /// datagrams, and how many of the receives came back coalesced.
    fn receive_one_by_one(socket: &mut UdpSocket, want: usize) -> (Vec<Vec<u8>>, usize) {
        let mut batch = RecvBatch::new(1, MAX_COALESCED_BYTES);
        let (mut datagrams, mut coalesced) = (Vec::new(), 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while datagrams.len() < want && Instant::now() < deadline {
            if socket.recv_one(&mut batch).unwrap() == 0 {
                socket
                    .wait_readable(Some(Duration::from_millis(100)))
                    .unwrap();
                continue;
            }
            let message = batch.message(0);
            assert!(!message.truncated);
            let before = datagrams.len();
            datagrams.extend(message.datagrams().map(<[u8]>::to_vec));
            coalesced += usize::from(datagrams.len() - before > 1);
        }
        (datagrams, coalesced)
    }

    #[test]
    fn gro_goes_off_only_with_nothing_coalesced_queued() {
        let (mut a, mut b) = loopback_pair();
        b.set_gro(true).unwrap();
        // Coalesced while GRO is on: GRO stays on, and the run is read split.
        send_gso_run(&mut a, &b, 8, 100);
        assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
        assert!(!b.gro_off_if_idle().unwrap());
        assert!(b.gro_enabled());
        let (datagrams, coalesced) = receive_one_by_one(&mut b, 8);
        assert_eq!(datagrams.len(), 8);
        assert!(
            coalesced > 0,
            "the run was not coalesced: the test proves nothing"
        );
        for (i, datagram) in datagrams.iter().enumerate() {
            assert_eq!(datagram, &vec![i as u8; 100]);
        }
        // With the queue empty GRO goes off, and a GSO run arrives datagram by datagram
        // (the kernel splits it), through the plain receive.
        assert!(b.gro_off_if_idle().unwrap());
        assert!(!b.gro_enabled());
        send_gso_run(&mut a, &b, 8, 100);
        let (datagrams, coalesced) = receive_one_by_one(&mut b, 8);
        assert_eq!(coalesced, 0);
        for (i, datagram) in datagrams.iter().enumerate() {
            assert_eq!(datagram, &vec![i as u8; 100]);
        }
        // A datagram longer than the buffer is reported cut, from either receive.
        let mut small = RecvBatch::new(1, 64);
        for gro in [false, true] {
            b.set_gro(gro).unwrap();
            a.send_to(b.local_address(), &[7; 100]).unwrap();
            b.wait_readable(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(b.recv_one(&mut small).unwrap(), 1);
            let message = small.message(0);
            assert!(message.truncated, "gro {gro}");
            assert_eq!(message.data, &[7; 64][..]);
            assert_eq!(message.source, a.local_address());
        }
    }

    #[test]
    fn a_split_receive_puts_the_body_in_its_buffer_and_the_rest_back_together() {
        let (mut a, mut b) = loopback_pair();
        let mut batch = RecvBatch::new(4, MAX_COALESCED_BYTES);
        let mut head = [0u8; 16];
        let mut body = vec![0u8; 1000];
        let pattern = |len: usize| (0..len).map(|i| (i * 7 + len) as u8).collect::<Vec<u8>>();
        for gro in [false, true] {
            b.set_gro(gro).unwrap();
            for len in [0usize, 5, 16, 17, 500, 1016, 1017, 5000, 65_000] {
                let sent = pattern(len);
                a.send_to(b.local_address(), &sent).unwrap();
                assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
                body.fill(0xEE);
                match b.recv_split(&mut batch, &mut head, &mut body).unwrap() {
                    SplitRecv::Split { body_len, source } => {
                        assert!((17..=1016).contains(&len), "{len} bytes split");
                        assert_eq!(source, a.local_address());
                        assert_eq!(body_len, len - 16);
                        assert_eq!(&head[..], &sent[..16]);
                        assert_eq!(&body[..body_len], &sent[16..]);
                    }
                    SplitRecv::Whole => {
                        assert!(!(17..=1016).contains(&len), "{len} bytes not split");
                        assert_eq!(batch.len(), 1);
                        let message = batch.message(0);
                        assert!(!message.truncated);
                        assert_eq!(message.source, a.local_address());
                        assert_eq!(message.data, &sent[..], "{len} bytes, gro {gro}");
                    }
                    SplitRecv::Nothing => panic!("{len} bytes: nothing received"),
                }
            }
            assert_eq!(
                b.recv_split(&mut batch, &mut head, &mut body).unwrap(),
                SplitRecv::Nothing
            );
        }
        // A slot shorter than head and body: what fits, reported cut.
        let mut small = RecvBatch::new(1, 64);
        let sent = pattern(5000);
        a.send_to(b.local_address(), &sent).unwrap();
        assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
        assert_eq!(
            b.recv_split(&mut small, &mut head, &mut body).unwrap(),
            SplitRecv::Whole
        );
        let message = small.message(0);
        assert!(message.truncated);
        assert_eq!(message.data, &sent[..64]);
        // Several datagrams coalesced by GRO come back together, to be read split.
        b.set_gro(true).unwrap();
        send_gso_run(&mut a, &b, 8, 100);
        assert!(b.wait_readable(Some(Duration::from_secs(5))).unwrap());
        let mut datagrams = Vec::new();
        while datagrams.len() < 8 {
            match b.recv_split(&mut batch, &mut head, &mut body).unwrap() {
                SplitRecv::Whole => {
                    datagrams.extend(batch.message(0).datagrams().map(<[u8]>::to_vec));
                }
                SplitRecv::Split { body_len, .. } => {
                    assert_eq!(body_len, 84, "a lone datagram of the run");
                    datagrams.push([&head[..], &body[..body_len]].concat());
                }
                SplitRecv::Nothing => {
                    b.wait_readable(Some(Duration::from_secs(5))).unwrap();
                }
            }
        }
        for (i, datagram) in datagrams.iter().enumerate() {
            assert_eq!(datagram, &vec![i as u8; 100]);
        }
    }

    #[test]
    fn gso_64k_with_gro() {
        gso_round_trip(true);
    }

    #[test]
    fn gso_64k_without_gro() {
        gso_round_trip(false);
    }

    /// `count` (header, payload) pairs: header = index, payload `payload_bytes` long (the
    /// last `last_short` bytes shorter), cut from one buffer as a send ring would hold them.
    fn gathered_pairs(
        count: usize,
        payload_bytes: usize,
        last_short: usize,
    ) -> (Vec<[u8; 8]>, Vec<u8>, Vec<Vec<u8>>) {
        let headers: Vec<[u8; 8]> = (0..count as u64).map(u64::to_be_bytes).collect();
        let ring: Vec<u8> = (0..count * payload_bytes)
            .map(|i| (i * 31 + i / 251) as u8)
            .collect();
        let mut expected = Vec::new();
        for (i, header) in headers.iter().enumerate() {
            let len = if i + 1 == count {
                payload_bytes - last_short
            } else {
                payload_bytes
            };
            let start = i * payload_bytes;
            expected.push([&header[..], &ring[start..start + len]].concat());
        }
        (headers, ring, expected)
    }

    /// Sends every message of `gather`, resubmitting the rest after a partial send.
    fn send_all_gathered(socket: &mut UdpSocket, gather: &Gather<'_>) {
        let mut sent = 0;
        while sent < gather.messages().len() {
            match socket.send_gather(gather, sent) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("send_gather: {e}"),
            }
        }
    }

    /// Sends `count` in-place pairs as runs of at most `per_run` segments (GSO when
    /// `per_run > 1`) and checks that exactly the right datagrams arrive.
    fn gathered_round_trip(count: usize, payload_bytes: usize, per_run: usize, gro: bool) {
        let (mut a, mut b) = loopback_pair();
        b.set_gro(gro).unwrap();
        let last_short = payload_bytes / 3;
        let (headers, ring, expected) = gathered_pairs(count, payload_bytes, last_short);
        let segment = 8 + payload_bytes;
        let mut buffer = GatherBuffer::default();
        let mut gather = buffer.gather();
        for (i, header) in headers.iter().enumerate() {
            let len = expected[i].len() - 8;
            let start = i * payload_bytes;
            if i % per_run == 0 {
                gather.start_message(b.local_address());
            } else {
                gather.set_segment_size(Some(segment as u16));
            }
            gather.push_part(header);
            gather.push_part(&ring[start..start + len]);
        }
        assert_eq!(gather.messages().len(), count.div_ceil(per_run));
        assert_eq!(gather.part_count(), 2 * count);
        let first: Vec<u8> = gather.parts(0).flatten().copied().collect();
        assert!(first == expected[..per_run.min(count)].concat());
        send_all_gathered(&mut a, &gather);
        let mut receive = RecvBatch::new(64, MAX_COALESCED_BYTES);
        let (datagrams, messages) = receive_datagrams(&mut b, &mut receive, count);
        assert_eq!(datagrams.len(), count);
        assert!(datagrams == expected, "datagrams differ");
        assert_eq!(datagrams[count - 1].len(), segment - last_short);
        if !gro {
            assert_eq!(messages, count);
        }
    }

    #[test]
    fn gathered_gso_runs_arrive_as_their_pairs() {
        let (a, _) = loopback_pair();
        assert!(a.gso_supported(), "UDP_SEGMENT not supported");
        // MTU-1500-sized segments: 44 per run within one IP packet's 64 KiB.
        let per_run = max_gso_bytes(8 + 1464, false) / (8 + 1464);
        assert_eq!(per_run, 44);
        gathered_round_trip(300, 1464, per_run, false);
        gathered_round_trip(300, 1464, per_run, true);
        // MTU 9000 (7 per run) and tiny segments (the 64-segment limit: 128 iovecs).
        gathered_round_trip(50, 8952, max_gso_bytes(8 + 8952, false) / (8 + 8952), false);
        gathered_round_trip(200, 92, MAX_GSO_SEGMENTS, false);
    }

    #[test]
    fn gathered_plain_datagrams_without_gso() {
        gathered_round_trip(150, 1464, 1, false);
        gathered_round_trip(3, 60_000, 1, false);
    }

    #[test]
    fn gathered_segments_ignore_the_part_layout() {
        let (mut a, mut b) = loopback_pair();
        // Three segments of 1000 bytes from parts of 100, 2900 and 500 (the last 500 short).
        let data: Vec<u8> = (0..3500u32).map(|i| (i % 253) as u8).collect();
        let mut buffer = GatherBuffer::with_capacity(4, 1);
        let mut gather = buffer.gather();
        gather.start_message(b.local_address());
        for part in [&data[..100], &data[100..3000], &data[3000..]] {
            gather.push_part(part);
        }
        gather.set_segment_size(Some(1000));
        assert_eq!(a.send_gather(&gather, 0).unwrap(), 1);
        assert_eq!(a.send_gather(&gather, 1).unwrap(), 0);
        let mut receive = RecvBatch::new(8, MAX_COALESCED_BYTES);
        let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 4);
        let lengths: Vec<usize> = datagrams.iter().map(Vec::len).collect();
        assert_eq!(lengths, vec![1000, 1000, 1000, 500]);
        assert_eq!(datagrams.concat(), data);
    }

    #[test]
    fn gathers_reuse_their_buffer_and_the_kernel_caps_parts() {
        let (mut a, mut b) = loopback_pair();
        let bytes = [7u8; 4];
        let mut buffer = GatherBuffer::default();
        // More than IOV_MAX parts: the kernel refuses the message, nothing is sent.
        let mut gather = buffer.gather();
        gather.start_message(b.local_address());
        for _ in 0..=MAX_GATHER_PARTS {
            gather.push_part(&bytes);
        }
        assert!(a.send_gather(&gather, 0).is_err());
        // The buffer starts empty again; IOV_MAX parts go out as one datagram.
        let mut gather = buffer.gather();
        assert!(gather.messages().is_empty() && gather.part_count() == 0);
        gather.start_message(b.local_address());
        for _ in 0..MAX_GATHER_PARTS {
            gather.push_part(&bytes);
        }
        assert_eq!(a.send_gather(&gather, 0).unwrap(), 1);
        let mut receive = RecvBatch::new(4, 8192);
        let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 1);
        assert_eq!(datagrams, vec![vec![7u8; 4 * MAX_GATHER_PARTS]]);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            b.recv_batch(&mut receive).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn ipv6_socket_sends_to_ipv6() {
        let any = SocketAddr::from((Ipv6Addr::LOCALHOST, 0));
        let (Ok(mut a), Ok(mut b)) = (UdpSocket::bind(any), UdpSocket::bind(any)) else {
            return; // no IPv6 loopback on this machine
        };
        a.send_to(b.local_address(), b"six").unwrap();
        let mut receive = RecvBatch::new(4, 64);
        let (datagrams, _) = receive_datagrams(&mut b, &mut receive, 1);
        assert_eq!(datagrams, vec![b"six".to_vec()]);
        assert_eq!(receive.message(0).source, a.local_address());
    }

    #[test]
    fn options_apply() {
        let (a, _) = loopback_pair();
        let (send, receive) = a.set_buffer_sizes(4 << 20, 4 << 20).unwrap();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // Root forces the size past net.core.*mem_max; the kernel reports double.
            assert!(send >= 4 << 20 && receive >= 4 << 20, "{send} {receive}");
        } else {
            assert!(send > 0 && receive > 0);
        }
        a.set_busy_poll(Duration::from_micros(50)).unwrap();
    }

    #[test]
    fn truncation_is_reported() {
        let (mut a, mut b) = loopback_pair();
        a.send_to(b.local_address(), &[1u8; 100]).unwrap();
        let mut receive = RecvBatch::new(1, 10);
        b.wait_readable(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(b.recv_batch(&mut receive).unwrap(), 1);
        assert!(receive.message(0).truncated);
        assert_eq!(receive.message(0).data.len(), 10);
    }

    #[test]
    fn connected_socket_sends_without_an_address_and_gets_replies_elsewhere() {
        let (mut link, mut peer) = loopback_pair();
        let mut sender = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        sender.connect(peer.local_address()).unwrap();
        assert_eq!(sender.connected_peer(), Some(peer.local_address()));
        // To the connected peer (no address on the wire call) and, addressed, elsewhere.
        sender
            .send_batch(&[
                OutDatagram::new(peer.local_address(), b"hdr", b"one"),
                OutDatagram::new(peer.local_address(), b"", b"two"),
            ])
            .unwrap();
        let mut batch = RecvBatch::new(4, 2048);
        let (got, _) = receive_datagrams(&mut peer, &mut batch, 2);
        assert_eq!(got, vec![b"hdrone".to_vec(), b"two".to_vec()]);
        assert_eq!(batch.message(0).source, sender.local_address());
        // The peer answers the sending port: only the connected socket sees it.
        peer.send_to(sender.local_address(), b"reset").unwrap();
        let mut buffer = [0u8; 16];
        let deadline = Instant::now() + Duration::from_secs(5);
        let (n, from) = loop {
            match sender.recv_from(&mut buffer) {
                Ok(got) => break got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    sender
                        .wait_readable(Some(Duration::from_millis(100)))
                        .unwrap();
                }
                Err(e) => panic!("recv_from: {e}"),
            }
        };
        assert_eq!((&buffer[..n], from), (&b"reset"[..], peer.local_address()));
        // A stranger's datagram never reaches a connected socket.
        link.send_to(sender.local_address(), b"stranger").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let err = sender.recv_from(&mut buffer).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn single_datagram_send_and_receive() {
        let (mut a, mut b) = loopback_pair();
        let mut batch = RecvBatch::new(4, MAX_COALESCED_BYTES);
        // Nothing queued: 0, not an error.
        assert_eq!(b.recv_one(&mut batch).unwrap(), 0);
        assert!(batch.is_empty());
        // Addressed (sendto), then connected (send): both arrive whole, one per receive,
        // with their source.
        assert_eq!(a.send_one(b.local_address(), b"first").unwrap(), 5);
        let mut connected = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        connected.connect(b.local_address()).unwrap();
        assert_eq!(connected.send_one(b.local_address(), b"second").unwrap(), 6);
        b.wait_readable(Some(Duration::from_secs(5))).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(b.recv_one(&mut batch).unwrap(), 1);
        assert_eq!(batch.len(), 1);
        let first = batch.message(0);
        assert_eq!(
            (first.data, first.source),
            (&b"first"[..], a.local_address())
        );
        assert_eq!(first.datagrams().count(), 1);
        assert_eq!(b.recv_one(&mut batch).unwrap(), 1);
        let second = batch.message(0);
        assert_eq!(
            (second.data, second.source, second.truncated),
            (&b"second"[..], connected.local_address(), false)
        );
        assert_eq!(b.recv_one(&mut batch).unwrap(), 0);
        // Cut to a short buffer: reported like a batch receive does.
        let mut short = RecvBatch::new(1, 4);
        a.send_one(b.local_address(), &[9u8; 100]).unwrap();
        b.wait_readable(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(b.recv_one(&mut short).unwrap(), 1);
        assert!(short.message(0).truncated);
        assert_eq!(short.message(0).data, &[9u8; 4]);
    }

    #[test]
    fn single_receive_splits_a_coalesced_message() {
        let (mut a, mut b) = loopback_pair();
        b.set_gro(true).unwrap();
        // Four 100-byte segments and a 50-byte one in one GSO send: with GRO on, loopback
        // hands them over in one receive, with the segment size.
        let data: Vec<u8> = (0..450u32).map(|i| (i / 100) as u8 + 1).collect();
        let mut gso = OutDatagram::new(b.local_address(), &[], &data);
        gso.segment_size = Some(100);
        assert_eq!(a.send_batch(&[gso]).unwrap(), 1);
        b.wait_readable(Some(Duration::from_secs(5))).unwrap();
        let mut batch = RecvBatch::new(2, MAX_COALESCED_BYTES);
        let mut datagrams = Vec::new();
        let mut receives = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while datagrams.len() < 5 && Instant::now() < deadline {
            if b.recv_one(&mut batch).unwrap() == 1 {
                receives += 1;
                datagrams.extend(batch.message(0).datagrams().map(<[u8]>::to_vec));
            }
        }
        let lengths: Vec<usize> = datagrams.iter().map(Vec::len).collect();
        assert_eq!(lengths, [100, 100, 100, 100, 50]);
        assert!(receives < 5, "GRO on but nothing was coalesced");
        assert_eq!(datagrams.concat(), data);
    }

    #[test]
    fn single_send_from_an_ipv6_socket_to_ipv4() {
        let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
        let Ok(mut six) = UdpSocket::bind(any6) else {
            return; // no IPv6 on this machine
        };
        let (_, mut four) = loopback_pair();
        six.send_one(four.local_address(), b"mapped").unwrap();
        four.wait_readable(Some(Duration::from_secs(5))).unwrap();
        let mut batch = RecvBatch::new(1, 64);
        assert_eq!(four.recv_one(&mut batch).unwrap(), 1);
        assert_eq!(batch.message(0).data, b"mapped");
    }

    #[test]
    fn receiving_up_to_one_leaves_the_rest_queued() {
        let (mut a, mut b) = loopback_pair();
        for i in 0..3u8 {
            a.send_to(b.local_address(), &[i]).unwrap();
        }
        b.wait_readable(Some(Duration::from_secs(5))).unwrap();
        let mut batch = RecvBatch::new(8, 64);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(b.recv_batch_up_to(&mut batch, 1).unwrap(), 1);
        assert_eq!(batch.message(0).data, &[0]);
        // Asking for more than the batch holds is capped; the rest comes at once.
        assert_eq!(b.recv_batch_up_to(&mut batch, 100).unwrap(), 2);
        assert_eq!(
            (batch.message(0).data, batch.message(1).data),
            (&[1u8][..], &[2u8][..])
        );
        let err = b.recv_batch_up_to(&mut batch, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
}
