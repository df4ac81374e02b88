//! What every transport of this rank shares: the job's identity and key, the settings,
//! every rank's address, the open endpoints ([`Registry`]), the datagram engine when one
//! runs, and the flag that stops the listeners. The context creates it; endpoints and
//! listeners hold it.
//!
//! It also holds the one hook of every blocking wait ([`LocalRank::meanwhile`]): whatever a
//! call of this rank waits for (a message, ring space, a receiver, a reply, a connection),
//! it keeps the datagram engine going and serves the one-sided requests peers send this
//! rank, so that no peer's operation waits for this rank's own wait to end (two ranks
//! would otherwise deadlock: one blocked sending to the other, which is blocked in a get
//! from it). The endpoint's waits reach it through `Endpoint::advance`, a blocking send's
//! through the endpoint's look-meanwhile (shm) or `Meanwhile::receive` (tcp, datagrams), a
//! one-sided operation's through `rma_ops::Patience`, the transports' own inner waits
//! (a message half written, a handshake, a connect's retries, a closing endpoint's
//! datagram sends settling) directly.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_proto::handshake::JobKey;

use super::regions::RegionTable;
use super::registry::Registry;
use super::rma_serve::RmaService;
use crate::config::{Config, TransportKind};
use crate::job::{Bootstrap, JobInfo};
use crate::transport::dgram::engine::DgramShared;
use crate::transport::tcp::stats::TcpCounts;

/// This rank's shared transport state (see the module docs).
#[derive(Debug)]
pub(crate) struct LocalRank {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) job_id: u64,
    key: [u8; 32],
    pub(crate) config: Config,
    /// Network address of every rank (empty: this job uses no network transport).
    pub(crate) addrs: Vec<SocketAddr>,
    /// How this rank learnt its job.
    pub(crate) bootstrap: Bootstrap,
    /// The open endpoints and the listeners' counters.
    pub(crate) registry: Registry,
    /// The registered memory regions peers may map, and the one-sided counters.
    pub(crate) regions: RegionTable,
    /// The connections peers opened to apply one-sided requests here (network
    /// transports), served by this rank's endpoints as they call into quiver.
    pub(crate) rma: RmaService,
    /// The datagram engine (udp or mem), when one of them is configured.
    pub(crate) dgram: Option<Arc<DgramShared>>,
    /// The tcp streams' counters.
    pub(crate) tcp: Arc<TcpCounts>,
    /// Set when the context closes: the listener threads end.
    pub(crate) stopping: AtomicBool,
    /// The id the next endpoint opened gets (a connection names its endpoint by it).
    pub(crate) next_endpoint_id: AtomicU64,
}

impl LocalRank {
    /// The shared state of a rank of `job` (its addresses final), configured by `config`.
    pub(crate) fn new(job: JobInfo, config: Config, dgram: Option<Arc<DgramShared>>) -> LocalRank {
        LocalRank {
            rank: job.rank,
            size: job.size,
            job_id: job.job_id,
            key: job.key,
            config,
            addrs: job.addrs,
            bootstrap: job.bootstrap,
            registry: Registry::new(job.rank),
            regions: RegionTable::default(),
            rma: RmaService::default(),
            dgram,
            tcp: Arc::default(),
            stopping: AtomicBool::new(false),
            next_endpoint_id: AtomicU64::new(1),
        }
    }

    /// The job's key, for handshakes.
    pub(crate) fn job_key(&self) -> JobKey {
        JobKey::from_bytes(self.key)
    }

    /// Whether rank `rank` runs on this node (in this network namespace): always without
    /// network addresses; otherwise when its address belongs to an interface here.
    pub(crate) fn peer_is_local(&self, rank: u32) -> bool {
        match self.addrs.get(rank as usize) {
            None => true,
            Some(_) if rank == self.rank => true,
            Some(addr) => std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).is_ok(),
        }
    }

    /// The datagram transport this rank runs, if any.
    pub(crate) fn dgram_kind(&self) -> Option<TransportKind> {
        self.dgram.as_ref().map(|d| d.kind())
    }

    /// What every blocking wait of this rank does meanwhile, whatever it waits for (the
    /// one hook, module docs): the datagram engine polled, unless the caller has just done
    /// so (`engine_polled`): acknowledgements, keepalives, and the request connections
    /// peers open; then the one-sided request connections peers opened to this rank
    /// served. Without an engine, and with no request connection, a branch and one relaxed
    /// load.
    #[inline]
    pub(crate) fn meanwhile(&self, engine_polled: bool) {
        if !engine_polled {
            if let Some(engine) = &self.dgram {
                engine.poll_io(self);
            }
        }
        self.rma.serve(&self.regions, (self.job_id, self.rank));
    }

    /// Whether a spinning wait that last polled the datagram engine at `last` (its own
    /// bookkeeping) should poll it again now, through [`LocalRank::meanwhile`]: at most
    /// every [`ENGINE_POLL_INTERVAL`] (a datagram poll is a system call and the engine's
    /// timers are milliseconds apart), never without an engine (no clock read then).
    pub(crate) fn engine_due(&self, last: &mut Option<Instant>) -> bool {
        if self.dgram.is_none() {
            return false;
        }
        let now = Instant::now();
        if last.is_some_and(|at| now.saturating_duration_since(at) < ENGINE_POLL_INTERVAL) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// The longest sleep, at most `slice`, of a wait that cannot watch the descriptors of
    /// what [`LocalRank::meanwhile`] serves (a futex, or the engine's descriptor alone): no
    /// longer than the engine's next timer, and [`BLIND_SLEEP_SERVING`] while peers'
    /// one-sided request connections are open, so that their requests are served soon.
    pub(crate) fn blind_sleep(&self, slice: Duration) -> Duration {
        let mut slice = slice;
        if self.rma.active() {
            slice = slice.min(BLIND_SLEEP_SERVING);
        }
        if let Some(engine) = &self.dgram {
            slice = engine.timeout_within(slice);
        }
        slice
    }

    /// Sleeps for `pause` (a connect's backoff), doing what [`LocalRank::meanwhile`] does
    /// in between, every [`LocalRank::blind_sleep`].
    pub(crate) fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        loop {
            self.meanwhile(false);
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(self.blind_sleep(left));
        }
    }
}

/// How often a spinning wait outside the endpoint's own loop polls the datagram engine
/// ([`LocalRank::engine_due`]).
pub(crate) const ENGINE_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// How long a wait that cannot watch the request connections' descriptors sleeps at most
/// while there are some ([`LocalRank::blind_sleep`]): a peer's one-sided request waits
/// about this long for a rank asleep in such a wait.
pub(crate) const BLIND_SLEEP_SERVING: Duration = Duration::from_millis(1);
