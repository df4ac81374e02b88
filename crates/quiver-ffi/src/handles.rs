//! Handle tables: what a C handle names. A handle is a number,
//! `generation << 32 | (slot + 1)`; 0 is never a live handle. Each slot has one atomic
//! word, `generation << 32 | holder << 1 | LIVE`. Freeing bumps the generation, so a
//! stale handle never names the slot's next occupant.
//!
//! A call takes its slot in one of two ways (decision 0104):
//! - held: a compare-and-swap sets the holder to `HELD` for the call, a store gives it
//!   back. Contexts (used from many threads at once) are always taken this way;
//! - leased: an endpoint is nearly always driven by the same thread for its whole life, so
//!   that thread's token ([`threads`]) stays in the holder field between calls, and the
//!   thread enters with plain loads and stores: it writes the slot's address into its
//!   record, then checks that the holder is still its token. A thread that wants a slot
//!   leased by another swaps the holder to `HELD`, runs a process-wide barrier and reads
//!   the owner's record: if the owner is inside, it gives the slot back and the call is
//!   `QUIVER_ERR_BUSY`; if not, the owner's next call sees it lost the lease.
//!
//! A slot whose lease was taken away [`SHARED_AFTER`] times (threads taking turns on it)
//! is held call by call from then on, so the barrier is not paid on every turn.
//!
//! The tables are fixed arrays (no allocation, no lock on a call); their sizes are the
//! most contexts and endpoints a process may have open at once.

mod threads;

use std::cell::UnsafeCell;
use std::sync::atomic::{compiler_fence, AtomicU32, AtomicU64, Ordering};

use crate::status::{failure, quiver_status, Failure};
use threads::ThreadRecord;

const LIVE: u64 = 1;
/// The holder of a slot held for one call (all 31 holder bits set).
const HELD: u32 = 0x7fff_ffff;
/// How many times a slot's lease may be taken away before it is no longer leased.
const SHARED_AFTER: u32 = 8;

/// The most endpoints a process may have open at once through the C API.
pub const QUIVER_MAX_ENDPOINTS: usize = 4096;
/// The most contexts a process may have open at once through the C API.
pub const QUIVER_MAX_CONTEXTS: usize = 64;

/// A live slot's state word: of `generation`, held or leased by `holder` (0 = nobody).
const fn live(generation: u64, holder: u32) -> u64 {
    generation << 32 | (holder as u64) << 1 | LIVE
}

const fn holder(state: u64) -> u32 {
    (state >> 1) as u32 & HELD
}

struct Slot<T> {
    state: AtomicU64,
    /// How many times the slot's lease was taken away, up to [`SHARED_AFTER`].
    revocations: AtomicU32,
    value: UnsafeCell<Option<T>>,
}

impl<T> Slot<T> {
    /// Where the slot is: what a thread's record says it is inside (the handle would not
    /// do, the two tables' handles can be equal).
    fn address(&self) -> u64 {
        std::ptr::from_ref(self).addr() as u64
    }
}

/// A fixed table of values named by generation-checked handles.
pub(crate) struct Table<T, const N: usize> {
    kind: &'static str,
    leased: bool,
    slots: [Slot<T>; N],
}

// SAFETY: a slot's value is only touched by the thread that holds the slot: the holder
// of a compare-and-swap (Acquire, given back with a Release store), or the leaseholder
// while its record says it is inside (another thread takes the slot only after a barrier
// on every CPU shows the record says otherwise). Values move between threads one holder
// at a time: `T: Send` is what that needs.
unsafe impl<T: Send, const N: usize> Sync for Table<T, N> {}

/// A slot taken for one call; gives it back when dropped (also while unwinding).
pub(crate) struct Taken<'a, T> {
    slot: &'a Slot<T>,
    /// Given back by storing `leave_with` here: 0 into the thread's record when leased
    /// (no longer inside), the state to return to into the slot's state word when held.
    /// One store either way, with no branch on the way out of a call.
    leave: &'a AtomicU64,
    leave_with: u64,
}

impl<'a, T> Taken<'a, T> {
    fn leased(slot: &'a Slot<T>, record: &'static ThreadRecord) -> Self {
        Taken {
            slot,
            leave: &record.inside,
            leave_with: 0,
        }
    }

    fn held(slot: &'a Slot<T>, state_after: u64) -> Self {
        Taken {
            slot,
            leave: &slot.state,
            leave_with: state_after,
        }
    }

    /// The value, for the duration of the call.
    pub(crate) fn value(&mut self) -> &mut T {
        // SAFETY: this thread holds the slot (`Table::take`), so no other thread touches
        // the value until `drop` gives it back; a LIVE slot holds Some.
        let value = unsafe { &mut *self.slot.value.get() };
        value
            .as_mut()
            .expect("a LIVE slot holds a value (set before LIVE, taken after it clears)")
    }
}

