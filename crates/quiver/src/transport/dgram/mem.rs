//! The `mem` transport: datagrams through in-process queues, addressed like UDP sockets.
//! It exists so that the reliable protocol and the endpoint code above it can be exercised
//! (and conformance-tested) without the kernel's network stack. Like UDP it may drop: a
//! queue holding more than [`QUEUE_BYTES`] drops what arrives, and the protocol recovers.
//!
//! Layer: the datagram transport's in-process socket, below the engine. It moves bytes
//! between queues of this process; it knows nothing of frames or connections.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, OnceLock};

use quiver_transport::sys;

/// Bytes a receive queue holds before it drops (like a socket's receive buffer).
pub(crate) const QUEUE_BYTES: usize = 16 << 20;

/// Queued datagrams with their sources, and their total bytes.
type Datagrams = (VecDeque<(SocketAddr, Vec<u8>)>, usize);

#[derive(Debug)]
struct Queue {
    datagrams: Mutex<Datagrams>,
    wakeup: OwnedFd,
}

fn registry() -> &'static Mutex<HashMap<SocketAddr, Arc<Queue>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<SocketAddr, Arc<Queue>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A bound in-process datagram socket.
#[derive(Debug)]
pub(crate) struct MemSocket {
    addr: SocketAddr,
    queue: Arc<Queue>,
}

impl MemSocket {
    /// Binds `addr` in this process.
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<MemSocket> {
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        if reg.contains_key(&addr) {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        let queue = Arc::new(Queue {
            datagrams: Mutex::new((VecDeque::new(), 0)),
            wakeup: sys::eventfd()?,
        });
        reg.insert(addr, queue.clone());
        Ok(MemSocket { addr, queue })
    }

    /// Sends one datagram (header then payload) to `to`; silently dropped when nobody is
    /// bound there or its queue is full, as UDP would.
    pub(crate) fn send(&self, to: SocketAddr, header: &[u8], payload: &[u8]) -> io::Result<()> {
        deliver(self.addr, to, header, payload).map(drop)
    }

    /// Takes one datagram into `buf` (truncated like UDP if longer), or None.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        let mut q = self
            .queue
            .datagrams
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some((from, datagram)) = q.0.pop_front() else {
            sys::eventfd_drain(self.queue.wakeup.as_raw_fd());
            return Ok(None);
        };
        q.1 -= datagram.len();
        let n = datagram.len().min(buf.len());
        buf[..n].copy_from_slice(&datagram[..n]);
        Ok(Some((n, from)))
    }

    /// Readable when datagrams are queued (may also be readable spuriously).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.queue.wakeup.as_raw_fd()
    }
}

/// Queues one datagram (header then payload) from `from` for the socket bound at `to`.
/// Returns whether it was queued: not when nobody is bound there or its queue is full (the
/// datagram is dropped, as UDP would). Any `from` will do: like UDP, the receiver learns
/// the source from the datagram's envelope only.
pub(crate) fn deliver(
    from: SocketAddr,
    to: SocketAddr,
    header: &[u8],
    payload: &[u8],
) -> io::Result<bool> {
    let target = registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&to)
        .cloned();
    let Some(target) = target else {
        return Ok(false);
    };
    let len = header.len() + payload.len();
    {
        let mut q = target.datagrams.lock().unwrap_or_else(|p| p.into_inner());
        if q.1 + len > QUEUE_BYTES {
            return Ok(false);
        }
        let mut datagram = Vec::with_capacity(len);
        datagram.extend_from_slice(header);
        datagram.extend_from_slice(payload);
        q.0.push_back((from, datagram));
        q.1 += len;
    }
    sys::eventfd_signal(target.wakeup.as_raw_fd())?;
    Ok(true)
}

impl Drop for MemSocket {
    fn drop(&mut self) {
        registry()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.addr);
    }
}
