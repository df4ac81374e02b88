//! Long runs of the simulator: each seed a transfer of 6,000 messages over links
//! with every impairment mixed in (loss, bursts, jitter, duplication, corruption, a
//! bandwidth limit with a small queue), at least [`MIN_STEPS`] simulator steps per seed,
//! every step checking the simulator's invariants (exactly-once, in-order, byte-identical
//! delivery, bounded memory).
//!
//! CI runs a few seeds (`long_transfers_few_seeds`). The long sweep is a separate command:
//!
//! ```text
//! cargo test -p quiver-sim --release --test long -- --ignored
//! QUIVER_SIM_SEEDS=1000 cargo test -p quiver-sim --release --test long -- --ignored
//! ```
//!
//! (100 seeds by default; a failing seed prints its replay command.)

use quiver_proto::reliable::{Event, ReliableConfig};
use quiver_sim::event::{Nanos, MICROSECOND_NS, MILLISECOND_NS, SECOND_NS};
use quiver_sim::link::{GilbertElliott, LinkConfig};
use quiver_sim::rng::SimRng;
use quiver_sim::seeds::{run_seeds, sweep_seeds};
use quiver_sim::sim::{FlowConfig, Sim, StopReason};
use quiver_sim::workload::MessageScript;

/// Steps every seed must reach.
const MIN_STEPS: u64 = 100_000;
/// Virtual time a run may take.
const DEADLINE_NS: Nanos = 600 * SECOND_NS;

fn config() -> ReliableConfig {
    ReliableConfig {
        max_datagram_bytes: 1472,
        send_buffer_bytes: 64 * 1024,
        recv_window_bytes: 64 * 1024,
        initial_rto_ns: 5 * MILLISECOND_NS,
        min_rto_ns: MILLISECOND_NS,
        max_rto_ns: 50 * MILLISECOND_NS,
        max_retransmits: 40,
        ack_delay_ns: 200 * MICROSECOND_NS,
        keepalive_interval_ns: 25 * MILLISECOND_NS,
        idle_timeout_ns: 2 * SECOND_NS,
        handshake_timeout_ns: 2 * SECOND_NS,
        max_in_flight_datagrams: 256,
        ..ReliableConfig::default()
    }
}

/// One seed: a flow of 6,000 messages of up to 48 KiB from node 0 to node 1.
fn long_transfer(seed: u64) {
    let mut sim = Sim::new(seed);
    let (sender, receiver) = (sim.add_node(), sim.add_node());
    let mut rng = SimRng::new(seed ^ 0x10_9E);
    let mut link = || LinkConfig {
        delay_ns: rng.range_inclusive(10, 300) * MICROSECOND_NS,
        jitter_ns: rng.range_inclusive(0, 300) * MICROSECOND_NS,
        loss_probability: rng.next_f64() * 0.05,
        burst_loss: Some(GilbertElliott {
            good_to_bad: 0.001,
            bad_to_good: 0.3,
            loss_probability_bad: 0.5,
        }),
        duplicate_probability: rng.next_f64() * 0.02,
        corrupt_probability: rng.next_f64() * 0.02,
        bandwidth_bits_per_second: 1_000_000_000 * rng.range_inclusive(1, 10),
        queue_capacity_bytes: 1500 * rng.range_inclusive(16, 128) as usize,
        mtu_bytes: 1500,
        ..LinkConfig::default()
    };
    let (forward, back) = (link(), link());
    sim.add_link(sender, receiver, forward);
    sim.add_link(receiver, sender, back);
    let mut script_rng = sim.fork_rng(1);
    let script = MessageScript::mixed(&mut script_rng, 6000, 48 * 1024);
    let flow = sim.add_flow(FlowConfig::new(sender, receiver, config(), script));
    let stop = sim.run_until(DEADLINE_NS);
    let report = sim.report();
    let flow_report = &report.flows[flow.0];
    assert_eq!(stop, StopReason::AllFlowsSettled, "{flow_report:#?}");
    assert!(flow_report.completed_at_ns.is_some(), "{flow_report:#?}");
    assert_eq!(flow_report.messages_received, flow_report.messages_scripted);
    for (_, event) in flow_report
        .initiator_events
        .iter()
        .chain(flow_report.responder_events.iter())
    {
        assert!(
            matches!(event, Event::Established),
            "{event:?}: {flow_report:#?}"
        );
    }
    assert!(
        report.steps >= MIN_STEPS,
        "seed {seed}: {} steps, fewer than {MIN_STEPS}",
        report.steps
    );
}

#[test]
fn long_transfers_few_seeds() {
    run_seeds("long_transfers_few_seeds", &sweep_seeds(3), long_transfer);
}

#[test]
#[ignore = "the long sweep, a separate command (module docs)"]
fn long_transfers_sweep() {
    run_seeds("long_transfers_sweep", &sweep_seeds(100), long_transfer);
}
