//! The per-process context: job identity, configuration, endpoints, and the listener that
//! accepts connections from other ranks.
//!
//! Connection setup (docs/protocol.md, "Connection setup"): every context listens on an
//! abstract unix socket named after its job and rank. A connecting endpoint opens a
//! SOCK_SEQPACKET connection there and runs the job-key handshake of
//! [`quiver_proto::handshake`]; its Proof carries the address of a probe word so the
//! responder can check that cross-memory attach works between the two processes. The
//! responder then creates the ring for this directed edge and sends it, with its endpoint's
//! doorbell, in a setup message ([`quiver_wire::shm_setup`]). The kernel vouches for the
//! peer's pid (SO_PEERCRED), which becomes a pidfd for death detection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quiver_proto::handshake::{
    ConnectRequest, HandshakeError, Initiator, JobKey, RejectReason, Responder,
};
use quiver_transport::notify::{Doorbell, RemoteDoorbell};
use quiver_transport::ring::{Consumer, Producer};
use quiver_transport::sys;
use quiver_wire::handshake::MAX_MESSAGE_LEN;
use quiver_wire::shm_setup::{SetupRepr, SetupStatus};

use crate::bootstrap::Bootstrap;
use crate::config::{Config, TransportKind};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::transport::dgram::DgramShared;
use crate::Addr;

/// Time a single handshake step may take before the socket gives up.
const HANDSHAKE_STEP_TIMEOUT: Duration = Duration::from_secs(2);

/// One process's membership of a job: its rank, the job's identity and key, its
/// configuration, and the endpoints it opened. Create one per process, with
/// [`Context::from_env`] under `quiver run` or [`Context::builder`] by hand.
#[derive(Debug)]
pub struct Context {
    shared: Arc<ContextShared>,
    listener: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    tcp_thread: Option<JoinHandle<()>>,
}

/// Counters of a context's listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextStats {
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Handshakes refused or failed (strangers, wrong key, wrong job, no such endpoint).
    pub connections_refused: u64,
    /// Of the connections accepted, those over shared memory (the rest came over tcp, udp
    /// or mem).
    pub shm_connections_accepted: u64,
    /// Why the last refusal happened.
    pub last_refusal: Option<String>,
    /// The reliable datagram protocol's counters (udp or mem), if this context runs it.
    pub datagram: Option<crate::transport::dgram::DatagramStats>,
}

#[derive(Debug)]
pub(crate) struct ContextShared {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) job_id: u64,
    key: [u8; 32],
    pub(crate) config: Config,
    /// Network address of every rank (empty: this job uses no network transport).
    pub(crate) addrs: Vec<SocketAddr>,
    /// How this context learnt its job.
    pub(crate) bootstrap: Bootstrap,
    /// The datagram engine (udp or mem), when one of them is configured.
    pub(crate) dgram: Option<Arc<DgramShared>>,
    endpoints: Mutex<HashMap<u16, Arc<EndpointShared>>>,
    next_endpoint_id: AtomicU64,
    pub(crate) stopping: AtomicBool,
    stats: Mutex<ContextStats>,
}

/// What the listener thread shares with one endpoint.
#[derive(Debug)]
pub(crate) struct EndpointShared {
    /// Inbound connections accepted but not yet adopted by the endpoint.
    pub(crate) incoming: Mutex<Vec<NewInbound>>,
    /// Inbound network connections accepted but not yet adopted.
    pub(crate) incoming_net: Mutex<Vec<NetInbound>>,
    pub(crate) has_incoming: AtomicBool,
    /// Who is opening a tcp connection to whom, to resolve crossed connects (see
    /// [`EndpointShared::begin_tcp_accept`]).
    pub(crate) tcp_peers: Mutex<TcpPeers>,
    bell_memfd: OwnedFd,
    bell_eventfd: OwnedFd,
    own_bell: RemoteDoorbell,
}

/// An accepted inbound edge, handed from the listener to its endpoint.
#[derive(Debug)]
pub(crate) struct NewInbound {
    pub(crate) peer: Addr,
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) ring: Consumer,
}

/// An accepted inbound network edge, handed to its endpoint.
#[derive(Debug)]
pub(crate) enum NetInbound {
    /// A TCP stream after its handshake (non-blocking).
    Tcp {
        /// Who connected.
        peer: Addr,
        /// The stream.
        stream: std::net::TcpStream,
        /// The peer's pid, when it runs on this node (for freeze detection).
        pid: Option<libc::pid_t>,
    },
    /// A datagram connection accepted by the engine (its handshake completed).
    Dgram {
        /// Who connected.
        peer: Addr,
        /// udp or mem.
        kind: TransportKind,
        /// The engine's id of the connection.
        id: u64,
    },
}

