//! What one link count of `quiver-bench stripe` measured: the two sides' reports (JSON on
//! their stdout) and the JSON record the parent makes of them. Data and arithmetic only.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::plan::{Plan, MESSAGE_BYTES};

/// Time given to the path that died before the post-kill goodput is counted.
const KILL_SETTLE: Duration = Duration::from_millis(500);

/// What one link count measured: the JSON record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StripeRecord {
    pub(crate) test: &'static str,
    pub(crate) links: u32,
    pub(crate) rate_gbps: f64,
    pub(crate) loss_pct: f64,
    pub(crate) mtu: u32,
    pub(crate) seconds: f64,
    /// Payload goodput of the quiver connection, Gbit/s.
    pub(crate) goodput_gbps: f64,
    /// goodput / (links x rate).
    pub(crate) nominal_ratio: f64,
    /// N TCP streams, one per link, in the same run (None: skipped).
    pub(crate) tcp_baseline_gbps: Option<f64>,
    pub(crate) tcp_nominal_ratio: Option<f64>,
    /// quiver goodput / TCP goodput.
    pub(crate) tcp_ratio: Option<f64>,
    /// With --lossless-baseline: quiver's goodput over the same links without the loss
    /// rules, just before the lossy transfer, and goodput over it.
    pub(crate) lossless_goodput_gbps: Option<f64>,
    pub(crate) lossless_ratio: Option<f64>,
    /// CPU seconds (user + system) per second of transfer, sender and receiver.
    pub(crate) cpu_sender: f64,
    pub(crate) cpu_receiver: f64,
    pub(crate) tcp_cpu_sender: Option<f64>,
    pub(crate) tcp_cpu_receiver: Option<f64>,
    /// Bytes received and checked byte for byte, and their messages.
    pub(crate) verified_bytes: u64,
    pub(crate) verified_messages: u64,
    pub(crate) retransmits: u64,
    /// The sender's retransmission timeouts (all links).
    pub(crate) timeouts: u64,
    /// Frames declared lost whose first transmission was acknowledged after all (all
    /// links): losses that were not, mostly timeouts that fired while a process was paused.
    pub(crate) spurious_losses: u64,
    /// Duplicate frames the receiver dropped (retransmissions of frames that had arrived).
    pub(crate) duplicates: u64,
    /// Receives the quiver receiver kept posted (0: blocking `recv`).
    pub(crate) recv_window: usize,
    /// Share of the received payload bytes placed straight into the receives' buffers
    /// (the rest went through the connection's receive window: one more copy).
    pub(crate) direct_read_ratio: f64,
    pub(crate) paths_down: u64,
    pub(crate) paths_rejoined: u64,
    /// Share of the payload bytes sent on each link.
    pub(crate) link_shares: Vec<f64>,
    /// With --kill-link: when (s into the transfer), the goodput after it, and that over
    /// the surviving links' nominal capacity.
    pub(crate) killed_at_s: Option<f64>,
    pub(crate) goodput_after_kill_gbps: Option<f64>,
    pub(crate) survivors_ratio: Option<f64>,
    /// The kernel's TCP congestion control in the sender's namespace.
    pub(crate) tcp_congestion_control: Option<String>,
    /// Share of time the sender's and the receiver's CPU were busy (`/proc/stat`, softirq
    /// and kernel threads included) during the quiver, TCP, raw udp and tagged raw udp
    /// transfers.
    pub(crate) cpus_busy: [Option<[f64; 2]>; 4],
    /// With --raw-udp: the raw udp stream over the same links (None: not run).
    pub(crate) raw_udp: Option<RawUdpRecord>,
    /// With --raw-udp-tagged: the same stream, each datagram an authenticated frame.
    pub(crate) raw_udp_tagged: Option<RawUdpRecord>,
}

/// What the raw udp stream of --raw-udp measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RawUdpRecord {
    /// Checked stream bytes of distinct datagrams at the receiver, Gbit/s.
    pub(crate) goodput_gbps: f64,
    pub(crate) nominal_ratio: f64,
    /// quiver goodput / raw udp goodput, and raw udp / TCP.
    pub(crate) quiver_ratio: f64,
    pub(crate) tcp_ratio: Option<f64>,
    pub(crate) cpu_sender: f64,
    pub(crate) cpu_receiver: f64,
    pub(crate) datagrams_sent: u64,
    /// Datagrams sent that never arrived, and those that arrived twice.
    pub(crate) datagrams_lost: u64,
    pub(crate) duplicates: u64,
    /// Sends refused by a full socket (the run went to the next link).
    pub(crate) would_block: u64,
    pub(crate) link_shares: Vec<f64>,
    /// The kernel's UDP counters of both namespaces at the end.
    pub(crate) sender_udp_counters: String,
    pub(crate) receiver_udp_counters: String,
}

