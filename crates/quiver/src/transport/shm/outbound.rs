//! The sending side of a shared-memory edge ([`ShmOut`]): this process writes the ring, the
//! peer reads it. The protocol is chosen by size:
//!
//! - **short**: up to [`quiver_transport::ring::INLINE_BYTES`], inline with the record
//!   header in one cache line;
//! - **eager**: up to `shm_eager_max`, copied into the ring in fragments of at most
//!   `shm_frag_bytes`, so copy-in and copy-out overlap;
//! - **rendezvous**: larger, the ring carries only (address, length) and the receiver pulls
//!   the bytes with one `process_vm_readv` straight into its buffer, then counts the
//!   request done so the sender may reuse its buffer (large ones are split: this side
//!   pushes the second half meanwhile, see [`super::rendezvous`]).
//!
//! A blocking send that must wait spins for `spin`, then sleeps on a futex in the ring.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use quiver_transport::notify::RemoteDoorbell;
use quiver_transport::ring::{Kind, Producer, RingError};
use quiver_transport::sys;

use super::connect::NewOutbound;
use super::eager::{frag_lens, write_eager, write_eager_raw};
use super::rendezvous::help_split;
use super::rma::ShmRma;
use crate::addr::Addr;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::edge_context::EdgeContext;
use crate::transport::failure::Failure;
use crate::transport::liveness::FreezeWatch;
use crate::transport::meanwhile::Meanwhile;
use crate::transport::requests::{Requests, SendState};
use crate::transport::wait::{Wait, SLEEP_SLICE};
use crate::transport::wire_tag::WireTag;

/// A posted send waiting for ring space (eager: the fragments written so far), or (`key`
/// `None`) a non-blocking send's internal copy of a message larger than the ring takes at
/// once, on an edge without cross-memory attach.
#[derive(Debug)]
struct Queued {
    key: Option<Key>,
    /// The message's tag.
    tag: WireTag,
    data: Vec<u8>,
    written: usize,
    started: bool,
}

/// Who owns the buffer of a rendezvous the receiver has not completed yet.
#[derive(Debug)]
enum InflightOwner {
    /// A posted send: its buffer goes back with the request.
    Request(Key, Vec<u8>),
    /// A non-blocking send's internal copy: back to the pool.
    Buffered(Vec<u8>),
    /// The blocking send in progress (the caller's buffer).
    Blocking,
}

/// How long a blocking send waits before it pulls ahead the rendezvous messages of other
/// senders than its own peer that sleep sending to this endpoint (the `flush` callback's
/// second argument). Its own peer's are pulled at once (both would wait forever otherwise).
/// Another sender's usually only waits for this endpoint's next receive, which pulls it
/// straight into the receive's buffer (a server answering one client while the others'
/// requests wait): pulled ahead, it costs a buffer of its size and a second copy. A cycle
/// of three or more ranks, each blocked sending to the next, needs it: this long, a few
/// scheduler slices of a busy node, tells the two apart
/// (docs/decisions/0071-eager-limit-on-a-busy-node.md).
pub(crate) const CYCLE_PATIENCE: Duration = Duration::from_millis(10);

/// The longest sleep of a send waiting for its rendezvous to be pulled while the endpoint
/// has receives posted ([`ShmOut::finish_pull`]): a message for them rings the doorbell,
/// not the ring's futex this send sleeps on, so it looks again this often.
const PULL_SLICE: Duration = Duration::from_millis(1);

/// How the part of a blocking send the edge does by itself ended ([`ShmOut::send`]).
pub(crate) enum ShmSent {
    /// The send is over.
    Done(Result<()>),
    /// Its rendezvous is announced and the endpoint has receives posted: the receiver's
    /// pull is waited for with the endpoint's help ([`ShmOut::finish_pull`]), so that what
    /// peers send meanwhile goes into those receives as it comes.
    Pulling,
}

