//! Tagged messages: sends with a 64-bit tag, and receives and probes that name a source
//! (or any), a tag and a mask, each one call of the Rust API (`Endpoint::send_tagged`,
//! `recv_matching`, `probe` and their try_ forms) under MPI's matching rules.

use std::ffi::c_void;

use rust_quiver::{Envelope, Error, MatchSpec};

use crate::boundary::{bytes, bytes_mut, call, put, put_optional, some_bytes, some_bytes_mut};
use crate::context::quiver_addr;
use crate::endpoint::{code, message_call, quiver_conn, quiver_endpoint, with_endpoint};
use crate::status::quiver_status;

/// A mask that takes every tag (quiver_recv_matching(), quiver_probe()).
pub const QUIVER_TAG_ANY: u64 = 0;
/// A mask under which only the exact tag matches.
pub const QUIVER_TAG_EXACT: u64 = u64::MAX;

/// What a tagged receive or probe reports of a message.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct quiver_envelope {
    /// The sender.
    pub source: quiver_addr,
    /// The tag it was sent with (0 for quiver_send()).
    pub tag: u64,
    /// Its length in bytes.
    pub len: usize,
}

impl From<Envelope> for quiver_envelope {
    fn from(e: Envelope) -> quiver_envelope {
        quiver_envelope {
            source: e.source.into(),
            tag: e.tag,
            len: usize::try_from(e.len).unwrap_or(usize::MAX),
        }
    }
}

/// The receive's match: `source` NULL takes any sender.
#[inline]
pub(crate) fn spec(source: *const quiver_addr, tag: u64, mask: u64) -> MatchSpec {
    // SAFETY: NULL is checked by `as_ref`; otherwise the header requires `source` to point
    // at a readable quiver_addr for the duration of the call. It is copied at once.
    let source = unsafe { source.as_ref() }.copied();
    MatchSpec {
        source: source.map(Into::into),
        tag,
        mask,
    }
}

/// Sends the `len` bytes at `data` as one message with `tag` on `conn`, blocking as
/// quiver_send() does. Messages of one connection arrive in the order sent, whatever
/// their tags; quiver_send() is tag 0. Tags are carried over every transport.
///
/// Errors: as quiver_send().
#[no_mangle]
pub extern "C" fn quiver_send_tagged(
    ep: quiver_endpoint,
    conn: quiver_conn,
    tag: u64,
    data: *const c_void,
    len: usize,
) -> quiver_status {
    message_call(
        ep,
        |s| Some((s.known_connection(conn)?, some_bytes(data, len)?)),
        |s, (c, data)| code(s.endpoint.send_tagged(c, tag, data)),
        move || {
            let data = bytes(data, len, "data")?;
            with_endpoint(ep, |s| {
                let c = s.connection(conn)?;
                Ok(s.endpoint.send_tagged(c, tag, data)?)
            })
        },
    )
}

/// quiver_send_tagged() only if that needs no waiting: QUIVER_ERR_WOULD_BLOCK (nothing
/// sent) otherwise, as quiver_try_send(). Non-blocking.
///
/// Errors: QUIVER_ERR_WOULD_BLOCK, then as quiver_send_tagged().
#[no_mangle]
pub extern "C" fn quiver_try_send_tagged(
    ep: quiver_endpoint,
    conn: quiver_conn,
    tag: u64,
    data: *const c_void,
    len: usize,
) -> quiver_status {
    message_call(
        ep,
        |s| Some((s.known_connection(conn)?, some_bytes(data, len)?)),
        |s, (c, data)| code(s.endpoint.try_send_tagged(c, tag, data)),
        move || {
            let data = bytes(data, len, "data")?;
            with_endpoint(ep, |s| {
                let c = s.connection(conn)?;
                Ok(s.endpoint.try_send_tagged(c, tag, data)?)
            })
        },
    )
}

/// Receives the earliest message from `*source` (NULL: any sender) whose tag agrees with
/// `tag` on every bit set in `mask` (QUIVER_TAG_EXACT: that tag only; QUIVER_TAG_ANY: any
/// tag) into the `capacity` bytes at `buf`, blocking until one arrives. `*out` (may be
/// NULL) gets its sender, tag and length. Two messages of one sender that both match are
/// taken in the order sent; messages that do not match wait, in order, for a later
/// receive (quiver_recv() takes any of them). `buf` may be NULL when `capacity` is 0.
///
/// Errors: QUIVER_ERR_BUFFER_TOO_SMALL (the message stays queued; `out->len` alone is set,
/// to its length: quiver_probe() gives the rest), then as quiver_recv().
#[no_mangle]
pub extern "C" fn quiver_recv_matching(
    ep: quiver_endpoint,
    source: *const quiver_addr,
    tag: u64,
    mask: u64,
    buf: *mut c_void,
    capacity: usize,
    out: *mut quiver_envelope,
) -> quiver_status {
    message_call(
        ep,
        |_| some_bytes_mut(buf, capacity),
        |s, buf| {
            code(matched(
                s.endpoint.recv_matching(spec(source, tag, mask), buf),
                out,
            ))
        },
        move || {
            let buf = bytes_mut(buf, capacity, "buf")?;
            let spec = spec(source, tag, mask);
            with_endpoint(ep, |s| {
                Ok(matched(s.endpoint.recv_matching(spec, buf), out)?)
            })
        },
    )
}

