//! Bootstrap: how a process learns its rank, its job (id and key) and every rank's network
//! address before it builds its [`Context`]. `Context::from_env` picks one, in this order
//! (docs/launchers.md):
//!
//! 1. **quiver run** (`QUIVER_RANK` set): everything is in the environment.
//! 2. **PMIx** (`PMIX_RANK` or `PMIX_NAMESPACE` set: `mpirun`, `srun --mpi=pmix`): rank and
//!    size from `PMIx_Init`; rank 0 draws the job id and key and publishes them (unless
//!    `QUIVER_JOB_KEY`/`QUIVER_JOB_KEY_FILE` gives the key); fence; each rank enters its
//!    `QUIVER_NETNS` namespace if one is named, binds its tcp listener and udp socket on
//!    port 0 and publishes the address it got; fence; everyone reads every address.
//! 3. **rendezvous** (the fallback for launchers without PMIx): rank and size from
//!    `OMPI_COMM_WORLD_RANK`/`_SIZE`, `PMI_RANK`/`PMI_SIZE` or `SLURM_PROCID`/
//!    `SLURM_NTASKS`; the key from `QUIVER_JOB_KEY` or `QUIVER_JOB_KEY_FILE`; rank 0
//!    listens at `QUIVER_RENDEZVOUS=host:port`, every other rank sends it its address
//!    there, and rank 0 answers everyone with the job id and all addresses. Both
//!    directions carry a keyed BLAKE3 MAC, and each answer echoes its request's nonce.
//!
//! `QUIVER_BOOTSTRAP=env|pmix|rendezvous` forces one. The address a rank binds: the
//! `QUIVER_BIND_ADDR` (an ip, ip:port or interface name); else loopback when PMIx says the
//! whole job is on this node and no `QUIVER_NETNS` moved it; else the source address of
//! the route to the rendezvous host; else the first non-loopback address of the rank's
//! network namespace (IPv4 first), or loopback when there is none. When, after the
//! exchange, every rank turns out to be on this node and shm is the first transport, the
//! sockets are closed again and the job runs on shm alone, as under `quiver run`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::config::{Config, TransportKind};
use crate::context::{bind_network, parse_hex, random, Context, NetworkSockets};
use crate::error::{Error, Result};

/// How a context learnt its rank, its job and its peers' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bootstrap {
    /// [`Context::builder`], by hand.
    Builder,
    /// The environment `quiver run` sets (`QUIVER_RANK`, ...).
    QuiverRun,
    /// PMIx, under `mpirun` or `srun --mpi=pmix`.
    Pmix,
    /// A launcher's rank variables plus an exchange through rank 0 at `QUIVER_RENDEZVOUS`.
    Rendezvous,
}

impl Bootstrap {
    /// The name used in `QUIVER_BOOTSTRAP` and reports.
    pub fn name(self) -> &'static str {
        match self {
            Bootstrap::Builder => "builder",
            Bootstrap::QuiverRun => "env",
            Bootstrap::Pmix => "pmix",
            Bootstrap::Rendezvous => "rendezvous",
        }
    }

    /// Which bootstrap [`Context::from_env`] would use in this environment (nothing is
    /// contacted).
    ///
    /// # Errors
    /// [`Error::Config`] when the environment names none (not started by a launcher), or
    /// names PMIx while quiver was built without it and no rendezvous is given.
    pub fn detect() -> Result<Bootstrap> {
        detect(&|k| std::env::var(k).ok())
    }

    /// The version of the PMIx library built in, or None when quiver was built without
    /// PMIx support (pkg-config did not find `pmix`).
    pub fn pmix_version() -> Option<String> {
        quiver_pmix::version()
    }
}

impl std::fmt::Display for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Launcher variables that give rank and size, in the order they are looked at.
const RANK_VARIABLES: [(&str, &str); 3] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// Largest job the bootstraps accept (it bounds the rendezvous answer).
const MAX_RANKS: u32 = 1 << 16;

/// PMIx key of rank 0's job identity: `{job_id:016x}:{key hex, or "-"}`.
const PMIX_JOB_KEY: &str = "quiver.job";
/// PMIx key of each rank's network address (`ip:port`, or "-" without network).
const PMIX_ADDR_KEY: &str = "quiver.addr";

