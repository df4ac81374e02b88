//! `quiver info`: what quiver would do on this machine — transports, the protocol each
//! message size uses and why, every setting with the variable that overrides it and where
//! its value came from, how a blocking call waits on this node, the bootstrap, the job this
//! process belongs to, and any `QUIVER_*`
//! variable set here that quiver does not know.
//!
//! The report is gathered once into [`Report`], then printed as text or, with `--json`, as
//! one JSON object with the same content (its keys are listed on [`Report`] and in the
//! README). `--protocols` keeps only the protocols (the `UCX_PROTO_INFO` equivalent, what
//! `QUIVER_PROTO_INFO=1` prints per connection as it opens).

use std::io::Write;

use clap::Args;
use quiver::variables::UnknownVariable;
use quiver::{Config, TransportInfo, TransportKind};
use quiver_cli::provenance::Provenance;

use crate::environment::{checks, Check};
use serde::Serialize;

/// Options of `quiver info`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// Show only which transport and which protocol each message size range uses, and why
    /// (what QUIVER_PROTO_INFO=1 prints per connection as it opens)
    #[arg(long)]
    protocols: bool,
    /// Print the report as one JSON object (the keys are listed in the README's "quiver
    /// info" section); with --protocols, only `protocols` and the provenance keys
    #[arg(long)]
    json: bool,
}

/// Everything `quiver info` shows. Serialised as the JSON object of `--json`: the
/// provenance keys (`schema_version`, `host`, `quiver_version`, `commit`, as in the bench's
/// records), then `machine`, `transports`, `addresses`, `links`, `protocols`, `profile`,
/// `thresholds`, `settings`, `waiting`, `bootstrap`, `job`, `unknown_variables` and
/// `environment`.
#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    machine: Machine,
    /// In the order they are tried for each peer (`QUIVER_TRANSPORTS`).
    transports: Vec<TransportLine>,
    /// Where the ranks' network addresses come from (one line of text).
    addresses: String,
    links: Links,
    /// One entry per transport of `transports`, in the same order.
    protocols: Vec<Protocols>,
    /// The per-machine profile: its path and state.
    profile: String,
    thresholds: Vec<Threshold>,
    settings: Vec<SettingLine>,
    /// How a blocking call waits on this node, and why (the waiting policy, one line).
    waiting: String,
    bootstrap: BootstrapReport,
    /// `null` outside a job.
    job: Option<Job>,
    unknown_variables: Vec<Unknown>,
    /// The environment checks: cross-memory attach, ptrace scope, socket buffer limits,
    /// udp offloads, io_uring, locked memory; each with its status and fix.
    environment: Vec<Check>,
}

/// `--json --protocols`: the provenance keys and `protocols`.
#[derive(Debug, Serialize)]
struct ProtocolsOnly<'a> {
    #[serde(flatten)]
    provenance: &'a Provenance,
    protocols: &'a [Protocols],
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    kernel: String,
}

#[derive(Debug, Serialize)]
struct TransportLine {
    name: &'static str,
    /// What the transport is for.
    used_for: &'static str,
}

/// `QUIVER_LINKS`: unset (`null`), every rank's links, or why it does not parse.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Links {
    Unset,
    Ranks(Vec<Vec<String>>),
    Invalid { error: String },
}

#[derive(Debug, Serialize)]
struct Protocols {
    transport: &'static str,
    /// The medium delivers in order and without loss by itself (else quiver's protocol does).
    reliable: bool,
    /// Large messages move without a staging copy.
    zero_copy: bool,
    ranges: Vec<Range>,
}

#[derive(Debug, Serialize)]
struct Range {
    /// Smallest size in bytes.
    first: u64,
    /// Largest size in bytes; `null`: no upper bound.
    last: Option<u64>,
    protocol: &'static str,
    why: String,
}

#[derive(Debug, Serialize)]
struct Threshold {
    name: &'static str,
    value: String,
    /// "default", "profile" or "environment".
    source: &'static str,
}

#[derive(Debug, Serialize)]
struct SettingLine {
    name: &'static str,
    value: String,
    doc: &'static str,
}

