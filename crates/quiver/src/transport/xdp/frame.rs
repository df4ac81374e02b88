//! The xdp transport's framing: a quiver datagram inside plain Ethernet + IPv4 + UDP
//! headers (42 bytes, no VLAN tag, no IP options, UDP checksum 0 as IPv4 allows: quiver's
//! frames carry their own integrity check).
//!
//! Why UDP/IP rather than a quiver EtherType: every rank already has an IPv4 address and
//! port (the job's addresses, the same as udp's), so routing, the router's peer table and
//! striping (`QUIVER_LINKS`) work unchanged; switches, bridges and tcpdump handle the frames
//! like any UDP; the kernel's neighbour table resolves hardware addresses. The price is 28
//! bytes per frame over a compact EtherType header, and no crossing of IP routers beyond
//! the first hop (frames go to the next hop's hardware address, which is the peer's on one
//! subnet). Decision record 0062.
//!
//! ```text
//!  0      6      12   14                 34         42
//!  | dst  | src  |0800| IPv4 (IHL 5)     | UDP      | quiver datagram ...
//! ```
//!
//! Parsing is checked: a frame that is not exactly one unfragmented IPv4/UDP packet to the
//! link's address and port, with consistent lengths and a valid header checksum, is
//! refused (counted by the link); nothing in it panics.
//!
//! Layer: the xdp transport's pure helpers (no I/O).

use std::net::{Ipv4Addr, SocketAddrV4};

use quiver_transport::xdp::program::{ETHERNET_LEN, HEADERS_LEN, IPV4_LEN};

/// Why a received frame is not one of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Shorter than the headers, or its lengths disagree.
    Length,
    /// Not IPv4/UDP without options or fragments.
    Kind,
    /// IPv4 header checksum wrong.
    Checksum,
    /// For another address or port.
    Destination,
}

/// The two ends of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ends {
    pub(crate) source_mac: [u8; 6],
    pub(crate) destination_mac: [u8; 6],
    pub(crate) source: SocketAddrV4,
    pub(crate) destination: SocketAddrV4,
}

/// The headers of every frame to one destination, written once: a frame's own fields (the
/// two lengths, the IPv4 identification, the checksum over them) are filled in per frame
/// by [`HeaderTemplate::write`], the rest is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderTemplate {
    destination: SocketAddrV4,
    bytes: [u8; HEADERS_LEN],
    /// The one's-complement sum of the IPv4 header's 16-bit words, the lengths,
    /// identification and checksum taken as zero (folded to 16 bits).
    partial_sum: u32,
}