/// The receiver's report (JSON on its stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ReceiverReport {
    pub(crate) bytes: u64,
    pub(crate) messages: u64,
    /// Monotonic ns of the first and the last message.
    pub(crate) first_ns: u64,
    pub(crate) last_ns: u64,
    pub(crate) cpu_seconds: f64,
    /// (monotonic ns, bytes so far), every SAMPLE_INTERVAL.
    pub(crate) timeline: Vec<(u64, u64)>,
    pub(crate) datagrams_sent: u64,
    pub(crate) datagrams_received: u64,
    pub(crate) duplicates_dropped: u64,
    /// Payload bytes the engine placed straight into the receive's buffer (the rest went
    /// through the connection's receive window: one more copy).
    #[serde(default)]
    pub(crate) direct_read_bytes: u64,
    /// The kernel's UDP counters in the receiver's namespace (`/proc/net/snmp`).
    pub(crate) udp_counters: String,
}

/// The sender's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct SenderReport {
    pub(crate) messages: u64,
    pub(crate) cpu_seconds: f64,
    pub(crate) elapsed_seconds: f64,
    pub(crate) retransmits: u64,
    pub(crate) fast_retransmits: u64,
    pub(crate) timeouts: u64,
    pub(crate) datagrams_sent: u64,
    pub(crate) datagrams_received: u64,
    pub(crate) link_frames_lost: Vec<u64>,
    /// Per link: frames declared lost whose first transmission was acknowledged after all.
    #[serde(default)]
    pub(crate) link_spurious_losses: Vec<u64>,
    pub(crate) link_datagrams_received: Vec<u64>,
    /// Per link at the end: (window bytes, rate bytes/s, srtt ns, min rtt ns).
    pub(crate) link_gauges: Vec<(u64, u64, u64, u64)>,
    /// The kernel's UDP counters in the sender's namespace.
    pub(crate) udp_counters: String,
    pub(crate) paths_down: u64,
    pub(crate) paths_rejoined: u64,
    pub(crate) link_payload_bytes: Vec<u64>,
}

/// The raw sender's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RawSenderReport {
    pub(crate) datagrams: u64,
    /// Stream bytes sent on each link.
    pub(crate) link_bytes: Vec<u64>,
    /// Sends a full socket refused (the run went to the next link).
    pub(crate) would_block: u64,
    pub(crate) cpu_seconds: f64,
    pub(crate) elapsed_seconds: f64,
    pub(crate) udp_counters: String,
}

/// The raw receiver's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RawReceiverReport {
    /// Stream bytes of distinct datagrams, each checked against the stream.
    pub(crate) bytes: u64,
    pub(crate) datagrams: u64,
    pub(crate) duplicates: u64,
    /// Monotonic ns of the first and the last data datagram.
    pub(crate) first_ns: u64,
    pub(crate) last_ns: u64,
    pub(crate) cpu_seconds: f64,
    /// The sender's datagram count from its end marker (None: no marker arrived).
    pub(crate) sent_datagrams: Option<u64>,
    pub(crate) udp_counters: String,
}

/// A TCP side's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TcpReport {
    pub(crate) bytes: u64,
    pub(crate) first_ns: u64,
    pub(crate) last_ns: u64,
    pub(crate) cpu_seconds: f64,
}

pub(crate) fn record(
    plan: &Plan,
    links: u32,
    sender: &SenderReport,
    receiver: &ReceiverReport,
    killed_at_ns: Option<u64>,
    tcp: Option<(TcpReport, TcpReport, Option<String>)>,
) -> StripeRecord {
    let nominal_gbps = f64::from(links) * plan.rate_bps as f64 / 1e9;
    let goodput_gbps = goodput_gbps(receiver);
    let total: u64 = sender.link_payload_bytes.iter().sum::<u64>().max(1);
    let (goodput_after_kill_gbps, survivors_ratio, killed_at_s) = match killed_at_ns {
        Some(at) => {
            let after = rate_after(receiver, at + KILL_SETTLE.as_nanos() as u64);
            let survivors = f64::from(links - 1) * plan.rate_bps as f64 / 1e9;
            (
                after,
                after.map(|after| after / survivors),
                Some(at.saturating_sub(receiver.first_ns) as f64 / 1e9),
            )
        }
        None => (None, None, None),
    };
    let tcp_gbps = tcp.as_ref().map(|(_, server, _)| tcp_goodput_gbps(server));
    let tcp_seconds = |report: &TcpReport| {
        report.cpu_seconds / (report.last_ns.saturating_sub(report.first_ns) as f64 / 1e9).max(1e-9)
    };
    let receiver_seconds =
        (receiver.last_ns.saturating_sub(receiver.first_ns) as f64 / 1e9).max(1e-9);
    StripeRecord {
        test: "stripe",
        links,
        rate_gbps: plan.rate_bps as f64 / 1e9,
        loss_pct: plan.loss_pct,
        mtu: plan.mtu,
        seconds: plan.seconds,
        goodput_gbps,
        nominal_ratio: goodput_gbps / nominal_gbps,
        tcp_baseline_gbps: tcp_gbps,
        tcp_nominal_ratio: tcp_gbps.map(|gbps| gbps / nominal_gbps),
        tcp_ratio: tcp_gbps.map(|gbps| goodput_gbps / gbps),
        lossless_goodput_gbps: None,
        lossless_ratio: None,
        cpu_sender: sender.cpu_seconds / sender.elapsed_seconds.max(1e-9),
        cpu_receiver: receiver.cpu_seconds / receiver_seconds,
        tcp_cpu_sender: tcp
            .as_ref()
            .map(|(client, _, _)| client.cpu_seconds / plan.seconds),
        tcp_cpu_receiver: tcp.as_ref().map(|(_, server, _)| tcp_seconds(server)),
        verified_bytes: receiver.bytes,
        verified_messages: receiver.messages,
        retransmits: sender.retransmits,
        timeouts: sender.timeouts,
        spurious_losses: sender.link_spurious_losses.iter().sum(),
        duplicates: receiver.duplicates_dropped,
        recv_window: plan.recv_window,
        direct_read_ratio: receiver.direct_read_bytes as f64 / receiver.bytes.max(1) as f64,
        paths_down: sender.paths_down,
        paths_rejoined: sender.paths_rejoined,
        link_shares: sender
            .link_payload_bytes
            .iter()
            .map(|&bytes| bytes as f64 / total as f64)
            .collect(),
        killed_at_s,
        goodput_after_kill_gbps,
        survivors_ratio,
        tcp_congestion_control: tcp.and_then(|(_, _, cc)| cc),
        raw_udp: None,
        raw_udp_tagged: None,
        cpus_busy: [None; 4],
    }
}

