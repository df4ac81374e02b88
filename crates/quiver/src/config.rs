//! Runtime configuration: protocol thresholds, ring sizes, spin budget and limits, each with
//! a default that can be overridden by a `QUIVER_*` environment variable and reported by
//! `quiver info` (see [`Config::describe`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::profile::{self, MachineIdentity, ProfileFile, ProfileState, SettingSource};
use crate::transport::fault::Faults;
use crate::transport::wait_policy::{NodeLoad, WaitPolicy, YieldMode, DEFAULT_YIELD_SPIN};

/// Tunable settings of a context. Build with [`Config::from_env`] (defaults plus
/// environment overrides) or [`Config::default`] and adjust fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Data bytes of each shared-memory ring (one per directed connection); a power of two.
    pub shm_ring_bytes: u64,
    /// Messages up to this many bytes are copied through the ring (eager); larger ones go by
    /// rendezvous, a single copy by cross-memory attach. At most a quarter of the ring.
    pub shm_eager_max: u64,
    /// Largest fragment an eager message is cut into (pipelining copy-in with copy-out).
    pub shm_frag_bytes: u64,
    /// How long a blocking call busy-polls before it sleeps on the endpoint's descriptor,
    /// when the rank owns its core (`QUIVER_SPIN_US`; see [`WaitPolicy`]).
    pub spin: Duration,
    /// Whether a spinning call yields its CPU (`QUIVER_YIELD`: auto, always, never).
    pub yield_mode: YieldMode,
    /// How long a call that yields at every poll spins before it sleeps
    /// (`QUIVER_YIELD_SPIN_US`): the spin of ranks that outnumber their CPUs.
    pub yield_spin: Duration,
    /// How blocking calls wait: resolved from `spin`, `yield_mode`, `yield_spin` and this
    /// node's load. A context resolves it again when it starts (with what the launcher
    /// and the machine say about the node), so set the three settings, not this.
    pub wait: WaitPolicy,
    /// How long `connect` keeps trying while the peer is not yet listening.
    pub connect_timeout: Duration,
    /// Upper bound for any blocking call (None: wait as long as the peer lives).
    pub op_timeout: Option<Duration>,
    /// Receive buffers preallocated per endpoint for `recv_pooled`.
    pub pool_buffers: usize,
    /// Capacity of each preallocated receive buffer.
    pub pool_buffer_bytes: usize,
    /// Most bytes of capacity the pool keeps cached.
    pub pool_max_bytes: usize,
    /// Most bytes `try_send` may hold in internal copies of large messages in flight; and,
    /// separately, most bytes tcp receives hold in internal buffers (messages read ahead
    /// while a send waits, large messages begun by a non-blocking receive).
    pub max_buffered_bytes: usize,
    /// Most bytes a blocking `send` takes ahead from one incoming connection while it waits
    /// (`QUIVER_READ_AHEAD_BYTES`, shm and tcp; a udp connection reads ahead within its
    /// receive window, `net_window_bytes`): a peer blocked sending to this endpoint can then
    /// finish. A message beyond the bound is not taken, and when the peer then stays
    /// blocked sending to us the send fails with [`Error::SendDeadlock`] (docs/failures.md).
    pub read_ahead_bytes: usize,
    /// Payload bytes of unexpected messages (arrived, no receive matched them yet) an
    /// endpoint holds in memory (`QUIVER_UNEXPECTED_BYTES`); an unexpected message that
    /// would take it beyond waits in a spill file in `spill_dir`, read back when a receive
    /// matches it (docs/decisions/0099-unexpected-messages-spill-to-a-file.md). Default:
    /// 1 GiB, or an eighth of this machine's memory where that is less; 0 spills every
    /// unexpected payload.
    pub unexpected_bytes: u64,
    /// Where spill files are made (`QUIVER_SPILL_DIR`, an absolute path; default `$TMPDIR`
    /// when it is an absolute path, else `/var/tmp`). Each is unlinked from the start;
    /// on tmpfs spilled payloads stay in memory (`quiver info` says so).
    pub spill_dir: PathBuf,
    /// Largest message a peer may announce to an endpoint (`QUIVER_MAX_MESSAGE_BYTES`):
    /// a shm, tcp or udp header announcing more ends that connection with
    /// [`Error::MessageTooLarge`] before anything is allocated for it. Default: half this
    /// machine's physical memory (a larger message could not succeed here: sender and
    /// receiver each hold it whole, both on this node over shm); an endpoint may change its
    /// own ([`Endpoint::set_max_message_bytes`](crate::Endpoint::set_max_message_bytes)).
    pub max_message_bytes: u64,
    /// Transports to try, in order, for a peer (`QUIVER_TRANSPORTS`, e.g. `shm,udp,tcp`).
    /// `shm` is used only for a peer on this node (whose listener is reachable here).
    pub transports: Vec<TransportKind>,
    /// Largest UDP datagram (header included) the reliable protocol sends; 0 picks one per
    /// peer: 65000 on loopback, 1472 (an Ethernet MTU of 1500 minus IP and UDP headers)
    /// otherwise.
    pub udp_datagram_bytes: usize,
    /// Bytes a datagram connection buffers for sending and for receiving (its window).
    pub net_window_bytes: usize,
    /// A network peer silent for this long (no data, no keepalive answer) is reported
    /// unreachable. Defaults to the detection time.
    pub net_idle_timeout: Duration,
    /// Failure detection time (`QUIVER_DETECT_MS`, default 1 s; None: off). A call waiting
    /// on a peer process of this node that has been stopped (SIGSTOP) reports it within
    /// this time; udp's idle timeout defaults to it. Off also skips the periodic death
    /// checks of spinning calls (a sleeping call still wakes when a peer dies).
    pub detect: Option<Duration>,
    /// Bytes each inbound tcp edge stages: a message whose header and payload fit is read
    /// into this buffer and copied out (and may arrive with others in one read); a larger
    /// one is read as it arrives, straight into the destination when the receive has one
    /// (no extra copy; see `transport/tcp/reader.rs`).
    pub tcp_staging_bytes: usize,
    /// udp datagram payloads at least this long leave from the connection's send buffer in
    /// place (gathered with their header); shorter ones are copied next to their header.
    /// Either way runs of equal-size datagrams leave as one GSO send.
    pub udp_in_place_min: usize,
    /// Datagram messages (udp, mem) at least this long are sent from the caller's buffer in
    /// place by a blocking `send`: lent to the protocol instead of copied into its send
    /// window, and only the part not yet acknowledged when the send returns is copied
    /// (docs/decisions/0011-udp-sends-in-place.md). 0 turns it off.
    pub udp_send_in_place_min: usize,
    /// A blocking `send` goes in place (`udp_send_in_place_min`) only when the message is
    /// at least this many times its connection's measured bandwidth-delay product (delivery
    /// rate times minimum RTT), and only on a connection of one path. About one such
    /// product is still unacknowledged when the send ends (and is copied): on loopback it
    /// is 2-3 datagrams (110-150 KB), and sends that adopted 40% of their bytes were still
    /// 8% faster than copying, hence the default 3. 0 sends in place whatever the
    /// measurements say (before the first, and on striped connections too).
    pub udp_send_in_place_bdp_multiple: u64,
    /// Datagram messages (udp, mem) at least this long given to `post_send` are sent from
    /// the posted buffer with no copy at all, striped connections included: the buffer is
    /// lent to the protocol, retransmissions read it, and `wait_send` hands it back once
    /// every byte is acknowledged (docs/decisions/0011-udp-sends-in-place.md). 0 turns it off. Default
    /// 256 KiB.
    pub udp_post_in_place_min: usize,
    /// A blocking receive in the middle of a udp message receives each datagram in two
    /// pieces when at least this many of the message's next bytes may go straight into its
    /// buffer: the frame's 16-byte header apart and its payload in place, with no copy
    /// after the kernel's (docs/decisions/0004-udp-scattering-receive.md). One system call per datagram, so
    /// it pays with large datagrams (loopback's 64 KB), not with an Ethernet MTU's
    /// (batched with GRO instead); one link only. 0 turns it off. Default 16 KiB.
    pub udp_scatter_min: usize,
    /// Print, on stderr, which transport and which protocol each message size range uses
    /// for every connection an endpoint opens, as it opens it (`QUIVER_PROTO_INFO=1`; see
    /// [`Endpoint::transport`](crate::Endpoint::transport)). Off by default.
    pub proto_info: bool,
    /// Faults injected into the datagrams of the udp or mem sockets, for tests and chaos
    /// runs (`QUIVER_FAULTS`, e.g. `seed=7,drop=0.01,reorder=0.01`; see [`Faults`]): off by
    /// default. Arrival faults (`receive.*`) turn the scattering receive off.
    pub faults: Faults,
    /// The network interfaces of the xdp transport, one per own link in order
    /// (`QUIVER_XDP_IFACE`, e.g. `eth0` or `eth0,eth1`); empty (the default): each link's
    /// interface is the one holding its address.
    pub xdp_interfaces: Vec<String>,
    /// How the udp transport drives its sockets (`QUIVER_UDP_IO`): plain system calls
    /// (the default) or io_uring, with or without SQPOLL (see [`UdpIoMode`]).
    pub udp_io: UdpIoMode,
    /// Where the tunable thresholds came from (the settings of
    /// [`profile::TUNABLE_SETTINGS`], in that order): default, profile or environment.
    pub threshold_sources: [(&'static str, SettingSource); 3],
    /// What loading found about the per-machine profile (see [`crate::profile`]).
    pub profile: ProfileState,
    /// The shm eager limit and its source before the waiting policy raised it
    /// ([`Config::resolve_wait`]); `None` while the policy has not.
    pub shm_eager_max_before_policy: Option<(u64, SettingSource)>,
}

/// How the udp transport drives its link sockets (`QUIVER_UDP_IO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpIoMode {
    /// One system call per send or receive (batched with `sendmmsg`/`recvmmsg`, GSO/GRO).
    #[default]
    Sockets,
    /// io_uring: sends submitted together, one multishot receive into provided buffers
    /// (docs/decisions/0084-io-uring-udp-engine.md). Where io_uring is refused, the sockets
    /// are used instead, with a warning saying why.
    Uring,
    /// io_uring with a kernel thread polling its submissions (`IORING_SETUP_SQPOLL`): no
    /// system call per send, one more CPU busy while traffic flows.
    UringSqpoll,
}

