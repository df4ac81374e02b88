//! A single-producer, single-consumer byte ring in shared memory: one directed edge.
//!
//! The receiver creates the ring (a memfd) and hands it to the one sender that connected;
//! the sender writes records, the receiver reads them. Layout (see docs/protocol.md, "shm
//! ring"):
//!
//! ```text
//!  offset   written by   contents
//!  0        producer     sender_waiting u32 | producer_closed u32          (cache line 0)
//!  64       consumer     head u64 | rndv_done u64 | wake_seq u32 | consumer_closed u32 |
//!                        cts_seq u64 | cts_addr u64 | cts_split u64 | cts_len u64       (line 1)
//!  128      creator      magic u64 | version u32 | pad u32 | capacity u64 | salt u64   (line 2)
//!  192      both         split_claim u64 | split_done u64                              (line 3)
//!  256      producer     data: `capacity` bytes of 64-byte-aligned records
//!
//!  record at absolute stream position p (p % 64 == 0), stored at p % capacity:
//!  0   stamp u64       = (p + 1) ^ salt, written last with release ordering: the "full" flag
//!  8   kind u8 | 3 reserved bytes | frag_len u32
//!  16  total_len u64   message length (MSG), remaining context (CONT), message length (RNDV)
//!  24  payload         frag_len bytes; the record occupies round_up(24 + frag_len, 64) bytes
//! ```
//!
//! A poll reads one cache line: the stamp and, for short messages, the payload with it.
//! Stamps are salted with a per-ring random value so that stale payload bytes from an
//! earlier lap can never pass for a record by accident.
//!
//! Trust: the memory is shared with another process that may crash or misbehave. Every
//! value read from it is validated before use (kind, lengths against the capacity and the
//! record's room before the end, the producer's view of `head`), every loop is bounded, and
//! a violation is a [`RingError`] on this ring only. Payload bytes are copied with raw
//! pointer copies; a peer scribbling on them concurrently can corrupt its own message, not
//! our memory.
//!
//! Layer: quiver-transport, the operating-system side of the shm transport. Owns the ring's
//! layout in shared memory and its memory ordering; decides nothing about protocols (which
//! message goes by which ring is the caller's choice).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::sys::{self, Mapping};

/// Bytes of the control area before the data.
pub const DATA_OFFSET: usize = 256;
/// Record alignment and the cache-line size we assume.
pub const LINE: u64 = 64;
/// Bytes of a record header before its payload.
pub const HEADER_BYTES: u64 = 24;
/// Payload bytes that fit in the record's first cache line with the header.
pub const INLINE_BYTES: u64 = LINE - HEADER_BYTES;
/// Smallest allowed data capacity.
pub const MIN_CAPACITY: u64 = 4096;
/// Largest allowed data capacity (1 GiB).
pub const MAX_CAPACITY: u64 = 1 << 30;
/// Largest message length a record may announce (1 TiB): anything above is corruption.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 40;

const MAGIC: u64 = 0x7175_6976_6572_5231; // "quiverR1"
const VERSION: u32 = 1;

const OFF_SENDER_WAITING: usize = 0;
const OFF_PRODUCER_CLOSED: usize = 4;
const OFF_HEAD: usize = 64;
const OFF_RNDV_DONE: usize = 72;
const OFF_WAKE_SEQ: usize = 80;
const OFF_CONSUMER_CLOSED: usize = 84;
const OFF_CTS_SEQ: usize = 88;
const OFF_CTS_ADDR: usize = 96;
const OFF_CTS_SPLIT: usize = 104;
const OFF_CTS_LEN: usize = 112;
const OFF_SPLIT_CLAIM: usize = 192;
const OFF_SPLIT_DONE: usize = 200;
/// Set in `split_done` when the sender could not write its part (the receiver then copies it).
const SPLIT_FAILED: u64 = 1 << 63;
const OFF_MAGIC: usize = 128;
const OFF_VERSION: usize = 136;
const OFF_CAPACITY: usize = 144;
const OFF_SALT: usize = 152;

const REC_STAMP: usize = 0;
const REC_KIND: usize = 8;
const REC_FRAG_LEN: usize = 12;
const REC_TOTAL_LEN: usize = 16;

/// What a record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// First (possibly only) fragment of an eagerly copied message; `total_len` is its length.
    Msg = 1,
    /// A further fragment of the message started by the last `Msg`.
    Cont = 2,
    /// Rendezvous request: the payload is the sender's (address u64, length u64); the
    /// receiver copies the data itself and then counts the request in `rndv_done`.
    Rndv = 3,
    /// Filler up to the end of the data area; the next record starts at offset 0.
    Pad = 4,
    /// The sender closed this edge; nothing follows.
    Close = 5,
    /// The tag of the messages that follow on this ring (sticky until the next `Tag`):
    /// the payload is the tag (u64, native order), `total_len` is 0. Written only right
    /// before a message whose tag differs from the last one announced; a ring that never
    /// carries one carries tag 0.
    Tag = 6,
    /// Like `Tag`, but the messages that follow are active messages: the payload (u64,
    /// native order) is the handler id (high 32 bits) and the length of the header that
    /// starts each message (low 32 bits). Sticky like `Tag`; a `Tag` record ends it.
    Am = 7,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Msg,
            2 => Kind::Cont,
            3 => Kind::Rndv,
            4 => Kind::Pad,
            5 => Kind::Close,
            6 => Kind::Tag,
            7 => Kind::Am,
            _ => return None,
        })
    }
}

/// A violation of the ring protocol by the other side, or a ring that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// A value read from shared memory is impossible.
    #[error("shared ring corrupted: {field} = {value} ({reason})")]
    Corrupt {
        /// Which field was wrong.
        field: &'static str,
        /// The value read.
        value: u64,
        /// Why it is impossible.
        reason: &'static str,
    },
    /// The ring's identifying header does not match what a ring of ours must hold.
    #[error("not a quiver ring or wrong version: {field} = {value:#x}")]
    BadHeader {
        /// Which field was wrong.
        field: &'static str,
        /// The value read.
        value: u64,
    },
}

/// Bytes a record with `frag_len` payload bytes occupies (header + payload, 64-aligned).
pub fn record_size(frag_len: u64) -> u64 {
    (HEADER_BYTES + frag_len).div_ceil(LINE) * LINE
}

/// Where a record of `size` bytes goes when the producer is at stream position `tail`:
/// returns (`pad`, bytes of filler needed first so it does not cross the end of the data
/// area; the record then starts at `tail + pad`).
pub fn placement(tail: u64, size: u64, capacity: u64) -> u64 {
    let off = tail & (capacity - 1);
    if off + size > capacity {
        capacity - off
    } else {
        0
    }
}

