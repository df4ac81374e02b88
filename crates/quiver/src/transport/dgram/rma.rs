//! One-sided operations over the datagram engine (udp, xdp, mem), in software: the
//! initiator opens one more reliable connection to the target, asking for the reserved
//! port [`RMA_PORT`] in the handshake, and sends each request as one message on it
//! ([`DgramRma`]); the target's engine hands that connection to the rank's request
//! service, where whichever endpoint of the target calls into quiver next applies each
//! request to the region ([`DgramServed`]). The layouts are `quiver_wire::rma_request`:
//! a request message is the request header and a put's data, a reply message the reply
//! header and a get's data.
//!
//! The initiator's bytes go from its buffer into the connection's send window and from
//! the receive window straight into its buffer, as a message's do. At the target the
//! reliable core's windows are the only buffers a program can reach, so a put's data
//! goes from the receive window into the region, and a get's from the region into the
//! send window, through a bounce buffer of [`BOUNCE_BYTES`] (one more copy than over tcp,
//! bounded memory).
//!
//! One operation at a time per edge, as over tcp: a put is applied at the target when
//! `put` returns.

use std::sync::Arc;
use std::time::Instant;

use quiver_wire::rma::KeyRepr;
use quiver_wire::rma_request::{ReplyRepr, ReplyStatus, RequestRepr, REPLY_LEN, REQUEST_LEN};

use super::connect::Connected;
use super::connection::Status;
use super::engine::DgramShared;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::failure::Failure;
use crate::transport::liveness::{local_peer_pid, PeerProcess};
use crate::transport::local::LocalRank;
use crate::transport::region_view::RegionView;
use crate::transport::regions::RegionTable;
use crate::transport::rma_ops::{
    flush_request, reply_outcome, request_for, request_io, OpInfo, Patience, RmaOp, RMA_PORT,
};
use crate::transport::rma_pipeline::{Outcome, Pipeline, RequestChannel};
use crate::transport::rma_serve::{next_step, take_request, Identity, Next, Served};

/// The bounce buffer of a served connection (module docs).
pub(crate) const BOUNCE_BYTES: usize = 64 * 1024;

/// Steps one call serves of one connection at most (a header, a chunk of data, a chunk
/// of a reply).
const SERVE_BUDGET: usize = 192;

/// During what, in errors.
const DURING: &str = "during a one-sided operation";

impl DgramShared {
    /// Writes `chunk` as more of the message of `total` bytes connection `id` is sending,
    /// starting it first unless `started`; the bytes the send window took.
    fn write_chunk(
        &self,
        id: u64,
        total: u64,
        started: &mut bool,
        chunk: &[u8],
    ) -> std::result::Result<usize, Failure> {
        let mut engine = self.lock();
        let entry = engine.open_entry(self.kind, id)?;
        if !*started {
            if entry.core.start_message(total).is_err() {
                return Ok(0);
            }
            *started = true;
        }
        let mut taken = 0;
        while taken < chunk.len() {
            let n = entry.core.write_message(&chunk[taken..]);
            if n == 0 {
                break;
            }
            taken += n;
        }
        engine.flush(id);
        Ok(taken)
    }

    /// Reads the next bytes of connection `id`'s current message into `out`: `None` when
    /// no message has begun, else (bytes read, the message's length, whether it is
    /// complete).
    fn read_chunk(
        &self,
        id: u64,
        out: &mut [u8],
    ) -> std::result::Result<Option<(usize, u64, bool)>, Failure> {
        let mut engine = self.lock();
        let entry = engine.live_entry(self.kind, id)?;
        let Some(len) = entry.core.peek_message_len() else {
            return match &entry.status {
                Status::Failed(why) => Err(Failure::Lost(self.kind.name(), why.clone())),
                Status::Closed => Err(Failure::Closed),
                _ => Ok(None),
            };
        };
        let (n, complete) = entry.core.read_message(out);
        entry.peer_sent = true;
        // Freed receive credit may bring a window update forward.
        engine.timers_dirty = true;
        if complete {
            engine.defer(id);
        } else if n > 0 {
            engine.flush(id);
        }
        Ok(Some((n, len, complete)))
    }

    /// The identity connection `id`'s peer sent in its handshake (a pid and a node id),
    /// if it sent one.
    fn peer_identity(&self, id: u64) -> Option<[u8; quiver_proto::reliable::IDENTITY_LEN]> {
        let engine = self.lock();
        engine
            .router
            .get(id)
            .and_then(|e| e.core.peer_identity().copied())
    }

