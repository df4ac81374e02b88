//! One-sided operations over shared memory, the initiator's side: the target's listener
//! hands a region's memory file to a peer that presents a valid key
//! ([`super::rma_grant`]), and the initiator maps it once per key ([`ShmRma`]) and then applies puts, gets and atomics with plain copies and CPU
//! atomics: no system call and no work of the target's CPU per operation.
//!
//! The request rides the listener's socket: the initiator runs the job-key handshake asking
//! for the reserved port [`RMA_PORT`], sends the 48-byte key, and gets a grant
//! (`quiver_wire::rma`) with the region's descriptor (read-only for a read-only key). The
//! target checks the key against its live regions (`transport::regions`). Revocation: the
//! owner marks the region's header revoked before it unmaps its view, and every operation
//! here looks at that mark first (docs/rma.md says what a peer can still do after it).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::os::fd::OwnedFd;

use quiver_transport::region::SharedRegion;
use quiver_transport::sys;
use quiver_wire::rma::{GrantRepr, GrantStatus, KeyRepr, GRANT_LEN};

use super::connect::handshake;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::local::LocalRank;
use crate::transport::retry::Attempt;
use crate::transport::rma_ops::{refused, RmaOp, RMA_PORT};

/// The regions of one peer an edge mapped, by key.
#[derive(Debug, Default)]
pub(crate) struct ShmRma {
    mapped: HashMap<KeyRepr, SharedRegion>,
}

impl ShmRma {
    /// Applies `op` (already checked against `key` by the caller) to the region of `peer`
    /// that `key` names, mapping it first if this edge has not yet; the word before, for
    /// an atomic (0 for a put or get).
    ///
    /// # Errors
    /// [`Error::RmaKeyRefused`] (the target refused the key), [`Error::RmaRevoked`], the
    /// access errors of [`SharedRegion`], [`Error::Io`] for a failed request.
    pub(crate) fn apply(
        &mut self,
        local: &LocalRank,
        (src, peer): (Addr, Addr),
        key: &KeyRepr,
        op: RmaOp<'_>,
    ) -> Result<u64> {
        let region = match self.mapped.entry(*key) {
            Entry::Occupied(mapped) => mapped.into_mut(),
            Entry::Vacant(slot) => slot.insert(fetch(local, src, peer, key)?),
        };
        if region.is_revoked() {
            self.mapped.remove(key);
            let error = Error::RmaRevoked {
                rank: peer.rank,
                region: key.region,
            };
            return Err(refused(local, error));
        }
        let at = |offset: u64| usize::try_from(offset).unwrap_or(usize::MAX);
        let outcome = match op {
            RmaOp::Put { data, offset } => region.write(at(offset), data).map(|()| 0),
            RmaOp::Get { buf, offset } => region.read(at(offset), buf).map(|()| 0),
            RmaOp::FetchAdd { offset, value } => region.fetch_add(at(offset), value),
            RmaOp::CompareSwap {
                offset,
                expected,
                new,
            } => region.compare_swap(at(offset), expected, new),
            RmaOp::Swap { offset, value } => region.swap(at(offset), value),
        };
        outcome.map_err(|e| {
            // The caller checked the operation against the key, and the region matches the
            // key (length and rights, checked when it was mapped): a refusal here means the
            // two disagree, which the checks exclude; report it as the peer's fault.
            let detail = format!(
                "the region mapped for key {} refused an access: {e:?}",
                key.region
            );
            refused(local, Error::Corrupt { peer, detail })
        })
    }
}

/// Asks `peer`'s listener for the region `key` names and maps it.
fn fetch(local: &LocalRank, src: Addr, peer: Addr, key: &KeyRepr) -> Result<SharedRegion> {
    let service = Addr::new(peer.rank, RMA_PORT);
    let sock = handshake(local, src, service, &[0u8; 16]).map_err(|attempt| match attempt {
        Attempt::Fail(error) => error,
        Attempt::Retry(reason) | Attempt::Silent(_, reason) => Error::Refused { peer, reason },
    })?;
    sys::send_datagram(&sock, &key.emit())
        .map_err(|e| Error::io(format!("sending a key to {peer}"), e))?;
    let mut buf = [0u8; GRANT_LEN + 1];
    let (n, fds) = sys::recv_with_fds(&sock, &mut buf)
        .map_err(|e| Error::io(format!("receiving the grant of {peer}"), e))?;
    let corrupt = |detail: String| Error::Corrupt {
        peer,
        detail: format!("region grant: {detail}"),
    };
    let grant = GrantRepr::parse(&buf[..n]).map_err(|e| corrupt(e.to_string()))?;
    let reason = match grant.status {
        GrantStatus::Granted => None,
        GrantStatus::UnknownKey => {
            Some("no live region of it matches the key (forged, revoked, or of another job)")
        }
        GrantStatus::WrongRights => Some("the key asks for writing, the region is read-only"),
        GrantStatus::NoResources => Some("it could not hand the region over (out of descriptors)"),
    };
    if let Some(reason) = reason {
        let error = Error::RmaKeyRefused {
            rank: peer.rank,
            reason: reason.into(),
        };
        return Err(refused(local, error));
    }
    if grant.len != key.len || grant.rights != key.rights {
        return Err(corrupt("the grant disagrees with the key".into()));
    }
    let [fd]: [OwnedFd; 1] = fds
        .try_into()
        .map_err(|_| corrupt("a grant without exactly one descriptor".into()))?;
    let len = usize::try_from(key.len).map_err(|_| corrupt("a region too large to map".into()))?;
    SharedRegion::attach(&fd, len, key.rights.writable()).map_err(|e| corrupt(e.to_string()))
}
