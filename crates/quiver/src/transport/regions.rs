//! This rank's registered memory regions, as the transports see them: each live region's
//! memory file, capability, rights and length, looked up when a peer presents a remote key
//! ([`RegionTable::grant`]), and the counters of one-sided communication (keys refused
//! here, accesses refused at this rank as an initiator).
//!
//! A key is granted only when every field matches a live region of this rank and job, and
//! its capability (16 random bytes drawn when the region was made) compares equal in
//! constant time; a read-only key gets a descriptor opened read-only, so the peer's mapping
//! cannot write whatever the peer does. Region numbers are never reused while the rank
//! runs, so a revoked region's key never names a later region.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use quiver_transport::caller::CallerMemory;
use quiver_transport::region::SharedRegion;
use quiver_transport::sys;
use quiver_wire::rma::{GrantStatus, KeyRepr, Rights, CAPABILITY_LEN};
use quiver_wire::rma_request::ReplyStatus;

use super::region_view::RegionView;

/// A live region, as the table keeps it.
#[derive(Debug)]
struct Entry {
    memory: Memory,
    capability: [u8; CAPABILITY_LEN],
    rights: Rights,
    len: u64,
}

/// Where a region's bytes are.
#[derive(Debug)]
enum Memory {
    /// In a memory file quiver allocated: the file, to hand to peers on this node, and the
    /// owner's view, which the software path applies requests to (an operation in progress
    /// keeps it mapped past a revocation).
    File {
        fd: OwnedFd,
        view: Arc<SharedRegion>,
    },
    /// Lent by the caller for a scope: peers on this node copy by cross-memory attach
    /// (through its control file), the software path through the handle.
    Caller(Arc<CallerMemory>),
}

impl Memory {
    fn view(&self) -> RegionView {
        match self {
            Memory::File { view, .. } => RegionView::Shared(Arc::clone(view)),
            Memory::Caller(memory) => RegionView::Caller(Arc::clone(memory)),
        }
    }
}

/// What a granted key request hands the peer.
#[derive(Debug)]
pub(crate) enum Granted {
    /// The region's memory file (reopened read-only for a read-only key) and length.
    File { fd: OwnedFd, len: u64 },
    /// Memory the caller lent: its control file, length, address in this process, and the
    /// peer process's slot in the control file.
    Caller {
        control: OwnedFd,
        len: u64,
        addr: u64,
        slot: u32,
    },
}

impl Entry {
    /// Whether `key` names this region of rank `rank` of job `job_id` exactly (the rights
    /// aside). Every comparison is evaluated: the capability's is constant-time.
    fn matches(&self, key: &KeyRepr, (job_id, rank): (u64, u32)) -> bool {
        let same_capability = constant_time_eq(&self.capability, &key.capability);
        same_capability & (key.job_id == job_id) & (key.rank == rank) & (key.len == self.len)
    }
}

/// Counters of one-sided communication at a rank (`Context::rma_stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RmaStats {
    /// Regions this rank registered (allocated, or lent by the caller) so far.
    pub regions_registered: u64,
    /// Regions of this rank peers mapped (a key granted).
    pub keys_granted: u64,
    /// Keys peers presented that this rank refused: forged, revoked, of another job or
    /// rank, or asking for more rights than the region has. A healthy job has none.
    pub keys_refused: u64,
    /// One-sided operations this rank started that were refused before touching the
    /// target: out of bounds, wrong rights, misaligned, a revoked or refused key, a
    /// transport without one-sided operations.
    pub accesses_refused: u64,
    /// Requests peers sent over a network transport with a valid key that this rank
    /// refused: out of bounds, a write with a read-only key, a misaligned atomic. quiver's
    /// own initiators check these first, so a healthy job has none.
    pub requests_refused: u64,
    /// Memory a peer's caller lent over shm that this rank, as an initiator, found it
    /// could not reach by cross-memory attach (refused by a seccomp profile or the ptrace
    /// scope), so reaches through the peer's progress engine: once per region and
    /// connection.
    pub cross_memory_refused: u64,
    /// Why the last refusal (of either kind) happened.
    pub last_refusal: Option<String>,
}

/// The rank's live regions and the counters (module docs).
#[derive(Debug, Default)]
pub(crate) struct RegionTable {
    live: Mutex<HashMap<u64, Entry>>,
    next_region: AtomicU64,
    stats: Mutex<RmaStats>,
}