    /// Bytes connection `id`'s send window can take now (0 for a connection gone).
    fn send_room(&self, id: u64) -> usize {
        let engine = self.lock();
        engine.router.get(id).map_or(0, |e| e.core.send_capacity())
    }
}

/// What a datagram edge keeps for its one-sided operations: the request connection to
/// the peer, opened at the first operation (module docs).
#[derive(Debug, Default)]
pub(crate) struct DgramRma {
    conn: Option<(Arc<DgramShared>, u64)>,
    /// The target's process, when it runs on this node (its handshake said so): its exit
    /// ends a wait with [`Error::PeerDead`] at once rather than at the idle timeout.
    process: Option<PeerProcess>,
    /// The target died (seen by its pidfd): every later operation fails so, at once.
    dead: bool,
    seq: u32,
    /// Posted operations outstanding on the connection.
    pipeline: Pipeline,
}

impl DgramRma {
    /// Applies `op` (already checked against `key`) to the region of `peer` that `key`
    /// names, through the peer's software path; the word before, for an atomic.
    ///
    /// # Errors
    /// The target's refusals, [`Error::PeerDead`] when the target ran on this node and
    /// its process ended, [`Error::Unreachable`] or [`Error::PeerClosed`] when the
    /// connection ended, [`Error::Timeout`], the connect's.
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
        let reply = self.exchange(local, peer, &request, data, buf)?;
        reply_outcome(local, peer, key, &op, &reply)
    }

    /// Waits until every earlier operation is applied at `peer` (they are by now: each
    /// waited for its reply) and the target still answers.
    ///
    /// # Errors
    /// As [`DgramRma::apply`].
    pub(crate) fn flush(&mut self, local: &LocalRank, peer: Addr) -> Result<()> {
        self.drain(local, peer)?;
        self.check(peer)?;
        if self.conn.is_none() {
            return Ok(());
        }
        self.seq = self.seq.wrapping_add(1);
        let request = flush_request(self.seq);
        self.exchange(local, peer, &request, &[], None).map(|_| ())
    }

    /// Posts `op` (already checked against `key`; `buf` is a put's data or a get's
    /// buffer, handed over): its number, to [`DgramRma::take`] its completion later.
    ///
    /// # Errors
    /// The connection could not be opened.
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

    /// Moves the posted operations on as far as the connection allows now; a connection
    /// that ended completes them with its error.
    pub(crate) fn progress(&mut self, local: &LocalRank, peer: Addr) {
        if self.pipeline.is_idle() {
            return;
        }
        let Some((engine, id)) = self.conn.clone() else {
            return;
        };
        let mut channel = Channel {
            engine: &engine,
            id,
            watch: Watch {
                process: self.process.as_ref(),
                peer,
            },
        };
        if self.pipeline.progress(&mut channel, local, peer).is_err() {
            engine.close(id);
            self.conn = None;
            self.dead |= self.process.as_ref().is_some_and(PeerProcess::exited);
        }
    }

    /// [`Error::PeerDead`] once the target was seen dead.
    fn check(&self, peer: Addr) -> Result<()> {
        if self.dead {
            return Err(Failure::Dead.to_error(peer, DURING));
        }
        Ok(())
    }

    /// The completion of posted operation `seq`, once it came.
    pub(crate) fn take(&mut self, seq: u32) -> Option<Outcome> {
        self.pipeline.take(seq)
    }

    /// Waits until every posted operation is complete (a blocking one follows).
    fn drain(&mut self, local: &LocalRank, peer: Addr) -> Result<()> {
        let mut patience = Patience::polling_engine(local);
        loop {
            self.progress(local, peer);
            if self.pipeline.is_idle() {
                return Ok(());
            }
            if let Some((engine, _)) = &self.conn {
                engine.poll_io(local);
            }
            let watch = Watch {
                process: self.process.as_ref(),
                peer,
            };
            let fd = watch.fd();
            if let Err(e) = watch.check(&patience) {
                // Completes whatever was posted with the error.
                self.pipeline.fail(&e);
                self.dead = true;
                return Err(e);
            }
            patience.wait(local, fd)?;
        }
    }

    /// Opens the request connection to `peer` if this edge has none yet.
    fn open(&mut self, local: &LocalRank, src: Addr, peer: Addr) -> Result<()> {
        if self.conn.is_some() {
            return Ok(());
        }
        let engine = local
            .dgram
            .clone()
            .ok_or_else(|| Error::Config("no datagram engine in this context".into()))?;
        let to = *local
            .addrs
            .get(peer.rank as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("rank {} has no address", peer.rank)))?;
        let deadline = Instant::now() + local.config.connect_timeout;
        let service = Addr::new(peer.rank, RMA_PORT);
        let id = match engine.connect(local, src, service, to, deadline, || None::<()>)? {
            Connected::New(id) => id,
            Connected::Reused(()) => unreachable!("a request connection is never reused"),
        };
        let pid = engine.peer_identity(id).and_then(|p| local_peer_pid(&p));
        self.process = pid.and_then(PeerProcess::open);
        self.conn = Some((engine, id));
        Ok(())
    }

    /// Sends `request` (and a put's `data`) as one message and reads the reply message (a
    /// get's data into `buf`). A failure forgets the connection.
    fn exchange(
        &mut self,
        local: &LocalRank,
        peer: Addr,
        request: &RequestRepr,
        data: &[u8],
        buf: Option<&mut [u8]>,
    ) -> Result<ReplyRepr> {
        let Some((engine, id)) = self.conn.clone() else {
            unreachable!("opened before any exchange")
        };
        let watch = Watch {
            process: self.process.as_ref(),
            peer,
        };
        let result = exchange(local, (&engine, id), watch, request, data, buf);
        if let Err(e) = &result {
            engine.close(id);
            self.conn = None;
            self.dead |= matches!(e, Error::PeerDead { .. });
        }
        result
    }
}

