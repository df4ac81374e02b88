//! Posted operations on the caller's memory: sends from and receives into memory the
//! caller keeps until the operation completes, held by number (`quiver_request`) across
//! calls. Each call is one call of the Rust API's posted operations by number
//! (`Endpoint::post_send_from`, `post_recv_sized`, `wait_*_ready`, `finish_*`,
//! `cancel_recv_into`; decision 0097): a send's bytes are copied into a buffer of the
//! endpoint's pool when it is posted, a receive's message is copied into the caller's
//! memory when it completes, as Rust's `Endpoint::scope` does; no copy beyond those.

use std::ffi::c_void;

use rust_quiver::{Addr, Envelope, Error};

use crate::boundary::{bytes, call, put, put_optional};
use crate::context::quiver_addr;
use crate::endpoint::{quiver_conn, quiver_endpoint, with_endpoint, EndpointState};
use crate::requests::{quiver_request, CallerBytes, Op};
use crate::status::{failure, quiver_status, Failure};
use crate::tagged::{quiver_envelope, spec};

impl EndpointState {
    /// The handle of operation number `n`.
    fn request_handle(&self, n: u32) -> quiver_request {
        quiver_request {
            id: u64::from(self.serial) << 32 | u64::from(n),
        }
    }

    /// The number of the live operation `req` names.
    ///
    /// # Errors
    /// `QUIVER_ERR_BAD_HANDLE` for 0, a made-up number, another endpoint's request or one
    /// that completed or was cancelled already.
    fn request_number(&self, req: quiver_request) -> Result<u32, Failure> {
        let n = req.id as u32;
        if req.id >> 32 == u64::from(self.serial) && self.posted.ops.contains_key(&n) {
            return Ok(n);
        }
        Err(failure(
            quiver_status::QUIVER_ERR_BAD_HANDLE,
            format!(
                "{:#x} is not a posted operation of endpoint {} (zero, made up, another \
                 endpoint's, or completed or cancelled already)",
                req.id,
                self.endpoint.addr()
            ),
        ))
    }
}

/// What a completed operation reports: a receive's sender, tag and length; a send's
/// destination, tag and length.
fn send_envelope(peer: Addr, tag: u64, len: usize) -> quiver_envelope {
    Envelope {
        source: peer,
        tag,
        len: len as u64,
    }
    .into()
}

/// Posts a send of `data` with `tag` (`None`: untagged) on `conn`.
fn post_send(
    ep: quiver_endpoint,
    conn: quiver_conn,
    tag: Option<u64>,
    data: *const c_void,
    len: usize,
    req: *mut quiver_request,
) -> Result<(), Failure> {
    if req.is_null() {
        return put(req, quiver_request { id: 0 }, "req");
    }
    let data = bytes(data, len, "data")?;
    with_endpoint(ep, |s| {
        let c = s.connection(conn)?;
        let request = s.endpoint.post_send_from(c, tag, data)?;
        let n = s.posted.insert(Op::Send {
            request,
            peer: c.peer(),
            tag: tag.unwrap_or(0),
            len,
        });
        put(req, s.request_handle(n), "req")
    })
}

/// Posts a send of the `len` bytes at `data` as one message on `conn`; `*req` is the
/// request, to complete with quiver_wait() or quiver_test() (or quiver_cancel(), which
/// waits for a send). The memory at `data` must stay valid and unmodified until the
/// request completes: quiver may read it until then (today it copies the bytes into a
/// buffer of the endpoint's pool during this call, as the Rust API's posted sends on
/// caller memory do; the contract leaves room for sending from it in place). `data` may
/// be NULL when `len` is 0. Messages of one connection, posted or not, arrive in the
/// order they were sent. Non-blocking.
///
/// Errors: a peer error if the connection failed already (QUIVER_ERR_PEER_DEAD...),
/// QUIVER_ERR_INVALID_ARGUMENT (a closed connection; data NULL; req NULL),
/// QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY. The thread that uses the endpoint.
#[no_mangle]
pub extern "C" fn quiver_post_send_from(
    ep: quiver_endpoint,
    conn: quiver_conn,
    data: *const c_void,
    len: usize,
    req: *mut quiver_request,
) -> quiver_status {
    call(|| post_send(ep, conn, None, data, len, req))
}