impl EndpointShared {
    /// Queues an accepted network edge for the endpoint and wakes it.
    pub(crate) fn deliver_inbound(&self, inbound: NetInbound) {
        self.incoming_net
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(inbound);
        self.has_incoming.store(true, Ordering::Release);
        self.own_bell.ring();
    }

    fn tcp_peers(&self) -> std::sync::MutexGuard<'_, TcpPeers> {
        self.tcp_peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The endpoint is about to open a tcp connection to `peer`: true (and recorded) unless
    /// the listener is accepting one from `peer` right now, which the endpoint should wait
    /// for and use instead.
    pub(crate) fn claim_tcp_connect(&self, peer: Addr) -> bool {
        let mut peers = self.tcp_peers();
        if peers.accepting.contains(&peer) {
            return false;
        }
        if !peers.initiated.contains(&peer) {
            peers.initiated.push(peer);
        }
        true
    }

    /// The endpoint's tcp connect to `peer` ended (connected, or failed).
    pub(crate) fn release_tcp_connect(&self, peer: Addr) {
        self.tcp_peers().initiated.retain(|&p| p != peer);
    }

    /// The listener starts accepting a tcp connection from `peer` to this endpoint
    /// (`local`). False when it crosses one this endpoint is opening to `peer` (both sides
    /// connect at once) and `local` is the lower address: one connection carries both
    /// directions, so the one the lower address opened stays and this one is refused
    /// (`Busy`); the refused side then uses the one it accepted. Otherwise the accept is
    /// recorded until [`EndpointShared::end_tcp_accept`], and a connect of this endpoint to
    /// `peer` meanwhile waits for it.
    pub(crate) fn begin_tcp_accept(&self, local: Addr, peer: Addr) -> bool {
        let mut peers = self.tcp_peers();
        if local < peer && peers.initiated.contains(&peer) {
            return false;
        }
        peers.accepting.push(peer);
        true
    }

    /// The accept of [`EndpointShared::begin_tcp_accept`] ended (handed over or failed).
    pub(crate) fn end_tcp_accept(&self, peer: Addr) {
        let mut peers = self.tcp_peers();
        if let Some(i) = peers.accepting.iter().position(|&p| p == peer) {
            peers.accepting.swap_remove(i);
        }
    }
}

/// Peers an endpoint is opening tcp connections to, and peers its listener is accepting
/// one from: how crossed connects are resolved (a few entries: one per connect in
/// progress).
#[derive(Debug, Default)]
pub(crate) struct TcpPeers {
    initiated: Vec<Addr>,
    accepting: Vec<Addr>,
}

/// A freshly established outbound edge.
pub(crate) struct NewOutbound {
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) ring: Producer,
    pub(crate) bell: RemoteDoorbell,
}

/// Explicit construction of a [`Context`] (tests, custom launchers).
#[derive(Debug, Clone)]
pub struct ContextBuilder {
    rank: u32,
    size: u32,
    job_id: u64,
    key: [u8; 32],
    config: Option<Config>,
    addrs: Vec<SocketAddr>,
    bootstrap: Bootstrap,
    links: Vec<Vec<SocketAddr>>,
}

/// A rank's network sockets, bound before its peers' addresses are known (a bootstrap binds
/// port 0, publishes the port it got, then builds the context with everyone's addresses).
#[derive(Debug)]
pub(crate) struct NetworkSockets {
    tcp: Option<std::net::TcpListener>,
    dgram: Option<Arc<DgramShared>>,
    /// The address bound (port 0 replaced by the port the kernel chose); None when the
    /// configuration names no network transport or no address was given.
    pub(crate) local: Option<SocketAddr>,
}

/// Attempts at finding a port free for both tcp and the datagram socket.
const PORT_ATTEMPTS: u32 = 32;

