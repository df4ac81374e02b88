//! The datagram router: which connection each received datagram belongs to, in the manner
//! of quinn-proto's `Endpoint::handle`.
//!
//! Layer: sans-IO protocol core, above [`crate::reliable`] and [`crate::handshake`], below
//! every engine that receives datagrams (the udp/mem engine of `quiver`, the simulator of
//! `quiver-sim`). It owns the connection-id table (ids and the short ids Stream frames
//! carry), the allocation of ids from randomness its caller supplies, the Hellos answered
//! so far, and the resolution of two endpoints connecting to each other at the same moment.
//! It must not do I/O, read a clock, draw randomness of its own, or hold the sockets, the
//! endpoints or the application's data: time and random bytes are inputs, and what to do
//! with a datagram ([`Routed`]) is its output.
//!
//! # How an engine calls it
//!
//! One [`Router`] per engine (per node of a simulation), made with the job id and key. For
//! every datagram received (its bytes, its source address `from`, and the index `path` of
//! the local link or socket it arrived on), the engine calls [`Router::handle`] with the
//! current time and a [`RouterHost`], and acts on the verdict:
//!
//! - [`Routed::Connection`]: feed the datagram to that connection
//!   (`ReliableConnection::handle_datagram` or one of its variants), on `path`; then, as
//!   after any input, drain its `poll_transmit` and `poll_event`.
//! - [`Routed::RepeatedHello`]: feed it to that connection the same way (it answers the
//!   Hello again), if it is still there; nothing else.
//! - [`Routed::Accepted`]: wrap the new connection in the engine's connection value and
//!   [`Router::insert`] it under its id before the next datagram is handled, then drain its
//!   transmits (its Challenge, or its rejection) and events. A rejected one
//!   ([`Accepted::rejection`]) is never handed to an endpoint; the engine forgets it
//!   ([`Router::remove`] or [`Router::retain`]) once its refusal is sent.
//! - [`Routed::Reset`]: send those bytes to `from` from the socket of `path`.
//! - [`Routed::Refused`]: count it, and send its `reply` (if any) to `from` from the socket
//!   of `path`: a refusal shorter than the Hello, built without keeping anything.
//! - [`Routed::Dropped`]: count it; nothing is sent.
//!
//! The engine opens connections itself: it draws an id with [`Router::fresh_id`], makes the
//! connection with `ReliableConnection::connect`, and [`Router::insert`]s it. Before it
//! opens one to an endpoint, [`Router::inbound_under_way`] says whether that endpoint's
//! connection to us is being accepted (use it instead of opening a second). It takes
//! connections out with [`Router::remove`] or [`Router::retain`] when it forgets them (a
//! datagram for a forgotten id is then answered with a Reset). Everything else about a
//! connection (its sockets, its endpoint, its buffers) stays in the engine's connection
//! value, which the router stores and hands back but never looks into, except through
//! [`RouterHost::handshake`].
//!
//! The `quiver` engine's host answers [`RouterHost::inbound_path`] from its link table (the
//! peer's links, as many as both ranks have, or just `from`; `None` for a path beyond
//! them) and its per-destination configuration, [`RouterHost::endpoint_open`] from its open
//! endpoints (and the job's size), [`RouterHost::handshake`] from a connection's status
//! (connecting and not given up), [`RouterHost::local_rank`] from the context, and the two
//! random methods from the OS. The simulator's answers from its flows and its seeded
//! generator.
//!
//! # Hellos and crossed connects
//!
//! A datagram for id 0 is a Hello from a stranger. The router verifies the frame and the
//! Hello's MAC (`mac_h`, proof of the job key: `quiver_proto::handshake::verify_hello`)
//! before anything else, so a Hello that does not prove the key is [`Routed::Refused`]
//! with no lookup, no random draw and no state; its reply (a `WrongKey` refusal) is
//! shorter than the Hello, and there is at most one per [`REFUSAL_INTERVAL_NS`]. Then it
//! looks the (claimed rank, initiator id) pair up among the Hellos it answered (a repeat
//! goes to the connection it opened, whichever link it came on), asks the host how to
//! accept it, draws an id and a nonce, and runs `ReliableConnection::accept` (the
//! responder's part of the handshake up to the Challenge). A Hello for a closed endpoint is rejected with
//! `NoSuchEndpoint`. If the local endpoint is connecting to the same peer endpoint at the
//! same moment, one connection must carry both directions: the one opened by the lower
//! [`EndpointAddress`]. So when the local endpoint is the lower one, the peer's Hello is
//! rejected with `Busy` (the peer then waits for our connection to arrive and uses it); when
//! the peer is the lower one, its Hello is accepted and our own attempt will be refused by
//! the peer. Either way the Hello is recorded, so its repeats are answered by the same
//! connection. The Hellos map is bounded ([`HELLO_CAPACITY`]) and its entries expire
//! ([`HELLO_LIFETIME_NS`]; see `hellos.rs`).

