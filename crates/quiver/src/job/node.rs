//! What the launcher says about this node: how many ranks of the job run here and how many
//! CPUs it gave them (a [`NodeLoad`]). The waiting policy
//! (`transport/wait_policy.rs`) compares the two; this module only reads what launchers
//! export and never looks at the machine.
//!
//! Ranks on this node, the first variable set of: `QUIVER_LOCAL_SIZE` (`quiver run`),
//! `OMPI_COMM_WORLD_LOCAL_SIZE` (Open MPI), `MPI_LOCALNRANKS` (MPICH's hydra),
//! `SLURM_STEP_TASKS_PER_NODE` then `SLURM_TASKS_PER_NODE` (Slurm, this node's entry by
//! `SLURM_NODEID`), `SLURM_NTASKS_PER_NODE`; the PMIx bootstrap puts PMIx's local size
//! first. CPUs for them: `QUIVER_LOCAL_CPUS` (`quiver run`: the CPUs the launcher may use),
//! `SLURM_CPUS_ON_NODE`.

use super::variables::{LOCAL_CPUS, LOCAL_SIZE};
use crate::error::{Error, Result};
use crate::transport::wait_policy::{NodeCount, NodeLoad};

/// Looks up an environment variable (a map in tests).
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Variables that give the ranks on this node as one number, in the order they are read.
const LOCAL_SIZE_VARIABLES: [&str; 3] =
    [LOCAL_SIZE, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"];

/// Variables that give the CPUs the job has on this node, in the order they are read.
const LOCAL_CPU_VARIABLES: [&str; 2] = [LOCAL_CPUS, "SLURM_CPUS_ON_NODE"];

/// What the launcher exported about this node (module docs) completed with what the
/// machine says ([`NodeLoad::with_machine`]): the load a context started here by
/// `Context::from_env` would see (PMIx's word aside), for reports such as `quiver info`.
///
/// # Errors
/// [`Error::Config`] for a `QUIVER_LOCAL_SIZE` or `QUIVER_LOCAL_CPUS` that does not parse.
pub fn node_load_from_env() -> Result<NodeLoad> {
    Ok(node_share(&|name| std::env::var(name).ok())?.with_machine())
}

/// Reads what the launcher exported (module docs).
///
/// # Errors
/// [`Error::Config`] for a `QUIVER_LOCAL_SIZE` or `QUIVER_LOCAL_CPUS` that is not a whole
/// number from 1 up (quiver's own contract). Other launchers' variables that do not parse
/// are passed over, as if unset.
pub(crate) fn node_share(get: Lookup<'_>) -> Result<NodeLoad> {
    let ranks = match first_count(get, &LOCAL_SIZE_VARIABLES)? {
        Some(told) => Some(told),
        None => slurm_tasks_here(get),
    };
    Ok(NodeLoad {
        ranks,
        cpus: first_count(get, &LOCAL_CPU_VARIABLES)?,
    })
}

/// The first of `variables` that is set and parses; quiver's own must parse.
fn first_count(get: Lookup<'_>, variables: &[&'static str]) -> Result<Option<NodeCount>> {
    for &name in variables {
        let Some(text) = get(name) else { continue };
        match text.trim().parse::<u32>() {
            Ok(count) if count > 0 => {
                return Ok(Some(NodeCount {
                    count,
                    source: name,
                }))
            }
            _ if [LOCAL_SIZE, LOCAL_CPUS].contains(&name) => {
                return Err(Error::Config(format!(
                    "{name}={text:?}: expected a whole number from 1 up"
                )))
            }
            _ => {}
        }
    }
    Ok(None)
}

/// Slurm's tasks on this node: this node's entry of `SLURM_STEP_TASKS_PER_NODE` or
/// `SLURM_TASKS_PER_NODE` (`2(x3),1`: two tasks on each of three nodes, then one), by
/// `SLURM_NODEID`; else `SLURM_NTASKS_PER_NODE`.
fn slurm_tasks_here(get: Lookup<'_>) -> Option<NodeCount> {
    let node = get("SLURM_NODEID").and_then(|t| t.trim().parse::<u32>().ok());
    for name in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        let Some(text) = get(name) else { continue };
        if let Some(count) = tasks_of_node(&text, node) {
            return Some(NodeCount {
                count,
                source: name,
            });
        }
    }
    let text = get("SLURM_NTASKS_PER_NODE")?;
    let count = text.trim().parse::<u32>().ok().filter(|&c| c > 0)?;
    Some(NodeCount {
        count,
        source: "SLURM_NTASKS_PER_NODE",
    })
}

