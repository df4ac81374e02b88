//! One look at the endpoint's inbound edges, round robin, for a message for a
//! destination; and the short paths a blocking `recv` takes when one network edge is all
//! the endpoint has.

use std::sync::atomic::Ordering;

use super::Endpoint;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::dest::Dest;
use crate::transport::dgram::endpoint_side::LoneEdge;
use crate::transport::edge::{InEdge, Look};

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
            let got = self.look_at(i, dest, wait, skip_dgram);
            if network && !matches!(got, Ok(None)) {
                self.dgram.seen = None;
            }
            if let Some(len) = got? {
                self.last_tag = self.inbound[i].tag();
                self.next_inbound = if i + 1 == n { 0 } else { i + 1 };
                return Ok(Some((len, self.inbound[i].peer())));
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

    /// Polls the datagram engine before looking at network edges, if one runs: a blocking
    /// receive takes the rest of a large message straight into its buffer once it has
    /// begun it, so it brings in only the message's start here. The engine's news count.
    fn poll_engine_for_look(&mut self, wait: bool) -> Option<u64> {
        let engine = self.local.dgram.as_ref()?;
        let news = if wait {
            engine.poll_io_before_receive(&self.local)
        } else {
            engine.poll_io(&self.local)
        };
        self.dgram.engine_polled = true;
        Some(news)
    }

    /// One look at inbound edge `i` ([`InEdge::look`]).
    fn look_at(
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
                Some(looked.map(|got| got.map(|len| (len, peer))))
            }
            InEdge::Dgram(edge) if edge.open_and_active() => {
                let peer = edge.net.peer;
                let looked = self.dgram.look_lone(edge, buf, &self.local)?;
                self.last_tag = edge.delivered_tag;
                Some(looked.map(|got| got.map(|len| (len, peer))))
            }
            _ => None,
        }
    }

    /// The endpoint's one inbound edge when it is an open, active datagram connection and
    /// nothing else could deliver: posted receives may then be handed to the engine.
    pub(super) fn lone_dgram(&self) -> Option<LoneEdge> {
        if self.committed.is_some()
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
