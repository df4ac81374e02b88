//! `quiver bench`: the everyday measurements of a transport between two ranks, next to the
//! machine's floors, all in one run; and the machinery the measurement lab
//! (`quiver-bench`) builds its suites on.
//!
//! Layers, top to bottom (a module uses only those below it):
//! - `args` (the `quiver bench` command line and run), `am` (`quiver bench am`: active
//!   messages beside UCX's), `crossover` (where each transport's
//!   copy and zero-copy paths cross: `quiver tune`'s measurement);
//! - `parent` (CPUs, report, floors, plot of a run), `ranks` (starting and watching the
//!   two ranks), `launched` (a rank started by a launcher, measuring and reporting
//!   itself), `worker` (what a rank runs);
//! - `fd_wait` (the sleeping ping-pong of `--wait fd`), `point` (one measured pingpong,
//!   bw or rate run), `link` (quiver's connection between the ranks), `raw/` (the
//!   raw-socket baselines), `generic` (tests written once for
//!   both), `rendezvous` (how the ranks find each other), `rma` (`quiver bench rma|put|
//!   get|atomic`: one-sided operations, two contexts on pinned threads, and UCX's
//!   baselines);
//! - `report` (where results go), `table` (how the bench's records look), `plot`,
//!   `progress`;
//! - `result` (what the parent does with any result), `record` (the typed results),
//!   `floor` (the machine's floors), `plan` (what a run measures), `sizes` and `stats`.

pub mod am;
pub mod args;
pub mod busy;
pub mod crossover;
pub mod fd_wait;
pub mod floor;
pub mod generic;
pub mod in_process_job;
pub mod launched;
pub mod link;
pub mod parent;
pub mod plan;
pub mod plot;
pub mod point;
pub mod progress;
pub mod ranks;
pub mod raw;
pub mod record;
pub mod rendezvous;
pub mod report;
pub mod result;
pub mod rma;
pub mod sizes;
pub mod stats;
pub mod table;
pub mod worker;
