//! Control messages: the buffer that holds one (a GSO segment size to send, a GRO segment
//! size received) and the reading of a received one.
//!
//! Layer: quiver-transport, the socket layer. Reads only what the kernel wrote.

use super::options::UDP_GRO;

/// Room for one control message carrying an `int` (segment sizes): CMSG_SPACE(4) is 24 on
/// 64-bit Linux; 32 leaves slack. `u64` elements keep it aligned for `cmsghdr`.
pub(super) const CONTROL_WORDS: usize = 4;
pub(super) type ControlBuffer = [u64; CONTROL_WORDS];

/// The GRO segment size from a received message's control data, if the kernel put one.
pub(super) fn gro_segment_size(header: &libc::msghdr) -> Option<usize> {
    // SAFETY: the kernel filled msg_control/msg_controllen for this header; the CMSG_*
    // macros stay within msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(header) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points inside the control buffer.
        let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
        if level == libc::SOL_UDP && kind == UDP_GRO {
            // SAFETY: a UDP_GRO control message carries one int; read unaligned.
            let size = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const i32) };
            return usize::try_from(size).ok().filter(|&size| size > 0);
        }
        // SAFETY: walking the control buffer the kernel filled.
        cmsg = unsafe { libc::CMSG_NXTHDR(header, cmsg) };
    }
    None
}
