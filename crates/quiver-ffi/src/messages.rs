//! Connections and messages: connect, reply, close; blocking and non-blocking sends and
//! receives from and into the caller's memory.

use std::ffi::c_void;

use rust_quiver::{Addr, Error};

use crate::boundary::{bytes, bytes_mut, call, put, put_optional, some_bytes, some_bytes_mut};
use crate::context::quiver_addr;
use crate::endpoint::{code, message_call, quiver_conn, quiver_endpoint, with_endpoint};
use crate::status::quiver_status;

/// Opens (or returns the existing) connection from `ep` to the endpoint at `peer`,
/// waiting up to the connect timeout (QUIVER_CONNECT_TIMEOUT_MS) for the peer's endpoint
/// to open. `*out` is the connection; it stays valid until quiver_close() or
/// quiver_endpoint_free(). Blocking.
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (a rank outside the job, out is NULL),
/// QUIVER_ERR_REFUSED, QUIVER_ERR_WRONG_KEY, QUIVER_ERR_VERSION_MISMATCH,
/// QUIVER_ERR_TIMEOUT, QUIVER_ERR_IO, QUIVER_ERR_CONFIG (no transport reaches the peer),
/// QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_connect(
    ep: quiver_endpoint,
    peer: quiver_addr,
    out: *mut quiver_conn,
) -> quiver_status {
    call(|| {
        if out.is_null() {
            return put(out, quiver_conn { id: 0 }, "out");
        }
        with_endpoint(ep, |s| {
            let conn = s.endpoint.connect(peer.into())?;
            put(out, s.handle_of(conn), "out")
        })
    })
}

/// The connection that answers `src`, a peer whose message this endpoint received,
/// without connecting back: the one it came in on (tcp, udp) or a new ring back (shm).
/// `*out` is the connection. May block (opening a ring back).
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (nothing from `src` reached this endpoint; out is
/// NULL), then as quiver_connect().
#[no_mangle]
pub extern "C" fn quiver_reply_connection(
    ep: quiver_endpoint,
    src: quiver_addr,
    out: *mut quiver_conn,
) -> quiver_status {
    call(|| {
        if out.is_null() {
            return put(out, quiver_conn { id: 0 }, "out");
        }
        with_endpoint(ep, |s| {
            let conn = s.endpoint.reply_connection(src.into())?;
            put(out, s.handle_of(conn), "out")
        })
    })
}

/// The address of the endpoint at the other end of `conn`, in `*out`.
///
/// Errors: QUIVER_ERR_BAD_HANDLE (ep, or conn not of ep), QUIVER_ERR_BUSY,
/// QUIVER_ERR_INVALID_ARGUMENT (out is NULL).
#[no_mangle]
pub extern "C" fn quiver_conn_peer(
    ep: quiver_endpoint,
    conn: quiver_conn,
    out: *mut quiver_addr,
) -> quiver_status {
    call(|| with_endpoint(ep, |s| put(out, s.connection(conn)?.peer().into(), "out")))
}

/// Closes connection `conn`, leaving the endpoint's others open: sends on it finish first
/// (bounded by the endpoint's timeout), then the peer receives what was sent and sees the
/// connection end (no error on its side; over udp, whose one connection carries both
/// directions, its sends to this endpoint end too). Later calls on `conn` fail with QUIVER_ERR_INVALID_ARGUMENT;
/// quiver_connect() opens a new one. Blocking (while sends finish).
///
/// Errors: QUIVER_ERR_INVALID_ARGUMENT (closed already), the connection's peer error if it
/// had failed, QUIVER_ERR_TIMEOUT, QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_close(ep: quiver_endpoint, conn: quiver_conn) -> quiver_status {
    call(|| {
        with_endpoint(ep, |s| {
            let c = s.connection(conn)?;
            Ok(s.endpoint.close(c)?)
        })
    })
}

/// Sends the `len` bytes at `data` as one message on `conn`, blocking until quiver is
/// done with them (in the ring, taken by the transport, or pulled by the receiver): the
/// buffer may be reused as soon as it returns. `data` may be NULL when `len` is 0.
///
/// Errors: QUIVER_ERR_PEER_DEAD, QUIVER_ERR_PEER_STOPPED, QUIVER_ERR_PEER_CLOSED,
/// QUIVER_ERR_CORRUPT, QUIVER_ERR_UNREACHABLE, QUIVER_ERR_SEND_DEADLOCK,
/// QUIVER_ERR_TIMEOUT, QUIVER_ERR_INVALID_ARGUMENT (a closed connection; data NULL),
/// QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_send(
    ep: quiver_endpoint,
    conn: quiver_conn,
    data: *const c_void,
    len: usize,
) -> quiver_status {
    message_call(
        ep,
        |s| Some((s.known_connection(conn)?, some_bytes(data, len)?)),
        |s, (c, data)| code(s.endpoint.send(c, data)),
        move || {
            let data = bytes(data, len, "data")?;
            with_endpoint(ep, |s| {
                let c = s.connection(conn)?;
                Ok(s.endpoint.send(c, data)?)
            })
        },
    )
}

