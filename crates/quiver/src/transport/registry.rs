//! This rank's open endpoints as the transports' listeners see them: an [`Inbox`] per
//! endpoint port, where a listener (shm, tcp) or the datagram engine leaves each connection
//! it accepted for the endpoint to adopt, and the listeners' counters.
//!
//! Every transport's accepting side depends on this module; it depends on none of them
//! beyond the types of what they hand over.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use quiver_transport::notify::RemoteDoorbell;
use quiver_transport::ring::Consumer;

use super::tcp::crossing::Crossings;
use crate::addr::Addr;
use crate::config::TransportKind;

/// The counters of this rank's listeners.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ListenerCounts {
    /// Connections accepted.
    pub(crate) accepted: u64,
    /// Handshakes refused or failed, except [`not_open`](Self::not_open).
    pub(crate) refused: u64,
    /// Connection attempts that asked for an endpoint not open at the time (see
    /// [`Registry::not_open`]).
    pub(crate) not_open: u64,
    /// Of the connections accepted, those over shared memory.
    pub(crate) shm_accepted: u64,
    /// Of those, the ones whose sender's memory this rank could not read (every message
    /// through the ring).
    pub(crate) shm_without_cross_memory: u64,
    /// Why the last refusal happened.
    pub(crate) last_refusal: Option<String>,
    /// Times a listener's accept failed unexpectedly (it backed off and kept listening).
    pub(crate) accept_errors: u64,
    /// Of the refusals, handshakes a listener dropped unfinished: past their deadline, or to
    /// make room for a newer connection at its bound of pending handshakes.
    pub(crate) handshakes_dropped: u64,
    /// The most handshakes one listener had in progress at once.
    pub(crate) pending_handshakes_peak: u64,
}

/// The open endpoints of this rank, by port, and the listeners' counters.
#[derive(Debug)]
pub(crate) struct Registry {
    /// This rank.
    pub(crate) rank: u32,
    endpoints: Mutex<HashMap<u16, Arc<Inbox>>>,
    counts: Mutex<ListenerCounts>,
}

impl Registry {
    /// No endpoint open yet.
    pub(crate) fn new(rank: u32) -> Registry {
        Registry {
            rank,
            endpoints: Mutex::new(HashMap::new()),
            counts: Mutex::new(ListenerCounts::default()),
        }
    }

    /// Registers the inbox of endpoint `port`; false if that port is open already.
    pub(crate) fn register(&self, port: u16, inbox: Arc<Inbox>) -> bool {
        let mut endpoints = self.endpoints();
        if endpoints.contains_key(&port) {
            return false;
        }
        endpoints.insert(port, inbox);
        true
    }

    /// Forgets endpoint `port` (it closed).
    pub(crate) fn unregister(&self, port: u16) {
        self.endpoints().remove(&port);
    }

    /// The inbox of endpoint `port`, if it is open.
    pub(crate) fn inbox(&self, port: u16) -> Option<Arc<Inbox>> {
        self.endpoints().get(&port).cloned()
    }

    /// Rings every open endpoint's doorbell (something they all serve arrived).
    pub(crate) fn wake_all(&self) {
        for inbox in self.endpoints().values() {
            inbox.own_bell.ring();
        }
    }

    /// Counts an accepted connection.
    pub(crate) fn accepted(&self) {
        self.counts().accepted += 1;
    }

    /// Adds `delta` to the accepted connections and to those over shared memory, and, when
    /// cross-memory attach to the sender was refused (`without_cross_memory`), to those (a
    /// shm acceptance is counted before its setup message leaves, and taken back if that
    /// fails).
    pub(crate) fn count_shm_accepted(&self, delta: i64, without_cross_memory: bool) {
        let mut counts = self.counts();
        counts.accepted = counts.accepted.saturating_add_signed(delta);
        counts.shm_accepted = counts.shm_accepted.saturating_add_signed(delta);
        if without_cross_memory {
            counts.shm_without_cross_memory =
                counts.shm_without_cross_memory.saturating_add_signed(delta);
        }
    }

    /// Counts a failed accept of listener `listener` and logs it (the listener backs off
    /// for `backoff` and keeps listening).
    pub(crate) fn accept_failed(
        &self,
        listener: &str,
        error: &std::io::Error,
        backoff: std::time::Duration,
    ) {
        tracing::warn!(rank = self.rank, listener, %error, backoff_ms = backoff.as_millis() as u64, "accepting a connection failed; listening on");
        self.counts().accept_errors += 1;
    }

    /// Counts a refused or failed handshake and logs why.
    pub(crate) fn refused(&self, why: String) {
        tracing::warn!(rank = self.rank, reason = %why, "refused a connection");
        let mut counts = self.counts();
        counts.refused += 1;
        counts.last_refusal = Some(why);
    }

    /// Counts a handshake a listener dropped unfinished (a refusal too) and logs why.
    pub(crate) fn handshake_dropped(&self, why: String) {
        tracing::warn!(rank = self.rank, reason = %why, "dropped a connection's handshake");
        let mut counts = self.counts();
        counts.refused += 1;
        counts.handshakes_dropped += 1;
        counts.last_refusal = Some(why);
    }