impl UdpIoMode {
    /// The name used in `QUIVER_UDP_IO` and reports.
    pub fn name(self) -> &'static str {
        match self {
            UdpIoMode::Sockets => "sockets",
            UdpIoMode::Uring => "uring",
            UdpIoMode::UringSqpoll => "uring-sqpoll",
        }
    }

    /// Parses `QUIVER_UDP_IO`'s value.
    ///
    /// # Errors
    /// [`Error::Config`] naming the values it takes.
    pub fn parse(text: &str) -> Result<UdpIoMode> {
        UdpIoMode::from_name(text).ok_or_else(|| {
            Error::Config(format!(
                "QUIVER_UDP_IO={text:?}: expected sockets, uring or uring-sqpoll"
            ))
        })
    }

    /// Parses a name as written in `QUIVER_UDP_IO`.
    pub fn from_name(name: &str) -> Option<UdpIoMode> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "sockets" => UdpIoMode::Sockets,
            "uring" | "io_uring" => UdpIoMode::Uring,
            "uring-sqpoll" => UdpIoMode::UringSqpoll,
            _ => return None,
        })
    }
}

/// A way to reach a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// Shared memory: rings plus cross-memory attach (same node only).
    Shm,
    /// UDP with quiver's own reliable protocol.
    Udp,
    /// TCP.
    Tcp,
    /// In-process datagram queues driven by the same reliable protocol as UDP (tests).
    Mem,
    /// AF_XDP sockets on a network interface (the kernel's IP/UDP stack skipped) with the
    /// same reliable protocol as UDP; root only.
    Xdp,
}

impl TransportKind {
    /// The name used in `QUIVER_TRANSPORTS` and reports.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Shm => "shm",
            TransportKind::Udp => "udp",
            TransportKind::Tcp => "tcp",
            TransportKind::Mem => "mem",
            TransportKind::Xdp => "xdp",
        }
    }

    /// Parses a name as written in `QUIVER_TRANSPORTS`.
    pub fn from_name(name: &str) -> Option<TransportKind> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "shm" => TransportKind::Shm,
            "udp" => TransportKind::Udp,
            "tcp" => TransportKind::Tcp,
            "mem" => TransportKind::Mem,
            "xdp" => TransportKind::Xdp,
            _ => return None,
        })
    }

    /// Whether this transport moves datagrams through the reliable protocol core.
    pub(crate) fn is_datagram(self) -> bool {
        matches!(
            self,
            TransportKind::Udp | TransportKind::Mem | TransportKind::Xdp
        )
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a comma-separated transport list such as `shm,udp,tcp`.
///
/// # Errors
/// [`Error::Config`] for an unknown name, a repeated one, or an empty list.
pub fn parse_transports(text: &str) -> Result<Vec<TransportKind>> {
    let mut list = Vec::new();
    for name in text.split(',').filter(|n| !n.trim().is_empty()) {
        let kind = TransportKind::from_name(name).ok_or_else(|| {
            Error::Config(format!(
                "QUIVER_TRANSPORTS={text:?}: unknown transport {:?} (known: shm, udp, tcp, mem, xdp)",
                name.trim()
            ))
        })?;
        if list.contains(&kind) {
            return Err(Error::Config(format!(
                "QUIVER_TRANSPORTS={text:?}: {kind} is listed twice"
            )));
        }
        list.push(kind);
    }
    if list.is_empty() {
        return Err(Error::Config(format!(
            "QUIVER_TRANSPORTS={text:?}: name at least one transport"
        )));
    }
    Ok(list)
}

/// Parses `QUIVER_XDP_IFACE`: interface names separated by commas, at most
/// [`MAX_LINKS`], none twice.
///
/// # Errors
/// [`Error::Config`] naming the variable for an empty, overlong or repeated name.
fn parse_interfaces(text: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ']) {
            return Err(Error::Config(format!(
                "QUIVER_XDP_IFACE={text:?}: {name:?} is not an interface name (1 to 15 characters, no '/' or space)"
            )));
        }
        if names.iter().any(|n| n == name) {
            return Err(Error::Config(format!(
                "QUIVER_XDP_IFACE={text:?}: {name} is listed twice"
            )));
        }
        names.push(name.to_string());
    }
    if names.len() > MAX_LINKS {
        return Err(Error::Config(format!(
            "QUIVER_XDP_IFACE={text:?}: at most {MAX_LINKS} interfaces"
        )));
    }
    Ok(names)
}

/// Most links one rank may list in `QUIVER_LINKS` (the protocol core's path limit).
pub const MAX_LINKS: usize = quiver_proto::reliable::MAX_PATHS;

/// Shortest failure-detection time (`QUIVER_DETECT_MS`, [`Endpoint::set_detection`](crate::Endpoint::set_detection)).
pub const DETECTION_MIN: Duration = Duration::from_millis(10);

