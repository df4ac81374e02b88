//! A udp link socket driven by io_uring (`QUIVER_UDP_IO=uring`): the engine drives it like
//! the xdp link (queue datagrams, flush them with one submission, take one arrival at a
//! time, read in place in its buffer) through `quiver_transport::uring`, with the link's
//! fault injector when faults are on. Where io_uring is refused, the link falls back to a
//! plain udp socket and says why once per process (`bind_uring`).
//!
//! Layer: the datagram transport's socket I/O, below the engine, beside `udp_io`.
//! Docs: docs/decisions/0084-io-uring-udp-engine.md.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use quiver_transport::uring::{RxBuffer, UringOptions, UringUdpSocket};

use super::connection::Entry;
use super::path_mtu::lower_datagram_size;
use crate::config::UdpIoMode;
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
use crate::transport::fault::FaultInjector;

/// One arrival on an io_uring link.
#[derive(Debug)]
pub(super) enum UringArrival {
    /// In its receive buffer, at `payload` (give the buffer back with
    /// [`UringIo::release`]); `truncated`: longer than the buffer.
    InBuffer {
        buffer: RxBuffer,
        payload: Range<usize>,
        from: SocketAddr,
        truncated: bool,
    },
    /// Copied into the caller's buffer, this long (faults on arrival).
    Copied { len: usize, from: SocketAddr },
}

/// A link's io_uring socket, with its fault injector (None: off). Everything it sends and
/// receives goes through the injector when there is one.
#[derive(Debug)]
pub(super) struct UringIo {
    pub(super) socket: UringUdpSocket,
    pub(super) faults: Option<Box<FaultInjector>>,
    /// Times a connection's datagram size was lowered because the path's MTU fell.
    pub(super) datagram_size_lowered: u64,
}

/// Whether the fallback to plain sockets was reported already (once per process).
static FALLBACK_REPORTED: AtomicBool = AtomicBool::new(false);

/// Binds `addr` with io_uring as `mode` asks; Ok(None) when io_uring is refused here (the
/// caller binds a plain socket instead; the reason is logged once per process).
///
/// # Errors
/// The bind itself failed (`Error::Bind`, as for a plain socket).
pub(super) fn bind_uring(addr: SocketAddr, mode: UdpIoMode) -> Result<Option<UringUdpSocket>> {
    let options = UringOptions {
        sqpoll: mode == UdpIoMode::UringSqpoll,
        ..UringOptions::default()
    };
    match UringUdpSocket::bind(addr, options) {
        Ok(socket) => Ok(Some(socket)),
        Err(e) if e.step == "bind" => Err(Error::bind("udp", addr, e.error)),
        Err(e) => {
            if !FALLBACK_REPORTED.swap(true, Ordering::Relaxed) {
                tracing::warn!(target: ENDPOINT_LOG, local = %addr, "QUIVER_UDP_IO={}: {e}; the udp transport uses plain sockets instead", mode.name());
            }
            Ok(None)
        }
    }
}

impl UringIo {
    /// Queues one datagram (header then payload) to `to`; sent by [`UringIo::flush`].
    pub(super) fn send(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let UringIo { socket, faults, .. } = self;
        match faults {
            None => socket.send(to, header, payload),
            Some(faults) => faults.send(to, &[header, payload], &mut |to, datagram| {
                socket.send(to, datagram, &[])
            }),
        }
    }

    /// Submits what was queued.
    pub(super) fn flush(&mut self) {
        self.socket.flush();
    }

    /// After a flush of `entry`'s datagrams to `to`: when the kernel refused some because
    /// the path's MTU fell below them, the connection cuts datagrams the path carries from
    /// now on (GSO stays on, as on a plain udp socket).
    pub(super) fn follow_path_mtu(&mut self, entry: &mut Entry, to: SocketAddr) {
        if let Some(room) = self.socket.take_path_room(to) {
            let local = self.socket.local_address();
            if lower_datagram_size(entry, local, to, room) {
                self.datagram_size_lowered += 1;
            }
        }
    }

    /// Gives an arrival's buffer back to the kernel.
    pub(super) fn release(&mut self, buffer: RxBuffer) {
        self.socket.release(buffer);
    }

    /// Takes one datagram: in place in its buffer, or with faults on arrival always in
    /// `buf`, the next one the injector lets through.
    pub(super) fn recv_next(&mut self, buf: &mut [u8]) -> Option<UringArrival> {
        let Some(faults) = self.faults.as_deref_mut().filter(|f| f.on_arrival()) else {
            return self.socket.recv_next().map(|d| UringArrival::InBuffer {
                buffer: d.buffer,
                payload: d.payload,
                from: d.from,
                truncated: d.truncated,
            });
        };
        loop {
            if let Some((from, datagram)) = faults.pop_arrived() {
                let len = datagram.len().min(buf.len());
                buf[..len].copy_from_slice(&datagram[..len]);
                return Some(UringArrival::Copied { len, from });
            }
            let d = self.socket.recv_next()?;
            faults.receive(d.from, &d.buffer[d.payload.clone()]);
            self.socket.release(d.buffer);
        }
    }
}
