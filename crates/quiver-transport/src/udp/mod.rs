//! A batched UDP socket: `sendmmsg`/`recvmmsg`, UDP segmentation offload (`UDP_SEGMENT`,
//! "GSO") and receive offload (`UDP_GRO`), large socket buffers and busy polling.
//!
//! Layer: operating-system side of the UDP transport. This module moves datagrams and
//! nothing else: it knows no frame format, keeps no connection state and never retries. It
//! allocates only in constructors ([`UdpSocket::bind`], [`RecvBatch::new`]); the per-call
//! paths ([`UdpSocket::send_batch`], [`UdpSocket::recv_batch`]) reuse preallocated
//! `mmsghdr`/`iovec`/address/control arrays. For one datagram at a time (a latency path),
//! [`UdpSocket::recv_one`] is one `recvmsg` into a batch's first slot (a cheaper
//! `recvfrom` while GRO is off: [`UdpSocket::gro_off_if_idle`]) and
//! [`UdpSocket::send_one`] one `send`/`sendto`: no `recvmmsg`/`sendmmsg` loop around them,
//! and no message header for the kernel to copy in on the send.
//!
//! Offloads, in short:
//! - **GSO** (`UDP_SEGMENT`): one send of up to ~64 KiB with a segment size `S` leaves the
//!   socket as `ceil(len / S)` datagrams of `S` bytes (the last one may be shorter). The
//!   caller lays out each segment's header inside the buffer itself, or gathers the
//!   segments from anywhere with [`UdpSocket::send_gather`]: the kernel cuts the *total*
//!   of a message's iovecs into segments whatever their layout, so a run of
//!   `(header, payload)` pairs, each pair one segment, leaves as one GSO send without
//!   copying the payloads next to their headers.
//! - **GRO** (`UDP_GRO`): the kernel may hand several datagrams of one flow to a single
//!   receive, concatenated, with the segment size in a control message. [`RecvMessage::datagrams`]
//!   splits such a buffer back into datagrams. Receive buffers must then be at least
//!   [`MAX_COALESCED_BYTES`] long or a coalesced receive is truncated.
//!
//! Errors are plain `io::Error`s: `EAGAIN` appears as
//! [`io::ErrorKind::WouldBlock`](std::io::ErrorKind::WouldBlock), ICMP errors (e.g. `ECONNREFUSED`)
//! as whatever the kernel reports.
//!
//! # Files
//!
//! - `socket.rs`: [`UdpSocket`]: binding, connecting, offloads, options and the send paths
//!   ([`OutDatagram`], and the preallocated `sendmmsg` arrays); `receive.rs`: its receive
//!   paths ([`SplitRecv`] for the scattering receive); `gather.rs`: messages gathered from
//!   parts in place ([`Gather`]).
//! - `receive_batch.rs`: the preallocated receive buffers ([`RecvBatch`]) and what they
//!   hold ([`RecvMessage`], [`Datagrams`]).
//! - `readiness.rs`: one descriptor for several sockets ([`ReadinessSet`]).
//! - `options.rs`: socket options for any socket; `limits.rs`: sizes and limits;
//!   `path_mtu.rs`: the path MTU the kernel knows for a destination;
//!   `address.rs`: socket addresses to and from the kernel's layout; `control.rs`: control
//!   messages; `clock.rs`: the monotonic clock; `errno.rs`: system call results.

pub(crate) mod address;
mod clock;
mod control;
mod errno;
mod gather;
mod limits;
pub(crate) mod options;
mod path_mtu;
mod readiness;
mod receive;
mod receive_batch;
mod socket;

pub use clock::{coarse_resolution_ns, monotonic_coarse_ns, monotonic_ns};
pub use gather::{Gather, GatherBuffer, GatherRun};
pub use limits::{
    max_gso_bytes, DEFAULT_SEND_BATCH, DEFAULT_SOCKET_BUFFER_BYTES, MAX_COALESCED_BYTES,
    MAX_DATAGRAM_BYTES_V4, MAX_DATAGRAM_BYTES_V6, MAX_GATHER_PARTS, MAX_GSO_SEGMENTS,
};
pub(crate) use options::set_int_option;
pub use options::{set_buffer_sizes, set_busy_poll, set_nonblocking};
pub use path_mtu::ip_udp_header_bytes;
pub use readiness::ReadinessSet;
pub use receive::SplitRecv;
pub use receive_batch::{Datagrams, RecvBatch, RecvMessage};
pub use socket::{OutDatagram, UdpSocket};

#[cfg(test)]
mod tests;
