//! The transmit arena: one registered area that datagrams are copied into before their
//! send entries are submitted, allocated in order and freed in order as the sends complete
//! (a send's bytes and destination address must stay where they are until its completion:
//! the kernel may read them when the send goes out later than its submission, and with
//! SQPOLL the submission itself happens later), and the records of the sends in flight.
//!
//! Layer: quiver-transport, the io_uring socket. Safe code: the kernel's use of the area is
//! [`super::socket`]'s business.

use std::mem::zeroed;

/// Where a send stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SendState {
    /// Its completion has not arrived yet.
    InFlight,
    /// A zero-copy send whose result arrived; its notification (buffer released) has not.
    AwaitingNotification,
    /// Done: its bytes may be reused once every older send is done too.
    Done,
}

/// One send in flight: its bytes in the area and its destination; for a GSO run (several
/// datagrams of one size, one send), the message header, its iovec and the control
/// message carrying the segment size, which the kernel reads when the send goes out.
pub(super) struct SendRecord {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) address: libc::sockaddr_storage,
    pub(super) address_len: libc::socklen_t,
    pub(super) state: SendState,
    /// Datagrams in the send: 1, or a GSO run's.
    pub(super) segments: usize,
    /// Bytes of each datagram (a GSO run's segment; the last may be shorter).
    pub(super) segment: usize,
    /// Where it goes.
    pub(super) to: Option<std::net::SocketAddr>,
    pub(super) msg: libc::msghdr,
    pub(super) iov: libc::iovec,
    pub(super) control: [u64; 4],
}

impl std::fmt::Debug for SendRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendRecord")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("state", &self.state)
            .finish()
    }
}

/// The area and the ring of send records (both allocated once: neither moves, so the
/// pointers handed to the kernel stay valid).
#[derive(Debug)]
pub(super) struct TxArena {
    pub(super) area: Box<[u8]>,
    pub(super) records: Box<[SendRecord]>,
    /// The oldest record in flight, and how many are.
    first: usize,
    count: usize,
}

impl TxArena {
    pub(super) fn new(bytes: usize, records: usize) -> TxArena {
        TxArena {
            area: vec![0u8; bytes].into_boxed_slice(),
            records: (0..records)
                .map(|_| SendRecord {
                    start: 0,
                    end: 0,
                    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
                    address: unsafe { zeroed() },
                    address_len: 0,
                    state: SendState::Done,
                    segments: 1,
                    segment: 0,
                    to: None,
                    // SAFETY: msghdr and iovec are plain old data; all-zero is valid.
                    msg: unsafe { zeroed() },
                    // SAFETY: as above.
                    iov: unsafe { zeroed() },
                    control: [0; 4],
                })
                .collect(),
            first: 0,
            count: 0,
        }
    }