/// The largest payload one record may carry in a ring of `capacity` bytes: a record never
/// takes more than a quarter of the ring, so several are in flight at once.
pub fn max_frag_len(capacity: u64) -> u64 {
    capacity / 4 - HEADER_BYTES
}

fn stamp(pos: u64, salt: u64) -> u64 {
    pos.wrapping_add(1) ^ salt
}

/// Copies `len` bytes from `src` to `dst` (non-overlapping).
///
/// glibc's memcpy (`rep movsb` for these sizes) runs at ~2-3 GB/s instead of 30-80 GB/s on
/// the development machines' AMD CPUs when `dst - src` is 1..=31 modulo 4096 (measured in
/// docs/PERFORMANCE.md). User buffers land anywhere relative to the ring, so a transfer would
/// hit that by chance in some runs; in that window we copy with plain 64-byte vector moves.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and the ranges must not
/// overlap.
#[inline]
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize) {
    let distance = (dst as usize).wrapping_sub(src as usize) & 4095;
    if len < 256 || !(1..64).contains(&distance) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut i = 0;
    while i + 64 <= len {
        // SAFETY: i + 64 <= len, within both ranges; unaligned access is allowed.
        unsafe {
            let v = std::ptr::read_unaligned(src.add(i) as *const [u64; 8]);
            std::ptr::write_unaligned(dst.add(i) as *mut [u64; 8], v);
        }
        i += 64;
    }
    // SAFETY: the remaining tail is within both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
}

/// Accessors for the control words of a mapped ring.
#[derive(Debug)]
struct Shared {
    map: Arc<Mapping>,
}

impl Shared {
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= DATA_OFFSET);
        // SAFETY: `off` is a 4-aligned offset inside the control area (checked above in debug,
        // and all callers pass the constants above); the mapping is page-aligned and lives as
        // long as `self`. AtomicU32 has the layout of u32 and tolerates concurrent access.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= DATA_OFFSET);
        // SAFETY: as in `u32_at`, for an 8-aligned offset in the control area.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: every ring mapping is DATA_OFFSET + capacity bytes long (checked in
        // `create`/`attach`), so the data area starts inside it.
        unsafe { self.map.as_ptr().add(DATA_OFFSET) }
    }

    /// The stamp word of the record slot at data offset `off` (64-aligned, < capacity).
    fn stamp_at(&self, off: u64) -> &AtomicU64 {
        // SAFETY: callers pass a 64-aligned offset below the capacity, so 8 bytes fit.
        unsafe { &*(self.data().add(off as usize + REC_STAMP) as *const AtomicU64) }
    }

    fn read_u64(&self, off: u64) -> u64 {
        // SAFETY: callers pass an 8-aligned offset inside the data area with 8 bytes room.
        // A volatile read: the other process may change it, we validate what we get.
        unsafe { std::ptr::read_volatile(self.data().add(off as usize) as *const u64) }
    }

    fn read_u32(&self, off: u64) -> u32 {
        // SAFETY: as `read_u64`, for 4 bytes.
        unsafe { std::ptr::read_volatile(self.data().add(off as usize) as *const u32) }
    }

    fn read_u8(&self, off: u64) -> u8 {
        // SAFETY: as `read_u64`, for 1 byte.
        unsafe { std::ptr::read_volatile(self.data().add(off as usize)) }
    }
}

/// The receiving half of a ring.
#[derive(Debug)]
pub struct Consumer {
    shared: Shared,
    capacity: u64,
    salt: u64,
    /// Stream position of the next record to read.
    head: u64,
    /// `head` as last published to the producer.
    published_head: u64,
    /// Rendezvous requests completed (published immediately).
    rndv_done: u64,
}

/// A record found at the consumer's head, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// What it carries (never `Pad`: those are skipped).
    pub kind: Kind,
    /// Payload bytes in this record.
    pub frag_len: u64,
    /// See the layout: message length for `Msg` and `Rndv`.
    pub total_len: u64,
    /// Stream position of the record.
    pub pos: u64,
    /// Bytes the record occupies.
    pub size: u64,
}

