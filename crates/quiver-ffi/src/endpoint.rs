//! Endpoints: open, free, address, descriptor and readiness, timeout, progress; and the
//! endpoint table every message call goes through ([`with_endpoint`]).

use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_quiver::{Connection, Context, Endpoint, Error};

use crate::boundary::{call, internal, put};
use crate::context::{quiver_addr, quiver_context, CONTEXTS};
use crate::handles::{Table, QUIVER_MAX_ENDPOINTS};
use crate::requests::PostedOps;
use crate::status::{failure, quiver_status, record, Failure};

/// An endpoint (a number, not a pointer; 0 is never a live endpoint). Open it with
/// quiver_endpoint_open().
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct quiver_endpoint {
    /// The handle's value (opaque).
    pub id: u64,
}

/// A connection of one endpoint (a number, valid only with the endpoint that returned it;
/// 0 is never a live connection).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct quiver_conn {
    /// The handle's value (opaque).
    pub id: u64,
}

/// What an endpoint handle names.
pub(crate) struct EndpointState {
    pub(crate) endpoint: Endpoint,
    /// The connections handed out, by `quiver_conn.id`'s low half minus one.
    connections: Vec<Connection>,
    /// This endpoint's number among all opened in the process: the high half of its
    /// connection and request handles, so another endpoint's are refused.
    pub(crate) serial: u32,
    /// The operations posted on the caller's memory (`posted.rs`), by number.
    pub(crate) posted: PostedOps,
    /// Why the endpoint refuses calls: a panic inside it left it in an unknown state.
    broken: Option<String>,
    /// Declared last: dropped after the endpoint (keeps the context's listeners running
    /// while the endpoint lives).
    _context: Arc<Context>,
}

impl EndpointState {
    /// The handle of `conn`, handing out a new one the first time.
    pub(crate) fn handle_of(&mut self, conn: Connection) -> quiver_conn {
        let index = match self.connections.iter().position(|c| *c == conn) {
            Some(index) => index,
            None => {
                self.connections.push(conn);
                self.connections.len() - 1
            }
        };
        quiver_conn {
            id: u64::from(self.serial) << 32 | (index as u64 + 1),
        }
    }

    /// The connection `conn` names.
    ///
    /// # Errors
    /// `QUIVER_ERR_BAD_HANDLE` for 0, a made-up number or another endpoint's connection.
    #[inline]
    pub(crate) fn connection(&self, conn: quiver_conn) -> Result<Connection, Failure> {
        self.known_connection(conn)
            .ok_or_else(|| self.not_a_connection(conn))
    }

    /// The connection `conn` names, if it names one of this endpoint's.
    #[inline]
    pub(crate) fn known_connection(&self, conn: quiver_conn) -> Option<Connection> {
        let index = (conn.id as u32 as usize).wrapping_sub(1);
        match self.connections.get(index) {
            Some(c) if conn.id >> 32 == u64::from(self.serial) => Some(*c),
            _ => None,
        }
    }

    #[cold]
    #[inline(never)]
    fn not_a_connection(&self, conn: quiver_conn) -> Failure {
        failure(
            quiver_status::QUIVER_ERR_BAD_HANDLE,
            format!(
                "{:#x} is not a connection of endpoint {} (zero, made up, or another \
                 endpoint's)",
                conn.id,
                self.endpoint.addr()
            ),
        )
    }
}

#[cold]
#[inline(never)]
fn broken(why: &str) -> Failure {
    failure(
        quiver_status::QUIVER_ERR_INTERNAL,
        format!("this endpoint failed internally earlier ({why}); free it"),
    )
}

static ENDPOINTS: Table<EndpointState, QUIVER_MAX_ENDPOINTS> = Table::leased("endpoint");
static NEXT_SERIAL: AtomicU32 = AtomicU32::new(1);

/// Runs `f` on the endpoint `ep` names, holding its slot for the call. A panic inside
/// marks the endpoint broken: every later call but quiver_endpoint_free fails with
/// `QUIVER_ERR_INTERNAL`.
#[inline]
pub(crate) fn with_endpoint<R>(
    ep: quiver_endpoint,
    f: impl FnOnce(&mut EndpointState) -> Result<R, Failure>,
) -> Result<R, Failure> {
    let mut taken = ENDPOINTS.take(ep.id)?;
    let state = taken.value();
    if let Some(why) = &state.broken {
        return Err(broken(why));
    }
    match catch_unwind(AssertUnwindSafe(|| f(state))) {
        Ok(result) => result,
        Err(panic) => Err(panicked(state, &*panic)),
    }
}

