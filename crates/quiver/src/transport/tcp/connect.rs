//! The connecting side of tcp connections: `Endpoint::connect` over tcp runs the job-key
//! handshake on a new stream, or reuses the stream the peer opened to this endpoint (one
//! stream carries both directions of an endpoint pair).

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use quiver_proto::handshake::{ConnectRequest, HandshakeError, Initiator};
use quiver_wire::handshake::MAX_MESSAGE_LEN;

use super::handshake::{read_message, STEP_TIMEOUT};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::liveness::{identity_params, local_peer_pid};
use crate::transport::local::LocalRank;
use crate::transport::retry::{retry_until, Attempt};

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
/// attempt with `Busy` (see [`Crossings::begin_accept`](super::crossing::Crossings::begin_accept)); its
/// connection then arrives here and `reuse` finds it.
pub(crate) fn connect<T>(
    local: &LocalRank,
    src: Addr,
    dst: Addr,
    to: SocketAddr,
    deadline: Instant,
    mut reuse: impl FnMut() -> std::result::Result<Option<T>, String>,
) -> Result<Connected<T>> {
    retry_until(local, dst, deadline, &format!("tcp {to}"), || {
        if let Some(found) = reuse().map_err(Attempt::Retry)? {
            return Ok(Connected::Reused(found));
        }
        let (stream, pid) = try_connect(local, (src, dst), to, deadline)?;
        Ok(Connected::New(stream, pid))
    })
}

/// One attempt: a new stream and the handshake on it, each step waiting at most
/// [`STEP_TIMEOUT`] and never past `deadline`. A handshake cut off (the peer's listener
/// closed it, as it does with the oldest or a random pending one when strangers crowd it)
/// is tried again.
fn try_connect(
    local: &LocalRank,
    (src, dst): (Addr, Addr),
    to: SocketAddr,
    deadline: Instant,
) -> std::result::Result<(TcpStream, Option<libc::pid_t>), Attempt> {
    let io_fail = |what: &str, e: io::Error| {
        if cut_off(&e) {
            Attempt::Retry(format!(
                "the handshake with {dst} (tcp {to}) was cut off ({e}); the peer's listener \
                 drops handshakes when strangers crowd it"
            ))
        } else {
            Attempt::Fail(Error::io(format!("{what} {dst} (tcp {to})"), e))
        }
    };
    let step = STEP_TIMEOUT
        .min(deadline.saturating_duration_since(Instant::now()))
        .max(Duration::from_millis(1));
    let mut stream = match TcpStream::connect_timeout(&to, step) {
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
                    step.as_millis()
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
        .set_read_timeout(Some(step))
        .and_then(|()| stream.set_write_timeout(Some(step)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| io_fail("configuring the stream to", e))?;
    let request = ConnectRequest {
        job_id: local.job_id,
        src_rank: src.rank,
        src_port: src.port,
        dst_port: dst.port,
    };
    let mut hs = Initiator::new(local.job_key(), request, random());
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
    let pid = match hs.handle_challenge(&buf[..n], &identity_params()) {
        Ok(params) => local_peer_pid(params),
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

/// Whether a handshake error means the other end closed or stopped answering the stream (a
/// listener dropping the handshake), rather than a local failure.
fn cut_off(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Duration;

    use quiver_proto::handshake::Responder;
    use quiver_wire::handshake::NONCE_LEN;

    use super::*;
    use crate::config::Config;
    use crate::job::JobInfo;

    /// Sends everything `handshake` has to say on `stream`.
    fn flush(handshake: &mut Responder, stream: &mut TcpStream) {
        let mut out = [0u8; MAX_MESSAGE_LEN];
        while let Some(n) = handshake.poll_transmit(&mut out).unwrap() {
            stream.write_all(&out[..n]).unwrap();
        }
    }

    /// A listener that drops the first handshake after its hello (as one crowded by
    /// strangers does) and answers the second: the connect tries again and gets through
    /// well within its deadline.
    #[test]
    fn a_dropped_handshake_is_tried_again() {
        let mut job = JobInfo::by_hand();
        job.size = 2;
        job.key = [5; 32];
        let local = LocalRank::new(job, Config::default(), None);
        let (key, job_id) = (local.job_key(), local.job_id);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let mut buf = [0u8; MAX_MESSAGE_LEN];
            let (mut first, _) = listener.accept().unwrap();
            read_message(&mut first, &mut buf).unwrap();
            drop(first);
            let (mut second, _) = listener.accept().unwrap();
            let mut handshake = Responder::new(key, job_id, [1; NONCE_LEN]);
            let n = read_message(&mut second, &mut buf).unwrap();
            handshake.handle_hello(&buf[..n]).unwrap();
            handshake.accept(&[]).unwrap();
            flush(&mut handshake, &mut second);
            let n = read_message(&mut second, &mut buf).unwrap();
            handshake.handle_proof(&buf[..n]).unwrap();
            flush(&mut handshake, &mut second);
            second
        });
        let started = Instant::now();
        let deadline = started + Duration::from_secs(5);
        let (src, dst) = (Addr::new(0, 0), Addr::new(1, 1));
        match connect(&local, src, dst, to, deadline, || Ok(None::<()>)) {
            Ok(Connected::New(..)) => {}
            Ok(Connected::Reused(())) => panic!("nothing to reuse"),
            Err(e) => panic!("the second attempt should get through: {e}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        peer.join().unwrap();
    }
}