impl Consumer {
    /// Creates a ring of `capacity` data bytes (a power of two in
    /// [`MIN_CAPACITY`]..=[`MAX_CAPACITY`]) in a new memfd; returns the consumer and the
    /// descriptor to hand to the producer.
    pub fn create(capacity: u64, salt: u64) -> std::io::Result<(Consumer, std::os::fd::OwnedFd)> {
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("ring capacity {capacity} must be a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}"),
            ));
        }
        let len = DATA_OFFSET + capacity as usize;
        let fd = sys::memfd("quiver-ring", len)?;
        let map = Mapping::map(&fd, len)?;
        write_header(&map, capacity, salt);
        let consumer = Consumer {
            shared: Shared { map: Arc::new(map) },
            capacity,
            salt,
            head: 0,
            published_head: 0,
            rndv_done: 0,
        };
        Ok((consumer, fd))
    }

    /// Data capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Looks at the record at the head without consuming it. Filler records are skipped
    /// (consumed) here. `Ok(None)` means nothing has arrived yet.
    #[inline]
    pub fn peek(&mut self) -> Result<Option<Record>, RingError> {
        // Bounded: at most one filler precedes a real record.
        for _ in 0..2 {
            match self.record_at(self.head)? {
                None => {
                    // Drained: hand all consumed space back now, so a sender waiting for
                    // room does not wait for a later batch.
                    self.flush();
                    return Ok(None);
                }
                Some(rec) if rec.kind == Kind::Pad => {
                    self.head += rec.size;
                }
                Some(rec) => return Ok(Some(rec)),
            }
        }
        Err(RingError::Corrupt {
            field: "kind",
            value: Kind::Pad as u64,
            reason: "two filler records in a row",
        })
    }

    /// Whether a record (a message's or a filler) is at the head, known from its stamp
    /// alone: a readiness test that does not parse the record (`peek` does, and reports
    /// a corrupt one). With none there, the space consumed so far is handed back, as
    /// `peek` does when the ring is drained.
    #[inline]
    pub fn has_record(&mut self) -> bool {
        if self.stamped(self.head) {
            return true;
        }
        self.flush();
        false
    }

    /// Whether the record at stream position `pos` has been written: its stamp is the
    /// one for `pos` (the stamp is stored last, with release ordering).
    #[inline]
    fn stamped(&self, pos: u64) -> bool {
        let off = pos & (self.capacity - 1);
        self.shared.stamp_at(off).load(Ordering::Acquire) == stamp(pos, self.salt)
    }

    /// Looks at the record at stream position `pos` (at or after the head, 64-aligned),
    /// used to check that all fragments of a message have arrived before taking it.
    #[inline]
    pub fn record_at(&self, pos: u64) -> Result<Option<Record>, RingError> {
        debug_assert!(pos.is_multiple_of(LINE) && pos >= self.head);
        if !self.stamped(pos) {
            return Ok(None);
        }
        let off = pos & (self.capacity - 1);
        let kind_raw = self.shared.read_u8(off + REC_KIND as u64);
        let frag_len = u64::from(self.shared.read_u32(off + REC_FRAG_LEN as u64));
        let total_len = self.shared.read_u64(off + REC_TOTAL_LEN as u64);
        let kind = Kind::from_u8(kind_raw).ok_or(RingError::Corrupt {
            field: "kind",
            value: u64::from(kind_raw),
            reason: "unknown record kind",
        })?;
        let room = self.capacity - off;
        let size = if kind == Kind::Pad {
            if off == 0 || frag_len != 0 {
                return Err(RingError::Corrupt {
                    field: "pad",
                    value: off,
                    reason: "filler at the start of the ring or with a payload",
                });
            }
            room
        } else {
            let size = record_size(frag_len);
            if frag_len > max_frag_len(self.capacity) || size > room {
                return Err(RingError::Corrupt {
                    field: "frag_len",
                    value: frag_len,
                    reason: "record larger than the ring allows or crossing its end",
                });
            }
            size
        };
        if total_len > MAX_MESSAGE_BYTES {
            return Err(RingError::Corrupt {
                field: "total_len",
                value: total_len,
                reason: "above the largest message length",
            });
        }
        match kind {
            Kind::Msg if frag_len > total_len => Err(RingError::Corrupt {
                field: "frag_len",
                value: frag_len,
                reason: "first fragment longer than its message",
            }),
            Kind::Rndv if frag_len != 16 => Err(RingError::Corrupt {
                field: "frag_len",
                value: frag_len,
                reason: "rendezvous request must carry 16 bytes",
            }),
            Kind::Tag | Kind::Am if frag_len != 8 || total_len != 0 => Err(RingError::Corrupt {
                field: "frag_len",
                value: frag_len,
                reason: "tag record must carry 8 bytes and no message length",
            }),
            _ => Ok(Some(Record {
                kind,
                frag_len,
                total_len,
                pos,
                size,
            })),
        }
    }

    /// Copies the payload of `rec` into `dst` (which must be `rec.frag_len` bytes long).
    #[inline]
    pub fn copy_payload(&self, rec: &Record, dst: &mut [u8]) {
        assert_eq!(
            dst.len() as u64,
            rec.frag_len,
            "destination must match the fragment"
        );
        let off = (rec.pos & (self.capacity - 1)) + HEADER_BYTES;
        // SAFETY: `record_at` checked that header + frag_len lies inside the data area; `dst`
        // is exclusively borrowed and does not overlap shared memory we map.
        unsafe {
            copy_bytes(
                dst.as_mut_ptr(),
                self.shared.data().add(off as usize),
                dst.len(),
            )
        };
    }

    /// The tag a `Tag` record carries (an `Am` record's handler id and header length).
    pub fn tag_of(&self, rec: &Record) -> u64 {
        debug_assert!(matches!(rec.kind, Kind::Tag | Kind::Am));
        let off = (rec.pos & (self.capacity - 1)) + HEADER_BYTES;
        self.shared.read_u64(off)
    }

    /// The (address, length) a rendezvous record carries.
    pub fn rndv_target(&self, rec: &Record) -> (u64, u64) {
        debug_assert_eq!(rec.kind, Kind::Rndv);
        let off = (rec.pos & (self.capacity - 1)) + HEADER_BYTES;
        (self.shared.read_u64(off), self.shared.read_u64(off + 8))
    }

    /// Consumes `rec` (which must be the record at the head). Publishes the new head to the
    /// producer when a quarter of the ring has been freed or the producer is waiting.
    #[inline]
    pub fn consume(&mut self, rec: &Record) {
        debug_assert_eq!(rec.pos, self.head);
        self.head = rec.pos + rec.size;
        if self.head - self.published_head >= self.capacity / 4
            || self
                .shared
                .u32_at(OFF_SENDER_WAITING)
                .load(Ordering::Relaxed)
                != 0
        {
            self.publish();
        }
    }

    /// Sequence number the next completed rendezvous request will get.
    pub fn next_rndv_seq(&self) -> u64 {
        self.rndv_done + 1
    }

    /// Clear-to-send for a split rendezvous copy: the producer may write bytes
    /// `split..len` of request `seq` to `dest_addr + split` in our memory.
    pub fn post_cts(&self, seq: u64, dest_addr: u64, split: u64, len: u64) {
        self.shared
            .u64_at(OFF_CTS_ADDR)
            .store(dest_addr, Ordering::Relaxed);
        self.shared
            .u64_at(OFF_CTS_SPLIT)
            .store(split, Ordering::Relaxed);
        self.shared
            .u64_at(OFF_CTS_LEN)
            .store(len, Ordering::Relaxed);
        self.shared
            .u64_at(OFF_CTS_SEQ)
            .store(seq, Ordering::Release);
    }

    /// Tries to take the second part of request `seq` for ourselves; false if the producer
    /// took it first.
    pub fn claim_second_part(&self, seq: u64) -> bool {
        claim(&self.shared, seq, 0)
    }

    /// Whether the producer finished its part of request `seq`: `None` while it is still
    /// copying, `Some(false)` if it failed (copy it yourself).
    pub fn second_part_done(&self, seq: u64) -> Option<bool> {
        let done = self.shared.u64_at(OFF_SPLIT_DONE).load(Ordering::Acquire);
        if done & !SPLIT_FAILED == seq {
            Some(done & SPLIT_FAILED == 0)
        } else {
            None
        }
    }

    /// Counts one completed rendezvous request and tells the producer at once.
    pub fn complete_rndv(&mut self) {
        self.rndv_done += 1;
        self.shared
            .u64_at(OFF_RNDV_DONE)
            .store(self.rndv_done, Ordering::Release);
        self.publish();
    }

    /// Makes every consumed byte available to the producer and wakes it if it sleeps.
    pub fn publish(&mut self) {
        self.shared
            .u64_at(OFF_HEAD)
            .store(self.head, Ordering::Release);
        self.published_head = self.head;
        // Pairs with the fence in `Producer::prepare_wait`: either the producer sees our
        // head, or we see its waiting flag.
        fence(Ordering::SeqCst);
        if self
            .shared
            .u32_at(OFF_SENDER_WAITING)
            .load(Ordering::Relaxed)
            != 0
        {
            let seq = self.shared.u32_at(OFF_WAKE_SEQ);
            seq.fetch_add(1, Ordering::Release);
            sys::futex_wake(seq);
        }
    }

    /// Publishes if anything consumed is still unpublished (call before idling).
    #[inline]
    pub fn flush(&mut self) {
        if self.head != self.published_head {
            self.publish();
        }
    }

    /// Whether the producer is asleep waiting for this side's progress (ring space, or a
    /// rendezvous to be pulled): the flag [`Producer::prepare_wait`] raises.
    pub fn producer_waiting(&self) -> bool {
        self.shared
            .u32_at(OFF_SENDER_WAITING)
            .load(Ordering::Relaxed)
            != 0
    }

    /// Whether the producer marked the ring closed.
    pub fn producer_closed(&self) -> bool {
        self.shared
            .u32_at(OFF_PRODUCER_CLOSED)
            .load(Ordering::Acquire)
            != 0
    }

    /// Marks the ring closed from this side and wakes a waiting producer.
    pub fn close(&mut self) {
        self.shared
            .u32_at(OFF_CONSUMER_CLOSED)
            .store(1, Ordering::Release);
        let seq = self.shared.u32_at(OFF_WAKE_SEQ);
        seq.fetch_add(1, Ordering::Release);
        sys::futex_wake(seq);
    }

    /// Re-reads the identifying header and the producer's words; a peer that scribbled over
    /// them is caught here (called when idle, not per message).
    pub fn verify(&self) -> Result<(), RingError> {
        check_header(&self.shared, Some((self.capacity, self.salt))).map(|_| ())?;
        for (field, off) in [
            ("sender_waiting", OFF_SENDER_WAITING),
            ("producer_closed", OFF_PRODUCER_CLOSED),
        ] {
            let v = self.shared.u32_at(off).load(Ordering::Relaxed);
            if v > 1 {
                return Err(RingError::Corrupt {
                    field,
                    value: u64::from(v),
                    reason: "flag neither 0 nor 1",
                });
            }
        }
        Ok(())
    }
}

