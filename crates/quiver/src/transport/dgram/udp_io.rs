//! A link's udp socket as the datagram engine drives it ([`UdpIo`]: its receive batch and
//! its transmit layout), the link socket kinds ([`Socket`]: udp, mem or xdp, each with its
//! fault injector when `Config::faults` is on) and how they are bound, and the transmit
//! side of udp: datagrams laid out by a flush leave with one `send` when alone, else
//! gathered with `sendmmsg`, runs of equal-size datagrams as GSO segments, in-place
//! payloads read from the connection's send buffer or a lent message.
//!
//! Layer: the datagram transport's socket I/O, below the engine. It sends what it is
//! given and never asks the protocol core for more; it does not route.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use quiver_proto::reliable::{Nanos, ReliableConnection};
use quiver_transport::udp::{
    max_gso_bytes, Gather, GatherBuffer, RecvBatch, UdpSocket, MAX_COALESCED_BYTES,
    MAX_GATHER_PARTS,
};

use super::connection::{lender, sender_for, Entry, Posted, Status};
use super::mem::MemSocket;
use super::path_mtu::lower_datagram_size;
use super::uring_io::{bind_uring, UringIo};
use crate::config::{TransportKind, UdpIoMode};
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
use crate::transport::fault::{FaultInjector, FaultStats, Faults};
use crate::transport::xdp::link::{Arrival, XdpLink};

/// Bytes of datagrams gathered before one `sendmmsg`.
pub(super) const TX_BYTES: usize = 1 << 20;
/// Messages taken by one `recvmmsg`.
pub(super) const RX_MESSAGES: usize = 32;

/// The socket of one own link.
#[derive(Debug)]
pub(super) enum Socket {
    Udp(Box<UdpIo>),
    Mem(MemIo),
    Xdp(Box<XdpIo>),
    /// A udp socket driven by io_uring (`QUIVER_UDP_IO=uring`).
    Uring(Box<UringIo>),
}

impl Socket {
    pub(super) fn raw_fd(&self) -> RawFd {
        match self {
            Socket::Udp(u) => u.socket.as_raw_fd(),
            Socket::Mem(m) => m.socket.raw_fd(),
            Socket::Xdp(x) => x.link.raw_fd(),
            Socket::Uring(u) => u.socket.wait_fd(),
        }
    }

    /// The socket's fault injector, if faults are on.
    pub(super) fn faults(&mut self) -> Option<&mut FaultInjector> {
        match self {
            Socket::Udp(u) => u.faults.as_deref_mut(),
            Socket::Mem(m) => m.faults.as_deref_mut(),
            Socket::Xdp(x) => x.faults.as_deref_mut(),
            Socket::Uring(u) => u.faults.as_deref_mut(),
        }
    }

    /// Faults injected on this socket so far (None: faults are off).
    pub(super) fn fault_stats(&self) -> Option<FaultStats> {
        match self {
            Socket::Udp(u) => u.faults.as_deref().map(FaultInjector::stats),
            Socket::Mem(m) => m.faults.as_deref().map(FaultInjector::stats),
            Socket::Xdp(x) => x.faults.as_deref().map(FaultInjector::stats),
            Socket::Uring(u) => u.faults.as_deref().map(FaultInjector::stats),
        }
    }

    /// Whether what arrives on this socket goes through its fault injector.
    pub(super) fn arrivals_faulted(&self) -> bool {
        let faults = match self {
            Socket::Udp(u) => u.faults.as_deref(),
            Socket::Mem(m) => m.faults.as_deref(),
            Socket::Xdp(x) => x.faults.as_deref(),
            Socket::Uring(u) => u.faults.as_deref(),
        };
        faults.is_some_and(FaultInjector::on_arrival)
    }

