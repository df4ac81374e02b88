//! The names of the bootstrap's environment variables: the one place they are spelt, so
//! that the code reading them and the list of variables quiver knows
//! ([`crate::variables`]) cannot disagree.

/// This process's rank (`quiver run`).
pub(crate) const RANK: &str = "QUIVER_RANK";
/// Number of ranks in the job (`quiver run`).
pub(crate) const SIZE: &str = "QUIVER_SIZE";
/// The job's identifier, 16 hex digits (`quiver run`).
pub(crate) const JOB_ID: &str = "QUIVER_JOB_ID";
/// The job's secret key, 64 hex digits.
pub(crate) const JOB_KEY: &str = "QUIVER_JOB_KEY";
/// A file holding the job key.
pub(crate) const JOB_KEY_FILE: &str = "QUIVER_JOB_KEY_FILE";
/// One `ip:port` per rank.
pub(crate) const ADDRS: &str = "QUIVER_ADDRS";
/// The links of every rank (striping).
pub(crate) const LINKS: &str = "QUIVER_LINKS";
/// Forces a bootstrap: `env`, `pmix` or `rendezvous`.
pub(crate) const BOOTSTRAP: &str = "QUIVER_BOOTSTRAP";
/// Where rank 0 meets the others when no PMIx is there.
pub(crate) const RENDEZVOUS: &str = "QUIVER_RENDEZVOUS";
/// The network namespace each rank enters.
pub(crate) const NETNS: &str = "QUIVER_NETNS";
/// The address a rank binds.
pub(crate) const BIND_ADDR: &str = "QUIVER_BIND_ADDR";
/// Which launcher started the rank (`quiver run` sets it; informational, never read).
pub(crate) const LAUNCHER: &str = "QUIVER_LAUNCHER";
/// Ranks of the job on this node (`quiver run`), for the waiting policy.
pub(crate) const LOCAL_SIZE: &str = "QUIVER_LOCAL_SIZE";
/// CPUs the launcher may use on this node (`quiver run`), for the waiting policy.
pub(crate) const LOCAL_CPUS: &str = "QUIVER_LOCAL_CPUS";

/// Every variable of the bootstrap.
pub(crate) const BOOTSTRAP_VARIABLES: [&str; 14] = [
    RANK,
    SIZE,
    JOB_ID,
    JOB_KEY,
    JOB_KEY_FILE,
    ADDRS,
    LINKS,
    BOOTSTRAP,
    RENDEZVOUS,
    NETNS,
    BIND_ADDR,
    LAUNCHER,
    LOCAL_SIZE,
    LOCAL_CPUS,
];