/// Parses `QUIVER_LINKS`: the link addresses of every rank, in rank order. Ranks are
/// separated by `;`, the links of one rank by `,`, each an `ip:port`, e.g. for two ranks with
/// two links each (the `quiver-bench testbed` layout):
/// `10.77.0.1:7300,10.77.1.1:7300;10.77.0.2:7300,10.77.1.2:7300`.
///
/// A datagram connection between two ranks is striped over their first `min(a, b)` links:
/// link i of one rank talks to link i of the other, so list them in the same order on every
/// rank (one per NIC or subnet).
///
/// # Errors
/// [`Error::Config`] naming the rank and entry: not an address, a rank with no link, more
/// than [`MAX_LINKS`] links, or the same address twice.
pub fn parse_links(text: &str) -> Result<Vec<Vec<std::net::SocketAddr>>> {
    let mut ranks = Vec::new();
    for (rank, list) in text.split(';').enumerate() {
        if list.trim().is_empty() && rank > 0 && text.trim_end().ends_with(';') {
            // A trailing `;` ends the list.
            continue;
        }
        let mut links = Vec::new();
        for (index, entry) in list.split(',').map(str::trim).enumerate() {
            let address: std::net::SocketAddr = entry.parse().map_err(|_| {
                Error::Config(format!(
                    "QUIVER_LINKS: rank {rank}, link {index} ({entry:?}) is not an ip:port address"
                ))
            })?;
            if links.contains(&address) {
                return Err(Error::Config(format!(
                    "QUIVER_LINKS: rank {rank} lists {address} twice"
                )));
            }
            links.push(address);
        }
        if links.len() > MAX_LINKS {
            return Err(Error::Config(format!(
                "QUIVER_LINKS: rank {rank} lists {} links, at most {MAX_LINKS}",
                links.len()
            )));
        }
        ranks.push(links);
    }
    Ok(ranks)
}

impl Default for Config {
    fn default() -> Config {
        Config {
            // Measured on the 2-core development VMs (docs/PERFORMANCE.md): a 1 MiB ring
            // with 64 KiB fragments streams 16-256 KiB messages at about twice the rate of
            // a 256 KiB ring with 16 KiB fragments, and copying through the ring beats one
            // process_vm_readv up to 256 KiB.
            shm_ring_bytes: 1 << 20,
            shm_eager_max: 256 << 10,
            shm_frag_bytes: 64 << 10,
            spin: Duration::from_millis(2),
            yield_mode: YieldMode::Auto,
            yield_spin: DEFAULT_YIELD_SPIN,
            wait: WaitPolicy::default(),
            connect_timeout: Duration::from_secs(30),
            op_timeout: None,
            pool_buffers: 32,
            pool_buffer_bytes: 64 << 10,
            pool_max_bytes: 64 << 20,
            max_buffered_bytes: 64 << 20,
            read_ahead_bytes: 64 << 20,
            unexpected_bytes: default_unexpected_bytes(),
            spill_dir: default_spill_dir(std::env::var("TMPDIR").ok()),
            max_message_bytes: default_max_message_bytes(),
            transports: vec![TransportKind::Shm, TransportKind::Udp, TransportKind::Tcp],
            udp_datagram_bytes: 0,
            net_window_bytes: 8 << 20,
            net_idle_timeout: Duration::from_secs(1),
            detect: Some(Duration::from_secs(1)),
            tcp_staging_bytes: 256 << 10,
            udp_in_place_min: 512,
            udp_send_in_place_min: 256 << 10,
            udp_send_in_place_bdp_multiple: 3,
            udp_post_in_place_min: 256 << 10,
            udp_scatter_min: 16 << 10,
            faults: Faults::default(),
            xdp_interfaces: Vec::new(),
            udp_io: UdpIoMode::Sockets,
            proto_info: false,
            threshold_sources: profile::TUNABLE_SETTINGS.map(|name| (name, SettingSource::Default)),
            profile: ProfileState::Disabled,
            shm_eager_max_before_policy: None,
        }
    }
}

/// The default of [`Config::max_message_bytes`]: half this machine's physical memory
/// (4 GiB where the system does not say). A message is held whole twice on its way, by its
/// sender and by its receiver (two ranks of one node for shm), so a larger one cannot
/// succeed on this machine anyway; and no single announcement may claim more than half the
/// memory, so one peer's lie cannot push the receiver into the OOM killer by itself.
pub(crate) fn default_max_message_bytes() -> u64 {
    quiver_transport::sys::physical_memory_bytes().map_or(4 << 30, |bytes| (bytes / 2).max(1))
}

/// The default of [`Config::unexpected_bytes`]: 1 GiB, or an eighth of this machine's
/// physical memory where that is less (several ranks of a node each hold their own).
pub(crate) fn default_unexpected_bytes() -> u64 {
    quiver_transport::sys::physical_memory_bytes().map_or(1 << 30, |bytes| (bytes / 8).min(1 << 30))
}

