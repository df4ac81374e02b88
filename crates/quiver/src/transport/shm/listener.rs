//! The accepting side of shared-memory connections: the listener thread of a rank.
//!
//! Every rank listens on an abstract unix socket named after its job and rank
//! ([`socket_name`]). A connecting endpoint opens a SOCK_SEQPACKET connection there and
//! runs the job-key handshake of [`quiver_proto::handshake`]; its Proof carries the address
//! of a probe word so this side can check that cross-memory attach works between the two
//! processes. This side then creates the ring for the directed edge and sends it, with its
//! endpoint's doorbell, in a setup message ([`quiver_wire::shm_setup`]). The kernel vouches
//! for the peer's user and pid (SO_PEERCRED): a process of another user is refused before
//! any handshake work, and the pid becomes a pidfd for death detection. Every handshake in
//! progress is answered at once, with a deadline and a bound
//! ([`crate::transport::handshakes`]).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use quiver_proto::handshake::{ConnectRequest, RejectReason, Responder};
use quiver_transport::ring::Consumer;
use quiver_transport::sys;
use quiver_wire::handshake::MAX_MESSAGE_LEN;
use quiver_wire::shm_setup::{SetupRepr, SetupStatus};

use super::rma_grant::answer_key;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::handshakes::{serve, Accepted, Handshake, Outcome, Step};
use crate::transport::local::LocalRank;
use crate::transport::registry::{not_open_reason, Inbox, NewInbound};
use crate::transport::rma_ops::RMA_PORT;

/// Time a single handshake step may take on the connecting side before it gives up (the
/// listener allows [`HANDSHAKE_DEADLINE`] for the whole handshake).
///
/// [`HANDSHAKE_DEADLINE`]: crate::transport::handshakes::HANDSHAKE_DEADLINE
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

/// The listener thread: accepts, refuses other users at once, and answers every handshake
/// in progress at once ([`handshakes::serve`](crate::transport::handshakes::serve)).
pub(crate) fn listen(local: &LocalRank, listener: &OwnedFd) {
    if let Err(e) = sys::set_nonblocking(listener, true) {
        local.registry.accept_failed("shm", &e, Duration::ZERO);
        return;
    }
    let own_uid = sys::getuid();
    serve(local, "shm", listener.as_raw_fd(), || {
        let sock = sys::accept(listener)?;
        Ok(admit(local, sock, own_uid))
    })
}

/// Looks at who connected before any handshake work: the kernel's record of the peer
/// (SO_PEERCRED) must name a process of this user, the only one whose memory this rank
/// can read and who can read its own; anyone else is refused and counted.
fn admit(local: &LocalRank, sock: OwnedFd, own_uid: libc::uid_t) -> Accepted<PendingShm> {
    let refuse = |why: String| {
        local.registry.refused(format!("shm: {why}"));
        Accepted::Refused
    };
    let (pid, uid) = match sys::peer_credentials(&sock) {
        Ok(cred) => cred,
        Err(e) => return refuse(format!("reading the peer's credentials: {e}")),
    };
    if uid != own_uid {
        return refuse(format!(
            "a process of another user (pid {pid}, uid {uid}; this rank runs as uid {own_uid})"
        ));
    }
    if let Err(e) = sys::set_nonblocking(&sock, true) {
        return refuse(format!("configuring the socket of pid {pid}: {e}"));
    }
    Accepted::New(PendingShm {
        sock,
        pid,
        handshake: Responder::new(local.job_key(), local.job_id, random()),
        request: None,
        awaiting_key: false,
    })
}

/// One shared-memory handshake in progress on the listener (its socket non-blocking).
struct PendingShm {
    sock: OwnedFd,
    /// The peer's process, as the kernel recorded it when it connected.
    pid: libc::pid_t,
    handshake: Responder,
    /// The hello's request, once it arrived (the proof is next).
    request: Option<ConnectRequest>,
    /// A handshake for [`RMA_PORT`] is done: the next message is a remote key.
    awaiting_key: bool,
}

impl PendingShm {
    /// Sends what the responder has to say.
    fn flush(&mut self) -> std::result::Result<(), String> {
        let mut out = [0u8; MAX_MESSAGE_LEN];
        while let Some(n) = self
            .handshake
            .poll_transmit(&mut out)
            .map_err(|e| e.to_string())?
        {
            sys::send_datagram(&self.sock, &out[..n]).map_err(|e| format!("sending: {e}"))?;
        }
        Ok(())
    }

