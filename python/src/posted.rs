//! `quiver._quiver.Request`: a send or receive posted on the caller's buffer
//! (`Endpoint.post_send`, `Endpoint.post_recv_into`), completed with `test`, `wait` or
//! `cancel`. Each is one call of the Rust API's posted operations by number
//! (`post_send_from`, `post_recv_sized`, `wait_*_ready`, `finish_*`, `cancel_recv_into`;
//! decision 0097): a send's bytes are copied into a buffer of the endpoint's pool when it
//! is posted, a receive's message is copied into the caller's buffer when it completes,
//! as Rust's `Endpoint::scope` does, and no more.
//!
//! The request holds the buffer's export (`Py_buffer`) until it ends: the object cannot
//! be resized or freed meanwhile (a bytearray refuses to change size with `BufferError`
//! while it is exported), so the memory quiver writes at completion is where it was.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use rust_quiver::{Envelope, Error, RecvRequest, SendRequest};

use crate::buffer::Exported;
use crate::endpoint::Endpoint;
use crate::errors::{to_py, InvalidArgument};

/// The posted operation a request holds until it ends.
pub(crate) enum Op {
    Send(SendRequest),
    Recv(RecvRequest),
}

/// A buffer export a request holds.
struct Held(Exported);

// SAFETY: the export is only used and released by a `Request`'s methods and its drop, all
// of which run with the GIL held (PyO3 calls them so); methods that release the GIL lend
// only its bytes (`&mut [u8]`, which is Send) to the closure that runs without it, while
// the request itself stays borrowed (PyO3's borrow flag refuses a second borrow from
// another thread). So no two threads touch the export at once, and it is released where
// CPython requires.
unsafe impl Send for Held {}
// SAFETY: as above: every access goes through `&mut Request` under the GIL.
unsafe impl Sync for Held {}

/// A send or receive posted on the caller's buffer. `test()` tells whether it completed,
/// `wait()` waits for it (releasing the GIL) and returns its outcome (a receive's
/// (length, (rank, port) of the sender, tag); a send's None), `cancel()` ends it. The
/// buffer stays exported (it cannot be resized or freed) until the request ends.
#[pyclass(module = "quiver._quiver")]
pub(crate) struct Request {
    endpoint: Py<Endpoint>,
    /// The operation while it is posted; None once it ended.
    op: Option<Op>,
    /// The caller's buffer, exported until the request ends.
    buffer: Option<Held>,
    /// The outcome once it ended (returned by every later `wait`).
    outcome: Option<PyResult<Py<PyAny>>>,
}

impl Request {
    /// A request of `endpoint` for `op` on the caller's buffer `buffer`.
    pub(crate) fn new(endpoint: Py<Endpoint>, op: Op, buffer: Exported) -> Request {
        Request {
            endpoint,
            op: Some(op),
            buffer: Some(Held(buffer)),
            outcome: None,
        }
    }

    /// Records how the request ended and releases the buffer; the outcome.
    fn end(
        &mut self,
        py: Python<'_>,
        outcome: Result<Option<Envelope>, Error>,
    ) -> PyResult<Py<PyAny>> {
        self.buffer = None;
        let outcome = match outcome {
            Ok(Some(e)) => {
                let sender = (e.source.rank, e.source.port);
                (e.len as usize, sender, e.tag).into_py_any(py)
            }
            Ok(None) => Ok(py.None()),
            Err(e) => Err(to_py(py, e)),
        };
        let given = match &outcome {
            Ok(value) => Ok(value.clone_ref(py)),
            Err(e) => Err(e.clone_ref(py)),
        };
        self.outcome = Some(outcome);
        given
    }

    /// The outcome of a request that ended already.
    fn ended(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.outcome {
            Some(Ok(value)) => Ok(value.clone_ref(py)),
            Some(Err(e)) => Err(e.clone_ref(py)),
            None => Err(InvalidArgument::new_err("this request has no outcome")),
        }
    }
}

/// The caller's bytes that `op` completes into (none for a send).
fn into_for<'a>(buffer: &'a mut Option<Held>, op: &Op) -> &'a mut [u8] {
    match buffer {
        Some(Held(view)) if matches!(op, Op::Recv(_)) => view.bytes_mut(),
        _ => &mut [],
    }
}

/// Ends `op`, which has completed (or is completing): a receive's message copied into
/// `into`.
fn finish(
    ep: &mut rust_quiver::Endpoint,
    op: Op,
    into: &mut [u8],
) -> Result<Option<Envelope>, Error> {
    match op {
        Op::Send(request) => ep.finish_send(request).map(|()| None),
        Op::Recv(request) => ep.finish_recv_into(request, into).map(Some),
    }
}

