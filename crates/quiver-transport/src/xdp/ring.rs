//! One AF_XDP ring mapped from the kernel: the fill and transmit rings this process
//! produces into, the receive and completion rings it consumes from. Single producer,
//! single consumer; the indices are free-running 32-bit counters, the slot is the index
//! masked by the ring's size (a power of two).
//!
//! Layer: quiver-transport's xdp module (shared memory with the kernel, `unsafe` with
//! `// SAFETY:`). The kernel is the other side: its descriptors are still checked by the
//! socket before use (an address outside the UMEM is never followed).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// A ring's mapping and cached indices. `T` is the descriptor: `u64` (a UMEM address) for
/// the fill and completion rings, `libc::xdp_desc` for receive and transmit.
#[derive(Debug)]
pub(super) struct Ring<T: Copy> {
    map: NonNull<u8>,
    map_len: usize,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descriptors: NonNull<T>,
    mask: u32,
    size: u32,
    /// Our copy of the index we own (producer side: producer; consumer side: consumer),
    /// and the last value read of the other side's.
    own: u32,
    seen: u32,
}

// SAFETY: the ring is owned by one socket, which is used by one thread at a time (the
// engine's mutex); the kernel side synchronises through the atomics.
unsafe impl<T: Copy> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of `socket`, with the
    /// kernel's `offsets` for it.
    pub(super) fn map(
        socket: &OwnedFd,
        pgoff: u64,
        size: u32,
        offsets: &libc::xdp_ring_offset,
    ) -> io::Result<Ring<T>> {
        let map_len = offsets.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a new shared mapping of the socket's ring chosen by the kernel; nothing
        // else lives at the returned address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                socket.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = NonNull::new(ptr as *mut u8).ok_or(io::ErrorKind::Other)?;
        let at = |offset: u64| {
            // SAFETY: the kernel's offsets lie inside the mapping it sized for this ring.
            unsafe { NonNull::new_unchecked(map.as_ptr().add(offset as usize)) }
        };
        Ok(Ring {
            map,
            map_len,
            producer: at(offsets.producer).cast(),
            consumer: at(offsets.consumer).cast(),
            flags: at(offsets.flags).cast(),
            descriptors: at(offsets.desc).cast(),
            mask: size - 1,
            size,
            own: 0,
            seen: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 inside the live mapping, written by the kernel and us only
        // atomically.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { self.consumer.as_ref() }
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) to work on this ring.
    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // Producer side (fill, transmit).

    /// Free slots, looking at the kernel's consumer index again when fewer than `wanted`
    /// seem free.
    pub(super) fn free(&mut self, wanted: u32) -> u32 {
        let free = self.size - self.own.wrapping_sub(self.seen);
        if free >= wanted {
            return free;
        }
        self.seen = self.consumer().load(Ordering::Acquire);
        self.size - self.own.wrapping_sub(self.seen)
    }

    /// Writes `value` into the next slot (the caller checked [`Ring::free`]); published
    /// only by [`Ring::publish`].
    pub(super) fn push(&mut self, value: T) {
        let slot = (self.own & self.mask) as usize;
        // SAFETY: slot < size, inside the descriptor array; the slot is free (the caller
        // checked), so the kernel does not read it until the producer index passes it.
        unsafe { self.descriptors.as_ptr().add(slot).write_volatile(value) };
        self.own = self.own.wrapping_add(1);
    }

    /// Makes what was pushed visible to the kernel.
    pub(super) fn publish(&mut self) {
        self.producer().store(self.own, Ordering::Release);
    }

    // Consumer side (receive, completion).

    /// Entries ready to take, looking at the kernel's producer index again when none seem
    /// ready.
    pub(super) fn ready(&mut self) -> u32 {
        let ready = self.seen.wrapping_sub(self.own);
        if ready > 0 {
            return ready;
        }
        self.seen = self.producer().load(Ordering::Acquire);
        self.seen.wrapping_sub(self.own).min(self.size)
    }

    /// Takes the next entry (the caller checked [`Ring::ready`]); given back to the kernel
    /// only by [`Ring::release`].
    pub(super) fn take(&mut self) -> T {
        let slot = (self.own & self.mask) as usize;
        // SAFETY: slot < size, inside the descriptor array; the kernel published it (the
        // producer index is past it) and does not touch it until our consumer index passes.
        let value = unsafe { self.descriptors.as_ptr().add(slot).read_volatile() };
        self.own = self.own.wrapping_add(1);
        value
    }

    /// Gives the taken entries' slots back to the kernel.
    pub(super) fn release(&mut self) {
        self.consumer().store(self.own, Ordering::Release);
    }
}

impl<T: Copy> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`; no reference into it outlives self.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}
