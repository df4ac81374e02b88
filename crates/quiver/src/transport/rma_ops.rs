//! The one-sided operations a transport applies for the endpoint ([`RmaOp`]), the errors
//! every transport reports the same way when one is refused (before it touches its
//! target, or by the target: [`reply_error`]), what the network transports' software path
//! shares on the initiator's side (the request of an operation, [`request_for`]; waiting
//! while serving this rank's own requests, [`Patience`]), and the reserved port
//! [`RMA_PORT`] their connections ask for.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use quiver_wire::rma::KeyRepr;
use quiver_wire::rma_request::{ReplyRepr, ReplyStatus, RequestOp, RequestRepr};

use crate::addr::Addr;
use crate::error::Error;
use crate::transport::local::LocalRank;

/// The port a one-sided connection asks for in the job-key handshake (a key request over
/// shm, a request stream over tcp, a request connection over datagrams): no endpoint can
/// open it.
pub(crate) const RMA_PORT: u16 = u16::MAX;

/// One operation on the region a remote key names, at a byte offset of that region.
#[derive(Debug)]
pub(crate) enum RmaOp<'a> {
    /// Copy `data` into the region.
    Put { data: &'a [u8], offset: u64 },
    /// Copy the region's bytes into `buf`.
    Get { buf: &'a mut [u8], offset: u64 },
    /// Add to the 64-bit word; the word before is the result.
    FetchAdd { offset: u64, value: u64 },
    /// Replace the word if it holds `expected`; the word before is the result.
    CompareSwap {
        offset: u64,
        expected: u64,
        new: u64,
    },
    /// Replace the word; the word before is the result.
    Swap { offset: u64, value: u64 },
}

impl RmaOp<'_> {
    /// The operation's name in errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            RmaOp::Put { .. } => "put",
            RmaOp::Get { .. } => "get",
            RmaOp::FetchAdd { .. } => "fetch_add",
            RmaOp::CompareSwap { .. } => "compare_swap",
            RmaOp::Swap { .. } => "swap",
        }
    }

    /// Whether the operation writes the region.
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, RmaOp::Get { .. })
    }

    /// The bytes of the region the operation touches: offset and length.
    pub(crate) fn span(&self) -> (u64, u64) {
        match self {
            RmaOp::Put { data, offset } => (*offset, data.len() as u64),
            RmaOp::Get { buf, offset } => (*offset, buf.len() as u64),
            RmaOp::FetchAdd { offset, .. }
            | RmaOp::CompareSwap { offset, .. }
            | RmaOp::Swap { offset, .. } => (*offset, 8),
        }
    }

    /// Whether the operation is an atomic on a word.
    pub(crate) fn is_atomic(&self) -> bool {
        !matches!(self, RmaOp::Put { .. } | RmaOp::Get { .. })
    }
}

/// A posted operation: its kind, offset and buffer (a put's data, a get's buffer; empty
/// for an atomic), owned until it completes.
#[derive(Debug)]
pub(crate) struct PostedOp {
    pub(crate) kind: PostKind,
    pub(crate) offset: u64,
    pub(crate) buf: Vec<u8>,
}

/// The kind of a [`PostedOp`], with an atomic's operands.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PostKind {
    Put,
    Get,
    FetchAdd(u64),
    CompareSwap(u64, u64),
    Swap(u64),
}

impl PostedOp {
    /// The operation, borrowing the buffer.
    pub(crate) fn as_op(&mut self) -> RmaOp<'_> {
        let offset = self.offset;
        match self.kind {
            PostKind::Put => RmaOp::Put {
                data: &self.buf,
                offset,
            },
            PostKind::Get => RmaOp::Get {
                buf: &mut self.buf,
                offset,
            },
            PostKind::FetchAdd(value) => RmaOp::FetchAdd { offset, value },
            PostKind::CompareSwap(expected, new) => RmaOp::CompareSwap {
                offset,
                expected,
                new,
            },
            PostKind::Swap(value) => RmaOp::Swap { offset, value },
        }
    }
}

