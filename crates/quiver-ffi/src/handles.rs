//! Handle tables: what a C handle names. A handle is a number,
//! `generation << 32 | (slot + 1)`; 0 is never a live handle. Each slot has one atomic
//! word, `generation << 2 | LIVE | BUSY`: a call takes the slot with one compare-and-swap from `LIVE` to `LIVE | BUSY`
//! (which fails for a free slot, an older generation or a slot another thread is inside),
//! uses the value, and releases the slot with one store. Freeing bumps the generation, so
//! a stale handle never names the slot's next occupant.
//!
//! The tables are fixed arrays (no allocation, no lock on a call); their sizes are the
//! most contexts and endpoints a process may have open at once.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::status::{failure, quiver_status, Failure};

const LIVE: u64 = 0b10;
const BUSY: u64 = 0b01;

/// The most endpoints a process may have open at once through the C API.
pub const QUIVER_MAX_ENDPOINTS: usize = 4096;
/// The most contexts a process may have open at once through the C API.
pub const QUIVER_MAX_CONTEXTS: usize = 64;

struct Slot<T> {
    state: AtomicU64,
    value: UnsafeCell<Option<T>>,
}

/// A fixed table of values named by generation-checked handles.
pub(crate) struct Table<T, const N: usize> {
    kind: &'static str,
    slots: [Slot<T>; N],
}

// SAFETY: a slot's value is only touched by the thread that holds its BUSY bit (taken by
// compare-and-swap with Acquire, given back with Release), so values move between threads
// one holder at a time: `T: Send` is what that needs.
unsafe impl<T: Send, const N: usize> Sync for Table<T, N> {}

/// A slot taken for one call; gives it back when dropped (also while unwinding).
pub(crate) struct Taken<'a, T> {
    slot: &'a Slot<T>,
    idle: u64,
}

impl<T> Taken<'_, T> {
    /// The value, for the duration of the call.
    pub(crate) fn value(&mut self) -> &mut T {
        // SAFETY: this thread holds the slot's BUSY bit (taken in `Table::take`), so no
        // other thread touches the value until `drop` releases it; a LIVE slot holds Some.
        let value = unsafe { &mut *self.slot.value.get() };
        value
            .as_mut()
            .expect("a LIVE slot holds a value (set before LIVE, taken after it clears)")
    }
}

impl<T> Drop for Taken<'_, T> {
    fn drop(&mut self) {
        self.slot.state.store(self.idle, Ordering::Release);
    }
}

impl<T, const N: usize> Table<T, N> {
    /// An empty table; `kind` names its handles in messages ("endpoint").
    pub(crate) const fn new(kind: &'static str) -> Self {
        Table {
            kind,
            slots: [const {
                Slot {
                    state: AtomicU64::new(0),
                    value: UnsafeCell::new(None),
                }
            }; N],
        }
    }

