//! The command line of `quiver bench busy` and its run: quiver's ranks over each
//! transport, then Open MPI's over vader and tcp, all pinned to the same CPUs, and the
//! table of their times and ratios.

use std::io::Write;
use std::time::Duration;

use super::jobs::{build_mpi_program, run_openmpi, run_quiver};
use super::plan::{
    check_size, points, Algorithm, BusyPlan, MpiMode, Point, DEFAULT_SIZES_BYTES, MAX_RANKS,
};
use super::report::{openmpi_counterpart, records, write_table, Series, System};
use super::worker;
use crate::bench::sizes::parse_size_list;
use crate::launch::allowed_cpus;

/// Exit code for a bad command line.
const EXIT_USAGE: i32 = 2;
/// Exit code for a run that failed.
const EXIT_FAILURE: i32 = 1;
/// quiver's transports a busy run knows.
const TRANSPORTS: [&str; 3] = ["shm", "tcp", "udp"];

/// `quiver bench busy`: more ranks than CPUs, quiver against Open MPI.
#[derive(Debug, Clone, clap::Args)]
#[command(
    long_about = "Oversubscribed bench: --ranks N ranks pinned together to --cpus M CPUs \
                  (taskset) run ping-pong pairs (ranks 2k and 2k+1), a ring allreduce and \
                  request/reply (rank 0 serves the others) over quiver's shm, tcp and udp; \
                  in the same run the same algorithms in C with MPI run under `mpirun \
                  --oversubscribe --bind-to none` on the same CPUs over vader and tcp. The \
                  table gives each time and quiver's over Open MPI's (shm against vader, tcp \
                  and udp against tcp). Warm-up iterations check their results. Wrap the run \
                  in `flock /tmp/bench.lock` on a shared machine."
)]
pub struct BusyArgs {
    /// Ranks of the job.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub ranks: u32,

    /// The CPUs the ranks share: a count M (the first M CPUs this process may use) or a
    /// list (0,1 or 2-3).
    #[arg(long, value_name = "M|LIST", default_value = "2")]
    pub cpus: String,

    /// quiver's transports, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "shm,tcp,udp")]
    pub transport: String,

    /// Algorithms, comma-separated.
    #[arg(
        long,
        value_enum,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "pingpong,ring,reqrep"
    )]
    pub algorithms: Vec<Algorithm>,

    /// Message sizes (multiples of 8), comma-separated, with optional K/M suffixes
    /// [default: 8,64,512,4K,32K,256K,1M,4M].
    #[arg(long, value_name = "LIST")]
    pub sizes: Option<String>,

    /// Timed iterations per point [default: 128 MiB / size, between 16 and 1000].
    #[arg(long, value_name = "N")]
    pub iters: Option<u64>,

    /// Also run Open MPI: auto (when mpirun and mpicc are found), on, off.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto")]
    pub mpi: MpiMode,

    /// A `QUIVER_*` setting for quiver's ranks, NAME=VALUE (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub settings: Vec<String>,

    /// Also write one JSON object per point and system to FILE; with `-`, only JSON to
    /// stdout.
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<String>,

    /// Stop a job and fail if it has not finished after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,

    /// Internal: run as one of quiver's ranks.
    #[arg(long, hide = true)]
    pub worker: bool,

    /// Internal: a worker's point, ALGORITHM:SIZE:ITERS (repeatable).
    #[arg(long = "point", hide = true, value_name = "POINT")]
    pub worker_points: Vec<String>,
}

impl BusyArgs {
    /// Validates the options into a plan.
    ///
    /// # Errors
    /// What is wrong with the command line, as the message to print.
    pub fn plan(&self) -> Result<BusyPlan, String> {
        if !(2..=MAX_RANKS).contains(&self.ranks) {
            return Err(format!("--ranks must be between 2 and {MAX_RANKS}"));
        }
        let allowed = allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
        let cpus = parse_cpus(&self.cpus, &allowed)?;
        let mut transports = Vec::new();
        for t in self
            .transport
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            if !TRANSPORTS.contains(&t) {
                return Err(format!(
                    "--transport: unknown transport '{t}' (shm, tcp, udp)"
                ));
            }
            if !transports.iter().any(|known| known == t) {
                transports.push(t.to_string());
            }
        }
        if transports.is_empty() {
            return Err("--transport: name at least one of shm, tcp, udp".to_string());
        }
        let sizes = match &self.sizes {
            Some(list) => parse_size_list(list).map_err(|e| format!("--sizes: {e}"))?,
            None => DEFAULT_SIZES_BYTES.to_vec(),
        };
        for &size in &sizes {
            check_size(size).map_err(|e| format!("--sizes: {e}"))?;
        }
        if self.iters.is_some_and(|i| !(1..=1_000_000).contains(&i)) {
            return Err("--iters must be between 1 and 1000000".to_string());
        }
        let mut algorithms = self.algorithms.clone();
        algorithms.sort_unstable();
        algorithms.dedup();
        Ok(BusyPlan {
            ranks: self.ranks,
            cpus,
            transports,
            points: points(&algorithms, &sizes, self.iters),
            mpi: self.mpi,
            settings: parse_settings(&self.settings)?,
        })
    }
}

