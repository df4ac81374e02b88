//! The accepting side of shared-memory connections: the listener thread of a rank.
//!
//! Every rank listens on an abstract unix socket named after its job and rank
//! ([`socket_name`]). A connecting endpoint opens a SOCK_SEQPACKET connection there and
//! runs the job-key handshake of [`quiver_proto::handshake`]; its Proof carries the address
//! of a probe word so this side can check that cross-memory attach works between the two
//! processes. This side then creates the ring for the directed edge and sends it, with its
//! endpoint's doorbell, in a setup message ([`quiver_wire::shm_setup`]). The kernel vouches
//! for the peer's pid (SO_PEERCRED), which becomes a pidfd for death detection.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use quiver_proto::handshake::{RejectReason, Responder};
use quiver_transport::ring::Consumer;
use quiver_transport::sys;
use quiver_wire::handshake::MAX_MESSAGE_LEN;
use quiver_wire::shm_setup::{SetupRepr, SetupStatus};

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::local::LocalRank;
use crate::transport::registry::{not_open_reason, Inbox, NewInbound};

/// Time a single handshake step may take before the socket gives up.
pub(crate) const HANDSHAKE_STEP_TIMEOUT: Duration = Duration::from_secs(2);

/// Abstract socket name of a rank's listener.
pub(crate) fn socket_name(job_id: u64, rank: u32) -> Vec<u8> {
    format!("quiver.{job_id:016x}.{rank}").into_bytes()
}