/// The failure a panic inside a call on `state` becomes; the endpoint is broken from then
/// on.
#[cold]
#[inline(never)]
fn panicked(state: &mut EndpointState, panic: &(dyn std::any::Any + Send)) -> Failure {
    let failure = internal(panic);
    if let Failure::Boundary(_, why) = &failure {
        state.broken = Some(why.clone());
    }
    failure
}

/// The code of the Rust API's `result`, an error's message recorded: what a message
/// call's fast path returns, so that only the code crosses out of it (as in `call`).
#[inline(always)]
pub(crate) fn code(result: Result<(), Error>) -> quiver_status {
    match result {
        Ok(()) => quiver_status::QUIVER_OK,
        Err(e) => record_error(e),
    }
}

/// The code of the Rust API's error `e`, its message recorded; out of line, off the path of
/// the calls that succeed.
#[inline(never)]
fn record_error(e: Error) -> quiver_status {
    record(Failure::Api(e))
}

/// Runs a message call: `run` when this thread leases the endpoint (the common case of an
/// endpoint driven by one thread) and `prepare` finds the call's arguments good,
/// `general` through [`call`] and [`with_endpoint`] otherwise.
///
/// `prepare` returns what `run` needs, or None when an argument is not one the fast path
/// takes (a connection of another endpoint, say): `general` then checks everything again
/// and says what is wrong. `run` returns the call's code (see [`code`]). The fast path
/// builds no failure before it knows there is one, decides on the general path before
/// the Rust call (so nothing of it stays live across that call), and turns the call's
/// result into a code at once: a checked call stays close to the bare call's cost
/// (decision 0106).
#[inline(always)]
pub(crate) fn message_call<A>(
    ep: quiver_endpoint,
    prepare: impl FnOnce(&EndpointState) -> Option<A>,
    run: impl FnOnce(&mut EndpointState, A) -> quiver_status,
    general: impl FnOnce() -> Result<(), Failure>,
) -> quiver_status {
    let prepared = ENDPOINTS.take_own_lease(ep.id).and_then(|mut taken| {
        let state = taken.value();
        let args = if state.broken.is_none() {
            prepare(state)
        } else {
            None
        }?;
        Some((taken, args))
    });
    let Some((mut taken, args)) = prepared else {
        return checked(general);
    };
    let state = taken.value();
    match catch_unwind(AssertUnwindSafe(|| run(state, args))) {
        Ok(code) => code,
        Err(panic) => record(panicked(state, &*panic)),
    }
}

/// [`call`] out of line: the message calls' general path, kept off their fast path's
/// registers.
#[inline(never)]
fn checked(general: impl FnOnce() -> Result<(), Failure>) -> quiver_status {
    call(general)
}

/// Opens endpoint `port` of this rank; peers reach it at (this rank, port). On success
/// `*out` is the new endpoint; free it with quiver_endpoint_free(). The endpoint keeps its
/// context alive.
///
/// Errors: QUIVER_ERR_BAD_HANDLE (ctx), QUIVER_ERR_INVALID_ARGUMENT (the port is open
/// already, out is NULL, or 4096 endpoints are open), QUIVER_ERR_IO,
/// QUIVER_ERR_OUT_OF_SHARED_MEMORY.
///
/// Any thread; the endpoint is then used by one thread at a time.
#[no_mangle]
pub extern "C" fn quiver_endpoint_open(
    ctx: quiver_context,
    port: u16,
    out: *mut quiver_endpoint,
) -> quiver_status {
    call(|| {
        if out.is_null() {
            return put(out, quiver_endpoint { id: 0 }, "out");
        }
        let context = CONTEXTS.share(ctx.id)?;
        let endpoint = context.endpoint(port)?;
        let id = ENDPOINTS.insert(EndpointState {
            endpoint,
            connections: Vec::new(),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            posted: PostedOps::default(),
            broken: None,
            _context: context,
        })?;
        put(out, quiver_endpoint { id }, "out")
    })
}

