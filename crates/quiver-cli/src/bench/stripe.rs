//! `quiver bench stripe`: one quiver connection striped over N rate-limited links, against
//! N kernel TCP streams (one per link) in the same run — the MultiEdge experiment in one
//! command (`docs/striping.md`).
//!
//! For each link count of `--links` (e.g. `1,2,4,8`) the parent:
//! 1. builds a testbed (`quiver testbed`'s code: namespaces `NAME-a`/`NAME-b`, N veth links
//!    at `--rate` with tbf, `--loss` with nftables, `--mtu`);
//! 2. runs a quiver sender in `NAME-a` and a receiver in `NAME-b` (this executable as
//!    `quiver bench stripe --worker sender|receiver`, pinned to `--cpus`) with
//!    `QUIVER_LINKS` naming every link, for `--seconds`: 1 MiB messages, each one checked
//!    byte for byte by the receiver against the content the sender was to send;
//! 3. with `--kill-link S`, takes the last link down (`ip link set ... down`) S seconds into
//!    the transfer and reports the goodput after it against what the surviving links carry;
//! 4. otherwise runs the baseline: N TCP streams, stream i over link i, for `--seconds`;
//! 5. removes the testbed, also on failure and on Ctrl-C.
//!
//! Reported per link count: goodput (payload bits per second at the receiver, from its
//! first message to its last), goodput / nominal (N x rate), the same for TCP, quiver / TCP,
//! CPU time (user + system, `getrusage`) per second of each side, retransmissions and the
//! share of bytes each link carried. `--json FILE|-` writes one JSON object per link count.
//!
//! Root only (the testbed). Kernel-side work (veth, tbf, softirq receive processing) is
//! charged to whichever process the kernel runs it in, so the CPU figures are indicative.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver::{Addr, Context, SendRequest};
use serde::{Deserialize, Serialize};

use crate::launch::{spawn_rank, JobIdentity};
use crate::testbed::{self, Spec};

/// Exit codes, as the rest of `quiver bench`.
const EXIT_USAGE: i32 = 2;
const EXIT_FAILURE: i32 = 1;
const EXIT_INTERRUPTED: i32 = 130;
/// Bytes of every message of the quiver transfer.
const MESSAGE_BYTES: usize = 1 << 20;
/// Distinct message contents (message i has content i % CONTENTS, stamped with i).
const CONTENTS: usize = 16;
/// The last message: this marker, then the message count (u64 LE).
const END_MARKER: &[u8; 8] = b"QVSTREND";
/// UDP port of the quiver ranks on every link, TCP port of the baseline.
const QUIVER_PORT: u16 = 7400;
const TCP_PORT: u16 = 7500;
/// Receiver timeline resolution.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Time given to the path that died before the post-kill goodput is counted.
const KILL_SETTLE: Duration = Duration::from_millis(500);
/// IPv4 + TCP with timestamps (20 + 20 + 12): TCP's payload per frame is MTU minus this.
const TCP_HEADER_BYTES: u32 = 52;
/// IPv4 + udp (20 + 8) and quiver's compact data frame header: quiver's payload per
/// frame is MTU minus both.
const UDP_HEADER_BYTES: u32 = 28;
const STREAM_HEADER_BYTES: u32 = quiver_wire::frame::STREAM_HEADER_LEN as u32;
/// Ethernet header bytes tbf counts on top of the MTU.
const ETHERNET_HEADER_BYTES: u32 = 14;
/// Largest --recv-window (the reliable core's posted-reader limit).
const MAX_RECV_WINDOW: usize = 64;
/// Largest --links entry (one /24 per link under 10.77.0.0/16, and quiver's path limit).
const MAX_LINKS: u32 = 64;

