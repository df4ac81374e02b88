//! Endpoint addresses: `(rank, port)`, the nodes of a job's graph. A leaf module.

/// The address of an endpoint: a rank of the job and a port chosen by that rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    /// The rank (process) of the job.
    pub rank: u32,
    /// The endpoint's port within that rank.
    pub port: u16,
}

impl Addr {
    /// The address of endpoint `port` of `rank`.
    pub fn new(rank: u32, port: u16) -> Addr {
        Addr { rank, port }
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.rank, self.port)
    }
}
