//! Network transports: connection setup over TCP (listener thread, job-key handshake on the
//! stream) and the job's network addresses. The datagram engine (udp, mem) is in
//! `transport::dgram`.
//!
//! Every rank of a job that uses the network has one address (`QUIVER_ADDRS`, one
//! `ip:port` per rank): its TCP listener and its UDP socket both bind that address.

pub(crate) mod tcp;

use std::net::SocketAddr;

use crate::error::{Error, Result};

/// Parses `QUIVER_ADDRS`: one `ip:port` per rank, comma-separated, in rank order.
///
/// # Errors
/// [`Error::Config`] naming the bad entry.
pub(crate) fn parse_addrs(text: &str) -> Result<Vec<SocketAddr>> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .enumerate()
        .map(|(rank, entry)| {
            entry.parse::<SocketAddr>().map_err(|_| {
                Error::Config(format!(
                    "QUIVER_ADDRS: entry {rank} ({entry:?}) is not an ip:port address"
                ))
            })
        })
        .collect()
}

/// Whether the address is on this host's loopback.
pub(crate) fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addrs_parse() {
        let a = parse_addrs("127.0.0.1:7000, 10.77.1.2:7001,[::1]:9").unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[1].port(), 7001);
        assert!(is_loopback(&a[0]) && is_loopback(&a[2]) && !is_loopback(&a[1]));
        let e = parse_addrs("127.0.0.1:7000,nonsense").unwrap_err();
        assert!(e.to_string().contains("entry 1"));
    }
}
