//! quiver: lightweight, high-performance messaging between the processes of a job.
//!
//! Layer: the public API. It glues the pure protocol pieces (`quiver-proto`, `quiver-wire`)
//! to the transports (`quiver-transport`) and owns the driver: connection setup, protocol
//! choice by message size, progress, waiting and failure handling. No `unsafe` here.
//!
//! ```no_run
//! use quiver::{Addr, Context};
//! # fn main() -> quiver::Result<()> {
//! let ctx = Context::from_env()?;            // under `quiver run -n 2 -- prog`
//! let mut ep = ctx.endpoint(0)?;             // this rank's endpoint (rank, 0)
//! let peer = Addr::new(1 - ctx.rank(), 0);
//! let conn = ep.connect(peer)?;              // directed edge to the peer
//! ep.send(conn, b"hello")?;
//! let mut buf = [0u8; 64];
//! let (len, src) = ep.recv(&mut buf)?;       // from any connected peer
//! assert_eq!(src, peer);
//! # let _ = len; Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod bootstrap;
mod config;
mod context;
mod endpoint;
mod error;
mod log;
pub(crate) mod net;
mod pool;
pub mod profile;
mod slab;
mod transport;

pub use bootstrap::Bootstrap;
pub use config::{
    parse_links, parse_size, parse_transports, Config, Setting, SizeParseError, TransportKind,
    DETECTION_MIN, MAX_LINKS,
};
pub use context::{Context, ContextBuilder, ContextStats};
pub use endpoint::{
    Connection, DetectionStats, Endpoint, RecvCompletion, RecvRequest, SendRequest,
};
pub use error::{Error, Result};
pub use log::LOG_ENV;
pub use pool::PooledBuf;
pub use transport::dgram::{DatagramStats, LinkStats};
pub use transport::fault::{
    Fault, FaultDirection, FaultRates, FaultSite, FaultStats, Faults, FaultsParseError,
};

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
