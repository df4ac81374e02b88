//! The doorbell: how a sender wakes a receiving endpoint that is asleep.
//!
//! Each receiving endpoint owns an eventfd (its pollable file descriptor) and one shared
//! cache line holding an `armed` flag. A receiver about to sleep (or about to hand its fd
//! to poll/epoll) arms the flag, re-checks its rings, and only then sleeps. A sender, after
//! publishing a record, rings the bell: a fence, one load of the flag and — only when it is
//! armed — a swap and an eventfd write. Busy-polling receivers therefore cost senders no
//! system call at all. Either the sender sees the flag or the receiver sees the record:
//! both sides order their store before their load. Where the kernel allows it the fences
//! are asymmetric ([`crate::barrier`]): the sender's is a compiler fence, and the receiver,
//! which arms only before it sleeps, runs a barrier on the sender's CPU too.
//!
//! Layout of the doorbell memfd (one page): `armed u32` at 0, `signals u32` at 4 (eventfd
//! writes made, so the owner drains the eventfd only when something was written),
//! `heavy u32` at 8 (1: the owner arms with [`crate::barrier::heavy_fence`], so senders
//! that registered for it may ring with a compiler fence).
//!
//! Layer: quiver-transport, the operating-system side of the shm transport. Owns the
//! doorbell's shared flag and eventfd; knows nothing of rings or messages.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::barrier;
use crate::sys::{self, Mapping};

const DOORBELL_BYTES: usize = 4096;
const OFF_ARMED: usize = 0;
const OFF_SIGNALS: usize = 4;
const OFF_HEAVY: usize = 8;

fn word(map: &Mapping, off: usize) -> &AtomicU32 {
    debug_assert!(off + 4 <= map.len() && off.is_multiple_of(4));
    // SAFETY: `off` is one of the 4-aligned constants above, inside a page-sized mapping
    // that lives as long as the borrow; AtomicU32 tolerates concurrent cross-process access.
    unsafe { &*(map.as_ptr().add(off) as *const AtomicU32) }
}

/// The receiving endpoint's side of its doorbell.
#[derive(Debug)]
pub struct Doorbell {
    map: Mapping,
    memfd: OwnedFd,
    eventfd: OwnedFd,
    drained: u32,
    /// Whether arming runs the heavy fence (said to senders in the page).
    heavy: bool,
}

impl Doorbell {
    /// Creates a doorbell: a shared page and an eventfd.
    pub fn new() -> io::Result<Doorbell> {
        let memfd = sys::memfd("quiver-doorbell", DOORBELL_BYTES)?;
        let map = Mapping::map(&memfd, DOORBELL_BYTES)?;
        let heavy = barrier::heavy_fence_works();
        word(&map, OFF_HEAVY).store(u32::from(heavy), Ordering::Relaxed);
        Ok(Doorbell {
            map,
            memfd,
            eventfd: sys::eventfd()?,
            drained: 0,
            heavy,
        })
    }

    /// Duplicates of the descriptors a sender needs: (shared page, eventfd).
    pub fn clone_remote_fds(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        Ok((self.memfd.try_clone()?, self.eventfd.try_clone()?))
    }

    /// Asks senders to signal the eventfd on their next record. The caller must re-check its
    /// rings after this returns and before sleeping.
    #[inline]
    pub fn arm(&self) {
        let armed = word(&self.map, OFF_ARMED);
        if armed.load(Ordering::Relaxed) == 0 {
            armed.store(1, Ordering::Relaxed);
        }
        // Pairs with the fence in `RemoteDoorbell::ring`.
        if self.heavy {
            barrier::heavy_fence();
        } else {
            barrier::store_load_fence(false);
        }
    }

    /// Whether the flag is still armed (no sender has rung since `arm`).
    pub fn is_armed(&self) -> bool {
        word(&self.map, OFF_ARMED).load(Ordering::Relaxed) != 0
    }

    /// Empties the eventfd if any sender signalled it since the last drain.
    #[inline]
    pub fn drain(&mut self) {
        let signals = word(&self.map, OFF_SIGNALS).load(Ordering::Acquire);
        if signals != self.drained {
            self.drained = signals;
            sys::eventfd_drain(self.eventfd.as_raw_fd());
        }
    }
}

impl AsRawFd for Doorbell {
    fn as_raw_fd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }
}

/// A sender's handle on a receiving endpoint's doorbell.
#[derive(Debug)]
pub struct RemoteDoorbell {
    map: Mapping,
    eventfd: OwnedFd,
    /// Whether ringing orders its store before its load with a compiler fence alone: this
    /// process registered for the owner's heavy fence, and the owner said it issues one.
    light: bool,
}

