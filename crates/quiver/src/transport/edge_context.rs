//! What an edge's driver may touch besides the edge itself ([`EdgeContext`]): the
//! endpoint's settings, its requests, its liveness looks, the rank's shared state and the
//! endpoint's inbox. The endpoint lends these for one call; the edge's own state stays in
//! the edge.

use crate::addr::Addr;
use crate::config::Config;
use crate::transport::liveness::Looks;
use crate::transport::local::LocalRank;
use crate::transport::registry::Inbox;
use crate::transport::requests::Requests;

/// The endpoint's state an edge's driver uses during one call (module docs).
pub(crate) struct EdgeContext<'a> {
    /// The endpoint's address (for logs).
    pub(crate) addr: Addr,
    /// The endpoint's settings (thresholds, spin, timeouts, detection).
    pub(crate) config: &'a Config,
    /// The endpoint's requests, completed by the drivers.
    pub(crate) requests: &'a mut Requests,
    /// The endpoint's liveness looks (when the next is due, what they cost).
    pub(crate) detection: &'a mut Looks,
    /// The rank's shared state (the datagram engine, the registry).
    pub(crate) local: &'a LocalRank,
    /// The endpoint's inbox (tcp connects in flight).
    pub(crate) inbox: &'a Inbox,
}
