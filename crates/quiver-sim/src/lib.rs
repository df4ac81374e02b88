//! quiver-sim: a deterministic network simulator for the reliable protocol core.
//!
//! Layer: test infrastructure on top of `quiver-proto` and `quiver-wire`; nothing ships
//! with it (`publish = false`). It owns a virtual clock, an event queue, lossy links and
//! scripted applications, and drives `quiver_proto::reliable::ReliableConnection`s exactly
//! as a real engine would. It must not read the OS clock or any randomness other than its
//! seed: a run is a pure function of (seed, scenario), which is what makes a failing seed
//! replayable with `QUIVER_SIM_SEED=<seed>`.
#![forbid(unsafe_code)]

pub mod event;
pub mod link;
pub mod rng;
pub mod seeds;
pub mod sim;
pub mod workload;