/// The default of [`Config::spill_dir`]: `tmpdir` (`$TMPDIR`) when it is an absolute path,
/// else `/var/tmp` (on disk on most systems, where `/tmp` is often tmpfs).
pub(crate) fn default_spill_dir(tmpdir: Option<String>) -> PathBuf {
    tmpdir
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// One line of `quiver info`: a setting, its value, the variable that overrides it, and
/// what it means.
#[derive(Debug, Clone)]
pub struct Setting {
    /// Environment variable.
    pub env: &'static str,
    /// Current value, formatted with its unit.
    pub value: String,
    /// What it controls.
    pub doc: &'static str,
}

impl Config {
    /// The defaults, overridden by any `QUIVER_*` variables that are set.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable when a value does not parse or is out of range.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Same as [`Config::from_env`] with an arbitrary variable lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::default();
        let size = |k: &str, v: &mut u64| -> Result<()> {
            if let Some(s) = get(k) {
                *v = parse_size(&s).map_err(|e| Error::Config(format!("{k}={s:?}: {e}")))?;
            }
            Ok(())
        };
        // A byte count or count held as usize.
        let usize_size = |k: &str, v: &mut usize| -> Result<()> {
            let mut wide = *v as u64;
            size(k, &mut wide)?;
            *v = wide as usize;
            Ok(())
        };
        size("QUIVER_SHM_RING_BYTES", &mut c.shm_ring_bytes)?;
        // Defaults that depend on the ring shrink with it; explicit values are checked.
        if c.shm_ring_bytes.is_power_of_two() && c.shm_ring_bytes >= 4096 {
            c.shm_eager_max = c.shm_eager_max.min(c.shm_ring_bytes / 4);
            c.shm_frag_bytes = c
                .shm_frag_bytes
                .min(quiver_transport::ring::max_frag_len(c.shm_ring_bytes));
        }
        c.apply_profile(&get)?;
        size("QUIVER_SHM_EAGER_MAX", &mut c.shm_eager_max)?;
        size("QUIVER_SHM_FRAG_BYTES", &mut c.shm_frag_bytes)?;
        let mut micros = c.spin.as_micros() as u64;
        size("QUIVER_SPIN_US", &mut micros)?;
        c.spin = Duration::from_micros(micros);
        if let Some(text) = get("QUIVER_YIELD") {
            c.yield_mode = YieldMode::from_name(&text).ok_or_else(|| {
                Error::Config(format!(
                    "QUIVER_YIELD={text:?}: expected auto, always or never"
                ))
            })?;
        }
        let mut micros = c.yield_spin.as_micros() as u64;
        size("QUIVER_YIELD_SPIN_US", &mut micros)?;
        c.yield_spin = Duration::from_micros(micros);
        let mut ms = c.connect_timeout.as_millis() as u64;
        size("QUIVER_CONNECT_TIMEOUT_MS", &mut ms)?;
        c.connect_timeout = Duration::from_millis(ms);
        let mut op = 0;
        size("QUIVER_TIMEOUT_MS", &mut op)?;
        c.op_timeout = (op > 0).then(|| Duration::from_millis(op));
        size("QUIVER_MAX_MESSAGE_BYTES", &mut c.max_message_bytes)?;
        usize_size("QUIVER_POOL_BUFFERS", &mut c.pool_buffers)?;
        usize_size("QUIVER_POOL_BUFFER_BYTES", &mut c.pool_buffer_bytes)?;
        usize_size("QUIVER_READ_AHEAD_BYTES", &mut c.read_ahead_bytes)?;
        size("QUIVER_UNEXPECTED_BYTES", &mut c.unexpected_bytes)?;
        c.spill_dir = spill_dir_setting(&get)?;
        if let Some(t) = get("QUIVER_TRANSPORTS") {
            c.transports = parse_transports(&t)?;
        }
        usize_size("QUIVER_UDP_DATAGRAM_BYTES", &mut c.udp_datagram_bytes)?;
        usize_size("QUIVER_NET_WINDOW_BYTES", &mut c.net_window_bytes)?;
        let mut detect = c.detect.map_or(0, |d| d.as_millis() as u64);
        size("QUIVER_DETECT_MS", &mut detect)?;
        c.detect = (detect > 0).then(|| Duration::from_millis(detect));
        // The udp idle timeout follows the detection time unless set on its own.
        let mut idle = c.detect.unwrap_or(c.net_idle_timeout).as_millis() as u64;
        size("QUIVER_NET_IDLE_TIMEOUT_MS", &mut idle)?;
        c.net_idle_timeout = Duration::from_millis(idle);
        usize_size("QUIVER_TCP_STAGING_BYTES", &mut c.tcp_staging_bytes)?;
        usize_size("QUIVER_UDP_IN_PLACE_MIN", &mut c.udp_in_place_min)?;
        usize_size("QUIVER_UDP_SEND_IN_PLACE_MIN", &mut c.udp_send_in_place_min)?;
        usize_size("QUIVER_UDP_POST_IN_PLACE_MIN", &mut c.udp_post_in_place_min)?;
        usize_size("QUIVER_UDP_SCATTER_MIN", &mut c.udp_scatter_min)?;
        size(
            "QUIVER_UDP_SEND_IN_PLACE_BDP_MULTIPLE",
            &mut c.udp_send_in_place_bdp_multiple,
        )?;
        if let Some(text) = get("QUIVER_XDP_IFACE") {
            c.xdp_interfaces = parse_interfaces(&text)?;
        }
        if let Some(text) = get("QUIVER_UDP_IO") {
            c.udp_io = UdpIoMode::parse(&text)?;
        }
        if let Some(text) = get("QUIVER_FAULTS") {
            c.faults = text
                .parse()
                .map_err(|e| Error::Config(format!("QUIVER_FAULTS={text:?}: {e}")))?;
        }
        if let Some(text) = get(PROTO_INFO_ENV) {
            c.proto_info = parse_switch(&text).ok_or_else(|| {
                Error::Config(format!(
                    "{PROTO_INFO_ENV}={text:?}: expected 1 (print) or 0 (do not)"
                ))
            })?;
        }
        for (name, source) in c.threshold_sources.iter_mut() {
            if get(name).is_some() {
                *source = SettingSource::Environment;
            }
        }
        // After the sources: the policy leaves a limit the environment set alone.
        c.resolve_wait(NodeLoad::default());
        c.validate()?;
        Ok(c)
    }

    /// Resolves [`Config::wait`] from the waiting settings and `load`, and with it the shm
    /// eager limit the policy chooses when ranks share their CPUs
    /// ([`WaitPolicy::shm_eager_max`]), unless `QUIVER_SHM_EAGER_MAX` is set; resolved
    /// again for CPUs of their own, the default or profile value comes back.
    pub fn resolve_wait(&mut self, load: NodeLoad) {
        self.wait = WaitPolicy::resolve(self.spin, self.yield_mode, self.yield_spin, load);
        let Some(slot) = self
            .threshold_sources
            .iter_mut()
            .find(|(name, _)| *name == "QUIVER_SHM_EAGER_MAX")
        else {
            return;
        };
        if slot.1 == SettingSource::Environment {
            return;
        }
        match self.wait.shm_eager_max(self.shm_ring_bytes) {
            Some(eager) => {
                if self.shm_eager_max_before_policy.is_none() {
                    self.shm_eager_max_before_policy = Some((self.shm_eager_max, slot.1));
                }
                self.shm_eager_max = eager;
                slot.1 = SettingSource::WaitPolicy;
            }
            None => {
                if let Some((eager, source)) = self.shm_eager_max_before_policy.take() {
                    self.shm_eager_max = eager;
                    slot.1 = source;
                }
            }
        }
    }

    /// Takes this machine's thresholds from the profile (see [`crate::profile`]), if there
    /// is one; environment variables are applied afterwards and win. The shm eager limit
    /// is capped at a quarter of the ring, as its default is.
    fn apply_profile(&mut self, get: &impl Fn(&str) -> Option<String>) -> Result<()> {
        let Some(path) = profile::profile_path(get) else {
            self.profile = ProfileState::Disabled;
            return Ok(());
        };
        // The default path sits in $HOME, which a rank running as another user (setpriv,
        // su without -l) may not be allowed to read: then there is no profile for it. A path
        // named by QUIVER_PROFILE must be readable.
        let explicit = get(profile::PROFILE_ENV).is_some();
        let loaded = match ProfileFile::load(&path) {
            Err(_) if !explicit && !readable_dir(&path) => {
                self.profile = ProfileState::Unreadable(path);
                return Ok(());
            }
            other => other?,
        };
        let Some(file) = loaded else {
            self.profile = ProfileState::NotFound(path);
            return Ok(());
        };
        let Some(entry) = file.entry_for(&MachineIdentity::current()) else {
            self.profile = ProfileState::NoEntry(path);
            return Ok(());
        };
        for (name, &value) in &entry.thresholds {
            match name.as_str() {
                "QUIVER_SHM_EAGER_MAX" => {
                    self.shm_eager_max = value.min(self.shm_ring_bytes / 4);
                }
                "QUIVER_TCP_STAGING_BYTES" => self.tcp_staging_bytes = value as usize,
                "QUIVER_UDP_IN_PLACE_MIN" => self.udp_in_place_min = value as usize,
                // ProfileFile::load rejects any other name.
                _ => continue,
            }
            if let Some(slot) = self.threshold_sources.iter_mut().find(|(n, _)| n == name) {
                slot.1 = SettingSource::Profile;
            }
        }
        self.profile = ProfileState::Loaded(path);
        Ok(())
    }

    /// Where the value of the tunable threshold `env` (e.g. `QUIVER_SHM_EAGER_MAX`) came
    /// from; `None` for a setting that is not tunable.
    pub fn threshold_source(&self, env: &str) -> Option<SettingSource> {
        self.threshold_sources
            .iter()
            .find(|(name, _)| *name == env)
            .map(|(_, source)| *source)
    }

    /// Checks the relations between settings.
    ///
    /// # Errors
    /// [`Error::Config`] describing the first violated rule.
    pub fn validate(&self) -> Result<()> {
        let ring = self.shm_ring_bytes;
        if !ring.is_power_of_two() || !(4096..=(1 << 30)).contains(&ring) {
            return Err(Error::Config(format!(
                "QUIVER_SHM_RING_BYTES={ring}: must be a power of two between 4K and 1G"
            )));
        }
        let max_frag = quiver_transport::ring::max_frag_len(ring);
        if self.shm_frag_bytes == 0 || self.shm_frag_bytes > max_frag {
            return Err(Error::Config(format!(
                "QUIVER_SHM_FRAG_BYTES={}: must be between 1 and {max_frag} (a quarter of the ring minus a header)",
                self.shm_frag_bytes
            )));
        }
        if self.shm_eager_max > ring / 4 {
            return Err(Error::Config(format!(
                "QUIVER_SHM_EAGER_MAX={}: must be at most a quarter of the ring ({})",
                self.shm_eager_max,
                ring / 4
            )));
        }
        if self.udp_datagram_bytes != 0 && !(256..=65507).contains(&self.udp_datagram_bytes) {
            return Err(Error::Config(format!(
                "QUIVER_UDP_DATAGRAM_BYTES={}: must be 0 (automatic) or between 256 and 65507",
                self.udp_datagram_bytes
            )));
        }
        if !((64 << 10)..=(1 << 30)).contains(&self.net_window_bytes) {
            return Err(Error::Config(format!(
                "QUIVER_NET_WINDOW_BYTES={}: must be between 64K and 1G",
                self.net_window_bytes
            )));
        }
        if self.detect.is_some_and(|d| d < DETECTION_MIN) {
            return Err(Error::Config(format!(
                "QUIVER_DETECT_MS={}: must be 0 (off) or at least 10",
                self.detect.map_or(0, |d| d.as_millis())
            )));
        }
        if self.net_idle_timeout < Duration::from_millis(10) {
            return Err(Error::Config(format!(
                "QUIVER_NET_IDLE_TIMEOUT_MS={}: must be at least 10",
                self.net_idle_timeout.as_millis()
            )));
        }
        if self.max_message_bytes == 0 {
            return Err(Error::Config(
                "QUIVER_MAX_MESSAGE_BYTES=0: must be at least 1 (empty messages always pass)"
                    .into(),
            ));
        }
        if self.transports.is_empty() {
            return Err(Error::Config(
                "QUIVER_TRANSPORTS: name at least one transport".into(),
            ));
        }
        for (direction, rates) in [
            ("send", &self.faults.send),
            ("receive", &self.faults.receive),
        ] {
            if rates.total_ppm() > 1_000_000 {
                return Err(Error::Config(format!(
                    "QUIVER_FAULTS: the {direction} rates add up to {} per million, more than 1",
                    rates.total_ppm()
                )));
            }
        }
        if !(MIN_TCP_STAGING_BYTES..=(1 << 30)).contains(&self.tcp_staging_bytes) {
            return Err(Error::Config(format!(
                "QUIVER_TCP_STAGING_BYTES={}: must be between 4K and 1G",
                self.tcp_staging_bytes
            )));
        }
        Ok(())
    }

    /// Every setting with its value and variable, for `quiver info`.
    pub fn describe(&self) -> Vec<Setting> {
        let s = |env, value: String, doc| Setting { env, value, doc };
        vec![
            s("QUIVER_SHM_RING_BYTES", format!("{} B", self.shm_ring_bytes), "data bytes of each shared-memory ring (one per directed connection)"),
            s("QUIVER_SHM_EAGER_MAX", format!("{} B", self.shm_eager_max), "largest message copied through the ring; larger ones use rendezvous (one copy by cross-memory attach)"),
            s("QUIVER_SHM_FRAG_BYTES", format!("{} B", self.shm_frag_bytes), "fragment size of eager messages"),
            s("QUIVER_SPIN_US", format!("{} us", self.spin.as_micros()), "busy-poll time before a blocking call sleeps, when the rank owns its core"),
            s("QUIVER_YIELD", self.yield_mode.name().into(), "whether a spinning call yields its CPU: auto (at every poll when this node's ranks outnumber their CPUs, else only a spin that sees no progress), always, never"),
            s("QUIVER_YIELD_SPIN_US", format!("{} us", self.yield_spin.as_micros()), "spin time of a call that yields at every poll, before it sleeps"),
            s("QUIVER_CONNECT_TIMEOUT_MS", format!("{} ms", self.connect_timeout.as_millis()), "how long connect waits for a peer to appear"),
            s("QUIVER_TIMEOUT_MS", self.op_timeout.map_or("none".into(), |d| format!("{} ms", d.as_millis())), "upper bound of every blocking call (0: none)"),
            s("QUIVER_MAX_MESSAGE_BYTES", format!("{} B", self.max_message_bytes), "largest message a peer may announce to an endpoint; a larger announcement ends that connection with MessageTooLarge, before anything is allocated (default: half this machine's memory)"),
            s("QUIVER_POOL_BUFFERS", self.pool_buffers.to_string(), "receive buffers preallocated per endpoint"),
            s("QUIVER_POOL_BUFFER_BYTES", format!("{} B", self.pool_buffer_bytes), "capacity of each preallocated receive buffer"),
            s("QUIVER_READ_AHEAD_BYTES", format!("{} B", self.read_ahead_bytes), "most bytes a blocking send takes ahead from one incoming shm or tcp connection while it waits (udp: its window); a peer's message beyond it, while that peer is blocked sending to us, is a send-send deadlock (SendDeadlock)"),
            s("QUIVER_UNEXPECTED_BYTES", format!("{} B", self.unexpected_bytes), "payload bytes of unexpected messages (no receive matched them yet) an endpoint holds in memory; beyond, they wait in a spill file in QUIVER_SPILL_DIR, read back when matched (default: 1 GiB or an eighth of memory, the smaller)"),
            s("QUIVER_SPILL_DIR", self.spill_dir.display().to_string(), "directory of the spill files of unexpected messages beyond QUIVER_UNEXPECTED_BYTES (unlinked, mode 0600; default $TMPDIR, else /var/tmp); on tmpfs they stay in memory"),
            s("QUIVER_TRANSPORTS", self.transports.iter().map(|t| t.name()).collect::<Vec<_>>().join(","), "transports tried in order for each peer (shm only for peers on this node)"),
            s("QUIVER_UDP_DATAGRAM_BYTES", if self.udp_datagram_bytes == 0 { "auto (65000 on loopback, 1472 otherwise)".into() } else { format!("{} B", self.udp_datagram_bytes) }, "largest UDP datagram of the reliable protocol"),
            s("QUIVER_NET_WINDOW_BYTES", format!("{} B", self.net_window_bytes), "send and receive window of a udp connection (bounds its memory)"),
            s("QUIVER_NET_IDLE_TIMEOUT_MS", format!("{} ms", self.net_idle_timeout.as_millis()), "a silent network peer is reported unreachable after this"),
            s("QUIVER_DETECT_MS", self.detect.map_or("off".into(), |d| format!("{} ms", d.as_millis())), "failure detection time: a peer stopped (SIGSTOP) this long while a call waits on it is reported; 0 turns detection off"),
            s("QUIVER_TCP_STAGING_BYTES", format!("{} B", self.tcp_staging_bytes), "tcp messages up to this (with their header) are staged and copied; larger ones are read as they arrive, into the destination when there is one"),
            s("QUIVER_UDP_IN_PLACE_MIN", format!("{} B", self.udp_in_place_min), "udp datagram payloads at least this long are sent from the send buffer in place; shorter ones are copied"),
            s("QUIVER_UDP_SEND_IN_PLACE_MIN", if self.udp_send_in_place_min == 0 { "off".into() } else { format!("{} B", self.udp_send_in_place_min) }, "udp messages at least this long are sent by a blocking send from the caller's buffer, not copied into the send window (0: off)"),
            s("QUIVER_UDP_SEND_IN_PLACE_BDP_MULTIPLE", if self.udp_send_in_place_bdp_multiple == 0 { "always".into() } else { self.udp_send_in_place_bdp_multiple.to_string() }, "a blocking udp send goes in place only when the message is at least this many times the connection's measured bandwidth-delay product, one path only (0: whatever the measurements)"),
            s("QUIVER_UDP_POST_IN_PLACE_MIN", if self.udp_post_in_place_min == 0 { "off".into() } else { format!("{} B", self.udp_post_in_place_min) }, "udp messages at least this long given to post_send are sent from the posted buffer, never copied; wait_send returns it once all is acknowledged (0: off)"),
            s("QUIVER_UDP_SCATTER_MIN", if self.udp_scatter_min == 0 { "off".into() } else { format!("{} B", self.udp_scatter_min) }, "a blocking receive in the middle of a udp message takes each datagram's payload straight into its buffer when at least this many of its next bytes fit there (one link; 0: off)"),
            s("QUIVER_FAULTS", self.faults.to_string(), "faults injected into udp/mem datagrams for tests and chaos runs: seed=N and drop, duplicate, reorder, corrupt rates (fractions or %), for sent datagrams or, prefixed receive., arrived ones; off by default"),
            s("QUIVER_XDP_IFACE", if self.xdp_interfaces.is_empty() { "auto (the interface holding each link's address)".into() } else { self.xdp_interfaces.join(",") }, "network interfaces of the xdp transport, one per own link in order (root; one quiver process per interface)"),
            s("QUIVER_UDP_IO", self.udp_io.name().into(), "how the udp transport drives its sockets: sockets (system calls, batched), uring (io_uring: submissions batched, one multishot receive into provided buffers; sockets where io_uring is refused, with a warning), uring-sqpoll (and a kernel thread polling the submissions)"),
            s(PROTO_INFO_ENV, if self.proto_info { "1".into() } else { "0".into() }, "1: print the transport and the protocol of each message size range of every connection as it is opened (stderr); `quiver info --protocols` shows them without a job"),
            s("QUIVER_PROFILE", self.profile.to_string(), "per-machine thresholds measured by `quiver tune` (environment variables override them)"),
        ]
    }
}

