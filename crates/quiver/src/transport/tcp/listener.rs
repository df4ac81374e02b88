//! The accepting side of tcp connections: the listener thread of a rank. It accepts,
//! runs the job-key handshake of [`quiver_proto::handshake`] on each stream (every
//! handshake in progress at once, with a deadline and a bound: [`crate::transport::handshakes`]),
//! resolves crossed connects ([`super::crossing`]) and hands each stream to its endpoint's
//! inbox.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use quiver_proto::handshake::{RejectReason, Responder};
use quiver_wire::handshake::{MAX_MESSAGE_LEN, PREFIX_LEN};

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::handshakes::{serve, Accepted, Handshake, Outcome, Step};
use crate::transport::liveness::{identity_params, local_peer_pid};
use crate::transport::local::LocalRank;
use crate::transport::registry::{not_open_reason, Inbox, NetInbound};
use crate::transport::rma_ops::RMA_PORT;
use crate::transport::rma_stream::StreamServed;

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

    /// Waits for the thread, which ends within a poll slice (100 ms) of
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

/// The listener thread: accepts, and answers every handshake in progress at once
/// ([`handshakes::serve`]), handing each stream to its endpoint.
pub(crate) fn listen(local: &LocalRank, listener: &TcpListener) {
    serve(local, "tcp", listener.as_raw_fd(), || {
        let (stream, from) = listener.accept()?;
        match PendingTcp::new(local, stream, from) {
            Ok(pending) => Ok(Accepted::New(pending)),
            Err(why) => {
                local.registry.refused(format!("tcp from {from}: {why}"));
                Ok(Accepted::Refused)
            }
        }
    });
}

/// Where a tcp handshake stands: the message it waits for next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Hello,
    Proof,
}

/// One tcp handshake in progress on the listener: the stream (non-blocking), the
/// responder's state and the bytes of the message being read.
struct PendingTcp {
    /// Taken when the stream is handed to its endpoint.
    stream: Option<TcpStream>,
    from: SocketAddr,
    handshake: Responder,
    stage: Stage,
    message: [u8; MAX_MESSAGE_LEN],
    /// Bytes of `message` read so far.
    filled: usize,
    /// The endpoint and peer of an accept recorded with [`Crossings::begin_accept`]
    /// (released when this handshake ends, however it ends).
    ///
    /// [`Crossings::begin_accept`]: super::crossing::Crossings::begin_accept
    claim: Option<(Arc<Inbox>, Addr)>,
    /// A request stream for one-sided operations (the hello asked for [`RMA_PORT`]), of
    /// this rank: handed to the rank's request service, not to an endpoint.
    requests_from: Option<u32>,
}

