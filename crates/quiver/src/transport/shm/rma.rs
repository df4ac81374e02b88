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
//!
//! Memory a caller lent (`Context::register`) is no memory file: its grant carries the
//! owner's address and a control file instead ([`CallerMapping`]). Puts and gets are one
//! cross-memory copy each (`process_vm_writev`/`readv`, the target's pidfd looked at
//! first, the copy counted in the control file's in-use slot so that the owner's
//! revocation waits for it); atomics, and every operation once cross-memory attach is
//! refused (a container's seccomp profile, the ptrace scope), go to the target's progress
//! engine over a unix socket pair whose other end rode with the key request: the request
//! stream of the software path (`transport::rma_stream`, as over tcp), served by whichever
//! endpoint of the target calls into quiver.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use quiver_transport::caller::CallerControl;
use quiver_transport::region::SharedRegion;
use quiver_transport::sys;
use quiver_wire::rma::{
    CallerGrantRepr, GrantRepr, GrantStatus, KeyRepr, CALLER_GRANT_LEN, GRANT_LEN,
};

use super::connect::handshake;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::liveness::PeerProcess;
use crate::transport::local::LocalRank;
use crate::transport::retry::Attempt;
use crate::transport::rma_ops::{refused, RmaOp, RMA_PORT};
use crate::transport::rma_stream::StreamRma;

/// The regions of one peer an edge mapped, by key.
#[derive(Debug, Default)]
pub(crate) struct ShmRma {
    mapped: HashMap<KeyRepr, Mapped>,
    /// The memory file of the last operation's key (the whole key, compared field by
    /// field): a key used again, as a put-latency loop or a run of atomics does, skips
    /// hashing the 48-byte key (some 40 of an 8-byte put's 70 ns). It holds what `mapped`
    /// holds for that key, and leaves with it.
    last: Option<(KeyRepr, Arc<SharedRegion>)>,
}

/// How an edge reaches one region of its peer.
#[derive(Debug)]
enum Mapped {
    /// A memory file quiver allocated, mapped here.
    File(Arc<SharedRegion>),
    /// Memory the peer's caller lent.
    Caller(Box<CallerMapping>),
}

/// Memory a peer's caller lent, as an initiator reaches it (module docs).
#[derive(Debug)]
struct CallerMapping {
    /// The revoked word and this process's in-use slot.
    control: CallerControl,
    /// The memory's first byte in the target's address space.
    addr: u64,
    /// The target's process (its pid for the copies; its pidfd says it still is that
    /// process).
    process: PeerProcess,
    /// Whether cross-memory copies still work (false once refused: the software path).
    cross_memory: bool,
    /// The request stream to the target's progress engine.
    software: StreamRma,
}