type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn detect(get: Lookup<'_>) -> Result<Bootstrap> {
    if let Some(forced) = get("QUIVER_BOOTSTRAP") {
        return match forced.trim() {
            "env" | "quiver-run" => Ok(Bootstrap::QuiverRun),
            "pmix" => Ok(Bootstrap::Pmix),
            "rendezvous" => Ok(Bootstrap::Rendezvous),
            other => Err(Error::Config(format!(
                "QUIVER_BOOTSTRAP={other:?}: expected env, pmix or rendezvous"
            ))),
        };
    }
    if get("QUIVER_RANK").is_some() {
        return Ok(Bootstrap::QuiverRun);
    }
    if get("PMIX_RANK").is_some() || get("PMIX_NAMESPACE").is_some() {
        if quiver_pmix::BUILT {
            return Ok(Bootstrap::Pmix);
        }
        if get("QUIVER_RENDEZVOUS").is_some() {
            return Ok(Bootstrap::Rendezvous);
        }
        return Err(Error::Config(
            "started by a PMIx launcher (PMIX_RANK is set), but this quiver was built without \
             PMIx support: install libpmix-dev and pkg-config and rebuild, or set \
             QUIVER_RENDEZVOUS=host:port (an address of rank 0's node) and QUIVER_JOB_KEY"
                .into(),
        ));
    }
    if RANK_VARIABLES.iter().any(|(rank, _)| get(rank).is_some()) {
        return Ok(Bootstrap::Rendezvous);
    }
    Err(Error::Config(
        "not started by a launcher: use `quiver run -n N -- PROGRAM`, `mpirun`, or \
         `srun --mpi=pmix`; or set QUIVER_RANK, QUIVER_SIZE, QUIVER_JOB_ID and QUIVER_JOB_KEY \
         (see docs/launchers.md)"
            .into(),
    ))
}

/// `Context::from_env`: detects the bootstrap and runs it.
pub(crate) fn from_env() -> Result<Context> {
    match Bootstrap::detect()? {
        Bootstrap::Pmix => pmix(),
        Bootstrap::Rendezvous => rendezvous(),
        _ => Context::from_quiver_run_env(),
    }
}

// ----- pieces shared by the PMIx and rendezvous bootstraps ---------------------------------

/// The job key from `QUIVER_JOB_KEY` (64 hex digits) or the file `QUIVER_JOB_KEY_FILE`
/// holds (the same 64 hex digits), if either is set.
fn key_from_env(get: Lookup<'_>) -> Result<Option<[u8; 32]>> {
    let (text, source) = match (get("QUIVER_JOB_KEY"), get("QUIVER_JOB_KEY_FILE")) {
        (Some(text), _) => (text, "QUIVER_JOB_KEY".to_owned()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Error::io(
                    format!("reading the job key from QUIVER_JOB_KEY_FILE={path}"),
                    e,
                )
            })?;
            (text, format!("QUIVER_JOB_KEY_FILE={path}"))
        }
        (None, None) => return Ok(None),
    };
    parse_hex::<32>(&text).map(Some).ok_or_else(|| {
        Error::Config(format!(
            "{source}: expected 64 hex digits (the value is not shown)"
        ))
    })
}

/// The network namespace `QUIVER_NETNS` names for `rank` of a `size`-rank job: N
/// comma-separated names, rank r taking name number r*N/size (N == size: one per rank;
/// N == 2: the first half of the ranks in the first). A name is `/run/netns/NAME` (made by
/// `ip netns add`) unless it contains a '/', then it is a path; "-" stays put.
fn netns_for(get: Lookup<'_>, rank: u32, size: u32) -> Result<Option<PathBuf>> {
    let Some(text) = get("QUIVER_NETNS") else {
        return Ok(None);
    };
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    if names.iter().any(|n| n.is_empty()) || names.len() > size as usize {
        return Err(Error::Config(format!(
            "QUIVER_NETNS={text:?}: expected 1 to {size} comma-separated namespace names"
        )));
    }
    let index = (u64::from(rank) * names.len() as u64 / u64::from(size)) as usize;
    Ok(match names[index] {
        "-" => None,
        name if name.contains('/') => Some(PathBuf::from(name)),
        name => Some(PathBuf::from(format!("/run/netns/{name}"))),
    })
}

/// Moves the calling thread into this rank's `QUIVER_NETNS` namespace, if one is named.
/// Returns whether it moved.
fn enter_netns(get: Lookup<'_>, rank: u32, size: u32) -> Result<bool> {
    let Some(path) = netns_for(get, rank, size)? else {
        return Ok(false);
    };
    quiver_transport::netif::enter_network_namespace(&path).map_err(|e| {
        Error::io(
            format!(
                "rank {rank} entering network namespace {} (QUIVER_NETNS; needs root)",
                path.display()
            ),
            e,
        )
    })?;
    Ok(true)
}

