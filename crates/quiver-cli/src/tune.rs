//! `quiver tune`: measures where each transport's copy path and zero-copy path cross on
//! this machine (`quiver_cli::bench::crossover`) and writes the least-cost thresholds into
//! this machine's entry of the profile, which every quiver program then loads
//! ([`quiver::profile`]); environment variables still override it.
//!
//! The profile is `$QUIVER_PROFILE`, else `~/.config/quiver/profile.json`, or `--profile`.
//! `quiver-bench crossover --compare-profile` then measures the profile against the
//! built-in defaults, and `quiver info` shows where each threshold came from.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quiver::profile::{profile_path, MachineIdentity, MachineProfile, ProfileFile};

use quiver_cli::bench::crossover::{self, CrossoverResult};
use quiver_cli::bench::plan::Transport;

/// Options of `quiver tune`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TuneArgs {
    /// Transports whose switch point is measured.
    #[arg(long, value_name = "LIST", default_value = "shm,tcp,udp")]
    transports: String,

    /// A small, fast sweep (about 1% of the iterations): for tests, not for a real profile.
    #[arg(long)]
    quick: bool,

    /// Profile file to update [default: $QUIVER_PROFILE, else ~/.config/quiver/profile.json].
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,

    /// Measure and print, but do not write the profile.
    #[arg(long)]
    dry_run: bool,

    /// The two CPUs for the two ranks, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    cpus: Option<String>,

    /// Also write every measured point as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,

    /// Stop a rank job that has not finished after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
}

/// Runs `quiver tune`; returns the exit status (0 ok, 1 failed, 2 bad usage).
pub(crate) fn main(args: TuneArgs) -> i32 {
    let transports = match crossover::parse_transport_list(&args.transports) {
        Ok(transports) if !transports.is_empty() => transports,
        Ok(_) => {
            eprintln!("quiver tune: --transports names no transport");
            return 2;
        }
        Err(message) => {
            eprintln!("quiver tune: {message}");
            return 2;
        }
    };
    if args.json.as_deref() == Some("-") {
        eprintln!("quiver tune: --json needs a file (stdout carries the summary)");
        return 2;
    }
    let path = match args.profile.clone().or_else(|| {
        let lookup = |name: &str| std::env::var(name).ok();
        profile_path(&lookup)
    }) {
        Some(path) => path,
        None if args.dry_run => PathBuf::from("(none)"),
        None => {
            eprintln!(
                "quiver tune: no profile path (QUIVER_PROFILE=off and no HOME): pass --profile FILE"
            );
            return 2;
        }
    };
    match run(&args, &transports, &path) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver tune: {message}");
            1
        }
    }
}

fn run(args: &TuneArgs, transports: &[Transport], path: &std::path::Path) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    let machine = MachineIdentity::current();
    let _ = writeln!(
        out,
        "quiver tune: measuring the copy/zero-copy crossovers of {} on {} ({}){}",
        transports
            .iter()
            .map(|transport| transport.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        machine.hostname,
        machine.cpu_model,
        if args.quick {
            " [--quick: a smoke run, not a real profile]"
        } else {
            ""
        }
    );
    let _ = out.flush();
    let results = crossover::measure_for_tune(
        args.cpus.as_deref(),
        transports,
        args.quick,
        Duration::from_secs(args.timeout),
        args.json.as_deref(),
    )?;
    crossover::print_crossovers(&mut out, &results).map_err(|error| error.to_string())?;
    let entry = profile_entry(&machine, &results, args.quick);
    let _ = writeln!(
        out,
        "\nthresholds for {} ({}):",
        machine.hostname, machine.cpu_model
    );
    for (name, value) in &entry.thresholds {
        let default = results
            .iter()
            .find(|result| result.knob.setting == name)
            .map_or(0, |result| result.knob.default_value);
        let _ = writeln!(out, "  {name:<26} {value:>10} B   (default {default} B)");
    }
    if args.dry_run {
        let _ = writeln!(out, "--dry-run: the profile was not written");
        return Ok(());
    }
    let mut file = ProfileFile::load(path)
        .map_err(|error| format!("{error} (remove the file to start afresh)"))?
        .unwrap_or_default();
    file.upsert(entry);
    file.save(path).map_err(|error| error.to_string())?;
    let _ = writeln!(
        out,
        "written to {} (quiver info shows it; check it with `quiver-bench crossover --compare-profile`)",
        path.display()
    );
    Ok(())
}

/// This machine's profile entry from the measured crossovers.
fn profile_entry(
    machine: &MachineIdentity,
    results: &[CrossoverResult],
    quick: bool,
) -> MachineProfile {
    let evidence = results
        .iter()
        .map(|result| {
            format!(
                "{}: {} sizes {}..{} B at a cross-core hand-off of {:.3} us, least-cost {}={}",
                result.knob.transport.as_str(),
                result.points.len(),
                result.knob.sizes.first().copied().unwrap_or(0),
                result.knob.sizes.last().copied().unwrap_or(0),
                result.handoff_us,
                result.knob.setting,
                result.best_value
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    MachineProfile {
        hostname: machine.hostname.clone(),
        cpu_model: machine.cpu_model.clone(),
        quiver_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        thresholds: results
            .iter()
            .map(|result| (result.knob.setting.to_string(), result.best_value))
            .collect(),
        evidence: if quick {
            format!("quick run (not for real use): {evidence}")
        } else {
            evidence
        },
    }
}
