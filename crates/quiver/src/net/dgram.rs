//! The datagram engine: one per context, it owns the UDP sockets (or the in-process `mem`
//! sockets) of this rank, one per link, and every reliable connection over them, in both
//! directions.
//!
//! The protocol itself is [`quiver_proto::reliable`] (sans-IO); the engine feeds it
//! datagrams and time, sends what it produces, and routes connections to endpoints:
//! - a datagram is routed by the destination connection id in its header; id 0 opens a new
//!   connection (a Hello), which the engine answers only for an open endpoint port;
//! - progress is driven by whoever calls into the API (every endpoint call polls the
//!   engine), so no thread competes for the cores; a sleeping endpoint sleeps in poll on
//!   the engine's descriptor with the protocol's next timer as its timeout;
//! - links (`QUIVER_LINKS`, `docs/striping.md`): with several links the engine binds one
//!   socket per own link, and a connection to a rank is striped over the links both have:
//!   path i of the connection is (own socket i, the peer's link i). The protocol core
//!   chooses the path of every datagram; the engine only maps it. A datagram's arrival path
//!   is the socket it came in on. The engine's descriptor is then an epoll set of the
//!   sockets.
//!
//! All state sits behind one mutex; endpoints of one context on different threads take
//! turns.
//!
//! The latency path (a small request answered at once; docs/PERFORMANCE.md, issue 3, "udp
//! latency path"): a busy-polling receive's poll is one `recvfrom` of one datagram
//! (`UdpSocket::recv_one`, no `recvmmsg` loop; a batch is asked for only after a receive
//! came back full; GRO is off while only short single datagrams arrive, else the call is a
//! costlier `recvmsg` that reports coalesced segments) plus a clock read; a poll that finds nothing scans no connection. When
//! a datagram arrives, the poll hands it over first (dispatch, then the ack held back for
//! the application's answer, then the connection's events) and leaves its housekeeping
//! (timers, retired connections) to the next poll when all that arrived is a message
//! waiting for the application, whose answer should leave next; the next poll runs it
//! whatever it finds, so it is never put off twice in a row. A blocking receive on an
//! endpoint whose only inbound edge is one open connection polls and takes the message in
//! one call ([`DgramShared::take_whole`]). The answer leaves with one `send` on the
//! connection's connected socket (`UdpSocket::send_one`, no message header to copy in),
//! carrying the ack, before the core is asked for anything more (the core itself
//! processes the ack fields of the request only after that: "the answer first" in
//! `quiver_proto::reliable`): one datagram each way per round trip, nothing allocated per
//! message. The clock is still read on every poll: reading it only after an arrival
//! (and on every 16th poll for the timers) moves that read onto the arrival path, where it
//! costs what the shorter empty poll saves (an arrival is noticed half an empty poll later
//! on average); measured, no difference.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use quiver_proto::handshake::{ConnectRequest, JobKey, RejectReason};
use quiver_proto::reliable::{
    reset_for, Event, FailReason, Nanos, PostedBuffers, PostedRead, ReliableConfig,
    ReliableConnection, State, LEND_MESSAGE_TOKEN,
};
use quiver_transport::udp::{
    max_gso_bytes, monotonic_ns, Gather, GatherBuffer, OutDatagram, ReadinessSet, RecvBatch,
    SplitRecv, UdpSocket, MAX_COALESCED_BYTES, MAX_GATHER_PARTS,
};
use quiver_wire::frame::{self, Destination, MAX_HEADER_LEN, STREAM_HEADER_LEN};
use quiver_wire::handshake::Hello;

use super::mem::MemSocket;
use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::endpoint::{Dest, DgramTake, Failure};
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::local::LocalRank;
use crate::transport::registry::NetInbound;

/// Largest datagram on loopback (and the mem transport) when not configured.
const LOOPBACK_DATAGRAM: usize = 65000;
/// Largest datagram elsewhere when not configured: Ethernet MTU 1500 - IPv4 - UDP headers.
const ETHERNET_DATAGRAM: usize = 1472;
/// Prefix of a failure that `connect` retries (the peer is not there yet).
const RETRY: &str = "retry:";
/// Why `connect` retries when the peer refused a crossed connect with `Busy`.
const CROSSED: &str =
    "retry:the peer is connecting to us at the same time (its connection is used)";
/// Smallest retransmission timeout of a udp connection (loopback included) or one striped
/// over several links (a path that times out a few times in a row goes down: about 70 ms
/// with backoff).
const NETWORK_MIN_RTO_NS: Nanos = 10_000_000;
/// A connection's ack waits for the next poll (for the application's answer to carry it)
/// only while it owes the peer at most this many frames.
const DEFER_ACK_MAX_FRAMES: u32 = 4;
/// Datagrams taken from the socket per poll at most (bounds the time one poll takes).
const RECV_BATCH: usize = 64;
/// Bytes of datagrams one poll takes from a socket at most (about; a batch is asked for
/// only while it fits). A poll that took 64 datagrams of 64 KB (4 MiB) before it acked
/// held the acknowledgements back for milliseconds: streaming 1 MiB messages over loopback,
/// the sender's retransmission timer fired and resent about one frame in seven, all
/// duplicates. Smaller batches also leave the payloads in the cache for their checksum
/// and copy.
const RECV_BUDGET_BYTES: usize = 512 << 10;

/// A datagram sent alone (an answer: see [`Engine::flush`]) whose payload is in place and at
/// most this long is copied next to its header and sent with one `send`: on loopback a
/// `send` of the copy took 60-140 ns less than a gathered `sendmmsg` up to 1 KiB and the
/// same at 4 KiB (docs/PERFORMANCE.md, "Session 14").
const LONE_COPY_MAX_BYTES: usize = 2048;

/// Bytes of datagrams gathered before one `sendmmsg`.
const TX_BYTES: usize = 1 << 20;
/// Messages taken by one `recvmmsg`.
const RX_MESSAGES: usize = 32;
/// A received datagram at least this long (an Ethernet MTU's worth) is taken for part of a
/// stream: the poll goes on receiving at once instead of handing it over first.
const STREAM_DATAGRAM_BYTES: usize = 1400;
/// A udp socket turns GRO off (when its queue is empty) after this many receives in a row
/// of one short datagram each, and on again at the first long datagram or burst: without
/// GRO a one-datagram receive is a `recvfrom` instead of a `recvmsg` (see
/// [`UdpSocket::recv_one`]).
const GRO_OFF_AFTER_SHORT_RECEIVES: u32 = 64;

/// The batched UDP side: one `recvmmsg` fills `rx`; transmits are laid out in `tx` (headers,
/// and the payloads copied) and leave with one `sendmmsg`, runs of equal-size datagrams as
/// GSO segments.
#[derive(Debug)]
struct UdpIo {
    socket: UdpSocket,
    /// Taken out while its datagrams are dispatched (they are read in place); boxed, so that
    /// every poll moves a pointer, not the batch's arrays.
    rx: Option<Box<RecvBatch>>,
    /// The last receive filled what it asked for: the next asks for a whole batch (else
    /// for one datagram, which returns as soon as it has it; see `Engine::receive`).
    rx_wide: bool,
    /// Bytes of the last message received (a datagram, or several coalesced): how many
    /// more a receive budget has room for is guessed from it.
    rx_last_bytes: usize,
    /// Receives in a row that brought one short datagram (the latency path): at
    /// [`GRO_OFF_AFTER_SHORT_RECEIVES`] GRO goes off.
    short_receives: u32,
    tx: Vec<u8>,
    tx_out: Vec<TxEntry>,
    /// The iovecs and messages `send_all` gathers `tx_out` into (reused, not reallocated).
    gather: GatherBuffer,
}

// Payloads at least `Config::udp_in_place_min` long are sent from the connection's send
// buffer in place (gathered with their header as two iovecs); shorter ones, and frames
// without a stream payload, are copied next to their header. Either way runs of equal-size
// datagrams leave as one GSO send (`UdpSocket::send_gathered`): the kernel segments a
// message's total bytes whatever its iovecs.

/// One datagram laid out for sending.
#[derive(Debug, Clone, Copy)]
enum TxEntry {
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
    /// Turns GRO on for bulk traffic and off for a run of short single datagrams, after a
    /// receive that brought `got` messages into `rx` (see
    /// [`GRO_OFF_AFTER_SHORT_RECEIVES`]).
    fn steer_gro(&mut self, rx: &RecvBatch, got: usize) {
        let short = match got {
            0 => {
                // The queue is empty: the moment GRO can go off without losing what it
                // coalesced.
                if self.short_receives >= GRO_OFF_AFTER_SHORT_RECEIVES
                    && self.socket.gro_enabled()
                    && self.socket.gro_off_if_idle().unwrap_or(false)
                {
                    self.short_receives = 0;
                }
                return;
            }
            1 => {
                let message = rx.message(0);
                message.data.len() < STREAM_DATAGRAM_BYTES
                    && message.segment_bytes >= message.data.len()
            }
            _ => false,
        };
        if short {
            self.short_receives = self.short_receives.saturating_add(1);
        } else {
            self.short_receives = 0;
            if !self.socket.gro_enabled() {
                // Best effort: without it bulk data arrives datagram by datagram.
                let _ = self.socket.set_gro(true);
            }
        }
    }

    /// [`UdpIo::send_all`] for connection `entry` on `path` to `to`: through the
    /// connection's own connected socket for that path while it is open.
    fn send_for(&mut self, entry: &mut Entry, path: usize, to: SocketAddr, lent: &[u8]) {
        let via = match entry.status {
            Status::Open => sender_for(&mut entry.senders, path, self.socket.local_address(), to),
            _ => None,
        };
        self.send_all(to, &entry.core, lent, &entry.posted, via);
    }

    /// Sends the datagrams laid out in `tx_out` to `to` (through `via`, a socket connected
    /// to `to`, when given); in-place payloads come from `core` (lent ones from `lent`, the
    /// message being sent in place: see [`DgramShared::send_in_place`]). A datagram the kernel
    /// cannot take now (socket buffer full after a short wait) is lost like any other; the
    /// protocol resends it.
    fn send_all(
        &mut self,
        to: SocketAddr,
        core: &ReliableConnection,
        lent: &[u8],
        posted: &VecDeque<Posted>,
        via: Option<&mut UdpSocket>,
    ) {
        let UdpIo {
            socket,
            tx,
            tx_out,
            gather,
            ..
        } = self;
        let socket = match via {
            Some(connected) => connected,
            None => socket,
        };
        // One small datagram (the latency path): one `send` (`sendto` without a connected
        // socket), no message header for the kernel to copy in.
        if let [TxEntry::Copied { offset, len }] = tx_out[..] {
            send_one_fully(socket, to, &tx[offset..offset + len]);
            return;
        }
        let mut gather = gather.gather();
        gather_runs(
            &mut gather,
            tx,
            tx_out,
            to,
            socket.gso_supported(),
            |stream_offset, len| {
                core.payload_at_lending(stream_offset, len, |token| lender(lent, posted, token))
            },
        );
        send_gather_fully(socket, &gather);
    }
}

