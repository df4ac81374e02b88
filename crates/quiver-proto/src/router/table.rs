//! The router's connection table: connections by id, and by short id.
//!
//! Layer: sans-IO, inside [`crate::router`]. It owns the map from a connection id to the
//! caller's connection value and the map from a short id (`frame::short_id`, what a Stream
//! frame carries of its destination) to the full id, and keeps the two consistent. It draws
//! ids only from the randomness its caller passes; it does no I/O and reads no clock.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use quiver_wire::frame;

/// Hashes a connection id as itself: ids are drawn at random by the table's owner (so a
/// peer cannot make them collide), and a lookup per datagram then costs no SipHash.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }

    /// A short id (the low 24 bits of an id drawn at random): spread over the whole word
    /// (Fibonacci hashing), as the table takes its control bits from the top ones.
    fn write_u32(&mut self, short: u32) {
        self.0 = u64::from(short).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Connections by id.
type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
/// Connection ids by short id (looked up for every Stream frame: no SipHash either).
type ShortIdMap = HashMap<u32, u64, BuildHasherDefault<IdHasher>>;

/// The connections of one router, by id and by short id.
///
/// Invariant: every short id in the short map names an id of the id map whose short id it
/// is. Ids chosen with [`ConnectionTable::fresh_id`] have short ids unique in the table, so
/// a Stream frame names at most one connection. Iteration order is a pure function of the
/// ids inserted and removed (the hasher has no random state).
#[derive(Debug)]
pub struct ConnectionTable<C> {
    by_id: IdMap<C>,
    by_short: ShortIdMap,
}

impl<C> Default for ConnectionTable<C> {
    fn default() -> Self {
        Self {
            by_id: IdMap::default(),
            by_short: ShortIdMap::default(),
        }
    }
}

impl<C> ConnectionTable<C> {
    /// A new connection id: non-zero, its short id unique among the table's connections.
    /// Draws from `random` until one fits (one draw, but for a collision of 24-bit short
    /// ids).
    pub fn fresh_id(&self, mut random: impl FnMut() -> u64) -> u64 {
        loop {
            let id = random();
            if id != 0 && !self.by_short.contains_key(&frame::short_id(id)) {
                return id;
            }
        }
    }

    /// Whether a connection has short id `short`.
    pub fn contains_short(&self, short: u32) -> bool {
        self.by_short.contains_key(&short)
    }

    /// Whether connection `id` is in the table.
    #[inline]
    pub fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Connection `id`.
    #[inline]
    pub fn get(&self, id: u64) -> Option<&C> {
        self.by_id.get(&id)
    }

    /// Connection `id`, to change.
    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut C> {
        self.by_id.get_mut(&id)
    }

    /// The connection a Stream frame's short id names, with its full id.
    #[inline]
    pub fn get_mut_short(&mut self, short: u32) -> Option<(u64, &mut C)> {
        let id = *self.by_short.get(&short)?;
        self.by_id.get_mut(&id).map(|connection| (id, connection))
    }

    /// Adds connection `id` (an id from [`ConnectionTable::fresh_id`]); the short id now
    /// names it. Returns the connection that had this id before, if any.
    pub fn insert(&mut self, id: u64, connection: C) -> Option<C> {
        self.by_short.insert(frame::short_id(id), id);
        self.by_id.insert(id, connection)
    }

    /// Takes connection `id` out of the table (its short id too, if it still names it).
    pub fn remove(&mut self, id: u64) -> Option<C> {
        let connection = self.by_id.remove(&id)?;
        let short = frame::short_id(id);
        if self.by_short.get(&short) == Some(&id) {
            self.by_short.remove(&short);
        }
        Some(connection)
    }

    /// Number of connections.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The connections.
    pub fn values(&self) -> impl Iterator<Item = &C> {
        self.by_id.values()
    }

    /// The connections with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &C)> {
        self.by_id.iter()
    }

    /// The connections with their ids, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut C)> {
        self.by_id.iter_mut()
    }

    /// Keeps the connections for which `keep` says true; the others leave the table with
    /// their short ids.
    pub fn retain(&mut self, mut keep: impl FnMut(&u64, &mut C) -> bool) {
        let by_short = &mut self.by_short;
        self.by_id.retain(|id, connection| {
            let kept = keep(id, connection);
            if !kept {
                by_short.remove(&frame::short_id(*id));
            }
            kept
        });
    }

    /// Checks the invariant between the two maps (tests and fuzzing).
    pub fn is_consistent(&self) -> bool {
        self.by_short
            .iter()
            .all(|(&short, &id)| frame::short_id(id) == short && self.by_id.contains_key(&id))
    }
}
