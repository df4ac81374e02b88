//! The Hellos a router has answered: which connection each one opened.
//!
//! Layer: sans-IO, inside [`crate::router`]. It owns the map from (the rank a Hello claims,
//! the initiator's connection id) to the connection the Hello opened here, so that a
//! retransmitted Hello, on any link, reaches that connection instead of opening another.
//! It does no I/O, reads no clock and holds no randomness (a `BTreeMap`: no hasher keys,
//! and no worst case a peer could pick).
//!
//! Bounds and expiry: none, as the engine has always had it. There is one entry per
//! accepted Hello (rejected ones included: they were answered), and an entry stays for the
//! life of the router, after its connection is gone: a late repeat of a Hello is then
//! ignored rather than opening a second connection. The map grows by one entry per
//! connection a member of the job (or anyone who knows the job id: a Hello does not prove
//! the key) opens; a bound and an expiry would change which late repeats open connections
//! and are left to a change of their own.

use std::collections::BTreeMap;

/// The Hellos answered so far (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct HelloTable {
    opened: BTreeMap<(u32, u64), u64>,
}

impl HelloTable {
    /// The connection the Hello from `rank` with initiator id `their_id` opened, if it was
    /// answered before.
    pub(super) fn get(&self, rank: u32, their_id: u64) -> Option<u64> {
        self.opened.get(&(rank, their_id)).copied()
    }

    /// Records that the Hello from `rank` with initiator id `their_id` opened connection
    /// `id`.
    pub(super) fn insert(&mut self, rank: u32, their_id: u64, id: u64) {
        self.opened.insert((rank, their_id), id);
    }

    /// Number of Hellos recorded.
    pub(super) fn len(&self) -> usize {
        self.opened.len()
    }
}
