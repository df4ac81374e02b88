//! The datagram engine's state ([`Engine`], behind one mutex) and the handle the context
//! shares with its endpoints ([`DgramShared`]): binding the link sockets, the per-peer
//! protocol settings, the clock, timers and waiting, and the counters.
//!
//! Layer: the datagram transport. The receive, send, connect and poll paths add their
//! methods to these types in their own files; this one holds no I/O path of its own
//! beyond sleeping on the engine's descriptor.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use quiver_proto::handshake::JobKey;
use quiver_proto::reliable::{Nanos, ReliableConfig, State};
use quiver_proto::router::Router;
use quiver_transport::udp::{
    coarse_resolution_ns, monotonic_coarse_ns, monotonic_ns, ReadinessSet,
};
use quiver_wire::frame::MAX_HEADER_LEN;

use super::connection::{Entry, Status};
use super::stats::{DatagramRefusals, DatagramStats, LinkStats};
use super::udp_io::{bind_socket, Socket};
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::failure::Failure;
use crate::transport::liveness::identity_params;

/// Largest datagram on loopback (and the mem transport) when not configured.
const LOOPBACK_DATAGRAM: usize = 65000;
/// Largest datagram elsewhere when not configured: Ethernet MTU 1500 - IPv4 - UDP headers.
const ETHERNET_DATAGRAM: usize = 1472;

/// Smallest retransmission timeout of a udp connection (loopback included) or one striped
/// over several links (a path that times out a few times in a row goes down: about 70 ms
/// with backoff).
const NETWORK_MIN_RTO_NS: Nanos = 10_000_000;

/// The same floor when this node's ranks outnumber their CPUs (the waiting policy's
/// `NodeLoad::oversubscribed`): a peer that is runnable but waits for a CPU does not
/// acknowledge for tens of milliseconds. With the 10 ms floor, the examples (8 ranks on 2
/// CPUs, loopback, no loss) resent 6-717 frames per run, every one a duplicate; with 50 ms,
/// none (docs/decisions/0073-calm-udp-on-a-busy-node.md).
const BUSY_NODE_MIN_RTO_NS: Nanos = 50_000_000;

/// The engine as the context shares it with its endpoints.
#[derive(Debug)]
pub(crate) struct DgramShared {
    pub(super) kind: TransportKind,
    /// The socket's descriptor, or with several links the epoll set of them.
    pub(super) fd: RawFd,
    /// The epoll set of the link sockets (several links): the engine's descriptor, and
    /// which sockets have something to receive.
    pub(super) readiness: Option<ReadinessSet>,
    pub(super) job_id: u64,
    pub(super) key: JobKey,
    /// Own link addresses, by link (path) index.
    pub(super) local_links: Vec<SocketAddr>,
    pub(super) engine: Mutex<Engine>,
}

impl DgramShared {
    /// Binds this rank's datagram sockets, one per own link in `local` (its `QUIVER_LINKS`
    /// entry, or just its address); `links` are every rank's links (empty: one each).
    pub(crate) fn bind(
        kind: TransportKind,
        local: Vec<SocketAddr>,
        links: Vec<Vec<SocketAddr>>,
        config: &Config,
        job_id: u64,
        key: JobKey,
    ) -> Result<DgramShared> {
        let mut sockets = Vec::with_capacity(local.len());
        for (index, &addr) in local.iter().enumerate() {
            let interface = config.xdp_interfaces.get(index).map(String::as_str);
            sockets.push(bind_socket(
                kind,
                addr,
                &config.faults,
                interface,
                config.udp_io,
            )?);
        }
        let faults_on = config.faults.is_on();
        // A scattering receive would put payloads in place before the injector saw them.
        let arrivals_faulted = sockets.iter().any(Socket::arrivals_faulted);
        let (fd, readiness) = match sockets.as_slice() {
            [only] => (only.raw_fd(), None),
            _ => {
                let mut set = ReadinessSet::new()
                    .map_err(|e| Error::io("creating the epoll set of the link sockets", e))?;
                // The sockets live in the engine, as long as the set (both are owned by this
                // DgramShared).
                for socket in &sockets {
                    set.add(socket.raw_fd())
                        .map_err(|e| Error::io("adding a link socket to the epoll set", e))?;
                }
                (set.as_raw_fd(), Some(set))
            }
        };
        // The router checks the job key of every Hello; the shared handle keeps its own copy
        // for the Hellos it sends.
        let router = Router::new(job_id, key.clone());
        let base = reliable_config(config);
        base.validate()
            .map_err(|e| Error::Config(format!("network settings: {e}")))?;
        Ok(DgramShared {
            kind,
            fd,
            readiness,
            job_id,
            key,
            local_links: local,
            engine: Mutex::new(Engine {
                sockets,
                links,
                router,
                base,
                config_datagram: config.udp_datagram_bytes,
                network_min_rto_ns: network_min_rto_ns(config),
                in_place_min: config.udp_in_place_min,
                scatter_min: if arrivals_faulted {
                    0
                } else {
                    config.udp_scatter_min
                },
                in_place_bdp_multiple: config.udp_send_in_place_bdp_multiple,
                faults_on,
                start_ns: monotonic_ns(),
                // Two ticks: the tick that moves the coarse clock may run late.
                coarse_lag_ns: 2 * coarse_resolution_ns(),
                header: [0; MAX_HEADER_LEN],
                rx: vec![0u8; 65536].into_boxed_slice(),
                next_timer: None,
                timers_dirty: false,
                news: 0,
                retired: DatagramStats::default(),
                refused: DatagramRefusals::default(),
                deferred: Vec::new(),
                touched: Vec::new(),
                timed_out: Vec::new(),
                housekeeping_owed: false,
                next_socket: 0,
                sent_in_place_bytes: 0,
                adopted_bytes: 0,
                posted_in_place_bytes: 0,
                sleepers: Vec::new(),
                takes_since_poll: 0,
                buffered_takes: 0,
                #[cfg(test)]
                flushes: 0,
            }),
        })
    }

