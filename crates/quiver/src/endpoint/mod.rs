//! Endpoints: the addressable points of a job's graph, and everything that moves messages
//! through them (the shared-memory driver).
//!
//! An endpoint owns one inbound ring per peer that connected to it (the peer writes, we
//! read) and one outbound ring per peer it connected to (we write, the peer reads). The
//! protocol is chosen by size on the sending side:
//!
//! - **short**: up to [`quiver_transport::ring::INLINE_BYTES`], inline with the record
//!   header in one cache line;
//! - **eager**: up to `shm_eager_max`, copied into the ring in fragments of at most
//!   `shm_frag_bytes`, so copy-in and copy-out overlap;
//! - **rendezvous**: larger, the ring carries only (address, length) and the receiver pulls
//!   the bytes with one `process_vm_readv` straight into the destination buffer, then
//!   counts the request done so the sender may reuse its buffer.
//!
//! Waiting (for a message, ring space or a rendezvous) busy-polls for `spin`, then sleeps:
//! a receiver on its doorbell eventfd plus the peers' pidfds, a sender on a futex in the
//! ring. Peer death is noticed through pidfds; a peer that breaks the ring protocol is
//! reported as [`Error::Corrupt`] on that connection only.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_transport::notify::{Doorbell, RemoteDoorbell};
use quiver_transport::ring::{Consumer, Kind, Producer, Record, RingError};
use quiver_transport::sys;

use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::pool::{Pool, PooledBuf};
use crate::slab::{Key, Slab};
use crate::transport::dest::Dest;
use crate::transport::failure::{corrupt_detail, Failure};
use crate::transport::inbound_state::InboundState;
use crate::transport::liveness::{DetectionStats, FreezeWatch, Looks, PeerProcess};
use crate::transport::local::LocalRank;
use crate::transport::registry::{Inbox, NewInbound};
use crate::transport::wait::{Wait, SLEEP_SLICE};

mod remote;
use remote::{NetIn, NetOut, NET_BIT};

/// A reliable, ordered, message-preserving directed channel from one of this process's
/// endpoints to a peer endpoint. A cheap handle: copy it freely; it is only valid with the
/// endpoint that created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Connection {
    endpoint_id: u64,
    index: u32,
    peer: Addr,
}

impl Connection {
    /// The address of the endpoint at the other end.
    pub fn peer(&self) -> Addr {
        self.peer
    }
}

/// A send posted with [`Endpoint::post_send`]; complete it with [`Endpoint::wait_send`]
/// (or poll with [`Endpoint::test_send`]). The endpoint holds the buffer until then.
#[derive(Debug)]
#[must_use = "a posted send must be completed with wait_send"]
pub struct SendRequest {
    key: Key,
}

/// A receive posted with [`Endpoint::post_recv`]; complete it with [`Endpoint::wait_recv`].
#[derive(Debug)]
#[must_use = "a posted receive must be completed with wait_recv"]
pub struct RecvRequest {
    key: Key,
}

/// A completed posted receive: the buffer handed back, how many bytes of it the message
/// filled, and who sent it.
#[derive(Debug)]
pub struct RecvCompletion {
    /// The buffer given to `post_recv` (its length unchanged).
    pub buf: Vec<u8>,
    /// Length of the message at the start of `buf`.
    pub len: usize,
    /// The sender.
    pub src: Addr,
}

#[derive(Debug)]
enum SendState {
    Pending,
    Done(Result<Vec<u8>>),
}

#[derive(Debug)]
enum RecvState {
    Pending(Vec<u8>),
    /// Matched to a large tcp message still arriving; its buffer is held by that edge
    /// (`remote::PartialInto::Posted`) until the message is whole.
    Bound,
    Done(Result<RecvCompletion>),
}

#[derive(Debug)]
struct Inbound {
    peer: Addr,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    freeze: FreezeWatch,
    ring: Consumer,
    state: InboundState,
}

#[derive(Debug)]
struct Queued {
    key: Key,
    data: Vec<u8>,
    written: usize,
    started: bool,
}

#[derive(Debug)]
enum InflightOwner {
    Request(Key, Vec<u8>),
    Buffered(Vec<u8>),
    Blocking,
}

#[derive(Debug)]
struct Outbound {
    peer: Addr,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    ring: Producer,
    bell: RemoteDoorbell,
    queue: VecDeque<Queued>,
    inflight: VecDeque<(u64, InflightOwner)>,
    failure: Option<Failure>,
    freeze: FreezeWatch,
}

/// An addressable endpoint `(rank, port)`: sends on its connections and receives from every
/// peer connected to it. Owned by one thread at a time (`Send`, not `Sync`), like a socket.
///
/// Call protocol: [`Endpoint::connect`] to get a [`Connection`]; then any mix of blocking
/// (`send`, `recv`), non-blocking (`try_*`, returning [`Error::WouldBlock`]) and posted
/// (`post_*` + `test_*`/`wait_*`) operations. Posted operations advance whenever any call on
/// the endpoint runs (or [`Endpoint::progress`]). Messages from one connection arrive in
/// order; posted receives are filled in the order they were posted, before `recv` gets any.
pub struct Endpoint {
    id: u64,
    addr: Addr,
    config: Config,
    ctx: Arc<LocalRank>,
    shared: Arc<Inbox>,
    doorbell: Doorbell,
    inbound: Vec<Inbound>,
    next_inbound: usize,
    outbound: Vec<Outbound>,
    by_peer: HashMap<Addr, u32>,
    sends: Slab<SendState>,
    recvs: Slab<RecvState>,
    posted_recvs: VecDeque<Key>,
    /// Queued or in-flight sends over all connections (0: nothing to progress).
    pending_sends: usize,
    pool: Arc<Pool>,
    buffered_bytes: usize,
    pollfds: Vec<libc::pollfd>,
    last_liveness_check: Instant,
    idle_polls: u32,
    /// Outbound network edges (tcp, udp, mem); their connections carry `NET_BIT`.
    net_out: Vec<NetOut>,
    /// Inbound network edges.
    net_in: Vec<NetIn>,
    next_net_in: usize,
    /// A receive polled the datagram engine since the last `progress`.
    engine_polled: bool,
    /// The engine's news count at which no datagram edge had anything to take (see
    /// `remote.rs`, `poll_net`).
    dgram_seen: Option<u64>,
    /// The tcp edge whose large message the blocking `recv` in progress is reading
    /// straight into its buffer (only ever set inside `recv`; see `remote.rs`).
    committed: Option<usize>,
    /// Posted receives bound to a large tcp message still arriving ([`RecvState::Bound`]).
    bound_recvs: usize,
    /// Posted receives handed to the datagram engine ([`RecvState::Bound`]; remote.rs,
    /// `bind_dgram_recvs`): (token, request), in posting order.
    dgram_recvs: VecDeque<(u64, Key)>,
    /// The connection they are on: (engine id, peer, transport name).
    dgram_recvs_on: Option<(u64, Addr, &'static str)>,
    /// The token of the next receive handed to the engine.
    next_recv_token: u64,
    /// The liveness looks: when the next is due, what they cost so far
    /// ([`Endpoint::detection_stats`]).
    detection: Looks,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .field("inbound", &self.inbound.len())
            .field("outbound", &self.outbound.len())
            .finish()
    }
}

