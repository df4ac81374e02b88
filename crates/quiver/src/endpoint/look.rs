//! One look at the endpoint's inbound edges, round robin, for a message for a
//! destination; and the short paths a blocking `recv` takes when one network edge is all
//! the endpoint has.

use std::sync::atomic::Ordering;

use super::matching::Envelope;
use super::Endpoint;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::dest::Dest;
use crate::transport::dgram::endpoint_side::LoneEdge;
use crate::transport::edge::{InEdge, Look};

/// The largest buffer the intake from shm rings keeps between looks.
const INTAKE_KEEP_BYTES: usize = 64 << 10;

impl Endpoint {
    /// Looks once at every inbound edge (round robin) for a message to deliver into `dest`.
    /// With `wait`, a message that has begun may be waited for to its end. Inside a
    /// blocking `recv` that has begun a large tcp message, only at that edge.
    pub(super) fn poll_once(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
    ) -> Result<Option<(usize, Addr)>> {
        if let Some(i) = self.committed {
            // This `recv` is in the middle of a large tcp message: nothing else goes in.
            self.poll_engine_for_look(wait);
            let got = self.look_at(i, dest, wait, false)?;
            self.last_tag = self.inbound[i].tag();
            if let (Some(len), true) = (got, self.last_tag.am) {
                // It was an active message: its handler has it, the receive goes on.
                self.run_handler(i, self.last_tag, dest.filled(len))?;
                return Ok(None);
            }
            return Ok(got.map(|len| (len, self.inbound[i].peer())));
        }
        if self.inbox.has_incoming.load(Ordering::Relaxed) {
            self.adopt_new_inbound();
        }
        // The datagram engine is polled once, before the first network edge's look (or at
        // the end, to bring in new connections); open datagram edges that had nothing at
        // this news count have nothing now.
        let mut news: Option<Option<u64>> = None;
        let n = self.inbound.len();
        for k in 0..n {
            let mut i = self.next_inbound + k;
            if i >= n {
                i -= n;
            }
            // A shm edge's look passes over it when done; a network edge is skipped here,
            // before the engine is polled for it.
            let network = self.inbound[i].is_network();
            if network && self.inbound[i].is_done() {
                continue;
            }
            let skip_dgram = network && {
                let polled = *news.get_or_insert_with(|| self.poll_engine_for_look(wait));
                polled.is_some() && self.dgram.seen == polled
            };
            let got = if self.am.placing != 0 && !network {
                // A handler may choose where its payload goes: the envelope first.
                self.look_placing(i, dest, wait)
            } else {
                self.look_at(i, dest, wait, skip_dgram)
            };
            if network && !matches!(got, Ok(None)) {
                self.dgram.seen = None;
            }
            if network && matches!(got, Ok(None)) && self.inbound[i].is_done() {
                // Ended in this look (done network edges are passed over above).
                self.network_edge_ended(i);
            }
            let got = match got {
                // An active message goes to its handler whatever the receive's buffer.
                Err(Error::BufferTooSmall { .. }) if self.inbound[i].next_tag().am => {
                    self.take_am_pooled(i, wait)?
                }
                got => got?,
            };
            if let Some(len) = got {
                self.last_tag = self.inbound[i].tag();
                self.next_inbound = if i + 1 == n { 0 } else { i + 1 };
                if self.last_tag.am {
                    // Its handler runs now; the look goes on at the next edge.
                    self.run_handler(i, self.last_tag, dest.filled(len))?;
                    continue;
                }
                return Ok(Some((len, self.inbound[i].peer())));
            }
            if self.committed.is_some() {
                // This look began a large tcp message straight into the caller's buffer:
                // no other edge's message may go into that buffer now (the next look goes
                // on with this edge only).
                self.dgram.seen = None;
                return Ok(None);
            }
            if let Dest::Posted { bound: true, .. } = dest {
                // The posted receive took a large message that is still arriving.
                self.next_inbound = if i + 1 == n { 0 } else { i + 1 };
                self.dgram.seen = None;
                return Ok(None);
            }
        }
        if news.is_none() && self.local.dgram.is_some() {
            news = Some(self.poll_engine_for_look(wait));
        }
        if let Some(news) = news {
            self.dgram.seen = news;
        }
        Ok(None)
    }