#[pymethods]
impl Request {
    /// Whether the operation completed (advancing progress first); once True, `wait()`
    /// returns its outcome at once. Never blocks.
    fn test(&mut self, py: Python<'_>) -> PyResult<bool> {
        let Some(op) = &self.op else {
            return Ok(true);
        };
        let owner = self.endpoint.clone_ref(py);
        let endpoint = owner.bind(py).borrow();
        let mut ep = endpoint.try_lock()?;
        let done = match op {
            Op::Send(request) => ep.test_send(request),
            Op::Recv(request) => ep.test_recv(request),
        }
        .map_err(|e| to_py(py, e))?;
        if done {
            let op = self.op.take().expect("checked above");
            let into = into_for(&mut self.buffer, &op);
            let outcome = finish(&mut ep, op, into);
            drop(ep);
            // The outcome (an error too) is kept for `wait`.
            let _ = self.end(py, outcome);
        }
        Ok(done)
    }

    /// Waits for the operation to complete and returns its outcome: a receive's
    /// (length, (rank, port) of the sender, tag), its message at the start of the buffer;
    /// a send's None. Raises the operation's error (BufferTooSmall: the message stays
    /// queued; a peer error...). Past the endpoint's timeout it raises Timeout and the
    /// operation stays posted (wait again, or cancel). Releases the GIL.
    fn wait(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Some(op) = self.op.take() else {
            return self.ended(py);
        };
        let owner = self.endpoint.clone_ref(py);
        let endpoint = owner.bind(py).borrow();
        let shared: &Endpoint = &endpoint;
        let into = into_for(&mut self.buffer, &op);
        let result = py.detach(|| {
            let mut ep = match shared.lock() {
                Ok(ep) => ep,
                Err(e) => return Err((Some(op), e)),
            };
            let ready = match &op {
                Op::Send(request) => ep.wait_send_ready(request),
                Op::Recv(request) => ep.wait_recv_ready(request),
            };
            match ready {
                Ok(()) => Ok(finish(&mut ep, op, into)),
                Err(e) => Err((Some(op), e)),
            }
        });
        drop(endpoint);
        match result {
            Ok(outcome) => self.end(py, outcome),
            Err((op, e)) => {
                // Still posted: the wait itself failed (a timeout).
                self.op = op;
                Err(to_py(py, e))
            }
        }
    }

    /// Ends the operation without waiting for a message: True when it completed (a
    /// receive whose message had arrived or begun: it is in the buffer, and `wait()`
    /// returns its outcome; a send, which cannot be withdrawn and is waited for), False
    /// when a receive was withdrawn before its message came (the buffer is untouched;
    /// the message goes to a later receive). The buffer is released either way.
    fn cancel(&mut self, py: Python<'_>) -> PyResult<bool> {
        let Some(op) = self.op.take() else {
            return Ok(true);
        };
        let owner = self.endpoint.clone_ref(py);
        let endpoint = owner.bind(py).borrow();
        let mut ep = match endpoint.try_lock() {
            Ok(ep) => ep,
            Err(e) => {
                self.op = Some(op);
                return Err(e);
            }
        };
        let into = into_for(&mut self.buffer, &op);
        let outcome = match op {
            Op::Send(request) => ep.finish_send(request).map(|()| Some(None)),
            Op::Recv(request) => ep.cancel_recv_into(request, into).map(|got| got.map(Some)),
        };
        drop(ep);
        drop(endpoint);
        match outcome {
            Ok(None) => {
                self.buffer = None;
                self.outcome = Some(Err(InvalidArgument::new_err(
                    "this receive was cancelled before its message came",
                )));
                Ok(false)
            }
            Ok(Some(got)) => {
                self.end(py, Ok(got))?;
                Ok(true)
            }
            Err(e) => {
                let _ = self.end(py, Err(e));
                Ok(true)
            }
        }
    }

    /// Whether the request has ended (completed, failed or cancelled).
    #[getter]
    fn done(&self) -> bool {
        self.op.is_none()
    }

    fn __repr__(&self) -> String {
        let what = match &self.op {
            Some(Op::Send(_)) => "posted send",
            Some(Op::Recv(_)) => "posted receive",
            None => "ended",
        };
        format!("<quiver.Request {what}>")
    }
}

impl Drop for Request {
    /// A request dropped while posted: a receive is cancelled (the buffer is released
    /// after, so nothing is written into memory the caller gave up); a send finishes on
    /// its own. When another thread is inside the endpoint right now, the receive stays
    /// posted with the endpoint's own buffer (the caller's is released: it is never
    /// written) and takes the next message.
    fn drop(&mut self) {
        let Some(op) = self.op.take() else {
            return;
        };
        Python::attach(|py| {
            let owner = self.endpoint.clone_ref(py);
            let endpoint = owner.bind(py).borrow();
            let Ok(mut ep) = endpoint.try_lock() else {
                return;
            };
            let into = into_for(&mut self.buffer, &op);
            if let Op::Recv(request) = op {
                let _ = ep.cancel_recv_into(request, into);
            }
        });
    }
}
