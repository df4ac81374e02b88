//! What the router asks of the one who runs it: randomness, and the facts about links,
//! endpoints and connections that only the engine (or the simulator) knows.
//!
//! Layer: sans-IO, inside [`crate::router`]. It owns the [`RouterHost`] trait and the plain
//! types that cross it; no logic, no I/O, no clock.

use crate::handshake::ConnectRequest;
use crate::reliable::ReliableConfig;

/// An endpoint of the job: a rank and a port of that rank. Ordered by rank, then port: of
/// two endpoints connecting to each other at the same moment, the connection the lower one
/// opened carries both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointAddress {
    /// The rank (process) of the job.
    pub rank: u32,
    /// The endpoint's port within that rank.
    pub port: u16,
}

impl EndpointAddress {
    /// Endpoint `port` of `rank`.
    pub const fn new(rank: u32, port: u16) -> Self {
        Self { rank, port }
    }
}

/// Which side opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Opened by a peer's Hello (the router accepted it).
    Inbound,
    /// Opened by a local connect.
    Outbound,
}

/// A connection whose handshake is under way and that its endpoint still wants: what the
/// router needs to resolve two endpoints connecting to each other at the same moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handshake {
    /// Who opened it.
    pub direction: Direction,
    /// The local endpoint's port.
    pub local_port: u16,
    /// The endpoint at the other end.
    pub peer: EndpointAddress,
}

/// How a Hello that arrived on a path is accepted: the host's answer to
/// [`RouterHost::inbound_path`].
#[derive(Debug, Clone)]
pub struct InboundPath {
    /// The path the new connection takes the Hello on (below `config.path_count`).
    pub path: usize,
    /// The new connection's configuration; its `path_count` is the number of paths this
    /// node shares with the peer.
    pub config: ReliableConfig,
}

/// The router's view of the one who runs it (the datagram engine, the simulator, a test).
///
/// `A` is the type of a datagram's source address (a `SocketAddr`, a simulated node), `C`
/// the caller's connection value kept in the router's table. Every method is called only
/// while [`crate::router::Router::handle`] handles a datagram with destination id 0 (a
/// Hello), in this order: [`inbound_path`](RouterHost::inbound_path),
/// [`random_u64`](RouterHost::random_u64) (until the id fits),
/// [`random_nonce`](RouterHost::random_nonce), then, once the Hello proved to be of the job,
/// [`endpoint_open`](RouterHost::endpoint_open), and, if the endpoint is open,
/// [`local_rank`](RouterHost::local_rank) and [`handshake`](RouterHost::handshake) (for any
/// number of connections, in table order).
pub trait RouterHost<A, C> {
    /// Eight random bytes for a connection id (from the OS, or a seeded generator).
    fn random_u64(&mut self) -> u64;

    /// Sixteen random bytes for the handshake nonce of a connection being accepted.
    fn random_nonce(&mut self) -> [u8; 16];

    /// How to accept a Hello that claims to come from `claimed_rank` (`u32::MAX` when the
    /// payload is not a Hello), sent from `from` and arrived on `path`: the path and the
    /// configuration of the new connection, or `None` when `path` is a link this node does
    /// not share with that rank (the Hello is then dropped).
    fn inbound_path(&mut self, claimed_rank: u32, from: &A, path: usize) -> Option<InboundPath>;

    /// Whether an endpoint takes the connection `request` asks for (the port is open, the
    /// rank is of the job). A Hello for a closed endpoint is answered with a rejection.
    fn endpoint_open(&mut self, request: &ConnectRequest) -> bool;

    /// The rank of the engine the router serves (its endpoints' addresses are this rank and
    /// their ports).
    fn local_rank(&self) -> u32;

    /// The handshake `connection` is in, while it is under way and its endpoint still wants
    /// the connection; `None` once it is established, failed, closed or given up.
    fn handshake(&self, connection: &C) -> Option<Handshake>;
}
