//! `quiver-bench stripe`: one quiver connection striped over N rate-limited links, against
//! N kernel TCP streams (one per link) in the same run — the MultiEdge experiment in one
//! command (`docs/striping.md`).
//!
//! For each link count of `--links` (e.g. `1,2,4,8`) the parent:
//! 1. builds a testbed (`quiver-bench testbed`'s code: namespaces `NAME-a`/`NAME-b`, N veth links
//!    at `--rate` with tbf, `--loss` with nftables, `--mtu`);
//! 2. runs a quiver sender in `NAME-a` and a receiver in `NAME-b` (this executable as
//!    `quiver-bench stripe --worker sender|receiver`, pinned to `--cpus`) with
//!    `QUIVER_LINKS` naming every link, for `--seconds`: 1 MiB messages, each one checked
//!    byte for byte by the receiver against the content the sender was to send;
//! 3. with `--kill-link S`, takes the last link down (`ip link set ... down`) S seconds into
//!    the transfer and reports the goodput after it against what the surviving links carry;
//! 4. otherwise runs the baseline: N TCP streams, stream i over link i, for `--seconds`;
//!    with `--raw-udp` also a udp stream with no protocol over the same links (`raw_udp`),
//!    with `--raw-udp-tagged` the same stream with quiver's frame authenticator on every
//!    datagram (`raw_framing`);
//! 5. removes the testbed, also on failure and on Ctrl-C.
//!
//! Reported per link count: goodput (payload bits per second at the receiver, from its
//! first message to its last), goodput / nominal (N x rate), the same for TCP, quiver / TCP,
//! CPU time (user + system, `getrusage`) per second of each side, retransmissions and the
//! share of bytes each link carried. `--json FILE|-` writes one JSON object per link count.
//!
//! Root only (the testbed). Kernel-side work (veth, tbf, softirq receive processing) is
//! charged to whichever process the kernel runs it in, so the CPU figures are indicative.
//!
//! Layout: this file (the parent's run and its table), `plan` (the command line and what
//! a run measures), `launch` (starting the two sides in their namespaces), `worker` (the
//! two sides), `raw_udp` (the raw udp stream's two sides), `raw_framing` (its datagrams'
//! headers, plain or authenticated), `record` (what a link count
//! measured), `machine` (how busy the pinned CPUs were), `plot` (the scaling curve).

pub(crate) mod launch;
mod machine;
pub(crate) mod plan;
mod plot;
mod raw_framing;
pub(crate) mod raw_udp;
mod record;
pub(crate) mod worker;

pub(crate) use plan::StripeArgs;

use std::io::Write;

use launch::{run_quiver, run_raw_udp, run_tcp};
use machine::CpuTimes;
use plan::Plan;
use plot::{StripePoint, StripeSetting};
use record::{goodput_gbps, raw_udp_record, record, StripeRecord};
use record::{RawReceiverReport, RawSenderReport, RawUdpRecord};
use worker::run_worker;

use crate::testbed;

/// Exit codes, as the rest of the lab.
const EXIT_USAGE: i32 = 2;
const EXIT_FAILURE: i32 = 1;
const EXIT_INTERRUPTED: i32 = 130;
/// IPv4 + TCP with timestamps (20 + 20 + 12): TCP's payload per frame is MTU minus this.
const TCP_HEADER_BYTES: u32 = 52;
/// IPv4 + udp (20 + 8) and quiver's compact data frame header: quiver's payload per
/// frame is MTU minus both.
const UDP_HEADER_BYTES: u32 = 28;
const STREAM_HEADER_BYTES: u32 = quiver_wire::frame::STREAM_HEADER_LEN as u32;
/// Ethernet header bytes tbf counts on top of the MTU.
const ETHERNET_HEADER_BYTES: u32 = 14;

/// Runs `quiver-bench stripe`; returns the exit code.
pub(crate) fn main(args: &StripeArgs) -> i32 {
    if let Some(role) = args.worker.clone() {
        let run = if role.starts_with("raw-udp") {
            raw_udp::run_worker
        } else {
            run_worker
        };
        return match run(&role, args) {
            Ok(()) => 0,
            Err(message) => {
                eprintln!("quiver-bench stripe: {role}: {message}");
                EXIT_FAILURE
            }
        };
    }
    let plan = match Plan::from_args(args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver-bench stripe: {message}");
            return EXIT_USAGE;
        }
    };
    testbed::install_signal_handlers();
    let result = run_plan(&plan);
    // Whatever happened, nothing of the testbed stays behind.
    let _ = testbed::down(&plan.name);
    match result {
        Ok(()) => 0,
        Err(_) if testbed::interrupted() => {
            eprintln!(
                "quiver-bench stripe: interrupted; stopped the ranks and removed the testbed"
            );
            EXIT_INTERRUPTED
        }
        Err(message) => {
            eprintln!("quiver-bench stripe: {message}");
            EXIT_FAILURE
        }
    }
}

