//! [`ReadinessSet`]: one descriptor (an epoll set) that becomes readable when any of
//! several sockets is, so that a process receiving on one socket per link sleeps in one
//! `poll`.
//!
//! Layer: quiver-transport, the socket layer. `unsafe` only around system calls.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::errno::check;

/// One descriptor that becomes readable when any of several sockets (or other
/// descriptors) is: an epoll set, for a process that receives on one UDP socket per link and
/// sleeps in `poll` on a single descriptor.
#[derive(Debug)]
pub struct ReadinessSet {
    epoll: OwnedFd,
    members: usize,
}

impl ReadinessSet {
    /// An empty set.
    ///
    /// # Errors
    /// `epoll_create1` failed (descriptor limits).
    pub fn new() -> io::Result<ReadinessSet> {
        // SAFETY: plain syscall; the result is a fresh descriptor.
        let raw = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `raw` was just created and is owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(ReadinessSet { epoll, members: 0 })
    }

    /// Adds `fd` (level-triggered, readable). The caller keeps `fd` open while the set is
    /// used; closing it removes it from the set. (A raw descriptor: an invalid one is an
    /// error from the kernel, nothing worse.)
    ///
    /// # Errors
    /// `epoll_ctl` failed (e.g. `fd` is not open or not pollable, or already in the set).
    pub fn add(&mut self, fd: RawFd) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: self.members as u64,
        };
        // SAFETY: both descriptors are valid; `event` is a valid epoll_event.
        check(unsafe {
            libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event)
        })?;
        self.members += 1;
        Ok(())
    }

    /// Number of descriptors added.
    pub fn len(&self) -> usize {
        self.members
    }

    /// Which members are readable right now, without waiting: bit `i` set for the `i`-th
    /// descriptor added. A member at index 64 or above being ready sets every bit (the
    /// caller then looks at all of them). One `epoll_wait` instead of a receive attempt on
    /// every member: a process busy-polling several sockets, most of them idle, skips the
    /// empty ones.
    ///
    /// # Errors
    /// `epoll_wait` failed (interrupted calls are retried).
    pub fn ready_now(&self) -> io::Result<u64> {
        const EVENTS: usize = 64;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        let count = loop {
            // SAFETY: `events` is a valid, writable array of EVENTS epoll_event; timeout 0
            // never blocks.
            let result = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    EVENTS as libc::c_int,
                    0,
                )
            };
            match check(result) {
                Ok(count) => break count as usize,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        };
        let mut ready = 0u64;
        for event in &events[..count.min(EVENTS)] {
            let index = event.u64;
            if index >= 64 {
                return Ok(u64::MAX);
            }
            ready |= 1 << index;
        }
        Ok(ready)
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.members == 0
    }
}

impl AsRawFd for ReadinessSet {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::udp::{RecvBatch, UdpSocket, MAX_COALESCED_BYTES};

    #[test]
    fn readiness_set_wakes_for_any_member() {
        let receivers: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap())
            .collect();
        let mut set = ReadinessSet::new().unwrap();
        for socket in &receivers {
            set.add(socket.as_raw_fd()).unwrap();
        }
        assert_eq!(set.len(), 3);
        let mut fds = [libc::pollfd {
            fd: set.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(crate::sys::poll(&mut fds, Some(Duration::ZERO)).unwrap(), 0);
        let mut sender = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        sender
            .send_to(receivers[2].local_address(), b"wake")
            .unwrap();
        assert_eq!(
            crate::sys::poll(&mut fds, Some(Duration::from_secs(5))).unwrap(),
            1
        );
        // Only the member that has a datagram is reported (bit 2), until it is taken.
        assert_eq!(set.ready_now().unwrap(), 1 << 2);
        sender
            .send_to(receivers[0].local_address(), b"also")
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while set.ready_now().unwrap() != 0b101 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(set.ready_now().unwrap(), 0b101);
        let mut receivers = receivers;
        let mut batch = RecvBatch::new(4, MAX_COALESCED_BYTES);
        assert_eq!(receivers[2].recv_batch(&mut batch).unwrap(), 1);
        assert_eq!(set.ready_now().unwrap(), 0b001);
    }
}