impl RemoteDoorbell {
    /// Maps a doorbell from the descriptors its owner sent, once the page's seals are
    /// checked (see [`sys::SHARED_SEALS`]).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidData`] for a page not sealed against resizing (or of the
    /// wrong size); the system's error when it cannot be inspected or mapped.
    pub fn attach(memfd: &OwnedFd, eventfd: OwnedFd) -> io::Result<RemoteDoorbell> {
        let seals = sys::seals(memfd)?;
        if seals & sys::SHARED_SEALS != sys::SHARED_SEALS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the doorbell's memory file is not sealed against resizing (its seals are \
                     {seals:#x}, required {:#x}: shrink, grow and seal)",
                    sys::SHARED_SEALS
                ),
            ));
        }
        let len = sys::file_len(memfd)?;
        if len != DOORBELL_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("doorbell is {len} bytes, expected {DOORBELL_BYTES}"),
            ));
        }
        let map = Mapping::map(memfd, DOORBELL_BYTES)?;
        // A page that says more than 1 is not one quiver wrote: full fences then.
        let light =
            word(&map, OFF_HEAVY).load(Ordering::Relaxed) == 1 && barrier::light_fence_allowed();
        Ok(RemoteDoorbell {
            map,
            eventfd,
            light,
        })
    }

    /// Wakes the receiver if it is armed. Call after publishing a record.
    #[inline]
    pub fn ring(&self) {
        barrier::store_load_fence(self.light);
        let armed = word(&self.map, OFF_ARMED);
        if armed.load(Ordering::Relaxed) != 0 && armed.swap(0, Ordering::AcqRel) != 0 {
            word(&self.map, OFF_SIGNALS).fetch_add(1, Ordering::Release);
            let _ = sys::eventfd_signal(self.eventfd.as_raw_fd());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn readable(fd: RawFd) -> bool {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        sys::poll(&mut p, Some(Duration::ZERO)).unwrap() == 1
    }

    /// The doorbell's page is sealed: whoever holds it cannot resize it (the kernel
    /// refuses), and a page without those seals is refused before it is mapped.
    #[test]
    fn the_doorbell_page_cannot_be_resized_and_an_unsealed_one_is_refused() {
        let bell = Doorbell::new().unwrap();
        let (memfd, efd) = bell.clone_remote_fds().unwrap();
        assert_eq!(sys::seals(&memfd).unwrap(), sys::SHARED_SEALS);
        let page = std::fs::File::from(memfd.try_clone().unwrap());
        for len in [0, DOORBELL_BYTES as u64 - 1, DOORBELL_BYTES as u64 * 2] {
            let refused = page.set_len(len).unwrap_err();
            assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "to {len}");
        }
        assert_eq!(page.metadata().unwrap().len(), DOORBELL_BYTES as u64);
        let forged = sys::memfd_unsealed("quiver-doorbell", DOORBELL_BYTES).unwrap();
        let refused = RemoteDoorbell::attach(&forged, efd.try_clone().unwrap()).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
        assert!(refused.to_string().contains("not sealed"), "{refused}");
        RemoteDoorbell::attach(&memfd, efd).unwrap();
    }

    /// Every round races the sender's record against the receiver's arm-and-re-check (the
    /// receiver arms at once, never spinning): if both read the other's old value, the
    /// receiver sleeps on a record it missed. With the asymmetric fences (the sender's a
    /// compiler fence where the kernel has `membarrier`), no round may sleep that way.
    #[test]
    fn no_wake_up_is_lost_between_a_sender_and_an_arming_receiver() {
        use std::sync::atomic::AtomicU32;
        use std::sync::Arc;
        const ROUNDS: u32 = 100_000;
        let mut bell = Doorbell::new().unwrap();
        let (memfd, efd) = bell.clone_remote_fds().unwrap();
        let remote = RemoteDoorbell::attach(&memfd, efd).unwrap();
        let asymmetric = barrier::heavy_fence_works() && barrier::light_fence_allowed();
        assert_eq!(remote.light, asymmetric);
        let record = Arc::new(AtomicU32::new(0));
        let taken = Arc::new(AtomicU32::new(0));
        let sender = std::thread::spawn({
            let (record, taken) = (record.clone(), taken.clone());
            move || {
                for i in 1..=ROUNDS {
                    while taken.load(Ordering::Acquire) != i - 1 {
                        std::hint::spin_loop();
                    }
                    record.store(i, Ordering::Release);
                    remote.ring();
                }
            }
        });
        for i in 1..=ROUNDS {
            while record.load(Ordering::Acquire) != i {
                bell.arm();
                if record.load(Ordering::Acquire) == i {
                    break;
                }
                let mut p = [libc::pollfd {
                    fd: bell.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let woke = sys::poll(&mut p, Some(Duration::from_secs(5))).unwrap() == 1;
                assert!(
                    woke,
                    "round {i}: slept 5 s though the record says {}: a lost wake-up \
                     (asymmetric fences: {asymmetric})",
                    record.load(Ordering::Acquire)
                );
                bell.drain();
            }
            taken.store(i, Ordering::Release);
        }
        sender.join().unwrap();
    }

    #[test]
    fn rings_only_when_armed() {
        let mut bell = Doorbell::new().unwrap();
        // Duplicates, as if the descriptors had crossed a socket.
        let (memfd, efd) = bell.clone_remote_fds().unwrap();
        let remote = RemoteDoorbell::attach(&memfd, efd).unwrap();
        remote.ring();
        assert!(!readable(bell.as_raw_fd()));
        bell.arm();
        remote.ring();
        assert!(readable(bell.as_raw_fd()));
        assert!(!bell.is_armed());
        remote.ring(); // disarmed: no second signal
        bell.drain();
        assert!(!readable(bell.as_raw_fd()));
    }
}
