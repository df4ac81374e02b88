//! The library under the `quiver` command: the local launcher's process handling
//! ([`launch`]) and the bench's machinery ([`bench`](mod@bench)): plans, the two ranks,
//! the tests between them, typed records, the report and plots.
//!
//! Layer: on top of quiver's public API; it adds no protocol logic. The `quiver` binary
//! (`run`, `bench`, `info`, `tune`) is built on it, and so is the measurement lab
//! (`quiver-bench`), which depends on this crate and never the other way round.

pub mod bench;
pub mod launch;
pub mod process;
pub mod provenance;

pub use process::init_process;
