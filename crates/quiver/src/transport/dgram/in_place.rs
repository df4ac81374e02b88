//! Sends in place on a datagram connection: a blocking send lends the caller's buffer to
//! the protocol core and adopts (copies) only what is still unacknowledged when it
//! returns; a posted send lends its buffer until every byte is acknowledged. Also when a
//! blocking send in place pays ([`DgramShared::in_place_pays`]).
//!
//! Layer: the datagram transport's face to the endpoint for large sends. The lending
//! itself is the protocol core's; the flush reads lent bytes through `connection::lender`.

use std::time::{Duration, Instant};

use quiver_proto::reliable::State;

use super::connection::{Posted, Status};
use super::engine::DgramShared;
use super::messages::start_message;
use super::receive::RECV_BUDGET_BYTES;
use crate::transport::failure::Failure;
use crate::transport::local::LocalRank;
use crate::transport::wire_tag::WireTag;

/// Progress of a message sent in place ([`DgramShared::send_in_place`]).
#[derive(Debug, Default)]
pub(crate) struct InPlace {
    /// The message was started (its length is in the send window).
    started: bool,
    /// Bytes of it lent so far.
    lent: usize,
    /// When the last byte was lent: the adoption of the tail starts.
    all_lent_at: Option<Instant>,
}

/// Bytes of a message sent in place that one round of its send adopts (copies into the
/// send window) while it waits for their acknowledgement, the highest first: the copy
/// from the top and the acknowledgements from the bottom meet in between. Measured with
/// 1 MiB sends over loopback, paired against copying in one run: steps of 0 to 64 KiB
/// were 6-13% faster than copying and about equal among themselves (0 copies least but
/// waits longest); adopting all at once after sending was slower than copying.
const ADOPT_STEP_BYTES: usize = 8 << 10;
/// How long after its last byte was lent a send in place waits for acknowledgements
/// before it adopts all that is left.
const TAIL_WAIT: Duration = Duration::from_micros(500);

impl DgramShared {
    /// Sends `data` as the next message of connection `id` (tagged `tag`) from the
    /// caller's buffer, in place: its bytes are lent to the protocol (`ReliableConnection::lend_message`)
    /// instead of copied into the send window, and datagrams carry them straight from
    /// `data` (checksum and gathered send). Each call polls the sockets (acks), lends what
    /// the window has room for, and sends what the protocol lets go. Once all of `data` is
    /// lent, what is not yet acknowledged is adopted (copied into the send window), the
    /// highest bytes first, [`ADOPT_STEP_BYTES`] per call while acks keep arriving, all of
    /// it after [`TAIL_WAIT`]: the sooner the call returns the fewer bytes are
    /// acknowledged meanwhile (see [`ADOPT_STEP_BYTES`]).
    ///
    /// True once the caller may reuse `data` (no byte of it is lent any more); on false
    /// the caller waits a step and calls again with the same `data` and `progress`. A
    /// caller that gives up before (an error, a timeout) must call
    /// [`DgramShared::end_in_place`].
    pub(crate) fn send_in_place(
        &self,
        ctx: &LocalRank,
        (id, tag): (u64, WireTag),
        data: &[u8],
        progress: &mut InPlace,
    ) -> std::result::Result<bool, Failure> {
        let mut engine = self.lock();
        let kind = self.kind;
        let entry = engine.open_entry(kind, id)?;
        // The first call starts the message and sends; every other polls first:
        // acknowledgements free room and release lent bytes.
        let fresh =
            !progress.started && start_message(&mut entry.core, data.len() as u64, tag).is_ok();
        if fresh {
            progress.started = true;
        } else {
            engine.poll_into(
                Some(ctx),
                self,
                &mut None,
                RECV_BUDGET_BYTES,
                Some((id, data)),
            );
            if !progress.started {
                return Ok(false);
            }
        }
        let entry = engine.live_entry(kind, id)?;
        let mut lent_now = 0;
        while progress.lent < data.len() {
            let count = entry.core.lend_message(data.len() - progress.lent);
            if count == 0 {
                break;
            }
            progress.lent += count;
            lent_now += count as u64;
        }
        engine.sent_in_place_bytes += lent_now;
        engine.flush_lent(id, data);
        if progress.lent == data.len() && progress.all_lent_at.is_none() {
            progress.all_lent_at = Some(Instant::now());
        }
        let entry = engine.live_entry(kind, id)?;
        let Some(all_lent_at) = progress.all_lent_at else {
            return Ok(false);
        };
        if entry.core.lent_bytes() == 0 {
            return Ok(true);
        }
        let step = if all_lent_at.elapsed() >= TAIL_WAIT {
            usize::MAX
        } else {
            ADOPT_STEP_BYTES
        };
        // Invariant: `data` is the message lent (its length checked by the core).
        let adopted = entry.core.adopt_lent(data, step).unwrap_or(0);
        engine.adopted_bytes += adopted as u64;
        let entry = engine.router.get(id).expect("looked up above");
        Ok(entry.core.lent_bytes() == 0)
    }