mod hellos;
mod host;
mod outcome;
mod table;
#[cfg(test)]
mod tests;

use quiver_wire::frame::{
    self, Destination, Frame, FrameError, FrameHeader, FrameKey, FrameKeys, FrameType,
    MAX_HEADER_LEN,
};
use quiver_wire::handshake::CHALLENGE_FIXED_LEN;

use crate::handshake::{
    hello_refusal, job_frame_key, verify_hello, HandshakeError, JobKey, RejectReason,
};
use crate::reliable::{reset_for, AcceptError, Nanos, ReliableConnection};
use hellos::HelloTable;
pub use hellos::{HELLO_CAPACITY, HELLO_LIFETIME_NS};
pub use host::{Direction, EndpointAddress, Handshake, InboundPath, RouterHost};
pub use outcome::{Accepted, DropReason, Routed};
pub use table::ConnectionTable;

/// Least time between two refusals of Hellos that did not prove the key or the job, in
/// nanoseconds (1 ms): at most a thousand short answers a second, whatever arrives.
pub const REFUSAL_INTERVAL_NS: Nanos = 1_000_000;

/// The datagram router of one engine: its connections by id, and the Hellos it answered.
///
/// `C` is the engine's connection value (the protocol state and whatever the engine keeps
/// with it). Call protocol:
/// 1. [`Router::new`] once, with the job id and the job key.
/// 2. For every datagram received, [`Router::handle`]`(now, from, path, bytes, host)`, and
///    act on the [`Routed`] it returns before handling the next datagram (in particular,
///    [`Router::insert`] an [`Accepted`] connection). `handle` itself sends nothing and
///    feeds nothing: it only says what to do.
/// 3. To open a connection: [`Router::fresh_id`], `ReliableConnection::connect` with that
///    id, [`Router::insert`]. [`Router::inbound_under_way`] first, to use the peer's
///    connection if it is being accepted.
/// 4. [`Router::get_mut`], [`Router::iter_mut`] and the like reach the connections for
///    timers and application calls; [`Router::remove`] and [`Router::retain`] forget them.
///
/// Same inputs (datagrams, times, host answers), same verdicts: the router has no clock,
/// no randomness and no hash state of its own.
#[derive(Debug)]
pub struct Router<C> {
    job_id: u64,
    key: JobKey,
    /// The job's frame key (the Resets the router sends; decision 0067).
    frame_job_key: FrameKey,
    connections: ConnectionTable<C>,
    hellos: HelloTable,
    /// Where the Reset for an unknown id is built ([`Routed::Reset`] borrows it).
    reset: [u8; MAX_HEADER_LEN],
    /// Where the refusal of a Hello is built ([`Routed::Refused`] borrows it).
    reply: [u8; MAX_HEADER_LEN + CHALLENGE_FIXED_LEN],
    /// When the next refusal may be sent ([`REFUSAL_INTERVAL_NS`] after the last).
    next_refusal_at: Nanos,
}

impl<C> Router<C> {
    /// A router with no connections for an engine of job `job_id`, whose Hellos must prove
    /// `key`.
    pub fn new(job_id: u64, key: JobKey) -> Self {
        Self {
            job_id,
            frame_job_key: job_frame_key(&key),
            key,
            connections: ConnectionTable::default(),
            hellos: HelloTable::default(),
            reset: [0; MAX_HEADER_LEN],
            reply: [0; MAX_HEADER_LEN + CHALLENGE_FIXED_LEN],
            next_refusal_at: 0,
        }
    }

