//! `quiver._quiver.Endpoint` and `Connection`: connect, reply, close, sends from and
//! receives into buffer-protocol objects, tagged sends, matching receives and probes,
//! the descriptor and readiness, timeouts.
//!
//! Every call that may block runs without the GIL (`Python::detach`), so other Python
//! threads run meanwhile; the endpoint itself sits behind a mutex taken inside that
//! closure. Calls that never block (try_*, arm, progress) keep the GIL and only try the
//! mutex: another thread inside the endpoint is `EndpointBusy`, never a deadlock with a
//! thread that waits for the GIL.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rust_quiver::{Addr, Envelope, Error, MatchSpec};

use crate::buffer::Exported;
use crate::context::Context;
use crate::errors::{to_py, EndpointBusy, InvalidArgument, QuiverError};
use crate::posted::{Op, Request};

/// A connection of one endpoint to a peer endpoint (`peer` is its (rank, port)).
#[pyclass(frozen, eq, hash, module = "quiver._quiver")]
#[derive(PartialEq, Eq, Hash)]
pub(crate) struct Connection {
    conn: rust_quiver::Connection,
}

#[pymethods]
impl Connection {
    /// The (rank, port) of the endpoint at the other end.
    #[getter]
    fn peer(&self) -> (u32, u16) {
        let p = self.conn.peer();
        (p.rank, p.port)
    }

    fn __repr__(&self) -> String {
        format!("<quiver.Connection to {}>", self.conn.peer())
    }
}

/// An endpoint (rank, port) of this process: `Endpoint(ctx, port)` opens it. Driven by
/// one thread at a time; give each thread its own.
#[pyclass(subclass, module = "quiver._quiver")]
pub(crate) struct Endpoint {
    inner: Mutex<rust_quiver::Endpoint>,
    fd: i32,
    addr: Addr,
    _context: Arc<rust_quiver::Context>,
}

type Peer = (u32, u16);

fn addr((rank, port): Peer) -> Addr {
    Addr::new(rank, port)
}

fn peer(a: Addr) -> Peer {
    (a.rank, a.port)
}

impl Endpoint {
    /// The endpoint, waiting for another thread's call to end (call without the GIL). A
    /// handler of this endpoint (whose thread holds it) gets InHandler, not a deadlock.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, rust_quiver::Endpoint>, Error> {
        match self.inner.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::WouldBlock) if crate::handlers::running_on(self.addr) => {
                Err(Error::InHandler {
                    call: "a blocking call of the endpoint whose handler is running",
                })
            }
            Err(TryLockError::WouldBlock) => self.inner.lock().map_err(|_| broken()),
            Err(TryLockError::Poisoned(_)) => Err(broken()),
        }
    }

    /// The endpoint if no other thread is inside it (call with the GIL).
    pub(crate) fn try_lock(&self) -> PyResult<MutexGuard<'_, rust_quiver::Endpoint>> {
        match self.inner.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::WouldBlock) => Err(EndpointBusy::new_err(format!(
                "endpoint {} is in use by another thread (blocked in a call): an endpoint is \
                 driven by one thread at a time; give each thread its own",
                self.addr
            ))),
            Err(TryLockError::Poisoned(_)) => Err(QuiverError::new_err(broken().to_string())),
        }
    }
}

/// What a matching receive or probe takes: `tag` None is any tag (and needs no mask); a
/// tag alone is that tag exactly; with a mask, the tags that agree with it on the mask's
/// bits. `source` None is any sender.
fn match_spec(tag: Option<u64>, mask: Option<u64>, source: Option<Peer>) -> PyResult<MatchSpec> {
    let (tag, mask) = match (tag, mask) {
        (None, None) => (0, 0),
        (Some(tag), None) => (tag, u64::MAX),
        (Some(tag), Some(mask)) => (tag, mask),
        (None, Some(mask)) => {
            return Err(InvalidArgument::new_err(format!(
                "mask {mask:#x} without a tag: give the tag whose masked bits must match"
            )))
        }
    };
    Ok(MatchSpec {
        source: source.map(addr),
        tag,
        mask,
    })
}

/// The exact match of a probed message: from its sender, with its tag. It takes the
/// message the probe saw: of one sender's messages with that tag, the probed one is the
/// earliest (unless another thread posts a receive that claims it between the two).
fn exactly(e: &Envelope) -> MatchSpec {
    MatchSpec::tag(e.tag).from(e.source)
}

