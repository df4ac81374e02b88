//! Network transports: connection setup over TCP (listener thread, job-key handshake on the
//! stream) and the datagram engine that drives the reliable protocol core over UDP (or
//! in-process queues, the `mem` transport).
//!
//! Every rank of a job that uses the network has one address (`QUIVER_ADDRS`, one
//! `ip:port` per rank): its TCP listener and its UDP socket both bind that address.

pub(crate) mod dgram;
pub(crate) mod mem;

use std::net::SocketAddr;

/// Whether the address is on this host's loopback.
pub(crate) fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}
