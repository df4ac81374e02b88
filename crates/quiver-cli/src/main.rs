//! The `quiver` command: the user-facing tool on top of the quiver library.
//!
//! Subcommands: `run` (start a local job of N ranks), `bench` (end-to-end benchmarks),
//! `info` (what this machine and build support), `testbed` (network namespaces for
//! tests) and `tune` (measure this machine's protocol thresholds into its profile). This file only parses the command line and dispatches; each subcommand lives in
//! its own module and returns the exit status.

mod bench;
mod info;
mod launch;
mod run;
mod testbed;
mod tune;

use clap::{Parser, Subcommand};

/// Command line of `quiver`.
#[derive(Debug, Parser)]
#[command(
    name = "quiver",
    version,
    about = "quiver: fast messaging between the processes of a job on one node",
    long_about = "quiver: fast messaging between the processes of a job on one node.\n\n\
                  `quiver run` starts the ranks of a job, `quiver bench` measures quiver, \
                  and `quiver info` shows what this machine and build support.",
    after_help = "Run `quiver <COMMAND> --help` for the options of one command.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands of `quiver`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Start N ranks of a program on this machine and supervise them
    Run(run::RunArgs),
    /// Measure quiver's latency and bandwidth end to end (`quiver bench stripe --help`: one
    /// connection striped over N links against N TCP streams)
    Bench(bench::BenchArgs),
    /// Show what this machine and quiver build support
    Info,
    /// Build or remove a two-namespace network testbed (root): N rate-limited, lossy links
    Testbed(testbed::TestbedArgs),
    /// Measure this machine's protocol switch points and write them to its profile
    Tune(tune::TuneArgs),
}

fn main() {
    // `quiver bench stripe ...` has options of its own (bench/stripe.rs).
    let arguments: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if arguments.get(1).is_some_and(|a| a == "bench")
        && arguments.get(2).is_some_and(|a| a == "stripe")
    {
        std::process::exit(bench::stripe::main(arguments[3..].to_vec()));
    }
    let cli = Cli::parse();
    let exit_status = match cli.command {
        Command::Run(args) => run::main(args),
        Command::Bench(args) => bench::main(args),
        Command::Info => info::main(),
        Command::Testbed(args) => testbed::main(args),
        Command::Tune(args) => tune::main(args),
    };
    std::process::exit(exit_status);
}
