//! `quiver info`: what quiver would do on this machine — transports, protocol thresholds,
//! every setting with the variable that overrides it, and the job this process belongs to.

use std::io::Write;

/// Prints the report; returns the exit status (2 if the configuration is invalid).
pub(crate) fn main() -> i32 {
    let config = match quiver::Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quiver info: {e}");
            return 2;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "quiver {}", env!("CARGO_PKG_VERSION"));
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        out,
        "machine: {cpus} CPUs available, kernel {}",
        kernel_release()
    );
    write_transports(&mut out, &config);
    print_links(&mut out);
    write_thresholds(&mut out, &config);
    write_bootstrap(&mut out);
    let _ = writeln!(out, "\njob:");
    match (std::env::var("QUIVER_RANK"), std::env::var("QUIVER_SIZE")) {
        (Ok(r), Ok(s)) => {
            let _ = writeln!(
                out,
                "  rank {r} of {s} (job {})",
                std::env::var("QUIVER_JOB_ID").unwrap_or_default()
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "  not inside a job (start programs with `quiver run -n N -- PROGRAM`)"
            );
        }
    }
    0
}

/// The transports in the order they are tried, what each is for, and the ranks' addresses.
fn write_transports(out: &mut impl Write, config: &quiver::Config) {
    let _ = writeln!(
        out,
        "\ntransports (tried in this order for each peer, QUIVER_TRANSPORTS={}):",
        config
            .transports
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(",")
    );
    for kind in &config.transports {
        let what = match kind {
            quiver::TransportKind::Shm => {
                "peers on this node: rings in memfd + process_vm_readv for large messages"
            }
            quiver::TransportKind::Udp => {
                "peers with an address: quiver's reliable protocol over UDP (sendmmsg/recvmmsg, GSO/GRO)"
            }
            quiver::TransportKind::Tcp => {
                "peers with an address: TCP_NODELAY streams, header and payload in one write"
            }
            quiver::TransportKind::Mem => {
                "in-process datagram queues under the reliable protocol (tests)"
            }
            quiver::TransportKind::Xdp => {
                "peers with an address on a network interface: quiver's reliable protocol over AF_XDP sockets (root; QUIVER_XDP_IFACE)"
            }
        };
        let _ = writeln!(out, "  {:<5} {what}", kind.name());
    }
    match std::env::var("QUIVER_ADDRS") {
        Ok(addrs) => {
            let _ = writeln!(out, "  rank addresses (QUIVER_ADDRS): {addrs}");
        }
        Err(_) if std::env::var_os("QUIVER_LINKS").is_some() => {
            let _ = writeln!(
                out,
                "  rank addresses: the first link of each rank (no QUIVER_ADDRS)"
            );
        }
        Err(_) => {
            let _ = writeln!(
                out,
                "  no QUIVER_ADDRS: only shm can be used (quiver run sets it when QUIVER_TRANSPORTS names udp or tcp)"
            );
        }
    }
}

/// The shm protocol by size, the protocol thresholds with where each came from, and every
/// setting with the variable that overrides it.
fn write_thresholds(out: &mut impl Write, config: &quiver::Config) {
    let _ = writeln!(out, "\nshm protocol by message size:");
    for (name, low, high) in config.protocol_ranges() {
        let high = if high == u64::MAX {
            "any".to_string()
        } else {
            format!("{high} B")
        };
        let _ = writeln!(out, "  {low:>8} B .. {high:<10} {name}");
    }
    let _ = writeln!(
        out,
        "\nprotocol thresholds (source: environment > this machine's profile > default):"
    );
    let _ = writeln!(out, "  profile: {}", config.profile);
    let settings = config.describe();
    for (name, source) in &config.threshold_sources {
        let value = settings
            .iter()
            .find(|setting| setting.env == *name)
            .map_or(String::new(), |setting| setting.value.clone());
        let _ = writeln!(out, "  {name:<26} {value:>12}  from {}", source.name());
    }
    let _ = writeln!(out, "\nsettings (override with the environment variable):");
    for s in settings {
        let _ = writeln!(out, "  {:<26} {:>12}  {}", s.env, s.value, s.doc);
    }
}

/// The links of every rank from `QUIVER_LINKS` (striping, `docs/striping.md`).
fn print_links(out: &mut impl Write) {
    let Ok(text) = std::env::var("QUIVER_LINKS") else {
        let _ = writeln!(
            out,
            "  links: one per rank (set QUIVER_LINKS to stripe datagram connections over several)"
        );
        return;
    };
    match quiver::parse_links(&text) {
        Ok(ranks) => {
            let _ = writeln!(
                out,
                "  links (QUIVER_LINKS; a connection is striped over the links both ranks have, link i to link i):"
            );
            for (rank, links) in ranks.iter().enumerate() {
                let list: Vec<String> = links.iter().map(ToString::to_string).collect();
                let _ = writeln!(out, "    rank {rank}: {}", list.join(", "));
            }
        }
        Err(error) => {
            let _ = writeln!(out, "  links: {error}");
        }
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The bootstrap section: whether PMIx support is built in, and which bootstrap
/// `Context::from_env` would use in this environment (docs/launchers.md).
fn write_bootstrap(out: &mut impl Write) {
    let _ = writeln!(out, "\nbootstrap (docs/launchers.md):");
    match quiver::Bootstrap::pmix_version() {
        Some(version) => {
            let _ = writeln!(out, "  PMIx support: built in ({version})");
        }
        None => {
            let _ = writeln!(
                out,
                "  PMIx support: not built in (install libpmix-dev and pkg-config, then rebuild)"
            );
        }
    }
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "-".into());
    match quiver::Bootstrap::detect() {
        Ok(quiver::Bootstrap::Pmix) => {
            let _ = writeln!(
                out,
                "  launcher: PMIx (PMIX_NAMESPACE={}, PMIX_RANK={}): Context::from_env \
                 bootstraps through PMIx",
                var("PMIX_NAMESPACE"),
                var("PMIX_RANK")
            );
        }
        Ok(quiver::Bootstrap::Rendezvous) => {
            let _ = writeln!(
                out,
                "  launcher: rank variables without PMIx: Context::from_env meets rank 0 at \
                 QUIVER_RENDEZVOUS={}",
                var("QUIVER_RENDEZVOUS")
            );
        }
        Ok(other) => {
            let _ = writeln!(
                out,
                "  launcher: quiver run ({other}): Context::from_env reads QUIVER_RANK and friends"
            );
        }
        Err(e) if e.to_string().contains("not started by a launcher") => {
            let _ = writeln!(
                out,
                "  launcher: none detected (quiver run, mpirun, srun --mpi=pmix, or the \
                 rendezvous variables)"
            );
        }
        Err(e) => {
            let _ = writeln!(out, "  launcher: {e}");
        }
    }
    if let Ok(netns) = std::env::var("QUIVER_NETNS") {
        let _ = writeln!(
            out,
            "  QUIVER_NETNS={netns}: each rank enters its network namespace before binding"
        );
    }
}
