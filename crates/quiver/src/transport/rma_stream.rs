//! The request stream of the software path, both of its ends, over any byte stream: a tcp
//! stream to the target's listener (`tcp::rma` dials it), or one end of the unix socket
//! pair that rode with a shm key request for memory a caller lent (`shm::rma`, whose
//! other end the target's listener adopts). The initiator's side ([`StreamRma`]) writes
//! requests and reads their replies; the target's ([`StreamServed`]) reads each request,
//! checks it (`rma_serve`) and applies it, served by whichever endpoint of the target
//! calls into quiver next. The layouts are `quiver_wire::rma_request`. The transports only
//! open the stream; this module knows none of them.
//!
//! Bytes move without staging copies: a put's data goes from the caller's buffer into the
//! socket (one gathered `sendmsg` with the request) and at the target from the socket
//! straight into the region (`recv` into the mapping); a get's reply leaves the region the
//! same way and lands straight in the caller's buffer.
//!
//! A blocking operation writes its request (and a put's data) and reads its reply before
//! the next one: a put is done, applied at the target, when `put` returns, and a message
//! sent after it arrives after its data is visible. Posted operations keep several
//! requests outstanding on the stream (`rma_pipeline`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use quiver_transport::tcp::write_gathered;
use quiver_wire::rma::KeyRepr;
use quiver_wire::rma_request::{ReplyRepr, ReplyStatus, RequestRepr, REPLY_LEN, REQUEST_LEN};

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::failure::Failure;
use crate::transport::liveness::PeerProcess;
use crate::transport::local::LocalRank;
use crate::transport::region_view::RegionView;
use crate::transport::regions::RegionTable;
use crate::transport::rma_ops::{
    flush_request, reply_outcome, request_for, request_io, OpInfo, Patience, RmaOp,
};
use crate::transport::rma_pipeline::{Outcome, Pipeline, RequestChannel};
use crate::transport::rma_serve::{next_step, take_request, Identity, Next, Served};

/// How a transport opens a request stream to `peer`'s request service for endpoint `src`
/// (`(local, src, peer)`): the stream, and the target's pid when it runs on this node.
pub(crate) type Dial = fn(&LocalRank, Addr, Addr) -> Result<(TcpStream, Option<libc::pid_t>)>;

/// What an edge keeps for its one-sided operations over a request stream: the stream to
/// the peer's request service, opened at the first operation or handed over open (module
/// docs).
#[derive(Debug)]
pub(crate) struct StreamRma {
    stream: Option<RequestStream>,
    seq: u32,
    /// The target died or closed its context: every later operation fails at once.
    ended: Option<Failure>,
    /// Posted operations outstanding on the stream.
    pipeline: Pipeline,
    /// How the stream is opened; `None`: it was handed over open ([`StreamRma::over`]) and
    /// is never reopened.
    dial: Option<Dial>,
    /// The transport the stream belongs to (in errors).
    transport: &'static str,
}

/// An open request stream and the target's process, when it runs on this node.
#[derive(Debug)]
struct RequestStream {
    stream: TcpStream,
    peer: Addr,
    process: Option<PeerProcess>,
    transport: &'static str,
    /// The last write of a posted request left part of it (the socket was full): the next
    /// one waits until [`ready`] says the socket has room.
    full: bool,
    /// The last read of a posted request's reply found nothing: the next one waits until
    /// [`ready`] says there is something.
    dry: bool,
}

impl StreamRma {
    /// Requests of `transport` opened by `dial` at the first operation.
    pub(crate) fn dialing(transport: &'static str, dial: Dial) -> StreamRma {
        StreamRma {
            stream: None,
            seq: 0,
            ended: None,
            pipeline: Pipeline::default(),
            dial: Some(dial),
            transport,
        }
    }

    /// Requests to `peer` on a stream already open to its request service (the shm
    /// transport's software path for memory a caller lent: one end of a unix socket pair
    /// whose other end the target's listener adopted); the stream is never reopened.
    pub(crate) fn over(
        transport: &'static str,
        stream: TcpStream,
        peer: Addr,
        pid: Option<libc::pid_t>,
    ) -> StreamRma {
        StreamRma {
            stream: Some(RequestStream {
                stream,
                peer,
                process: pid.and_then(PeerProcess::open),
                transport,
                full: false,
                dry: false,
            }),
            seq: 0,
            ended: None,
            pipeline: Pipeline::default(),
            dial: None,
            transport,
        }
    }