/// quiver_post_send_from() with a 64-bit `tag` (as quiver_send_tagged()).
///
/// Errors: as quiver_post_send_from().
#[no_mangle]
pub extern "C" fn quiver_post_send_tagged_from(
    ep: quiver_endpoint,
    conn: quiver_conn,
    tag: u64,
    data: *const c_void,
    len: usize,
    req: *mut quiver_request,
) -> quiver_status {
    call(|| post_send(ep, conn, Some(tag), data, len, req))
}

/// Posts a receive of a message into `buf` (`capacity` bytes), for the next message
/// (`matching` false) or the earliest one `source`/`tag`/`mask` match.
fn post_recv(
    ep: quiver_endpoint,
    matching: Option<(*const quiver_addr, u64, u64)>,
    buf: *mut c_void,
    capacity: usize,
    req: *mut quiver_request,
) -> Result<(), Failure> {
    if req.is_null() {
        return put(req, quiver_request { id: 0 }, "req");
    }
    if buf.is_null() && capacity != 0 {
        return Err(failure(
            quiver_status::QUIVER_ERR_INVALID_ARGUMENT,
            "buf is NULL",
        ));
    }
    let spec = matching.map(|(source, tag, mask)| spec(source, tag, mask));
    with_endpoint(ep, |s| {
        let request = s.endpoint.post_recv_sized(spec, capacity)?;
        let into = CallerBytes {
            data: buf.cast::<u8>(),
            len: capacity,
        };
        let n = s.posted.insert(Op::Recv { request, into });
        put(req, s.request_handle(n), "req")
    })
}

/// Posts a receive of the next message (from any peer, not claimed by a receive posted
/// earlier) into the `capacity` bytes at `buf`; `*req` is the request, to complete with
/// quiver_wait() or quiver_test(), or to end with quiver_cancel(). quiver writes the
/// message at the start of `buf` when the request completes (inside the quiver_wait(),
/// quiver_test() or quiver_cancel() that reports it); until then the memory must stay
/// valid and the program must neither read nor write it. Posted receives take messages
/// in the order they were posted, before quiver_recv() gets any. quiver_endpoint_free()
/// ends every request of the endpoint without writing their memory again. `buf` may be
/// NULL when `capacity` is 0. Non-blocking.
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (buf or req NULL), QUIVER_ERR_IN_HANDLER (inside
/// an active-message handler), QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY. The thread that
/// uses the endpoint.
#[no_mangle]
pub extern "C" fn quiver_post_recv_into(
    ep: quiver_endpoint,
    buf: *mut c_void,
    capacity: usize,
    req: *mut quiver_request,
) -> quiver_status {
    call(|| post_recv(ep, None, buf, capacity, req))
}

/// quiver_post_recv_into() for the earliest message from `*source` (NULL: any sender)
/// whose tag agrees with `tag` on every bit set in `mask`, under quiver_recv_matching()'s
/// rules.
///
/// Errors: as quiver_post_recv_into().
#[no_mangle]
pub extern "C" fn quiver_post_recv_matching_into(
    ep: quiver_endpoint,
    source: *const quiver_addr,
    tag: u64,
    mask: u64,
    buf: *mut c_void,
    capacity: usize,
    req: *mut quiver_request,
) -> quiver_status {
    call(|| post_recv(ep, Some((source, tag, mask)), buf, capacity, req))
}

/// Ends operation `n`, which has completed: its outcome, the envelope in `out`.
fn finish(s: &mut EndpointState, n: u32, out: *mut quiver_envelope) -> Result<(), Failure> {
    let op = s.posted.ops.remove(&n).expect("a live number (checked)");
    match op {
        Op::Send {
            request,
            peer,
            tag,
            len,
        } => {
            s.endpoint.finish_send(request)?;
            put_optional(out, send_envelope(peer, tag, len));
            Ok(())
        }
        Op::Recv { request, mut into } => {
            // SAFETY: the caller's promise at posting; this call ends the receive (it was
            // removed from the table above), so the slice is made once per receive.
            let into = unsafe { into.slice() };
            let got = s.endpoint.finish_recv_into(request, into);
            envelope_out(got, out)
        }
    }
}

/// The envelope of a finished receive, or its error (a buffer too small: `out->len` alone
/// set, to the message's length).
fn envelope_out(got: Result<Envelope, Error>, out: *mut quiver_envelope) -> Result<(), Failure> {
    match got {
        Ok(envelope) => {
            put_optional(out, envelope.into());
            Ok(())
        }
        Err(e) => {
            if let Error::BufferTooSmall { message, .. } = e {
                if !out.is_null() {
                    // SAFETY: non-NULL (checked); the header requires `out` to point at a
                    // writable quiver_envelope for the duration of the call.
                    unsafe { (*out).len = message };
                }
            }
            Err(e.into())
        }
    }
}

/// Whether operation `n` has completed (advancing progress first).
fn completed(s: &mut EndpointState, n: u32) -> Result<bool, Failure> {
    Ok(match &s.posted.ops[&n] {
        Op::Send { request, .. } => s.endpoint.test_send(request)?,
        Op::Recv { request, .. } => s.endpoint.test_recv(request)?,
    })
}

/// Whether posted operation `req` has completed, advancing progress first. `*done` false:
/// still posted (`req` stays valid). `*done` true: it completed and `req` is dead; a
/// receive's message is in its buffer and `*out` (may be NULL) gets its sender, tag and
/// length (a send's: its destination, tag and length); a failed operation returns its
/// error code instead (`req` is dead too). Non-blocking.
///
/// Errors: the operation's own (as quiver_send() or quiver_recv_matching():
/// QUIVER_ERR_BUFFER_TOO_SMALL with `out->len` the message's length, which stays
/// queued; a peer error...), an error of progress (`*done` false, `req` still valid),
/// QUIVER_ERR_INVALID_ARGUMENT (done NULL), QUIVER_ERR_BAD_HANDLE (ep; req not a live
/// request of ep), QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_test(
    ep: quiver_endpoint,
    req: quiver_request,
    done: *mut bool,
    out: *mut quiver_envelope,
) -> quiver_status {
    call(|| {
        if done.is_null() {
            return put(done, false, "done");
        }
        with_endpoint(ep, |s| {
            let n = s.request_number(req)?;
            let now = completed(s, n)?;
            put(done, now, "done")?;
            if now {
                finish(s, n, out)?;
            }
            Ok(())
        })
    })
}

