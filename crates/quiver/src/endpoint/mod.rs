//! Endpoints: the addressable points of a job's graph and the public API that moves
//! messages through them.
//!
//! An endpoint holds its directed edges: one outbound edge per peer it connected to and one
//! inbound edge per peer that connected to it (or that answers on a connection this
//! endpoint opened). Each edge is a transport's ([`crate::transport::edge`], the one
//! dispatch point); the endpoint keeps what is common to all of them: the requests, the
//! round-robin look at the inbound edges, waiting (spin, then sleep on the doorbell, the
//! peers' pidfds and the transports' descriptors), liveness looks, and closing.
//!
//! The files: `connect.rs` (opening edges), `send.rs` (sends and progress), `receive.rs`
//! (receives), `readiness.rs` (the descriptor for poll/epoll, `arm`), `look.rs` (one look
//! at the inbound edges), `waiting.rs` (idling and liveness), `am.rs` (active messages:
//! handlers, `send_am`, running a handler when its message arrives), `scope.rs` (posted
//! operations on the caller's memory, typed data).

use std::cell::Cell;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_transport::notify::Doorbell;
use quiver_transport::readiness::Readiness;

use crate::addr::{Addr, AddrMap};
use crate::config::{Config, DETECTION_MIN};
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
use crate::pool::Pool;
use crate::slab::Key;
use crate::transport::dgram::endpoint_side::{self, DgramSide};
use crate::transport::edge::{InEdge, OutEdge};
use crate::transport::edge_context::EdgeContext;
use crate::transport::liveness::{DetectionStats, Looks};
use crate::transport::local::LocalRank;
use crate::transport::registry::Inbox;
use crate::transport::requests::Requests;
use crate::transport::rma_pipeline::PostedTable;
use crate::transport::wire_tag::WireTag;

mod am;
mod connect;
pub(crate) mod handlers;
mod look;
pub(crate) mod matching;
mod readiness;
mod receive;
mod rma;
pub(crate) mod scope;
mod send;
mod spill;
mod tagged;
#[cfg(test)]
pub(crate) mod tests;
mod waiting;

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

/// A one-sided operation posted with [`Endpoint::post_put`], [`Endpoint::post_get`] or
/// [`Endpoint::post_fetch_add`]; complete it with [`Endpoint::wait_rma`] (or poll with
/// [`Endpoint::test_rma`]). The endpoint holds the operation's buffer until then.
#[derive(Debug)]
#[must_use = "a posted one-sided operation must be completed with wait_rma"]
pub struct RmaRequest {
    id: u64,
}

/// What a posted one-sided operation completed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RmaCompletion {
    /// The word before, for an atomic (0 for a put or get).
    pub value: u64,
    /// A get's bytes; a put's data, handed back.
    pub data: Vec<u8>,
}

