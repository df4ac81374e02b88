//! Active messages: a C handler (a function pointer and the caller's `user_data`)
//! registered for a handler id runs inside the endpoint's calls that take messages in
//! (`quiver_progress`, receives, waits), as `Endpoint::register_handler` runs a Rust
//! closure; `quiver_send_am` and its try_ form send them; a running handler answers with
//! `quiver_am_reply` / `quiver_am_reply_am`.
//!
//! Inside a handler the endpoint's own handle is held by the call that runs it (a call on
//! it is QUIVER_ERR_BUSY): the handler reaches its endpoint only through the message it
//! was given, which this module knows for the handler's call ([`RUNNING`], this thread's).

use std::cell::Cell;
use std::ffi::{c_int, c_void};

use rust_quiver::{ActiveMessage, Endpoint, Error};

use crate::boundary::{bytes, call, put, put_optional};
use crate::context::quiver_addr;
use crate::endpoint::{quiver_conn, quiver_endpoint, with_endpoint};
use crate::status::{failure, handler_failed, quiver_status, Failure};

/// An active message as a handler sees it. Every pointer in it is valid only during the
/// handler's call: copy what you keep.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct quiver_am_message {
    /// The sender.
    pub source: quiver_addr,
    /// The handler id the sender named.
    pub id: u16,
    /// The header the sender gave quiver_send_am() (`header_len` bytes; not NULL).
    pub header: *const c_void,
    /// The header's length.
    pub header_len: usize,
    /// The payload (`payload_len` bytes; not NULL).
    pub payload: *const c_void,
    /// The payload's length.
    pub payload_len: usize,
}

/// An active-message handler: called with the `user_data` given to
/// quiver_register_handler() and the message (valid for the call only). It returns
/// QUIVER_OK, or a status that the call that ran it returns (with a message naming the
/// handler). It must return normally: no longjmp out of it, no C++ exception through it.
pub type quiver_am_handler = Option<
    unsafe extern "C" fn(user_data: *mut c_void, message: *const quiver_am_message) -> c_int,
>;

/// An endpoint's active-message counters (quiver_endpoint_am_stats()).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct quiver_am_stats {
    /// Handlers run (one per active message received).
    pub handled: u64,
    /// Active messages dropped because no handler was registered for their id.
    pub unknown_handler: u64,
    /// Active messages whose header was longer than the message (the connection failed).
    pub malformed: u64,
    /// Calls a handler made that a handler may not (QUIVER_ERR_IN_HANDLER).
    pub refused_calls: u64,
    /// Replies a handler made that the connection could not take at once: queued.
    pub replies_queued: u64,
    /// Of those, the ones that failed.
    pub replies_failed: u64,
}

/// The handler running on this thread: its endpoint and its message.
#[derive(Clone, Copy)]
struct Running {
    endpoint: *mut Endpoint,
    message: *const quiver_am_message,
}

thread_local! {
    /// The handler this thread runs now (None outside handlers).
    static RUNNING: Cell<Option<Running>> = const { Cell::new(None) };
}

/// The function pointer and `user_data` of a C handler.
struct CHandler {
    f: unsafe extern "C" fn(*mut c_void, *const quiver_am_message) -> c_int,
    user_data: *mut c_void,
}

// SAFETY: a handler runs only on the thread that drives its endpoint at the time (one
// thread at a time, the handle's rule), and the header requires `user_data` to be usable
// from whichever thread that is; quiver never touches what it points at.
unsafe impl Send for CHandler {}

impl CHandler {
    fn run(&mut self, endpoint: &mut Endpoint, m: &ActiveMessage<'_>) -> Result<(), Error> {
        let message = quiver_am_message {
            source: m.source().into(),
            id: m.id(),
            header: m.header().as_ptr().cast(),
            header_len: m.header().len(),
            payload: m.payload().as_ptr().cast(),
            payload_len: m.payload().len(),
        };
        let outer = RUNNING.replace(Some(Running {
            endpoint,
            message: &message,
        }));
        // SAFETY: `f` is the non-NULL function the caller registered for this id, called
        // with its own `user_data` and a message valid for the call, as the header says.
        let code = unsafe { (self.f)(self.user_data, &message) };
        RUNNING.set(outer);
        if code == 0 {
            return Ok(());
        }
        Err(handler_failed(
            code,
            format!(
                "active-message handler {} (message from {}) returned status {code}",
                m.id(),
                m.source()
            ),
        ))
    }
}

/// Registers `handler` for active messages with `id` on `ep` (replacing the one
/// registered for it). It runs on the thread that drives `ep`, inside whichever call of
/// `ep` takes the message in: quiver_progress(), a receive, a probe (a program that only
/// serves active messages calls quiver_progress() in a loop, or sleeps on the endpoint's
/// descriptor between calls). Messages of one sender run their handlers in the order
/// sent, once each.
///
/// A handler must not block. Inside it, `ep`'s handle is held by the call that runs it
/// (any call on `ep` is QUIVER_ERR_BUSY); it answers the sender with quiver_am_reply() or
/// quiver_am_reply_am(); it may use other endpoints, which run their own handlers. It must
/// return normally (a longjmp out of it or a C++ exception through it is undefined
/// behaviour); `user_data` is passed to it as given and must be usable from the thread
/// that drives `ep`.
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (handler is NULL), QUIVER_ERR_BAD_HANDLE,
/// QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_register_handler(
    ep: quiver_endpoint,
    id: u16,
    handler: quiver_am_handler,
    user_data: *mut c_void,
) -> quiver_status {
    call(|| {
        let Some(f) = handler else {
            return Err(failure(
                quiver_status::QUIVER_ERR_INVALID_ARGUMENT,
                "handler is NULL",
            ));
        };
        let mut handler = CHandler { f, user_data };
        with_endpoint(ep, |s| {
            Ok(s.endpoint
                .register_handler(id, move |endpoint, m| handler.run(endpoint, m))?)
        })
    })
}

