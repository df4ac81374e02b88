//! The accepting side of tcp connections: the listener thread of a rank. It accepts,
//! runs the job-key handshake of [`quiver_proto::handshake`] on the stream, resolves
//! crossed connects ([`super::crossing`]) and hands each stream to its endpoint's inbox.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use quiver_proto::handshake::{RejectReason, Responder};
use quiver_transport::sys;
use quiver_wire::handshake::MAX_MESSAGE_LEN;

use super::handshake::{read_message, STEP_TIMEOUT};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::liveness::{identity_params, local_peer_pid};
use crate::transport::local::LocalRank;
use crate::transport::registry::{not_open_reason, NetInbound};

/// How often the listener looks at the stop flag.
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// A rank's tcp listener thread.
#[derive(Debug)]
pub(crate) struct TcpListening {
    thread: Option<JoinHandle<()>>,
}

impl TcpListening {
    /// Starts accepting on `listener` (from [`bind`]) in a thread of its own.
    ///
    /// # Errors
    /// [`Error::Io`] when the thread cannot start.
    pub(crate) fn start(local: Arc<LocalRank>, listener: TcpListener) -> Result<TcpListening> {
        let thread = std::thread::Builder::new()
            .name("quiver-tcp-listener".into())
            .spawn(move || listen(&local, &listener))
            .map_err(|e| Error::io("starting the tcp listener thread", e))?;
        Ok(TcpListening {
            thread: Some(thread),
        })
    }

    /// Waits for the thread, which ends within [`ACCEPT_SLICE`] of
    /// [`LocalRank::stopping`] being set.
    pub(crate) fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds the rank's TCP listener.
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(addr).map_err(|e| Error::bind("tcp", addr, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("configuring the tcp listener", e))?;
    Ok(listener)
}

/// The listener thread: accepts, handshakes, hands each stream to its endpoint.
pub(crate) fn listen(local: &LocalRank, listener: &TcpListener) {
    while !local.stopping.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, from)) => match respond(local, stream) {
                // Counted by `respond` before the stream reaches the endpoint.
                Ok(Responded::Accepted) => {}
                // Not a refusal: the peer uses the connection we opened to it.
                Ok(Responded::Crossed) => {}
                Ok(Responded::NotOpen(why)) => {
                    local.registry.not_open(format!("tcp from {from}: {why}"))
                }
                Err(why) => local.registry.refused(format!("tcp from {from}: {why}")),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let _ = sys::poll(&mut fds, Some(ACCEPT_SLICE));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// How a handshake the listener answered ended (other than in an error).
enum Responded {
    /// The stream was handed to its endpoint.
    Accepted,
    /// A crossed connect (see [`Crossings::begin_accept`](super::crossing::Crossings::begin_accept)):
    /// refused with `Busy`, the peer uses the connection this endpoint opened to it.
    Crossed,
    /// The endpoint asked for is not open (yet): refused with `NoSuchEndpoint`, the
    /// initiator retries. Why, for the log.
    NotOpen(String),
}

fn respond(local: &LocalRank, mut stream: TcpStream) -> std::result::Result<Responded, String> {
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(STEP_TIMEOUT)))
        .and_then(|()| stream.set_write_timeout(Some(STEP_TIMEOUT)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| e.to_string())?;
    let mut hs = Responder::new(local.job_key(), local.job_id, random());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let flush = |hs: &mut Responder, out: &mut [u8], stream: &mut TcpStream| {
        while let Some(n) = hs.poll_transmit(out).map_err(|e| e.to_string())? {
            stream
                .write_all(&out[..n])
                .map_err(|e| format!("sending: {e}"))?;
        }
        Ok::<(), String>(())
    };
    let n = read_message(&mut stream, &mut buf).map_err(|e| format!("reading hello: {e}"))?;
    let request = match hs.handle_hello(&buf[..n]) {
        Ok(r) => r,
        Err(e) => {
            let _ = flush(&mut hs, &mut out, &mut stream);
            return Err(format!("hello: {e}"));
        }
    };
    let endpoint = local.registry.inbox(request.dst_port);
    let Some(endpoint) = endpoint.filter(|_| request.src_rank < local.size) else {
        hs.reject(RejectReason::NoSuchEndpoint)
            .map_err(|e| e.to_string())?;
        let _ = flush(&mut hs, &mut out, &mut stream);
        let why = not_open_reason(request.src_rank, request.dst_port);
        return if request.src_rank < local.size {
            Ok(Responded::NotOpen(why))
        } else {
            Err(format!(
                "{why} (and rank {} is not in this job)",
                request.src_rank
            ))
        };
    };
    let peer = Addr::new(request.src_rank, request.src_port);
    if !endpoint
        .tcp_crossings()
        .begin_accept(Addr::new(local.rank, request.dst_port), peer)
    {
        hs.reject(RejectReason::Busy).map_err(|e| e.to_string())?;
        let _ = flush(&mut hs, &mut out, &mut stream);
        tracing::debug!(%peer, "crossed tcp connect: the peer uses ours");
        return Ok(Responded::Crossed);
    }
    // Until the stream is handed over (or this fails), a connect to `peer` waits for it.
    let accepted = (|| {
        hs.accept(&identity_params()).map_err(|e| e.to_string())?;
        flush(&mut hs, &mut out, &mut stream)?;
        let n = read_message(&mut stream, &mut buf).map_err(|e| format!("reading proof: {e}"))?;
        let pid = match hs.handle_proof(&buf[..n]) {
            Ok(params) => local_peer_pid(params),
            Err(e) => {
                let _ = flush(&mut hs, &mut out, &mut stream);
                return Err(format!("rank {}: {e}", request.src_rank));
            }
        };
        flush(&mut hs, &mut out, &mut stream)?;
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("configuring the stream: {e}"))?;
        tracing::debug!(%peer, local_pid = ?pid, "accepted a tcp connection");
        // Count first: once delivered, this rank may receive everything and read its stats
        // before this thread runs again.
        local.registry.accepted();
        endpoint.deliver_inbound(NetInbound::Tcp { peer, stream, pid });
        Ok(Responded::Accepted)
    })();
    endpoint.tcp_crossings().end_accept(peer);
    accepted
}