    /// The handlers' intake from shm rings (`progress`), when no look needs the general
    /// path's care: every inbound edge is a ring, no handler chooses its payload's buffer,
    /// no plain posted receive waits, no new connection is to be adopted and no large
    /// message has begun. Each edge is looked at once, round robin, into the intake's
    /// buffer; an active message runs its handler, a plain one goes to the matcher and
    /// ends the look (true).
    pub(super) fn take_in_from_rings(&mut self) -> Result<bool> {
        let mut payload = std::mem::take(&mut self.am.intake);
        let n = self.inbound.len();
        for k in 0..n {
            let mut i = self.next_inbound + k;
            if i >= n {
                i -= n;
            }
            let len = match self.look_at(i, &mut Dest::Owned(&mut payload), false, false) {
                Ok(Some(len)) => len,
                Ok(None) => continue,
                Err(e) => {
                    self.keep_intake(payload);
                    return Err(e);
                }
            };
            self.next_inbound = if i + 1 == n { 0 } else { i + 1 };
            let tag = self.inbound[i].tag();
            self.last_tag = tag;
            if tag.am {
                if let Err(e) = self.run_handler(i, tag, &payload[..len]) {
                    self.keep_intake(payload);
                    return Err(e);
                }
                continue;
            }
            payload.truncate(len);
            let envelope = Envelope {
                source: self.inbound[i].peer(),
                tag: tag.value,
                len: len as u64,
            };
            self.arrive(envelope, payload);
            return Ok(true);
        }
        self.keep_intake(payload);
        Ok(false)
    }

    /// Keeps the intake's buffer for the next look, unless a large message grew it (then
    /// the next look begins with an empty one).
    fn keep_intake(&mut self, payload: Vec<u8>) {
        if payload.capacity() <= INTAKE_KEEP_BYTES {
            self.am.intake = payload;
        }
    }

