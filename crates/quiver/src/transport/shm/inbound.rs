//! The receiving side of a shared-memory edge ([`ShmIn`]): the peer writes the ring, this
//! process reads it. A receive takes a short or eager message out of the ring (waiting for
//! the rest of one whose first fragment arrived, when it may wait), or pulls a rendezvous
//! message out of the sender's memory ([`super::rendezvous`]). A peer that exits is
//! noticed through its pidfd: what it wrote is still delivered, then its death is reported
//! once; a ring that fails a check becomes [`Error::Corrupt`] on this edge only.
//!
//! While a blocking send of this endpoint waits, a sender asleep in a blocking send on
//! this edge has its messages taken ahead ([`ShmIn::read_ahead`]) into buffers of the edge,
//! at most `read_ahead_bytes`; receives deliver them first, in order. A message beyond
//! that bound stays in the ring, and the waiting send reports the send-send deadlock.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use quiver_transport::ring::{Consumer, Kind, Record, RingError};
use quiver_transport::sys;

use super::eager::all_fragments_present;
use super::rendezvous::{pull, SPLIT_ALIGN, SPLIT_MIN_BYTES};
use crate::addr::Addr;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
use crate::transport::dest::Dest;
use crate::transport::failure::corrupt_detail;
use crate::transport::inbound_state::{InboundState, PeerEnd};
use crate::transport::liveness::{FreezeWatch, Looks};
use crate::transport::local::LocalRank;
use crate::transport::registry::NewInbound;
use crate::transport::wait::Wait;
use crate::transport::wire_tag::WireTag;

/// The receiving side of a shared-memory edge (module docs).
#[derive(Debug)]
pub(crate) struct ShmIn {
    pub(crate) peer: Addr,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    freeze: FreezeWatch,
    ring: Consumer,
    pub(crate) state: InboundState,
    /// Whether we can read the sender's memory. Without it the sender puts messages of
    /// every size into the ring, larger ones than it holds included.
    cross_memory: bool,
    /// A message larger than `shm_eager_max` on an edge without cross-memory attach, begun
    /// by a call that could not wait for its end: the fragments so far (its last fragment
    /// stays in the ring until it is delivered).
    partial: Option<Partial>,
    /// The tag of the messages read from the ring now: the last `Tag` or `Am` record's
    /// (tag 0 before any).
    tag: WireTag,
    /// The tag of the message delivered last.
    pub(crate) delivered_tag: WireTag,
    /// Messages taken ahead of the receives while a send of this endpoint waited
    /// ([`ShmIn::read_ahead`]), in order, delivered before anything in the ring.
    ahead: VecDeque<(WireTag, Vec<u8>)>,
    /// Bytes in `ahead` (at most `read_ahead_bytes`).
    ahead_bytes: usize,
    /// Whether the peer closed the edge cleanly, and whether that was reported.
    pub(crate) end: PeerEnd,
}

/// What [`ShmIn::read_ahead`] left of a sender asleep in a blocking send on the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AheadOutcome {
    /// No sender waits on this edge, or what it waits for was taken (or is on its way).
    Free,
    /// The sender waits and its next message does not fit within the read-ahead bound.
    Blocked,
}

/// The fragments of a message taken so far ([`ShmIn::partial`]).
#[derive(Debug)]
struct Partial {
    buf: Vec<u8>,
    filled: usize,
}

/// A ring error of the edge from `peer`.
fn ring_error(peer: Addr, e: RingError) -> Error {
    Error::Corrupt {
        peer,
        detail: e.to_string(),
    }
}

impl ShmIn {
    /// The edge the listener accepted.
    pub(crate) fn new(accepted: NewInbound) -> ShmIn {
        ShmIn {
            peer: accepted.peer,
            pid: accepted.pid,
            pidfd: accepted.pidfd,
            freeze: FreezeWatch::default(),
            ring: accepted.ring,
            state: InboundState::Open,
            cross_memory: accepted.cross_memory,
            partial: None,
            tag: WireTag::default(),
            delivered_tag: WireTag::default(),
            ahead: VecDeque::new(),
            ahead_bytes: 0,
            end: PeerEnd::default(),
        }
    }