    /// Sends the datagrams its fault injector held back (see `FaultInjector::release_held`;
    /// held arrivals wait in the injector for the engine to dispatch them).
    pub(super) fn release_held(&mut self) {
        match self {
            Socket::Udp(u) => {
                let UdpIo { socket, faults, .. } = &mut **u;
                if let Some(faults) = faults {
                    faults.release_held(&mut |to, datagram| send_one_fully(socket, to, datagram));
                }
            }
            Socket::Mem(m) => {
                let MemIo { socket, faults } = m;
                if let Some(faults) = faults {
                    faults.release_held(&mut |to, datagram| {
                        let _ = socket.send(to, datagram, &[]);
                    });
                }
            }
            Socket::Xdp(x) => {
                let XdpIo { link, faults, .. } = &mut **x;
                if let Some(faults) = faults {
                    faults.release_held(&mut |to, datagram| link.send(to, datagram, &[]));
                    link.flush();
                }
            }
            Socket::Uring(u) => {
                let UringIo { socket, faults, .. } = &mut **u;
                if let Some(faults) = faults {
                    faults.release_held(&mut |to, datagram| socket.send(to, datagram, &[]));
                    socket.flush();
                }
            }
        }
    }
}

/// Binds one link's socket, with an injector of `faults` when they are on; `interface` is
/// the xdp link's interface (None: the one holding `addr`); `udp_io` how a udp link is
/// driven (io_uring where asked and allowed, else plain system calls).
pub(super) fn bind_socket(
    kind: TransportKind,
    addr: SocketAddr,
    faults: &Faults,
    interface: Option<&str>,
    udp_io: UdpIoMode,
) -> Result<Socket> {
    Ok(match kind {
        TransportKind::Udp if udp_io != UdpIoMode::Sockets => match bind_uring(addr, udp_io)? {
            Some(socket) => {
                let faults = FaultInjector::new(faults, socket.local_address());
                Socket::Uring(Box::new(UringIo {
                    socket,
                    faults,
                    datagram_size_lowered: 0,
                }))
            }
            None => bind_socket(kind, addr, faults, interface, UdpIoMode::Sockets)?,
        },
        TransportKind::Udp => {
            let mut socket = UdpSocket::bind(addr).map_err(|e| Error::bind("udp", addr, e))?;
            // Coalesced receives cut the per-datagram cost; best effort.
            let _ = socket.set_gro(true);
            let faults = FaultInjector::new(faults, socket.local_address());
            Socket::Udp(Box::new(UdpIo {
                faults,
                socket,
                rx: Some(Box::new(RecvBatch::new(RX_MESSAGES, MAX_COALESCED_BYTES))),
                rx_wide: false,
                rx_last_bytes: MAX_COALESCED_BYTES,
                short_receives: 0,
                tx: Vec::with_capacity(TX_BYTES + 65536),
                tx_out: Vec::with_capacity(1024),
                gather: GatherBuffer::with_capacity(2 * 1024, 1024),
                offload: OffloadStats::default(),
            }))
        }
        TransportKind::Mem => Socket::Mem(MemIo {
            socket: MemSocket::bind(addr)
                .map_err(|e| Error::io(format!("binding the mem socket {addr}"), e))?,
            faults: FaultInjector::new(faults, addr),
        }),
        TransportKind::Xdp => {
            let link = XdpLink::bind(addr, interface)?;
            let faults = FaultInjector::new(faults, link.local_address());
            Socket::Xdp(Box::new(XdpIo {
                link,
                faults,
                datagram_size_lowered: 0,
            }))
        }
        other => {
            return Err(Error::Config(format!(
                "{other} is not a datagram transport"
            )))
        }
    })
}

/// The batched UDP side: one `recvmmsg` fills `rx`; transmits are laid out in `tx` (headers,
/// and the payloads copied) and leave with one `sendmmsg`, runs of equal-size datagrams as
/// GSO segments.
#[derive(Debug)]
pub(super) struct UdpIo {
    pub(super) socket: UdpSocket,
    /// Taken out while its datagrams are dispatched (they are read in place); boxed, so that
    /// every poll moves a pointer, not the batch's arrays.
    pub(super) rx: Option<Box<RecvBatch>>,
    /// The last receive filled what it asked for: the next asks for a whole batch (else
    /// for one datagram, which returns as soon as it has it; see `Engine::receive`).
    pub(super) rx_wide: bool,
    /// Bytes of the last message received (a datagram, or several coalesced): how many
    /// more a receive budget has room for is guessed from it.
    pub(super) rx_last_bytes: usize,
    /// Receives in a row that brought one short datagram (the latency path): at
    /// `GRO_OFF_AFTER_SHORT_RECEIVES` (in `receive`) GRO goes off.
    pub(super) short_receives: u32,
    pub(super) tx: Vec<u8>,
    pub(super) tx_out: Vec<TxEntry>,
    /// The iovecs and messages `send_all` gathers `tx_out` into (reused, not reallocated).
    gather: GatherBuffer,
    /// Faults injected into what this socket sends and receives (None: off). When on,
    /// every datagram goes through it on its own: a GSO run is sent as single datagrams.
    pub(super) faults: Option<Box<FaultInjector>>,
    /// What the kernel refused of this link's sends (its socket's and the connections'
    /// connected sockets' on it) and the datagram sizes lowered in answer.
    pub(super) offload: OffloadStats,
}