/// The sending side of a shared-memory edge (module docs).
#[derive(Debug)]
pub(crate) struct ShmOut {
    pub(crate) peer: Addr,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    ring: Producer,
    bell: RemoteDoorbell,
    queue: VecDeque<Queued>,
    inflight: VecDeque<(u64, InflightOwner)>,
    pub(crate) failure: Option<Failure>,
    freeze: FreezeWatch,
    /// The peer's regions this edge mapped for one-sided operations.
    pub(crate) rma: ShmRma,
    /// Whether the receiver can read our memory (rendezvous); without it every message
    /// goes through the ring ([`ShmOut::eager_max`]).
    cross_memory: bool,
    /// Since when the blocking send in progress has seen the peer asleep in a blocking send
    /// to this endpoint, beyond the read-ahead bound, at every look (a send-send deadlock,
    /// once it lasts).
    peer_waiting_since: Option<Instant>,
    /// Whether the blocking send in progress raised the ring's waiting flag (it slept).
    flag_raised: bool,
    /// The tag of the sends made now ([`ShmOut::set_tag`]; 0 outside a tagged send).
    tag: WireTag,
    /// The rendezvous of the blocking send handed to [`ShmOut::finish_pull`].
    pulling: Option<u64>,
}

/// The owner of a queued send's buffer once it is announced by rendezvous.
fn owner_of(key: Option<Key>, data: Vec<u8>) -> InflightOwner {
    match key {
        Some(key) => InflightOwner::Request(key, data),
        None => InflightOwner::Buffered(data),
    }
}

/// Sets what the ring announces before the next message start: a tag, or active messages.
#[inline]
fn set_ring_tag(ring: &mut Producer, tag: WireTag) {
    if tag.am {
        ring.set_am(tag.value);
    } else {
        ring.set_tag(tag.value);
    }
}

/// A ring error on this edge: the peer broke the ring protocol.
fn corrupt(e: RingError) -> Failure {
    Failure::Corrupt(e.to_string())
}

impl ShmOut {
    /// The edge to `peer` over the ring `new` brought.
    pub(crate) fn new(peer: Addr, new: NewOutbound) -> ShmOut {
        ShmOut {
            peer,
            pid: new.pid,
            pidfd: new.pidfd,
            ring: new.ring,
            bell: new.bell,
            queue: VecDeque::new(),
            inflight: VecDeque::new(),
            failure: None,
            freeze: FreezeWatch::default(),
            rma: ShmRma::default(),
            cross_memory: new.cross_memory,
            peer_waiting_since: None,
            flag_raised: false,
            tag: WireTag::default(),
            pulling: None,
        }
    }

    /// Sets the tag of the sends that follow (the endpoint sets it around a tagged send
    /// and back to 0 after it).
    #[inline]
    pub(crate) fn set_tag(&mut self, tag: WireTag) {
        self.tag = tag;
    }

    /// Whether the receiver can read our memory (large messages by rendezvous).
    pub(crate) fn cross_memory(&self) -> bool {
        self.cross_memory
    }

    /// The largest message sent through the ring: `shm_eager_max`, or every size when the
    /// receiver cannot read our memory (cross-memory attach refused).
    fn eager_max(&self, config: &Config) -> u64 {
        if self.cross_memory {
            config.shm_eager_max
        } else {
            u64::MAX
        }
    }

    /// Whether the peer's process has exited.
    pub(crate) fn peer_exited(&self) -> bool {
        sys::pidfd_exited(&self.pidfd)
    }

    /// Whether sends are queued or rendezvous requests in flight.
    pub(crate) fn busy(&self) -> bool {
        !self.queue.is_empty() || !self.inflight.is_empty()
    }

    /// Sends `data` as one message, blocking until it is in the ring (short/eager) or the
    /// receiver has pulled it (rendezvous). Earlier posted sends go first. `flush` is what
    /// the endpoint does while the send waits: the rank's meanwhile (the datagram engine,
    /// peers' one-sided requests: `LocalRank::meanwhile`), publishes
    /// the ring space this endpoint consumed meanwhile (a peer blocked on us may need it),
    /// takes ahead what peers asleep in a blocking send to this endpoint wrote (within
    /// `read_ahead_bytes` per connection; their rendezvous messages only when its second
    /// argument says so: the named peer's always, others' once the send waited
    /// [`CYCLE_PATIENCE`]), and says whether the peer named stays asleep in a
    /// blocking send to this endpoint with a message beyond that bound: seen so for a
    /// quarter of the detection time while this send waits, the send returns
    /// [`Error::SendDeadlock`] (neither side would ever receive).
    ///
    /// With `receives_posted` (the endpoint has receives posted), a rendezvous is announced
    /// and [`ShmSent::Pulling`] returned: the caller finishes the send with
    /// [`ShmOut::finish_pull`], the endpoint receiving meanwhile.
    pub(crate) fn send(
        &mut self,
        data: &[u8],
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
        receives_posted: bool,
    ) -> ShmSent {
        let mut wait = Wait::new(cx.config);
        let result = self.send_until_pulling(data, &mut wait, cx, flush, receives_posted);
        // Each outcome built here: mapping `result` would copy all of it (the error's room
        // too) with wide loads of what was just stored in narrow ones, a store-forwarding
        // stall per message.
        match result {
            Ok(Some(seq)) => {
                self.pulling = Some(seq);
                ShmSent::Pulling
            }
            Ok(None) => {
                self.end_wait();
                ShmSent::Done(Ok(()))
            }
            Err(e) => {
                self.end_wait();
                ShmSent::Done(Err(e))
            }
        }
    }