/// Where this rank binds its sockets (module docs: `QUIVER_BIND_ADDR`, loopback for a
/// one-node job, the route towards `toward`, the first non-loopback address).
fn bind_address(get: Lookup<'_>, one_node: bool, toward: Option<SocketAddr>) -> Result<SocketAddr> {
    let interfaces = || {
        quiver_transport::netif::interface_addresses()
            .map_err(|e| Error::io("listing the network interfaces (getifaddrs)", e))
    };
    if let Some(text) = get("QUIVER_BIND_ADDR") {
        let text = text.trim();
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(addr);
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, 0));
        }
        let mut found: Vec<IpAddr> = interfaces()?
            .into_iter()
            .filter(|a| a.interface == text)
            .map(|a| a.address)
            .collect();
        found.sort_by_key(|ip| !ip.is_ipv4());
        return found
            .first()
            .map(|ip| SocketAddr::new(*ip, 0))
            .ok_or_else(|| {
                Error::Config(format!(
                    "QUIVER_BIND_ADDR={text:?}: not an ip address and no interface of that \
                     name has one"
                ))
            });
    }
    if one_node {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
    }
    if let Some(target) = toward {
        // A connected udp socket learns the route's source address; nothing is sent.
        let any: SocketAddr = if target.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let source =
            UdpSocket::bind(any).and_then(|s| s.connect(target).and_then(|()| s.local_addr()));
        if let Ok(source) = source {
            return Ok(SocketAddr::new(source.ip(), 0));
        }
    }
    let mut candidates: Vec<IpAddr> = interfaces()?
        .into_iter()
        .filter(|a| a.up && !a.loopback && !is_link_local(&a.address))
        .map(|a| a.address)
        .collect();
    candidates.sort_by_key(|ip| !ip.is_ipv4());
    let ip = candidates
        .first()
        .copied()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    Ok(SocketAddr::new(ip, 0))
}

fn is_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// Whether the configuration names a network transport (then every rank binds and
/// publishes an address).
fn networked(config: &Config) -> bool {
    config.transports.iter().any(|t| *t != TransportKind::Shm)
}

/// The text a rank publishes for its address.
fn address_text(bound: &NetworkSockets) -> String {
    bound
        .local
        .map_or_else(|| "-".to_owned(), |a| a.to_string())
}

/// Turns every rank's published address into the context's address list: all "-" (no
/// network anywhere) is an empty list; a mix means the ranks disagree on the transports.
fn parse_published(texts: &[String]) -> Result<Vec<SocketAddr>> {
    if texts.iter().all(|t| t == "-") {
        return Ok(Vec::new());
    }
    texts
        .iter()
        .enumerate()
        .map(|(rank, text)| {
            text.parse::<SocketAddr>().map_err(|_| {
                Error::Config(format!(
                    "rank {rank} published no usable network address ({text:?}): do all ranks \
                     have the same QUIVER_TRANSPORTS?"
                ))
            })
        })
        .collect()
}

/// Whether every rank's address belongs to an interface of this network namespace (so
/// every peer is reachable over shm).
fn all_local(addrs: &[SocketAddr]) -> bool {
    addrs
        .iter()
        .all(|a| UdpSocket::bind(SocketAddr::new(a.ip(), 0)).is_ok())
}

