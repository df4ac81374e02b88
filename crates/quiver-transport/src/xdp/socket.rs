//! An AF_XDP socket with its own UMEM: frames move between a user-space memory area and
//! the driver through four rings (fill, receive, transmit, completion) without the kernel's
//! IP/UDP stack. The UMEM's first half is the receive pool (every frame of it sits in the
//! fill or receive ring or is being read), the second half the transmit frames (free in
//! this process, or queued in the transmit ring until the completion ring returns them).
//!
//! Bound with `XDP_USE_NEED_WAKEUP`, zero-copy first and copy mode when the driver cannot
//! (veth, most virtual NICs): [`XskSocket::zero_copy`] says which. Transmits are batched:
//! [`XskSocket::send_with`] only queues a descriptor; [`XskSocket::flush`] publishes the
//! batch and makes the one system call that starts it (`sendto`, only when the kernel asks
//! for a wake-up, which copy mode always does). Receives take descriptors from the receive
//! ring and hand the frames back to the fill ring in batches.
//!
//! Layer: quiver-transport's xdp module (system calls and memory shared with the kernel,
//! `unsafe` with `// SAFETY:`). Knows nothing of frame contents.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use super::ring::Ring;

/// The UMEM's and rings' sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per UMEM frame: a power of two from 2048 to the page size. A frame holds one
    /// Ethernet frame (the interface's MTU plus 14 must fit).
    pub frame_bytes: u32,
    /// Frames for receiving (the fill and receive rings have this many slots; a power of
    /// two).
    pub rx_frames: u32,
    /// Frames for transmitting (the transmit and completion rings have this many slots; a
    /// power of two).
    pub tx_frames: u32,
}

impl Default for Geometry {
    /// 4 KiB frames, 2048 each way: 16 MiB of UMEM.
    fn default() -> Geometry {
        Geometry {
            frame_bytes: 4096,
            rx_frames: 2048,
            tx_frames: 2048,
        }
    }
}

/// Fill-ring entries handed back at once (and taken receive descriptors released), at
/// most half the receive frames: the rest stay lent to the kernel meanwhile.
const FILL_BATCH: u32 = 64;

/// An AF_XDP socket bound to one queue of one interface, with its UMEM and rings.
#[derive(Debug)]
pub struct XskSocket {
    // Field order is drop order: the rings are unmapped before the socket closes, the UMEM
    // is unmapped last (the kernel holds its pages pinned until the socket is gone).
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fd: OwnedFd,
    umem: Arc<Umem>,
    geometry: Geometry,
    /// Transmit frames free to write (UMEM addresses).
    free_tx: Vec<u64>,
    /// Receive frames taken from the receive ring, to go back into the fill ring.
    refill: Vec<u64>,
    /// How many `refill` gathers before they go back together ([`FILL_BATCH`], or half
    /// the receive frames when fewer).
    refill_batch: usize,
    /// Descriptors queued in the transmit ring since the last flush.
    unflushed: u32,
    zero_copy: bool,
}

