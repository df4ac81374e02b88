//! The shared-memory transport, for peers on this node: a ring per directed edge, short
//! messages inline, eager messages copied in fragments, rendezvous by cross-memory attach.

pub(crate) mod connect;
pub(crate) mod eager;
pub(crate) mod inbound;
pub(crate) mod listener;
pub(crate) mod outbound;
pub(crate) mod protocols;
pub(crate) mod rendezvous;