/// Runs `quiver bench busy`; returns the exit code.
pub fn main(args: &BusyArgs) -> i32 {
    if args.worker {
        return worker_main(args);
    }
    let plan = match args.plan() {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver bench busy: {message}");
            return EXIT_USAGE;
        }
    };
    match run(args, &plan) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver bench busy: {message}");
            EXIT_FAILURE
        }
    }
}

/// One of quiver's ranks: the settings into the environment, then the points.
fn worker_main(args: &BusyArgs) -> i32 {
    let result = (|| {
        let points: Vec<Point> = args
            .worker_points
            .iter()
            .map(|p| Point::parse(p))
            .collect::<Result<_, _>>()?;
        for (name, value) in parse_settings(&args.settings)? {
            // Before the context reads its settings; this process has no other thread yet.
            std::env::set_var(name, value);
        }
        worker::run(&points)
    })();
    match result {
        Ok(()) => 0,
        Err(message) => {
            let rank = std::env::var("QUIVER_RANK").unwrap_or_else(|_| "?".to_string());
            eprintln!("quiver bench busy: rank {rank}: {message}");
            EXIT_FAILURE
        }
    }
}

/// quiver over each transport, then Open MPI over vader and tcp; then the table and JSON.
fn run(args: &BusyArgs, plan: &BusyPlan) -> Result<(), String> {
    let timeout = Duration::from_secs(args.timeout);
    let json_only = args.json.as_deref() == Some("-");
    let mpi_program = match plan.mpi {
        MpiMode::Off => None,
        mode => match (find("mpirun"), build_mpi_program()) {
            (true, Ok(program)) => Some(program),
            (found, built) => {
                let why = if found {
                    built.err().unwrap_or_default()
                } else {
                    "mpirun not found (Debian: openmpi-bin, libopenmpi-dev)".to_string()
                };
                if mode == MpiMode::On {
                    return Err(format!("--mpi on: {why}"));
                }
                eprintln!("quiver bench busy: Open MPI skipped: {why}");
                None
            }
        },
    };
    // quiver runs one job per point: a point that fails (reported with its rank's
    // message) costs that point only. Open MPI runs one job per BTL.
    let mut failures = Vec::new();
    let mut series = Vec::new();
    for transport in &plan.transports {
        let mut points = Vec::new();
        for point in &plan.points {
            match run_quiver(plan, transport, std::slice::from_ref(point), timeout) {
                Ok(measured) => points.extend(measured),
                Err(message) => {
                    eprintln!("quiver bench busy: {point}: {message}");
                    failures.push(format!("quiver over {transport}, {point}"));
                }
            }
        }
        series.push(Series {
            system: System::Quiver,
            transport: transport.clone(),
            points,
        });
    }
    if let Some(program) = &mpi_program {
        let mut btls: Vec<&str> = Vec::new();
        for t in &plan.transports {
            let btl = openmpi_counterpart(t);
            if !btls.contains(&btl) {
                btls.push(btl);
            }
        }
        for btl in btls {
            match run_openmpi(plan, program, btl, timeout) {
                Ok(points) => series.push(Series {
                    system: System::Openmpi,
                    transport: btl.to_string(),
                    points,
                }),
                Err(message) => {
                    eprintln!("quiver bench busy: {message}");
                    failures.push(format!("Open MPI over {btl}"));
                }
            }
        }
    }
    let records = records(plan, &series);
    let write_json = |out: &mut dyn Write| -> std::io::Result<()> {
        for record in &records {
            let line = serde_json::to_string(record).map_err(std::io::Error::other)?;
            writeln!(out, "{line}")?;
        }
        Ok(())
    };
    match args.json.as_deref() {
        Some("-") => write_json(&mut std::io::stdout().lock()),
        Some(path) => std::fs::File::create(path).and_then(|mut file| write_json(&mut file)),
        None => Ok(()),
    }
    .map_err(|e| format!("writing the JSON: {e}"))?;
    if !json_only {
        write_table(&mut std::io::stdout().lock(), plan, &records)
            .map_err(|e| format!("writing the table: {e}"))?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("failed: {}", failures.join("; ")))
    }
}