/// Binds this rank's tcp listener and datagram socket (whichever `config.transports` names)
/// at `own`. Port 0 picks one port free for both: the kernel chooses it for tcp, and the
/// datagram socket binds the same number (another is tried if that one is taken for udp).
pub(crate) fn bind_network(
    own: Option<SocketAddr>,
    own_links: &[SocketAddr],
    all_links: &[Vec<SocketAddr>],
    config: &Config,
    job_id: u64,
    key: [u8; 32],
) -> Result<NetworkSockets> {
    let networked = config.transports.iter().any(|t| *t != TransportKind::Shm);
    let want_tcp = networked && config.transports.contains(&TransportKind::Tcp);
    let dgram_kind = config.transports.iter().copied().find(|t| t.is_datagram());
    let none = NetworkSockets {
        tcp: None,
        dgram: None,
        local: None,
    };
    let Some(own) = own else { return Ok(none) };
    if !want_tcp && dgram_kind.is_none() {
        return Ok(none);
    }
    let bind_dgram = |at: SocketAddr| -> Result<Option<Arc<DgramShared>>> {
        dgram_kind
            .map(|kind| {
                let local = if own_links.is_empty() {
                    vec![at]
                } else {
                    own_links.to_vec()
                };
                DgramShared::bind(
                    kind,
                    local,
                    all_links.to_vec(),
                    config,
                    job_id,
                    JobKey::from_bytes(key),
                )
                .map(Arc::new)
            })
            .transpose()
    };
    if own.port() != 0 {
        let tcp = want_tcp.then(|| crate::net::tcp::bind(own)).transpose()?;
        let dgram = bind_dgram(own)?;
        return Ok(NetworkSockets {
            tcp,
            dgram,
            local: Some(own),
        });
    }
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let tcp = crate::net::tcp::bind(own)?;
        let port = tcp
            .local_addr()
            .map_err(|e| Error::io(format!("reading the port bound at {own}"), e))?
            .port();
        let at = SocketAddr::new(own.ip(), port);
        match bind_dgram(at) {
            Ok(dgram) => {
                return Ok(NetworkSockets {
                    tcp: want_tcp.then_some(tcp),
                    dgram,
                    local: Some(at),
                })
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Config(format!("no free port at {own}"))))
}

impl ContextBuilder {
    /// The link addresses of every rank, in rank order (as `QUIVER_LINKS`, see
    /// [`crate::parse_links`]): this rank's datagram engine binds one socket per own link and
    /// stripes each connection over the links both ranks have. Without [`addrs`](Self::addrs),
    /// each rank's first link is also its address (tcp, and telling local from remote peers).
    pub fn links(mut self, links: Vec<Vec<SocketAddr>>) -> Self {
        self.links = links;
        self
    }

