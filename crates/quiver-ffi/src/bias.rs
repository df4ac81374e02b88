//! Biased ownership of handle slots: the thread that used an endpoint last enters its next
//! call without a locked instruction.
//!
//! Taking a slot with compare-and-swap costs little by itself, but on x86 a locked
//! instruction is a full fence: it waits until the thread's earlier stores leave the store
//! buffer. In a ping-pong the store just before a call is the ring's index, a cache line
//! the peer core holds, so the fence waits for that line's transfer: several nanoseconds per
//! call, a visible share of an 8-byte round trip (decision 0086).
//!
//! So a slot may be *biased* to one thread (its owner, named by the thread's [`flag`]).
//! The owner enters with plain stores: it writes the slot's address into its own flag, then
//! checks that the slot is still idle and still biased to it (a compiler fence between,
//! no hardware fence). Any other thread takes the slot by compare-and-swap as before, moves
//! the bias to itself, then runs `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which makes
//! every running thread of the process pass a full barrier, and only then reads the old
//! owner's flag: either the owner's store is visible (it is inside: `QUIVER_ERR_BUSY`, the
//! bias goes back), or the owner's own check comes after the barrier and sees the bias
//! gone (it backs out and takes the locked path). This is the asymmetric form of Dekker's
//! algorithm, the cheap side being the common one. An endpoint that moves between threads
//! pays one system call per move; one that stays on its thread pays no locked instruction.
//!
//! Each thread writes only its own flag, so a thread backing out never erases another's
//! mark. Flags outlive their threads (a thread's flag goes to a free list when it ends and
//! is reused by a later thread), so a slot's owner pointer never dangles; a new thread
//! that inherits a flag inherits its biases, which is sound since the old thread is gone.
//! A thread already inside a call through its flag (an active-message handler calling
//! another endpoint) takes the locked path for the nested call.
//!
//! Where `membarrier` is refused (kernels before 4.14, seccomp), no slot is ever biased
//! and every call takes the locked path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Flags of threads that ended, for later threads.
static FREE_FLAGS: Mutex<Vec<&'static AtomicUsize>> = Mutex::new(Vec::new());

/// Whether this process registered for expedited membarriers.
static AVAILABLE: OnceLock<bool> = OnceLock::new();

/// A thread's flag: the address of the slot it is inside through its bias, or 0.
struct Flag(&'static AtomicUsize);

impl Flag {
    fn new() -> Self {
        let reused = FREE_FLAGS.lock().ok().and_then(|mut free| free.pop());
        Flag(reused.unwrap_or_else(|| Box::leak(Box::new(AtomicUsize::new(0)))))
    }
}

impl Drop for Flag {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
        if let Ok(mut free) = FREE_FLAGS.lock() {
            free.push(self.0);
        }
    }
}

thread_local! {
    static FLAG: Flag = Flag::new();
}

/// This thread's flag, or `None` where biasing is off (no membarrier, or the thread is
/// ending and its thread-locals are gone).
#[inline]
pub(crate) fn flag() -> Option<&'static AtomicUsize> {
    if !*AVAILABLE.get_or_init(register) {
        return None;
    }
    FLAG.try_with(|flag| flag.0).ok()
}

fn register() -> bool {
    quiver_transport::sys::membarrier_register_private_expedited().is_ok()
}

/// The heavy side of the fence: every running thread of the process passes a full memory
/// barrier before this returns `true`. Only called once [`flag`] returned `Some`
/// (registered), after which the kernel does not refuse it; `false` if it did anyway (the
/// caller then cannot tell whether the owner is inside, and reports the slot busy).
#[must_use]
pub(crate) fn barrier_all_threads() -> bool {
    use quiver_transport::sys::{
        membarrier_private_expedited, membarrier_register_private_expedited,
    };
    // A child of fork(2) may start unregistered: register again once, then retry.
    membarrier_private_expedited().is_ok()
        || (membarrier_register_private_expedited().is_ok()
            && membarrier_private_expedited().is_ok())
}
