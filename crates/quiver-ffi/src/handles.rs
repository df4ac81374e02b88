//! Handle tables: what a C handle names. A handle is a number,
//! `generation << 32 | (slot + 1)`; 0 is never a live handle. Each slot has one atomic
//! word, `generation << 2 | LIVE | BUSY`: a call takes the slot with one compare-and-swap from `LIVE` to `LIVE | BUSY`
//! (which fails for a free slot, an older generation or a slot another thread is inside),
//! uses the value, and releases the slot with one store. Freeing bumps the generation, so
//! a stale handle never names the slot's next occupant.
//!
//! The tables are fixed arrays (no allocation, no lock on a call); their sizes are the
//! most contexts and endpoints a process may have open at once.
//!
//! The endpoint table is *biased*: the thread that used a slot last enters it again with
//! plain stores instead of the compare-and-swap (see [`crate::bias`]); a call from any
//! other thread takes the compare-and-swap path and moves the bias.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{compiler_fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::bias;
use crate::status::{failure, quiver_status, Failure};

const LIVE: u64 = 0b10;
const BUSY: u64 = 0b01;

/// The most endpoints a process may have open at once through the C API.
pub const QUIVER_MAX_ENDPOINTS: usize = 4096;
/// The most contexts a process may have open at once through the C API.
pub const QUIVER_MAX_CONTEXTS: usize = 64;

struct Slot<T> {
    state: AtomicU64,
    /// The flag of the thread this slot is biased to; null when none.
    owner: AtomicPtr<AtomicUsize>,
    value: UnsafeCell<Option<T>>,
}

impl<T> Slot<T> {
    /// What a thread's flag holds while it is inside this slot through its bias.
    fn mark(&self) -> usize {
        self as *const Self as usize
    }
}

/// A fixed table of values named by generation-checked handles.
pub(crate) struct Table<T, const N: usize> {
    kind: &'static str,
    /// Whether a slot is biased to the thread that used it last ([`crate::bias`]).
    biased: bool,
    slots: [Slot<T>; N],
}

// SAFETY: a slot's value is only touched by the thread that holds it: through its BUSY bit
// (taken by compare-and-swap with Acquire, given back with Release), or through its bias
// (the owner's flag names the slot while the slot is idle and biased to it; see
// `crate::bias` for why no other thread can hold it meanwhile). Values move between threads
// one holder at a time: `T: Send` is what that needs.
unsafe impl<T: Send, const N: usize> Sync for Table<T, N> {}

/// A slot taken for one call; gives it back when dropped (also while unwinding).
pub(crate) struct Taken<'a, T> {
    slot: &'a Slot<T>,
    idle: u64,
    /// The thread's flag when the slot was entered through its bias; `None` when through
    /// the BUSY bit.
    flag: Option<&'static AtomicUsize>,
}

impl<T> Taken<'_, T> {
    /// The value, for the duration of the call.
    pub(crate) fn value(&mut self) -> &mut T {
        // SAFETY: this thread holds the slot (its BUSY bit or its bias, taken in
        // `Table::take`), so no other thread touches the value until `drop` releases it; a
        // LIVE slot holds Some.
        let value = unsafe { &mut *self.slot.value.get() };
        value
            .as_mut()
            .expect("a LIVE slot holds a value (set before LIVE, taken after it clears)")
    }
}

impl<T> Drop for Taken<'_, T> {
    fn drop(&mut self) {
        match self.flag {
            Some(flag) => flag.store(0, Ordering::Release),
            None => self.slot.state.store(self.idle, Ordering::Release),
        }
    }
}

impl<T, const N: usize> Table<T, N> {
    /// An empty table; `kind` names its handles in messages ("endpoint").
    pub(crate) const fn new(kind: &'static str) -> Self {
        Self::with_bias(kind, false)
    }

    /// An empty table whose slots are biased to the thread that used them last: for
    /// values driven by one thread at a time (endpoints), not for shared ones (contexts,
    /// whose every use from another thread would move the bias).
    pub(crate) const fn biased(kind: &'static str) -> Self {
        Self::with_bias(kind, true)
    }

