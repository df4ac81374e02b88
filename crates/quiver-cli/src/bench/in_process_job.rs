//! A job of two ranks inside this process (each with a context of its own, as two processes
//! would have), for the benches whose ranks are threads: `quiver bench am` and `quiver
//! bench rma`. A fresh random job id and key; the ranks' addresses are free tcp ports on
//! loopback (used by the network transports, ignored by shm).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use quiver::{Config, Context};

/// A job of two ranks in this process: what each rank's context is built from.
#[derive(Debug, Clone)]
pub struct InProcessJob {
    id: u64,
    key: [u8; 32],
    addrs: Vec<SocketAddr>,
    config: Config,
}

impl InProcessJob {
    /// A fresh job whose ranks use `config`.
    ///
    /// # Errors
    /// No randomness for the key, or no free port.
    pub fn new(config: &Config) -> Result<InProcessJob, String> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(|e| format!("job key: {e}"))?;
        let id = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        let addrs = (0..2)
            .map(|_| free_port().map(|port| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| format!("free port: {e}"))?;
        Ok(InProcessJob {
            id,
            key,
            addrs,
            config: config.clone(),
        })
    }

    /// Rank `rank`'s context. Build it on the thread that drives the rank: its memory then
    /// comes from that thread's allocator arena, not beside the other rank's, where a line
    /// one rank writes and the other reads would cross between the CPUs (two processes
    /// never share such lines).
    ///
    /// # Errors
    /// The context's, naming the rank.
    pub fn context(&self, rank: u32) -> Result<Context, String> {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(self.id)
            .job_key(self.key)
            .addrs(self.addrs.clone())
            .config(self.config.clone())
            .build()
            .map_err(|e| format!("rank {rank}: {e}"))
    }
}

/// The two ranks' contexts of one job, each with `config`, both built on this thread.
///
/// # Errors
/// As [`InProcessJob::new`] and [`InProcessJob::context`].
pub fn two_ranks(config: &Config) -> Result<(Context, Context), String> {
    let job = InProcessJob::new(config)?;
    Ok((job.context(0)?, job.context(1)?))
}

/// A free tcp port on loopback.
///
/// # Errors
/// The probe socket's.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}