    /// Applies `op` (already checked against `key`) to the region of `peer` that `key`
    /// names, through the peer's software path; the word before, for an atomic.
    ///
    /// # Errors
    /// The target's refusals ([`Error::RmaKeyRefused`], [`Error::RmaRevoked`], ...),
    /// [`Error::PeerDead`] when the target's process ended, [`Error::PeerClosed`] or
    /// [`Error::Unreachable`] when its stream did, [`Error::Timeout`], the connect's.
    pub(crate) fn apply(
        &mut self,
        local: &LocalRank,
        (src, peer): (Addr, Addr),
        key: &KeyRepr,
        op: RmaOp<'_>,
    ) -> Result<u64> {
        self.seq = self.seq.wrapping_add(1);
        let mut op = op;
        let request = request_for(&op, key, self.seq);
        self.drain(local, peer)?;
        self.check(peer)?;
        self.open(local, src, peer)?;
        let (data, buf) = request_io(&mut op);
        let reply = match self.exchange(local, peer, &request, data, buf) {
            Ok(reply) => reply,
            Err(e) => return Err(self.forget(e)),
        };
        reply_outcome(local, peer, key, &op, &reply)
    }

    /// Waits until every earlier operation on the stream is applied at `peer` (they are
    /// by now: each waited for its reply) and the target still answers.
    ///
    /// # Errors
    /// As [`StreamRma::apply`].
    pub(crate) fn flush(&mut self, local: &LocalRank, peer: Addr) -> Result<()> {
        self.drain(local, peer)?;
        self.check(peer)?;
        if self.stream.is_none() {
            // Nothing was ever sent: nothing to make visible.
            return Ok(());
        }
        self.seq = self.seq.wrapping_add(1);
        let request = flush_request(self.seq);
        match self.exchange(local, peer, &request, &[], None) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.forget(e)),
        }
    }

    /// Posts `op` (already checked against `key`; `buf` is a put's data or a get's
    /// buffer, handed over): its number, to [`StreamRma::take`] its completion later.
    ///
    /// # Errors
    /// The stream could not be opened, or the target ended before.
    pub(crate) fn post(
        &mut self,
        local: &LocalRank,
        (src, peer): (Addr, Addr),
        key: &KeyRepr,
        (op, buf): (OpInfo, Vec<u8>),
        request: RequestRepr,
    ) -> Result<u32> {
        self.check(peer)?;
        self.open(local, src, peer)?;
        self.seq = self.seq.wrapping_add(1);
        let request = RequestRepr {
            seq: self.seq,
            ..request
        };
        self.pipeline.post(&request, *key, op, buf);
        self.progress(local, peer);
        Ok(request.seq)
    }

    /// Moves the posted operations on as far as the stream allows now; a stream that
    /// ended completes them with its error.
    pub(crate) fn progress(&mut self, local: &LocalRank, peer: Addr) {
        if self.pipeline.is_idle() {
            return;
        }
        if let Some(rs) = self.stream.as_mut() {
            if let Err(e) = self.pipeline.progress(rs, local, peer) {
                let _ = self.forget(e);
            }
        }
    }

    /// The completion of posted operation `seq`, once it came.
    pub(crate) fn take(&mut self, seq: u32) -> Option<Outcome> {
        self.pipeline.take(seq)
    }

    /// What a sleeping call should wake up for while operations are posted.
    pub(crate) fn wake(&self) -> Option<libc::pollfd> {
        let rs = self.stream.as_ref().filter(|_| !self.pipeline.is_idle())?;
        let mut events = libc::POLLIN;
        if self.pipeline.wants_to_send() {
            events |= libc::POLLOUT;
        }
        Some(libc::pollfd {
            fd: rs.stream.as_raw_fd(),
            events,
            revents: 0,
        })
    }

    /// Waits until every posted operation is complete (a blocking one follows).
    fn drain(&mut self, local: &LocalRank, peer: Addr) -> Result<()> {
        let mut patience = Patience::new(local);
        loop {
            self.progress(local, peer);
            if self.pipeline.is_idle() {
                return Ok(());
            }
            let fd = self.wake().map(|p| (p.fd, p.events));
            patience.wait(local, fd)?;
        }
    }

    /// The error of a target that ended, if it did.
    fn check(&self, peer: Addr) -> Result<()> {
        match &self.ended {
            Some(failure) => Err(failure.to_error(peer, "during a one-sided operation")),
            None => Ok(()),
        }
    }

    /// Drops the stream after `e`, remembering a target that died or closed; returns `e`.
    fn forget(&mut self, e: Error) -> Error {
        self.stream = None;
        // Completes whatever was posted with the error.
        self.pipeline.fail(&e);
        match e {
            Error::PeerDead { .. } => self.ended = Some(Failure::Dead),
            Error::PeerClosed { .. } => self.ended = Some(Failure::Closed),
            _ => {}
        }
        e
    }

    /// Opens the request stream to `peer` if this edge has none yet.
    fn open(&mut self, local: &LocalRank, src: Addr, peer: Addr) -> Result<()> {
        if self.stream.is_some() {
            return Ok(());
        }
        let Some(dial) = self.dial else {
            return Err(Error::PeerClosed { peer });
        };
        let (stream, pid) = dial(local, src, peer)?;
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::io(format!("configuring the request stream to {peer}"), e))?;
        self.stream = Some(RequestStream {
            stream,
            peer,
            process: pid.and_then(PeerProcess::open),
            transport: self.transport,
            full: false,
            dry: false,
        });
        Ok(())
    }

    /// Sends `request` (and a put's `data`) and reads its reply (a get's data into `buf`).
    fn exchange(
        &mut self,
        local: &LocalRank,
        peer: Addr,
        request: &RequestRepr,
        data: &[u8],
        buf: Option<&mut [u8]>,
    ) -> Result<ReplyRepr> {
        let Some(rs) = self.stream.as_mut() else {
            unreachable!("opened before any exchange")
        };
        let mut patience = Patience::new(local);
        let head = request.emit();
        let total = REQUEST_LEN + data.len();
        let mut written = 0;
        while written < total {
            match write_gathered(&rs.stream, &[&head, data], written) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let fd = (rs.stream.as_raw_fd(), libc::POLLOUT);
                    patience.wait(local, Some(fd))?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(rs.ended(peer, &e.to_string())),
            }
        }
        let mut head = [0u8; REPLY_LEN];
        rs.read_exact(local, peer, &mut head, &mut patience)?;
        let corrupt = |detail: String| Error::Corrupt {
            peer,
            detail: format!("one-sided reply: {detail}"),
        };
        let reply = ReplyRepr::parse(&head).map_err(|e| corrupt(e.to_string()))?;
        if reply.seq != request.seq {
            return Err(corrupt(format!(
                "answers request {}, not {}",
                reply.seq, request.seq
            )));
        }
        match buf {
            Some(buf) if reply.status == ReplyStatus::Done => {
                if reply.len != buf.len() as u64 {
                    return Err(corrupt(format!(
                        "{} bytes for a get of {}",
                        reply.len,
                        buf.len()
                    )));
                }
                rs.read_exact(local, peer, buf, &mut patience)?;
            }
            _ if reply.len != 0 => {
                return Err(corrupt(format!("{} bytes of data unasked", reply.len)));
            }
            _ => {}
        }
        Ok(reply)
    }
}

