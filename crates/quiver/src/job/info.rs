//! The job's facts as a bootstrap learns them ([`JobInfo`]), how it learnt them
//! ([`Bootstrap`]), and what a bootstrap asks of the transports while it runs
//! ([`NetworkBinder`]). Imports nothing above the configuration.

use std::net::SocketAddr;

use crate::error::Result;
use crate::transport::wait_policy::NodeLoad;

/// How a context learnt its rank, its job and its peers' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bootstrap {
    /// [`Context::builder`](crate::Context::builder), by hand.
    Builder,
    /// The environment `quiver run` sets (`QUIVER_RANK`, ...).
    QuiverRun,
    /// PMIx, under `mpirun` or `srun --mpi=pmix`.
    Pmix,
    /// A launcher's rank variables plus an exchange through rank 0 at `QUIVER_RENDEZVOUS`.
    Rendezvous,
}

impl Bootstrap {
    /// The name used in `QUIVER_BOOTSTRAP` and reports.
    pub fn name(self) -> &'static str {
        match self {
            Bootstrap::Builder => "builder",
            Bootstrap::QuiverRun => "env",
            Bootstrap::Pmix => "pmix",
            Bootstrap::Rendezvous => "rendezvous",
        }
    }

    /// The version of the PMIx library built in, or None when quiver was built without
    /// PMIx support (pkg-config did not find `pmix`).
    pub fn pmix_version() -> Option<String> {
        quiver_pmix::version()
    }
}

impl std::fmt::Display for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything a process knows about its job once bootstrapped: who it is, the job's
/// identity and secret key, and where every rank listens.
#[derive(Debug, Clone)]
pub(crate) struct JobInfo {
    /// This process's rank (0..size).
    pub(crate) rank: u32,
    /// Number of ranks in the job.
    pub(crate) size: u32,
    /// The job's identifier (all ranks agree).
    pub(crate) job_id: u64,
    /// The job's secret key (all ranks agree; never printed).
    pub(crate) key: [u8; 32],
    /// Network address of every rank, in rank order (empty: no network transport).
    pub(crate) addrs: Vec<SocketAddr>,
    /// Link addresses of every rank (`QUIVER_LINKS`; empty: one link, the address).
    pub(crate) links: Vec<Vec<SocketAddr>>,
    /// How these facts were learnt.
    pub(crate) bootstrap: Bootstrap,
    /// What the launcher says about this node: ranks of the job here, CPUs for them.
    pub(crate) node: NodeLoad,
}

impl JobInfo {
    /// A job of one rank with no network, made by hand (the builder's starting point).
    pub(crate) fn by_hand() -> JobInfo {
        JobInfo {
            rank: 0,
            size: 1,
            job_id: 0,
            key: [0; 32],
            addrs: Vec::new(),
            links: Vec::new(),
            bootstrap: Bootstrap::Builder,
            node: NodeLoad::default(),
        }
    }
}

/// What the bootstraps that publish addresses (PMIx, rendezvous) ask of the transports:
/// bind this rank's network sockets before the exchange, so the address published is one
/// that already listens. The context provides it; the bootstrap never sees a socket.
pub(crate) trait NetworkBinder {
    /// Binds this rank's network sockets at `own` for the job `job_id` with `key` (`None`:
    /// the configuration names no network transport, nothing is bound). Returns the
    /// address bound, port 0 replaced by the port the kernel chose.
    ///
    /// # Errors
    /// The socket errors, naming the address.
    fn bind(
        &mut self,
        own: Option<SocketAddr>,
        job_id: u64,
        key: [u8; 32],
    ) -> Result<Option<SocketAddr>>;

    /// Closes what [`NetworkBinder::bind`] bound: every rank turned out to run on this
    /// node and the job runs on shared memory alone.
    fn unbind(&mut self);
}