impl<T> Drop for Taken<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.leave.store(self.leave_with, Ordering::Release);
    }
}

impl<T, const N: usize> Table<T, N> {
    /// An empty table whose slots are held call by call (values used by many threads at
    /// once); `kind` names its handles in messages ("context").
    pub(crate) const fn new(kind: &'static str) -> Self {
        Self::with(kind, false)
    }

    /// An empty table whose slots are leased to the thread that uses them ("endpoint").
    pub(crate) const fn leased(kind: &'static str) -> Self {
        Self::with(kind, true)
    }

    const fn with(kind: &'static str, leased: bool) -> Self {
        Table {
            kind,
            leased,
            slots: [const {
                Slot {
                    state: AtomicU64::new(0),
                    revocations: AtomicU32::new(0),
                    value: UnsafeCell::new(None),
                }
            }; N],
        }
    }

    /// Takes the slot `handle` names for one call.
    ///
    /// # Errors
    /// `QUIVER_ERR_BAD_HANDLE` when `handle` names no live value of this table,
    /// `QUIVER_ERR_BUSY` when another thread is inside a call on it (or this thread is,
    /// further out).
    #[inline]
    pub(crate) fn take(&self, handle: u64) -> Result<Taken<'_, T>, Failure> {
        let Some(slot) = self.slot(handle) else {
            return Err(self.bad(handle));
        };
        // Not behind `self.leased`: a slot of a table that is not leased never holds a
        // thread's token, so the attempt fails there, and the flag is a load from the far
        // end of the table on the path of every call.
        if let Some(taken) = enter_own_lease(slot, handle >> 32) {
            return Ok(taken);
        }
        self.take_slowly(handle, slot, self.leased)
    }

    /// Takes the slot `handle` names only if this thread leases it and is inside no other
    /// leased call: the message calls' fast path. None otherwise, a bad handle included:
    /// the caller then goes through [`Table::take`], which says why or takes the slot the
    /// slow way.
    #[inline]
    pub(crate) fn take_own_lease(&self, handle: u64) -> Option<Taken<'_, T>> {
        enter_own_lease(self.slot(handle)?, handle >> 32)
    }

    /// The slot `handle` names (its low 32 bits, less one); its generation is checked by
    /// whoever takes it.
    #[inline]
    fn slot(&self, handle: u64) -> Option<&Slot<T>> {
        self.slots.get((handle as u32 as usize).wrapping_sub(1))
    }

    /// Takes the slot by compare-and-swap: a slot nobody holds, one leased by this thread
    /// (from inside another call), or one leased by another thread that is not inside it.
    /// With `may_lease`, the slot is leased to this thread if it can be.
    #[inline(never)]
    fn take_slowly<'a>(
        &'a self,
        handle: u64,
        slot: &'a Slot<T>,
        may_lease: bool,
    ) -> Result<Taken<'a, T>, Failure> {
        let generation = handle >> 32;
        let here = slot.address();
        let me = if self.leased { threads::token() } else { None };
        let record = me.and_then(threads::record);
        let inside = record.map_or(0, |r| r.inside.load(Ordering::Relaxed));
        loop {
            let now = slot.state.load(Ordering::Acquire);
            if now >> 32 != generation || now & LIVE == 0 {
                return Err(self.bad(handle));
            }
            let holder = holder(now);
            let mine = me == Some(holder);
            if holder == HELD || (mine && inside == here) {
                return Err(self.busy(handle));
            }
            let held = live(generation, HELD);
            if slot
                .state
                .compare_exchange(now, held, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            if holder != 0 && !mine && !revoke(slot, holder) {
                slot.state.store(now, Ordering::Release);
                return Err(self.busy(handle));
            }
            let lease = record.filter(|_| {
                may_lease && inside == 0 && slot.revocations.load(Ordering::Relaxed) < SHARED_AFTER
            });
            let taken = match (lease, me) {
                (Some(record), Some(me)) => {
                    // The record first: a thread that takes the lease away reads it
                    // after its swap, which reads this store of the state.
                    record.inside.store(here, Ordering::Relaxed);
                    slot.state.store(live(generation, me), Ordering::Release);
                    Taken::leased(slot, record)
                }
                _ if mine => Taken::held(slot, now),
                _ => Taken::held(slot, live(generation, 0)),
            };
            return Ok(taken);
        }
    }

    /// Puts `value` in a free slot and returns its handle.
    ///
    /// # Errors
    /// `QUIVER_ERR_INVALID_ARGUMENT` when all `N` slots are in use.
    pub(crate) fn insert(&self, value: T) -> Result<u64, Failure> {
        for (index, slot) in self.slots.iter().enumerate() {
            let now = slot.state.load(Ordering::Relaxed);
            if now & LIVE != 0 || holder(now) != 0 {
                continue;
            }
            let held = now | u64::from(HELD) << 1;
            if slot
                .state
                .compare_exchange(now, held, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Generations start at 1 (a slot's first, and after the 32-bit wrap).
            let generation = (now >> 32).max(1);
            // SAFETY: this thread holds the slot (just taken), so nobody else touches the
            // value until the store below publishes it.
            unsafe { *slot.value.get() = Some(value) };
            slot.revocations.store(0, Ordering::Relaxed);
            slot.state.store(live(generation, 0), Ordering::Release);
            return Ok(generation << 32 | (index as u64 + 1));
        }
        Err(failure(
            quiver_status::QUIVER_ERR_INVALID_ARGUMENT,
            format!(
                "too many open {}s: at most {N} at once through the C API (free some first)",
                self.kind
            ),
        ))
    }

    /// The value `handle` names, shared: for values used by many threads at once (a
    /// context), the slot is held only while the value is cloned, and a thread that finds
    /// it held for that instant tries again.
    ///
    /// # Errors
    /// `QUIVER_ERR_BAD_HANDLE` when `handle` names no live value of this table.
    pub(crate) fn share(&self, handle: u64) -> Result<T, Failure>
    where
        T: Clone,
    {
        loop {
            match self.take(handle) {
                Ok(mut taken) => return Ok(taken.value().clone()),
                Err(Failure::Boundary(quiver_status::QUIVER_ERR_BUSY, _)) => std::hint::spin_loop(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes the value out of the slot `handle` names; the handle (and every copy of it)
    /// is dead afterwards.
    ///
    /// # Errors
    /// As [`Table::take`].
    pub(crate) fn remove(&self, handle: u64) -> Result<T, Failure> {
        let Some(slot) = self.slot(handle) else {
            return Err(self.bad(handle));
        };
        let mut taken = self.take_slowly(handle, slot, false)?;
        // SAFETY: this thread holds the slot (`take_slowly` without a lease: by
        // compare-and-swap).
        let value = unsafe { (*slot.value.get()).take() };
        // The next occupant gets the next generation (wrapping within 32 bits; `insert`
        // skips 0).
        let next = ((handle >> 32) + 1) & 0xffff_ffff;
        taken.leave = &slot.state;
        taken.leave_with = next << 32;
        drop(taken);
        Ok(value.expect("a LIVE slot holds a value"))
    }

    #[cold]
    #[inline(never)]
    fn bad(&self, handle: u64) -> Failure {
        failure(
            quiver_status::QUIVER_ERR_BAD_HANDLE,
            format!(
                "{handle:#x} is not an open {} handle (zero, freed, made up, or of another \
                 kind)",
                self.kind
            ),
        )
    }

    #[cold]
    #[inline(never)]
    fn busy(&self, handle: u64) -> Failure {
        failure(
            quiver_status::QUIVER_ERR_BUSY,
            format!(
                "{} handle {handle:#x} is in use by another thread right now: an {} is \
                 driven by one thread at a time (give each thread its own)",
                self.kind, self.kind
            ),
        )
    }
}

/// Enters a slot this thread leases, with plain loads and stores; None when the slot is
/// not leased to this thread or it is inside another leased call already.
#[inline]
fn enter_own_lease<T>(slot: &Slot<T>, generation: u64) -> Option<Taken<'_, T>> {
    // The holder's record, if it is this thread's: no thread-local is read.
    let leased = slot.state.load(Ordering::Relaxed);
    let record = threads::own_record(holder(leased))?;
    if leased != live(generation, holder(leased)) || record.inside.load(Ordering::Relaxed) != 0 {
        return None;
    }
    record.inside.store(slot.address(), Ordering::Relaxed);
    // Store, then load: a thread taking the lease away swaps the state, runs a barrier on
    // every CPU (which drains this store), then reads the record. Either this load sees
    // its swap, or it sees this store. The compiler must not reorder the two.
    compiler_fence(Ordering::SeqCst);
    if slot.state.load(Ordering::Acquire) == leased {
        return Some(Taken::leased(slot, record));
    }
    record.inside.store(0, Ordering::Relaxed);
    None
}

/// Takes the lease of `slot` away from thread `holder`, the slot already swapped to
/// `HELD`: true when that thread is not inside it (the slot is this thread's now).
fn revoke<T>(slot: &Slot<T>, holder: u32) -> bool {
    if slot.revocations.load(Ordering::Relaxed) < SHARED_AFTER {
        slot.revocations.fetch_add(1, Ordering::Relaxed);
    }
    if !threads::heavy_barrier() {
        return false;
    }
    threads::record(holder).is_none_or(|r| r.inside.load(Ordering::Acquire) != slot.address())
}

#[cfg(test)]
mod tests;