/// The raw udp stream's record, against the quiver and TCP goodput of the same run.
pub(crate) fn raw_udp_record(
    plan: &Plan,
    links: u32,
    sender: &RawSenderReport,
    receiver: &RawReceiverReport,
    quiver_gbps: f64,
    tcp_gbps: Option<f64>,
) -> RawUdpRecord {
    let seconds = receiver.last_ns.saturating_sub(receiver.first_ns) as f64 / 1e9;
    let goodput_gbps = if seconds > 0.0 {
        receiver.bytes as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    };
    let total = sender.link_bytes.iter().sum::<u64>().max(1) as f64;
    RawUdpRecord {
        goodput_gbps,
        nominal_ratio: goodput_gbps / (f64::from(links) * plan.rate_bps as f64 / 1e9),
        quiver_ratio: quiver_gbps / goodput_gbps.max(1e-9),
        tcp_ratio: tcp_gbps.map(|tcp| goodput_gbps / tcp.max(1e-9)),
        cpu_sender: sender.cpu_seconds / sender.elapsed_seconds.max(1e-9),
        cpu_receiver: receiver.cpu_seconds / seconds.max(1e-9),
        datagrams_sent: sender.datagrams,
        datagrams_lost: sender.datagrams.saturating_sub(receiver.datagrams),
        duplicates: receiver.duplicates,
        would_block: sender.would_block,
        link_shares: sender
            .link_bytes
            .iter()
            .map(|&bytes| bytes as f64 / total)
            .collect(),
        sender_udp_counters: sender.udp_counters.clone(),
        receiver_udp_counters: receiver.udp_counters.clone(),
    }
}

/// Receiver goodput: bytes after the first message over the time to the last one.
pub(crate) fn goodput_gbps(receiver: &ReceiverReport) -> f64 {
    let seconds = receiver.last_ns.saturating_sub(receiver.first_ns) as f64 / 1e9;
    if seconds <= 0.0 || receiver.messages < 2 {
        return 0.0;
    }
    let bytes = receiver.bytes.saturating_sub(MESSAGE_BYTES as u64) as f64;
    bytes * 8.0 / seconds / 1e9
}

/// Goodput from the timeline between `from_ns` and the last sample.
fn rate_after(receiver: &ReceiverReport, from_ns: u64) -> Option<f64> {
    let start = receiver.timeline.iter().find(|(at, _)| *at >= from_ns)?;
    let end = receiver.timeline.last()?;
    let seconds = end.0.saturating_sub(start.0) as f64 / 1e9;
    (seconds > 0.2).then(|| (end.1 - start.1) as f64 * 8.0 / seconds / 1e9)
}

fn tcp_goodput_gbps(server: &TcpReport) -> f64 {
    let seconds = server.last_ns.saturating_sub(server.first_ns) as f64 / 1e9;
    if seconds <= 0.0 {
        return 0.0;
    }
    server.bytes as f64 * 8.0 / seconds / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_leaves_out_the_first_message() {
        let receiver = ReceiverReport {
            bytes: 11 * MESSAGE_BYTES as u64,
            messages: 11,
            first_ns: 0,
            last_ns: 1_000_000_000,
            cpu_seconds: 0.5,
            timeline: vec![(0, 0), (500_000_000, 5 << 20), (1_000_000_000, 11 << 20)],
            ..ReceiverReport::default()
        };
        let expected = 10.0 * MESSAGE_BYTES as f64 * 8.0 / 1e9;
        assert!((goodput_gbps(&receiver) - expected).abs() < 1e-9);
        let after = rate_after(&receiver, 400_000_000).expect("a window");
        assert!((after - (6 << 20) as f64 * 8.0 / 0.5 / 1e9).abs() < 1e-9);
    }
}