impl Endpoint {
    pub(crate) fn new(
        id: u64,
        addr: Addr,
        ctx: Arc<LocalRank>,
        shared: Arc<Inbox>,
        doorbell: Doorbell,
    ) -> Endpoint {
        let config = ctx.config.clone();
        let pool = Pool::new(
            config.pool_buffers,
            config.pool_buffer_bytes,
            config.pool_max_bytes,
        );
        Endpoint {
            id,
            addr,
            config,
            ctx,
            shared,
            doorbell,
            inbound: Vec::new(),
            next_inbound: 0,
            outbound: Vec::new(),
            by_peer: HashMap::new(),
            sends: Slab::new(),
            recvs: Slab::new(),
            posted_recvs: VecDeque::new(),
            pending_sends: 0,
            pool,
            buffered_bytes: 0,
            pollfds: Vec::new(),
            last_liveness_check: Instant::now(),
            idle_polls: 0,
            net_out: Vec::new(),
            net_in: Vec::new(),
            next_net_in: 0,
            engine_polled: false,
            dgram_seen: None,
            committed: None,
            bound_recvs: 0,
            dgram_recvs: VecDeque::new(),
            dgram_recvs_on: None,
            next_recv_token: 0,
            detection: Looks::default(),
        }
    }

    /// How many liveness looks this endpoint has made and how long they took in total:
    /// the cost of failure detection, measured where it is paid (see
    /// [`DetectionStats`]). Take a snapshot before and after a stretch of work and
    /// subtract ([`DetectionStats::since`]).
    pub fn detection_stats(&self) -> DetectionStats {
        self.detection.stats()
    }

    /// This endpoint's address.
    pub fn addr(&self) -> Addr {
        self.addr
    }

