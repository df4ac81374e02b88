//! The send state's lends (the `send.rs` module docs, "Lent bytes"): lending the open
//! message's bytes, ending lends once their bytes are acknowledged, adopting what is left,
//! and finding the lend that holds a stream offset.
//!
//! Layer: sans-IO, inside the send state (`send.rs`, whose fields it works on); no clock.

use super::{Lend, SendState, LEND_MESSAGE_TOKEN, MESSAGE_HEADER_LEN};

impl SendState {
    /// Lends as much of the open message's next `len` bytes as fits the message and the
    /// ring, without copying, under `token` (module docs); returns the count. Nothing (0)
    /// when bytes of the message were written after lent ones, when its lend is another
    /// token's, or when a new lend would exceed the count of lends held (one contiguous lend
    /// per message).
    pub(in crate::reliable) fn lend(&mut self, token: u64, len: u64) -> u64 {
        let base = self.message_base();
        if self.lend_ended_base == Some(base) {
            return 0;
        }
        let extend = match self.lends.back() {
            Some(last) if last.base == base && self.write_remaining > 0 => {
                if last.token != token || last.end != self.write_offset {
                    return 0;
                }
                true
            }
            _ => false,
        };
        if !extend && self.lends.len() + self.released.len() >= self.max_lends {
            return 0;
        }
        let count = len.min(self.write_remaining).min(self.capacity() as u64);
        if count == 0 {
            return 0;
        }
        let start = self.write_offset;
        self.write_offset += count;
        self.write_remaining -= count;
        let end = self.write_offset;
        match self.lends.back_mut() {
            Some(last) if extend => {
                last.end = end;
                last.limit = end;
            }
            _ => self.lends.push_back(Lend {
                token,
                base,
                start,
                end,
                limit: end,
            }),
        }
        count
    }

    /// Whether lend `index` may still grow: the last one, of the open message, ending where
    /// its written bytes end.
    pub(super) fn growable(&self, index: usize) -> bool {
        index + 1 == self.lends.len()
            && self.write_remaining > 0
            && self.lends[index].end == self.write_offset
            && self.lends[index].base == self.message_base()
            && self.lend_ended_base != Some(self.lends[index].base)
    }

    /// Ends the lends at the front that have no byte left lent and will lend no more.
    pub(super) fn settle_lends(&mut self) {
        while let Some(front) = self.lends.front_mut() {
            if self.acked_offset > front.start {
                front.start = self.acked_offset.min(front.end);
            }
            if front.start < front.end || self.growable(0) {
                break;
            }
            if let Some(lend) = self.lends.pop_front() {
                if lend.token != LEND_MESSAGE_TOKEN {
                    self.released.push_back(lend.token);
                }
            }
        }
    }

    /// Ends every lend (the connection failed: nothing is sent any more).
    pub(in crate::reliable) fn release_all(&mut self) {
        while let Some(lend) = self.lends.pop_front() {
            if lend.token != LEND_MESSAGE_TOKEN {
                self.released.push_back(lend.token);
            }
        }
    }

    /// The token of a lend that ended, oldest first.
    pub(in crate::reliable) fn poll_released(&mut self) -> Option<u64> {
        self.released.pop_front()
    }

    /// Lends not yet ended under other tokens than [`LEND_MESSAGE_TOKEN`].
    pub(in crate::reliable) fn lent_messages(&self) -> usize {
        self.lends
            .iter()
            .filter(|lend| lend.token != LEND_MESSAGE_TOKEN)
            .count()
    }

    /// The lend of [`LEND_MESSAGE_TOKEN`] (the last one when it exists: no message starts
    /// while it has bytes lent).
    pub(super) fn single_lend(&self) -> Option<&Lend> {
        self.lends
            .back()
            .filter(|lend| lend.token == LEND_MESSAGE_TOKEN)
    }

