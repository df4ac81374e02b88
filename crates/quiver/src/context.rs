//! The context: the composition root of one process's membership of a job. It takes the
//! job's facts ([`crate::job`]) and the settings ([`Config`]), binds and starts the
//! transports' listeners ([`crate::transport`]), and opens endpoints.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use quiver_transport::notify::{Doorbell, RemoteDoorbell};
use quiver_transport::readiness::Readiness;
use quiver_transport::sys;
use quiver_wire::rma::Rights;

use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::job::{Bootstrap, JobInfo};
use crate::rma::caller::CallerRegion;
use crate::rma::region::Region;
use crate::transport::dgram::stats::{DatagramStats, LinkStats};
use crate::transport::local::LocalRank;
use crate::transport::network::{bind_network, Binder, NetworkSockets};
use crate::transport::regions::RmaStats;
use crate::transport::registry::Inbox;
use crate::transport::shm::listener::ShmListener;
use crate::transport::tcp::listener::TcpListening;
use crate::transport::tcp::stats::TcpStats;

/// One process's membership of a job: its rank, the job's identity and key, its
/// configuration, and the endpoints it opened. Create one per process, with
/// [`Context::from_env`] under `quiver run` or [`Context::builder`] by hand.
#[derive(Debug)]
pub struct Context {
    local: Arc<LocalRank>,
    shm: ShmListener,
    tcp: Option<TcpListening>,
}

/// Counters of a context's listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextStats {
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Handshakes refused or failed: strangers, a wrong key or job, a rank outside the job,
    /// a broken handshake. A healthy job has none. The datagram engine reports udp Hellos
    /// without the key at the 1st, 2nd, 4th, 8th... only (a flood costs no log line each);
    /// their exact number is `datagram.refused.unproven_hellos`. Not counted here: attempts to an
    /// endpoint that is not open yet ([`connections_not_open`](Self::connections_not_open)).
    pub connections_refused: u64,
    /// Connection attempts that asked for an endpoint of this rank that was not open at the
    /// time. Usual while a job starts: a rank connects before its peer has opened the
    /// endpoint, is told so, and retries until the endpoint opens (or its connect timeout
    /// passes, when its `connect` returns [`Error::Refused`](crate::Error::Refused)). Each
    /// attempt counts, so the number depends on timing; nonzero is not a fault.
    pub connections_not_open: u64,
    /// Of the connections accepted, those over shared memory (the rest came over tcp, udp
    /// or mem).
    pub shm_connections_accepted: u64,
    /// Of the shm connections accepted, those whose sender's memory this rank could not
    /// read with cross-memory attach (a seccomp profile such as Docker's default,
    /// `kernel.yama.ptrace_scope`, another user): they carry messages of every size through
    /// the ring, copied and pipelined, instead of by rendezvous. `quiver info` says why.
    pub shm_without_cross_memory: u64,
    /// Why the last refusal happened.
    pub last_refusal: Option<String>,
    /// Times a listener failed to accept a connection for a reason of its own (out of
    /// descriptors or memory, or anything unexpected): each is logged, and the listener
    /// backs off (10 ms, doubling up to 200 ms) and keeps listening.
    pub accept_errors: u64,
    /// Of the refusals, handshakes a listener dropped unfinished: a connection that did not
    /// complete its handshake within 2 s of its accept, or one dropped (chosen at random)
    /// to make room for a newer connection while 64 were in progress. A job member whose
    /// attempt was dropped retries until its connect timeout.
    pub handshakes_dropped: u64,
    /// The most handshakes one listener (shm or tcp) had in progress at once; never more
    /// than 64.
    pub pending_handshakes_peak: u64,
    /// The reliable datagram protocol's counters (udp or mem), if this context runs it.
    pub datagram: Option<DatagramStats>,
    /// The tcp streams, counted at both ends (the rank that connected and the rank that
    /// accepted), if this context runs tcp.
    pub tcp: Option<TcpStats>,
}

/// Explicit construction of a [`Context`] (tests, custom launchers).
#[derive(Debug, Clone)]
pub struct ContextBuilder {
    job: JobInfo,
    config: Option<Config>,
}

