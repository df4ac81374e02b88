//! [`UringUdpSocket`]: a bound UDP socket whose sends and receives go through one io_uring.
//!
//! - Sends: [`UringUdpSocket::send`] copies the datagram into the transmit arena (a
//!   registered buffer); consecutive datagrams of one size to one peer form a GSO run
//!   (`UDP_SEGMENT`), sent with one `IORING_OP_SENDMSG`, as the socket path's `sendmmsg`
//!   does; a lone datagram is one `IORING_OP_SEND` with the destination address
//!   (`IORING_OP_SEND_ZC` from the registered buffer at [`ZERO_COPY_MIN_BYTES`] or more); [`UringUdpSocket::flush`] submits everything queued
//!   with one `io_uring_enter` (with SQPOLL, none unless the kernel's thread went idle).
//! - Receives: one multishot `IORING_OP_RECVMSG` takes every datagram into a buffer of the
//!   provided ring and posts a completion; [`UringUdpSocket::recv_next`] reads completions
//!   from the shared completion queue (no system call) and returns the datagram where it
//!   lies. The receive is armed again when the kernel ends it (buffers ran out, an error).
//! - Waiting: the ring's descriptor ([`UringUdpSocket::wait_fd`]) is readable while
//!   completions wait: sleep on it, not on the socket (the multishot receive empties the
//!   socket by itself).
//!
//! Layer: quiver-transport, the io_uring socket.

use std::collections::VecDeque;
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::arena::{SendRecord, SendState, TxArena};
use super::buffers::{ProvidedBuffers, RxBuffer};
use crate::udp::address::{read_socket_address, write_socket_address};
use crate::udp::options::UDP_SEGMENT;
use crate::udp::{max_gso_bytes, UdpSocket, MAX_GSO_SEGMENTS};

/// The user data of the multishot receive's completions (sends carry their record index).
const RECV_TAG: u64 = u64::MAX;
/// The provided buffer group of the receive.
const BUFFER_GROUP: u16 = 0;
/// Submission entries: a flush of more sends submits in several calls.
const SQ_ENTRIES: u32 = 256;
/// Completion entries: room for a burst of received datagrams and the sends' completions.
const CQ_ENTRIES: u32 = 4096;
/// The transmit arena and how many sends may be in flight.
const TX_ARENA_BYTES: usize = 4 << 20;
const TX_RECORDS: usize = 2048;
/// Datagrams at least this long leave from the registered buffer without a copy into the
/// kernel's socket buffer (`IORING_OP_SEND_ZC`), where the device supports it; on loopback
/// and veth the kernel copies anyway and says so ([`UringStats::zero_copy_copied`]).
pub const ZERO_COPY_MIN_BYTES: usize = 16 << 10;
/// Room for the sender's address at the front of every received buffer (`sockaddr_in6`).
const NAME_BYTES: usize = size_of::<libc::sockaddr_in6>();
/// The header the kernel writes before the name in a multishot receive's buffer.
const RECVMSG_OUT_BYTES: usize = 16;
/// The notification of a zero-copy send says the kernel copied after all
/// (`IORING_NOTIF_USAGE_ZC_COPIED`).
const NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;
/// How the kernel thread of SQPOLL waits for submissions before it sleeps.
const SQPOLL_IDLE_MS: u32 = 20;