    /// This rank's own link addresses, by link index.
    pub(crate) fn local_links(&self) -> &[SocketAddr] {
        &self.local_links
    }

    /// Traffic of each own link over the open connections.
    pub(crate) fn link_stats(&self) -> Vec<LinkStats> {
        let engine = self.lock();
        let mut links: Vec<LinkStats> = self
            .local_links
            .iter()
            .zip(&engine.sockets)
            .map(|(&address, socket)| LinkStats {
                address: Some(address),
                xdp: match socket {
                    Socket::Xdp(x) => Some(x.link.stats()),
                    _ => None,
                },
                uring: match socket {
                    Socket::Uring(u) => Some(u.socket.stats()),
                    _ => None,
                },
                ..offload_stats(socket)
            })
            .collect();
        for entry in engine.router.connections().values() {
            for (path, link) in links.iter_mut().enumerate() {
                if let Some(stats) = entry.core.path_stats(path) {
                    let datagram = entry.core.max_datagram_bytes() as u64;
                    link.max_datagram_bytes = match link.max_datagram_bytes {
                        0 => datagram,
                        smallest => smallest.min(datagram),
                    };
                    link.datagrams_sent += stats.datagrams_sent;
                    link.datagrams_received += stats.datagrams_received;
                    link.payload_bytes_sent += stats.payload_bytes_sent;
                    link.frames_lost += stats.frames_lost;
                    link.spurious_losses += stats.spurious_losses;
                    link.times_down += stats.times_down;
                    link.window_bytes = link.window_bytes.max(stats.window_bytes);
                    link.delivery_rate_bytes_per_second = link
                        .delivery_rate_bytes_per_second
                        .max(stats.delivery_rate_bytes_per_second);
                    link.smoothed_rtt_ns = link.smoothed_rtt_ns.max(stats.smoothed_rtt_ns);
                    link.min_rtt_ns = link.min_rtt_ns.max(stats.min_rtt_ns);
                }
            }
        }
        links
    }

    /// The protocol's counters over every connection so far.
    pub(crate) fn stats(&self) -> DatagramStats {
        let engine = self.lock();
        let mut total = engine.retired;
        total.connections = 0;
        total.sent_in_place_bytes = engine.sent_in_place_bytes;
        total.adopted_bytes = engine.adopted_bytes;
        total.posted_in_place_bytes = engine.posted_in_place_bytes;
        total.buffered_takes = engine.buffered_takes;
        total.refused = engine.refused;
        total.hellos_remembered = engine.router.hello_count() as u64;
        total.hellos_evicted = engine.router.hellos_evicted();
        for e in engine.router.connections().values() {
            total.add(e.core.stats());
            total.connections += u64::from(!e.abandoned);
        }
        for faults in engine.sockets.iter().filter_map(Socket::fault_stats) {
            total.faults.add(&faults);
        }
        total
    }

