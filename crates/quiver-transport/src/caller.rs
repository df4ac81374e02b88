//! Memory a caller registers for one-sided communication (rather than a region quiver
//! allocates in a memory file): the caller's own bytes, lent for the length of a scope
//! ([`with_caller_memory`]), reached by the owner's accesses here and, over shm, by peers'
//! cross-memory attach (`process_vm_writev`/`readv`) at its address.
//!
//! Soundness rests on one rule: **no access touches the memory after the scope ends**,
//! whatever the program does with the handles ([`CallerMemory`] may be cloned, leaked, or
//! outlive the scope in a served connection). Two mechanisms keep it:
//!
//! - accesses in this process (the owner's, and the target's software path applying a
//!   peer's request) take the `live` lock and find it cleared once the scope has ended;
//! - accesses of peer processes (cross-memory attach) go through a control file both map:
//!   a header word `revoked` and one in-use count per peer process (a slot). A peer adds
//!   one to its slot, fences, reads `revoked`, and only if it is clear copies, then
//!   subtracts one. At the end of the scope the owner sets `revoked`, fences, and waits for
//!   every slot to be 0 or its process to have exited (its pidfd). With both fences sequentially
//!   consistent, either the peer sees `revoked` or the owner sees the peer's count: no
//!   copy starts after the owner stopped waiting. A peer process stopped mid-copy delays
//!   the end of the scope until it runs again or dies.
//!
//! A peer that can attach to this process's memory at all has ptrace rights over it, so
//! the control file protects against a peer's timing, not its malice (it could write
//! anywhere anyway): read-only keys are enforced by the peer's quiver, not the kernel.
//!
//! Layer: quiver-transport (raw pointers into the caller's memory, `unsafe` with a
//! `SAFETY:` comment on each block). Who may access is the caller's business.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::region::{AccessError, SharedRegion};
use crate::sys;

/// Peer processes a caller region's control file has in-use counts for.
pub const SLOTS: usize = 512;

/// Bytes of a control file's counts (after its header page).
pub const CONTROL_BYTES: usize = SLOTS * 8;

/// The caller's memory, lent for a scope (module docs). Every access checks bounds and
/// that the scope has not ended.
#[derive(Debug)]
pub struct CallerMemory {
    /// The memory's first byte; valid for `len` bytes while `live` holds true.
    base: *mut u8,
    len: usize,
    /// True from the scope's start to its end; each access holds it.
    live: Mutex<bool>,
    /// The revoked word and the in-use counts peers' cross-memory copies keep.
    control: SharedRegion,
    control_fd: OwnedFd,
    /// The peer processes that have a slot: slot `i` is `slots[i]`'s (pid, pidfd).
    slots: Mutex<Vec<(libc::pid_t, OwnedFd)>>,
}

// SAFETY: `base` is only dereferenced while `live` is locked and true, that is while the
// scope that lent the memory (exclusively, `&mut`) runs; the lock serialises those
// accesses between threads, and atomics are the only accesses that may overlap peers'.
unsafe impl Send for CallerMemory {}
// SAFETY: as for `Send`: every access through `&self` holds the `live` lock.
unsafe impl Sync for CallerMemory {}

/// Lends `memory` to one-sided communication for the length of `f`: `f` gets the handle,
/// and when it returns (or unwinds) the memory is revoked (module docs) before this
/// returns, so the borrow ends with no access left in flight, from this process or a peer.
///
/// # Errors
/// The system's, when the control file cannot be made.
pub fn with_caller_memory<R>(
    memory: &mut [u8],
    f: impl FnOnce(&Arc<CallerMemory>) -> R,
) -> io::Result<R> {
    let (control, control_fd) = SharedRegion::create(CONTROL_BYTES)?;
    let handle = Arc::new(CallerMemory {
        base: memory.as_mut_ptr(),
        len: memory.len(),
        live: Mutex::new(true),
        control,
        control_fd,
        slots: Mutex::new(Vec::new()),
    });
    let guard = Revoker {
        memory: Arc::clone(&handle),
        _borrow: PhantomData,
    };
    let result = f(&handle);
    drop(guard);
    Ok(result)
}

/// Revokes the memory when the scope ends, normally or by unwinding.
struct Revoker<'a> {
    memory: Arc<CallerMemory>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl Drop for Revoker<'_> {
    fn drop(&mut self) {
        self.memory.revoke();
    }
}

impl CallerMemory {
    /// The memory's address in this process (what peers' cross-memory copies aim at).
    pub fn addr(&self) -> u64 {
        self.base as u64
    }

    /// The memory's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The control file, to hand to a peer that will copy by cross-memory attach (mapped
    /// read-write by it whatever its rights: it keeps its count there).
    pub fn control_fd(&self) -> &OwnedFd {
        &self.control_fd
    }

