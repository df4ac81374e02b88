//! What every transport of this rank shares: the job's identity and key, the settings,
//! every rank's address, the open endpoints ([`Registry`]), the datagram engine when one
//! runs, and the flag that stops the listeners. The context creates it; endpoints and
//! listeners hold it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use quiver_proto::handshake::JobKey;

use super::regions::RegionTable;
use super::registry::Registry;
use super::rma_serve::RmaService;
use crate::config::{Config, TransportKind};
use crate::job::{Bootstrap, JobInfo};
use crate::transport::dgram::engine::DgramShared;
use crate::transport::tcp::stats::TcpCounts;

/// This rank's shared transport state (see the module docs).
#[derive(Debug)]
pub(crate) struct LocalRank {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) job_id: u64,
    key: [u8; 32],
    pub(crate) config: Config,
    /// Network address of every rank (empty: this job uses no network transport).
    pub(crate) addrs: Vec<SocketAddr>,
    /// How this rank learnt its job.
    pub(crate) bootstrap: Bootstrap,
    /// The open endpoints and the listeners' counters.
    pub(crate) registry: Registry,
    /// The registered memory regions peers may map, and the one-sided counters.
    pub(crate) regions: RegionTable,
    /// The connections peers opened to apply one-sided requests here (network
    /// transports), served by this rank's endpoints as they call into quiver.
    pub(crate) rma: RmaService,
    /// The datagram engine (udp or mem), when one of them is configured.
    pub(crate) dgram: Option<Arc<DgramShared>>,
    /// The tcp streams' counters.
    pub(crate) tcp: Arc<TcpCounts>,
    /// Set when the context closes: the listener threads end.
    pub(crate) stopping: AtomicBool,
    /// The id the next endpoint opened gets (a connection names its endpoint by it).
    pub(crate) next_endpoint_id: AtomicU64,
}

impl LocalRank {
    /// The shared state of a rank of `job` (its addresses final), configured by `config`.
    pub(crate) fn new(job: JobInfo, config: Config, dgram: Option<Arc<DgramShared>>) -> LocalRank {
        LocalRank {
            rank: job.rank,
            size: job.size,
            job_id: job.job_id,
            key: job.key,
            config,
            addrs: job.addrs,
            bootstrap: job.bootstrap,
            registry: Registry::new(job.rank),
            regions: RegionTable::default(),
            rma: RmaService::default(),
            dgram,
            tcp: Arc::default(),
            stopping: AtomicBool::new(false),
            next_endpoint_id: AtomicU64::new(1),
        }
    }

    /// The job's key, for handshakes.
    pub(crate) fn job_key(&self) -> JobKey {
        JobKey::from_bytes(self.key)
    }

    /// Whether rank `rank` runs on this node (in this network namespace): always without
    /// network addresses; otherwise when its address belongs to an interface here.
    pub(crate) fn peer_is_local(&self, rank: u32) -> bool {
        match self.addrs.get(rank as usize) {
            None => true,
            Some(_) if rank == self.rank => true,
            Some(addr) => std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).is_ok(),
        }
    }

    /// The datagram transport this rank runs, if any.
    pub(crate) fn dgram_kind(&self) -> Option<TransportKind> {
        self.dgram.as_ref().map(|d| d.kind())
    }
}