fn envelope(e: Envelope) -> (Peer, u64, u64) {
    (peer(e.source), e.tag, e.len)
}

fn broken() -> Error {
    Error::InvalidArgument(
        "this endpoint failed internally in an earlier call (a bug in quiver: please report \
         it); open another"
            .into(),
    )
}

#[pymethods]
impl Endpoint {
    /// Opens endpoint `port` of this rank; peers reach it at (rank, port).
    #[new]
    #[pyo3(signature = (ctx, port = 0))]
    fn new(py: Python<'_>, ctx: &Context, port: u16) -> PyResult<Endpoint> {
        let ep = ctx.inner.endpoint(port).map_err(|e| to_py(py, e))?;
        Ok(Endpoint {
            fd: ep.as_raw_fd(),
            addr: ep.addr(),
            inner: Mutex::new(ep),
            _context: ctx.inner.clone(),
        })
    }

    /// This endpoint's (rank, port).
    #[getter]
    fn addr(&self) -> Peer {
        peer(self.addr)
    }

    /// The endpoint's descriptor for select/poll/asyncio (see `arm`).
    fn fileno(&self) -> i32 {
        self.fd
    }

    /// Opens (or returns) the connection to the endpoint at `peer` = (rank, port); waits
    /// up to the connect timeout for it to open. Releases the GIL.
    fn connect(&self, py: Python<'_>, peer: Peer) -> PyResult<Connection> {
        py.detach(|| self.lock()?.connect(addr(peer)))
            .map(|conn| Connection { conn })
            .map_err(|e| to_py(py, e))
    }

    /// The connection that answers `src`, a sender whose message this endpoint received
    /// (no connecting back). Releases the GIL.
    fn reply_connection(&self, py: Python<'_>, src: Peer) -> PyResult<Connection> {
        py.detach(|| self.lock()?.reply_connection(addr(src)))
            .map(|conn| Connection { conn })
            .map_err(|e| to_py(py, e))
    }

    /// Closes `conn` (its sends finish first; the peer sees a clean end). Releases the GIL.
    fn close(&self, py: Python<'_>, conn: &Connection) -> PyResult<()> {
        py.detach(|| self.lock()?.close(conn.conn))
            .map_err(|e| to_py(py, e))
    }

    /// Sends the bytes of `data` (any contiguous buffer: bytes, bytearray, memoryview,
    /// numpy arrays...) as one message, without copying them; blocks until quiver is done
    /// with them. Releases the GIL.
    fn send(&self, py: Python<'_>, conn: &Connection, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let view = Exported::readable(data)?;
        let bytes = view.bytes();
        py.detach(|| self.lock()?.send(conn.conn, bytes))
            .map_err(|e| to_py(py, e))
    }

    /// `send` only if it needs no waiting; raises WouldBlock otherwise (nothing sent).
    fn try_send(&self, py: Python<'_>, conn: &Connection, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let view = Exported::readable(data)?;
        self.try_lock()?
            .try_send(conn.conn, view.bytes())
            .map_err(|e| to_py(py, e))
    }

    /// Sends `data` to `src`, the sender of a received message, on the connection it came
    /// in on. Releases the GIL.
    fn reply(&self, py: Python<'_>, src: Peer, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let view = Exported::readable(data)?;
        let bytes = view.bytes();
        py.detach(|| self.lock()?.reply(addr(src), bytes))
            .map_err(|e| to_py(py, e))
    }

    /// Receives the next message into `buf` (any writable contiguous buffer), blocking;
    /// returns (length, (rank, port) of the sender). Raises BufferTooSmall (the message
    /// stays queued; `.message_len` is its length). Releases the GIL.
    fn recv_into(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<(usize, Peer)> {
        let mut view = Exported::writable(buf)?;
        let bytes = view.bytes_mut();
        py.detach(|| self.lock()?.recv(bytes))
            .map(|(n, src)| (n, peer(src)))
            .map_err(|e| to_py(py, e))
    }

    /// `recv_into` if a message is complete now; raises WouldBlock otherwise.
    fn try_recv_into(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<(usize, Peer)> {
        let mut view = Exported::writable(buf)?;
        self.try_lock()?
            .try_recv(view.bytes_mut())
            .map(|(n, src)| (n, peer(src)))
            .map_err(|e| to_py(py, e))
    }

    /// Receives the next message, blocking; returns (bytes, (rank, port) of the sender).
    /// The message is copied once, from the endpoint's pool into the bytes object
    /// (`recv_into` avoids that copy). Releases the GIL.
    fn recv<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyBytes>, Peer)> {
        let got = py
            .detach(|| self.lock()?.recv_pooled())
            .map_err(|e| to_py(py, e))?;
        Ok((PyBytes::new(py, &got), peer(got.src())))
    }

    /// `recv` if a message is complete now; raises WouldBlock otherwise.
    fn try_recv<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyBytes>, Peer)> {
        let got = self
            .try_lock()?
            .try_recv_pooled()
            .map_err(|e| to_py(py, e))?;
        Ok((PyBytes::new(py, &got), peer(got.src())))
    }