impl HeaderTemplate {
    /// The template for frames between `ends`.
    pub(crate) fn new(ends: &Ends) -> HeaderTemplate {
        let mut bytes = [0u8; HEADERS_LEN];
        bytes[0..6].copy_from_slice(&ends.destination_mac);
        bytes[6..12].copy_from_slice(&ends.source_mac);
        bytes[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = [0u8; IPV4_LEN];
        ip[0] = 0x45;
        // Don't fragment: the datagram is sized to the link's MTU.
        ip[6..8].copy_from_slice(&[0x40, 0x00]);
        ip[8] = 64;
        ip[9] = UDP_PROTOCOL;
        ip[12..16].copy_from_slice(&ends.source.ip().octets());
        ip[16..20].copy_from_slice(&ends.destination.ip().octets());
        let partial_sum = fold(ones_complement_sum(&ip));
        bytes[ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN].copy_from_slice(&ip);
        let udp = &mut bytes[ETHERNET_LEN + IPV4_LEN..];
        udp[0..2].copy_from_slice(&ends.source.port().to_be_bytes());
        udp[2..4].copy_from_slice(&ends.destination.port().to_be_bytes());
        HeaderTemplate {
            destination: ends.destination,
            bytes,
            partial_sum,
        }
    }

    /// The destination its frames go to.
    pub(crate) fn destination(&self) -> SocketAddrV4 {
        self.destination
    }

    /// Writes the headers for a datagram of `datagram_len` bytes into `out[..HEADERS_LEN]`;
    /// `id` is the IPv4 identification. Returns the frame's length.
    ///
    /// # Panics
    /// If `out` is shorter than the headers (the caller sizes frames).
    #[inline]
    pub(crate) fn write(&self, out: &mut [u8], id: u16, datagram_len: usize) -> usize {
        let ip_len = (IPV4_LEN + UDP_LEN + datagram_len) as u16;
        let udp_len = (UDP_LEN + datagram_len) as u16;
        let h = &mut out[..HEADERS_LEN];
        h.copy_from_slice(&self.bytes);
        let ip = ETHERNET_LEN;
        h[ip + 2..ip + 4].copy_from_slice(&ip_len.to_be_bytes());
        h[ip + 4..ip + 6].copy_from_slice(&id.to_be_bytes());
        let checksum = !(fold(self.partial_sum + u32::from(ip_len) + u32::from(id)) as u16);
        h[ip + 10..ip + 12].copy_from_slice(&checksum.to_be_bytes());
        let udp = ETHERNET_LEN + IPV4_LEN;
        h[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
        HEADERS_LEN + datagram_len
    }
}

/// Checks `frame` as one of ours to `local` and returns its source and where its datagram
/// lies (`frame[range]`).
pub(crate) fn parse(
    frame: &[u8],
    local: SocketAddrV4,
) -> Result<(SocketAddrV4, std::ops::Range<usize>), Refusal> {
    if frame.len() < HEADERS_LEN {
        return Err(Refusal::Length);
    }
    let Ok(ip) = <&[u8; IPV4_LEN]>::try_from(&frame[ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN]) else {
        return Err(Refusal::Length);
    };
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
    if frame[12..14] != [0x08, 0x00] || ip[0] != 0x45 || ip[9] != UDP_PROTOCOL || fragment != 0 {
        return Err(Refusal::Kind);
    }
    if ipv4_checksum(ip) != 0 {
        return Err(Refusal::Checksum);
    }
    let ip_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let udp = &frame[ETHERNET_LEN + IPV4_LEN..HEADERS_LEN];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    // The frame may carry Ethernet padding after the packet, never less than it says.
    if ip_len + ETHERNET_LEN > frame.len() || udp_len < UDP_LEN || udp_len + IPV4_LEN != ip_len {
        return Err(Refusal::Length);
    }
    let destination = SocketAddrV4::new(
        Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        u16::from_be_bytes([udp[2], udp[3]]),
    );
    if destination != local {
        return Err(Refusal::Destination);
    }
    let source = SocketAddrV4::new(
        Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        u16::from_be_bytes([udp[0], udp[1]]),
    );
    Ok((source, HEADERS_LEN..HEADERS_LEN + udp_len - UDP_LEN))
}

const UDP_PROTOCOL: u8 = 17;
const UDP_LEN: usize = quiver_transport::xdp::program::UDP_LEN;

/// The Internet checksum of an IPv4 header (0 when a header with its checksum is valid).
fn ipv4_checksum(header: &[u8; IPV4_LEN]) -> u16 {
    !(fold(ones_complement_sum(header)) as u16)
}

/// The sum of an IPv4 header's 16-bit words, big-endian, not yet folded (ten words: no
/// carry out of 32 bits).
#[inline]
fn ones_complement_sum(header: &[u8; IPV4_LEN]) -> u32 {
    let mut sum = 0u32;
    for word in 0..IPV4_LEN / 2 {
        sum += u32::from(u16::from_be_bytes([header[2 * word], header[2 * word + 1]]));
    }
    sum
}

/// `sum` folded to 16 bits, end-around carries added (twice is enough for any 32-bit sum).
#[inline]
fn fold(sum: u32) -> u32 {
    let sum = (sum & 0xffff) + (sum >> 16);
    (sum & 0xffff) + (sum >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> Ends {
        Ends {
            source_mac: [2, 0, 0, 0, 0, 1],
            destination_mac: [2, 0, 0, 0, 0, 2],
            source: "10.77.0.1:7100".parse().unwrap(),
            destination: "10.77.0.2:7100".parse().unwrap(),
        }
    }

    fn frame(datagram: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; HEADERS_LEN + datagram.len()];
        let len = HeaderTemplate::new(&ends()).write(&mut out, 0x1234, datagram.len());
        out[HEADERS_LEN..len].copy_from_slice(datagram);
        out
    }

    #[test]
    fn written_frames_parse_back() {
        let f = frame(b"quiver datagram");
        // Known bytes: the IPv4 header of that packet (checksum 0x13f2 worked out by hand).
        assert_eq!(
            &f[14..34],
            &[0x45, 0, 0, 43, 0x12, 0x34, 0x40, 0, 64, 17, 0x13, 0xf2, 10, 77, 0, 1, 10, 77, 0, 2]
        );
        let (source, range) = parse(&f, ends().destination).unwrap();
        assert_eq!(source, ends().source);
        assert_eq!(&f[range], b"quiver datagram");
        // Ethernet padding after the packet is ignored.
        let mut padded = frame(b"x");
        padded.resize(60, 0);
        let (_, range) = parse(&padded, ends().destination).unwrap();
        assert_eq!(&padded[range], b"x");
    }

    #[test]
    fn others_are_refused() {
        let good = frame(b"0123456789");
        let local = ends().destination;
        for cut in 0..good.len() - 10 {
            assert_eq!(
                parse(&good[..cut], local),
                Err(Refusal::Length),
                "cut {cut}"
            );
        }
        let mut bad = good.clone();
        bad[15] = 1; // TOS changed, checksum not
        assert_eq!(parse(&bad, local), Err(Refusal::Checksum));
        let mut bad = good.clone();
        bad[23] = 6; // TCP
        assert_eq!(parse(&bad, local), Err(Refusal::Kind));
        let mut bad = good.clone();
        bad[12] = 0x86; // IPv6 EtherType
        assert_eq!(parse(&bad, local), Err(Refusal::Kind));
        assert_eq!(
            parse(&good, "10.77.0.2:7101".parse().unwrap()),
            Err(Refusal::Destination)
        );
        let mut bad = good.clone();
        bad[38..40].copy_from_slice(&100u16.to_be_bytes()); // UDP length beyond the packet
        assert_eq!(parse(&bad, local), Err(Refusal::Length));
    }

    proptest::proptest! {
        /// Any bytes: parsing never panics, and what it accepts lies inside the frame.
        #[test]
        fn parsing_any_bytes_is_safe(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok((_, range)) = parse(&bytes, ends().destination) {
                proptest::prop_assert!(range.end <= bytes.len());
            }
        }

        /// Any datagram written parses back to itself, from its source.
        #[test]
        fn written_parses_back(
            datagram in proptest::collection::vec(proptest::num::u8::ANY, 0..1472),
            id in proptest::num::u16::ANY,
            port in 1u16..,
        ) {
            let mut e = ends();
            e.source.set_port(port);
            let mut out = vec![0u8; HEADERS_LEN + datagram.len()];
            let len = HeaderTemplate::new(&e).write(&mut out, id, datagram.len());
            out[HEADERS_LEN..len].copy_from_slice(&datagram);
            let (source, range) = parse(&out, e.destination).unwrap();
            proptest::prop_assert_eq!(source, e.source);
            proptest::prop_assert_eq!(&out[range], &datagram[..]);
        }

        /// The template's headers are those written field by field, with the checksum
        /// over the whole IPv4 header, for any ends, identification and length.
        #[test]
        fn template_writes_the_full_headers(
            macs in proptest::array::uniform12(proptest::num::u8::ANY),
            ips in proptest::array::uniform8(proptest::num::u8::ANY),
            ports in proptest::array::uniform2(proptest::num::u16::ANY),
            id in proptest::num::u16::ANY,
            datagram_len in 0usize..=65_507,
        ) {
            let e = Ends {
                source_mac: macs[..6].try_into().unwrap(),
                destination_mac: macs[6..].try_into().unwrap(),
                source: SocketAddrV4::new(Ipv4Addr::new(ips[0], ips[1], ips[2], ips[3]), ports[0]),
                destination: SocketAddrV4::new(Ipv4Addr::new(ips[4], ips[5], ips[6], ips[7]), ports[1]),
            };
            let mut out = [0u8; HEADERS_LEN];
            let len = HeaderTemplate::new(&e).write(&mut out, id, datagram_len);
            proptest::prop_assert_eq!(len, HEADERS_LEN + datagram_len);
            proptest::prop_assert_eq!(out, reference_headers(&e, id, datagram_len));
        }
    }

    /// The headers written field by field, the checksum summed over the whole header.
    fn reference_headers(ends: &Ends, id: u16, datagram_len: usize) -> [u8; HEADERS_LEN] {
        let mut h = [0u8; HEADERS_LEN];
        h[0..6].copy_from_slice(&ends.destination_mac);
        h[6..12].copy_from_slice(&ends.source_mac);
        h[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut h[ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((IPV4_LEN + UDP_LEN + datagram_len) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        ip[6..8].copy_from_slice(&[0x40, 0x00]);
        ip[8] = 64;
        ip[9] = UDP_PROTOCOL;
        ip[12..16].copy_from_slice(&ends.source.ip().octets());
        ip[16..20].copy_from_slice(&ends.destination.ip().octets());
        let mut sum: u32 = ip
            .chunks(2)
            .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        let udp = &mut h[ETHERNET_LEN + IPV4_LEN..];
        udp[0..2].copy_from_slice(&ends.source.port().to_be_bytes());
        udp[2..4].copy_from_slice(&ends.destination.port().to_be_bytes());
        udp[4..6].copy_from_slice(&((UDP_LEN + datagram_len) as u16).to_be_bytes());
        h
    }
}