#[derive(Debug, Serialize)]
struct BootstrapReport {
    /// The PMIx library's version when PMIx support is built in, else `null`.
    pmix: Option<String>,
    /// The bootstrap `Context::from_env` would use here ("env", "pmix", "rendezvous"),
    /// `null` when none is detected.
    detected: Option<&'static str>,
    /// One line saying which launcher was detected and what that means.
    launcher: String,
    /// `QUIVER_NETNS`, when set.
    netns: Option<String>,
}

#[derive(Debug, Serialize)]
struct Job {
    rank: String,
    size: String,
    job_id: String,
}

#[derive(Debug, Serialize)]
struct Unknown {
    name: String,
    closest: &'static str,
    /// The whole warning, as the context prints it.
    warning: String,
}

/// Prints the report; returns the exit status (2 if the configuration is invalid).
pub(crate) fn main(args: InfoArgs) -> i32 {
    // Named before the settings are parsed: a misspelling is worth knowing even when
    // another variable is malformed.
    let unknown = quiver::variables::unknown_variables();
    let resolved = Config::from_env().and_then(|mut config| {
        config.resolve_wait(quiver::node_load_from_env()?);
        Ok(config)
    });
    let config = match resolved {
        Ok(config) => config,
        Err(e) => {
            for variable in &unknown {
                eprintln!("quiver info: warning: {variable}");
            }
            eprintln!("quiver info: {e}");
            return 2;
        }
    };
    let report = gather(&config, unknown);
    let mut out = std::io::stdout().lock();
    let written = match (args.json, args.protocols) {
        (true, false) => serde_json::to_writer_pretty(&mut out, &report).map_err(Into::into),
        (true, true) => serde_json::to_writer_pretty(
            &mut out,
            &ProtocolsOnly {
                provenance: &report.provenance,
                protocols: &report.protocols,
            },
        )
        .map_err(Into::into),
        (false, true) => write_protocols(&mut out, &config),
        (false, false) => write_text(&mut out, &report, &config),
    };
    match written.and_then(|()| writeln!(out)) {
        Ok(()) => 0,
        // A closed pipe (`quiver info | head`) is not worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("quiver info: writing the report: {e}");
            1
        }
    }
}

/// Collects the report.
fn gather(config: &Config, unknown: Vec<UnknownVariable>) -> Report {
    let settings = config.describe();
    let thresholds = config
        .threshold_sources
        .iter()
        .map(|(name, source)| Threshold {
            name,
            value: settings
                .iter()
                .find(|setting| setting.env == *name)
                .map_or(String::new(), |setting| setting.value.clone()),
            source: source.name(),
        })
        .collect();
    let job = match (std::env::var("QUIVER_RANK"), std::env::var("QUIVER_SIZE")) {
        (Ok(rank), Ok(size)) => Some(Job {
            rank,
            size,
            job_id: std::env::var("QUIVER_JOB_ID").unwrap_or_default(),
        }),
        _ => None,
    };
    Report {
        provenance: Provenance::current(),
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: kernel_release(),
        },
        transports: config
            .transports
            .iter()
            .map(|kind| TransportLine {
                name: kind.name(),
                used_for: used_for(*kind),
            })
            .collect(),
        addresses: addresses(),
        links: links(),
        protocols: config
            .transports
            .iter()
            .map(|kind| protocols(&quiver::transport_info(*kind, config)))
            .collect(),
        profile: config.profile.to_string(),
        thresholds,
        settings: settings
            .into_iter()
            .map(|setting| SettingLine {
                name: setting.env,
                value: setting.value,
                doc: setting.doc,
            })
            .collect(),
        waiting: config.wait.describe(),
        bootstrap: bootstrap(),
        job,
        unknown_variables: unknown
            .into_iter()
            .map(|variable| Unknown {
                warning: variable.to_string(),
                name: variable.name,
                closest: variable.closest,
            })
            .collect(),
        environment: checks(&config.spill_dir),
    }
}