    /// Sends the bytes of `data` as one message with `tag` (an int, 0 ..= 2**64-1), as
    /// `send` does; `send` is tag 0. Tags travel over every transport. Releases the GIL.
    fn send_tagged(
        &self,
        py: Python<'_>,
        conn: &Connection,
        tag: u64,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let view = Exported::readable(data)?;
        let bytes = view.bytes();
        py.detach(|| self.lock()?.send_tagged(conn.conn, tag, bytes))
            .map_err(|e| to_py(py, e))
    }

    /// `send_tagged` only if it needs no waiting; raises WouldBlock otherwise.
    fn try_send_tagged(
        &self,
        py: Python<'_>,
        conn: &Connection,
        tag: u64,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let view = Exported::readable(data)?;
        self.try_lock()?
            .try_send_tagged(conn.conn, tag, view.bytes())
            .map_err(|e| to_py(py, e))
    }

    /// Receives the earliest message that matches into `buf` (any writable contiguous
    /// buffer), blocking; returns (length, (rank, port) of the sender, tag). Matches: from
    /// `source` (None: anyone), with `tag` (None: any tag; with `mask`, the tags that agree
    /// with `tag` on the mask's bits). Messages that do not match wait, in order, for a
    /// later receive. Raises BufferTooSmall (the message stays queued). Releases the GIL.
    #[pyo3(signature = (buf, tag = None, *, mask = None, source = None))]
    fn recv_into_matching(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<(usize, Peer, u64)> {
        let spec = match_spec(tag, mask, source)?;
        let mut view = Exported::writable(buf)?;
        let bytes = view.bytes_mut();
        py.detach(|| self.lock()?.recv_matching(spec, bytes))
            .map(|e| (e.len as usize, peer(e.source), e.tag))
            .map_err(|e| to_py(py, e))
    }

    /// `recv_into_matching` if a matching message is complete now; raises WouldBlock
    /// otherwise.
    #[pyo3(signature = (buf, tag = None, *, mask = None, source = None))]
    fn try_recv_into_matching(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<(usize, Peer, u64)> {
        let spec = match_spec(tag, mask, source)?;
        let mut view = Exported::writable(buf)?;
        self.try_lock()?
            .try_recv_matching(spec, view.bytes_mut())
            .map(|e| (e.len as usize, peer(e.source), e.tag))
            .map_err(|e| to_py(py, e))
    }

    /// Receives the earliest message that matches (as `recv_into_matching`), blocking;
    /// returns (bytes, (rank, port) of the sender, tag). The message is probed, then
    /// received straight into the new bytes object (no copy beyond the Rust API's own).
    /// Releases the GIL.
    #[pyo3(signature = (tag = None, *, mask = None, source = None))]
    fn recv_matching<'py>(
        &self,
        py: Python<'py>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<(Bound<'py, PyBytes>, Peer, u64)> {
        let spec = match_spec(tag, mask, source)?;
        let seen = py
            .detach(|| self.lock()?.probe(spec))
            .map_err(|e| to_py(py, e))?;
        let data = PyBytes::new_with(py, seen.len as usize, |buf| {
            py.detach(|| self.lock()?.recv_matching(exactly(&seen), buf))
                .map(drop)
                .map_err(|e| to_py(py, e))
        })?;
        Ok((data, peer(seen.source), seen.tag))
    }

    /// `recv_matching` if a matching message is complete now; raises WouldBlock otherwise.
    #[pyo3(signature = (tag = None, *, mask = None, source = None))]
    fn try_recv_matching<'py>(
        &self,
        py: Python<'py>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<(Bound<'py, PyBytes>, Peer, u64)> {
        let spec = match_spec(tag, mask, source)?;
        let mut ep = self.try_lock()?;
        let seen = ep.try_probe(spec).map_err(|e| to_py(py, e))?;
        let data = PyBytes::new_with(py, seen.len as usize, |buf| {
            ep.try_recv_matching(exactly(&seen), buf)
                .map(drop)
                .map_err(|e| to_py(py, e))
        })?;
        Ok((data, peer(seen.source), seen.tag))
    }