    /// udp or mem.
    pub(crate) fn kind(&self) -> TransportKind {
        self.kind
    }

    /// The descriptor that becomes readable when datagrams arrive.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd
    }

    #[inline]
    pub(super) fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a sleeper may sleep before a protocol timer is due (at most `cap`).
    pub(crate) fn timeout_within(&self, cap: Duration) -> Duration {
        let mut engine = self.lock();
        if engine.timers_dirty {
            engine.next_timer = engine.earliest_timer();
        }
        match engine.next_timer {
            Some(t) => {
                let now = engine.now();
                Duration::from_nanos(t.saturating_sub(now)).min(cap)
            }
            None => cap,
        }
    }

    /// Sleeps until a datagram arrives, the next protocol timer is due, or `cap` passed.
    pub(crate) fn sleep(&self, cap: Duration) {
        let mut fds = [libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = quiver_transport::sys::poll(&mut fds, Some(self.timeout_within(cap)));
    }
}

/// Everything the engine owns: its sockets and connections, the settings they are made
/// with, and the poll's reused buffers and bookkeeping.
#[derive(Debug)]
pub(super) struct Engine {
    /// One socket per own link (index = path).
    pub(super) sockets: Vec<Socket>,
    /// Link addresses of every rank (`QUIVER_LINKS`; empty: one link each).
    pub(super) links: Vec<Vec<SocketAddr>>,
    /// The connections by id (and short id), and the Hellos answered so far: the routing of
    /// received datagrams is the router's ([`quiver_proto::router`]).
    pub(super) router: Router<Entry>,
    pub(super) base: ReliableConfig,
    /// `Config::udp_datagram_bytes` (0: by the medium, see [`config_for`]).
    pub(super) config_datagram: usize,
    /// The floor of a udp connection's retransmission timeout ([`network_min_rto_ns`]).
    pub(super) network_min_rto_ns: Nanos,
    /// `Config::udp_in_place_min`: payloads this long or longer are sent in place.
    pub(super) in_place_min: usize,
    /// `Config::udp_scatter_min` (0: off; also 0 when arrivals go through fault injectors).
    pub(super) scatter_min: usize,
    /// `Config::udp_send_in_place_bdp_multiple` (0: always in place).
    pub(super) in_place_bdp_multiple: u64,
    /// The sockets have fault injectors (`Config::faults`): each poll releases what they
    /// hold back.
    pub(super) faults_on: bool,
    /// When the engine started, as [`monotonic_ns`] read it (the origin of
    /// [`Engine::now`]).
    pub(super) start_ns: Nanos,
    /// How far the coarse clock may lag [`Engine::now`]'s ([`Engine::may_be_due`]).
    pub(super) coarse_lag_ns: Nanos,
    pub(super) header: [u8; MAX_HEADER_LEN],
    pub(super) rx: Box<[u8]>,
    /// Earliest protocol timer over all connections (recomputed by each poll).
    pub(super) next_timer: Option<Nanos>,
    /// Counts polls that fed or timed out a connection (news for receivers: a receiver that
    /// found nothing on its connections at one count need not look again at the same).
    pub(super) news: u64,
    /// A connection's timers may have moved since `next_timer` was computed (something was
    /// sent, read or closed): the next poll looks at every connection again. Polls that
    /// find nothing to do skip the timer scan otherwise.
    pub(super) timers_dirty: bool,
    /// Counters of connections already forgotten.
    pub(super) retired: DatagramStats,
    /// Datagrams received that no connection took, by why.
    pub(super) refused: DatagramRefusals,
    /// Connections whose acknowledgements wait for the next poll: a message of theirs was
    /// just delivered (or is about to be), and the application's answer should leave
    /// before our ack does.
    pub(super) deferred: Vec<u64>,
    /// Connections a poll fed or timed out (reused: polls allocate nothing).
    pub(super) touched: Vec<u64>,
    /// Connections whose retransmission timer fired in a poll (reused).
    pub(super) timed_out: Vec<u64>,
    /// The last poll handed messages to the application and left its housekeeping to this
    /// one (see [`Engine::poll_into`]).
    pub(super) housekeeping_owed: bool,
    /// The socket a poll looks at first (several links: the one after the last served).
    pub(super) next_socket: usize,
    /// Bytes of messages sent in place, and of those, bytes that had to be copied into a
    /// send window after all (not acknowledged before their send returned).
    pub(super) sent_in_place_bytes: u64,
    pub(super) adopted_bytes: u64,
    /// Bytes of posted messages lent to the protocol (never copied).
    pub(super) posted_in_place_bytes: u64,
    /// Endpoints asleep on their descriptor, by port, with the inbox whose doorbell wakes
    /// them (`sleepers.rs`).
    pub(super) sleepers: Vec<(u16, std::sync::Arc<crate::transport::registry::Inbox>)>,
    /// Receives since the last poll that took a message already whole in its connection's
    /// receive window without polling the sockets (`DgramShared::take_whole`).
    pub(super) takes_since_poll: u32,
    /// Calls of `Engine::flush_lent_at` (tests count the flushes a poll makes).
    #[cfg(test)]
    pub(super) flushes: u64,
    /// Such receives in all (`DatagramStats::buffered_takes`).
    pub(super) buffered_takes: u64,
}