/// Options of `quiver bench stripe`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "quiver bench stripe",
    about = "One quiver connection striped over N links against N TCP streams (root; builds its own testbed)"
)]
pub(crate) struct StripeArgs {
    /// Link counts to measure, comma-separated: 4, or 1,2,4,8 for the scaling table.
    #[arg(long, value_name = "LIST", default_value = "2")]
    links: String,
    /// Rate limit of every link and direction (tbf), e.g. 200mbit, 1gbit.
    #[arg(long, value_name = "RATE", default_value = "1gbit")]
    rate: String,
    /// Random loss in percent on every link and direction (nftables).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    loss: f64,
    /// MTU of the links (quiver's datagrams are MTU - 28 bytes).
    #[arg(long, value_name = "M", default_value_t = 1500)]
    mtu: u32,
    /// Seconds each transfer (quiver, then TCP) runs.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    seconds: f64,
    /// Take the last link down this many seconds into the quiver transfer (no TCP baseline
    /// then); the report compares the goodput after it with the surviving links' capacity.
    #[arg(long, value_name = "S")]
    kill_link: Option<f64>,
    /// Segmentation/receive offloads on the links: keep, or off (per-packet loss).
    #[arg(long, value_name = "keep|off", default_value = "keep")]
    offloads: String,
    /// Skip the TCP baseline.
    #[arg(long)]
    no_tcp: bool,
    /// With --loss: first run the quiver transfer with the loss rules taken off the same
    /// testbed, then with them, and report the lossy goodput over the lossless one
    /// (issue 4: at least 0.95 at 1% loss).
    #[arg(long)]
    lossless_baseline: bool,
    /// The quiver sender keeps this many messages posted (`post_send`, which a udp
    /// connection transmits in place, with no copy, from QUIVER_UDP_POST_IN_PLACE_MIN up:
    /// 256K by default) instead of one
    /// blocking `send` at a time; 0 = blocking sends. At most 16 (the distinct bodies).
    #[arg(long, value_name = "N", default_value_t = 0)]
    post_window: usize,
    /// The quiver receiver keeps this many receives posted (`post_recv`, 1 MiB each): on
    /// its one udp connection the engine places frames of the next messages straight into
    /// their buffers, also while earlier messages still arrive; 0 = one blocking `recv` at
    /// a time. At most 64.
    #[arg(long, value_name = "N", default_value_t = 0)]
    recv_window: usize,
    /// CPUs of the sender and the receiver, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    cpus: Option<String>,
    /// Testbed name (namespaces NAME-a, NAME-b); an existing one is replaced.
    #[arg(long, value_name = "NAME", default_value = "qstripe")]
    name: String,
    /// Also write one JSON object per link count to FILE; with `-`, only JSON on stdout.
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Print the sender's protocol counters for each run.
    #[arg(long)]
    verbose: bool,
    /// Draw the scaling curve (goodput vs links for quiver and TCP, the nominal N x rate
    /// and the MTU ceiling) into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
    /// Internal: run as one side of a transfer (sender, receiver, tcp-server, tcp-client).
    #[arg(long, hide = true)]
    worker: Option<String>,
    /// Internal: the number of links (tcp workers).
    #[arg(long, hide = true, default_value_t = 1)]
    worker_links: u32,
}

/// What one link count measured: the JSON record.
#[derive(Debug, Clone, Serialize)]
struct StripeRecord {
    test: &'static str,
    links: u32,
    rate_gbps: f64,
    loss_pct: f64,
    mtu: u32,
    seconds: f64,
    /// Payload goodput of the quiver connection, Gbit/s.
    goodput_gbps: f64,
    /// goodput / (links x rate).
    nominal_ratio: f64,
    /// N TCP streams, one per link, in the same run (None: skipped).
    tcp_baseline_gbps: Option<f64>,
    tcp_nominal_ratio: Option<f64>,
    /// quiver goodput / TCP goodput.
    tcp_ratio: Option<f64>,
    /// With --lossless-baseline: quiver's goodput over the same links without the loss
    /// rules, just before the lossy transfer, and goodput over it.
    lossless_goodput_gbps: Option<f64>,
    lossless_ratio: Option<f64>,
    /// CPU seconds (user + system) per second of transfer, sender and receiver.
    cpu_sender: f64,
    cpu_receiver: f64,
    tcp_cpu_sender: Option<f64>,
    tcp_cpu_receiver: Option<f64>,
    /// Bytes received and checked byte for byte, and their messages.
    verified_bytes: u64,
    verified_messages: u64,
    retransmits: u64,
    /// The sender's retransmission timeouts (all links).
    timeouts: u64,
    /// Frames declared lost whose first transmission was acknowledged after all (all
    /// links): losses that were not, mostly timeouts that fired while a process was paused.
    spurious_losses: u64,
    /// Duplicate frames the receiver dropped (retransmissions of frames that had arrived).
    duplicates: u64,
    /// Receives the quiver receiver kept posted (0: blocking `recv`).
    recv_window: usize,
    /// Share of the received payload bytes placed straight into the receives' buffers
    /// (the rest went through the connection's receive window: one more copy).
    direct_read_ratio: f64,
    paths_down: u64,
    paths_rejoined: u64,
    /// Share of the payload bytes sent on each link.
    link_shares: Vec<f64>,
    /// With --kill-link: when (s into the transfer), the goodput after it, and that over
    /// the surviving links' nominal capacity.
    killed_at_s: Option<f64>,
    goodput_after_kill_gbps: Option<f64>,
    survivors_ratio: Option<f64>,
    /// The kernel's TCP congestion control in the sender's namespace.
    tcp_congestion_control: Option<String>,
}

/// The receiver's report (JSON on its stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ReceiverReport {
    bytes: u64,
    messages: u64,
    /// Monotonic ns of the first and the last message.
    first_ns: u64,
    last_ns: u64,
    cpu_seconds: f64,
    /// (monotonic ns, bytes so far), every SAMPLE_INTERVAL.
    timeline: Vec<(u64, u64)>,
    datagrams_sent: u64,
    datagrams_received: u64,
    duplicates_dropped: u64,
    /// Payload bytes the engine placed straight into the receive's buffer (the rest went
    /// through the connection's receive window: one more copy).
    #[serde(default)]
    direct_read_bytes: u64,
    /// The kernel's UDP counters in the receiver's namespace (`/proc/net/snmp`).
    udp_counters: String,
}