    /// The network address of every rank, in rank order (as `QUIVER_ADDRS`): this rank's
    /// TCP listener and UDP socket bind its own entry (port 0: any free port, reported by
    /// [`Context::local_addr`]). Without addresses only shm is used.
    pub fn addrs(mut self, addrs: Vec<SocketAddr>) -> Self {
        self.addrs = addrs;
        self
    }
    /// This process's rank (0..size).
    pub fn rank(mut self, rank: u32) -> Self {
        self.rank = rank;
        self
    }
    /// Number of ranks in the job.
    pub fn size(mut self, size: u32) -> Self {
        self.size = size;
        self
    }
    /// The job's identifier (all ranks must agree).
    pub fn job_id(mut self, job_id: u64) -> Self {
        self.job_id = job_id;
        self
    }
    /// The job's secret key (all ranks must agree).
    pub fn job_key(mut self, key: [u8; 32]) -> Self {
        self.key = key;
        self
    }
    /// Settings (default: [`Config::from_env`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Records how the job was learnt (for [`Context::bootstrap`]).
    pub(crate) fn bootstrap(mut self, bootstrap: Bootstrap) -> Self {
        self.bootstrap = bootstrap;
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
    pub(crate) fn build_with(mut self, bound: Option<NetworkSockets>) -> Result<Context> {
        crate::log::init_from_env();
        if self.size == 0 || self.rank >= self.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} is not in a job of size {}",
                self.rank, self.size
            )));
        }
        let config = match self.config {
            Some(c) => {
                c.validate()?;
                c
            }
            None => Config::from_env()?,
        };
        sys::allow_cross_memory_attach();
        let name = socket_name(self.job_id, self.rank);
        let listener = sys::seqpacket_listen(&name).map_err(|e| {
            Error::io(
                format!(
                    "listening as rank {} of job {:016x} (is this rank already running?)",
                    self.rank, self.job_id
                ),
                e,
            )
        })?;
        let listener = Arc::new(listener);
        if !self.links.is_empty() {
            if self.links.len() != self.size as usize {
                return Err(Error::Config(format!(
                    "QUIVER_LINKS names links for {} ranks in a job of {} ranks",
                    self.links.len(),
                    self.size
                )));
            }
            if self.addrs.is_empty() {
                self.addrs = self.links.iter().map(|links| links[0]).collect();
            }
        }
        if !self.addrs.is_empty() && self.addrs.len() != self.size as usize {
            return Err(Error::Config(format!(
                "QUIVER_ADDRS names {} addresses for a job of {} ranks",
                self.addrs.len(),
                self.size
            )));
        }
        let own_addr = self.addrs.get(self.rank as usize).copied();
        let bound = match bound {
            Some(bound) => bound,
            None => bind_network(
                own_addr,
                self.links
                    .get(self.rank as usize)
                    .map_or(&[][..], |l| &l[..]),
                &self.links,
                &config,
                self.job_id,
                self.key,
            )?,
        };
        let (tcp_listener, dgram) = (bound.tcp, bound.dgram);
        let mut addrs = self.addrs;
        if let (Some(own), Some(local)) = (addrs.get_mut(self.rank as usize), bound.local) {
            // Port 0 asked for any port: report the one bound.
            *own = local;
        }
        let shared = Arc::new(ContextShared {
            rank: self.rank,
            size: self.size,
            job_id: self.job_id,
            key: self.key,
            config,
            addrs,
            bootstrap: self.bootstrap,
            dgram,
            endpoints: Mutex::new(HashMap::new()),
            next_endpoint_id: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            stats: Mutex::new(ContextStats::default()),
        });
        let tcp_thread = match tcp_listener {
            Some(l) => {
                let shared = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("quiver-tcp-listener".into())
                        .spawn(move || crate::net::tcp::listen(&shared, &l))
                        .map_err(|e| Error::io("starting the tcp listener thread", e))?,
                )
            }
            None => None,
        };
        let thread = {
            let shared = shared.clone();
            let listener = listener.clone();
            std::thread::Builder::new()
                .name("quiver-listener".into())
                .spawn(move || listen(&shared, &listener))
                .map_err(|e| Error::io("starting the listener thread", e))?
        };
        tracing::info!(
            rank = shared.rank,
            size = shared.size,
            job = %format_args!("{:016x}", shared.job_id),
            transports = ?shared.config.transports,
            detect_ms = shared.config.detect.map_or(0, |d| d.as_millis() as u64),
            "context ready"
        );
        Ok(Context {
            shared,
            listener,
            thread: Some(thread),
            tcp_thread,
        })
    }
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
        crate::bootstrap::from_env()
    }

    /// Builds the context from the environment `quiver run` provides: `QUIVER_RANK`,
    /// `QUIVER_SIZE`, `QUIVER_JOB_ID` (16 hex digits), `QUIVER_JOB_KEY` (64 hex digits),
    /// `QUIVER_ADDRS` when network transports are used.
    pub(crate) fn from_quiver_run_env() -> Result<Context> {
        let get = |k: &str| {
            std::env::var(k).map_err(|_| {
                Error::Config(format!(
                    "{k} is not set: start the program with `quiver run -n N -- PROGRAM`, \
                     or set QUIVER_RANK, QUIVER_SIZE, QUIVER_JOB_ID and QUIVER_JOB_KEY"
                ))
            })
        };
        let num = |k: &str| -> Result<u32> {
            let v = get(k)?;
            v.trim()
                .parse()
                .map_err(|_| Error::Config(format!("{k}={v:?}: expected a whole number")))
        };
        let rank = num("QUIVER_RANK")?;
        let size = num("QUIVER_SIZE")?;
        let id_text = get("QUIVER_JOB_ID")?;
        let job_id = parse_hex::<8>(&id_text)
            .map(u64::from_be_bytes)
            .ok_or_else(|| {
                Error::Config(format!("QUIVER_JOB_ID={id_text:?}: expected 16 hex digits"))
            })?;
        let key_text = get("QUIVER_JOB_KEY")?;
        let key = parse_hex::<32>(&key_text).ok_or_else(|| {
            Error::Config("QUIVER_JOB_KEY: expected 64 hex digits (the value is not shown)".into())
        })?;
        let addrs = match std::env::var("QUIVER_ADDRS") {
            Ok(text) => crate::net::parse_addrs(&text)?,
            Err(_) => Vec::new(),
        };
        let links = match std::env::var("QUIVER_LINKS") {
            Ok(text) => crate::config::parse_links(&text)?,
            Err(_) => Vec::new(),
        };
        Context::builder()
            .rank(rank)
            .size(size)
            .job_id(job_id)
            .job_key(key)
            .addrs(addrs)
            .bootstrap(Bootstrap::QuiverRun)
            .links(links)
            .build()
    }

    /// Starts explicit construction.
    pub fn builder() -> ContextBuilder {
        ContextBuilder {
            rank: 0,
            size: 1,
            job_id: 0,
            key: [0; 32],
            config: None,
            addrs: Vec::new(),
            bootstrap: Bootstrap::Builder,
            links: Vec::new(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.shared.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.shared.size
    }

    /// The job's identifier.
    pub fn job_id(&self) -> u64 {
        self.shared.job_id
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// How this context learnt its rank, its job and its peers' addresses.
    pub fn bootstrap(&self) -> Bootstrap {
        self.shared.bootstrap
    }

    /// This rank's network address (its tcp listener and datagram socket), if it has one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.addrs.get(self.shared.rank as usize).copied()
    }

    /// The listener's counters.
    pub fn stats(&self) -> ContextStats {
        let mut stats = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        stats.datagram = self.shared.dgram.as_ref().map(|d| d.stats());
        stats
    }

    /// Traffic of each of this rank's datagram links (one entry per `QUIVER_LINKS` address of
    /// this rank, or one for its address), over the connections still open; empty without a
    /// datagram transport.
    pub fn link_stats(&self) -> Vec<crate::transport::dgram::LinkStats> {
        self.shared
            .dgram
            .as_ref()
            .map(|d| d.link_stats())
            .unwrap_or_default()
    }

    /// This rank's own datagram link addresses, in link order (empty without a datagram
    /// transport).
    pub fn links(&self) -> Vec<SocketAddr> {
        self.shared
            .dgram
            .as_ref()
            .map(|d| d.local_links().to_vec())
            .unwrap_or_default()
    }

    /// Opens endpoint `port` of this rank; peers reach it at `Addr { rank, port }`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the port is already open, [`Error::Io`].
    pub fn endpoint(&self, port: u16) -> Result<Endpoint> {
        let doorbell = Doorbell::new().map_err(|e| {
            Error::shared_memory(
                format!("the doorbell of endpoint {}:{port}", self.shared.rank),
                4096,
                e,
            )
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
        let shared = Arc::new(EndpointShared {
            incoming: Mutex::new(Vec::new()),
            incoming_net: Mutex::new(Vec::new()),
            has_incoming: AtomicBool::new(false),
            tcp_peers: Mutex::new(TcpPeers::default()),
            bell_memfd,
            bell_eventfd,
            own_bell,
        });
        {
            let mut eps = self
                .shared
                .endpoints
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if eps.contains_key(&port) {
                return Err(Error::InvalidArgument(format!(
                    "endpoint {}:{port} is already open",
                    self.shared.rank
                )));
            }
            eps.insert(port, shared.clone());
        }
        let id = self.shared.next_endpoint_id.fetch_add(1, Ordering::Relaxed);
        Ok(Endpoint::new(
            id,
            Addr::new(self.shared.rank, port),
            self.shared.clone(),
            shared,
            doorbell,
        ))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        sys::shutdown(&self.listener);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.tcp_thread.take() {
            let _ = t.join();
        }
    }
}

impl ContextShared {
    pub(crate) fn unregister(&self, port: u16) {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&port);
    }

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

    /// The datagram transport this context runs, if any.
    pub(crate) fn dgram_kind(&self) -> Option<TransportKind> {
        self.dgram.as_ref().map(|d| d.kind())
    }

    /// The shared part of endpoint `port`, if open.
    pub(crate) fn endpoint_shared(&self, port: u16) -> Option<Arc<EndpointShared>> {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&port)
            .cloned()
    }

    /// Counts an accepted connection.
    pub(crate) fn accepted(&self) {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .connections_accepted += 1;
    }

    pub(crate) fn refused(&self, why: String) {
        if why.contains("which is not open") {
            // Usual while the job starts: the initiator retries.
            tracing::debug!(rank = self.rank, reason = %why, "refused a connection");
        } else {
            tracing::warn!(rank = self.rank, reason = %why, "refused a connection");
        }
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.connections_refused += 1;
        s.last_refusal = Some(why);
    }
}

/// Abstract socket name of a rank's listener.
fn socket_name(job_id: u64, rank: u32) -> Vec<u8> {
    format!("quiver.{job_id:016x}.{rank}").into_bytes()
}

pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.trim().as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom only fails without any entropy source, which Linux always has.
    getrandom::getrandom(&mut b).expect("the kernel's random source is available");
    b
}

