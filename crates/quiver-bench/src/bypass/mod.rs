//! `quiver-bench bypass`: what bypassing the kernel buys on this machine, in one run.
//! Over two network namespaces joined by a veth pair (the testbed of `quiver-bench
//! testbed`, one link, its rate limit taken off), five cases one after the other:
//!
//! - quiver over udp with plain sockets (`QUIVER_UDP_IO=sockets`);
//! - quiver over udp with io_uring (`QUIVER_UDP_IO=uring`, decision 0084);
//! - quiver over xdp (AF_XDP sockets, decision 0062);
//! - raw-udp: plain UDP sockets, busy-polled, one `send` per datagram, no protocol;
//! - raw-xdp: an AF_XDP ping-pong (latency) and one-way stream (rate, bandwidth) without
//!   a protocol: frames sent back to back in batches, counted at the other end, lost ones
//!   counted and not resent.
//!
//! Each measures 8 B and 1 KiB latency (half the median round trip), the 8 B message
//! rate (one way), 64 KiB and 1 MiB bandwidth (one way), and each side's CPU time per
//! message and per byte (`getrusage` of each rank over each test). Printed as a table;
//! `--json FILE|-` writes one JSON object per case and test; `--plot FILE.svg` draws the
//! three headline figures per case.
//!
//! Root only (namespaces, AF_XDP). The ranks are pinned to `--cpus` and busy-poll. Kernel
//! work (veth, softirq) is charged to whichever process the kernel runs it in, so the CPU
//! figures are indicative; the AF_XDP copy mode of veth copies each frame once each way.
//!
//! Layout: this file (the run), `plan` (the command line and the cases), `worker` (one
//! side of a case), `raw_xdp` (the AF_XDP baseline), `report` (rows, the table, JSON and
//! the plot).

mod plan;
mod raw_xdp;
mod report;
mod worker;

pub(crate) use plan::BypassArgs;

use std::time::{Duration, Instant};

use quiver_cli::launch::JobIdentity;

use crate::stripe::launch::Worker;
use crate::stripe::plan::link_address;
use crate::testbed;
use plan::{Case, QUIVER_PORT};
use report::{print_table, rows, write_json, write_plot, Row};
use worker::{run_worker, RankReport};

/// Runs `quiver-bench bypass`; returns the exit code.
pub(crate) fn main(args: &BypassArgs) -> i32 {
    let args = args.effective();
    if let Some(case) = args.worker {
        return match run_worker(case, args.rank, &args) {
            Ok(()) => 0,
            Err(message) => {
                eprintln!(
                    "quiver-bench bypass: {} rank {}: {message}",
                    case.name(),
                    args.rank
                );
                1
            }
        };
    }
    if args.cpus.len() != 2 {
        eprintln!("quiver-bench bypass: --cpus takes two CPUs (rank 0, rank 1)");
        return 2;
    }
    testbed::install_signal_handlers();
    let result = run(&args);
    let _ = testbed::down(&args.name);
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver-bench bypass: {message}");
            1
        }
    }
}

/// Builds the testbed, runs every case, reports.
fn run(args: &BypassArgs) -> Result<(), String> {
    let spec = testbed::Spec {
        name: args.name.clone(),
        links: 1,
        rate_bps: 100_000_000_000,
        loss_ppm: 0,
        mtu: args.mtu,
        offloads_off: false,
    };
    testbed::build(&spec)?;
    // No rate limit: the link is the veth pair itself (AF_XDP skips the qdisc anyway).
    for namespace in testbed::namespaces(&args.name) {
        let _ = std::process::Command::new("tc")
            .args(["-n", &namespace, "qdisc", "del", "dev", "link0", "root"])
            .status();
    }
    let mut all: Vec<Row> = Vec::new();
    for &case in &args.cases {
        if testbed::interrupted() {
            return Err("interrupted".into());
        }
        eprintln!("quiver-bench bypass: {} ...", case.name());
        match run_case(case, args) {
            Ok((zero, one)) => all.extend(rows(case, &zero, &one)),
            Err(message) => eprintln!("quiver-bench bypass: {}: {message}", case.name()),
        }
    }
    if all.is_empty() {
        return Err("no case ran".into());
    }
    print_table(&all, args.mtu);
    if let Some(path) = &args.json {
        write_json(path, &all)?;
    }
    if let Some(path) = &args.plot {
        write_plot(path, &all, args.mtu)?;
    }
    Ok(())
}

/// Runs both sides of `case`; returns rank 0's and rank 1's reports.
fn run_case(case: Case, args: &BypassArgs) -> Result<(RankReport, RankReport), String> {
    let [a, b] = testbed::namespaces(&args.name);
    let mut identity =
        JobIdentity::generate().map_err(|error| format!("making a job identity: {error}"))?;
    identity.addrs = vec![
        link_address(0, 0, QUIVER_PORT),
        link_address(0, 1, QUIVER_PORT),
    ];
    identity.transports = Some(
        match case {
            Case::QuiverXdp => "xdp",
            _ => "udp",
        }
        .to_string(),
    );
    let environment: Vec<(String, String)> = vec![
        (
            "QUIVER_UDP_IO".into(),
            match case {
                Case::QuiverUdpUring => "uring",
                _ => "sockets",
            }
            .into(),
        ),
        ("QUIVER_NET_IDLE_TIMEOUT_MS".into(), "10000".into()),
        // Datagrams as large as the link takes (the default is 1472 off loopback).
        (
            "QUIVER_UDP_DATAGRAM_BYTES".into(),
            (args.mtu - 28).to_string(),
        ),
    ];
    let mut extra = args.worker_options();
    let role = |rank: u32| {
        let mut role_args = vec![format!("--rank={rank}")];
        role_args.append(&mut extra.clone());
        role_args
    };
    let one = Worker::start_command(
        "bypass",
        "rank 1",
        &b,
        &environment,
        &identity,
        1,
        args.cpus[1],
        case.name(),
        &role(1),
    )?;
    let zero = match Worker::start_command(
        "bypass",
        "rank 0",
        &a,
        &environment,
        &identity,
        0,
        args.cpus[0],
        case.name(),
        &role(0),
    ) {
        Ok(zero) => zero,
        Err(error) => {
            let mut one = one;
            one.kill();
            return Err(error);
        }
    };
    extra.clear();
    let deadline = Instant::now() + Duration::from_secs(600);
    let zero = zero.finish::<RankReport>(deadline);
    let one = one.finish::<RankReport>(deadline);
    match (zero, one) {
        (Ok(zero), Ok(one)) => Ok((zero, one)),
        (zero, one) => Err([zero.err(), one.err()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("\n")),
    }
}