/// Sends of one udp link the kernel refused for their offload or their size, and what the
/// engine did about them (docs/decisions/0081-mtu-changes-and-gso-fallback.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct OffloadStats {
    /// GSO sends refused by the kernel's offload (`EIO`, `EINVAL`): each turned GSO off on
    /// its socket for good.
    pub(super) gso_refusals: u64,
    /// Sends refused because their datagrams no longer fit the path's MTU.
    pub(super) size_refusals: u64,
    /// Times a connection's datagram size was lowered to what the path carries.
    pub(super) datagram_size_lowered: u64,
}

/// A link's in-process socket, with its fault injector (None: off). Everything it sends
/// and receives goes through the injector when there is one.
#[derive(Debug)]
pub(super) struct MemIo {
    pub(super) socket: MemSocket,
    faults: Option<Box<FaultInjector>>,
}

impl MemIo {
    /// Sends one datagram (header then payload) to `to`, as `MemSocket::send`.
    pub(super) fn send(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let MemIo { socket, faults } = self;
        match faults {
            None => {
                let _ = socket.send(to, header, payload);
            }
            Some(faults) => faults.send(to, &[header, payload], &mut |to, datagram| {
                let _ = socket.send(to, datagram, &[]);
            }),
        }
    }

    /// Takes one datagram into `buf`, as `MemSocket::recv`; with faults on arrival, the
    /// next one the injector lets through.
    pub(super) fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        let Some(faults) = self.faults.as_deref_mut().filter(|f| f.on_arrival()) else {
            return self.socket.recv(buf);
        };
        loop {
            if let Some((from, datagram)) = faults.pop_arrived() {
                let n = datagram.len().min(buf.len());
                buf[..n].copy_from_slice(&datagram[..n]);
                return Ok(Some((n, from)));
            }
            match self.socket.recv(buf)? {
                Some((n, from)) => faults.receive(from, &buf[..n]),
                None => return Ok(None),
            }
        }
    }
}

/// A link's AF_XDP socket (`transport::xdp`), with its fault injector (None: off).
/// Everything it sends and receives goes through the injector when there is one.
#[derive(Debug)]
pub(super) struct XdpIo {
    pub(super) link: XdpLink,
    faults: Option<Box<FaultInjector>>,
    /// Times a connection's datagram size was lowered because the link's MTU fell.
    pub(super) datagram_size_lowered: u64,
}

impl XdpIo {
    /// Queues one datagram (header then payload) to `to`, as `XdpLink::send`; sent by
    /// [`XdpIo::flush`].
    pub(super) fn send(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let XdpIo { link, faults, .. } = self;
        match faults {
            None => link.send(to, header, payload),
            Some(faults) => faults.send(to, &[header, payload], &mut |to, datagram| {
                link.send(to, datagram, &[])
            }),
        }
    }

    /// Sends what was queued.
    #[inline]
    pub(super) fn flush(&mut self) {
        self.link.flush();
    }

    /// After a flush of `entry`'s datagrams to `to` at `now` (the engine's clock): the
    /// link reads its interface's MTU again when it is time, and a connection cutting
    /// datagrams larger than the link now carries (the MTU fell) cuts smaller ones from now
    /// on.
    pub(super) fn follow_link_mtu(&mut self, entry: &mut Entry, to: SocketAddr, now: Nanos) {
        self.link.follow_mtu_at(now);
        let room = self.link.max_datagram();
        if entry.core.max_datagram_bytes() > room
            && lower_datagram_size(entry, self.link.local_address(), to, room)
        {
            self.datagram_size_lowered += 1;
        }
    }

