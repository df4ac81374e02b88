//! The raw AF_XDP baseline of `quiver-bench bypass`: a ping-pong of UDP datagrams between
//! two AF_XDP sockets, and a one-way stream of them, with no protocol (no acknowledgement,
//! no checksum of quiver's, no copy beyond the one into and out of the UMEM frame): the
//! floor under quiver's xdp transport. Built from quiver-transport's xdp pieces: the socket
//! (`XskSocket`), quiver's redirect program (`XdpProgram`) and the interface's neighbour
//! table.
//!
//! The stream: the sender fills [`TX_BATCH`] transmit descriptors with a frame prepared
//! once, then publishes them with one flush (the `sendto` kick; copy mode sends at most 32
//! frames per call, so the flush repeats it until the ring is empty) and reaps the
//! completion ring in the same pass; the receiver takes frames off the receive ring, counts
//! those of its port (reading the headers only) and hands them back to the fill ring in
//! batches. Nothing is acknowledged or resent: after the last frame the sender sends end
//! markers until the receiver answers with the frames it counted, and the difference is
//! reported as lost.
//!
//! Each side opens link 0 of its namespace (10.77.0.{1,2}) at [`RAW_XDP_PORT`], resolves
//! the peer's hardware address through a kernel socket (which also holds the port), and
//! busy-polls its receive ring.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use quiver_transport::xdp::bpf::XdpProgram;
use quiver_transport::xdp::interface::{InterfaceInfo, MacAddress};
use quiver_transport::xdp::socket::{Geometry, XskSocket};

use crate::stripe::plan::link_address;

/// The UDP port of the raw AF_XDP ping-pong.
pub(crate) const RAW_XDP_PORT: u16 = 7602;
/// Ethernet (14) + IPv4 (20) + UDP (8).
const HEADERS: usize = 42;
/// The knock both sides exchange until the other is there (no data datagram is 3 bytes
/// long with this content).
const KNOCK: &[u8] = b"knk";
/// The end of a stream: a datagram of this many bytes (no data datagram is).
const END_MARKER: usize = 7;
/// Transmit descriptors filled before one flush.
const TX_BATCH: u64 = 64;

/// What the receiving side of a stream saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    /// Data frames counted.
    pub(crate) frames: u64,
    /// Frames the kernel dropped at this socket meanwhile (receive ring full, or no fill
    /// frame to copy into): `XDP_STATISTICS`' `rx_dropped + rx_ring_full`.
    pub(crate) socket_drops: u64,
}

/// One side's AF_XDP socket, its program and the peer.
pub(crate) struct RawXdp {
    // The socket goes first (the program's map holds a reference to it anyway).
    socket: XskSocket,
    _program: XdpProgram,
    /// Holds the port and makes the kernel resolve the peer's hardware address.
    _kernel_socket: UdpSocket,
    local: SocketAddrV4,
    peer: SocketAddrV4,
    local_mac: MacAddress,
    peer_mac: MacAddress,
    mtu: usize,
}

fn v4(address: SocketAddr) -> SocketAddrV4 {
    match address {
        SocketAddr::V4(v4) => v4,
        SocketAddr::V6(_) => unreachable!("the testbed is IPv4"),
    }
}

