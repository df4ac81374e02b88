//! The datagram engine: one per context, it owns the UDP sockets (or the AF_XDP links of
//! the xdp transport, `transport::xdp`, or the in-process `mem` sockets) of this rank, one
//! per link, and every reliable connection over them, in both
//! directions.
//!
//! Layer: a transport (below the endpoint, above `quiver-proto` and `quiver-transport`).
//! It owns the sockets and the connections' protocol cores, and runs the routing of
//! datagrams to them; it must not know about endpoints' queues or matching (it hands
//! accepted connections over through the context and answers the endpoint's calls by
//! connection id), nor decide routing itself.
//!
//! The protocol itself is [`quiver_proto::reliable`] (sans-IO), and so is the routing,
//! [`quiver_proto::router`] (the same router the simulator runs); the engine feeds them
//! datagrams and time, sends what they produce, and routes connections to endpoints:
//! - the router says which connection a datagram is for, by the destination connection id
//!   in its header; id 0 opens a new connection (a Hello), which the router accepts only
//!   for an open endpoint port (the engine tells it which are open); a stale id is
//!   answered with a Reset the router makes and the engine sends;
//! - progress is driven by whoever calls into the API (every endpoint call polls the
//!   engine), so no thread competes for the cores; a sleeping endpoint sleeps in poll on
//!   the engine's descriptor with the protocol's next timer as its timeout;
//! - links (`QUIVER_LINKS`, `docs/striping.md`): with several links the engine binds one
//!   socket per own link, and a connection to a rank is striped over the links both have:
//!   path i of the connection is (own socket i, the peer's link i). The protocol core
//!   chooses the path of every datagram; the engine only maps it. A datagram's arrival path
//!   is the socket it came in on. The engine's descriptor is then an epoll set of the
//!   sockets.
//!
//! All state sits behind one mutex; endpoints of one context on different threads take
//! turns.
//!
//! With `Config::faults` on (`QUIVER_FAULTS`, for tests and chaos runs), every link socket
//! sends and receives through its own fault injector (`transport::fault`); off, none is
//! made, and the send, receive and poll paths each pay one branch for it.
//!
//! The latency path (a small request answered at once): a busy-polling receive's poll is
//! one `recvfrom` of one datagram (`UdpSocket::recv_one`, no `recvmmsg` loop; a batch is
//! asked for only after a receive came back full; GRO is off while only short single
//! datagrams arrive, else the call is a costlier `recvmsg` that reports coalesced
//! segments) plus a clock read; a poll that finds nothing scans no connection. When a
//! datagram arrives, the poll hands it over first (dispatch, then the ack held back for
//! the application's answer, then the connection's events) and leaves its housekeeping
//! (timers, retired connections) to the next poll when all that arrived is a message
//! waiting for the application, whose answer should leave next; the next poll runs it
//! whatever it finds, so it is never put off twice in a row. A blocking receive on an
//! endpoint whose only inbound edge is one open connection polls and takes the message in
//! one call ([`DgramShared::take_whole`](engine::DgramShared::take_whole)). The answer
//! leaves with one `send` on the connection's connected socket (`UdpSocket::send_one`, no
//! message header to copy in), carrying the ack, before the core is asked for anything
//! more (the core itself processes the ack fields of the request only after that: "the
//! answer first" in `quiver_proto::reliable`): one datagram each way per round trip,
//! nothing allocated per message. The next poll flushes the connection whose ack waited
//! only when it still has something to send or an ack to process
//! (`ReliableConnection::transmit_pending`): after such an answer it has not. Nor does a
//! poll's housekeeping process an ack held for the answer by its timer (due at once: "due
//! at its arrival"): until the next poll flushes the connection, only its other timers
//! count (`ReliableConnection::poll_timeout_holding_ack`). The clock is still read on
//! every poll: reading it only after an arrival (and on every 16th poll for the timers)
//! moves that read onto the arrival path, where it costs what the shorter empty poll saves
//! (an arrival is noticed half an empty poll later on average); measured, no difference.
//!
//! The files, bottom up (each imports only those above it in this list):
//! - `mem`: the in-process datagram socket;
//! - `stats`: the counters the engine reports;
//! - `connection`: one connection's entry (core, paths, status, sending sockets, posted
//!   buffers; the table of entries by id is the router's);
//! - `udp_io`: the link sockets (udp with its batches, mem, xdp, udp through io_uring),
//!   their fault injectors (`transport::fault`), and the gathered (GSO) sends;
//! - `uring_io`: a udp link driven by io_uring (`QUIVER_UDP_IO`), and the fallback to
//!   plain sockets where io_uring is refused;
//! - `engine`: the engine's state (its [`quiver_proto::router::Router`] of entries among
//!   it), [`DgramShared`](engine::DgramShared) and its setup, the per-peer paths and
//!   settings;
//! - `router_host`: the engine's answers to the router's questions about a Hello, and the
//!   entry it keeps for a connection the router accepted;
//! - `receive`: taking datagrams from the sockets and acting on the router's verdict for
//!   each;
//! - `send`: flushing what a connection has to send;
//! - `connect`: opening connections;
//! - `poll`: the poll loop (receive, hand over, housekeeping) and connection events;
//! - `sleepers`: the endpoints asleep on their descriptor, whose doorbells a poll rings;
//! - `messages`: the endpoint's message calls (write, take, close);
//! - `in_place`: sends from the caller's buffer (blocking and posted);
//! - `posted_reads`: receives posted in place;
//! - `rma`: one-sided operations, the initiator's request connection and the target's
//!   serving of it;
//! - `inbound`, `outbound`: the endpoint's edges over the engine's connections;
//! - `endpoint_side`: what an endpoint keeps about the engine (posted receives handed to
//!   it, the lone-edge receive path, closing).
//!
//! Small helpers that the hot paths call from another of these files are `#[inline]`: the
//! files may be compiled in different codegen units.

pub(crate) mod connect;
mod connection;
pub(crate) mod endpoint_side;
pub(crate) mod engine;
mod in_place;
pub(crate) mod inbound;
pub(crate) mod mem;
mod messages;
pub(crate) mod outbound;
mod path_mtu;
mod poll;
pub(crate) mod posted_reads;
pub(crate) mod protocols;
mod receive;
mod receive_uring;
pub(crate) mod rma;
mod router_host;
mod send;
mod sleepers;
pub(crate) mod stats;
mod udp_io;
mod uring_io;