    /// [`ShmOut::send`] up to its end, or (`Some`: the rendezvous sequence number) up to
    /// the announcement of a rendezvous the endpoint waits for with its help.
    fn send_until_pulling(
        &mut self,
        data: &[u8],
        wait: &mut Wait,
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
        receives_posted: bool,
    ) -> Result<Option<u64>> {
        self.peer_waiting_since = None;
        while !self.queue.is_empty() {
            self.progress(cx.config, cx.requests)?;
            if self.queue.is_empty() {
                break;
            }
            self.wait(wait, "flushing earlier sends", cx, flush)?;
        }
        set_ring_tag(&mut self.ring, self.tag);
        if data.len() as u64 <= self.eager_max(cx.config) {
            return self
                .send_eager_blocking(data, wait, cx, flush)
                .map(|()| None);
        }
        let seq = self.announce_rndv(data, wait, cx, flush)?;
        if receives_posted {
            return Ok(Some(seq));
        }
        self.wait_pulled(data, seq, wait, cx, flush).map(|()| None)
    }

    /// The start of a blocking send for the common short message: written as one record
    /// when nothing queued goes first and the ring has room now, with none of the
    /// preparation a wait needs. `None`: the blocking send must take it (nothing written).
    #[inline]
    pub(crate) fn send_short(
        &mut self,
        data: &[u8],
        config: &Config,
        requests: &mut Requests,
    ) -> Option<Result<()>> {
        if !self.queue.is_empty()
            || data.len() as u64 > config.shm_frag_bytes.min(self.eager_max(config))
        {
            return None;
        }
        set_ring_tag(&mut self.ring, self.tag);
        let sent = self.write_one_record(data, requests)?;
        self.peer_waiting_since = None;
        Some(sent)
    }

    /// Writes `data` as one record (after its tag record, if the tag changed), if the ring
    /// has room now: a record is written whole or not at all, so no room is checked
    /// first. `None`: no room (nothing written). The ring's tag is set by the caller.
    #[inline(always)]
    fn write_one_record(&mut self, data: &[u8], requests: &mut Requests) -> Option<Result<()>> {
        match self.ring.try_write(Kind::Msg, data.len() as u64, data) {
            Ok(true) => {
                self.bell.ring();
                Some(Ok(()))
            }
            Ok(false) => None,
            Err(e) => Some(Err(self.fail(corrupt(e), "while sending", requests))),
        }
    }

    /// The wait announced since the send first slept ends with the send.
    fn end_wait(&mut self) {
        if self.flag_raised {
            self.flag_raised = false;
            self.ring.end_wait();
        }
    }

    /// The rest of a blocking send that returned [`ShmSent::Pulling`]: waits until the
    /// receiver pulled the rendezvous, the endpoint receiving meanwhile (posted receives
    /// take what comes, tcp peers are read ahead; [`Meanwhile::receive`]) besides what
    /// `flush` does for a send that waits alone ([`Meanwhile::shm_look`]).
    pub(crate) fn finish_pull(&mut self, data: &[u8], endpoint: &mut dyn Meanwhile) -> Result<()> {
        let Some(seq) = self.pulling.take() else {
            return Ok(());
        };
        let mut wait = Wait::new(endpoint.context().config);
        let mut helped = false;
        let result = loop {
            match self.pulled(data, seq, &mut helped) {
                Ok(false) => {}
                Ok(true) => {
                    let cx = endpoint.context();
                    break self.progress(cx.config, cx.requests);
                }
                Err(e) => {
                    let cx = endpoint.context();
                    break Err(self.fail(corrupt(e), "while sending", cx.requests));
                }
            }
            if let Err(e) = self.wait_meanwhile(&mut wait, endpoint) {
                let cx = endpoint.context();
                break self.pull_wait_failed(seq, e, cx.requests);
            }
        };
        self.end_wait();
        result
    }