fn write_header(map: &Mapping, capacity: u64, salt: u64) {
    let base = map.as_ptr();
    // SAFETY: the header offsets are aligned and inside the control area of a mapping of at
    // least DATA_OFFSET bytes; the ring is not shared with anybody yet.
    unsafe {
        std::ptr::write(base.add(OFF_MAGIC) as *mut u64, MAGIC);
        std::ptr::write(base.add(OFF_VERSION) as *mut u32, VERSION);
        std::ptr::write(base.add(OFF_CAPACITY) as *mut u64, capacity);
        std::ptr::write(base.add(OFF_SALT) as *mut u64, salt);
    }
}

/// Validates the identifying header; returns (capacity, salt). With `expect`, also checks
/// they are unchanged.
fn check_header(shared: &Shared, expect: Option<(u64, u64)>) -> Result<(u64, u64), RingError> {
    let magic = shared.u64_at(OFF_MAGIC).load(Ordering::Acquire);
    if magic != MAGIC {
        return Err(RingError::BadHeader {
            field: "magic",
            value: magic,
        });
    }
    let version = shared.u32_at(OFF_VERSION).load(Ordering::Relaxed);
    if version != VERSION {
        return Err(RingError::BadHeader {
            field: "version",
            value: u64::from(version),
        });
    }
    let capacity = shared.u64_at(OFF_CAPACITY).load(Ordering::Relaxed);
    let salt = shared.u64_at(OFF_SALT).load(Ordering::Relaxed);
    let map_ok = shared.map.len() as u64 == DATA_OFFSET as u64 + capacity;
    if !capacity.is_power_of_two()
        || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
        || !map_ok
        || expect.is_some_and(|(c, _)| c != capacity)
    {
        return Err(RingError::BadHeader {
            field: "capacity",
            value: capacity,
        });
    }
    if expect.is_some_and(|(_, s)| s != salt) {
        return Err(RingError::BadHeader {
            field: "salt",
            value: salt,
        });
    }
    Ok((capacity, salt))
}

/// Claims the second part of split request `seq` for `who` (0 consumer, 1 producer):
/// exactly one side wins. The word holds `seq << 1 | who` of the last claim.
fn claim(shared: &Shared, seq: u64, who: u64) -> bool {
    let word = shared.u64_at(OFF_SPLIT_CLAIM);
    let mut current = word.load(Ordering::Acquire);
    loop {
        if current >> 1 >= seq {
            return false;
        }
        match word.compare_exchange(current, seq << 1 | who, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => current = now,
        }
    }
}

/// The sending half of a ring.
#[derive(Debug)]
pub struct Producer {
    shared: Shared,
    capacity: u64,
    salt: u64,
    /// Stream position of the next record to write.
    tail: u64,
    /// The consumer's head as last read.
    cached_head: u64,
    /// Rendezvous requests written so far.
    rndv_posted: u64,
    /// The tag of the next message started (`Msg` or `Rndv`), set by the caller.
    next_tag: u64,
    /// Which record announces `next_tag`: `Tag`, or `Am` for active messages.
    next_kind: Kind,
    /// The tag the consumer applies to the next message: the last `Tag` record written
    /// (0 before any).
    wire_tag: u64,
    /// The kind of that record (`Tag` before any).
    wire_kind: Kind,
}

impl Producer {
    /// Maps a ring received from its consumer, once its seals are checked (see
    /// [`sys::SHARED_SEALS`]), and validates its header.
    pub fn attach(fd: &std::os::fd::OwnedFd) -> Result<Producer, AttachError> {
        let seals = sys::seals(fd).map_err(AttachError::Io)?;
        if seals & sys::SHARED_SEALS != sys::SHARED_SEALS {
            return Err(AttachError::Unsealed { seals });
        }
        let len = sys::file_len(fd).map_err(AttachError::Io)?;
        if len <= DATA_OFFSET || len > DATA_OFFSET + MAX_CAPACITY as usize {
            return Err(AttachError::Ring(RingError::BadHeader {
                field: "file length",
                value: len as u64,
            }));
        }
        let map = Mapping::map(fd, len).map_err(AttachError::Io)?;
        let shared = Shared { map: Arc::new(map) };
        let (capacity, salt) = check_header(&shared, None).map_err(AttachError::Ring)?;
        let head = shared.u64_at(OFF_HEAD).load(Ordering::Acquire);
        if head != 0 {
            return Err(AttachError::Ring(RingError::BadHeader {
                field: "head",
                value: head,
            }));
        }
        Ok(Producer {
            shared,
            capacity,
            salt,
            tail: 0,
            cached_head: 0,
            rndv_posted: 0,
            next_tag: 0,
            next_kind: Kind::Tag,
            wire_tag: 0,
            wire_kind: Kind::Tag,
        })
    }

