//! The error type of the public API.

use std::io;

use crate::addr::Addr;

/// Result of a quiver operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong, sorted by who caused it: a busy resource (`WouldBlock`),
/// the caller (`BufferTooSmall`, `InvalidArgument`, `Config`), a peer (`PeerDead`,
/// `PeerStopped`, `PeerClosed`, `Corrupt`, `Unreachable`), connection setup (`Refused`,
/// `WrongKey`, `VersionMismatch`, `PermissionDenied`, `OutOfSharedMemory`), the machine
/// (`TransportUnavailable`), time
/// (`Timeout`) or the operating system (`Io`).
///
/// Every message names the cause and what to do about it. Peer errors affect one
/// connection (and, for a dead or stopped peer, every connection with that peer); every
/// other connection keeps working. [`Error::peer`] tells which peer an error is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operation cannot proceed without waiting (ring full, nothing arrived yet).
    #[error("operation would block")]
    WouldBlock,
    /// The next message is larger than the buffer offered for it. The message stays queued:
    /// receive it with a larger buffer or with `recv_pooled`.
    #[error("receive buffer of {buffer} bytes is too small for the next message of {message} bytes (the message is kept; use a larger buffer or recv_pooled)")]
    BufferTooSmall {
        /// Length of the waiting message.
        message: usize,
        /// Length of the buffer offered.
        buffer: usize,
    },
    /// The peer process exited (or was killed) while this connection was in use.
    #[error("peer {peer} died (its process exited) {during}; its connections with this endpoint are closed, the others keep working (the launcher's output says how rank {} ended)", .peer.rank)]
    PeerDead {
        /// The peer's address.
        peer: Addr,
        /// What was happening, e.g. "while receiving".
        during: &'static str,
    },
    /// The peer process has been stopped (SIGSTOP, SIGTSTP: process state `T`) for longer
    /// than the detection time (`QUIVER_DETECT_MS`) while a call waited on it. The
    /// connection is closed, as for a dead peer.
    #[error("peer {peer} ({transport}) has been stopped by a signal (process state T) for {stopped_ms} ms {during}; its connections with this endpoint are closed, the others keep working (send it SIGCONT sooner, or raise QUIVER_DETECT_MS; 0 turns detection off)")]
    PeerStopped {
        /// The peer's address.
        peer: Addr,
        /// The transport of the connection ("shm", "tcp").
        transport: &'static str,
        /// What was happening, e.g. "while receiving".
        during: &'static str,
        /// How long it was seen stopped.
        stopped_ms: u64,
    },
    /// A blocking `send` could never finish: the peer is itself blocked sending to this
    /// endpoint a message beyond the read-ahead bound (`QUIVER_READ_AHEAD_BYTES` per
    /// connection; udp: its receive window), so neither can take the other's (what MPI
    /// calls a send-send deadlock). Reported within the detection time
    /// (`QUIVER_DETECT_MS`) once both sides wait, on every transport; the connection is
    /// failed on this side (the message may be half written). docs/failures.md.
    #[error("send to {peer} ({transport}) cannot finish: {peer} is itself blocked sending to this endpoint a message beyond the read-ahead bound (QUIVER_READ_AHEAD_BYTES; udp: its window), so neither can take the other's (a send-send deadlock); post the receive first (`post_recv`, then `send`), or send with `post_send` and receive before `wait_send`; the connection was closed")]
    SendDeadlock {
        /// The peer's address.
        peer: Addr,
        /// The transport of the connection ("shm", "tcp", "udp", "mem", "xdp").
        transport: &'static str,
    },
    /// The peer closed its end of the connection (`Endpoint::close` of that connection, or
    /// its endpoint dropped): reported after every message it sent before the close, to a
    /// receive or probe that only that peer could satisfy, and to sends on the connection.
    #[error("peer {peer} closed the connection")]
    PeerClosed {
        /// The peer's address.
        peer: Addr,
    },
    /// This endpoint closed the connection ([`Endpoint::close`](crate::Endpoint::close)):
    /// every later call on its handle fails so; `connect` opens a new connection.
    #[error("the connection to {peer} was closed by this endpoint (Endpoint::close); connect again to reach {peer}")]
    ConnectionClosed {
        /// The peer of the closed connection.
        peer: Addr,
    },
    /// The peer broke the shared-memory protocol (a crash mid-write or a scribbler): the
    /// connection is closed; no data from it after this point is trusted.
    #[error("connection with {peer} is corrupted: {detail}; the connection was closed")]
    Corrupt {
        /// The peer's address.
        peer: Addr,
        /// What was found.
        detail: String,
    },
    /// The peer announced a message larger than this endpoint accepts
    /// (`QUIVER_MAX_MESSAGE_BYTES`, [`Endpoint::set_max_message_bytes`](crate::Endpoint::set_max_message_bytes)):
    /// refused before anything was allocated for it, and the connection was closed (what
    /// followed on it cannot be framed without reading the message). Not [`Error::Corrupt`]:
    /// the announcement may be honest, from a peer whose limit is higher; the fix is a
    /// setting, not a bug hunt.
    #[error("peer {peer} over {transport} announced a message of {announced} bytes, more than this endpoint accepts ({max} bytes); the connection was closed (raise QUIVER_MAX_MESSAGE_BYTES on the receiving rank, or Endpoint::set_max_message_bytes, if such messages are meant)")]
    MessageTooLarge {
        /// The peer's address.
        peer: Addr,
        /// The transport of the connection ("shm", "tcp", "udp", ...).
        transport: &'static str,
        /// The length the peer announced.
        announced: u64,
        /// The endpoint's limit.
        max: u64,
    },
    /// The peer cannot be reached over the network: at connect time no route or no answer,
    /// or later a TCP reset or end of stream without a close, or no answer (not even to
    /// keepalives) for the detection time over udp. The peer may have died, frozen, or the
    /// network between may be down.
    #[error("peer {peer} unreachable over {transport}: {detail} (check that rank {} is alive, that its address in QUIVER_ADDRS is right and reachable from here, and the firewall; QUIVER_DETECT_MS sets how long silence is tolerated)", .peer.rank)]
    Unreachable {
        /// The peer's address.
        peer: Addr,
        /// The transport of the connection ("tcp", "udp", ...).
        transport: &'static str,
        /// What was seen, and when.
        detail: String,
    },
    /// Nobody accepted the connection before the connect timeout: the peer rank is not
    /// listening (not started yet, exited, in another job) or has not opened the endpoint.
    #[error("connection to {peer} refused: {reason} (is rank {} running in this job, with endpoint port {} open? QUIVER_CONNECT_TIMEOUT_MS waits longer for slow starters)", .peer.rank, .peer.port)]
    Refused {
        /// The peer's address.
        peer: Addr,
        /// What was seen, e.g. "rank 3 is not listening (gave up after 30000 ms)".
        reason: String,
    },
    /// The peer does not hold this job's key (or belongs to another job): the handshake
    /// failed its authentication.
    #[error("wrong job key: {peer} over {transport} could not prove membership of this job, or we could not ({detail}); start every rank from one `quiver run`, or give all of them the same QUIVER_JOB_ID and QUIVER_JOB_KEY")]
    WrongKey {
        /// The peer's address.
        peer: Addr,
        /// The transport of the handshake.
        transport: &'static str,
        /// What failed.
        detail: String,
    },
    /// The peer speaks another protocol version.
    #[error("version mismatch: {peer} over {transport} speaks protocol version {theirs}, this process speaks {ours}; run the same quiver version on every rank")]
    VersionMismatch {
        /// The peer's address.
        peer: Addr,
        /// The transport of the handshake.
        transport: &'static str,
        /// Our version.
        ours: u8,
        /// Theirs.
        theirs: u8,
    },
    /// The operating system refused an operation for lack of permission: cross-memory attach
    /// between ranks (ptrace rules), or a socket (a privileged port, a firewall).
    #[error("permission denied {what}: {detail}; {fix}")]
    PermissionDenied {
        /// What quiver was doing.
        what: String,
        /// What the system said.
        detail: String,
        /// What the user can do.
        fix: &'static str,
    },
    /// A transport named in `QUIVER_TRANSPORTS` cannot run on this machine or interface
    /// (xdp: no AF_XDP in the kernel, no such interface, another XDP program on it). The
    /// context is not created; the other transports do not depend on it.
    #[error("transport {transport} unavailable {what}: {detail}; {fix} (the other transports keep working: leave {transport} out of QUIVER_TRANSPORTS)")]
    TransportUnavailable {
        /// The transport.
        transport: &'static str,
        /// What quiver was doing.
        what: String,
        /// What the system said.
        detail: String,
        /// What the user can do.
        fix: &'static str,
    },
    /// Shared memory for a ring or a doorbell could not be created: the memory (or the
    /// memory limit of the job's cgroup or container) is exhausted.
    #[error("out of shared memory: cannot create {bytes} bytes for {what} ({detail}); rings are memfds, not files in /dev/shm, so a small /dev/shm does not matter: free memory, raise the memory limit of the job's cgroup or container, or make rings smaller with QUIVER_SHM_RING_BYTES")]
    OutOfSharedMemory {
        /// What was being created.
        what: String,
        /// Its size.
        bytes: u64,
        /// What the system said.
        detail: String,
    },
    /// A blocking operation did not complete in time.
    #[error("timed out after {millis} ms {what} (the bound is QUIVER_TIMEOUT_MS or Endpoint::set_timeout)")]
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// How long was waited.
        millis: u64,
    },
    /// A one-sided operation (put, get, an atomic) on a connection whose transport has
    /// none. Every transport quiver ships has them (shm directly, tcp and the datagram
    /// transports through the target's software path).
    #[error("one-sided operations are not available over {transport} (connection to {peer})")]
    RmaUnsupported {
        /// The peer's address.
        peer: Addr,
        /// The transport of the connection.
        transport: &'static str,
    },
    /// A one-sided operation would touch bytes outside the region its key names: refused
    /// before anything was touched (and counted).
    #[error("{operation} of {len} bytes at offset {offset} is outside the region of {region_len} bytes; nothing was touched")]
    RmaOutOfBounds {
        /// The operation.
        operation: &'static str,
        /// The byte offset asked for.
        offset: u64,
        /// The bytes asked for.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// A one-sided operation that writes, with a key that only allows reading: refused
    /// before anything was touched (and counted).
    #[error("{operation} needs a read-write key, this key is {rights}; ask the region's owner for Region::key of a read-write region")]
    RmaRights {
        /// The operation.
        operation: &'static str,
        /// The key's rights ("read-only").
        rights: &'static str,
    },
    /// An atomic on a word that is not 8-byte aligned in its region (refused, counted).
    #[error("atomic on offset {offset}, which is not a multiple of 8; atomics work on aligned 64-bit words")]
    RmaMisaligned {
        /// The byte offset asked for.
        offset: u64,
    },
    /// The remote key was refused: not a key, forged, revoked before it was first used, of
    /// another job, or naming another rank than the connection's peer (counted here, and at
    /// the target when it refused it).
    #[error("remote key refused by rank {rank}: {reason}")]
    RmaKeyRefused {
        /// The rank the key was presented to (or named).
        rank: u32,
        /// Why.
        reason: String,
    },
    /// The region's owner dropped it (revoking its keys) after this rank had mapped it:
    /// nothing was touched. The owner's memory is unharmed either way.
    #[error(
        "region {region} of rank {rank} was revoked (its owner dropped it); nothing was touched"
    )]
    RmaRevoked {
        /// The owner's rank.
        rank: u32,
        /// The region's number at its owner.
        region: u64,
    },
    /// An active message named a handler id this endpoint has not registered
    /// ([`Endpoint::register_handler`](crate::Endpoint::register_handler)): the message was
    /// dropped and counted (`AmStats::unknown_handler`); the connection keeps working.
    #[error("active message from {peer} for handler {id}, which this endpoint has not registered; the message was dropped (register the handler before peers send to it)")]
    UnknownHandler {
        /// The sender.
        peer: Addr,
        /// The handler id it named.
        id: u32,
    },
    /// An active-message handler called something a handler may not: a call that blocks,
    /// receives or advances progress (handlers run inside those calls; docs/active-messages.md
    /// lists what a handler may call). Nothing was done.
    #[error("{call} called inside an active-message handler, where it is not allowed (it could block or run handlers re-entrantly); a handler may send without waiting (try_send, post_send, try_send_am, post_send_am, reply, reply_am): do the rest after the call that ran the handler returns")]
    InHandler {
        /// The call refused.
        call: &'static str,
    },
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A configuration value (usually a `QUIVER_*` environment variable) is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// The operating system refused something.
    #[error("{what}: {source}")]
    Io {
        /// What quiver was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// `Ok` when a message of `announced` bytes from `peer` over `transport` is within
    /// `max` (the endpoint's `Config::max_message_bytes`), [`Error::MessageTooLarge`]
    /// otherwise. One compare on the way in: call it where a length is first read off the
    /// wire, before anything is sized by it.
    #[inline]
    pub(crate) fn check_announced(
        peer: Addr,
        transport: &'static str,
        announced: u64,
        max: u64,
    ) -> Result<()> {
        if announced > max {
            return Err(Error::MessageTooLarge {
                peer,
                transport,
                announced,
                max,
            });
        }
        Ok(())
    }

    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// Whether this is [`Error::WouldBlock`].
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock)
    }

    /// The peer this error is about, if it is about one: the connection (or all connections
    /// with that peer) that failed.
    pub fn peer(&self) -> Option<Addr> {
        match self {
            Error::PeerDead { peer, .. }
            | Error::PeerStopped { peer, .. }
            | Error::SendDeadlock { peer, .. }
            | Error::PeerClosed { peer }
            | Error::ConnectionClosed { peer }
            | Error::Corrupt { peer, .. }
            | Error::MessageTooLarge { peer, .. }
            | Error::Unreachable { peer, .. }
            | Error::Refused { peer, .. }
            | Error::WrongKey { peer, .. }
            | Error::VersionMismatch { peer, .. }
            | Error::UnknownHandler { peer, .. } => Some(*peer),
            _ => None,
        }
    }

    /// An operating-system error while creating shared memory, sorted: ENOSPC and ENOMEM
    /// become [`Error::OutOfSharedMemory`], EPERM and EACCES [`Error::PermissionDenied`],
    /// anything else [`Error::Io`].
    pub(crate) fn shared_memory(what: impl Into<String>, bytes: u64, source: io::Error) -> Error {
        let what = what.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::ENOMEM) => Error::OutOfSharedMemory {
                what,
                bytes,
                detail: source.to_string(),
            },
            Some(libc::EPERM) | Some(libc::EACCES) => Error::PermissionDenied {
                what: format!("creating {what}"),
                detail: source.to_string(),
                fix: "check the seccomp or LSM policy of the container (memfd_create, mmap)",
            },
            _ => Error::io(format!("creating {what}"), source),
        }
    }

    /// An operating-system error of a socket operation, sorted: EACCES and EPERM become
    /// [`Error::PermissionDenied`], anything else [`Error::Io`].
    pub(crate) fn socket(what: impl Into<String>, source: io::Error) -> Error {
        let what = what.into();
        match source.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => Error::PermissionDenied {
                what,
                detail: source.to_string(),
                fix: "ports below 1024 need root or CAP_NET_BIND_SERVICE (pick others in \
                      QUIVER_ADDRS), and a firewall rule may reject the traffic",
            },
            _ => Error::io(what, source),
        }
    }

    /// A failed bind of this rank's `transport` socket at `addr` (its `QUIVER_ADDRS` entry).
    pub(crate) fn bind(transport: &str, addr: std::net::SocketAddr, source: io::Error) -> Error {
        let what = format!("binding the {transport} socket of this rank to {addr}");
        match source.raw_os_error() {
            Some(libc::EADDRINUSE) => Error::io(
                format!(
                    "{what} (another process holds the port: pick other ports in QUIVER_ADDRS)"
                ),
                source,
            ),
            Some(libc::EADDRNOTAVAIL) => Error::io(
                format!(
                    "{what} (not an address of this host: check this rank's entry in QUIVER_ADDRS)"
                ),
                source,
            ),
            _ => Error::socket(what, source),
        }
    }

    /// The error a failed handshake with `peer` over `transport` means to the caller.
    pub(crate) fn handshake(
        peer: Addr,
        transport: &'static str,
        e: quiver_proto::handshake::HandshakeError,
    ) -> Error {
        use quiver_proto::handshake::HandshakeError as H;
        match e {
            H::AuthenticationFailed { .. } => Error::WrongKey {
                peer,
                transport,
                detail: e.to_string(),
            },
            H::WrongJob { .. } => Error::WrongKey {
                peer,
                transport,
                detail: format!("the peer belongs to another job: {e}"),
            },
            H::VersionMismatch { ours, theirs } => Error::VersionMismatch {
                peer,
                transport,
                ours,
                theirs,
            },
            H::NoSuchEndpoint { port } => Error::Refused {
                peer,
                reason: format!("rank {} has no endpoint at port {port}", peer.rank),
            },
            other => Error::Corrupt {
                peer,
                detail: format!("the {transport} handshake failed: {other}"),
            },
        }
    }
}