    /// Whether rendezvous `seq` (of `data`) was pulled; does the sender's half of a split
    /// copy the receiver asked for, once (`helped`).
    fn pulled(
        &mut self,
        data: &[u8],
        seq: u64,
        helped: &mut bool,
    ) -> std::result::Result<bool, RingError> {
        let done = self.ring.rndv_completed()?;
        if done >= seq {
            return Ok(true);
        }
        if !*helped && done + 1 == seq {
            *helped = help_split(
                &self.ring,
                (self.pid, &self.pidfd),
                seq,
                data.as_ptr() as u64,
                data.len() as u64,
            );
            if *helped {
                return self.ring.rndv_completed().map(|done| done >= seq);
            }
        }
        Ok(false)
    }

    /// A wait for rendezvous `seq` ended with `e`: a receiver that took the message and then
    /// exited is not a failure; a timeout fails the connection (the receiver may still read
    /// the buffer later).
    fn pull_wait_failed(&mut self, seq: u64, e: Error, requests: &mut Requests) -> Result<()> {
        if self.ring.rndv_completed().is_ok_and(|done| done >= seq) {
            return Ok(());
        }
        if matches!(e, Error::Timeout { .. }) {
            self.fail(Failure::TimedOut, "while sending", requests);
        }
        Err(e)
    }

    /// One step of [`ShmOut::finish_pull`]'s wait: spin (the endpoint receiving at each
    /// periodic tick), then sleep on the ring's futex in slices of [`PULL_SLICE`].
    fn wait_meanwhile(&mut self, wait: &mut Wait, endpoint: &mut dyn Meanwhile) -> Result<()> {
        const WHAT: &str = "waiting for the receiver to take a large message";
        self.wait_step(wait, |edge, wait, look| {
            if let Look::AfterSleep(seen) = look {
                // A futex watches nothing else: short sleeps while peers' one-sided
                // requests may wait (the endpoint serves them at each look).
                let slice = endpoint.context().local.blind_sleep(PULL_SLICE);
                edge.ring.wait(seen, slice);
            }
            edge.look_meanwhile(wait, WHAT, endpoint)
        })
    }

    /// The skeleton of every wait on this edge (ring space, a rendezvous completion): spin,
    /// with `look` at each periodic tick; once the spin budget is spent, announce the wait
    /// (the caller re-checks once), then `look` sleeps on the ring's futex and looks again.
    /// The flag stays raised until the send ends (`send`), so that a peer blocked sending to
    /// this endpoint sees it at any time (`look_for_deadlock`).
    #[inline]
    fn wait_step(
        &mut self,
        wait: &mut Wait,
        mut look: impl FnMut(&mut Self, &mut Wait, Look) -> Result<()>,
    ) -> Result<()> {
        let (spinning, periodic) = wait.spinning();
        if periodic {
            look(self, wait, Look::Periodic)?;
        }
        if spinning {
            wait.pause();
            return Ok(());
        }
        match wait.seen.take() {
            None => {
                wait.seen = Some(self.ring.prepare_wait());
                self.flag_raised = true;
                Ok(())
            }
            Some(seen) => look(self, wait, Look::AfterSleep(seen)),
        }
    }

    /// What [`ShmOut::wait`] does at a look, with the endpoint receiving first.
    fn look_meanwhile(
        &mut self,
        wait: &mut Wait,
        what: &'static str,
        endpoint: &mut dyn Meanwhile,
    ) -> Result<()> {
        endpoint.receive()?;
        let waited_long = wait.waited() >= CYCLE_PATIENCE;
        let peer_waiting = endpoint.shm_look(self.peer, waited_long);
        let mut cx = endpoint.context();
        self.look_for_deadlock(peer_waiting, &mut cx)?;
        let detect = cx.config.detect;
        if detect.is_some_and(|detect| wait.liveness_due(cx.detection, detect)) {
            self.look_alive(what, &mut cx)?;
        }
        wait.check_deadline(what)
    }

