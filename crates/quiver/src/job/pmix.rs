//! The PMIx bootstrap (`mpirun`, `srun --mpi=pmix`): rank and size from `PMIx_Init`; rank
//! 0 draws the job id and key and publishes them (unless `QUIVER_JOB_KEY` or
//! `QUIVER_JOB_KEY_FILE` gives the key); fence; each rank enters its `QUIVER_NETNS`
//! namespace if one is named, binds its network sockets on port 0 and publishes the
//! address it got; fence; everyone reads every address.

use super::env::{hex, key_from_env, parse_hex, MAX_RANKS};
use super::info::{Bootstrap, JobInfo, NetworkBinder};
use super::node::node_share;
use super::placement::{
    address_text, bind_address, enter_netns, networked, parse_published, settle,
};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::wait_policy::NodeCount;

/// PMIx key of rank 0's job identity: `{job_id:016x}:{key hex, or "-"}`.
const PMIX_JOB_KEY: &str = "quiver.job";
/// PMIx key of each rank's network address (`ip:port`, or "-" without network).
const PMIX_ADDR_KEY: &str = "quiver.addr";

fn pmix_error(e: quiver_pmix::PmixError) -> Error {
    Error::io("bootstrapping through PMIx", std::io::Error::other(e))
}

/// Learns the job through PMIx (module docs).
///
/// # Errors
/// PMIx failures as [`Error::Io`], a job PMIx describes that quiver cannot run as
/// [`Error::Config`], and the errors of binding the network sockets.
pub(crate) fn bootstrap(config: &Config, network: &mut dyn NetworkBinder) -> Result<JobInfo> {
    let get = |k: &str| std::env::var(k).ok();
    let env_key = key_from_env(&get)?;
    let client = quiver_pmix::Client::init().map_err(pmix_error)?;
    let (rank, size) = (client.rank(), client.size());
    let mut node = node_share(&get)?;
    if let Some(count) = client.local_size().filter(|&count| count > 0) {
        node.ranks = Some(NodeCount {
            count,
            source: "PMIx",
        });
    }
    if size > MAX_RANKS {
        return Err(Error::Config(format!(
            "PMIx reports a job of {size} ranks; quiver supports at most {MAX_RANKS}"
        )));
    }
    // Enter the node's namespace right after init: the PMIx server listens in the
    // launcher's namespace, and the connection made by init keeps working from here.
    let moved = enter_netns(&get, rank, size)?;
    let timeout = config.connect_timeout;
    if rank == 0 {
        let job_id = u64::from_ne_bytes(random());
        let key_text = match env_key {
            Some(_) => "-".to_owned(),
            None => hex(&random::<32>()),
        };
        client
            .put(PMIX_JOB_KEY, &format!("{job_id:016x}:{key_text}"))
            .map_err(pmix_error)?;
    }
    client.commit().map_err(pmix_error)?;
    client.fence(timeout).map_err(pmix_error)?;
    let job_text = client.get(0, PMIX_JOB_KEY, timeout).map_err(pmix_error)?;
    let (job_id, key) = parse_pmix_job(&job_text, env_key)?;
    let own = if networked(config) {
        let one_node = !moved && client.local_size() == Some(size);
        Some(bind_address(&get, one_node, None)?)
    } else {
        None
    };
    let bound = network.bind(own, job_id, key)?;
    client
        .put(PMIX_ADDR_KEY, &address_text(bound))
        .map_err(pmix_error)?;
    client.commit().map_err(pmix_error)?;
    client.fence(timeout).map_err(pmix_error)?;
    let texts = (0..size)
        .map(|r| client.get(r, PMIX_ADDR_KEY, timeout))
        .collect::<std::result::Result<Vec<String>, _>>()
        .map_err(pmix_error)?;
    // Everything needed is read; the PMIx session (and its thread) can end.
    client.finalize().map_err(pmix_error)?;
    let addrs = parse_published(&texts)?;
    let job = JobInfo {
        rank,
        size,
        job_id,
        key,
        addrs,
        links: Vec::new(),
        bootstrap: Bootstrap::Pmix,
        node,
    };
    Ok(settle(job, config, network))
}

/// Parses rank 0's `{job_id:016x}:{key hex or "-"}`; "-" means every rank has the key from
/// its environment.
fn parse_pmix_job(text: &str, env_key: Option<[u8; 32]>) -> Result<(u64, [u8; 32])> {
    let bad = || {
        Error::Config(format!(
            "rank 0 published a malformed job identity ({} bytes)",
            text.len()
        ))
    };
    let (id_text, key_text) = text.split_once(':').ok_or_else(bad)?;
    let job_id = parse_hex::<8>(id_text)
        .map(u64::from_be_bytes)
        .ok_or_else(bad)?;
    let key = match (key_text, env_key) {
        ("-", Some(key)) => key,
        ("-", None) => {
            return Err(Error::Config(
                "rank 0 took the job key from QUIVER_JOB_KEY or QUIVER_JOB_KEY_FILE, which \
                 this rank does not have: give every rank the same one"
                    .into(),
            ))
        }
        (text, _) => parse_hex::<32>(text).ok_or_else(bad)?,
    };
    Ok((job_id, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmix_job_identity() {
        let key = "cd".repeat(32);
        let (id, k) = parse_pmix_job(&format!("00000000000000ff:{key}"), None).unwrap();
        assert_eq!((id, k), (0xff, [0xcd; 32]));
        assert_eq!(
            parse_pmix_job("0000000000000001:-", Some([7; 32])).unwrap(),
            (1, [7; 32])
        );
        assert!(parse_pmix_job("0000000000000001:-", None).is_err());
        assert!(parse_pmix_job("garbage", None).is_err());
        assert!(parse_pmix_job("00000000000000ff:abc", None).is_err());
    }
}
