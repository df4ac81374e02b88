//! Sizes and limits of UDP datagrams, GSO sends and batches, and the defaults the socket
//! starts with.
//!
//! Layer: quiver-transport, the socket layer of the udp transport. Numbers only: no system
//! calls.

/// Largest payload of one plain IPv4 UDP datagram (65535 - 20 IP - 8 UDP header bytes).
pub const MAX_DATAGRAM_BYTES_V4: usize = 65_507;

/// Largest payload of one plain IPv6 UDP datagram (65535 payload length - 8 UDP bytes).
pub const MAX_DATAGRAM_BYTES_V6: usize = 65_527;

/// Receive buffer length that can hold any coalesced (GRO) receive.
pub const MAX_COALESCED_BYTES: usize = 65_535;

/// Most segments one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS` on older kernels;
/// newer ones allow more, so this is the portable limit).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most parts (iovecs) one message of a [`Gather`](super::Gather) may have: the kernel's
/// `UIO_MAXIOV` (`IOV_MAX`); a message with more is refused by the kernel (`EMSGSIZE`).
pub const MAX_GATHER_PARTS: usize = 1024;

/// Default number of datagrams one [`UdpSocket::send_batch`](super::UdpSocket::send_batch) call can
/// submit.
pub const DEFAULT_SEND_BATCH: usize = 64;

/// Socket buffer size [`UdpSocket::bind`](super::UdpSocket::bind) asks for in each direction
/// (bytes; the kernel reports twice what it grants).
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// Largest total length of one GSO send with segments of `segment_bytes`, for a socket of
/// the given family: whole segments only, at most [`MAX_GSO_SEGMENTS`], and within one IP
/// packet's length limit.
pub fn max_gso_bytes(segment_bytes: usize, ipv6: bool) -> usize {
    let limit = if ipv6 {
        MAX_DATAGRAM_BYTES_V6
    } else {
        MAX_DATAGRAM_BYTES_V4
    };
    if segment_bytes == 0 {
        return 0;
    }
    (limit / segment_bytes).min(MAX_GSO_SEGMENTS) * segment_bytes
}
