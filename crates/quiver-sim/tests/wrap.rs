//! The 32-bit wrap of packet numbers and stream offsets, swept: compact Stream frames carry
//! both as their low 32 bits, so every connection here starts its numbering just below a
//! multiple of 2^32 (`ReliableConfig::initial_packet_number`, `initial_stream_offset`) and
//! crosses it within a short transfer, over links that lose, reorder and duplicate, with
//! messages both ways. The simulator checks exactly-once, in-order, byte-identical delivery
//! at every step. A failure names its seed: `QUIVER_SIM_SEED=<seed> cargo test -p quiver-sim
//! --release --test wrap`; `QUIVER_SIM_SEEDS=<N>` runs more seeds.

use quiver_proto::reliable::{Event, ReliableConfig};
use quiver_sim::event::{Nanos, MICROSECOND_NS, MILLISECOND_NS, SECOND_NS};
use quiver_sim::link::LinkConfig;
use quiver_sim::seeds::{run_seeds, sweep_seeds};
use quiver_sim::sim::{FlowConfig, Sim, StopReason};
use quiver_sim::workload::MessageScript;

const WRAP: u64 = 1 << 32;

/// Far beyond what any healthy run needs.
const DEADLINE_NS: Nanos = 120 * SECOND_NS;

/// Short virtual timeouts, compact Stream frames, numbering starting below `wrap_at`.
fn config(initial_packet_number: u64, initial_stream_offset: u64) -> ReliableConfig {
    ReliableConfig {
        send_buffer_bytes: 64 * 1024,
        recv_window_bytes: 64 * 1024,
        initial_rto_ns: 5 * MILLISECOND_NS,
        min_rto_ns: MILLISECOND_NS,
        max_rto_ns: 50 * MILLISECOND_NS,
        max_retransmits: 40,
        keepalive_interval_ns: 25 * MILLISECOND_NS,
        idle_timeout_ns: 2 * SECOND_NS,
        handshake_timeout_ns: 2 * SECOND_NS,
        max_in_flight_datagrams: 256,
        compact_data_frames: true,
        initial_packet_number,
        initial_stream_offset,
        ..ReliableConfig::default()
    }
}

/// Per seed: a wrap (the first, or a later one), how far below it the packet numbers and
/// the offsets start, the links' impairments; 30 messages of up to 20 kB one way and 10
/// the other. Every run must deliver everything, and most must cross both wraps.
#[test]
fn numbering_across_the_32_bit_wrap() {
    let seeds = sweep_seeds(300);
    let mut crossed = 0usize;
    run_seeds("numbering_across_the_32_bit_wrap", &seeds, |seed| {
        let mut sim = Sim::new(seed);
        let mut rng = sim.fork_rng(7);
        let wrap = WRAP * (1 + rng.below(3));
        let packets_below = 1 + rng.below(64);
        let bytes_below = 1 + rng.below(100_000);
        let link = LinkConfig {
            delay_ns: 50 * MICROSECOND_NS,
            jitter_ns: rng.below(2) * MILLISECOND_NS,
            loss_probability: rng.below(20) as f64 / 100.0,
            duplicate_probability: rng.below(5) as f64 / 100.0,
            ..LinkConfig::default()
        };
        let sender = sim.add_node();
        let receiver = sim.add_node();
        sim.add_duplex_link(sender, receiver, link);
        let script = MessageScript::mixed(&mut rng, 30, 20_000);
        let mut flow = FlowConfig::new(
            sender,
            receiver,
            config(wrap - packets_below, wrap - bytes_below),
            script,
        );
        // An answer makes acknowledgements ride on full Data frames (64-bit numbers): only
        // a quarter of the runs have one, the rest send compact Stream frames.
        if rng.below(4) == 0 {
            flow.answer = Some(MessageScript::mixed(&mut rng, 10, 20_000));
        }
        let flow = sim.add_flow(flow);
        let stop = sim.run_until(DEADLINE_NS);
        let report = sim.report();
        let flow_report = &report.flows[flow.0];
        assert_eq!(stop, StopReason::AllFlowsSettled, "{flow_report:#?}");
        assert_eq!(
            flow_report.messages_received, flow_report.messages_scripted,
            "{flow_report:#?}"
        );
        if let Some(answer) = &flow_report.answer {
            assert_eq!(answer.messages_received, answer.messages_scripted);
        }
        for (_, event) in flow_report
            .initiator_events
            .iter()
            .chain(&flow_report.responder_events)
        {
            assert!(matches!(event, Event::Established), "{event:?}");
        }
        let sent = flow_report.initiator_stats.as_ref().expect("stats");
        // Stream bytes include each message's 8-byte length.
        let stream_bytes = flow_report.bytes_received + 8 * flow_report.messages_received as u64;
        crossed += usize::from(sent.data_frames_sent > packets_below && stream_bytes > bytes_below);
    });
    assert!(
        crossed * 10 >= seeds.len() * 9,
        "only {crossed} of {} runs crossed both wraps",
        seeds.len()
    );
}
