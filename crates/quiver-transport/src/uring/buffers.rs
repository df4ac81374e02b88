//! The provided buffer ring of the multishot receive: `count` buffers of `size` bytes in one
//! anonymous mapping, and the ring (`io_uring_buf` entries, registered with
//! `IORING_REGISTER_PBUF_RING`) through which they are handed to the kernel. The kernel
//! takes one buffer per datagram; the receiver reads the datagram there ([`RxBuffer`]) and
//! gives the buffer back ([`ProvidedBuffers::provide`]).
//!
//! Layer: quiver-transport, the io_uring socket. `unsafe` for the mappings and the ring's
//! shared tail, each block with its `SAFETY:` comment.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use io_uring::types::BufRingEntry;

/// An anonymous mapping, unmapped when the last holder drops it.
#[derive(Debug)]
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; who may write which part of it
// when is decided by its users (the kernel writes a buffer only while it is provided).
unsafe impl Send for Mapping {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> io::Result<Mapping> {
        // SAFETY: an anonymous private mapping of `len` bytes; no existing memory involved.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned 0"))?;
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `Mapping::new`; nothing borrows it past self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A received datagram's buffer, read in place: the kernel does not write it again until
/// it is given back ([`super::UringUdpSocket::release`]; dropped instead, the buffer is lost
/// to the pool). It keeps the buffers mapped, so its bytes stay valid past the socket.
#[derive(Debug)]
pub struct RxBuffer {
    area: Arc<Mapping>,
    pub(super) id: u16,
    offset: usize,
    len: usize,
}

impl std::ops::Deref for RxBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `offset..offset + len` lies inside buffer `id` of the area (checked by
        // `ProvidedBuffers::take`), kept mapped by `area`; the kernel filled it and writes it
        // again only after `provide` hands it back, which consumes this value.
        unsafe { std::slice::from_raw_parts(self.area.ptr.as_ptr().add(self.offset), self.len) }
    }
}

/// The buffers and the ring that provides them.
#[derive(Debug)]
pub(super) struct ProvidedBuffers {
    area: Arc<Mapping>,
    ring: Mapping,
    size: usize,
    count: u16,
    /// The next tail to publish (the kernel reads the published one).
    tail: u16,
    /// Buffers given to the kernel and not yet come back with a datagram.
    pub(super) with_kernel: u16,
}

impl ProvidedBuffers {
    /// `count` (a power of two, at most 32768) buffers of `size` bytes; every one provided.
    pub(super) fn new(count: u16, size: usize) -> io::Result<ProvidedBuffers> {
        assert!(count.is_power_of_two() && count <= 1 << 15);
        let area = Arc::new(Mapping::new(usize::from(count) * size)?);
        let ring = Mapping::new(usize::from(count) * std::mem::size_of::<BufRingEntry>())?;
        let mut buffers = ProvidedBuffers {
            area,
            ring,
            size,
            count,
            tail: 0,
            with_kernel: 0,
        };
        for id in 0..count {
            buffers.push(id);
        }
        buffers.publish();
        Ok(buffers)
    }

    /// The ring's address and entry count, for `IORING_REGISTER_PBUF_RING`.
    pub(super) fn ring_address(&self) -> (u64, u16) {
        (self.ring.ptr.as_ptr() as u64, self.count)
    }

    fn push(&mut self, id: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        let base = self.ring.ptr.as_ptr().cast::<BufRingEntry>();
        // SAFETY: `slot` < count, the ring's entry count; the kernel reads entries only up
        // to the published tail, which does not cover this one yet. The entry's last field
        // is the ring's tail in entry 0 (the kernel's layout): only addr, len and bid are set.
        let entry = unsafe { &mut *base.add(slot) };
        entry.set_addr(self.area.ptr.as_ptr() as u64 + (usize::from(id) * self.size) as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
        self.with_kernel += 1;
    }

    fn publish(&self) {
        let base = self.ring.ptr.as_ptr().cast::<BufRingEntry>();
        // SAFETY: the tail field of the ring's first entry, inside the mapping; the kernel
        // reads it concurrently, hence the atomic release store (entries written before).
        unsafe {
            let tail = BufRingEntry::tail(base) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// Hands buffer `id` back to the kernel.
    pub(super) fn provide(&mut self, buffer: RxBuffer) {
        self.push(buffer.id);
        self.publish();
    }

    /// The kernel filled buffer `id` with `len` bytes: they are the caller's until given
    /// back. None (and the buffer lost) for an id or length the kernel cannot have given.
    pub(super) fn take(&mut self, id: u16, len: usize) -> Option<RxBuffer> {
        if id >= self.count || len > self.size {
            return None;
        }
        self.with_kernel = self.with_kernel.saturating_sub(1);
        Some(RxBuffer {
            area: Arc::clone(&self.area),
            id,
            offset: usize::from(id) * self.size,
            len,
        })
    }
}