/// The request that asks a target's software path for `op` on the region `key` names.
pub(crate) fn request_for(op: &RmaOp<'_>, key: &KeyRepr, seq: u32) -> RequestRepr {
    let (offset, len) = op.span();
    let (op, a, b) = match op {
        RmaOp::Put { .. } => (RequestOp::Put, 0, 0),
        RmaOp::Get { .. } => (RequestOp::Get, 0, 0),
        RmaOp::FetchAdd { value, .. } => (RequestOp::FetchAdd, *value, 0),
        RmaOp::CompareSwap { expected, new, .. } => (RequestOp::CompareSwap, *expected, *new),
        RmaOp::Swap { value, .. } => (RequestOp::Swap, *value, 0),
    };
    RequestRepr {
        op,
        seq,
        offset,
        len,
        a,
        b,
        key: key.emit(),
    }
}

/// The request that asks a target's software path to answer once every earlier request of
/// the connection is applied.
pub(crate) fn flush_request(seq: u32) -> RequestRepr {
    RequestRepr {
        op: RequestOp::Flush,
        seq,
        offset: 0,
        len: 0,
        a: 0,
        b: 0,
        key: [0; quiver_wire::rma::KEY_LEN],
    }
}

/// What a software-path request of `op` sends after its header (a put's data) and where
/// its reply's data goes (a get's buffer).
pub(crate) fn request_io<'a>(op: &'a mut RmaOp<'_>) -> (&'a [u8], Option<&'a mut [u8]>) {
    match op {
        RmaOp::Put { data, .. } => (data, None),
        RmaOp::Get { buf, .. } => (&[], Some(&mut **buf)),
        _ => (&[], None),
    }
}

/// The outcome of `op` that `reply` reports: the word an atomic fetched (0 for a put or
/// a get), or the typed error of the status the target refused it with.
pub(crate) fn reply_outcome(
    local: &LocalRank,
    peer: Addr,
    key: &KeyRepr,
    op: &RmaOp<'_>,
    reply: &ReplyRepr,
) -> Result<u64, Error> {
    match reply.status {
        ReplyStatus::Done => Ok(reply.value),
        status => Err(reply_error(local, peer, key, op, status)),
    }
}

/// What the errors of an operation name of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpInfo {
    pub(crate) name: &'static str,
    pub(crate) writes: bool,
    pub(crate) atomic: bool,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl OpInfo {
    /// What the errors of `op` name of it.
    pub(crate) fn of(op: &RmaOp<'_>) -> OpInfo {
        let (offset, len) = op.span();
        OpInfo {
            name: op.name(),
            writes: op.writes(),
            atomic: op.is_atomic(),
            offset,
            len,
        }
    }
}

/// The error of a request the target refused with `status` (counted in `local`'s
/// statistics): the same errors the initiator's own checks and the shm grants give.
pub(crate) fn reply_error(
    local: &LocalRank,
    peer: Addr,
    key: &KeyRepr,
    op: &RmaOp<'_>,
    status: ReplyStatus,
) -> Error {
    reply_error_for(local, peer, key, OpInfo::of(op), status)
}

/// [`reply_error`] of an operation described by `info`.
pub(crate) fn reply_error_for(
    local: &LocalRank,
    peer: Addr,
    key: &KeyRepr,
    info: OpInfo,
    status: ReplyStatus,
) -> Error {
    let (offset, len) = (info.offset, info.len);
    let error = match status {
        ReplyStatus::Revoked => Error::RmaRevoked {
            rank: peer.rank,
            region: key.region,
        },
        ReplyStatus::WrongRights if !info.writes || key.rights.writable() => Error::RmaKeyRefused {
            rank: peer.rank,
            reason: "the key asks for writing, the region is read-only".into(),
        },
        ReplyStatus::WrongRights => Error::RmaRights {
            operation: info.name,
            rights: key.rights.name(),
        },
        ReplyStatus::OutOfBounds => Error::RmaOutOfBounds {
            operation: info.name,
            offset,
            len,
            region_len: key.len,
        },
        ReplyStatus::Misaligned => Error::RmaMisaligned { offset },
        ReplyStatus::UnknownKey | ReplyStatus::Done => Error::RmaKeyRefused {
            rank: peer.rank,
            reason: "no live region of it matches the key (forged, revoked, or of another job)"
                .into(),
        },
    };
    refused(local, error)
}