fn used_for(kind: TransportKind) -> &'static str {
    match kind {
        TransportKind::Shm => {
            "peers on this node: rings in memfd + process_vm_readv for large messages"
        }
        TransportKind::Udp => {
            "peers with an address: quiver's reliable protocol over UDP (sendmmsg/recvmmsg, GSO/GRO)"
        }
        TransportKind::Tcp => {
            "peers with an address: TCP_NODELAY streams, header and payload in one write"
        }
        TransportKind::Mem => "in-process datagram queues under the reliable protocol (tests)",
        TransportKind::Xdp => {
            "peers with an address on a network interface: quiver's reliable protocol over AF_XDP sockets (root; QUIVER_XDP_IFACE)"
        }
    }
}

fn protocols(info: &TransportInfo) -> Protocols {
    Protocols {
        transport: info.kind.name(),
        reliable: info.reliable,
        zero_copy: info.zero_copy,
        ranges: info
            .ranges
            .iter()
            .map(|range| Range {
                first: range.first,
                last: range.last,
                protocol: range.protocol,
                why: range.why.clone(),
            })
            .collect(),
    }
}

fn addresses() -> String {
    match std::env::var("QUIVER_ADDRS") {
        Ok(addrs) => format!("rank addresses (QUIVER_ADDRS): {addrs}"),
        Err(_) if std::env::var_os("QUIVER_LINKS").is_some() => {
            "rank addresses: the first link of each rank (no QUIVER_ADDRS)".to_string()
        }
        Err(_) => "no QUIVER_ADDRS: only shm can be used (quiver run sets it when \
                   QUIVER_TRANSPORTS names udp or tcp)"
            .to_string(),
    }
}

