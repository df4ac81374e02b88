//! The table of one endpoint's posted operations (`quiver_request` handles and what they
//! name: the Rust request and, for a receive, the caller's memory it completes into).
//! Below `endpoint.rs` (which holds a table per endpoint) and `posted.rs` (the C
//! functions).

use std::collections::HashMap;

use rust_quiver::{Addr, RecvRequest, SendRequest};

/// A posted operation of one endpoint (a number, valid only with that endpoint, until the
/// operation completes or is cancelled; 0 is never a live request).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct quiver_request {
    /// The handle's value (opaque).
    pub id: u64,
}

/// The caller's memory a posted receive completes into.
pub(crate) struct CallerBytes {
    pub(crate) data: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the pointer is only dereferenced by the thread that holds the endpoint's slot
// (one at a time, handed over with Acquire/Release by the handle table), under the
// caller's promise, made when posting, that the memory stays valid and untouched by
// anyone else until the operation completes or is cancelled.
unsafe impl Send for CallerBytes {}

impl CallerBytes {
    /// The caller's bytes, for the call that completes the receive.
    ///
    /// # Safety
    /// The caller's promise made at posting (quiver_post_recv_into's contract): `len`
    /// writable bytes at `data`, valid and not accessed by anyone else until the receive
    /// completes or is cancelled; called at most once per receive, by the call that ends
    /// it.
    pub(crate) unsafe fn slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: non-NULL when len > 0 (checked at posting); the rest is this function's
        // contract, which its callers (posted.rs) keep.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

/// One posted operation.
pub(crate) enum Op {
    Send {
        request: SendRequest,
        peer: Addr,
        tag: u64,
        len: usize,
    },
    Recv {
        request: RecvRequest,
        into: CallerBytes,
    },
}

/// The posted operations of one endpoint, by number.
#[derive(Default)]
pub(crate) struct PostedOps {
    pub(crate) ops: HashMap<u32, Op>,
    next: u32,
}

impl PostedOps {
    /// Keeps `op` under a fresh number (never 0, never a live one).
    pub(crate) fn insert(&mut self, op: Op) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1);
            if self.next != 0 && !self.ops.contains_key(&self.next) {
                break;
            }
        }
        self.ops.insert(self.next, op);
        self.next
    }
}