impl RequestChannel for RequestStream {
    fn send(
        &mut self,
        _local: &LocalRank,
        (head, data): (&[u8], &[u8]),
        skip: usize,
        _started: &mut bool,
    ) -> Result<usize> {
        if self.full && !ready(&self.stream, libc::POLLOUT) {
            return Ok(0);
        }
        let left = (head.len() + data.len()).saturating_sub(skip);
        match write_gathered(&self.stream, &[head, data], skip) {
            Ok(n) => {
                self.full = n < left;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.full = true;
                Ok(0)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(self.ended(self.peer, &e.to_string())),
        }
    }

    fn recv(&mut self, _local: &LocalRank, out: &mut [u8]) -> Result<usize> {
        if out.is_empty() || (self.dry && !ready(&self.stream, libc::POLLIN)) {
            return Ok(0);
        }
        match self.stream.read(out) {
            Ok(0) => Err(self.ended(self.peer, "the target closed the stream")),
            Ok(n) => {
                self.dry = n < out.len();
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.dry = true;
                Ok(0)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(self.ended(self.peer, &e.to_string())),
        }
    }
}

impl RequestStream {
    /// Reads exactly `buf.len()` bytes, waiting (and serving this rank's requests) between
    /// reads.
    fn read_exact(
        &mut self,
        local: &LocalRank,
        peer: Addr,
        buf: &mut [u8],
        patience: &mut Patience,
    ) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(self.ended(peer, "the target closed the stream")),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let fd = (self.stream.as_raw_fd(), libc::POLLIN);
                    patience.wait(local, Some(fd))?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.ended(peer, &e.to_string())),
            }
        }
        Ok(())
    }

    /// The error of a request stream that ended: the target's process died
    /// ([`Error::PeerDead`], when it runs on this node and its exit shows within a moment),
    /// closed its context ([`Error::PeerClosed`]), or the network said so.
    fn ended(&self, peer: Addr, detail: &str) -> Error {
        if let Some(process) = &self.process {
            // The stream closes as the process exits, a moment before its pidfd says so.
            let until = Instant::now() + Duration::from_millis(200);
            while !process.exited() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            return if process.exited() {
                Error::PeerDead {
                    peer,
                    during: "during a one-sided operation",
                }
            } else {
                Error::PeerClosed { peer }
            };
        }
        Error::Unreachable {
            peer,
            transport: self.transport,
            detail: format!("the one-sided request stream ended: {detail}"),
        }
    }
}

