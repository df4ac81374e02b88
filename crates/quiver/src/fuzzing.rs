//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`, off by default, hidden
//! from the docs; not part of the API): hostile input handed to the code that reads it, as
//! a peer or a stranger would hand it, without going around the paths a real one takes.
//!
//! Layer: beside the public API; it reaches one transport's internals for the fuzzer and
//! nothing imports it.

use std::net::SocketAddr;

use crate::transport::dgram::mem;

/// Puts `datagram` in the queue of the in-process datagram socket (the `mem` transport)
/// bound at `to`, as if `from` had sent it: the context owning that socket takes it at its
/// next poll (any endpoint call) through the whole receive path (the engine's router, the
/// connection it names and its authenticator, the endpoint). Returns whether it was queued
/// (not when nothing is bound at `to` or its queue is full).
pub fn deliver_mem_datagram(from: SocketAddr, to: SocketAddr, datagram: &[u8]) -> bool {
    mem::deliver(from, to, datagram, &[]).unwrap_or(false)
}