    /// Routes one received datagram: `datagram` came from `from` over local path `path`
    /// (the index of the link or socket it arrived on) at `now`. See [`Routed`] for what the
    /// caller does with each verdict; `host` is asked only for Hellos (destination id 0).
    ///
    /// The hot path (a datagram for a known connection) is one peek at the header and one
    /// table lookup; nothing is verified here (the connection verifies its datagrams).
    #[inline]
    pub fn handle<'a, A, H: RouterHost<A, C>>(
        &'a mut self,
        now: Nanos,
        from: &A,
        path: usize,
        datagram: &[u8],
        host: &mut H,
    ) -> Routed<'a, C> {
        match frame::destination(datagram) {
            Some(Destination::Short(short)) => match self.connections.get_mut_short(short) {
                Some((id, connection)) => Routed::Connection { id, connection },
                None => Routed::Dropped(DropReason::UnknownShortId),
            },
            Some(Destination::Id(0)) => self.handle_hello(now, from, path, datagram, host),
            Some(Destination::Id(id)) => match self.connections.get_mut(id) {
                Some(connection) => Routed::Connection { id, connection },
                // A stale connection (forgotten here) or a forged id: tell the sender.
                None => match reset_for(datagram, &mut self.reset, &self.frame_job_key) {
                    Some(len) => Routed::Reset(&self.reset[..len]),
                    None => Routed::Dropped(DropReason::UnknownId),
                },
            },
            None => Routed::Dropped(DropReason::NoDestination),
        }
    }

    /// A new connection id, non-zero and with a short id unique among the router's
    /// connections, drawn from `random` (the OS, or a seeded generator).
    pub fn fresh_id(&self, random: impl FnMut() -> u64) -> u64 {
        self.connections.fresh_id(random)
    }

    /// Adds connection `id` (from [`Router::fresh_id`], or an [`Accepted`] one's); returns
    /// the connection that had this id before, if any.
    pub fn insert(&mut self, id: u64, connection: C) -> Option<C> {
        self.connections.insert(id, connection)
    }

    /// Forgets connection `id`: datagrams for it are answered with a Reset from now on (its
    /// Hello, if it was accepted, stays recorded: see the module documentation).
    pub fn remove(&mut self, id: u64) -> Option<C> {
        self.connections.remove(id)
    }

    /// Keeps the connections for which `keep` says true and forgets the others.
    pub fn retain(&mut self, keep: impl FnMut(&u64, &mut C) -> bool) {
        self.connections.retain(keep);
    }

    /// Connection `id`.
    #[inline]
    pub fn get(&self, id: u64) -> Option<&C> {
        self.connections.get(id)
    }

    /// Connection `id`, to change.
    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut C> {
        self.connections.get_mut(id)
    }

    /// The connection table, to read (iteration, counts).
    pub fn connections(&self) -> &ConnectionTable<C> {
        &self.connections
    }

    /// The connections with their ids, to change (timers, statistics).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut C)> {
        self.connections.iter_mut()
    }

    /// Number of Hellos remembered now (answered within [`HELLO_LIFETIME_NS`], at most
    /// [`HELLO_CAPACITY`]): the router's only state for peers without a connection.
    pub fn hello_count(&self) -> usize {
        self.hellos.len()
    }

    /// Number of remembered Hellos pushed out by newer ones before their lifetime ended
    /// (the table was full).
    pub fn hellos_evicted(&self) -> u64 {
        self.hellos.evicted()
    }

    /// Whether a connection `peer` opened to local port `local_port` is being accepted
    /// (its handshake under way, its endpoint still wanting it), `handshake` telling each
    /// connection's state: an engine about to connect to `peer` from that port waits for it
    /// and uses it instead.
    pub fn inbound_under_way(
        &self,
        local_port: u16,
        peer: EndpointAddress,
        handshake: impl Fn(&C) -> Option<Handshake>,
    ) -> bool {
        let wanted = Handshake {
            direction: Direction::Inbound,
            local_port,
            peer,
        };
        self.connections
            .values()
            .any(|connection| handshake(connection) == Some(wanted))
    }

    /// Whether a Hello from `peer` for local port `local_port` crossed our own connect to
    /// it and loses: the local endpoint is the lower address, and its connection to `peer`
    /// is still being opened.
    fn crossed<A, H: RouterHost<A, C>>(
        &self,
        local_port: u16,
        peer: EndpointAddress,
        host: &H,
    ) -> bool {
        let wanted = Handshake {
            direction: Direction::Outbound,
            local_port,
            peer,
        };
        EndpointAddress::new(host.local_rank(), local_port) < peer
            && self
                .connections
                .values()
                .any(|connection| host.handshake(connection) == Some(wanted))
    }

    /// The datagram that refuses a Hello from initiator id `their_id` for `error` (a
    /// Handshake frame carrying a refusing Challenge, shorter than the Hello's datagram),
    /// built in the router's reply buffer; `None` when the error gets no answer, or when a
    /// refusal went out less than [`REFUSAL_INTERVAL_NS`] before `now` (a flood costs a MAC
    /// per Hello, not a send; a real initiator repeats its Hello and is told soon enough).
    fn refusal(&mut self, now: Nanos, their_id: u64, error: &HandshakeError) -> Option<&[u8]> {
        if now < self.next_refusal_at {
            return None;
        }
        let mut challenge = [0u8; CHALLENGE_FIXED_LEN];
        let len = hello_refusal(error, &mut challenge)?;
        let payload = &challenge[..len];
        let header_len = FrameHeader::new(FrameType::Handshake, their_id, 0)
            .emit(
                FrameKeys::job_only(&self.frame_job_key),
                &mut self.reply,
                payload,
            )
            .ok()?;
        let end = header_len + payload.len();
        self.reply
            .get_mut(header_len..end)?
            .copy_from_slice(payload);
        self.next_refusal_at = now.saturating_add(REFUSAL_INTERVAL_NS);
        Some(&self.reply[..end])
    }

    /// A datagram for connection id 0: a Hello from a stranger, accepted if it is a Hello
    /// of the job (and rejected at once if no endpoint takes it, or if it crossed our own
    /// connect and loses), or a repeat of one answered before.
    fn handle_hello<'a, A, H: RouterHost<A, C>>(
        &'a mut self,
        now: Nanos,
        from: &A,
        path: usize,
        datagram: &[u8],
        host: &mut H,
    ) -> Routed<'a, C> {
        let parsed = match Frame::parse(datagram, FrameKeys::job_only(&self.frame_job_key)) {
            Ok(parsed) => parsed,
            // A connection frame to id 0: no key to verify it with, and no request either.
            Err(FrameError::NoKey { frame_type }) => {
                let src_id =
                    Frame::parse_unauthenticated(datagram).map_or(0, |frame| frame.header().src_id);
                return Routed::Refused {
                    error: AcceptError::NotARequest {
                        frame_type,
                        dest_id: 0,
                        src_id,
                    },
                    reply: None,
                };
            }
            Err(_) => return Routed::Dropped(DropReason::MalformedHello),
        };
        let header = parsed.header();
        if header.frame_type != FrameType::Handshake || header.src_id == 0 {
            return Routed::Refused {
                error: AcceptError::NotARequest {
                    frame_type: header.frame_type,
                    dest_id: header.dest_id,
                    src_id: header.src_id,
                },
                reply: None,
            };
        }
        // Nothing is looked up, drawn or kept for a Hello that does not prove the key; its
        // answer (a refusal naming why, shorter than the Hello) is built here, statelessly.
        let claimed = match verify_hello(&self.key, self.job_id, parsed.payload()) {
            Ok(request) => request,
            Err(error) => {
                let reply = self.refusal(now, header.src_id, &error);
                return Routed::Refused {
                    error: AcceptError::Handshake(error),
                    reply,
                };
            }
        };
        let (their_rank, their_id) = (claimed.src_rank, header.src_id);
        if let Some(id) = self.hellos.get(now, their_rank, their_id) {
            return Routed::RepeatedHello {
                id,
                connection: self.connections.get_mut(id),
            };
        }
        let Some(inbound) = host.inbound_path(their_rank, from, path) else {
            return Routed::Dropped(DropReason::UnsharedPath);
        };
        let id = self.connections.fresh_id(|| host.random_u64());
        let nonce = host.random_nonce();
        let accepted = ReliableConnection::accept(
            inbound.config,
            self.key.clone(),
            self.job_id,
            datagram,
            inbound.path,
            id,
            nonce,
            now,
        );
        let (mut connection, request) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => return Routed::Refused { error, reply: None },
        };
        let peer = EndpointAddress::new(request.src_rank, request.src_port);
        let rejection = if !host.endpoint_open(&request) {
            Some(RejectReason::NoSuchEndpoint)
        } else if self.crossed(request.dst_port, peer, host) {
            Some(RejectReason::Busy)
        } else {
            None
        };
        if let Some(reason) = rejection {
            connection.reject(reason);
        }
        self.hellos.insert(now, request.src_rank, their_id, id);
        Routed::Accepted(Box::new(Accepted {
            id,
            connection,
            request,
            path: inbound.path,
            rejection,
        }))
    }
}
