//! Tagged messages: sends that carry a 64-bit tag, and receives, probes and posted
//! receives that name a source, a tag and a mask ([`MatchSpec`]), under MPI's rules
//! (`matching.rs`: messages of one sender matched in the order they were sent, posted
//! receives in the order they were posted).
//!
//! A message nobody wants yet waits in the endpoint's matcher (unexpected), in a buffer of
//! the pool, or, beyond `QUIVER_UNEXPECTED_BYTES` of those, in the endpoint's spill file
//! (`spill.rs`, read back straight into the buffer of the receive that matches it). While
//! the matcher holds nothing and has no receive posted, every plain call takes today's
//! path (one test, `Matcher::is_idle`), and a tagged call takes the next message straight
//! from the transports.

use std::sync::atomic::Ordering;

use super::matching::{Arrival, Envelope, Held, MatchSpec, MatchingStats};
use super::spill::Spilled;
use super::{Connection, Endpoint, RecvRequest, SendRequest};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::pool::PooledBuf;
use crate::slab::Key;
use crate::transport::dest::Dest;
use crate::transport::edge::InEdge;
use crate::transport::requests::{RecvCompletion, RecvState};
use crate::transport::wait::Wait;
use crate::transport::wire_tag::WireTag;

impl Endpoint {
    /// Sends `data` as one message with `tag`, blocking as [`Endpoint::send`] does. A plain
    /// `send` is tag 0; messages of one connection arrive in order whatever their tags.
    ///
    /// # Errors
    /// As [`Endpoint::send`].
    pub fn send_tagged(&mut self, conn: Connection, tag: u64, data: &[u8]) -> Result<()> {
        let idx = self.tag_edge(conn, WireTag::tag(tag));
        let result = self.send(conn, data);
        self.untag(idx);
        result
    }

    /// [`Endpoint::try_send`] with a tag.
    ///
    /// # Errors
    /// As [`Endpoint::try_send`].
    pub fn try_send_tagged(&mut self, conn: Connection, tag: u64, data: &[u8]) -> Result<()> {
        let idx = self.tag_edge(conn, WireTag::tag(tag));
        let result = self.try_send(conn, data);
        self.untag(idx);
        result
    }

    /// [`Endpoint::post_send`] with a tag.
    ///
    /// # Errors
    /// As [`Endpoint::post_send`].
    pub fn post_send_tagged(
        &mut self,
        conn: Connection,
        tag: u64,
        data: Vec<u8>,
    ) -> Result<SendRequest> {
        let idx = self.tag_edge(conn, WireTag::tag(tag));
        let result = self.post_send(conn, data);
        self.untag(idx);
        result
    }

    /// What the tag matching of this endpoint holds now (unexpected messages and their
    /// bytes, matching receives posted) and its counters (the most bytes unexpected
    /// messages held at once, staging copies made). Reading it costs nothing per message.
    pub fn matching_stats(&self) -> MatchingStats {
        self.matcher.public_stats()
    }

    /// Tags the sends that follow on `conn`'s edge, when `conn` is this endpoint's; the send
    /// itself checks `conn` (one check per message, not two), and [`Endpoint::untag`]
    /// undoes the tag whatever the send returned.
    #[inline]
    pub(super) fn tag_edge(&mut self, conn: Connection, tag: WireTag) -> usize {
        let idx = conn.index as usize;
        if conn.endpoint_id == self.id {
            if let Some(out) = self.outbound.get_mut(idx) {
                out.set_tag(tag);
            }
        }
        idx
    }

    /// The sends after a tagged one are untagged again.
    pub(super) fn untag(&mut self, idx: usize) {
        if let Some(out) = self.outbound.get_mut(idx) {
            out.set_tag(WireTag::default());
        }
    }

