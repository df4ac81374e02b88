//! The endpoint's network connections: TCP streams it drives itself, and datagram
//! connections (udp, mem) whose protocol state lives in the context's datagram engine.
//!
//! Connections handed out for the network carry [`NET_BIT`] in their index. Every public
//! operation of [`Endpoint`] dispatches on it; this module implements the network half.
//!
//! One network connection (a tcp stream, a reliable datagram connection) carries both
//! directions of an endpoint pair, so that acknowledgements ride on the answers instead of
//! costing a segment or datagram of their own (docs/PERFORMANCE.md, issue 3):
//! - `connect` first looks for a connection the peer opened to this endpoint and, if there
//!   is one, sends on it ([`NetIn::carries_out`]);
//! - a connection this endpoint opens gets a *reverse* inbound edge at once
//!   ([`NetIn::reverse`]): it stays silent (no errors, not counted by `inbound_count`)
//!   until the peer sends on it, and counts as an accepted connection from then on;
//! - when both ends connect at the same moment, the end with the lower address refuses the
//!   other's attempt with `Busy` (tcp: the listener, `Crossings::begin_accept`; datagrams:
//!   the engine), and the refused end uses the connection it accepted.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use quiver_wire::stream::{StreamHeader, StreamKind, HEADER_LEN};

use super::*;
use crate::config::TransportKind;
use crate::transport::dgram::{DgramTake, RecvDone};
use crate::transport::failure::{io_failure, lost};
use crate::transport::registry::NetInbound;
use crate::transport::tcp::connect as tcp_connect;
use crate::transport::wait::{wait_fd, wait_fds};

/// Marks a [`Connection`] index as a network connection (index into `net_out`).
pub(super) const NET_BIT: u32 = 1 << 31;

/// A send waiting for its turn on a network connection (posted, or the rest of a
/// `try_send` the socket did not take at once).
#[derive(Debug)]
pub(super) struct NetQueued {
    /// The posted request, or None for internal leftovers.
    key: Option<Key>,
    data: Vec<u8>,
    /// Bytes taken by the transport so far (tcp: header included).
    written: usize,
    /// Whether the message has been started in the datagram engine.
    started: bool,
    /// A posted send to be sent in place (`Config::udp_post_in_place_min`): handed to the
    /// datagram engine whole when its turn comes (`DgramShared::post_in_place`).
    in_place: bool,
}

#[derive(Debug)]
pub(super) enum OutLink {
    Tcp(TcpStream),
    Dgram(u64),
}

/// An outbound network edge.
#[derive(Debug)]
pub(super) struct NetOut {
    pub(super) peer: Addr,
    pub(super) kind: TransportKind,
    link: OutLink,
    queue: VecDeque<NetQueued>,
    pub(super) failure: Option<Failure>,
    /// The peer's process, when it runs on this node (tcp): watched for a freeze.
    process: Option<PeerProcess>,
    /// Posted sends handed to the datagram engine in place and not yet released by it:
    /// (token, request). They complete from [`Endpoint::collect_posted_in_place`].
    in_place: Vec<(u64, Key)>,
    /// The token the next posted send in place gets.
    next_token: u64,
}

/// The receiving side of a tcp stream. Messages come out in stream order: first `ready`,
/// then `partial`, then the staged bytes `buf[start..end]`, then the socket.
#[derive(Debug)]
pub(super) struct TcpIn {
    stream: TcpStream,
    /// Staging buffer (`Config::tcp_staging_bytes`): messages that fit are read here and
    /// copied out once whole.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Whole messages read ahead of any receive (while this endpoint waited for a send).
    ready: VecDeque<Vec<u8>>,
    /// The large message being read, once it has started.
    partial: Option<Partial>,
    /// Bytes of `ready` plus a `Held` partial's length: internal copies, bounded by
    /// `Config::max_buffered_bytes` over all edges.
    held_bytes: usize,
    /// Read-ahead stopped here for want of budget: not worth waking up for.
    stalled: bool,
    /// Some bytes arrived (a reverse edge becomes active).
    received_any: bool,
}

/// A large tcp message (more than the staging buffer) being read over several calls.
#[derive(Debug)]
struct Partial {
    /// Payload length.
    len: usize,
    /// Payload bytes received so far.
    filled: usize,
    into: PartialInto,
}

/// Where the bytes of a [`Partial`] go.
#[derive(Debug)]
enum PartialInto {
    /// An internal buffer of `len` bytes: read ahead of any receive, by a non-blocking
    /// receive (which has no buffer that outlives the call), or by a pooled receive (the
    /// buffer is then handed over whole, no copy).
    Held(Vec<u8>),
    /// The buffer of a posted receive (moved out of its request until the message is
    /// whole; its length is unchanged).
    Posted(Key, Vec<u8>),
    /// The buffer of the blocking `recv` in progress (`Endpoint::committed`).
    Caller,
}

#[derive(Debug)]
pub(super) enum InLink {
    Tcp(TcpIn),
    Dgram(u64),
}

/// An inbound network edge.
#[derive(Debug)]
pub(super) struct NetIn {
    pub(super) peer: Addr,
    kind: TransportKind,
    link: InLink,
    state: InboundState,
    /// The peer's process, when it runs on this node (tcp): watched for a freeze.
    process: Option<PeerProcess>,
    /// The edge rides on a connection this endpoint opened: the peer's answers to it.
    reverse: bool,
    /// The peer has sent on the edge (always true for an accepted edge). A reverse edge
    /// that has not is silent: its errors are the outbound edge's, reported there.
    active: bool,
    /// This endpoint's outbound edge to the peer rides on this (accepted) connection.
    carries_out: bool,
}

impl NetIn {
    /// Whether the edge is a reverse edge the peer has not used (yet): its failure or
    /// close ends it without a report. Notices a tcp stream's first bytes.
    fn silent(&mut self) -> bool {
        if !self.active {
            if let InLink::Tcp(tcp) = &self.link {
                self.active = tcp.received_any;
            }
        }
        !self.active
    }

    /// A broken edge's error, once (the edge is done afterwards).
    fn report_broken(&mut self) -> Option<Error> {
        let InboundState::Broken(detail) = &self.state else {
            return None;
        };
        if !self.active {
            self.finish();
            return None;
        }
        let err = Error::Unreachable {
            peer: self.peer,
            transport: self.kind.name(),
            detail: detail.clone(),
        };
        self.finish();
        Some(err)
    }

    /// A stopped peer's error, once (the edge is done afterwards).
    fn report_stopped(&mut self) -> Option<Error> {
        let InboundState::Stopped(stopped_ms) = self.state else {
            return None;
        };
        if !self.active {
            self.finish();
            return None;
        }
        let during = match self.tcp() {
            Some(tcp) if tcp.partial.is_some() => "in the middle of a message",
            _ => "while receiving",
        };
        self.finish();
        Some(Error::PeerStopped {
            peer: self.peer,
            transport: self.kind.name(),
            during,
            stopped_ms,
        })
    }

    /// Marks the edge done and drops what it held.
    fn finish(&mut self) {
        self.state = InboundState::Done;
        if let InLink::Tcp(tcp) = &mut self.link {
            tcp.release();
        }
    }

    /// The tcp side of the edge, if it is one.
    fn tcp(&self) -> Option<&TcpIn> {
        match &self.link {
            InLink::Tcp(tcp) => Some(tcp),
            InLink::Dgram(_) => None,
        }
    }

    /// Whether a posted receive is bound to this edge's message in progress (the edge
    /// then reports its errors to that request).
    fn bound_to_posted(&self) -> bool {
        matches!(
            self.tcp(),
            Some(TcpIn {
                partial: Some(Partial {
                    into: PartialInto::Posted(..),
                    ..
                }),
                ..
            })
        )
    }

    /// Whether the edge still delivers (or has an error to report); a reverse edge only
    /// once the peer has sent on it.
    pub(super) fn is_live(&mut self) -> bool {
        self.state != InboundState::Done && !self.silent()
    }
}

/// Frames (header included) up to this many bytes are copied into one buffer and written
/// with one `send` instead of a gathered `writev` of header and payload: `writev` (iovec
/// import, the vfs write path) costs more than the copy (in-launch quiver/raw-tcp latency,
/// 8 B: 1.06-1.07 -> 1.02-1.04 at 512; 1 KiB: 1.02-1.04 -> 1.00-1.02 at 2048).
/// Larger payloads are still gathered in place, never copied.
const TCP_COALESCE_MAX_BYTES: usize = 2048;