/// An addressable endpoint `(rank, port)`: sends on its connections and receives from every
/// peer connected to it. Owned by one thread at a time (`Send`, not `Sync`), like a socket.
///
/// Threads: a program with several threads gives each its own endpoints, opened from one
/// [`Context`](crate::Context) shared by reference (`Context` is `Send` and `Sync`). The
/// endpoints of one context are independent: no lock is taken on a message's path, except
/// the datagram engine's one mutex per context (udp and mem), which every endpoint using
/// those transports shares.
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
    local: Arc<LocalRank>,
    inbox: Arc<Inbox>,
    doorbell: Doorbell,
    /// The descriptor a program polls: the doorbell, the engine's socket and, from `arm`,
    /// the connections' descriptors and a timer (`readiness.rs`).
    ready: Readiness,
    /// Outbound edges, indexed by [`Connection::index`].
    outbound: Vec<OutEdge>,
    by_peer: AddrMap<u32>,
    /// The last peer `reply_connection` found in `by_peer`, and its index (a handler
    /// answering one peer after another skips the map).
    last_reply: Option<(Addr, u32)>,
    /// Inbound edges, looked at round robin from `next_inbound`.
    inbound: Vec<InEdge>,
    next_inbound: usize,
    requests: Requests,
    /// The liveness looks: when the next is due, what they cost so far
    /// ([`Endpoint::detection_stats`]).
    detection: Looks,
    /// Scratch descriptors of a sleeping call.
    pollfds: Vec<libc::pollfd>,
    last_liveness_check: Instant,
    idle_polls: u32,
    /// The datagram engine as this endpoint uses it (posted receives handed to it, what it
    /// had news of).
    dgram: DgramSide,
    /// The tcp edge whose large message the blocking `recv` in progress is reading
    /// straight into its buffer (only ever set inside `recv`; see `TcpIn::take`).
    committed: Option<usize>,
    /// Posted matching receives and the messages no receive wanted yet (`tagged.rs`).
    /// Receives by request key; unexpected payloads in pool buffers of exactly their
    /// length, within `QUIVER_UNEXPECTED_BYTES`; beyond it in `spill`.
    matcher: matching::Matcher<Key, Vec<u8>, spill::Spilled>,
    /// The spill file of unexpected payloads beyond the bound, made on the first spill.
    spill: spill::SpillFile,
    /// The tag of the message the last look delivered (or that it was an active message).
    last_tag: WireTag,
    /// One-sided operations posted and not yet completed by `wait_rma`.
    rma_posted: PostedTable,
    /// Active-message handlers and their counters (`am.rs`).
    am: handlers::AmState<Endpoint>,
    /// Keeps the endpoint `Send` but not `Sync`, as documented: one thread drives it at a
    /// time, so its internals may use cells without breaking programs later.
    _not_sync: PhantomData<Cell<()>>,
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
        local: Arc<LocalRank>,
        inbox: Arc<Inbox>,
        doorbell: Doorbell,
        ready: Readiness,
    ) -> Endpoint {
        let config = local.config.clone();
        let matcher = matching::Matcher::new(config.unexpected_bytes);
        let spill = spill::SpillFile::new(config.spill_dir.clone());
        let pool = Pool::new(
            config.pool_buffers,
            config.pool_buffer_bytes,
            config.pool_max_bytes,
        );
        Endpoint {
            id,
            addr,
            config,
            local,
            inbox,
            doorbell,
            ready,
            outbound: Vec::new(),
            by_peer: AddrMap::default(),
            last_reply: None,
            inbound: Vec::new(),
            next_inbound: 0,
            requests: Requests::new(pool),
            detection: Looks::default(),
            pollfds: Vec::new(),
            last_liveness_check: Instant::now(),
            idle_polls: 0,
            dgram: DgramSide::default(),
            committed: None,
            matcher,
            spill,
            last_tag: WireTag::default(),
            rma_posted: PostedTable::default(),
            am: handlers::AmState::default(),
            _not_sync: PhantomData,
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
        if detect.is_some_and(|detect| detect < DETECTION_MIN) {
            return Err(Error::InvalidArgument(format!(
                "failure detection time {detect:?}: must be at least {DETECTION_MIN:?} (or \
                 None: off)"
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

    /// Sets the largest message a peer may announce to this endpoint (`QUIVER_MAX_MESSAGE_BYTES`
    /// sets it for the whole context): a connection whose peer announces a larger one is
    /// closed with [`Error::MessageTooLarge`] before anything is allocated for it. Takes
    /// effect at the next receive.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 (empty messages always pass; a limit of 0 would be
    /// meaningless).
    pub fn set_max_message_bytes(&mut self, max: u64) -> Result<()> {
        if max == 0 {
            return Err(Error::InvalidArgument(
                "largest message 0: must be at least 1 byte".into(),
            ));
        }
        self.config.max_message_bytes = max;
        Ok(())
    }

    /// The largest message a peer may announce to this endpoint
    /// ([`Endpoint::set_max_message_bytes`], `QUIVER_MAX_MESSAGE_BYTES`).
    pub fn max_message_bytes(&self) -> u64 {
        self.config.max_message_bytes
    }

    /// The endpoint's state an edge's driver uses during one call (the edges themselves
    /// are borrowed apart from it).
    fn context(&mut self) -> EdgeContext<'_> {
        self.parts().cx
    }

    /// The endpoint's edges, each borrowed apart, and the state their drivers use.
    fn parts(&mut self) -> Parts<'_> {
        Parts {
            outbound: &mut self.outbound,
            inbound: &mut self.inbound,
            committed: &mut self.committed,
            cx: EdgeContext {
                addr: self.addr,
                config: &self.config,
                requests: &mut self.requests,
                detection: &mut self.detection,
                local: &self.local,
                inbox: &self.inbox,
            },
        }
    }
}

/// The endpoint borrowed apart: its edges beside the state their drivers use.
struct Parts<'a> {
    outbound: &'a mut Vec<OutEdge>,
    inbound: &'a mut Vec<InEdge>,
    committed: &'a mut Option<usize>,
    cx: EdgeContext<'a>,
}

impl AsRawFd for Endpoint {
    /// The endpoint's descriptor (an epoll set of its doorbell and its connections'
    /// descriptors): once [`Endpoint::arm`] returned `Ok(true)`, it becomes readable when a
    /// message arrives or a posted operation can progress, over any transport. Use with
    /// poll/epoll or an async runtime: drain with `try_recv*` until `WouldBlock`, `arm`,
    /// then wait on the descriptor.
    fn as_raw_fd(&self) -> RawFd {
        self.ready_fd()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        tracing::debug!(target: ENDPOINT_LOG, endpoint = %self.addr, outbound = self.outbound.len(), inbound = self.inbound.len(), "closing the endpoint");
        for out in &mut self.outbound {
            out.close();
        }
        for inb in &mut self.inbound {
            inb.close();
        }
        let ids: Vec<u64> = self
            .outbound
            .iter_mut()
            .filter_map(|out| out.as_dgram_mut().map(|d| d.id))
            .chain(self.inbound.iter().filter_map(InEdge::dgram_id))
            .collect();
        if let Some(engine) = &self.local.dgram {
            engine.forget_sleeper(self.addr.port);
        }
        if self.local.dgram.is_some() {
            let Parts {
                outbound, mut cx, ..
            } = self.parts();
            let mut edges: Vec<_> = outbound
                .iter_mut()
                .filter_map(OutEdge::as_dgram_mut)
                .collect();
            endpoint_side::close(&mut edges, ids, &mut cx);
        }
        self.local.registry.unregister(self.addr.port);
    }
}