/// What the io_uring socket is asked to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UringOptions {
    /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`): no system call
    /// per flush, and receive completions posted by that thread, at the price of a CPU
    /// spinning while traffic flows.
    pub sqpoll: bool,
    /// Receive buffers (a power of two, at most 32768).
    pub rx_buffers: u16,
    /// The largest datagram a receive buffer takes (a longer one arrives truncated).
    pub rx_datagram_bytes: usize,
}

impl Default for UringOptions {
    fn default() -> UringOptions {
        UringOptions {
            sqpoll: false,
            rx_buffers: 128,
            rx_datagram_bytes: 65_536,
        }
    }
}

/// Why io_uring cannot drive a socket here: the step that failed and the kernel's answer,
/// with what it most likely means.
#[derive(Debug, thiserror::Error)]
#[error("io_uring {step} failed: {error} ({})", hint(.error))]
pub struct UringUnavailable {
    /// What was being set up.
    pub step: &'static str,
    /// The kernel's error.
    pub error: io::Error,
}

fn hint(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no io_uring (before Linux 5.1, or built without it)",
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "io_uring is refused to this process: sysctl kernel.io_uring_disabled is 2 (or 1 and \
             the user is not in kernel.io_uring_group), or a seccomp profile forbids it \
             (Docker's default does)"
        }
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
            "this kernel lacks a feature the engine needs: provided buffer rings (Linux 5.19) \
             and multishot recvmsg (Linux 6.0)"
        }
        Some(libc::ENOMEM) => "not enough lockable memory: raise ulimit -l",
        _ => "unexpected",
    }
}

fn unavailable(step: &'static str) -> impl FnOnce(io::Error) -> UringUnavailable {
    move |error| UringUnavailable { step, error }
}

/// Counters of one io_uring socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UringStats {
    /// Submissions made (`io_uring_enter` calls, or with SQPOLL the wake-ups asked for).
    pub submits: u64,
    /// Datagrams queued for sending.
    pub sends: u64,
    /// Of them, sent with `IORING_OP_SEND_ZC` from the registered buffer.
    pub zero_copy_sends: u64,
    /// GSO sends (`IORING_OP_SENDMSG` with `UDP_SEGMENT`: several datagrams in one).
    pub gso_sends: u64,
    /// GSO sends the kernel refused (the first turns GSO off on this socket).
    pub gso_refusals: u64,
    /// Zero-copy sends the kernel copied after all (loopback, veth, most virtual NICs).
    pub zero_copy_copied: u64,
    /// Sends the kernel refused (the datagram is lost, as on a plain socket).
    pub send_errors: u64,
    /// Of them, refused because their datagrams no longer fit the path to their
    /// destination (its MTU fell): the caller cuts smaller ones
    /// ([`UringUdpSocket::take_path_room`]); GSO stays on.
    pub size_refusals: u64,
    /// Datagrams dropped because the transmit arena stayed full.
    pub send_dropped: u64,
    /// Datagrams received.
    pub received: u64,
    /// Of them, truncated (longer than a receive buffer).
    pub truncated: u64,
    /// Times the multishot receive was armed (once at setup, again after it ended).
    pub receive_arms: u64,
    /// Of its ends, those for want of a buffer.
    pub buffer_shortages: u64,
    /// Times a look entered the kernel to run the completions pending for this task.
    pub task_runs: u64,
    /// SQPOLL is on.
    pub sqpoll: bool,
    /// Large sends use the registered buffer (its registration succeeded).
    pub registered_buffer: bool,
}

/// One received datagram, in its buffer: `buffer[payload]` are its bytes.
#[derive(Debug)]
pub struct RxDatagram {
    /// The buffer (give it back with [`UringUdpSocket::release`]).
    pub buffer: RxBuffer,
    /// Where the datagram's bytes lie in it.
    pub payload: std::ops::Range<usize>,
    /// The sender.
    pub from: SocketAddr,
    /// Longer than a receive buffer: `payload` holds its beginning only.
    pub truncated: bool,
}

/// The send being built (see [`UringUdpSocket::send`]).
#[derive(Debug, Clone, Copy)]
struct Run {
    /// Its record in the arena.
    index: usize,
    to: SocketAddr,
    /// Its first datagram's size: later ones are as long, the last may be shorter.
    segment: usize,
    datagrams: usize,
    /// Another datagram may join (the last one was a whole segment).
    open: bool,
}

/// A UDP socket driven by io_uring (see the module doc).
///
/// Field order matters: the ring goes first, so that it is torn down (and the kernel stops
/// using the arena and the buffers) before they are freed.
pub struct UringUdpSocket {
    ring: IoUring,
    socket: UdpSocket,
    rx: ProvidedBuffers,
    /// The receive's message header: the kernel reads the name and control lengths from it.
    recv_msg: Box<libc::msghdr>,
    armed: bool,
    /// Receive completions read while reaping (result, flags), not yet returned.
    arrived: VecDeque<(i32, u32)>,
    tx: TxArena,
    /// Entries pushed since the last submission.
    queued: u32,
    /// The send being built: datagrams joining it go out as one GSO send at the flush.
    run: Option<Run>,
    /// GSO sends are to be used: the kernel takes `UDP_SEGMENT` and refused none yet.
    gso: bool,
    /// The room (datagram bytes) of the path whose MTU refused a send since
    /// [`UringUdpSocket::take_path_room`] was last called, and its destination.
    path_room: Option<(SocketAddr, usize)>,
    stats: UringStats,
}

impl std::fmt::Debug for UringUdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringUdpSocket")
            .field("ring_fd", &self.ring.as_raw_fd())
            .field("local", &self.socket.local_address())
            .field("armed", &self.armed)
            .field("in_flight", &self.tx.in_flight())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Drop for UringUdpSocket {
    /// Cancels what is in flight (the receive, sends not done yet; at most 100 ms) and lets
    /// go of the registered socket, so that the socket closes (and its port is free) when this
    /// returns: a ring is torn down asynchronously, and a request or a registration still
    /// holding the socket would keep the port bound past the process for a while.
    fn drop(&mut self) {
        let submitter = self.ring.submitter();
        let _ = submitter.register_sync_cancel(
            Some(types::Timespec::from(Duration::from_millis(100))),
            types::CancelBuilder::any().all(),
        );
        let _ = submitter.unregister_files();
    }
}

// SAFETY: the raw pointers in `recv_msg` are null (only its lengths are used); everything
// else is owned by the socket and used through `&mut self`.
unsafe impl Send for UringUdpSocket {}

impl UringUdpSocket {
    /// Binds a UDP socket to `address` and sets up its ring: registered socket and
    /// transmit arena, provided receive buffers, the multishot receive armed.
    ///
    /// # Errors
    /// [`UringUnavailable`] when a step is refused (no io_uring, refused by sysctl or
    /// seccomp, a kernel without multishot recvmsg); the bind's own error as such (step
    /// "bind").
    pub fn bind(address: SocketAddr, options: UringOptions) -> Result<Self, UringUnavailable> {
        let socket = UdpSocket::bind(address).map_err(unavailable("bind"))?;
        let mut builder = IoUring::builder();
        builder.setup_cqsize(CQ_ENTRIES).setup_clamp();
        if options.sqpoll {
            builder.setup_sqpoll(SQPOLL_IDLE_MS);
        } else {
            // Completions that need this task to run (a datagram the multishot receive takes
            // from the socket) wait until it enters the kernel, without an interrupt to make
            // it; the kernel raises a flag in the shared submission ring meanwhile, which
            // `recv_next` looks at: a busy poll enters the kernel only when there is something
            // to complete (without this, a busy poll that never enters saw its datagrams
            // hundreds of microseconds late). A task asleep on the ring is woken as usual.
            builder.setup_coop_taskrun().setup_taskrun_flag();
        }
        let ring = builder.build(SQ_ENTRIES).map_err(unavailable("setup"))?;
        ring.submitter()
            .register_files(&[socket.as_raw_fd()])
            .map_err(unavailable("file registration"))?;
        let buffer_bytes = RECVMSG_OUT_BYTES + NAME_BYTES + options.rx_datagram_bytes;
        let rx = ProvidedBuffers::new(options.rx_buffers, buffer_bytes)
            .map_err(unavailable("receive buffer allocation"))?;
        let (ring_address, entries) = rx.ring_address();
        // SAFETY: the ring's mapping lives in `rx`, which the socket owns and which is
        // dropped after `ring` (field order): the kernel's registration ends with the ring.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(ring_address, entries, BUFFER_GROUP, 0)
        }
        .map_err(unavailable("provided buffer ring registration"))?;
        let tx = TxArena::new(TX_ARENA_BYTES, TX_RECORDS);
        let iovec = libc::iovec {
            iov_base: tx.area.as_ptr() as *mut libc::c_void,
            iov_len: tx.area.len(),
        };
        // SAFETY: the arena is owned by the socket and dropped after the ring (field order);
        // its heap allocation never moves. Best effort: without it large sends copy.
        let registered_buffer = unsafe { ring.submitter().register_buffers(&[iovec]) }.is_ok();
        // SAFETY: msghdr is plain old data; all-zero is valid (null pointers, no iovecs).
        let mut recv_msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        recv_msg.msg_namelen = NAME_BYTES as libc::socklen_t;
        let gso = socket.gso_supported();
        let mut socket = UringUdpSocket {
            ring,
            socket,
            rx,
            recv_msg,
            armed: false,
            arrived: VecDeque::with_capacity(usize::from(options.rx_buffers)),
            tx,
            queued: 0,
            run: None,
            gso: false,
            path_room: None,
            stats: UringStats {
                sqpoll: options.sqpoll,
                registered_buffer,
                ..UringStats::default()
            },
        };
        socket.gso = gso;
        socket.arm();
        // A kernel without multishot recvmsg refuses it at once.
        socket.reap();
        if let Some(&(result, flags)) = socket.arrived.front() {
            if result < 0 && !cqueue::more(flags) {
                return Err(UringUnavailable {
                    step: "multishot receive",
                    error: io::Error::from_raw_os_error(-result),
                });
            }
        }
        Ok(socket)
    }

    /// The address the socket is bound to.
    pub fn local_address(&self) -> SocketAddr {
        self.socket.local_address()
    }

    /// The descriptor to sleep on: readable while completions wait.
    pub fn wait_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// The socket's counters.
    pub fn stats(&self) -> UringStats {
        self.stats
    }

    /// Queues one datagram (`header` then `payload`) to `to`; it leaves with the next
    /// [`UringUdpSocket::flush`]. A datagram as long as the one before it (to the same peer)
    /// joins that one's GSO run when the kernel supports it. When the arena stays full (sends
    /// not completing) the datagram is dropped and counted.
    pub fn send(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let len = header.len() + payload.len();
        self.stats.sends += 1;
        let start = match self.join_run(to, len) {
            Some(offset) => offset,
            None => {
                self.close_run();
                let index = match self.tx.alloc(len) {
                    Some(index) => index,
                    None => match self.wait_for_room(len) {
                        Some(index) => index,
                        None => {
                            self.stats.send_dropped += 1;
                            return;
                        }
                    },
                };
                let record = &mut self.tx.records[index];
                record.address_len = write_socket_address(&to, &mut record.address);
                record.to = Some(to);
                self.run = Some(Run {
                    index,
                    to,
                    segment: len,
                    datagrams: 1,
                    open: len > 0,
                });
                record.start
            }
        };
        self.tx.area[start..start + header.len()].copy_from_slice(header);
        self.tx.area[start + header.len()..start + len].copy_from_slice(payload);
    }

    /// Where a datagram of `len` bytes to `to` goes when it joins the open run: as long as
    /// the run's segments (or shorter, which ends the run), within the kernel's limits of
    /// a GSO send, right after the run's bytes in the arena.
    fn join_run(&mut self, to: SocketAddr, len: usize) -> Option<usize> {
        let run = self.run.as_mut()?;
        if !self.gso
            || run.to != to
            || !run.open
            || len > run.segment
            || run.datagrams >= MAX_GSO_SEGMENTS
            || u16::try_from(run.segment).is_err()
        {
            return None;
        }
        let record = &self.tx.records[run.index];
        if record.end - record.start + len > max_gso_bytes(run.segment, to.is_ipv6()) {
            return None;
        }
        let offset = self.tx.extend_newest(run.index, len)?;
        run.datagrams += 1;
        run.open = len == run.segment;
        Some(offset)
    }

    /// Queues the open run's submission entry: one datagram as a send (zero-copy from the
    /// registered buffer when large), several as one GSO `sendmsg`.
    fn close_run(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let record = &mut self.tx.records[run.index];
        let len = record.end - record.start;
        // SAFETY: `record.start + len` lies inside the arena (the allocation's bounds).
        let bytes = unsafe { self.tx.area.as_ptr().add(record.start) };
        let address = &record.address as *const libc::sockaddr_storage as *const libc::sockaddr;
        let target = types::Fixed(0);
        let entry = if run.datagrams > 1 {
            record.segments = run.datagrams;
            record.segment = run.segment;
            record.iov = libc::iovec {
                iov_base: bytes as *mut libc::c_void,
                iov_len: len,
            };
            record.msg.msg_name = &mut record.address as *mut _ as *mut libc::c_void;
            record.msg.msg_namelen = record.address_len;
            record.msg.msg_iov = &mut record.iov;
            record.msg.msg_iovlen = 1;
            record.msg.msg_control = record.control.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: CMSG_SPACE is a pure computation.
            record.msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
            record.msg.msg_flags = 0;
            // SAFETY: msg_control points at the record's 32-byte, u64-aligned control
            // buffer, larger than CMSG_SPACE(2) = 24, so the first header and its u16 fit.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&record.msg);
                (*cmsg).cmsg_level = libc::SOL_UDP;
                (*cmsg).cmsg_type = UDP_SEGMENT;
                (*cmsg).cmsg_len = libc::CMSG_LEN(2) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, run.segment as u16);
            }
            self.stats.gso_sends += 1;
            opcode::SendMsg::new(target, &record.msg).build()
        } else if self.stats.registered_buffer && len >= ZERO_COPY_MIN_BYTES {
            self.stats.zero_copy_sends += 1;
            opcode::SendZc::new(target, bytes, len as u32)
                .buf_index(Some(0))
                .dest_addr(address)
                .dest_addr_len(record.address_len)
                .build()
        } else {
            opcode::Send::new(target, bytes, len as u32)
                .dest_addr(address)
                .dest_addr_len(record.address_len)
                .build()
        };
        self.push(entry.user_data(run.index as u64));
    }

    /// Submits what was queued.
    pub fn flush(&mut self) {
        self.close_run();
        if self.queued == 0 {
            return;
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // The completion queue is full (EBUSY) or the kernel is short of memory
                // (EAGAIN): make room, try once more, else leave the entries for the next
                // flush.
                Err(_) => {
                    self.reap();
                    let _ = self.ring.submit();
                    break;
                }
            }
        }
        self.stats.submits += 1;
        self.queued = 0;
    }

    /// The next datagram received, read in its buffer (give the buffer back with
    /// [`UringUdpSocket::release`]); None when none waits. Costs no system call while the
    /// receive stays armed.
    pub fn recv_next(&mut self) -> Option<RxDatagram> {
        loop {
            let Some((result, flags)) = self.arrived.pop_front() else {
                self.reap();
                if self.arrived.is_empty() && self.ring.submission().taskrun() {
                    // Work is pending for this task (see `bind`): run it, then look again.
                    let _ = self.ring.submit();
                    self.stats.task_runs += 1;
                    self.reap();
                }
                if self.arrived.is_empty() {
                    if !self.armed {
                        self.arm();
                    }
                    return None;
                }
                continue;
            };
            if !cqueue::more(flags) {
                self.armed = false;
                if result == -libc::ENOBUFS {
                    self.stats.buffer_shortages += 1;
                }
            }
            let Some(id) = cqueue::buffer_select(flags) else {
                continue;
            };
            let Some(buffer) = usize::try_from(result)
                .ok()
                .and_then(|len| self.rx.take(id, len))
            else {
                continue;
            };
            match parse(&buffer, &self.recv_msg) {
                Some((payload, from, truncated)) => {
                    self.stats.received += 1;
                    self.stats.truncated += u64::from(truncated);
                    return Some(RxDatagram {
                        buffer,
                        payload,
                        from,
                        truncated,
                    });
                }
                None => self.release(buffer),
            }
        }
    }

    /// Gives a received datagram's buffer back to the kernel.
    pub fn release(&mut self, buffer: RxBuffer) {
        self.rx.provide(buffer);
    }

    /// Pushes one submission entry, submitting first when the queue is full.
    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every entry this socket builds points only at memory it owns and keeps
            // until the entry's completion: the arena's bytes and the record's address (sends),
            // or `recv_msg` (the receive); the fixed file is the socket, registered for the
            // ring's life.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.queued += 1;
                return;
            }
            self.flush();
        }
    }

    /// Arms the multishot receive (when a buffer is there to receive into).
    fn arm(&mut self) {
        if self.rx.with_kernel == 0 {
            return;
        }
        let entry = opcode::RecvMsgMulti::new(types::Fixed(0), &*self.recv_msg, BUFFER_GROUP)
            .build()
            .user_data(RECV_TAG);
        self.push(entry);
        self.flush();
        self.armed = true;
        self.stats.receive_arms += 1;
    }

    /// The room (largest datagram, bytes) of the path to `to` if its MTU refused a send
    /// since the last call (None otherwise, or when the refusal was for another
    /// destination, which stays noted), for the caller to cut smaller datagrams from now on.
    pub fn take_path_room(&mut self, to: SocketAddr) -> Option<usize> {
        match self.path_room {
            Some((refused, room)) if refused == to => {
                self.path_room = None;
                Some(room)
            }
            _ => None,
        }
    }

    /// Reads every completion: sends free their records, receives wait in `arrived`.
    fn reap(&mut self) {
        let UringUdpSocket {
            ring,
            socket,
            tx,
            arrived,
            stats,
            gso,
            path_room,
            ..
        } = self;
        for cqe in ring.completion() {
            let (result, flags) = (cqe.result(), cqe.flags());
            if cqe.user_data() == RECV_TAG {
                arrived.push_back((result, flags));
                continue;
            }
            let index = cqe.user_data() as usize;
            if cqueue::notif(flags) {
                stats.zero_copy_copied += u64::from(result as u32 & NOTIF_USAGE_ZC_COPIED != 0);
                tx.set_state(index, SendState::Done);
                continue;
            }
            stats.send_errors += u64::from(result < 0);
            if (result == -libc::EMSGSIZE || result == -libc::EINVAL)
                && tx.is_live(index)
                && too_big_for_path(socket, &tx.records[index], path_room)
            {
                // The path's MTU fell below these datagrams (the kernel does not fragment
                // GSO segments): lost like any other, and cut smaller from now on.
                stats.size_refusals += 1;
            } else if (result == -libc::EIO || result == -libc::EINVAL)
                && tx.is_live(index)
                && tx.records[index].segments > 1
                && *gso
            {
                *gso = false;
                stats.gso_refusals += 1;
            }
            let state = if cqueue::more(flags) {
                SendState::AwaitingNotification
            } else {
                SendState::Done
            };
            tx.set_state(index, state);
        }
    }

    /// Submits, reaps and waits (a few milliseconds at most) until `len` bytes and a record
    /// are free in the arena.
    fn wait_for_room(&mut self, len: usize) -> Option<usize> {
        for _ in 0..4 {
            self.flush();
            self.reap();
            if let Some(index) = self.tx.alloc(len) {
                return Some(index);
            }
            let timeout = types::Timespec::from(Duration::from_millis(2));
            let args = types::SubmitArgs::new().timespec(&timeout);
            let _ = self.ring.submitter().submit_with_args(1, &args);
        }
        self.reap();
        self.tx.alloc(len)
    }
}

/// A multishot receive's buffer: the payload's place, the sender, whether it was cut.
fn parse(buffer: &[u8], msg: &libc::msghdr) -> Option<(std::ops::Range<usize>, SocketAddr, bool)> {
    let out = types::RecvMsgOut::parse(buffer, msg).ok()?;
    let name = out.name_data();
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = name.len().min(size_of::<libc::sockaddr_storage>());
    // SAFETY: `n` bytes fit both the name and the storage; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            &mut storage as *mut libc::sockaddr_storage as *mut u8,
            n,
        )
    };
    let from = read_socket_address(&storage, n as libc::socklen_t)?;
    let payload = out.payload_data();
    let start = payload.as_ptr() as usize - buffer.as_ptr() as usize;
    Some((
        start..start + payload.len(),
        from,
        out.is_payload_truncated(),
    ))
}

/// Whether the refused send `record` carried datagrams larger than the path to its
/// destination now takes (the kernel's path MTU); if so, notes the room in `path_room`
/// (the smallest if several paths to one destination refused).
#[cold]
fn too_big_for_path(
    socket: &UdpSocket,
    record: &SendRecord,
    path_room: &mut Option<(SocketAddr, usize)>,
) -> bool {
    let Some(to) = record.to else {
        return false;
    };
    let Ok(room) = socket.path_room(to) else {
        return false;
    };
    if record.segment <= room {
        return false;
    }
    *path_room = Some(match *path_room {
        Some((noted, smaller)) if noted == to => (to, smaller.min(room)),
        _ => (to, room),
    });
    true
}
