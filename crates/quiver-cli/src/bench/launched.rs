//! `quiver bench` started by a launcher: each process is one of the two ranks and the
//! bench measures between them, wherever the launcher put them (`mpirun -np 2 -H a,b
//! quiver bench ...`, `srun -N 2 --mpi=pmix quiver bench ...`, `quiver run -n 2 quiver
//! bench ...`), or two commands started by hand that meet at rank 0
//! (`quiver bench --rendezvous HOST:PORT --rank 0|1`, with the same `QUIVER_JOB_KEY` on
//! both sides).
//!
//! Without this, every process a launcher starts would run a whole bench of its own: two
//! ranks spawned on its own machine, each process printing its own tables. Here the job
//! comes from the launcher through `Context::from_env` (the same bootstraps as any quiver
//! program: docs/launchers.md), rank 0 writes the same table, JSON lines and plot as a
//! local run, and rank 1 prints nothing on success.
//!
//! What differs from a local run: the floors (the cache-line hand-off and memcpy between
//! the two CPUs the bench pins its ranks to) need both ends on this machine, so they are
//! skipped with a note and the figures carry no ratio to them; the ranks stay where the
//! launcher placed them (`--cpus A,B` pins rank r to the r-th CPU of its own machine); the
//! raw-socket baselines, `--netns` and `--addrs` (which place ranks the bench starts
//! itself) are refused. The first lines say where each rank runs (host, address, CPUs) and
//! which transport carries the connection.

use std::path::Path;

use quiver::{Bootstrap, Context};

use super::floor::pin_current_thread;
use super::link::{Buffers, Link};
use super::parent::{finish, open_report};
use super::plan::Plan;
use super::progress::Progress;
use super::rendezvous::{open_context, Rendezvous, MAX_EXCHANGE_BYTES};
use super::report::{Report, Style};
use super::worker::{apply_settings, finish as last_exchange, run_quiver_tests_into};
use crate::launch;

/// The variables through which a launcher gives the rank without PMIx (the rendezvous
/// bootstrap reads them, in this order).
const LAUNCHER_RANK_VARIABLES: [&str; 3] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"];
/// What `--rank` sets for the rendezvous bootstrap (a plain process has no launcher's).
const HAND_RANK: (&str, &str) = ("PMI_RANK", "PMI_SIZE");

/// The options of a bench whose ranks are started by something else.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LaunchArgs {
    /// Measure between two `quiver bench` commands started by hand (or by a launcher
    /// without PMIx) that meet at HOST:PORT, an address of rank 0's machine where rank 0
    /// listens. Both need the same job key in QUIVER_JOB_KEY or QUIVER_JOB_KEY_FILE.
    #[arg(long, value_name = "HOST:PORT")]
    pub rendezvous: Option<String>,

    /// With --rendezvous and no launcher: this command's rank, 0 (reports) or 1 (answers).
    #[arg(long, value_name = "0|1", requires = "rendezvous")]
    pub rank: Option<u32>,
}

/// Whether this process is one rank of a job a launcher (or `--rendezvous`) made, and so
/// measures between the ranks instead of starting two of its own.
///
/// # Errors
/// A launcher this quiver cannot join (PMIx without PMIx support), or `--rank` with a
/// launcher's rank variable, as the message to print.
pub fn is_launched(args: &LaunchArgs) -> Result<bool, String> {
    let get = |name: &str| std::env::var_os(name).is_some();
    if args.rendezvous.is_some() {
        if args.rank.is_some() {
            if let Some(variable) = LAUNCHER_RANK_VARIABLES.iter().find(|name| get(name)) {
                return Err(format!(
                    "--rank: the launcher gives the rank already ({variable} is set)"
                ));
            }
        } else if !LAUNCHER_RANK_VARIABLES.iter().any(|name| get(name)) {
            return Err(
                "--rendezvous: give this command's rank with --rank 0 (it listens at the address) or --rank 1"
                    .to_string(),
            );
        }
        return Ok(true);
    }
    match Bootstrap::detect() {
        Ok(Bootstrap::Rendezvous) if !get("QUIVER_RENDEZVOUS") => {
            eprintln!(
                "quiver bench: a launcher's rank variable is set but no rendezvous is given \
                 (--rendezvous HOST:PORT or QUIVER_RENDEZVOUS): both ranks run on this machine"
            );
            Ok(false)
        }
        Ok(_) => Ok(true),
        Err(error) if get("PMIX_RANK") || get("PMIX_NAMESPACE") => Err(error.to_string()),
        Err(_) => Ok(false),
    }
}

