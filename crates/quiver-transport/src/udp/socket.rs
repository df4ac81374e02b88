//! [`UdpSocket`]: binding, connecting, offloads (GSO detection, GRO on and off), options and
//! the send paths (batches of datagrams and gathered messages with one `sendmmsg`, single
//! datagrams with one `send`/`sendto`), with the preallocated arrays a `sendmmsg` is filled
//! into ([`OutDatagram`] is one entry). The receive paths are an `impl UdpSocket` block of
//! their own, in `receive.rs`.
//!
//! Why the send paths and the scratch they fill share a module: the compiler puts a
//! module's functions in one codegen unit, which is what lets it inline filling a slot into
//! the send loop. With the scratch in a module of its own the loop compiled to different
//! code; in one module the send paths compile to the same instructions as the single-file
//! layout did (compared function by function in the release build).
//!
//! Layer: quiver-transport, the socket layer. Allocates only in [`UdpSocket::bind`] (and
//! when the send batch capacity changes); `unsafe` only around system calls.

use std::ffi::c_void;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::address::{local_address, write_socket_address};
use super::control::{ControlBuffer, CONTROL_WORDS};
use super::errno::check;
use super::gather::Gather;
use super::limits::{DEFAULT_SEND_BATCH, DEFAULT_SOCKET_BUFFER_BYTES};
use super::options::{
    get_int_option, set_buffer_sizes, set_busy_poll, set_int_option, set_nonblocking, UDP_GRO,
    UDP_SEGMENT,
};

/// A non-blocking, close-on-exec UDP socket with batched I/O.
///
/// Not `Sync`: the send path reuses scratch arrays owned by the socket (`&mut self`).
#[derive(Debug)]
pub struct UdpSocket {
    pub(super) fd: OwnedFd,
    local_address: SocketAddr,
    gso_supported: bool,
    /// GSO sends the kernel refused (each turned GSO off: [`UdpSocket::gso_refusals`]).
    gso_refusals: u64,
    /// The largest GSO segment this socket sends: lowered by a send refused because its
    /// datagrams no longer fit the path ([`UdpSocket::gso_max_segment`]).
    gso_max_segment: usize,
    /// Sends refused because their datagrams no longer fit the path's MTU
    /// ([`UdpSocket::size_refusals`]).
    size_refusals: u64,
    /// The room (datagram bytes) the path of the last size refusal has, not yet taken
    /// ([`UdpSocket::take_path_room`]).
    path_room: Option<usize>,
    pub(super) gro_enabled: bool,
    send_scratch: SendScratch,
    /// The peer of [`UdpSocket::connect`]: datagrams to it leave without an address, on the
    /// route the kernel cached at connect (cheaper than a lookup per datagram).
    connected: Option<SocketAddr>,
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
            gso_refusals: 0,
            gso_max_segment: usize::MAX,
            size_refusals: 0,
            path_room: None,
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

    /// Whether GSO sends are to be used on this socket: the kernel accepts `UDP_SEGMENT`,
    /// and no GSO send on it has been refused yet (a refusal turns GSO off for good,
    /// see [`UdpSocket::gso_refusals`]).
    pub fn gso_supported(&self) -> bool {
        self.gso_supported
    }

    /// How many GSO sends the kernel refused on this socket: `EIO` (a route through IPsec,
    /// or a device or kernel that cannot segment or checksum UDP) or `EINVAL` (e.g.
    /// `SO_NO_CHECK`). The first refusal turns GSO off ([`UdpSocket::gso_supported`] is
    /// false from then on): the refused send is lost (the caller resends it, as any lost
    /// datagram) and later sends leave as plain datagrams.
    pub fn gso_refusals(&self) -> u64 {
        self.gso_refusals
    }

    /// The largest GSO segment (datagram bytes) to send on this socket: unlimited
    /// (`usize::MAX`) until a send is refused because its datagrams no longer fit the path
    /// (the MTU of the link or the route fell: see [`UdpSocket::size_refusals`]), then the
    /// room the path has. Larger datagrams still go, one per send (the kernel fragments
    /// them); GSO stays on.
    pub fn gso_max_segment(&self) -> usize {
        self.gso_max_segment
    }

