//! Where a rank lives on the network: the network namespace `QUIVER_NETNS` puts it in, the
//! address it binds (`QUIVER_BIND_ADDR`, loopback for a one-node job, the route towards the
//! rendezvous, the first non-loopback address), and what the addresses the ranks published
//! say about the job (all on this node, or a mix that means the ranks disagree).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;

use super::env::Lookup;
use super::info::{JobInfo, NetworkBinder};
use super::variables::{BIND_ADDR, NETNS};
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};

/// The network namespace `QUIVER_NETNS` names for `rank` of a `size`-rank job: N
/// comma-separated names, rank r taking name number r*N/size (N == size: one per rank;
/// N == 2: the first half of the ranks in the first). A name is `/run/netns/NAME` (made by
/// `ip netns add`) unless it contains a '/', then it is a path; "-" stays put.
pub(crate) fn netns_for(get: Lookup<'_>, rank: u32, size: u32) -> Result<Option<PathBuf>> {
    let Some(text) = get(NETNS) else {
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
pub(crate) fn enter_netns(get: Lookup<'_>, rank: u32, size: u32) -> Result<bool> {
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
pub(crate) fn bind_address(
    get: Lookup<'_>,
    one_node: bool,
    toward: Option<SocketAddr>,
) -> Result<SocketAddr> {
    let interfaces = || {
        quiver_transport::netif::interface_addresses()
            .map_err(|e| Error::io("listing the network interfaces (getifaddrs)", e))
    };
    if let Some(text) = get(BIND_ADDR) {
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

pub(crate) fn is_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// Turns every rank's published address into the context's address list: all "-" (no
/// network anywhere) is an empty list; a mix means the ranks disagree on the transports.
pub(crate) fn parse_published(texts: &[String]) -> Result<Vec<SocketAddr>> {
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
pub(crate) fn all_local(addrs: &[SocketAddr]) -> bool {
    addrs
        .iter()
        .all(|a| UdpSocket::bind(SocketAddr::new(a.ip(), 0)).is_ok())
}

/// Whether the configuration names a network transport (then every rank binds and
/// publishes an address).
pub(crate) fn networked(config: &Config) -> bool {
    config.transports.iter().any(|t| *t != TransportKind::Shm)
}

/// The text a rank publishes for its address ("-" without network).
pub(crate) fn address_text(bound: Option<SocketAddr>) -> String {
    bound.map_or_else(|| "-".to_owned(), |a| a.to_string())
}

/// The job once every rank's address is known. When every rank is on this node and shm
/// is tried first, the network sockets are closed again and the job runs on shm alone
/// (as under `quiver run`).
pub(crate) fn settle(
    mut job: JobInfo,
    config: &Config,
    network: &mut dyn NetworkBinder,
) -> JobInfo {
    let shm_first = config.transports.first() == Some(&TransportKind::Shm);
    if !job.addrs.is_empty() && shm_first && all_local(&job.addrs) {
        network.unbind();
        job.addrs = Vec::new();
    }
    job
}

#[cfg(test)]
mod tests {
    use super::super::env::tests::lookup;
    use super::*;

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
}
