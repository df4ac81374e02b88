//! One own link of the xdp transport: an AF_XDP socket on queue 0 of the link's interface,
//! quiver's XDP program on that interface (steering UDP to the link's address and port to
//! the socket), and what framing needs (the interface's hardware address and MTU, the
//! neighbours' hardware addresses). The datagram engine drives it like a udp socket:
//! [`XdpLink::send`] queues a datagram, [`XdpLink::flush`] sends what is queued with one
//! system call, [`XdpLink::recv`] takes one datagram.
//!
//! Hardware addresses come from the kernel's neighbour table. quiver's frames bypass the
//! kernel, so they never make it resolve one: for a peer not yet in the table, the link
//! sends an empty UDP datagram to the peer's discard port (9) through an ordinary kernel
//! socket (ARP follows; the peer's program passes ARP and port 9 to its kernel) and reads
//! the table again, waiting at most [`RESOLVE_WAIT`] per attempt; a datagram whose peer
//! cannot be resolved yet is dropped and counted, and the protocol sends it again.
//!
//! The same kernel socket, bound to the link's address and port, keeps the port from other
//! users of this namespace. On an interface with several receive queues (a real NIC's
//! receive-side scaling), quiver's socket is bound to queue 0 only and the program passes
//! frames of the other queues to the kernel: they reach this kernel socket, which the link
//! then reads too (after the AF_XDP ring, one `recvfrom` per poll), so a flow hashed to
//! another queue still works, through the kernel. The link's descriptor is then an epoll
//! set of both. A one-queue interface (veth) skips all that.
//!
//! Layer: the xdp transport, below the datagram engine; no `unsafe` (the AF_XDP socket and
//! the program are `quiver_transport::xdp`'s).

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use quiver_transport::udp::ReadinessSet;
use quiver_transport::xdp::bpf::{AttachMode, BpfError, XdpProgram};
use quiver_transport::xdp::interface::{InterfaceInfo, MacAddress};
use quiver_transport::xdp::program::HEADERS_LEN;
use quiver_transport::xdp::socket::{Geometry, RxFrame, XskSocket};

use super::frame::{parse, Ends, HeaderTemplate, Refusal};
use crate::error::{Error, Result};

/// How long one attempt at resolving a neighbour's hardware address waits.
const RESOLVE_WAIT: Duration = Duration::from_millis(50);
/// Interval between two resolution attempts for the same neighbour.
const RESOLVE_RETRY: Duration = Duration::from_millis(200);
/// Neighbours remembered at most (the table is cleared beyond: a job's peers fit).
const MAX_NEIGHBOURS: usize = 4096;
/// The discard port a resolution probe goes to.
const DISCARD_PORT: u16 = 9;
/// How long a bind waits for an interface's queue or hook that another socket or program
/// (just closed) still holds.
const BUSY_WAIT: Duration = Duration::from_secs(1);
/// The AF_XDP queue: quiver binds queue 0 (the only one of a default veth).
const QUEUE: u32 = 0;

/// Counters and modes of one xdp link (`LinkStats::xdp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpLinkStats {
    /// The XDP program runs in the driver (native), not on the generic hook.
    pub native: bool,
    /// The AF_XDP socket moves frames in place (zero-copy), not in copy mode.
    pub zero_copy: bool,
    /// Frames queued for sending.
    pub frames_sent: u64,
    /// Frames received and handed to the engine.
    pub frames_received: u64,
    /// Frames that reached the socket but were not a well-formed IPv4/UDP packet to this
    /// link (refused, dropped).
    pub frames_refused: u64,
    /// Datagrams dropped because the peer's hardware address was not known yet, or no
    /// transmit frame was free.
    pub send_dropped: u64,
    /// Datagrams that came through the kernel instead (an interface with several receive
    /// queues: those of the queues without quiver's socket).
    pub kernel_received: u64,
    /// Times the interface's MTU was found changed (the link's largest datagram follows
    /// it; the engine lowers its connections' datagram sizes to match).
    pub mtu_changes: u64,
}

