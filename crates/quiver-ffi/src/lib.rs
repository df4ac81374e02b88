//! quiver's C ABI: `libquiver.so` / `libquiver.a` and the header `include/quiver.h`
//! (generated from this crate by cbindgen).
//!
//! Layer: bindings on top of the public Rust API (`quiver-hpc`), thin: every function
//! checks its arguments, finds its handle, calls one method of the Rust API and turns the
//! outcome into a [`quiver_status`](status::quiver_status). No protocol logic lives here.
//!
//! The boundary's rules ([decision 0086](../../docs/decisions/0086-c-abi.md)):
//! - handles are numbers into tables ([`handles`]), never pointers, so a zeroed, freed,
//!   made-up or another table's handle is an error (`QUIVER_ERR_BAD_HANDLE`), not a crash;
//!   an endpoint's slot is taken for the call (leased to the thread that uses it, entered
//!   with plain loads and stores; taken from it by compare-and-swap and a process-wide
//!   barrier, decision 0104), so two threads in one endpoint get `QUIVER_ERR_BUSY`
//!   instead of a data race;
//! - no panic crosses: every entry runs inside `catch_unwind` ([`boundary`]);
//! - errors are codes, with a thread-local message ([`status`]);
//! - buffers are the caller's: sends read from, receives write into the caller's memory
//!   with no copy beyond the Rust API's own; posted operations ([`posted`]) keep the
//!   caller's pointer until the request ends, under the contract the header states.
//!
//! `unsafe` is allowed here, and only here among quiver's API crates: raw pointers from C
//! become slices and output writes, each block with its `// SAFETY:` reasoning.
#![allow(non_camel_case_types)]

pub mod am;
pub mod boundary;
pub mod context;
pub mod endpoint;
pub mod handles;
pub mod messages;
pub mod posted;
pub mod requests;
pub mod status;
pub mod tagged;
