//! `quiver._quiver.Context`: one process's membership of a job.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_py;

/// One process's membership of a job; create it once per process with
/// `Context.from_env()` (under `quiver run`, mpirun or srun). Usable from any thread.
#[pyclass(frozen, module = "quiver._quiver")]
pub(crate) struct Context {
    pub(crate) inner: Arc<rust_quiver::Context>,
}

#[pymethods]
impl Context {
    /// The context of whatever launched this process (`quiver run`, PMIx, launcher
    /// variables with QUIVER_RENDEZVOUS), with the QUIVER_* settings of the environment.
    /// Blocks (without the GIL) while the bootstrap exchanges addresses.
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Context> {
        let ctx = py
            .detach(rust_quiver::Context::from_env)
            .map_err(|e| to_py(py, e))?;
        Ok(Context {
            inner: Arc::new(ctx),
        })
    }

    /// This process's rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.inner.rank()
    }

    /// The number of ranks in the job.
    #[getter]
    fn size(&self) -> u32 {
        self.inner.size()
    }

    /// The job's identifier.
    #[getter]
    fn job_id(&self) -> u64 {
        self.inner.job_id()
    }

    /// The listener's counters, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("connections_accepted", s.connections_accepted)?;
        d.set_item("connections_refused", s.connections_refused)?;
        d.set_item("connections_not_open", s.connections_not_open)?;
        d.set_item("shm_connections_accepted", s.shm_connections_accepted)?;
        d.set_item("shm_without_cross_memory", s.shm_without_cross_memory)?;
        d.set_item("accept_errors", s.accept_errors)?;
        d.set_item("handshakes_dropped", s.handshakes_dropped)?;
        d.set_item("pending_handshakes_peak", s.pending_handshakes_peak)?;
        d.set_item("last_refusal", s.last_refusal)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<quiver.Context rank {} of {}, job {:016x}>",
            self.inner.rank(),
            self.inner.size(),
            self.inner.job_id()
        )
    }
}
