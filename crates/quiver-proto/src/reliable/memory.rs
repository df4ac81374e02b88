//! The memory a connection holds, and the bound it never exceeds.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. It owns the accounting of
//! [`ReliableConnection::memory_bytes`] and [`ReliableConfig::memory_bound_bytes`] (the
//! simulator's and the fuzzer's memory invariant), which must change together.

use quiver_wire::frame::{self, SackRange, MAX_ACK_RANGES, SACK_RANGE_LEN};

use super::config::ReliableConfig;
use super::connection::{HandshakeSide, ReliableConnection};
use super::events::Event;
use super::posted::PostedRead;
use super::recv::{self, MAX_POSTED_READERS};
use super::{paths, send};
use crate::handshake::{Initiator, Responder};

/// Memory of a connection that does not depend on the configuration (the Ack scratch
/// buffers included).
pub(super) const FIXED_MEMORY_BYTES: usize = core::mem::size_of::<ReliableConnection>()
    + core::mem::size_of::<Initiator>()
    + core::mem::size_of::<Responder>()
    + 16 * core::mem::size_of::<Event>()
    + MAX_ACK_RANGES * (2 * core::mem::size_of::<SackRange>() + SACK_RANGE_LEN)
    + 2 * MAX_POSTED_READERS
        * (core::mem::size_of::<(u64, u64)>()
            + core::mem::size_of::<recv::Claimed>()
            + core::mem::size_of::<PostedRead>());

impl ReliableConfig {
    /// Upper bound of [`ReliableConnection::memory_bytes`] for a connection with this
    /// configuration (the simulator's and the fuzzer's memory invariant).
    pub fn memory_bound_bytes(&self) -> usize {
        // VecDeque capacities may double past their length bound; count them twice.
        let per_packet = 2
            * (core::mem::size_of::<send::SentFrame>()
                + core::mem::size_of::<u64>()
                + core::mem::size_of::<Option<(u64, u64)>>()
                + core::mem::size_of::<frame::SackRange>()
                + 2 * core::mem::size_of::<(u64, u64)>()
                + send::LEND_ENTRY_BYTES
                + 2 * core::mem::size_of::<super::recut::Recut>()
                + 2 * core::mem::size_of::<(u64, u64)>());
        self.send_buffer_bytes
            + self.recv_window_bytes
            + self.max_in_flight_datagrams.saturating_add(1) * per_packet
            + self.path_count * core::mem::size_of::<paths::Path>()
            + FIXED_MEMORY_BYTES
    }
}

impl ReliableConnection {
    /// Bytes of memory held for this connection (send buffer + receive buffer + tracking).
    /// Never exceeds [`ReliableConfig::memory_bound_bytes`].
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>()
            + match &self.handshake {
                HandshakeSide::Initiator(_) => core::mem::size_of::<Initiator>(),
                HandshakeSide::Responder { .. } => core::mem::size_of::<Responder>(),
                HandshakeSide::Done => 0,
            }
            + self.send.memory_bytes()
            + self.recv.memory_bytes()
            + self.events.capacity() * core::mem::size_of::<Event>()
            + (self.ack_ranges_in.capacity() + self.ack_ranges_out.capacity())
                * core::mem::size_of::<SackRange>()
            + self.ack_payload.capacity()
    }
}