/// Builds the context from what the exchange produced. When every rank is on this node and
/// shm is tried first, the network sockets are closed and the job runs on shm alone.
fn finish(
    identity: (u32, u32, u64, [u8; 32]),
    config: Config,
    addrs: Vec<SocketAddr>,
    bound: NetworkSockets,
    how: Bootstrap,
) -> Result<Context> {
    let (rank, size, job_id, key) = identity;
    let shm_first = config.transports.first() == Some(&TransportKind::Shm);
    let (addrs, bound) = if !addrs.is_empty() && shm_first && all_local(&addrs) {
        drop(bound);
        (Vec::new(), None)
    } else {
        (addrs, Some(bound))
    };
    Context::builder()
        .rank(rank)
        .size(size)
        .job_id(job_id)
        .job_key(key)
        .addrs(addrs)
        .config(config)
        .bootstrap(how)
        .build_with(bound)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ----- PMIx ------------------------------------------------------------------------------

fn pmix_error(e: quiver_pmix::PmixError) -> Error {
    Error::io("bootstrapping through PMIx", io::Error::other(e))
}

fn pmix() -> Result<Context> {
    let get = |k: &str| std::env::var(k).ok();
    let config = Config::from_env()?;
    let env_key = key_from_env(&get)?;
    let client = quiver_pmix::Client::init().map_err(pmix_error)?;
    let (rank, size) = (client.rank(), client.size());
    if size > MAX_RANKS {
        return Err(Error::Config(format!(
            "PMIx reports a job of {size} ranks; quiver supports at most {MAX_RANKS}"
        )));
    }
    // Enter the node's namespace right after init: the PMIx server listens in the
    // launcher's namespace, and the connection made by init keeps working from here.
    let moved = enter_netns(&get, rank, size)?;
    let timeout = config.connect_timeout;
    if rank == 0 {
        let job_id = u64::from_ne_bytes(random());
        let key_text = match env_key {
            Some(_) => "-".to_owned(),
            None => hex(&random::<32>()),
        };
        client
            .put(PMIX_JOB_KEY, &format!("{job_id:016x}:{key_text}"))
            .map_err(pmix_error)?;
    }
    client.commit().map_err(pmix_error)?;
    client.fence(timeout).map_err(pmix_error)?;
    let job_text = client.get(0, PMIX_JOB_KEY, timeout).map_err(pmix_error)?;
    let (job_id, key) = parse_pmix_job(&job_text, env_key)?;
    let bound = if networked(&config) {
        let one_node = !moved && client.local_size() == Some(size);
        let own = bind_address(&get, one_node, None)?;
        bind_network(Some(own), &[], &[], &config, job_id, key)?
    } else {
        bind_network(None, &[], &[], &config, job_id, key)?
    };
    client
        .put(PMIX_ADDR_KEY, &address_text(&bound))
        .map_err(pmix_error)?;
    client.commit().map_err(pmix_error)?;
    client.fence(timeout).map_err(pmix_error)?;
    let texts = (0..size)
        .map(|r| client.get(r, PMIX_ADDR_KEY, timeout))
        .collect::<std::result::Result<Vec<String>, _>>()
        .map_err(pmix_error)?;
    // Everything needed is read; the PMIx session (and its thread) can end.
    client.finalize().map_err(pmix_error)?;
    let addrs = parse_published(&texts)?;
    finish(
        (rank, size, job_id, key),
        config,
        addrs,
        bound,
        Bootstrap::Pmix,
    )
}

/// Parses rank 0's `{job_id:016x}:{key hex or "-"}`; "-" means every rank has the key from
/// its environment.
fn parse_pmix_job(text: &str, env_key: Option<[u8; 32]>) -> Result<(u64, [u8; 32])> {
    let bad = || {
        Error::Config(format!(
            "rank 0 published a malformed job identity ({} bytes)",
            text.len()
        ))
    };
    let (id_text, key_text) = text.split_once(':').ok_or_else(bad)?;
    let job_id = parse_hex::<8>(id_text)
        .map(u64::from_be_bytes)
        .ok_or_else(bad)?;
    let key = match (key_text, env_key) {
        ("-", Some(key)) => key,
        ("-", None) => {
            return Err(Error::Config(
                "rank 0 took the job key from QUIVER_JOB_KEY or QUIVER_JOB_KEY_FILE, which \
                 this rank does not have: give every rank the same one"
                    .into(),
            ))
        }
        (text, _) => parse_hex::<32>(text).ok_or_else(bad)?,
    };
    Ok((job_id, key))
}

// ----- rendezvous --------------------------------------------------------------------------
//
// One TCP connection per rank r > 0 to rank 0, four messages:
//
//   r -> 0  HELLO   rank u32 | size u32 | nonce [16]
//   0 -> r  IDENT   job_id u64 | nonce [16]                (r binds its sockets now)
//   r -> 0  ADDR    rank u32 | nonce [16] | job_id u64 | len u16 | address text
//   0 -> r  ANSWER  job_id u64 | nonce [16] | count u32 | count x (len u16 | address text)
//
// Each is framed as  length u32 | magic "QVRZ" | version u8 | kind u8 | payload | MAC [32],
// big-endian, the MAC a keyed BLAKE3 hash (the job key) of everything between the length
// and the MAC. The nonce is the rank's, drawn per run: an answer cannot be replayed to
// another rank, and the job id (rank 0's, drawn per run) ties an ADDR to this run.

/// Frame magic of the rendezvous messages.
const RENDEZVOUS_MAGIC: &[u8; 4] = b"QVRZ";
/// Version of the rendezvous messages.
const RENDEZVOUS_VERSION: u8 = 1;
const KIND_HELLO: u8 = 1;
const KIND_IDENT: u8 = 2;
const KIND_ADDR: u8 = 3;
const KIND_ANSWER: u8 = 4;
/// MAC length (keyed BLAKE3).
const MAC_BYTES: usize = 32;
/// Magic, version, kind.
const FRAME_HEADER_BYTES: usize = 6;
/// Longest address text accepted (an IPv6 address with scope and port fits).
const MAX_ADDRESS_TEXT: usize = 64;
/// How long rank 0 waits for each message of one connection before dropping it (a
/// stranger cannot hold the rendezvous longer than this).
const RANK_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Rank and size from the first launcher variables present.
fn launcher_rank(get: Lookup<'_>) -> Result<(u32, u32)> {
    for (rank_var, size_var) in RANK_VARIABLES {
        let Some(rank_text) = get(rank_var) else {
            continue;
        };
        let number = |var: &str, text: &str| -> Result<u32> {
            text.trim()
                .parse()
                .map_err(|_| Error::Config(format!("{var}={text:?}: expected a whole number")))
        };
        let rank = number(rank_var, &rank_text)?;
        let size_text = get(size_var)
            .ok_or_else(|| Error::Config(format!("{rank_var} is set but {size_var} is not")))?;
        let size = number(size_var, &size_text)?;
        if size == 0 || size > MAX_RANKS || rank >= size {
            return Err(Error::Config(format!(
                "{rank_var}={rank}, {size_var}={size}: not a rank of a job of 1 to {MAX_RANKS} \
                 ranks"
            )));
        }
        return Ok((rank, size));
    }
    Err(Error::Config(format!(
        "the rendezvous bootstrap needs the rank and size from the launcher: none of {} is set",
        RANK_VARIABLES
            .iter()
            .map(|(r, s)| format!("{r}/{s}"))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

fn rendezvous() -> Result<Context> {
    let get = |k: &str| std::env::var(k).ok();
    let config = Config::from_env()?;
    let (rank, size) = launcher_rank(&get)?;
    let text = get("QUIVER_RENDEZVOUS").ok_or_else(|| {
        Error::Config(
            "QUIVER_RENDEZVOUS is not set: the fallback bootstrap needs host:port, an address \
             of rank 0's node where rank 0 listens and every rank can connect"
                .into(),
        )
    })?;
    let key = key_from_env(&get)?.ok_or_else(|| {
        Error::Config(
            "the rendezvous bootstrap needs the job key in QUIVER_JOB_KEY (64 hex digits) or in \
             the file QUIVER_JOB_KEY_FILE names, the same for every rank \
             (e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)"
                .into(),
        )
    })?;
    enter_netns(&get, rank, size)?;
    let point = text
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::Config(format!(
                "QUIVER_RENDEZVOUS={text:?}: expected host:port (an address of rank 0's node)"
            ))
        })?;
    let deadline = Instant::now() + config.connect_timeout;
    let bind = |job_id: u64| -> Result<NetworkSockets> {
        let own = if networked(&config) {
            Some(bind_address(&get, false, Some(point))?)
        } else {
            None
        };
        bind_network(own, &[], &[], &config, job_id, key)
    };
    let (job_id, bound, texts) = if rank == 0 {
        let listener = TcpListener::bind(point).map_err(|e| {
            Error::io(
                format!(
                    "rank 0 listening at QUIVER_RENDEZVOUS={text} (is it an address of rank 0's \
                     node, and is the port free?)"
                ),
                e,
            )
        })?;
        let job_id = u64::from_ne_bytes(random());
        let bound = bind(job_id)?;
        let texts = serve_rendezvous(
            &listener,
            &key,
            size,
            job_id,
            address_text(&bound),
            deadline,
        )?;
        (job_id, bound, texts)
    } else {
        let mut stream = connect_rank0(point, &text, deadline)?;
        let nonce: [u8; 16] = random();
        let mut hello = Vec::with_capacity(24);
        hello.extend_from_slice(&rank.to_be_bytes());
        hello.extend_from_slice(&size.to_be_bytes());
        hello.extend_from_slice(&nonce);
        let talk = |e: io::Error| Error::io(format!("rendezvous with rank 0 at {text}"), e);
        write_frame(&mut stream, &key, KIND_HELLO, &hello).map_err(talk)?;
        let ident = read_frame(&mut stream, &key, KIND_IDENT, 8 + 16, deadline).map_err(talk)?;
        let mut cursor = Cursor::new(&ident);
        let job_id = cursor.u64().map_err(talk)?;
        if cursor.bytes::<16>().map_err(talk)? != nonce {
            return Err(talk(invalid(
                "rank 0's answer is not for this rank's request",
            )));
        }
        let bound = bind(job_id)?;
        let own_text = address_text(&bound);
        let mut addr = Vec::with_capacity(32 + own_text.len());
        addr.extend_from_slice(&rank.to_be_bytes());
        addr.extend_from_slice(&nonce);
        addr.extend_from_slice(&job_id.to_be_bytes());
        put_text(&mut addr, &own_text);
        write_frame(&mut stream, &key, KIND_ADDR, &addr).map_err(talk)?;
        let max = 8 + 16 + 4 + size as usize * (2 + MAX_ADDRESS_TEXT);
        let answer = read_frame(&mut stream, &key, KIND_ANSWER, max, deadline).map_err(talk)?;
        let mut cursor = Cursor::new(&answer);
        if cursor.u64().map_err(talk)? != job_id || cursor.bytes::<16>().map_err(talk)? != nonce {
            return Err(talk(invalid(
                "rank 0's answer is not for this rank's request",
            )));
        }
        if cursor.u32().map_err(talk)? != size {
            return Err(talk(invalid("rank 0 runs a job of another size")));
        }
        let texts = (0..size)
            .map(|_| cursor.text())
            .collect::<io::Result<Vec<String>>>()
            .map_err(talk)?;
        (job_id, bound, texts)
    };
    let addrs = parse_published(&texts)?;
    finish(
        (rank, size, job_id, key),
        config,
        addrs,
        bound,
        Bootstrap::Rendezvous,
    )
}

/// Connects to rank 0's rendezvous, retrying while it is not listening yet.
fn connect_rank0(point: SocketAddr, text: &str, deadline: Instant) -> Result<TcpStream> {
    let mut backoff = Duration::from_millis(5);
    loop {
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        match TcpStream::connect_timeout(&point, left.max(Duration::from_millis(1))) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::io(
                    format!(
                        "connecting to rank 0 at QUIVER_RENDEZVOUS={text} (gave up at the \
                         connect timeout, QUIVER_CONNECT_TIMEOUT_MS)"
                    ),
                    e,
                ))
            }
            Err(_) => {
                std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// A rank that has told rank 0 its address and waits for the answer.
struct Waiting {
    nonce: [u8; 16],
    stream: TcpStream,
}

/// Rank 0's side: accepts until every other rank has sent its address, then answers them
/// all. Returns every rank's address text.
fn serve_rendezvous(
    listener: &TcpListener,
    key: &[u8; 32],
    size: u32,
    job_id: u64,
    own_text: String,
    deadline: Instant,
) -> Result<Vec<String>> {
    let mut texts: Vec<Option<String>> = vec![None; size as usize];
    texts[0] = Some(own_text);
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut missing = size - 1;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("configuring the rendezvous listener", e))?;
    while missing > 0 {
        let now = Instant::now();
        if now >= deadline {
            let absent: Vec<String> = texts
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_none())
                .map(|(r, _)| r.to_string())
                .collect();
            return Err(Error::io(
                "rank 0 waiting at the rendezvous",
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "ranks {} did not arrive within the connect timeout \
                         (QUIVER_CONNECT_TIMEOUT_MS): are they running, with the same job key \
                         and QUIVER_RENDEZVOUS?",
                        absent.join(",")
                    ),
                ),
            ));
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("accepting at the rendezvous", e)),
        };
        // A connection that does not complete (a stranger, a wrong key, a rank that died)
        // is dropped; the ranks that matter retry or report their own failure.
        if let Ok((rank, text, nonce, stream)) = greet(stream, key, size, job_id, deadline) {
            if texts[rank as usize].is_none() {
                texts[rank as usize] = Some(text);
                waiting.push(Waiting { nonce, stream });
                missing -= 1;
            }
        }
    }
    let texts: Vec<String> = texts.into_iter().map(Option::unwrap_or_default).collect();
    let mut answer = Vec::with_capacity(28 + texts.len() * 24);
    for mut w in waiting {
        answer.clear();
        answer.extend_from_slice(&job_id.to_be_bytes());
        answer.extend_from_slice(&w.nonce);
        answer.extend_from_slice(&size.to_be_bytes());
        for t in &texts {
            put_text(&mut answer, t);
        }
        // A rank that went away in the meantime reports its own failure.
        let _ = write_frame(&mut w.stream, key, KIND_ANSWER, &answer);
    }
    Ok(texts)
}