/// A datagram [`XdpLink::recv_next`] took.
#[derive(Debug)]
pub(crate) enum Arrival {
    /// In its UMEM frame, at `datagram` (give the frame back with [`XdpLink::release`]).
    InFrame {
        frame: RxFrame,
        datagram: std::ops::Range<usize>,
        from: SocketAddr,
    },
    /// Copied into the caller's buffer, this long (the kernel path).
    InBuffer { len: usize, from: SocketAddr },
}

/// One own link of the xdp transport.
#[derive(Debug)]
pub(crate) struct XdpLink {
    // The socket goes first (the program's map holds a reference to it anyway).
    socket: XskSocket,
    program: XdpProgram,
    interface: InterfaceInfo,
    local: SocketAddrV4,
    /// Holds the port and sends the neighbour probes (see the module doc).
    kernel_socket: UdpSocket,
    /// Several receive queues: the kernel socket is read too, and this set of it and the
    /// AF_XDP socket is the link's descriptor.
    kernel_path: Option<ReadinessSet>,
    neighbours: HashMap<Ipv4Addr, MacAddress>,
    /// The headers of the frames to the last destination sent to (its neighbour is one
    /// of `neighbours`).
    last_template: Option<HeaderTemplate>,
    /// Neighbours being resolved: when the last probe went.
    probed: HashMap<Ipv4Addr, Instant>,
    max_datagram: usize,
    /// When the interface's MTU was last read ([`MTU_CHECK_INTERVAL`]), on the clock of
    /// [`XdpLink::follow_mtu_at`]'s caller.
    mtu_checked_ns: u64,
    next_id: u16,
    stats: XdpLinkStats,
}

/// How often a link reads its interface's MTU again (after a flush that sent data): well within the time a
/// connection whose datagrams a lowered MTU drops takes to give up on its peer.
const MTU_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The largest datagram a frame of `frame_bytes` on an interface of `mtu` carries.
fn max_datagram_for(frame_bytes: usize, mtu: u32) -> usize {
    let frame_room = frame_bytes - HEADERS_LEN;
    let mtu_room = (mtu as usize).saturating_sub(HEADERS_LEN - 14);
    frame_room.min(mtu_room)
}

impl XdpLink {
    /// The link at `address` (IPv4) on `interface` (None: the interface holding the
    /// address), in the calling thread's network namespace.
    ///
    /// # Errors
    /// [`Error::Config`] for an IPv6 or loopback address or an unknown interface;
    /// [`Error::PermissionDenied`] without root; [`Error::TransportUnavailable`] when the
    /// kernel lacks AF_XDP or the interface has another XDP program; [`Error::Io`] (the
    /// port taken: see [`Error::bind`]).
    pub(crate) fn bind(address: SocketAddr, interface: Option<&str>) -> Result<XdpLink> {
        let SocketAddr::V4(local) = address else {
            return Err(Error::Config(format!(
                "xdp link {address}: the xdp transport carries IPv4 only (give this rank an IPv4 address)"
            )));
        };
        if local.ip().is_loopback() || local.ip().is_unspecified() {
            return Err(Error::Config(format!(
                "xdp link {address}: the xdp transport needs the address of a network interface, not {} (ranks on one node use shm; give each rank its interface's address)",
                local.ip()
            )));
        }
        let kernel_socket = UdpSocket::bind(local).map_err(|e| Error::bind("xdp", address, e))?;
        let local = match kernel_socket.local_addr() {
            Ok(SocketAddr::V4(bound)) => bound,
            _ => local,
        };
        let info = InterfaceInfo::open(interface, *local.ip()).map_err(|e| {
            Error::Config(format!(
                "xdp link {local}: {e} (QUIVER_XDP_IFACE names the interface of each link; by default it is the one holding the link's address)"
            ))
        })?;
        let what = format!("opening an AF_XDP socket on {} for {local}", info.name);
        let socket = busy_retry(
            || XskSocket::open(info.index, QUEUE, Geometry::default()),
            |e| e.raw_os_error(),
        )
        .map_err(|e| xsk_error(what, e))?;
        let program = busy_retry(
            || XdpProgram::attach(info.index, *local.ip(), local.port()),
            BpfError::os_error,
        )
        .map_err(|e| program_error(&info.name, e))?;
        program
            .insert(QUEUE, socket.as_raw_fd())
            .map_err(|e| program_error(&info.name, e))?;
        let kernel_path = if info.rx_queues > 1 {
            let mut set = ReadinessSet::new()
                .map_err(|e| Error::io("creating the epoll set of an xdp link", e))?;
            kernel_socket
                .set_nonblocking(true)
                .map_err(|e| Error::io("making the xdp link's kernel socket non-blocking", e))?;
            for fd in [socket.as_raw_fd(), kernel_socket.as_raw_fd()] {
                set.add(fd)
                    .map_err(|e| Error::io("adding to the epoll set of an xdp link", e))?;
            }
            Some(set)
        } else {
            None
        };
        let max_datagram = max_datagram_for(socket.geometry().frame_bytes as usize, info.mtu);
        tracing::debug!(
            target: "quiver::xdp",
            "xdp link {local} on {} (index {}, mtu {}, {} rx queues): program {:?}, {}",
            info.name,
            info.index,
            info.mtu,
            info.rx_queues,
            program.mode(),
            if socket.zero_copy() { "zero-copy" } else { "copy mode" }
        );
        Ok(XdpLink {
            socket,
            program,
            interface: info,
            local,
            kernel_socket,
            kernel_path,
            neighbours: HashMap::new(),
            last_template: None,
            probed: HashMap::new(),
            max_datagram,
            mtu_checked_ns: 0,
            next_id: 0,
            stats: XdpLinkStats::default(),
        })
    }