/// quiver_recv_matching() if a matching message is complete now;
/// QUIVER_ERR_WOULD_BLOCK otherwise. Non-blocking. While messages that match no receive
/// wait in the endpoint, quiver_endpoint_arm() reports `*ready` (it does not arm the
/// descriptor): a loop that waits for one tag with the others unreceived arms with
/// quiver_endpoint_arm_matching() instead.
///
/// Errors: QUIVER_ERR_WOULD_BLOCK, then as quiver_recv_matching().
#[no_mangle]
pub extern "C" fn quiver_try_recv_matching(
    ep: quiver_endpoint,
    source: *const quiver_addr,
    tag: u64,
    mask: u64,
    buf: *mut c_void,
    capacity: usize,
    out: *mut quiver_envelope,
) -> quiver_status {
    message_call(
        ep,
        |_| some_bytes_mut(buf, capacity),
        |s, buf| {
            code(matched(
                s.endpoint.try_recv_matching(spec(source, tag, mask), buf),
                out,
            ))
        },
        move || {
            let buf = bytes_mut(buf, capacity, "buf")?;
            let spec = spec(source, tag, mask);
            with_endpoint(ep, |s| {
                Ok(matched(s.endpoint.try_recv_matching(spec, buf), out)?)
            })
        },
    )
}

/// quiver_endpoint_arm() for a loop that waits for a message `*source` (NULL: any
/// sender), `tag` and `mask` match (quiver_try_recv_matching(), quiver_try_probe()):
/// messages waiting in the endpoint that they do not match do not count, so the
/// descriptor is armed while they wait. `*ready` is true when a matching message (or
/// anything else quiver_endpoint_arm() reports) is already there: receive it instead of
/// sleeping. Non-blocking.
///
/// Errors: as quiver_endpoint_arm().
#[no_mangle]
pub extern "C" fn quiver_endpoint_arm_matching(
    ep: quiver_endpoint,
    source: *const quiver_addr,
    tag: u64,
    mask: u64,
    ready: *mut bool,
) -> quiver_status {
    call(|| {
        if ready.is_null() {
            return put(ready, false, "ready");
        }
        let spec = spec(source, tag, mask);
        with_endpoint(ep, |s| {
            let armed = s.endpoint.arm_matching(spec)?;
            put(ready, !armed, "ready")
        })
    })
}

/// Waits for the earliest message that quiver_recv_matching() with the same `source`,
/// `tag` and `mask` would take, and reports its sender, tag and length in `*out` without
/// taking it: size a buffer, then receive it with those arguments (or with its own
/// sender and tag, exactly). Blocking.
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (out is NULL), a peer error of one connection
/// (QUIVER_ERR_PEER_DEAD...), QUIVER_ERR_TIMEOUT, QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_probe(
    ep: quiver_endpoint,
    source: *const quiver_addr,
    tag: u64,
    mask: u64,
    out: *mut quiver_envelope,
) -> quiver_status {
    call(|| {
        if out.is_null() {
            return put(out, zero_envelope(), "out");
        }
        let spec = spec(source, tag, mask);
        with_endpoint(ep, |s| put(out, s.endpoint.probe(spec)?.into(), "out"))
    })
}

/// quiver_probe() without waiting: QUIVER_ERR_WOULD_BLOCK when no matching message is
/// complete now. Non-blocking.
///
/// Errors: QUIVER_ERR_WOULD_BLOCK, then as quiver_probe().
#[no_mangle]
pub extern "C" fn quiver_try_probe(
    ep: quiver_endpoint,
    source: *const quiver_addr,
    tag: u64,
    mask: u64,
    out: *mut quiver_envelope,
) -> quiver_status {
    call(|| {
        if out.is_null() {
            return put(out, zero_envelope(), "out");
        }
        let spec = spec(source, tag, mask);
        with_endpoint(ep, |s| put(out, s.endpoint.try_probe(spec)?.into(), "out"))
    })
}

fn zero_envelope() -> quiver_envelope {
    quiver_envelope {
        source: quiver_addr { rank: 0, port: 0 },
        tag: 0,
        len: 0,
    }
}

/// The outputs of a tagged receive: the envelope, or the message's length when the
/// buffer was too small.
#[inline]
fn matched(got: Result<Envelope, Error>, out: *mut quiver_envelope) -> Result<(), Error> {
    match got {
        Ok(envelope) => {
            put_optional(out, envelope.into());
            Ok(())
        }
        Err(e) => {
            if let Error::BufferTooSmall { message, .. } = e {
                if !out.is_null() {
                    // SAFETY: non-NULL (checked); the header requires `out` to point at a
                    // writable quiver_envelope for the duration of the call. Only its
                    // `len` field is written (the others are left as the caller had them).
                    unsafe { (*out).len = message };
                }
            }
            Err(e)
        }
    }
}
