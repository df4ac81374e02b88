//! A job of two ranks inside this process (each with a context of its own, as two processes
//! would have), for the benches whose ranks are threads: `quiver bench am` and `quiver
//! bench rma`. A fresh random job id and key; the ranks' addresses are free tcp ports on
//! loopback (used by the network transports, ignored by shm).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use quiver::{Config, Context};

/// The two ranks' contexts of one job, each with `config`.
///
/// # Errors
/// No randomness for the key, no free port, or a context refused (its error, naming the
/// rank).
pub fn two_ranks(config: &Config) -> Result<(Context, Context), String> {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| format!("job key: {e}"))?;
    let id = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let addrs = (0..2)
        .map(|_| free_port().map(|port| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("free port: {e}"))?;
    let build = |rank: u32| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(id)
            .job_key(key)
            .addrs(addrs.clone())
            .config(config.clone())
            .build()
            .map_err(|e| format!("rank {rank}: {e}"))
    };
    Ok((build(0)?, build(1)?))
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
