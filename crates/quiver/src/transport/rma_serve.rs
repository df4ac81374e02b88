//! The target's side of one-sided operations over the network transports (the software
//! path): the connections peers opened to this rank for one-sided requests
//! ([`RmaService`]), served by whichever endpoint of the rank calls into quiver (a blocking
//! call, `progress`, a receive), and the check every request passes before it touches a
//! region ([`check_request`]).
//!
//! A request names its region by the remote key it carries; the key is checked against
//! the rank's live regions (`transport::regions`, every field, the capability in constant
//! time), then the operation against the region itself: its bounds, its rights and the
//! key's, an atomic's alignment. Only then does the transport move bytes, straight between
//! its socket and the region. A refusal is a reply status (the initiator's typed error),
//! counted here.
//!
//! Each kind of request connection implements [`Served`] (a byte stream, tcp's or shm's
//! socket pair for lent memory: `rma_stream`; datagrams: `dgram::rma`); this module knows
//! none of them.

use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use quiver_transport::region::AccessError;
use quiver_wire::rma::KeyRepr;
use quiver_wire::rma_request::{ReplyRepr, ReplyStatus, RequestOp, RequestRepr};

use super::region_view::RegionView;
use super::regions::RegionTable;

/// Who this rank is, for checking keys: its job id and rank.
pub(crate) type Identity = (u64, u32);

/// A connection a peer opened to this rank for one-sided requests, as its transport
/// serves it.
pub(crate) trait Served: Send + Debug {
    /// Applies what the connection has now, never waiting. `Err(why)` when the connection
    /// ended (the peer closed it, died, or broke the protocol): it is dropped.
    fn serve(&mut self, regions: &RegionTable, me: Identity) -> Result<(), String>;

    /// The descriptor and events a sleeping call should wake up for (none: the datagram
    /// engine's descriptor, which every sleeping call watches anyway).
    fn wake(&self) -> Option<libc::pollfd>;
}

/// The connections peers opened to this rank for one-sided requests (module docs).
#[derive(Debug, Default)]
pub(crate) struct RmaService {
    served: Mutex<Vec<Box<dyn Served>>>,
    /// Connections adopted and not yet moved to `served`: a leaf lock, never held while
    /// another is taken (the datagram engine adopts with its own lock held, and serving
    /// takes the engine's lock with `served` held).
    incoming: Mutex<Vec<Box<dyn Served>>>,
    /// How many connections `served` and `incoming` hold: the endpoints' one relaxed load
    /// when there are none.
    count: AtomicUsize,
}