    fn send_eager_blocking(
        &mut self,
        data: &[u8],
        wait: &mut Wait,
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
    ) -> Result<()> {
        let frag = cx.config.shm_frag_bytes as usize;
        let (mut written, mut started) = (0, false);
        loop {
            let done = write_eager(
                &mut self.ring,
                &self.bell,
                data,
                &mut written,
                &mut started,
                frag,
            );
            match done {
                Ok(true) => return Ok(()),
                Ok(false) => self.wait(wait, "waiting for ring space", cx, flush)?,
                Err(e) => return Err(self.fail(corrupt(e), "while sending", cx.requests)),
            }
        }
    }

    /// Writes the rendezvous record of `data` (waiting for ring space); its sequence number.
    fn announce_rndv(
        &mut self,
        data: &[u8],
        wait: &mut Wait,
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
    ) -> Result<u64> {
        loop {
            match self
                .ring
                .try_write_rndv(data.as_ptr() as u64, data.len() as u64)
            {
                Ok(Some(seq)) => {
                    self.bell.ring();
                    self.inflight.push_back((seq, InflightOwner::Blocking));
                    cx.requests.pending_sends += 1;
                    return Ok(seq);
                }
                Ok(None) => self.wait(wait, "waiting for ring space", cx, flush)?,
                Err(e) => return Err(self.fail(corrupt(e), "while sending", cx.requests)),
            }
        }
    }

    /// Waits until the receiver pulled rendezvous `seq` of `data`.
    fn wait_pulled(
        &mut self,
        data: &[u8],
        seq: u64,
        wait: &mut Wait,
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
    ) -> Result<()> {
        let mut helped = false;
        loop {
            match self.pulled(data, seq, &mut helped) {
                Ok(true) => return self.progress(cx.config, cx.requests),
                Ok(false) => {}
                Err(e) => return Err(self.fail(corrupt(e), "while sending", cx.requests)),
            }
            if let Err(e) = self.wait(
                wait,
                "waiting for the receiver to take a large message",
                cx,
                flush,
            ) {
                return self.pull_wait_failed(seq, e, cx.requests);
            }
        }
    }

    /// Sends `data` only if that needs no waiting. Short and eager messages must fit in the
    /// ring now; larger ones are copied into an internal buffer and sent by rendezvous
    /// (bounded by `max_buffered_bytes`).
    pub(crate) fn try_send(
        &mut self,
        data: &[u8],
        config: &Config,
        requests: &mut Requests,
    ) -> Result<()> {
        if self.busy() {
            self.progress(config, requests)?;
            if !self.queue.is_empty() {
                return Err(Error::WouldBlock);
            }
        }
        let len = data.len() as u64;
        if !self.cross_memory && len > config.shm_eager_max {
            return self.queue_copy(data, config, requests);
        }
        set_ring_tag(&mut self.ring, self.tag);
        if len <= config.shm_eager_max {
            let frag = config.shm_frag_bytes;
            if len <= frag {
                return self
                    .write_one_record(data, requests)
                    .unwrap_or(Err(Error::WouldBlock));
            }
            // A message whose tag changes is preceded by its tag record (8 bytes).
            let tag_record = std::iter::repeat_n(8, self.ring.tag_records_needed());
            match self.ring.fits(tag_record.chain(frag_lens(len, frag))) {
                Ok(true) => {}
                Ok(false) => return Err(Error::WouldBlock),
                Err(e) => return Err(self.fail(corrupt(e), "while sending", requests)),
            }
            let (mut written, mut started) = (0, false);
            let written = write_eager(
                &mut self.ring,
                &self.bell,
                data,
                &mut written,
                &mut started,
                frag as usize,
            );
            match written {
                Ok(true) => Ok(()),
                Ok(false) => unreachable!("space was checked just above"),
                Err(e) => Err(self.fail(corrupt(e), "while sending", requests)),
            }
        } else {
            if requests.buffered_bytes + data.len() > config.max_buffered_bytes {
                return Err(Error::WouldBlock);
            }
            let mut copy = requests.pool.take(data.len());
            copy.copy_from_slice(data);
            match self.ring.try_write_rndv(copy.as_ptr() as u64, len) {
                Ok(Some(seq)) => {
                    self.bell.ring();
                    requests.buffered_bytes += copy.len();
                    self.inflight
                        .push_back((seq, InflightOwner::Buffered(copy)));
                    requests.pending_sends += 1;
                    Ok(())
                }
                Ok(None) => {
                    requests.pool.give(copy);
                    Err(Error::WouldBlock)
                }
                Err(e) => Err(self.fail(corrupt(e), "while sending", requests)),
            }
        }
    }