/// What `quiver bench`'s command line says about the output and the CPUs (the options a
/// plan does not hold).
#[derive(Debug, Clone, Copy)]
pub struct Output<'a> {
    /// `--json FILE|-`.
    pub json: Option<&'a str>,
    /// `--format`.
    pub format: Style,
    /// `--progress`.
    pub progress: bool,
    /// `--plot FILE`.
    pub plot: Option<&'a Path>,
    /// `--cpus A,B`: rank r pins itself to the r-th.
    pub cpus: Option<&'a str>,
}

/// Runs this rank of a launched bench: rank 0 reports (table, JSON, plot), rank 1 answers.
///
/// # Errors
/// What failed, as the message to print.
pub fn run(options: &Output<'_>, launch_args: &LaunchArgs, plan: &Plan) -> Result<(), String> {
    check(plan)?;
    prepare_environment(launch_args, plan)?;
    apply_settings(plan)?;
    let context = open_context()?;
    let rank = context.rank();
    if let Some(cpus) = options.cpus {
        let cpu = parse_cpu(cpus, rank)?;
        pin_current_thread(cpu)
            .map_err(|error| format!("--cpus: pinning rank {rank} to CPU {cpu}: {error}"))?;
    }
    let mut link = Link::open(&context, plan.transport, "")?;
    let connection = link.connection();
    let carried = link
        .endpoint_mut()
        .transport(connection)
        .map_err(|error| error.to_string())?
        .kind;
    if carried.name() != plan.transport.as_str() {
        return Err(format!(
            "the connection to the other rank runs over {}, not {}",
            carried.name(),
            plan.transport
        ));
    }
    let mine = where_am_i(&context);
    let theirs = trade(&mut link, &mine)?;
    let places = if rank == 0 {
        [mine, theirs]
    } else {
        [theirs, mine]
    };
    let mut buffers = Buffers::new(plan.max_message_bytes() as usize, plan.max_pingpong_iters());
    if rank != 0 {
        run_quiver_tests_into(plan, &mut link, &mut buffers, &mut |_| Ok(()))?;
        return last_exchange(&mut link);
    }
    let mut report: Report = open_report(options.json)?;
    report.set_style(options.format);
    report.set_progress(Progress::new(plan.rank_record_count(), options.progress));
    report
        .lines(&preamble(plan, context.bootstrap(), &places))
        .map_err(|error| format!("writing the table: {error}"))?;
    run_quiver_tests_into(plan, &mut link, &mut buffers, &mut |record| {
        report
            .result(record)
            .map_err(|error| format!("writing results: {error}"))
    })?;
    last_exchange(&mut link)?;
    finish(report, options.plot)
}

/// Refuses what a launched bench cannot do.
fn check(plan: &Plan) -> Result<(), String> {
    if plan.transport.is_raw() {
        return Err(format!(
            "--transport {}: the raw-socket baselines run over loopback on one machine; run them without a launcher",
            plan.transport
        ));
    }
    if plan.netns.is_some() || plan.addrs.is_some() {
        return Err(
            "--netns and --addrs place the ranks the bench starts itself; under a launcher, the launcher places them (QUIVER_NETNS, QUIVER_BIND_ADDR: docs/launchers.md)"
                .to_string(),
        );
    }
    if !plan.needs_ranks() {
        return Err(
            "the floors need both ends on one machine: run `quiver bench floor` without a launcher"
                .to_string(),
        );
    }
    Ok(())
}

/// Sets what the bootstrap reads before the context exists (this process is still
/// single-threaded): the transport under test, and for `--rendezvous` the meeting point
/// and the rank given by hand.
fn prepare_environment(launch_args: &LaunchArgs, plan: &Plan) -> Result<(), String> {
    std::env::set_var("QUIVER_TRANSPORTS", plan.transport.as_str());
    let Some(point) = &launch_args.rendezvous else {
        return Ok(());
    };
    std::env::set_var("QUIVER_BOOTSTRAP", "rendezvous");
    std::env::set_var("QUIVER_RENDEZVOUS", point);
    if let Some(rank) = launch_args.rank {
        if rank > 1 {
            return Err(format!("--rank {rank}: the bench has ranks 0 and 1"));
        }
        std::env::set_var(HAND_RANK.0, rank.to_string());
        std::env::set_var(HAND_RANK.1, "2");
    }
    Ok(())
}

/// The CPU of `rank` in `--cpus A,B`.
fn parse_cpu(text: &str, rank: u32) -> Result<usize, String> {
    let cpus: Vec<&str> = text.split(',').map(str::trim).collect();
    match (cpus.as_slice(), rank) {
        ([first, _], 0) | ([_, first], 1) => first
            .parse()
            .map_err(|_| format!("--cpus: {first:?} is not a CPU number")),
        _ => Err(format!(
            "--cpus: expected two CPU numbers such as 0,1, got '{text}'"
        )),
    }
}