    /// Takes the active message a receive's buffer was too small for into a pool buffer
    /// and runs its handler (no message for the caller).
    #[cold]
    #[inline(never)]
    fn take_am_pooled(&mut self, i: usize, wait: bool) -> Result<Option<usize>> {
        let mut buf = self.requests.pool.take(0);
        let got = self.look_at(i, &mut Dest::Owned(&mut buf), wait, false);
        let result = match got {
            Ok(Some(len)) => {
                let tag = self.inbound[i].tag();
                if tag.am {
                    self.run_handler(i, tag, &buf[..len])
                } else {
                    // Not reached: the edge said its next message was an active one. Were
                    // it plain, it would wait for a receive that fits it.
                    let envelope = Envelope {
                        source: self.inbound[i].peer(),
                        tag: tag.value,
                        len: len as u64,
                    };
                    buf.truncate(len);
                    self.arrive(envelope, std::mem::take(&mut buf));
                    Ok(())
                }
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        self.requests.pool.give(buf);
        result.map(|()| None)
    }

    /// Network inbound edge `i` ended in the last look: when its peer closed it cleanly, an
    /// outbound edge riding on the same connection ends too ([`OutEdge::peer_closed`](crate::transport::edge::OutEdge::peer_closed)).
    #[cold]
    pub(super) fn network_edge_ended(&mut self, i: usize) {
        if !self.inbound[i].peer_end().closed {
            return;
        }
        let super::Parts {
            outbound,
            inbound,
            mut cx,
            ..
        } = self.parts();
        for out in outbound.iter_mut() {
            out.peer_closed(&inbound[i], &mut cx);
        }
    }

    /// The clean end a receive from `source` (`None`: any) reports now instead of
    /// waiting: [`Error::PeerClosed`] once every inbound edge that could satisfy it has
    /// ended, every message taken, and one of them was closed by its peer. A receive
    /// naming the peer gets it every time (nothing else can satisfy it); an any-source
    /// receive once per closed edge (after that it waits, as an endpoint nobody connected
    /// to does, for a new connection). None while an edge may still deliver: one test in
    /// the common case, made only when a look found nothing.
    pub(super) fn end_of(&mut self, source: Option<Addr>) -> Option<Error> {
        let from = |inb: &InEdge| source.is_none_or(|s| inb.peer() == s);
        if self.inbound.iter().any(|inb| from(inb) && !inb.ended())
            || self.inbox.has_incoming.load(Ordering::Relaxed)
        {
            return None;
        }
        self.inbound
            .iter_mut()
            .filter(|inb| from(inb))
            .find_map(|inb| {
                let peer = inb.peer();
                let end = inb.peer_end();
                let report = end.closed && (source.is_some() || !end.reported);
                end.reported |= report;
                report.then_some(Error::PeerClosed { peer })
            })
    }

    /// Whether an any-source receive would report a clean end now ([`Endpoint::end_of`]),
    /// without reporting it (for `arm`).
    pub(super) fn end_pending(&mut self) -> bool {
        !self.inbound.iter().any(|inb| !inb.ended())
            && self.inbound.iter_mut().any(|inb| {
                let end = inb.peer_end();
                end.closed && !end.reported
            })
    }

    /// Polls the datagram engine before looking at network edges, if one runs: a blocking
    /// receive takes the rest of a large message straight into its buffer once it has
    /// begun it, so it brings in only the message's start here; no poll while a whole
    /// message waits in a connection's window (`DgramShared::news_if_buffered`). The
    /// engine's news count.
    pub(super) fn poll_engine_for_look(&mut self, wait: bool) -> Option<u64> {
        let engine = self.local.dgram.as_ref()?;
        // A whole message already in one of its connections' windows (small messages share
        // frames) is looked for without a poll, a bounded number of times in a row; every
        // datagram edge is looked at then.
        let ids = self.inbound.iter().filter_map(InEdge::dgram_id);
        if let Some(news) = engine.news_if_buffered(ids) {
            self.dgram.seen = None;
            return Some(news);
        }
        let news = if wait {
            engine.poll_io_before_receive(&self.local)
        } else {
            engine.poll_io(&self.local)
        };
        self.dgram.engine_polled = true;
        Some(news)
    }

    /// One look at inbound edge `i` ([`InEdge::look`]).
    pub(super) fn look_at(
        &mut self,
        i: usize,
        dest: &mut Dest<'_>,
        wait: bool,
        skip_dgram: bool,
    ) -> Result<Option<usize>> {
        let super::Parts {
            inbound,
            committed,
            cx,
            ..
        } = self.parts();
        let mut look = Look {
            cx,
            committed,
            skip_dgram,
        };
        InEdge::look(inbound, i, dest, wait, &mut look)
    }

    /// The short path of a blocking `recv` on an endpoint whose only inbound edge is one
    /// open, active network edge: a tcp stream without a datagram engine in the context
    /// ([`TcpIn::look_lone`](crate::transport::tcp::inbound::TcpIn::look_lone)), or a
    /// datagram connection (`DgramSide::look_lone`). `None` when the case does not apply
    /// (more edges, shm, a new connection to adopt, a message the short path leaves to the
    /// general one): the general path ([`Endpoint::poll_once`]) then looks.
    #[inline]
    pub(super) fn look_lone(&mut self, buf: &mut [u8]) -> Option<Result<Option<(usize, Addr)>>> {
        // A lone shm edge (the common case on a node) leaves at the test of its kind.
        if self.inbound.len() != 1
            || !self.inbound[0].is_network()
            || self.committed.is_some()
            || self.inbox.has_incoming.load(Ordering::Relaxed)
        {
            return None;
        }
        // The endpoint's message limit, as a shorter buffer (one compare): a longer message
        // leaves the short paths for the general one, which refuses it.
        let max = usize::try_from(self.config.max_message_bytes).unwrap_or(usize::MAX);
        let buf = if buf.len() > max {
            &mut buf[..max]
        } else {
            buf
        };
        match &mut self.inbound[0] {
            InEdge::Tcp(tcp) if self.local.dgram.is_none() => {
                let peer = tcp.net.peer;
                let looked = tcp.look_lone(buf)?;
                self.last_tag = tcp.reader.delivered_tag;
                if looked.is_err() && tcp.net.reverse {
                    // Our connection to the peer ended: a new one from the peer is no
                    // crossing.
                    self.inbox.tcp_crossings().release_connect(peer);
                }
                self.next_inbound = 0;
                if let (Ok(Some(len)), true) = (&looked, self.last_tag.am) {
                    // An active message: its handler runs, the receive goes on.
                    let ran = self.run_handler(0, self.last_tag, &buf[..*len]);
                    return Some(ran.map(|()| None));
                }
                Some(looked.map(|got| got.map(|len| (len, peer))))
            }
            InEdge::Dgram(edge) if edge.open_and_active() => {
                let peer = edge.net.peer;
                let looked = self.dgram.look_lone(edge, buf, &self.local)?;
                self.last_tag = edge.delivered_tag;
                if let (Ok(Some(len)), true) = (&looked, self.last_tag.am) {
                    // An active message: its handler runs, the receive goes on.
                    let ran = self.run_handler(0, self.last_tag, &buf[..*len]);
                    return Some(ran.map(|()| None));
                }
                Some(looked.map(|got| got.map(|len| (len, peer))))
            }
            _ => None,
        }
    }

    /// The endpoint's one inbound edge when it is an open, active datagram connection and
    /// nothing else could deliver: posted receives may then be handed to the engine. Not
    /// while handlers are registered: an active message must reach its handler, not the
    /// buffer of a receive the engine fills; nor while a receive is bound to a message of
    /// the edge (`DgramIn::take`: the engine holds one connection's receives of one kind).
    pub(super) fn lone_dgram(&self) -> Option<LoneEdge> {
        if self.committed.is_some()
            || self.requests.bound_recvs > 0
            || self.has_handlers()
            || self.inbound.len() != 1
            || self.inbox.has_incoming.load(Ordering::Relaxed)
        {
            return None;
        }
        match &self.inbound[0] {
            InEdge::Dgram(edge) if edge.open_and_active() => {
                Some((edge.id, edge.net.peer, edge.net.transport))
            }
            _ => None,
        }
    }

    /// A blocking `recv` ends early (an error, a timeout) in the middle of a large tcp
    /// message it was reading into `buf`: what arrived is copied into an internal buffer,
    /// so the message stays whole and in place for a later receive. Returns `err`.
    pub(super) fn uncommit(&mut self, buf: &[u8], err: Error) -> Error {
        let Some(i) = self.committed.take() else {
            return err;
        };
        if let Some(tcp) = self.inbound[i].as_tcp_mut() {
            tcp.uncommit(buf, &self.requests.pool);
        }
        err
    }
}