impl ContextBuilder {
    /// The link addresses of every rank, in rank order (as `QUIVER_LINKS`, see
    /// [`crate::parse_links`]): this rank's datagram engine binds one socket per own link and
    /// stripes each connection over the links both ranks have. Without [`addrs`](Self::addrs),
    /// each rank's first link is also its address (tcp, and telling local from remote peers).
    pub fn links(mut self, links: Vec<Vec<SocketAddr>>) -> Self {
        self.job.links = links;
        self
    }

    /// The network address of every rank, in rank order (as `QUIVER_ADDRS`): this rank's
    /// TCP listener and UDP socket bind its own entry (port 0: any free port, reported by
    /// [`Context::local_addr`]). Without addresses only shm is used.
    pub fn addrs(mut self, addrs: Vec<SocketAddr>) -> Self {
        self.job.addrs = addrs;
        self
    }
    /// This process's rank (0..size).
    pub fn rank(mut self, rank: u32) -> Self {
        self.job.rank = rank;
        self
    }
    /// Number of ranks in the job.
    pub fn size(mut self, size: u32) -> Self {
        self.job.size = size;
        self
    }
    /// The job's identifier (all ranks must agree).
    pub fn job_id(mut self, job_id: u64) -> Self {
        self.job.job_id = job_id;
        self
    }
    /// The job's secret key (all ranks must agree).
    pub fn job_key(mut self, key: [u8; 32]) -> Self {
        self.job.key = key;
        self
    }
    /// Settings (default: [`Config::from_env`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Creates the context and starts listening for connections.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if rank >= size, [`Error::Config`], or [`Error::Io`] if
    /// the listening socket cannot be created (e.g. the same rank already runs).
    pub fn build(self) -> Result<Context> {
        self.build_with(None)
    }

    /// [`ContextBuilder::build`], with the network sockets already bound by a bootstrap
    /// (`Some`), or bound here at this rank's entry of the addresses (`None`).
    fn build_with(self, bound: Option<NetworkSockets>) -> Result<Context> {
        crate::variables::warn_unknown_once();
        let mut job = self.job;
        if job.size == 0 || job.rank >= job.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} is not in a job of size {}",
                job.rank, job.size
            )));
        }
        let mut config = match self.config {
            Some(c) => {
                c.validate()?;
                c
            }
            None => Config::from_env()?,
        };
        // How blocking calls wait depends on how many ranks share this node's CPUs.
        config.resolve_wait(job.node.with_machine());
        sys::allow_cross_memory_attach();
        let shm_socket = ShmListener::bind(job.job_id, job.rank)?;
        check_addresses(&mut job)?;
        let bound = match bound {
            Some(bound) => bound,
            None => bind_own_network(&job, &config)?,
        };
        if let (Some(own), Some(local)) = (job.addrs.get_mut(job.rank as usize), bound.local) {
            // Port 0 asked for any port: report the one bound.
            *own = local;
        }
        let local = Arc::new(LocalRank::new(job, config, bound.dgram));
        let tcp = bound
            .tcp
            .map(|listener| TcpListening::start(local.clone(), listener))
            .transpose()?;
        let shm = ShmListener::start(local.clone(), shm_socket)?;
        tracing::info!(
            rank = local.rank,
            size = local.size,
            job = %format_args!("{:016x}", local.job_id),
            transports = ?local.config.transports,
            detect_ms = local.config.detect.map_or(0, |d| d.as_millis() as u64),
            waiting = %local.config.wait.describe(),
            "context ready"
        );
        Ok(Context { local, shm, tcp })
    }
}

/// Checks that the addresses and links name every rank of `job` (each rank's first link
/// is its address when only links are given).
fn check_addresses(job: &mut JobInfo) -> Result<()> {
    if !job.links.is_empty() {
        if job.links.len() != job.size as usize {
            return Err(Error::Config(format!(
                "QUIVER_LINKS names links for {} ranks in a job of {} ranks",
                job.links.len(),
                job.size
            )));
        }
        if job.addrs.is_empty() {
            job.addrs = job.links.iter().map(|links| links[0]).collect();
        }
    }
    if !job.addrs.is_empty() && job.addrs.len() != job.size as usize {
        return Err(Error::Config(format!(
            "QUIVER_ADDRS names {} addresses for a job of {} ranks",
            job.addrs.len(),
            job.size
        )));
    }
    Ok(())
}