/// Writes what the socket takes of header + data; true when all of it is written.
fn tcp_write(
    stream: &mut TcpStream,
    header: &[u8; HEADER_LEN],
    data: &[u8],
    written: &mut usize,
) -> io::Result<bool> {
    let total = HEADER_LEN + data.len();
    while *written < total {
        let result = if *written == 0 && total <= TCP_COALESCE_MAX_BYTES {
            // A small frame leaves as one contiguous `send`: a gathered write costs the
            // kernel more than copying a few bytes here (see TCP_COALESCE_MAX_BYTES). The
            // buffer is no larger than the frame needs (it is zeroed first).
            if total <= 64 {
                send_copied::<64>(stream, header, data)
            } else if total <= 512 {
                send_copied::<512>(stream, header, data)
            } else {
                send_copied::<TCP_COALESCE_MAX_BYTES>(stream, header, data)
            }
        } else if *written < HEADER_LEN {
            stream.write_vectored(&[IoSlice::new(&header[*written..]), IoSlice::new(data)])
        } else {
            stream.write(&data[*written - HEADER_LEN..])
        };
        match result {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One `send` of `header` and `data` copied into a buffer of `N` bytes (`N` at least
/// their length); returns what the socket took.
fn send_copied<const N: usize>(
    stream: &mut TcpStream,
    header: &[u8; HEADER_LEN],
    data: &[u8],
) -> io::Result<usize> {
    let total = HEADER_LEN + data.len();
    let mut frame = [0u8; N];
    frame[..HEADER_LEN].copy_from_slice(header);
    frame[HEADER_LEN..total].copy_from_slice(data);
    stream.write(&frame[..total])
}

/// Hands more of `data` to an outbound link's transport (the socket for tcp, the protocol's
/// send window for datagrams); true once all of it is taken. `written` and `started` carry
/// the progress between calls.
fn write_link(
    link: &mut OutLink,
    kind: TransportKind,
    engine: Option<&crate::transport::dgram::DgramShared>,
    data: &[u8],
    written: &mut usize,
    started: &mut bool,
) -> std::result::Result<bool, Failure> {
    match link {
        OutLink::Tcp(stream) => {
            let header = StreamHeader::message(data.len() as u64).emit();
            tcp_write(stream, &header, data, written).map_err(|e| io_failure(kind, &e))
        }
        OutLink::Dgram(id) => match engine {
            Some(engine) => engine.write(*id, data, written, started),
            None => Err(lost(kind, "the datagram engine is gone")),
        },
    }
}

/// One non-blocking read into `buf`: Some(n > 0), None when nothing is there.
fn read_some(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match stream.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads what the stream has into `dst[*filled..]`, never waiting; true once `dst` is full.
fn read_into(stream: &mut TcpStream, dst: &mut [u8], filled: &mut usize) -> io::Result<bool> {
    while *filled < dst.len() {
        match read_some(stream, &mut dst[*filled..])? {
            Some(n) => *filled += n,
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// What a failed read on a tcp stream means (`mid`: in the middle of a message).
fn tcp_read_detail(e: &io::Error, mid: bool) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        if mid {
            "the stream ended in the middle of a message".into()
        } else {
            "the stream ended without a close (the peer exited or crashed)".into()
        }
    } else {
        format!("receiving: {e}")
    }
}

/// An internal buffer of exactly `len` bytes for a message, from the pool when it can;
/// an out-of-memory error rather than an abort for an absurd length.
fn held_buffer(pool: &crate::pool::Pool, len: u64) -> Result<Vec<u8>> {
    let mut buf = pool.take(0);
    Dest::Owned(&mut buf).prepare(len)?;
    Ok(buf)
}

/// Binds posted receive `dest` (if it is one) to the large message starting on a tcp
/// edge: its buffer moves into the edge and the request becomes [`RecvState::Bound`].
fn bind_posted(
    dest: &mut Dest<'_>,
    recvs: &mut Slab<RecvState>,
    bound_recvs: &mut usize,
) -> Option<PartialInto> {
    let Dest::Posted { key, buf, bound } = dest else {
        return None;
    };
    *bound = true;
    if let Some(state) = recvs.get_mut(*key) {
        *state = RecvState::Bound;
    }
    *bound_recvs += 1;
    Some(PartialInto::Posted(*key, std::mem::take(*buf)))
}

/// Hands `msg`, a whole message held internally, to `dest` (checked with
/// [`Dest::fits`] first): moved into an owned destination, copied otherwise. Spent
/// buffers go back to the pool.
fn deliver_held(dest: &mut Dest<'_>, msg: Vec<u8>, pool: &crate::pool::Pool) -> Result<usize> {
    let len = msg.len();
    if let Dest::Owned(v) = dest {
        pool.give(std::mem::replace(*v, msg));
    } else {
        dest.prepare(len as u64)?.copy_from_slice(&msg);
        pool.give(msg);
    }
    Ok(len)
}

impl TcpIn {
    /// A TCP inbound stream staging `staging_bytes` (`Config::tcp_staging_bytes`):
    /// messages that fit are received once whole; larger ones are read as they arrive,
    /// straight into the destination when there is one (see [`Endpoint::take_tcp`]).
    fn new(stream: TcpStream, staging_bytes: usize) -> TcpIn {
        TcpIn {
            stream,
            buf: vec![0u8; staging_bytes].into_boxed_slice(),
            start: 0,
            end: 0,
            ready: VecDeque::new(),
            partial: None,
            held_bytes: 0,
            stalled: false,
            received_any: false,
        }
    }

    /// Whether a held (internal) partial message is being read.
    fn holds_partial(&self) -> bool {
        matches!(
            self.partial,
            Some(Partial {
                into: PartialInto::Held(_),
                ..
            })
        )
    }

    /// Drops everything held (the edge is done).
    fn release(&mut self) {
        self.ready.clear();
        self.partial = None;
        self.held_bytes = 0;
    }

    /// Reads more into the staging buffer; false when nothing was there.
    fn fill(&mut self) -> io::Result<bool> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() || self.buf.len() - self.end < HEADER_LEN {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        match read_some(&mut self.stream, &mut self.buf[self.end..])? {
            Some(n) => {
                self.end += n;
                self.received_any = true;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl Endpoint {
    /// Whether `conn` is a network connection.
    pub(super) fn is_net(conn: Connection) -> bool {
        conn.index & NET_BIT != 0
    }

    /// Opens a network connection of `kind` to `peer`.
    pub(super) fn connect_net(&mut self, kind: TransportKind, peer: Addr) -> Result<Connection> {
        // The peer's own connection to us carries our edge too, when there is one.
        if let Some(i) = self.reusable_inbound(kind, peer) {
            return self.send_on_inbound(i);
        }
        let to = self.ctx.addrs[peer.rank as usize];
        let deadline = Instant::now() + self.config.connect_timeout;
        let ctx = self.ctx.clone();
        let staging = self.config.tcp_staging_bytes;
        let (link, pid, reverse) = match kind {
            TransportKind::Tcp => {
                let connected = tcp_connect::connect(&ctx, self.addr, peer, to, deadline, || {
                    if let Some(i) = self.reusable_inbound(kind, peer) {
                        return Ok(Some(i));
                    }
                    // Recorded (for crossed connects) together with the check that
                    // our listener is not accepting the peer's connection right now.
                    if !self.shared.tcp_crossings().claim_connect(peer) {
                        return Err(format!("accepting a connection from {peer} (to be used)"));
                    }
                    // An accept that ended just before the claim has been handed over.
                    Ok(self.reusable_inbound(kind, peer))
                });
                let new = match connected {
                    Ok(tcp_connect::Connected::New(stream, pid)) => stream
                        .try_clone()
                        .map(|reverse| (stream, pid, reverse))
                        .map_err(|e| Error::io("duplicating a tcp stream", e)),
                    Ok(tcp_connect::Connected::Reused(i)) => {
                        self.shared.tcp_crossings().release_connect(peer);
                        return self.send_on_inbound(i);
                    }
                    Err(e) => Err(e),
                };
                // Stays recorded while the connection lives (a crossed connect may reach our
                // listener after ours completed).
                let (stream, pid, reverse) = new.inspect_err(|_| {
                    self.shared.tcp_crossings().release_connect(peer);
                })?;
                (
                    OutLink::Tcp(stream),
                    pid,
                    InLink::Tcp(TcpIn::new(reverse, staging)),
                )
            }
            TransportKind::Udp | TransportKind::Mem => {
                let engine = ctx.dgram.as_ref().ok_or_else(|| {
                    Error::Config(format!("{kind} is not set up in this context"))
                })?;
                match engine.connect(&ctx, self.addr, peer, to, deadline, || {
                    self.reusable_inbound(kind, peer)
                })? {
                    crate::transport::dgram::Connected::New(id) => {
                        (OutLink::Dgram(id), None, InLink::Dgram(id))
                    }
                    crate::transport::dgram::Connected::Reused(i) => {
                        return self.send_on_inbound(i)
                    }
                }
            }
            TransportKind::Shm => unreachable!("shm connections are not network connections"),
        };
        tracing::info!(from = %self.addr, to = %peer, transport = kind.name(), address = %to, "connected");
        // The peer's answers come back on the same connection.
        self.net_in.push(NetIn {
            peer,
            kind,
            link: reverse,
            state: InboundState::Open,
            process: pid.and_then(PeerProcess::open),
            reverse: true,
            active: false,
            carries_out: false,
        });
        Ok(self.add_net_out(peer, kind, link, pid.and_then(PeerProcess::open)))
    }

    /// An accepted inbound edge from `peer` over `kind` that can carry this endpoint's
    /// outbound edge too (adopts what the listener and the engine accepted first).
    fn reusable_inbound(&mut self, kind: TransportKind, peer: Addr) -> Option<usize> {
        if kind != TransportKind::Tcp {
            if let Some(engine) = &self.ctx.dgram {
                engine.poll_io(&self.ctx);
            }
        }
        self.adopt_new_inbound();
        self.net_in.iter().position(|inb| {
            inb.peer == peer
                && inb.kind == kind
                && inb.state == InboundState::Open
                && !inb.reverse
                && !inb.carries_out
        })
    }

    /// Opens the outbound edge to the peer of inbound edge `i` on that edge's connection.
    fn send_on_inbound(&mut self, i: usize) -> Result<Connection> {
        let inb = &mut self.net_in[i];
        let link = match &inb.link {
            InLink::Tcp(tcp) => OutLink::Tcp(
                tcp.stream
                    .try_clone()
                    .map_err(|e| Error::io("duplicating a tcp stream", e))?,
            ),
            InLink::Dgram(id) => OutLink::Dgram(*id),
        };
        inb.carries_out = true;
        let (peer, kind) = (inb.peer, inb.kind);
        let process = inb.process.as_ref().and_then(|p| PeerProcess::open(p.pid));
        tracing::info!(from = %self.addr, to = %peer, transport = kind.name(), "connected (on the peer's connection)");
        Ok(self.add_net_out(peer, kind, link, process))
    }

    /// Registers a new outbound network edge and returns its handle.
    fn add_net_out(
        &mut self,
        peer: Addr,
        kind: TransportKind,
        link: OutLink,
        process: Option<PeerProcess>,
    ) -> Connection {
        let index = self.net_out.len() as u32;
        self.net_out.push(NetOut {
            peer,
            kind,
            link,
            queue: VecDeque::new(),
            failure: None,
            process,
            in_place: Vec::new(),
            next_token: 0,
        });
        let conn = Connection {
            endpoint_id: self.id,
            index: index | NET_BIT,
            peer,
        };
        self.by_peer.insert(peer, conn.index);
        conn
    }

    fn net_index(&self, conn: Connection) -> Result<usize> {
        let idx = (conn.index & !NET_BIT) as usize;
        if conn.endpoint_id != self.id || idx >= self.net_out.len() {
            return Err(Error::InvalidArgument(format!(
                "connection to {} does not belong to endpoint {}",
                conn.peer, self.addr
            )));
        }
        let out = &self.net_out[idx];
        match &out.failure {
            Some(f) => Err(f.to_error(out.peer, "before sending")),
            None => Ok(idx),
        }
    }

    /// Marks network connection `idx` failed, fails its queued requests, returns the error.
    fn fail_net_out(&mut self, idx: usize, failure: Failure, during: &'static str) -> Error {
        let out = &mut self.net_out[idx];
        let peer = out.peer;
        if out.failure.is_none() {
            tracing::warn!(endpoint = %self.addr, %peer, transport = out.kind.name(), failure = ?failure, during, "connection failed");
            if out.kind == TransportKind::Tcp {
                self.shared.tcp_crossings().release_connect(peer);
            }
            out.failure = Some(failure.clone());
            // Posted sends in place: their buffers stay with the engine until the protocol
            // releases them (the connection failed: at once; else when it is forgotten).
            for (_, key) in out.in_place.drain(..) {
                self.pending_sends -= 1;
                if let Some(s) = self.sends.get_mut(key) {
                    *s = SendState::Done(Err(failure.to_error(peer, during)));
                }
            }
            while let Some(q) = out.queue.pop_front() {
                self.pending_sends -= 1;
                match q.key {
                    Some(key) => {
                        if let Some(s) = self.sends.get_mut(key) {
                            *s = SendState::Done(Err(failure.to_error(peer, during)));
                        }
                    }
                    None => self.buffered_bytes -= q.data.len(),
                }
            }
        }
        failure.to_error(peer, during)
    }

    /// Pushes the queue of network connection `idx` as far as the transport takes it now.
    pub(super) fn progress_net_out(&mut self, idx: usize) -> Result<()> {
        let out = &mut self.net_out[idx];
        if let Some(f) = &out.failure {
            return Err(f.to_error(out.peer, "while sending"));
        }
        let kind = out.kind;
        if !out.in_place.is_empty() {
            self.collect_posted_in_place(idx)?;
        }
        loop {
            let out = &mut self.net_out[idx];
            let Some(q) = out.queue.front_mut() else {
                return Ok(());
            };
            let engine = self.ctx.dgram.as_deref();
            if let (true, OutLink::Dgram(id), Some(engine), Some(key)) =
                (q.in_place, &out.link, engine, q.key)
            {
                let token = out.next_token;
                match engine.post_in_place(*id, token, std::mem::take(&mut q.data)) {
                    Ok(None) => {
                        out.next_token += 1;
                        out.in_place.push((token, key));
                        out.queue.pop_front();
                        continue;
                    }
                    Ok(Some(data)) => {
                        q.data = data;
                        return Ok(());
                    }
                    Err(f) => return Err(self.fail_net_out(idx, f, "while sending")),
                }
            }
            let complete = match write_link(
                &mut out.link,
                kind,
                engine,
                &q.data,
                &mut q.written,
                &mut q.started,
            ) {
                Ok(done) => done,
                Err(f) => return Err(self.fail_net_out(idx, f, "while sending")),
            };
            if !complete {
                return Ok(());
            }
            let out = &mut self.net_out[idx];
            if let Some(q) = out.queue.pop_front() {
                self.pending_sends -= 1;
                match q.key {
                    Some(key) => {
                        if let Some(s) = self.sends.get_mut(key) {
                            *s = SendState::Done(Ok(q.data));
                        }
                    }
                    None => {
                        self.buffered_bytes -= q.data.len();
                        self.pool.give(q.data);
                    }
                }
            }
        }
    }

    /// Blocking send on a network connection: returns once the transport took the whole
    /// message (the socket buffer for tcp, the protocol's send window for datagrams).
    pub(super) fn net_send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        let idx = self.net_index(conn)?;
        let (mut written, mut started) = (0, false);
        let out = &mut self.net_out[idx];
        if let (OutLink::Tcp(stream), true) = (&mut out.link, out.queue.is_empty()) {
            if HEADER_LEN + data.len() <= TCP_COALESCE_MAX_BYTES {
                // The latency path: nothing queued ahead, and one `send` of the whole
                // frame usually does it. What the socket did not take, the loop below
                // waits for and writes on from `written`.
                let header = StreamHeader::message(data.len() as u64).emit();
                match tcp_write(stream, &header, data, &mut written) {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(e) => {
                        let failure = io_failure(out.kind, &e);
                        return Err(self.fail_net_out(idx, failure, "while sending"));
                    }
                }
            }
        }
        let mut wait = Wait::new(&self.config);
        while !self.net_out[idx].queue.is_empty() {
            self.progress_net_out(idx)?;
            if self.net_out[idx].queue.is_empty() {
                break;
            }
            self.wait_net_out(idx, &mut wait, "flushing earlier sends")?;
        }
        let kind = self.net_out[idx].kind;
        let in_place_min = self.config.udp_send_in_place_min;
        if let OutLink::Dgram(id) = self.net_out[idx].link {
            let pays = |engine: &crate::transport::dgram::DgramShared| {
                engine.in_place_pays(id, data.len())
            };
            if in_place_min > 0
                && data.len() >= in_place_min
                && self.ctx.dgram.as_deref().is_some_and(pays)
            {
                return self.net_send_in_place(idx, id, data, &mut wait);
            }
        }
        loop {
            let out = &mut self.net_out[idx];
            let engine = self.ctx.dgram.as_deref();
            let done = write_link(
                &mut out.link,
                kind,
                engine,
                data,
                &mut written,
                &mut started,
            );
            match done {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    self.wait_net_out(idx, &mut wait, "waiting for the peer to take data")?
                }
                Err(f) => return Err(self.fail_net_out(idx, f, "while sending")),
            }
        }
    }

    /// The blocking send of a large message on datagram connection `id` (edge `idx`, its
    /// queue empty): sent from `data` in place (`DgramShared::send_in_place`); returns once
    /// no byte of `data` is lent to the protocol any more.
    fn net_send_in_place(
        &mut self,
        idx: usize,
        id: u64,
        data: &[u8],
        wait: &mut Wait,
    ) -> Result<()> {
        let Some(engine) = self.ctx.dgram.clone() else {
            let failure = lost(self.net_out[idx].kind, "the datagram engine is gone");
            return Err(self.fail_net_out(idx, failure, "while sending"));
        };
        let mut progress = crate::transport::dgram::InPlace::default();
        loop {
            let step = match engine.send_in_place(&self.ctx, id, data, &mut progress) {
                Ok(true) => return Ok(()),
                // `send_in_place` polled the engine.
                Ok(false) => {
                    self.engine_polled = true;
                    self.wait_net_out_polled(idx, wait, "waiting for the peer to take data")
                }
                Err(f) => Err(self.fail_net_out(idx, f, "while sending")),
            };
            if let Err(e) = step {
                // `data` goes back to the caller: the connection must not need it.
                engine.end_in_place(id, data);
                return Err(e);
            }
        }
    }

    /// Non-blocking send on a network connection: the message is taken whole or not at all
    /// (a rest the socket did not take is kept in an internal copy and sent by progress).
    pub(super) fn net_try_send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        let idx = self.net_index(conn)?;
        if !self.net_out[idx].queue.is_empty() {
            self.progress_net_out(idx)?;
            if !self.net_out[idx].queue.is_empty() {
                return Err(Error::WouldBlock);
            }
        }
        let kind = self.net_out[idx].kind;
        let out = &mut self.net_out[idx];
        let (mut written, mut started) = (0, false);
        let engine = self.ctx.dgram.as_deref();
        if let (OutLink::Dgram(id), Some(engine)) = (&out.link, engine) {
            if !engine.can_take(*id, data.len()) {
                return Err(Error::WouldBlock);
            }
        }
        let done = write_link(
            &mut out.link,
            kind,
            engine,
            data,
            &mut written,
            &mut started,
        );
        match done {
            Ok(true) => Ok(()),
            Ok(false) if written == 0 && !started => Err(Error::WouldBlock),
            Ok(false) => {
                // Part of the message is on its way: the rest must follow.
                let mut copy = self.pool.take(data.len());
                copy.copy_from_slice(data);
                self.buffered_bytes += copy.len();
                self.pending_sends += 1;
                self.net_out[idx].queue.push_back(NetQueued {
                    key: None,
                    data: copy,
                    written,
                    started,
                    in_place: false,
                });
                Ok(())
            }
            Err(f) => Err(self.fail_net_out(idx, f, "while sending")),
        }
    }

    /// Completes the posted sends in place of edge `idx` whose buffers the datagram engine
    /// released: acknowledged (the buffer goes back with the request), or the connection
    /// failed (the request fails, and so does the edge).
    fn collect_posted_in_place(&mut self, idx: usize) -> Result<()> {
        let (OutLink::Dgram(id), Some(engine)) = (&self.net_out[idx].link, &self.ctx.dgram) else {
            return Ok(());
        };
        let mut done = Vec::new();
        engine.collect_posted(*id, &mut done);
        let out = &mut self.net_out[idx];
        let (peer, kind) = (out.peer, out.kind);
        let mut failed = false;
        for (token, data, delivered) in done {
            let Some(position) = out.in_place.iter().position(|&(t, _)| t == token) else {
                continue;
            };
            let (_, key) = out.in_place.swap_remove(position);
            self.pending_sends -= 1;
            let result = if delivered {
                Ok(data)
            } else {
                failed = true;
                let failure = lost(
                    kind,
                    "the connection failed before the message was acknowledged",
                );
                Err(failure.to_error(peer, "while sending"))
            };
            if let Some(s) = self.sends.get_mut(key) {
                *s = SendState::Done(result);
            }
        }
        if failed {
            let failure = lost(kind, "the connection failed");
            return Err(self.fail_net_out(idx, failure, "while sending"));
        }
        Ok(())
    }

    /// Posted send on a network connection. On a datagram connection a message of at least
    /// `Config::udp_post_in_place_min` bytes is sent in place: its buffer goes to the
    /// engine and the protocol reads its frames from it (retransmissions included) until
    /// every byte is acknowledged; only then does the request complete.
    pub(super) fn net_post_send(&mut self, conn: Connection, data: Vec<u8>) -> Result<SendRequest> {
        let idx = self.net_index(conn)?;
        let key = self.sends.insert(SendState::Pending);
        let in_place_min = self.config.udp_post_in_place_min;
        let in_place = in_place_min > 0
            && data.len() >= in_place_min
            && matches!(self.net_out[idx].link, OutLink::Dgram(_));
        self.net_out[idx].queue.push_back(NetQueued {
            key: Some(key),
            data,
            written: 0,
            started: false,
            in_place,
        });
        self.pending_sends += 1;
        // Failures are recorded in the request.
        let _ = self.progress_net_out(idx);
        Ok(SendRequest { key })
    }

    /// One step of waiting for a network connection to take more data. Meanwhile the
    /// endpoint receives what it can (the peer may be blocked sending to us): posted
    /// receives advance, and tcp edges are read ahead within `max_buffered_bytes`.
    fn wait_net_out(&mut self, idx: usize, wait: &mut Wait, what: &'static str) -> Result<()> {
        // Acknowledgements (and credit) arrive through the engine: take them every round.
        if let Some(engine) = &self.ctx.dgram {
            engine.poll_io(&self.ctx);
            self.engine_polled = true;
        }
        self.wait_net_out_polled(idx, wait, what)
    }

    /// [`Self::wait_net_out`] for a caller that has just polled the datagram engine.
    fn wait_net_out_polled(
        &mut self,
        idx: usize,
        wait: &mut Wait,
        what: &'static str,
    ) -> Result<()> {
        self.progress()?;
        self.tcp_read_ahead();
        let spin = self.config.spin;
        let detect = self.config.detect;
        let out = &mut self.net_out[idx];
        match &out.link {
            OutLink::Tcp(stream) => {
                self.pollfds.clear();
                self.pollfds.push(libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
                push_tcp_readable(&self.net_in, &mut self.pollfds);
                let process = &mut out.process;
                let detection = &mut self.detection;
                let mut stopped = None;
                let waited = wait_fds(
                    &mut self.pollfds,
                    || SLEEP_SLICE,
                    wait,
                    spin,
                    what,
                    || {
                        stopped = stopped_for(process, detect, detection);
                        stopped.is_none()
                    },
                );
                if let Some(ms) = stopped {
                    return Err(self.fail_net_out(idx, Failure::Stopped("tcp", ms), what));
                }
                waited
            }
            OutLink::Dgram(_) => {
                let engine = self
                    .ctx
                    .dgram
                    .as_ref()
                    .expect("dgram connections need the engine");
                wait_fd(
                    engine.raw_fd(),
                    libc::POLLIN,
                    || engine.timeout_within(SLEEP_SLICE),
                    wait,
                    spin,
                    what,
                    || true,
                )
            }
        }
    }

    /// Notices stopped peer processes of tcp edges (see [`Endpoint::check_liveness`]):
    /// inbound edges report once their staged messages are taken; outbound edges with
    /// queued sends fail them.
    pub(super) fn check_net_liveness(&mut self, now: Instant) {
        let Some(detect) = self.config.detect else {
            return;
        };
        for inb in &mut self.net_in {
            if inb.state != InboundState::Open || inb.silent() {
                continue;
            }
            if let Some(ms) = inb.process.as_mut().and_then(|p| p.stopped(detect, now)) {
                tracing::warn!(endpoint = %self.addr, peer = %inb.peer, transport = inb.kind.name(), stopped_ms = ms, "peer stopped");
                inb.state = InboundState::Stopped(ms);
            }
        }
        for idx in 0..self.net_out.len() {
            let out = &mut self.net_out[idx];
            if out.failure.is_some() || out.queue.is_empty() {
                continue;
            }
            if let Some(ms) = out.process.as_mut().and_then(|p| p.stopped(detect, now)) {
                self.fail_net_out(idx, Failure::Stopped("tcp", ms), "while sending");
            }
        }
    }

    /// Adopts a network edge the context accepted for this endpoint.
    pub(super) fn adopt_net(&mut self, inbound: NetInbound) {
        // A new edge may have messages already.
        self.dgram_seen = None;
        match inbound {
            NetInbound::Tcp { peer, stream, pid } => self.net_in.push(NetIn {
                peer,
                kind: TransportKind::Tcp,
                link: InLink::Tcp(TcpIn::new(stream, self.config.tcp_staging_bytes)),
                state: InboundState::Open,
                process: pid.and_then(PeerProcess::open),
                reverse: false,
                active: true,
                carries_out: false,
            }),
            NetInbound::Dgram { peer, kind, id } => self.net_in.push(NetIn {
                peer,
                kind,
                link: InLink::Dgram(id),
                state: InboundState::Open,
                process: None,
                reverse: false,
                active: true,
                carries_out: false,
            }),
        }
    }

    /// Looks once at every inbound network edge (round robin) for a message for `dest`.
    /// Inside a blocking `recv` that has begun a large tcp message, only at that edge.
    pub(super) fn poll_net(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
    ) -> Result<Option<(usize, Addr)>> {
        let mut news = None;
        if let Some(engine) = &self.ctx.dgram {
            // A blocking receive takes the rest of a large message straight into its buffer
            // once it has begun it: bring in only its start here.
            news = Some(if wait {
                engine.poll_io_before_receive(&self.ctx)
            } else {
                engine.poll_io(&self.ctx)
            });
            self.engine_polled = true;
        }
        if let Some(i) = self.committed {
            let got = self.poll_net_in(i, dest, wait)?;
            return Ok(got.map(|len| (len, self.net_in[i].peer)));
        }
        // Open datagram edges that had nothing at this news count have nothing now.
        let skip_dgram = news.is_some() && self.dgram_seen == news;
        let n = self.net_in.len();
        for k in 0..n {
            let mut i = self.next_net_in + k;
            if i >= n {
                i -= n;
            }
            let inb = &self.net_in[i];
            if inb.state == InboundState::Done
                || (skip_dgram
                    && inb.state == InboundState::Open
                    && matches!(inb.link, InLink::Dgram(_)))
            {
                continue;
            }
            let got = self.poll_net_in(i, dest, wait);
            if !matches!(got, Ok(None)) {
                self.dgram_seen = None;
            }
            if let Some(len) = got? {
                self.next_net_in = if i + 1 == n { 0 } else { i + 1 };
                return Ok(Some((len, self.net_in[i].peer)));
            }
            if let Dest::Posted { bound: true, .. } = dest {
                // The posted receive took a large message that is still arriving.
                self.next_net_in = if i + 1 == n { 0 } else { i + 1 };
                self.dgram_seen = None;
                return Ok(None);
            }
        }
        self.dgram_seen = news;
        Ok(None)
    }

    /// One look at inbound network edge `i`: a message, nothing, or the edge's error
    /// (reported once; the edge is done afterwards, except after `BufferTooSmall`).
    fn poll_net_in(&mut self, i: usize, dest: &mut Dest<'_>, wait: bool) -> Result<Option<usize>> {
        let was_active = self.net_in[i].active;
        let got = match &mut self.net_in[i].link {
            InLink::Tcp(_) => self.take_tcp(i, dest, wait),
            InLink::Dgram(id) => {
                let id = *id;
                if let Some(err) = self.net_in[i].report_broken() {
                    return Err(err);
                }
                let ctx = &self.ctx;
                let engine = ctx
                    .dgram
                    .as_deref()
                    .expect("dgram connections need the engine");
                let taken = engine.take(ctx, id, dest, wait, &self.config);
                let inb = &mut self.net_in[i];
                if !inb.active && !matches!(taken, Ok(None) | Err(DgramTake::Closed)) {
                    // Delivered, or an error: does it concern what the peer sent us?
                    inb.active = matches!(taken, Ok(Some(_))) || engine.peer_sent(id);
                }
                match taken {
                    Ok(Some(len)) => Ok(Some(len)),
                    Ok(None) => Ok(None),
                    Err(DgramTake::Closed) => {
                        inb.state = InboundState::Done;
                        Ok(None)
                    }
                    Err(DgramTake::Failed(detail)) => {
                        inb.state = InboundState::Broken(detail);
                        Ok(None)
                    }
                    Err(DgramTake::Error(e)) => Err(e),
                }
            }
        };
        if !was_active && !self.net_in[i].silent() {
            // A reverse edge came to life: the peer connected to us (over our connection).
            tracing::debug!(endpoint = %self.addr, peer = %self.net_in[i].peer, transport = self.net_in[i].kind.name(), "peer connected (on our connection)");
            self.ctx.registry.accepted();
        }
        let result = match got {
            Ok(Some(len)) => Ok(Some(len)),
            // A posted receive bound to this edge's message gets its errors.
            Ok(None) if self.net_in[i].bound_to_posted() => Ok(None),
            Ok(None) => match self.net_in[i].report_broken() {
                Some(err) => Err(err),
                None => match self.net_in[i].report_stopped() {
                    Some(err) => Err(err),
                    None => Ok(None),
                },
            },
            Err(e @ Error::BufferTooSmall { .. }) => Err(e),
            // The failure of a connection the peer never sent on is the outbound edge's.
            Err(_) if self.net_in[i].silent() => {
                self.net_in[i].finish();
                Ok(None)
            }
            Err(e) => {
                self.net_in[i].finish();
                Err(e)
            }
        };
        let inb = &self.net_in[i];
        if inb.reverse && inb.kind == TransportKind::Tcp && inb.state == InboundState::Done {
            // Our connection to the peer ended: a new one from the peer is no crossing.
            self.shared.tcp_crossings().release_connect(inb.peer);
        }
        if self.committed == Some(i) && self.net_in[i].state == InboundState::Done {
            self.committed = None;
        }
        result
    }

    /// Takes the next message of tcp inbound edge `i` into `dest` if it is whole; never
    /// waits (a blocking receive waits outside, making progress on sends meanwhile).
    ///
    /// A message larger than the staging buffer is read as it arrives, over as many calls
    /// as it takes, and is delivered only once whole. Its bytes go where they last:
    /// - a blocking `recv`'s buffer (`PartialInto::Caller`; that `recv` then looks at this
    ///   edge only until the message is whole; if it ends early, [`Endpoint::uncommit`]
    ///   keeps the bytes);
    /// - a posted receive's buffer, moved into the edge (`PartialInto::Posted`, driven by
    ///   [`Endpoint::progress_bound_recvs`]);
    /// - otherwise (`try_recv`, pooled receives) an internal buffer (`PartialInto::Held`)
    ///   of the message's length, started by a non-blocking receive only while all held
    ///   buffers stay within `max_buffered_bytes` or no other large message is held. A
    ///   later receive with a lasting buffer takes the message over (what arrived is
    ///   copied once); a pooled receive gets the held buffer itself.
    ///
    /// `BufferTooSmall` is checked before anything is consumed, so the message stays.
    fn take_tcp(&mut self, i: usize, dest: &mut Dest<'_>, wait: bool) -> Result<Option<usize>> {
        let max_held = self.config.max_buffered_bytes as u64;
        let Endpoint {
            net_in,
            recvs,
            pool,
            committed,
            bound_recvs,
            ..
        } = self;
        let (before, rest) = net_in.split_at_mut(i);
        let Some((inb, after)) = rest.split_first_mut() else {
            unreachable!("take_tcp is given an edge index")
        };
        let others = || before.iter().chain(after.iter()).filter_map(NetIn::tcp);
        let peer = inb.peer;
        let NetIn { link, state, .. } = inb;
        let InLink::Tcp(tcp) = link else {
            unreachable!("take_tcp on a tcp edge")
        };
        tcp.stalled = false;
        // What the peer wrote is still read once it stopped; not after the stream failed.
        let readable = matches!(state, InboundState::Open | InboundState::Stopped(_));
        let broken = |e: io::Error, mid: bool| Error::Unreachable {
            peer,
            transport: "tcp",
            detail: tcp_read_detail(&e, mid),
        };
        loop {
            // Whole messages read ahead come first.
            if let Some(front) = tcp.ready.front() {
                dest.fits(front.len() as u64)?;
                let msg = tcp.ready.pop_front().expect("looked at just above");
                tcp.held_bytes -= msg.len();
                return deliver_held(dest, msg, pool).map(Some);
            }
            // Then the large message in progress.
            if let Some(p) = &mut tcp.partial {
                let len = p.len;
                match &mut p.into {
                    // Its posted receive gets it (progress reads it).
                    PartialInto::Posted(..) => return Ok(None),
                    PartialInto::Caller => {
                        let dst = dest.prepare(len as u64)?;
                        if !readable
                            || !read_into(&mut tcp.stream, dst, &mut p.filled)
                                .map_err(|e| broken(e, true))?
                        {
                            return Ok(None);
                        }
                        tcp.partial = None;
                        *committed = None;
                        return Ok(Some(len));
                    }
                    PartialInto::Held(held) => {
                        dest.fits(len as u64)?;
                        if !readable {
                            return Ok(None);
                        }
                        if read_into(&mut tcp.stream, held, &mut p.filled)
                            .map_err(|e| broken(e, true))?
                        {
                            let Some(Partial {
                                into: PartialInto::Held(msg),
                                ..
                            }) = tcp.partial.take()
                            else {
                                unreachable!("matched just above")
                            };
                            tcp.held_bytes -= len;
                            return deliver_held(dest, msg, pool).map(Some);
                        }
                        // Not whole yet: a receive whose buffer lasts takes it over.
                        let lasting = matches!(dest, Dest::Posted { .. })
                            || (wait && matches!(dest, Dest::Slice(_)));
                        if !lasting {
                            return Ok(None);
                        }
                        let Some(Partial {
                            filled,
                            into: PartialInto::Held(held),
                            ..
                        }) = tcp.partial.take()
                        else {
                            unreachable!("matched just above")
                        };
                        dest.prepare(len as u64)?[..filled].copy_from_slice(&held[..filled]);
                        let into = match bind_posted(dest, recvs, bound_recvs) {
                            Some(into) => into,
                            None => {
                                *committed = Some(i);
                                PartialInto::Caller
                            }
                        };
                        tcp.held_bytes -= len;
                        pool.give(held);
                        tcp.partial = Some(Partial { len, filled, into });
                        continue;
                    }
                }
            }
            let avail = tcp.end - tcp.start;
            if avail >= HEADER_LEN {
                let header = StreamHeader::parse(&tcp.buf[tcp.start..tcp.start + HEADER_LEN])
                    .map_err(|e| Error::Corrupt {
                        peer,
                        detail: format!("tcp framing: {e}"),
                    })?;
                if header.kind == StreamKind::Close {
                    tcp.start += HEADER_LEN;
                    *state = InboundState::Done;
                    return Ok(None);
                }
                let len = header.length;
                let whole = HEADER_LEN as u64 + len;
                if whole <= avail as u64 {
                    let dst = dest.prepare(len)?;
                    let from = tcp.start + HEADER_LEN;
                    dst.copy_from_slice(&tcp.buf[from..from + len as usize]);
                    tcp.start += whole as usize;
                    return Ok(Some(len as usize));
                }
                if whole > tcp.buf.len() as u64 {
                    // Large: start reading it (see above for where it goes).
                    dest.fits(len)?;
                    let mut into = if let Some(into) = bind_posted(dest, recvs, bound_recvs) {
                        into
                    } else if wait && matches!(dest, Dest::Slice(_)) {
                        *committed = Some(i);
                        PartialInto::Caller
                    } else {
                        let held_total: u64 = others().map(|t| t.held_bytes as u64).sum();
                        let within = held_total + len <= max_held;
                        let blocking_pooled = wait && matches!(dest, Dest::Owned(_));
                        if !(within || blocking_pooled || !others().any(TcpIn::holds_partial)) {
                            return Ok(None);
                        }
                        let held = held_buffer(pool, len)?;
                        tcp.held_bytes += len as usize;
                        PartialInto::Held(held)
                    };
                    let staged = avail - HEADER_LEN;
                    let target = match &mut into {
                        PartialInto::Held(buf) | PartialInto::Posted(_, buf) => &mut buf[..],
                        PartialInto::Caller => dest.prepare(len)?,
                    };
                    target[..staged].copy_from_slice(&tcp.buf[tcp.start + HEADER_LEN..tcp.end]);
                    tcp.start = 0;
                    tcp.end = 0;
                    tcp.partial = Some(Partial {
                        len: len as usize,
                        filled: staged,
                        into,
                    });
                    continue;
                }
            }
            if !readable {
                return Ok(None);
            }
            match tcp.fill() {
                Ok(true) => continue,
                // Nothing more now, or (a small message) not all here yet: nothing was
                // consumed; a blocking receive waits outside and comes back.
                Ok(false) => return Ok(None),
                Err(e) => return Err(broken(e, avail > 0)),
            }
        }
    }

    /// The latency path of a blocking `recv` on an endpoint whose only inbound edge is one
    /// open tcp stream: one look at that stream, taking a small message when it is whole,
    /// in a few lines of code instead of the general receive path. `None` when the case
    /// does not apply (more edges, shm rings or the datagram engine, a new connection to
    /// adopt, a message already read ahead or in progress, one that is large, too long for
    /// `buf`, a close or a bad header): the general path ([`Endpoint::poll_once`]) then
    /// looks, and reports what needs reporting. Where it applies, the outcome is what
    /// `poll_once` would give: the same message, the same error for a failed read.
    ///
    /// Why a separate path: from the read that brings a message in to `recv` returning it,
    /// the general path (several large functions, run once per message between system
    /// calls) took 100-160 ns here against 60-80 ns for this one (docs/PERFORMANCE.md,
    /// "tcp latency path (session 7)").
    pub(super) fn look_lone_tcp(
        &mut self,
        buf: &mut [u8],
    ) -> Option<Result<Option<(usize, Addr)>>> {
        if self.committed.is_some()
            || self.net_in.len() != 1
            || !self.inbound.is_empty()
            || self.ctx.dgram.is_some()
            || self.shared.has_incoming.load(Ordering::Relaxed)
        {
            return None;
        }
        let inb = &mut self.net_in[0];
        let InLink::Tcp(tcp) = &mut inb.link else {
            return None;
        };
        if inb.state != InboundState::Open
            || !inb.active
            || !tcp.ready.is_empty()
            || tcp.partial.is_some()
        {
            return None;
        }
        tcp.stalled = false;
        loop {
            let avail = tcp.end - tcp.start;
            if avail >= HEADER_LEN {
                let header =
                    StreamHeader::parse(&tcp.buf[tcp.start..tcp.start + HEADER_LEN]).ok()?;
                let len = header.length;
                let whole = HEADER_LEN as u64 + len;
                if header.kind == StreamKind::Close
                    || len > buf.len() as u64
                    || whole > tcp.buf.len() as u64
                {
                    return None;
                }
                if whole <= avail as u64 {
                    let len = len as usize;
                    let from = tcp.start + HEADER_LEN;
                    buf[..len].copy_from_slice(&tcp.buf[from..from + len]);
                    tcp.start = from + len;
                    self.next_net_in = 0;
                    return Some(Ok(Some((len, inb.peer))));
                }
            }
            match tcp.fill() {
                Ok(true) => {}
                Ok(false) => return Some(Ok(None)),
                Err(e) => {
                    // As the general path reports a failed read of an active edge.
                    let err = Error::Unreachable {
                        peer: inb.peer,
                        transport: "tcp",
                        detail: tcp_read_detail(&e, avail > 0),
                    };
                    inb.finish();
                    if inb.reverse {
                        self.shared.tcp_crossings().release_connect(inb.peer);
                    }
                    return Some(Err(err));
                }
            }
        }
    }

    /// The short receive path for an endpoint whose only inbound edge is one open datagram
    /// connection (udp or mem) the peer has sent on: one engine call polls the sockets and
    /// takes a whole message that fits `buf`, under one lock, without the general path's
    /// look at every edge (`poll_net`, `poll_net_in`, `DgramShared::take`). None: the
    /// general path decides (other edges, a new connection, a message too large or not
    /// whole, a connection not open); nothing was consumed then. `Some(Ok(None))`: no
    /// message yet (the engine was polled).
    pub(super) fn look_lone_dgram(
        &mut self,
        buf: &mut [u8],
    ) -> Option<Result<Option<(usize, Addr)>>> {
        let (id, peer, _) = self.lone_dgram()?;
        let engine = self.ctx.dgram.as_deref()?;
        let taken = engine.take_whole(&self.ctx, id, buf)?;
        // As after the general path's poll: progress need not poll again, and the next
        // general look at the edge must not skip it.
        self.engine_polled = true;
        self.dgram_seen = None;
        Some(Ok(taken.map(|len| (len, peer))))
    }

    /// The endpoint's one inbound edge when it is an open datagram connection and nothing
    /// else could deliver (the conditions of [`Endpoint::look_lone_dgram`]): (engine id,
    /// peer, transport name).
    fn lone_dgram(&self) -> Option<(u64, Addr, &'static str)> {
        if self.committed.is_some()
            || self.net_in.len() != 1
            || !self.inbound.is_empty()
            || self.shared.has_incoming.load(Ordering::Relaxed)
        {
            return None;
        }
        let inb = &self.net_in[0];
        let InLink::Dgram(id) = inb.link else {
            return None;
        };
        (inb.state == InboundState::Open && inb.active).then_some((id, inb.peer, inb.kind.name()))
    }

    /// Hands the posted receives waiting at the front of the line to the datagram engine
    /// when the endpoint's one inbound edge is a datagram connection
    /// ([`DgramShared::post_recvs`](crate::transport::dgram::DgramShared::post_recvs)): the
    /// protocol places frames of the next messages straight into their buffers, also while
    /// earlier messages still arrive (a striped connection's frames of several messages
    /// overtake each other). They become [`RecvState::Bound`] and complete from
    /// [`Endpoint::progress_dgram_recvs`], in posting order. Otherwise (other edges, another
    /// connection still holding receives) nothing changes.
    pub(super) fn bind_dgram_recvs(&mut self) {
        if self.posted_recvs.is_empty() {
            return;
        }
        let Some(on) = self.lone_dgram() else {
            return;
        };
        if self.dgram_recvs_on.is_some_and(|(id, ..)| id != on.0) {
            return;
        }
        let Some(engine) = self.ctx.dgram.as_deref() else {
            return;
        };
        let mut batch = VecDeque::new();
        let mut keys = Vec::new();
        for &key in &self.posted_recvs {
            let Some(RecvState::Pending(buf)) = self.recvs.get_mut(key) else {
                break;
            };
            batch.push_back((self.next_recv_token, std::mem::take(buf)));
            keys.push(key);
            self.next_recv_token += 1;
        }
        let taken = engine.post_recvs(on.0, &mut batch);
        let first_token = self.next_recv_token - keys.len() as u64;
        for (index, &key) in keys.iter().enumerate() {
            if index < taken {
                if let Some(state) = self.recvs.get_mut(key) {
                    *state = RecvState::Bound;
                }
                self.dgram_recvs
                    .push_back((first_token + index as u64, key));
            } else if let (Some(RecvState::Pending(slot)), Some((_, buf))) =
                (self.recvs.get_mut(key), batch.pop_front())
            {
                *slot = buf;
            }
        }
        if taken > 0 {
            self.posted_recvs.drain(..taken);
            self.dgram_recvs_on = Some(on);
        }
    }

    /// Completes the posted receives the datagram engine finished
    /// ([`Endpoint::bind_dgram_recvs`]): a whole message, a message too long for the
    /// buffer (`BufferTooSmall`, the message stays for the next receive), or the
    /// connection's failure in the middle of the receive's message. Receives whose message
    /// had not begun when the connection ended come back to the front of the line, for the
    /// general path.
    pub(super) fn progress_dgram_recvs(&mut self) {
        let Some((id, peer, transport)) = self.dgram_recvs_on else {
            return;
        };
        let Some(engine) = self.ctx.dgram.as_deref() else {
            return;
        };
        let mut done = Vec::new();
        let held = engine.collect_recvs(id, &mut done);
        let mut returned = Vec::new();
        for finished in done {
            let token = match &finished {
                RecvDone::Complete { token, .. }
                | RecvDone::TooSmall { token, .. }
                | RecvDone::Returned { token, .. }
                | RecvDone::Failed { token, .. } => *token,
            };
            let Some(at) = self.dgram_recvs.iter().position(|(held, _)| *held == token) else {
                continue;
            };
            let Some((_, key)) = self.dgram_recvs.remove(at) else {
                continue;
            };
            let state = match finished {
                RecvDone::Complete { buf, len, .. } => RecvState::Done(Ok(RecvCompletion {
                    buf,
                    len,
                    src: peer,
                })),
                RecvDone::TooSmall { buf, len, .. } => {
                    RecvState::Done(Err(Error::BufferTooSmall {
                        message: len,
                        buffer: buf.len(),
                    }))
                }
                RecvDone::Returned { buf, .. } => {
                    returned.push(key);
                    RecvState::Pending(buf)
                }
                RecvDone::Failed { why, .. } => RecvState::Done(Err(Error::Unreachable {
                    peer,
                    transport,
                    detail: why,
                })),
            };
            if let Some(slot) = self.recvs.get_mut(key) {
                *slot = state;
            }
        }
        for key in returned.into_iter().rev() {
            self.posted_recvs.push_front(key);
        }
        if held.is_none() {
            // The connection is gone: nothing will complete the receives it held.
            for (_, key) in self.dgram_recvs.drain(..) {
                if let Some(slot) = self.recvs.get_mut(key) {
                    *slot = RecvState::Done(Err(Error::Unreachable {
                        peer,
                        transport,
                        detail: "the connection ended while a receive was posted on it".into(),
                    }));
                }
            }
        }
        if self.dgram_recvs.is_empty() {
            self.dgram_recvs_on = None;
        }
    }

    /// Reads more of every large tcp message bound to a posted receive; completes the
    /// request once its message is whole, or with the edge's error.
    pub(super) fn progress_bound_recvs(&mut self) {
        let Endpoint {
            net_in,
            recvs,
            bound_recvs,
            ..
        } = self;
        for inb in net_in.iter_mut() {
            if !inb.bound_to_posted() {
                continue;
            }
            let peer = inb.peer;
            let InLink::Tcp(tcp) = &mut inb.link else {
                continue;
            };
            let Some(Partial {
                len,
                filled,
                into: PartialInto::Posted(key, buf),
            }) = &mut tcp.partial
            else {
                continue;
            };
            let key = *key;
            let outcome = match read_into(&mut tcp.stream, &mut buf[..*len], filled) {
                Ok(true) => {
                    let Some(Partial {
                        len,
                        into: PartialInto::Posted(_, buf),
                        ..
                    }) = tcp.partial.take()
                    else {
                        unreachable!("matched just above")
                    };
                    Ok(RecvCompletion {
                        buf,
                        len,
                        src: peer,
                    })
                }
                Ok(false) if inb.state == InboundState::Open => continue,
                Ok(false) => Err(inb
                    .report_stopped()
                    .or_else(|| inb.report_broken())
                    .unwrap_or_else(|| Error::Unreachable {
                        peer,
                        transport: "tcp",
                        detail: "the connection ended in the middle of a message".into(),
                    })),
                Err(e) => {
                    inb.finish();
                    Err(Error::Unreachable {
                        peer,
                        transport: "tcp",
                        detail: tcp_read_detail(&e, true),
                    })
                }
            };
            *bound_recvs -= 1;
            if let Some(state) = recvs.get_mut(key) {
                *state = RecvState::Done(outcome);
            }
        }
    }

    /// A blocking `recv` ends early (an error, a timeout) in the middle of a large tcp
    /// message it was reading into `buf`: what arrived is copied into an internal buffer,
    /// so the message stays whole and in place for a later receive. Returns `err`.
    pub(super) fn uncommit(&mut self, buf: &[u8], err: Error) -> Error {
        let Some(i) = self.committed.take() else {
            return err;
        };
        let inb = &mut self.net_in[i];
        let InLink::Tcp(tcp) = &mut inb.link else {
            return err;
        };
        let Some(p) = &mut tcp.partial else {
            return err;
        };
        if !matches!(p.into, PartialInto::Caller) {
            return err;
        }
        match held_buffer(&self.pool, p.len as u64) {
            Ok(mut held) => {
                held[..p.filled].copy_from_slice(&buf[..p.filled]);
                p.into = PartialInto::Held(held);
                tcp.held_bytes += p.len;
            }
            Err(_) => {
                tcp.partial = None;
                inb.state = InboundState::Broken(
                    "out of memory keeping a half-received message after a receive ended".into(),
                );
            }
        }
        err
    }

    /// While this endpoint waits for a send, takes what its tcp peers sent into internal
    /// buffers: whole messages, and large ones as they arrive, at most
    /// `max_buffered_bytes` held over all edges. A peer blocked sending to us can then go
    /// on (and take what we are sending it). Order is kept; receives take them later (a
    /// copy). Edges where the bound stopped it are marked `stalled`.
    pub(super) fn tcp_read_ahead(&mut self) {
        if self.shared.has_incoming.load(Ordering::Relaxed) {
            self.adopt_new_inbound();
        }
        let max_held = self.config.max_buffered_bytes as u64;
        let mut held_total: u64 = self
            .net_in
            .iter()
            .filter_map(NetIn::tcp)
            .map(|t| t.held_bytes as u64)
            .sum();
        // One `poll` says which streams have something: a failed read takes the socket's
        // lock, and this runs on every round of a send's wait, often on the very stream the
        // send is pushing (one stream carries both directions), whose incoming
        // acknowledgements would then wait behind the lock (measured: 1 MiB bandwidth fell
        // to 0.5-0.8 of one stream per direction).
        self.pollfds.clear();
        for inb in &self.net_in {
            if let (InboundState::Open, InLink::Tcp(tcp)) = (&inb.state, &inb.link) {
                self.pollfds.push(libc::pollfd {
                    fd: tcp.stream.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        if self.pollfds.is_empty() {
            return;
        }
        if sys::poll(&mut self.pollfds, Some(Duration::ZERO)).is_err() {
            // Look at every stream then.
            for fd in &mut self.pollfds {
                fd.revents = libc::POLLIN;
            }
        }
        let mut readiness = self.pollfds.iter();
        let pool = &self.pool;
        for inb in &mut self.net_in {
            if inb.state != InboundState::Open {
                continue;
            }
            let InLink::Tcp(tcp) = &mut inb.link else {
                continue;
            };
            let readable = readiness.next().is_some_and(|fd| fd.revents != 0);
            if !readable && tcp.end == tcp.start {
                continue;
            }
            let failed = loop {
                match &mut tcp.partial {
                    None => {}
                    Some(Partial {
                        filled,
                        into: PartialInto::Held(held),
                        ..
                    }) => match read_into(&mut tcp.stream, held, filled) {
                        Ok(true) => {
                            if let Some(Partial {
                                into: PartialInto::Held(msg),
                                ..
                            }) = tcp.partial.take()
                            {
                                tcp.ready.push_back(msg);
                            }
                            continue;
                        }
                        Ok(false) => break None,
                        Err(e) => break Some(tcp_read_detail(&e, true)),
                    },
                    // Bound to a receive, which reads it.
                    Some(_) => break None,
                }
                let avail = tcp.end - tcp.start;
                if avail >= HEADER_LEN {
                    // A header that fails its check is left for a receive to report.
                    let Ok(header) =
                        StreamHeader::parse(&tcp.buf[tcp.start..tcp.start + HEADER_LEN])
                    else {
                        break None;
                    };
                    if header.kind == StreamKind::Close {
                        break None;
                    }
                    let len = header.length;
                    let whole = HEADER_LEN as u64 + len;
                    let large = whole > tcp.buf.len() as u64;
                    if whole <= avail as u64 || large {
                        if held_total + len > max_held {
                            tcp.stalled = true;
                            break None;
                        }
                        let Ok(mut msg) = held_buffer(pool, len) else {
                            tcp.stalled = true;
                            break None;
                        };
                        held_total += len;
                        tcp.held_bytes += len as usize;
                        let from = tcp.start + HEADER_LEN;
                        if large {
                            let staged = avail - HEADER_LEN;
                            msg[..staged].copy_from_slice(&tcp.buf[from..tcp.end]);
                            tcp.start = 0;
                            tcp.end = 0;
                            tcp.partial = Some(Partial {
                                len: len as usize,
                                filled: staged,
                                into: PartialInto::Held(msg),
                            });
                        } else {
                            msg.copy_from_slice(&tcp.buf[from..from + len as usize]);
                            tcp.start += whole as usize;
                            tcp.ready.push_back(msg);
                        }
                        continue;
                    }
                }
                match tcp.fill() {
                    Ok(true) => {}
                    Ok(false) => break None,
                    Err(e) => break Some(tcp_read_detail(&e, avail > 0)),
                }
            };
            if let Some(detail) = failed {
                // Whole messages are still delivered; then the failure is reported.
                if let Some(p) = tcp.partial.take() {
                    tcp.held_bytes -= p.len;
                }
                inb.state = InboundState::Broken(detail);
            }
        }
    }

    /// Descriptors a sleeping call should wake up for: tcp streams to read (unless
    /// read-ahead stalled on them) and tcp connections with queued sends to write.
    pub(super) fn net_pollfds(&mut self) -> Option<Duration> {
        push_tcp_readable(&self.net_in, &mut self.pollfds);
        for out in &self.net_out {
            if let (None, false, OutLink::Tcp(stream)) =
                (&out.failure, out.queue.is_empty(), &out.link)
            {
                self.pollfds.push(libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
            }
        }
        let engine = self.ctx.dgram.as_ref()?;
        self.pollfds.push(libc::pollfd {
            fd: engine.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        Some(engine.timeout_within(SLEEP_SLICE))
    }

    /// Whether a network edge has something to receive now (for `arm`).
    pub(super) fn net_pending(&mut self) -> bool {
        if let Some(engine) = &self.ctx.dgram {
            engine.poll_io(&self.ctx);
        }
        for inb in &self.net_in {
            if inb.state != InboundState::Open {
                continue;
            }
            match &inb.link {
                InLink::Tcp(tcp) => {
                    if tcp.end > tcp.start || !tcp.ready.is_empty() || tcp.holds_partial() {
                        return true;
                    }
                }
                InLink::Dgram(id) => {
                    if let Some(engine) = &self.ctx.dgram {
                        if engine.readable(*id) {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    /// Before a datagram connection is closed, what was sent on it must arrive: the peer
    /// may still need retransmissions, and only this endpoint can make them. Pushes queued
    /// sends and waits until everything written is acknowledged, for at most the idle
    /// timeout (a peer silent that long is unreachable anyway).
    fn linger_dgram(&mut self) {
        let Some(engine) = self.ctx.dgram.clone() else {
            return;
        };
        let deadline = Instant::now() + self.config.net_idle_timeout;
        loop {
            engine.poll_io(&self.ctx);
            for idx in 0..self.net_out.len() {
                if matches!(self.net_out[idx].link, OutLink::Dgram(_)) {
                    // Failures end the wait for that connection.
                    let _ = self.progress_net_out(idx);
                }
            }
            let settled = self.net_out.iter().all(|out| match out.link {
                OutLink::Dgram(id) => {
                    out.failure.is_some() || (out.queue.is_empty() && engine.all_acked(id))
                }
                OutLink::Tcp(_) => true,
            });
            if settled || Instant::now() >= deadline {
                return;
            }
            engine.sleep(Duration::from_millis(1));
        }
    }

    /// Closes every network edge (endpoint drop).
    pub(super) fn close_net(&mut self) {
        for out in &mut self.net_out {
            if out.failure.is_some() {
                continue;
            }
            match &mut out.link {
                OutLink::Tcp(stream) => {
                    // Best effort: the close header, then end of stream.
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                    for q in out.queue.drain(..) {
                        let header = StreamHeader::message(q.data.len() as u64).emit();
                        let mut written = q.written;
                        if !matches!(tcp_write(stream, &header, &q.data, &mut written), Ok(true)) {
                            break;
                        }
                    }
                    let _ = stream.write_all(&StreamHeader::close().emit());
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                }
                OutLink::Dgram(_) => {}
            }
        }
        self.linger_dgram();
        let Some(engine) = self.ctx.dgram.clone() else {
            return;
        };
        let mut closed: Vec<u64> = Vec::new();
        for out in &self.net_out {
            if let OutLink::Dgram(id) = out.link {
                closed.push(id);
            }
        }
        for inb in &self.net_in {
            if let InLink::Dgram(id) = inb.link {
                closed.push(id);
            }
        }
        closed.sort_unstable();
        closed.dedup();
        for &id in &closed {
            engine.close(id);
        }
        self.linger_close(&engine, &closed);
    }

    /// After closing datagram connections `ids`: answers the peers a little longer, until
    /// each Close is acknowledged, for at most 3 RTOs (at least [`CLOSE_LINGER_MIN`], at
    /// most [`CLOSE_LINGER_MAX`] and the idle timeout). The Close carries this side's acks,
    /// so a peer whose last ack from us was lost learns from it that its data arrived;
    /// without this, a process that exited right after its last receive left such a peer
    /// waiting for that ack for a whole idle timeout.
    fn linger_close(&mut self, engine: &crate::transport::dgram::DgramShared, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let start = Instant::now();
        let mut deadline = None;
        loop {
            engine.poll_io(&self.ctx);
            let mut settled = true;
            let mut longest_rto = Duration::ZERO;
            for &id in ids {
                let (done, rto) = engine.close_settled(id);
                settled &= done;
                longest_rto = longest_rto.max(rto);
            }
            let deadline = *deadline.get_or_insert_with(|| {
                start
                    + (3 * longest_rto)
                        .clamp(CLOSE_LINGER_MIN, CLOSE_LINGER_MAX)
                        .min(self.config.net_idle_timeout)
            });
            if settled || Instant::now() >= deadline {
                return;
            }
            engine.sleep(Duration::from_millis(1));
        }
    }
}

/// How long a watched peer process has been stopped, once that counts (see
/// [`PeerProcess::stopped`]); None without a process or with detection off. Looks at
/// most as often as the endpoint's other looks ([`crate::transport::liveness::Looks::due`]) and
/// counts the look in `detection`.
fn stopped_for(
    process: &mut Option<PeerProcess>,
    detect: Option<Duration>,
    detection: &mut crate::transport::liveness::Looks,
) -> Option<u64> {
    let detect = detect?;
    let process = process.as_mut()?;
    let now = Instant::now();
    if !detection.due(now, detect) {
        return None;
    }
    let stopped = process.stopped(detect, now);
    detection.record(now);
    stopped
}

/// Adds the tcp streams worth waking up for (open, not stalled by read-ahead) to `fds`.
fn push_tcp_readable(net_in: &[NetIn], fds: &mut Vec<libc::pollfd>) {
    for inb in net_in {
        if let (InboundState::Open, InLink::Tcp(tcp)) = (&inb.state, &inb.link) {
            if !tcp.stalled {
                fds.push(libc::pollfd {
                    fd: tcp.stream.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
    }
}

/// Shortest wait for the acknowledgement of a datagram connection's Close.
const CLOSE_LINGER_MIN: Duration = Duration::from_millis(50);
/// Longest wait for the acknowledgement of a datagram connection's Close.
const CLOSE_LINGER_MAX: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// Frames on both sides of each copy-buffer size arrive byte for byte, header first.
    #[test]
    fn small_and_gathered_frames_arrive_whole() {
        let (mut client, mut server) = pair();
        let sizes = [
            0,
            1,
            8,
            64 - HEADER_LEN,
            64 - HEADER_LEN + 1,
            512 - HEADER_LEN,
            512 - HEADER_LEN + 1,
            TCP_COALESCE_MAX_BYTES - HEADER_LEN - 1,
            TCP_COALESCE_MAX_BYTES - HEADER_LEN,
            TCP_COALESCE_MAX_BYTES - HEADER_LEN + 1,
            70_000,
        ];
        let mut expected = Vec::new();
        for (n, &size) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..size).map(|i| (i + n) as u8).collect();
            let header = StreamHeader::message(size as u64).emit();
            let mut written = 0;
            assert!(tcp_write(&mut client, &header, &data, &mut written).unwrap());
            assert_eq!(written, HEADER_LEN + size);
            expected.extend_from_slice(&header);
            expected.extend_from_slice(&data);
        }
        drop(client);
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        assert_eq!(got, expected);
    }

    /// A small frame the full socket does not take whole is finished by later calls from
    /// where the first one stopped (the gathered path, at an offset).
    #[test]
    fn small_frame_resumes_after_a_partial_write() {
        let (mut client, mut server) = pair();
        client.set_nonblocking(true).unwrap();
        server.set_nonblocking(true).unwrap();
        let filler = vec![0xEEu8; 64 << 10];
        let data: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        let header = StreamHeader::message(data.len() as u64).emit();
        let mut sent = Vec::new();
        // Fill the socket, then push the small frame until it is taken whole.
        loop {
            match client.write(&filler) {
                Ok(n) => sent.extend_from_slice(&filler[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling: {e}"),
            }
        }
        let mut written = 0;
        let mut received = Vec::new();
        let mut chunk = vec![0u8; 4096];
        while !tcp_write(&mut client, &header, &data, &mut written).unwrap() {
            // Take a little, so that the next write is likely partial.
            if let Ok(n) = server.read(&mut chunk) {
                received.extend_from_slice(&chunk[..n]);
            }
        }
        sent.extend_from_slice(&header);
        sent.extend_from_slice(&data);
        drop(client);
        server.set_nonblocking(false).unwrap();
        server.read_to_end(&mut received).unwrap();
        assert_eq!(received.len(), sent.len());
        assert!(received == sent, "the stream's bytes differ");
    }

    /// Rank 0's and rank 1's contexts of a two-rank job in this process, at `addrs` with
    /// `config`; `tag` tells the test's job id from the other tests'.
    fn two_rank_contexts(
        addrs: &[std::net::SocketAddr],
        config: &crate::Config,
        tag: u64,
    ) -> (crate::Context, crate::Context) {
        let job = u64::from(std::process::id()) << 20 | tag;
        let context = |rank| {
            crate::Context::builder()
                .rank(rank)
                .size(2)
                .job_id(job)
                .job_key([3; 32])
                .addrs(addrs.to_vec())
                .config(config.clone())
                .build()
                .unwrap()
        };
        (context(0), context(1))
    }

    /// Rank 0's endpoint of a two-rank tcp job in this process, connected to rank 1's
    /// (returned too, to keep it open). Its one inbound edge then carries the stream the
    /// test gives it (`lone_edge`), so the test can write any bytes to it.
    fn tcp_endpoint() -> (crate::Context, Endpoint, crate::Context, Endpoint) {
        let addrs: Vec<std::net::SocketAddr> = (0..2)
            .map(|_| {
                let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
                listener.local_addr().unwrap()
            })
            .collect();
        let config = crate::Config {
            transports: vec![TransportKind::Tcp],
            ..crate::Config::default()
        };
        let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0x7e57);
        let ep1 = ctx1.endpoint(0).unwrap();
        let mut ep0 = ctx0.endpoint(0).unwrap();
        ep0.connect(Addr::new(1, 0)).unwrap();
        ep0.set_timeout(Some(Duration::from_secs(5)));
        (ctx0, ep0, ctx1, ep1)
    }

    /// Makes `stream` the endpoint's only inbound edge, open and active.
    fn lone_edge(ep: &mut Endpoint, stream: TcpStream) {
        stream.set_nonblocking(true).unwrap();
        assert_eq!(ep.net_in.len(), 1);
        let inb = &mut ep.net_in[0];
        inb.link = InLink::Tcp(TcpIn::new(stream, 1 << 16));
        inb.state = InboundState::Open;
        inb.active = true;
    }

    fn frame(data: &[u8]) -> Vec<u8> {
        let mut bytes = StreamHeader::message(data.len() as u64).emit().to_vec();
        bytes.extend_from_slice(data);
        bytes
    }

    /// The short receive path delivers what the general one would, leaves to it what it
    /// does not handle, and reports the end of a stream and a reset as it would.
    #[test]
    fn lone_tcp_edge_takes_small_messages_and_reports_failures() {
        let (_ctx0, mut ep, _ctx1, _ep1) = tcp_endpoint();
        let peer = ep.net_in[0].peer;
        let (mut ours, theirs) = pair();
        lone_edge(&mut ep, theirs);
        let mut small = [0u8; 8];
        assert!(matches!(ep.look_lone_tcp(&mut small), Some(Ok(None))));
        // Two messages in one write, the second split over two writes.
        let mut bytes = frame(b"first");
        bytes.extend_from_slice(&frame(b"second!!"));
        ours.write_all(&bytes[..bytes.len() - 3]).unwrap();
        assert_eq!(ep.recv(&mut small).unwrap(), (5, peer));
        assert_eq!(&small[..5], b"first");
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(ep.look_lone_tcp(&mut small), Some(Ok(None))));
        ours.write_all(&bytes[bytes.len() - 3..]).unwrap();
        assert_eq!(ep.recv(&mut small).unwrap(), (8, peer));
        assert_eq!(&small, b"second!!");
        // Too long for the buffer: left to the general path, and kept.
        ours.write_all(&frame(&[7u8; 100])).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(ep.look_lone_tcp(&mut small).is_none());
        assert!(matches!(
            ep.recv(&mut small),
            Err(Error::BufferTooSmall {
                message: 100,
                buffer: 8
            })
        ));
        let mut big = [0u8; 100];
        assert_eq!(ep.recv(&mut big).unwrap(), (100, peer));
        assert_eq!(big, [7u8; 100]);
        // The stream ends without a close.
        ours.shutdown(std::net::Shutdown::Write).unwrap();
        match ep.recv(&mut small) {
            Err(Error::Unreachable { detail, .. }) => {
                assert!(detail.contains("without a close"), "{detail}")
            }
            other => panic!("expected the end of the stream, got {other:?}"),
        }
        assert_eq!(ep.net_in[0].state, InboundState::Done);
        // A reset in the middle of a message: closing a socket with unread bytes sends
        // a reset instead of an end of stream.
        let (ours, theirs) = pair();
        (&theirs).write_all(b"never read").unwrap();
        lone_edge(&mut ep, theirs);
        (&ours).write_all(&frame(b"cut")[..10]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(ours);
        std::thread::sleep(Duration::from_millis(20));
        match ep.recv(&mut small) {
            Err(Error::Unreachable { detail, .. }) => {
                assert!(detail.contains("reset"), "{detail}")
            }
            other => panic!("expected a reset, got {other:?}"),
        }
    }

    /// Polls `look_lone_dgram` until it does something other than find nothing (5 s at
    /// most).
    fn look_until_news(ep: &mut Endpoint, buf: &mut [u8]) -> Option<Result<Option<(usize, Addr)>>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let looked = ep.look_lone_dgram(buf);
            if !matches!(looked, Some(Ok(None))) || std::time::Instant::now() > deadline {
                return looked;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The short receive path of a lone datagram edge takes whole messages that fit, and
    /// leaves to the general path (consuming nothing) a message too long for the buffer,
    /// one larger than the receive window, and a connection the peer closed.
    #[test]
    fn lone_dgram_edge_takes_whole_messages_and_leaves_the_rest() {
        let addrs: Vec<std::net::SocketAddr> = (0..2)
            .map(|_| {
                let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
                socket.local_addr().unwrap()
            })
            .collect();
        let config = crate::Config {
            transports: vec![TransportKind::Udp],
            ..crate::Config::default()
        };
        let (ctx0, ctx1) = two_rank_contexts(&addrs, &config, 0xd6a);
        let mut ep = ctx0.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(10)));
        let huge: Vec<u8> = (0..(12 << 20)).map(|i: usize| (i / 7) as u8).collect();
        let (go, step) = std::sync::mpsc::channel::<()>();
        let sender = std::thread::spawn({
            let huge = huge.clone();
            move || {
                let mut ep1 = ctx1.endpoint(0).unwrap();
                ep1.set_timeout(Some(Duration::from_secs(10)));
                let conn = ep1.connect(Addr::new(0, 0)).unwrap();
                for message in [&b"first"[..], b"second!!", &[7u8; 100], &huge] {
                    ep1.send(conn, message).unwrap();
                    // The engine progresses only while the endpoint is used.
                    while let Err(std::sync::mpsc::TryRecvError::Empty) = step.try_recv() {
                        ep1.progress().unwrap();
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                drop(ep1);
            }
        });
        let mut small = [0u8; 8];
        // The first message adopts the edge (general path).
        let (len, peer) = ep.recv(&mut small).unwrap();
        assert_eq!(&small[..len], b"first");
        assert_eq!(ep.net_in.len(), 1);
        go.send(()).unwrap();
        match look_until_news(&mut ep, &mut small) {
            Some(Ok(Some((8, from)))) => assert_eq!(from, peer),
            other => panic!("expected the second message, got {other:?}"),
        }
        assert_eq!(&small, b"second!!");
        // Too long for the buffer: left to the general path, and kept.
        go.send(()).unwrap();
        assert!(look_until_news(&mut ep, &mut small).is_none());
        assert!(matches!(
            ep.recv(&mut small),
            Err(Error::BufferTooSmall {
                message: 100,
                buffer: 8
            })
        ));
        let mut big = vec![0u8; huge.len()];
        assert_eq!(ep.recv(&mut big).unwrap(), (100, peer));
        assert_eq!(big[..100], [7u8; 100]);
        // Larger than the receive window (8 MiB): never whole in it, read as it arrives.
        go.send(()).unwrap();
        assert!(look_until_news(&mut ep, &mut big).is_none());
        assert_eq!(ep.recv(&mut big).unwrap(), (huge.len(), peer));
        assert!(big == huge, "the large message differs");
        // The peer closes: left to the general path.
        go.send(()).unwrap();
        sender.join().unwrap();
        assert!(look_until_news(&mut ep, &mut small).is_none());
    }
}