/// Checks `op` against what `key` says of its region (bounds, rights, alignment) before
/// any transport touches the target: the typed error, counted in `local`'s statistics.
pub(crate) fn check(local: &LocalRank, key: &KeyRepr, op: &RmaOp<'_>) -> Result<(), Error> {
    let (offset, len) = op.span();
    let error = if offset.checked_add(len).is_none_or(|end| end > key.len) {
        Error::RmaOutOfBounds {
            operation: op.name(),
            offset,
            len,
            region_len: key.len,
        }
    } else if op.writes() && !key.rights.writable() {
        Error::RmaRights {
            operation: op.name(),
            rights: key.rights.name(),
        }
    } else if op.is_atomic() && !offset.is_multiple_of(8) {
        Error::RmaMisaligned { offset }
    } else {
        return Ok(());
    };
    Err(refused(local, error))
}

/// Counts `error`, a refused one-sided operation of this rank, and returns it.
pub(crate) fn refused(local: &LocalRank, error: Error) -> Error {
    local.regions.access_refused(error.to_string());
    error
}

/// Spins this many rounds (each yielding the CPU) before a waiting one-sided operation
/// sleeps in `poll`.
const SPIN_ROUNDS: u32 = 64;

/// The longest sleep of a waiting one-sided operation between two looks.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// The waiting of one one-sided operation over a network transport: while it waits for its
/// socket it serves the requests peers send this rank (two ranks may be waiting on each
/// other's one-sided operations), spins a little, then sleeps in `poll` on its socket and
/// the request connections, within the call's timeout (`QUIVER_TIMEOUT_MS`).
pub(crate) struct Patience {
    spins: u32,
    deadline: Option<Instant>,
    fds: Vec<libc::pollfd>,
    /// The caller polls the datagram engine itself before each wait (the datagram
    /// transports' operations).
    caller_polls_engine: bool,
}

impl Patience {
    /// The waiting of one operation under `local`'s settings.
    pub(crate) fn new(local: &LocalRank) -> Patience {
        Patience {
            spins: 0,
            deadline: local.config.op_timeout.map(|t| Instant::now() + t),
            fds: Vec::new(),
            caller_polls_engine: false,
        }
    }

    /// [`Patience::new`] for a caller that polls the datagram engine itself before each
    /// wait.
    pub(crate) fn polling_engine(local: &LocalRank) -> Patience {
        Patience {
            caller_polls_engine: true,
            ..Patience::new(local)
        }
    }

    /// Whether the next [`wait`](Self::wait) sleeps (the spinning is over): the moment for
    /// a look that costs a system call, such as a peer's liveness.
    pub(crate) fn will_sleep(&self) -> bool {
        self.spins >= SPIN_ROUNDS
    }

    /// Waits a little for `fd` to become ready for `events` (none: only for the time, the
    /// datagram engine's descriptor and the request connections), after the rank's
    /// meanwhile (`LocalRank::meanwhile`: this rank's request connections served; the
    /// engine polled before a sleep, whose descriptor it watches, unless the caller polls
    /// it).
    ///
    /// # Errors
    /// [`Error::Timeout`] past the call's timeout.
    pub(crate) fn wait(
        &mut self,
        local: &LocalRank,
        fd: Option<(RawFd, i16)>,
    ) -> Result<(), Error> {
        // While spinning the engine is left alone (a reply over tcp should not wait behind
        // a datagram poll each round); before a sleep it is polled, as its descriptor
        // joins the sleep.
        local.meanwhile(self.caller_polls_engine || self.spins < SPIN_ROUNDS);
        if self.spins < SPIN_ROUNDS {
            self.spins += 1;
            std::thread::yield_now();
            return Ok(());
        }
        let now = Instant::now();
        let mut slice = SLEEP_SLICE;
        if let Some(deadline) = self.deadline {
            if now >= deadline {
                return Err(Error::Timeout {
                    what: "waiting for a one-sided operation",
                    millis: local.config.op_timeout.map_or(0, |t| t.as_millis() as u64),
                });
            }
            slice = slice.min(deadline - now);
        }
        self.fds.clear();
        if let Some((fd, events)) = fd {
            self.fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
        }
        if let Some(engine) = &local.dgram {
            self.fds.push(libc::pollfd {
                fd: engine.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            slice = slice.min(engine.timeout_within(slice));
        }
        local.rma.wake_fds(&mut self.fds);
        let _ = quiver_transport::sys::poll(&mut self.fds, Some(slice));
        // Spin again after a wake-up: the answer usually follows.
        self.spins = SPIN_ROUNDS / 2;
        Ok(())
    }
}