/// Where this rank runs, in at most [`MAX_EXCHANGE_BYTES`]: host, address, CPUs.
fn where_am_i(context: &Context) -> Place {
    let host = quiver::profile::MachineIdentity::current().hostname;
    let addr = context
        .local_addr()
        .map_or_else(|| "-".to_string(), |addr| addr.to_string());
    let cpus = launch::allowed_cpus().map_or_else(|_| "?".to_string(), |cpus| cpu_ranges(&cpus));
    Place { host, addr, cpus }
}

/// Where one rank runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    host: String,
    addr: String,
    cpus: String,
}

impl Place {
    /// One line of text, cut to fit one exchange (the host and the CPUs give way first).
    fn encode(&self) -> Vec<u8> {
        let room = MAX_EXCHANGE_BYTES.saturating_sub(self.addr.len() + 2);
        let cpus = cut(&self.cpus, room / 2);
        let host = cut(&self.host, room - cpus.len());
        format!("{host} {} {cpus}", self.addr).into_bytes()
    }

    fn decode(bytes: &[u8]) -> Place {
        let text = String::from_utf8_lossy(bytes);
        let mut words = text.split(' ').map(str::to_string);
        let mut next = || words.next().unwrap_or_else(|| "?".to_string());
        Place {
            host: next(),
            addr: next(),
            cpus: next(),
        }
    }
}

/// `text` cut to at most `limit` bytes, on a character boundary.
fn cut(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Sends this rank's place and returns the other's (both ranks call it once, in the same
/// order: the connection is idle right after opening).
fn trade(link: &mut Link, mine: &Place) -> Result<Place, String> {
    let theirs = link
        .exchange(&mine.encode())
        .map_err(|error| format!("telling the other rank where this one runs: {error}"))?;
    Ok(Place::decode(&theirs))
}

/// `[0, 1, 2, 5]` as `0-2,5`.
fn cpu_ranges(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut index = 0;
    while index < cpus.len() {
        let start = cpus[index];
        let mut end = start;
        while index + 1 < cpus.len() && cpus[index + 1] == end + 1 {
            index += 1;
            end += 1;
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        index += 1;
    }
    parts.join(",")
}

/// The first lines of rank 0's table: what is measured between which ranks, and why no
/// floors.
fn preamble(plan: &Plan, bootstrap: Bootstrap, places: &[Place; 2]) -> Vec<String> {
    let mut lines = vec![format!(
        "quiver bench: transport {}, ranks from the launcher (bootstrap {bootstrap}), both busy-polling",
        plan.transport
    )];
    for (rank, place) in places.iter().enumerate() {
        lines.push(format!(
            "  rank {rank}: host {}, address {}, CPUs {}",
            place.host, place.addr, place.cpus
        ));
    }
    lines.push(
        "units: µs = microseconds, MB/s = 10^6 bytes/s, Mmsg/s = 10^6 messages/s, KiB/MiB = 2^10/2^20 bytes"
            .to_string(),
    );
    lines.push(
        "floors: not measured: the cache-line hand-off and memcpy floors need both ends on two CPUs of this machine that the bench pins; figures carry no ratio to them"
            .to_string(),
    );
    if places[0].host == places[1].host {
        lines.push(
            "  (both ranks report the same host: `quiver bench` without a launcher measures the floors too)"
                .to_string(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_become_ranges() {
        assert_eq!(cpu_ranges(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(cpu_ranges(&[3]), "3");
        assert_eq!(cpu_ranges(&[]), "");
        assert_eq!(cpu_ranges(&[0, 2, 3]), "0,2-3");
    }

    #[test]
    fn places_fit_one_exchange_and_come_back() {
        let place = Place {
            host: "node7".to_string(),
            addr: "10.77.0.2:41234".to_string(),
            cpus: "0-1".to_string(),
        };
        assert_eq!(Place::decode(&place.encode()), place);
        let long = Place {
            host: "h".repeat(200),
            addr: "[fe80::1234:5678:9abc:def0]:65535".to_string(),
            cpus: "0,".repeat(100),
        };
        let bytes = long.encode();
        assert!(bytes.len() <= MAX_EXCHANGE_BYTES, "{}", bytes.len());
        assert_eq!(Place::decode(&bytes).addr, long.addr);
        assert_eq!(Place::decode(b"only").cpus, "?");
    }

    #[test]
    fn each_rank_takes_its_cpu() {
        assert_eq!(parse_cpu("3,5", 0), Ok(3));
        assert_eq!(parse_cpu(" 3 , 5 ", 1), Ok(5));
        assert!(parse_cpu("3", 1).is_err());
        assert!(parse_cpu("a,b", 0).is_err());
    }
}
