//! Opening edges: [`Endpoint::connect`] tries the configured transports in order, the
//! first that reaches the peer wins; a network connection the peer already opened to this
//! endpoint carries the new edge too (one connection per endpoint pair). Also answering a
//! sender on its own connection, closing one connection, adopting the edges the listeners
//! accepted, and counting the live inbound edges.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Connection, Endpoint};
use crate::addr::Addr;
use crate::config::TransportKind;
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
use crate::transport::edge::{self, InEdge, Opened, OutEdge};
use crate::transport::protocols::TransportInfo;
use crate::transport::shm::outbound::ShmOut;
use crate::transport::wait::Wait;

impl Endpoint {
    /// Opens (or returns the existing) connection from this endpoint to `peer`, waiting up
    /// to the configured connect timeout for the peer's endpoint to appear.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a rank outside the job, [`Error::Refused`] when the
    /// peer rejects us (wrong job key, no such endpoint in time), [`Error::Timeout`],
    /// [`Error::Io`].
    pub fn connect(&mut self, peer: Addr) -> Result<Connection> {
        self.refuse_in_handler("connect")?;
        if let Some(&index) = self.by_peer.get(&peer) {
            if self.outbound[index as usize].failure().is_none() {
                return Ok(self.connection(index, peer));
            }
        }
        if peer.rank >= self.local.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} is not in this job of {} ranks",
                peer.rank, self.local.size
            )));
        }
        let on_node = self.local.peer_is_local(peer.rank);
        let mut last = None;
        for kind in self.config.transports.clone() {
            if !edge::reaches(kind, &self.local, on_node) {
                continue;
            }
            let attempt = if kind == TransportKind::Shm {
                self.connect_shm(peer)
            } else {
                self.connect_network(kind, peer)
            };
            match attempt {
                Ok(conn) => return Ok(conn),
                Err(e @ (Error::Refused { .. } | Error::Timeout { .. } | Error::Io { .. })) => {
                    last = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::Config(format!(
                "no transport in QUIVER_TRANSPORTS={} can reach rank {}: shm needs the peer on \
                 this node, udp and tcp need QUIVER_ADDRS",
                self.config
                    .transports
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(","),
                peer.rank
            ))
        }))
    }

    /// The connection that answers `src`, a peer that sent to this endpoint, without the
    /// program connecting back: the existing connection to `src` if there is one; else,
    /// over udp and tcp, the connection `src`'s messages came in on (it carries both
    /// directions; no handshake); over shm, a ring back to `src` (shm rings are one-way,
    /// so the first answer opens one through `src`'s listener, as `connect` would).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when nothing from `src` ever reached this endpoint; the
    /// errors of [`Endpoint::connect`] when a ring back cannot be opened.
    pub fn reply_connection(&mut self, src: Addr) -> Result<Connection> {
        let index = match self.last_reply {
            Some((peer, index)) if peer == src => Some(index),
            _ => self.by_peer.get(&src).copied(),
        };
        if let Some(index) = index {
            if self.outbound[index as usize].failure().is_none() {
                self.last_reply = Some((src, index));
                return Ok(self.connection(index, src));
            }
        }
        self.adopt_new_inbound();
        let from_src = |inb: &InEdge| inb.peer() == src;
        if let Some(i) = self
            .inbound
            .iter()
            .position(|inb| from_src(inb) && inb.carries_answers())
        {
            return self.send_on_inbound(i);
        }
        if self
            .inbound
            .iter()
            .any(|inb| from_src(inb) && !inb.is_network())
        {
            return self.connect_shm(src);
        }
        Err(Error::InvalidArgument(format!(
            "no connection from {src} to endpoint {} to answer on: reply answers a peer \
             whose message this endpoint received (connect to reach any other)",
            self.addr
        )))
    }

    /// Sends `data` to `src`, the sender of a message this endpoint received, on
    /// [`Endpoint::reply_connection`]: the program does not connect back.
    ///
    /// # Errors
    /// As [`Endpoint::reply_connection`], then as [`Endpoint::send`].
    pub fn reply(&mut self, src: Addr, data: &[u8]) -> Result<()> {
        let conn = self.reply_connection(src)?;
        if self.am.in_handler {
            return self.reply_in_handler(conn, data);
        }
        self.send(conn, data)
    }

    /// Closes connection `conn`, both directions, and leaves the endpoint's other
    /// connections as they are. Posted and queued sends on it are finished first (this
    /// waits for them, bounded by the endpoint's timeout); then the peer receives what was
    /// sent and, after it, a clean end: [`Error::PeerClosed`] from a receive or probe that
    /// only this endpoint could satisfy (one naming it as the source, or any receive once
    /// no other connection to the peer's endpoint is left), at once rather than after a
    /// timeout. The peer's direction to this endpoint ends too, on every transport: what
    /// it sent that this endpoint has not received is dropped, and its sends on that
    /// connection fail with [`Error::PeerClosed`] (over shm once its ring is full or it
    /// waits, over tcp once it has read the close). Decision 0089.
    ///
    /// Every later call on `conn` (and a second `close`) fails with
    /// [`Error::ConnectionClosed`]; `connect` opens a new connection.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a connection of another endpoint;
    /// [`Error::ConnectionClosed`] for one closed already; the connection's peer error if
    /// it had failed already (there is nothing left to close); a peer error or
    /// [`Error::Timeout`] while its sends finished (it is closed all the same).
    pub fn close(&mut self, conn: Connection) -> Result<()> {
        self.refuse_in_handler("close")?;
        let idx = self.outbound_index(conn)?;
        let finished = self.finish_sends_of(idx);
        let failed = match (finished, self.outbound[idx].failure()) {
            (Err(e), _) => Some(e),
            (Ok(()), Some(f)) => Some(f.to_error(conn.peer, "while closing")),
            (Ok(()), None) => None,
        };
        tracing::debug!(target: ENDPOINT_LOG, endpoint = %self.addr, peer = %conn.peer, "closing a connection");
        let super::Parts {
            outbound,
            inbound,
            mut cx,
            ..
        } = self.parts();
        outbound[idx].close_connection(inbound, &mut cx);
        failed.map_or(Ok(()), Err)
    }

    /// Waits until outbound edge `idx` has no send on its way out (or failed).
    fn finish_sends_of(&mut self, idx: usize) -> Result<()> {
        let mut wait = Wait::new(&self.config);
        loop {
            self.advance();
            if !self.outbound[idx].busy() {
                return Ok(());
            }
            self.idle(
                &mut wait,
                "finishing the sends of a connection being closed",
            )?;
        }
    }

    fn connect_shm(&mut self, peer: Addr) -> Result<Connection> {
        let new = crate::transport::shm::connect::connect(&self.local, self.addr, peer)?;
        Ok(self.add_outbound(OutEdge::Shm(ShmOut::new(peer, new)), peer, "connected"))
    }

    /// Opens a network connection of `kind` to `peer`, or rides on the one the peer opened.
    fn connect_network(&mut self, kind: TransportKind, peer: Addr) -> Result<Connection> {
        // The peer's own connection to us carries our edge too, when there is one.
        if let Some(i) = self.reusable_inbound(kind, peer) {
            return self.send_on_inbound(i);
        }
        let to = self.local.addrs[peer.rank as usize];
        let deadline = Instant::now() + self.config.connect_timeout;
        let (local, inbox) = (self.local.clone(), self.inbox.clone());
        let opened = edge::open_network(
            kind,
            &local,
            &inbox,
            (self.addr, peer, to),
            deadline,
            &mut || Ok(self.reusable_inbound(kind, peer)),
        )?;
        match opened {
            Opened::Reused(i) => self.send_on_inbound(i),
            Opened::New(edges) => {
                let (out, reverse) = *edges;
                // The peer's answers come back on the same connection.
                self.inbound.push(reverse);
                Ok(self.add_outbound(out, peer, "connected"))
            }
        }
    }

    /// An accepted inbound edge from `peer` over `kind` that can carry this endpoint's
    /// outbound edge too (adopts what the listener and the engine accepted first).
    fn reusable_inbound(&mut self, kind: TransportKind, peer: Addr) -> Option<usize> {
        if kind != TransportKind::Tcp {
            if let Some(engine) = &self.local.dgram {
                engine.poll_io(&self.local);
            }
        }
        self.adopt_new_inbound();
        self.inbound
            .iter()
            .position(|inb| inb.reusable_for(peer, kind.name()))
    }

    /// Opens the outbound edge to the peer of inbound edge `i` on that edge's connection.
    fn send_on_inbound(&mut self, i: usize) -> Result<Connection> {
        let out = self.inbound[i].ride()?;
        let peer = self.inbound[i].peer();
        Ok(self.add_outbound(out, peer, "connected (on the peer's connection)"))
    }

    /// Registers a new outbound edge and returns its handle.
    fn add_outbound(&mut self, out: OutEdge, peer: Addr, how: &'static str) -> Connection {
        if let Some(capabilities) = out.capabilities(&self.config) {
            tracing::info!(
                target: ENDPOINT_LOG,
                from = %self.addr,
                to = %peer,
                transport = capabilities.name,
                reliable = capabilities.reliable,
                zero_copy = capabilities.zero_copy,
                "{how}"
            );
        }
        if self.config.proto_info {
            if let Some(info) = out.info(&self.config) {
                // QUIVER_PROTO_INFO asked for this on stderr, logging or not.
                eprint!(
                    "quiver: connection {} -> {peer} ({how}) over {info}",
                    self.addr
                );
            }
        }
        let index = self.outbound.len() as u32;
        self.outbound.push(out);
        self.by_peer.insert(peer, index);
        // A new connection to a peer replaces its failed one.
        self.last_reply = None;
        self.connection(index, peer)
    }

    /// Which transport carries `conn` and which protocol it uses for each message size,
    /// and why (the settings that put the bounds): what `QUIVER_PROTO_INFO=1` prints when
    /// the connection is opened.
    ///
    /// ```no_run
    /// # fn main() -> quiver::Result<()> {
    /// let ctx = quiver::Context::from_env()?;
    /// let mut ep = ctx.endpoint(0)?;
    /// let conn = ep.connect(quiver::Addr::new(1, 0))?;
    /// let info = ep.transport(conn)?;
    /// println!("{}: 1 MiB goes by {:?}", info.kind, info.range_for(1 << 20).map(|r| r.protocol));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `conn` does not belong to this endpoint.
    pub fn transport(&self, conn: Connection) -> Result<TransportInfo> {
        self.outbound
            .get(conn.index as usize)
            .filter(|_| conn.endpoint_id == self.id)
            .and_then(|edge| edge.info(&self.config))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "connection to {} does not belong to endpoint {}",
                    conn.peer, self.addr
                ))
            })
    }

    pub(super) fn connection(&self, index: u32, peer: Addr) -> Connection {
        Connection {
            endpoint_id: self.id,
            index,
            peer,
        }
    }

    /// The outbound edge of `conn`, checked: it belongs to this endpoint and has not failed.
    pub(super) fn outbound_index(&self, conn: Connection) -> Result<usize> {
        let Some(out) = self
            .outbound
            .get(conn.index as usize)
            .filter(|_| conn.endpoint_id == self.id)
        else {
            return Err(Error::InvalidArgument(format!(
                "connection to {} does not belong to endpoint {}",
                conn.peer, self.addr
            )));
        };
        match out.failure() {
            Some(f) => Err(f.to_error(conn.peer, "before sending")),
            None => Ok(conn.index as usize),
        }
    }

    /// Adopts the inbound connections the listeners accepted for this endpoint.
    pub(super) fn adopt_new_inbound(&mut self) {
        if !self.inbox.has_incoming.swap(false, Ordering::Acquire) {
            return;
        }
        let accepted: Vec<_> = self
            .inbox
            .incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for shm in accepted {
            tracing::debug!(target: ENDPOINT_LOG, endpoint = %self.addr, peer = %shm.peer, transport = "shm", "peer connected");
            self.inbound.push(InEdge::from_shm(shm));
        }
        let accepted: Vec<_> = self
            .inbox
            .incoming_net
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for net in accepted {
            // A new edge may have messages already.
            self.dgram.seen = None;
            self.inbound
                .push(InEdge::from_network(net, self.config.tcp_staging_bytes));
        }
    }

    /// Number of peers currently connected to this endpoint (inbound edges).
    pub fn inbound_count(&mut self) -> usize {
        self.adopt_new_inbound();
        if let Some(engine) = &self.local.dgram {
            engine.poll_io(&self.local);
            self.adopt_new_inbound();
        }
        self.inbound
            .iter_mut()
            .map(|i| usize::from(i.is_live()))
            .sum()
    }
}
