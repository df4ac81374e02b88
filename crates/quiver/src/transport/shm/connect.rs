//! The connecting side of shared-memory connections: `Endpoint::connect` to a peer on this
//! node runs the job-key handshake over the peer's listener socket (see
//! [`super::listener`]), proves it can be read with cross-memory attach, and receives the
//! ring of the new directed edge and the peer endpoint's doorbell.

use std::os::fd::OwnedFd;
use std::time::Instant;

use quiver_proto::handshake::{ConnectRequest, HandshakeError, Initiator};
use quiver_transport::notify::RemoteDoorbell;
use quiver_transport::ring::Producer;
use quiver_transport::sys;
use quiver_wire::handshake::MAX_MESSAGE_LEN;
use quiver_wire::shm_setup::{SetupRepr, SetupStatus};

use super::listener::{socket_name, HANDSHAKE_STEP_TIMEOUT};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::random::random;
use crate::transport::local::LocalRank;
use crate::transport::retry::{retry_until, Attempt};

/// A freshly established outbound edge.
pub(crate) struct NewOutbound {
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) ring: Producer,
    pub(crate) bell: RemoteDoorbell,
    /// Whether the receiver can read this process's memory (else every message goes
    /// through the ring).
    pub(crate) cross_memory: bool,
}

/// Connects endpoint `src` of this process to `dst`, retrying while the peer is not (yet)
/// listening or its endpoint is not yet open, up to the connect timeout.
pub(crate) fn connect(local: &LocalRank, src: Addr, dst: Addr) -> Result<NewOutbound> {
    let timeout = local.config.connect_timeout;
    let suffix = format!("gave up after {} ms", timeout.as_millis());
    retry_until(local, dst, Instant::now() + timeout, &suffix, || {
        try_connect(local, src, dst)
    })
}

fn try_connect(
    local: &LocalRank,
    src: Addr,
    dst: Addr,
) -> std::result::Result<NewOutbound, Attempt> {
    // The probe word lives on this stack frame until the setup message has arrived, which
    // is after the responder read it.
    let probe_value = u64::from_ne_bytes(random());
    let probe_word = std::hint::black_box(probe_value);
    let mut params = [0u8; 16];
    params[..8].copy_from_slice(&(&probe_word as *const u64 as u64).to_be_bytes());
    params[8..].copy_from_slice(&probe_value.to_be_bytes());
    let sock = handshake(local, src, dst, &params)?;
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let io_fail =
        |what: &str, e: std::io::Error| Attempt::Fail(Error::io(format!("{what} {dst}"), e));
    let (n, fds) =
        sys::recv_with_fds(&sock, &mut buf).map_err(|e| io_fail("receiving the ring from", e))?;
    std::hint::black_box(&probe_word);
    let setup = SetupRepr::parse(&buf[..n])
        .map_err(|e| refused_by(dst, format!("bad setup message: {e}")))?;
    check_status(&setup, local, src, dst)?;
    attach(&sock, fds, &setup, local, (src, dst))
}

/// Opens the local socket of `dst`'s rank and runs the job-key handshake as endpoint
/// `src` asking for port `dst.port`, with `params` in the Proof; the socket, ready for
/// what the responder sends after its verdict.
pub(crate) fn handshake(
    local: &LocalRank,
    src: Addr,
    dst: Addr,
    params: &[u8],
) -> std::result::Result<OwnedFd, Attempt> {
    let io_fail =
        |what: &str, e: std::io::Error| Attempt::Fail(Error::io(format!("{what} {dst}"), e));
    let sock = match sys::seqpacket_connect(&socket_name(local.job_id, dst.rank)) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ECONNREFUSED) | Some(libc::ENOENT) | Some(libc::EAGAIN)
            ) =>
        {
            return Err(Attempt::Retry(format!(
                "rank {} is not listening",
                dst.rank
            )))
        }
        Err(e) => return Err(io_fail("connecting to", e)),
    };
    check_same_user(&sock, dst)?;
    sys::set_socket_timeouts(&sock, HANDSHAKE_STEP_TIMEOUT)
        .map_err(|e| io_fail("configuring the socket to", e))?;
    let request = ConnectRequest {
        job_id: local.job_id,
        src_rank: src.rank,
        src_port: src.port,
        dst_port: dst.port,
    };
    let mut hs = Initiator::new(local.job_key(), request, random());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let refused = |reason: String| refused_by(dst, reason);
    let transmit = |hs: &mut Initiator, out: &mut [u8]| -> std::result::Result<(), Attempt> {
        while let Some(n) = hs.poll_transmit(out).map_err(|e| refused(e.to_string()))? {
            sys::send_datagram(&sock, &out[..n]).map_err(|e| {
                if cut_off(&e) {
                    retry_cut_off(dst, &e)
                } else {
                    io_fail("handshaking with", e)
                }
            })?;
        }
        Ok(())
    };
    transmit(&mut hs, &mut out)?;
    let n = recv_answer(&sock, &mut buf, dst)?;
    let failed = |e| Attempt::Fail(Error::handshake(dst, "shm", e));
    match hs.handle_challenge(&buf[..n], params) {
        Ok(_) => {}
        Err(HandshakeError::NoSuchEndpoint { .. }) => {
            return Err(Attempt::Retry(format!("endpoint {dst} is not open")));
        }
        Err(e) => return Err(failed(e)),
    }
    transmit(&mut hs, &mut out)?;
    let n = recv_answer(&sock, &mut buf, dst)?;
    hs.handle_verdict(&buf[..n]).map_err(failed)?;
    Ok(sock)
}