    /// Takes one datagram, as `XdpLink::recv_next`: in place in its UMEM frame (give it
    /// back with `XdpLink::release`), or in `buf`; with faults on arrival, always in `buf`,
    /// the next one the injector lets through.
    #[inline]
    pub(super) fn recv_next(&mut self, buf: &mut [u8]) -> Option<Arrival> {
        let Some(faults) = self.faults.as_deref_mut().filter(|f| f.on_arrival()) else {
            return self.link.recv_next(buf);
        };
        loop {
            if let Some((from, datagram)) = faults.pop_arrived() {
                let len = datagram.len().min(buf.len());
                buf[..len].copy_from_slice(&datagram[..len]);
                return Some(Arrival::InBuffer { len, from });
            }
            let (n, from) = self.link.recv(buf)?;
            faults.receive(from, &buf[..n]);
        }
    }
}

// Payloads at least `Config::udp_in_place_min` long are sent from the connection's send
// buffer in place (gathered with their header as two iovecs); shorter ones, and frames
// without a stream payload, are copied next to their header. Either way runs of equal-size
// datagrams leave as one GSO send (`UdpSocket::send_gathered`): the kernel segments a
// message's total bytes whatever its iovecs.

/// One datagram laid out for sending.
#[derive(Debug, Clone, Copy)]
pub(super) enum TxEntry {
    /// Header and payload copied back to back into `tx` at `offset`, `len` bytes.
    Copied { offset: usize, len: usize },
    /// Header in `tx` at `offset` (`header_len` bytes); the payload is still in the
    /// connection's send buffer at `stream_offset`.
    InPlace {
        offset: usize,
        header_len: usize,
        stream_offset: u64,
        payload_len: usize,
    },
}

impl UdpIo {
    /// [`UdpIo::send_all`] for connection `entry` on `path` to `to`: through the
    /// connection's own connected socket for that path while it is open. A send refused
    /// because the path's MTU fell lowers the connection's datagram size to what the path
    /// carries (the frames it cut before still go at their size, fragmented by the kernel).
    #[inline]
    pub(super) fn send_for(&mut self, entry: &mut Entry, path: usize, to: SocketAddr, lent: &[u8]) {
        let via = match entry.status {
            Status::Open => sender_for(&mut entry.senders, path, self.socket.local_address(), to),
            _ => None,
        };
        if let Some(room) = self.send_all(to, &entry.core, lent, &entry.posted, via) {
            self.lower_datagram_size(entry, to, room);
        }
    }

    /// Lowers `entry`'s datagram size to `room` ([`lower_datagram_size`]), counted.
    #[cold]
    fn lower_datagram_size(&mut self, entry: &mut Entry, to: SocketAddr, room: usize) {
        if lower_datagram_size(entry, self.socket.local_address(), to, room) {
            self.offload.datagram_size_lowered += 1;
        }
    }

    /// Sends the datagrams laid out in `tx_out` to `to` (through `via`, a socket connected
    /// to `to`, when given); in-place payloads come from `core` (lent ones from `lent`, the
    /// message being sent in place: see `DgramShared::send_in_place`). A datagram the kernel
    /// cannot take now (socket buffer full after a short wait) is lost like any other; the
    /// protocol resends it. Returns the room (datagram bytes) of the path to `to` when the
    /// kernel refused a send because the path's MTU fell below its datagrams.
    fn send_all(
        &mut self,
        to: SocketAddr,
        core: &ReliableConnection,
        lent: &[u8],
        posted: &VecDeque<Posted>,
        via: Option<&mut UdpSocket>,
    ) -> Option<usize> {
        let UdpIo {
            socket,
            tx,
            tx_out,
            gather,
            faults,
            offload,
            ..
        } = self;
        let socket = match via {
            Some(connected) => connected,
            None => socket,
        };
        let refusals_before = (socket.gso_refusals(), socket.size_refusals());
        if let Some(faults) = faults {
            let payload_at = |stream_offset, len| {
                core.payload_at_lending(stream_offset, len, |token| lender(lent, posted, token))
            };
            send_faulted(faults, socket, tx, tx_out, to, payload_at);
        } else if let [TxEntry::Copied { offset, len }] = tx_out[..] {
            // One small datagram (the latency path): one `send` (`sendto` without a
            // connected socket), no message header for the kernel to copy in.
            send_one_fully(socket, to, &tx[offset..offset + len]);
        } else {
            let mut gather = gather.gather();
            // GSO runs of segments the path still carries (datagrams cut before its MTU
            // fell go one per send, and the kernel fragments them).
            let gso_limit = socket.gso_supported().then(|| socket.gso_max_segment());
            gather_runs(
                &mut gather,
                tx,
                tx_out,
                to,
                gso_limit,
                |stream_offset, len| {
                    core.payload_at_lending(stream_offset, len, |token| lender(lent, posted, token))
                },
            );
            send_gather_fully(socket, &gather);
        }
        if (socket.gso_refusals(), socket.size_refusals()) == refusals_before {
            return None;
        }
        note_refusals(offload, socket, refusals_before)
    }
}

