//! `quiver bench busy`: more ranks than CPUs. N ranks pinned together to M CPUs run
//! ping-pong pairs, a ring allreduce and request/reply over quiver's shm, tcp and udp; in
//! the same run the same algorithms in C with MPI (`mpi_busy.c`) run under Open MPI on the
//! same CPUs over vader and tcp, and the table gives quiver's time over Open MPI's.
//!
//! Layers, top to bottom: `args` (the command line and the run), `jobs` (starting and
//! watching quiver's and Open MPI's ranks, building `mpi_busy.c`), `worker` (what one of
//! quiver's ranks runs), `report` (results, records, the table), `plan` (what a run
//! measures).

pub mod args;
pub mod jobs;
pub mod plan;
pub mod report;
pub mod worker;
