//! Registered memory regions in shared memory: the memory file a rank allocates for
//! one-sided communication, mapped by its owner and by the peers it grants the region to,
//! and the accesses (copies and 64-bit CPU atomics) on it.
//!
//! Layout of the file: one header page, then the region's bytes.
//!
//! ```text
//!  0         8             16                 4096               4096 + len
//!  +---------+-------------+------ ... -------+------ ... --------+
//!  | magic   | revoked u64 | (unused)         | the region        |
//!  +---------+-------------+------ ... -------+------ ... --------+
//! ```
//!
//! The owner sets `revoked` before it unmaps its view; a peer checks it before each access
//! and gives up on the region once it is set. Nothing here trusts the header beyond that:
//! a peer with a read-write view can scribble on the header of a region it was granted,
//! which only misleads that peer itself (the owner never reads the header).
//!
//! Every access is checked against the region's length (and, for atomics, the word's
//! alignment) here as well as by the caller: no call of this module can touch memory
//! outside its mapping, whatever its arguments.
//!
//! Layer: quiver-transport (memory shared with other processes, `unsafe` with a `SAFETY:`
//! comment on each block). No policy: who may map a region is the caller's business.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::{self, Mapping};

/// Bytes before the region's first byte in its memory file (the header page).
pub const HEADER_BYTES: usize = 4096;
/// Byte offset of the magic word.
const MAGIC_AT: usize = 0;
/// Byte offset of the revoked word.
const REVOKED_AT: usize = 8;
/// The magic word of a region's memory file ("QRMAREG1").
const MAGIC: u64 = u64::from_be_bytes(*b"QRMAREG1");

/// Why an access was refused by this layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// `offset + len` passes the region's end (or overflows).
    OutOfBounds,
    /// An atomic on a word that is not 8-byte aligned.
    Misaligned,
    /// A write through a read-only view.
    ReadOnly,
    /// Memory a caller lent whose scope has ended (`caller::with_caller_memory`).
    Revoked,
}

/// Why a received memory file cannot be used as a region.
#[derive(Debug)]
pub enum AttachError {
    /// Not sealed against resizing: the owner could shrink it under us.
    NotSealed,
    /// Shorter than a header, or a length that disagrees with the grant.
    Length(usize),
    /// The header does not say it is a region.
    Magic,
    /// Mapping failed.
    Io(io::Error),
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachError::NotSealed => write!(f, "the region's memory file is not sealed"),
            AttachError::Length(n) => write!(f, "the region's memory file has {n} bytes"),
            AttachError::Magic => write!(f, "the region's memory file is not a region"),
            AttachError::Io(e) => write!(f, "mapping the region: {e}"),
        }
    }
}

/// A view of a region: the owner's (read-write) or a peer's (read-write or read-only).
#[derive(Debug)]
pub struct SharedRegion {
    map: Mapping,
    len: usize,
    writable: bool,
}

impl SharedRegion {
    /// Allocates a region of `len` bytes (zeroed) in a sealed memory file: the owner's view
    /// and the file, to hand to peers.
    ///
    /// # Errors
    /// The system's, when memory is short.
    pub fn create(len: usize) -> io::Result<(SharedRegion, OwnedFd)> {
        let total = len
            .checked_add(HEADER_BYTES)
            .ok_or(io::ErrorKind::InvalidInput)?;
        let fd = sys::memfd("quiver-region", total)?;
        let map = Mapping::map(&fd, total)?;
        let region = SharedRegion {
            map,
            len,
            writable: true,
        };
        region.word(MAGIC_AT).store(MAGIC, Ordering::Release);
        Ok((region, fd))
    }