    /// The largest datagram a frame of this link carries (the MTU's, within a UMEM frame).
    pub(crate) fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    /// The link's own address.
    pub(crate) fn local_address(&self) -> SocketAddr {
        SocketAddr::V4(self.local)
    }

    /// Readable when frames have arrived.
    pub(crate) fn raw_fd(&self) -> RawFd {
        match &self.kernel_path {
            Some(set) => set.as_raw_fd(),
            None => self.socket.as_raw_fd(),
        }
    }

    /// The link's counters and modes.
    pub(crate) fn stats(&self) -> XdpLinkStats {
        XdpLinkStats {
            native: self.program.mode() == AttachMode::Native,
            zero_copy: self.socket.zero_copy(),
            ..self.stats
        }
    }

    /// Queues one datagram (`header` then `payload`) to `to`; sent by [`XdpLink::flush`].
    /// Dropped (and counted) when `to` is not IPv4, its hardware address is not known yet,
    /// the datagram does not fit a frame, or no transmit frame is free: the protocol
    /// resends.
    pub(crate) fn send(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let len = header.len() + payload.len();
        let SocketAddr::V4(to) = to else {
            self.stats.send_dropped += 1;
            return;
        };
        // The headers of the last destination, used in place (a flush sends to one peer).
        let current = matches!(&self.last_template, Some(t) if t.destination() == to);
        if !current && !self.new_template(to) {
            self.stats.send_dropped += 1;
            return;
        }
        let Some(template) = &self.last_template else {
            self.stats.send_dropped += 1;
            return;
        };
        if len > self.max_datagram {
            self.stats.send_dropped += 1;
            return;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let queued = self.socket.send_with(|frame| {
            let end = template.write(frame, id, len);
            frame[HEADERS_LEN..HEADERS_LEN + header.len()].copy_from_slice(header);
            frame[HEADERS_LEN + header.len()..end].copy_from_slice(payload);
            end
        });
        if queued {
            self.stats.frames_sent += 1;
        } else {
            self.stats.send_dropped += 1;
        }
    }

    /// Makes the headers of frames to `to` the last destination's, from the neighbour's
    /// hardware address; false when it is not known yet.
    #[inline(never)]
    fn new_template(&mut self, to: SocketAddrV4) -> bool {
        let Some(mac) = self.neighbour(*to.ip()) else {
            return false;
        };
        self.last_template = Some(HeaderTemplate::new(&Ends {
            source_mac: self.interface.mac,
            destination_mac: mac,
            source: self.local,
            destination: to,
        }));
        true
    }

    /// Sends what [`XdpLink::send`] queued (reads no clock: a poll's flush of nothing
    /// costs a look at the transmit ring).
    #[inline]
    pub(crate) fn flush(&mut self) {
        self.socket.flush();
    }

    /// Reads the interface's MTU again if the last read was [`MTU_CHECK_INTERVAL`] or
    /// more before `now_ns` (the caller's clock, in any origin it keeps for every call:
    /// the datagram engine's, after a flush that sent data), so that the link itself never
    /// reads the clock on the latency path.
    pub(crate) fn follow_mtu_at(&mut self, now_ns: u64) {
        if now_ns.wrapping_sub(self.mtu_checked_ns) >= MTU_CHECK_INTERVAL.as_nanos() as u64 {
            self.mtu_checked_ns = now_ns;
            self.follow_mtu();
        }
    }

    /// Reads the interface's MTU again; a changed one changes the largest datagram the
    /// link carries (frames above it would be dropped on the wire), counted and logged.
    #[cold]
    fn follow_mtu(&mut self) {
        let before = self.interface.mtu;
        let Ok(mtu) = self.interface.refresh_mtu(&self.kernel_socket) else {
            return;
        };
        if mtu == before {
            return;
        }
        self.stats.mtu_changes += 1;
        self.max_datagram = max_datagram_for(self.socket.geometry().frame_bytes as usize, mtu);
        tracing::warn!(target: "quiver::xdp", "xdp link {} on {}: the MTU went from {before} to {mtu}; datagrams are at most {} bytes from now on", self.local, self.interface.name, self.max_datagram);
    }

    /// Takes one datagram into `buf` (truncated if longer, as UDP would) and returns its
    /// length and source; None when nothing (of ours) has arrived. Frames that are not
    /// ours are counted and skipped.
    pub(crate) fn recv(&mut self, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
        let local = self.local;
        loop {
            let Some(got) = self.socket.recv_with(|frame| {
                parse(frame, local).map(|(source, range)| {
                    let datagram = &frame[range];
                    let n = datagram.len().min(buf.len());
                    buf[..n].copy_from_slice(&datagram[..n]);
                    (n, SocketAddr::V4(source))
                })
            }) else {
                return self.recv_kernel(buf);
            };
            match got {
                Ok(datagram) => {
                    self.stats.frames_received += 1;
                    return Some(datagram);
                }
                Err(Refusal::Length | Refusal::Kind | Refusal::Checksum | Refusal::Destination) => {
                    self.stats.frames_refused += 1;
                }
            }
        }
    }

    /// Takes one datagram: in place in its UMEM frame (no copy), or through the kernel
    /// path into `buf` (several receive queues); None when nothing (of ours) has arrived.
    /// Frames that are not ours are counted, given back and skipped.
    // Inline: called once or twice per poll of a busy-polling receiver (the arrival, then
    // the look that finds the ring empty).
    #[inline]
    pub(crate) fn recv_next(&mut self, buf: &mut [u8]) -> Option<Arrival> {
        loop {
            let Some(frame) = self.socket.recv_frame() else {
                return self.recv_kernel_arrival(buf);
            };
            match parse(&frame, self.local) {
                Ok((source, datagram)) => {
                    self.stats.frames_received += 1;
                    return Some(Arrival::InFrame {
                        frame,
                        datagram,
                        from: SocketAddr::V4(source),
                    });
                }
                Err(Refusal::Length | Refusal::Kind | Refusal::Checksum | Refusal::Destination) => {
                    self.refuse(frame);
                }
            }
        }
    }

    /// Counts and gives back a frame that is not ours.
    #[cold]
    fn refuse(&mut self, frame: RxFrame) {
        self.stats.frames_refused += 1;
        self.socket.release(frame);
    }

    /// [`XdpLink::recv_kernel`] as an arrival (none without the kernel path: one queue).
    #[inline]
    fn recv_kernel_arrival(&mut self, buf: &mut [u8]) -> Option<Arrival> {
        self.kernel_path.as_ref()?;
        let (len, from) = self.recv_kernel(buf)?;
        Some(Arrival::InBuffer { len, from })
    }

    /// Gives a frame from [`XdpLink::recv_next`] back to the receive pool.
    #[inline]
    pub(crate) fn release(&mut self, frame: RxFrame) {
        self.socket.release(frame);
    }

    /// A datagram the kernel received for the link's port (several receive queues only).
    #[inline(never)]
    fn recv_kernel(&mut self, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
        self.kernel_path.as_ref()?;
        let (n, from) = self.kernel_socket.recv_from(buf).ok()?;
        self.stats.kernel_received += 1;
        Some((n, from))
    }

    /// The hardware address of neighbour `ip`, resolving it through the kernel if needed
    /// (see the module doc).
    fn neighbour(&mut self, ip: Ipv4Addr) -> Option<MacAddress> {
        if let Some(&mac) = self.neighbours.get(&ip) {
            return Some(mac);
        }
        let mac = self.resolve(ip)?;
        if self.neighbours.len() >= MAX_NEIGHBOURS {
            self.neighbours.clear();
        }
        self.neighbours.insert(ip, mac);
        self.probed.remove(&ip);
        Some(mac)
    }

    fn resolve(&mut self, ip: Ipv4Addr) -> Option<MacAddress> {
        if let Ok(Some(mac)) = self.interface.neighbour(ip) {
            return Some(mac);
        }
        let now = Instant::now();
        if self
            .probed
            .get(&ip)
            .is_some_and(|last| now.duration_since(*last) < RESOLVE_RETRY)
        {
            return None;
        }
        if self.probed.len() >= MAX_NEIGHBOURS {
            self.probed.clear();
        }
        self.probed.insert(ip, now);
        let _ = self.kernel_socket.send_to(&[], (ip, DISCARD_PORT));
        let deadline = now + RESOLVE_WAIT;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
            if let Ok(Some(mac)) = self.interface.neighbour(ip) {
                return Some(mac);
            }
        }
        None
    }
}

