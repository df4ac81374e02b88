//! The receive path of the datagram engine: taking datagrams from the link sockets (one
//! at a time on the latency path, in batches while they keep coming, within a byte
//! budget), steering GRO, the scattering receive that puts a Stream frame's payload
//! straight into a reader's buffer, and acting on the router's verdict for each datagram
//! (`quiver_proto::router::Router::handle`: feed its connection, keep a connection
//! accepted from a Hello, send a Reset for a stale id, count a refusal).
//!
//! Layer: the datagram transport. It feeds connections' cores; which connection a datagram
//! is for is the router's to say, and what to send in answer and when is the poll loop's
//! (`poll`) and the flush's (`send`) business.

use std::net::SocketAddr;

use quiver_proto::handshake::HandshakeError;
use quiver_proto::reliable::{AcceptError, Nanos};
use quiver_proto::router::{Routed, Router};
use quiver_transport::udp::{OutDatagram, RecvBatch, SplitRecv};
use quiver_wire::frame::STREAM_HEADER_LEN;

use super::connection::{Entry, Sender};
use super::engine::{DgramShared, Engine};
use super::router_host::{accepted_entry, EngineHost};
use super::udp_io::{send_one_fully, Socket, UdpIo, RX_MESSAGES};
use crate::transport::local::LocalRank;
use crate::transport::xdp::link::Arrival;

/// Datagrams taken from the socket per poll at most (bounds the time one poll takes).
pub(super) const RECV_BATCH: usize = 64;
/// Bytes of datagrams one poll takes from a socket at most (about; a batch is asked for
/// only while it fits). A poll that took 64 datagrams of 64 KB (4 MiB) before it acked
/// held the acknowledgements back for milliseconds: streaming 1 MiB messages over loopback,
/// the sender's retransmission timer fired and resent about one frame in seven, all
/// duplicates. Smaller batches also leave the payloads in the cache for their checksum
/// and copy.
pub(super) const RECV_BUDGET_BYTES: usize = 512 << 10;

/// A received datagram at least this long (an Ethernet MTU's worth) is taken for part of a
/// stream: the poll goes on receiving at once instead of handing it over first.
const STREAM_DATAGRAM_BYTES: usize = 1400;
/// A udp socket turns GRO off (when its queue is empty) after this many receives in a row
/// of one short datagram each, and on again at the first long datagram or burst: without
/// GRO a one-datagram receive is a `recvfrom` instead of a `recvmsg` (see
/// [`UdpSocket::recv_one`](quiver_transport::udp::UdpSocket::recv_one)).
const GRO_OFF_AFTER_SHORT_RECEIVES: u32 = 64;

/// A receive in the middle of a message of connection `id`: datagrams that continue it go
/// straight into `out` (`ReliableConnection::handle_datagram_into`), `placed` bytes so far.
pub(super) struct Reader<'a> {
    pub(super) id: u64,
    pub(super) out: &'a mut [u8],
    pub(super) placed: usize,
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
}

impl Engine {
    /// Hands one received datagram to its connection, as the router says (or keeps the
    /// connection it accepted from a Hello, or sends the Reset it made for a stale id).
    /// `path` is the index of the socket it arrived on.
    ///
    /// Per datagram for a known connection: the router's peek at the header and one table
    /// lookup (`Router::handle` is inlined here), then the connection's core. The host is
    /// a few references on the stack, asked only for Hellos.
    #[allow(clippy::too_many_arguments)] // One datagram and where it came from; no grouping helps.
    pub(super) fn dispatch(
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
        let mut host = EngineHost {
            links: &self.links,
            sockets: &self.sockets,
            base: &self.base,
            config_datagram: self.config_datagram,
            network_min_rto_ns: self.network_min_rto_ns,
            ctx,
        };
        match self.router.handle(now, &from, path, datagram, &mut host) {
            Routed::Connection { id, connection } => {
                // A Stream frame names its connection by short id; the core verifies it
                // against the full id. A socket beyond the connection's paths (a peer with
                // fewer links): the core counts and drops the datagram.
                Reader::feed(reader, id, connection, now, path, datagram);
                touched.push(id);
            }
            Routed::RepeatedHello { id, connection } => {
                // A retransmitted Hello (on any link): its connection, if still there,
                // answers it again; it never opens a second one.
                match connection {
                    Some(entry) => entry.core.handle_datagram(now, path, datagram),
                    None => self.refused.stale_hellos += 1,
                }
                touched.push(id);
            }
            Routed::Accepted(accepted) => {
                let paths = self.peer_paths(accepted.request.src_rank, from);
                let (id, entry) = accepted_entry(*accepted, from, paths);
                self.router.insert(id, entry);
                touched.push(id);
            }
            // A stale connection (we forgot it) or a forged id: tell the sender.
            Routed::Reset(reset) => {
                send_answer(&mut self.sockets[path], from, reset);
                self.refused.resets_sent += 1;
            }
            Routed::Refused { error, reply } => {
                // A refusal shorter than the Hello, built without keeping anything.
                if let Some(reply) = reply {
                    send_answer(&mut self.sockets[path], from, reply);
                }
                self.count_refused_hello(&error, from, ctx, shared);
            }
            Routed::Dropped(reason) => self.refused.count(reason),
        }
    }