/// Counts the refusals `socket` met since it had `before` (GSO refusals, size refusals) and
/// returns the room of the path whose MTU refused a send, if one did.
#[cold]
fn note_refusals(
    offload: &mut OffloadStats,
    socket: &mut UdpSocket,
    before: (u64, u64),
) -> Option<usize> {
    offload.gso_refusals += socket.gso_refusals() - before.0;
    offload.size_refusals += socket.size_refusals() - before.1;
    socket.take_path_room()
}

/// Lays the datagrams of `tx_out` (headers and copied payloads in `tx`, in-place payloads
/// from `payload_at`) out in `gather` as messages to `to`, in order. A message is one
/// datagram or, with `gso_limit` (GSO on, segments of at most that many bytes), a GSO run:
/// consecutive datagrams of one size (the last may be shorter) within the kernel's limits,
/// each one part (copied) or two (header and payload in place); the kernel cuts the run's
/// total into datagrams whatever the parts. A datagram over the limit is a message of its
/// own. An in-place payload that `payload_at` no longer has (acknowledged meanwhile) is not
/// sent, and ends its run.
fn gather_runs<'a>(
    gather: &mut Gather<'a>,
    tx: &'a [u8],
    tx_out: &[TxEntry],
    to: SocketAddr,
    gso_limit: Option<usize>,
    payload_at: impl Fn(u64, usize) -> Option<&'a [u8]>,
) {
    // The open run: its segment size, bytes and parts, the most bytes it may carry, and
    // whether its last datagram was a whole segment (only then may another follow).
    let (mut segment, mut run_bytes, mut run_parts, mut run_limit) = (0, 0, 0, 0);
    let mut run_open = false;
    for entry in tx_out {
        let (first, second): (&[u8], &[u8]) = match *entry {
            TxEntry::Copied { offset, len } => (&tx[offset..offset + len], &[]),
            TxEntry::InPlace {
                offset,
                header_len,
                stream_offset,
                payload_len,
            } => match payload_at(stream_offset, payload_len) {
                Some(payload) => (&tx[offset..offset + header_len], payload),
                // Acknowledged meanwhile: not sent, and the run ends here (the next datagram
                // must not take its place among the run's segments).
                None => {
                    run_open = false;
                    continue;
                }
            },
        };
        let len = first.len() + second.len();
        let needed = if second.is_empty() { 1 } else { 2 };
        let joins = run_open
            && len <= segment
            && run_bytes + len <= run_limit
            && run_parts + needed <= MAX_GATHER_PARTS;
        if joins {
            // A second datagram or more: the run is a GSO send (the segment fits a u16:
            // the limit is the datagram itself otherwise).
            gather.set_segment_size(u16::try_from(segment).ok());
        } else {
            gather.start_message(to);
            (segment, run_bytes, run_parts) = (len, 0, 0);
            run_limit = match gso_limit {
                Some(limit) if len <= limit && u16::try_from(len).is_ok() => {
                    max_gso_bytes(len, to.is_ipv6())
                }
                _ => len,
            };
        }
        gather.push_part(first);
        if !second.is_empty() {
            gather.push_part(second);
        }
        run_bytes += len;
        run_parts += needed;
        run_open = len == segment && len > 0;
    }
}

