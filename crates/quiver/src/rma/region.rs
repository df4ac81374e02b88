//! [`Region`]: memory a rank registers for one-sided communication. quiver allocates it in
//! a sealed memory file so that peers on this node can map it; its keys stay valid until
//! the region is dropped, which revokes them.

use std::sync::Arc;

use quiver_transport::region::{AccessError, SharedRegion};
use quiver_wire::rma::{KeyRepr, Rights};

use super::key::RemoteKey;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::local::LocalRank;

/// A registered memory region (see [`Context::alloc_region`](crate::Context::alloc_region)).
///
/// Peers holding one of its keys may read it (and, with a read-write key, write it and
/// apply atomics to its words) at any time, concurrently with this process: so the owner
/// reads and writes it through methods that copy ([`read`](Self::read),
/// [`write`](Self::write)) or are atomic ([`load`](Self::load),
/// [`fetch_add`](Self::fetch_add)), never through a plain slice. Dropping it revokes every
/// key (docs/rma.md: what a peer that already mapped it can still do).
#[derive(Debug)]
pub struct Region {
    local: Arc<LocalRank>,
    view: Arc<SharedRegion>,
    key: KeyRepr,
}

impl Region {
    /// Allocates a zeroed region of `len` bytes whose keys allow `rights`.
    pub(crate) fn allocate(local: Arc<LocalRank>, len: usize, rights: Rights) -> Result<Region> {
        let (view, fd) = SharedRegion::create(len)
            .map_err(|e| Error::shared_memory("a registered region", len as u64, e))?;
        let view = Arc::new(view);
        let capability = random();
        let region = local
            .regions
            .insert((fd, view.clone()), capability, rights, len as u64);
        let key = KeyRepr {
            rights,
            rank: local.rank,
            job_id: local.job_id,
            region,
            len: len as u64,
            capability,
        };
        Ok(Region { local, view, key })
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
        self.view.len()
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.view.is_empty()
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
        let checked = self.view.write(offset, data);
        checked.map_err(|e| self.local_error(e, "write", offset, data.len()))
    }

    /// Copies the region's bytes at `offset` into `buf`.
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`].
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let checked = self.view.read(offset, buf);
        checked.map_err(|e| self.local_error(e, "read", offset, buf.len()))
    }

    /// Reads the 64-bit word at `offset` atomically (with respect to peers' atomics).
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`], [`Error::RmaMisaligned`].
    pub fn load(&self, offset: usize) -> Result<u64> {
        let checked = self.view.load(offset);
        checked.map_err(|e| self.local_error(e, "load", offset, 8))
    }

    /// Adds `value` (wrapping) to the word at `offset`, atomically with respect to the
    /// peers' atomics on it; the word before.
    ///
    /// # Errors
    /// [`Error::RmaOutOfBounds`], [`Error::RmaMisaligned`].
    pub fn fetch_add(&self, offset: usize, value: u64) -> Result<u64> {
        let checked = self.view.fetch_add(offset, value);
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
        owner_access_error(e, operation, (offset, len), self.view.len())
    }
}

/// The error of an owner's own access to its region (allocated or lent) that the region
/// refused: its view is always writable and live while it can be reached, so only the
/// alignment and the bounds remain.
pub(super) fn owner_access_error(
    e: AccessError,
    operation: &'static str,
    (offset, len): (usize, usize),
    region_len: usize,
) -> Error {
    match e {
        AccessError::Misaligned => Error::RmaMisaligned {
            offset: offset as u64,
        },
        AccessError::OutOfBounds | AccessError::ReadOnly | AccessError::Revoked => {
            Error::RmaOutOfBounds {
                operation,
                offset: offset as u64,
                len: len as u64,
                region_len: region_len as u64,
            }
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // First no new grants, then the mark peers that mapped it look at; the memory
        // itself lives on while any peer's mapping does (docs/rma.md).
        self.local.regions.remove(self.key.region);
        // The owner's view is writable: revoking cannot fail.
        let _ = self.view.revoke();
    }
}