/// The sender's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SenderReport {
    messages: u64,
    cpu_seconds: f64,
    elapsed_seconds: f64,
    retransmits: u64,
    fast_retransmits: u64,
    timeouts: u64,
    datagrams_sent: u64,
    datagrams_received: u64,
    link_frames_lost: Vec<u64>,
    /// Per link: frames declared lost whose first transmission was acknowledged after all.
    #[serde(default)]
    link_spurious_losses: Vec<u64>,
    link_datagrams_received: Vec<u64>,
    /// Per link at the end: (window bytes, rate bytes/s, srtt ns, min rtt ns).
    link_gauges: Vec<(u64, u64, u64, u64)>,
    /// The kernel's UDP counters in the sender's namespace.
    udp_counters: String,
    paths_down: u64,
    paths_rejoined: u64,
    link_payload_bytes: Vec<u64>,
}

/// A TCP side's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TcpReport {
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
    cpu_seconds: f64,
}

/// Runs `quiver bench stripe ARGS` (`arguments` start after `stripe`); returns the exit code.
pub(crate) fn main(arguments: Vec<std::ffi::OsString>) -> i32 {
    use clap::Parser;
    let args = match StripeArgs::try_parse_from(
        std::iter::once(std::ffi::OsString::from("quiver bench stripe")).chain(arguments),
    ) {
        Ok(args) => args,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { EXIT_USAGE } else { 0 };
        }
    };
    if let Some(role) = args.worker.clone() {
        return match run_worker(&role, &args) {
            Ok(()) => 0,
            Err(message) => {
                eprintln!("quiver bench stripe: {role}: {message}");
                EXIT_FAILURE
            }
        };
    }
    let plan = match Plan::from_args(&args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver bench stripe: {message}");
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
                "quiver bench stripe: interrupted; stopped the ranks and removed the testbed"
            );
            EXIT_INTERRUPTED
        }
        Err(message) => {
            eprintln!("quiver bench stripe: {message}");
            EXIT_FAILURE
        }
    }
}

/// The validated options.
#[derive(Debug, Clone)]
struct Plan {
    link_counts: Vec<u32>,
    rate_bps: u64,
    loss_pct: f64,
    mtu: u32,
    seconds: f64,
    kill_link: Option<f64>,
    offloads_off: bool,
    tcp: bool,
    lossless_baseline: bool,
    post_window: usize,
    recv_window: usize,
    cpus: [usize; 2],
    name: String,
    json: Option<String>,
    verbose: bool,
    plot: Option<std::path::PathBuf>,
}

impl Plan {
    fn from_args(args: &StripeArgs) -> Result<Plan, String> {
        let link_counts: Vec<u32> = args
            .links
            .split(',')
            .map(|entry| {
                entry
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|count| (1..=MAX_LINKS).contains(count))
                    .ok_or_else(|| {
                        format!("--links: {entry:?} is not a link count between 1 and {MAX_LINKS}")
                    })
            })
            .collect::<Result<_, _>>()?;
        if !(args.seconds.is_finite() && (0.5..=3600.0).contains(&args.seconds)) {
            return Err("--seconds must be between 0.5 and 3600".to_string());
        }
        if !(args.loss.is_finite() && (0.0..=50.0).contains(&args.loss)) {
            return Err("--loss must be a percentage between 0 and 50".to_string());
        }
        if !(576..=65535).contains(&args.mtu) {
            return Err("--mtu must be between 576 and 65535".to_string());
        }
        if let Some(at) = args.kill_link {
            if !(at.is_finite() && at > 0.0 && at + 1.0 < args.seconds) {
                return Err(
                    "--kill-link must be after 0 s and at least 1 s before --seconds ends"
                        .to_string(),
                );
            }
            if link_counts.contains(&1) {
                return Err("--kill-link needs at least 2 links".to_string());
            }
        }
        if args.lossless_baseline && args.loss <= 0.0 {
            return Err("--lossless-baseline needs --loss above 0".to_string());
        }
        let offloads_off = match args.offloads.as_str() {
            "keep" => false,
            "off" => true,
            other => return Err(format!("--offloads: expected keep or off, got {other:?}")),
        };
        let cpus = choose_cpus(args.cpus.as_deref())?;
        if args.post_window > CONTENTS {
            return Err(format!(
                "--post-window: at most {CONTENTS}, got {}",
                args.post_window
            ));
        }
        if args.recv_window > MAX_RECV_WINDOW {
            return Err(format!(
                "--recv-window: at most {MAX_RECV_WINDOW}, got {}",
                args.recv_window
            ));
        }
        Ok(Plan {
            link_counts,
            rate_bps: testbed::parse_rate(&args.rate)?,
            loss_pct: args.loss,
            mtu: args.mtu,
            seconds: args.seconds,
            kill_link: args.kill_link,
            offloads_off,
            tcp: !args.no_tcp && args.kill_link.is_none(),
            lossless_baseline: args.lossless_baseline,
            post_window: args.post_window,
            recv_window: args.recv_window,
            cpus,
            name: args.name.clone(),
            json: args.json.clone(),
            verbose: args.verbose,
            plot: args.plot.clone(),
        })
    }

    fn spec(&self, links: u32) -> Spec {
        Spec {
            name: self.name.clone(),
            links,
            rate_bps: self.rate_bps,
            loss_ppm: (self.loss_pct * 10_000.0).round() as u32,
            mtu: self.mtu,
            offloads_off: self.offloads_off,
        }
    }
}

