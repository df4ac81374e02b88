//! What an AF_XDP link needs to know about its interface and its neighbours: the
//! interface's index, MTU and hardware address, which interface holds an IPv4 address, the
//! number of receive queues, and the hardware address of a neighbour from the kernel's
//! neighbour table (the kernel resolves it; quiver's frames bypass the kernel's stack, so
//! they cannot trigger that themselves).
//!
//! Every lookup answers for the network namespace of the thread that made the object: the
//! socket for the ioctls and the neighbour table's file are opened in [`InterfaceInfo::open`]
//! and kept, so an engine driven later from another thread still reads its own namespace.
//!
//! Layer: quiver-transport's xdp module (ioctls and `/proc` reads, `unsafe` with
//! `// SAFETY:`).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;

use crate::netif::interface_addresses;

/// An Ethernet (hardware) address.
pub type MacAddress = [u8; 6];

/// One interface of the namespace the caller was in when it was opened.
#[derive(Debug)]
pub struct InterfaceInfo {
    /// The interface's name.
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its MTU (bytes of an IP packet).
    pub mtu: u32,
    /// Its hardware address.
    pub mac: MacAddress,
    /// Receive queues (`/sys` may not reflect this namespace: the count comes from the
    /// ethtool ioctl, 1 when the driver does not say).
    pub rx_queues: u32,
    /// The kernel's IPv4 neighbour table, kept open (re-read from its start each time).
    arp: File,
}

impl InterfaceInfo {
    /// Looks up interface `name`, or when None the interface holding `address`.
    ///
    /// # Errors
    /// NotFound when no interface has that name or address; the ioctls' errors.
    pub fn open(name: Option<&str>, address: Ipv4Addr) -> io::Result<InterfaceInfo> {
        let name = match name {
            Some(name) => name.to_string(),
            None => interface_addresses()?
                .into_iter()
                .find(|a| a.address == std::net::IpAddr::V4(address))
                .map(|a| a.interface)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("no interface of this network namespace has address {address}"),
                    )
                })?,
        };
        let c_name = CString::new(name.clone())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
        // SAFETY: a NUL-terminated name; the call only reads it.
        let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface named {name:?} in this network namespace"),
            ));
        }
        let probe = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        let mut request = if_request(&name);
        ioctl(&probe, libc::SIOCGIFMTU, &mut request)?;
        // SAFETY: SIOCGIFMTU filled the union's `ifru_mtu`.
        let mtu = unsafe { request.ifr_ifru.ifru_mtu } as u32;
        let mut request = if_request(&name);
        ioctl(&probe, libc::SIOCGIFHWADDR, &mut request)?;
        // SAFETY: SIOCGIFHWADDR filled the union's `ifru_hwaddr`.
        let hw = unsafe { request.ifr_ifru.ifru_hwaddr };
        let mut mac = [0u8; 6];
        for (out, byte) in mac.iter_mut().zip(hw.sa_data.iter()) {
            *out = *byte as u8;
        }
        let rx_queues = rx_queue_count(&probe, &name).unwrap_or(1).max(1);
        let arp = File::open("/proc/thread-self/net/arp")?;
        Ok(InterfaceInfo {
            name,
            index,
            mtu,
            mac,
            rx_queues,
            arp,
        })
    }

    /// Reads the interface's MTU again (an administrator or a tunnel may change it while
    /// the link runs), through `via`, any socket of the namespace; updates
    /// [`InterfaceInfo::mtu`] and returns it.
    ///
    /// # Errors
    /// The ioctl's error (the interface is gone, for one).
    pub fn refresh_mtu(&mut self, via: &UdpSocket) -> io::Result<u32> {
        let mut request = if_request(&self.name);
        ioctl(via, libc::SIOCGIFMTU, &mut request)?;
        // SAFETY: SIOCGIFMTU filled the union's `ifru_mtu`.
        self.mtu = unsafe { request.ifr_ifru.ifru_mtu } as u32;
        Ok(self.mtu)
    }

    /// The hardware address the kernel's neighbour table has for `address` on this
    /// interface (complete entries only), or None.
    ///
    /// # Errors
    /// Reading the table.
    pub fn neighbour(&mut self, address: Ipv4Addr) -> io::Result<Option<MacAddress>> {
        self.arp.seek(SeekFrom::Start(0))?;
        let mut text = String::new();
        self.arp.read_to_string(&mut text)?;
        Ok(parse_arp(&text, address, &self.name))
    }
}

/// The complete entry for `address` on `device` in `/proc/net/arp`'s text.
fn parse_arp(text: &str, address: Ipv4Addr, device: &str) -> Option<MacAddress> {
    // IP address  HW type  Flags  HW address  Mask  Device
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [ip, _, flags, hw, _, dev] = fields[..] else {
            continue;
        };
        // ATF_COM (0x2): the entry is complete.
        let complete =
            u32::from_str_radix(flags.trim_start_matches("0x"), 16).is_ok_and(|f| f & 0x2 != 0);
        if dev != device || !complete || ip.parse::<Ipv4Addr>().ok() != Some(address) {
            continue;
        }
        let mut mac = [0u8; 6];
        let mut parts = hw.split(':');
        for byte in &mut mac {
            *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        return Some(mac);
    }
    None
}

fn if_request(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data; all zeros is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (out, byte) in request
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *out = byte as libc::c_char;
    }
    request
}

fn ioctl(socket: &UdpSocket, request: libc::Ioctl, data: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: `data` is a valid ifreq for these interface requests, writable by the kernel.
    if unsafe { libc::ioctl(socket.as_raw_fd(), request, data as *mut libc::ifreq) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct ethtool_channels` (ETHTOOL_GCHANNELS).
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// Receive queues of `name` as ethtool reports them (rx plus combined channels).
fn rx_queue_count(socket: &UdpSocket, name: &str) -> io::Result<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let mut request = if_request(name);
    request.ifr_ifru.ifru_data = (&mut channels as *mut EthtoolChannels).cast();
    ioctl(socket, libc::SIOCETHTOOL, &mut request)?;
    Ok(channels.rx_count + channels.combined_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_arp_entries_are_read() {
        let text = "IP address       HW type     Flags       HW address            Mask     Device\n\
                    10.77.0.2        0x1         0x2         5a:01:02:03:04:ff     *        link0\n\
                    10.77.0.3        0x1         0x0         00:00:00:00:00:00     *        link0\n";
        let two = Ipv4Addr::new(10, 77, 0, 2);
        assert_eq!(
            parse_arp(text, two, "link0"),
            Some([0x5a, 1, 2, 3, 4, 0xff])
        );
        assert_eq!(parse_arp(text, two, "link1"), None);
        assert_eq!(parse_arp(text, Ipv4Addr::new(10, 77, 0, 3), "link0"), None);
    }

    #[test]
    fn loopback_is_found_by_address() {
        let lo = InterfaceInfo::open(None, Ipv4Addr::LOCALHOST).expect("lo");
        assert_eq!(lo.name, "lo");
        assert!(lo.index > 0 && lo.mtu > 0);
    }
}