/// The links of every rank from `QUIVER_LINKS` (striping, `docs/striping.md`).
fn links() -> Links {
    let Ok(text) = std::env::var("QUIVER_LINKS") else {
        return Links::Unset;
    };
    match quiver::parse_links(&text) {
        Ok(ranks) => Links::Ranks(
            ranks
                .iter()
                .map(|links| links.iter().map(ToString::to_string).collect())
                .collect(),
        ),
        Err(error) => Links::Invalid {
            error: error.to_string(),
        },
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Whether PMIx support is built in, and which bootstrap `Context::from_env` would use in
/// this environment (docs/launchers.md).
fn bootstrap() -> BootstrapReport {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "-".into());
    let detected = quiver::Bootstrap::detect();
    let launcher = match &detected {
        Ok(quiver::Bootstrap::Pmix) => format!(
            "PMIx (PMIX_NAMESPACE={}, PMIX_RANK={}): Context::from_env bootstraps through PMIx",
            var("PMIX_NAMESPACE"),
            var("PMIX_RANK")
        ),
        Ok(quiver::Bootstrap::Rendezvous) => format!(
            "rank variables without PMIx: Context::from_env meets rank 0 at \
             QUIVER_RENDEZVOUS={}",
            var("QUIVER_RENDEZVOUS")
        ),
        Ok(other) => {
            format!("quiver run ({other}): Context::from_env reads QUIVER_RANK and friends")
        }
        Err(e) if e.to_string().contains("not started by a launcher") => {
            "none detected (quiver run, mpirun, srun --mpi=pmix, or the rendezvous variables)"
                .to_string()
        }
        Err(e) => e.to_string(),
    };
    BootstrapReport {
        pmix: quiver::Bootstrap::pmix_version(),
        detected: detected.ok().map(quiver::Bootstrap::name),
        launcher,
        netns: std::env::var("QUIVER_NETNS").ok(),
    }
}

/// The text report.
fn write_text(out: &mut impl Write, report: &Report, config: &Config) -> std::io::Result<()> {
    let provenance = &report.provenance;
    writeln!(
        out,
        "quiver {} (commit {})",
        provenance.quiver_version, provenance.commit
    )?;
    writeln!(
        out,
        "machine: {}, {} CPUs available, kernel {}",
        provenance.host, report.machine.cpus, report.machine.kernel
    )?;
    write_unknown(out, &report.unknown_variables)?;
    let order: Vec<&str> = report.transports.iter().map(|t| t.name).collect();
    writeln!(
        out,
        "\ntransports (tried in this order for each peer, QUIVER_TRANSPORTS={}):",
        order.join(",")
    )?;
    for transport in &report.transports {
        writeln!(out, "  {:<5} {}", transport.name, transport.used_for)?;
    }
    writeln!(out, "  {}", report.addresses)?;
    match &report.links {
        Links::Unset => writeln!(
            out,
            "  links: one per rank (set QUIVER_LINKS to stripe datagram connections over several)"
        )?,
        Links::Ranks(ranks) => {
            writeln!(
                out,
                "  links (QUIVER_LINKS; a connection is striped over the links both ranks have, link i to link i):"
            )?;
            for (rank, links) in ranks.iter().enumerate() {
                writeln!(out, "    rank {rank}: {}", links.join(", "))?;
            }
        }
        Links::Invalid { error } => writeln!(out, "  links: {error}")?,
    }
    writeln!(out)?;
    write_protocols(out, config)?;
    writeln!(out)?;
    writeln!(
        out,
        "\nprotocol thresholds (source: environment > this machine's profile > default):"
    )?;
    writeln!(out, "  profile: {}", report.profile)?;
    for t in &report.thresholds {
        writeln!(out, "  {:<26} {:>12}  from {}", t.name, t.value, t.source)?;
    }
    writeln!(out, "\nsettings (override with the environment variable):")?;
    for s in &report.settings {
        writeln!(out, "  {:<26} {:>12}  {}", s.name, s.value, s.doc)?;
    }
    writeln!(
        out,
        "\nwaiting (QUIVER_SPIN_US, QUIVER_YIELD, QUIVER_YIELD_SPIN_US; docs/decisions/0058-waiting-on-a-busy-node.md):\n  {}",
        report.waiting
    )?;
    write_bootstrap(out, &report.bootstrap)?;
    write_environment(out, &report.environment)?;
    writeln!(out, "\njob:")?;
    match &report.job {
        Some(job) => write!(
            out,
            "  rank {} of {} (job {})",
            job.rank, job.size, job.job_id
        ),
        None => write!(
            out,
            "  not inside a job (start programs with `quiver run -n N -- PROGRAM`)"
        ),
    }
}

/// Which protocol each message size uses on each transport of `QUIVER_TRANSPORTS`, and why.
fn write_protocols(out: &mut impl Write, config: &Config) -> std::io::Result<()> {
    write!(
        out,
        "protocols by message size (shm for peers on this node, else the first of the \
         others that reaches the peer; QUIVER_PROTO_INFO=1 prints each connection's as it \
         opens):"
    )?;
    for kind in &config.transports {
        let info = quiver::transport_info(*kind, config).to_string();
        write!(out, "\n{}", info.trim_end())?;
    }
    Ok(())
}

fn write_unknown(out: &mut impl Write, unknown: &[Unknown]) -> std::io::Result<()> {
    if unknown.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nenvironment:")?;
    for variable in unknown {
        writeln!(out, "  warning: {}", variable.warning)?;
    }
    Ok(())
}

fn write_bootstrap(out: &mut impl Write, bootstrap: &BootstrapReport) -> std::io::Result<()> {
    writeln!(out, "\nbootstrap (docs/launchers.md):")?;
    match &bootstrap.pmix {
        Some(version) => writeln!(out, "  PMIx support: built in ({version})")?,
        None => writeln!(
            out,
            "  PMIx support: not built in (install libpmix-dev and pkg-config, then rebuild)"
        )?,
    }
    writeln!(out, "  launcher: {}", bootstrap.launcher)?;
    if let Some(netns) = &bootstrap.netns {
        writeln!(
            out,
            "  QUIVER_NETNS={netns}: each rank enters its network namespace before binding"
        )?;
    }
    Ok(())
}

/// The environment checks, each with its fix when it is not ok.
fn write_environment(out: &mut impl Write, checks: &[Check]) -> std::io::Result<()> {
    writeln!(out, "\nenvironment checks:")?;
    for check in checks {
        writeln!(
            out,
            "  {:<20} {:<8} {}",
            check.name, check.status, check.found
        )?;
        if let Some(fix) = &check.fix {
            writeln!(out, "  {:<20} {:<8} fix: {fix}", "", "")?;
        }
    }
    Ok(())
}