/// The listener refuses a process of another user before any handshake (its
/// SO_PEERCRED check); the kernel tells this side the listener's user too, so a rank of
/// another user is a clear, final error here instead of a connection closed without a
/// word.
fn check_same_user(sock: &OwnedFd, dst: Addr) -> std::result::Result<(), Attempt> {
    let (pid, uid) = sys::peer_credentials(sock)
        .map_err(|e| Attempt::Fail(Error::io(format!("reading the credentials of {dst}"), e)))?;
    let own = sys::getuid();
    if uid == own {
        return Ok(());
    }
    Err(Attempt::Fail(Error::PermissionDenied {
        what: format!(
            "for shared memory and cross-memory attach: rank {} (pid {pid}) runs as uid {uid}, \
             this rank as uid {own}",
            dst.rank
        ),
        detail: "a rank's shared-memory listener takes only processes of its own user".into(),
        fix: OTHER_USER_FIX,
    }))
}

/// What to do when two ranks on one node run as different users.
const OTHER_USER_FIX: &str = "run every rank as the same user (CAP_SYS_PTRACE does not \
    help: the listener refuses other users before any handshake), or \
    QUIVER_TRANSPORTS=tcp or udp to avoid shared memory altogether";

/// Receives the listener's next handshake message into `buf`; its length. A handshake cut
/// off (the listener closed it, as it does with a random pending one when strangers crowd
/// it, or with one past its deadline) is tried again.
fn recv_answer(sock: &OwnedFd, buf: &mut [u8], dst: Addr) -> std::result::Result<usize, Attempt> {
    match sys::recv_with_fds(sock, buf) {
        Ok((0, _)) => Err(retry_cut_off(
            dst,
            &std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        )),
        Ok((n, _)) => Ok(n),
        Err(e) if cut_off(&e) => Err(retry_cut_off(dst, &e)),
        Err(e) => Err(Attempt::Fail(Error::io(
            format!("handshaking with {dst}"),
            e,
        ))),
    }
}

/// Whether a handshake error means the listener closed or stopped answering the socket.
fn cut_off(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::EAGAIN | libc::ETIMEDOUT)
    ) || e.kind() == std::io::ErrorKind::UnexpectedEof
}

fn retry_cut_off(dst: Addr, e: &std::io::Error) -> Attempt {
    Attempt::Retry(format!(
        "the handshake with rank {} was cut off ({e}); its listener drops handshakes when \
         strangers crowd it",
        dst.rank
    ))
}

/// The responder's verdict in the setup message: ready, or why it could not set up the
/// edge.
fn check_status(
    setup: &SetupRepr,
    local: &LocalRank,
    src: Addr,
    dst: Addr,
) -> std::result::Result<(), Attempt> {
    match setup.status {
        SetupStatus::Ready | SetupStatus::ReadyWithoutCrossMemory => Ok(()),
        SetupStatus::CrossMemoryDenied => Err(Attempt::Fail(Error::PermissionDenied {
            what: format!(
                "for cross-memory attach: rank {} cannot read this process's memory",
                dst.rank
            ),
            detail: "process_vm_readv failed its ptrace access check (EPERM)".into(),
            fix: CMA_FIX,
        })),
        SetupStatus::NoResources => Err(Attempt::Fail(Error::OutOfSharedMemory {
            what: format!(
                "the ring from {src} to {dst}, which rank {} creates",
                dst.rank
            ),
            bytes: local.config.shm_ring_bytes,
            detail: format!(
                "rank {} could not allocate it; its listener counted the refusal",
                dst.rank
            ),
        })),
    }
}

/// Maps the ring and the peer endpoint's doorbell the setup message brought (`fds`), and
/// watches the peer's process.
fn attach(
    sock: &OwnedFd,
    fds: Vec<OwnedFd>,
    setup: &SetupRepr,
    local: &LocalRank,
    (src, dst): (Addr, Addr),
) -> std::result::Result<NewOutbound, Attempt> {
    let io_fail =
        |what: &str, e: std::io::Error| Attempt::Fail(Error::io(format!("{what} {dst}"), e));
    let refused = |reason: String| refused_by(dst, reason);
    let [ring_fd, bell_memfd, bell_eventfd]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| refused("setup message without the three descriptors".into()))?;
    let ring = Producer::attach(&ring_fd).map_err(|e| match e {
        quiver_transport::ring::AttachError::Io(io) => Attempt::Fail(Error::shared_memory(
            format!("the mapping of the ring from {src} to {dst}"),
            local.config.shm_ring_bytes,
            io,
        )),
        other => refused(format!("the ring sent is unusable: {other}")),
    })?;
    if ring.capacity() != setup.ring_bytes {
        return Err(refused("ring size disagrees with the setup message".into()));
    }
    let bell = RemoteDoorbell::attach(&bell_memfd, bell_eventfd).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            refused(format!("the doorbell sent is unusable: {e}"))
        } else {
            io_fail("mapping the doorbell of", e)
        }
    })?;
    let pid = sys::peer_pid(sock).map_err(|e| io_fail("reading the credentials of", e))?;
    let pidfd = sys::pidfd_open(pid).map_err(|e| io_fail("watching the process of", e))?;
    Ok(NewOutbound {
        pid,
        pidfd,
        ring,
        bell,
        cross_memory: setup.status == SetupStatus::Ready,
    })
}

