//! The tcp transport's counters ([`TcpStats`], in `ContextStats::tcp`): the streams open
//! now at this rank, whichever end opened them, and how many it connected and accepted.
//!
//! One stream carries both directions of an endpoint pair, so both ranks count it: the
//! one that connected and the one whose listener accepted it, as the datagram engine's
//! `connections` does for udp. (`ContextStats::connections_accepted` counts logical
//! connections at the receiving end only, the reverse edge of a stream once the peer
//! sends on it; a stream the peer never sends on shows there at one end alone.)
//!
//! Nothing here is on a message's path: a stream is counted when it is established and
//! stops counting as open when the last of its two edges is dropped ([`OpenStream`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// This rank's tcp streams (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Streams open now (held by an endpoint, or accepted and not yet adopted): one per
    /// pair of endpoints that talk over tcp, at both ends, whichever connected.
    pub connections: u64,
    /// Streams this rank opened to a peer's listener (its handshake completed), in all.
    pub connected: u64,
    /// Streams this rank's listener accepted (their handshake completed), in all.
    pub accepted: u64,
}

/// The counters behind [`TcpStats`], shared by the listener and the endpoints.
#[derive(Debug, Default)]
pub(crate) struct TcpCounts {
    open: AtomicU64,
    connected: AtomicU64,
    accepted: AtomicU64,
}

impl TcpCounts {
    /// Counts a stream this rank connected; it is open while the returned handle lives.
    pub(crate) fn connected(self: &Arc<Self>) -> Arc<OpenStream> {
        self.connected.fetch_add(1, Ordering::Relaxed);
        self.open()
    }

    /// Counts a stream the listener accepted; it is open while the returned handle lives.
    pub(crate) fn accepted(self: &Arc<Self>) -> Arc<OpenStream> {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open()
    }

    fn open(self: &Arc<Self>) -> Arc<OpenStream> {
        self.open.fetch_add(1, Ordering::Relaxed);
        Arc::new(OpenStream {
            counts: Arc::clone(self),
        })
    }

    /// The counters now.
    pub(crate) fn snapshot(&self) -> TcpStats {
        TcpStats {
            connections: self.open.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
        }
    }
}

/// One established stream's place in [`TcpCounts`]: shared by the stream's edges (the
/// outbound one and its reverse, or the accepted one and the outbound one riding on it);
/// the stream stops counting as open when the last of them is dropped.
#[derive(Debug)]
pub(crate) struct OpenStream {
    counts: Arc<TcpCounts>,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.counts.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_open_while_either_edge_holds_it() {
        let counts = Arc::new(TcpCounts::default());
        let dialed = counts.connected();
        let reverse = Arc::clone(&dialed);
        let accepted = counts.accepted();
        assert_eq!(
            counts.snapshot(),
            TcpStats {
                connections: 2,
                connected: 1,
                accepted: 1
            }
        );
        drop(dialed);
        assert_eq!(
            counts.snapshot().connections,
            2,
            "the reverse edge holds it"
        );
        drop(reverse);
        drop(accepted);
        assert_eq!(
            counts.snapshot(),
            TcpStats {
                connections: 0,
                connected: 1,
                accepted: 1
            }
        );
    }
}
