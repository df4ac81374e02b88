//! The endpoint's requests as every transport's driver sees them: posted sends and
//! receives ([`SendState`], [`RecvState`]), the receives waiting in posting order, the
//! sends still moving, and the internal copies held (bounded by `max_buffered_bytes`).
//! A driver completes a request by its key; the endpoint hands the result to the caller.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::addr::Addr;
use crate::error::Result;
use crate::pool::Pool;
use crate::slab::{Key, Slab};

/// A completed posted receive: the buffer handed back, how many bytes of it the message
/// filled, and who sent it.
#[derive(Debug)]
pub struct RecvCompletion {
    /// The buffer given to `post_recv` (its length unchanged).
    pub buf: Vec<u8>,
    /// Length of the message at the start of `buf`.
    pub len: usize,
    /// The sender.
    pub src: Addr,
    /// The message's tag (0 for a plain `send`).
    pub tag: u64,
}

/// Where a posted send stands.
#[derive(Debug)]
pub(crate) enum SendState {
    Pending,
    Done(Result<Vec<u8>>),
}

/// Where a posted receive stands.
#[derive(Debug)]
pub(crate) enum RecvState {
    Pending(Vec<u8>),
    /// Matched to a message still arriving; its buffer is held by that edge (a tcp edge's
    /// large message, or the datagram engine) until the message is whole.
    Bound,
    Done(Result<RecvCompletion>),
}

/// The endpoint's requests and the bookkeeping the drivers share (module docs).
#[derive(Debug)]
pub(crate) struct Requests {
    pub(crate) sends: Slab<SendState>,
    pub(crate) recvs: Slab<RecvState>,
    /// Posted receives not yet matched, in posting order.
    pub(crate) posted_recvs: VecDeque<Key>,
    /// Queued or in-flight sends over all connections (0: nothing to progress).
    pub(crate) pending_sends: usize,
    /// Posted receives bound to a large tcp message still arriving
    /// ([`RecvState::Bound`]).
    pub(crate) bound_recvs: usize,
    /// Bytes of internal copies held for sends (bounded by `max_buffered_bytes`).
    pub(crate) buffered_bytes: usize,
    /// The endpoint's receive buffers (pooled receives, internal copies).
    pub(crate) pool: Arc<Pool>,
    /// A pool buffer a look received nothing into, kept for the next look: a polling loop
    /// (`progress` with handlers, `try_recv_pooled`) then takes no lock per empty look.
    scratch: Option<Vec<u8>>,
}

/// The largest buffer kept as the scratch of empty looks (a larger one returns to the pool).
const SCRATCH_MAX_BYTES: usize = 64 * 1024;

impl Requests {
    /// No request yet; internal buffers come from `pool`.
    pub(crate) fn new(pool: Arc<Pool>) -> Requests {
        Requests {
            sends: Slab::new(),
            recvs: Slab::new(),
            posted_recvs: VecDeque::new(),
            pending_sends: 0,
            bound_recvs: 0,
            buffered_bytes: 0,
            pool,
            scratch: None,
        }
    }

    /// An empty buffer to look into: the one the last empty look left, else the pool's.
    pub(crate) fn take_scratch(&mut self) -> Vec<u8> {
        self.scratch.take().unwrap_or_else(|| self.pool.take(0))
    }

    /// Keeps `buf`, which received nothing, for the next look (or returns it to the pool,
    /// which bounds what it caches, when one is kept already or `buf` grew large).
    pub(crate) fn keep_scratch(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if self.scratch.is_none() && buf.capacity() <= SCRATCH_MAX_BYTES {
            self.scratch = Some(buf);
        } else {
            self.pool.give(buf);
        }
    }

    /// Completes posted send `key` (if it still exists) with `result`.
    pub(crate) fn complete_send(&mut self, key: Key, result: Result<Vec<u8>>) {
        if let Some(s) = self.sends.get_mut(key) {
            *s = SendState::Done(result);
        }
    }

    /// Sets posted receive `key` (if it still exists) to `state`.
    pub(crate) fn set_recv(&mut self, key: Key, state: RecvState) {
        if let Some(s) = self.recvs.get_mut(key) {
            *s = state;
        }
    }
}
