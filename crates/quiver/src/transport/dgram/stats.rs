//! The counters the datagram engine reports: over its connections ([`DatagramStats`]) and
//! per own link ([`LinkStats`]).
//!
//! Layer: data types of the datagram transport, re-exported by the crate. They hold numbers
//! only; the engine fills them (`DgramShared::stats`, `DgramShared::link_stats`).

use std::net::SocketAddr;

use crate::transport::fault::FaultStats;
use crate::transport::xdp::link::XdpLinkStats;

/// Counters of a context's reliable datagram protocol (udp or mem), summed over its
/// connections, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatagramStats {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Data frames sent again (after a timeout or a fast retransmit).
    pub retransmits: u64,
    /// Of those, fast retransmits (loss inferred from acknowledgements).
    pub fast_retransmits: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Duplicates received and dropped.
    pub duplicates_dropped: u64,
    /// Corrupted datagrams received and dropped.
    pub corrupt_dropped: u64,
    /// Times a link of a striped connection went down (its traffic moved to the others).
    pub paths_down: u64,
    /// Times such a link came back.
    pub paths_rejoined: u64,
    /// Connections open now (not given up by their endpoint): one per pair of endpoints
    /// that talk, whichever side connected first.
    pub connections: u64,
    /// Payload bytes received straight into a receive's buffer (a blocking receive in the
    /// middle of a message), not through the connection's receive window.
    pub direct_read_bytes: u64,
    /// Of those, bytes a scattering receive put there with no copy after the kernel's
    /// (`Config::udp_scatter_min`).
    pub scattered_bytes: u64,
    /// Message bytes sent in place: lent from the sender's buffer to the protocol, not
    /// copied into a send window (`Config::udp_send_in_place_min`).
    pub sent_in_place_bytes: u64,
    /// Of those, bytes copied into the send window after all: not acknowledged when their
    /// send returned.
    pub adopted_bytes: u64,
    /// Message bytes of posted sends sent in place (`Config::udp_post_in_place_min`):
    /// lent from the posted buffer, never copied.
    pub posted_in_place_bytes: u64,
    /// Faults injected into the datagrams of this context's sockets
    /// ([`Config::faults`](crate::Config::faults), `QUIVER_FAULTS`); all zero when off.
    pub faults: FaultStats,
}

impl DatagramStats {
    pub(super) fn add(&mut self, s: &quiver_proto::reliable::ReliableStats) {
        self.datagrams_sent += s.datagrams_sent;
        self.datagrams_received += s.datagrams_received;
        self.retransmits += s.retransmits;
        self.fast_retransmits += s.fast_retransmits;
        self.timeouts += s.rto_expirations;
        self.duplicates_dropped += s.duplicates_dropped;
        self.corrupt_dropped += s.corrupt_dropped;
        self.paths_down += s.paths_down;
        self.paths_rejoined += s.paths_rejoined;
        self.direct_read_bytes += s.direct_read_bytes;
        self.scattered_bytes += s.scattered_bytes;
    }
}

/// Traffic of one of this rank's links, summed over the datagram connections (those still
/// open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// The link's local address.
    pub address: Option<SocketAddr>,
    /// Datagrams sent on it.
    pub datagrams_sent: u64,
    /// Datagrams received on it.
    pub datagrams_received: u64,
    /// Payload bytes of data frames sent on it (retransmissions included).
    pub payload_bytes_sent: u64,
    /// Frames sent on it and declared lost.
    pub frames_lost: u64,
    /// Of those, frames whose first transmission was acknowledged after all (a timeout
    /// that fired while the peer was paused): see `PathStats::spurious_losses`.
    pub spurious_losses: u64,
    /// Times it went down in some connection.
    pub times_down: u64,
    /// Largest over the connections: congestion window, delivery rate (bytes/s), smoothed
    /// and minimum RTT (ns) on this link.
    pub window_bytes: u64,
    /// See `window_bytes`.
    pub delivery_rate_bytes_per_second: u64,
    /// See `window_bytes`.
    pub smoothed_rtt_ns: u64,
    /// See `window_bytes`.
    pub min_rtt_ns: u64,
    /// The link's AF_XDP counters and modes (an xdp link; None for udp and mem).
    pub xdp: Option<XdpLinkStats>,
}