fn run_plan(plan: &Plan) -> Result<(), String> {
    let mut json: Option<Box<dyn Write>> = match plan.json.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout())),
        Some(path) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|error| format!("--json: cannot create {path:?}: {error}"))?,
        ))),
    };
    let table = plan.json.as_deref() != Some("-");
    if table {
        println!(
            "quiver-bench stripe: rate {} per link, loss {}%, MTU {}, {} s per transfer, CPUs {:?}",
            format_gbps(plan.rate_bps as f64 / 1e9),
            plan.loss_pct,
            plan.mtu,
            plan.seconds,
            plan.cpus
        );
        println!(
            "{:>5} {:>10} {:>8} {:>10} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8}  link shares",
            "links",
            "quiver",
            "/nominal",
            "tcp",
            "/nominal",
            "quiver/tcp",
            "cpu tx",
            "cpu rx",
            "retrans",
            "verified"
        );
    }
    let mut points = Vec::new();
    for &links in &plan.link_counts {
        let record = measure(plan, links)?;
        points.push(StripePoint {
            links,
            quiver_gbps: record.goodput_gbps,
            tcp_gbps: record.tcp_baseline_gbps,
        });
        if table {
            print_row(&record);
        }
        if let Some(out) = json.as_mut() {
            let line = serde_json::to_string(&record)
                .map_err(|error| format!("encoding JSON: {error}"))?;
            writeln!(out, "{line}").map_err(|error| format!("writing JSON: {error}"))?;
            out.flush()
                .map_err(|error| format!("writing JSON: {error}"))?;
        }
    }
    if let Some(path) = &plan.plot {
        plot::draw_stripe(path, &points, &plot_setting(plan))?;
        eprintln!("quiver-bench stripe: plot written to {}", path.display());
    }
    Ok(())
}

/// The striping plot's caption and reference lines for this plan.
fn plot_setting(plan: &Plan) -> StripeSetting {
    let mut subtitle = format!(
        "{} per link, MTU {}, {}% loss, {} s per transfer",
        format_gbps(plan.rate_bps as f64 / 1e9),
        plan.mtu,
        plan.loss_pct,
        plan.seconds
    );
    if let Some(at) = plan.kill_link {
        subtitle.push_str(&format!("; last link killed at {at} s"));
    }
    StripeSetting {
        rate_gbps: plan.rate_bps as f64 / 1e9,
        ceilings: vec![
            (
                "TCP's".to_string(),
                plan.mtu.saturating_sub(TCP_HEADER_BYTES),
            ),
            (
                "quiver's".to_string(),
                plan.mtu
                    .saturating_sub(UDP_HEADER_BYTES + STREAM_HEADER_BYTES),
            ),
        ],
        frame_bytes: plan.mtu + ETHERNET_HEADER_BYTES,
        subtitle,
    }
}

fn format_gbps(gbps: f64) -> String {
    format!("{gbps:.3} Gbit/s")
}

fn print_row(record: &StripeRecord) {
    let optional = |value: Option<f64>, digits: usize| {
        value.map_or("-".to_string(), |value| format!("{value:.digits$}"))
    };
    let shares: Vec<String> = record
        .link_shares
        .iter()
        .map(|share| format!("{:.0}%", share * 100.0))
        .collect();
    println!(
        "{:>5} {:>10.3} {:>8.3} {:>10} {:>8} {:>9} {:>8.2} {:>8.2} {:>8} {:>8}  {}",
        record.links,
        record.goodput_gbps,
        record.nominal_ratio,
        optional(record.tcp_baseline_gbps, 3),
        optional(record.tcp_nominal_ratio, 3),
        optional(record.tcp_ratio, 3),
        record.cpu_sender,
        record.cpu_receiver,
        record.retransmits,
        format!("{} MB", record.verified_bytes / 1_000_000),
        shares.join(" ")
    );
    if let (Some(at), Some(after), Some(ratio)) = (
        record.killed_at_s,
        record.goodput_after_kill_gbps,
        record.survivors_ratio,
    ) {
        println!(
            "      link {} down at {at:.1} s: {after:.3} Gbit/s after it = {ratio:.3} of the {} surviving links (paths down {}, rejoined {})",
            record.links - 1,
            record.links - 1,
            record.paths_down,
            record.paths_rejoined
        );
    }
    if let (Some(lossless), Some(ratio)) = (record.lossless_goodput_gbps, record.lossless_ratio) {
        println!(
            "      without the loss rules just before: {lossless:.3} Gbit/s; with {}% loss = {ratio:.3} of it",
            record.loss_pct
        );
    }
    for (name, raw) in [
        ("raw udp", &record.raw_udp),
        ("raw udp, tagged", &record.raw_udp_tagged),
    ] {
        if let Some(raw) = raw {
            print_raw(name, raw);
        }
    }
    if let (Some(tx), Some(rx)) = (record.tcp_cpu_sender, record.tcp_cpu_receiver) {
        println!("      tcp cpu tx {tx:.2} rx {rx:.2}");
    }
    let busy: Vec<String> = ["quiver", "tcp", "raw udp", "raw udp tagged"]
        .iter()
        .zip(record.cpus_busy)
        .filter_map(|(name, busy)| busy.map(|[a, b]| format!("{name} {a:.2} {b:.2}")))
        .collect();
    println!(
        "      CPUs busy (tx, rx; /proc/stat, softirq included): {}",
        busy.join(", ")
    );
    if record.tcp_ratio.is_some() {
        if let Some(cc) = &record.tcp_congestion_control {
            println!("      tcp congestion control: {cc}");
        }
    }
}

