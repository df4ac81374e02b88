//! Rendezvous on a shared-memory edge: the ring carries only (address, length) of a large
//! message and the receiver copies it once, straight out of the sender's memory, with
//! cross-memory attach. Messages of at least [`SPLIT_MIN_BYTES`] are copied by both
//! processes at once: the receiver pulls the first half while the sender pushes the
//! second (`process_vm_writev`) into the buffer the receiver announced.

use quiver_transport::ring::Producer;
use quiver_transport::sys;

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::failure::corrupt_detail;

/// Rendezvous messages of at least this many bytes are copied by both processes at once.
pub(crate) const SPLIT_MIN_BYTES: u64 = 128 << 10;
/// The split point is page aligned.
pub(crate) const SPLIT_ALIGN: u64 = 4096;

/// Pulls `dst.len()` bytes from `addr` in the sender `pid` (one process_vm_readv).
pub(crate) fn pull(pid: libc::pid_t, peer: Addr, dst: &mut [u8], addr: u64) -> Result<()> {
    let len = dst.len();
    match sys::process_vm_read(pid, dst, addr) {
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
/// the receiver asked for help and nobody took it yet. Returns whether the request no longer
/// needs us (helped, or the receiver took the part).
pub(crate) fn help_split(ring: &Producer, pid: libc::pid_t, seq: u64, addr: u64, len: u64) -> bool {
    let Some((dest, split)) = ring.cts(seq, len) else {
        return false;
    };
    if ring.claim_second_part(seq) {
        let part = (len - split) as usize;
        let ok = matches!(
            sys::process_vm_write(pid, addr + split, dest + split, part),
            Ok(n) if n == part
        );
        ring.finish_second_part(seq, ok);
    }
    true
}