/// `QUIVER_SPILL_DIR` when set, else the default ([`default_spill_dir`] of `TMPDIR`).
fn spill_dir_setting(get: &impl Fn(&str) -> Option<String>) -> Result<PathBuf> {
    match get("QUIVER_SPILL_DIR") {
        Some(dir) => parse_spill_dir(&dir),
        None => Ok(default_spill_dir(get("TMPDIR"))),
    }
}

/// Parses `QUIVER_SPILL_DIR`: an absolute path.
fn parse_spill_dir(text: &str) -> Result<PathBuf> {
    let dir = Path::new(text);
    if text.is_empty() || !dir.is_absolute() {
        return Err(Error::Config(format!(
            "QUIVER_SPILL_DIR={text:?}: must be an absolute path (a directory for spill files)"
        )));
    }
    Ok(dir.to_path_buf())
}

/// The variable that turns on the per-connection protocol report ([`Config::proto_info`]).
pub const PROTO_INFO_ENV: &str = "QUIVER_PROTO_INFO";

/// An on/off setting: `1`, `on`, `yes`, `true` or `0`, `off`, `no`, `false`, `` (any case).
fn parse_switch(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" | "" => Some(false),
        _ => None,
    }
}

/// Smallest tcp staging buffer (a stream header must always fit, with room to spare).
const MIN_TCP_STAGING_BYTES: usize = 4 << 10;