/// One raw udp stream's line of the report.
fn print_raw(name: &str, raw: &RawUdpRecord) {
    let shares: Vec<String> = raw
        .link_shares
        .iter()
        .map(|share| format!("{:.0}%", share * 100.0))
        .collect();
    println!(
        "      {name}: {:.3} Gbit/s = {:.3} of nominal; quiver/raw {:.3}, raw/tcp {}; cpu tx {:.2} rx {:.2}; lost {} of {} datagrams, duplicates {}, full-socket refusals {}; link shares {}",
        raw.goodput_gbps,
        raw.nominal_ratio,
        raw.quiver_ratio,
        raw.tcp_ratio
            .map_or_else(|| "-".to_string(), |ratio| format!("{ratio:.3}")),
        raw.cpu_sender,
        raw.cpu_receiver,
        raw.datagrams_lost,
        raw.datagrams_sent,
        raw.duplicates,
        raw.would_block,
        shares.join(" ")
    );
}

/// Runs `transfer`, and puts how busy the plan's two CPUs were meanwhile in `busy`.
fn busy_during<T>(
    plan: &Plan,
    busy: &mut Option<[f64; 2]>,
    transfer: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let cpus = CpuTimes::now(plan.cpus);
    let result = transfer()?;
    *busy = Some(cpus.busy_since());
    Ok(result)
}

/// One link count: testbed up, quiver, TCP, raw udp, testbed down.
fn measure(plan: &Plan, links: u32) -> Result<StripeRecord, String> {
    let spec = plan.spec(links);
    testbed::build(&spec).map_err(|error| format!("building the testbed: {error}"))?;
    let outcome = (|| {
        let lossless = if plan.lossless_baseline {
            testbed::set_loss(&spec, false)
                .map_err(|error| format!("removing the loss rules: {error}"))?;
            let (_, receiver, _) = run_quiver(plan, links)?;
            testbed::set_loss(&spec, true)
                .map_err(|error| format!("restoring the loss rules: {error}"))?;
            Some(goodput_gbps(&receiver))
        } else {
            None
        };
        let mut busy = [None; 4];
        let quiver = busy_during(plan, &mut busy[0], || run_quiver(plan, links))?;
        let tcp = plan
            .tcp
            .then(|| busy_during(plan, &mut busy[1], || run_tcp(plan, links)))
            .transpose()?;
        let raw = plan
            .raw_udp
            .then(|| busy_during(plan, &mut busy[2], || run_raw_udp(plan, links, false)))
            .transpose()?;
        let tagged = plan
            .raw_udp_tagged
            .then(|| busy_during(plan, &mut busy[3], || run_raw_udp(plan, links, true)))
            .transpose()?;
        Ok::<_, String>((lossless, quiver, tcp, [raw, tagged], busy))
    })();
    testbed::down(&spec.name).map_err(|error| format!("removing the testbed: {error}"))?;
    let (lossless, (sender, receiver, killed_at_ns), tcp, [raw, tagged], busy) = outcome?;
    if plan.verbose {
        eprintln!("      sender: {sender:?}");
        eprintln!(
            "      receiver: datagrams sent {} received {} duplicates {} direct bytes {}; udp {}",
            receiver.datagrams_sent,
            receiver.datagrams_received,
            receiver.duplicates_dropped,
            receiver.direct_read_bytes,
            receiver.udp_counters
        );
    }
    let mut record = record(plan, links, &sender, &receiver, killed_at_ns, tcp);
    let (quiver, tcp) = (record.goodput_gbps, record.tcp_baseline_gbps);
    let raw_record = |(sender, receiver): (RawSenderReport, RawReceiverReport)| {
        if plan.verbose {
            eprintln!("      raw-udp sender: {sender:?}");
            eprintln!("      raw-udp receiver: {receiver:?}");
        }
        raw_udp_record(plan, links, &sender, &receiver, quiver, tcp)
    };
    record.raw_udp = raw.map(raw_record);
    record.raw_udp_tagged = tagged.map(raw_record);
    record.cpus_busy = busy;
    record.lossless_goodput_gbps = lossless;
    record.lossless_ratio = lossless.map(|gbps| record.goodput_gbps / gbps);
    Ok(record)
}