    /// One look for a message for `dest`: the message's length, nothing, or this edge's
    /// error (reported once; the edge is done afterwards, except after `BufferTooSmall`).
    /// With `wait`, a multi-fragment message that has begun is waited for to its end.
    ///
    /// An open edge takes the short way: one look at the ring's next stamp, and the record
    /// it finds taken at once (the busy-polling receive's path: nothing else to decide);
    /// every other state goes through [`ShmIn::poll_ending`].
    #[inline]
    pub(crate) fn poll(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
        endpoint: Addr,
    ) -> Result<Option<usize>> {
        if self.state == InboundState::Open && self.ahead.is_empty() {
            // Matched by reference: the record stays where `peek` stored it, field by field
            // (a copy of it reads those stores back wide, a store-forwarding stall).
            match &self.ring.peek() {
                Ok(None) => return Ok(None),
                Ok(Some(rec)) => {
                    let taken = self.take_record(rec, dest, wait, config, detection, rank);
                    if let Ok(Some(len)) = taken {
                        // A message returns a value built here: handing `taken` on copies
                        // the whole result with wide loads of what was just stored in
                        // narrow ones (a store-forwarding stall per message).
                        self.delivered_tag = self.tag;
                        return Ok(Some(len));
                    }
                    return self.settle(taken, endpoint);
                }
                // Reported by the full look below.
                Err(_) => {}
            }
        }
        if !self.ahead.is_empty() {
            return self.take_ahead(dest);
        }
        self.poll_ending(dest, wait, config, detection, rank, endpoint)
    }

    /// Delivers the oldest message taken ahead into `dest` (`BufferTooSmall` leaves it).
    #[cold]
    fn take_ahead(&mut self, dest: &mut Dest<'_>) -> Result<Option<usize>> {
        let Some((tag, front)) = self.ahead.front_mut() else {
            return Ok(None);
        };
        let len = front.len();
        self.delivered_tag = *tag;
        if let Dest::Owned(v) = dest {
            std::mem::swap(*v, front);
        } else {
            dest.prepare(len as u64)?.copy_from_slice(front);
        }
        self.ahead.pop_front();
        self.ahead_bytes -= len;
        Ok(Some(len))
    }

    /// While a blocking send of this endpoint waits: if the peer sleeps in a blocking send
    /// on this edge (its ring's waiting flag), takes its messages out of the ring into
    /// buffers of the edge, whole messages only, while they stay within `read_ahead_bytes`
    /// (rendezvous messages pulled whole: the sender is not asked to help, it is waiting).
    /// Nothing here waits. `Blocked` when the sender waits and its next message is beyond
    /// the bound; an error leaves the message in the ring for a receive to report.
    ///
    /// A rendezvous is pulled ahead only with `pull_rendezvous` (the waiting send's own
    /// peer, or a send that has waited long enough to suspect a cycle of blocking sends):
    /// otherwise it stays in the ring, with what follows it, for the receive that will pull
    /// it straight into its own buffer. Pulled ahead, it costs a buffer of its size, faulted
    /// in page by page, and a second copy; and a sender that is merely waiting for this
    /// endpoint's next receive (a client of a server busy answering another) gains nothing.
    pub(crate) fn read_ahead(&mut self, config: &Config, pull_rendezvous: bool) -> AheadOutcome {
        if self.state != InboundState::Open || !self.ring.producer_waiting() {
            return AheadOutcome::Free;
        }
        let bound = config.read_ahead_bytes as u64;
        while let Ok(Some(rec)) = self.ring.peek() {
            let room = bound.saturating_sub(self.ahead_bytes as u64);
            let len = match rec.kind {
                Kind::Msg | Kind::Rndv => rec.total_len,
                Kind::Cont => self.partial.as_ref().map_or(0, |p| p.buf.len() as u64),
                Kind::Tag | Kind::Am => {
                    if self.partial.is_some() {
                        // Left for a receive to report.
                        break;
                    }
                    self.tag = self.tag_of(&rec);
                    self.ring.consume(&rec);
                    continue;
                }
                Kind::Close | Kind::Pad => break,
            };
            if len > room {
                self.ring.flush();
                return AheadOutcome::Blocked;
            }
            if rec.kind == Kind::Rndv && !pull_rendezvous {
                break;
            }
            let mut msg = Vec::new();
            let mut dest = Dest::Owned(&mut msg);
            let mut looks = Looks::default();
            let taken = match rec.kind {
                Kind::Rndv => {
                    self.take_rendezvous(&rec, &mut dest, config, &mut looks, None, false)
                }
                _ => self.take_record(&rec, &mut dest, false, config, &mut looks, None),
            };
            match taken {
                Ok(Some(len)) => {
                    msg.truncate(len);
                    self.ahead_bytes += len;
                    self.ahead.push_back((self.tag, msg));
                }
                // Incomplete (the sender writes the rest once it sees the space), or an
                // error a receive reports.
                Ok(None) | Err(_) => break,
            }
        }
        self.ring.flush();
        AheadOutcome::Free
    }