    /// The slot of process `pid` in the control file (the same for every grant to it);
    /// None when every slot is taken or the process is gone.
    pub fn slot_for(&self, pid: libc::pid_t) -> Option<u32> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = slots.iter().position(|(p, _)| *p == pid) {
            return Some(i as u32);
        }
        if slots.len() >= SLOTS {
            return None;
        }
        let pidfd = sys::pidfd_open(pid).ok()?;
        slots.push((pid, pidfd));
        Some((slots.len() - 1) as u32)
    }

    /// Ends every access (module docs): this process's at once, then waits for peers'
    /// copies in flight. Idempotent.
    fn revoke(&self) {
        *self.lock() = false;
        // The owner's view of the control file is writable: this cannot fail.
        let _ = self.control.revoke();
        fence(Ordering::SeqCst);
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for (i, (_, pidfd)) in slots.iter().enumerate() {
            let mut rounds = 0u32;
            while self.control.load(i * 8).unwrap_or(0) != 0 && !sys::pidfd_exited(pidfd) {
                rounds += 1;
                if rounds < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, bool> {
        // The flag is one bool: consistent after any panic.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The memory at `offset..offset + len` while the scope lives: the guard and the
    /// pointer to its first byte.
    fn span(
        &self,
        offset: usize,
        len: usize,
    ) -> Result<(MutexGuard<'_, bool>, *mut u8), AccessError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => return Err(AccessError::OutOfBounds),
        }
        let live = self.lock();
        if !*live {
            return Err(AccessError::Revoked);
        }
        // SAFETY: `offset <= len` (checked), so the pointer stays inside (or one past) the
        // lent memory, which is alive while `live` is true.
        Ok((live, unsafe { self.base.add(offset) }))
    }

    /// Copies `data` into the memory at `offset`.
    ///
    /// # Errors
    /// [`AccessError::OutOfBounds`], [`AccessError::Revoked`].
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        let (_live, at) = self.span(offset, data.len())?;
        // SAFETY: the destination lies inside the lent memory (checked by `span`), alive
        // while the guard is held; `data` is a distinct buffer of ours (a `&[u8]` cannot
        // alias the exclusively lent memory). Peers' concurrent copies only mix plain bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
        Ok(())
    }

    /// Copies the memory's bytes at `offset` into `buf`.
    ///
    /// # Errors
    /// [`AccessError::OutOfBounds`], [`AccessError::Revoked`].
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), AccessError> {
        let (_live, at) = self.span(offset, buf.len())?;
        // SAFETY: the source lies inside the lent memory (checked), alive while the guard
        // is held; `buf` is an exclusive buffer of ours, disjoint from it.
        unsafe { std::ptr::copy_nonoverlapping(at, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Applies `f` to the 64-bit word at `offset` (8-aligned in the region and in this
    /// process's address space) atomically.
    fn with_word<T>(
        &self,
        offset: usize,
        f: impl FnOnce(&AtomicU64) -> T,
    ) -> Result<T, AccessError> {
        let (_live, at) = self.span(offset, 8)?;
        if !offset.is_multiple_of(8) || !(at as usize).is_multiple_of(8) {
            return Err(AccessError::Misaligned);
        }
        // SAFETY: `at` is 8-aligned (checked) with 8 bytes inside the lent memory (checked
        // by `span`), alive while the guard is held; quiver's accesses to the word are
        // atomic (peers' cross-memory copies are not atomics: docs/rma.md says so).
        let word = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
        Ok(f(word))
    }

    /// Reads the word at `offset` atomically.
    ///
    /// # Errors
    /// [`AccessError`] for a word outside the memory, misaligned, or revoked.
    pub fn load(&self, offset: usize) -> Result<u64, AccessError> {
        self.with_word(offset, |w| w.load(Ordering::SeqCst))
    }

    /// Adds `value` (wrapping) to the word at `offset`; the word before.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn fetch_add(&self, offset: usize, value: u64) -> Result<u64, AccessError> {
        self.with_word(offset, |w| w.fetch_add(value, Ordering::SeqCst))
    }

    /// Replaces the word at `offset` with `new` if it holds `expected`; the word before.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn compare_swap(&self, offset: usize, expected: u64, new: u64) -> Result<u64, AccessError> {
        self.with_word(offset, |w| {
            match w.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
    }

    /// Stores `value` in the word at `offset`; the word before.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn swap(&self, offset: usize, value: u64) -> Result<u64, AccessError> {
        self.with_word(offset, |w| w.swap(value, Ordering::SeqCst))
    }

    /// Receives at most `len` bytes from socket `fd` straight into the memory at `offset`
    /// (one `recv`, never waiting), as [`SharedRegion::recv_into`].
    ///
    /// # Errors
    /// `InvalidInput` outside the memory, `PermissionDenied` once revoked; the socket's.
    pub fn recv_into(&self, fd: BorrowedFd<'_>, offset: usize, len: usize) -> io::Result<usize> {
        let (_live, at) = self.span(offset, len).map_err(io_error)?;
        // SAFETY: `len` bytes at `at` lie inside the lent memory (checked), alive while the
        // guard is held.
        unsafe { crate::region::recv_raw(fd, at, len) }
    }

    /// Sends `head` then the memory's `len` bytes at `offset` on socket `fd`, skipping the
    /// first `skip` bytes of the two, never waiting, as [`SharedRegion::send_from`].
    ///
    /// # Errors
    /// `InvalidInput` outside the memory, `PermissionDenied` once revoked; the socket's.
    pub fn send_from(
        &self,
        fd: BorrowedFd<'_>,
        head: &[u8],
        (offset, len): (usize, usize),
        skip: usize,
    ) -> io::Result<usize> {
        let (_live, at) = self.span(offset, len).map_err(io_error)?;
        // SAFETY: `len` bytes at `at` lie inside the lent memory (checked), alive while the
        // guard is held; the kernel only reads them.
        let data = unsafe { std::slice::from_raw_parts(at.cast_const(), len) };
        crate::region::send_gathered(fd, head, data, skip)
    }
}

/// The io error of an access refused here.
fn io_error(e: AccessError) -> io::Error {
    match e {
        AccessError::Revoked => io::ErrorKind::PermissionDenied.into(),
        _ => io::ErrorKind::InvalidInput.into(),
    }
}

/// A peer's view of a caller region's control file (module docs): the in-use count of its
/// slot around each cross-memory copy, and the revoked word.
#[derive(Debug)]
pub struct CallerControl {
    control: SharedRegion,
    slot: usize,
}

impl CallerControl {
    /// Maps the control file a peer granted, for slot `slot`.
    ///
    /// # Errors
    /// As [`SharedRegion::attach`], and `Length` for a slot outside the file.
    pub fn attach(fd: &OwnedFd, slot: u32) -> Result<CallerControl, crate::region::AttachError> {
        let slot = slot as usize;
        if slot >= SLOTS {
            return Err(crate::region::AttachError::Length(slot));
        }
        let control = SharedRegion::attach(fd, CONTROL_BYTES, true)?;
        Ok(CallerControl { control, slot })
    }

    /// Runs `copy` unless the owner revoked the memory (then None): the slot's count is
    /// held around it, so the owner's revocation waits for it.
    pub fn in_use<T>(&self, copy: impl FnOnce() -> T) -> Option<T> {
        let at = self.slot * 8;
        // The view is writable and the slot's word in bounds and aligned: cannot fail.
        let _ = self.control.fetch_add(at, 1);
        fence(Ordering::SeqCst);
        let result = (!self.control.is_revoked()).then(copy);
        let _ = self.control.fetch_add(at, u64::MAX);
        result
    }

    /// Whether the owner revoked the memory.
    pub fn is_revoked(&self) -> bool {
        self.control.is_revoked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_are_checked_and_end_with_the_scope() {
        let mut memory = vec![0u64; 8];
        let bytes: &mut [u8] = {
            let len = memory.len() * 8;
            // A byte view of the words: the test wants an 8-aligned buffer.
            let ptr = memory.as_mut_ptr().cast::<u8>();
            // SAFETY: `memory` holds `len` initialised bytes, exclusively borrowed here.
            unsafe { std::slice::from_raw_parts_mut(ptr, len) }
        };
        let kept = with_caller_memory(bytes, |m| {
            m.write(8, &[1, 2, 3]).unwrap();
            let mut back = [0u8; 3];
            m.read(8, &mut back).unwrap();
            assert_eq!(back, [1, 2, 3]);
            assert_eq!(m.fetch_add(16, 5).unwrap(), 0);
            assert_eq!(m.compare_swap(16, 5, 9).unwrap(), 5);
            assert_eq!(m.swap(16, 1).unwrap(), 9);
            assert_eq!(m.load(16).unwrap(), 1);
            assert_eq!(m.write(60, &[0; 5]), Err(AccessError::OutOfBounds));
            assert_eq!(m.fetch_add(4, 1), Err(AccessError::Misaligned));
            assert_eq!(m.slot_for(std::process::id() as libc::pid_t), Some(0));
            assert_eq!(m.slot_for(std::process::id() as libc::pid_t), Some(0));
            Arc::clone(m)
        })
        .unwrap();
        // The handle outlives the scope: it reaches nothing.
        assert_eq!(kept.write(0, &[1]), Err(AccessError::Revoked));
        assert_eq!(kept.load(0), Err(AccessError::Revoked));
        assert_eq!(memory[1] & 0xff_ffff, 0x03_0201);
        assert_eq!(memory[2], 1);
    }

    #[test]
    fn a_peers_copy_in_use_holds_the_revocation_and_none_starts_after_it() {
        let mut memory = [0u8; 64];
        let control = with_caller_memory(&mut memory, |m| {
            let peer = CallerControl::attach(m.control_fd(), 0).unwrap();
            assert_eq!(peer.in_use(|| 7), Some(7));
            peer
        })
        .unwrap();
        assert!(control.is_revoked());
        assert_eq!(control.in_use(|| 7), None);
    }
}