impl RawXdp {
    /// Opens rank `rank`'s side on link 0 and waits until the other side answers.
    pub(crate) fn open(rank: u32, mtu: u32) -> Result<RawXdp, String> {
        let local = v4(link_address(0, rank, RAW_XDP_PORT));
        let peer = v4(link_address(0, 1 - rank, RAW_XDP_PORT));
        let mut info = InterfaceInfo::open(None, *local.ip())
            .map_err(|e| format!("raw-xdp: the interface of {local}: {e}"))?;
        let kernel_socket =
            UdpSocket::bind(local).map_err(|e| format!("raw-xdp: binding {local}: {e}"))?;
        let socket = XskSocket::open(info.index, 0, Geometry::default())
            .map_err(|e| format!("raw-xdp: AF_XDP socket on {}: {e}", info.name))?;
        let program = XdpProgram::attach(info.index, *local.ip(), local.port())
            .map_err(|e| format!("raw-xdp: XDP program on {}: {e}", info.name))?;
        program
            .insert(0, socket.as_raw_fd())
            .map_err(|e| format!("raw-xdp: XSKMAP: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let peer_mac = loop {
            if let Ok(Some(mac)) = info.neighbour(*peer.ip()) {
                break mac;
            }
            let _ = kernel_socket.send_to(&[], (*peer.ip(), 9));
            if Instant::now() >= deadline {
                return Err(format!("raw-xdp: {} did not resolve", peer.ip()));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let mut xdp = RawXdp {
            socket,
            _program: program,
            _kernel_socket: kernel_socket,
            local,
            peer,
            local_mac: info.mac,
            peer_mac,
            mtu: mtu as usize,
        };
        xdp.knock(rank)?;
        Ok(xdp)
    }

    /// Rank 0 knocks every 10 ms until rank 1 answers; rank 1 answers every knock for a
    /// while; both then drain what is left.
    fn knock(&mut self, rank: u32) -> Result<(), String> {
        let mut buf = vec![0u8; 2048];
        if rank == 0 {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                self.send_datagram(KNOCK);
                if self
                    .recv_datagram(&mut buf, Duration::from_millis(10))
                    .is_ok()
                {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err("raw-xdp: the other side never answered".into());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        } else {
            self.recv_datagram(&mut buf, Duration::from_secs(10))?;
            self.send_datagram(KNOCK);
            let quiet = Instant::now() + Duration::from_millis(60);
            while Instant::now() < quiet {
                if self
                    .recv_datagram(&mut buf, Duration::from_millis(5))
                    .is_ok()
                {
                    self.send_datagram(KNOCK);
                }
            }
        }
        while self.recv_datagram(&mut buf, Duration::ZERO).is_ok() {}
        Ok(())
    }

    /// Sends `payload` to the peer in one frame (cut to the MTU).
    pub(crate) fn send_datagram(&mut self, payload: &[u8]) {
        let payload = &payload[..payload.len().min(self.mtu - 28)];
        let (local, peer, local_mac, peer_mac) =
            (self.local, self.peer, self.local_mac, self.peer_mac);
        self.socket
            .send_with(|frame| write_frame(frame, local_mac, peer_mac, local, peer, payload));
        self.socket.flush();
    }

    /// Busy-polls for the next datagram to this side's port (up to `timeout`) and copies
    /// its payload into `buf`.
    pub(crate) fn recv_datagram(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<usize, String> {
        let deadline = Instant::now() + timeout;
        let port = self.local.port();
        let mut spins = 0u32;
        loop {
            if let Some(got) = self.socket.recv_with(|frame| read_frame(frame, port, buf)) {
                if let Some(n) = got {
                    return Ok(n);
                }
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && Instant::now() >= deadline {
                return Err("raw-xdp: nothing arrived in time".into());
            }
        }
    }
}

impl RawXdp {
    /// Streams `frames` datagrams of `payload` bytes (cut to the MTU) to the peer as fast
    /// as the transmit and completion rings allow, then end markers until the peer answers
    /// with what it counted; returns (frames sent, frames the peer counted).
    pub(crate) fn stream_send(
        &mut self,
        payload: usize,
        frames: u64,
    ) -> Result<(u64, u64), String> {
        let payload = vec![0x5au8; payload.min(self.mtu - 28).max(8)];
        let mut template = vec![0u8; HEADERS + payload.len()];
        let len = write_frame(
            &mut template,
            self.local_mac,
            self.peer_mac,
            self.local,
            self.peer,
            &payload,
        );
        let mut sent = 0u64;
        while sent < frames {
            for _ in 0..(frames - sent).min(TX_BATCH) {
                let queued = self.socket.send_with(|frame| {
                    frame[..len].copy_from_slice(&template);
                    len
                });
                if !queued {
                    break;
                }
                sent += 1;
            }
            self.socket.flush();
        }
        // Frames a busy device left in the ring go before the end marker.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.socket.tx_pending() && Instant::now() < deadline {
            self.socket.flush();
        }
        let mut buf = [0u8; 64];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.send_datagram(&[0u8; END_MARKER]);
            if let Ok(8) = self.recv_datagram(&mut buf, Duration::from_millis(5)) {
                let counted = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
                return Ok((sent, counted));
            }
            if Instant::now() >= deadline {
                return Err("raw-xdp: the receiver never answered the end of a stream".into());
            }
        }
    }

    /// Counts the data frames of a stream until its end marker and answers the marker
    /// with the count. Fails when nothing arrives for 10 s.
    pub(crate) fn stream_receive(&mut self) -> Result<Received, String> {
        let port = self.local.port();
        let drops_before = self.socket_drops();
        let mut frames = 0u64;
        let mut spins = 0u32;
        let mut seen = 0u64;
        let mut deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.socket.recv_with(|frame| payload_len(frame, port)) {
                Some(Some(END_MARKER)) => break,
                Some(Some(_)) => frames += 1,
                Some(None) => {}
                None => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(1024) {
                        let now = Instant::now();
                        if frames != seen {
                            seen = frames;
                            deadline = now + Duration::from_secs(10);
                        } else if now >= deadline {
                            return Err("raw-xdp: the stream stopped before its end".into());
                        }
                    }
                }
            }
        }
        self.send_datagram(&frames.to_be_bytes());
        Ok(Received {
            frames,
            socket_drops: self.socket_drops().saturating_sub(drops_before),
        })
    }

    /// Answers repeated end markers (the answer to the first may have been slower than the
    /// sender's patience) with `frames` for `quiet`.
    pub(crate) fn answer_late_markers(&mut self, frames: u64, quiet: Duration) {
        let port = self.local.port();
        let end = Instant::now() + quiet;
        while Instant::now() < end {
            if let Some(Some(END_MARKER)) = self.socket.recv_with(|frame| payload_len(frame, port))
            {
                self.send_datagram(&frames.to_be_bytes());
            }
        }
    }

    /// The kernel's count of frames dropped at this socket so far.
    fn socket_drops(&self) -> u64 {
        self.socket
            .statistics()
            .map(|s| s.rx_dropped + s.rx_ring_full)
            .unwrap_or(0)
    }

    /// Takes whatever is left in the receive ring (late answers of a stream).
    pub(crate) fn drain(&mut self) {
        while self.socket.recv_with(|_| ()).is_some() {}
    }
}

/// Writes an Ethernet + IPv4 + UDP frame carrying `payload` into `frame`; returns its
/// length.
fn write_frame(
    frame: &mut [u8],
    from_mac: MacAddress,
    to_mac: MacAddress,
    from: SocketAddrV4,
    to: SocketAddrV4,
    payload: &[u8],
) -> usize {
    let len = HEADERS + payload.len();
    frame[0..6].copy_from_slice(&to_mac);
    frame[6..12].copy_from_slice(&from_mac);
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut frame[14..34];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&[0, 0]);
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[10..12].copy_from_slice(&[0, 0]);
    ip[12..16].copy_from_slice(&from.ip().octets());
    ip[16..20].copy_from_slice(&to.ip().octets());
    let checksum = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let udp = &mut frame[34..42];
    udp[0..2].copy_from_slice(&from.port().to_be_bytes());
    udp[2..4].copy_from_slice(&to.port().to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
    frame[HEADERS..len].copy_from_slice(payload);
    len
}

/// The payload length of a UDP frame to `port` (as far as the frame holds it); None for
/// anything else.
fn payload_len(frame: &[u8], port: u16) -> Option<usize> {
    if frame.len() < HEADERS || frame[12..14] != [0x08, 0x00] || frame[23] != 17 {
        return None;
    }
    if u16::from_be_bytes([frame[36], frame[37]]) != port {
        return None;
    }
    let udp_len = usize::from(u16::from_be_bytes([frame[38], frame[39]]));
    Some(udp_len.checked_sub(8)?.min(frame.len() - HEADERS))
}

/// The payload of a UDP frame to `port`, copied into `buf`; None for anything else.
fn read_frame(frame: &[u8], port: u16, buf: &mut [u8]) -> Option<usize> {
    let n = payload_len(frame, port)?.min(buf.len());
    buf[..n].copy_from_slice(&frame[HEADERS..HEADERS + n]);
    Some(n)
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn a_frame_reads_back() {
        let mut frame = vec![0u8; 2048];
        let from = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 7602);
        let to = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), 7602);
        let len = write_frame(&mut frame, [1; 6], [2; 6], from, to, b"12345678");
        assert_eq!(len, 50);
        // A correct header sums to zero with its checksum.
        assert_eq!(ipv4_checksum(&frame[14..34]), 0);
        let mut buf = [0u8; 64];
        assert_eq!(read_frame(&frame[..len], 7602, &mut buf), Some(8));
        assert_eq!(&buf[..8], b"12345678");
        assert_eq!(read_frame(&frame[..len], 7603, &mut buf), None);
        assert_eq!(read_frame(&frame[..20], 7602, &mut buf), None);
    }

    #[test]
    fn an_end_marker_is_no_data_frame() {
        let mut frame = vec![0u8; 2048];
        let from = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 7602);
        let to = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), 7602);
        let len = write_frame(&mut frame, [1; 6], [2; 6], from, to, &[0; END_MARKER]);
        assert_eq!(payload_len(&frame[..len], 7602), Some(END_MARKER));
        // The smallest data frame (8 B) and a full-MTU one are not taken for the marker.
        for payload in [8, 1500 - 28] {
            let len = write_frame(&mut frame, [1; 6], [2; 6], from, to, &vec![7; payload]);
            assert_eq!(payload_len(&frame[..len], 7602), Some(payload));
        }
        // A frame cut short reports what it holds, never past its end.
        assert_eq!(payload_len(&frame[..HEADERS + 3], 7602), Some(3));
        assert_eq!(payload_len(&frame[..len], 9), None);
    }
}