/// What one cross-memory copy came to.
enum Copied {
    Done,
    /// Refused by the kernel (seccomp, ptrace scope): use the software path.
    Refused,
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
        if !matches!(&self.last, Some((last, _)) if last == key) {
            let mapped = match self.mapped.entry(*key) {
                Entry::Occupied(mapped) => mapped.into_mut(),
                Entry::Vacant(slot) => slot.insert(fetch(local, src, peer, key)?),
            };
            match mapped {
                Mapped::File(region) => self.last = Some((*key, Arc::clone(region))),
                Mapped::Caller(caller) => {
                    let outcome = caller.apply(local, (src, peer), key, op);
                    if matches!(outcome, Err(Error::RmaRevoked { .. })) {
                        self.mapped.remove(key);
                    }
                    return outcome;
                }
            }
        }
        let Some((_, region)) = &self.last else {
            unreachable!("the key's memory file was cached above")
        };
        if region.is_revoked() {
            self.mapped.remove(key);
            self.last = None;
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

impl CallerMapping {
    /// Applies `op` (checked against `key` by the caller): a put or get by one
    /// cross-memory copy while that works, anything else through the software path.
    fn apply(
        &mut self,
        local: &LocalRank,
        (src, peer): (Addr, Addr),
        key: &KeyRepr,
        mut op: RmaOp<'_>,
    ) -> Result<u64> {
        let revoked = || {
            let error = Error::RmaRevoked {
                rank: peer.rank,
                region: key.region,
            };
            refused(local, error)
        };
        if self.control.is_revoked() {
            return Err(revoked());
        }
        if self.cross_memory && matches!(op, RmaOp::Put { .. } | RmaOp::Get { .. }) {
            match self.copy(peer, &mut op) {
                Ok(Some(Copied::Done)) => return Ok(0),
                Ok(Some(Copied::Refused)) => {
                    self.cross_memory = false;
                    local.regions.cross_memory_refused(peer.rank);
                }
                Ok(None) => return Err(revoked()),
                Err(e) => return Err(e),
            }
        }
        self.software.apply(local, (src, peer), key, op)
    }

    /// One cross-memory copy of a put or get, its slot held (None: revoked).
    fn copy(&self, peer: Addr, op: &mut RmaOp<'_>) -> Result<Option<Copied>> {
        let dead = || Error::PeerDead {
            peer,
            during: "during a one-sided operation",
        };
        // The pid names the target only while its pidfd says it lives (a copy to a reused
        // pid must not happen): looked at before, and for a get after.
        if self.process.exited() {
            return Err(dead());
        }
        let pid = self.process.pid;
        let (span, copied) = match op {
            RmaOp::Put { data, offset } => {
                let remote = self.addr.wrapping_add(*offset);
                let local_addr = data.as_ptr() as u64;
                let len = data.len();
                let copied = self
                    .control
                    .in_use(|| sys::process_vm_write(pid, local_addr, remote, len));
                (len, copied)
            }
            RmaOp::Get { buf, offset } => {
                let remote = self.addr.wrapping_add(*offset);
                let len = buf.len();
                let copied = self
                    .control
                    .in_use(|| sys::process_vm_read(pid, buf, remote));
                (len, copied)
            }
            _ => unreachable!("only puts and gets are copied"),
        };
        let Some(copied) = copied else {
            return Ok(None);
        };
        if self.process.exited() {
            return Err(dead());
        }
        match copied {
            Ok(n) if n == span => Ok(Some(Copied::Done)),
            Ok(n) => Err(Error::Corrupt {
                peer,
                detail: format!("a cross-memory copy of {span} bytes into lent memory moved {n}"),
            }),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EACCES | libc::ENOSYS)
                ) =>
            {
                Ok(Some(Copied::Refused))
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(dead()),
            Err(e) => Err(Error::io(format!("a cross-memory copy to {peer}"), e)),
        }
    }
}

/// Asks `peer`'s listener for the region `key` names and maps it (or, for memory its
/// caller lent, maps the control file and keeps the request stream).
fn fetch(local: &LocalRank, src: Addr, peer: Addr, key: &KeyRepr) -> Result<Mapped> {
    let service = Addr::new(peer.rank, RMA_PORT);
    let sock = handshake(local, src, service, &[0u8; 16]).map_err(|attempt| match attempt {
        Attempt::Fail(error) => error,
        Attempt::Retry(reason) | Attempt::Silent(_, reason) => Error::Refused { peer, reason },
    })?;
    // One end of a socket pair rides with the key: the target adopts it as a request
    // stream if the key names memory its caller lent, and closes it otherwise.
    let (ours, theirs) =
        sys::stream_pair().map_err(|e| Error::io("making a one-sided request stream", e))?;
    sys::send_with_fds(&sock, &key.emit(), &[theirs.as_raw_fd()])
        .map_err(|e| Error::io(format!("sending a key to {peer}"), e))?;
    drop(theirs);
    let mut buf = [0u8; GRANT_LEN + 1];
    let (n, fds) = sys::recv_with_fds(&sock, &mut buf)
        .map_err(|e| Error::io(format!("receiving the grant of {peer}"), e))?;
    let corrupt = |detail: String| Error::Corrupt {
        peer,
        detail: format!("region grant: {detail}"),
    };
    let grant = GrantRepr::parse(&buf[..n]).map_err(|e| corrupt(e.to_string()))?;
    let reason = match grant.status {
        GrantStatus::Granted | GrantStatus::GrantedCaller => None,
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
    if grant.status == GrantStatus::GrantedCaller {
        return caller_mapping(&sock, (fd, ours), peer).map(|m| Mapped::Caller(Box::new(m)));
    }
    let len = usize::try_from(key.len).map_err(|_| corrupt("a region too large to map".into()))?;
    SharedRegion::attach(&fd, len, key.rights.writable())
        .map(|region| Mapped::File(Arc::new(region)))
        .map_err(|e| corrupt(e.to_string()))
}

/// The rest of a grant of memory `peer`'s caller lent, on `sock`: its control file
/// `control` mapped, the request stream `stream` kept.
fn caller_mapping(
    sock: &OwnedFd,
    (control, stream): (OwnedFd, OwnedFd),
    peer: Addr,
) -> Result<CallerMapping> {
    let corrupt = |detail: String| Error::Corrupt {
        peer,
        detail: format!("region grant: {detail}"),
    };
    let mut buf = [0u8; CALLER_GRANT_LEN + 1];
    let (n, _) = sys::recv_with_fds(sock, &mut buf)
        .map_err(|e| Error::io(format!("receiving the grant of {peer}"), e))?;
    let grant = CallerGrantRepr::parse(&buf[..n]).map_err(|e| corrupt(e.to_string()))?;
    let control =
        CallerControl::attach(&control, grant.slot).map_err(|e| corrupt(e.to_string()))?;
    // The kernel's word for who answered: the target's process.
    let pid = sys::peer_pid(sock).map_err(|e| Error::io(format!("asking who {peer} is"), e))?;
    let process = PeerProcess::open(pid).ok_or(Error::PeerDead {
        peer,
        during: "while mapping a region",
    })?;
    Ok(CallerMapping {
        control,
        addr: grant.addr,
        software: StreamRma::over("shm", TcpStream::from(stream), peer, Some(pid)),
        process,
        cross_memory: true,
    })
}
