//! The rank side of the lab's paired runs: what a block of a pair runs over. Side A is
//! quiver's connection under test, with failure detection as the block says; side B is
//! the baseline: the raw-socket link of `--baseline interleave` (the bench's
//! [`RawBaseline`], set up over the quiver connection) or, for `--baseline tcp`, quiver's
//! tcp over a second context in the same two ranks ([`TcpLink`]).

use std::time::Duration;

use quiver::Context;
use quiver_cli::bench::link::Link;
use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::raw::RawBaseline;
use quiver_cli::bench::rendezvous::Rendezvous;
use quiver_cli::launch::JobIdentity;

/// One block of a point: a run over quiver with failure detection as given (`None`:
/// off), or a run over the baseline (`--baseline interleave` or `tcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Block {
    /// Over the quiver connection under test, detection on (this detection time) or off.
    Quiver(Option<Duration>),
    /// Over the baseline.
    Baseline,
}

/// The baseline side of `--baseline interleave` (raw sockets) or `--baseline tcp`
/// (quiver's tcp, over its own context).
pub(crate) enum BaselineLink {
    /// raw-udp or raw-tcp.
    Raw(RawBaseline),
    /// quiver's tcp.
    Quiver(Box<TcpLink>),
}

/// `--baseline tcp`: quiver's tcp between the same two ranks, over a second context that
/// uses tcp only. The link (its endpoint) is dropped before the context.
pub(crate) struct TcpLink {
    /// The link over the tcp context.
    pub(crate) link: Link,
    _context: Context,
}

/// Builds the `--baseline tcp` link: each rank picks a free loopback port, rank 0 draws a
/// fresh job id and key (so nothing keyed by the job id, shm names among them, is shared
/// with the first context), all of it goes to the other rank over the first link, and
/// both ranks build a tcp-only context (the configuration of the first one otherwise) and
/// open their link on it as `run` does.
///
/// The port is found by binding and closing a listener; the context binds it again a
/// moment later (another process taking it meanwhile makes the build fail, clearly).
pub(crate) fn open_tcp_link(context: &Context, first: &mut Link) -> Result<TcpLink, String> {
    let rank = first.rank();
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("finding a free loopback port: {error}"))?
        .port();
    let mut mine = port.to_le_bytes().to_vec();
    if rank == 0 {
        let job = JobIdentity::generate()
            .map_err(|error| format!("drawing the tcp context's job id and key: {error}"))?;
        mine.extend_from_slice(&job.id.to_le_bytes());
        mine.extend_from_slice(&job.key);
    }
    let theirs = Rendezvous::exchange(first, &mine)?;
    let job_source = if rank == 0 { &mine } else { &theirs };
    let (Some(their_port), Some(job_id), Some(key)) = (
        theirs.get(..2),
        job_source
            .get(2..10)
            .and_then(|id| <[u8; 8]>::try_from(id).ok()),
        job_source
            .get(10..42)
            .and_then(|key| <[u8; 32]>::try_from(key).ok()),
    ) else {
        return Err(format!(
            "the other rank sent {} bytes for the tcp baseline's setup",
            theirs.len()
        ));
    };
    let their_port = u16::from_le_bytes([their_port[0], their_port[1]]);
    let loopback = |port| std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let addrs = if rank == 0 {
        vec![loopback(port), loopback(their_port)]
    } else {
        vec![loopback(their_port), loopback(port)]
    };
    let config = quiver::Config {
        transports: vec![quiver::TransportKind::Tcp],
        ..context.config().clone()
    };
    let tcp_context = Context::builder()
        .rank(rank)
        .size(2)
        .job_id(u64::from_le_bytes(job_id))
        .job_key(key)
        .addrs(addrs)
        .config(config)
        .build()
        .map_err(|error| format!("building the tcp context: {error}"))?;
    let link = Link::open(&tcp_context, Transport::Tcp, " over tcp")?;
    Ok(TcpLink {
        link,
        _context: tcp_context,
    })
}
