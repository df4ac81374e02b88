//! One-sided operations on a connection: `put`, `get`, `flush` and the 64-bit atomics on
//! a peer's registered region, named by its [`RemoteKey`]. Each is checked against the key
//! (bounds, rights, alignment, the key's owner being the connection's peer) here, then
//! handed to the connection's transport through the seam (`OutEdge::rma`).

use quiver_wire::rma::KeyRepr;

use super::{Connection, Endpoint, RmaCompletion, RmaRequest};
use crate::error::{Error, Result};
use crate::rma::key::RemoteKey;
use crate::transport::edge::Posted;
use crate::transport::rma_ops::{self, PostKind, PostedOp, RmaOp};
use crate::transport::wait::Wait;

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
        self.refuse_in_handler("flush")?;
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

    /// Posts a put of `data` (handed over, and back with the completion) into the region
    /// `key` names at byte `offset`, without waiting: several may be outstanding on one
    /// connection, applied in posting order. Complete it with [`wait_rma`](Self::wait_rma);
    /// [`flush`](Self::flush) waits for every posted operation on the connection. Over shm
    /// it is done at once.
    ///
    /// # Errors
    /// As [`put`](Self::put) for what is checked before anything is sent; the target's
    /// refusals and the peer's end come with the completion.
    pub fn post_put(
        &mut self,
        conn: Connection,
        data: Vec<u8>,
        key: &RemoteKey,
        offset: u64,
    ) -> Result<RmaRequest> {
        let op = PostedOp {
            kind: PostKind::Put,
            offset,
            buf: data,
        };
        self.post_rma(conn, key, op)
    }

    /// Posts a get of `len` bytes from the region `key` names at byte `offset`; the bytes
    /// come with the completion ([`RmaCompletion::data`]).
    ///
    /// # Errors
    /// As [`post_put`](Self::post_put), except that a read-only key is enough.
    pub fn post_get(
        &mut self,
        conn: Connection,
        len: usize,
        key: &RemoteKey,
        offset: u64,
    ) -> Result<RmaRequest> {
        let op = PostedOp {
            kind: PostKind::Get,
            offset,
            buf: vec![0; len],
        };
        self.post_rma(conn, key, op)
    }

    /// Posts a fetch-and-add of `value` on the word at `offset`; the word before comes
    /// with the completion ([`RmaCompletion::value`]).
    ///
    /// # Errors
    /// As [`post_put`](Self::post_put), and [`Error::RmaMisaligned`].
    pub fn post_fetch_add(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        offset: u64,
        value: u64,
    ) -> Result<RmaRequest> {
        let op = PostedOp {
            kind: PostKind::FetchAdd(value),
            offset,
            buf: Vec::new(),
        };
        self.post_rma(conn, key, op)
    }

    /// Posts a compare-and-swap of the word at `offset` (`new` if it holds `expected`); the
    /// word before comes with the completion.
    ///
    /// # Errors
    /// As [`post_fetch_add`](Self::post_fetch_add).
    pub fn post_compare_swap(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        offset: u64,
        (expected, new): (u64, u64),
    ) -> Result<RmaRequest> {
        let op = PostedOp {
            kind: PostKind::CompareSwap(expected, new),
            offset,
            buf: Vec::new(),
        };
        self.post_rma(conn, key, op)
    }

    /// Posts a swap of the word at `offset` for `value`; the word before comes with the
    /// completion.
    ///
    /// # Errors
    /// As [`post_fetch_add`](Self::post_fetch_add).
    pub fn post_swap(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        offset: u64,
        value: u64,
    ) -> Result<RmaRequest> {
        let op = PostedOp {
            kind: PostKind::Swap(value),
            offset,
            buf: Vec::new(),
        };
        self.post_rma(conn, key, op)
    }

    /// Whether posted operation `req` is complete (moving posted operations on first).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a request of another endpoint.
    pub fn test_rma(&mut self, req: &RmaRequest) -> Result<bool> {
        self.refuse_in_handler("test_rma")?;
        self.progress()?;
        let outbound = &mut self.outbound;
        self.rma_posted
            .test(req.id, |index, seq| outbound[index].rma_take(seq))
    }

    /// Waits until posted operation `req` is complete: its word (an atomic) and bytes (a
    /// get's; a put's data back).
    ///
    /// # Errors
    /// The operation's: the target's refusals, the peer's end, [`Error::Timeout`].
    pub fn wait_rma(&mut self, req: RmaRequest) -> Result<RmaCompletion> {
        self.refuse_in_handler("wait_rma")?;
        let mut wait = Wait::new(&self.config);
        loop {
            let outbound = &mut self.outbound;
            let polled = self
                .rma_posted
                .poll(req.id, |index, seq| outbound[index].rma_take(seq))?;
            if let Some(outcome) = polled {
                let (value, data) = outcome?;
                return Ok(RmaCompletion { value, data });
            }
            self.progress()?;
            self.idle(&mut wait, "waiting for a posted one-sided operation")?;
        }
    }

    /// Moves every posted one-sided operation on, never waiting (from `progress`).
    pub(super) fn progress_rma(&mut self) {
        if !self.rma_posted.any_pending() {
            return;
        }
        for out in &mut self.outbound {
            out.rma_progress(&self.local, self.addr);
        }
    }

    /// Checks posted operation `op` against `key` and `conn`, then posts it on the
    /// connection's transport.
    fn post_rma(
        &mut self,
        conn: Connection,
        key: &RemoteKey,
        mut op: PostedOp,
    ) -> Result<RmaRequest> {
        let index = self.outbound_index(conn)?;
        self.check_key(conn, key, &op.as_op())?;
        let posted =
            self.outbound[index].rma_post(&self.local, (self.addr, conn.peer), &key.repr, op)?;
        let id = match posted {
            Posted::Done(outcome) => self.rma_posted.done(outcome),
            Posted::Pending(seq) => self.rma_posted.pending(index, seq),
        };
        Ok(RmaRequest { id })
    }

    /// Checks `op` against `key` and `conn` (module docs), counting a refusal.
    fn check_key(&self, conn: Connection, key: &RemoteKey, op: &RmaOp<'_>) -> Result<()> {
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
        rma_ops::check(&self.local, repr, op)
    }

    /// Checks `op` against `key` and `conn`, then hands it to the connection's transport.
    fn rma(&mut self, conn: Connection, key: &RemoteKey, op: RmaOp<'_>) -> Result<u64> {
        self.refuse_in_handler("a blocking one-sided operation")?;
        let index = self.outbound_index(conn)?;
        self.check_key(conn, key, &op)?;
        self.outbound[index].rma(&self.local, (self.addr, conn.peer), &key.repr, op)
    }
}