    /// Data capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Largest payload of one record.
    pub fn max_frag_len(&self) -> u64 {
        max_frag_len(self.capacity)
    }

    /// Re-reads the consumer's head, validating it.
    fn refresh_head(&mut self) -> Result<(), RingError> {
        let head = self.shared.u64_at(OFF_HEAD).load(Ordering::Acquire);
        if head < self.cached_head || head > self.tail || !head.is_multiple_of(LINE) {
            return Err(RingError::Corrupt {
                field: "head",
                value: head,
                reason: "consumer position outside what was written",
            });
        }
        self.cached_head = head;
        Ok(())
    }

    /// Bytes needed to write a record of `frag_len` payload bytes now (filler included).
    fn bytes_needed(&self, frag_len: u64) -> u64 {
        let size = record_size(frag_len);
        placement(self.tail, size, self.capacity) + size
    }

    /// Whether records with these payload lengths fit now, in order (re-reading the head
    /// if the cached one says no).
    pub fn fits(
        &mut self,
        frag_lens: impl Iterator<Item = u64> + Clone,
    ) -> Result<bool, RingError> {
        let need = |tail0: u64, cap: u64| {
            let mut tail = tail0;
            for len in frag_lens.clone() {
                let size = record_size(len);
                tail += placement(tail, size, cap) + size;
            }
            tail - tail0
        };
        let needed = need(self.tail, self.capacity);
        if self.capacity - (self.tail - self.cached_head) >= needed {
            return Ok(true);
        }
        self.refresh_head()?;
        Ok(self.capacity - (self.tail - self.cached_head) >= needed)
    }

    /// Sets the tag of the messages started from now on (`Msg` and `Rndv` records): a
    /// message whose tag differs from the last one announced is preceded by a `Tag` record,
    /// written with it or not at all.
    #[inline]
    pub fn set_tag(&mut self, tag: u64) {
        self.next_tag = tag;
        self.next_kind = Kind::Tag;
    }

    /// Sets the messages started from now on to be active messages with `word` (handler id
    /// and header length, see [`Kind::Am`]); announced by an `Am` record as
    /// [`Producer::set_tag`] announces a tag. [`Producer::set_tag`] ends it.
    #[inline]
    pub fn set_am(&mut self, word: u64) {
        self.next_tag = word;
        self.next_kind = Kind::Am;
    }

    /// Whether the next message start needs a `Tag` or `Am` record before it.
    #[inline]
    fn tag_changes(&self) -> bool {
        self.next_tag != self.wire_tag || self.next_kind != self.wire_kind
    }

    /// Records a message start needs before it: 1 when a `Tag` record must precede it.
    #[inline]
    pub fn tag_records_needed(&self) -> usize {
        usize::from(self.tag_changes())
    }

    /// Writes one record if it fits now; `Ok(false)` if the ring is too full. A message
    /// start (`Msg`, `Rndv`) whose tag ([`Producer::set_tag`]) differs from the last one
    /// announced is preceded by a `Tag` record, both written or neither.
    #[inline]
    pub fn try_write(
        &mut self,
        kind: Kind,
        total_len: u64,
        payload: &[u8],
    ) -> Result<bool, RingError> {
        if self.tag_changes() && matches!(kind, Kind::Msg | Kind::Rndv) {
            return self.try_write_tagged(kind, total_len, payload);
        }
        self.try_write_record(kind, total_len, payload)
    }

    /// [`Producer::try_write`] of a message start that needs a `Tag` record first.
    #[cold]
    #[inline(never)]
    fn try_write_tagged(
        &mut self,
        kind: Kind,
        total_len: u64,
        payload: &[u8],
    ) -> Result<bool, RingError> {
        if !self.fits([8, payload.len() as u64].into_iter())? {
            return Ok(false);
        }
        let tag = self.next_tag.to_ne_bytes();
        let wrote = self.try_write_record(self.next_kind, 0, &tag)?;
        debug_assert!(wrote, "space was checked just above");
        self.wire_tag = self.next_tag;
        self.wire_kind = self.next_kind;
        self.try_write_record(kind, total_len, payload)
    }

    /// Writes one record (no tag) if it fits now.
    #[inline]
    fn try_write_record(
        &mut self,
        kind: Kind,
        total_len: u64,
        payload: &[u8],
    ) -> Result<bool, RingError> {
        let frag_len = payload.len() as u64;
        assert!(
            frag_len <= self.max_frag_len(),
            "fragment of {frag_len} bytes exceeds the ring's limit"
        );
        let needed = self.bytes_needed(frag_len);
        if self.capacity - (self.tail - self.cached_head) < needed {
            self.refresh_head()?;
            if self.capacity - (self.tail - self.cached_head) < needed {
                return Ok(false);
            }
        }
        let size = record_size(frag_len);
        let pad = placement(self.tail, size, self.capacity);
        if pad > 0 {
            self.write_record(Kind::Pad, 0, &[]);
            self.tail += pad;
        }
        self.write_record(kind, total_len, payload);
        self.tail += size;
        Ok(true)
    }

    fn write_record(&mut self, kind: Kind, total_len: u64, payload: &[u8]) {
        let off = self.tail & (self.capacity - 1);
        let data = self.shared.data();
        // SAFETY: the caller reserved room: header + payload lie inside the data area at
        // `off`, in bytes the consumer has released (head validated above). The stamp is
        // written last, with release ordering, after everything it guards.
        unsafe {
            let rec = data.add(off as usize);
            std::ptr::write_volatile(rec.add(REC_KIND), kind as u8);
            std::ptr::write_volatile(rec.add(REC_FRAG_LEN) as *mut u32, payload.len() as u32);
            std::ptr::write_volatile(rec.add(REC_TOTAL_LEN) as *mut u64, total_len);
            copy_bytes(
                rec.add(HEADER_BYTES as usize),
                payload.as_ptr(),
                payload.len(),
            );
        }
        self.shared
            .stamp_at(off)
            .store(stamp(self.tail, self.salt), Ordering::Release);
    }

    /// Writes a rendezvous request for `len` bytes at `addr` in this process; returns its
    /// sequence number (1-based), or `None` if the ring is full.
    pub fn try_write_rndv(&mut self, addr: u64, len: u64) -> Result<Option<u64>, RingError> {
        let mut payload = [0u8; 16];
        payload[..8].copy_from_slice(&addr.to_ne_bytes());
        payload[8..].copy_from_slice(&len.to_ne_bytes());
        if self.try_write(Kind::Rndv, len, &payload)? {
            self.rndv_posted += 1;
            Ok(Some(self.rndv_posted))
        } else {
            Ok(None)
        }
    }

