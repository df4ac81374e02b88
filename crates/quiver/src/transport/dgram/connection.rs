//! One connection of the datagram engine as the engine keeps it ([`Entry`]: its protocol
//! core, the peer's address on each path, what the endpoint sees of it, its sending
//! sockets, the messages lent to its core and its posted receive buffers), and the table
//! of them by id and short id ([`ConnTable`]).
//!
//! Layer: the datagram transport's state, below the engine. No routing, no polling: the
//! engine decides what happens to an entry; this module only holds it.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::AsFd;

use quiver_proto::reliable::{PostedBuffers, ReliableConnection, LEND_MESSAGE_TOKEN};
use quiver_transport::udp::UdpSocket;
use quiver_wire::frame;

use crate::addr::Addr;

/// What the endpoint sees of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Status {
    Connecting,
    Open,
    /// The peer closed gracefully.
    Closed,
    /// Broken for good: why.
    Failed(String),
}

/// One connection as the engine keeps it.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) core: ReliableConnection,
    /// The peer's address on path 0 (for messages).
    pub(super) to: SocketAddr,
    /// The peer's address on each path (index = path = own socket).
    pub(super) paths: Vec<SocketAddr>,
    /// The local endpoint's port.
    pub(super) local_port: u16,
    /// The endpoint at the other end.
    pub(super) peer: Addr,
    /// Accepted from a peer (true) or opened by a local connect (false).
    pub(super) inbound: bool,
    pub(super) status: Status,
    /// The endpoint gave the connection up; drop it once it is closed or failed.
    pub(super) abandoned: bool,
    /// Per path, the socket connected to the peer there that carries this connection's
    /// datagrams once it is open (see [`Sender`]).
    pub(super) senders: Vec<Sender>,
    /// A message from the peer was seen (for a connection this side opened: the peer
    /// sends on it too).
    pub(super) peer_sent: bool,
    /// Messages posted in place and not yet handed back, in stream order; the last may be
    /// lent in part (the rest follows as acknowledgements free room).
    pub(super) posted: VecDeque<Posted>,
    /// Buffers of receives posted in place (`DgramShared::post_recvs`) not yet handed
    /// back.
    pub(super) reads: PostedReads,
}

impl Entry {
    /// Lends more of the posted message not yet all lent (the last one), if any.
    pub(super) fn lend_posted(&mut self) -> u64 {
        let mut lent_now = 0;
        if let Some(last) = self.posted.back_mut() {
            while last.lent < last.data.len() {
                let count = self
                    .core
                    .lend_message_as(last.token, last.data.len() - last.lent);
                if count == 0 {
                    break;
                }
                last.lent += count;
                lent_now += count as u64;
            }
        }
        lent_now
    }
}

/// A message posted in place on a connection (`DgramShared::post_in_place`): the buffer
/// the protocol core reads its frames from until it releases the token.
#[derive(Debug)]
pub(super) struct Posted {
    pub(super) token: u64,
    pub(super) data: Vec<u8>,
    /// Bytes of it lent to the core so far.
    pub(super) lent: usize,
}

/// The message lent under `token`: the blocking send's `lent` for
/// [`LEND_MESSAGE_TOKEN`], else a posted one.
#[inline]
pub(super) fn lender<'a>(
    lent: &'a [u8],
    posted: &'a VecDeque<Posted>,
    token: u64,
) -> Option<&'a [u8]> {
    if token == LEND_MESSAGE_TOKEN {
        return Some(lent);
    }
    posted
        .iter()
        .find(|message| message.token == token)
        .map(|message| message.data.as_slice())
}

/// A connection sending a message in place and that message (see
/// `DgramShared::send_in_place`), or none.
pub(super) type Lender<'a> = Option<(u64, &'a [u8])>;

/// The message connection `id` lends bytes of, if `lender` is that connection (else empty:
/// without it no data frame goes out while bytes are lent).
#[inline]
pub(super) fn lent_of<'a>(lender: Lender<'a>, id: u64) -> &'a [u8] {
    match lender {
        Some((lender_id, message)) if lender_id == id => message,
        _ => &[],
    }
}

/// The sending socket of one path of an open udp connection. Datagrams sent through a
/// connected socket skip the kernel's route lookup (on the 2-core development VMs a loopback
/// send costs about a microsecond less, a third of it). It is bound
/// to the path's own address with a port of its own, so the peer's engine still receives
/// everything on its one socket per link and routes by connection id. The handshake leaves
/// from the link's socket (the peer learns that address from the Hello), and nothing but a
/// Reset is ever sent to this port: it is read when a retransmission timer fires.
#[derive(Debug, Default)]
pub(super) enum Sender {
    /// Not made yet.
    #[default]
    Untried,
    /// Connected to the peer's address on the path.
    Connected(Box<UdpSocket>),
    /// Could not be made: the link's socket sends.
    Unavailable,
}