fn choose_cpus(requested: Option<&str>) -> Result<[usize; 2], String> {
    let allowed = crate::launch::allowed_cpus()
        .map_err(|error| format!("cannot read the CPU affinity: {error}"))?;
    let cpus = match requested {
        Some(text) => {
            let parsed: Vec<usize> = text
                .split(',')
                .map(|cpu| cpu.trim().parse())
                .collect::<Result<_, _>>()
                .map_err(|_| {
                    format!("--cpus: expected two CPU numbers such as 0,1, got {text:?}")
                })?;
            match parsed.as_slice() {
                [a, b] if a != b => [*a, *b],
                _ => return Err(format!("--cpus: expected two different CPUs, got {text:?}")),
            }
        }
        None => match allowed.as_slice() {
            [a, b, ..] => [*a, *b],
            _ => return Err("the bench needs two CPUs (one per side)".to_string()),
        },
    };
    if let Some(cpu) = cpus.iter().find(|cpu| !allowed.contains(cpu)) {
        return Err(format!(
            "--cpus: CPU {cpu} is not allowed here ({allowed:?})"
        ));
    }
    Ok(cpus)
}

// ---- the parent ----

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
            "quiver bench stripe: rate {} per link, loss {}%, MTU {}, {} s per transfer, CPUs {:?}",
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
        points.push(super::plot::StripePoint {
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
        super::plot::draw_stripe(path, &points, &plot_setting(plan))?;
        eprintln!("quiver bench stripe: plot written to {}", path.display());
    }
    Ok(())
}

/// The striping plot's caption and reference lines for this plan.
fn plot_setting(plan: &Plan) -> super::plot::StripeSetting {
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
    super::plot::StripeSetting {
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
    if record.tcp_ratio.is_some() {
        if let Some(cc) = &record.tcp_congestion_control {
            println!("      tcp congestion control: {cc}");
        }
    }
}

/// One link count: testbed up, quiver, TCP, testbed down.
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
        let quiver = run_quiver(plan, links)?;
        let tcp = if plan.tcp {
            Some(run_tcp(plan, links)?)
        } else {
            None
        };
        Ok::<_, String>((lossless, quiver, tcp))
    })();
    testbed::down(&spec.name).map_err(|error| format!("removing the testbed: {error}"))?;
    let (lossless, (sender, receiver, killed_at_ns), tcp) = outcome?;
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
    record.lossless_goodput_gbps = lossless;
    record.lossless_ratio = lossless.map(|gbps| record.goodput_gbps / gbps);
    Ok(record)
}

fn record(
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
    }
}

/// Receiver goodput: bytes after the first message over the time to the last one.
fn goodput_gbps(receiver: &ReceiverReport) -> f64 {
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

fn link_address(link: u32, side: u32, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 77, link as u8, side as u8 + 1], port))
}

/// `QUIVER_LINKS` for the two ranks: rank 0 on side a (.1), rank 1 on side b (.2).
fn links_variable(links: u32) -> String {
    (0..2)
        .map(|rank| {
            (0..links)
                .map(|link| link_address(link, rank, QUIVER_PORT).to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// A started worker: its process and its stdout lines.
struct Worker {
    name: &'static str,
    child: Child,
    stdout: std::sync::mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Worker {
    /// Starts `quiver bench stripe --worker ROLE EXTRA...` in namespace `namespace` with
    /// `environment`, as rank `rank` of `identity`, pinned to `cpu`.
    #[allow(clippy::too_many_arguments)] // One call site per role; a struct would only rename them.
    fn start(
        name: &'static str,
        namespace: &str,
        environment: &[(String, String)],
        identity: &JobIdentity,
        rank: u32,
        cpu: usize,
        role: &str,
        extra: &[String],
    ) -> Result<Worker, String> {
        let exe = std::env::current_exe()
            .map_err(|error| format!("cannot find this executable: {error}"))?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "netns".into(),
            "exec".into(),
            namespace.into(),
            "env".into(),
        ];
        for (key, value) in environment {
            args.push(format!("{key}={value}").into());
        }
        args.push(exe.into_os_string());
        for arg in ["bench", "stripe", "--worker", role] {
            args.push(arg.into());
        }
        args.extend(extra.iter().map(Into::into));
        let mut child = spawn_rank(
            "ip".as_ref(),
            &args,
            identity,
            rank,
            2,
            Some(cpu),
            Stdio::piped(),
            Stdio::piped(),
        )
        .map_err(|error| format!("starting the {name}: {error}"))?;
        let (sender, stdout) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = child.stderr.take().map(|mut err| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = err.read_to_string(&mut text);
                text
            })
        });
        Ok(Worker {
            name,
            child,
            stdout,
            stderr,
        })
    }

    fn kill(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Waits for the worker's JSON line and its exit, until `deadline` (or Ctrl-C).
    fn finish<T: serde::de::DeserializeOwned>(mut self, deadline: Instant) -> Result<T, String> {
        let mut report: Option<T> = None;
        loop {
            match self.stdout.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => match serde_json::from_str(&line) {
                    Ok(parsed) => report = Some(parsed),
                    Err(_) => eprintln!("{}: {line}", self.name),
                },
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if testbed::interrupted() || Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "the {} did not finish in time (or Ctrl-C)",
                    self.name
                ));
            }
        }
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline || testbed::interrupted() => {
                    self.kill();
                    return Err(format!("the {} did not exit", self.name));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(error) => return Err(format!("waiting for the {}: {error}", self.name)),
            }
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        match report {
            Some(report) if status.success() => Ok(report),
            _ => Err(format!(
                "the {} failed ({status}): {}",
                self.name,
                stderr.trim()
            )),
        }
    }
}