    /// Notes that a listener has `pending` handshakes in progress (for the peak).
    pub(crate) fn pending_handshakes(&self, pending: usize) {
        let mut counts = self.counts();
        counts.pending_handshakes_peak = counts.pending_handshakes_peak.max(pending as u64);
    }

    /// Counts a connection attempt to an endpoint that is not open (yet), apart from the
    /// refusals: usual while a job starts, when a rank connects before its peer opened the
    /// endpoint; the initiator retries until its connect timeout (and reports
    /// `Error::Refused` itself if the endpoint never opens).
    pub(crate) fn not_open(&self, why: String) {
        tracing::debug!(rank = self.rank, reason = %why, "endpoint not open (yet)");
        self.counts().not_open += 1;
    }

    /// The counters now.
    pub(crate) fn counts_now(&self) -> ListenerCounts {
        self.counts().clone()
    }

    fn endpoints(&self) -> MutexGuard<'_, HashMap<u16, Arc<Inbox>>> {
        self.endpoints.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn counts(&self) -> MutexGuard<'_, ListenerCounts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why a listener turned away a connection to endpoint `port` asked for by rank `rank`.
pub(crate) fn not_open_reason(rank: u32, port: u16) -> String {
    format!("rank {rank} asked for port {port}, which is not open")
}

/// An accepted inbound shared-memory edge, handed from the listener to its endpoint.
#[derive(Debug)]
pub(crate) struct NewInbound {
    pub(crate) peer: Addr,
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) ring: Consumer,
    /// Whether this rank can read the sender's memory (else every message comes through
    /// the ring, larger ones than it holds included).
    pub(crate) cross_memory: bool,
}

/// An accepted inbound network edge, handed to its endpoint.
#[derive(Debug)]
pub(crate) enum NetInbound {
    /// A TCP stream after its handshake (non-blocking).
    Tcp {
        /// Who connected.
        peer: Addr,
        /// The stream.
        stream: std::net::TcpStream,
        /// The peer's pid, when it runs on this node (for freeze detection).
        pid: Option<libc::pid_t>,
        /// The stream's place in the tcp counters.
        open: std::sync::Arc<crate::transport::tcp::stats::OpenStream>,
    },
    /// A datagram connection accepted by the engine (its handshake completed).
    Dgram {
        /// Who connected.
        peer: Addr,
        /// udp or mem.
        kind: TransportKind,
        /// The engine's id of the connection.
        id: u64,
    },
}

/// What the listeners share with one endpoint: the connections accepted for it and not yet
/// adopted, its doorbell (rung when one arrives), and the tcp connects it has in flight.
#[derive(Debug)]
pub(crate) struct Inbox {
    /// Inbound shared-memory connections accepted but not yet adopted by the endpoint.
    pub(crate) incoming: Mutex<Vec<NewInbound>>,
    /// Inbound network connections accepted but not yet adopted.
    pub(crate) incoming_net: Mutex<Vec<NetInbound>>,
    /// Something waits in `incoming` or `incoming_net`.
    pub(crate) has_incoming: AtomicBool,
    /// Who is opening a tcp connection to whom (crossed connects; see
    /// [`Crossings`]).
    pub(crate) tcp_crossings: Mutex<Crossings>,
    /// The endpoint's doorbell, as a peer maps it: its shared word's memfd and eventfd
    /// (sent to shm peers) and this process's own mapping (rung by the listeners).
    pub(crate) bell_memfd: OwnedFd,
    pub(crate) bell_eventfd: OwnedFd,
    pub(crate) own_bell: RemoteDoorbell,
}

impl Inbox {
    /// The shm edges accepted and not adopted yet, taken out of the inbox (a blocking send
    /// adopts them to read ahead what their senders wrote; the network ones stay). Takes
    /// the lock: for waiting paths only.
    pub(crate) fn take_shm(&self) -> Vec<NewInbound> {
        if !self.has_incoming.load(Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.incoming.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// An empty inbox whose doorbell is the one `bell_memfd`/`bell_eventfd` describe.
    pub(crate) fn new(
        bell_memfd: OwnedFd,
        bell_eventfd: OwnedFd,
        own_bell: RemoteDoorbell,
    ) -> Inbox {
        Inbox {
            incoming: Mutex::new(Vec::new()),
            incoming_net: Mutex::new(Vec::new()),
            has_incoming: AtomicBool::new(false),
            tcp_crossings: Mutex::new(Crossings::default()),
            bell_memfd,
            bell_eventfd,
            own_bell,
        }
    }

    /// Queues an accepted shared-memory edge for the endpoint and wakes it.
    pub(crate) fn deliver_shm(&self, inbound: NewInbound) {
        self.incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(inbound);
        self.has_incoming.store(true, Ordering::Release);
        self.own_bell.ring();
    }

    /// Queues an accepted network edge for the endpoint and wakes it.
    pub(crate) fn deliver_inbound(&self, inbound: NetInbound) {
        self.incoming_net
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(inbound);
        self.has_incoming.store(true, Ordering::Release);
        self.own_bell.ring();
    }

    /// The tcp connects in flight to and from this endpoint.
    pub(crate) fn tcp_crossings(&self) -> MutexGuard<'_, Crossings> {
        self.tcp_crossings.lock().unwrap_or_else(|p| p.into_inner())
    }
}