/// Steps (a header, a put's data, a reply) one call serves of one stream at most.
const SERVE_BUDGET: usize = 192;

/// A request stream a peer opened to this rank, as the target serves it (module docs):
/// one request at a time, read, applied, answered.
#[derive(Debug)]
pub(crate) struct StreamServed {
    stream: TcpStream,
    peer: u32,
    head: [u8; REQUEST_LEN],
    filled: usize,
    stage: Stage,
    /// The last read found nothing: the next one waits until [`ready`] says there is
    /// something (every call into quiver serves the stream, most of them with nothing new).
    dry: bool,
}

/// Where the served stream stands.
#[derive(Debug)]
enum Stage {
    /// Reading a request's header.
    Header,
    /// Reading a put's data: into the region at `at`, or (refused) dropped.
    Data {
        region: Option<RegionView>,
        at: usize,
        left: u64,
        reply: ReplyRepr,
    },
    /// Writing the reply (and a get's data from the region: `(region, at, len)`).
    Reply {
        head: [u8; REPLY_LEN],
        data: Option<(RegionView, usize, usize)>,
        sent: usize,
    },
}

impl StreamServed {
    /// A stream from rank `peer` (its handshake done) to serve.
    pub(crate) fn new(stream: TcpStream, peer: u32) -> StreamServed {
        StreamServed {
            stream,
            peer,
            head: [0; REQUEST_LEN],
            filled: 0,
            stage: Stage::Header,
            dry: false,
        }
    }