impl PendingTcp {
    fn new(
        local: &LocalRank,
        stream: TcpStream,
        from: SocketAddr,
    ) -> std::result::Result<PendingTcp, String> {
        stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| format!("configuring the stream: {e}"))?;
        Ok(PendingTcp {
            stream: Some(stream),
            from,
            handshake: Responder::new(local.job_key(), local.job_id, random()),
            stage: Stage::Hello,
            message: [0; MAX_MESSAGE_LEN],
            filled: 0,
            claim: None,
            requests_from: None,
        })
    }

    /// Reads what the stream has towards the current message; true once it is complete. A
    /// prefix that declares an impossible length completes the message alone, for the
    /// handshake parser to name the problem.
    fn read_some(&mut self) -> std::result::Result<bool, String> {
        let stream = self.stream.as_mut().ok_or("no stream")?;
        loop {
            let wanted = if self.filled < PREFIX_LEN {
                PREFIX_LEN
            } else {
                let declared = u16::from_be_bytes([self.message[6], self.message[7]]) as usize;
                if !(PREFIX_LEN..=MAX_MESSAGE_LEN).contains(&declared) {
                    return Ok(true);
                }
                declared
            };
            if self.filled == wanted {
                return Ok(true);
            }
            match stream.read(&mut self.message[self.filled..wanted]) {
                Ok(0) => return Err("the peer closed the connection during the handshake".into()),
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the handshake: {e}")),
            }
        }
    }

    /// Sends what the responder has to say. The stream is new and its messages small, so
    /// a full send buffer means a peer that does not read: a failure.
    fn flush(&mut self) -> std::result::Result<(), String> {
        let stream = self.stream.as_mut().ok_or("no stream")?;
        let mut out = [0u8; MAX_MESSAGE_LEN];
        while let Some(n) = self
            .handshake
            .poll_transmit(&mut out)
            .map_err(|e| e.to_string())?
        {
            stream
                .write_all(&out[..n])
                .map_err(|e| format!("sending: {e}"))?;
        }
        Ok(())
    }

    /// The hello arrived: refuse it, or answer with the challenge.
    fn on_hello(&mut self, local: &LocalRank, len: usize) -> Step {
        let request = match self.handshake.handle_hello(&self.message[..len]) {
            Ok(r) => r,
            Err(e) => {
                let _ = self.flush();
                return Step::Finished(Err(format!("hello: {e}")));
            }
        };
        let valid_src = request.src_rank < local.size;
        if request.dst_port == RMA_PORT && valid_src {
            self.requests_from = Some(request.src_rank);
            let answered = self
                .handshake
                .accept(&identity_params())
                .map_err(|e| e.to_string())
                .and_then(|()| self.flush());
            return match answered {
                Ok(()) => {
                    self.stage = Stage::Proof;
                    Step::Waiting
                }
                Err(why) => Step::Finished(Err(why)),
            };
        }
        let endpoint = local.registry.inbox(request.dst_port);
        let Some(endpoint) = endpoint.filter(|_| valid_src) else {
            let _ = self.handshake.reject(RejectReason::NoSuchEndpoint);
            let _ = self.flush();
            let why = not_open_reason(request.src_rank, request.dst_port);
            return Step::Finished(if valid_src {
                Ok(Outcome::NotOpen(why))
            } else {
                Err(format!(
                    "{why} (and rank {} is not in this job)",
                    request.src_rank
                ))
            });
        };
        let peer = Addr::new(request.src_rank, request.src_port);
        if !endpoint
            .tcp_crossings()
            .begin_accept(Addr::new(local.rank, request.dst_port), peer)
        {
            let _ = self.handshake.reject(RejectReason::Busy);
            let _ = self.flush();
            tracing::debug!(%peer, "crossed tcp connect: the peer uses ours");
            return Step::Finished(Ok(Outcome::Crossed));
        }
        // Until the stream is handed over (or this fails), a connect to `peer` waits for it.
        self.claim = Some((endpoint, peer));
        let answered = self
            .handshake
            .accept(&identity_params())
            .map_err(|e| e.to_string())
            .and_then(|()| self.flush());
        match answered {
            Ok(()) => {
                self.stage = Stage::Proof;
                Step::Waiting
            }
            Err(why) => Step::Finished(Err(why)),
        }
    }

    /// The proof arrived: refuse it, or send the verdict and hand the stream over.
    fn on_proof(&mut self, local: &LocalRank, len: usize) -> Step {
        if let Some(rank) = self.requests_from {
            return self.on_request_stream_proof(local, rank, len);
        }
        let Some((endpoint, peer)) = self.claim.clone() else {
            return Step::Finished(Err("a proof before the hello".into()));
        };
        let pid = match self.handshake.handle_proof(&self.message[..len]) {
            Ok(params) => local_peer_pid(params),
            Err(e) => {
                let _ = self.flush();
                return Step::Finished(Err(format!("rank {}: {e}", peer.rank)));
            }
        };
        if let Err(why) = self.flush() {
            return Step::Finished(Err(why));
        }
        let Some(stream) = self.stream.take() else {
            return Step::Finished(Err("no stream".into()));
        };
        tracing::debug!(%peer, local_pid = ?pid, "accepted a tcp connection");
        // Count first: once delivered, this rank may receive everything and read its stats
        // before this thread runs again.
        local.registry.accepted();
        let open = local.tcp.accepted();
        endpoint.deliver_inbound(NetInbound::Tcp {
            peer,
            stream,
            pid,
            open,
        });
        Step::Finished(Ok(Outcome::Accepted))
    }
}

impl PendingTcp {
    /// The proof of a request stream's handshake arrived: refuse it, or send the verdict
    /// and hand the stream to the rank's request service.
    fn on_request_stream_proof(&mut self, local: &LocalRank, rank: u32, len: usize) -> Step {
        if let Err(e) = self.handshake.handle_proof(&self.message[..len]) {
            let _ = self.flush();
            return Step::Finished(Err(format!("rank {rank}: {e}")));
        }
        if let Err(why) = self.flush() {
            return Step::Finished(Err(why));
        }
        let Some(stream) = self.stream.take() else {
            return Step::Finished(Err("no stream".into()));
        };
        tracing::debug!(rank, "accepted a one-sided request stream");
        local.registry.accepted();
        local.rma.adopt(Box::new(StreamServed::new(stream, rank)));
        // A sleeping endpoint watches the request streams it knew of: wake it for this one.
        local.registry.wake_all();
        Step::Finished(Ok(Outcome::Accepted))
    }
}

impl Handshake for PendingTcp {
    fn fd(&self) -> RawFd {
        self.stream.as_ref().map_or(-1, |s| s.as_raw_fd())
    }

    fn on_readable(&mut self, local: &LocalRank) -> Step {
        loop {
            match self.read_some() {
                Ok(true) => {}
                Ok(false) => return Step::Waiting,
                Err(why) => return Step::Finished(Err(why)),
            }
            let len = std::mem::take(&mut self.filled);
            let step = match self.stage {
                Stage::Hello => self.on_hello(local, len),
                Stage::Proof => self.on_proof(local, len),
            };
            if !matches!(step, Step::Waiting) {
                return step;
            }
        }
    }

    fn peer(&self) -> String {
        self.from.to_string()
    }
}

impl Drop for PendingTcp {
    fn drop(&mut self) {
        if let Some((endpoint, peer)) = self.claim.take() {
            endpoint.tcp_crossings().end_accept(peer);
        }
    }
}