/// Both sides of the quiver transfer; returns their reports and when a link was killed.
fn run_quiver(
    plan: &Plan,
    links: u32,
) -> Result<(SenderReport, ReceiverReport, Option<u64>), String> {
    let [a, b] = testbed::namespaces(&plan.name);
    let mut identity =
        JobIdentity::generate().map_err(|error| format!("making a job identity: {error}"))?;
    identity.addrs = vec![
        link_address(0, 0, QUIVER_PORT),
        link_address(0, 1, QUIVER_PORT),
    ];
    identity.transports = Some("udp".to_string());
    let environment = vec![
        ("QUIVER_LINKS".to_string(), links_variable(links)),
        (
            "QUIVER_UDP_DATAGRAM_BYTES".to_string(),
            (plan.mtu - 28).to_string(),
        ),
        // Several links at a few Gbit/s: a larger window keeps every path busy.
        (
            "QUIVER_NET_WINDOW_BYTES".to_string(),
            (32u64 << 20).to_string(),
        ),
        (
            "QUIVER_NET_IDLE_TIMEOUT_MS".to_string(),
            "10000".to_string(),
        ),
    ];
    let seconds = format!("{}", plan.seconds);
    let extra = vec![
        "--seconds".to_string(),
        seconds,
        "--post-window".to_string(),
        plan.post_window.to_string(),
        "--recv-window".to_string(),
        plan.recv_window.to_string(),
    ];
    let receiver = Worker::start(
        "receiver",
        &b,
        &environment,
        &identity,
        1,
        plan.cpus[1],
        "receiver",
        &extra,
    )?;
    let sender = match Worker::start(
        "sender",
        &a,
        &environment,
        &identity,
        0,
        plan.cpus[0],
        "sender",
        &extra,
    ) {
        Ok(sender) => sender,
        Err(error) => {
            let mut receiver = receiver;
            receiver.kill();
            return Err(error);
        }
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(plan.seconds) + Duration::from_secs(60);
    let mut killed_at_ns = None;
    if let Some(at) = plan.kill_link {
        // The transfer starts once both have connected: well under a second here.
        let kill_time = started + Duration::from_secs_f64(at + 0.5);
        while Instant::now() < kill_time && !testbed::interrupted() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let device = format!("link{}", links - 1);
        killed_at_ns = Some(monotonic_ns());
        let status = Command::new("ip")
            .args(["-n", &a, "link", "set", &device, "down"])
            .status();
        if !matches!(status, Ok(status) if status.success()) {
            eprintln!("quiver bench stripe: taking {device} down failed: {status:?}");
        }
    }
    let sender_report = sender.finish::<SenderReport>(deadline);
    let receiver_report = receiver.finish::<ReceiverReport>(deadline);
    match (sender_report, receiver_report) {
        (Ok(sender), Ok(receiver)) => Ok((sender, receiver, killed_at_ns)),
        (sender, receiver) => Err([sender.err(), receiver.err()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

/// The TCP baseline: N streams, stream i over link i.
fn run_tcp(plan: &Plan, links: u32) -> Result<(TcpReport, TcpReport, Option<String>), String> {
    let [a, b] = testbed::namespaces(&plan.name);
    let identity =
        JobIdentity::generate().map_err(|error| format!("making a job identity: {error}"))?;
    let extra = vec![
        "--seconds".to_string(),
        format!("{}", plan.seconds),
        "--worker-links".to_string(),
        links.to_string(),
    ];
    let server = Worker::start(
        "tcp server",
        &b,
        &[],
        &identity,
        1,
        plan.cpus[1],
        "tcp-server",
        &extra,
    )?;
    let client = match Worker::start(
        "tcp client",
        &a,
        &[],
        &identity,
        0,
        plan.cpus[0],
        "tcp-client",
        &extra,
    ) {
        Ok(client) => client,
        Err(error) => {
            let mut server = server;
            server.kill();
            return Err(error);
        }
    };
    let deadline = Instant::now() + Duration::from_secs_f64(plan.seconds) + Duration::from_secs(60);
    let client_report = client.finish::<TcpReport>(deadline);
    let server_report = server.finish::<TcpReport>(deadline);
    let congestion_control = Command::new("ip")
        .args([
            "netns",
            "exec",
            &a,
            "cat",
            "/proc/sys/net/ipv4/tcp_congestion_control",
        ])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string());
    Ok((client_report?, server_report?, congestion_control))
}

// ---- the workers ----

fn run_worker(role: &str, args: &StripeArgs) -> Result<(), String> {
    let seconds = Duration::from_secs_f64(args.seconds);
    let json = match role {
        "sender" => serde_json::to_string(&quiver_sender(seconds, args.post_window)?),
        "receiver" => serde_json::to_string(&quiver_receiver(args.recv_window)?),
        "tcp-server" => serde_json::to_string(&tcp_server(args.worker_links)?),
        "tcp-client" => serde_json::to_string(&tcp_client(args.worker_links, seconds)?),
        other => return Err(format!("unknown worker role {other:?}")),
    }
    .map_err(|error| format!("encoding the report: {error}"))?;
    println!("{json}");
    Ok(())
}

/// The CONTENTS message bodies both sides derive from the same seed.
fn contents() -> Vec<Vec<u8>> {
    (0..CONTENTS as u64)
        .map(|index| {
            let mut state = (index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut body = vec![0u8; MESSAGE_BYTES];
            for chunk in body.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            body
        })
        .collect()
}

fn quiver_sender(seconds: Duration, post_window: usize) -> Result<SenderReport, String> {
    let context = Context::from_env().map_err(|error| format!("context: {error}"))?;
    let mut endpoint = context
        .endpoint(1)
        .map_err(|error| format!("endpoint: {error}"))?;
    let connection = endpoint
        .connect(Addr::new(1, 1))
        .map_err(|error| format!("connecting to the receiver: {error}"))?;
    // Each body is lent to a posted send and comes back when it completes, so a slot is
    // empty while its message is posted (the window is at most CONTENTS).
    let mut bodies: Vec<Option<Vec<u8>>> = contents().into_iter().map(Some).collect();
    let mut posted: VecDeque<(u64, SendRequest)> = VecDeque::new();
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let mut messages = 0u64;
    let failed = |index: u64, error: quiver::Error| {
        format!(
            "sending message {index}: {error}; {}",
            diagnostics(&context)
        )
    };
    while start.elapsed() < seconds {
        let slot = messages as usize % CONTENTS;
        if post_window == 0 {
            let body = bodies[slot].as_mut().expect("no send is posted");
            body[..8].copy_from_slice(&messages.to_le_bytes());
            endpoint
                .send(connection, body)
                .map_err(|error| failed(messages, error))?;
        } else {
            if posted.len() >= post_window {
                let (index, request) = posted.pop_front().expect("the window is full");
                let body = endpoint
                    .wait_send(request)
                    .map_err(|error| failed(index, error))?;
                bodies[index as usize % CONTENTS] = Some(body);
            }
            // Invariant: the message CONTENTS before this one completed (the window is
            // at most CONTENTS and the oldest is waited for first).
            let mut body = bodies[slot].take().expect("its last send completed");
            body[..8].copy_from_slice(&messages.to_le_bytes());
            let request = endpoint
                .post_send(connection, body)
                .map_err(|error| failed(messages, error))?;
            posted.push_back((messages, request));
        }
        messages += 1;
    }
    while let Some((index, request)) = posted.pop_front() {
        endpoint
            .wait_send(request)
            .map_err(|error| failed(index, error))?;
    }
    let mut end = [0u8; 16];
    end[..8].copy_from_slice(END_MARKER);
    end[8..].copy_from_slice(&messages.to_le_bytes());
    endpoint
        .send(connection, &end)
        .map_err(|error| format!("sending the end: {error}"))?;
    // The receiver answers once it has checked everything.
    let mut answer = [0u8; 16];
    endpoint
        .recv(&mut answer)
        .map_err(|error| format!("waiting for the receiver: {error}"))?;
    let elapsed_seconds = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let stats = context.stats().datagram.unwrap_or_default();
    Ok(SenderReport {
        messages,
        cpu_seconds: cpu,
        elapsed_seconds,
        retransmits: stats.retransmits,
        fast_retransmits: stats.fast_retransmits,
        timeouts: stats.timeouts,
        datagrams_sent: stats.datagrams_sent,
        datagrams_received: stats.datagrams_received,
        paths_down: stats.paths_down,
        paths_rejoined: stats.paths_rejoined,
        link_payload_bytes: context
            .link_stats()
            .iter()
            .map(|link| link.payload_bytes_sent)
            .collect(),
        link_frames_lost: context
            .link_stats()
            .iter()
            .map(|link| link.frames_lost)
            .collect(),
        link_spurious_losses: context
            .link_stats()
            .iter()
            .map(|link| link.spurious_losses)
            .collect(),
        link_datagrams_received: context
            .link_stats()
            .iter()
            .map(|link| link.datagrams_received)
            .collect(),
        udp_counters: udp_counters(),
        link_gauges: context
            .link_stats()
            .iter()
            .map(|link| {
                (
                    link.window_bytes,
                    link.delivery_rate_bytes_per_second,
                    link.smoothed_rtt_ns,
                    link.min_rtt_ns,
                )
            })
            .collect(),
    })
}

fn quiver_receiver(recv_window: usize) -> Result<ReceiverReport, String> {
    let context = Context::from_env().map_err(|error| format!("context: {error}"))?;
    let mut endpoint = context
        .endpoint(1)
        .map_err(|error| format!("endpoint: {error}"))?;
    let bodies = contents();
    let mut buffer = vec![0u8; MESSAGE_BYTES];
    let mut report = ReceiverReport::default();
    let mut cpu_at_first = 0.0;
    let mut next_sample = Instant::now();
    // With --recv-window N: N receives posted, completed in order, each buffer posted
    // again once checked.
    let mut posted = VecDeque::new();
    for _ in 0..recv_window {
        let request = endpoint
            .post_recv(vec![0u8; MESSAGE_BYTES])
            .map_err(|error| format!("posting a receive: {error}"))?;
        posted.push_back(request);
    }
    loop {
        let receive_error = |error: quiver::Error, report: &ReceiverReport| {
            format!(
                "receiving message {}: {error}; {}",
                report.messages,
                diagnostics(&context)
            )
        };
        let len = match posted.pop_front() {
            Some(request) => {
                let done = endpoint
                    .wait_recv(request)
                    .map_err(|error| receive_error(error, &report))?;
                // The checked buffer of the previous message is posted again.
                let previous = std::mem::replace(&mut buffer, done.buf);
                let request = endpoint
                    .post_recv(previous)
                    .map_err(|error| format!("posting a receive: {error}"))?;
                posted.push_back(request);
                done.len
            }
            None => {
                endpoint
                    .recv(&mut buffer)
                    .map_err(|error| receive_error(error, &report))?
                    .0
            }
        };
        let now_ns = monotonic_ns();
        if len == 16 && &buffer[..8] == END_MARKER {
            let sent = u64::from_le_bytes(buffer[8..16].try_into().unwrap_or([0; 8]));
            if sent != report.messages {
                return Err(format!(
                    "the sender sent {sent} messages, {} arrived",
                    report.messages
                ));
            }
            break;
        }
        let index = report.messages;
        let expected = &bodies[index as usize % CONTENTS];
        if len != MESSAGE_BYTES
            || buffer[..8] != index.to_le_bytes()
            || buffer[8..len] != expected[8..]
        {
            return Err(format!(
                "message {index} is not what was sent ({len} bytes)"
            ));
        }
        if report.messages == 0 {
            report.first_ns = now_ns;
            cpu_at_first = cpu_seconds();
        }
        report.messages += 1;
        report.bytes += len as u64;
        report.last_ns = now_ns;
        if Instant::now() >= next_sample {
            report.timeline.push((now_ns, report.bytes));
            next_sample += SAMPLE_INTERVAL;
        }
    }
    report.cpu_seconds = cpu_seconds() - cpu_at_first;
    report.timeline.push((report.last_ns, report.bytes));
    let stats = context.stats().datagram.unwrap_or_default();
    report.datagrams_sent = stats.datagrams_sent;
    report.datagrams_received = stats.datagrams_received;
    report.duplicates_dropped = stats.duplicates_dropped;
    report.direct_read_bytes = stats.direct_read_bytes;
    report.udp_counters = udp_counters();
    let back = endpoint
        .connect(Addr::new(0, 1))
        .map_err(|error| format!("connecting back to the sender: {error}"))?;
    endpoint
        .send(back, b"checked")
        .map_err(|error| format!("answering the sender: {error}"))?;
    Ok(report)
}

fn tcp_server(links: u32) -> Result<TcpReport, String> {
    let listeners: Vec<TcpListener> = (0..links)
        .map(|link| {
            TcpListener::bind(link_address(link, 1, TCP_PORT))
                .map_err(|error| format!("listening on link {link}: {error}"))
        })
        .collect::<Result<_, _>>()?;
    let bodies = Arc::new(contents());
    let total = Arc::new(AtomicU64::new(0));
    let first = Arc::new(AtomicU64::new(u64::MAX));
    let last = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds();
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            let (bodies, total, first, last) =
                (bodies.clone(), total.clone(), first.clone(), last.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let (mut stream, _) = listener
                    .accept()
                    .map_err(|error| format!("accepting: {error}"))?;
                // The same work as the quiver receiver: whole messages, each checked
                // against the body it was sent from.
                let mut buffer = vec![0u8; MESSAGE_BYTES];
                let mut index = 0u64;
                loop {
                    let mut filled = 0;
                    while filled < MESSAGE_BYTES {
                        let count = stream
                            .read(&mut buffer[filled..])
                            .map_err(|error| format!("reading: {error}"))?;
                        if count == 0 {
                            return match filled {
                                0 => Ok(()),
                                _ => Err(format!(
                                    "the stream ended {filled} bytes into message {index}"
                                )),
                            };
                        }
                        filled += count;
                        let now = monotonic_ns();
                        first.fetch_min(now, Ordering::Relaxed);
                        last.fetch_max(now, Ordering::Relaxed);
                        total.fetch_add(count as u64, Ordering::Relaxed);
                    }
                    let expected = &bodies[index as usize % CONTENTS];
                    if buffer[..8] != index.to_le_bytes() || buffer[8..] != expected[8..] {
                        return Err(format!("tcp message {index} is not what was sent"));
                    }
                    index += 1;
                }
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a stream thread panicked".to_string())??;
    }
    Ok(TcpReport {
        bytes: total.load(Ordering::Relaxed),
        first_ns: first.load(Ordering::Relaxed),
        last_ns: last.load(Ordering::Relaxed),
        cpu_seconds: cpu_seconds() - cpu_before,
    })
}

fn tcp_client(links: u32, seconds: Duration) -> Result<TcpReport, String> {
    // The same messages as the quiver sender: CONTENTS bodies in turn, each stamped with
    // its index (per stream), so that both baselines move and check the same bytes.
    let bodies = Arc::new(contents());
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let threads: Vec<_> = (0..links)
        .map(|link| {
            let bodies = bodies.clone();
            std::thread::spawn(move || -> Result<u64, String> {
                let target = link_address(link, 1, TCP_PORT);
                let connect_deadline = Instant::now() + Duration::from_secs(10);
                let mut stream = loop {
                    match TcpStream::connect(target) {
                        Ok(stream) => break stream,
                        Err(_) if Instant::now() < connect_deadline => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(error) => return Err(format!("connecting to {target}: {error}")),
                    }
                };
                let mut sent = 0u64;
                let mut index = 0u64;
                while start.elapsed() < seconds {
                    let body = &bodies[index as usize % CONTENTS];
                    stream
                        .write_all(&index.to_le_bytes())
                        .and_then(|()| stream.write_all(&body[8..]))
                        .map_err(|error| format!("writing to {target}: {error}"))?;
                    sent += body.len() as u64;
                    index += 1;
                }
                Ok(sent)
            })
        })
        .collect();
    let mut bytes = 0;
    for thread in threads {
        bytes += thread
            .join()
            .map_err(|_| "a stream thread panicked".to_string())??;
    }
    Ok(TcpReport {
        bytes,
        first_ns: 0,
        last_ns: 0,
        cpu_seconds: cpu_seconds() - cpu_before,
    })
}

/// What the engine and the kernel say, for a failure report.
fn diagnostics(context: &Context) -> String {
    format!(
        "engine {:?}; links {:?}; kernel udp {}",
        context.stats().datagram,
        context.link_stats(),
        udp_counters()
    )
}

/// The `Udp:` counters of this network namespace, as `name=value` pairs.
fn udp_counters() -> String {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut lines = text.lines().filter(|line| line.starts_with("Udp:"));
    match (lines.next(), lines.next()) {
        (Some(names), Some(values)) => names
            .split_whitespace()
            .zip(values.split_whitespace())
            .skip(1)
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// CPU time of this process so far (user + system, all threads), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own; RUSAGE_SELF is valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CLOCK_MONOTONIC in ns: the same clock in every process of the machine.
fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain old data; all-zero is a valid value.
    let mut time: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into the struct we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(arguments: &[&str]) -> Result<Plan, String> {
        let mut all = vec!["stripe", "--cpus", "0,1"];
        all.extend_from_slice(arguments);
        match StripeArgs::try_parse_from(all) {
            Ok(args) => Plan::from_args(&args),
            Err(error) => Err(error.to_string()),
        }
    }

    #[test]
    fn options_are_checked() {
        let plan =
            plan(&["--links", "1,2,4,8", "--rate", "1gbit", "--mtu", "9000"]).expect("valid");
        assert_eq!(plan.link_counts, vec![1, 2, 4, 8]);
        assert_eq!(plan.rate_bps, 1_000_000_000);
        assert!(plan.tcp);
        assert!(super::tests::plan(&["--links", "0"]).is_err());
        assert!(super::tests::plan(&["--links", "65"]).is_err());
        assert!(super::tests::plan(&["--links", "2", "--loss", "60"]).is_err());
        assert!(super::tests::plan(&["--links", "1", "--kill-link", "2"]).is_err());
        assert!(super::tests::plan(&["--links", "2", "--kill-link", "9.5"]).is_err());
        let killing = super::tests::plan(&["--links", "2", "--kill-link", "3"]).expect("valid");
        assert!(!killing.tcp, "no TCP baseline with a dead link");
        assert!(super::tests::plan(&["--offloads", "maybe"]).is_err());
        assert_eq!(plan.recv_window, 0, "blocking receives by default");
        let posting = super::tests::plan(&["--recv-window", "8"]).expect("valid");
        assert_eq!(posting.recv_window, 8);
        assert!(super::tests::plan(&["--recv-window", "65"]).is_err());
        assert!(!plan.lossless_baseline);
        assert!(
            super::tests::plan(&["--lossless-baseline"]).is_err(),
            "needs --loss"
        );
        let lossy = super::tests::plan(&["--loss", "1", "--lossless-baseline"]).expect("valid");
        assert!(lossy.lossless_baseline);
    }

    #[test]
    fn links_variable_pairs_link_i_with_link_i() {
        assert_eq!(
            links_variable(2),
            "10.77.0.1:7400,10.77.1.1:7400;10.77.0.2:7400,10.77.1.2:7400"
        );
        let parsed = quiver::parse_links(&links_variable(8)).expect("valid QUIVER_LINKS");
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1][7], "10.77.7.2:7400".parse().unwrap());
    }

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