    /// Maps a region a peer granted: `fd` must be sealed, hold a header and exactly `len`
    /// bytes after it, and carry the magic. `writable` false maps it read-only (the
    /// descriptor of a read-only grant allows nothing else).
    ///
    /// # Errors
    /// [`AttachError`] naming what is wrong.
    pub fn attach(fd: &OwnedFd, len: usize, writable: bool) -> Result<SharedRegion, AttachError> {
        let seals = sys::seals(fd).map_err(AttachError::Io)?;
        if seals & sys::SHARED_SEALS != sys::SHARED_SEALS {
            return Err(AttachError::NotSealed);
        }
        let total = sys::file_len(fd).map_err(AttachError::Io)?;
        if total < HEADER_BYTES || total - HEADER_BYTES != len {
            return Err(AttachError::Length(total));
        }
        let map = if writable {
            Mapping::map(fd, total)
        } else {
            Mapping::map_read_only(fd, total)
        }
        .map_err(AttachError::Io)?;
        let region = SharedRegion { map, len, writable };
        if region.word(MAGIC_AT).load(Ordering::Acquire) != MAGIC {
            return Err(AttachError::Magic);
        }
        Ok(region)
    }

    /// The region's length in bytes (the header not counted).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this view may write.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Whether the owner revoked the region.
    #[inline]
    pub fn is_revoked(&self) -> bool {
        self.word(REVOKED_AT).load(Ordering::Acquire) != 0
    }

    /// Marks the region revoked (the owner, before it unmaps its view).
    ///
    /// # Errors
    /// [`AccessError::ReadOnly`] through a read-only view.
    pub fn revoke(&self) -> Result<(), AccessError> {
        if !self.writable {
            return Err(AccessError::ReadOnly);
        }
        self.word(REVOKED_AT).store(1, Ordering::Release);
        Ok(())
    }

    /// Checks `offset..offset + len` against the region.
    #[inline]
    fn check(&self, offset: usize, len: usize) -> Result<(), AccessError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(AccessError::OutOfBounds),
        }
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// [`AccessError::OutOfBounds`], [`AccessError::ReadOnly`].
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        if !self.writable {
            return Err(AccessError::ReadOnly);
        }
        self.check(offset, data.len())?;
        // SAFETY: `offset + data.len() <= len` (checked), so the destination lies inside
        // the read-write mapping, past the header; `data` is a distinct local buffer, so
        // the ranges cannot overlap. Concurrent writers of the same bytes (other
        // processes) can only make the bytes a mix of the writes: plain bytes have no
        // invalid values.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_ptr().add(HEADER_BYTES + offset),
                data.len(),
            );
        }
        Ok(())
    }

    /// Copies the region's bytes at `offset` into `buf`.
    ///
    /// # Errors
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), AccessError> {
        self.check(offset, buf.len())?;
        // SAFETY: the source range lies inside the mapping (checked above); `buf` is an
        // exclusive local buffer, disjoint from the mapping. Bytes written concurrently by
        // others are plain bytes: any value is valid.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(HEADER_BYTES + offset),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        Ok(())
    }

    /// Receives at most `len` bytes from socket `fd` straight into the region at `offset`
    /// (one `recv`, never waiting): the software path of a put, with no staging copy.
    /// Returns the bytes received (0: the peer closed).
    ///
    /// # Errors
    /// `InvalidInput` for bytes outside the region or a read-only view; the socket's
    /// (`WouldBlock` when nothing is there).
    pub fn recv_into(&self, fd: BorrowedFd<'_>, offset: usize, len: usize) -> io::Result<usize> {
        if !self.writable || self.check(offset, len).is_err() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: `offset + len <= self.len` (checked), so the `len` bytes lie inside the
        // read-write mapping, past the header, alive as long as `&self`. Bytes other
        // processes write concurrently are plain bytes: any mix is a valid value.
        unsafe { recv_raw(fd, self.map.as_ptr().add(HEADER_BYTES + offset), len) }
    }

    /// Sends `head` then the region's `len` bytes at `offset` on socket `fd` in one
    /// gathered `sendmsg`, skipping the first `skip` bytes of the two (the rest of a send
    /// the socket took in part), never waiting: the software path of a get's reply, with
    /// no staging copy. Returns the bytes the socket took.
    ///
    /// # Errors
    /// `InvalidInput` for bytes outside the region; the socket's (`WouldBlock` when full).
    pub fn send_from(
        &self,
        fd: BorrowedFd<'_>,
        head: &[u8],
        (offset, len): (usize, usize),
        skip: usize,
    ) -> io::Result<usize> {
        self.check(offset, len)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `offset + len <= self.len` (checked): the range lies inside the mapping,
        // which lives as long as `&self`; the kernel only reads it.
        let data = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(HEADER_BYTES + offset), len)
        };
        send_gathered(fd, head, data, skip)
    }

    /// The region's 64-bit word at `offset` for an atomic operation.
    #[inline]
    fn data_word(&self, offset: usize, write: bool) -> Result<&AtomicU64, AccessError> {
        if write && !self.writable {
            return Err(AccessError::ReadOnly);
        }
        self.check(offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(AccessError::Misaligned);
        }
        Ok(self.word(HEADER_BYTES + offset))
    }

    /// The word at byte `at` of the mapping (`at` 8-aligned and `at + 8 <= mapping`).
    #[inline]
    fn word(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= self.map.len());
        // SAFETY: callers pass an 8-aligned `at` with `at + 8` inside the mapping (the
        // header words, or a data word checked by `data_word`); the mapping is page-aligned,
        // so the word is aligned for AtomicU64; it lives as long as `&self`; every access
        // of quiver to these words is atomic.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU64) }
    }

    /// Reads the word at `offset` atomically.
    ///
    /// # Errors
    /// [`AccessError`] for a word outside the region or misaligned.
    pub fn load(&self, offset: usize) -> Result<u64, AccessError> {
        Ok(self.data_word(offset, false)?.load(Ordering::SeqCst))
    }

    /// Adds `value` (wrapping) to the word at `offset`; returns the word before.
    ///
    /// # Errors
    /// [`AccessError`].
    #[inline]
    pub fn fetch_add(&self, offset: usize, value: u64) -> Result<u64, AccessError> {
        Ok(self
            .data_word(offset, true)?
            .fetch_add(value, Ordering::SeqCst))
    }

    /// Replaces the word at `offset` with `new` if it holds `expected`; returns the word
    /// before (equal to `expected` when the swap happened).
    ///
    /// # Errors
    /// [`AccessError`].
    #[inline]
    pub fn compare_swap(&self, offset: usize, expected: u64, new: u64) -> Result<u64, AccessError> {
        let word = self.data_word(offset, true)?;
        Ok(
            match word.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(old) | Err(old) => old,
            },
        )
    }

    /// Stores `value` in the word at `offset`; returns the word before.
    ///
    /// # Errors
    /// [`AccessError`].
    #[inline]
    pub fn swap(&self, offset: usize, value: u64) -> Result<u64, AccessError> {
        Ok(self.data_word(offset, true)?.swap(value, Ordering::SeqCst))
    }
}