    /// [`ShmIn::poll`] for an edge that is not simply open (done, broken, its peer dead or
    /// stopped), or whose ring failed a check.
    #[inline(never)]
    fn poll_ending(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
        endpoint: Addr,
    ) -> Result<Option<usize>> {
        match &self.state {
            InboundState::Done => return Ok(None),
            InboundState::Broken(detail) => {
                let err = corrupt_detail(self.peer, detail);
                self.state = InboundState::Done;
                return Err(err);
            }
            InboundState::Open | InboundState::Dying | InboundState::Stopped(_) => {}
        }
        let taken = self.take(dest, wait, config, detection, rank);
        self.settle(taken, endpoint)
    }

    /// What one take means for the edge: a message, or (nothing left) its peer's death or
    /// stop reported once, or an error that ends the edge (not `BufferTooSmall`, which
    /// leaves the message in place).
    #[inline]
    fn settle(&mut self, taken: Result<Option<usize>>, endpoint: Addr) -> Result<Option<usize>> {
        match taken {
            Ok(Some(len)) => {
                self.delivered_tag = self.tag;
                Ok(Some(len))
            }
            Ok(None) => self.report_end(endpoint),
            Err(e @ Error::BufferTooSmall { .. }) => Err(e),
            Err(e) => {
                self.state = InboundState::Done;
                self.ring.close();
                Err(e)
            }
        }
    }

    /// Nothing more to take: a peer that died or stopped is reported now, once.
    fn report_end(&mut self, endpoint: Addr) -> Result<Option<usize>> {
        match self.state {
            InboundState::Dying => {
                self.state = InboundState::Done;
                tracing::warn!(target: ENDPOINT_LOG, endpoint = %endpoint, peer = %self.peer, transport = "shm", "peer died without closing its connection");
                Err(Error::PeerDead {
                    peer: self.peer,
                    during: "while receiving",
                })
            }
            InboundState::Stopped(stopped_ms) => {
                self.state = InboundState::Done;
                self.ring.close();
                Err(Error::PeerStopped {
                    peer: self.peer,
                    transport: "shm",
                    during: "while receiving",
                    stopped_ms,
                })
            }
            _ => Ok(None),
        }
    }