// ----- responder (listener thread) ---------------------------------------------------

fn listen(shared: &ContextShared, listener: &OwnedFd) {
    loop {
        let sock = match sys::accept(listener) {
            Ok(s) => s,
            Err(e) => {
                if shared.stopping.load(Ordering::Acquire) {
                    return;
                }
                match e.raw_os_error() {
                    Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
                    Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOMEM) => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    _ => return,
                }
            }
        };
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        // `respond` counts the acceptance itself, before the peer can start sending.
        if let Err(why) = respond(shared, &sock) {
            shared.refused(why);
        }
    }
}

/// Runs one responder handshake on `sock`; on success the new inbound edge is registered
/// with its endpoint.
fn respond(shared: &ContextShared, sock: &OwnedFd) -> std::result::Result<(), String> {
    sys::set_socket_timeouts(sock, HANDSHAKE_STEP_TIMEOUT).map_err(|e| e.to_string())?;
    let pid = sys::peer_pid(sock).map_err(|e| format!("reading the peer's credentials: {e}"))?;
    let mut hs = Responder::new(shared.job_key(), shared.job_id, random());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let flush = |hs: &mut Responder, out: &mut [u8]| -> std::result::Result<(), String> {
        while let Some(n) = hs.poll_transmit(out).map_err(|e| e.to_string())? {
            sys::send_datagram(sock, &out[..n]).map_err(|e| format!("sending: {e}"))?;
        }
        Ok(())
    };
    let n = recv_message(sock, &mut buf)?;
    let request = match hs.handle_hello(&buf[..n]) {
        Ok(r) => r,
        Err(e) => {
            let _ = flush(&mut hs, &mut out);
            return Err(format!("hello from pid {pid}: {e}"));
        }
    };
    let endpoint = shared
        .endpoints
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&request.dst_port)
        .cloned();
    let valid_src = request.src_rank < shared.size;
    let Some(endpoint) = endpoint.filter(|_| valid_src) else {
        hs.reject(RejectReason::NoSuchEndpoint)
            .map_err(|e| e.to_string())?;
        let _ = flush(&mut hs, &mut out);
        return Err(format!(
            "rank {} asked for port {}, which is not open",
            request.src_rank, request.dst_port
        ));
    };
    hs.accept(&[]).map_err(|e| e.to_string())?;
    flush(&mut hs, &mut out)?;
    let n = recv_message(sock, &mut buf)?;
    let probe = match hs.handle_proof(&buf[..n]) {
        Ok(params) => parse_probe(params),
        Err(e) => {
            let _ = flush(&mut hs, &mut out);
            return Err(format!("rank {} (pid {pid}): {e}", request.src_rank));
        }
    };
    flush(&mut hs, &mut out)?;
    let peer = Addr::new(request.src_rank, request.src_port);
    // Can we pull large messages out of the sender's memory?
    let cma_ok = probe.is_some_and(|(addr, value)| {
        let mut word = [0u8; 8];
        matches!(sys::process_vm_read(pid, &mut word, addr), Ok(8))
            && u64::from_ne_bytes(word) == value
    });
    if !cma_ok {
        let body = SetupRepr {
            status: SetupStatus::CrossMemoryDenied,
            ring_bytes: 0,
        }
        .emit();
        let _ = sys::send_datagram(sock, &body);
        return Err(format!(
            "cannot read the memory of rank {} (pid {pid}) with process_vm_readv",
            peer.rank
        ));
    }
    let ring_bytes = shared.config.shm_ring_bytes;
    let created = Consumer::create(ring_bytes, u64::from_ne_bytes(random()))
        .and_then(|(ring, fd)| Ok((ring, fd, sys::pidfd_open(pid)?)));
    let (ring, ring_fd, pidfd) = match created {
        Ok(x) => x,
        Err(e) => {
            let body = SetupRepr {
                status: SetupStatus::NoResources,
                ring_bytes: 0,
            }
            .emit();
            let _ = sys::send_datagram(sock, &body);
            let error = Error::shared_memory(
                format!("the ring from {peer} to port {}", request.dst_port),
                ring_bytes,
                e,
            );
            return Err(error.to_string());
        }
    };
    // Register before the sender can write: it only starts once it has the setup message.
    endpoint
        .incoming
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(NewInbound {
            peer,
            pid,
            pidfd,
            ring,
        });
    endpoint.has_incoming.store(true, Ordering::Release);
    endpoint.own_bell.ring();
    let body = SetupRepr {
        status: SetupStatus::Ready,
        ring_bytes,
    }
    .emit();
    // Counted before the setup message leaves: once the peer has it, it may send everything
    // and this rank may finish (and read its stats) before this thread runs again.
    let count = |delta: i64| {
        let mut stats = shared.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.connections_accepted = stats.connections_accepted.saturating_add_signed(delta);
        stats.shm_connections_accepted =
            stats.shm_connections_accepted.saturating_add_signed(delta);
    };
    count(1);
    sys::send_with_fds(
        sock,
        &body,
        &[
            ring_fd.as_raw_fd(),
            endpoint.bell_memfd.as_raw_fd(),
            endpoint.bell_eventfd.as_raw_fd(),
        ],
    )
    .map_err(|e| {
        count(-1);
        format!("sending the ring to rank {}: {e}", peer.rank)
    })?;
    Ok(())
}