    /// Takes the slot `handle` names for one call.
    ///
    /// # Errors
    /// `QUIVER_ERR_BAD_HANDLE` when `handle` names no live value of this table,
    /// `QUIVER_ERR_BUSY` when another thread is inside a call on it.
    #[inline]
    pub(crate) fn take(&self, handle: u64) -> Result<Taken<'_, T>, Failure> {
        let index = (handle as u32 as usize).wrapping_sub(1);
        let generation = handle >> 32;
        let Some(slot) = self.slots.get(index) else {
            return Err(self.bad(handle));
        };
        let idle = generation << 2 | LIVE;
        match slot
            .state
            .compare_exchange(idle, idle | BUSY, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(Taken { slot, idle }),
            Err(now) if now == idle | BUSY => Err(failure(
                quiver_status::QUIVER_ERR_BUSY,
                format!(
                    "{} handle {handle:#x} is in use by another thread right now: an {} is \
                     driven by one thread at a time (give each thread its own)",
                    self.kind, self.kind
                ),
            )),
            Err(_) => Err(self.bad(handle)),
        }
    }

    /// Puts `value` in a free slot and returns its handle.
    ///
    /// # Errors
    /// `QUIVER_ERR_INVALID_ARGUMENT` when all `N` slots are in use.
    pub(crate) fn insert(&self, value: T) -> Result<u64, Failure> {
        for (index, slot) in self.slots.iter().enumerate() {
            let now = slot.state.load(Ordering::Relaxed);
            if now & (LIVE | BUSY) != 0 {
                continue;
            }
            if slot
                .state
                .compare_exchange(now, now | BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Generations start at 1 (a slot's first, and after the 32-bit wrap).
            let generation = (now >> 2).max(1) & 0xffff_ffff;
            // SAFETY: this thread holds the slot's BUSY bit (just taken), so nobody else
            // touches the value until the store below publishes it.
            unsafe { *slot.value.get() = Some(value) };
            slot.state.store(generation << 2 | LIVE, Ordering::Release);
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
        let mut taken = self.take(handle)?;
        // SAFETY: this thread holds the slot's BUSY bit (`take`).
        let value = unsafe { (*taken.slot.value.get()).take() };
        // The next occupant gets the next generation (wrapping within 32 bits; `insert`
        // skips 0).
        let next = ((handle >> 32) + 1) & 0xffff_ffff;
        taken.idle = next << 2;
        drop(taken);
        Ok(value.expect("a LIVE slot holds a value"))
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<impl Sized, Failure>) -> quiver_status {
        match r {
            Ok(_) => quiver_status::QUIVER_OK,
            Err(Failure::Boundary(code, _)) => code,
            Err(Failure::Api(e)) => panic!("unexpected API error {e}"),
        }
    }

    #[test]
    fn handles_are_generation_checked() {
        let table: Table<u32, 2> = Table::new("thing");
        let a = table.insert(7).unwrap();
        let b = table.insert(8).unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(*table.take(a).unwrap().value(), 7);
        // Full: a third value has no slot.
        assert_eq!(
            code(table.insert(9)),
            quiver_status::QUIVER_ERR_INVALID_ARGUMENT
        );
        assert_eq!(table.remove(a).unwrap(), 7);
        // The freed handle is dead, also once its slot holds a new value.
        assert_eq!(code(table.take(a)), quiver_status::QUIVER_ERR_BAD_HANDLE);
        let c = table.insert(10).unwrap();
        assert_ne!(c, a, "a reused slot gets a new generation");
        assert_eq!(code(table.take(a)), quiver_status::QUIVER_ERR_BAD_HANDLE);
        assert_eq!(code(table.remove(a)), quiver_status::QUIVER_ERR_BAD_HANDLE);
        assert_eq!(*table.take(c).unwrap().value(), 10);
        // Zero, out-of-range and made-up handles.
        for bad in [0, 3, u64::MAX, (c & !0xffff_ffff) | 5, c ^ (1 << 40)] {
            assert_eq!(
                code(table.take(bad)),
                quiver_status::QUIVER_ERR_BAD_HANDLE,
                "{bad:#x}"
            );
        }
    }

    #[test]
    fn a_taken_slot_is_busy_until_released() {
        let table: Table<u32, 1> = Table::new("thing");
        let h = table.insert(1).unwrap();
        let mut held = table.take(h).unwrap();
        assert_eq!(code(table.take(h)), quiver_status::QUIVER_ERR_BUSY);
        assert_eq!(code(table.remove(h)), quiver_status::QUIVER_ERR_BUSY);
        *held.value() = 2;
        drop(held);
        assert_eq!(*table.take(h).unwrap().value(), 2);
        // A panic while the slot is held releases it (the guard's drop runs on unwind).
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = table.take(h).unwrap();
            panic!("inside a call");
        }));
        assert!(result.is_err());
        assert_eq!(*table.take(h).unwrap().value(), 2);
    }

    #[test]
    fn shared_values_wait_out_a_brief_hold() {
        let table: Table<std::sync::Arc<u32>, 1> = Table::new("context");
        let h = table.insert(std::sync::Arc::new(5)).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        assert_eq!(*table.share(h).unwrap(), 5);
                    }
                });
            }
        });
        assert_eq!(code(table.share(0)), quiver_status::QUIVER_ERR_BAD_HANDLE);
    }
}