/// Whether `program` is on the PATH.
fn find(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// `--cpus`: a count (the first M allowed CPUs) or a list of CPUs (`0,1`, `2-3`), each
/// one this process may use.
fn parse_cpus(text: &str, allowed: &[usize]) -> Result<Vec<usize>, String> {
    let text = text.trim();
    let bad = || format!("--cpus {text:?}: expected a count (2) or a list of CPUs (0,1 or 0-1)");
    if !text.contains([',', '-']) {
        let count: usize = text.parse().map_err(|_| bad())?;
        if count == 0 || count > allowed.len() {
            return Err(format!(
                "--cpus {count}: this process may use {} CPUs ({allowed:?})",
                allowed.len()
            ));
        }
        return Ok(allowed[..count].to_vec());
    }
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (low, high) = match part.split_once('-') {
            Some((l, h)) => (l.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?),
            None => {
                let cpu: usize = part.parse().map_err(|_| bad())?;
                (cpu, cpu)
            }
        };
        if low > high {
            return Err(bad());
        }
        for cpu in low..=high {
            if !allowed.contains(&cpu) {
                return Err(format!(
                    "--cpus: CPU {cpu} is not one this process may use ({allowed:?})"
                ));
            }
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    Ok(cpus)
}

/// `--set NAME=VALUE`: `QUIVER_*` names only, not the job's identity or transport.
fn parse_settings(entries: &[String]) -> Result<Vec<(String, String)>, String> {
    const RESERVED: [&str; 5] = [
        "QUIVER_RANK",
        "QUIVER_SIZE",
        "QUIVER_JOB_ID",
        "QUIVER_JOB_KEY",
        "QUIVER_TRANSPORTS",
    ];
    entries
        .iter()
        .map(|entry| {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("--set {entry:?}: expected NAME=VALUE"))?;
            let name = name.trim();
            if !name.starts_with("QUIVER_") || RESERVED.contains(&name) {
                return Err(format!(
                    "--set {name}: expected a QUIVER_* setting the bench does not set itself"
                ));
            }
            Ok((name.to_string(), value.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct TestCli {
        #[command(flatten)]
        busy: BusyArgs,
    }

    fn plan(arguments: &[&str]) -> Result<BusyPlan, String> {
        let mut all = vec!["busy"];
        all.extend_from_slice(arguments);
        TestCli::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .busy
            .plan()
    }

    #[test]
    fn defaults_are_four_ranks_on_two_cpus_over_every_transport() {
        let Ok(plan) = plan(&[]) else {
            // A machine (or cgroup) with one CPU cannot give two.
            assert!(allowed_cpus().expect("affinity").len() < 2);
            return;
        };
        assert_eq!(plan.ranks, 4);
        assert_eq!(plan.cpus.len(), 2);
        assert_eq!(plan.transports, vec!["shm", "tcp", "udp"]);
        assert_eq!(plan.points.len(), 3 * DEFAULT_SIZES_BYTES.len());
        assert_eq!(plan.mpi, MpiMode::Auto);
    }

    #[test]
    fn options_are_validated() {
        assert!(plan(&["--ranks", "1"]).is_err());
        assert!(plan(&["--cpus", "0"]).is_err());
        assert!(plan(&["--cpus", "100000"]).is_err());
        assert!(plan(&["--transport", "xdp"]).is_err());
        assert!(plan(&["--sizes", "12"]).is_err());
        assert!(plan(&["--iters", "0"]).is_err());
        assert!(plan(&["--set", "QUIVER_TRANSPORTS=tcp"]).is_err());
        assert!(plan(&["--algorithms", "halo"]).is_err());
        let plan = plan(&[
            "--cpus",
            "1",
            "--ranks",
            "3",
            "--transport",
            "udp,shm,udp",
            "--algorithms",
            "reqrep,ring",
            "--sizes",
            "8,1K",
            "--iters",
            "7",
            "--mpi",
            "off",
        ])
        .expect("valid");
        assert_eq!(plan.cpus.len(), 1);
        assert_eq!(plan.transports, vec!["udp", "shm"]);
        let names: Vec<String> = plan.points.iter().map(Point::to_string).collect();
        assert_eq!(
            names,
            ["ring:8:7", "ring:1024:7", "reqrep:8:7", "reqrep:1024:7"]
        );
    }

    #[test]
    fn cpu_lists_and_counts() {
        let allowed = [0, 1, 2, 3];
        assert_eq!(parse_cpus("2", &allowed), Ok(vec![0, 1]));
        assert_eq!(parse_cpus("1,3", &allowed), Ok(vec![1, 3]));
        assert_eq!(parse_cpus("2-3", &allowed), Ok(vec![2, 3]));
        assert_eq!(parse_cpus("0-1,1", &allowed), Ok(vec![0, 1]));
        assert!(parse_cpus("5", &allowed).is_err());
        assert!(parse_cpus("4,5", &allowed).is_err());
        assert!(parse_cpus("3-2", &allowed).is_err());
        assert!(parse_cpus("a", &allowed).is_err());
    }
}