/// Entry `node` of a Slurm tasks-per-node list (`2(x3),1`); without a node id, the list
/// must name one count for every node.
fn tasks_of_node(text: &str, node: Option<u32>) -> Option<u32> {
    let mut first_node = 0u32;
    let mut only = None;
    for entry in text.split(',').map(str::trim) {
        let (count, repeat) = match entry.split_once("(x") {
            Some((count, rest)) => (count, rest.strip_suffix(')')?.parse::<u32>().ok()?),
            None => (entry, 1),
        };
        let count = count.parse::<u32>().ok().filter(|&c| c > 0)?;
        match node {
            Some(node) if node < first_node.saturating_add(repeat) => return Some(count),
            Some(_) => first_node = first_node.saturating_add(repeat),
            None if only.is_none_or(|c| c == count) => only = Some(count),
            None => return None,
        }
    }
    if node.is_some() {
        return None;
    }
    only
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(pairs: &[(&str, &str)]) -> Result<NodeLoad> {
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        node_share(&get)
    }

    #[test]
    fn quiver_run_and_mpi_launchers() {
        assert_eq!(share(&[]).unwrap(), NodeLoad::default());
        let s = share(&[
            ("QUIVER_LOCAL_SIZE", "4"),
            ("QUIVER_LOCAL_CPUS", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "9"),
        ])
        .unwrap();
        assert_eq!(
            s.ranks,
            Some(NodeCount {
                count: 4,
                source: "QUIVER_LOCAL_SIZE"
            })
        );
        assert_eq!(s.cpus.map(|t| t.count), Some(2));
        let s = share(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "3")]).unwrap();
        assert_eq!(
            s.ranks.map(|t| (t.count, t.source)),
            Some((3, "OMPI_COMM_WORLD_LOCAL_SIZE"))
        );
        assert_eq!(s.cpus, None);
        // A foreign variable that does not parse is passed over; quiver's own is an error.
        let s = share(&[
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "x"),
            ("MPI_LOCALNRANKS", "2"),
        ])
        .unwrap();
        assert_eq!(s.ranks.map(|t| t.source), Some("MPI_LOCALNRANKS"));
        for bad in ["0", "many", "-1"] {
            let e = share(&[("QUIVER_LOCAL_SIZE", bad)])
                .unwrap_err()
                .to_string();
            assert!(e.contains("QUIVER_LOCAL_SIZE"), "{e}");
            assert!(share(&[("QUIVER_LOCAL_CPUS", bad)]).is_err());
        }
    }

    #[test]
    fn slurm_lists_by_node() {
        assert_eq!(tasks_of_node("2(x3),1", Some(0)), Some(2));
        assert_eq!(tasks_of_node("2(x3),1", Some(2)), Some(2));
        assert_eq!(tasks_of_node("2(x3),1", Some(3)), Some(1));
        assert_eq!(tasks_of_node("2(x3),1", Some(4)), None);
        assert_eq!(tasks_of_node("4", None), Some(4));
        assert_eq!(tasks_of_node("4(x2)", None), Some(4));
        assert_eq!(tasks_of_node("4,2", None), None);
        assert_eq!(tasks_of_node("2(x", Some(0)), None);
        assert_eq!(tasks_of_node("", Some(0)), None);
        let s = share(&[
            ("SLURM_TASKS_PER_NODE", "1,3"),
            ("SLURM_NODEID", "1"),
            ("SLURM_CPUS_ON_NODE", "8"),
        ])
        .unwrap();
        assert_eq!(
            s.ranks.map(|t| (t.count, t.source)),
            Some((3, "SLURM_TASKS_PER_NODE"))
        );
        assert_eq!(
            s.cpus.map(|t| (t.count, t.source)),
            Some((8, "SLURM_CPUS_ON_NODE"))
        );
        let s = share(&[
            ("SLURM_STEP_TASKS_PER_NODE", "2"),
            ("SLURM_TASKS_PER_NODE", "5"),
        ])
        .unwrap();
        assert_eq!(s.ranks.map(|t| t.count), Some(2));
        let s = share(&[("SLURM_NTASKS_PER_NODE", "6")]).unwrap();
        assert_eq!(s.ranks.map(|t| t.count), Some(6));
    }
}
