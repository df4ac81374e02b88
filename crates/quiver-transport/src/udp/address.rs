//! Socket addresses to and from the kernel's `sockaddr_in`/`sockaddr_in6` layout, and the
//! local address of a bound socket.
//!
//! Layer: quiver-transport, the socket layer. `unsafe` only to write and read the kernel's
//! address structures, each block with its `SAFETY:` comment.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

use super::errno::check;

/// Writes `address` into `storage` as a sockaddr_in/sockaddr_in6; returns its length.
pub(crate) fn write_socket_address(
    address: &SocketAddr,
    storage: &mut libc::sockaddr_storage,
) -> libc::socklen_t {
    match address {
        SocketAddr::V4(v4) => {
            let raw = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(storage as *mut _ as *mut libc::sockaddr_in, raw) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            let raw = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(storage as *mut _ as *mut libc::sockaddr_in6, raw) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a sockaddr_in/sockaddr_in6 the kernel wrote; None for other families.
pub(crate) fn read_socket_address(
    storage: &libc::sockaddr_storage,
    length: libc::socklen_t,
) -> Option<SocketAddr> {
    let length = length as usize;
    match storage.ss_family as libc::c_int {
        libc::AF_INET if length >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in; storage is aligned
            // for it.
            let raw = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(raw.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(raw.sin_port),
            )))
        }
        libc::AF_INET6 if length >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6; storage is aligned
            // for it.
            let raw = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(raw.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(raw.sin6_port),
                raw.sin6_flowinfo,
                raw.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The local address of a bound socket.
pub(super) fn local_address(socket: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage`/`length` are valid out-pointers of the stated size.
    check(unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            &mut storage as *mut _ as *mut libc::sockaddr,
            &mut length,
        )
    })?;
    read_socket_address(&storage, length)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected address family"))
}
