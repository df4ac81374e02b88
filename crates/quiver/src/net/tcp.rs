//! TCP connection setup: the listener thread of a context and the connecting side, both
//! running the job-key handshake of [`quiver_proto::handshake`] on the stream before it
//! carries any message. Handshake messages carry their own length (bytes 6..8 of their
//! prefix), so they need no extra framing. After the Verdict the stream carries
//! [`quiver_wire::stream`] frames; the endpoint drives it (see `endpoint/net.rs`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quiver_proto::handshake::{ConnectRequest, HandshakeError, Initiator, RejectReason, Responder};
use quiver_transport::sys;
use quiver_wire::handshake::{MAX_MESSAGE_LEN, PREFIX_LEN};

use crate::context::{random, retry_until, Attempt, ContextShared, NetInbound};
use crate::error::{Error, Result};
use crate::Addr;

/// Time a single handshake step may take before the socket gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the listener looks at the stop flag.
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// Binds the rank's TCP listener.
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(addr).map_err(|e| Error::bind("tcp", addr, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("configuring the tcp listener", e))?;
    Ok(listener)
}

/// The listener thread: accepts, handshakes, hands each stream to its endpoint.
pub(crate) fn listen(shared: &ContextShared, listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    while !shared.stopping.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, from)) => match respond(shared, stream) {
                // Counted by `respond` before the stream reaches the endpoint.
                Ok(Responded::Accepted) => {}
                // Not a refusal: the peer uses the connection we opened to it.
                Ok(Responded::Crossed) => {}
                Err(why) => shared.refused(format!("tcp from {from}: {why}")),
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

fn read_message(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    stream.read_exact(&mut buf[..PREFIX_LEN])?;
    let declared = u16::from_be_bytes([buf[6], buf[7]]) as usize;
    if !(PREFIX_LEN..=buf.len()).contains(&declared) {
        // Let the handshake parser name the problem from the prefix alone.
        return Ok(PREFIX_LEN);
    }
    stream.read_exact(&mut buf[PREFIX_LEN..declared])?;
    Ok(declared)
}

/// How a handshake the listener answered ended (other than in an error).
enum Responded {
    /// The stream was handed to its endpoint.
    Accepted,
    /// A crossed connect (see [`crate::context::EndpointShared::begin_tcp_accept`]):
    /// refused with `Busy`, the peer uses the connection this endpoint opened to it.
    Crossed,
}

fn respond(
    shared: &ContextShared,
    mut stream: TcpStream,
) -> std::result::Result<Responded, String> {
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(STEP_TIMEOUT)))
        .and_then(|()| stream.set_write_timeout(Some(STEP_TIMEOUT)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| e.to_string())?;
    let mut hs = Responder::new(shared.job_key(), shared.job_id, random());
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
    let endpoint = shared.endpoint_shared(request.dst_port);
    let Some(endpoint) = endpoint.filter(|_| request.src_rank < shared.size) else {
        hs.reject(RejectReason::NoSuchEndpoint)
            .map_err(|e| e.to_string())?;
        let _ = flush(&mut hs, &mut out, &mut stream);
        return Err(format!(
            "rank {} asked for port {}, which is not open",
            request.src_rank, request.dst_port
        ));
    };
    let peer = Addr::new(request.src_rank, request.src_port);
    if !endpoint.begin_tcp_accept(Addr::new(shared.rank, request.dst_port), peer) {
        hs.reject(RejectReason::Busy).map_err(|e| e.to_string())?;
        let _ = flush(&mut hs, &mut out, &mut stream);
        tracing::debug!(%peer, "crossed tcp connect: the peer uses ours");
        return Ok(Responded::Crossed);
    }
    // Until the stream is handed over (or this fails), a connect to `peer` waits for it.
    let accepted = (|| {
        hs.accept(&crate::endpoint::identity_params())
            .map_err(|e| e.to_string())?;
        flush(&mut hs, &mut out, &mut stream)?;
        let n = read_message(&mut stream, &mut buf).map_err(|e| format!("reading proof: {e}"))?;
        let pid = match hs.handle_proof(&buf[..n]) {
            Ok(params) => crate::endpoint::local_peer_pid(params),
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
        shared.accepted();
        endpoint.deliver_inbound(NetInbound::Tcp { peer, stream, pid });
        Ok(Responded::Accepted)
    })();
    endpoint.end_tcp_accept(peer);
    accepted
}

/// How [`connect`] ended.
pub(crate) enum Connected<T> {
    /// A new stream (and the peer's pid when it runs on this node).
    New(TcpStream, Option<libc::pid_t>),
    /// The peer's own connection to us, found by the `reuse` hook: it carries both ways.
    Reused(T),
}

/// Connects endpoint `src` to `dst` over TCP at `to`, retrying while the peer is not
/// listening yet or its endpoint is not open, until `deadline`. Returns the stream and,
/// when the peer runs on this node, its pid.
///
/// One stream carries both directions of an endpoint pair. Before every attempt `reuse`
/// looks for a connection the peer opened to us: `Ok(Some)` uses it instead, `Err(why)`
/// waits (our listener is accepting one from the peer right now) and asks again. A peer
/// that is connecting to us at the same moment and has the lower address refuses our
/// attempt with `Busy` (see [`crate::context::EndpointShared::begin_tcp_accept`]); its
/// connection then arrives here and `reuse` finds it.
pub(crate) fn connect<T>(
    shared: &ContextShared,
    src: Addr,
    dst: Addr,
    to: SocketAddr,
    deadline: Instant,
    mut reuse: impl FnMut() -> std::result::Result<Option<T>, String>,
) -> Result<Connected<T>> {
    retry_until(dst, deadline, &format!("tcp {to}"), || {
        if let Some(found) = reuse().map_err(Attempt::Retry)? {
            return Ok(Connected::Reused(found));
        }
        let (stream, pid) = try_connect(shared, src, dst, to)?;
        Ok(Connected::New(stream, pid))
    })
}

fn try_connect(
    shared: &ContextShared,
    src: Addr,
    dst: Addr,
    to: SocketAddr,
) -> std::result::Result<(TcpStream, Option<libc::pid_t>), Attempt> {
    let io_fail =
        |what: &str, e: io::Error| Attempt::Fail(Error::io(format!("{what} {dst} (tcp {to})"), e));
    let mut stream = match TcpStream::connect_timeout(&to, STEP_TIMEOUT) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            return Err(Attempt::Retry(format!(
                "rank {} is not listening at tcp {to}",
                dst.rank
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            return Err(Attempt::Silent(
                "tcp",
                format!(
                    "connecting to {to}: no answer within {} ms",
                    STEP_TIMEOUT.as_millis()
                ),
            ))
        }
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) | Some(libc::EADDRNOTAVAIL)
            ) =>
        {
            return Err(Attempt::Fail(Error::Unreachable {
                peer: dst,
                transport: "tcp",
                detail: format!("connecting to {to}: {e} (no route to that address from here)"),
            }))
        }
        Err(e) => {
            return Err(Attempt::Fail(Error::socket(
                format!("connecting to {dst} (tcp {to})"),
                e,
            )))
        }
    };
    stream
        .set_read_timeout(Some(STEP_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(STEP_TIMEOUT)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| io_fail("configuring the stream to", e))?;
    let request = ConnectRequest {
        job_id: shared.job_id,
        src_rank: src.rank,
        src_port: src.port,
        dst_port: dst.port,
    };
    let mut hs = Initiator::new(shared.job_key(), request, random());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let failed = |e| Attempt::Fail(Error::handshake(dst, "tcp", e));
    let transmit = |hs: &mut Initiator, out: &mut [u8], stream: &mut TcpStream| {
        while let Some(n) = hs.poll_transmit(out).map_err(failed)? {
            stream
                .write_all(&out[..n])
                .map_err(|e| io_fail("handshaking with", e))?;
        }
        Ok::<(), Attempt>(())
    };
    transmit(&mut hs, &mut out, &mut stream)?;
    let n = read_message(&mut stream, &mut buf).map_err(|e| io_fail("handshaking with", e))?;
    let pid = match hs.handle_challenge(&buf[..n], &crate::endpoint::identity_params()) {
        Ok(params) => crate::endpoint::local_peer_pid(params),
        Err(HandshakeError::NoSuchEndpoint { .. }) => {
            return Err(Attempt::Retry(format!("endpoint {dst} is not open")));
        }
        Err(HandshakeError::Busy { .. }) => {
            return Err(Attempt::Retry(format!(
                "endpoint {dst} is connecting to us at the same time (its connection is used)"
            )));
        }
        Err(e) => return Err(failed(e)),
    };
    transmit(&mut hs, &mut out, &mut stream)?;
    let n = read_message(&mut stream, &mut buf).map_err(|e| io_fail("handshaking with", e))?;
    hs.handle_verdict(&buf[..n]).map_err(failed)?;
    stream
        .set_nonblocking(true)
        .map_err(|e| io_fail("configuring the stream to", e))?;
    Ok((stream, pid))
}
