//! The counters the datagram engine reports: over its connections ([`DatagramStats`]) and
//! per own link ([`LinkStats`]).
//!
//! Layer: data types of the datagram transport, re-exported by the crate. They hold numbers
//! only; the engine fills them (`DgramShared::stats`, `DgramShared::link_stats`).

use std::net::SocketAddr;

use quiver_proto::router::DropReason;

use crate::transport::fault::FaultStats;
use crate::transport::xdp::link::XdpLinkStats;
use quiver_transport::uring::UringStats;

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
    /// Of those, data frames this context had already received: retransmissions its peers
    /// did not need (spurious: their timer fired while a rank was off its CPU). Counted by
    /// the receiver, where it is certain; summed over a job's ranks it is the job's count.
    /// On a lossless link every retransmission is one of these.
    pub spurious_retransmits: u64,
    /// Frames declared lost that no longer fit their connection's datagram size (it was
    /// lowered after they were sent: the path's MTU fell): each was resent shortened, the
    /// rest of its bytes in new frames (decision 0081).
    pub frames_recut: u64,
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
    /// Receives that took a message already whole in a connection's receive window without
    /// polling the sockets first: small messages that shared a frame
    /// (docs/decisions/0079-small-messages-share-frames.md).
    pub buffered_takes: u64,
    /// Faults injected into the datagrams of this context's sockets
    /// ([`Config::faults`](crate::Config::faults), `QUIVER_FAULTS`); all zero when off.
    pub faults: FaultStats,
    /// Hellos the engine's router remembers now (to route their repeats): its only state for
    /// peers that have no connection, at most `quiver_proto::router::HELLO_CAPACITY`, each
    /// forgotten after `HELLO_LIFETIME_NS`. A gauge, not a counter.
    pub hellos_remembered: u64,
    /// Remembered Hellos pushed out by newer ones before their lifetime ended (the table
    /// was full).
    pub hellos_evicted: u64,
    /// Datagrams the engine took from its sockets and no connection took, by why: with
    /// `corrupt_dropped` and `duplicates_dropped` (a connection's), nothing received is
    /// dropped uncounted.
    pub refused: DatagramRefusals,
}

/// Datagrams a context's datagram engine received and handed to no connection, by reason
/// (the router's verdicts, [`quiver_proto::router`], and the socket's truncation). Each is
/// counted once, when it is dropped or answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatagramRefusals {
    /// Too short, or a wrong magic or version: not a frame of ours.
    pub undecodable: u64,
    /// A Stream frame whose short connection id names no connection here.
    pub unknown_short_id: u64,
    /// A full connection id that names no connection here, in a frame that gets no Reset
    /// (a Reset itself, one from id 0, or one that does not parse).
    pub unknown_id: u64,
    /// A full connection id that names no connection here, answered with a Reset (a
    /// connection this side forgot, or a forged id).
    pub resets_sent: u64,
    /// For id 0 (a Hello) but not a valid frame: corrupt or truncated.
    pub malformed_hellos: u64,
    /// Valid frames for id 0 that are no Hello of this job (another job, version or kind):
    /// refused connection attempts.
    pub refused_hellos: u64,
    /// Hellos of this job whose MAC does not prove the job key (a stranger who guessed the
    /// job id, or a Hello altered on the way): refused before anything is kept or sent.
    pub unproven_hellos: u64,
    /// Hellos on a link this rank does not share with the rank they claim.
    pub unshared_paths: u64,
    /// Repeats of a Hello whose connection is gone (ignored: a repeat never opens a second
    /// connection).
    pub stale_hellos: u64,
    /// Datagrams longer than the receive buffer (cut by the socket, so unreadable).
    pub truncated: u64,
}

impl DatagramRefusals {
    /// Counts one datagram the router dropped for `reason`.
    #[cold]
    pub(super) fn count(&mut self, reason: DropReason) {
        let counter = match reason {
            DropReason::NoDestination => &mut self.undecodable,
            DropReason::UnknownShortId => &mut self.unknown_short_id,
            DropReason::UnknownId => &mut self.unknown_id,
            DropReason::MalformedHello => &mut self.malformed_hellos,
            DropReason::UnsharedPath => &mut self.unshared_paths,
        };
        *counter += 1;
    }

    /// The sum of every counter.
    pub fn total(&self) -> u64 {
        self.undecodable
            + self.unknown_short_id
            + self.unknown_id
            + self.resets_sent
            + self.malformed_hellos
            + self.refused_hellos
            + self.unproven_hellos
            + self.unshared_paths
            + self.stale_hellos
            + self.truncated
    }
}

impl DatagramStats {
    pub(super) fn add(&mut self, s: &quiver_proto::reliable::ReliableStats) {
        self.datagrams_sent += s.datagrams_sent;
        self.datagrams_received += s.datagrams_received;
        self.retransmits += s.retransmits;
        self.fast_retransmits += s.fast_retransmits;
        self.timeouts += s.rto_expirations;
        self.duplicates_dropped += s.duplicates_dropped;
        self.spurious_retransmits += s.spurious_retransmits;
        self.frames_recut += s.frames_recut;
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
    /// The link's io_uring counters (a udp link driven by io_uring, `QUIVER_UDP_IO`; None
    /// otherwise, and where io_uring was refused and the link fell back to sockets).
    pub uring: Option<UringStats>,
    /// GSO sends the kernel's offload refused on this udp link's sockets (`EIO`, `EINVAL`:
    /// a route through IPsec, a device that cannot segment or checksum UDP): each turned GSO
    /// off on its socket for good, the datagrams going one by one (docs/decisions/0065 and
    /// 0081).
    pub gso_refusals: u64,
    /// Sends refused on this udp link because their datagrams no longer fit the path's MTU
    /// (it fell mid-connection): each lowered its connection's datagram size instead.
    pub mtu_refusals: u64,
    /// Times a connection's datagram size on this link was lowered to what its path
    /// carries.
    pub datagram_size_lowered: u64,
    /// The smallest datagram size (bytes, header included) of the connections on this link
    /// now (0: none); a gauge.
    pub max_datagram_bytes: u64,
}
