//! The endpoint's network connections: TCP streams it drives itself, and datagram
//! connections (udp, mem) whose protocol state lives in the context's datagram engine.
//!
//! Connections handed out for the network carry [`NET_BIT`] in their index. Every public
//! operation of [`Endpoint`] dispatches on it; this module implements the network half.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use quiver_wire::stream::{StreamHeader, StreamKind, HEADER_LEN};

use super::*;
use crate::config::TransportKind;
use crate::context::NetInbound;

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
}

#[derive(Debug)]
pub(super) struct TcpIn {
    stream: TcpStream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
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
}

impl NetIn {
    /// A broken edge's error, once (the edge is done afterwards).
    fn report_broken(&mut self) -> Option<Error> {
        let InboundState::Broken(detail) = &self.state else {
            return None;
        };
        let err = Error::Unreachable {
            peer: self.peer,
            transport: self.kind.name(),
            detail: detail.clone(),
        };
        self.state = InboundState::Done;
        Some(err)
    }

    /// A stopped peer's error, once (the edge is done afterwards).
    fn report_stopped(&mut self) -> Option<Error> {
        let InboundState::Stopped(stopped_ms) = self.state else {
            return None;
        };
        self.state = InboundState::Done;
        Some(Error::PeerStopped {
            peer: self.peer,
            transport: self.kind.name(),
            during: "while receiving",
            stopped_ms,
        })
    }

    /// Whether the edge still delivers (or has an error to report).
    pub(super) fn is_live(&self) -> bool {
        self.state != InboundState::Done
    }
}

fn lost(kind: TransportKind, detail: impl Into<String>) -> Failure {
    Failure::Lost(kind.name(), detail.into())
}

fn io_failure(kind: TransportKind, e: &io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            lost(kind, format!("the connection was reset ({e})"))
        }
        _ => lost(kind, format!("socket error: {e}")),
    }
}