    /// Waits for the earliest message that matches (as `recv_into_matching`) and returns
    /// ((rank, port) of the sender, tag, length) without taking it: size a buffer, then
    /// receive it. Releases the GIL.
    #[pyo3(signature = (tag = None, *, mask = None, source = None))]
    fn probe(
        &self,
        py: Python<'_>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<(Peer, u64, u64)> {
        let spec = match_spec(tag, mask, source)?;
        py.detach(|| self.lock()?.probe(spec))
            .map(envelope)
            .map_err(|e| to_py(py, e))
    }

    /// `probe` without waiting: raises WouldBlock when no matching message is complete.
    #[pyo3(signature = (tag = None, *, mask = None, source = None))]
    fn try_probe(
        &self,
        py: Python<'_>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<(Peer, u64, u64)> {
        let spec = match_spec(tag, mask, source)?;
        self.try_lock()?
            .try_probe(spec)
            .map(envelope)
            .map_err(|e| to_py(py, e))
    }

    /// Registers `handler` (a callable taking an ActiveMessage) for active messages with
    /// `id` (0 ..= 65535), replacing the one registered for it. It runs on the thread
    /// that drives this endpoint, inside whichever call takes the message in (`progress`,
    /// a receive, a probe), with the GIL taken for its call. It must not block: inside
    /// it, this endpoint's calls that block, receive or advance progress raise InHandler
    /// (or EndpointBusy); it answers with the message's `reply`/`reply_am`. An exception
    /// it raises is raised by the call that ran it.
    fn register_handler(&self, py: Python<'_>, id: u16, handler: Py<PyAny>) -> PyResult<()> {
        if !handler.bind(py).is_callable() {
            return Err(InvalidArgument::new_err(format!(
                "handler for id {id} is not callable"
            )));
        }
        self.try_lock()?
            .register_handler(id, move |ep, m| crate::handlers::run(&handler, ep, m))
            .map_err(|e| to_py(py, e))
    }

    /// Removes the handler of `id`; whether there was one.
    fn unregister_handler(&self, id: u16) -> PyResult<bool> {
        Ok(self.try_lock()?.unregister_handler(id))
    }

    /// Sends an active message for handler `id` of the receiving endpoint: `header` then
    /// `payload` (any buffers, not copied by the binding), blocking as `send`. Over shm
    /// and tcp. Releases the GIL.
    #[pyo3(signature = (conn, id, header, payload = None))]
    fn send_am(
        &self,
        py: Python<'_>,
        conn: &Connection,
        id: u16,
        header: &Bound<'_, PyAny>,
        payload: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let header = Exported::readable(header)?;
        let payload = payload.map(Exported::readable).transpose()?;
        let (h, p) = (
            header.bytes(),
            payload.as_ref().map_or(&[][..], Exported::bytes),
        );
        py.detach(|| self.lock()?.send_am(conn.conn, id, h, p))
            .map_err(|e| to_py(py, e))
    }

    /// `send_am` only if it needs no waiting; raises WouldBlock otherwise.
    #[pyo3(signature = (conn, id, header, payload = None))]
    fn try_send_am(
        &self,
        py: Python<'_>,
        conn: &Connection,
        id: u16,
        header: &Bound<'_, PyAny>,
        payload: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let header = Exported::readable(header)?;
        let payload = payload.map(Exported::readable).transpose()?;
        let p = payload.as_ref().map_or(&[][..], Exported::bytes);
        self.try_lock()?
            .try_send_am(conn.conn, id, header.bytes(), p)
            .map_err(|e| to_py(py, e))
    }