    /// How many sends the kernel refused because their datagrams no longer fit the path to
    /// their destination: a GSO send whose segment exceeds the path MTU (`EMSGSIZE`, or
    /// `EINVAL` from older kernels: the kernel does not fragment segments) or any send refused with `EMSGSIZE` (ICMP told
    /// the socket the path's MTU fell), each checked against the path MTU the kernel
    /// knows. Each lowers [`UdpSocket::gso_max_segment`] and leaves the room it found for
    /// [`UdpSocket::take_path_room`]; none turns GSO off.
    pub fn size_refusals(&self) -> u64 {
        self.size_refusals
    }

    /// The room (largest datagram, bytes) of the path whose MTU refused a send since the
    /// last call (the smallest if several did), for the caller to cut smaller datagrams
    /// from now on. None when nothing was refused for its size.
    pub fn take_path_room(&mut self) -> Option<usize> {
        self.path_room.take()
    }

    /// The largest datagram the path to `destination` carries unfragmented, as the kernel
    /// knows it now (the route's MTU, lowered by ICMP reports, minus the IP and UDP headers).
    ///
    /// # Errors
    /// No route to `destination`, or the kernel refused the query.
    pub fn path_room(&self, destination: SocketAddr) -> io::Result<usize> {
        let connected = (self.connected == Some(destination)).then(|| self.fd.as_fd());
        super::path_mtu::datagram_room(connected, destination)
    }

    /// After a send whose first message (to `destination`, `len` bytes, GSO segments of
    /// `segment` when given) was refused: a datagram too large for the path lowers the GSO
    /// segment limit and notes the path's room; any other refusal of segmentation offload
    /// turns GSO off on this socket.
    #[cold]
    fn note_send_error(
        &mut self,
        error: &io::Error,
        segment: Option<u16>,
        destination: SocketAddr,
        len: usize,
    ) {
        let code = error.raw_os_error();
        let about_size =
            code == Some(libc::EMSGSIZE) || (segment.is_some() && code == Some(libc::EINVAL));
        if about_size {
            let datagram = segment.map_or(len, usize::from);
            if let Ok(room) = self.path_room(destination) {
                if datagram > room {
                    self.size_refusals += 1;
                    self.gso_max_segment = self.gso_max_segment.min(room);
                    self.path_room = Some(self.path_room.map_or(room, |r| r.min(room)));
                    return;
                }
            }
        }
        if segment.is_some() && matches!(code, Some(libc::EIO) | Some(libc::EINVAL)) {
            self.gso_supported = false;
            self.gso_refusals += 1;
        }
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

impl UdpSocket {
    /// Sends the first `min(batch.len(), send_batch_capacity())` entries with one
    /// `sendmmsg`. Returns how many entries the kernel took; the caller resubmits the rest.
    /// An entry with `segment_size` needs [`UdpSocket::gso_supported`].
    ///
    /// # Errors
    /// The first entry could not be sent: `WouldBlock` when the socket buffer is full, or
    /// the kernel's error (`EMSGSIZE`, `ECONNREFUSED` from an earlier ICMP error, `EINVAL`
    /// for a GSO entry beyond the kernel's limits, ...). An empty batch returns `Ok(0)`.
    /// A first entry with `segment_size` refused with `EIO` or `EINVAL` turns GSO off on
    /// this socket ([`UdpSocket::gso_refusals`]), unless its segments exceed the path's MTU
    /// ([`UdpSocket::size_refusals`]).
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
        let sent = self.send_filled(count);
        if let Err(error) = &sent {
            let first = &batch[0];
            self.note_send_error(error, first.segment_size, first.destination, first.len());
        }
        sent
    }

    /// Sends the messages of `gather` from `first_message` on, at most
    /// [`UdpSocket::send_batch_capacity`] of them, with one `sendmmsg`. Returns how many
    /// messages the kernel took; the caller resubmits the rest (`first_message + n`).
    ///
    /// # Errors
    /// As [`UdpSocket::send_batch`] (for a GSO message beyond the kernel's limits, or more than
    /// [`MAX_GATHER_PARTS`](super::MAX_GATHER_PARTS) parts, the kernel's `EINVAL`/`EMSGSIZE`). No
    /// message from `first_message` on returns `Ok(0)`. A refused GSO send turns GSO off, as
    /// in [`UdpSocket::send_batch`].
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
        let sent = self.send_filled(count);
        if let Err(error) = &sent {
            let first = runs[0];
            let len = gather.parts(first_message).map(<[u8]>::len).sum();
            self.note_send_error(error, first.segment_size, first.destination, len);
        }
        sent
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
            let error = io::Error::last_os_error();
            self.note_send_error(&error, None, destination, data.len());
            return Err(error);
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