impl Engine {
    /// Connection `id`, or the failure a send on it reports when it is gone.
    pub(super) fn live_entry(
        &mut self,
        kind: TransportKind,
        id: u64,
    ) -> std::result::Result<&mut Entry, Failure> {
        self.router
            .get_mut(id)
            .ok_or_else(|| Failure::Lost(kind.name(), "the connection is gone".into()))
    }

    /// Connection `id` if it can still send: gone, failed or closed is the failure a send
    /// on it reports. Closing is closed for a send: the endpoint that closes its side
    /// sends nothing more, so a connection closing while this endpoint still sends was
    /// closed by the peer, which reads nothing more (decision 0089).
    pub(super) fn open_entry(
        &mut self,
        kind: TransportKind,
        id: u64,
    ) -> std::result::Result<&mut Entry, Failure> {
        let entry = self.live_entry(kind, id)?;
        match &entry.status {
            Status::Failed(why) => Err(Failure::Lost(kind.name(), why.clone())),
            Status::Closed => Err(Failure::Closed),
            _ if entry.core.state() == State::Closing => Err(Failure::Closed),
            _ => Ok(entry),
        }
    }

    #[inline]
    pub(super) fn defer(&mut self, id: u64) {
        if !self.deferred.contains(&id) {
            self.deferred.push(id);
        }
    }

    /// Nanoseconds since the engine started: `CLOCK_MONOTONIC` read and subtracted in
    /// plain integers ([`monotonic_ns`]; `Instant::elapsed` adds its `Duration` and `u128`
    /// steps to the two reads per hop on the latency path).
    #[inline]
    pub(super) fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.start_ns)
    }

    /// The poll's clock `clock`: [`Engine::now`] read the first time it is needed, the
    /// same value after.
    #[inline]
    pub(super) fn now_once(&self, clock: &mut Option<Nanos>) -> Nanos {
        *clock.get_or_insert_with(|| self.now())
    }

    /// Whether a timer at `at` may be due: surely when the poll's clock (`clock`, if read)
    /// says so, else when the coarse clock, which lags the precise one by at most
    /// `coarse_lag_ns`, comes within that lag of it. False means not due yet, for one
    /// read of the coarse clock instead of the precise one (an empty poll's).
    #[inline]
    pub(super) fn may_be_due(&self, at: Nanos, clock: Option<Nanos>) -> bool {
        match clock {
            Some(now) => at <= now,
            None => {
                monotonic_coarse_ns()
                    .saturating_sub(self.start_ns)
                    .saturating_add(self.coarse_lag_ns)
                    >= at
            }
        }
    }

    /// The earliest protocol timer over all connections.
    pub(super) fn earliest_timer(&self) -> Option<Nanos> {
        self.router
            .connections()
            .values()
            .filter_map(|e| e.core.poll_timeout())
            .min()
    }

    /// A new connection id: non-zero, its short id (what Stream frames carry) unique
    /// among the engine's connections.
    pub(super) fn fresh_id(&self) -> u64 {
        self.router.fresh_id(|| u64::from_ne_bytes(random()))
    }

    /// The peer's address on each path ([`peer_paths`]).
    pub(super) fn peer_paths(&self, rank: u32, to: SocketAddr) -> Vec<SocketAddr> {
        peer_paths(&self.links, self.sockets.len(), rank, to)
    }

    /// The protocol settings of a connection to `to` ([`config_for`]).
    pub(super) fn config_for(&self, to: &SocketAddr, path_count: usize) -> ReliableConfig {
        config_for(
            &self.sockets,
            &self.base,
            self.config_datagram,
            self.network_min_rto_ns,
            to,
            path_count,
        )
    }
}