impl Drop for DgramRma {
    fn drop(&mut self) {
        if let Some((engine, id)) = self.conn.take() {
            engine.close(id);
        }
    }
}

/// A request connection as the pipeline of posted operations sees it.
struct Channel<'a> {
    engine: &'a DgramShared,
    id: u64,
    watch: Watch<'a>,
}

/// The target of a request connection: its address, and its process when it runs on this
/// node.
#[derive(Clone, Copy)]
struct Watch<'a> {
    process: Option<&'a PeerProcess>,
    peer: Addr,
}

impl Watch<'_> {
    /// The error of a connection that ended with `failure`: [`Error::PeerDead`] when the
    /// target's process is known to have exited.
    fn ended(&self, failure: &Failure) -> Error {
        if self.process.is_some_and(PeerProcess::exited) {
            return Failure::Dead.to_error(self.peer, DURING);
        }
        failure.to_error(self.peer, DURING)
    }

    /// Before a wait that sleeps: [`Error::PeerDead`] once the target's process exited.
    fn check(&self, patience: &Patience) -> Result<()> {
        match self.process {
            Some(process) if patience.will_sleep() && process.exited() => {
                Err(Failure::Dead.to_error(self.peer, DURING))
            }
            _ => Ok(()),
        }
    }

    /// The descriptor a sleep also waits on: the target's pidfd.
    fn fd(&self) -> Option<(std::os::fd::RawFd, i16)> {
        self.process.map(|p| (p.raw_fd(), libc::POLLIN))
    }
}

impl RequestChannel for Channel<'_> {
    fn send(
        &mut self,
        _local: &LocalRank,
        (head, data): (&[u8], &[u8]),
        skip: usize,
        started: &mut bool,
    ) -> Result<usize> {
        let total = (head.len() + data.len()) as u64;
        let chunk = if skip < head.len() {
            &head[skip..]
        } else {
            &data[skip - head.len()..]
        };
        self.engine
            .write_chunk(self.id, total, started, chunk)
            .map_err(|f| self.watch.ended(&f))
    }

    fn recv(&mut self, _local: &LocalRank, out: &mut [u8]) -> Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let got = self
            .engine
            .read_chunk(self.id, out)
            .map_err(|f| self.watch.ended(&f))?;
        Ok(got.map_or(0, |(n, _, _)| n))
    }
}

/// One step of waiting for connection news: the engine polled, this rank's requests
/// served, then a little patience (a sleep also wakes at the target's exit, and a target
/// seen dead ends the wait).
fn idle(
    local: &LocalRank,
    engine: &DgramShared,
    patience: &mut Patience,
    watch: Watch<'_>,
) -> Result<()> {
    engine.poll_io(local);
    watch.check(patience)?;
    patience.wait(local, watch.fd())
}