/// Waits until posted operation `req` completes, then ends it as quiver_test() does when
/// `*done` is true: a receive's message is in its buffer, `*out` (may be NULL) gets the
/// envelope, `req` is dead. Past the endpoint's timeout it returns QUIVER_ERR_TIMEOUT
/// with the operation still posted (`req` stays valid: wait again, test or cancel).
/// Blocking.
///
/// Errors: the operation's own (`req` is dead), QUIVER_ERR_TIMEOUT (`req` still valid),
/// QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_wait(
    ep: quiver_endpoint,
    req: quiver_request,
    out: *mut quiver_envelope,
) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            let n = s.request_number(req)?;
            match &s.posted.ops[&n] {
                Op::Send { request, .. } => s.endpoint.wait_send_ready(request)?,
                Op::Recv { request, .. } => s.endpoint.wait_recv_ready(request)?,
            }
            finish(s, n, out)
        })
    })
}

/// Ends posted operation `req` without waiting for a message: `req` is dead afterwards.
/// A receive whose message has not begun to arrive is withdrawn (`*completed` false; its
/// buffer was not written; the message, when it comes, goes to a later receive); one
/// that had completed, or whose message had begun (finished now), ends as quiver_wait()
/// would (`*completed` true, its message in its buffer, `*out` its envelope). A send
/// cannot be withdrawn: it is waited for (`*completed` true). `completed` and `out` may
/// be NULL. Blocking only while a begun message or a send finishes.
///
/// Errors: the operation's own when it had completed with one, QUIVER_ERR_BAD_HANDLE,
/// QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_cancel(
    ep: quiver_endpoint,
    req: quiver_request,
    completed: *mut bool,
    out: *mut quiver_envelope,
) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            let n = s.request_number(req)?;
            if matches!(s.posted.ops[&n], Op::Send { .. }) {
                put_optional(completed, true);
                return finish(s, n, out);
            }
            let Some(Op::Recv { request, mut into }) = s.posted.ops.remove(&n) else {
                unreachable!("a live receive (checked)")
            };
            // SAFETY: the caller's promise at posting; this call ends the receive (removed
            // from the table above), so the slice is made once per receive.
            let into = unsafe { into.slice() };
            match s.endpoint.cancel_recv_into(request, into) {
                Ok(None) => {
                    put_optional(completed, false);
                    Ok(())
                }
                Ok(Some(envelope)) => {
                    put_optional(completed, true);
                    put_optional(out, envelope.into());
                    Ok(())
                }
                Err(e) => {
                    put_optional(completed, true);
                    envelope_out(Err(e), out)
                }
            }
        })
    })
}