    /// Sends in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.count
    }

    /// Takes `len` bytes of the area and a record for one send; None when either is used up
    /// (wait for completions). Returns the record's index.
    pub(super) fn alloc(&mut self, len: usize) -> Option<usize> {
        let capacity = self.records.len();
        if self.count == capacity || len > self.area.len() {
            return None;
        }
        let start = if self.count == 0 {
            0
        } else {
            let head = self.records[self.first].start;
            let newest = &self.records[(self.first + self.count - 1) % capacity];
            let tail = newest.end;
            if newest.start >= head {
                // Live bytes are head..tail: room after tail, else before head.
                if self.area.len() - tail >= len {
                    tail
                } else if head >= len {
                    0
                } else {
                    return None;
                }
            } else if head - tail >= len {
                // Wrapped: live bytes are head..end and 0..tail.
                tail
            } else {
                return None;
            }
        };
        let index = (self.first + self.count) % capacity;
        let record = &mut self.records[index];
        record.start = start;
        record.end = start + len;
        record.state = SendState::InFlight;
        record.segments = 1;
        record.segment = len;
        self.count += 1;
        Some(index)
    }

    /// Grows record `index`, the newest, by `len` bytes right after its end (a GSO run
    /// taking one more datagram); returns where they go. None when it is not the newest or
    /// the room after it is short.
    pub(super) fn extend_newest(&mut self, index: usize, len: usize) -> Option<usize> {
        if self.count == 0 || index != (self.first + self.count - 1) % self.records.len() {
            return None;
        }
        let head = self.records[self.first].start;
        let record = &mut self.records[index];
        let limit = if self.count == 1 || record.start >= head {
            self.area.len()
        } else {
            head
        };
        if limit - record.end < len {
            return None;
        }
        let offset = record.end;
        record.end += len;
        Some(offset)
    }

    /// Marks record `index` as being in `state`, then frees the done records at the front.
    /// An index that is not in flight (a stale completion) is ignored.
    pub(super) fn set_state(&mut self, index: usize, state: SendState) {
        if !self.is_live(index) {
            return;
        }
        self.records[index].state = state;
        while self.count > 0 && self.records[self.first].state == SendState::Done {
            self.first = (self.first + 1) % self.records.len();
            self.count -= 1;
        }
    }

    /// Whether `index` is one of the records in flight.
    pub(super) fn is_live(&self, index: usize) -> bool {
        let capacity = self.records.len();
        index < capacity && (index + capacity - self.first) % capacity < self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of the live byte ranges: no two live records overlap, all within the area.
    fn check(arena: &TxArena, live: &[usize]) {
        for (i, &a) in live.iter().enumerate() {
            let ra = &arena.records[a];
            assert!(ra.end <= arena.area.len());
            for &b in &live[i + 1..] {
                let rb = &arena.records[b];
                assert!(
                    ra.end <= rb.start || rb.end <= ra.start,
                    "{ra:?} overlaps {rb:?}"
                );
            }
        }
    }

    #[test]
    fn allocations_never_overlap_and_free_in_order() {
        let mut arena = TxArena::new(1000, 8);
        let mut live: Vec<usize> = Vec::new();
        let mut seed = 12345u64;
        for _ in 0..20_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 33) as usize % 400 + 1;
            if !seed.is_multiple_of(3) {
                if let Some(index) = arena.alloc(len) {
                    live.push(index);
                }
            } else if !live.is_empty() {
                // Completions arrive in any order.
                let pick = (seed >> 40) as usize % live.len();
                let index = live.remove(pick);
                arena.set_state(index, SendState::Done);
                // Done but not yet freed records stay live for the overlap check.
            }
            let still: Vec<usize> = (0..arena.count)
                .map(|k| (arena.first + k) % arena.records.len())
                .collect();
            check(&arena, &still);
            assert!(arena.in_flight() <= 8);
        }
    }

    #[test]
    fn only_the_newest_record_grows_and_never_over_another() {
        let mut arena = TxArena::new(100, 4);
        let a = arena.alloc(30).unwrap();
        assert_eq!(arena.extend_newest(a, 20), Some(30));
        let b = arena.alloc(30).unwrap();
        assert_eq!(arena.extend_newest(a, 1), None, "a is not the newest");
        assert_eq!(arena.extend_newest(b, 20), Some(80));
        assert_eq!(arena.extend_newest(b, 1), None, "the area ends");
        arena.set_state(a, SendState::Done);
        // b lives at 50..100; c wraps to 0..40; it may grow up to b's start only.
        let c = arena.alloc(40).unwrap();
        assert_eq!(arena.records[c].start, 0);
        assert_eq!(arena.extend_newest(c, 10), Some(40));
        assert_eq!(arena.extend_newest(c, 1), None);
    }

    #[test]
    fn a_full_arena_refuses_then_recovers() {
        let mut arena = TxArena::new(100, 4);
        let a = arena.alloc(60).unwrap();
        assert!(arena.alloc(60).is_none());
        let b = arena.alloc(40).unwrap();
        assert!(arena.alloc(1).is_none());
        arena.set_state(b, SendState::Done);
        // b is done but a is older: nothing freed yet.
        assert!(arena.alloc(1).is_none());
        arena.set_state(a, SendState::AwaitingNotification);
        assert!(arena.alloc(1).is_none());
        arena.set_state(a, SendState::Done);
        assert_eq!(arena.in_flight(), 0);
        assert!(arena.alloc(100).is_some());
        // A stale completion changes nothing.
        arena.set_state(3, SendState::Done);
        assert_eq!(arena.in_flight(), 1);
    }
}
