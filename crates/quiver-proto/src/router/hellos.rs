//! The Hellos a router has answered: which connection each one opened.
//!
//! Layer: sans-IO, inside [`crate::router`]. It owns the map from (the rank a Hello claims,
//! the initiator's connection id) to the connection the Hello opened here, so that a
//! retransmitted Hello, on any link, reaches that connection instead of opening another.
//! It does no I/O, reads no clock (the time is the caller's) and holds no randomness (a
//! `BTreeMap`: no hasher keys, and no worst case a peer could pick).
//!
//! Bounds and expiry: only Hellos that proved the job key get here (the router verifies
//! `mac_h` first), one entry per accepted Hello (rejected ones included: they were
//! answered). An entry lives [`HELLO_LIFETIME_NS`] (far longer than an initiator repeats
//! its Hello), and the table holds at most [`HELLO_CAPACITY`] entries: a new one past that
//! pushes out the oldest. A repeat of a Hello whose entry is gone opens a second
//! connection, which never completes (the initiator has moved on) and times out.

use std::collections::{BTreeMap, VecDeque};

use crate::reliable::Nanos;

/// Most Hellos a router remembers at once.
pub const HELLO_CAPACITY: usize = 4096;
/// How long a router remembers a Hello it answered, in nanoseconds (60 s).
pub const HELLO_LIFETIME_NS: Nanos = 60_000_000_000;

/// The Hellos answered lately (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct HelloTable {
    /// (rank, initiator id) to (the connection opened, when).
    opened: BTreeMap<(u32, u64), (u64, Nanos)>,
    /// The same entries in the order they were recorded, oldest first.
    order: VecDeque<(Nanos, (u32, u64))>,
    /// Entries that left before their time because the table was full.
    evicted: u64,
}

impl HelloTable {
    /// The connection the Hello from `rank` with initiator id `their_id` opened, if it was
    /// answered within the lifetime before `now`.
    pub(super) fn get(&mut self, now: Nanos, rank: u32, their_id: u64) -> Option<u64> {
        self.expire(now);
        self.opened.get(&(rank, their_id)).map(|&(id, _)| id)
    }

    /// Records that the Hello from `rank` with initiator id `their_id` opened connection
    /// `id` at `now`, forgetting expired entries and, when full, the oldest.
    pub(super) fn insert(&mut self, now: Nanos, rank: u32, their_id: u64, id: u64) {
        self.expire(now);
        while self.opened.len() >= HELLO_CAPACITY {
            let Some((_, key)) = self.order.pop_front() else {
                break;
            };
            if self.opened.remove(&key).is_some() {
                self.evicted += 1;
            }
        }
        if let Some((_, at)) = self.opened.insert((rank, their_id), (id, now)) {
            // Re-recorded (a Hello whose connection was refused and is asked again): drop
            // the old place in the order.
            self.order
                .retain(|&(time, key)| !(time == at && key == (rank, their_id)));
        }
        self.order.push_back((now, (rank, their_id)));
    }

    /// Number of Hellos recorded.
    pub(super) fn len(&self) -> usize {
        self.opened.len()
    }

    /// Number of entries pushed out by newer ones before their lifetime ended.
    pub(super) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Forgets the entries recorded [`HELLO_LIFETIME_NS`] or longer before `now`.
    fn expire(&mut self, now: Nanos) {
        while let Some(&(at, key)) = self.order.front() {
            if now.saturating_sub(at) < HELLO_LIFETIME_NS {
                break;
            }
            self.order.pop_front();
            if self
                .opened
                .get(&key)
                .is_some_and(|&(_, recorded)| recorded == at)
            {
                self.opened.remove(&key);
            }
        }
    }
}