/// Writes what the socket takes of header + data; true when all of it is written.
fn tcp_write(
    stream: &mut TcpStream,
    header: &[u8; HEADER_LEN],
    data: &[u8],
    written: &mut usize,
) -> io::Result<bool> {
    let total = HEADER_LEN + data.len();
    while *written < total {
        let result = if *written < HEADER_LEN {
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

/// Hands more of `data` to an outbound link's transport (the socket for tcp, the protocol's
/// send window for datagrams); true once all of it is taken. `written` and `started` carry
/// the progress between calls.
fn write_link(
    link: &mut OutLink,
    kind: TransportKind,
    engine: Option<&crate::net::dgram::DgramShared>,
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

impl TcpIn {
    /// A TCP inbound stream staging `staging_bytes` (`Config::tcp_staging_bytes`):
    /// messages that fit are received without blocking, larger ones are read straight
    /// into the destination once they start.
    fn new(stream: TcpStream, staging_bytes: usize) -> TcpIn {
        TcpIn {
            stream,
            buf: vec![0u8; staging_bytes].into_boxed_slice(),
            start: 0,
            end: 0,
        }
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
        let to = self.ctx.addrs[peer.rank as usize];
        let deadline = Instant::now() + self.config.connect_timeout;
        let (link, process) = match kind {
            TransportKind::Tcp => {
                let (stream, pid) =
                    crate::net::tcp::connect(&self.ctx, self.addr, peer, to, deadline)?;
                (OutLink::Tcp(stream), pid.and_then(PeerProcess::open))
            }
            TransportKind::Udp | TransportKind::Mem => {
                let engine = self.ctx.dgram.as_ref().ok_or_else(|| {
                    Error::Config(format!("{kind} is not set up in this context"))
                })?;
                let id = engine.connect(&self.ctx, self.addr, peer, to, deadline)?;
                (OutLink::Dgram(id), None)
            }
            TransportKind::Shm => unreachable!("shm connections are not network connections"),
        };
        tracing::info!(from = %self.addr, to = %peer, transport = kind.name(), address = %to, "connected");
        let index = self.net_out.len() as u32;
        self.net_out.push(NetOut {
            peer,
            kind,
            link,
            queue: VecDeque::new(),
            failure: None,
            process,
        });
        let conn = Connection {
            endpoint_id: self.id,
            index: index | NET_BIT,
            peer,
        };
        self.by_peer.insert(peer, conn.index);
        Ok(conn)
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
            out.failure = Some(failure.clone());
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
        loop {
            let out = &mut self.net_out[idx];
            let Some(q) = out.queue.front_mut() else {
                return Ok(());
            };
            let engine = self.ctx.dgram.as_deref();
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
        let mut wait = Wait::new(&self.config);
        while !self.net_out[idx].queue.is_empty() {
            self.progress_net_out(idx)?;
            if self.net_out[idx].queue.is_empty() {
                break;
            }
            self.wait_net_out(idx, &mut wait, "flushing earlier sends")?;
        }
        let kind = self.net_out[idx].kind;
        let (mut written, mut started) = (0, false);
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
                });
                Ok(())
            }
            Err(f) => Err(self.fail_net_out(idx, f, "while sending")),
        }
    }

    /// Posted send on a network connection.
    pub(super) fn net_post_send(&mut self, conn: Connection, data: Vec<u8>) -> Result<SendRequest> {
        let idx = self.net_index(conn)?;
        let key = self.sends.insert(SendState::Pending);
        self.net_out[idx].queue.push_back(NetQueued {
            key: Some(key),
            data,
            written: 0,
            started: false,
        });
        self.pending_sends += 1;
        // Failures are recorded in the request.
        let _ = self.progress_net_out(idx);
        Ok(SendRequest { key })
    }

    /// One step of waiting for a network connection to take more data.
    fn wait_net_out(&mut self, idx: usize, wait: &mut Wait, what: &'static str) -> Result<()> {
        // Acknowledgements (and credit) arrive through the engine: take them every round.
        if let Some(engine) = &self.ctx.dgram {
            engine.poll_io(&self.ctx);
        }
        let spin = self.config.spin;
        let detect = self.config.detect;
        let out = &mut self.net_out[idx];
        match &out.link {
            OutLink::Tcp(stream) => {
                let fd = stream.as_raw_fd();
                let process = &mut out.process;
                let mut stopped = None;
                let waited = wait_fd(
                    fd,
                    libc::POLLOUT,
                    || SLEEP_SLICE,
                    wait,
                    spin,
                    what,
                    || {
                        stopped = stopped_for(process, detect);
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
            if inb.state != InboundState::Open {
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
        match inbound {
            NetInbound::Tcp { peer, stream, pid } => self.net_in.push(NetIn {
                peer,
                kind: TransportKind::Tcp,
                link: InLink::Tcp(TcpIn::new(stream, self.config.tcp_staging_bytes)),
                state: InboundState::Open,
                process: pid.and_then(PeerProcess::open),
            }),
            NetInbound::Dgram { peer, kind, id } => self.net_in.push(NetIn {
                peer,
                kind,
                link: InLink::Dgram(id),
                state: InboundState::Open,
                process: None,
            }),
        }
    }

    /// Looks once at every inbound network edge (round robin) for a message for `dest`.
    pub(super) fn poll_net(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
    ) -> Result<Option<(usize, Addr)>> {
        if let Some(engine) = &self.ctx.dgram {
            engine.poll_io(&self.ctx);
            self.engine_polled = true;
        }
        let n = self.net_in.len();
        for k in 0..n {
            let mut i = self.next_net_in + k;
            if i >= n {
                i -= n;
            }
            if self.net_in[i].state == InboundState::Done {
                continue;
            }
            if let Some(err) = self.net_in[i].report_broken() {
                return Err(err);
            }
            let got = match &mut self.net_in[i].link {
                InLink::Tcp(_) => self.take_tcp(i, dest, wait),
                InLink::Dgram(id) => {
                    let id = *id;
                    let engine = self
                        .ctx
                        .dgram
                        .clone()
                        .expect("dgram connections need the engine");
                    match engine.take(&self.ctx, id, dest, wait, &self.config) {
                        Ok(Some(len)) => Ok(Some(len)),
                        Ok(None) => Ok(None),
                        Err(DgramTake::Closed) => {
                            self.net_in[i].state = InboundState::Done;
                            Ok(None)
                        }
                        Err(DgramTake::Failed(detail)) => {
                            self.net_in[i].state = InboundState::Broken(detail);
                            Ok(None)
                        }
                        Err(DgramTake::Error(e)) => Err(e),
                    }
                }
            };
            match got {
                Ok(Some(len)) => {
                    self.next_net_in = if i + 1 == n { 0 } else { i + 1 };
                    return Ok(Some((len, self.net_in[i].peer)));
                }
                Ok(None) => {
                    if let Some(err) = self.net_in[i].report_broken() {
                        return Err(err);
                    }
                    if let Some(err) = self.net_in[i].report_stopped() {
                        return Err(err);
                    }
                }
                Err(e @ Error::BufferTooSmall { .. }) => return Err(e),
                Err(e) => {
                    self.net_in[i].state = InboundState::Done;
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Takes the next message of TCP inbound edge `i` into `dest`, if there is one.
    fn take_tcp(&mut self, i: usize, dest: &mut Dest<'_>, wait: bool) -> Result<Option<usize>> {
        let spin = self.config.spin;
        let op_timeout = self.config.op_timeout;
        let detect = self.config.detect;
        let inb = &mut self.net_in[i];
        let peer = inb.peer;
        let NetIn {
            link,
            state,
            process,
            ..
        } = inb;
        let InLink::Tcp(tcp) = link else {
            unreachable!("take_tcp on a tcp edge")
        };
        let mut stopped = None;
        let stopped_error = |ms: u64| Error::PeerStopped {
            peer,
            transport: "tcp",
            during: "in the middle of a message",
            stopped_ms: ms,
        };
        let broken = |detail: String| Error::Unreachable {
            peer,
            transport: "tcp",
            detail,
        };
        let read_error = |e: io::Error, mid: bool| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                if mid {
                    broken("the stream ended in the middle of a message".into())
                } else {
                    broken("the stream ended without a close (the peer exited or crashed)".into())
                }
            } else {
                broken(format!("receiving: {e}"))
            }
        };
        let mut waited: Option<Wait> = None;
        loop {
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
                    // Large: stream it straight into the destination.
                    let dst = dest.prepare(len)?;
                    let staged = avail - HEADER_LEN;
                    dst[..staged].copy_from_slice(&tcp.buf[tcp.start + HEADER_LEN..tcp.end]);
                    tcp.start = 0;
                    tcp.end = 0;
                    let mut filled = staged;
                    let mut w = Wait::with_timeout(op_timeout);
                    while filled < dst.len() {
                        match read_some(&mut tcp.stream, &mut dst[filled..]) {
                            Ok(Some(n)) => filled += n,
                            Ok(None) => {
                                wait_fd(
                                    tcp.stream.as_raw_fd(),
                                    libc::POLLIN,
                                    || SLEEP_SLICE,
                                    &mut w,
                                    spin,
                                    "waiting for the rest of a message",
                                    || {
                                        stopped = stopped_for(process, detect);
                                        stopped.is_none()
                                    },
                                )?;
                                if let Some(ms) = stopped {
                                    return Err(stopped_error(ms));
                                }
                            }
                            Err(e) => return Err(read_error(e, true)),
                        }
                    }
                    return Ok(Some(len as usize));
                }
            }
            match tcp.fill() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return Err(read_error(e, avail > 0)),
            }
            // Nothing staged, or (for a non-blocking call) a message that has begun but is
            // not all here yet: come back later. Nothing was consumed.
            if !wait || avail == 0 {
                return Ok(None);
            }
            let w = waited.get_or_insert_with(|| Wait::with_timeout(op_timeout));
            wait_fd(
                tcp.stream.as_raw_fd(),
                libc::POLLIN,
                || SLEEP_SLICE,
                w,
                spin,
                "waiting for the rest of a message",
                || {
                    stopped = stopped_for(process, detect);
                    stopped.is_none()
                },
            )?;
            if let Some(ms) = stopped {
                return Err(stopped_error(ms));
            }
        }
    }

    /// Descriptors a sleeping receive should wake up for.
    pub(super) fn net_pollfds(&mut self) -> Option<Duration> {
        for inb in &self.net_in {
            if let (InboundState::Open, InLink::Tcp(tcp)) = (&inb.state, &inb.link) {
                self.pollfds.push(libc::pollfd {
                    fd: tcp.stream.as_raw_fd(),
                    events: libc::POLLIN,
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
                    if tcp.end > tcp.start {
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
            let mut fds = [libc::pollfd {
                fd: engine.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let _ = sys::poll(
                &mut fds,
                Some(engine.timeout_within(Duration::from_millis(1))),
            );
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
        for out in &self.net_out {
            if let (OutLink::Dgram(id), Some(engine)) = (&out.link, &self.ctx.dgram) {
                engine.close(*id);
            }
        }
        for inb in &self.net_in {
            if let InLink::Dgram(id) = inb.link {
                if let Some(engine) = &self.ctx.dgram {
                    engine.close(id);
                }
            }
        }
    }
}

/// Why a datagram connection yielded no message.
pub(crate) enum DgramTake {
    /// Closed gracefully by the peer: nothing more will come.
    Closed,
    /// The connection failed (peer unreachable, reset): reported once.
    Failed(String),
    /// An error for the caller (BufferTooSmall, timeout).
    Error(Error),
}

/// How long a watched peer process has been stopped, once that counts (see
/// [`PeerProcess::stopped`]); None without a process or with detection off.
fn stopped_for(process: &mut Option<PeerProcess>, detect: Option<Duration>) -> Option<u64> {
    let detect = detect?;
    process.as_mut()?.stopped(detect, Instant::now())
}

/// One step of waiting for `fd` to become ready (`events`): spin while the spin budget
/// lasts, then sleep in `poll` for at most `cap()` (asked only when about to sleep) and the
/// time left before the deadline; honours the timeout. `alive()` is asked periodically and
/// after each sleep; when it says false the step returns at once (the caller knows why).
#[allow(clippy::too_many_arguments)] // each is one concern of the wait
pub(super) fn wait_fd(
    fd: std::os::fd::RawFd,
    events: i16,
    cap: impl FnOnce() -> Duration,
    wait: &mut Wait,
    spin: Duration,
    what: &'static str,
    mut alive: impl FnMut() -> bool,
) -> Result<()> {
    let (spinning, periodic) = wait.spinning(spin);
    if periodic {
        if !alive() {
            return Ok(());
        }
        wait.check_deadline(what)?;
    }
    if spinning {
        std::hint::spin_loop();
        return Ok(());
    }
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    let mut slice = cap();
    if let Some(d) = wait.deadline() {
        slice = slice.min(d.saturating_duration_since(Instant::now()));
    }
    let _ = sys::poll(&mut fds, Some(slice));
    if !alive() {
        return Ok(());
    }
    wait.check_deadline(what)
}

/// One step of waiting for the datagram engine to have news: [`wait_fd`] on its descriptor,
/// sleeping no longer than its next protocol timer.
pub(crate) fn wait_engine(
    engine: &crate::net::dgram::DgramShared,
    wait: &mut Wait,
    spin: Duration,
) -> Result<()> {
    wait_fd(
        engine.raw_fd(),
        libc::POLLIN,
        || engine.timeout_within(SLEEP_SLICE),
        wait,
        spin,
        "waiting for the rest of a message",
        || true,
    )
}