/// [`DgramRma::exchange`] on connection `id` of `engine`.
fn exchange(
    local: &LocalRank,
    (engine, id): (&DgramShared, u64),
    watch: Watch<'_>,
    request: &RequestRepr,
    data: &[u8],
    buf: Option<&mut [u8]>,
) -> Result<ReplyRepr> {
    let peer = watch.peer;
    let ended = |f: Failure| watch.ended(&f);
    let mut patience = Patience::polling_engine(local);
    let head = request.emit();
    let total = REQUEST_LEN + data.len();
    let (mut written, mut started) = (0, false);
    while written < total {
        let chunk = if written < REQUEST_LEN {
            &head[written..]
        } else {
            &data[written - REQUEST_LEN..]
        };
        let n = engine
            .write_chunk(id, total as u64, &mut started, chunk)
            .map_err(ended)?;
        written += n;
        if n == 0 {
            idle(local, engine, &mut patience, watch)?;
        }
    }
    let corrupt = |detail: String| Error::Corrupt {
        peer,
        detail: format!("one-sided reply: {detail}"),
    };
    let mut head = [0u8; REPLY_LEN];
    let mut got = 0;
    let mut message_len = 0;
    while got < REPLY_LEN {
        match engine.read_chunk(id, &mut head[got..]).map_err(ended)? {
            Some((n, len, complete)) => {
                got += n;
                message_len = len;
                if got < REPLY_LEN && complete {
                    return Err(corrupt(format!("a message of {len} bytes")));
                }
                if n == 0 {
                    idle(local, engine, &mut patience, watch)?;
                }
            }
            None => idle(local, engine, &mut patience, watch)?,
        }
    }
    let reply = ReplyRepr::parse(&head).map_err(|e| corrupt(e.to_string()))?;
    if reply.seq != request.seq || message_len != REPLY_LEN as u64 + reply.len {
        return Err(corrupt(format!(
            "request {} answered as {} in a message of {message_len} bytes",
            request.seq, reply.seq
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
            let mut filled = 0;
            while filled < buf.len() {
                match engine.read_chunk(id, &mut buf[filled..]).map_err(ended)? {
                    Some((n, _, _)) if n > 0 => filled += n,
                    _ => idle(local, engine, &mut patience, watch)?,
                }
            }
        }
        _ if reply.len != 0 => {
            return Err(corrupt(format!("{} bytes of data unasked", reply.len)));
        }
        _ => {}
    }
    Ok(reply)
}

/// Hands request connection `id` from rank `peer`, just established, to the rank's
/// request service (it is served by the rank, not an endpoint).
pub(super) fn adopt_requests(local: &LocalRank, id: u64, peer: u32) {
    if let Some(engine) = local.dgram.clone() {
        local.registry.accepted();
        local
            .rma
            .adopt(Box::new(DgramServed::new(engine, id, peer)));
        local.registry.wake_all();
    }
}

/// A request connection a peer opened to this rank, as the target serves it (module
/// docs): one request message at a time, read, applied, answered with one message.
#[derive(Debug)]
pub(crate) struct DgramServed {
    engine: Arc<DgramShared>,
    id: u64,
    peer: u32,
    head: [u8; REQUEST_LEN],
    filled: usize,
    bounce: Vec<u8>,
    stage: Stage,
}

/// Where the served connection stands.
#[derive(Debug)]
enum Stage {
    /// Reading a request message's header.
    Header,
    /// Reading a put's data: into the region at `at`, or (refused) dropped.
    Data {
        region: Option<RegionView>,
        at: usize,
        left: usize,
        reply: ReplyRepr,
    },
    /// Writing the reply message (and a get's data from the region: `(region, at, len)`).
    Reply {
        head: [u8; REPLY_LEN],
        data: Option<(RegionView, usize, usize)>,
        sent: usize,
        started: bool,
    },
}

impl DgramServed {
    /// Connection `id` of `engine`, from rank `peer`, to serve.
    pub(crate) fn new(engine: Arc<DgramShared>, id: u64, peer: u32) -> DgramServed {
        DgramServed {
            engine,
            id,
            peer,
            head: [0; REQUEST_LEN],
            filled: 0,
            bounce: Vec::new(),
            stage: Stage::Header,
        }
    }

    /// One step of reading a request header; `Ok(false)`: nothing more now.
    fn step_header(
        &mut self,
        regions: &RegionTable,
        me: Identity,
    ) -> std::result::Result<bool, String> {
        let peer = self.peer;
        let lost = |f: Failure| format!("rank {peer}'s request connection: {f:?}");
        let Some((n, len, complete)) = self
            .engine
            .read_chunk(self.id, &mut self.head[self.filled..])
            .map_err(lost)?
        else {
            return Ok(false);
        };
        self.filled += n;
        if self.filled < REQUEST_LEN {
            if complete {
                return Err(format!("rank {peer} sent a message of {len} bytes"));
            }
            return Ok(n > 0);
        }
        self.filled = 0;
        let (request, checked) = take_request(regions, me, peer, &self.head)?;
        let data = if request.op.carries_data() {
            request.len
        } else {
            0
        };
        if Some(len) != data.checked_add(REQUEST_LEN as u64) {
            regions.request_refused(peer, 0, "a request message of the wrong length");
            return Err(format!("rank {peer}'s request message is {len} bytes"));
        }
        // In bounds of a region (or refused): the length fits a usize once checked.
        let data = usize::try_from(data).map_err(|_| "a request too large".to_string())?;
        self.stage = match next_step(&request, checked) {
            Next::PutData { into, reply, .. } => {
                let (region, at) = into.map_or((None, 0), |(region, at)| (Some(region), at));
                Stage::Data {
                    region,
                    at,
                    left: data,
                    reply,
                }
            }
            Next::Reply { reply, data } => Stage::Reply {
                head: reply.emit(),
                data,
                sent: 0,
                started: false,
            },
        };
        Ok(true)
    }

    /// One step of a put's data; `Ok(false)`: nothing more now.
    fn step_data(&mut self) -> std::result::Result<bool, String> {
        let peer = self.peer;
        let Stage::Data {
            region,
            at,
            left,
            reply,
        } = &mut self.stage
        else {
            return Ok(true);
        };
        if *left == 0 {
            self.stage = Stage::reply(*reply);
            return Ok(true);
        }
        if self.bounce.is_empty() {
            self.bounce = vec![0; BOUNCE_BYTES];
        }
        let want = (*left).min(BOUNCE_BYTES);
        let got = self
            .engine
            .read_chunk(self.id, &mut self.bounce[..want])
            .map_err(|f| format!("rank {peer}'s request connection: {f:?}"))?;
        let n = got.map_or(0, |(n, _, _)| n);
        if let Some(region) = region {
            region
                .write(*at, &self.bounce[..n])
                .map_err(|e| format!("a put checked in bounds was refused: {e:?}"))?;
        }
        *at += n;
        *left -= n;
        Ok(n > 0)
    }

    /// One step of writing the reply; `Ok(false)`: nothing more now.
    fn step_reply(&mut self) -> std::result::Result<bool, String> {
        let peer = self.peer;
        let Stage::Reply {
            head,
            data,
            sent,
            started,
        } = &mut self.stage
        else {
            return Ok(true);
        };
        let data_len = data.as_ref().map_or(0, |d| d.2);
        let total = REPLY_LEN + data_len;
        if *sent == total {
            self.stage = Stage::Header;
            return Ok(true);
        }
        let lost = |f: Failure| format!("rank {peer}'s request connection: {f:?}");
        let n = if *sent < REPLY_LEN {
            self.engine
                .write_chunk(self.id, total as u64, started, &head[*sent..])
                .map_err(lost)?
        } else {
            let Some((region, at, _)) = data else {
                unreachable!("a reply with data left has data")
            };
            let room = self.engine.send_room(self.id);
            let k = (total - *sent).min(BOUNCE_BYTES).min(room);
            if k == 0 {
                return Ok(false);
            }
            if self.bounce.is_empty() {
                self.bounce = vec![0; BOUNCE_BYTES];
            }
            let from = *at + (*sent - REPLY_LEN);
            region
                .read(from, &mut self.bounce[..k])
                .map_err(|e| format!("a get checked in bounds was refused: {e:?}"))?;
            self.engine
                .write_chunk(self.id, total as u64, started, &self.bounce[..k])
                .map_err(lost)?
        };
        *sent += n;
        Ok(n > 0)
    }
}

impl Stage {
    /// Writing `reply`, without data.
    fn reply(reply: ReplyRepr) -> Stage {
        Stage::Reply {
            head: reply.emit(),
            data: None,
            sent: 0,
            started: false,
        }
    }
}

impl Served for DgramServed {
    fn serve(&mut self, regions: &RegionTable, me: Identity) -> std::result::Result<(), String> {
        for _ in 0..SERVE_BUDGET {
            let more = match self.stage {
                Stage::Header => self.step_header(regions, me)?,
                Stage::Data { .. } => self.step_data()?,
                Stage::Reply { .. } => self.step_reply()?,
            };
            if !more {
                break;
            }
        }
        Ok(())
    }

    fn wake(&self) -> Option<libc::pollfd> {
        // Every sleeping call watches the engine's descriptor already.
        None
    }
}

impl Drop for DgramServed {
    fn drop(&mut self) {
        self.engine.close(self.id);
    }
}