    /// Starts sending `data` without waiting; returns the request's key. The endpoint owns
    /// the buffer until the send completes (large messages are sent from it directly).
    pub(crate) fn post_send(
        &mut self,
        data: Vec<u8>,
        config: &Config,
        requests: &mut Requests,
    ) -> Result<Key> {
        if self.queue.is_empty() && data.len() as u64 <= config.shm_frag_bytes {
            // One record on an idle connection: write it now, no queueing.
            set_ring_tag(&mut self.ring, self.tag);
            match self.ring.try_write(Kind::Msg, data.len() as u64, &data) {
                Ok(true) => {
                    self.bell.ring();
                    return Ok(requests.sends.insert(SendState::Done(Ok(data))));
                }
                Ok(false) => {}
                Err(e) => return Err(self.fail(corrupt(e), "while sending", requests)),
            }
        }
        let key = requests.sends.insert(SendState::Pending);
        self.queue.push_back(Queued {
            key: Some(key),
            tag: self.tag,
            data,
            written: 0,
            started: false,
        });
        requests.pending_sends += 1;
        self.progress(config, requests)?;
        Ok(key)
    }

    /// `try_send` of a message above `shm_eager_max` on an edge without cross-memory attach:
    /// copied into an internal buffer (bounded by `max_buffered_bytes`) and queued; the
    /// fragments go into the ring as it makes room (progress, later sends and receives).
    fn queue_copy(&mut self, data: &[u8], config: &Config, requests: &mut Requests) -> Result<()> {
        if requests.buffered_bytes + data.len() > config.max_buffered_bytes {
            return Err(Error::WouldBlock);
        }
        let mut copy = requests.pool.take(data.len());
        copy.copy_from_slice(data);
        requests.buffered_bytes += copy.len();
        requests.pending_sends += 1;
        self.queue.push_back(Queued {
            key: None,
            tag: self.tag,
            data: copy,
            written: 0,
            started: false,
        });
        self.progress(config, requests)
    }