/// A rank's shared-memory listener: its socket and the thread that answers it.
#[derive(Debug)]
pub(crate) struct ShmListener {
    socket: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl ShmListener {
    /// Listens as `rank` of job `job_id` (fails if that rank already runs here).
    ///
    /// # Errors
    /// [`Error::Io`] naming the rank and job.
    pub(crate) fn bind(job_id: u64, rank: u32) -> Result<Arc<OwnedFd>> {
        let listener = sys::seqpacket_listen(&socket_name(job_id, rank)).map_err(|e| {
            Error::io(
                format!(
                    "listening as rank {rank} of job {job_id:016x} (is this rank already running?)"
                ),
                e,
            )
        })?;
        Ok(Arc::new(listener))
    }

    /// Starts answering `socket` (from [`ShmListener::bind`]) in a thread of its own.
    ///
    /// # Errors
    /// [`Error::Io`] when the thread cannot start.
    pub(crate) fn start(local: Arc<LocalRank>, socket: Arc<OwnedFd>) -> Result<ShmListener> {
        let answered = socket.clone();
        let thread = std::thread::Builder::new()
            .name("quiver-listener".into())
            .spawn(move || listen(&local, &answered))
            .map_err(|e| Error::io("starting the listener thread", e))?;
        Ok(ShmListener {
            socket,
            thread: Some(thread),
        })
    }

    /// Stops the thread (the caller set [`LocalRank::stopping`] first) and waits for it.
    pub(crate) fn stop(&mut self) {
        sys::shutdown(&self.socket);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(crate) fn listen(local: &LocalRank, listener: &OwnedFd) {
    accept_loop(
        local,
        || sys::accept(listener),
        |sock| {
            // `respond` counts the acceptance itself, before the peer can start sending.
            match respond(local, &sock) {
                Ok(Answered::Accepted) => {}
                Ok(Answered::NotOpen(why)) => local.registry.not_open(why),
                Err(why) => local.registry.refused(why),
            }
        },
    );
}

/// First pause of a listener after a failed accept; it doubles with each failure in a row.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause (it also bounds how long a stopping context waits for the thread).
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(200);

/// Takes connections from `accept` and hands each to `serve` until the rank stops. A
/// failed accept never ends the listener: an interrupted call or a connection the peer
/// abandoned is simply retried; anything else (out of descriptors or memory, or an error
/// nobody expected) is counted and logged ([`Registry::accept_failed`]) and retried after
/// a pause that doubles while failures follow each other, from [`ACCEPT_BACKOFF_MIN`] to
/// [`ACCEPT_BACKOFF_MAX`].
///
/// [`Registry::accept_failed`]: crate::transport::registry::Registry::accept_failed
fn accept_loop(
    local: &LocalRank,
    mut accept: impl FnMut() -> std::io::Result<OwnedFd>,
    mut serve: impl FnMut(OwnedFd),
) {
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = accept();
        if local.stopping.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok(sock) => {
                backoff = ACCEPT_BACKOFF_MIN;
                serve(sock);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ECONNABORTED)) => {}
            Err(e) => {
                local.registry.accept_failed("shm", &e, backoff);
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

/// How a handshake the listener answered ended, when nothing failed.
enum Answered {
    /// The new inbound edge was registered with its endpoint.
    Accepted,
    /// The endpoint asked for is not open (yet): refused with `NoSuchEndpoint`, the
    /// initiator retries. Why, for the log.
    NotOpen(String),
}

/// Runs one responder handshake on `sock`; on success the new inbound edge is registered
/// with its endpoint.
fn respond(local: &LocalRank, sock: &OwnedFd) -> std::result::Result<Answered, String> {
    sys::set_socket_timeouts(sock, HANDSHAKE_STEP_TIMEOUT).map_err(|e| e.to_string())?;
    let pid = sys::peer_pid(sock).map_err(|e| format!("reading the peer's credentials: {e}"))?;
    let mut hs = Responder::new(local.job_key(), local.job_id, random());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let flush = |hs: &mut Responder, out: &mut [u8]| -> std::result::Result<(), String> {
        while let Some(n) = hs.poll_transmit(out).map_err(|e| e.to_string())? {
            sys::send_datagram(sock, &out[..n]).map_err(|e| format!("sending: {e}"))?;
        }
        Ok(())
    };
    let n = recv_message(sock, &mut buf)?;
    let request = match hs.handle_hello(&buf[..n]) {
        Ok(r) => r,
        Err(e) => {
            let _ = flush(&mut hs, &mut out);
            return Err(format!("hello from pid {pid}: {e}"));
        }
    };
    let endpoint = local.registry.inbox(request.dst_port);
    let valid_src = request.src_rank < local.size;
    let Some(endpoint) = endpoint.filter(|_| valid_src) else {
        hs.reject(RejectReason::NoSuchEndpoint)
            .map_err(|e| e.to_string())?;
        let _ = flush(&mut hs, &mut out);
        let why = not_open_reason(request.src_rank, request.dst_port);
        return if valid_src {
            Ok(Answered::NotOpen(why))
        } else {
            Err(format!(
                "{why} (and rank {} is not in this job)",
                request.src_rank
            ))
        };
    };
    hs.accept(&[]).map_err(|e| e.to_string())?;
    flush(&mut hs, &mut out)?;
    let n = recv_message(sock, &mut buf)?;
    let probe = match hs.handle_proof(&buf[..n]) {
        Ok(params) => parse_probe(params),
        Err(e) => {
            let _ = flush(&mut hs, &mut out);
            return Err(format!("rank {} (pid {pid}): {e}", request.src_rank));
        }
    };
    flush(&mut hs, &mut out)?;
    let peer = Addr::new(request.src_rank, request.src_port);
    set_up_edge(local, sock, &endpoint, (peer, request.dst_port), pid, probe)?;
    Ok(Answered::Accepted)
}

/// After the handshake: checks that cross-memory attach reaches the peer (its `probe`
/// word), creates the ring of the edge from `peer` to port `dst_port`, hands it to the
/// endpoint's inbox, and sends it with the endpoint's doorbell in the setup message.
fn set_up_edge(
    local: &LocalRank,
    sock: &OwnedFd,
    endpoint: &Inbox,
    (peer, dst_port): (Addr, u16),
    pid: libc::pid_t,
    probe: Option<(u64, u64)>,
) -> std::result::Result<(), String> {
    // Can we pull large messages out of the sender's memory?
    let cma_ok = probe.is_some_and(|(addr, value)| {
        let mut word = [0u8; 8];
        matches!(sys::process_vm_read(pid, &mut word, addr), Ok(8))
            && u64::from_ne_bytes(word) == value
    });
    if !cma_ok {
        let body = SetupRepr {
            status: SetupStatus::CrossMemoryDenied,
            ring_bytes: 0,
        }
        .emit();
        let _ = sys::send_datagram(sock, &body);
        return Err(format!(
            "cannot read the memory of rank {} (pid {pid}) with process_vm_readv",
            peer.rank
        ));
    }
    let ring_bytes = local.config.shm_ring_bytes;
    let created = Consumer::create(ring_bytes, u64::from_ne_bytes(random()))
        .and_then(|(ring, fd)| Ok((ring, fd, sys::pidfd_open(pid)?)));
    let (ring, ring_fd, pidfd) = match created {
        Ok(x) => x,
        Err(e) => {
            let body = SetupRepr {
                status: SetupStatus::NoResources,
                ring_bytes: 0,
            }
            .emit();
            let _ = sys::send_datagram(sock, &body);
            let error = Error::shared_memory(
                format!("the ring from {peer} to port {dst_port}"),
                ring_bytes,
                e,
            );
            return Err(error.to_string());
        }
    };
    // Register before the sender can write: it only starts once it has the setup message.
    endpoint.deliver_shm(NewInbound {
        peer,
        pid,
        pidfd,
        ring,
    });
    let body = SetupRepr {
        status: SetupStatus::Ready,
        ring_bytes,
    }
    .emit();
    // Counted before the setup message leaves: once the peer has it, it may send everything
    // and this rank may finish (and read its stats) before this thread runs again.
    let count = |delta: i64| local.registry.count_shm_accepted(delta);
    count(1);
    sys::send_with_fds(
        sock,
        &body,
        &[
            ring_fd.as_raw_fd(),
            endpoint.bell_memfd.as_raw_fd(),
            endpoint.bell_eventfd.as_raw_fd(),
        ],
    )
    .map_err(|e| {
        count(-1);
        format!("sending the ring to rank {}: {e}", peer.rank)
    })?;
    Ok(())
}

fn recv_message(sock: &OwnedFd, buf: &mut [u8]) -> std::result::Result<usize, String> {
    sys::recv_with_fds(sock, buf)
        .map(|(n, _fds)| n)
        .map_err(|e| format!("receiving a handshake message: {e}"))
}

fn parse_probe(params: &[u8]) -> Option<(u64, u64)> {
    let p: &[u8; 16] = params.try_into().ok()?;
    let mut a = [0u8; 8];
    let mut v = [0u8; 8];
    a.copy_from_slice(&p[..8]);
    v.copy_from_slice(&p[8..]);
    Some((u64::from_be_bytes(a), u64::from_be_bytes(v)))
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::config::Config;
    use crate::job::JobInfo;

    /// Unexpected accept errors (here EPERM, then out of descriptors) no longer end the
    /// listener: each is counted, and the connection after them is still served.
    #[test]
    fn the_listener_keeps_listening_after_failed_accepts() {
        let local = LocalRank::new(JobInfo::by_hand(), Config::default(), None);
        let mut outcomes: Vec<io::Result<OwnedFd>> = vec![
            Err(io::Error::from_raw_os_error(libc::EPERM)),
            Err(io::Error::from_raw_os_error(libc::EINTR)),
            Err(io::Error::from_raw_os_error(libc::EMFILE)),
            Err(io::Error::from_raw_os_error(libc::EPROTO)),
            Ok(std::fs::File::open("/dev/null").unwrap().into()),
        ];
        outcomes.reverse();
        let mut served = 0;
        let started = std::time::Instant::now();
        accept_loop(
            &local,
            || {
                outcomes.pop().unwrap_or_else(|| {
                    local.stopping.store(true, Ordering::Release);
                    Err(io::Error::from_raw_os_error(libc::EINVAL))
                })
            },
            |_| served += 1,
        );
        assert_eq!(served, 1, "the connection after the errors is served");
        // EINTR is retried at once; the three others are counted, with pauses of 10, 20
        // and 40 ms.
        assert_eq!(local.registry.counts_now().accept_errors, 3);
        assert!(started.elapsed() >= Duration::from_millis(70));
    }
}