/// Receives at most `len` bytes from socket `fd` at `at`, never waiting; the bytes taken.
///
/// # Safety
/// `at..at + len` must be writable memory that stays alive for the call.
pub(crate) unsafe fn recv_raw(fd: BorrowedFd<'_>, at: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller's promise: the kernel writes at most `len` bytes at `at`.
    let got = unsafe { libc::recv(fd.as_raw_fd(), at.cast::<c_void>(), len, libc::MSG_DONTWAIT) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(got as usize)
}

/// Sends `head` then `data` on socket `fd` in one gathered `sendmsg`, skipping the first
/// `skip` bytes of the two, never waiting; the bytes the socket took.
pub(crate) fn send_gathered(
    fd: BorrowedFd<'_>,
    head: &[u8],
    data: &[u8],
    skip: usize,
) -> io::Result<usize> {
    let (head_part, data_part) = if skip < head.len() {
        (&head[skip..], data)
    } else {
        (
            &head[head.len()..],
            data.get(skip - head.len()..).unwrap_or(&[]),
        )
    };
    let mut iovecs = [
        libc::iovec {
            // The kernel only reads through these pointers (sendmsg).
            iov_base: head_part.as_ptr() as *mut c_void,
            iov_len: head_part.len(),
        },
        libc::iovec {
            iov_base: data_part.as_ptr() as *mut c_void,
            iov_len: data_part.len(),
        },
    ];
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iovecs.as_mut_ptr();
    message.msg_iovlen = iovecs.len();
    // SAFETY: `message` points at two iovecs describing live slices the kernel only
    // reads.
    let sent = unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &message,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_view_sees_the_owners_bytes_and_words() {
        let (owner, fd) = SharedRegion::create(100).unwrap();
        let peer = SharedRegion::attach(&fd, 100, true).unwrap();
        owner.write(10, b"hello").unwrap();
        let mut buf = [0u8; 5];
        peer.read(10, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(peer.fetch_add(16, 5).unwrap(), 0);
        assert_eq!(owner.load(16).unwrap(), 5);
        assert_eq!(peer.compare_swap(16, 4, 9).unwrap(), 5);
        assert_eq!(peer.compare_swap(16, 5, 9).unwrap(), 5);
        assert_eq!(peer.swap(16, 1).unwrap(), 9);
        assert!(!peer.is_revoked());
        owner.revoke().unwrap();
        assert!(peer.is_revoked());
    }

    #[test]
    fn accesses_outside_the_region_misaligned_or_through_read_only_are_refused() {
        let (owner, fd) = SharedRegion::create(64).unwrap();
        assert_eq!(owner.write(60, &[0; 5]), Err(AccessError::OutOfBounds));
        assert_eq!(
            owner.write(usize::MAX, &[0; 1]),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(owner.read(65, &mut []), Err(AccessError::OutOfBounds));
        assert_eq!(owner.write(64, &[]), Ok(()));
        assert_eq!(owner.fetch_add(60, 1), Err(AccessError::OutOfBounds));
        assert_eq!(owner.fetch_add(4, 1), Err(AccessError::Misaligned));
        let ro_fd = sys::reopen_read_only(&fd).unwrap();
        assert!(
            SharedRegion::attach(&ro_fd, 64, true).is_err(),
            "a read-only descriptor cannot be mapped for writing"
        );
        let ro = SharedRegion::attach(&ro_fd, 64, false).unwrap();
        assert_eq!(ro.write(0, b"x"), Err(AccessError::ReadOnly));
        assert_eq!(ro.swap(0, 1), Err(AccessError::ReadOnly));
        assert_eq!(ro.revoke(), Err(AccessError::ReadOnly));
        assert_eq!(ro.load(0), Ok(0));
    }

    #[test]
    fn bytes_move_between_a_socket_and_the_region_without_leaving_it() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        use std::os::unix::net::UnixStream;

        let (owner, fd) = SharedRegion::create(64).unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"abcdef").unwrap();
        assert_eq!(owner.recv_into(b.as_fd(), 10, 4).unwrap(), 4);
        let mut buf = [0u8; 4];
        owner.read(10, &mut buf).unwrap();
        assert_eq!(&buf, b"abcd");
        assert_eq!(
            owner.recv_into(b.as_fd(), 62, 4).unwrap_err().kind(),
            io::ErrorKind::InvalidInput,
            "past the end"
        );
        let ro = SharedRegion::attach(&sys::reopen_read_only(&fd).unwrap(), 64, false).unwrap();
        assert_eq!(
            ro.recv_into(b.as_fd(), 0, 1).unwrap_err().kind(),
            io::ErrorKind::InvalidInput,
            "a read-only view"
        );
        // A header, then the region's bytes, resumed after 3 bytes.
        assert_eq!(owner.send_from(b.as_fd(), b"HEAD", (10, 4), 3).unwrap(), 5);
        let mut out = [0u8; 5];
        a.read_exact(&mut out).unwrap();
        assert_eq!(&out, b"Dabcd");
        assert_eq!(owner.send_from(b.as_fd(), b"H", (11, 2), 2).unwrap(), 1);
        a.read_exact(&mut out[..1]).unwrap();
        assert_eq!(out[0], b'c');
        assert!(owner.send_from(b.as_fd(), b"", (63, 2), 0).is_err());
    }

    #[test]
    fn a_file_that_is_not_a_region_is_refused() {
        let unsealed = sys::memfd_unsealed("x", HEADER_BYTES + 8).unwrap();
        assert!(matches!(
            SharedRegion::attach(&unsealed, 8, true),
            Err(AttachError::NotSealed)
        ));
        let blank = sys::memfd("x", HEADER_BYTES + 8).unwrap();
        assert!(matches!(
            SharedRegion::attach(&blank, 8, true),
            Err(AttachError::Magic)
        ));
        assert!(matches!(
            SharedRegion::attach(&blank, 16, true),
            Err(AttachError::Length(_))
        ));
    }
}
