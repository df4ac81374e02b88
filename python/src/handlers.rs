//! Active messages from Python: a callable registered for a handler id runs inside the
//! endpoint's calls that take messages in, with an `ActiveMessage` (sender, id, header and
//! payload as bytes, and `reply`/`reply_am`, usable during the call only).
//!
//! GIL: the call that runs a handler may have released the GIL (a blocking receive); the
//! handler takes it for its own call. A handler's exception ends the call that ran it and
//! is raised from there, as itself.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::thread::ThreadId;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rust_quiver::{Addr, Endpoint, Error};

use crate::buffer::Exported;
use crate::errors::{to_py, InvalidArgument};

type Peer = (u32, u16);

thread_local! {
    /// The endpoint whose handler this thread runs now.
    static RUNNING_ON: Cell<Option<Addr>> = const { Cell::new(None) };
    /// A handler's exception and the text of the error it became, until the call that
    /// ran it raises it (`raised`).
    static RAISED: RefCell<Option<(String, PyErr)>> = const { RefCell::new(None) };
}

/// Whether this thread runs a handler of the endpoint at `addr` now (whose lock it holds).
pub(crate) fn running_on(addr: Addr) -> bool {
    RUNNING_ON.get() == Some(addr)
}

/// The exception a handler raised, if `e` is the error it became.
pub(crate) fn raised(e: &Error) -> Option<PyErr> {
    let Error::InvalidArgument(text) = e else {
        return None;
    };
    RAISED.with(|r| {
        let mut r = r.borrow_mut();
        match &*r {
            Some((failed, _)) if failed == text => r.take().map(|(_, err)| err),
            _ => None,
        }
    })
}

/// An active message as a Python handler sees it: `source` ((rank, port)), `id`,
/// `header` and `payload` (bytes, copies: keep them as long as you like); `reply(data)`
/// and `reply_am(id, header, payload)` answer the sender, during the handler's call only.
#[pyclass(frozen, module = "quiver._quiver")]
pub(crate) struct ActiveMessage {
    source: Addr,
    id: u16,
    header: Py<PyBytes>,
    payload: Py<PyBytes>,
    /// The endpoint running the handler, while it runs (null afterwards).
    endpoint: AtomicPtr<Endpoint>,
    /// The thread running the handler: the only one that may reply.
    thread: ThreadId,
}

impl ActiveMessage {
    /// Runs `f` on the endpoint running the handler (only while it runs).
    fn on_endpoint(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Endpoint) -> Result<(), Error>,
    ) -> PyResult<()> {
        let ep = self.endpoint.load(Ordering::Relaxed);
        if ep.is_null() || std::thread::current().id() != self.thread {
            return Err(InvalidArgument::new_err(
                "reply only inside the active message's handler, on its thread (this one has \
                 returned, or runs on another thread)",
            ));
        }
        // SAFETY: non-null only while the handler runs (`run` clears it before it
        // returns), and used only on the thread running it (checked above): the pointer
        // came from the `&mut Endpoint` the handler was called with, which nothing else
        // uses until the handler returns; the reference lives for this call only.
        f(unsafe { &mut *ep }).map_err(|e| to_py(py, e))
    }
}

#[pymethods]
impl ActiveMessage {
    /// The sender's (rank, port).
    #[getter]
    fn source(&self) -> Peer {
        (self.source.rank, self.source.port)
    }

    /// The handler id the sender named.
    #[getter]
    fn id(&self) -> u16 {
        self.id
    }

    /// The header (bytes).
    #[getter]
    fn header(&self, py: Python<'_>) -> Py<PyBytes> {
        self.header.clone_ref(py)
    }

    /// The payload (bytes).
    #[getter]
    fn payload(&self, py: Python<'_>) -> Py<PyBytes> {
        self.payload.clone_ref(py)
    }

    /// Answers the sender with a plain message (any buffer), on the connection the
    /// message came in on; never waits (what cannot go now is queued).
    fn reply(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let view = Exported::readable(data)?;
        self.on_endpoint(py, |ep| ep.reply(self.source, view.bytes()))
    }

    /// Answers the sender with an active message for its handler `id`; never waits.
    #[pyo3(signature = (id, header, payload = None))]
    fn reply_am(
        &self,
        py: Python<'_>,
        id: u16,
        header: &Bound<'_, PyAny>,
        payload: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let header = Exported::readable(header)?;
        let payload = payload.map(Exported::readable).transpose()?;
        let payload = payload.as_ref().map_or(&[][..], Exported::bytes);
        self.on_endpoint(py, |ep| {
            ep.reply_am(self.source, id, header.bytes(), payload)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<quiver.ActiveMessage for handler {} from {}>",
            self.id, self.source
        )
    }
}

/// Runs `handler` for message `m` of endpoint `ep`, taking the GIL for the call.
pub(crate) fn run(
    handler: &Py<PyAny>,
    ep: &mut Endpoint,
    m: &rust_quiver::ActiveMessage<'_>,
) -> Result<(), Error> {
    let outer = RUNNING_ON.replace(Some(ep.addr()));
    let result = Python::attach(|py| {
        let message = ActiveMessage {
            source: m.source(),
            id: m.id(),
            header: PyBytes::new(py, m.header()).unbind(),
            payload: PyBytes::new(py, m.payload()).unbind(),
            endpoint: AtomicPtr::new(ep),
            thread: std::thread::current().id(),
        };
        let message = match Bound::new(py, message) {
            Ok(message) => message,
            Err(e) => return Err(stash(m, e)),
        };
        let result = handler.call1(py, (message.clone(),));
        message
            .get()
            .endpoint
            .store(std::ptr::null_mut(), Ordering::Relaxed);
        result.map(drop).map_err(|e| stash(m, e))
    });
    RUNNING_ON.set(outer);
    result
}

/// Keeps a handler's exception for the call that ran it; the error it becomes.
fn stash(m: &rust_quiver::ActiveMessage<'_>, e: PyErr) -> Error {
    let text = format!(
        "active-message handler {} (message from {}) raised an exception",
        m.id(),
        m.source()
    );
    RAISED.with(|r| *r.borrow_mut() = Some((text.clone(), e)));
    Error::InvalidArgument(text)
}
