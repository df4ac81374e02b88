//! A UDP socket driven through io_uring: sends queued as submission entries and submitted
//! together (one `io_uring_enter` per flush, none at all with SQPOLL), large datagrams sent
//! from a registered buffer (`IORING_OP_SEND_ZC` with a fixed buffer), and one multishot
//! `IORING_OP_RECVMSG` that keeps receiving into a ring of provided buffers, so that a
//! datagram is read where the kernel put it, with no system call per receive.
//!
//! Layer: operating-system side of the udp transport, beside [`crate::udp`]. It moves
//! datagrams and nothing else: no frame format, no connection state, no retries (a
//! datagram the kernel refuses is counted and lost, as on a plain socket). Uses the
//! `io-uring` crate (tokio-rs) for the ring's layout and system calls; the `unsafe` here is
//! around what that crate cannot check (memory the kernel reads or writes after a call
//! returns), each block with its `SAFETY:` comment. Why io_uring and why this crate:
//! docs/decisions/0084-io-uring-udp-engine.md.
//!
//! # Files
//!
//! - `socket.rs`: [`UringUdpSocket`]: setup (and the typed refusal when io_uring is not
//!   available: [`UringUnavailable`]), sends, the completion queue, receives.
//! - `buffers.rs`: the provided buffer ring the multishot receive takes buffers from, and a
//!   received datagram's buffer ([`RxBuffer`]).
//! - `arena.rs`: the transmit arena (registered): datagrams copied in, freed as their
//!   completions arrive.

mod arena;
mod buffers;
mod socket;

pub use buffers::RxBuffer;
pub use socket::{
    RxDatagram, UringOptions, UringStats, UringUdpSocket, UringUnavailable, ZERO_COPY_MIN_BYTES,
};

#[cfg(test)]
mod tests;