    /// How many rendezvous requests the consumer has completed (validated).
    pub fn rndv_completed(&self) -> Result<u64, RingError> {
        let done = self.shared.u64_at(OFF_RNDV_DONE).load(Ordering::Acquire);
        if done > self.rndv_posted {
            return Err(RingError::Corrupt {
                field: "rndv_done",
                value: done,
                reason: "more completions than requests",
            });
        }
        Ok(done)
    }

    /// The consumer's clear-to-send for request `seq`, if it posted one: (destination
    /// address in the consumer, split offset). Validated against the request's length.
    pub fn cts(&self, seq: u64, len: u64) -> Option<(u64, u64)> {
        if self.shared.u64_at(OFF_CTS_SEQ).load(Ordering::Acquire) != seq {
            return None;
        }
        let addr = self.shared.u64_at(OFF_CTS_ADDR).load(Ordering::Relaxed);
        let split = self.shared.u64_at(OFF_CTS_SPLIT).load(Ordering::Relaxed);
        let cts_len = self.shared.u64_at(OFF_CTS_LEN).load(Ordering::Relaxed);
        (cts_len == len && split <= len && addr.checked_add(len).is_some()).then_some((addr, split))
    }

    /// Tries to take the second part of request `seq`; false if the consumer took it.
    pub fn claim_second_part(&self, seq: u64) -> bool {
        claim(&self.shared, seq, 1)
    }

    /// Reports the end of our part of request `seq`.
    pub fn finish_second_part(&self, seq: u64, ok: bool) {
        let value = if ok { seq } else { seq | SPLIT_FAILED };
        self.shared
            .u64_at(OFF_SPLIT_DONE)
            .store(value, Ordering::Release);
    }

    /// Whether the consumer closed the ring.
    pub fn consumer_closed(&self) -> bool {
        self.shared
            .u32_at(OFF_CONSUMER_CLOSED)
            .load(Ordering::Acquire)
            != 0
    }

    /// First half of sleeping until the consumer makes progress: announces the wait and
    /// returns the wake sequence to pass to [`Producer::wait`]. The caller must re-check its
    /// condition after this call and before waiting.
    pub fn prepare_wait(&self) -> u32 {
        let seen = self.shared.u32_at(OFF_WAKE_SEQ).load(Ordering::Acquire);
        self.shared
            .u32_at(OFF_SENDER_WAITING)
            .store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        seen
    }

    /// Sleeps until the consumer publishes progress or `timeout` passes.
    pub fn wait(&self, seen: u32, timeout: Duration) {
        sys::futex_wait(self.shared.u32_at(OFF_WAKE_SEQ), seen, timeout);
    }

    /// Ends a wait begun with [`Producer::prepare_wait`].
    pub fn end_wait(&self) {
        self.shared
            .u32_at(OFF_SENDER_WAITING)
            .store(0, Ordering::Relaxed);
    }

    /// Marks the ring closed: writes a `Close` record if there is room, and the flag.
    pub fn close(&mut self) {
        let _ = self.try_write(Kind::Close, 0, &[]);
        self.shared
            .u32_at(OFF_PRODUCER_CLOSED)
            .store(1, Ordering::Release);
    }

    /// Raw access for fault-injection tests: the whole mapping (control area included).
    #[doc(hidden)]
    pub fn raw_mapping(&self) -> (*mut u8, usize) {
        (self.shared.map.as_ptr(), self.shared.map.len())
    }
}

