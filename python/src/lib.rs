//! quiver for Python: the extension module `quiver._quiver` under the `quiver` package
//! (python/quiver/__init__.py adds the asyncio methods and re-exports).
//!
//! Layer: bindings on top of the public Rust API (`quiver-hpc`), thin: each method
//! converts its arguments, releases the GIL around any call that may block, and turns the
//! Rust error into the exception class of the same name ([`errors`]).
//! Buffers: sends read from, `recv_into` writes into, the caller's object through the
//! buffer protocol ([`buffer`]), with no copy beyond the Rust API's own.
//! [Decision 0087](../../docs/decisions/0087-python-package.md) says why it is built so.

use pyo3::prelude::*;

mod buffer;
mod context;
mod endpoint;
mod errors;
mod handlers;
mod posted;

/// The extension module: Context, Endpoint, Connection and the exception classes.
#[pymodule]
fn _quiver(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<context::Context>()?;
    m.add_class::<endpoint::Endpoint>()?;
    m.add_class::<endpoint::Connection>()?;
    m.add_class::<handlers::ActiveMessage>()?;
    m.add_class::<posted::Request>()?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
