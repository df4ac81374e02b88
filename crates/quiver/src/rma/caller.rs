//! [`CallerRegion`]: memory the caller keeps and lends to one-sided communication for the
//! length of a scope ([`Context::register`](crate::Context::register)), rather than a
//! region quiver allocates. Peers on this node reach it by cross-memory attach (one copy,
//! no work of this process's CPU) for puts and gets, and through this rank's progress
//! engine for atomics and wherever cross-memory attach is refused; peers over tcp and udp
//! through the progress engine, as for any region (docs/rma.md).
//!
//! The region borrows the memory exclusively for the scope, and the scope ends only once
//! no access can touch it again (`quiver_transport::caller`): so the memory is the
//! caller's again, unchanged by anyone, when `register` returns, whatever the program did
//! with the region (it is only ever lent by reference).

use std::sync::Arc;

use quiver_transport::caller::CallerMemory;
use quiver_transport::region::AccessError;
use quiver_wire::rma::{KeyRepr, Rights};

use super::key::RemoteKey;
use super::region::owner_access_error;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::local::LocalRank;

/// Memory the caller lent for one-sided communication, inside the scope of
/// [`Context::register`](crate::Context::register). Peers holding one of its keys may read
/// it (and, with a read-write key, write it and apply atomics to its words) at any moment
/// of the scope, so the owner reaches it through copies ([`read`](Self::read),
/// [`write`](Self::write)) and atomics ([`load`](Self::load),
/// [`fetch_add`](Self::fetch_add)), as a [`Region`](crate::Region)'s. Its keys are revoked
/// when the scope ends.
#[derive(Debug)]
pub struct CallerRegion {
    memory: Arc<CallerMemory>,
    key: KeyRepr,
}

impl CallerRegion {
    /// Lends `memory` (module docs) for the length of `f`, entered in `local`'s region
    /// table with keys allowing `rights`; removed from the table, then revoked, when `f`
    /// returns or unwinds.
    pub(crate) fn scope<R>(
        local: &Arc<LocalRank>,
        memory: &mut [u8],
        rights: Rights,
        f: impl FnOnce(&CallerRegion) -> R,
    ) -> Result<R> {
        let len = memory.len();
        let lent = quiver_transport::caller::with_caller_memory(memory, |handle| {
            let capability = random();
            let region =
                local
                    .regions
                    .insert_caller(Arc::clone(handle), capability, rights, len as u64);
            let key = KeyRepr {
                rights,
                rank: local.rank,
                job_id: local.job_id,
                region,
                len: len as u64,
                capability,
            };
            // Out of the table first (no key is granted or served again), then the memory
            // is revoked by `with_caller_memory`, unwinding or not.
            let _unlisted = Unlist { local, region };
            let lent = CallerRegion {
                memory: Arc::clone(handle),
                key,
            };
            f(&lent)
        });
        lent.map_err(|e| Error::shared_memory("a lent region's control file", 0, e))
    }

    /// The region's key, with the rights it was registered with.
    pub fn key(&self) -> RemoteKey {
        RemoteKey::new(self.key)
    }

    /// A key that only allows reading (`get`), whatever the region's rights.
    pub fn read_only_key(&self) -> RemoteKey {
        RemoteKey::new(KeyRepr {
            rights: Rights::Read,
            ..self.key
        })
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }

    /// The rights its [`key`](Self::key) carries.
    pub fn rights(&self) -> Rights {
        self.key.rights
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`].
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let checked = self.memory.write(offset, data);
        checked.map_err(|e| self.local_error(e, "write", offset, data.len()))
    }

    /// Copies the region's bytes at `offset` into `buf`.
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`].
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let checked = self.memory.read(offset, buf);
        checked.map_err(|e| self.local_error(e, "read", offset, buf.len()))
    }

    /// Reads the 64-bit word at `offset` atomically (with respect to peers' atomics).
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`], [`Error::RmaMisaligned`] (the word's address, in the
    /// caller's memory, must be a multiple of 8 too).
    pub fn load(&self, offset: usize) -> Result<u64> {
        let checked = self.memory.load(offset);
        checked.map_err(|e| self.local_error(e, "load", offset, 8))
    }

    /// Adds `value` (wrapping) to the word at `offset`, atomically with respect to the
    /// peers' atomics on it; the word before.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn fetch_add(&self, offset: usize, value: u64) -> Result<u64> {
        let checked = self.memory.fetch_add(offset, value);
        checked.map_err(|e| self.local_error(e, "fetch_add", offset, 8))
    }

    /// The owner's own access refused ([`owner_access_error`]).
    fn local_error(
        &self,
        e: AccessError,
        operation: &'static str,
        offset: usize,
        len: usize,
    ) -> Error {
        owner_access_error(e, operation, (offset, len), self.memory.len())
    }
}

/// Takes a lent region out of the rank's table when its scope ends.
struct Unlist<'a> {
    local: &'a LocalRank,
    region: u64,
}

impl Drop for Unlist<'_> {
    fn drop(&mut self) {
        self.local.regions.remove(self.region);
    }
}
