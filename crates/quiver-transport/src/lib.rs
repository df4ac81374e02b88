//! quiver-transport: moving bytes between processes.
//!
//! Layer: below the public `quiver` crate, above `quiver-wire`/`quiver-proto`. This crate
//! owns the operating-system side of the shared-memory transport: shared rings ([`ring`]),
//! wake-ups ([`notify`]), the pollable descriptor of an endpoint ([`readiness`]) and the system calls behind them ([`sys`]), plus the
//! socket layer of the network transports: batched UDP with GSO/GRO ([`udp`]) and TCP
//! helpers ([`tcp`]), and the node's interface addresses and network namespaces ([`netif`],
//! for bootstraps). It is one of the few
//! places where `unsafe` is allowed, because it maps memory shared with other processes and
//! makes system calls; each block carries a `SAFETY:` comment. It decides nothing about
//! protocols (which path a message takes is the caller's choice).

pub mod barrier;
pub mod caller;
pub mod netif;
pub mod notify;
pub mod readiness;
pub mod region;
pub mod ring;
pub mod seccomp;
pub mod sys;
pub mod tcp;
pub mod udp;
pub mod uring;
pub mod xdp;