    /// Bytes lent under [`LEND_MESSAGE_TOKEN`] and neither acknowledged nor adopted: while
    /// not 0 the lender must keep its slice and pass it.
    pub(in crate::reliable) fn lent_bytes(&self) -> u64 {
        self.single_lend().map_or(0, |lend| lend.end - lend.start)
    }

    /// Length the slice of the [`LEND_MESSAGE_TOKEN`] lender must have (0 when nothing of
    /// it is lent).
    pub(in crate::reliable) fn lent_slice_len(&self) -> u64 {
        self.single_lend()
            .filter(|lend| lend.start < lend.end)
            .map_or(0, Lend::slice_len)
    }

    /// Copies up to `max_bytes` of the [`LEND_MESSAGE_TOKEN`] lend's unacknowledged bytes
    /// (the highest first) from the lender's `message` (at least [`Self::lent_slice_len`]
    /// long: checked by the caller) into the ring; returns the count. Once none is left the
    /// lend is over.
    pub(in crate::reliable) fn adopt(&mut self, message: &[u8], max_bytes: u64) -> u64 {
        let Some(lend) = self.single_lend().copied() else {
            return 0;
        };
        let count = (lend.end - lend.start).min(max_bytes);
        if count == 0 {
            return 0;
        }
        let from = lend.end - count;
        // Invariant: base <= start <= from < end <= limit, and the caller checked
        // message.len() >= limit - base.
        let start = (from - lend.base) as usize;
        self.ring
            .copy_in(from, &message[start..start + count as usize]);
        let last = self.lends.len() - 1;
        self.lends[last].end = from;
        if from == lend.start && !self.growable(last) {
            self.lends.pop_back();
        }
        count
    }

    /// Index of the lend whose range holds stream offset `offset`.
    pub(super) fn lend_index_at(&self, offset: u64) -> Option<usize> {
        if self.lends.is_empty() {
            // Nothing lent (most connections, every frame): no search of an empty queue.
            return None;
        }
        let index = self.lends.partition_point(|lend| lend.end <= offset);
        self.lends
            .get(index)
            .filter(|lend| lend.start <= offset)
            .map(|_| index)
    }

    /// The token and needed slice length of the lend holding stream offset `offset`.
    pub(in crate::reliable) fn lend_at(&self, offset: u64) -> Option<(u64, u64)> {
        self.lend_index_at(offset)
            .map(|index| (self.lends[index].token, self.lends[index].slice_len()))
    }

    /// The lend (token, needed slice length) whose bytes the next data frame may carry, if
    /// any: the next retransmission's, or, for new data, one starting within a message
    /// header of the next byte to send (conservative: a frame of lent bytes is cut only
    /// after its lender's slice was checked).
    pub(in crate::reliable) fn next_lend_needed(&mut self) -> Option<(u64, u64)> {
        if self.lends.is_empty() {
            return None;
        }
        if self.retransmission_first() {
            let packet_number = *self.retransmit_queue.front()?;
            let frame = self
                .in_flight
                .get((packet_number - self.base_pn) as usize)?;
            return self.lend_at(frame.payload_offset);
        }
        if let Some(offset) = self.next_recut_offset() {
            return self.lend_at(offset);
        }
        let index = self
            .lends
            .partition_point(|lend| lend.end <= self.next_offset);
        self.lends
            .get(index)
            .filter(|lend| lend.start <= self.next_offset + MESSAGE_HEADER_LEN)
            .map(|lend| (lend.token, lend.slice_len()))
    }

    /// Where a frame starting at stream offset `start` must end at the latest so that it
    /// does not straddle a lent range's start or end (`u64::MAX`: anywhere).
    pub(super) fn lent_cut(&self, start: u64) -> u64 {
        if self.lends.is_empty() {
            return u64::MAX;
        }
        let index = self.lends.partition_point(|lend| lend.end <= start);
        match self.lends.get(index) {
            None => u64::MAX,
            Some(lend) if start < lend.start => lend.start,
            Some(lend) => lend.end,
        }
    }
}
