//! A connection's counters.
//!
//! Layer: sans-IO, inside [`crate::reliable`]: plain data, no logic.

/// Counters of a connection. All counts since creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReliableStats {
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Datagrams passed to `handle_datagram`.
    pub datagrams_received: u64,
    /// Data frames sent for the first time.
    pub data_frames_sent: u64,
    /// Payload bytes sent for the first time.
    pub payload_bytes_sent: u64,
    /// Data/Close frames sent again.
    pub retransmits: u64,
    /// Frames declared lost by duplicate acks or SACK (fast retransmit).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub rto_expirations: u64,
    /// Handshake messages sent again.
    pub handshake_retransmits: u64,
    /// Standalone Ack frames sent.
    pub acks_sent: u64,
    /// Ping frames sent (keepalive and credit probes).
    pub pings_sent: u64,
    /// Frames received twice, or replayed (dropped before anything in them is acted on):
    /// data frames already received, plain Acks not numbered above the last taken, Pings
    /// not counted above the last of their path (decision 0067).
    pub duplicates_dropped: u64,
    /// Of those, data frames (Data, Close, compact Stream) whose first copy had arrived: a
    /// retransmission the peer did not need (a timeout that fired while this side was off
    /// its CPU or slow to acknowledge, an ack that was lost). Counted here, at the
    /// receiver, where it is certain; a path that duplicates datagrams counts here too.
    pub spurious_retransmits: u64,
    /// Datagrams that are not valid frames (dropped): a tag that does not verify (corrupted,
    /// forged, or under another key: decision 0067), truncated, malformed.
    pub corrupt_dropped: u64,
    /// Frames whose bytes exceed the credit we gave (dropped; the peer broke the rules).
    pub credit_violations: u64,
    /// Frames too far ahead of the cumulative ack, or inconsistent with received data.
    pub out_of_window_dropped: u64,
    /// Valid frames that do not fit the connection's ids or state (dropped).
    pub unexpected_dropped: u64,
    /// Handshakes that failed (wrong key, wrong job, refused, timed out).
    pub handshake_failures: u64,
    /// Smoothed RTT in ns (0 before the first sample).
    pub smoothed_rtt_ns: u64,
    /// RTT variance in ns.
    pub rtt_variance_ns: u64,
    /// Current retransmission timeout in ns, backoff included.
    pub rto_ns: u64,
    /// Bytes in the send buffer (written, not yet acknowledged).
    pub send_buffered_bytes: u64,
    /// Bytes received in order and not yet read.
    pub recv_buffered_bytes: u64,
    /// Times a path went down (its frames moved to the other paths).
    pub paths_down: u64,
    /// Frames declared lost that no longer fit the datagram size (it was lowered after
    /// they were sent): each was resent shortened, the rest of its bytes in new frames.
    pub frames_recut: u64,
    /// Times a path that was down came back.
    pub paths_rejoined: u64,
    /// Payload bytes `ReliableConnection::`[`handle_datagram_into`] placed straight into the
    /// reader's buffer (not through the receive buffer), in order or ahead.
    ///
    /// [`handle_datagram_into`]: crate::reliable::ReliableConnection::handle_datagram_into
    pub direct_read_bytes: u64,
    /// Of those, payload bytes a scattering receive had put there before the frame was
    /// checked (`ReliableConnection::`[`handle_stream_in_place`]): not copied at all.
    ///
    /// [`handle_stream_in_place`]: crate::reliable::ReliableConnection::handle_stream_in_place
    pub scattered_bytes: u64,
}