    /// Bounds every later blocking call of this endpoint (`send`, `recv*`, `wait_*`): past
    /// `timeout` it returns [`Error::Timeout`]. `None` waits as long as the peers live.
    /// The default is `QUIVER_TIMEOUT_MS`. Costs nothing per message: the clock is read only
    /// once a call has to wait.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.config.op_timeout = timeout;
    }

    /// The bound of blocking calls set by [`Endpoint::set_timeout`] or `QUIVER_TIMEOUT_MS`.
    pub fn timeout(&self) -> Option<Duration> {
        self.config.op_timeout
    }

    /// Sets this endpoint's failure-detection time (`QUIVER_DETECT_MS` sets it for the
    /// whole context): a peer on this node stopped this long while a call waits on it is
    /// reported as [`Error::PeerStopped`], and a waiting call looks at its peers' liveness
    /// at most once per [`DETECTION_MIN`](crate::DETECTION_MIN). `None` turns detection
    /// off: a spinning call makes no looks, a stopped peer is not reported, and a dead one
    /// is noticed once a wait has spent its spin budget (or when its connection fails).
    /// Takes effect at the next call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a time under [`DETECTION_MIN`](crate::DETECTION_MIN).
    pub fn set_detection(&mut self, detect: Option<Duration>) -> Result<()> {
        if detect.is_some_and(|detect| detect < crate::DETECTION_MIN) {
            return Err(Error::InvalidArgument(format!(
                "failure detection time {detect:?}: must be at least {:?} (or None: off)",
                crate::DETECTION_MIN
            )));
        }
        self.config.detect = detect;
        Ok(())
    }

    /// The failure-detection time set by [`Endpoint::set_detection`] or `QUIVER_DETECT_MS`
    /// (`None`: off).
    pub fn detection(&self) -> Option<Duration> {
        self.config.detect
    }

    /// Number of peers currently connected to this endpoint (inbound edges).
    pub fn inbound_count(&mut self) -> usize {
        self.adopt_new_inbound();
        let shm = self
            .inbound
            .iter()
            .filter(|i| i.state != InboundState::Done)
            .count();
        if let Some(engine) = &self.ctx.dgram {
            engine.poll_io(&self.ctx);
            self.adopt_new_inbound();
        }
        shm + self
            .net_in
            .iter_mut()
            .map(|i| usize::from(i.is_live()))
            .sum::<usize>()
    }

    /// Opens (or returns the existing) connection from this endpoint to `peer`, waiting up
    /// to the configured connect timeout for the peer's endpoint to appear.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a rank outside the job, [`Error::Refused`] when the
    /// peer rejects us (wrong job key, no such endpoint in time), [`Error::Timeout`],
    /// [`Error::Io`].
    pub fn connect(&mut self, peer: Addr) -> Result<Connection> {
        if let Some(&index) = self.by_peer.get(&peer) {
            if index & NET_BIT != 0 {
                let out = &self.net_out[(index & !NET_BIT) as usize];
                if out.failure.is_none() {
                    return Ok(Connection {
                        endpoint_id: self.id,
                        index,
                        peer,
                    });
                }
            } else if self.outbound[index as usize].failure.is_none() {
                return Ok(self.connection(index));
            }
        }
        if peer.rank >= self.ctx.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} is not in this job of {} ranks",
                peer.rank, self.ctx.size
            )));
        }
        let local = self.ctx.peer_is_local(peer.rank);
        let mut last = None;
        for kind in self.config.transports.clone() {
            let attempt = match kind {
                TransportKind::Shm if local => self.connect_shm(peer),
                TransportKind::Shm => continue,
                _ if self.ctx.addrs.is_empty() => continue,
                TransportKind::Udp | TransportKind::Mem if self.ctx.dgram_kind() != Some(kind) => {
                    continue
                }
                _ => self.connect_net(kind, peer),
            };
            match attempt {
                Ok(conn) => return Ok(conn),
                Err(e @ (Error::Refused { .. } | Error::Timeout { .. } | Error::Io { .. })) => {
                    last = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::Config(format!(
                "no transport in QUIVER_TRANSPORTS={} can reach rank {}: shm needs the peer on \
                 this node, udp and tcp need QUIVER_ADDRS",
                self.config
                    .transports
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(","),
                peer.rank
            ))
        }))
    }

    fn connect_shm(&mut self, peer: Addr) -> Result<Connection> {
        let new = crate::transport::shm::connect::connect(&self.ctx, self.addr, peer)?;
        let index = self.outbound.len() as u32;
        self.outbound.push(Outbound {
            peer,
            pid: new.pid,
            pidfd: new.pidfd,
            ring: new.ring,
            bell: new.bell,
            queue: VecDeque::new(),
            inflight: VecDeque::new(),
            failure: None,
            freeze: FreezeWatch::default(),
        });
        self.by_peer.insert(peer, index);
        tracing::info!(from = %self.addr, to = %peer, transport = "shm", "connected");
        Ok(self.connection(index))
    }

    fn connection(&self, index: u32) -> Connection {
        Connection {
            endpoint_id: self.id,
            index,
            peer: self.outbound[index as usize].peer,
        }
    }

    fn outbound_index(&self, conn: Connection) -> Result<usize> {
        if conn.endpoint_id != self.id || conn.index as usize >= self.outbound.len() {
            return Err(Error::InvalidArgument(format!(
                "connection to {} does not belong to endpoint {}",
                conn.peer, self.addr
            )));
        }
        let out = &self.outbound[conn.index as usize];
        match &out.failure {
            Some(f) => Err(f.to_error(out.peer, "before sending")),
            None => Ok(conn.index as usize),
        }
    }

    // ----- sending -------------------------------------------------------------------

    /// Sends `data` as one message, blocking until it is in the ring (short/eager) or the
    /// receiver has pulled it (rendezvous). Earlier posted sends on `conn` go first.
    /// Over a network connection it blocks until the transport took the message, and
    /// receives meanwhile: posted receives advance, and tcp edges are read ahead into
    /// internal buffers (at most `max_buffered_bytes`), so two ranks sending each other
    /// large messages do not wait on each other within that bound.
    ///
    /// # Errors
    /// A peer error of this connection ([`Error::PeerDead`], [`Error::PeerClosed`],
    /// [`Error::Corrupt`]) or [`Error::Timeout`] when `op_timeout` is set.
    pub fn send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        if Endpoint::is_net(conn) {
            return self.net_send(conn, data);
        }
        let idx = self.outbound_index(conn)?;
        let mut wait = Wait::new(&self.config);
        while !self.outbound[idx].queue.is_empty() {
            self.progress_out(idx)?;
            if self.outbound[idx].queue.is_empty() {
                break;
            }
            self.wait_out(idx, &mut wait, "flushing earlier sends")?;
        }
        let result = if data.len() as u64 <= self.config.shm_eager_max {
            self.send_eager_blocking(idx, data, &mut wait)
        } else {
            self.send_rndv_blocking(idx, data, &mut wait)
        };
        if wait.seen.is_some() {
            // We announced a wait the condition then made unnecessary.
            self.outbound[idx].ring.end_wait();
        }
        result
    }

    fn send_eager_blocking(&mut self, idx: usize, data: &[u8], wait: &mut Wait) -> Result<()> {
        let frag = self.config.shm_frag_bytes as usize;
        let (mut written, mut started) = (0, false);
        loop {
            let out = &mut self.outbound[idx];
            let done = write_eager(out, data, &mut written, &mut started, frag);
            match done {
                Ok(true) => return Ok(()),
                Ok(false) => self.wait_out(idx, wait, "waiting for ring space")?,
                Err(e) => return Err(self.fail_out(idx, corrupt(e), "while sending")),
            }
        }
    }

    fn send_rndv_blocking(&mut self, idx: usize, data: &[u8], wait: &mut Wait) -> Result<()> {
        let seq = loop {
            let out = &mut self.outbound[idx];
            match out
                .ring
                .try_write_rndv(data.as_ptr() as u64, data.len() as u64)
            {
                Ok(Some(seq)) => {
                    out.bell.ring();
                    out.inflight.push_back((seq, InflightOwner::Blocking));
                    self.pending_sends += 1;
                    break seq;
                }
                Ok(None) => self.wait_out(idx, wait, "waiting for ring space")?,
                Err(e) => return Err(self.fail_out(idx, corrupt(e), "while sending")),
            }
        };
        let mut helped = false;
        loop {
            let done = match self.outbound[idx].ring.rndv_completed() {
                Ok(d) => d,
                Err(e) => return Err(self.fail_out(idx, corrupt(e), "while sending")),
            };
            if done >= seq {
                self.progress_out(idx)?;
                return Ok(());
            }
            if !helped && done + 1 == seq {
                helped = help_split(
                    &self.outbound[idx],
                    seq,
                    data.as_ptr() as u64,
                    data.len() as u64,
                );
                if helped {
                    continue;
                }
            }
            if let Err(e) = self.wait_out(
                idx,
                wait,
                "waiting for the receiver to take a large message",
            ) {
                // A receiver that took the message and then exited is not a failure.
                if self.outbound[idx]
                    .ring
                    .rndv_completed()
                    .is_ok_and(|done| done >= seq)
                {
                    return Ok(());
                }
                // The receiver may still read `data` later: this connection cannot be used
                // safely any more.
                if matches!(e, Error::Timeout { .. }) {
                    self.fail_out(idx, Failure::TimedOut, "while sending");
                }
                return Err(e);
            }
        }
    }

    /// Sends `data` only if that needs no waiting. Short and eager messages must fit in the
    /// ring now; larger ones are copied into an internal buffer and sent by rendezvous
    /// (bounded by `max_buffered_bytes`).
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when it would have to wait (the message was not sent), or a
    /// peer error of the connection.
    pub fn try_send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        if Endpoint::is_net(conn) {
            return self.net_try_send(conn, data);
        }
        let idx = self.outbound_index(conn)?;
        if !self.outbound[idx].queue.is_empty() || !self.outbound[idx].inflight.is_empty() {
            self.progress_out(idx)?;
            if !self.outbound[idx].queue.is_empty() {
                return Err(Error::WouldBlock);
            }
        }
        let len = data.len() as u64;
        if len <= self.config.shm_eager_max {
            let frag = self.config.shm_frag_bytes;
            let out = &mut self.outbound[idx];
            match out.ring.fits(frag_lens(len, frag)) {
                Ok(true) => {}
                Ok(false) => return Err(Error::WouldBlock),
                Err(e) => return Err(self.fail_out(idx, corrupt(e), "while sending")),
            }
            let (mut written, mut started) = (0, false);
            match write_eager(out, data, &mut written, &mut started, frag as usize) {
                Ok(true) => Ok(()),
                Ok(false) => unreachable!("space was checked just above"),
                Err(e) => Err(self.fail_out(idx, corrupt(e), "while sending")),
            }
        } else {
            if self.buffered_bytes + data.len() > self.config.max_buffered_bytes {
                return Err(Error::WouldBlock);
            }
            let mut copy = self.pool.take(data.len());
            copy.copy_from_slice(data);
            let out = &mut self.outbound[idx];
            match out.ring.try_write_rndv(copy.as_ptr() as u64, len) {
                Ok(Some(seq)) => {
                    out.bell.ring();
                    self.buffered_bytes += copy.len();
                    out.inflight.push_back((seq, InflightOwner::Buffered(copy)));
                    self.pending_sends += 1;
                    Ok(())
                }
                Ok(None) => {
                    self.pool.give(copy);
                    Err(Error::WouldBlock)
                }
                Err(e) => Err(self.fail_out(idx, corrupt(e), "while sending")),
            }
        }
    }

    /// Starts sending `data` without waiting; the endpoint owns the buffer until the send
    /// completes (large messages are sent from it directly, with no copy).
    ///
    /// # Errors
    /// A peer error if the connection already failed.
    pub fn post_send(&mut self, conn: Connection, data: Vec<u8>) -> Result<SendRequest> {
        if Endpoint::is_net(conn) {
            return self.net_post_send(conn, data);
        }
        let idx = self.outbound_index(conn)?;
        let out = &mut self.outbound[idx];
        if out.queue.is_empty() && data.len() as u64 <= self.config.shm_frag_bytes {
            // One record on an idle connection: write it now, no queueing.
            match out.ring.try_write(Kind::Msg, data.len() as u64, &data) {
                Ok(true) => {
                    out.bell.ring();
                    let key = self.sends.insert(SendState::Done(Ok(data)));
                    return Ok(SendRequest { key });
                }
                Ok(false) => {}
                Err(e) => return Err(self.fail_out(idx, corrupt(e), "while sending")),
            }
        }
        let key = self.sends.insert(SendState::Pending);
        self.outbound[idx].queue.push_back(Queued {
            key,
            data,
            written: 0,
            started: false,
        });
        self.pending_sends += 1;
        self.progress_out(idx)?;
        Ok(SendRequest { key })
    }

    /// Whether a posted send has completed (advancing progress first).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a request of another endpoint.
    pub fn test_send(&mut self, req: &SendRequest) -> Result<bool> {
        self.progress()?;
        match self.sends.get_mut(req.key) {
            Some(SendState::Pending) => Ok(false),
            Some(SendState::Done(_)) => Ok(true),
            None => Err(Error::InvalidArgument("unknown send request".into())),
        }
    }

    /// Waits for a posted send to complete and hands its buffer back.
    ///
    /// # Errors
    /// The connection's error if it failed before the message was delivered.
    pub fn wait_send(&mut self, req: SendRequest) -> Result<Vec<u8>> {
        let mut wait = Wait::new(&self.config);
        loop {
            match self.sends.get_mut(req.key) {
                Some(SendState::Done(_)) => {
                    return match self.sends.remove(req.key) {
                        Some(SendState::Done(r)) => r,
                        _ => unreachable!("checked just above"),
                    }
                }
                Some(SendState::Pending) => {}
                None => return Err(Error::InvalidArgument("unknown send request".into())),
            }
            self.progress()?;
            if let Some(SendState::Pending) = self.sends.get_mut(req.key) {
                // The peer may be blocked sending to us: take what it sent, within bounds.
                self.tcp_read_ahead();
                self.idle(&mut wait, "waiting for a posted send")?;
            }
        }
    }

    /// Advances every posted operation once, without waiting.
    ///
    /// # Errors
    /// None today beyond those recorded in the requests themselves; reserved.
    pub fn progress(&mut self) -> Result<()> {
        if let Some(engine) = &self.ctx.dgram {
            // Acknowledgements, retransmissions and keepalives run whenever the API is used
            // (once per round of a polling loop: a receive that just polled is enough).
            if !std::mem::take(&mut self.engine_polled) {
                engine.poll_io(&self.ctx);
            }
        }
        if self.pending_sends > 0 {
            for idx in 0..self.outbound.len() {
                let out = &self.outbound[idx];
                if out.queue.is_empty() && out.inflight.is_empty() {
                    continue;
                }
                // Failures are recorded in the requests of that connection.
                let _ = self.progress_out(idx);
            }
            for idx in 0..self.net_out.len() {
                // Failures are recorded in the requests of that connection.
                let _ = self.progress_net_out(idx);
            }
        }
        if self.bound_recvs > 0 {
            self.progress_bound_recvs();
        }
        if !self.dgram_recvs.is_empty() {
            self.progress_dgram_recvs();
        }
        if !self.posted_recvs.is_empty() {
            self.progress_recvs();
        }
        Ok(())
    }

    /// Pushes queued sends of connection `idx` into its ring and completes finished
    /// rendezvous requests.
    fn progress_out(&mut self, idx: usize) -> Result<()> {
        let eager_max = self.config.shm_eager_max as usize;
        let frag = self.config.shm_frag_bytes as usize;
        let out = &mut self.outbound[idx];
        if let Some(f) = &out.failure {
            return Err(f.to_error(out.peer, "while sending"));
        }
        let step = (|| -> std::result::Result<(), RingError> {
            if !out.inflight.is_empty() {
                let done = out.ring.rndv_completed()?;
                while out.inflight.front().is_some_and(|(seq, _)| *seq <= done) {
                    if let Some((_, owner)) = out.inflight.pop_front() {
                        self.pending_sends -= 1;
                        match owner {
                            InflightOwner::Request(key, data) => {
                                if let Some(s) = self.sends.get_mut(key) {
                                    *s = SendState::Done(Ok(data));
                                }
                            }
                            InflightOwner::Buffered(data) => {
                                self.buffered_bytes -= data.len();
                                self.pool.give(data);
                            }
                            InflightOwner::Blocking => {}
                        }
                    }
                }
            }
            if let Some((seq, InflightOwner::Request(_, data) | InflightOwner::Buffered(data))) =
                out.inflight.front()
            {
                help_split(out, *seq, data.as_ptr() as u64, data.len() as u64);
            }
            let mut wrote = false;
            while let Some(q) = out.queue.front_mut() {
                if q.data.len() <= eager_max {
                    let complete = write_eager_raw(
                        &mut out.ring,
                        &q.data,
                        &mut q.written,
                        &mut q.started,
                        frag,
                    )?;
                    wrote |= q.started;
                    if !complete {
                        break;
                    }
                    if let Some(q) = out.queue.pop_front() {
                        self.pending_sends -= 1;
                        if let Some(s) = self.sends.get_mut(q.key) {
                            *s = SendState::Done(Ok(q.data));
                        }
                    }
                } else {
                    match out
                        .ring
                        .try_write_rndv(q.data.as_ptr() as u64, q.data.len() as u64)?
                    {
                        Some(seq) => {
                            wrote = true;
                            if let Some(q) = out.queue.pop_front() {
                                out.inflight
                                    .push_back((seq, InflightOwner::Request(q.key, q.data)));
                            }
                        }
                        None => break,
                    }
                }
            }
            if wrote {
                out.bell.ring();
            }
            Ok(())
        })();
        match step {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail_out(idx, corrupt(e), "while sending")),
        }
    }

    /// Marks connection `idx` failed, fails its pending requests, and returns the error.
    fn fail_out(&mut self, idx: usize, failure: Failure, during: &'static str) -> Error {
        let out = &mut self.outbound[idx];
        let peer = out.peer;
        if out.failure.is_none() {
            out.failure = Some(failure.clone());
            while let Some(q) = out.queue.pop_front() {
                self.pending_sends -= 1;
                if let Some(s) = self.sends.get_mut(q.key) {
                    *s = SendState::Done(Err(failure.to_error(peer, during)));
                }
            }
            while let Some((_, owner)) = out.inflight.pop_front() {
                self.pending_sends -= 1;
                match owner {
                    InflightOwner::Request(key, _) => {
                        if let Some(s) = self.sends.get_mut(key) {
                            *s = SendState::Done(Err(failure.to_error(peer, during)));
                        }
                    }
                    InflightOwner::Buffered(data) => self.buffered_bytes -= data.len(),
                    InflightOwner::Blocking => {}
                }
            }
            out.ring.close();
        }
        failure.to_error(peer, during)
    }

    /// One step of waiting on connection `idx` (ring space or a rendezvous completion):
    /// spin, and once the spin budget is spent, sleep on the ring's futex.
    fn wait_out(&mut self, idx: usize, wait: &mut Wait, what: &'static str) -> Result<()> {
        let (spinning, periodic) = wait.spinning(self.config.spin);
        if periodic {
            self.flush_inbound();
            let detect = self.config.detect;
            if detect.is_some_and(|detect| wait.liveness_due(&mut self.detection, detect)) {
                let started = Instant::now();
                let alive = self.check_out_alive(idx, what);
                self.detection.record(started);
                alive?;
            }
            wait.check_deadline(what)?;
        }
        if spinning {
            std::hint::spin_loop();
            return Ok(());
        }
        let out = &self.outbound[idx];
        match wait.seen.take() {
            // First call after the spin: announce the wait; the caller re-checks once.
            None => wait.seen = Some(out.ring.prepare_wait()),
            Some(seen) => {
                out.ring.wait(seen, SLEEP_SLICE);
                out.ring.end_wait();
                let started = Instant::now();
                let alive = self.check_out_alive(idx, what);
                self.detection.record(started);
                alive?;
                wait.check_deadline(what)?;
            }
        }
        Ok(())
    }

    fn check_out_alive(&mut self, idx: usize, what: &'static str) -> Result<()> {
        let detect = self.config.detect;
        let out = &mut self.outbound[idx];
        if let Some(f) = &out.failure {
            return Err(f.to_error(out.peer, what));
        }
        let closed = out.ring.consumer_closed();
        if !closed && !sys::pidfd_exited(&out.pidfd) {
            if let Some(detect) = detect {
                if let Some(ms) = out.freeze.stopped(out.pid, detect, Instant::now()) {
                    // Whatever it completed before it stopped still counts.
                    self.progress_out(idx)?;
                    return Err(self.fail_out(idx, Failure::Stopped("shm", ms), what));
                }
            }
            return Ok(());
        }
        // The receiver is gone, but it may have finished our requests first: harvest
        // every completion it published before failing what is left.
        self.progress_out(idx)?;
        let failure = if closed {
            Failure::Closed
        } else {
            Failure::Dead
        };
        Err(self.fail_out(idx, failure, what))
    }

    // ----- receiving -----------------------------------------------------------------

    /// Receives the next message from any connected peer into `buf`, blocking until one
    /// arrives. Returns its length and sender.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] (the message stays queued), a peer error of one inbound
    /// connection (reported once; the others keep working), [`Error::Timeout`].
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        let mut wait = Wait::new(&self.config);
        loop {
            if self.posted_recvs.is_empty() {
                // One tcp or datagram edge alone takes a short path (remote.rs,
                // `look_lone_tcp`, `look_lone_dgram`).
                let looked = match self.look_lone_tcp(buf) {
                    Some(looked) => looked,
                    None => match self.look_lone_dgram(buf) {
                        Some(looked) => looked,
                        None => self.poll_once(&mut Dest::Slice(buf), true),
                    },
                };
                match looked {
                    Ok(Some(got)) => return Ok(got),
                    Ok(None) => {}
                    Err(e) => return Err(self.uncommit(buf, e)),
                }
            }
            self.progress()?;
            if let Err(e) = self.idle(&mut wait, "waiting for a message") {
                return Err(self.uncommit(buf, e));
            }
        }
    }

    /// Receives a message into `buf` if one is complete now.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if none is waiting (to sleep until one arrives, see
    /// [`Endpoint::arm`]); otherwise as [`Endpoint::recv`].
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        self.progress()?;
        if self.posted_recvs.is_empty() {
            if let Some(got) = self.poll_once(&mut Dest::Slice(buf), false)? {
                return Ok(got);
            }
        }
        self.would_block()
    }

    /// Receives the next message into a buffer from the endpoint's pool, blocking; the
    /// buffer returns to the pool when the [`PooledBuf`] is dropped.
    ///
    /// # Errors
    /// As [`Endpoint::recv`], without `BufferTooSmall`.
    pub fn recv_pooled(&mut self) -> Result<PooledBuf> {
        let mut wait = Wait::new(&self.config);
        let mut buf = self.pool.take(0);
        loop {
            if self.posted_recvs.is_empty() {
                if let Some((_, src)) = self.poll_once(&mut Dest::Owned(&mut buf), true)? {
                    return Ok(PooledBuf::new(buf, src, self.pool.clone()));
                }
            }
            self.progress()?;
            self.idle(&mut wait, "waiting for a message")?;
        }
    }

    /// Non-blocking [`Endpoint::recv_pooled`].
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if no complete message is waiting.
    pub fn try_recv_pooled(&mut self) -> Result<PooledBuf> {
        self.progress()?;
        if self.posted_recvs.is_empty() {
            let mut buf = self.pool.take(0);
            if let Some((_, src)) = self.poll_once(&mut Dest::Owned(&mut buf), false)? {
                return Ok(PooledBuf::new(buf, src, self.pool.clone()));
            }
            self.pool.give(buf);
        }
        self.would_block()
    }

    fn would_block<T>(&mut self) -> Result<T> {
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if self.idle_polls.is_multiple_of(256) {
            // Nothing is arriving: let senders see the space we freed, and notice dead peers.
            self.flush_inbound();
            if self.config.detect.is_some() {
                self.check_liveness_throttled();
            }
        }
        Err(Error::WouldBlock)
    }

    /// Prepares the endpoint's descriptor ([`AsRawFd`]) for poll/epoll: after `arm`
    /// returns `Ok(true)`, the descriptor becomes readable as soon as a message arrives (or a
    /// peer connects). `Ok(false)` means something is already waiting: receive it instead of
    /// sleeping. While the endpoint is armed each arriving message costs its sender one
    /// system call, so arm only before sleeping.
    ///
    /// # Errors
    /// None today; reserved.
    pub fn arm(&mut self) -> Result<bool> {
        self.flush_inbound();
        self.doorbell.drain();
        self.doorbell.arm();
        if self.shared.has_incoming.load(Ordering::Relaxed) {
            return Ok(false);
        }
        for inb in &mut self.inbound {
            if inb.state != InboundState::Done && !matches!(inb.ring.peek(), Ok(None)) {
                return Ok(false);
            }
        }
        if self.net_pending() {
            return Ok(false);
        }
        Ok(true)
    }

    /// Posts a receive: the next message (from any peer) not claimed by an earlier posted
    /// receive goes into `buf` (up to `buf.len()` bytes).
    ///
    /// # Errors
    /// None today; reserved.
    pub fn post_recv(&mut self, buf: Vec<u8>) -> Result<RecvRequest> {
        let key = self.recvs.insert(RecvState::Pending(buf));
        self.posted_recvs.push_back(key);
        self.progress_recvs();
        Ok(RecvRequest { key })
    }

    /// Whether a posted receive has completed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a request of another endpoint.
    pub fn test_recv(&mut self, req: &RecvRequest) -> Result<bool> {
        self.progress()?;
        match self.recvs.get_mut(req.key) {
            Some(RecvState::Pending(_) | RecvState::Bound) => Ok(false),
            Some(RecvState::Done(_)) => Ok(true),
            None => Err(Error::InvalidArgument("unknown receive request".into())),
        }
    }

    /// Waits for a posted receive.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] (the buffer is dropped, the message stays queued) or a
    /// peer error that occurred while this receive was first in line.
    pub fn wait_recv(&mut self, req: RecvRequest) -> Result<RecvCompletion> {
        let mut wait = Wait::new(&self.config);
        loop {
            self.progress()?;
            match self.recvs.get_mut(req.key) {
                Some(RecvState::Done(_)) => {
                    return match self.recvs.remove(req.key) {
                        Some(RecvState::Done(r)) => r,
                        _ => unreachable!("checked just above"),
                    }
                }
                Some(RecvState::Pending(_) | RecvState::Bound) => {}
                None => return Err(Error::InvalidArgument("unknown receive request".into())),
            }
            self.idle(&mut wait, "waiting for a posted receive")?;
        }
    }

    fn progress_recvs(&mut self) {
        // On an endpoint whose one inbound edge is a datagram connection, the engine takes
        // the posted receives' buffers (frames go straight into them).
        self.bind_dgram_recvs();
        while let Some(&key) = self.posted_recvs.front() {
            let mut buf = match self.recvs.get_mut(key) {
                Some(RecvState::Pending(buf)) => std::mem::take(buf),
                _ => {
                    self.posted_recvs.pop_front();
                    continue;
                }
            };
            let mut dest = Dest::Posted {
                key,
                buf: &mut buf,
                bound: false,
            };
            let result = self.poll_once(&mut dest, false);
            if let Dest::Posted { bound: true, .. } = dest {
                // Matched to a large tcp message, which now holds the buffer; the next
                // posted receive may take the next message.
                self.posted_recvs.pop_front();
                continue;
            }
            let state = match result {
                Ok(None) => {
                    if let Some(RecvState::Pending(b)) = self.recvs.get_mut(key) {
                        *b = buf;
                    }
                    return;
                }
                Ok(Some((len, src))) => RecvState::Done(Ok(RecvCompletion { buf, len, src })),
                Err(e) => RecvState::Done(Err(e)),
            };
            if let Some(s) = self.recvs.get_mut(key) {
                *s = state;
            }
            self.posted_recvs.pop_front();
        }
    }

    /// Looks once at every inbound ring (round robin) for a message to deliver into `dest`.
    /// With `wait`, a multi-fragment message that has begun is waited for to its end.
    fn poll_once(&mut self, dest: &mut Dest<'_>, wait: bool) -> Result<Option<(usize, Addr)>> {
        if self.committed.is_some() {
            // This `recv` is in the middle of a large tcp message: nothing else goes in.
            return self.poll_net(dest, wait);
        }
        if self.shared.has_incoming.load(Ordering::Relaxed) {
            self.adopt_new_inbound();
        }
        let n = self.inbound.len();
        for k in 0..n {
            let mut i = self.next_inbound + k;
            if i >= n {
                i -= n;
            }
            match &self.inbound[i].state {
                InboundState::Done => continue,
                InboundState::Broken(detail) => {
                    let err = corrupt_detail(self.inbound[i].peer, detail);
                    self.inbound[i].state = InboundState::Done;
                    return Err(err);
                }
                InboundState::Open | InboundState::Dying | InboundState::Stopped(_) => {}
            }
            match self.take_from(i, dest, wait) {
                Ok(Some(len)) => {
                    self.next_inbound = if i + 1 == n { 0 } else { i + 1 };
                    return Ok(Some((len, self.inbound[i].peer)));
                }
                Ok(None) => {
                    let inb = &mut self.inbound[i];
                    match inb.state {
                        InboundState::Dying => {
                            inb.state = InboundState::Done;
                            tracing::warn!(endpoint = %self.addr, peer = %inb.peer, transport = "shm", "peer died without closing its connection");
                            return Err(Error::PeerDead {
                                peer: inb.peer,
                                during: "while receiving",
                            });
                        }
                        InboundState::Stopped(stopped_ms) => {
                            inb.state = InboundState::Done;
                            inb.ring.close();
                            return Err(Error::PeerStopped {
                                peer: inb.peer,
                                transport: "shm",
                                during: "while receiving",
                                stopped_ms,
                            });
                        }
                        _ => {}
                    }
                }
                Err(e @ Error::BufferTooSmall { .. }) => return Err(e),
                Err(e) => {
                    let inb = &mut self.inbound[i];
                    inb.state = InboundState::Done;
                    inb.ring.close();
                    return Err(e);
                }
            }
        }
        if self.net_in.is_empty() && self.ctx.dgram.is_none() {
            return Ok(None);
        }
        self.poll_net(dest, wait)
    }

    /// Takes the next message of inbound ring `i` into `dest`, if there is one.
    fn take_from(&mut self, i: usize, dest: &mut Dest<'_>, wait: bool) -> Result<Option<usize>> {
        let inb = &mut self.inbound[i];
        let peer = inb.peer;
        let rec = match inb.ring.peek() {
            Ok(Some(rec)) => rec,
            Ok(None) => return Ok(None),
            Err(e) => return Err(ring_error(peer, e)),
        };
        match rec.kind {
            Kind::Msg => self.take_eager(i, rec, dest, wait),
            Kind::Rndv => {
                let (addr, len) = inb.ring.rndv_target(&rec);
                if len != rec.total_len {
                    return Err(corrupt_detail(
                        peer,
                        "rendezvous length disagrees with its header",
                    ));
                }
                let buf = dest.prepare(len)?;
                let seq = inb.ring.next_rndv_seq();
                // Large copies are shared with the sender: it pushes the second part with
                // process_vm_writev while we pull the first, so both cores copy at once.
                let split = if len >= SPLIT_MIN_BYTES {
                    (len / 2) & !(SPLIT_ALIGN - 1)
                } else {
                    len
                };
                if split < len {
                    inb.ring.post_cts(seq, buf.as_ptr() as u64, split, len);
                }
                let (first, second) = buf.split_at_mut(split as usize);
                pull(inb.pid, peer, first, addr)?;
                if !second.is_empty() {
                    let sender_copies = !inb.ring.claim_second_part(seq);
                    // While the sender writes `second` from its side, nothing here touches
                    // it; we only return once it reported completion.
                    if !sender_copies
                        || !wait_second_part(inb, seq, &self.config, &mut self.detection)?
                    {
                        pull(inb.pid, peer, second, addr + split)?;
                    }
                }
                inb.ring.consume(&rec);
                inb.ring.complete_rndv();
                Ok(Some(len as usize))
            }
            Kind::Close => {
                inb.ring.consume(&rec);
                inb.ring.flush();
                inb.state = InboundState::Done;
                Ok(None)
            }
            Kind::Cont | Kind::Pad => Err(corrupt_detail(peer, "fragment without a message start")),
        }
    }

    fn take_eager(
        &mut self,
        i: usize,
        first: Record,
        dest: &mut Dest<'_>,
        wait: bool,
    ) -> Result<Option<usize>> {
        let spin = self.config.spin;
        let op_timeout = self.config.op_timeout;
        let detect = self.config.detect;
        let inb = &mut self.inbound[i];
        let peer = inb.peer;
        let total = first.total_len;
        if total > inb.ring.capacity() {
            return Err(corrupt_detail(peer, "eager message larger than its ring"));
        }
        if first.frag_len < total
            && !wait
            && !all_fragments_present(&inb.ring, &first).map_err(|e| ring_error(peer, e))?
        {
            return Ok(None);
        }
        let buf = dest.prepare(total)?;
        let mut filled = first.frag_len as usize;
        inb.ring.copy_payload(&first, &mut buf[..filled]);
        inb.ring.consume(&first);
        let mut waited = Wait::with_timeout(op_timeout);
        while (filled as u64) < total {
            match inb.ring.peek().map_err(|e| ring_error(peer, e))? {
                Some(rec) if rec.kind == Kind::Cont && filled as u64 + rec.frag_len <= total => {
                    let end = filled + rec.frag_len as usize;
                    inb.ring.copy_payload(&rec, &mut buf[filled..end]);
                    inb.ring.consume(&rec);
                    filled = end;
                }
                Some(_) => {
                    return Err(corrupt_detail(
                        peer,
                        "message interrupted by another record",
                    ))
                }
                None => {
                    // The sender is mid-message: it is writing the rest right now.
                    inb.ring.flush();
                    wait_on_sender(
                        inb,
                        &mut waited,
                        (spin, detect, &mut self.detection),
                        "in the middle of a message",
                        "waiting for the rest of a message",
                    )?;
                }
            }
        }
        Ok(Some(total as usize))
    }

    /// Adopts the inbound connections the listener accepted for this endpoint.
    fn adopt_new_inbound(&mut self) {
        if !self.shared.has_incoming.swap(false, Ordering::Acquire) {
            return;
        }
        let mut incoming = self
            .shared
            .incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for NewInbound {
            peer,
            pid,
            pidfd,
            ring,
        } in incoming.drain(..)
        {
            tracing::debug!(endpoint = %self.addr, %peer, transport = "shm", "peer connected");
            self.inbound.push(Inbound {
                peer,
                pid,
                pidfd,
                freeze: FreezeWatch::default(),
                ring,
                state: InboundState::Open,
            });
        }
        drop(incoming);
        let net: Vec<_> = self
            .shared
            .incoming_net
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for inbound in net {
            self.adopt_net(inbound);
        }
    }

    /// Publishes consumed ring space to every sender.
    fn flush_inbound(&mut self) {
        for inb in &mut self.inbound {
            inb.ring.flush();
        }
    }

    // ----- waiting and liveness --------------------------------------------------------

    /// One step of a blocking receive-side wait: spin, then arm the doorbell and re-check,
    /// then sleep on the doorbell and the peers' pidfds.
    fn idle(&mut self, wait: &mut Wait, what: &'static str) -> Result<()> {
        let (spinning, periodic) = wait.spinning(self.config.spin);
        if periodic {
            self.flush_inbound();
            let detect = self.config.detect;
            if detect.is_some_and(|detect| wait.liveness_due(&mut self.detection, detect)) {
                self.check_liveness();
            }
            wait.check_deadline(what)?;
        }
        if spinning {
            std::hint::spin_loop();
            return Ok(());
        }
        if !wait.armed {
            // Arm, then let the caller look once more before we sleep.
            self.flush_inbound();
            self.doorbell.drain();
            self.doorbell.arm();
            wait.armed = true;
            return Ok(());
        }
        let deadline = wait.deadline();
        self.sleep(deadline);
        wait.armed = false;
        self.doorbell.drain();
        self.check_liveness();
        self.verify_inbound();
        wait.check_deadline(what)?;
        // Spin again after a wake-up: more traffic usually follows.
        wait.restart();
        Ok(())
    }

    fn sleep(&mut self, deadline: Option<Instant>) {
        self.pollfds.clear();
        self.pollfds.push(libc::pollfd {
            fd: self.doorbell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for inb in &self.inbound {
            if inb.state == InboundState::Open {
                self.pollfds.push(libc::pollfd {
                    fd: inb.pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        let mut slice = SLEEP_SLICE;
        if let Some(timer) = self.net_pollfds() {
            slice = slice.min(timer);
        }
        if let Some(d) = deadline {
            slice = slice.min(d.saturating_duration_since(Instant::now()));
        }
        let _ = sys::poll(&mut self.pollfds, Some(slice));
    }

    fn check_liveness_throttled(&mut self) {
        if self.last_liveness_check.elapsed() >= Duration::from_millis(10) {
            self.check_liveness();
        }
    }

    /// Notices peers that exited: inbound ones are drained and then reported; outbound
    /// ones fail their pending sends.
    fn check_liveness(&mut self) {
        let now = Instant::now();
        self.last_liveness_check = now;
        let detect = self.config.detect;
        for inb in &mut self.inbound {
            if inb.state != InboundState::Open {
                continue;
            }
            if sys::pidfd_exited(&inb.pidfd) {
                tracing::debug!(endpoint = %self.addr, peer = %inb.peer, transport = "shm", "peer process exited");
                inb.state = InboundState::Dying;
            } else if let Some(ms) = detect.and_then(|d| inb.freeze.stopped(inb.pid, d, now)) {
                tracing::warn!(endpoint = %self.addr, peer = %inb.peer, transport = "shm", stopped_ms = ms, "peer stopped");
                inb.state = InboundState::Stopped(ms);
            }
        }
        for idx in 0..self.outbound.len() {
            let out = &mut self.outbound[idx];
            if out.failure.is_some() || (out.queue.is_empty() && out.inflight.is_empty()) {
                continue;
            }
            let failure = if sys::pidfd_exited(&out.pidfd) {
                Failure::Dead
            } else if let Some(ms) = detect.and_then(|d| out.freeze.stopped(out.pid, d, now)) {
                Failure::Stopped("shm", ms)
            } else {
                continue;
            };
            if self.progress_out(idx).is_ok() {
                // Whatever the receiver completed before it died has been harvested above.
                let out = &self.outbound[idx];
                if !out.queue.is_empty() || !out.inflight.is_empty() {
                    self.fail_out(idx, failure, "while sending");
                }
            }
        }
        self.check_net_liveness(now);
        self.detection.record(now);
    }

    /// Re-reads the ring headers while idle: a scribbled ring becomes an error on its
    /// connection now rather than a silent hang later.
    fn verify_inbound(&mut self) {
        for inb in &mut self.inbound {
            if inb.state == InboundState::Open {
                if let Err(e) = inb.ring.verify() {
                    inb.state = InboundState::Broken(e.to_string());
                    inb.ring.close();
                }
            }
        }
    }
}

impl AsRawFd for Endpoint {
    /// The endpoint's doorbell (an eventfd): once [`Endpoint::arm`] returned `Ok(true)`, it
    /// becomes readable when a message arrives. Use with poll/epoll or an async runtime:
    /// drain with `try_recv*` until `WouldBlock`, `arm`, then wait on the descriptor.
    fn as_raw_fd(&self) -> RawFd {
        self.doorbell.as_raw_fd()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        tracing::debug!(endpoint = %self.addr, outbound = self.outbound.len() + self.net_out.len(), inbound = self.inbound.len() + self.net_in.len(), "closing the endpoint");
        for out in &mut self.outbound {
            if out.failure.is_none() {
                out.ring.close();
                out.bell.ring();
            }
        }
        for inb in &mut self.inbound {
            inb.ring.close();
        }
        self.close_net();
        self.ctx.registry.unregister(self.addr.port);
    }
}

/// Payload lengths of the fragments of a `len`-byte eager message.
fn frag_lens(len: u64, frag: u64) -> impl Iterator<Item = u64> + Clone {
    let count = if len == 0 { 1 } else { len.div_ceil(frag) };
    (0..count).map(move |i| (len - i * frag).min(frag))
}

/// Writes as many fragments of an eager message as fit; `Ok(true)` when all are written.
fn write_eager_raw(
    ring: &mut Producer,
    data: &[u8],
    written: &mut usize,
    started: &mut bool,
    frag: usize,
) -> std::result::Result<bool, RingError> {
    let total = data.len() as u64;
    loop {
        let end = (*written + frag).min(data.len());
        let kind = if *started { Kind::Cont } else { Kind::Msg };
        if !ring.try_write(kind, total, &data[*written..end])? {
            return Ok(false);
        }
        *started = true;
        *written = end;
        if end == data.len() {
            return Ok(true);
        }
    }
}

/// [`write_eager_raw`] followed by a doorbell ring if anything was written.
fn write_eager(
    out: &mut Outbound,
    data: &[u8],
    written: &mut usize,
    started: &mut bool,
    frag: usize,
) -> std::result::Result<bool, RingError> {
    let before = (*written, *started);
    let done = write_eager_raw(&mut out.ring, data, written, started, frag)?;
    if (*written, *started) != before {
        out.bell.ring();
    }
    Ok(done)
}

/// Whether every fragment of the message starting with `first` is in the ring already.
fn all_fragments_present(ring: &Consumer, first: &Record) -> std::result::Result<bool, RingError> {
    let mut pos = first.pos + first.size;
    let mut filled = first.frag_len;
    while filled < first.total_len {
        if pos - first.pos > ring.capacity() {
            return Err(RingError::Corrupt {
                field: "total_len",
                value: first.total_len,
                reason: "fragments of one message exceed the ring",
            });
        }
        match ring.record_at(pos)? {
            None => return Ok(false),
            Some(rec) if rec.kind == Kind::Pad => pos += rec.size,
            Some(rec) if rec.kind == Kind::Cont => {
                filled += rec.frag_len;
                pos += rec.size;
            }
            Some(_) => {
                return Err(RingError::Corrupt {
                    field: "kind",
                    value: 0,
                    reason: "message interrupted by another record",
                })
            }
        }
    }
    Ok(true)
}

/// Rendezvous messages of at least this many bytes are copied by both processes at once.
const SPLIT_MIN_BYTES: u64 = 128 << 10;
/// The split point is page aligned.
const SPLIT_ALIGN: u64 = 4096;

/// Pulls `dst.len()` bytes from `addr` in the sender `pid` (one process_vm_readv).
fn pull(pid: libc::pid_t, peer: Addr, dst: &mut [u8], addr: u64) -> Result<()> {
    let len = dst.len();
    match sys::process_vm_read(pid, dst, addr) {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(corrupt_detail(
            peer,
            &format!("rendezvous read {n} of {len} bytes: the sender's buffer is not mapped"),
        )),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Error::PeerDead {
            peer,
            during: "while copying a large message",
        }),
        Err(e) => Err(corrupt_detail(
            peer,
            &format!("cross-memory read of the sender's buffer failed: {e}"),
        )),
    }
}

/// Waits for the sender to finish its part of split request `seq`; `Ok(false)` if it
/// reported failure (the caller then copies the part itself).
fn wait_second_part(
    inb: &mut Inbound,
    seq: u64,
    config: &Config,
    detection: &mut Looks,
) -> Result<bool> {
    let mut wait = Wait::new(config);
    loop {
        if let Some(ok) = inb.ring.second_part_done(seq) {
            return Ok(ok);
        }
        wait_on_sender(
            inb,
            &mut wait,
            (config.spin, config.detect, &mut *detection),
            "while it copied part of a large message",
            "waiting for the sender's part of a large message",
        )?;
    }
}

/// One step of waiting for a sender that is in the middle of writing something we need:
/// spin, and every ~1000 polls check that it lives and that the deadline has not passed;
/// past the spin budget, give the CPU away now and then.
fn wait_on_sender(
    inb: &mut Inbound,
    wait: &mut Wait,
    (spin, detect, detection): (Duration, Option<Duration>, &mut Looks),
    during: &'static str,
    what: &'static str,
) -> Result<()> {
    let (_, periodic) = wait.spinning(spin);
    if periodic {
        let due = match detect {
            Some(detect) => wait.liveness_due(detection, detect),
            // With detection off, death is still noticed once the spin budget is spent.
            None => wait.start().elapsed() > spin,
        };
        let started = due.then(Instant::now);
        let exited = due && sys::pidfd_exited(&inb.pidfd);
        let stopped = (due && !exited)
            .then(|| detect.and_then(|d| inb.freeze.stopped(inb.pid, d, Instant::now())))
            .flatten();
        if let Some(started) = started {
            detection.record(started);
        }
        if exited {
            return Err(Error::PeerDead {
                peer: inb.peer,
                during,
            });
        }
        if let Some(ms) = stopped {
            return Err(Error::PeerStopped {
                peer: inb.peer,
                transport: "shm",
                during,
                stopped_ms: ms,
            });
        }
        wait.check_deadline(what)?;
        if wait.start().elapsed() > spin {
            std::thread::yield_now();
        }
    }
    std::hint::spin_loop();
    Ok(())
}

/// Does the sender's part of split rendezvous request `seq` (data at `addr`, `len` bytes) if
/// the receiver asked for help and nobody took it yet. Returns whether the request no longer
/// needs us (helped, or the receiver took the part).
fn help_split(out: &Outbound, seq: u64, addr: u64, len: u64) -> bool {
    let Some((dest, split)) = out.ring.cts(seq, len) else {
        return false;
    };
    if out.ring.claim_second_part(seq) {
        let part = (len - split) as usize;
        let ok = matches!(
            sys::process_vm_write(out.pid, addr + split, dest + split, part),
            Ok(n) if n == part
        );
        out.ring.finish_second_part(seq, ok);
    }
    true
}

fn corrupt(e: RingError) -> Failure {
    Failure::Corrupt(e.to_string())
}

fn ring_error(peer: Addr, e: RingError) -> Error {
    Error::Corrupt {
        peer,
        detail: e.to_string(),
    }
}

impl Endpoint {
    /// Whether a [`Endpoint::post_send`] of `len` bytes on `conn` is sent in place: a
    /// datagram connection (udp, mem) and `len` at least `Config::udp_post_in_place_min`
    /// (`QUIVER_UDP_POST_IN_PLACE_MIN`, not 0). Such a send is never copied; the endpoint
    /// holds the buffer until every byte is acknowledged, so a caller that streams large
    /// messages keeps several distinct buffers posted. False for shm and tcp connections,
    /// for shorter messages, and for a connection of another endpoint.
    pub fn posts_in_place(&self, conn: Connection, len: usize) -> bool {
        let in_place_min = self.config.udp_post_in_place_min;
        if !Endpoint::is_net(conn) || conn.endpoint_id != self.id {
            return false;
        }
        let index = (conn.index & !NET_BIT) as usize;
        in_place_min > 0
            && len >= in_place_min
            && self
                .net_out
                .get(index)
                .is_some_and(|out| out.kind.is_datagram())
    }
}