/// A link's refused sends and lowered datagram sizes (a udp link's, plain or io_uring, and
/// an xdp link's lowered sizes; zero for mem).
fn offload_stats(socket: &Socket) -> LinkStats {
    match socket {
        Socket::Udp(io) => LinkStats {
            gso_refusals: io.offload.gso_refusals,
            mtu_refusals: io.offload.size_refusals,
            datagram_size_lowered: io.offload.datagram_size_lowered,
            ..LinkStats::default()
        },
        Socket::Xdp(io) => LinkStats {
            datagram_size_lowered: io.datagram_size_lowered,
            ..LinkStats::default()
        },
        Socket::Uring(io) => LinkStats {
            gso_refusals: io.socket.stats().gso_refusals,
            mtu_refusals: io.socket.stats().size_refusals,
            datagram_size_lowered: io.datagram_size_lowered,
            ..LinkStats::default()
        },
        _ => LinkStats::default(),
    }
}

/// The peer's address on each path: its links (as many as both ranks have: `links` holds
/// every rank's, and this rank has `socket_count` sockets), or just `to` without
/// `QUIVER_LINKS`.
pub(super) fn peer_paths(
    links: &[Vec<SocketAddr>],
    socket_count: usize,
    rank: u32,
    to: SocketAddr,
) -> Vec<SocketAddr> {
    match links.get(rank as usize) {
        Some(theirs) if socket_count > 1 || theirs.len() > 1 => {
            let count = theirs.len().min(socket_count).max(1);
            theirs[..count].to_vec()
        }
        _ => vec![to],
    }
}

/// The floor of a udp (or striped) connection's retransmission timeout: higher when this
/// node's ranks outnumber their CPUs ([`BUSY_NODE_MIN_RTO_NS`]).
pub(super) fn network_min_rto_ns(config: &Config) -> Nanos {
    if config.wait.load.oversubscribed() {
        BUSY_NODE_MIN_RTO_NS
    } else {
        NETWORK_MIN_RTO_NS
    }
}

/// The protocol settings of a connection to `to` over `path_count` paths: `base` (the
/// context's), with the datagram size of the medium (`config_datagram` when set) and, over
/// a network, a higher floor on the retransmission timeout (`network_min_rto_ns`, from
/// [`network_min_rto_ns`]). `sockets` are the engine's link
/// sockets (not empty).
pub(super) fn config_for(
    sockets: &[Socket],
    base: &ReliableConfig,
    config_datagram: usize,
    network_min_rto_ns: Nanos,
    to: &SocketAddr,
    path_count: usize,
) -> ReliableConfig {
    let datagram = match (config_datagram, &sockets[0]) {
        (0, Socket::Mem(_)) => LOOPBACK_DATAGRAM,
        // The smallest frame of the links' (their MTUs within a UMEM frame).
        (0, Socket::Xdp(_)) => sockets
            .iter()
            .filter_map(|s| match s {
                Socket::Xdp(x) => Some(x.link.max_datagram()),
                _ => None,
            })
            .min()
            .unwrap_or(ETHERNET_DATAGRAM),
        (n, Socket::Xdp(x)) => n.min(x.link.max_datagram()),
        (0, _) if to.ip().is_loopback() => LOOPBACK_DATAGRAM,
        (0, _) => ETHERNET_DATAGRAM,
        (n, _) => n,
    };
    // Over udp the timeouts must not fire for the few milliseconds a process is off its
    // CPU on a shared host (a striped connection's take paths down), nor while the
    // receiver works through a burst: on loopback too, a 1 ms floor resent about one
    // frame in seven of a 1 MiB stream, all duplicates (2-core development VM). In
    // memory (tests) the protocol's own floor stays.
    let min_rto_ns = if path_count > 1
        || matches!(
            sockets[0],
            Socket::Udp(_) | Socket::Xdp(_) | Socket::Uring(_)
        ) {
        base.min_rto_ns.max(network_min_rto_ns)
    } else {
        base.min_rto_ns
    };
    ReliableConfig {
        max_datagram_bytes: datagram,
        path_count: path_count.max(1),
        min_rto_ns,
        initial_rto_ns: base.initial_rto_ns.max(min_rto_ns),
        max_rto_ns: base.max_rto_ns.max(min_rto_ns),
        ..base.clone()
    }
}

