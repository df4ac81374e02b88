//! The transports and the seam between them and the endpoint.
//!
//! Layer: below the endpoint, above `quiver-proto` (protocol state machines) and
//! `quiver-transport` (system calls). A transport must not reach into an endpoint's state.
//!
//! Each transport lives in its own folder and owns everything about itself: connection
//! setup (listener and connecting side), its driver, its waiting and its statistics:
//! - [`shm`]: shared-memory rings and cross-memory attach, for peers on this node;
//! - [`tcp`]: one stream per endpoint pair, for any network;
//! - [`dgram`]: the datagram engine running quiver's reliable protocol over udp (or the
//!   in-process `mem` sockets), striped over several links;
//! - [`xdp`]: the datagram engine's AF_XDP link sockets (the xdp transport: the same
//!   protocol, the kernel's IP/UDP stack skipped).
//!
//! The pieces every transport shares sit beside them, below the endpoint: the rank's shared
//! state ([`local`]), the endpoints' inboxes ([`registry`]), network binding ([`network`]),
//! the listeners' handshakes in progress ([`handshakes`]), peer-process liveness
//! ([`liveness`]), waiting ([`wait`], under the one policy of [`wait_policy`]), connection
//! retries ([`retry`]) and the fault
//! injector of the datagram sockets ([`fault`]).

pub(crate) mod dest;
pub(crate) mod dgram;
pub(crate) mod edge;
pub(crate) mod edge_context;
pub(crate) mod failure;
pub(crate) mod fault;
pub(crate) mod handshakes;
pub(crate) mod inbound_state;
pub(crate) mod liveness;
pub(crate) mod local;
pub(crate) mod meanwhile;
pub(crate) mod net_edge;
pub(crate) mod network;
pub(crate) mod protocols;
pub(crate) mod region_view;
pub(crate) mod regions;
pub(crate) mod registry;
pub(crate) mod requests;
pub(crate) mod retry;
pub(crate) mod rma_ops;
pub(crate) mod rma_pipeline;
pub(crate) mod rma_serve;
pub(crate) mod rma_stream;
pub(crate) mod shm;
pub(crate) mod tcp;
pub(crate) mod wait;
pub(crate) mod wait_policy;
pub(crate) mod wire_tag;
pub(crate) mod xdp;