impl RegionTable {
    /// Enters a new region (its file, capability, rights and length); returns its number.
    pub(crate) fn insert(
        &self,
        (fd, view): (OwnedFd, Arc<SharedRegion>),
        capability: [u8; CAPABILITY_LEN],
        rights: Rights,
        len: u64,
    ) -> u64 {
        self.enter(Memory::File { fd, view }, capability, rights, len)
    }

    /// Enters memory a caller lent (its handle, capability, rights and length); returns
    /// its number.
    pub(crate) fn insert_caller(
        &self,
        memory: Arc<CallerMemory>,
        capability: [u8; CAPABILITY_LEN],
        rights: Rights,
        len: u64,
    ) -> u64 {
        self.enter(Memory::Caller(memory), capability, rights, len)
    }

    fn enter(
        &self,
        memory: Memory,
        capability: [u8; CAPABILITY_LEN],
        rights: Rights,
        len: u64,
    ) -> u64 {
        let region = self.next_region.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Entry {
            memory,
            capability,
            rights,
            len,
        };
        self.lock_live().insert(region, entry);
        self.lock_stats().regions_registered += 1;
        region
    }

    /// Revokes region `region`: no key for it is granted from now on.
    pub(crate) fn remove(&self, region: u64) {
        self.lock_live().remove(&region);
    }

    /// Checks `key` (presented by rank `peer`, process `pid`) against the live regions of
    /// rank `rank` of job `job_id`: what to hand the peer (a descriptor of the region's file
    /// with the key's rights, or a caller region's control file and address); otherwise
    /// why not. Refusals are counted.
    pub(crate) fn grant(
        &self,
        key: &KeyRepr,
        (job_id, rank): (u64, u32),
        (peer, pid): (u32, libc::pid_t),
    ) -> Result<Granted, GrantStatus> {
        let found = {
            let live = self.lock_live();
            let entry = live
                .get(&key.region)
                .filter(|e| e.matches(key, (job_id, rank)));
            match entry {
                None => Err(GrantStatus::UnknownKey),
                Some(e) if key.rights.writable() && !e.rights.writable() => {
                    Err(GrantStatus::WrongRights)
                }
                Some(e) => Ok(hand_over(e, key.rights, pid)),
            }
        };
        match found {
            Ok(Ok(granted)) => {
                self.lock_stats().keys_granted += 1;
                Ok(granted)
            }
            Ok(Err(_)) => {
                self.key_refused(
                    peer,
                    key.region,
                    "no descriptor (or slot) left to hand it over",
                );
                Err(GrantStatus::NoResources)
            }
            Err(status) => {
                let why = match status {
                    GrantStatus::WrongRights => "a read-write key for a read-only region",
                    _ => "no live region matches it (forged, revoked, or of another job)",
                };
                self.key_refused(peer, key.region, why);
                Err(status)
            }
        }
    }

    /// Checks `key` (presented by rank `peer` in a request over a network transport)
    /// against the live regions of rank `rank` of job `job_id`, as [`grant`](Self::grant)
    /// does: the region's view, or why not ([`ReplyStatus::Revoked`] for a region of this
    /// rank that was dropped). Refusals are counted.
    pub(crate) fn access(
        &self,
        key: &KeyRepr,
        (job_id, rank): (u64, u32),
        peer: u32,
    ) -> Result<RegionView, ReplyStatus> {
        let found = {
            let live = self.lock_live();
            match live
                .get(&key.region)
                .filter(|e| e.matches(key, (job_id, rank)))
            {
                None => Err(ReplyStatus::UnknownKey),
                Some(e) if key.rights.writable() && !e.rights.writable() => {
                    Err(ReplyStatus::WrongRights)
                }
                Some(e) => Ok(e.memory.view()),
            }
        };
        found.map_err(|status| {
            let ours = (key.job_id, key.rank) == (job_id, rank);
            let issued = key.region != 0 && key.region <= self.next_region.load(Ordering::Relaxed);
            let (status, why) = match status {
                ReplyStatus::WrongRights => (status, "a read-write key for a read-only region"),
                _ if ours && issued && !self.lock_live().contains_key(&key.region) => {
                    (ReplyStatus::Revoked, "its region was dropped (revoked)")
                }
                _ => (
                    status,
                    "no live region matches it (forged, revoked, or of another job)",
                ),
            };
            self.key_refused(peer, key.region, why);
            status
        })
    }

    /// Counts a request with a valid key from rank `peer` that this rank refused.
    pub(crate) fn request_refused(&self, peer: u32, region: u64, why: &str) {
        let why = format!("refused rank {peer}'s request on region {region}: {why}");
        tracing::warn!(reason = %why, "refused a one-sided request");
        let mut stats = self.lock_stats();
        stats.requests_refused += 1;
        stats.last_refusal = Some(why);
    }

