//! The `quiver` command: the user-facing tool on top of the quiver library.
//!
//! Subcommands: `run` (start a local job of N ranks), `bench` (the everyday end-to-end
//! measurements, next to the machine's floors), `info` (what this machine and build
//! support) and `tune` (measure this machine's protocol thresholds into its profile). This
//! file only parses the command line and dispatches; each subcommand lives in its own
//! module (the bench in the library, `quiver_cli::bench`) and returns the exit status. The
//! measurement lab (suites, testbed, experiments) is a separate command, `quiver-bench`.

mod environment;
mod info;
mod run;
mod tune;

use clap::{Parser, Subcommand};
use quiver_cli::bench;

/// Command line of `quiver`.
#[derive(Debug, Parser)]
#[command(
    name = "quiver",
    version,
    about = "quiver: fast messaging between the processes of a job on one node",
    long_about = "quiver: fast messaging between the processes of a job on one node.\n\n\
                  `quiver run` starts the ranks of a job, `quiver bench` measures quiver \
                  against the machine's floors, `quiver info` shows what this machine and \
                  build support, and `quiver tune` measures this machine's protocol \
                  thresholds. The measurement lab is `quiver-bench`.",
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
    /// Measure quiver's latency and bandwidth end to end, next to the machine's floors
    Bench(Box<bench::args::BenchArgs>),
    /// Show what this machine and quiver build support
    Info(info::InfoArgs),
    /// Measure this machine's protocol switch points and write them to its profile
    Tune(tune::TuneArgs),
}

fn main() {
    quiver_cli::init_process();
    let cli = Cli::parse();
    let exit_status = match cli.command {
        Command::Run(args) => run::main(args),
        Command::Bench(args) => bench::args::main(*args),
        Command::Info(args) => info::main(args),
        Command::Tune(args) => tune::main(args),
    };
    std::process::exit(exit_status);
}
