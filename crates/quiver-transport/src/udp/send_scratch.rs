//! What the send paths hand to the kernel: [`OutDatagram`], one datagram (or GSO batch)
//! to send, and the preallocated `mmsghdr`/`iovec`/address/control arrays one `sendmmsg`
//! is filled into.
//!
//! Layer: quiver-transport, the socket layer. Allocates only when created; filling a slot
//! writes pointers the kernel only reads.

use std::ffi::c_void;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, SocketAddrV6};

use super::address::write_socket_address;
use super::control::{ControlBuffer, CONTROL_WORDS};
use super::options::UDP_SEGMENT;

/// One datagram (or, with `segment_size`, one GSO batch of datagrams) to send.
///
/// The bytes sent are `header` followed by `payload`, gathered by the kernel (no copy here).
/// With `segment_size: Some(s)` the concatenation is cut into datagrams of `s` bytes (the last
/// may be shorter); `header` then belongs to the first segment only, so callers that need a
/// header per segment lay the segments out in `payload` and leave `header` empty.
#[derive(Clone, Copy, Debug)]
pub struct OutDatagram<'a> {
    /// Where the datagram goes.
    pub destination: SocketAddr,
    /// First part of the bytes (may be empty).
    pub header: &'a [u8],
    /// Second part of the bytes (may be empty).
    pub payload: &'a [u8],
    /// GSO segment size in bytes, or `None` for one plain datagram.
    pub segment_size: Option<u16>,
}

impl<'a> OutDatagram<'a> {
    /// A plain datagram of `header` + `payload`.
    pub fn new(destination: SocketAddr, header: &'a [u8], payload: &'a [u8]) -> Self {
        OutDatagram {
            destination,
            header,
            payload,
            segment_size: None,
        }
    }

    /// Total bytes this entry carries.
    pub fn len(&self) -> usize {
        self.header.len() + self.payload.len()
    }

    /// Whether it carries no bytes (a valid, empty datagram).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Preallocated kernel-facing arrays for `sendmmsg`.
#[derive(Debug)]
pub(super) struct SendScratch {
    pub(super) headers: Vec<libc::mmsghdr>,
    iovecs: Vec<[libc::iovec; 2]>,
    addresses: Vec<libc::sockaddr_storage>,
    controls: Vec<ControlBuffer>,
}

// SAFETY: the raw pointers inside are rewritten before every sendmmsg and point only into
// this struct's own heap buffers or into slices borrowed for the duration of that one call.
unsafe impl Send for SendScratch {}

impl SendScratch {
    pub(super) fn new(capacity: usize) -> SendScratch {
        SendScratch {
            // SAFETY: mmsghdr, iovec and sockaddr_storage are plain old data; all-zero is
            // valid (null pointers, zero lengths).
            headers: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            iovecs: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            addresses: vec![unsafe { zeroed() }; capacity],
            controls: vec![[0; CONTROL_WORDS]; capacity],
        }
    }

    /// Fills slot `index` for `datagram`; `ipv6_socket` maps IPv4 destinations. Without
    /// `addressed` the datagram goes to the socket's connected peer (no address).
    pub(super) fn fill(
        &mut self,
        index: usize,
        datagram: &OutDatagram<'_>,
        ipv6_socket: bool,
        addressed: bool,
    ) {
        let mut parts = 0;
        for part in [datagram.header, datagram.payload] {
            if !part.is_empty() {
                self.iovecs[index][parts] = libc::iovec {
                    // The kernel only reads through this pointer (sendmmsg).
                    iov_base: part.as_ptr() as *mut c_void,
                    iov_len: part.len(),
                };
                parts += 1;
            }
        }
        let iov = self.iovecs[index].as_mut_ptr();
        self.fill_message(
            index,
            datagram.destination,
            (iov, parts),
            datagram.segment_size,
            ipv6_socket,
            addressed,
        );
    }

    /// Fills slot `index` for a message of the iovec array `iov` (pointer, count), which
    /// must stay alive and unmoved until the `sendmmsg` that uses the slot.
    pub(super) fn fill_message(
        &mut self,
        index: usize,
        destination: SocketAddr,
        iov: (*mut libc::iovec, usize),
        segment_size: Option<u16>,
        ipv6_socket: bool,
        addressed: bool,
    ) {
        let destination = match (ipv6_socket, destination) {
            (true, SocketAddr::V4(v4)) => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            (_, other) => other,
        };
        let address_length = write_socket_address(&destination, &mut self.addresses[index]);
        let header = &mut self.headers[index].msg_hdr;
        if addressed {
            header.msg_name = &mut self.addresses[index] as *mut _ as *mut c_void;
            header.msg_namelen = address_length;
        } else {
            header.msg_name = std::ptr::null_mut();
            header.msg_namelen = 0;
        }
        header.msg_iov = iov.0;
        header.msg_iovlen = iov.1;
        header.msg_flags = 0;
        match segment_size {
            Some(segment) => {
                header.msg_control = self.controls[index].as_mut_ptr() as *mut c_void;
                // SAFETY: CMSG_SPACE is a pure computation.
                header.msg_controllen =
                    unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
                // SAFETY: msg_control points at a live, aligned buffer of CONTROL_WORDS u64
                // (32 bytes), larger than CMSG_SPACE(2) = 24, so the first header fits.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(header);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, segment);
                }
            }
            None => {
                header.msg_control = std::ptr::null_mut();
                header.msg_controllen = 0;
            }
        }
        self.headers[index].msg_len = 0;
    }
}