impl RmaService {
    /// Takes a new connection to serve.
    pub(crate) fn adopt(&self, served: Box<dyn Served>) {
        let mut incoming = self.incoming.lock().unwrap_or_else(|p| p.into_inner());
        incoming.push(served);
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether any connection is served (one relaxed load).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Serves every connection once, unless another thread of the rank is doing so right
    /// now (it serves them all). Connections that ended are dropped.
    #[inline]
    pub(crate) fn serve(&self, regions: &RegionTable, me: Identity) {
        if self.active() {
            self.serve_all(regions, me);
        }
    }

    fn serve_all(&self, regions: &RegionTable, me: Identity) {
        let Ok(mut list) = self.served.try_lock() else {
            return;
        };
        self.take_incoming(&mut list);
        let before = list.len();
        list.retain_mut(|served| match served.serve(regions, me) {
            Ok(()) => true,
            Err(why) => {
                tracing::debug!(reason = %why, "a one-sided request connection ended");
                false
            }
        });
        self.count.fetch_sub(before - list.len(), Ordering::AcqRel);
    }

    /// Moves the adopted connections into `list`.
    fn take_incoming(&self, list: &mut Vec<Box<dyn Served>>) {
        let mut incoming = self.incoming.lock().unwrap_or_else(|p| p.into_inner());
        list.append(&mut incoming);
    }

    /// Adds the descriptors a sleeping call should also wake up for.
    pub(crate) fn wake_fds(&self, fds: &mut Vec<libc::pollfd>) {
        if self.active() {
            let mut list = self.lock();
            self.take_incoming(&mut list);
            fds.extend(list.iter().filter_map(|s| s.wake()));
        }
    }

    /// Drops every connection (the context closes).
    pub(crate) fn clear(&self) {
        let mut list = self.lock();
        self.take_incoming(&mut list);
        let dropped = list.len();
        list.clear();
        self.count.fetch_sub(dropped, Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Box<dyn Served>>> {
        // A panic while serving leaves each connection as consistent as a dropped one.
        self.served.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the target does with a request that passed [`check_request`].
#[derive(Debug)]
pub(crate) enum Checked {
    /// Refused (counted): the reply's status. A put's data is read and dropped.
    Refused(ReplyStatus),
    /// A put or get: move the bytes between the socket and `region` at this offset.
    Bytes(RegionView, usize),
    /// Applied (an atomic, or a flush): the reply's value.
    Word(u64),
}

/// What serving a checked request does next: the same decision over every transport,
/// which then moves the bytes its own way.
#[derive(Debug)]
pub(crate) enum Next {
    /// Take a put's `len` bytes of data: into the region at its offset, or (refused:
    /// `None`) read and dropped; then send `reply`.
    PutData {
        into: Option<(RegionView, usize)>,
        len: u64,
        reply: ReplyRepr,
    },
    /// Send `reply`, followed by a get's bytes (`(region, offset, length)`).
    Reply {
        reply: ReplyRepr,
        data: Option<(RegionView, usize, usize)>,
    },
}

/// The next step for `request`, checked as `checked` ([`take_request`]).
pub(crate) fn next_step(request: &RequestRepr, checked: Checked) -> Next {
    let reply = ReplyRepr {
        status: ReplyStatus::Done,
        seq: request.seq,
        value: 0,
        len: 0,
    };
    match (request.op, checked) {
        (RequestOp::Put, Checked::Bytes(region, at)) => Next::PutData {
            into: Some((region, at)),
            len: request.len,
            reply,
        },
        (RequestOp::Put, Checked::Refused(status)) => Next::PutData {
            into: None,
            len: request.len,
            reply: ReplyRepr { status, ..reply },
        },
        // In bounds of the region once checked: the length fits a usize.
        (_, Checked::Bytes(region, at)) => Next::Reply {
            reply: ReplyRepr {
                len: request.len,
                ..reply
            },
            data: Some((region, at, request.len as usize)),
        },
        (_, Checked::Refused(status)) => Next::Reply {
            reply: ReplyRepr { status, ..reply },
            data: None,
        },
        (_, Checked::Word(value)) => Next::Reply {
            reply: ReplyRepr { value, ..reply },
            data: None,
        },
    }
}

/// Parses the request header `head` from rank `peer` and checks it ([`check_request`]).
/// `Err(why)`: not a request (counted): the connection is dropped.
pub(crate) fn take_request(
    regions: &RegionTable,
    me: Identity,
    peer: u32,
    head: &[u8],
) -> Result<(RequestRepr, Checked), String> {
    let request = RequestRepr::parse(head).map_err(|e| {
        let why = format!("not a request ({e})");
        regions.request_refused(peer, 0, &why);
        why
    })?;
    let checked = check_request(regions, me, peer, &request);
    Ok((request, checked))
}

/// Checks `request` from rank `peer` against this rank's live regions and applies it if
/// it is an atomic or a flush (module docs). Refusals are counted in `regions`' statistics.
pub(crate) fn check_request(
    regions: &RegionTable,
    me: Identity,
    peer: u32,
    request: &RequestRepr,
) -> Checked {
    if request.op == RequestOp::Flush {
        return Checked::Word(0);
    }
    let key = match KeyRepr::parse(&request.key) {
        Ok(key) => key,
        Err(e) => {
            regions.key_refused(peer, 0, &format!("not a key ({e})"));
            return Checked::Refused(ReplyStatus::UnknownKey);
        }
    };
    let region = match regions.access(&key, me, peer) {
        Ok(region) => region,
        Err(status) => return Checked::Refused(status),
    };
    let refuse = |status: ReplyStatus, why: &str| {
        regions.request_refused(peer, key.region, why);
        Checked::Refused(status)
    };
    let (offset, len) = (request.offset, request.len);
    let end = offset.checked_add(len);
    if end.is_none_or(|end| end > region.len() as u64) {
        return refuse(ReplyStatus::OutOfBounds, "outside the region");
    }
    if request.op.writes() && !key.rights.writable() {
        return refuse(ReplyStatus::WrongRights, "a write with a read-only key");
    }
    if request.op.is_atomic() && !offset.is_multiple_of(8) {
        return refuse(ReplyStatus::Misaligned, "a misaligned atomic");
    }
    // In bounds of a mapped region: fits a usize.
    let at = offset as usize;
    let applied = match request.op {
        RequestOp::Put | RequestOp::Get => return Checked::Bytes(region, at),
        RequestOp::FetchAdd => region.fetch_add(at, request.a),
        RequestOp::CompareSwap => region.compare_swap(at, request.a, request.b),
        RequestOp::Swap => region.swap(at, request.a),
        RequestOp::Flush => Ok(0),
    };
    match applied {
        Ok(word) => Checked::Word(word),
        // Lent memory whose scope ended between the table's check and the access.
        Err(AccessError::Revoked) => Checked::Refused(ReplyStatus::Revoked),
        // Lent memory may sit at an address that is not 8-aligned.
        Err(AccessError::Misaligned) => refuse(ReplyStatus::Misaligned, "a misaligned atomic"),
        // The checks above exclude every other refusal of the region's own.
        Err(_) => refuse(ReplyStatus::OutOfBounds, "refused by the region"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use quiver_transport::region::SharedRegion;
    use quiver_wire::rma::{Rights, KEY_LEN};

    use super::*;

    const ME: Identity = (9, 2);

    /// A table with one read-write and one read-only region of 64 bytes; their keys.
    fn table() -> (RegionTable, KeyRepr, KeyRepr) {
        let table = RegionTable::default();
        let mut keys = Vec::new();
        for (rights, cap) in [(Rights::ReadWrite, [1u8; 16]), (Rights::Read, [2u8; 16])] {
            let (view, fd) = SharedRegion::create(64).unwrap();
            let region = table.insert((fd, Arc::new(view)), cap, rights, 64);
            keys.push(KeyRepr {
                rights,
                rank: ME.1,
                job_id: ME.0,
                region,
                len: 64,
                capability: cap,
            });
        }
        (table, keys[0], keys[1])
    }

    fn request(op: RequestOp, key: &KeyRepr, offset: u64, len: u64) -> RequestRepr {
        RequestRepr {
            op,
            seq: 1,
            offset,
            len,
            a: 0,
            b: 0,
            key: key.emit(),
        }
    }

    fn status(checked: Checked) -> Option<ReplyStatus> {
        match checked {
            Checked::Refused(status) => Some(status),
            _ => None,
        }
    }

    /// The target checks every request itself, whatever the initiator checked: a peer
    /// that skips quiver's own checks gets refusals, counted, and nothing is touched.
    #[test]
    fn the_target_refuses_what_the_region_does_not_allow_and_counts_it() {
        let (table, rw, ro) = table();
        let check = |r: &RequestRepr| status(check_request(&table, ME, 1, r));
        assert_eq!(
            check(&request(RequestOp::Put, &rw, 60, 5)),
            Some(ReplyStatus::OutOfBounds)
        );
        assert_eq!(
            check(&request(RequestOp::Get, &rw, u64::MAX, 2)),
            Some(ReplyStatus::OutOfBounds)
        );
        assert_eq!(
            check(&request(RequestOp::FetchAdd, &rw, 4, 8)),
            Some(ReplyStatus::Misaligned)
        );
        let ro_write = KeyRepr {
            rights: Rights::Read,
            ..rw
        };
        assert_eq!(
            check(&request(RequestOp::Swap, &ro_write, 0, 8)),
            Some(ReplyStatus::WrongRights)
        );
        assert_eq!(table.stats().requests_refused, 4);
        // Key refusals: a read-write claim on the read-only region, a forged capability,
        // bytes that are not a key, and a dropped region.
        let claim = KeyRepr {
            rights: Rights::ReadWrite,
            ..ro
        };
        assert_eq!(
            check(&request(RequestOp::Put, &claim, 0, 1)),
            Some(ReplyStatus::WrongRights)
        );
        let forged = KeyRepr {
            capability: [7; 16],
            ..rw
        };
        assert_eq!(
            check(&request(RequestOp::Get, &forged, 0, 1)),
            Some(ReplyStatus::UnknownKey)
        );
        let mut garbage = request(RequestOp::Get, &rw, 0, 1);
        garbage.key = [0x55; KEY_LEN];
        assert_eq!(check(&garbage), Some(ReplyStatus::UnknownKey));
        table.remove(rw.region);
        assert_eq!(
            check(&request(RequestOp::Get, &rw, 0, 1)),
            Some(ReplyStatus::Revoked)
        );
        let stats = table.stats();
        assert_eq!((stats.keys_refused, stats.requests_refused), (4, 4));
    }

    #[test]
    fn atomics_and_flushes_are_applied_at_once_and_bytes_are_handed_back() {
        let (table, rw, ro) = table();
        let mut add = request(RequestOp::FetchAdd, &rw, 8, 8);
        add.a = 5;
        assert!(matches!(
            check_request(&table, ME, 1, &add),
            Checked::Word(0)
        ));
        assert!(matches!(
            check_request(&table, ME, 1, &add),
            Checked::Word(5)
        ));
        let mut cas = request(RequestOp::CompareSwap, &rw, 8, 8);
        (cas.a, cas.b) = (10, 1);
        assert!(matches!(
            check_request(&table, ME, 1, &cas),
            Checked::Word(10)
        ));
        let flush = RequestRepr {
            op: RequestOp::Flush,
            seq: 2,
            offset: 0,
            len: 0,
            a: 0,
            b: 0,
            key: [0; KEY_LEN],
        };
        assert!(matches!(
            check_request(&table, ME, 1, &flush),
            Checked::Word(0)
        ));
        match check_request(&table, ME, 1, &request(RequestOp::Get, &ro, 16, 48)) {
            Checked::Bytes(region, at) => assert_eq!((region.len(), at), (64, 16)),
            other => panic!("{other:?}"),
        }
        let stats = table.stats();
        assert_eq!((stats.keys_refused, stats.requests_refused), (0, 0));
    }
}
