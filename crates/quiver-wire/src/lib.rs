//! quiver-wire: the byte layouts quiver puts in shared memory and on the wire.
//!
//! Layer: the bottom. Depends on nothing of ours, does no I/O and no allocation.
//! Every format is a checked view over a byte buffer (`new_checked` validates lengths
//! once, after which accessors cannot panic) plus a parsed representation.
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod frame;
pub mod handshake;
pub mod rma;
pub mod rma_request;
pub mod shm_setup;
pub mod stream;