/// A failed handshake as a sentence for a refusal count or a log line.
pub(crate) fn describe_handshake_error(e: quiver_proto::handshake::HandshakeError) -> String {
    use quiver_proto::handshake::HandshakeError;
    match e {
        HandshakeError::AuthenticationFailed { .. } => {
            format!("wrong job key: the peer could not prove membership of this job, or we could not ({e})")
        }
        HandshakeError::WrongJob { .. } => format!("the peer belongs to another job ({e})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_cause_and_fix() {
        let peer = Addr::new(3, 0);
        let e = Error::shared_memory(
            "a ring",
            1 << 20,
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(
            matches!(e, Error::OutOfSharedMemory { bytes: 1048576, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("QUIVER_SHM_RING_BYTES"), "{e}");
        let e = Error::socket(
            "binding 127.0.0.1:80",
            io::Error::from_raw_os_error(libc::EACCES),
        );
        assert!(e.to_string().contains("CAP_NET_BIND_SERVICE"), "{e}");
        let e = Error::handshake(
            peer,
            "tcp",
            quiver_proto::handshake::HandshakeError::VersionMismatch { ours: 1, theirs: 2 },
        );
        assert!(e.to_string().contains("same quiver version"), "{e}");
        assert_eq!(e.peer(), Some(peer));
        let e = Error::Refused {
            peer,
            reason: "rank 3 is not listening".into(),
        };
        assert!(e.to_string().contains("is rank 3 running"), "{e}");
    }
}
