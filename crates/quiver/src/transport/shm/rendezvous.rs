//! Rendezvous on a shared-memory edge: the ring carries only (address, length) of a large
//! message and the receiver copies it once, straight out of the sender's memory, with
//! cross-memory attach. Messages of at least [`SPLIT_MIN_BYTES`] are copied by both
//! processes at once: the receiver pulls the first half while the sender pushes the
//! second (`process_vm_writev`) into the buffer the receiver announced.

use std::os::fd::OwnedFd;

use quiver_transport::ring::Producer;
use quiver_transport::sys;

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::failure::corrupt_detail;

/// Rendezvous messages of at least this many bytes are copied by both processes at once.
pub(crate) const SPLIT_MIN_BYTES: u64 = 128 << 10;
/// The split point is page aligned.
pub(crate) const SPLIT_ALIGN: u64 = 4096;

/// Pulls `dst.len()` bytes from `addr` in the sender, process `pid` whose pidfd is
/// `pidfd` (one process_vm_readv, then one look at the pidfd).
///
/// Cross-memory attach names a process by pid, and a pid is reused once its process has
/// exited and been reaped. The pidfd, opened while the handshake's peer was connected,
/// names that very process: when it says the process has not exited after the copy, the
/// pid named it for the whole copy (a pid is not reused while its process lives), so the
/// bytes are the sender's. When it says it exited, the copy may have read a stranger that
/// got the pid: it does not count, and the peer is reported dead. No race is left on this
/// side: the look comes after the copy, and a process never comes back.
pub(crate) fn pull(
    (pid, pidfd): (libc::pid_t, &OwnedFd),
    peer: Addr,
    dst: &mut [u8],
    addr: u64,
) -> Result<()> {
    let len = dst.len();
    let read = sys::process_vm_read(pid, dst, addr);
    if sys::pidfd_exited(pidfd) {
        return Err(Error::PeerDead {
            peer,
            during: "while copying a large message (the copy was discarded)",
        });
    }
    match read {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(corrupt_detail(
            peer,
            &format!("rendezvous read {n} of {len} bytes: the sender's buffer is not mapped"),
        )),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Error::PeerDead {
            peer,
            during: "while copying a large message",
        }),
        Err(e) => Err(corrupt_detail(
            peer,
            &format!("cross-memory read of the sender's buffer failed: {e}"),
        )),
    }
}

/// Does the sender's part of split rendezvous request `seq` (data at `addr`, `len` bytes) if
/// the receiver (process `pid`, whose pidfd is `pidfd`) asked for help and nobody took it
/// yet. Returns whether the request no longer needs us (helped, or the receiver took the
/// part).
///
/// The write names the receiver by pid: the pidfd is looked at first, and no write goes to
/// a receiver that has exited (its pid may name a stranger by now). What is left is a
/// window of one system call: the receiver exits, is reaped, and its pid is handed to a
/// new process between that look and the write. Then the write lands in the stranger if
/// the receiver's buffer address is mapped and writable there; the look after the write
/// reports the part failed, and the receiver, being dead, reads nothing. Closing it needs a
/// cross-memory call that takes a pidfd, which Linux does not have.
pub(crate) fn help_split(
    ring: &Producer,
    (pid, pidfd): (libc::pid_t, &OwnedFd),
    seq: u64,
    addr: u64,
    len: u64,
) -> bool {
    let Some((dest, split)) = ring.cts(seq, len) else {
        return false;
    };
    if ring.claim_second_part(seq) {
        let part = (len - split) as usize;
        let ok = !sys::pidfd_exited(pidfd)
            && matches!(
                sys::process_vm_write(pid, addr + split, dest + split, part),
                Ok(n) if n == part
            )
            && !sys::pidfd_exited(pidfd);
        ring.finish_second_part(seq, ok);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pidfd of a process that has exited (and been reaped: its pid is free for reuse).
    fn exited_pidfd() -> OwnedFd {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pidfd = sys::pidfd_open(child.id() as libc::pid_t).unwrap();
        child.wait().unwrap();
        pidfd
    }

    /// A copy by a pid whose vouched-for process (its pidfd) has exited does not count,
    /// even when the pid names a live process that lets us read it (here this very
    /// process stands for the stranger that got the pid): the peer is dead.
    #[test]
    fn a_copy_from_a_reused_pid_does_not_count() {
        let source = [7u8; 4096];
        let mut copy = [0u8; 4096];
        let peer = Addr::new(1, 0);
        let me = sys::getpid();
        let alive = sys::pidfd_open(me).unwrap();
        pull((me, &alive), peer, &mut copy, source.as_ptr() as u64).unwrap();
        assert_eq!(copy, source);
        let gone = exited_pidfd();
        match pull((me, &gone), peer, &mut copy, source.as_ptr() as u64) {
            Err(Error::PeerDead { peer: p, during }) => {
                assert_eq!(p, peer);
                assert!(during.contains("discarded"), "{during}");
            }
            other => panic!("expected PeerDead, got {other:?}"),
        }
    }
}