/// quiver_send() only if that needs no waiting: QUIVER_ERR_WOULD_BLOCK (nothing sent)
/// otherwise. Over shm a large message may be copied into an internal buffer (at most
/// 64 MiB held per endpoint) and finish later. Non-blocking.
///
/// Errors: QUIVER_ERR_WOULD_BLOCK, then as quiver_send().
#[no_mangle]
pub extern "C" fn quiver_try_send(
    ep: quiver_endpoint,
    conn: quiver_conn,
    data: *const c_void,
    len: usize,
) -> quiver_status {
    message_call(
        ep,
        |s| Some((s.known_connection(conn)?, some_bytes(data, len)?)),
        |s, (c, data)| code(s.endpoint.try_send(c, data)),
        move || {
            let data = bytes(data, len, "data")?;
            with_endpoint(ep, |s| {
                let c = s.connection(conn)?;
                Ok(s.endpoint.try_send(c, data)?)
            })
        },
    )
}

/// Sends the `len` bytes at `data` to `src`, the sender of a message this endpoint
/// received, on quiver_reply_connection(src): no connecting back. Blocking, as
/// quiver_send().
///
/// Errors: as quiver_reply_connection(), then as quiver_send().
#[no_mangle]
pub extern "C" fn quiver_reply(
    ep: quiver_endpoint,
    src: quiver_addr,
    data: *const c_void,
    len: usize,
) -> quiver_status {
    call(|| {
        let data = bytes(data, len, "data")?;
        with_endpoint(ep, |s| Ok(s.endpoint.reply(src.into(), data)?))
    })
}

/// Receives the next message from any peer into the `capacity` bytes at `buf`, blocking
/// until one arrives. `*len` gets its length and `*src` its sender (either may be NULL if
/// not wanted). `buf` may be NULL when `capacity` is 0.
///
/// Errors: QUIVER_ERR_BUFFER_TOO_SMALL (the message stays queued; `*len` holds its
/// length), QUIVER_ERR_PEER_DEAD, QUIVER_ERR_PEER_STOPPED, QUIVER_ERR_PEER_CLOSED,
/// QUIVER_ERR_CORRUPT, QUIVER_ERR_MESSAGE_TOO_LARGE, QUIVER_ERR_UNREACHABLE (each about one
/// connection, reported once; the others keep working), QUIVER_ERR_TIMEOUT,
/// QUIVER_ERR_INVALID_ARGUMENT (buf NULL), QUIVER_ERR_BAD_HANDLE, QUIVER_ERR_BUSY.
#[no_mangle]
pub extern "C" fn quiver_recv(
    ep: quiver_endpoint,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
    src: *mut quiver_addr,
) -> quiver_status {
    message_call(
        ep,
        |_| some_bytes_mut(buf, capacity),
        |s, buf| code(received(s.endpoint.recv(buf), len, src)),
        move || {
            let buf = bytes_mut(buf, capacity, "buf")?;
            with_endpoint(ep, |s| Ok(received(s.endpoint.recv(buf), len, src)?))
        },
    )
}

/// quiver_recv() if a message is complete now; QUIVER_ERR_WOULD_BLOCK otherwise (see
/// quiver_endpoint_arm() to sleep until one arrives). Non-blocking.
///
/// Errors: QUIVER_ERR_WOULD_BLOCK, then as quiver_recv().
#[no_mangle]
pub extern "C" fn quiver_try_recv(
    ep: quiver_endpoint,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
    src: *mut quiver_addr,
) -> quiver_status {
    message_call(
        ep,
        |_| some_bytes_mut(buf, capacity),
        |s, buf| code(received(s.endpoint.try_recv(buf), len, src)),
        move || {
            let buf = bytes_mut(buf, capacity, "buf")?;
            with_endpoint(ep, |s| Ok(received(s.endpoint.try_recv(buf), len, src)?))
        },
    )
}

/// The outputs of a receive: length and sender, or the message's length when the buffer
/// was too small.
#[inline]
fn received(
    got: Result<(usize, Addr), Error>,
    len: *mut usize,
    src: *mut quiver_addr,
) -> Result<(), Error> {
    match got {
        Ok((n, from)) => {
            put_optional(len, n);
            put_optional(src, from.into());
            Ok(())
        }
        Err(e) => {
            if let Error::BufferTooSmall { message, .. } = e {
                put_optional(len, message);
            }
            Err(e)
        }
    }
}
