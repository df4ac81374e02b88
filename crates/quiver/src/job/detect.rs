//! Which bootstrap runs ([`detect`]) and running it ([`from_env`]): the job's facts from
//! whatever launched this process.

use super::env::{quiver_run, Lookup, RANK_VARIABLES};
use super::info::{Bootstrap, JobInfo, NetworkBinder};
use super::variables::{BOOTSTRAP, RANK, RENDEZVOUS};
use crate::config::Config;
use crate::error::{Error, Result};

impl Bootstrap {
    /// Which bootstrap [`Context::from_env`](crate::Context::from_env) would use in this
    /// environment (nothing is contacted).
    ///
    /// # Errors
    /// [`Error::Config`] when the environment names none (not started by a launcher), or
    /// names PMIx while quiver was built without it and no rendezvous is given.
    pub fn detect() -> Result<Bootstrap> {
        detect(&|k| std::env::var(k).ok())
    }
}

/// Learns the job from whatever launched this process (the order is in the module docs of
/// `job`), binding the network sockets through `network` when the bootstrap publishes
/// addresses.
///
/// # Errors
/// [`Error::Config`] naming the missing or malformed variable; [`Error::Io`] when the
/// exchange with the launcher or rank 0 fails.
pub(crate) fn from_env(config: &Config, network: &mut dyn NetworkBinder) -> Result<JobInfo> {
    match Bootstrap::detect()? {
        Bootstrap::Pmix => super::pmix::bootstrap(config, network),
        Bootstrap::Rendezvous => super::rendezvous::bootstrap(config, network),
        _ => quiver_run(&|k| std::env::var(k).ok()),
    }
}

/// Which bootstrap the variables `get` reads name.
pub(crate) fn detect(get: Lookup<'_>) -> Result<Bootstrap> {
    if let Some(forced) = get(BOOTSTRAP) {
        return match forced.trim() {
            "env" | "quiver-run" => Ok(Bootstrap::QuiverRun),
            "pmix" => Ok(Bootstrap::Pmix),
            "rendezvous" => Ok(Bootstrap::Rendezvous),
            other => Err(Error::Config(format!(
                "QUIVER_BOOTSTRAP={other:?}: expected env, pmix or rendezvous"
            ))),
        };
    }
    if get(RANK).is_some() {
        return Ok(Bootstrap::QuiverRun);
    }
    if get("PMIX_RANK").is_some() || get("PMIX_NAMESPACE").is_some() {
        if quiver_pmix::BUILT {
            return Ok(Bootstrap::Pmix);
        }
        if get(RENDEZVOUS).is_some() {
            return Ok(Bootstrap::Rendezvous);
        }
        return Err(Error::Config(
            "started by a PMIx launcher (PMIX_RANK is set), but this quiver was built without \
             PMIx support: install libpmix-dev and pkg-config and rebuild, or set \
             QUIVER_RENDEZVOUS=host:port (an address of rank 0's node) and QUIVER_JOB_KEY"
                .into(),
        ));
    }
    if RANK_VARIABLES.iter().any(|(rank, _)| get(rank).is_some()) {
        return Ok(Bootstrap::Rendezvous);
    }
    Err(Error::Config(
        "not started by a launcher: use `quiver run -n N -- PROGRAM`, `mpirun`, or \
         `srun --mpi=pmix`; or set QUIVER_RANK, QUIVER_SIZE, QUIVER_JOB_ID and QUIVER_JOB_KEY \
         (see docs/launchers.md)"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::env::tests::lookup;
    use super::*;

    #[test]
    fn detection_order() {
        let d = |pairs: &[(&str, &str)]| detect(&lookup(pairs));
        assert_eq!(
            d(&[("QUIVER_RANK", "0"), ("PMIX_RANK", "0")]).unwrap(),
            Bootstrap::QuiverRun
        );
        let pmix = d(&[("PMIX_RANK", "1"), ("OMPI_COMM_WORLD_RANK", "1")]);
        if quiver_pmix::BUILT {
            assert_eq!(pmix.unwrap(), Bootstrap::Pmix);
        } else {
            assert!(pmix.unwrap_err().to_string().contains("without PMIx"));
        }
        assert_eq!(d(&[("SLURM_PROCID", "3")]).unwrap(), Bootstrap::Rendezvous);
        assert_eq!(
            d(&[("QUIVER_BOOTSTRAP", "rendezvous"), ("PMIX_RANK", "0")]).unwrap(),
            Bootstrap::Rendezvous
        );
        assert!(d(&[("QUIVER_BOOTSTRAP", "magic")]).is_err());
        let none = d(&[]).unwrap_err().to_string();
        assert!(none.contains("not started by a launcher"), "{none}");
    }
}
