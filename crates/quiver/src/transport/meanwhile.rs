//! What a network edge asks of its endpoint while a blocking send on it waits
//! ([`Meanwhile`]): the peer may be blocked sending to us, so the endpoint keeps receiving
//! (posted receives advance, tcp streams are read ahead within `max_buffered_bytes`, the
//! datagram engine brings acknowledgements and credit). The edge is out of the endpoint's
//! list while its send runs, so the endpoint can lend itself whole.

use crate::error::Result;
use crate::transport::edge_context::EdgeContext;

/// The endpoint as a waiting network edge sees it (module docs).
pub(crate) trait Meanwhile {
    /// The endpoint's state the edge's driver uses (settings, requests, looks).
    fn context(&mut self) -> EdgeContext<'_>;

    /// Polls the datagram engine, if one runs (acknowledgements and credit arrive through
    /// it), and remembers that it was polled.
    fn poll_engine(&mut self);

    /// The caller polled the datagram engine itself: the next [`Meanwhile::receive`] need
    /// not poll it again.
    fn engine_polled(&mut self);

    /// Everything the endpoint does while an edge waits to send: the other edges' queued
    /// sends, posted receives, reading ahead what tcp peers sent (and the datagram engine,
    /// unless it was just polled).
    ///
    /// # Errors
    /// None today beyond those recorded in the requests themselves.
    fn receive(&mut self) -> Result<()>;

    /// Adds the descriptors of inbound edges a sleeping sender should wake up for (tcp
    /// streams with something to read ahead).
    fn wake_fds(&self, fds: &mut Vec<libc::pollfd>);
}
