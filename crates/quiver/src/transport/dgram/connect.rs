//! Opening datagram connections: [`DgramShared::connect`] (the initiator's handshake,
//! retries while the peer is not there yet, and the reuse of a connection the peer opened
//! to us at the same time).
//!
//! Layer: the datagram transport. The handshake itself is the protocol core's, and
//! accepting a Hello from a stranger is the router's (`quiver_proto::router`, acted on in
//! `receive`); this module decides which connection to open and reports why one could not
//! be made.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quiver_proto::handshake::ConnectRequest;
use quiver_proto::reliable::{FailReason, ReliableConnection};
use quiver_proto::router::EndpointAddress;

use super::connection::{Entry, PostedReads, Status};
use super::engine::DgramShared;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::local::LocalRank;
use crate::transport::rma_ops::RMA_PORT;

/// Prefix of a failure that `connect` retries (the peer is not there yet).
pub(super) const RETRY: &str = "retry:";
/// Why `connect` retries when the peer refused a crossed connect with `Busy`.
pub(super) const CROSSED: &str =
    "retry:the peer is connecting to us at the same time (its connection is used)";

/// How [`DgramShared::connect`] ended.
pub(crate) enum Connected<T> {
    /// A new connection (its id).
    New(u64),
    /// The peer's own connection to us, found by the `reuse` hook: it carries both ways.
    Reused(T),
}

impl DgramShared {
    /// Opens a connection from `src` to `dst` at `to` and waits for its handshake.
    ///
    /// One connection carries both directions of an endpoint pair: before every attempt
    /// `reuse` looks for a connection the peer opened to us, which is then used instead. A
    /// peer connecting to us at the same moment with the lower address refuses our attempt
    /// with `Busy` (see `quiver_proto::router`); its connection arrives and `reuse` finds
    /// it.
    pub(crate) fn connect<T>(
        &self,
        ctx: &LocalRank,
        src: Addr,
        dst: Addr,
        to: SocketAddr,
        deadline: Instant,
        mut reuse: impl FnMut() -> Option<T>,
    ) -> Result<Connected<T>> {
        let request = ConnectRequest {
            job_id: self.job_id,
            src_rank: src.rank,
            src_port: src.port,
            dst_port: dst.port,
        };
        loop {
            if let Some(found) = reuse() {
                return Ok(Connected::Reused(found));
            }
            let Some(id) = self.start_attempt(ctx, request, src, dst, to)? else {
                if Instant::now() >= deadline {
                    return Err(Error::Refused {
                        peer: dst,
                        reason: format!(
                            "its connection to us was still being accepted at the connect \
                             timeout ({} {to})",
                            self.kind
                        ),
                    });
                }
                ctx.meanwhile(false);
                self.sleep(Duration::from_millis(1));
                continue;
            };
            let retry_why = match self.await_handshake(ctx, id, dst, to, deadline)? {
                Handshake::Open => return Ok(Connected::New(id)),
                Handshake::Retry(why) => why,
            };
            self.lock().router.remove(id);
            if Instant::now() >= deadline {
                return Err(Error::Refused {
                    peer: dst,
                    reason: format!("{} ({} {to})", &retry_why[RETRY.len()..], self.kind),
                });
            }
            // A crossed connect: the peer's connection is on its way.
            let pause = if retry_why == CROSSED { 1 } else { 5 };
            ctx.pause(Duration::from_millis(pause));
        }
    }

    /// Makes a new connection from `src` to `dst` at `to` and sends its Hello; returns its
    /// id, or None (nothing made) while the peer's own connection to this endpoint is being
    /// accepted (or was just handed over): the caller waits for it and uses it rather than
    /// open a second one.
    fn start_attempt(
        &self,
        ctx: &LocalRank,
        request: ConnectRequest,
        src: Addr,
        dst: Addr,
        to: SocketAddr,
    ) -> Result<Option<u64>> {
        let mut engine = self.lock();
        let peer = EndpointAddress::new(dst.rank, dst.port);
        // A request connection for one-sided operations never rides on another.
        let accepting = dst.port != RMA_PORT
            && (engine
                .router
                .inbound_under_way(src.port, peer, Entry::handshake)
                || ctx
                    .registry
                    .inbox(src.port)
                    .is_some_and(|ep| ep.has_incoming.load(Ordering::Acquire)));
        if accepting {
            return Ok(None);
        }
        let id = engine.fresh_id();
        let now = engine.now();
        let paths = engine.peer_paths(dst.rank, to);
        let config = engine.config_for(&to, paths.len());
        let core =
            ReliableConnection::connect(config, self.key.clone(), request, id, random(), now)
                .map_err(|e| Error::Config(format!("network settings: {e}")))?;
        engine.router.insert(
            id,
            Entry {
                core,
                to,
                paths,
                local_port: src.port,
                peer: dst,
                inbound: false,
                status: Status::Connecting,
                abandoned: false,
                senders: Vec::new(),
                peer_sent: false,
                posted: VecDeque::new(),
                reads: PostedReads::default(),
            },
        );
        engine.flush(id);
        Ok(Some(id))
    }

    /// Polls until connection `id` (to `dst` at `to`) is open, fails or `deadline` passes.
    /// A failure the caller retries (the peer is not there yet, or refused a crossed
    /// connect) is returned as [`Handshake::Retry`] with the connection still in the table;
    /// any other failure removes it and is the error.
    fn await_handshake(
        &self,
        ctx: &LocalRank,
        id: u64,
        dst: Addr,
        to: SocketAddr,
        deadline: Instant,
    ) -> Result<Handshake> {
        loop {
            let status = {
                let mut engine = self.lock();
                engine.poll(Some(ctx), self);
                engine.router.get(id).map(|e| e.status.clone())
            };
            match status {
                Some(Status::Open) => return Ok(Handshake::Open),
                Some(Status::Connecting) => {}
                Some(Status::Failed(why)) if why.starts_with(RETRY) => {
                    return Ok(Handshake::Retry(why))
                }
                Some(Status::Failed(why)) => {
                    let entry = self.lock().router.remove(id);
                    let reason = entry.and_then(|e| e.core.fail_reason());
                    return Err(match reason {
                        Some(FailReason::Handshake(e)) => {
                            Error::handshake(dst, self.kind.name(), e)
                        }
                        _ => Error::Refused {
                            peer: dst,
                            reason: format!("{why} ({} {to})", self.kind),
                        },
                    });
                }
                Some(Status::Closed) | None => {
                    self.lock().router.remove(id);
                    return Err(Error::Refused {
                        peer: dst,
                        reason: format!(
                            "the peer closed the connection during the handshake ({} {to})",
                            self.kind
                        ),
                    });
                }
            }
            if Instant::now() >= deadline {
                self.lock().router.remove(id);
                return Err(Error::Unreachable {
                    peer: dst,
                    transport: self.kind.name(),
                    detail: format!(
                        "no answer from {to} before the connect timeout (nobody \
                         listening there, or no route)"
                    ),
                });
            }
            // The engine was just polled; the rank's meanwhile is the rest.
            ctx.meanwhile(true);
            self.sleep(Duration::from_millis(1));
        }
    }
}

/// How a connect attempt's handshake ended when it did not fail for good.
enum Handshake {
    /// The connection is open.
    Open,
    /// Refused or unanswered in a way worth another attempt: why (prefixed [`RETRY`]).
    Retry(String),
}
