//! `quiver-bench`: quiver's measurement lab (not published). The suites, the network
//! testbed and the experiments the project measures itself with, next to `quiver bench`'s
//! everyday tests:
//!
//! - `bench`: the bench's tests with the same options and code as `quiver bench`, plus the
//!   LogGP cost model (`loggp`), receive buffers (`pool`), failure detection on against
//!   off (`--detect both|interleave`) and quiver against its baselines in pairs of blocks
//!   of one launch (`--baseline interleave|tcp`);
//! - `compare`: every transport and baseline in one table against the floors;
//! - `crossover`: where each transport's copy and zero-copy paths cross, and this
//!   machine's profile against the defaults (`--compare-profile`);
//! - `wire`: what quiver's frames cost by themselves over plain sockets;
//! - `stripe`: one connection striped over N rate-limited links against N TCP streams;
//! - `testbed`: two network namespaces joined by N rate-limited, lossy links;
//! - `bypass`: what bypassing the kernel buys: quiver over udp (sockets, io_uring) and xdp
//!   against raw udp and raw AF_XDP over one veth pair.
//!
//! Layer: on top of quiver's public API and the bench machinery of `quiver-cli`'s library
//! (plans, the two ranks, links, raw baselines, typed records, the report); it adds no
//! protocol logic.
//!
//! Why a binary of its own rather than `quiver bench <suite>`: dependencies point down.
//! The lab is built on the bench machinery, so `quiver` could only reach the lab by
//! depending on it, which would make the user's tool carry (and its `--help` list) root-only
//! testbeds and long experiments. A second binary keeps `quiver` about what a user runs and
//! lets the lab grow without touching it. Every lab command is a clap subcommand listed by
//! `quiver-bench --help`. `quiver-bench bench` accepts everything `quiver bench` does, so
//! tools that run `<binary> bench TESTS --json -` work with either binary.
//!
//! Layout: `bench/` (the rank tests and paired runs), `compare.rs`, `crossover.rs` and
//! `suite.rs` (the suites and what they share), `wire.rs`, `stripe/`, `testbed.rs`, `bypass/`, and
//! `stats.rs` (intervals and line fits).

mod bench;
mod bypass;
mod compare;
mod crossover;
mod stats;
mod stripe;
mod suite;
mod testbed;
mod wire;

use clap::{Parser, Subcommand};

/// Command line of `quiver-bench`.
#[derive(Debug, Parser)]
#[command(
    name = "quiver-bench",
    version,
    about = "quiver's measurement lab: suites, the network testbed and experiments",
    long_about = "quiver's measurement lab: suites, the network testbed and experiments.\n\n\
                  `quiver-bench bench` runs quiver bench's tests and the lab's own (loggp, \
                  pool, paired runs); `compare` and `crossover` run suites of jobs; `wire` \
                  measures quiver's frames over plain sockets; `stripe` and `testbed` need \
                  root. The everyday measurements are `quiver bench`.",
    after_help = "Run `quiver-bench <COMMAND> --help` for the options of one command.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands of `quiver-bench`.
#[derive(Debug, Subcommand)]
enum Command {
    /// The tests of `quiver bench` and the lab's own: loggp, pool, --detect, --baseline
    Bench(bench::LabBenchArgs),
    /// Every transport and raw baseline side by side, against the floors (one table)
    Compare(compare::CompareArgs),
    /// Where each transport's copy and zero-copy paths cross; --compare-profile: this
    /// machine's profile against the defaults
    Crossover(crossover::CrossoverArgs),
    /// What quiver's frames cost by themselves over plain udp sockets (no protocol)
    Wire(wire::WireArgs),
    /// One connection striped over N rate-limited links against N TCP streams (root;
    /// builds its own testbed)
    Stripe(stripe::StripeArgs),
    /// Build or remove a two-namespace network testbed (root): N rate-limited, lossy links
    Testbed(testbed::TestbedArgs),
    /// What bypassing the kernel buys: quiver over udp (sockets, io_uring) and xdp against
    /// raw udp and raw AF_XDP, over one veth pair (root; builds its own testbed)
    Bypass(bypass::BypassArgs),
}

fn main() {
    quiver_cli::init_process();
    let cli = Cli::parse();
    let exit_status = match cli.command {
        Command::Bench(args) => bench::main(args),
        Command::Compare(args) => suite_exit("compare", compare::run(&args)),
        Command::Crossover(args) => suite_exit("crossover", crossover::run(&args)),
        Command::Wire(args) => wire::main(&args),
        Command::Stripe(args) => stripe::main(&args),
        Command::Testbed(args) => testbed::main(args),
        Command::Bypass(args) => bypass::main(&args),
    };
    std::process::exit(exit_status);
}

/// A suite's exit code: 0, or 1 after printing `quiver-bench NAME: message` on stderr.
fn suite_exit(name: &str, result: Result<(), String>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver-bench {name}: {message}");
            1
        }
    }
}