fn recv_message(sock: &OwnedFd, buf: &mut [u8]) -> std::result::Result<usize, String> {
    sys::recv_with_fds(sock, buf)
        .map(|(n, _fds)| n)
        .map_err(|e| format!("receiving a handshake message: {e}"))
}

fn parse_probe(params: &[u8]) -> Option<(u64, u64)> {
    let p: &[u8; 16] = params.try_into().ok()?;
    let mut a = [0u8; 8];
    let mut v = [0u8; 8];
    a.copy_from_slice(&p[..8]);
    v.copy_from_slice(&p[8..]);
    Some((u64::from_be_bytes(a), u64::from_be_bytes(v)))
}

// ----- initiator (Endpoint::connect) ---------------------------------------------------

/// Connects endpoint `src` of this process to `dst`, retrying while the peer is not (yet)
/// listening or its endpoint is not yet open, up to the connect timeout.
pub(crate) fn connect(shared: &ContextShared, src: Addr, dst: Addr) -> Result<NewOutbound> {
    let timeout = shared.config.connect_timeout;
    let suffix = format!("gave up after {} ms", timeout.as_millis());
    retry_until(dst, Instant::now() + timeout, &suffix, || {
        try_connect(shared, src, dst)
    })
}

/// The outcome of one connection attempt that did not succeed.
pub(crate) enum Attempt {
    /// The peer is not there yet (not listening, endpoint not open): try again.
    Retry(String),
    /// No answer at the peer's address over this transport (e.g. a tcp connect timed out):
    /// try again; at the deadline this is [`Error::Unreachable`].
    Silent(&'static str, String),
    /// A final error.
    Fail(Error),
}

/// Repeats `attempt` with a backoff of 1..50 ms while it says `Retry`, until `deadline`;
/// then fails with `Refused`, naming the last reason and `suffix`.
pub(crate) fn retry_until<T>(
    dst: Addr,
    deadline: Instant,
    suffix: &str,
    mut attempt: impl FnMut() -> std::result::Result<T, Attempt>,
) -> Result<T> {
    let mut backoff = Duration::from_millis(1);
    loop {
        let (silent, why) = match attempt() {
            Ok(x) => return Ok(x),
            Err(Attempt::Retry(why)) => (None, why),
            Err(Attempt::Silent(transport, why)) => (Some(transport), why),
            Err(Attempt::Fail(e)) => return Err(e),
        };
        let now = Instant::now();
        if now >= deadline {
            tracing::warn!(peer = %dst, reason = %why, "connection attempts gave up");
            return Err(match silent {
                Some(transport) => Error::Unreachable {
                    peer: dst,
                    transport,
                    detail: format!("{why} ({suffix})"),
                },
                None => Error::Refused {
                    peer: dst,
                    reason: format!("{why} ({suffix})"),
                },
            });
        }
        std::thread::sleep(backoff.min(deadline - now));
        backoff = (backoff * 2).min(Duration::from_millis(50));
    }
}

fn try_connect(
    shared: &ContextShared,
    src: Addr,
    dst: Addr,
) -> std::result::Result<NewOutbound, Attempt> {
    let io_fail =
        |what: &str, e: std::io::Error| Attempt::Fail(Error::io(format!("{what} {dst}"), e));
    let sock = match sys::seqpacket_connect(&socket_name(shared.job_id, dst.rank)) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ECONNREFUSED) | Some(libc::ENOENT) | Some(libc::EAGAIN)
            ) =>
        {
            return Err(Attempt::Retry(format!(
                "rank {} is not listening",
                dst.rank
            )))
        }
        Err(e) => return Err(io_fail("connecting to", e)),
    };
    sys::set_socket_timeouts(&sock, HANDSHAKE_STEP_TIMEOUT)
        .map_err(|e| io_fail("configuring the socket to", e))?;
    let request = ConnectRequest {
        job_id: shared.job_id,
        src_rank: src.rank,
        src_port: src.port,
        dst_port: dst.port,
    };
    let mut hs = Initiator::new(shared.job_key(), request, random());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut out = [0u8; MAX_MESSAGE_LEN];
    // The peer answered, but not as the protocol says.
    let refused = |reason: String| {
        Attempt::Fail(Error::Corrupt {
            peer: dst,
            detail: format!("shared-memory connection setup: {reason}"),
        })
    };
    let transmit = |hs: &mut Initiator, out: &mut [u8]| -> std::result::Result<(), Attempt> {
        while let Some(n) = hs.poll_transmit(out).map_err(|e| refused(e.to_string()))? {
            sys::send_datagram(&sock, &out[..n]).map_err(|e| io_fail("handshaking with", e))?;
        }
        Ok(())
    };
    transmit(&mut hs, &mut out)?;
    let (n, _) = sys::recv_with_fds(&sock, &mut buf).map_err(|e| io_fail("handshaking with", e))?;
    // The probe word lives on this stack frame until the setup message has arrived, which
    // is after the responder read it.
    let probe_value = u64::from_ne_bytes(random());
    let probe_word = std::hint::black_box(probe_value);
    let mut params = [0u8; 16];
    params[..8].copy_from_slice(&(&probe_word as *const u64 as u64).to_be_bytes());
    params[8..].copy_from_slice(&probe_value.to_be_bytes());
    let failed = |e| Attempt::Fail(Error::handshake(dst, "shm", e));
    match hs.handle_challenge(&buf[..n], &params) {
        Ok(_) => {}
        Err(HandshakeError::NoSuchEndpoint { .. }) => {
            return Err(Attempt::Retry(format!("endpoint {dst} is not open")));
        }
        Err(e) => return Err(failed(e)),
    }
    transmit(&mut hs, &mut out)?;
    let (n, _) = sys::recv_with_fds(&sock, &mut buf).map_err(|e| io_fail("handshaking with", e))?;
    hs.handle_verdict(&buf[..n]).map_err(failed)?;
    let (n, fds) =
        sys::recv_with_fds(&sock, &mut buf).map_err(|e| io_fail("receiving the ring from", e))?;
    std::hint::black_box(&probe_word);
    let setup =
        SetupRepr::parse(&buf[..n]).map_err(|e| refused(format!("bad setup message: {e}")))?;
    match setup.status {
        SetupStatus::Ready => {}
        SetupStatus::CrossMemoryDenied => {
            return Err(Attempt::Fail(Error::PermissionDenied {
                what: format!(
                    "for cross-memory attach: rank {} cannot read this process's memory",
                    dst.rank
                ),
                detail: "process_vm_readv failed its ptrace access check (EPERM)".into(),
                fix: CMA_FIX,
            }))
        }
        SetupStatus::NoResources => {
            return Err(Attempt::Fail(Error::OutOfSharedMemory {
                what: format!(
                    "the ring from {src} to {dst}, which rank {} creates",
                    dst.rank
                ),
                bytes: shared.config.shm_ring_bytes,
                detail: format!(
                    "rank {} could not allocate it; its listener counted the refusal",
                    dst.rank
                ),
            }))
        }
    }
    let [ring_fd, bell_memfd, bell_eventfd]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| refused("setup message without the three descriptors".into()))?;
    let ring = Producer::attach(&ring_fd).map_err(|e| match e {
        quiver_transport::ring::AttachError::Io(io) => Attempt::Fail(Error::shared_memory(
            format!("the mapping of the ring from {src} to {dst}"),
            shared.config.shm_ring_bytes,
            io,
        )),
        other => refused(format!("the ring sent is unusable: {other}")),
    })?;
    if ring.capacity() != setup.ring_bytes {
        return Err(refused("ring size disagrees with the setup message".into()));
    }
    let bell = RemoteDoorbell::attach(&bell_memfd, bell_eventfd)
        .map_err(|e| io_fail("mapping the doorbell of", e))?;
    let pid = sys::peer_pid(&sock).map_err(|e| io_fail("reading the credentials of", e))?;
    let pidfd = sys::pidfd_open(pid).map_err(|e| io_fail("watching the process of", e))?;
    Ok(NewOutbound {
        pid,
        pidfd,
        ring,
        bell,
    })
}

/// What to do when cross-memory attach between two ranks is denied.
const CMA_FIX: &str = "run every rank as the same user (and keep them dumpable), or give the \
    ranks CAP_SYS_PTRACE; under Yama, kernel.yama.ptrace_scope must be 0 or 1 (quiver \
    declares its peers as ptracers), and a container's seccomp profile must allow \
    process_vm_readv; QUIVER_TRANSPORTS=tcp or udp avoids shared memory altogether";

pub(crate) fn describe_handshake_error(e: HandshakeError) -> String {
    match e {
        HandshakeError::AuthenticationFailed { .. } => {
            format!("wrong job key: the peer could not prove membership of this job, or we could not ({e})")
        }
        HandshakeError::WrongJob { .. } => format!("the peer belongs to another job ({e})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_parsing() {
        assert_eq!(parse_hex::<2>("0aFF"), Some([0x0a, 0xff]));
        assert_eq!(parse_hex::<2>("0aF"), None);
        assert_eq!(parse_hex::<2>("zz00"), None);
    }
}