/// The peer answered, but not as the protocol says.
fn refused_by(dst: Addr, reason: String) -> Attempt {
    Attempt::Fail(Error::Corrupt {
        peer: dst,
        detail: format!("shared-memory connection setup: {reason}"),
    })
}

/// What to do when cross-memory attach between two ranks is denied.
const CMA_FIX: &str = "run every rank as the same user (and keep them dumpable), or give the \
    ranks CAP_SYS_PTRACE; under Yama, kernel.yama.ptrace_scope must be 0 or 1 (quiver \
    declares its peers as ptracers), and a container's seccomp profile must allow \
    process_vm_readv; QUIVER_TRANSPORTS=tcp or udp avoids shared memory altogether";

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::os::unix::net::UnixStream;

    use quiver_transport::notify::Doorbell;
    use quiver_transport::ring::Consumer;

    use super::*;
    use crate::config::Config;
    use crate::job::JobInfo;

    const RING_BYTES: u64 = 4096;

    /// A copy of `fd`'s bytes in a memory file without seals: a forged ring or doorbell.
    fn unsealed_copy(fd: &OwnedFd) -> OwnedFd {
        let original = std::fs::File::from(fd.try_clone().unwrap());
        let mut bytes = vec![0u8; original.metadata().unwrap().len() as usize];
        original.read_exact_at(&mut bytes, 0).unwrap();
        let forged = sys::memfd_unsealed("quiver-forged", bytes.len()).unwrap();
        std::fs::File::from(forged.try_clone().unwrap())
            .write_all_at(&bytes, 0)
            .unwrap();
        forged
    }

    /// What [`attach`] makes of the descriptors a setup message brought: a ring and a
    /// doorbell, each sealed as quiver makes them or an unsealed copy.
    fn attach_forged(seal_ring: bool, seal_bell: bool) -> std::result::Result<(), Error> {
        let local = LocalRank::new(JobInfo::by_hand(), Config::default(), None);
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let (_consumer, ring) = Consumer::create(RING_BYTES, 11).unwrap();
        let bell = Doorbell::new().unwrap();
        let (page, eventfd) = bell.clone_remote_fds().unwrap();
        let ring = if seal_ring {
            ring
        } else {
            unsealed_copy(&ring)
        };
        let page = if seal_bell {
            page
        } else {
            unsealed_copy(&page)
        };
        let setup = SetupRepr {
            status: SetupStatus::Ready,
            ring_bytes: RING_BYTES,
        };
        let peer = Addr::new(0, 1);
        match attach(
            &OwnedFd::from(ours),
            vec![ring, page, eventfd],
            &setup,
            &local,
            (Addr::new(0, 0), peer),
        ) {
            Ok(_) => Ok(()),
            Err(Attempt::Fail(error)) => Err(error),
            Err(_) => panic!("attach neither succeeds nor fails"),
        }
    }

    /// A listener that closes the socket before answering (it dropped the handshake, as
    /// it does when strangers crowd it) makes the attempt one to try again, not a failure;
    /// so does one that stops answering.
    #[test]
    fn a_handshake_cut_off_is_tried_again() {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let dst = Addr::new(1, 1);
        let (ours, theirs) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let ours = OwnedFd::from(ours);
        sys::set_socket_timeouts(&ours, std::time::Duration::from_millis(20)).unwrap();
        assert!(matches!(
            recv_answer(&ours, &mut buf, dst),
            Err(Attempt::Retry(why)) if why.contains("cut off")
        ));
        drop(theirs);
        assert!(matches!(
            recv_answer(&ours, &mut buf, dst),
            Err(Attempt::Retry(why)) if why.contains("cut off")
        ));
    }

    /// A setup message whose ring or doorbell is not sealed against resizing is refused
    /// before anything is mapped: a `Corrupt` naming the file, on this connection only.
    #[test]
    fn a_setup_message_with_an_unsealed_memory_file_is_refused() {
        attach_forged(true, true).expect("sealed files are taken");
        for (seal_ring, seal_bell, named) in [(false, true, "ring"), (true, false, "doorbell")] {
            match attach_forged(seal_ring, seal_bell) {
                Err(Error::Corrupt { peer, detail }) => {
                    assert_eq!(peer, Addr::new(0, 1));
                    assert!(
                        detail.contains(named) && detail.contains("not sealed"),
                        "{detail}"
                    );
                }
                other => panic!("an unsealed {named}: expected Corrupt, got {other:?}"),
            }
        }
    }
}
