//! One-sided operations over tcp, in software: the initiator opens one more stream to the
//! target's listener, asking for the reserved port [`RMA_PORT`] in the job-key handshake
//! ([`request_stream`]), and sends requests on it; the listener hands that stream to the
//! rank's request service, where whichever endpoint of the target calls into quiver next
//! applies each request to the region. Both ends of the request stream are
//! `transport::rma_stream`'s (shared with the shm transport's path for lent memory); this
//! module only dials it.

use std::net::TcpStream;
use std::time::Instant;

use super::connect::{connect, Connected};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::local::LocalRank;
use crate::transport::rma_ops::RMA_PORT;
use crate::transport::rma_stream::StreamRma;

/// What a tcp edge keeps for its one-sided operations: a request stream to the peer,
/// dialed at the first operation.
pub(crate) fn request_stream() -> StreamRma {
    StreamRma::dialing("tcp", dial)
}

/// Opens a request stream from endpoint `src` to `peer`'s request service: the job-key
/// handshake on a new stream to the peer's listener, asking for [`RMA_PORT`], within the
/// connect timeout.
fn dial(local: &LocalRank, src: Addr, peer: Addr) -> Result<(TcpStream, Option<libc::pid_t>)> {
    let to = *local
        .addrs
        .get(peer.rank as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("rank {} has no address", peer.rank)))?;
    let deadline = Instant::now() + local.config.connect_timeout;
    let service = Addr::new(peer.rank, RMA_PORT);
    match connect(local, src, service, to, deadline, || Ok(None::<()>))? {
        Connected::New(stream, pid) => Ok((stream, pid)),
        Connected::Reused(()) => unreachable!("a request stream is never reused"),
    }
}
