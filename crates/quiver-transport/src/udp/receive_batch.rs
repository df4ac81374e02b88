//! The preallocated receive state of [`UdpSocket`](super::UdpSocket)'s receive paths
//! ([`RecvBatch`]: buffers, `mmsghdr`s, addresses, control buffers) and what one receive
//! holds: [`RecvMessage`], split into datagrams by [`Datagrams`].
//!
//! Layer: quiver-transport, the socket layer. Allocates only in [`RecvBatch::new`].

use std::ffi::c_void;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddr};

use super::address::read_socket_address;
use super::control::{gro_segment_size, ControlBuffer, CONTROL_WORDS};

/// Preallocated receive state for [`UdpSocket::recv_batch`](super::UdpSocket::recv_batch):
/// `capacity` buffers of `buffer_bytes` each, plus the kernel-facing headers, addresses and control
/// buffers.
#[derive(Debug)]
pub struct RecvBatch {
    pub(super) data: Vec<u8>,
    pub(super) buffer_bytes: usize,
    pub(super) headers: Vec<libc::mmsghdr>,
    pub(super) iovecs: Vec<libc::iovec>,
    pub(super) addresses: Vec<libc::sockaddr_storage>,
    controls: Vec<ControlBuffer>,
    pub(super) metadata: Vec<RecvMetadata>,
    pub(super) received: usize,
    /// Headers `..pointed` point at their buffer, address and control slots (set once:
    /// the buffers are allocated in `new` and never move).
    pointed: usize,
    /// Headers `..dirty` may hold lengths a receive wrote (the kernel writes only the
    /// headers it fills); `prepare` resets them.
    dirty: usize,
}

// SAFETY: the raw pointers inside `headers`/`iovecs` only ever point into this struct's own
// heap buffers, which never move; nothing is shared with another thread.
unsafe impl Send for RecvBatch {}

/// What the kernel said about one received message.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecvMetadata {
    pub(super) source: SocketAddr,
    pub(super) length_bytes: usize,
    pub(super) segment_bytes: usize,
    pub(super) truncated: bool,
}

impl RecvBatch {
    /// Allocates `capacity` receive buffers of `buffer_bytes` each (both at least 1). With GRO on,
    /// use [`MAX_COALESCED_BYTES`](super::MAX_COALESCED_BYTES); otherwise the largest datagram
    /// expected.
    pub fn new(capacity: usize, buffer_bytes: usize) -> RecvBatch {
        let capacity = capacity.clamp(1, 1024);
        let buffer_bytes = buffer_bytes.max(1);
        let unspecified = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        RecvBatch {
            data: vec![0; capacity * buffer_bytes],
            buffer_bytes,
            // SAFETY: mmsghdr, iovec and sockaddr_storage are plain old data; all-zero
            // (null pointers, zero lengths) is valid.
            headers: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            iovecs: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            addresses: vec![unsafe { zeroed() }; capacity],
            controls: vec![[0; CONTROL_WORDS]; capacity],
            metadata: vec![
                RecvMetadata {
                    source: unspecified,
                    length_bytes: 0,
                    segment_bytes: 0,
                    truncated: false,
                };
                capacity
            ],
            received: 0,
            pointed: 0,
            dirty: 0,
        }
    }

    /// How many messages one receive can return.
    pub fn capacity(&self) -> usize {
        self.headers.len()
    }

    /// Length of each receive buffer in bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Number of messages the last [`UdpSocket::recv_batch`](super::UdpSocket::recv_batch)
    /// returned.
    pub fn len(&self) -> usize {
        self.received
    }

    /// Whether the last receive returned nothing.
    pub fn is_empty(&self) -> bool {
        self.received == 0
    }

