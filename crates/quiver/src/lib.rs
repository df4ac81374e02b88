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
//!
//! quiver logs through `tracing` events and installs no subscriber of its own: give your
//! program one, or call [`init_logging_from_env`] at the start of `main` to have
//! `QUIVER_LOG` print them on stderr.
#![forbid(unsafe_code)]

mod addr;
mod config;
mod context;
mod endpoint;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod job;
mod log;
mod pool;
pub mod profile;
mod random;
mod rma;
mod slab;
mod transport;
pub mod variables;

pub use addr::Addr;
/// The plain-data traits of typed sends and receives ([`Endpoint::send_typed`],
/// [`Scope::post_send`]): `#[derive(Pod, Zeroable)]` needs bytemuck's `derive` feature.
pub use bytemuck;
pub use config::{
    parse_links, parse_size, parse_transports, Config, Setting, SizeParseError, TransportKind,
    UdpIoMode, DETECTION_MIN, MAX_LINKS, PROTO_INFO_ENV,
};
pub use context::{Context, ContextBuilder, ContextStats};
pub use endpoint::handlers::{ActiveMessage, AmArrival, AmStats};
pub use endpoint::matching::{Envelope, MatchSpec, MatchingStats};
pub use endpoint::scope::{Scope, ScopedRecv, ScopedSend};
pub use endpoint::{Connection, Endpoint, RecvRequest, RmaCompletion, RmaRequest, SendRequest};
pub use error::{Error, Result};
pub use job::{node_load_from_env, Bootstrap};
pub use log::{init_logging_from_env, LOG_ENV};
pub use pool::PooledBuf;
/// The counters of a udp link driven by io_uring ([`LinkStats::uring`]).
pub use quiver_transport::uring::UringStats;
pub use quiver_wire::rma::Rights;
pub use rma::caller::CallerRegion;
pub use rma::key::RemoteKey;
pub use rma::region::Region;
pub use transport::dgram::stats::{DatagramRefusals, DatagramStats, LinkStats};
pub use transport::edge::transport_info;
pub use transport::fault::{
    Fault, FaultDirection, FaultRates, FaultSite, FaultStats, Faults, FaultsParseError,
};
pub use transport::liveness::DetectionStats;
pub use transport::protocols::{ProtocolRange, TransportInfo};
pub use transport::regions::RmaStats;
pub use transport::requests::RecvCompletion;
pub use transport::tcp::stats::TcpStats;
pub use transport::wait_policy::{
    NodeCount, NodeLoad, WaitPolicy, YieldMode, Yielding, DEFAULT_YIELD_SPIN,
};
pub use transport::xdp::link::XdpLinkStats;
