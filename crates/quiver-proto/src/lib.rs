//! quiver-proto: the sans-IO protocol core.
//!
//! Layer: above `quiver-wire`, below transports. No I/O, no clock, no randomness of its
//! own: time and random bytes are inputs.
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod handshake;
pub mod reliable;
pub mod router;