/// Runs HELLO / IDENT / ADDR with one connecting rank.
fn greet(
    mut stream: TcpStream,
    key: &[u8; 32],
    size: u32,
    job_id: u64,
    deadline: Instant,
) -> io::Result<(u32, String, [u8; 16], TcpStream)> {
    stream.set_nonblocking(false)?;
    let _ = stream.set_nodelay(true);
    let step = (Instant::now() + RANK_MESSAGE_TIMEOUT).min(deadline);
    let hello = read_frame(&mut stream, key, KIND_HELLO, 24, step)?;
    let mut cursor = Cursor::new(&hello);
    let (rank, their_size, nonce) = (cursor.u32()?, cursor.u32()?, cursor.bytes::<16>()?);
    if their_size != size || rank == 0 || rank >= size {
        return Err(invalid("rank or size do not fit this job"));
    }
    let mut ident = Vec::with_capacity(24);
    ident.extend_from_slice(&job_id.to_be_bytes());
    ident.extend_from_slice(&nonce);
    write_frame(&mut stream, key, KIND_IDENT, &ident)?;
    let step = (Instant::now() + RANK_MESSAGE_TIMEOUT).min(deadline);
    let addr = read_frame(&mut stream, key, KIND_ADDR, 30 + MAX_ADDRESS_TEXT, step)?;
    let mut cursor = Cursor::new(&addr);
    if cursor.u32()? != rank || cursor.bytes::<16>()? != nonce || cursor.u64()? != job_id {
        return Err(invalid("address message of another request"));
    }
    let text = cursor.text()?;
    Ok((rank, text, nonce, stream))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

fn mac(key: &[u8; 32], body: &[u8]) -> blake3::Hash {
    blake3::keyed_hash(key, body)
}

fn write_frame(stream: &mut TcpStream, key: &[u8; 32], kind: u8, payload: &[u8]) -> io::Result<()> {
    let mut body = Vec::with_capacity(4 + FRAME_HEADER_BYTES + payload.len() + MAC_BYTES);
    let len = (FRAME_HEADER_BYTES + payload.len() + MAC_BYTES) as u32;
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(RENDEZVOUS_MAGIC);
    body.push(RENDEZVOUS_VERSION);
    body.push(kind);
    body.extend_from_slice(payload);
    let tag = mac(key, &body[4..]);
    body.extend_from_slice(tag.as_bytes());
    stream.write_all(&body)
}

/// Reads one frame of `kind` whose payload is at most `max_payload` bytes, by `deadline`,
/// and checks its MAC. Returns the payload.
fn read_frame(
    stream: &mut TcpStream,
    key: &[u8; 32],
    kind: u8,
    max_payload: usize,
    deadline: Instant,
) -> io::Result<Vec<u8>> {
    let mut read = |buf: &mut [u8]| -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "rendezvous timed out",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        stream.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection (wrong job key, or another job's rendezvous?)",
            ),
            _ => e,
        })
    };
    let mut len = [0u8; 4];
    read(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if !(FRAME_HEADER_BYTES + MAC_BYTES..=FRAME_HEADER_BYTES + max_payload + MAC_BYTES)
        .contains(&len)
    {
        return Err(invalid("rendezvous message of an impossible length"));
    }
    let mut body = vec![0u8; len];
    read(&mut body)?;
    let (signed, tag) = body.split_at(len - MAC_BYTES);
    let tag: [u8; MAC_BYTES] = tag.try_into().map_err(|_| invalid("short MAC"))?;
    if &signed[..4] != RENDEZVOUS_MAGIC || signed[4] != RENDEZVOUS_VERSION || signed[5] != kind {
        return Err(invalid("not a quiver rendezvous message of this version"));
    }
    // blake3::Hash compares in constant time.
    if mac(key, signed) != blake3::Hash::from(tag) {
        return Err(invalid(
            "rendezvous message with a wrong MAC: the ranks do not share the job key",
        ));
    }
    Ok(signed[FRAME_HEADER_BYTES..].to_vec())
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(MAX_ADDRESS_TEXT)];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Reads big-endian fields off a payload, failing (never panicking) past its end.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { rest: bytes }
    }

    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(invalid("rendezvous message too short"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn bytes<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> io::Result<u32> {
        self.bytes::<4>().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> io::Result<u64> {
        self.bytes::<8>().map(u64::from_be_bytes)
    }

    fn text(&mut self) -> io::Result<String> {
        let len = u16::from_be_bytes(self.bytes::<2>()?) as usize;
        if len > MAX_ADDRESS_TEXT {
            return Err(invalid("address text too long"));
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| invalid("address text not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn detection_order() {
        let d = |pairs: &[(&str, &str)]| detect(&lookup(pairs));
        assert_eq!(
            d(&[("QUIVER_RANK", "0"), ("PMIX_RANK", "0")]).unwrap(),
            Bootstrap::QuiverRun
        );
        let pmix = d(&[("PMIX_RANK", "1"), ("OMPI_COMM_WORLD_RANK", "1")]);
        if quiver_pmix::BUILT {
            assert_eq!(pmix.unwrap(), Bootstrap::Pmix);
        } else {
            assert!(pmix.unwrap_err().to_string().contains("without PMIx"));
        }
        assert_eq!(d(&[("SLURM_PROCID", "3")]).unwrap(), Bootstrap::Rendezvous);
        assert_eq!(
            d(&[("QUIVER_BOOTSTRAP", "rendezvous"), ("PMIX_RANK", "0")]).unwrap(),
            Bootstrap::Rendezvous
        );
        assert!(d(&[("QUIVER_BOOTSTRAP", "magic")]).is_err());
        let none = d(&[]).unwrap_err().to_string();
        assert!(none.contains("not started by a launcher"), "{none}");
    }

    #[test]
    fn launcher_variables() {
        let r = |pairs: &[(&str, &str)]| launcher_rank(&lookup(pairs));
        assert_eq!(
            r(&[("PMI_RANK", "2"), ("PMI_SIZE", "4"), ("SLURM_PROCID", "9")]).unwrap(),
            (2, 4)
        );
        assert_eq!(
            r(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]).unwrap(),
            (1, 2)
        );
        assert!(r(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")]).is_err());
        assert!(r(&[("PMI_RANK", "x"), ("PMI_SIZE", "4")]).is_err());
        let e = r(&[("OMPI_COMM_WORLD_RANK", "0")]).unwrap_err().to_string();
        assert!(e.contains("OMPI_COMM_WORLD_SIZE"), "{e}");
        assert!(r(&[]).is_err());
    }

    #[test]
    fn netns_rule() {
        let n = |text: &str, rank: u32, size: u32| {
            netns_for(&lookup(&[("QUIVER_NETNS", text)]), rank, size)
        };
        let path = |s: &str| Some(PathBuf::from(s));
        assert_eq!(n("a,b", 0, 4).unwrap(), path("/run/netns/a"));
        assert_eq!(n("a,b", 1, 4).unwrap(), path("/run/netns/a"));
        assert_eq!(n("a,b", 2, 4).unwrap(), path("/run/netns/b"));
        assert_eq!(n("a,b", 3, 4).unwrap(), path("/run/netns/b"));
        assert_eq!(n("a,-,b", 1, 3).unwrap(), None);
        assert_eq!(n("/proc/1/ns/net", 0, 2).unwrap(), path("/proc/1/ns/net"));
        assert!(n("a,b,c", 0, 2).is_err());
        assert!(n("a,,b", 0, 3).is_err());
        assert_eq!(netns_for(&lookup(&[]), 0, 2).unwrap(), None);
    }

    #[test]
    fn bind_address_choice() {
        let b = |pairs: &[(&str, &str)], one_node: bool, toward: Option<SocketAddr>| {
            bind_address(&lookup(pairs), one_node, toward)
        };
        assert_eq!(
            b(&[("QUIVER_BIND_ADDR", "10.1.2.3")], true, None).unwrap(),
            "10.1.2.3:0".parse().unwrap()
        );
        assert_eq!(
            b(&[("QUIVER_BIND_ADDR", "10.1.2.3:7000")], true, None).unwrap(),
            "10.1.2.3:7000".parse().unwrap()
        );
        assert_eq!(
            b(&[("QUIVER_BIND_ADDR", "lo")], false, None).unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert!(b(&[("QUIVER_BIND_ADDR", "no-such-interface0")], false, None).is_err());
        assert_eq!(b(&[], true, None).unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(
            b(&[], false, Some("127.0.0.1:9".parse().unwrap())).unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        let any = b(&[], false, None).unwrap();
        assert_eq!(any.port(), 0);
        assert!(!is_link_local(&any.ip()));
    }

    #[test]
    fn keys_from_the_environment() {
        let k = |pairs: &[(&str, &str)]| key_from_env(&lookup(pairs));
        assert_eq!(k(&[]).unwrap(), None);
        let hex64 = "ab".repeat(32);
        assert_eq!(k(&[("QUIVER_JOB_KEY", &hex64)]).unwrap(), Some([0xab; 32]));
        let e = k(&[("QUIVER_JOB_KEY", "abc")]).unwrap_err().to_string();
        assert!(e.contains("64 hex digits") && !e.contains("abc\""), "{e}");
        let dir = std::env::temp_dir().join(format!("quiver-key-{}", std::process::id()));
        std::fs::write(&dir, format!("{hex64}\n")).unwrap();
        let from_file = k(&[("QUIVER_JOB_KEY_FILE", dir.to_str().unwrap())]);
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(from_file.unwrap(), Some([0xab; 32]));
        assert!(k(&[("QUIVER_JOB_KEY_FILE", "/nonexistent/quiver-key")]).is_err());
    }

    #[test]
    fn pmix_job_identity() {
        let key = "cd".repeat(32);
        let (id, k) = parse_pmix_job(&format!("00000000000000ff:{key}"), None).unwrap();
        assert_eq!((id, k), (0xff, [0xcd; 32]));
        assert_eq!(
            parse_pmix_job("0000000000000001:-", Some([7; 32])).unwrap(),
            (1, [7; 32])
        );
        assert!(parse_pmix_job("0000000000000001:-", None).is_err());
        assert!(parse_pmix_job("garbage", None).is_err());
        assert!(parse_pmix_job("00000000000000ff:abc", None).is_err());
    }

    #[test]
    fn published_addresses() {
        let s =
            |v: &[&str]| parse_published(&v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>());
        assert!(s(&["-", "-"]).unwrap().is_empty());
        assert_eq!(s(&["127.0.0.1:1", "127.0.0.1:2"]).unwrap().len(), 2);
        let e = s(&["127.0.0.1:1", "-"]).unwrap_err().to_string();
        assert!(
            e.contains("rank 1") && e.contains("QUIVER_TRANSPORTS"),
            "{e}"
        );
    }

    #[test]
    fn frames_are_authenticated() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let key = [5u8; 32];
        let deadline = Instant::now() + Duration::from_secs(5);
        write_frame(&mut client, &key, KIND_HELLO, b"0123").unwrap();
        assert_eq!(
            read_frame(&mut server, &key, KIND_HELLO, 24, deadline).unwrap(),
            b"0123"
        );
        // Wrong key.
        write_frame(&mut client, &[6u8; 32], KIND_HELLO, b"0123").unwrap();
        let e = read_frame(&mut server, &key, KIND_HELLO, 24, deadline).unwrap_err();
        assert!(e.to_string().contains("wrong MAC"), "{e}");
        // Wrong kind.
        write_frame(&mut client, &key, KIND_ADDR, b"0123").unwrap();
        assert!(read_frame(&mut server, &key, KIND_HELLO, 24, deadline).is_err());
        // Too long for what is expected: refused before reading it.
        write_frame(&mut client, &key, KIND_HELLO, &[0u8; 100]).unwrap();
        let e = read_frame(&mut server, &key, KIND_HELLO, 24, deadline).unwrap_err();
        assert!(e.to_string().contains("impossible length"), "{e}");
        // Truncated payload fields never panic.
        let mut c = Cursor::new(&[0u8, 1, 2]);
        assert!(c.u32().is_err());
        let mut c = Cursor::new(&[0u8, 200, 1]);
        assert!(c.text().is_err());
    }
}