    const fn with_bias(kind: &'static str, biased: bool) -> Self {
        Table {
            kind,
            biased,
            slots: [const {
                Slot {
                    state: AtomicU64::new(0),
                    owner: AtomicPtr::new(ptr::null_mut()),
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
        if self.biased {
            if let Some(taken) = Self::enter_biased(slot, idle) {
                return Ok(taken);
            }
        }
        let taken = self.take_locked(handle, slot, idle)?;
        if self.biased {
            self.claim_bias(handle, taken)
        } else {
            Ok(taken)
        }
    }

    /// The owner's way in: plain stores, no locked instruction. `None` when this thread is
    /// not the slot's owner, is inside another call through its bias, or finds the slot
    /// taken or changed.
    #[inline]
    fn enter_biased(slot: &Slot<T>, idle: u64) -> Option<Taken<'_, T>> {
        let flag = bias::flag()?;
        if !ptr::eq(slot.owner.load(Ordering::Relaxed), flag) || flag.load(Ordering::Relaxed) != 0 {
            return None;
        }
        flag.store(slot.mark(), Ordering::Relaxed);
        // Keeps the compiler from moving the loads above the mark; the hardware side of the
        // fence is the other thread's membarrier (crate::bias).
        compiler_fence(Ordering::SeqCst);
        if slot.state.load(Ordering::Acquire) == idle
            && ptr::eq(slot.owner.load(Ordering::Relaxed), flag)
        {
            return Some(Taken {
                slot,
                idle,
                flag: Some(flag),
            });
        }
        flag.store(0, Ordering::Release);
        None
    }

    /// The locked way in: compare-and-swap of the BUSY bit.
    fn take_locked<'a>(
        &self,
        handle: u64,
        slot: &'a Slot<T>,
        idle: u64,
    ) -> Result<Taken<'a, T>, Failure> {
        match slot
            .state
            .compare_exchange(idle, idle | BUSY, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(Taken {
                slot,
                idle,
                flag: None,
            }),
            Err(now) if now == idle | BUSY => Err(self.busy(handle)),
            Err(_) => Err(self.bad(handle)),
        }
    }

    /// With the BUSY bit held: makes sure the owner is not inside through its bias, and
    /// moves the bias to this thread so that its next call takes the plain way in.
    fn claim_bias<'a>(&self, handle: u64, taken: Taken<'a, T>) -> Result<Taken<'a, T>, Failure> {
        let slot = taken.slot;
        let mine = bias::flag().map_or(ptr::null_mut(), |f| ptr::from_ref(f).cast_mut());
        let owner = slot.owner.load(Ordering::Relaxed);
        if owner.is_null() || owner == mine {
            // Nobody else can be inside through a bias. This thread may be (a handler
            // calling its own endpoint): its flag says so.
            // SAFETY: a non-null owner is a flag leaked by `bias` (never freed).
            if !owner.is_null() && unsafe { &*owner }.load(Ordering::Relaxed) == slot.mark() {
                return Err(self.busy(handle));
            }
            slot.owner.store(mine, Ordering::Relaxed);
            return Ok(taken);
        }
        slot.owner.store(mine, Ordering::Relaxed);
        // SAFETY: `owner` is a flag leaked by `bias` (never freed).
        let owner_flag = unsafe { &*owner };
        if !bias::barrier_all_threads() || owner_flag.load(Ordering::Acquire) == slot.mark() {
            // The owner is inside (or could be): it keeps its bias.
            slot.owner.store(owner, Ordering::Relaxed);
            return Err(self.busy(handle));
        }
        Ok(taken)
    }

    fn busy(&self, handle: u64) -> Failure {
        failure(
            quiver_status::QUIVER_ERR_BUSY,
            format!(
                "{} handle {handle:#x} is in use by another thread right now: an {} is driven \
                 by one thread at a time (give each thread its own)",
                self.kind, self.kind
            ),
        )
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
        if taken.flag.is_some() {
            // Entered through the bias: take the BUSY bit too, to change the generation.
            let idle = taken.idle;
            let slot = taken.slot;
            drop(taken);
            taken = self.take_locked(handle, slot, idle)?;
        }
        // This thread owns the bias now (or none does): the slot's next occupant starts
        // unbiased.
        taken.slot.owner.store(ptr::null_mut(), Ordering::Relaxed);
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
    fn the_last_thread_enters_a_biased_slot_without_the_busy_bit() {
        let table: Table<u32, 1> = Table::biased("thing");
        let h = table.insert(1).unwrap();
        assert!(
            table.take(h).unwrap().flag.is_none(),
            "the first call is locked"
        );
        let mut held = table.take(h).unwrap();
        if bias::flag().is_none() {
            return; // membarrier refused here: every call stays locked
        }
        assert!(
            held.flag.is_some(),
            "the second call enters through the bias"
        );
        // Inside, the same thread (a handler calling its own endpoint) is refused.
        assert_eq!(code(table.take(h)), quiver_status::QUIVER_ERR_BUSY);
        assert_eq!(code(table.remove(h)), quiver_status::QUIVER_ERR_BUSY);
        // So is another thread, which leaves the bias where it was.
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(code(table.take(h)), quiver_status::QUIVER_ERR_BUSY));
        });
        *held.value() = 2;
        drop(held);
        assert!(table.take(h).unwrap().flag.is_some());
        // Another thread takes it once the owner is out, and the bias moves with it.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(table.take(h).unwrap().flag.is_none());
                let mut again = table.take(h).unwrap();
                assert!(again.flag.is_some());
                *again.value() = 3;
            });
        });
        let mut back = table.take(h).unwrap();
        assert!(back.flag.is_none(), "moving the bias back is locked");
        assert_eq!(*back.value(), 3);
        drop(back);
        assert_eq!(table.remove(h).unwrap(), 3);
        assert_eq!(code(table.take(h)), quiver_status::QUIVER_ERR_BAD_HANDLE);
    }

    #[test]
    fn threads_racing_for_a_biased_slot_never_share_it() {
        use std::sync::atomic::AtomicBool;
        let table: Table<u32, 1> = Table::biased("thing");
        let h = table.insert(0).unwrap();
        let inside = AtomicBool::new(false);
        let entered: Vec<u32> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut entered = 0;
                        for i in 0..20_000u32 {
                            let Ok(mut taken) = table.take(h) else {
                                continue;
                            };
                            assert!(!inside.swap(true, Ordering::SeqCst), "two threads inside");
                            *taken.value() += 1;
                            for _ in 0..200 {
                                std::hint::spin_loop(); // a call's length, for others to race
                            }
                            inside.store(false, Ordering::SeqCst);
                            drop(taken);
                            entered += 1;
                            if i % 16 == 0 {
                                std::thread::yield_now(); // outside: let the others in
                            }
                        }
                        entered
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let total = *table.take(h).unwrap().value();
        assert_eq!(total, entered.iter().sum::<u32>(), "no update lost");
        assert!(
            entered.iter().all(|&n| n > 0),
            "every thread got in: {entered:?}"
        );
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
