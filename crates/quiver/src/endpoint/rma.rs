//! One-sided operations on a connection: `put`, `get`, `flush` and the 64-bit atomics on
//! a peer's registered region, named by its [`RemoteKey`]. Each is checked against the key
//! (bounds, rights, alignment, the key's owner being the connection's peer) here, then
//! handed to the connection's transport through the seam (`OutEdge::rma`).

use quiver_wire::rma::KeyRepr;

use super::{Connection, Endpoint};
use crate::error::{Error, Result};
use crate::rma::key::RemoteKey;
use crate::transport::rma_ops::{self, RmaOp};

impl Endpoint {
    /// Writes `data` into the region `key` names at byte `offset`, without a receive call
    /// of the peer. It is done (the bytes are in the region) when this returns; over shm
    /// the peer's CPU does nothing, over tcp and udp the peer's progress engine applies it
    /// the next time the peer is in a quiver call (docs/rma.md). [`flush`](Self::flush)
    /// orders it before what follows and reports a peer that died.
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`], [`Error::RmaRights`] (a read-only key),
    /// [`Error::RmaKeyRefused`], [`Error::RmaRevoked`], [`Error::InvalidArgument`] for a
    /// connection of another endpoint; the peer's end ([`Error::PeerDead`],
    /// [`Error::PeerClosed`], [`Error::Unreachable`]) and [`Error::Timeout`] over the
    /// network transports.
    pub fn put(
        &mut self,
        conn: Connection,
        data: &[u8],
        key: &RemoteKey,
        offset: u64,
    ) -> Result<()> {
        self.rma(conn, key, RmaOp::Put { data, offset }).map(|_| ())
    }

    /// Writes `data` into the region `key` names at byte `offset`, then sends `message` to
    /// the peer on `conn`: VMMC's deposit with notification. The peer's receive of
    /// `message` happens after the data is visible in its region, on every transport (the
    /// put is done when it returns, and a message sent after it on the same connection
    /// arrives after it; docs/rma.md), so the target learns that the data arrived without
    /// polling its memory.
    ///
    /// # Errors
    /// As [`put`](Self::put) (nothing is sent then), then as [`send`](Self::send).
    pub fn put_notify(
        &mut self,
        conn: Connection,
        data: &[u8],
        key: &RemoteKey,
        offset: u64,
        message: &[u8],
    ) -> Result<()> {
        self.put(conn, data, key, offset)?;
        self.send(conn, message)
    }

    /// Reads the region `key` names at byte `offset` into `buf`.
    ///
    /// # Errors
    /// As [`put`](Self::put), except that a read-only key is enough.
    pub fn get(
        &mut self,
        conn: Connection,
        buf: &mut [u8],
        key: &RemoteKey,
        offset: u64,
    ) -> Result<()> {
        self.rma(conn, key, RmaOp::Get { buf, offset }).map(|_| ())
    }

    /// Makes every earlier put on `conn` visible to the peer before anything this endpoint
    /// does next, and checks that the peer still lives.
    ///
    /// # Errors
    /// [`Error::PeerDead`], [`Error::InvalidArgument`]; as [`put`](Self::put) over the
    /// network transports.
    pub fn flush(&mut self, conn: Connection) -> Result<()> {
        let index = self.outbound_index(conn)?;
        self.outbound[index].rma_flush(&self.local, conn.peer)
    }

    /// Adds `value` (wrapping) to the 64-bit word at `offset` (a multiple of 8) of the
    /// region `key` names; the word before. Atomic with respect to every other quiver
    /// atomic on that word, from any rank or thread.
    ///
    /// # Errors
    /// As [`put`](Self::put), and [`Error::RmaMisaligned`].
    pub fn fetch_add(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        offset: u64,
        value: u64,
    ) -> Result<u64> {
        self.rma(conn, key, RmaOp::FetchAdd { offset, value })
    }

    /// Replaces the word at `offset` with `new` if it holds `expected`; the word before
    /// (equal to `expected` exactly when the swap happened).
    ///
    /// # Errors
    /// As [`fetch_add`](Self::fetch_add).
    pub fn compare_swap(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        let op = RmaOp::CompareSwap {
            offset,
            expected,
            new,
        };
        self.rma(conn, key, op)
    }

    /// Stores `value` in the word at `offset`; the word before.
    ///
    /// # Errors
    /// As [`fetch_add`](Self::fetch_add).
    pub fn swap(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        offset: u64,
        value: u64,
    ) -> Result<u64> {
        self.rma(conn, key, RmaOp::Swap { offset, value })
    }

    /// Checks `op` against `key` and `conn`, then hands it to the connection's transport.
    fn rma(&mut self, conn: Connection, key: &RemoteKey, op: RmaOp<'_>) -> Result<u64> {
        let index = self.outbound_index(conn)?;
        let repr: &KeyRepr = &key.repr;
        if repr.rank != conn.peer.rank {
            let error = Error::RmaKeyRefused {
                rank: repr.rank,
                reason: format!(
                    "the key names a region of rank {}, the connection leads to rank {}",
                    repr.rank, conn.peer.rank
                ),
            };
            return Err(rma_ops::refused(&self.local, error));
        }
        rma_ops::check(&self.local, repr, &op)?;
        self.outbound[index].rma(&self.local, (self.addr, conn.peer), repr, op)
    }
}