    /// Takes the next message of the ring into `dest`, if there is one.
    fn take(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<Option<usize>> {
        let rec = match self.ring.peek() {
            Ok(Some(rec)) => rec,
            Ok(None) => return Ok(None),
            Err(e) => return Err(ring_error(self.peer, e)),
        };
        self.take_record(&rec, dest, wait, config, detection, rank)
    }

    /// Takes the message whose (first) record `rec` is next in the ring into `dest`.
    #[inline]
    fn take_record(
        &mut self,
        rec: &Record,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<Option<usize>> {
        match rec.kind {
            Kind::Msg => self.take_eager(rec, dest, wait, config, detection, rank),
            Kind::Rndv => self.take_rendezvous(rec, dest, config, detection, rank, true),
            Kind::Close => {
                self.ring.consume(rec);
                self.ring.flush();
                self.state = InboundState::Done;
                self.end.closed = true;
                Ok(None)
            }
            Kind::Tag | Kind::Am => self.take_tag(*rec, dest, wait, config, detection, rank),
            Kind::Cont if self.partial.is_some() => {
                self.continue_partial(*rec, dest, wait, config, detection, rank)
            }
            Kind::Cont | Kind::Pad => Err(corrupt_detail(
                self.peer,
                "fragment without a message start",
            )),
        }
    }

    /// What the `Tag` or `Am` record `rec` announces.
    fn tag_of(&self, rec: &Record) -> WireTag {
        WireTag {
            value: self.ring.tag_of(rec),
            am: rec.kind == Kind::Am,
        }
    }

    /// The tag of the message a look would deliver next (the one a `BufferTooSmall` left in
    /// place): the first taken ahead, else the ring's current one.
    pub(crate) fn next_tag(&self) -> WireTag {
        self.ahead.front().map_or(self.tag, |(tag, _)| *tag)
    }

    /// Takes the `Tag` (or `Am`) record `rec` (the tag of the messages that follow), then
    /// the message after it if it is there.
    #[cold]
    #[inline(never)]
    fn take_tag(
        &mut self,
        mut rec: Record,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<Option<usize>> {
        loop {
            if self.partial.is_some() {
                return Err(corrupt_detail(
                    self.peer,
                    "message interrupted by another record",
                ));
            }
            self.tag = self.tag_of(&rec);
            self.ring.consume(&rec);
            match self.ring.peek().map_err(|e| ring_error(self.peer, e))? {
                Some(next) if matches!(next.kind, Kind::Tag | Kind::Am) => rec = next,
                Some(next) => return self.take_record(&next, dest, wait, config, detection, rank),
                None => return Ok(None),
            }
        }
    }

    /// Pulls the rendezvous message `rec` announces out of the sender's memory into `dest`;
    /// with `may_split`, a large one is copied by both processes at once.
    fn take_rendezvous(
        &mut self,
        rec: &Record,
        dest: &mut Dest<'_>,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
        may_split: bool,
    ) -> Result<Option<usize>> {
        let peer = self.peer;
        if self.ring.producer_closed() {
            // The sender closed or failed its side with this message outstanding (an
            // endpoint dropped with a posted send in flight, a send that timed out or found
            // a send-send deadlock): its buffer may be gone. The edge ends here.
            self.state = InboundState::Done;
            return Ok(None);
        }
        let (addr, len) = self.ring.rndv_target(rec);
        if len != rec.total_len {
            return Err(corrupt_detail(
                peer,
                "rendezvous length disagrees with its header",
            ));
        }
        // The limit before anything is sized by the announcement. The buffer is then made
        // whole at once, not grown as the copy goes: the sender copies the second half into
        // it from its side, and the limit (half the machine's memory by default) is what
        // keeps one announcement from exhausting memory.
        Error::check_announced(peer, "shm", len, config.max_message_bytes)?;
        let buf = dest.prepare(len)?;
        let seq = self.ring.next_rndv_seq();
        // Large copies are shared with the sender: it pushes the second part with
        // process_vm_writev while we pull the first, so both cores copy at once.
        // Not when this rank shares its CPUs: the sender may not run before the receiver
        // could have copied the whole message itself, and it would wait for it.
        let split = if may_split && len >= SPLIT_MIN_BYTES && !config.wait.shares_cpus() {
            (len / 2) & !(SPLIT_ALIGN - 1)
        } else {
            len
        };
        if split < len {
            self.ring.post_cts(seq, buf.as_ptr() as u64, split, len);
        }
        let (first, second) = buf.split_at_mut(split as usize);
        pull((self.pid, &self.pidfd), peer, first, addr)?;
        if !second.is_empty() {
            let sender_copies = !self.ring.claim_second_part(seq);
            // While the sender writes `second` from its side, nothing here touches
            // it; we only return once it reported completion.
            if !sender_copies || !self.wait_second_part(seq, config, detection, rank)? {
                pull((self.pid, &self.pidfd), peer, second, addr + split)?;
            }
        }
        self.ring.consume(rec);
        self.ring.complete_rndv();
        Ok(Some(len as usize))
    }

    fn take_eager(
        &mut self,
        first: &Record,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<Option<usize>> {
        let peer = self.peer;
        let total = first.total_len;
        // One compare per message (its first record), before anything is sized by it.
        Error::check_announced(peer, "shm", total, config.max_message_bytes)?;
        if self.partial.is_some() {
            return Err(corrupt_detail(
                peer,
                "message interrupted by another record",
            ));
        }
        if total > self.ring.capacity() && self.cross_memory {
            return Err(corrupt_detail(peer, "eager message larger than its ring"));
        }
        if first.frag_len < total && !wait {
            if !self.cross_memory && total > config.shm_eager_max {
                // It may not fit in the ring at once: take what is there, the rest later.
                return self.start_partial(first, dest, config, detection, rank);
            }
            if !all_fragments_present(&self.ring, first).map_err(|e| ring_error(peer, e))? {
                return Ok(None);
            }
        }
        let buf = dest.prepare(total)?;
        let filled = first.frag_len as usize;
        self.ring.copy_payload(first, &mut buf[..filled]);
        self.ring.consume(first);
        if filled < buf.len() {
            self.take_rest(buf, filled, config, detection, rank)?;
        }
        Ok(Some(total as usize))
    }

    /// Takes the fragments after the first of an eager message into `buf` (`filled` bytes
    /// in), waiting for a sender that is writing them now. Apart from `take_eager` so that
    /// a message in one fragment, the common case, sets no wait up.
    fn take_rest(
        &mut self,
        buf: &mut [u8],
        mut filled: usize,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<()> {
        let peer = self.peer;
        let mut waited = Wait::new(config);
        while filled < buf.len() {
            match self.ring.peek().map_err(|e| ring_error(peer, e))? {
                Some(rec)
                    if rec.kind == Kind::Cont
                        && filled as u64 + rec.frag_len <= buf.len() as u64 =>
                {
                    let end = filled + rec.frag_len as usize;
                    self.ring.copy_payload(&rec, &mut buf[filled..end]);
                    self.ring.consume(&rec);
                    filled = end;
                }
                Some(_) => {
                    return Err(corrupt_detail(
                        peer,
                        "message interrupted by another record",
                    ))
                }
                None => {
                    // The sender is mid-message: it is writing the rest right now.
                    self.ring.flush();
                    self.wait_on_sender(
                        &mut waited,
                        (config.detect, &mut *detection, rank),
                        "in the middle of a message",
                        "waiting for the rest of a message",
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Begins taking a message that may not fit in the ring at once, `first` being its first
    /// record, when the caller cannot wait for its end (edge without cross-memory attach):
    /// the fragments there now go into a buffer of the edge; the rest comes with later
    /// calls ([`ShmIn::continue_partial`]). `total` was checked against
    /// `max_message_bytes` already.
    #[cold]
    fn start_partial(
        &mut self,
        first: &Record,
        dest: &mut Dest<'_>,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<Option<usize>> {
        let mut buf = vec![0u8; first.total_len as usize];
        let filled = first.frag_len as usize;
        self.ring.copy_payload(first, &mut buf[..filled]);
        self.ring.consume(first);
        self.partial = Some(Partial { buf, filled });
        match self.ring.peek().map_err(|e| ring_error(self.peer, e))? {
            Some(rec) if rec.kind == Kind::Cont => {
                self.continue_partial(rec, dest, false, config, detection, rank)
            }
            Some(_) => Err(corrupt_detail(
                self.peer,
                "message interrupted by another record",
            )),
            None => {
                self.ring.flush();
                Ok(None)
            }
        }
    }

    /// Takes further fragments of the partial message, `rec` (a `Cont`) first, waiting for
    /// the rest with `wait`. Its last fragment is consumed only once `dest` has taken the
    /// message, so a `BufferTooSmall` leaves it in place for a later receive.
    #[cold]
    fn continue_partial(
        &mut self,
        mut rec: Record,
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<Option<usize>> {
        let peer = self.peer;
        let mut waited = Wait::new(config);
        loop {
            let Some(partial) = self.partial.as_mut() else {
                return Err(corrupt_detail(peer, "fragment without a message start"));
            };
            let total = partial.buf.len();
            let end = partial.filled + rec.frag_len as usize;
            if rec.kind != Kind::Cont || end > total {
                return Err(corrupt_detail(
                    peer,
                    "message interrupted by another record",
                ));
            }
            if end == total {
                let buf = dest.prepare(total as u64)?;
                buf[..partial.filled].copy_from_slice(&partial.buf[..partial.filled]);
                self.ring.copy_payload(&rec, &mut buf[partial.filled..]);
                self.ring.consume(&rec);
                self.partial = None;
                return Ok(Some(total));
            }
            self.ring
                .copy_payload(&rec, &mut partial.buf[partial.filled..end]);
            partial.filled = end;
            self.ring.consume(&rec);
            loop {
                match self.ring.peek().map_err(|e| ring_error(peer, e))? {
                    Some(next) => {
                        rec = next;
                        break;
                    }
                    None if wait => {
                        self.ring.flush();
                        self.wait_on_sender(
                            &mut waited,
                            (config.detect, &mut *detection, rank),
                            "in the middle of a message",
                            "waiting for the rest of a message",
                        )?;
                    }
                    None => {
                        self.ring.flush();
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Waits for the sender to finish its part of split request `seq`; `Ok(false)` if it
    /// reported failure (the caller then copies the part itself).
    fn wait_second_part(
        &mut self,
        seq: u64,
        config: &Config,
        detection: &mut Looks,
        rank: Option<&LocalRank>,
    ) -> Result<bool> {
        let mut wait = Wait::new(config);
        loop {
            if let Some(ok) = self.ring.second_part_done(seq) {
                return Ok(ok);
            }
            self.wait_on_sender(
                &mut wait,
                (config.detect, &mut *detection, rank),
                "while it copied part of a large message",
                "waiting for the sender's part of a large message",
            )?;
        }
    }

    /// One step of waiting for a sender that is in the middle of writing something we
    /// need: spin, and every ~1000 polls check that it lives and that the deadline has not
    /// passed and run the rank's meanwhile (`rank`: peers' one-sided requests served, as in
    /// every wait; a sender that posted the message writes its rest only when it calls
    /// into quiver, and it may be waiting for such a request of its own); past the spin
    /// budget, give the CPU away now and then.
    fn wait_on_sender(
        &mut self,
        wait: &mut Wait,
        (detect, detection, rank): (Option<Duration>, &mut Looks, Option<&LocalRank>),
        during: &'static str,
        what: &'static str,
    ) -> Result<()> {
        let (spinning, periodic) = wait.spinning();
        if periodic {
            if let Some(rank) = rank {
                rank.meanwhile(!rank.engine_due(&mut wait.engine_at));
            }
            let due = match detect {
                Some(detect) => wait.liveness_due(detection, detect),
                // With detection off, death is still noticed once the spin budget is spent.
                None => wait.spin_spent(),
            };
            let started = due.then(Instant::now);
            let exited = due && sys::pidfd_exited(&self.pidfd);
            let stopped = (due && !exited)
                .then(|| detect.and_then(|d| self.freeze.stopped(self.pid, d, Instant::now())))
                .flatten();
            if let Some(started) = started {
                detection.record(started);
            }
            if exited {
                return Err(Error::PeerDead {
                    peer: self.peer,
                    during,
                });
            }
            if let Some(ms) = stopped {
                return Err(Error::PeerStopped {
                    peer: self.peer,
                    transport: "shm",
                    during,
                    stopped_ms: ms,
                });
            }
            wait.check_deadline(what)?;
            if !spinning {
                // Past the spin budget this wait never sleeps (the sender rings no bell
                // mid-message) but gives the CPU away at every tick.
                std::thread::yield_now();
            }
        }
        wait.pause();
        Ok(())
    }

    /// The endpoint's liveness look at this edge: a peer that exited is drained, then
    /// reported; one stopped for `detect` is reported once its ring is drained.
    pub(crate) fn check_liveness(
        &mut self,
        now: Instant,
        detect: Option<Duration>,
        endpoint: Addr,
    ) {
        if self.state != InboundState::Open {
            return;
        }
        if sys::pidfd_exited(&self.pidfd) {
            tracing::debug!(target: ENDPOINT_LOG, endpoint = %endpoint, peer = %self.peer, transport = "shm", "peer process exited");
            self.state = InboundState::Dying;
        } else if let Some(ms) = detect.and_then(|d| self.freeze.stopped(self.pid, d, now)) {
            tracing::warn!(target: ENDPOINT_LOG, endpoint = %endpoint, peer = %self.peer, transport = "shm", stopped_ms = ms, "peer stopped");
            self.state = InboundState::Stopped(ms);
        }
    }

    /// Re-reads the ring's header while idle: a scribbled ring becomes an error on this
    /// edge now rather than a silent hang later.
    pub(crate) fn verify(&mut self) {
        if self.state == InboundState::Open {
            if let Err(e) = self.ring.verify() {
                self.state = InboundState::Broken(e.to_string());
                self.ring.close();
            } else if self.ring.producer_closed()
                && self.ahead.is_empty()
                && self.partial.is_none()
                && matches!(self.ring.peek(), Ok(None))
            {
                // Closed when its ring had no room for the close record: the flag alone
                // says so, seen once everything before it was taken.
                self.state = InboundState::Done;
                self.end.closed = true;
            }
        }
    }

    /// Whether a receive would find something here now (a record, or the edge's end): the
    /// record's stamp alone is read (a filler counts; the look passes over it).
    pub(crate) fn has_pending(&mut self) -> bool {
        if !self.ahead.is_empty() {
            return true;
        }
        match self.state {
            InboundState::Done => false,
            InboundState::Open => self.ring.has_record(),
            // An end to report (after what the peer wrote).
            InboundState::Dying | InboundState::Stopped(_) | InboundState::Broken(_) => true,
        }
    }

    /// Whether the edge still delivers or has an error to report.
    pub(crate) fn is_live(&self) -> bool {
        self.state != InboundState::Done || !self.ahead.is_empty()
    }

    /// The peer's pidfd, to sleep on while the edge is open (readable when it exits).
    pub(crate) fn pidfd_to_watch(&self) -> Option<libc::c_int> {
        (self.state == InboundState::Open).then(|| self.pidfd.as_raw_fd())
    }

    /// Publishes the ring space consumed so far to the sender.
    #[inline]
    pub(crate) fn flush(&mut self) {
        self.ring.flush();
    }

    /// Closes the edge (the endpoint closes).
    pub(crate) fn close(&mut self) {
        self.ring.close();
    }

    /// Ends the edge because this endpoint closed its connection to the peer
    /// (`Endpoint::close`): the ring is closed from this side, so the peer's sends on it
    /// fail with `PeerClosed`; what it wrote and nobody took is dropped; no report.
    pub(crate) fn close_here(&mut self) {
        self.ring.close();
        self.state = InboundState::Done;
        self.ahead.clear();
        self.ahead_bytes = 0;
        self.partial = None;
    }
}

#[cfg(test)]
mod tests {
    use quiver_transport::ring::Producer;

    use super::*;

    /// An edge whose sender is this very process (its memory is what a rendezvous pulls),
    /// and the ring's producer.
    fn edge() -> (ShmIn, Producer) {
        let (ring, fd) = Consumer::create(1 << 16, 7).expect("a ring");
        let producer = Producer::attach(&fd).expect("the ring's producer");
        let me = sys::getpid();
        let inbound = ShmIn::new(NewInbound {
            peer: Addr::new(1, 0),
            pid: me,
            pidfd: sys::pidfd_open(me).expect("a pidfd"),
            ring,
            cross_memory: true,
        });
        (inbound, producer)
    }

    /// A sender asleep in a blocking rendezvous send to this endpoint has its message
    /// pulled ahead only when the waiting send asks for rendezvous messages (its own peer,
    /// or a suspected cycle); otherwise it stays in the ring for a receive, and a short
    /// message behind it too (order is kept).
    #[test]
    fn a_rendezvous_is_pulled_ahead_only_when_asked() {
        let message = vec![5u8; 300 << 10];
        let (mut inbound, mut producer) = edge();
        let seq = producer
            .try_write_rndv(message.as_ptr() as u64, message.len() as u64)
            .expect("a sound ring")
            .expect("room");
        assert!(producer
            .try_write(Kind::Msg, 3, b"abc")
            .expect("a sound ring"));
        producer.prepare_wait();
        let config = Config::default();
        assert_eq!(inbound.read_ahead(&config, false), AheadOutcome::Free);
        assert!(inbound.ahead.is_empty());
        assert!(inbound.has_pending(), "the rendezvous stays in the ring");
        assert!(producer.rndv_completed().expect("a sound ring") < seq);
        assert_eq!(inbound.read_ahead(&config, true), AheadOutcome::Free);
        let ahead: Vec<&[u8]> = inbound.ahead.iter().map(|(_, m)| m.as_slice()).collect();
        assert_eq!(ahead, [message.as_slice(), b"abc"]);
        assert_eq!(producer.rndv_completed().expect("a sound ring"), seq);
    }
}