/// The UMEM area: anonymous memory the kernel pins while the socket lives.
#[derive(Debug)]
struct Umem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the area is plain memory owned by one socket (and the received frames it hands
// out); the kernel writes only frames the fill ring lent it, which nobody reads until the
// receive ring returns them, and a received frame is read only through its `RxFrame`
// until it is released back to the fill ring.
unsafe impl Send for Umem {}
// SAFETY: as above: shared references only read frames no one writes meanwhile.
unsafe impl Sync for Umem {}

/// A received frame, read in place in the UMEM: it stays out of the kernel's reach until
/// [`XskSocket::release`] gives it back (dropped instead, the frame is lost to the pool).
/// It keeps the UMEM mapped, so its bytes stay valid even past the socket.
#[derive(Debug)]
pub struct RxFrame {
    umem: Arc<Umem>,
    chunk: u64,
    addr: u64,
    len: u32,
}

impl std::ops::Deref for RxFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `addr..addr + len` lies inside one receive frame of the UMEM (checked by
        // `recv_frame`), kept mapped by `umem`; the kernel filled it and does not write it
        // again until `release` puts it back into the fill ring, which consumes this frame.
        unsafe {
            std::slice::from_raw_parts(
                self.umem.ptr.as_ptr().add(self.addr as usize),
                self.len as usize,
            )
        }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `Umem::new`; nothing borrows it past self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Umem {
    fn new(len: usize) -> io::Result<Umem> {
        // SAFETY: a fresh private anonymous mapping chosen by the kernel.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr as *mut u8).ok_or(io::ErrorKind::Other)?;
        Ok(Umem { ptr, len })
    }
}

// SAFETY: every part of the socket is owned by it alone and used through `&mut self`.
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// An AF_XDP socket on queue `queue` of interface `ifindex`: zero-copy if the driver
    /// supports it, else copy mode.
    ///
    /// # Errors
    /// The system call that failed: `socket` (EAFNOSUPPORT: no AF_XDP in this kernel;
    /// EPERM: not root/CAP_NET_RAW), the UMEM registration, the rings, or `bind` (ENODEV,
    /// EINVAL for a queue the interface lacks, EBUSY when another socket has the queue).
    pub fn open(ifindex: u32, queue: u32, geometry: Geometry) -> io::Result<XskSocket> {
        match Self::open_mode(ifindex, queue, geometry, libc::XDP_ZEROCOPY) {
            Ok(socket) => Ok(socket),
            // Copy mode for drivers without zero-copy support (EOPNOTSUPP) or where the
            // attempt is refused otherwise: the same rings, the kernel copies frames.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                Self::open_mode(ifindex, queue, geometry, libc::XDP_COPY)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens, registers, maps and binds in `mode` (`XDP_ZEROCOPY` or `XDP_COPY`).
    // Long function: the fixed sequence of setup calls the kernel requires, in order.
    fn open_mode(ifindex: u32, queue: u32, geometry: Geometry, mode: u16) -> io::Result<XskSocket> {
        let Geometry {
            frame_bytes,
            rx_frames,
            tx_frames,
        } = geometry;
        if !rx_frames.is_power_of_two() || !tx_frames.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring sizes must be powers of two",
            ));
        }
        // The kernel's aligned mode wants it too; the socket finds a frame's start by mask.
        if !frame_bytes.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame size must be a power of two",
            ));
        }
        // SAFETY: plain socket creation; the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let frames = rx_frames + tx_frames;
        let umem = Umem::new(frames as usize * frame_bytes as usize)?;
        let registration = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: frame_bytes,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        set_option(&fd, libc::XDP_UMEM_REG, &registration)?;
        set_option(&fd, libc::XDP_UMEM_FILL_RING, &rx_frames)?;
        set_option(&fd, libc::XDP_UMEM_COMPLETION_RING, &tx_frames)?;
        set_option(&fd, libc::XDP_RX_RING, &rx_frames)?;
        set_option(&fd, libc::XDP_TX_RING, &tx_frames)?;
        let offsets = mmap_offsets(&fd)?;
        let mut fill: Ring<u64> =
            Ring::map(&fd, libc::XDP_UMEM_PGOFF_FILL_RING, rx_frames, &offsets.fr)?;
        let completion = Ring::map(
            &fd,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            tx_frames,
            &offsets.cr,
        )?;
        let rx = Ring::map(&fd, libc::XDP_PGOFF_RX_RING as u64, rx_frames, &offsets.rx)?;
        let tx = Ring::map(&fd, libc::XDP_PGOFF_TX_RING as u64, tx_frames, &offsets.tx)?;
        // The receive pool: every receive frame lent to the kernel.
        for frame in 0..rx_frames {
            fill.push(u64::from(frame) * u64::from(frame_bytes));
        }
        fill.publish();
        let address = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: mode | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `address` is a valid sockaddr_xdp of the size given.
        let bound = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&address as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if bound != 0 {
            return Err(io::Error::last_os_error());
        }
        let free_tx = (rx_frames..frames)
            .map(|frame| u64::from(frame) * u64::from(frame_bytes))
            .collect();
        Ok(XskSocket {
            fill,
            completion,
            rx,
            tx,
            fd,
            umem: Arc::new(umem),
            geometry,
            free_tx,
            refill: Vec::with_capacity(FILL_BATCH as usize),
            refill_batch: FILL_BATCH.min(rx_frames / 2).max(1) as usize,
            unflushed: 0,
            zero_copy: mode == libc::XDP_ZEROCOPY,
        })
    }

    /// Whether the driver moves frames in place (zero-copy) rather than copying them.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The sizes it was opened with.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Takes the next received frame, or None when nothing has arrived. The frame stays
    /// out of the kernel's reach (not in the fill ring) until it is given back with
    /// [`XskSocket::release`]; its bytes are read in place, where the driver (or, in copy
    /// mode, the kernel) put them: the UMEM's receive half is the receive pool.
    // Inline: the look at the receive ring runs once or twice per poll of a busy-polling
    // receiver; across the crate boundary it was three calls deep.
    #[inline]
    pub fn recv_frame(&mut self) -> Option<RxFrame> {
        loop {
            // Nothing to hand back here: released frames go back in batches (`release`).
            if self.rx.ready() == 0 {
                return None;
            }
            let desc = self.rx.take();
            // In aligned mode the address may point past the frame's start (headroom):
            // the frame is the chunk the address lies in (frames are a power of two long).
            let frame_bytes = u64::from(self.geometry.frame_bytes);
            let chunk = desc.addr & !(frame_bytes - 1);
            if chunk < self.rx_pool_bytes()
                && desc.addr + u64::from(desc.len) <= chunk + frame_bytes
            {
                return Some(RxFrame {
                    umem: Arc::clone(&self.umem),
                    chunk,
                    addr: desc.addr,
                    len: desc.len,
                });
            }
            self.skip_outside(chunk);
        }
    }

    /// A descriptor outside the receive pool (a kernel bug) is skipped, not followed; its
    /// frame, if it is one of the pool's, goes back.
    #[cold]
    fn skip_outside(&mut self, chunk: u64) {
        if chunk < self.rx_pool_bytes() {
            self.give_back(chunk);
        }
    }

    /// Gives a frame from [`XskSocket::recv_frame`] back to the kernel, in batches of 64
    /// (fewer with fewer than 128 receive frames), its receive ring slot with them. A
    /// frame of another socket is ignored.
    #[inline]
    pub fn release(&mut self, frame: RxFrame) {
        if !Arc::ptr_eq(&frame.umem, &self.umem) {
            return;
        }
        self.give_back(frame.chunk);
    }

    /// Gathers receive frame `chunk` for the fill ring; a full batch goes back.
    #[inline]
    fn give_back(&mut self, chunk: u64) {
        self.refill.push(chunk);
        if self.refill.len() >= self.refill_batch {
            self.refill_now();
        }
    }

    /// Takes the next received frame, hands its bytes to `read`, gives the frame back and
    /// returns what `read` returned; None when nothing has arrived.
    pub fn recv_with<R>(&mut self, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let frame = self.recv_frame()?;
        let result = read(&frame);
        self.release(frame);
        Some(result)
    }

    /// Bytes of the UMEM's receive half (frames below are receive frames).
    #[inline]
    fn rx_pool_bytes(&self) -> u64 {
        u64::from(self.geometry.rx_frames) * u64::from(self.geometry.frame_bytes)
    }

    /// Gives the receive ring's slots taken so far back to the kernel, and the frames
    /// released so far to the fill ring, waking the driver if it asks.
    fn refill_now(&mut self) {
        self.rx.release();
        if self.refill.is_empty() {
            return;
        }
        let n = self.fill.free(self.refill.len() as u32) as usize;
        // The fill ring has a slot for every receive frame, so all fit.
        for frame in self.refill.drain(..n.min(self.refill.len())) {
            self.fill.push(frame);
        }
        self.fill.publish();
        if self.fill.needs_wakeup() {
            // SAFETY: a zero-length non-blocking receive on our own socket, no buffer.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// Queues one frame for sending: `write` fills the frame's bytes (all
    /// `frame_bytes`) and returns its length. Returns false, without calling `write`, when
    /// no transmit frame is free even after the kernel returned what it sent (the frame is
    /// lost, like a full socket buffer's datagram). Sent by [`XskSocket::flush`].
    // Inline: once per datagram, into the link's framing.
    #[inline]
    pub fn send_with(&mut self, write: impl FnOnce(&mut [u8]) -> usize) -> bool {
        if self.free_tx.is_empty() {
            self.reclaim();
            if self.free_tx.is_empty() {
                self.flush();
                self.reclaim();
            }
        }
        if self.tx.free(1) == 0 {
            self.flush();
            if self.tx.free(1) == 0 {
                return false;
            }
        }
        let Some(addr) = self.free_tx.pop() else {
            return false;
        };
        let frame_bytes = self.geometry.frame_bytes as usize;
        // SAFETY: `addr` is the start of a transmit frame inside the UMEM that is free (not
        // in the transmit ring, returned by the completion ring), so nobody else reads or
        // writes it; the slice lives only during `write`.
        let frame = unsafe {
            std::slice::from_raw_parts_mut(self.umem.ptr.as_ptr().add(addr as usize), frame_bytes)
        };
        let len = write(frame).min(frame_bytes);
        self.tx.push(libc::xdp_desc {
            addr,
            len: len as u32,
            options: 0,
        });
        self.unflushed += 1;
        true
    }

    /// Publishes the frames queued since the last flush and starts their transmission:
    /// `sendto` when the kernel asks for a wake-up (copy mode always does, and sends at
    /// most 32 frames per call, so the call repeats while it says "again"). A device queue
    /// that stays full leaves frames in the ring for the next flush.
    // Inline: most flushes of a poll find nothing queued and return at the first check.
    #[inline]
    pub fn flush(&mut self) {
        if self.unflushed == 0 && self.tx.free(self.geometry.tx_frames) == self.geometry.tx_frames {
            return;
        }
        self.flush_queued();
    }

    /// [`XskSocket::flush`] with frames queued or still in the transmit ring.
    #[inline(never)]
    fn flush_queued(&mut self) {
        let all = self.geometry.tx_frames;
        self.tx.publish();
        self.unflushed = 0;
        for _ in 0..all / 32 + 2 {
            if !self.tx.needs_wakeup() && self.zero_copy {
                break;
            }
            // The system call itself, not libc's `sendto`: that one is a cancellation point
            // (two calls around the system call per kick), which nothing here uses.
            // SAFETY: a zero-length non-blocking send on our own socket, no buffer.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_sendto,
                    self.fd.as_raw_fd(),
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                    libc::MSG_DONTWAIT,
                    std::ptr::null::<libc::sockaddr>(),
                    0 as libc::socklen_t,
                )
            };
            let again = ret < 0
                && matches!(
                    io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
                );
            self.reclaim();
            if self.tx.free(all) == all || (ret < 0 && !again) {
                break;
            }
        }
    }

    /// Whether frames wait in the transmit ring (a flush left them: the device was busy).
    pub fn tx_pending(&mut self) -> bool {
        let all = self.geometry.tx_frames;
        self.unflushed > 0 || self.tx.free(all) != all
    }

    /// Takes the transmit frames the kernel is done with back from the completion ring.
    // Inline: into the flush after every kick (one completion in a ping-pong).
    #[inline]
    fn reclaim(&mut self) {
        let ready = self.completion.ready();
        if ready == 0 {
            return;
        }
        let frame_bytes = u64::from(self.geometry.frame_bytes);
        let first_tx = u64::from(self.geometry.rx_frames) * frame_bytes;
        for _ in 0..ready {
            let addr = self.completion.take();
            let chunk = addr & !(frame_bytes - 1);
            if chunk >= first_tx && chunk + frame_bytes <= self.umem.len as u64 {
                self.free_tx.push(chunk);
            }
        }
        self.completion.release();
    }

    /// The kernel's counters for this socket.
    ///
    /// # Errors
    /// getsockopt's.
    pub fn statistics(&self) -> io::Result<libc::xdp_statistics> {
        // SAFETY: xdp_statistics is plain integers; all zeros is valid.
        let mut stats: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `stats` is writable for `len` bytes; the kernel writes at most that.
        let ret = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut stats as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stats)
    }
}

impl AsRawFd for XskSocket {
    /// Readable (poll) when the receive ring holds frames.
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn set_option<T>(fd: &OwnedFd, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size given; the kernel only reads it.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            option,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn mmap_offsets(fd: &OwnedFd) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: plain integers; all zeros is valid.
    let mut offsets: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: `offsets` is writable for `len` bytes; the kernel writes at most that.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut offsets as *mut libc::xdp_mmap_offsets).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::xdp_mmap_offsets>() {
        // Kernels before 5.4 lack the flags field (and need-wakeup).
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kernel's AF_XDP lacks need-wakeup (Linux 5.4 or later is needed)",
        ));
    }
    Ok(offsets)
}