fn reliable_config(config: &Config) -> ReliableConfig {
    let idle = config.net_idle_timeout.as_nanos() as Nanos;
    ReliableConfig {
        send_buffer_bytes: config.net_window_bytes,
        recv_window_bytes: config.net_window_bytes,
        idle_timeout_ns: idle,
        keepalive_interval_ns: (idle / 4).max(1_000_000),
        // 16-byte data headers where nothing needs acknowledging (their 32-bit offsets need
        // windows of at most 1 GiB).
        compact_data_frames: config.net_window_bytes <= ReliableConfig::MAX_COMPACT_BUFFER_BYTES,
        max_in_flight_datagrams: max_in_flight_for(config.net_window_bytes),
        // Our pid and node, so that a peer on this node can watch our process (a one-sided
        // operation's target that dies is then `PeerDead` at once).
        identity: Some(identity_params()),
        ..ReliableConfig::default()
    }
}

/// Frames in flight (sent, not cumulatively acknowledged) a connection with a window of
/// `window_bytes` may have: one per KiB of the window, at least the protocol's default.
/// Everything sent after a lost frame counts until the frame is repaired, so the cap must
/// cover the window for the repair time: at 8 x 1 Gbit/s the default 4096 frames are 6 ms,
/// less than a repair takes on a busy host (the sender then stalls on every loss).
fn max_in_flight_for(window_bytes: usize) -> usize {
    (window_bytes / 1024).clamp(
        ReliableConfig::default().max_in_flight_datagrams,
        ReliableConfig::MAX_IN_FLIGHT_DATAGRAMS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::wait_policy::{NodeCount, NodeLoad};

    fn load(ranks: u32, cpus: u32) -> NodeLoad {
        let count = |count| {
            Some(NodeCount {
                count,
                source: "test",
            })
        };
        NodeLoad {
            ranks: count(ranks),
            cpus: count(cpus),
        }
    }

    /// An empty poll reads the coarse clock only: a timer is not due while the coarse
    /// clock, plus the most it may lag, has not reached it; it is once the precise clock
    /// has.
    #[test]
    fn a_timer_is_due_by_the_coarse_clock_within_its_lag() {
        let shared = DgramShared::bind(
            TransportKind::Mem,
            vec!["10.99.0.1:7000".parse().unwrap()],
            Vec::new(),
            &Config::default(),
            1,
            JobKey::from_bytes([3; 32]),
        )
        .unwrap();
        let engine = shared.lock();
        let lag = engine.coarse_lag_ns;
        assert!(lag > 0);
        let now = engine.now();
        // Far off: not due by either clock.
        assert!(!engine.may_be_due(now + 10 * lag + 1_000_000_000, None));
        assert!(!engine.may_be_due(now + 1_000_000_000, Some(now)));
        // Passed: due by either.
        assert!(engine.may_be_due(now.saturating_sub(1), None));
        assert!(engine.may_be_due(now, Some(now)));
        // Within the lag of the coarse clock: "may be" due, so the precise clock decides.
        assert!(engine.may_be_due(now + lag / 4, None));
        assert!(!engine.may_be_due(now + lag / 4, Some(now)));
        // The poll's clock is read once.
        let mut clock = None;
        let first = engine.now_once(&mut clock);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(engine.now_once(&mut clock), first);
    }

    #[test]
    fn an_oversubscribed_node_waits_longer_before_resending() {
        let mut config = Config::default();
        assert_eq!(
            network_min_rto_ns(&config),
            NETWORK_MIN_RTO_NS,
            "load unknown"
        );
        config.resolve_wait(load(2, 2));
        assert_eq!(
            network_min_rto_ns(&config),
            NETWORK_MIN_RTO_NS,
            "one CPU per rank"
        );
        config.resolve_wait(load(8, 2));
        assert_eq!(network_min_rto_ns(&config), BUSY_NODE_MIN_RTO_NS);
        // And a udp connection's protocol settings take it as their floor.
        let socket = bind_socket(
            TransportKind::Udp,
            "127.0.0.1:0".parse().unwrap(),
            &config.faults,
            None,
            config.udp_io,
        )
        .unwrap();
        let to = "127.0.0.1:9".parse().unwrap();
        let base = reliable_config(&config);
        let set = config_for(&[socket], &base, 0, network_min_rto_ns(&config), &to, 1);
        assert_eq!(set.min_rto_ns, BUSY_NODE_MIN_RTO_NS);
        assert!(set.initial_rto_ns >= BUSY_NODE_MIN_RTO_NS);
    }
}