/// Binds this rank's network sockets at its own entry of the addresses and links.
fn bind_own_network(job: &JobInfo, config: &Config) -> Result<NetworkSockets> {
    bind_network(
        job.addrs.get(job.rank as usize).copied(),
        job.links.get(job.rank as usize).map_or(&[][..], |l| &l[..]),
        &job.links,
        config,
        job.job_id,
        job.key,
    )
}

impl Context {
    /// Builds the context from whatever launched this process (docs/launchers.md), in this
    /// order: `quiver run`'s variables (`QUIVER_RANK` set); a PMIx launcher (`mpirun`,
    /// `srun --mpi=pmix`: `PMIX_RANK` or `PMIX_NAMESPACE` set), which exchanges the job key
    /// and every rank's address through PMIx; otherwise rank and size from the launcher's
    /// variables (`OMPI_COMM_WORLD_*`, `PMI_*`, `SLURM_PROCID`/`SLURM_NTASKS`) with
    /// addresses exchanged through rank 0 at `QUIVER_RENDEZVOUS`. `QUIVER_BOOTSTRAP`
    /// (`env`, `pmix`, `rendezvous`) forces one. Any `QUIVER_*` settings apply (see
    /// [`Config`]).
    ///
    /// # Errors
    /// [`Error::Config`] naming the missing or malformed variable; [`Error::Io`] when the
    /// exchange with the launcher or rank 0 fails.
    pub fn from_env() -> Result<Context> {
        crate::variables::warn_unknown_once();
        let config = Config::from_env()?;
        let mut network = Binder::new(&config);
        let job = crate::job::from_env(&config, &mut network)?;
        let bound = network.into_bound();
        ContextBuilder {
            job,
            config: Some(config),
        }
        .build_with(bound)
    }

    /// Starts explicit construction.
    pub fn builder() -> ContextBuilder {
        ContextBuilder {
            job: JobInfo::by_hand(),
            config: None,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.local.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.local.size
    }

    /// The rank's shared state (tests of the transports look into it).
    #[cfg(test)]
    pub(crate) fn local(&self) -> &Arc<LocalRank> {
        &self.local
    }

    /// The job's identifier.
    pub fn job_id(&self) -> u64 {
        self.local.job_id
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.local.config
    }

    /// How this context learnt its rank, its job and its peers' addresses.
    pub fn bootstrap(&self) -> Bootstrap {
        self.local.bootstrap
    }

    /// This rank's network address (its tcp listener and datagram socket), if it has one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local.addrs.get(self.local.rank as usize).copied()
    }

    /// The listener's counters.
    pub fn stats(&self) -> ContextStats {
        let counts = self.local.registry.counts_now();
        ContextStats {
            connections_accepted: counts.accepted,
            connections_refused: counts.refused,
            connections_not_open: counts.not_open,
            shm_connections_accepted: counts.shm_accepted,
            shm_without_cross_memory: counts.shm_without_cross_memory,
            last_refusal: counts.last_refusal,
            accept_errors: counts.accept_errors,
            handshakes_dropped: counts.handshakes_dropped,
            pending_handshakes_peak: counts.pending_handshakes_peak,
            datagram: self.local.dgram.as_ref().map(|d| d.stats()),
            tcp: self
                .local
                .config
                .transports
                .contains(&TransportKind::Tcp)
                .then(|| self.local.tcp.snapshot()),
        }
    }

    /// Traffic of each of this rank's datagram links (one entry per `QUIVER_LINKS` address of
    /// this rank, or one for its address), over the connections still open; empty without a
    /// datagram transport.
    pub fn link_stats(&self) -> Vec<LinkStats> {
        self.local
            .dgram
            .as_ref()
            .map(|d| d.link_stats())
            .unwrap_or_default()
    }