/// Closes an endpoint and every connection of it (peers see them end) and frees the
/// handle; it and its connection and request handles are dead afterwards. Messages still
/// queued for it are dropped; operations posted on it end without writing the caller's
/// memory again.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY. The thread that uses the endpoint.
#[no_mangle]
pub extern "C" fn quiver_endpoint_free(ep: quiver_endpoint) -> quiver_status {
    call(|| {
        drop(ENDPOINTS.remove(ep.id)?);
        Ok(())
    })
}

/// The endpoint's own address, in `*out`.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY, QUIVER_ERR_INVALID_ARGUMENT (out is
/// NULL).
#[no_mangle]
pub extern "C" fn quiver_endpoint_addr(
    ep: quiver_endpoint,
    out: *mut quiver_addr,
) -> quiver_status {
    call(|| with_endpoint(ep, |s| put(out, s.endpoint.addr().into(), "out")))
}

/// The endpoint's file descriptor (an eventfd), in `*fd`, for poll/epoll: after
/// quiver_endpoint_arm() gave `*ready == false`, it becomes readable when a message
/// arrives. The descriptor belongs to the endpoint: do not close it or
/// read it; it is valid until quiver_endpoint_free().
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY, QUIVER_ERR_INVALID_ARGUMENT (fd is
/// NULL).
#[no_mangle]
pub extern "C" fn quiver_endpoint_fd(ep: quiver_endpoint, fd: *mut i32) -> quiver_status {
    call(|| with_endpoint(ep, |s| put(fd, s.endpoint.as_raw_fd(), "fd")))
}

/// Prepares the endpoint's descriptor for sleeping in poll/epoll. `*ready` is true when
/// something is already waiting (receive it instead of sleeping), false when the
/// descriptor will become readable as soon as a message arrives over any transport, a
/// peer connects or ends a connection. The loop: receive with quiver_try_recv() until
/// QUIVER_ERR_WOULD_BLOCK, arm, and poll the descriptor only when `*ready` is false; a
/// readable descriptor may find nothing (call quiver_try_recv() again and re-arm). While
/// armed each arriving shm message costs its sender a system call: arm only before
/// sleeping. Non-blocking.
///
/// Errors: QUIVER_ERR_IO (the descriptor's set could not take a connection's socket),
/// QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY, QUIVER_ERR_INVALID_ARGUMENT (ready is NULL).
#[no_mangle]
pub extern "C" fn quiver_endpoint_arm(ep: quiver_endpoint, ready: *mut bool) -> quiver_status {
    call(|| {
        if ready.is_null() {
            return put(ready, false, "ready");
        }
        with_endpoint(ep, |s| {
            let armed = s.endpoint.arm()?;
            put(ready, !armed, "ready")
        })
    })
}

/// Bounds every later blocking call of this endpoint (send, recv, connect waits...): past
/// `timeout_ms` milliseconds it returns QUIVER_ERR_TIMEOUT. A negative value waits as long
/// as the peers live. The default is QUIVER_TIMEOUT_MS.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_endpoint_set_timeout(
    ep: quiver_endpoint,
    timeout_ms: i64,
) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
            s.endpoint.set_timeout(timeout);
            Ok(())
        })
    })
}

/// The endpoint's bound of blocking calls in milliseconds, in `*timeout_ms` (-1: none).
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY, QUIVER_ERR_INVALID_ARGUMENT
/// (timeout_ms is NULL).
#[no_mangle]
pub extern "C" fn quiver_endpoint_timeout(
    ep: quiver_endpoint,
    timeout_ms: *mut i64,
) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            let ms = s
                .endpoint
                .timeout()
                .map_or(-1, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
            put(timeout_ms, ms, "timeout_ms")
        })
    })
}

/// Advances the endpoint's work in flight once (retransmissions and acknowledgements of
/// the datagram transports, sends still moving) without waiting. A program that waits in
/// poll/epoll calls it (or any try_ call) when it wakes. Non-blocking.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_progress(ep: quiver_endpoint) -> quiver_status {
    call(|| with_endpoint(ep, |s| Ok(s.endpoint.progress()?)))
}