    /// Message `index` of the last receive.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn message(&self, index: usize) -> RecvMessage<'_> {
        assert!(index < self.received, "message index out of range");
        let metadata = &self.metadata[index];
        let start = index * self.buffer_bytes;
        RecvMessage {
            data: &self.data[start..start + metadata.length_bytes],
            source: metadata.source,
            segment_bytes: metadata.segment_bytes,
            truncated: metadata.truncated,
        }
    }

    /// The messages of the last receive, in order.
    pub fn iter(&self) -> impl Iterator<Item = RecvMessage<'_>> {
        (0..self.received).map(move |index| self.message(index))
    }

    /// Readies the first `count` headers for a receive: points those never pointed yet at
    /// their buffers, address and control slots, and gives back their full lengths to those
    /// a receive wrote since (the kernel overwrites the lengths of the headers it fills).
    /// A batch receive that finds one message so resets one header, not the whole batch.
    pub(super) fn prepare(&mut self, count: usize) {
        for index in 0..self.dirty {
            self.reset_lengths(index);
        }
        self.dirty = 0;
        let data = self.data.as_mut_ptr();
        let count = count.min(self.headers.len());
        for index in self.pointed..count {
            self.iovecs[index] = libc::iovec {
                // In bounds: index < capacity and data holds capacity * buffer_bytes bytes.
                iov_base: data.wrapping_add(index * self.buffer_bytes) as *mut c_void,
                iov_len: self.buffer_bytes,
            };
            let header = &mut self.headers[index].msg_hdr;
            header.msg_name = &mut self.addresses[index] as *mut _ as *mut c_void;
            header.msg_iov = &mut self.iovecs[index];
            header.msg_iovlen = 1;
            header.msg_control = self.controls[index].as_mut_ptr() as *mut c_void;
            self.reset_lengths(index);
        }
        self.pointed = self.pointed.max(count);
    }

    /// Header `index`'s lengths and flags as a receive expects them.
    fn reset_lengths(&mut self, index: usize) {
        let header = &mut self.headers[index].msg_hdr;
        header.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        header.msg_controllen = size_of::<ControlBuffer>();
        header.msg_flags = 0;
        self.headers[index].msg_len = 0;
    }

    /// Records that a receive wrote the lengths of the first `count` headers (the kernel
    /// writes them only when it returns a message: an empty receive leaves them).
    pub(super) fn written(&mut self, count: usize) {
        self.dirty = self.dirty.max(count.min(self.headers.len()));
    }

    /// Reads lengths, sources and GRO segment sizes of the first `received` headers.
    pub(super) fn finish(&mut self, received: usize) {
        for index in 0..received {
            let message = &self.headers[index];
            let length_bytes = (message.msg_len as usize).min(self.buffer_bytes);
            let header = &message.msg_hdr;
            let source = read_socket_address(&self.addresses[index], header.msg_namelen)
                .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
            let segment_bytes = gro_segment_size(header).unwrap_or(length_bytes);
            self.metadata[index] = RecvMetadata {
                source,
                length_bytes,
                segment_bytes,
                truncated: header.msg_flags & libc::MSG_TRUNC != 0,
            };
        }
        self.received = received;
    }
}

/// One received message: a single datagram, or several coalesced by GRO.
#[derive(Clone, Copy, Debug)]
pub struct RecvMessage<'a> {
    /// The bytes received (all segments, concatenated).
    pub data: &'a [u8],
    /// Who sent it.
    pub source: SocketAddr,
    /// Size of each datagram inside `data` (the last may be shorter); equals `data.len()`
    /// when the kernel did not coalesce.
    pub segment_bytes: usize,
    /// The buffer was too small and the kernel cut the message (`MSG_TRUNC`).
    pub truncated: bool,
}

impl<'a> RecvMessage<'a> {
    /// The datagrams inside this message, in the order they were sent. An empty datagram
    /// yields one empty slice.
    pub fn datagrams(&self) -> Datagrams<'a> {
        Datagrams {
            remaining: self.data,
            segment_bytes: self.segment_bytes.max(1),
            empty_pending: self.data.is_empty(),
        }
    }
}

/// Iterator over the datagrams of a [`RecvMessage`].
#[derive(Clone, Debug)]
pub struct Datagrams<'a> {
    remaining: &'a [u8],
    segment_bytes: usize,
    empty_pending: bool,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.empty_pending {
            self.empty_pending = false;
            return Some(&[]);
        }
        if self.remaining.is_empty() {
            return None;
        }
        let take = self.segment_bytes.min(self.remaining.len());
        let (head, tail) = self.remaining.split_at(take);
        self.remaining = tail;
        Some(head)
    }
}