/// Sends the datagrams of `tx_out` (as [`gather_runs`] lays them out) one by one to `to`
/// through `faults`: every datagram meets the injector on its own, a GSO run included.
fn send_faulted<'a>(
    faults: &mut FaultInjector,
    socket: &mut UdpSocket,
    tx: &'a [u8],
    tx_out: &[TxEntry],
    to: SocketAddr,
    payload_at: impl Fn(u64, usize) -> Option<&'a [u8]>,
) {
    for entry in tx_out {
        let (header, payload): (&[u8], &[u8]) = match *entry {
            TxEntry::Copied { offset, len } => (&tx[offset..offset + len], &[]),
            TxEntry::InPlace {
                offset,
                header_len,
                stream_offset,
                payload_len,
            } => match payload_at(stream_offset, payload_len) {
                Some(payload) => (&tx[offset..offset + header_len], payload),
                // Acknowledged meanwhile: not sent (as `gather_runs`).
                None => continue,
            },
        };
        faults.send(to, &[header, payload], &mut |to, datagram| {
            send_one_fully(socket, to, datagram)
        });
    }
}

/// Sends every message of `gather`, waiting once (briefly) for room if the socket is full.
fn send_gather_fully(socket: &mut UdpSocket, gather: &Gather<'_>) {
    let mut sent = 0;
    let mut waited = false;
    let gso_was_on = socket.gso_supported();
    while sent < gather.messages().len() {
        match socket.send_gather(gather, sent) {
            Ok(n) => sent += n.max(1),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !waited => {
                waited = true;
                wait_writable(socket);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Refused (ICMP from an earlier send), full, or gone: lost, resent later. A
            // refused GSO send turned GSO off on the socket: the resends leave as plain
            // datagrams.
            Err(e) => {
                if !socket.gso_supported() && socket.gso_refusals() == 1 && gso_was_on {
                    tracing::warn!(target: ENDPOINT_LOG, local = %socket.local_address(), error = %e, "the kernel refused a segmentation offload (GSO) send: GSO is off on this socket from now on");
                }
                sent += 1;
            }
        }
    }
}

/// Waits up to 5 ms for room in `socket`'s send buffer.
fn wait_writable(socket: &UdpSocket) {
    let mut fds = [libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    let _ = quiver_transport::sys::poll(&mut fds, Some(Duration::from_millis(5)));
}

/// Sends one datagram, waiting once (briefly) for room if the socket is full (a datagram
/// the kernel still cannot take is lost like any other; the protocol resends it).
pub(super) fn send_one_fully(socket: &mut UdpSocket, to: SocketAddr, datagram: &[u8]) {
    let mut waited = false;
    loop {
        match socket.send_one(to, datagram) {
            Ok(_) => return,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !waited => {
                waited = true;
                let mut fds = [libc::pollfd {
                    fd: socket.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                }];
                let _ = quiver_transport::sys::poll(&mut fds, Some(Duration::from_millis(5)));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Refused (ICMP from an earlier send), full, or gone: lost, resent later.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod gather_tests {
    use std::net::Ipv4Addr;
    use std::time::Instant;

    use quiver_transport::udp::MAX_GSO_SEGMENTS;

    use super::*;

    const HEADER: usize = 32;

    /// A send buffer and the datagrams laid out from it: `sizes` are payload lengths, each
    /// in place when `in_place` says so, else copied; headers carry the datagram's index.
    struct Layout {
        tx: Vec<u8>,
        tx_out: Vec<TxEntry>,
        ring: Vec<u8>,
        expected: Vec<Vec<u8>>,
    }

    fn layout(sizes: &[usize], in_place: impl Fn(usize) -> bool) -> Layout {
        let total: usize = sizes.iter().sum();
        let ring: Vec<u8> = (0..total).map(|i| (i * 13 + i / 241) as u8).collect();
        let (mut tx, mut tx_out, mut expected) = (Vec::new(), Vec::new(), Vec::new());
        let mut stream_offset = 0;
        for (index, &size) in sizes.iter().enumerate() {
            let mut header = [0u8; HEADER];
            header[..8].copy_from_slice(&(index as u64).to_be_bytes());
            let payload = &ring[stream_offset..stream_offset + size];
            let offset = tx.len();
            tx.extend_from_slice(&header);
            if in_place(size) {
                tx_out.push(TxEntry::InPlace {
                    offset,
                    header_len: HEADER,
                    stream_offset: stream_offset as u64,
                    payload_len: size,
                });
            } else {
                tx.extend_from_slice(payload);
                tx_out.push(TxEntry::Copied {
                    offset,
                    len: HEADER + size,
                });
            }
            expected.push([&header[..], payload].concat());
            stream_offset += size;
        }
        Layout {
            tx,
            tx_out,
            ring,
            expected,
        }
    }

    fn to() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 9))
    }

    /// Runs `gather_runs` and cuts every message as the kernel would, checking the limits
    /// of each send and message. Returns the datagrams and every message's datagram count.
    fn gather(
        layout: &Layout,
        gso: bool,
        gone: impl Fn(u64) -> bool,
    ) -> (Vec<Vec<u8>>, Vec<usize>) {
        gather_limited(layout, gso.then_some(usize::MAX), gone)
    }

    /// [`gather`] with GSO segments of at most `gso_limit` bytes (None: no GSO).
    fn gather_limited(
        layout: &Layout,
        gso_limit: Option<usize>,
        gone: impl Fn(u64) -> bool,
    ) -> (Vec<Vec<u8>>, Vec<usize>) {
        let (mut datagrams, mut counts) = (Vec::new(), Vec::new());
        let payload_at = |offset: u64, len: usize| {
            let start = offset as usize;
            (!gone(offset)).then(|| &layout.ring[start..start + len])
        };
        let mut buffer = GatherBuffer::default();
        let mut gather = buffer.gather();
        gather_runs(
            &mut gather,
            &layout.tx,
            &layout.tx_out,
            to(),
            gso_limit,
            payload_at,
        );
        for (index, run) in gather.messages().iter().enumerate() {
            assert!(run.part_count <= MAX_GATHER_PARTS);
            let bytes: Vec<u8> = gather.parts(index).flatten().copied().collect();
            match run.segment_size {
                Some(segment) => {
                    let segment = usize::from(segment);
                    assert!(segment <= gso_limit.expect("GSO on"));
                    assert!(bytes.len() > segment);
                    assert!(bytes.len() <= max_gso_bytes(segment, false));
                    counts.push(bytes.len().div_ceil(segment));
                    datagrams.extend(bytes.chunks(segment).map(<[u8]>::to_vec));
                }
                None => {
                    counts.push(1);
                    datagrams.push(bytes);
                }
            }
        }
        (datagrams, counts)
    }

    #[test]
    fn in_place_pairs_leave_as_gso_runs() {
        // 100 MTU-1500 payloads, one short one, acks (copied, header only), and more.
        let mut sizes = vec![1440; 100];
        sizes.push(700);
        sizes.extend([0, 0, 0]);
        sizes.extend([1440; 10]);
        let layout = layout(&sizes, |size| size >= 1000);
        let (datagrams, counts) = gather(&layout, true, |_| false);
        assert_eq!(datagrams, layout.expected);
        // 44 segments of 1472 bytes fit one send; the short payload ends its run, the
        // three acks share one.
        assert_eq!(counts, vec![44, 44, 13, 3, 10]);
    }

    #[test]
    fn copied_and_in_place_datagrams_of_one_size_share_runs() {
        let sizes = vec![1440; 60];
        let layout = layout(&sizes, |_| false);
        let mixed = {
            let mut l = self::layout(&sizes, |_| true);
            // Every third copied: the runs do not care.
            for (index, entry) in l.tx_out.iter_mut().enumerate() {
                if let (TxEntry::InPlace { .. }, 0) = (*entry, index % 3) {
                    let offset = l.tx.len();
                    l.tx.extend_from_slice(&l.expected[index]);
                    *entry = TxEntry::Copied {
                        offset,
                        len: l.expected[index].len(),
                    };
                }
            }
            l
        };
        for l in [&layout, &mixed] {
            let (datagrams, counts) = gather(l, true, |_| false);
            assert_eq!(datagrams, l.expected);
            assert_eq!(counts, vec![44, 16]);
        }
    }

    #[test]
    fn a_payload_gone_cuts_its_run() {
        let sizes = vec![1440; 30];
        let layout = layout(&sizes, |_| true);
        let gone = |offset: u64| offset == 10 * 1440 || offset == 11 * 1440;
        let (datagrams, counts) = gather(&layout, true, gone);
        let mut expected = layout.expected.clone();
        expected.drain(10..12);
        assert_eq!(datagrams, expected);
        assert_eq!(counts, vec![10, 18]);
    }

    /// After the path's MTU fell: datagrams cut before (larger than the socket's segment
    /// limit) go one per message, those cut since still share GSO runs.
    #[test]
    fn datagrams_over_the_segment_limit_leave_one_by_one() {
        let mut sizes = vec![1440; 5];
        sizes.extend([1000; 50]);
        let layout = layout(&sizes, |size| size >= 1000);
        let (datagrams, counts) = gather_limited(&layout, Some(1372), |_| false);
        assert_eq!(datagrams, layout.expected);
        let mut expected = vec![1; 5];
        expected.push(50);
        assert_eq!(counts, expected);
    }

    #[test]
    fn without_gso_every_datagram_is_its_own_message() {
        let sizes = [1440, 1440, 9000, 9000, 60_000, 5, 1440];
        let layout = layout(&sizes, |size| size >= 1000);
        let (datagrams, counts) = gather(&layout, false, |_| false);
        assert_eq!(datagrams, layout.expected);
        assert_eq!(counts, vec![1; sizes.len()]);
    }

    #[test]
    fn large_and_tiny_runs_stay_within_the_limits() {
        // 64 KB datagrams: one per message. 1024 tiny in-place pairs: 2048 parts and 64
        // segments per run, so several sends.
        for sizes in [vec![65_000 - HEADER; 20], vec![10; 1024], vec![8940; 40]] {
            let layout = layout(&sizes, |_| true);
            let (datagrams, counts) = gather(&layout, true, |_| false);
            assert_eq!(datagrams, layout.expected);
            let most = max_gso_bytes(sizes[0] + HEADER, false) / (sizes[0] + HEADER);
            assert!(counts.iter().all(|&c| c <= most && c <= MAX_GSO_SEGMENTS));
            assert_eq!(counts.len(), sizes.len().div_ceil(most));
        }
    }

    #[test]
    fn runs_arrive_over_loopback_with_and_without_gso() {
        let mut sizes = vec![1440; 150];
        // A short datagram ends a run: the next, shorter or not, starts another.
        sizes.extend([100, 50, 1440, 1440]);
        sizes.extend([8940; 9]);
        sizes.push(3);
        for gso in [true, false] {
            let layout = layout(&sizes, |size| size >= 512);
            let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            let mut sender = UdpSocket::bind(any).unwrap();
            let mut receiver = UdpSocket::bind(any).unwrap();
            assert!(!gso || sender.gso_supported());
            let payload_at = |offset: u64, len: usize| {
                let start = offset as usize;
                Some(&layout.ring[start..start + len])
            };
            let destination = receiver.local_address();
            let mut buffer = GatherBuffer::default();
            let mut gather = buffer.gather();
            gather_runs(
                &mut gather,
                &layout.tx,
                &layout.tx_out,
                destination,
                gso.then_some(usize::MAX),
                payload_at,
            );
            send_gather_fully(&mut sender, &gather);
            let mut batch = RecvBatch::new(64, MAX_COALESCED_BYTES);
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(5);
            while got.len() < sizes.len() && Instant::now() < deadline {
                match receiver.recv_batch(&mut batch) {
                    Ok(_) => {
                        got.extend(batch.iter().flat_map(|m| m.datagrams().map(<[u8]>::to_vec)))
                    }
                    Err(_) => {
                        receiver
                            .wait_readable(Some(Duration::from_millis(50)))
                            .unwrap();
                    }
                }
            }
            assert_eq!(got, layout.expected, "gso {gso}");
        }
    }
}
