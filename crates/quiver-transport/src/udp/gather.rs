//! Messages gathered from parts in place for one `sendmmsg` (a header and a payload per
//! datagram, or runs of them cut into GSO segments), and the reusable storage they are
//! laid out in.
//!
//! Layer: quiver-transport, the socket layer. Allocates only when a batch outgrows its
//! storage; the kernel reads the parts where they are.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::net::{Ipv4Addr, SocketAddr};

/// One message of a [`Gather`]: `part_count` consecutive parts from `first_part`, sent as
/// one datagram or, with `segment_size`, as one GSO send cut into datagrams of
/// `segment_size` bytes (the last may be shorter). A segment may span any number of parts
/// (e.g. a header and a payload), and a part may span segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherRun {
    /// Where the datagrams go.
    pub destination: SocketAddr,
    /// Index of the message's first part among the gather's parts.
    pub first_part: usize,
    /// Number of parts (0 sends an empty datagram).
    pub part_count: usize,
    /// GSO segment size in bytes, or `None` for one plain datagram.
    pub segment_size: Option<u16>,
}

/// Reusable storage of a [`Gather`] (iovecs and message descriptors): allocated once, so
/// that laying out and sending a batch allocates nothing (unless a batch outgrows it).
#[derive(Debug, Default)]
pub struct GatherBuffer {
    pub(super) iovecs: Vec<libc::iovec>,
    pub(super) runs: Vec<GatherRun>,
}

// SAFETY: the iovecs' pointers are only read through a `Gather`, which borrows the buffer
// for no longer than the slices they were made from; outside one they are never
// dereferenced (a new `Gather` clears them first).
unsafe impl Send for GatherBuffer {}

impl GatherBuffer {
    /// Storage for `parts` parts and `messages` messages before it grows.
    pub fn with_capacity(parts: usize, messages: usize) -> GatherBuffer {
        GatherBuffer {
            iovecs: Vec::with_capacity(parts),
            runs: Vec::with_capacity(messages),
        }
    }

    /// Starts laying out a new batch (empty) in this storage.
    pub fn gather<'a>(&'a mut self) -> Gather<'a> {
        self.iovecs.clear();
        self.runs.clear();
        Gather {
            buffer: self,
            parts: PhantomData,
        }
    }
}

/// Messages laid out for [`UdpSocket::send_gather`](super::UdpSocket::send_gather), each gathered
/// from its parts in place (the kernel reads them where they are, no copy here): slices that live
/// at least as long as the gather.
#[derive(Debug)]
pub struct Gather<'a> {
    pub(super) buffer: &'a mut GatherBuffer,
    parts: PhantomData<&'a [u8]>,
}

impl<'a> Gather<'a> {
    /// Starts a new message to `destination`, a plain datagram until
    /// [`Gather::set_segment_size`]; the parts pushed next belong to it.
    pub fn start_message(&mut self, destination: SocketAddr) {
        self.buffer.runs.push(GatherRun {
            destination,
            first_part: self.buffer.iovecs.len(),
            part_count: 0,
            segment_size: None,
        });
    }

    /// Appends `part` to the current message (starting one to an unspecified address if
    /// there is none: call [`Gather::start_message`] first).
    pub fn push_part(&mut self, part: &'a [u8]) {
        if self.buffer.runs.is_empty() {
            self.start_message(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        }
        self.buffer.iovecs.push(libc::iovec {
            // The kernel only reads through this pointer (sendmmsg).
            iov_base: part.as_ptr() as *mut c_void,
            iov_len: part.len(),
        });
        if let Some(run) = self.buffer.runs.last_mut() {
            run.part_count += 1;
        }
    }

    /// Makes the current message a GSO send of `segment_size`-byte datagrams (`None`: one plain
    /// datagram). Needs [`UdpSocket::gso_supported`](super::UdpSocket::gso_supported) and the
    /// kernel's limits ([`max_gso_bytes`](super::max_gso_bytes)) when sent.
    pub fn set_segment_size(&mut self, segment_size: Option<u16>) {
        if let Some(run) = self.buffer.runs.last_mut() {
            run.segment_size = segment_size;
        }
    }

    /// The messages laid out so far.
    pub fn messages(&self) -> &[GatherRun] {
        &self.buffer.runs
    }

    /// Parts laid out so far (all messages).
    pub fn part_count(&self) -> usize {
        self.buffer.iovecs.len()
    }

    /// The parts of message `index` (none if there is no such message).
    pub fn parts(&self, index: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        let range = self
            .buffer
            .runs
            .get(index)
            .map_or(0..0, |run| run.first_part..run.first_part + run.part_count);
        self.buffer.iovecs[range].iter().map(|iovec| {
            // SAFETY: every iovec was made by `push_part` from a `&'a [u8]`, alive for 'a
            // (the buffer is borrowed for 'a and cleared before it is reused).
            unsafe { std::slice::from_raw_parts(iovec.iov_base as *const u8, iovec.iov_len) }
        })
    }
}