    /// Counts a key rank `peer` presented that this rank refused.
    pub(crate) fn key_refused(&self, peer: u32, region: u64, why: &str) {
        let why = format!("refused rank {peer}'s key for region {region}: {why}");
        tracing::warn!(reason = %why, "refused a remote key");
        let mut stats = self.lock_stats();
        stats.keys_refused += 1;
        stats.last_refusal = Some(why);
    }

    /// Counts lent memory of rank `peer` that cross-memory attach cannot reach from here.
    pub(crate) fn cross_memory_refused(&self, peer: u32) {
        tracing::info!(
            peer,
            "cross-memory attach refused: a peer's lent memory is reached through its progress engine"
        );
        self.lock_stats().cross_memory_refused += 1;
    }

    /// Counts a one-sided operation of this rank refused before it touched its target.
    pub(crate) fn access_refused(&self, why: String) {
        tracing::debug!(reason = %why, "refused a one-sided operation");
        let mut stats = self.lock_stats();
        stats.accesses_refused += 1;
        stats.last_refusal = Some(why);
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> RmaStats {
        self.lock_stats().clone()
    }

    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // A panic while holding the lock leaves the map consistent (each change is one
        // insert or remove), so a poisoned lock is still usable.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_stats(&self) -> std::sync::MutexGuard<'_, RmaStats> {
        // Counters only: usable after a panic elsewhere.
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a granted key hands over of entry `e` to process `pid`: `Err` when no descriptor
/// is left (or, for lent memory, no slot).
fn hand_over(e: &Entry, rights: Rights, pid: libc::pid_t) -> std::io::Result<Granted> {
    let len = e.len;
    match &e.memory {
        Memory::File { fd, .. } if rights.writable() => {
            fd.try_clone().map(|fd| Granted::File { fd, len })
        }
        Memory::File { fd, .. } => sys::reopen_read_only(fd).map(|fd| Granted::File { fd, len }),
        Memory::Caller(memory) => {
            let slot = memory
                .slot_for(pid)
                .ok_or(std::io::ErrorKind::OutOfMemory)?;
            Ok(Granted::Caller {
                control: memory.control_fd().try_clone()?,
                len,
                addr: memory.addr(),
                slot,
            })
        }
    }
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
fn constant_time_eq(a: &[u8; CAPABILITY_LEN], b: &[u8; CAPABILITY_LEN]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use quiver_transport::region::SharedRegion;

    use super::*;

    fn key_for(region: u64, capability: [u8; 16], rights: Rights) -> KeyRepr {
        KeyRepr {
            rights,
            rank: 2,
            job_id: 9,
            region,
            len: 64,
            capability,
        }
    }

    #[test]
    fn only_a_matching_live_key_is_granted_and_refusals_are_counted() {
        let table = RegionTable::default();
        let (view, fd) = SharedRegion::create(64).unwrap();
        let cap = [7u8; 16];
        let id = table.insert((fd, Arc::new(view)), cap, Rights::Read, 64);
        let here = (9, 2);
        assert!(table
            .grant(&key_for(id, cap, Rights::Read), here, (1, 1))
            .is_ok());
        let mut forged = cap;
        forged[15] ^= 1;
        let refusals = [
            (key_for(id, forged, Rights::Read), GrantStatus::UnknownKey),
            (key_for(id + 1, cap, Rights::Read), GrantStatus::UnknownKey),
            (
                KeyRepr {
                    job_id: 10,
                    ..key_for(id, cap, Rights::Read)
                },
                GrantStatus::UnknownKey,
            ),
            (
                KeyRepr {
                    len: 65,
                    ..key_for(id, cap, Rights::Read)
                },
                GrantStatus::UnknownKey,
            ),
            (
                key_for(id, cap, Rights::ReadWrite),
                GrantStatus::WrongRights,
            ),
        ];
        for (key, status) in refusals {
            assert_eq!(
                table.grant(&key, here, (1, 1)).err(),
                Some(status),
                "{key:?}"
            );
        }
        table.remove(id);
        assert_eq!(
            table
                .grant(&key_for(id, cap, Rights::Read), here, (1, 1))
                .err(),
            Some(GrantStatus::UnknownKey),
            "a revoked region is no longer granted"
        );
        let stats = table.stats();
        assert_eq!((stats.keys_granted, stats.keys_refused), (1, 6));
        assert_eq!(stats.regions_registered, 1);
        assert!(constant_time_eq(&cap, &cap) && !constant_time_eq(&cap, &forged));
    }
}
