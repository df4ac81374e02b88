//! The path MTU the kernel knows for a destination (`IP_MTU`/`IPV6_MTU` on a connected
//! socket: the route's MTU, lowered by what ICMP "fragmentation needed" / "packet too big"
//! reported), and the room it leaves for a UDP datagram.
//!
//! Layer: quiver-transport, the socket layer. Asked only after a send was refused (a rare
//! event): for a destination the socket is not connected to, a throwaway socket is
//! connected to it (no packet leaves) to ask the route.

use std::io;
use std::mem::zeroed;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::address::write_socket_address;
use super::errno::check;
use super::options::get_int_option;

// Option numbers of linux/in.h and linux/in6.h, spelled out as in `options.rs`.
const IP_MTU: libc::c_int = 14;
const IPV6_MTU: libc::c_int = 24;

/// Bytes of the IP and UDP headers around a datagram to `destination` (IPv4: 20 + 8; IPv6:
/// 40 + 8; an IPv4-mapped destination travels as IPv4).
pub fn ip_udp_header_bytes(destination: SocketAddr) -> usize {
    match destination {
        SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_none() => 48,
        _ => 28,
    }
}

/// The largest UDP payload (datagram bytes) the path to `destination` carries unfragmented:
/// the path MTU minus the IP and UDP headers. `connected` is a socket already connected to
/// `destination` (asked directly, so that what ICMP told it counts), else None.
///
/// # Errors
/// No route to `destination`, or the kernel refused the query.
pub(super) fn datagram_room(
    connected: Option<BorrowedFd<'_>>,
    destination: SocketAddr,
) -> io::Result<usize> {
    let mtu = match connected {
        Some(fd) => path_mtu(fd, fd_is_ipv6(fd)?)?,
        None => {
            let probe = connected_probe(destination)?;
            path_mtu(probe.as_fd(), destination.is_ipv6())?
        }
    };
    Ok(mtu.saturating_sub(ip_udp_header_bytes(destination)))
}

/// `IP_MTU` (or `IPV6_MTU`) of a connected socket.
fn path_mtu(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<usize> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, IP_MTU)
    };
    let mtu = get_int_option(fd, level, name)?;
    usize::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// Whether `fd` is an IPv6 socket (`SO_DOMAIN`).
fn fd_is_ipv6(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(get_int_option(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)? == libc::AF_INET6)
}

/// A UDP socket of `destination`'s family connected to it (connecting sends nothing).
fn connected_probe(destination: SocketAddr) -> io::Result<OwnedFd> {
    let family = if destination.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    // SAFETY: plain syscall; the result is a fresh descriptor.
    let raw = check(unsafe {
        libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::IPPROTO_UDP,
        )
    })?;
    // SAFETY: `raw` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let length = write_socket_address(&destination, &mut storage);
    // SAFETY: `storage` holds a valid address of `length` bytes; the kernel only reads it.
    check(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &storage as *const libc::sockaddr_storage as *const libc::sockaddr,
            length,
        )
    })?;
    Ok(fd)
}