/// Why a received ring could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The operating system refused (fstat/mmap).
    #[error("mapping the ring: {0}")]
    Io(#[source] std::io::Error),
    /// The ring is not one of ours.
    #[error(transparent)]
    Ring(RingError),
    /// The ring's memory file is not sealed against resizing: whoever holds it could shrink
    /// it under our mapping (SIGBUS). Refused before it is mapped.
    #[error("the ring's memory file is not sealed against resizing (its seals are {seals:#x}, required {required:#x}: shrink, grow and seal)", required = sys::SHARED_SEALS)]
    Unsealed {
        /// The seals it has.
        seals: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every round races the consumer's publish of one record's room against a producer
    /// that found the ring full and raises its flag: both start at once (a spin barrier),
    /// and if each reads the other's old value, the producer sleeps on room it missed (the
    /// consumer takes nothing more until the producer wrote again, so nothing else wakes
    /// it). With the store-load fence on both sides no round may sleep that way.
    #[test]
    fn no_wake_up_is_lost_between_a_publishing_consumer_and_a_sleeping_producer() {
        const ROUNDS: u64 = 20_000;
        let (mut consumer, fd) = Consumer::create(MIN_CAPACITY, 7).unwrap();
        let mut producer = Producer::attach(&fd).unwrap();
        // Records of a quarter ring: four fill it, each taken publishes its room.
        let payload = vec![5u8; max_frag_len(MIN_CAPACITY) as usize];
        let len = payload.len() as u64;
        while producer.try_write(Kind::Msg, len, &payload).unwrap() {}
        // Each side adds one per round and goes when both did.
        let arrived = Arc::new(AtomicU64::new(0));
        let meet = |arrived: &AtomicU64, round: u64| {
            arrived.fetch_add(1, Ordering::AcqRel);
            while arrived.load(Ordering::Acquire) < 2 * (round + 1) {
                std::hint::spin_loop();
            }
        };
        let reader = std::thread::spawn({
            let arrived = arrived.clone();
            move || {
                for round in 0..ROUNDS {
                    // The ring is full: its first record is there before the race begins.
                    let rec = loop {
                        if let Some(rec) = consumer.peek().unwrap() {
                            if consumer.head - consumer.published_head == 0 {
                                break rec;
                            }
                        }
                    };
                    meet(&arrived, round);
                    consumer.consume(&rec);
                    // Wait for the producer's refill before the next round.
                    while consumer
                        .record_at(rec.pos + 4 * rec.size)
                        .unwrap()
                        .is_none()
                    {
                        std::hint::spin_loop();
                    }
                }
            }
        });
        for round in 0..ROUNDS {
            meet(&arrived, round);
            let seen = producer.prepare_wait();
            if !producer.fits(std::iter::once(len)).unwrap() {
                let slept = std::time::Instant::now();
                producer.wait(seen, Duration::from_secs(5));
                assert!(
                    slept.elapsed() < Duration::from_secs(4),
                    "round {round}: slept 5 s though the consumer made room: a lost wake-up"
                );
            }
            producer.end_wait();
            assert!(
                producer.try_write(Kind::Msg, len, &payload).unwrap(),
                "round {round}"
            );
        }
        reader.join().unwrap();
    }

    /// A ring's memory file is sealed: whoever holds it cannot resize it (the kernel
    /// refuses), and a producer refuses one without those seals before mapping it.
    #[test]
    fn the_ring_file_cannot_be_resized_and_an_unsealed_one_is_refused() {
        let (_consumer, fd) = Consumer::create(MIN_CAPACITY, 7).unwrap();
        assert_eq!(sys::seals(&fd).unwrap(), sys::SHARED_SEALS);
        let file = std::fs::File::from(fd.try_clone().unwrap());
        let len = file.metadata().unwrap().len();
        for to in [0, len - 1, len + 4096] {
            let refused = file.set_len(to).unwrap_err();
            assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "to {to}");
        }
        assert_eq!(file.metadata().unwrap().len(), len);
        Producer::attach(&fd).unwrap();
        // The same ring, byte for byte, in a file without the seals.
        let forged = sys::memfd_unsealed("quiver-ring", len as usize).unwrap();
        let mut bytes = vec![0u8; len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, 0).unwrap();
        let forged_file = std::fs::File::from(forged.try_clone().unwrap());
        std::os::unix::fs::FileExt::write_all_at(&forged_file, &bytes, 0).unwrap();
        match Producer::attach(&forged) {
            Err(error @ AttachError::Unsealed { seals: 0 }) => {
                assert!(error.to_string().contains("not sealed"), "{error}")
            }
            other => panic!("expected Unsealed, got {other:?}"),
        }
    }

    #[test]
    fn copies_are_exact_at_every_distance() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        for shift in 0..80 {
            for len in [0, 1, 63, 64, 255, 256, 257, 1000, 4097] {
                let mut dst = vec![0u8; 5200];
                // SAFETY: both ranges are inside their vectors and distinct allocations.
                unsafe { copy_bytes(dst.as_mut_ptr().add(shift), src.as_ptr(), len) };
                assert_eq!(
                    &dst[shift..shift + len],
                    &src[..len],
                    "shift {shift} len {len}"
                );
                assert!(dst[..shift].iter().all(|b| *b == 0));
                assert!(dst[shift + len..].iter().all(|b| *b == 0));
            }
        }
    }

    /// `has_record` sees a record by its stamp (a message or a filler), and, finding none,
    /// hands the consumed space back as a drained `peek` does.
    #[test]
    fn has_record_sees_the_head_and_publishes_when_drained() {
        let (mut consumer, fd) = Consumer::create(MIN_CAPACITY, 7).unwrap();
        let mut producer = Producer::attach(&fd).unwrap();
        assert!(!consumer.has_record());
        assert!(producer.try_write(Kind::Msg, 8, &[1; 8]).unwrap());
        assert!(consumer.has_record());
        let rec = consumer.peek().unwrap().expect("the record");
        consumer.consume(&rec);
        assert_ne!(consumer.published_head, consumer.head, "not published yet");
        assert!(!consumer.has_record());
        assert_eq!(
            consumer.published_head, consumer.head,
            "published once drained"
        );
        // A message that does not fit before the end: a filler at the head, then it. The
        // 8-byte record above put the large ones off the quarter marks.
        let big = vec![2u8; max_frag_len(MIN_CAPACITY) as usize];
        let len = big.len() as u64;
        while (consumer.head % MIN_CAPACITY) + record_size(len) <= MIN_CAPACITY {
            assert!(producer.try_write(Kind::Msg, len, &big).unwrap());
            let rec = consumer.peek().unwrap().expect("the record");
            consumer.consume(&rec);
        }
        assert!(producer.try_write(Kind::Msg, len, &big).unwrap());
        let head = consumer
            .record_at(consumer.head)
            .unwrap()
            .expect("a record");
        assert_eq!(head.kind, Kind::Pad);
        assert!(consumer.has_record());
        assert_eq!(consumer.peek().unwrap().map(|r| r.kind), Some(Kind::Msg));
    }

    #[test]
    fn record_sizes() {
        assert_eq!(record_size(0), 64);
        assert_eq!(record_size(40), 64);
        assert_eq!(record_size(41), 128);
        assert_eq!(record_size(8), 64);
        assert_eq!(INLINE_BYTES, 40);
    }

    #[test]
    fn placement_pads_at_the_end_only() {
        assert_eq!(placement(0, 64, 4096), 0);
        assert_eq!(placement(4032, 64, 4096), 0);
        assert_eq!(placement(4032, 128, 4096), 64);
        assert_eq!(placement(4096 + 4032, 128, 4096), 64);
    }

    proptest! {
        /// Records never cross the end of the data area and never overlap: a model of the
        /// producer's placement over many records.
        #[test]
        fn placement_model(lens in proptest::collection::vec(0u64..1000, 1..200), cap_log in 12u32..16) {
            let cap = 1u64 << cap_log;
            let mut tail = 0u64;
            for len in lens {
                let size = record_size(len);
                prop_assert!(size.is_multiple_of(LINE) && size >= HEADER_BYTES + len);
                let pad = placement(tail, size, cap);
                let start = tail + pad;
                let off = start & (cap - 1);
                prop_assert!(off + size <= cap);
                prop_assert!(pad == 0 || (tail & (cap - 1)) + pad == cap);
                tail = start + size;
            }
        }
    }

    fn pair(capacity: u64) -> (Producer, Consumer) {
        let (c, fd) = Consumer::create(capacity, 0x1234_5678_9abc_def0).unwrap();
        let p = Producer::attach(&fd).unwrap();
        (p, c)
    }

    fn take(c: &mut Consumer) -> Option<(Kind, u64, Vec<u8>)> {
        let rec = c.peek().unwrap()?;
        let mut v = vec![0; rec.frag_len as usize];
        c.copy_payload(&rec, &mut v);
        c.consume(&rec);
        Some((rec.kind, rec.total_len, v))
    }

    /// A `Tag` record goes before a message start only when the tag changes and carries
    /// the tag whole; `Cont` fragments never get one.
    #[test]
    fn tag_records_only_where_the_tag_changes() {
        let (mut p, mut c) = pair(4096);
        p.set_tag(u64::MAX - 3);
        assert_eq!(p.tag_records_needed(), 1);
        assert!(p.try_write(Kind::Msg, 10, &[1; 5]).unwrap());
        assert!(p.try_write(Kind::Cont, 10, &[2; 5]).unwrap());
        assert_eq!(p.tag_records_needed(), 0);
        assert!(p.try_write(Kind::Msg, 1, &[3]).unwrap());
        p.set_tag(0);
        assert!(p.try_write(Kind::Msg, 1, &[4]).unwrap());
        let rec = c.peek().unwrap().unwrap();
        assert_eq!(
            (rec.kind, rec.frag_len, c.tag_of(&rec)),
            (Kind::Tag, 8, u64::MAX - 3)
        );
        c.consume(&rec);
        assert_eq!(take(&mut c).unwrap().0, Kind::Msg);
        assert_eq!(take(&mut c).unwrap().0, Kind::Cont);
        assert_eq!(take(&mut c).unwrap(), (Kind::Msg, 1, vec![3]));
        let rec = c.peek().unwrap().unwrap();
        assert_eq!((rec.kind, c.tag_of(&rec)), (Kind::Tag, 0));
        c.consume(&rec);
        assert_eq!(take(&mut c).unwrap(), (Kind::Msg, 1, vec![4]));
        assert!(c.peek().unwrap().is_none());
    }

    /// An `Am` record announces active messages as a `Tag` record announces a tag: once
    /// per change, and an `Am` and a `Tag` with the same value are different announcements.
    #[test]
    fn am_records_announce_active_messages() {
        let (mut p, mut c) = pair(4096);
        p.set_am(7 << 32 | 3);
        assert!(p.try_write(Kind::Msg, 4, &[1; 4]).unwrap());
        assert!(p.try_write(Kind::Msg, 4, &[2; 4]).unwrap());
        p.set_tag(7 << 32 | 3);
        assert_eq!(p.tag_records_needed(), 1);
        assert!(p.try_write(Kind::Msg, 1, &[3]).unwrap());
        let rec = c.peek().unwrap().unwrap();
        assert_eq!((rec.kind, c.tag_of(&rec)), (Kind::Am, 7 << 32 | 3));
        c.consume(&rec);
        assert_eq!(take(&mut c).unwrap(), (Kind::Msg, 4, vec![1; 4]));
        assert_eq!(take(&mut c).unwrap(), (Kind::Msg, 4, vec![2; 4]));
        let rec = c.peek().unwrap().unwrap();
        assert_eq!((rec.kind, c.tag_of(&rec)), (Kind::Tag, 7 << 32 | 3));
        c.consume(&rec);
        assert_eq!(take(&mut c).unwrap(), (Kind::Msg, 1, vec![3]));
    }

    #[test]
    fn round_trip_and_wrap() {
        let (mut p, mut c) = pair(4096);
        assert!(c.peek().unwrap().is_none());
        for i in 0..1000u64 {
            let payload: Vec<u8> = (0..(i % 300) as u8).collect();
            assert!(p
                .try_write(Kind::Msg, payload.len() as u64, &payload)
                .unwrap());
            let (kind, total, got) = take(&mut c).unwrap();
            assert_eq!(kind, Kind::Msg);
            assert_eq!(total, payload.len() as u64);
            assert_eq!(got, payload);
        }
        assert!(c.peek().unwrap().is_none());
    }

    #[test]
    fn full_ring_says_no_until_consumed_and_published() {
        let (mut p, mut c) = pair(4096);
        let payload = [1u8; 1000];
        let mut written = 0;
        while p.try_write(Kind::Msg, 1000, &payload).unwrap() {
            written += 1;
        }
        assert_eq!(written, 4); // 4 x 1024-byte records fill 4096 bytes
        take(&mut c).unwrap();
        c.flush();
        assert!(p.try_write(Kind::Msg, 1000, &payload).unwrap());
    }

    #[test]
    fn header_corruption_is_detected() {
        let (p, c) = pair(4096);
        let (base, _) = p.raw_mapping();
        // SAFETY: test-only scribble inside the control area of our own mapping.
        unsafe { *(base.add(OFF_MAGIC) as *mut u64) = 0xdead };
        assert!(matches!(c.verify(), Err(RingError::BadHeader { .. })));
    }

    #[test]
    fn forged_records_are_rejected_not_trusted() {
        let (p, mut c) = pair(4096);
        let (base, _) = p.raw_mapping();
        let salt = 0x1234_5678_9abc_def0u64;
        // SAFETY: test-only writes inside the data area of our own mapping.
        let forge = |kind: u8, frag: u32, total: u64| unsafe {
            let rec = base.add(DATA_OFFSET);
            *rec.add(REC_KIND) = kind;
            *(rec.add(REC_FRAG_LEN) as *mut u32) = frag;
            *(rec.add(REC_TOTAL_LEN) as *mut u64) = total;
            *(rec as *mut u64) = stamp(0, salt);
        };
        forge(9, 0, 0);
        assert!(c.peek().is_err());
        forge(Kind::Msg as u8, 5000, 5000);
        assert!(c.peek().is_err());
        forge(Kind::Msg as u8, 10, 5);
        assert!(c.peek().is_err());
        forge(Kind::Rndv as u8, 8, 5);
        assert!(c.peek().is_err());
        forge(Kind::Pad as u8, 0, 0);
        assert!(c.peek().is_err());
        forge(Kind::Msg as u8, 10, u64::MAX);
        assert!(c.peek().is_err());
        forge(Kind::Msg as u8, 10, 10);
        assert!(c.peek().unwrap().is_some());
    }

    #[test]
    fn garbage_stamps_read_as_empty_or_error_never_panic() {
        let (p, mut c) = pair(4096);
        let (base, len) = p.raw_mapping();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in DATA_OFFSET..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // SAFETY: test-only writes inside our own mapping.
            unsafe { *base.add(i) = x as u8 };
        }
        for _ in 0..10 {
            let _ = c.peek();
        }
    }

    #[test]
    fn bad_head_from_consumer_is_an_error() {
        let (mut p, c) = pair(4096);
        let (base, _) = p.raw_mapping();
        // SAFETY: test-only write inside the control area of our own mapping.
        unsafe { *(base.add(OFF_HEAD) as *mut u64) = 1 << 40 };
        drop(c);
        let big = [0u8; 1000];
        for _ in 0..4 {
            let _ = p.try_write(Kind::Msg, 1000, &big);
        }
        assert!(p.try_write(Kind::Msg, 1000, &big).is_err());
    }

    #[test]
    fn threads_stream_in_order() {
        let (mut p, mut c) = pair(8192);
        let n = 20_000u64;
        let t = std::thread::spawn(move || {
            for i in 0..n {
                let len = (i * 7919 % 700) as usize;
                let payload: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
                while !p.try_write(Kind::Msg, len as u64, &payload).unwrap() {
                    std::hint::spin_loop();
                }
            }
        });
        let mut i = 0;
        while i < n {
            if let Some((_, total, got)) = take(&mut c) {
                let len = (i * 7919 % 700) as usize;
                assert_eq!(total as usize, len);
                assert!(got
                    .iter()
                    .enumerate()
                    .all(|(j, b)| *b == (i as usize + j) as u8));
                i += 1;
            } else {
                c.flush();
            }
        }
        t.join().unwrap();
    }
}
