//! The transports of a context: each owns its sockets or rings, its connection setup, its
//! driver and its statistics.
//!
//! Layer: below the endpoint, above `quiver-proto` (protocol state machines) and
//! `quiver-transport` (system calls). A transport must not reach into an endpoint's state.

pub(crate) mod dgram;
pub(crate) mod fault;