    /// Whether a message of `len` bytes should be sent in place on connection `id`: only
    /// on a connection of one path, and only when the message is at least
    /// `Config::udp_send_in_place_bdp_multiple` times the connection's measured
    /// bandwidth-delay product (over its paths, delivery rate times minimum RTT); always
    /// when that multiple is 0. What is unacknowledged when the send ends (about a
    /// bandwidth-delay product) is copied anyway, and the send waits a little for
    /// acknowledgements first: on a link that is slow or far compared to the message, that
    /// wait empties the pipe between messages, where a copy lets the next message follow at
    /// once. False before the first measurements (unless the multiple is 0).
    pub(crate) fn in_place_pays(&self, id: u64, len: usize) -> bool {
        let engine = self.lock();
        let Some(entry) = engine.router.get(id) else {
            return false;
        };
        let core = &entry.core;
        if engine.in_place_bdp_multiple == 0 {
            return true;
        }
        if core.path_count() > 1 {
            // Striped: the links are the limit, not the sender's copy, and the wait for the
            // tail idled them (8 x 1 Gbit/s: 0.63-0.77 of tcp in place, 0.91 copied).
            return false;
        }
        // Each path's rate times its minimum RTT: the smoothed RTT includes the queue the
        // sender itself builds (about 1 ms on loopback with 8 MiB windows).
        let (mut rate, mut bdp) = (0u64, 0u128);
        for stats in (0..core.path_count()).filter_map(|path| core.path_stats(path)) {
            rate = rate.saturating_add(stats.delivery_rate_bytes_per_second);
            bdp += u128::from(stats.delivery_rate_bytes_per_second) * u128::from(stats.min_rtt_ns)
                / 1_000_000_000;
        }
        rate > 0 && bdp > 0 && len as u128 >= u128::from(engine.in_place_bdp_multiple) * bdp
    }

    /// Ends a send in place that [`DgramShared::send_in_place`] did not finish (the caller
    /// gives up): what is still lent of `data` is adopted, so that the connection no longer
    /// needs it. The message itself stays on its way (its rest, if any, is never written:
    /// the caller's error ends the connection's use for sending, as for a partial write).
    pub(crate) fn end_in_place(&self, id: u64, data: &[u8]) {
        let mut engine = self.lock();
        if let Some(entry) = engine.router.get_mut(id) {
            let adopted = entry.core.adopt_lent(data, usize::MAX).unwrap_or(0);
            engine.adopted_bytes += adopted as u64;
        }
    }

    /// Starts `data` as the next message of connection `id` (tagged `tag`), posted in
    /// place under `token`
    /// (the caller's name for the request): the engine keeps the buffer and lends it to the
    /// protocol (`ReliableConnection::lend_message_as`), all of it or, for a message larger
    /// than the send window, in parts as acknowledgements free room (every flush of the
    /// connection lends more); frames and retransmissions read it in place. It comes back
    /// from [`DgramShared::collect_posted`] once the protocol released it. `Ok(Some(data))`:
    /// not started now (the previous message is not all taken, or the window lacks room for
    /// its header), try again later.
    pub(crate) fn post_in_place(
        &self,
        id: u64,
        token: u64,
        tag: WireTag,
        data: Vec<u8>,
    ) -> std::result::Result<Option<Vec<u8>>, Failure> {
        let mut engine = self.lock();
        let kind = self.kind;
        let entry = engine.open_entry(kind, id)?;
        if entry
            .posted
            .back()
            .is_some_and(|last| last.lent < last.data.len())
            || start_message(&mut entry.core, data.len() as u64, tag).is_err()
        {
            return Ok(Some(data));
        }
        entry.posted.push_back(Posted {
            token,
            data,
            lent: 0,
        });
        // Flushing lends what fits and sends it.
        engine.flush(id);
        Ok(None)
    }

    /// Hands back the buffers of connection `id`'s posted messages that the protocol
    /// released, into `done` as (token, buffer, delivered): delivered is false when the
    /// connection failed (the core then releases every message, acknowledged or not).
    pub(crate) fn collect_posted(&self, id: u64, done: &mut Vec<(u64, Vec<u8>, bool)>) {
        let mut engine = self.lock();
        let Some(entry) = engine.router.get_mut(id) else {
            return;
        };
        let failed =
            entry.core.state() == State::Failed || matches!(entry.status, Status::Failed(_));
        while let Some(token) = entry.core.poll_released() {
            if let Some(index) = entry.posted.iter().position(|p| p.token == token) {
                if let Some(posted) = entry.posted.remove(index) {
                    done.push((token, posted.data, !failed));
                }
            }
        }
    }
}