/// Runs `attempt` again while it fails with EBUSY, for at most [`BUSY_WAIT`]: a socket or
/// program of a context just closed on the same interface is released by the kernel a
/// little later (deferred work), not at once.
fn busy_retry<T, E>(
    mut attempt: impl FnMut() -> std::result::Result<T, E>,
    errno: impl Fn(&E) -> Option<i32>,
) -> std::result::Result<T, E> {
    let deadline = Instant::now() + BUSY_WAIT;
    loop {
        match attempt() {
            Err(e) if errno(&e) == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The error for a failed AF_XDP socket.
fn xsk_error(what: String, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => Error::PermissionDenied {
            what,
            detail: e.to_string(),
            fix: "the xdp transport needs root (CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK); without them use udp (QUIVER_TRANSPORTS=shm,udp,tcp)",
        },
        Some(libc::EAFNOSUPPORT | libc::ENOSYS) => Error::TransportUnavailable {
            transport: "xdp",
            what,
            detail: e.to_string(),
            fix: "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS, Linux 5.4 or later)",
        },
        Some(libc::EBUSY) => Error::TransportUnavailable {
            transport: "xdp",
            what,
            detail: e.to_string(),
            fix: "another AF_XDP socket holds queue 0 of this interface: one quiver process per interface (QUIVER_XDP_IFACE picks another)",
        },
        _ => Error::io(what, e),
    }
}

/// The error for a failed program load, attach or map update on `interface`.
fn program_error(interface: &str, e: BpfError) -> Error {
    let what = format!("loading quiver's XDP program on {interface}");
    match e.os_error() {
        Some(libc::EPERM | libc::EACCES) => Error::PermissionDenied {
            what,
            detail: e.to_string(),
            fix: "loading an XDP program needs root (CAP_BPF and CAP_NET_ADMIN); without it use udp (QUIVER_TRANSPORTS=shm,udp,tcp)",
        },
        Some(libc::EBUSY | libc::EEXIST) => Error::TransportUnavailable {
            transport: "xdp",
            what,
            detail: e.to_string(),
            fix: "another XDP program is attached to this interface (another quiver process, or `ip link set dev IFACE xdp off` removes a stale one): one per interface",
        },
        _ => Error::TransportUnavailable {
            transport: "xdp",
            what,
            detail: e.to_string(),
            fix: "the kernel refused quiver's XDP program (Linux 5.9 or later is needed for BPF links)",
        },
    }
}