    /// Counts a Hello the router refused and tells the listeners' counters why. Hellos that
    /// do not prove the key (a stranger's flood) are reported at the 1st, 2nd, 4th, 8th...
    /// only, so a flood costs a counter, not a log line each.
    #[cold]
    fn count_refused_hello(
        &mut self,
        error: &AcceptError,
        from: SocketAddr,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
    ) {
        let report = if matches!(
            error,
            AcceptError::Handshake(HandshakeError::AuthenticationFailed { .. })
        ) {
            self.refused.unproven_hellos += 1;
            self.refused.unproven_hellos.is_power_of_two()
        } else {
            self.refused.refused_hellos += 1;
            true
        };
        if let Some(ctx) = ctx.filter(|_| report) {
            ctx.registry
                .refused(format!("{} from {from}: {error}", shared.kind));
        }
    }

    /// Reads what reached the sending sockets of connection `id` (Resets; see [`Sender`])
    /// and dispatches it. These arrivals do not go through the link's fault injector (a
    /// Reset answers a datagram that got through it).
    pub(super) fn drain_senders(
        &mut self,
        id: u64,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
    ) {
        let paths = self.router.get(id).map_or(0, |e| e.senders.len());
        let mut rx = std::mem::take(&mut self.rx);
        for path in 0..paths {
            for _ in 0..RECV_BATCH {
                let got = match self.router.get(id).and_then(|e| e.senders.get(path)) {
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
    /// dispatches it. Returns the udp or xdp bytes taken (0 for mem). `clock` is the
    /// poll's ([`Engine::now_once`]): read once something arrived (io_uring: always).
    // Long function: the hot receive path (one datagram at a time, or batches while they
    // fill), whose exits decide when a poll hands over; split into helpers, the socket,
    // the batch and the connection table would be borrowed apart across calls.
    // Inline: called once, from `Engine::poll_into` in another file.
    #[allow(clippy::too_many_arguments)] // dispatch's, less the datagram.
    #[inline]
    pub(super) fn receive(
        &mut self,
        path: usize,
        clock: &mut Option<Nanos>,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
        budget: usize,
    ) -> usize {
        match &self.sockets[path] {
            Socket::Mem(_) => {
                for _ in 0..RECV_BATCH {
                    let Socket::Mem(socket) = &mut self.sockets[path] else {
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
                    let now = self.now_once(clock);
                    self.dispatch(&rx[..n], from, path, now, ctx, shared, touched, reader);
                    self.rx = rx;
                }
                0
            }
            Socket::Xdp(_) => {
                let mut bytes = 0;
                for _ in 0..RECV_BATCH {
                    let Socket::Xdp(io) = &mut self.sockets[path] else {
                        unreachable!()
                    };
                    let mut rx = std::mem::take(&mut self.rx);
                    let arrival = io.recv_next(&mut rx);
                    let now = match arrival {
                        Some(_) => self.now_once(clock),
                        None => 0,
                    };
                    match arrival {
                        None => {
                            self.rx = rx;
                            break;
                        }
                        // Read where it arrived: the UMEM frame is the receive buffer.
                        Some(Arrival::InFrame {
                            frame,
                            datagram,
                            from,
                        }) => {
                            self.rx = rx;
                            bytes += datagram.len();
                            let datagram = &frame[datagram];
                            self.dispatch(datagram, from, path, now, ctx, shared, touched, reader);
                            if let Socket::Xdp(io) = &mut self.sockets[path] {
                                io.link.release(frame);
                            }
                        }
                        Some(Arrival::InBuffer { len, from }) => {
                            bytes += len;
                            self.dispatch(
                                &rx[..len],
                                from,
                                path,
                                now,
                                ctx,
                                shared,
                                touched,
                                reader,
                            );
                            self.rx = rx;
                        }
                    }
                    if bytes >= budget {
                        break;
                    }
                }
                // What the dispatches answered (acks, Resets) leaves now.
                if let Socket::Xdp(io) = &mut self.sockets[path] {
                    io.flush();
                }
                bytes
            }
            Socket::Uring(_) => {
                let now = self.now_once(clock);
                self.receive_uring(path, now, ctx, shared, touched, reader, budget)
            }
            Socket::Udp(_) => {
                let mut taken = 0;
                let mut bytes = 0usize;
                let scatter_min = if self.sockets.len() == 1 {
                    self.scatter_min
                } else {
                    0
                };
                let arrivals_faulted = self.faults_on && self.sockets[path].arrivals_faulted();
                while taken < RECV_BATCH && bytes < budget {
                    let Socket::Udp(io) = &mut self.sockets[path] else {
                        unreachable!()
                    };
                    let Some(mut rx) = io.rx.take() else {
                        break;
                    };
                    if let Some(split) = Self::split_room(&self.router, reader, scatter_min) {
                        // A scattering receive: the payload of the frame that continues the
                        // message goes straight into the reader's buffer.
                        let now = self.now_once(clock);
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
                    // (The fault injector may release what it held even when nothing came.)
                    let now = if got > 0 || arrivals_faulted {
                        self.now_once(clock)
                    } else {
                        0
                    };
                    if arrivals_faulted {
                        bytes +=
                            self.receive_faulted(path, &rx, got, now, ctx, shared, touched, reader);
                    } else {
                        for m in 0..got {
                            let msg = rx.message(m);
                            if msg.truncated {
                                self.refused.truncated += 1;
                                continue;
                            }
                            bytes += msg.data.len();
                            for datagram in msg.datagrams() {
                                self.dispatch(
                                    datagram, msg.source, path, now, ctx, shared, touched, reader,
                                );
                            }
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
                            .and_then(|&id| self.router.get(id))
                            .is_some_and(|entry| entry.core.message_ready());
                    if got < asked || (asked == 1 && (!streaming || completed)) {
                        break;
                    }
                }
                bytes
            }
        }
    }

    /// [`Engine::receive`]'s handling of the `got` messages in `rx` when arrivals on socket
    /// `path` go through its fault injector: every datagram goes into it, then what it
    /// lets through is dispatched. Returns the bytes received.
    #[allow(clippy::too_many_arguments)] // receive's.
    fn receive_faulted(
        &mut self,
        path: usize,
        rx: &RecvBatch,
        got: usize,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
    ) -> usize {
        let mut bytes = 0;
        if let Some(faults) = self.sockets[path].faults() {
            for m in 0..got {
                let msg = rx.message(m);
                if msg.truncated {
                    self.refused.truncated += 1;
                    continue;
                }
                bytes += msg.data.len();
                for datagram in msg.datagrams() {
                    faults.receive(msg.source, datagram);
                }
            }
        }
        self.dispatch_arrived(path, now, ctx, shared, touched, reader);
        bytes
    }

    /// Releases what the fault injectors hold back (sent ones leave, arrived ones are
    /// dispatched): at every poll while faults are on, so that nothing waits longer.
    pub(super) fn release_held_faults(
        &mut self,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
    ) {
        for path in 0..self.sockets.len() {
            self.sockets[path].release_held();
            self.dispatch_arrived(path, now, ctx, shared, touched, reader);
        }
    }

    /// Dispatches the datagrams that socket `path`'s fault injector lets through.
    fn dispatch_arrived(
        &mut self,
        path: usize,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
    ) {
        while let Some((from, datagram)) = self.sockets[path].faults().and_then(|f| f.pop_arrived())
        {
            self.dispatch(&datagram, from, path, now, ctx, shared, touched, reader);
        }
    }

    /// The room for a scattering receive ([`Engine::receive_split`]): with one socket and
    /// a reader whose connection has at least `scatter_min` (not 0) of the message's next
    /// bytes to receive straight into its buffer (`ReliableConnection::in_place_room`),
    /// how many.
    fn split_room(
        router: &Router<Entry>,
        reader: &Option<Reader<'_>>,
        scatter_min: usize,
    ) -> Option<usize> {
        let r = reader.as_ref().filter(|_| scatter_min > 0)?;
        let room = router.get(r.id)?.core.in_place_room(r.out.len() - r.placed);
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
                let in_place = self.router.get_mut(id).and_then(|entry| {
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
                    self.refused.truncated += 1;
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
}

/// Sends `reset` (a frame the router made: a Reset, or a Hello's refusal) to `to` from link
/// socket `socket`, through its fault injector when it has one.
fn send_answer(socket: &mut Socket, to: SocketAddr, reset: &[u8]) {
    match socket {
        Socket::Mem(mem) => mem.send(to, reset, &[]),
        Socket::Xdp(io) => {
            io.send(to, reset, &[]);
            io.flush();
        }
        Socket::Uring(io) => {
            io.send(to, reset, &[]);
            io.flush();
        }
        Socket::Udp(io) => {
            let UdpIo { socket, faults, .. } = &mut **io;
            match faults {
                None => {
                    let _ = socket.send_batch(&[OutDatagram::new(to, reset, &[])]);
                }
                Some(faults) => faults.send(to, &[reset], &mut |to, datagram| {
                    send_one_fully(socket, to, datagram)
                }),
            }
        }
    }
}