    /// Reads the rest of a request's header; true once it is whole.
    fn read_header(&mut self) -> io::Result<bool> {
        if self.dry && !ready(&self.stream, libc::POLLIN) {
            return Ok(false);
        }
        while self.filled < REQUEST_LEN {
            match self.stream.read(&mut self.head[self.filled..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.filled += n;
                    self.dry = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.dry = true;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.filled = 0;
        Ok(true)
    }

    /// The stage after a whole request header: checked, applied if it is an atomic.
    fn on_request(
        &self,
        regions: &RegionTable,
        me: Identity,
    ) -> std::result::Result<Stage, String> {
        let (request, checked) = take_request(regions, me, self.peer, &self.head)?;
        Ok(match next_step(&request, checked) {
            Next::PutData { into, len, reply } => {
                let (region, at) = into.map_or((None, 0), |(region, at)| (Some(region), at));
                Stage::Data {
                    region,
                    at,
                    left: len,
                    reply,
                }
            }
            Next::Reply { reply, data } => Stage::Reply {
                head: reply.emit(),
                data,
                sent: 0,
            },
        })
    }

    /// Moves a put's data from the socket into the region (or drops it); true once all of
    /// it is in.
    fn read_data(&mut self) -> io::Result<bool> {
        let Stage::Data {
            region, at, left, ..
        } = &mut self.stage
        else {
            return Ok(true);
        };
        if self.dry && !ready(&self.stream, libc::POLLIN) {
            return Ok(false);
        }
        let mut scratch = [0u8; 4096];
        while *left > 0 {
            let want = usize::try_from(*left).unwrap_or(usize::MAX).min(1 << 30);
            let got = match region {
                Some(region) => region.recv_into(self.stream.as_fd(), *at, want),
                None => {
                    let want = want.min(scratch.len());
                    self.stream.read(&mut scratch[..want])
                }
            };
            match got {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    *at += n;
                    *left -= n as u64;
                    self.dry = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.dry = true;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Writes what the socket takes of the reply; true once all of it is out.
    fn write_reply(&mut self) -> io::Result<bool> {
        let Stage::Reply { head, data, sent } = &mut self.stage else {
            return Ok(true);
        };
        let total = REPLY_LEN + data.as_ref().map_or(0, |d| d.2);
        while *sent < total {
            let wrote = match data {
                Some((region, at, len)) => {
                    region.send_from(self.stream.as_fd(), head, (*at, *len), *sent)
                }
                None => self.stream.write(&head[*sent..]),
            };
            match wrote {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl Served for StreamServed {
    fn serve(&mut self, regions: &RegionTable, me: Identity) -> std::result::Result<(), String> {
        let peer = self.peer;
        let io_end = |e: io::Error| format!("rank {peer}'s request stream: {e}");
        // A bound per call, so that one busy peer cannot keep the call from its own work.
        for _ in 0..SERVE_BUDGET {
            match &self.stage {
                Stage::Header => {
                    if !self.read_header().map_err(io_end)? {
                        return Ok(());
                    }
                    self.stage = self.on_request(regions, me)?;
                }
                Stage::Data { .. } => {
                    if !self.read_data().map_err(io_end)? {
                        return Ok(());
                    }
                    if let Stage::Data { reply, .. } = &self.stage {
                        self.stage = Stage::Reply {
                            head: reply.emit(),
                            data: None,
                            sent: 0,
                        };
                    }
                }
                Stage::Reply { .. } => {
                    if !self.write_reply().map_err(io_end)? {
                        return Ok(());
                    }
                    self.stage = Stage::Header;
                }
            }
        }
        Ok(())
    }

    fn wake(&self) -> Option<libc::pollfd> {
        let events = match self.stage {
            Stage::Reply { .. } => libc::POLLOUT,
            _ => libc::POLLIN,
        };
        Some(libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events,
            revents: 0,
        })
    }
}

/// Whether `stream` is ready for `events` now. `poll` takes no socket lock, where a read
/// that finds nothing (or a write the full socket refuses) takes the lock that the
/// acknowledgements and data arriving on the same socket need, on every look of a caller
/// that spins (decision 0080 measured it for message streams). A failed `poll` says yes:
/// the read or write then finds out.
fn ready(stream: &TcpStream, events: i16) -> bool {
    let mut fds = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events,
        revents: 0,
    }];
    match quiver_transport::sys::poll(&mut fds, Some(Duration::ZERO)) {
        Ok(_) => fds[0].revents != 0,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// `ready` says what a read or write would find, without taking the socket's lock: a
    /// stream with nothing to read is not ready for reading until its peer writes, and one
    /// whose send buffer is full is not ready for writing until its peer reads.
    #[test]
    fn ready_says_what_a_read_or_write_would_find() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut far, _) = listener.accept().unwrap();
        assert!(!ready(&near, libc::POLLIN));
        assert!(ready(&near, libc::POLLOUT));
        far.write_all(b"reply").unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while !ready(&near, libc::POLLIN) {
            assert!(Instant::now() < until, "the bytes never showed");
        }
        let mut got = [0u8; 5];
        near.read_exact(&mut got).unwrap();
        assert!(!ready(&near, libc::POLLIN));
        // Fill the send buffer (the far side does not read).
        near.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 1 << 16];
        while near.write(&chunk).is_ok() {}
        assert!(!ready(&near, libc::POLLOUT));
        far.set_nonblocking(true).unwrap();
        let mut sink = vec![0u8; 1 << 20];
        while !ready(&near, libc::POLLOUT) {
            assert!(
                Instant::now() < until + Duration::from_secs(5),
                "never writable"
            );
            let _ = far.read(&mut sink);
        }
    }
}