/// Lays the datagrams of `tx_out` (headers and copied payloads in `tx`, in-place payloads
/// from `payload_at`) out in `gather` as messages to `to`, in order. A message is one
/// datagram or, with `gso`, a GSO run: consecutive datagrams of one size (the last may be
/// shorter) within the kernel's limits, each one part (copied) or two (header and payload
/// in place); the kernel cuts the run's total into datagrams whatever the parts. An
/// in-place payload that `payload_at` no longer has (acknowledged meanwhile) is not sent,
/// and ends its run.
fn gather_runs<'a>(
    gather: &mut Gather<'a>,
    tx: &'a [u8],
    tx_out: &[TxEntry],
    to: SocketAddr,
    gso: bool,
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
            run_limit = if gso && u16::try_from(len).is_ok() {
                max_gso_bytes(len, to.is_ipv6())
            } else {
                len
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

/// Sends every message of `gather`, waiting once (briefly) for room if the socket is full.
fn send_gather_fully(socket: &mut UdpSocket, gather: &Gather<'_>) {
    let mut sent = 0;
    let mut waited = false;
    while sent < gather.messages().len() {
        match socket.send_gather(gather, sent) {
            Ok(n) => sent += n.max(1),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !waited => {
                waited = true;
                wait_writable(socket);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Refused (ICMP from an earlier send), full, or gone: lost, resent later.
            Err(_) => sent += 1,
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

#[cfg(test)]
mod gather_tests {
    use super::*;
    use quiver_transport::udp::MAX_GSO_SEGMENTS;
    use std::net::Ipv4Addr;

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
            gso,
            payload_at,
        );
        for (index, run) in gather.messages().iter().enumerate() {
            assert!(run.part_count <= MAX_GATHER_PARTS);
            let bytes: Vec<u8> = gather.parts(index).flatten().copied().collect();
            match run.segment_size {
                Some(segment) => {
                    assert!(gso);
                    let segment = usize::from(segment);
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
                gso,
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

/// Sends one datagram, waiting once (briefly) for room if the socket is full (a datagram
/// the kernel still cannot take is lost like any other; the protocol resends it).
fn send_one_fully(socket: &mut UdpSocket, to: SocketAddr, datagram: &[u8]) {
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

#[derive(Debug)]
enum Socket {
    Udp(Box<UdpIo>),
    Mem(MemSocket),
}

impl Socket {
    fn raw_fd(&self) -> RawFd {
        match self {
            Socket::Udp(u) => u.socket.as_raw_fd(),
            Socket::Mem(s) => s.raw_fd(),
        }
    }
}

/// The sending socket of one path of an open udp connection. Datagrams sent through a
/// connected socket skip the kernel's route lookup (on the development VMs a loopback send
/// costs about a microsecond less, a third of it; docs/PERFORMANCE.md, issue 3). It is bound
/// to the path's own address with a port of its own, so the peer's engine still receives
/// everything on its one socket per link and routes by connection id. The handshake leaves
/// from the link's socket (the peer learns that address from the Hello), and nothing but a
/// Reset is ever sent to this port: it is read when a retransmission timer fires.
#[derive(Debug, Default)]
enum Sender {
    /// Not made yet.
    #[default]
    Untried,
    /// Connected to the peer's address on the path.
    Connected(Box<UdpSocket>),
    /// Could not be made: the link's socket sends.
    Unavailable,
}

/// Receive buffer of a sending socket: it only ever gets Resets.
const SENDER_RECEIVE_BUFFER_BYTES: usize = 64 << 10;

/// The connected socket for `path` of a connection to `to`, made on first use (bound to
/// the link socket's address `local`, any port); None when it cannot be made.
fn sender_for(
    senders: &mut Vec<Sender>,
    path: usize,
    local: SocketAddr,
    to: SocketAddr,
) -> Option<&mut UdpSocket> {
    if senders.len() <= path {
        senders.resize_with(path + 1, Sender::default);
    }
    let slot = &mut senders[path];
    if let Sender::Untried = slot {
        let made = UdpSocket::bind(SocketAddr::new(local.ip(), 0)).and_then(|mut socket| {
            let _ = quiver_transport::udp::set_buffer_sizes(
                socket.as_fd(),
                quiver_transport::udp::DEFAULT_SOCKET_BUFFER_BYTES,
                SENDER_RECEIVE_BUFFER_BYTES,
            );
            socket.connect(to)?;
            Ok(socket)
        });
        *slot = match made {
            Ok(socket) => Sender::Connected(Box::new(socket)),
            Err(e) => {
                tracing::debug!(%to, error = %e, "no connected udp socket; sending from the link's");
                Sender::Unavailable
            }
        };
    }
    match slot {
        Sender::Connected(socket) => Some(socket),
        _ => None,
    }
}

/// A receive in the middle of a message of connection `id`: datagrams that continue it go
/// straight into `out` (`ReliableConnection::handle_datagram_into`), `placed` bytes so far.
struct Reader<'a> {
    id: u64,
    out: &'a mut [u8],
    placed: usize,
}

impl Reader<'_> {
    /// Feeds `datagram` to connection `id` (`entry`): into the reader's buffer if it is the
    /// reader's connection, else into its posted receives' buffers if it has any.
    fn feed(
        reader: &mut Option<Reader<'_>>,
        id: u64,
        entry: &mut Entry,
        now: Nanos,
        path: usize,
        datagram: &[u8],
    ) {
        match reader {
            Some(r) if r.id == id => {
                r.placed +=
                    entry
                        .core
                        .handle_datagram_into(now, path, datagram, &mut r.out[r.placed..]);
            }
            _ if !entry.reads.0.is_empty() => {
                entry
                    .core
                    .handle_datagram_posted(now, path, datagram, &mut entry.reads);
            }
            _ => entry.core.handle_datagram(now, path, datagram),
        }
    }
}

/// The buffers of a connection's posted receives held by the engine
/// ([`DgramShared::post_recvs`]), (token, buffer) in posting order.
#[derive(Debug, Default)]
struct PostedReads(Vec<(u64, Vec<u8>)>);

impl PostedBuffers for PostedReads {
    fn buffer(&mut self, token: u64) -> Option<&mut [u8]> {
        self.0
            .iter_mut()
            .find(|(held, _)| *held == token)
            .map(|(_, buffer)| buffer.as_mut_slice())
    }
}

impl PostedReads {
    fn take(&mut self, token: u64) -> Option<Vec<u8>> {
        let index = self.0.iter().position(|(held, _)| *held == token)?;
        Some(self.0.remove(index).1)
    }
}

/// What became of a receive posted with [`DgramShared::post_recvs`].
#[derive(Debug)]
pub(crate) enum RecvDone {
    /// A message of `len` bytes is at the start of `buf`.
    Complete {
        token: u64,
        buf: Vec<u8>,
        len: usize,
    },
    /// The next message (`len` bytes) is longer than `buf`; it stays for the next receive.
    TooSmall {
        token: u64,
        buf: Vec<u8>,
        len: usize,
    },
    /// Handed back untouched: the connection ended (failed or closed) before the receive's
    /// message began; the endpoint's general receive path takes it on.
    Returned { token: u64, buf: Vec<u8> },
    /// The connection failed in the middle of the receive's message (its buffer is
    /// dropped).
    Failed { token: u64, why: String },
}

/// Progress of a message sent in place ([`DgramShared::send_in_place`]).
#[derive(Debug, Default)]
pub(crate) struct InPlace {
    /// The message was started (its length is in the send window).
    started: bool,
    /// Bytes of it lent so far.
    lent: usize,
    /// When the last byte was lent: the adoption of the tail starts.
    all_lent_at: Option<Instant>,
}

/// Bytes of a message sent in place that one round of its send adopts (copies into the
/// send window) while it waits for their acknowledgement, the highest first: the copy
/// from the top and the acknowledgements from the bottom meet in between.
/// docs/PERFORMANCE.md, "Session 9: udp sends in place": steps of 0 to 64 KiB did about
/// equally well (0 copies least but waits longest); adopting all at once did worse.
const ADOPT_STEP_BYTES: usize = 8 << 10;
/// How long after its last byte was lent a send in place waits for acknowledgements
/// before it adopts all that is left.
const TAIL_WAIT: Duration = Duration::from_micros(500);
/// Test hook: sends in place whatever the measurements say.
#[cfg(test)]
pub(crate) mod tests_in_place {
    /// When set, `DgramShared::in_place_pays` says yes (tests that must exercise the
    /// path; correct either way, so other tests running meanwhile are not disturbed).
    pub(crate) static ALWAYS: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
}

/// A message is sent in place only when it is at least this many times its connection's
/// bandwidth-delay product ([`DgramShared::in_place_pays`]). About one such product is
/// still unacknowledged when the send ends (and is copied): on loopback it is 2-3
/// datagrams (110-150 KB), and sends that adopted 40% of their bytes were still 8% faster
/// than copying (docs/PERFORMANCE.md, "Session 9: udp sends in place").
const IN_PLACE_BDP_MULTIPLE: u64 = 3;
/// Payload bytes one system call of a send in place carries at most (see
/// [`Engine::flush_lent`]), so that the receiver starts on them (and acknowledges them)
/// while the rest are checksummed and sent: with 128 KiB about 13% of the bytes of 1 MiB
/// sends were still unacknowledged at the end (adopted), against 18-28% with one call
/// for all that the window allows.
const LENT_BATCH_BYTES: usize = 128 << 10;

/// A connection sending a message in place and that message (see
/// [`DgramShared::send_in_place`]), or none.
type Lender<'a> = Option<(u64, &'a [u8])>;

/// The message connection `id` lends bytes of, if `lender` is that connection (else empty:
/// without it no data frame goes out while bytes are lent).
fn lent_of<'a>(lender: Lender<'a>, id: u64) -> &'a [u8] {
    match lender {
        Some((lender_id, message)) if lender_id == id => message,
        _ => &[],
    }
}

/// A message posted in place on a connection (`DgramShared::post_in_place`): the buffer
/// the protocol core reads its frames from until it releases the token.
#[derive(Debug)]
struct Posted {
    token: u64,
    data: Vec<u8>,
    /// Bytes of it lent to the core so far.
    lent: usize,
}

/// The message lent under `token`: the blocking send's `lent` for
/// [`LEND_MESSAGE_TOKEN`], else a posted one.
fn lender<'a>(lent: &'a [u8], posted: &'a VecDeque<Posted>, token: u64) -> Option<&'a [u8]> {
    if token == LEND_MESSAGE_TOKEN {
        return Some(lent);
    }
    posted
        .iter()
        .find(|message| message.token == token)
        .map(|message| message.data.as_slice())
}

/// What the endpoint sees of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Connecting,
    Open,
    /// The peer closed gracefully.
    Closed,
    /// Broken for good: why.
    Failed(String),
}

#[derive(Debug)]
struct Entry {
    core: ReliableConnection,
    /// The peer's address on path 0 (for messages).
    to: SocketAddr,
    /// The peer's address on each path (index = path = own socket).
    paths: Vec<SocketAddr>,
    /// The local endpoint's port.
    local_port: u16,
    /// The endpoint at the other end.
    peer: Addr,
    /// Accepted from a peer (true) or opened by a local connect (false).
    inbound: bool,
    status: Status,
    /// The endpoint gave the connection up; drop it once it is closed or failed.
    abandoned: bool,
    /// Per path, the socket connected to the peer there that carries this connection's
    /// datagrams once it is open (see [`Sender`]).
    senders: Vec<Sender>,
    /// A message from the peer was seen (for a connection this side opened: the peer
    /// sends on it too).
    peer_sent: bool,
    /// Messages posted in place and not yet handed back, in stream order; the last may be
    /// lent in part (the rest follows as acknowledgements free room).
    posted: VecDeque<Posted>,
    /// Buffers of receives posted in place ([`DgramShared::post_recvs`]) not yet handed
    /// back.
    reads: PostedReads,
}

impl Entry {
    /// Lends more of the posted message not yet all lent (the last one), if any.
    fn lend_posted(&mut self) -> u64 {
        let mut lent_now = 0;
        if let Some(last) = self.posted.back_mut() {
            while last.lent < last.data.len() {
                let count = self
                    .core
                    .lend_message_as(last.token, last.data.len() - last.lent);
                if count == 0 {
                    break;
                }
                last.lent += count;
                lent_now += count as u64;
            }
        }
        lent_now
    }
}

#[derive(Debug)]
struct Engine {
    /// One socket per own link (index = path).
    sockets: Vec<Socket>,
    /// Link addresses of every rank (`QUIVER_LINKS`; empty: one link each).
    links: Vec<Vec<SocketAddr>>,
    conns: ConnTable,
    /// Connection id of a Hello already answered, by (source rank, initiator's id): its
    /// repeats may come over any link.
    hellos: HashMap<(u32, u64), u64>,
    base: ReliableConfig,
    config_datagram: usize,
    /// `Config::udp_in_place_min`: payloads this long or longer are sent in place.
    in_place_min: usize,
    /// `Config::udp_scatter_min` (0: off).
    scatter_min: usize,
    /// When the engine started, as [`monotonic_ns`] read it (the origin of
    /// [`Engine::now`]).
    start_ns: Nanos,
    header: [u8; MAX_HEADER_LEN],
    rx: Box<[u8]>,
    /// Earliest protocol timer over all connections (recomputed by each poll).
    next_timer: Option<Nanos>,
    /// Counts polls that fed or timed out a connection (news for receivers: a receiver that
    /// found nothing on its connections at one count need not look again at the same).
    news: u64,
    /// A connection's timers may have moved since `next_timer` was computed (something was
    /// sent, read or closed): the next poll looks at every connection again. Polls that
    /// find nothing to do skip the timer scan otherwise.
    timers_dirty: bool,
    /// Counters of connections already forgotten.
    retired: DatagramStats,
    /// Connections whose acknowledgements wait for the next poll: a message of theirs was
    /// just delivered (or is about to be), and the application's answer should leave
    /// before our ack does.
    deferred: Vec<u64>,
    /// Connections a poll fed or timed out (reused: polls allocate nothing).
    touched: Vec<u64>,
    /// Connections whose retransmission timer fired in a poll (reused).
    timed_out: Vec<u64>,
    /// The last poll handed messages to the application and left its housekeeping to this
    /// one (see [`Engine::poll_into`]).
    housekeeping_owed: bool,
    /// The socket a poll looks at first (several links: the one after the last served).
    next_socket: usize,
    /// Bytes of messages sent in place, and of those, bytes that had to be copied into a
    /// send window after all (not acknowledged before their send returned).
    sent_in_place_bytes: u64,
    adopted_bytes: u64,
    /// Bytes of posted messages lent to the protocol (never copied).
    posted_in_place_bytes: u64,
}

impl Engine {
    /// Connection `id`, or the failure a send on it reports when it is gone.
    fn live_entry(
        &mut self,
        kind: TransportKind,
        id: u64,
    ) -> std::result::Result<&mut Entry, Failure> {
        self.conns
            .get_mut(&id)
            .ok_or_else(|| Failure::Lost(kind.name(), "the connection is gone".into()))
    }

    /// Connection `id` if it can still send: gone, failed or closed is the failure a send
    /// on it reports.
    fn open_entry(
        &mut self,
        kind: TransportKind,
        id: u64,
    ) -> std::result::Result<&mut Entry, Failure> {
        let entry = self.live_entry(kind, id)?;
        match &entry.status {
            Status::Failed(why) => Err(Failure::Lost(kind.name(), why.clone())),
            Status::Closed => Err(Failure::Closed),
            _ => Ok(entry),
        }
    }

    fn defer(&mut self, id: u64) {
        if !self.deferred.contains(&id) {
            self.deferred.push(id);
        }
    }
}

/// Counters of a context's reliable datagram protocol (udp or mem), summed over its
/// connections, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatagramStats {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Data frames sent again (after a timeout or a fast retransmit).
    pub retransmits: u64,
    /// Of those, fast retransmits (loss inferred from acknowledgements).
    pub fast_retransmits: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Duplicates received and dropped.
    pub duplicates_dropped: u64,
    /// Corrupted datagrams received and dropped.
    pub corrupt_dropped: u64,
    /// Times a link of a striped connection went down (its traffic moved to the others).
    pub paths_down: u64,
    /// Times such a link came back.
    pub paths_rejoined: u64,
    /// Connections open now (not given up by their endpoint): one per pair of endpoints
    /// that talk, whichever side connected first.
    pub connections: u64,
    /// Payload bytes received straight into a receive's buffer (a blocking receive in the
    /// middle of a message), not through the connection's receive window.
    pub direct_read_bytes: u64,
    /// Of those, bytes a scattering receive put there with no copy after the kernel's
    /// (`Config::udp_scatter_min`).
    pub scattered_bytes: u64,
    /// Message bytes sent in place: lent from the sender's buffer to the protocol, not
    /// copied into a send window (`Config::udp_send_in_place_min`).
    pub sent_in_place_bytes: u64,
    /// Of those, bytes copied into the send window after all: not acknowledged when their
    /// send returned.
    pub adopted_bytes: u64,
    /// Message bytes of posted sends sent in place (`Config::udp_post_in_place_min`):
    /// lent from the posted buffer, never copied.
    pub posted_in_place_bytes: u64,
}

impl DatagramStats {
    fn add(&mut self, s: &quiver_proto::reliable::ReliableStats) {
        self.datagrams_sent += s.datagrams_sent;
        self.datagrams_received += s.datagrams_received;
        self.retransmits += s.retransmits;
        self.fast_retransmits += s.fast_retransmits;
        self.timeouts += s.rto_expirations;
        self.duplicates_dropped += s.duplicates_dropped;
        self.corrupt_dropped += s.corrupt_dropped;
        self.paths_down += s.paths_down;
        self.paths_rejoined += s.paths_rejoined;
        self.direct_read_bytes += s.direct_read_bytes;
        self.scattered_bytes += s.scattered_bytes;
    }
}

/// Traffic of one of this rank's links, summed over the datagram connections (those still
/// open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// The link's local address.
    pub address: Option<SocketAddr>,
    /// Datagrams sent on it.
    pub datagrams_sent: u64,
    /// Datagrams received on it.
    pub datagrams_received: u64,
    /// Payload bytes of data frames sent on it (retransmissions included).
    pub payload_bytes_sent: u64,
    /// Frames sent on it and declared lost.
    pub frames_lost: u64,
    /// Of those, frames whose first transmission was acknowledged after all (a timeout
    /// that fired while the peer was paused): see `PathStats::spurious_losses`.
    pub spurious_losses: u64,
    /// Times it went down in some connection.
    pub times_down: u64,
    /// Largest over the connections: congestion window, delivery rate (bytes/s), smoothed
    /// and minimum RTT (ns) on this link.
    pub window_bytes: u64,
    /// See `window_bytes`.
    pub delivery_rate_bytes_per_second: u64,
    /// See `window_bytes`.
    pub smoothed_rtt_ns: u64,
    /// See `window_bytes`.
    pub min_rtt_ns: u64,
}

/// How [`DgramShared::connect`] ended.
pub(crate) enum Connected<T> {
    /// A new connection (its id).
    New(u64),
    /// The peer's own connection to us, found by the `reuse` hook: it carries both ways.
    Reused(T),
}

/// Hashes a connection id as itself: ids are drawn at random by this engine (so a peer
/// cannot make them collide), and a lookup per datagram and per call then costs no SipHash.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }

    /// A short id (`frame::short_id`, the low 24 bits of an id drawn at random): spread
    /// over the whole word (Fibonacci hashing), as the table takes its control bits from
    /// the top ones.
    fn write_u32(&mut self, short: u32) {
        self.0 = u64::from(short).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Connections by id.
type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;
/// Connection ids by short id (looked up for every Stream frame: no SipHash either).
type ShortIdMap = HashMap<u32, u64, std::hash::BuildHasherDefault<IdHasher>>;

/// The engine as the context shares it with its endpoints.
#[derive(Debug)]
pub(crate) struct DgramShared {
    kind: TransportKind,
    /// The socket's descriptor, or with several links the epoll set of them.
    fd: RawFd,
    /// Keeps the epoll set (several links) open.
    /// The epoll set of the link sockets (several links): the engine's descriptor, and
    /// which sockets have something to receive.
    readiness: Option<ReadinessSet>,
    job_id: u64,
    key: JobKey,
    /// Own link addresses, by link (path) index.
    local_links: Vec<SocketAddr>,
    engine: Mutex<Engine>,
}

fn reliable_config(config: &Config) -> ReliableConfig {
    let idle = config.net_idle_timeout.as_nanos() as Nanos;
    ReliableConfig {
        send_buffer_bytes: config.net_window_bytes,
        recv_window_bytes: config.net_window_bytes,
        idle_timeout_ns: idle,
        keepalive_interval_ns: (idle / 4).max(1_000_000),
        // 16-byte data headers where nothing needs acknowledging (their 32-bit offsets need
        // windows of at most 1 GiB).
        compact_data_frames: config.net_window_bytes <= ReliableConfig::MAX_COMPACT_BUFFER_BYTES,
        max_in_flight_datagrams: max_in_flight_for(config.net_window_bytes),
        ..ReliableConfig::default()
    }
}

/// Frames in flight (sent, not cumulatively acknowledged) a connection with a window of
/// `window_bytes` may have: one per KiB of the window, at least the protocol's default.
/// Everything sent after a lost frame counts until the frame is repaired, so the cap must
/// cover the window for the repair time: at 8 x 1 Gbit/s the default 4096 frames are 6 ms,
/// less than a repair takes on a busy host (the sender then stalls on every loss).
fn max_in_flight_for(window_bytes: usize) -> usize {
    (window_bytes / 1024).clamp(
        ReliableConfig::default().max_in_flight_datagrams,
        ReliableConfig::MAX_IN_FLIGHT_DATAGRAMS,
    )
}

/// Binds one link's socket.
fn bind_socket(kind: TransportKind, addr: SocketAddr) -> Result<Socket> {
    Ok(match kind {
        TransportKind::Udp => {
            let mut socket = UdpSocket::bind(addr).map_err(|e| Error::bind("udp", addr, e))?;
            // Coalesced receives cut the per-datagram cost; best effort.
            let _ = socket.set_gro(true);
            Socket::Udp(Box::new(UdpIo {
                socket,
                rx: Some(Box::new(RecvBatch::new(RX_MESSAGES, MAX_COALESCED_BYTES))),
                rx_wide: false,
                rx_last_bytes: MAX_COALESCED_BYTES,
                short_receives: 0,
                tx: Vec::with_capacity(TX_BYTES + 65536),
                tx_out: Vec::with_capacity(1024),
                gather: GatherBuffer::with_capacity(2 * 1024, 1024),
            }))
        }
        TransportKind::Mem => Socket::Mem(
            MemSocket::bind(addr)
                .map_err(|e| Error::io(format!("binding the mem socket {addr}"), e))?,
        ),
        other => {
            return Err(Error::Config(format!(
                "{other} is not a datagram transport"
            )))
        }
    })
}

impl DgramShared {
    /// Binds this rank's datagram sockets, one per own link in `local` (its `QUIVER_LINKS`
    /// entry, or just its address); `links` are every rank's links (empty: one each).
    pub(crate) fn bind(
        kind: TransportKind,
        local: Vec<SocketAddr>,
        links: Vec<Vec<SocketAddr>>,
        config: &Config,
        job_id: u64,
        key: JobKey,
    ) -> Result<DgramShared> {
        let mut sockets = Vec::with_capacity(local.len());
        for &addr in &local {
            sockets.push(bind_socket(kind, addr)?);
        }
        let (fd, readiness) = match sockets.as_slice() {
            [only] => (only.raw_fd(), None),
            _ => {
                let mut set = ReadinessSet::new()
                    .map_err(|e| Error::io("creating the epoll set of the link sockets", e))?;
                // The sockets live in the engine, as long as the set (both are owned by this
                // DgramShared).
                for socket in &sockets {
                    set.add(socket.raw_fd())
                        .map_err(|e| Error::io("adding a link socket to the epoll set", e))?;
                }
                (set.as_raw_fd(), Some(set))
            }
        };
        let base = reliable_config(config);
        base.validate()
            .map_err(|e| Error::Config(format!("network settings: {e}")))?;
        Ok(DgramShared {
            kind,
            fd,
            readiness,
            job_id,
            key,
            local_links: local,
            engine: Mutex::new(Engine {
                sockets,
                links,
                conns: ConnTable::default(),
                hellos: HashMap::new(),
                base,
                config_datagram: config.udp_datagram_bytes,
                in_place_min: config.udp_in_place_min,
                scatter_min: config.udp_scatter_min,
                start_ns: monotonic_ns(),
                header: [0; MAX_HEADER_LEN],
                rx: vec![0u8; 65536].into_boxed_slice(),
                next_timer: None,
                timers_dirty: false,
                news: 0,
                retired: DatagramStats::default(),
                deferred: Vec::new(),
                touched: Vec::new(),
                timed_out: Vec::new(),
                housekeeping_owed: false,
                next_socket: 0,
                sent_in_place_bytes: 0,
                adopted_bytes: 0,
                posted_in_place_bytes: 0,
            }),
        })
    }

    /// This rank's own link addresses, by link index.
    pub(crate) fn local_links(&self) -> &[SocketAddr] {
        &self.local_links
    }

    /// Traffic of each own link over the open connections.
    pub(crate) fn link_stats(&self) -> Vec<LinkStats> {
        let engine = self.lock();
        let mut links: Vec<LinkStats> = self
            .local_links
            .iter()
            .map(|&address| LinkStats {
                address: Some(address),
                ..LinkStats::default()
            })
            .collect();
        for entry in engine.conns.values() {
            for (path, link) in links.iter_mut().enumerate() {
                if let Some(stats) = entry.core.path_stats(path) {
                    link.datagrams_sent += stats.datagrams_sent;
                    link.datagrams_received += stats.datagrams_received;
                    link.payload_bytes_sent += stats.payload_bytes_sent;
                    link.frames_lost += stats.frames_lost;
                    link.spurious_losses += stats.spurious_losses;
                    link.times_down += stats.times_down;
                    link.window_bytes = link.window_bytes.max(stats.window_bytes);
                    link.delivery_rate_bytes_per_second = link
                        .delivery_rate_bytes_per_second
                        .max(stats.delivery_rate_bytes_per_second);
                    link.smoothed_rtt_ns = link.smoothed_rtt_ns.max(stats.smoothed_rtt_ns);
                    link.min_rtt_ns = link.min_rtt_ns.max(stats.min_rtt_ns);
                }
            }
        }
        links
    }

    /// The protocol's counters over every connection so far.
    pub(crate) fn stats(&self) -> DatagramStats {
        let engine = self.lock();
        let mut total = engine.retired;
        total.connections = 0;
        total.sent_in_place_bytes = engine.sent_in_place_bytes;
        total.adopted_bytes = engine.adopted_bytes;
        total.posted_in_place_bytes = engine.posted_in_place_bytes;
        for e in engine.conns.values() {
            total.add(e.core.stats());
            total.connections += u64::from(!e.abandoned);
        }
        total
    }

    /// udp or mem.
    pub(crate) fn kind(&self) -> TransportKind {
        self.kind
    }

    /// The descriptor that becomes readable when datagrams arrive.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a sleeper may sleep before a protocol timer is due (at most `cap`).
    pub(crate) fn timeout_within(&self, cap: Duration) -> Duration {
        let mut engine = self.lock();
        if engine.timers_dirty {
            engine.next_timer = engine.earliest_timer();
        }
        match engine.next_timer {
            Some(t) => {
                let now = engine.now();
                Duration::from_nanos(t.saturating_sub(now)).min(cap)
            }
            None => cap,
        }
    }

    /// Opens a connection from `src` to `dst` at `to` and waits for its handshake.
    ///
    /// One connection carries both directions of an endpoint pair: before every attempt
    /// `reuse` looks for a connection the peer opened to us, which is then used instead. A
    /// peer connecting to us at the same moment with the lower address refuses our attempt
    /// with `Busy` (see `Engine::accept`); its connection arrives and `reuse` finds it.
    pub(crate) fn connect<T>(
        &self,
        ctx: &LocalRank,
        src: Addr,
        dst: Addr,
        to: SocketAddr,
        deadline: Instant,
        mut reuse: impl FnMut() -> Option<T>,
    ) -> Result<Connected<T>> {
        let request = ConnectRequest {
            job_id: self.job_id,
            src_rank: src.rank,
            src_port: src.port,
            dst_port: dst.port,
        };
        loop {
            if let Some(found) = reuse() {
                return Ok(Connected::Reused(found));
            }
            let id = {
                let mut engine = self.lock();
                // The peer's connection to this endpoint is being accepted (or was just
                // handed over): wait for it and use it rather than open a second one.
                let accepting = engine.conns.values().any(|e| {
                    e.inbound
                        && !e.abandoned
                        && e.local_port == src.port
                        && e.peer == dst
                        && e.status == Status::Connecting
                }) || ctx
                    .registry
                    .inbox(src.port)
                    .is_some_and(|ep| ep.has_incoming.load(Ordering::Acquire));
                if accepting {
                    drop(engine);
                    if Instant::now() >= deadline {
                        return Err(Error::Refused {
                            peer: dst,
                            reason: format!(
                                "its connection to us was still being accepted at the connect \
                                 timeout ({} {to})",
                                self.kind
                            ),
                        });
                    }
                    self.sleep(Duration::from_millis(1));
                    continue;
                }
                let id = engine.fresh_id();
                let now = engine.now();
                let paths = engine.peer_paths(dst.rank, to);
                let config = engine.config_for(&to, paths.len());
                let core = ReliableConnection::connect(
                    config,
                    self.key.clone(),
                    request,
                    id,
                    random(),
                    now,
                )
                .map_err(|e| Error::Config(format!("network settings: {e}")))?;
                engine.conns.insert(
                    id,
                    Entry {
                        core,
                        to,
                        paths,
                        local_port: src.port,
                        peer: dst,
                        inbound: false,
                        status: Status::Connecting,
                        abandoned: false,
                        senders: Vec::new(),
                        peer_sent: false,
                        posted: VecDeque::new(),
                        reads: PostedReads::default(),
                    },
                );
                engine.flush(id);
                id
            };
            let retry_why = loop {
                let status = {
                    let mut engine = self.lock();
                    engine.poll(Some(ctx), self);
                    engine.conns.get(&id).map(|e| e.status.clone())
                };
                match status {
                    Some(Status::Open) => return Ok(Connected::New(id)),
                    Some(Status::Connecting) => {}
                    Some(Status::Failed(why)) if why.starts_with(RETRY) => break why,
                    Some(Status::Failed(why)) => {
                        let entry = self.lock().conns.remove(&id);
                        let reason = entry.and_then(|e| e.core.fail_reason());
                        return Err(match reason {
                            Some(FailReason::Handshake(e)) => {
                                Error::handshake(dst, self.kind.name(), e)
                            }
                            _ => Error::Refused {
                                peer: dst,
                                reason: format!("{why} ({} {to})", self.kind),
                            },
                        });
                    }
                    Some(Status::Closed) | None => {
                        self.lock().conns.remove(&id);
                        return Err(Error::Refused {
                            peer: dst,
                            reason: format!(
                                "the peer closed the connection during the handshake ({} {to})",
                                self.kind
                            ),
                        });
                    }
                }
                if Instant::now() >= deadline {
                    self.lock().conns.remove(&id);
                    return Err(Error::Unreachable {
                        peer: dst,
                        transport: self.kind.name(),
                        detail: format!(
                            "no answer from {to} before the connect timeout (nobody \
                             listening there, or no route)"
                        ),
                    });
                }
                self.sleep(Duration::from_millis(1));
            };
            self.lock().conns.remove(&id);
            if Instant::now() >= deadline {
                return Err(Error::Refused {
                    peer: dst,
                    reason: format!("{} ({} {to})", &retry_why[RETRY.len()..], self.kind),
                });
            }
            // A crossed connect: the peer's connection is on its way.
            let pause = if retry_why == CROSSED { 1 } else { 5 };
            std::thread::sleep(Duration::from_millis(pause));
        }
    }

    /// Sleeps until a datagram arrives, the next protocol timer is due, or `cap` passed.
    pub(crate) fn sleep(&self, cap: Duration) {
        let mut fds = [libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = quiver_transport::sys::poll(&mut fds, Some(self.timeout_within(cap)));
    }

    /// Receives what arrived, runs due timers (a poll that handed a message to the
    /// application may leave them to the next: see `Engine::poll_into`), sends what the
    /// protocol produced, and hands newly accepted connections to their endpoints. Returns
    /// the engine's news count:
    /// while it stays the same, no connection received anything or changed its state.
    pub(crate) fn poll_io(&self, ctx: &LocalRank) -> u64 {
        let mut engine = self.lock();
        engine.poll(Some(ctx), self);
        engine.news
    }

    /// [`DgramShared::poll_io`] for a blocking receive about to look for a message: it
    /// takes about one datagram of bulk data (from the sockets together), so that a large message
    /// goes into the receive window only as far as it must (its length, to start reading
    /// it); the rest arrives while the receive reads it, straight into its buffer (see
    /// [`DgramShared::take`]).
    pub(crate) fn poll_io_before_receive(&self, ctx: &LocalRank) -> u64 {
        let mut engine = self.lock();
        engine.poll_into(Some(ctx), self, &mut None, MAX_COALESCED_BYTES, None);
        engine.news
    }

    /// The short receive path of a blocking receive whose endpoint's only inbound edge is
    /// open connection `id` (`Endpoint::look_lone_dgram`): one poll, as
    /// [`DgramShared::poll_io_before_receive`], then the next message of `id` into `buf`
    /// if it is all there and fits, under one lock. `Some(Some(len))`: a message of `len`
    /// bytes was taken; `Some(None)`: none has begun to arrive; `None`: anything else (a
    /// message too large for `buf` or not whole yet, a connection not open, or gone), which
    /// the general path ([`DgramShared::take`]) handles, nothing having been consumed.
    pub(crate) fn take_whole(
        &self,
        ctx: &LocalRank,
        id: u64,
        buf: &mut [u8],
    ) -> Option<Option<usize>> {
        let mut engine = self.lock();
        engine.poll_into(Some(ctx), self, &mut None, MAX_COALESCED_BYTES, None);
        let entry = engine.conns.get_mut(&id)?;
        if entry.status != Status::Open {
            return None;
        }
        let Some((len, ready)) = entry.core.peek_message() else {
            return Some(None);
        };
        if len > buf.len() as u64 || !ready {
            return None;
        }
        let len = len as usize;
        // A whole message completes in one read into a buffer that holds it
        // (`ReliableConnection::message_ready`).
        let (_, complete) = entry.core.read_message(&mut buf[..len]);
        debug_assert!(complete, "a ready message was not read whole");
        entry.peer_sent = true;
        // Freed receive credit may bring a window update forward.
        engine.timers_dirty = true;
        engine.defer(id);
        Some(Some(len))
    }

    /// Whether connection `id` could take `len` more bytes as a new message right now.
    pub(crate) fn can_take(&self, id: u64, len: usize) -> bool {
        let engine = self.lock();
        engine
            .conns
            .get(&id)
            .is_some_and(|e| e.core.send_capacity() >= len)
    }

    /// Writes more of a message into connection `id`'s send window. `written` counts the
    /// bytes taken so far, `started` whether the message was announced. True once all of
    /// `data` is taken.
    pub(crate) fn write(
        &self,
        id: u64,
        data: &[u8],
        written: &mut usize,
        started: &mut bool,
    ) -> std::result::Result<bool, Failure> {
        let mut engine = self.lock();
        let kind = self.kind;
        let entry = engine.open_entry(kind, id)?;
        if !*started {
            if entry.core.start_message(data.len() as u64).is_err() {
                return Ok(false);
            }
            *started = true;
        }
        while *written < data.len() {
            let n = entry.core.write_message(&data[*written..]);
            if n == 0 {
                break;
            }
            *written += n;
        }
        let done = *written == data.len();
        engine.flush(id);
        Ok(done)
    }

    /// Sends `data` as the next message of connection `id` from the caller's buffer, in
    /// place: its bytes are lent to the protocol (`ReliableConnection::lend_message`)
    /// instead of copied into the send window, and datagrams carry them straight from
    /// `data` (checksum and gathered send). Each call polls the sockets (acks), lends what
    /// the window has room for, and sends what the protocol lets go. Once all of `data` is
    /// lent, what is not yet acknowledged is adopted (copied into the send window), the
    /// highest bytes first, [`ADOPT_STEP_BYTES`] per call while acks keep arriving, all of
    /// it after [`TAIL_WAIT`]: the sooner the call returns the fewer bytes are
    /// acknowledged meanwhile (docs/PERFORMANCE.md, "Session 9: udp sends in place").
    ///
    /// True once the caller may reuse `data` (no byte of it is lent any more); on false
    /// the caller waits a step and calls again with the same `data` and `progress`. A
    /// caller that gives up before (an error, a timeout) must call
    /// [`DgramShared::end_in_place`].
    pub(crate) fn send_in_place(
        &self,
        ctx: &LocalRank,
        id: u64,
        data: &[u8],
        progress: &mut InPlace,
    ) -> std::result::Result<bool, Failure> {
        let mut engine = self.lock();
        let kind = self.kind;
        let entry = engine.open_entry(kind, id)?;
        // The first call starts the message and sends; every other polls first:
        // acknowledgements free room and release lent bytes.
        let fresh = !progress.started && entry.core.start_message(data.len() as u64).is_ok();
        if fresh {
            progress.started = true;
        } else {
            engine.poll_into(
                Some(ctx),
                self,
                &mut None,
                RECV_BUDGET_BYTES,
                Some((id, data)),
            );
            if !progress.started {
                return Ok(false);
            }
        }
        let entry = engine.live_entry(kind, id)?;
        let mut lent_now = 0;
        while progress.lent < data.len() {
            let count = entry.core.lend_message(data.len() - progress.lent);
            if count == 0 {
                break;
            }
            progress.lent += count;
            lent_now += count as u64;
        }
        engine.sent_in_place_bytes += lent_now;
        engine.flush_lent(id, data);
        if progress.lent == data.len() && progress.all_lent_at.is_none() {
            progress.all_lent_at = Some(Instant::now());
        }
        let entry = engine.live_entry(kind, id)?;
        let Some(all_lent_at) = progress.all_lent_at else {
            return Ok(false);
        };
        if entry.core.lent_bytes() == 0 {
            return Ok(true);
        }
        let step = if all_lent_at.elapsed() >= TAIL_WAIT {
            usize::MAX
        } else {
            ADOPT_STEP_BYTES
        };
        // Invariant: `data` is the message lent (its length checked by the core).
        let adopted = entry.core.adopt_lent(data, step).unwrap_or(0);
        engine.adopted_bytes += adopted as u64;
        let entry = engine.conns.get(&id).expect("looked up above");
        Ok(entry.core.lent_bytes() == 0)
    }

    /// Whether a message of `len` bytes should be sent in place on connection `id`: only
    /// on a connection of one path, and only when the message is at least
    /// [`IN_PLACE_BDP_MULTIPLE`] times the connection's measured
    /// bandwidth-delay product (over its paths, delivery rate times minimum RTT). What is unacknowledged when the send ends (about a bandwidth-delay product)
    /// is copied anyway, and the send waits a little for acknowledgements first: on a
    /// link that is slow or far compared to the message, that wait empties the pipe
    /// between messages, where a copy lets the next message follow at once. False before
    /// the first measurements.
    pub(crate) fn in_place_pays(&self, id: u64, len: usize) -> bool {
        let engine = self.lock();
        let Some(entry) = engine.conns.get(&id) else {
            return false;
        };
        let core = &entry.core;
        #[cfg(test)]
        if tests_in_place::ALWAYS.load(Ordering::Relaxed) {
            return true;
        }
        if core.path_count() > 1 {
            // Striped: the links are the limit, not the sender's copy, and the wait for the
            // tail idled them (8 x 1 Gbit/s: 0.63-0.77 of tcp in place, 0.91 copied).
            return false;
        }
        // Each path's rate times its minimum RTT: the smoothed RTT includes the queue the
        // sender itself builds (about 1 ms on loopback with 8 MiB windows).
        let (mut rate, mut bdp) = (0u64, 0u128);
        for stats in (0..core.path_count()).filter_map(|path| core.path_stats(path)) {
            rate = rate.saturating_add(stats.delivery_rate_bytes_per_second);
            bdp += u128::from(stats.delivery_rate_bytes_per_second) * u128::from(stats.min_rtt_ns)
                / 1_000_000_000;
        }
        rate > 0 && bdp > 0 && len as u128 >= u128::from(IN_PLACE_BDP_MULTIPLE) * bdp
    }

    /// Ends a send in place that [`DgramShared::send_in_place`] did not finish (the caller
    /// gives up): what is still lent of `data` is adopted, so that the connection no longer
    /// needs it. The message itself stays on its way (its rest, if any, is never written:
    /// the caller's error ends the connection's use for sending, as for a partial write).
    pub(crate) fn end_in_place(&self, id: u64, data: &[u8]) {
        let mut engine = self.lock();
        if let Some(entry) = engine.conns.get_mut(&id) {
            let adopted = entry.core.adopt_lent(data, usize::MAX).unwrap_or(0);
            engine.adopted_bytes += adopted as u64;
        }
    }

    /// Starts `data` as the next message of connection `id`, posted in place under `token`
    /// (the caller's name for the request): the engine keeps the buffer and lends it to the
    /// protocol (`ReliableConnection::lend_message_as`), all of it or, for a message larger
    /// than the send window, in parts as acknowledgements free room (every flush of the
    /// connection lends more); frames and retransmissions read it in place. It comes back
    /// from [`DgramShared::collect_posted`] once the protocol released it. `Ok(Some(data))`:
    /// not started now (the previous message is not all taken, or the window lacks room for
    /// its header), try again later.
    pub(crate) fn post_in_place(
        &self,
        id: u64,
        token: u64,
        data: Vec<u8>,
    ) -> std::result::Result<Option<Vec<u8>>, Failure> {
        let mut engine = self.lock();
        let kind = self.kind;
        let entry = engine.open_entry(kind, id)?;
        if entry
            .posted
            .back()
            .is_some_and(|last| last.lent < last.data.len())
            || entry.core.start_message(data.len() as u64).is_err()
        {
            return Ok(Some(data));
        }
        entry.posted.push_back(Posted {
            token,
            data,
            lent: 0,
        });
        // Flushing lends what fits and sends it.
        engine.flush(id);
        Ok(None)
    }

    /// Hands back the buffers of connection `id`'s posted messages that the protocol
    /// released, into `done` as (token, buffer, delivered): delivered is false when the
    /// connection failed (the core then releases every message, acknowledged or not).
    pub(crate) fn collect_posted(&self, id: u64, done: &mut Vec<(u64, Vec<u8>, bool)>) {
        let mut engine = self.lock();
        let Some(entry) = engine.conns.get_mut(&id) else {
            return;
        };
        let failed =
            entry.core.state() == State::Failed || matches!(entry.status, Status::Failed(_));
        while let Some(token) = entry.core.poll_released() {
            if let Some(index) = entry.posted.iter().position(|p| p.token == token) {
                if let Some(posted) = entry.posted.remove(index) {
                    done.push((token, posted.data, !failed));
                }
            }
        }
    }

    /// Posts receives in place on connection `id` (an endpoint's lone inbound connection):
    /// takes buffers from the front of `recvs` ((token, buffer), in posting order) as long
    /// as the protocol takes readers (`ReliableConnection::post_reader`), and keeps them.
    /// Every datagram then goes to the connection with them
    /// (`handle_datagram_posted`): frames of the next messages go straight to their
    /// receives' buffers, also while earlier messages are still arriving. They come back
    /// from [`DgramShared::collect_recvs`]. Takes none from a connection that is not open,
    /// or in the middle of a message read the general way. Returns how many were taken.
    pub(crate) fn post_recvs(&self, id: u64, recvs: &mut VecDeque<(u64, Vec<u8>)>) -> usize {
        let mut engine = self.lock();
        let Some(entry) = engine.conns.get_mut(&id) else {
            return 0;
        };
        if entry.status != Status::Open || entry.core.reading_message() {
            return 0;
        }
        let mut taken = 0;
        while let Some((token, buf)) = recvs.pop_front() {
            if !entry.core.post_reader(token, buf.len()) {
                recvs.push_front((token, buf));
                break;
            }
            entry.reads.0.push((token, buf));
            taken += 1;
        }
        if taken > 0 {
            // What arrived already goes in now; freed credit may bring a window update.
            entry.core.read_posted(&mut entry.reads);
            entry.peer_sent = true;
            engine.timers_dirty = true;
            engine.flush(id);
        }
        taken
    }

    /// Hands back what became of connection `id`'s receives posted in place, into `done`:
    /// completed or too small, in the order they finished; once the connection failed or
    /// was closed, every other one (its message not begun: returned as it was; begun: with
    /// the failure). Returns how many receives the engine still holds; None when the
    /// connection is gone (with the receives it held).
    pub(crate) fn collect_recvs(&self, id: u64, done: &mut Vec<RecvDone>) -> Option<usize> {
        let mut engine = self.lock();
        let entry = engine.conns.get_mut(&id)?;
        let Entry {
            core,
            reads,
            status,
            ..
        } = entry;
        if reads.0.is_empty() {
            return Some(0);
        }
        let before = done.len();
        core.read_posted(reads);
        while let Some(read) = core.poll_posted() {
            let (token, len, complete) = match read {
                PostedRead::Complete { token, len } => (token, len, true),
                PostedRead::TooSmall { token, len } => (token, len, false),
            };
            let Some(buf) = reads.take(token) else {
                continue;
            };
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            done.push(if complete {
                RecvDone::Complete { token, buf, len }
            } else {
                RecvDone::TooSmall { token, buf, len }
            });
        }
        let ended = match status {
            Status::Failed(why) => Some(why.clone()),
            Status::Closed => Some("the peer closed the connection".to_owned()),
            _ => None,
        };
        if let Some(why) = ended {
            for token in core.withdraw_readers(reads) {
                if let Some(buf) = reads.take(token) {
                    done.push(RecvDone::Returned { token, buf });
                }
            }
            for (token, _) in reads.0.drain(..) {
                done.push(RecvDone::Failed {
                    token,
                    why: format!("{why} (in the middle of a message)"),
                });
            }
        }
        let held = reads.0.len();
        if done.len() > before {
            // Freed receive credit may bring a window update forward.
            engine.timers_dirty = true;
            engine.flush(id);
        }
        Some(held)
    }

    /// Whether everything written to connection `id` was acknowledged (true for a
    /// connection that failed or is gone: nothing more will be).
    pub(crate) fn all_acked(&self, id: u64) -> bool {
        let engine = self.lock();
        engine.conns.get(&id).is_none_or(|e| {
            e.core.all_acked() || matches!(e.status, Status::Failed(_) | Status::Closed)
        })
    }

    /// Whether connection `id`'s close is settled: its Close acknowledged by the peer, or the
    /// connection closed, failed or gone. Also returns its current RTO.
    pub(crate) fn close_settled(&self, id: u64) -> (bool, Duration) {
        let engine = self.lock();
        match engine.conns.get(&id) {
            None => (true, Duration::ZERO),
            Some(e) => (
                e.core.close_acknowledged()
                    || matches!(e.core.state(), State::Closed | State::Failed)
                    || matches!(e.status, Status::Failed(_) | Status::Closed),
                Duration::from_nanos(e.core.stats().rto_ns),
            ),
        }
    }

    /// Whether the peer has sent a message on connection `id` (one it did not open).
    pub(crate) fn peer_sent(&self, id: u64) -> bool {
        self.lock().conns.get(&id).is_some_and(|e| e.peer_sent)
    }

    /// Whether connection `id` has the start of a message to read.
    pub(crate) fn readable(&self, id: u64) -> bool {
        let engine = self.lock();
        engine
            .conns
            .get(&id)
            .is_some_and(|e| e.core.peek_message_len().is_some() || e.status != Status::Open)
    }

    /// Takes the next message of connection `id` into `dest`. A message that does not fit
    /// the receive window is read as it arrives (blocking even in a non-blocking call once
    /// its first bytes are here).
    pub(crate) fn take(
        &self,
        ctx: &LocalRank,
        id: u64,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
    ) -> std::result::Result<Option<usize>, DgramTake> {
        let mut engine = self.lock();
        let Some(entry) = engine.conns.get_mut(&id) else {
            return Err(DgramTake::Closed);
        };
        let Some(len) = entry.core.peek_message_len() else {
            return match &entry.status {
                Status::Failed(why) => Err(DgramTake::Failed(why.clone())),
                Status::Closed => Err(DgramTake::Closed),
                _ => Ok(None),
            };
        };
        entry.peer_sent = true;
        let window = engine.base.recv_window_bytes as u64;
        // Checked before anything is consumed: a too-small buffer leaves the message queued.
        let buf = dest.prepare(len).map_err(DgramTake::Error)?;
        // Non-blocking: deliver only a whole message (one that fits the window).
        let entry = engine.conns.get(&id).expect("looked up above");
        if !wait && len <= window / 2 && !entry.core.message_ready() {
            return Ok(None);
        }
        let len = len as usize;
        let mut filled = 0usize;
        let mut waited = crate::endpoint::Wait::with_timeout(config.op_timeout);
        // Freed receive credit may bring a window update forward.
        engine.timers_dirty = true;
        loop {
            let entry = engine.conns.get_mut(&id).expect("looked up above");
            let (n, complete) = entry.core.read_message(&mut buf[filled..len]);
            filled += n;
            if complete {
                engine.defer(id);
                return Ok(Some(len));
            }
            if let Status::Failed(why) = &entry.status {
                let failed = DgramTake::Failed(format!("{why} (in the middle of a message)"));
                entry.core.detach_reader(&buf[filled..len]);
                return Err(failed);
            }
            engine.flush(id);
            // What continues the message goes straight into the caller's buffer (one copy
            // instead of two: into the receive window, then out of it), also frames ahead of
            // the next byte (a striped connection's overtake each other all the time): the
            // core places them and counts them once the bytes before them are in; every
            // read_message above gets the same buffer, at the next unread byte.
            let mut reader = Some(Reader {
                id,
                out: &mut buf[filled..len],
                placed: 0,
            });
            // Only as much as the message still needs, so that little of the next one goes
            // through the receive window.
            let budget = RECV_BUDGET_BYTES.min(len - filled);
            engine.poll_into(Some(ctx), self, &mut reader, budget, None);
            let placed = reader.map_or(0, |r| r.placed);
            filled += placed;
            if filled == len {
                // Completed by those datagrams: the core has ended the message.
                engine.defer(id);
                return Ok(Some(len));
            }
            if n == 0 && placed == 0 {
                drop(engine);
                let waited_out = crate::endpoint::wait_engine(self, &mut waited, config.spin);
                engine = self.lock();
                if let Err(e) = waited_out {
                    // Frames that overtook others may sit in `buf` (placed ahead by the
                    // core): they go back to the connection's receive buffer.
                    if let Some(entry) = engine.conns.get_mut(&id) {
                        entry.core.detach_reader(&buf[filled..len]);
                    }
                    return Err(DgramTake::Error(e));
                }
            }
        }
    }

    /// The endpoint is done with connection `id`: close it gracefully; it is forgotten
    /// once the close completes or fails.
    pub(crate) fn close(&self, id: u64) {
        let mut engine = self.lock();
        let now = engine.now();
        if let Some(entry) = engine.conns.get_mut(&id) {
            entry.abandoned = true;
            entry.core.close(now);
        }
        engine.flush(id);
    }
}

/// The engine's connections by id, and by short id (`frame::short_id`: a Stream frame
/// carries only that much of its destination). `fresh_id` keeps short ids unique.
#[derive(Debug, Default)]
struct ConnTable {
    by_id: IdMap<Entry>,
    by_short: ShortIdMap,
}

impl ConnTable {
    fn contains_short(&self, short: u32) -> bool {
        self.by_short.contains_key(&short)
    }

    fn get(&self, id: &u64) -> Option<&Entry> {
        self.by_id.get(id)
    }

    fn get_mut(&mut self, id: &u64) -> Option<&mut Entry> {
        self.by_id.get_mut(id)
    }

    /// The connection a Stream frame's short id names, with its full id.
    fn get_mut_short(&mut self, short: u32) -> Option<(u64, &mut Entry)> {
        let id = *self.by_short.get(&short)?;
        self.by_id.get_mut(&id).map(|entry| (id, entry))
    }

    fn insert(&mut self, id: u64, entry: Entry) {
        self.by_short.insert(frame::short_id(id), id);
        self.by_id.insert(id, entry);
    }

    fn remove(&mut self, id: &u64) -> Option<Entry> {
        let entry = self.by_id.remove(id)?;
        if self.by_short.get(&frame::short_id(*id)) == Some(id) {
            self.by_short.remove(&frame::short_id(*id));
        }
        Some(entry)
    }

    fn values(&self) -> impl Iterator<Item = &Entry> {
        self.by_id.values()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut Entry)> {
        self.by_id.iter_mut()
    }

    fn retain(&mut self, mut keep: impl FnMut(&u64, &mut Entry) -> bool) {
        let by_short = &mut self.by_short;
        self.by_id.retain(|id, entry| {
            let kept = keep(id, entry);
            if !kept {
                by_short.remove(&frame::short_id(*id));
            }
            kept
        });
    }
}

impl Engine {
    /// Nanoseconds since the engine started: `CLOCK_MONOTONIC` read and subtracted in
    /// plain integers ([`monotonic_ns`]; `Instant::elapsed` adds its `Duration` and `u128`
    /// steps to the two reads per hop on the latency path).
    fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.start_ns)
    }

    /// The earliest protocol timer over all connections.
    fn earliest_timer(&self) -> Option<Nanos> {
        self.conns
            .values()
            .filter_map(|e| e.core.poll_timeout())
            .min()
    }

    /// A new connection id: non-zero, its short id (what Stream frames carry) unique
    /// among the engine's connections.
    fn fresh_id(&self) -> u64 {
        loop {
            let id = u64::from_ne_bytes(random());
            if id != 0 && !self.conns.contains_short(frame::short_id(id)) {
                return id;
            }
        }
    }

    /// The peer's address on each path: its links (as many as both ranks have), or just
    /// `to` without `QUIVER_LINKS`.
    fn peer_paths(&self, rank: u32, to: SocketAddr) -> Vec<SocketAddr> {
        match self.links.get(rank as usize) {
            Some(theirs) if self.sockets.len() > 1 || theirs.len() > 1 => {
                let count = theirs.len().min(self.sockets.len()).max(1);
                theirs[..count].to_vec()
            }
            _ => vec![to],
        }
    }

    fn config_for(&self, to: &SocketAddr, path_count: usize) -> ReliableConfig {
        let datagram = match (self.config_datagram, &self.sockets[0]) {
            (0, Socket::Mem(_)) => LOOPBACK_DATAGRAM,
            (0, _) if super::is_loopback(to) => LOOPBACK_DATAGRAM,
            (0, _) => ETHERNET_DATAGRAM,
            (n, _) => n,
        };
        // Over udp the timeouts must not fire for the few milliseconds a process is off its
        // CPU on a shared host (a striped connection's take paths down), nor while the
        // receiver works through a burst: on loopback too, a 1 ms floor resent about one
        // frame in seven of a 1 MiB stream, all duplicates (docs/PERFORMANCE.md, issue 3,
        // run F). In memory (tests) the protocol's own floor stays.
        let min_rto_ns = if path_count > 1 || matches!(self.sockets[0], Socket::Udp(_)) {
            self.base.min_rto_ns.max(NETWORK_MIN_RTO_NS)
        } else {
            self.base.min_rto_ns
        };
        ReliableConfig {
            max_datagram_bytes: datagram,
            path_count: path_count.max(1),
            min_rto_ns,
            initial_rto_ns: self.base.initial_rto_ns.max(min_rto_ns),
            max_rto_ns: self.base.max_rto_ns.max(min_rto_ns),
            ..self.base.clone()
        }
    }

    /// Sends everything connection `id` has to send, each datagram on the socket of its
    /// path to the peer's address there.
    ///
    /// The first datagram, when it is a copied one (a small frame: an answer, an ack) or
    /// one with its payload in place that no other data frame follows (an answer of 512 B
    /// or more: `Config::udp_in_place_min`), leaves at once, before the protocol is asked
    /// for more: what a poll for more costs (at least the `poll_transmit` that finds
    /// nothing, which also runs the connection's timer bookkeeping) then runs while the
    /// datagram is on its way, not before it (docs/PERFORMANCE.md, "udp latency path
    /// (session 8)", "Session 14").
    fn flush(&mut self, id: u64) {
        self.flush_lent(id, &[]);
    }

    /// [`Engine::flush`] with `lent`, the message connection `id` is sending in place (its
    /// lent bytes: [`DgramShared::send_in_place`]); without it (empty) no data frame goes
    /// out while bytes are lent.
    fn flush_lent(&mut self, id: u64, lent: &[u8]) {
        self.timers_dirty = true;
        let now = self.now();
        let Some(entry) = self.conns.get_mut(&id) else {
            return;
        };
        if !entry.posted.is_empty() {
            // A posted message larger than the window goes on as acknowledgements free room.
            self.posted_in_place_bytes += entry.lend_posted();
        }
        let sockets = &mut self.sockets;
        let in_place_min = self.in_place_min;
        let mut first = true;
        loop {
            for socket in sockets.iter_mut() {
                if let Socket::Udp(io) = socket {
                    io.tx.clear();
                    io.tx_out.clear();
                }
            }
            let mut more = true;
            let mut full = false;
            // Payload bytes laid out: a lender's flush sends at most LENT_BATCH_BYTES per
            // system call.
            let mut batch_bytes = 0usize;
            let batch_limit = if lent.is_empty() {
                usize::MAX
            } else {
                LENT_BATCH_BYTES
            };
            // Lay out at most TX_BYTES of copies and 1024 datagrams per socket and system call.
            while !full {
                let posted = &entry.posted;
                let Some(t) = entry
                    .core
                    .poll_transmit_lending(now, &mut self.header, |token| {
                        lender(lent, posted, token)
                    })
                else {
                    more = false;
                    break;
                };
                let path = t.path.min(sockets.len() - 1);
                let to = entry.paths.get(path).copied().unwrap_or(entry.to);
                batch_bytes += t.payload.len();
                match &mut sockets[path] {
                    Socket::Mem(socket) => {
                        let _ = socket.send(to, &self.header[..t.header_len], t.payload);
                    }
                    Socket::Udp(io) => {
                        let offset = io.tx.len();
                        io.tx.extend_from_slice(&self.header[..t.header_len]);
                        match t.stream_offset {
                            Some(stream_offset) if t.payload.len() >= in_place_min => {
                                io.tx_out.push(TxEntry::InPlace {
                                    offset,
                                    header_len: t.header_len,
                                    stream_offset,
                                    payload_len: t.payload.len(),
                                });
                            }
                            _ => {
                                io.tx.extend_from_slice(t.payload);
                                io.tx_out.push(TxEntry::Copied {
                                    offset,
                                    len: t.header_len + t.payload.len(),
                                });
                            }
                        }
                        let alone = first
                            && match io.tx_out.last() {
                                Some(TxEntry::Copied { .. }) => true,
                                // A payload in place goes at once only when no data follows
                                // it (the answer, not the first frame of a stream).
                                _ => !entry.core.data_waiting(),
                            };
                        if alone {
                            // Sent before asking for more (see above). A short payload in
                            // place is copied next to its header first: one `send` costs less
                            // than a gathered `sendmmsg` (LONE_COPY_MAX_BYTES).
                            if let Some(&TxEntry::InPlace {
                                offset,
                                header_len,
                                stream_offset,
                                payload_len,
                            }) = io.tx_out.last()
                            {
                                let posted = &entry.posted;
                                let payload = (payload_len <= LONE_COPY_MAX_BYTES)
                                    .then(|| {
                                        entry.core.payload_at_lending(
                                            stream_offset,
                                            payload_len,
                                            |token| lender(lent, posted, token),
                                        )
                                    })
                                    .flatten();
                                if let Some(payload) = payload {
                                    io.tx.extend_from_slice(payload);
                                    io.tx_out.pop();
                                    io.tx_out.push(TxEntry::Copied {
                                        offset,
                                        len: header_len + payload_len,
                                    });
                                }
                            }
                            io.send_for(entry, path, to, lent);
                            io.tx.clear();
                            io.tx_out.clear();
                        }
                        first = false;
                        full = io.tx.len() >= TX_BYTES
                            || io.tx_out.len() >= 1024
                            || batch_bytes >= batch_limit;
                    }
                }
            }
            for (path, socket) in sockets.iter_mut().enumerate() {
                if let Socket::Udp(io) = socket {
                    if !io.tx_out.is_empty() {
                        let to = entry.paths.get(path).copied().unwrap_or(entry.to);
                        io.send_for(entry, path, to, lent);
                    }
                }
            }
            if !more {
                break;
            }
        }
    }

    /// Hands one received datagram to its connection (or opens one for a Hello).
    /// `path` is the index of the socket it arrived on.
    #[allow(clippy::too_many_arguments)] // One datagram and where it came from; no grouping helps.
    fn dispatch(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        path: usize,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
    ) {
        match frame::destination(datagram) {
            Some(Destination::Id(0)) => {
                if let Some(id) = self.accept(from, path, datagram, now, ctx, shared) {
                    touched.push(id);
                }
            }
            Some(Destination::Short(short)) => {
                // A Stream frame (bulk data): its connection verifies it against its full id.
                if let Some((id, entry)) = self.conns.get_mut_short(short) {
                    Reader::feed(reader, id, entry, now, path, datagram);
                    touched.push(id);
                }
            }
            Some(Destination::Id(id)) => {
                if let Some(entry) = self.conns.get_mut(&id) {
                    // A socket beyond the connection's paths (a peer with fewer links): the
                    // core counts and drops it.
                    Reader::feed(reader, id, entry, now, path, datagram);
                    touched.push(id);
                } else if let Some(n) = reset_for(datagram, &mut self.header) {
                    // A stale connection (we forgot it) or a forged id: tell the sender.
                    match &mut self.sockets[path] {
                        Socket::Mem(s) => {
                            let _ = s.send(from, &self.header[..n], &[]);
                        }
                        Socket::Udp(io) => {
                            let _ = io.socket.send_batch(&[OutDatagram::new(
                                from,
                                &self.header[..n],
                                &[],
                            )]);
                        }
                    }
                }
            }
            None => {}
        }
    }

    /// Reads what reached the sending sockets of connection `id` (Resets; see [`Sender`])
    /// and dispatches it.
    fn drain_senders(
        &mut self,
        id: u64,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
    ) {
        let paths = self.conns.get(&id).map_or(0, |e| e.senders.len());
        let mut rx = std::mem::take(&mut self.rx);
        for path in 0..paths {
            for _ in 0..RECV_BATCH {
                let got = match self.conns.get(&id).and_then(|e| e.senders.get(path)) {
                    Some(Sender::Connected(socket)) => socket.recv_from(&mut rx),
                    _ => break,
                };
                let Ok((n, from)) = got else {
                    break;
                };
                self.dispatch(&rx[..n], from, path, now, ctx, shared, touched, &mut None);
            }
        }
        self.rx = rx;
    }

    /// Takes what socket `path` has (at most [`RECV_BATCH`] datagrams, and for udp about
    /// `budget` bytes: datagrams are asked for only while they fit, at least one) and
    /// dispatches it. Returns the udp bytes taken (0 for mem).
    #[allow(clippy::too_many_arguments)] // dispatch's, less the datagram.
    fn receive(
        &mut self,
        path: usize,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
        budget: usize,
    ) -> usize {
        match &self.sockets[path] {
            Socket::Mem(_) => {
                for _ in 0..RECV_BATCH {
                    let Socket::Mem(socket) = &self.sockets[path] else {
                        unreachable!()
                    };
                    let mut rx = std::mem::take(&mut self.rx);
                    let (n, from) = match socket.recv(&mut rx) {
                        Ok(Some(x)) => x,
                        Ok(None) | Err(_) => {
                            self.rx = rx;
                            break;
                        }
                    };
                    self.dispatch(&rx[..n], from, path, now, ctx, shared, touched, reader);
                    self.rx = rx;
                }
                0
            }
            Socket::Udp(_) => {
                let mut taken = 0;
                let mut bytes = 0usize;
                let scatter_min = if self.sockets.len() == 1 {
                    self.scatter_min
                } else {
                    0
                };
                while taken < RECV_BATCH && bytes < budget {
                    let Socket::Udp(io) = &mut self.sockets[path] else {
                        unreachable!()
                    };
                    let Some(mut rx) = io.rx.take() else {
                        break;
                    };
                    if let Some(split) = Self::split_room(&self.conns, reader, scatter_min) {
                        // A scattering receive: the payload of the frame that continues the
                        // message goes straight into the reader's buffer.
                        let got = self
                            .receive_split(path, &mut rx, split, now, ctx, shared, touched, reader);
                        if let Socket::Udp(io) = &mut self.sockets[path] {
                            io.rx = Some(rx);
                        }
                        match got {
                            Some(n) => {
                                bytes += n;
                                taken += 1;
                                continue;
                            }
                            None => break,
                        }
                    }
                    // One datagram at a time until one arrives, then a batch while they fill
                    // it: a receive of one returns as soon as it has it, where a batch would
                    // look at the empty queue once more first (the ping-pong case).
                    let asked = if io.rx_wide {
                        // As many as fit the budget if they are as long as the last one (at
                        // least one per call).
                        let room = (budget - bytes) / io.rx_last_bytes.max(1);
                        let room = if taken == 0 { room.max(1) } else { room };
                        RX_MESSAGES.min(RECV_BATCH - taken).min(room)
                    } else {
                        1
                    };
                    if asked == 0 {
                        io.rx = Some(rx);
                        break;
                    }
                    let got = if asked == 1 {
                        io.socket.recv_one(&mut rx)
                    } else {
                        io.socket.recv_batch_up_to(&mut rx, asked)
                    }
                    .unwrap_or(0);
                    io.rx_wide = got == asked;
                    if got > 0 {
                        io.rx_last_bytes = rx.message(got - 1).data.len();
                    }
                    io.steer_gro(&rx, got);
                    // A single large datagram is most likely part of a stream: read on.
                    let streaming =
                        asked == 1 && got == 1 && rx.message(0).data.len() >= STREAM_DATAGRAM_BYTES;
                    for m in 0..got {
                        let msg = rx.message(m);
                        if msg.truncated {
                            continue;
                        }
                        bytes += msg.data.len();
                        for datagram in msg.datagrams() {
                            self.dispatch(
                                datagram, msg.source, path, now, ctx, shared, touched, reader,
                            );
                        }
                    }
                    if let Socket::Udp(io) = &mut self.sockets[path] {
                        io.rx = Some(rx);
                    }
                    taken += got;
                    // A single small datagram goes to the application first, and so does a
                    // large one that completed a message (an answer of 1400 B or more): the
                    // next poll asks for a batch.
                    let completed = streaming
                        && touched
                            .last()
                            .and_then(|id| self.conns.get(id))
                            .is_some_and(|entry| entry.core.message_ready());
                    if got < asked || (asked == 1 && (!streaming || completed)) {
                        break;
                    }
                }
                bytes
            }
        }
    }

    /// The room for a scattering receive ([`Engine::receive_split`]): with one socket and
    /// a reader whose connection has at least `scatter_min` (not 0) of the message's next
    /// bytes to receive straight into its buffer (`ReliableConnection::in_place_room`),
    /// how many.
    fn split_room(
        conns: &ConnTable,
        reader: &Option<Reader<'_>>,
        scatter_min: usize,
    ) -> Option<usize> {
        let r = reader.as_ref().filter(|_| scatter_min > 0)?;
        let room = conns.get(&r.id)?.core.in_place_room(r.out.len() - r.placed);
        (room >= scatter_min).then_some(room)
    }

    /// Receives one datagram from socket `path` with its first [`STREAM_HEADER_LEN`] bytes
    /// apart and the next `room` straight into the reader's buffer, where the payload of the
    /// Stream frame that continues its message belongs; the connection takes such a frame
    /// there (`ReliableConnection::handle_stream_in_place`), with no copy. Anything else
    /// is put back together and dispatched as usual. Returns the bytes received, or None
    /// when nothing was queued (or the receive failed).
    #[allow(clippy::too_many_arguments)] // receive's.
    fn receive_split(
        &mut self,
        path: usize,
        rx: &mut RecvBatch,
        room: usize,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
    ) -> Option<usize> {
        let Socket::Udp(io) = &mut self.sockets[path] else {
            return None;
        };
        let r = reader.as_mut()?;
        let mut head = [0u8; STREAM_HEADER_LEN];
        let body = &mut r.out[r.placed..r.placed + room];
        match io.socket.recv_split(rx, &mut head, body).ok()? {
            SplitRecv::Nothing => None,
            SplitRecv::Split { body_len, source } => {
                let id = r.id;
                let out = &mut r.out[r.placed..];
                let in_place = self.conns.get_mut(&id).and_then(|entry| {
                    entry
                        .core
                        .handle_stream_in_place(now, path, &head, body_len, out)
                });
                if let Some(n) = in_place {
                    r.placed += n;
                    touched.push(id);
                } else {
                    // Back together, and the usual way.
                    let mut whole = std::mem::take(&mut self.rx);
                    whole[..STREAM_HEADER_LEN].copy_from_slice(&head);
                    whole[STREAM_HEADER_LEN..STREAM_HEADER_LEN + body_len]
                        .copy_from_slice(&out[..body_len]);
                    let len = STREAM_HEADER_LEN + body_len;
                    self.dispatch(
                        &whole[..len],
                        source,
                        path,
                        now,
                        ctx,
                        shared,
                        touched,
                        reader,
                    );
                    self.rx = whole;
                }
                Some(STREAM_HEADER_LEN + body_len)
            }
            SplitRecv::Whole => {
                let msg = rx.message(0);
                if msg.truncated {
                    return Some(msg.data.len());
                }
                for datagram in msg.datagrams() {
                    self.dispatch(
                        datagram, msg.source, path, now, ctx, shared, touched, reader,
                    );
                }
                Some(msg.data.len())
            }
        }
    }

    fn poll(&mut self, ctx: Option<&LocalRank>, shared: &DgramShared) {
        self.poll_into(ctx, shared, &mut None, RECV_BUDGET_BYTES, None);
    }

    /// [`Engine::poll`], with a receive in the middle of a message that takes the datagrams
    /// continuing it straight into its buffer, receiving about `budget` bytes at most from
    /// the udp sockets together.
    ///
    /// The order is the latency path's (docs/PERFORMANCE.md, issue 3, "udp latency path"):
    /// receive, hand what arrived to its connections and endpoints, and only then the
    /// housekeeping (timers, retired connections). When everything that arrived is a
    /// message waiting for the application, whose answer should leave next, the
    /// housekeeping waits for the next poll (which runs it whatever it receives, so it is
    /// never put off twice in a row).
    ///
    /// `lender`: a connection sending a message in place, and that message
    /// ([`DgramShared::send_in_place`]): its flushes send lent bytes too.
    fn poll_into(
        &mut self,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        reader: &mut Option<Reader<'_>>,
        budget: usize,
        lender: Lender<'_>,
    ) {
        // Acks held back for the application's answer: it has answered (and its message
        // carried them) or not; whatever is left goes now. Popped, not taken: the list
        // keeps its allocation.
        while let Some(id) = self.deferred.pop() {
            self.flush_lent(id, lent_of(lender, id));
        }
        let now = self.now();
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        // With several links, receive only on the sockets with something to take (one
        // epoll_wait instead of a recvmmsg on each; a striped sender's acks come on few).
        let ready = match &shared.readiness {
            Some(set) => set.ready_now().unwrap_or(u64::MAX),
            None => u64::MAX,
        };
        // The budget is for all sockets together (a striped receive in the middle of a
        // message asks for what the message still needs: taken from every socket, most of
        // it would be the next message's, through the receive window), and the socket
        // after the last one served goes first, so that every link gets its turn.
        let count = self.sockets.len();
        let first = if count > 1 {
            self.next_socket % count
        } else {
            0
        };
        let mut left = budget;
        for k in 0..count {
            let path = if first + k < count {
                first + k
            } else {
                first + k - count
            };
            let idle = path < 64 && ready & (1 << path) == 0;
            if idle && matches!(self.sockets[path], Socket::Udp(_)) {
                continue;
            }
            if left == 0 {
                break;
            }
            let taken = self.receive(path, now, ctx, shared, &mut touched, reader, left);
            left = left.saturating_sub(taken);
            self.next_socket = path + 1;
        }
        let mut all_waiting = true;
        if !touched.is_empty() {
            self.news += 1;
            if touched.len() > 1 {
                touched.sort_unstable();
                touched.dedup();
            }
            for &id in &touched {
                // Hold the ack back for the application's answer only when a whole message
                // is there for it to take (a partial one needs more frames first, so no
                // answer comes), and only for a small exchange: a stream of frames needs its
                // acks now (the sender's windows wait for them).
                // (`message_ready` is false when no message has begun.)
                let waiting = self.conns.get(&id).is_some_and(|e| {
                    e.core.message_ready() && e.core.unacknowledged_frames() <= DEFER_ACK_MAX_FRAMES
                });
                if waiting {
                    self.defer(id);
                } else {
                    all_waiting = false;
                    self.flush_lent(id, lent_of(lender, id));
                }
                self.settle(id, ctx, shared);
            }
            // Their timers moved.
            self.timers_dirty = true;
        }
        self.touched = touched;
        if !self.touched.is_empty() && all_waiting && !self.housekeeping_owed {
            self.housekeeping_owed = true;
            return;
        }
        self.housekeeping_owed = false;
        self.housekeeping(now, ctx, shared, lender);
    }

    /// The part of a poll off the latency path: runs the protocol timers that are due (or
    /// may have moved), sends what they produced, and forgets the connections given up and
    /// done. A poll that finds nothing to do reads no connection.
    fn housekeeping(
        &mut self,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        lender: Lender<'_>,
    ) {
        let scan = self.timers_dirty || self.next_timer.is_some_and(|t| t <= now);
        if !scan {
            return;
        }
        self.timers_dirty = false;
        let mut expired = std::mem::take(&mut self.touched);
        expired.clear();
        let mut timed_out = std::mem::take(&mut self.timed_out);
        for (&id, entry) in self.conns.iter_mut() {
            if let Some(t) = entry.core.poll_timeout() {
                if t <= now {
                    let before = entry.core.stats().rto_expirations;
                    entry.core.handle_timeout(now);
                    expired.push(id);
                    let stats = entry.core.stats();
                    if stats.rto_expirations != before {
                        tracing::debug!(peer = %entry.peer, to = %entry.to, retransmits = stats.retransmits, timeouts = stats.rto_expirations, "retransmission timeout: resending what is unacknowledged");
                        timed_out.push(id);
                    }
                }
            }
        }
        // A peer that forgot a connection answers its datagrams with a Reset, to the port
        // they came from: the connection's sending sockets.
        for id in timed_out.drain(..) {
            self.drain_senders(id, now, ctx, shared, &mut expired);
        }
        self.timed_out = timed_out;
        if !expired.is_empty() {
            self.news += 1;
            expired.sort_unstable();
            expired.dedup();
        }
        for &id in &expired {
            self.flush_lent(id, lent_of(lender, id));
            self.settle(id, ctx, shared);
        }
        self.touched = expired;
        self.next_timer = self.earliest_timer();
        let retired = &mut self.retired;
        self.conns.retain(|_, e| {
            let keep = !(e.abandoned && matches!(e.core.state(), State::Closed | State::Failed));
            if !keep {
                retired.add(e.core.stats());
            }
            keep
        });
    }

    /// A datagram for connection id 0: a Hello from a stranger, answered if it proves
    /// membership of the job and names an open endpoint.
    fn accept(
        &mut self,
        from: SocketAddr,
        path: usize,
        datagram: &[u8],
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
    ) -> Option<u64> {
        let parsed = frame::Frame::parse(datagram).ok()?;
        let their_id = parsed.header().src_id;
        // The claimed rank picks the peer's links; the handshake then proves membership.
        let their_rank = Hello::new_checked(parsed.payload()).map_or(u32::MAX, |h| h.src_rank());
        if let Some(&id) = self.hellos.get(&(their_rank, their_id)) {
            // A retransmitted Hello (on any link): the connection exists; let it answer again.
            if let Some(entry) = self.conns.get_mut(&id) {
                entry.core.handle_datagram(now, path, datagram);
            }
            return Some(id);
        }
        let paths = self.peer_paths(their_rank, from);
        if path >= paths.len() {
            // A link the two ranks do not share: not a way to open a connection.
            return None;
        }
        let id = self.fresh_id();
        let config = self.config_for(&from, paths.len());
        let (mut core, request) = match ReliableConnection::accept(
            config,
            shared.key.clone(),
            shared.job_id,
            datagram,
            path,
            id,
            random(),
            now,
        ) {
            Ok(x) => x,
            Err(e) => {
                if let Some(ctx) = ctx {
                    ctx.registry
                        .refused(format!("{} from {from}: {e}", shared.kind));
                }
                return None;
            }
        };
        let open = ctx.is_some_and(|c| {
            request.src_rank < c.size && c.registry.inbox(request.dst_port).is_some()
        });
        // Both ends connecting at the same moment: one connection carries both directions,
        // the one the lower address opened; the other end uses it once it arrives there.
        let peer = Addr::new(request.src_rank, request.src_port);
        let crossed = ctx.is_some_and(|c| Addr::new(c.rank, request.dst_port) < peer)
            && self.conns.values().any(|e| {
                !e.inbound
                    && !e.abandoned
                    && e.local_port == request.dst_port
                    && e.peer == peer
                    && e.status == Status::Connecting
            });
        if !open {
            core.reject(RejectReason::NoSuchEndpoint);
        } else if crossed {
            core.reject(RejectReason::Busy);
        }
        self.hellos.insert((request.src_rank, their_id), id);
        self.conns.insert(
            id,
            Entry {
                core,
                to: from,
                paths,
                local_port: request.dst_port,
                peer: Addr::new(request.src_rank, request.src_port),
                inbound: true,
                status: Status::Connecting,
                abandoned: !open || crossed,
                senders: Vec::new(),
                peer_sent: false,
                posted: VecDeque::new(),
                reads: PostedReads::default(),
            },
        );
        Some(id)
    }

    /// Turns the protocol's events of connection `id` into its status.
    fn settle(&mut self, id: u64, ctx: Option<&LocalRank>, shared: &DgramShared) {
        let Some(entry) = self.conns.get_mut(&id) else {
            return;
        };
        while let Some(event) = entry.core.poll_event() {
            match event {
                Event::Established => {
                    entry.status = Status::Open;
                    if entry.inbound && !entry.abandoned {
                        match ctx.and_then(|c| c.registry.inbox(entry.local_port)) {
                            Some(ep) => {
                                if let Some(c) = ctx {
                                    c.registry.accepted();
                                }
                                ep.deliver_inbound(NetInbound::Dgram {
                                    peer: entry.peer,
                                    kind: shared.kind,
                                    id,
                                });
                            }
                            None => {
                                // The endpoint closed meanwhile.
                                entry.abandoned = true;
                                entry
                                    .core
                                    .close(monotonic_ns().saturating_sub(self.start_ns));
                            }
                        }
                    }
                }
                Event::PeerUnreachable => {
                    tracing::warn!(peer = %entry.peer, to = %entry.to, idle_ms = self.base.idle_timeout_ns / 1_000_000, "peer unreachable: no answer for the idle timeout");
                    let retry = if entry.status == Status::Connecting {
                        RETRY
                    } else {
                        ""
                    };
                    entry.status = Status::Failed(format!(
                        "{retry}no answer for {} ms (the peer died, froze, or the network is down)",
                        self.base.idle_timeout_ns / 1_000_000
                    ));
                }
                Event::Closed if !matches!(entry.status, Status::Failed(_)) => {
                    entry.status = Status::Closed;
                }
                Event::Failed(reason) => {
                    entry.status = Status::Failed(match reason {
                        FailReason::Rejected(RejectReason::NoSuchEndpoint) => {
                            format!("{RETRY}the endpoint is not open")
                        }
                        FailReason::Rejected(RejectReason::Busy) => CROSSED.into(),
                        FailReason::Handshake(e) => {
                            let why = crate::error::describe_handshake_error(e);
                            if entry.inbound {
                                if let Some(c) = ctx {
                                    c.registry.refused(format!(
                                        "{} from rank {}: {why}",
                                        shared.kind, entry.peer.rank
                                    ));
                                }
                                entry.abandoned = true;
                            }
                            why
                        }
                        FailReason::HandshakeTimeout => {
                            if entry.inbound {
                                // A stranger that could not prove the key goes quiet.
                                if let Some(c) = ctx {
                                    c.registry.refused(format!(
                                        "{} from {}: the handshake was not completed",
                                        shared.kind, entry.to
                                    ));
                                }
                                entry.abandoned = true;
                            }
                            format!("{RETRY}no answer to the handshake")
                        }
                        FailReason::PeerReset => {
                            "the peer reset the connection (it closed it, restarted, or forgot it)"
                                .into()
                        }
                        FailReason::PeerUnreachable => "the peer stopped answering".into(),
                        FailReason::ProtocolViolation => {
                            "the peer broke the protocol; the connection was closed".into()
                        }
                        #[allow(unreachable_patterns)]
                        other => format!("{other:?}"),
                    });
                }
                _ => {}
            }
        }
    }
}
