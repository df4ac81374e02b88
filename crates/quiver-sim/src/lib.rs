//! quiver-sim: a deterministic network simulator for the reliable protocol core.
//!
//! Layer: test infrastructure on top of `quiver-proto` and `quiver-wire`; nothing ships
//! with it (`publish = false`). It owns a virtual clock, an event queue, lossy links and
//! scripted applications, and drives `quiver_proto::reliable::ReliableConnection`s exactly
//! as a real engine would, routing every datagram through the engine's own router
//! (`quiver_proto::router::Router`). It must not read the OS clock or any randomness other
//! than its seed: a run is a pure function of (seed, scenario), which is what makes a
//! failing seed replayable with `QUIVER_SIM_SEED=<seed>`.
//!
//! ```
//! use quiver_proto::reliable::ReliableConfig;
//! use quiver_sim::link::LinkConfig;
//! use quiver_sim::sim::{FlowConfig, Sim, StopReason};
//! use quiver_sim::workload::MessageScript;
//!
//! let mut sim = Sim::new(42);
//! let (a, b) = (sim.add_node(), sim.add_node());
//! let lossy = LinkConfig { loss_probability: 0.1, ..LinkConfig::default() };
//! sim.add_duplex_link(a, b, lossy);
//! let script = MessageScript::fixed(7, vec![0, 10, 100_000]);
//! let config = ReliableConfig { initial_rto_ns: 5_000_000, ..ReliableConfig::default() };
//! let flow = sim.add_flow(FlowConfig::new(a, b, config, script));
//! assert_eq!(sim.run_until(10_000_000_000), StopReason::AllFlowsSettled);
//! let report = sim.report();
//! assert_eq!(report.flows[flow.0].messages_received, 3);
//! println!("goodput {} B/s", report.flows[flow.0].goodput_bytes_per_second);
//! ```
//!
//! Modules: [`rng`] (the seeded PRNG), [`event`] (virtual clock and queue), [`link`] (the
//! network model), [`workload`] (scripted sender, verifying receiver), [`sim`] (nodes,
//! flows, run loop, invariants, report), [`seeds`] (many-seed runs and replay).
//!
//! Seed counts: the tests (`tests/scenarios.rs`, `tests/striping.rs`) sweep a default
//! number of seeds each, sized for CI (14 200 and 465 in all; `random_loss_30_percent`
//! 2000, `mixed_impairments`, with 0-30% loss, 1000; the `both_ways_*` sweeps, with data
//! both ways on each connection ([`sim::FlowConfig::answer`]), 4000). Longer sweeps find
//! what CI's do not: `QUIVER_SIM_SEEDS=1000 cargo test --release -p quiver-sim` (about 18
//! minutes of CPU, almost all of it striping) found seeds 163, 252, 967 and 990 of
//! `striping_receiver_pauses_cost_one_frame_each` failing, a receiver pause taken for a
//! dead link when the paths' queues differ (docs/striping.md, "Pauses"), which
//! `striping_receiver_pauses_with_unequal_queues` now reproduces at every seed. A sweep
//! runs all its seeds and names every failing one; `QUIVER_SIM_SEED_START` splits a long
//! sweep into runs ([`seeds`]).
#![forbid(unsafe_code)]

pub mod event;
pub mod link;
pub mod rng;
pub mod seeds;
pub mod sim;
pub mod workload;