/// Removes the handler of `id` from `ep`; `*was_registered` (may be NULL) tells whether
/// there was one. Active messages for `id` are then counted and reported as
/// QUIVER_ERR_UNKNOWN_HANDLER.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_unregister_handler(
    ep: quiver_endpoint,
    id: u16,
    was_registered: *mut bool,
) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            put_optional(was_registered, s.endpoint.unregister_handler(id));
            Ok(())
        })
    })
}

/// Sends an active message for handler `id` of the receiving endpoint on `conn`: the
/// `header_len` bytes at `header`, then the `payload_len` bytes at `payload`, one
/// message, blocking as quiver_send() does, over every transport. Either pointer may be
/// NULL when its length is 0.
///
/// Errors: as quiver_send(); QUIVER_ERR_IN_HANDLER has no place here (a handler cannot
/// reach its endpoint's handle).
#[no_mangle]
pub extern "C" fn quiver_send_am(
    ep: quiver_endpoint,
    conn: quiver_conn,
    id: u16,
    header: *const c_void,
    header_len: usize,
    payload: *const c_void,
    payload_len: usize,
) -> quiver_status {
    call(|| {
        let header = bytes(header, header_len, "header")?;
        let payload = bytes(payload, payload_len, "payload")?;
        with_endpoint(ep, |s| {
            let c = s.connection(conn)?;
            Ok(s.endpoint.send_am(c, id, header, payload)?)
        })
    })
}

/// quiver_send_am() only if that needs no waiting: QUIVER_ERR_WOULD_BLOCK (nothing sent)
/// otherwise. Non-blocking.
///
/// Errors: QUIVER_ERR_WOULD_BLOCK, then as quiver_send_am().
#[no_mangle]
pub extern "C" fn quiver_try_send_am(
    ep: quiver_endpoint,
    conn: quiver_conn,
    id: u16,
    header: *const c_void,
    header_len: usize,
    payload: *const c_void,
    payload_len: usize,
) -> quiver_status {
    call(|| {
        let header = bytes(header, header_len, "header")?;
        let payload = bytes(payload, payload_len, "payload")?;
        with_endpoint(ep, |s| {
            let c = s.connection(conn)?;
            Ok(s.endpoint.try_send_am(c, id, header, payload)?)
        })
    })
}

/// Runs `f` on the endpoint of the handler running on this thread, whose message is
/// `message`.
fn in_handler(
    message: *const quiver_am_message,
    f: impl FnOnce(&mut Endpoint, quiver_addr) -> Result<(), Error>,
) -> Result<(), Failure> {
    let running = RUNNING
        .get()
        .filter(|r| !message.is_null() && r.message == message);
    let Some(running) = running else {
        return Err(failure(
            quiver_status::QUIVER_ERR_INVALID_ARGUMENT,
            "quiver_am_reply: only inside an active-message handler, with the message it \
             was given",
        ));
    };
    // SAFETY: `running` was set by `CHandler::run` on this thread for the handler that is
    // running now (its message pointer is the one given): `endpoint` came from the
    // `&mut Endpoint` the handler was called with, which nothing else uses until the
    // handler returns, and `message` points at its stack frame, alive until then.
    let (endpoint, source) = unsafe { (&mut *running.endpoint, (*running.message).source) };
    Ok(f(endpoint, source)?)
}

/// Inside a handler: answers the sender of `message` (the message the handler was given)
/// with a plain message of the `len` bytes at `data`, on the connection it came in on.
/// Never waits: what the connection cannot take now is copied and sent by a later call.
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (not inside a handler, or another message; data
/// NULL), then as quiver_reply().
#[no_mangle]
pub extern "C" fn quiver_am_reply(
    message: *const quiver_am_message,
    data: *const c_void,
    len: usize,
) -> quiver_status {
    call(|| {
        let data = bytes(data, len, "data")?;
        in_handler(message, |endpoint, source| {
            endpoint.reply(source.into(), data)
        })
    })
}

/// Inside a handler: answers the sender of `message` with an active message for its
/// handler `id` (`header` then `payload`, as quiver_send_am()). Never waits, as
/// quiver_am_reply().
///
/// Errors: as quiver_am_reply(), then as quiver_send_am().
#[no_mangle]
pub extern "C" fn quiver_am_reply_am(
    message: *const quiver_am_message,
    id: u16,
    header: *const c_void,
    header_len: usize,
    payload: *const c_void,
    payload_len: usize,
) -> quiver_status {
    call(|| {
        let header = bytes(header, header_len, "header")?;
        let payload = bytes(payload, payload_len, "payload")?;
        in_handler(message, |endpoint, source| {
            endpoint.reply_am(source.into(), id, header, payload)
        })
    })
}

/// The endpoint's active-message counters, in `*out`.
///
/// Errors: QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY, QUIVER_ERR_INVALID_ARGUMENT (out is
/// NULL).
#[no_mangle]
pub extern "C" fn quiver_endpoint_am_stats(
    ep: quiver_endpoint,
    out: *mut quiver_am_stats,
) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            let a = s.endpoint.am_stats();
            let stats = quiver_am_stats {
                handled: a.handled,
                unknown_handler: a.unknown_handler,
                malformed: a.malformed,
                refused_calls: a.refused_calls,
                replies_queued: a.replies_queued,
                replies_failed: a.replies_failed,
            };
            put(out, stats, "out")
        })
    })
}