/// Why a size did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeParseError {
    /// Not a whole number with an optional K/M/G suffix.
    Malformed,
    /// The value does not fit in 64 bits.
    Overflow,
}

impl std::fmt::Display for SizeParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SizeParseError::Malformed => {
                "expected a whole number with an optional K, M or G suffix (powers of 1024)"
            }
            SizeParseError::Overflow => "too large",
        })
    }
}

/// Parses a size such as `8`, `4K`, `64KiB`, `1M`, `16B` or `1G` (suffixes in either case,
/// powers of 1024, optionally followed by `B` or `iB`). Also used for plain counts.
///
/// # Errors
/// [`SizeParseError`].
pub fn parse_size(text: &str) -> std::result::Result<u64, SizeParseError> {
    let entry = text.trim();
    let digits_end = entry
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(entry.len());
    let (digits, suffix) = entry.split_at(digits_end);
    if digits.is_empty() {
        return Err(SizeParseError::Malformed);
    }
    let multiplier: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(SizeParseError::Malformed),
    };
    let count: u64 = digits.parse().map_err(|_| SizeParseError::Overflow)?;
    count
        .checked_mul(multiplier)
        .ok_or(SizeParseError::Overflow)
}

/// Whether this process may look into the directory holding `path` (false when a parent
/// directory denies it, as another user's home does).
fn readable_dir(path: &std::path::Path) -> bool {
    match std::fs::metadata(path) {
        Err(e) => e.kind() != std::io::ErrorKind::PermissionDenied,
        Ok(_) => std::fs::File::open(path).is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read-ahead bound of a waiting send is a setting of its own, shown by `describe`.
    #[test]
    fn unexpected_bound_and_spill_dir_are_settings() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c.unexpected_bytes, default_unexpected_bytes());
        assert!(c.unexpected_bytes > 0 && c.unexpected_bytes <= 1 << 30);
        assert_eq!(c.spill_dir, PathBuf::from("/var/tmp"));
        let c = Config::from_lookup(|k| match k {
            "QUIVER_UNEXPECTED_BYTES" => Some("64K".into()),
            "TMPDIR" => Some("/scratch/me".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.unexpected_bytes, 64 << 10);
        assert_eq!(c.spill_dir, PathBuf::from("/scratch/me"));
        assert!(c
            .describe()
            .iter()
            .any(|s| s.env == "QUIVER_SPILL_DIR" && s.value == "/scratch/me"));
        // A relative TMPDIR is not taken; QUIVER_SPILL_DIR wins over TMPDIR.
        let c = Config::from_lookup(|k| match k {
            "TMPDIR" => Some("tmp".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.spill_dir, PathBuf::from("/var/tmp"));
        let c = Config::from_lookup(|k| match k {
            "TMPDIR" => Some("/tmp".into()),
            "QUIVER_SPILL_DIR" => Some("/data/spill".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.spill_dir, PathBuf::from("/data/spill"));
        for (k, v) in [
            ("QUIVER_UNEXPECTED_BYTES", "lots"),
            ("QUIVER_SPILL_DIR", "relative/dir"),
            ("QUIVER_SPILL_DIR", ""),
        ] {
            let e = Config::from_lookup(|key| (key == k).then(|| v.into()));
            assert!(
                matches!(e, Err(Error::Config(m)) if m.contains(k)),
                "{k}={v:?}"
            );
        }
    }

    #[test]
    fn read_ahead_bound_is_a_setting() {
        assert_eq!(Config::default().read_ahead_bytes, 64 << 20);
        let c =
            Config::from_lookup(|k| (k == "QUIVER_READ_AHEAD_BYTES").then(|| "1M".into())).unwrap();
        assert_eq!(c.read_ahead_bytes, 1 << 20);
        assert!(c
            .describe()
            .iter()
            .any(|s| s.env == "QUIVER_READ_AHEAD_BYTES" && s.value == "1048576 B"));
        let e = Config::from_lookup(|k| (k == "QUIVER_READ_AHEAD_BYTES").then(|| "lots".into()));
        assert!(matches!(e, Err(Error::Config(m)) if m.contains("QUIVER_READ_AHEAD_BYTES")));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size(" 16B "), Ok(16));
        assert_eq!(parse_size("x"), Err(SizeParseError::Malformed));
        assert_eq!(parse_size(""), Err(SizeParseError::Malformed));
        assert_eq!(parse_size("1T"), Err(SizeParseError::Malformed));
        assert_eq!(parse_size("99999999999G"), Err(SizeParseError::Overflow));
    }

    #[test]
    fn udp_io_parses() {
        let get = |value: &'static str| {
            move |name: &str| (name == "QUIVER_UDP_IO").then(|| value.to_string())
        };
        assert_eq!(Config::default().udp_io, UdpIoMode::Sockets);
        assert_eq!(
            Config::from_lookup(get("uring")).unwrap().udp_io,
            UdpIoMode::Uring
        );
        assert_eq!(
            Config::from_lookup(get("uring-sqpoll")).unwrap().udp_io,
            UdpIoMode::UringSqpoll
        );
        assert_eq!(
            Config::from_lookup(get("Sockets")).unwrap().udp_io,
            UdpIoMode::Sockets
        );
        let error = Config::from_lookup(get("epoll")).unwrap_err().to_string();
        assert!(error.contains("QUIVER_UDP_IO"), "{error}");
        assert!(Config::default()
            .describe()
            .iter()
            .any(|s| s.env == "QUIVER_UDP_IO" && s.value == "sockets"));
    }

    #[test]
    fn xdp_settings_parse() {
        let c = Config::from_lookup(|k| match k {
            "QUIVER_TRANSPORTS" => Some("shm,xdp".into()),
            "QUIVER_XDP_IFACE" => Some("eth0, eth1".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.transports, vec![TransportKind::Shm, TransportKind::Xdp]);
        assert!(TransportKind::Xdp.is_datagram());
        assert_eq!(
            c.xdp_interfaces,
            vec!["eth0".to_string(), "eth1".to_string()]
        );
        assert!(c
            .describe()
            .iter()
            .any(|s| s.env == "QUIVER_XDP_IFACE" && s.value == "eth0,eth1"));
        for bad in ["eth0,eth0", "", "a/b", "sixteen-chars-xx"] {
            let e = Config::from_lookup(|k| (k == "QUIVER_XDP_IFACE").then(|| bad.into()));
            assert!(
                matches!(&e, Err(Error::Config(m)) if m.contains("QUIVER_XDP_IFACE")),
                "{bad:?}: {e:?}"
            );
        }
    }

    #[test]
    fn links_parse() {
        let links = parse_links("10.77.0.1:7300,10.77.1.1:7300; 10.77.0.2:7300,10.77.1.2:7300;")
            .expect("valid");
        assert_eq!(links.len(), 2);
        assert_eq!(links[1][1], "10.77.1.2:7300".parse().unwrap());
        assert_eq!(
            parse_links("127.0.0.1:1")
                .expect("one rank, one link")
                .len(),
            1
        );
        let error = parse_links("10.0.0.1:1;10.0.0.2:1,nonsense").unwrap_err();
        assert!(error.to_string().contains("rank 1, link 1"), "{error}");
        assert!(parse_links("10.0.0.1:1,10.0.0.1:1").is_err());
        assert!(parse_links("10.0.0.1:1;;10.0.0.2:1").is_err());
        let many: Vec<String> = (0..=MAX_LINKS)
            .map(|i| format!("10.0.0.1:{}", i + 1))
            .collect();
        assert!(parse_links(&many.join(",")).is_err());
    }

    #[test]
    fn env_overrides_and_validation() {
        let c =
            Config::from_lookup(|k| (k == "QUIVER_SHM_EAGER_MAX").then(|| "8K".into())).unwrap();
        assert_eq!(c.shm_eager_max, 8192);
        let e = Config::from_lookup(|k| (k == "QUIVER_SHM_RING_BYTES").then(|| "1000".into()));
        assert!(matches!(e, Err(Error::Config(m)) if m.contains("QUIVER_SHM_RING_BYTES")));
        let e = Config::from_lookup(|k| (k == "QUIVER_SPIN_US").then(|| "abc".into()));
        assert!(matches!(e, Err(Error::Config(m)) if m.contains("QUIVER_SPIN_US")));
        Config::default().validate().unwrap();
        let small =
            Config::from_lookup(|k| (k == "QUIVER_SHM_RING_BYTES").then(|| "16K".into())).unwrap();
        assert_eq!(small.shm_eager_max, 4096);
        assert!(small.shm_frag_bytes <= 4096 - 24);
        let slow =
            Config::from_lookup(|k| (k == "QUIVER_DETECT_MS").then(|| "3000".into())).unwrap();
        assert_eq!(slow.detect, Some(Duration::from_secs(3)));
        assert_eq!(slow.net_idle_timeout, Duration::from_secs(3));
        let off = Config::from_lookup(|k| (k == "QUIVER_DETECT_MS").then(|| "0".into())).unwrap();
        assert_eq!(off.detect, None);
        assert_eq!(off.net_idle_timeout, Duration::from_secs(1));
        let e = Config::from_lookup(|k| (k == "QUIVER_DETECT_MS").then(|| "5".into()));
        assert!(matches!(e, Err(Error::Config(m)) if m.contains("QUIVER_DETECT_MS")));
    }

    #[test]
    fn the_message_limit_defaults_to_half_the_memory_and_is_set_by_its_variable() {
        let memory = quiver_transport::sys::physical_memory_bytes().expect("memory");
        assert_eq!(Config::default().max_message_bytes, memory / 2);
        let set =
            |v: &str| Config::from_lookup(|k| (k == "QUIVER_MAX_MESSAGE_BYTES").then(|| v.into()));
        assert_eq!(set("64M").unwrap().max_message_bytes, 64 << 20);
        assert!(
            matches!(set("0"), Err(Error::Config(m)) if m.contains("QUIVER_MAX_MESSAGE_BYTES"))
        );
        let shown = Config::default().describe();
        let line = shown
            .iter()
            .find(|s| s.env == "QUIVER_MAX_MESSAGE_BYTES")
            .expect("described");
        assert_eq!(line.value, format!("{} B", memory / 2));
    }

    #[test]
    fn profile_thresholds_apply_and_environment_wins() {
        use crate::profile::{MachineProfile, PROFILE_ENV};
        let dir =
            std::env::temp_dir().join(format!("quiver-config-profile-{}", std::process::id()));
        let path = dir.join("profile.json");
        let me = MachineIdentity::current();
        let mut file = ProfileFile::new();
        file.upsert(MachineProfile {
            hostname: me.hostname.clone(),
            cpu_model: me.cpu_model.clone(),
            quiver_version: String::new(),
            created_unix_s: 0,
            thresholds: [
                ("QUIVER_SHM_EAGER_MAX".to_string(), 65536),
                ("QUIVER_TCP_STAGING_BYTES".to_string(), 32768),
            ]
            .into_iter()
            .collect(),
            evidence: String::new(),
        });
        file.save(&path).unwrap();
        let path_text = path.to_str().unwrap().to_string();
        let with = |extra: &'static [(&'static str, &'static str)]| {
            let path_text = path_text.clone();
            Config::from_lookup(move |k| {
                if k == PROFILE_ENV {
                    return Some(path_text.clone());
                }
                extra
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        let c = with(&[]).unwrap();
        assert_eq!(c.shm_eager_max, 65536);
        assert_eq!(c.tcp_staging_bytes, 32768);
        assert_eq!(c.udp_in_place_min, Config::default().udp_in_place_min);
        assert_eq!(c.profile, ProfileState::Loaded(path.clone()));
        assert_eq!(
            c.threshold_source("QUIVER_SHM_EAGER_MAX"),
            Some(SettingSource::Profile)
        );
        assert_eq!(
            c.threshold_source("QUIVER_UDP_IN_PLACE_MIN"),
            Some(SettingSource::Default)
        );
        let c = with(&[("QUIVER_SHM_EAGER_MAX", "4K")]).unwrap();
        assert_eq!(c.shm_eager_max, 4096);
        assert_eq!(
            c.threshold_source("QUIVER_SHM_EAGER_MAX"),
            Some(SettingSource::Environment)
        );
        // A smaller ring caps the profile's eager limit instead of failing.
        let c = with(&[("QUIVER_SHM_RING_BYTES", "64K")]).unwrap();
        assert_eq!(c.shm_eager_max, 16384);
        std::fs::write(&path, "[1, 2").unwrap();
        let e = with(&[]).expect_err("corrupt profile");
        assert!(matches!(e, Error::Config(m) if m.contains("profile.json")));
        std::fs::remove_dir_all(&dir).unwrap();
        let c = with(&[]).unwrap();
        assert_eq!(c.profile, ProfileState::NotFound(path));
        assert_eq!(c.shm_eager_max, 256 << 10);
    }

    #[test]
    fn network_thresholds_parse_and_validate() {
        let c = Config::from_lookup(|k| match k {
            "QUIVER_TCP_STAGING_BYTES" => Some("1M".into()),
            "QUIVER_UDP_IN_PLACE_MIN" => Some("0".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((c.tcp_staging_bytes, c.udp_in_place_min), (1 << 20, 0));
        assert_eq!(c.udp_send_in_place_min, 256 << 10);
        assert_eq!(c.profile, ProfileState::Disabled);
        let c = Config::from_lookup(|k| (k == "QUIVER_UDP_SEND_IN_PLACE_MIN").then(|| "0".into()))
            .unwrap();
        assert_eq!(c.udp_send_in_place_min, 0);
        assert_eq!(c.udp_post_in_place_min, 256 << 10);
        let c = Config::from_lookup(|k| (k == "QUIVER_UDP_POST_IN_PLACE_MIN").then(|| "1M".into()))
            .unwrap();
        assert_eq!(c.udp_post_in_place_min, 1 << 20);
        assert_eq!(c.udp_scatter_min, 16 << 10);
        let c =
            Config::from_lookup(|k| (k == "QUIVER_UDP_SCATTER_MIN").then(|| "0".into())).unwrap();
        assert_eq!(c.udp_scatter_min, 0);
        let e = Config::from_lookup(|k| (k == "QUIVER_TCP_STAGING_BYTES").then(|| "100".into()));
        assert!(matches!(e, Err(Error::Config(m)) if m.contains("QUIVER_TCP_STAGING_BYTES")));
    }

    #[test]
    fn shared_cpus_raise_the_shm_eager_limit_unless_the_environment_set_it() {
        use crate::transport::wait_policy::NodeCount;
        let count = |count| {
            Some(NodeCount {
                count,
                source: "test",
            })
        };
        let busy = NodeLoad {
            ranks: count(4),
            cpus: count(2),
        };
        let owned = NodeLoad {
            ranks: count(2),
            cpus: count(2),
        };
        let source = |c: &Config| c.threshold_source("QUIVER_SHM_EAGER_MAX");
        // A smaller limit (as a profile measured with a core per rank may give) is raised
        // to 256 KiB (at most a quarter of the ring) while ranks share CPUs, and comes back
        // when they do not.
        let mut c =
            Config::from_lookup(|k| (k == "QUIVER_SHM_RING_BYTES").then(|| "4M".into())).unwrap();
        c.shm_eager_max = 8 << 10;
        c.resolve_wait(busy);
        assert_eq!(c.shm_eager_max, 256 << 10);
        assert_eq!(source(&c), Some(SettingSource::WaitPolicy));
        c.resolve_wait(busy);
        assert_eq!(c.shm_eager_max, 256 << 10);
        c.resolve_wait(owned);
        assert_eq!(c.shm_eager_max, 8 << 10);
        assert_eq!(source(&c), Some(SettingSource::Default));
        // QUIVER_YIELD=always shares CPUs whatever the load says.
        let always = Config::from_lookup(|k| (k == "QUIVER_YIELD").then(|| "always".into()));
        assert_eq!(always.unwrap().shm_eager_max, 256 << 10);
        // The environment's limit stays.
        let mut c = Config::from_lookup(|k| match k {
            "QUIVER_SHM_EAGER_MAX" => Some("16K".into()),
            "QUIVER_YIELD" => Some("always".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.shm_eager_max, 16 << 10);
        c.resolve_wait(busy);
        assert_eq!(
            (c.shm_eager_max, source(&c)),
            (16 << 10, Some(SettingSource::Environment))
        );
    }

    #[test]
    fn waiting_settings_parse_resolve_and_show() {
        use crate::transport::wait_policy::Yielding;
        let c = Config::default();
        assert_eq!(
            (c.yield_mode, c.wait.yielding),
            (YieldMode::Auto, Yielding::WhenIdle)
        );
        assert_eq!(c.wait.spin, c.spin);
        let c = Config::from_lookup(|k| match k {
            "QUIVER_YIELD" => Some("always".into()),
            "QUIVER_YIELD_SPIN_US" => Some("50".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.yield_mode, YieldMode::Always);
        assert_eq!(c.wait.yielding, Yielding::EveryPoll);
        assert_eq!(c.wait.spin, Duration::from_micros(50));
        let shown = c.describe();
        assert!(shown
            .iter()
            .any(|s| s.env == "QUIVER_YIELD" && s.value == "always"));
        assert!(shown
            .iter()
            .any(|s| s.env == "QUIVER_YIELD_SPIN_US" && s.value == "50 us"));
        let never = Config::from_lookup(|k| (k == "QUIVER_YIELD").then(|| "never".into())).unwrap();
        assert_eq!(never.wait.yielding, Yielding::Never);
        let e = Config::from_lookup(|k| (k == "QUIVER_YIELD").then(|| "sometimes".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("QUIVER_YIELD") && e.contains("auto, always or never"),
            "{e}"
        );
        assert!(
            Config::from_lookup(|k| (k == "QUIVER_YIELD_SPIN_US").then(|| "x".into())).is_err()
        );
    }

    #[test]
    fn faults_and_the_in_place_multiple_parse_and_show() {
        let off = Config::default();
        assert!(!off.faults.is_on());
        assert_eq!(off.udp_send_in_place_bdp_multiple, 3);
        let shown = |c: &Config, env: &str| {
            c.describe()
                .into_iter()
                .find(|s| s.env == env)
                .map(|s| s.value)
                .unwrap()
        };
        assert_eq!(shown(&off, "QUIVER_FAULTS"), "off");
        let c = Config::from_lookup(|k| match k {
            "QUIVER_FAULTS" => Some("seed=7,drop=0.01,receive.reorder=1%".into()),
            "QUIVER_UDP_SEND_IN_PLACE_BDP_MULTIPLE" => Some("0".into()),
            _ => None,
        })
        .unwrap();
        assert!(c.faults.is_on());
        assert_eq!((c.faults.seed, c.faults.send.drop_ppm), (7, 10_000));
        assert_eq!(c.faults.receive.reorder_ppm, 10_000);
        assert_eq!(
            shown(&c, "QUIVER_FAULTS"),
            "seed=7,drop=0.01,receive.reorder=0.01"
        );
        assert!(format!("{c:?}").contains("drop_ppm: 10000"));
        assert_eq!(c.udp_send_in_place_bdp_multiple, 0);
        assert_eq!(shown(&c, "QUIVER_UDP_SEND_IN_PLACE_BDP_MULTIPLE"), "always");
        let e = Config::from_lookup(|k| (k == "QUIVER_FAULTS").then(|| "drop=2".into()));
        assert!(
            matches!(&e, Err(Error::Config(m)) if m.contains("QUIVER_FAULTS=\"drop=2\"") && m.contains("probability")),
            "{e:?}"
        );
        let mut over = Config::default();
        over.faults.receive.corrupt_ppm = 2_000_000;
        assert!(matches!(over.validate(), Err(Error::Config(m)) if m.contains("receive")));
    }

    #[test]
    fn proto_info_is_a_switch() {
        assert!(!Config::default().proto_info);
        let with = |text: &'static str| {
            Config::from_lookup(|k| (k == PROTO_INFO_ENV).then(|| text.into()))
        };
        for on in ["1", "on", "YES", "true "] {
            assert!(with(on).unwrap().proto_info, "{on}");
        }
        for off in ["0", "off", "no", "false", ""] {
            assert!(!with(off).unwrap().proto_info, "{off:?}");
        }
        let e = with("maybe");
        assert!(
            matches!(&e, Err(Error::Config(m)) if m.contains("QUIVER_PROTO_INFO=\"maybe\"")),
            "{e:?}"
        );
    }
}