/// Receive buffer of a sending socket: it only ever gets Resets.
const SENDER_RECEIVE_BUFFER_BYTES: usize = 64 << 10;

/// The connected socket for `path` of a connection to `to`, made on first use (bound to
/// the link socket's address `local`, any port); None when it cannot be made.
pub(super) fn sender_for(
    senders: &mut Vec<Sender>,
    path: usize,
    local: SocketAddr,
    to: SocketAddr,
) -> Option<&mut UdpSocket> {
    if senders.len() <= path {
        senders.resize_with(path + 1, Sender::default);
    }
    let slot = &mut senders[path];
    if let Sender::Untried = slot {
        let made = UdpSocket::bind(SocketAddr::new(local.ip(), 0)).and_then(|mut socket| {
            let _ = quiver_transport::udp::set_buffer_sizes(
                socket.as_fd(),
                quiver_transport::udp::DEFAULT_SOCKET_BUFFER_BYTES,
                SENDER_RECEIVE_BUFFER_BYTES,
            );
            socket.connect(to)?;
            Ok(socket)
        });
        *slot = match made {
            Ok(socket) => Sender::Connected(Box::new(socket)),
            Err(e) => {
                tracing::debug!(%to, error = %e, "no connected udp socket; sending from the link's");
                Sender::Unavailable
            }
        };
    }
    match slot {
        Sender::Connected(socket) => Some(socket),
        _ => None,
    }
}

/// The buffers of a connection's posted receives held by the engine
/// (`DgramShared::post_recvs`), (token, buffer) in posting order.
#[derive(Debug, Default)]
pub(super) struct PostedReads(pub(super) Vec<(u64, Vec<u8>)>);

impl PostedBuffers for PostedReads {
    fn buffer(&mut self, token: u64) -> Option<&mut [u8]> {
        self.0
            .iter_mut()
            .find(|(held, _)| *held == token)
            .map(|(_, buffer)| buffer.as_mut_slice())
    }
}

impl PostedReads {
    pub(super) fn take(&mut self, token: u64) -> Option<Vec<u8>> {
        let index = self.0.iter().position(|(held, _)| *held == token)?;
        Some(self.0.remove(index).1)
    }
}

/// The engine's connections by id, and by short id (`frame::short_id`: a Stream frame
/// carries only that much of its destination). `fresh_id` keeps short ids unique.
#[derive(Debug, Default)]
pub(super) struct ConnTable {
    by_id: IdMap<Entry>,
    by_short: ShortIdMap,
}

impl ConnTable {
    pub(super) fn contains_short(&self, short: u32) -> bool {
        self.by_short.contains_key(&short)
    }

    #[inline]
    pub(super) fn get(&self, id: &u64) -> Option<&Entry> {
        self.by_id.get(id)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut Entry> {
        self.by_id.get_mut(id)
    }

    /// The connection a Stream frame's short id names, with its full id.
    #[inline]
    pub(super) fn get_mut_short(&mut self, short: u32) -> Option<(u64, &mut Entry)> {
        let id = *self.by_short.get(&short)?;
        self.by_id.get_mut(&id).map(|entry| (id, entry))
    }

    pub(super) fn insert(&mut self, id: u64, entry: Entry) {
        self.by_short.insert(frame::short_id(id), id);
        self.by_id.insert(id, entry);
    }

    pub(super) fn remove(&mut self, id: &u64) -> Option<Entry> {
        let entry = self.by_id.remove(id)?;
        if self.by_short.get(&frame::short_id(*id)) == Some(id) {
            self.by_short.remove(&frame::short_id(*id));
        }
        Some(entry)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.by_id.values()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut Entry)> {
        self.by_id.iter_mut()
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&u64, &mut Entry) -> bool) {
        let by_short = &mut self.by_short;
        self.by_id.retain(|id, entry| {
            let kept = keep(id, entry);
            if !kept {
                by_short.remove(&frame::short_id(*id));
            }
            kept
        });
    }
}

/// Hashes a connection id as itself: ids are drawn at random by this engine (so a peer
/// cannot make them collide), and a lookup per datagram and per call then costs no SipHash.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }

    /// A short id (`frame::short_id`, the low 24 bits of an id drawn at random): spread
    /// over the whole word (Fibonacci hashing), as the table takes its control bits from
    /// the top ones.
    fn write_u32(&mut self, short: u32) {
        self.0 = u64::from(short).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Connections by id.
type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;
/// Connection ids by short id (looked up for every Stream frame: no SipHash either).
type ShortIdMap = HashMap<u32, u64, std::hash::BuildHasherDefault<IdHasher>>;
