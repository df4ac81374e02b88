//! Checks of the checker: runs that must fail, to prove the simulator's invariants bite.

use std::panic::{catch_unwind, AssertUnwindSafe};

use quiver_proto::reliable::ReliableConfig;
use quiver_sim::event::{MICROSECOND_NS, SECOND_NS};
use quiver_sim::link::LinkConfig;
use quiver_sim::seeds::run_seeds;
use quiver_sim::sim::{FlowConfig, Sim};
use quiver_sim::workload::MessageScript;

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_default()
}

/// Corruption the CRC cannot see (payload changed, checksum recomputed by the link) reaches
/// the application; the simulator's byte check must catch it, and the failure message must
/// carry the seed and the replay command.
#[test]
fn undetectable_corruption_is_caught_with_seed_and_replay() {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_seeds("self_check_corruption", &[7], |seed| {
            let mut sim = Sim::new(seed);
            let sender = sim.add_node();
            let receiver = sim.add_node();
            let evil = LinkConfig {
                delay_ns: 100 * MICROSECOND_NS,
                undetectable_corrupt_probability: 0.2,
                ..LinkConfig::default()
            };
            sim.add_duplex_link(sender, receiver, evil);
            let script = MessageScript::fixed(seed, vec![50_000; 10]);
            let config = ReliableConfig {
                max_datagram_bytes: 1472,
                ..ReliableConfig::default()
            };
            sim.add_flow(FlowConfig::new(sender, receiver, config, script));
            sim.run_until(10 * SECOND_NS);
        });
    }));
    let text = panic_text(outcome.expect_err("corrupt delivery must fail the run"));
    assert!(text.contains("delivery invariant violated"), "{text}");
    assert!(text.contains("wrong byte"), "{text}");
    assert!(text.contains("seed 7"), "{text}");
    assert!(
        text.contains("QUIVER_SIM_SEED=7 cargo test -p quiver-sim --release self_check_corruption"),
        "{text}"
    );
}