    /// The hello arrived: refuse it, or answer with the challenge.
    fn on_hello(&mut self, local: &LocalRank, hello: &[u8]) -> Step {
        let pid = self.pid;
        let request = match self.handshake.handle_hello(hello) {
            Ok(r) => r,
            Err(e) => {
                let _ = self.flush();
                return Step::Finished(Err(format!("hello: {e}")));
            }
        };
        let valid_src = request.src_rank < local.size;
        let key_request = request.dst_port == RMA_PORT && valid_src;
        if !key_request && (local.registry.inbox(request.dst_port).is_none() || !valid_src) {
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
        }
        let answered = self
            .handshake
            .accept(&[])
            .map_err(|e| e.to_string())
            .and_then(|()| self.flush());
        if let Err(why) = answered {
            return Step::Finished(Err(format!("rank {} (pid {pid}): {why}", request.src_rank)));
        }
        self.request = Some(request);
        Step::Waiting
    }

    /// The proof arrived: refuse it, or send the verdict and set up the edge.
    fn on_proof(&mut self, local: &LocalRank, request: ConnectRequest, proof: &[u8]) -> Step {
        let pid = self.pid;
        let probe = match self.handshake.handle_proof(proof) {
            Ok(params) => parse_probe(params),
            Err(e) => {
                let _ = self.flush();
                return Step::Finished(Err(format!("rank {} (pid {pid}): {e}", request.src_rank)));
            }
        };
        if let Err(why) = self.flush() {
            return Step::Finished(Err(why));
        }
        if request.dst_port == RMA_PORT {
            // Proven: the next message is the key (`answer_key`).
            self.awaiting_key = true;
            return Step::Waiting;
        }
        // The endpoint may have closed since the hello.
        let Some(endpoint) = local.registry.inbox(request.dst_port) else {
            return Step::Finished(Ok(Outcome::NotOpen(not_open_reason(
                request.src_rank,
                request.dst_port,
            ))));
        };
        let peer = Addr::new(request.src_rank, request.src_port);
        let edge = (peer, request.dst_port);
        Step::Finished(
            set_up_edge(local, &self.sock, &endpoint, edge, pid, probe).map(|()| Outcome::Accepted),
        )
    }
}

impl Handshake for PendingShm {
    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn on_readable(&mut self, local: &LocalRank) -> Step {
        let mut message = [0u8; MAX_MESSAGE_LEN];
        loop {
            let (n, fds) = match sys::recv_with_fds(&self.sock, &mut message) {
                Ok((0, _)) => {
                    return Step::Finished(Err(
                        "the peer closed the connection during the handshake".into(),
                    ))
                }
                Ok((n, fds)) => (n, fds),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Waiting,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Step::Finished(Err(format!("receiving a handshake message: {e}")))
                }
            };
            let step = match self.request {
                None => self.on_hello(local, &message[..n]),
                Some(request) if self.awaiting_key => Step::Finished(
                    answer_key(
                        local,
                        &self.sock,
                        (request.src_rank, self.pid),
                        &message[..n],
                        fds,
                    )
                    .map(|()| Outcome::KeyRequest),
                ),
                Some(request) => self.on_proof(local, request, &message[..n]),
            };
            if !matches!(step, Step::Waiting) {
                return step;
            }
        }
    }

    fn peer(&self) -> String {
        format!("pid {}", self.pid)
    }
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
    // Can we pull large messages out of the sender's memory? If not (a seccomp profile,
    // ptrace scope, another user), the edge carries messages of every size through the
    // ring: copied twice, pipelined, slower for large ones but working.
    let cma_ok = probe.is_some_and(|(addr, value)| {
        let mut word = [0u8; 8];
        matches!(sys::process_vm_read(pid, &mut word, addr), Ok(8))
            && u64::from_ne_bytes(word) == value
    });
    if !cma_ok {
        tracing::info!(rank = local.registry.rank, peer = %peer, pid, "cross-memory attach to the peer is refused: its messages to this rank go through the ring at every size (quiver info says why)");
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
        cross_memory: cma_ok,
    });
    let body = SetupRepr {
        status: if cma_ok {
            SetupStatus::Ready
        } else {
            SetupStatus::ReadyWithoutCrossMemory
        },
        ring_bytes,
    }
    .emit();
    // Counted before the setup message leaves: once the peer has it, it may send everything
    // and this rank may finish (and read its stats) before this thread runs again.
    let count = |delta: i64| local.registry.count_shm_accepted(delta, !cma_ok);
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

fn parse_probe(params: &[u8]) -> Option<(u64, u64)> {
    let p: &[u8; 16] = params.try_into().ok()?;
    let mut a = [0u8; 8];
    let mut v = [0u8; 8];
    a.copy_from_slice(&p[..8]);
    v.copy_from_slice(&p[8..]);
    Some((u64::from_be_bytes(a), u64::from_be_bytes(v)))
}