    /// This rank's own datagram link addresses, in link order (empty without a datagram
    /// transport).
    pub fn links(&self) -> Vec<SocketAddr> {
        self.local
            .dgram
            .as_ref()
            .map(|d| d.local_links().to_vec())
            .unwrap_or_default()
    }

    /// Allocates a zeroed memory region of `len` bytes for one-sided communication, in
    /// shared memory that peers on this node map when they first use one of its keys
    /// ([`Region::key`]); `rights` says whether its key lets peers write it.
    ///
    /// # Errors
    /// [`Error::OutOfSharedMemory`] when the memory cannot be reserved.
    pub fn alloc_region(&self, len: usize, rights: Rights) -> Result<Region> {
        Region::allocate(self.local.clone(), len, rights)
    }

    /// Lends `memory`, which the caller keeps, to one-sided communication for the length
    /// of `f`: `f` gets the [`CallerRegion`] (its keys allow `rights`), and when `f`
    /// returns or unwinds the region's keys are revoked and no peer's access is in flight,
    /// so the memory is the caller's alone again when this returns (docs/rma.md). Over shm
    /// peers put and get by cross-memory attach (one copy, no work of this process), and
    /// reach it through this rank's progress engine for atomics, where cross-memory attach
    /// is refused, and over tcp and udp: so call into quiver during the scope (a receive,
    /// `progress`) as for any region's peers over the network. `f`'s result is returned.
    ///
    /// # Errors
    /// [`Error::OutOfSharedMemory`] when the region's small control file cannot be made.
    pub fn register<R>(
        &self,
        memory: &mut [u8],
        rights: Rights,
        f: impl FnOnce(&CallerRegion) -> R,
    ) -> Result<R> {
        CallerRegion::scope(&self.local, memory, rights, f)
    }

    /// The counters of one-sided communication: regions, keys granted and refused here,
    /// operations of this rank refused.
    pub fn rma_stats(&self) -> RmaStats {
        self.local.regions.stats()
    }

    /// Opens endpoint `port` of this rank; peers reach it at `Addr { rank, port }`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the port is already open, [`Error::Io`].
    pub fn endpoint(&self, port: u16) -> Result<Endpoint> {
        let rank = self.local.rank;
        let doorbell = Doorbell::new().map_err(|e| {
            Error::shared_memory(format!("the doorbell of endpoint {rank}:{port}"), 4096, e)
        })?;
        let clone = || {
            doorbell
                .clone_remote_fds()
                .map_err(|e| Error::io("duplicating the doorbell descriptors", e))
        };
        let (bell_memfd, bell_eventfd) = clone()?;
        let (own_memfd, own_eventfd) = clone()?;
        let own_bell = RemoteDoorbell::attach(&own_memfd, own_eventfd)
            .map_err(|e| Error::io("mapping the endpoint's doorbell", e))?;
        let mut fixed = vec![doorbell.as_raw_fd()];
        fixed.extend(self.local.dgram.as_ref().map(|engine| engine.raw_fd()));
        let ready = Readiness::new(&fixed)
            .map_err(|e| Error::io("creating the endpoint's descriptor (an epoll set)", e))?;
        let inbox = Arc::new(Inbox::new(bell_memfd, bell_eventfd, own_bell));
        if !self.local.registry.register(port, inbox.clone()) {
            return Err(Error::InvalidArgument(format!(
                "endpoint {rank}:{port} is already open"
            )));
        }
        let id = self.local.next_endpoint_id.fetch_add(1, Ordering::Relaxed);
        Ok(Endpoint::new(
            id,
            Addr::new(rank, port),
            self.local.clone(),
            inbox,
            doorbell,
            ready,
        ))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.local.stopping.store(true, Ordering::Release);
        self.shm.stop();
        if let Some(tcp) = &mut self.tcp {
            tcp.stop();
        }
        // Peers waiting on a one-sided request see the stream end (`PeerClosed`).
        self.local.rma.clear();
    }
}