    /// Pushes queued sends into the ring and completes finished rendezvous requests.
    pub(crate) fn progress(&mut self, config: &Config, requests: &mut Requests) -> Result<()> {
        if let Some(f) = &self.failure {
            return Err(f.to_error(self.peer, "while sending"));
        }
        match self.step(config, requests) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(corrupt(e), "while sending", requests)),
        }
    }

    /// [`ShmOut::progress`] without the failure handling.
    fn step(
        &mut self,
        config: &Config,
        requests: &mut Requests,
    ) -> std::result::Result<(), RingError> {
        if !self.inflight.is_empty() {
            self.complete_rendezvous(requests)?;
        }
        if let Some((seq, InflightOwner::Request(_, data) | InflightOwner::Buffered(data))) =
            self.inflight.front()
        {
            help_split(
                &self.ring,
                (self.pid, &self.pidfd),
                *seq,
                data.as_ptr() as u64,
                data.len() as u64,
            );
        }
        let wrote = self.write_queued(config, requests)?;
        if wrote {
            self.bell.ring();
        }
        Ok(())
    }

    /// Completes the rendezvous requests the receiver has finished.
    fn complete_rendezvous(
        &mut self,
        requests: &mut Requests,
    ) -> std::result::Result<(), RingError> {
        let done = self.ring.rndv_completed()?;
        while self.inflight.front().is_some_and(|(seq, _)| *seq <= done) {
            if let Some((_, owner)) = self.inflight.pop_front() {
                requests.pending_sends -= 1;
                match owner {
                    InflightOwner::Request(key, data) => requests.complete_send(key, Ok(data)),
                    InflightOwner::Buffered(data) => {
                        requests.buffered_bytes -= data.len();
                        requests.pool.give(data);
                    }
                    InflightOwner::Blocking => {}
                }
            }
        }
        Ok(())
    }

    /// Writes as much of the queue as the ring takes; whether anything was written.
    fn write_queued(
        &mut self,
        config: &Config,
        requests: &mut Requests,
    ) -> std::result::Result<bool, RingError> {
        let eager_max = usize::try_from(self.eager_max(config)).unwrap_or(usize::MAX);
        let frag = config.shm_frag_bytes as usize;
        let mut wrote = false;
        while let Some(q) = self.queue.front_mut() {
            set_ring_tag(&mut self.ring, q.tag);
            if q.data.len() <= eager_max {
                // A queued message begins only once all of it fits: a receiver that took
                // its first fragment waits in place for the rest, and if the rest waited
                // here for this endpoint's progress while this endpoint is itself waiting
                // mid-message for that receiver's queued rest, neither would move. (A
                // message over half the ring can never fit whole: it begins as it can.)
                let len = q.data.len() as u64;
                if !q.started && len <= self.ring.capacity() / 2 {
                    let tag_record = std::iter::repeat_n(8, self.ring.tag_records_needed());
                    if !self
                        .ring
                        .fits(tag_record.chain(frag_lens(len, frag as u64)))?
                    {
                        break;
                    }
                }
                let complete = write_eager_raw(
                    &mut self.ring,
                    &q.data,
                    &mut q.written,
                    &mut q.started,
                    frag,
                )?;
                wrote |= q.started;
                if !complete {
                    break;
                }
                if let Some(q) = self.queue.pop_front() {
                    requests.pending_sends -= 1;
                    match q.key {
                        Some(key) => requests.complete_send(key, Ok(q.data)),
                        None => {
                            requests.buffered_bytes -= q.data.len();
                            requests.pool.give(q.data);
                        }
                    }
                }
            } else {
                match self
                    .ring
                    .try_write_rndv(q.data.as_ptr() as u64, q.data.len() as u64)?
                {
                    Some(seq) => {
                        wrote = true;
                        if let Some(q) = self.queue.pop_front() {
                            self.inflight.push_back((seq, owner_of(q.key, q.data)));
                        }
                    }
                    None => break,
                }
            }
        }
        Ok(wrote)
    }

    /// Marks the edge failed, fails its pending requests, and returns the error.
    pub(crate) fn fail(
        &mut self,
        failure: Failure,
        during: &'static str,
        requests: &mut Requests,
    ) -> Error {
        let peer = self.peer;
        if self.failure.is_none() {
            self.failure = Some(failure.clone());
            while let Some(q) = self.queue.pop_front() {
                requests.pending_sends -= 1;
                match q.key {
                    Some(key) => requests.complete_send(key, Err(failure.to_error(peer, during))),
                    None => requests.buffered_bytes -= q.data.len(),
                }
            }
            while let Some((_, owner)) = self.inflight.pop_front() {
                requests.pending_sends -= 1;
                match owner {
                    InflightOwner::Request(key, _) => {
                        requests.complete_send(key, Err(failure.to_error(peer, during)));
                    }
                    InflightOwner::Buffered(data) => requests.buffered_bytes -= data.len(),
                    InflightOwner::Blocking => {}
                }
            }
            self.ring.close();
        }
        failure.to_error(peer, during)
    }

    /// One step of waiting on this edge (ring space or a rendezvous completion): spin, and
    /// once the spin budget is spent, sleep on the ring's futex ([`ShmOut::wait_step`]).
    fn wait(
        &mut self,
        wait: &mut Wait,
        what: &'static str,
        cx: &mut EdgeContext<'_>,
        flush: &mut dyn FnMut(Addr, bool) -> bool,
    ) -> Result<()> {
        self.wait_step(wait, |edge, wait, look| {
            let slept = if let Look::AfterSleep(seen) = look {
                // A futex watches nothing else: the rank's meanwhile (in `flush`) runs after
                // each sleep, which is short while peers' one-sided requests may be waiting.
                edge.ring.wait(seen, cx.local.blind_sleep(SLEEP_SLICE));
                true
            } else {
                false
            };
            let peer_waiting = flush(edge.peer, wait.waited() >= CYCLE_PATIENCE);
            edge.look_for_deadlock(peer_waiting, cx)?;
            let detect = cx.config.detect;
            if slept || detect.is_some_and(|detect| wait.liveness_due(cx.detection, detect)) {
                edge.look_alive(what, cx)?;
            }
            wait.check_deadline(what)
        })
    }

    /// A look, while a blocking send waits, at whether the peer is asleep in a blocking send
    /// to this endpoint with a message beyond the read-ahead bound (`peer_waiting`).
    /// Neither can then ever take the other's message:
    /// seen so at every look for a quarter of the detection time (a flag of the peer's that
    /// was stale when first read would have cleared by then), the connection fails with
    /// [`Error::SendDeadlock`]. Off when detection is (`QUIVER_DETECT_MS=0`).
    fn look_for_deadlock(&mut self, peer_waiting: bool, cx: &mut EdgeContext<'_>) -> Result<()> {
        let Some(detect) = cx.config.detect else {
            return Ok(());
        };
        if !peer_waiting {
            self.peer_waiting_since = None;
            return Ok(());
        }
        let now = Instant::now();
        let since = *self.peer_waiting_since.get_or_insert(now);
        if now.duration_since(since) < detect / 4 {
            return Ok(());
        }
        tracing::warn!(target: "quiver::endpoint", peer = %self.peer, "send-send deadlock: the peer is blocked sending to this endpoint while this endpoint is blocked sending to it");
        Err(self.fail(Failure::SendDeadlock("shm"), "while sending", cx.requests))
    }

    /// [`ShmOut::check_alive`], counted as a liveness look.
    fn look_alive(&mut self, what: &'static str, cx: &mut EdgeContext<'_>) -> Result<()> {
        let started = Instant::now();
        let alive = self.check_alive(what, cx.config, cx.requests);
        cx.detection.record(started);
        alive
    }

    /// Whether the receiver still lives and has not closed or stopped; otherwise harvests
    /// what it completed and fails the rest.
    fn check_alive(
        &mut self,
        what: &'static str,
        config: &Config,
        requests: &mut Requests,
    ) -> Result<()> {
        if let Some(f) = &self.failure {
            return Err(f.to_error(self.peer, what));
        }
        let closed = self.ring.consumer_closed();
        if !closed && !sys::pidfd_exited(&self.pidfd) {
            if let Some(detect) = config.detect {
                if let Some(ms) = self.freeze.stopped(self.pid, detect, Instant::now()) {
                    // Whatever it completed before it stopped still counts.
                    self.progress(config, requests)?;
                    return Err(self.fail(Failure::Stopped("shm", ms), what, requests));
                }
            }
            return Ok(());
        }
        // The receiver is gone, but it may have finished our requests first: harvest
        // every completion it published before failing what is left.
        self.progress(config, requests)?;
        let failure = if closed {
            Failure::Closed
        } else {
            Failure::Dead
        };
        Err(self.fail(failure, what, requests))
    }

    /// The endpoint's periodic liveness look at this edge: a receiver that exited or stopped
    /// while requests are pending fails them (after harvesting what it completed).
    pub(crate) fn check_liveness(
        &mut self,
        now: Instant,
        config: &Config,
        requests: &mut Requests,
    ) {
        if self.failure.is_some() || !self.busy() {
            return;
        }
        let failure = if sys::pidfd_exited(&self.pidfd) {
            Failure::Dead
        } else if let Some(ms) = config
            .detect
            .and_then(|d| self.freeze.stopped(self.pid, d, now))
        {
            Failure::Stopped("shm", ms)
        } else {
            return;
        };
        // Whatever the receiver completed before it died is harvested first.
        if self.progress(config, requests).is_ok() && self.busy() {
            self.fail(failure, "while sending", requests);
        }
    }

    /// Closes the edge (the endpoint closes): the receiver sees the end of the ring.
    pub(crate) fn close(&mut self) {
        if self.failure.is_none() {
            self.ring.close();
            self.bell.ring();
        }
    }
}

/// When a wait on the ring looks ([`ShmOut::wait_step`]).
#[derive(Clone, Copy)]
enum Look {
    /// At a periodic tick of the spin.
    Periodic,
    /// Past the spin: the look sleeps on the ring's futex first (the wake sequence it saw
    /// when it announced the wait).
    AfterSleep(u32),
}
