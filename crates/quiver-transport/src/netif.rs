//! The node's network identity, for bootstraps that pick an address to bind: the addresses
//! of this network namespace's interfaces (`getifaddrs`), and moving the calling thread
//! into another network namespace (`setns`), which is how a test simulates several nodes on
//! one machine.
//!
//! Layer: quiver-transport, beside the socket layers. Reads the node's interfaces and
//! switches namespaces; opens no sockets and keeps no state.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::Path;

/// One address of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddress {
    /// The interface's name, e.g. "eth0".
    pub interface: String,
    /// The address.
    pub address: IpAddr,
    /// Whether the interface is a loopback interface.
    pub loopback: bool,
    /// Whether the interface is up.
    pub up: bool,
}

/// Every IPv4 and IPv6 address of the interfaces of the calling thread's network namespace,
/// in the kernel's order (the order `ip address` shows).
///
/// # Errors
/// The error of `getifaddrs`.
pub fn interface_addresses() -> io::Result<Vec<InterfaceAddress>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocates into `list`; the list is
    // released with freeifaddrs below, after the last read.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut node = list;
    while !node.is_null() {
        // SAFETY: `node` is a non-null element of the list getifaddrs returned, which stays
        // valid until freeifaddrs.
        let entry = unsafe { &*node };
        node = entry.ifa_next;
        if entry.ifa_addr.is_null() || entry.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family field is
        // always readable.
        let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
        let address = match family {
            libc::AF_INET => {
                // SAFETY: for AF_INET the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: for AF_INET6 the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        // SAFETY: ifa_name is a non-null NUL-terminated string owned by the list.
        let interface = unsafe { CStr::from_ptr(entry.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = entry.ifa_flags;
        out.push(InterfaceAddress {
            interface,
            address,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
            up: flags & libc::IFF_UP as u32 != 0,
        });
    }
    // SAFETY: `list` came from getifaddrs and nothing refers to it any more.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// Moves the calling thread into the network namespace at `path` (a name made by
/// `ip netns add` lives at `/run/netns/NAME`; a process's is `/proc/PID/ns/net`). Sockets
/// the thread creates afterwards, and threads it starts, belong to that namespace; sockets
/// opened before keep theirs. Needs CAP_SYS_ADMIN.
///
/// # Errors
/// Opening `path` or `setns` (EPERM without the capability, EINVAL if it is not a network
/// namespace).
pub fn enter_network_namespace(path: &Path) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: setns on a descriptor we own and keep open for the call; it changes only the
    // calling thread's network namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed() {
        let list = interface_addresses().expect("getifaddrs");
        assert!(
            list.iter()
                .any(|a| a.loopback && a.address == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{list:?}"
        );
    }

    #[test]
    fn entering_a_non_namespace_fails() {
        let error =
            enter_network_namespace(Path::new("/proc/self/status")).expect_err("not a namespace");
        assert!(matches!(
            error.raw_os_error(),
            Some(libc::EINVAL) | Some(libc::EPERM)
        ));
        // Entering our own namespace again is allowed with the capability (a no-op).
        let _ = enter_network_namespace(Path::new("/proc/self/ns/net"));
    }
}
