//! The job: how a process learns its rank, its job (id and key) and every rank's network
//! address before its [`Context`](crate::Context) is built. This layer depends on nothing
//! above the configuration: it returns the job's facts ([`JobInfo`]) and asks the
//! transports to bind sockets only through [`NetworkBinder`].
//!
//! `Context::from_env` picks a bootstrap, in this order (docs/launchers.md):
//!
//! 1. **quiver run** (`QUIVER_RANK` set): everything is in the environment.
//! 2. **PMIx** (`PMIX_RANK` or `PMIX_NAMESPACE` set: `mpirun`, `srun --mpi=pmix`): rank and
//!    size from `PMIx_Init`; rank 0 draws the job id and key and publishes them (unless
//!    `QUIVER_JOB_KEY`/`QUIVER_JOB_KEY_FILE` gives the key); fence; each rank enters its
//!    `QUIVER_NETNS` namespace if one is named, binds its tcp listener and udp socket on
//!    port 0 and publishes the address it got; fence; everyone reads every address.
//! 3. **rendezvous** (the fallback for launchers without PMIx): rank and size from
//!    `OMPI_COMM_WORLD_RANK`/`_SIZE`, `PMI_RANK`/`PMI_SIZE` or `SLURM_PROCID`/
//!    `SLURM_NTASKS`; the key from `QUIVER_JOB_KEY` or `QUIVER_JOB_KEY_FILE`; rank 0
//!    listens at `QUIVER_RENDEZVOUS=host:port`, every other rank sends it its address
//!    there, and rank 0 answers everyone with the job id and all addresses. Both
//!    directions carry a keyed BLAKE3 MAC, and each answer echoes its request's nonce.
//!
//! `QUIVER_BOOTSTRAP=env|pmix|rendezvous` forces one. The address a rank binds: the
//! `QUIVER_BIND_ADDR` (an ip, ip:port or interface name); else loopback when PMIx says the
//! whole job is on this node and no `QUIVER_NETNS` moved it; else the source address of
//! the route to the rendezvous host; else the first non-loopback address of the rank's
//! network namespace (IPv4 first), or loopback when there is none. When, after the
//! exchange, every rank turns out to be on this node and shm is the first transport, the
//! sockets are closed again and the job runs on shm alone, as under `quiver run`.

mod detect;
mod env;
mod info;
mod node;
mod placement;
mod pmix;
mod rendezvous;
pub(crate) mod variables;

pub(crate) use detect::from_env;
pub use info::Bootstrap;
pub(crate) use info::{JobInfo, NetworkBinder};
pub use node::node_load_from_env;
