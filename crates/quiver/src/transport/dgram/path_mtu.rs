//! A connection's datagram size follows its path's MTU: when a link learns that the path
//! carries smaller datagrams (a plain udp socket's or io_uring's refused send, an xdp
//! link's interface MTU read again), the connection cuts datagrams that fit from then on
//! (decision 0081).
//!
//! Layer: the datagram transport's socket I/O, below the engine.

use std::net::SocketAddr;

use super::connection::Entry;
use crate::log::ENDPOINT_LOG;

/// Lowers `entry`'s datagram size to `room`, the datagram bytes the path from `local` to
/// `to` now carries; logged, and true, when it changes.
#[cold]
pub(super) fn lower_datagram_size(
    entry: &mut Entry,
    local: SocketAddr,
    to: SocketAddr,
    room: usize,
) -> bool {
    let before = entry.core.max_datagram_bytes();
    let after = entry.core.lower_max_datagram_bytes(room);
    if after < before {
        tracing::warn!(target: ENDPOINT_LOG, %local, peer = %to, before, after, "the path's MTU fell: this connection's datagrams are {after} bytes from now on (they were {before})");
    }
    after < before
}