    /// The endpoint's active-message counters, as a dict.
    fn am_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let s = self.try_lock()?.am_stats();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("handled", s.handled)?;
        d.set_item("unknown_handler", s.unknown_handler)?;
        d.set_item("malformed", s.malformed)?;
        d.set_item("refused_calls", s.refused_calls)?;
        d.set_item("replies_queued", s.replies_queued)?;
        d.set_item("replies_failed", s.replies_failed)?;
        Ok(d)
    }

    /// Posts a send of the bytes of `data` (any contiguous buffer) on `conn`, with `tag`
    /// (None: untagged, as `send`); returns the Request (`wait`, `test`, `cancel`). The
    /// bytes are copied into a buffer of the endpoint's pool now (as Rust's posted sends
    /// on caller memory do); `data` stays exported (it cannot be resized) until the
    /// request ends. Never blocks.
    #[pyo3(signature = (conn, data, tag = None))]
    fn post_send(
        slf: &Bound<'_, Self>,
        conn: &Connection,
        data: &Bound<'_, PyAny>,
        tag: Option<u64>,
    ) -> PyResult<Request> {
        let py = slf.py();
        let view = Exported::readable(data)?;
        let request = slf
            .borrow()
            .try_lock()?
            .post_send_from(conn.conn, tag, view.bytes())
            .map_err(|e| to_py(py, e))?;
        Ok(Request::new(slf.clone().unbind(), Op::Send(request), view))
    }

    /// Posts a receive into `buf` (any writable contiguous buffer) of the next message,
    /// or, given `tag`, `mask` or `source`, of the earliest message they match (as
    /// `recv_into_matching`); returns the Request, whose `wait()` gives (length, (rank,
    /// port) of the sender, tag) with the message at the start of `buf`. Posted receives
    /// take messages in the order they were posted, before `recv` gets any. `buf` stays
    /// exported until the request ends: it cannot be resized meanwhile (a bytearray
    /// raises BufferError), and quiver writes it only when the request completes. Never
    /// blocks.
    #[pyo3(signature = (buf, tag = None, *, mask = None, source = None))]
    fn post_recv_into(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<Request> {
        let py = slf.py();
        let spec = match (tag, mask, source) {
            (None, None, None) => None,
            _ => Some(match_spec(tag, mask, source)?),
        };
        let mut view = Exported::writable(buf)?;
        let capacity = view.bytes_mut().len();
        let request = slf
            .borrow()
            .try_lock()?
            .post_recv_sized(spec, capacity)
            .map_err(|e| to_py(py, e))?;
        Ok(Request::new(slf.clone().unbind(), Op::Recv(request), view))
    }

    /// `arm` for a loop that waits for a message `tag`, `mask` and `source` match (as
    /// `recv_into_matching`): messages waiting in the endpoint that they do not match do
    /// not count, so the descriptor is armed while they wait. False when a matching
    /// message (or anything else `arm` reports) is already there.
    #[pyo3(signature = (tag = None, *, mask = None, source = None))]
    fn arm_matching(
        &self,
        py: Python<'_>,
        tag: Option<u64>,
        mask: Option<u64>,
        source: Option<Peer>,
    ) -> PyResult<bool> {
        let spec = match_spec(tag, mask, source)?;
        self.try_lock()?
            .arm_matching(spec)
            .map_err(|e| to_py(py, e))
    }

    /// Prepares the descriptor (`fileno`) for sleeping in select/poll/asyncio: True when
    /// the descriptor will become readable as soon as a message arrives; False when one
    /// is already waiting (receive it instead of sleeping).
    fn arm(&self, py: Python<'_>) -> PyResult<bool> {
        self.try_lock()?.arm().map_err(|e| to_py(py, e))
    }

    /// Advances the work in flight once without waiting.
    fn progress(&self, py: Python<'_>) -> PyResult<()> {
        self.try_lock()?.progress().map_err(|e| to_py(py, e))
    }

    /// The bound of blocking calls in seconds (None: as long as the peers live); raises
    /// Timeout past it.
    #[getter]
    fn timeout(&self) -> PyResult<Option<f64>> {
        Ok(self.try_lock()?.timeout().map(|t| t.as_secs_f64()))
    }

    #[setter]
    fn set_timeout(&self, seconds: Option<f64>) -> PyResult<()> {
        let timeout = match seconds {
            Some(s) if !(s >= 0.0 && s.is_finite()) => {
                return Err(crate::errors::InvalidArgument::new_err(format!(
                    "timeout {s}: must be a finite number of seconds >= 0, or None"
                )))
            }
            Some(s) => Some(Duration::from_secs_f64(s)),
            None => None,
        };
        self.try_lock()?.set_timeout(timeout);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("<quiver.Endpoint {}>", self.addr)
    }
}
