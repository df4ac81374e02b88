//! Contexts: `quiver_context_from_env`, `_free`, the rank, the size and the listener's
//! counters.

use std::sync::Arc;

use rust_quiver::{Addr, Context};

use crate::boundary::{call, put};
use crate::handles::{Table, QUIVER_MAX_CONTEXTS};
use crate::status::quiver_status;

/// A context: one process's membership of a job (a number, not a pointer; 0 is never a
/// live context). Create it with quiver_context_from_env().
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct quiver_context {
    /// The handle's value (opaque).
    pub id: u64,
}

/// The address of an endpoint: a rank of the job and a port (the endpoint's number in
/// that rank).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct quiver_addr {
    /// The rank (0 .. job size - 1).
    pub rank: u32,
    /// The endpoint's port in that rank.
    pub port: u16,
}

impl From<Addr> for quiver_addr {
    fn from(a: Addr) -> quiver_addr {
        quiver_addr {
            rank: a.rank,
            port: a.port,
        }
    }
}

impl From<quiver_addr> for Addr {
    fn from(a: quiver_addr) -> Addr {
        Addr::new(a.rank, a.port)
    }
}

/// A context's listener counters (quiver_context_stats()). Each counts since the context
/// was created.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct quiver_listener_stats {
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Handshakes refused or failed (strangers, a wrong key or job, broken handshakes).
    pub connections_refused: u64,
    /// Connection attempts for an endpoint of this rank that was not open yet (usual
    /// while a job starts).
    pub connections_not_open: u64,
    /// Of the connections accepted, those over shared memory.
    pub shm_connections_accepted: u64,
    /// Of those, the ones without cross-memory attach (every size through the ring).
    pub shm_without_cross_memory: u64,
    /// Times a listener failed to accept a connection for a reason of its own.
    pub accept_errors: u64,
    /// Handshakes dropped unfinished (too slow, or to make room).
    pub handshakes_dropped: u64,
    /// The most handshakes one listener had in progress at once.
    pub pending_handshakes_peak: u64,
}

/// The open contexts. An endpoint keeps its own reference, so a context freed before its
/// endpoints lives on until the last of them is freed.
pub(crate) static CONTEXTS: Table<Arc<Context>, QUIVER_MAX_CONTEXTS> = Table::new("context");

/// Creates this process's context from whatever launched it (`quiver run`, mpirun or srun
/// through PMIx, or launcher variables with QUIVER_RENDEZVOUS), with the QUIVER_*
/// settings of the environment. Call it once per process. Blocks while the bootstrap
/// exchanges addresses with the other ranks.
///
/// On success `*out` is the new context; free it with quiver_context_free().
///
/// Errors: QUIVER_ERR_CONFIG (the environment describes no job, or a QUIVER_* setting is
/// wrong: the message names it), QUIVER_ERR_IO, QUIVER_ERR_PERMISSION_DENIED,
/// QUIVER_ERR_TRANSPORT_UNAVAILABLE, QUIVER_ERR_INVALID_ARGUMENT (out is NULL).
///
/// Any thread.
#[no_mangle]
pub extern "C" fn quiver_context_from_env(out: *mut quiver_context) -> quiver_status {
    call(|| {
        if out.is_null() {
            return put(out, quiver_context { id: 0 }, "out");
        }
        let ctx = Context::from_env()?;
        let id = CONTEXTS.insert(Arc::new(ctx))?;
        put(out, quiver_context { id }, "out")
    })
}

/// Frees a context handle. The context stops listening for new connections once its
/// last endpoint is freed too (endpoints keep it alive); free the endpoints first to
/// release everything at once. The handle (and every copy) is dead afterwards.
///
/// Errors: QUIVER_ERR_BAD_HANDLE. Any thread (not while another thread uses the handle).
#[no_mangle]
pub extern "C" fn quiver_context_free(ctx: quiver_context) -> quiver_status {
    call(|| {
        drop(CONTEXTS.remove(ctx.id)?);
        Ok(())
    })
}

/// This process's rank in the job, in `*rank`.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_INVALID_ARGUMENT (rank is NULL). Any thread.
#[no_mangle]
pub extern "C" fn quiver_context_rank(ctx: quiver_context, rank: *mut u32) -> quiver_status {
    call(|| put(rank, CONTEXTS.share(ctx.id)?.rank(), "rank"))
}

/// The number of ranks in the job, in `*size`.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_INVALID_ARGUMENT (size is NULL). Any thread.
#[no_mangle]
pub extern "C" fn quiver_context_size(ctx: quiver_context, size: *mut u32) -> quiver_status {
    call(|| put(size, CONTEXTS.share(ctx.id)?.size(), "size"))
}

/// The context's listener counters, in `*out`.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_INVALID_ARGUMENT (out is NULL). Any thread.
#[no_mangle]
pub extern "C" fn quiver_context_stats(
    ctx: quiver_context,
    out: *mut quiver_listener_stats,
) -> quiver_status {
    call(|| {
        let s = CONTEXTS.share(ctx.id)?.stats();
        let stats = quiver_listener_stats {
            connections_accepted: s.connections_accepted,
            connections_refused: s.connections_refused,
            connections_not_open: s.connections_not_open,
            shm_connections_accepted: s.shm_connections_accepted,
            shm_without_cross_memory: s.shm_without_cross_memory,
            accept_errors: s.accept_errors,
            handshakes_dropped: s.handshakes_dropped,
            pending_handshakes_peak: s.pending_handshakes_peak,
        };
        put(out, stats, "out")
    })
}