    /// Receives the earliest message `spec` matches into `buf`, blocking until one
    /// arrives; returns its sender, tag and length. Receives posted earlier take the
    /// messages they match first; messages that match neither wait for a later receive.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] (the message stays queued), a peer error of one inbound
    /// connection, [`Error::Timeout`].
    pub fn recv_matching(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Envelope> {
        self.refuse_in_handler("recv_matching")?;
        let mut wait = Wait::new(&self.config);
        loop {
            // A look first, as `recv`'s loop: a message already there is taken at once.
            if self.matcher.is_idle() && self.requests.posted_recvs.is_empty() {
                // A quiet endpoint looks as `recv` does, here rather than behind
                // `take_matching`: the envelope is built in the return, in the frame that
                // returns it (each copy of a result across frames read back what was just
                // stored, a store-forwarding stall: decision 0102).
                match self.poll_once(&mut Dest::Slice(buf), true) {
                    Ok(Some((len, source))) => {
                        let tag = self.last_tag.value;
                        let len = len as u64;
                        if spec.matches(source, tag) {
                            return Ok(Envelope { source, tag, len });
                        }
                        self.hold_unmatched(Envelope { source, tag, len }, buf);
                        continue;
                    }
                    Ok(None) => {}
                    // Too long for `buf`: `take_matching` takes it into a pool buffer.
                    Err(Error::BufferTooSmall { .. }) => {
                        if let Some(got) = self.take_matching(spec, buf, true)? {
                            return Ok(got);
                        }
                    }
                    Err(e) => return Err(self.uncommit(buf, e)),
                }
            } else if let Some(got) = self.take_matching(spec, buf, true)? {
                return Ok(got);
            }
            if let Some(end) = self.end_of(spec.source) {
                return Err(end);
            }
            self.advance();
            if let Err(e) = self.idle(&mut wait, "waiting for a matching message") {
                return Err(self.uncommit(buf, e));
            }
        }
    }

    /// [`Endpoint::recv_matching`] if a matching message is complete now.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if none is; otherwise as [`Endpoint::recv_matching`].
    pub fn try_recv_matching(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Envelope> {
        self.refuse_in_handler("try_recv_matching")?;
        self.advance();
        match self.take_matching(spec, buf, false)? {
            Some(got) => Ok(got),
            None => self.end_or_would_block(spec),
        }
    }

    /// Waits for the earliest message `spec` matches and reports its sender, tag and length
    /// without taking it: a receive with the same `spec` then takes that message.
    ///
    /// # Errors
    /// A peer error of one inbound connection, [`Error::Timeout`].
    pub fn probe(&mut self, spec: MatchSpec) -> Result<Envelope> {
        self.refuse_in_handler("probe")?;
        let mut wait = Wait::new(&self.config);
        loop {
            self.advance();
            if let Some(got) = self.probe_now(spec, true)? {
                return Ok(got);
            }
            if let Some(end) = self.end_of(spec.source) {
                return Err(end);
            }
            self.idle(&mut wait, "probing for a matching message")?;
        }
    }

    /// [`Endpoint::probe`] without waiting.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if no matching message is complete now.
    pub fn try_probe(&mut self, spec: MatchSpec) -> Result<Envelope> {
        self.refuse_in_handler("try_probe")?;
        self.advance();
        match self.probe_now(spec, false)? {
            Some(got) => Ok(got),
            None => self.end_or_would_block(spec),
        }
    }

    /// Nothing matching `spec` now: the clean end of the peers that could send it, or
    /// [`Error::WouldBlock`].
    fn end_or_would_block<T>(&mut self, spec: MatchSpec) -> Result<T> {
        match self.end_of(spec.source) {
            Some(end) => Err(end),
            None => self.would_block(),
        }
    }

    /// Posts a receive of the earliest message `spec` matches (not claimed by a receive
    /// posted earlier) into `buf`; complete it with [`Endpoint::wait_recv`], whose
    /// [`RecvCompletion`] gives the sender, tag and length.
    ///
    /// # Errors
    /// None today; reserved.
    pub fn post_recv_matching(&mut self, spec: MatchSpec, buf: Vec<u8>) -> Result<RecvRequest> {
        self.refuse_in_handler("post_recv_matching")?;
        let key = self.requests.recvs.insert(RecvState::Pending(buf));
        if let Some((key, envelope, held)) = self.matcher.post(spec, key) {
            self.complete_matched(key, envelope, held);
        }
        self.progress_matched();
        Ok(RecvRequest { key })
    }

    /// Takes the earliest message `spec` matches: the unexpected ones first, then the
    /// transports' next messages (queued unexpected when they do not match).
    ///
    /// While no receive posted earlier could claim the next message (no matching receive
    /// and no plain posted one waits) and no unexpected message matches, the next message
    /// goes straight into `buf`, whatever the matcher holds: a large message that matches
    /// is pulled (shm), read (tcp) or placed (datagrams) into the caller's buffer with no
    /// staging copy. One that does not match is copied out to wait (one copy more than a
    /// pull into a pool buffer, paid only by unmatched messages that fit `buf`).
    fn take_matching(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
        wait: bool,
    ) -> Result<Option<Envelope>> {
        loop {
            if let Some(&envelope) = self.matcher.probe(spec) {
                Dest::Slice(buf).fits(envelope.len)?;
                if let Some((envelope, held)) = self.matcher.take(spec) {
                    self.held_into(envelope, held, buf)?;
                    return Ok(Some(envelope));
                }
            }
            if self.matcher.posted_len() == 0 && self.requests.posted_recvs.is_empty() {
                match self.poll_once(&mut Dest::Slice(buf), wait) {
                    Ok(Some((len, source))) => {
                        let envelope = Envelope {
                            source,
                            tag: self.last_tag.value,
                            len: len as u64,
                        };
                        if spec.matches(source, envelope.tag) {
                            return Ok(Some(envelope));
                        }
                        self.hold_unmatched(envelope, buf);
                        continue;
                    }
                    Ok(None) => return Ok(None),
                    // Too long for `buf`: taken into a pool buffer below.
                    Err(Error::BufferTooSmall { .. }) => {}
                    // A large tcp message begun into `buf` stays whole for a later receive.
                    Err(e) => return Err(self.uncommit(buf, e)),
                }
            }
            if !self.pull_for_posted(wait)? {
                return Ok(None);
            }
        }
    }

    /// Copies a message a look took into a receive's `buf` that the receive does not want
    /// out to wait in the matcher.
    fn hold_unmatched(&mut self, envelope: Envelope, buf: &[u8]) {
        let len = envelope.len as usize;
        let mut payload = self.requests.pool.take(len);
        payload.copy_from_slice(&buf[..len]);
        self.arrive(envelope, payload);
    }

    /// The earliest message `spec` matches, taking in what the transports have until one
    /// matches.
    fn probe_now(&mut self, spec: MatchSpec, wait: bool) -> Result<Option<Envelope>> {
        loop {
            if let Some(&envelope) = self.matcher.probe(spec) {
                return Ok(Some(envelope));
            }
            if !self.pull(wait)? {
                return Ok(None);
            }
        }
    }

    /// A plain receive on an endpoint whose matcher is busy: the earliest message of any
    /// source and tag, as [`Endpoint::recv_pooled`] gives it.
    pub(super) fn take_any_pooled(&mut self, wait: bool) -> Result<Option<PooledBuf>> {
        loop {
            if let Some((envelope, held)) = self.matcher.take(MatchSpec::ANY) {
                let payload = self.held_payload(held)?;
                let pool = self.requests.pool.clone();
                return Ok(Some(PooledBuf::new(payload, envelope.source, pool)));
            }
            if !self.pull(wait)? {
                return Ok(None);
            }
        }
    }

    /// Takes one message from the transports into a pool buffer and gives it to the
    /// matcher (a posted receive it matches, or the unexpected queue). False when none is
    /// there, or while plain posted receives (which take any message) are waiting.
    pub(super) fn pull(&mut self, wait: bool) -> Result<bool> {
        if !self.requests.posted_recvs.is_empty() {
            return Ok(false);
        }
        let mut payload = self.requests.take_scratch();
        let got = match self.poll_once(&mut Dest::Owned(&mut payload), wait) {
            Ok(got) => got,
            Err(e) => {
                self.requests.keep_scratch(payload);
                return Err(e);
            }
        };
        let Some((len, source)) = got else {
            self.requests.keep_scratch(payload);
            return Ok(false);
        };
        payload.truncate(len);
        let envelope = Envelope {
            source,
            tag: self.last_tag.value,
            len: len as u64,
        };
        self.arrive(envelope, payload);
        Ok(true)
    }

    /// Takes one message from the transports for the matcher: straight into the buffer of
    /// the posted receive it matches, its envelope read before its payload moves
    /// ([`Endpoint::pull_into_posted`]), else into a pool buffer ([`Endpoint::pull`]).
    fn pull_for_posted(&mut self, wait: bool) -> Result<bool> {
        match self.pull_into_posted()? {
            IntoPosted::Took => Ok(true),
            // No edge had a message: a look by `pull` now
            // could take one that arrived since into a pool buffer instead of the receive it
            // matches. The caller's next round looks again this way.
            IntoPosted::AllEmpty => {
                if self.inbox.has_incoming.load(Ordering::Relaxed) {
                    self.adopt_new_inbound();
                }
                Ok(false)
            }
            IntoPosted::Other => self.pull(wait),
        }
    }

    /// Looks (round robin, without waiting) at every edge's next message's envelope before
    /// its payload moves ([`InEdge::next_tag`]; the datagram engine polled once first);
    /// the first next message a posted matching receive matches, and whose buffer it fits,
    /// is taken straight into that buffer (no staging copy: a rendezvous is pulled into it,
    /// a large tcp message read into it from the socket, a datagram message still arriving
    /// placed into it frame by frame).
    /// True if one was, or if a look took an empty message (handed on as `pull` does).
    ///
    /// [`InEdge::next_tag`]: crate::transport::edge::InEdge::next_tag
    fn pull_into_posted(&mut self) -> Result<IntoPosted> {
        if self.matcher.posted_len() == 0
            || !self.requests.posted_recvs.is_empty()
            || self.committed.is_some()
        {
            return Ok(IntoPosted::Other);
        }
        // The datagram engine's news (frames, and new connections, adopted by the caller)
        // before the looks at its edges.
        if self.local.dgram.is_some() {
            self.poll_engine_for_look(false);
        }
        // Set once an edge's next message is one for `pull`.
        let mut other = false;
        let n = self.inbound.len();
        for k in 0..n {
            let i = (self.next_inbound + k) % n;
            let network = self.inbound[i].is_network();
            if network && self.inbound[i].is_done() {
                continue;
            }
            // An empty destination: the look tells the next message's length and leaves it.
            let len = match self.look_at(i, &mut Dest::Slice(&mut []), false, false) {
                Ok(None) => {
                    if network && self.inbound[i].is_done() {
                        // Ended in this look, as `poll_once` sees an edge end.
                        self.network_edge_ended(i);
                    }
                    continue;
                }
                Err(Error::BufferTooSmall { message, .. }) => message,
                Ok(Some(_)) => {
                    self.empty_message_taken(i)?;
                    return Ok(IntoPosted::Took);
                }
                Err(e) => return Err(e),
            };
            // A message no posted receive takes here is `pull`'s.
            other = true;
            let tag = self.inbound[i].next_tag();
            if tag.am {
                // Its handler runs where `pull` takes it.
                continue;
            }
            let envelope = Envelope {
                source: self.inbound[i].peer(),
                tag: tag.value,
                len: len as u64,
            };
            if self.take_into_posted(i, envelope)? {
                self.next_inbound = if i + 1 == n { 0 } else { i + 1 };
                return Ok(IntoPosted::Took);
            }
        }
        Ok(if other {
            IntoPosted::Other
        } else {
            IntoPosted::AllEmpty
        })
    }

    /// Edge `i`'s next message (`envelope`, left in place by a look) straight into the
    /// buffer of the earliest-posted receive it matches, if that buffer fits it (a receive
    /// too short is left to `pull`, which fails it as any matched receive). A large tcp
    /// message still arriving binds the receive (its buffer moves into the edge, which
    /// reads the rest from the socket into it and completes the request once it is whole:
    /// [`Endpoint::progress_bound_recvs`]), and so does a datagram message not whole yet
    /// (its buffer moves into the engine, which places the frames there); the matcher lets
    /// go of the receive either way.
    fn take_into_posted(&mut self, i: usize, envelope: Envelope) -> Result<bool> {
        let Some(&key) = self.matcher.posted_for(&envelope) else {
            return Ok(false);
        };
        let mut buf = match self.requests.recvs.get_mut(key) {
            Some(RecvState::Pending(buf)) if buf.len() as u64 >= envelope.len => {
                std::mem::take(buf)
            }
            _ => return Ok(false),
        };
        let mut dest = Dest::Posted {
            key,
            buf: &mut buf,
            bound: false,
        };
        let got = self.look_at(i, &mut dest, false, false);
        if let Dest::Posted { bound: true, .. } = dest {
            self.matcher.cancel(&key);
            return Ok(true);
        }
        match got {
            Ok(Some(len)) => {
                let tag = self.inbound[i].tag().value;
                debug_assert_eq!((len as u64, tag), (envelope.len, envelope.tag));
                self.matcher.cancel(&key);
                let done = RecvCompletion {
                    buf,
                    len,
                    src: envelope.source,
                    tag,
                };
                self.requests.set_recv(key, RecvState::Done(Ok(done)));
                Ok(true)
            }
            other => {
                self.requests.set_recv(key, RecvState::Pending(buf));
                other.map(|_| false)
            }
        }
    }

    /// A look for an envelope took edge `i`'s next message whole: an empty one. It goes on
    /// as a look's message does (its handler, or the matcher).
    fn empty_message_taken(&mut self, i: usize) -> Result<()> {
        let tag = self.inbound[i].tag();
        if tag.am {
            return self.run_handler(i, tag, &[]);
        }
        let envelope = Envelope {
            source: self.inbound[i].peer(),
            tag: tag.value,
            len: 0,
        };
        let payload = self.requests.pool.take(0);
        self.arrive(envelope, payload);
        Ok(())
    }

    /// A message arrives at the matcher: a posted receive it matches takes it; otherwise
    /// it waits, its payload in memory within the bound, written to the spill file beyond
    /// (its pool buffer given back), or kept in memory if the spill fails (warned once).
    pub(super) fn arrive(&mut self, envelope: Envelope, payload: Vec<u8>) {
        let mut payload = Some(payload);
        let spill = &mut self.spill;
        let pool = &self.requests.pool;
        let arrival = self.matcher.arrive(
            envelope,
            || payload.take().expect("the matcher fetches a payload once"),
            |fetched| match spill.write(&fetched) {
                Ok(spilled) => {
                    pool.give(fetched);
                    Ok(spilled)
                }
                Err(e) => {
                    spill.warn_once(&e);
                    Err(fetched)
                }
            },
        );
        match arrival {
            Arrival::Posted(key) => {
                let payload = payload.take().expect("not fetched: it went to a receive");
                self.complete_matched(key, envelope, Held::Here(payload));
            }
            Arrival::Queued | Arrival::Spilled => {}
        }
    }

    /// An unexpected message's payload into `buf` (which fits it): copied from its pool
    /// buffer, or read back from the spill file straight into `buf`. Either is a staging
    /// copy (counted).
    ///
    /// # Errors
    /// The spill file's read failed ([`Error::Io`] naming the spill directory).
    fn held_into(
        &mut self,
        envelope: Envelope,
        held: Held<Vec<u8>, Spilled>,
        buf: &mut [u8],
    ) -> Result<()> {
        self.matcher.count_staged(envelope.len);
        match held {
            Held::Here(payload) => {
                buf[..payload.len()].copy_from_slice(&payload);
                self.requests.pool.give(payload);
                Ok(())
            }
            Held::Spilled(spilled) => Ok(self.spill.read_into(spilled, buf)?),
        }
    }

    /// An unexpected message's payload in a pool buffer of its length (read back from the
    /// spill file when it was spilled).
    ///
    /// # Errors
    /// The spill file's read failed.
    fn held_payload(&mut self, held: Held<Vec<u8>, Spilled>) -> Result<Vec<u8>> {
        match held {
            Held::Here(payload) => Ok(payload),
            Held::Spilled(spilled) => {
                let mut payload = self.requests.pool.take(spilled.len());
                match self.spill.read_into(spilled, &mut payload) {
                    Ok(()) => Ok(payload),
                    Err(e) => {
                        self.requests.pool.give(payload);
                        Err(e.into())
                    }
                }
            }
        }
    }

    /// Completes posted receive `key` with the message it matched (a message longer than
    /// its buffer fails it with `BufferTooSmall` and waits, unexpected, for another).
    fn complete_matched(&mut self, key: Key, envelope: Envelope, held: Held<Vec<u8>, Spilled>) {
        let Some(RecvState::Pending(buf)) = self.requests.recvs.get_mut(key) else {
            if let Held::Spilled(spilled) = held {
                self.spill.release(spilled);
            }
            return;
        };
        let mut buf = std::mem::take(buf);
        let state = match Dest::Slice(&mut buf).fits(envelope.len) {
            Ok(()) => match self.held_into(envelope, held, &mut buf) {
                Ok(()) => RecvState::Done(Ok(RecvCompletion {
                    buf,
                    len: envelope.len as usize,
                    src: envelope.source,
                    tag: envelope.tag,
                })),
                Err(e) => RecvState::Done(Err(e)),
            },
            Err(e) => match self.held_payload(held) {
                Ok(payload) => {
                    self.arrive(envelope, payload);
                    RecvState::Done(Err(e))
                }
                Err(read) => RecvState::Done(Err(read)),
            },
        };
        self.requests.set_recv(key, state);
    }

    /// Gives the posted matching receives what the transports have now; a peer error goes
    /// to the earliest-posted one.
    pub(super) fn progress_matched(&mut self) {
        while self.matcher.posted_len() > 0 {
            match self.pull_for_posted(false) {
                Ok(true) => {}
                Ok(false) => {
                    if self.inbound.iter().any(InEdge::ended) {
                        self.end_posted_from_closed();
                    }
                    return;
                }
                Err(e) => {
                    if let Some(key) = self.matcher.pop_posted() {
                        self.requests.set_recv(key, RecvState::Done(Err(e)));
                    }
                }
            }
        }
    }

    /// Completes with [`Error::PeerClosed`] the posted matching receives only a closed peer
    /// could satisfy (every message it sent taken, as a blocking receive sees it:
    /// [`Endpoint::end_of`]): those naming it, and the earliest any-source one once no
    /// inbound connection can deliver (once per closed connection).
    #[cold]
    fn end_posted_from_closed(&mut self) {
        let mut peers: Vec<Addr> = self.inbound.iter().map(InEdge::peer).collect();
        peers.dedup();
        for peer in peers {
            if self.end_of(Some(peer)).is_none() {
                continue;
            }
            while let Some((_, key)) = self.matcher.withdraw_from_ended(|named| named == peer) {
                self.requests
                    .set_recv(key, RecvState::Done(Err(Error::PeerClosed { peer })));
            }
        }
        if let Some(&key) = self.matcher.posted_from(None) {
            if let Some(end) = self.end_of(None) {
                self.matcher.cancel(&key);
                self.requests.set_recv(key, RecvState::Done(Err(end)));
            }
        }
    }
}

/// What [`Endpoint::pull_into_posted`] found.
enum IntoPosted {
    /// A message went straight into a posted receive (or an empty one was handed on).
    Took,
    /// No inbound edge had a message.
    AllEmpty,
    /// Something for [`Endpoint::pull`]: a message no posted receive takes, or posted
    /// receives of another kind.
    Other,
}
